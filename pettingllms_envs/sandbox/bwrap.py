"""The bubblewrap launcher: each run in its own minimal root, as an unprivileged uid.

`bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, Debian package
``bubblewrap``, the sandbox under Flatpak) builds the run's world from nothing: an empty root
into which only what the program needs is mounted. What one run gets (:func:`bwrap_argv`):

* **Files**: read-only binds of ``/usr`` (and the ``/lib*``, ``/bin``, ``/sbin`` links or
  folders of the host), ``/etc/ld.so.cache``, and the interpreter's own trees (its
  ``base_prefix``, its ``prefix`` when it is a virtual environment, and the site-packages
  folders on its ``sys.path``), each at its host path so the interpreter starts unchanged. The
  folders above those paths are created empty (mode 0755), so ``/root`` or a project checkout
  above ``.venv`` shows nothing but the path down. Everything else of the host is absent: home
  folders, the project checkout, ``/etc/shadow``, Ray's session folder and every host socket.
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
passed); :mod:`~pettingllms_envs.sandbox.runner` checks this in its probe.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess

__all__ = ["BWRAP_SCRATCH", "InterpreterLayout", "bwrap_argv", "find_bwrap", "interpreter_layout"]

#: Where the run's scratch folder (its cwd and HOME) is mounted inside the sandbox.
BWRAP_SCRATCH = "/sandbox"
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)
_NOBODY = 65534


@functools.lru_cache(maxsize=None)
def find_bwrap() -> str | None:
    """The ``bwrap`` binary, searched in the system folders only (not ``$PATH``); looked up
    once per process, not once per run."""
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/sbin:/sbin:/usr/local/bin")


@functools.lru_cache(maxsize=None)
def _setpriv() -> str:
    return shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin") or "setpriv"


@dataclasses.dataclass(frozen=True)
class InterpreterLayout:
    """The host folders an interpreter needs, asked from the interpreter itself (trusted: it is
    the host's own Python, run once, outside any sandbox)."""

    executable: str
    trees: tuple[str, ...]


def interpreter_layout(python: str) -> InterpreterLayout:
    """Ask ``python`` for its prefixes and site-packages. Raises ``OSError``/``ValueError``."""
    code = ("import json, site, sys, sysconfig\n"
            "paths = [sys.base_prefix, sys.prefix, sysconfig.get_paths()['purelib'],"
            " sysconfig.get_paths()['platlib']]\n"
            "paths += [p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))]\n"
            "print(json.dumps({'executable': sys.executable, 'paths': paths}))\n")
    done = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    if done.returncode != 0:
        raise ValueError(f"{python} could not describe itself: {done.stderr.strip()[-300:]}")
    answer = json.loads(done.stdout)
    trees: list[str] = []
    for path in answer["paths"]:
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in trees and real != "/":
            trees.append(real)
    # a tree inside another one is already bound with it
    trees = [t for t in trees if not any(t != o and t.startswith(o.rstrip("/") + "/")
                                         for o in trees)]
    # the path as given: a virtual environment's bin/python must be started by its own path
    return InterpreterLayout(os.path.abspath(python), tuple(sorted(trees)))


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_argv(bwrap: str, layout: InterpreterLayout, command: list[str], *,
               script_fd: int, seccomp_fd: int | None, status_fd: int, run_uid: int | None,
               tmpfs_bytes: int, env: dict[str, str], disable_userns: bool) -> list[str]:
    """The ``bwrap`` command line for one run of ``command`` (argv inside the sandbox).

    Args:
        bwrap: the bubblewrap binary.
        layout: the interpreter's folders, bound read-only at their host paths.
        command: what runs inside, e.g. ``[python, "-s", "-B", "solution.py"]``.
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
    for tree in layout.trees:
        if any(tree == b or tree.startswith(b + "/") for b in binds):
            continue
        for folder in _ancestors(tree):
            if folder not in made and not any(folder == b or folder.startswith(b + "/")
                                              for b in binds):
                argv += ["--perms", "0755", "--dir", folder]
                made.add(folder)
        argv += ["--ro-bind", tree, tree]
        binds.append(tree)
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
