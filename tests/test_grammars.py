"""GBNF / EBNF grammars through the Python API (see docs/grammars.md): recursion on the stack,
left recursion, the stack bound, a 1,000-rule grammar within the compile deadline, errors with
positions. Outputs are fed token by token with every mask bit checked (feed.accepts)."""

from __future__ import annotations

import time

import pytest
from feed import Lookup, accepts

import tokensieve as ts
from tokensieve._core import constraint_hash

ARITH = r"""
root   ::= expr
expr   ::= expr ("+" | "-") term | term
term   ::= term ("*" | "/") factor | factor
factor ::= [0-9]+ | "(" expr ")" | "-" factor
"""


def test_left_recursive_arithmetic(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_ebnf(ARITH, vocab)
    for ok in ["1", "12+3*4", "(1+2)*3-4/5", "--7", "1" + "+2" * 400]:
        assert accepts(g, ok, lookup), ok
    for bad in ["", "1+", "(1", "1)", "1 + 2", "()"]:
        assert not accepts(g, bad, lookup), bad


def test_fifty_deep_parentheses(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_ebnf(ARITH, vocab)
    assert accepts(g, "(" * 50 + "1" + "+2)" * 50, lookup)
    assert not accepts(g, "(" * 50 + "1" + ")" * 49, lookup)


def test_the_stack_bound_is_exact(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_ebnf('root ::= p\np ::= "(" p ")" | "x"', vocab, max_stack_depth=10)
    # the start rule's call and nine nested ones
    assert accepts(g, "(" * 9 + "x" + ")" * 9, lookup)
    assert not accepts(g, "(" * 10 + "x" + ")" * 10, lookup)
    m = g.matcher()
    table, _ = lookup
    for _ in range(9):
        assert m.accept_token(table[b"("])
    bm = ts.allocate_token_bitmask(1, vocab.vocab_size)
    m.fill_next_token_bitmask(bm)
    probe = m.grammar.matcher()
    probe.accept_tokens([table[b"("]] * 9)
    assert not probe.accept_token(table[b"("]), "a tenth call is past the bound"
    assert m.accept_token(table[b"x"])


def test_tail_recursion_opens_no_calls(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_ebnf('root ::= ws "!"\nws ::= " " ws | ""', vocab, max_stack_depth=2)
    assert accepts(g, " " * 3000 + "!", lookup)


def thousand_rules() -> tuple[str, str]:
    """A generated language of 1,000 rules: 100 binary operator levels (each left-recursive),
    600 keyword rules, 290 statement forms, blocks and parentheses recursing through all of it;
    and a program in it."""
    lines = ["root ::= stmt+"]
    levels = 100
    for i in range(levels):
        nxt = f"e{i + 1}" if i + 1 < levels else "atom"
        lines.append(f'e{i} ::= e{i} " op{i} " {nxt} | {nxt}')
    lines.append('atom ::= [0-9]+ | ident | "(" e0 ")"')
    lines.append("ident ::= [a-z] [a-z0-9_]*")
    kws = 600
    for k in range(kws):
        lines.append(f'kw{k} ::= "key{k}"')
    forms = 1000 - len(lines) - 2
    for f in range(forms):
        words = " | ".join(f"kw{k}" for k in range(f, kws, forms))
        lines.append(f'form{f} ::= ({words}) " " e0 (" " block)? ";"')
    lines.append('block ::= "{" stmt* "}"')
    lines.append("stmt ::= " + " | ".join(f"form{f}" for f in range(forms)))
    text = "\n".join(lines) + "\n"
    program = "key3 1 op0 2 op99 (x op5 y);key7 z {key9 (1 op1 (2 op2 3));};"
    return text, program


def test_a_thousand_rule_grammar_compiles_within_the_deadline(
    vocab: ts.Vocabulary, lookup: Lookup
) -> None:
    text, program = thousand_rules()
    assert text.count("::=") == 1000
    t = time.perf_counter()
    # the default deadline (10 s) applies: a compile that passes it raises BudgetError
    g = ts.Grammar.from_ebnf(text, vocab, max_compile_seconds=10)
    print(f"1,000 rules: compiled with its first mask in {time.perf_counter() - t:.3f} s")
    assert g.warnings == []
    assert accepts(g, program, lookup)
    assert not accepts(g, program[:-1], lookup)


def test_errors_name_the_line_and_column(vocab: ts.Vocabulary) -> None:
    with pytest.raises(ts.GrammarError) as e:
        ts.Grammar.from_ebnf('root ::= item+\n\nitem ::= "a" | missing\n', vocab)
    assert (e.value.line, e.value.column) == (3, 16)
    assert "`missing`" in str(e.value)
    assert isinstance(e.value, ts.TokensieveError)
    with pytest.raises(ts.GrammarError, match="no rule `main`"):
        ts.Grammar.from_ebnf('root ::= "a"', vocab, start="main")
    with pytest.raises(ts.GrammarError, match="lookahead"):
        ts.Grammar.from_ebnf('root ::= "a" (= "b")', vocab)
    with pytest.raises(ts.GrammarError, match="matches no string"):
        ts.Grammar.from_ebnf('root ::= r\nr ::= "(" r ")"', vocab)
    with pytest.raises(ValueError, match="unknown option"):
        ts.Grammar.from_ebnf('root ::= "a"', vocab, whitespace="compact")


def test_start_rule_and_unreachable_rules(vocab: ts.Vocabulary, lookup: Lookup) -> None:
    g = ts.Grammar.from_ebnf('root ::= "a"\nother ::= "b"+\nspare ::= "c"\n', vocab, start="other")
    assert accepts(g, "bbb", lookup)
    assert not accepts(g, "a", lookup)
    assert len(g.warnings) == 2 and all("never used" in w for w in g.warnings)
    assert g.source_hash == constraint_hash(
        "ebnf", 'root ::= "a"\nother ::= "b"+\nspare ::= "c"\n', start="other"
    )


def test_substring_builtin_takes_runs_of_consecutive_strings() -> None:
    """xgrammar's `Substring(...)`: brute force over short texts against the runs written out."""
    import itertools

    from feed import byte_vocabulary

    v = byte_vocabulary()
    for items in [("abc", "de", "fg"), ("a", "", "b", "a"), ("ab", "ba", "a"), ()]:
        args = ", ".join(f'"{s}"' for s in items)
        g = ts.Grammar.from_ebnf(f'root ::= "<" Substring({args}) ">"', v)
        runs = {
            "".join(items[i:j]) for i in range(len(items) + 1) for j in range(i, len(items) + 1)
        }
        texts = {"".join(t) for n in range(5) for t in itertools.product("abcdefg", repeat=n)}
        for body in sorted(texts | runs):
            text = "<" + body + ">"
            m = g.matcher()
            ok = m.accept_tokens(list(text.encode())) == len(text) and m.is_accepting()
            assert ok == (body in runs), (items, text)
    for bad, msg in [
        ('root ::= Substring("a", foo=true)', "named arguments"),
        ("root ::= Substring(abc)", "string literals"),
        ('root ::= Substring("a", 1)', "string literals"),
        ('root ::= Substring("a"', "not closed"),
        ("root ::= Substring(" + ", ".join(['"' + "x" * 200 + '"'] * 400) + ")", "too large"),
    ]:
        with pytest.raises(ts.GrammarError, match=msg):
            ts.Grammar.from_ebnf(bad, v)
