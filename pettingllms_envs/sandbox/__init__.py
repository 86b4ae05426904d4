"""Run untrusted Python (LLM-written programs) in a throw-away, resource-limited sandbox.

Threat model
------------
The code comes from a model being trained to raise its reward. It is mostly honest but buggy
(infinite loops, huge allocations, 100 MB prints, accidental fork loops) and sometimes hostile
by reward hacking: forging a verdict, reading the tests or another run, reading the host,
reaching the network, leaving processes behind. The guarantees depend on the launcher in use,
which :func:`sandbox_capabilities` reports (``launcher_name``, ``guarantees``, ``notes``):
**bubblewrap** (the default where ``bwrap`` is installed: an empty root per run with only the
interpreter's standard library read-only (no site-packages: only packages a task allowlists,
one by one), a fresh unprivileged uid, pid/network/IPC namespaces, a seccomp filter
without ptrace, a memory cgroup, one sandbox per batch input) or the **unshare** fallback (the
host's file system read-only, site-packages off ``sys.path`` but readable, namespaces where the
kernel allows, a batch harness shared by the inputs), used only where bubblewrap is not
installed or where it is chosen explicitly (``SandboxLimits.launcher`` / a task's ``sandbox:
{launcher: unshare}``, or ``$PETTINGLLMS_SANDBOX_LAUNCHER=unshare``): where bubblewrap is
installed but fails its probe, the first use raises :class:`SandboxUnavailableError` with the
reason and the fix. Neither defends against kernel exploits: use a VM for real adversaries.
The full table per launcher, what is not defended, and how to check a machine:
``docs/sandbox.md``.
The verdict of a code test is never read from the program's own output
(:mod:`pettingllms_envs.code_judge`).

Submodules (one concern each, and the guarantee it holds), bottom up
--------------------------------------------------------------------
Each imports only modules listed above it (no import cycle, no function-local imports), and
no name with a leading underscore is used outside its own module.

* :mod:`.interpreter`, :mod:`.seccomp`, :mod:`.cleanup` (leaves): what the host interpreter holds
  and which of its packages a task may allow; the system calls a run may not make (ptrace,
  namespaces, mounts, ...); removing whatever tree a program left, iteratively, in bounded time.
* :mod:`.capabilities`: :class:`SandboxCapabilities` and the launcher names.
* :mod:`.results`: validated limits, reproducible output text, and which limit a run hit.
* :mod:`.process`: a run's uid and scratch folder; scrubbed environment, fixed rlimits, wall
  clock, whole group killed, output cut. Knows no launcher.
* :mod:`.cgroups`: a ``memory`` cgroup per run (memfd and shm included) and, where unshare runs
  stay root, a ``pids`` cgroup for the process count.
* :mod:`.filesystem`: (unshare) the host's file system read-only but for the run's own folders.
* The launchers, one module each: :mod:`.bwrap` (bubblewrap: an empty root per run; what a run
  can see, be and reach) and :mod:`.unshare` (namespaces around the host's read-only file
  system; also the unisolated "none"). Each holds the whole launcher protocol: ``probe(python)``
  (does it work here and what runs get, checked by real runs through its own ``run``), its
  argv builder (:func:`~.bwrap.bwrap_argv`, :func:`~.unshare.unshare_argv`) and
  ``run(code, stdin, limits, caps, *, uid, probing=False, stdio=None)`` (one run with its
  limits applied, as a :class:`SandboxResult`).
* :mod:`.batch`: (unshare) one sandbox start per batch; each input gets what a single run would.
* :mod:`.probe`: which launcher is used here, probed once per interpreter and choice; every
  fallback noted; a bubblewrap that fails its probe stops the run.
* :mod:`.runner`: the entry points; one sandbox (and uid) per run, handed to its launcher's
  ``run``.
* :mod:`.pair`: a trusted judge and an untrusted program, each in its own sandbox, talking only
  over two pipes (how script tests are judged without the test entering the program's process).
* ``fs_preamble.py``, ``harness_main.py``: run *inside* the unshare sandbox (``python -c``).

Residual risks of the unshare fallback (bubblewrap's are in ``docs/sandbox.md``): the file
system is the host's to read (world-readable files, and without a privilege drop root's too),
but for the interpreter's site-packages, the project's packages and the Hugging Face cache,
which the read-only preamble covers with empty folders; other copies of a dataset or of the
project elsewhere on the host stay readable, and without the read-only view nothing is hidden
(the import path is the standard library only: the interpreter runs with ``-S``, so
``exit()``/``quit()`` are not defined);
where the read-only view is unavailable it is also writable wherever the run's uid may write (``/tmp``;
without a privilege drop, all of root's files) and a deliberately hostile program running as
(namespaced) root could leave its pids cgroup; with it, the scratch folder (and a batch's io
folder) and the private ``/dev/shm`` stay writable, bounded per file and, for ``/dev/shm``, in
total. Total disk use in the scratch folder is bounded only per file and by the wall clock.
A program may create nested user namespaces (their mounts keep the read-only flags, locked).
Without a privilege drop every run is the same (namespaced) root, so one run can read a
concurrent run's scratch folder. System V IPC is the host's (no IPC namespace): a program can
create shared memory segments, semaphores or message queues that outlive it. Within one
:func:`run_python_batch` call the inputs share a user and namespaces with the harness: a
program that deliberately inspects the harness (its ``/proc/1/fd`` or memory) could read the
other inputs or forge the records of later inputs. Without a pid namespace, a process that an
input detaches from the harness's reach (``setsid`` plus a double fork while the harness cannot
walk its children) may live until the batch ends.
"""

from .capabilities import LAUNCHER_ENV_VAR, LAUNCHERS, PYTHON_ENV_VAR, SandboxCapabilities
from .probe import describe_sandbox, sandbox_capabilities
from .results import (LIMIT_HITS, SCRATCH_PLACEHOLDER, SandboxLimits, SandboxResult,
                      SandboxUnavailableError)
from .pair import PairResult, run_python_pair
from .runner import run_python, run_python_batch

__all__ = ["LAUNCHERS", "LAUNCHER_ENV_VAR", "LIMIT_HITS", "PairResult", "SandboxCapabilities",
           "SandboxLimits", "SandboxResult", "SandboxUnavailableError", "run_python",
           "describe_sandbox", "run_python_batch", "run_python_pair", "sandbox_capabilities"]
