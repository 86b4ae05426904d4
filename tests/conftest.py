"""Shared test set-up: keep every framework's files out of HOME and make `support/` importable."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "support"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """The files holding integration or slow tests first, the rest after them (each group in
    collection order). With ``make test``'s ``--dist loadfile --no-loadscope-reorder``,
    pytest-xdist hands files out in this order, so the long ones start first and the many
    short ones fill in at the end (longest processing time first). Its default order, by
    number of tests per file, did the opposite: the last files to start were 40-50 s
    integration files of one or two tests, one worker running them while the other sat idle
    (2026-12-07: 602 s of wall time for 1,119 s of tests on two workers)."""
    long_files = {item.path for item in items
                  if item.get_closest_marker("integration") or item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in long_files)


def pytest_sessionfinish(session, exitstatus):
    session.config.stash_exit_status = int(exitstatus)


def pytest_unconfigure(config):
    """End the test process with pytest's own exit status once pytest is done, without the
    interpreter's teardown: after every test had passed, that teardown (finalizers of Ray's,
    torch's and transformers' native objects) crashed with SIGSEGV in about 1 of 5 full runs,
    turning a green suite red (2026-12-01, the whole suite in one process). Not reproduced
    since: 56 runs of six in-process subsets with the teardown on (2026-12-07) exited 0, and so
    did 13 runs of the whole `make test` selection in one process (10 to the end, 3 stopped at
    a failure of their own; 2026-12-07, two nights). What outlives ``ray.shutdown()`` into that
    teardown is native: at the end of such a run about 50 threads (``/proc/self/task``): Ray's
    GCS-client, gRPC and event-engine threads (no API stops them), the notebook kernels'
    ZeroMQ threads, jemalloc's, and 27-28 unnamed ones, not identified (the earlier search
    named pyarrow's pool under Tune and tokenizers' workers among such threads).
    Ray's local cluster is shut down first, as its exit hook would."""
    status = getattr(config, "stash_exit_status", None)
    if status is None:
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
