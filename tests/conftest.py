"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import SHARED_DIR, TOKENIZERS_DIR, require


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``../shared`` folder beside the repository root; skips the test when it is absent."""
    require(TOKENIZERS_DIR, "this real-vocabulary test")
    return SHARED_DIR
