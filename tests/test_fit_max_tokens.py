"""Outputs that fit a token budget: ``Grammar.matcher(max_tokens=N)``.

A uniformly sampling "model" over the allowed tokens of a real vocabulary, on schemas with
unbounded parts (integers, strings, arrays, any JSON): without a budget almost every output is
cut mid-value by N tokens; with it every output is complete (it parses and validates) within N.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import numpy as np
import pytest

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

UNBOUNDED: list[Any] = [
    {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id", "name"],
    },
    {"type": "array", "items": {"type": "number"}},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
    {},
]


def walk(grammar: ts.Grammar, vocab: ts.Vocabulary, n: int, budget: bool, seed: int) -> str | None:
    """Sample up to `n` tokens uniformly from the masks; the text if the output is complete."""
    rng = random.Random(seed)
    m = grammar.matcher(max_tokens=n if budget else None)
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    eos = set(vocab.eos_token_ids)
    out = b""
    for _ in range(n):
        m.fill_next_token_bitmask(bm)
        bits = np.unpackbits(np.asarray(bm)[0].view(np.uint8), bitorder="little")
        ids = np.flatnonzero(bits[: vocab.vocab_size])
        assert len(ids)
        tok = int(ids[rng.randrange(len(ids))])
        assert m.accept_token(tok)
        if tok in eos:
            break
        out += vocab.token_bytes(tok) or b""
    return out.decode() if m.is_accepting() else None


@pytest.mark.parametrize("n", [12, 30, 60])
def test_budgeted_outputs_are_complete_and_valid(vocab: ts.Vocabulary, n: int) -> None:
    complete = {True: 0, False: 0}
    total = 0
    for k, schema in enumerate(UNBOUNDED):
        g = ts.Grammar.from_json_schema(schema, vocab)
        for seed in range(10):
            total += 1
            for budget in (True, False):
                text = walk(g, vocab, n, budget, seed=1000 * k + seed)
                if text is None:
                    assert not budget, f"budgeted output not complete: {schema}"
                    continue
                complete[budget] += 1
                jsonschema.validate(json.loads(text), schema)
    assert complete[True] == total
    # the option is what makes the difference (a uniform sampler rarely closes in time alone)
    assert complete[False] < total // 2, complete


def test_regex_budget_and_counters(vocab: ts.Vocabulary) -> None:
    g = ts.Grammar.from_regex(r"[a-z]+(-[a-z]+)*\.", vocab)
    for seed in range(20):
        text = walk(g, vocab, 5, True, seed)
        assert text is not None and re.fullmatch(r"[a-z]+(-[a-z]+)*\.", text), text
    m = g.matcher(max_tokens=5)
    assert m.max_tokens == 5 and m.tokens_left == 5 and m.consumed == 0
    lookup = {vocab.token_bytes(i): i for i in range(vocab.vocab_size)}
    m.accept_token(lookup[b"a"])
    assert m.consumed == 1 and m.tokens_left == 4
    m.rollback(1)
    assert m.tokens_left == 5
    m.max_tokens = None
    assert m.tokens_left is None
    # a budget too small for any ending leaves the grammar's own mask (nothing fits)
    long = ts.Grammar.from_regex(r"[a-z]{40}\.", vocab)
    tight = long.matcher(max_tokens=1)
    free = long.matcher()
    a = ts.allocate_token_bitmask(1, vocab.vocab_size)
    b = ts.allocate_token_bitmask(1, vocab.vocab_size)
    tight.fill_next_token_bitmask(a)
    free.fill_next_token_bitmask(b)
    assert (np.asarray(a) == np.asarray(b)).all()
