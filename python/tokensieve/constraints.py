"""Constraints: the one model from every way in (Python API, CLI, vLLM, transformers) to a grammar.

A :class:`Constraint` is a kind, a value and options:

====================  ==========================================================
kind                  value
====================  ==========================================================
``regex``             a pattern (full match)
``json_schema``       a dict or bool, its JSON text, or a pydantic model class
``choice``            a non-empty list of strings
``json_object``       ignored: any JSON object
``ebnf``              a grammar's text: GBNF (llama.cpp) or xgrammar's EBNF (``name ::= ...``);
                      a Lark grammar given as ``ebnf`` is read as ``lark`` (below)
``lark``              a Lark grammar's text (the dialect llguidance documents)
====================  ==========================================================

Engine options (all kinds): ``max_states``, ``max_nfa_bytes``, ``mask_cache_bytes``,
``max_compile_seconds``. JSON Schema options are listed in :data:`SCHEMA_OPTIONS`; a grammar
takes :data:`EBNF_OPTIONS` (``start``, the rule it starts from — ``root`` for GBNF/EBNF,
``start`` for Lark — and ``max_stack_depth``). A grammar given as ``ebnf`` that has no
``name ::= ...`` rule (vLLM's own test, :func:`looks_like_lark`, the one its built-in backends
use to pick a dialect) is a Lark grammar: its kind becomes ``lark``.

:meth:`Constraint.compile` is the only place a kind is dispatched to a ``Grammar``
constructor. :attr:`Constraint.key` is the core's source hash (the hash a compiled grammar and
an index file carry) plus the engine options; :class:`GrammarCache` memoizes compiled grammars
(and compile errors) by that key and the vocabulary fingerprint, least recently used first out,
and loads precompiled index files when :func:`set_index_directory` names a folder of them.

Every value a caller hands in is read by :mod:`tokensieve._bounded_json` (bounded, without
recursion, without calling the value's own methods): a malformed or hostile value (the wrong
type, JSON text or an object nested past 128 levels, a cycle, an object whose ``__repr__``,
``__eq__`` or ``__hash__`` raises) is a ``ValueError`` naming the constraint, and a schema nested
past 128 levels a ``SchemaError``, as ``Grammar.from_json_schema`` gives it (``docs/limits.md``).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tokensieve import _core
from tokensieve._bounded_json import (
    MAX_JSON_NESTING,
    MAX_TEXT_BYTES,
    NestingError,
    PlainJson,
    checked_json_text,
    decode_json_text,
    exact_str,
    has_type,
    plain_json,
    shown,
)
from tokensieve._core import Grammar, SchemaError, TokensieveError, Vocabulary, constraint_hash
from tokensieve.index_files import IndexDirectory

__all__ = [
    "KINDS",
    "EBNF_OPTIONS",
    "ENGINE_OPTIONS",
    "SCHEMA_OPTIONS",
    "Constraint",
    "GrammarCache",
    "compile_constraint",
    "describe_error",
    "looks_like_lark",
    "set_index_directory",
]

KINDS = ("regex", "json_schema", "choice", "json_object", "ebnf", "lark", "structural_tag")
# the kinds whose value is a grammar's text (they take EBNF_OPTIONS)
GRAMMAR_KINDS = ("ebnf", "lark")
# Option names come from the core (``CompileOptions::set`` reads them); the engine budgets apply
# to every kind, the JSON Schema options to json_schema and json_object, the grammar options
# to ebnf.
ENGINE_OPTIONS: tuple[str, ...] = tuple(_core.GRAMMAR_OPTIONS)
SCHEMA_OPTIONS: tuple[str, ...] = tuple(_core.SCHEMA_OPTIONS)
EBNF_OPTIONS: tuple[str, ...] = tuple(_core.EBNF_OPTIONS)
# Every option name a constraint of some kind takes.
ALL_OPTIONS: tuple[str, ...] = ENGINE_OPTIONS + tuple(
    dict.fromkeys(o for o in SCHEMA_OPTIONS + EBNF_OPTIONS if o not in ENGINE_OPTIONS)
)


@dataclass(frozen=True)
class Constraint:
    """A normalized constraint: ``kind``, ``value`` and sorted keyword ``options``.

    ``value`` is a ``str`` pattern (regex), a JSON Schema (``dict`` or ``bool``, or its JSON
    text, kept as text so that its numbers reach the compiler exactly), a tuple of strings
    (choice), ``None`` (json_object) or a grammar's ``str`` text (ebnf). ``label`` names the constraint in messages (a request
    key such as ``guided_json``; the kind by default) and is not part of its identity. Two
    constraints with the same language and options have the same :attr:`key` (a schema as text
    and as a dict included). ``text``, not part of the identity either, is a schema's or
    structural tag's JSON text when ``value`` is its plain copy (written once by :meth:`make`
    for the source hash and the compile, see :meth:`source`), else ``None``.
    """

    kind: str
    value: Any
    options: tuple[tuple[str, Any], ...] = ()
    label: str = field(default="", compare=False)
    # A schema's or tag's JSON text when ``value`` is its plain copy: written once here, read by
    # the source hash and the compile (which would each write it again).
    text: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def make(
        cls,
        kind: str,
        value: Any = None,
        options: Mapping[str, Any] | None = None,
        *,
        label: str = "",
    ) -> Constraint:
        """Validate and normalize; raises ``ValueError`` with a message naming ``label`` (a
        ``SchemaError`` for a schema nested past 128 levels).

        The value and the options are copied in plain types (``str``, ``dict``, ``list``, ...;
        a schema or registry given as JSON text stays that text), so nothing later calls a
        method of the caller's objects."""
        if not has_type(kind, str) or exact_str(kind) not in KINDS:
            raise ValueError(
                f"unknown constraint kind {shown(kind)}; expected one of {', '.join(KINDS)}"
            )
        kind = exact_str(kind)
        name = label or kind
        opts = _options(options, name)
        unknown = sorted(k for k in opts if k not in ALL_OPTIONS)
        if unknown:
            raise ValueError(
                f"unsupported option(s) {', '.join(unknown)} for {name}; options are "
                f"{', '.join(ALL_OPTIONS)}"
            )
        ebnf_only = sorted(k for k in opts if k in EBNF_OPTIONS and k not in SCHEMA_OPTIONS)
        if ebnf_only and kind not in GRAMMAR_KINDS:
            raise ValueError(
                f"option(s) {', '.join(ebnf_only)} apply to grammars (ebnf, lark) only"
            )
        if kind in ("regex", *GRAMMAR_KINDS):
            own = EBNF_OPTIONS if kind in GRAMMAR_KINDS else ()
            json_only = sorted(k for k in opts if k in SCHEMA_OPTIONS and k not in own)
            if json_only:
                raise ValueError(f"option(s) {', '.join(json_only)} apply to JSON constraints only")
        if kind == "regex":
            if not has_type(value, str):
                raise ValueError(f"{name} must be a string, got {type(value).__name__}")
            value = exact_str(value)
        elif kind in GRAMMAR_KINDS:
            value = _grammar_value(value, name)
            if kind == "ebnf" and looks_like_lark(value):
                kind = "lark"
        elif kind == "json_schema":
            value = _schema_value(value, name)
        elif kind == "structural_tag":
            value = _tag_value(value, name)
        elif kind == "choice":
            value = _choice_value(value, name)
        else:
            value = None
        text = None
        if kind in ("json_schema", "structural_tag") and type(value) is not str:
            text = json.dumps(value, allow_nan=False)  # a plain copy: always JSON
        return cls(kind, value, tuple(sorted(opts.items())), label, text)

    def source(self) -> Any:
        """The value as the core takes it: JSON text for a schema or tag (written once), a list
        for a choice, else ``value``."""
        if self.text is not None:
            return self.text
        return list(self.value) if self.kind == "choice" else self.value

    @property
    def language_options(self) -> dict[str, Any]:
        """The options that shape the language (what :attr:`key`'s source hash covers): the
        JSON Schema options of a JSON constraint, the grammar options of an ``ebnf`` one."""
        names = EBNF_OPTIONS if self.kind in GRAMMAR_KINDS else SCHEMA_OPTIONS
        return {k: v for k, v in self.options if k in names}

    @property
    def name(self) -> str:
        """How messages name this constraint."""
        return self.label or self.kind

    @property
    def key(self) -> str:
        """The core's source hash of kind, value and language options (property order kept),
        followed by the engine options, which decide whether a compile fits its budgets.

        ``ValueError`` or a ``TokensieveError`` when the constraint is invalid (anything else,
        possible only for a ``Constraint`` built without :meth:`make`, is a ``ValueError``)."""
        try:
            engine = {k: v for k, v in self.options if k in ENGINE_OPTIONS}
            h = constraint_hash(self.kind, self.source(), **self.language_options)
            return f"{h}:{json.dumps(engine, sort_keys=True)}"
        except (ValueError, TokensieveError):
            raise
        except Exception as e:
            raise _Unexpected(f"invalid {self.name}: {error_text(e)}") from e

    def compile(self, vocab: Vocabulary) -> Grammar:
        """The grammar for ``vocab``; ``ValueError`` or a ``TokensieveError`` when it fails."""
        return self.compile_pending(vocab).result()

    def compile_pending(
        self, vocab: Vocabulary, *, inline_seconds: float | None = None
    ) -> _core.PendingGrammar:
        """Start compiling on one of the core's compile threads (no GIL needed, so it overlaps
        whatever the caller does next); ``.result()`` waits. With ``inline_seconds`` the compile
        first runs here (GIL released) for at most that much of this thread's CPU time and comes
        back done when it finished in time (``Grammar.compile_pending``). Input errors are raised
        here: a ``ValueError`` or a ``TokensieveError`` (a ``TypeError`` only for a ``vocab``
        that is not a ``Vocabulary``)."""
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"vocab must be a tokensieve.Vocabulary, got {type(vocab).__name__}")
        try:
            return Grammar.compile_pending(
                self.kind,
                self.source(),
                vocab,
                inline_seconds=inline_seconds,
                **dict(self.options),
            )
        except (ValueError, TokensieveError):
            raise
        except Exception as e:
            raise _Unexpected(f"invalid {self.name}: {error_text(e)}") from e


class _Unexpected(ValueError):
    """A constraint that failed in a way no input check foresaw (a ``RecursionError``, a
    ``MemoryError``, a ``TypeError`` from a ``Constraint`` built by hand): a ``ValueError`` for
    the caller, but not cached (it may not happen again)."""


def _message(error: BaseException) -> str:
    """``str(error)``, or ``""`` when it cannot be made into text."""
    try:
        return str(error)
    except Exception:
        return ""


def error_text(error: BaseException, limit: int | None = 300) -> str:
    """``Type: message`` of an exception for a log line or a client message, cut to ``limit``
    characters (a message that cannot be made into text is left out)."""
    message = _message(error)
    if limit is not None and len(message) > limit:
        message = message[:limit] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _schema_error(e: NestingError) -> SchemaError:
    """A schema nested too deeply: the ``SchemaError`` the core gives for it (no keyword,
    at the root)."""
    error = SchemaError(str(e))
    error.keyword = ""
    error.pointer = ""
    return error


def _options(options: Any, name: str) -> dict[str, Any]:
    """The options as a plain ``dict``: names are strings, values plain scalars (the registry
    JSON text); ``None`` values are left out (the option's default)."""
    if options is None:
        return {}
    if has_type(options, dict):
        entries = list(dict.items(options))
    else:
        try:
            if not isinstance(options, Mapping):
                raise ValueError(f"options of {name} must be a mapping, got {shown(options)}")
            entries = [(k, v) for k, v in options.items()]
        except ValueError:
            raise
        except Exception as e:
            raise ValueError(f"options of {name} cannot be read: {error_text(e)}") from None
    opts: dict[str, Any] = {}
    for k, v in entries:
        if not has_type(k, str):
            raise ValueError(f"option names must be strings, got {shown(k)}")
        k = exact_str(k)
        if v is None:
            continue
        opts[k] = _registry_value(v, name) if k == "registry" else _option_value(k, v)
    return opts


def _option_value(option: str, value: Any) -> bool | int | float | str:
    """An option's value as a plain ``bool``, ``int``, ``float`` or ``str`` (the core reads it
    and checks its range or words)."""
    if type(value) is bool:
        return bool(value)
    if has_type(value, int):
        return int.__int__(value)
    if has_type(value, float):
        return float.__float__(value)
    if has_type(value, str):
        return exact_str(value)
    raise ValueError(
        f"option {option}: expected a string, a number or a bool, got {type(value).__name__}"
    )


def _registry_value(value: Any, name: str) -> str:
    """The ``registry`` option as JSON text, which the core reads with its numbers exact: JSON
    text of an object mapping URIs to schemas, or a ``dict`` mapping URI strings to schemas
    (each a ``dict``/``bool``, its JSON text, or a pydantic model class). Each document nests at
    most 128 levels; the text is at most 64 MiB."""
    what = f"registry of {name}"
    if has_type(value, (str, bytes, bytearray)):
        try:  # one level more: the documents are inside the registry's object
            text = checked_json_text(value, what, max_nesting=MAX_JSON_NESTING + 1)
        except NestingError:
            raise _schema_error(
                NestingError(f"{what} nests more than {MAX_JSON_NESTING} levels in a document")
            ) from None
        try:
            registry = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{what} is not valid JSON: {e}") from None
        if type(registry) is not dict:
            raise ValueError(f"{what} must be a JSON object mapping URIs to schemas")
        return text
    if not has_type(value, dict):
        raise ValueError(f"{what} must be a mapping of URIs to schemas, got {shown(value)}")
    parts = []
    size = 2
    for uri, doc in list(dict.items(value)):
        if not has_type(uri, str):
            raise ValueError(f"{what}: keys must be URI strings, got {shown(uri)}")
        uri = exact_str(uri)
        doc = _schema_value(doc, f"{what}, document {shown(uri)}")
        doc_text = doc if type(doc) is str else json.dumps(doc, allow_nan=False)
        part = f"{json.dumps(uri)}: {doc_text}"
        size += len(part) + 2
        if size > MAX_TEXT_BYTES:
            raise ValueError(f"{what} holds more than {MAX_TEXT_BYTES:,} characters of JSON")
        parts.append(part)
    return "{" + ", ".join(parts) + "}"


def _schema_checked(read: Any, value: Any, what: str, max_nesting: int = MAX_JSON_NESTING) -> Any:
    """``read(value, what, max_nesting=...)`` (a reader of :mod:`tokensieve._bounded_json`),
    with nesting past the limit a ``SchemaError``."""
    try:
        return read(value, what, max_nesting=max_nesting)
    except NestingError as e:
        raise _schema_error(e) from None


def _schema_value(value: Any, name: str) -> Any:
    """A schema as JSON text (checked, kept as text), or as a plain ``dict``/``bool`` copy of a
    JSON-like object or of a pydantic model's schema."""
    if has_type(value, (str, bytes, bytearray)):
        # Checked here, but the text itself goes to the compiler: Python would read its numbers
        # as floats (0.1000000000000000000001 as 0.1, 1e400 as inf), the compiler reads them
        # exactly.
        text, parsed = _json_text(value, name)
        _check_schema_type(parsed, name)
        return text
    if type(value) is PlainJson:  # copied by a reader already (within the same bounds)
        value = value.value
    else:
        if not has_type(value, (dict, list, tuple, bool, int, float)) and value is not None:
            value = _model_schema(value, name)
        value = _schema_checked(plain_json, value, name)
    _check_schema_type(value, name)
    return value


def _json_text(value: Any, name: str) -> tuple[str, Any]:
    """JSON text checked (size, nesting, UTF-8) and parsed: the text and its value."""
    text = _schema_checked(checked_json_text, value, name)
    try:
        return text, json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{name} is not valid JSON: {e}") from None


def _tag_value(value: Any, name: str) -> Any:
    """A structural tag as JSON text (checked, kept as text), or a plain ``dict`` copy."""
    if has_type(value, (str, bytes, bytearray)):
        text, parsed = _json_text(value, name)
    elif type(value) is PlainJson:  # copied by a reader already (within the same bounds)
        text = None
        parsed = value.value
    else:
        text = None
        parsed = _schema_checked(plain_json, value, name)
    if type(parsed) is not dict:
        raise ValueError(f"{name} must be a structural tag (a JSON object), got {shown(parsed)}")
    return parsed if text is None else text


def _model_schema(value: Any, name: str) -> Any:
    """The JSON Schema of a pydantic model class (or instance); ``value`` itself when it is
    not one (the caller refuses it)."""
    cls = value if has_type(value, type) else type(value)
    try:
        if inspect.getattr_static(cls, "model_json_schema", None) is None:
            return value
        return cls.model_json_schema()
    except Exception as e:
        raise ValueError(f"{name}: model_json_schema() failed: {error_text(e)}") from None


def _check_schema_type(value: Any, name: str) -> None:
    if type(value) is not dict and type(value) is not bool:
        raise ValueError(
            f"{name} must be a JSON Schema (an object or a boolean), got {type(value).__name__}"
        )


def looks_like_lark(text: str) -> bool:
    """vLLM's test for a Lark grammar (``grammar_is_likely_lark`` in
    ``vllm/v1/structured_output/utils.py``, which picks Lark or EBNF for its own backends): no
    line, comments (``#``, ``//``) cut off, holds ``::=``. Every GBNF/EBNF rule is written
    ``name ::= ...``, Lark's ``name: ...``."""
    for line in text.split("\n"):
        line = _LARK_COMMENT.sub("", line).strip()
        if line and "::=" in line:
            return False
    return bool(text)


_LARK_COMMENT = re.compile(r"(#|//).*$")


def _grammar_value(value: Any, name: str) -> str:
    """A grammar's text: a non-blank string of at most 64 MiB (UTF-8)."""
    if not has_type(value, str):
        raise ValueError(f"{name} must be a string (the grammar's text), got {shown(value)}")
    text = exact_str(value)
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise ValueError(f"{name} holds more than {MAX_TEXT_BYTES:,} bytes of grammar text")
    if not text.strip():
        raise ValueError(f"{name} is empty: a grammar needs a rule (`root ::= ...`)")
    return text


def _choice_value(value: Any, name: str) -> tuple[str, ...]:
    if has_type(value, (str, bytes, bytearray)):
        try:
            choices = decode_json_text(value, name, max_nesting=1)
        except ValueError as e:
            raise ValueError(f"{name} must be a list of strings (or its JSON text): {e}") from None
    else:
        choices = plain_json(value, name, max_nesting=1)
    if type(choices) is not list or not choices:
        raise ValueError(f"{name} must be a non-empty list of strings")
    for c in choices:
        if type(c) is not str:
            raise ValueError(f"{name} must hold strings only, got {shown(c)}")
    return tuple(choices)


def compile_constraint(kind: str, value: Any, vocab: Vocabulary, **options: Any) -> Grammar:
    """Compile a constraint of ``kind`` for ``vocab``. Unknown kinds or options raise
    ValueError; the compiler's own rejections raise a ``TokensieveError``."""
    return Constraint.make(kind, value, options).compile(vocab)


def describe_error(constraint: Constraint, error: BaseException) -> str:
    """A client-readable message for a constraint that failed to compile."""
    name = constraint.name
    if isinstance(error, TokensieveError) or not isinstance(error, ValueError):
        return f"invalid {name}: {error_text(error, limit=None)}"
    message = _message(error) or type(error).__name__
    return message if name in message else f"invalid {name}: {message}"


class GrammarCache:
    """A bounded LRU cache of compiled grammars, keyed by :attr:`Constraint.key` and vocabulary
    fingerprint.

    Compile errors are cached too, as their client-readable message (:func:`describe_error`),
    so a bad constraint sent again is rejected without recompiling; :meth:`get` raises every
    compile error as a ``ValueError`` with that message. Thread-safe; requests for a key whose
    compile is running share that compile (one compile per constraint, however many ask at
    once).
    """

    def __init__(self, maxsize: int = 256) -> None:
        if maxsize <= 0:
            raise ValueError(f"maxsize must be positive, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str], Grammar | str] = OrderedDict()
        # the compiles running, by key (shared by every request for the key until stored)
        self._inflight: dict[tuple[str, str], _core.PendingGrammar] = {}
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
        not been compiled for ``vocab`` yet (nothing is compiled here). A constraint whose key
        cannot be computed (:attr:`Constraint.key` raises) gets its error message."""
        key = self._key(constraint, vocab)
        return key if isinstance(key, str) else self._get(key)

    @staticmethod
    def _key(constraint: Constraint, vocab: Vocabulary) -> tuple[str, str] | str:
        """The cache key, or the error message of a constraint that has none."""
        fingerprint = vocab.fingerprint
        try:
            return (constraint.key, fingerprint)
        except (ValueError, TokensieveError) as e:
            return describe_error(constraint, e)

    def _get(self, key: tuple[str, str]) -> Grammar | str | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        return entry

    def get_pending(
        self, constraint: Constraint, vocab: Vocabulary, *, inline_seconds: float | None = None
    ) -> PendingCompile:
        """The grammar, compiling on a core compile thread on a cache miss: ``.result()`` gives
        it (and caches it) or raises a ``ValueError`` with the client-readable message (also
        cached). With ``inline_seconds`` a new compile first runs on this thread for at most
        that much of its CPU time (:meth:`Constraint.compile_pending`)."""
        return PendingCompile(self, constraint, vocab, inline_seconds=inline_seconds)

    def _store(
        self,
        key: tuple[str, str],
        entry: Grammar | str,
        pending: _core.PendingGrammar | None = None,
    ) -> Grammar | str:
        """Cache `entry`; returns what the cache holds for `key` (the entry a request that
        shared the compile stored first)."""
        with self._lock:
            if pending is not None:
                self._landed(key, pending)
            stored = self._entries.get(key)
            if stored is not None and pending is not None:
                self._entries.move_to_end(key)
                return stored
            self.misses += 1
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
            return entry

    def _landed(self, key: tuple[str, str], pending: _core.PendingGrammar) -> None:
        """`pending` has ended: it no longer stands for `key`'s running compile (unless a later
        one does already). With the lock held."""
        if self._inflight.get(key) is pending:
            del self._inflight[key]

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
    file at once, otherwise a compile on a core compile thread. ``done()`` and ``result()`` as a
    ``concurrent.futures.Future``'s."""

    def __init__(
        self,
        cache: GrammarCache,
        constraint: Constraint,
        vocab: Vocabulary,
        *,
        inline_seconds: float | None = None,
    ) -> None:
        self._cache = cache
        self._constraint = constraint
        self._pending: _core.PendingGrammar | None = None
        self._seconds: float | None = None
        self._key: tuple[str, str] | None = None
        key = cache._key(constraint, vocab)
        if isinstance(key, str):  # no key: nothing to cache
            self._entry: Grammar | str | None = key
            return
        self._entry = cache._get(key)
        if self._entry is not None:
            return
        self._key = key
        with cache._lock:
            self._pending = cache._inflight.get(key)
        if self._pending is not None:  # another request's compile of the same constraint
            return
        try:
            self._entry = _precompiled(constraint, vocab)
            if self._entry is None:
                pending = constraint.compile_pending(vocab, inline_seconds=inline_seconds)
                with cache._lock:
                    self._pending = cache._inflight.setdefault(key, pending)
        except _Unexpected as e:
            self._entry = describe_error(constraint, e)
            return  # not cached: it may not happen again
        except (ValueError, TokensieveError) as e:
            self._entry = describe_error(constraint, e)
        if self._entry is not None:
            cache._store(self._key, self._entry)

    def done(self) -> bool:
        return self._pending is None or self._pending.done()

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds (the GIL released) for the compile; whether it is
        done."""
        return self._pending is None or self._pending.wait(timeout)

    @property
    def compile_seconds(self) -> float | None:
        """How long the compile ran on its compile thread (its wait for a lane not counted),
        once done; ``None`` for a grammar found in the cache or a precompiled file, and while
        the compile runs."""
        if self._pending is not None:
            return self._pending.compile_seconds
        return self._seconds

    def result(self) -> Grammar:
        """The grammar; ``ValueError`` with the client-readable message when it failed."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                self._entry = pending.result()
            except (ValueError, TokensieveError) as e:
                self._entry = describe_error(self._constraint, e)
            except Exception as e:  # not cached: it may not happen again
                self._entry = describe_error(self._constraint, e)
                assert self._key is not None
                with self._cache._lock:
                    self._cache._landed(self._key, pending)
                raise ValueError(self._entry) from e
            finally:
                self._seconds = pending.compile_seconds
            assert self._key is not None
            self._entry = self._cache._store(self._key, self._entry, pending)
        if isinstance(self._entry, str):
            raise ValueError(self._entry)
        assert self._entry is not None
        return self._entry


def _precompiled(constraint: Constraint, vocab: Vocabulary) -> Grammar | None:
    if _INDEX_DIR is None:
        return None
    try:
        key = (_INDEX_DIR, vocab.fingerprint)
        with _INDEX_DIRS_LOCK:
            d = _INDEX_DIRS.get(key)
            if d is None:
                d = _INDEX_DIRS[key] = IndexDirectory(_INDEX_DIR, vocab)
        return d.find(constraint.kind, constraint.source(), **constraint.language_options)
    except Exception:
        return None  # compile it instead; the compile reports any real problem
