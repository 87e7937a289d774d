"""`property_order="any"`: an object's declared properties in any order, each at most once; and
`minProperties`/`maxProperties` in general (a count kept beside the members), in either order.

* Random object schemas (2–4 declared properties, random `required`, `additionalProperties`
  false / true / a schema, sometimes a `patternProperties` key, sometimes a nested object) against
  `jsonschema`: every order of every subset of the declared keys, with 0–2 undeclared keys at
  every position, a declared key twice, and wrong values, fed byte by byte through a
  one-token-per-byte vocabulary (each mask bit checked against `accept_token`). The grammar
  must accept exactly the texts `jsonschema` finds valid.
* Masks are exact: at every prefix of those texts, every byte the mask allows can still be
  completed to an accepted text (checked by a bounded search), so no token leads into a dead end.
* The same with random `minProperties`/`maxProperties`, in schema order (texts in schema order,
  extras after) and in any order.
* The dev set (a seeded sample, `../shared/`): compiled with `property_order="any"`, every test
  instance with its keys in the dev set's order and reversed at every level; no text that
  `jsonschema` finds invalid may be accepted, and every reordered instance that is accepted in
  schema order must be accepted in reversed order too.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
from typing import Any

import numpy as np
import pytest
from feed import Lookup, accepts, token_lookup

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

SEED = 20261126
SCHEMAS = 60
VALUES = [1, "s", None, True]


def _random_schema(rng: random.Random, counts: bool = False) -> dict[str, Any]:
    names = ["a", "b", "c", "d"][: rng.randint(2, 4)]
    props: dict[str, Any] = {}
    for n in names:
        props[n] = rng.choice(
            [
                {"type": "integer"},
                {"type": "string"},
                {"enum": [1, None]},
                {},
                {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}, "y": {"type": "string"}},
                    "required": ["y"],
                    "additionalProperties": False,
                },
            ]
        )
    schema: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": [n for n in names if rng.random() < 0.5],
        "additionalProperties": rng.choice([False, True, {"type": "integer"}]),
    }
    if rng.random() < 0.3:
        schema["patternProperties"] = {"^x": {"type": "string"}}
    if counts:
        lo = rng.randint(0, 4)
        schema["minProperties"] = lo
        if rng.random() < 0.7:
            schema["maxProperties"] = lo + rng.randint(0, 3)
    return schema


def _value_for(sub: dict[str, Any], rng: random.Random, ordered: bool = False) -> Any:
    if sub.get("type") == "object":
        if ordered:
            return rng.choice([{"x": 1, "y": "q"}, {"y": "q"}, {"x": 1}])
        return rng.choice([{"y": "q", "x": 1}, {"x": 1, "y": "q"}, {"y": "q"}, {"x": 1}])
    return rng.choice(VALUES)


def _texts(schema: dict[str, Any], rng: random.Random, ordered: bool = False) -> list[str]:
    names = list(schema["properties"])
    out: set[str] = set()
    for k in range(len(names) + 1):
        for subset in itertools.combinations(names, k):
            for extra in ([], ["z"], ["xq", "z"]):
                members = [(n, _value_for(schema["properties"][n], rng, ordered)) for n in subset]
                members += [(e, rng.choice(VALUES)) for e in extra]
                perms = [tuple(members)] if ordered else list(itertools.permutations(members))
                rng.shuffle(perms)
                for p in perms[:12]:
                    body = ", ".join(f"{json.dumps(key)}: {json.dumps(v)}" for key, v in p)
                    out.add("{" + body + "}")
                    if p and p[0][0] in names:
                        # a declared key written twice
                        out.add("{" + body + ", " + json.dumps(p[0][0]) + ": 1}")
    return sorted(out)


def _agrees(g: ts.Grammar, v: Any, schema: Any, texts: list[str], lookup: Lookup) -> int:
    """Assert that `g` accepts exactly the texts validator `v` finds valid (a text with a key
    twice is invalid JSON for the grammar, whatever `json.loads` keeps); the number accepted."""
    accepted = 0
    for text in texts:
        pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
        dup = len({k for k, _ in pairs}) != len(pairs)
        want = not dup and v.is_valid(json.loads(text))
        got = accepts(g, text, lookup)
        assert got == want, f"{json.dumps(schema)} on {text}: got {got}, want {want}"
        accepted += got
    return accepted


def test_random_objects_match_jsonschema(byte_vocab: ts.Vocabulary, byte_lookup: Lookup) -> None:
    rng = random.Random(SEED)
    checked = accepted = 0
    for _ in range(SCHEMAS):
        schema = _random_schema(rng)
        g = ts.Grammar.from_json_schema(schema, byte_vocab, property_order="any")
        v = jsonschema.Draft202012Validator(schema)
        texts = _texts(schema, rng)
        checked += len(texts)
        accepted += _agrees(g, v, schema, texts, byte_lookup)
    assert checked > 3000 and accepted > 300, (checked, accepted)


@pytest.mark.parametrize("order", ["schema", "any"])
def test_random_member_counts_match_jsonschema(
    order: str, byte_vocab: ts.Vocabulary, byte_lookup: Lookup
) -> None:
    rng = random.Random(SEED + (order == "any"))
    checked = accepted = unsatisfiable = 0
    for _ in range(SCHEMAS):
        schema = _random_schema(rng, counts=True)
        v = jsonschema.Draft202012Validator(schema)
        texts = _texts(schema, rng, ordered=order == "schema")
        try:
            g = ts.Grammar.from_json_schema(schema, byte_vocab, property_order=order)
        except ts.SchemaError as e:
            # only a schema no object satisfies may be refused
            assert "no JSON value" in str(e), (schema, e)
            unsatisfiable += 1
            assert not any(v.is_valid(json.loads(t)) for t in texts), schema
            continue
        checked += len(texts)
        accepted += _agrees(g, v, schema, texts, byte_lookup)
    assert checked > 1000 and accepted > 50, (checked, accepted, unsatisfiable)


def test_allowed_bytes_can_finish(byte_vocab: ts.Vocabulary) -> None:
    """After a declared property, each allowed byte leads on to an accepted text (the mask
    never offers a separator when no member can follow, nor a key already written)."""
    schema = {
        "type": "object",
        "properties": {"a": {"const": True}, "b": {"const": False}},
        "required": ["a"],
        "additionalProperties": False,
    }
    g = ts.Grammar.from_json_schema(schema, byte_vocab, property_order="any")
    bm = ts.allocate_token_bitmask(1, byte_vocab.vocab_size)
    for prefix, allowed in [
        ('{"b": false', b","),  # a is still required: only the separator
        ('{"a": true, "b": false', b"}"),  # both written: only the end
        ('{"b": false, "', b"a"),  # b was written: only a's key
        ('{"a": true', b",}"),
    ]:
        m = g.matcher()
        for b in prefix.encode():
            assert m.accept_token(b), prefix
        m.fill_next_token_bitmask(bm)
        bits = np.unpackbits(np.asarray(bm)[0].view(np.uint8), bitorder="little")[:256]
        assert bytes(np.nonzero(bits)[0].tolist()) == allowed, prefix


def test_schema_order_stays_the_default(byte_vocab: ts.Vocabulary, byte_lookup: Lookup) -> None:
    schema = {"properties": {"a": {}, "b": {}}, "additionalProperties": False}
    assert not accepts(
        ts.Grammar.from_json_schema(schema, byte_vocab), '{"b": 1, "a": 2}', byte_lookup
    )
    g = ts.Grammar.from_json_schema(schema, byte_vocab, property_order="any")
    assert accepts(g, '{"b": 1, "a": 2}', byte_lookup)
    with pytest.raises(ValueError, match="property_order"):
        ts.Grammar.from_json_schema(schema, byte_vocab, property_order="sorted")
    # maxProperties counting undeclared properties, in any order
    g2 = ts.Grammar.from_json_schema(
        {"properties": {"a": {}}, "maxProperties": 2}, byte_vocab, property_order="any"
    )
    assert accepts(g2, '{"z": 1, "a": 2}', byte_lookup) and not accepts(
        g2, '{"z": 1, "a": 2, "y": 3}', byte_lookup
    )
    # the option is part of the constraint's identity only when set
    h0 = ts._core.constraint_hash("json_schema", schema)
    h1 = ts._core.constraint_hash("json_schema", schema, property_order="any")
    assert h0 != h1 and h1 == g.source_hash
    assert ts._core.constraint_hash("json_schema", schema, property_order="schema") == h0


def _reverse_keys(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _reverse_keys(x[k]) for k in reversed(list(x))}
    if isinstance(x, list):
        return [_reverse_keys(v) for v in x]
    return x


def test_dev_sample_reordered_instances(shared_dir: Any) -> None:
    """A seeded sample of the dev set with `property_order="any"`: no invalid text accepted,
    and reversing an instance's keys never loses it."""
    import test_dev_schemas as dev

    tokenizers = pytest.importorskip("tokenizers")
    del tokenizers
    vocab = ts.Vocabulary.from_pretrained(dev.TOKENIZER_DIR)
    lookup = token_lookup(vocab)
    lines = set(random.Random(SEED).sample(range(dev.DEV_LINES), 250))
    counts = {"compiled": 0, "texts": 0, "kept": 0, "gained": 0}
    with gzip.open(dev.DEV_SET, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i not in lines:
                continue
            row = json.loads(line)
            try:
                g_any = ts.Grammar.from_json_schema(
                    row["schema"], vocab, property_order="any", max_compile_seconds=10.0
                )
                g_schema = ts.Grammar.from_json_schema(
                    row["schema"], vocab, max_compile_seconds=10.0
                )
            except (ts.SchemaError, ts.BudgetError, ValueError):
                continue
            counts["compiled"] += 1
            check = dev.validator(row["schema"])
            for t in row["tests"]:
                for data in (t["data"], _reverse_keys(t["data"])):
                    text = json.dumps(data)
                    counts["texts"] += 1
                    got = accepts(g_any, text, lookup)
                    if got:
                        assert check.is_valid(data), (
                            f"{row.get('id')}: accepted invalid {text[:300]}"
                        )
                    if accepts(g_schema, text, lookup):
                        assert got, f"{row.get('id')}: schema order accepts, any order not"
                        counts["kept"] += 1
                    elif got:
                        counts["gained"] += 1
    print(counts)
    assert counts["compiled"] > 200 and counts["gained"] > 0, counts


def test_every_entry_point_takes_the_option(
    byte_vocab: ts.Vocabulary,
    byte_lookup: Lookup,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tokensieve import cli
    from tokensieve.constraints import compile_constraint
    from tokensieve.vllm.constraints import constraint_from_extra_args

    schema = {"properties": {"a": {"const": 1}, "b": {"const": 2}}, "additionalProperties": False}
    text = '{"b": 2, "a": 1}'
    # the constraint layer (transformers adapter, caches)
    assert accepts(
        compile_constraint("json_schema", schema, byte_vocab, property_order="any"),
        text,
        byte_lookup,
    )
    assert not accepts(compile_constraint("json_schema", schema, byte_vocab), text, byte_lookup)
    # a vLLM request's guided_* keys (the logits processor and the scheduler backend)
    c = constraint_from_extra_args({"guided_json": schema, "guided_property_order": "any"})
    assert c is not None and accepts(c.compile(byte_vocab), text, byte_lookup)
    with pytest.raises(ValueError, match="property_order"):
        bad = constraint_from_extra_args({"guided_json": schema, "guided_property_order": "x"})
        assert bad is not None
        bad.compile(byte_vocab)
    # the CLI: the index file keeps the option and answers like the grammar
    (tmp_path / "s.json").write_text(json.dumps(schema))
    doc = {"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": None}
    vocab = {ch: i for i, ch in enumerate('{}":, ab12</s>')}
    vocab["</s>"] = len(vocab)
    doc["model"]["vocab"] = vocab
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    out = tmp_path / "s.tsidx"
    code = cli.main(
        [
            "compile",
            "--json-schema",
            str(tmp_path / "s.json"),
            "--tokenizer",
            str(tmp_path / "tokenizer.json"),
            "--property-order",
            "any",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr()
    header = ts._core.read_index_header(str(out))
    assert json.loads(header["options"])["property_order"] == "any", header
    tv = ts.Vocabulary.from_pretrained(str(tmp_path / "tokenizer.json"))
    g = ts.Grammar.load(str(out), tv)
    m = g.matcher()
    ids = [vocab[ch] for ch in text.replace(" ", "")]
    assert all(m.accept_token(i) for i in ids) and m.is_accepting()
