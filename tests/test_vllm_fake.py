"""tokensieve.vllm without vLLM: the V1 processor driven by a fake engine loop.

The stand-ins below mirror vLLM's field names (``BatchUpdate.removed/added/moved``,
``MoveDirectionality.UNIDIRECTIONAL/SWAP``, ``SamplingParams.extra_args``). :class:`FakeEngine`
is a reference model of vLLM's persistent batch: requests join (into holes first, like vLLM),
finish, get preempted and resumed with their output so far, the batch is condensed with one-way
moves and shuffled with swaps, and each step the engine samples from the processor's masked
logits and appends to the request's live output list. After every step, each constrained row's
``-inf`` pattern must equal what a fresh matcher fed that row's tokens allows; unconstrained rows
must be untouched. ``tests/vllm/test_vllm_real.py`` drives the same loop with vLLM's own classes.
"""

from __future__ import annotations

import enum
import json
import logging
import random
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tokensieve as ts  # noqa: E402
from tokensieve.vllm import (  # noqa: E402
    GRAMMAR_CACHE,
    GrammarCache,
    GuidedLogitsProcessor,
    GuidedLogitsProcessorV1,
    constraint_from_extra_args,
    set_default_vocabulary,
)
from tokensieve.vllm.constraints import validation_vocabulary  # noqa: E402

# --- stand-ins for vLLM's classes -------------------------------------------------------------


class MoveDirectionality(enum.Enum):
    UNIDIRECTIONAL = enum.auto()
    SWAP = enum.auto()


@dataclass(frozen=True)
class BatchUpdate:
    batch_size: int
    removed: Sequence[int]
    added: Sequence[tuple[int, Any, list[int] | None, list[int]]]
    moved: Sequence[tuple[int, int, MoveDirectionality]]


@dataclass
class SamplingParams:
    extra_args: dict[str, Any] | None = None
    min_tokens: int = 0
    max_tokens: int | None = 16


class BatchUpdateBuilder:
    """vLLM's builder, reduced to what the engine loop uses: removed indices are kept sorted
    descending; ``pop_removed``/``peek_removed`` give the lowest hole, which an add or a
    condensing move then fills (so it is no longer reported as removed)."""

    def __init__(self) -> None:
        self._removed: list[int] = []
        self.added: list[Any] = []
        self.moved: list[Any] = []

    def removed_append(self, index: int) -> None:
        self._removed.append(index)

    @property
    def removed(self) -> list[int]:
        self._removed.sort(reverse=True)
        return self._removed

    def peek_removed(self) -> int | None:
        return self.removed[-1] if self._removed else None

    def pop_removed(self) -> int | None:
        return self.removed.pop() if self._removed else None

    def get_and_reset(self, batch_size: int) -> BatchUpdate | None:
        if not (self._removed or self.added or self.moved):
            return None
        update = BatchUpdate(batch_size, self.removed, self.added, self.moved)
        self._removed, self.added, self.moved = [], [], []
        return update


@dataclass(frozen=True)
class VllmApi:
    """The classes a fake engine builds its messages with (stand-ins, or vLLM's own)."""

    builder: Callable[[], Any]
    unidirectional: Any
    swap: Any
    sampling_params: Callable[..., Any]


FAKE_API = VllmApi(
    BatchUpdateBuilder,
    MoveDirectionality.UNIDIRECTIONAL,
    MoveDirectionality.SWAP,
    SamplingParams,
)

# --- a small vocabulary -----------------------------------------------------------------------

TOKENS = [b"a", b"b", b"c", b"ab", b"bc", b"abc", b"0", b"1", b"01", b"-", b'"', b" "]
EOS = len(TOKENS)  # 12
SPECIAL = EOS + 1  # 13: never allowed
WIDTH = 40  # logits wider than the vocabulary: ids 14.. are padding


def small_vocab() -> ts.Vocabulary:
    return ts.Vocabulary(
        [*TOKENS, b"<eos>", b"<ctl>"], eos_token_ids=[EOS], special_token_ids=[SPECIAL]
    )


VOCAB = small_vocab()

# extra_args pool; None entries are unconstrained requests.
CONSTRAINTS: list[dict[str, Any] | None] = [
    {"guided_regex": "(ab|c)*0"},
    {"guided_regex": "[abc]{1,5}-[01]{1,3}"},
    {"guided_regex": '"[abc ]{0,6}"'},
    {"guided_choice": ["ab", "ba", "c-0"]},
    {"guided_choice": '["a", "bc", "abc"]'},  # a JSON string, as vllm_xargs may send it
    {"guided_regex": "a+b*", "guided_max_states": "1000"},  # an option given as a string
    {"guided_regex": "(0|1){2,}"},
    # grammars: a^n c b^n (context-free), and a start rule other than root
    {"guided_grammar": 'root ::= "a" root "b" | "c"'},
    {"guided_grammar": 'root ::= "-"\nbits ::= ("0" | "1") bits | "-"', "guided_start": "bits"},
    None,
    {},
    {"unrelated": 1},
]


def reference_allowed(
    grammar: ts.Grammar | None, tokens: Sequence[int], eos: int = EOS
) -> set[int]:
    """What a fresh matcher fed ``tokens`` allows (EOS only when it cannot follow them)."""
    if grammar is None:
        return {eos}
    m = grammar.matcher()
    for t in tokens:
        if m.is_finished():
            break
        if not m.accept_token(t):
            return {eos}
    size = grammar.vocab.vocab_size
    bm = ts.allocate_token_bitmask(1, size)
    m.fill_next_token_bitmask(bm)
    bits = np.unpackbits(np.asarray(bm[0]).view(np.uint8), bitorder="little")[:size]
    return set(np.flatnonzero(bits).tolist())


def finite(row: Any) -> set[int]:
    return set(torch.isfinite(row).nonzero().flatten().tolist())


# --- the fake engine --------------------------------------------------------------------------


@dataclass
class Request:
    rid: int
    extra_args: dict[str, Any] | None
    grammar: ts.Grammar | None  # the reference's own compile (None: unconstrained)
    max_tokens: int
    eos: int = EOS
    output: list[int] = field(default_factory=list)
    forced_eos: bool = False  # the test expects this request to be forced to EOS

    @property
    def constrained(self) -> bool:
        try:
            return constraint_from_extra_args(self.extra_args) is not None
        except ValueError:  # malformed: the processor owns the row (and forces EOS)
            return True

    @property
    def done(self) -> bool:
        return (
            bool(self.output) and self.output[-1] == self.eos or len(self.output) >= self.max_tokens
        )


class FakeEngine:
    """A reference model of vLLM's persistent batch around one V1 logits processor."""

    def __init__(
        self,
        processor: Any,
        vocab: ts.Vocabulary,
        api: VllmApi = FAKE_API,
        seed: int = 0,
        max_batch: int = 8,
        width: int | None = None,
    ) -> None:
        self.proc = processor
        self.vocab = vocab
        self.api = api
        self.rng = random.Random(seed)
        self.max_batch = max_batch
        self.width = width or vocab.vocab_size
        self.slots: list[Request | None] = []
        self.preempted: list[Request] = []
        self.finished: list[Request] = []
        self.next_rid = 0
        self.steps = 0
        self.checked_rows = 0

    def new_request(
        self, extra_args: dict[str, Any] | None, max_tokens: int = 12, forced_eos: bool = False
    ) -> Request:
        grammar = None
        if not forced_eos:
            c = constraint_from_extra_args(extra_args)
            grammar = GRAMMAR_CACHE.get(c, self.vocab) if c is not None else None
        eos = self.vocab.eos_token_ids[0]
        req = Request(self.next_rid, extra_args, grammar, max_tokens, eos, forced_eos=forced_eos)
        self.next_rid += 1
        return req

    def _params(self, req: Request) -> Any:
        return self.api.sampling_params(extra_args=req.extra_args)

    # One scheduler step, built the way vLLM's InputBatch does: removals registered first, adds
    # fill the lowest holes, then condensing one-way moves fill the rest; swaps reorder.
    def schedule(self, arrivals: list[Request], churn: float = 0.1) -> Any:
        b = self.api.builder()
        rng = self.rng
        for i, req in enumerate(self.slots):
            if req is None:
                continue
            if req.done:
                self.finished.append(req)
            elif rng.random() < churn / 2:
                self.preempted.append(req)  # resumed later with its output so far
            else:
                continue
            self.slots[i] = None
            b.removed_append(i)
        joining = list(arrivals)
        while self.preempted and rng.random() < 0.5:
            joining.append(self.preempted.pop(rng.randrange(len(self.preempted))))
        for req in joining:
            i = b.pop_removed()
            if i is None:
                if len(self.slots) < self.max_batch:
                    self.slots.append(None)
                    i = len(self.slots) - 1
                elif rng.random() < churn:  # an add replacing a running request
                    i = rng.randrange(len(self.slots))
                    victim = self.slots[i]
                    assert victim is not None
                    self.preempted.append(victim)
                else:
                    self.preempted.append(req)
                    continue
            self.slots[i] = req
            b.added.append((i, self._params(req), [7, 7, 7], req.output))
        while b.removed:  # condense: the last request moves down into the lowest hole
            last = max((i for i, r in enumerate(self.slots) if r is not None), default=-1)
            empty = b.peek_removed()
            if empty >= last:
                break
            b.pop_removed()
            self.slots[empty], self.slots[last] = self.slots[last], None
            b.moved.append((last, empty, self.api.unidirectional))
        while self.slots and self.slots[-1] is None:
            self.slots.pop()
        for _ in range(rng.randrange(3)):
            if len(self.slots) >= 2:
                x, y = rng.sample(range(len(self.slots)), 2)
                self.slots[x], self.slots[y] = self.slots[y], self.slots[x]
                b.moved.append((x, y, self.api.swap))
        return b.get_and_reset(len(self.slots))

    def step(
        self,
        arrivals: list[Request],
        logits: Any | None = None,
        churn: float = 0.1,
        check: bool = True,
        corrupt: Request | None = None,
    ) -> None:
        self.proc.update_state(self.schedule(arrivals, churn))
        self.steps += 1
        n = len(self.slots)
        if n == 0:
            return
        if logits is None:
            logits = torch.randn(n, self.width)
        original = logits.clone()
        out = self.proc.apply(logits)
        for i, req in enumerate(self.slots):
            assert req is not None
            if not check:
                continue
            if not req.constrained:
                assert torch.equal(out[i], original[i]), f"unconstrained row {i} was modified"
                continue
            grammar = None if req.forced_eos else req.grammar
            expected = reference_allowed(grammar, req.output, req.eos)
            got = finite(out[i])
            assert got == expected, (self.steps, i, req.rid, req.extra_args, req.output)
            self.checked_rows += 1
        self.sample(out, corrupt)

    def sample(self, logits: Any, corrupt: Request | None = None) -> None:
        """Pick a finite-logit token per row (uniformly), append it to the live output list."""
        for i, req in enumerate(self.slots):
            assert req is not None
            if req.done:
                continue
            choices = sorted(finite(logits[i]))
            token = choices[self.rng.randrange(len(choices))]
            if req is corrupt:
                token = SPECIAL  # the engine appends a token the mask did not allow
            req.output.append(token)


def v1_processor(vocab: ts.Vocabulary = VOCAB) -> Any:
    cls = GuidedLogitsProcessorV1.with_vocabulary(vocab)
    return cls(None, "cpu", False)


# --- the random walk --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_random_batch_walk_matches_reference(seed: int) -> None:
    proc = v1_processor()
    eng = FakeEngine(proc, VOCAB, seed=seed, width=WIDTH)
    rng = random.Random(1000 + seed)
    for _ in range(4000):
        arrivals = [
            eng.new_request(rng.choice(CONSTRAINTS), max_tokens=rng.randrange(1, 16))
            for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))
        ]
        eng.step(arrivals)
    assert eng.checked_rows > 10000
    assert len(eng.finished) > 500
    # the processor's view matches the engine's
    assert proc.constrained_rows == [i for i, r in enumerate(eng.slots) if r and r.constrained]
    # constrained requests that finished did so inside their language
    for req in eng.finished:
        if req.grammar is not None and req.output and req.output[-1] == EOS:
            m = req.grammar.matcher()
            assert m.accept_tokens(req.output) == len(req.output) and m.is_finished()


def test_one_class_serves_both_runners() -> None:
    # the V1 runner builds cls(vllm_config, device, is_pin_memory): a V1 processor comes back,
    # with the class's vocabulary and cache
    cls = GuidedLogitsProcessor.with_vocabulary(VOCAB)
    proc = cls(None, "cpu", False)
    assert isinstance(proc, GuidedLogitsProcessorV1) and proc.vocab is VOCAB
    assert type(proc) is cls.for_v1_runner() and cls.for_v1_runner().cache is cls.cache
    eng = FakeEngine(proc, VOCAB, seed=3, width=WIDTH)
    rng = random.Random(3)
    for _ in range(500):
        eng.step([eng.new_request(rng.choice(CONSTRAINTS), max_tokens=8) for _ in range(2)])
    assert eng.checked_rows > 1000
    # the V2 runner builds cls(vllm_config, req_states): this class itself
    batch = V2Batch(GuidedLogitsProcessor, VOCAB)
    assert type(batch.proc).__mro__[1] is GuidedLogitsProcessor
    with pytest.raises(TypeError, match="V2 model runner"):
        batch.proc.update_state(None)


def test_the_v1_twin_carries_every_setting() -> None:
    cls = (
        GuidedLogitsProcessor.with_vocabulary(VOCAB)
        .with_reasoning("--", 3)
        .with_client_limits(max_states=123)
    )
    twin = cls.for_v1_runner()
    assert issubclass(twin, GuidedLogitsProcessorV1)
    for name in cls.SETTINGS:
        assert getattr(twin, name) == getattr(cls, name), name
    assert twin.reasoning_end == "--" and twin.thinking_budget == 3
    assert twin.client_limits["max_states"] == 123


def test_padded_logits_and_finished_grammar_allow_only_eos() -> None:
    proc = v1_processor()
    out: list[int] = []
    proc.update_state(
        BatchUpdate(1, [], [(0, SamplingParams({"guided_regex": "ab"}), [], out)], [])
    )
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {0, 3}  # "a", "ab"; no padding ids
    out.append(3)  # "ab": complete
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {EOS}
    out.append(EOS)
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {EOS}


def test_untouched_when_nothing_is_constrained() -> None:
    proc = v1_processor()
    assert proc.is_argmax_invariant() is False
    logits = torch.randn(3, WIDTH)
    assert proc.apply(logits) is logits
    eng = FakeEngine(proc, VOCAB, width=WIDTH)
    eng.step([eng.new_request(None), eng.new_request({"other": "x"})])
    logits = torch.randn(2, WIDTH)
    before = logits.clone()
    assert torch.equal(proc.apply(logits), before)


def test_add_replaces_state_and_moves() -> None:
    proc = v1_processor()
    p_ab = SamplingParams({"guided_regex": "ab"})
    p_c = SamplingParams({"guided_regex": "c0"})
    out0: list[int] = []
    out1: list[int] = [2]  # "c" already generated (a resumed request)
    proc.update_state(BatchUpdate(2, [], [(0, p_ab, None, out0), (1, p_c, None, out1)], []))
    assert [finite(r) for r in proc.apply(torch.zeros(2, WIDTH))] == [{0, 3}, {6}]
    # swap, then a one-way move onto an occupied index (its state is discarded)
    proc.update_state(BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]))
    assert [finite(r) for r in proc.apply(torch.zeros(2, WIDTH))] == [{6}, {0, 3}]
    proc.update_state(BatchUpdate(1, [], [], [(1, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    assert proc.constrained_rows == [0]
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {0, 3}
    # an add at an occupied index replaces it; an unconstrained add clears it
    proc.update_state(BatchUpdate(1, [], [(0, p_c, None, [])], []))
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {2}
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(None), None, [])], []))
    assert proc.constrained_rows == []
    # removes come before adds: remove 0 and add at 0 in one update keeps the new request
    proc.update_state(BatchUpdate(1, [], [(0, p_ab, None, [])], []))
    proc.update_state(BatchUpdate(1, [0], [(0, p_c, None, [])], []))
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {2}


def test_live_output_list_is_read_by_reference() -> None:
    proc = v1_processor()
    out: list[int] = []
    proc.update_state(
        BatchUpdate(1, [], [(0, SamplingParams({"guided_regex": "abc0"}), [], out)], [])
    )
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {0, 3, 5}
    out.extend([0, 1])  # two tokens appended between steps (e.g. accepted drafts)
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {2}
    out.append(-1)  # an async-scheduling placeholder is not consumed
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {2}
    out[-1] = 2
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {6}
    del out[1:]  # tokens discarded: the matcher rewinds
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {1, 4}


# --- admission (validate_params) --------------------------------------------------------------

BAD_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({"guided_regex": "a(?=b)"}, "look-around"),
    ({"guided_regex": "(ab"}, "guided_regex"),
    ({"guided_regex": 12}, "guided_regex must be a string"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "at most one of"),
    ({"guided_whitespace": "compact"}, "without a constraint"),
    ({"guided_choice": []}, "non-empty list"),
    ({"guided_choice": "not json"}, "guided_choice must be a list"),
    ({"guided_choice": ["a", 1]}, "strings only"),
    ({"guided_json": "{not json"}, "guided_json is not valid JSON"),
    ({"guided_json": 3}, "JSON Schema"),
    ({"guided_regex": "a", "guided_no_such_option": 1}, "unsupported option"),
    ({"guided_regex": "[ab]{1,200}[ab]{1,200}", "guided_max_nfa_bytes": "100"}, "BudgetError"),
    ({"guided_regex": "[ab]{1,200}", "guided_max_states": 2}, "max_states"),
    # hostile input: each a client error, before anything large is built
    ({"guided_json": {"const": "x" * 10_000_000}}, "const/enum values"),
    ({"guided_json": '{"type": "number", "maximum": 1e100000}'}, "exponent"),
    ({"guided_json": {"type": "number", "maximum": True}}, "maximum must be a number"),
    ({"guided_json": {"type": "number", "maximum": float("nan")}}, "JSON"),
    (
        {
            "guided_json": {"enum": [f"m{i}" for i in range(100_000)]},
            "guided_max_compile_seconds": 0.001,
        },
        "max_compile_seconds",
    ),
    ({"guided_json": '{"not": ' * 300 + "{}" + "}" * 300}, "nests more than 128 levels"),
    # a Lark grammar is read as Lark: its errors are the core's, with a position
    ({"guided_grammar": 'start: "a" | B'}, "line 1, column 14: the terminal `B` is not defined"),
    ({"guided_grammar": 'root ::= "a" ('}, "invalid guided_grammar: GrammarError"),
    ({"guided_grammar": 'root ::= "a"', "guided_start": "nowhere"}, "nowhere"),
    ({"guided_grammar": 'root ::= "a"', "guided_whitespace": "compact"}, "JSON constraints only"),
]


@pytest.mark.parametrize("extra_args,message", BAD_REQUESTS)
def test_validate_params_rejects_with_a_client_message(
    extra_args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        GuidedLogitsProcessorV1.validate_params(SamplingParams(extra_args))
    with pytest.raises(ValueError, match=re.escape(message)):
        GuidedLogitsProcessor.validate_params(SamplingParams(extra_args))


needs_json = pytest.mark.skipif(
    not hasattr(ts.Grammar, "from_json_schema"), reason="from_json_schema not available yet"
)


@needs_json
def test_guided_json_options_and_schema_errors() -> None:
    schema = '{"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}'
    ok = {"guided_json": schema, "guided_additional_properties": "forbid"}
    GuidedLogitsProcessorV1.validate_params(SamplingParams(ok))
    GuidedLogitsProcessorV1.validate_params(SamplingParams({**ok, "guided_whitespace": "compact"}))
    GuidedLogitsProcessorV1.validate_params(SamplingParams({"guided_json_object": "true"}))
    bad_keyword = {"type": "array", "uniqueItems": True}
    with pytest.raises(ValueError, match="uniqueItems"):
        GuidedLogitsProcessorV1.validate_params(SamplingParams({"guided_json": bad_keyword}))
    with pytest.raises(ValueError, match="guided_whitespace must be a string, got 12"):
        GuidedLogitsProcessorV1.validate_params(
            SamplingParams({"guided_json": schema, "guided_whitespace": 12})
        )


def test_validate_params_accepts_and_caches() -> None:
    for args in (None, {}, {"x": 1}, {"guided_json_object": "false"}):
        GuidedLogitsProcessorV1.validate_params(SamplingParams(args))
    args = {"guided_regex": "[0-9]{2,3}x", "guided_max_states": "500"}
    GuidedLogitsProcessorV1.validate_params(SamplingParams(args))
    hits = GRAMMAR_CACHE.hits
    GuidedLogitsProcessorV1.validate_params(SamplingParams(dict(args)))
    assert GRAMMAR_CACHE.hits == hits + 1
    # choices are escaped literally
    GuidedLogitsProcessorV1.validate_params(SamplingParams({"guided_choice": ["a.b", "(x)|y"]}))


def test_min_tokens_with_a_constraint_is_refused() -> None:
    # Once the output completes the grammar only EOS may follow; min_tokens blocks EOS, so
    # every token would be masked. Refused at admission with the reason.
    regex = {"guided_regex": "[0-9]{3}"}
    for proc in (GuidedLogitsProcessorV1, GuidedLogitsProcessor):
        with pytest.raises(ValueError, match="min_tokens=10 cannot be combined with guided_regex"):
            proc.validate_params(SamplingParams(regex, min_tokens=10))
        proc.validate_params(SamplingParams(regex, min_tokens=0))
        proc.validate_params(SamplingParams(None, min_tokens=10))  # unconstrained: not ours
    # an engine that skipped admission fails only that request (EOS only), with the reason
    proc = GuidedLogitsProcessorV1.with_vocabulary(VOCAB)(None, "cpu", False)
    guide = proc._new_guide(SamplingParams(regex, min_tokens=10))
    assert guide is not None and guide.failed
    assert guide.error is not None and "min_tokens" in guide.error


def test_validation_vocabulary_choice() -> None:
    bound = GuidedLogitsProcessorV1.with_vocabulary(VOCAB)
    assert bound.admission_vocabulary() is VOCAB
    # "z" is fine for the model-independent byte vocabulary, unspellable for VOCAB
    GuidedLogitsProcessorV1.validate_params(SamplingParams({"guided_regex": "z"}))
    with pytest.raises(ValueError, match="Unspellable"):
        bound.validate_params(SamplingParams({"guided_regex": "z"}))
    set_default_vocabulary(VOCAB)
    try:
        assert GuidedLogitsProcessorV1.admission_vocabulary() is VOCAB
        proc = GuidedLogitsProcessorV1(None, "cpu", False)
        assert proc.vocab is VOCAB
    finally:
        set_default_vocabulary(None)
    assert GuidedLogitsProcessorV1.admission_vocabulary() is validation_vocabulary()


def test_missing_model_config_needs_an_injected_vocabulary() -> None:
    with pytest.raises(ValueError, match="with_vocabulary"):
        GuidedLogitsProcessorV1(None, "cpu", False)


# --- failures mid-run finish only that request ------------------------------------------------


def test_failures_mid_run_force_eos_for_that_request_only() -> None:
    proc = v1_processor()
    eng = FakeEngine(proc, VOCAB, seed=5, width=WIDTH, max_batch=6)
    healthy = [eng.new_request({"guided_regex": "(ab|c){1,4}0"}, max_tokens=30) for _ in range(3)]
    # not spellable with this vocabulary (it skipped validation): EOS only from the start
    unspellable = eng.new_request({"guided_regex": "zz"}, max_tokens=30, forced_eos=True)
    # malformed extra_args that reached the engine anyway
    malformed = eng.new_request({"guided_regex": "(", "guided_choice": ["a"]}, forced_eos=True)
    eng.step([*healthy, unspellable, malformed], churn=0)
    assert proc.guide(eng.slots.index(unspellable)).failed  # type: ignore[union-attr]
    # a token outside the mask appended by the engine: that request only is forced to EOS
    victim = eng.new_request({"guided_regex": "(ab|c){1,4}0"}, max_tokens=30)
    eng.step([victim], churn=0)
    eng.step([], churn=0, corrupt=victim, check=True)
    victim.forced_eos = True
    for _ in range(8):
        eng.step([], churn=0)
    assert all(r.output[-1] == EOS for r in (unspellable, malformed, victim))
    for r in healthy:
        assert r.grammar is not None
        m = r.grammar.matcher()
        assert m.accept_tokens(r.output) == len(r.output)


def test_requests_may_lower_compile_budgets_but_not_raise_them() -> None:
    regex = {"guided_regex": "[0-9]{2,3}x"}
    for proc in (GuidedLogitsProcessorV1, GuidedLogitsProcessor):
        # below the server's limits (text over HTTP, numbers in Python): accepted
        proc.validate_params(SamplingParams({**regex, "guided_max_states": "500"}))
        proc.validate_params(SamplingParams({**regex, "guided_max_compile_seconds": 2.5}))
        for name, value in [
            ("guided_max_states", "1000000000"),
            ("guided_max_nfa_bytes", 1 << 40),
            ("guided_mask_cache_bytes", 1 << 40),
            ("guided_max_compile_seconds", "3600"),
        ]:
            with pytest.raises(ValueError, match=f"{name}=.* is above this server's limit"):
                proc.validate_params(SamplingParams({**regex, name: value}))
    defaults = dict(ts._core.GRAMMAR_OPTION_DEFAULTS)
    assert defaults["max_states"] == 100_000 and defaults["max_compile_seconds"] == 10
    # an operator raises a limit for its clients; the others stay
    roomy = GuidedLogitsProcessorV1.with_client_limits(max_compile_seconds=3600)
    roomy.validate_params(SamplingParams({**regex, "guided_max_compile_seconds": "3600"}))
    with pytest.raises(ValueError, match="guided_max_states"):
        roomy.validate_params(SamplingParams({**regex, "guided_max_states": 10**9}))
    with pytest.raises(ValueError, match="unknown compile budget"):
        GuidedLogitsProcessorV1.with_client_limits(max_whatever=3)
    with pytest.raises(ValueError, match="positive number"):
        GuidedLogitsProcessorV1.with_client_limits(max_states=0)
    # an engine that skipped admission fails only that request, with the reason
    proc = GuidedLogitsProcessorV1.with_vocabulary(VOCAB)(None, "cpu", False)
    guide = proc._new_guide(SamplingParams({**regex, "guided_max_states": 10**9}))
    assert guide is not None and guide.failed
    assert guide.error is not None and "above this server's limit" in guide.error


def test_hostile_constraint_in_the_engine_fails_only_its_request() -> None:
    # a request that skipped validation with a constraint over a limit: EOS only, others go on
    proc = v1_processor()
    eng = FakeEngine(proc, VOCAB, seed=7, width=WIDTH, max_batch=4)
    healthy = [eng.new_request({"guided_regex": "(ab|c){1,4}0"}, max_tokens=30) for _ in range(2)]
    hostile = [
        eng.new_request({"guided_json": {"const": "x" * 10_000_000}}, forced_eos=True),
        eng.new_request({"guided_json": {"maximum": True}}, forced_eos=True),
    ]
    eng.step([*healthy, *hostile], churn=0)
    for r in hostile:
        guide = proc.guide(eng.slots.index(r))
        assert guide is not None and guide.failed
    for _ in range(8):
        eng.step([], churn=0)
    assert all(r.output[-1] == EOS for r in hostile)
    for r in healthy:
        assert r.grammar is not None
        assert r.grammar.matcher().accept_tokens(r.output) == len(r.output)


class GatedCache(GrammarCache):
    """A grammar cache whose compiles wait for ``gate``: a compile on the step's path would
    block ``update_state`` / ``add_request`` until the test opens it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.compiling = threading.Event()

    def get_pending(self, constraint: Any, vocab: Any) -> Any:
        cache = self

        class Gated:
            def done(self) -> bool:
                return cache.gate.is_set()

            def result(self) -> Any:
                assert cache.gate.wait(30), "the gate was never opened"
                return GrammarCache.get_pending(cache, constraint, vocab).result()

        self.compiling.set()
        return Gated()


def test_compiles_run_off_the_step_and_apply_waits_for_them() -> None:
    cache = GatedCache()
    v1 = type("Gated", (GuidedLogitsProcessorV1.with_vocabulary(VOCAB),), {"cache": cache})
    proc = v1(None, "cpu", False)
    out: list[int] = []
    ok = SamplingParams({"guided_regex": "ab|c0"})
    bad = SamplingParams({"guided_regex": "zz"})  # unspellable with VOCAB
    # update_state returns while both compiles are held at the gate
    proc.update_state(BatchUpdate(2, [], [(0, ok, None, out), (1, bad, None, [])], []))
    assert cache.compiling.wait(30)
    guide = proc.guide(0)
    assert guide is not None and not guide.is_ready
    cache.gate.set()
    rows = proc.apply(torch.zeros(2, WIDTH))
    assert finite(rows[0]) == {0, 2, 3} and finite(rows[1]) == {EOS}  # a, c, ab
    bad_guide = proc.guide(1)
    assert bad_guide is not None and "Unspellable" in (bad_guide.error or "")
    # a cache hit is ready at once; so is a cached failure
    proc.update_state(BatchUpdate(2, [0, 1], [(0, ok, None, []), (1, bad, None, [])], []))
    for i in (0, 1):
        g = proc.guide(i)
        assert g is not None and g.pending is None
    # the same through the V2 interface's add_request
    cache2 = GatedCache()
    batch = V2Batch(type("Gated2", (GuidedLogitsProcessor,), {"cache": cache2}), VOCAB)
    assert batch.add(0, ok, prompt=[1])
    assert cache2.compiling.wait(30)
    g2 = batch.proc.guide(0)
    assert g2 is not None and not g2.is_ready
    cache2.gate.set()
    g2.ready()
    assert g2.matcher is not None and not g2.failed


def test_fit_max_tokens_gives_the_guide_a_budget() -> None:
    proc = v1_processor()
    args = {"guided_regex": "(ab|c)+0", "guided_fit_max_tokens": "true"}
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(args, max_tokens=3), None, [])], []))
    guide = proc.guide(0)
    assert guide is not None
    guide.ready()
    assert guide.matcher is not None and guide.matcher.max_tokens == 3
    # without the key, or with it false: no budget
    for extra in ({}, {"guided_fit_max_tokens": False}):
        p = SamplingParams({"guided_regex": "(ab|c)+0", **extra}, max_tokens=3)
        proc.update_state(BatchUpdate(1, [0], [(0, p, None, [])], []))
        g = proc.guide(0)
        assert g is not None
        g.ready()
        assert g.matcher is not None and g.matcher.max_tokens is None
    # every walk under a budget of 3 tokens ends complete: "(ab|c)+0" needs at least 2
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [0], [(0, SamplingParams(args, max_tokens=3), None, out)], []))
    rng = random.Random(0)
    for _ in range(3):
        allowed = sorted(finite(proc.apply(torch.zeros(1, WIDTH))[0]))
        out.append(rng.choice(allowed))
        if out[-1] == EOS:
            break
    g = proc.guide(0)
    assert g is not None and g.matcher is not None
    g.sync()
    assert g.matcher.is_accepting(), out


def _walk(proc: Any, params: Any, rng: random.Random, steps: int = 24) -> list[int]:
    """One request sampled uniformly among the allowed tokens until EOS (or ``steps``)."""
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [0], [(0, params, None, out)], []))
    for _ in range(steps):
        allowed = sorted(finite(proc.apply(torch.zeros(1, WIDTH))[0]))
        out.append(rng.choice(allowed))
        if out[-1] == EOS:
            break
    return out


def test_reasoning_span_before_the_constraint() -> None:
    proc = v1_processor()
    rng = random.Random(1)
    text_of = lambda out: b"".join(TOKENS[t] for t in out if t != EOS).decode()  # noqa: E731
    for budget in ("0", 2, 5):
        args = {
            "guided_regex": "(ab|c)*0",
            "guided_reasoning_end": "--",
            "guided_thinking_budget": budget,
        }
        for _ in range(10):
            out = _walk(proc, SamplingParams(args), rng, steps=40)
            assert out[-1] == EOS, out
            reasoning, marker, answer = text_of(out).partition("--")
            assert marker and re.fullmatch("(ab|c)*0", answer), out
            g = proc.guide(0)
            assert g is not None and g.matcher is not None and not g.matcher.is_reasoning()
            # after `budget` free tokens only the marker's bytes follow
            assert len(reasoning.encode()) <= 3 * int(budget) + 1
    # the processor's default marker, switched off by a request's empty string
    with_default = GuidedLogitsProcessorV1.with_vocabulary(VOCAB).with_reasoning("--", 3)
    proc = with_default(None, "cpu", False)
    out = _walk(proc, SamplingParams({"guided_regex": "(ab|c)*0"}), rng, steps=40)
    assert "--" in text_of(out) and out[-1] == EOS
    g = proc.guide(0)
    assert g is not None and g.matcher is not None
    assert g.matcher.reasoning_end == "--" and g.matcher.thinking_budget == 3
    off = {"guided_regex": "(ab|c)*0", "guided_reasoning_end": ""}
    out = _walk(proc, SamplingParams(off), rng, steps=40)
    assert re.fullmatch("(ab|c)*0", text_of(out)), out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"guided_thinking_budget": 4}, "needs a reasoning end marker"),
        ({"guided_reasoning_end": "--", "guided_thinking_budget": -1}, "non-negative integer"),
        ({"guided_reasoning_end": "--", "guided_thinking_budget": "many"}, "non-negative"),
        ({"guided_reasoning_end": 5}, "must be a string"),
        ({"guided_reasoning_end": "--", "guided_fit_max_tokens": True}, "cannot be combined"),
        ({"guided_reasoning_end": "</think>"}, "no sequence of tokens spells"),
    ],
)
def test_reasoning_settings_are_checked_at_admission(extra: dict[str, Any], message: str) -> None:
    params = SamplingParams({"guided_regex": "(ab|c)*0", **extra})
    cls = GuidedLogitsProcessorV1.with_vocabulary(VOCAB)
    with pytest.raises(ValueError, match=message):
        cls.validate_params(params)
    # an engine without admission fails the request (EOS only) instead
    proc = cls(None, "cpu", False)
    proc.update_state(BatchUpdate(1, [], [(0, params, None, [])], []))
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {EOS}
    with pytest.raises(ValueError):
        cls.with_reasoning("--", -2)


def test_failure_log_lines_name_the_request(caplog: pytest.LogCaptureFixture) -> None:
    proc = v1_processor()
    args = {"guided_regex": "zz", "guided_request_id": "cmpl-42"}  # unspellable with VOCAB
    assert constraint_from_extra_args({"guided_request_id": "x"}) is None  # not an option
    with caplog.at_level(logging.WARNING, logger="tokensieve"):
        proc.update_state(
            BatchUpdate(
                2,
                [],
                [
                    (1, SamplingParams(args), None, []),
                    (0, SamplingParams({"guided_regex": "zz"}), None, []),
                ],
                [],
            )
        )
        proc.apply(torch.zeros(2, WIDTH))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("tokensieve")]
    assert any("cmpl-42 (batch row 1), guided_regex" in m and "Unspellable" in m for m in lines)
    assert any("request batch row 0, guided_regex" in m for m in lines), lines


def test_engine_processors_print_through_vllms_log_handler() -> None:
    from tokensieve.vllm.processor_base import adopt_vllm_logging

    ours, theirs = logging.getLogger("tokensieve"), logging.getLogger("vllm")
    saved = (ours.handlers[:], ours.level, ours.propagate, theirs.handlers[:])
    try:
        ours.handlers.clear()
        handler = logging.StreamHandler()
        theirs.handlers[:] = [handler]
        adopt_vllm_logging()
        assert ours.handlers == [handler] and not ours.propagate
        mine = logging.NullHandler()  # a user's own configuration is left alone
        ours.handlers[:] = [mine]
        adopt_vllm_logging()
        assert ours.handlers == [mine]
    finally:
        ours.handlers[:], ours.level, ours.propagate, theirs.handlers[:] = (
            saved[0],
            saved[1],
            saved[2],
            saved[3],
        )


def test_budget_hit_mid_run_forces_eos() -> None:
    # The lazy automaton meets its state budget only after a few tokens.
    proc = v1_processor()
    out: list[int] = []
    args = {"guided_regex": "[abc]{0,20}-[01]{0,20}", "guided_max_states": 12}
    proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(args), None, out)], []))
    seen_eos_only = False
    for _ in range(30):
        row = proc.apply(torch.zeros(1, WIDTH))[0]
        allowed = sorted(finite(row))
        if allowed == [EOS]:
            seen_eos_only = True
            break
        out.append(next(t for t in allowed if t != EOS))
    assert seen_eos_only
    guide = proc.guide(0)
    assert guide is not None and guide.failed and "Budget" in (guide.error or "")


# --- the V2 interface, driven directly --------------------------------------------------------


@dataclass
class HostBuffer:
    """Stands in for vLLM's UvaBackedTensor (``.np``: the host view)."""

    np: Any


@dataclass
class DeviceBuffer:
    """Stands in for vLLM's StagedWriteTensor (``.gpu``: the device tensor)."""

    gpu: Any


@dataclass
class FakeReqStates:
    """Mirrors ``LogitsProcRequestState``'s fields."""

    device: Any
    max_num_reqs: int
    vocab_size: int
    all_token_ids: DeviceBuffer
    prompt_len: HostBuffer
    prefill_len: HostBuffer
    total_len: DeviceBuffer


@dataclass
class FakeCtx:
    """Mirrors ``LogitsContext``'s fields."""

    expanded_idx_mapping: Any
    idx_mapping: Any
    idx_mapping_np: Any
    expanded_local_pos: Any
    input_ids: Any
    pos: Any
    seq_lens_upper_bound_np: Any


class V2Batch:
    """The model runner's side of the V2 interface: slots, token history, per-step layout."""

    def __init__(
        self,
        proc_cls: Any,
        vocab: ts.Vocabulary,
        vllm_config: Any = None,
        states_cls: Any = FakeReqStates,
        ctx_cls: Any = FakeCtx,
        max_reqs: int = 8,
        max_len: int = 96,
    ) -> None:
        self.ctx_cls = ctx_cls
        self.states = states_cls(
            device=torch.device("cpu"),
            max_num_reqs=max_reqs,
            vocab_size=WIDTH,
            all_token_ids=DeviceBuffer(torch.zeros(max_reqs, max_len, dtype=torch.int32)),
            prompt_len=HostBuffer(np.zeros(max_reqs, dtype=np.int32)),
            prefill_len=HostBuffer(np.zeros(max_reqs, dtype=np.int32)),
            total_len=DeviceBuffer(torch.zeros(max_reqs, dtype=torch.int32)),
        )
        self.proc = proc_cls.with_vocabulary(vocab)(vllm_config, self.states)

    def add(self, slot: int, params: Any, prompt: list[int], output: Sequence[int] = ()) -> bool:
        seq = [*prompt, *output]
        self.states.prompt_len.np[slot] = len(prompt)
        self.states.prefill_len.np[slot] = len(seq)
        self.states.all_token_ids.gpu[slot, : len(seq)] = torch.tensor(seq)
        return bool(self.proc.add_request(slot, params))

    def apply(
        self, slots: list[int], seqs: dict[int, list[int]], drafts: dict[int, list[int]]
    ) -> list[set[int]]:
        """One step: ``seqs[slot]`` is prompt + committed output; returns each row's allowed set."""
        expanded, local, inp, pos = [], [], [], []
        for slot in slots:
            seq = seqs[slot]
            self.states.all_token_ids.gpu[slot, : len(seq)] = torch.tensor(seq)
            self.states.total_len.gpu[slot] = len(seq)
            for j, tok in enumerate([seq[-1], *drafts.get(slot, [])]):
                expanded.append(slot)
                local.append(j)
                inp.append(tok)
                pos.append(len(seq) - 1 + j)
        ctx = self.ctx_cls(
            expanded_idx_mapping=torch.tensor(expanded, dtype=torch.int32),
            idx_mapping=torch.tensor(slots, dtype=torch.int32),
            idx_mapping_np=np.array(slots, dtype=np.int32),
            expanded_local_pos=torch.tensor(local, dtype=torch.int32),
            input_ids=torch.tensor(inp, dtype=torch.int32),
            pos=torch.tensor(pos, dtype=torch.int64),
            seq_lens_upper_bound_np=np.array([len(seqs[s]) for s in slots], dtype=np.int32),
        )
        logits = torch.randn(len(expanded), WIDTH)
        before = logits.clone()
        out = self.proc.apply(logits, ctx)
        for row, slot in enumerate(expanded):
            if self.proc.guide(slot) is None:
                assert torch.equal(out[row], before[row]), "unconstrained row modified"
        return [finite(r) for r in out]


def check_v2_layout_scenario(batch: V2Batch) -> None:
    all_ids = set(range(WIDTH))
    prompt = [7, 7]
    assert batch.add(2, SamplingParams({"guided_regex": "abc0"}), prompt)
    assert not batch.add(0, SamplingParams(None), prompt)
    seq = {0: prompt, 2: prompt}
    assert batch.apply([0, 2], seq, {}) == [all_ids, {0, 3, 5}]  # prefill: no output yet
    seq[2] = [*prompt, 0]
    assert batch.apply([2, 0], seq, {}) == [{1, 4}, all_ids]  # rows reordered
    # three tokens at once (accepted drafts): the older ones are read from all_token_ids
    seq[2] = [*prompt, 0, 1, 2]
    assert batch.apply([2], seq, {}) == [{6}]
    # drafts: row k is masked after drafts 1..k; after a draft the grammar rejects, EOS only
    seq[2] = [*prompt, 0]
    assert batch.apply([2], seq, {2: [1, 2, 6]}) == [{1, 4}, {2}, {6}, {EOS}]
    assert batch.apply([2], seq, {2: [2, 1]}) == [{1, 4}, {EOS}, {EOS}]
    # resumed after preemption: re-added with output so far, caught up from all_token_ids
    assert batch.add(3, SamplingParams({"guided_regex": "abc0"}), prompt, [0, 1])
    assert batch.apply([3], {3: [*prompt, 0, 1]}, {}) == [{2}]
    # slot reuse: add_request resets the slot; no constrained row -> logits untouched
    assert not batch.add(2, SamplingParams({}), prompt)
    assert not batch.add(3, SamplingParams(None), prompt)
    assert batch.apply([2], {2: prompt}, {}) == [all_ids]


def test_v2_processor_reads_tokens_from_the_batch_layout() -> None:
    check_v2_layout_scenario(V2Batch(GuidedLogitsProcessor, VOCAB))


def run_v2_random_walk(batch: V2Batch, seed: int, steps: int) -> int:
    """Requests join free slots, finish, get preempted and resumed; rows are shuffled every
    step; some steps carry draft tokens and some commit several tokens at once. Every row's mask
    is checked against a fresh matcher. Returns the number of rows checked."""
    rng = random.Random(seed)
    max_reqs = batch.states.max_num_reqs
    free = list(range(max_reqs))
    active: dict[int, tuple[Request, list[int]]] = {}  # slot -> (request, prompt)
    paused: list[tuple[Request, list[int]]] = []
    eng = FakeEngine(None, VOCAB)  # only for new_request()
    checked = 0
    for _ in range(steps):
        for slot in list(active):  # finish or preempt
            req, prompt = active[slot]
            if req.done or rng.random() < 0.03:
                del active[slot]
                free.append(slot)
                if not req.done:
                    paused.append((req, prompt))
        while free and rng.random() < 0.6:
            slot = free.pop(rng.randrange(len(free)))
            if paused and rng.random() < 0.3:
                req, prompt = paused.pop(rng.randrange(len(paused)))
            else:
                max_tokens = rng.randrange(1, 20)
                req = eng.new_request(rng.choice(CONSTRAINTS), max_tokens=max_tokens)
                prompt = [rng.randrange(len(TOKENS)) for _ in range(rng.randrange(1, 5))]
            params = SamplingParams(req.extra_args)
            assert batch.add(slot, params, prompt, req.output) == req.constrained
            active[slot] = (req, prompt)
        if not active:
            continue
        slots = list(active)
        rng.shuffle(slots)
        drafts = {
            s: [rng.randrange(len(TOKENS) + 1) for _ in range(rng.randrange(1, 4))]
            for s in slots
            if rng.random() < 0.2
        }
        seqs = {s: active[s][1] + active[s][0].output for s in slots}
        masks = batch.apply(slots, seqs, drafts)
        row = 0
        for s in slots:
            req = active[s][0]
            chain = [
                req.output,
                *(req.output + drafts[s][:j] for j in range(1, len(drafts.get(s, [])) + 1)),
            ]
            for tokens in chain:
                if req.constrained:
                    assert masks[row] == reference_allowed(req.grammar, tokens), (req, tokens)
                    checked += 1
                row += 1
            # commit 1 token (sometimes up to 3, like accepted drafts)
            for _ in range(1 if rng.random() < 0.8 else 3):
                if req.done:
                    break
                allowed = reference_allowed(req.grammar, req.output) if req.constrained else None
                choices = sorted(allowed) if allowed else list(range(WIDTH))
                req.output.append(choices[rng.randrange(len(choices))])
    return checked


def test_v2_random_walk_matches_reference() -> None:
    assert run_v2_random_walk(V2Batch(GuidedLogitsProcessor, VOCAB), seed=4, steps=1500) > 3000


# --- end to end: the random Llama model through the V1 path -----------------------------------


PER_REGEX = 2


def test_generate_through_v1_processor_with_llama() -> None:
    """The e2e generation of test_transformers.py, but driven by the fake engine loop."""
    pytest.importorskip("transformers")
    from test_transformers import MAX_NEW_TOKENS, REGEXES, real_setup

    s = real_setup()
    vocab, model = s.vocab, s.model
    proc = GuidedLogitsProcessorV1.with_vocabulary(vocab)(None, "cpu", False)
    eng = FakeEngine(proc, vocab, seed=3, max_batch=8, width=model.config.vocab_size)
    prompts: dict[int, list[int]] = {}
    gen = torch.Generator().manual_seed(0)
    queue = []
    for k, pattern in enumerate(REGEXES):
        for j in range(PER_REGEX):
            req = eng.new_request({"guided_regex": pattern}, max_tokens=MAX_NEW_TOKENS)
            prompts[req.rid] = s.regular[k * 7 + j : k * 7 + j + 2 + j % 3]
            queue.append(req)
    for j in range(3):
        req = eng.new_request(None, max_tokens=4)
        prompts[req.rid] = s.regular[j : j + 3]
        queue.append(req)
    eng.rng.shuffle(queue)

    def logits_for(slots: list[Request]) -> Any:
        seqs = [prompts[r.rid] + r.output for r in slots]
        width = max(len(q) for q in seqs)
        ids = torch.full((len(seqs), width), s.eos, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, q in enumerate(seqs):
            ids[i, width - len(q) :] = torch.tensor(q)
            mask[i, width - len(q) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = model(
                input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1
            )
        logits = out.logits[:, -1, :].float()
        gumbel = -torch.log(-torch.log(torch.rand(logits.shape, generator=gen)))
        return logits, gumbel

    steps = 0
    while queue or eng.slots or eng.preempted:
        arrivals = [queue.pop() for _ in range(min(len(queue), 8 - len(eng.slots)))]
        proc.update_state(eng.schedule(arrivals, churn=0.05))
        steps += 1
        assert steps < 2000
        live = [r for r in eng.slots if r is not None]
        if not live:
            continue
        logits, gumbel = logits_for(live)
        raw = logits.clone()
        masked = proc.apply(logits)
        for i, req in enumerate(live):
            if req.constrained:
                assert finite(masked[i]) == reference_allowed(req.grammar, req.output, s.eos)
            else:
                assert torch.equal(masked[i], raw[i])
            if not req.done:
                req.output.append(int((masked[i] + gumbel[i]).argmax()))
    constrained = [r for r in eng.finished if r.constrained]
    assert len(constrained) == PER_REGEX * len(REGEXES)
    for req in constrained:
        assert req.output[-1] == s.eos, f"hit max_tokens before EOS: {req.output}"
        pattern = req.extra_args["guided_regex"]  # type: ignore[index]
        text = s.text(req.output)
        assert re.fullmatch(pattern, text), (pattern, text)


def test_guided_json_through_v1_when_available() -> None:
    if not hasattr(ts.Grammar, "from_json_schema"):
        pytest.skip("from_json_schema not available yet")
    proc = v1_processor()
    eng = FakeEngine(proc, VOCAB, seed=9, width=WIDTH)
    schema = {"enum": ["ab", "c"]}
    req = eng.new_request({"guided_json": json.dumps(schema)}, max_tokens=12)
    for _ in range(14):
        eng.step([req] if eng.steps == 0 else [], churn=0)
    assert req.output[-1] == EOS
    assert json.loads(b"".join(TOKENS[t] for t in req.output[:-1]).decode()) in schema["enum"]


def test_cache_key_keeps_property_order() -> None:
    from tokensieve.constraints import Constraint

    a = Constraint.make("json_schema", {"type": "object", "properties": {"a": {}, "b": {}}})
    b = Constraint.make("json_schema", {"type": "object", "properties": {"b": {}, "a": {}}})
    assert a.key != b.key


# --- hostile request values: refused at admission, failed alone in the engine -----------------

from tokensieve import _bounded_json  # noqa: E402
from tokensieve.constraints import ALL_OPTIONS  # noqa: E402
from tokensieve.vllm import constraints as vllm_constraints  # noqa: E402
from tokensieve.vllm import request_args  # noqa: E402

DEEP = "[" * 1000 + "]" * 1000  # 2 KB of JSON text any HTTP client can send in vllm_xargs
HEALTHY = {"guided_regex": "(ab|c){1,4}0"}
BASE = {"guided_json": '{"type": "string", "maxLength": 4}'}  # every option applies to it


class Hostile:
    """A value whose every conversion raises (what an in-process caller could pass)."""

    def _raise(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("hostile value touched")

    __repr__ = __str__ = __format__ = __bool__ = __len__ = __iter__ = _raise
    __int__ = __index__ = __float__ = __eq__ = __lt__ = __gt__ = __getattr__ = _raise
    model_json_schema = _raise
    __hash__ = object.__hash__


def every_guided_key() -> list[str]:
    """Every key the processors read: the constraint kinds, every option, the other keys."""
    options = ["guided_" + o for o in ALL_OPTIONS]
    return [*vllm_constraints.EXTRA_ARGS_KINDS, *options, *vllm_constraints._NOT_OPTIONS]


def with_key(key: str, value: Any) -> dict[str, Any]:
    """A request carrying ``value`` in ``key`` (with a constraint beside an option)."""
    if key in vllm_constraints.EXTRA_ARGS_KINDS:
        return {key: value}
    return {**BASE, key: value}


def admission_error(extra_args: Any) -> str | None:
    """What admission says about a request, through both processor classes: None when it is
    accepted, the message of its ValueError; any other exception propagates."""
    messages = []
    for cls in (GuidedLogitsProcessorV1, GuidedLogitsProcessor):
        try:
            cls.validate_params(SamplingParams(extra_args))
            messages.append(None)
        except ValueError as e:
            messages.append(str(e))
    assert messages[0] == messages[1], messages
    return messages[0]


def check_fails_alone(extra_args: Any) -> None:
    """An engine that skips admission: the request is failed (EOS only), its neighbours in the
    batch keep masks equal to the reference, through both runner interfaces."""
    proc = v1_processor()
    eng = FakeEngine(proc, VOCAB, seed=11, width=WIDTH, max_batch=4)
    healthy = [eng.new_request(HEALTHY, max_tokens=30) for _ in range(2)]
    free = eng.new_request(None, max_tokens=30)
    hostile = eng.new_request(extra_args, max_tokens=30, forced_eos=True)
    eng.step([healthy[0], hostile, free, healthy[1]], churn=0)  # checks every row's mask
    guide = proc.guide(eng.slots.index(hostile))
    assert guide is not None and guide.failed, extra_args
    for _ in range(3):
        eng.step([], churn=0)
    assert hostile.output[-1] == EOS
    # the V2 interface: add_request, then one step over the three slots
    batch = V2Batch(GuidedLogitsProcessor, VOCAB)
    assert batch.add(0, SamplingParams(HEALTHY), [7])
    assert batch.add(1, SamplingParams(extra_args), [7])
    assert not batch.add(2, SamplingParams(None), [7])
    masks = batch.apply([0, 1, 2], {0: [7], 1: [7], 2: [7]}, {})
    assert masks == [reference_allowed(healthy[0].grammar, []), {EOS}, set(range(WIDTH))]


def test_deeply_nested_fit_max_tokens_is_refused_and_fails_alone() -> None:
    # the report: it passed admission, then update_state raised RecursionError for the batch
    extra = {**HEALTHY, "guided_fit_max_tokens": DEEP}
    message = admission_error(extra)
    assert message is not None and "guided_fit_max_tokens must be true or false" in message
    check_fails_alone(extra)


def test_deeply_nested_text_in_every_guided_key() -> None:
    wrong: list[str] = []
    for key in every_guided_key():
        extra = with_key(key, DEEP)
        message = admission_error(extra)
        if message is None:
            wrong.append(f"{key}: accepted")
            continue
        if key.removeprefix("guided_") not in message:  # the core names options unprefixed
            wrong.append(f"{key}: {message[:200]}")
        check_fails_alone(extra)
    assert not wrong, wrong


def test_a_value_whose_repr_and_str_raise_in_every_guided_key() -> None:
    wrong: list[str] = []
    places: list[tuple[str, Any, str]] = [(key, Hostile(), "Hostile") for key in every_guided_key()]
    places += [
        ("guided_json", {"type": "object", "properties": {"a": Hostile()}}, "Hostile"),
        ("guided_json", {"enum": [1, [Hostile()]]}, "Hostile"),
        ("guided_choice", ["a", Hostile()], "Hostile"),
        ("guided_registry", {"urn:x": Hostile()}, "Hostile"),
        ("guided_request_id", [Hostile()], "list"),
    ]
    for key, value, type_name in places:
        extra = with_key(key, value)
        message = admission_error(extra)
        if message is None or key not in message or type_name not in message:
            wrong.append(f"{key}: {message}")
        check_fails_alone(extra)
    # a key that is not a string is not ours
    extra = {**HEALTHY, Hostile(): 1}
    assert admission_error(extra) is None
    assert not wrong, wrong


def self_nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = {"not": value}
    return value


def exponential_dag(levels: int) -> Any:
    value: Any = ["a"]
    for _ in range(levels):
        value = [value, value]  # 2^levels values, seen once each by a walk
    return value


cyclic: dict[str, Any] = {"type": "object"}
cyclic["properties"] = {"self": cyclic}

# (extra_args, what the admission message says)
MALFORMED_VALUES: list[tuple[Any, str]] = [
    (["guided_regex", "a"], "extra_args must be a mapping"),
    ({"guided_json": 12}, "guided_json must be a JSON Schema (an object or a boolean), got int"),
    ({"guided_json": "x" * ((64 << 20) + 1)}, "at most 67,108,864 are accepted"),
    ({"guided_json": self_nested(200)}, "guided_json nests more than 128 levels"),
    ({"guided_json": cyclic}, "guided_json nests more than 128 levels"),
    ({"guided_json": {"enum": [0] * (1 << 20)}}, "guided_json holds more than 1,048,576 values"),
    ({"guided_json": {1: {}}}, "guided_json has a key that is not a string: 1"),
    ({"guided_json": {"const": b"ab"}}, "holds a value of type bytes, which is not a JSON"),
    ({"guided_json": b"\xff{}"}, "guided_json is not UTF-8 text"),
    ({"guided_json": {"maximum": float("inf")}}, "guided_json holds inf, which is not JSON"),
    ({"guided_regex": ["a"]}, "guided_regex must be a string, got a value of type list"),
    ({"guided_regex": "a" * ((64 << 20) + 1)}, "at most 67,108,864 are accepted"),
    ({"guided_choice": [["a"]]}, "guided_choice nests more than 1 level"),
    ({"guided_choice": '[["a"]]'}, "guided_choice nests more than 1 level"),
    ({"guided_choice": ["a", 10**5000]}, "guided_choice must hold strings only, got an integer"),
    ({"guided_choice": {"a": 1}}, "guided_choice must be a non-empty list"),
    ({"guided_grammar": ["a"]}, "guided_grammar must be a string, got a value of type list"),
    ({"guided_grammar": "a" * ((64 << 20) + 1)}, "at most 67,108,864 are accepted"),
    ({"guided_grammar": 'start: "a"\n%declare X'}, "`%declare` is not supported"),
    ({"guided_grammar": " \n"}, "guided_grammar is empty"),
    ({"guided_structural_tag": "[1]"}, "guided_structural_tag must be a structural tag"),
    ({"guided_structural_tag": 7}, "guided_structural_tag must be a structural tag"),
    ({"guided_structural_tag": b"\xff{}"}, "guided_structural_tag is not UTF-8 text"),
    ({"guided_structural_tag": self_nested(200)}, "guided_structural_tag nests more than 128"),
    ({"guided_structural_tag": {"format": {"type": "nope"}}}, "unknown format type `nope`"),
    ({"guided_json_object": "maybe"}, "guided_json_object must be true or false, got 'maybe'"),
    ({"guided_json_object": 2}, "guided_json_object must be true or false, got 2"),
    ({**BASE, "guided_max_states": "1e3"}, "guided_max_states must be a non-negative integer"),
    ({**BASE, "guided_max_states": 1.5}, "guided_max_states must be a non-negative integer"),
    ({**BASE, "guided_max_states": True}, "guided_max_states must be a non-negative integer"),
    ({**BASE, "guided_max_states": -1}, "guided_max_states must be a non-negative integer"),
    ({**BASE, "guided_max_states": [100]}, "guided_max_states must be a non-negative integer"),
    ({**BASE, "guided_max_states": 2**70}, "guided_max_states must be a non-negative integer"),
    ({**BASE, "guided_max_states": "9" * 5000}, "guided_max_states must be a non-negative"),
    ({**BASE, "guided_max_nfa_bytes": "-5"}, "guided_max_nfa_bytes must be a non-negative"),
    ({**BASE, "guided_mask_cache_bytes": {}}, "guided_mask_cache_bytes must be a non-negative"),
    ({**BASE, "guided_max_compile_seconds": 0}, "guided_max_compile_seconds must be a positive"),
    ({**BASE, "guided_max_compile_seconds": "-Infinity"}, "must be a positive number"),
    ({**BASE, "guided_max_compile_seconds": float("nan")}, "must be a positive number"),
    ({**BASE, "guided_max_compile_seconds": "1e400"}, "must be a positive number"),
    ({**BASE, "guided_max_compile_seconds": 10**400}, "must be a positive number"),
    ({**BASE, "guided_max_compile_seconds": True}, "must be a positive number"),
    ({**BASE, "guided_additional_properties": 1}, "guided_additional_properties must be a string"),
    ({**BASE, "guided_formats": ["assert"]}, "guided_formats must be a string"),
    ({**BASE, "guided_one_of": "x" * 5000}, "guided_one_of has 5,000 bytes; at most 4,096"),
    ({**BASE, "guided_whitespace": 12}, "guided_whitespace must be a string, got 12"),
    ({**BASE, "guided_recursion": "sideways"}, "recursion"),  # the core's word check
    ({**BASE, "guided_literal_spelling": 3.5}, "guided_literal_spelling must be a string"),
    ({**BASE, "guided_property_order": ["any"]}, "guided_property_order must be a string"),
    ({**BASE, "guided_max_whitespace": 2**40}, "guided_max_whitespace must be a non-negative"),
    ({**BASE, "guided_max_recursion_depth": "3.5"}, "guided_max_recursion_depth must be a"),
    ({**BASE, "guided_max_stack_depth": -3}, "guided_max_stack_depth must be a non-negative"),
    ({**BASE, "guided_max_nesting_depth": [8]}, "guided_max_nesting_depth must be a non-negative"),
    ({**BASE, "guided_truncate_recursion": "maybe"}, "guided_truncate_recursion must be true"),
    ({**BASE, "guided_lenient": 2}, "guided_lenient must be true or false"),
    ({**BASE, "guided_start": 5}, "guided_start must be a string, got 5"),
    ({**BASE, "guided_start": "r" * 5000}, "guided_start has 5,000 bytes; at most 4,096"),
    ({**BASE, "guided_start": "root"}, "option(s) start apply to grammars (ebnf, lark) only"),
    ({**BASE, "guided_registry": 5}, "guided_registry must be a JSON object mapping URIs"),
    ({**BASE, "guided_registry": "[1]"}, "guided_registry must be a JSON object"),
    ({**BASE, "guided_registry": "{nope"}, "guided_registry is not valid JSON"),
    ({**BASE, "guided_registry": {"urn:x": self_nested(200)}}, "guided_registry nests more"),
    ({**BASE, "guided_no_such_option" + "x" * 5000: 1}, "unsupported option(s) 'guided_no_such"),
    ({**BASE, "guided_fit_max_tokens": "maybe"}, "guided_fit_max_tokens must be true or false"),
    ({**BASE, "guided_thinking_budget": 2**40}, "guided_thinking_budget must be a non-negative"),
    ({**BASE, "guided_thinking_budget": 1.5}, "guided_thinking_budget must be a non-negative"),
    ({**BASE, "guided_reasoning_end": "-" * 300}, "guided_reasoning_end has 300 bytes"),
    ({**BASE, "guided_reasoning_end": ["--"]}, "guided_reasoning_end must be a string"),
    ({**BASE, "guided_request_id": "x" * 300}, "guided_request_id has 300 bytes"),
    ({**BASE, "guided_request_id": 3.5}, "guided_request_id must be a string, got 3.5"),
    ({**BASE, "guided_request_id": {"a": 1}}, "guided_request_id must be a string"),
]


def test_malformed_values_of_every_option_are_refused_and_fail_alone() -> None:
    covered = {k for extra, _ in MALFORMED_VALUES if isinstance(extra, dict) for k in extra}
    assert set(every_guided_key()) <= covered  # a case for every key
    wrong: list[str] = []
    for extra, expected in MALFORMED_VALUES:
        message = admission_error(extra)
        if message is None or expected not in message:
            wrong.append(f"{request_args.shown(list(extra)[-1])}: {message!r}")
    assert not wrong, wrong
    for extra, _ in MALFORMED_VALUES:
        check_fails_alone(extra)


def test_objects_shared_many_times_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2^40 values as JSON text, 41 lists in memory: refused after MAX_JSON_VALUES (made small
    # here: the walk takes about 3 us per list)
    monkeypatch.setattr(_bounded_json, "MAX_JSON_VALUES", 1000)  # read by request_args too
    extra = {"guided_json": {"enum": exponential_dag(40)}}
    message = admission_error(extra)
    assert message is not None and "guided_json holds more than 1,000 values" in message
    check_fails_alone(extra)


def test_well_formed_values_are_read_as_their_types() -> None:
    args = vllm_constraints.read_extra_args(
        {
            **BASE,
            "guided_max_states": " 500 ",
            "guided_max_compile_seconds": "2.5",
            "guided_lenient": "True",
            "guided_truncate_recursion": 0,
            "guided_max_whitespace": "null",  # unset
            "guided_whitespace": "compact",
            "guided_registry": '{"urn:a": {"const": "ab"}}',
            "guided_request_id": "line\nbreak",
            "guided_fit_max_tokens": "1",
        }
    )
    assert args.constraint is not None
    assert dict(args.constraint.options) == {
        "max_states": 500,
        "max_compile_seconds": 2.5,
        "lenient": True,
        "truncate_recursion": False,
        "whitespace": "compact",
        # JSON text stays text: the core reads its numbers exactly
        "registry": '{"urn:a": {"const": "ab"}}',
    }
    assert args.request_id == "line\\nbreak" and args.fit_max_tokens
    # subclasses of the plain types are read through the plain types' methods
    word = type("Word", (str,), {"__str__": Hostile._raise})("compact")
    count = type("Count", (int,), {"__int__": Hostile._raise, "__repr__": Hostile._raise})(7)
    args = vllm_constraints.read_extra_args(
        {**BASE, "guided_whitespace": word, "guided_max_whitespace": count}
    )
    assert args.constraint is not None
    assert dict(args.constraint.options) == {"whitespace": "compact", "max_whitespace": 7}
    assert all(type(v) in (str, int) for _, v in args.constraint.options)
    # a schema given as a Python object keeps its property order, as plain types
    schema = {"type": "object", "properties": {"z": {}, "a": {"enum": (1, 2.5, None)}}}
    c = vllm_constraints.constraint_from_extra_args({"guided_json": schema})
    assert c is not None and list(c.value["properties"]) == ["z", "a"]
    assert c.value["properties"]["a"]["enum"] == [1, 2.5, None]


def test_every_core_option_has_a_type() -> None:
    assert set(vllm_constraints.OPTION_TYPES) == set(ALL_OPTIONS)


def reference_nesting(text: str) -> tuple[int, bool]:
    """The nesting a JSON lexer sees, one character at a time, up to the first backslash
    outside a string (where a decoder stops); and whether the text has none."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == "\\":
            return deepest, False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest, True


def random_json(rng: random.Random, depth: int) -> Any:
    pick = rng.randrange(6 if depth < 12 else 3)
    if pick == 0:
        return "".join(rng.choice('[]{}"\\a\n\x01é') for _ in range(rng.randrange(6)))
    if pick == 1:
        return rng.choice([1, -2.5, True, None])
    if pick == 2:
        return []
    if pick in (3, 4):
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(1, 4))]
    keys = ["a", '"]', "\\", "{["]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randrange(1, 4))}


def nesting_of(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((nesting_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((nesting_of(v) for v in value.values()), default=0)
    return 0


def test_json_nesting_scan_matches_a_lexer() -> None:
    rng = random.Random(5)
    # valid JSON: exactly its nesting (strings holding brackets, quotes and escapes included)
    for _ in range(500):
        doc = random_json(rng, 0)
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
        for chunk in (1, 3, 7, 1 << 20):
            assert request_args.json_nesting(text.encode(), 10**6, chunk) == nesting_of(doc)
    # any text: at least what a decoder would reach before its first error
    alphabet = ['"', "\\", "[", "]", "{", "}", "a", ",", ":", "é"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        lexed, clean = reference_nesting(text)
        for chunk in (1, 3, 7, 1 << 20):
            got = request_args.json_nesting(text.encode(), 10**6, chunk)
            assert got == lexed if clean else got >= lexed, (text, chunk)
    # the scan stops past its limit, and a deep text is refused before any decoder sees it
    assert request_args.json_nesting(DEEP.encode(), 128) > 128
    with pytest.raises(ValueError, match="nests more than 128 levels"):
        request_args.decode_json_text(DEEP, "x")
    # the check around the scan: a text with no more opening brackets than levels allowed is
    # not scanned; exactly at the limit it passes, one level more is refused, and brackets
    # inside strings count only toward skipping the scan, never toward the nesting
    at = "[" * 5 + "]" * 5
    assert request_args.checked_json_text(at, "x", max_nesting=5) == at
    for deeper in ("[" * 6 + "]" * 6, '{"a": ' * 6 + "1" + "}" * 6):
        with pytest.raises(ValueError, match="nests more than 5 levels"):
            request_args.checked_json_text(deeper, "x", max_nesting=5)
    stringy = '[["' + "[{" * 50 + '"]]'
    assert request_args.checked_json_text(stringy, "x", max_nesting=2) == stringy
    with pytest.raises(ValueError, match="nests more than 1 level"):
        request_args.checked_json_text(stringy, "x", max_nesting=1)


def test_huge_max_tokens_with_fit_is_no_budget() -> None:
    # vLLM bounds max_tokens itself; an engine that does not must not fail the batch: the core
    # counts tokens in 32 bits, and a budget past that is no budget
    args = {"guided_regex": "(ab|c)+0", "guided_fit_max_tokens": True}
    cache = GatedCache()  # the compile ends inside apply
    v1 = type("Gated", (GuidedLogitsProcessorV1.with_vocabulary(VOCAB),), {"cache": cache})
    proc = v1(None, "cpu", False)
    out: list[int] = []
    params = SamplingParams(args, max_tokens=10**30)
    proc.update_state(
        BatchUpdate(2, [], [(0, params, None, out), (1, SamplingParams(HEALTHY), None, [])], [])
    )
    cache.gate.set()
    rows = proc.apply(torch.zeros(2, WIDTH))
    grammar = GRAMMAR_CACHE.get(vllm_constraints.Constraint.make("regex", "(ab|c)+0"), VOCAB)
    healthy = GRAMMAR_CACHE.get(
        vllm_constraints.Constraint.make("regex", HEALTHY["guided_regex"]), VOCAB
    )
    assert finite(rows[0]) == reference_allowed(grammar, [])
    assert finite(rows[1]) == reference_allowed(healthy, [])
    guide = proc.guide(0)
    assert guide is not None and guide.matcher is not None
    assert guide.matcher.max_tokens == 2**32 - 1


class BrokenGrammar:
    """A compile result whose matcher cannot be made (what a bug would look like)."""

    vocab = VOCAB

    def matcher(self, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")


class BrokenCache(GrammarCache):
    def get_pending(self, constraint: Any, vocab: Any) -> Any:
        if constraint.value != "zz":
            return GrammarCache.get_pending(GRAMMAR_CACHE, constraint, vocab)

        class Pending:
            done_calls = 0

            def done(self) -> bool:
                Pending.done_calls += 1
                return Pending.done_calls > 1  # not ready while the request joins

            def result(self) -> Any:
                return BrokenGrammar()

        return Pending()


def test_a_guide_that_fails_inside_apply_fails_alone(caplog: pytest.LogCaptureFixture) -> None:
    v1 = type("Broken", (GuidedLogitsProcessorV1.with_vocabulary(VOCAB),), {"cache": BrokenCache()})
    proc = v1(None, "cpu", False)
    added = [
        (0, SamplingParams(HEALTHY), None, []),
        (1, SamplingParams({"guided_regex": "zz"}), None, []),
        (2, SamplingParams(None), None, []),
    ]
    proc.update_state(BatchUpdate(3, [], added, []))
    logits = torch.randn(3, WIDTH)
    before = logits.clone()
    with caplog.at_level(logging.WARNING, logger="tokensieve"):
        rows = proc.apply(logits)
    healthy = GRAMMAR_CACHE.get(
        vllm_constraints.Constraint.make("regex", HEALTHY["guided_regex"]), VOCAB
    )
    assert finite(rows[0]) == reference_allowed(healthy, [])
    assert finite(rows[1]) == {EOS}
    assert torch.equal(rows[2], before[2])
    assert any("RecursionError" in r.getMessage() for r in caplog.records)


def test_unexpected_errors_at_admission_are_client_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Exploding(GrammarCache):
        def get_pending(self, constraint: Any, vocab: Any) -> Any:
            raise MemoryError("out of memory while compiling")

    cls = type("Exploding", (GuidedLogitsProcessorV1,), {"cache": Exploding()})
    with caplog.at_level(logging.WARNING, logger="tokensieve"):
        with pytest.raises(ValueError, match="invalid guided_\\* request: MemoryError: out of"):
            cls.validate_params(SamplingParams(HEALTHY))
    assert any(r.exc_info for r in caplog.records), "logged with its traceback"
    # in the engine the request is failed alone, logged too
    proc = cls.with_vocabulary(VOCAB)(None, "cpu", False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tokensieve"):
        proc.update_state(BatchUpdate(1, [], [(0, SamplingParams(HEALTHY), None, [])], []))
    assert finite(proc.apply(torch.zeros(1, WIDTH))[0]) == {EOS}
    assert any("MemoryError" in r.getMessage() and r.exc_info for r in caplog.records)
