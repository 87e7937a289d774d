"""tokensieve.transformers: constrained model.generate() end to end, on a random tiny Llama.

A randomly initialized Llama-architecture model (2 layers, hidden size 64; nothing downloaded)
samples nearly uniformly among the allowed tokens, so every constraint here is bounded: its
longest match is shorter (in bytes, hence in tokens) than ``max_new_tokens``, and a row that did
not end with EOS is a failure. Outputs are decoded from the vocabulary's token bytes and, for the
Hugging Face tokenizer, cross-checked with ``tokenizer.decode``.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from shared_data import LLAMA3_DIR as LLAMA3  # noqa: E402

import tokensieve as ts  # noqa: E402
from tokensieve.transformers import (  # noqa: E402
    ChoiceLogitsProcessor,
    EBNFLogitsProcessor,
    JSONLogitsProcessor,
    LarkLogitsProcessor,
    RegexLogitsProcessor,
    StructuralTagLogitsProcessor,
    TransformersLogitsProcessor,
)

PADDED_VOCAB = 128

# Bounded regexes; the longest match of each is under MAX_NEW_TOKENS - 1 bytes.
REGEXES = [
    r"[a-z]{3,8}",
    r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    r"(yes|no|maybe)",
    r"-?[0-9]{1,6}(\.[0-9]{1,3})?",
    r'\{"id": [0-9]{1,3}, "ok": (true|false)\}',
    r"#[0-9a-f]{6}",
    r"[a-z]{1,6}@[a-z]{1,6}\.(com|org)",
    r"(\+1 )?[0-9]{3}-[0-9]{4}",
    r"[äöüß]{2,5}",
    r"((ab|cd){0,4})x{0,3}",
]
MAX_NEW_TOKENS = 40

# Bounded JSON Schemas. Numbers are avoided: every decimal spelling of a value is allowed
# (1, 1.0, 1.00, ...), which is unbounded. Strings may spell each character as a 6- or 12-byte
# escape, so the longest document here (the "name"/"tag" object) is about 125 bytes.
SCHEMAS: list[dict[str, Any]] = [
    {"type": "boolean"},
    {"enum": ["red", "green", "blue"]},
    {"const": {"a": True}},
    {"type": "string", "maxLength": 6},
    {"type": "string", "pattern": "^[a-z]{2,5}$"},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 3},
    {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "tag": {"enum": ["x", "y"]},
        },
        "required": ["name", "tag"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "p": {
                "type": "object",
                "properties": {"q": {"type": "null"}},
                "required": ["q"],
                "additionalProperties": False,
            }
        },
        "required": ["p"],
        "additionalProperties": False,
    },
    {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
]
JSON_MAX_NEW_TOKENS = 160

needs_json = pytest.mark.skipif(
    not hasattr(ts.Grammar, "from_json_schema"), reason="from_json_schema not available yet"
)


# --- fixtures ---------------------------------------------------------------------------------


class Setup:
    """A vocabulary, the matching random model, and a way to make prompts."""

    def __init__(self, vocab: ts.Vocabulary, tokenizer: Any | None) -> None:
        self.vocab = vocab
        self.tokenizer = tokenizer
        self.eos = vocab.eos_token_ids[0]
        self.regular = [i for i in range(min(vocab.tokenizer_size, 3000)) if vocab.token_bytes(i)]
        cfg = transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            # wider than the vocabulary: padded logits must be masked too
            vocab_size=vocab.vocab_size + PADDED_VOCAB,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=self.eos,
            pad_token_id=self.eos,
        )
        torch.manual_seed(0)
        self.model = transformers.LlamaForCausalLM(cfg).eval()

    def prompts(self, n: int) -> dict[str, Any]:
        """``n`` prompts of different lengths, left padded, with their attention mask."""
        texts = ["Answer:", "The value is", "Output", "Give me one, please:", "x", "Q: A:"]
        if self.tokenizer is not None:
            return dict(self.tokenizer([texts[i % len(texts)] for i in range(n)], padding=True))
        g = torch.Generator().manual_seed(n)
        lengths = [3 + (i * 2) % 5 for i in range(n)]
        width = max(lengths)
        ids = torch.full((n, width), self.eos, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, length in enumerate(lengths):
            pick = torch.randint(0, len(self.regular), (length,), generator=g)
            ids[i, width - length :] = torch.tensor(self.regular)[pick]
            mask[i, width - length :] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def generate(
        self, processor: Any, batch: int, max_new_tokens: int, seed: int, **kwargs: Any
    ) -> list[list[int]]:
        inputs = {k: torch.as_tensor(v) for k, v in self.prompts(batch).items()}
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self.model.generate(
                **inputs,
                logits_processor=[processor],
                do_sample=True,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                eos_token_id=self.vocab.eos_token_ids,
                pad_token_id=self.eos,
                **kwargs,
            )
        return [row.tolist() for row in out[:, inputs["input_ids"].shape[1] :]]

    def text(self, tokens: list[int]) -> str:
        """The output up to its first EOS; asserts there is one (the row finished)."""
        eos = set(self.vocab.eos_token_ids)
        cut = next((i for i, t in enumerate(tokens) if t in eos), None)
        assert cut is not None, f"row hit max_new_tokens before EOS: {tokens}"
        pieces = [self.vocab.token_bytes(t) for t in tokens[:cut]]
        assert all(p is not None for p in pieces), f"special or padding id sampled: {tokens}"
        text = b"".join(p for p in pieces if p is not None).decode("utf-8")
        if self.tokenizer is not None:
            assert self.tokenizer.decode(tokens[:cut]) == text
        return text


@functools.cache
def real_setup() -> Setup:
    """llama3 through ``transformers.AutoTokenizer`` when ../shared has it, else Tekken."""
    if (LLAMA3 / "tokenizer.json").is_file():
        tok = transformers.AutoTokenizer.from_pretrained(str(LLAMA3))
        tok.padding_side = "left"
        tok.pad_token = tok.eos_token
        return Setup(ts.Vocabulary.from_pretrained(tok), tok)
    # Visible in the test ids ("tekken"): the Hugging Face tokenizer run needs ../shared.
    return Setup(ts.Vocabulary.from_tekken(), None)


@functools.cache
def small_setup() -> Setup:
    """A 2,000-token byte-level vocabulary (Tekken's first merges): fast to sample from."""
    tekken = ts.Vocabulary.from_tekken()
    tokens = [tekken.token_bytes(i) or b"" for i in range(1000, 2999)] + [b"<eos>"]
    return Setup(ts.Vocabulary(tokens, eos_token_ids=[len(tokens) - 1]), None)


def _setup_id() -> str:
    return "llama3" if (LLAMA3 / "tokenizer.json").is_file() else "tekken"


@pytest.fixture(scope="module", params=[_setup_id()])
def setup(request: pytest.FixtureRequest) -> Setup:
    return real_setup()


# --- regexes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", range(len(REGEXES)))
def test_generate_regex(setup: Setup, k: int) -> None:
    pattern = REGEXES[k]
    source = setup.tokenizer if setup.tokenizer is not None else setup.vocab
    proc = RegexLogitsProcessor(pattern, source)
    outs = setup.generate(proc, batch=4, max_new_tokens=MAX_NEW_TOKENS, seed=k)
    assert len(outs) == 4
    for tokens in outs:
        text = setup.text(tokens)
        assert re.fullmatch(pattern, text), (pattern, text)


def test_generate_per_prompt_regexes_with_num_return_sequences(setup: Setup) -> None:
    patterns = [REGEXES[0], REGEXES[1], REGEXES[2], REGEXES[5]]
    grammars = [ts.Grammar.from_regex(p, setup.vocab) for p in patterns]
    proc = TransformersLogitsProcessor(grammars)
    outs = setup.generate(
        proc, batch=4, max_new_tokens=MAX_NEW_TOKENS, seed=99, num_return_sequences=2
    )
    assert len(outs) == 8
    for r, tokens in enumerate(outs):
        text = setup.text(tokens)
        assert re.fullmatch(patterns[r // 2], text), (r, patterns[r // 2], text)


def test_generate_beam_search_rebuilds_reordered_rows() -> None:
    s = small_setup()
    pattern = r"[a-z]{2,5}-[0-9]{1,3}"
    proc = RegexLogitsProcessor(pattern, s.vocab)
    inputs = {k: torch.as_tensor(v) for k, v in s.prompts(2).items()}
    with torch.no_grad():
        out = s.model.generate(
            **inputs,
            logits_processor=[proc],
            do_sample=False,
            num_beams=3,
            num_return_sequences=3,
            max_new_tokens=MAX_NEW_TOKENS,
            eos_token_id=s.vocab.eos_token_ids,
            pad_token_id=s.eos,
        )
    for row in out[:, inputs["input_ids"].shape[1] :].tolist():
        assert re.fullmatch(pattern, s.text(row))


def test_processor_reused_across_generate_calls_and_choice() -> None:
    s = small_setup()
    proc = ChoiceLogitsProcessor(["alpha", "beta", "gamma delta"], s.vocab)
    for seed in range(2):
        for tokens in s.generate(proc, batch=3, max_new_tokens=MAX_NEW_TOKENS, seed=seed):
            assert s.text(tokens) in ("alpha", "beta", "gamma delta")


# --- GBNF/EBNF grammars -----------------------------------------------------------------------


def nested(text: str) -> bool:
    """``root ::= "(" root ")" | "[" root "]" | "x"``, by recursive descent."""

    def parse(i: int) -> int:
        if text[i : i + 1] == "x":
            return i + 1
        if text[i : i + 1] in ("(", "["):
            j = parse(i + 1)
            if j >= 0 and text[j : j + 1] == (")" if text[i] == "(" else "]"):
                return j + 1
        return -1

    return parse(0) == len(text)


# (grammar, options, recognizer); each bounded below MAX_NEW_TOKENS - 1 bytes (the stack bound
# keeps the recursive one at most 5 levels deep)
GRAMMARS: list[tuple[str, dict[str, Any], Any]] = [
    ('root ::= "(" root ")" | "[" root "]" | "x"', {"max_stack_depth": 6}, nested),
    (
        'root ::= date " " hour\ndate ::= ("19" | "20") d d "-" ("0" [1-9] | "1" [0-2])\n'
        'd ::= [0-9]\nhour ::= [01] d ":" [0-5] d',
        {},
        lambda t: re.fullmatch(r"(19|20)[0-9]{2}-(0[1-9]|1[0-2]) [01][0-9]:[0-5][0-9]", t),
    ),
    (
        'greeting ::= ("hi" | "hello") " " name "!"?\nname ::= [A-Z] [a-z] [a-z]?',
        {"start": "greeting"},
        lambda t: re.fullmatch(r"(hi|hello) [A-Z][a-z]{1,2}!?", t),
    ),
]


@pytest.mark.parametrize("k", range(len(GRAMMARS)))
def test_generate_ebnf(setup: Setup, k: int) -> None:
    grammar, options, recognizes = GRAMMARS[k]
    source = setup.tokenizer if setup.tokenizer is not None else setup.vocab
    proc = EBNFLogitsProcessor(grammar, source, **options)
    for tokens in setup.generate(proc, batch=4, max_new_tokens=MAX_NEW_TOKENS, seed=200 + k):
        text = setup.text(tokens)
        assert recognizes(text), (grammar, text)


def test_generate_per_prompt_grammars_and_bad_grammars() -> None:
    s = small_setup()
    proc = EBNFLogitsProcessor([GRAMMARS[0][0], GRAMMARS[1][0]], s.vocab, max_stack_depth=6)
    outs = s.generate(proc, batch=2, max_new_tokens=MAX_NEW_TOKENS, seed=7, num_return_sequences=2)
    assert len(outs) == 4
    for r, tokens in enumerate(outs):
        assert GRAMMARS[r // 2][2](s.text(tokens)), (r, s.text(tokens))
    with pytest.raises(ts.GrammarError):  # no rule named root
        EBNFLogitsProcessor(GRAMMARS[2][0], s.vocab)
    # a grammar with no `name ::= ...` rule is Lark: read as such, not refused
    lark = EBNFLogitsProcessor('start: "a" | "b"', s.vocab)
    outs = s.generate(lark, batch=1, max_new_tokens=MAX_NEW_TOKENS, seed=3)
    assert s.text(outs[0]) in ("a", "b"), s.text(outs[0])
    # and as Lark by name, from another start rule
    named = LarkLogitsProcessor('start: "a"\nother: "b" | "c"', s.vocab, start="other")
    outs = s.generate(named, batch=1, max_new_tokens=MAX_NEW_TOKENS, seed=3)
    assert s.text(outs[0]) in ("b", "c"), s.text(outs[0])


def test_generate_structural_tag_tool_calls() -> None:
    """A forced tool call (a structural tag), sampled from a random model: the output is one
    whole call whose arguments are valid."""
    import json as _json

    s = small_setup()
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"],
    }
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<call>"],
            "tags": [
                {
                    "begin": "<call>",
                    "content": {"type": "json_schema", "json_schema": schema},
                    "end": "</call>",
                }
            ],
            "at_least_one": True,
            "stop_after_first": True,
        },
    }
    proc = StructuralTagLogitsProcessor([tag, _json.dumps(tag)], s.vocab)
    outs = s.generate(proc, batch=2, max_new_tokens=MAX_NEW_TOKENS, seed=11)
    for tokens in outs:
        text = s.text(tokens)  # finished: one whole call
        m = re.fullmatch(r"<call>(.*)</call>", text, re.S)
        assert m is not None, text
        assert 0 <= _json.loads(m.group(1))["n"] <= 9
    with pytest.raises(ts.GrammarError, match=r"\$\.format"):
        StructuralTagLogitsProcessor({"format": {"type": "nope"}}, s.vocab)


# --- the processor alone ----------------------------------------------------------------------


def _small() -> ts.Vocabulary:
    return ts.Vocabulary([b"a", b"b", b"ab", b"<eos>"], eos_token_ids=[3])


def _allowed(row: Any) -> set[int]:
    return {i for i, x in enumerate(row.tolist()) if x != float("-inf")}


def test_masks_padded_columns_finished_rows_and_off_grammar_tokens() -> None:
    v = _small()
    proc = TransformersLogitsProcessor(ts.Grammar.from_regex("ab?", v))
    prompt = torch.tensor([[9, 9], [9, 9], [9, 9]])
    scores = torch.zeros(3, 40)  # 36 padded columns past the 4-token vocabulary
    out = proc(prompt, scores.clone())
    assert all(_allowed(out[r]) == {0, 2} for r in range(3))
    step = torch.cat([prompt, torch.tensor([[0], [2], [1]])], dim=1)  # "a", "ab", "b" (off)
    out = proc(step, torch.zeros(3, 40))
    assert _allowed(out[0]) == {1, 3}  # after "a": "b" or EOS
    assert _allowed(out[1]) == {3}  # "ab" is complete: EOS only
    assert _allowed(out[2]) == {3}  # left the grammar: forced to EOS
    assert proc.guides[2].failed and not proc.guides[0].failed
    step = torch.cat([step, torch.tensor([[3], [3], [3]])], dim=1)
    out = proc(step, torch.zeros(3, 40))
    assert all(_allowed(out[r]) == {3} for r in range(3))  # finished: EOS only


def test_new_generation_is_detected() -> None:
    v = _small()
    proc = TransformersLogitsProcessor(ts.Grammar.from_regex("ab", v))
    proc(torch.tensor([[5]]), torch.zeros(1, 4))
    proc(torch.tensor([[5, 0]]), torch.zeros(1, 4))
    # One token longer but another prompt: a new generate() call, back at the start (not "ab"
    # finished, as feeding "b" to the old row would make it).
    out = proc(torch.tensor([[6, 0, 1]]), torch.zeros(1, 4))
    assert _allowed(out[0]) == {0, 2}


def test_grammar_list_must_fit_rows() -> None:
    v = _small()
    g = ts.Grammar.from_regex("a", v)
    proc = TransformersLogitsProcessor([g, g, g])
    with pytest.raises(ValueError, match="3 grammars for 4 rows"):
        proc(torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 4))
    other = ts.Grammar.from_regex("a", ts.Vocabulary([b"a", b"<e>"], eos_token_ids=[1]))
    with pytest.raises(ValueError, match="same vocabulary"):
        TransformersLogitsProcessor([g, other])


# --- one row's failure fails that row alone (issue #32) ---------------------------------------


class _BrokenGrammar:
    """Stands for a grammar whose matcher cannot be made (``error`` is raised)."""

    def __init__(self, grammar: ts.Grammar, error: BaseException) -> None:
        self.vocab = grammar.vocab
        self.error = error

    def matcher(self, **kwargs: Any) -> Any:
        raise self.error


class _BrokenMatcher:
    """Stands for a matcher every method of which raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def broken(*args: Any, **kwargs: Any) -> Any:
            raise self.error

        return broken


@pytest.mark.parametrize(
    "error", [RecursionError("deep"), MemoryError(), RuntimeError("boom"), TypeError("bad")]
)
def test_a_matcher_that_cannot_be_made_fails_its_row_alone(
    error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    v = _small()
    grammars = [ts.Grammar.from_regex(p, v) for p in ("ab?", "b", "a")]
    proc = TransformersLogitsProcessor(grammars)
    proc._grammars[1] = _BrokenGrammar(grammars[1], error)  # type: ignore[assignment]
    prompt = torch.tensor([[9], [9], [9]])
    with caplog.at_level("WARNING", logger="tokensieve"):
        out = proc(prompt, torch.zeros(3, 6))
    assert _allowed(out[0]) == {0, 2} and _allowed(out[2]) == {0}
    assert _allowed(out[1]) == {3}  # EOS only
    assert [g.failed for g in proc.guides] == [False, True, False]
    assert type(error).__name__ in (proc.guides[1].error or "")
    logged = [r for r in caplog.records if "row 1" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None  # with its traceback
    # the healthy rows go on; the failed one stays failed
    out = proc(torch.cat([prompt, torch.tensor([[0], [3], [0]])], dim=1), torch.zeros(3, 6))
    assert _allowed(out[0]) == {1, 3} and _allowed(out[1]) == {3} and _allowed(out[2]) == {3}


@pytest.mark.parametrize("error", [RecursionError("deep"), MemoryError(), RuntimeError("boom")])
def test_a_matcher_that_fails_mid_generation_fails_its_row_alone(error: BaseException) -> None:
    v = _small()
    proc = TransformersLogitsProcessor(ts.Grammar.from_regex("(ab)+", v))
    prompt = torch.tensor([[9], [9], [9]])
    proc(prompt, torch.zeros(3, 6))
    proc.guides[1].matcher = _BrokenMatcher(error)  # type: ignore[assignment]
    step = torch.cat([prompt, torch.tensor([[0], [0], [0]])], dim=1)
    out = proc(step, torch.zeros(3, 6))  # row 1 fails in feed()
    assert _allowed(out[0]) == {1} and _allowed(out[2]) == {1} and _allowed(out[1]) == {3}
    assert [g.failed for g in proc.guides] == [False, True, False]
    # beam search reorders rows: row 2 now holds another hypothesis (reset and replay)
    proc.guides[2].matcher = _BrokenMatcher(error)  # type: ignore[assignment]
    step = torch.cat([prompt, torch.tensor([[0, 1], [3, 3], [2, 2]])], dim=1)
    out = proc(step, torch.zeros(3, 6))
    assert _allowed(out[0]) == {0, 2, 3} and _allowed(out[1]) == {3} and _allowed(out[2]) == {3}
    assert [g.failed for g in proc.guides] == [False, True, True]


def test_fill_guides_fails_a_broken_pending_compile_alone() -> None:
    """A compile that finishes into a grammar whose matcher cannot be made, waited for inside
    fill_guides, fails that guide alone; so does a compile that raises anything."""
    from tokensieve.guides import RequestGuide, eos_only_row, fill_guides

    v = _small()
    good = ts.Grammar.from_regex("ab", v)

    class Done:
        def __init__(self, result: Any) -> None:
            self.value = result

        def done(self) -> bool:
            return False  # waited for in fill_guides, not at construction

        def result(self) -> Any:
            if isinstance(self.value, BaseException):
                raise self.value
            return self.value

    guides = [
        RequestGuide(None, pending=Done(good), label="a"),
        RequestGuide(None, pending=Done(_BrokenGrammar(good, MemoryError())), label="b"),
        RequestGuide(None, pending=Done(RecursionError("deep")), label="c"),
        RequestGuide(good, thinking_budget="x", label="d"),  # type: ignore[arg-type]
        RequestGuide(None, pending=Done(good), label="e"),
    ]
    bitmask = ts.allocate_token_bitmask(5, v.vocab_size)
    fill_guides(guides, range(5), bitmask, eos_only_row(v))
    assert [g.error is not None for g in guides] == [False, True, True, True, False]
    # "a" and "ab" for the healthy guides, EOS only for the failed ones
    assert [int(bitmask[r, 0]) & 0b1111 for r in range(5)] == [
        0b0101,
        0b1000,
        0b1000,
        0b1000,
        0b0101,
    ]
    assert "MemoryError" in (guides[1].error or "") and "RecursionError" in (guides[2].error or "")
    guides[1].reset()  # a failed compile stays failed
    assert guides[1].failed


# --- JSON Schemas -----------------------------------------------------------------------------


@needs_json
@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_generate_json_schema(setup: Setup, k: int) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = SCHEMAS[k]
    source = setup.tokenizer if setup.tokenizer is not None else setup.vocab
    proc = JSONLogitsProcessor(schema, source)
    outs = setup.generate(proc, batch=4, max_new_tokens=JSON_MAX_NEW_TOKENS, seed=100 + k)
    for tokens in outs:
        doc = json.loads(setup.text(tokens))
        jsonschema.validate(doc, schema)
