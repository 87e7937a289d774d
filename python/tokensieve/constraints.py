"""Constraints: the one model from every way in (Python API, CLI, vLLM, transformers) to a grammar.

A :class:`Constraint` is a kind, a value and options:

====================  ==========================================================
kind                  value
====================  ==========================================================
``regex``             a pattern (full match)
``json_schema``       a dict or bool, its JSON text, or a pydantic model class
``choice``            a non-empty list of strings
``json_object``       ignored: any JSON object
====================  ==========================================================

Engine options (all kinds): ``max_states``, ``max_nfa_bytes``, ``mask_cache_bytes``,
``max_compile_seconds``. JSON Schema options are listed in :data:`SCHEMA_OPTIONS`.

:meth:`Constraint.compile` is the only place a kind is dispatched to a ``Grammar``
constructor. :attr:`Constraint.key` is the core's source hash (the hash a compiled grammar and
an index file carry) plus the engine options; :class:`GrammarCache` memoizes compiled grammars
(and compile errors) by that key and the vocabulary fingerprint, least recently used first out,
and loads precompiled index files when :func:`set_index_directory` names a folder of them.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tokensieve import _core
from tokensieve._core import Grammar, TokensieveError, Vocabulary, constraint_hash
from tokensieve.index_files import IndexDirectory

__all__ = [
    "KINDS",
    "ENGINE_OPTIONS",
    "SCHEMA_OPTIONS",
    "Constraint",
    "GrammarCache",
    "compile_constraint",
    "describe_error",
    "set_index_directory",
]

KINDS = ("regex", "json_schema", "choice", "json_object")
# Option names come from the core (``CompileOptions::set`` reads them); the engine budgets apply
# to every kind, the JSON Schema options to json_schema and json_object.
ENGINE_OPTIONS: tuple[str, ...] = tuple(_core.GRAMMAR_OPTIONS)
SCHEMA_OPTIONS: tuple[str, ...] = tuple(_core.SCHEMA_OPTIONS)


@dataclass(frozen=True)
class Constraint:
    """A normalized constraint: ``kind``, ``value`` and sorted keyword ``options``.

    ``value`` is a ``str`` pattern (regex), a JSON Schema (``dict`` or ``bool``, or its JSON
    text, kept as text so that its numbers reach the compiler exactly), a tuple of strings
    (choice) or ``None`` (json_object). ``label`` names the constraint in messages (a request
    key such as ``guided_json``; the kind by default) and is not part of its identity. Two
    constraints with the same language and options have the same :attr:`key` (a schema as text
    and as a dict included).
    """

    kind: str
    value: Any
    options: tuple[tuple[str, Any], ...] = ()
    label: str = field(default="", compare=False)

    @classmethod
    def make(
        cls,
        kind: str,
        value: Any = None,
        options: Mapping[str, Any] | None = None,
        *,
        label: str = "",
    ) -> Constraint:
        """Validate and normalize; raises ``ValueError`` with a message naming ``label``."""
        if kind not in KINDS:
            raise ValueError(
                f"unknown constraint kind {kind!r}; expected one of {', '.join(KINDS)}"
            )
        name = label or kind
        opts = dict(options or {})
        unknown = sorted(k for k in opts if k not in ENGINE_OPTIONS and k not in SCHEMA_OPTIONS)
        if unknown:
            raise ValueError(
                f"unsupported option(s) {', '.join(unknown)} for {name}; options are "
                f"{', '.join(ENGINE_OPTIONS + SCHEMA_OPTIONS)}"
            )
        if kind == "regex":
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {type(value).__name__}")
            schema_only = sorted(k for k in opts if k in SCHEMA_OPTIONS)
            if schema_only:
                raise ValueError(
                    f"option(s) {', '.join(schema_only)} apply to JSON constraints only"
                )
        elif kind == "json_schema":
            value = _schema_value(value, name)
        elif kind == "choice":
            value = _choice_value(value, name)
        else:
            value = None
        return cls(kind, value, tuple(sorted(opts.items())), label)

    @property
    def name(self) -> str:
        """How messages name this constraint."""
        return self.label or self.kind

    @property
    def key(self) -> str:
        """The core's source hash of kind, value and language options (property order kept),
        followed by the engine options, which decide whether a compile fits its budgets."""
        value = list(self.value) if self.kind == "choice" else self.value
        engine = {k: v for k, v in self.options if k in ENGINE_OPTIONS}
        schema = {k: v for k, v in self.options if k in SCHEMA_OPTIONS}
        h = constraint_hash(self.kind, value, **schema)
        return f"{h}:{json.dumps(engine, sort_keys=True, default=repr)}"

    def compile(self, vocab: Vocabulary) -> Grammar:
        """The grammar for ``vocab``; ``ValueError`` or a ``TokensieveError`` when it fails."""
        return self.compile_pending(vocab).result()

    def compile_pending(self, vocab: Vocabulary) -> _core.PendingGrammar:
        """Start compiling on a thread of its own (no GIL needed, so it overlaps whatever
        the caller does next); ``.result()`` waits. Input errors are raised here."""
        value = list(self.value) if self.kind == "choice" else self.value
        return Grammar.compile_pending(self.kind, value, vocab, **dict(self.options))


def _schema_value(value: Any, name: str) -> Any:
    if hasattr(value, "model_json_schema"):  # a pydantic model class
        value = value.model_json_schema()
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        # Checked here, but the text itself goes to the compiler: Python would read its numbers
        # as floats (0.1000000000000000000001 as 0.1, 1e400 as inf), the compiler reads them
        # exactly.
        try:
            parsed = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{name} is not valid JSON: {e}") from e
        _check_schema_type(parsed, name)
        return value
    _check_schema_type(value, name)
    return value


def _check_schema_type(value: Any, name: str) -> None:
    if not isinstance(value, (dict, bool)):
        raise ValueError(
            f"{name} must be a JSON Schema (an object or a boolean), got {type(value).__name__}"
        )


def _choice_value(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name} must be a list of strings (or its JSON text): {e}") from e
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name} must be a non-empty list of strings")
    for c in value:
        if not isinstance(c, str):
            raise ValueError(f"{name} must hold strings only, got {c!r}")
    return tuple(value)


def compile_constraint(kind: str, value: Any, vocab: Vocabulary, **options: Any) -> Grammar:
    """Compile a constraint of ``kind`` for ``vocab``. Unknown kinds or options raise
    ValueError; the compiler's own rejections raise a ``TokensieveError``."""
    return Constraint.make(kind, value, options).compile(vocab)


def describe_error(constraint: Constraint, error: BaseException) -> str:
    """A client-readable message for a constraint that failed to compile."""
    name = constraint.name
    if isinstance(error, TokensieveError):
        return f"invalid {name}: {type(error).__name__}: {error}"
    message = str(error)
    return message if name in message else f"invalid {name}: {message}"


class GrammarCache:
    """A bounded LRU cache of compiled grammars, keyed by :attr:`Constraint.key` and vocabulary
    fingerprint.

    Compile errors are cached too, as their client-readable message (:func:`describe_error`),
    so a bad constraint sent again is rejected without recompiling; :meth:`get` raises every
    compile error as a ``ValueError`` with that message. Thread-safe; two threads asking for the
    same missing key may both compile it (the second result wins), which is harmless.
    """

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize <= 0:
            raise ValueError(f"maxsize must be positive, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str], Grammar | str] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def lookup(self, constraint: Constraint, vocab: Vocabulary) -> Grammar | str | None:
        """The cached grammar, the cached error message, or ``None`` when this constraint has
        not been compiled for ``vocab`` yet (nothing is compiled here)."""
        try:
            key = (constraint.key, vocab.fingerprint)
        except (ValueError, TokensieveError) as e:
            return describe_error(constraint, e)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        return entry

    def get_pending(self, constraint: Constraint, vocab: Vocabulary) -> PendingCompile:
        """The grammar, compiling on a thread of its own on a cache miss: ``.result()`` gives
        it (and caches it) or raises a ``ValueError`` with the client-readable message (also
        cached)."""
        return PendingCompile(self, constraint, vocab)

    def _store(self, key: tuple[str, str], entry: Grammar | str) -> None:
        with self._lock:
            self.misses += 1
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def get(self, constraint: Constraint, vocab: Vocabulary) -> Grammar:
        """The compiled grammar; ``ValueError`` (cached or new) when it does not compile."""
        return self.get_pending(constraint, vocab).result()


_INDEX_DIRS: dict[tuple[str, str], IndexDirectory] = {}
_INDEX_DIRS_LOCK = threading.Lock()
_INDEX_DIR: str | None = os.environ.get("TOKENSIEVE_INDEX_DIR") or None


def set_index_directory(path: str | os.PathLike[str] | None) -> None:
    """Use precompiled index files (``tokensieve compile ... -o DIR``) from `path` when a
    constraint, its options and the vocabulary match one; None turns it off. The
    ``TOKENSIEVE_INDEX_DIR`` environment variable sets it at import."""
    global _INDEX_DIR
    _INDEX_DIR = None if path is None else str(path)
    with _INDEX_DIRS_LOCK:
        _INDEX_DIRS.clear()


class PendingCompile:
    """A grammar on its way (:meth:`GrammarCache.get_pending`): a cache hit or a precompiled
    file at once, otherwise a compile on its own thread. ``done()`` and ``result()`` as a
    ``concurrent.futures.Future``'s."""

    def __init__(self, cache: GrammarCache, constraint: Constraint, vocab: Vocabulary) -> None:
        self._cache = cache
        self._constraint = constraint
        self._entry: Grammar | str | None = cache.lookup(constraint, vocab)
        self._pending: _core.PendingGrammar | None = None
        self._key: tuple[str, str] | None = None
        if self._entry is not None:
            return
        self._key = (constraint.key, vocab.fingerprint)
        try:
            self._entry = _precompiled(constraint, vocab)
            if self._entry is None:
                self._pending = constraint.compile_pending(vocab)
        except (ValueError, TokensieveError) as e:
            self._entry = describe_error(constraint, e)
        if self._entry is not None:
            cache._store(self._key, self._entry)

    def done(self) -> bool:
        return self._pending is None or self._pending.done()

    def result(self) -> Grammar:
        """The grammar; ``ValueError`` with the client-readable message when it failed."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                self._entry = pending.result()
            except (ValueError, TokensieveError) as e:
                self._entry = describe_error(self._constraint, e)
            assert self._key is not None
            self._cache._store(self._key, self._entry)
        if isinstance(self._entry, str):
            raise ValueError(self._entry)
        assert self._entry is not None
        return self._entry


def _precompiled(constraint: Constraint, vocab: Vocabulary) -> Grammar | None:
    if _INDEX_DIR is None:
        return None
    key = (_INDEX_DIR, vocab.fingerprint)
    with _INDEX_DIRS_LOCK:
        d = _INDEX_DIRS.get(key)
        if d is None:
            d = _INDEX_DIRS[key] = IndexDirectory(_INDEX_DIR, vocab)
    value = list(constraint.value) if constraint.kind == "choice" else constraint.value
    try:
        return d.find(constraint.kind, value, **dict(constraint.options))
    except (ValueError, TokensieveError, OSError):
        return None  # compile it instead; the compile reports any real problem
