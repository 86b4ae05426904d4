"""Which isolation mechanisms work on this host: :func:`sandbox_capabilities`.

The bubblewrap launcher (:mod:`~pettingllms_envs.sandbox.bwrap`) is tried first: its probe run
must show a network and IPC namespace other than the host's, a uid other than 0 on a root
host, a read-only ``/usr``, no descriptor beyond 0-2, a refused ``ptrace`` and no installed
package on its ``sys.path`` (the site-packages folders empty). Where ``bwrap``
is installed but fails it, nothing falls back silently: :func:`sandbox_capabilities` raises
:class:`~pettingllms_envs.sandbox.SandboxUnavailableError` with the probe's reason and the fix.
The unshare launcher below is probed only where ``bwrap`` is not installed (launcher ``auto``)
or where it is chosen explicitly (``SandboxLimits.launcher``, a task's ``sandbox: {launcher:
unshare}``, or ``$PETTINGLLMS_SANDBOX_LAUNCHER=unshare``); the notes say why bubblewrap was not
used.

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
import subprocess
import sys
import tempfile
import threading

from .bwrap import PYTHON_MOUNT, InterpreterLayout
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

    ``launcher_name`` is ``"bubblewrap"``, ``"unshare"`` or ``"none"`` and :attr:`guarantees`
    says in words what runs get (the table per launcher is in ``docs/sandbox.md``).
    ``launcher`` is the unshare command prefix (empty otherwise); ``run_as_uid`` is ``None``
    when runs keep the host uid; ``process_limit`` is ``"rlimit"``, ``"cgroup"`` or ``"none"``;
    ``filesystem_readonly`` is True when runs cannot write the host's files (all but their own
    folders, see :mod:`~pettingllms_envs.sandbox.filesystem`); ``private_root`` when they do
    not see them at all (bubblewrap); ``ipc_isolated`` and ``ptrace_blocked`` for the IPC
    namespace and the seccomp filter; ``memory_limit`` is ``"cgroup"`` (one bound on all of a
    run's memory, memfd and shm included, in ``memory_cgroup_root``) or ``"rlimit"``
    (RLIMIT_AS per process only); ``layout`` holds the interpreter's folders bubblewrap binds;
    ``notes`` explains every fallback taken.
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
    launcher_name: str = "none"
    private_root: bool = False
    ipc_isolated: bool = False
    ptrace_blocked: bool = False
    memory_limit: str = "rlimit"
    memory_cgroup_root: str | None = None
    layout: InterpreterLayout | None = None

    @property
    def guarantees(self) -> tuple[str, ...]:
        """What a run on this host is guaranteed, in words (docs/sandbox.md has the table)."""
        said = [f"launcher: {self.launcher_name}"]
        if self.network_isolated:
            said.append("no network (own network namespace), host loopback included")
        if self.private_root:
            said.append("minimal root: only /usr and the interpreter's standard library, "
                        "read-only; no site-packages, no venv, no checkout (a task's "
                        "allowlisted packages only); private tmpfs /sandbox, /tmp, /dev/shm")
        elif self.filesystem_readonly:
            said.append("host file system visible read-only, but for the interpreter's "
                        "site-packages, the project's packages and the Hugging Face cache "
                        "(empty); imports: standard library only (python -S)")
        else:
            said.append("imports: standard library only (python -S), but the host's "
                        "site-packages, venv and checkout stay readable by path")
        if self.pid_namespace:
            said.append("own pid namespace: host processes invisible, nothing outlives the run")
        if self.ipc_isolated:
            said.append("own IPC namespace: System V objects die with the run")
        if self.ptrace_blocked:
            said.append("seccomp: no ptrace, no new namespaces, no mounts, no keyrings")
        if self.run_as_uid is not None or self.launcher_name == "bubblewrap":
            said.append("unprivileged uid, no capabilities")
        said.append("memory: " + ("one cgroup bound per run (memfd, shm and tmpfs included)"
                                  if self.memory_limit == "cgroup" else
                                  "RLIMIT_AS per process only (memfd and shm NOT bounded)"))
        said.append(f"process budget: {self.process_limit}")
        return tuple(said)


#: Environment variable choosing the launcher: "auto" (default: bubblewrap where it is
#: installed, else unshare), "bubblewrap", "unshare" or "none" (no isolation; needs
#: allow_unisolated). A task's ``sandbox: {launcher: ...}`` (``SandboxLimits.launcher``) wins.
LAUNCHER_ENV_VAR = "PETTINGLLMS_SANDBOX_LAUNCHER"
LAUNCHERS = ("auto", "bubblewrap", "unshare", "none")

_CAPS_LOCK = threading.Lock()
_CAPS_CACHE: dict[tuple[str, str], SandboxCapabilities | BaseException] = {}
_ANNOUNCED: set[tuple[str, str]] = set()


def check_launcher(name: object, where: str = "sandbox launcher") -> str:
    """``name`` if it is one of :data:`LAUNCHERS`, else a ValueError listing them."""
    if name not in LAUNCHERS:
        raise ValueError(f"{where} {name!r} does not exist; accepted: {', '.join(LAUNCHERS)}")
    return str(name)


def chosen_launcher(launcher: str | None = None) -> str:
    """The launcher asked for: ``launcher`` (a task's ``sandbox: {launcher: ...}``), else
    ``$PETTINGLLMS_SANDBOX_LAUNCHER``, else ``auto``; an unknown name raises ValueError."""
    if launcher is not None:
        return check_launcher(launcher)
    return check_launcher(os.environ.get(LAUNCHER_ENV_VAR, "auto") or "auto",
                          f"${LAUNCHER_ENV_VAR}:")


def sandbox_capabilities(python: str | None = None,
                         launcher: str | None = None) -> SandboxCapabilities:
    """Probe (once per interpreter and launcher choice, then cached) which isolation
    mechanisms work here, for the launcher :func:`chosen_launcher` names.

    Raises ``ValueError`` for an unknown launcher, and
    :class:`~pettingllms_envs.sandbox.SandboxUnavailableError` (every later call too, from the
    cache) where bubblewrap is installed but fails its probe and the weaker launcher was not
    chosen explicitly, or where ``bubblewrap`` was asked for and does not work: the message
    gives the probe's reason and the fix. The choice and its guarantees are logged once per
    process (a warning for anything weaker than bubblewrap)."""
    from .results import SandboxUnavailableError

    exe = python or os.environ.get(PYTHON_ENV_VAR) or sys.executable
    choice = chosen_launcher(launcher)
    key = (exe, choice)
    with _CAPS_LOCK:
        if key not in _CAPS_CACHE:
            try:
                caps: SandboxCapabilities | BaseException = _probe_choice(exe, choice)
            except SandboxUnavailableError as exc:
                caps = exc
            _CAPS_CACHE[key] = caps
            logger.debug("sandbox capabilities: %s", caps)
        caps = _CAPS_CACHE[key]
        if isinstance(caps, BaseException):
            raise SandboxUnavailableError(str(caps))  # a fresh one: no traceback piles up
        if key not in _ANNOUNCED:
            _ANNOUNCED.add(key)
            if caps.launcher_name == "bubblewrap":
                logger.info("sandbox: launcher %r -> bubblewrap; %s", choice,
                            "; ".join(caps.guarantees))
            else:
                logger.warning("sandbox: launcher %r -> %s: bubblewrap is not in use (%s); "
                               "weaker guarantees: %s", choice, caps.launcher_name,
                               "; ".join(caps.notes) or "not chosen", "; ".join(caps.guarantees))
        return caps


def describe_sandbox(python: str | None = None, launcher: str | None = None) -> dict:
    """The launcher in use and its guarantees as plain data (for a run's params), probing
    if needed; raises what :func:`sandbox_capabilities` raises."""
    caps = sandbox_capabilities(python, launcher)
    return {"launcher_chosen": chosen_launcher(launcher), "launcher": caps.launcher_name,
            "python": caps.python, "guarantees": list(caps.guarantees), "notes": list(caps.notes)}


def _bwrap_fix(why: str) -> str:
    if os.geteuid() != 0:
        fix = ("bubblewrap runs unprivileged here: it needs unprivileged user namespaces "
               "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; "
               "some AppArmor profiles block them: kernel.apparmor_restrict_unprivileged_"
               "userns=0), and read access to the interpreter's prefix")
    else:
        fix = ("as root, bubblewrap needs to create mount, pid and network namespaces (in a "
               "container: run it with CAP_SYS_ADMIN, or --privileged) and `setpriv` "
               "(util-linux)")
    return (f"bubblewrap is installed but unusable: {why}. Fix: {fix}; try "
            f"`bwrap --ro-bind / / --unshare-all true` to see bubblewrap's own error. Or choose "
            f"the weaker launcher explicitly: `sandbox: {{launcher: unshare}}` in the task's "
            f"env_config, or {LAUNCHER_ENV_VAR}=unshare (docs/sandbox.md lists what it does "
            f"not guarantee)")


def _probe_choice(python: str, choice: str) -> SandboxCapabilities:
    from .bwrap import find_bwrap
    from .results import SandboxUnavailableError

    notes: list[str] = []
    if choice == "none":
        return SandboxCapabilities(python, (), False, False, None, "none", None,
                                   ("no launcher chosen",))
    if choice in ("auto", "bubblewrap"):
        if find_bwrap() is None and choice == "auto":
            notes.append("bubblewrap unusable: no `bwrap` binary (Debian: apt-get install "
                         "bubblewrap)")
        else:
            caps, why = _probe_bubblewrap(python)
            if caps is not None:
                return caps
            raise SandboxUnavailableError(_bwrap_fix(why))
    else:
        notes.append(f"bubblewrap not used: launcher {choice!r} chosen")
    caps = _probe(python)
    return dataclasses.replace(caps, notes=tuple(notes) + caps.notes)


_BWRAP_PROBE_CODE = """
import errno, os, socket
print(os.readlink("/proc/self/ns/net"), os.readlink("/proc/self/ns/ipc"), os.getuid())
try:
    open("/usr/.pettingllms-probe", "w")
    print("usr-writable")
except OSError as e:
    print("usr-" + errno.errorcode.get(e.errno, "?"))
open("inside", "w").write("x")
print(sorted(os.listdir("/proc/self/fd")))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("ptrace", libc.ptrace(0x4206, os.getppid(), 0, 0))
import sys
print("site", sum(len(os.listdir(p)) for p in sys.path
                  if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)))
"""


def _probe_bubblewrap(python: str) -> tuple[SandboxCapabilities | None, str]:
    """Capabilities with the bubblewrap launcher, or ``(None, why not)``."""
    from .bwrap import find_bwrap, interpreter_layout
    from .cgroups import _memory_cgroup_root
    from .runner import _next_uid, _run
    from .seccomp import seccomp_program

    if find_bwrap() is None:
        return None, "no `bwrap` binary (Debian: apt-get install bubblewrap)"
    if seccomp_program() is None:
        return None, "no seccomp numbers for this architecture"
    try:
        layout = interpreter_layout(python)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return None, f"cannot read the interpreter's layout ({exc})"
    root = os.geteuid() == 0
    if root:  # the run's uid reaches the prefix through the neutral mount, not the host path,
        # but the prefix's own folders keep their modes
        for path in (layout.host_prefix, os.path.dirname(os.path.join(
                layout.host_prefix, os.path.relpath(layout.executable, PYTHON_MOUNT)))):
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                return None, f"cannot stat the interpreter's prefix ({exc})"
            if mode & 0o005 != 0o005:
                return None, (f"{path} (mode {mode & 0o777:o}) cannot be entered by other "
                              f"users, so the run's own uid cannot start the interpreter "
                              f"(chmod o+rx {path}, or set ${PYTHON_ENV_VAR} to an "
                              f"interpreter others can run)")
    memory_root = _memory_cgroup_root()
    caps = SandboxCapabilities(
        python, (), True, True, _next_uid() if root else None, "rlimit", None,
        () if root else ("RLIMIT_NPROC counts every process of this user, not only the "
                         "sandbox's",),
        filesystem_readonly=True, launcher_name="bubblewrap", private_root=True,
        ipc_isolated=True, ptrace_blocked=True,
        memory_limit="cgroup" if memory_root else "rlimit", memory_cgroup_root=memory_root,
        layout=layout)
    if memory_root is None:
        caps = dataclasses.replace(caps, notes=caps.notes + (
            "no writable memory cgroup: memory is RLIMIT_AS per process; memfd and shared "
            "memory are NOT bounded",))
    result = _run(_BWRAP_PROBE_CODE, "", SandboxLimits(wall_time_s=20, cpu_time_s=10), caps,
                  probing=True)
    lines = result.stdout.splitlines()
    if not result.ok or len(lines) != 5:
        return None, f"the probe run failed ({result.describe_failure()[-300:]})"
    net, ipc, uid = lines[0].split()
    expected = {"net": os.readlink("/proc/self/ns/net"), "ipc": os.readlink("/proc/self/ns/ipc")}
    if net == expected["net"] or ipc == expected["ipc"]:
        return None, "the run shared the host's network or IPC namespace"
    if root and uid == "0":
        return None, "the run kept uid 0"
    if lines[1] != "usr-EROFS":
        return None, f"/usr was not read-only in the run ({lines[1]})"
    if lines[2] != "['0', '1', '2', '3']":  # 3: the listing's own descriptor
        return None, f"the run inherited descriptors {lines[2]}"
    if lines[3] != "ptrace -1":
        return None, "ptrace was not refused"
    if lines[4] != "site 0":
        return None, "the run saw installed packages on its sys.path (site-packages not hidden)"
    return caps, ""


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
                         f"in {tempfile.gettempdir()} (set ${PYTHON_ENV_VAR} to an interpreter "
                         "others can execute, and TMPDIR to a folder others can traverse)")
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
                               cgroup_root, tuple(notes), readonly,
                               launcher_name="unshare" if launcher else "none")
