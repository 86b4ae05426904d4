"""Per-run cgroup-v1 folders: ``pids`` (the process budget where runs stay root) and
``memory`` (one bound on everything a run holds in memory, memfd, shared memory and tmpfs
files included, which RLIMIT_AS cannot see).

Linux exempts uid 0 from RLIMIT_NPROC; when we stay root, a v1 ``pids`` cgroup per run
enforces ``max_processes`` instead if one is writable, else the process budget is *not*
enforced and :func:`sandbox_capabilities` says so (``process_limit == "none"``). After every
run the cgroup is emptied (SIGKILL) and removed.

Used by the launchers' probes (:func:`pids_cgroup_root`, :func:`memory_cgroup_root`) and their
runs (``open_*``, ``*_hit``, :func:`remove_cgroup`).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time

from .capabilities import SandboxCapabilities
from .process import next_run_number

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"


def open_pids_cgroup(caps: SandboxCapabilities, max_pids: int) -> str | None:
    """A fresh ``pids`` cgroup holding at most ``max_pids`` for one run where the capabilities
    enforce the process budget that way (``process_limit == "cgroup"``), else None."""
    return _open_run_cgroup(caps.process_limit == "cgroup" and caps.cgroup_root,
                            lambda: _make_cgroup(caps.cgroup_root, max_pids),
                            "pids", "process count unlimited")


def _open_run_cgroup(enabled, make, kind: str, consequence: str) -> str | None:
    """A fresh cgroup of ``kind`` for one run, or None (logged) when there is none."""
    if not enabled:
        return None
    try:
        return make()
    except OSError as exc:
        logger.warning("sandbox: no %s cgroup for this run (%r); %s", kind, exc, consequence)
        return None


def pids_max_hit(path: str) -> bool | None:
    """Whether a fork in the cgroup failed at ``pids.max`` (None: no counter to read)."""
    try:
        with open(os.path.join(path, "pids.events"), encoding="ascii") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "max":
                    return int(parts[1]) > 0
    except (OSError, ValueError):
        pass
    return None


def pids_cgroup_root() -> str | None:
    """Our own folder in a writable cgroup-v1 ``pids`` hierarchy, or None."""
    return _cgroup_root("pids", lambda root: _make_cgroup(root, 4))


def memory_cgroup_root() -> str | None:
    """Our own folder in a writable cgroup-v1 ``memory`` hierarchy, or None."""
    return _cgroup_root("memory", lambda root: _make_memory_cgroup(root, 64 << 20))


def _make_memory_cgroup(root: str, limit_bytes: int) -> str:
    """A fresh memory cgroup holding at most ``limit_bytes`` (with swap, where accounted)."""
    settings = {"memory.limit_in_bytes": limit_bytes}
    if os.path.exists(os.path.join(root, "memory.memsw.limit_in_bytes")):
        settings["memory.memsw.limit_in_bytes"] = limit_bytes
    return _make_run_cgroup(root, "mem-", settings)


def open_memory_cgroup(caps: SandboxCapabilities, limit_bytes: int) -> str | None:
    """A fresh ``memory`` cgroup bounding one run to ``limit_bytes`` where the capabilities
    have one (``memory_limit == "cgroup"``), else None."""
    return _open_run_cgroup(caps.memory_limit == "cgroup" and caps.memory_cgroup_root,
                            lambda: _make_memory_cgroup(caps.memory_cgroup_root, limit_bytes),
                            "memory", "memfd/shm unbounded")


def memory_limit_hit(path: str) -> bool:
    """Whether the run's memory cgroup reached its limit (an OOM kill or a failed charge)."""
    try:
        with open(os.path.join(path, "memory.oom_control"), encoding="ascii") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "oom_kill" and int(parts[1]) > 0:
                    return True
        with open(os.path.join(path, "memory.failcnt"), encoding="ascii") as handle:
            return int(handle.read().strip() or 0) > 0
    except (OSError, ValueError):
        return False


def _cgroup_root(controller: str, make) -> str | None:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            mounts = [line.split() for line in handle]
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            membership = [line.strip().split(":", 2) for line in handle]
    except OSError:
        return None
    mount = next((m[1] for m in mounts if len(m) > 3 and m[2] == "cgroup"
                  and controller in m[3].split(",")), None)
    own = next((m[2] for m in membership if len(m) == 3 and controller in m[1].split(",")),
               None)
    if mount is None or own is None:
        return None
    root = os.path.join(mount, own.lstrip("/"))
    try:
        probe = make(root)
    except OSError:
        return None
    remove_cgroup(probe)
    return root


def _make_cgroup(root: str, max_pids: int) -> str:
    return _make_run_cgroup(root, "", {"pids.max": max_pids})


def _make_run_cgroup(root: str, tag: str, settings: dict[str, int]) -> str:
    """Create ``root/pettingllms-sbx-<tag><pid>-<n>`` and write its ``settings`` files."""
    path = os.path.join(root, f"pettingllms-sbx-{tag}{os.getpid()}-{next_run_number()}")
    os.mkdir(path)
    try:
        for name, value in settings.items():
            with open(os.path.join(path, name), "w", encoding="ascii") as handle:
                handle.write(str(value))
    except OSError:
        os.rmdir(path)
        raise
    return path


def remove_cgroup(path: str) -> None:
    """Kill whatever is left in a run's cgroup and remove it (bounded retries, never raises)."""
    for _ in range(200):
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as handle:
                pids = [int(p) for p in handle.read().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                break
        time.sleep(0.005)
    logger.warning("sandbox cgroup %s could not be removed", path)
