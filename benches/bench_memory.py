"""Memory per grammar on the MaskBench sample.

In one process, for each schema of ``jsonschemabench-dev-sample500.txt``: compile it, make a
matcher and fill the mask at every token of each of its test instances (the walk fills the
lazy caches: DFA states, masks, subtree results), and keep the grammar alive. The growth of the
process's RSS over that work is the schema's memory. Reports p50, p90, max and the total over the
grammars that compile. Small grammars read 0 when the allocator reuses freed pages.

    python benches/bench_memory.py [--tokenizer PATH] [--label TEXT]

To compare builds, run it with ``PYTHONPATH`` pointing at another build's package.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED_DATA, SHARED_TOKENIZERS, WARMUP_SCHEMA  # noqa: E402


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=str(SHARED_TOKENIZERS / "llama3"))
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    sample = SHARED_DATA / "jsonschemabench-dev-sample500.txt"
    dev = SHARED_DATA / "jsonschemabench-dev.jsonl.gz"
    if not sample.is_file() or not dev.is_file():
        print(f"skipped: needs {sample} and {dev} (the shared data folder)")
        return 0
    import tokenizers

    import tokensieve as ts

    vocab = ts.Vocabulary.from_pretrained(args.tokenizer)
    tok = tokenizers.Tokenizer.from_file(str(Path(args.tokenizer) / "tokenizer.json"))
    ids = sample.read_text().split()
    want = set(ids)
    records: dict[str, Any] = {}
    with gzip.open(dev, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["id"] in want:
                records[r["id"]] = r
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    # one-time per-vocabulary work outside the measurements
    warm = ts.Grammar.from_json_schema(WARMUP_SCHEMA, vocab).matcher()
    warm.fill_next_token_bitmask(bm)
    kept: list[Any] = []
    growth: list[tuple[int, str]] = []
    for sid in ids:
        rec = records[sid]
        before = rss()
        try:
            g = ts.Grammar.from_json_schema(rec["schema"], vocab)
        except ts.TokensieveError:
            continue
        for test in rec["tests"]:
            m = g.matcher()
            for t in tok.encode(json.dumps(test["data"]), add_special_tokens=False).ids:
                m.fill_next_token_bitmask(bm)
                if not m.accept_token(t):
                    break
        kept.append(g)
        growth.append((rss() - before, sid))
    growth.sort()
    vals = [g for g, _ in growth]
    n = len(vals)
    print(
        f"{args.label} grammars {n}: p50 {vals[n // 2] / 1024:.0f} KiB, p90 "
        f"{vals[int(n * 0.9)] / 1024:.0f} KiB, max {vals[-1] / 2**20:.1f} MiB ({growth[-1][1]}), "
        f"total {sum(vals) / 2**20:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
