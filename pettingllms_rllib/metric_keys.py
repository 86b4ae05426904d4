"""The result keys this library logs, each defined once (RLlib style, cf.
``ray.rllib.utils.metrics``).

A key's place in the (nested) result dict is given by the group it is listed under; Tune
flattens the dict into ``progress.csv`` columns joined by ``/``, e.g.
``env_runners/agent/<agent>/parse_error_rate``. ``<module>`` is an RLModule id, ``<agent>`` an
agent id and ``<part>`` one of ``pettingllms_rllib.core.timing.TIME_PARTS``.

Keys RLlib defines itself (``ENV_RUNNER_RESULTS``, ``LEARNER_RESULTS``,
``NUM_ENV_STEPS_SAMPLED``, ``TIMERS``, ...) are imported from ``ray.rllib.utils.metrics`` where
they are logged, also where this library computes the value:
``env_runners/episode_return_mean`` (RLlib's ``EPISODE_RETURN_MEAN``: mean team return, the sum
over agents, per sampled episode) and ``evaluation/num_episodes`` (``NUM_EPISODES``: held-out
episodes played). Repeated here, for the readers that must not import Ray (plotting,
progress), are only the three group names and ``GRADIENT_NORM``, which RLlib logs without a
constant; ``tests/test_metric_keys.py`` checks they equal RLlib's.

This module imports nothing beyond the standard library.
"""

from __future__ import annotations

# ------------------------------------------------------------------------- group names
#: Group of the env runners' (sampling) metrics; equals RLlib's ``ENV_RUNNER_RESULTS``.
ENV_RUNNERS = "env_runners"
#: Group of the learners' metrics, one subgroup per module; equals RLlib's ``LEARNER_RESULTS``.
LEARNERS = "learners"
#: Group of the held-out evaluation's metrics; equals RLlib's ``EVALUATION_RESULTS``.
EVALUATION = "evaluation"
#: Group of the AT-GRPO driver's own metrics (grouping, advantages, timing).
AT_GRPO_RESULTS = "at_grpo"
#: Per-agent subgroup (``env_runners/agent/<agent>/...``, ``evaluation/agent/<agent>/...``).
AGENT = "agent"

# --------------------------------------------------------------------------- top level
#: ``held_out_success_rate``: this iteration's held-out success (``evaluation/success_rate``),
#: NaN where it did not evaluate; at the top level so a Tune callback or a user's
#: ``checkpoint_score_attribute`` can read it (``best_checkpoint.py`` keeps the best by it).
HELD_OUT_SUCCESS = "held_out_success_rate"

# ----------------------------------------------------------------------- env_runners/...
#: ``env_runners/success_rate``: share of this iteration's sampled episodes that succeeded.
SUCCESS_RATE = "success_rate"
#: ``env_runners/episode_turns_mean``: mean turns per sampled episode.
EPISODE_TURNS_MEAN = "episode_turns_mean"
#: ``env_runners/num_samples``: sample records (one per response) this iteration.
NUM_SAMPLES = "num_samples"
#: ``env_runners/num_tasks_dropped``: tasks whose env raised this iteration (dropped, logged).
TASKS_DROPPED = "num_tasks_dropped"
#: ``env_runners/num_generated_tokens``: response tokens generated this iteration.
NUM_GENERATED_TOKENS = "num_generated_tokens"
#: ``env_runners/num_generated_tokens_lifetime``: response tokens generated since the start:
#: the training budget, for matching arms by generated tokens (a Tune stop criterion).
NUM_GENERATED_TOKENS_LIFETIME = "num_generated_tokens_lifetime"
#: ``env_runners/num_play_on_tokens``: tokens generated this iteration to play candidates on
#: (stage credit, rewards paid to idle agents; ``core/tree_sampler.py``), which no record
#: holds and ``num_generated_tokens`` does not count.
NUM_PLAY_ON_TOKENS = "num_play_on_tokens"
#: ``env_runners/num_runners_lost``: runners whose tasks this iteration could not sample.
RUNNERS_LOST = "num_runners_lost"
#: ``env_runners/weights_version_min``: the oldest weights version a runner sampled with.
WEIGHTS_VERSION_MIN = "weights_version_min"

# ------------------------------------------------------------ env_runners/agent/<agent>/...
#: ``env_runners/agent/<agent>/sample_reward_mean``: mean reward of the agent's records.
AGENT_SAMPLE_REWARD_MEAN = "sample_reward_mean"
#: ``env_runners/agent/<agent>/parse_error_rate``: share of the agent's responses that did not
#: parse into an action.
AGENT_PARSE_ERROR_RATE = "parse_error_rate"
#: ``env_runners/agent/<agent>/episode_return_mean``: the agent's mean return per episode.
AGENT_EPISODE_RETURN_MEAN = "episode_return_mean"
#: ``env_runners/agent/<agent>/response_tokens_mean``: mean response length (tokens).
AGENT_RESPONSE_TOKENS_MEAN = "response_tokens_mean"
#: ``env_runners/agent/<agent>/truncated_fraction``: share of the agent's responses cut off at
#: ``max_new_tokens`` (left out of the loss with ``mask_truncated_responses``).
AGENT_TRUNCATED_FRACTION = "truncated_fraction"
#: ``env_runners/agent/<agent>/rollout_errors``: the agent's (task, agent, turn) groups
#: dropped this iteration because a candidate's env failed twice (``core/tree_sampler.py``).
AGENT_ROLLOUT_ERRORS = "rollout_errors"

# --------------------------------------------------------------------------- at_grpo/...
#: ``at_grpo/iteration_s``: this training step's wall-clock seconds.
ITERATION_SECONDS = "iteration_s"
#: ``at_grpo/time_s/<part>``: this iteration's seconds in each part of ``TIME_PARTS``.
TIME_SECONDS = "time_s"
#: ``at_grpo/time_share/<part>``: each part's share of ``at_grpo/iteration_s``.
TIME_SHARE = "time_share"
#: ``at_grpo/advantage_std/<module>``: std of the module's trained advantages (after std
#: normalisation every kept group has the same spread, so this mostly says whether groups
#: were kept); NaN when the module trained nothing.
ADVANTAGE_STD = "advantage_std"
#: ``at_grpo/reward_std/<module>``: mean within-group std of the module's rewards before
#: normalisation: how different the K candidates were, i.e. how much there was to compare.
REWARD_STD = "reward_std"
#: ``at_grpo/stage_credit_mean/<module>``: mean credit over the module's candidates that were
#: played on (what they earned after their own step: rewards the env paid the agent while it
#: was idle, and with stage credit ``alpha * team`` of the turn's end); NaN when none was
#: (no stage ends before its turn does and the env pays no idle agent).
STAGE_CREDIT_MEAN = "stage_credit_mean"
#: ``at_grpo/num_groups``: advantage groups (task, agent, turn) this iteration.
NUM_GROUPS = "num_groups"
#: ``at_grpo/zero_variance_group_fraction``: share of groups whose K rewards were all equal
#: (dropped with ``drop_zero_variance_groups``).
ZERO_VARIANCE_GROUP_FRACTION = "zero_variance_group_fraction"
#: ``at_grpo/num_trained_samples``: records sent to the learners (kept groups, frozen modules
#: left out).
NUM_TRAINED_SAMPLES = "num_trained_samples"
#: ``at_grpo/staleness_mean/<module>``: mean number of weights versions the module's trained
#: responses lag the learner (0 when synchronous; 1 with ``async_rollout`` after the first
#: iteration); NaN when the module trained nothing.
STALENESS_MEAN = "staleness_mean"
#: ``at_grpo/staleness_max/<module>``: the largest lag among them (never above
#: ``max_staleness``: a larger one fails the iteration).
STALENESS_MAX = "staleness_max"
#: ``at_grpo/pool_update_s/<pool>``: seconds each resource pool's update took this iteration
#: (the pools update at the same time: the learner part of ``iteration_s`` is near the
#: largest, not the sum); only with ``.resource_pools``.
POOL_UPDATE_SECONDS = "pool_update_s"

# ------------------------------------------------------------------- learners/<module>/...
#: ``learners/<module>/policy_loss``: the clipped token-level loss (with the KL penalty when
#: ``kl_coef > 0`` and the entropy bonus when ``entropy_coef > 0``) of the module's last
#: minibatch of the update.
POLICY_LOSS = "policy_loss"
#: ``learners/<module>/clip_fraction``: share of response tokens whose ratio was clipped (last
#: minibatch of the update, as every per-minibatch learner metric here: window 1).
CLIP_FRACTION = "clip_fraction"
#: ``learners/<module>/dual_clip_fraction``: share of response tokens whose loss the dual clip
#: bounded (negative advantage, loss above ``-dual_clip * A``).
DUAL_CLIP_FRACTION = "dual_clip_fraction"
#: ``learners/<module>/policy_behaviour_ratio``: mean probability ratio of the policy to the
#: behaviour (sampling) policy over response tokens: drift from the sampler.
POLICY_BEHAVIOUR_RATIO = "policy_behaviour_ratio"
#: ``learners/<module>/importance_weight_mean``: token mean of the truncated importance weight
#: ``min(pi_learner_before_update / pi_behaviour, C)`` (exactly 1 where the engine's
#: log-probs stand as the learner's: fp32 HF generation, on-policy; near 1 in bf16).
IMPORTANCE_WEIGHT_MEAN = "importance_weight_mean"
#: ``learners/<module>/importance_truncated_fraction``: share of response tokens whose weight
#: was cut at ``importance_sampling_cap``.
IMPORTANCE_TRUNCATED_FRACTION = "importance_truncated_fraction"
#: ``learners/<module>/approx_kl_behaviour``: approximate KL (k3, token mean) between the policy
#: and the behaviour policy over response tokens.
APPROX_KL_BEHAVIOUR = "approx_kl_behaviour"
#: ``learners/<module>/logp_mismatch_mean``: mean over response tokens of |behaviour log-prob -
#: learner log-prob|, the learner's taken with the weights the update starts from (nats per
#: token): the gap between the engine that sampled and the learner that trains (bf16, vLLM or
#: stale weights). fp32 HF on-policy: ~1e-5; above :data:`LOGP_MISMATCH_WARNING` the progress
#: line shows it. Over every row where the learner recomputes the ratio's denominator, else
#: over the module's first minibatch of the update.
LOGP_MISMATCH_MEAN = "logp_mismatch_mean"
#: ``learners/<module>/logp_mismatch_max``: the largest such gap of one token.
LOGP_MISMATCH_MAX = "logp_mismatch_max"
#: ``learners/<module>/logp_mismatch_kl``: k3 estimate of KL(behaviour || learner), token mean.
LOGP_MISMATCH_KL = "logp_mismatch_kl"
#: Mean gap (nats per token) above which the progress line reports it: 0.1 is past what bf16
#: rounding gives on the bundled model (0.02-0.06 per module and iteration in the main job,
#: docs/RESULTS.md), so shown values point at stale weights or a broken weight sync rather
#: than precision.
LOGP_MISMATCH_WARNING = 0.1
#: ``learners/<module>/num_response_tokens``: response tokens in the module's minibatch.
NUM_RESPONSE_TOKENS = "num_response_tokens"
#: ``learners/<module>/entropy``: mean policy entropy per response token (nats): a collapse to
#: one answer shows as a fall towards 0.
ENTROPY = "entropy"
#: ``learners/<module>/kl_to_start``: KL (k3) of the module's policy from where training began,
#: on the module's first minibatch of the update; logged by modules that hold their starting
#: policy (LoRA adapters, and full fine-tuning with ``kl_coef > 0``).
KL_TO_START = "kl_to_start"
#: ``learners/<module>/kl_to_reference`` (``kl_coef > 0``): the penalised KL to the reference
#: (k3, token mean) on the module's last minibatch of the update.
KL_TO_REFERENCE = "kl_to_reference"
#: ``learners/<module>/num_gradient_steps``: gradient steps a module took in one update (one
#: per minibatch it was in).
NUM_GRADIENT_STEPS = "num_gradient_steps"
#: ``learners/<module>/num_samples_trained``: samples a module's loss saw in one update (rows x
#: epochs, counted in samples).
NUM_SAMPLES_TRAINED = "num_samples_trained"
#: ``learners/<module>/gradients_default_optimizer_global_norm``: pre-clip gradient norm of the
#: module's last minibatch. Logged by RLlib's ``Learner.postprocess_gradients_for_module`` (as
#: ``f"gradients_{DEFAULT_OPTIMIZER}_global_norm"``, no constant in RLlib) and read here.
GRADIENT_NORM = "gradients_default_optimizer_global_norm"

# ------------------------------------------------------------------------- evaluation/...
#: ``evaluation/success_rate``: held-out success (greedy, the fixed evaluation instances).
EVALUATION_SUCCESS_RATE = "success_rate"
#: ``evaluation/untrained_success_rate``: held-out success of the untrained team, measured
#: once before the first update and repeated in every row.
EVALUATION_UNTRAINED_SUCCESS_RATE = "untrained_success_rate"
#: ``evaluation/success_ci95_low``: lower end of the Wilson 95% interval of the success rate.
EVALUATION_SUCCESS_CI95_LOW = "success_ci95_low"
#: ``evaluation/success_ci95_high``: upper end of the Wilson 95% interval of the success rate.
EVALUATION_SUCCESS_CI95_HIGH = "success_ci95_high"
#: ``evaluation/turns_mean``: mean turns per held-out episode.
EVALUATION_TURNS_MEAN = "turns_mean"

# ------------------------------------------------------------- evaluation/agent/<agent>/...
#: ``evaluation/agent/<agent>/parse_error_rate``: share of the agent's held-out responses that
#: did not parse into an action.
EVALUATION_AGENT_PARSE_ERROR_RATE = "parse_error_rate"
#: ``evaluation/agent/<agent>/return_mean``: the agent's mean held-out return per episode.
EVALUATION_AGENT_RETURN_MEAN = "return_mean"

#: Every key above by the place it sits in the result dict (``""``: the top level; ``<...>``:
#: any module, agent or part name). Within one group every value is unique.
GROUPS: dict[str, tuple[str, ...]] = {
    "": (HELD_OUT_SUCCESS, ENV_RUNNERS, LEARNERS, EVALUATION, AT_GRPO_RESULTS),
    ENV_RUNNERS: (SUCCESS_RATE, EPISODE_TURNS_MEAN, NUM_SAMPLES, TASKS_DROPPED,
                  NUM_GENERATED_TOKENS, NUM_GENERATED_TOKENS_LIFETIME, NUM_PLAY_ON_TOKENS,
                  RUNNERS_LOST,
                  WEIGHTS_VERSION_MIN, AGENT),
    f"{ENV_RUNNERS}/{AGENT}/<agent>": (AGENT_SAMPLE_REWARD_MEAN, AGENT_PARSE_ERROR_RATE,
                                       AGENT_EPISODE_RETURN_MEAN, AGENT_RESPONSE_TOKENS_MEAN,
                                       AGENT_TRUNCATED_FRACTION, AGENT_ROLLOUT_ERRORS),
    AT_GRPO_RESULTS: (ITERATION_SECONDS, TIME_SECONDS, TIME_SHARE, ADVANTAGE_STD, REWARD_STD,
                      STAGE_CREDIT_MEAN, NUM_GROUPS, ZERO_VARIANCE_GROUP_FRACTION, NUM_TRAINED_SAMPLES,
                      STALENESS_MEAN, STALENESS_MAX, POOL_UPDATE_SECONDS),
    f"{LEARNERS}/<module>": (POLICY_LOSS, CLIP_FRACTION, DUAL_CLIP_FRACTION,
                             POLICY_BEHAVIOUR_RATIO, APPROX_KL_BEHAVIOUR, NUM_RESPONSE_TOKENS,
                             ENTROPY, KL_TO_START, KL_TO_REFERENCE, NUM_GRADIENT_STEPS,
                             NUM_SAMPLES_TRAINED, GRADIENT_NORM, IMPORTANCE_WEIGHT_MEAN,
                             IMPORTANCE_TRUNCATED_FRACTION, LOGP_MISMATCH_MEAN,
                             LOGP_MISMATCH_MAX, LOGP_MISMATCH_KL),
    EVALUATION: (EVALUATION_SUCCESS_RATE, EVALUATION_UNTRAINED_SUCCESS_RATE,
                 EVALUATION_SUCCESS_CI95_LOW, EVALUATION_SUCCESS_CI95_HIGH,
                 EVALUATION_TURNS_MEAN, AGENT),
    f"{EVALUATION}/{AGENT}/<agent>": (EVALUATION_AGENT_PARSE_ERROR_RATE,
                                      EVALUATION_AGENT_RETURN_MEAN),
}
#: Keys whose value is a dict keyed by a name: (group, key) -> what names it (``<module>``:
#: at_grpo/advantage_std/<module>; ``<part>``: at_grpo/time_s/<part>).
NAMED_SUBKEYS: dict[tuple[str, str], str] = {
    (AT_GRPO_RESULTS, ADVANTAGE_STD): "<module>",
    (AT_GRPO_RESULTS, REWARD_STD): "<module>",
    (AT_GRPO_RESULTS, STAGE_CREDIT_MEAN): "<module>",
    (AT_GRPO_RESULTS, STALENESS_MEAN): "<module>",
    (AT_GRPO_RESULTS, STALENESS_MAX): "<module>",
    (AT_GRPO_RESULTS, POOL_UPDATE_SECONDS): "<pool>",
    (AT_GRPO_RESULTS, TIME_SECONDS): "<part>",
    (AT_GRPO_RESULTS, TIME_SHARE): "<part>",
}
