# The developer workflow. `make demo` and `make test` set everything up from a fresh clone.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
EXTRAS ?= test,lint,torch
comma := ,


export CARGO_TERM_COLOR ?= never
# Large wheels (torch) over a connection that may drop: pip retries and resumes (also under maturin).
export PIP_RETRIES ?= 10
export PIP_TIMEOUT ?= 60
export PIP_RESUME_RETRIES ?= 10
# $(call retry,command): run a command up to three times, 20 s apart (network installs)
retry = for i in 1 2 3; do $(1) && break; [ $$i = 3 ] && exit 1; echo "network install failed; retrying in 20 s" >&2; sleep 20; done

.PHONY: help venv build demo test test-rust test-python test-wheel test-vllm test-sglang lint fmt bench clean

help:
	@echo "make demo   - set up, compile a constraint for a real tokenizer, show constrained output"
	@echo "make test   - set up, lint, run the Rust and Python test suites"
	@echo "make bench  - benchmarks beside llguidance / outlines-core (results in benches/results/)"
	@echo "make lint   - cargo fmt --check, clippy -D warnings, ruff, mypy"

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

# Build the extension (release) and install the package's extras into the venv.
build: $(PY)
	$(call retry,$(PIP) install -q "maturin>=1.5$(comma)<2")
	$(call retry,VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q -E $(EXTRAS))

demo:
	$(MAKE) build EXTRAS=demo
	$(PY) -m tokensieve.demo

test: build lint test-rust test-python test-wheel

test-rust:
	cargo test -p tokensieve-core --quiet

test-python:
	$(PY) -m pytest -q

# the release abi3 wheel in a fresh venv without torch: import, numpy bitmask, the CLI
test-wheel: build
	MATURIN=$(VENV)/bin/maturin bash tests/wheel/check_wheel.sh

# tokensieve.vllm in a real vLLM 0.32.0 CPU engine and server, in .venv-vllm (first run ~8 min and 6.5 GB, then ~3 min)
test-vllm:
	bash tests/vllm/run.sh

# tokensieve.sglang against SGLang 0.5.23's own grammar-backend classes, in SGLANG_VENV (default
# .venv-sglang): SGLang's sources and a few modules (--no-deps, pinned), layered over $(VENV)
SGLANG_VENV ?= .venv-sglang
test-sglang: build
	VENV=$(VENV) SGLANG_VENV=$(SGLANG_VENV) bash tests/sglang/run.sh

lint: build
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --quiet -- -D warnings
	$(VENV)/bin/ruff check python tests $(wildcard benches/*.py)
	$(VENV)/bin/ruff format --check python tests $(wildcard benches/*.py)
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest tokensieve._core

fmt:
	cargo fmt --all
	$(VENV)/bin/ruff format python tests $(wildcard benches/*.py)

bench:
	$(MAKE) build EXTRAS=test,torch,bench
	$(PY) benches/bench_regex.py
	$(PY) benches/bench_kernels.py
	$(PY) benches/bench_index.py
	$(PY) benches/bench_first_mask.py
	$(PY) benches/bench_bounds.py

clean:
	rm -rf target $(VENV)
