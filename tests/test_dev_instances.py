"""Every schema of the JSONSchemaBench dev split against its own test instances.

Each of the 6,761 schemas of `../shared/data/jsonschemabench-dev.jsonl.gz` is compiled with the
default options (Llama 3 vocabulary, `max_compile_seconds=COMPILE_SECONDS`); each of its
instances is serialized with `json.dumps` (default separators), tokenized, fed token by token,
and counted as accepted when every token is accepted and EOS is allowed at the end.

* No instance the dev set labels invalid may be accepted, unless `jsonschema` (the schema's
  draft, format checking for exactly the formats the compiler asserts; see
  `test_dev_schemas.validator`) finds it valid: such labels come from formats the compiler
  documents as not asserted (`regex`, `iri`, ...).
* At least `COMPILED_FLOOR` schemas compile (a floor under the current count, 6,558; raise it
  when coverage grows).

Valid instances that are rejected are counted, not failed: key order and the nesting bound are
documented restrictions (`benches/maskbench.py` classifies them on its sample).
`test_dev_instances_summary` prints the counts (run with `-s` or `-rP`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tokensieve as ts

pytest.importorskip("jsonschema")
tokenizers = pytest.importorskip("tokenizers")

import test_dev_schemas as dev  # noqa: E402

COMPILE_SECONDS = 10.0
COMPILED_FLOOR = 6700


def _run() -> dict[str, Any]:
    vocab = ts.Vocabulary.from_pretrained(dev.TOKENIZER_DIR)
    tok = tokenizers.Tokenizer.from_file(str(Path(dev.TOKENIZER_DIR) / "tokenizer.json"))
    eos = int(vocab.eos_token_ids[0])
    bitmask = np.zeros((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
    out: dict[str, Any] = {
        "schemas": 0,
        "compiled": 0,
        "instances": 0,
        "valid_rejected": 0,
        "invalid_accepted_format": 0,
        "false_positives": [],
    }
    with gzip.open(dev.DEV_SET, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out["schemas"] += 1
            try:
                g = ts.Grammar.from_json_schema(
                    row["schema"], vocab, max_compile_seconds=COMPILE_SECONDS
                )
            except ts.TokensieveError:
                continue
            out["compiled"] += 1
            for t in row["tests"]:
                ids = tok.encode(json.dumps(t["data"]), add_special_tokens=False).ids
                m = g.matcher()
                ok = m.accept_tokens(ids) == len(ids)
                if ok:
                    m.fill_next_token_bitmask(bitmask)
                    ok = bool((int(bitmask[0, eos >> 5]) >> (eos & 31)) & 1)
                out["instances"] += 1
                if ok and not t["valid"]:
                    if dev.validator(row["schema"]).is_valid(t["data"]):
                        out["invalid_accepted_format"] += 1
                    else:
                        out["false_positives"].append((row["id"], json.dumps(t["data"])[:300]))
                elif not ok and t["valid"]:
                    out["valid_rejected"] += 1
    return out


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    if not dev.DEV_SET.is_file() or not Path(dev.TOKENIZER_DIR).is_dir():
        pytest.skip(f"needs {dev.DEV_SET} and {dev.TOKENIZER_DIR} (the shared data folder)")
    return _run()


def test_no_invalid_dev_instance_is_accepted(results: dict[str, Any]) -> None:
    assert results["false_positives"] == [], results["false_positives"][:10]


def test_dev_schemas_compile(results: dict[str, Any]) -> None:
    assert results["compiled"] >= COMPILED_FLOOR, results["compiled"]


def test_dev_instances_summary(results: dict[str, Any]) -> None:
    summary = {k: v for k, v in results.items() if k != "false_positives"}
    print(json.dumps(summary, indent=1))
    assert results["instances"] > 0
