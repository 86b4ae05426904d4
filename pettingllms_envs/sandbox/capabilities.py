"""What a host allows and which launcher gives it: :class:`SandboxCapabilities` and the launcher
names (:data:`LAUNCHERS`, :func:`chosen_launcher`).

The bottom of the package's data types, with :mod:`~pettingllms_envs.sandbox.results` above it:
every other module names these, and this one imports only
:mod:`~pettingllms_envs.sandbox.interpreter` (a leaf), so nothing here can close an import
cycle. The probing that fills a :class:`SandboxCapabilities` is each launcher's own
(:func:`pettingllms_envs.sandbox.bwrap.probe`, :func:`pettingllms_envs.sandbox.unshare.probe`),
and the choice between them with its cache is :mod:`~pettingllms_envs.sandbox.probe`.
"""

from __future__ import annotations

import dataclasses
import os

from .interpreter import InterpreterLayout

__all__ = ["LAUNCHERS", "LAUNCHER_ENV_VAR", "PYTHON_ENV_VAR", "SandboxCapabilities",
           "check_launcher", "chosen_launcher"]

#: Environment variable naming an interpreter to run sandboxed code with, e.g. a system Python
#: that an unprivileged uid can execute (enables the privilege drop on root hosts).
PYTHON_ENV_VAR = "PETTINGLLMS_SANDBOX_PYTHON"


@dataclasses.dataclass(frozen=True)
class SandboxCapabilities:
    """What isolation this host allows, as probed (how: :mod:`~pettingllms_envs.sandbox.probe`).

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
