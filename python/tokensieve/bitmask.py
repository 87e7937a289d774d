"""Packed token bitmasks: allocation and batch filling.

Layout: int32 ``[batch, ceil(vocab_size / 32)]``; token ``t`` is bit ``t % 32`` of word
``t // 32`` (lowest bit first); 1 = allowed. Bits for ids at or past ``vocab_size`` are always 0
after a fill. Torch tensors (CPU) and numpy arrays are both accepted everywhere; torch is
optional. Buffers are validated by the extension (``fill_next_token_bitmask`` below and
``Matcher.fill_next_token_bitmask``) before any write.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokensieve._core import MAX_VOCAB_SIZE, fill_next_token_bitmask

__all__ = ["allocate_token_bitmask", "fill_next_token_bitmask", "bitmask_words"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without torch
        return None
    return torch


def bitmask_words(vocab_size: int) -> int:
    """Number of int32 words in one bitmask row for ``vocab_size`` tokens."""
    if not 0 < vocab_size <= MAX_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be from 1 to {MAX_VOCAB_SIZE} (the largest vocabulary), "
            f"got {vocab_size}"
        )
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> Any:
    """An int32 bitmask ``[batch_size, ceil(vocab_size/32)]`` with every bit set.

    Returns a torch tensor when torch is installed, else a numpy array.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    words = bitmask_words(vocab_size)
    torch = _torch()
    if torch is not None:
        return torch.full((batch_size, words), -1, dtype=torch.int32)
    return np.full((batch_size, words), -1, dtype=np.int32)
