"""Object keywords under negation against `jsonschema`: `not` of `additionalProperties`, of
`patternProperties` and of `propertyNames`, and `oneOf` branches that differ by them (exact by
negation), in both property orders, with and without `minProperties`/`maxProperties` beside them.

Random object schemas (declared properties with small value languages, `additionalProperties`
false / true / a schema, sometimes `patternProperties`) get a random negated part: `not` of an
`additionalProperties` or `patternProperties` map (with or without its own `properties`), of a
`propertyNames` schema, or a
`oneOf` of two branches with different `patternProperties`; sometimes a second one beside it
(in an `allOf`), each needing its own witness. Every object of up to three keys (declared and
undeclared ones, values from a small pool) is fed byte by byte through a one-token-per-byte
vocabulary, each mask bit checked against `accept_token`: with `property_order="any"` in a
random order, which must be accepted exactly when `jsonschema` finds the object valid; in schema
order in every order, of which one must be accepted exactly when it is valid (the declared names
of every map that applies, negated ones included, come first).
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from feed import Lookup, accepts

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SEED = 20261127
SCHEMAS = 80
VALUES = [1, 2, "s", None]
KEYS = ["a", "b", "xa", "xb", "z"]


def _value_schema(rng: random.Random) -> Any:
    return rng.choice(
        [{}, {"type": "integer"}, {"const": 1}, {"type": "string"}, {"enum": [2, None]}]
    )


def _negated(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["additional", "pattern", "oneOf", "names"])
    if kind == "names":
        names: Any = rng.choice([{"maxLength": 1}, {"pattern": "^x"}, {"enum": ["a", "b"]}, False])
        return {"not": {"propertyNames": names}}
    if kind == "additional":
        inner: dict[str, Any] = {"additionalProperties": rng.choice([False, _value_schema(rng)])}
        if rng.random() < 0.5:
            inner["properties"] = {"a": {}}
        if rng.random() < 0.3:
            inner["patternProperties"] = {"^x": {}}
        return {"not": inner}
    if kind == "pattern":
        inner = {"patternProperties": {rng.choice(["^x", "b$"]): _value_schema(rng)}}
        if rng.random() < 0.4:
            inner["properties"] = {"b": {}}
        return {"not": inner}
    return {
        "oneOf": [
            {"patternProperties": {"^x": _value_schema(rng)}},
            {"patternProperties": {"^a|^b": _value_schema(rng)}},
        ]
    }


def _schema(rng: random.Random, bounds: bool = False) -> dict[str, Any]:
    names = rng.sample(["a", "b", "xa"], rng.randint(1, 3))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {n: _value_schema(rng) for n in names},
        "additionalProperties": rng.choice([False, True, {"type": "integer"}, {}]),
    }
    if rng.random() < 0.5:
        schema["required"] = [rng.choice(names)]
    schema.update(_negated(rng))
    if rng.random() < 0.4:
        # a second negated part: each needs its own witness
        schema["allOf"] = [_negated(rng)]
    if bounds:
        # minProperties / maxProperties counted beside the witnesses
        lo = rng.randint(0, 3)
        if rng.random() < 0.7:
            schema["minProperties"] = lo
        if rng.random() < 0.7:
            schema["maxProperties"] = rng.randint(max(lo, 1), 3)
    return schema


def _objects(rng: random.Random) -> list[list[tuple[str, Any]]]:
    """Objects of up to three of `KEYS` with values from `VALUES`, as member lists."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for k in range(4):
        for keys in itertools.combinations(KEYS, k):
            for _ in range(3):
                members = [(key, rng.choice(VALUES)) for key in keys]
                out[json.dumps(members)] = members
    return list(out.values())


def _text(members: Any) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in members) + "}"


@pytest.mark.parametrize("bounds", [False, True])
@pytest.mark.parametrize("order", ["schema", "any"])
def test_negated_object_keywords_match_jsonschema(
    order: str, bounds: bool, byte_vocab: ts.Vocabulary, byte_lookup: Lookup
) -> None:
    rng = random.Random(SEED + (order == "any") + 2 * bounds)
    checked = accepted = refused = 0
    for _ in range(SCHEMAS):
        schema = _schema(rng, bounds)
        v = jsonschema.Draft202012Validator(schema)
        objects = _objects(rng)
        try:
            g = ts.Grammar.from_json_schema(
                schema, byte_vocab, property_order=order, max_nesting_depth=2
            )
        except ts.SchemaError as e:
            # only a schema no object satisfies may be refused
            assert "no JSON value" in str(e), (json.dumps(schema), e)
            refused += 1
            assert not any(v.is_valid(dict(o)) for o in objects), schema
            continue
        for members in objects:
            want = v.is_valid(dict(members))
            if order == "any":
                # every order is in the language, or none
                shuffled = list(members)
                rng.shuffle(shuffled)
                got = accepts(g, _text(shuffled), byte_lookup)
            else:
                # the declared names of every map that applies come first, in their order:
                # some order is in the language exactly when the object is valid
                got = any(
                    accepts(g, _text(p), byte_lookup) for p in itertools.permutations(members)
                )
            assert got == want, f"{json.dumps(schema)} on {members}: got {got}, want {want}"
            checked += 1
            accepted += got
    assert checked > 3000 and accepted > (100 if bounds else 300), (checked, accepted, refused)
