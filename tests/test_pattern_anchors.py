"""`^` and `$` anywhere in a JSON Schema `pattern` (searched, ECMA semantics: the string's
beginning and end), not only at the ends of its top-level alternatives: the language is exact,
checked against Python's `re.search` on random strings (with `$` read as `\\Z`, which is what
ECMA's `$` means without the multiline flag), as a string's pattern and as a patternProperties
key language; and look-aheads at the start of a string's pattern (`^(?!X)`, `^(?=X)`), the
others refused by name.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from feed import accepts, byte_vocabulary, token_lookup

import tokensieve as ts

PATTERNS = [
    "(^a|b)c",
    "^a$|^b$",
    "^(a|b$)",
    "(?:^|/)foo$",
    "^[a-z]+($|-)",
    "(a|^)b(c|$)",
    "(^|x)y*(z|$)",
    "^(ab|c$)*d",
    "(^a)?b",
    "a(^b)?c",
    "((^a|b)c)+$",
    "(x|^)+y",
    "q(b$|c)",
    "^\\d+(\\.\\d+)?$|^x",
    "(^a|b){2,3}c",
]
ALPHABET = "abcxyzq/fo-d1.9"


def strings(seed: str, n: int) -> list[str]:
    """Random short strings, half of them built from pieces that the patterns name."""
    r = random.Random(seed)
    pieces = ["a", "b", "c", "x", "y", "z", "/", "foo", "-", "1", ".", "ab", "q"]
    out = {""}
    for _ in range(n):
        if r.random() < 0.5:
            out.add("".join(r.choice(ALPHABET) for _ in range(r.randrange(7))))
        else:
            out.add("".join(r.choice(pieces) for _ in range(r.randrange(5))))
    return sorted(out)


def python_form(p: str) -> str:
    return p.replace("$", r"\Z").replace("\\d", "[0-9]")


def agree_with_re(pattern: str, texts: list[str]) -> None:
    """A string schema of `pattern` accepts each of `texts` exactly when `re.search` finds the
    pattern in it; both verdicts occur."""
    vocab = byte_vocabulary()
    lookup = token_lookup(vocab)
    g = ts.Grammar.from_json_schema({"type": "string", "pattern": pattern}, vocab)
    want_re = re.compile(python_form(pattern))
    verdicts = {True: 0, False: 0}
    for s in texts:
        want = want_re.search(s) is not None
        verdicts[want] += 1
        assert accepts(g, json.dumps(s), lookup) == want, (pattern, s)
    assert verdicts[True] and verdicts[False], verdicts


@pytest.mark.parametrize("pattern", PATTERNS)
def test_inner_anchors_match_re_search(pattern: str) -> None:
    agree_with_re(pattern, strings(pattern, 600))


@pytest.mark.parametrize("pattern", ["(^a|b)c", "^a$|^b$", "(?:^|/)foo$"])
def test_inner_anchors_in_key_languages(pattern: str) -> None:
    vocab = byte_vocabulary()
    lookup = token_lookup(vocab)
    schema = {
        "type": "object",
        "patternProperties": {pattern: {"type": "integer"}},
        "additionalProperties": False,
    }
    g = ts.Grammar.from_json_schema(schema, vocab)
    want_re = re.compile(python_form(pattern))
    for s in strings(pattern + "keys", 300):
        want = want_re.search(s) is not None
        assert accepts(g, json.dumps({s: 1}), lookup) == want, (pattern, s)


def test_a_pattern_no_string_matches_has_no_value() -> None:
    # `x` before the beginning: nothing matches, so a required string has no value at all
    with pytest.raises(ts.SchemaError, match="no JSON value"):
        ts.Grammar.from_json_schema({"type": "string", "pattern": "x(^a)"}, byte_vocabulary())
    # beside another branch, the branch is simply empty
    g = ts.Grammar.from_json_schema(
        {"anyOf": [{"type": "string", "pattern": "x(^a)"}, {"type": "integer"}]},
        byte_vocabulary(),
    )
    lookup = token_lookup(g.vocab)
    assert accepts(g, "7", lookup) and not accepts(g, '"xa"', lookup)


LOOKAHEADS = [
    r"^(?!@@)[\w@]+$",
    r"^(?![ \t\n]*\(default(.*)\))[\s\S]*",
    r"^(?=a)(?!ab)[a-c]*$",
    r"^(?!x|y)",
    r"^(?=.*\d)(?=.*[a-z])[a-z0-9]{3,}$",
    r"^(?!\s*$).+",
]
LOOK_ALPHABET = "ab@x y1(default)\t\n"


@pytest.mark.parametrize("pattern", LOOKAHEADS)
def test_lookaheads_at_the_start_match_re_search(pattern: str) -> None:
    # `^(?!X)rest`: the strings of `^rest` that do not start with X (`(?=X)`: that do)
    r = random.Random(pattern)
    texts = {"".join(r.choice(LOOK_ALPHABET) for _ in range(r.randrange(8))) for _ in range(700)}
    texts |= {"", "@@a", "a@", " (default(x))", "(default)", "abc", "acb", "ab1c", "a1b"}
    agree_with_re(pattern, sorted(texts))


@pytest.mark.parametrize(
    "pattern",
    [r"^(?!a)b|c", r"a(?=b)", r"(?!a)b", r"^a(?!b)"],
)
def test_other_lookarounds_are_refused_by_name(pattern: str) -> None:
    with pytest.raises(ts.SchemaError, match="look-around"):
        ts.Grammar.from_json_schema({"type": "string", "pattern": pattern}, byte_vocabulary())


def test_a_leading_lookahead_in_a_key_pattern_is_refused_by_name() -> None:
    schema = {"type": "object", "patternProperties": {"^(?!a)": {"type": "integer"}}}
    with pytest.raises(ts.SchemaError, match="look-around"):
        ts.Grammar.from_json_schema(schema, byte_vocabulary())
