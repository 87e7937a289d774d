"""A stand-in for vLLM's `StructuredOutputsParams` (tests that need no vLLM)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def so(**fields: Any) -> SimpleNamespace:
    """The params with every field vLLM 0.32 reads unset, then `fields`."""
    base = dict(
        json=None,
        regex=None,
        choice=None,
        grammar=None,
        json_object=None,
        structural_tag=None,
        disable_any_whitespace=False,
        disable_additional_properties=False,
        whitespace_pattern=None,
    )
    base.update(fields)
    return SimpleNamespace(**base)
