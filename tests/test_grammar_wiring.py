"""GBNF/EBNF grammars (the ``ebnf`` kind) through the Python layers a constraint goes through:
the constraint model and its cache key, the grammar cache (errors cached, Lark refused by name),
precompiled index files found by constraint, and the vLLM request readers (``guided_grammar``,
``structured_outputs.grammar``). The grammar language itself is tested by the core's own suites;
the serving paths in ``tests/vllm``, ``tests/sglang``, ``test_vllm_fake.py``, ``test_cli.py``
and ``test_transformers.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from feed import byte_vocabulary
from structured_params import so

import tokensieve as ts
from tokensieve import constraints
from tokensieve.constraints import Constraint, GrammarCache, looks_like_lark
from tokensieve.index_files import IndexDirectory
from tokensieve.vllm.constraints import read_extra_args
from tokensieve.vllm.structured import structured_args

# a^n c b^n: context-free, so no regex spells it; its start rule is not root
ANBN = 'root ::= "-"\ns ::= "a" s "b" | "c"\n'


def byte_vocab() -> ts.Vocabulary:
    return byte_vocabulary()


def accepts(grammar: ts.Grammar, text: str) -> bool:
    m = grammar.matcher()
    data = list(text.encode())
    return m.accept_tokens(data) == len(data) and m.is_accepting()


def test_grammar_error_is_exported_and_a_tokensieve_error() -> None:
    assert ts.GrammarError is ts._core.GrammarError
    assert issubclass(ts.GrammarError, ts.TokensieveError)
    assert "GrammarError" in ts.__all__
    with pytest.raises(ts.GrammarError) as e:
        ts.Grammar.from_ebnf('root ::= "a"\nitem ::= "b" (', byte_vocab())
    assert e.value.line == 2 and e.value.column > 0


def test_ebnf_constraint_compiles_with_its_start_rule_and_keys_like_the_core() -> None:
    vocab = byte_vocab()
    c = Constraint.make("ebnf", ANBN, {"start": "s"})
    g = c.compile(vocab)
    assert g.constraint_kind == "ebnf"
    assert accepts(g, "aacbb") and not accepts(g, "aacb") and not accepts(g, "-")
    assert c.key.split(":")[0] == g.source_hash
    assert g.source_hash == ts._core.constraint_hash("ebnf", ANBN, start="s")
    # the start rule and the stack bound shape the language; the engine budgets only the key's tail
    root = Constraint.make("ebnf", ANBN)
    assert accepts(root.compile(vocab), "-")
    assert root.key.split(":")[0] != c.key.split(":")[0]
    deep = Constraint.make("ebnf", ANBN, {"start": "s", "max_stack_depth": 4})
    assert deep.key.split(":")[0] != c.key.split(":")[0]
    budget = Constraint.make("ebnf", ANBN, {"start": "s", "max_states": 5000})
    assert budget.key.split(":")[0] == c.key.split(":")[0] and budget.key != c.key
    # and through the one-call helper
    g2 = constraints.compile_constraint("ebnf", ANBN, vocab, start="s", max_stack_depth=16)
    assert accepts(g2, "acb")


@pytest.mark.parametrize(
    ("value", "options", "message"),
    [
        ("", {}, "ebnf is empty"),
        (b'root ::= "a"', {}, "ebnf must be a string"),
        ('root ::= "a"', {"whitespace": "compact"}, "apply to JSON constraints only"),
        ('root ::= "a"', {"registry": "{}"}, "apply to JSON constraints only"),
    ],
)
def test_malformed_grammars_are_value_errors(value: Any, options: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Constraint.make("ebnf", value, options)


def test_start_is_a_grammar_option_only() -> None:
    for kind, value in (("regex", "a"), ("json_schema", {}), ("choice", ["a"])):
        with pytest.raises(ValueError, match=r"apply to grammars \(ebnf, lark\) only"):
            Constraint.make(kind, value, {"start": "root"})


def test_a_lark_grammar_given_as_ebnf_is_read_as_lark() -> None:
    vocab = byte_vocab()
    c = Constraint.make("ebnf", 'start: "a" | "b"')
    assert c.kind == "lark"
    assert accepts(c.compile(vocab), "a") and not accepts(c.compile(vocab), "c")
    # the same grammar as kind lark has the same key; its own start rule by default
    assert Constraint.make("lark", 'start: "a" | "b"').key == c.key
    other = Constraint.make("lark", 'start: "a"\nitem: "b"', {"start": "item"})
    assert accepts(other.compile(vocab), "b")
    # a malformed one is the core's GrammarError, with its position
    bad = Constraint.make("ebnf", "// a comment\nrule: NAME\n%import common.NAME")
    with pytest.raises(ts.GrammarError, match="line 3, column 1: `common` has no terminal `NAME`"):
        bad.compile(vocab)


def test_lark_detection_is_vllms() -> None:
    # vllm.v1.structured_output.utils.grammar_is_likely_lark's documented cases, and comments
    assert looks_like_lark("rule: 'abc'")
    assert not looks_like_lark("rule ::= 'abc'")
    assert looks_like_lark('start: x\n# root ::= "a"\n// y ::= "b"')
    assert not looks_like_lark('# a grammar\n\nroot ::= "a"  # one rule')


def test_grammar_errors_are_cached_client_messages() -> None:
    cache, vocab = GrammarCache(), byte_vocab()
    bad = Constraint.make("ebnf", 'root ::= "a" | undefined', label="structured_outputs.grammar")
    for _ in range(2):
        with pytest.raises(ValueError, match=r"invalid structured_outputs.grammar: GrammarError"):
            cache.get(bad, vocab)
    assert cache.misses == 1 and cache.hits == 1
    good = Constraint.make("ebnf", ANBN, {"start": "s"})
    assert cache.get(good, vocab) is cache.get(Constraint.make("ebnf", ANBN, {"start": "s"}), vocab)


def test_precompiled_grammar_index_is_found_by_its_constraint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vocab = byte_vocab()
    grammar = ts.Grammar.from_ebnf(ANBN, vocab, start="s", max_stack_depth=8)
    grammar.precompute()
    grammar.save(tmp_path / "anbn.tsidx")
    loaded = ts.Grammar.load(tmp_path / "anbn.tsidx", vocab)
    assert loaded.constraint_kind == "ebnf" and loaded.source_hash == grammar.source_hash
    assert accepts(loaded, "aaacbbb") and not accepts(loaded, "ab")
    d = IndexDirectory(tmp_path, vocab)
    assert len(d) == 1
    assert d.find("ebnf", ANBN, start="s", max_stack_depth=8) is not None
    assert d.find("ebnf", ANBN, start="s") is None  # another stack bound: another language
    # a server's cache loads it instead of compiling
    constraints.set_index_directory(tmp_path)
    try:

        def no_compile(self: Any, vocab: Any) -> Any:
            raise AssertionError("compiled although a precompiled index matches")

        monkeypatch.setattr(Constraint, "compile_pending", no_compile)
        c = Constraint.make("ebnf", ANBN, {"start": "s", "max_stack_depth": 8})
        got = GrammarCache().get(c, vocab)
        assert got.source_hash == grammar.source_hash and accepts(got, "acb")
    finally:
        constraints.set_index_directory(None)


def test_vllm_request_readers_make_the_same_constraint() -> None:
    by_key = read_extra_args({"guided_grammar": ANBN, "guided_start": "s"}).constraint
    by_field = structured_args(so(grammar=ANBN), {"guided_start": "s"}).constraint
    assert by_key is not None and by_field is not None
    assert by_key.kind == by_field.kind == "ebnf"
    assert by_key.key == by_field.key
    assert (by_key.name, by_field.name) == ("guided_grammar", "structured_outputs.grammar")
    # vLLM's JSON knobs do not apply to a grammar (as for a regex)
    knobbed = structured_args(so(grammar=ANBN, disable_any_whitespace=True), None).constraint
    assert knobbed is not None and knobbed.options == ()


def test_choice_rewritten_into_a_grammar_gives_exactly_the_choices() -> None:
    """What vLLM's own validation sends the engine for a ``choice`` (``choice_as_grammar`` in
    vllm/v1/structured_output/utils.py, copied: vLLM is not installed here) compiles, and its
    language is the choices exactly."""

    def choice_as_grammar(choice: list[str]) -> str:
        escapes = {"\\": r"\\", '"': r"\"", "\n": r"\n", "\r": r"\r", "\t": r"\t"}

        def escape_char(ch: str) -> str:
            if ch in escapes:
                return escapes[ch]
            if ord(ch) < 0x20 or ord(ch) == 0x7F:
                return f"\\u{ord(ch):04x}"
            return ch

        return "root ::= " + " | ".join(
            '"' + "".join(escape_char(ch) for ch in c) + '"' for c in choice
        )

    choices = ["yes", 'say "hi"', "back\\slash", "two\nlines", "tab\there", "ding\x07", "café"]
    c = structured_args(so(grammar=choice_as_grammar(choices)), None).constraint
    assert c is not None
    g = c.compile(byte_vocab())
    for text in choices:
        assert accepts(g, text), text
    for text in ["", "ye", "yess", "say hi", "back\\\\slash", "ding\\u0007", "cafe", "yes\n"]:
        assert not accepts(g, text), text
