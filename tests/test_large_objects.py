"""Objects whose automaton holds more than 2,000,000 nodes in all (thousands of properties over
nested objects): cut into rules and built within `max_nfa_bytes`, not refused by a whole-schema
estimate. Checked with `jsonschema` as the oracle on random documents, valid and not."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from feed import agree, byte_vocabulary, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")


def obj(n: int, value: dict[str, Any], required: int = 0) -> dict[str, Any]:
    names = [f"property_name_{i}" for i in range(n)]
    return {
        "type": "object",
        "properties": {k: value for k in names},
        "required": names[:required],
    }


SCHEMAS = {
    "100 x 100 strings": obj(100, obj(100, {"type": "string"})),
    "60 x 60 x 10 integers": obj(60, obj(60, obj(10, {"type": "integer"}), required=1)),
}


def document(r: random.Random, schema: dict[str, Any], depth: int = 0) -> Any:
    """A random value near `schema`: its properties in schema order (some left out), now and
    then a value of the wrong type or a missing required property."""
    if schema.get("type") != "object":
        kind = schema["type"]
        if r.random() < 0.03:
            return [1] if kind == "string" else "x"
        return "v" if kind == "string" else r.randrange(100)
    props = schema["properties"]
    names = list(props)
    keep = sorted(r.sample(range(len(names)), min(len(names), r.randrange(4))))
    if schema["required"] and 0 not in keep and r.random() < 0.8:
        keep = [0, *keep]
    return {names[i]: document(r, props[names[i]], depth + 1) for i in keep}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_large_objects_compile_and_agree_with_jsonschema(name: str) -> None:
    schema = SCHEMAS[name]
    vocab = byte_vocabulary()
    g = ts.Grammar.from_json_schema(schema, vocab)
    v = jsonschema.Draft202012Validator(schema)
    r = random.Random(name)
    checked = {True: 0, False: 0}
    docs = [document(r, schema) for _ in range(150)] + [[], "x", {"property_name_1": 5}]
    text = lambda x: json.dumps(x, separators=(",", ":"))  # noqa: E731
    agree(g, v.is_valid, docs, token_lookup(vocab), checked, text=text, what=name)
    assert checked[True] >= 30 and checked[False] >= 5, checked
