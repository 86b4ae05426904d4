"""Which isolation mechanisms work on this host: :func:`sandbox_capabilities`.

OS-dependent mechanisms (probed once per interpreter and cached, see :func:`sandbox_capabilities`)
--------------------------------------------------------------------------------------------------
* Privilege drop: on a root host, if the interpreter runs as an unprivileged uid, each run gets
  its own uid (so RLIMIT_NPROC is real and per run, and root's files are out of reach). Linux
  exempts uid 0 from RLIMIT_NPROC; when we stay root, a v1 ``pids`` cgroup per run enforces
  ``max_processes`` instead if one is writable, else the process budget is *not* enforced and
  :func:`sandbox_capabilities` says so (``process_limit == "none"``). Off root, RLIMIT_NPROC
  counts *all* processes of the user, not only the sandbox's.
* Namespaces through util-linux ``unshare`` when it works here: a user namespace (no host
  capabilities), a network namespace, a pid namespace that dies with the program
  (``--kill-child``; the program is its pid 1, so signals it sends itself without a handler are
  ignored) and a private ``/proc`` (host processes and their environments are invisible). The
  first working variant wins (the probe runs a program that must fail to connect to
  127.0.0.1); if none works the code runs without them, see "Network" below.

Network
-------
What cuts the network is the *network namespace* (``unshare --net``): the program's namespace
holds only a loopback interface that is down, so every ``connect`` fails with ENETUNREACH (the
host's own loopback services are unreachable too) and DNS cannot resolve. Nothing else (no
seccomp filter, no firewall rule) blocks sockets. Where no ``unshare`` variant works (no
binary, or user namespaces disabled, as in many containers without ``CAP_SYS_ADMIN``) programs
run *with* the host's network: every result then says ``network_isolated=False`` and
:attr:`SandboxCapabilities.notes` says "network NOT isolated" and why; callers that need
isolation must check one of them. A root host can isolate without user namespaces (the plain
``unshare --net`` variants); an unprivileged host needs unprivileged user namespaces
(``kernel.unprivileged_userns_clone=1`` / ``user.max_user_namespaces > 0``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
import threading

from .cgroups import _pids_cgroup_root
from .filesystem import _FS_PROBE_CODE
from .results import SandboxLimits

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"

#: Environment variable naming an interpreter to run sandboxed code with, e.g. a system Python
#: that an unprivileged uid can execute (enables the privilege drop on root hosts).
PYTHON_ENV_VAR = "PETTINGLLMS_SANDBOX_PYTHON"


@dataclasses.dataclass(frozen=True)
class SandboxCapabilities:
    """What isolation this host allows, as probed (see the module docstring).

    ``launcher`` is the command prefix (an ``unshare`` invocation or empty); ``run_as_uid`` is
    ``None`` when runs keep the host uid; ``process_limit`` is ``"rlimit"``, ``"cgroup"`` or
    ``"none"``; ``filesystem_readonly`` is True when runs see the host's file system read-only
    (all but their own folders, see "File system" in
    :mod:`~pettingllms_envs.sandbox.filesystem`); ``notes`` explains every fallback taken.
    """

    python: str
    launcher: tuple[str, ...]
    network_isolated: bool
    pid_namespace: bool
    run_as_uid: int | None
    process_limit: str
    cgroup_root: str | None
    notes: tuple[str, ...]
    filesystem_readonly: bool = False


_CAPS_LOCK = threading.Lock()
_CAPS_CACHE: dict[str, SandboxCapabilities] = {}


def sandbox_capabilities(python: str | None = None) -> SandboxCapabilities:
    """Probe (once per interpreter, then cached) which isolation mechanisms work here."""
    exe = python or os.environ.get(PYTHON_ENV_VAR) or sys.executable
    with _CAPS_LOCK:
        if exe not in _CAPS_CACHE:
            _CAPS_CACHE[exe] = _probe(exe)
            logger.info("sandbox capabilities: %s", _CAPS_CACHE[exe])
        return _CAPS_CACHE[exe]


_PROBE_CODE = """
import errno, os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(2)
try:
    s.connect(("127.0.0.1", 9))
    net = "open"
except OSError as e:
    net = "isolated" if e.errno in (errno.ENETUNREACH, errno.EADDRNOTAVAIL) else "open"
print(net, os.getpid())
"""


def _probe(python: str) -> SandboxCapabilities:
    from .runner import _next_uid, _run  # runner needs sandbox_capabilities

    notes: list[str] = []
    limits = SandboxLimits(wall_time_s=20, cpu_time_s=10)
    plain = SandboxCapabilities(python, (), False, False, None, "none", None, ())

    def attempt(launcher: tuple[str, ...], uid: int | None) -> tuple[bool, bool, bool]:
        caps = dataclasses.replace(plain, launcher=launcher)
        result = _run(_PROBE_CODE, "", limits, caps, uid=uid, probing=True)
        words = result.stdout.split()
        if not result.ok or len(words) != 2:
            return False, False, False
        return True, words[0] == "isolated", words[1] == "1"

    uid = None
    if os.geteuid() == 0:
        candidate = _next_uid()
        if attempt((), candidate)[0]:
            uid = candidate
        else:
            notes.append(f"cannot drop root: {python} does not run as an unprivileged uid "
                         f"(set ${PYTHON_ENV_VAR} to an interpreter others can execute)")
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    user_ns = ("--user", "--map-root-user")
    full = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc")
    variants: list[tuple[str, ...]] = [user_ns + full, user_ns + ("--mount", "--net")]
    if os.geteuid() == 0 and uid is None:
        variants += [full, ("--mount", "--net")]
    launcher: tuple[str, ...] = ()
    network = pid_ns = False
    if unshare is None:
        notes.append("no `unshare` binary: no namespaces, network not isolated")
    for flags in variants if unshare else []:
        ran, isolated, is_init = attempt((unshare, *flags, "--"), uid)
        if ran and isolated:
            launcher, network, pid_ns = (unshare, *flags, "--"), True, is_init
            break
        notes.append(f"`unshare {' '.join(flags)}` unusable here")
    if not network:
        notes.append("network NOT isolated: programs can reach the host's network")
    readonly, why = False, "no mount namespace (no working `unshare --mount` variant)"
    if {"--mount", "--mount-proc"} & set(launcher):
        caps = dataclasses.replace(plain, launcher=launcher, filesystem_readonly=True)
        result = _run(_PROBE_CODE + _FS_PROBE_CODE, "", limits, caps, uid=uid, probing=True)
        words = result.stdout.split()
        readonly = result.ok and len(words) == 4 and words[0] == "isolated" and \
            (words[1] == "1") == pid_ns and words[2:] == ["read-only", "0"]
        why = (f"the read-only setup does not work here "
               f"({(result.stderr.strip() or result.stdout.strip())[-300:] or 'no output'})")
    if not readonly:
        notes.append(f"file system NOT read-only: {why}; programs can write wherever their "
                     f"uid may, outside their scratch folder too")
    cgroup_root = None
    if uid is not None:
        process_limit = "rlimit"
    elif os.geteuid() != 0:
        process_limit = "rlimit"
        notes.append("RLIMIT_NPROC counts every process of this user, not only the sandbox's")
    else:
        cgroup_root = _pids_cgroup_root()
        process_limit = "cgroup" if cgroup_root else "none"
        notes.append("running as root: RLIMIT_NPROC does not apply to uid 0; "
                     + ("a pids cgroup enforces max_processes" if cgroup_root else
                        "no writable pids cgroup either, so max_processes is NOT enforced"))
    return SandboxCapabilities(python, launcher, network, pid_ns, uid, process_limit,
                               cgroup_root, tuple(notes), readonly)
