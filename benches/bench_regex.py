"""Regex benchmark: tokensieve beside outlines-core (``Index``) and llguidance.

    python benches/bench_regex.py [--quick] [--tokenizer PATH]

For one vocabulary (default: the Llama 3 ``tokenizer.json`` in ``../shared/tokenizers/llama3``)
and the same regexes for every engine, it measures

* time to first mask: compile a fresh grammar + fill the first token bitmask (the vocabulary /
  tokenizer object is built once and reused, as a server would);
* mask time per token: tokenize each sample string, then at every step time the call that fills
  the bitmask, and advance by the sample's next token (the step after the last token, where EOS
  is allowed, is timed too). tokensieve is measured twice with the same grammar: a cold pass
  (lazy masks computed on the way) and a warm pass (masks cached);
* eager full-index build: ``Grammar.from_regex(...).precompute()`` against outlines-core's
  ``Index(...)``, each in a fresh subprocess that also records the peak-RSS increase.

Results: a table on stdout, ``benches/results/regex_<tokenizer>.md`` and ``.json``. See
``benches/README.md`` for what every column means.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import engines as engine_adapters  # noqa: E402
from common import geomean, machine_rows, md_table, num, percentile, text_table  # noqa: E402
from engines import LLG, OC, TS, Engine  # noqa: E402
from isolate import run_isolated  # noqa: E402

# (name, regex, sample strings that fully match). Only syntax the three engines share.
REGEXES: list[tuple[str, str, list[str]]] = [
    ("int", r"-?(0|[1-9][0-9]*)", ["42", "-1234567", "0"]),
    (
        "float",
        r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
        ["3.14159", "-0.5e-10", "6.02214076E23"],
    ),
    ("date", r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", ["2024-02-29", "1999-12-31"]),
    ("time", r"([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?", ["23:59:59", "07:30"]),
    (
        "iso_datetime",
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
        r"(Z|[+-][0-9]{2}:[0-9]{2})",
        ["2024-05-17T13:45:00Z", "1969-07-20T20:17:40.123456+02:00"],
    ),
    (
        "email",
        r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
        ["jane.doe+news@example.co.uk", "admin@localhost.dev"],
    ),
    (
        "uuid",
        r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        ["123e4567-e89b-42d3-a456-426614174000", "f47ac10b-58cc-4372-a567-0e02b2c3d479"],
    ),
    (
        "ipv4",
        r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
        r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
        ["192.168.0.1", "255.255.255.0"],
    ),
    (
        "phone",
        r"(\+1 )?\(?[0-9]{3}\)?[ .-]?[0-9]{3}[ .-][0-9]{4}",
        ["+1 (555) 123-4567", "555.867.5309"],
    ),
    (
        "json_string",
        r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
        [r'"Hello, \"world\"!\n"', r'"caf\u00e9 costs \u20ac5"', r'"tab\there"'],
    ),
    ("colors", r"(red|green|blue|yellow|orange|purple|black|white)", ["purple", "green"]),
    (
        "phrases",
        r"(The answer is (yes|no)\.|I (do not|don't) know\.)",
        ["The answer is yes.", "I don't know."],
    ),
    ("word_3_10", r"[a-z]{3,10}", ["banana", "abc"]),
    ("identifier_64", r"[a-zA-Z_][a-zA-Z0-9_]{0,63}", ["my_variable_name_2", "x"]),
    (
        "sentence",
        r"[A-Z][a-z ,']*[.!?]",
        ["The quick brown fox jumps over the lazy dog.", "Hello, it's me!"],
    ),
    ("card", r"[0-9]{4}( [0-9]{4}){3}", ["4111 1111 1111 1111"]),
    (
        "url",
        r"https?://[a-z0-9-]+(\.[a-z0-9-]+)+(/[A-Za-z0-9._~-]*)*",
        ["https://www.example.com/path/to/page.html", "http://docs.rs/regex"],
    ),
    ("hex_color", r"#[0-9a-fA-F]{6}", ["#1a2B3c"]),
    (
        "semver",
        r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?",
        ["1.2.3", "10.0.0-rc.1"],
    ),
    ("int_list", r"\[(-?[0-9]+(, -?[0-9]+)*)?\]", ["[1, 2, 3]", "[]", "[-10, 200, 3000, 4]"]),
    (
        "json_object",
        r'\{"name": "[^"\\]{1,40}", "age": (0|[1-9][0-9]{0,2}), '
        r'"email": "[a-z0-9._]+@[a-z0-9]+\.[a-z]{2,4}", "tags": \[("[a-z]+"(, "[a-z]+")*)?\]\}',
        [
            '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", '
            '"tags": ["math", "poetry"]}',
            '{"name": "Bob", "age": 7, "email": "b.o_b@mail.com", "tags": []}',
        ],
    ),
    (
        "json_records",
        r'(\{"id": [0-9]{1,6}, "ok": (true|false)\}, ){0,8}',
        ['{"id": 1, "ok": true}, {"id": 20417, "ok": false}, '],
    ),
    ("unicode_words", r"[a-zà-ÿ]+( [a-zà-ÿ]+)*", ["crème brûlée", "déjà vu"]),
    ("bullets", r"(- [A-Za-z ]+\n){1,5}", ["- apples\n- pears\n"]),
    (
        "string_200",
        r'"[^"\\\n]{0,200}"',
        ['"A bounded string: at most two hundred characters, any but quote, backslash, newline."'],
    ),
]
QUICK = ["int", "date", "email", "json_string", "colors"]


# --------------------------------------------------------------------------------------------
# eager builds (each in a fresh subprocess)
# --------------------------------------------------------------------------------------------


def eager_build(
    engine: str, tok_path: str, pattern: str, repeats: int, slow_s: float
) -> dict[str, Any]:
    """In a fresh process: the engine's full index for `pattern` (tokensieve: ``precompute``;
    outlines-core: ``Index``), its build time and memory."""
    eng = engine_adapters.load(engine, common.TokenizerInfo(tok_path))
    if engine == OC:
        build: Any = lambda: eng.compile_regex(pattern)  # noqa: E731
        warm: Any = lambda: eng.compile_regex("a")  # noqa: E731
    else:

        def build() -> Any:
            g = eng.compile_regex(pattern)
            return g, g.precompute()

        warm = lambda: eng.compile_regex("a").precompute()  # noqa: E731
    warm()  # fault in any one-time, per-vocabulary work outside the measurement
    gc.collect()
    trimmed = common.trim_heap()
    can_reset = common.reset_peak_rss()
    before = common.proc_status()
    t0 = time.perf_counter_ns()
    obj = build()
    t1 = time.perf_counter_ns()
    after = common.proc_status()
    times = [t1 - t0]
    base = before.get("VmRSS", 0) if can_reset else before.get("VmHWM", 0)
    out: dict[str, Any] = {
        "peak_rss_increase_kib": max(0, after.get("VmHWM", 0) - base),
        "retained_rss_kib": after.get("VmRSS", 0) - before.get("VmRSS", 0),
        "peak_exact": can_reset and trimmed,
    }
    if engine == OC:
        trans = obj.get_transitions()
        out["states"] = len(trans)
        out["transitions"] = sum(len(v) for v in trans.values())
    else:
        out.update(obj[1])
    del obj
    while len(times) < repeats and sum(times) < slow_s * 1e9:
        t0 = time.perf_counter_ns()
        obj = build()
        t1 = time.perf_counter_ns()
        del obj
        times.append(t1 - t0)
    out["build_ns"] = times
    return out


def run_eager(
    engine: str, tok_path: str, pattern: str, repeats: int, timeout: float, threads: int | None
) -> dict[str, Any]:
    env = {"RAYON_NUM_THREADS": str(threads)} if threads is not None else None
    # The child loads the vocabulary first (a second or so); the timeout is for the build.
    res = run_isolated(
        eager_build,
        (engine, tok_path, pattern, repeats, min(timeout, 5.0)),
        timeout=timeout + 30.0,
        env=env,
    )
    if res.get("timeout"):
        return {"timeout": True, "timeout_s": timeout}
    if res.get("died"):
        return {"error": res["error"]}
    if "build_ns" in res and res["build_ns"][0] > timeout * 1e9:
        res = {"timeout": True, "timeout_s": timeout, "observed_ns": res["build_ns"][0]}
    return res


# --------------------------------------------------------------------------------------------
# in-process measurements
# --------------------------------------------------------------------------------------------


def words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def ttfm(eng: Engine, pattern: str, repeats: int) -> tuple[list[int], Any]:
    """Time to first mask, `repeats` times: compile a fresh grammar, take its first matcher,
    fill the mask. Returns the times and the last compiled grammar."""
    out = []
    handle = None
    for _ in range(repeats):
        del handle
        t0 = time.perf_counter_ns()
        handle = eng.compile_regex(pattern)
        m = eng.first_matcher(handle)
        eng.fill(m)
        t1 = time.perf_counter_ns()
        out.append(t1 - t0)
        del m
    return out, handle


def step_pass(eng: Engine, m: Any, samples: list[list[int]]) -> tuple[list[int], list[str]]:
    """Time every mask fill along every sample (matcher `m` reset before each); returns (ns per
    fill, problems)."""
    times: list[int] = []
    problems: list[str] = []
    for si, toks in enumerate(samples):
        eng.reset(m)
        for k, tok in enumerate(toks):
            t0 = time.perf_counter_ns()
            eng.fill(m)
            t1 = time.perf_counter_ns()
            times.append(t1 - t0)
            if not eng.advance(m, tok):
                problems.append(f"sample {si}: token #{k} ({tok}) refused")
                break
        else:
            t0 = time.perf_counter_ns()
            eng.fill(m)
            t1 = time.perf_counter_ns()
            times.append(t1 - t0)
            if not eng.accepting(m):
                problems.append(f"sample {si}: not accepting at the end")
    return times, problems


def agreement(
    steppers: dict[str, tuple[Engine, Any]], samples: list[list[int]], special: np.ndarray
) -> dict[str, Any]:
    """Untimed cross-check: steps whose masks differ from tokensieve's (special ids ignored).
    `steppers` maps an engine name to its adapter and a matcher."""
    keep = ~special
    bufs: dict[str, np.ndarray] = {}
    diff = {e: 0 for e in steppers if e != TS}
    only: dict[str, list[int]] = {e: [0, 0] for e in diff}  # [ids only tokensieve allows, ...]
    example: dict[str, Any] = {}

    def ids(a: np.ndarray) -> np.ndarray:
        return np.nonzero(np.unpackbits(a.view(np.uint8), bitorder="little"))[0]

    first_counts: dict[str, int] = {}
    steps = 0
    for toks in samples:
        alive = set(steppers)
        for eng, m in steppers.values():
            eng.reset(m)
        for k in range(len(toks) + 1):
            for e in alive:
                eng, m = steppers[e]
                eng.bits[:] = -1  # a fill must write every word
                eng.fill(m)
                bufs[e] = eng.bits.copy()
                if k == 0 and e not in first_counts:
                    first_counts[e] = int(
                        np.unpackbits((bufs[e] & keep).view(np.uint8), bitorder="little").sum()
                    )
            if TS in alive:
                steps += 1
                ref = bufs[TS] & keep
                for e in alive - {TS}:
                    other = bufs[e] & keep
                    if not np.array_equal(other, ref):
                        diff[e] += 1
                        a = ids(ref & ~other)
                        b = ids(other & ~ref)
                        only[e][0] += len(a)
                        only[e][1] += len(b)
                        example.setdefault(
                            e,
                            {
                                "after_tokens": toks[:k],
                                "only_tokensieve": [int(t) for t in a[:8]],
                                "only_" + e: [int(t) for t in b[:8]],
                            },
                        )
            if k == len(toks):
                break
            alive = {e for e in alive if steppers[e][0].advance(steppers[e][1], toks[k])}
    return {
        "steps": steps,
        "differing_steps": diff,
        "ids_only_tokensieve_allows": {e: v[0] for e, v in only.items()},
        "ids_only_other_allows": {e: v[1] for e, v in only.items()},
        "first_difference": example,
        "first_mask_allowed": first_counts,
    }


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def stats_ns(xs: list[int], unit: float) -> dict[str, Any]:
    return {
        "n": len(xs),
        "p50": percentile(xs, 50) / unit if xs else None,
        "p99": percentile(xs, 99) / unit if xs else None,
        "min": min(xs) / unit if xs else None,
        "max": max(xs) / unit if xs else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small subset, fast (smoke test)")
    ap.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json or a folder holding one (default: ../shared/tokenizers/llama3)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="time-to-first-mask repeats")
    ap.add_argument("--timeout", type=float, default=None, help="eager build timeout, s")
    ap.add_argument("--regex", action="append", default=None, help="only these regex names")
    ap.add_argument("--out-dir", default=str(common.RESULTS_DIR))
    args = ap.parse_args()

    if args.tokenizer is None:
        tok_path = common.SHARED_TOKENIZERS / "llama3"
        if not (tok_path / "tokenizer.json").is_file():
            print(
                f"SKIP: the regex benchmark needs the shared vocabularies, and {tok_path}/"
                "tokenizer.json is missing (expected ../shared/tokenizers/ next to the repo). "
                "Pass --tokenizer PATH to use another tokenizer.json."
            )
            return 0
    else:
        tok_path = Path(args.tokenizer)
        if not common.resolve_tokenizer(tok_path)[1].is_file():
            print(f"error: no tokenizer.json at {tok_path}", file=sys.stderr)
            return 2
    if not engine_adapters.available(TS):
        print("error: tokensieve is not importable (run `make build`)", file=sys.stderr)
        return 2

    quick = args.quick
    repeats = args.repeats or (3 if quick else 7)
    timeout = args.timeout or (30.0 if quick else 60.0)
    regexes = [r for r in REGEXES if (not quick or r[0] in QUICK)]
    if args.regex:
        regexes = [r for r in REGEXES if r[0] in args.regex]
    for name, pat, samples in regexes:
        for s in samples:
            if not re.fullmatch(pat, s):
                raise SystemExit(f"benchmark bug: sample {s!r} does not match {name}")

    engines = [TS]
    notes: list[str] = []
    if engine_adapters.available(LLG):
        engines.append(LLG)
    else:
        notes.append(
            "llguidance is not installed: its columns are skipped (pip install llguidance)"
        )
    if engine_adapters.available(OC):
        engines.append(OC)
    else:
        notes.append(
            "outlines-core is not installed: its columns are skipped (pip install outlines-core)"
        )
    for n in notes:
        print("NOTE:", n)

    info = common.TokenizerInfo(tok_path)
    tok_name = info.folder.name if info.file.name == "tokenizer.json" else info.file.stem
    machine = common.machine_info(
        ["tokensieve", "llguidance", "outlines-core", "numpy", "tokenizers"]
    )
    load = machine["load_avg_1_5_15min_at_start"]
    if load and load[0] > 0.5:
        notes.append(
            f"the machine was not idle at the start (1-minute load average {load[0]} on "
            f"{machine['usable_cores']} cores): timings may be noisy"
        )
        print("NOTE:", notes[-1])
    print(
        f"regex benchmark: {tok_name} ({info.file}), {len(regexes)} regexes, "
        f"{machine['cpu']}, {machine['usable_cores']} cores" + (" [quick]" if quick else "")
    )

    # ---- setup: every engine's vocabulary once (as a server would) --------------------------
    setup: dict[str, Any] = {}
    eng: dict[str, Engine] = {}
    for e in engines:
        t0 = time.perf_counter()
        eng[e] = engine_adapters.load(e, info)
        setup[e] = {"vocab_load_s": time.perf_counter() - t0}
    vts = eng[TS].vocab  # type: ignore[attr-defined]
    for e in engines:
        setup[e]["vocab_size"] = eng[LLG].tok.vocab_size if e == LLG else vts.vocab_size  # type: ignore[attr-defined]
    nwords = words(vts.vocab_size)
    special = np.zeros((1, nwords), dtype=np.int32)
    flat = special.view(np.uint32).reshape(-1)
    for i in [*vts.special_token_ids, *vts.eos_token_ids, *range(info.size, vts.vocab_size)]:
        flat[i // 32] |= np.uint32(1 << (i % 32))

    try:
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(str(info.file))

        def encode(s: str) -> list[int]:
            return list(hf.encode(s, add_special_tokens=False).ids)

    except ImportError:
        if LLG not in eng:
            print("error: need `tokenizers` (or llguidance) to tokenize samples", file=sys.stderr)
            return 2
        notes.append("samples tokenized with llguidance (the `tokenizers` package is missing)")
        ltok = eng[LLG].tok  # type: ignore[attr-defined]

        def encode(s: str) -> list[int]:
            return list(ltok.tokenize_str(s))

    # warm-up, same for every engine: fault in one-time per-vocabulary work
    for e in engines:
        ttfm(eng[e], "(ab|cd)[0-9]+", 2)

    results: list[dict[str, Any]] = []
    for name, pat, samples in regexes:
        results.append(
            {
                "name": name,
                "regex": pat,
                "samples": samples,
                "tokens": [encode(s) for s in samples],
                "eager": {},
                "ttfm": {},
                "mask": {},
            }
        )

    # ---- 1. eager full index, each build in a fresh subprocess ------------------------------
    print(f"[1/3] eager full-index builds (fresh subprocess each; {OC} timeout {timeout:.0f} s)")
    eager_runs = [(TS, None), (TS + "_1thread", 1)] + ([(OC, None)] if OC in engines else [])
    for r in results:
        line = [f"  {r['name']:<14}"]
        for key, threads in eager_runs:
            engine = OC if key == OC else TS
            res = run_eager(engine, str(info.file), r["regex"], 5, timeout, threads)
            r["eager"][key] = res
            if "build_ns" in res:
                line.append(f"{key} {num(percentile(res['build_ns'], 50) / 1e6)} ms")
            else:
                line.append(f"{key} {'timeout' if res.get('timeout') else 'error'}")
        print("  ".join(line), flush=True)

    # ---- 2. time to first mask ---------------------------------------------------------------
    print(f"[2/3] time to first mask ({repeats} repeats; fresh grammar each time)")
    kept: dict[str, dict[str, Any]] = {e: {} for e in engines}  # compiled grammars, by regex
    gc.disable()
    try:
        for r in results:
            pat = r["regex"]
            for e in engines:
                n = repeats
                if e == OC:
                    ev = r["eager"][OC]
                    if ev.get("timeout"):
                        r["ttfm"][OC] = {"timeout": True}
                        continue
                    if "build_ns" in ev and ev["build_ns"][0] > 0.3e9:
                        n = 1
                try:
                    ns, handle = ttfm(eng[e], pat, n)
                    r["ttfm"][e] = {"ns": ns}
                    if e != TS:  # tokensieve's walks start from a fresh, lazy grammar
                        kept[e][r["name"]] = handle
                except Exception as ex:
                    r["ttfm"][e] = {"error": f"{type(ex).__name__}: {ex}"}
            gc.collect()
            cells = []
            for e in engines:
                d = r["ttfm"].get(e, {})
                cells.append(
                    f"{e} {num(percentile(d['ns'], 50) / 1e6)} ms" if "ns" in d else f"{e} –"
                )
            print(f"  {r['name']:<14}" + "  ".join(cells), flush=True)
    finally:
        gc.enable()

    # ---- 3. mask time per token ---------------------------------------------------------------
    print("[3/3] mask time per token along the samples")
    gc.disable()
    try:
        for r in results:
            toks = r["tokens"]
            pat = r["regex"]
            if "ns" in r["ttfm"][TS]:
                g = eng[TS].compile_regex(pat)  # fresh, lazy: pass 1 computes masks
                m = eng[TS].matcher(g)
                cold, p1 = step_pass(eng[TS], m, toks)
                warm, p2 = step_pass(eng[TS], m, toks)
                r["mask"][TS + "_cold"] = {"ns": cold, "problems": p1}
                r["mask"][TS + "_warm"] = {"ns": warm, "problems": p2}
                r["ts_stats_after_walk"] = g.stats()
            for e in (LLG, OC):
                if r["name"] in kept.get(e, {}):
                    m = eng[e].matcher(kept[e][r["name"]])
                    a, p1 = step_pass(eng[e], m, toks)
                    b, p2 = step_pass(eng[e], m, toks)
                    r["mask"][e + "_pass1"] = {"ns": a, "problems": p1}
                    r["mask"][e + "_pass2"] = {"ns": b, "problems": p2}
            gc.collect()
            # untimed: do the engines agree on the masks along the samples?
            steppers: dict[str, tuple[Engine, Any]] = {}
            if "ns" in r["ttfm"][TS]:
                steppers[TS] = (eng[TS], eng[TS].matcher(eng[TS].compile_regex(pat)))
            for e in (LLG, OC):
                if r["name"] in kept.get(e, {}):
                    steppers[e] = (eng[e], eng[e].matcher(kept[e][r["name"]]))
            if TS in steppers and len(steppers) > 1:
                r["agreement"] = agreement(steppers, toks, special)
            m = r["mask"]
            cells = []
            for key in m:
                s = stats_ns(m[key]["ns"], 1e3)
                cells.append(f"{key} {num(s['p50'])}/{num(s['p99'])}")
            print(f"  {r['name']:<14}" + "  ".join(cells) + " µs p50/p99", flush=True)
    finally:
        gc.enable()
    kept.clear()

    report = summarize(results, engines, setup, machine, info, tok_name, quick, repeats, timeout)
    report["notes"] = notes + report["notes"]
    text, md = render(report)
    print()
    print(text)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"regex_{tok_name}" + ("_quick" if quick else "")
    (out_dir / f"{stem}.md").write_text(md, encoding="utf-8")
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {out_dir / (stem + '.md')} and {stem}.json")
    return 0


# --------------------------------------------------------------------------------------------
# summary and rendering
# --------------------------------------------------------------------------------------------


def _p50(d: dict[str, Any] | None, key: str = "ns", unit: float = 1e6) -> float | None:
    if not d or key not in d or not d[key]:
        return None
    v = percentile(d[key], 50)
    return None if v is None else v / unit


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(
    results: list[dict[str, Any]],
    engines: list[str],
    setup: dict[str, Any],
    machine: dict[str, Any],
    info: common.TokenizerInfo,
    tok_name: str,
    quick: bool,
    repeats: int,
    timeout: float,
) -> dict[str, Any]:
    rows = []
    pooled_ttfm: dict[str, list[int]] = {e: [] for e in engines}
    pooled_mask: dict[str, list[int]] = {}
    notes: list[str] = []
    for r in results:
        row: dict[str, Any] = {"name": r["name"], "regex": r["regex"], "samples": r["samples"]}
        row["tokens_per_sample"] = [len(t) for t in r["tokens"]]
        row["ttfm_ms"] = {}
        for e in engines:
            d = r["ttfm"].get(e, {})
            if "ns" in d:
                pooled_ttfm[e] += d["ns"]
                row["ttfm_ms"][e] = {"p50": _p50(d), "runs_ns": d["ns"]}
            else:
                row["ttfm_ms"][e] = {k: v for k, v in d.items()}
                what = "timed out" if d.get("timeout") else d.get("error", "skipped")
                notes.append(f"{r['name']}: {e} first mask: {what}")
        row["mask_us"] = {}
        seen: set[tuple[str, str]] = set()
        for key, d in r["mask"].items():
            pooled_mask.setdefault(key, []).extend(d["ns"])
            row["mask_us"][key] = {**stats_ns(d["ns"], 1e3), "problems": d["problems"]}
            engine = key.rsplit("_", 1)[0]
            for p in d["problems"]:
                if (engine, p) not in seen:  # the second pass repeats the first one's
                    seen.add((engine, p))
                    notes.append(f"{r['name']}: {engine}: {p}")
            row["mask_us"][key]["steps_ns"] = d["ns"]
        row["eager"] = {}
        for key, d in r["eager"].items():
            e = dict(d)
            if "build_ns" in d:
                e["build_ms"] = percentile(d["build_ns"], 50) / 1e6
            elif d.get("timeout"):
                notes.append(f"{r['name']}: {key} eager build timed out (> {timeout:.0f} s)")
            else:
                notes.append(f"{r['name']}: {key} eager build failed: {d.get('error')}")
            row["eager"][key] = e
        ts_b = row["eager"].get(TS, {}).get("build_ms")
        ts1_b = row["eager"].get(TS + "_1thread", {}).get("build_ms")
        oc_b = row["eager"].get(OC, {}).get("build_ms")
        ts_t = row["ttfm_ms"].get(TS, {}).get("p50")
        row["ratios"] = {
            "oc_over_ts_build": _ratio(oc_b, ts_b),
            "oc_over_ts1_build": _ratio(oc_b, ts1_b),
            "llg_over_ts_ttfm": _ratio(row["ttfm_ms"].get(LLG, {}).get("p50"), ts_t),
            "oc_over_ts_ttfm": _ratio(row["ttfm_ms"].get(OC, {}).get("p50"), ts_t),
            "llg_over_ts_mask_p50": _ratio(
                row["mask_us"].get(LLG + "_pass2", {}).get("p50"),
                row["mask_us"].get(TS + "_warm", {}).get("p50"),
            ),
        }
        if "agreement" in r:
            row["agreement"] = r["agreement"]
            ag = r["agreement"]
            for e, n in ag["differing_steps"].items():
                if n:
                    ex = ag["first_difference"][e]
                    prefix = b"".join(info.token_bytes[t] or b"" for t in ex["after_tokens"])
                    a = [info.token_bytes[t] for t in ex["only_tokensieve"]]
                    b = [info.token_bytes[t] for t in ex["only_" + e]]
                    notes.append(
                        f"{r['name']}: {e}'s mask differs from tokensieve's at {n} of "
                        f"{ag['steps']} steps (special ids ignored): summed over those steps, "
                        f"{ag['ids_only_tokensieve_allows'][e]} ids only tokensieve allows, "
                        f"{ag['ids_only_other_allows'][e]} only {e} allows; first after "
                        f"{prefix!r}: only tokensieve {a}, only {e} {b}"
                    )
        row["ts_stats_after_walk"] = r.get("ts_stats_after_walk")
        rows.append(row)

    def agg(key: str) -> dict[str, Any]:
        vals = [x["ratios"][key] for x in rows if x["ratios"][key] is not None]
        return {
            "geomean": geomean(vals),
            "min": min(vals) if vals else None,
            "max": max(vals) if vals else None,
            "n": len(vals),
            "n_ge_10": sum(v >= 10 for v in vals),
        }

    oc_timeouts = [x["name"] for x in rows if x["eager"].get(OC, {}).get("timeout")]
    summary: dict[str, Any] = {
        "ratios": {k: agg(k) for k in rows[0]["ratios"]} if rows else {},
        "ttfm_ms_pooled": {
            e: {"p50": _p50({"ns": v}), "p99": (percentile(v, 99) or 0) / 1e6 if v else None}
            for e, v in pooled_ttfm.items()
        },
        "ttfm_ms_worst_regex_p50": {
            e: max(
                (x["ttfm_ms"][e]["p50"] for x in rows if x["ttfm_ms"][e].get("p50") is not None),
                default=None,
            )
            for e in engines
        },
        "mask_us_pooled": {k: stats_ns(v, 1e3) for k, v in pooled_mask.items()},
        "eager_ms_total": {
            k: sum(x["eager"].get(k, {}).get("build_ms") or 0 for x in rows)
            for k in ([TS, TS + "_1thread"] + ([OC] if OC in engines else []))
        },
        "outlines_timeouts": oc_timeouts,
    }
    ts_ttfm = summary["ttfm_ms_pooled"][TS]["p50"]
    ts_warm = summary["mask_us_pooled"].get(TS + "_warm", {}).get("p50")
    build = summary["ratios"].get("oc_over_ts_build", {})
    summary["targets"] = {
        "first_mask_p50_le_2ms": {
            "value_ms": ts_ttfm,
            "worst_regex_ms": summary["ttfm_ms_worst_regex_p50"][TS],
            "pass": ts_ttfm is not None and ts_ttfm <= 2.0,
        },
        "cached_mask_p50_le_5us": {
            "value_us": ts_warm,
            "pass": ts_warm is not None and ts_warm <= 5.0,
        },
        "build_ge_10x_outlines": {
            "geomean": build.get("geomean"),
            "min": build.get("min"),
            "regexes_ge_10x": f"{build.get('n_ge_10')}/{build.get('n')}",
            "pass": build.get("min") is not None and build["min"] >= 10,
        }
        if OC in engines
        else {"pass": None, "note": "outlines-core not installed"},
    }
    return {
        "benchmark": "regex",
        "tokenizer": tok_name,
        "tokenizer_file": str(info.file),
        "vocab_size": setup[TS]["vocab_size"],
        "eos_id": info.eos_id,
        "quick": quick,
        "ttfm_repeats": repeats,
        "outlines_timeout_s": timeout,
        "engines": engines,
        "machine": machine,
        "setup": setup,
        "summary": summary,
        "regexes": rows,
        "notes": notes,
    }


def _cell(d: dict[str, Any], k: str = "p50", unit: float = 1.0) -> str:
    if d.get("timeout"):
        return "timeout"
    if "error" in d:
        return "error"
    v = d.get(k)
    return num(v * unit) if v is not None else "–"


def _x(v: float | None) -> str:
    return f"{num(v)}×" if v is not None else "–"


def render(rep: dict[str, Any]) -> tuple[str, str]:
    s = rep["summary"]
    engines = rep["engines"]
    has_llg, has_oc = LLG in engines, OC in engines
    rat = s["ratios"]

    def ratio_line(label: str, key: str) -> tuple[str, str]:
        a = rat.get(key, {})
        if not a.get("n"):
            return label, "n/a"
        extra = f", {a['n_ge_10']}/{a['n']} regexes ≥ 10×" if "build" in key else ""
        return (
            label,
            f"{_x(a['geomean'])} geomean (min {_x(a['min'])}, max {_x(a['max'])}{extra})",
        )

    ratio_rows = []
    if has_oc:
        ratio_rows.append(ratio_line("outlines-core / tokensieve, eager build", "oc_over_ts_build"))
        ratio_rows.append(
            ratio_line("outlines-core / tokensieve (1 thread), eager build", "oc_over_ts1_build")
        )
    if has_llg:
        ratio_rows.append(ratio_line("llguidance / tokensieve, first mask", "llg_over_ts_ttfm"))
    if has_oc:
        ratio_rows.append(ratio_line("outlines-core / tokensieve, first mask", "oc_over_ts_ttfm"))
    if has_llg:
        ratio_rows.append(
            ratio_line("llguidance (pass 2) / tokensieve (warm), mask p50", "llg_over_ts_mask_p50")
        )

    tg = s["targets"]
    t1, t2, t3 = (
        tg["first_mask_p50_le_2ms"],
        tg["cached_mask_p50_le_5us"],
        tg["build_ge_10x_outlines"],
    )

    def ok(p: bool | None) -> str:
        return "n/a" if p is None else ("PASS" if p else "MISS")

    target_rows = [
        (
            "first mask ≤ 2 ms p50",
            f"{num(t1['value_ms'])} ms pooled p50, worst regex p50 {num(t1['worst_regex_ms'])} ms",
            ok(t1["pass"]),
        ),
        ("cached mask ≤ 5 µs p50", f"{num(t2['value_us'])} µs (warm pass, pooled)", ok(t2["pass"])),
        (
            "eager build ≥ 10× faster than outlines-core Index",
            (
                f"min {_x(t3.get('min'))}, geomean {_x(t3.get('geomean'))}, "
                f"{t3.get('regexes_ge_10x')} regexes"
            )
            if has_oc
            else "outlines-core not installed",
            ok(t3["pass"]),
        ),
    ]

    # per-regex tables
    ttfm_head = ["regex", "tokens"] + [f"{e} ms" for e in engines] + ["ts max ms"]
    if has_llg:
        ttfm_head.append("llg/ts ×")
    if has_oc:
        ttfm_head.append("oc/ts ×")
    mask_keys = [TS + "_cold", TS + "_warm"]
    if has_llg:
        mask_keys += [LLG + "_pass1", LLG + "_pass2"]
    if has_oc:
        mask_keys += [OC + "_pass1"]
    short = {
        TS + "_cold": "ts cold",
        TS + "_warm": "ts warm",
        LLG + "_pass1": "llg pass1",
        LLG + "_pass2": "llg pass2",
        OC + "_pass1": "oc",
    }
    mask_head = ["regex", "steps"] + [f"{short[k]} p50/p99" for k in mask_keys]
    eager_head = ["regex", "ts ms", "ts 1-thr ms"]
    if has_oc:
        eager_head += ["oc ms", "oc/ts ×", "oc/ts1 ×"]
    eager_head += ["ts states", "ts masks", "ts mask KiB", "ts peak MiB"]
    if has_oc:
        eager_head += ["oc states", "oc peak MiB"]
    if has_llg:
        eager_head += ["llg"]
    ttfm_rows, mask_rows, eager_rows = [], [], []
    for x in rep["regexes"]:
        tm = x["ttfm_ms"]
        row = [x["name"], "+".join(str(n) for n in x["tokens_per_sample"])]
        row += [_cell(tm.get(e, {})) for e in engines]
        runs = tm.get(TS, {}).get("runs_ns")
        row.append(num(max(runs) / 1e6) if runs else "–")
        if has_llg:
            row.append(_x(x["ratios"]["llg_over_ts_ttfm"]))
        if has_oc:
            row.append(_x(x["ratios"]["oc_over_ts_ttfm"]))
        ttfm_rows.append(row)
        mu = x["mask_us"]
        steps = mu.get(TS + "_cold", {}).get("n")
        row = [x["name"], str(steps) if steps is not None else "–"]
        for k in mask_keys:
            d = mu.get(k)
            row.append(f"{num(d['p50'])} / {num(d['p99'])}" if d else "–")
        mask_rows.append(row)
        eg = x["eager"]
        ets, ets1, eoc = eg.get(TS, {}), eg.get(TS + "_1thread", {}), eg.get(OC, {})
        row = [x["name"], _cell(ets, "build_ms"), _cell(ets1, "build_ms")]
        if has_oc:
            row += [
                _cell(eoc, "build_ms") if not eoc.get("timeout") else f"> {eoc['timeout_s']:.0f} s",
                _x(x["ratios"]["oc_over_ts_build"]),
                _x(x["ratios"]["oc_over_ts1_build"]),
            ]

        def mib(d: dict[str, Any]) -> str:
            v = d.get("peak_rss_increase_kib")
            return num(v / 1024) if v is not None else "–"

        row += [
            str(ets.get("states", "–")),
            str(ets.get("distinct_masks", "–")),
            num(ets["mask_bytes"] / 1024) if "mask_bytes" in ets else "–",
            mib(ets),
        ]
        if has_oc:
            row += [str(eoc.get("states", "–")), mib(eoc)]
        if has_llg:
            row.append("n/a")
        eager_rows.append(row)

    pooled_rows = []
    for k in mask_keys:
        d = s["mask_us_pooled"].get(k)
        if d:
            pooled_rows.append([short[k], str(d["n"]), num(d["p50"]), num(d["p99"])])
    ttfm_pooled = [
        [
            e,
            num(d["p50"]),
            num(d["p99"]),
            str(sum(x["ttfm_ms"][e].get("p50") is not None for x in rep["regexes"])),
        ]
        for e, d in s["ttfm_ms_pooled"].items()
    ]
    et = s["eager_ms_total"]
    eager_total = [[k, num(v)] for k, v in et.items()]

    m = rep["machine"]
    setup_rows = [
        [e, num(d["vocab_load_s"] * 1e3), str(d["vocab_size"])] for e, d in rep["setup"].items()
    ]

    # --- terminal ---
    t: list[str] = []
    t.append(
        f"=== regex benchmark: {rep['tokenizer']} (vocab {rep['vocab_size']}), "
        f"{len(rep['regexes'])} regexes{' [quick]' if rep['quick'] else ''} ==="
    )
    t.append(
        f"{m['cpu']}, {m['usable_cores']} cores, {m['memory_gib']} GiB; "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
    )
    t.append("\nRatios (> 1 = tokensieve faster)")
    t.append(text_table(["", "value"], ratio_rows))
    t.append("\nTargets")
    t.append(text_table(["target", "measured", ""], target_rows))
    t.append("\nTime to first mask (compile + first fill), p50 per regex, ms")
    t.append(text_table(ttfm_head, ttfm_rows))
    t.append(
        "\nMask time per token, µs (p50 / p99 over every step of every sample; Python call timed)"
    )
    t.append(text_table(mask_head, mask_rows))
    t.append("\nEager full index (fresh subprocess per build): time p50, size, peak RSS increase")
    t.append(text_table(eager_head, eager_rows))
    t.append("\nPooled over all regexes")
    t.append(text_table(["first mask", "p50 ms", "p99 ms", "regexes"], ttfm_pooled))
    t.append(text_table(["mask per token", "steps", "p50 µs", "p99 µs"], pooled_rows))
    t.append(text_table(["eager build, sum over regexes", "ms"], eager_total))
    if rep["notes"]:
        t.append("\nNotes")
        t += [f"  - {n}" for n in rep["notes"]]

    # --- markdown ---
    md: list[str] = []
    md.append(f"# Regex benchmark — {rep['tokenizer']}{' (quick)' if rep['quick'] else ''}\n")
    md.append(
        f"Generated by `python benches/bench_regex.py{' --quick' if rep['quick'] else ''}` on "
        f"{m['date']}. Column meanings: [benches/README.md](../README.md).\n"
    )
    md.append("## Machine\n")
    md.append(
        md_table(
            ["", ""],
            [
                *machine_rows(m),
                *[[k, str(v) if v else "not installed"] for k, v in m["packages"].items()],
                ["tokenizer", f"`{rep['tokenizer_file']}` (vocab {rep['vocab_size']})"],
                ["first-mask repeats", str(rep["ttfm_repeats"])],
                ["outlines-core build timeout", f"{rep['outlines_timeout_s']:.0f} s"],
            ],
        )
    )
    md.append("\nVocabulary / tokenizer object built once per engine (not in any timing below):\n")
    md.append(md_table(["engine", "load ms", "vocab size"], setup_rows))
    md.append("\n## Ratios (> 1 means tokensieve is faster)\n")
    md.append(md_table(["comparison", "value"], ratio_rows))
    md.append("\n## Targets\n")
    md.append(md_table(["target", "measured", "result"], target_rows))
    md.append("\n## Time to first mask (fresh compile + first fill), p50 per regex, ms\n")
    md.append(md_table(ttfm_head, ttfm_rows))
    md.append("\n## Mask time per token, µs: p50 / p99 over every step of every sample\n")
    md.append(md_table(mask_head, mask_rows))
    md.append("\nPooled over all regexes:\n")
    md.append(md_table(["engine / pass", "steps", "p50 µs", "p99 µs"], pooled_rows))
    md.append("\n## Eager full index: build time (p50), size, peak RSS increase\n")
    md.append(md_table(eager_head, eager_rows))
    md.append("\n" + md_table(["eager build, sum over regexes", "ms"], eager_total))
    md.append("\n## Regexes\n")
    md.append(
        md_table(
            ["name", "regex", "samples"],
            [
                [
                    x["name"],
                    f"`{x['regex']}`",
                    ", ".join(f"`{json.dumps(smp, ensure_ascii=False)}`" for smp in x["samples"]),
                ]
                for x in rep["regexes"]
            ],
        )
    )
    if rep["notes"]:
        md.append("\n## Notes\n")
        md += [f"- {n}" for n in rep["notes"]]
    return "\n".join(t), "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
