"""`propertyNames` schemas with `not`, `allOf`, `anyOf`, `oneOf`, `if`/`then`/`else` and `$ref`
inside, against `jsonschema`: the key language is the boolean combination of the string
languages, so an object is accepted exactly when each key is in it (and, under a negated
`propertyNames`, when some key is outside it).

Random key schemas over string keywords (`const`, `enum`, `pattern`, `minLength`, `maxLength`)
and keywords of other types (which every key satisfies), nested two levels; every object of up
to two keys from a small pool is fed byte by byte through a one-token-per-byte vocabulary, each
mask bit checked against `accept_token`."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from feed import Lookup, agree

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

KEYS = ["", "a", "b", "ab", "ba", "aab", "é", "x1"]
SCHEMAS = 120


def _leaf(r: random.Random) -> Any:
    return r.choice(
        [
            {"const": r.choice(KEYS)},
            {"enum": r.sample(KEYS, 2)},
            {"pattern": r.choice(["^a", "b$", "^.$", "a", "^[ab]*$", "\\d"])},
            {"minLength": r.randint(1, 2)},
            {"maxLength": r.randint(0, 2)},
            {"minimum": 3},
            {"type": "string"},
            {"type": "integer"},
            True,
            False,
        ]
    )


def _key_schema(r: random.Random, depth: int = 0, refs: bool = True) -> Any:
    if depth >= 2 or r.random() < 0.3:
        return _leaf(r)
    kinds = ["not", "allOf", "anyOf", "oneOf", "if"] + (["ref"] if refs else [])
    kind = r.choice(kinds)
    if kind == "not":
        return {"not": _key_schema(r, depth + 1, refs)}
    if kind == "if":
        s: dict[str, Any] = {"if": _key_schema(r, depth + 1, refs)}
        for k in ("then", "else"):
            if r.random() < 0.7:
                s[k] = _key_schema(r, depth + 1, refs)
        return s
    if kind == "ref":
        # a $ref beside another keyword (both apply)
        return {"$ref": "#/$defs/k", "not": _key_schema(r, depth + 1, refs)}
    return {kind: [_key_schema(r, depth + 1, refs) for _ in range(r.randint(2, 3))]}


def _objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{}]
    for k in KEYS:
        out.append({k: 1})
    for a, b in itertools.combinations(KEYS, 2):
        out.append({a: 1, b: 2})
    return out


@pytest.mark.parametrize("negated", [False, True])
def test_key_schema_combinators_agree_with_jsonschema(
    negated: bool, byte_vocab: ts.Vocabulary, byte_lookup: Lookup
) -> None:
    r = random.Random(20261126 + negated)
    objects = _objects()
    checked = {True: 0, False: 0}
    for _ in range(SCHEMAS):
        names = _key_schema(r)
        part: dict[str, Any] = {"propertyNames": names}
        schema: dict[str, Any] = {
            "type": "object",
            "$defs": {"k": _key_schema(r, 1, refs=False)},
            **({"not": part} if negated else part),
        }
        try:
            g = ts.Grammar.from_json_schema(schema, byte_vocab)
        except ts.SchemaError as e:
            # only a language the compiler shows is empty may be refused
            assert "no JSON value" in str(e), (schema, e)
            for o in objects:
                assert not jsonschema.Draft202012Validator(schema).is_valid(o), (schema, o)
            continue
        v = jsonschema.Draft202012Validator(schema)
        agree(
            g,
            v.is_valid,
            objects,
            byte_lookup,
            checked,
            text=lambda o: json.dumps(o, ensure_ascii=r.random() < 0.5),
            what=schema,
        )
    assert checked[True] > 100 and checked[False] > 100, checked
