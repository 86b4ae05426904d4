"""Per-iteration timers report this iteration's seconds, not a running average.

RLlib's default timer reduction is an exponential average (coefficient 0.01): an iteration of
171.8 s had reported 155.2 s. Here three iterations of clearly different lengths (a sleep added
to sampling) must each report their own time within 5%, and the time shares add up.
"""

import time

import pytest

ray = pytest.importorskip("ray")

from ray.rllib.utils.metrics import ENV_RUNNER_SAMPLING_TIMER, TIMERS  # noqa: E402
from toy_ray import AGENTS, TINY, toy_ray_session  # noqa: E402

from pettingllms_rllib.algorithms import ATGRPOConfig  # noqa: E402
from pettingllms_rllib.algorithms.at_grpo import (AT_GRPO_RESULTS,  # noqa: E402
                                                  ITERATION_SECONDS, TIME_SECONDS, TIME_SHARE)
from pettingllms_rllib.algorithms.env_runner import LLMEnvRunner  # noqa: E402
from pettingllms_rllib.core.timing import TIME_PARTS  # noqa: E402
from pettingllms_rllib.experiment import multi_agent_kwargs  # noqa: E402

pytestmark = pytest.mark.integration
EXTRA_SAMPLING_S = [1.5, 0.2, 0.8]


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    yield from toy_ray_session(num_cpus=2)


def test_timers_equal_each_iterations_wall_time(monkeypatch):
    measured = []
    original_sample, original_draw = LLMEnvRunner.sample, LLMEnvRunner.draw_task_seeds

    def timed_sample(self, **kwargs):
        start = time.perf_counter()
        out = original_sample(self, **kwargs)
        measured.append(time.perf_counter() - start)
        return out

    def slow_draw(self, num_tasks):  # work of the runner outside the engine: env time
        time.sleep(EXTRA_SAMPLING_S[len(measured)])
        return original_draw(self, num_tasks)

    monkeypatch.setattr(LLMEnvRunner, "sample", timed_sample)
    monkeypatch.setattr(LLMEnvRunner, "draw_task_seeds", slow_draw)
    config = (ATGRPOConfig().environment("toy_score_v0", env_config={"max_turns": 1})
              .llm(model="tiny-random", tiny_model_config=TINY, max_new_tokens=6)
              .training(num_branches=4, num_tasks_per_iteration=2, lr=1e-3)
              .multi_agent(**multi_agent_kwargs("per_role", AGENTS)).debugging(seed=0))
    algo = config.build_algo()
    try:
        for iteration in range(len(EXTRA_SAMPLING_S)):
            result = algo.train()
            sampling = result[TIMERS][ENV_RUNNER_SAMPLING_TIMER]
            assert sampling == pytest.approx(measured[iteration], rel=0.05)
            stats = result[AT_GRPO_RESULTS]
            assert stats[ITERATION_SECONDS] == pytest.approx(result["time_this_iter_s"],
                                                             rel=0.05)
            seconds = stats[TIME_SECONDS]
            assert set(seconds) == set(TIME_PARTS)
            assert sum(seconds.values()) == pytest.approx(stats[ITERATION_SECONDS], rel=1e-6)
            assert sum(stats[TIME_SHARE].values()) == pytest.approx(1.0, rel=1e-6)
            assert seconds["env"] >= EXTRA_SAMPLING_S[iteration]
            assert seconds["generate"] > 0 and seconds["learner"] > 0
    finally:
        algo.stop()
