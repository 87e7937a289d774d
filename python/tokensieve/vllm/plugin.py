"""The ``vllm.general_plugins`` entry point: tokensieve validates structured requests at the door.

vLLM checks a request's ``structured_outputs`` in the API process (``SamplingParams.verify``,
called by ``InputProcessor._validate_params``), with xgrammar or llguidance, before the engine
sees it. When the engine's scheduler is :class:`tokensieve.vllm.Scheduler` (or a subclass),
:func:`register` (run by vLLM in each of its processes) makes that check tokensieve's: the
request is read (:func:`tokensieve.vllm.structured.read_request`), compiled against the
admission vocabulary (the engine's when it runs in this process, else the 256 single bytes: the
syntax, support and automaton budgets, not the model's spelling) and its first mask computed;
a failure is a ``VLLMValidationError`` with tokensieve's message, which the OpenAI server
answers with HTTP 400. vLLM's other checks still run. Engines with any other scheduler are left
exactly as they were.

The check runs where vLLM's own backends check a request, inside
``InputProcessor._validate_params`` (for a raw prompt on the renderer's thread, for the server's
rendered prompts on the event loop), so requests go on to the engine one by one as they are
checked. The request is read (in time proportional to its size) and its constraint found in
the cache (with its error), or compiled where the check stands (the GIL released) for at most
``ADMISSION_COMPILE_S`` (2 ms) of the thread's CPU time (time spent waiting for a core, on cores
busy with the engine, does not count; at most 20 ms of wall-clock time); a compile not done by
then starts again on a core compile thread
and is handed back to the wrapped ``AsyncLLM.add_request``, which sleeps until it is done (never
blocking the event loop) and submits the request again.
Requests for a constraint whose compile is running share it. So a slow or hostile constraint
delays its own request only. A request that reaches ``_validate_params`` without passing
``AsyncLLM.add_request`` (the offline ``LLM``) is checked there to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

import tokensieve as ts
from tokensieve.constraints import PendingCompile, describe_error
from tokensieve.vllm.constraints import GRAMMAR_CACHE
from tokensieve.vllm.processor_base import GuidedProcessorBase, error_text
from tokensieve.vllm.structured import (
    StructuredRequest,
    engine_reasoning,
    note_admission_compile,
    read_request,
)

__all__ = ["admit", "register", "uses_tokensieve"]

logger = logging.getLogger("tokensieve.vllm")

_OURS = ("tokensieve.vllm.Scheduler", "tokensieve.vllm.AsyncScheduler")
_RESOLVED: dict[str, bool] = {}
_LOCK = threading.Lock()

# Set on a request's StructuredOutputsParams once admitted: what was admitted (see _admitted).
_ADMITTED = "_tokensieve_admitted"
# set by the wrapped AsyncLLM.add_request: this request's check may hand a running compile back
_DEFERRABLE = "_tokensieve_deferrable"
# How long the door's check compiles a new constraint where it stands (the GIL released), in
# the thread's CPU time (at most ten times that of wall-clock time), before it starts the compile
# again on a compile thread and hands it to a coroutine that sleeps until it is done: most
# constraints compile in well under this, and a request checked at once goes on to the engine at
# once. CPU time, not wall-clock time: on cores shared with the engine's forward passes a compile
# of 1-2 ms waits for a core long enough to pass 2 ms of wall-clock time, and would be paid again
# from the start on a compile thread. Compiling here rather than handing every compile to a compile thread
# and waiting: on cores busy with the engine's forward passes each hand-over waits for a core,
# which costs a burst more than the compiles themselves (docs/vllm.md).
ADMISSION_COMPILE_S = 0.002


def uses_tokensieve(vllm_config: Any) -> bool:
    """The engine's scheduler is tokensieve's (by name, or a class deriving from it)."""
    sched = getattr(getattr(vllm_config, "scheduler_config", None), "scheduler_cls", None)
    if sched is None:
        return False
    if isinstance(sched, str):
        if sched in _OURS:
            return True
        with _LOCK:
            known = _RESOLVED.get(sched)
        if known is None:
            known = _resolves_to_ours(sched)
            with _LOCK:
                _RESOLVED[sched] = known
        return known
    return _is_ours(sched)


def _resolves_to_ours(name: str) -> bool:
    module, _, attr = name.rpartition(".")
    if not module:
        return False
    try:
        return _is_ours(getattr(importlib.import_module(module), attr))
    except Exception:  # vLLM reports a scheduler it cannot import itself
        return False


def _is_ours(cls: Any) -> bool:
    from tokensieve.vllm.backend import Scheduler

    return isinstance(cls, type) and issubclass(cls, Scheduler)


def _validation_error(message: str) -> Exception:
    try:
        from vllm.exceptions import VLLMValidationError
    except ImportError:  # an older vLLM: a ValueError is a 400 too
        return ValueError(message)
    return VLLMValidationError(message, parameter="structured_outputs")  # type: ignore[no-any-return]


def admit(params: Any, vllm_config: Any, tokenizer: Any) -> None:
    """Check one request's ``structured_outputs`` the way the engine will compile it; raise
    the client's error (``VLLMValidationError``, a ``ValueError``) when it fails."""
    with _refusals():
        started = _start(params, vllm_config, tokenizer)
        _finish(params, *started)


class _AdmissionPending(Exception):
    """Raised inside vLLM's validation when a deferrable request's compile is still running:
    ``AsyncLLM.add_request`` (wrapped) awaits it off the loop and submits the request again."""

    def __init__(self, started: tuple[StructuredRequest, PendingCompile, ts.Vocabulary]) -> None:
        super().__init__("tokensieve: the constraint's admission compile is still running")
        self.started = started


def _admit_or_defer(params: Any, vllm_config: Any, tokenizer: Any) -> None:
    """:func:`admit` when the compile is done within ``ADMISSION_COMPILE_S``; otherwise
    raise :class:`_AdmissionPending` with the running compile."""
    with _refusals():
        started = _start(params, vllm_config, tokenizer)
        done = started[1].done()
        if done:
            _finish(params, *started)
    if not done:
        raise _AdmissionPending(started)
    _mark_admitted(params)


async def _admitted_async(
    params: Any, started: tuple[StructuredRequest, PendingCompile, ts.Vocabulary]
) -> None:
    """Sleep until a started compile is done (checking at doubling intervals from 0.2 ms up to
    5 ms), then finish the admission: the first mask, or the client's error."""
    with _refusals():
        delay = 0.0002
        while not started[1].done():
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.005)
        _finish(params, *started)
    _mark_admitted(params)


def _mark_admitted(params: Any) -> None:
    try:
        setattr(params.structured_outputs, _ADMITTED, _admission_key(params))
    except AttributeError:  # a params object that takes no attributes is checked again
        pass


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """Every failure inside as the client's error: a ``VLLMValidationError`` (HTTP 400) with
    tokensieve's message."""
    try:
        yield
    except ValueError as e:
        raise _validation_error(str(e)) from None
    except Exception as e:  # still the request's: a client error, never a server error
        logger.warning(
            "tokensieve: a request was refused at admission by an unexpected %s",
            type(e).__name__,
            exc_info=True,
        )
        raise _validation_error(f"invalid structured_outputs: {error_text(e)}") from None


def _start(
    params: Any, vllm_config: Any, tokenizer: Any
) -> tuple[StructuredRequest, PendingCompile, ts.Vocabulary]:
    """Read the request and compile it (for at most ``ADMISSION_COMPILE_S`` of this thread's
    CPU time here, then on a compile thread), or find it cached."""
    if getattr(getattr(vllm_config, "model_config", None), "is_diffusion", False):
        raise ValueError("Structured outputs are not supported for diffusion language models")
    if tokenizer is None:
        raise ValueError(
            "structured outputs need a tokenizer, so they cannot be used with skip_tokenizer_init"
        )
    req = read_request(params, engine_reasoning=engine_reasoning(vllm_config))
    vocab = GuidedProcessorBase.admission_vocabulary()
    pending = GRAMMAR_CACHE.get_pending(req.constraint, vocab, inline_seconds=ADMISSION_COMPILE_S)
    return req, pending, vocab


def _finish(
    params: Any, req: StructuredRequest, pending: PendingCompile, vocab: ts.Vocabulary
) -> None:
    """The compiled grammar's first mask (a ``ValueError`` with the client's message when the
    compile failed or the start cannot be spelled). Records on the request how long the
    compile took (the engine reads it: :mod:`tokensieve.vllm.backend`, overlapped compiles)."""
    grammar = pending.result()
    note_admission_compile(params, pending.compile_seconds)
    row = np.zeros((1, ts.bitmask_words(vocab.vocab_size)), dtype=np.int32)
    try:
        grammar.matcher(
            reasoning_end=req.reasoning_end, thinking_budget=req.thinking_budget
        ).fill_next_token_bitmask(row)
    except ts.TokensieveError as e:
        raise ValueError(describe_error(req.constraint, e)) from e


def _admission_key(params: Any) -> tuple[int, ...]:
    """What an admission read, by identity: the constraint fields and the request's options."""
    so = params.structured_outputs
    fields = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
    return (id(so), id(getattr(params, "extra_args", None))) + tuple(
        id(getattr(so, f, None)) for f in fields
    )


def _admitted(params: Any) -> bool:
    so = getattr(params, "structured_outputs", None)
    return so is not None and getattr(so, _ADMITTED, None) == _admission_key(params)


def register() -> None:
    """Make ``InputProcessor._validate_params`` check structured requests with tokensieve when
    the engine's scheduler is tokensieve's (idempotent; a no-op without vLLM)."""
    try:
        from vllm.v1.engine.input_processor import InputProcessor
    except ImportError:
        return
    vllm_validate = InputProcessor._validate_params
    if getattr(vllm_validate, "_tokensieve", False):
        return

    @functools.wraps(vllm_validate)
    def _validate_params(self: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        so = getattr(params, "structured_outputs", None)
        if so is None or not uses_tokensieve(getattr(self, "vllm_config", None)):
            return vllm_validate(self, params, *args, **kwargs)
        if not _admitted(params):
            tokenizer = getattr(self, "tokenizer", None)
            if getattr(so, _DEFERRABLE, None) == _admission_key(params):
                _admit_or_defer(params, self.vllm_config, tokenizer)
            else:
                admit(params, self.vllm_config, tokenizer)
        # vLLM's own checks of everything else, without its structured-output backends
        params.structured_outputs = None
        try:
            result = vllm_validate(self, params, *args, **kwargs)
        finally:
            params.structured_outputs = so
        so._backend = "tokensieve"
        return result

    _validate_params._tokensieve = True  # type: ignore[attr-defined]
    InputProcessor._validate_params = _validate_params
    _wrap_add_request()


def _wrap_add_request() -> None:
    """Make ``AsyncLLM.add_request`` let the door's check hand a running compile back (see the
    module's text) (idempotent; a no-op without vLLM's ``AsyncLLM``)."""
    try:
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError:
        return
    vllm_add = AsyncLLM.add_request
    if getattr(vllm_add, "_tokensieve", False):
        return

    @functools.wraps(vllm_add)
    async def add_request(
        self: Any, request_id: Any, prompt: Any, params: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if getattr(params, "structured_outputs", None) is not None and uses_tokensieve(
            getattr(self, "vllm_config", None)
        ):
            # The check runs inside vLLM's own validation (where its backends' checks run: on
            # the renderer's thread for a raw prompt, on the loop after rendering for the
            # server's), so requests reach the engine one by one as they are checked. A compile
            # not done there after ADMISSION_COMPILE_S is awaited here, off the loop,
            # and the request submitted again (vLLM validates before anything else).
            so = params.structured_outputs
            with contextlib.suppress(AttributeError):  # else checked to the end where it stands
                setattr(so, _DEFERRABLE, _admission_key(params))
            try:
                return await vllm_add(self, request_id, prompt, params, *args, **kwargs)
            except _AdmissionPending as pending:
                started = pending.started
            finally:
                with contextlib.suppress(AttributeError):
                    delattr(so, _DEFERRABLE)
            await _admitted_async(params, started)
        return await vllm_add(self, request_id, prompt, params, *args, **kwargs)

    add_request._tokensieve = True  # type: ignore[attr-defined]
    AsyncLLM.add_request = add_request
