"""bench/device_check.py runs end to end in its tiny CPU mode with Ray and vLLM unimportable."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Make ray / vllm unimportable (as on the device machine), then run the script as __main__.
RUNNER = ("import runpy, sys\n"
          "for name in ('ray', 'vllm'):\n"
          "    sys.modules[name] = None\n"
          "sys.argv = sys.argv[1:]\n"
          "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_tiny_run_without_ray(tmp_path):
    out = tmp_path / "results.json"
    command = [sys.executable, "-c", RUNNER, str(REPO / "bench" / "device_check.py"), "--tiny",
               "--prompts", "4", "--samples", "2", "--new-tokens", "8", "--engine-reps", "1",
               "--learner-reps", "1", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| engine | batched / sequential tokens/s |" in proc.stdout
    assert "| learner | LoRA, 2 per-role adapters" in proc.stdout

    result = json.loads(out.read_text())
    meta = result["meta"]
    assert meta["device"] == "cpu" and meta["dtype"] == "float32"
    assert meta["ray_importable"] is False and meta["vllm_importable"] is False
    engine = result["engine"]
    assert 0 < engine["batched"]["tokens"] <= 4 * 2 * 8
    assert 0 < engine["sequential"]["tokens"] <= 4 * 8
    assert engine["speedup"] > 0
    learner = result["learner"]
    assert len(learner) == 3 and not any(entry.get("skipped") for entry in learner)
    for entry in learner:
        assert entry["peak_gib"] is None and entry["tokens_per_s"] > 0
        assert entry["response_tokens"] == engine["batched"]["tokens"]
    assert learner[1]["trainable_params"] * 2 == learner[2]["trainable_params"]
    agree = result["agreement"]
    assert agree["tokens"] == engine["batched"]["tokens"]
    # fp32 on CPU: the engine's KV-cache log-probs and the learner's recomputation agree closely.
    assert agree["max_abs_diff"] < 1e-4
    assert abs(agree["mean_ratio"] - 1.0) < 1e-4
