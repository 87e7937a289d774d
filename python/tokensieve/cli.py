"""`tokensieve` command line: precompile constraints into index files and inspect them.

    tokensieve compile --regex '[0-9]+' --tokenizer path/to/tokenizer -o digits.tsidx
    tokensieve compile --json-schema schemas/ --tokenizer path/to/tokenizer -o out_dir/
    tokensieve compile --ebnf grammar.gbnf --start root --tokenizer path/to/tokenizer -o g.tsidx
    tokensieve compile --lark grammar.lark --tokenizer path/to/tokenizer -o g.tsidx
    tokensieve compile --structural-tag tools.json --tokenizer path/to/tokenizer -o tools.tsidx
    tokensieve inspect digits.tsidx

``--json-schema`` takes a schema file, a folder (its ``*.json`` files), or a JSONL file: one
schema per line, as a JSON object or boolean, or ``{"id": NAME, "schema": SCHEMA}`` (NAME names
the output file). A schema is always JSON: a file or line holding a JSON string is an error, not
schema text read a second time. The compiler reads a schema's own text (a file's, a line's, the
``"schema"`` member's text cut out of its line, the ``--registry`` file's), so its numbers stay
exact: nothing goes through a Python float. ``--ebnf`` takes a GBNF/EBNF grammar file (UTF-8,
at most 64 MiB; ``docs/grammars.md``), compiled from the rule ``--start`` names (``root`` by
default); ``--max-stack-depth`` bounds its recursion, as for a schema. ``--lark`` takes a Lark
grammar file (the dialect llguidance documents; ``docs/grammars.md``, *Lark*), from the rule
``--start`` names (``start`` by default); a file given to ``--ebnf`` with no ``name ::= ...``
rule is read as Lark too.
``--structural-tag`` takes a structural tag's JSON file (``docs/grammars.md``, *Structural tags*;
the JSON options apply to its ``json_schema`` parts). A grammar or tag that names special tokens
(token atoms) cannot be written as an index file: that is a compile error naming them.

Exit codes: 0 success, 1 compile error (the message names the problem; a tokenizer the core
refuses included), 2 usage error (a bad argument, a tokenizer or input that cannot be read). A folder or JSONL file is compiled schema by
schema: one that cannot be read, parsed or compiled is reported on stderr with its path (and
line) and the reason, the others are still compiled, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokensieve import _core
from tokensieve._core import TokensieveError, read_index_header
from tokensieve.constraints import ALL_OPTIONS, compile_constraint
from tokensieve.vocabulary import Vocabulary

# Ahead-of-time builds determinize the whole automaton: the largest Kubernetes schemas of the
# dev set need up to about 170,000 states (some 60 MB of transitions).
AOT_MAX_STATES = 1_000_000
# ... and a regex that spells such a schema out (e.g. another engine's 3.6 MB regex for a
# Kubernetes schema) needs a few hundred MB of automaton while it is built.
AOT_MAX_NFA_BYTES = 1 << 30
# ... and may take minutes, which a serving process's default (10 s) would refuse.
AOT_MAX_COMPILE_SECONDS = 600.0
# An index holds every state: an unconstrained JSON value's states grow about fourfold per
# nesting level, so index files are built with this nesting bound unless one is given (the
# lazy default, 64, is past what a complete automaton can hold).
AOT_MAX_NESTING_DEPTH = 8
JSON_KINDS = ("json_schema", "json_object")

EXIT_OK, EXIT_COMPILE, EXIT_USAGE = 0, 1, 2

# The core's limits on what the flags below set (docs/limits.md).
MAX_VOCAB_SIZE: int = getattr(_core, "MAX_VOCAB_SIZE", 1 << 24)
USIZE_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
# the largest max_stack_depth of a grammar or a schema (the deepest stack an automaton tracks)
MAX_STACK_DEPTH = 1 << 20
# A schema's text (a file, a JSONL line, the registry): the core's limit on schema text.
MAX_SCHEMA_BYTES = 64 << 20


class UsageError(Exception):
    """Bad command-line input (exit code 2)."""


def _integer(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high`` (a usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high:,}, got {text[:40]}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a positive finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text[:40]}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokensieve", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="build a full index and write it to a file")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--regex", metavar="PATTERN", help="a regex (full match)")
    src.add_argument(
        "--json-schema",
        metavar="PATH",
        help="a JSON Schema file, a folder of *.json schemas, or a JSONL file of schemas (one per "
        'line: a schema object or boolean, or {"id": NAME, "schema": SCHEMA}); a schema is '
        "JSON, never a JSON string holding schema text",
    )
    src.add_argument("--choice", nargs="+", metavar="TEXT", help="one of these strings")
    src.add_argument("--json-object", action="store_true", help="any JSON object")
    src.add_argument(
        "--ebnf",
        metavar="FILE",
        help="a GBNF/EBNF grammar file (llama.cpp's GBNF or xgrammar's EBNF; a file with no "
        "`name ::= ...` rule is read as Lark)",
    )
    src.add_argument(
        "--lark",
        metavar="FILE",
        help="a Lark grammar file (the dialect llguidance documents)",
    )
    src.add_argument(
        "--structural-tag",
        metavar="FILE",
        dest="structural_tag",
        help="a structural tag's JSON file (what vLLM's and SGLang's tool calling send)",
    )
    c.add_argument("--tokenizer", required=True, help="tokenizer.json or a folder holding one")
    c.add_argument(
        "--vocab-size",
        type=_integer(1, MAX_VOCAB_SIZE),
        help=f"the model's logits width (at most {MAX_VOCAB_SIZE:,})",
    )
    c.add_argument(
        "--eos-token-id",
        type=_integer(0, MAX_VOCAB_SIZE - 1),
        action="append",
        help="EOS id (repeatable)",
    )
    c.add_argument("-o", "--output", required=True, help="output file (a folder for several)")
    c.add_argument(
        "--jobs",
        type=_integer(1, 4096),
        default=os.cpu_count() or 1,
        help="schemas compiled in parallel (1 to 4,096)",
    )
    c.add_argument(
        "--max-states",
        type=_integer(0, USIZE_MAX),
        dest="max_states",
        help=f"DFA state budget (default {AOT_MAX_STATES:,} here: an index holds the complete "
        "automaton, which for large schemas needs more than a lazy grammar's 100,000)",
    )
    c.add_argument(
        "--max-nfa-bytes",
        type=_integer(0, USIZE_MAX),
        dest="max_nfa_bytes",
        help=f"automaton memory budget while building (default {AOT_MAX_NFA_BYTES >> 20} MiB "
        "here; 64 MiB for a lazy grammar)",
    )
    c.add_argument("--mask-cache-bytes", type=_integer(0, USIZE_MAX), dest="mask_cache_bytes")
    c.add_argument(
        "--max-compile-seconds",
        type=_seconds,
        dest="max_compile_seconds",
        help=f"wall-clock budget of the build (default {AOT_MAX_COMPILE_SECONDS:g} s here; "
        "10 s for a grammar compiled at run time)",
    )
    e = c.add_argument_group("grammar options (--ebnf, --lark)")
    e.add_argument(
        "--start",
        metavar="NAME",
        help="the rule the grammar starts from (default root; start for Lark)",
    )
    g = c.add_argument_group(
        "JSON options (see the README's options table; --max-stack-depth applies to --ebnf too)"
    )
    g.add_argument("--additional-properties", choices=["allow", "forbid"])
    g.add_argument("--formats", choices=["assert", "annotate"])
    g.add_argument("--one-of", dest="one_of", choices=["error", "any_of"])
    g.add_argument("--whitespace")
    g.add_argument("--max-whitespace", type=_integer(0, U32_MAX))
    g.add_argument("--max-recursion-depth", type=_integer(0, U32_MAX))
    g.add_argument(
        "--recursion",
        choices=["stack", "unroll"],
        help="recursive $refs as calls on a stack (default) or unrolled; precomputing a schema "
        "that recurses through several places needs unroll or a small --max-stack-depth",
    )
    g.add_argument("--max-stack-depth", type=_integer(1, MAX_STACK_DEPTH))
    g.add_argument(
        "--max-nesting-depth",
        type=_integer(0, U32_MAX),
        help=f"levels of nesting inside unconstrained JSON values (default "
        f"{AOT_MAX_NESTING_DEPTH} here: an index holds every state; a request finds the file "
        "only with the same value)",
    )
    g.add_argument("--truncate-recursion", action="store_true", default=None)
    g.add_argument("--lenient", action="store_true", default=None)
    g.add_argument("--literal-spelling", choices=["as_written", "any"])
    g.add_argument(
        "--property-order",
        choices=["schema", "any"],
        help="declared properties in schema order (default) or in any order, each at most once",
    )
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
OPTION_NAMES = tuple(o for o in ALL_OPTIONS if o != "registry")


@dataclass
class Job:
    """One constraint to compile: ``label`` names it in messages (the file, and line), ``stem``
    its output file when there are several; ``error`` says why it could not be read."""

    label: str
    stem: str
    kind: str
    value: Any = None
    error: str | None = None


def _reason(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)


def _open_regular(path: Path) -> Any:
    """``path`` opened for reading in binary if it is a regular file; ``ValueError`` naming
    what it is otherwise (a folder, a device or FIFO, a symlink loop, missing). Opened without
    blocking, so a FIFO is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ValueError(_reason(e)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(
                "is a folder, not a file"
                if stat.S_ISDIR(mode)
                else "is not a regular file (a device, FIFO or socket)"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_file(path: Path, limit: int = MAX_SCHEMA_BYTES) -> str:
    """A regular file's UTF-8 text, at most ``limit`` bytes; ``ValueError`` naming what is
    wrong (not a regular file, too large, not UTF-8)."""
    with _open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"more than {limit:,} bytes; at most {limit:,} are read")
    try:
        return str(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e})") from None


def _schema_text(text: str) -> str:
    """Schema text checked to be JSON holding an object or a boolean (a JSON string is not a
    schema); the text itself is what the compiler reads, so numbers stay exact."""
    doc = _parse_json(text)
    if not isinstance(doc, (dict, bool)):
        raise ValueError(f"a schema must be a JSON object or boolean, got a JSON {_json_type(doc)}")
    return text


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _member_text(text: str, name: str) -> str | None:
    """The JSON text of member ``name`` of the object ``text`` holds (the last one when the
    name repeats, as ``json.loads`` keeps it), exactly as written; ``None`` when there is none.
    ``text`` is valid JSON (:func:`_parse_json` read it), so no step here can fail or recurse
    deeper than that did."""

    def skip(i: int) -> int:
        match = _WHITESPACE.match(text, i)
        return match.end() if match is not None else i

    i = skip(0)
    if text[i] != "{":
        return None
    i = skip(i + 1)
    found = None
    while text[i] != "}":
        key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        i = skip(skip(i) + 1)  # past the colon
        _, end = _DECODER.raw_decode(text, i)
        if key == name:
            found = text[i:end]
        i = skip(end)
        if text[i] == ",":
            i = skip(i + 1)
    return found


def _json_type(doc: Any) -> str:
    names = {str: "string", int: "number", float: "number", list: "array", type(None): "null"}
    return names.get(type(doc), type(doc).__name__)


def _jsonl_jobs(path: Path) -> list[Job]:
    """One job per non-blank line of a JSONL file; a line that is not a schema is a failed job."""
    jobs: list[Job] = []
    try:
        f = _open_regular(path)
    except ValueError as e:
        raise UsageError(f"{path}: {e}") from None
    with f:
        n = 0
        while True:
            raw = f.readline(MAX_SCHEMA_BYTES + 1)
            if not raw:
                break
            n += 1
            label = f"{path}:{n}"
            if len(raw) > MAX_SCHEMA_BYTES and not raw.endswith(b"\n"):
                jobs.append(
                    Job(
                        label,
                        str(n),
                        "json_schema",
                        error=f"line longer than {MAX_SCHEMA_BYTES:,} bytes",
                    )
                )
                while raw and not raw.endswith(b"\n"):  # skip the rest of that line
                    raw = f.readline(MAX_SCHEMA_BYTES + 1)
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                jobs.append(Job(label, str(n), "json_schema", error=f"not UTF-8 text ({e})"))
                continue
            if not line.strip():
                continue
            jobs.append(_jsonl_job(line, label, n))
    if not jobs:
        raise UsageError(f"{path} holds no schemas")
    return jobs


def _jsonl_job(line: str, label: str, n: int) -> Job:
    try:
        doc = _parse_json(line)
        if isinstance(doc, dict) and "schema" in doc:
            stem = str(doc["id"]) if "id" in doc else str(n)
            schema = doc["schema"]
            if not isinstance(schema, (dict, bool)):
                raise ValueError(
                    f'"schema" must be a JSON object or boolean, got a JSON {_json_type(schema)}'
                )
            # its own text, not the parsed object: Python would round its numbers to floats
            return Job(label, stem, "json_schema", _member_text(line, "schema"))
        return Job(label, str(n), "json_schema", _schema_text(line))
    except ValueError as e:
        return Job(label, str(n), "json_schema", error=str(e))


def _jobs(args: argparse.Namespace) -> list[Job]:
    """Every constraint the arguments name."""
    if args.regex is not None:
        return [Job("regex", "regex", "regex", args.regex)]
    if args.choice is not None:
        return [Job("choice", "choice", "choice", args.choice)]
    if args.json_object:
        return [Job("json_object", "json_object", "json_object")]
    for flag, kind, file in (
        ("--ebnf", "ebnf", args.ebnf),
        ("--lark", "lark", args.lark),
        ("--structural-tag", "structural_tag", args.structural_tag),
    ):
        if file is not None:
            path = Path(file)
            try:
                text = _read_file(path)
            except ValueError as e:
                raise UsageError(f"{flag} {path}: {e}") from None
            return [Job(str(path), path.stem, kind, text)]
    path = Path(args.json_schema)
    try:
        info = path.stat()
    except OSError as e:
        reason = "no such file or folder" if isinstance(e, FileNotFoundError) else _reason(e)
        raise UsageError(f"{path}: {reason}") from None
    if stat.S_ISDIR(info.st_mode):
        files = sorted(path.glob("*.json"))
        if not files:
            raise UsageError(f"{path} holds no *.json files")
        jobs = []
        for f in files:
            try:
                jobs.append(Job(str(f), f.stem, "json_schema", _schema_text(_read_file(f))))
            except ValueError as e:
                jobs.append(Job(str(f), f.stem, "json_schema", error=str(e)))
        return jobs
    if path.suffix == ".jsonl":
        return _jsonl_jobs(path)
    try:
        return [Job(str(path), path.stem, "json_schema", _schema_text(_read_file(path)))]
    except ValueError as e:
        raise UsageError(f"{path}: {e}") from None


def _name_outputs(jobs: list[Job]) -> None:
    """Fail the jobs whose output file name another job already has (JSONL ids that repeat,
    or that differ only in characters a file name cannot hold)."""
    seen: dict[str, str] = {}
    for job in jobs:
        if job.error is not None:
            continue
        name = _safe_name(job.stem)
        other = seen.setdefault(name, job.label)
        if other != job.label:
            job.error = f"its output file {name}.tsidx is also {other}'s (give each a distinct id)"


def _safe_name(name: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return keep[:100] or "schema"


def _vocabulary(args: argparse.Namespace) -> Vocabulary:
    """The vocabulary of ``--tokenizer``. A usage error naming the path when it cannot be read
    or is not a tokenizer at all; a ``ValueError`` naming it (exit 1, like a compile error)
    when the core read it and refuses it, or ``--vocab-size`` / ``--eos-token-id`` do not fit
    it."""
    path = args.tokenizer
    try:
        return Vocabulary.from_pretrained(
            path, vocab_size=args.vocab_size, eos_token_ids=args.eos_token_id
        )
    except FileNotFoundError as e:
        raise UsageError(f"--tokenizer: {e}") from None
    except TokensieveError as e:  # the core read it: its message says what does not fit
        raise ValueError(f"--tokenizer {path}: {e}") from None
    except Exception as e:
        raise UsageError(
            f"--tokenizer {path}: not a readable tokenizer ({type(e).__name__}: {e})"
        ) from None


def _registry(path: str) -> str:
    """The registry file's text, checked to hold a JSON object (the compiler reads the text, so
    its numbers stay exact)."""
    try:
        text = _read_file(Path(path))
        registry = _parse_json(text)
    except ValueError as e:
        raise UsageError(f"--registry {path}: {e}") from None
    if not isinstance(registry, dict):
        raise UsageError(f"--registry {path}: not a JSON object")
    return text


def _compile(args: argparse.Namespace) -> int:
    jobs = _jobs(args)
    vocab = _vocabulary(args)
    options = {k: getattr(args, k) for k in OPTION_NAMES if getattr(args, k, None) is not None}
    options.setdefault("max_states", AOT_MAX_STATES)
    options.setdefault("max_nfa_bytes", AOT_MAX_NFA_BYTES)
    options.setdefault("max_compile_seconds", AOT_MAX_COMPILE_SECONDS)
    if getattr(args, "registry", None):
        options["registry"] = _registry(args.registry)
    out = Path(args.output)
    several = len(jobs) > 1
    try:
        if several:
            if out.exists() and not out.is_dir():
                raise UsageError(f"-o {out}: not a folder (several schemas are written into one)")
            out.mkdir(parents=True, exist_ok=True)
        elif out.is_dir():
            raise UsageError(f"-o {out}: a folder (one constraint is written to a file)")
    except OSError as e:
        raise UsageError(f"-o {out}: {_reason(e)}") from None
    if several:
        _name_outputs(jobs)
    tty = sys.stderr.isatty()
    done = 0
    failures = 0

    def run(job: Job) -> tuple[str, dict[str, Any] | str]:
        if job.error is not None:
            return job.label, job.error
        t = time.perf_counter()
        try:
            opts = options
            if job.kind in JSON_KINDS and "max_nesting_depth" not in options:
                opts = {**options, "max_nesting_depth": AOT_MAX_NESTING_DEPTH}
            grammar = compile_constraint(job.kind, job.value, vocab, **opts)
            stats = grammar.precompute()
            target = out / f"{_safe_name(job.stem)}.tsidx" if several else out
            grammar.save(target)
        except Exception as e:  # one schema's failure is reported, the others go on
            return job.label, f"{type(e).__name__}: {e}"
        return job.label, {
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
    if failures and len(jobs) > 1:
        print(f"tokensieve: {failures} of {len(jobs)} failed", file=sys.stderr)
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
