"""A seccomp filter that keeps a sandboxed program away from other processes and namespaces.

bubblewrap loads it (``--seccomp FD``) just before it starts the program, so it holds for the
program and everything it starts. It is a classic-BPF allow-list in reverse: every system call
is allowed except the ones below, which fail with an error (the program sees ``EPERM`` or, for
``clone3``, ``ENOSYS``, on which glibc falls back to ``clone``):

* ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``: reading or steering another process
  (the issue's "PTRACE_SEIZE on the batch harness");
* ``unshare``, ``setns``, ``clone`` with a namespace flag, ``clone3``: new namespaces (a nested
  user namespace would give the program capabilities over fresh mounts, tmpfs memory included);
* ``mount`` and the new mount API, ``pivot_root``, ``umount2``: changing its view of files;
* ``keyctl``, ``add_key``, ``request_key``: kernel keyrings are not namespaced;
* ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``: large kernel attack surface
  no test program needs;
* ``open_by_handle_at``/``name_to_handle_at``: opening files by handle, past the mount view;
* module and kexec calls.

On x86_64 the x32 ABI (syscall numbers with bit 30 set) is refused as a whole, and a call made
under any other architecture than the host's kills the process (so the i386 entry point cannot
slip past the numbers below). Unknown architectures get no filter:
:func:`seccomp_program` returns ``None`` and the capabilities say so.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct

__all__ = ["seccomp_program", "BLOCKED_SYSCALLS"]

# struct seccomp_data: nr (u32) at 0, arch (u32) at 4, args[6] (u64) from 16.
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
#: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
_CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000 | 0x00000080

#: The refused calls: name -> (x86_64 number, aarch64 number), from the kernel's syscall tables.
_BLOCKED = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "bpf": (321, 280), "perf_event_open": (298, 241),
    "userfaultfd": (323, 282), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264), "init_module": (175, 105), "finit_module": (313, 273),
    "delete_module": (176, 106), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
}
#: The refused calls, by name.
BLOCKED_SYSCALLS = tuple(_BLOCKED)
#: machine -> (column in :data:`_BLOCKED`, audit arch, clone number, clone3 number).
_ARCHES = {"x86_64": (0, 0xC000003E, 56, 435), "aarch64": (1, 0xC00000B7, 220, 435)}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


@functools.lru_cache(maxsize=None)
def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as the raw ``struct sock_filter`` array bubblewrap reads, for ``machine``
    (default: this host's ``platform.machine()``); ``None`` where the numbers are unknown."""
    entry = _ARCHES.get(machine or platform.machine())
    if entry is None:
        return None
    column, arch, clone_nr, clone3_nr = entry
    blocked = [numbers[column] for numbers in _BLOCKED.values()]
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    # Layout: [arch check][nr load][x32][one JEQ per blocked nr][clone3][clone][ALLOW]
    #         [clone: load flags, JSET, ALLOW][EPERM][ENOSYS][KILL]
    body: list[tuple[str, int, object, object, int]] = []  # (kind, code, jt, jf, k), labels
    body.append(("i", _LD_ABS, 0, 0, _ARCH))
    body.append(("i", _JEQ, 0, "kill", arch))
    body.append(("i", _LD_ABS, 0, 0, _NR))
    if machine in (None, "x86_64") and arch == 0xC000003E:
        body.append(("i", _JGE, "eperm", 0, _X32_BIT))
    for nr in blocked:
        body.append(("i", _JEQ, "eperm", 0, nr))
    body.append(("i", _JEQ, "enosys", 0, clone3_nr))
    body.append(("i", _JEQ, "clone", 0, clone_nr))
    body.append(("i", _RET, 0, 0, _ALLOW))
    labels = {"clone": len(body)}
    body.append(("i", _LD_ABS, 0, 0, _ARG0_LOW))
    body.append(("i", _JSET, "eperm", 0, _CLONE_NAMESPACE_FLAGS))
    body.append(("i", _RET, 0, 0, _ALLOW))
    labels["eperm"] = len(body)
    body.append(("i", _RET, 0, 0, eperm))
    labels["enosys"] = len(body)
    body.append(("i", _RET, 0, 0, enosys))
    labels["kill"] = len(body)
    body.append(("i", _RET, 0, 0, _KILL_PROCESS))

    def offset(target: object, at: int) -> int:
        if isinstance(target, str):
            jump = labels[target] - at - 1
            if not 0 <= jump <= 255:
                raise AssertionError(f"seccomp jump out of range: {jump}")
            return jump
        return int(target)

    return b"".join(_insn(code, offset(jt, i), offset(jf, i), k)
                    for i, (_, code, jt, jf, k) in enumerate(body))
