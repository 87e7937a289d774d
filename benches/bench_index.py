"""Ahead-of-time index benchmark: eager compile, peak memory, file size and load time.

For the N largest schemas of the JSONSchemaBench dev split that tokensieve compiles (size =
length of the schema's JSON text), each engine builds its full token index in a fresh process:

* tokensieve: ``Grammar.from_json_schema(schema, vocab).precompute()``, then ``save`` and
  ``Grammar.load`` of the file (load time is the median of 5 loads in the same process);
* outlines-core: ``build_regex_from_schema`` + ``Index(regex, vocabulary)`` with a timeout;
* tokensieve on outlines-core's regex (``Grammar.from_regex(regex).precompute()``): the same
  language as outlines-core, so the build times compare like for like. tokensieve's own schema
  language is larger (extra properties allowed by default, every JSON escape spelling), so its
  own compile is reported separately.

Peak memory is the growth of the worker's peak RSS (VmHWM) over its RSS after loading the
vocabulary. Ratios are taken over the schemas both engines finish; outlines-core timeouts and
unsupported schemas are counted separately.

A worker gets ``--timeout`` seconds for its build plus 30 s for process start and vocabulary
load; a build is reported with its own measured time, which can therefore exceed ``--timeout``.

    python benches/bench_index.py [--count 50] [--timeout 60] [--tokenizer PATH] [--quick]
    python benches/bench_index.py --render   # rewrite the .md from the saved .json
    python benches/bench_index.py --rerun-errors   # run again the builds that failed (not
                                                   # timeouts), e.g. after a fix; noted in the .md
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engines as engine_adapters  # noqa: E402
from common import (  # noqa: E402
    RESULTS_DIR,
    SHARED_DATA,
    SHARED_TOKENIZERS,
    TokenizerInfo,
    geomean,
    machine_info,
    md_table,
    num,
    proc_status,
    reset_peak_rss,
    text_table,
    trim_heap,
)
from engines import OC, TS, CompileError  # noqa: E402
from isolate import run_isolated  # noqa: E402

DEV = SHARED_DATA / "jsonschemabench-dev.jsonl.gz"
RESULTS = RESULTS_DIR


def _rss_base() -> int:
    trim_heap()
    reset_peak_rss()
    return proc_status().get("VmRSS", 0)


def _peak_mib(base: int) -> float:
    return (proc_status().get("VmHWM", 0) - base) / 1024.0


def aot_tokensieve(tokenizer: str) -> Any:
    """tokensieve with the budgets `tokensieve compile` uses for ahead-of-time builds."""
    from tokensieve.cli import AOT_MAX_COMPILE_SECONDS, AOT_MAX_NFA_BYTES, AOT_MAX_STATES

    return engine_adapters.load(
        TS,
        TokenizerInfo(tokenizer),
        max_states=AOT_MAX_STATES,
        max_nfa_bytes=AOT_MAX_NFA_BYTES,
        max_compile_seconds=AOT_MAX_COMPILE_SECONDS,
    )


def tokensieve_worker(tokenizer: str, schema: Any) -> dict[str, Any]:
    try:
        eng = aot_tokensieve(tokenizer)
        base = _rss_base()
        t0 = time.perf_counter()
        g = eng.compile_json_schema(schema)
        stats = g.precompute()
        compile_s = time.perf_counter() - t0
        peak = _peak_mib(base)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "g.tsidx"
            g.save(path)
            size = path.stat().st_size
            loads = []
            for _ in range(5):
                t = time.perf_counter()
                eng.ts.Grammar.load(path, eng.vocab)
                loads.append(time.perf_counter() - t)
        return {
            "ok": True,
            "compile_s": compile_s,
            "peak_mib": peak,
            "file_bytes": size,
            "load_s": statistics.median(loads),
            "states": stats["states"],
            "distinct_masks": stats["distinct_masks"],
            "dfa_states": stats["dfa_states"],
        }
    except CompileError as e:
        return {"ok": False, "error": str(e)[:300]}
    except Exception as e:  # noqa: BLE001 - reported as the engine's error
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}


def tokensieve_regex_worker(tokenizer: str, schema: Any) -> dict[str, Any]:
    """tokensieve's eager build of outlines-core's regex for the schema: the same language."""
    try:
        from outlines_core.json_schema import build_regex_from_schema

        regex = build_regex_from_schema(json.dumps(schema))
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"outlines-core has no regex: {type(e).__name__}: {e}"[:300]}
    try:
        eng = aot_tokensieve(tokenizer)
        base = _rss_base()
        t0 = time.perf_counter()
        eng.compile_regex(regex).precompute()
        return {"ok": True, "compile_s": time.perf_counter() - t0, "peak_mib": _peak_mib(base)}
    except CompileError as e:
        return {"ok": False, "error": str(e)[:300]}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}


def outlines_worker(tokenizer: str, schema: Any) -> dict[str, Any]:
    try:
        eng = engine_adapters.load(OC, TokenizerInfo(tokenizer))
        base = _rss_base()
        t0 = time.perf_counter()
        eng.compile_json_schema(schema)  # build_regex_from_schema + Index
        return {"ok": True, "compile_s": time.perf_counter() - t0, "peak_mib": _peak_mib(base)}
    except CompileError as e:
        return {"ok": False, "error": str(e)[:300]}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}


def run(target: Any, args: tuple[Any, ...], timeout: float) -> dict[str, Any]:
    # + 30 s for process start and vocabulary load
    res = run_isolated(target, args, timeout=timeout + 30)
    if res.get("timeout"):
        return {"ok": False, "timeout": True, "error": f"timeout after {timeout:.0f} s"}
    res.setdefault("ok", False)
    return res


def iter_dev_schemas() -> Any:
    with gzip.open(DEV, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            yield d["id"], d["schema"]


def select(tokenizer: str, count: int) -> list[tuple[str, Any]]:
    """The `count` largest dev schemas that tokensieve compiles (compile only, no index)."""
    rows = [(len(json.dumps(schema)), sid, schema) for sid, schema in iter_dev_schemas()]
    rows.sort(key=lambda r: -r[0])
    eng = engine_adapters.load(TS, TokenizerInfo(tokenizer), max_compile_seconds=20)
    out = []
    for _, sid, schema in rows:
        try:
            eng.compile_json_schema(schema)
        except (CompileError, ValueError):
            continue
        out.append((sid, schema))
        if len(out) == count:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=str(SHARED_TOKENIZERS / "llama3"))
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=60.0, help="per schema and engine, seconds")
    ap.add_argument("--quick", action="store_true", help="5 schemas, 20 s timeout")
    ap.add_argument(
        "--render", action="store_true", help="rewrite the .md table from the saved .json"
    )
    ap.add_argument(
        "--rerun-errors",
        action="store_true",
        help="run again the failed builds (not the timeouts) of the saved .json, keep the rest",
    )
    args = ap.parse_args()
    if args.quick:
        args.count, args.timeout = 5, 20.0
    if args.render or args.rerun_errors:
        name = "index_llama3" + ("_quick" if args.quick else "")
        saved = json.loads((RESULTS / f"{name}.json").read_text())
        for k, v in saved["args"].items():
            if k not in ("render", "rerun_errors"):
                setattr(args, k, v)
        if args.rerun_errors:
            rerun_errors(args, saved)
        return report(args, saved["results"], saved["machine"])
    if not DEV.is_file() or not Path(args.tokenizer).exists():
        print(f"skipped: needs {DEV} and {args.tokenizer} (the shared data folder)")
        return 0
    t_start = time.perf_counter()
    schemas = select(args.tokenizer, args.count)
    print(f"{len(schemas)} schemas selected in {time.perf_counter() - t_start:.1f} s")
    results = []
    for i, (sid, schema) in enumerate(schemas, 1):
        ts_r = run(tokensieve_worker, (args.tokenizer, schema), args.timeout)
        oc_r = run(outlines_worker, (args.tokenizer, schema), args.timeout)
        same_r = run(tokensieve_regex_worker, (args.tokenizer, schema), args.timeout)
        results.append(
            {
                "tokensieve_same_regex": same_r,
                "id": sid,
                "schema_chars": len(json.dumps(schema)),
                "tokensieve": ts_r,
                "outlines_core": oc_r,
            }
        )
        print(
            f"[{i}/{len(schemas)}] {sid}: tokensieve "
            f"{num(ts_r.get('compile_s')) if ts_r['ok'] else ts_r['error'][:60]} s, outlines-core "
            f"{num(oc_r.get('compile_s')) if oc_r['ok'] else oc_r['error'][:60]}",
            flush=True,
        )
    return report(args, results, None)


def rerun_errors(args: argparse.Namespace, saved: dict[str, Any]) -> None:
    """Run the failed (non-timeout) builds again with the current build; record which."""
    workers = {
        "tokensieve": tokensieve_worker,
        "outlines_core": outlines_worker,
        "tokensieve_same_regex": tokensieve_regex_worker,
    }
    by_id = dict(iter_dev_schemas())
    redone = []
    for r in saved["results"]:
        for key, worker in workers.items():
            if r[key]["ok"] or r[key].get("timeout"):
                continue
            r[key] = run(worker, (args.tokenizer, by_id[r["id"]]), args.timeout)
            redone.append(f"{r['id']} {key}")
            print(
                f"{r['id']} {key}: {num(r[key].get('compile_s')) if r[key]['ok'] else r[key]['error'][:80]}"
            )
    info = machine_info(["tokensieve", "outlines-core", "numpy"])
    saved["machine"].setdefault("reruns", []).append(
        {"date": info.get("date"), "git": info.get("git"), "builds": redone}
    )
    name = "index_llama3" + ("_quick" if args.quick else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(saved, indent=1))


def report(args: argparse.Namespace, results: list[dict[str, Any]], info: Any) -> int:
    same = [r for r in results if r["tokensieve_same_regex"]["ok"] and r["outlines_core"]["ok"]]
    same_ratios = [
        r["outlines_core"]["compile_s"] / r["tokensieve_same_regex"]["compile_s"] for r in same
    ]
    both = [r for r in results if r["tokensieve"]["ok"] and r["outlines_core"]["ok"]]
    compile_ratio = geomean(
        r["outlines_core"]["compile_s"] / r["tokensieve"]["compile_s"] for r in both
    )
    mem_ratio = geomean(
        r["outlines_core"]["peak_mib"] / max(r["tokensieve"]["peak_mib"], 0.1) for r in both
    )
    ts_ok = [r for r in results if r["tokensieve"]["ok"]]
    load_ratio = geomean(r["tokensieve"]["compile_s"] / r["tokensieve"]["load_s"] for r in ts_ok)
    oc_timeouts = sum(1 for r in results if r["outlines_core"].get("timeout"))
    oc_errors = sum(
        1 for r in results if not r["outlines_core"]["ok"] and not r["outlines_core"].get("timeout")
    )
    ts_fail = len(results) - len(ts_ok)
    same_err = [r["tokensieve_same_regex"] for r in results]
    same_err = [e for e in same_err if not e["ok"]]
    kinds = sorted({e["error"].split(":")[0] for e in same_err})
    same_errors = f"{len(same_err)}" + (f" ({', '.join(kinds)})" if kinds else "")
    header = [
        "schema",
        "chars",
        "ts same-regex s",
        "ts compile s",
        "ts peak MiB",
        "file KiB",
        "ts load ms",
        "compile/load ×",
        "oc compile s",
        "oc peak MiB",
        "oc/ts ×",
    ]
    rows = []
    for r in results:
        t, o = r["tokensieve"], r["outlines_core"]
        rows.append(
            [
                r["id"][:40],
                str(r["schema_chars"]),
                num(r["tokensieve_same_regex"].get("compile_s"))
                if r["tokensieve_same_regex"]["ok"]
                else "error",
                num(t.get("compile_s")) if t["ok"] else "error",
                num(t.get("peak_mib")) if t["ok"] else "",
                num(t["file_bytes"] / 1024) if t["ok"] else "",
                num(t["load_s"] * 1e3) if t["ok"] else "",
                num(t["compile_s"] / t["load_s"]) if t["ok"] else "",
                num(o.get("compile_s"))
                if o["ok"]
                else ("timeout" if o.get("timeout") else "error"),
                num(o.get("peak_mib")) if o["ok"] else "",
                num(o["compile_s"] / t["compile_s"]) if o["ok"] and t["ok"] else "",
            ]
        )
    summary = [
        ["schemas", str(len(results))],
        ["tokensieve failures", str(ts_fail)],
        [f"outlines-core timeouts (> {args.timeout:.0f} s + 30 s start)", str(oc_timeouts)],
        ["outlines-core errors (unsupported schema)", str(oc_errors)],
        ["both finished", str(len(both))],
        ["same regex (outlines-core's): both finished", str(len(same))],
        ["same regex: tokensieve errors", same_errors],
        [
            "same regex: outlines-core / tokensieve eager build, geomean (min)",
            f"{num(geomean(same_ratios))}× ({num(min(same_ratios, default=None))}×)",
        ],
        ["own languages: outlines-core / tokensieve compile, geomean", f"{num(compile_ratio)}×"],
        ["own languages: outlines-core / tokensieve peak memory, geomean", f"{num(mem_ratio)}×"],
        ["tokensieve compile / load time, geomean", f"{num(load_ratio)}×"],
    ]
    print()
    print(text_table(["summary", "value"], summary))
    print()
    print(text_table(header, rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "index_llama3" + ("_quick" if args.quick else "")
    if info is None:
        info = machine_info(["tokensieve", "outlines-core", "numpy"])
        saved_args = {k: v for k, v in vars(args).items() if k != "render"}
        (RESULTS / f"{name}.json").write_text(
            json.dumps({"machine": info, "args": saved_args, "results": results}, indent=1)
        )
    md = [
        f"# Ahead-of-time index benchmark — {Path(args.tokenizer).name}",
        "",
        f"`python benches/bench_index.py{' --quick' if args.quick else ''}`; the {args.count} largest dev-set schemas that tokensieve compiles; each build in a fresh process; a build gets {args.timeout:.0f} s plus 30 s for process start and vocabulary load (its own measured time is reported).",
        "",
        "Targets: compile ≥ 10× faster than outlines-core, load ≥ 20× faster than compiling.",
        "",
        *[
            f"Rerun with `--rerun-errors` on {x['date']} at {x['git']}: {len(x['builds'])} "
            f"build(s) that had failed ({'; '.join(x['builds'])}).\n"
            for x in info.get("reruns", [])
        ],
        md_table(["summary", "value"], summary),
        "",
        md_table(header, rows),
        "",
        f"Machine: {json.dumps(info)}",
    ]
    (RESULTS / f"{name}.md").write_text("\n".join(md) + "\n")
    print(f"\nwritten: {RESULTS / (name + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
