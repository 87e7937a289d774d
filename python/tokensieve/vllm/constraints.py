"""Constraints as requests state them, compiled through one function and one bounded cache.

A constraint is a kind (``regex``, ``json``, ``choice``, ``json_object``), a value and options.
:func:`compile_constraint` is the only place that turns one into a :class:`~tokensieve.Grammar`,
so a kind whose compiler is not in this build (``Grammar.from_json_schema`` …) is detected there,
once, and lights up as soon as the compiler exists. :func:`constraint_from_extra_args` reads a
vLLM request's ``SamplingParams.extra_args`` (``vllm_xargs`` on the OpenAI server)::

    {"guided_regex": "[0-9]{3}"}
    {"guided_json": '{"type": "object", ...}', "guided_whitespace": "compact"}
    {"guided_choice": ["yes", "no"]}
    {"guided_json_object": true}

Options are the Python API's keyword arguments with a ``guided_`` prefix. Over HTTP they arrive
as strings or numbers, so strings spelling JSON literals (``"true"``, ``"12"``, ``"null"``,
``"[...]"``) are decoded; any other string stays a string.

:class:`GrammarCache` memoizes compiled grammars (and compile errors) by constraint, options and
vocabulary fingerprint, least recently used first out.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tokensieve as ts
from tokensieve.constraints import compile_constraint as _compile
from tokensieve.index_files import IndexDirectory

__all__ = [
    "EXTRA_ARGS_KINDS",
    "Constraint",
    "GrammarCache",
    "set_index_directory",
    "GRAMMAR_CACHE",
    "choice_pattern",
    "compile_constraint",
    "constraint_from_extra_args",
    "describe_error",
    "escape_regex_literal",
    "validation_vocabulary",
]

# extra_args key -> constraint kind
EXTRA_ARGS_KINDS: dict[str, str] = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_json_object": "json_object",
}
_KIND_KEYS = {kind: key for key, kind in EXTRA_ARGS_KINDS.items()}
# The Grammar constructor each kind needs; None: always available.
_CONSTRUCTORS: dict[str, str | None] = {
    "regex": "from_regex",
    "json": "from_json_schema",
    "choice": None,  # from_choice when present, else an alternation of escaped literals
    "json_object": "from_json_object",
}
_PREFIX = "guided_"
# Characters regex-syntax treats as meta characters (`regex_syntax::is_meta_character`).
_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")


@dataclass(frozen=True)
class Constraint:
    """A normalized constraint: ``kind``, ``value`` and sorted keyword ``options``.

    ``value`` is a ``str`` pattern (regex), a JSON Schema (``dict`` or ``bool``; json), a tuple of
    strings (choice) or ``None`` (json_object). ``key`` is a canonical JSON text of all three,
    used for caching.
    """

    kind: str
    value: Any
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        # Never sort keys: a schema's property order is part of the language it compiles to.
        return json.dumps(
            [self.kind, self.value, [list(kv) for kv in self.options]],
            separators=(",", ":"),
            default=repr,
        )

    @property
    def request_key(self) -> str:
        """The extra_args key that states this kind (``guided_json`` …), for messages."""
        return _KIND_KEYS.get(self.kind, self.kind)

    @classmethod
    def make(cls, kind: str, value: Any, options: Mapping[str, Any] | None = None) -> Constraint:
        """Validate and normalize; raises ``ValueError`` with a client-readable message."""
        if kind not in _CONSTRUCTORS:
            raise ValueError(
                f"unknown constraint kind {kind!r}; expected one of {sorted(_CONSTRUCTORS)}"
            )
        key = _KIND_KEYS[kind]
        if kind == "regex":
            if not isinstance(value, str):
                raise ValueError(f"{key} must be a string, got {type(value).__name__}")
        elif kind == "json":
            value = _schema_value(value, key)
        elif kind == "choice":
            value = _choice_value(value, key)
        else:
            value = None
        opts = tuple(sorted((str(k), v) for k, v in (options or {}).items()))
        return cls(kind, value, opts)


def _schema_value(value: Any, key: str) -> Any:
    if hasattr(value, "model_json_schema"):  # a pydantic model class
        value = value.model_json_schema()
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{key} is not valid JSON: {e}") from e
    if not isinstance(value, (dict, bool)):
        raise ValueError(
            f"{key} must be a JSON Schema (an object or a boolean), got {type(value).__name__}"
        )
    return value


def _choice_value(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{key} must be a list of strings (or its JSON text): {e}") from e
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{key} must be a non-empty list of strings")
    for c in value:
        if not isinstance(c, str):
            raise ValueError(f"{key} must hold strings only, got {c!r}")
    return tuple(value)


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
        if not isinstance(name, str) or not name.startswith(_PREFIX):
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
    return Constraint.make(EXTRA_ARGS_KINDS[name], value, options)


def escape_regex_literal(text: str) -> str:
    """``text`` as a regex (Rust ``regex`` syntax) matching exactly itself."""
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


def compile_constraint(
    kind: str, value: Any, vocab: ts.Vocabulary, options: Mapping[str, Any] | None = None
) -> ts.Grammar:
    """Compile one constraint for ``vocab``: the single route from a kind to a Grammar.

    ``kind`` is ``"regex"``, ``"json"``, ``"choice"`` or ``"json_object"`` (``value`` as in
    :meth:`Constraint.make`); ``options`` are the Grammar constructor's keyword arguments.

    Raises:
        ValueError: the kind needs a compiler this build lacks (e.g. ``guided_json`` before
            ``Grammar.from_json_schema`` exists), the value is malformed, or an option is unknown.
        tokensieve.TokensieveError: the compiler rejected the constraint (``RegexError``,
            ``BudgetError``, ``UnspellableError`` …).
    """
    c = Constraint.make(kind, value, options)
    opts = dict(c.options)
    key = c.request_key
    method = _CONSTRUCTORS[c.kind]
    if method is not None and not hasattr(ts.Grammar, method):
        raise ValueError(
            f"{key} is not supported by this tokensieve build (tokensieve.Grammar.{method} "
            f"is not available yet); use guided_regex"
        )
    top_kind = "json_schema" if c.kind == "json" else c.kind
    value = list(c.value) if c.kind == "choice" else c.value
    try:
        return _compile(top_kind, value, vocab, **opts)
    except ValueError as e:
        if "option" not in str(e):
            raise
        names = ", ".join(_PREFIX + k for k in sorted(opts)) or "none"
        raise ValueError(f"unsupported option for {key} (options given: {names}): {e}") from e


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


class GrammarCache:
    """A bounded LRU cache of compiled grammars, keyed by constraint and vocabulary fingerprint.

    Compile errors are cached too, as their client-readable message, so a bad constraint sent
    again is rejected without recompiling; :meth:`get` raises every compile error as a
    ``ValueError`` with that message. Thread-safe; two threads asking for the same missing key
    may both compile it (the second result wins), which is harmless.
    """

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize <= 0:
            raise ValueError(f"maxsize must be positive, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str], ts.Grammar | str] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def get(self, constraint: Constraint, vocab: ts.Vocabulary) -> ts.Grammar:
        """The compiled grammar; ``ValueError`` (cached or new) when it does not compile."""
        key = (constraint.key, vocab.fingerprint)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        if entry is None:
            try:
                entry = _precompiled(constraint, vocab) or compile_constraint(
                    constraint.kind, constraint.value, vocab, dict(constraint.options)
                )
            except (ValueError, ts.TokensieveError) as e:
                entry = describe_error(constraint, e)
            with self._lock:
                self.misses += 1
                self._entries[key] = entry
                self._entries.move_to_end(key)
                while len(self._entries) > self.maxsize:
                    self._entries.popitem(last=False)
        if isinstance(entry, str):
            raise ValueError(entry)
        return entry


_INDEX_DIRS: dict[tuple[str, str], IndexDirectory] = {}
_INDEX_DIRS_LOCK = threading.Lock()


def set_index_directory(path: str | os.PathLike[str] | None) -> None:
    """Use precompiled index files (``tokensieve compile ... -o DIR``) from `path` when a
    request's constraint, options and vocabulary match one; None turns it off. The
    ``TOKENSIEVE_INDEX_DIR`` environment variable sets it at import."""
    global _INDEX_DIR
    _INDEX_DIR = None if path is None else str(path)
    with _INDEX_DIRS_LOCK:
        _INDEX_DIRS.clear()


_INDEX_DIR: str | None = os.environ.get("TOKENSIEVE_INDEX_DIR") or None


def _precompiled(constraint: Constraint, vocab: ts.Vocabulary) -> ts.Grammar | None:
    if _INDEX_DIR is None:
        return None
    key = (_INDEX_DIR, vocab.fingerprint)
    with _INDEX_DIRS_LOCK:
        d = _INDEX_DIRS.get(key)
        if d is None:
            d = _INDEX_DIRS[key] = IndexDirectory(_INDEX_DIR, vocab)
    kind = "json_schema" if constraint.kind == "json" else constraint.kind
    value = list(constraint.value) if constraint.kind == "choice" else constraint.value
    try:
        return d.find(kind, value, **dict(constraint.options))
    except (ValueError, ts.TokensieveError, OSError):
        return None  # compile it instead; the compile reports any real problem


# Shared by every processor in the process: the front end's validate_params and the engine's
# processors hit the same entries when they run in one process.
GRAMMAR_CACHE = GrammarCache()


def describe_error(constraint: Constraint, error: BaseException) -> str:
    """A client-readable message for a constraint that failed to compile."""
    key = constraint.request_key
    if isinstance(error, ts.TokensieveError):
        return f"invalid {key}: {type(error).__name__}: {error}"
    message = str(error)
    return message if key in message else f"invalid {key}: {message}"


def choice_pattern(choices: Sequence[str]) -> str:
    """The regex the choice fallback compiles: an alternation of escaped literals."""
    return "|".join(escape_regex_literal(s) for s in choices)
