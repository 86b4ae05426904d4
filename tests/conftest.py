"""Shared test set-up: keep every framework's files out of HOME and make `support/` importable."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "support"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_sessionfinish(session, exitstatus):
    session.config.stash_exit_status = int(exitstatus)


def pytest_unconfigure(config):
    """End the test process with pytest's own exit status once pytest is done, without the
    interpreter's teardown: after every test had passed, that teardown (finalizers of Ray's,
    torch's and transformers' native objects) crashed with SIGSEGV in about 1 of 5 full runs,
    turning a green suite red. Ray's local cluster is shut down first, as its exit hook would."""
    status = getattr(config, "stash_exit_status", None)
    if status is None:
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
