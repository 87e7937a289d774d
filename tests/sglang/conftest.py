"""tests/sglang: tokensieve.sglang against SGLang's own classes; run by ``make test-sglang``.

These tests need SGLang, which the main venv does not hold (``tests/sglang/run.sh`` builds a
venv with it). The main ``pytest`` run therefore does not collect this folder: it is collected
only when ``TOKENSIEVE_SGLANG_TESTS=1`` (which ``run.sh`` sets), and the main run's summary
says so in one line. With that variable set and SGLang missing, collection fails loudly.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENABLED = os.environ.get("TOKENSIEVE_SGLANG_TESTS") == "1"

if not ENABLED:
    # Documented above: not collected by the main run (make test-sglang runs them).
    collect_ignore_glob = ["*.py"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not ENABLED:
        terminalreporter.write_line(
            "tests/sglang not collected (needs SGLang): run `make test-sglang`"
        )


@pytest.fixture(scope="session")
def hf_tokenizer() -> Any:
    """A small byte-level BPE tokenizer built here (no files needed): the 256 byte tokens,
    merges for common JSON pieces, and the special tokens ``<eos>``, ``<think>``,
    ``</think>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    merges: list[tuple[str, str]] = []
    pieces = [
        ("{", '"'),
        ('"', ":"),
        ('":', "Ġ"),
        (",", "Ġ"),
        ('"', ","),
        ("1", "2"),
        ("t", "r"),
        ("tr", "u"),
        ("tru", "e"),
        ("n", "a"),
        ("na", "m"),
        ("nam", "e"),
        ("Ġ", "1"),
        ("a", "b"),
        ("ab", "c"),
        ("-", "-"),
    ]
    for a, b in pieces:
        vocab[a + b] = len(vocab)
        merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<eos>", "<think>", "</think>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
