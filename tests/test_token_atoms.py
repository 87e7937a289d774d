"""Token atoms: special tokens a grammar names are allowed exactly where it places them.

A small vocabulary (the bytes, EOS, four special tokens, a regular token holding the byte 0xFF)
and grammars that name special tokens by id (`<[id]>`, `Token(id)`) or by text. Every token
sequence over a few characters and the special tokens, up to a length, is run through the
matcher and compared with an independent reference: the language written out as Python
regular expressions over a text where each special token is one private character. Masks are
checked against the reference's next symbols.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import tokensieve as ts

SPECIALS = {"<|a|>": 257, "<|b|>": 258, "<|c|>": 259, "<|d|>": 260}
V = ts.Vocabulary(
    [bytes([i]) for i in range(256)] + [b"<eos>"] + [s.encode() for s in SPECIALS] + [b"x\xff"],
    eos_token_ids=[256],
    special_token_ids=list(SPECIALS.values()),
)
# each special token is one character of the reference's text
CH = {257: "A", 258: "B", 259: "C", 260: "D"}
SYMBOLS = ["x", "y", "<", 257, 258, 259, 260]


def tokens(seq: tuple[object, ...]) -> list[int]:
    return [s if isinstance(s, int) else ord(s) for s in seq]


def text(seq: tuple[object, ...]) -> str:
    return "".join(CH[s] if isinstance(s, int) else s for s in seq)


def bits(m: ts.Matcher) -> np.ndarray:
    row = np.zeros((1, ts.bitmask_words(V.vocab_size)), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return np.unpackbits(row.view(np.uint8), bitorder="little")[: V.vocab_size]


# (grammar, the reference: a full-match regex over the reference's text)
CASES = [
    # llama.cpp's token references
    ("root ::= <[257]> [xy]* <[258]>", r"A[xy]*B"),
    ('root ::= (<[257]> | <[258]>) "x"? <[259]>*', r"[AB]x?C*"),
    # xgrammar's Token(...) by id and by text, one of several
    ('root ::= Token(257, "<|b|>") "x" Token(259)', r"[AB]xC"),
    # xgrammar's TokenTagDispatch: free text (never a special token) with token triggers
    (
        'root ::= TokenTagDispatch((257, r1), (258, r2))\nr1 ::= "x" <[259]>\nr2 ::= "y"',
        r"(?:[xy<]*(?:AxC|By))*[xy<]*",
    ),
    (
        "root ::= TokenTagDispatch((257, r1), loop_after_dispatch=false) <[260]>\nr1 ::= [xy]",
        r"[xy<]*(?:A[xy])?D",
    ),
    # a grammar's text may hold a special token's text: it stays text
    ('root ::= "<|a|>" <[257]>', None),
]


@pytest.mark.parametrize(("grammar", "ref"), CASES)
def test_token_atoms_agree_with_the_reference(grammar: str, ref: str | None) -> None:
    g = ts.Grammar.from_ebnf(grammar, V)
    if ref is None:
        m = g.matcher()
        seq = list(b"<|a|>") + [257]
        assert m.accept_tokens(seq) == len(seq) and m.is_accepting()
        assert not g.matcher().accept_token(257)  # the text part first
        return
    pat = re.compile(ref)
    seqs = [p for n in range(6) for p in itertools.product(SYMBOLS, repeat=n)]
    ok = {text(p) for p in seqs if pat.fullmatch(text(p))}
    viable = {t[:k] for t in ok for k in range(len(t) + 1)}
    for p in seqs:
        m = g.matcher()
        fed = m.accept_tokens(tokens(p))
        t = text(p)
        assert (fed == len(p) and m.is_accepting()) == (t in ok), (grammar, p)
        if fed == len(p) and len(p) <= 4:
            b = bits(m)
            assert not b[255] and not b[261], (grammar, p)  # 0xFF: never
            assert bool(b[256]) == (t in ok), (grammar, p)
            for s in SYMBOLS:
                if t + text((s,)) in viable:
                    assert b[tokens((s,))[0]], (grammar, p, s)
                elif b[tokens((s,))[0]]:
                    # allowed: then some continuation of up to 5 symbols more must finish
                    longer = any(
                        pat.fullmatch(t + text((s,)) + text(q))
                        for n in range(4)
                        for q in itertools.product(SYMBOLS, repeat=n)
                    )
                    assert longer, (grammar, p, s)


def test_rollback_batch_and_budget_with_atoms() -> None:
    g = ts.Grammar.from_ebnf("root ::= <[257]> [xy]{0,3} <[258]>", V)
    m = g.matcher(max_rollback=8, max_tokens=4)
    assert m.accept_tokens([257, ord("x"), ord("y")]) == 3
    # two tokens left: the closing token, then EOS; another character would not fit
    b = bits(m)
    assert b[258] and not b[ord("x")]
    m.rollback(2)
    rows = np.zeros((2, ts.bitmask_words(V.vocab_size)), dtype=np.int32)
    ts.fill_next_token_bitmask([m, g.matcher()], rows)
    r = np.unpackbits(rows.view(np.uint8), bitorder="little").reshape(2, -1)
    assert r[0][ord("x")] and r[0][258] and not r[0][257]
    assert r[1][257] and r[1].sum() == 1


def test_tokens_that_cannot_be_atoms_are_refused() -> None:
    for grammar, what in [
        ("root ::= <[65]>", 'token 65 is not a special token (its text is "A")'),
        ("root ::= <[256]>", "token 256 is an EOS token"),
        ("root ::= <[99999]>", "outside the vocabulary"),
        ('root ::= Token("<|zz|>")', "no special token with this text"),
        ("root ::= ExcludeToken(257)", "`ExcludeToken(...)`"),
        ('root ::= x !<[257]>\nx ::= "a"', "`!<[id]>`"),
        ('root ::= TokenTagDispatch((257, r), excludes=(65,))\nr ::= "a"', "not a special token"),
    ]:
        with pytest.raises(ts.GrammarError, match=re.escape(what)):
            ts.Grammar.from_ebnf(grammar, V)


def test_token_tag_dispatch_excludes_special_tokens_only() -> None:
    g = ts.Grammar.from_ebnf('root ::= TokenTagDispatch((257, r), excludes=(258))\nr ::= "a"', V)
    m = g.matcher()
    assert m.accept_tokens([ord("x"), 257, ord("a")]) == 3 and not bits(m)[258]


def test_grammars_with_atoms_are_not_precomputed_or_saved() -> None:
    g = ts.Grammar.from_ebnf('root ::= <[257]> "x"', V)
    with pytest.raises(ValueError, match="token atoms"):
        g.precompute()
    with pytest.raises(ValueError, match="token atoms"):
        g.to_bytes()
    # and a grammar without atoms is untouched: 0xFF tokens are its own business
    plain = ts.Grammar.from_ebnf('root ::= "x" [^a]', V)
    m = plain.matcher()
    assert m.accept_token(ord("x"))
    assert not bits(m)[255]  # not UTF-8 text either
