"""The results ``ATGRPO`` logs each iteration, on RLlib's ``MetricsLogger``.

What was sampled (``env_runners/``), the advantages' and rewards' statistics per module, the
staleness of the rows an update starts on, the learners' results and the iteration's time
shares (``at_grpo/``). Kept apart from the algorithm so ``at_grpo.py`` holds its steps only;
the names are ``pettingllms_rllib.metric_keys``'s (RLlib's own where RLlib has one). Each value
is this iteration's (``window=1``) except RLlib's counters, which it sums; every module gets
its columns every iteration (NaN when it had no rows), because Tune's ``progress.csv`` keeps
only the columns of its first row.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Collection, Mapping, Sequence

import numpy as np
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
)

from pettingllms_rllib.core.advantages import AdvantageResult, mean_group_reward_std
from pettingllms_rllib.core.records import SampleRecord
from pettingllms_rllib.core.timing import (TIME_PARTS, Stopwatch, rollout_seconds_waited,
                                           time_shares)
from pettingllms_rllib.core.tree_sampler import EpisodeSummary
from pettingllms_rllib.metric_keys import (
    ADVANTAGE_STD,
    AGENT,
    AGENT_EPISODE_RETURN_MEAN,
    AGENT_PARSE_ERROR_RATE,
    AGENT_RESPONSE_TOKENS_MEAN,
    AGENT_ROLLOUT_ERRORS,
    AGENT_SAMPLE_REWARD_MEAN,
    AGENT_TRUNCATED_FRACTION,
    AT_GRPO_RESULTS,
    EPISODE_TURNS_MEAN,
    ITERATION_SECONDS,
    NUM_GENERATED_TOKENS,
    NUM_GENERATED_TOKENS_LIFETIME,
    NUM_GROUPS,
    NUM_PLAY_ON_TOKENS,
    NUM_SAMPLES,
    NUM_TRAINED_SAMPLES,
    POOL_UPDATE_SECONDS,
    REWARD_STD,
    STAGE_CREDIT_MEAN,
    STALENESS_MAX,
    STALENESS_MEAN,
    SUCCESS_RATE,
    TASKS_DROPPED,
    TIME_SECONDS,
    TIME_SHARE,
    ZERO_VARIANCE_GROUP_FRACTION,
)


def log_rollouts(metrics, outputs: Sequence[dict[str, Any]], records: Sequence[SampleRecord],
                 trained: Sequence[SampleRecord], advantages: AdvantageResult,
                 module_ids: Collection[str]) -> None:
    """The runners' ``outputs`` of this iteration (``records``: all their records, with their
    advantages; ``trained``: those the learner trains on), and per module the spread of the
    trained advantages, the mean within-group reward spread and the mean stage credit."""
    failed_groups: Counter = Counter()
    for out in outputs:
        failed_groups.update(out.get("failed_groups") or {})
    _log_sampled(metrics, records, [e for out in outputs for e in out["episodes"]],
                 sum(o["env_steps"] for o in outputs),
                 sum(int(o.get("tasks_dropped", 0)) for o in outputs), failed_groups)
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_PLAY_ON_TOKENS),
                      sum(int(o.get("play_on_tokens", 0)) for o in outputs), window=1)
    by_module: dict[str, list[float]] = defaultdict(list)
    for record in trained:
        by_module[record.module_id].append(record.advantage)
    sampled_by_module: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        sampled_by_module[record.module_id].append(record)
    for module_id in sorted(module_ids):
        values = by_module.get(module_id, [])
        metrics.log_value((AT_GRPO_RESULTS, ADVANTAGE_STD, module_id),
                          float(np.std(values)) if values else float("nan"), window=1)
        own = sampled_by_module.get(module_id, [])
        metrics.log_value((AT_GRPO_RESULTS, REWARD_STD, module_id),
                          mean_group_reward_std([r.reward for r in own],
                                                [r.group_key for r in own]), window=1)
        credited = [r.reward_credit for r in own if r.reward_credit is not None]
        metrics.log_value((AT_GRPO_RESULTS, STAGE_CREDIT_MEAN, module_id),
                          float(np.mean(credited)) if credited else float("nan"), window=1)
    metrics.log_dict({
        (AT_GRPO_RESULTS, NUM_GROUPS): advantages.num_groups,
        (AT_GRPO_RESULTS, ZERO_VARIANCE_GROUP_FRACTION): advantages.zero_variance_fraction,
        (AT_GRPO_RESULTS, NUM_TRAINED_SAMPLES): len(trained),
    }, window=1)


def _log_sampled(metrics, records: Sequence[SampleRecord], episodes: Sequence[EpisodeSummary],
                 env_steps: int, tasks_dropped: int, failed_groups: Mapping[str, int]) -> None:
    """Episodes, samples and tokens (RLlib's counters summed, the rest this iteration's), and
    per agent its rewards, parse errors, returns, response lengths, truncations and failed
    groups."""
    log = metrics.log_value
    key = ENV_RUNNER_RESULTS
    log((key, NUM_ENV_STEPS_SAMPLED), env_steps, reduce="sum")
    log((key, NUM_ENV_STEPS_SAMPLED_LIFETIME), env_steps, reduce="lifetime_sum")
    log((key, NUM_EPISODES), len(episodes), reduce="sum")
    log((key, NUM_EPISODES_LIFETIME), len(episodes), reduce="lifetime_sum")
    log((key, SUCCESS_RATE), float(np.mean([e.success for e in episodes])), window=1)
    log((key, EPISODE_TURNS_MEAN), float(np.mean([e.num_turns for e in episodes])),
        window=1)
    log((key, EPISODE_RETURN_MEAN),
        float(np.mean([sum(e.agent_return.values()) for e in episodes])), window=1)
    log((key, NUM_SAMPLES), len(records), window=1)
    log((key, TASKS_DROPPED), tasks_dropped, window=1)
    generated = sum(r.num_response_tokens for r in records)
    log((key, NUM_GENERATED_TOKENS), generated, reduce="sum")
    # The training budget, for matching arms by generated tokens (a Tune stop criterion).
    log((key, NUM_GENERATED_TOKENS_LIFETIME), generated, reduce="lifetime_sum")
    by_agent: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        by_agent[record.agent].append(record)
    for agent, rs in by_agent.items():
        log((key, AGENT, agent, AGENT_SAMPLE_REWARD_MEAN),
            float(np.mean([r.reward for r in rs])), window=1)
        log((key, AGENT, agent, AGENT_PARSE_ERROR_RATE),
            float(np.mean([r.parse_error is not None for r in rs])), window=1)
        log((key, AGENT, agent, AGENT_EPISODE_RETURN_MEAN),
            float(np.mean([e.agent_return.get(agent, 0.0) for e in episodes])), window=1)
        log((key, AGENT, agent, AGENT_RESPONSE_TOKENS_MEAN),
            float(np.mean([r.num_response_tokens for r in rs])), window=1)
        log((key, AGENT, agent, AGENT_TRUNCATED_FRACTION),
            float(np.mean([r.finish_reason == "length" for r in rs])), window=1)
    for agent in sorted(set(by_agent) | set(failed_groups)):
        log((key, AGENT, agent, AGENT_ROLLOUT_ERRORS), int(failed_groups.get(agent, 0)),
            window=1)


def log_staleness(metrics, lags: Mapping[str, Sequence[int]],
                  module_ids: Collection[str]) -> None:
    """Per module, how many versions the rows an update starts on lag the weights it
    starts from (NaN for a module with no such rows this iteration)."""
    for module_id in sorted(module_ids):
        own = lags.get(module_id, [])
        metrics.log_dict({
            (AT_GRPO_RESULTS, STALENESS_MEAN, module_id):
                float(np.mean(own)) if own else float("nan"),
            (AT_GRPO_RESULTS, STALENESS_MAX, module_id):
                float(max(own)) if own else float("nan")}, window=1)


def log_update(metrics, learner_results: list[dict], pool_seconds: Mapping[str, float]) -> None:
    """The learners' results of the updates that finished (none: nothing logged) and, with
    resource pools, each finished pool's update seconds."""
    metrics.aggregate(learner_results, key=LEARNER_RESULTS)
    for pool, seconds in pool_seconds.items():
        metrics.log_value((AT_GRPO_RESULTS, POOL_UPDATE_SECONDS, pool), seconds, window=1)


def log_time_shares(metrics, clock: Stopwatch, outputs: Sequence[dict[str, Any]]) -> None:
    """This iteration's seconds per part (``core/timing.py``), each logged with window 1
    so the value is this iteration's, not a running average. Runners sample in parallel:
    the slowest runner's generate and env seconds count, as far as the driver waited for
    them (``core/timing.rollout_seconds_waited``)."""
    generate = max((float(o["generate_s"]) for o in outputs), default=0.0)
    env = max((float(o["sample_s"]) - float(o["generate_s"]) for o in outputs), default=0.0)
    generate, env = rollout_seconds_waited(generate, env, clock.seconds.get("sample", 0.0))
    total = clock.elapsed()
    parts = time_shares({"generate": generate, "env": env,
                         **{part: clock.seconds.get(part, 0.0)
                            for part in ("advantages", "learner", "weight_sync")}},
                        total=total)
    logged = {(AT_GRPO_RESULTS, ITERATION_SECONDS): total}
    for part in TIME_PARTS:
        logged[(AT_GRPO_RESULTS, TIME_SECONDS, part)] = parts["seconds"][part]
        logged[(AT_GRPO_RESULTS, TIME_SHARE, part)] = parts["share"][part]
    metrics.log_dict(logged, window=1)
