"""Grammar benchmark: GBNF (or Lark) grammars, tokensieve beside xgrammar and llguidance.

    python benches/bench_grammars.py [--tokenizer PATH] [--extra DIR] [--repeats N] [--out-dir DIR]
    python benches/bench_grammars.py --lark [--tokenizer PATH] [--repeats N] [--out-dir DIR]

For one vocabulary (default: the Llama 3 ``tokenizer.json`` in ``../shared/tokenizers/llama3``)
and every grammar of ``tests/grammars/`` (and of ``--extra DIR``, e.g. a checkout of llama.cpp's
``grammars/``), it measures

* time to first mask: compile the grammar text, make a matcher, fill the first mask (the
  vocabulary object is built once per engine, outside every timing; xgrammar's compile cache
  is cleared before each compile). ``--repeats`` compiles per grammar; the median is reported,
  the first (cold) one too;
* mask time per token along one fixed walk per grammar: a hand-written sample text tokenized by
  the tokenizer (grammars of ``--extra``: a seeded walk of at most 60 tokens under tokensieve's
  masks), every fill timed, the one after the last token (EOS allowed) included. tokensieve is
  walked twice with the same grammar: cold (lazy masks built on the way) and warm (cached).

Each engine reads the grammar the way a user hands it GBNF: ``Grammar.from_ebnf(text)``,
``xgrammar.Grammar.from_ebnf(text)`` and ``llguidance.grammar_from("gbnf", text)``. Where an
anchor refuses the text as written (xgrammar has no ``.`` and no ``{,n}``; llguidance's
``gbnf_to_lark`` mistranslates ``\\u``/``\\U`` escapes and makes greedy lexemes of literal-only
rules, which may refuse the walk), it gets the flat rendering of ``tests/grammar_anchors.py``
(same language; marked ``*`` in the tables). Results: a table on stdout,
``benches/results/grammars.md`` and ``.json``.

``--lark``: the Lark grammars of ``tests/grammars/lark/`` instead, each engine reading the text
as written — ``Grammar.from_lark(text)``, ``llguidance.grammar_from("lark", text)`` and
``xgrammar.Grammar.from_lark(text)`` compiled — with the same two measures, along a hand-written
sample (``LARK_SAMPLES``, in every engine's language); results in ``grammars_lark.md``/``.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import common  # noqa: E402
import engines as engine_adapters  # noqa: E402
import grammar_anchors as ga  # noqa: E402
from common import machine_rows, md_table, num, percentile  # noqa: E402
from engines import LLG, TS, XGR, CompileError, Engine  # noqa: E402

GRAMMARS = HERE.parent / "tests" / "grammars"
WALK_TOKENS = 60

# one realistic text per committed grammar (checked against the oracle before anything runs)
SAMPLES: dict[str, str] = {
    "arith_left": "total(price * 3, tax) - discount / 2 + (rate^2 - 1.25) * -x % 7",
    "indirect_left": "config.servers[0].endpoints(primary, backup.url).retry[3].timeout",
    "nested": "(let [x {a b} y <c d>] {nested (deep [deeper {deepest}])})",
    "minilang": (
        "fn fib(n) { if n < 2 { return n; } else { return fib(n - 1) + fib(n - 2); } }\n"
        'let total = 0;\nwhile total <= 100 && !done { total = total + fib(10); print("sum\\t"); }'
    ),
    "json": (
        '{\n  "name": "Ada Lovelace",\n  "born": 1815,\n  "tags": ["math", "poetry"],\n'
        '  "notes": "Analytical Engine \\u00e9",\n  "ratio": -0.5e3,\n  "alive": false\n}'
    ),
    "json_default_ws": (
        '{"name": "Ada Lovelace", "born": 1815, "tags": ["math","poetry"], '
        '"engine": {"kind": "analytical", "gears": null, "score": 9.75E-1}}'
    ),
    "chess_san": (
        "1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7 6. Re1 b5 7. Bb3 d6 8. c3 O-O "
        "9. h3 Nb8 10. d4 Nbd7 11. c4 c6 12. cxb5 axb5 13. Nc3 Bb7 14. Bg5 b4 15. Nb1 h6 1/2-1/2"
    ),
    "csv": (
        'id,name,city,score\n1,Ada,London,98.5\n2,"Babbage, Charles",London,87\n'
        '3,"Grace ""Amazing"" Hopper",New York,\n4,Alan,Wilmslow,91\n'
    ),
    "unicode_repeat": 'αβγδε-Ωμεγα; "naïve café"; 😀😃☀; §2024-AB',
    "unreachable": "hey, Margaret!",
}


# --------------------------------------------------------------------------------------------
# engines: the bench adapters with a GBNF compile
# --------------------------------------------------------------------------------------------


class Compiled:
    """A compiled grammar and how the engine got it (``flat``: the flat rendering)."""

    def __init__(self, handle: Any, flat: bool, why: str = "") -> None:
        self.handle = handle
        self.flat = flat
        self.why = why  # the refusal of the text as written


LARK = GRAMMARS / "lark"
# one realistic text per Lark grammar (each engine must accept it: a refusal is reported)
LARK_SAMPLES: dict[str, str] = {
    "arithmetic": "12 * (3 + 4.5) - -2 / 7 + 1e3 * (2 - 0.25)",
    "keywords": "if x then y; z = w; print q; if iff then thenx; print print;",
    "json": '{"name": "tokensieve", "tags": ["a", "b\\n"], "n": -1.5e3, "ok": true, "none": null}',
    "csv": 'name,age,city\nalice,30,"Paris, France"\nbob,25,\n',
    "sql": "SELECT name, age FROM people WHERE age = 30",
    "json_tool_call": '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
    "tool_calls": (
        'Let me look that up. <call>weather(city="Paris", days=3)</call> and '
        "<call>time()</call> Done."
    ),
}


def compile_lark(eng: Engine, text: str) -> Compiled:
    """Compile the Lark ``text`` with ``eng``, as written."""
    try:
        if eng.name == TS:
            return Compiled(eng.ts.Grammar.from_lark(text, eng.vocab), False)  # type: ignore[attr-defined]
        if eng.name == XGR:
            xgr, compiler = eng.xgr, eng.compiler  # type: ignore[attr-defined]
            compiler.clear_cache()
            return Compiled(compiler.compile_grammar(xgr.Grammar.from_lark(text)), False)
        if eng.name == LLG:
            llg = eng.llg  # type: ignore[attr-defined]
            return Compiled(eng._matcher(llg.grammar_from("lark", text)), False)  # type: ignore[attr-defined]
    except CompileError:
        raise
    except Exception as e:  # noqa: BLE001 - the engine refused the grammar: reported
        raise CompileError(f"{type(e).__name__}: {str(e).strip()[:200]}") from None
    raise CompileError(f"{eng.name}: no Lark here")


def lark_rows(eng: dict[str, Engine], engines: list[str], hf: Any, repeats: int) -> list[Any]:
    """The ``--lark`` measures: per grammar and engine, first mask and the sample's fills."""
    rows: list[dict[str, Any]] = []
    for path in sorted(LARK.glob("*.lark")):
        text = path.read_text(encoding="utf-8")
        sample = LARK_SAMPLES[path.stem]
        walk = hf.encode(sample, add_special_tokens=False).ids
        row: dict[str, Any] = {
            "grammar": path.stem,
            "file": str(path),
            "engines": {},
            "walk": {"kind": "sample", "text": sample, "tokens": len(walk)},
        }
        for e in engines:
            res: dict[str, Any] = {}
            row["engines"][e] = res
            times: list[int] = []
            c = None
            try:
                for _ in range(repeats):
                    del c
                    t0 = time.perf_counter_ns()
                    c = compile_lark(eng[e], text)
                    m = eng[e].first_matcher(c.handle)
                    eng[e].fill(m)
                    times.append(time.perf_counter_ns() - t0)
                    del m
            except CompileError as err:
                res.update(ok=False, error=str(err)[:300])
                print(f"  {path.stem:16} {e:10} error: {res['error'][:120]}", flush=True)
                continue
            assert c is not None
            res.update(ok=True, flat=False, ttfm_ns=times)
            m = eng[e].matcher(c.handle)
            problem = None
            for p in ["cold", "warm"] if e == TS else ["steps"]:
                ns, problem = step_pass(eng[e], m, walk)
                res[f"{p}_ns"] = ns
                if problem:
                    break
            res["problem"] = problem
            key = "warm_ns" if e == TS else "steps_ns"
            line = f"  {path.stem:16} {e:10} ttfm p50 {num(stats(times, 1e6)['p50'])} ms"
            if res.get(key):
                line += f", mask p50 {num(stats(res[key], 1e3)['p50'])} µs"
            print(line + (f" PROBLEM {problem}" if problem else ""), flush=True)
        rows.append(row)
    return rows


def compile_grammar(eng: Engine, text: str, flat: ga.Flat, force_flat: bool = False) -> Compiled:
    """Compile ``text`` with ``eng`` as a user would; the flat rendering where it refuses."""
    if eng.name == TS:
        try:
            return Compiled(eng.ts.Grammar.from_ebnf(text, eng.vocab), False)  # type: ignore[attr-defined]
        except eng.ts.TokensieveError as e:  # type: ignore[attr-defined]
            raise CompileError(f"{type(e).__name__}: {e}") from None
    if eng.name == XGR:
        xgr, compiler = eng.xgr, eng.compiler  # type: ignore[attr-defined]
        compiler.clear_cache()
        why = "forced"
        if not force_flat:
            try:
                return Compiled(compiler.compile_grammar(xgr.Grammar.from_ebnf(text)), False)
            except Exception as e:  # noqa: BLE001 - xgrammar refuses the syntax: flat rendering
                why = str(e).strip().splitlines()[-1]
                if "EBNF parser error" in why:  # no time stamp, no source path
                    why = why[why.index("EBNF parser error") :]
                why = why[:200]
        try:
            flat_text = ga.to_gbnf(flat)
            return Compiled(compiler.compile_grammar(xgr.Grammar.from_ebnf(flat_text)), True, why)
        except Exception as e:  # noqa: BLE001
            raise CompileError(f"{type(e).__name__}: {str(e).strip()[:200]}") from None
    if eng.name == LLG:
        llg = eng.llg  # type: ignore[attr-defined]
        why = "forced"
        if not force_flat:
            try:
                return Compiled(eng._matcher(llg.grammar_from("gbnf", text)), False)  # type: ignore[attr-defined]
            except (CompileError, ValueError) as e:
                why = str(e).strip().splitlines()[0][:200]
        lark = ga.to_lark(flat)
        return Compiled(eng._matcher(llg.grammar_from("lark", lark)), True, why)  # type: ignore[attr-defined]
    raise CompileError(f"{eng.name}: no GBNF here")


def ttfm(
    eng: Engine, text: str, flat: ga.Flat, repeats: int, force_flat: bool
) -> tuple[list[int], Compiled]:
    """Time to first mask, ``repeats`` times: compile, first matcher, first fill."""
    out = []
    c = None
    for _ in range(repeats):
        del c
        t0 = time.perf_counter_ns()
        c = compile_grammar(eng, text, flat, force_flat)
        m = eng.first_matcher(c.handle)
        eng.fill(m)
        out.append(time.perf_counter_ns() - t0)
        del m
    assert c is not None
    return out, c


def step_pass(eng: Engine, m: Any, toks: list[int]) -> tuple[list[int], str | None]:
    """Every fill along ``toks`` timed (``m`` reset first); (ns per fill, problem or None)."""
    eng.reset(m)
    times: list[int] = []
    gc.disable()
    try:
        for k, tok in enumerate(toks):
            t0 = time.perf_counter_ns()
            eng.fill(m)
            times.append(time.perf_counter_ns() - t0)
            if not eng.allowed(tok):
                return times, f"token #{k} ({tok}) not in the mask"
            if not eng.advance(m, tok):
                return times, f"token #{k} ({tok}) refused"
        t0 = time.perf_counter_ns()
        eng.fill(m)
        times.append(time.perf_counter_ns() - t0)
    finally:
        gc.enable()
    return times, None


def seeded_walk(eng: Engine, handle: Any, seed: int) -> list[int]:
    """A walk under ``eng``'s masks: uniform among allowed tokens, EOS with probability 0.15 when
    allowed, at most WALK_TOKENS tokens (EOS not included in the result)."""
    rng = random.Random(seed)
    m = eng.matcher(handle)
    out: list[int] = []
    for _ in range(WALK_TOKENS):
        eng.fill(m)
        allowed = ga.unpack(eng.bits, eng.bits.size * 32)
        if allowed[eng.eos] and rng.random() < 0.15:
            break
        allowed[eng.eos] = False
        ids = np.flatnonzero(allowed)
        if ids.size == 0:
            break
        tok = int(ids[rng.randrange(ids.size)])
        assert eng.advance(m, tok)
        out.append(tok)
    return out


def stats(xs: list[int], unit: float) -> dict[str, Any]:
    return {
        "n": len(xs),
        "p50": percentile(xs, 50) / unit if xs else None,
        "p95": percentile(xs, 95) / unit if xs else None,
        "max": max(xs) / unit if xs else None,
    }


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default=str(common.SHARED_TOKENIZERS / "llama3"))
    ap.add_argument("--extra", default=None, help="a folder of more *.gbnf files")
    ap.add_argument("--repeats", type=int, default=5, help="time-to-first-mask repeats")
    ap.add_argument("--grammar", action="append", default=None, help="only these grammars")
    ap.add_argument("--out-dir", default=str(common.RESULTS_DIR))
    ap.add_argument("--lark", action="store_true", help="the Lark grammars of tests/grammars/lark")
    args = ap.parse_args()
    tok_path = Path(args.tokenizer)
    if not common.resolve_tokenizer(tok_path)[1].is_file():
        print(f"SKIP: no tokenizer.json at {tok_path} (the shared data folder, ../shared)")
        return 0
    engines = [e for e in (TS, XGR, LLG) if engine_adapters.available(e)]
    if TS not in engines:
        print("error: tokensieve is not importable (run `make build`)", file=sys.stderr)
        return 2

    files = [] if args.lark else [(p.stem, p) for p in ga.grammar_files(GRAMMARS)]
    if args.extra:
        files += [
            (f"{Path(args.extra).name}/{p.stem}", p) for p in ga.grammar_files(Path(args.extra))
        ]
    if args.grammar:
        files = [(n, p) for n, p in files if n in args.grammar or p.stem in args.grammar]

    info = common.TokenizerInfo(tok_path)
    machine = common.machine_info(["tokensieve", "xgrammar", "llguidance", "numpy", "tokenizers"])
    what = f"{len(list(LARK.glob('*.lark')))} Lark" if args.lark else str(len(files))
    print(f"grammar benchmark: {what} grammars, {info.file}, engines {engines}")
    eng: dict[str, Engine] = {}
    setup: dict[str, Any] = {}
    for e in engines:
        t0 = time.perf_counter()
        eng[e] = engine_adapters.load(e, info)
        setup[e] = {"vocab_load_s": time.perf_counter() - t0}
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(info.file))

    rows: list[dict[str, Any]] = lark_rows(eng, engines, hf, args.repeats) if args.lark else []
    for name, path in files:
        text = path.read_text(encoding="utf-8")
        flat = ga.parse_gbnf(text)
        oracle = ga.Oracle(flat)
        row: dict[str, Any] = {
            "grammar": name,
            "file": str(path),
            "engines": {},
            "walk": {"kind": "none", "tokens": 0},
        }
        sample = SAMPLES.get(path.stem) if path.parent == GRAMMARS else None
        walk: list[int] | None = None
        if sample is not None:
            if not oracle.accepts(sample):
                raise SystemExit(f"benchmark bug: the sample of {name} is not in its language")
            walk = hf.encode(sample, add_special_tokens=False).ids
            row["walk"] = {"kind": "sample", "text": sample, "tokens": len(walk)}
        for e in engines:
            res: dict[str, Any] = {}
            row["engines"][e] = res
            for force_flat in (False, True):
                try:
                    times, c = ttfm(eng[e], text, flat, args.repeats, force_flat)
                except CompileError as err:
                    res.update(ok=False, error=str(err)[:300])
                    break
                res.update(ok=True, flat=c.flat, ttfm_ns=times)
                if c.flat and c.why != "forced":
                    res["as_written_error"] = c.why
                if walk is None and e == TS:
                    # extra grammars: a seeded walk under tokensieve, for every engine, on a
                    # grammar of its own (the one measured below keeps its masks cold)
                    own = compile_grammar(eng[TS], text, flat).handle
                    walk = seeded_walk(eng[TS], own, seed=len(rows))
                    row["walk"] = {"kind": "seeded walk under tokensieve", "tokens": len(walk)}
                    del own
                if walk is None:
                    res["problem"] = "no walk (tokensieve refused the grammar)"
                    break
                m = eng[e].matcher(c.handle)
                passes = ["cold", "warm"] if e == TS else ["steps"]
                problem = None
                for p in passes:
                    ns, problem = step_pass(eng[e], m, walk)
                    res[f"{p}_ns"] = ns
                    if problem:
                        break
                res["problem"] = problem
                if problem is None or c.flat or e == TS:
                    break  # a refused walk as written: once more with the flat rendering
                res["as_written_problem"] = problem
            line = f"  {name:28} {e:10} "
            if res.get("ok"):
                t = stats(res["ttfm_ns"], 1e6)
                line += f"ttfm p50 {num(t['p50'])} ms"
                key = "warm_ns" if e == TS else "steps_ns"
                if res.get(key):
                    line += f", mask p50 {num(stats(res[key], 1e3)['p50'])} µs"
                line += " (flat)" if res["flat"] else ""
                line += f" PROBLEM {res['problem']}" if res.get("problem") else ""
            else:
                line += f"error: {res['error'][:120]}"
            print(line, flush=True)
        rows.append(row)

    report = {
        "command": "python benches/bench_grammars.py " + " ".join(sys.argv[1:]),
        "machine": machine,
        "tokenizer": str(info.file),
        "vocab_size": info.size,
        "setup": setup,
        "repeats": args.repeats,
        "extra": args.extra,
        "lark": args.lark,
        "rows": rows,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "grammars_lark" if args.lark else "grammars"
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    md = render(report, engines)
    (out / f"{stem}.md").write_text(md)
    print(md)
    return 0


def render(rep: dict[str, Any], engines: list[str]) -> str:
    m = rep["machine"]
    pk = m["packages"]
    lark = bool(rep.get("lark"))
    lines = [
        f"# Grammar benchmark — {'Lark' if lark else 'GBNF'}, llama3",
        "",
        f"Generated by `{rep['command'].strip()}` on {m['date']}. Protocol: the docstring of "
        "`benches/bench_grammars.py`.",
        "",
        md_table(
            ["", ""],
            [
                *machine_rows(m),
                *[[p, str(v)] for p, v in pk.items()],
                ["tokenizer", f"`{rep['tokenizer']}` (vocab {rep['vocab_size']})"],
                ["first-mask repeats", str(rep["repeats"])],
            ],
        ),
        "",
        *(
            [
                "Each engine reads the Lark text as written (`tests/grammars/lark/`) and walks "
                "its hand-written sample (`LARK_SAMPLES`) as the tokenizer splits it.",
                "",
            ]
            if lark
            else [
                "`*`: the engine refused the text as written (or, llguidance, refused the walk), "
                "and got the flat rendering of the same language (`tests/grammar_anchors.py`).",
                "",
            ]
        ),
        *(
            [
                f"Grammars named `{Path(rep['extra']).name}/…` are the `*.gbnf` files of "
                f"`--extra {rep['extra']}` (not in the repository).",
                "",
            ]
            if rep.get("extra")
            else []
        ),
        *(
            []
            if lark
            else [
                "Walks: the grammars of `tests/grammars/` walk a hand-written sample text "
                "(`SAMPLES`) as the tokenizer splits it; the others a seeded walk of at most 60 "
                "tokens under tokensieve's masks (on a grammar of its own, so the measured one "
                "starts cold).",
                "",
            ]
        ),
        "## Time to first mask (compile + matcher + first mask), ms",
        "",
        "Median of the repeats; the first (cold) compile in parentheses.",
        "",
    ]

    def cell_ttfm(r: dict[str, Any], e: str) -> str:
        res = r["engines"].get(e, {})
        if not res.get("ok"):
            return "error"
        t = res["ttfm_ns"]
        return f"{num(percentile(t, 50) / 1e6)} ({num(t[0] / 1e6)}){'*' if res['flat'] else ''}"

    body = [
        [r["grammar"], str(r["walk"]["tokens"]), *[cell_ttfm(r, e) for e in engines]]
        for r in rep["rows"]
    ]
    lines += [md_table(["grammar", "walk tokens", *engines], body), ""]

    cols = [(TS, "cold_ns", "tokensieve cold"), (TS, "warm_ns", "tokensieve warm")]
    cols += [(e, "steps_ns", e) for e in engines if e != TS]
    lines += [
        "## Mask time per token along the walk, µs (p50 / p95 / max)",
        "",
        "Every fill of the walk, the one after its last token included.",
        "",
    ]

    def cell_steps(r: dict[str, Any], e: str, key: str) -> str:
        res = r["engines"].get(e, {})
        if not res.get("ok") or not res.get(key):
            return "error" if not res.get("ok") else "–"
        s = stats(res[key], 1e3)
        flag = "*" if res["flat"] else ""
        bad = " (refused the walk)" if res.get("problem") else ""
        return f"{num(s['p50'])} / {num(s['p95'])} / {num(s['max'])}{flag}{bad}"

    body = [[r["grammar"], *[cell_steps(r, e, k) for e, k, _ in cols]] for r in rep["rows"]]
    lines += [md_table(["grammar", *[label for _, _, label in cols]], body), ""]

    lines += ["## Over all grammars", ""]
    body = []
    for e, key, label in cols:
        xs = [x for r in rep["rows"] for x in r["engines"].get(e, {}).get(key) or []]
        s = stats(xs, 1e3)
        body.append([f"{label}: mask µs", str(s["n"]), num(s["p50"]), num(s["p95"]), num(s["max"])])
    for e in engines:
        xs = [
            percentile(r["engines"][e]["ttfm_ns"], 50)
            for r in rep["rows"]
            if r["engines"].get(e, {}).get("ok")
        ]
        s = stats(xs, 1e6)
        body.append(
            [
                f"{e}: first mask ms (per-grammar medians)",
                str(s["n"]),
                num(s["p50"]),
                num(s["p95"]),
                num(s["max"]),
            ]
        )
    lines += [md_table(["", "n", "p50", "p95", "max"], body), ""]

    notes = []
    for r in rep["rows"]:
        for e in engines:
            res = r["engines"].get(e, {})
            if not res.get("ok"):
                notes.append(f"- {r['grammar']}, {e}: {res.get('error')}")
            elif res.get("problem"):
                notes.append(f"- {r['grammar']}, {e}: the walk stopped: {res['problem']}")
            if res.get("ok") and res.get("as_written_error"):
                notes.append(
                    f"- {r['grammar']}, {e}: refused as written ({res['as_written_error']}); "
                    "measured on the flat rendering"
                )
            if res.get("ok") and res.get("as_written_problem"):
                notes.append(
                    f"- {r['grammar']}, {e}: as written, the walk stopped "
                    f"({res['as_written_problem']}); measured on the flat rendering"
                )
    if notes:
        lines += ["## Notes", "", *notes, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
