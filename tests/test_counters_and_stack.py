"""Counters and the stack through the public API: long bounded strings and deeply nested
unconstrained values, checked token by token (mask bit and `accept_token` must agree) and, for
generated outputs, with `jsonschema`."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from feed import Lookup, accepts, next_mask

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")


def nesting(v: object) -> int:
    """Levels of arrays/objects in a parsed value."""
    if isinstance(v, list):
        return 1 + max((nesting(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((nesting(x) for x in v.values()), default=0)
    return 0


def test_long_strings_are_exact_at_their_bounds(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    for n in [1_000, 65_535]:
        g = ts.Grammar.from_json_schema(
            {"type": "string", "minLength": n - 3, "maxLength": n}, vocab
        )
        for k in [n - 4, n - 3, n, n + 1]:
            assert accepts(g, json.dumps("ab" * (k // 2) + "c" * (k % 2)), lookup) == (
                n - 3 <= k <= n
            ), (n, k)
    # bounds past 32 bits act as 2**32 - 1 (docs/limits.md): nothing realistic reaches them
    g = ts.Grammar.from_json_schema({"type": "string", "maxLength": 10**30}, vocab)
    assert accepts(g, json.dumps("x" * 5000), lookup)


def test_any_json_nests_to_max_nesting_depth(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_json_schema({}, vocab, max_nesting_depth=20)
    deep = "[" * 10 + '{"a": ' * 10 + "1" + "}" * 10 + "]" * 10
    assert accepts(g, deep, lookup)
    assert not accepts(g, "[" + deep + "]", lookup)
    g = ts.Grammar.from_json_schema({"type": "object"}, vocab)
    # the default (64): values nest 64 levels below the object
    assert accepts(g, '{"a": ' + "[" * 64 + "null" + "]" * 64 + "}", lookup)
    assert not accepts(g, '{"a": ' + "[" * 65 + "null" + "]" * 65 + "}", lookup)


def test_random_walks_into_deep_values_validate(vocab: ts.Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 40}, "data": {}},
        "required": ["name", "data"],
        "additionalProperties": False,
    }
    g = ts.Grammar.from_json_schema(schema, vocab, max_nesting_depth=20)
    validator = jsonschema.Draft202012Validator(schema)
    spell = {i: vocab.token_bytes(i) or b"" for i in range(vocab.vocab_size)}
    opens = np.array([i for i, b in spell.items() if b in (b"[", b"{")])
    # once deep enough, close things: these first (then anything, now and then)
    closers = [
        i for p in (b'"', b"}", b"]", b"1", b"null", b":", b",") for i, b in spell.items() if b == p
    ]
    keys = [i for p in (b'"', b":") for i, b in spell.items() if b == p]
    eos = set(vocab.eos_token_ids)
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    rng = random.Random(7)
    deepest = finished = 0
    for _ in range(6):
        m = g.matcher()
        out = b""
        for step in range(600):
            bits, ids = next_mask(m, bm, vocab.vocab_size)
            assert len(ids) > 0, f"empty mask after {out[-80:]!r}"
            ends = [t for t in eos if t < vocab.vocab_size and bits[t]]
            if ends:
                assert m.accept_token(ends[0])
                break
            openers = np.intersect1d(ids, opens)
            if step < 60 and len(openers) and rng.random() < 0.8:
                tok = int(rng.choice(openers.tolist()))
            elif rng.random() < 0.85:
                # opening: get through keys to the next value; then close everything
                order = keys if step < 60 else closers
                tok = next((c for c in order if bits[c]), int(ids[rng.randrange(len(ids))]))
            else:
                tok = int(ids[rng.randrange(len(ids))])
            assert m.accept_token(tok)
            out += spell[tok]
        if not m.is_finished():
            continue  # a walk that did not finish in 600 tokens is not judged
        finished += 1
        value = json.loads(out.decode())
        assert validator.is_valid(value), out
        deepest = max(deepest, nesting(value))
    assert finished >= 3, f"only {finished} of 6 walks finished"
    # the old default allowed 3 levels below the root object: 4 in all
    assert deepest > 4, f"the walks never nested past the old bound (deepest {deepest})"


TREE = {
    "type": "object",
    "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
    "required": ["value"],
    "additionalProperties": False,
}
LIST = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "string", "maxLength": 8},
                "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]},
            },
            "required": ["v", "next"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
COMMENTS = {
    "type": "object",
    "properties": {"comments": {"type": "array", "items": {"$ref": "#/$defs/c"}}},
    "required": ["comments"],
    "$defs": {
        "c": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "replies": {"type": "array", "items": {"$ref": "#/$defs/c"}},
            },
            "required": ["text"],
        }
    },
}
META = {
    "$defs": {
        "s": {
            "type": "object",
            "properties": {
                "type": {"enum": ["string", "object", "array"]},
                "properties": {"type": "object", "additionalProperties": {"$ref": "#/$defs/s"}},
                "items": {"$ref": "#/$defs/s"},
            },
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/s",
}


def deep_instances(d: int) -> dict[str, tuple[dict, object]]:
    """An instance of each recursive schema with `d` levels of recursion."""
    tree: object = {"value": 0}
    lst: object = {"v": "end", "next": None}
    com: object = {"text": "leaf"}
    meta: object = {"type": "string"}
    for i in range(1, d):
        tree = {"value": i, "children": [{"value": -i}, tree]}
        lst = {"v": str(i), "next": lst}
        com = {"text": f"re {i}", "replies": [com], "by": {"x": [1]}}
        meta = (
            {"type": "object", "properties": {"a": {"type": "string"}, "b": meta}}
            if i % 2
            else {"items": meta}
        )
    return {
        "tree": (TREE, tree),
        "list": (LIST, lst),
        "comments": (COMMENTS, {"comments": [com]}),
        "meta": (META, meta),
    }


def test_recursive_refs_at_depth_10_and_50(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    for d in [10, 50]:
        for name, (schema, inst) in deep_instances(d).items():
            assert jsonschema.Draft202012Validator(schema).is_valid(inst), name
            g = ts.Grammar.from_json_schema(schema, vocab)
            assert accepts(g, json.dumps(inst), lookup), (name, d)
    # the bound: at most max_stack_depth calls open (the root's own schema is one)
    for name, (schema, inst) in deep_instances(21).items():
        assert accepts(
            ts.Grammar.from_json_schema(schema, vocab, max_stack_depth=21), json.dumps(inst), lookup
        )
        g = ts.Grammar.from_json_schema(schema, vocab, max_stack_depth=20)
        assert not accepts(g, json.dumps(inst), lookup), name


def test_endless_recursion_is_a_schema_error(vocab: ts.Vocabulary) -> None:
    endless = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
    with pytest.raises(ts.SchemaError, match="max_stack_depth=128") as e:
        ts.Grammar.from_json_schema(endless, vocab)
    assert e.value.keyword == "$ref"
    # beside a way out, the endless branch is simply never offered
    defs = {"e": {"type": "object", "properties": {"a": {"$ref": "#/$defs/e"}}, "required": ["a"]}}
    either = {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/e"}], "$defs": defs}
    g = ts.Grammar.from_json_schema(either, vocab)
    m = g.matcher()
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    _, ids = next_mask(m, bm, vocab.vocab_size)
    allowed = {vocab.token_bytes(int(i)) for i in ids}
    assert allowed and all(b"null".startswith(b) for b in allowed if b), sorted(allowed)[:10]


def test_random_walks_into_recursive_schemas_validate(vocab: ts.Vocabulary) -> None:
    spell = {i: vocab.token_bytes(i) or b"" for i in range(vocab.vocab_size)}
    pref = lambda ps: [i for p in ps for i, b in spell.items() if b == p]  # noqa: E731
    deepen = pref((b'"', b"{", b"[", b",", b'":', b":"))
    close = pref((b'"', b"}", b"]", b"1", b"null", b'"string"', b":", b","))
    eos = set(vocab.eos_token_ids)
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    rng = random.Random(11)
    # comments without other members: a random key would rarely spell "replies"
    closed = {**COMMENTS, "$defs": {"c": {**COMMENTS["$defs"]["c"], "additionalProperties": False}}}
    for name, schema in [("tree", TREE), ("list", LIST), ("comments", closed), ("meta", META)]:
        g = ts.Grammar.from_json_schema(schema, vocab)
        validator = jsonschema.Draft202012Validator(schema)
        deepest = finished = 0
        for _ in range(4):
            m = g.matcher()
            out = b""
            for step in range(900):
                bits, ids = next_mask(m, bm, vocab.vocab_size)
                assert len(ids) > 0, f"{name}: empty mask after {out[-80:]!r}"
                ends = [t for t in eos if t < vocab.vocab_size and bits[t]]
                if ends and step >= 300:
                    assert m.accept_token(ends[0])
                    break
                order = deepen if step < 300 else close
                if rng.random() < 0.85:
                    tok = next((c for c in order if bits[c]), int(ids[rng.randrange(len(ids))]))
                else:
                    tok = int(ids[rng.randrange(len(ids))])
                assert m.accept_token(tok)
                out += spell[tok]
            if not m.is_finished():
                continue
            finished += 1
            value = json.loads(out.decode())
            assert validator.is_valid(value), (name, out)
            deepest = max(deepest, nesting(value))
        assert finished >= 2, f"{name}: only {finished} of 4 walks finished"
        # unrolled three times (the old default), none of these nested past 8 levels
        assert deepest > 12, f"{name}: the walks never nested deep (deepest {deepest})"
