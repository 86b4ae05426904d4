"""Evaluation of trained (or untrained) agent teams: pure metrics in ``metrics``, no heavy imports."""
