"""String constraints whose character automaton sends non-ASCII characters to different states
(`\\s`, `[^é]`, astral ranges, ranges beside the surrogate block) are read range by range, in
raw UTF-8, `\\uXXXX` escapes and surrogate pairs. Checked against `jsonschema` (with `re` as
the pattern engine) on strings built from characters at the ranges' edges, spelled raw, fully
escaped and mixed, fed byte by byte with every mask bit checked; both with short length bounds
(a product automaton) and long ones (a counter beside the automaton)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from feed import Lookup, accepts

import tokensieve as ts

# ECMA-262's \s, written out for Python's `re` (whose \s differs)
WS = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

WS_CHARS = ["\t", " ", "\xa0", "\u1680", "\u2000", "\u200a", "\u3000", "\ufeff"]
WORD = ["a", "é", "\x80", "\u200b", "\ud7ff", "\ue000", "😀", "\U0010ffff"]
EMOJI = ["😀", "😁", "🙏"]
EDGE = ["\ufff0", "\uffff", "\U00010000", "\U00010010"]
NEAR = ["\ud7f0", "\ud7ff", "\ue000", "\ue00f"]
Sampler = Callable[[random.Random, int], str]


def pick(pool: list[str]) -> Sampler:
    return lambda r, n: "".join(r.choice(pool) for _ in range(n))


def words(most: int) -> Sampler:
    """Non-blank characters with at most `most` runs of blanks inside."""

    def f(r: random.Random, n: int) -> str:
        cs = [r.choice(WORD) for _ in range(n)]
        for _ in range(r.randint(1, most) if n > 2 else 0):
            cs[r.randrange(1, n - 1)] = r.choice(WS_CHARS)
        return "".join(cs)

    return f


# (ECMA pattern, the same in Python's `re`, a sampler of strings that mostly match)
PATTERNS: list[tuple[str, str, Sampler]] = [
    (r"^\S+\s\S+$", rf"^[^{WS}]+[{WS}][^{WS}]+\Z", words(1)),
    (r"^(?:\S+\s+){0,2}\S+$", rf"^(?:[^{WS}]+[{WS}]+){{0,2}}[^{WS}]+\Z", words(2)),
    ("^[^é]+$", "^[^é]+\\Z", pick(WORD[:1] + WORD[2:] + WS_CHARS)),
    ("^[a-zé-ü]+x", "^[a-zé-ü]+x", lambda r, n: pick(["a", "é", "ü", "ö"])(r, n - 1) + "x"),
    ("^[😀-🙏]+[^😀]$", "^[😀-🙏]+[^😀]\\Z", lambda r, n: pick(EMOJI)(r, n - 1) + r.choice(WORD)),
    ("^[\ufff0-\U00010010]+$", "^[\ufff0-\U00010010]+\\Z", pick(EDGE)),
    (
        "^[\ud7f0-\ud7ff\ue000-\ue00f]+a?$",
        "^[\ud7f0-\ud7ff\ue000-\ue00f]+a?\\Z",
        lambda r, n: pick(NEAR)(r, n - 1) + r.choice([*NEAR, "a"]),
    ),
    (
        "[\u0080-\u07ff][\u0800-\uffff]",
        "[\u0080-\u07ff][\u0800-\uffff]",
        lambda r, n: (
            pick(WORD)(r, n - 2)
            + r.choice(["\x80", "é", "\u07ff"])
            + r.choice(["\u0800", "\uffff"])
        ),
    ),
]

# characters at the edges of the ranges above, and a few ordinary ones
CHARS = (
    list('ax \t\n"\\/')
    + ["\x7f", "\x80", "\x9f", "\xa0", "é", "ü", "\u07ff", "\u0800", "\u1680", "\u2000"]
    + ["\u200a", "\u200b", "\u3000", "\ud7f0", "\ud7ff", "\ue000", "\ue00f", "\ufeff"]
    + ["\ufff0", "\uffff", "\U00010000", "\U00010010", "\U00010011", "😀", "😁", "🙏", "🙐"]
    + ["\U0010ffff"]
)


def spellings(s: str, r: random.Random) -> list[str]:
    """`s` as a JSON string: raw, every non-ASCII character escaped, and mixed."""
    raw = json.dumps(s, ensure_ascii=False)
    esc = json.dumps(s, ensure_ascii=True)
    mixed = "".join(json.dumps(c, ensure_ascii=r.random() < 0.5)[1:-1] for c in s)
    return [raw, esc, f'"{mixed}"']


def strings(r: random.Random, sample: Sampler, lo: int, hi: int) -> list[str]:
    """For each length around the bounds: a sampled string and copies with one character
    changed, dropped or added."""
    out = []
    for n in range(max(1, lo - 1), hi + 2):
        for _ in range(4):
            s = sample(r, n)
            out.append(s)
            k = r.randrange(len(s)) if s else 0
            c = r.choice(CHARS)
            out.append(r.choice([s[:k] + c + s[k + 1 :], s[:k] + s[k + 1 :], s[:k] + c + s[k:]]))
    return out


@pytest.mark.parametrize("bounds", [(0, 4), (1, 5), (33, 36)])
@pytest.mark.parametrize("ecma,py,sample", PATTERNS)
def test_split_ranges_agree_with_jsonschema(
    ecma: str,
    py: str,
    sample: Sampler,
    bounds: tuple[int, int],
    byte_vocab: ts.Vocabulary,
    byte_lookup: Lookup,
) -> None:
    lo, hi = bounds
    schema: dict[str, Any] = {"type": "string", "pattern": ecma, "minLength": lo, "maxLength": hi}
    g = ts.Grammar.from_json_schema(schema, byte_vocab)
    oracle = jsonschema.Draft202012Validator({**schema, "pattern": py})
    r = random.Random(f"{ecma}{bounds}")
    texts = strings(r, sample, lo, hi)
    seen = {True: 0, False: 0}
    for s in texts:
        want = oracle.is_valid(s)
        seen[want] += 1
        for text in spellings(s, r):
            assert accepts(g, text, byte_lookup) == want, (schema, text)
    assert seen[False] > 0 and seen[True] > 0
