"""Bounded, typed reading of the values a vLLM request carries in its ``guided_*`` keys.

A request's ``extra_args`` (``vllm_xargs`` over HTTP) is the client's: any JSON value, and for an
in-process caller any Python object. Nothing here recurses on such a value, calls its own
methods (``__repr__``, ``__str__``, ``__iter__``, ``__class__``, ...) or builds anything larger than the limits
below, and every refusal is a ``ValueError`` that names the key and the value's type (never its
``repr``):

* JSON text (``guided_json``, ``guided_choice``, ``guided_registry``) is decoded only after a
  linear scan has found its size within :data:`MAX_TEXT_BYTES` and its nesting within the key's
  limit (:data:`MAX_JSON_NESTING`; a flat list for ``guided_choice``), so a decoder never
  recurses deeper than that (:func:`checked_json_text`, :func:`decode_json_text`);
* a Python object given where JSON is expected is copied into plain ``dict``/``list``/``str``/
  ``int``/``float``/``bool``/``None`` without recursion, within the same nesting limit and at
  most :data:`MAX_JSON_VALUES` values (:func:`plain_json`);
* scalar options are read by type: integers in a range (:func:`read_int`), positive finite
  numbers (:func:`read_seconds`), booleans (:func:`read_bool`), strings of at most
  :data:`MAX_OPTION_BYTES` (:func:`read_text`); text spelling a number or a boolean (as
  ``vllm_xargs`` sends them) is read as one, without a JSON decoder.

The JSON readers live in :mod:`tokensieve._bounded_json`, shared with the Python API
(:mod:`tokensieve.constraints`), and are re-exported here. The limits are listed in ``docs/limits.md``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tokensieve._bounded_json import (
    MAX_JSON_NESTING,
    MAX_JSON_VALUES,
    MAX_TEXT_BYTES,
    NestingError,
    _utf8_len,
    checked_json_text,
    decode_json_text,
    exact_str,
    has_type,
    json_nesting,
    plain_copy,
    plain_json,
    shown,
)

__all__ = [
    "MAX_JSON_NESTING",
    "MAX_JSON_VALUES",
    "MAX_OPTION_BYTES",
    "MAX_TEXT_BYTES",
    "NestingError",
    "U32_MAX",
    "checked_json_text",
    "decode_json_text",
    "exact_str",
    "has_type",
    "is_null",
    "json_nesting",
    "plain_copy",
    "plain_json",
    "read_bool",
    "read_int",
    "read_seconds",
    "read_text",
    "shown",
]

# Any other string value (option names such as "compact", a whitespace regex, ...).
MAX_OPTION_BYTES = 4096
U32_MAX = (1 << 32) - 1

_INT_TEXT = re.compile(r"[+-]?[0-9]{1,40}")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,6})?")
_NULL_TEXT = ("null", "none")


def is_null(value: Any) -> bool:
    """``None``, or the text ``null``/``none`` (any case): the key is treated as absent."""
    return value is None or (
        has_type(value, str) and exact_str(value).strip().lower() in _NULL_TEXT
    )


def read_bool(value: Any, what: str) -> bool:
    """``True``/``False``, ``1``/``0``, or their text (``"true"``, ``"False"``, ``"1"``,
    ``""`` ...); ``None``/``"null"`` is False."""
    if is_null(value):
        return False
    if has_type(value, bool):
        return value is True
    if has_type(value, int) and not has_type(value, bool) and int.__int__(value) in (0, 1):
        return int.__int__(value) == 1
    if has_type(value, str):
        text = exact_str(value).strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0", ""):
            return False
    raise ValueError(f"{what} must be true or false, got {shown(value)}")


def read_int(value: Any, what: str, low: int = 0, high: int = U32_MAX) -> int:
    """An integer in ``low ..= high``: an ``int`` (not a bool) or its decimal text."""
    number: int | None = None
    if has_type(value, int) and not has_type(value, bool):
        number = int.__int__(value)
    elif has_type(value, str):
        text = exact_str(value).strip()
        if _INT_TEXT.fullmatch(text):
            number = int(text)
    if number is None or not low <= number <= high:
        kind = "a non-negative integer" if low == 0 else f"an integer of at least {low}"
        raise ValueError(f"{what} must be {kind} (at most {high:,}), got {shown(value)}")
    return number


def read_seconds(value: Any, what: str) -> float:
    """A positive finite number: an ``int`` or ``float`` (not a bool) or its decimal text."""
    number: float | None = None
    if has_type(value, int) and not has_type(value, bool):
        v = int.__int__(value)
        number = float(v) if v.bit_length() <= 1000 else math.inf
    elif has_type(value, float):
        number = float.__float__(value)
    elif has_type(value, str):
        text = exact_str(value).strip()
        if len(text) <= 64 and _NUMBER_TEXT.fullmatch(text):
            number = float(text)
    if number is None or not math.isfinite(number) or number <= 0:
        raise ValueError(f"{what} must be a positive number, got {shown(value)}")
    return number


def read_text(value: Any, what: str, max_bytes: int = MAX_OPTION_BYTES) -> str:
    """A string of at most ``max_bytes`` UTF-8 bytes."""
    if not has_type(value, str):
        raise ValueError(f"{what} must be a string, got {shown(value)}")
    text = exact_str(value)
    if len(text) > max_bytes or _utf8_len(text) > max_bytes:
        raise ValueError(
            f"{what} has {_utf8_len(text):,} bytes; at most {max_bytes:,} are accepted"
        )
    return text
