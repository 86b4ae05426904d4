"""The sandbox's pure parts, without running anything: the seccomp program, the bubblewrap
command line, the value codec the judge trusts, and the launcher choice."""

import json
import math
import struct

import pytest

from pettingllms_envs import code_values
from pettingllms_envs.sandbox import LAUNCHER_ENV_VAR, LAUNCHERS, sandbox_capabilities
from pettingllms_envs.sandbox.bwrap import bwrap_argv
from pettingllms_envs.sandbox.interpreter import InterpreterLayout
from pettingllms_envs.sandbox.seccomp import BLOCKED_SYSCALLS, seccomp_program


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_program_checks_the_arch_and_refuses_every_listed_call(machine):
    program = seccomp_program(machine)
    assert program is not None and len(program) % 8 == 0
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    assert insns[0] == (0x20, 0, 0, 4)  # load the arch first
    returns = [k for code, _, _, k in insns if code == 0x06]
    assert 0x7FFF0000 in returns and 0x80000000 in returns  # allow, and kill on a foreign arch
    compared = {k for code, _, _, k in insns if code == 0x15}
    assert len(compared) >= len(BLOCKED_SYSCALLS)  # one equality test per refused call
    for i, (code, jt, jf, _) in enumerate(insns):  # every jump lands inside the program
        if code in (0x15, 0x35, 0x45):
            assert i + 1 + max(jt, jf) < len(insns)


def test_no_seccomp_program_for_an_unknown_architecture():
    assert seccomp_program("pdp11") is None


def test_the_bubblewrap_command_binds_only_the_interpreter_and_system_folders():
    layout = InterpreterLayout(
        "/sandbox-python/bin/python3.11", (("/home/me/.pyenv/3.11", "/sandbox-python"),),
        hidden=("/sandbox-python/lib/python3.11/site-packages",))
    packages = (("/opt/venv/lib/python3.11/site-packages/numpy", "/sandbox-packages/numpy"),)
    argv = bwrap_argv("/usr/bin/bwrap", layout, ["/sandbox-python/bin/python3.11", "solution.py"],
                      script_fd=5, seccomp_fd=6, status_fd=7, run_uid=2_000_123,
                      tmpfs_bytes=1 << 20, env={"HOME": "/sandbox"}, disable_userns=False,
                      packages=packages)
    binds = [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv)
             if arg in ("--ro-bind", "--bind")]
    assert ("/home/me/.pyenv/3.11", "/sandbox-python") in binds
    assert packages[0] in binds
    sources = [source for source, _ in binds]
    assert not any(b in ("/", "/home", "/home/me", "/opt", "/opt/venv", "/tmp", "/root")
                   for b in sources)
    assert not any("site-packages" in source and not source.endswith("/numpy")
                   for source in sources)  # no whole site-packages folder is bound
    hidden = argv.index("/sandbox-python/lib/python3.11/site-packages")
    assert argv[hidden - 1] == "--tmpfs" and "--remount-ro" in argv[hidden:]
    assert "--bind" not in argv  # nothing of the host is writable
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent",
                 "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--seccomp") + 1] == "6"
    tail = argv[argv.index("--") + 1:]
    assert tail[0].endswith("setpriv") and "2000123" in tail and tail[-2:] == [
        "/sandbox-python/bin/python3.11", "solution.py"]


def test_unprivileged_bubblewrap_maps_the_program_to_nobody():
    layout = InterpreterLayout("/sandbox-python/bin/python3", (("/usr", "/sandbox-python"),))
    argv = bwrap_argv("bwrap", layout, ["/usr/bin/python3", "solution.py"], script_fd=3,
                      seccomp_fd=None, status_fd=4, run_uid=None, tmpfs_bytes=1 << 20, env={},
                      disable_userns=True)
    assert "--unshare-user" in argv and argv[argv.index("--uid") + 1] == "65534"
    assert "--disable-userns" in argv and "--seccomp" not in argv


VALUES = [None, True, False, 0, -7, 2 ** 200, 1.5, -0.0, math.inf, 1e-300, 2 + 3j, "", "é\x00",
          b"\x00\xff", [1, [2, (3,)]], (), {"a": {1, 2}, (1, 2): frozenset({"x"})}]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_plain_values_survive_the_codec_exactly(value):
    back = code_values.decode(json.loads(json.dumps(code_values.encode(value))))
    assert repr(back) == repr(value) and type(back) is type(value)


def test_nan_survives_the_codec():
    assert math.isnan(code_values.decode(code_values.encode(math.nan)))


@pytest.mark.parametrize("value", [object(), range(3), [iter([])], True.__class__.__mro__,
                                   type("Int", (int,), {})(3)],
                         ids=["object", "range", "list_of_iterator", "tuple_of_classes",
                              "int_subclass"])
def test_non_plain_values_are_refused(value):
    with pytest.raises(TypeError):
        code_values.encode(value)


@pytest.mark.parametrize("tree", [{"x": 1}, {"i": "zz"}, {"l": 3}, {"d": [[1]]}, [1, 2],
                                  {"i": "1", "s": "2"}, "text", 3, {"f": 7}])
def test_malformed_trees_are_refused_not_guessed(tree):
    with pytest.raises(ValueError):
        code_values.decode(tree)


def test_an_unknown_launcher_is_refused_with_the_known_ones(monkeypatch):
    monkeypatch.setenv(LAUNCHER_ENV_VAR, "docker")
    with pytest.raises(ValueError, match="bubblewrap"):
        sandbox_capabilities()
    assert LAUNCHERS == ("auto", "bubblewrap", "unshare", "none")


def test_the_capabilities_name_the_launcher_and_what_it_guarantees():
    caps = sandbox_capabilities()
    assert caps.launcher_name in ("bubblewrap", "unshare", "none")
    assert caps.guarantees[0] == f"launcher: {caps.launcher_name}"
    assert any(g.startswith("memory:") for g in caps.guarantees)
