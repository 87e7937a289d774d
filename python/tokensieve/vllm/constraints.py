"""vLLM requests' constraints: ``SamplingParams.extra_args`` read into a :class:`Constraint`.

:func:`constraint_from_extra_args` reads a request's ``extra_args`` (``vllm_xargs`` on the
OpenAI server)::

    {"guided_regex": "[0-9]{3}"}
    {"guided_json": '{"type": "object", ...}', "guided_whitespace": "compact"}
    {"guided_choice": ["yes", "no"]}
    {"guided_json_object": true}

Options are the Python API's keyword arguments with a ``guided_`` prefix; ``guided_request_id``
(any value) names the request in tokensieve's log lines; ``guided_fit_max_tokens`` (true) keeps
the output finishable within the request's ``max_tokens`` (a token is allowed only if the output
can still be completed in the tokens left; see :mod:`tokensieve.guides`).
``guided_reasoning_end`` (a string such as ``"</think>"``) lets the output start with free
reasoning text up to that marker, the constraint applying right after it; ``guided_thinking_budget``
(an integer) forces the marker after that many reasoning tokens (:func:`reasoning_settings`).
The compile budgets (``guided_max_states``, ``guided_max_nfa_bytes``,
``guided_mask_cache_bytes``, ``guided_max_compile_seconds``) may be lowered by a request but not
raised past the server's limits (:func:`over_client_limits`). Over HTTP they arrive
as strings or numbers, so strings spelling JSON literals (``"true"``, ``"12"``, ``"null"``,
``"[...]"``) are decoded; any other string stays a string. The constraint model, its compile
and the grammar cache are :mod:`tokensieve.constraints`'; this module only maps request keys
to kinds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import tokensieve as ts
from tokensieve.constraints import (
    Constraint,
    GrammarCache,
    describe_error,
    set_index_directory,
)

__all__ = [
    "EXTRA_ARGS_KINDS",
    "GRAMMAR_CACHE",
    "FIT_KEY",
    "REQUEST_ID_KEY",
    "Constraint",
    "GrammarCache",
    "constraint_from_extra_args",
    "describe_error",
    "fit_max_tokens",
    "CLIENT_LIMITS",
    "over_client_limits",
    "REASONING_END_KEY",
    "THINKING_BUDGET_KEY",
    "reasoning_settings",
    "set_index_directory",
    "validation_vocabulary",
]

# extra_args key -> constraint kind
EXTRA_ARGS_KINDS: dict[str, str] = {
    "guided_json": "json_schema",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_json_object": "json_object",
}
_PREFIX = "guided_"
# A client-chosen name for the request in tokensieve's log lines (vLLM passes logits processors
# no request id); not an option.
REQUEST_ID_KEY = "guided_request_id"
# Opt-in: keep the output finishable within the request's max_tokens; not a grammar option.
FIT_KEY = "guided_fit_max_tokens"
# The output starts with free reasoning text up to this marker; not a grammar option.
REASONING_END_KEY = "guided_reasoning_end"
# Reasoning tokens after which the marker is forced; not a grammar option.
THINKING_BUDGET_KEY = "guided_thinking_budget"
_NOT_OPTIONS = (REQUEST_ID_KEY, FIT_KEY, REASONING_END_KEY, THINKING_BUDGET_KEY)


def _coerce_option(value: Any) -> Any:
    """Decode strings that spell JSON literals, arrays or objects; keep other values as is."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("true", "false", "null", "none"):
        return {"true": True, "false": False}.get(text.lower())
    if text[:1] in "[{-0123456789":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return value
    return value


def _truthy(value: Any) -> bool:
    value = _coerce_option(value)
    if isinstance(value, str):
        return bool(value)
    return bool(value) and value != 0


def constraint_from_extra_args(extra_args: Mapping[str, Any] | None) -> Constraint | None:
    """The constraint a request's ``SamplingParams.extra_args`` asks for, or ``None``.

    Raises ``ValueError`` for more than one constraint key, ``guided_*`` options without a
    constraint, or a malformed value. Keys without the ``guided_`` prefix are not ours and are
    ignored.
    """
    if not extra_args:
        return None
    kinds: list[tuple[str, Any]] = []
    options: dict[str, Any] = {}
    for name, value in extra_args.items():
        if not isinstance(name, str) or not name.startswith(_PREFIX) or name in _NOT_OPTIONS:
            continue
        if name in EXTRA_ARGS_KINDS:
            if value is None:
                continue
            if name == "guided_json_object" and not _truthy(value):
                continue
            kinds.append((name, value))
        else:
            options[name[len(_PREFIX) :]] = _coerce_option(value)
    if not kinds:
        if options:
            given = ", ".join(sorted(_PREFIX + k for k in options))
            raise ValueError(
                f"{given} given without a constraint; add one of {', '.join(EXTRA_ARGS_KINDS)}"
            )
        return None
    if len(kinds) > 1:
        raise ValueError(
            f"at most one of {', '.join(EXTRA_ARGS_KINDS)} per request; got "
            f"{', '.join(k for k, _ in kinds)}"
        )
    name, value = kinds[0]
    return Constraint.make(EXTRA_ARGS_KINDS[name], value, options, label=name)


# The compile budgets a request may lower but never raise: one client must not lift the limits
# that keep the server's other requests safe (docs/limits.md). By default the core's own
# defaults; a processor's ``with_client_limits`` sets others.
CLIENT_LIMITS: Mapping[str, float] = MappingProxyType(dict(ts._core.GRAMMAR_OPTION_DEFAULTS))


def over_client_limits(constraint: Constraint, limits: Mapping[str, float]) -> str | None:
    """Why a request's compile budgets are refused (one is above ``limits``), or None.

    A value that is not a number is left to the compile, which rejects it with its own message.
    """
    for name, value in constraint.options:
        limit = limits.get(name)
        if limit is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value > limit:
            shown = int(limit) if float(limit).is_integer() else limit
            return (
                f"{_PREFIX}{name}={value} is above this server's limit of {shown}: a request "
                "may lower the compile budgets, not raise them"
            )
    return None


def fit_max_tokens(params: Any) -> int | None:
    """The token budget a request's output must fit: its ``max_tokens`` when it sent
    ``guided_fit_max_tokens`` (true), else None."""
    extra = getattr(params, "extra_args", None)
    if not isinstance(extra, Mapping) or not _truthy(extra.get(FIT_KEY, False)):
        return None
    limit = getattr(params, "max_tokens", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def reasoning_settings(
    params: Any, default_end: str | None = None, default_budget: int | None = None
) -> tuple[str | None, int | None]:
    """The reasoning end marker and thinking budget for a request: its
    ``guided_reasoning_end`` / ``guided_thinking_budget`` keys, else the processor's defaults.

    A request switches a default marker off (and its budget) with an empty string or null. Raises
    ``ValueError`` for a marker that is not a string, a budget that is not a non-negative
    integer, or a budget without a marker.
    """
    extra = getattr(params, "extra_args", None)
    extra = extra if isinstance(extra, Mapping) else {}
    end: Any = extra[REASONING_END_KEY] if REASONING_END_KEY in extra else default_end
    if end is not None and not isinstance(end, str):
        raise ValueError(f"{REASONING_END_KEY} must be a string, got {type(end).__name__}")
    end = end or None
    # a request that switches the marker off drops the processor's budget with it
    budget: Any = default_budget if end is not None else None
    if THINKING_BUDGET_KEY in extra:
        budget = _coerce_option(extra[THINKING_BUDGET_KEY])
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(
                f"{THINKING_BUDGET_KEY} must be a non-negative integer, got {budget!r}"
            )
        if end is None:
            raise ValueError(
                f"{THINKING_BUDGET_KEY} needs a reasoning end marker ({REASONING_END_KEY})"
            )
    if end is not None and fit_max_tokens(params) is not None:
        raise ValueError(
            f"{FIT_KEY} cannot be combined with a reasoning span ({REASONING_END_KEY}): "
            "not supported yet"
        )
    return end, budget


_VALIDATION_VOCAB: list[ts.Vocabulary] = []


def validation_vocabulary() -> ts.Vocabulary:
    """A model-independent vocabulary: the 256 single bytes and an EOS.

    Compiling against it checks a constraint's syntax, support and automaton budgets without
    knowing the model's tokenizer (what a serving front end can do before the engine sees the
    request); only vocabulary-specific failures (``UnspellableError``) are left for later.
    """
    if not _VALIDATION_VOCAB:
        tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
        _VALIDATION_VOCAB.append(ts.Vocabulary(tokens, eos_token_ids=[256]))
    return _VALIDATION_VOCAB[0]


# Shared by every processor in the process: the front end's validate_params and the engine's
# processors hit the same entries when they run in one process.
GRAMMAR_CACHE = GrammarCache()
