"""The notebooks in ``notebooks/`` are committed without outputs and run end to end.

The static checks (no outputs, no execution counts, the ``python3`` kernel, the cell ids the
execution tests look up) need neither Ray nor a kernel, so they run in the fast tier. The
execution tests run each notebook top to bottom in a fresh kernel with nbclient, in a
temporary working directory, and look for known text in the outputs of selected cells. They
start Ray inside the kernel, so they belong to the integration tier.

Which Python runs the kernel: nbclient asks jupyter_client for the kernel spec named
``python3``, and a ``python3`` spec installed in the user's or the system's Jupyter folders
takes precedence over the one of this venv, possibly pointing at another interpreter. Instead
of installing a spec (which writes into the venv, or HOME) the tests hand nbclient a kernel
manager whose spec manager always answers with ipykernel's own spec for ``sys.executable``:
the kernel runs in the interpreter that runs pytest, whatever else is installed.
"""

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel  # noqa: E402
from jupyter_client.manager import AsyncKernelManager  # noqa: E402

NOTEBOOK_DIR = Path(__file__).parents[2] / "notebooks"
KERNEL_NAME = "python3"
CELL_TIMEOUT_S = 600
#: What tests/conftest.py sets for the test process; the kernel inherits os.environ.
KERNEL_ENV = {"OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
              "TRANSFORMERS_OFFLINE": "1"}

#: notebook -> cell id -> strings that cell's outputs must contain.
EXPECTED_OUTPUTS = {
    "quickstart.ipynb": {
        "configure": ["agent -> module: {'tool': 'tool', 'planner': 'planner'}"],
        "train": ["iteration 1: success rate", "iteration 2: success rate",
                  "zero-variance groups"],
        "evaluate": ["evaluation seeds: [", "| label | task | decoding | search (K) |",
                     "| base model | plan_path_v1 | greedy |",
                     "| AT-GRPO checkpoint | plan_path_v1 | greedy |"],
        "tune": ["1 trial, 0 errors, 2 iterations"],
        "plot": ["image/png"],
    },
    "custom_env.ipynb": {
        "check": ["check_text_env: all conformance checks passed",
                  "describer leaks the word -> -0.5",
                  "guesser is right -> 1.0 | success: True | episode over: True",
                  "unparsable clue -> -1.0 | expected 'Clue: <clue>'"],
        "register": ["WordRelayEnv | agents: ['describer', 'guesser'] | max_turns: 3"],
        "train": ["iteration 1: success rate",
                  "modules updated: ['describer', 'guesser']"],
    },
}
NOTEBOOKS = sorted(EXPECTED_OUTPUTS)


class ThisInterpreterKernelSpecs(KernelSpecManager):
    """Resolves ``python3`` to ipykernel running in ``sys.executable`` (see the module doc)."""

    def get_kernel_spec(self, kernel_name):
        if kernel_name != KERNEL_NAME:
            raise NoSuchKernel(kernel_name)
        from ipykernel.kernelspec import RESOURCES, get_kernel_dict

        return KernelSpec(resource_dir=RESOURCES, **get_kernel_dict())


def read_notebook(name):
    return nbformat.read(NOTEBOOK_DIR / name, as_version=4)


def outputs_text(cell) -> str:
    """Everything a code cell showed: streams, text representations and the MIME types."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        for mime, value in output.get("data", {}).items():
            parts.append(mime)
            if mime.startswith("text/"):
                parts.append(value if isinstance(value, str) else "".join(value))
    return "\n".join(parts)


def test_the_notebook_folder_holds_exactly_the_tested_notebooks():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb")) == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_has_no_outputs_and_the_python3_kernel(name):
    nb = read_notebook(name)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == KERNEL_NAME
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code_cells
    with_outputs = [cell.id for cell in code_cells if cell.outputs]
    with_counts = [cell.id for cell in code_cells if cell.execution_count is not None]
    assert not with_outputs, f"{name}: strip the outputs of cells {with_outputs}"
    assert not with_counts, f"{name}: strip the execution counts of cells {with_counts}"
    ids = [cell.id for cell in nb.cells]
    assert len(ids) == len(set(ids)), f"{name}: duplicate cell ids"
    checked = set(EXPECTED_OUTPUTS[name])
    assert checked <= {cell.id for cell in code_cells}, (
        f"{name}: the execution test checks cells {sorted(checked)} but the code cells are "
        f"{[cell.id for cell in code_cells]}")


def test_the_kernel_runs_in_the_interpreter_running_the_tests():
    spec = ThisInterpreterKernelSpecs().get_kernel_spec(KERNEL_NAME)
    assert spec.argv[0] == sys.executable
    assert spec.argv[1:3] == ["-m", "ipykernel_launcher"]


@pytest.mark.integration
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes_and_shows_the_expected_outputs(name, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    for key, default in KERNEL_ENV.items():
        monkeypatch.setenv(key, os.environ.get(key, default))
    nb = read_notebook(name)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    kernel_manager = AsyncKernelManager(kernel_name=KERNEL_NAME,
                                        kernel_spec_manager=ThisInterpreterKernelSpecs())
    client = nbclient.NotebookClient(nb, km=kernel_manager, kernel_name=KERNEL_NAME,
                                     timeout=CELL_TIMEOUT_S, startup_timeout=120,
                                     resources={"metadata": {"path": str(workdir)}})
    try:
        client.execute()
    finally:  # the executed copy helps when a check below fails
        nbformat.write(nb, tmp_path / name)
    cells = {cell.id: cell for cell in nb.cells}
    for cell_id, expected in EXPECTED_OUTPUTS[name].items():
        shown = outputs_text(cells[cell_id])
        missing = [text for text in expected if text not in shown]
        assert not missing, f"{name}, cell {cell_id!r}: {missing} not in its output:\n{shown}"
    errors = [cell.id for cell in nb.cells if cell.cell_type == "code"
              and any(o.get("output_type") == "error" for o in cell.outputs)]
    assert not errors
    assert list(workdir.iterdir()) == [], "the notebook left files in its working directory"
