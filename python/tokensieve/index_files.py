"""Folders of precompiled index files, looked up by constraint.

``tokensieve compile ... -o DIR`` writes ``*.tsidx`` files; an :class:`IndexDirectory` reads
their headers once and, given a constraint, loads the file compiled from exactly that
constraint, options and vocabulary (matched by :func:`constraint_hash` and the vocabulary
fingerprint), so a server skips compiling it. Files for other vocabularies are ignored;
unreadable files are reported in :attr:`IndexDirectory.skipped`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tokensieve._core import Grammar, Vocabulary, constraint_hash, read_index_header

__all__ = ["IndexDirectory", "constraint_hash"]


class IndexDirectory:
    """The index files in `path` that were compiled for `vocab`."""

    def __init__(self, path: str | os.PathLike[str], vocab: Vocabulary) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"index directory {self.path} does not exist")
        self.vocab = vocab
        self.files: dict[str, Path] = {}
        self.skipped: list[tuple[Path, str]] = []
        for f in sorted(self.path.glob("*.tsidx")):
            try:
                header = read_index_header(f)
            except (OSError, ValueError) as e:
                self.skipped.append((f, str(e)))
                continue
            if header["vocab_fingerprint"] == vocab.fingerprint:
                self.files[str(header["source_hash"])] = f

    def __len__(self) -> int:
        return len(self.files)

    def find(self, kind: str, value: Any = None, **options: Any) -> Grammar | None:
        """The precompiled grammar for this constraint, or None if no file matches."""
        path = self.files.get(constraint_hash(kind, value, **options))
        if path is None:
            return None
        return Grammar.load(path, self.vocab)
