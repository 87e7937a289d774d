"""Step time of a running vLLM batch when a request with a slow constraint joins it.

A batch of unconstrained requests decodes in a real vLLM engine (CPU build, in-process, random
Llama with the Llama 3 tokenizer); at one step a request whose JSON Schema takes about 100 ms
to compile joins. The step that admits it pays for the compile unless the compile runs off the
step (``compile_in_background``, the default): then it overlaps the forward pass and the step
waits only for the rest. Admission-time validation is switched off here so that the engine
itself compiles (as it does when the server's front end validates against its own byte-level
vocabulary); each trial uses a schema not seen before.

Run with the vLLM venv of ``make test-vllm``::

    .venv-vllm/bin/python benches/bench_vllm_step.py     # writes benches/results/vllm_step.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine.step() in this process

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "vllm"))
from common import SHARED_TOKENIZERS  # noqa: E402
from tiny_model import build_tiny_llama, tiny_engine  # noqa: E402

import tokensieve as ts  # noqa: E402
from tokensieve.vllm import GuidedLogitsProcessor  # noqa: E402

SCHEMA_IDS = itertools.count(1)


class EngineCompiles(GuidedLogitsProcessor):
    """The processor without admission-time compiles (see the module docs)."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        return None


def slow_schema(i: int, max_length: int) -> dict[str, Any]:
    """A schema not compiled before: its bound differs too (equal sub-automata are shared
    process-wide, which would make a repeated bound cheap)."""
    return {
        "type": "object",
        "properties": {f"field{i}": {"type": "string", "maxLength": max_length + i}},
        "required": [f"field{i}"],
    }


def run(model: Path, batch: int, max_length: int, trials: int) -> dict[str, Any]:
    from vllm import SamplingParams

    llm = tiny_engine(model, [EngineCompiles], max_model_len=2048)
    engine = llm.llm_engine
    twin = EngineCompiles.for_v1_runner()
    vocab = ts.Vocabulary.from_pretrained(str(model / "tokenizer.json"), vocab_size=128256)
    t0 = time.perf_counter()
    ts.Grammar.from_json_schema(slow_schema(next(SCHEMA_IDS), max_length), vocab)
    compile_ms = (time.perf_counter() - t0) * 1e3
    out: dict[str, Any] = {"compile_ms": compile_ms, "modes": {}}
    for background in (True, False, True, False):
        twin.compile_in_background = background
        base: list[float] = []
        joins: list[float] = []
        for _ in range(trials):
            n = next(SCHEMA_IDS)  # unique across models too (the grammar cache is per process)
            ids = [f"bg{n}-{i}" for i in range(batch)]
            for i, rid in enumerate(ids):
                engine.add_request(
                    rid, "Hello", SamplingParams(max_tokens=64, ignore_eos=True, seed=i)
                )
            steps: list[float] = []
            for step in range(14):
                if step == 8:
                    engine.add_request(
                        f"slow{n}",
                        "Data:",
                        SamplingParams(
                            max_tokens=4, extra_args={"guided_json": slow_schema(n, max_length)}
                        ),
                    )
                t = time.perf_counter()
                engine.step()
                steps.append((time.perf_counter() - t) * 1e3)
            base.extend(steps[3:8])
            joins.append(max(steps[8:11]))
            engine.abort_request([*ids, f"slow{n}"])
            while engine.has_unfinished_requests():
                engine.step()
        mode = out["modes"].setdefault("background" if background else "in step", [[], []])
        mode[0].extend(base)
        mode[1].extend(joins)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument(
        "--max-length", type=int, default=9000, help="maxLength of the slow schema (about)"
    )
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument(
        "--omp-bind",
        help="VLLM_CPU_OMP_THREADS_BIND for the engine (e.g. 0: the forward pass on one core, "
        "leaving the other free as a GPU host's CPU is)",
    )
    ap.add_argument("--out", default=str(HERE / "results" / "vllm_step.md"))
    args = ap.parse_args()
    if args.omp_bind is not None:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = args.omp_bind
    rows = []
    for hidden, layers in ((128, 2), (1024, 8)):
        with tempfile.TemporaryDirectory() as tmp:
            model = build_tiny_llama(Path(tmp), SHARED_TOKENIZERS / "llama3", hidden, layers)
            res = run(model, args.batch, args.max_length, args.trials)
        for mode, (base, joins) in res["modes"].items():
            rows.append(
                {
                    "model": f"hidden {hidden}, {layers} layers",
                    "mode": mode,
                    "compile_ms": res["compile_ms"],
                    "step_ms": statistics.median(base),
                    "join_ms": statistics.median(joins),
                    "join_max_ms": max(joins),
                }
            )
        print(json.dumps(rows[-2:]), flush=True)
    lines = [
        "# vLLM step time when a slow constraint joins a running batch",
        "",
        f"Generated by `benches/bench_vllm_step.py` (batch of {args.batch} unconstrained "
        f"requests; a request whose schema (a string, `maxLength` about {args.max_length}) compiles in the "
        f"engine joins at one step; {2 * args.trials} joins per mode, alternating; "
        f"VLLM_CPU_OMP_THREADS_BIND={os.environ.get('VLLM_CPU_OMP_THREADS_BIND', 'auto')}). "
        "Times in ms; `compile` is the schema's compile and first mask outside the engine.",
        "",
        "| model | compile | mode | step (median, before) | join step (median) | join step (max) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['compile_ms']:.0f} | {r['mode']} | {r['step_ms']:.1f} | "
            f"{r['join_ms']:.1f} | {r['join_max_ms']:.1f} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
