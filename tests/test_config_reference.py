"""docs/config.md is generated from the code and says the same as the code.

* the page equals :func:`render_config_reference` (regenerate it when a knob changes);
* every declared field (``config_fields.FIELDS``) and every key a shipped experiment file sets
  has a row in its section's table;
* every parameter of the setters this library defines has an entry in the setter's ``Args:``
  (and no entry names a parameter that is gone), and every row of the page has a text.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import yaml

from pettingllms_rllib.config_reference import (REGENERATE, UNDOCUMENTED, docstring_args,
                                                render_config_reference, setter_parameters)

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "config.md"
#: ``section.key`` of the parameters of this library's own setters that their ``Args:`` do not
#: document, and of page rows without a text. Empty today; a key that appears here must be
#: documented in its setter instead (the test fails both when a new gap appears and when a
#: listed one gets documented, so the set stays exact).
KNOWN_UNDOCUMENTED: set[str] = set()


@pytest.fixture(scope="module")
def rendered() -> str:
    return render_config_reference()


def _tables(page: str) -> dict[str, set[str]]:
    """Heading (``llm``, ``llm.lora``, ...) -> the keys of its table's rows."""
    tables: dict[str, set[str]] = {}
    heading = None
    for line in page.splitlines():
        match = re.match(r"^#{2,3} `([\w.]+)`$", line)
        if match:
            heading = match.group(1)
            tables[heading] = set()
            continue
        row = re.match(r"^\| `(\w+)` \|", line)
        if row and heading is not None:
            tables[heading].add(row.group(1))
    return tables


def _own_setters() -> dict[str, object]:
    from pettingllms_rllib.algorithms.config import ATGRPOConfig
    from pettingllms_rllib.experiment import SECTIONS

    return {section: getattr(ATGRPOConfig, section) for section in SECTIONS
            if section in vars(ATGRPOConfig)}


def test_the_page_is_the_generated_one(rendered):
    assert PAGE.is_file(), f"docs/config.md is missing; write it with: {REGENERATE}"
    assert PAGE.read_text() == rendered, (
        f"docs/config.md is out of date with the code; regenerate it with: {REGENERATE}")


def test_every_declared_field_has_a_row(rendered):
    from pettingllms_rllib.algorithms.config_fields import (FIELDS, LORA_FIELDS,
                                                            SANDBOX_LIMIT_FIELDS)

    tables = _tables(rendered)
    declared = {**FIELDS, "llm.lora": LORA_FIELDS,
                "environment.env_config.sandbox_limits": SANDBOX_LIMIT_FIELDS}
    missing = sorted(f"{section}.{key}" for section, fields in declared.items()
                     for key in fields if key not in tables.get(section, set()))
    assert not missing, f"declared fields without a row in docs/config.md: {missing}"


def test_every_setter_parameter_of_this_library_has_a_row(rendered):
    tables = _tables(rendered)
    missing = sorted(f"{section}.{key}" for section, method in _own_setters().items()
                     for key in setter_parameters(method) if key not in tables.get(section, set()))
    assert not missing, f"setter parameters without a row in docs/config.md: {missing}"


def test_every_key_a_shipped_experiment_sets_has_a_row(rendered):
    tables = _tables(rendered)
    missing = set()
    for path in sorted((ROOT / "tune_configs").rglob("*.yaml")):
        document = yaml.safe_load(path.read_text()) or {}
        for section, kwargs in (document.get("algorithm") or {}).items():
            missing |= {f"{section}.{key} ({path.name})" for key in (kwargs or {})
                        if key not in tables.get(section, set())}
        for dotted in document.get("grid") or {}:
            parts = dotted.split(".")
            if len(parts) == 2 and parts[1] not in tables.get(parts[0], set()):
                missing.add(f"{dotted} ({path.name}, grid)")
    assert not missing, (f"keys set by shipped experiments without a row in docs/config.md: "
                         f"{sorted(missing)}; add them to config_reference.EXTRA_RLLIB_KEYS "
                         f"(or declare a field) and run: {REGENERATE}")


def test_every_setter_parameter_is_documented_in_its_args(rendered):
    undocumented, stale = set(), set()
    for section, method in _own_setters().items():
        params = setter_parameters(method)
        entries = docstring_args(inspect.getdoc(method))
        undocumented |= {f"{section}.{key}" for key in params if key not in entries}
        stale |= {f"{section}.{name}" for name in entries
                  if not name.startswith("*") and name not in params}
    heading = None
    for line in rendered.splitlines():
        match = re.match(r"^#{2,3} `([\w.]+)`$", line)
        heading = match.group(1) if match else heading
        row = re.match(r"^\| `(\w+)` \|.*\| (.*) \|$", line)
        if row and row.group(2) == UNDOCUMENTED:
            undocumented.add(f"{heading}.{row.group(1)}")
    assert not stale, f"Args entries naming no parameter of their setter: {sorted(stale)}"
    assert undocumented == KNOWN_UNDOCUMENTED, (
        f"newly undocumented: {sorted(undocumented - KNOWN_UNDOCUMENTED)}; documented now "
        f"(drop them from KNOWN_UNDOCUMENTED): {sorted(KNOWN_UNDOCUMENTED - undocumented)}")


def test_docstring_args_reads_google_style_entries():
    doc = """Summary.

    Args:
        a: first line
            continued.
        b (int): typed.
        **kwargs: rest.

    Returns:
        nothing.
    """
    assert docstring_args(doc) == {"a": "first line continued.", "b": "typed.",
                                   "**kwargs": "rest."}
    assert docstring_args("No sections.") == {}
