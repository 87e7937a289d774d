"""`uniqueItems: true` over strings: exact masks against brute force over small vocabularies.

The languages here are finite (compact whitespace, short item languages, bounded arrays), so
every valid document can be listed in every spelling the grammar allows: its prefixes are the
outputs that can still be finished, and a mask must allow exactly the tokens that keep the output
among them (and EOS exactly on a whole document). Every reachable output is visited, depth
first, through `accept_token` and `rollback`, and every refused token is also offered to
`accept_token`, which must refuse it.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import jsonschema
import numpy as np
import pytest
from feed import accepts, next_mask

import tokensieve as ts


def char_spellings(c: str) -> list[str]:
    """A character raw and as `\\u` escapes in every case of their hex digits (a surrogate
    pair above the BMP)."""
    units = (
        [ord(c)]
        if ord(c) < 0x10000
        else [0xD800 + ((ord(c) - 0x10000) >> 10), 0xDC00 + ((ord(c) - 0x10000) & 0x3FF)]
    )
    hexes = [
        "".join(p)
        for p in itertools.product(
            *[sorted({h.lower(), h.upper()}) for h in "".join(f"{u:04x}" for u in units)]
        )
    ]
    return [c] + ["".join("\\u" + h[k : k + 4] for k in range(0, len(h), 4)) for h in hexes]


def spellings(value: str, escapes: bool) -> list[str]:
    if not escapes:
        return [value]
    return ["".join(p) for p in itertools.product(*(char_spellings(c) for c in value))]


def arrays(values: list[str], max_items: int, unique: bool) -> list[list[str]]:
    out: list[list[str]] = []
    for k in range(max_items + 1):
        if unique:
            out.extend(list(p) for p in itertools.permutations(values, k))
        else:
            out.extend(list(p) for p in itertools.product(values, repeat=k))
    return out


def array_texts(arr: list[str], escapes: bool) -> list[str]:
    parts = [[f'"{s}"' for s in spellings(v, escapes)] for v in arr]
    return ["[" + ",".join(p) + "]" for p in itertools.product(*parts)]


def small_vocab(tokens: list[str | bytes]) -> tuple[ts.Vocabulary, list[bytes], int]:
    toks = [t.encode() if isinstance(t, str) else t for t in tokens]
    assert len(set(toks)) == len(toks)
    eos = len(toks)
    return ts.Vocabulary(toks + [b"<eos>"], eos_token_ids=[eos]), toks, eos


def brute_force(grammar: ts.Grammar, toks: list[bytes], eos: int, docs: set[bytes]) -> int:
    """Visit every output the grammar lets through; check each mask against `docs`. Returns the
    number of outputs visited."""
    prefixes = {d[:i] for d in docs for i in range(len(d) + 1)}
    n = len(toks) + 1
    bm = ts.allocate_token_bitmask(1, n)
    m = grammar.matcher()
    visited = 0

    def visit(out: bytes) -> None:
        nonlocal visited
        visited += 1
        _, allowed = next_mask(m, bm, n)
        want = {i for i, t in enumerate(toks) if out + t in prefixes}
        if out in docs:
            want.add(eos)
        got = {int(i) for i in allowed}
        assert got == want, (out, sorted(toks[i] if i < eos else b"<eos>" for i in got ^ want))
        for t in range(n):
            if t in want:
                continue
            if m.accept_token(t):
                m.rollback(1)
                raise AssertionError((out, toks[t] if t < eos else "<eos>", "accepted"))
        for t in sorted(want):
            assert m.accept_token(t)
            if t != eos:
                visit(out + toks[t])
            m.rollback(1)

    visit(b"")
    return visited


ESCAPE_TOKENS = ["[", "]", ",", '"', "a", "b", "\\", "u", "0", "6", "1", "2", '","', '"]', '["']
ESCAPE_TOKENS += ['a"', '"a', "ab", '["a","a', '","a"', 'a","a', "\\u0061", "\\u006", '61"', "aa"]
ESCAPE_TOKENS += ['"b","', "x", "{"]


@pytest.mark.parametrize(
    ("pattern", "values", "max_items"),
    [
        # once a and ab are held, `"a` has no completion left while b is still free
        ("^(a|ab|b)$", ["a", "ab", "b"], 3),
        ("^[ab]{1,2}$", ["a", "b", "aa", "ab", "ba", "bb"], 2),
    ],
)
def test_root_array_with_escapes_brute_force(
    pattern: str, values: list[str], max_items: int
) -> None:
    """A unique array of short strings over {a, b}, spelled raw or as `\\u` escapes:
    duplicates in any spelling, prefixes whose every completion is taken, escapes under way,
    tokens spanning items, a finite item language used up."""
    items = {"type": "string", "pattern": pattern}
    schema = {"type": "array", "items": items, "uniqueItems": True, "maxItems": max_items}
    vocab, toks, eos = small_vocab(ESCAPE_TOKENS)
    g = ts.Grammar.from_json_schema(schema, vocab, whitespace="compact")
    docs = {t.encode() for a in arrays(values, max_items, True) for t in array_texts(a, True)}
    assert brute_force(g, toks, eos, docs) > 500


def test_multibyte_characters_split_across_tokens() -> None:
    """Characters of two and four UTF-8 bytes, read a byte at a time or as escapes (a surrogate
    pair for the emoji): once é and éa are held, a lone first byte of é (or `\\u00` of its
    escape) can lead nowhere while b is still free."""
    schema = {
        "type": "array",
        "items": {"type": "string", "pattern": "^(é|éa|b|😀)$"},
        "uniqueItems": True,
        "maxItems": 3,
    }
    tokens: list[str | bytes] = ["[", "]", ",", '"', "a", "b", "é", b"\xc3", b"\xa9", "😀"]
    tokens += [
        b"\xf0\x9f",
        b"\x98\x80",
        "\\",
        "u",
        "0",
        "e",
        "E",
        "9",
        "d",
        "D",
        "8",
        "3",
        "6",
        "1",
        "2",
    ]
    tokens += ["\\u00", "\\ud83d", '","', 'é"']
    vocab, toks, eos = small_vocab(tokens)
    g = ts.Grammar.from_json_schema(schema, vocab, whitespace="compact")
    values = ["é", "éa", "b", "😀"]
    docs = {t.encode() for a in arrays(values, 3, True) for t in array_texts(a, True)}
    assert brute_force(g, toks, eos, docs) > 500


INT_TOKENS = ["[", "]", ",", "-", "0", "1", "8", "9", "10", "11", "-0", "-1", ",1", "0,", "1]"]
INT_TOKENS += ["[1", "[-0,0", "1,1", "[10,11,1", " "]


@pytest.mark.parametrize(
    ("bounds", "values"),
    [
        # once 10 and 11 are held, an item starting with 1 can only repeat one
        ({"minimum": 8, "maximum": 11}, [8, 9, 10, 11]),
        # -0 is zero: once -1 and 0 are held, an item starting with - repeats one
        ({"minimum": -1, "maximum": 1}, [-1, 0, 1]),
    ],
)
def test_integers_brute_force(bounds: dict[str, int], values: list[int]) -> None:
    """A unique array of integers, zero also spelled `-0`, at most three items."""
    schema = {"type": "array", "items": {"type": "integer", **bounds}, "uniqueItems": True}
    schema["maxItems"] = 3
    vocab, toks, eos = small_vocab(INT_TOKENS)
    g = ts.Grammar.from_json_schema(schema, vocab, whitespace="compact")
    spell = {v: [str(v)] + (["-0"] if v == 0 else []) for v in values}
    docs = {
        ("[" + ",".join(p) + "]").encode()
        for arr in arrays([str(v) for v in values], 3, True)
        for p in itertools.product(*(spell[int(v)] for v in arr))
    }
    assert brute_force(g, toks, eos, docs) > 30


def test_unique_and_plain_arrays_by_path() -> None:
    """Only the array at the registered path is unique: `more` (same items, no uniqueItems)
    repeats values; every object of an outer array has its own unique `t`."""
    item = {"type": "string", "pattern": "^[ab]$"}
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": item, "uniqueItems": True, "maxItems": 3},
            "more": {"type": "array", "items": item, "maxItems": 2},
        },
        "required": ["tags", "more"],
        "additionalProperties": False,
    }
    tokens = ["{", "}", "[", "]", ",", ":", '"', "a", "b", "tags", "more", '"tags":["', '","']
    tokens += ['"]', 'a","a', '"],"more":["a","a', '","a"]', '"a"']
    vocab, toks, eos = small_vocab(tokens)
    g = ts.Grammar.from_json_schema(schema, vocab, whitespace="compact")
    docs = {
        ('{"tags":' + t + ',"more":' + u + "}").encode()
        for a in arrays(["a", "b"], 3, True)
        for t in array_texts(a, False)
        for b in arrays(["a", "b"], 2, False)
        for u in array_texts(b, False)
    }
    assert brute_force(g, toks, eos, docs) > 50

    outer = {
        "type": "array",
        "maxItems": 2,
        "items": {
            "type": "object",
            "properties": {"t": schema["properties"]["tags"]},  # type: ignore[index]
            "required": ["t"],
            "additionalProperties": False,
        },
    }
    tokens = ["{", "}", "[", "]", ",", ":", '"', "a", "b", "t", '{"t":["', '","', '"]}', "},{"]
    vocab, toks, eos = small_vocab(tokens)
    g = ts.Grammar.from_json_schema(outer, vocab, whitespace="compact")
    inner = ['{"t":' + t + "}" for a in arrays(["a", "b"], 3, True) for t in array_texts(a, False)]
    docs = {
        ("[" + ",".join(p) + "]").encode()
        for k in range(3)
        for p in itertools.product(inner, repeat=k)
    }
    assert brute_force(g, toks, eos, docs) > 50


def test_through_ref_and_all_of() -> None:
    """A unique array reached through `$ref` and `allOf` is registered where it stands; `minItems`
    above the number of distinct strings leaves no array."""
    schema = {
        "$defs": {"Tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "uniqueItems": True}},
        "allOf": [{"properties": {"tags": {"$ref": "#/$defs/Tags"}}, "required": ["tags"]}],
        "type": "object",
    }
    schema["$defs"]["Tag"] = {"type": "string", "maxLength": 1, "pattern": "^[ab]*$"}  # type: ignore[index]
    vocab, toks, eos = small_vocab(
        ['{"tags":[', "]}", '"a"', '"b"', '""', ",", '"', "a", "b", "]", "}"]
    )
    g = ts.Grammar.from_json_schema(
        schema, vocab, whitespace="compact", additional_properties="forbid"
    )
    docs = {
        ('{"tags":' + t + "}").encode()
        for a in arrays(["", "a", "b"], 3, True)
        for t in array_texts(a, False)
    }
    assert brute_force(g, toks, eos, docs) > 20
    too_many = {
        "type": "array",
        "items": {"enum": ["a", "b", "c"] * 1, "type": "string", "pattern": "^[ab]$"},
    }
    too_many.update(uniqueItems=True, minItems=3)
    with pytest.raises(ts.SchemaError):
        ts.Grammar.from_json_schema(too_many, vocab)


@pytest.mark.parametrize("kw", ["anyOf", "oneOf"])
def test_an_array_or_a_scalar(kw: str) -> None:
    """`Optional[set[str]]` (an array or null), and an array or a string: the array branch is
    the only one with arrays there, so it is registered; the scalar branches stay open."""
    item = {"type": "string", "pattern": "^[ab]$"}
    unique = {"type": "array", "items": item, "uniqueItems": True, "maxItems": 3}
    schema = {
        "type": "object",
        "properties": {"tags": {kw: [unique, {"type": "null"}, {"$ref": "#/$defs/S"}]}},
        "required": ["tags"],
        "additionalProperties": False,
        "$defs": {"S": {"type": "string", "maxLength": 1, "pattern": "^c*$"}},
    }
    tokens = ['{"tags":', "}", "[", "]", ",", '"', "a", "b", "c", "null", '"a","a', '"]}']
    vocab, toks, eos = small_vocab(tokens)
    g = ts.Grammar.from_json_schema(schema, vocab, whitespace="compact")
    values = [t for a in arrays(["a", "b"], 3, True) for t in array_texts(a, False)]
    values += ["null", '""', '"c"']
    docs = {('{"tags":' + v + "}").encode() for v in values}
    assert brute_force(g, toks, eos, docs) > 30


REFUSED = [
    # anyOf of two container branches: the path alone does not say which one an array is
    {
        "anyOf": [
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            {"type": "object"},
        ]
    },
    # prefixItems: items of different schemas
    {
        "type": "array",
        "prefixItems": [{"type": "string"}],
        "items": {"type": "string"},
        "uniqueItems": True,
    },
    # items that are not only strings (or only integers)
    {"type": "array", "items": {"type": ["string", "null"]}, "uniqueItems": True},
    {
        "type": "array",
        "items": {"type": "number", "maximum": 3, "multipleOf": 0.5},
        "uniqueItems": True,
    },
    {"type": "array", "items": {"type": "object"}, "uniqueItems": True},
    # under patternProperties: keys of a pattern
    {
        "type": "object",
        "patternProperties": {
            "^x": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
        },
    },
    # inside a recursive $ref: one compiled copy serves every depth
    {
        "$defs": {
            "N": {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/N"}, "maxItems": 2},
                },
            }
        },
        "$ref": "#/$defs/N",
    },
]


@pytest.mark.parametrize("schema", REFUSED)
def test_unsupported_places_name_the_keyword(schema: dict[str, Any]) -> None:
    vocab, _, _ = small_vocab(["a"])
    with pytest.raises(ts.SchemaError, match="uniqueItems"):
        ts.Grammar.from_json_schema(schema, vocab)


def test_what_cannot_go_with_it() -> None:
    """Index files, token budgets and reasoning spans refuse such a grammar with an error."""
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    vocab, _, _ = small_vocab(['["a"]', "a", '"', "[", "]", ","])
    g = ts.Grammar.from_json_schema(schema, vocab)
    with pytest.raises((ValueError, ts.TokensieveError), match="uniqueItems"):
        g.to_bytes()
    with pytest.raises((ValueError, ts.TokensieveError), match="uniqueItems"):
        g.matcher(max_tokens=10)
    with pytest.raises((ValueError, ts.TokensieveError), match="uniqueItems"):
        g.matcher(reasoning_end="</think>")


def test_batch_fill_and_rollback_agree(vocab: ts.Vocabulary, lookup: Any) -> None:
    """On a real vocabulary: duplicates refused in any spelling, the batch fill equals each
    matcher's own mask, and rolling back restores what the array holds."""
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "required": ["tags"],
    }
    g = ts.Grammar.from_json_schema(schema, vocab)
    assert accepts(g, '{"tags": ["python", "rust"]}', lookup)
    assert not accepts(g, '{"tags": ["python", "rust", "python"]}', lookup)
    assert not accepts(g, '{"tags": ["python", "pyth\\u006fn"]}', lookup)
    assert accepts(g, '{"tags": ["python", "pytho", "pythons"]}', lookup)
    table, longest = lookup

    def ids_of(text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for k in range(min(longest, len(text) - i), 0, -1):
                t = table.get(text[i : i + k].encode())
                if t is not None:
                    out.append(t)
                    i += k
                    break
            else:
                raise AssertionError(text[i:])
        return out

    n = vocab.vocab_size
    one = ts.allocate_token_bitmask(1, n)
    quote = table[b'"']
    first = g.matcher()
    assert first.accept_tokens(ids_of('{"tags": ["x')) > 0
    assert next_mask(first, one, n)[0][quote]  # the first "x" may end
    ids = ids_of('{"tags": ["x", "x')
    m = g.matcher()
    assert m.accept_tokens(ids) == len(ids)
    bits, _ = next_mask(m, one, n)
    assert not bits[quote]  # a second "x" may not
    assert not m.accept_token(quote)
    assert bits.sum() > 0
    # the batch fill (rows in another order, another grammar's matcher beside) agrees
    other = ts.Grammar.from_json_schema({"type": "array"}, vocab).matcher()
    bm = np.zeros((2, (n + 31) // 32), dtype=np.int32)
    ts.fill_next_token_bitmask([m, other], bm, indices=[1, 0])
    assert np.array_equal(np.asarray(one)[0], bm[1])
    # rolled back and fed again: the same mask; rolled back to the start: "x" is new again
    m.rollback(2)
    assert m.accept_tokens(ids[-2:]) == 2
    assert np.array_equal(next_mask(m, one, n)[0], bits)
    m.rollback(m.history_len)
    assert m.accept_tokens(ids_of('{"tags": ["x')) > 0
    assert next_mask(m, one, n)[0][quote]


def walk(g: ts.Grammar, vocab: ts.Vocabulary, rng: random.Random, steps: int) -> bytes | None:
    """A random output (short tokens preferred); `None` when cut before EOS. Every mask on the
    way must allow something."""
    n = vocab.vocab_size
    bm = ts.allocate_token_bitmask(1, n)
    m = g.matcher()
    out = b""
    eos = set(vocab.eos_token_ids)
    for _ in range(steps):
        _, allowed = next_mask(m, bm, n)
        assert len(allowed) > 0, out
        ids = [int(i) for i in allowed]
        if any(i in eos for i in ids) and rng.random() < 0.5:
            return out
        ids = [i for i in ids if i not in eos] or ids
        short = [i for i in ids if len(vocab.token_bytes(i) or b"") <= 2]
        t = rng.choice(short if short and rng.random() < 0.9 else ids)
        assert m.accept_token(t)
        out += vocab.token_bytes(t) or b""
    return None


def walks_validate(schema: dict[str, Any], vocab: ts.Vocabulary, seed: int) -> None:
    """60 random outputs of the schema's grammar (see `walk`): every one that ends validates
    (formats checked), and at least 10 end."""
    g = ts.Grammar.from_json_schema(schema, vocab)
    rng = random.Random(seed)
    done = 0
    for _ in range(60):
        out = walk(g, vocab, rng, 400)
        if out is None:
            continue
        jsonschema.validate(json.loads(out), schema, format_checker=jsonschema.FormatChecker())
        done += 1
    assert done >= 10


@pytest.mark.parametrize(
    "items",
    [
        {"type": "string", "pattern": "^[a-c]$"},
        {"type": "string", "maxLength": 1, "pattern": "^[xy]*$"},
        {"type": "string", "enum": [chr(c) for c in range(ord("a"), ord("a") + 40)]},
        {"type": "string", "format": "date", "pattern": "^2024-01-0"},
        {"type": "integer", "minimum": -3, "maximum": 12},
        {"type": "integer", "multipleOf": 5},
    ],
)
def test_random_outputs_are_unique_and_never_stuck(
    vocab: ts.Vocabulary, items: dict[str, Any]
) -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": items, "uniqueItems": True}},
        "required": ["tags"],
        "additionalProperties": False,
    }
    walks_validate(schema, vocab, seed=7)


def test_pydantic_sets(vocab: ts.Vocabulary, lookup: Any) -> None:
    """`set[str]`, `Optional[set[str]]` and `frozenset[int]` fields of a pydantic model."""
    pydantic = pytest.importorskip("pydantic")

    class Paper(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        title: str
        authors: set[str]
        keywords: set[str] | None = None
        years: frozenset[int] = frozenset()

    g = ts.Grammar.from_json_schema(Paper, vocab)
    ok = '{"title": "x", "authors": ["A", "B"], "keywords": %s, "years": %s}'
    assert accepts(g, ok % ("null", "[2020, 2021]"), lookup)
    assert accepts(g, ok % ('["k", "l"]', "[1, 10, 0]"), lookup)
    assert not accepts(g, ok.replace('"B"', '"A"') % ("null", "[]"), lookup)
    assert not accepts(g, ok % ('["k", "k"]', "[]"), lookup)
    assert not accepts(g, ok % ("null", "[1, -0, 0]"), lookup)


def test_additional_properties(vocab: ts.Vocabulary, lookup: Any) -> None:
    """`dict[str, set[str]]`: every undeclared key's array is unique on its own; a declared
    property keeps its own schema (here a plain array)."""
    plain = {"type": "array", "items": {"type": "string"}}
    unique = {**plain, "uniqueItems": True}
    schema = {"type": "object", "properties": {"fixed": plain}, "additionalProperties": unique}
    g = ts.Grammar.from_json_schema(schema, vocab)
    assert accepts(g, '{"fixed": ["a", "a"], "x": ["a", "b"], "y": ["a"]}', lookup)
    assert not accepts(g, '{"fixed": ["a"], "x": ["a", "b", "a"]}', lookup)
    assert not accepts(g, '{"x": ["a"], "y": ["b", "b"]}', lookup)
    assert not accepts(g, '{"fixed": [], "fixed2": ["b", "b"]}', lookup)
    pydantic = pytest.importorskip("pydantic")

    class Index(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        terms: dict[str, set[str]]

    g = ts.Grammar.from_json_schema(Index, vocab)
    assert accepts(g, '{"terms": {"a": ["p", "q"], "b": ["p"]}}', lookup)
    assert not accepts(g, '{"terms": {"a": ["p"], "b": ["q", "q"]}}', lookup)


def test_random_maps_of_unique_arrays(vocab: ts.Vocabulary) -> None:
    items = {"type": "string", "pattern": "^[a-c]$"}
    schema = {
        "type": "object",
        "propertyNames": {"pattern": "^[xy]$"},
        "additionalProperties": {"type": "array", "items": items, "uniqueItems": True},
    }
    walks_validate(schema, vocab, seed=3)
