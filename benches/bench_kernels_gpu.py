"""GPU time to apply a packed token bitmask to logits, beside the memory-bound floor.

For batch 1 / 8 / 64 / 256 / 1,024 × 128,256 and 151,936 columns, fp32 / bf16 / fp16, with 0 %,
1 % and 50 % of tokens allowed, per call:

* ``tokensieve``      — ``tokensieve.apply_token_bitmask_inplace`` (public API; triton kernel),
* ``ts-previous``     — the kernel it replaced (one masked ``-inf`` store per disallowed column,
  blocks of 128 words × 32 lanes), defined here for the before/after comparison,
* ``xgr-cuda`` / ``xgr-triton`` — xgrammar's kernels, when xgrammar is installed,
* ``torch``           — plain torch: unpack the words with shifts, ``masked_fill_``,
* ``fill``            — ``logits.fill_(0)`` on the same tensor: the floor.

Device time: CUDA events around back-to-back calls, best of 5 samples (µs per call). Host time:
wall time of calls without synchronizing, µs per call (the launch path: checks, conversions,
the launch itself), with ``indices`` absent, as a list and as a CUDA tensor. The GPU's name and
the packages go into ``benches/results/kernels_gpu.{md,json}``.

    python benches/bench_kernels_gpu.py [--quick]

Needs a CUDA GPU. ``--dry-run`` runs every method once on tiny CPU tensors under
``TRITON_INTERPRET=1`` (set it in the environment) to check the script itself; it writes nothing.
``--render`` rewrites the Markdown table from ``kernels_gpu.json`` (no GPU; it measures nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from bench_kernels import random_bitmask, torch_unpack_masked_fill  # noqa: E402
from common import RESULTS_DIR, md_table, num, text_table  # noqa: E402

import tokensieve as ts  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

try:
    import xgrammar as xgr
except Exception:  # pragma: no cover - optional
    xgr = None

COLS = [128256, 151936]
BATCHES = [1, 8, 64, 256, 1024]
DTYPES = ["float32", "bfloat16", "float16"]
DENSITIES = [0.0, 0.01, 0.5]


def previous_kernel() -> Any:
    """The triton kernel before the vector rewrite (write-only masked stores)."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(
        logits_ptr, bitmask_ptr, num_cols, limit, row_stride, mask_stride, WORDS: tl.constexpr
    ):  # type: ignore[no-untyped-def]  # noqa: E501
        row = tl.program_id(0).to(tl.int64)
        word = tl.program_id(1) * WORDS + tl.arange(0, WORDS)
        bits = tl.load(
            bitmask_ptr + row * mask_stride + word, mask=word < (limit + 31) // 32, other=0
        )
        lane = tl.arange(0, 32)
        col = word[:, None] * 32 + lane[None, :]
        allowed = (((bits[:, None] >> lane[None, :]) & 1) != 0) & (col < limit)
        neg_inf = tl.full([WORDS, 32], float("-inf"), logits_ptr.dtype.element_ty)
        tl.store(logits_ptr + row * row_stride + col, neg_inf, mask=(~allowed) & (col < num_cols))

    def run(logits: Any, bitmask: Any) -> None:
        rows, cols = logits.shape
        grid = (rows, (cols + 32 * 128 - 1) // (32 * 128))
        kernel[grid](logits, bitmask, cols, cols, logits.stride(0), bitmask.stride(0), WORDS=128)

    return run


# peer kernels that raised on first use here: name -> the error (reported with the results)
BROKEN: dict[str, str] = {}


def make(batch: int, cols: int, dtype: str, p: float, device: str) -> tuple[Any, Any]:
    seed = batch * 7 + cols + int(p * 100)
    bitmask = random_bitmask(batch, cols, p, seed)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, cols, generator=gen).to(getattr(torch, dtype))
    return logits.to(device), bitmask.to(device)


def device_us(fn: Callable[[], None], calls: int, samples: int = 5) -> float:
    """Best of `samples`: µs per call over `calls` back-to-back calls, by CUDA events."""
    best = float("inf")
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1000 / calls)
    return best


def host_us(fn: Callable[[], None], calls: int) -> float:
    """µs of host time per call, no synchronization inside the loop (median of 5 samples)."""
    out = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) * 1e6 / calls)
        torch.cuda.synchronize()
    return statistics.median(out)


def methods(logits: Any, bitmask: Any, prev: Any) -> dict[str, Callable[[], None]]:
    m: dict[str, Callable[[], None]] = {
        "fill": lambda: logits.fill_(0),
        "tokensieve": lambda: ts.apply_token_bitmask_inplace(logits, bitmask),
        "ts-previous": lambda: prev(logits, bitmask),
        "torch": lambda: torch_unpack_masked_fill(logits, bitmask),
    }
    if xgr is not None:
        for backend in ["cuda", "triton"]:
            m[f"xgr-{backend}"] = lambda b=backend: xgr.apply_token_bitmask_inplace(
                logits, bitmask, backend=b
            )
    return m


def dry_run() -> int:
    """Every method once on tiny CPU tensors (triton interpreted): the script's own check."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("--dry-run needs TRITON_INTERPRET=1 in the environment", file=sys.stderr)
        return 2
    prev = previous_kernel()
    for dtype in DTYPES:
        logits, bitmask = make(3, 5000, dtype, 0.5, "cpu")
        want = logits.clone()
        torch_unpack_masked_fill(want, bitmask)
        for name in ["tokensieve", "ts-previous", "torch"]:
            got = logits.clone()
            if name == "tokensieve":
                ts.apply_token_bitmask_inplace(got, bitmask, backend="triton")
            else:
                methods(got, bitmask, prev)[name]()
            assert torch.equal(got, want), (name, dtype)
    print("dry run: every method agrees with plain torch on CPU (interpreted triton)")
    return 0


def host_row(batch: int) -> dict[str, Any]:
    """Host µs per call at `batch` rows (bf16, 128,256 columns, 1% allowed)."""
    logits, bitmask = make(batch, 128256, "bfloat16", 0.01, "cuda")
    idx_list = list(range(batch))
    idx_dev = torch.arange(batch, device="cuda", dtype=torch.int32)
    apply = ts.apply_token_bitmask_inplace
    h: dict[str, Any] = {"batch": batch}
    h["no indices"] = host_us(lambda: apply(logits, bitmask), 500)
    h["indices list"] = host_us(lambda: apply(logits, bitmask, indices=idx_list), 500)
    h["indices cuda"] = host_us(lambda: apply(logits, bitmask, indices=idx_dev), 500)
    # where the time goes: the argument checks alone, and the bare triton launch of the same
    # kernel with the same arguments (no checks, no wrapper)
    from tokensieve import kernels as tk

    h["checks only"] = host_us(
        lambda: tk._validate(torch, logits, bitmask, None, None, "auto"), 500
    )
    kernel = tk._triton_kernel()
    words = tk._TRITON_WORDS_PER_BLOCK
    grid = (batch, (128256 + 32 * words - 1) // (32 * words))
    stride = bitmask.stride(0)

    def bare() -> None:
        kernel[grid](
            logits, bitmask, bitmask, 128256, 128256, 128256, stride, HAS_INDICES=False, WORDS=words
        )

    h["bare launch"] = host_us(bare, 500)
    if xgr is not None and "xgr-cuda" not in BROKEN:
        h["xgr-cuda no indices"] = host_us(
            lambda: xgr.apply_token_bitmask_inplace(logits, bitmask, backend="cuda"), 500
        )
    return h


def device_row(cols: int, dtype: str, batch: int, p: float, prev: Any) -> dict[str, Any]:
    """Device µs per call of every method on one shape."""
    logits, bitmask = make(batch, cols, dtype, p, "cuda")
    calls = max(20, min(2000, 200_000 // batch))
    row: dict[str, Any] = {"cols": cols, "dtype": dtype, "batch": batch, "allowed": p}
    for name, fn in methods(logits, bitmask, prev).items():
        if name in BROKEN:
            row[name] = float("nan")
            continue
        try:
            fn()
        except Exception as e:  # a peer's kernel that does not build or run here
            if not name.startswith("xgr"):
                raise
            BROKEN[name] = f"{type(e).__name__}: {e}"[:300]
            print(f"{name} dropped: {BROKEN[name]}", file=sys.stderr)
            row[name] = float("nan")
            continue
        row[name] = device_us(fn, calls)
    row["tokensieve / fill"] = row["tokensieve"] / row["fill"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="128,256 columns, fewer sizes")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument(
        "--render",
        action="store_true",
        help="rewrite kernels_gpu.md from kernels_gpu.json (no GPU needed; measures nothing)",
    )
    args = ap.parse_args()
    if args.dry_run:
        return dry_run()
    if args.render:
        print(write_tables(json.loads((RESULTS_DIR / "kernels_gpu.json").read_text())))
        return 0
    if torch is None or not torch.cuda.is_available():
        print("bench_kernels_gpu: no CUDA GPU here; nothing measured", file=sys.stderr)
        return 2
    prev = previous_kernel()
    cols_list = COLS[:1] if args.quick else COLS
    batches = [1, 64, 1024] if args.quick else BATCHES
    rows: list[dict[str, Any]] = []
    for cols in cols_list:
        for dtype in DTYPES:
            for batch in batches:
                for p in DENSITIES:
                    row = device_row(cols, dtype, batch, p, prev)
                    rows.append(row)
                    print(
                        f"{cols} {dtype:9} batch={batch:5} allowed={p:4.0%} "
                        + "  ".join(f"{k}={v:.1f}" for k, v in row.items() if isinstance(v, float))
                    )
    host = [host_row(batch) for batch in [1, 64]]
    for h in host:
        print("host µs/call", h)
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "command": "python benches/bench_kernels_gpu.py" + (" --quick" if args.quick else ""),
        "machine": common.machine_info(["torch", "triton", "xgrammar", "tokensieve"]),
        "peer kernels that failed here": BROKEN,
    }
    result = {"meta": meta, "device": rows, "host": host}
    (RESULTS_DIR / "kernels_gpu.json").write_text(json.dumps(result, indent=1))
    print(write_tables(result))
    return 0


def write_tables(result: dict[str, Any]) -> str:
    """Write ``kernels_gpu.md`` from a run's results; return the device table as text."""
    meta, rows, host = result["meta"], result["device"], result["host"]
    names = [k for k in rows[0] if k not in ("cols", "dtype", "batch", "allowed")]
    table = [
        [str(r["cols"]), r["dtype"], str(r["batch"]), f"{r['allowed']:.0%}"]
        + [num(r[k]) for k in names]
        for r in rows
    ]
    head = ["cols", "dtype", "batch", "allowed"] + [f"{k} µs" if "/" not in k else k for k in names]
    hnames = list(dict.fromkeys(k for h in host for k in h if k != "batch"))
    htable = [[str(h["batch"])] + [num(h.get(k)) for k in hnames] for h in host]
    command = meta.get("command", "python benches/bench_kernels_gpu.py")
    md = (
        f"# Applying a token bitmask on {meta['gpu']}\n\n"
        "Device time per call (CUDA events over back-to-back calls, best of 5 samples), µs; "
        "`fill` is `logits.fill_(0)` on the same tensor (the floor). Generated by "
        f"`{command}`.\n\n"
        + md_table(head, table)
        + "\n\nHost time per call (no synchronization), µs, bf16, 128,256 columns, 1% allowed:\n\n"
        + md_table(["batch"] + hnames, htable)
        + f"\n\nMachine: {json.dumps(meta)}\n"
    )
    (RESULTS_DIR / "kernels_gpu.md").write_text(md)
    return text_table(head, table)


if __name__ == "__main__":
    sys.exit(main())
