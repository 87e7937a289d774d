#!/usr/bin/env bash
# `make test-wheel`: the release wheel installs into a fresh venv without torch and works there.
#
# Builds the abi3 wheel with maturin, installs it into a new venv (numpy is its only
# dependency), then checks: torch is absent and never imported, a grammar compiles and fills a
# numpy bitmask correctly, and the `tokensieve compile` CLI writes an index that loads back.
set -euo pipefail
cd "$(dirname "$0")/../.."
MATURIN="${MATURIN:-.venv/bin/maturin}"
work="target/wheel-check"
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)

"$MATURIN" build --release -q -o "$work/dist"
wheel=$(ls "$work"/dist/tokensieve-*.whl)
case "$wheel" in *abi3*) ;; *) echo "test-wheel: $wheel is not an abi3 wheel" >&2; exit 1 ;; esac

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel"
PY="$work/venv/bin/python"

"$PY" - <<'PYEOF'
import importlib.util
import sys

import numpy as np

import tokensieve as ts

assert importlib.util.find_spec("torch") is None, "torch is installed in the fresh venv"
tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
vocab = ts.Vocabulary(tokens, eos_token_ids=[256])
g = ts.Grammar.from_regex("[0-9]{2}x", vocab)
m = g.matcher()
bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
assert isinstance(bm, np.ndarray), type(bm)
ts.fill_next_token_bitmask([m], bm)
allowed = np.flatnonzero(np.unpackbits(bm[0].view(np.uint8), bitorder="little"))
assert allowed.tolist() == list(range(48, 58)), allowed
assert m.accept_tokens(list(b"12x")) == 3 and m.is_accepting()
schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
g = ts.Grammar.from_json_schema(schema, vocab)
assert g.matcher().accept_tokens(list(b'{"a": 7}')) == 8
assert "torch" not in sys.modules, "importing tokensieve imported torch"
print("test-wheel: import, numpy bitmask and JSON Schema work without torch")
PYEOF

tok="../shared/tokenizers/gpt2/tokenizer.json"
if [ -f "$tok" ]; then
    "$work/venv/bin/tokensieve" compile --regex '[0-9]{3}' --tokenizer "$tok" -o "$work/digits.tsidx"
    "$work/venv/bin/tokensieve" inspect "$work/digits.tsidx"
else
    echo "test-wheel: skipped the CLI check: $tok not found (it needs the shared data folder)"
fi
echo "test-wheel: done in $(( $(date +%s) - start )) s"
