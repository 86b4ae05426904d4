"""The task suite (installed as ``pettingllms_envs``): importing it registers every task id.

Each task module exposes pure helpers (instance generation, parsing, scoring) plus one
:class:`~pettingllms_rllib.envs.TextParallelEnv` subclass; only this file registers them, so a
module can be imported for its helpers without side effects on the registry.
"""

from pettingllms_rllib.envs import register_text_env

from pettingllms_envs.code import CodeEnv
from pettingllms_envs.math import MathEnv
from pettingllms_envs.plan_path import PlanPathEnv
from pettingllms_envs.sokoban import SokobanEnv
from pettingllms_envs.sudoku import SudokuEnv

register_text_env("plan_path_v0", PlanPathEnv)
register_text_env("sudoku_v0", SudokuEnv)
register_text_env("math_v0", MathEnv)
register_text_env("code_v0", CodeEnv)
register_text_env("sokoban_v0", SokobanEnv)

__all__ = ["CodeEnv", "MathEnv", "PlanPathEnv", "SokobanEnv", "SudokuEnv"]
