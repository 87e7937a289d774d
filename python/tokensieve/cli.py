"""`tokensieve` command line: precompile constraints into index files and inspect them.

    tokensieve compile --regex '[0-9]+' --tokenizer path/to/tokenizer -o digits.tsidx
    tokensieve compile --json-schema schemas/ --tokenizer path/to/tokenizer -o out_dir/
    tokensieve inspect digits.tsidx

Exit codes: 0 success, 1 compile error (the message names the problem), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tokensieve._core import TokensieveError, read_index_header
from tokensieve.constraints import ENGINE_OPTIONS, SCHEMA_OPTIONS, compile_constraint
from tokensieve.vocabulary import Vocabulary

# Ahead-of-time builds determinize the whole automaton: the largest Kubernetes schemas of the
# dev set need up to about 170,000 states (some 60 MB of transitions).
AOT_MAX_STATES = 1_000_000
# ... and a regex that spells such a schema out (e.g. another engine's 3.6 MB regex for a
# Kubernetes schema) needs a few hundred MB of automaton while it is built.
AOT_MAX_NFA_BYTES = 1 << 30
# ... and may take minutes, which a serving process's default (10 s) would refuse.
AOT_MAX_COMPILE_SECONDS = 600.0

EXIT_OK, EXIT_COMPILE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input (exit code 2)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokensieve", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="build a full index and write it to a file")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--regex", metavar="PATTERN", help="a regex (full match)")
    src.add_argument(
        "--json-schema",
        metavar="PATH",
        help="a JSON Schema file, a folder of *.json schemas, or a JSONL file of schemas "
        '(one per line; an object with a "schema" key, or the schema itself)',
    )
    src.add_argument("--choice", nargs="+", metavar="TEXT", help="one of these strings")
    src.add_argument("--json-object", action="store_true", help="any JSON object")
    c.add_argument("--tokenizer", required=True, help="tokenizer.json or a folder holding one")
    c.add_argument("--vocab-size", type=int, help="the model's logits width")
    c.add_argument("--eos-token-id", type=int, action="append", help="EOS id (repeatable)")
    c.add_argument("-o", "--output", required=True, help="output file (a folder for several)")
    c.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel schemas")
    c.add_argument(
        "--max-states",
        type=int,
        dest="max_states",
        help=f"DFA state budget (default {AOT_MAX_STATES:,} here: an index holds the complete "
        "automaton, which for large schemas needs more than a lazy grammar's 100,000)",
    )
    c.add_argument(
        "--max-nfa-bytes",
        type=int,
        dest="max_nfa_bytes",
        help=f"automaton memory budget while building (default {AOT_MAX_NFA_BYTES >> 20} MiB "
        "here; 64 MiB for a lazy grammar)",
    )
    c.add_argument("--mask-cache-bytes", type=int, dest="mask_cache_bytes")
    c.add_argument(
        "--max-compile-seconds",
        type=float,
        dest="max_compile_seconds",
        help=f"wall-clock budget of the build (default {AOT_MAX_COMPILE_SECONDS:g} s here; "
        "10 s for a grammar compiled at run time)",
    )
    g = c.add_argument_group("JSON options (see the README's options table)")
    g.add_argument("--additional-properties", choices=["allow", "forbid"])
    g.add_argument("--formats", choices=["assert", "annotate"])
    g.add_argument("--one-of", dest="one_of")
    g.add_argument("--whitespace")
    g.add_argument("--max-whitespace", type=int)
    g.add_argument("--max-recursion-depth", type=int)
    g.add_argument(
        "--recursion",
        choices=["stack", "unroll"],
        help="recursive $refs as calls on a stack (default) or unrolled; precomputing a schema "
        "that recurses through several places needs unroll or a small --max-stack-depth",
    )
    g.add_argument("--max-stack-depth", type=int)
    g.add_argument("--max-nesting-depth", type=int)
    g.add_argument("--truncate-recursion", action="store_true", default=None)
    g.add_argument("--lenient", action="store_true", default=None)
    g.add_argument("--literal-spelling", choices=["as_written", "any"])
    g.add_argument(
        "--registry",
        metavar="FILE",
        help="a JSON file mapping URIs to schemas, for $refs to other documents "
        "(nothing is fetched from the network)",
    )
    i = sub.add_parser("inspect", help="print what an index file holds")
    i.add_argument("file")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    return p


# Every option the CLI exposes as a plain flag (`--registry` takes a file, read below).
OPTION_NAMES = tuple(o for o in ENGINE_OPTIONS + SCHEMA_OPTIONS if o != "registry")


def _jobs(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """(name, kind, value) for every constraint the arguments name."""
    if args.regex is not None:
        return [("regex", "regex", args.regex)]
    if args.choice is not None:
        return [("choice", "choice", args.choice)]
    if args.json_object:
        return [("json_object", "json_object", None)]
    path = Path(args.json_schema)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise UsageError(f"{path} holds no *.json files")
        return [(f.stem, "json_schema", _read_json(f)) for f in files]
    if not path.is_file():
        raise UsageError(f"{path}: no such file or folder")
    if path.suffix == ".jsonl":
        out = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}:{n}: not JSON: {e}") from e
            if isinstance(doc, dict) and "schema" in doc:
                out.append((str(doc.get("id", n)), "json_schema", doc["schema"]))
            else:
                out.append((str(n), "json_schema", doc))
        return out
    return [(path.stem, "json_schema", _read_json(path))]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not JSON: {e}") from e


def _safe_name(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return keep[:100] or "schema"


def _compile(args: argparse.Namespace) -> int:
    jobs = _jobs(args)
    try:
        vocab = Vocabulary.from_pretrained(
            args.tokenizer, vocab_size=args.vocab_size, eos_token_ids=args.eos_token_id
        )
    except (OSError, TypeError) as e:
        raise UsageError(f"--tokenizer: {e}") from e
    options = {k: getattr(args, k) for k in OPTION_NAMES if getattr(args, k, None) is not None}
    options.setdefault("max_states", AOT_MAX_STATES)
    options.setdefault("max_nfa_bytes", AOT_MAX_NFA_BYTES)
    options.setdefault("max_compile_seconds", AOT_MAX_COMPILE_SECONDS)
    if getattr(args, "registry", None):
        try:
            registry = json.loads(Path(args.registry).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UsageError(f"--registry {args.registry}: {e}") from None
        if not isinstance(registry, dict):
            raise UsageError(f"--registry {args.registry}: not a JSON object")
        options["registry"] = registry
    out = Path(args.output)
    several = len(jobs) > 1
    if several:
        out.mkdir(parents=True, exist_ok=True)
    tty = sys.stderr.isatty()
    done = 0
    failures = 0

    def run(job: tuple[str, str, Any]) -> tuple[str, dict[str, Any] | str]:
        name, kind, value = job
        t = time.perf_counter()
        try:
            grammar = compile_constraint(kind, value, vocab, **options)
            stats = grammar.precompute()
            target = out / f"{_safe_name(name)}.tsidx" if several else out
            grammar.save(target)
        except (TokensieveError, ValueError, OSError) as e:
            return name, f"{type(e).__name__}: {e}"
        return name, {
            **stats,
            "file": str(target),
            "file_bytes": target.stat().st_size,
            "seconds": time.perf_counter() - t,
        }

    with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, len(jobs)))) as pool:
        for name, result in pool.map(run, jobs):
            done += 1
            if tty:
                bar = "#" * (30 * done // len(jobs))
                sys.stderr.write(f"\r[{bar:<30}] {done}/{len(jobs)}")
                sys.stderr.flush()
            if isinstance(result, str):
                failures += 1
                if tty:
                    sys.stderr.write("\n")
                print(f"{name}: error: {result}", file=sys.stderr)
            else:
                print(
                    f"{name}: {result['states']} states, {result['distinct_masks']} distinct "
                    f"masks, {result['dfa_states']} automaton states, "
                    f"{result['file_bytes']} bytes -> {result['file']} "
                    f"({result['seconds']:.3f} s)"
                )
    if tty:
        sys.stderr.write("\n")
    return EXIT_COMPILE if failures else EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    try:
        header = read_index_header(args.file)
    except OSError as e:
        raise UsageError(str(e)) from e
    if args.json:
        print(json.dumps(header, indent=2))
        return EXIT_OK
    width = max(len(k) for k in header)
    for k, v in header.items():
        text = str(v)
        if len(text) > 200:
            text = text[:200] + f"... ({len(text)} chars)"
        print(f"{k:<{width}}  {text}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or usage error (2)
        return int(e.code or 0)
    try:
        if args.command == "compile":
            return _compile(args)
        return _inspect(args)
    except UsageError as e:
        print(f"tokensieve: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (TokensieveError, ValueError) as e:
        print(f"tokensieve: error: {e}", file=sys.stderr)
        return EXIT_COMPILE


if __name__ == "__main__":
    sys.exit(main())
