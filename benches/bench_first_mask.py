"""Time to first mask on the largest dev schemas, every engine in one run.

For the N largest schemas of the JSONSchemaBench dev split that tokensieve compiles (the same
selection as ``bench_index.py``: size = length of the schema's JSON text), each engine compiles
the schema, makes a matcher and fills its first mask; the time of those three steps is the time
to first mask (as in ``maskbench.py``). Each engine runs in its own persistent worker process,
which loads the vocabulary and compiles a small warm-up schema before any measurement; schemas
are measured once each, in order, like a server seeing each schema for the first time.

``--ids-from FILE`` measures the schemas of an earlier run (the selection depends on what the
build at hand compiles). ``--before FILE`` adds the tokensieve column of an earlier run's JSON (e.g. one made with an
older build: ``PYTHONPATH=old/python python benches/bench_first_mask.py --engines tokensieve
--out /tmp/old``) so a change can be reported as before/after.

    python benches/bench_first_mask.py [--count 50] [--engines tokensieve,llguidance,xgrammar]
        [--before old.json] [--out benches/results]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engines as engine_adapters  # noqa: E402
from bench_index import DEV, iter_dev_schemas, select  # noqa: E402
from common import (  # noqa: E402
    RESULTS_DIR,
    SHARED_TOKENIZERS,
    WARMUP_SCHEMA,
    TokenizerInfo,
    geomean,
    machine_info,
    md_table,
    num,
    percentile,
)
from engines import LLG, TS, XGR, CompileError  # noqa: E402
from isolate import Worker  # noqa: E402


def worker_setup(engine: str, tokenizer: str) -> tuple[Any, dict[str, Any]]:
    """In the worker: the engine with its vocabulary, warmed up outside every measurement."""
    eng = engine_adapters.load(engine, TokenizerInfo(tokenizer))
    m = eng.matcher(eng.compile_json_schema(WARMUP_SCHEMA))
    eng.fill(m)
    # the engine's package is loaded by now; which build it is, for runs of older builds
    mod = importlib.import_module(engine_adapters.package(engine))
    return eng, {
        "version": getattr(mod, "__version__", "?"),
        "module": getattr(mod, "__file__", "?"),
    }


def worker_job(eng: Any, job: dict[str, Any]) -> dict[str, Any]:
    """In the worker: compile, matcher, first mask; the time of the three."""
    t0 = time.perf_counter_ns()
    try:
        m = eng.matcher(eng.compile_json_schema(job["schema"]))
        eng.fill(m)
    except CompileError as e:
        return {"ok": False, "error": str(e)[:200]}
    except Exception as e:  # noqa: BLE001 - any other failure to compile: unsupported
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:200]}
    return {"ok": True, "ttfm_ms": (time.perf_counter_ns() - t0) / 1e6}


def start_workers(engines: list[str], tokenizer: str, job: Any) -> dict[str, Worker]:
    """One persistent worker per installed engine, set up by :func:`worker_setup`, running
    ``job``."""
    return {
        e: Worker(worker_setup, job, (e, tokenizer), name=f"{e} worker")
        for e in engines
        if engine_adapters.available(e)
    }


def run_engines(workers: dict[str, Worker], job: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``job`` in every worker; a timeout or a dead worker counts as a failure."""
    out: dict[str, Any] = {}
    for e, w in workers.items():
        res = w.run(job, timeout=timeout)
        if res.get("timeout") or res.get("died"):
            res = {"ok": False, "error": res.get("error", "timeout")}
        out[e] = res
    return out


def progress(label: str, row: dict[str, Any], workers: dict[str, Worker]) -> None:
    """One line per row: each engine's time to first mask, or ``error``."""
    cells = (f"{e}={num(row[e]['ttfm_ms']) + ' ms' if row[e]['ok'] else 'error'}" for e in workers)
    print(f"{label}: " + " ".join(cells), flush=True)


def summary(times: list[float]) -> dict[str, Any]:
    return {
        "n": len(times),
        "p50": percentile(times, 50),
        "p90": percentile(times, 90),
        "p99": percentile(times, 99),
        "max": max(times) if times else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=str(SHARED_TOKENIZERS / "llama3"))
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--engines", default=",".join([TS, LLG, XGR]))
    ap.add_argument("--timeout", type=float, default=60.0, help="per schema and engine, seconds")
    ap.add_argument("--before", default=None, help="an earlier run's JSON (its tokensieve times)")
    ap.add_argument(
        "--ids-from",
        default=None,
        help="measure the schemas of an earlier run's JSON instead of selecting them again",
    )
    ap.add_argument("--out", default=str(RESULTS_DIR))
    args = ap.parse_args()
    if not DEV.is_file() or not Path(args.tokenizer).exists():
        print(f"skipped: needs {DEV} and {args.tokenizer} (the shared data folder)")
        return 0
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.ids_from:
        ids = [r["id"] for r in json.loads(Path(args.ids_from).read_text())["rows"]]
        by_id = dict(iter_dev_schemas())
        schemas = [(i, by_id[i]) for i in ids]
    else:
        schemas = select(args.tokenizer, args.count)
    print(f"{len(schemas)} schemas selected")
    workers = start_workers(engines, args.tokenizer, worker_job)
    rows: list[dict[str, Any]] = []
    infos: dict[str, Any] = {}
    try:
        for i, (sid, schema) in enumerate(schemas, 1):
            row: dict[str, Any] = {"id": sid, "chars": len(json.dumps(schema))}
            row.update(run_engines(workers, {"schema": schema}, args.timeout))
            infos.update({e: w.ready_info for e, w in workers.items()})
            rows.append(row)
            progress(f"[{i}/{len(schemas)}] {sid}", row, workers)
    finally:
        for w in workers.values():
            w.stop()
    before: dict[str, float] = {}
    if args.before:
        old = json.loads(Path(args.before).read_text())
        before = {r["id"]: r[TS]["ttfm_ms"] for r in old["rows"] if r.get(TS, {}).get("ok")}
    report = {
        "args": vars(args),
        "machine": machine_info([engine_adapters.package(e) for e in workers]),
        "workers": infos,
        "rows": rows,
        "summary": {e: summary([r[e]["ttfm_ms"] for r in rows if r[e]["ok"]]) for e in workers},
    }
    if before:
        report["summary"]["tokensieve before"] = summary(
            [before[r["id"]] for r in rows if r["id"] in before]
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_mask_llama3.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "first_mask_llama3.md").write_text(render(report, engines, before))
    print((out / "first_mask_llama3.md").read_text())
    return 0


def render(rep: dict[str, Any], engines: list[str], before: dict[str, float]) -> str:
    engs = [e for e in engines if e in rep["summary"]]
    lines = [
        "# Time to first mask on the largest dev schemas — llama3",
        "",
        f"`python benches/bench_first_mask.py` ({rep['args']['count']} largest dev schemas "
        "that tokensieve compiles; compile + matcher + first mask, each schema once, in one "
        "persistent worker per engine; milliseconds).",
        "",
    ]
    cols = (["tokensieve before"] if before else []) + engs
    head = ["", *cols]
    body = []
    for k in ("n", "p50", "p90", "p99", "max"):
        body.append([k, *[num(rep["summary"][c][k]) for c in cols]])
    lines += [md_table(head, body), ""]
    if LLG in engs and TS in engs:
        ratios = [
            r[TS]["ttfm_ms"] / r[LLG]["ttfm_ms"]
            for r in rep["rows"]
            if r[TS]["ok"] and r[LLG]["ok"]
        ]
        if ratios:
            lines += [
                f"Per schema, tokensieve / llguidance ({len(ratios)} schemas both compile): "
                f"geomean {num(geomean(ratios))}, p50 {num(percentile(ratios, 50))}, "
                f"p90 {num(percentile(ratios, 90))}, max {num(max(ratios))}.",
                "",
            ]
    if before and TS in engs:
        ratios = [
            r[TS]["ttfm_ms"] / before[r["id"]]
            for r in rep["rows"]
            if r[TS]["ok"] and r["id"] in before
        ]
        if ratios:
            lines += [
                f"Per schema, after / before: geomean {num(geomean(ratios))}, "
                f"p50 {num(percentile(ratios, 50))}, max {num(max(ratios))}.",
                "",
            ]
    head = ["schema", "chars", *(["ts before"] if before else []), *engs]
    body = []
    for r in rep["rows"]:
        cells = [r["id"], str(r["chars"])]
        if before:
            cells.append(num(before.get(r["id"])))
        for e in engs:
            cells.append(num(r[e]["ttfm_ms"]) if r[e]["ok"] else "error")
        body.append(cells)
    lines += [md_table(head, body), ""]
    errors = [(r["id"], e, r[e]["error"]) for r in rep["rows"] for e in engs if not r[e]["ok"]]
    if errors:
        lines += ["Errors:", ""] + [f"- {sid} {e}: {msg}" for sid, e, msg in errors] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
