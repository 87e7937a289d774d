"""vLLM requests' constraints: ``SamplingParams.extra_args`` read into a :class:`Constraint`.

:func:`constraint_from_extra_args` reads a request's ``extra_args`` (``vllm_xargs`` on the
OpenAI server)::

    {"guided_regex": "[0-9]{3}"}
    {"guided_json": '{"type": "object", ...}', "guided_whitespace": "compact"}
    {"guided_choice": ["yes", "no"]}
    {"guided_json_object": true}
    {"guided_grammar": 'root ::= "yes" | "no"', "guided_start": "root"}

``guided_grammar`` is a grammar's text (GBNF/EBNF, ``Grammar.from_ebnf``; a grammar with no
``name ::= ...`` rule is Lark, ``Grammar.from_lark``), its start rule ``guided_start`` (default
``root``, ``start`` for Lark). Options are the Python API's keyword
arguments with a ``guided_`` prefix; ``guided_request_id``
(a string of at most 256 bytes, or an integer) names the request in tokensieve's log lines;
``guided_fit_max_tokens`` (true) keeps the output finishable within the request's ``max_tokens``
(a token is allowed only if the output can still be completed in the tokens left; see
:mod:`tokensieve.guides`). ``guided_reasoning_end`` (a string such as ``"</think>"``) lets the
output start with free reasoning text up to that marker, the constraint applying right after
it; ``guided_thinking_budget`` (an integer) forces the marker after that many reasoning tokens
(:func:`reasoning_settings`). The compile budgets (``guided_max_states``,
``guided_max_nfa_bytes``, ``guided_mask_cache_bytes``, ``guided_max_compile_seconds``) may be
lowered by a request but not raised past the server's limits (:func:`over_client_limits`).

Every value is read by :func:`read_extra_args` with the type its key takes
(:data:`OPTION_TYPES`; integers in range, booleans, strings of bounded length) and within the
limits of :mod:`tokensieve.vllm.request_args` (JSON text is scanned for size and nesting before
it is decoded); anything else is a ``ValueError`` naming the key. Over HTTP values arrive as
strings or numbers, so text spelling a number or a boolean (``"12"``, ``"true"``) is read as
one, and ``null``/``"null"`` leaves an option unset. The constraint model, its compile and the
grammar cache are :mod:`tokensieve.constraints`'; this module only maps request keys to kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import tokensieve as ts
from tokensieve.constraints import (
    ALL_OPTIONS,
    Constraint,
    GrammarCache,
    describe_error,
    set_index_directory,
)
from tokensieve.vllm import request_args

__all__ = [
    "EXTRA_ARGS_KINDS",
    "GRAMMAR_CACHE",
    "FIT_KEY",
    "REQUEST_ID_KEY",
    "Constraint",
    "GrammarCache",
    "GuidedArgs",
    "OPTION_TYPES",
    "constraint_from_extra_args",
    "describe_error",
    "fit_budget",
    "fit_max_tokens",
    "read_extra_args",
    "reasoning_of",
    "request_id_of",
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
    "guided_grammar": "ebnf",
    "guided_structural_tag": "structural_tag",
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


@dataclass(frozen=True)
class GuidedArgs:
    """Every ``guided_*`` key of one request, read and checked (:func:`read_extra_args`)."""

    constraint: Constraint | None = None
    # guided_request_id, printable (control characters escaped)
    request_id: str | None = None
    # guided_fit_max_tokens
    fit_max_tokens: bool = False
    # guided_reasoning_end / guided_thinking_budget, and whether the request sent them (a
    # request's null or empty marker switches the processor's default off)
    reasoning_end: str | None = None
    has_reasoning_end: bool = False
    thinking_budget: int | None = None
    has_thinking_budget: bool = False


# How each option's value is read (request_args): the engine's budgets are counts and seconds,
# the JSON Schema options text (their words are checked by the core), counts and flags.
OPTION_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "max_states": "count",
        "max_nfa_bytes": "count",
        "mask_cache_bytes": "count",
        "max_compile_seconds": "seconds",
        "additional_properties": "text",
        "formats": "text",
        "one_of": "text",
        "whitespace": "text",
        "recursion": "text",
        "literal_spelling": "text",
        "property_order": "text",
        "start": "text",
        "max_whitespace": "u32",
        "max_recursion_depth": "u32",
        "max_stack_depth": "u32",
        "max_nesting_depth": "u32",
        "truncate_recursion": "bool",
        "lenient": "bool",
        "registry": "registry",
    }
)
# The core reads the engine's budgets as 64-bit counts.
_COUNT_MAX = (1 << 64) - 1
# The core's limit on a reasoning end marker.
MAX_REASONING_END_BYTES = 256
MAX_REQUEST_ID_BYTES = 256


def _option_value(name: str, value: Any) -> Any:
    """One option's value, read by its type (:data:`OPTION_TYPES`)."""
    what = _PREFIX + name
    kind = OPTION_TYPES.get(name)
    if kind == "count":
        return request_args.read_int(value, what, 0, _COUNT_MAX)
    if kind == "seconds":
        return request_args.read_seconds(value, what)
    if kind == "u32":
        return request_args.read_int(value, what)
    if kind == "bool":
        return request_args.read_bool(value, what)
    if kind == "text":
        return request_args.read_text(value, what)
    if kind == "registry":
        # JSON text stays text (checked): the core reads its numbers exactly
        limit = request_args.MAX_JSON_NESTING + 1
        if isinstance(value, (str, bytes, bytearray)):
            text = request_args.checked_json_text(value, what, max_nesting=limit)
            registry = request_args.decode_json_text(text, what, max_nesting=limit)
        else:
            registry = text = request_args.plain_json(value, what, max_nesting=limit)
        if not isinstance(registry, dict):
            raise ValueError(f"{what} must be a JSON object mapping URIs to schemas")
        return text
    # an option of the core this table does not know yet: a plain scalar
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return request_args.read_int(value, what, -_COUNT_MAX, _COUNT_MAX)
    if isinstance(value, float):
        return request_args.read_seconds(value, what)
    return request_args.read_text(value, what)


def _schema(value: Any) -> Any:
    """``guided_json``: JSON text (checked, kept as text so that the core reads its numbers
    exactly), or a JSON-like Python object or pydantic model class (copied in plain types)."""
    name = "guided_json"
    if isinstance(value, (str, bytes, bytearray)):
        return request_args.checked_json_text(value, name)
    if isinstance(value, type) and hasattr(value, "model_json_schema"):
        value = value.model_json_schema()
    return request_args.plain_copy(value, name)  # Constraint.make takes the copy as it is


def _tag(value: Any) -> Any:
    """``guided_structural_tag``: JSON text (checked, kept as text) or a JSON-like object."""
    name = "guided_structural_tag"
    if isinstance(value, (str, bytes, bytearray)):
        return request_args.checked_json_text(value, name)
    return request_args.plain_copy(value, name)  # Constraint.make takes the copy as it is


def _choices(value: Any) -> list[str]:
    """``guided_choice``: a non-empty list of strings, or its JSON text."""
    name = "guided_choice"
    if isinstance(value, (str, bytes, bytearray)):
        try:
            choices = request_args.decode_json_text(value, name, max_nesting=1)
        except ValueError as e:
            raise ValueError(f"{name} must be a list of strings (or its JSON text): {e}") from None
    else:
        choices = request_args.plain_json(value, name, max_nesting=1)
    if not isinstance(choices, list) or not choices:
        raise ValueError(f"{name} must be a non-empty list of strings")
    for c in choices:
        if not isinstance(c, str):
            raise ValueError(f"{name} must hold strings only, got {request_args.shown(c)}")
    return choices


def _request_id(value: Any) -> str | None:
    """``guided_request_id``: a string (at most 256 bytes) or an integer, made printable."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(request_args.read_int(value, REQUEST_ID_KEY, -_COUNT_MAX, _COUNT_MAX))
    text = request_args.read_text(value, REQUEST_ID_KEY, MAX_REQUEST_ID_BYTES)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def request_id_of(extra_args: Any) -> str | None:
    """The printable ``guided_request_id`` of a request, or None (absent or unreadable): for
    log lines about a request whose other keys may be malformed."""
    if not isinstance(extra_args, dict):
        return None
    try:
        return _request_id(dict.get(extra_args, REQUEST_ID_KEY))
    except ValueError:
        return None


def _items(extra_args: Any) -> list[tuple[str, Any]]:
    """The ``guided_*`` entries of ``extra_args`` (other keys are not ours)."""
    if isinstance(extra_args, dict):
        entries = list(dict.items(extra_args))
    elif isinstance(extra_args, Mapping):
        entries = list(extra_args.items())
    else:
        raise ValueError(f"extra_args must be a mapping, got {request_args.shown(extra_args)}")
    return [
        (request_args.exact_str(k), v)
        for k, v in entries
        if isinstance(k, str) and str.startswith(k, _PREFIX)
    ]


def read_extra_args(extra_args: Mapping[str, Any] | None) -> GuidedArgs:
    """Read and check every ``guided_*`` key of a request's ``extra_args``.

    Raises ``ValueError`` for more than one constraint key, ``guided_*`` options without a
    constraint, an unknown ``guided_*`` key, or a value of the wrong type or over a limit
    (``request_args``); nothing else. Keys without the ``guided_`` prefix are not ours and are
    ignored.
    """
    if not extra_args:
        return GuidedArgs()
    kinds: list[tuple[str, Any]] = []
    options: dict[str, Any] = {}
    unknown: list[str] = []
    rest: dict[str, Any] = {}
    for name, value in _items(extra_args):
        if name in _NOT_OPTIONS:
            rest[name] = value
        elif name in EXTRA_ARGS_KINDS:
            if value is None:
                continue
            if name == "guided_json_object":
                if not request_args.read_bool(value, name):
                    continue
                value = None
            elif name == "guided_json":
                value = _schema(value)
            elif name == "guided_choice":
                value = _choices(value)
            elif name == "guided_structural_tag":
                value = _tag(value)
            else:
                value = request_args.read_text(value, name, request_args.MAX_TEXT_BYTES)
            kinds.append((name, value))
        else:
            option = name[len(_PREFIX) :]
            if option not in ALL_OPTIONS:
                unknown.append(request_args.shown(name))
            elif not request_args.is_null(value):
                options[option] = _option_value(option, value)
    if unknown:
        listed = ", ".join(unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise ValueError(
            f"unsupported option(s) {listed}; options are "
            f"{', '.join(_PREFIX + o for o in ALL_OPTIONS)}"
        )
    args = GuidedArgs(
        request_id=_request_id(rest.get(REQUEST_ID_KEY)),
        fit_max_tokens=request_args.read_bool(rest.get(FIT_KEY), FIT_KEY),
        has_reasoning_end=REASONING_END_KEY in rest,
        has_thinking_budget=THINKING_BUDGET_KEY in rest,
    )
    end = rest.get(REASONING_END_KEY)
    if end is not None:
        end = request_args.read_text(end, REASONING_END_KEY, MAX_REASONING_END_BYTES)
    budget = rest.get(THINKING_BUDGET_KEY)
    if budget is not None and not request_args.is_null(budget):
        budget = request_args.read_int(budget, THINKING_BUDGET_KEY)
    else:
        budget = None
    if not kinds:
        if options:
            given = ", ".join(sorted(_PREFIX + k for k in options))
            raise ValueError(
                f"{given} given without a constraint; add one of {', '.join(EXTRA_ARGS_KINDS)}"
            )
        return replace(args, reasoning_end=end, thinking_budget=budget)
    if len(kinds) > 1:
        raise ValueError(
            f"at most one of {', '.join(EXTRA_ARGS_KINDS)} per request; got "
            f"{', '.join(k for k, _ in kinds)}"
        )
    name, value = kinds[0]
    constraint = Constraint.make(EXTRA_ARGS_KINDS[name], value, options, label=name)
    return replace(args, constraint=constraint, reasoning_end=end, thinking_budget=budget)


def constraint_from_extra_args(extra_args: Mapping[str, Any] | None) -> Constraint | None:
    """The constraint a request's ``SamplingParams.extra_args`` asks for, or ``None``.

    Raises ``ValueError`` as :func:`read_extra_args` does (every ``guided_*`` key is checked).
    """
    return read_extra_args(extra_args).constraint


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


def _extra_args(params: Any) -> Any:
    return getattr(params, "extra_args", None) if params is not None else None


def fit_budget(args: GuidedArgs, params: Any) -> int | None:
    """The token budget a request's output must fit: its ``max_tokens`` when it sent
    ``guided_fit_max_tokens`` (true), else None. A ``max_tokens`` past what the core counts
    (2^32 - 1) is no budget at all, and counts as that."""
    if not args.fit_max_tokens:
        return None
    limit = getattr(params, "max_tokens", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and int.__int__(limit) > 0:
        return min(int.__int__(limit), request_args.U32_MAX)
    return None


def fit_max_tokens(params: Any) -> int | None:
    """:func:`fit_budget` of a request's sampling parameters (``ValueError`` for malformed
    ``guided_*`` keys)."""
    return fit_budget(read_extra_args(_extra_args(params)), params)


def reasoning_of(
    args: GuidedArgs,
    params: Any,
    default_end: str | None = None,
    default_budget: int | None = None,
) -> tuple[str | None, int | None]:
    """The reasoning end marker and thinking budget for a request (see
    :func:`reasoning_settings`)."""
    end = args.reasoning_end if args.has_reasoning_end else default_end
    end = end or None
    # a request that switches the marker off drops the processor's budget with it
    budget = default_budget if end is not None else None
    if args.has_thinking_budget:
        budget = args.thinking_budget
    if budget is not None and end is None:
        raise ValueError(
            f"{THINKING_BUDGET_KEY} needs a reasoning end marker ({REASONING_END_KEY})"
        )
    if end is not None and fit_budget(args, params) is not None:
        raise ValueError(
            f"{FIT_KEY} cannot be combined with a reasoning span ({REASONING_END_KEY}): "
            "not supported yet"
        )
    return end, budget


def reasoning_settings(
    params: Any, default_end: str | None = None, default_budget: int | None = None
) -> tuple[str | None, int | None]:
    """The reasoning end marker and thinking budget for a request: its
    ``guided_reasoning_end`` / ``guided_thinking_budget`` keys, else the processor's defaults.

    A request switches a default marker off (and its budget) with an empty string or null. Raises
    ``ValueError`` for a marker that is not a string (or longer than 256 bytes), a budget that is
    not a non-negative integer, or a budget without a marker.
    """
    if default_end is not None:
        default_end = request_args.read_text(
            default_end, "the reasoning end marker", MAX_REASONING_END_BYTES
        )
    if default_budget is not None:
        default_budget = request_args.read_int(default_budget, THINKING_BUDGET_KEY)
    return reasoning_of(read_extra_args(_extra_args(params)), params, default_end, default_budget)


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
