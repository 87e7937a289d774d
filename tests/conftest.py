"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from feed import Lookup, byte_vocabulary, token_lookup
from shared_data import SHARED_DIR, TOKENIZERS_DIR, require

import tokensieve as ts


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``../shared`` folder beside the repository root; skips the test when it is absent."""
    require(TOKENIZERS_DIR, "this real-vocabulary test")
    return SHARED_DIR


@pytest.fixture(scope="session")
def vocab() -> ts.Vocabulary:
    """Mistral's Tekken vocabulary (from `mistral-common`, so available without ../shared)."""
    try:
        return ts.Vocabulary.from_tekken()
    except Exception as e:  # pragma: no cover - mistral-common missing
        pytest.skip(f"no Tekken vocabulary: {e}")


@pytest.fixture(scope="session")
def lookup(vocab: ts.Vocabulary) -> Lookup:
    """Token bytes → id for `vocab` (see feed.accepts)."""
    return token_lookup(vocab)


@pytest.fixture(scope="session")
def byte_vocab() -> ts.Vocabulary:
    """One token per byte, and EOS (see feed.byte_vocabulary)."""
    return byte_vocabulary()


@pytest.fixture(scope="session")
def byte_lookup(byte_vocab: ts.Vocabulary) -> Lookup:
    """Token bytes → id for `byte_vocab` (see feed.accepts)."""
    return token_lookup(byte_vocab)
