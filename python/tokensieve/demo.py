"""`make demo`: compile constraints for a real tokenizer and show constrained output.

Uses the Llama 3 tokenizer from ``../shared/tokenizers`` when that folder exists, otherwise the
Mistral Tekken vocabulary shipped in the ``mistral-common`` package. Tokens are drawn from random
logits (a stand-in for a model) after masking, so every output below is produced one token at a
time and is guaranteed to match its constraint.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import numpy as np

import tokensieve as ts

CONSTRAINTS = [
    ("ISO date", r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("email", r"[a-z]{3,8}(\.[a-z]{2,6})?@[a-z]{3,8}\.(com|org|net)"),
    (
        "JSON object",
        r'\{"name": "[A-Za-z ]{1,20}", "age": (0|[1-9][0-9]?), "tags": \[("[a-z]{1,8}"(, "[a-z]{1,8}"){0,2})?\]\}',
    ),
    ("UUID", r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"),
    ("choice", r"(yes|no|maybe)"),
]


def load_vocabulary() -> tuple[ts.Vocabulary, str]:
    shared = Path(__file__).resolve().parents[3] / "shared" / "tokenizers" / "llama3"
    if (shared / "tokenizer.json").is_file():
        return ts.Vocabulary.from_pretrained(shared), "Llama 3 (../shared/tokenizers/llama3)"
    return ts.Vocabulary.from_tekken(), "Mistral Tekken (from the mistral-common package)"


def generate(
    grammar: ts.Grammar, vocab: ts.Vocabulary, rng: np.random.Generator, max_tokens: int = 64
) -> tuple[bytes, int]:
    matcher = grammar.matcher()
    bitmask = np.zeros((1, ts.bitmask_words(vocab.vocab_size)), dtype=np.int32)
    out = b""
    steps = 0
    while steps < max_tokens:
        steps += 1
        matcher.fill_next_token_bitmask(bitmask)
        allowed = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[
            : vocab.vocab_size
        ].astype(bool)
        logits = rng.standard_normal(vocab.vocab_size).astype(np.float32) * 3.0
        for eos in vocab.eos_token_ids:
            logits[eos] += 4.0  # a model tends to stop once the output is complete
        logits[~allowed] = -np.inf
        probs = np.exp(logits - logits.max())
        token = int(rng.choice(vocab.vocab_size, p=probs / probs.sum()))
        assert matcher.accept_token(token)
        if matcher.is_finished():
            break
        out += vocab.token_bytes(token) or b""
    return out, steps


def main() -> int:
    t0 = time.perf_counter()
    vocab, name = load_vocabulary()
    print(
        f"vocabulary: {name}: {vocab.vocab_size} ids, kind {vocab.kind}, loaded in {(time.perf_counter() - t0) * 1e3:.0f} ms\n"
    )
    rng = np.random.default_rng(7)
    for label, pattern in CONSTRAINTS:
        t = time.perf_counter()
        grammar = ts.Grammar.from_regex(pattern, vocab)
        compile_ms = (time.perf_counter() - t) * 1e3
        print(f"{label}: {pattern}")
        print(f"  compiled with first mask in {compile_ms:.2f} ms")
        for _ in range(3):
            text, steps = generate(grammar, vocab, rng)
            s = text.decode("utf-8", errors="replace")
            ok = re.fullmatch(pattern, s) is not None
            print(f"  {steps:3d} tokens  {'ok ' if ok else 'BAD'} {s}")
            if not ok:
                return 1
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
