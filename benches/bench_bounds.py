"""Length bounds: time to first mask and the masks along a value, every engine in one run.

Strings under ``maxLength`` alone (10 … 2^31 - 1), a Snowplow-style object of four nullable
strings with ``maxLength`` 1,024 - 8,192, and formats (``uri``, ``email``, ``hostname``,
``date-time``) under ``maxLength`` 255 - 65,535. For each case and engine, in the engine's own
worker process (vocabulary loaded and a warm-up schema compiled first): ``--rounds`` times,
compile + matcher + first mask, timed together (time to first mask: the first round, as a
server seeing the schema for the first time, and the median of the rounds, which an engine's
own compile cache may serve);
then, once, a valid value is fed token by token (Llama 3 tokens of its JSON text) and every
mask fill along it is timed (p50 and max reported; the first round's grammar, so these are the
masks' first visits).

    python benches/bench_bounds.py [--rounds 11] [--engines tokensieve,llguidance,xgrammar]
        [--out benches/results]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engines as engine_adapters  # noqa: E402
from bench_first_mask import progress, run_engines, start_workers  # noqa: E402
from common import RESULTS_DIR, SHARED_TOKENIZERS, machine_info, md_table, num  # noqa: E402
from engines import LLG, TS, XGR, CompileError  # noqa: E402

URL = "https://example.com/" + "/".join(f"section{i}/item-{i * 7}" for i in range(12)) + "?q=1"
TEXT = " ".join(["The quick brown fox jumps over the lazy dog."] * 24)


def cases() -> list[tuple[str, Any, Any]]:
    """(name, schema, a valid value) per case."""
    out: list[tuple[str, Any, Any]] = []
    for n in [10, 1000, 65535, 2**31 - 1]:
        value = TEXT[: min(n, len(TEXT))]
        out.append((f"string maxLength {n}", {"type": "string", "maxLength": n}, value))
    props = {
        f"s{i}": {"type": ["string", "null"], "maxLength": n}
        for i, n in enumerate([1024, 2048, 4096, 8192])
    }
    out.append(
        (
            "object of 4 strings, maxLength 1,024-8,192",
            {"type": "object", "properties": props, "additionalProperties": False},
            {"s0": TEXT[:500], "s1": None, "s2": "short", "s3": TEXT},
        )
    )
    samples = {
        "uri": URL,
        "email": "first.last+tag@mail.example.com",
        "hostname": "api.eu-west-1.service.example.com",
        "date-time": "2026-11-26T03:30:00.123+01:00",
    }
    for fmt, value in samples.items():
        for n in [255, 2048, 65535]:
            out.append(
                (
                    f"format {fmt}, maxLength {n}",
                    {"type": "string", "format": fmt, "maxLength": n},
                    value,
                )
            )
    return out


def worker_job(eng: Any, job: dict[str, Any]) -> dict[str, Any]:
    """In the worker: `rounds` times to first mask, then the masks along the value's tokens."""
    ttfm: list[float] = []  # first round first
    first = None
    try:
        for _ in range(job["rounds"]):
            t0 = time.perf_counter_ns()
            m = eng.first_matcher(eng.compile_json_schema(job["schema"]))
            eng.fill(m)
            ttfm.append((time.perf_counter_ns() - t0) / 1e6)
            if first is None:
                first = m
    except CompileError as e:
        return {"ok": False, "error": str(e)[:200]}
    except Exception as e:  # noqa: BLE001 - any other failure to compile: unsupported
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:200]}
    masks: list[float] = []
    walked = True
    for tok in job["tokens"]:
        if not eng.allowed(tok) or not eng.advance(first, tok):
            walked = False
            break
        t0 = time.perf_counter_ns()
        eng.fill(first)
        masks.append((time.perf_counter_ns() - t0) / 1e3)
    walked = walked and eng.allowed(eng.eos)
    return {
        "ok": True,
        "ttfm_ms": ttfm[0],
        "ttfm_median_ms": statistics.median(ttfm),
        "masks_us": masks,
        "walked": walked,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=str(SHARED_TOKENIZERS / "llama3"))
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--engines", default=",".join([TS, LLG, XGR]))
    ap.add_argument("--timeout", type=float, default=120.0, help="per case and engine, seconds")
    ap.add_argument("--out", default=str(RESULTS_DIR))
    args = ap.parse_args()
    if not Path(args.tokenizer).exists():
        print(f"skipped: needs {args.tokenizer} (the shared data folder)")
        return 0
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    workers = start_workers(engines, args.tokenizer, worker_job)
    rows: list[dict[str, Any]] = []
    try:
        for name, schema, value in cases():
            ids = tok.encode(json.dumps(value, ensure_ascii=False), add_special_tokens=False).ids
            row: dict[str, Any] = {"case": name, "schema": schema, "tokens": len(ids)}
            job = {"schema": schema, "rounds": args.rounds, "tokens": ids}
            row.update(run_engines(workers, job, args.timeout))
            rows.append(row)
            progress(name, row, workers)
    finally:
        for w in workers.values():
            w.stop()

    def cell(r: dict[str, Any]) -> list[str]:
        if not r["ok"]:
            return ["error", "", ""]
        ms = sorted(r["masks_us"])
        walk = f"{num(statistics.median(ms))} / {num(ms[-1])}" if ms else "-"
        ttfm = f"{num(r['ttfm_ms'])} ({num(r['ttfm_median_ms'])})"
        return [ttfm, walk, "yes" if r["walked"] else "no"]

    head = ["case"]
    for e in workers:
        head += [f"{e} TTFM ms first (median)", f"{e} masks p50 / max µs", f"{e} accepted"]
    table = [[r["case"]] + sum((cell(r[e]) for e in workers), []) for r in rows]
    ts_rows = [r for r in rows if r.get(TS, {}).get("ok") and r["case"].startswith("string max")]
    base = ts_rows[0][TS]["ttfm_median_ms"] if ts_rows else None
    info = machine_info([engine_adapters.package(e) for e in workers])
    lines = [
        "# Length bounds (time to first mask; masks along a valid value)",
        "",
        f"`python benches/bench_bounds.py --rounds {args.rounds}`; {json.dumps(info)}.",
        "TTFM: the first round and the median of the rounds (compile + matcher + first mask, a",
        "fresh compile each round); masks: every fill along the value's tokens, first visits;",
        "accepted: every token of the value allowed and EOS after it.",
        "",
        md_table(head, table),
    ]
    if base:
        lines += [
            "",
            "tokensieve, `maxLength` alone, median TTFM relative to N = 10: "
            + ", ".join(
                f"{r['case'].split()[-1]}: {r[TS]['ttfm_median_ms'] / base:.2f}" for r in ts_rows
            ),
        ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bounds_llama3.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "bounds_llama3.json").write_text(
        json.dumps({"rounds": args.rounds, "rows": rows}, indent=1), encoding="utf-8"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
