"""Sources of vocabularies: Hugging Face tokenizers, tiktoken rank files, Mistral Tekken.

These helpers read a tokenizer in whatever form the user holds it and hand the core plain data
(the ``tokenizer.json`` text, or token byte strings). The classmethods of
``tokensieve.Vocabulary`` (``from_pretrained``, ``from_tiktoken``, ``from_tekken``) call them;
nothing here is downloaded: paths must be local.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from tokensieve._core import MAX_VOCAB_SIZE, VocabularyError

__all__ = ["tokenizer_json_source", "tiktoken_source", "tekken_source", "default_tekken_path"]


def _eos_names_from_config(folder: Path) -> tuple[list[int] | None, list[str]]:
    """EOS ids from generation_config.json and names from tokenizer_config.json, if present."""
    ids: list[int] | None = None
    names: list[str] = []
    gen = folder / "generation_config.json"
    if gen.is_file():
        v = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        if isinstance(v, int):
            ids = [v]
        elif isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            ids = list(v)
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        tok = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token")
        if isinstance(tok, dict):
            tok = tok.get("content")
        if isinstance(tok, str) and tok:
            names.append(tok)
    return ids, names


def tokenizer_json_source(tokenizer: Any) -> tuple[str | bytes, list[int] | None, list[str]]:
    """Return ``(tokenizer.json text, eos ids or None, eos names)`` for a tokenizer (a file's
    text as its UTF-8 bytes, decoded and checked by the core).

    Accepts a ``transformers`` tokenizer (fast), a ``tokenizers.Tokenizer``, a path to a
    ``tokenizer.json`` file, or a folder holding one.
    """
    if isinstance(tokenizer, (str, os.PathLike)):
        path = Path(tokenizer)
        if path.is_dir():
            folder, file = path, path / "tokenizer.json"
        else:
            folder, file = path.parent, path
        if not file.is_file():
            raise FileNotFoundError(
                f"no tokenizer.json at {file} (pass a tokenizer.json path, a folder holding one, "
                "or a tokenizer object; nothing is downloaded)"
            )
        ids, names = _eos_names_from_config(folder)
        return file.read_bytes(), ids, names
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # transformers fast tokenizer
        ids = None
        eos_id = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos_id, int):
            ids = [eos_id]
        eos_tok = getattr(tokenizer, "eos_token", None)
        names = [eos_tok] if isinstance(eos_tok, str) else []
        return str(backend.to_str()), ids, names
    if hasattr(tokenizer, "to_str") and hasattr(tokenizer, "get_vocab"):  # tokenizers.Tokenizer
        return str(tokenizer.to_str()), None, []
    raise TypeError(
        f"cannot build a vocabulary from {type(tokenizer).__name__}: pass a transformers fast "
        "tokenizer, a tokenizers.Tokenizer, a tokenizer.json path or a folder"
    )


def tiktoken_source(path: str | os.PathLike[str]) -> list[bytes]:
    """Token byte strings from a tiktoken rank file (``base64-token rank`` per line)."""
    tokens: dict[int, bytes] = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{n}: expected 'base64-token rank'")
            rank = int(parts[1])
            if rank < 0:
                raise ValueError(f"{path}:{n}: rank {rank} is negative")
            # checked before the table below is sized by it
            if rank >= MAX_VOCAB_SIZE:
                raise VocabularyError(
                    f"{path}:{n}: rank {rank} is past the supported {MAX_VOCAB_SIZE} (2^24) "
                    "token ids"
                )
            tokens[rank] = base64.b64decode(parts[0])
    if not tokens:
        raise ValueError(f"{path}: no tokens")
    out = [b""] * (max(tokens) + 1)
    for rank, tok in tokens.items():
        out[rank] = tok
    return out


def default_tekken_path() -> Path:
    """The Tekken vocabulary shipped in the ``mistral-common`` package."""
    try:
        import mistral_common
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            "Vocabulary.from_tekken() without a path needs the mistral-common package: "
            "pip install mistral-common"
        ) from e
    data = Path(mistral_common.__file__).parent / "data"
    files = sorted(data.glob("tekken_*.json"))
    if not files:
        raise FileNotFoundError(f"no tekken_*.json in {data}")
    return files[-1]


def tekken_source(
    path: str | os.PathLike[str] | None,
) -> tuple[list[bytes], list[int], list[int], int]:
    """Read a Mistral Tekken JSON: ``(tokens, eos ids, special ids, vocab_size)``.

    Ids ``0 .. num_special-1`` are special (control) tokens; regular token of rank ``r`` has id
    ``num_special + r``; the vocabulary is cut at the file's ``default_vocab_size``.
    """
    p = Path(path) if path is not None else default_tekken_path()
    doc = json.loads(p.read_text(encoding="utf-8"))
    cfg = doc["config"]
    n_special = int(cfg.get("default_num_special_tokens", 1000))
    vocab_size = int(cfg.get("default_vocab_size", n_special + len(doc["vocab"])))
    # checked before the token list below is sized by them
    for name, v in [("default_num_special_tokens", n_special), ("default_vocab_size", vocab_size)]:
        if not 0 <= v <= MAX_VOCAB_SIZE:
            raise VocabularyError(
                f"{p}: {name} is {v}; it must be from 0 to {MAX_VOCAB_SIZE} (2^24 token ids)"
            )
    specials = doc.get("special_tokens") or []
    names = {int(s["rank"]): s["token_str"] for s in specials}
    eos = [r for r, s in names.items() if s == "</s>"] or [2]
    n_regular = vocab_size - n_special
    tokens: list[bytes] = [b""] * n_special
    for entry in doc["vocab"][:n_regular]:
        tokens.append(base64.b64decode(entry["token_bytes"]))
    return tokens, eos, list(range(n_special)), vocab_size
