"""The read-only view of the host's file system, behind the ``unshare`` launcher.

A read-only view of the host's file system, where the launcher gives a mount namespace: only
the run's own folders can be written, see "File system" below.

File system
-----------
Inside the launcher's mount namespace a small trusted preamble (``python -I -S -B -c
<FS_PREAMBLE>``, run as the namespace's root between ``unshare`` and the program) bind-mounts
each folder the run must write onto itself (the scratch folder; for a batch also the harness's
io folder), so they are mounts of their own, binds each package a task allowlists into a
folder of its own (on ``PYTHONPATH``), covers with an empty read-only tmpfs every folder that
holds answers (:func:`hidden_folders`: the interpreter's site-packages, the project's
packages, the Hugging Face cache), then remounts *every* other visible mount (``/``, ``/tmp``
if separate, ``/proc``, ``/sys`` with the cgroup file systems, ``/dev``, ...)
``ro,nosuid,nodev``, repeating each mount's flags that the user namespace locked (atime,
``nosuid``, ``noexec``, as listed in ``/proc/self/mountinfo``). The harmless devices
(``/dev/null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty``) are bind-mounted onto
themselves first, so they keep working (a device file's own writes are not stopped by a
read-only mount); ``/dev/shm`` gets a private tmpfs of ``max_file_bytes`` (POSIX semaphores,
hence ``multiprocessing``, still work; it vanishes with the run, and a batch's harness empties
it before each input). Then the preamble drops every capability for good (bounding,
inheritable and ambient sets), so the program, still uid 0 of its user namespace, can neither
remount, unmount nor override file permissions (a nested user namespace it may create gets a
copy whose read-only flags the kernel locks), and ``exec``-s the program: same pid (pid 1 of
its namespace), argv, environment and file descriptors. The stdin/stdout/stderr files the host
opened stay writable (an open file keeps the host's mount), ``/dev/stdout`` included. Writes
elsewhere fail with EROFS; ``tempfile`` then falls back to the scratch folder. Nothing is
mounted before ``/`` is made private, and the preamble refuses to run in the host's own mount
namespace, so the host's mounts are never touched. Cost: one more interpreter start (about 30
ms, counted in the program's CPU time) per :func:`run_python` and per batch.

The probe runs a program that must write in its folder, fail with EROFS one level above it and
see an empty bounding set; where it fails (or there is no mount namespace) runs go on as
before, with a writable file system: :attr:`SandboxCapabilities.filesystem_readonly` and every
result's ``filesystem_readonly`` are False and the notes say "file system NOT read-only" and
why. If the preamble fails on a later run, the program does not run (``exit_code=None``, "could
not start" with the reason).
"""

from __future__ import annotations

import functools
import glob
import os
import subprocess
import tempfile
from pathlib import Path

from .capabilities import SandboxCapabilities
from .interpreter import (SITE_PACKAGE_GLOBS, SYSTEM_SITE_GLOBS, ask_interpreter,
                          package_binds)
from .results import SandboxLimits

#: Exit status and first stderr bytes of a preamble that refused to start the program.
FS_SETUP_EXIT = 125
FS_SETUP_MESSAGE = b"sandbox: read-only file system setup failed: "
PRIVATE_SHM = "/dev/shm"  # where the preamble mounts a private tmpfs
#: The preamble (``python -I -S -B -c <this> HOST_MNT_NS SHM_BYTES DIR... -- COMMAND...``) run
#: inside the launcher's mount namespace, as its root: it makes every mount read-only except
#: the ``DIR`` folders, mounts a private tmpfs on /dev/shm, drops all capabilities for good and
#: becomes ``COMMAND`` (same pid, environment and file descriptors). Any Python 3; failures
#: end it with :data:`FS_SETUP_EXIT` and :data:`FS_SETUP_MESSAGE` before the program runs.
FS_PREAMBLE = (Path(__file__).parent / "fs_preamble.py").read_text(encoding="utf-8")
#: What the unshare probe appends to its program to check the read-only view works.
FS_PROBE_CODE = """
import errno, os
with open("inside", "w") as handle:
    handle.write("x")
os.remove("inside")
try:
    with open(os.path.join(os.path.dirname(os.getcwd()), "outside"), "w") as handle:
        handle.write("x")
    fs = "writable"
except OSError as e:
    fs = "read-only" if e.errno == errno.EROFS else "refused"
with open(os.devnull, "w") as handle:
    handle.write("x")
with open("/proc/self/status") as handle:
    bounding = [line.split()[1] for line in handle if line.startswith("CapBnd:")]
print(fs, int(bounding[0], 16) if bounding else -1)
"""


def preamble_argv(caps: SandboxCapabilities, writable: list[str], limits: SandboxLimits,
                  binds: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """The preamble's part of an unshare command line, between the launcher and the program's
    command (empty where the capabilities have no read-only view): it keeps ``writable``
    folders writable, hides :func:`hidden_folders`, mounts the allowlisted packages (``binds``,
    from :func:`package_folder`) and replaces itself with what follows it."""
    if not caps.filesystem_readonly:
        return []
    try:
        host_namespace = os.readlink("/proc/self/ns/mnt")
    except OSError:
        host_namespace = "unknown"
    hidden = [h for h in hidden_folders(caps.python)
              if not any(_inside(w, h) or _inside(h, w) for w in writable)]
    return [caps.python, "-I", "-S", "-B", "-c", FS_PREAMBLE, host_namespace,
            str(max(1 << 12, int(limits.max_file_bytes))), *writable, "--", *hidden, "--",
            *(path for pair in binds for path in pair), "--"]


def _inside(path: str, tree: str) -> bool:
    path, tree = os.path.realpath(path), os.path.realpath(tree)
    return path == tree or path.startswith(tree.rstrip("/") + "/")


_SITES_CODE = """
import glob, json, os, site, sys, sysconfig
found = set()
for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
    try:
        found.update(site.getsitepackages([prefix]))
    except Exception:
        pass
    for pattern in SITE_PACKAGE_GLOBS:
        found.update(glob.glob(os.path.join(prefix, pattern)))
found.update(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
found.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
print(json.dumps(sorted(found)))
""".replace("SITE_PACKAGE_GLOBS", repr(SITE_PACKAGE_GLOBS))


@functools.lru_cache(maxsize=None)
def hidden_folders(python: str) -> tuple[str, ...]:
    """What the unshare preamble covers with an empty folder: every site-packages folder of
    ``python`` (its venv's, its base's, the system Pythons'), the project's own packages (the
    task generators and loaders: an editable install lives outside site-packages) and the
    Hugging Face cache (loaded datasets). Real paths; folders that do not exist are left out."""
    found: set[str] = set()
    try:
        found.update(ask_interpreter(python, _SITES_CODE))
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    for pattern in SYSTEM_SITE_GLOBS:
        found.update(glob.glob(pattern))
    package_root = Path(__file__).resolve().parents[1]  # pettingllms_envs
    found.update(str(package_root.parent / name) for name in ("pettingllms_envs",
                                                                "pettingllms_rllib"))
    cache = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                        "huggingface")
    found.update(p for p in (cache, os.environ.get("HF_DATASETS_CACHE")) if p)
    real = sorted({os.path.realpath(p) for p in found if os.path.isdir(p)})
    # a folder inside a hidden one goes with it; "/" and the interpreter's own tree never
    keep = [p for p in real if p != "/" and not any(o != p and _inside(p, o) for o in real)]
    def needed(folder: str) -> bool:  # holds the interpreter (by either path) or tempdir
        paths = (os.path.abspath(python), os.path.realpath(python),
                 os.path.realpath(tempfile.gettempdir()))
        return any(p == folder or p.startswith(folder.rstrip("/") + "/") for p in paths)

    return tuple(p for p in keep if not needed(p))


def package_folder(base: str, caps: SandboxCapabilities,
                    limits: SandboxLimits) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """The allowlisted packages of one run outside bubblewrap, in a folder of the run's own
    (removed with it): ``({"PYTHONPATH": folder}, binds)``. Behind the read-only preamble the
    folder holds an empty mount point per package entry and ``binds`` the ``(host path,
    mount point)`` pairs the preamble mounts (the package's site-packages is hidden); without
    it, links to the packages and no binds. ``({}, ())`` for none."""
    if not limits.packages:
        return {}, ()
    folder = os.path.join(base, "packages")
    os.mkdir(folder)
    os.chmod(folder, 0o755)  # a dropped uid reads it
    pairs = []
    for host, inside in package_binds(caps.python, limits.packages):
        target = os.path.join(folder, os.path.basename(inside))
        if not caps.filesystem_readonly:
            os.symlink(host, target)
        elif os.path.isdir(host):
            os.mkdir(target)
            os.chmod(target, 0o755)
            pairs.append((host, target))
        else:
            with open(target, "w"):
                pass
            os.chmod(target, 0o644)
            pairs.append((host, target))
    return {"PYTHONPATH": folder}, tuple(pairs)


def setup_failed(caps: SandboxCapabilities, returncode: int, stderr_head: bytes) -> bool:
    """Whether the read-only preamble refused to start the program (it never ran)."""
    return caps.filesystem_readonly and returncode == FS_SETUP_EXIT and \
        stderr_head.startswith(FS_SETUP_MESSAGE)
