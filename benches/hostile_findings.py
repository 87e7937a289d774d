"""The third hostile-input round's findings, each in a child process under an address-space
limit (LIMIT_GB, default 6) and a time limit (TMO seconds, default 120): its outcome, wall
seconds and peak resident memory, as a Markdown table row. `python benches/hostile_findings.py
[PREFIX ...]` runs the cases whose names start with a prefix (all by default)."""

import os
import subprocess
import sys
import time

LIMIT = int(os.environ.get("LIMIT_GB", "6")) << 30
PRE = f"""
import resource, time, sys
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT}, {LIMIT}))
import numpy as np, tokensieve as ts
vocab = ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<eos>"], eos_token_ids=[256])
def chain(n, body):  # body uses {{i}} and {{j}}
    return "root ::= r0\\n" + "".join(f"r{{i}} ::= " + body.format(i=i, j=i+1) + "\\n" for i in range(n)) + f"r{{n}} ::= \\"z\\"\\n"
def cycle(n):
    return "root ::= r0\\n" + "".join(f"r{{i}} ::= r{{(i+1)%n}} \\"a\\" | \\"b\\"\\n" for i in range(n))
def pend(text, **kw):
    return ts.Grammar.compile_pending("ebnf", text, vocab, **kw).result()
"""
CASES = {
    "1a ? x10000": "ts.Grammar.from_ebnf('root ::= \"a\"' + '?' * 10000, vocab)",
    "1b ? x2000 pending": "pend('root ::= \"a\"' + '?' * 2000)",
    "1c left-corner chain 3000": 'ts.Grammar.from_ebnf(chain(3000, \'r{j} "x" | "y"\'), vocab)',
    "1d opt chain 1000 pending": "pend(chain(1000, 'r{j}? \"a\"'))",
    "2a opt chain 5000": "ts.Grammar.from_ebnf(chain(5000, 'r{j}? \"a\"'), vocab)",
    "2b paren chain 60000": 'ts.Grammar.from_ebnf(chain(60000, \'"(" r{j} ")"\'), vocab)',
    "2c left cycle 500": "ts.Grammar.from_ebnf(cycle(500), vocab)",
    "2d left cycle 2000": "ts.Grammar.from_ebnf(cycle(2000), vocab)",
    "3a x{200000} 1s": 'ts.Grammar.from_ebnf(\'root ::= x{200000}\\nx ::= "(" x ")" | "y"\', vocab, max_compile_seconds=1)',
    "3b x{400000} 1s": 'ts.Grammar.from_ebnf(\'root ::= x{400000}\\nx ::= "(" x ")" | "y"\', vocab, max_compile_seconds=1)',
    "3c left cycle 600 2s": "ts.Grammar.from_ebnf(cycle(600), vocab, max_compile_seconds=2)",
    "4 precompute poison": """
props = {f"p{i}": {"type": "integer"} for i in range(30)}
g = ts.Grammar.from_json_schema({"type": "object", "properties": props, "additionalProperties": False}, vocab, property_order="any")
try:
    g.precompute(); print("precompute ok")
except ts.BudgetError as e: print("precompute:", str(e)[:80])
import json, random
random.seed(1)
bad = 0
for t in range(20):
    keys = random.sample(list(props), 12)
    doc = json.dumps({k: random.randint(0, 99) for k in keys}, separators=(",", ":")).encode()
    m = g.matcher()
    try:
        ok = m.accept_tokens(list(doc)) and m.is_accepting()
    except ts.BudgetError: ok = False
    bad += not ok
print("rejected valid:", bad)
""",
    "5 unique 16000 ints": """
g = ts.Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, vocab)
m = g.matcher()
doc = ("[" + ",".join(str(i) for i in range(16000)) + "]").encode()
assert m.accept_tokens(list(doc))
""",
}
sel = sys.argv[1:]
for name, code in CASES.items():
    if sel and not any(name.startswith(s) for s in sel):
        continue
    t = time.time()
    prog = (
        PRE
        + "\ntry:\n"
        + "\n".join("    " + ln for ln in code.strip().splitlines())
        + "\n    print('OUTCOME ok')\nexcept Exception as e:\n    print('OUTCOME', type(e).__name__, str(e)[:150].replace(chr(10),' '))\nprint('RSS_MB', int([x for x in open('/proc/self/status') if x.startswith('VmHWM')][0].split()[1]) // 1024)\n"
    )
    try:
        p = subprocess.run(
            [sys.executable, "-c", prog],
            capture_output=True,
            text=True,
            timeout=float(os.environ.get("TMO", "120")),
        )
        out = p.stdout + p.stderr[-300:]
        rc = p.returncode
    except subprocess.TimeoutExpired:
        out, rc = "", "timeout"
    dt = time.time() - t
    lines = [ln for ln in out.splitlines() if ln.strip()]
    oc = [ln for ln in lines if ln.startswith("OUTCOME") or "rejected" in ln or "precompute" in ln]
    rss = [ln for ln in lines if ln.startswith("RSS_MB")]
    print(
        f"| {name} | rc {rc} | {dt:.1f} s | {rss[0][7:] if rss else '?'} MB | {' / '.join(oc)[:220] or lines[-1:]} |",
        flush=True,
    )
