"""Feeding text through a grammar token by token, checking every token against the mask.

The matchers are byte-level, so one tokenization (longest prefix first) decides membership.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import tokensieve as ts

Lookup = tuple[dict[bytes, int], int]


def byte_vocabulary() -> ts.Vocabulary:
    """One token per byte (ids 0-255) and an EOS token (256)."""
    return ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<eos>"], eos_token_ids=[256])


def token_lookup(vocab: ts.Vocabulary) -> Lookup:
    """Bytes → the first token id that spells them, and the longest token's length."""
    table: dict[bytes, int] = {}
    longest = 1
    for i in range(vocab.vocab_size):
        b = vocab.token_bytes(i)
        if b:
            table.setdefault(b, i)
            longest = max(longest, len(b))
    return table, longest


def accepts(grammar: ts.Grammar, text: str, lookup: Lookup) -> bool:
    """Whether `grammar` accepts `text` whole; every token's mask bit must agree with
    `accept_token`."""
    table, longest = lookup
    m = grammar.matcher()
    bm = ts.allocate_token_bitmask(1, grammar.vocab.vocab_size)
    data = text.encode()
    i = 0
    while i < len(data):
        for n in range(min(longest, len(data) - i), 0, -1):
            tok = table.get(data[i : i + n])
            if tok is not None:
                break
        else:
            raise AssertionError(f"no token spells {data[i : i + 1]!r}")
        m.fill_next_token_bitmask(bm)
        bit = bool((int(np.asarray(bm)[0][tok >> 5]) >> (tok & 31)) & 1)
        ok = m.accept_token(tok)
        assert ok == bit, f"mask and accept_token disagree on {data[i : i + n]!r}"
        if not ok:
            return False
        i += n
    return m.is_accepting()


def agree(
    grammar: ts.Grammar,
    is_valid: Callable[[Any], bool],
    values: Iterable[Any],
    lookup: Lookup,
    checked: dict[bool, int],
    text: Callable[[Any], str] = json.dumps,
    what: Any = "",
) -> None:
    """Each of `values`, written by `text`, is accepted (see `accepts`) exactly when `is_valid`
    says it is valid; `checked` counts the verdicts. `what` names the grammar in a failure."""
    for v in values:
        want = bool(is_valid(v))
        checked[want] += 1
        t = text(v)
        assert accepts(grammar, t, lookup) == want, (what, t)


def next_mask(m: ts.Matcher, bm: object, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Fill `m`'s next-token mask into `bm` (one row): its bits, one per token id below
    `vocab_size`, and the ids allowed."""
    m.fill_next_token_bitmask(bm)
    bits = np.unpackbits(np.asarray(bm)[0].view(np.uint8), bitorder="little")[:vocab_size]
    return bits, np.nonzero(bits)[0]
