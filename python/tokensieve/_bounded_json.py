"""Bounded reading of JSON a caller hands tokensieve: JSON text, or a JSON-like Python object.

Shared by the Python API (:mod:`tokensieve.constraints`, hence the transformers adapter and the
CLI) and the vLLM processors (:mod:`tokensieve.vllm.request_args`). Nothing here recurses on a
caller's value, calls its own methods (``__repr__``, ``__str__``, ``__eq__``, ``__hash__``,
``__iter__``, ``__class__``, ...) or builds anything larger than the limits below, and every
refusal is a ``ValueError`` that names the value by its type (never by its ``repr``):

* JSON text is decoded only after a linear scan has found its size within
  :data:`MAX_TEXT_BYTES` and its nesting within a limit (:data:`MAX_JSON_NESTING` by default), so
  a decoder never recurses deeper than that (:func:`checked_json_text`, :func:`decode_json_text`);
* a Python object given where JSON is expected is copied into plain ``dict``/``list``/``str``/
  ``int``/``float``/``bool``/``None`` without recursion, within the same nesting limit and at
  most :data:`MAX_JSON_VALUES` values (:func:`plain_json`).

Nesting past the limit is a :class:`NestingError` (a ``ValueError``), so that a caller may report
it as its own error type (the Python API's ``SchemaError`` for a schema). The limits are listed
in ``docs/limits.md``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

__all__ = [
    "MAX_JSON_NESTING",
    "MAX_JSON_VALUES",
    "MAX_TEXT_BYTES",
    "NestingError",
    "PlainJson",
    "checked_json_text",
    "decode_json_text",
    "exact_str",
    "has_type",
    "json_nesting",
    "plain_copy",
    "plain_json",
    "shown",
]

# Constraint text (a schema, a regex, a choice list or a registry as JSON text): the core's own
# limit on schema text.
MAX_TEXT_BYTES = 64 << 20
# Nesting of JSON text or of a JSON-like Python object (the core's limit on a schema's nesting).
MAX_JSON_NESTING = 128
# Values (containers and scalars) of a JSON-like Python object.
MAX_JSON_VALUES = 1 << 20

_CHUNK = 1 << 20


class PlainJson:
    """A value :func:`plain_json` has copied within its default bounds, wrapped so that the
    next reader (``Constraint.make``) takes the copy as it is rather than walking it again.
    Only :func:`plain_copy` makes one."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def plain_copy(value: Any, what: str) -> PlainJson:
    """:func:`plain_json` with its default bounds, the copy wrapped as :class:`PlainJson`."""
    return PlainJson(plain_json(value, what))


class NestingError(ValueError):
    """JSON text or a JSON-like object nested past the limit it was read with."""


def has_type(value: Any, cls: type | tuple[type, ...]) -> bool:
    """``isinstance`` by the value's real type: a ``__class__`` the object reports (which may
    lie, or raise) is not asked, so the base type's methods called next apply to it."""
    return issubclass(type(value), cls)


def shown(value: Any) -> str:
    """How a message shows a client's value: short literals as themselves (cut to 40
    characters), anything else by its type's name (a hostile object's ``repr`` may raise)."""
    if value is None or type(value) is bool:
        return repr(value)
    if has_type(value, int):
        v = int.__int__(value)
        return str(v) if v.bit_length() <= 64 else f"an integer of {v.bit_length()} bits"
    if has_type(value, float):
        return repr(float.__float__(value))
    if has_type(value, str):
        text = str.__str__(value)
        return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text):,} characters)"
    return f"a value of type {type(value).__name__}"


def exact_str(value: str) -> str:
    """``value`` as a plain ``str`` (a subclass's own methods are not called)."""
    return str.__str__(value)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def json_nesting(data: bytes, stop: int = MAX_JSON_NESTING, chunk: int = _CHUNK) -> int:
    """The deepest nesting of ``[``/``{`` outside JSON strings in ``data``, or a value above
    ``stop`` as soon as the scan passes ``stop``.

    Exact for valid JSON; for invalid JSON exact up to the first error, which is as deep as a
    decoder goes. Linear, in numpy over chunks of ``chunk`` bytes: a quote toggles the string
    state unless an odd run of backslashes precedes it, and brackets count outside strings.
    """
    depth = 0
    deepest = 0
    in_string = 0
    backslashes = 0  # the run of backslashes that ends the previous chunk
    for start in range(0, len(data), chunk):
        b = np.frombuffer(data, np.uint8, count=min(chunk, len(data) - start), offset=start)
        idx = np.arange(len(b), dtype=np.int64)
        is_bs = b == 0x5C
        last_other = np.maximum.accumulate(np.where(is_bs, -1, idx))
        run = idx - last_other  # backslashes ending at each byte (0 on other bytes)
        run[last_other < 0] += backslashes
        escaped = np.empty(len(b), dtype=bool)
        escaped[0] = backslashes % 2 == 1
        escaped[1:] = run[:-1] % 2 == 1
        quote = ((b == 0x22) & ~escaped).astype(np.int64)
        quotes = np.cumsum(quote)
        inside = (quotes - quote + in_string) % 2 == 1  # in a string before this byte
        step = ((b == 0x5B) | (b == 0x7B)).astype(np.int64) - ((b == 0x5D) | (b == 0x7D))
        step[inside] = 0
        levels = np.cumsum(step) + depth
        deepest = max(deepest, int(levels.max()))
        if deepest > stop:
            return deepest
        depth = int(levels[-1])
        in_string = int((in_string + quotes[-1]) % 2)
        backslashes = int(run[-1])
    return deepest


def _too_deep(what: str, max_nesting: int) -> NestingError:
    levels = "level" if max_nesting == 1 else "levels"
    return NestingError(f"{what} nests more than {max_nesting} {levels}")


def checked_json_text(
    value: Any,
    what: str,
    *,
    max_nesting: int = MAX_JSON_NESTING,
    max_bytes: int = MAX_TEXT_BYTES,
) -> str:
    """JSON text (``str``, or UTF-8 ``bytes``) checked for size and nesting before anything
    decodes it; returned as a plain ``str`` (not decoded: the core reads numbers exactly)."""
    if has_type(value, (bytes, bytearray)):
        data = (
            bytes.__getitem__(value, slice(None))
            if has_type(value, bytes)
            else bytes(bytearray.__getitem__(value, slice(None)))
        )
        if len(data) > max_bytes:
            raise ValueError(f"{what} has {len(data):,} bytes; at most {max_bytes:,} are accepted")
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{what} is not UTF-8 text: {e}") from None
    if not has_type(value, str):
        raise ValueError(f"{what} must be JSON text, got {shown(value)}")
    text = exact_str(value)
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and _utf8_len(text) > max_bytes):
        raise ValueError(
            f"{what} has {_utf8_len(text):,} bytes of text; at most {max_bytes:,} are accepted"
        )
    # no more opening brackets in all than levels allowed: none can nest deeper (most schemas;
    # counting them is far cheaper than the scan)
    if text.count("[") + text.count("{") > max_nesting and (
        json_nesting(text.encode("utf-8", "surrogatepass"), max_nesting) > max_nesting
    ):
        raise _too_deep(what, max_nesting)
    return text


def decode_json_text(
    value: Any,
    what: str,
    *,
    max_nesting: int = MAX_JSON_NESTING,
    max_bytes: int = MAX_TEXT_BYTES,
) -> Any:
    """Decode JSON text after :func:`checked_json_text`; ``ValueError`` when it is not JSON."""
    text = checked_json_text(value, what, max_nesting=max_nesting, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{what} is not valid JSON: {e}") from None


def plain_json(
    value: Any,
    what: str,
    *,
    max_nesting: int = MAX_JSON_NESTING,
    max_values: int | None = None,
    max_bytes: int = MAX_TEXT_BYTES,
) -> Any:
    """A copy of a JSON-like Python value in plain types, built without recursion.

    Objects are ``dict`` (string keys, order kept), arrays ``list`` or ``tuple``; subclasses are
    read through the base type's own methods. Refused with a ``ValueError``: other types,
    non-finite floats, nesting past ``max_nesting`` (a :class:`NestingError`), more than
    ``max_values`` values, strings totalling more than ``max_bytes`` characters (a cycle is
    refused as too deep; an object shared by several containers counts once per place, as its
    JSON text would hold it). ``max_values`` defaults to :data:`MAX_JSON_VALUES`.
    """
    if max_values is None:
        max_values = MAX_JSON_VALUES
    values = 1
    chars = 0
    stack: list[tuple[Any, Any, int]] = []  # (a container, its copy to fill, its level)

    def opened(v: Any, level: int, copy: Any) -> Any:
        """The empty copy of container `v`, queued to be filled."""
        if level > max_nesting:
            raise _too_deep(what, max_nesting)
        stack.append((v, copy, level))
        return copy

    def finite(f: float) -> float:
        if not math.isfinite(f):
            raise ValueError(f"{what} holds {f!r}, which is not JSON")
        return f

    def visit(v: Any, level: int) -> Any:
        """The plain copy of a scalar, or the empty copy of a container (filled later)."""
        nonlocal chars
        t = type(v)
        if t is str:
            chars += len(v)
            return v
        if v is None or t is bool or t is int:
            return v
        # the exact types first, without has_type's checks; then their subclasses
        if t is dict or t is list:
            return opened(v, level, {} if t is dict else [])
        if t is float:
            return finite(v)
        if has_type(v, float):
            return finite(float.__float__(v))
        if has_type(v, (dict, list, tuple)):
            return opened(v, level, {} if has_type(v, dict) else [])
        if has_type(v, int):  # a subclass (bool cannot be subclassed)
            return int.__int__(v)
        if has_type(v, str):
            text = exact_str(v)
            chars += len(text)
            return text
        raise ValueError(f"{what} holds {shown(v)}, which is not a JSON value")

    result = visit(value, 1)
    while stack:
        source, copy, level = stack.pop()
        if type(copy) is dict:
            entries = list(dict.items(source))
            values += len(entries)
            if values > max_values:
                raise ValueError(f"{what} holds more than {max_values:,} values")
            for k, child in entries:  # in order: the copy keeps the order of the keys
                if type(k) is not str:
                    if not has_type(k, str):
                        raise ValueError(f"{what} has a key that is not a string: {shown(k)}")
                    k = exact_str(k)
                chars += len(k)
                copy[k] = visit(child, level + 1)
        else:
            items = (
                list.copy(source)
                if has_type(source, list)
                else list(tuple.__getitem__(source, slice(None)))
            )
            values += len(items)
            if values > max_values:
                raise ValueError(f"{what} holds more than {max_values:,} values")
            copy.extend([visit(child, level + 1) for child in items])
        if chars > max_bytes:
            raise ValueError(f"{what} holds more than {max_bytes:,} characters of text")
    if chars > max_bytes:
        raise ValueError(f"{what} holds more than {max_bytes:,} characters of text")
    return result
