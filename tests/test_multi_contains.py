"""Several different `contains` on one array (the `allOf` branches' own, and the ones negated
`items` schemas become), each with its own `minContains`/`maxContains`, against `jsonschema`.

Random array schemas: `allOf` of two or three branches (and of four to six), each a `contains` with random counts or
a negated `items` (after `prefixItems` or not: counted from an index), beside random `prefixItems`, `items` and length bounds; every array of up to
four values from a small pool is fed byte by byte through a one-token-per-byte vocabulary, each
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

VALUES: list[Any] = [1, 2, "s", None]
ARRAYS = [list(p) for n in range(5) for p in itertools.product(VALUES, repeat=n)]
SCHEMAS = 60


def _item(r: random.Random) -> Any:
    return r.choice(
        [
            {"const": 1},
            {"const": 2},
            {"type": "integer"},
            {"type": "string"},
            {"enum": [None, "s"]},
            {"enum": [1, "s", None]},
        ]
    )


def _branch(r: random.Random) -> dict[str, Any]:
    if r.random() < 0.25:
        # (a negated enum of strings under a second negation is refused: not drawn)
        leaf = r.choice([{"const": 1}, {"const": 2}, {"type": "integer"}, {"type": "string"}])
        negated: dict[str, Any] = {"items": leaf}
        if r.random() < 0.5:
            # an offending item after the first one or two (counted from that index)
            negated["prefixItems"] = [{}] * r.randint(1, 2)
        return {"not": negated}
    b: dict[str, Any] = {"contains": _item(r)}
    if r.random() < 0.4:
        b["minContains"] = r.randint(0, 2)
    if r.random() < 0.3:
        b["maxContains"] = r.randint(1, 2)
    return b


def _schema(r: random.Random, branches: tuple[int, int] = (2, 3)) -> dict[str, Any]:
    s: dict[str, Any] = {
        "type": "array",
        "allOf": [_branch(r) for _ in range(r.randint(*branches))],
    }
    if r.random() < 0.3:
        s["prefixItems"] = [_item(r)]
    if r.random() < 0.3:
        s["items"] = r.choice([{"not": {"type": "null"}}, {"enum": [1, 2, "s"]}])
    if r.random() < 0.3:
        s["minItems"] = r.randint(1, 3)
    if r.random() < 0.3:
        s["maxItems"] = r.randint(2, 4)
    return s


@pytest.mark.parametrize(
    ("branches", "schemas", "seed"), [((2, 3), SCHEMAS, 20261126), ((4, 6), 24, 20261128)]
)
def test_several_contains_agree_with_jsonschema(
    byte_vocab: ts.Vocabulary,
    byte_lookup: Lookup,
    branches: tuple[int, int],
    schemas: int,
    seed: int,
) -> None:
    """Two or three counts, and four to six (up to six different `contains` on one array)."""
    r = random.Random(seed)
    checked = {True: 0, False: 0}
    compiled = 0
    for _ in range(schemas):
        schema = _schema(r, branches)
        v = jsonschema.Draft202012Validator(schema)
        try:
            g = ts.Grammar.from_json_schema(schema, byte_vocab)
        except ts.SchemaError as e:
            # only a schema no array satisfies may be refused, or one whose counts unroll
            # past the compile's bound (named)
            if "too many cases" in str(e):
                continue
            assert "no JSON value" in str(e), (json.dumps(schema), e)
            assert not any(v.is_valid(a) for a in ARRAYS), schema
            continue
        compiled += 1
        agree(g, v.is_valid, ARRAYS, byte_lookup, checked, what=json.dumps(schema))
    assert compiled > schemas // 2 and checked[True] > 500 and checked[False] > 500, (
        compiled,
        checked,
    )
