"""tokensieve as vLLM's structured-output backend, without vLLM: the request reader and the
grammar object vLLM's manager drives (``tokensieve.vllm.structured``).

Masks are checked bit for bit against brute force over a small vocabulary and a finite
language (every word listed), through random walks with draft validation and rollbacks; the
engine-level tests with vLLM's own manager are in ``tests/vllm``.
"""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from structured_params import so

import tokensieve as ts
from tokensieve.vllm.structured import (
    DraftStats,
    GrammarState,
    StopTokens,
    read_request,
    structured_args,
)

# single bytes, a few multi-byte tokens, a special token that spells nothing, two EOS ids
MULTI = [b"ab", b"abc", b"ca", b"bcb", b"cc", b"b,"]
TOKENS: list[bytes] = [bytes([b]) for b in range(256)] + MULTI + [b"<eos>", b"<eot>", b"<tool>"]
EOS, EOT, TOOL = 256 + len(MULTI), 257 + len(MULTI), 258 + len(MULTI)
VOCAB = ts.Vocabulary(TOKENS, eos_token_ids=[EOS, EOT], special_token_ids=[TOOL])
REGEX = r"(ab|c)(bc|a){0,2},?"


# the language of REGEX, listed
LANGUAGE = {
    (a + "".join(mid) + tail).encode()
    for a in ("ab", "c")
    for n in range(3)
    for mid in itertools.product(("bc", "a"), repeat=n)
    for tail in ("", ",")
}


def brute_row(text: bytes, stops: list[int]) -> set[int]:
    """Tokens allowed after `text`: those that keep it a prefix of a word; stops when complete."""
    allowed = {
        t
        for t, tok in enumerate(TOKENS)
        if t not in (EOS, EOT, TOOL)
        and t not in stops  # a stop id ends the output wherever it comes
        and any(w.startswith(text + tok) for w in LANGUAGE)
    }
    if text in LANGUAGE:
        allowed |= set(stops)
    return allowed


def row_set(bitmask: Any, index: int = 0) -> set[int]:
    words_ = np.asarray(bitmask[index]).view(np.uint32)
    return {w * 32 + b for w, v in enumerate(words_.tolist()) for b in range(32) if v >> b & 1} - {
        t for t in range(VOCAB.vocab_size, len(words_) * 32)
    }


def new_state(stop_ids: list[int] | None = None, stats: DraftStats | None = None) -> GrammarState:
    grammar = ts.Grammar.from_regex(REGEX, VOCAB)
    return GrammarState(
        grammar, stop=StopTokens(VOCAB, stop_ids), label="t", max_rollback=8, draft_stats=stats
    )


def text_of(ids: list[int]) -> bytes:
    return b"".join(TOKENS[t] for t in ids)


def valid_prefix(done: list[int], drafts: list[int], stops: list[int]) -> list[int]:
    """The longest prefix of drafts a correct grammar accepts after `done` (up to a stop)."""
    out: list[int] = []
    for t in drafts:
        text = text_of(done + out)
        if t not in brute_row(text, stops):
            break
        out.append(t)
        if t in stops:
            break
    return out


@pytest.mark.parametrize(
    "stop_ids",
    [None, [EOS], [EOS, EOT, ord("z")], [EOT], [ord("a")]],
    ids=["vocab-eos", "one-eos", "extra-text-stop", "missing-eos", "stop-is-grammar-text"],
)
def test_random_walks_match_brute_force(stop_ids: list[int] | None) -> None:
    stops = sorted(set(stop_ids)) if stop_ids else [EOS, EOT]
    rng = random.Random(7)
    bitmask = ts.allocate_token_bitmask(4, VOCAB.vocab_size)
    stats = DraftStats()
    checked = 0
    for _ in range(60):
        state = new_state(stop_ids, stats)
        done: list[int] = []
        while not state.is_terminated():
            state.fill_bitmask(bitmask, 2)
            want = brute_row(text_of(done), stops)
            assert row_set(bitmask, 2) == want, (text_of(done), stops)
            checked += 1
            # drafts: a mix of allowed and arbitrary tokens, judged without advancing
            drafts = [
                rng.choice(sorted(want)) if rng.random() < 0.7 else rng.randrange(len(TOKENS))
                for _ in range(rng.randrange(5))
            ]
            assert state.validate_tokens(drafts) == valid_prefix(done, drafts, stops)
            state.fill_bitmask(bitmask, 3)
            assert row_set(bitmask, 3) == want  # validate_tokens did not move the state
            # the manager's draft rows: accept each draft, fill, then roll all back
            good = valid_prefix(done, drafts, stops)
            for k, t in enumerate(good):
                assert state.accept_tokens("t", [t])
                if state.is_terminated():
                    break
                state.fill_bitmask(bitmask, 1)
                assert row_set(bitmask, 1) == brute_row(text_of(done + good[: k + 1]), stops)
            state.rollback(state.num_processed_tokens - len(done))
            state.fill_bitmask(bitmask, 0)
            assert row_set(bitmask, 0) == want
            token = rng.choice(sorted(want))
            assert state.accept_tokens("t", [token])
            done.append(token)
        assert done[-1] in stops
        assert text_of(done[:-1]) in LANGUAGE
        # tokens after the end are ignored, as vLLM expects
        assert state.accept_tokens("t", [ord("q")])
    assert checked > 200
    assert stats.offered > stats.valid > 0 and stats.calls >= checked


def test_refused_token_fails_the_request_and_later_rows_allow_only_stops() -> None:
    state = new_state([EOS, ord("z")])
    bitmask = ts.allocate_token_bitmask(1, VOCAB.vocab_size)
    assert not state.accept_tokens("t", [ord("q")])
    assert state.error is not None and "not allowed" in state.error
    state.fill_bitmask(bitmask, 0)
    assert row_set(bitmask, 0) == {EOS, ord("z")}
    assert not state.accept_tokens("t", [ord("a")])  # stays failed: vLLM ends it with an error
    assert state.validate_tokens([ord("a")]) == []


def test_a_mask_that_fails_is_a_stop_row_and_an_error_never_an_exception() -> None:
    class Broken:
        def fill_next_token_bitmask(self, bitmask: Any, index: int) -> None:
            raise ts.BudgetError("mask cache over budget")

        def is_finished(self) -> bool:
            return False

    state = new_state()
    state.matcher = Broken()  # type: ignore[assignment]
    bitmask = ts.allocate_token_bitmask(2, VOCAB.vocab_size)
    state.fill_bitmask(bitmask, 1)
    assert row_set(bitmask, 1) == {EOS, EOT}
    assert row_set(bitmask, 0) == set(range(VOCAB.vocab_size))  # the other row untouched
    assert not state.accept_tokens("t", [EOS])
    assert "BudgetError" in (state.error or "")


def test_rollback_past_the_history_fails_the_request_alone() -> None:
    state = new_state()
    assert state.accept_tokens("t", [ord("a"), ord("b")])
    state.rollback(5)
    assert state.error is not None
    assert not state.accept_tokens("t", [ord("a")])


def test_structured_outputs_fields_become_constraints() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    a = structured_args(so(json=schema), None).constraint
    b = structured_args(
        so(json='{"type": "object", "properties": {"a": {"type": "integer"}}}'), None
    )
    assert a is not None and b.constraint is not None
    assert a.kind == "json_schema" and a.key == b.constraint.key
    assert a.name == "structured_outputs.json"
    c = structured_args(so(regex="[0-9]+"), None).constraint
    assert c is not None and (c.kind, c.value) == ("regex", "[0-9]+")
    d = structured_args(so(choice=["x", "y z"]), None).constraint
    assert d is not None and (d.kind, d.value) == ("choice", ("x", "y z"))
    e = structured_args(so(json_object=True), None).constraint
    assert e is not None and e.kind == "json_object"
    f = structured_args(so(grammar='root ::= "a" | "b"'), {"guided_start": "root"}).constraint
    assert f is not None and (f.kind, f.value) == ("ebnf", 'root ::= "a" | "b"')
    assert f.name == "structured_outputs.grammar" and dict(f.options) == {"start": "root"}


def test_vllm_knobs_and_guided_options_reach_the_compile() -> None:
    c = structured_args(so(json={}, disable_any_whitespace=True), None).constraint
    assert c is not None and dict(c.options) == {"whitespace": "compact"}
    c = structured_args(so(json={}, whitespace_pattern="[ ]?"), None).constraint
    assert c is not None and dict(c.options) == {"whitespace": "[ ]?"}
    c = structured_args(so(json_object=True, disable_additional_properties=True), None).constraint
    assert c is not None and dict(c.options) == {"additional_properties": "forbid"}
    c = structured_args(
        so(json={}), {"guided_max_states": "1000", "guided_formats": "annotate", "other": 1}
    ).constraint
    assert c is not None and dict(c.options) == {"max_states": 1000, "formats": "annotate"}
    # the knobs apply to JSON only; a regex ignores them as vLLM's backends do
    c = structured_args(so(regex="a", disable_any_whitespace=True), None).constraint
    assert c is not None and c.options == ()
    # compiled: compact output only
    grammar = ts.Grammar.from_json_schema({"type": "array"}, VOCAB, whitespace="compact")
    m = grammar.matcher()
    assert m.accept_tokens(list(b"[1,2]")) == 5
    assert (
        not ts.Grammar.from_json_schema({"type": "array"}, VOCAB, whitespace="compact")
        .matcher()
        .accept_tokens(list(b"[1, 2]"))
        == 6
    )


@pytest.mark.parametrize(
    "fields, extra, message",
    [
        (dict(grammar='root ::= "a"', json={}), None, "more than one constraint: json, grammar"),
        (dict(grammar='root ::= "a"'), {"guided_grammar": "x"}, "send the constraint once"),
        (dict(grammar='root ::= "a"'), {"guided_whitespace": "compact"}, "JSON constraints only"),
        (dict(regex="a"), {"guided_start": "x"}, "apply to grammars (ebnf, lark) only"),
        (dict(grammar=7), None, "structured_outputs.grammar must be a string"),
        (
            dict(structural_tag="[1]"),
            None,
            "structured_outputs.structural_tag must be a structural",
        ),
        ({}, None, "has no constraint"),
        (dict(json={}, regex="a"), None, "more than one constraint: json, regex"),
        (dict(json_object=False), None, "json_object must be true"),
        (dict(json={}), {"guided_json": {}}, "send the constraint once"),
        (dict(json={}, disable_any_whitespace=True, whitespace_pattern=" "), None, "contradict"),
        (
            dict(json={}, disable_any_whitespace=True),
            {"guided_whitespace": "flexible"},
            "contradict",
        ),
        (dict(json='{"type": '), None, "structured_outputs.json is not valid JSON"),
        (dict(choice=[]), None, "structured_outputs.choice"),
        (dict(regex=5), None, "structured_outputs.regex must be a string"),
        (dict(json={}), {"guided_bogus": 1}, "unsupported option(s) 'guided_bogus'"),
    ],
)
def test_bad_requests_are_refused_with_a_message(
    fields: dict[str, Any], extra: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ValueError) as e:
        structured_args(so(**fields), extra)
    assert message in str(e.value)


def test_a_lark_grammar_is_read_as_lark() -> None:
    # vLLM's own dialect test (no `name ::= ...` rule), the one its built-in backends use
    args = structured_args(so(grammar='start: "a" | NUMBER\n// root ::= x'), None)
    assert args.constraint.kind == "lark"
    args = structured_args(so(grammar='root ::= "a"'), None)
    assert args.constraint.kind == "ebnf"


def test_read_request_checks_sampling_and_reasoning() -> None:
    params = SimpleNamespace(structured_outputs=so(regex="a+"), extra_args=None, min_tokens=3)
    with pytest.raises(ValueError, match="min_tokens=3"):
        read_request(params)
    params = SimpleNamespace(
        structured_outputs=so(regex="a+"),
        extra_args={"guided_reasoning_end": "</think>", "guided_thinking_budget": 16},
        min_tokens=0,
        max_tokens=50,
    )
    req = read_request(params)
    assert (req.reasoning_end, req.thinking_budget) == ("</think>", 16)
    with pytest.raises(ValueError, match="--reasoning-parser"):
        read_request(params, engine_reasoning=True)
    params = SimpleNamespace(
        structured_outputs=so(regex="a+"),
        extra_args={"guided_fit_max_tokens": True},
        min_tokens=0,
        max_tokens=50,
    )
    assert read_request(params).max_tokens == 50
    with pytest.raises(ValueError, match="--reasoning-parser"):
        read_request(params, engine_reasoning=True)
    params = SimpleNamespace(
        structured_outputs=so(regex="a+"), extra_args={"guided_max_states": 10**12}, min_tokens=0
    )
    with pytest.raises(ValueError, match="above this server's limit"):
        read_request(params)


def test_a_server_default_for_fit_max_tokens_yields_to_the_request() -> None:
    def params(extra: dict[str, Any] | None) -> SimpleNamespace:
        return SimpleNamespace(
            structured_outputs=so(json={}), extra_args=extra, min_tokens=0, max_tokens=40
        )

    assert read_request(params(None)).max_tokens is None
    assert read_request(params(None), fit_default=True).max_tokens == 40
    assert (
        read_request(params({"guided_fit_max_tokens": False}), fit_default=True).max_tokens is None
    )
    # not under a reasoning parser, nor beside the request's own reasoning span
    assert read_request(params(None), fit_default=True, engine_reasoning=True).max_tokens is None
    spanned = read_request(params({"guided_reasoning_end": "</think>"}), fit_default=True)
    assert spanned.max_tokens is None and spanned.reasoning_end == "</think>"


def test_structural_tags_fit_max_tokens_by_default() -> None:
    """Tool calls (structural tags) keep their output finishable within max_tokens unless the
    request or the server says otherwise; other kinds do not by default."""
    tag = '{"format": {"type": "const_string", "value": "x"}}'

    def params(extra: dict[str, Any] | None, **kind: Any) -> SimpleNamespace:
        return SimpleNamespace(
            structured_outputs=so(**kind), extra_args=extra, min_tokens=0, max_tokens=40
        )

    assert read_request(params(None, structural_tag=tag), tag_fit_default=True).max_tokens == 40
    assert read_request(params(None, json={}), tag_fit_default=True).max_tokens is None
    off = params({"guided_fit_max_tokens": False}, structural_tag=tag)
    assert read_request(off, tag_fit_default=True).max_tokens is None
    assert read_request(params(None, structural_tag=tag)).max_tokens is None  # server: 0
    reasoning = read_request(
        params(None, structural_tag=tag), tag_fit_default=True, engine_reasoning=True
    )
    assert reasoning.max_tokens is None


def test_stop_tokens_outside_the_vocabulary_are_ignored() -> None:
    stop = StopTokens(VOCAB, [EOS, 10**9, -1])
    assert stop.stops == [EOS] and stop.missing == [EOT] and stop.extra == []
    assert StopTokens(VOCAB, []).plain and StopTokens(VOCAB, None).plain


def test_rows_filled_from_many_threads_equal_serial_fills() -> None:
    """vLLM's manager fills rows from a thread pool above 128 structured requests."""
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(3)
    states = []
    for i in range(160):
        state = new_state([EOS, ord("z")] if i % 3 == 0 else None)
        done: list[int] = []
        for _ in range(rng.randrange(4)):
            state.fill_bitmask(ts.allocate_token_bitmask(1, VOCAB.vocab_size), 0)
            options = sorted(brute_row(text_of(done), state.stop.stops) - set(state.stop.stops))
            if not options:
                break
            token = rng.choice(options)
            assert state.accept_tokens("t", [token])
            done.append(token)
        states.append(state)
    serial = ts.allocate_token_bitmask(len(states), VOCAB.vocab_size)
    for i, state in enumerate(states):
        state.fill_bitmask(serial, i)
    parallel = ts.allocate_token_bitmask(len(states), VOCAB.vocab_size)
    with ThreadPoolExecutor(8) as pool:
        batches = [list(range(k, min(k + 16, len(states)))) for k in range(0, len(states), 16)]
        list(pool.map(lambda rows: [states[i].fill_bitmask(parallel, i) for i in rows], batches))
    assert (np.asarray(serial) == np.asarray(parallel)).all()
