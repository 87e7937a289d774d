"""Recursion through `patternProperties`: a `$ref` back to an enclosing schema from the value
schema of a pattern is a call on the stack like any other recursive `$ref` (it was unrolled until
the schema walk's depth limit, with an error message of tens of KB). Checked with `jsonschema` as
the oracle on random instances, valid and not, of several schemas of this shape; errors keep a
bounded pointer.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from feed import agree, byte_vocabulary, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

LINKS = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 3},
                "links": {
                    "type": "object",
                    "patternProperties": {"^[a-z]{1,2}$": {"$ref": "#/$defs/node"}},
                    "additionalProperties": False,
                },
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "type": "array",
    "items": {"$ref": "#/$defs/node"},
}
# the root itself, through a pattern: a tree of dependencies by package name
TREE = {
    "type": "object",
    "patternProperties": {"^[a-c]+$": {"$ref": "#"}},
    "additionalProperties": False,
    "maxProperties": 3,
}
# a pattern's value that is a union holding the recursion, beside a plain property
UNION = {
    "$defs": {
        "v": {
            "anyOf": [
                {"type": "integer"},
                {
                    "type": "object",
                    "properties": {"k": {"type": "boolean"}},
                    "patternProperties": {"^x": {"$ref": "#/$defs/v"}},
                },
            ]
        }
    },
    "$ref": "#/$defs/v",
}

NAMES = ["a", "b", "ab", "abc", "x", "xy", "X", "", "k", "name", "links", "ba"]


def rand_value(r: random.Random, depth: int) -> Any:
    """Random JSON values near the schemas above (their names, shapes and scalars)."""
    k = r.random()
    if depth > 4 or k < 0.25:
        return r.choice([0, 7, -1, "s", "abcd", True, None, 1.5])
    if k < 0.35:
        return [rand_value(r, depth + 1) for _ in range(r.randrange(3))]
    return {r.choice(NAMES): rand_value(r, depth + 1) for _ in range(r.randrange(4))}


def shaped(r: random.Random, schema: dict[str, Any], depth: int = 0) -> Any:
    """Random values that mostly follow the shape of `schema` (so that many are valid)."""
    if schema is LINKS:
        return [shaped(r, LINKS["$defs"]["node"], depth) for _ in range(r.randrange(3))]
    if "properties" in schema and "name" in schema["properties"]:
        node: dict[str, Any] = {"name": r.choice(["a", "abc", "abcd", 3])}
        if depth < 4 and r.random() < 0.7:
            node["links"] = {
                r.choice(["a", "xy", "abc", "Q"]): shaped(r, schema, depth + 1)
                for _ in range(r.randrange(3))
            }
        if r.random() < 0.1:
            node["extra"] = 1
        return node
    if schema is TREE:
        if depth > 4:
            return {}
        return {
            r.choice(["a", "ab", "c", "d"]): shaped(r, TREE, depth + 1)
            for _ in range(r.randrange(5))
        }
    # UNION
    if depth > 4 or r.random() < 0.3:
        return r.choice([1, "x", True])
    v: dict[str, Any] = {}
    for _ in range(r.randrange(4)):
        key = r.choice(["xa", "x", "k", "y"])
        v[key] = r.choice([True, 3]) if key == "k" else shaped(r, UNION, depth + 1)
    return v


@pytest.mark.parametrize("name", ["links", "tree", "union"])
def test_recursion_through_pattern_properties_is_exact(name: str) -> None:
    schema = {"links": LINKS, "tree": TREE, "union": UNION}[name]
    vocab = byte_vocabulary()
    # any property order: the schema order would refuse `{"x": {}, "k": true}` by design
    g = ts.Grammar.from_json_schema(schema, vocab, property_order="any")
    validator = jsonschema.Draft202012Validator(schema)
    r = random.Random(name)
    values = [shaped(r, schema) for _ in range(300)] + [rand_value(r, 0) for _ in range(200)]
    checked = {True: 0, False: 0}
    agree(g, validator.is_valid, values, token_lookup(vocab), checked, what=name)
    assert checked[True] >= 60 and checked[False] >= 60, checked


def test_a_recursion_unrolled_in_place_keeps_its_error_short() -> None:
    # two patterns whose schemas merge for keys both match: that merge still unrolls the
    # recursion, up to the walk's depth limit, but the pointer in the error stays bounded
    schema = {
        "$defs": {
            "n": {
                "type": "object",
                "patternProperties": {"^a": {"$ref": "#/$defs/n"}, "b$": {"$ref": "#/$defs/n"}},
            }
        },
        "$ref": "#/$defs/n",
    }
    with pytest.raises(ts.SchemaError) as e:
        ts.Grammar.from_json_schema(schema, byte_vocabulary())
    assert len(str(e.value)) < 1200, len(str(e.value))
    assert len(e.value.pointer) <= 512 and "steps)" in e.value.pointer, e.value.pointer
    assert json.dumps(schema)  # (the schema itself is small)
