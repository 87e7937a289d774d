r"""Random regexes: every bit of every mask along random walks, against the `regex` module.

What the other regex tests leave open (issue #32): `test_properties.py` compiles random regexes
but checks only the token fed at each step (its mask bit, `accept_token`, the final verdict
against `re.fullmatch`); `test_regex_oracle.py` checks every bit of every mask against an
independent oracle, but only for hand-written regexes; the Rust fuzzer checks mask/accept
agreement over the whole vocabulary and the EOS bit, not the other bits. Here random regexes
(literals, ASCII and non-ASCII classes and negated classes, `.`, `\d`/`\w` with their Unicode
meaning, `(?i)`, alternation, greedy and lazy, counted and open repeats) are compiled for a small
byte-level vocabulary — every single byte of the alphabet's characters (including the bytes of
2- and 3-byte characters, and bytes that are not UTF-8 at all), every pair of them, and a few
whole characters — and walked along the mask. At every step the whole mask is compared with
`test_regex_oracle`'s oracle (the `regex` module's partial full-match over the text so far plus
the token, with a split character completed by representatives), and one token outside the mask
must be refused by `accept_token` without changing the state.

One more oracle workaround than `test_regex_oracle`'s, keeping the language: the `regex` module
(2026.11.19) takes an alternation of two negated classes for their intersection
(`regex.fullmatch("(?:[^a]|[^b])", "a")` does not match), so the oracle sees every negated class
`[^X]` as the set difference `[<every character>--[X]]` (`oracle_pattern`). A step after which
no token of this small vocabulary can continue (the language needs a byte it lacks) raises
`UnspellableError`, as the README documents; the walk ends there.

`TOKENSIEVE_FUZZ_EXAMPLES=N` runs N random regexes instead of the fixed CI set.
"""

from __future__ import annotations

import itertools
import os
import re

import numpy as np
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_regex_oracle import VocabIndex, oracle_for

import tokensieve as ts

CHARS = ["a", "b", "c", "x", "1", "\n", "é", "€", "٣"]  # ٣: an Arabic-Indic digit (\d, \w)
BYTES = sorted({b for ch in CHARS for b in ch.encode()} | {0x80, 0xFF})
TOKENS: list[bytes] = [bytes([b]) for b in BYTES]
TOKENS += [bytes([x, y]) for x, y in itertools.product(BYTES, repeat=2)]
TOKENS += [ch.encode() for ch in CHARS if len(ch.encode()) > 2]
TOKENS += [b"abc", "aé".encode(), "€a".encode(), b"a\n"]
TOKENS = list(dict.fromkeys(TOKENS))
EOS = len(TOKENS)
VOCAB = ts.Vocabulary(TOKENS + [b"<eos>"], eos_token_ids=[EOS])
INDEX = VocabIndex("fuzz", VOCAB, None)

ATOMS = [
    "a",
    "b",
    "c",
    "é",
    "€",
    "\\n",
    "[ab]",
    "[a-c]",
    "[^a]",
    "[^é]",
    "[bé€]",
    "[à-ü]",
    ".",
    "\\d",
    "\\w",
    "(?i:a)",
    "(?i:é)",
    "(?:)",
]
MAX_STEPS = 14
_EXAMPLES = int(os.environ.get("TOKENSIEVE_FUZZ_EXAMPLES", "0"))
_COLLECT = os.environ.get("TOKENSIEVE_FUZZ_COLLECT", "")  # a path: one line of counts per regex


def regexes() -> st.SearchStrategy[str]:
    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(children, children).map(lambda t: f"{t[0]}{t[1]}"),
            st.tuples(children, children).map(lambda t: f"(?:{t[0]}|{t[1]})"),
            st.tuples(children, st.sampled_from(["*", "+", "?", "*?", "+?", "??"])).map(
                lambda t: f"(?:{t[0]}){t[1]}"
            ),
            st.tuples(children, st.integers(0, 3), st.integers(0, 3), st.booleans()).map(
                lambda t: f"(?:{t[0]}){{{min(t[1], t[2])},{max(t[1], t[2])}}}{'?' if t[3] else ''}"
            ),
        )

    return st.recursive(st.sampled_from(ATOMS), extend, max_leaves=10)


def oracle_pattern(pattern: str) -> str:
    """`pattern` for the oracle: negated classes as set differences (see the docstring)."""
    if "[^" not in pattern:
        return pattern
    every = "\\x00-" + chr(0x10FFFF)
    return "(?V1)" + re.sub(r"\[\^([^\]]*)\]", lambda m: f"[{every}--[{m.group(1)}]]", pattern)


def test_oracle_pattern_works_around_the_regex_module() -> None:
    for pattern, text, full in [
        ("(?:[^a]|[^é])", "a", True),
        ("(?:[^a]|[^é])", "é", True),
        ("(?:[^a]|[^b])c", "bc", True),
        ("[^a]", "a", False),
        ("(?:[^a])+x", "bbx", True),
        ("(?:[^a])+x", "bax", False),
    ]:
        assert (re.fullmatch(pattern, text) is not None) == full
        assert (regex.fullmatch(oracle_pattern(pattern), text) is not None) == full, pattern


def ids(bm: np.ndarray) -> set[int]:
    bits = np.unpackbits(np.ascontiguousarray(bm[0]).view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


def show(tokens: set[int]) -> list[bytes | str]:
    return [TOKENS[i] if i < EOS else "<eos>" for i in sorted(tokens)[:12]]


@settings(
    max_examples=_EXAMPLES or 150,
    derandomize=not _EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(regexes(), st.randoms(use_true_random=False))
def test_every_mask_bit_of_a_random_regex(pattern: str, rnd) -> None:  # type: ignore[no-untyped-def]
    g = ts.Grammar.from_regex(pattern, VOCAB)
    oracle = oracle_for(oracle_pattern(pattern))
    m = g.matcher()
    bm = ts.allocate_token_bitmask(1, VOCAB.vocab_size)
    bm = np.asarray(bm)
    prefix = b""
    steps = 0
    for _ in range(MAX_STEPS):
        try:
            m.fill_next_token_bitmask(bm)
        except ts.UnspellableError:
            # the language goes on only with bytes this vocabulary lacks (README: Regexes)
            expected, unknown = INDEX.expected_mask(oracle, prefix)
            assert not expected - unknown, (pattern, prefix, show(expected))
            break
        got = ids(bm)
        expected, unknown = INDEX.expected_mask(oracle, prefix)
        extra, missing = (got - expected) - unknown, (expected - got) - unknown
        assert not extra and not missing, (
            f"{pattern!r} after {prefix!r}: tokensieve also allows {show(extra)}, "
            f"and misses {show(missing)}"
        )
        assert (EOS in got) == m.is_accepting(), (pattern, prefix)
        steps += 1
        refused = sorted(set(range(EOS + 1)) - got)
        if refused:
            t = rnd.choice(refused)
            before = m.history_len
            assert not m.accept_token(t), (pattern, prefix, TOKENS[t] if t < EOS else "<eos>")
            assert m.history_len == before
        go_on = sorted(got - {EOS})
        if not go_on or (EOS in got and rnd.random() < 0.25):
            break
        t = rnd.choice(go_on)
        assert m.accept_token(t), (pattern, prefix, TOKENS[t])
        prefix += TOKENS[t]
    if _COLLECT:
        with open(_COLLECT, "a") as out:
            out.write(f"{steps} {len(prefix)} {pattern!r}\n")
