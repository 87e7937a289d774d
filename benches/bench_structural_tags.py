"""Structural tags (tool calling): time to first mask and mask times, tokensieve beside xgrammar.

For tags over 1, 20, 200 and 1,000 tools in three shapes that vLLM's tool parsers send
(``llama3_json``: ``triggered_tags`` with JSON arguments; ``hermes`` with
``tool_choice="required"``: ``tags_with_separator``; ``qwen3_xml``: ``triggered_tags`` with XML
parameters), each engine compiles the tag from its JSON text (as vLLM and SGLang hand it
over), makes a matcher and fills its first mask (time to first mask), then walks a text of free
words followed by one call, filling the mask before every token (mask times in free text and
inside the call, p50 and p99; and the slowest mask inside a call, with the token written after
it). Each tool has a schema of its own (see `tool`; with ``--shared-schema`` all tools share the
first one's, which engines that reuse the grammar of a schema met before compile once), and tool
names differ per size and run
(``--repeat``), so nothing is cached across rows. Before the rows, each engine compiles and
walks a one-tool tag of each shape (other names), so that what a process pays once is not
counted in the first rows. Llama 3 tokenizer; xgrammar through
``GrammarCompiler.compile_structural_tag``
(llguidance reads only the older ``structures``/``triggers`` shape and is not run here).

Run with the vLLM venv (it has xgrammar and transformers)::

    $HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_structural_tags.py

It writes ``benches/results/structural_tags.{md,json}`` (``structural_tags_shared.*`` with
``--shared-schema``); it prints SKIP and exits 0 without
xgrammar or the shared tokenizer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# numpy's and torch's BLAS/OpenMP worker threads spin for a while after they work, taking a core
# from whichever engine is timed next (both engines' own compile threads are not theirs): one
# thread each, set before either is imported
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS_DIR, SHARED_TOKENIZERS, machine_info, md_table  # noqa: E402

TOKENIZER = SHARED_TOKENIZERS / "llama3"
SIZES = (1, 20, 200, 1000)
# the measured columns of each engine, in the table's order
COLUMNS = ("first_ms", "free_p50_us", "free_p99_us", "call_p50_us", "call_p99_us")
SHAPES = ("llama3_json", "hermes_required", "qwen3_xml")
FREE_TEXT = "Sure, let me look that up for you before answering the question. "


# the optional parameters a tool draws from (besides its required `city` and `days`): types
# that tool schemas use, with bounds, formats, arrays and a nested object
EXTRA_PARAMS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("unit", {"enum": ["C", "F"]}),
    ("query", {"type": "string", "description": "What to search for."}),
    ("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
    ("verbose", {"type": "boolean"}),
    ("price", {"type": "number", "minimum": 0}),
    ("labels", {"type": "array", "items": {"type": "string"}, "maxItems": 5}),
    ("date", {"type": "string", "format": "date"}),
    (
        "options",
        {
            "type": "object",
            "properties": {
                "mode": {"enum": ["fast", "exact"]},
                "retries": {"type": "integer", "minimum": 0},
            },
            "required": ["mode"],
        },
    ),
)


def tool(i: int, size: int, prefix: str = "tool", shared: bool = False) -> dict[str, Any]:
    """Tool `i`: a schema of its own (no two tools of a tag share one, as in real tool lists),
    the required `city` and `days` and one to three optional parameters named after it; with
    `shared`, tool 0's schema."""
    j = 0 if shared else i
    extras = [EXTRA_PARAMS[(j * (k + 3)) % len(EXTRA_PARAMS)] for k in range(1 + j % 3)]
    props: dict[str, Any] = {
        "city": {"type": "string", "description": f"The city for {prefix}_{size}_{j}."},
        "days": {"type": "integer", "minimum": 1},
    }
    for base, schema in extras:
        props[f"{base}_{j}"] = schema
    return {
        "name": f"{prefix}_{size}_{i}",
        "parameters": {"type": "object", "properties": props, "required": ["city", "days"]},
    }


def tag(shape: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    def js(t: dict[str, Any], style: str = "json") -> dict[str, Any]:
        return {"type": "json_schema", "json_schema": t["parameters"], "style": style}

    if shape == "llama3_json":
        fmt: dict[str, Any] = {
            "type": "triggered_tags",
            "triggers": ['{"name": '],
            "tags": [
                {
                    "type": "tag",
                    "begin": f'{{"name": "{t["name"]}", "parameters": ',
                    "content": js(t),
                    "end": "}",
                }
                for t in tools
            ],
            "excludes": ["<think>", "</think>"],
        }
    elif shape == "hermes_required":
        fmt = {
            "type": "tags_with_separator",
            "tags": [
                {
                    "type": "tag",
                    "begin": f'<tool_call>\n{{"name": "{t["name"]}", "arguments": ',
                    "content": js(t),
                    "end": "}\n</tool_call>",
                }
                for t in tools
            ],
            "separator": "",
            "at_least_one": True,
        }
    else:
        fmt = {
            "type": "triggered_tags",
            "triggers": ["<tool_call>\n<function="],
            "tags": [
                {
                    "type": "tag",
                    "begin": f"<tool_call>\n<function={t['name']}>\n",
                    "content": js(t, "qwen_xml"),
                    "end": "\n</function>\n</tool_call>",
                }
                for t in tools
            ],
            "excludes": ["<think>", "</think>"],
        }
    return {"type": "structural_tag", "format": fmt}


def output(shape: str, name: str) -> tuple[str, str]:
    """(free text, the call) of a valid output."""
    if shape == "llama3_json":
        return FREE_TEXT, f'{{"name": "{name}", "parameters": {{"city": "Paris", "days": 3}}}}'
    if shape == "hermes_required":
        return (
            "",
            f'<tool_call>\n{{"name": "{name}", "arguments": {{"city": "Paris", "days": 3}}}}\n</tool_call>',
        )
    call = (
        f"<tool_call>\n<function={name}>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    return FREE_TEXT, call


class TS:
    name = "tokensieve"

    def __init__(self) -> None:
        import tokensieve as ts

        self.ts = ts
        self.vocab = ts.Vocabulary.from_pretrained(str(TOKENIZER))
        self.bm = ts.allocate_token_bitmask(1, self.vocab.vocab_size)

    def compile(self, text: str) -> Any:
        return self.ts.Grammar.from_structural_tag(text, self.vocab)

    def matcher(self, g: Any) -> Any:
        return g.matcher()

    def fill(self, m: Any) -> None:
        m.fill_next_token_bitmask(self.bm)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


class XGR:
    name = "xgrammar"

    def __init__(self) -> None:
        import xgrammar as xgr
        from transformers import AutoTokenizer

        self.xgr = xgr
        hf = AutoTokenizer.from_pretrained(str(TOKENIZER))
        ti = xgr.TokenizerInfo.from_huggingface(hf)
        self.compiler = xgr.GrammarCompiler(ti, cache_enabled=False)
        self.bm = xgr.allocate_token_bitmask(1, ti.vocab_size)

    def compile(self, text: str) -> Any:
        return self.compiler.compile_structural_tag(text)

    def matcher(self, g: Any) -> Any:
        return self.xgr.GrammarMatcher(g)

    def fill(self, m: Any) -> None:
        m.fill_next_token_bitmask(self.bm)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def run_rows(
    engine: Any, shape: str, size: int, encode: Any, repeat: int, shared: bool = False
) -> dict[str, Any]:
    """`repeat` runs of one row, each over new tool names: the median time to first mask, and
    the mask times of all runs pooled (their p99 then rests on `repeat` times as many steps)."""
    runs = [
        run_one(engine, shape, size, encode, prefix=f"tool{k}", shared=shared)
        for k in range(repeat)
    ]
    bad = next((r for r in runs if "error" in r), None)
    if bad is not None:
        return bad
    row: dict[str, Any] = {
        "first_ms": statistics.median(r["first_ms"] for r in runs),
        "first_ms_runs": [r["first_ms"] for r in runs],
    }
    for part in ("free", "call"):
        xs = [x for r in runs for x in r["times"][part]]
        if xs:
            row[f"{part}_p50_us"] = statistics.median(xs) * 1e6
            row[f"{part}_p99_us"] = pct(xs, 99) * 1e6
            row[f"{part}_max_us"] = max(xs) * 1e6
            row[f"{part}_worst_token"] = max(r["worst"][part] for r in runs)[1]
    return row


def run_one(
    engine: Any, shape: str, size: int, encode: Any, prefix: str = "tool", shared: bool = False
) -> dict[str, Any]:
    tools = [tool(i, size, prefix, shared) for i in range(size)]
    # the JSON text of the tag, as a server receives it (writing it is not the engine's work:
    # about 6-10 ms at 1,000 tools)
    text = json.dumps(tag(shape, tools))
    start = time.perf_counter()
    try:
        g = engine.compile(text)
        m = engine.matcher(g)
        engine.fill(m)
    except Exception as e:  # noqa: BLE001 - a refusal is a result here
        return {"error": f"{type(e).__name__}: {str(e)[:120]}"}
    first = time.perf_counter() - start
    free, call = output(shape, tools[size // 2]["name"])
    ids_free, ids_call = encode(free), encode(call)
    times: dict[str, list[float]] = {"free": [], "call": []}
    # the slowest mask of each part: (seconds, the token accepted after it)
    worst: dict[str, tuple[float, int]] = {}
    for part, ids in (("free", ids_free), ("call", ids_call)):
        for tok in ids:
            t0 = time.perf_counter()
            engine.fill(m)
            dt = time.perf_counter() - t0
            times[part].append(dt)
            if dt > worst.get(part, (-1.0, 0))[0]:
                worst[part] = (dt, tok)
            if not engine.accept(m, tok):
                return {"error": f"token {tok} of the {part} refused", "first_ms": first * 1e3}
    return {"first_ms": first * 1e3, "times": times, "worst": worst}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    ap.add_argument("--repeat", type=int, default=3, help="runs of each row (new names each)")
    ap.add_argument(
        "--shared-schema",
        action="store_true",
        help="every tool of a tag has the same parameters schema (written to structural_tags_shared.*)",
    )
    args = ap.parse_args()
    if importlib.util.find_spec("xgrammar") is None or not (TOKENIZER / "tokenizer.json").exists():
        print("SKIP: needs xgrammar (the vLLM venv) and the shared Llama 3 tokenizer")
        return
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(TOKENIZER))

    def encode(text: str) -> list[int]:
        return list(hf.encode(text, add_special_tokens=False))

    engines = [TS(), XGR()]
    for e in engines:
        # warm up: a small tag of each shape, walked through one call, so that what a process
        # pays once (per vocabulary and shape: shared automata, ready masks) is not in the rows
        for shape in SHAPES:
            warm = run_one(e, shape, 1, encode, prefix="warm")
            assert "error" not in warm, warm
    results: list[dict[str, Any]] = []
    for shape in SHAPES:
        for size in SIZES:
            for e in engines:
                r = run_rows(e, shape, size, encode, args.repeat, args.shared_schema)
                r.update(engine=e.name, shape=shape, tools=size)
                for part in ("free", "call"):
                    if f"{part}_worst_token" in r:
                        r[f"{part}_worst_token"] = hf.decode([r[f"{part}_worst_token"]])
                results.append(r)
                print(json.dumps(r), flush=True)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info(("tokensieve", "xgrammar", "transformers"))
    stem = "structural_tags_shared" if args.shared_schema else "structural_tags"
    (out / f"{stem}.json").write_text(json.dumps({"machine": info, "results": results}, indent=1))

    def row_of(engine: str, shape: str, size: int) -> dict[str, Any]:
        return next(
            r
            for r in results
            if r["engine"] == engine and r["shape"] == shape and r["tools"] == size
        )

    def cell(r: dict[str, Any], k: str) -> str:
        if "error" in r:
            return "refused" if k == "first_ms" else ""
        v = r.get(k)
        return "" if v is None else f"{v:.1f}" if k == "first_ms" else f"{v:.0f}"

    rows = []
    for shape in SHAPES:
        for size in SIZES:
            ts_r, xg_r = (row_of(n, shape, size) for n in ("tokensieve", "xgrammar"))
            ratio = (
                f"{xg_r['first_ms'] / ts_r['first_ms']:.1f}×"
                if "error" not in ts_r and "error" not in xg_r
                else ""
            )
            rows.append(
                [shape, str(size)] + [cell(r, k) for r in (ts_r, xg_r) for k in COLUMNS] + [ratio]
            )
    head = ["shape", "tools"]
    for n in ("ts", "xgr"):
        head += [
            f"{n} first mask ms",
            f"{n} free p50 µs",
            f"{n} free p99 µs",
            f"{n} call p50 µs",
            f"{n} call p99 µs",
        ]
    head.append("xgr/ts first mask")
    lines = [
        "# Structural tags: time to first mask and mask times",
        "",
        "Generated by `benches/bench_structural_tags.py` (one process, tokenizer Llama 3; "
        + (
            "every tool of a tag with the same parameters schema"
            if args.shared_schema
            else "each tool with a parameters schema of its own"
        )
        + f"; each row run {args.repeat} times over new tool names: first mask (from the tag's "
        "JSON text to its first mask) the median of the runs, "
        "mask percentiles over the steps of all runs). Command: "
        "`$HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_structural_tags.py"
        + (" --shared-schema" if args.shared_schema else "")
        + "`.",
        "",
        md_table(head, rows),
        "",
        "The slowest mask inside a call (its time, then the token written after it), per row:",
        "",
        md_table(
            ["shape", "tools", "tokensieve", "xgrammar"],
            [
                [shape, str(size)]
                + [
                    f"{r['call_max_us']:.0f} µs before {r['call_worst_token']!r}"
                    if "call_max_us" in r
                    else ""
                    for r in (row_of(n, shape, size) for n in ("tokensieve", "xgrammar"))
                ]
                for shape in SHAPES
                for size in SIZES
            ],
        ),
        "",
        "Errors: "
        + (
            "; ".join(
                f"{r['engine']} {r['shape']} {r['tools']}: {r['error']}"
                for r in results
                if "error" in r
            )
            or "none"
        ),
        "",
    ]
    (out / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
