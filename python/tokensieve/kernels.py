"""Apply a packed token bitmask to logits in place: disallowed tokens become ``-inf``.

:func:`apply_token_bitmask_inplace` is the step after
:func:`~tokensieve.fill_next_token_bitmask`. The bitmask layout is vLLM's and xgrammar's: int32
``[batch, ceil(vocab/32)]``; token ``t`` is allowed iff bit ``t % 32`` (lowest bit first) of word
``t // 32`` is 1.

Three backends:

* ``"triton"`` — CUDA tensors: one fused kernel over blocks of 64 words (2,048 columns) per
  row. It reads the logits only where a word allows some token and writes them only where it
  disallows some (all-zero words: a store of ``-inf``; all-one words: nothing), with 16-byte
  vector loads and stores predicated per word; no unpacked mask is materialized.
* ``"cpu"`` — CPU tensors: a Rust kernel over the tensor's memory, parallel over rows (and column
  blocks for small batches), GIL released. All-ones words are skipped; on AVX-512 CPUs each
  other word is one or two masked stores of ``-inf`` (write-only), elsewhere a fill, a few
  scattered stores or a vectorized blend.
* ``"torch"`` — anything else: unpack the bits with shifts and ``masked_fill``.

The function is registered as the torch custom op ``tokensieve::apply_token_bitmask_inplace``
(mutating ``logits``, with a fake implementation), so it works inside ``torch.compile`` without a
graph break. torch is optional for the package: it is imported on first use only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from tokensieve import _core

__all__ = ["apply_token_bitmask_inplace"]

BACKENDS = ("auto", "triton", "cpu", "torch")
_OP_NAME = "tokensieve::apply_token_bitmask_inplace"
_OP_SCHEMA = (
    "(Tensor(a!) logits, Tensor bitmask, int[]? indices, int? vocab_size, str backend) -> ()"
)
# Bitmask words per triton program (64 words = 2,048 logits); a power of two.
_TRITON_WORDS_PER_BLOCK = 64


def _require_torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise ImportError(
            "tokensieve.apply_token_bitmask_inplace needs PyTorch: pip install tokensieve[torch]"
        ) from e
    return torch


def apply_token_bitmask_inplace(
    logits: Any,
    bitmask: Any,
    indices: Sequence[int] | Any | None = None,
    vocab_size: int | None = None,
    backend: str = "auto",
) -> None:
    """Set ``logits[i, t] = -inf`` wherever token ``t`` is disallowed by ``bitmask[i]``, in place.

    Args:
        logits: float32, float16 or bfloat16 tensor ``[batch, vocab]`` (or ``[vocab]``, one row);
            the last dimension must be contiguous (rows may be strided).
        bitmask: int32 tensor ``[batch', ceil(vocab/32)]`` (or one 1-D row), on the same device
            as ``logits``, last dimension contiguous. It may be wider than needed.
        indices: rows to mask (a list/tuple of ints, or a 1-D integer tensor). Row ``i`` of the
            logits is masked by row ``i`` of the bitmask (vLLM's convention); other rows are left
            untouched. ``None`` masks every row; the bitmask then needs at least as many rows as
            the logits (extra bitmask rows are ignored, so a bitmask preallocated for the maximum
            batch can be reused). Indices must be in range for both tensors and distinct.
        vocab_size: columns at or past it are set to ``-inf``, as are columns past
            ``32 * bitmask.shape[-1]``. Default: the logits width. Must not exceed it.
        backend: ``"auto"`` (triton for CUDA tensors when triton is importable, the Rust kernel
            for CPU tensors, torch otherwise), ``"triton"``, ``"cpu"`` or ``"torch"``.

    Raises:
        ValueError: wrong dtype, rank, shape, device, strides, backend, or an index out of range
            or repeated.
        ImportError: torch (``pip install tokensieve[torch]``) or, for ``backend="triton"``,
            triton is not installed.

    Pass ``indices`` as a list: it is checked on the host and copied to the GPU from pinned
    memory without blocking. A tensor is read with ``.tolist()`` first (for a CUDA tensor that
    waits for the GPU; inside ``torch.compile`` it breaks the graph).
    """
    torch = _require_torch()
    for name, t in (("logits", logits), ("bitmask", bitmask)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if indices is not None and not isinstance(indices, list):
        indices = _indices_list(indices)
    if not torch.compiler.is_compiling() and _plain_eager(torch, logits, bitmask):
        # Same code as the op's implementation, minus ~10 us of custom-op dispatch per call.
        _run(torch, logits, bitmask, indices, vocab_size, backend)
        torch.autograd.graph.increment_version(logits)  # as the dispatcher would for (a!)
        return
    from tokensieve.kernels import _torch_op  # registers the op on first use (dynamo-safe)

    op: Any = _torch_op
    op(logits, bitmask, indices, vocab_size, backend)


def _plain_eager(torch: Any, logits: Any, bitmask: Any) -> bool:
    """Plain tensors, no dispatch / function modes, no autograd: the op can be skipped."""
    if type(logits) is not torch.Tensor or type(bitmask) is not torch.Tensor:
        return False
    if logits.requires_grad and torch.is_grad_enabled():
        return False
    try:
        return bool(
            torch._C._len_torch_dispatch_stack() == 0
            and not torch._C._is_torch_function_mode_enabled()
        )
    except AttributeError:  # pragma: no cover - private API moved: take the dispatcher path
        return False


def _indices_list(indices: Any) -> list[int]:
    if isinstance(indices, (str, bytes)):
        raise ValueError(f"indices must be a sequence of ints, got {type(indices).__name__}")
    if hasattr(indices, "tolist"):  # torch tensor / numpy array
        if getattr(indices, "ndim", 1) != 1:
            raise ValueError(f"indices must be 1-D, got shape {tuple(indices.shape)}")
        if "int" not in str(indices.dtype):
            raise ValueError(f"indices must have an integer dtype, got {indices.dtype}")
        indices = indices.tolist()
    try:
        return [_as_int(i, "index") for i in indices]
    except TypeError as e:
        raise ValueError(f"indices must be a sequence of ints: {e}") from e


def _as_int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise ValueError(f"{what} must be an int, got {x!r}")
    return int(x.__index__())


# --- validation, shared by the real and the fake implementation -------------------------------


class _Plan(NamedTuple):
    rows: int  # logits rows (1 for a 1-D tensor)
    cols: int  # logits width
    row_stride: int  # elements between logits rows
    mask_rows: int
    mask_words: int
    indices: list[int] | None
    vocab_size: int
    backend: str  # resolved: "triton", "cpu" or "torch"


def _validate(
    torch: Any,
    logits: Any,
    bitmask: Any,
    indices: list[int] | None,
    vocab_size: int | None,
    backend: str,
) -> _Plan:
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch tensor, got {type(logits).__name__}")
    if not isinstance(bitmask, torch.Tensor):
        raise ValueError(f"bitmask must be a torch tensor, got {type(bitmask).__name__}")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"logits must be float32, float16 or bfloat16, got {logits.dtype}")
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must have dtype torch.int32, got {bitmask.dtype}")
    if logits.dim() not in (1, 2):
        raise ValueError(f"logits must be 1-D or 2-D, got shape {tuple(logits.shape)}")
    if bitmask.dim() not in (1, 2):
        raise ValueError(f"bitmask must be 1-D or 2-D, got shape {tuple(bitmask.shape)}")
    if logits.device != bitmask.device:
        raise ValueError(
            f"logits are on {logits.device} but the bitmask is on {bitmask.device}; copy the "
            "bitmask with bitmask.to(logits.device, non_blocking=True)"
        )
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

    rows, cols = (1, logits.shape[0]) if logits.dim() == 1 else tuple(logits.shape)
    mask_rows, mask_words = (1, bitmask.shape[0]) if bitmask.dim() == 1 else tuple(bitmask.shape)
    if cols > 1 and logits.stride(-1) != 1:
        raise ValueError(
            f"the last dimension of logits must be contiguous (stride 1), got strides "
            f"{tuple(logits.stride())}"
        )
    row_stride = cols if rows <= 1 or logits.dim() == 1 else logits.stride(0)
    if rows > 1 and row_stride < cols:
        raise ValueError(
            f"logits rows overlap (row stride {row_stride} < width {cols}); "
            "use a tensor with distinct rows"
        )
    if mask_words > 1 and bitmask.stride(-1) != 1:
        raise ValueError(
            f"the last dimension of the bitmask must be contiguous (stride 1), got strides "
            f"{tuple(bitmask.stride())}"
        )
    if mask_words == 0 and cols > 0:
        raise ValueError(f"the bitmask has no words (shape {tuple(bitmask.shape)})")

    if vocab_size is None:
        vs = cols
    else:
        vs = _as_int(vocab_size, "vocab_size")
        if vs < 0 or vs > cols:
            raise ValueError(f"vocab_size must be in [0, {cols}] (the logits width), got {vs}")

    if indices is None:
        if mask_rows < rows:
            raise ValueError(
                f"the bitmask has {mask_rows} rows but the logits have {rows}; pass indices to "
                "mask only some rows"
            )
        idx = None
    else:
        idx = [_as_int(i, "index") for i in indices]
        limit = min(rows, mask_rows)
        for i in idx:
            if i < 0 or i >= limit:
                raise ValueError(
                    f"index {i} is out of range for logits with {rows} rows and a bitmask with "
                    f"{mask_rows} rows"
                )
        if len(set(idx)) != len(idx):
            raise ValueError(f"indices contain duplicates: {idx}")

    device = logits.device.type
    if backend == "auto":
        if device == "cuda" and _triton_available():
            resolved = "triton"
        elif device == "cpu":
            resolved = "cpu"
        else:
            resolved = "torch"
    elif backend == "cpu":
        if device != "cpu":
            raise ValueError(f"backend='cpu' needs CPU tensors, got device {logits.device}")
        resolved = "cpu"
    elif backend == "triton":
        if device != "cuda" and not (device == "cpu" and _triton_interpret()):
            raise ValueError(
                f"backend='triton' needs CUDA tensors (or CPU tensors with TRITON_INTERPRET=1), "
                f"got device {logits.device}"
            )
        resolved = "triton"
    else:
        resolved = "torch"
    return _Plan(rows, cols, row_stride, mask_rows, mask_words, idx, vs, resolved)


# --- backends ---------------------------------------------------------------------------------

_DTYPE_CODES = {"torch.float32": 0, "torch.float16": 1, "torch.bfloat16": 2}


def _apply_cpu(logits: Any, bitmask: Any, plan: _Plan) -> None:
    if bitmask.dim() == 2 and plan.mask_rows > 1 and bitmask.stride(0) != plan.mask_words:
        bitmask = bitmask.contiguous()  # strided rows: the Rust kernel wants them packed
    core: Any = _core  # the binding is internal; not in the public stub
    core._apply_token_bitmask_cpu(
        logits.data_ptr(),
        _DTYPE_CODES[str(logits.dtype)],
        plan.rows,
        plan.row_stride,
        plan.cols,
        bitmask.data_ptr(),
        plan.mask_rows,
        plan.mask_words,
        plan.indices,
        plan.vocab_size,
    )


def _apply_torch(torch: Any, logits: Any, bitmask: Any, plan: _Plan) -> None:
    logits2 = logits.unsqueeze(0) if logits.dim() == 1 else logits
    bitmask2 = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    limit = min(plan.vocab_size, 32 * plan.mask_words)
    words = (limit + 31) // 32
    if plan.indices is None:
        rows = None
        mask = bitmask2[: plan.rows, :words]
    else:
        rows = torch.tensor(plan.indices, dtype=torch.long, device=logits.device)
        mask = bitmask2.index_select(0, rows)[:, :words]
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    allowed = ((mask.unsqueeze(-1) >> shifts) & 1).bool().reshape(mask.shape[0], words * 32)
    allowed = allowed[:, :limit]
    if limit < plan.cols:  # columns past vocab_size / the bitmask: disallowed
        pad = torch.zeros(
            (allowed.shape[0], plan.cols - limit), dtype=torch.bool, device=logits.device
        )
        allowed = torch.cat([allowed, pad], dim=1)
    if rows is None:
        logits2[: plan.rows].masked_fill_(~allowed, float("-inf"))
    else:
        logits2[rows] = logits2[rows].masked_fill(~allowed, float("-inf"))


_TRITON_STATE: dict[str, Any] = {}


def _triton_available() -> bool:
    """Whether triton imports (asked once per process)."""
    known = _TRITON_STATE.get("available")
    if known is None:
        try:
            import triton  # noqa: F401
        except Exception:
            known = False
        else:
            known = True
        _TRITON_STATE["available"] = known
    return bool(known)


def _triton_interpret() -> bool:
    """Whether the triton kernel runs (or will run) in interpreter mode, on CPU tensors."""
    if "kernel" in _TRITON_STATE:
        return bool(_TRITON_STATE["interpret"])
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _triton_kernel() -> Any:
    """The jitted kernel, built on first use (so TRITON_INTERPRET is read then)."""
    if "kernel" in _TRITON_STATE:
        return _TRITON_STATE["kernel"]
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        raise ImportError("backend='triton' needs triton: pip install triton") from e

    # No annotations but tl.constexpr: triton resolves them as globals when compiling.
    # One program per (row, WORDS bitmask words = 32 * WORDS columns), laid out [WORDS, 32]: a
    # word's 32 columns share its load/store predicate, so the logits move in vector
    # instructions. The logits are read only where a word has an allowed bit and written only
    # where it has a disallowed one: a block with nothing allowed is a write, one with
    # everything allowed a read of its words alone, a mixed one a read and a write. The last
    # block of a row (columns past `num_cols` or `limit`) takes per-column predicates.
    def _apply_token_bitmask_kernel(  # type: ignore[no-untyped-def]
        logits_ptr,
        bitmask_ptr,
        indices_ptr,
        num_cols,
        limit,
        logits_row_stride,
        bitmask_row_stride,
        HAS_INDICES: tl.constexpr,
        WORDS: tl.constexpr,
    ):
        pid = tl.program_id(0)
        if HAS_INDICES:
            row = tl.load(indices_ptr + pid).to(tl.int64)
        else:
            row = pid.to(tl.int64)
        block = tl.program_id(1)
        word_ix = block * WORDS + tl.arange(0, WORDS)
        lane = tl.arange(0, 32)
        col = word_ix[:, None] * 32 + lane[None, :]
        ptrs = logits_ptr + row * logits_row_stride + col
        words_ptr = bitmask_ptr + row * bitmask_row_stride + word_ix
        if (block + 1) * WORDS * 32 <= tl.minimum(num_cols, limit):
            word = tl.load(words_ptr)[:, None]
            allowed = ((word >> lane[None, :]) & 1) != 0
            some = tl.broadcast_to(word != 0, (WORDS, 32))
            every = tl.broadcast_to(word == -1, (WORDS, 32))
            x = tl.load(ptrs, mask=some & ~every, other=float("-inf"))
            tl.store(ptrs, tl.where(allowed, x, float("-inf")), mask=~every)
        else:
            # Columns at or past `limit` are disallowed; words past ceil(limit / 32) unread.
            word = tl.load(words_ptr, mask=word_ix < (limit + 31) // 32, other=0)[:, None]
            in_row = col < num_cols
            allowed = (((word >> lane[None, :]) & 1) != 0) & (col < limit)
            x = tl.load(ptrs, mask=in_row & allowed, other=float("-inf"))
            tl.store(ptrs, tl.where(allowed, x, float("-inf")), mask=in_row)

    from triton import knobs

    kernel = triton.jit(_apply_token_bitmask_kernel)
    _TRITON_STATE["interpret"] = bool(knobs.runtime.interpret)
    _TRITON_STATE["kernel"] = kernel
    _TRITON_STATE["launches"] = 0
    return kernel


def _apply_triton(torch: Any, logits: Any, bitmask: Any, plan: _Plan) -> None:
    kernel = _triton_kernel()
    if logits.device.type == "cpu" and not _TRITON_STATE["interpret"]:
        raise ValueError(
            "backend='triton' got CPU tensors but triton was loaded without TRITON_INTERPRET=1"
        )
    n_rows = plan.rows if plan.indices is None else len(plan.indices)
    if n_rows == 0 or plan.cols == 0:
        return
    if plan.indices is None:
        indices = bitmask  # unused (HAS_INDICES=False); any pointer will do
    elif logits.device.type == "cuda":
        # from pinned memory without blocking: the host does not wait for the copy (the
        # caching host allocator keeps the buffer until the copy has run)
        host = torch.tensor(plan.indices, dtype=torch.int32, pin_memory=True)
        indices = host.to(logits.device, non_blocking=True)
    else:
        indices = torch.tensor(plan.indices, dtype=torch.int32, device=logits.device)
    mask_row_stride = bitmask.stride(0) if bitmask.dim() == 2 else plan.mask_words
    limit = min(plan.vocab_size, 32 * plan.mask_words)
    words = _TRITON_WORDS_PER_BLOCK
    grid = (n_rows, (plan.cols + 32 * words - 1) // (32 * words))
    kernel[grid](
        logits,
        bitmask,
        indices,
        plan.cols,
        limit,
        plan.row_stride,
        mask_row_stride,
        HAS_INDICES=plan.indices is not None,
        WORDS=words,
    )
    _TRITON_STATE["launches"] += 1


def _run(
    torch: Any,
    logits: Any,
    bitmask: Any,
    indices: list[int] | None,
    vocab_size: int | None,
    backend: str,
) -> None:
    plan = _validate(torch, logits, bitmask, indices, vocab_size, backend)
    if plan.cols == 0 or plan.rows == 0 or (plan.indices is not None and not plan.indices):
        return
    if plan.indices is not None and plan.indices == list(range(plan.rows)):
        # every row in order (a transformers step, a full vLLM batch): the same as no indices,
        # with no index list to copy to the device
        plan = plan._replace(indices=None)
    if plan.backend == "cpu":
        _apply_cpu(logits, bitmask, plan)
    elif plan.backend == "triton":
        _apply_triton(torch, logits, bitmask, plan)
    else:
        _apply_torch(torch, logits, bitmask, plan)


# --- the custom op ----------------------------------------------------------------------------


def _register_op() -> Any:
    torch = _require_torch()

    def _op(
        logits: Any,
        bitmask: Any,
        indices: list[int] | None,
        vocab_size: int | None,
        backend: str,
    ) -> None:
        _run(torch, logits, bitmask, indices, vocab_size, backend)

    def _fake(
        logits: Any,
        bitmask: Any,
        indices: list[int] | None,
        vocab_size: int | None,
        backend: str,
    ) -> None:
        _validate(torch, logits, bitmask, indices, vocab_size, backend)

    op = torch.library.custom_op(_OP_NAME, mutates_args=("logits",), schema=_OP_SCHEMA)(_op)
    op.register_fake(_fake)
    return torch.ops.tokensieve.apply_token_bitmask_inplace.default


def __getattr__(name: str) -> Any:
    # `_torch_op` is created on first access: `from tokensieve.kernels import _torch_op` inside
    # apply_token_bitmask_inplace runs this eagerly even while torch.compile traces the caller,
    # so the op exists before it is put in the graph, and `import tokensieve` never imports torch.
    if name == "_torch_op":
        op = _register_op()
        globals()["_torch_op"] = op
        return op
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
