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
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from typing import Any

import tokensieve as ts
from tokensieve.constraints import describe_error
from tokensieve.vllm.constraints import GRAMMAR_CACHE
from tokensieve.vllm.processor_base import GuidedProcessorBase, error_text
from tokensieve.vllm.structured import engine_reasoning, read_request

__all__ = ["admit", "register", "uses_tokensieve"]

logger = logging.getLogger("tokensieve.vllm")

_OURS = ("tokensieve.vllm.Scheduler", "tokensieve.vllm.AsyncScheduler")
_RESOLVED: dict[str, bool] = {}
_LOCK = threading.Lock()


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
    if getattr(getattr(vllm_config, "model_config", None), "is_diffusion", False):
        raise _validation_error(
            "Structured outputs are not supported for diffusion language models"
        )
    if tokenizer is None:
        raise _validation_error(
            "structured outputs need a tokenizer, so they cannot be used with skip_tokenizer_init"
        )
    try:
        req = read_request(params, engine_reasoning=engine_reasoning(vllm_config))
        vocab = GuidedProcessorBase.admission_vocabulary()
        grammar = GRAMMAR_CACHE.get(req.constraint, vocab)
        try:
            grammar.matcher(
                reasoning_end=req.reasoning_end, thinking_budget=req.thinking_budget
            ).fill_next_token_bitmask(ts.allocate_token_bitmask(1, vocab.vocab_size))
        except ts.TokensieveError as e:
            raise ValueError(describe_error(req.constraint, e)) from e
    except ValueError as e:
        raise _validation_error(str(e)) from None
    except Exception as e:  # still the request's: a client error, never a server error
        logger.warning(
            "tokensieve: a request was refused at admission by an unexpected %s",
            type(e).__name__,
            exc_info=True,
        )
        raise _validation_error(f"invalid structured_outputs: {error_text(e)}") from None


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
        admit(params, self.vllm_config, getattr(self, "tokenizer", None))
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
