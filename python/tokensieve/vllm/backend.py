"""tokensieve as vLLM's own structured-output backend (imports vLLM).

One switch on a stock vLLM makes every structured request tokensieve's::

    vllm serve MODEL --scheduler-cls tokensieve.vllm.Scheduler
    LLM(model=..., scheduler_cls="tokensieve.vllm.Scheduler")

:class:`Scheduler` is vLLM's scheduler (its ``AsyncScheduler`` when async scheduling is on)
whose ``StructuredOutputManager`` gets a :class:`TokensieveBackend` before the first request:
the manager then compiles every ``response_format`` / ``structured_outputs`` (a GBNF/EBNF
``grammar`` included) / tool-call schema with tokensieve on its executor (the request waits in
``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR``, the step goes on; a request whose constraint the door
compiled quickly joins the step while it compiles, see :class:`Scheduler`), fills the bitmask rows from the scheduler's CPU (several threads above 128
requests; each row fill releases the GIL), drives draft tokens for speculative decoding
(``validate_tokens``, accept then ``rollback``) and gates the constraint behind a
``--reasoning-parser`` exactly as it does for its built-in backends. The manager reads each
request's ``SamplingParams`` through a hook, so vLLM's per-request knobs and tokensieve's
``guided_*`` options in ``vllm_xargs`` reach the compile (:mod:`tokensieve.vllm.structured`).

The API process validates requests before the engine sees them; the ``vllm.general_plugins``
entry point (:mod:`tokensieve.vllm.plugin`) makes that validation tokensieve's when the
scheduler is this one, so a bad constraint is an HTTP 400 with tokensieve's message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
from vllm.v1.core.sched.async_scheduler import AsyncScheduler as _VllmAsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler as _VllmScheduler
from vllm.v1.request import RequestStatus
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

import tokensieve as ts
from tokensieve import _core
from tokensieve.constraints import describe_error
from tokensieve.vllm.constraints import GRAMMAR_CACHE
from tokensieve.vllm.processor_base import (
    adopt_vllm_logging,
    error_text,
    vocabulary_from_vllm_config,
)
from tokensieve.vllm.structured import (
    DraftStats,
    GrammarState,
    StopTokens,
    StructuredRequest,
    admission_compile_seconds,
    engine_reasoning,
    read_request,
)

__all__ = [
    "AsyncScheduler",
    "Scheduler",
    "TokensieveBackend",
    "TokensieveGrammar",
    "engine_reasoning",
    "install",
]

logger = logging.getLogger("tokensieve.vllm")

# One INFO line per compile (request id, kind, cache hit, time) when set: how a deployment (or a
# test) sees that tokensieve compiled a request. DEBUG otherwise.
_LOG_COMPILES = os.environ.get("TOKENSIEVE_LOG_COMPILES", "") not in ("", "0")
# Threads of the structured-output manager's executor (see install).
GRAMMAR_TASKS = 16
# Before each scheduler step the engine's thread waits at most STEP_WAIT_S for the compiles that
# started less than FRESH_COMPILE_S ago (see wait_for_fresh_compiles).
STEP_WAIT_S = 0.003
FRESH_COMPILE_S = 0.010
# A request whose compile is still running joins a scheduler step all the same when the door
# compiled its constraint in under OVERLAP_ADMISSION_S and at most OVERLAP_QUEUE compiles wait
# for a lane: its prefill runs while the compile finishes, and the step waits for the compile
# where it needs the request's first mask (see Scheduler._handle_blocked_waiting_request).
# TOKENSIEVE_OVERLAP_COMPILES=0 turns this off.
OVERLAP_COMPILES = os.environ.get("TOKENSIEVE_OVERLAP_COMPILES", "") != "0"
OVERLAP_ADMISSION_S = 0.05
OVERLAP_QUEUE = 4
# Every structured request keeps its output finishable within its max_tokens unless it says
# otherwise (its guided_fit_max_tokens): a server-wide default, off unless set; structural tags
# (tool calls, where a call cut at max_tokens is no call) keep it on unless it is set to 0.
_FIT_ENV = os.environ.get("TOKENSIEVE_FIT_MAX_TOKENS", "")
_FIT_DEFAULT = _FIT_ENV not in ("", "0")
_TAG_FIT_DEFAULT = _FIT_ENV != "0"


class TokensieveGrammar(GrammarState, StructuredOutputGrammar):  # type: ignore[misc]
    """vLLM's per-request grammar object: :class:`~tokensieve.vllm.structured.GrammarState`."""


# key type -> the StructuredOutputsParams field a bare (type, spec) key is read as
_KEY_FIELDS = {
    StructuredOutputOptions.JSON: "json",
    StructuredOutputOptions.JSON_OBJECT: "json_object",
    StructuredOutputOptions.REGEX: "regex",
    StructuredOutputOptions.CHOICE: "choice",
    StructuredOutputOptions.GRAMMAR: "grammar",
    StructuredOutputOptions.STRUCTURAL_TAG: "structural_tag",
}


@dataclass
class TokensieveBackend(StructuredOutputBackend):  # type: ignore[misc]
    """vLLM's engine-level backend: the engine's vocabulary (vLLM's tokenizer at the model's
    logits width), the shared grammar cache, and the bitmask."""

    def __post_init__(self) -> None:
        adopt_vllm_logging()
        self.vocab = vocabulary_from_vllm_config(self.vllm_config)
        if self.vocab.vocab_size != self.vocab_size:
            raise ValueError(
                f"tokensieve: the vocabulary has {self.vocab.vocab_size} ids but the model's "
                f"logits have {self.vocab_size}"
            )
        spec = getattr(self.vllm_config, "speculative_config", None)
        self.num_speculative_tokens = int(getattr(spec, "num_speculative_tokens", 0) or 0)
        self.engine_reasoning = engine_reasoning(self.vllm_config)
        self.cache = GRAMMAR_CACHE
        self.compiles = 0
        self.draft_stats = DraftStats()
        self._words = ts.bitmask_words(self.vocab_size)

    def read(self, request: Any) -> StructuredRequest:
        """The request's constraint and settings, read from its ``SamplingParams`` once (kept on
        the request for :meth:`compile_request`)."""
        req = getattr(request, "_tokensieve_request", None)
        if req is None:
            req = read_request(
                request.sampling_params,
                engine_reasoning=self.engine_reasoning,
                fit_default=_FIT_DEFAULT,
                tag_fit_default=_TAG_FIT_DEFAULT,
            )
            request._tokensieve_request = req
        return req

    def compile_request(self, request: Any) -> TokensieveGrammar:
        """Compile a request read from its ``SamplingParams`` (what the manager hook calls)."""
        req = self.read(request)
        params = request.sampling_params
        return self._compile(req, params.all_stop_token_ids, str(request.request_id))

    def start_request(self, request: Any) -> TokensieveGrammar | None:
        """As the request arrives: its grammar at once when its constraint is compiled already
        (the cache's, in about 0.1 ms: ready for the scheduler's next step); otherwise ``None``
        once its compile has started on a core compile thread (the manager's executor then
        waits for that compile rather than starting its own) or when reading it failed (the
        executor raises the same error for this request alone)."""
        try:
            req = self.read(request)
            pending = self.cache.get_pending(req.constraint, self.vocab)
            if not pending.done():
                return None
            grammar = pending.result()
            params = request.sampling_params
            return self._state(
                req,
                grammar,
                params.all_stop_token_ids,
                str(request.request_id),
                time.perf_counter(),
                True,
            )
        except Exception:
            return None

    def compile_grammar(
        self,
        request_type: Any,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> TokensieveGrammar:
        """vLLM's interface: a constraint from its key alone (no per-request options)."""
        field = _KEY_FIELDS.get(request_type)
        if field is None:
            raise ValueError(f"tokensieve: unknown structured output type {request_type!s}")
        value: Any = grammar_spec
        if field == "json_object":
            value = True
        elif field == "choice":
            value = json.loads(grammar_spec)
        so = SimpleNamespace(**{field: value})
        params = SimpleNamespace(structured_outputs=so, extra_args=None, min_tokens=0)
        req = read_request(params, engine_reasoning=self.engine_reasoning)
        return self._compile(req, stop_token_ids, "?")

    def _compile(
        self, req: StructuredRequest, stop_token_ids: Any, label: str
    ) -> TokensieveGrammar:
        start = time.perf_counter()
        hits = self.cache.hits
        grammar = self.cache.get(req.constraint, self.vocab)  # ValueError: the client's message
        return self._state(req, grammar, stop_token_ids, label, start, self.cache.hits > hits)

    def _state(
        self,
        req: StructuredRequest,
        grammar: ts.Grammar,
        stop_token_ids: Any,
        label: str,
        start: float,
        hit: bool,
    ) -> TokensieveGrammar:
        """The request's grammar object on `grammar`, its first mask computed."""
        state = TokensieveGrammar(
            grammar,
            stop=StopTokens(self.vocab, stop_token_ids),
            label=label,
            max_rollback=self.num_speculative_tokens + 1,
            max_tokens=req.max_tokens,
            reasoning_end=req.reasoning_end,
            thinking_budget=req.thinking_budget,
            draft_stats=self.draft_stats,
        )
        # The first mask, here on the manager's executor rather than in a step; a start the
        # vocabulary cannot spell fails the request now, with its message.
        try:
            # a row of its own: compiles run on several executor threads at once
            row = np.zeros((1, self._words), dtype=np.int32)
            state.matcher.fill_next_token_bitmask(row, 0)
        except ts.TokensieveError as e:
            raise ValueError(describe_error(req.constraint, e)) from e
        self.compiles += 1
        logger.log(
            logging.INFO if _LOG_COMPILES else logging.DEBUG,
            "tokensieve: compiled %s for request %s (%s, %.1f ms)",
            req.constraint.kind,
            label,
            "cache hit" if hit else "compiled",
            (time.perf_counter() - start) * 1e3,
        )
        return state

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        import torch

        return torch.full((max_num_seqs, self._words), -1, dtype=torch.int32)

    def destroy(self) -> None:
        pass


class FailedGrammar(StructuredOutputGrammar):  # type: ignore[misc]
    """The grammar of a request whose compile failed after the request had joined a step
    (an overlapped compile): its row allows the stop ids only and no token is accepted, so vLLM
    ends the request with an error (``finish_reason`` ``error``), as for a compile that fails
    before the request is scheduled."""

    def __init__(self, stop: StopTokens, label: str, message: str) -> None:
        self.stop = stop
        self.error = message
        logger.warning("tokensieve: request %s is refused: %s", label, message)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return False

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return []

    def rollback(self, num_tokens: int) -> None:
        pass

    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        self.stop.stop_row(bitmask, batch_index)

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass


class OverlappedGrammar(StructuredOutputGrammar):  # type: ignore[misc]
    """The grammar of a request scheduled while its compile runs (see
    ``Scheduler._handle_blocked_waiting_request``): the compile's ``Future``, waited for (GIL
    released) by the scheduler before the step's bitmask, or by any method called first."""

    def __init__(self, future: Future[Any], stop: StopTokens, label: str) -> None:
        self.future = future
        self.stop = stop
        self.label = label
        self._grammar: StructuredOutputGrammar | None = None

    def resolve(self) -> StructuredOutputGrammar:
        """The compiled grammar (waiting for it), or a :class:`FailedGrammar` with the
        compile's error."""
        if self._grammar is None:
            try:
                self._grammar = self.future.result()
            except Exception as e:
                self._grammar = FailedGrammar(self.stop, self.label, error_text(e))
        return self._grammar

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return bool(self.resolve().accept_tokens(request_id, tokens))

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return list(self.resolve().validate_tokens(tokens))

    def rollback(self, num_tokens: int) -> None:
        self.resolve().rollback(num_tokens)

    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        self.resolve().fill_bitmask(bitmask, batch_index)

    def is_terminated(self) -> bool:
        return bool(self.resolve().is_terminated())

    def reset(self) -> None:
        self.resolve().reset()


def _started_executor(threads: int) -> ThreadPoolExecutor:
    """A thread pool whose threads are all running already. A ``ThreadPoolExecutor`` starts
    its threads as tasks arrive, and each start blocks the submitting thread until the new
    thread runs: in a burst of new constraints that is the engine's thread, at a time when the
    cores are busy (milliseconds per start). Started here, before the first request, they wait
    idle instead."""
    pool = ThreadPoolExecutor(threads, thread_name_prefix="tokensieve-grammar")
    gate = threading.Barrier(threads)

    def meet() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            gate.wait(timeout=5)

    for f in [pool.submit(meet) for _ in range(threads)]:
        f.result()
    return pool


def install(manager: Any) -> bool:
    """Make tokensieve the backend of a vLLM ``StructuredOutputManager`` (idempotent).

    The backend is built now (the vocabulary before the first request), rebuilt if vLLM clears
    it, and the manager's compile reads each request's ``SamplingParams``. Returns False (with a
    log line) when the engine has no tokenizer (``skip_tokenizer_init``): vLLM refuses
    structured requests then.
    """
    if getattr(manager, "_tokensieve", False):
        return True
    vllm_config = manager.vllm_config
    if getattr(vllm_config.model_config, "skip_tokenizer_init", False):
        logger.warning(
            "tokensieve: the engine runs with skip_tokenizer_init; structured outputs are off"
        )
        return False

    def new_backend() -> TokensieveBackend:
        return TokensieveBackend(
            vllm_config,
            tokenizer=getattr(manager, "tokenizer", None),
            vocab_size=int(vllm_config.model_config.get_vocab_size()),
        )

    manager.backend = new_backend()
    vllm_grammar_init = manager.grammar_init
    vllm_create_grammar = manager._create_grammar

    def grammar_init(request: Any) -> None:
        so_request = request.structured_output_request
        if so_request is not None and manager.backend is None:
            manager.backend = new_backend()
        backend = manager.backend
        if (
            so_request is not None
            and isinstance(backend, TokensieveBackend)
            and getattr(manager, "_use_async_grammar_compilation", True)
        ):
            ready = backend.start_request(request)
            if ready is not None:  # compiled before: ready for this step, no executor round trip
                so_request.grammar = ready
                return
        vllm_grammar_init(request)
        grammar = getattr(so_request, "_grammar", None)
        if isinstance(grammar, Future):  # see wait_for_fresh_compiles
            grammar.tokensieve_started = time.monotonic()  # type: ignore[attr-defined]

    def create_grammar(request: Any) -> Any:
        backend = manager.backend
        if not isinstance(backend, TokensieveBackend):
            return vllm_create_grammar(request)
        try:
            return backend.compile_request(request)
        except ValueError as e:  # the client's error: this request alone fails
            logger.warning("tokensieve: request %s is refused: %s", request.request_id, e)
            raise
        except Exception:
            logger.exception("tokensieve: compiling request %s failed", request.request_id)
            raise

    manager.grammar_init = grammar_init
    manager._create_grammar = create_grammar
    if getattr(manager, "executor", None) is not None:
        # the manager's compile tasks wait for compiles running on the core's compile threads
        # (the GIL released): more of them than vLLM's half of the cores, so that a request whose
        # compile is done never waits behind a larger one still compiling
        manager.executor = _started_executor(GRAMMAR_TASKS)
    manager._tokensieve = True
    backend = manager.backend
    logger.info(
        "tokensieve is vLLM's structured-output backend: vocabulary of %d ids (%d from the "
        "tokenizer), EOS %s, drafts %d, reasoning parser %s",
        backend.vocab.vocab_size,
        backend.vocab.tokenizer_size,
        backend.vocab.eos_token_ids,
        backend.num_speculative_tokens,
        "on" if backend.engine_reasoning else "off",
    )
    return True


def wait_for_fresh_compiles(
    requests: Iterable[Any], wait_s: float = STEP_WAIT_S, now: float | None = None
) -> list[Future[Any]]:
    """Before a scheduler step: wait (GIL released) at most ``wait_s`` for the grammars of the
    requests still waiting for one whose compile started less than ``FRESH_COMPILE_S`` ago;
    returns the compiles waited for.

    A request joins a step only with its grammar ready; one whose compile misses the step waits
    for the next, a whole forward pass later (100-200 ms for a burst's prefill on the test
    model). Most compiles take well under a millisecond alone, so in a burst of new constraints
    a short wait lets them join the step they arrived for; a compile that has run longer is left
    to finish on its own (it would hold every step it is waited for)."""
    now = time.monotonic() if now is None else now
    fresh: list[Future[Any]] = []
    for request in requests:
        grammar = _running_compile(request)
        started = getattr(grammar, "tokensieve_started", 0.0)
        if grammar is not None and now - started < FRESH_COMPILE_S:
            fresh.append(grammar)
    if fresh and wait_s > 0:
        wait_futures(fresh, timeout=wait_s)
    return fresh


def _running_compile(request: Any) -> Future[Any] | None:
    """The unfinished compile a request waiting for its grammar waits for, when it is one of
    tokensieve's backend (``grammar_init`` stamps those with ``tokensieve_started``)."""
    if request.status != RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR:
        return None
    grammar = getattr(request.structured_output_request, "_grammar", None)
    if (
        isinstance(grammar, Future)
        and getattr(grammar, "tokensieve_started", None) is not None
        and not grammar.done()
    ):
        return grammar
    return None


class Scheduler(_VllmScheduler):  # type: ignore[misc]
    """vLLM's scheduler with tokensieve as its structured-output backend.

    ``--scheduler-cls tokensieve.vllm.Scheduler``: built as vLLM's ``Scheduler`` or, when the
    engine runs async scheduling, as :class:`AsyncScheduler` (vLLM's ``AsyncScheduler``).

    Besides vLLM's scheduling it waits briefly before a step for compiles that have just
    started (:func:`wait_for_fresh_compiles`), and lets a request whose constraint the door
    compiled quickly join a step while its engine compile runs (an :class:`OverlappedGrammar`,
    resolved before the step's bitmask; ``overlapped_compiles`` counts them).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Scheduler:
            config = kwargs.get("vllm_config", args[0] if args else None)
            if getattr(getattr(config, "scheduler_config", None), "async_scheduling", False):
                cls = AsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install(self.structured_output_manager)
        # request id -> (its structured-output request, its OverlappedGrammar), until resolved
        self._overlapped: dict[str, tuple[Any, OverlappedGrammar]] = {}
        self.overlapped_compiles = 0
        self._lanes_free = True

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        # the requests vLLM holds back while their grammar compiles (all waiting ones in a vLLM
        # without that set)
        blocked = getattr(self, "deferred_waiting", None)
        held = self.waiting if blocked is None else blocked
        # the compile lanes are asked only when a request waits for its grammar
        self._lanes_free = (
            OVERLAP_COMPILES
            and len(held) > 0
            and _core.compile_pool_stats()["waiting"] <= OVERLAP_QUEUE
        )
        wait_for_fresh_compiles(r for r in held if not self._may_overlap(r))
        return super().schedule(*args, **kwargs)

    def _may_overlap(self, request: Any) -> bool:
        """Whether a request waiting for its compile may join this step all the same: its
        compile is running on tokensieve's backend, the door compiled its constraint in under
        ``OVERLAP_ADMISSION_S`` (a constraint that is slow to compile is never waited for inside
        a step) and at most ``OVERLAP_QUEUE`` compiles wait for a lane."""
        if not self._lanes_free or _running_compile(request) is None:
            return False
        seconds = admission_compile_seconds(getattr(request, "sampling_params", None))
        return seconds is not None and seconds < OVERLAP_ADMISSION_S

    def _handle_blocked_waiting_request(self, request: Any) -> bool:
        # vLLM asks this of each waiting request it is about to schedule
        if self._may_overlap(request):
            so_request = request.structured_output_request
            backend = self.structured_output_manager.backend
            stop = StopTokens(backend.vocab, request.sampling_params.all_stop_token_ids)
            overlapped = OverlappedGrammar(so_request._grammar, stop, str(request.request_id))
            so_request.grammar = overlapped
            request.status = RequestStatus.WAITING
            self._overlapped[request.request_id] = (so_request, overlapped)
            self.overlapped_compiles += 1
            logger.log(
                logging.INFO if _LOG_COMPILES else logging.DEBUG,
                "tokensieve: request %s joins a step while its compile runs",
                request.request_id,
            )
        return bool(super()._handle_blocked_waiting_request(request))

    def get_grammar_bitmask(self, scheduler_output: Any) -> Any:
        if self._overlapped:
            self._resolve_overlapped(scheduler_output)
        return super().get_grammar_bitmask(scheduler_output)

    def _resolve_overlapped(self, scheduler_output: Any) -> None:
        """Wait (GIL released) for the overlapped compiles of the requests this step samples
        and give each request its grammar."""
        scheduled = scheduler_output.num_scheduled_tokens
        due: list[tuple[str, Any, OverlappedGrammar]] = []
        for request_id, (so_request, overlapped) in list(self._overlapped.items()):
            request = self.requests.get(request_id)
            if request is None or request.is_finished():
                del self._overlapped[request_id]
            elif request_id in scheduled and not request.is_prefill_chunk:
                due.append((request_id, so_request, overlapped))
        if not due:
            return
        wait_futures([overlapped.future for _, _, overlapped in due])
        for request_id, so_request, overlapped in due:
            if so_request._grammar is overlapped:
                so_request.grammar = overlapped.resolve()
            del self._overlapped[request_id]


class AsyncScheduler(Scheduler, _VllmAsyncScheduler):  # type: ignore[misc]
    """vLLM's ``AsyncScheduler`` with tokensieve as its structured-output backend."""
