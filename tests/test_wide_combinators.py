"""anyOf/oneOf with thousands of alternatives: a union only collects its branches' terms, so it
may hold up to 4,096 of them (a product that multiplies still stops at 512). Checked with
`jsonschema` as the oracle on values inside and outside each union."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from feed import accepts, agree, byte_vocabulary, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS: dict[str, dict[str, Any]] = {
    "anyOf 600 integers": {"anyOf": [{"const": i} for i in range(0, 1200, 2)]},
    # an enum written as oneOf of described constants, as OpenAPI tools write them
    "oneOf 3000 described": {
        "oneOf": [{"const": f"v{i}", "description": f"value {i}"} for i in range(3000)]
    },
    "oneOf 1500 tagged objects": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": f"k{i}"}, "n": {"type": "integer"}},
                "required": ["kind"],
                "additionalProperties": False,
            }
            for i in range(1500)
        ]
    },
    # the negation's terms meet each constant: the pairs a constant's own value rejects
    # are dropped, so the product stays as long as the union
    "anyOf 600 integers but a few": {
        "anyOf": [{"const": i} for i in range(600)],
        "allOf": [{"maximum": 550}],
        "not": {"enum": [3, 5, "x"]},
    },
    # branches that overlap (the same properties, each requiring one): exclusivity negates the
    # others, and the pairs whose required property gets no common type are dropped
    "oneOf 10 overlapping objects": {
        "oneOf": [
            {
                "type": "object",
                "properties": {f"p{j}": {"type": "string"} for j in range(6)},
                "required": [f"p{i % 6}"],
            }
            for i in range(10)
        ]
    },
    "anyOf 4000 narrowed": {
        "anyOf": [{"const": f"s{i}"} for i in range(4000)],
        "allOf": [{"type": "string"}],
        "not": {"const": "s3"},
    },
}


def values(name: str) -> list[Any]:
    r = random.Random(name)
    if "integers" in name:
        return [r.randrange(-5, 1300) for _ in range(150)] + ["0", 1.5, 3, 5, 550, 551]
    if "overlapping" in name:
        out: list[Any] = []
        for _ in range(300):
            keys = r.sample([f"p{j}" for j in range(7)], r.randrange(4))
            out.append({k: (r.randrange(3) if r.random() < 0.1 else "s") for k in sorted(keys)})
        return out
    if "objects" in name:
        return [{"kind": f"k{r.randrange(1600)}", "n": r.randrange(9)} for _ in range(120)] + [
            {"kind": "k1", "x": 1},
            {"n": 1},
        ]
    prefix = "v" if "described" in name else "s"
    return [f"{prefix}{r.randrange(4200)}" for _ in range(150)] + ["s3", "v-1", 7]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_wide_unions_agree_with_jsonschema(name: str) -> None:
    schema = SCHEMAS[name]
    vocab = byte_vocabulary()
    g = ts.Grammar.from_json_schema(schema, vocab)
    v = jsonschema.Draft202012Validator(schema)
    checked = {True: 0, False: 0}
    text = (lambda x: json.dumps(x, separators=(",", ":"))) if "objects" in name else json.dumps
    agree(g, v.is_valid, values(name), token_lookup(vocab), checked, text=text, what=name)
    assert checked[True] >= 10 and checked[False] >= 2, checked


def test_a_union_past_its_bound_is_a_budget_error() -> None:
    with pytest.raises(ts.BudgetError, match="4096 alternatives"):
        ts.Grammar.from_json_schema(
            {"anyOf": [{"const": i} for i in range(5000)], "not": {"const": 1}},
            byte_vocabulary(),
        )


# `oneOf` whose branches each require their own property: exclusivity negates every other
# branch, "its property absent, or present and failing its schema", one term each (two before,
# multiplying to 2^11 terms for 12 branches: a BudgetError)
OWN_REQUIRED: dict[str, dict[str, Any]] = {
    "strings": {
        "oneOf": [
            {"type": "object", "required": [f"k{i}"], "properties": {f"k{i}": {"type": "string"}}}
            for i in range(12)
        ]
    },
    "nested objects": {
        "oneOf": [
            {
                "type": "object",
                "required": [f"k{i}"],
                "properties": {
                    f"k{i}": {
                        "type": "object",
                        "properties": {"x": {"type": "integer", "minimum": i}},
                        "required": ["x"],
                    }
                },
            }
            for i in range(10)
        ]
    },
    "two types under a parent": {
        "type": "object",
        "properties": {"k0": {}, "k1": {}},
        "oneOf": [
            {
                "required": [f"k{i}"],
                "properties": {
                    f"k{i}": {"type": ["string", "integer"], "minLength": 2, "maximum": 5}
                },
            }
            for i in range(9)
        ],
    },
    "enums": {
        "oneOf": [
            {"required": [f"k{i}"], "properties": {f"k{i}": {"enum": ["a", "b", i]}}}
            for i in range(9)
        ]
    },
}


def own_required_values(name: str, n: int) -> list[Any]:
    r = random.Random(name)
    pool: list[Any] = ["s", "ab", 1, 7, 3, {"y": 1}, None, "a", "b", 0, 2]
    out: list[Any] = []
    for _ in range(n):
        keys = r.sample([f"k{j}" for j in range(13)], r.randrange(4))
        out.append({k: r.choice([*pool, {"x": r.randrange(12)}]) for k in keys})
    return [*out, "x", 3, [1]]


@pytest.mark.parametrize("name", sorted(OWN_REQUIRED))
def test_one_of_each_branch_requiring_its_own_property_is_exact_in_any_order(name: str) -> None:
    checked = agree_in_any_order(OWN_REQUIRED[name], own_required_values(name, 400), name)
    assert checked[True] >= 20 and checked[False] >= 20, checked


def agree_in_any_order(schema: dict[str, Any], values: list[Any], name: str) -> dict[bool, int]:
    """Each of `values`, written compactly, is accepted by the schema's grammar with
    `property_order="any"` exactly when `jsonschema` says valid; the verdicts counted."""
    vocab = byte_vocabulary()
    g = ts.Grammar.from_json_schema(schema, vocab, property_order="any")
    v = jsonschema.Draft202012Validator(schema)
    checked = {True: 0, False: 0}
    text = lambda x: json.dumps(x, separators=(",", ":"))  # noqa: E731
    agree(g, v.is_valid, values, token_lookup(vocab), checked, text=text, what=name)
    return checked


def test_one_of_each_branch_requiring_its_own_property_in_schema_order() -> None:
    """Schema order: nothing invalid accepted, and every valid object written in the documented
    order (the taken branch's property first, then the other branches' in their order)."""
    schema = OWN_REQUIRED["strings"]
    vocab = byte_vocabulary()
    lookup = token_lookup(vocab)
    g = ts.Grammar.from_json_schema(schema, vocab)
    v = jsonschema.Draft202012Validator(schema)
    valid = 0
    for x in own_required_values("strings", 300):
        if not v.is_valid(x):
            assert not accepts(g, json.dumps(x), lookup), x
            continue
        assert isinstance(x, dict)
        # k12 is declared by no branch: an additional property, written last
        taken = next(k for k, y in x.items() if isinstance(y, str) and k != "k12")
        rest = sorted((k for k in x if k != taken), key=lambda k: int(k[1:]))
        ordered = {k: x[k] for k in [taken, *rest]}
        assert accepts(g, json.dumps(ordered), lookup), ordered
        valid += 1
    assert valid >= 20


# tagged unions (every object branch requires `kind` with its own constant) under `not`, in an
# exclusive `oneOf` beside a branch the tag does not tell apart, and as array items: negated,
# one alternative per tag value instead of a product over the branches (each was refused:
# "more than 512 alternatives")
KINDS = ["Point", "Line", "Poly", "Multi", "Coll", "Feat", "Box", "Ring"]


def _tagged(i: int) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["kind", "a"],
        "properties": {
            "kind": {"const": KINDS[i]},
            "a": {"type": ["integer", "string"][i % 2]},
            "b": {"type": "boolean"},
            "c": {"maximum": i},
        },
    }


TAGGED: dict[str, dict[str, Any]] = {
    "not oneOf": {"not": {"oneOf": [_tagged(i) for i in range(8)]}},
    "not anyOf with null": {"not": {"anyOf": [{"type": "null"}] + [_tagged(i) for i in range(8)]}},
    "oneOf with an untagged branch": {
        "oneOf": [_tagged(i) for i in range(7)]
        + [
            {
                "type": "object",
                "required": ["a"],
                "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            }
        ]
    },
    "items not oneOf": {
        "type": "array",
        "items": {"not": {"oneOf": [_tagged(i) for i in range(6)]}},
    },
}


def _tagged_value(r: random.Random) -> Any:
    if r.random() < 0.15:
        return r.choice([None, 1, "x", True, [1]])
    o: dict[str, Any] = {}
    if r.random() < 0.85:
        o["kind"] = r.choice([*KINDS, "Zed", 3])
    for k in "abc":
        if r.random() < 0.7:
            o[k] = r.choice([1, "s", True, None, 5, -2])
    return o


@pytest.mark.parametrize("name", sorted(TAGGED))
def test_tagged_unions_negate_per_tag_value(name: str) -> None:
    r = random.Random(name)
    values: list[Any] = [_tagged_value(r) for _ in range(500)]
    if name.startswith("items"):
        values = [[_tagged_value(r) for _ in range(r.randrange(4))] for _ in range(600)]
    checked = agree_in_any_order(TAGGED[name], values, name)
    assert checked[True] >= 15 and checked[False] >= 15, checked
