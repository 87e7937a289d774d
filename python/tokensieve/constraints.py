"""One entry point from a constraint (kind + value + options) to a compiled grammar.

The Python API, the vLLM processors and the CLI all route through :func:`compile_constraint`,
so the constraint kinds and option names are the same everywhere:

====================  ==========================================================
kind                  value
====================  ==========================================================
``regex``             a pattern (full match)
``json_schema``       a dict, a JSON string, or a pydantic model class
``choice``            a list of strings
``json_object``       ignored: any JSON object
====================  ==========================================================

Engine options (all kinds): ``max_states``, ``max_nfa_bytes``, ``mask_cache_bytes``,
``max_compile_seconds``. JSON Schema options are listed in :data:`SCHEMA_OPTIONS`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tokensieve._core import Grammar, Vocabulary

__all__ = ["KINDS", "ENGINE_OPTIONS", "SCHEMA_OPTIONS", "compile_constraint", "canonical_key"]

KINDS = ("regex", "json_schema", "choice", "json_object")
ENGINE_OPTIONS = ("max_states", "max_nfa_bytes", "mask_cache_bytes", "max_compile_seconds")
SCHEMA_OPTIONS = (
    "additional_properties",
    "formats",
    "one_of",
    "whitespace",
    "max_whitespace",
    "max_recursion_depth",
    "max_nesting_depth",
    "truncate_recursion",
    "lenient",
    "registry",
)


def _schema_support(name: str) -> Any:
    fn = getattr(Grammar, name, None)
    if fn is None:
        raise ValueError(
            f"this build of tokensieve has no Grammar.{name}: JSON Schema, choice and JSON "
            "object constraints are not available in it"
        )
    return fn


def compile_constraint(kind: str, value: Any, vocab: Vocabulary, **options: Any) -> Grammar:
    """Compile a constraint of `kind` for `vocab`. Unknown kinds or options raise ValueError."""
    if kind not in KINDS:
        raise ValueError(f"unknown constraint kind {kind!r}; expected one of {', '.join(KINDS)}")
    engine = {k: v for k, v in options.items() if k in ENGINE_OPTIONS}
    schema = {k: v for k, v in options.items() if k in SCHEMA_OPTIONS}
    unknown = sorted(set(options) - set(engine) - set(schema))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}")
    if kind == "regex":
        if schema:
            raise ValueError(
                f"option(s) {', '.join(sorted(schema))} apply to JSON constraints only"
            )
        if not isinstance(value, str):
            raise ValueError("a regex constraint must be a string")
        return Grammar.from_regex(value, vocab, **engine)
    if kind == "json_schema":
        return _schema_support("from_json_schema")(value, vocab, **schema, **engine)  # type: ignore[no-any-return]
    if kind == "choice":
        if not isinstance(value, (list, tuple)) or not all(isinstance(c, str) for c in value):
            raise ValueError("a choice constraint must be a list of strings")
        return _schema_support("from_choice")(list(value), vocab, **engine)  # type: ignore[no-any-return]
    return _schema_support("from_json_object")(vocab, **schema, **engine)  # type: ignore[no-any-return]


def canonical_key(kind: str, value: Any, options: Mapping[str, Any], vocab: Vocabulary) -> str:
    """A cache key: kind, the constraint as canonical JSON (property order kept, never
    sorted), the options sorted by name, and the vocabulary fingerprint."""
    if kind == "json_schema" and isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, type):  # pydantic model class
        value = value.model_json_schema()  # type: ignore[attr-defined]
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    options = dict(options)
    if isinstance(options.get("registry"), Mapping):  # URI order does not matter
        options["registry"] = dict(sorted(options["registry"].items()))
    opts = json.dumps(dict(sorted(options.items())), separators=(",", ":"), default=str)
    return f"{kind}\x00{text}\x00{opts}\x00{vocab.fingerprint}"
