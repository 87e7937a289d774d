"""`not` of an asserted format: exact where the format's language is exact (its strings are
excluded like a negated pattern's), checked with `jsonschema` (its format checker) as the
oracle; refused by name where the language approximates its definition.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from feed import accepts, agree, byte_vocabulary, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS: list[dict[str, Any]] = [
    {"type": "string", "not": {"format": "date"}, "maxLength": 12},
    {"not": {"format": "ipv4"}},
    {
        "anyOf": [
            {"type": "string", "format": "date"},
            {"type": "string", "not": {"format": "ipv4"}, "pattern": "^[0-9.]+$"},
        ]
    },
    {"type": "array", "items": {"not": {"type": "string", "format": "uuid"}}},
    {"not": {"not": {"format": "date"}}},
    {"oneOf": [{"format": "ipv4"}, {"pattern": "^1"}]},
]
PIECES = ["a", "@", "b.c", "2024", "-", "01", "1.2.3.4", "255", ".", "x", "0", "2024-01-31",
          "12345678-1234-1234-1234-123456789abc", "1.2.3", "2023-02-29"]  # fmt: skip


def values(seed: int) -> list[Any]:
    r = random.Random(seed)
    strs = sorted(
        {""} | {"".join(r.choice(PIECES) for _ in range(r.randrange(4))) for _ in range(500)}
    )
    return [*strs, *[[s] for s in strs[:60]], 1, None, {"a": 1}]


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:40])
def test_negated_exact_formats_agree_with_jsonschema(schema: dict[str, Any]) -> None:
    vocab = byte_vocabulary()
    g = ts.Grammar.from_json_schema(schema, vocab)
    v = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    checked = {True: 0, False: 0}
    agree(g, v.is_valid, values(len(json.dumps(schema))), token_lookup(vocab), checked, what=schema)
    assert checked[True] >= 20 and checked[False] >= 20, checked


@pytest.mark.parametrize("fmt", ["email", "hostname", "time", "date-time"])
def test_negated_approximate_formats_are_refused_by_name(fmt: str) -> None:
    with pytest.raises(ts.SchemaError, match=f'format "{fmt}" is not supported') as e:
        ts.Grammar.from_json_schema({"not": {"format": fmt}}, byte_vocabulary())
    assert e.value.keyword == "format"
    # with formats annotated the format holds for every string: its `not` is only the rest
    schema = {"type": "string", "not": {"format": fmt, "maxLength": 2}}
    g = ts.Grammar.from_json_schema(schema, byte_vocabulary(), formats="annotate")
    lookup = token_lookup(g.vocab)
    assert accepts(g, '"abc"', lookup) and not accepts(g, '"ab"', lookup)
