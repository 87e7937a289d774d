"""MaskBench: JSON Schema conformance and mask speed of tokensieve, llguidance, xgrammar and
outlines-core on the JSONSchemaBench dev sample (protocol: ``../shared/data/README.md``).

    python benches/maskbench.py [--engines tokensieve,llguidance,xgrammar,outlines-core]
                                [--limit N] [--timeout 20] [--report-only]

For every schema id of ``jsonschemabench-dev-sample500.txt`` (the first ``--limit`` ids) and every
engine: compile the schema (time to first mask = compile + first mask fill), then for each test
instance serialize it with ``json.dumps(data, ensure_ascii=False)``, tokenize it with the Llama 3
tokenizer (no special tokens) and feed the tokens one by one: fill the mask (timed from Python),
check that the token's bit is set, advance; after the last token, fill once more and check EOS.

Each engine runs in its own persistent worker process (spawned; tokenizer / vocabulary loaded once,
outside every measurement; address space capped with ``RLIMIT_AS``). A schema gets ``--timeout``
seconds of worker time (compile + all instances); a worker that overruns or dies is killed and
restarted. Every (engine, schema) result is appended to ``benches/results/maskbench_raw.jsonl``
as soon as it is known, and pairs already there are skipped: an interrupted run resumes.
The report (stdout, ``maskbench.md``, ``maskbench.json``) is rebuilt from the raw file.
"""

from __future__ import annotations

import argparse
import collections
import gc
import gzip
import json
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import engines as engine_adapters  # noqa: E402
from common import md_table, num, percentile, text_table  # noqa: E402
from engines import ENGINES, LLG, OC, TS, CompileError, Engine  # noqa: E402
from isolate import Worker, run_isolated  # noqa: E402

DATA = common.SHARED_DATA
DEFAULT_TOKENIZER = common.SHARED_TOKENIZERS / "llama3"
WARMUP_SCHEMA = common.WARMUP_SCHEMA

# outcomes, in the order of the table
PASS, COMPILE, TIMEOUT, CRASH, VALID_ERR, INVALID_ERR = (
    "pass",
    "compile_error",
    "timeout",
    "crash",
    "validation_error",
    "invalidation_error",
)


# --------------------------------------------------------------------------------------------
# property order (for classifying validation errors)
# --------------------------------------------------------------------------------------------


def _resolve(root: Any, s: Any, depth: int = 0) -> Any:
    while isinstance(s, dict) and isinstance(s.get("$ref"), str) and depth < 20:
        ref = s["$ref"]
        if not ref.startswith("#"):
            return s
        node: Any = root
        try:
            for part in ref[1:].split("/")[1:] if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return s
        s, depth = node, depth + 1
    return s


def _branches(root: Any, s: Any) -> list[Any]:
    """The schema itself plus its allOf / anyOf / oneOf branches (resolved), flattened."""
    s = _resolve(root, s)
    out = [s]
    if isinstance(s, dict):
        for k in ("allOf", "anyOf", "oneOf"):
            for b in s.get(k, []) if isinstance(s.get(k), list) else []:
                out += _branches(root, b)
    return out


def schema_order(root: Any, s: Any, data: Any) -> Any:
    """``data`` with object keys in the order the schema declares them (best effort: local
    ``$ref``, ``allOf`` / ``anyOf`` / ``oneOf`` branches, ``items`` / ``prefixItems``)."""
    cands = [b for b in _branches(root, s) if isinstance(b, dict)]
    if isinstance(data, dict):
        order: list[str] = []
        sub: dict[str, Any] = {}
        # prefer the branch that names most of the instance's keys; allOf parts all apply
        best = max(
            cands,
            key=lambda b: len(set(b.get("properties", {}) or {}) & set(data)),
            default={},
        )
        for b in [best, *cands]:
            props = b.get("properties")
            if isinstance(props, dict):
                for k, v in props.items():
                    if k not in sub:
                        order.append(k)
                        sub[k] = v
        keys = [k for k in order if k in data] + [k for k in data if k not in sub]
        out = {}
        for k in keys:
            ks = sub.get(k)
            if ks is None:
                for b in cands:
                    ap = b.get("additionalProperties")
                    if isinstance(ap, dict):
                        ks = ap
                        break
            out[k] = schema_order(root, ks, data[k]) if ks is not None else data[k]
        return out
    if isinstance(data, list):
        out_l = []
        for i, x in enumerate(data):
            xs = None
            for b in cands:
                pi = b.get("prefixItems")
                it = b.get("items")
                if isinstance(pi, list) and i < len(pi):
                    xs = pi[i]
                elif isinstance(it, list) and i < len(it):
                    xs = it[i]
                elif isinstance(it, dict):
                    xs = it
                if xs is not None:
                    break
            out_l.append(schema_order(root, xs, x) if xs is not None else x)
        return out_l
    return data


def serialize(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------------------------


def run_schema(eng: Engine, job: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    timeout = float(job["timeout"])
    pc = time.perf_counter_ns
    t_start = time.monotonic()
    deadline = t_start + timeout
    res: dict[str, Any] = {"outcome": None}
    gc.collect()
    gc.disable()
    try:
        t0 = pc()
        try:
            handle = eng.compile_json_schema(job["schema"])
            m = eng.matcher(handle)
            eng.fill(m)
        except CompileError as e:
            res.update(outcome=COMPILE, error=str(e), compile_s=(pc() - t0) / 1e9)
            return res
        except MemoryError:
            res.update(outcome=CRASH, error="MemoryError (address-space limit) in compile")
            return res
        except Exception as e:  # noqa: BLE001 - any other failure to compile: unsupported
            res.update(
                outcome=COMPILE, error=f"{type(e).__name__}: {e}", compile_s=(pc() - t0) / 1e9
            )
            return res
        t1 = pc()
        res["ttfm_ns"] = t1 - t0
        if time.monotonic() > deadline:
            res.update(outcome=TIMEOUT, error=f"compile took {(t1 - t0) / 1e9:.1f} s")
            return res
        mask_ns: list[int] = []
        insts: list[dict[str, Any]] = []
        res["mask_ns"] = mask_ns
        res["instances"] = insts
        notes: list[str] = []
        for ti, test in enumerate(job["tests"]):
            m = eng.matcher(handle)
            toks: list[int] = test["ids"]
            reject: Any = None
            for k, tok in enumerate(toks):
                a = pc()
                eng.fill(m)
                b = pc()
                mask_ns.append(b - a)
                if not eng.allowed(tok):
                    reject = k
                    break
                if not eng.advance(m, tok):
                    notes.append(f"instance {ti}: token #{k} ({tok}) in the mask but not accepted")
                    reject = k
                    break
                if time.monotonic() > deadline:
                    break
            if time.monotonic() > deadline:
                res.update(outcome=TIMEOUT, error=f"timeout in instance {ti}")
                return res
            if reject is None:
                a = pc()
                eng.fill(m)
                b = pc()
                mask_ns.append(b - a)
                if not eng.allowed(eng.eos):
                    reject = "eos"
            insts.append(
                {
                    "valid": bool(test["valid"]),
                    "accepted": reject is None,
                    "reject_at": reject,
                    "n_tokens": len(toks),
                }
            )
        if notes:
            res["notes"] = notes
        res["run_s"] = time.monotonic() - t_start
        bad_valid = [i for i, x in enumerate(insts) if x["valid"] and not x["accepted"]]
        bad_invalid = [i for i, x in enumerate(insts) if not x["valid"] and x["accepted"]]
        res["valid_rejected"] = bad_valid
        res["invalid_accepted"] = bad_invalid
        res["outcome"] = VALID_ERR if bad_valid else INVALID_ERR if bad_invalid else PASS
        if job.get("second_pass"):
            # supplementary (not part of the protocol): the same walk again with the same
            # compiled grammar, so tokensieve's lazily computed masks are now cached
            warm: list[int] = []
            for test, inst in zip(job["tests"], insts):
                m = eng.matcher(handle)
                stop = inst["reject_at"]
                for k, tok in enumerate(test["ids"]):
                    if stop is not None and stop != "eos" and k > stop:
                        break
                    a = pc()
                    eng.fill(m)
                    b = pc()
                    warm.append(b - a)
                    if stop == k or not eng.advance(m, tok):
                        break
                else:
                    a = pc()
                    eng.fill(m)
                    b = pc()
                    warm.append(b - a)
                if time.monotonic() > deadline + 5:
                    break
            res["mask_ns_second_pass"] = warm
        # untimed: is a rejected valid instance accepted once its keys follow schema order?
        gc.enable()
        for i in bad_valid:
            if time.monotonic() > deadline + 5:
                break
            data = job["tests"][i]["data"]
            try:
                re_text = serialize(schema_order(job["schema"], job["schema"], data))
            except Exception:  # noqa: BLE001
                continue
            entry: dict[str, Any] = {"reordered": re_text != job["tests"][i]["text"]}
            if entry["reordered"]:
                ids = tokenizer.encode(re_text, add_special_tokens=False).ids
                m = eng.matcher(handle)
                ok = True
                for tok in ids:
                    eng.fill(m)
                    if not eng.allowed(tok) or not eng.advance(m, tok):
                        ok = False
                        break
                if ok:
                    eng.fill(m)
                    ok = eng.allowed(eng.eos)
                entry["reordered_accepted"] = ok
            insts[i]["order_check"] = entry
        return res
    finally:
        gc.enable()


def engine_build(engine: str) -> str:
    """What exactly was measured: the package version, and for tokensieve the extension
    module's hash and build time plus the repository HEAD (the tree is under development)."""
    dist = engine_adapters.package(engine)
    out = f"{dist} {common._version(dist)}"
    if engine == TS:
        import datetime as dt
        import hashlib
        import subprocess

        import tokensieve._core as core

        path = Path(core.__file__)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        built = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
        try:
            head = subprocess.run(
                ["git", "-C", str(common.REPO), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            head = "?"
        out += f", _core sha256 {digest} built {built:%Y-%m-%d %H:%M:%S} UTC, HEAD {head}"
    return out


def worker_setup(
    engine: str, tok_path: str, ts_options: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """In the worker: the engine and the tokenizer, loaded once outside every measurement
    (``ts_options``: compile options of tokensieve's grammars)."""
    import tokenizers

    t0 = time.monotonic()
    info = common.TokenizerInfo(tok_path)
    eng = engine_adapters.load(engine, info, **(ts_options or {}) if engine == TS else {})
    tokenizer = tokenizers.Tokenizer.from_file(str(info.file))
    del info
    # one-time per-vocabulary work outside the measurements
    h = eng.compile_json_schema(WARMUP_SCHEMA)
    m = eng.matcher(h)
    eng.fill(m)
    del h, m
    return (eng, tokenizer), {"load_s": time.monotonic() - t0, "build": engine_build(engine)}


def worker_job(state: Any, job: dict[str, Any]) -> dict[str, Any]:
    """In the worker: one schema, every failure an outcome."""
    eng, tokenizer = state
    try:
        return run_schema(eng, job, tokenizer)
    except MemoryError:
        return {"outcome": CRASH, "error": "MemoryError (address-space limit)"}
    except BaseException as e:  # noqa: BLE001
        return {
            "outcome": CRASH,
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=5),
        }


def run_job(w: Worker, job: dict[str, Any], grace: float) -> dict[str, Any]:
    """A job on a persistent worker; an overrun is a timeout, a dead worker a crash."""
    res = w.run(job, timeout=float(job["timeout"]) + grace)
    if res.get("timeout"):
        return {"outcome": TIMEOUT, "error": res["error"]}
    if res.get("died"):
        return {"outcome": CRASH, "error": res["error"]}
    return res


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def load_sample(limit: int | None) -> list[str]:
    ids = [x.strip() for x in (DATA / "jsonschemabench-dev-sample500.txt").read_text().split()]
    ids = [x for x in ids if x]
    return ids[:limit] if limit else ids


def load_schemas(ids: set[str]) -> dict[str, dict[str, Any]]:
    out = {}
    with gzip.open(DATA / "jsonschemabench-dev.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["id"] in ids:
                out[r["id"]] = r
    return out


def read_raw(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    done: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        with path.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:  # a line cut by an interruption
                    continue
                done[(r["engine"], r["schema_id"])] = r
    return done


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--limit", type=int, default=None, help="first N ids of the sample list")
    ap.add_argument(
        "--ids", default=None, help="comma-separated schema ids (instead of the sample)"
    )
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per (engine, schema)")
    ap.add_argument("--mem-gb", type=float, default=6.0, help="RLIMIT_AS of each worker")
    ap.add_argument(
        "--oc-limit",
        type=int,
        default=None,
        help="run outlines-core only on the first N selected schemas (its index build is slow)",
    )
    ap.add_argument(
        "--oc-every",
        type=int,
        default=None,
        help="run outlines-core only on every K-th selected schema (1st, K+1-th, ...)",
    )
    ap.add_argument("--tokenizer", default=str(DEFAULT_TOKENIZER))
    ap.add_argument("--raw", default=str(common.RESULTS_DIR / "maskbench_raw.jsonl"))
    ap.add_argument("--out-dir", default=str(common.RESULTS_DIR))
    ap.add_argument("--report-only", action="store_true", help="only rebuild the report")
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="start over: move the raw file aside (to RAW.old) instead of resuming from it",
    )
    ap.add_argument(
        "--max-minutes", type=float, default=None, help="stop starting new schemas after this"
    )
    ap.add_argument(
        "--ts-options",
        default="",
        help="tokensieve compile options, KEY=VALUE,... (e.g. property_order=any); use its own "
        "--raw and --out-dir",
    )
    args = ap.parse_args(argv)
    ts_options: dict[str, Any] = {}
    for kv in args.ts_options.split(",") if args.ts_options else []:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--ts-options takes KEY=VALUE pairs, got {kv!r}")
        ts_options[key.strip()] = value.strip()

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in ENGINES:
            ap.error(f"unknown engine {e!r} (known: {', '.join(ENGINES)})")
    if not (DATA / "jsonschemabench-dev-sample500.txt").exists():
        print(f"SKIP: {DATA} not found")
        return 0
    ids = load_sample(args.limit)
    if args.ids:
        ids = [x for x in args.ids.split(",") if x]
    schemas = load_schemas(set(ids))
    raw_path = Path(args.raw)
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    if args.fresh and raw_path.exists() and not args.report_only:
        raw_path.replace(raw_path.with_name(raw_path.name + ".old"))
    done = read_raw(raw_path)
    if done and not args.report_only:
        print(
            f"resuming: {len(done)} (engine, schema) results already in {raw_path} are reused "
            "(--fresh starts over)"
        )
    oc_sel = ids[:: args.oc_every] if args.oc_every else ids
    oc_ids = set(oc_sel[: args.oc_limit] if args.oc_limit is not None else oc_sel)

    if not args.report_only:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(str(common.resolve_tokenizer(args.tokenizer)[1]))
        workers = {
            e: Worker(
                worker_setup,
                worker_job,
                (e, args.tokenizer, ts_options),
                mem_bytes=int(args.mem_gb * 2**30),
                name=f"{e} worker",
            )
            for e in engines
        }
        loads: dict[str, list[float]] = {e: [] for e in engines}
        t_run = time.monotonic()
        try:
            with raw_path.open("a", encoding="utf-8") as out:
                for n, sid in enumerate(ids):
                    todo = [
                        e for e in engines if (e, sid) not in done and (e != OC or sid in oc_ids)
                    ]
                    if not todo:
                        continue
                    if args.max_minutes and time.monotonic() - t_run > args.max_minutes * 60:
                        print(f"--max-minutes reached; stopping before schema #{n} ({sid})")
                        break
                    rec = schemas[sid]
                    tests = []
                    for t in rec["tests"]:
                        text = serialize(t["data"])
                        tests.append(
                            {
                                "valid": bool(t["valid"]),
                                "text": text,
                                "data": t["data"],
                                "ids": tok.encode(text, add_special_tokens=False).ids,
                            }
                        )
                    job = {
                        "id": sid,
                        "schema": rec["schema"],
                        "tests": tests,
                        "timeout": args.timeout,
                    }
                    line = []
                    for e in todo:
                        w = workers[e]
                        t0 = time.monotonic()
                        job["second_pass"] = e == TS
                        starts = w.starts
                        try:
                            res = run_job(w, job, grace=5.0)
                        except RuntimeError as ex:
                            res = {"outcome": CRASH, "error": str(ex)}
                        if w.starts != starts:
                            loads[e].append(w.ready_info["load_s"])
                        res.update(engine=e, schema_id=sid, wall_s=round(time.monotonic() - t0, 3))
                        res["build"] = w.ready_info.get("build")
                        out.write(json.dumps(res) + "\n")
                        out.flush()
                        done[(e, sid)] = res
                        line.append(f"{e}={res['outcome']}")
                    print(f"[{n + 1}/{len(ids)}] {sid}: " + " ".join(line), flush=True)
        finally:
            for w in workers.values():
                w.stop()
            print("worker loads (s):", {e: [round(x, 1) for x in v] for e, v in loads.items()})

    rep = build_report(ids, engines, schemas, done, args, oc_ids)
    term, md = render(rep)
    print(term)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "maskbench.md").write_text(md, encoding="utf-8")
    (out_dir / "maskbench.json").write_text(json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
    print(f"\nwrote {out_dir / 'maskbench.md'} and maskbench.json")
    return 0


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def normalize_error(msg: str) -> str:
    """Group compile errors: first line, with quoted names, numbers and JSON pointers masked."""
    s = (msg or "").strip().splitlines()[0] if msg else ""
    # JSON pointers / paths (per schema) and long quoted values; keyword names stay
    s = re.sub(r"`(#|/)[^`]{0,300}`", "`<ptr>`", s)
    s = re.sub(r'"[^"]{40,300}"', '"…"', s)
    s = re.sub(r"'[^']{40,300}'", "'…'", s)
    s = re.sub(r"(?<![\w`])#?/[\w/~.$%{}:-]+", "<ptr>", s)
    s = re.sub(r"\d+", "N", s)
    return s[:160]


def open_depth(text: str) -> int:
    """Containers still open at the end of a JSON prefix (brackets inside strings skipped)."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return depth


def jsonschema_check(schema: Any, data: Any) -> str:
    """The `jsonschema` package's verdict (with format assertion): 'valid' or the first error."""
    try:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema)
        v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        errs = list(v.iter_errors(data))
        if not errs:
            return "valid"
        e = min(errs, key=lambda x: len(list(x.absolute_path)))
        path = "/" + "/".join(str(p) for p in e.absolute_path)
        return f"invalid at {path}: {e.message[:200]}"
    except Exception as ex:  # noqa: BLE001
        return f"jsonschema could not check: {type(ex).__name__}: {str(ex)[:120]}"


def token_context(tok: Any, ids: list[int], at: Any) -> dict[str, Any]:
    if at == "eos":
        return {"at": "EOS", "before": tok.decode(ids[-12:]) if ids else ""}
    if at is None:
        return {"at": None}
    return {
        "at": at,
        "before": tok.decode(ids[max(0, at - 12) : at]),
        "token": tok.decode([ids[at]]),
        "token_id": ids[at],
    }


_NEST = (
    "nesting deeper than max_nesting_depth (default 8) inside an unconstrained value "
    "(accepted with a larger max_nesting_depth)"
)
_REC = "recursion deeper than max_recursion_depth (default 3) (accepted with a larger max_recursion_depth)"
DIAG_TRIES: list[tuple[str, dict[str, Any]]] = [
    *[(_NEST, {"max_nesting_depth": d}) for d in (12, 16, 24)],
    (_REC, {"max_recursion_depth": 4}),
    (_REC, {"max_recursion_depth": 5}),
    ("string `format` assertion (accepted with formats='annotate')", {"formats": "annotate"}),
    ("whitespace (accepted with whitespace='flexible')", {"whitespace": "flexible"}),
    ("property order (accepted with property_order='any')", {"property_order": "any"}),
]


def diag_child(tok_path: str, schema: Any, ids: list[int]) -> dict[str, Any]:
    """In a memory-capped subprocess: the first relaxed tokensieve option that accepts ``ids``."""
    import numpy as np

    import tokensieve as ts

    vocab = ts.Vocabulary.from_pretrained(str(common.resolve_tokenizer(tok_path)[0]))
    bm = np.zeros((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
    eos = int(vocab.eos_token_ids[0])
    for label, opts in DIAG_TRIES:
        try:
            g = ts.Grammar.from_json_schema(schema, vocab, **opts)
        except Exception:  # noqa: BLE001
            continue
        m = g.matcher()
        if m.accept_tokens(ids) == len(ids):
            m.fill_next_token_bitmask(bm)
            if (int(bm[0, eos >> 5]) >> (eos & 31)) & 1:
                return {"cause": [label, opts]}
    return {"cause": None}


class TsDiagnosis:
    """Untimed re-checks of a valid instance tokensieve rejected: is it accepted once a
    documented bound or option is relaxed? Each check runs in a memory-capped subprocess
    (a relaxed bound can make a schema's automaton explode)."""

    def __init__(self, tok_path: str, tok: Any, mem_bytes: int, timeout: float = 60.0) -> None:
        self.tok_path, self.tok, self.mem, self.timeout = tok_path, tok, mem_bytes, timeout

    def cause(self, schema: Any, text: str) -> list[Any] | None:
        """``[cause, options that made it accepted]`` or ``None``."""
        ids = self.tok.encode(text, add_special_tokens=False).ids
        out = run_isolated(
            diag_child, (self.tok_path, schema, ids), timeout=self.timeout, mem_bytes=self.mem
        )
        cause: list[Any] | None = out.get("cause")
        return cause


def build_report(
    ids: list[str],
    engines: list[str],
    schemas: dict[str, Any],
    done: dict[tuple[str, str], dict[str, Any]],
    args: Any,
    oc_ids: set[str],
) -> dict[str, Any]:
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(common.resolve_tokenizer(args.tokenizer)[1]))
    per: dict[str, Any] = {}
    for e in engines:
        recs = [done[(e, s)] for s in ids if (e, s) in done]
        cnt = collections.Counter(r["outcome"] for r in recs)
        ttfm = [
            r["ttfm_ns"] / 1e6
            for r in recs
            if "ttfm_ns" in r and r["outcome"] not in (TIMEOUT, CRASH)
        ]
        warm = [
            x / 1e3
            for r in recs
            for x in r.get("mask_ns_second_pass", [])
            if r["outcome"] != TIMEOUT
        ]
        masks = [x / 1e3 for r in recs for x in r.get("mask_ns", []) if r["outcome"] != TIMEOUT]
        val = sum(1 for r in recs if r.get("valid_rejected"))
        inv = sum(1 for r in recs if r.get("invalid_accepted"))
        errs = collections.Counter(
            normalize_error(r.get("error", "")) for r in recs if r["outcome"] == COMPILE
        )
        examples: dict[str, str] = {}
        for r in recs:
            if r["outcome"] == COMPILE:
                examples.setdefault(
                    normalize_error(r.get("error", "")),
                    f"{r['schema_id']}: {r.get('error', '')[:300]}",
                )
        n_inst = sum(len(r.get("instances", [])) for r in recs)
        per[e] = {
            "schemas": len(recs),
            "passing": cnt[PASS],
            "compile_errors": cnt[COMPILE],
            "timeouts": cnt[TIMEOUT],
            "crashes": cnt[CRASH],
            "schemas_with_validation_errors": val,
            "schemas_with_invalidation_errors": inv,
            "instances": n_inst,
            "valid_rejected_instances": sum(len(r.get("valid_rejected", [])) for r in recs),
            "invalid_accepted_instances": sum(len(r.get("invalid_accepted", [])) for r in recs),
            "ttfm_ms": {
                "n": len(ttfm),
                "p50": percentile(ttfm, 50),
                "p95": percentile(ttfm, 95),
                "p99": percentile(ttfm, 99),
                "max": max(ttfm) if ttfm else None,
            },
            "mask_us": {
                "n": len(masks),
                "p50": percentile(masks, 50),
                "p95": percentile(masks, 95),
                "p99": percentile(masks, 99),
                "max": max(masks) if masks else None,
            },
            "mask_us_second_pass": {
                "n": len(warm),
                "p50": percentile(warm, 50),
                "p99": percentile(warm, 99),
            },
            "wall_s": sum(r.get("wall_s", 0) for r in recs),
            "top_compile_errors": [
                {"count": c, "message": m, "example": examples[m]} for m, c in errs.most_common(10)
            ],
            "crash_or_timeout": [
                {
                    "schema_id": r["schema_id"],
                    "outcome": r["outcome"],
                    "error": r.get("error", "")[:300],
                }
                for r in recs
                if r["outcome"] in (TIMEOUT, CRASH)
            ],
        }

    # time to first mask by schema group (p50, ms), and passing per group
    def group(sid: str) -> str:
        return "BFCL" if sid.startswith("BFCL") else sid.split("---")[0]

    groups = sorted({group(s) for s in ids}, key=lambda g: [group(s) for s in ids].index(g))
    by_group: dict[str, Any] = {}
    for g in groups:
        gid = [s for s in ids if group(s) == g]
        row: dict[str, Any] = {"schemas": len(gid)}
        for e in engines:
            recs = [done[(e, s)] for s in gid if (e, s) in done]
            tt = [
                r["ttfm_ns"] / 1e6
                for r in recs
                if "ttfm_ns" in r and r["outcome"] not in (TIMEOUT, CRASH)
            ]
            row[e] = {
                "ran": len(recs),
                "passing": sum(r["outcome"] == PASS for r in recs),
                "ttfm_p50_ms": percentile(tt, 50),
            }
        by_group[g] = row

    # schemas every engine ran (outlines-core may be capped)
    common_ids = [s for s in ids if all((e, s) in done for e in engines)]
    common_pass = {e: sum(done[(e, s)]["outcome"] == PASS for s in common_ids) for e in engines}
    ts_llg_ids = [s for s in ids if (TS, s) in done and (LLG, s) in done]
    ts_llg_pass = {
        e: sum(done[(e, s)]["outcome"] == PASS for s in ts_llg_ids)
        for e in (TS, LLG)
        if e in engines
    }

    def other_rejects(sid: str, ti: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for e in engines:
            r = done.get((e, sid))
            if e == TS or not r:
                continue
            if "instances" not in r or ti >= len(r["instances"]):
                out[e] = r["outcome"]
                continue
            out[e] = (
                r["instances"][ti]["reject_at"]
                if not r["instances"][ti]["accepted"]
                else "accepted"
            )
        return out

    diagnose = TsDiagnosis(args.tokenizer, tok, int(args.mem_gb * 2**30)) if TS in engines else None

    ts_inval: list[dict[str, Any]] = []
    ts_val: list[dict[str, Any]] = []
    cause_count: collections.Counter[str] = collections.Counter()
    if TS in engines:
        for sid in ids:
            r = done.get((TS, sid))
            if not r or "instances" not in r:
                continue
            rec = schemas[sid]
            for ti in r.get("invalid_accepted", []):
                t = rec["tests"][ti]
                text = serialize(t["data"])
                tids = tok.encode(text, add_special_tokens=False).ids
                others = other_rejects(sid, ti)
                ctx = {}
                for e, at in others.items():
                    if at != "accepted":
                        ctx[e] = token_context(tok, tids, at)
                ts_inval.append(
                    {
                        "schema_id": sid,
                        "instance": ti,
                        "description": t.get("description", ""),
                        "text": text[:600],
                        "jsonschema": jsonschema_check(rec["schema"], t["data"]),
                        "other_engines": others,
                        "rejected_by_others_at": ctx,
                    }
                )
            for ti in r.get("valid_rejected", []):
                t = rec["tests"][ti]
                inst = r["instances"][ti]
                text = serialize(t["data"])
                tids = tok.encode(text, add_special_tokens=False).ids
                oc_ = inst.get("order_check", {})
                if oc_.get("reordered") and oc_.get("reordered_accepted"):
                    cause = "property order differs from schema order (accepted once reordered)"
                elif oc_.get("reordered"):
                    cause = "property order differs, still rejected after reordering"
                else:
                    cause = "other (keys already in schema order)"
                diag = None
                if not (oc_.get("reordered") and oc_.get("reordered_accepted")) and diagnose:
                    diag = diagnose.cause(rec["schema"], text)
                    if diag:
                        cause = diag[0]
                rj = inst["reject_at"]
                if cause.startswith("other") and isinstance(rj, int):
                    depth = open_depth(tok.decode(tids[:rj]))
                    if tok.decode([tids[rj]]).lstrip()[:1] in ("{", "[") and depth >= 8:
                        cause = (
                            "opens a container at nesting depth ≥ 9 (not accepted with "
                            "max_nesting_depth up to 24, or that compile failed)"
                        )
                js = jsonschema_check(rec["schema"], t["data"])
                if js != "valid" and not js.startswith("jsonschema could not"):
                    cause += "; `jsonschema` says the instance is invalid"
                cause_count[cause] += 1
                ts_val.append(
                    {
                        "schema_id": sid,
                        "instance": ti,
                        "cause": cause,
                        "rejected": token_context(tok, tids, inst["reject_at"]),
                        "jsonschema": js,
                        "accepted_with_options": diag[1] if diag else None,
                        "other_engines": other_rejects(sid, ti),
                        "text": text[:400],
                    }
                )
    return {
        "machine": common.machine_info(
            ["tokensieve", "llguidance", "xgrammar", "outlines_core", "tokenizers"]
        ),
        "args": {
            "engines": engines,
            "limit": args.limit,
            "ts_options": args.ts_options,
            "ids": bool(args.ids),
            "schemas_selected": len(ids),
            "timeout_s": args.timeout,
            "mem_gb": args.mem_gb,
            "oc_limit": args.oc_limit,
            "oc_every": args.oc_every,
            "outlines_core_schema_ids": [s for s in ids if s in oc_ids] if OC in engines else [],
            "outlines_core_schemas": len(oc_ids) if OC in engines else 0,
            "tokenizer": str(args.tokenizer),
        },
        "engines": per,
        "by_group": by_group,
        "builds": {
            e: dict(
                collections.Counter(
                    str(done[(e, s)].get("build") or "not recorded (package version above)")
                    for s in ids
                    if (e, s) in done
                )
            )
            for e in engines
        },
        "common_schemas": len(common_ids),
        "common_passing": common_pass,
        "ts_llg_schemas": len(ts_llg_ids),
        "ts_llg_passing": ts_llg_pass,
        "tokensieve_invalidation_errors": ts_inval,
        "tokensieve_validation_errors": ts_val,
        "tokensieve_validation_causes": dict(cause_count.most_common()),
    }


def render(rep: dict[str, Any]) -> tuple[str, str]:
    per = rep["engines"]
    engines = list(per)
    head = [
        "engine",
        "schemas",
        "passing",
        "compile err",
        "timeout",
        "crash/OOM",
        "validation err",
        "invalidation err",
        "TTFM p50 ms",
        "p95",
        "p99",
        "mask p50 µs",
        "p99",
        "masks",
        "wall s",
    ]
    rows = []
    for e in engines:
        d = per[e]
        rows.append(
            [
                e,
                str(d["schemas"]),
                str(d["passing"]),
                str(d["compile_errors"]),
                str(d["timeouts"]),
                str(d["crashes"]),
                str(d["schemas_with_validation_errors"]),
                str(d["schemas_with_invalidation_errors"]),
                num(d["ttfm_ms"]["p50"]),
                num(d["ttfm_ms"]["p95"]),
                num(d["ttfm_ms"]["p99"]),
                num(d["mask_us"]["p50"]),
                num(d["mask_us"]["p99"]),
                str(d["mask_us"]["n"]),
                f"{d['wall_s']:.0f}",
            ]
        )
    inst_rows = [
        [
            e,
            str(per[e]["instances"]),
            str(per[e]["valid_rejected_instances"]),
            str(per[e]["invalid_accepted_instances"]),
        ]
        for e in engines
    ]
    targets = []
    if TS in per:
        d = per[TS]

        def chk(ok: bool | None) -> str:
            return "–" if ok is None else ("met" if ok else "NOT met")

        tl = rep["ts_llg_passing"]
        if LLG in tl:
            targets.append(
                [
                    f"passing ≥ llguidance (same {rep['ts_llg_schemas']} schemas)",
                    f"{tl[TS]} vs {tl[LLG]}",
                    chk(tl[TS] >= tl[LLG]),
                ]
            )
        targets.append(
            [
                "invalidation errors = 0",
                f"{d['schemas_with_invalidation_errors']} schemas / {d['invalid_accepted_instances']} instances",
                chk(d["invalid_accepted_instances"] == 0),
            ]
        )
        t, mk = d["ttfm_ms"], d["mask_us"]
        for label, v, lim in [
            ("time to first mask p50 ≤ 2 ms", t["p50"], 2.0),
            ("time to first mask p99 ≤ 50 ms", t["p99"], 50.0),
            ("mask p50 ≤ 5 µs", mk["p50"], 5.0),
            ("mask p99 ≤ 200 µs", mk["p99"], 200.0),
        ]:
            targets.append([label, num(v), chk(None if v is None else v <= lim)])
    a = rep["args"]
    m = rep["machine"]
    which = (
        "the ids given with --ids"
        if a.get("ids")
        else f"first {a['schemas_selected']} ids of jsonschemabench-dev-sample500.txt"
    )
    scope = (
        f"{a['schemas_selected']} schemas ({which}), timeout {a['timeout_s']:.0f} s, "
        f"RLIMIT_AS {a['mem_gb']:g} GB per worker"
    )
    if OC in per and a["outlines_core_schemas"] < a["schemas_selected"]:
        how = []
        if a.get("oc_every"):
            how.append(f"every {a['oc_every']}th id (1st, {a['oc_every'] + 1}th, …)")
        if a.get("oc_limit") is not None:
            how.append(f"at most {a['oc_limit']}")
        scope += (
            f"; outlines-core only on {a['outlines_core_schemas']} of them ({', '.join(how)}; "
            "ids in maskbench.json)"
        )

    sp = per.get(TS, {}).get("mask_us_second_pass", {})
    second = (
        f"tokensieve, supplementary (not the protocol): the same walk again with the same grammar "
        f"(lazily computed masks now cached): mask p50 {num(sp.get('p50'))} µs, "
        f"p99 {num(sp.get('p99'))} µs over {sp.get('n')} fills."
        if sp.get("n")
        else ""
    )
    t_lines = [f"=== MaskBench (Llama 3): {scope} ===", text_table(head, rows)]
    if second:
        t_lines.append(second)
    t_lines.append("\nInstances")
    t_lines.append(
        text_table(["engine", "instances", "valid rejected", "invalid accepted"], inst_rows)
    )
    if targets:
        t_lines.append("\nTargets (tokensieve)")
        t_lines.append(text_table(["target", "measured", ""], targets))
    t_lines.append(
        f"\nPassing on the {rep['common_schemas']} schemas every engine ran: "
        + ", ".join(f"{e} {c}" for e, c in rep["common_passing"].items())
    )
    for e in engines:
        errs = per[e]["top_compile_errors"]
        if errs:
            t_lines.append(f"\nTop compile errors: {e}")
            t_lines += [f"  {x['count']:4d}  {x['message']}" for x in errs]
    if rep["tokensieve_invalidation_errors"]:
        t_lines.append("\ntokensieve invalidation errors (invalid instance accepted)")
        for x in rep["tokensieve_invalidation_errors"]:
            t_lines.append(f"  {x['schema_id']} #{x['instance']}: {x['text'][:160]}")
            t_lines.append(f"      jsonschema: {x['jsonschema']}; others: {x['other_engines']}")
    if rep["tokensieve_validation_causes"]:
        t_lines.append("\ntokensieve validation errors by cause")
        t_lines += [f"  {c:4d}  {k}" for k, c in rep["tokensieve_validation_causes"].items()]

    md = ["# MaskBench — Llama 3\n"]
    md.append(
        f"Generated by `python benches/maskbench.py{' --limit ' + str(a['limit']) if a['limit'] else ''}"
        f"{' --ts-options ' + a['ts_options'] if a.get('ts_options') else ''}` "
        f"on {m['date']}; {scope}. Protocol: `../shared/data/README.md`; details: "
        "[benches/README.md](../README.md#maskbench).\n"
    )
    md.append(
        md_table(
            ["", ""],
            [
                ["CPU", f"{m['cpu']}, {m['usable_cores']} usable cores (shared)"],
                ["load average at start", str(m["load_avg_1_5_15min_at_start"])],
                ["tokensieve git", str(m["git"])],
                *[[k, str(v) if v else "not installed"] for k, v in m["packages"].items()],
                *[
                    [
                        f"{e} build measured (schemas)",
                        "; ".join(f"{b} ({n})" for b, n in bs.items()),
                    ]
                    for e, bs in rep["builds"].items()
                ],
            ],
        )
    )
    md.append("\n## Results per engine (counts are schemas)\n")
    md.append(md_table(head, rows))
    md.append(
        "\nTTFM = time to first mask (compile + first mask fill), over the schemas that compiled; "
        "mask = one mask fill, over every step of every instance (schemas that timed out left out). "
        "A schema can count in both error columns; `passing` = every instance classified correctly.\n"
    )
    if second:
        md.append(second + "\n")
    md.append(md_table(["engine", "instances", "valid rejected", "invalid accepted"], inst_rows))
    md.append(
        f"\nPassing on the {rep['common_schemas']} schemas every engine ran: "
        + ", ".join(f"{e} {c}" for e, c in rep["common_passing"].items())
        + "\n"
    )
    if targets:
        md.append("## Targets (tokensieve)\n")
        md.append(md_table(["target", "measured", "result"], targets))
    md.append("\n## By schema group: passing / schemas run, and time to first mask p50 (ms)\n")
    g_rows = []
    for g, row in rep["by_group"].items():
        cells = [g, str(row["schemas"])]
        for e in engines:
            x = row.get(e, {})
            cells.append(f"{x.get('passing', 0)}/{x.get('ran', 0)}, {num(x.get('ttfm_p50_ms'))}")
        g_rows.append(cells)
    md.append(md_table(["group", "schemas", *engines], g_rows))
    md.append("\n## Most frequent compile errors\n")
    for e in engines:
        errs = per[e]["top_compile_errors"]
        md.append(f"### {e}\n")
        if not errs:
            md.append("none\n")
            continue
        md.append(
            md_table(
                ["count", "message (normalized)", "example"],
                [
                    [str(x["count"]), f"`{x['message']}`", x["example"][:200].replace("\n", " ")]
                    for x in errs
                ],
            )
        )
        md.append("")
    md.append("## Timeouts and crashes\n")
    rows_tc = [
        [e, x["schema_id"], x["outcome"], x["error"][:120].replace("\n", " ")]
        for e in engines
        for x in per[e]["crash_or_timeout"]
    ]
    md.append(md_table(["engine", "schema", "outcome", "detail"], rows_tc) if rows_tc else "none")
    md.append("\n## tokensieve invalidation errors (invalid instance accepted)\n")
    inv = rep["tokensieve_invalidation_errors"]
    if not inv:
        md.append("none\n")
    for x in inv:
        md.append(
            f"- `{x['schema_id']}` instance {x['instance']} ({x['description']}): `{x['text'][:300]}`"
        )
        md.append(f"  - jsonschema: {x['jsonschema']}")
        md.append(f"  - other engines (token index where rejected): {x['other_engines']}")
        for e, c in x["rejected_by_others_at"].items():
            if c.get("at") == "EOS":
                md.append(f"  - {e} rejects at EOS (after `…{c['before']}`)")
            else:
                md.append(f"  - {e} rejects token #{c['at']} `{c['token']}` after `…{c['before']}`")
    md.append("\n## tokensieve validation errors (valid instance rejected)\n")
    if rep["tokensieve_validation_causes"]:
        md.append(
            md_table(
                ["cause", "instances"],
                [[k, str(c)] for k, c in rep["tokensieve_validation_causes"].items()],
            )
        )
        md.append("")
        rows_v = []
        for x in rep["tokensieve_validation_errors"]:
            c = x["rejected"]
            where = "EOS" if c.get("at") == "EOS" else f"#{c.get('at')} `{c.get('token', '')}`"
            opts = x.get("accepted_with_options")
            rows_v.append(
                [
                    f"{x['schema_id']} #{x['instance']}",
                    x["cause"] + (f" — accepted with `{opts}`" if opts else ""),
                    where,
                    f"`…{(c.get('before') or '')[-60:]}`",
                    str(x["other_engines"]),
                ]
            )
        md.append(
            md_table(
                ["schema / instance", "cause", "rejected token", "after", "other engines"], rows_v
            )
        )
    else:
        md.append("none\n")
    return "\n".join(t_lines), "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
