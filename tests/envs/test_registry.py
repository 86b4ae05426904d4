"""The text-env registry: envs declared by installed packages, PettingZoo's registry both
ways, and errors that name their cause.

* Entry points (the ``pettingllms_rllib.envs`` group): each case runs in a fresh interpreter
  whose path holds a small installed distribution (a ``.dist-info`` folder with
  ``entry_points.txt``), the way pip leaves a third-party package.
* PettingZoo's registry: our ids are made by ``pettingzoo.make``, and ids PettingZoo holds are
  made (wrapped) by ``make_text_env``; Ray's registry is an in-memory one, no cluster.
* A Ray worker that cannot import an env's module gets :class:`EnvImportError` naming the env,
  the module, its ``sys.path`` and the fix (reproduced by unpickling without the module); a
  plain PettingZoo env registered without its wrapper is refused naming the wrapper."""

import importlib
import pickle
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pettingzoo
import pytest
from plain_envs import ClueGame, RelayAEC, VoteGame

from pettingllms_envs.plan_path import PlanPathEnv
from pettingllms_envs.sudoku import SudokuEnv
from pettingllms_rllib.envs import (AECTextEnv, NotATextEnvError, ParallelTextEnv,
                                    get_env_creator, make_text_env, register_text_env,
                                    registered_env_ids, registry, wrap_parallel_env)
from pettingllms_rllib.envs.registry import EnvImportError, _RayEnvCreator


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


# --------------------------------------------------------------------- PettingZoo's registry
@pytest.fixture
def registries(monkeypatch):
    """Registries this test may change: ours, PettingZoo's two, and Ray's (an in-memory one,
    as Ray keeps it before ``ray.init``). Yields Ray's."""
    import ray.tune.registry as ray_registry

    registered_env_ids()  # the entry points land in the real registry first
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(ray_registry, "_global_registry", ray_registry._Registry(prefix="test"))
    saved = [(held, dict(held)) for held in (pettingzoo.parallel_registry,
                                             pettingzoo.aec_registry)]
    yield ray_registry._global_registry
    for held, before in saved:
        held.clear()
        held.update(before)


def _as_ray_worker(monkeypatch):
    """What a Ray worker sees: Ray is up, and Ray's registry holds what the driver shared."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)


def test_every_text_env_id_is_in_pettingzoos_registry_as_a_lazy_entry(registries):
    for env_id in registered_env_ids():
        spec = pettingzoo.spec("parallel", env_id)
        assert spec.id == env_id.replace(f"_v{spec.version}", f"-v{spec.version}")
        assert spec.entry_point == registry._TextEnvEntryPoint(env_id)
    for spelling in ("plan_path_v1", "plan_path-v1", "plan_path"):  # "plan_path": the latest
        env = pettingzoo.make("parallel", spelling, grid_size=3)
        assert type(env) is PlanPathEnv
    made = make_text_env("plan_path_v1", {"grid_size": 3}).reset(seed=7)
    assert pettingzoo.make("parallel", "plan_path_v1", grid_size=3).reset(seed=7) == made


def test_importing_the_envs_puts_the_entry_point_ids_in_pettingzoo_without_loading_them(
        tmp_path):
    run = _run(tmp_path, """
        import sys, pettingzoo, pettingllms_rllib.envs
        assert pettingzoo.spec("parallel", "math_v0").id == "math-v0"
        assert "pettingllms_envs.plan_path" not in sys.modules
        env = pettingzoo.make("parallel", "plan_path_v1", grid_size=3)
        print(type(env).__name__)
    """)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "PlanPathEnv"


def test_an_id_registered_in_code_is_made_by_pettingzoo_and_registering_builds_nothing(
        registries):
    built = []

    def make_plan(**config):
        built.append(config)
        return PlanPathEnv(**config)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # registering again: no "Overriding environment"
        register_text_env("pz_plan_v0", make_plan)
        register_text_env("pz_plan_v0", make_plan)
    assert built == []
    assert pettingzoo.make("parallel", "pz_plan-v0", grid_size=3).grid_size == 3
    assert built == [{"grid_size": 3}]
    register_text_env("pz_plan_v0", SudokuEnv, with_ray=False)  # the latest registration wins
    assert type(pettingzoo.make("parallel", "pz_plan_v0")) is SudokuEnv


def test_an_id_pettingzoo_holds_for_another_env_stays_theirs_and_ours_wins_here(registries):
    pettingzoo.register("parallel", "pz_vote-v0", entry_point=VoteGame)
    register_text_env("pz_vote_v0", wrap_parallel_env(ClueGame), with_ray=False)
    assert type(pettingzoo.make("parallel", "pz_vote_v0")) is VoteGame
    assert type(make_text_env("pz_vote_v0").env) is ClueGame


def test_a_plain_env_registered_with_pettingzoo_is_wrapped_when_made_by_id(registries):
    pettingzoo.register("parallel", "pz_vote-v0", entry_point=VoteGame)
    pettingzoo.register("aec", "pz_relay-v0", entry_point="plain_envs:RelayAEC")  # lazy
    pettingzoo.register("parallel", "games/pz_clue-v0", entry_point=ClueGame,
                        kwargs={"max_rounds": 1})
    for spelling in ("pz_vote_v0", "pz_vote-v0", "pz_vote"):
        env = make_text_env(spelling)
        assert type(env) is ParallelTextEnv and type(env.env) is VoteGame
    env = make_text_env("pz_relay_v0")
    assert type(env) is AECTextEnv and type(env.env) is RelayAEC
    assert env.acting_agents() == ("first",)
    assert make_text_env("games/pz_clue_v0").env.max_rounds == 1  # the spec's kwargs
    assert make_text_env("games/pz_clue-v0", {"max_rounds": 3}).env.max_rounds == 3
    assert type(get_env_creator("pz_vote_v0")()) is ParallelTextEnv
    with pytest.raises(ValueError, match=r"bad env_config for 'pz_vote_v0'"):
        make_text_env("pz_vote_v0", {"max_rounds": 3})


def test_an_id_in_both_pettingzoo_registries_uses_the_aec_one(registries):
    pettingzoo.register("aec", "pz_both-v0", entry_point=RelayAEC)
    pettingzoo.register("parallel", "pz_both-v0", entry_point=VoteGame)
    assert type(make_text_env("pz_both_v0").env) is RelayAEC


def test_a_text_env_registered_with_pettingzoo_is_used_unwrapped(registries):
    pettingzoo.register("parallel", "pz_sudoku-v0", entry_point=SudokuEnv)
    assert type(make_text_env("pz_sudoku_v0")) is SudokuEnv


def test_an_unknown_id_lists_the_ids_of_both_registries(registries):
    pettingzoo.register("aec", "pz_relay-v0", entry_point=RelayAEC)
    with pytest.raises(KeyError) as info:
        make_text_env("nope_v0")
    message = info.value.args[0]
    assert message.startswith("unknown text env 'nope_v0'; registered: [")
    assert "'plan_path_v1'" in message and "'pz_relay-v0'" in message
    assert "'classic/chess-v6'" in message
    assert "'plan_path-v1'" not in message  # our own ids are listed once


def test_a_pettingzoo_env_reaches_ray_workers_that_never_saw_its_registration(
        registries, monkeypatch):
    from ray.tune.registry import ENV_CREATOR

    pettingzoo.register("parallel", "pz_vote-v0", entry_point=VoteGame)
    make_text_env("pz_vote_v0")  # the driver (the config's validation) shares it with Ray
    assert registries.contains(ENV_CREATOR, "pz_vote_v0")
    del pettingzoo.parallel_registry["pz_vote-v0"]
    _as_ray_worker(monkeypatch)
    assert type(make_text_env("pz_vote_v0").env) is VoteGame


# --------------------------------------------------------------------- errors naming the cause
def _user_module(tmp_path, monkeypatch, name: str):
    """A user's env module, importable from ``tmp_path`` (as from the driver's folder)."""
    (tmp_path / f"{name}.py").write_text(
        "from pettingllms_envs.plan_path import PlanPathEnv\n\n\n"
        "class LostEnv(PlanPathEnv):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def _forget(module, tmp_path, monkeypatch):
    """This process can no longer import ``module`` (a Ray worker without it on its path)."""
    monkeypatch.delitem(sys.modules, module.__name__)
    sys.path.remove(str(tmp_path))
    importlib.invalidate_caches()


def _assert_names_the_cause(error: EnvImportError, env_id: str, module: str) -> None:
    message = str(error)
    assert isinstance(error, ImportError)
    assert error.env_id == env_id and error.name == module
    assert f"text env {env_id!r} cannot be loaded" in message
    assert f"module {module!r}" in message
    assert "`imports:` in the experiment YAML" in message
    assert "PYTHONPATH" in message and "working_dir" in message
    assert f"sys.path: {sys.path}" in message


def test_a_creator_whose_module_a_worker_cannot_import_unpickles_to_an_error_naming_it(
        tmp_path, monkeypatch):
    from ray import cloudpickle  # what Ray's registry pickles with

    module = _user_module(tmp_path, monkeypatch, "lost_envs_unpickled")
    blob = cloudpickle.dumps(_RayEnvCreator(module.LostEnv, "lost_v0"))
    assert cloudpickle.loads(blob).creator is module.LostEnv  # where the module is importable
    _forget(module, tmp_path, monkeypatch)
    with pytest.raises(EnvImportError) as info:
        cloudpickle.loads(blob)
    _assert_names_the_cause(info.value, "lost_v0", "lost_envs_unpickled")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    shipped = pickle.loads(pickle.dumps(info.value))  # Ray ships a worker's error pickled
    assert shipped.env_id == "lost_v0" and str(shipped) == str(info.value)


def test_a_module_that_lacks_the_creator_on_the_worker_is_named(tmp_path, monkeypatch):
    module = _user_module(tmp_path, monkeypatch, "lost_envs_changed")
    blob = pickle.dumps(_RayEnvCreator(module.LostEnv, "lost_v0"))
    monkeypatch.delattr(module, "LostEnv")  # the worker's copy of the module is another one
    with pytest.raises(EnvImportError, match=r"defined in module 'lost_envs_changed', but the "
                                             r"copy of 'lost_envs_changed'.* lacks it"):
        pickle.loads(blob)


def test_make_text_env_on_a_worker_that_cannot_import_the_envs_module(
        registries, tmp_path, monkeypatch):
    module = _user_module(tmp_path, monkeypatch, "lost_envs_made")
    register_text_env("lost_v0", module.LostEnv)  # the driver: into Ray's registry too
    del registry._REGISTRY["lost_v0"]  # a worker never ran that registration
    _as_ray_worker(monkeypatch)
    assert type(make_text_env("lost_v0", {"grid_size": 3})) is module.LostEnv
    del registry._REGISTRY["lost_v0"]
    _forget(module, tmp_path, monkeypatch)
    with pytest.raises(EnvImportError) as info:
        make_text_env("lost_v0")
    _assert_names_the_cause(info.value, "lost_v0", "lost_envs_made")


def test_a_creator_returning_a_plain_env_is_refused_when_made_naming_the_wrapper(registries):
    def make_clue(**config):
        return ClueGame(**config)

    def make_relay():
        return RelayAEC()

    register_text_env("clue_fn_v0", make_clue, with_ray=False)
    register_text_env("relay_fn_v0", make_relay, with_ray=False)
    register_text_env("nothing_fn_v0", lambda: object(), with_ray=False)
    with pytest.raises(NotATextEnvError, match=re.escape(
            "make_clue) returned ClueGame, a plain PettingZoo ParallelEnv")) as info:
        make_text_env("clue_fn_v0")
    assert "acting_agents" in str(info.value)
    assert ("wrap it with wrap_parallel_env(...): register_text_env('clue_fn_v0', "
            "wrap_parallel_env(make_clue))") in str(info.value)
    with pytest.raises(NotATextEnvError, match=re.escape(
            "register_text_env('relay_fn_v0', wrap_aec_env(make_relay))")):
        make_text_env("relay_fn_v0")
    with pytest.raises(NotATextEnvError, match="returned object, which is not a text env nor "
                                               "a PettingZoo env"):
        make_text_env("nothing_fn_v0")
    register_text_env("clue_fn_v0", wrap_parallel_env(make_clue), with_ray=False)
    assert type(make_text_env("clue_fn_v0").env) is ClueGame


def test_registering_a_plain_env_instance_or_aec_class_names_the_wrapper(registries):
    with pytest.raises(NotATextEnvError, match=re.escape(
            "got a ClueGame instance, a plain PettingZoo env: pass a creator and wrap it: "
            "register_text_env('clue_obj_v0', wrap_parallel_env(ClueGame))")):
        register_text_env("clue_obj_v0", ClueGame(), with_ray=False)
    with pytest.raises(NotATextEnvError, match=re.escape("wrap_aec_env(RelayAEC)")):
        register_text_env("relay_cls_v0", RelayAEC, with_ray=False)
    with pytest.raises(TypeError, match="got a SudokuEnv instance: pass a creator"):
        register_text_env("sudoku_obj_v0", SudokuEnv(), with_ray=False)
    assert not {"clue_obj_v0", "relay_cls_v0", "sudoku_obj_v0"} & set(registered_env_ids())
    assert "clue_obj-v0" not in pettingzoo.parallel_registry


def test_the_env_libraries_guide_pettingzoo_section_runs(registries):
    guide = Path(__file__).resolve().parents[2] / "docs" / "env_libraries.md"
    section = re.search(r"^## PettingZoo registry\n(.*?)(?=^## |\Z)", guide.read_text(),
                        flags=re.S | re.M).group(1)
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(guide), "exec"), {"__name__": "env_libraries_guide"})
