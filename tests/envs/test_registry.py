"""Envs declared by installed packages: the ``pettingllms_rllib.envs`` entry-point group.

Each case runs in a fresh interpreter whose path holds a small installed distribution (a
``.dist-info`` folder with ``entry_points.txt``), the way pip leaves a third-party package."""

import subprocess
import sys
import textwrap


def _install_fake_distribution(root, entry_points: str) -> None:
    (root / "relay_envs").mkdir()
    (root / "relay_envs" / "__init__.py").write_text(textwrap.dedent("""
        from pettingllms_envs.plan_path import PlanPathEnv

        class RelayEnv(PlanPathEnv):
            pass
    """))
    info = root / "relay_envs-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: relay-envs\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pettingllms_rllib.envs]\n" + entry_points)


def _run(root, code: str):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": ""})


def test_an_installed_package_declares_envs_that_the_registry_finds_without_importing_it(
        tmp_path):
    _install_fake_distribution(tmp_path, "relay_v0 = relay_envs:RelayEnv\n")
    run = _run(tmp_path, """
        import sys
        from pettingllms_rllib.envs import make_text_env, registered_env_ids
        assert "relay_envs" not in sys.modules
        ids = registered_env_ids()
        assert "relay_v0" in ids and "plan_path_v0" in ids, ids
        env = make_text_env("relay_v0", {"grid_size": 3})
        print(type(env).__name__)
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "RelayEnv"


def test_an_env_registered_in_code_wins_over_an_entry_point_of_the_same_id(tmp_path):
    _install_fake_distribution(tmp_path, "plan_path_v0 = relay_envs:RelayEnv\n")
    run = _run(tmp_path, """
        from pettingllms_rllib.envs import make_text_env, register_text_env
        from pettingllms_envs.sudoku import SudokuEnv
        register_text_env("plan_path_v0", SudokuEnv, with_ray=False)
        print(type(make_text_env("plan_path_v0")).__name__)
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "SudokuEnv"


def test_a_declared_env_that_cannot_load_names_the_entry_point_and_its_package(tmp_path):
    _install_fake_distribution(tmp_path, "broken_v0 = relay_envs:NoSuchEnv\n")
    run = _run(tmp_path, """
        from pettingllms_rllib.envs import registered_env_ids
        registered_env_ids()
    """)
    assert run.returncode != 0
    assert "text env 'broken_v0' (relay_envs:NoSuchEnv, declared by relay-envs" in run.stderr


def test_the_custom_env_guide_declares_the_group_the_registry_reads():
    import re
    import tomllib
    from pathlib import Path

    from pettingllms_rllib.envs.registry import ENTRY_POINT_GROUP

    guide = Path(__file__).resolve().parents[2] / "docs" / "custom_env.md"
    (block,) = re.findall(r"```toml\n(.*?)```", guide.read_text(), flags=re.S)
    declared = tomllib.loads(block)["project"]["entry-points"]
    assert list(declared) == [ENTRY_POINT_GROUP]
    project = tomllib.loads((guide.parents[1] / "pyproject.toml").read_text())["project"]
    assert set(project["entry-points"][ENTRY_POINT_GROUP]) == {
        "plan_path_v0", "plan_path_v1", "sudoku_v0", "math_v0", "code_v0", "sokoban_v0",
        "reasoning_gym_v0"}
