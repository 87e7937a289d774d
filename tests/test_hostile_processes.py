"""Hostile inputs, each run in a child process under an address-space limit and a time limit.

Every case must end in a result or a typed exception (`TokensieveError`, `ValueError`, and for
misuse of an argument's type or range `TypeError`/`OverflowError`), never in an abort, a
segfault, a stall past the time limit, or an untyped error such as a Rust panic. The corpus holds
the inputs that once crashed or stalled the process; hypothesis adds generated schemas and
regexes, run in one child per batch (a crash names the case that caused it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

MEMORY_LIMIT = 4 << 30
TYPED = {"ok", "TokensieveError", "ValueError", "TypeError", "OverflowError"}

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    import numpy as np
    import tokensieve as ts
    vocab = ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<eos>"], eos_token_ids=[256])
    for line in sys.stdin:
        code = json.loads(line)
        try:
            exec(code, {{"ts": ts, "np": np, "vocab": vocab}})
            out = "ok"
        except ts.TokensieveError:
            out = "TokensieveError"
        except (ValueError, TypeError, OverflowError) as e:
            out = type(e).__name__
        except BaseException as e:
            out = f"untyped {{type(e).__name__}}: {{str(e)[:200]}}"
        print(json.dumps(out), flush=True)
    """
)


def run_cases(cases: list[str], timeout: float) -> list[str]:
    """Run `cases` (Python statements using `ts`, `np`, `vocab`) in order in one child; the
    outcome of each. Fails on a crash or a timeout, naming the case."""
    child = CHILD.format(limit=MEMORY_LIMIT)
    stdin = "".join(json.dumps(c) + "\n" for c in cases)
    try:
        p = subprocess.run(
            [sys.executable, "-c", child],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        done = (e.stdout or b"").count(b"\n") if isinstance(e.stdout, bytes) else 0
        pytest.fail(
            f"timed out after {timeout} s at case {done}: {cases[min(done, len(cases) - 1)]}"
        )
    outs = [json.loads(x) for x in p.stdout.splitlines()]
    if p.returncode != 0 or len(outs) != len(cases):
        at = cases[min(len(outs), len(cases) - 1)]
        pytest.fail(
            f"the child died (exit {p.returncode}) at case {len(outs)}: {at[:300]}\n"
            f"{p.stderr[-2000:]}"
        )
    return outs


# (statement, expected outcome) — each was a crash, a stall or a silent error once
CORPUS: list[tuple[str, str]] = [
    ("ts.Vocabulary([b'a'], [0], vocab_size=2**31)", "TokensieveError"),
    ("ts.Grammar.from_json_schema({'const': 'x' * 10_000_000}, vocab)", "TokensieveError"),
    (
        "ts.Grammar.from_json_schema({'enum': [c * 1_000_000 for c in 'abcdefghij']}, vocab)",
        "TokensieveError",
    ),
    ("ts.Grammar.from_json_schema({'enum': [f'm{i}' for i in range(100_000)]}, vocab)", "ok"),
    ("ts.Grammar.from_json_schema({'enum': list(range(100_000))}, vocab)", "ok"),
    (
        "ts.Grammar.from_json_schema({'enum': [i / 7 for i in range(100_000)]}, vocab)",
        "TokensieveError",
    ),
    (
        "ts.Grammar.from_regex(''.join(['\\\\p{L}', '\\\\p{N}', '\\\\p{Greek}', '\\\\p{Han}'] * 8),"
        " vocab).matcher().fill_next_token_bitmask(np.zeros((1, 9), dtype=np.int32))",
        "ok",
    ),
    ("ts.Grammar.from_regex('(' * 1000 + 'a' + ')' * 1000, vocab)", "TokensieveError"),
    (
        "ts.Grammar.from_regex('(?:a{1000}){1000}', vocab).matcher().accept_tokens([97] * 5000)",
        "ok",
    ),
    (
        "d = {}\nx = d\nfor _ in range(100_000):\n    x['not'] = {}\n    x = x['not']\n"
        "ts.Grammar.from_json_schema(d, vocab)",
        "TokensieveError",
    ),
    (
        "ts.Grammar.from_json_schema('{\"not\": ' * 100_000 + '{}' + '}' * 100_000, vocab)",
        "TokensieveError",
    ),
    ("ts.Grammar.from_json_schema('{\"maximum\": 1e999999999}', vocab)", "TokensieveError"),
    ("ts.Grammar.from_json_schema({'maximum': True}, vocab)", "TokensieveError"),
    ("ts.Grammar.from_json_schema({'minimum': float('inf')}, vocab)", "ValueError"),
    ("ts.Grammar.from_json_schema({'const': 10 ** 5000}, vocab)", "ValueError"),
    (
        'ts.Grammar.from_json_schema(\'{"type": "string", "maxLength": 1e30}\', vocab)',
        "ok",  # a counter: no copies, no budget
    ),
    (
        "ts.Grammar.from_json_schema({'type': 'string', 'maxLength': 2**31 - 1}, vocab)",
        "ok",  # a counter: no copies, no budget
    ),
    ("assert ts.Grammar.from_regex('a', vocab).matcher().accept_token(2**40) is False", "ok"),
    ("assert ts.Grammar.from_regex('a', vocab).matcher().accept_token(-1) is False", "ok"),
    ("ts.Grammar.from_regex('a', vocab).matcher().rollback(10**9)", "ValueError"),
    (
        "ts.Grammar.from_regex('a', vocab).matcher()"
        ".fill_next_token_bitmask(np.zeros((1, 3), dtype=np.int32))",
        "ValueError",
    ),
    (
        "ts.Grammar.from_regex('a', vocab).matcher()"
        ".fill_next_token_bitmask(np.zeros((1, 9), dtype=np.int64))",
        "ValueError",
    ),
    ("ts.Grammar.from_bytes(b'TSIDX' + bytes(100), vocab)", "ValueError"),
    ("ts.Grammar.from_choice(['x' * 100_000] * 3 + ['y'], vocab)", "ok"),
]


def test_corpus_of_once_fatal_inputs() -> None:
    outs = run_cases([c for c, _ in CORPUS], timeout=240)
    wrong = [(c[:120], want, got) for (c, want), got in zip(CORPUS, outs) if got != want]
    assert not wrong, wrong


# ---- generated inputs ----------------------------------------------------------------------

KEYWORDS = [
    "type", "properties", "required", "items", "prefixItems", "enum", "const", "minimum",
    "maximum", "exclusiveMinimum", "multipleOf", "minLength", "maxLength", "pattern", "format",
    "anyOf", "oneOf", "allOf", "not", "$ref", "$defs", "additionalProperties", "minItems",
    "maxItems", "uniqueItems", "if", "then", "else", "patternProperties", "propertyNames",
    "minProperties", "contains", "dependentRequired", "x-ts-notIn", "a",
]  # fmt: skip
SCALARS = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.sampled_from(
        ["string", "integer", "number", "object", "array", "#/$defs/a", "^a+$", "date"]
    ),
    st.text(max_size=8),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYWORDS), inner, max_size=5),
    ),
    max_leaves=25,
)
SCHEMAS = st.dictionaries(st.sampled_from(KEYWORDS), JSON, max_size=6)
REGEXES = st.lists(
    st.sampled_from(
        ["a", "b", "\\d", "[a-c]", "[^x]", ".", "\\p{L}", "(", ")", "|", "*", "+", "?", "{2,3}",
         "{99999}", "(?:", "(?=", "\\1", "^", "$", "\\b", "[", "]", "é", "\\u{10FFFF}", "(?i)"]
    ),
    max_size=14,
).map("".join)  # fmt: skip


def collect(strategy: Any, n: int) -> list[Any]:
    """`n` examples of `strategy`, drawn deterministically."""
    out: list[Any] = []

    @hypothesis.settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(strategy)
    def draw(x: Any) -> None:
        out.append(x)

    draw()
    return out


def test_generated_schemas_end_typed() -> None:
    cases = [
        f"g = ts.Grammar.from_json_schema({json.dumps(s)!r}, vocab, max_compile_seconds=5)\n"
        "m = g.matcher(); bm = np.zeros((1, 9), dtype=np.int32)\n"
        "for _ in range(16):\n"
        "    m.fill_next_token_bitmask(bm)\n"
        "    row = np.asarray(bm)[0].view(np.uint32)\n"
        "    ids = [i for i in range(256) if row[i >> 5] >> (i & 31) & 1]\n"
        "    if not ids or not m.accept_token(ids[len(ids) // 2]): break"
        for s in collect(SCHEMAS, 300)
    ]
    outs = run_cases(cases, timeout=300)
    bad = [(c.splitlines()[0][:200], o) for c, o in zip(cases, outs) if o not in TYPED]
    assert not bad, bad


def test_generated_regexes_end_typed() -> None:
    cases = [
        f"ts.Grammar.from_regex({r!r}, vocab, max_compile_seconds=5).matcher()"
        ".fill_next_token_bitmask(np.zeros((1, 9), dtype=np.int32))"
        for r in collect(REGEXES, 300)
    ]
    outs = run_cases(cases, timeout=300)
    bad = [(c[:200], o) for c, o in zip(cases, outs) if o not in TYPED]
    assert not bad, bad


# ---- grammars: depth, rule chains, deadlines --------------------------------------------------

# `chain(n, body)`: `root ::= r0`, then `r{i} ::= body` with `{j}` the next rule, up to `r{n}`
CHAIN = (
    "def chain(n, body):\n"
    "    rules = ''.join(f'r{i} ::= ' + body.replace('{j}', str(i + 1)) + '\\n' for i in range(n))\n"
    "    return 'root ::= r0\\n' + rules + f'r{n} ::= \"z\"\\n'\n"
    "def cycle(n):\n"
    "    return 'root ::= r0\\n' + ''.join(f'r{i} ::= r{(i + 1) % n} \"a\" | \"b\"\\n'"
    " for i in range(n))\n"
    "def pending(text, **kw):\n"
    "    return ts.Grammar.compile_pending('ebnf', text, vocab, **kw).result()\n"
)

# (statement, expected outcome): each killed the process (stack overflow, out of memory) once
GRAMMAR_CORPUS: list[tuple[str, str]] = [
    ("ts.Grammar.from_ebnf('root ::= \"a\"' + '?' * 10000, vocab)", "ok"),
    ("pending('root ::= \"a\"' + '?' * 10000)", "ok"),
    ("pending('root ::= \"a\"' + '{2}{2,3}' * 5000)", "TokensieveError"),
    ("pending('root ::= ' + '(' * 150 + '\"a\"' + ')?+{2}{3,4}' * 150)", "ok"),
    ('ts.Grammar.from_ebnf(chain(3000, \'r{j} "x" | "y"\'), vocab)', "ok"),
    ('pending(chain(3000, \'r{j} "x" | "y"\'))', "ok"),
    ("pending(chain(1000, 'r{j}? \"a\"'))", "ok"),
    ("ts.Grammar.from_ebnf(chain(5000, 'r{j}? \"a\"'), vocab)", "ok"),
    ('ts.Grammar.from_ebnf(chain(60000, \'"(" r{j} ")"\'), vocab)', "ok"),
    ("ts.Grammar.from_ebnf(cycle(500), vocab)", "ok"),
    ("pending(cycle(5000))", "TokensieveError"),
    # nullable rules found in one pass over a chain, not one pass per rule
    (
        "pending('root ::= r0 \"x\"\\n' + ''.join(f'r{i} ::= r{i + 1}\\n' for i in range(60000))"
        " + 'r60000 ::= \"\"\\n', max_compile_seconds=2)",
        "ok",
    ),
]


def test_grammar_corpus_of_once_fatal_inputs() -> None:
    cases = [CHAIN + c for c, _ in GRAMMAR_CORPUS]
    outs = run_cases(cases, timeout=240)
    wrong = [(c[:120], want, got) for (c, want), got in zip(GRAMMAR_CORPUS, outs) if got != want]
    assert not wrong, wrong


def test_a_failed_precompute_leaves_the_grammar_whole() -> None:
    # the states a failed precompute() built are forgotten: later matchers keep the budget
    code = (
        "import json, random\n"
        "props = {f'p{i}': {'type': 'integer'} for i in range(30)}\n"
        "s = {'type': 'object', 'properties': props, 'additionalProperties': False}\n"
        "g = ts.Grammar.from_json_schema(s, vocab, property_order='any', max_states=3000)\n"
        "try:\n"
        "    g.precompute()\n"
        "    raise AssertionError('precompute fits')\n"
        "except ts.BudgetError:\n"
        "    pass\n"
        "rng = random.Random(7)\n"
        "for _ in range(10):\n"
        "    keys = rng.sample(sorted(props), 6)\n"
        "    doc = json.dumps({k: rng.randint(0, 99) for k in keys}, separators=(',', ':'))\n"
        "    m = g.matcher()\n"
        "    assert m.accept_tokens(list(doc.encode())) == len(doc) and m.is_accepting(), doc\n"
    )
    assert run_cases([code], timeout=120) == ["ok"]


@pytest.mark.parametrize(
    ("grammar", "seconds"),
    [
        ('\'root ::= x{200000}\\nx ::= "(" x ")" | "y"\'', 1.0),
        ('\'root ::= x{400000}\\nx ::= "(" x ")" | "y"\'', 1.0),
        ("cycle(1500)", 0.5),
    ],
)
def test_grammar_compiles_honour_the_deadline(grammar: str, seconds: float) -> None:
    # measured against the clock: the error (or the grammar) within the deadline and a margin
    code = (
        "import time\n"
        "t = time.perf_counter()\n"
        "try:\n"
        f"    ts.Grammar.from_ebnf({grammar}, vocab, max_compile_seconds={seconds})\n"
        "except ts.TokensieveError:\n"
        "    pass\n"
        "took = time.perf_counter() - t\n"
        f"assert took < {seconds} * 2 + 1, took\n"
    )
    assert run_cases([CHAIN + code], timeout=120) == ["ok"]


# schemas whose automaton nests one level per element of a long value (a property name excluded
# character by character, prefixItems): once a stack overflow on a compile thread
LONG_VALUES = [
    # numbers: their bounds spelled digit by digit (JSON text, as a Python float cannot hold them)
    "'{\"type\": \"number\", \"minimum\": 0.' + '0' * 20000 + '1}'",
    '\'{"type": "number", "exclusiveMinimum": 1e-9999, "maximum": 1}\'',
    "'{\"type\": \"integer\", \"maximum\": ' + '9' * 20000 + '}'",
    "{'type': 'array', 'prefixItems': [{'type': 'integer'}] * 50000}",
    "{'type': 'object', 'properties': {'a' * 100000: {'type': 'integer'}},"
    " 'additionalProperties': {'type': 'integer'}}",
    "{'type': 'object', 'properties': {'é' * 50000: {'type': 'integer'}},"
    " 'additionalProperties': {'type': 'integer'}}",
    "{'type': 'string', 'not': {'const': 'é' * 50000}}",
    "{'type': 'object', 'properties': {f'p{i}': {'type': 'integer'} for i in range(20000)},"
    " 'required': [f'p{i}' for i in range(20000)]}",
]


@pytest.mark.parametrize("schema", LONG_VALUES)
def test_long_schema_values_compile_on_any_thread(schema: str) -> None:
    # compiled on a compile thread, then masks filled by the batch fill's worker threads into
    # the rules the first bytes enter
    code = (
        f"g = ts.Grammar.compile_pending('json_schema', {schema}, vocab).result()\n"
        "m = g.matcher(); bm = np.zeros((1, 9), dtype=np.int32)\n"
        "for b in b'{\"aa':\n"
        "    ts.fill_next_token_bitmask([m], bm)\n"
        "    if not m.accept_token(b): break\n"
    )
    assert run_cases([code], timeout=120)[0] in TYPED


@pytest.mark.parametrize(
    ("items", "n"),
    [("{'type': 'integer'}", 30_000), ("{'type': 'string'}", 8_000)],
)
def test_unique_arrays_grow_without_quadratic_memory(items: str, n: int) -> None:
    # once an abort (16,000 integers: every item copied the values held for the history);
    # the child's address space is 4 GiB, and the memory a value costs must stay flat
    value = "str(i)" if "integer" in items else "f'\"s{i}\"'"
    code = (
        f"g = ts.Grammar.from_json_schema({{'type': 'array', 'items': {items},"
        " 'uniqueItems': True}, vocab)\n"
        f"vals = [{value} for i in range({n})]\n"
        "doc = ('[' + ','.join(vals)).encode()\n"
        "m = g.matcher(); bm = np.zeros((1, 9), dtype=np.int32)\n"
        "for b in doc:\n"
        "    m.fill_next_token_bitmask(bm)\n"
        "    assert m.accept_token(b)\n"
        # the peak of this process's own memory (ru_maxrss would carry the parent's across exec)
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
        "assert int(hwm.split()[1]) >> 10 < 600, hwm\n"
        # the first value once more: its last byte (or the `]` that ends it) is refused
        "again = (',' + vals[0] + ']').encode()\n"
        "k = m.accept_tokens(list(again))\n"
        "assert k < len(again), k\n"
        "m.rollback(k)\n"
        "assert m.accept_tokens(list(b']')) == 1 and m.is_accepting()\n"
    )
    assert run_cases([code], timeout=240) == ["ok"]


# ---- generated hostile grammars ---------------------------------------------------------------
# Shapes that once crashed, exhausted memory or ran past the deadline, at random sizes: chains of
# repetition operators and groups, rule chains of every kind of reference, left-recursive cycles,
# large counts of recursive rules, wide alternations. TOKENSIEVE_FUZZ_SCALE (default 1) multiplies
# the number of cases and their largest size, for a long run by hand.

FUZZ_SCALE = int(os.environ.get("TOKENSIEVE_FUZZ_SCALE", "1"))
DEADLINE = 1.0

RULE_BODIES = {
    "left_corner": 'r{j} "x" | "y"',
    "optional": 'r{j}? "a"',
    "paren": '"(" r{j} ")"',
    "right": '"a" r{j} | "b"',
}
SHAPES = ["postfix", "groups", "wide", "cycle", "count", "left_empty", *RULE_BODIES]


def hostile_grammar(shape: str, n: int, seed: int) -> str:
    r = random.Random(seed)
    if shape in RULE_BODIES:
        body = RULE_BODIES[shape]
        rules = "".join(f"r{i} ::= " + body.replace("{j}", str(i + 1)) + "\n" for i in range(n))
        return "root ::= r0\n" + rules + f'r{n} ::= "z"\n'
    if shape == "left_empty":  # a chain of rules that can match nothing, before a left recursion
        rules = "".join(f'r{i} ::= r{i + 1}? "q"?\n' for i in range(n))
        return 'root ::= a\na ::= r0 a "x" | "y"\n' + rules + f'r{n} ::= "w"?\n'
    if shape == "cycle":
        return "root ::= r0\n" + "".join(f'r{i} ::= r{(i + 1) % n} "a" | "b"\n' for i in range(n))
    if shape == "count":  # a counted repetition of a recursive rule: copies, not a counter
        return f'root ::= x{{{n * 100}}}\nx ::= "(" x ")" | "y"\n'
    if shape == "postfix":
        ops = ["?", "*", "+", "{2}", "{1,3}", "{0,2}", "{2,3}", "{33,40}"]
        body = '"a"' + "".join(r.choice(ops) for _ in range(n))
    elif shape == "groups":
        k = min(n, 190)  # groups nest at most 200 deep
        body = "(" * k + '"a"' + "".join(")" + r.choice(["", "?", "*", "{2,3}"]) for _ in range(k))
    else:  # wide
        body = " | ".join(f'"w{i}" x{r.randrange(3)}?' for i in range(n))
    return "root ::= " + body + '\nx0 ::= "0"\nx1 ::= "1" x0\nx2 ::= x1 x1\n'


def test_generated_hostile_grammars_end_typed_within_the_deadline() -> None:
    draw = collect(
        st.tuples(
            st.sampled_from(SHAPES),
            st.integers(min_value=0, max_value=4),
            st.integers(min_value=0, max_value=2**31),
        ),
        40 * FUZZ_SCALE,
    )
    cases = []
    for shape, exp, seed in draw:
        n = max(1, int((10_000 * FUZZ_SCALE) ** (exp / 4)) + seed % 7)
        text = hostile_grammar(shape, n, seed)
        compile = (
            f"ts.Grammar.compile_pending('ebnf', {text!r}, vocab,"
            f" max_compile_seconds={DEADLINE}).result()"
            if seed % 2
            else f"ts.Grammar.from_ebnf({text!r}, vocab, max_compile_seconds={DEADLINE})"
        )
        cases.append(
            "import time\n"
            "t = time.perf_counter()\n"
            "try:\n"
            f"    g = {compile}\n"
            "    m = g.matcher(); bm = np.zeros((1, 9), dtype=np.int32)\n"
            "    for _ in range(8):\n"
            "        m.fill_next_token_bitmask(bm)\n"
            "        row = np.asarray(bm)[0].view(np.uint32)\n"
            "        ids = [i for i in range(256) if row[i >> 5] >> (i & 31) & 1]\n"
            "        if not ids or not m.accept_token(ids[0]): break\n"
            "except ts.TokensieveError:\n"
            "    pass\n"
            "took = time.perf_counter() - t\n"
            f"assert took < {DEADLINE} * 2 + 1, ('{shape}', {n}, took)\n"
        )
    outs = run_cases(cases, timeout=120 + 30 * len(cases))
    bad = [(c.splitlines()[4][:160], o) for c, o in zip(cases, outs) if o != "ok"]
    assert not bad, bad
