"""The unshare launcher (and the unisolated "none" one): where bubblewrap is not installed, or
where it is chosen explicitly, a run is util-linux ``unshare`` namespaces around the host's own
file system, made read-only by the preamble of :mod:`~pettingllms_envs.sandbox.filesystem`.

The launcher in one place
-------------------------
As :mod:`~pettingllms_envs.sandbox.bwrap` does for bubblewrap, this module holds what the
launcher is: :func:`probe` (which variant works here and what runs get), :func:`unshare_argv`
(the command line: launcher prefix, read-only preamble, program) and :func:`run` (one run: its
workspace, its pids cgroup, its limits, its result). The probe runs its checks through
:func:`run`. The batch harness (:mod:`~pettingllms_envs.sandbox.batch`) starts through
:func:`unshare_argv` too. Capabilities with an empty ``launcher`` prefix (``launcher_name ==
"none"``) run here as well, with no isolation at all.

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
import os
import shutil
import signal
import tempfile

from .capabilities import PYTHON_ENV_VAR, SandboxCapabilities
from .cgroups import open_pids_cgroup, pids_cgroup_root, pids_max_hit, remove_cgroup
from .cleanup import remove_tree
from .filesystem import FS_PROBE_CODE, package_folder, preamble_argv, setup_failed
from .process import (SCRIPT_NAME, PipedStdio, StartError, execute, make_workspace, next_uid,
                      not_started, python_flags, read_output)
from .results import SandboxLimits, SandboxResult, decode_output, make_result

__all__ = ["probe", "run", "unshare_argv"]

_UNSHARE_SIGKILL = b"unshare: sigprocmask unblock failed: Invalid argument\n"


# ------------------------------------------------------------------------------ probe
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


def probe(python: str) -> SandboxCapabilities:
    """What runs get from the unshare launcher here (module docstring): the privilege drop,
    the first ``unshare`` variant that isolates the network, the read-only view, the process
    budget; every fallback in ``notes``. Never raises: with no variant working it returns the
    ``"none"`` launcher, which runs refuse unless ``allow_unisolated``."""
    notes: list[str] = []
    limits = SandboxLimits(wall_time_s=20, cpu_time_s=10)
    plain = SandboxCapabilities(python, (), False, False, None, "none", None, ())

    def attempt(launcher: tuple[str, ...], uid: int | None) -> tuple[bool, bool, bool]:
        caps = dataclasses.replace(plain, launcher=launcher)
        result = run(_PROBE_CODE, "", limits, caps, uid=uid, probing=True)
        words = result.stdout.split()
        if not result.ok or len(words) != 2:
            return False, False, False
        return True, words[0] == "isolated", words[1] == "1"

    uid = None
    if os.geteuid() == 0:
        candidate = next_uid()
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
        result = run(_PROBE_CODE + FS_PROBE_CODE, "", limits, caps, uid=uid, probing=True)
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
        cgroup_root = pids_cgroup_root()
        process_limit = "cgroup" if cgroup_root else "none"
        notes.append("running as root: RLIMIT_NPROC does not apply to uid 0; "
                     + ("a pids cgroup enforces max_processes" if cgroup_root else
                        "no writable pids cgroup either, so max_processes is NOT enforced"))
    return SandboxCapabilities(python, launcher, network, pid_ns, uid, process_limit,
                               cgroup_root, tuple(notes), readonly,
                               launcher_name="unshare" if launcher else "none")


# ------------------------------------------------------------------------------ argv
def unshare_argv(caps: SandboxCapabilities, command: list[str], writable: list[str],
                 limits: SandboxLimits, binds: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The command line of one sandboxed process: the launcher prefix (``caps.launcher``:
    ``unshare`` and its flags, or nothing for ``"none"``), then, where the file system is made
    read-only, the preamble that does so (keeping ``writable`` folders writable and mounting
    the allowlisted packages, ``binds``), which replaces itself with ``command``."""
    return [*caps.launcher, *preamble_argv(caps, writable, limits, binds), *command]


# ------------------------------------------------------------------------------ one run
def run(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities, *,
        uid: int | None, probing: bool = False, stdio: PipedStdio | None = None) -> SandboxResult:
    """One run of ``code`` on ``stdin`` with the unshare (or "none") launcher, as ``uid`` (None:
    the host uid). Its limits: rlimits, the pids cgroup where the process budget needs one
    (root without a privilege drop), the read-only view where it works. ``probing`` keeps
    start failures out of the warnings; ``stdio`` replaces stdin/stdout by pipes
    (:mod:`~pettingllms_envs.sandbox.pair`)."""
    base, scratch = make_workspace(code, uid)
    cgroup = None
    try:
        stdin_path = os.path.join(base, "stdin")
        with open(stdin_path, "wb") as handle:
            handle.write(str(stdin).encode("utf-8", errors="replace"))
        # +1: the `unshare --fork` parent
        cgroup = open_pids_cgroup(caps, limits.max_processes + 1)
        package_env, binds = package_folder(base, caps, limits)
        argv = unshare_argv(caps, [caps.python, *python_flags(caps), SCRIPT_NAME], [scratch],
                            limits, binds)
        out_path, err_path = os.path.join(base, "stdout"), os.path.join(base, "stderr")
        with open(stdin_path, "rb") as fin, open(out_path, "wb") as fout, \
                open(err_path, "wb") as ferr:
            if uid is not None:  # so `/dev/stdout` and `/dev/stderr` reopen for the dropped
                os.fchown(fout.fileno(), uid, uid)  # uid, as in a batch (its io folder)
                os.fchown(ferr.fileno(), uid, uid)
            try:
                done = execute(argv, stdin=stdio.stdin_fd if stdio else fin,
                               stdout=stdio.stdout_fd if stdio else fout, stderr=ferr,
                               cwd=scratch, uid=uid, rlimits=limits,
                               wall_time_s=limits.wall_time_s, caps=caps, cgroup=cgroup,
                               probing=probing, on_started=stdio.on_started if stdio else None,
                               extra_env=package_env)
            except StartError as exc:
                return not_started(f"sandbox could not start: {exc}", caps)
        pids_hit = pids_max_hit(cgroup) if cgroup else None
        cap = limits.max_output_bytes
        out, out_size, _ = read_output(out_path, cap)
        err, err_size, tail = read_output(err_path, cap)
        if setup_failed(caps, done.returncode, err):
            why = decode_output(err, scratch, base).strip()
            return not_started(f"sandbox could not start: {why}", caps)
        returncode = done.returncode
        if "--fork" in caps.launcher and returncode == 1 and tail.endswith(_UNSHARE_SIGKILL):
            # `unshare --fork` cannot re-raise SIGKILL on itself (signal(SIGKILL) fails), so
            # a program killed by SIGKILL (CPU limit, OOM) reaches us as this message + exit 1.
            returncode, tail = -signal.SIGKILL, tail[: -len(_UNSHARE_SIGKILL)]
            err_size -= len(_UNSHARE_SIGKILL)
            err = err[:err_size]
        return make_result(
            out=out, out_size=out_size, err=err, err_size=err_size, tail=tail,
            returncode=returncode, timed_out=done.timed_out, cpu_time_s=done.cpu_time_s,
            wall_time_s=done.wall_time_s, pids_max_hit=pids_hit, limits=limits, caps=caps,
            scratch=scratch, base=base)
    finally:
        if cgroup:
            remove_cgroup(cgroup)
        remove_tree(base)
