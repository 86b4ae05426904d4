"""Which launcher runs here and what it guarantees: :func:`sandbox_capabilities`, probed once
per interpreter and launcher choice, then cached.

The bubblewrap launcher (:mod:`~pettingllms_envs.sandbox.bwrap`) is tried first: its probe run
must show a network and IPC namespace other than the host's, a uid other than 0 on a root
host, a read-only ``/usr``, no descriptor beyond 0-2, a refused ``ptrace`` and no installed
package on its ``sys.path`` (the site-packages folders empty). Where ``bwrap``
is installed but fails it, nothing falls back silently: :func:`sandbox_capabilities` raises
:class:`~pettingllms_envs.sandbox.SandboxUnavailableError` with the probe's reason and the fix.
The unshare launcher (:mod:`~pettingllms_envs.sandbox.unshare`, whose docstring says what it
probes: privilege drop, namespaces, network, read-only view, process budget) is probed only
where ``bwrap`` is not installed (launcher ``auto``) or where it is chosen explicitly
(``SandboxLimits.launcher``, a task's ``sandbox: {launcher: unshare}``, or
``$PETTINGLLMS_SANDBOX_LAUNCHER=unshare``); the notes say why bubblewrap was not used.

Process budget: RLIMIT_NPROC per run where runs get a uid of their own (or, unprivileged, a
user namespace of their own); where runs stay root, a v1 ``pids`` cgroup per run if one is
writable, else the process budget is *not* enforced and :func:`sandbox_capabilities` says so
(``process_limit == "none"``).

This module only chooses: each launcher probes itself (``probe`` in its own module, through its
own ``run``), so nothing here is imported back by a launcher.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading

from . import bwrap, unshare
from .capabilities import PYTHON_ENV_VAR, SandboxCapabilities, chosen_launcher
from .results import SandboxUnavailableError

__all__ = ["describe_sandbox", "sandbox_capabilities"]

logger = logging.getLogger(__package__)  # one logger for the package: "pettingllms_envs.sandbox"

_CAPS_LOCK = threading.Lock()
_CAPS_CACHE: dict[tuple[str, str], SandboxCapabilities | BaseException] = {}
_ANNOUNCED: set[tuple[str, str]] = set()


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


def _probe_choice(python: str, choice: str) -> SandboxCapabilities:
    """The capabilities for the launcher ``choice``, each probed by its own module; the
    launchers are reached as ``bwrap.probe``/``unshare.probe`` (module attributes), so a test
    can stand in for one."""
    notes: list[str] = []
    if choice == "none":
        return SandboxCapabilities(python, (), False, False, None, "none", None,
                                   ("no launcher chosen",))
    if choice in ("auto", "bubblewrap"):
        if bwrap.find_bwrap() is None and choice == "auto":
            notes.append("bubblewrap unusable: no `bwrap` binary (Debian: apt-get install "
                         "bubblewrap)")
        else:
            caps, why = bwrap.probe(python)
            if caps is not None:
                return caps
            raise SandboxUnavailableError(bwrap.unusable_message(why))
    else:
        notes.append(f"bubblewrap not used: launcher {choice!r} chosen")
    caps = unshare.probe(python)
    return dataclasses.replace(caps, notes=tuple(notes) + caps.notes)
