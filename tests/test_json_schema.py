"""JSON Schema grammars: per-keyword accept/reject tables fed token by token through a real
vocabulary, and random walks over allowed tokens checked with the `jsonschema` package."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from feed import Lookup, accepts, token_lookup

import tokensieve as ts
from tokensieve.constraints import Constraint

jsonschema = pytest.importorskip("jsonschema")


def allowed(row: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def oracle(schema: Any) -> Any:
    """A jsonschema validator with format checking; draft 7 for tuple-form `items`."""
    old = isinstance(schema, dict) and isinstance(schema.get("items"), list)
    cls = jsonschema.Draft7Validator if old else jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": "))


# (schema, instance, accepted) — instances are serialized with json.dumps(", ", ": ").
CASES: list[tuple[dict[str, Any] | bool, Any, bool]] = [
    # type / nullable / boolean schemas
    ({"type": "integer"}, 42, True),
    ({"type": "integer"}, 4.5, False),
    ({"type": "number"}, -0.125, True),
    ({"type": "string"}, 'héllo "q" \n', True),
    ({"type": "string"}, 3, False),
    ({"type": ["string", "null"]}, None, True),
    ({"type": ["string", "null"]}, True, False),
    ({"type": "integer", "nullable": True}, None, True),
    ({"type": "boolean"}, False, True),
    (True, {"a": [1, None, "x"]}, True),
    ({}, [1, {"b": 2}], True),
    # const / enum
    ({"const": "a/b"}, "a/b", True),
    ({"const": "a/b"}, "a/c", False),
    ({"const": 1}, 1.0, True),
    ({"const": {"k": [1, 2]}}, {"k": [1, 2]}, True),
    ({"enum": ["red", "green", 3, None]}, "green", True),
    ({"enum": ["red", "green", 3, None]}, "blue", False),
    ({"enum": ["red", "green", 3, None]}, None, True),
    ({"enum": ["é", "ü"]}, "ü", True),
    # objects
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        {"a": 1, "b": "x"},
        True,
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        {"b": "x"},
        False,
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "additionalProperties": False,
        },
        {"b": "x"},
        True,
    ),
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        {"a": 1, "z": 2},
        False,
    ),
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, {"a": 1, "z": [2, {}]}, True),
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, {"z": 2, "a": 1}, False),
    (
        {"type": "object", "additionalProperties": {"type": "boolean"}},
        {"x": True, "y": False},
        True,
    ),
    ({"type": "object", "additionalProperties": {"type": "boolean"}}, {"x": 1}, False),
    (
        {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 1},
        {"x": 1, "y": 2},
        False,
    ),
    # arrays
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, [1, 2], True),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, [1, 2, 3], False),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1}, [], False),
    (
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        ["a", 1, None],
        True,
    ),
    (
        {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
        ["a", "b"],
        False,
    ),
    ({"type": "array", "items": [{"type": "integer"}], "additionalItems": False}, [1], True),
    ({"type": "array", "items": [{"type": "integer"}], "additionalItems": False}, [1, 2], False),
    # strings
    ({"type": "string", "minLength": 2, "maxLength": 3}, "ab", True),
    ({"type": "string", "minLength": 2, "maxLength": 3}, "a\n", True),
    ({"type": "string", "minLength": 2, "maxLength": 3}, "abcd", False),
    ({"type": "string", "maxLength": 2}, "😀😀", True),
    ({"type": "string", "pattern": "^[a-z]+-\\d+$"}, "abc-12", True),
    ({"type": "string", "pattern": "^[a-z]+-\\d+$"}, "abc-x", False),
    ({"type": "string", "pattern": "x"}, "axb", True),
    ({"type": "string", "format": "date"}, "2024-02-29", True),
    ({"type": "string", "format": "date"}, "2023-02-29", False),
    ({"type": "string", "format": "date-time"}, "2024-01-02T03:04:05Z", True),
    ({"type": "string", "format": "ipv4"}, "192.168.0.1", True),
    ({"type": "string", "format": "ipv4"}, "192.168.0.256", False),
    ({"type": "string", "format": "uuid"}, "123e4567-e89b-12d3-a456-426614174000", True),
    ({"type": "string", "format": "email"}, "a.b@example.com", True),
    ({"type": "string", "format": "email"}, "nope", False),
    ({"type": "string", "format": "unknown-format"}, "anything", True),
    # numbers
    ({"type": "integer", "minimum": 10, "maximum": 20}, 15, True),
    ({"type": "integer", "minimum": 10, "maximum": 20}, 21, False),
    ({"type": "integer", "exclusiveMinimum": 10}, 10, False),
    ({"type": "integer", "minimum": 10, "exclusiveMinimum": True}, 11, True),
    ({"type": "number", "minimum": -1.5, "maximum": 2.25}, 2.25, True),
    ({"type": "number", "minimum": -1.5, "maximum": 2.25}, -1.6, False),
    # combinators and refs
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, True),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "s", True),
    (
        {"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 5}]},
        6,
        False,
    ),
    (
        {
            "$defs": {"pos": {"type": "integer", "minimum": 1}},
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/pos"}},
            "required": ["n"],
        },
        {"n": 0},
        False,
    ),
    # negation, conditionals, dependencies
    ({"not": {"type": "string"}}, 1, True),
    ({"not": {"type": "string"}}, "a", False),
    ({"type": "integer", "not": {"enum": [1, 2]}}, 3, True),
    ({"type": "integer", "not": {"enum": [1, 2]}}, 2, False),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, 1, True),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, 3, False),
    # a required discriminator separates objects only: other values match both branches
    (
        {
            "oneOf": [
                {"required": ["k"], "properties": {"k": {"const": 1}}},
                {"required": ["k"], "properties": {"k": {"const": 2}}},
            ]
        },
        5,
        False,
    ),
    (
        {
            "oneOf": [
                {"required": ["k"], "properties": {"k": {"const": 1}}},
                {"required": ["k"], "properties": {"k": {"const": 2}}},
            ]
        },
        {"k": 2},
        True,
    ),
    # the discriminator may be required by the schema holding the oneOf
    (
        {
            "type": "object",
            "required": ["k"],
            "oneOf": [{"properties": {"k": {"const": 1}}}, {"properties": {"k": {"const": 2}}}],
        },
        {"k": 1},
        True,
    ),
    (
        {
            "type": "object",
            "required": ["k"],
            "oneOf": [{"properties": {"k": {"const": 1}}}, {"properties": {"k": {"const": 2}}}],
        },
        {"k": 3},
        False,
    ),
    # a lower bound above the upper bound leaves nothing of that type
    ({"type": ["string", "null"], "minLength": 2, "maxLength": 0}, "", False),
    ({"type": ["string", "null"], "minLength": 3, "maxLength": 1}, "abc", False),
    ({"type": ["string", "null"], "minLength": 3, "maxLength": 1}, None, True),
    ({"type": ["object", "null"], "minProperties": 3, "maxProperties": 1}, {"a": 1}, False),
    ({"type": ["object", "null"], "minProperties": 2, "maxProperties": 0}, {}, False),
    (
        {
            "type": ["array", "null"],
            "items": {"type": "string", "minLength": 2},
            "contains": {"type": "string", "maxLength": 0},
        },
        [""],
        False,
    ),
    # a format with a length bound (a DFA of thousands of states, built straight into states)
    ({"type": "string", "format": "email", "maxLength": 64}, "ann@example.com", True),
    ({"type": "string", "format": "email", "maxLength": 64}, "a@" + "b." * 30 + "co", True),
    ({"type": "string", "format": "email", "maxLength": 64}, "ab@" + "b." * 30 + "co", False),
    ({"type": "string", "format": "email", "maxLength": 64}, "ann@", False),
    ({"type": "string", "format": "hostname", "minLength": 5, "maxLength": 30}, "a.com", True),
    ({"type": "string", "format": "hostname", "minLength": 5, "maxLength": 30}, "a.co", False),
    # closed branches: each requires a property the other does not allow, so they are
    # disjoint objects and exactly one matches
    *[
        (
            {
                "type": "object",
                "oneOf": [
                    {
                        "additionalProperties": False,
                        "properties": {"path": {"type": "string"}, "kind": {"enum": ["a", "b"]}},
                        "required": ["kind", "path"],
                    },
                    {
                        "additionalProperties": False,
                        "properties": {"family": {"type": "string"}, "style": {"type": "string"}},
                        "required": ["style"],
                    },
                ],
            },
            instance,
            ok,
        )
        for instance, ok in [
            ({"path": "/p", "kind": "a"}, True),
            ({"family": "Arial", "style": "bold"}, True),
            ({"path": "/p", "kind": "a", "family": "Arial"}, False),
            ({"path": "/p", "kind": "a", "extra": 1}, False),
            ({"family": "Arial"}, False),
        ]
    ],
    ({"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}}, 5, True),
    ({"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}}, -5, False),
    ({"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}}, "x", True),
    ({"if": {"type": "integer"}, "then": {"minimum": 0}, "else": {"type": "string"}}, None, False),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1, "b": 2}, True),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1}, False),
    ({"dependentSchemas": {"a": {"required": ["b"]}}}, {"b": 1}, True),
    ({"dependentSchemas": {"a": {"required": ["b"]}}}, {"a": 1}, False),
    # arrays: contains, uniqueItems over finite domains
    ({"contains": {"type": "string"}, "minContains": 2}, [1, "a", "b"], True),
    ({"contains": {"type": "string"}, "minContains": 2}, [1, "a"], False),
    ({"contains": {"const": 0}, "maxContains": 1}, [0, 1, 0], False),
    ({"items": {"enum": ["x", "y"]}, "uniqueItems": True}, ["y", "x"], True),
    ({"items": {"enum": ["x", "y"]}, "uniqueItems": True}, ["x", "x"], False),
    # numbers
    ({"type": "number", "multipleOf": 0.5}, 2.5, True),
    ({"type": "number", "multipleOf": 0.5}, 2.25, False),
    ({"type": "integer", "multipleOf": 7, "maximum": 30}, 28, True),
    ({"type": "integer", "multipleOf": 7, "maximum": 30}, 35, False),
    # objects: patterns, names, unevaluated
    ({"patternProperties": {"^n_": {"type": "integer"}}}, {"n_a": 1, "s": "x"}, True),
    ({"patternProperties": {"^n_": {"type": "integer"}}}, {"n_a": "x"}, False),
    ({"propertyNames": {"maxLength": 2}}, {"ab": 1}, True),
    ({"propertyNames": {"maxLength": 2}}, {"abc": 1}, False),
    ({"properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1}, True),
    ({"properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1, "b": 2}, False),
    ({"prefixItems": [{"type": "integer"}], "unevaluatedItems": False}, [1], True),
    ({"prefixItems": [{"type": "integer"}], "unevaluatedItems": False}, [1, 2], False),
    # strings: pattern with lengths, two patterns
    ({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3}, "abc", True),
    ({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3}, "abcd", False),
    ({"allOf": [{"pattern": "a"}, {"pattern": "b"}]}, "xbxa", True),
    ({"allOf": [{"pattern": "a"}, {"pattern": "b"}]}, "xa", False),
    # references by $id and anchor
    (
        {"$id": "http://e.test/r", "$ref": "d", "$defs": {"d": {"$id": "d", "type": "null"}}},
        None,
        True,
    ),
    ({"$ref": "#a", "$defs": {"d": {"$anchor": "a", "type": "null"}}}, 0, False),
    # keywords spelled like the compiler's internal ones are annotations in a user schema
    ({"type": "string", "x-ts-notIn": ["a"]}, "a", True),
    ({"type": "number", "x-ts-notMultipleOf": 2}, 4, True),
    ({"type": "string", "x-ts-notPattern": ["^a"]}, "abc", True),
    ({"properties": {"a": {"type": "integer", "x-ts-notMultipleOf": 3}}}, {"a": 3}, True),
]


@pytest.mark.parametrize(("schema", "instance", "expected"), CASES)
def test_keyword_table(
    vocab: ts.Vocabulary,
    lookup: Lookup,
    schema: dict[str, Any] | bool,
    instance: Any,
    expected: bool,
) -> None:
    g = ts.Grammar.from_json_schema(schema, vocab)
    text = dumps(instance)
    assert accepts(g, text, lookup) == expected, text
    if expected and not (isinstance(schema, dict) and "nullable" in schema):  # OpenAPI keyword
        assert oracle(schema).is_valid(instance)


# (schema, its divisor conditions as (divisor, must divide)): several multipleOf conditions on
# one number, required and negated, merged by allOf
SEVERAL_DIVISORS: list[tuple[dict[str, Any], list[tuple[str, bool]]]] = [
    (
        {"allOf": [{"not": {"multipleOf": 2}}, {"not": {"multipleOf": 3}}]},
        [("2", False), ("3", False)],
    ),
    ({"multipleOf": 4, "not": {"multipleOf": 6}}, [("4", True), ("6", False)]),
    (
        {"allOf": [{"not": {"multipleOf": 0.5}}, {"not": {"multipleOf": 0.3}}]},
        [("0.5", False), ("0.3", False)],
    ),
    ({"multipleOf": 0.25, "not": {"multipleOf": 0.1}}, [("0.25", True), ("0.1", False)]),
]


@pytest.mark.parametrize(("extra", "conditions"), SEVERAL_DIVISORS)
@pytest.mark.parametrize("kind", ["integer", "number"])
def test_several_multiple_of_conditions(
    vocab: ts.Vocabulary,
    lookup: Lookup,
    extra: dict[str, Any],
    conditions: list[tuple[str, bool]],
    kind: str,
) -> None:
    # the reference is exact decimal arithmetic (jsonschema divides binary floats)
    from decimal import Decimal

    schema = {"type": kind, "minimum": -6, "maximum": 7, **extra}
    texts = [str(i) for i in range(-9, 10)]
    if kind == "number":
        fractions = ("5", "25", "75", "1", "3", "6", "9", "05", "125")
        texts += [f"{i}.{f}" for i in range(-7, 8) for f in fractions]
        texts += [f"-0.{f}" for f in fractions]

    def want(text: str) -> bool:
        x = Decimal(text)
        return Decimal(-6) <= x <= 7 and all(
            (x % Decimal(d) == 0) == must for d, must in conditions
        )

    if not any(want(t) for t in texts):
        # every integer in range is sampled: no value satisfies the schema
        assert kind == "integer"
        with pytest.raises(ts.SchemaError, match="no JSON value satisfies"):
            ts.Grammar.from_json_schema(schema, vocab)
        return
    g = ts.Grammar.from_json_schema(schema, vocab)
    for text in texts:
        assert accepts(g, text, lookup) == want(text), (schema, text)


def test_escaped_spellings(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    # enum strings are spelled as written (json.dumps, with or without ensure_ascii) ...
    g = ts.Grammar.from_json_schema({"enum": ["é/x", "b"]}, vocab)
    for text in ['"é/x"', '"\\u00e9/x"', '"b"']:
        assert accepts(g, text, lookup), text
    for text in ['"\\u00e9\\/x"', '"\\u00E9/x"', '"\\u0062"']:
        assert not accepts(g, text, lookup), text
    # ... or in every spelling with literal_spelling="any"
    g = ts.Grammar.from_json_schema({"enum": ["é/x", "b"]}, vocab, literal_spelling="any")
    for text in ['"é/x"', '"\\u00e9\\/x"', '"\\u00E9/x"', '"\\u0062"']:
        assert accepts(g, text, lookup), text
    g = ts.Grammar.from_json_schema({"type": "string", "maxLength": 1}, vocab)
    assert accepts(g, json.dumps("😀"), lookup)  # one character, spelled as a surrogate pair
    assert not accepts(g, '"ab"', lookup)


def test_schema_inputs_and_errors(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_json_schema('{"type": "integer"}', vocab)
    assert accepts(g, "12", lookup)
    with pytest.raises(ts.SchemaError) as e:
        ts.Grammar.from_json_schema(
            {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}, vocab
        )
    assert e.value.keyword == "uniqueItems" and e.value.pointer == "/properties/a"
    with pytest.raises(ts.SchemaError) as e:
        ts.Grammar.from_json_schema({"type": "string", "pattern": "a(?=b)"}, vocab)
    assert e.value.keyword == "pattern"
    # overlapping oneOf branches are exact by default: integers match both branches
    g = ts.Grammar.from_json_schema({"oneOf": [{"type": "integer"}, {"type": "number"}]}, vocab)
    assert accepts(g, "1.5", lookup) and not accepts(g, "1", lookup)
    g = ts.Grammar.from_json_schema(
        {"oneOf": [{"type": "integer"}, {"type": "number"}]}, vocab, one_of="any_of"
    )
    assert accepts(g, "1.5", lookup)
    g = ts.Grammar.from_json_schema({"type": "array", "uniqueItems": True}, vocab, lenient=True)
    assert any("uniqueItems" in w for w in g.warnings)
    with pytest.raises(ts.SchemaError) as e:
        ts.Grammar.from_json_schema({"items": {"type": ["integer", "x-ts-fraction"]}}, vocab)
    assert e.value.keyword == "type" and e.value.pointer == "/items"
    with pytest.raises(ValueError, match='unknown option "no_such_option"; options are max_states'):
        ts.Grammar.from_json_schema({}, vocab, no_such_option=1)
    with pytest.raises(ValueError, match="whitespace"):
        ts.Grammar.from_json_schema({}, vocab, whitespace="x+")


def test_options(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    s = {"type": "object", "properties": {"a": {"type": "integer"}}}
    g = ts.Grammar.from_json_schema(s, vocab, additional_properties="forbid")
    assert accepts(g, '{"a": 1}', lookup) and not accepts(g, '{"a": 1, "b": 2}', lookup)
    g = ts.Grammar.from_json_schema(s, vocab, whitespace="compact")
    assert accepts(g, '{"a":1}', lookup) and not accepts(g, '{"a": 1}', lookup)
    g = ts.Grammar.from_json_schema(s, vocab, whitespace="flexible", max_whitespace=3)
    assert accepts(g, '{\n  "a" : 1\n}', lookup) and not accepts(g, '{     "a": 1}', lookup)
    g = ts.Grammar.from_json_schema({"type": "string", "format": "date"}, vocab, formats="annotate")
    assert accepts(g, '"not a date"', lookup)
    rec = {
        "$defs": {
            "n": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/n"}},
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/n",
    }
    g = ts.Grammar.from_json_schema(rec, vocab, recursion="unroll", max_recursion_depth=2)
    assert accepts(g, '{"next": {}}', lookup)
    assert not accepts(g, '{"next": {"next": {}}}', lookup)
    g = ts.Grammar.from_json_schema(rec, vocab, max_stack_depth=2)
    assert accepts(g, '{"next": {}}', lookup)
    assert not accepts(g, '{"next": {"next": {}}}', lookup)
    assert accepts(
        ts.Grammar.from_json_schema(rec, vocab), '{"next": ' * 40 + "{}" + "}" * 40, lookup
    )
    req = {
        "$defs": {
            "t": {"type": "object", "properties": {"k": {"$ref": "#/$defs/t"}}, "required": ["k"]}
        },
        "anyOf": [{"type": "null"}, {"$ref": "#/$defs/t"}],
    }
    with pytest.raises(ts.SchemaError, match="max_recursion_depth"):
        ts.Grammar.from_json_schema(req, vocab, recursion="unroll")
    g = ts.Grammar.from_json_schema(req, vocab, recursion="unroll", truncate_recursion=True)
    assert accepts(g, "null", lookup)
    # through the stack the endless branch is empty: only null
    g = ts.Grammar.from_json_schema(req, vocab)
    assert accepts(g, "null", lookup) and not accepts(g, '{"k": null}', lookup)


def test_pydantic_model(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Pet(pydantic.BaseModel):
        name: str
        age: int = pydantic.Field(ge=0, le=30)
        tags: list[str] = []

    g = ts.Grammar.from_json_schema(Pet, vocab)
    assert accepts(g, dumps({"name": "Rex", "age": 3, "tags": ["a"]}), lookup)
    assert not accepts(g, dumps({"name": "Rex", "age": 31}), lookup)


def test_choice_and_json_object(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_choice(["yes", "no", "maybe so"], vocab)
    assert accepts(g, "maybe so", lookup) and not accepts(g, "nope", lookup)
    g = ts.Grammar.from_json_object(vocab)
    assert accepts(g, dumps({"a": [1, {"b": None}], "c": "d"}), lookup)
    assert not accepts(g, "[1]", lookup)


PRIORITY = [b'"', b"}", b"]", b"0", b"1", b"null", b"a", b"true", b":", b",", b" "]

WALK_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": -50, "maximum": 1234},
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "score": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
            "kind": {"enum": ["a", "b", 3]},
            "tags": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[a-z]{1,3}$"},
                "maxItems": 3,
            },
        },
        "required": ["id", "kind"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date"},
            "ip": {"type": "string", "format": "ipv4"},
        },
    },
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "oneOf": [
            {
                "type": "object",
                "properties": {"t": {"const": "x"}, "n": {"type": "integer"}},
                "required": ["t"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"t": {"const": "y"}, "s": {"type": "string"}},
                "required": ["t"],
                "additionalProperties": False,
            },
        ]
    },
    {
        "type": "array",
        "prefixItems": [{"type": "boolean"}, {"type": "null"}],
        "items": {"type": "number", "minimum": -2.5, "maximum": 7},
    },
]


@pytest.mark.parametrize("schema_index", range(len(WALK_SCHEMAS)))
def test_random_walks_validate(vocab: ts.Vocabulary, lookup: Lookup, schema_index: int) -> None:
    schema = WALK_SCHEMAS[schema_index]
    g = ts.Grammar.from_json_schema(schema, vocab)
    table, _ = lookup
    prio = [table[p] for p in PRIORITY if p in table]
    eos = set(vocab.eos_token_ids)
    validator = oracle(schema)
    rng = random.Random(1234 + schema_index)
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    for _ in range(12):
        m = g.matcher()
        out = b""
        for step in range(600):
            m.fill_next_token_bitmask(bm)
            ids = allowed(np.asarray(bm)[0])
            assert len(ids) > 0
            ok_eos = [t for t in ids.tolist() if t in eos]
            if ok_eos and (step > 25 or rng.random() < 0.3):
                assert m.accept_token(ok_eos[0])
                break
            if step < 25 or rng.random() < 0.2:
                tok = int(rng.choice(ids.tolist()))
            else:
                idset = set(ids.tolist())
                tok = next((p for p in prio if p in idset), int(rng.choice(ids.tolist())))
            if tok in eos:
                assert m.accept_token(tok)
                break
            assert m.accept_token(tok)
            out += vocab.token_bytes(tok) or b""
        assert m.is_finished(), f"walk did not finish: {out[:200]!r}"
        value = json.loads(out.decode())
        assert validator.is_valid(value), (out, list(validator.iter_errors(value)))


def test_references_and_registry(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    # $id-relative references and anchors within one document
    schema = {
        "$id": "https://example.com/root.json",
        "type": "object",
        "properties": {"a": {"$ref": "item.json"}, "b": {"$ref": "#name"}},
        "additionalProperties": False,
        "$defs": {
            "i": {"$id": "item.json", "type": "integer"},
            "n": {"$anchor": "name", "type": "string"},
        },
    }
    g = ts.Grammar.from_json_schema(schema, vocab)
    assert accepts(g, '{"a": 1, "b": "x"}', lookup)
    assert not accepts(g, '{"a": "x"}', lookup)
    # another document: only through the registry, never fetched
    remote = {"$ref": "https://example.com/defs.json#/$defs/pos"}
    with pytest.raises(ts.SchemaError, match="registry") as e:
        ts.Grammar.from_json_schema(remote, vocab)
    assert e.value.keyword == "$ref"
    defs = {"$defs": {"pos": {"type": "integer", "minimum": 1}}}
    g = ts.Grammar.from_json_schema(remote, vocab, registry={"https://example.com/defs.json": defs})
    assert accepts(g, "5", lookup) and not accepts(g, "0", lookup)
    # a JSON text works as well; the registry is part of the cache key
    g2 = ts.Grammar.from_json_schema(
        remote, vocab, registry={"https://example.com/defs.json": json.dumps(defs)}
    )
    assert accepts(g2, "5", lookup)
    key = lambda reg: Constraint.make("json_schema", remote, {"registry": reg}).key  # noqa: E731
    assert key({"https://example.com/defs.json": defs}) != key({})
    with pytest.raises(ValueError, match="registry"):
        ts.Grammar.from_json_schema(remote, vocab, registry=["not", "a", "mapping"])
    with pytest.raises(ValueError, match="not a schema"):
        ts.Grammar.from_json_schema(remote, vocab, registry={"https://example.com/d.json": 3})
    # a document of an older draft keeps its draft's keywords: prefixItems is none in 2019-09
    old = {
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "prefixItems": [{"type": "string"}],
        "items": {"type": "integer"},
    }
    g = ts.Grammar.from_json_schema(
        {"type": "array", "$ref": "https://example.com/old.json"},
        vocab,
        registry={"https://example.com/old.json": old},
    )
    assert accepts(g, "[1, 2, 3]", lookup)
    assert not accepts(g, '["a", 2]', lookup)
    new = {**old, "$schema": "https://json-schema.org/draft/2020-12/schema"}
    g = ts.Grammar.from_json_schema(
        {"type": "array", "$ref": "https://example.com/new.json"},
        vocab,
        registry={"https://example.com/new.json": new},
    )
    assert accepts(g, '["a", 2]', lookup) and not accepts(g, "[1, 2, 3]", lookup)
    # drafts up to 7: siblings of $ref are ignored
    d7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"n": {"type": "integer"}},
        "$ref": "#/definitions/n",
        "maximum": 3,
    }
    g = ts.Grammar.from_json_schema(d7, vocab)
    assert accepts(g, "5", lookup)


def test_a_multiple_of_past_the_expression_budget_compiles_and_a_larger_one_is_named() -> None:
    """`multipleOf: 1e-300` under `maximum: 1e300` has no regular expression within the budget
    (it was refused so): its automaton is kept as a DFA read byte for byte. One whose
    automaton itself passes the state budget is refused naming `multipleOf`."""
    vocab = ts.Vocabulary([bytes([b]) for b in range(256)] + [b"<eos>"], eos_token_ids=[256])
    lookup = token_lookup(vocab)
    g = ts.Grammar.from_json_schema(
        {"type": "number", "maximum": 1e300, "multipleOf": 1e-300}, vocab
    )
    for text, ok in [
        ("0." + "0" * 299 + "1", True),
        ("0." + "0" * 300 + "1", False),
        ("1" + "0" * 300, True),
        ("1" + "0" * 301, False),
        ("-12.5", True),
    ]:
        assert accepts(g, text, lookup) == ok, text
    with pytest.raises(ts.SchemaError) as e:
        ts.Grammar.from_json_schema(
            {"type": "number", "multipleOf": 0.9999, "maximum": 1e40}, vocab
        )
    assert e.value.keyword == "multipleOf"
    assert "automaton states" in str(e.value)


def test_allof_branches_keep_their_own_additional_properties(
    vocab: ts.Vocabulary, lookup: Lookup
) -> None:
    """One branch's additionalProperties beside another branch's patternProperties: each key
    gets both branches' constraints (jsonschema as oracle, over every small object of these
    keys and values; valid objects may need schema order, so every order is tried)."""
    import itertools

    closed = {"properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    typed = {
        "properties": {"a": {}},
        "patternProperties": {"^y": {"type": "boolean"}},
        "additionalProperties": {"type": "integer"},
    }
    xs = {"patternProperties": {"^x": {"type": "string"}}}
    xnum = {
        "properties": {"xa": {"type": "integer"}},
        "patternProperties": {"^x": {"type": "integer", "maximum": 5}, "b$": {"minimum": 3}},
        "additionalProperties": {"type": "number"},
    }
    schemas = [
        {"allOf": [closed, xs]},
        {"allOf": [xs, closed]},
        {"allOf": [typed, xnum]},
        {"type": "object", "required": ["yb"], "allOf": [typed, xs]},
    ]
    keys = ["a", "xa", "xb", "yb", "zb"]
    values = [1, 7, "s", True, 2.5]
    for schema in schemas:
        g = ts.Grammar.from_json_schema(schema, vocab)
        validator = jsonschema.Draft202012Validator(schema)
        accepted = 0
        for n in range(3):
            for ks in itertools.combinations(keys, n):
                for vs in itertools.product(values[:3] if n == 2 else values, repeat=n):
                    inst = dict(zip(ks, vs))
                    ours = any(
                        accepts(g, json.dumps(dict(p)), lookup)
                        for p in itertools.permutations(inst.items())
                    )
                    assert ours == validator.is_valid(inst), (schema, inst, ours)
                    accepted += ours
        assert accepted > 0, schema
    # a const/enum value is checked against the kept views too
    g = ts.Grammar.from_json_schema(
        {"allOf": [closed, xs, {"enum": [{"xa": "s"}, {"a": 1}]}]}, vocab
    )
    assert accepts(g, '{"a": 1}', lookup) and not accepts(g, '{"xa": "s"}', lookup)
    # and under not: some key other than a (any value), or an x-key whose value is no string
    neg = {"not": {"allOf": [closed, xs]}}
    g = ts.Grammar.from_json_schema(neg, vocab)
    validator = jsonschema.Draft202012Validator(neg)
    for n in range(3):
        for ks in itertools.combinations(["a", "xa", "z"], n):
            for vs in itertools.product([1, "s", None], repeat=n):
                inst = dict(zip(ks, vs))
                ours = any(
                    accepts(g, json.dumps(dict(p)), lookup)
                    for p in itertools.permutations(inst.items())
                )
                assert ours == validator.is_valid(inst), (neg, inst, ours)
    # a required key both branches constrain apart: an integer and a string at once
    with pytest.raises(ts.SchemaError, match="no JSON value"):
        ts.Grammar.from_json_schema(
            {"type": "object", "required": ["xb"], "allOf": [typed, xs]}, vocab
        )
