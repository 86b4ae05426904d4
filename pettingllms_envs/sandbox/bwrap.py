"""The bubblewrap launcher: each run in its own minimal root, as an unprivileged uid.

`bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, Debian package
``bubblewrap``, the sandbox under Flatpak) builds the run's world from nothing: an empty root
into which only what the program needs is mounted. What one run gets (:func:`bwrap_argv`):

* **Files**: read-only binds of ``/usr`` (and the ``/lib*``, ``/bin``, ``/sbin`` links or
  folders of the host), ``/etc/ld.so.cache``, and the interpreter's real base prefix (symlinks
  resolved) at the neutral path :data:`PYTHON_MOUNT` (``/sandbox-python``), so the run's own
  uid can execute it whatever the host path's permissions (pyenv under a 0700 ``/root``) and
  wherever it lives (a prefix under ``/tmp`` is not hidden by the private ``/tmp``). The
  program runs the *base* interpreter: a virtual environment adds only site-packages, which
  are not bound at all. Every site-packages/dist-packages folder inside a bound tree (the
  base prefix's, the system Pythons' under ``/usr``) is covered by an empty read-only
  folder, so ``sys.path`` holds the standard library only; packages a task allowlists are
  bound one by one under :data:`PACKAGES_MOUNT` (``/sandbox-packages``, on ``PYTHONPATH``).
  Everything else of the host is absent: home folders, the project checkout (and with it the
  task generators and data), the venv, ``/etc/shadow``, Ray's session folder and every host
  socket.
* **Writable**: three private tmpfs of bounded size: ``/sandbox`` (its cwd and ``HOME``,
  holding ``solution.py``), ``/tmp`` and ``/dev/shm``; a fresh ``/proc`` and a minimal ``/dev``.
  Nothing the program writes reaches the host's disk, except its stdout and stderr files.
* **Namespaces**: pid, network (no interface but a down loopback), IPC (System V objects die
  with the run), UTS and, where the kernel allows, cgroup. ``--die-with-parent`` and
  ``--new-session`` (no terminal to inject input into).
* **Identity**: run by root, bubblewrap stays in the host's user namespace and ``setpriv``
  drops the program to a fresh host uid per run (no capabilities, no groups, no new
  privileges); run by anyone else, it uses an unprivileged user namespace with uid 65534 and
  no capabilities, and ``--disable-userns`` where this bubblewrap has it.
* **System calls**: the :mod:`~pettingllms_envs.sandbox.seccomp` filter (no ptrace, no new
  namespaces, no mounts, no keyrings, no io_uring).

The file descriptors the program holds are 0, 1 and 2 only (bubblewrap closes what it was
passed); :func:`probe` checks this.

The launcher in one place
-------------------------
Like :mod:`~pettingllms_envs.sandbox.unshare`, this module is one launcher whole, so what
bubblewrap promises is checked where it is built: :func:`probe` (does it work here, and what
does a run get: :class:`~pettingllms_envs.sandbox.capabilities.SandboxCapabilities` or why
not), :func:`bwrap_argv` (the command line) and :func:`run` (one run: its files, its limits,
its result). :func:`probe` runs its checks through :func:`run` itself, so nothing it checks can
differ from what runs get. It builds on :mod:`~pettingllms_envs.sandbox.process`,
:mod:`~pettingllms_envs.sandbox.cgroups`, :mod:`~pettingllms_envs.sandbox.seccomp` and
:mod:`~pettingllms_envs.sandbox.interpreter` only; nothing below imports it back.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import tempfile

from .capabilities import LAUNCHER_ENV_VAR, PYTHON_ENV_VAR, SandboxCapabilities
from .cgroups import memory_cgroup_root, memory_limit_hit, open_memory_cgroup, remove_cgroup
from .cleanup import remove_tree
from .interpreter import (PACKAGES_MOUNT, PYTHON_MOUNT, InterpreterLayout, interpreter_layout,
                          is_within, package_binds)
from .process import (SCRIPT_NAME, PipedStdio, StartError, execute, next_uid, not_started,
                      python_flags, read_output, scrubbed_env)
from .results import SandboxLimits, SandboxResult, make_result
from .seccomp import seccomp_program

__all__ = ["BWRAP_SCRATCH", "bwrap_argv", "find_bwrap", "probe", "run", "unusable_message"]

#: Where the run's scratch folder (its cwd and HOME) is mounted inside the sandbox.
BWRAP_SCRATCH = "/sandbox"
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)
_NOBODY = 65534
_PRLIMIT = shutil.which("prlimit", path="/usr/bin:/bin") or "/usr/bin/prlimit"


@functools.lru_cache(maxsize=None)
def find_bwrap() -> str | None:
    """The ``bwrap`` binary, searched in the system folders only (not ``$PATH``); looked up
    once per process, not once per run."""
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin")


@functools.lru_cache(maxsize=None)
def _setpriv() -> str:
    return shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin") or "setpriv"


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_argv(bwrap: str, layout: InterpreterLayout, command: list[str], *,
               script_fd: int, seccomp_fd: int | None, status_fd: int, run_uid: int | None,
               tmpfs_bytes: int, env: dict[str, str], disable_userns: bool,
               packages: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The ``bwrap`` command line for one run of ``command`` (argv inside the sandbox).

    Args:
        bwrap: the bubblewrap binary.
        layout: the interpreter's prefix, bound read-only at :data:`PYTHON_MOUNT`, its
            site-packages folders covered by empty ones.
        command: what runs inside, e.g. ``[layout.executable, "-s", "-B", "solution.py"]``.
        script_fd: a readable descriptor whose content becomes ``/sandbox/solution.py``.
        seccomp_fd: a readable descriptor holding the compiled filter, or None for none.
        status_fd: a writable descriptor for bubblewrap's JSON status: the program's pid once
            it started, then its exit code (how a set-up failure is told from the program's
            own ``exit(1)``).
        run_uid: host uid to run as (root hosts: ``setpriv`` drops to it); None when bwrap
            itself runs unprivileged and maps the program to uid 65534 of a user namespace.
        tmpfs_bytes: size of each of ``/sandbox``, ``/tmp`` and ``/dev/shm``.
        env: the program's whole environment.
        disable_userns: pass ``--disable-userns`` (unprivileged mode, bwrap >= 0.8).
        packages: ``(host path, sandbox path)`` of the allowlisted packages
            (:func:`package_binds`), bound read-only under :data:`PACKAGES_MOUNT`.
    """
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
            "--json-status-fd", str(status_fd)]
    if run_uid is None:
        argv += ["--unshare-user", "--uid", str(_NOBODY), "--gid", str(_NOBODY),
                 "--cap-drop", "ALL"]
        if disable_userns:
            argv.append("--disable-userns")
    else:  # root: keep only what setpriv needs to become run_uid, which then drops it all
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                 "--cap-add", "CAP_SETPCAP"]
    binds: list[str] = []
    for path in _SYSTEM_PATHS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
            binds.append(path)
    made: set[str] = set()
    for path in _SYSTEM_FILES:
        if os.path.isfile(path):
            for folder in _ancestors(path):
                if folder not in made:
                    argv += ["--perms", "0755", "--dir", folder]
                    made.add(folder)
            argv += ["--ro-bind", path, path]
    for host, inside in (*layout.binds, *packages):
        for folder in _ancestors(inside):
            if folder not in made and not any(is_within(folder, b) for b in binds):
                argv += ["--perms", "0755", "--dir", folder]
                made.add(folder)
        argv += ["--ro-bind", host, inside]
        binds.append(inside)
    for inside in layout.hidden:  # an empty, read-only folder over each site-packages
        argv += ["--perms", "0555", "--size", "4096", "--tmpfs", inside, "--remount-ro", inside]
    size = str(int(tmpfs_bytes))
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
             "--size", size, "--perms", "0777", "--tmpfs", BWRAP_SCRATCH,
             "--perms", "0644", "--file", str(script_fd), BWRAP_SCRATCH + "/solution.py",
             "--chdir", BWRAP_SCRATCH]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, value]
    argv.append("--")
    if run_uid is not None:
        argv += [_setpriv(), "--reuid", str(run_uid), "--regid", str(run_uid), "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return argv + command


# ------------------------------------------------------------------------------ probe
def unusable_message(why: str) -> str:
    """Why bubblewrap, installed, cannot be used (``why``, from :func:`probe`) and the fix: the
    text of the :class:`~pettingllms_envs.sandbox.SandboxUnavailableError` raised then."""
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


def probe(python: str) -> tuple[SandboxCapabilities | None, str]:
    """Capabilities with the bubblewrap launcher, or ``(None, why not)``: a probe run (through
    :func:`run`, as every run) must show a network and IPC namespace other than the host's, a
    uid other than 0 on a root host, a read-only ``/usr``, no descriptor beyond 0-2, a refused
    ``ptrace`` and no installed package on its ``sys.path``."""
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
    memory_root = memory_cgroup_root()
    caps = SandboxCapabilities(
        python, (), True, True, next_uid() if root else None, "rlimit", None,
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
    result = run(_BWRAP_PROBE_CODE, "", SandboxLimits(wall_time_s=20, cpu_time_s=10), caps,
                 uid=next_uid() if root else None, probing=True)
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


# ------------------------------------------------------------------------------ one run
def run(code: str, stdin: str, limits: SandboxLimits, caps: SandboxCapabilities, *,
        uid: int | None, probing: bool = False, stdio: PipedStdio | None = None) -> SandboxResult:
    """One run of ``code`` on ``stdin`` under bubblewrap, as ``uid`` (root hosts: a fresh uid
    per run, :func:`~pettingllms_envs.sandbox.process.next_uid`; None: bubblewrap's own user
    namespace). Its limits: rlimits, the memory cgroup where there is one, and (unprivileged)
    the process budget set inside the run's user namespace by ``prlimit``. The host folder
    holds only the program's stdin/stdout/stderr files, the script and the filter, all root's
    and none visible inside; the program's own files live in tmpfs that vanish. ``probing``
    keeps start failures out of the warnings; ``stdio`` replaces stdin/stdout by pipes
    (:mod:`~pettingllms_envs.sandbox.pair`)."""
    base = tempfile.mkdtemp(prefix="pettingllms-sbx-")
    memory_cgroup = None
    status_read = status_write = -1
    try:
        paths = {name: os.path.join(base, name) for name in ("stdin", "stdout", "stderr",
                                                             "solution.py", "seccomp")}
        with open(paths["stdin"], "wb") as handle:
            handle.write(str(stdin).encode("utf-8", errors="replace"))
        with open(paths["solution.py"], "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(code)
        with open(paths["seccomp"], "wb") as handle:
            handle.write(seccomp_program() or b"")
        memory_cgroup = open_memory_cgroup(caps, limits.memory_mb * 1024 * 1024)
        status_read, status_write = os.pipe()
        with open(paths["solution.py"], "rb") as script, open(paths["seccomp"], "rb") as flt, \
                open(paths["stdin"], "rb") as fin, open(paths["stdout"], "wb") as fout, \
                open(paths["stderr"], "wb") as ferr:
            command = [caps.layout.executable, *python_flags(caps), SCRIPT_NAME]
            env = {**scrubbed_env(BWRAP_SCRATCH), **dict(caps.layout.env)}
            packages = package_binds(caps.python, limits.packages)
            if packages:
                env["PYTHONPATH"] = PACKAGES_MOUNT
            host_limits = limits
            if uid is None:
                # Unprivileged host: every run is this user's uid, and RLIMIT_NPROC set here
                # would count all of the user's processes (the trainer's threads, the last
                # run's exiting ones). Inside the run's own user namespace the count is the
                # run's alone, so the budget is set there, by prlimit, and kept loose here.
                command = [_PRLIMIT, f"--nproc={limits.max_processes}:{limits.max_processes}",
                           "--", *command]
                host_limits = dataclasses.replace(limits,
                                                  max_processes=limits.max_processes + 65536)
            argv = bwrap_argv(
                find_bwrap() or "bwrap", caps.layout, command,
                script_fd=script.fileno(), seccomp_fd=flt.fileno(), status_fd=status_write,
                run_uid=uid, tmpfs_bytes=max(2 * limits.max_file_bytes, 1 << 20),
                env=env, disable_userns=uid is None, packages=packages)
            try:
                done = execute(argv, stdin=stdio.stdin_fd if stdio else fin,
                               stdout=stdio.stdout_fd if stdio else fout, stderr=ferr,
                               cwd=base, uid=None, rlimits=host_limits,
                               wall_time_s=limits.wall_time_s, caps=caps, cgroup=None,
                               probing=probing,
                               pass_fds=(script.fileno(), flt.fileno(), status_write),
                               extra_cgroups=(memory_cgroup,) if memory_cgroup else (),
                               on_started=stdio.on_started if stdio else None)
            except StartError as exc:
                return not_started(f"sandbox could not start: {exc}", caps)
            finally:
                os.close(status_write)
                status_write = -1
        status = read_status(status_read)
        cap = limits.max_output_bytes
        out, out_size, _ = read_output(paths["stdout"], cap)
        err, err_size, tail = read_output(paths["stderr"], cap)
        if "child-pid" not in status and not done.timed_out:
            return not_started("sandbox could not start: "
                               + err.decode("utf-8", "replace").strip()[-300:], caps)
        returncode = status.get("exit-code", done.returncode)
        if 128 < returncode < 128 + 65:  # bubblewrap passes a signal on as 128 + its number
            returncode = 128 - returncode
        return make_result(
            out=out, out_size=out_size, err=err, err_size=err_size, tail=tail,
            returncode=returncode, timed_out=done.timed_out, cpu_time_s=done.cpu_time_s,
            wall_time_s=done.wall_time_s, pids_max_hit=None, limits=limits, caps=caps,
            scratch=BWRAP_SCRATCH, base=base,
            memory_hit=bool(memory_cgroup) and memory_limit_hit(memory_cgroup))
    finally:
        for fd in (status_read, status_write):
            if fd >= 0:
                os.close(fd)
        if memory_cgroup:
            remove_cgroup(memory_cgroup)
        remove_tree(base)


def read_status(fd: int) -> dict:
    """bubblewrap's JSON status documents (``child-pid``, then ``exit-code``), merged."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    merged: dict = {}
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict):
            merged.update({k: v for k, v in document.items() if isinstance(v, int)})
    return merged
