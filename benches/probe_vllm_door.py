"""What vLLM's API process spends on each new structured request at the door, per backend.

The cold set of ``bench_vllm_burst.py`` (24 dev-set schemas and 8 heavy ones), each pass with a
new root ``description`` so that nothing is cached, in one quiet process (no engine):

* tokensieve: the door's steps as ``tokensieve.vllm.plugin`` runs them, timed apart: the
  ``SamplingParams``, reading the request (``read_request``: the checked copy), the constraint's
  key (the core's source hash), starting the compile, waiting for it, the first mask on the
  admission vocabulary;
* guidance: vLLM's own check for its llguidance backend (``validate_guidance_grammar``);
* xgrammar: vLLM's own check for its xgrammar backend (``validate_xgrammar_grammar``).

Milliseconds per pass over the 32 schemas (the median of the passes), and the slowest schemas.
In a server these run on the event loop (or vLLM's renderer thread) between the requests of a
burst, so their sum paces how fast a burst reaches the engine.

Run with the vLLM venv::

    $HOME/.cache/tokensieve/venv-vllm/bin/python benches/probe_vllm_door.py [--passes 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_vllm_burst as burst  # noqa: E402

STEPS = ("params", "read", "key", "start compile", "compile", "first mask")


def tokensieve_pass(rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    import numpy as np
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    import tokensieve as ts
    from tokensieve.vllm.processor_base import GuidedProcessorBase
    from tokensieve.vllm.structured import read_request

    vocab = GuidedProcessorBase.admission_vocabulary()
    parts: dict[str, float] = {}
    per: dict[str, float] = {}
    for r in rows:
        t0 = time.perf_counter()
        steps = [t0]
        try:
            params = SamplingParams(
                max_tokens=8, structured_outputs=StructuredOutputsParams(json=r["schema"])
            )
            steps.append(time.perf_counter())
            c = read_request(params).constraint
            steps.append(time.perf_counter())
            _ = c.key
            steps.append(time.perf_counter())
            pending = c.compile_pending(vocab)
            steps.append(time.perf_counter())
            grammar = pending.result()
            steps.append(time.perf_counter())
            row = np.zeros((1, ts.bitmask_words(vocab.vocab_size)), dtype=np.int32)
            grammar.matcher().fill_next_token_bitmask(row)
        except Exception:  # refused: what it cost counts all the same
            pass
        steps.append(time.perf_counter())
        for name, t_start, t_end in zip(STEPS, steps, steps[1:]):
            parts[name] = parts.get(name, 0.0) + t_end - t_start
        per[r["id"]] = time.perf_counter() - t0
    return parts, per


def vllm_check_pass(rows: list[dict[str, Any]], backend: str) -> tuple[dict[str, float], dict]:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    check = burst.vllm_door_check(backend)
    per: dict[str, float] = {}
    for r in rows:
        t0 = time.perf_counter()
        params = SamplingParams(
            max_tokens=8, structured_outputs=StructuredOutputsParams(json=r["schema"])
        )
        try:
            check(params)
        except Exception:
            pass
        per[r["id"]] = time.perf_counter() - t0
    return {"check": sum(per.values())}, per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=20)
    args = ap.parse_args()
    cold = burst.load_sets()["cold"]
    for backend in ("tokensieve", "guidance", "xgrammar"):
        totals: list[float] = []
        parts: dict[str, list[float]] = {}
        per: dict[str, list[float]] = {}
        for k in range(args.passes + 1):
            rows = burst.salted(cold, 1000 + k)
            if backend == "tokensieve":
                p, each = tokensieve_pass(rows)
            else:
                p, each = vllm_check_pass(rows, backend)
            if k == 0:
                continue  # the process's first pass: imports and first-use costs
            totals.append(sum(each.values()))
            for name, v in p.items():
                parts.setdefault(name, []).append(v)
            for i, v in each.items():
                per.setdefault(i, []).append(v)
        med = {n: statistics.median(v) * 1e3 for n, v in parts.items()}
        print(
            f"{backend}: {statistics.median(totals) * 1e3:.1f} ms per pass of {len(cold)} "
            f"(median of {args.passes}); " + ", ".join(f"{n} {v:.2f}" for n, v in med.items())
        )
        slowest = sorted(per.items(), key=lambda kv: -statistics.median(kv[1]))[:4]
        print(
            "  slowest: " + ", ".join(f"{i} {statistics.median(v) * 1e3:.2f}" for i, v in slowest),
            flush=True,
        )


if __name__ == "__main__":
    main()
