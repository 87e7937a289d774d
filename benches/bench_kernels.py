"""CPU time to apply a packed token bitmask to fp32 logits, beside the memory-bound floor.

For batch 1 / 8 / 32 × vocab 128256 (Llama 3) at 1 %, 50 % and 99 % of tokens allowed (each token
independently; 50 % is the adversarial case: every word is a partial word), times per call:

* ``tokensieve``  — ``tokensieve.apply_token_bitmask_inplace`` (public API; Rust kernel),
* ``torch``       — plain torch: unpack the words with shifts, ``masked_fill_``,
* ``xgrammar``    — ``xgrammar.apply_token_bitmask_inplace`` on CPU tensors, if installed,
* ``floor``       — ``logits.fill_(0.0)``: writing the same logits with a constant.

Each sample times many back-to-back calls on the same tensors (warm caches); samples of the
methods alternate. The table shows the best sample (least disturbed by other processes on a
shared machine) and the median, and ratios of best times to the floor's best. Results go to
``benches/results/kernels_cpu.{md,json}``.

    python benches/bench_kernels.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import md_table, num, text_table  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

import tokensieve as ts  # noqa: E402

try:
    import xgrammar as xgr
except Exception:  # pragma: no cover - optional
    xgr = None

VOCAB = 128256
BATCHES = [1, 8, 32]
DENSITIES = [0.01, 0.5, 0.99]
TARGET = {1: 6.0}  # ratio to the floor; 3.0 for larger batches


def target(batch: int) -> float:
    return TARGET.get(batch, 3.0)


def random_bitmask(batch: int, vocab: int, p: float, seed: int) -> Any:
    gen = torch.Generator().manual_seed(seed)
    words = (vocab + 31) // 32
    allowed = torch.rand(batch, words * 32, generator=gen) < p
    allowed[:, vocab:] = False
    packed = (allowed.view(batch, words, 32).to(torch.int64) << torch.arange(32)).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def torch_unpack_masked_fill(logits: Any, bitmask: Any) -> None:
    batch, vocab = logits.shape
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().view(batch, -1)[:, :vocab]
    logits.masked_fill_(~allowed, float("-inf"))


def calibrate(fn: Callable[[], Any], min_sample_s: float) -> int:
    """Calls per sample so that one sample lasts about ``min_sample_s``."""
    fn()
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_sample_s or n >= 1 << 16:
            return n
        n = max(n * 2, int(n * min_sample_s / max(dt, 1e-9)))


def time_interleaved(
    fns: dict[str, Callable[[], Any]], min_sample_s: float, samples: int
) -> dict[str, dict[str, float]]:
    """Per-call µs of each function; samples of the functions alternate, so that a burst of load
    from other processes hits all of them alike. Best and median over the samples."""
    calls = {name: calibrate(fn, min_sample_s) for name, fn in fns.items()}
    per_call: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(samples):
        for name, fn in fns.items():
            n = calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            per_call[name].append((time.perf_counter() - t0) / n * 1e6)
    return {
        name: {
            "min_us": min(v),
            "median_us": statistics.median(v),
            "calls_per_sample": calls[name],
        }
        for name, v in per_call.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    ap.add_argument("--samples", type=int, default=None, help="samples per method (default 41)")
    ap.add_argument("--out-dir", default=str(common.RESULTS_DIR))
    args = ap.parse_args()
    if torch is None:
        print("error: torch is not installed (pip install tokensieve[torch])", file=sys.stderr)
        return 1
    min_sample_s, samples = (0.01, 7) if args.quick else (0.01, 41)
    if args.samples:
        samples = args.samples

    methods: dict[str, Callable[[Any, Any], Any]] = {
        "tokensieve": lambda x, m: ts.apply_token_bitmask_inplace(x, m),
        "torch": torch_unpack_masked_fill,
    }
    if xgr is not None:
        methods["xgrammar"] = lambda x, m: xgr.apply_token_bitmask_inplace(x, m, backend="cpu")
    methods["floor"] = lambda x, m: x.fill_(0.0)

    info = common.machine_info(["tokensieve", "torch", "xgrammar"])
    info["torch_threads"] = torch.get_num_threads()
    results: list[dict[str, Any]] = []
    for batch in BATCHES:
        for p in DENSITIES:
            bitmask = random_bitmask(batch, VOCAB, p, seed=batch * 1000 + int(p * 100))
            logits = torch.randn(batch, VOCAB, generator=torch.Generator().manual_seed(batch))
            # correctness first: every method agrees with plain torch
            want = logits.clone()
            torch_unpack_masked_fill(want, bitmask)
            for name, fn in methods.items():
                if name in ("floor", "torch"):
                    continue
                got = logits.clone()
                fn(got, bitmask)
                assert torch.equal(got, want), f"{name} disagrees at batch={batch} p={p}"
            row: dict[str, Any] = {"batch": batch, "vocab": VOCAB, "allowed": p, "times": {}}
            copies = {name: logits.clone() for name in methods}
            calls = {
                name: (lambda fn=fn, x=copies[name], m=bitmask: fn(x, m))
                for name, fn in methods.items()
            }
            row["times"] = time_interleaved(calls, min_sample_s, samples)
            results.append(row)
            floor = row["times"]["floor"]["min_us"]
            line = "  ".join(
                f"{k}={v['min_us']:.1f}us ({v['min_us'] / floor:.2f}x)"
                for k, v in row["times"].items()
            )
            print(f"batch={batch:2d} allowed={p:4.0%}  {line}", flush=True)

    names = list(methods)
    header = ["batch", "allowed", *(f"{n} µs" for n in names)]
    header += [f"{n} / floor" for n in names if n != "floor"] + ["target", "ok"]
    header += [f"{n} median µs" for n in names]
    rows = []
    for r in results:
        t = r["times"]
        floor = t["floor"]["min_us"]
        ratio = t["tokensieve"]["min_us"] / floor
        rows.append(
            [
                str(r["batch"]),
                f"{r['allowed']:.0%}",
                *(num(t[n]["min_us"]) for n in names),
                *(num(t[n]["min_us"] / floor) for n in names if n != "floor"),
                f"≤{target(r['batch']):g}×",
                "yes" if ratio <= target(r["batch"]) else "NO",
                *(num(t[n]["median_us"]) for n in names),
            ]
        )
    print()
    print(text_table(header, rows))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = [
        "# Applying a token bitmask to fp32 logits on the CPU",
        "",
        f"Vocab {VOCAB}; µs per call, best of {samples} samples of back-to-back calls (medians "
        "in the last columns); ratios of best times to `floor` = `logits.fill_(0.0)` on the same "
        "tensor (the memory-bound floor). "
        "`tokensieve` is the public `apply_token_bitmask_inplace` (Rust kernel, rows in parallel); "
        "`torch` unpacks the words with shifts and calls `masked_fill_`; `xgrammar` is "
        "`xgrammar.apply_token_bitmask_inplace(..., backend='cpu')`. Target: tokensieve within "
        "6× of the floor at batch 1, 3× at batch ≥ 8.",
        "",
        md_table(header, rows),
        "",
        f"Machine: {info['cpu']}, {info['usable_cores']} usable cores, torch threads "
        f"{info['torch_threads']}, load average at start {info['load_avg_1_5_15min_at_start']}; "
        f"packages {info['packages']}; git {info['git']}; {info['date']}.",
        "",
    ]
    (out_dir / "kernels_cpu.md").write_text("\n".join(md), encoding="utf-8")
    (out_dir / "kernels_cpu.json").write_text(
        json.dumps({"machine": info, "results": results}, indent=2) + "\n", encoding="utf-8"
    )
    print(f"\nwrote {out_dir / 'kernels_cpu.md'} and {out_dir / 'kernels_cpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
