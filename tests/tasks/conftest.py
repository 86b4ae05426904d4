"""Fixtures shared by the task and sandbox tests."""

import tempfile
from pathlib import Path

import pytest

from pettingllms_envs.sandbox.cleanup import remove_tree


@pytest.fixture
def own_tempdir(monkeypatch):
    """An empty folder made the process's temporary-file folder for one test. Not pytest's
    ``tmp_path``: that lies under a 0700 folder of ours, which a run dropped to its own uid
    cannot traverse (the probe, made where the drop works, would not have chosen it)."""
    folder = Path(tempfile.mkdtemp(prefix="pettingllms-test-"))
    folder.chmod(0o711)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    remove_tree(str(folder))
