"""tokensieve as vLLM's structured-output backend: the parts that do not need vLLM.

vLLM's ``StructuredOutputManager`` (``vllm/v1/structured_output/__init__.py``) drives one
*grammar object* per structured request from the scheduler: ``accept_tokens`` with the tokens
the engine committed (reasoning tokens already trimmed when a ``--reasoning-parser`` is set),
``validate_tokens`` for the longest grammar-valid prefix of a request's draft tokens (without
advancing), ``fill_bitmask`` for each row of the step's bitmask (a draft row after accepting the
drafts before it, then ``rollback``), ``is_terminated`` and ``reset``. :class:`GrammarState` is
that object, over a :class:`tokensieve.Matcher`; :mod:`tokensieve.vllm.backend` makes it a
subclass of vLLM's ``StructuredOutputGrammar``.

:func:`structured_args` reads a request's ``StructuredOutputsParams`` (``json``, ``regex``,
``choice``, ``json_object``, ``grammar``; what ``response_format`` and ``tools`` become on the
OpenAI server) into the same checked form as the logits processor's ``guided_*`` keys, so both paths share
the value limits, the compile cache and the messages. vLLM's per-request knobs are honoured:
``whitespace_pattern`` (the ``whitespace`` option, a regex), ``disable_any_whitespace``
(``whitespace="compact"``) and ``disable_additional_properties``
(``additional_properties="forbid"``); tokensieve's own options ride in ``vllm_xargs`` with the
``guided_`` prefix (``guided_max_states``, ``guided_fit_max_tokens``, ``guided_start`` for a
grammar's start rule, ...). ``grammar`` is a GBNF/EBNF grammar (what vLLM's xgrammar backend
reads; vLLM's own validation, where it runs instead of tokensieve's, rewrites ``choice`` into
one), compiled by ``Grammar.from_ebnf``, or a Lark grammar (vLLM's ``grammar_is_likely_lark``
test, the one its built-in backends use to pick the dialect), compiled by
``Grammar.from_lark``. ``structural_tag`` (what strict tool calling
sends: xgrammar's structural-tag JSON) is compiled by ``Grammar.from_structural_tag``.

Stop tokens: vLLM hands a request's stop ids (its EOS, the generation config's EOS ids and the
client's ``stop_token_ids``) to the backend; a finished output allows exactly those, and any of
them ends the grammar; before that, none is allowed (vLLM would stop there, cutting the output).

Failures never leave a method: a mask that cannot be computed (a budget hit in a lazy
automaton) makes the row allow only the stop tokens and the request's next ``accept_tokens``
return False, which makes vLLM finish that request alone with an error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

import tokensieve as ts
from tokensieve import _core
from tokensieve.guides import MAX_ROLLBACK
from tokensieve.vllm import request_args
from tokensieve.vllm.constraints import (
    CLIENT_LIMITS,
    EXTRA_ARGS_KINDS,
    FIT_KEY,
    REASONING_END_KEY,
    Constraint,
    GuidedArgs,
    fit_budget,
    over_client_limits,
    read_extra_args,
    reasoning_of,
)
from tokensieve.vllm.processor_base import error_text, unsupported_sampling

__all__ = [
    "ADMISSION_COMPILE_KEY",
    "DraftStats",
    "GrammarState",
    "StopTokens",
    "StructuredRequest",
    "engine_reasoning",
    "read_request",
    "structured_args",
]

logger = logging.getLogger("tokensieve.vllm")

# The extra_args key under which the door (tokensieve.vllm.plugin) hands the engine how long the
# request's constraint took to compile at admission, in seconds (absent when the door found it
# compiled already). The door sets or removes it on every request it admits.
ADMISSION_COMPILE_KEY = "tokensieve_admission_compile_s"


def note_admission_compile(params: Any, seconds: float | None) -> None:
    """Record on ``params.extra_args`` how long the admission compile took (remove the
    record when ``seconds`` is None)."""
    extra = getattr(params, "extra_args", None)
    if seconds is None:
        if isinstance(extra, dict):
            extra.pop(ADMISSION_COMPILE_KEY, None)
        return
    if extra is None:
        extra = {}
        try:
            params.extra_args = extra
        except AttributeError:
            return
    if isinstance(extra, dict):
        extra[ADMISSION_COMPILE_KEY] = float(seconds)


def admission_compile_seconds(params: Any) -> float | None:
    """What :func:`note_admission_compile` recorded: a finite number of seconds >= 0, else
    None."""
    extra = getattr(params, "extra_args", None)
    if not isinstance(extra, dict):
        return None
    value = extra.get(ADMISSION_COMPILE_KEY)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < float("inf") else None


# StructuredOutputsParams field -> the guided_* key it is read as
_FIELD_KEYS = (
    ("json", "guided_json"),
    ("regex", "guided_regex"),
    ("choice", "guided_choice"),
    ("json_object", "guided_json_object"),
    ("grammar", "guided_grammar"),
    ("structural_tag", "guided_structural_tag"),
)


def _knob(so: Any, name: str) -> Any:
    return getattr(so, name, None)


def structured_args(
    structured_outputs: Any,
    extra_args: Mapping[str, Any] | None,
    *,
    fit_default: bool = False,
    tag_fit_default: bool = False,
) -> GuidedArgs:
    """The checked constraint and settings of a request's ``structured_outputs`` (plus the
    ``guided_*`` options of its ``extra_args``). ``fit_default``: ``guided_fit_max_tokens`` for
    a request that does not say; ``tag_fit_default``: the same for a ``structural_tag`` (tool
    calls: a call cut at ``max_tokens`` is no call).

    Raises ``ValueError`` naming the problem: no constraint or more than one, a constraint also sent as a ``guided_*`` key, conflicting
    whitespace knobs, or anything :func:`~tokensieve.vllm.constraints.read_extra_args` refuses
    (a malformed or oversized value, an unknown option).
    """
    so = structured_outputs
    merged: dict[str, Any] = {}
    if extra_args:
        if not isinstance(extra_args, Mapping):
            raise ValueError(f"extra_args must be a mapping, got {request_args.shown(extra_args)}")
        for key, value in extra_args.items():
            if isinstance(key, str) and str.startswith(key, "guided_"):
                if key in EXTRA_ARGS_KINDS and value is not None:
                    raise ValueError(
                        f"the request has structured_outputs and {request_args.shown(key)}: "
                        "send the constraint once"
                    )
                merged[request_args.exact_str(key)] = value
    given = [(f, key) for f, key in _FIELD_KEYS if _knob(so, f) is not None]
    if not given:
        raise ValueError(
            "structured_outputs has no constraint; set one of json, regex, choice, json_object, "
            "grammar, structural_tag"
        )
    if len(given) > 1:
        raise ValueError(
            "structured_outputs has more than one constraint: " + ", ".join(f for f, _ in given)
        )
    field, key = given[0]
    fits = fit_default or (tag_fit_default and field == "structural_tag")
    if fits and not merged.get(REASONING_END_KEY):  # a reasoning span excludes it
        merged.setdefault(FIT_KEY, True)
    value = _knob(so, field)
    if field == "json_object":
        if not request_args.read_bool(value, "structured_outputs.json_object"):
            raise ValueError(
                "structured_outputs.json_object must be true if set; omit structured_outputs "
                "to leave the output unconstrained"
            )
        value = True
    merged[key] = value
    if field in ("json", "json_object"):
        _add_knobs(so, merged)
    name = f"structured_outputs.{field}"
    try:
        args = read_extra_args(merged)
    except ValueError as e:  # messages name the value by its key: name it as the client sent it
        raise ValueError(re.sub(rf"\b{key}\b", name, str(e))) from None
    assert args.constraint is not None
    return replace(args, constraint=replace(args.constraint, label=name))


def _add_knobs(so: Any, merged: dict[str, Any]) -> None:
    """vLLM's per-request JSON knobs as tokensieve options (a ``guided_*`` option of the same
    name that says otherwise is a conflict)."""
    pattern = _knob(so, "whitespace_pattern")
    compact = bool(_knob(so, "disable_any_whitespace"))
    if pattern is not None and compact:
        raise ValueError(
            "structured_outputs.whitespace_pattern and disable_any_whitespace contradict each "
            "other; send one"
        )
    whitespace = "compact" if compact else pattern
    if whitespace is not None:
        _set_option(merged, "guided_whitespace", whitespace, "whitespace knob")
    if _knob(so, "disable_additional_properties"):
        _set_option(
            merged, "guided_additional_properties", "forbid", "disable_additional_properties"
        )


def _set_option(merged: dict[str, Any], key: str, value: Any, knob: str) -> None:
    old = merged.get(key)
    if old is not None and old != value:
        raise ValueError(f"{key} and structured_outputs' {knob} contradict each other; send one")
    merged[key] = value


class StopTokens:
    """A request's stop ids against the vocabulary's EOS ids: the ids to allow besides the
    vocabulary's EOS once the output is complete (``extra``), those to clear then
    (``missing``), and the EOS id an extra stop id is fed to the matcher as."""

    __slots__ = ("extra", "missing", "eos", "stops")

    def __init__(self, vocab: _core.Vocabulary, stop_token_ids: Iterable[int] | None) -> None:
        eos = list(vocab.eos_token_ids)
        size = vocab.vocab_size
        stops = sorted({int(t) for t in stop_token_ids or () if 0 <= int(t) < size})
        self.eos = eos[0] if eos else None
        if not stops or self.eos is None:  # nothing said: the vocabulary's EOS ids
            stops = eos
        self.stops = stops
        self.extra = [t for t in stops if t not in eos] if self.eos is not None else []
        self.missing = [t for t in eos if t not in stops]

    @property
    def plain(self) -> bool:
        """The stop ids are the vocabulary's EOS ids: masks need no change."""
        return not self.extra and not self.missing

    def fix_row(self, bitmask: Any, index: int, accepting: bool) -> None:
        """Make a filled row allow exactly the stop ids when ``accepting``, none otherwise."""
        words = _row_words(bitmask, index)
        for t in self.extra:
            if accepting:
                words[t >> 5] |= np.uint32(1 << (t & 31))
            else:
                words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
        if accepting:
            for t in self.missing:
                words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)

    def stop_row(self, bitmask: Any, index: int) -> None:
        """Make a row allow the stop ids only."""
        words = _row_words(bitmask, index)
        words[:] = 0
        for t in self.stops:
            words[t >> 5] |= np.uint32(1 << (t & 31))


def _row_words(bitmask: Any, index: int) -> Any:
    """Row ``index`` of an int32 bitmask (torch CPU tensor or numpy) as a writable uint32 view."""
    row = bitmask[index]
    array = row.numpy() if hasattr(row, "numpy") and not isinstance(row, np.ndarray) else row
    return np.asarray(array).view(np.uint32)


class DraftStats:
    """Draft tokens the grammar judged (``validate_tokens``): offered, and the grammar-valid
    prefixes' length (the rest was cut before verification). Counted under the GIL."""

    __slots__ = ("offered", "valid", "calls")

    def __init__(self) -> None:
        self.offered = 0
        self.valid = 0
        self.calls = 0

    @property
    def rejected(self) -> int:
        return self.offered - self.valid


class GrammarState:
    """One structured request's matcher, driven the way vLLM's manager drives a grammar.

    ``grammar`` is compiled for the engine's vocabulary; ``stop`` says which ids end the
    output (:class:`StopTokens`); ``max_rollback`` must cover the engine's draft length;
    ``max_tokens``, ``reasoning_end`` and ``thinking_budget`` go to the matcher
    (:meth:`tokensieve.Grammar.matcher`).
    """

    def __init__(
        self,
        grammar: ts.Grammar,
        *,
        stop: StopTokens | None = None,
        label: str = "",
        max_rollback: int = MAX_ROLLBACK,
        max_tokens: int | None = None,
        reasoning_end: str | None = None,
        thinking_budget: int | None = None,
        draft_stats: DraftStats | None = None,
    ) -> None:
        self.grammar = grammar
        self.draft_stats = draft_stats
        self.matcher = grammar.matcher(
            max_rollback=max(max_rollback, MAX_ROLLBACK),
            max_tokens=max_tokens,
            reasoning_end=reasoning_end,
            thinking_budget=thinking_budget,
        )
        self.stop = stop if stop is not None else StopTokens(grammar.vocab, None)
        self.label = label
        self.error: str | None = None
        self.num_processed_tokens = 0

    # -- helpers --------------------------------------------------------------------------

    def _fail(self, message: str, error: BaseException | None = None) -> None:
        if self.error is None:
            self.error = message
            unexpected = error is not None and not isinstance(
                error, (ValueError, ts.TokensieveError)
            )
            logger.warning(
                "tokensieve: request %s is ended with an error: %s",
                self.label or "?",
                message,
                exc_info=error if unexpected else None,
            )

    def _accept_one(self, token: int) -> bool:
        """Feed one token (an extra stop id as EOS); False, unchanged, when it is refused."""
        m = self.matcher
        if token in self.stop.extra:
            if self.stop.eos is None or not m.is_accepting():
                return False
            token = self.stop.eos
        elif token in self.stop.missing and m.is_accepting():
            return False  # not a stop token of this request: refused where the mask clears it
        return m.accept_token(token)

    # -- vLLM's StructuredOutputGrammar ---------------------------------------------------

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        """Advance by the committed tokens; False when one is refused (vLLM then ends the
        request with an error). Tokens after the output ended are ignored."""
        if self.error is not None:
            return False
        try:
            for token in tokens:
                if self.matcher.is_finished():
                    return True
                if not self._accept_one(int(token)):
                    self._fail(
                        f"output token {int(token)} at position {self.num_processed_tokens} "
                        "is not allowed"
                    )
                    return False
                self.num_processed_tokens += 1
        except Exception as e:  # a budget hit while advancing, or anything else
            self._fail(error_text(e), e)
            return False
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts from here (up to the token that
        ends the output), without advancing."""
        if self.error is not None:
            return []
        accepted: list[int] = []
        m = self.matcher
        try:
            for token in tokens:
                if m.is_finished() or not self._accept_one(int(token)):
                    break
                accepted.append(int(token))
        except Exception as e:
            self._fail(error_text(e), e)
        finally:
            if accepted:
                try:
                    m.rollback(len(accepted))
                except Exception as e:
                    self._fail(error_text(e), e)
        if self.error is not None:
            accepted = []
        stats = self.draft_stats
        if stats is not None:
            stats.calls += 1
            stats.offered += len(tokens)
            stats.valid += len(accepted)
        return accepted

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (an ending stop token included)."""
        if num_tokens <= 0:
            return
        try:
            self.matcher.rollback(num_tokens)
            self.num_processed_tokens -= num_tokens
        except Exception as e:  # more than the kept history
            self._fail(error_text(e), e)

    def fill_bitmask(self, bitmask: Any, index: int) -> None:
        """Overwrite row ``index`` with the tokens allowed next (the stop ids only once the
        request failed). Releases the GIL while the row is computed; never raises."""
        if self.error is None:
            try:
                m = self.matcher
                m.fill_next_token_bitmask(bitmask, index)
                if not self.stop.plain:
                    self.stop.fix_row(bitmask, index, m.is_accepting())
                return
            except Exception as e:
                self._fail(error_text(e), e)
        self.stop.stop_row(bitmask, index)

    def is_terminated(self) -> bool:
        """The output ended (a stop token was accepted)."""
        return self.matcher.is_finished()

    def reset(self) -> None:
        self.matcher.reset()
        self.num_processed_tokens = 0
        self.error = None


def engine_reasoning(vllm_config: Any) -> bool:
    """vLLM's ``--reasoning-parser`` gates the constraint (set and not ``enable_in_reasoning``)."""
    so = getattr(vllm_config, "structured_outputs_config", None)
    return bool(getattr(so, "reasoning_parser", "")) and not bool(
        getattr(so, "enable_in_reasoning", False)
    )


class StructuredRequest:
    """What the backend needs of one request: its constraint and the matcher's settings."""

    __slots__ = ("constraint", "max_tokens", "reasoning_end", "thinking_budget")

    def __init__(
        self,
        constraint: Constraint,
        max_tokens: int | None = None,
        reasoning_end: str | None = None,
        thinking_budget: int | None = None,
    ) -> None:
        self.constraint = constraint
        self.max_tokens = max_tokens
        self.reasoning_end = reasoning_end
        self.thinking_budget = thinking_budget


def read_request(
    params: Any,
    *,
    engine_reasoning: bool = False,
    limits: Mapping[str, float] = CLIENT_LIMITS,
    fit_default: bool = False,
    tag_fit_default: bool = False,
) -> StructuredRequest:
    """Read and check a request's ``SamplingParams`` (``structured_outputs`` and the
    ``guided_*`` keys of ``extra_args``); ``ValueError`` with the client's message.

    ``engine_reasoning``: vLLM's ``--reasoning-parser`` gates the constraint (the grammar sees
    only the tokens after the parser's end marker), so tokensieve's own reasoning span
    (``guided_reasoning_end``) and ``guided_fit_max_tokens`` (which counts every output token)
    are refused. ``fit_default`` (the server's ``TOKENSIEVE_FIT_MAX_TOKENS``) makes
    ``guided_fit_max_tokens`` the default of requests that do not say, ``tag_fit_default`` of
    structural tags (not under a reasoning parser).
    """
    args = structured_args(
        getattr(params, "structured_outputs", None),
        getattr(params, "extra_args", None),
        fit_default=fit_default and not engine_reasoning,
        tag_fit_default=tag_fit_default and not engine_reasoning,
    )
    constraint = args.constraint
    assert constraint is not None  # structured_args always names one
    problem = unsupported_sampling(params, constraint) or over_client_limits(constraint, limits)
    if problem is not None:
        raise ValueError(problem)
    end, budget = reasoning_of(args, params)
    fit = fit_budget(args, params)
    if engine_reasoning and (end is not None or fit is not None):
        given = REASONING_END_KEY if end is not None else FIT_KEY
        raise ValueError(
            f"{given} cannot be used while the server runs a --reasoning-parser: vLLM applies "
            "the constraint after the parser's end marker (limit the reasoning with vLLM's "
            "thinking_token_budget)"
        )
    return StructuredRequest(constraint, fit, end, budget)
