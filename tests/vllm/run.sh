#!/usr/bin/env bash
# `make test-vllm`: tokensieve's vLLM logits processors against a real vLLM, on the CPU.
#
# A separate venv (VLLM_VENV, default .venv-vllm) holds vllm==$VLLM_VERSION (it pins its own
# torch, ~6 GB; installed once, reused while the version matches) and this package, built with
# maturin. The tests construct the processors directly (no model, no GPU) and drive them with
# vLLM's own BatchUpdateBuilder / BatchUpdate / MoveDirectionality / SamplingParams.
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
# One import answers both questions: is this vLLM version installed, and does its stack import?
ready() {
    "$PY" -c "import sys, torchvision, vllm, vllm.v1.sample.logits_processor, pytest, jsonschema, maturin
sys.exit(vllm.__version__ != '$VLLM_VERSION')" >/dev/null 2>&1
}
if ! ready; then
    if ! "$PY" -c "import sys, vllm; sys.exit(vllm.__version__ != '$VLLM_VERSION')" 2>/dev/null; then
        echo "test-vllm: installing vllm==$VLLM_VERSION into $VENV (about 3 minutes, 6 GB)"
        "$VENV/bin/pip" install -q "vllm==$VLLM_VERSION"
    fi
    "$VENV/bin/pip" install -q "maturin>=1.5,<2" "pytest>=7" "jsonschema>=4"
    # vLLM's torch companions (torchvision, torchaudio, torchcodec) must match its torch build.
    if ! ready; then
        torch_version=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
        echo "test-vllm: importing vllm failed; reinstalling its torch companions for torch $torch_version"
        "$VENV/bin/pip" install -q "torch==$torch_version" torchvision torchaudio torchcodec
        ready || { echo "test-vllm: vllm does not import in $VENV" >&2; exit 1; }
    fi
fi

# This package: maturin installs into the venv named by VIRTUAL_ENV (not the repo's .venv).
case "$VENV" in /*) venv_abs="$VENV" ;; *) venv_abs="$PWD/$VENV" ;; esac
VIRTUAL_ENV="$venv_abs" "$VENV/bin/maturin" develop --release -q

"$PY" -m pytest -q -p no:cacheprovider tests/vllm "$@"
echo "test-vllm: done in $(( $(date +%s) - start )) s"
