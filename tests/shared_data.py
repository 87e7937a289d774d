"""Where the tests find the shared data folder: ``../shared`` beside the repository.

CI and developers have it; a user's clone does not, and every test that needs it skips with a
reason naming the missing path (``require``). This module is the one place the paths are built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"
TOKENIZERS_DIR = SHARED_DIR / "tokenizers"
DATA_DIR = SHARED_DIR / "data"
DEV_SET = DATA_DIR / "jsonschemabench-dev.jsonl.gz"
SUITE_DIR = DATA_DIR / "json-schema-test-suite"
LLAMA3_DIR = TOKENIZERS_DIR / "llama3"


def tokenizer_dir(name: str) -> Path:
    """The folder of a shared tokenizer (``llama3``, ``qwen2``, ``gpt2``, ``llama2``, ``phi3``)."""
    return TOKENIZERS_DIR / name


def require(path: Path, what: str) -> Path:
    """``path`` if it exists; otherwise skip the calling test, saying what needs it."""
    if not path.exists():
        pytest.skip(f"{path} not found: {what} needs the shared data folder (../shared)")
    return path
