"""Inputs a hostile or careless client can send: each ends in an exact result or a typed error.

Numbers keep their decimal text from the Python object (or the JSON text) into the compiler, so
bounds, `const`, `enum` and `multipleOf` are exact at any size; the expected answers come from
Python's own integer and decimal arithmetic.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from feed import Lookup, accepts

import tokensieve as ts


def both_forms(schema: dict[str, Any]) -> list[Any]:
    """The schema as a Python object and as JSON text (both input paths)."""
    return [schema, json.dumps(schema)]


def near(x: int, spread: int = 3) -> list[int]:
    return [x + d for d in range(-spread, spread + 1)]


@pytest.mark.parametrize("exp", [63, 64, 70, 128, 200])
def test_big_integer_bounds_are_exact(vocab: ts.Vocabulary, lookup: Lookup, exp: int) -> None:
    lo, hi = 2**exp, 2**exp + 5
    for schema in both_forms({"type": "integer", "minimum": lo, "maximum": hi}):
        g = ts.Grammar.from_json_schema(schema, vocab)
        for v in [*near(lo), *near(hi), -lo, 0]:
            assert accepts(g, str(v), lookup) == (lo <= v <= hi), v
        # the float rounding of the bound is not in range unless it equals a value in range
        f = int(float(lo))
        assert accepts(g, str(f), lookup) == (lo <= f <= hi)


def test_big_exclusive_bounds_and_negative_range(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    lo, hi = -(2**90) - 2, -(2**90) + 2
    g = ts.Grammar.from_json_schema(
        {"type": "integer", "exclusiveMinimum": lo, "exclusiveMaximum": hi}, vocab
    )
    for v in near(lo, 5) + near(hi, 5):
        assert accepts(g, str(v), lookup) == (lo < v < hi), v


def test_big_const_and_enum_accept_exactly_their_values(
    vocab: ts.Vocabulary, lookup: Lookup
) -> None:
    big = 2**200 + 1  # not a binary float: float(big) rounds to 2**200
    for schema in both_forms({"const": big}):
        g = ts.Grammar.from_json_schema(schema, vocab)
        assert accepts(g, str(big), lookup)
        assert not accepts(g, str(big + 1), lookup)
        assert not accepts(g, str(int(float(big))), lookup)  # its float rounding differs
    member = 2**64 + 1
    for schema in both_forms({"enum": [member, "x"]}):
        g = ts.Grammar.from_json_schema(schema, vocab)
        assert accepts(g, str(member), lookup)
        assert accepts(g, '"x"', lookup)
        assert not accepts(g, "18446744073709552000", lookup)  # float(member), printed
        assert not accepts(g, str(member - 1), lookup)


def test_long_decimal_bounds_are_exact(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    # 0.1 + 30 digits: no binary float holds it; Decimal gives the reference order
    text = "0.100000000000000000000000000001"
    schema_text = '{"type": "number", "minimum": ' + text + "}"
    g = ts.Grammar.from_json_schema(schema_text, vocab)
    for cand in [
        "0.1",
        "0.100000000000000000000000000001",
        "0.1000000000000000000000000000009",
        "0.10000000000000000000000000000100",
        "0.2",
        "0.100000000000000000000000000002",
    ]:
        assert accepts(g, cand, lookup) == (Decimal(cand) >= Decimal(text)), cand


def test_multiple_of_on_big_values(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_json_schema({"type": "integer", "multipleOf": 7}, vocab)
    for v in [7 * 10**30, 7 * 10**30 + 1, 7 * (2**70 // 7), 2**70, -7 * 3**50, 2**100]:
        assert accepts(g, str(v), lookup) == (v % 7 == 0), v


def test_multiple_of_with_many_digits_is_a_clear_error(vocab: ts.Vocabulary) -> None:
    for step in [2**65 + 1, 5 * 10**40]:
        with pytest.raises(ts.SchemaError, match="multipleOf"):
            ts.Grammar.from_json_schema({"type": "integer", "multipleOf": step}, vocab)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "maximum": True},
        {"type": "number", "minimum": "3"},
        {"type": "number", "multipleOf": False},
        {"type": "number", "maximum": None},
    ],
)
def test_a_non_number_where_a_number_is_required_is_an_error(
    vocab: ts.Vocabulary, schema: dict[str, Any]
) -> None:
    key = next(k for k in schema if k != "type")
    with pytest.raises(ts.SchemaError, match=key):
        ts.Grammar.from_json_schema(schema, vocab)


def test_draft4_boolean_exclusive_bounds_still_work(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_json_schema(
        {"type": "integer", "minimum": 3, "exclusiveMinimum": True, "maximum": 5}, vocab
    )
    assert [accepts(g, str(v), lookup) for v in range(2, 7)] == [False, False, True, True, False]


@pytest.mark.parametrize("text", ["1e100000", "1e-100000", "-2.5E+99999"])
def test_numbers_beyond_the_exponent_limit_are_an_error(vocab: ts.Vocabulary, text: str) -> None:
    with pytest.raises(ts.SchemaError, match="exponent"):
        ts.Grammar.from_json_schema('{"type": "number", "maximum": ' + text + "}", vocab)


def test_non_finite_floats_are_a_clear_error(vocab: ts.Vocabulary) -> None:
    for bad in [float("inf"), float("-inf"), float("nan")]:
        with pytest.raises(ValueError, match="JSON"):
            ts.Grammar.from_json_schema({"type": "number", "maximum": bad}, vocab)


def test_large_enums_compile_and_stay_exact(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    # 100,000 members: strings share a trie of their prefixes, each member is checked once
    words = [f"member{i}" for i in range(100_000)]
    g = ts.Grammar.from_json_schema({"enum": words}, vocab)
    for w in ["member0", "member99999", "member5000"]:
        assert accepts(g, json.dumps(w), lookup)
    for w in ["member", "member100000", "member099", "Member1"]:
        assert not accepts(g, json.dumps(w), lookup)
    nums = list(range(0, 700_000, 7))
    g = ts.Grammar.from_json_schema({"enum": nums, "minimum": 350_000}, vocab)
    for v in [350_000, 350_007, 699_993, 349_993, 350_001, 700_000]:
        assert accepts(g, str(v), lookup) == (v % 7 == 0 and 350_000 <= v < 700_000), v


def test_vocabulary_size_is_bounded_before_allocation() -> None:
    with pytest.raises(ts.VocabularyError, match="larger than the supported"):
        ts.Vocabulary([b"a"], [0], vocab_size=2**31)
    with pytest.raises(ts.VocabularyError, match="larger than the supported"):
        ts.Vocabulary([b"a"], [0], vocab_size=2**24 + 1)


def test_the_compile_deadline_covers_every_compile(vocab: ts.Vocabulary) -> None:
    """`max_compile_seconds` stops the schema walk, enum members, the automaton and the first
    mask (each case below takes well over 0.1 s), not only `precompute`."""
    slow: list[tuple[str, Any]] = [
        ("json_schema", {"enum": [f"member{i}" for i in range(100_000)]}),
        # even lengths never settle, so this length bound is a product automaton
        (
            "json_schema",
            {"type": "string", "format": "email", "pattern": "^(?:..)+$", "maxLength": 254},
        ),
        ("regex", r"(\p{L}|\p{N}){0,1000}x"),
        ("choice", [f"choice number {i}" for i in range(200_000)]),
    ]
    for kind, source in slow:
        compile_ = {
            "json_schema": ts.Grammar.from_json_schema,
            "regex": ts.Grammar.from_regex,
            "choice": ts.Grammar.from_choice,
        }[kind]
        with pytest.raises(ts.BudgetError, match=r"max_compile_seconds=0\.002"):
            compile_(source, vocab, max_compile_seconds=0.002)
        compile_(source, vocab)  # the default deadline is ample for them


def test_huge_literals_are_refused_before_they_are_built(vocab: ts.Vocabulary) -> None:
    # each of these aborted the process (allocation failure) or took seconds before
    cases: list[Any] = [
        {"const": "x" * 10_000_000},
        {"enum": [chr(97 + i) * 1_000_000 for i in range(10)]},
        {"const": {"k": ["y" * 300_000]}},
        '{"const": [' + ", ".join(["1e9999"] * 300) + "]}",  # 300 numbers of 10,000 digits
    ]
    for schema in cases:
        with pytest.raises(ts.BudgetError, match="const/enum values"):
            ts.Grammar.from_json_schema(schema, vocab)


def test_schema_text_size_is_bounded(vocab: ts.Vocabulary) -> None:
    text = '{"description": "' + "x" * (64 << 20) + '"}'
    with pytest.raises(ts.BudgetError, match="MiB accepted"):
        ts.Grammar.from_json_schema(text, vocab)


def nested_schema(levels: int) -> dict[str, Any]:
    """``{"items": {"items": ... {"const": ["]"]}}}``: ``levels`` levels of arrays and objects,
    with a bracket inside a string at the bottom."""
    schema: dict[str, Any] = {"const": ["]"]}
    for _ in range(levels - 2):
        schema = {"items": schema}
    return schema


@pytest.mark.parametrize("levels", [127, 128, 129])
def test_schema_nesting_is_128_levels_exactly(levels: int) -> None:
    """128 levels are read, 129 refused, whichever way the schema comes: the message says "more
    than 128 levels", and the core refused 128 while saying so."""
    from tokensieve._bounded_json import json_nesting
    from tokensieve.constraints import compile_constraint
    from tokensieve.vllm.constraints import read_extra_args

    vocab = ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<e>"], eos_token_ids=[256])
    schema = nested_schema(levels)
    text = json.dumps(schema)
    assert json_nesting(text.encode(), 10**6) == levels
    ref = {"$ref": "urn:a"}
    attempts = [
        lambda: ts.Grammar.from_json_schema(schema, vocab),
        lambda: ts.Grammar.from_json_schema(text, vocab),
        lambda: ts.Grammar.from_json_schema(ref, vocab, registry={"urn:a": schema}),
        lambda: ts.Grammar.from_json_schema(ref, vocab, registry={"urn:a": text}),
        lambda: ts.Grammar.from_json_schema(ref, vocab, registry='{"urn:a": ' + text + "}"),
        lambda: compile_constraint("json_schema", schema, vocab),
        lambda: compile_constraint("json_schema", text, vocab),
        lambda: compile_constraint("json_schema", ref, vocab, registry={"urn:a": schema}),
        lambda: compile_constraint("json_schema", ref, vocab, registry='{"urn:a": ' + text + "}"),
    ]
    for k, attempt in enumerate(attempts):
        if levels <= 128:
            g = attempt()
            bottom = "[" * (levels - 2) + '["]"]' + "]" * (levels - 2)
            assert g.matcher().accept_tokens(list(bottom.encode())) == len(bottom), k
        else:
            with pytest.raises(ts.SchemaError, match="more than 128 levels"):
                attempt()
    # a vLLM request: admitted (and compiled) at 128 levels, refused past them
    for value in (schema, text):
        if levels <= 128:
            constraint = read_extra_args({"guided_json": value}).constraint
            assert constraint is not None
            constraint.compile(vocab)
        else:
            with pytest.raises(ValueError, match="guided_json nests more than 128 levels"):
                read_extra_args({"guided_json": value})


@pytest.mark.parametrize("depth", [200, 5000, 100_000])
def test_deeply_nested_schemas_are_a_schema_error(vocab: ts.Vocabulary, depth: int) -> None:
    schema: dict[str, Any] = {}
    node = schema
    for _ in range(depth):
        node["not"] = {}
        node = node["not"]
    with pytest.raises(ts.SchemaError, match="nests more than 128 levels"):
        ts.Grammar.from_json_schema(schema, vocab)
    text = '{"not": ' * depth + "{}" + "}" * depth
    with pytest.raises(ts.SchemaError, match="nests more than 128 levels"):
        ts.Grammar.from_json_schema(text, vocab)


def test_python_values_json_has_no_form_for_are_a_clear_error(vocab: ts.Vocabulary) -> None:
    for bad in [{"enum": {1, 2}}, {"const": b"x"}, {"enum": [1, object()]}, {"x": {(1, 2): 3}}]:
        with pytest.raises(ValueError, match="the schema is not JSON"):
            ts.Grammar.from_json_schema(bad, vocab)
