#!/usr/bin/env python3
"""Conformance of the JSON Schema compiler against the official JSON-Schema-Test-Suite.

For every test group of the suite (``../shared/data/json-schema-test-suite``; drafts 2020-12,
7 and 4) the group's schema is compiled with ``Grammar.from_json_schema`` for the Llama 3
vocabulary, and every test instance is serialized with ``json.dumps(data)`` (separators
``", "`` and ``": "``), tokenized with the Llama 3 tokenizer (no special tokens) and fed token
by token; the instance is *accepted* iff every token is accepted and EOS is allowed at the end.

Compile options per file kind:

* required tests (``<draft>/*.json``): ``formats="annotate"`` (the spec: ``format`` is an
  annotation unless the format-assertion vocabulary is in use);
* ``<draft>/optional/format/*.json``: ``formats="assert"``;
* other ``<draft>/optional/*.json``: the engine's defaults (which assert formats too).

Outcomes per instance: ``pass`` (valid accepted / invalid rejected), ``unsupported`` (the compile
raised a ``TokensieveError``: every instance of the group), ``false_negative`` (valid rejected),
``false_positive`` (invalid accepted), ``timeout`` (the group's compile + instances exceeded the
per-group cap; the worker is killed) and ``error`` (anything else: an unexpected exception or a
worker crash — always a bug). False negatives get a ``cause``, found empirically with the same
grammar: ``property order`` (some reordering of the instance's object keys is accepted),
``number spelling`` (the instance is accepted with integral floats spelled as integers and no
exponents), ``nesting/recursion bound`` (accepted when recompiled with larger
``max_nesting_depth``/``max_recursion_depth``), ``$ref siblings`` (draft 4/7 only: accepted when
the siblings of ``$ref``, which those drafts ignore, are dropped), ``lone surrogate`` (the
instance holds a lone surrogate, which the engine never produces), else ``unexplained``.

Remote references (``refRemote.json`` and others) need a registry mapping
``http://localhost:1234/...`` to the files of ``remotes/``, as the suite prescribes. The runner
passes ``registry={uri: document}`` to every group when ``Grammar.from_json_schema`` takes a
``registry`` keyword; without it ``refRemote.json`` groups are ``unsupported`` with the error
text.

The draft is implied by the directory: a draft 7 or draft 4 schema without ``$schema`` gets the
``$schema`` of its draft (``http://json-schema.org/draft-07/schema#`` /
``http://json-schema.org/draft-04/schema#``), so that the compiler applies that draft's rules
(siblings of ``$ref`` ignored, ``id`` instead of ``$id`` in draft 4).

Usage::

    python tests/conformance/run_conformance.py            # run, compare with expected_results.json
    python tests/conformance/run_conformance.py --update   # rewrite expected_results.json + REPORT.md
    python tests/conformance/run_conformance.py --drafts draft2020-12 --kinds required

``tests/test_conformance.py`` imports this module and fails on regressions.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import itertools
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: the tests folder holds shared_data
    sys.path.insert(0, str(HERE.parent))
from shared_data import LLAMA3_DIR as TOKENIZER_DIR  # noqa: E402
from shared_data import SUITE_DIR  # noqa: E402

EXPECTED_PATH = HERE / "expected_results.json"
REPORT_PATH = HERE / "REPORT.md"

DRAFTS = ("draft2020-12", "draft7", "draft4")
KINDS = ("required", "optional", "format")
OUTCOMES = ("pass", "unsupported", "false_negative", "false_positive", "timeout", "error")
REMOTE_PREFIX = "http://localhost:1234/"
# Per-group wall-clock cap (compile + every instance + classification), seconds.
DEFAULT_TIMEOUT = 20.0
STARTUP_TIMEOUT = 120.0
# Worker address-space cap, bytes.
WORKER_MEMORY = 6 << 30
# Formats the compiler asserts (docs/json-schema.md); other formats accept any string.
ASSERTED_FORMATS = {
    "date",
    "time",
    "date-time",
    "duration",
    "uuid",
    "ipv4",
    "ipv6",
    "hostname",
    "email",
    "uri",
    "uri-reference",
}
# The documented language of the asserted formats that are regular approximations
# (docs/json-schema.md, "format"): an invalid instance inside it that is accepted, or a valid one
# outside it that is rejected, is a documented approximation rather than a bug.
_LDH = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = rf"{_LDH}(?:\.{_LDH})*"
_TIME = (
    r"(?:[01]\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)(?:\.\d+)?"
    r"(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
)
_DATE = r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
DOCUMENTED_FORMATS = {
    # labels of 1-63 LDH characters, total length unbounded
    "hostname": re.compile(_HOST, re.ASCII),
    "email": re.compile(
        rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{_HOST}",
        re.ASCII,
    ),
    "time": re.compile(_TIME, re.ASCII),  # a leap second (:60) at any time
    "date-time": re.compile(rf"({_DATE})[Tt]{_TIME}", re.ASCII),
}
# Standard meta-schemas; another `$schema` may drop vocabularies, which the compiler ignores.
STANDARD_METASCHEMAS = {
    "https://json-schema.org/draft/2020-12/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-04/schema",
}
# Options of the recompile that tells whether a false negative is due to the documented bounds.
DEEP_OPTIONS = {"max_nesting_depth": 6, "max_recursion_depth": 6}
MAX_PERMUTATIONS = 5000


# --------------------------------------------------------------------------------------------
# The suite


def file_kind(key: str) -> str:
    """``required``, ``optional`` or ``format`` for a key like ``draft7/optional/format/x.json``."""
    parts = key.split("/")
    if len(parts) == 2:
        return "required"
    if parts[1:3] == ["optional", "format"]:
        return "format"
    return "optional"


def compile_options(kind: str) -> dict[str, Any]:
    if kind == "required":
        return {"formats": "annotate"}
    if kind == "format":
        return {"formats": "assert"}
    return {}


def suite_files(
    suite: Path = SUITE_DIR,
    drafts: tuple[str, ...] = DRAFTS,
    kinds: tuple[str, ...] = KINDS,
) -> list[str]:
    """Keys (paths relative to the suite folder) of the test files, in a stable order."""
    keys = []
    for draft in drafts:
        base = suite / draft
        patterns = {
            "required": "*.json",
            "optional": "optional/*.json",
            "format": "optional/format/*.json",
        }
        for kind in KINDS:
            if kind in kinds:
                keys += sorted(p.relative_to(suite).as_posix() for p in base.glob(patterns[kind]))
    return keys


DRAFT_SCHEMA = {
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft4": "http://json-schema.org/draft-04/schema#",
}


def with_draft(schema: Any, draft: str) -> Any:
    """The schema with the ``$schema`` its directory implies (draft 7/4), if it has none."""
    if isinstance(schema, dict) and "$schema" not in schema and draft in DRAFT_SCHEMA:
        return {"$schema": DRAFT_SCHEMA[draft], **schema}
    return schema


def load_registry(suite: Path = SUITE_DIR) -> dict[str, Any]:
    """``http://localhost:1234/<path>`` → the JSON document ``remotes/<path>``."""
    remotes = suite / "remotes"
    registry = {}
    for p in sorted(remotes.rglob("*.json")):
        registry[REMOTE_PREFIX + p.relative_to(remotes).as_posix()] = json.loads(p.read_text())
    return registry


def make_tasks(keys: list[str], suite: Path = SUITE_DIR, classify: bool = True) -> list[dict]:
    tasks = []
    for key in keys:
        kind = file_kind(key)
        groups = json.loads((suite / key).read_text())
        for gi, group in enumerate(groups):
            tasks.append(
                {
                    "file": key,
                    "group": gi,
                    "draft": key.split("/")[0],
                    "schema": with_draft(group["schema"], key.split("/")[0]),
                    "tests": group["tests"],
                    "options": compile_options(kind),
                    "needs_registry": key.endswith("/refRemote.json"),
                    "wants_registry": True,
                    "classify": classify,
                }
            )
    return tasks


# --------------------------------------------------------------------------------------------
# Serializations used to classify false negatives


def _has_lone_surrogate(v: Any) -> bool:
    if isinstance(v, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, list):
        return any(_has_lone_surrogate(x) for x in v)
    if isinstance(v, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(x) for k, x in v.items())
    return False


def _plain_number(x: float) -> str:
    """A float without exponent, and integral values without a fraction."""
    d = decimal.Decimal(repr(x))
    if d == d.to_integral_value():
        return str(int(d))
    return format(d, "f")


def dumps(v: Any, plain_numbers: bool = False) -> str:
    """``json.dumps(v)``, optionally with floats spelled by :func:`_plain_number`."""
    if isinstance(v, float) and plain_numbers:
        return _plain_number(v)
    if isinstance(v, list):
        return "[" + ", ".join(dumps(x, plain_numbers) for x in v) + "]"
    if isinstance(v, dict):
        return (
            "{"
            + ", ".join(json.dumps(k) + ": " + dumps(x, plain_numbers) for k, x in v.items())
            + "}"
        )
    return json.dumps(v)


def _orderings(v: Any) -> Iterator[Any]:
    """Every value equal to `v` up to the order of object keys (lazily)."""
    if isinstance(v, list):
        for items in itertools.product(*[list(_orderings_capped(x)) for x in v]):
            yield list(items)
    elif isinstance(v, dict):
        keys = list(v)
        subs = {k: list(_orderings_capped(v[k])) for k in keys}
        for perm in itertools.permutations(keys):
            for vals in itertools.product(*[subs[k] for k in perm]):
                yield dict(zip(perm, vals))
    else:
        yield v


def _orderings_capped(v: Any) -> Iterator[Any]:
    return itertools.islice(_orderings(v), MAX_PERMUTATIONS)


def _drop_ref_siblings(s: Any) -> Any:
    """Draft 4/7 semantics: a schema with ``$ref`` ignores its other keywords."""
    if isinstance(s, list):
        return [_drop_ref_siblings(x) for x in s]
    if not isinstance(s, dict):
        return s
    if "$ref" in s:
        keep = ("$ref", "definitions", "$defs")
        return {k: _drop_ref_siblings(x) for k, x in s.items() if k in keep}
    return {k: _drop_ref_siblings(x) for k, x in s.items()}


def _has_ref_siblings(s: Any) -> bool:
    if isinstance(s, list):
        return any(_has_ref_siblings(x) for x in s)
    if not isinstance(s, dict):
        return False
    if "$ref" in s and set(s) - {"$ref", "definitions", "$defs", "description", "title"}:
        return True
    return any(_has_ref_siblings(x) for x in s.values())


# --------------------------------------------------------------------------------------------
# The worker process


class _Engine:
    """The vocabulary and tokenizer, loaded once per worker."""

    def __init__(self, tokenizer_dir: str, suite: str) -> None:
        import tokenizers

        import tokensieve as ts

        self.ts = ts
        self.vocab = ts.Vocabulary.from_pretrained(tokenizer_dir)
        self.tok = tokenizers.Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        self.eos = set(self.vocab.eos_token_ids)
        self.suite = Path(suite)
        self._registry: dict[str, Any] | None = None
        self._registry_error: str | None = None
        self._registry_probed = False

    def registry(self) -> tuple[dict[str, Any] | None, str | None]:
        """The registry and None, or None and why ``registry=`` cannot be passed."""
        if not self._registry_probed:
            self._registry_probed = True
            try:
                self.ts.Grammar.from_json_schema(True, self.vocab, registry={})
                self._registry = load_registry(self.suite)
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
                try:  # a string value reaches the option table, which names the known options
                    self.ts.Grammar.from_json_schema(True, self.vocab, registry="")
                except Exception as e2:
                    if "unknown" in str(e2):
                        why += f"; registry='' raised {type(e2).__name__}: {e2}"
                self._registry_error = (
                    f"no registry support: from_json_schema(registry={{...}}) raised {why}"
                )
        return self._registry, self._registry_error

    def ids(self, text: str) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        spelled = b"".join(self.vocab.token_bytes(i) or b"" for i in ids)
        if spelled != text.encode():
            raise RuntimeError(f"tokenization does not round-trip: {text!r}")
        return ids

    def accepts(self, grammar: Any, text: str, one_by_one: bool = True) -> bool:
        ids = self.ids(text)
        m = grammar.matcher()
        if one_by_one:
            for t in ids:
                if not m.accept_token(t):
                    return False
        elif m.accept_tokens(ids) != len(ids):
            return False
        return bool(m.is_accepting())

    def compile(self, schema: Any, options: dict[str, Any]) -> Any:
        return self.ts.Grammar.from_json_schema(schema, self.vocab, **options)


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _in_documented_format(schema: Any, options: dict[str, Any], data: Any) -> bool | None:
    """Whether string `data` is in the documented language of the schema's asserted `format`
    (None: no such format, or no documented approximation for it)."""
    if options.get("formats", "assert") != "assert" or not isinstance(schema, dict):
        return None
    pattern = DOCUMENTED_FORMATS.get(schema.get("format"))
    if pattern is None or not isinstance(data, str):
        return None
    m = pattern.fullmatch(data)
    if m is None:
        return False
    if schema["format"] == "date-time":  # days per month are exact
        year, month, day = (int(x) for x in m.group(1).split("-"))
        try:  # Python has no year 0; 2000 has the same leap-year status
            datetime.date(year or 2000, month, day)
        except ValueError:
            return False
    return True


def _uses_content(schema: Any) -> bool:
    if isinstance(schema, list):
        return any(_uses_content(x) for x in schema)
    if not isinstance(schema, dict):
        return False
    if any(k.startswith("content") for k in schema):
        return True
    return any(_uses_content(x) for x in schema.values())


def _classify_fp(task: dict, data: Any, warnings: list[str]) -> str:
    """Why an invalid instance was accepted: a documented limitation, or ``bug``."""
    schema = task["schema"]
    options = task["options"]
    if isinstance(schema, dict) and options.get("formats", "assert") == "assert":
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt not in ASSERTED_FORMATS:
            return "unknown format (documented)"
        if _in_documented_format(schema, options, data):
            return "format approximation (documented)"
    if _uses_content(schema):
        return "content* annotation (documented)"
    if warnings:
        return "keyword ignored with a warning (documented)"
    return "bug"


def _classify_fn(eng: _Engine, grammar: Any, task: dict, data: Any, deadline: float) -> str:
    """Why a valid instance was rejected (see the module docstring)."""
    if _has_lone_surrogate(data):
        return "lone surrogate"
    if _in_documented_format(task["schema"], task["options"], data) is False:
        return "format approximation (documented)"
    if eng.accepts(grammar, dumps(data, plain_numbers=True), one_by_one=False):
        return "number spelling"
    for variant in itertools.islice(_orderings(data), 1, MAX_PERMUTATIONS):
        if time.monotonic() > deadline:
            return "unclassified (time)"
        for plain in (False, True):
            if eng.accepts(grammar, dumps(variant, plain), one_by_one=False):
                return "property order"
    schema = task["schema"]
    options = dict(task["options"])
    if task["draft"] in ("draft4", "draft7") and _has_ref_siblings(schema):
        try:
            g = eng.compile(_drop_ref_siblings(schema), options)
            if eng.accepts(g, json.dumps(data)):
                return "$ref siblings"
        except Exception:
            pass
    if time.monotonic() > deadline:
        return "unclassified (time)"
    try:
        options.update(DEEP_OPTIONS)
        options.setdefault("max_compile_seconds", max(1.0, deadline - time.monotonic()))
        g = eng.compile(schema, options)
        if eng.accepts(g, json.dumps(data)) or eng.accepts(g, dumps(data, True)):
            return "nesting/recursion bound"
    except Exception:
        pass
    meta = schema.get("$schema") if isinstance(schema, dict) else None
    if isinstance(meta, str) and meta not in STANDARD_METASCHEMAS:
        return "custom $schema (vocabularies not read)"
    return "unexplained"


def run_group(eng: _Engine, task: dict, timeout: float) -> dict[str, Any]:
    """Compile one group's schema and run its instances."""
    start = time.monotonic()
    deadline = start + timeout * 0.8
    ts = eng.ts
    out: dict[str, Any] = {"file": task["file"], "group": task["group"]}
    options = dict(task["options"])
    options["max_compile_seconds"] = timeout
    n = len(task["tests"])
    if task["needs_registry"] or task.get("wants_registry"):
        registry, why = eng.registry()
        if registry is None and task["needs_registry"]:
            out.update(compile="unsupported", error=why, error_type="registry", keyword=None)
            out["tests"] = [{"outcome": "unsupported"} for _ in range(n)]
            return out
        if registry is not None:
            options["registry"] = registry
    try:
        grammar = eng.compile(task["schema"], options)
    except ts.TokensieveError as e:
        out.update(
            compile="unsupported",
            error=_error_text(e),
            error_type=type(e).__name__,
            keyword=getattr(e, "keyword", None),
            pointer=getattr(e, "pointer", None),
        )
        out["tests"] = [{"outcome": "unsupported"} for _ in range(n)]
        out["compile_seconds"] = time.monotonic() - start
        return out
    except Exception as e:  # not a clear TokensieveError: a bug
        out.update(compile="error", error=_error_text(e), error_type=type(e).__name__)
        out["tests"] = [{"outcome": "error", "error": _error_text(e)} for _ in range(n)]
        out["compile_seconds"] = time.monotonic() - start
        return out
    out["compile"] = "ok"
    out["compile_seconds"] = time.monotonic() - start
    out["warnings"] = list(grammar.warnings)
    tests = []
    for t in task["tests"]:
        try:
            accepted = eng.accepts(grammar, json.dumps(t["data"]))
        except Exception as e:
            tests.append({"outcome": "error", "error": _error_text(e)})
            continue
        if accepted == t["valid"]:
            tests.append({"outcome": "pass"})
        elif t["valid"]:
            r: dict[str, Any] = {"outcome": "false_negative"}
            if task["classify"]:
                try:
                    r["cause"] = _classify_fn(eng, grammar, task, t["data"], deadline)
                except Exception as e:
                    r["cause"] = f"unclassified ({_error_text(e)})"
            tests.append(r)
        else:
            tests.append(
                {
                    "outcome": "false_positive",
                    "cause": _classify_fp(task, t["data"], out["warnings"]),
                }
            )
    out["tests"] = tests
    out["seconds"] = time.monotonic() - start
    return out


def _worker(conn: Any, tokenizer_dir: str, suite: str, timeout: float) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    except (ImportError, ValueError, OSError):
        pass
    eng = _Engine(tokenizer_dir, suite)
    conn.send("ready")
    while True:
        task = conn.recv()
        if task is None:
            return
        conn.send(run_group(eng, task, timeout))


# --------------------------------------------------------------------------------------------
# The parent: a small pool with a hard per-group timeout


class _Slot:
    def __init__(self, ctx: Any, tokenizer_dir: Path, suite: Path, timeout: float) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker, args=(child, str(tokenizer_dir), str(suite), timeout), daemon=True
        )
        self.proc.start()
        child.close()
        self.ready = False
        self.started = time.monotonic()
        self.task: dict | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def _failed(task: dict, outcome: str, why: str) -> dict[str, Any]:
    return {
        "file": task["file"],
        "group": task["group"],
        "compile": outcome,
        "error": why,
        "error_type": outcome,
        "tests": [{"outcome": outcome} for _ in task["tests"]],
        "seconds": None,
    }


def run_tasks(
    tasks: list[dict],
    jobs: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    tokenizer_dir: Path = TOKENIZER_DIR,
    suite: Path = SUITE_DIR,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Run the groups in `jobs` worker processes; a group over `timeout` seconds is killed."""
    ctx = mp.get_context("spawn")
    pending = list(reversed(tasks))
    results: list[dict[str, Any]] = []
    slots = [_Slot(ctx, tokenizer_dir, suite, timeout) for _ in range(max(1, jobs))]
    try:
        while pending or any(s.task is not None for s in slots):
            for s in slots:
                if s.ready and s.task is None and pending:
                    s.task = pending.pop()
                    s.deadline = time.monotonic() + timeout
                    s.conn.send(s.task)
            busy = [s for s in slots if s.task is not None or not s.ready]
            now = time.monotonic()
            wait = min([s.deadline - now for s in busy if s.task is not None] + [1.0])
            ready = mp.connection.wait([s.conn for s in busy], timeout=max(0.0, wait))
            for i, s in enumerate(slots):
                if s.conn in ready:
                    try:
                        msg = s.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg == "ready":
                        s.ready = True
                        continue
                    if msg is None:  # the worker died
                        if s.task is None:
                            raise RuntimeError("a conformance worker died while starting")
                        code = s.proc.exitcode
                        results.append(_failed(s.task, "error", f"worker died (exit code {code})"))
                        s.kill()
                        slots[i] = _Slot(ctx, tokenizer_dir, suite, timeout)
                        continue
                    results.append(msg)
                    s.task = None
                    if progress and len(results) % 50 == 0:
                        print(f"  {len(results)}/{len(tasks)} groups", file=sys.stderr)
                elif s.task is not None and time.monotonic() > s.deadline:
                    results.append(_failed(s.task, "timeout", f"over {timeout:g} s"))
                    s.kill()
                    slots[i] = _Slot(ctx, tokenizer_dir, suite, timeout)
                elif not s.ready and time.monotonic() > s.started + STARTUP_TIMEOUT:
                    raise RuntimeError(
                        f"a conformance worker did not start within {STARTUP_TIMEOUT:g} s"
                    )
    finally:
        for s in slots:
            try:
                s.conn.send(None)
            except OSError:
                pass
        for s in slots:
            s.proc.join(timeout=5)
            if s.proc.is_alive():
                s.kill()
    results.sort(key=lambda r: (r["file"], r["group"]))
    return results


# --------------------------------------------------------------------------------------------
# Results, comparison and report


def _counts(tests: list[dict]) -> dict[str, int]:
    c = Counter(t["outcome"] for t in tests)
    return {o: c.get(o, 0) for o in OUTCOMES}


def build_results(
    keys: list[str], group_results: list[dict[str, Any]], suite: Path = SUITE_DIR
) -> dict[str, Any]:
    """The expected-results document: per file, per group, per instance; plus totals."""
    by_file: dict[str, list[dict]] = {}
    for r in group_results:
        by_file.setdefault(r["file"], []).append(r)
    files: dict[str, Any] = {}
    totals: dict[str, dict[str, dict[str, int]]] = {}
    for key in keys:
        groups_src = json.loads((suite / key).read_text())
        groups = []
        all_tests = []
        for r in by_file.get(key, []):
            src = groups_src[r["group"]]
            g: dict[str, Any] = {"description": src["description"], "compile": r["compile"]}
            if r.get("error"):
                g["error"] = r["error"]
            if r.get("keyword"):
                g["keyword"] = r["keyword"]
            if r.get("warnings"):
                g["warnings"] = r["warnings"]
            tests = []
            for t_src, t in zip(src["tests"], r["tests"]):
                e: dict[str, Any] = {
                    "description": t_src["description"],
                    "valid": t_src["valid"],
                    "outcome": t["outcome"],
                }
                for extra in ("cause", "error"):
                    if extra in t:
                        e[extra] = t[extra]
                tests.append(e)
            g["tests"] = tests
            groups.append(g)
            all_tests += tests
        files[key] = {"kind": file_kind(key), "counts": _counts(all_tests), "groups": groups}
        draft = key.split("/")[0]
        tot = totals.setdefault(draft, {}).setdefault(
            file_kind(key), dict.fromkeys(("instances",) + OUTCOMES, 0)
        )
        tot["instances"] += len(all_tests)
        for o, n in files[key]["counts"].items():
            tot[o] += n
    return {
        "suite": "json-schema-org/JSON-Schema-Test-Suite (../shared/data/json-schema-test-suite)",
        "tokenizer": "llama3",
        "serialization": "json.dumps(data), separators ', ' and ': '",
        "options": {k: compile_options(k) for k in KINDS},
        "totals": totals,
        "files": files,
    }


def _index(doc: dict[str, Any]) -> dict[tuple[str, int, int], dict]:
    out = {}
    for key, f in doc["files"].items():
        for gi, g in enumerate(f["groups"]):
            for ti, t in enumerate(g["tests"]):
                out[(key, gi, ti)] = {**t, "group": g["description"]}
    return out


def compare(expected: dict[str, Any], actual: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(regressions, improvements) of `actual` against `expected`, over the files in `actual`.

    Regressions: an instance that passed and no longer does, a new false positive, a new
    ``error``, or a suite instance that changed or is missing from the expected file.
    Improvements: any other change of outcome (mostly: now passes)."""
    exp = _index(expected)
    regressions, improvements = [], []
    for k, a in _index(actual).items():
        where = f"{k[0]} group {k[1]} ({a['group']!r}) test {k[2]} ({a['description']!r})"
        e = exp.get(k)
        if e is None or e["description"] != a["description"] or e["valid"] != a["valid"]:
            regressions.append(f"{where}: not in the expected file (suite changed?)")
            continue
        if e["outcome"] == a["outcome"]:
            continue
        change = f"{where}: {e['outcome']} -> {a['outcome']}"
        if a.get("error"):
            change += f" ({a['error']})"
        if (
            e["outcome"] == "pass"
            or a["outcome"] == "false_positive"
            or (a["outcome"] == "error" and e["outcome"] != "error")
        ):
            regressions.append(change)
        else:
            improvements.append(change)
    return regressions, improvements


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def _short(v: Any, limit: int = 300) -> str:
    s = json.dumps(v)
    return s if len(s) <= limit else s[:limit] + " …"


# Human analysis of false positives and unexplained false negatives, keyed by (file path
# without the draft folder, group description, test description); shown in REPORT.md.
ANALYSIS: dict[tuple[str, str, str], str] = {}


def _note(key: str, src: dict, tt: dict) -> str | None:
    return ANALYSIS.get((key.split("/", 1)[1], src["description"], tt["description"]))


def write_report(
    doc: dict[str, Any],
    group_results: list[dict[str, Any]],
    elapsed: float,
    jobs: int,
    timeout: float,
    suite: Path = SUITE_DIR,
) -> str:
    lines: list[str] = []
    w = lines.append
    t = doc["totals"]
    req = t.get("draft2020-12", {}).get("required")
    w("# JSON-Schema-Test-Suite conformance\n")
    w(
        "Generated by `python tests/conformance/run_conformance.py --update` "
        "(do not edit by hand; the analysis notes live in `ANALYSIS` in that script).\n"
    )
    if req:
        w(
            f"**{req['pass']:,} of {req['instances']:,} required draft2020-12 instances pass "
            f"({_pct(req['pass'], req['instances'])}).**\n"
        )
    w(
        "Protocol: each group's schema is compiled with `Grammar.from_json_schema` for the Llama 3 "
        'vocabulary; each instance is `json.dumps(data)` (separators `", "`, `": "`), '
        "tokenized with the Llama 3 tokenizer and fed token by token; accepted iff every token is "
        'accepted and EOS is allowed at the end. Options: required tests `formats="annotate"`; '
        '`optional/format/*` `formats="assert"`; other `optional/*` the engine defaults '
        "(formats asserted). Every group gets `registry=` with the suite's `remotes/` "
        "(`http://localhost:1234/...`); draft 7/4 schemas without `$schema` get their draft's. "
        f"Per-group cap {timeout:g} s (compile + instances, worker killed), "
        f"{jobs} worker processes, wall time of this run {elapsed:.0f} s.\n"
    )
    w(
        "Outcomes: **pass**; **unsup** = the compile raised a `TokensieveError` (all instances of "
        "the group); **FN** = valid instance rejected; **FP** = invalid instance accepted; "
        "**timeout**; **error** = any other exception or a worker crash (a bug). FN are split "
        "into *by design* (documented restrictions, found empirically with the same grammar: "
        "an accepted key reordering → property order; integral floats spelled as integers / no "
        "exponent → number spelling; accepted after recompiling with larger "
        "`max_nesting_depth`/`max_recursion_depth` → nesting/recursion bound; draft 4/7 only, "
        "accepted once `$ref` siblings are dropped → `$ref` siblings; lone surrogates; an "
        "instance outside the documented approximation of an asserted format, e.g. quoted "
        "e-mail local parts → format approximation; a custom `$schema` whose vocabularies the "
        "compiler does not read) and *unexplained* (bugs).\n"
    )

    w("## Totals\n")
    w("| draft | tests | instances | pass | % | unsup | FN | FN by design | FP | timeout | error |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    fn_causes_by = _fn_causes(doc)
    for draft in DRAFTS:
        for kind in KINDS:
            c = t.get(draft, {}).get(kind)
            if not c:
                continue
            by_design = sum(
                n for cause, n in fn_causes_by.get((draft, kind), {}).items() if _by_design(cause)
            )
            label = {"required": "required", "optional": "optional", "format": "optional/format"}
            w(
                f"| {draft} | {label[kind]} | {c['instances']} | {c['pass']} | "
                f"{_pct(c['pass'], c['instances'])} | {c['unsupported']} | "
                f"{c['false_negative']} | {by_design} | {c['false_positive']} | "
                f"{c['timeout']} | {c['error']} |"
            )
    w("")
    w(
        "Pass rate among the instances whose schema compiles (required tests): "
        + ", ".join(
            f"{d} {_pct(c['pass'], c['instances'] - c['unsupported'])}"
            for d in DRAFTS
            if (c := t.get(d, {}).get("required"))
        )
        + ".\n"
    )

    empty = sum(
        len(g["tests"])
        for key, f in doc["files"].items()
        if key.startswith("draft2020-12/") and f["kind"] == "required"
        for g in f["groups"]
        if "no JSON value satisfies" in g.get("error", "")
    )
    if req and empty:
        w(
            f"{empty} of the unsupported required draft2020-12 instances belong to schemas that "
            "no value satisfies (`false`, `enum: []`, `allOf` with `false`, …): the compiler "
            "refuses them with a `SchemaError` and every one of those instances is invalid, so "
            f"counting them as passes would give {req['pass'] + empty:,} of {req['instances']:,} "
            f"({_pct(req['pass'] + empty, req['instances'])}).\n"
        )

    # False positives.
    schemas = {}
    for key in doc["files"]:
        schemas[key] = json.loads((suite / key).read_text())
    fps = []
    fns = []
    for key, f in doc["files"].items():
        for gi, g in enumerate(f["groups"]):
            for ti, tt in enumerate(g["tests"]):
                src = schemas[key][gi]
                if tt["outcome"] == "false_positive":
                    fps.append((key, g, src, src["tests"][ti], tt.get("cause", "")))
                if tt["outcome"] == "false_negative" and not _by_design(tt.get("cause", "")):
                    fns.append((key, g, src, src["tests"][ti], tt.get("cause")))
    fp_bugs = [x for x in fps if not _by_design(x[4])]
    fp_doc = [x for x in fps if _by_design(x[4])]
    w(f"## False positives ({len(fps)}: {len(fp_bugs)} bugs, {len(fp_doc)} documented)\n")
    w(
        "Invalid instances the grammar accepts. The cause is assigned by the runner: "
        "`unknown format` (a format the compiler does not assert accepts any string), "
        "`format approximation` (the instance is inside the documented regular approximation "
        "of an asserted format: hostname labels are LDH only, no IDNA/punycode checks, total "
        "length unbounded; "
        "leap seconds at any time), `content* annotation` (draft 7 optional content tests; "
        "`content*` are documented annotations), else `bug`.\n"
    )
    w(f"### Bugs ({len(fp_bugs)})\n")
    w(
        "(The first run of this runner found two: `allOf` moving one branch's `prefixItems` in "
        "front of another's `items`, and `duration` accepting non-contiguous components such "
        "as `P1Y2D`; both fixed in commits a0fd1de and 3efa2cc.)\n"
    )
    for key, _g, src, tt, cause in fp_bugs:
        note = _note(key, src, tt)
        w(f"* `{key}` — {src['description']!r} / {tt['description']!r} ({cause})")
        w(f"  * schema: `{_short(src['schema'])}`")
        w(f"  * instance: `{_short(tt['data'], 200)}`")
        if note:
            w(f"  * why: {note}")
    w("")
    w(f"### Documented limitations ({len(fp_doc)})\n")
    w("| file | group / test | schema | instance | cause |")
    w("|---|---|---|---|---|")
    for key, _g, src, tt, cause in fp_doc:
        schema = dict(src["schema"]) if isinstance(src["schema"], dict) else src["schema"]
        if isinstance(schema, dict):
            schema.pop("$schema", None)
        sch = _short(schema, 80).replace("|", "\\|").replace("`", "'")
        inst = _short(tt["data"], 80).replace("|", "\\|").replace("`", "'")
        desc = f"{src['description']} / {tt['description']}".replace("|", "\\|")
        w(f"| `{key}` | {desc} | `{sch}` | `{inst}` | {cause} |")
    w("")

    w("## False negatives by cause\n")
    causes: Counter[str] = Counter()
    for per in fn_causes_by.values():
        causes.update(per)
    w("| cause | instances | by design |")
    w("|---|---:|---|")
    for cause, n in causes.most_common():
        w(f"| {cause} | {n} | {'yes' if _by_design(cause) else 'no'} |")
    w("")
    w("Per draft and file kind: ")
    for (draft, kind), per in sorted(fn_causes_by.items()):
        w(f"* {draft} {kind}: " + ", ".join(f"{c} {n}" for c, n in per.most_common()))
    w("")
    w(f"### Unexplained false negatives ({len(fns)})\n")
    for key, _g, src, tt, cause in fns:
        note = _note(key, src, tt)
        w(f"* `{key}` — {src['description']!r} / {tt['description']!r} ({cause})")
        w(f"  * schema: `{_short(src['schema'])}`")
        w(f"  * instance: `{_short(tt['data'], 200)}`")
        if note:
            w(f"  * why: {note}")
    w("")

    # Unsupported keywords.
    w("## Unsupported: most frequent reasons\n")
    by_reason: Counter[str] = Counter()
    by_reason_groups: Counter[str] = Counter()
    by_req: Counter[str] = Counter()
    for key, f in doc["files"].items():
        for g in f["groups"]:
            if g["compile"] != "unsupported":
                continue
            reason = _reason(g)
            n = len(g["tests"])
            by_reason[reason] += n
            by_reason_groups[reason] += 1
            if key.startswith("draft2020-12/") and f["kind"] == "required":
                by_req[reason] += n
    w("| reason | instances (all files) | groups | required draft2020-12 instances |")
    w("|---|---:|---:|---:|")
    for reason, n in by_reason.most_common():
        w(f"| {reason} | {n} | {by_reason_groups[reason]} | {by_req.get(reason, 0)} |")
    w("")

    # Timeouts, errors, slow groups.
    slow = sorted(
        (r for r in group_results if r.get("seconds") or r.get("compile_seconds")),
        key=lambda r: -(r.get("seconds") or r.get("compile_seconds") or 0),
    )[:10]
    bad = [
        (key, g)
        for key, f in doc["files"].items()
        for g in f["groups"]
        if g["compile"] in ("timeout", "error") or any(x["outcome"] == "error" for x in g["tests"])
    ]
    w(f"## Timeouts and errors ({len(bad)} groups)\n")
    for key, g in bad:
        errs = {x.get("error") for x in g["tests"] if x.get("error")}
        w(f"* `{key}` — {g['description']!r}: {g['compile']} {g.get('error', '')} {sorted(errs)}")
    w("")
    w("## Slowest groups (compile + instances)\n")
    w("| file | group | seconds |")
    w("|---|---|---:|")
    for r in slow:
        desc = doc["files"][r["file"]]["groups"][r["group"]]["description"]
        w(f"| `{r['file']}` | {desc} | {(r.get('seconds') or r.get('compile_seconds')):.2f} |")
    w("")

    w("## Per file\n")
    for draft in DRAFTS:
        keys = [k for k in doc["files"] if k.startswith(draft + "/")]
        if not keys:
            continue
        w(f"### {draft}\n")
        w("| file | instances | pass | unsup | FN (by design) | FP | timeout | error |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|")
        for key in keys:
            f = doc["files"][key]
            c = f["counts"]
            n = sum(c.values())
            fn_design = sum(
                1
                for g in f["groups"]
                for x in g["tests"]
                if x["outcome"] == "false_negative" and _by_design(x.get("cause", ""))
            )
            w(
                f"| {key.split('/', 1)[1]} | {n} | {c['pass']} | {c['unsupported']} | "
                f"{c['false_negative']} ({fn_design}) | {c['false_positive']} | "
                f"{c['timeout']} | {c['error']} |"
            )
        w("")
    return "\n".join(lines) + "\n"


BY_DESIGN = {
    "property order",
    "number spelling",
    "nesting/recursion bound",
    "$ref siblings",
    "lone surrogate",
    "format approximation (documented)",
    "custom $schema (vocabularies not read)",
    # false positives
    "unknown format (documented)",
    "content* annotation (documented)",
    "keyword ignored with a warning (documented)",
}


def _by_design(cause: str) -> bool:
    return cause in BY_DESIGN


def _fn_causes(doc: dict[str, Any]) -> dict[tuple[str, str], Counter[str]]:
    out: dict[tuple[str, str], Counter[str]] = {}
    for key, f in doc["files"].items():
        for g in f["groups"]:
            for x in g["tests"]:
                if x["outcome"] == "false_negative":
                    out.setdefault((key.split("/")[0], f["kind"]), Counter())[
                        x.get("cause", "unclassified")
                    ] += 1
    return out


def _reason(g: dict[str, Any]) -> str:
    if g.get("keyword"):
        return f"`{g['keyword']}`"
    err = g.get("error", "")
    if err.startswith("no registry support"):
        return "no `registry=` option (remote refs)"
    if "no JSON value satisfies" in err:
        return "empty language (a `false`-equivalent schema; every instance is invalid)"
    return err.split(":", 1)[0] or "?"


# --------------------------------------------------------------------------------------------


def run(
    drafts: tuple[str, ...] = DRAFTS,
    kinds: tuple[str, ...] = KINDS,
    jobs: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    classify: bool = True,
    progress: bool = False,
    suite: Path = SUITE_DIR,
    tokenizer_dir: Path = TOKENIZER_DIR,
    retry_timeouts: bool = True,
    extra_options: dict[str, Any] | None = None,
) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """Run the suite files of `drafts` × `kinds`: (file keys, results document, group results);
    `extra_options` go to every compile beside the protocol's."""
    keys = suite_files(suite, drafts, kinds)
    tasks = make_tasks(keys, suite, classify)
    for t in tasks:
        t["options"].update(extra_options or {})
    results = run_tasks(tasks, jobs, timeout, tokenizer_dir, suite, progress)
    timed_out = {(r["file"], r["group"]) for r in results if r["compile"] == "timeout"}
    if timed_out and retry_timeouts:
        # A busy machine can stall a worker: give timed-out groups one more, longer, solo try.
        again = [t for t in tasks if (t["file"], t["group"]) in timed_out]
        redo = run_tasks(again, 1, timeout * 3, tokenizer_dir, suite)
        results = [r for r in results if (r["file"], r["group"]) not in timed_out] + redo
        results.sort(key=lambda r: (r["file"], r["group"]))
    return keys, build_results(keys, results, suite), results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--update", action="store_true", help="rewrite expected_results.json and REPORT.md"
    )
    ap.add_argument("--drafts", nargs="+", default=list(DRAFTS), choices=DRAFTS)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per group")
    ap.add_argument("--no-classify", action="store_true", help="skip the false-negative causes")
    ap.add_argument("--output", type=Path, help="also write the results document here")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra compile option for every group (e.g. property_order=any); not with --update",
    )
    args = ap.parse_args(argv)
    extra: dict[str, Any] = {}
    for kv in args.option:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--option takes KEY=VALUE, got {kv!r}")
        extra[key] = value
    if extra and args.update:
        ap.error("--update records the protocol's options; drop --option")
    if not SUITE_DIR.is_dir() or not (TOKENIZER_DIR / "tokenizer.json").is_file():
        print(f"missing {SUITE_DIR} or {TOKENIZER_DIR}", file=sys.stderr)
        return 2
    if args.update and (set(args.drafts) != set(DRAFTS) or set(args.kinds) != set(KINDS)):
        ap.error("--update runs the whole suite; drop --drafts/--kinds")
    start = time.monotonic()
    _, doc, results = run(
        tuple(args.drafts),
        tuple(args.kinds),
        args.jobs,
        args.timeout,
        not args.no_classify,
        progress=True,
        extra_options=extra,
    )
    elapsed = time.monotonic() - start
    if args.output:
        args.output.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    for draft, per in doc["totals"].items():
        for kind, c in per.items():
            print(
                f"{draft:13} {kind:9} {c['instances']:5} instances: {c['pass']:5} pass "
                f"({_pct(c['pass'], c['instances'])}), {c['unsupported']} unsupported, "
                f"{c['false_negative']} FN, {c['false_positive']} FP, {c['timeout']} timeout, "
                f"{c['error']} error"
            )
    print(f"{elapsed:.1f} s")
    if args.update:
        EXPECTED_PATH.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        REPORT_PATH.write_text(write_report(doc, results, elapsed, args.jobs, args.timeout))
        print(f"wrote {EXPECTED_PATH.name} and {REPORT_PATH.name}")
        return 0
    if extra:
        return 0  # other options than the recorded results': nothing to compare
    if not EXPECTED_PATH.is_file():
        print("no expected_results.json yet: run with --update", file=sys.stderr)
        return 1
    regressions, improvements = compare(json.loads(EXPECTED_PATH.read_text()), doc)
    for s in improvements:
        print("improved:", s)
    for s in regressions:
        print("REGRESSION:", s)
    if improvements:
        print(f"{len(improvements)} improvement(s): refresh with --update")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
