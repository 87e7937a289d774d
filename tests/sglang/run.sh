#!/usr/bin/env bash
# `make test-sglang`: tokensieve.sglang against SGLang's own grammar-backend classes, on the CPU.
#
# The sglang venv (SGLANG_VENV, default .venv-sglang) holds only SGLang's Python sources and the
# few modules its grammar classes import (tests/sglang/requirements.txt, pinned, --no-deps, a
# few MB; SGLang's full dependency set is CUDA-only and several GB). Everything else (torch,
# transformers, tokenizers, numpy, pytest, jsonschema, and tokensieve as `make build` installed
# it) comes from the main venv (VENV), which a .pth file layers underneath: the sglang venv's own
# packages come first on sys.path, the main venv's after them, and the main venv is not changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
MAIN_VENV="${VENV:-.venv}"
VENV="${SGLANG_VENV:-.venv-sglang}"
REQS=tests/sglang/requirements.txt
start=$(date +%s)
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

if [ ! -x "$MAIN_VENV/bin/python" ]; then
    echo "test-sglang: no main venv at $MAIN_VENV (run make build first)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
main_site=$("$MAIN_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
own_site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import site; site.addsitedir('$(abs "$main_site")')" > "$own_site/_tokensieve_main_venv.pth"

# One check: the pinned sglang and the modules its grammar backend classes import are in place.
ready() {
    "$PY" - "$REQS" >/dev/null 2>&1 <<'PYEOF'
import sys, importlib.metadata as md
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        if md.version(name) != version:
            sys.exit(1)
import sglang.srt.constrained.grammar_manager, sglang.srt.constrained.reasoner_grammar_backend
import sglang.srt.plugins, torch, tokensieve, pytest, jsonschema, tokenizers, transformers
PYEOF
}
if ! ready; then
    echo "test-sglang: installing $(grep "^sglang==" "$REQS") and its grammar modules into $VENV (--no-deps)"
    for i in 1 2 3; do
        "$VENV/bin/pip" install -q --disable-pip-version-check --retries 10 --timeout 60 \
            --no-deps -r "$REQS" && break
        [ "$i" = 3 ] && exit 1
        echo "network install failed; retrying in 20 s" >&2
        sleep 20
    done
    if ! ready; then
        echo "test-sglang: sglang's grammar modules do not import in $VENV:" >&2
        "$PY" -c "import sglang.srt.constrained.grammar_manager, sglang.srt.constrained.reasoner_grammar_backend, tokensieve" >&2 || true
        exit 1
    fi
fi

TOKENSIEVE_SGLANG_TESTS=1 "$PY" -m pytest -q -p no:cacheprovider tests/sglang "$@"
echo "test-sglang: done in $(( $(date +%s) - start )) s"
