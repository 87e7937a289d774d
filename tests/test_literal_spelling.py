"""Strings written in a schema (declared property names, `const`/`enum` strings) come out as
written: each character in a form `json.dumps` writes (with or without `ensure_ascii`), never
another JSON spelling of it. String values keep every spelling. `literal_spelling="any"` gives
the written strings every spelling again.

The reference is independent of the core: the set of spellings of each character is built here
from JSON's grammar, and `json.dumps` says which of them are "as written"."""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import numpy as np
import pytest
from feed import Lookup, accepts

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
SHORT |= {"\r": "\\r", "\t": "\\t"}


def spellings(c: str) -> set[str]:
    """Every JSON spelling of the character `c` inside a string (from JSON's grammar)."""
    out = set()
    if c not in '"\\' and ord(c) >= 0x20:
        out.add(c)
    if c in SHORT:
        out.add(SHORT[c])
    units = [ord(c)] if ord(c) <= 0xFFFF else []
    if not units:
        v = ord(c) - 0x10000
        units = [0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)]
    for case in (str.lower, str.upper):
        out.add("".join(case(f"\\u{u:04x}").replace("\\U", "\\u") for u in units))
    return out


def written(c: str) -> set[str]:
    """The spellings `json.dumps` writes for `c`."""
    return {json.dumps(c)[1:-1], json.dumps(c, ensure_ascii=False)[1:-1]}


NAMES = ["name", 'q"uote', "back\\slash", "a/b", "tab\there", "bell\x07", "del\x7f", "é", "😀x"]


def variants(s: str, rng: random.Random, n: int) -> list[tuple[str, bool]]:
    """Up to `n` spellings of `s` (every combination when few; a sample otherwise), each with
    whether it is as written."""
    per_char = [sorted(spellings(c)) for c in s]
    total = 1
    for p in per_char:
        total *= len(p)
    if total <= n:
        combos = list(itertools.product(*per_char))
    else:
        combos = [tuple(rng.choice(p) for p in per_char) for _ in range(n)]
        combos.append(tuple(json.dumps(c)[1:-1] for c in s))
    return [
        ("".join(parts), all(p in written(c) for p, c in zip(parts, s, strict=True)))
        for parts in combos
    ]


def test_every_character_has_its_written_spellings() -> None:
    # the reference itself: json.dumps's forms are spellings, and ASCII has exactly one
    for cp in list(range(0x80)) + [0xE9, 0xFFFD, 0x1F600]:
        c = chr(cp)
        assert written(c) <= spellings(c), c
        assert len(written(c)) == (1 if cp < 0x7F else 2), c


@pytest.mark.parametrize("name", NAMES)
def test_declared_names_are_spelled_as_written(
    name: str, vocab: ts.Vocabulary, lookup: Lookup
) -> None:
    schema = {
        "type": "object",
        "properties": {name: {"type": "integer"}},
        "required": [name],
        "additionalProperties": False,
    }
    g = ts.Grammar.from_json_schema(schema, vocab)
    g_any = ts.Grammar.from_json_schema(schema, vocab, literal_spelling="any")
    rng = random.Random(name)
    for spelled, as_written in variants(name, rng, 60):
        text = '{"' + spelled + '": 1}'
        assert accepts(g, text, lookup) == as_written, text
        assert accepts(g_any, text, lookup), text
    assert accepts(g, json.dumps({name: 1}), lookup)
    assert accepts(g, json.dumps({name: 1}, ensure_ascii=False), lookup)


@pytest.mark.parametrize("kind", ["const", "enum", "nested"])
def test_const_and_enum_strings_are_spelled_as_written(
    kind: str, vocab: ts.Vocabulary, lookup: Lookup
) -> None:
    rng = random.Random(kind)
    for s in NAMES:
        if kind == "const":
            schema: dict[str, Any] = {"const": s}
            wrap = lambda v: '"' + v + '"'  # noqa: E731
        elif kind == "enum":
            schema = {"enum": [s, s + "z", 3]}
            wrap = lambda v: '"' + v + '"'  # noqa: E731
        else:
            schema = {"const": {"k": [s]}}
            wrap = lambda v: '{"k": ["' + v + '"]}'  # noqa: E731
        g = ts.Grammar.from_json_schema(schema, vocab)
        for spelled, as_written in variants(s, rng, 40):
            assert accepts(g, wrap(spelled), lookup) == as_written, (schema, spelled)


def test_string_values_keep_every_spelling(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"type": "string", "pattern": "^é/x"}},
        "required": ["v"],
    }
    g = ts.Grammar.from_json_schema(schema, vocab)
    rng = random.Random(0)
    for spelled, _ in variants("é/x", rng, 40):
        assert accepts(g, '{"v": "' + spelled + '"}', lookup), spelled


def test_undeclared_names_never_decode_to_a_declared_one(
    vocab: ts.Vocabulary, lookup: Lookup
) -> None:
    schema = {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    g = ts.Grammar.from_json_schema(schema, vocab)
    assert accepts(g, '{"a": 1, "b": "x"}', lookup)
    assert accepts(g, '{"\\u0062": "x"}', lookup)  # an undeclared name: any spelling
    assert not accepts(g, '{"\\u0061": "x"}', lookup)  # "a" spelled otherwise is not extra
    assert not accepts(g, '{"\\u0061": 1}', lookup)


def test_random_outputs_write_names_as_written(vocab: ts.Vocabulary) -> None:
    """Random walks over the allowed tokens (a model that picks uniformly — the kind that took
    every escape before): every finished output validates and spells each declared name exactly
    as `json.dumps` does."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "größe": {"type": "integer", "minimum": 0, "maximum": 99},
            "kind": {"enum": ["a/b", 'c"d']},
        },
        "required": ["name", "größe", "kind"],
        "additionalProperties": False,
    }
    g = ts.Grammar.from_json_schema(schema, vocab)
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    eos = set(vocab.eos_token_ids)
    rng = random.Random(7)
    finished = 0
    for _ in range(20):
        m = g.matcher()
        out = b""
        for _ in range(200):
            m.fill_next_token_bitmask(bm)
            bits = np.unpackbits(np.asarray(bm)[0].view(np.uint8), bitorder="little")
            ids = [int(i) for i in np.flatnonzero(bits[: vocab.vocab_size])]
            assert ids, out
            non_eos = [i for i in ids if i not in eos]
            if not non_eos or (m.is_accepting() and rng.random() < 0.5):
                break
            tok = rng.choice(non_eos)
            assert m.accept_token(tok)
            out += vocab.token_bytes(tok) or b""
        if not m.is_accepting():
            continue
        finished += 1
        text = out.decode()
        value = json.loads(text)
        jsonschema.validate(value, schema)
        keys = re.findall(r'"((?:[^"\\]|\\.)*)": ?', text)
        assert len(keys) == 3, text
        kind = re.search(r'"kind": ?"((?:[^"\\]|\\.)*)"', text)
        assert kind is not None, text
        for raw in [*keys, kind.group(1)]:
            assert as_written(raw), (raw, text)
    assert finished >= 10


def as_written(raw: str) -> bool:
    """Whether the string content `raw` (as it appears between quotes) spells each of its
    characters in a form `json.dumps` writes."""
    units: list[tuple[str, str]] = []  # (character, its spelling)
    i = 0
    while i < len(raw):
        if raw[i] != "\\":
            units.append((raw[i], raw[i]))
            i += 1
        elif raw[i + 1] != "u":
            units.append((json.loads('"' + raw[i : i + 2] + '"'), raw[i : i + 2]))
            i += 2
        else:
            n = 12 if 0xD800 <= int(raw[i + 2 : i + 6], 16) < 0xDC00 else 6
            units.append((json.loads('"' + raw[i : i + n] + '"'), raw[i : i + n]))
            i += n
    return all(sp in written(c) for c, sp in units)
