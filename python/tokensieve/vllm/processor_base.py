"""What the V1 and V2 processors share: the engine's vocabulary, request admission, guides.

The vocabulary is built once per engine (per process, per tokenizer and vocab size) from vLLM's
tokenizer and ``model_config.get_vocab_size()`` (the logits width). Tests and embedders without
a model config inject one: ``GuidedLogitsProcessorV1.with_vocabulary(vocab)`` returns a subclass
bound to it, and :func:`set_default_vocabulary` sets one for every processor in the process.

``validate_params`` runs in vLLM's front end, which has no model runner and, for a processor
class, no config: it compiles against the vocabulary bound to the class, else the default one,
else the one engine vocabulary built in this process, else a model-independent byte vocabulary
(:func:`~tokensieve.vllm.constraints.validation_vocabulary`), which catches malformed and
unsupported constraints and budget overruns. Compiled grammars go through the shared bounded
cache, so the engine's compile of an admitted request is a cache hit when both run in one
process. On a cache miss the engine side compiles on a thread of its own
(``Grammar.compile_pending``, no GIL needed) as the request joins the batch
(:attr:`GuidedProcessorBase.compile_in_background`); the guide waits for it when the
request's row is first masked. ``min_tokens > 0`` with a constraint is refused: once the output
completes the grammar only EOS may follow, and ``min_tokens`` forbids EOS.

Reasoning models: with a reasoning end marker (the request's ``guided_reasoning_end``, else the
processor's :attr:`GuidedProcessorBase.reasoning_end`, set with
:meth:`GuidedProcessorBase.with_reasoning`), the output is free text up to the marker and the
constraint starts right after it; a thinking budget forces the marker after that many tokens.

A request may lower the compile budgets (``guided_max_compile_seconds``, ``guided_max_states``,
...) but not raise them past :attr:`GuidedProcessorBase.client_limits` (the core's defaults;
:meth:`GuidedProcessorBase.with_client_limits` sets others): such a request is refused at
admission, and failed alone in an engine without admission.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import tokensieve as ts
from tokensieve.guides import RequestGuide
from tokensieve.vllm.constraints import (
    CLIENT_LIMITS,
    EXTRA_ARGS_KINDS,
    GRAMMAR_CACHE,
    Constraint,
    GrammarCache,
    describe_error,
    fit_budget,
    over_client_limits,
    read_extra_args,
    reasoning_of,
    reasoning_settings,
    request_id_of,
    validation_vocabulary,
)

__all__ = [
    "GuidedProcessorBase",
    "default_vocabulary",
    "set_default_vocabulary",
    "vocabulary_from_vllm_config",
]

logger = logging.getLogger("tokensieve.vllm")

_DEFAULT: list[ts.Vocabulary] = []
# (tokenizer name, vocab size) -> vocabulary, for engines built in this process
_ENGINE_VOCABS: dict[tuple[str, int], ts.Vocabulary] = {}
_LOCK = threading.Lock()


def set_default_vocabulary(vocab: ts.Vocabulary | None) -> None:
    """Use ``vocab`` for every processor built afterwards (and for ``validate_params``) in this
    process; ``None`` clears it."""
    with _LOCK:
        _DEFAULT.clear()
        if vocab is not None:
            if not isinstance(vocab, ts.Vocabulary):
                raise TypeError(f"expected tokensieve.Vocabulary, got {type(vocab).__name__}")
            _DEFAULT.append(vocab)


def default_vocabulary() -> ts.Vocabulary | None:
    """The vocabulary set by :func:`set_default_vocabulary`, if any."""
    return _DEFAULT[0] if _DEFAULT else None


def _generation_eos_ids(model_config: Any) -> list[int]:
    try:
        cfg = model_config.try_get_generation_config() or {}
    except Exception:
        return []
    eos = cfg.get("eos_token_id") if isinstance(cfg, dict) else None
    if isinstance(eos, int):
        return [eos]
    if isinstance(eos, (list, tuple)):
        return [int(e) for e in eos if isinstance(e, int)]
    return []


def _load_vllm_tokenizer(model_config: Any) -> Any:
    import importlib

    for module in ("vllm.tokenizers.registry", "vllm.transformers_utils.tokenizer"):
        try:  # the registry since vLLM 0.1x; transformers_utils before
            load = importlib.import_module(module).cached_tokenizer_from_config
        except (ImportError, AttributeError):
            continue
        return load(model_config)
    raise ImportError("vLLM's cached_tokenizer_from_config was not found")


def vocabulary_from_vllm_config(vllm_config: Any) -> ts.Vocabulary:
    """The engine's vocabulary: vLLM's tokenizer, cut/padded to the model's vocab size.

    EOS ids are the tokenizer's plus the generation config's ``eos_token_id`` entries (vLLM
    stops on both). Raises ``ValueError`` when the config has no model (inject a vocabulary).
    """
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None:
        raise ValueError(
            "tokensieve: vllm_config.model_config is None, so the vocabulary cannot be built "
            "from the model's tokenizer; bind one with GuidedLogitsProcessor.with_vocabulary("
            "vocab) or tokensieve.vllm.set_default_vocabulary(vocab)"
        )
    vocab_size = int(model_config.get_vocab_size())
    name = str(getattr(model_config, "tokenizer", "") or getattr(model_config, "model", ""))
    key = (name, vocab_size)
    with _LOCK:
        hit = _ENGINE_VOCABS.get(key)
    if hit is not None:
        return hit
    tokenizer = _load_vllm_tokenizer(model_config)
    if tokenizer is None:
        raise ValueError(
            "tokensieve: the engine runs with skip_tokenizer_init, so there is no tokenizer to "
            "build the vocabulary from; use with_vocabulary(vocab) or set_default_vocabulary"
        )
    eos: list[int] = []
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(tok_eos, int):
        eos.append(tok_eos)
    eos += [e for e in _generation_eos_ids(model_config) if e not in eos]
    source: Any = tokenizer
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        inner = getattr(tokenizer, "tokenizer", None)  # wrappers that hold the HF tokenizer
        if inner is not None and getattr(inner, "backend_tokenizer", None) is not None:
            source = inner
        else:
            source = name  # a local folder holding tokenizer.json
    vocab = ts.Vocabulary.from_pretrained(
        source, vocab_size=vocab_size, eos_token_ids=[e for e in eos if e < vocab_size] or None
    )
    with _LOCK:
        _ENGINE_VOCABS[key] = vocab
    logger.info(
        "tokensieve: vocabulary for %s: %d ids (%d from the tokenizer), kind %s, EOS %s",
        name,
        vocab.vocab_size,
        vocab.tokenizer_size,
        vocab.kind,
        vocab.eos_token_ids,
    )
    return vocab


def _request_label(where: str, extra_args: Any) -> str:
    """How log lines name a request. vLLM hands logits processors no request id (a V1
    ``BatchUpdate.added`` entry is ``(index, SamplingParams, prompt ids, output ids)`` and
    ``SamplingParams`` holds none), so the line names the batch position, the constraint kind
    and, when the client sent one, ``guided_request_id``. Reads nothing but those keys, and
    those only when well-formed: the label of a malformed request is built the same way."""
    label = where
    rid = request_id_of(extra_args)
    if rid is not None:
        label = f"{rid} ({where})"
    if isinstance(extra_args, dict):
        kinds = [k for k in EXTRA_ARGS_KINDS if dict.get(extra_args, k) is not None]
        if kinds:
            label += f", {kinds[0]}"
    return label


def error_text(error: BaseException, limit: int = 300) -> str:
    """``Type: message`` of an exception for a log line or a client message, cut to ``limit``
    characters (a message that cannot be made into text is left out)."""
    try:
        message = str(error)
    except Exception:
        message = ""
    if len(message) > limit:
        message = message[:limit] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def adopt_vllm_logging() -> None:
    """Print tokensieve's log lines the way vLLM prints its own (called when a processor is
    built inside an engine): the ``tokensieve`` logger gets the ``vllm`` logger's handlers and
    level and stops propagating, unless the user gave it handlers already."""
    ours = logging.getLogger("tokensieve")
    theirs = logging.getLogger("vllm")
    if ours.handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    if ours.level == logging.NOTSET:
        ours.setLevel(theirs.level)
    ours.propagate = False


def unsupported_sampling(params: Any, constraint: Constraint) -> str | None:
    """Why these sampling parameters cannot be combined with a constraint, or None.

    ``min_tokens``: vLLM blocks EOS until that many tokens exist, but once an output completes
    the grammar only EOS continues it, so every token would be masked and the sampler would
    pick an arbitrary one (output outside the grammar, reported as a normal stop).
    """
    min_tokens = getattr(params, "min_tokens", 0) or 0
    if isinstance(min_tokens, int) and min_tokens > 0:
        return (
            f"min_tokens={min_tokens} cannot be combined with {constraint.name}: once the "
            "output completes the constraint only EOS may follow, which min_tokens forbids; "
            "drop min_tokens (the constraint decides where the output ends)"
        )
    return None


class GuidedProcessorBase:
    """Vocabulary binding, ``validate_params`` and guide creation for both runner interfaces."""

    # Set on the subclasses that with_vocabulary() creates.
    bound_vocabulary: ClassVar[ts.Vocabulary | None] = None
    cache: ClassVar[GrammarCache] = GRAMMAR_CACHE
    # Compile a request's constraint on a thread of its own when it joins the batch (a cache
    # miss), so the compile overlaps the forward pass; ``apply`` waits only for what is not
    # ready. The thread is the core's: it needs no GIL, which the engine's step may hold.
    compile_in_background: ClassVar[bool] = True
    # Reasoning models: constrained outputs start with free text up to this marker (None: the
    # constraint applies from the first token), forced after ``thinking_budget`` tokens. A
    # request's guided_reasoning_end / guided_thinking_budget override them.
    reasoning_end: ClassVar[str | None] = None
    thinking_budget: ClassVar[int | None] = None

    # The compile budgets a request may lower but not raise (guided_max_states, ...).
    client_limits: ClassVar[Mapping[str, float]] = CLIENT_LIMITS
    # The class attributes that configure a processor (what the with_* methods set); a twin
    # built for the other model runner carries all of them.
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "bound_vocabulary",
        "cache",
        "compile_in_background",
        "reasoning_end",
        "thinking_budget",
        "client_limits",
    )

    vocab: ts.Vocabulary

    @classmethod
    def with_client_limits(cls, **limits: float) -> Any:
        """A subclass of this processor whose requests may set compile budgets up to ``limits``
        (names of :data:`tokensieve.constraints.ENGINE_OPTIONS`; the others keep their
        current limit). Pass the class object to vLLM, like :meth:`with_vocabulary`'s."""
        merged = dict(cls.client_limits)
        for name, value in limits.items():
            if name not in merged:
                raise ValueError(
                    f"unknown compile budget {name!r}; budgets are {', '.join(merged)}"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"the limit for {name} must be a positive number, got {value!r}")
            merged[name] = float(value)
        return cls._configured(client_limits=MappingProxyType(merged))

    @classmethod
    def with_reasoning(cls, end: str | None, thinking_budget: int | None = None) -> Any:
        """A subclass of this processor whose constrained requests start with free reasoning
        text up to ``end`` (e.g. ``"</think>"``), the marker forced after ``thinking_budget``
        reasoning tokens when given. Pass the class object to vLLM, like
        :meth:`with_vocabulary`'s."""
        if end is not None and (not isinstance(end, str) or not end):
            raise ValueError("the reasoning end marker must be a non-empty string or None")
        reasoning_settings(None, end, thinking_budget)  # the same checks as a request's
        return cls._configured(reasoning_end=end, thinking_budget=thinking_budget)

    @classmethod
    def with_vocabulary(cls, vocab: ts.Vocabulary) -> Any:
        """A subclass of this processor bound to ``vocab`` (for tests and in-process engines).

        vLLM builds processors from the class alone; the bound subclass carries the vocabulary.
        It is created at run time, so pass it as a class object, not by qualified name.
        """
        if not isinstance(vocab, ts.Vocabulary):
            raise TypeError(f"expected tokensieve.Vocabulary, got {type(vocab).__name__}")
        return cls._configured(bound_vocabulary=vocab)

    @classmethod
    def _configured(cls, **settings: Any) -> Any:
        """A subclass of this processor, under the same name, with these :attr:`SETTINGS`
        changed (what every ``with_*`` method returns)."""
        unknown = set(settings) - set(cls.SETTINGS)
        assert not unknown, f"not processor settings: {unknown}"
        attrs = {**settings, "__module__": cls.__module__, "__doc__": cls.__doc__}
        return type(cls.__name__, (cls,), attrs)

    @classmethod
    def admission_vocabulary(cls) -> ts.Vocabulary:
        """The vocabulary ``validate_params`` compiles against (see the module docs)."""
        if cls.bound_vocabulary is not None:
            return cls.bound_vocabulary
        default = default_vocabulary()
        if default is not None:
            return default
        with _LOCK:
            engines = list(_ENGINE_VOCABS.values())
        if len(engines) == 1:
            return engines[0]
        return validation_vocabulary()

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Reject a malformed or unsupported constraint with a ``ValueError`` the client sees.

        Every ``guided_*`` value is checked here (:func:`~tokensieve.vllm.constraints.
        read_extra_args`); whatever else a request makes fail is a ``ValueError`` too (logged
        with its traceback when it is not one already), so a client error is never a server
        error."""
        try:
            cls._admit(sampling_params)
        except ValueError:
            raise
        except Exception as e:  # RecursionError, MemoryError, TypeError, ...: still the request's
            logger.warning(
                "tokensieve: a request was refused at admission by an unexpected %s",
                type(e).__name__,
                exc_info=True,
            )
            raise ValueError(f"invalid guided_* request: {error_text(e)}") from None

    @classmethod
    def _admit(cls, sampling_params: Any) -> None:
        args = read_extra_args(getattr(sampling_params, "extra_args", None))
        constraint = args.constraint
        if constraint is None:
            return
        problem = unsupported_sampling(sampling_params, constraint) or over_client_limits(
            constraint, cls.client_limits
        )
        if problem is not None:
            raise ValueError(problem)
        end, budget = reasoning_of(args, sampling_params, cls.reasoning_end, cls.thinking_budget)
        vocab = cls.admission_vocabulary()
        grammar = cls.cache.get(constraint, vocab)
        # The first mask (memoized in the grammar): a start the vocabulary cannot spell, or an
        # automaton over budget right away, fails here rather than in the engine; so does a
        # reasoning marker the vocabulary cannot spell before the constraint's start.
        try:
            grammar.matcher(reasoning_end=end, thinking_budget=budget).fill_next_token_bitmask(
                ts.allocate_token_bitmask(1, vocab.vocab_size)
            )
        except ts.TokensieveError as e:
            raise ValueError(describe_error(constraint, e)) from e

    def _resolve_vocabulary(self, vllm_config: Any) -> ts.Vocabulary:
        adopt_vllm_logging()
        if self.bound_vocabulary is not None:
            return self.bound_vocabulary
        default = default_vocabulary()
        if default is not None:
            return default
        return vocabulary_from_vllm_config(vllm_config)

    def _new_guide(
        self, params: Any, tokens: Sequence[int] | None = None, where: str = "?"
    ) -> RequestGuide | None:
        """The guide for a request entering the batch, or None when it is unconstrained.

        Never raises: a request whose constraint cannot be compiled (it skipped validation, or
        only this vocabulary cannot spell it) gets a failed guide, which allows only EOS; so
        does a request that makes anything else fail here (logged with its traceback).
        """
        extra_args = getattr(params, "extra_args", None)
        try:
            label = _request_label(where, extra_args)
        except Exception:
            label = where
        try:
            return self._guide_for(params, extra_args, tokens, label)
        except Exception as e:  # one request never takes the batch down
            logger.warning(
                "tokensieve: request %s could not be set up (%s)",
                label,
                error_text(e),
                exc_info=True,
            )
            return RequestGuide(None, error=error_text(e), label=label, tokens=tokens)

    def _guide_for(
        self, params: Any, extra_args: Any, tokens: Sequence[int] | None, label: str
    ) -> RequestGuide | None:
        try:
            args = read_extra_args(extra_args)
        except ValueError as e:
            return RequestGuide(None, error=str(e), label=label, tokens=tokens)
        constraint: Constraint | None = args.constraint
        if constraint is None:
            return None
        problem = unsupported_sampling(params, constraint) or over_client_limits(
            constraint, self.client_limits
        )
        if problem is not None:  # admission rejects it; an engine without admission gets here
            return RequestGuide(None, error=problem, label=label, tokens=tokens)
        try:
            end, budget = reasoning_of(args, params, self.reasoning_end, self.thinking_budget)
        except ValueError as e:
            return RequestGuide(None, error=str(e), label=label, tokens=tokens)
        guide = RequestGuide(
            None,
            pending=self.cache.get_pending(constraint, self.vocab),
            label=label,
            tokens=tokens,
            max_tokens=fit_budget(args, params),
            reasoning_end=end,
            thinking_budget=budget,
        )
        if not self.compile_in_background:
            guide.ready()  # compile inside the step
        return guide
