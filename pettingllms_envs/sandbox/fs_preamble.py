"""The read-only file system preamble: runs INSIDE the sandbox, never imported by the library.

:mod:`pettingllms_envs.sandbox` starts it as ``python -I -S -B -c <this file's source>
HOST_MNT_NS SHM_BYTES DIR... -- HIDE... -- SOURCE TARGET... -- COMMAND...`` inside the
launcher's mount namespace, as its (namespaced) root: it bind-mounts each ``SOURCE`` (a package
a task allowlists) on its ``TARGET``, covers each ``HIDE`` folder (site-packages, the project's
packages: what holds answers) with an empty read-only tmpfs, makes every mount read-only except
the ``DIR`` folders, mounts a private tmpfs on /dev/shm, drops all capabilities for good and
becomes ``COMMAND`` (same pid, environment and file descriptors). Any Python 3; failures end it with exit status 125 and a
``sandbox: read-only file system setup failed:`` message before the program runs.
"""
import ctypes, os, sys
try:
    import _signal as signals
except ImportError:
    import signal as signals

RDONLY, NOSUID, NODEV, REMOUNT, BIND, REC, PRIVATE = 1, 2, 4, 32, 4096, 1 << 14, 1 << 18
PER_MOUNT = {b"ro": RDONLY, b"nosuid": NOSUID, b"nodev": NODEV, b"noexec": 8,
             b"noatime": 1024, b"nodiratime": 2048, b"relatime": 1 << 21, b"nosymfollow": 256}
DEVICES = (b"null", b"zero", b"full", b"random", b"urandom", b"tty")


def unescape(raw):
    parts = raw.split(b"\\")
    return parts[0] + b"".join(bytes([int(p[:3], 8)]) + p[3:] for p in parts[1:])


def main(host_namespace, shm_bytes, writable, hidden, binds, command):
    if os.readlink("/proc/self/ns/mnt") == host_namespace:
        raise OSError("not in a mount namespace of its own; the host's mounts stay as they are")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]

    def call(result, what):
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, "%s: %s" % (what, os.strerror(code)))

    def mount(source, target, fstype, flags, data=None):
        call(libc.mount(source, target, fstype, flags, data), "mount %r" % (target,))

    cwd = os.getcwd()
    mount(None, b"/", None, REC | PRIVATE)  # nothing done here propagates to the host
    wanted = {}  # mount point -> flags it must have; every other mount: RDONLY|NOSUID|NODEV
    for index in range(0, len(binds) - 1, 2):  # allowlisted packages, before their folder hides
        mount(os.fsencode(binds[index]), os.fsencode(binds[index + 1]), None, BIND)
    for folder in hidden:  # nothing of what they hold stays reachable by path
        folder = os.fsencode(folder)
        if os.path.isdir(folder) and not os.path.islink(folder):
            mount(b"tmpfs", folder, b"tmpfs", RDONLY | NOSUID | NODEV, b"size=4096,mode=0555")
            wanted[folder] = RDONLY | NOSUID | NODEV
    for folder in writable:
        folder = os.fsencode(os.path.realpath(folder))
        mount(folder, folder, None, BIND)  # a mount of its own, left writable
        wanted[folder] = NOSUID | NODEV
    for name in DEVICES:  # the harmless devices keep working under a nodev /dev
        path = b"/dev/" + name
        try:
            mount(path, path, None, BIND)
            wanted[path] = RDONLY | NOSUID
        except OSError:
            pass
    shm = os.path.realpath(b"/dev/shm")
    if os.path.isdir(shm):  # private and bounded; POSIX semaphores still work
        mount(b"tmpfs", shm, b"tmpfs", NOSUID | NODEV, ("size=%d,mode=1777" % shm_bytes).encode())
        wanted[shm] = NOSUID | NODEV
    with open("/proc/self/mountinfo", "rb") as handle:
        mounts = [(f[0], f[1], unescape(f[4]), f[5]) for f in map(bytes.split, handle)]
    covered = set((point, parent) for _, parent, point, _ in mounts)
    refused = []
    for mount_id, _, point, options in mounts:
        if (point, mount_id) in covered:
            continue  # another mount sits on this one at the same place
        flags = 0
        for option in options.split(b","):
            flags |= PER_MOUNT.get(option, 0)
        want = wanted.get(point, RDONLY | NOSUID | NODEV)
        if flags & want != want:
            try:  # repeating the flags a user namespace locked (atime, nosuid, ...)
                mount(None, point, None, REMOUNT | BIND | flags | want)
            except OSError as exc:
                refused.append((point, want, exc))
    for point, want, exc in refused:  # fine only if what the path reaches now is protected
        try:
            reached = os.statvfs(point).f_flag
        except FileNotFoundError:
            continue  # covered by another mount: no path reaches it
        if reached & want != want:
            raise exc
    with open("/proc/sys/kernel/cap_last_cap", "rb") as handle:
        last_cap = int(handle.read())
    for cap in range(last_cap + 1):  # the bounding set: an exec as root regains nothing
        call(libc.prctl(24, cap, 0, 0, 0), "drop capability %d" % cap)
    libc.prctl(47, 4, 0, 0, 0)  # clear the ambient set (no such set before Linux 4.3)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    sets = (ctypes.c_uint32 * 6)()
    call(libc.capget(header, sets), "capget")
    sets[2] = sets[5] = 0  # no inheritable capabilities
    call(libc.capset(header, sets), "capset")
    os.chdir(cwd)  # onto the folder's own mount (the old cwd is the one beneath it)
    for number in (signals.SIGPIPE, signals.SIGXFSZ):  # as the launcher left them
        signals.signal(number, signals.SIG_DFL)
    os.execvp(command[0], command)


try:
    first = sys.argv.index("--")
    second = sys.argv.index("--", first + 1)
    third = sys.argv.index("--", second + 1)
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:first], sys.argv[first + 1:second],
         sys.argv[second + 1:third], sys.argv[third + 1:])
except BaseException as exc:
    os.write(2, ("sandbox: read-only file system setup failed: %s\n" % (exc,)).encode(
        "utf-8", "replace"))
    os._exit(125)
