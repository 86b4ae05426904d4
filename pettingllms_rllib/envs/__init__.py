"""The text-env protocol (see :mod:`pettingllms_rllib.envs.base`)."""

from pettingllms_rllib.envs.base import (
    INFO_ACTING, INFO_PARSE_ERROR, INFO_REWARD_LOCAL, INFO_REWARD_TEAM, INFO_STAGE, INFO_SUCCESS,
    INFO_TURN, SPLITS, TRAIN_SEED_LIMIT, EnvContractError, ParseResult, Prompt, Role, StageOutcome,
    TextParallelEnv, answer_prefix_of, split_of_seed, task_name)
from pettingllms_rllib.envs.conformance import (
    check_clone_contract, check_splits_disjoint, check_text_env)
from pettingllms_rllib.envs.instances import (
    TooFewInstancesError, distinct_instance_seeds, instance_fingerprint, shared_instances)
from pettingllms_rllib.envs.quoting import clip_text, quote_block, quote_inline
from pettingllms_rllib.envs.registry import (
    EnvImportError, get_env_creator, make_text_env, register_text_env, registered_env_ids)
from pettingllms_rllib.envs.wrappers import (
    AECTextEnv, NotATextEnvError, ParallelTextEnv, require_text_env, wrap_aec_env,
    wrap_parallel_env)

__all__ = [
    "EnvContractError", "EnvImportError", "ParseResult", "Prompt", "Role", "StageOutcome",
    "TextParallelEnv", "answer_prefix_of", "check_clone_contract", "check_splits_disjoint",
    "check_text_env", "get_env_creator", "make_text_env", "register_text_env",
    "registered_env_ids", "SPLITS", "TRAIN_SEED_LIMIT", "split_of_seed", "task_name",
    "AECTextEnv", "NotATextEnvError", "ParallelTextEnv", "require_text_env", "wrap_aec_env",
    "wrap_parallel_env", "TooFewInstancesError", "distinct_instance_seeds",
    "instance_fingerprint", "shared_instances", "clip_text", "quote_block", "quote_inline",
    "INFO_ACTING", "INFO_PARSE_ERROR", "INFO_REWARD_LOCAL", "INFO_REWARD_TEAM", "INFO_STAGE",
    "INFO_SUCCESS", "INFO_TURN",
]
