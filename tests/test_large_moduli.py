"""`multipleOf` whose remainder automaton has no regular expression of reasonable size (11, 13,
97, 1024, several divisors at once, under bounds or not): the automaton is kept as a DFA read
byte for byte. Checked against `jsonschema` (numbers read as exact decimals) on every spelling
the grammar documents (no exponent; integers without a fraction), each token's mask bit against
`accept_token`."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

import pytest
from feed import accepts, agree, byte_vocabulary, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS: dict[str, dict[str, Any]] = {
    "integer 11": {"type": "integer", "multipleOf": 11},
    "integer 13 from 100": {"type": "integer", "multipleOf": 13, "minimum": 100},
    "integer 97 below": {"type": "integer", "multipleOf": 97, "exclusiveMaximum": 500},
    "integer 1024": {"type": "integer", "multipleOf": 1024},
    "number 11 from 100": {"type": "number", "multipleOf": 11, "minimum": 100},
    "number 2.5 not 7": {"type": "number", "multipleOf": 2.5, "not": {"multipleOf": 7}},
    "number 0.11": {"type": "number", "multipleOf": 0.11},
    "fraction 0.13": {"multipleOf": 0.13, "not": {"type": "integer"}},
    "anyOf 11 or 17": {"anyOf": [{"type": "integer", "multipleOf": 11}, {"multipleOf": 17}]},
}


def exact(t: str) -> Decimal | int:
    """A JSON number as its exact value; an integral one as an int (JSON Schema's "integer" is
    the value's, so `-0.0` and `110.0` are integers)."""
    d = Decimal(t)
    return int(d) if d == d.to_integral_value() else d


def texts(integer_only: bool, r: random.Random) -> list[str]:
    out = [str(r.randrange(-3000, 6000)) for _ in range(300)]
    out += [str(k * m) for m in (11, 13, 17, 97, 1024) for k in (-3, -1, 0, 1, 2, 9, 10, 50)]
    out += ["-0", "0"]
    if not integer_only:
        # fractions that are not integers: an integral value spelled with a fraction (`110.0`)
        # is outside the documented spelling of an integer
        out += [f"{r.randrange(-300, 600)}.{r.randrange(1, 100):02d}" for _ in range(200)]
        out += ["0.11", "0.22", "1.1", "2.5", "17.5", "35", "0.13", "0.26", "-0.5"]
    return out


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_large_moduli_agree_with_jsonschema(name: str) -> None:
    schema = SCHEMAS[name]
    vocab = byte_vocabulary()
    g = ts.Grammar.from_json_schema(schema, vocab)
    # the schema's decimals read exactly too
    v = jsonschema.Draft202012Validator(json.loads(json.dumps(schema), parse_float=Decimal))
    checked = {True: 0, False: 0}
    integer_only = schema.get("type") == "integer"
    values = texts(integer_only, random.Random(name))
    agree(
        g,
        lambda t: v.is_valid(json.loads(t, parse_float=exact)),
        values,
        token_lookup(vocab),
        checked,
        text=str,
        what=name,
    )
    assert checked[True] >= 10 and checked[False] >= 50, checked


def test_unique_integers_of_a_large_modulus() -> None:
    schema = {
        "type": "array",
        "items": {"type": "integer", "multipleOf": 11, "minimum": 0, "maximum": 40},
        "uniqueItems": True,
    }
    vocab = byte_vocabulary()
    lookup = token_lookup(vocab)
    g = ts.Grammar.from_json_schema(schema, vocab)
    v = jsonschema.Draft202012Validator(schema)
    for arr in ([], [0, 11], [11, 11], [0, 11, 22, 33], [0, 11, 22, 33, 0], [12]):
        assert accepts(g, json.dumps(arr), lookup) == v.is_valid(arr), arr
