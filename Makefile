# Every target is one line over `python -m rlib.book`, `python -m rlib.assets` or pytest.
# The two commands of the README: `make book` (set up + run the main job) and `make test`.
SHELL := /bin/bash
PY := .venv/bin/python
PROFILE ?= cpu
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1

.DEFAULT_GOAL := help
.PHONY: help env browser assets book smoke test lint report promote lab check clean gpu-check gpu-check-dry aot

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

env:  ## build the venv with the pinned requirements (idempotent)
	@bash scripts/setup_env.sh

browser:  ## Chromium from the distribution's packages, for the report's browser test (needs root)
	bash scripts/install_browser.sh

assets: env  ## fetch, verify, extract and convert the embedded models and corpora
	$(PY) -m rlib.assets fetch

book: assets  ## set up, then run the book in PROFILE (default cpu: the main job) and write the report
	$(PY) -m rlib.book run --profile $(PROFILE)

smoke: assets  ## run every chapter in the smoke profile (minutes; what CI runs)
	$(PY) -m rlib.book run --profile smoke

test: assets  ## set up if needed, then run the test suite (PYTEST_ARGS='-m "not slow" -n 2': what CI runs)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: env  ## ruff over the library, tests and notebooks
	.venv/bin/ruff check .

check: env  ## static checks of the book (manifest, parameters cells, no tracked .ipynb)
	$(PY) -m rlib.book check

report: env  ## rewrite runs/PROFILE/index.html from existing outputs
	$(PY) -m rlib.book report --profile $(PROFILE)

promote: env  ## copy runs/PROFILE artifacts into figures/ (default cpu)
	$(PY) -m rlib.book promote --profile $(PROFILE)

lab: env  ## JupyterLab: open notebooks/*.py as notebooks (jupytext)
	.venv/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root,)

# the lent GPU machine has no .venv (its python3 holds torch, triton, transformers): use whichever is here
GPU_PY := $(shell test -x .venv/bin/python && echo .venv/bin/python || echo python3)

gpu-check:  ## on a GPU (<= 20 min): kernels, RT prefill, LoRA batch, end-to-end -> benchmarks/results/gpu/ (ARGS=...)
	$(GPU_PY) -m benchmarks.gpu_check $(ARGS)

gpu-check-dry:  ## gpu-check on CPU: tiny shapes, Triton interpreted (< 2 min; CI runs it as a test)
	$(GPU_PY) -m benchmarks.gpu_check --dry-run $(ARGS)

aot:  ## compile both Triton kernels for sm_80/sm_90 -> benchmarks/results/aot.{csv,md} (CI checks it)
	$(GPU_PY) -m kernels.aot

clean:  ## remove runs/ (keeps the venv and the asset cache)
	rm -rf runs/
