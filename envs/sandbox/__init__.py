"""Run untrusted Python (LLM-written programs) in a throw-away, resource-limited subprocess.

Threat model
------------
The code comes from a model being trained. It is mostly honest but buggy (infinite loops, huge
allocations, 100 MB prints, accidental fork loops) and sometimes "hostile by reward hacking"
(reading the trainer's environment variables, using the network, writing outside its folder,
leaving background processes behind). In that order we guarantee: the host process and the
machine survive; a run ends within its wall-clock budget and leaves no process behind; the code
cannot read the host's environment, reach the network or write outside its own folders (where
the OS allows); runs are reproducible (fixed hash seed, no bytecode files). This is *not* a
defence against a determined attacker with a kernel exploit, and where privileges cannot be
dropped (a root host whose interpreter lives in a folder other users cannot read, e.g.
``/root/.pyenv``), the code keeps root's *file* permissions inside its user namespace (to read
with; writes are stopped by the read-only file system where it is available): use a container
or VM for real adversaries.

Submodules (one concern each, and the guarantee it holds)
---------------------------------------------------------
* :mod:`.runner`: the entry points; a fresh scratch folder (and uid) per run, removed after it.
* :mod:`.process`: scrubbed environment, fixed rlimits, wall clock, whole group killed, output cut.
* :mod:`.cgroups`: where runs stay root, a ``pids`` cgroup per run bounds the process count.
* :mod:`.filesystem`: the host's file system is read-only to the program, but for its own folders.
* :mod:`.batch`: one sandbox start per batch; each input gets what a single run would; no hangs.
* :mod:`.probe`: which isolation works here, probed once per interpreter; every fallback noted.
* :mod:`.results`: validated limits, reproducible output text, and which limit a run hit.
* ``fs_preamble.py``, ``harness_main.py``: run *inside* the sandbox (``python -c``), not imported.

Residual risks (accepted for LLM-written code, not for adversaries): the file system is the
host's to read (world-readable files, and without a privilege drop root's too); where the
read-only view is unavailable it is also writable wherever the run's uid may write (``/tmp``;
without a privilege drop, all of root's files) and a deliberately hostile program running as
(namespaced) root could leave its pids cgroup; with it, the scratch folder (and a batch's io
folder) and the private ``/dev/shm`` stay writable, bounded per file and, for ``/dev/shm``, in
total. Total disk use in the scratch folder is bounded only per file and by the wall clock.
System V IPC is the host's (no IPC namespace): a program can create shared memory segments,
semaphores or message queues that outlive it. Within
one :func:`run_python_batch` call the inputs share a user and namespaces with the harness: a
program that deliberately inspects the harness (its ``/proc/1/fd`` or memory) could read the
other inputs or forge the records of later inputs. Without a pid namespace, a process that an
input detaches from the harness's reach (``setsid`` plus a double fork while the harness cannot
walk its children) may live until the batch ends.
"""

from .probe import (LAUNCHER_ENV_VAR, LAUNCHERS, PYTHON_ENV_VAR, SandboxCapabilities,
                    sandbox_capabilities)
from .results import (LIMIT_HITS, SCRATCH_PLACEHOLDER, SandboxLimits, SandboxResult,
                      SandboxUnavailableError)
from .runner import run_python, run_python_batch

__all__ = ["LAUNCHERS", "LAUNCHER_ENV_VAR", "LIMIT_HITS", "SandboxCapabilities", "SandboxLimits",
           "SandboxResult", "SandboxUnavailableError", "run_python", "run_python_batch",
           "sandbox_capabilities"]
