"""A wall-clock bound on calls that cannot bound themselves: a helper process that is killed
when it runs too long.

math-verify can take seconds on a short hostile answer (``\\left(`` five deep, ``[[[[[1]]]]],``
sixteen times: exponential backtracking in its LaTeX grammar). Its own timeout uses
``signal.alarm``, which works on the main thread only, and Ray may step an env on any thread.
So the parse and the comparison run in a :class:`BoundedWorker`: a persistent child process
(a fresh ``python -c`` interpreter: no lock of a multi-threaded parent is inherited and, unlike
``multiprocessing``'s spawn, the parent's ``__main__`` is never imported again) that answers one
pickled call at a time over its stdin/stdout pipes. The child runs our own trusted code only. A call that has not answered within ``wall_time_s`` gets its
``fallback``: the child is killed and a fresh one is started for the next call. Any thread may
call; calls are serialised by a lock.

Where a child cannot be started at all (a sandboxed host without ``fork``), the call runs in
the calling process unbounded and a warning says so once.
"""

from __future__ import annotations

import importlib
import logging
import pickle
import select
import struct
import subprocess
import sys
import threading
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["BoundedWorker", "serve"]

_START_TIMEOUT_S = 120.0  # importing sympy and math-verify in a fresh interpreter, under load
_HEADER = struct.Struct("!Q")


def _send(stream, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


class UnreadableReply(Exception):
    """A whole message arrived but could not be unpickled here (e.g. an object whose class
    rebuilds itself differently on this side); the stream itself is still in step."""


def _receive(stream) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the other side closed the pipe")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other side closed the pipe")
    try:
        return pickle.loads(data)
    except Exception as exc:  # any class's __new__/__setstate__ may raise while rebuilding
        raise UnreadableReply(f"{type(exc).__name__}: {exc}") from exc


def serve(module_name: str, warm_up: str = "") -> None:
    """The child's loop on its stdin/stdout: ``(function name, args)`` in, ``("ok", value)`` or
    ``("error", text)`` out. ``warm_up`` names a function called once before the first request
    (lazy imports); then ``("ready", None)`` is sent."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the reply stream
    module = importlib.import_module(module_name)
    if warm_up:
        getattr(module, warm_up)()
    _send(replies, ("ready", None))
    while True:
        try:
            name, args = _receive(requests)
        except EOFError:
            return
        try:
            reply = ("ok", getattr(module, name)(*args))
        except Exception as exc:  # reported to the caller, who decides
            reply = ("error", f"{type(exc).__name__}: {exc}"[:300])
        _send(replies, reply)


class BoundedWorker:
    """Calls functions of ``module_name`` in a child process, each bounded by ``wall_time_s``.

    Args:
        module_name: importable module whose functions are called (by name) in the child.
        wall_time_s: longest a call may take before its fallback is returned.
        warm_up: name of a no-argument function the child runs once before serving.
    """

    def __init__(self, module_name: str, wall_time_s: float, warm_up: str | None = None):
        if not wall_time_s > 0:
            raise ValueError(f"wall_time_s must be positive, got {wall_time_s!r}")
        self.module_name, self.wall_time_s, self.warm_up = module_name, wall_time_s, warm_up
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._inline = False
        self.timeouts = 0  # calls cut short so far (for logs and tests)

    def call(self, name: str, args: tuple, fallback: Any) -> Any:
        """``module.name(*args)`` in the child; ``fallback`` if it times out or raises."""
        with self._lock:
            if not self._inline and self._process is None:
                self._start()
            if self._inline:
                try:
                    return getattr(importlib.import_module(self.module_name), name)(*args)
                except Exception:
                    return fallback
            try:
                _send(self._process.stdin, (name, args))
                if not self._ready(self.wall_time_s):
                    self.timeouts += 1
                    logger.info("%s.%s took over %.1f s; cut short", self.module_name, name,
                                self.wall_time_s)
                    self._stop()
                    return fallback
                status, value = _receive(self._process.stdout)
            except UnreadableReply as exc:
                logger.info("%s.%s: its result could not be read here (%s); fallback used",
                            self.module_name, name, exc)
                return fallback
            except (OSError, EOFError, ValueError, pickle.PickleError) as exc:
                logger.warning("%s worker failed (%r); restarting it", self.module_name, exc)
                self._stop()
                return fallback
            if status != "ok":
                logger.debug("%s.%s raised in the worker: %s", self.module_name, name, value)
                return fallback
            return value

    def close(self) -> None:
        """Stop the child (a later call starts a new one)."""
        with self._lock:
            self._stop()

    def _ready(self, timeout: float) -> bool:
        readable, _, _ = select.select([self._process.stdout], [], [], timeout)
        return bool(readable)

    def _start(self) -> None:
        code = (f"from pettingllms_envs.bounded_worker import serve; "
                f"serve({self.module_name!r}, {self.warm_up or ''!r})")
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, close_fds=True, bufsize=0)
            if not self._ready(_START_TIMEOUT_S) or \
                    _receive(self._process.stdout)[0] != "ready":
                raise OSError("the worker did not start in time")
        except (OSError, EOFError, ValueError, pickle.PickleError) as exc:
            logger.warning("no bounded worker for %s (%r): its calls run here, WITHOUT a "
                           "time bound", self.module_name, exc)
            self._stop()
            self._inline = True

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self._process = None
