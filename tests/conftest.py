"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# CI and developers have the project's shared data folder beside the repository.
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``../shared`` folder beside the repository root; skips the test when it is absent."""
    if not (SHARED_DIR / "tokenizers").is_dir():
        pytest.skip(
            "../shared/tokenizers not found: real-vocabulary tests need the shared data folder"
        )
    return SHARED_DIR
