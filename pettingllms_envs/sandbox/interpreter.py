"""What the host's interpreter holds and what of it a run may see: the layout bubblewrap binds
(:class:`InterpreterLayout`), the site-packages folders both launchers hide, and the packages a
task allowlists (:func:`check_packages`, :func:`package_binds`).

A leaf of the package (it imports nothing of it), so the data types above it
(:class:`~pettingllms_envs.sandbox.capabilities.SandboxCapabilities`,
:class:`~pettingllms_envs.sandbox.results.SandboxLimits`) and both launchers can use it without
an import cycle. Everything here is asked from the interpreter itself (trusted: the host's own
Python, run once per question, outside any sandbox).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import subprocess

__all__ = ["FORBIDDEN_PACKAGES", "InterpreterLayout", "PACKAGES_MOUNT", "PYTHON_MOUNT",
           "SITE_PACKAGE_GLOBS", "SYSTEM_SITE_GLOBS", "ask_interpreter", "check_packages",
           "is_within", "interpreter_layout", "package_binds"]

#: Where the interpreter's real prefix (its standard library) is mounted inside the bubblewrap
#: sandbox: a path no host folder's permissions stand in front of, whatever the host path was
#: (a venv under /tmp, pyenv under a 0700 home, symlinks).
PYTHON_MOUNT = "/sandbox-python"
#: Where a task's allowlisted packages are mounted, one entry each; on the program's sys.path
#: (``PYTHONPATH``) only when the task declares packages.
PACKAGES_MOUNT = "/sandbox-packages"
#: Packages no task may allow: the project itself holds every task's generators and loaders.
FORBIDDEN_PACKAGES = ("pettingllms_envs", "pettingllms_rllib")
#: Site folders of system Pythons under /usr (bound whole for the C library and tools): each is
#: covered by an empty folder, so no installed package is readable there either.
SYSTEM_SITE_GLOBS = ("/usr/lib/python3*/site-packages", "/usr/lib/python3*/dist-packages",
                     "/usr/local/lib/python3*/site-packages",
                     "/usr/local/lib/python3*/dist-packages")


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
        return tuple(target for _, target in self.binds)


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


def ask_interpreter(python: str, code: str, *args: str) -> dict:
    """Run ``code`` with ``python -I`` (a scrubbed environment) and parse its JSON answer;
    raises ``ValueError`` (and what ``subprocess.run`` raises) when it fails."""
    done = subprocess.run([python, "-I", "-c", code, *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    if done.returncode != 0:
        raise ValueError(f"{python} could not describe itself: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def is_within(path: str, tree: str) -> bool:
    """Whether ``path`` is ``tree`` or below it (plain string comparison: no symlinks resolved)."""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def interpreter_layout(python: str) -> InterpreterLayout:
    """Where ``python``'s real base prefix lives and what of it a run may see: the prefix at
    :data:`PYTHON_MOUNT`, its site-packages hidden, the base interpreter (not a venv's
    ``bin/python``: a venv adds only site-packages) as the executable. Raises
    ``OSError``/``ValueError``."""
    answer = ask_interpreter(python, _LAYOUT_CODE)
    base, exe = answer["base"], answer["exe"]
    if base == "/" or not os.path.isdir(base):
        raise ValueError(f"{python}: unusable base prefix {base!r}")
    if answer["exec_base"] != base:
        raise ValueError(f"{python}: exec_prefix {answer['exec_base']} differs from prefix "
                         f"{base}; not supported by the bubblewrap launcher")
    if not is_within(exe, base):
        raise ValueError(f"{python}: its interpreter {exe} lies outside its prefix {base}")
    inside_exe = PYTHON_MOUNT + exe[len(base.rstrip("/")):]
    hidden = []
    for folder in answer["sites"]:
        if is_within(folder, base):
            hidden.append(PYTHON_MOUNT + folder[len(base.rstrip("/")):])
    for pattern in SYSTEM_SITE_GLOBS:
        hidden += [p for p in sorted(glob.glob(pattern)) if os.path.isdir(p)
                   and not os.path.islink(p)]
    env: list[tuple[str, str]] = []
    libdir = answer.get("libdir") or ""
    if answer.get("shared") and is_within(libdir, base):
        # a shared libpython is found through the build's absolute RUNPATH, which does not
        # exist in the sandbox: point the loader at the mounted copy
        env.append(("LD_LIBRARY_PATH", PYTHON_MOUNT + libdir[len(base.rstrip("/")):]))
    hidden = list(dict.fromkeys(hidden))
    # a folder inside a covered one is gone with it (and has no mount point left)
    hidden = [h for h in hidden if not any(o != h and is_within(h, o) for o in hidden)]
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
    answer = ask_interpreter(python, _PACKAGES_CODE, *packages)
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
