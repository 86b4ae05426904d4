"""The result keys of ``pettingllms_rllib/metric_keys.py``: defined once, equal to RLlib's where
they repeat RLlib's, covering every documented key, and used by the modules that log and read
them instead of string literals."""

import ast
import re
import sys
from pathlib import Path

import pytest

from pettingllms_rllib import metric_keys as keys

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pettingllms_rllib"
#: The public constants of metric_keys: name -> value.
CONSTANTS = {name: value for name, value in vars(keys).items()
             if name.isupper() and not name.startswith("_") and isinstance(value, str)}
PLACEHOLDER = re.compile(r"^<[a-z_]+>$")


# ------------------------------------------------------------------ (a) RLlib's constants
def test_group_names_equal_rllibs_constants():
    from ray.rllib.utils import metrics

    assert keys.ENV_RUNNERS == metrics.ENV_RUNNER_RESULTS
    assert keys.LEARNERS == metrics.LEARNER_RESULTS
    assert keys.EVALUATION == metrics.EVALUATION_RESULTS


def test_the_gradient_norm_is_the_key_rllibs_learner_logs():
    from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER

    # Learner.postprocess_gradients_for_module: f"gradients_{optimizer_name}_global_norm"
    assert keys.GRADIENT_NORM == f"gradients_{DEFAULT_OPTIMIZER}_global_norm"


def test_no_constant_redefines_one_of_rllib():
    """Names RLlib's metrics module defines are not defined again here (its keys are imported
    from ``ray.rllib.utils.metrics`` where they are logged)."""
    from ray.rllib.utils import metrics

    assert not set(CONSTANTS) & {name for name in vars(metrics) if name.isupper()}


def test_metric_keys_imports_only_the_standard_library():
    tree = ast.parse((PACKAGE / "metric_keys.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_old_import_places_still_work():
    from pettingllms_rllib.algorithms import at_grpo, learner

    for name in ("AT_GRPO_RESULTS", "ITERATION_SECONDS", "TIME_SECONDS", "TIME_SHARE",
                 "RUNNERS_LOST", "TASKS_DROPPED", "HELD_OUT_SUCCESS"):
        assert getattr(at_grpo, name) == CONSTANTS[name]
    for name in ("NUM_GRADIENT_STEPS", "NUM_SAMPLES_TRAINED", "KL_TO_START", "KL_TO_REFERENCE"):
        assert getattr(learner, name) == CONSTANTS[name]
    assert at_grpo.HELD_OUT_SUCCESS == "held_out_success_rate"


# --------------------------------------------------------------- (b) well-formed and unique
def _names_listed_in_groups() -> set[str]:
    """The constants metric_keys.py names inside its GROUPS dict (by name, since a value such
    as ``success_rate`` is in two groups under two names)."""
    tree = ast.parse((PACKAGE / "metric_keys.py").read_text())
    groups = next(node.value for node in tree.body if isinstance(node, ast.AnnAssign)
                  and isinstance(node.target, ast.Name) and node.target.id == "GROUPS")
    return {node.id for value in groups.values for node in ast.walk(value)
            if isinstance(node, ast.Name)}


def test_every_constant_is_a_non_empty_string_in_a_group():
    assert len(CONSTANTS) >= 40
    for name, value in CONSTANTS.items():
        assert isinstance(value, str) and value, name
        assert value.strip() == value and "/" not in value, name  # one path segment
    unplaced = sorted(set(CONSTANTS) - _names_listed_in_groups())
    assert not unplaced, f"constants in no group of metric_keys.GROUPS: {unplaced}"
    grouped = {value for members in keys.GROUPS.values() for value in members}
    assert grouped <= set(CONSTANTS.values())


@pytest.mark.parametrize("group", sorted(keys.GROUPS))
def test_values_are_unique_within_their_group(group):
    members = keys.GROUPS[group]
    assert len(members) == len(set(members)), sorted(v for v in members if members.count(v) > 1)


def test_every_constant_says_what_it_measures():
    """Each constant has a ``#:`` comment right above it."""
    lines = (PACKAGE / "metric_keys.py").read_text().splitlines()
    for name in CONSTANTS:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{name} = "))
        assert lines[index - 1].startswith("#:"), f"{name} has no #: comment"


# ------------------------------------------------------------------- (c) documented keys
def _rllib_keys_we_log() -> set[str]:
    """Keys this library logs under RLlib's own constants (imported, not redefined)."""
    from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN,
                                         EVALUATION_RESULTS, NUM_EPISODES)

    return {f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}", f"{EVALUATION_RESULTS}/{NUM_EPISODES}"}


def _resolves(key: str) -> bool:
    """Whether a documented key (``<module>``-style placeholders allowed) is a key of
    metric_keys (a group path, one of the group's values, and the name under it for keys
    whose value is a dict by module or part, ``at_grpo/time_s/<part>``), or one of the RLlib
    keys this library logs."""
    if key in _rllib_keys_we_log():
        return True
    parts = key.split("/")
    for group, members in keys.GROUPS.items():
        prefix = group.split("/") if group else []
        for value in members:
            pattern = prefix + [value]
            if (group, value) in keys.NAMED_SUBKEYS:
                pattern.append(keys.NAMED_SUBKEYS[(group, value)])
            if len(parts) == len(pattern) and all(
                    want == got or (PLACEHOLDER.match(want) and got)
                    for want, got in zip(pattern, parts)):
                return True
    return False


def _diagnostics_table_keys() -> list[str]:
    text = (REPO / "docs" / "at_grpo.md").read_text()
    section = text.split("## Learning diagnostics", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [key for row in rows for key in re.findall(r"`([^`]+)`", row)
            if key.split("/")[0] in (keys.LEARNERS, keys.AT_GRPO_RESULTS, keys.ENV_RUNNERS,
                                     keys.EVALUATION)]


def test_the_resolver_tells_keys_apart():
    assert _resolves("learners/<module>/entropy") and _resolves("learners/tool/entropy")
    assert _resolves("at_grpo/time_s/<part>") and _resolves("env_runners/agent/a/parse_error_rate")
    assert not _resolves("learners/<module>/no_such_key")
    assert not _resolves("at_grpo/entropy") and not _resolves("evaluation/episode_turns_mean")


def test_every_key_of_the_learning_diagnostics_table_is_a_constant():
    documented = _diagnostics_table_keys()
    assert len(documented) >= 10, documented  # the table was found and parsed
    missing = [key for key in documented if not _resolves(key)]
    assert not missing, f"documented in docs/at_grpo.md but not in metric_keys: {missing}"


def test_every_key_named_in_the_docs_is_a_constant():
    """Beyond the table: every ``env_runners/...``-style key any Markdown file names."""
    files = [path for path in REPO.rglob("*.md")
             if not any(part.startswith(".") or part in ("node_modules", "venv")
                        for part in path.relative_to(REPO).parts)]
    named = {(path.relative_to(REPO).as_posix(), key) for path in files
             for key in re.findall(r"`((?:env_runners|learners|at_grpo|evaluation)/[^`\s]+)`",
                                   path.read_text(errors="replace"))
             if not key.endswith("/")}
    assert named
    missing = sorted((path, key) for path, key in named if not _resolves(key))
    assert not missing, f"keys in the docs that metric_keys does not define: {missing}"


# ------------------------------------------------------ (d) producers use the constants
#: The modules that log or read result keys, relative to the package.
USERS = ("algorithms/learner.py", "algorithms/at_grpo.py", "algorithms/held_out.py",
         "algorithms/runner_recovery.py", "algorithms/rollouts.py",
         "algorithms/iteration_metrics.py", "plotting.py", "progress.py", "cli.py",
         "trial_results.py")
# reporting.py is not checked: it reads eval.json records, whose ``summary`` keys are
# ``evaluation.metrics.summarize``'s own schema (some of them, e.g. ``success_rate``, are
# spelled like result keys but are not result keys).
#: Per module: names of mappings that are not results, whose keys may share a result key's
#: spelling. A string that indexes one of them (``name[...]``, ``... in name``) is allowed:
#: held_out.py copies ``evaluation.metrics.summarize``'s ``summary`` (and its per-agent
#: ``stats``) into the evaluation results; learner.py reads the ``num_samples`` column of a
#: packed batch (``core/batching.py``), not the ``env_runners/num_samples`` result key;
#: cli.py prints an eval record's best ``constant`` answer (``evaluation/constant_answers.py``).
NOT_RESULTS = {"algorithms/held_out.py": {"summary", "stats"},
               "algorithms/learner.py": {"module_batch"},
               "cli.py": {"constant"}}
MIN_LENGTH = 8  # shorter values ("agent", "entropy", "time_s") are common words


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _indexing(tree: ast.AST, names: set[str]) -> set[int]:
    """String constants used as a key of one of ``names``: ``name["k"]``, ``"k" in name``."""
    found = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id in names):
            found.add(id(node.slice))
        if (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.In, ast.NotIn))
                and isinstance(node.comparators[0], ast.Name)
                and node.comparators[0].id in names):
            found.add(id(node.left))
    return found


def result_key_literals(source: str, not_results: set[str] = frozenset()) -> list[tuple]:
    """(line, literal) for every string literal (plain, or the literal part of an f-string)
    that is, or has a part between ``/`` (or regex anchors ``^``, ``$``) that is, a metric_keys
    value of >= MIN_LENGTH characters; docstrings skipped. Words of prose are not split out:
    "held-out evaluation" is a message, not the ``evaluation`` key."""
    values = {value for value in CONSTANTS.values() if len(value) >= MIN_LENGTH}
    tree = ast.parse(source)
    skip = _docstrings(tree) | _indexing(tree, set(not_results))
    hits = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skip
                and values & set(re.split(r"[/^$]", node.value))):
            hits.append((node.lineno, node.value))
    return sorted(hits)


def test_the_literal_check_finds_plain_strings_paths_and_f_string_parts():
    source = ('"""success_rate in a docstring"""\n'
              'a = "success_rate"\n'
              'b = "env_runners/episode_turns_mean"\n'
              'c = f"{module}/policy_behaviour_ratio"\n'
              'd = summary["turns_mean"]\n'
              'e = "entropy"\n'
              'f = re.compile(r"^learners/([^/]+)/kl_to_start$")\n'
              'g = "held-out evaluation of the untrained team"\n')
    assert [line for line, _ in result_key_literals(source)] == [2, 3, 4, 5, 7]
    assert [line for line, _ in result_key_literals(source, {"summary"})] == [2, 3, 4, 7]


@pytest.mark.parametrize("module", USERS)
def test_users_name_result_keys_by_their_constants(module):
    hits = result_key_literals((PACKAGE / module).read_text(), NOT_RESULTS.get(module, set()))
    assert not hits, (f"{module} spells result keys as literals (use pettingllms_rllib."
                      f"metric_keys): {hits}")
