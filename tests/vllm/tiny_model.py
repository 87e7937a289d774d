"""A random-weight Llama for tests and benchmarks that run a real vLLM engine on the CPU."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

LLAMA_CHAT = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n"
)


def build_tiny_llama(
    out: Path,
    tokenizer_dir: Path,
    hidden_size: int = 128,
    layers: int = 2,
    seed: int = 0,
    vocab_size: int = 128256,
    added_tokens: tuple[str, ...] = (),
) -> Path:
    """Save a random Llama (Llama 3 vocabulary, head size 64: the CPU attention kernels need
    a supported one) with the tokenizer of `tokenizer_dir` and a chat template into `out`.

    `added_tokens` are appended to the tokenizer as special tokens (ids from the tokenizer's
    size up); `vocab_size` (the logits' width) may exceed the tokenizer, as padded models do."""
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=max(1, hidden_size // 128),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=128000,
        eos_token_id=128001,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / f, out / f)
    if added_tokens:
        tok = json.loads((out / "tokenizer.json").read_text())
        next_id = 1 + max(
            [int(i) for i in tok["model"]["vocab"].values()]
            + [int(t["id"]) for t in tok.get("added_tokens", [])]
        )
        for k, content in enumerate(added_tokens):
            tok["added_tokens"].append(
                {
                    "id": next_id + k,
                    "content": content,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
        assert next_id + len(added_tokens) <= vocab_size
        (out / "tokenizer.json").write_text(json.dumps(tok))
    (out / "chat_template.jinja").write_text(LLAMA_CHAT)
    return out


def tiny_engine(model: Path, logits_processors: list[Any], max_model_len: int = 512) -> Any:
    """A vLLM engine on `model` as the tests and benchmarks run it: float32, eager, seed 0."""
    from vllm import LLM

    return LLM(
        model=str(model),
        dtype="float32",
        enforce_eager=True,
        max_model_len=max_model_len,
        seed=0,
        logits_processors=logits_processors,
    )
