"""The one constraint model: kinds, normalization, the cache key, and module boundaries."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tokensieve as ts
from tokensieve.constraints import KINDS, Constraint, GrammarCache, compile_constraint


def byte_vocab() -> ts.Vocabulary:
    return ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<eos>"], eos_token_ids=[256])


CASES = [
    ("regex", "[ab]+", {}),
    ("json_schema", {"type": "integer", "maximum": 9}, {"whitespace": "compact"}),
    ("choice", ["yes", "no"], {}),
    ("json_object", None, {"max_nesting_depth": 2}),
]


@pytest.mark.parametrize(("kind", "value", "options"), CASES)
def test_key_is_the_core_source_hash(kind: str, value: object, options: dict[str, object]) -> None:
    c = Constraint.make(kind, value, options)
    g = c.compile(byte_vocab())
    assert g.constraint_kind == kind
    assert c.key.split(":")[0] == g.source_hash
    # engine options do not change the language but do change the cache key
    assert Constraint.make(kind, value, {**options, "max_states": 5000}).key != c.key


def test_kinds_values_and_labels() -> None:
    assert KINDS == ("regex", "json_schema", "choice", "json_object")
    a = Constraint.make("json_schema", '{"type": "string"}', label="guided_json")
    b = Constraint.make("json_schema", {"type": "string"})
    assert a == b and a.key == b.key  # the label only names it in messages
    with pytest.raises(ValueError, match="guided_json is not valid JSON"):
        Constraint.make("json_schema", "{", label="guided_json")
    with pytest.raises(ValueError, match="unknown constraint kind 'json'"):
        Constraint.make("json", {})
    with pytest.raises(ValueError, match="unsupported option"):
        Constraint.make("regex", "a", {"no_such": 1})
    with pytest.raises(ValueError, match="apply to JSON constraints only"):
        Constraint.make("regex", "a", {"whitespace": "compact"})
    with pytest.raises(ValueError, match="non-empty list"):
        Constraint.make("choice", [])
    g = compile_constraint("choice", ("a", "b"), byte_vocab())
    m = g.matcher()
    assert m.accept_tokens(list(b"b")) == 1 and m.is_accepting()


def test_cache_memoizes_grammars_and_errors() -> None:
    cache, v = GrammarCache(maxsize=2), byte_vocab()
    c = Constraint.make("regex", "a+")
    assert cache.get(c, v) is cache.get(Constraint.make("regex", "a+"), v)
    bad = Constraint.make("regex", "a(?=b)", label="guided_regex")
    for _ in range(2):
        with pytest.raises(ValueError, match="invalid guided_regex: RegexError"):
            cache.get(bad, v)
    assert cache.hits == 2 and cache.misses == 2


def test_transformers_adapter_imports_no_vllm_code() -> None:
    code = (
        "import sys, tokensieve.transformers; "
        "print(sorted(m for m in sys.modules if m.startswith(('tokensieve.vllm', 'vllm'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
