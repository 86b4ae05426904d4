"""The batch harness: runs INSIDE the sandbox, never imported by the library.

:func:`pettingllms_envs.sandbox.run_python_batch` starts it as ``python -s -B -c <this file's
source> <args>``: it compiles the untrusted program once, then forks a fresh child per test
input (own stdin/stdout/stderr, own CPU/file limits, own wall clock, swept afterwards; a reset
scratch folder and, behind the read-only file system preamble, an emptied private /dev/shm)
and writes one record per input to its stdout, a file the host owns.

Constraints (why it looks unusual): it must run on any Python 3 the sandbox may use (no walrus,
no match) and keep the state a forked child inherits close to a fresh interpreter's: no imports
beyond the few below (removed from the child's sys.modules), no signal handlers, no buffered
writes to sys.stdout/sys.stderr, raw file descriptors only (a file object closed in the child
would close a descriptor number the program may reuse).
"""
import os, sys
_PRELOADED = frozenset(sys.modules)
if sys.path and sys.path[0] == "":
    del sys.path[0]  # the scratch folder: nothing the program leaves there may shadow a module
import gc, resource, select, stat, time, warnings

_SCRIPT = "solution.py"
_KILL = 9
_SWEEP_S = 3.0


def _write_all(fd, data):
    view = memoryview(data)
    while len(view):
        view = view[os.write(fd, view):]


def _pread(fd, size, offset):
    parts = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 20), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _copy(src, offset, length, dst):
    while length > 0:
        chunk = os.pread(src, min(length, 1 << 20), offset)
        if not chunk:
            raise ValueError("truncated input")
        _write_all(dst, chunk)
        offset += len(chunk)
        length -= len(chunk)


def _read_index(fd):
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise ValueError("truncated input index")
        data += chunk
    line = data[:data.index(b"\n")]
    offset, cases = len(line) + 1, []
    for item in line.split():
        index, length = item.split(b":")
        cases.append((int(index), offset, int(length)))
        offset += int(length)
    return cases


def _compile(path):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        source = _pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning must reach each run's stderr: exec those
        try:
            return source, compile(source, path, "exec", dont_inherit=True)
        except Exception:
            return source, None


def _remove(path):
    stack = [path]
    while stack:
        current = stack[-1]
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            stack.pop()
            continue
        if stat.S_ISDIR(mode):
            os.chmod(current, 0o700)
            names = os.listdir(current)
            if names:
                stack.extend(os.path.join(current, name) for name in names)
                continue
            os.rmdir(current)
        else:
            os.unlink(current)
        stack.pop()


def _reset_scratch(scratch, source):
    try:
        mode = os.lstat(scratch).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        os.unlink(scratch)
        mode = None
    if mode is None:
        os.mkdir(scratch, 0o700)
    os.chmod(scratch, 0o700)
    for name in os.listdir(scratch):
        _remove(os.path.join(scratch, name))
    fd = os.open(os.path.join(scratch, _SCRIPT),
                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        _write_all(fd, source)
    finally:
        os.close(fd)


def _empty(folder):
    """Remove what earlier inputs left in a folder private to this sandbox (its /dev/shm)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        try:
            _remove(os.path.join(folder, name))
        except OSError:
            pass


def _unnamed_file(folder, name):
    os.chmod(folder, 0o700)
    path = os.path.join(folder, name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.unlink(path)
    return fd


def _pids_max_events(path):
    if path is None:
        return -1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        for line in data.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == b"max":
                return int(parts[1])
    except (OSError, ValueError):
        pass
    return -1


def _wait_exit(pid, timeout):
    deadline = time.monotonic() + timeout
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    pause = 0.0005
    try:
        while True:
            remaining = deadline - time.monotonic()
            if pidfd is not None:
                if remaining <= 0:
                    return False
                if select.select([pidfd], [], [], remaining)[0]:
                    return True
                continue
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            if remaining <= 0:
                return False
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.02)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _children():
    me = os.getpid()
    try:
        fd = os.open("/proc/%d/task/%d/children" % (me, me), os.O_RDONLY | os.O_CLOEXEC)
        try:
            return [int(p) for p in os.read(fd, 1 << 20).split()]
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return []


def _sweep(init):
    """Kill and reap every process but us: all of the pid namespace when we are its init,
    else our children, again and again (orphans reparent to us, a subreaper)."""
    deadline = time.monotonic() + _SWEEP_S
    while True:
        targets = [-1] if init else _children()
        for pid in targets:
            try:
                os.kill(pid, _KILL)
            except OSError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)


def _fork(init):
    for attempt in range(20):
        try:
            return os.fork()
        except OSError:
            if attempt == 19:
                raise
            _sweep(init)
            time.sleep(0.05)


def _enter_case(fds, closing, scratch, script, rlimits, code, flags, libc, harness):
    """In the forked child: become the program's process, or die trying (never return to
    the harness loop on failure)."""
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in closing:
            os.close(fd)
        os.chdir(scratch)
        for res, value in rlimits:
            hard = resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(res, (value, value))
        if libc is not None:
            libc.prctl(1, _KILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the harness
            if os.getppid() != harness:
                os._exit(_KILL + 128)
        if code is None:
            os.execv(sys.executable, [sys.executable] + flags + [_SCRIPT])
        module = type(sys)("__main__")
        namespace = module.__dict__
        namespace["__loader__"] = sys.modules["_frozen_importlib_external"].SourceFileLoader(
            "__main__", script)
        namespace["__annotations__"] = {}
        namespace["__builtins__"] = sys.modules["builtins"]
        namespace["__file__"] = script
        namespace["__cached__"] = None
        sys.modules["__main__"] = module
        sys.argv = [_SCRIPT]
        if hasattr(sys, "orig_argv"):
            sys.orig_argv = [sys.executable] + flags + [_SCRIPT]
        sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
        for name in list(sys.modules):
            if name not in _PRELOADED:
                del sys.modules[name]
        return code, namespace
    except BaseException as exc:
        try:
            _write_all(2, ("sandbox: could not start this input: %r\n" % (exc,)).encode())
        finally:
            os._exit(127)


def _record(index, kind, value, timed_out, cpu, wall, sizes, pids_hit, out, err, tail):
    head = "R %d %s %d %d %.6f %.6f %d %d %d %d %d %d\n" % (
        index, kind, value, timed_out, cpu, wall, sizes[0], sizes[1], pids_hit, len(out),
        len(err), len(tail))
    _write_all(1, head.encode("ascii") + out + err + tail)


def _main():
    scratch, io_dir, events, shm = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    cpu, fsize, nofile, cap, tail_cap = (int(x) for x in sys.argv[5:10])
    wall = float(sys.argv[10])
    flags = sys.argv[11:]
    events = None if events == "-" else events
    shm = None if shm == "-" else shm
    rlimits = [(resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, fsize),
               (resource.RLIMIT_NOFILE, nofile)]
    blob = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    cases = _read_index(blob)
    script = os.path.join(os.getcwd(), _SCRIPT)
    source, code = _compile(script)
    init = os.getpid() == 1
    libc = None
    if not init:
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
        except Exception:
            libc = None
    harness = os.getpid()
    if hasattr(gc, "freeze"):
        gc.freeze()  # the children's collections skip our objects: fewer copy-on-write pages
    for index, offset, length in cases:
        _write_all(1, b"S %d\n" % index)
        fds = []
        try:
            _reset_scratch(scratch, source)
            if shm is not None:
                _empty(shm)
            for name in ("stdin", "stdout", "stderr"):
                fds.append(_unnamed_file(io_dir, name))
            _copy(blob, offset, length, fds[0])
            os.lseek(fds[0], 0, os.SEEK_SET)
            before = _pids_max_events(events)
            started = time.monotonic()
            pid = _fork(init)
        except Exception as exc:
            for fd in fds:
                os.close(fd)
            message = ("sandbox: could not start this input: %r" % (exc,)).encode()
            _record(index, "nostart", 0, 0, 0.0, 0.0, (0, 0), -1, b"", message, b"")
            continue
        if pid == 0:
            return _enter_case(fds, fds + [blob], scratch, script, rlimits, code, flags, libc,
                               harness)
        exited = _wait_exit(pid, wall)
        if not exited:
            os.kill(pid, _KILL)
        _, status, usage = os.wait4(pid, 0)
        elapsed = time.monotonic() - started
        _sweep(init)
        after = _pids_max_events(events)
        pids_hit = -1 if before < 0 or after < 0 else int(after > before)
        sizes = [os.fstat(fd).st_size for fd in fds[1:]]
        out = _pread(fds[1], min(sizes[0], cap), 0)
        err = _pread(fds[2], min(sizes[1], cap), 0)
        tail = _pread(fds[2], tail_cap, max(cap, sizes[1] - tail_cap)) if sizes[1] > cap else b""
        for fd in fds:
            os.close(fd)
        if os.WIFSIGNALED(status):
            kind, value = "signal", os.WTERMSIG(status)
        else:
            kind, value = "exit", os.WEXITSTATUS(status)
        _record(index, kind, value, int(not exited), usage.ru_utime + usage.ru_stime, elapsed,
                sizes, pids_hit, out, err, tail)
    return None


_case = _main()
if _case is not None:
    _code, _namespace = _case
    del _case
    try:
        exec(_code, _namespace)
    except SystemExit:
        raise
    except BaseException as _exc:
        _tb = _exc.__traceback__
        if _tb is not None and _tb.tb_frame.f_globals is globals():
            _tb = _tb.tb_next  # our own frame: the interpreter would not show one
        _exc.__traceback__ = _tb
        sys.last_type, sys.last_value, sys.last_traceback = type(_exc), _exc, _tb
        try:
            sys.excepthook(type(_exc), _exc, _tb)
        except BaseException as _hook_exc:
            sys.stderr.write("Error in sys.excepthook:\n")
            sys.__excepthook__(type(_hook_exc), _hook_exc, _hook_exc.__traceback__)
            sys.stderr.write("\nOriginal exception was:\n")
            sys.__excepthook__(type(_exc), _exc, _tb)
        if isinstance(_exc, KeyboardInterrupt) and os.getppid() != 1:
            # Not pid 1 of a namespace (so neither would run_python's program be): like the
            # interpreter, finish (threads, atexit, flush), then die by SIGINT.
            if "threading" in sys.modules:
                sys.modules["threading"]._shutdown()
            import atexit
            atexit._run_exitfuncs()
            for _stream in (sys.stdout, sys.stderr):
                try:
                    _stream.flush()
                except Exception:
                    pass
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        # 130: what an interpreter that is pid 1 (as in run_python) ends with after an
        # unhandled KeyboardInterrupt, since it cannot kill itself with SIGINT.
        raise SystemExit(130 if isinstance(_exc, KeyboardInterrupt) else 1)
