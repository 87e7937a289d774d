"""`tokensieve compile` on bad input: usage errors (exit 2) for bad flags and unreadable inputs,
per-schema failures (exit 1) that leave the rest of a folder or JSONL file compiled, and never a
traceback. Most cases call ``cli.main`` in this process; the ones that could hang or that check
the installed entry point run it in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tokensieve import cli


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    vocab = {"a": 0, "b": 1, "1": 2, "2": 3, "-": 4, "</s>": 5, "x": 6, "y": 7}
    for ch in '"{}[]:, 03456789.e+tfrunls\\':
        vocab.setdefault(ch, len(vocab))
    doc = {"model": {"type": "BPE", "vocab": vocab, "merges": []}, "decoder": None}
    (folder / "tokenizer.json").write_text(json.dumps(doc))
    return folder / "tokenizer.json"


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``tokensieve ARGV`` in this process: exit code, stdout, stderr (an exception that
    escapes ``main`` is a traceback, and fails the test)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def run_process(*argv: Any, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokensieve.cli", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--vocab-size", "-5"),
        ("--vocab-size", "0"),
        ("--vocab-size", "99999999999999999999"),
        ("--eos-token-id", "-1"),
        ("--eos-token-id", str(1 << 40)),
        ("--jobs", "0"),
        ("--jobs", "-3"),
        ("--max-states", "-1"),
        ("--max-states", "1" * 30),
        ("--max-nfa-bytes", "-1"),
        ("--mask-cache-bytes", "-2"),
        ("--max-compile-seconds", "nan"),
        ("--max-compile-seconds", "-1"),
        ("--max-compile-seconds", "1e309"),
        ("--max-whitespace", "-1"),
        ("--max-recursion-depth", str(1 << 32)),
        ("--max-stack-depth", "0"),
        ("--max-nesting-depth", "-1"),
        ("--one-of", "bogus"),
    ],
)
def test_bad_flag_values_are_usage_errors(
    flag: str, value: str, tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(
        capsys,
        "compile",
        "--json-object",
        "--tokenizer",
        tokenizer_json,
        "-o",
        tmp_path / "o.tsidx",
        flag,
        value,
    )
    assert code == 2, err
    assert f"argument {flag}" in err and "usage:" in err, err
    assert not (tmp_path / "o.tsidx").exists()


def test_an_unreadable_tokenizer_is_named(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(bytes(range(255, 0, -1)))
    base = ["compile", "--regex", "a", "-o", tmp_path / "o.tsidx"]
    code, _, err = run_main(capsys, *base, "--tokenizer", garbage)
    assert code == 2
    assert f"--tokenizer {garbage}: not a readable tokenizer" in err, err
    # read, and refused by the core (ids that do not fit it): exit 1, naming it, with the reason
    code, _, err = run_main(capsys, *base, "--tokenizer", tokenizer_json, "--eos-token-id", "500")
    assert code == 1 and f"--tokenizer {tokenizer_json}: " in err and "EOS id 500" in err, err


def test_a_folder_with_broken_entries_compiles_the_rest(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "one.json").write_text(json.dumps({"enum": ["a", "b"]}))
    (schemas / "two.json").write_text(json.dumps({"const": "ab"}))
    broken = {
        "bad.json": "not JSON",
        "deep.json": "nested too deeply",
        "string.json": "got a JSON string",
        "loop.json": "Too many levels of symbolic links",
        "x.json": "is a folder",
        "fifo.json": "is not a regular file",
        "latin1.json": "not UTF-8",
        "unsupported.json": "uniqueItems",  # read, then refused by the compiler
    }
    (schemas / "bad.json").write_text("{nope")
    (schemas / "deep.json").write_text(DEEP)
    (schemas / "string.json").write_text(json.dumps(json.dumps({"const": "ab"})))
    (schemas / "loop.json").symlink_to("loop.json")
    (schemas / "x.json").mkdir()
    os.mkfifo(schemas / "fifo.json")
    (schemas / "latin1.json").write_bytes(b'{"const": "\xe9"}')
    (schemas / "unsupported.json").write_text(json.dumps({"uniqueItems": True}))
    out = tmp_path / "out"
    code, stdout, err = run_main(
        capsys, "compile", "--json-schema", schemas, "--tokenizer", tokenizer_json, "-o", out
    )
    assert code == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["one.tsidx", "two.tsidx"]
    lines = err.splitlines()
    for name, reason in broken.items():
        line = next((x for x in lines if x.startswith(f"{schemas / name}: error: ")), None)
        assert line is not None and reason in line, (name, err)
    assert f"{len(broken)} of {len(broken) + 2} failed" in err
    assert f"{schemas / 'one.json'}:" in stdout


def test_a_jsonl_line_is_a_schema_never_schema_text(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        json.dumps(json.dumps({"const": "ab"})),  # a JSON string: not read a second time
        json.dumps({"const": "ab"}),
        json.dumps({"id": "w", "schema": json.dumps({"const": "a"})}),  # the same, wrapped
        json.dumps({"id": "w2", "schema": {"const": "b"}}),
        "{nope",
        "",
        DEEP,
        json.dumps({"id": "w2", "schema": {"const": "a"}}),  # its output name is taken
        "true",
    ]
    jl = tmp_path / "s.jsonl"
    jl.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code, _, err = run_main(
        capsys, "compile", "--json-schema", jl, "--tokenizer", tokenizer_json, "-o", out
    )
    assert code == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["2.tsidx", "9.tsidx", "w2.tsidx"]
    expected = {
        1: "a schema must be a JSON object or boolean, got a JSON string",
        3: '"schema" must be a JSON object or boolean, got a JSON string',
        5: "not JSON",
        7: "nested too deeply",
        8: "w2.tsidx is also",
    }
    for n, reason in expected.items():
        assert any(x.startswith(f"{jl}:{n}: error: ") and reason in x for x in err.splitlines()), (
            n,
            err,
        )
    assert "5 of 8 failed" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    code, _, err = run_main(
        capsys, "compile", "--json-schema", empty, "--tokenizer", tokenizer_json, "-o", out
    )
    assert code == 2 and "holds no schemas" in err


def test_a_single_input_that_is_not_a_schema_is_a_usage_error(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = {
        "string.json": (json.dumps(json.dumps({"const": "ab"})), "got a JSON string"),
        "deep.json": (DEEP, "nested too deeply"),
    }
    for name, (text, reason) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        code, _, err = run_main(
            capsys, "compile", "--json-schema", path, "--tokenizer", tokenizer_json, "-o",
            tmp_path / "o.tsidx",
        )  # fmt: skip
        assert code == 2 and f"{path}: " in err and reason in err, (name, err)
    loop = tmp_path / "loop.json"
    loop.symlink_to("loop.json")
    code, _, err = run_main(
        capsys, "compile", "--json-schema", loop, "--tokenizer", tokenizer_json, "-o",
        tmp_path / "o.tsidx",
    )  # fmt: skip
    assert code == 2 and "Too many levels of symbolic links" in err, err


def test_schema_files_reach_the_compiler_as_text(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the file's own text is compiled: its numbers are not rounded through a Python float
    path = tmp_path / "s.json"
    path.write_text('{"const": 0.100000000000000000001}')
    out = tmp_path / "s.tsidx"
    code, _, err = run_main(
        capsys, "compile", "--json-schema", path, "--tokenizer", tokenizer_json, "-o", out
    )
    assert code == 0, err
    code, stdout, _ = run_main(capsys, "inspect", out, "--json")
    assert code == 0 and "0.100000000000000000001" in json.loads(stdout)["constraint"]


EXACT_SCHEMAS = [
    '{"type": "number", "exclusiveMinimum": 1.00000000000000000001}',
    '{"type": "number", "multipleOf": 0.00000000000000000001, "maximum": 1}',
    '{"type": "number", "maximum": 1e400}',
    '{"const": [12345678901234567890123, -0.0, 1E+2]}',
]


def test_jsonl_schema_members_reach_the_compiler_as_text(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``{"id": ..., "schema": {...}}`` lines: the schema's own text is compiled, so its numbers
    are exact (they went through Python floats: 1.00000000000000000001 became 1.0, 1e400 inf),
    and the index is the one the same text compiles to directly."""
    import tokensieve as ts

    wrapped = [f'{{"id": "s{k}", "schema": {text}}}' for k, text in enumerate(EXACT_SCHEMAS)]
    # odd spacing, a repeated member (the last one counts, as for json.loads), a string holding
    # braces and quotes before it
    wrapped.append(
        ' { "note" : "}{\\"\\\\" , "schema":{"const":1} ,"id":"s9",'
        '"schema" :\t' + EXACT_SCHEMAS[0] + " } "
    )
    jl = tmp_path / "s.jsonl"
    jl.write_text("\n".join(wrapped) + "\n")
    out = tmp_path / "out"
    code, _, err = run_main(
        capsys, "compile", "--json-schema", jl, "--tokenizer", tokenizer_json, "-o", out
    )
    assert code == 0, err
    vocab = ts.Vocabulary.from_pretrained(tokenizer_json)
    for stem, text in [
        *((f"s{k}", t) for k, t in enumerate(EXACT_SCHEMAS)),
        ("s9", EXACT_SCHEMAS[0]),
    ]:
        code, stdout, _ = run_main(capsys, "inspect", out / f"{stem}.tsidx", "--json")
        header = json.loads(stdout)
        # (index files are built with the CLI's nesting bound, see AOT_MAX_NESTING_DEPTH)
        direct = ts.Grammar.from_json_schema(
            text, vocab, max_nesting_depth=cli.AOT_MAX_NESTING_DEPTH
        )
        assert header["source_hash"] == direct.source_hash, (stem, header["constraint"])
    code, stdout, _ = run_main(capsys, "inspect", out / "s0.tsidx", "--json")
    assert "1.00000000000000000001" in json.loads(stdout)["constraint"]


def test_registry_files_reach_the_compiler_as_text(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tokensieve as ts

    registry = tmp_path / "registry.json"
    registry.write_text('{"urn:a": ' + EXACT_SCHEMAS[0] + "}")
    schema = tmp_path / "s.json"
    schema.write_text('{"$ref": "urn:a"}')
    out = tmp_path / "s.tsidx"
    code, _, err = run_main(
        capsys, "compile", "--json-schema", schema, "--tokenizer", tokenizer_json, "-o", out,
        "--registry", registry,
    )  # fmt: skip
    assert code == 0, err
    code, stdout, _ = run_main(capsys, "inspect", out, "--json")
    vocab = ts.Vocabulary.from_pretrained(tokenizer_json)
    direct = ts.Grammar.from_json_schema(
        '{"$ref": "urn:a"}',
        vocab,
        registry=registry.read_text(),
        max_nesting_depth=cli.AOT_MAX_NESTING_DEPTH,
    )
    assert json.loads(stdout)["source_hash"] == direct.source_hash


def test_output_paths_of_the_wrong_kind_are_usage_errors(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for name in ("a", "b"):
        (schemas / f"{name}.json").write_text(json.dumps({"const": name}))
    taken = tmp_path / "taken"
    taken.write_text("x")
    code, _, err = run_main(
        capsys, "compile", "--json-schema", schemas, "--tokenizer", tokenizer_json, "-o", taken
    )
    assert code == 2 and f"-o {taken}: not a folder" in err, err
    code, _, err = run_main(
        capsys, "compile", "--regex", "a", "--tokenizer", tokenizer_json, "-o", schemas
    )
    assert code == 2 and f"-o {schemas}: a folder" in err, err


def test_registry_files_that_are_not_json_objects(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["compile", "--json-object", "--tokenizer", tokenizer_json, "-o", tmp_path / "o.tsidx"]
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    code, _, err = run_main(capsys, *base, "--registry", deep)
    assert code == 2 and f"--registry {deep}: not JSON: nested too deeply" in err, err
    code, _, err = run_main(capsys, *base, "--registry", "/dev/zero")  # endless
    assert code == 2 and "--registry /dev/zero: is not a regular file" in err, err
    # a FIFO nobody writes to: refused at once (it was read, and waited on, forever)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    try:
        r = run_process(*base, "--registry", fifo, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("tokensieve compile --registry FIFO waited for a writer")
    assert r.returncode == 2 and f"--registry {fifo}: is not a regular file" in r.stderr


BAD_VALUES = ["", "-1", "0", "nan", "x" * 5000, "9" * 5000, "1e999", "\x00", "/dev/zero"]


def test_no_flag_value_gives_a_traceback(
    tokenizer_json: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every flag of `compile` with values of every wrong kind: an error message and exit code
    1 or 2 (or success), never an exception out of main."""
    monkeypatch.chdir(tmp_path)  # `-o 0` and the like write where they are
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for name in ("a", "b"):
        (schemas / f"{name}.json").write_text(json.dumps({"const": name}))
    taken = tmp_path / "taken"
    taken.write_text("x")
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, cli.argparse._SubParsersAction))
    flags = [
        a.option_strings[-1]
        for a in sub.choices["compile"]._actions
        if a.option_strings and a.nargs != 0 and a.option_strings[-1] != "--help"
    ]
    assert "--vocab-size" in flags and "--registry" in flags and "--output" in flags
    base = {
        "--json-schema": str(schemas),
        "--tokenizer": str(tokenizer_json),
        "--output": str(tmp_path / "out"),
    }
    for flag in flags:
        for value in [*BAD_VALUES, str(taken), str(schemas)]:
            args = {**base}
            if flag in ("--regex", "--choice", "--ebnf"):
                del args["--json-schema"]
            args[flag] = value
            argv = ["compile", *(x for kv in args.items() for x in kv)]
            try:
                code = cli.main(argv)
            except Exception as e:  # pragma: no cover - the failure being tested for
                pytest.fail(f"{flag} {value[:20]!r}: {type(e).__name__}: {e}")
            err = capsys.readouterr().err
            assert code in (0, 1, 2), (flag, value[:20], code)
            if code:
                assert "error" in err, (flag, value[:20], err)


# a^n b^n around an "x": context-free; its start rule is not root
GRAMMAR = '# nested\nroot ::= "y"\nnest ::= "a" nest "b" | "x"\n'


def test_a_grammar_compiles_to_an_index_that_round_trips(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tokensieve as ts
    from tokensieve.index_files import IndexDirectory

    path = tmp_path / "nest.gbnf"
    path.write_text(GRAMMAR)
    out = tmp_path / "indexes"
    out.mkdir()
    code, stdout, err = run_main(
        capsys, "compile", "--ebnf", path, "--start", "nest", "--max-stack-depth", "6",
        "--tokenizer", tokenizer_json, "--eos-token-id", "5", "-o", out / "nest.tsidx",
    )  # fmt: skip
    assert code == 0, err
    assert "automaton states" in stdout and "nest.tsidx" in stdout
    code, stdout, _ = run_main(capsys, "inspect", out / "nest.tsidx", "--json")
    header = json.loads(stdout)
    assert code == 0 and header["constraint_kind"] == "ebnf", header
    vocab = ts.Vocabulary.from_pretrained(tokenizer_json, eos_token_ids=[5])
    direct = ts.Grammar.from_ebnf(GRAMMAR, vocab, start="nest", max_stack_depth=6)
    assert header["source_hash"] == direct.source_hash
    loaded = ts.Grammar.load(out / "nest.tsidx", vocab)
    for text, ok in [("aaxbb", True), ("x", True), ("axbb", False), ("y", False)]:
        m = loaded.matcher()
        ids = [vocab_id(vocab, ch) for ch in text]
        assert (m.accept_tokens(ids) == len(ids) and m.is_accepting()) == ok, text
    # a server finds it by its constraint
    found = IndexDirectory(out, vocab).find("ebnf", GRAMMAR, start="nest", max_stack_depth=6)
    assert found is not None and found.source_hash == direct.source_hash
    # the text plain (inspect): the kind and the grammar
    code, stdout, _ = run_main(capsys, "inspect", out / "nest.tsidx")
    assert code == 0 and "ebnf" in stdout and "nest ::=" in stdout


LARK = 'start: "let" NAME ":" NAME | NAME ":" NAME\nNAME: /[a-z]+/\n%ignore ","\n'


def test_compile_lark(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer_json: Path
) -> None:
    """A Lark grammar compiles to an index file that keeps its lexer's semantics (a keyword
    is also a name where the parser allows both; skipped commas only between lexemes)."""
    import tokensieve as ts
    from tokensieve.index_files import IndexDirectory

    path = tmp_path / "let.lark"
    path.write_text(LARK)
    out = tmp_path / "indexes"
    out.mkdir()
    code, stdout, err = run_main(
        capsys, "compile", "--lark", path, "--tokenizer", tokenizer_json,
        "--eos-token-id", "5", "-o", out / "let.tsidx",
    )  # fmt: skip
    assert code == 0, err
    code, stdout, _ = run_main(capsys, "inspect", out / "let.tsidx", "--json")
    header = json.loads(stdout)
    assert code == 0 and header["constraint_kind"] == "lark", header
    vocab = ts.Vocabulary.from_pretrained(tokenizer_json, eos_token_ids=[5])
    direct = ts.Grammar.from_lark(LARK, vocab)
    assert header["source_hash"] == direct.source_hash
    loaded = ts.Grammar.load(out / "let.tsidx", vocab)
    for g in (loaded, direct):
        for text, ok in [("let,x:y", True), ("let:y", True), ("letx,:y", True), ("let", False),
                         (",let,x:y", False), ("let,x:y,", False)]:  # fmt: skip
            m = g.matcher()
            ids = [vocab_id(vocab, ch) for ch in text]
            assert (m.accept_tokens(ids) == len(ids) and m.is_accepting()) == ok, text
    found = IndexDirectory(out, vocab).find("lark", LARK)
    assert found is not None and found.source_hash == direct.source_hash


def test_compile_structural_tag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokenizer_json: Path
) -> None:
    """A structural tag file compiles to an index file a server finds by the tag; a tag that
    names a special token (a token atom) is a compile error that says so."""
    import tokensieve as ts
    from tokensieve.index_files import IndexDirectory

    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["a"],
            "tags": [
                {"begin": "ab", "content": {"type": "const_string", "value": "x"}, "end": "b"}
            ],
        },
    }
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tag))
    out = tmp_path / "indexes"
    out.mkdir()
    code, stdout, err = run_main(
        capsys, "compile", "--structural-tag", path, "--tokenizer", tokenizer_json,
        "--eos-token-id", "5", "-o", out / "tools.tsidx",
    )  # fmt: skip
    assert code == 0, err
    code, stdout, _ = run_main(capsys, "inspect", out / "tools.tsidx", "--json")
    assert code == 0 and json.loads(stdout)["constraint_kind"] == "structural_tag"
    vocab = ts.Vocabulary.from_pretrained(tokenizer_json, eos_token_ids=[5])
    loaded = IndexDirectory(out, vocab).find("structural_tag", tag)
    assert loaded is not None
    for text, ok in [("yabxb", True), ("y", True), ("yab", False), ("abb", False)]:
        m = loaded.matcher()
        ids = [vocab_id(vocab, ch) for ch in text]
        assert (m.accept_tokens(ids) == len(ids) and m.is_accepting()) == ok, text
    code, _, err = run_main(
        capsys, "compile", "--structural-tag", tmp_path / "missing.json",
        "--tokenizer", tokenizer_json, "--eos-token-id", "5", "-o", out / "x.tsidx",
    )  # fmt: skip
    assert code == 2 and "missing.json" in err


def vocab_id(vocab: Any, ch: str) -> int:
    return next(t for t in range(vocab.tokenizer_size) if vocab.token_bytes(t) == ch.encode())


@pytest.mark.parametrize(
    ("grammar", "extra", "code", "message"),
    [
        ('start: "a" | "b"\n%declare X\n', (), 1, "line 2, column 1: `%declare` is not supported"),
        ('root ::= "a" (\n', (), 1, "GrammarError"),
        ('root ::= "a"\n', ("--start", "nowhere"), 1, "nowhere"),
        ('root ::= "a"\n', ("--whitespace", "compact"), 1, "apply to JSON constraints only"),
        (None, (), 2, "--ebnf"),  # no such file
        (b"\xff\xfe", (), 2, "not UTF-8"),
    ],
)
def test_grammar_errors(
    tokenizer_json: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    grammar: str | bytes | None,
    extra: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    path = tmp_path / "g.gbnf"
    if isinstance(grammar, str):
        path.write_text(grammar)
    elif grammar is not None:
        path.write_bytes(grammar)
    got, _, err = run_main(
        capsys, "compile", "--ebnf", path, *extra, "--tokenizer", tokenizer_json,
        "-o", tmp_path / "g.tsidx",
    )  # fmt: skip
    assert got == code and message in err, (got, err)


def test_start_belongs_to_grammars(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(
        capsys, "compile", "--regex", "a+", "--start", "root", "--tokenizer", tokenizer_json,
        "-o", tmp_path / "r.tsidx",
    )  # fmt: skip
    assert code == 1 and "apply to grammars" in err, err


def test_the_installed_command_reports_usage_errors(tokenizer_json: Path, tmp_path: Path) -> None:
    r = run_process(
        "compile", "--regex", "a", "--tokenizer", tokenizer_json, "-o", tmp_path / "o.tsidx",
        "--vocab-size", "-5",
    )  # fmt: skip
    assert r.returncode == 2 and "argument --vocab-size" in r.stderr
    assert "Traceback" not in r.stderr


def test_index_files_take_their_own_nesting_bound(
    tokenizer_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index holds every state, so `compile` builds JSON constraints with
    max_nesting_depth=8 unless told otherwise, and the file's options (and constraint hash) say
    so; with --max-nesting-depth the file matches a grammar compiled with that value."""
    import tokensieve as ts

    vocab = ts.Vocabulary.from_pretrained(tokenizer_json)
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "object", "properties": {"a": {"type": "integer"}}}')
    for flags, depth in [([], cli.AOT_MAX_NESTING_DEPTH), (["--max-nesting-depth", "3"], 3)]:
        out = tmp_path / f"s{depth}.tsidx"
        code, _, err = run_main(
            capsys,
            "compile",
            "--json-schema",
            schema,
            "--tokenizer",
            tokenizer_json,
            "-o",
            out,
            *flags,
        )
        assert code == 0, err
        code, stdout, _ = run_main(capsys, "inspect", out, "--json")
        header = json.loads(stdout)
        assert json.loads(header["options"])["max_nesting_depth"] == str(depth)
        direct = ts.Grammar.from_json_schema(schema.read_text(), vocab, max_nesting_depth=depth)
        assert header["source_hash"] == direct.source_hash
        # the library's default (64) is another constraint
        assert (
            header["source_hash"]
            != ts.Grammar.from_json_schema(schema.read_text(), vocab).source_hash
        )
