"""`uniqueItems: true` over numbers (`{"type": "number"}`, with or without bounds): items compared
by value whatever their spelling (`1`, `1.0`, `10e-1`), checked against `jsonschema` on random
arrays (numbers read as exact decimals), every token's mask bit against `accept_token`; with
bounds, a prefix whose one remaining value is held is refused (no dead end)."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest
from feed import accepts, byte_vocabulary, next_mask, token_lookup

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
    agree_on_random_arrays(schema, SPELLINGS, seed=3, arrays=400)


def agree_on_random_arrays(
    schema: dict[str, object], spellings: list[str], seed: int, arrays: int
) -> None:
    """Random arrays of up to four of `spellings` (under `"xs"` when the schema is an object's):
    accepted exactly when `jsonschema` (exact decimals) says valid; enough of either kind."""
    vocab = byte_vocabulary()
    lookup = token_lookup(vocab)
    g = ts.Grammar.from_json_schema(schema, vocab)
    validator = jsonschema.Draft202012Validator(schema)
    r = random.Random(seed)
    verdicts = {True: 0, False: 0}
    for _ in range(arrays):
        arr = "[" + ",".join(r.choice(spellings) for _ in range(r.randrange(5))) + "]"
        text = arr if schema.get("type") == "array" else '{"xs":' + arr + "}"
        want = validator.is_valid(json.loads(text, parse_float=Decimal))
        verdicts[want] += 1
        assert accepts(g, text, lookup) == want, text
    assert verdicts[True] > 50 and verdicts[False] > 50, verdicts


BOUNDED: list[dict[str, object]] = [
    {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "uniqueItems": True},
    {
        "type": "array",
        "items": {"type": "number", "exclusiveMinimum": -1, "maximum": 0},
        "uniqueItems": True,
        "maxItems": 5,
    },
    {
        "type": "array",
        "items": {"type": "number", "minimum": 2.5, "exclusiveMaximum": 3},
        "uniqueItems": True,
    },
]
BOUNDED_SPELLINGS = ["0", "1", "0.5", "1.0", "0.50", "-0", "0.0", "1.00", "2", "-0.5", "-0.50",
                     "0.25", "2.5", "2.50", "2.75", "-1", "-0.999"]  # fmt: skip


@pytest.mark.parametrize("schema", BOUNDED, ids=["closed", "half-open", "fraction-bounds"])
def test_unique_bounded_numbers_compare_by_value(schema: dict[str, object]) -> None:
    agree_on_random_arrays(schema, BOUNDED_SPELLINGS, seed=5, arrays=500)


@pytest.mark.parametrize(
    ("schema", "prefix", "refused", "allowed"),
    [
        # 1 is held and `1` (then `1.`, `1.0`, ...) under maximum 1 has no other value
        (0, "[1,", "1", "0"),
        # `-` under minimum 0 spells only zero (`-0`, `-0.0`, ...)
        (0, "[0,", "-", "1"),
        (0, "[0.5,1.00,0.", "", "5"),
        # `0` under maximum 0 is zero whatever follows; `-0` can still go on to `-0.5`
        (1, "[0,", "0", "-"),
        (1, "[-0.0,-", "", "0"),
    ],
)
def test_a_bounded_prefix_whose_one_value_is_held_is_refused(
    schema: int, prefix: str, refused: str, allowed: str
) -> None:
    vocab = byte_vocabulary()
    g = ts.Grammar.from_json_schema(BOUNDED[schema], vocab)
    m = g.matcher()
    for b in prefix.encode():
        assert m.accept_token(b), prefix
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    _, ids = next_mask(m, bm, vocab.vocab_size)
    for c in refused.encode():
        assert c not in ids, (prefix, chr(c))
    for c in allowed.encode():
        assert c in ids, (prefix, chr(c))


def test_unique_numbers_never_reach_a_dead_end() -> None:
    """Random walks through the masks of bounded unique arrays: a mask is never empty before
    the output can end, and every finished output is valid."""
    vocab = byte_vocabulary()
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    r = random.Random(9)
    eos = vocab.eos_token_ids[0]
    favoured = set(b"0123456789.,]-[")
    for schema in BOUNDED:
        g = ts.Grammar.from_json_schema(schema, vocab)
        validator = jsonschema.Draft202012Validator(schema)
        finished = 0
        for _ in range(150):
            m = g.matcher()
            out = b""
            for _ in range(60):
                _, ids = next_mask(m, bm, vocab.vocab_size)
                assert len(ids) > 0, out
                if eos in ids and r.random() < 0.3:
                    break
                spelled = [int(i) for i in ids if int(i) != eos]
                if not spelled:
                    break
                tok = r.choice([i for i in spelled if i in favoured] or spelled)
                assert m.accept_token(tok)
                out += bytes([tok])
            else:
                continue
            if m.is_accepting():
                finished += 1
                assert validator.is_valid(json.loads(out, parse_float=Decimal)), out
        assert finished > 100, finished


def test_numbers_bounded_to_one_value_stay_refused_by_name() -> None:
    # minimum equal to maximum: every prefix has one value, counted nowhere: refused
    items = {"type": "number", "minimum": 1, "maximum": 1.0}
    schema = {"type": "array", "items": items, "uniqueItems": True}
    with pytest.raises(ts.SchemaError, match="uniqueItems"):
        ts.Grammar.from_json_schema(schema, byte_vocabulary())
