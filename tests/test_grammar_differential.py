"""GBNF grammars (``Grammar.from_ebnf``): masks along seeded token walks against xgrammar,
llguidance and an independent Earley oracle (``grammar_anchors.py``).

For every grammar of ``tests/grammars/`` (and of ``$TOKENSIEVE_EXTRA_GRAMMARS``, a folder of
``*.gbnf`` files such as llama.cpp's ``grammars/``, for local runs), on a small vocabulary (a
few hundred short tokens with UTF-8 fragments) and on the Llama 3 tokenizer (``../shared``):

* each engine in turn drives seeded walks (a uniform pick among the tokens its mask allows,
  EOS taken with probability 0.15 when allowed, at most 60 tokens); every engine follows while
  it accepts the walk's tokens, and at every prefix each anchor's whole mask is compared with
  tokensieve's. Every token in only one of two masks is judged by the oracle: the test fails
  when tokensieve is wrong about one (it allows a token no string of the grammar continues, or
  refuses one that some string does), and when an anchor is wrong in a way
  ``grammar_anchors.ANCHOR_DEVIATIONS`` does not describe (those are listed with their cause);
* every walked token must keep the text a prefix of the grammar's language (oracle);
* on the small vocabulary, the first 25 masks of every walk are compared bit for bit with the
  oracle's brute-force mask (each token: is text + token a prefix of some string, and EOS: is
  the text a string).

Also: the JSON grammar written to tokensieve's default JSON whitespace gives the masks of
``Grammar.from_json_schema({})`` at every prefix of walks under either; unreachable rules are
listed in ``Grammar.warnings``; syntax errors raise ``GrammarError`` on the line the oracle's
parser names. ``TOKENSIEVE_GRAMMAR_WALKS=N`` runs N walks per driver and vocabulary (default
2 on Llama 3, 3 on the small vocabulary). Per-grammar counts are printed at the end.
"""

from __future__ import annotations

import importlib.util
import os
import random
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grammar_anchors as ga
import numpy as np
import pytest
from shared_data import LLAMA3_DIR, require

import tokensieve as ts

GRAMMARS = Path(__file__).resolve().parent / "grammars"
EXTRA = os.environ.get("TOKENSIEVE_EXTRA_GRAMMARS")
WALKS = os.environ.get("TOKENSIEVE_GRAMMAR_WALKS")
MAX_TOKENS = 60
BRUTE_FORCE_STEPS = 25
HAS_XGR = importlib.util.find_spec("xgrammar") is not None
HAS_LLG = importlib.util.find_spec("llguidance") is not None
HAS_EBNF = hasattr(ts.Grammar, "from_ebnf")
needs_ebnf = pytest.mark.skipif(not HAS_EBNF, reason="this tokensieve has no Grammar.from_ebnf")

FILES = [(f"{p.stem}", p) for p in ga.grammar_files(GRAMMARS)]
if EXTRA:
    FILES += [(f"extra-{p.stem}", p) for p in ga.grammar_files(Path(EXTRA))]

# Strings each committed grammar must accept / refuse: the oracle's own check, and (where
# installed) xgrammar's and tokensieve's verdicts on the same strings.
SAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "arith_left": (["1+2*3", "f(x, 2)^-3", "-(a+b) % 4.5", "x - y - z"], ["1+", "(1", "1 ++ 2"]),
    "indirect_left": (["a.b(c, d)[3].e", "!a", "!a=-=-", "(x)(y)", "!b-"], ["!a=", "!b", "a."]),
    "nested": (["(a[b]{c<d>})", "()[]", "{ab c}<>"], ["(]", "(", "a"]),
    "minilang": (
        [
            "let x = 1 + 2 * 3;",
            'if a < b { print("hi\\n"); } else { return; }',
            "fn f(a, b) { return a || b && !c; }\nwhile x { x = x - 1; }",
        ],
        ["let x = ;", "if a { }x", "print(1)"],
    ),
    "json": ([' {"a": [1, -2.5e+3, true, null, "x\\u00e9"]} ', "[]", '"\\ud83d"'], ["[1,]", "01"]),
    "json_default_ws": (
        ['{"a": [1,2, {"b":null}]}', '"\\ud83d\\ude00"', "-0.5E-2"],
        ['"\\ud83d"', '{ "a":1}', "[1 ,2]", " 1"],
    ),
    "chess_san": (
        ["1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. O-O Nxe4+ 5. exd8=Q# 1-0", "1. d4"],
        ["1. e9", "1.e4", "0. e4"],
    ),
    "csv": (['a,b\n1,"x""y"\n,\n', "- one\n- two\n"], ["a,b\n", "a,b,c,d,e,f,g\n1\n"]),
    "unicode_repeat": (
        ["αβγ", 'αβ-Ωω; café; "x y";😀☀', "§1234-AF", "<a\nb>"],
        ["α", "ca", "§123-AF", "<ab>"],
    ),
    "unreachable": (["hello, world!", "hey, Bob!"], ["never1", "hello, bob!"]),
}

# --------------------------------------------------------------------------------------------
# per-run results, printed at the end of the module
# --------------------------------------------------------------------------------------------

SUMMARY: list[list[str]] = []
NOTES: list[str] = []  # renderings the anchors got, anchors leaving walks, explained deviations


@pytest.fixture(scope="module", autouse=True)
def _print_summary(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not SUMMARY:
        return
    head = [
        "grammar",
        "vocab",
        "engines",
        "walks",
        "tokens",
        "masks",
        "oracle",
        "ts wrong",
        "explained",
        "unexplained",
    ]
    widths = [max(len(r[i]) for r in [head, *SUMMARY]) for i in range(len(head))]
    lines = ["", "GBNF differential (masks: compared per engine pair; oracle: brute-force masks)"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head, *SUMMARY]]
    lines += NOTES
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            print("\n".join(lines))
    else:
        print("\n".join(lines))


# --------------------------------------------------------------------------------------------
# vocabularies and engines
# --------------------------------------------------------------------------------------------


class Side:
    """One vocabulary with every engine's view of it (built once per session)."""

    def __init__(self, spec: ga.VocabSpec, vocab: Any = None) -> None:
        self.spec = spec
        self.trie = ga.TokenTrie(spec.tokens)
        self.ts = ga.TsVocab(spec, vocab)
        self.xgr = ga.XgrVocab(spec) if HAS_XGR else None
        self.llg = ga.LlgVocab(spec, self.trie) if HAS_LLG else None


@pytest.fixture(scope="session")
def small_side() -> Side:
    return Side(ga.small_vocab())


@pytest.fixture(scope="session")
def llama3_side() -> Side:
    require(LLAMA3_DIR, "the Llama 3 differential walks")
    spec, vocab = ga.llama3_vocab(LLAMA3_DIR)
    return Side(spec, vocab)


def side_for(name: str, request: pytest.FixtureRequest) -> Side:
    side: Side = request.getfixturevalue(f"{name}_side")
    return side


class TsMaskEngine(ga.TsEngine):
    """tokensieve, with a state no token can continue shown as an empty mask (the README's
    ``UnspellableError``), as the anchors and the oracle show it."""

    def mask(self, m: Any) -> np.ndarray:
        try:
            return super().mask(m)
        except ts.UnspellableError:
            return np.zeros(self.tv.spec.size, dtype=bool)


def build_engines(
    side: Side, text: str, flat: ga.Flat
) -> tuple[dict[str, ga.Engine], dict[str, str]]:
    """tokensieve and every anchor that compiles the grammar; the refusals by name."""
    engines: dict[str, ga.Engine] = {"tokensieve": TsMaskEngine(side.ts, text)}
    refused: dict[str, str] = {}
    makers: list[tuple[str, Any]] = []
    if side.xgr is not None:
        makers.append(("xgrammar", lambda: ga.XgrEngine(side.xgr, text, flat)))
    if side.llg is not None:
        makers.append(("llguidance", lambda: ga.LlgEngine(side.llg, text, flat)))
    for name, make in makers:
        try:
            engines[name] = make()
        except ga.EngineRefused as e:
            refused[name] = str(e)
    return engines, refused


def seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def walks_per_driver(vocab: str) -> int:
    if WALKS:
        return int(WALKS)
    return 3 if vocab == "small" else 2


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_oracle_samples(name: str) -> None:
    """The oracle, xgrammar and tokensieve agree on hand-picked strings of each grammar."""
    text = (GRAMMARS / f"{name}.gbnf").read_text()
    oracle = ga.Oracle(ga.parse_gbnf(text))
    good, bad = SAMPLES[name]
    for s in good:
        assert oracle.accepts(s), f"oracle refuses {s!r}"
    for s in bad:
        assert not oracle.accepts(s), f"oracle accepts {s!r}"
    if HAS_XGR and name not in ("unicode_repeat",):  # `.` and `{,n}`: not xgrammar syntax
        import xgrammar as xgr

        info = xgr.TokenizerInfo([b"<eos>"], xgr.VocabType.RAW, stop_token_ids=[0])
        compiled = xgr.GrammarCompiler(info).compile_grammar(xgr.Grammar.from_ebnf(text))
        for s, want in [(s, True) for s in good] + [(s, False) for s in bad]:
            m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
            got = m.accept_string(s) and m.is_completed()
            assert got == want, f"xgrammar {'refuses' if want else 'accepts'} {s!r}"
    if HAS_EBNF:
        from feed import accepts, token_lookup

        small = ga.small_vocab()
        vocab = ga.TsVocab(small).vocab
        grammar = ts.Grammar.from_ebnf(text, vocab)
        lookup = token_lookup(vocab)
        for s in good:
            assert accepts(grammar, s, lookup), f"tokensieve refuses {s!r}"
        for s in bad:
            assert not accepts(grammar, s, lookup), f"tokensieve accepts {s!r}"


@needs_ebnf
@pytest.mark.parametrize("vocab", ["small", "llama3"])
@pytest.mark.parametrize("name,path", FILES, ids=[n for n, _ in FILES])
def test_differential(name: str, path: Path, vocab: str, request: pytest.FixtureRequest) -> None:
    side = side_for(vocab, request)
    text = path.read_text(encoding="utf-8")
    flat = ga.parse_gbnf(text)
    oracle = ga.Oracle(flat)
    try:
        engines, refused = build_engines(side, text, flat)
    except ga.EngineRefused as e:
        SUMMARY.append([name, vocab, "tokensieve refused"] + [""] * 7)
        pytest.fail(f"tokensieve refuses {path.name}, which the oracle parses: {e}")
    counts = ga.Counts()
    k = walks_per_driver(vocab)
    errors: list[str] = []
    for driver in sorted(engines):
        for w in range(k):
            try:
                ga.walk(
                    engines,
                    "tokensieve",
                    driver,
                    side.spec,
                    oracle,
                    random.Random(seed(name, vocab, driver, w)),
                    counts,
                    name,
                    max_tokens=MAX_TOKENS,
                    brute_force_steps=BRUTE_FORCE_STEPS if vocab == "small" else 0,
                    trie=side.trie,
                )
            except ts.TokensieveError as e:  # a mask or accept_token raised
                text = counts.prefix.decode("utf-8", "backslashreplace")
                errors.append(f"walk {w} by {driver}, after {text!r}: {type(e).__name__}: {e}")
            except ga.AnchorGaveUp as e:  # the driving anchor hit a limit of its own
                counts.gave_up.append(f"{driver} (driving walk {w}): {e}")
    ts_wrong = [
        (d, v) for d in counts.disagreements for v in d.verdicts if d.culprit(v) == "tokensieve"
    ]
    anchors_wrong = [
        (d, v) for d in counts.disagreements for v in d.verdicts if d.culprit(v) != "tokensieve"
    ]
    unexplained = [(d, v) for d, v in anchors_wrong if not v.explained]
    # (llguidance always reads the flat Lark rendering: no note for that)
    notes = [f"{n}: {e.note}" for n, e in engines.items() if e.note and n != "llguidance"]
    notes += [f"left a walk: {g}" for g in counts.gave_up]
    notes += [f"{n} refused: {r}" for n, r in refused.items()]
    SUMMARY.append(
        [
            name,
            vocab,
            ",".join(n[:3] for n in sorted(engines)),
            str(counts.walks),
            str(counts.tokens),
            str(counts.steps),
            str(counts.oracle_masks),
            str(len(ts_wrong)),
            str(len(anchors_wrong) - len(unexplained)),
            str(len(unexplained)) + (f" ({len(errors)} walks raised)" if errors else ""),
        ]
    )
    why: dict[str, int] = {}
    for _, v in anchors_wrong:
        if v.explained:
            why[v.explained] = why.get(v.explained, 0) + 1
    notes += [f"explained: {k} × {n}" for k, n in sorted(why.items())]
    NOTES.extend(f"  {name} / {vocab}: {note}" for note in notes)
    report = []
    seen: set[int] = set()
    for d, _ in ts_wrong + unexplained:
        if id(d) not in seen and len(report) < 12:
            seen.add(id(d))
            report.append(d.describe(side.spec))
    assert not errors and not ts_wrong and not unexplained, (
        f"{len(errors)} walks where tokensieve raised, {len(ts_wrong)} token verdicts where "
        f"tokensieve is wrong, {len(unexplained)} unexplained anchor disagreements:\n"
        + "\n".join(errors[:5] + report)
    )


@needs_ebnf
@pytest.mark.parametrize("vocab", ["small", "llama3"])
def test_json_grammar_matches_json_schema(vocab: str, request: pytest.FixtureRequest) -> None:
    """``json_default_ws.gbnf`` and ``from_json_schema({})`` (default whitespace, nesting bound
    raised past anything a 60-token walk can reach) allow the same tokens at every prefix."""
    side = side_for(vocab, request)
    text = (GRAMMARS / "json_default_ws.gbnf").read_text()
    gbnf = TsMaskEngine(side.ts, text)
    schema = TsMaskEngine(
        side.ts, "", ts.Grammar.from_json_schema({}, side.ts.vocab, max_nesting_depth=1000)
    )
    engines: dict[str, ga.Engine] = {"tokensieve": gbnf, "schema": schema}
    oracle = ga.Oracle(ga.parse_gbnf(text))
    counts = ga.Counts()
    for driver in ("tokensieve", "schema"):
        for w in range(walks_per_driver(vocab) * 2):
            ga.walk(
                engines,
                "tokensieve",
                driver,
                side.spec,
                oracle,
                random.Random(seed("json-schema", vocab, driver, w)),
                counts,
                "json_default_ws vs schema {}",
            )
    SUMMARY.append(
        [
            "json_default_ws vs {}",
            vocab,
            "gbnf,schema",
            str(counts.walks),
            str(counts.tokens),
            str(counts.steps),
            "0",
            str(
                sum(
                    1
                    for d in counts.disagreements
                    for v in d.verdicts
                    if d.culprit(v) == "tokensieve"
                )
            ),
            "",
            str(len(counts.disagreements)),
        ]
    )
    assert not counts.disagreements, "\n".join(
        d.describe(side.spec) for d in counts.disagreements[:10]
    )


@needs_ebnf
def test_unreachable_rules_are_warned(small_side: Side) -> None:
    text = (GRAMMARS / "unreachable.gbnf").read_text()
    flat = ga.parse_gbnf(text)
    assert flat.unreachable == ["orphan", "island"]
    grammar = ts.Grammar.from_ebnf(text, small_side.ts.vocab)
    warned = " ".join(grammar.warnings)
    for rule in flat.unreachable:
        assert rule in warned, f"{rule} is not in the warnings {grammar.warnings}"
    for rule in ("greeting", "target", "name"):
        assert rule not in warned, grammar.warnings


# (text, the line of the broken construct or None, what): the oracle's parser refuses each too
BROKEN = [
    ('root ::= "a" b\n', 1, "undefined rule"),
    ('root ::= "a"\nb ::= "b" | c\n', 2, "undefined rule in an unreachable rule"),
    ('root ::= x\nx ::= "a\n', 2, "unterminated literal"),
    ('root ::= "a"\nx = "b"\n', 2, "no ::="),
    ("root ::= x\nx ::= [a-\n", 2, "unterminated class"),
    ('root ::= "a"\nx ::= "\\q"\n', 2, "unknown escape"),
    ('root ::= x\nx ::= "a"{3,2}\n', 2, "bounds out of order"),
    ('root ::= x\nx ::= ("a" | "b"\n', 2, "unclosed group"),
    ('root ::= x\nx ::= "\\uD800"\n', 2, "surrogate escape"),
    ('root ::= "a"\nroot ::= "b"\n', 2, "rule defined twice"),
    ('other ::= "a"\n', None, "no root rule"),
]


@needs_ebnf
@pytest.mark.parametrize("text,line,what", BROKEN, ids=[w for _, _, w in BROKEN])
def test_syntax_errors(text: str, line: int | None, what: str, small_side: Side) -> None:
    """A grammar the oracle's parser refuses raises GrammarError, with the line of the broken
    construct."""
    with pytest.raises(ga.GbnfParseError):
        ga.parse_gbnf(text)
    with pytest.raises(ts.TokensieveError) as got:
        ts.Grammar.from_ebnf(text, small_side.ts.vocab)
    err = got.value
    assert type(err).__name__ == "GrammarError", f"{type(err).__name__}: {err}"
    assert isinstance(getattr(err, "line", None), int), err
    assert isinstance(getattr(err, "column", None), int), err
    if line is not None:
        assert err.line == line, f"{err} (line {err.line}, expected {line})"  # type: ignore[attr-defined]
