"""Dataset loading shared by the code and math tasks: local files or hub names, malformed rows
skipped and counted, unreadable sources as one clear error."""

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pettingllms_envs.data import (
    DatasetUnavailableError,
    convert_rows,
    looks_like_local_path,
    read_rows,
)


def _question(row: dict) -> str:
    if not isinstance(row.get("q"), str):
        raise KeyError("q")
    return row["q"]


def test_paths_and_hub_names_are_told_apart():
    for path in ("/data/x.jsonl", "./x", "~/x.parquet", "x.json", "rel/dir/file.jsonl"):
        assert looks_like_local_path(path)
    for name in ("openai/gsm8k", "POLARIS-Project/Polaris-Dataset-53K"):
        assert not looks_like_local_path(name)


def test_jsonl_lines_that_are_not_objects_are_counted_as_malformed(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"q": "a"}\nnot json\n[1, 2]\n\n{"q": 3}\n{"q": "b"}\n')
    rows = read_rows(str(path))
    with caplog.at_level(logging.WARNING):
        kept, report = convert_rows(rows, _question, source=str(path))
    assert kept == ["a", "b"]
    assert (report.total, report.kept, report.skipped) == (5, 2, 3)
    assert "line 2 is not JSON" in report.reasons[0] and "skipped 3 of 5" in caplog.text


def test_json_and_parquet_files_are_read(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([{"q": "a"}]))
    (tmp_path / "wrapped.json").write_text(json.dumps({"data": [{"q": "b"}]}))
    pq.write_table(pa.Table.from_pylist([{"q": "c"}, {"q": "d"}]), tmp_path / "rows.parquet")
    assert read_rows(str(tmp_path / "list.json")) == [{"q": "a"}]
    assert read_rows(str(tmp_path / "wrapped.json")) == [{"q": "b"}]
    assert [r["q"] for r in read_rows(str(tmp_path / "rows.parquet"))] == ["c", "d"]
    (tmp_path / "scalar.json").write_text("3")
    with pytest.raises(DatasetUnavailableError, match="list of objects"):
        read_rows(str(tmp_path / "scalar.json"))


def test_unreadable_sources_and_empty_sets_are_one_clear_error(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        read_rows(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DatasetUnavailableError, match="could not load hub dataset"):
        read_rows("no-such-org-pettingllms/no-such-dataset")  # tests run with HF_HUB_OFFLINE=1
    with pytest.raises(DatasetUnavailableError, match="path or a hub name"):
        read_rows("  ")
    with pytest.raises(DatasetUnavailableError, match="no usable rows"):
        convert_rows([{"x": 1}], _question, source="bad")


def test_limit_stops_after_enough_usable_rows():
    rows = [{"q": str(i)} for i in range(10)]
    kept, report = convert_rows(rows, _question, source="mem", limit=3)
    assert kept == ["0", "1", "2"] and report.total == 3
