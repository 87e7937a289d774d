"""The one constraint model: kinds, normalization, the cache key, and module boundaries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from feed import byte_vocabulary

import tokensieve as ts
from tokensieve import _core, constraints
from tokensieve.constraints import KINDS, Constraint, GrammarCache, compile_constraint


def byte_vocab() -> ts.Vocabulary:
    return byte_vocabulary()


CASES = [
    ("regex", "[ab]+", {}),
    ("json_schema", {"type": "integer", "maximum": 9}, {"whitespace": "compact"}),
    ("choice", ["yes", "no"], {}),
    ("json_object", None, {"max_nesting_depth": 2}),
    ("ebnf", 'top ::= "(" top ")" | "x"\nroot ::= "y"', {"start": "top"}),
    ("lark", 'top: "(" top ")" | X\nX: /x+/\nstart: "y"\n%ignore " "', {"start": "top"}),
    (
        "structural_tag",
        {
            "format": {
                "type": "tag",
                "begin": "<a>",
                "content": {"type": "json_schema", "json_schema": {"type": "integer"}},
                "end": "</a>",
            }
        },
        {"whitespace": "compact"},
    ),
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
    assert KINDS == (
        "regex", "json_schema", "choice", "json_object", "ebnf", "lark", "structural_tag"
    )  # fmt: skip
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


def test_requests_for_one_constraint_share_its_running_compile() -> None:
    """A burst of requests for one constraint compiles it once: a request that finds its compile
    running waits for that one (from any number of threads), then every request gets the cached
    grammar or the cached message."""
    import threading

    cache, v = GrammarCache(), byte_vocab()
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(40)}}
    pendings = [cache.get_pending(Constraint.make("json_schema", schema), v) for _ in range(8)]
    results: list[object] = []
    threads = [threading.Thread(target=lambda p=p: results.append(p.result())) for p in pendings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and cache.misses == 1
    assert cache.get(Constraint.make("json_schema", schema), v) is results[0]
    assert all(r is results[0] for r in results)
    bad = Constraint.make("regex", "[ab]{1,200}[ab]{1,200}", {"max_nfa_bytes": 100})
    failing = [cache.get_pending(bad, v) for _ in range(3)]
    for p in failing:
        with pytest.raises(ValueError, match="max_nfa_bytes"):
            p.result()
    assert cache.misses == 2 and not cache._inflight


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
    ebnf = list(_core.EBNF_OPTIONS)
    assert constraints.EBNF_OPTIONS == tuple(ebnf)
    assert sorted(_stub_keywords("Grammar", "from_ebnf")) == sorted(ebnf + engine)
    vocab = ts.Vocabulary([b"a", b""], [1])
    for name in ebnf + engine:
        with pytest.raises(ValueError, match=name):
            ts.Grammar.from_ebnf('root ::= "a"', vocab, **{name: ["not a value"]})
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


# --- hostile values through the public entry points (issue #32) -----------------------------


class _Raises:
    """An object whose every special method a careless reader might call raises."""

    def _raise(self, *args: object) -> Any:
        raise RuntimeError("hostile method called")

    __repr__ = __str__ = __eq__ = __iter__ = __len__ = __bool__ = __format__ = _raise
    __hash__ = object.__hash__  # hashable by identity (a dict key), the rest raises


class _RaisingStr(str):
    """A string whose own methods raise (its hash works, so it can be a dict key)."""

    def _raise(self, *args: object) -> Any:
        raise RuntimeError("hostile method called")

    __repr__ = __str__ = __eq__ = __format__ = _raise
    __hash__ = str.__hash__


class _RaisingDict(dict):  # type: ignore[type-arg]
    """A dict whose own methods raise; its entries are plain."""

    def _raise(self, *args: object) -> Any:
        raise RuntimeError("hostile method called")

    items = keys = values = __iter__ = __getitem__ = __repr__ = _raise


class _LyingClass:
    """Reports ``dict`` as its ``__class__`` (``isinstance(x, dict)`` is True)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return dict


def _cycle() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["not"] = d
    return d


def _nested(depth: int) -> dict[str, Any]:
    """``{"items": {"items": ... {}}}``: ``depth`` levels of a valid schema."""
    schema: dict[str, Any] = {}
    for _ in range(depth - 1):
        schema = {"items": schema}
    return schema


def _nested_text(depth: int) -> str:
    return '{"items": ' * (depth - 1) + "{}" + "}" * (depth - 1)


HOSTILE: list[tuple[str, Any, dict[str, Any]]] = [
    # JSON text nested past any recursion limit
    ("choice", "[" * 1000 + "]" * 1000, {}),
    ("choice", "[" * 100_000 + "]" * 100_000, {}),
    ("choice", b"[" * 1000 + b"]" * 1000, {}),
    ("json_schema", "[" * 100_000 + "]" * 100_000, {}),
    ("json_schema", '{"a": ' * 100_000 + "1" + "}" * 100_000, {}),
    ("json_schema", b"\xff{}", {}),
    # objects: deep, cyclic, of no JSON type, with raising methods, lying about their class
    ("json_schema", _nested(5000), {}),
    ("json_schema", _cycle(), {}),
    ("json_schema", {"enum": [{1, 2}]}, {}),
    ("json_schema", {"const": _Raises()}, {}),
    ("json_schema", {"const": _LyingClass()}, {}),
    ("json_schema", {1: "string"}, {}),
    ("json_schema", {"enum": [float("nan")]}, {}),
    ("json_schema", _Raises(), {}),
    ("choice", [_Raises()], {}),
    ("choice", [_LyingClass()], {}),
    ("choice", [["a"]], {}),
    ("choice", _Raises(), {}),
    ("choice", {"a": 1}, {}),
    ("choice", [], {}),
    ("regex", _Raises(), {}),
    ("regex", 5, {}),
    # options: not a mapping, raising values, registries that are deep, cyclic or not JSON
    ("regex", "a", {"max_states": _Raises()}),
    ("regex", "a", {"max_states": [1]}),
    ("regex", "a", {"max_states": _LyingClass()}),
    ("json_schema", {}, {"whitespace": _Raises()}),
    ("json_schema", {}, {"registry": {"urn:a": {"const": _Raises()}}}),
    ("json_schema", {}, {"registry": {"urn:a": _cycle()}}),
    ("json_schema", {}, {"registry": {"urn:a": _nested(5000)}}),
    ("json_schema", {}, {"registry": '{"urn:a": ' + "[" * 100_000 + "]" * 100_000 + "}"}),
    ("json_schema", {}, {"registry": {_Raises(): {}}}),
    ("json_schema", {}, {"registry": {1: {}}}),
    ("json_schema", {}, {"registry": _Raises()}),
    ("json_schema", {}, {"registry": [1]}),
]


@pytest.mark.parametrize(("kind", "value", "options"), HOSTILE)
def test_hostile_values_are_typed_errors(kind: str, value: Any, options: dict[str, Any]) -> None:
    """Every public entry point: a ValueError or a TokensieveError, never a RecursionError, a
    TypeError or whatever a hostile object's method raises."""
    vocab = byte_vocab()
    with pytest.raises((ValueError, ts.TokensieveError)):
        compile_constraint(kind, value, vocab, **options)
    with pytest.raises((ValueError, ts.TokensieveError)):
        c = Constraint.make(kind, value, options, label="guided_x")
        c.key  # noqa: B018
        c.compile(vocab)
    cache = GrammarCache()
    for _ in range(2):
        with pytest.raises((ValueError, ts.TokensieveError)):
            cache.get(Constraint.make(kind, value, options), vocab)


@pytest.mark.parametrize("kind", [_RaisingStr("nope"), _Raises(), ["regex"], None, _LyingClass()])
def test_hostile_kinds_are_value_errors(kind: Any) -> None:
    with pytest.raises(ValueError, match="unknown constraint kind"):
        compile_constraint(kind, "a", byte_vocab())


@pytest.mark.parametrize("options", [5, _Raises(), _LyingClass(), [("max_states", 1)]])
def test_options_that_are_no_mapping_are_value_errors(options: Any) -> None:
    with pytest.raises(ValueError, match="options of regex"):
        Constraint.make("regex", "a", options)


def test_schemas_nested_past_128_levels_are_schema_errors_at_every_entry_point() -> None:
    vocab = byte_vocab()
    for value in (_nested(129), _nested_text(129), _nested(10_000), _nested_text(10_000), _cycle()):
        with pytest.raises(ts.SchemaError, match="nests more than 128 levels"):
            compile_constraint("json_schema", value, vocab)
        with pytest.raises(ts.SchemaError, match="nests more than 128 levels"):
            compile_constraint("json_schema", {"$ref": "urn:a"}, vocab, registry={"urn:a": value})
    with pytest.raises(ts.SchemaError) as e:
        Constraint.make("json_schema", _nested(129))
    assert e.value.keyword == "" and e.value.pointer == ""  # type: ignore[attr-defined]


def test_values_are_copied_in_plain_types() -> None:
    """A subclass is read through its base type's methods; what the core gets is plain."""
    schema = _RaisingDict(type="string", maxLength=2)
    dict.__setitem__(schema, _RaisingStr("minLength"), 1)
    c = Constraint.make("json_schema", schema)
    assert type(c.value) is dict and c.value == {"type": "string", "maxLength": 2, "minLength": 1}
    assert all(type(k) is str for k in c.value)
    m = c.compile(byte_vocab()).matcher()
    assert m.accept_tokens(list(b'"ab"')) == 4 and m.is_accepting()
    # kinds, option names and values, keys and strings: their plain text
    c = Constraint.make(
        _RaisingStr("json_schema"),
        {_RaisingStr("const"): _RaisingStr("x"), "enum": [_RaisingStr("x")]},
        _RaisingDict({_RaisingStr("max_states"): 1000, "whitespace": _RaisingStr("compact")}),
    )
    assert c.kind == "json_schema" and type(c.kind) is str
    assert c.value == {"const": "x", "enum": ["x"]}
    assert dict(c.options) == {"max_states": 1000, "whitespace": "compact"}
    assert all(type(k) is str and type(v) in (int, str) for k, v in c.options)
    m = c.compile(byte_vocab()).matcher()
    assert m.accept_tokens(list(b'"x"')) == 3 and m.is_accepting()
    c = Constraint.make("choice", (_RaisingStr("yes"), "no"))
    assert c.value == ("yes", "no") and all(type(x) is str for x in c.value)
    assert Constraint.make("choice", b'["a"]').value == ("a",)


def test_a_schema_is_written_as_json_once_and_a_readers_copy_is_not_copied_again() -> None:
    """A dict schema's JSON text is written once by ``make`` (the source hash and the compile
    read it); a value a reader copied already (``PlainJson``) is taken as it is; both give the
    key and the language of the schema as a dict and as its text."""
    from tokensieve._bounded_json import PlainJson, plain_copy

    schema = {"type": "object", "properties": {"n": {"type": "number", "maximum": 1.5}}}
    as_dict = Constraint.make("json_schema", schema)
    assert (
        as_dict.text
        == '{"type": "object", "properties": {"n": {"type": "number", "maximum": 1.5}}}'
    )
    as_text = Constraint.make("json_schema", as_dict.text)
    assert as_text.value == as_dict.text and as_text.text is None
    copied = plain_copy(schema, "guided_json")
    assert type(copied) is PlainJson and copied.value == schema and copied.value is not schema
    from_reader = Constraint.make("json_schema", copied)
    assert from_reader.value is copied.value and from_reader == as_dict
    assert from_reader.key == as_dict.key == as_text.key
    vocab = byte_vocab()
    for c in (as_dict, as_text, from_reader):
        m = c.compile(vocab).matcher()
        assert m.accept_tokens(list(b'{"n": 1.5}')) == 10 and m.is_accepting()
    # a reader's copy is still checked as a schema, and a tag's as a tag
    with pytest.raises(ValueError, match="must be a JSON Schema"):
        Constraint.make("json_schema", plain_copy([1], "guided_json"))
    with pytest.raises(ValueError, match="must be a structural tag"):
        Constraint.make("structural_tag", plain_copy("x", "guided_structural_tag"))
    # the vLLM reader hands its copy on: one copy, whose text the compile reads
    from tokensieve.vllm.constraints import read_extra_args

    read = read_extra_args({"guided_json": schema}).constraint
    assert read is not None and read.value == schema and read.value is not schema
    assert read.text == as_dict.text and read.key == as_dict.key


def test_a_constraint_built_by_hand_fails_as_a_value_error_and_is_not_cached() -> None:
    vocab = byte_vocab()
    c = Constraint("json_schema", {"enum": [{1, 2}]})  # not through make(): not checked
    with pytest.raises(ValueError, match="the schema is not JSON"):
        c.key  # noqa: B018
    cache = GrammarCache()
    for _ in range(2):
        with pytest.raises(ValueError, match="the schema is not JSON"):
            cache.get(c, vocab)
    assert len(cache) == 0
    with pytest.raises(ValueError, match="invalid regex"):
        Constraint("regex", 5).compile(vocab)
    with pytest.raises(TypeError, match="vocab must be a tokensieve.Vocabulary"):
        Constraint.make("regex", "a").compile("vocab")  # type: ignore[arg-type]


def test_registry_documents_keep_their_numbers_exact() -> None:
    """A registry document given as JSON text reaches the compiler as that text (it went
    through Python floats before: 1.00000000000000000001 was read as 1.0)."""
    vocab = byte_vocab()
    doc = '{"type": "number", "exclusiveMinimum": 1.00000000000000000001}'
    for registry in ({"urn:a": doc}, '{"urn:a": ' + doc + "}"):
        g = compile_constraint("json_schema", {"$ref": "urn:a"}, vocab, registry=registry)
        m = g.matcher()
        assert m.accept_tokens(list(b"1.00000000000000000001")) == 22 and not m.is_accepting()
        m = g.matcher()
        assert m.accept_tokens(list(b"1.000000000000000000011")) == 23 and m.is_accepting()
