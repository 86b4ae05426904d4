"""The task suite: plan_path, sokoban, sudoku, code and math, two agents each.

Each task module exposes pure helpers (instance generation, parsing, scoring) plus one
:class:`~pettingllms_rllib.envs.TextParallelEnv` subclass. Importing this package registers
nothing: the ids are declared as entry points of the group ``pettingllms_rllib.envs`` in
``pyproject.toml``, and the registry loads them on first use, the same way it finds any other
installed package's envs.
"""

from pettingllms_envs.code import CodeEnv
from pettingllms_envs.math import MathEnv
from pettingllms_envs.plan_path import PlanPathEnv, PlanPathV0Env
from pettingllms_envs.sokoban import SokobanEnv
from pettingllms_envs.sudoku import SudokuEnv

__all__ = ["CodeEnv", "MathEnv", "PlanPathEnv", "PlanPathV0Env", "SokobanEnv", "SudokuEnv"]
