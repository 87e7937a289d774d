"""`make demo`: compile constraints for a real tokenizer and generate constrained output.

Uses the Llama 3 tokenizer from ``../shared/tokenizers`` when that folder exists, otherwise the
Mistral Tekken vocabulary shipped in the ``mistral-common`` package. With torch and transformers
installed (``make demo`` installs them), a small randomly initialized Llama model generates
through ``model.generate(logits_processor=[...])``; without them, tokens are drawn from random
logits. Either way every output is produced one token at a time under the mask, and is checked
against its constraint below.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import tokensieve as ts

SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    (
        "person",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 12},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "role": {"enum": ["admin", "user", "guest"]},
            },
            "required": ["name", "age", "role"],
            "additionalProperties": False,
        },
    ),
    (
        "order",
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "items": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1, "maximum": 99},
                    "minItems": 1,
                    "maxItems": 3,
                },
                "express": {"type": "boolean"},
            },
            "required": ["id", "items", "express"],
            "additionalProperties": False,
        },
    ),
]
REGEXES = [
    ("ISO date", r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("email", r"[a-z]{3,8}(\.[a-z]{2,6})?@[a-z]{3,8}\.(com|org|net)"),
    ("choice", r"(yes|no|maybe)"),
]


def load_vocabulary() -> tuple[ts.Vocabulary, str, Path | None]:
    shared = Path(__file__).resolve().parents[3] / "shared" / "tokenizers" / "llama3"
    if (shared / "tokenizer.json").is_file():
        return (
            ts.Vocabulary.from_pretrained(shared),
            "Llama 3 (../shared/tokenizers/llama3)",
            shared,
        )
    return ts.Vocabulary.from_tekken(), "Mistral Tekken (from the mistral-common package)", None


def check(kind: str, constraint: Any, text: str) -> bool:
    if kind == "regex":
        return re.fullmatch(constraint, text) is not None
    try:
        value = json.loads(text)
    except ValueError:
        return False
    try:
        import jsonschema
    except ImportError:
        return True
    validator = jsonschema.validators.validator_for(constraint)
    fc = validator.FORMAT_CHECKER
    return validator(constraint, format_checker=fc).is_valid(value)  # type: ignore[no-any-return]


def sample_numpy(grammar: ts.Grammar, vocab: ts.Vocabulary, rng: np.random.Generator) -> str:
    """Random logits stand in for a model."""
    matcher = grammar.matcher()
    bitmask = np.zeros((1, ts.bitmask_words(vocab.vocab_size)), dtype=np.int32)
    out = b""
    for _ in range(200):
        matcher.fill_next_token_bitmask(bitmask)
        allowed = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")
        allowed = allowed[: vocab.vocab_size].astype(bool)
        logits = rng.standard_normal(vocab.vocab_size).astype(np.float32) * 3.0
        for eos in vocab.eos_token_ids:
            logits[eos] += 4.0
        logits[~allowed] = -np.inf
        probs = np.exp(logits - logits.max())
        token = int(rng.choice(vocab.vocab_size, p=probs / probs.sum()))
        assert matcher.accept_token(token)
        if matcher.is_finished():
            break
        out += vocab.token_bytes(token) or b""
    return out.decode("utf-8", errors="replace")


class TinyModel:
    """A randomly initialized 2-layer Llama over the vocabulary (no download)."""

    def __init__(self, vocab: ts.Vocabulary) -> None:
        import torch
        import transformers

        self.torch = torch
        self.vocab = vocab
        eos = vocab.eos_token_ids[0]
        cfg = transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=vocab.vocab_size,
            max_position_embeddings=512,
            eos_token_id=eos,
            pad_token_id=eos,
            bos_token_id=None,
        )
        torch.manual_seed(0)
        model: Any = transformers.LlamaForCausalLM(cfg)
        self.model: Any = model.eval()
        regular = [i for i in range(vocab.vocab_size) if vocab.token_bytes(i)][:2000]
        self.prompt = torch.tensor([regular[100:108]] * 3)

    def generate(self, grammar: ts.Grammar, seed: int) -> list[str]:
        from tokensieve.transformers import TransformersLogitsProcessor

        self.torch.manual_seed(seed)
        with self.torch.no_grad():
            out = self.model.generate(
                input_ids=self.prompt,
                attention_mask=self.torch.ones_like(self.prompt),
                logits_processor=[TransformersLogitsProcessor(grammar)],
                do_sample=True,
                max_new_tokens=120,
                eos_token_id=self.vocab.eos_token_ids,
                pad_token_id=self.vocab.eos_token_ids[0],
            )
        texts = []
        eos = set(self.vocab.eos_token_ids)
        for row in out[:, self.prompt.shape[1] :].tolist():
            toks = row[: next((i for i, t in enumerate(row) if t in eos), len(row))]
            texts.append(
                b"".join(self.vocab.token_bytes(t) or b"" for t in toks).decode("utf-8", "replace")
            )
        return texts


def main() -> int:
    t0 = time.perf_counter()
    vocab, name, _ = load_vocabulary()
    print(
        f"vocabulary: {name}: {vocab.vocab_size} ids, kind {vocab.kind}, loaded in {(time.perf_counter() - t0) * 1e3:.0f} ms"
    )
    try:
        model: TinyModel | None = TinyModel(vocab)
        print(
            "generator: a random-weight 2-layer Llama through model.generate(logits_processor=[...])\n"
        )
    except ImportError:
        model = None
        print("generator: random logits (install torch and transformers for model.generate)\n")
    rng = np.random.default_rng(7)
    jobs: list[tuple[str, str, Any]] = [("json", n, s) for n, s in SCHEMAS] + [
        ("regex", n, p) for n, p in REGEXES
    ]
    bad = 0
    for k, (kind, label, constraint) in enumerate(jobs):
        t = time.perf_counter()
        grammar = (
            ts.Grammar.from_json_schema(constraint, vocab)
            if kind == "json"
            else ts.Grammar.from_regex(constraint, vocab)
        )
        ms = (time.perf_counter() - t) * 1e3
        shown = json.dumps(constraint) if kind == "json" else constraint
        print(f"{label} ({kind}): {shown[:110]}{'...' if len(shown) > 110 else ''}")
        print(f"  compiled, first mask included, in {ms:.2f} ms")
        outputs = (
            model.generate(grammar, seed=k)
            if model is not None
            else [sample_numpy(grammar, vocab, rng) for _ in range(3)]
        )
        for text in outputs:
            ok = check(kind, constraint, text)
            bad += not ok
            print(f"  {'valid' if ok else 'INVALID'}  {text}")
        print()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
