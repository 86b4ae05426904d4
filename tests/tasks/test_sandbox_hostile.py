"""The sandbox against an attacker: one case per attack, each with its verdict.

A program under training is optimised to raise its reward, so every hole between "what the
program does" and "the score" is a hack it will find. Each test below is one attack that was
tried against the sandbox, or one that is already contained and must stay so, and asserts
the verdict: the run returns a normal, scored result; the host, other runs and the score are
untouched. CI runs this file twice: as root and as an unprivileged user
(``make test-sandbox-unprivileged``). Cases that need a launcher guarantee this machine does
not give are skipped with the reason :func:`sandbox_capabilities` reports.
"""

import ctypes
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pettingllms_envs.code_data import load_humaneval
from pettingllms_envs.code_judge import run_tests
from pettingllms_envs.sandbox import (
    SandboxLimits,
    run_python,
    run_python_batch,
    sandbox_capabilities,
)
from pettingllms_envs.sandbox.cleanup import remove_tree

FAST = SandboxLimits(wall_time_s=5, cpu_time_s=5)
REPO = Path(__file__).resolve().parents[2]
CAPS = sandbox_capabilities()
needs_bwrap = pytest.mark.skipif(CAPS.launcher_name != "bubblewrap",
                                 reason=f"needs the bubblewrap launcher ({CAPS.notes})")

# ------------------------------------------------------------------------------ the score
FORGER = """
import os, sys
unit = sys.stdin.read()  # whatever the judge sends, including any nonce
record = b'\\n__pettingllms_harness_result__{"calls": [], "error": ""}\\n'
for fd in range(3, 32):
    for line in (record, b'\\n__pettingllms_harness_result__' + unit.encode()[:200] +
                 b' {"passed": true, "got": "", "error": ""}\\n'):
        try:
            os.write(fd, line)
        except OSError:
            pass
os.write(1, record)
os._exit(0)
"""


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/3", "HumanEval/4"])
def test_a_solution_that_forges_harness_results_gets_the_reward_of_an_empty_one(task_id):
    problem = next(p for p in load_humaneval() if p.id == task_id)
    forged = run_tests(problem, FORGER, problem.tests, limits=FAST)
    empty = run_tests(problem, "", problem.tests, limits=FAST)
    assert sum(o.passed for o in forged) == sum(o.passed for o in empty) == 0
    honest = run_tests(problem, problem.reference, problem.tests, limits=FAST)
    assert all(o.passed for o in honest), [o for o in honest if not o.passed]  # a real solution passes


#: Finds the test wherever it can reach (the calling frames, every container the garbage
#: collector tracks, the readable files in the temporary and home folders), and returns what
#: its asserts want.
MEMORY_SEARCHER = """
import ast, gc, os, sys

def _texts():
    found, frame = [], sys._getframe(1)
    wanted = lambda text: isinstance(text, str) and "candidate(" in text
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                found.append(value)
                if isinstance(value, dict):
                    found.extend(value.values())
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, dict):
            found.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            found.extend(obj)
    for top in ("/tmp", "/var/tmp", "/dev/shm", "/sandbox", "/home", os.getcwd()):
        for root, dirs, files in os.walk(top):
            for name in files:
                try:
                    with open(os.path.join(root, name), errors="replace") as handle:
                        text = handle.read(1 << 16)
                except (OSError, ValueError):
                    continue
                if wanted(text):
                    found.append(text)
    return [text for text in found if wanted(text)]

def has_close_elements(numbers, threshold):
    for text in _texts():
        for line in text.splitlines():
            try:
                node = ast.parse(line.strip()).body[0].test
                if [ast.literal_eval(a) for a in node.left.args] == [numbers, threshold]:
                    return ast.literal_eval(node.comparators[0])
            except Exception:
                continue
    return None
"""


def test_a_solution_that_searches_its_process_and_files_for_the_test_finds_nothing():
    problem = next(p for p in load_humaneval() if p.id == "HumanEval/0")
    limits = SandboxLimits(wall_time_s=20, cpu_time_s=20)
    # The attack works wherever the test is within reach (here: in its own module's globals).
    control = (MEMORY_SEARCHER + f"\nunit = {{'script': {problem.tests[0].script!r}}}\n"
               "candidate = has_close_elements\nexec(unit['script'])\nprint('PASSED')\n")
    assert run_python(control, limits=limits).stdout == "PASSED\n"
    searched = run_tests(problem, MEMORY_SEARCHER, problem.tests, limits=limits)
    empty = run_tests(problem, "", problem.tests, limits=limits)
    assert sum(o.passed for o in searched) == sum(o.passed for o in empty) == 0
    assert all(o.got == "None" for o in searched)  # it found no test to copy


def test_a_batch_input_can_neither_read_nor_forge_another_input():
    program = """
import os, sys, glob
data = sys.stdin.read()
seen = []
for path in ["/proc/1/fd/3", "/proc/1/fd/0", "/proc/self/fd/3"] + glob.glob("/proc/*/fd/*"):
    try:
        with open(path, "rb") as handle:
            seen.append(handle.read(4096))
    except OSError:
        pass
for fd in range(3, 64):
    try:
        os.write(fd, b"FORGED-PASS")
    except OSError:
        pass
others = [s for s in seen if b"secret-" in s and data.encode() not in s]
print(data, "saw-another" if others else "alone")
"""
    secrets = [f"secret-{i}-{os.urandom(4).hex()}" for i in range(4)]
    results = run_python_batch(program, secrets, limits=FAST)
    for secret, result in zip(secrets, results):
        assert result.ok and result.stdout == f"{secret} alone\n", result
        assert "FORGED" not in result.stdout


@needs_bwrap  # the unshare fallback's residual risks: see pettingllms_envs/sandbox/__init__.py
def test_concurrent_runs_cannot_see_each_other():
    token = os.urandom(6).hex()
    secret = f"hidden-{token}"
    writer = (f"import time\nopen('note.txt', 'w').write({secret!r})\n"
              "open('/tmp/note.txt', 'w').write(" + repr(secret) + ")\ntime.sleep(2)\n")
    read_only = ("/proc", "/sys", "/usr", "/dev/pts", *(CAPS.layout.trees if CAPS.layout else ()))
    reader = f"""
import os, time
needle = b"hidden-" + {token.encode()!r}  # split, so this program's own text does not match
time.sleep(0.5)
hits = []
for top in ["/", "/tmp", "/dev/shm", "/sandbox"]:
    for root, dirs, files in os.walk(top):
        if root.startswith({read_only!r}):  # read-only binds: nothing another run wrote
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue  # devices (a pty master would block) and links
            try:
                with open(path, "rb") as handle:
                    if needle in handle.read(1 << 16):
                        hits.append(os.path.join(root, name))
            except OSError:
                pass
print("found" if hits else "nothing", hits)
"""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("w", run_python(writer, limits=FAST)))
    thread.start()
    read = run_python(reader, limits=SandboxLimits(wall_time_s=20, cpu_time_s=20))
    thread.join()
    assert out["w"].ok and read.ok, (out["w"], read)
    assert read.stdout.startswith("nothing"), read.stdout


# ------------------------------------------------------------------------------ the host
@needs_bwrap
def test_host_files_are_invisible():
    private = tempfile.NamedTemporaryFile(prefix="sbx-root-only-", delete=False)
    private.write(b"root secret")
    private.close()
    os.chmod(private.name, 0o600)
    targets = [str(REPO / "README.md"), str(REPO / "pyproject.toml"), "/etc/shadow",
               os.path.expanduser("~/.gitconfig"), private.name, "/etc/passwd"]
    program = f"""
for path in {targets!r}:
    try:
        open(path, "rb").read(1)
        print("READ", path)
    except OSError as exc:
        print("no", type(exc).__name__)
"""
    try:
        result = run_python(program, limits=FAST)
    finally:
        os.unlink(private.name)
    assert result.ok and "READ" not in result.stdout, result.stdout


@needs_bwrap
def test_host_unix_sockets_and_the_ray_session_folder_are_invisible(tmp_path):
    path = str(tmp_path / "host.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    os.chmod(tmp_path, 0o755)
    os.chmod(path, 0o777)
    program = f"""
import os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect({path!r}); s.sendall(b"hello"); print("CONNECTED")
except OSError as exc:
    print("refused", type(exc).__name__)
print("ray", os.path.exists("/tmp/ray"), os.path.exists("/dev/shm/plasma"))
"""
    try:
        result = run_python(program, limits=FAST)
    finally:
        server.close()
    assert result.ok and "CONNECTED" not in result.stdout, result.stdout
    assert "ray False False" in result.stdout


def test_the_network_is_unreachable_even_on_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    program = f"""
import socket
s = socket.socket(); s.settimeout(2)
try:
    s.connect(("127.0.0.1", {port})); print("CONNECTED")
except OSError as exc:
    print("unreachable", exc.errno)
"""
    try:
        result = run_python(program, limits=FAST)
    finally:
        server.close()
    assert result.ok and "CONNECTED" not in result.stdout and result.network_isolated


@needs_bwrap
def test_runs_are_an_unprivileged_uid_without_capabilities():
    result = run_python("import os\nprint(os.getuid(), os.geteuid())\n"
                        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])",
                        limits=FAST)
    uid, euid, caps = result.stdout.split()
    assert result.ok and int(uid) != 0 and int(euid) != 0 and int(caps, 16) == 0


# ------------------------------------------------------------------------------ memory and IPC
@pytest.mark.skipif(CAPS.memory_limit != "cgroup",
                    reason=f"no writable memory cgroup here ({CAPS.notes})")
def test_memfd_beyond_the_memory_limit_fails():
    program = """
import os
fd = os.memfd_create("hog")
block = b"x" * (1 << 20)
written = 0
try:
    for _ in range(900):
        os.write(fd, block)
        written += 1
    print("WROTE", written)
except OSError as exc:
    print("refused at", written, exc.errno)
"""
    result = run_python(program, limits=SandboxLimits(wall_time_s=20, cpu_time_s=20,
                                                      memory_mb=256))
    assert "WROTE" not in result.stdout, result
    assert not result.ok or "refused" in result.stdout


@needs_bwrap
def test_system_v_shared_memory_is_private_and_dies_with_the_run():
    key = 0x5E0000 + os.getpid() % 0xFFFF
    program = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
shmid = libc.shmget({key}, 1 << 20, 0o1000 | 0o666)
print("created", shmid >= 0)
"""
    result = run_python(program, limits=FAST)
    assert result.ok and "created True" in result.stdout, result
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.shmget(key, 0, 0o666) == -1  # not on the host: it lived in the run's namespace


@needs_bwrap
def test_ptrace_is_refused():
    program = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
child = os.fork()
if child == 0:
    time.sleep(2); os._exit(0)
for target in (child, os.getppid(), 1):
    print(libc.ptrace(0x4206, target, 0, 0), ctypes.get_errno())  # PTRACE_SEIZE
os.kill(child, 9)
"""
    result = run_python(program, limits=FAST)
    assert result.ok, result
    assert all(line.startswith("-1 ") for line in result.stdout.splitlines()), result.stdout


@needs_bwrap  # unshare: allowed, with the read-only flags locked (test_sandbox.py)
def test_nested_user_namespaces_are_refused():
    program = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.unshare(0x10000000), ctypes.get_errno())
"""
    result = run_python(program, limits=FAST)
    assert result.ok and result.stdout.startswith("-1 "), result


# ------------------------------------------------------------------------------ never raise, never leak
def test_a_deep_folder_chain_returns_a_result_and_leaves_nothing_on_disk(own_tempdir):
    # A private temp folder: another test worker's live sandboxes share the system one.
    program = "import os\nfor _ in range(1200):\n    os.mkdir('d'); os.chdir('d')\nprint('deep')\n"
    result = run_python(program, limits=SandboxLimits(wall_time_s=20, cpu_time_s=20))
    batch = run_python_batch(program, ["", ""], limits=SandboxLimits(wall_time_s=20,
                                                                     cpu_time_s=20))
    assert result.stdout == "deep\n" and all(r.stdout == "deep\n" for r in batch)
    assert list(own_tempdir.iterdir()) == []


def test_cleanup_survives_hostile_trees(tmp_path):
    root = tmp_path / "hostile"
    root.mkdir()
    os.chdir(root)
    try:
        for _ in range(1200):  # deeper than PATH_MAX and Python's recursion limit
            os.mkdir("c")
            os.chdir("c")
        os.symlink(".", "loop")
        os.symlink("/etc", "etc")
    finally:
        os.chdir(tmp_path)
    (root / "many").mkdir()
    for i in range(20_000):
        (root / "many" / f"f{i}").touch()
    locked = root / "locked"
    locked.mkdir()
    (locked / "x").touch()
    locked.chmod(0)
    assert remove_tree(str(root)) is True
    assert not root.exists() and Path("/etc/passwd").exists()


def test_a_program_that_kills_its_own_group_is_reported_as_such():
    result = run_python("import os, signal\nos.kill(0, signal.SIGKILL)\n", limits=FAST)
    assert not result.ok and result.limit_hit is None, result
    assert "resource limit" not in result.describe_failure()


# ------------------------------------------------------------------------------ already contained
def test_daemons_do_not_outlive_the_run():
    marker = f"/tmp/sbx-daemon-{os.getpid()}"
    program = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        open({marker!r}, "w").write("alive")
        os._exit(0)
    os._exit(0)
print("left a daemon")
"""
    result = run_python(program, limits=FAST)
    assert result.ok
    time.sleep(4)
    assert not os.path.exists(marker)  # killed with the run, and /tmp is not the host's anyway


def test_disk_fill_ends_in_a_limit_not_a_full_disk():
    program = "block = b'x' * (1 << 20)\nwith open('fill', 'wb') as f:\n    while True: f.write(block)\n"
    result = run_python(program, limits=FAST)
    assert not result.ok and result.limit_hit in ("file_size", "wall_time"), result


@pytest.mark.parametrize("bomb", [
    "import threading, time\nwhile True: threading.Thread(target=time.sleep, args=(10,)).start()\n",
    "import os\nfds = []\nwhile True: fds.append(os.open('/dev/null', os.O_RDONLY))\n",
])
def test_thread_and_fd_bombs_end_in_a_limit(bomb):
    result = run_python(bomb, limits=FAST)
    assert not result.ok, result
    assert result.limit_hit is not None or "Too many open files" in result.stderr, result


def test_limits_cannot_be_raised():
    program = ("import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n"
               "    print('RAISED')\nexcept (ValueError, OSError) as exc:\n    print('refused')\n")
    result = run_python(program, limits=FAST)
    assert result.ok and result.stdout == "refused\n"


def test_importing_torch_is_a_normal_verdict():
    result = run_python("import torch\nprint(torch.ones(2).sum().item())\n",
                        limits=SandboxLimits(wall_time_s=30, cpu_time_s=30))
    # It ran to a clean failure: the import path is the standard library only, whatever the
    # launcher, so the import raises in the program (no crash, no limit, no signal).
    assert result.exit_code == 1 and not result.ok, result
    assert not result.timed_out and result.killed_by_signal is None and result.limit_hit is None
    assert result.stdout == ""
    assert result.stderr.rstrip().endswith("ModuleNotFoundError: No module named 'torch'"), result
