"""Every failure reachable from Python is a typed exception (`docs/limits.md`), never a Rust
panic, an abort, a stall or memory exhaustion: long tokens, huge token ids in tokenizer files,
index files that are not regular files, integer arguments out of range, anchors inside a regex.

The cases that used to abort or stall the process run in a child process under an address-space
limit and a timeout, so that a regression fails the test instead of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tokensieve as ts
from tokensieve.index_files import IndexDirectory

MEMORY_LIMIT = 2 << 30


def run_child(code: str, timeout: float = 60, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter under MEMORY_LIMIT; fails the test on a timeout."""
    prelude = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
    )
    try:
        return subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {timeout} s:\n{code}")


def small_vocab() -> ts.Vocabulary:
    return ts.Vocabulary([b"a", b"b", b"ab", b"<e>"], eos_token_ids=[3])


# ---- token length ---------------------------------------------------------------------------


def test_a_token_longer_than_65535_bytes_is_a_vocabulary_error() -> None:
    with pytest.raises(ts.VocabularyError) as e:
        ts.Vocabulary([b"a", b"a" * 65536, b"<e>"], eos_token_ids=[2])
    msg = str(e.value)
    assert "token 1 " in msg and "65536 bytes" in msg and "65535" in msg, msg
    # a special token spells nothing: its length is not limited
    ts.Vocabulary([b"a", b"a" * 65536, b"<e>"], eos_token_ids=[2], special_token_ids=[1])


def test_a_token_of_65535_bytes_compiles_and_masks() -> None:
    v = ts.Vocabulary([b"a" * 65535, b"a", b"b", b"<e>"], eos_token_ids=[3])
    g = ts.Grammar.from_regex("a*", v)
    m = g.matcher()
    bm = np.zeros(1, np.int32)
    m.fill_next_token_bitmask(bm)
    assert int(bm[0]) & 0b1111 == 0b1011  # both a-tokens and EOS, not "b"
    assert m.accept_token(0) and m.accept_token(1) and m.accept_token(0)
    g = ts.Grammar.from_regex("a{65534}", v)
    m = g.matcher()
    m.fill_next_token_bitmask(bm)
    assert int(bm[0]) & 0b1111 == 0b0010  # the long token is one byte too long
    g = ts.Grammar.from_regex("a{65535}b", v)
    m = g.matcher()
    assert m.accept_token(0) and m.accept_token(2) and m.is_accepting()


# ---- token ids from tokenizer files ---------------------------------------------------------

BIG_IDS = [2**24, 2**26, 2**31, 2**60]


def tokenizer_doc(model_id: int, added_id: int) -> dict[str, Any]:
    return {
        "model": {"type": "BPE", "vocab": {"a": 0, "b": model_id}, "merges": []},
        "added_tokens": [{"id": added_id, "content": "</s>", "special": True}],
    }


@pytest.mark.parametrize("where", ["vocab", "added_tokens"])
def test_huge_ids_in_a_tokenizer_json_are_refused_before_allocation(
    tmp_path: Path, where: str
) -> None:
    files = []
    for big in BIG_IDS:
        doc = tokenizer_doc(big, 1) if where == "vocab" else tokenizer_doc(1, big)
        folder = tmp_path / f"t{big}"
        folder.mkdir()
        (folder / "tokenizer.json").write_text(json.dumps(doc))
        files.append(str(folder / "tokenizer.json"))
    # under a 2 GiB address space: an allocation sized by the id aborts or fails here
    r = run_child(
        """
        import json, sys
        import tokensieve as ts
        for path in sys.argv[1:]:
            text = open(path).read()
            for make in (
                lambda: ts.Vocabulary.from_tokenizer_json(text),
                lambda: ts.Vocabulary.from_pretrained(path),
            ):
                try:
                    make()
                    print("ok")
                except ts.VocabularyError as e:
                    print("VocabularyError", e)
                except BaseException as e:
                    print("untyped", type(e).__name__, e)
        """,
        120,
        *files,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 2 * len(BIG_IDS), r.stdout
    for big, pair in zip(BIG_IDS, zip(lines[::2], lines[1::2])):
        for line in pair:
            assert line.startswith("VocabularyError") and str(big) in line, line
            assert "2^24" in line, line


def test_cli_compile_refuses_a_huge_token_id(tmp_path: Path) -> None:
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps(tokenizer_doc(2**31, 1)))
    r = run_child(
        "import sys\nfrom tokensieve.cli import main\nsys.exit(main(sys.argv[1:]))",
        120,
        *["compile", "--regex", "a", "--tokenizer", str(tok), "-o", str(tmp_path / "o.tsidx")],
    )
    # a compile error (1) or, reading the tokenizer, a usage error (2): never an abort
    assert r.returncode in (1, 2), (r.returncode, r.stderr[-2000:])
    assert str(2**31) in r.stderr and "2^24" in r.stderr, r.stderr


def test_tiktoken_and_tekken_ranks_are_checked_before_allocation(tmp_path: Path) -> None:
    big = tmp_path / "big.tiktoken"
    big.write_bytes(b"YQ== 0\nYg== 4294967296\n")  # "a" 0, "b" 2^32
    neg = tmp_path / "neg.tiktoken"
    neg.write_bytes(b"YQ== 0\nYg== -1\n")
    tekken = tmp_path / "tekken.json"
    tekken.write_text(
        json.dumps(
            {
                "config": {"default_num_special_tokens": 2**40, "default_vocab_size": 2**41},
                "vocab": [{"rank": 0, "token_bytes": "YQ=="}],
                "special_tokens": [],
            }
        )
    )
    r = run_child(
        """
        import sys
        import tokensieve as ts
        for make in (
            lambda: ts.Vocabulary.from_tiktoken(sys.argv[1], eos_token_ids=[0]),
            lambda: ts.Vocabulary.from_tiktoken(sys.argv[2], eos_token_ids=[0]),
            lambda: ts.Vocabulary.from_tekken(sys.argv[3]),
        ):
            try:
                make()
                print("ok")
            except (ts.VocabularyError, ValueError) as e:
                print(type(e).__name__, e)
            except BaseException as e:
                print("untyped", type(e).__name__, e)
        """,
        60,
        str(big),
        str(neg),
        str(tekken),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("VocabularyError") and "4294967296" in lines[0], lines
    assert lines[1].startswith("ValueError") and "-1" in lines[1], lines
    assert lines[2].startswith("VocabularyError") and str(2**40) in lines[2], lines


# ---- index files that are not regular files ---------------------------------------------------

LOADERS = """
import sys
import tokensieve as ts
from tokensieve._core import read_index_header
v = ts.Vocabulary([b"a", b"<e>"], eos_token_ids=[1])
for load in (lambda p: ts.Grammar.load(p, v), read_index_header):
    try:
        load(sys.argv[1])
        print("ok")
    except ValueError as e:
        print("ValueError", e)
    except BaseException as e:
        print("untyped", type(e).__name__, e)
"""


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_loading_dev_zero_is_a_value_error() -> None:
    r = run_child(LOADERS, 60, "/dev/zero")
    assert r.returncode == 0, r.stderr[-2000:]
    for line in r.stdout.splitlines():
        assert line.startswith("ValueError") and "/dev/zero" in line, r.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_loading_a_fifo_is_a_value_error_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.tsidx"
    os.mkfifo(fifo)
    r = run_child(LOADERS, 30, str(fifo))
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    for line in lines:
        assert line.startswith("ValueError") and str(fifo) in line, r.stdout
    # an index directory holding it skips it instead of hanging
    r = run_child(
        """
        import sys
        import tokensieve as ts
        from tokensieve.index_files import IndexDirectory
        v = ts.Vocabulary([b"a", b"<e>"], eos_token_ids=[1])
        d = IndexDirectory(sys.argv[1], v)
        print(len(d), [str(p) for p, _ in d.skipped])
        """,
        30,
        str(tmp_path),
    )
    assert r.returncode == 0 and str(fifo) in r.stdout, (r.stdout, r.stderr[-2000:])


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_cli_inspect_refuses_special_files(tmp_path: Path, target: str) -> None:
    if target == "fifo":
        target = str(tmp_path / "p.tsidx")
        os.mkfifo(target)
    r = run_child(
        "import sys\nfrom tokensieve.cli import main\nsys.exit(main(sys.argv[1:]))",
        30,
        "inspect",
        target,
    )
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert target in r.stderr and "not a regular file" in r.stderr, r.stderr


def test_load_reads_only_the_header_of_a_foreign_file(tmp_path: Path) -> None:
    v = small_vocab()
    for data, why in [
        (b"garbage" * 10, "not a tokensieve index"),
        (b"TKSIEVE\x1a" + (99).to_bytes(4, "little"), "newer"),
        (b"", "not a tokensieve index"),
    ]:
        p = tmp_path / "x.tsidx"
        p.write_bytes(data)
        with pytest.raises(ValueError, match=why) as e:
            ts.Grammar.load(p, v)
        assert str(p) in str(e.value)
    d = tmp_path / "dir.tsidx"
    d.mkdir()
    with pytest.raises(ValueError, match="not a regular file"):
        ts.Grammar.load(d, v)
    with pytest.raises(OSError):
        ts.Grammar.load(tmp_path / "missing.tsidx", v)
    # a real index still loads, from the path and through IndexDirectory
    g = ts.Grammar.from_regex("a+b", v)
    g.save(tmp_path / "g.tsidx")
    assert ts.Grammar.load(tmp_path / "g.tsidx", v).matcher().accept_tokens([0, 1]) == 2
    assert IndexDirectory(tmp_path, v).find("regex", "a+b") is not None


# ---- a panic is an InternalError ---------------------------------------------------------------


def panic_exception_types() -> list[type[BaseException]]:
    """PyO3's `pyo3_runtime.PanicException` classes (one per PyO3 extension loaded). The
    extension's own is created the first time it fetches a Python error."""
    with pytest.raises(TypeError):
        small_vocab().token_bytes("0")  # type: ignore[arg-type]
    return [
        c
        for c in BaseException.__subclasses__()
        if c.__name__ == "PanicException" and c.__module__ == "pyo3_runtime"
    ]


def test_a_rust_panic_is_an_internal_error_an_exception_catches() -> None:
    """A genuine panic: the extension's `PanicException` raised by Python code the extension
    calls is resumed by PyO3 as a Rust panic inside the entry point (a schema object's
    `model_json_schema`, a token id's `__index__`); it must come out as `InternalError`."""
    v = small_vocab()

    class Raises:
        def __init__(self, exc: type[BaseException]) -> None:
            self.exc = exc

        def model_json_schema(self) -> Any:
            raise self.exc("boom from a callback")

        def __index__(self) -> int:
            raise self.exc("boom from __index__")

    calls = [
        lambda r: ts.Grammar.from_json_schema(r, v),
        lambda r: ts.Grammar.compile_pending("json_schema", r, v),
        lambda r: ts.Grammar.from_regex("a+", v).matcher().accept_tokens([0, r]),
    ]
    for call in calls:
        caught = []
        for exc in panic_exception_types():
            try:
                call(Raises(exc))
            except Exception as e:  # what a server catches
                caught.append(e)
            except BaseException:  # another extension's PanicException: not a panic of ours
                pass
        assert len(caught) == 1, caught
        e = caught[0]
        assert isinstance(e, ts.InternalError) and isinstance(e, ts.TokensieveError)
        assert str(e).startswith("internal error") and "boom from" in str(e), str(e)
    # the grammar and matchers still work afterwards
    m = ts.Grammar.from_regex("a+", v).matcher()
    assert m.accept_tokens([0, 0]) == 2


# ---- integer arguments ------------------------------------------------------------------------


@pytest.mark.parametrize("token", [-1, -(2**70), 2**32, 10**12, 2**63, 2**64, 2**200])
def test_any_out_of_range_token_id_is_refused_like_an_unknown_one(token: int) -> None:
    m = ts.Grammar.from_regex("a+", small_vocab()).matcher()
    assert m.accept_token(token) is False
    assert m.accept_tokens([0, token, 0]) == 1
    assert small_vocab().token_bytes(token) is None
    assert m.history_len == 1


def test_token_ids_of_the_wrong_type_are_a_type_error() -> None:
    m = ts.Grammar.from_regex("a+", small_vocab()).matcher()
    with pytest.raises(TypeError):
        m.accept_token("0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        m.accept_tokens([0, "0"])  # type: ignore[list-item]


def bad_value(call: Any, *needles: str) -> None:
    with pytest.raises(ValueError) as e:
        call()
    assert not isinstance(e.value, OverflowError)
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


@pytest.mark.parametrize("value", [-1, 2**64, -(2**80)])
def test_matcher_integer_arguments_out_of_range_are_value_errors(value: int) -> None:
    g = ts.Grammar.from_regex("a+", small_vocab())
    m = g.matcher()
    bad_value(lambda: m.rollback(value), "rollback", "n", str(value))
    bad_value(lambda: g.matcher(max_rollback=value), "max_rollback", str(value))
    bad_value(lambda: g.matcher(max_tokens=value), "max_tokens", "4294967295", str(value))
    bad_value(
        lambda: g.matcher(reasoning_end="b", thinking_budget=value),
        "thinking_budget",
        "4294967295",
    )
    bad_value(lambda: setattr(m, "max_tokens", value), "max_tokens", "4294967295")
    bm = np.zeros((2, 1), np.int32)
    bad_value(lambda: m.fill_next_token_bitmask(bm, value), "index", str(value))
    bad_value(lambda: ts.fill_next_token_bitmask([m], bm, [value]), "index", str(value))


def test_u32_arguments_just_past_their_type_are_value_errors() -> None:
    g = ts.Grammar.from_regex("a+", small_vocab())
    bad_value(lambda: g.matcher(max_tokens=2**32), "max_tokens", "4294967295")
    assert g.matcher(max_tokens=2**32 - 1).max_tokens == 2**32 - 1
    m = g.matcher(reasoning_end="b", thinking_budget=2**32 - 1)
    assert m.thinking_budget == 2**32 - 1
    bad_value(lambda: g.matcher(reasoning_end="b", thinking_budget=2**32), "thinking_budget")


@pytest.mark.parametrize("value", [-1, 2**64, 2**100])
def test_vocabulary_integer_arguments_out_of_range(value: int) -> None:
    toks = [b"a", b"<e>"]
    bad_value(lambda: ts.Vocabulary(toks, eos_token_ids=[value]), "eos_token_ids", str(value))
    bad_value(
        lambda: ts.Vocabulary(toks, eos_token_ids=[1], special_token_ids=[value]),
        "special_token_ids",
        str(value),
    )
    with pytest.raises(ts.VocabularyError, match="vocab_size"):
        ts.Vocabulary(toks, eos_token_ids=[1], vocab_size=value)
    with pytest.raises(ts.VocabularyError, match="vocab_size"):
        ts.Vocabulary.from_tokenizer_json(json.dumps(tokenizer_doc(2, 1)), vocab_size=value)
    bad_value(
        lambda: ts.Vocabulary.from_tokenizer_json(
            json.dumps(tokenizer_doc(2, 1)), eos_token_ids=[value]
        ),
        "eos_token_ids",
        str(value),
    )


@pytest.mark.parametrize("name", ["max_states", "max_nfa_bytes", "mask_cache_bytes"])
@pytest.mark.parametrize("value", [-1, 2**64, 2**100])
def test_budget_arguments_out_of_range_name_their_bound(name: str, value: int) -> None:
    v = small_vocab()
    bound = str(2**64 - 1)
    bad_value(lambda: ts.Grammar.from_regex("a", v, **{name: value}), name, bound)
    bad_value(lambda: ts.Grammar.from_choice(["a"], v, **{name: value}), name, bound)
    bad_value(lambda: ts.Grammar.from_json_object(v, **{name: value}), name, bound)


@pytest.mark.parametrize(
    "name", ["max_whitespace", "max_stack_depth", "max_recursion_depth", "max_nesting_depth"]
)
@pytest.mark.parametrize("value", [-1, 2**32, 2**40])
def test_schema_integer_options_out_of_range_name_their_bound(name: str, value: int) -> None:
    v = small_vocab()
    bound = "1048576" if name == "max_stack_depth" else "4294967295"
    bad_value(
        lambda: ts.Grammar.from_json_schema({"type": "object"}, v, **{name: value}),
        name,
        bound,
        str(value),
    )
    bad_value(lambda: ts.Grammar.from_json_object(v, **{name: value}), name, bound)
    with pytest.raises(ValueError, match=f"{name} must be an integer"):
        ts.Grammar.from_json_object(v, **{name: "x"})


def test_bitmask_allocation_bounds_the_vocabulary_size() -> None:
    bad_value(lambda: ts.allocate_token_bitmask(1, 2**40), "vocab_size", str(2**24))
    bad_value(lambda: ts.bitmask_words(2**40), "vocab_size", str(2**24))
    assert ts.bitmask_words(2**24) == 2**19


# ---- anchors inside a regex -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "offset", "anchor"),
    [
        ("a$b", 1, "$"),
        ("a^b", 1, "^"),
        ("(a$|b)c", 2, "$"),
        ("a\\Ab", 1, "\\A"),
        ("a\\zb", 1, "\\z"),
        ("x(?:^a|b)", 4, "^"),
        ("(?:^a)+", 3, "^"),
        ("(?:a$)*", 4, "$"),
        ("a?^b", 2, "^"),
        ("a|b$c", 3, "$"),
        ("(?i)a^", 5, "^"),
    ],
)
def test_an_anchor_inside_a_regex_is_a_regex_error(pattern: str, offset: int, anchor: str) -> None:
    with pytest.raises(ts.RegexError) as e:
        ts.Grammar.from_regex(pattern, small_vocab())
    assert e.value.offset == offset, (pattern, str(e.value))  # type: ignore[attr-defined]
    assert anchor in str(e.value) and "end" in str(e.value)


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("^ab$", ["ab"], ["a", "abab"]),
        ("\\Aa+\\z", ["a", "aa"], [""]),
        ("(?:^a|^b)$", ["a", "b"], ["ab"]),
        ("^(?:a|b)+$", ["ab", "ba"], [""]),
        ("a|^b$", ["a", "b"], ["ab"]),
        ("(^a)?b$", ["ab", "b"], ["a"]),
        ("(?i)^a$", ["a"], ["b"]),
        ("^^a$$", ["a"], ["aa"]),
    ],
)
def test_anchors_at_the_ends_keep_working(pattern: str, yes: list[str], no: list[str]) -> None:
    v = small_vocab()
    ids = {"a": 0, "b": 1}
    g = ts.Grammar.from_regex(pattern, v)
    for text, want in [(t, True) for t in yes] + [(t, False) for t in no]:
        m = g.matcher()
        ok = m.accept_tokens([ids[c] for c in text]) == len(text) and m.is_accepting()
        assert ok == want, (pattern, text)


VOCAB = ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<e>"], eos_token_ids=[256])


@pytest.mark.parametrize("value", [0, -1, 2**20 + 1, 2**32, 2**64, True, False, 1.5, "x", "0"])
def test_max_stack_depth_is_read_alike_for_grammars_and_schemas(value: Any) -> None:
    # one range (1 to 1,048,576), one message, a bool refused, for both front ends
    msgs = []
    for compile in (
        lambda: ts.Grammar.from_ebnf('root ::= "a"', VOCAB, max_stack_depth=value),
        lambda: ts.Grammar.from_json_schema({"type": "integer"}, VOCAB, max_stack_depth=value),
    ):
        with pytest.raises(ValueError, match="from 1 to 1048576") as e:
            compile()
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


@pytest.mark.parametrize("value", [1, 2**20, "7"])
def test_max_stack_depth_in_range_compiles_for_both(value: Any) -> None:
    ts.Grammar.from_ebnf('root ::= "a"', VOCAB, max_stack_depth=value)
    ts.Grammar.from_json_schema({"type": "integer"}, VOCAB, max_stack_depth=value)


def test_cli_max_stack_depth_past_its_range_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "g.gbnf").write_text('root ::= "a"\n')
    p = subprocess.run(
        [sys.executable, "-m", "tokensieve.cli", "compile", "--ebnf", str(tmp_path / "g.gbnf"),
         "--max-stack-depth", "2000000", "--tokenizer", str(tmp_path), "-o", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2 and "--max-stack-depth" in p.stderr, (p.returncode, p.stderr)


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [('root ::= "a\ud800"', 1, 12), ('root ::= "a"\nb ::= [x-\udfff]\n', 2, 10)],
)
def test_a_lone_surrogate_in_grammar_text_is_a_grammar_error(
    text: str, line: int, column: int
) -> None:
    for compile in (
        lambda: ts.Grammar.from_ebnf(text, VOCAB),
        lambda: ts.Grammar.compile_pending("ebnf", text, VOCAB).result(),
    ):
        with pytest.raises(ts.GrammarError, match="lone surrogate") as e:
            compile()
        assert (e.value.line, e.value.column) == (line, column)
