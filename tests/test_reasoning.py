"""Reasoning spans: free text up to an end marker, then the grammar.

The reference is independent of the core's marker automaton: plain substring search finds the
marker, the ``regex`` module's partial full-match judges what follows it, and the thinking
budget is checked on the token sequence as documented (from the budget's token on, the bytes
go straight along what is left of the marker).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import regex

import tokensieve as ts

TOKENS = [
    b"<",
    b"/",
    b"t",
    b">",
    b"</t>",
    b"</t>{",
    b"t>1",
    b"<<",
    b"x",
    b"{",
    b"}",
    b"1",
    b"2",
    b'"',
    b"a",
    b"{}",
    b"11",
    b" ",
    b":",
]
EOS = len(TOKENS)
VOCAB = ts.Vocabulary([*TOKENS, b"<eos>"], eos_token_ids=[EOS])
PATTERNS = [r"\{\}|1+", r'\{"a":[12]\}', r"[12]{1,3}", r'"a*"']
MARKERS = ["</t>", "<<", "t", "1"]


def allowed(m: ts._core.Matcher) -> set[int]:
    bm = ts.allocate_token_bitmask(1, VOCAB.vocab_size)
    m.fill_next_token_bitmask(bm)
    bits = np.unpackbits(np.asarray(bm[0]).view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits[: VOCAB.vocab_size]).tolist())


def _split(seq: list[int], marker: bytes) -> tuple[bytes, list[int], int | None]:
    text = b""
    starts = []
    for t in seq:
        starts.append(len(text))
        text += TOKENS[t]
    i = text.find(marker)
    return text, starts, (None if i < 0 else i + len(marker))


def prefix_ok(pattern: str, marker: bytes, budget: int | None, seq: list[int]) -> bool:
    """Can the (EOS-free) token sequence go on into a complete output?"""
    text, starts, end = _split(seq, marker)
    # the index of the token the marker ends in (or past the end while reasoning)
    k = len(seq) if end is None else max(i for i, s in enumerate(starts) if s < end)
    if budget is not None and budget <= k and budget < len(seq):
        before = text[: starts[budget]]
        p = max(q for q in range(len(marker)) if before.endswith(marker[:q]))
        rest, after = marker[p:], text[starts[budget] :]
        if end is None:
            if not rest.startswith(after):
                return False
        elif not (after.startswith(rest) and starts[budget] + len(rest) == end):
            return False
    if end is None:
        return True
    return regex.fullmatch(pattern, text[end:].decode(), partial=True) is not None


def complete(pattern: str, marker: bytes, seq: list[int]) -> bool:
    text, _, end = _split(seq, marker)
    return end is not None and regex.fullmatch(pattern, text[end:].decode()) is not None


@pytest.mark.parametrize("pattern", PATTERNS)
def test_masks_match_the_reference(pattern: str) -> None:
    grammar = ts.Grammar.from_regex(pattern, VOCAB)
    rng = random.Random(pattern)
    checked = 0
    for marker in MARKERS:
        for budget in (None, 0, 1, 3):
            for _ in range(12):
                m = grammar.matcher(reasoning_end=marker, thinking_budget=budget)
                seq: list[int] = []
                for _step in range(14):
                    got = allowed(m)
                    want = {
                        t
                        for t in range(len(TOKENS))
                        if prefix_ok(pattern, marker.encode(), budget, [*seq, t])
                    }
                    if complete(pattern, marker.encode(), seq):
                        want.add(EOS)
                    assert got == want, (pattern, marker, budget, seq)
                    checked += 1
                    if not got:
                        break
                    t = rng.choice(sorted(got))
                    assert m.accept_token(t)
                    if t == EOS:
                        assert m.is_finished()
                        break
                    seq.append(t)
                    text, _, end = _split(seq, marker.encode())
                    assert m.is_reasoning() == (end is None)
    assert checked > 300


def test_split_marker_and_bytes_after_it() -> None:
    grammar = ts.Grammar.from_regex(r"\{\}|1+", VOCAB)
    m = grammar.matcher(reasoning_end="</t>")
    assert m.reasoning_end == "</t>" and m.thinking_budget is None
    for t in (TOKENS.index(b"x"), TOKENS.index(b"<"), TOKENS.index(b"/")):
        assert m.accept_token(t) and m.is_reasoning()
    assert m.reasoning_tokens == 3
    assert not m.accept_token(EOS)  # no EOS while reasoning
    # "t>1" ends the marker and brings the grammar's first byte
    assert m.accept_token(TOKENS.index(b"t>1"))
    assert not m.is_reasoning() and m.is_accepting()
    assert allowed(m) == {TOKENS.index(b"1"), TOKENS.index(b"11"), EOS}
    m.rollback(1)
    assert m.is_reasoning() and m.reasoning_tokens == 3
    # after "</", "</t>{" drops the match, then spells the whole marker and a "{"
    assert m.accept_token(TOKENS.index(b"</t>{"))
    assert allowed(m) == {TOKENS.index(b"}")}
    # a token ending the marker with bytes the grammar refuses is not allowed
    ones = ts.Grammar.from_regex(r"1+", VOCAB).matcher(reasoning_end="</t>")
    assert TOKENS.index(b"</t>{") not in allowed(ones)
    assert not ones.accept_token(TOKENS.index(b"</t>{"))
    assert {TOKENS.index(b"</t>"), TOKENS.index(b"t>1")} <= allowed(ones)


def test_budget_forces_the_marker() -> None:
    grammar = ts.Grammar.from_regex(r"1+", VOCAB)
    m = grammar.matcher(reasoning_end="</t>", thinking_budget=2)
    x = TOKENS.index(b"x")
    assert m.accept_token(x) and m.accept_token(x)
    assert allowed(m) == {TOKENS.index(b"<"), TOKENS.index(b"</t>")}
    assert not m.accept_token(x)
    assert m.accept_token(TOKENS.index(b"<"))
    assert allowed(m) == {TOKENS.index(b"/")}
    assert m.accept_token(TOKENS.index(b"/"))
    assert allowed(m) == {TOKENS.index(b"t"), TOKENS.index(b"t>1")}


def test_bad_settings_are_refused() -> None:
    grammar = ts.Grammar.from_regex(r"1+", VOCAB)
    with pytest.raises(ValueError, match="thinking budget needs"):
        grammar.matcher(thinking_budget=3)
    with pytest.raises(ValueError, match="empty"):
        grammar.matcher(reasoning_end="")
    with pytest.raises(ValueError, match="no sequence of tokens spells"):
        grammar.matcher(reasoning_end="</think>")  # no "h" in the vocabulary
    with pytest.raises(ValueError, match="not supported"):
        grammar.matcher(max_tokens=8, reasoning_end="</t>")
    m = grammar.matcher(reasoning_end="</t>")
    with pytest.raises(ValueError, match="not supported"):
        m.max_tokens = 8
    assert m.max_tokens is None
