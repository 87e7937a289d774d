"""The one constraint model: kinds, normalization, the cache key, and module boundaries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import tokensieve as ts
from tokensieve import _core, constraints
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
    assert a.key == b.key  # text or object: one key; the label only names it in messages
    assert a.value == '{"type": "string"}'  # text stays text: its numbers are read exactly
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


def _stub_keywords(cls: str, method: str) -> list[str]:
    """Keyword-only parameter names of ``cls.method`` in ``_core.pyi``."""
    stub = Path(ts.__file__).parent / "_core.pyi"
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == method:
                    return [a.arg for a in f.args.kwonlyargs]
    raise AssertionError(f"{cls}.{method} is not in the stub")


def test_option_names_live_in_the_core() -> None:
    """The stub's keyword arguments, the constraint model and the core agree on option names
    (the core's ``CompileOptions::set`` is the one reader; stubtest checks the other
    signatures against the module)."""
    engine, schema = list(_core.GRAMMAR_OPTIONS), list(_core.SCHEMA_OPTIONS)
    assert constraints.ENGINE_OPTIONS == tuple(engine)
    assert constraints.SCHEMA_OPTIONS == tuple(schema)
    assert sorted(_stub_keywords("Grammar", "from_json_schema")) == sorted(engine + schema)
    assert _stub_keywords("Grammar", "from_regex") == engine
    assert _stub_keywords("Grammar", "from_choice") == engine
    assert set(_stub_keywords("Grammar", "from_json_object")) <= set(engine + schema)
    vocab = ts.Vocabulary([b"a", b""], [1])
    for name in engine + schema:
        with pytest.raises(ValueError, match=name):
            ts.Grammar.from_json_schema({}, vocab, **{name: "not a value {"})
    with pytest.raises(ValueError, match='unknown option "nope"; options are max_states'):
        ts.Grammar.from_json_object(vocab, nope=1)


def test_bindings_never_import_the_python_package() -> None:
    """The extension sits below the package: no ``py.import("tokensieve...")`` in its sources."""
    src = Path(__file__).resolve().parents[1] / "rust" / "tokensieve-py" / "src"
    files = sorted(src.glob("*.rs"))
    assert files, f"no binding sources under {src}"
    offenders = [
        f"{f.name}:{n}"
        for f in files
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if 'import("tokensieve' in line.replace(" ", "")
    ]
    assert not offenders, f"the bindings import the Python package at {offenders}"


def test_schema_text_keeps_its_numbers_exact() -> None:
    # as text, a bound Python would round (to 0.1) or overflow (to inf) reaches the compiler
    vocab = byte_vocab()
    lo = "0.1000000000000000000001"
    c = Constraint.make("json_schema", '{"type": "number", "minimum": ' + lo + "}")
    m = c.compile(vocab).matcher()
    assert m.accept_tokens(list(b"0.1")) == 3 and not m.is_accepting()
    m = c.compile(vocab).matcher()
    assert m.accept_tokens(list(b"0.1000000000000000000002")) == 24 and m.is_accepting()
    with pytest.raises(ts.SchemaError, match="exponent"):
        Constraint.make("json_schema", '{"maximum": 1e100000}').compile(vocab)


def test_pending_compiles_run_without_the_gil() -> None:
    """``compile_pending`` returns at once and compiles on a thread that never needs the GIL:
    it finishes while this thread keeps the GIL in a busy loop (switch interval raised, so no
    Python thread could run meanwhile)."""
    import time

    vocab = ts.Vocabulary([bytes([b]) for b in range(256)] + [b"<eos>"], eos_token_ids=[256])
    c = constraints.Constraint.make("json_schema", {"type": "string", "maxLength": 3000})
    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        pending = c.compile_pending(vocab)
        deadline = time.perf_counter() + 20
        while not pending.done() and time.perf_counter() < deadline:
            pass
        finished = pending.done()
    finally:
        sys.setswitchinterval(old)
    assert finished
    g = pending.result()
    assert g.matcher().accept_tokens(list(b'"ab"')) == 4
    # errors come from result(); input errors at once
    bad = constraints.Constraint.make("regex", "[ab]{1,200}[ab]{1,200}", {"max_nfa_bytes": 100})
    with pytest.raises(ts.BudgetError):
        bad.compile_pending(vocab).result()
    with pytest.raises(ValueError, match="unknown constraint kind"):
        ts.Grammar.compile_pending("nope", "x", vocab)
    # the cache's pending compile caches what it got, grammar or message
    cache = constraints.GrammarCache()
    p = cache.get_pending(c, vocab)
    assert p.result() is cache.get(c, vocab)
    with pytest.raises(ValueError, match="max_nfa_bytes"):
        cache.get_pending(bad, vocab).result()
    with pytest.raises(ValueError, match="max_nfa_bytes"):
        cache.get(bad, vocab)
