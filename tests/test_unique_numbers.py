"""`uniqueItems: true` over any number (`{"type": "number"}` with no bounds): items compared by
value whatever their spelling (`1`, `1.0`, `10e-1`), checked against `jsonschema` on random
arrays (numbers read as exact decimals), every token's mask bit against `accept_token`."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest
from feed import accepts, byte_vocabulary, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SPELLINGS = ["1", "1.0", "10e-1", "0.1e1", "2", "-2", "-0", "0", "0.0", "0.5", "5e-1", "50E-2",
             "3e2", "300", "300.00", "1e400", "10e399", "-1.5", "-15e-1", "7", "1e-400"]  # fmt: skip


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "number"}, "uniqueItems": True},
        {
            "type": "object",
            "properties": {
                "xs": {"type": "array", "items": {"type": "number"}, "uniqueItems": True}
            },
        },
    ],
    ids=["array", "property"],
)
def test_unique_numbers_compare_by_value(schema: dict[str, object]) -> None:
    vocab = byte_vocabulary()
    lookup = token_lookup(vocab)
    g = ts.Grammar.from_json_schema(schema, vocab)
    validator = jsonschema.Draft202012Validator(schema)
    r = random.Random(3)
    verdicts = {True: 0, False: 0}
    for _ in range(400):
        items = [r.choice(SPELLINGS) for _ in range(r.randrange(5))]
        arr = "[" + ",".join(items) + "]"
        text = arr if schema.get("type") == "array" else '{"xs":' + arr + "}"
        want = validator.is_valid(json.loads(text, parse_float=Decimal))
        verdicts[want] += 1
        assert accepts(g, text, lookup) == want, text
    assert verdicts[True] > 50 and verdicts[False] > 50, verdicts


def test_bounded_numbers_stay_refused_by_name() -> None:
    # with bounds a prefix can run out of values (`1` under maximum 1 spells only the value 1):
    # not counted here, so refused
    schema = {"type": "array", "items": {"type": "number", "maximum": 1}, "uniqueItems": True}
    with pytest.raises(ts.SchemaError, match="uniqueItems"):
        ts.Grammar.from_json_schema(schema, byte_vocabulary())
