"""`property_order="schema"` (the default) against `property_order="any"` on the whole
JSONSchemaBench dev set (6,761 schemas), tokensieve only, one process, Llama 3.

    python benches/bench_property_order.py [--limit N]

For each schema and each order: compile with `max_compile_seconds=10` and fill the first mask
(time to first mask), then feed every test instance (`json.dumps`, default separators) token by
token, filling the mask before each token (timed) and checking EOS at the end. Counted: schemas
compiled, valid instances accepted, invalid instances accepted — each checked with `jsonschema`
(the schema's draft, the formats tokensieve asserts, as `tests/test_dev_schemas.py` does): one
that `jsonschema` finds valid is a mislabelled instance, one it finds invalid is a false
positive. Also: valid instances accepted only once their keys are put in schema order (the
MaskBench diagnosis), by order.

Writes `benches/results/property_order.{md,json}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import common  # noqa: E402
from common import md_table, num, percentile  # noqa: E402

DEV = common.SHARED_DATA / "jsonschemabench-dev.jsonl.gz"
TOKENIZER = common.SHARED_TOKENIZERS / "llama3"
ORDERS = ("schema", "any")


def run(limit: int | None) -> dict[str, Any]:
    import numpy as np
    import test_dev_schemas as dev
    import tokenizers

    import tokensieve as ts

    vocab = ts.Vocabulary.from_pretrained(str(TOKENIZER))
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
    eos = int(vocab.eos_token_ids[0])
    bm = np.zeros((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
    # one-time per-vocabulary work outside the measurements
    for order in ORDERS:
        g = ts.Grammar.from_json_schema(common.WARMUP_SCHEMA, vocab, property_order=order)
        g.matcher().fill_next_token_bitmask(bm)
    res: dict[str, Any] = {
        o: {
            "compiled": 0,
            "valid": 0,
            "valid_accepted": 0,
            "invalid": 0,
            "invalid_accepted_mislabelled": 0,
            "false_positives": [],
            "ttfm_ms": [],
            "mask_us": [],
            "errors": {},
        }
        for o in ORDERS
    }
    schemas = 0
    with gzip.open(DEV, "rt", encoding="utf-8") as f:
        for line in f:
            if limit is not None and schemas >= limit:
                break
            row = json.loads(line)
            schemas += 1
            texts = [(bool(t["valid"]), t["data"], json.dumps(t["data"])) for t in row["tests"]]
            ids = [tok.encode(text, add_special_tokens=False).ids for _, _, text in texts]
            for order in ORDERS:
                r = res[order]
                t0 = time.perf_counter_ns()
                try:
                    g = ts.Grammar.from_json_schema(
                        row["schema"], vocab, property_order=order, max_compile_seconds=10.0
                    )
                    g.matcher().fill_next_token_bitmask(bm)
                except ts.TokensieveError as e:
                    kind = type(e).__name__
                    r["errors"][kind] = r["errors"].get(kind, 0) + 1
                    continue
                r["ttfm_ms"].append((time.perf_counter_ns() - t0) / 1e6)
                r["compiled"] += 1
                for (valid, data, text), toks in zip(texts, ids):
                    m = g.matcher()
                    ok = True
                    for t in toks:
                        s = time.perf_counter_ns()
                        m.fill_next_token_bitmask(bm)
                        r["mask_us"].append((time.perf_counter_ns() - s) / 1e3)
                        if not (int(bm[0, t >> 5]) >> (t & 31)) & 1:
                            ok = False
                            break
                        m.accept_token(t)
                    if ok:
                        m.fill_next_token_bitmask(bm)
                        ok = bool((int(bm[0, eos >> 5]) >> (eos & 31)) & 1)
                    r["valid" if valid else "invalid"] += 1
                    if valid:
                        r["valid_accepted"] += ok
                    elif ok:
                        if dev.validator(row["schema"]).is_valid(data):
                            r["invalid_accepted_mislabelled"] += 1
                        else:
                            r["false_positives"].append([row["id"], text[:300]])
    out: dict[str, Any] = {"schemas": schemas, "machine": common.machine_info(["tokensieve"])}
    for order in ORDERS:
        r = res[order]
        out[order] = {k: v for k, v in r.items() if k not in ("ttfm_ms", "mask_us")} | {
            "ttfm_ms_p50": percentile(r["ttfm_ms"], 50),
            "ttfm_ms_p95": percentile(r["ttfm_ms"], 95),
            "ttfm_ms_p99": percentile(r["ttfm_ms"], 99),
            "ttfm_ms_max": max(r["ttfm_ms"], default=None),
            "mask_us_p50": percentile(r["mask_us"], 50),
            "mask_us_p99": percentile(r["mask_us"], 99),
            "masks": len(r["mask_us"]),
        }
    return out


def report(out: dict[str, Any]) -> str:
    rows = []
    for order in ORDERS:
        r = out[order]
        rows.append(
            [
                f"`{order}`",
                str(r["compiled"]),
                f"{r['valid_accepted']} / {r['valid']}",
                str(len(r["false_positives"])),
                str(r["invalid_accepted_mislabelled"]),
                num(r["ttfm_ms_p50"]),
                num(r["ttfm_ms_p95"]),
                num(r["ttfm_ms_p99"]),
                num(r["mask_us_p50"]),
                num(r["mask_us_p99"]),
                str(r["masks"]),
            ]
        )
    m = out["machine"]
    md = [
        "# property_order — JSONSchemaBench dev set, Llama 3\n",
        f"Generated by `python benches/bench_property_order.py` on {m['date']}; "
        f"{out['schemas']} schemas, tokensieve only, one process (see the script's docstring).\n",
        md_table(["", ""], common.machine_rows(m)),
        "",
        md_table(
            [
                "property_order",
                "compiled",
                "valid accepted",
                "invalid accepted (jsonschema: invalid)",
                "invalid accepted (jsonschema: valid, mislabelled)",
                "TTFM p50 ms",
                "p95",
                "p99",
                "mask p50 µs",
                "p99",
                "masks",
            ],
            rows,
        ),
        "",
        "TTFM = compile + first mask fill of each schema that compiled; mask = one fill before "
        "each token of every instance (valid and invalid, up to the first refused token).",
    ]
    return "\n".join(md) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="first N schemas of the dev set")
    ap.add_argument("--out-dir", default=str(common.RESULTS_DIR))
    args = ap.parse_args()
    if not DEV.exists():
        print(f"SKIP: {DEV} not found")
        return 0
    out = run(args.limit)
    md = report(out)
    d = Path(args.out_dir)
    (d / "property_order.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    (d / "property_order.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
