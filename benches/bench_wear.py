"""Grammars that never wear out: many varied outputs through one shared grammar.

A grammar's lazily built automaton states are shared by all its matchers and bounded
(``max_states``, the table's byte budget); a serving cache keeps one grammar per constraint for
every request. This script feeds one grammar per case many different outputs, a few matchers in
flight at once (as in a batch), each output tokenized with the real tokenizer and every token
checked against a mask filled just before it, as when serving; the output must end accepting
and take EOS. It counts failures by kind (``BudgetError`` above all: before grammars renewed
their states, every case below ended in one for good), and reports the grammar's generations,
its newest generation's automaton states, the process's resident memory at the start and at
the end, and the time.

Cases (Llama 3 tokenizer, default options):

* ``json_object``: random JSON documents nested up to 14 levels (objects, arrays, strings,
  numbers, literals), with random whitespace;
* ``any_order_20``: an object schema of 20 optional properties of several types,
  ``property_order="any"``: random subsets in random order;
* ``regex_ab17``: ``[ab]*a[ab]{17}``, random strings of it;
* ``json_gbnf``: the project's JSON GBNF (``tests/grammars/json.gbnf``), random documents.

Run::

    python benches/bench_wear.py                # 20,000 outputs per case
    python benches/bench_wear.py --outputs 2000 --cases regex_ab17

It writes ``benches/results/wear.{md,json}`` (unless ``--no-write``); it prints SKIP and exits 0
when the Llama 3 tokenizer (``../shared/tokenizers/llama3``) is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import tokensieve as ts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import proc_status  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT.parent / "shared" / "tokenizers" / "llama3"
JSON_GBNF = ROOT / "tests" / "grammars" / "json.gbnf"
IN_FLIGHT = 8

ANY_ORDER_PROPS: dict[str, Any] = {}
for _i in range(20):
    _kind = ("string", "integer", "boolean", "number", "array")[_i % 5]
    ANY_ORDER_PROPS[f"p{_i:02d}"] = (
        {"type": "array", "items": {"type": "integer"}, "maxItems": 4}
        if _kind == "array"
        else {"type": _kind}
    )
ANY_ORDER_SCHEMA = {"type": "object", "properties": ANY_ORDER_PROPS, "additionalProperties": False}


def rss_mb() -> float:
    kib = proc_status().get("VmRSS")
    return float("nan") if kib is None else kib / 1024


def random_text(rng: random.Random, n: int) -> str:
    alphabet = string.ascii_letters + string.digits + " _-.,:é/"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))


def random_value(rng: random.Random, depth: int, max_depth: int) -> Any:
    r = rng.random()
    if depth < max_depth and r < 0.3:
        return {
            random_text(rng, 8) or "k": random_value(rng, depth + 1, max_depth)
            for _ in range(rng.randint(0, 3))
        }
    if depth < max_depth and r < 0.55:
        return [random_value(rng, depth + 1, max_depth) for _ in range(rng.randint(0, 3))]
    if r < 0.7:
        return random_text(rng, 12)
    if r < 0.82:
        return rng.randint(-(10**6), 10**6)
    if r < 0.9:
        return round(rng.uniform(-1000, 1000), rng.randint(0, 4))
    return rng.choice([True, False, None])


def deep_document(rng: random.Random) -> Any:
    """An object nested up to 14 levels: a spine of random containers 8 to 14 deep, with
    random values beside it."""
    depth = rng.randint(8, 14)
    value: Any = random_value(rng, 12, 14)
    for _ in range(depth - 1):
        if rng.random() < 0.5:
            items = [random_value(rng, 11, 13) for _ in range(rng.randint(0, 2))]
            items.insert(rng.randint(0, len(items)), value)
            value = items
        else:
            obj = {random_text(rng, 6) or "k": random_value(rng, 11, 13) for _ in range(2)}
            obj[random_text(rng, 6) + "x"] = value
            value = obj
    if not isinstance(value, dict):
        value = {"root": value}
    return value


def dump(rng: random.Random, doc: Any) -> str:
    """Compact, or with one space after `,` and `:` (indented text would pass the default
    whitespace bound, four characters, at depth)."""
    if rng.random() < 0.5:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(doc, ensure_ascii=False)


def any_order_document(rng: random.Random) -> str:
    keys = rng.sample(sorted(ANY_ORDER_PROPS), rng.randint(0, 20))
    doc: dict[str, Any] = {}
    for k in keys:
        kind = ANY_ORDER_PROPS[k]["type"]
        if kind == "string":
            doc[k] = random_text(rng, 10)
        elif kind == "integer":
            doc[k] = rng.randint(-(10**5), 10**5)
        elif kind == "boolean":
            doc[k] = rng.random() < 0.5
        elif kind == "number":
            doc[k] = round(rng.uniform(-100, 100), rng.randint(0, 3))
        else:
            doc[k] = [rng.randint(0, 999) for _ in range(rng.randint(0, 4))]
    return dump(rng, doc)


def regex_output(rng: random.Random) -> str:
    head = "".join(rng.choice("ab") for _ in range(rng.randint(0, 40)))
    return head + "a" + "".join(rng.choice("ab") for _ in range(17))


CASES = {
    "json_object": (
        "any JSON object, documents nested 8 to 14 levels",
        lambda v: ts.Grammar.from_json_object(v),
        lambda rng: dump(rng, deep_document(rng)),
    ),
    "any_order_20": (
        "20 optional properties, property_order=any",
        lambda v: ts.Grammar.from_json_schema(ANY_ORDER_SCHEMA, v, property_order="any"),
        any_order_document,
    ),
    "regex_ab17": (
        "regex [ab]*a[ab]{17}",
        lambda v: ts.Grammar.from_regex("[ab]*a[ab]{17}", v),
        regex_output,
    ),
    "json_gbnf": (
        "tests/grammars/json.gbnf, documents nested 8 to 14 levels",
        lambda v: ts.Grammar.from_ebnf(JSON_GBNF.read_text(), v),
        lambda rng: dump(rng, deep_document(rng)),
    ),
}


def run_case(name: str, vocab: ts.Vocabulary, tok: Any, outputs: int, seed: int) -> dict[str, Any]:
    _, build, make = CASES[name]
    rng = random.Random(seed)
    grammar = build(vocab)
    eos = vocab.eos_token_ids[0]
    rows = np.zeros((IN_FLIGHT, ts.bitmask_words(vocab.vocab_size)), dtype=np.int32)
    failures: dict[str, int] = {}
    first_failure = ""
    done = tokens = 0
    rss0 = rss_mb()
    t0 = time.perf_counter()
    live: list[tuple[Any, list[int], int]] = []  # matcher, tokens, next position
    started = 0

    def fail(kind: str, detail: str) -> None:
        nonlocal first_failure
        failures[kind] = failures.get(kind, 0) + 1
        if not first_failure:
            first_failure = f"output {done}: {kind}: {detail[:200]}"

    while done < outputs:
        while len(live) < IN_FLIGHT and started < outputs:
            text = make(rng)
            live.append((grammar.matcher(), tok.encode(text, add_special_tokens=False).ids, 0))
            started += 1
        if not live:
            break
        matchers = [m for m, _, _ in live]
        try:
            ts.fill_next_token_bitmask(matchers, rows, list(range(len(live))))
        except ts.TokensieveError as e:
            fail(type(e).__name__, str(e))
            done += len(live)
            live = []
            continue
        still = []
        for k, (m, ids, pos) in enumerate(live):
            t = ids[pos] if pos < len(ids) else eos
            allowed = (int(rows[k, t >> 5]) >> (t & 31)) & 1
            try:
                if not allowed or not m.accept_token(t):
                    fail("refused", f"token {t} at {pos} of {len(ids)}")
                    done += 1
                    continue
            except ts.TokensieveError as e:
                fail(type(e).__name__, str(e))
                done += 1
                continue
            tokens += 1
            if t == eos:
                done += 1
            else:
                still.append((m, ids, pos + 1))
        live = still
    seconds = time.perf_counter() - t0
    stats = grammar.stats()
    return {
        "case": name,
        "what": CASES[name][0],
        "outputs": done,
        "tokens": tokens,
        "failures": sum(failures.values()),
        "failure_kinds": failures,
        "first_failure": first_failure,
        "generations": stats["generations"],
        "newest_dfa_states": stats["dfa_states"],
        "rss_start_mb": round(rss0, 1),
        "rss_end_mb": round(rss_mb(), 1),
        "seconds": round(seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outputs", type=int, default=20_000)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not (TOKENIZER / "tokenizer.json").exists():
        print(f"SKIP: {TOKENIZER} is missing")
        return 0
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
    vocab = ts.Vocabulary.from_pretrained(str(TOKENIZER))
    results = []
    for name in args.cases.split(","):
        r = run_case(name, vocab, tok, args.outputs, args.seed)
        print(json.dumps(r), flush=True)
        results.append(r)
    if args.no_write:
        return 0
    out = ROOT / "benches" / "results"
    (out / "wear.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = [
        "# Grammars that never wear out",
        "",
        "Generated by `benches/bench_wear.py` "
        f"(`--outputs {args.outputs}`), Llama 3 tokenizer, default options, "
        f"{IN_FLIGHT} matchers in flight, a mask filled before every token. "
        f"`nproc` = {os.cpu_count()}, Python {sys.version.split()[0]}.",
        "",
        "| case | outputs | tokens | failures | generations | newest DFA states "
        "| RSS start → end MB | seconds |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['what']} | {r['outputs']:,} | {r['tokens']:,} | {r['failures']} "
            f"| {r['generations']} | {r['newest_dfa_states']:,} "
            f"| {r['rss_start_mb']:.0f} → {r['rss_end_mb']:.0f} | {r['seconds']:.0f} |"
        )
    for r in results:
        if r["first_failure"]:
            lines.append(f"\n{r['case']}: first failure: {r['first_failure']}")
    (out / "wear.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
