"""``Vocabulary``: the extension's vocabulary class plus constructors that read tokenizers.

The extension class takes plain data (token byte strings, or the text of a ``tokenizer.json``);
the classmethods here read a tokenizer in whatever form the user holds it, with the helpers in
``tokensieve.tokenizers``, and hand that data over. Nothing is downloaded: paths must be local.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tokensieve import _core
from tokensieve.tokenizers import tekken_source, tiktoken_source, tokenizer_json_source

__all__ = ["Vocabulary"]


class Vocabulary(_core.Vocabulary):
    """Token id → bytes for a model's whole logits width, with EOS and special ids."""

    __slots__ = ()

    @classmethod
    def from_pretrained(
        cls,
        tokenizer: Any,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ) -> Vocabulary:
        """Build from a ``transformers`` tokenizer, a ``tokenizers.Tokenizer``, a
        ``tokenizer.json`` path or a folder holding one.

        EOS ids default to the tokenizer's (generation_config.json, then tokenizer_config.json,
        then common EOS spellings).
        """
        text, ids, names = tokenizer_json_source(tokenizer)
        eos = list(eos_token_ids) if eos_token_ids is not None else ids
        return cls.from_tokenizer_json(
            text, vocab_size=vocab_size, eos_token_ids=eos, eos_token_names=names
        )

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        eos_token_ids: Sequence[int],
        special_token_ids: Sequence[int] = (),
        vocab_size: int | None = None,
    ) -> Vocabulary:
        """Build from a tiktoken rank file (``base64-token rank`` per line)."""
        return cls(tiktoken_source(path), list(eos_token_ids), list(special_token_ids), vocab_size)

    @classmethod
    def from_tekken(
        cls,
        path: str | os.PathLike[str] | None = None,
        vocab_size: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ) -> Vocabulary:
        """Build from a Mistral Tekken JSON (default: the one shipped in ``mistral-common``)."""
        tokens, eos, special, size = tekken_source(path)
        return cls(
            tokens,
            list(eos_token_ids) if eos_token_ids is not None else eos,
            special,
            vocab_size if vocab_size is not None else size,
        )
