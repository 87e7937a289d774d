"""tokensieve.sglang with SGLang's own classes: its backend factory, grammar cache and futures,
grammar manager, batch mask path and reasoning wrapper (``make test-sglang``).

Masks are checked bit by bit at every step of random walks over a small byte-level vocabulary:
regex masks against the ``regex`` module's partial matching (an independent oracle), JSON
Schema masks against accepting each token on the matcher (then rolling it back), and the EOS
bit against ``re.fullmatch`` / ``jsonschema`` on the text so far. The walks' outputs validate.
"""

from __future__ import annotations

import importlib.metadata
import json
import random
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import regex
import torch
from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
from sglang.srt.constrained.base_grammar_backend import (
    GRAMMAR_BACKEND_REGISTRY,
    GrammarRow,
    InvalidGrammarObject,
    create_grammar_backend,
)
from sglang.srt.constrained.reasoner_grammar_backend import (
    ReasonerGrammarBackend,
    ReasonerGrammarObject,
)
from sglang.srt.runtime_context import get_context

import tokensieve as ts
import tokensieve.sglang as ts_sglang
from tokensieve.sglang import backend as ts_backend
from tokensieve.sglang.backend import (
    FULL_ASSISTANT_EBNF_UNSUPPORTED,
    TokensieveGrammar,
    TokensieveGrammarBackend,
)

VOCAB_SIZE = 300  # SGLang's logits width: the tokenizer's 275 ids, padded
SGLANG_VERSION = "0.5.23"

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "n": {"type": "integer", "minimum": -5, "maximum": 120},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "n"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"enum": ["abc", 12, True, None]}, "maxItems": 3},
    {"type": "string", "pattern": "^[a-c]{1,4}-[0-9]$"},
]
REGEXES = [r"[0-9]{1,3}(\.[0-9]{1,2})?", r"(abc|ab|true)+-[a-c]?", r"name: [a-z]{2,5}\n?"]


def test_version_is_the_pinned_one() -> None:
    assert importlib.metadata.version("sglang") == SGLANG_VERSION


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    ts_sglang.register()
    ts_sglang.register()  # idempotent


def make_backend(tokenizer: Any, **server_args: Any) -> Any:
    """SGLang's own factory, with the server's config published as a launch would."""
    with get_context().override_server_args(grammar_backend="tokensieve", **server_args) as sa:
        return create_grammar_backend(
            sa, tokenizer, VOCAB_SIZE, {tokenizer.eos_token_id}, think_end_ids=None
        )


@pytest.fixture(scope="module")
def backend(hf_tokenizer: Any) -> Any:
    b = make_backend(hf_tokenizer)
    assert isinstance(b, TokensieveGrammarBackend)
    return b


@pytest.fixture(scope="module")
def vocab(backend: Any) -> ts.Vocabulary:
    return backend.vocab  # type: ignore[no-any-return]


def compiled(backend: Any, key: tuple[str, str]) -> Any:
    """SGLang's path: cache miss, future from its executor, result, cache the copy."""
    value, hit = backend.get_cached_or_future_value(key, False)
    if hit:
        return value
    grammar = value.result(timeout=60)
    backend.set_cache(key, grammar.copy())
    return grammar


def bits(mask_row: torch.Tensor, vocab_size: int) -> list[bool]:
    words = mask_row.tolist()
    return [bool((words[t // 32] >> (t % 32)) & 1) for t in range(vocab_size)]


def token_text(vocab: ts.Vocabulary, t: int) -> bytes:
    b = vocab.token_bytes(t)
    return b if b is not None else b""


def regex_viable(pattern: str, data: bytes) -> tuple[bool, bool]:
    """(data can be continued to a full match, data is a full match), by the regex module."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False, False  # the patterns and their texts are ASCII
    return (
        regex.fullmatch(pattern, text, partial=True) is not None,
        re.fullmatch(pattern, text) is not None,
    )


def json_complete(schema: Any, data: bytes) -> bool:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def walk(
    grammar: Any,
    vocab: ts.Vocabulary,
    rng: random.Random,
    oracle: Any,
    max_steps: int = 80,
    prefer: Any = None,
) -> Iterator[tuple[bytes, list[bool]]]:
    """Random walk through the masks: yields (text so far, mask bits) before each token;
    ends after EOS (or max_steps). ``oracle(text, bits)`` checks each mask; ``prefer(tokens)``,
    when given, narrows the non-EOS tokens the walk picks from (empty: no preference)."""
    eos = set(vocab.eos_token_ids)
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 2, "cpu")
    text = b""
    for step in range(max_steps):
        mask.fill_(-1)
        grammar.fill_vocab_mask(mask, 1)
        assert mask[0].tolist() == [-1] * mask.shape[1]  # other rows untouched
        allowed = bits(mask[1], VOCAB_SIZE)
        oracle(text, allowed)
        yield text, allowed
        choices = [t for t in range(VOCAB_SIZE) if allowed[t]]
        assert choices, f"dead end after {text!r}"
        eos_ok = [t for t in choices if t in eos]
        if eos_ok and (step > 8 or rng.random() < 0.3):
            t = eos_ok[0]
        else:
            others = [t for t in choices if t not in eos]
            if prefer is not None:
                others = prefer(others) or others
            t = rng.choice(others or choices)
        grammar.accept_token(t)
        if t in eos:
            assert grammar.is_terminated()
            return
        assert not grammar.is_terminated()
        text += token_text(vocab, t)


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_masks_match_the_regex_module(
    backend: Any, vocab: ts.Vocabulary, pattern: str
) -> None:
    eos = set(vocab.eos_token_ids)
    template = compiled(backend, ("regex", pattern))
    assert isinstance(template, TokensieveGrammar)
    rng = random.Random(pattern)

    def oracle(text: bytes, allowed: list[bool]) -> None:
        for t in range(VOCAB_SIZE):
            if t in eos:
                expected = regex_viable(pattern, text)[1]
            elif t >= vocab.tokenizer_size or t in vocab.special_token_ids:
                expected = False
            else:
                expected = regex_viable(pattern, text + token_text(vocab, t))[0]
            assert allowed[t] == expected, (text, t, token_text(vocab, t))

    finished = 0
    for _ in range(12):
        grammar = compiled(backend, ("regex", pattern))  # a cache hit: a copy at the start
        assert grammar is not template
        texts = [text for text, _ in walk(grammar, vocab, rng, oracle)]
        if grammar.is_terminated():
            finished += 1
            assert re.fullmatch(pattern, texts[-1].decode())
    assert finished >= 10


@pytest.mark.parametrize("schema", SCHEMAS, ids=["object", "array", "string"])
def test_json_masks_and_outputs(backend: Any, vocab: ts.Vocabulary, schema: Any) -> None:
    eos = set(vocab.eos_token_ids)
    key = ("json", json.dumps(schema))
    rng = random.Random(key[1])
    finished = 0
    for _ in range(12):
        grammar = compiled(backend, key)
        m = grammar.matcher

        def oracle(text: bytes, allowed: list[bool], m: ts.Matcher = m) -> None:
            for t in range(VOCAB_SIZE):
                if t in eos:
                    assert allowed[t] == json_complete(schema, text), (text, t)
                    continue
                ok = m.accept_token(t)
                if ok:
                    m.rollback(1)
                assert allowed[t] == ok, (text, t, token_text(vocab, t))
                if t >= vocab.tokenizer_size or t in vocab.special_token_ids:
                    assert not ok

        texts = [text for text, _ in walk(grammar, vocab, rng, oracle, max_steps=120)]
        if grammar.is_terminated():
            finished += 1
            jsonschema.validate(json.loads(texts[-1]), schema)
    assert finished >= 8


# Nested lists of numbers: recursive, so no regex spells it.
LISTS_EBNF = """
root  ::= "[" ( value ( "," value )* )? "]"
value ::= [0-9]+ | root
"""


DIGITS = "0123456789"  # ASCII only ("²".isdigit() is true)


def lists_viable(data: bytes) -> tuple[bool, bool]:
    """(data can be continued to a word of LISTS_EBNF, data is one), by a hand-written scanner
    with a depth counter (independent of the grammar compiler)."""
    depth, state = 0, "start"  # start, open, num, comma, close
    for ch in data.decode("latin-1"):
        if state == "start":
            ok = ch == "["
        elif state in ("open", "comma"):
            ok = ch in DIGITS or ch == "[" or (ch == "]" and state == "open")
        elif state == "num":
            ok = ch in DIGITS or ch in ",]"
        else:  # after a "]"
            ok = depth > 0 and ch in ",]"
        if not ok:
            return False, False
        if ch == "[":
            depth, state = depth + 1, "open"
        elif ch == "]":
            depth, state = depth - 1, "close"
        elif ch == ",":
            state = "comma"
        else:
            state = "num"
    return True, state == "close" and depth == 0


def byte_tokens(vocab: ts.Vocabulary, text: str) -> list[int]:
    """``text`` as single-byte tokens of ``vocab``."""
    ids = {token_text(vocab, t): t for t in range(vocab.tokenizer_size)}
    return [ids[bytes([b])] for b in text.encode()]


def test_ebnf_masks_match_a_hand_written_recognizer(backend: Any, vocab: ts.Vocabulary) -> None:
    eos = set(vocab.eos_token_ids)
    key = ("ebnf", LISTS_EBNF)
    template = compiled(backend, key)
    assert isinstance(template, TokensieveGrammar)
    assert template.grammar.constraint_kind == "ebnf"
    rng = random.Random(7)

    def oracle(text: bytes, allowed: list[bool]) -> None:
        for t in range(VOCAB_SIZE):
            if t in eos:
                expected = lists_viable(text)[1]
            elif t >= vocab.tokenizer_size or t in vocab.special_token_ids:
                expected = False
            else:
                expected = lists_viable(text + token_text(vocab, t))[0]
            assert allowed[t] == expected, (text, t, token_text(vocab, t))

    # close a list (or leave a number) half of the time, so that walks end
    closing = {t for t in range(vocab.tokenizer_size) if token_text(vocab, t) in (b"]", b",")}

    def prefer(tokens: list[int]) -> list[int]:
        return [t for t in tokens if t in closing] if rng.random() < 0.5 else []

    finished = 0
    for _ in range(12):
        grammar = compiled(backend, key)
        assert grammar is not template
        texts = [text for text, _ in walk(grammar, vocab, rng, oracle, 60, prefer)]
        if grammar.is_terminated():
            finished += 1
            assert lists_viable(texts[-1]) == (True, True), texts[-1]
    assert finished >= 6, finished
    # nesting, deeper than a walk is likely to go, and what it refuses
    for text, ok in [("[1,[2,[]],[[3]]]", True), ("[[]", False), ("[1,]", False), ("[]]", False)]:
        grammar = compiled(backend, key)
        fed = all(grammar.matcher.accept_token(t) for t in byte_tokens(vocab, text))
        assert (fed and grammar.matcher.is_accepting()) == ok, text


def test_finished_grammar_allows_exactly_eos(
    backend: Any, vocab: ts.Vocabulary, hf_tokenizer: Any
) -> None:
    grammar = compiled(backend, ("regex", "abc"))
    for t in hf_tokenizer.encode("abc", add_special_tokens=False):
        grammar.accept_token(t)
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    allowed = [t for t, b in enumerate(bits(mask[0], VOCAB_SIZE)) if b]
    assert allowed == [hf_tokenizer.eos_token_id] == vocab.eos_token_ids
    assert not grammar.is_terminated()
    grammar.accept_token(hf_tokenizer.eos_token_id)
    assert grammar.is_terminated()
    grammar.accept_token(5)  # ignored once terminated, as SGLang's other backends do
    assert grammar.is_terminated()
    grammar.rollback(1)  # the EOS
    assert not grammar.is_terminated()


def test_refused_token_raises_value_error(backend: Any, hf_tokenizer: Any) -> None:
    grammar = compiled(backend, ("regex", "[0-9]+"))
    with pytest.raises(ValueError, match="not allowed"):
        grammar.accept_token(hf_tokenizer.encode("a", add_special_tokens=False)[0])
    grammar.accept_token(hf_tokenizer.encode("7", add_special_tokens=False)[0])
    with pytest.raises(ValueError):
        grammar.accept_token(VOCAB_SIZE - 1)  # a padding id


def test_rollback_restores_masks(backend: Any, hf_tokenizer: Any) -> None:
    grammar = compiled(backend, ("json", json.dumps(SCHEMAS[0])))
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 4, "cpu")
    tokens = hf_tokenizer.encode('{"name": "ab', add_special_tokens=False)
    for i, t in enumerate(tokens[:3]):
        grammar.fill_vocab_mask(mask, i)
        grammar.accept_token(t)
    grammar.rollback(2)
    grammar.fill_vocab_mask(mask, 3)
    assert torch.equal(mask[3], mask[1])
    for t in tokens[1:]:
        grammar.accept_token(t)
    assert grammar.matcher.consumed == len(tokens)


def test_copy_is_independent_and_at_the_start(backend: Any, hf_tokenizer: Any) -> None:
    grammar = compiled(backend, ("regex", "(ab)+"))
    start = grammar.allocate_vocab_mask(VOCAB_SIZE, 2, "cpu")
    grammar.fill_vocab_mask(start, 0)
    for t in hf_tokenizer.encode("abab", add_special_tokens=False):
        grammar.accept_token(t)
    twin = grammar.copy()
    assert twin.matcher is not grammar.matcher and twin.grammar is grammar.grammar
    assert twin.matcher.consumed == 0 and grammar.matcher.consumed > 0
    twin.fill_vocab_mask(start, 1)
    assert torch.equal(start[0], start[1])
    twin.accept_token(hf_tokenizer.encode("a", add_special_tokens=False)[0])
    assert grammar.matcher.consumed == len(hf_tokenizer.encode("abab", add_special_tokens=False))
    assert twin.grammar_stats.is_cache_hit


def test_cache_holds_one_template_per_key(backend: Any) -> None:
    key = ("regex", "x{1,3}")
    first, hit = backend.get_cached_or_future_value(key, False)
    assert not hit
    grammar = first.result(timeout=60)
    backend.set_cache(key, grammar.copy())
    second, hit = backend.get_cached_or_future_value(key, False)
    assert hit and isinstance(second, TokensieveGrammar) and second is not grammar
    assert second.grammar is grammar.grammar  # compiled once


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (("json", '{"type": "integer", "minimum": "x"}'), "SchemaError"),
        (("json", '{"type": '), "not valid JSON"),
        (("json", "[1, 2]"), "must be a JSON Schema"),
        (("regex", "a(b"), "RegexError"),
        (("regex", "a{5,2}"), "RegexError"),
        (("ebnf", 'root ::= "a" ('), "invalid ebnf: GrammarError"),
        (("ebnf", 'root ::= item\nitem ::= "a" undefined'), "GrammarError"),
        (("ebnf", 'start: "a" | B'), "the terminal `B` is not defined"),
        (("full_assistant_ebnf", 'root ::= "a"'), "full_assistant_ebnf grammars are not"),
        (("structural_tag", '{"format": {}}'), "structural tag error at $.format"),
        (
            ("structural_tag", '{"format": {"type": "token", "token": 1}}'),
            "token 1 is not a special token",
        ),
    ],
)
def test_invalid_constraints_are_invalid_grammar_objects(
    backend: Any, key: tuple[str, str], message: str
) -> None:
    value, hit = backend.get_cached_or_future_value(key, False)
    result = value if hit else value.result(timeout=60)
    assert isinstance(result, InvalidGrammarObject)
    assert message in result.error_message, result.error_message


def test_schema_error_carries_keyword_and_pointer(backend: Any) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "maximum": "high"}}}
    result = backend.dispatch_json(json.dumps(schema))
    assert isinstance(result, InvalidGrammarObject)
    assert "SchemaError" in result.error_message and "maximum" in result.error_message


def test_budget_error(hf_tokenizer: Any) -> None:
    small = TokensieveGrammarBackend(hf_tokenizer, VOCAB_SIZE, options={"max_states": 4})
    result = small.dispatch_regex("[a-c]{20}")
    assert isinstance(result, InvalidGrammarObject)
    assert "BudgetError" in result.error_message


def test_messages_are_tokensieves(backend: Any, vocab: ts.Vocabulary) -> None:
    with pytest.raises(ts.RegexError) as e:
        ts.Grammar.from_regex("a(b", vocab)
    result = backend.dispatch_regex("a(b")
    assert str(e.value) in result.error_message
    with pytest.raises(ts.GrammarError) as g:
        ts.Grammar.from_ebnf('root ::= "a" (', vocab)
    assert str(g.value) in backend.dispatch_ebnf('root ::= "a" (').error_message
    value, hit = backend.get_cached_or_future_value(("full_assistant_ebnf", 'root ::= "a"'), False)
    result = value if hit else value.result(timeout=60)
    assert result.error_message == FULL_ASSISTANT_EBNF_UNSUPPORTED
    with pytest.raises(ts.GrammarError) as t:
        ts.Grammar.from_structural_tag("{}", vocab)
    assert str(t.value) in backend.dispatch_structural_tag("{}").error_message


def test_json_object_and_any(backend: Any, hf_tokenizer: Any) -> None:
    # SGLang sends response_format json_object as this schema; $$ANY$$ is any JSON value
    obj = compiled(backend, ("json", '{"type": "object"}'))
    any_json = compiled(backend, ("json", "$$ANY$$"))
    for text, ok_obj in [('{"a": [1, true]}', True), ("[1, 2]", False), ('"abc"', False)]:
        for grammar, ok in [(obj.copy(), ok_obj), (any_json.copy(), True)]:
            eos = hf_tokenizer.eos_token_id
            fed = all(
                grammar.matcher.accept_token(t)
                for t in hf_tokenizer.encode(text, add_special_tokens=False)
            ) and grammar.matcher.accept_token(eos)
            assert fed == ok, (text, ok)


def test_structural_tag_of_sglangs_tool_calling(backend: Any, hf_tokenizer: Any) -> None:
    """The shape SGLang's FunctionCallParser sends for strict tools (qwen25's detector): free
    text, and a call wherever the trigger appears."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    begin = '<tool_call>\n{"name":"get_weather", "arguments":'
    tag = {
        "type": "structural_tag",
        "structures": [{"begin": begin, "schema": schema, "end": "}\n</tool_call>"}],
        "triggers": ["<tool_call>"],
    }
    grammar = compiled(backend, ("structural_tag", json.dumps(tag)))
    call = begin + '{"city": "Paris"}}\n</tool_call>'
    for text, ok in [
        ("Let me check. " + call, True),
        ("No tool needed.", True),
        ("<tool_call>\n" + '{"name":"other", "arguments":{}}\n</tool_call>', False),
        (begin + '{"town": "Paris"}}\n</tool_call>', False),
    ]:
        g = grammar.copy()
        fed = all(
            g.matcher.accept_token(t) for t in hf_tokenizer.encode(text, add_special_tokens=False)
        ) and g.matcher.accept_token(hf_tokenizer.eos_token_id)
        assert fed == ok, (text, ok)


def test_nul_rejected_by_sglang_before_us(backend: Any) -> None:
    value, hit = backend.get_cached_or_future_value(("regex", "a\x00"), False)
    result = value if hit else value.result(timeout=60)
    assert isinstance(result, InvalidGrammarObject) and "NUL" in result.error_message


def test_sampling_batch_path_with_our_kernel(backend: Any, hf_tokenizer: Any) -> None:
    """SGLang's SamplingBatchInfo.update_regex_vocab_mask and GrammarMask.apply: a batch of
    three rows, one without a grammar, one terminated; logits masked by our kernel on CPU."""
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    digits = compiled(backend, ("regex", "[0-9]+"))
    word = compiled(backend, ("regex", "abc"))
    done = compiled(backend, ("regex", "a"))
    done.accept_token(hf_tokenizer.encode("a", add_special_tokens=False)[0])
    done.accept_token(hf_tokenizer.eos_token_id)
    batch = SimpleNamespace(
        grammars=[digits, None, word, done],
        temperatures=torch.ones(4, 1),
        vocab_size=VOCAB_SIZE,
        device="cpu",
        grammar_mask=None,
    )
    SamplingBatchInfo.update_regex_vocab_mask(batch)  # type: ignore[arg-type]
    gm = batch.grammar_mask
    assert gm is not None and gm.vocab_mask.dtype == torch.int32
    assert tuple(gm.vocab_mask.shape) == (4, (VOCAB_SIZE + 31) // 32)
    logits = torch.randn(4, VOCAB_SIZE)
    before = logits.clone()
    gm.apply(logits)
    allowed = torch.isfinite(logits)
    digit_ids = {hf_tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)}
    digit_ids |= {
        t for t in range(VOCAB_SIZE) if (b := backend.vocab.token_bytes(t)) and b.isdigit()
    }
    assert set(torch.nonzero(allowed[0]).flatten().tolist()) == digit_ids
    assert allowed[1].all() and allowed[3].all()  # no grammar; terminated: rows left open
    assert torch.equal(logits[1], before[1])
    word_first = {
        t for t in range(VOCAB_SIZE) if (b := backend.vocab.token_bytes(t)) and b"abc".startswith(b)
    }
    assert set(torch.nonzero(allowed[2]).flatten().tolist()) == word_first
    assert torch.equal(logits[allowed], before[allowed])


def test_batched_fill_matches_row_fills(backend: Any, hf_tokenizer: Any) -> None:
    grammars = [compiled(backend, ("regex", p)) for p in REGEXES]
    grammars[0].accept_token(hf_tokenizer.encode("1", add_special_tokens=False)[0])
    one = TokensieveGrammar.allocate_vocab_mask(grammars[0], VOCAB_SIZE, 4, "cpu")
    many = one.clone()
    for row, g in zip([3, 0, 2], grammars):
        g.fill_vocab_mask(one, row)
    TokensieveGrammar.fill_vocab_mask_batched(
        [GrammarRow(row=r, grammar=g) for r, g in zip([3, 0, 2], grammars)], many
    )
    assert torch.equal(one, many) and many[1].tolist() == [-1] * many.shape[1]
    TokensieveGrammar.reset_vocab_mask(many)
    assert (many == -1).all()
    moved = TokensieveGrammar.move_vocab_mask(one, "cpu")
    assert torch.equal(moved, one)


def test_apply_matches_a_plain_reference(backend: Any) -> None:
    grammar = compiled(backend, ("json", json.dumps(SCHEMAS[1])))
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        logits = torch.randn(1, VOCAB_SIZE).to(dtype)
        expected = logits.clone()
        ok = torch.tensor(bits(mask[0], VOCAB_SIZE))
        expected[0, ~ok] = float("-inf")
        grammar.apply_vocab_mask(logits, mask)
        assert torch.equal(logits, expected)


def test_padded_ids_never_allowed(backend: Any, vocab: ts.Vocabulary) -> None:
    assert vocab.vocab_size == VOCAB_SIZE and vocab.tokenizer_size < VOCAB_SIZE
    grammar = compiled(backend, ("json", "$$ANY$$"))
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu")
    grammar.fill_vocab_mask(mask, 0)
    assert not any(bits(mask[0], VOCAB_SIZE)[vocab.tokenizer_size :])


def test_registry_and_cli_choices() -> None:
    assert GRAMMAR_BACKEND_REGISTRY["tokensieve"] is ts_backend.create_backend
    assert GRAMMAR_BACKEND_CHOICES.count("tokensieve") == 1
    from sglang.srt.server_args import ServerArgs

    parser = __import__("argparse").ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "dummy", "--grammar-backend", "tokensieve"])
    assert args.grammar_backend == "tokensieve"


def test_whitespace_flags(hf_tokenizer: Any) -> None:
    compact = make_backend(hf_tokenizer, constrained_json_disable_any_whitespace=True)
    assert compact.json_options == {"whitespace": "compact"}
    g = compact.dispatch_json('{"type": "object", "properties": {"a": {"type": "integer"}}}')
    spaced = hf_tokenizer.encode('{"a": 1}', add_special_tokens=False)
    assert not all(g.matcher.accept_token(t) for t in spaced)
    flexible = make_backend(hf_tokenizer, constrained_json_max_whitespace_cnt=2)
    assert flexible.json_options == {"whitespace": "flexible", "max_whitespace": 2}


def test_json_options_from_the_environment(
    hf_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TOKENSIEVE_JSON_OPTIONS sets tokensieve's JSON Schema options for every json request
    (here: properties in any order); malformed values fail at startup, naming the variable."""
    schema = (
        '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}'
    )
    reordered = hf_tokenizer.encode('{"b": 2, "a": 1}', add_special_tokens=False)
    plain = make_backend(hf_tokenizer)
    g = plain.dispatch_json(schema)
    assert not all(g.matcher.accept_token(t) for t in reordered)
    monkeypatch.setenv("TOKENSIEVE_JSON_OPTIONS", '{"property_order": "any"}')
    anyorder = make_backend(hf_tokenizer, constrained_json_disable_any_whitespace=True)
    assert anyorder.json_options == {"whitespace": "compact", "property_order": "any"}
    anyorder = make_backend(hf_tokenizer)
    g = anyorder.dispatch_json(schema)
    assert all(g.matcher.accept_token(t) for t in reordered)
    for bad, why in [
        ("[1]", "must be a JSON object"),
        ("{", "is not JSON"),
        ('{"order": "any"}', "unknown option"),
    ]:
        monkeypatch.setenv("TOKENSIEVE_JSON_OPTIONS", bad)
        with pytest.raises(ValueError, match=f"TOKENSIEVE_JSON_OPTIONS.*{why}|{why}"):
            make_backend(hf_tokenizer)


def test_reasoning_wrapper(hf_tokenizer: Any) -> None:
    """--reasoning-parser deepseek-r1: SGLang's ReasonerGrammarBackend around ours; free text
    until </think>, then the grammar; EOS terminates."""
    b = make_backend(hf_tokenizer, reasoning_parser="deepseek-r1")
    assert isinstance(b, ReasonerGrammarBackend)
    assert isinstance(b.grammar_backend, TokensieveGrammarBackend)
    key = ("regex", "[0-9]{2}")
    value, hit = b.get_cached_or_future_value(key, True)
    grammar = value.result(timeout=60)
    assert isinstance(grammar, ReasonerGrammarObject)
    assert isinstance(grammar.grammar, TokensieveGrammar)
    b.set_cache(key, grammar.copy())
    grammar.maybe_init_reasoning(True)
    mask = grammar.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu")
    enc = lambda s: hf_tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    for t in enc("abc, no digits here"):
        mask.fill_(-1)
        grammar.fill_vocab_mask(mask, 0)
        assert (mask == -1).all()  # reasoning: unconstrained
        grammar.accept_token(t)
    grammar.accept_token(enc("</think>")[0])
    mask.fill_(-1)
    grammar.fill_vocab_mask(mask, 0)
    allowed = [t for t, ok in enumerate(bits(mask[0], VOCAB_SIZE)) if ok]
    assert allowed and all(token_text(b.grammar_backend.vocab, t).isdigit() for t in allowed)
    with pytest.raises(ValueError):
        grammar.accept_token(enc("a")[0])
    for t in enc("42"):
        grammar.accept_token(t)
    assert not grammar.is_terminated()
    grammar.accept_token(hf_tokenizer.eos_token_id)
    assert grammar.is_terminated()
    # rollback across the end of reasoning
    grammar.rollback(4)
    assert not grammar.is_terminated() and grammar._is_thinking()
    # a cached copy starts at the start; a request without reasoning starts in the grammar
    again, hit = b.get_cached_or_future_value(key, False)
    assert hit and isinstance(again.grammar, TokensieveGrammar)
    assert again.grammar.matcher.consumed == 0
    with pytest.raises(ValueError):
        again.accept_token(enc("a")[0])


def test_strict_thinking_token_filter(hf_tokenizer: Any) -> None:
    b = make_backend(hf_tokenizer, reasoning_parser="deepseek-r1", enable_strict_thinking=True)
    assert b.grammar_backend.is_support_token_filter
    mask = TokensieveGrammarBackend.allocate_vocab_mask(VOCAB_SIZE, 2, "cpu")
    TokensieveGrammarBackend.set_token_filter(mask, [3, 31, 40, 299], 1, is_allowed=True)
    assert [t for t, ok in enumerate(bits(mask[1], VOCAB_SIZE)) if ok] == [3, 31, 40, 299]
    TokensieveGrammarBackend.set_token_filter(mask, [31, 299], 0, is_allowed=False)
    row0 = bits(mask[0], VOCAB_SIZE)
    assert not row0[31] and not row0[299] and sum(row0) == VOCAB_SIZE - 2
    strict = b.init_strict_reasoning_grammar(True)
    assert strict is not None and strict.allocate_vocab_mask(VOCAB_SIZE, 1, "cpu").shape[1] == 10


def test_grammar_manager_flow(hf_tokenizer: Any) -> None:
    """SGLang's GrammarManager: a request is queued, compiled on the backend's executor, made
    ready; a bad one is aborted with tokensieve's message."""
    from sglang.srt.constrained.grammar_manager import GrammarManager

    backend = make_backend(hf_tokenizer)  # an empty cache

    manager = GrammarManager.__new__(GrammarManager)
    manager.grammar_backend = backend
    manager.grammar_queue = []
    manager._enable_strict_thinking = False
    manager.grammar_sync_size = 1
    manager.pp_rank, manager.pp_size, manager.pp_group = 0, 1, None
    manager.grammar_pp_sync_work_list = []
    manager.SGLANG_GRAMMAR_POLL_INTERVAL = 0.05
    manager.SGLANG_GRAMMAR_MAX_POLL_ITERATIONS = 1000
    manager.scheduler = SimpleNamespace(model_config=SimpleNamespace())

    def request(rid: str, **params: Any) -> Any:
        sp = dict(json_schema=None, regex=None, ebnf=None, structural_tag=None)
        sp.update(params)
        req = SimpleNamespace(
            rid=rid,
            sampling_params=SimpleNamespace(custom_params=None, ebnf_full_assistant=False, **sp),
            origin_input_ids=[1, 2],
            require_reasoning=False,
            grammar=None,
            grammar_key=None,
            grammar_wait_ct=0,
            aborted=None,
        )
        req.finished = lambda: req.aborted is not None
        req.set_finish_with_abort = lambda msg: setattr(req, "aborted", msg)
        return req

    good = request("good", json_schema=json.dumps(SCHEMAS[0]))
    bad = request("bad", regex="a(b")
    ebnf = request("ebnf", ebnf='root ::= "a" | "b" root')
    lark = request("lark", ebnf='start: "a" B\nB: /[0-9]+/\n%ignore " "')
    for r in (good, bad, ebnf, lark):
        assert manager.process_req_with_grammar(r)
    ready: list[Any] = []
    for _ in range(200):
        ready += manager.get_ready_grammar_requests()
        if not manager.grammar_queue:
            break
    assert {r.rid for r in ready} == {"good", "bad", "ebnf", "lark"}
    assert isinstance(good.grammar, TokensieveGrammar) and good.aborted is None
    assert isinstance(ebnf.grammar, TokensieveGrammar) and ebnf.aborted is None
    assert bad.aborted.startswith("Failed to compile regex grammar: invalid regex: RegexError")
    assert isinstance(lark.grammar, TokensieveGrammar) and lark.aborted is None
    # the same constraint again: a cache hit, a fresh copy, no queue
    again = request("again", json_schema=json.dumps(SCHEMAS[0]))
    assert not manager.process_req_with_grammar(again)
    assert isinstance(again.grammar, TokensieveGrammar) and again.grammar is not good.grammar
    bad_again = request("bad2", regex="a(b")
    assert not manager.process_req_with_grammar(bad_again)
    assert "RegexError" in bad_again.aborted


def test_plugin_entry_point_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's plugin loader calls the entry point's function with no arguments; simulate an
    installed ``tokensieve = tokensieve.sglang:register`` entry point."""
    import importlib.metadata as md

    import sglang.srt.plugins as plugins

    ep = md.EntryPoint(
        name="tokensieve", value="tokensieve.sglang:register", group="sglang.srt.plugins"
    )
    monkeypatch.setattr(
        plugins,
        "entry_points",
        lambda group: [ep] if group == plugins.GENERAL_PLUGINS_GROUP else [],
    )
    monkeypatch.setattr(plugins, "_plugins_loaded", False)
    GRAMMAR_BACKEND_REGISTRY.pop("tokensieve", None)
    plugins.load_plugins()
    assert GRAMMAR_BACKEND_REGISTRY["tokensieve"] is ts_backend.create_backend
    assert GRAMMAR_BACKEND_CHOICES.count("tokensieve") == 1


def test_module_imports_without_sglang() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['sglang'] = None\n"
        "import tokensieve.sglang as s\n"
        "try:\n    s.register()\nexcept ImportError as e:\n    print('ImportError', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ImportError")
