"""Shared test set-up: keep every framework's files out of HOME and make `support/` importable."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "support"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
