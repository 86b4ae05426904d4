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
passed); :mod:`~pettingllms_envs.sandbox.runner` checks this in its probe.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import shutil
import subprocess

__all__ = ["BWRAP_SCRATCH", "FORBIDDEN_PACKAGES", "InterpreterLayout", "PACKAGES_MOUNT",
           "PYTHON_MOUNT", "bwrap_argv", "find_bwrap", "interpreter_layout", "package_binds"]

#: Where the run's scratch folder (its cwd and HOME) is mounted inside the sandbox.
BWRAP_SCRATCH = "/sandbox"
#: Where the interpreter's real prefix (its standard library) is mounted inside the sandbox: a
#: path no host folder's permissions stand in front of, whatever the host path was (a venv
#: under /tmp, pyenv under a 0700 home, symlinks).
PYTHON_MOUNT = "/sandbox-python"
#: Where a task's allowlisted packages are mounted, one entry each; on the program's sys.path
#: (``PYTHONPATH``) only when the task declares packages.
PACKAGES_MOUNT = "/sandbox-packages"
#: Packages no task may allow: the project itself holds every task's generators and loaders.
FORBIDDEN_PACKAGES = ("pettingllms_envs", "pettingllms_rllib")
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)
#: Site folders of system Pythons under /usr (bound whole for the C library and tools): each is
#: covered by an empty folder, so no installed package is readable there either.
_SYSTEM_SITE_GLOBS = ("/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
                      "/usr/local/lib/python3*/site-packages",
                      "/usr/local/lib/python3*/dist-packages")
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
    """What bubblewrap mounts for the interpreter, asked from the interpreter itself (trusted:
    it is the host's own Python, run once, outside any sandbox).

    ``executable`` is the interpreter's path *inside* the sandbox; ``binds`` are ``(host real
    path, sandbox path)`` pairs, mounted read-only; ``hidden`` are sandbox paths (site-packages
    folders inside a bound tree) covered by an empty read-only folder; ``env`` is what the
    interpreter needs in its environment (``LD_LIBRARY_PATH`` for a shared libpython);
    ``host_prefix`` is the real base prefix on the host (for messages).
    """

    executable: str
    binds: tuple[tuple[str, str], ...]
    hidden: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    host_prefix: str = ""

    @property
    def trees(self) -> tuple[str, ...]:
        """The sandbox paths of the bound trees."""
        return tuple(inside for _, inside in self.binds)


#: Where an interpreter prefix keeps installed packages (globs below the prefix); the layout
#: probe here and the unshare launcher's read-only preamble (filesystem.py) cover the same.
SITE_PACKAGE_GLOBS = ("lib*/python3*/site-packages", "lib*/python3*/dist-packages",
                      "local/lib*/python3*/site-packages", "local/lib*/python3*/dist-packages",
                      "lib*/python3/dist-packages")

_LAYOUT_CODE = """
import glob, json, os, site, sys, sysconfig
base = os.path.realpath(sys.base_prefix)
exe = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
sites = set()
for prefix in {sys.base_prefix, base}:
    try:
        sites.update(site.getsitepackages([prefix]))
    except Exception:
        pass
    for pattern in SITE_PACKAGE_GLOBS:
        sites.update(glob.glob(os.path.join(prefix, pattern)))
print(json.dumps({
    "base": base, "exec_base": os.path.realpath(sys.base_exec_prefix), "exe": exe,
    "sites": sorted(os.path.realpath(p) for p in sites if os.path.isdir(p)),
    "shared": bool(sysconfig.get_config_var("Py_ENABLE_SHARED")),
    "libdir": os.path.realpath(sysconfig.get_config_var("LIBDIR") or ""),
}))
""".replace("SITE_PACKAGE_GLOBS", repr(SITE_PACKAGE_GLOBS))


def _ask(python: str, code: str, *args: str) -> dict:
    done = subprocess.run([python, "-I", "-c", code, *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    if done.returncode != 0:
        raise ValueError(f"{python} could not describe itself: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def interpreter_layout(python: str) -> InterpreterLayout:
    """Where ``python``'s real base prefix lives and what of it a run may see: the prefix at
    :data:`PYTHON_MOUNT`, its site-packages hidden, the base interpreter (not a venv's
    ``bin/python``: a venv adds only site-packages) as the executable. Raises
    ``OSError``/``ValueError``."""
    answer = _ask(python, _LAYOUT_CODE)
    base, exe = answer["base"], answer["exe"]
    if base == "/" or not os.path.isdir(base):
        raise ValueError(f"{python}: unusable base prefix {base!r}")
    if answer["exec_base"] != base:
        raise ValueError(f"{python}: exec_prefix {answer['exec_base']} differs from prefix "
                         f"{base}; not supported by the bubblewrap launcher")
    if not _inside(exe, base):
        raise ValueError(f"{python}: its interpreter {exe} lies outside its prefix {base}")
    inside_exe = PYTHON_MOUNT + exe[len(base.rstrip("/")):]
    hidden = []
    for folder in answer["sites"]:
        if _inside(folder, base):
            hidden.append(PYTHON_MOUNT + folder[len(base.rstrip("/")):])
    for pattern in _SYSTEM_SITE_GLOBS:
        hidden += [p for p in sorted(glob.glob(pattern)) if os.path.isdir(p)
                   and not os.path.islink(p)]
    env: list[tuple[str, str]] = []
    libdir = answer.get("libdir") or ""
    if answer.get("shared") and _inside(libdir, base):
        # a shared libpython is found through the build's absolute RUNPATH, which does not
        # exist in the sandbox: point the loader at the mounted copy
        env.append(("LD_LIBRARY_PATH", PYTHON_MOUNT + libdir[len(base.rstrip("/")):]))
    hidden = list(dict.fromkeys(hidden))
    # a folder inside a covered one is gone with it (and has no mount point left)
    hidden = [h for h in hidden if not any(o != h and _inside(h, o) for o in hidden)]
    return InterpreterLayout(inside_exe, ((base, PYTHON_MOUNT),), tuple(hidden), tuple(env),
                             base)


_PACKAGES_CODE = """
import importlib.metadata as md, importlib.util, json, os, sys
found = {}
missing = []
tops = md.packages_distributions() if hasattr(md, "packages_distributions") else {}
for name in sys.argv[1:]:
    entries = {}
    spec = None
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is None:
        missing.append(name)
        continue
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin and os.path.isabs(spec.origin):
        locations = [spec.origin]
    for location in locations:
        entries[os.path.basename(location)] = os.path.realpath(location)
    for dist_name in tops.get(name, []):
        try:
            dist = md.distribution(dist_name)
        except Exception:
            continue
        root = str(dist.locate_file(""))
        for item in dist.files or ():
            parts = item.parts
            if not parts or parts[0] in ("..", "") or parts[0].endswith(".pth"):
                continue
            path = os.path.join(root, parts[0])
            if os.path.exists(path):
                entries[parts[0]] = os.path.realpath(path)
    found[name] = entries
print(json.dumps({"found": found, "missing": missing}))
"""


def _normal(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(".", "_")


def check_packages(packages, forbidden=()) -> tuple[str, ...]:
    """``packages`` as a sorted tuple of importable top-level names, or a ValueError naming
    the first one that is not a plain name or that :data:`FORBIDDEN_PACKAGES` or ``forbidden``
    (a task's own data and generators) rules out."""
    if packages is None:
        return ()
    if isinstance(packages, (str, bytes)) or not hasattr(packages, "__iter__"):
        raise ValueError(f"sandbox packages must be a list of package names, got {packages!r}")
    names = []
    refused = {_normal(f) for f in (*FORBIDDEN_PACKAGES, *forbidden)}
    for name in packages:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"sandbox package {name!r} is not an importable top-level name")
        if _normal(name) in refused:
            raise ValueError(
                f"sandbox package {name!r} is refused: it holds this task's data, answers or "
                f"generators (never allowed: {', '.join(sorted(refused))})")
        names.append(name)
    return tuple(sorted(set(names)))


@functools.lru_cache(maxsize=None)
def package_binds(python: str, packages: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``(host real path, sandbox path)`` of each allowlisted package's top-level entries (its
    import folder or module, and the other top-level entries of its distribution, such as
    ``numpy.libs``), each at ``PACKAGES_MOUNT/<entry>``. Dependencies are not followed: list
    them too. Raises ``ValueError`` for a package ``python`` cannot import, or one whose
    distribution brings a forbidden entry."""
    if not packages:
        return ()
    answer = _ask(python, _PACKAGES_CODE, *packages)
    if answer["missing"]:
        raise ValueError(f"sandbox packages not installed for {python}: "
                         f"{', '.join(answer['missing'])}")
    binds: dict[str, str] = {}
    refused = {_normal(f) for f in FORBIDDEN_PACKAGES}
    for name, entries in sorted(answer["found"].items()):
        for entry, host in sorted(entries.items()):
            if _normal(entry.split(".")[0]) in refused:
                raise ValueError(f"sandbox package {name!r} brings {entry!r}, which is refused")
            binds.setdefault(entry, host)
    return tuple((host, f"{PACKAGES_MOUNT}/{entry}") for entry, host in sorted(binds.items()))


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
            if folder not in made and not any(_inside(folder, b) for b in binds):
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
