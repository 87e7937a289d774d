"""Negations of negations against `jsonschema`: `not`, `allOf`, `anyOf` nested three levels over
scalar keywords, so that a negated `pattern`, `const`/`enum` of strings, `multipleOf` and
patterns merged by `allOf` are negated again, and arrays whose negated `items` (counted from an
index after `prefixItems`) or merged `contains` are negated again.

Every value of a small pool (numbers, strings, short arrays) is fed byte by byte through a
one-token-per-byte vocabulary, each mask bit checked against `accept_token`."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from feed import Lookup, agree

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SCALARS: list[Any] = [0, 1, 2, 3, 6, 1.5, "a", "b", "ab", "ba", "c", "", None]
ARRAYS: list[Any] = [
    list(p) for n in range(4) for p in itertools.product([1, 3, "a", "b", 1.5], repeat=n)
]
SCHEMAS = 150


def _scalar_leaf(r: random.Random) -> Any:
    return r.choice(
        [
            {"pattern": r.choice(["a", "^b", "a$"])},
            {"enum": r.sample(["a", "b", "ab", ""], 2)},
            {"const": r.choice(["a", 1, 2])},
            {"multipleOf": r.choice([2, 3])},
            {"type": r.choice(["string", "integer", "number"])},
            {"minLength": 2},
            {"maximum": 2},
        ]
    )


def _array_leaf(r: random.Random) -> Any:
    # an item schema with negations inside: `contains` negates it again for the items that
    # do not match
    item = _schema(r, _scalar_leaf, 1)
    return r.choice(
        [
            {"items": item},
            {"prefixItems": [{}], "items": item},
            {"contains": item},
            {"contains": item, "maxContains": 1},
        ]
    )


def _schema(r: random.Random, leaf: Any, depth: int = 0) -> Any:
    if depth >= 3 or r.random() < 0.25:
        return leaf(r)
    kind = r.choice(["not", "not", "allOf", "anyOf"])
    if kind == "not":
        return {"not": _schema(r, leaf, depth + 1)}
    return {kind: [_schema(r, leaf, depth + 1) for _ in range(2)]}


@pytest.mark.parametrize("kind", ["scalar", "array"])
def test_nested_negations_agree_with_jsonschema(
    kind: str, byte_vocab: ts.Vocabulary, byte_lookup: Lookup
) -> None:
    r = random.Random(f"nested-{kind}")
    leaf, values = (_scalar_leaf, SCALARS) if kind == "scalar" else (_array_leaf, ARRAYS)
    checked = {True: 0, False: 0}
    compiled = 0
    for _ in range(SCHEMAS):
        schema = _schema(r, leaf)
        if kind == "array":
            schema = {"type": "array", "allOf": [schema]}
        v = jsonschema.Draft202012Validator(schema)
        try:
            g = ts.Grammar.from_json_schema(schema, byte_vocab)
        except ts.BudgetError:
            continue  # a clear refusal of a schema whose combinators multiply too much
        except ts.SchemaError as e:
            if "no JSON value" in str(e):
                assert not any(v.is_valid(x) for x in values), schema
                continue
            # what stays refused must say so by name (never a silent superset)
            assert "not supported" in str(e) or "too many" in str(e), (schema, e)
            continue
        compiled += 1
        agree(g, v.is_valid, values, byte_lookup, checked, what=json.dumps(schema))
    assert compiled > SCHEMAS * 0.7 and checked[True] > 300 and checked[False] > 300, (
        compiled,
        checked,
    )
