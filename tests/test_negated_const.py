"""`not` of a `const` (or an `enum` with one array and one object) holding arrays and objects,
against `jsonschema`: any value but the listed one, nested values compared the same way (`1` and
`1.0` are equal).

Random values nested two levels; the candidates are the value itself and its mutations (a leaf
changed, a key dropped or added at the end, an item dropped or added, `1` spelled `1.0`),
plus values of other types, fed byte by byte through a one-token-per-byte vocabulary with each
mask bit checked against `accept_token`, in both property orders (keys stay in the listed order,
which schema order keeps)."""

from __future__ import annotations

import copy
import json
import random
from functools import partial
from typing import Any

import pytest
from feed import Lookup, agree

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = 60
LEAVES: list[Any] = [1, 2, "a", None, True]


def _value(r: random.Random, depth: int = 0) -> Any:
    if depth >= 2 or r.random() < 0.3:
        return r.choice(LEAVES)
    if r.random() < 0.5:
        return [_value(r, depth + 1) for _ in range(r.randint(0, 3))]
    keys = r.sample(["a", "b", "c"], r.randint(0, 3))
    return {k: _value(r, depth + 1) for k in keys}


def _mutations(r: random.Random, v: Any) -> list[Any]:
    """Values near `v`: one change each, somewhere inside it."""
    out: list[Any] = []
    if isinstance(v, list):
        out += [v[:-1], [*v, 1], [*v[:-1], *v[-1:]]]
        for i, x in enumerate(v):
            for m in _mutations(r, x)[:3]:
                w = copy.deepcopy(v)
                w[i] = m
                out.append(w)
    elif isinstance(v, dict):
        out.append({**v, "z": 1})
        for k, x in v.items():
            out.append({q: y for q, y in v.items() if q != k})
            for m in _mutations(r, x)[:3]:
                out.append({q: (m if q == k else y) for q, y in v.items()})
    else:
        out += [r.choice(LEAVES), [v], {"a": v}]
        if v == 1:
            out.append(1.0)
    return out


def _text(v: Any, shuffle: random.Random | None = None) -> str:
    if isinstance(v, dict):
        items = list(v.items())
        if shuffle:
            shuffle.shuffle(items)
        return "{" + ", ".join(f"{json.dumps(k)}: {_text(x, shuffle)}" for k, x in items) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_text(x, shuffle) for x in v) + "]"
    return json.dumps(v)


@pytest.mark.parametrize("order", ["schema", "any"])
def test_negated_compound_const_agrees_with_jsonschema(
    order: str, byte_vocab: ts.Vocabulary, byte_lookup: Lookup
) -> None:
    r = random.Random(f"negated-const-{order}")
    checked = {True: 0, False: 0}
    for _ in range(SCHEMAS):
        v = _value(r)
        while not isinstance(v, (list, dict)):
            v = _value(r)
        listed: dict[str, Any] = (
            {"const": v} if r.random() < 0.7 else {"enum": [v, r.choice(LEAVES)]}
        )
        schema: dict[str, Any] = {"not": listed}
        if r.random() < 0.3:
            schema = {"type": "array", "items": schema}
        check = jsonschema.Draft202012Validator(schema)
        g = ts.Grammar.from_json_schema(schema, byte_vocab, property_order=order)
        cands = [v, *_mutations(r, v), 1, "a", None]
        if "items" in schema:
            cands = [[c] for c in cands] + [[v, 1], []]
        write = partial(_text, shuffle=r if order == "any" else None)
        agree(g, check.is_valid, cands, byte_lookup, checked, write, json.dumps(schema))
    assert checked[True] > 300 and checked[False] > 60, checked


def _array(r: random.Random, depth: int = 0) -> Any:
    """A random array nested up to two levels (no objects: their key order is not at stake)."""
    if depth >= 2 or r.random() < 0.3:
        return r.choice(LEAVES)
    return [_array(r, depth + 1) for _ in range(r.randint(0, 3))]


@pytest.mark.parametrize("order", ["schema", "any"])
def test_negated_enum_of_several_compound_values(
    order: str, byte_vocab: ts.Vocabulary, byte_lookup: Lookup
) -> None:
    """`not` of an `enum` listing several arrays or several objects (with scalars beside them):
    none of them. In schema order the values are arrays (an object's alternatives declare its
    names in their order, and several objects' orders need not agree); in any order, anything."""
    r = random.Random(f"negated-enum-{order}")
    checked = {True: 0, False: 0}
    for _ in range(SCHEMAS):
        gen = _array if order == "schema" else _value
        listed: list[Any] = []
        while len(listed) < r.randint(2, 3):
            v = gen(r)
            if isinstance(v, (list, dict)):
                listed.append(v)
        if r.random() < 0.4:
            listed.append(r.choice(LEAVES))
        r.shuffle(listed)
        schema: dict[str, Any] = {"not": {"enum": listed}}
        if r.random() < 0.3:
            schema = {"type": "array", "items": schema}
        check = jsonschema.Draft202012Validator(schema)
        g = ts.Grammar.from_json_schema(schema, byte_vocab, property_order=order)
        cands: list[Any] = [1, "a", None, [], {}]
        for v in listed:
            cands += [v, *_mutations(r, v)]
        if "items" in schema:
            cands = [[c] for c in cands] + [[listed[0], 1], []]
        write = partial(_text, shuffle=r if order == "any" else None)
        agree(g, check.is_valid, cands, byte_lookup, checked, write, json.dumps(schema))
    assert checked[True] > 300 and checked[False] > 100, checked
