"""Packed token bitmasks: allocation, validation and batch filling.

Layout: int32 ``[batch, ceil(vocab_size / 32)]``; token ``t`` is bit ``t % 32`` of word
``t // 32`` (lowest bit first); 1 = allowed. Bits for ids at or past ``vocab_size`` are always 0
after a fill. Torch tensors (CPU) and numpy arrays are both accepted everywhere; torch is
optional.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tokensieve import _core

__all__ = ["allocate_token_bitmask", "fill_next_token_bitmask", "bitmask_words"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without torch
        return None
    return torch


def bitmask_words(vocab_size: int) -> int:
    """Number of int32 words in one bitmask row for ``vocab_size`` tokens."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
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


def _buffer(bitmask: Any) -> tuple[int, int, int]:
    """Validate a writable C-contiguous int32 buffer; returns (address, rows, words).

    A 1-D buffer is one row.
    """
    if isinstance(bitmask, np.ndarray):
        if bitmask.dtype != np.int32:
            raise ValueError(f"bitmask must have dtype int32, got {bitmask.dtype}")
        if bitmask.ndim not in (1, 2):
            raise ValueError(f"bitmask must be 1-D or 2-D, got shape {bitmask.shape}")
        if not bitmask.flags.c_contiguous:
            raise ValueError("bitmask rows must be contiguous (C order); got a strided array")
        if not bitmask.flags.writeable:
            raise ValueError("bitmask is read-only")
        address = bitmask.__array_interface__["data"][0]
        shape = bitmask.shape
    else:
        torch = _torch()
        if torch is None or not isinstance(bitmask, torch.Tensor):
            raise ValueError(
                f"bitmask must be a numpy array or a torch tensor, got {type(bitmask).__name__}"
            )
        if bitmask.dtype != torch.int32:
            raise ValueError(f"bitmask must have dtype torch.int32, got {bitmask.dtype}")
        if bitmask.device.type != "cpu":
            raise ValueError(
                f"bitmask must be on the CPU (got device {bitmask.device}); fill on the CPU and "
                "copy to the device with .to(device, non_blocking=True)"
            )
        if bitmask.dim() not in (1, 2):
            raise ValueError(f"bitmask must be 1-D or 2-D, got shape {tuple(bitmask.shape)}")
        if not bitmask.is_contiguous():
            raise ValueError("bitmask rows must be contiguous; call .contiguous() first")
        if bitmask.requires_grad:
            raise ValueError("bitmask must not require grad")
        address = bitmask.data_ptr()
        shape = tuple(bitmask.shape)
    if len(shape) == 1:
        rows, words = 1, shape[0]
    else:
        rows, words = shape
    if rows == 0 or words == 0:
        raise ValueError(f"bitmask is empty (shape {shape})")
    return int(address), int(rows), int(words)


def fill_next_token_bitmask(
    matchers: Sequence[_core.Matcher],
    bitmask: Any,
    indices: Sequence[int] | None = None,
) -> None:
    """Fill one bitmask row per matcher, in parallel with the GIL released.

    ``matchers[k]`` overwrites row ``indices[k]`` (row ``k`` when ``indices`` is None); other
    rows are left alone. Raises ``ValueError`` for a wrong dtype, shape or device, non-contiguous
    rows, out-of-range or duplicate indices, or rows narrower or wider than the vocabulary needs.
    """
    address, rows, words = _buffer(bitmask)
    ms = list(matchers)
    if indices is None:
        idx = list(range(len(ms)))
        if len(ms) > rows:
            raise ValueError(f"{len(ms)} matchers but the bitmask has only {rows} rows")
    else:
        idx = [int(i) for i in indices]
        if len(idx) != len(ms):
            raise ValueError(f"{len(ms)} matchers but {len(idx)} indices")
        for i in idx:
            if i < 0 or i >= rows:
                raise ValueError(f"index {i} is out of range for a bitmask with {rows} rows")
        if len(set(idx)) != len(idx):
            raise ValueError("indices contain duplicates")
    if not ms:
        return
    _core._fill_next_token_bitmask(ms, address, rows, words, idx)
