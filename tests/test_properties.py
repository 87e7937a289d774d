"""Property tests: random regexes and strings against Python's `re`, rollback, batch fill."""

from __future__ import annotations

import itertools
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokensieve as ts

# A small byte-level vocabulary: every byte string of length 1..2 over the alphabet's bytes
# (including the two bytes of "é", so tokens can split a character), plus ASCII strings of
# length 3. Any segmentation of a string into pieces of at most 2 bytes is a tokenization.
ALPHA_BYTES = [b"a", b"b", b"c", b"\xc3", b"\xa9"]
TOKENS: list[bytes] = []
TOKENS += ALPHA_BYTES
TOKENS += [x + y for x, y in itertools.product(ALPHA_BYTES, repeat=2)]
TOKENS += [bytes(p) for p in itertools.product(b"abc", repeat=3)]
TOKENS += ["é".encode()]
TOKENS = list(dict.fromkeys(TOKENS))
EOS = len(TOKENS)
VOCAB = ts.Vocabulary(TOKENS + [b"<eos>"], eos_token_ids=[EOS], vocab_size=EOS + 7)
TOKEN_ID = {t: i for i, t in enumerate(TOKENS)}

ATOMS = ["a", "b", "c", "é", "[ab]", "[^a]", ".", "(?:)", "[bé]"]


def regexes() -> st.SearchStrategy[str]:
    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(children, children).map(lambda t: f"{t[0]}{t[1]}"),
            st.tuples(children, children).map(lambda t: f"(?:{t[0]}|{t[1]})"),
            children.map(lambda c: f"(?:{c})*"),
            children.map(lambda c: f"(?:{c})+"),
            children.map(lambda c: f"(?:{c})?"),
            st.tuples(children, st.integers(0, 3), st.integers(0, 3)).map(
                lambda t: f"(?:{t[0]}){{{min(t[1], t[2])},{max(t[1], t[2])}}}"
            ),
        )

    return st.recursive(st.sampled_from(ATOMS), extend, max_leaves=8)


strings = st.lists(st.sampled_from(["a", "b", "c", "é"]), max_size=8).map("".join)


def segment(data: bytes, cuts: list[bool]) -> list[int]:
    """Split `data` into tokens of 1 or 2 bytes, cutting where `cuts` says."""
    out: list[int] = []
    i = 0
    k = 0
    while i < len(data):
        two = i + 2 <= len(data) and (cuts[k % len(cuts)] if cuts else False)
        n = 2 if two else 1
        out.append(TOKEN_ID[data[i : i + n]])
        i += n
        k += 1
    return out


def allowed(row: np.ndarray) -> set[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regexes(), strings, st.lists(st.booleans(), min_size=1, max_size=8))
def test_accepted_token_by_token_iff_full_match(pattern: str, text: str, cuts: list[bool]) -> None:
    expected = re.fullmatch(pattern, text) is not None
    g = ts.Grammar.from_regex(pattern, VOCAB)
    m = g.matcher()
    bm = np.zeros((1, ts.bitmask_words(VOCAB.vocab_size)), dtype=np.int32)
    ok = True
    for t in segment(text.encode(), cuts):
        m.fill_next_token_bitmask(bm)
        in_mask = t in allowed(bm[0])
        accepted = m.accept_token(t)
        assert in_mask == accepted, (pattern, text, t)
        if not accepted:
            ok = False
            break
    if ok:
        m.fill_next_token_bitmask(bm)
        assert (EOS in allowed(bm[0])) == m.is_accepting()
        ok = m.accept_token(EOS)
    assert ok == expected, (pattern, text)


@settings(max_examples=100, deadline=None)
@given(regexes(), st.lists(st.integers(0, len(TOKENS)), max_size=12), st.data())
def test_rollback_restores_masks(pattern: str, tokens: list[int], data: st.DataObject) -> None:
    g = ts.Grammar.from_regex(pattern, VOCAB)
    m = g.matcher()
    bm = np.zeros((1, ts.bitmask_words(VOCAB.vocab_size)), dtype=np.int32)
    m.fill_next_token_bitmask(bm)
    masks = [bm[0].copy()]
    states = [(m.is_accepting(), m.is_finished())]
    for t in tokens:
        if m.accept_token(t):
            m.fill_next_token_bitmask(bm)
            masks.append(bm[0].copy())
            states.append((m.is_accepting(), m.is_finished()))
    assert m.history_len == len(masks) - 1
    while m.history_len:
        n = data.draw(st.integers(1, m.history_len))
        m.rollback(n)
        del masks[len(masks) - n :]
        del states[len(states) - n :]
        m.fill_next_token_bitmask(bm)
        np.testing.assert_array_equal(bm[0], masks[-1])
        assert (m.is_accepting(), m.is_finished()) == states[-1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(regexes(), st.lists(st.integers(0, len(TOKENS)), max_size=6)),
        min_size=1,
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_batch_fill_equals_row_fill(specs: list[tuple[str, list[int]]], rnd) -> None:  # type: ignore[no-untyped-def]
    matchers = []
    for pattern, tokens in specs:
        m = ts.Grammar.from_regex(pattern, VOCAB).matcher()
        m.accept_tokens(tokens)
        matchers.append(m)
    words = ts.bitmask_words(VOCAB.vocab_size)
    rows = len(matchers) + 2
    indices = rnd.sample(range(rows), len(matchers))
    batch = np.full((rows, words), 12345, dtype=np.int32)
    ts.fill_next_token_bitmask(matchers, batch, indices)
    for k, m in enumerate(matchers):
        row = np.zeros((1, words), dtype=np.int32)
        m.fill_next_token_bitmask(row)
        np.testing.assert_array_equal(batch[indices[k]], row[0])
    untouched = set(range(rows)) - set(indices)
    for r in untouched:
        assert (batch[r] == 12345).all()
