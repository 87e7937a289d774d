"""Grammars that never wear out: a grammar's shared lazily built states are bounded, and outputs
that together need more than the bound move its matchers to later generations instead of
failing (``docs/limits.md``, ``max_states``). The large run is ``benches/bench_wear.py``."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import tokensieve as ts


def allowed(row: np.ndarray) -> list[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")
    return [int(t) for t in np.flatnonzero(bits)]


def walk(
    grammar: ts.Grammar,
    roomy: ts.Grammar,
    eos: int,
    outputs: int,
    seed: int,
    max_len: int,
) -> int:
    """Random outputs through `grammar`, six matchers in flight, masks filled in one batch as when
    serving; every mask compared with `roomy`'s (the same constraint with room for every state).
    Returns the number of rollbacks."""
    rng = random.Random(seed)
    words = ts.bitmask_words(grammar.vocab.vocab_size)
    live: list[tuple[ts.Matcher, ts.Matcher, int]] = []
    done = rollbacks = 0
    while done < outputs:
        while len(live) < 6:
            live.append((grammar.matcher(), roomy.matcher(), 0))
        rows = np.zeros((len(live), words), dtype=np.int32)
        want = np.zeros((len(live), words), dtype=np.int32)
        ts.fill_next_token_bitmask([m for m, _, _ in live], rows)
        ts.fill_next_token_bitmask([r for _, r, _ in live], want)
        assert (rows == want).all()
        still = []
        for k, (m, r, n) in enumerate(live):
            ok = allowed(want[k])
            t = eos if (n >= max_len and eos in ok) else rng.choice(ok)
            assert m.accept_token(t) and r.accept_token(t)
            if n > 3 and rng.random() < 0.1:
                m.rollback(2)
                r.rollback(2)
                rollbacks += 1
                n -= 2
            if m.is_finished():
                done += 1
            else:
                still.append((m, r, n + 1))
        live = still
    return rollbacks


@pytest.mark.parametrize(
    ("kind", "source", "max_len", "max_states"),
    [
        ("regex", "[ab]*a[ab]{10}", 14, 600),
        ("json_object", None, 40, 80),
        ("ebnf", 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]+ | root', 30, 60),
    ],
)
def test_many_outputs_renew_the_grammar_instead_of_failing(
    byte_vocab: ts.Vocabulary, kind: str, source: str | None, max_len: int, max_states: int
) -> None:
    def build(**options: int) -> ts.Grammar:
        if kind == "regex":
            assert source is not None
            return ts.Grammar.from_regex(source, byte_vocab, **options)
        if kind == "ebnf":
            assert source is not None
            return ts.Grammar.from_ebnf(source, byte_vocab, **options)
        return ts.Grammar.from_json_object(byte_vocab, max_nesting_depth=6, **options)

    grammar = build(max_states=max_states)
    roomy = build()
    rollbacks = walk(grammar, roomy, byte_vocab.eos_token_ids[0], 150, 7, max_len)
    assert rollbacks > 10
    stats = grammar.stats()
    assert stats["generations"] > 1, stats
    assert stats["dfa_states"] <= max_states


def test_one_output_past_max_states_still_fails(byte_vocab: ts.Vocabulary) -> None:
    """Renewal is for what other matchers built: an output that alone needs more states than
    `max_states` is still a `BudgetError`."""
    grammar = ts.Grammar.from_regex("[ab]*a[ab]{12}", byte_vocab, max_states=40)
    m = grammar.matcher()
    rng = random.Random(5)
    with pytest.raises(ts.BudgetError, match="max_states"):
        for _ in range(400):
            m.accept_token(rng.choice(b"ab"))  # byte ids are the bytes


def test_documents_through_one_json_grammar(byte_vocab: ts.Vocabulary) -> None:
    """Whole documents (not random walks) through one schema grammar with a small budget."""
    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": ["integer", "string"]} for i in range(6)},
    }
    grammar = ts.Grammar.from_json_schema(schema, byte_vocab, property_order="any", max_states=400)
    rng = random.Random(3)
    for _ in range(300):
        keys = rng.sample([f"k{i}" for i in range(6)], rng.randint(0, 6))
        doc = {
            k: (rng.randint(0, 99) if rng.random() < 0.5 else "x" * rng.randint(0, 3)) for k in keys
        }
        m = grammar.matcher()
        for b in json.dumps(doc).encode():
            assert m.accept_token(b)
        assert m.is_accepting()
    assert grammar.stats()["generations"] > 1
