"""Index files: save → load round trips, refusals, and the `tokensieve` CLI in a subprocess."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokensieve as ts

TOKENS = [b"a", b"b", b"ab", b"1", b"2", b"12", b"-", b".", b"@", b"<ctl>", b"</s>", b"x"]


def vocab(**kw: object) -> ts.Vocabulary:
    return ts.Vocabulary(TOKENS, eos_token_ids=[10], special_token_ids=[9], vocab_size=70, **kw)  # type: ignore[arg-type]


def all_reachable_masks(g: ts.Grammar, words: int, depth: int = 6) -> dict[tuple[int, ...], bytes]:
    """Mask after every token sequence up to `depth` tokens (breadth first)."""
    out: dict[tuple[int, ...], bytes] = {}
    frontier: list[tuple[int, ...]] = [()]
    for _ in range(depth):
        nxt = []
        for seq in frontier:
            m = g.matcher()
            assert m.accept_tokens(list(seq)) == len(seq)
            bm = np.zeros(words, np.int32)
            m.fill_next_token_bitmask(bm)
            out[seq] = bm.tobytes()
            bits = np.unpackbits(bm.view(np.uint8), bitorder="little")
            nxt += [seq + (int(t),) for t in np.flatnonzero(bits)]
        frontier = nxt[:400]
    return out


@pytest.mark.parametrize(
    "pattern", [r"(ab|a)+-?[12]*", r"[ab]*@[ab]+\.(12|x)", r"-?(0|[12][12]*)(\.[12]+)?", r"x?"]
)
def test_round_trip_identical_masks(tmp_path: Path, pattern: str) -> None:
    v = vocab()
    g = ts.Grammar.from_regex(pattern, v)
    path = tmp_path / "g.tsidx"
    g.save(path)
    loaded = ts.Grammar.load(path, v)
    assert loaded.constraint == pattern and loaded.constraint_kind == "regex"
    assert loaded.source_hash == g.source_hash
    assert loaded.stats()["precomputed"]
    words = ts.bitmask_words(v.vocab_size)
    assert all_reachable_masks(g, words) == all_reachable_masks(loaded, words)


def test_round_trip_real_vocabulary() -> None:
    v = ts.Vocabulary.from_tekken()
    g = ts.Grammar.from_regex(r'\{"id": [0-9]{1,4}, "tag": "[a-z]{1,6}"\}', v)
    data = g.to_bytes()
    loaded = ts.Grammar.from_bytes(data, v)
    rng = random.Random(0)
    words = ts.bitmask_words(v.vocab_size)
    for _ in range(20):
        a, b = g.matcher(), loaded.matcher()
        x = np.zeros(words, np.int32)
        y = np.zeros(words, np.int32)
        while not a.is_finished():
            a.fill_next_token_bitmask(x)
            b.fill_next_token_bitmask(y)
            np.testing.assert_array_equal(x, y)
            bits = np.flatnonzero(np.unpackbits(x.view(np.uint8), bitorder="little"))
            t = int(rng.choice(bits))
            assert a.accept_token(t) and b.accept_token(t)


def test_load_refuses_other_vocab_newer_version_truncated_corrupted(tmp_path: Path) -> None:
    v = vocab()
    data = ts.Grammar.from_regex(r"(ab)+", v).to_bytes()
    other = ts.Vocabulary(TOKENS, eos_token_ids=[10], special_token_ids=[9], vocab_size=71)
    with pytest.raises(ValueError, match="another vocabulary"):
        ts.Grammar.from_bytes(data, other)
    newer = bytearray(data)
    newer[8] = 99
    with pytest.raises(ValueError, match="newer"):
        ts.Grammar.from_bytes(bytes(newer), v)
    with pytest.raises(ValueError, match="not a tokensieve index"):
        ts.Grammar.from_bytes(b"hello world", v)
    rng = random.Random(1)
    for _ in range(300):
        c = bytearray(data)
        kind = rng.randrange(3)
        if kind == 0:
            c = c[: rng.randrange(len(c))]
        elif kind == 1:
            for _ in range(rng.randint(1, 4)):
                c[rng.randrange(len(c))] ^= rng.randint(1, 255)
        else:
            c[rng.randrange(len(c)) :] = bytes(
                rng.randrange(256) for _ in range(rng.randint(1, 40))
            )
        if bytes(c) == data:
            continue
        with pytest.raises(ValueError):
            ts.Grammar.from_bytes(bytes(c), v)
    with pytest.raises(OSError):
        ts.Grammar.load(tmp_path / "missing.tsidx", v)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokensieve.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    vocab = {"a": 0, "b": 1, "1": 2, "2": 3, "-": 4, "</s>": 5, "x": 6, "y": 7}
    for ch in '"{}[]:, 03456789.e+tfrunls\\':
        vocab.setdefault(ch, len(vocab))
    doc = {"model": {"type": "BPE", "vocab": vocab, "merges": []}, "decoder": None}
    (folder / "tokenizer.json").write_text(json.dumps(doc))
    return folder / "tokenizer.json"


def test_cli_compile_and_inspect(tmp_path: Path, tokenizer_json: Path) -> None:
    out = tmp_path / "r.tsidx"
    r = cli(
        "compile", "--regex", "[ab]+-[12]{2}", "--tokenizer", str(tokenizer_json), "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    assert "states" in r.stdout and "distinct masks" in r.stdout
    r = cli("inspect", str(out), "--json")
    assert r.returncode == 0, r.stderr
    header = json.loads(r.stdout)
    assert header["constraint"] == "[ab]+-[12]{2}" and header["format_version"] == 1
    v = ts.Vocabulary.from_pretrained(tokenizer_json)
    assert header["vocab_fingerprint"] == v.fingerprint
    g = ts.Grammar.load(out, v)
    m = g.matcher()
    assert m.accept_tokens([0, 1, 4, 2, 3]) == 5 and m.is_accepting()
    r = cli("inspect", str(out))
    assert r.returncode == 0 and "distinct_masks" in r.stdout


def test_cli_exit_codes(tmp_path: Path, tokenizer_json: Path) -> None:
    out = str(tmp_path / "o.tsidx")
    assert (
        cli(
            "compile", "--regex", "a(?=b)", "--tokenizer", str(tokenizer_json), "-o", out
        ).returncode
        == 1
    )
    r = cli("compile", "--regex", "z", "--tokenizer", str(tokenizer_json), "-o", out)
    assert r.returncode == 1 and "z" in r.stderr
    assert cli("compile", "--tokenizer", str(tokenizer_json), "-o", out).returncode == 2
    assert (
        cli("compile", "--regex", "a", "--tokenizer", str(tmp_path / "nope"), "-o", out).returncode
        == 2
    )
    assert cli("bogus").returncode == 2
    bad = tmp_path / "bad.tsidx"
    bad.write_bytes(b"garbage")
    r = cli("inspect", str(bad))
    assert r.returncode == 1 and "not a tokensieve index" in r.stderr
    assert cli("inspect", str(tmp_path / "missing")).returncode == 2


def test_json_schema_round_trip_keeps_kind_and_property_order(tmp_path: Path) -> None:
    v = ts.Vocabulary.from_tekken()
    schema = {
        "type": "object",
        "properties": {
            "z": {"type": "integer", "minimum": 0, "maximum": 99},
            "a": {"enum": ["x", "y"]},
        },
        "required": ["z", "a"],
        "additionalProperties": False,
    }
    g = ts.Grammar.from_json_schema(schema, v, whitespace="compact")
    path = tmp_path / "s.tsidx"
    g.save(path)
    header = ts._core.read_index_header(path)
    assert header["constraint_kind"] == "json_schema"
    assert list(json.loads(header["constraint"])["properties"]) == ["z", "a"]
    assert json.loads(header["options"])["whitespace"] == "compact"
    loaded = ts.Grammar.load(path, v)
    assert loaded.source_hash == g.source_hash
    other = ts.Grammar.from_json_schema(schema, v)  # different whitespace option
    assert other.source_hash != g.source_hash
    words = ts.bitmask_words(v.vocab_size)
    rng = random.Random(3)
    for _ in range(10):
        a, b = g.matcher(), loaded.matcher()
        x, y = np.zeros(words, np.int32), np.zeros(words, np.int32)
        text = b""
        while not a.is_finished():
            a.fill_next_token_bitmask(x)
            b.fill_next_token_bitmask(y)
            np.testing.assert_array_equal(x, y)
            t = int(rng.choice(np.flatnonzero(np.unpackbits(x.view(np.uint8), bitorder="little"))))
            assert a.accept_token(t) and b.accept_token(t)
            text += v.token_bytes(t) or b""
        doc = json.loads(text)
        assert list(doc) == ["z", "a"] and 0 <= doc["z"] <= 99


def test_cli_compiles_schema_files_folders_and_jsonl(tmp_path: Path, tokenizer_json: Path) -> None:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "one.json").write_text(json.dumps({"enum": ["a", "b"]}))
    (schemas / "two.json").write_text(json.dumps({"type": "integer", "minimum": 1, "maximum": 12}))
    r = cli(
        "compile",
        "--json-schema",
        str(schemas / "one.json"),
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(tmp_path / "one.tsidx"),
    )
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    r = cli(
        "compile",
        "--json-schema",
        str(schemas),
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(out),
        "--jobs",
        "2",
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["one.tsidx", "two.tsidx"]
    jl = tmp_path / "s.jsonl"
    jl.write_text(
        json.dumps({"id": "x1", "schema": {"const": "ab"}})
        + "\n"
        + json.dumps({"id": "bad", "schema": {"type": "array", "uniqueItems": True}})
        + "\n"
    )
    r = cli(
        "compile",
        "--json-schema",
        str(jl),
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(tmp_path / "jl"),
    )
    assert r.returncode == 1  # one schema uses an unsupported keyword
    assert "uniqueItems" in r.stderr and (tmp_path / "jl" / "x1.tsidx").is_file()
    r = cli(
        "compile",
        "--json-schema",
        str(jl),
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(tmp_path / "jl2"),
        "--lenient",
    )
    assert r.returncode == 0, r.stderr
    r = cli(
        "compile",
        "--choice",
        "ab",
        "ba",
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(tmp_path / "c.tsidx"),
    )
    assert r.returncode == 0, r.stderr
    r = cli(
        "compile",
        "--json-object",
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(tmp_path / "o.tsidx"),
        "--whitespace",
        "compact",
    )
    assert r.returncode == 0, r.stderr
    assert (
        cli(
            "compile",
            "--json-schema",
            str(tmp_path / "missing.json"),
            "--tokenizer",
            str(tokenizer_json),
            "-o",
            str(tmp_path / "m"),
        ).returncode
        == 2
    )


def test_constraint_hash_matches_compiled_grammars() -> None:
    v = vocab()
    schema = {"type": "object", "properties": {"b": {"enum": ["1"]}, "a": {"enum": ["2"]}}}
    g = ts.Grammar.from_json_schema(
        schema, vocab=ts.Vocabulary.from_tekken(), whitespace="compact", max_states=5000
    )
    assert ts._core.constraint_hash("json_schema", schema, whitespace="compact") == g.source_hash
    assert (
        ts._core.constraint_hash("json_schema", json.dumps(schema), whitespace="compact")
        == g.source_hash
    )
    reordered = {"type": "object", "properties": {"a": {"enum": ["2"]}, "b": {"enum": ["1"]}}}
    assert ts._core.constraint_hash("json_schema", reordered, whitespace="compact") != g.source_hash
    assert ts._core.constraint_hash("json_schema", schema) != g.source_hash
    r = ts.Grammar.from_regex("(ab)+", v)
    assert ts._core.constraint_hash("regex", "(ab)+") == r.source_hash
    c = ts.Grammar.from_choice(["ab", "ba"], v)
    assert ts._core.constraint_hash("choice", ["ab", "ba"]) == c.source_hash
    with pytest.raises(ValueError, match="unknown constraint kind"):
        ts._core.constraint_hash("grammar", "x")


def test_index_directory_and_vllm_cache_use_precompiled_files(tmp_path: Path) -> None:
    from tokensieve.index_files import IndexDirectory
    from tokensieve.vllm import constraints as vc

    v = vocab()
    ts.Grammar.from_regex("(ab)+", v).save(tmp_path / "r.tsidx")
    ts.Grammar.from_regex(
        "x+", vocab_other := ts.Vocabulary(TOKENS, eos_token_ids=[10], vocab_size=71)
    ).save(tmp_path / "other-vocab.tsidx")
    (tmp_path / "broken.tsidx").write_bytes(b"nope")
    d = IndexDirectory(tmp_path, v)
    assert len(d) == 1 and [p.name for p, _ in d.skipped] == ["broken.tsidx"]
    g = d.find("regex", "(ab)+")
    assert g is not None and g.stats()["precomputed"]
    assert d.find("regex", "(ab)*") is None
    assert IndexDirectory(tmp_path, vocab_other).find("regex", "x+") is not None
    vc.set_index_directory(tmp_path)
    try:
        cache = vc.GrammarCache()
        got = cache.get(vc.Constraint.make("regex", "(ab)+"), v)
        assert got.stats()["precomputed"]  # loaded from the file, not compiled lazily
        assert not cache.get(vc.Constraint.make("regex", "ab"), v).stats()["precomputed"]
    finally:
        vc.set_index_directory(None)


def test_cli_registry(tmp_path: Path, tokenizer_json: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"$ref": "https://example.com/d.json#/$defs/x"}))
    base = ["compile", "--json-schema", str(schema), "--tokenizer", str(tokenizer_json)]
    r = cli(*base, "-o", str(tmp_path / "a.tsidx"))
    assert r.returncode == 1 and "registry" in r.stderr
    reg = tmp_path / "reg.json"
    reg.write_text(json.dumps({"https://example.com/d.json": {"$defs": {"x": {"const": "ab"}}}}))
    r = cli(*base, "--registry", str(reg), "-o", str(tmp_path / "b.tsidx"))
    assert r.returncode == 0, r.stderr
    r = cli(*base, "--registry", str(tmp_path / "missing.json"), "-o", str(tmp_path / "c.tsidx"))
    assert r.returncode == 2 and "--registry" in r.stderr


def test_cli_ahead_of_time_state_budget(tmp_path: Path, tokenizer_json: Path) -> None:
    # "an a 17 symbols from the end": a complete DFA of 2^18 states, above a lazy grammar's
    # default budget (100,000) and within the ahead-of-time default (1,000,000)
    pattern = "(a|b)*a(a|b){17}"
    out = tmp_path / "big.tsidx"
    r = cli("compile", "--regex", pattern, "--tokenizer", str(tokenizer_json), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split(": ")[1].split(" states")[0]) > 2**18 - 1
    r = cli(
        "compile",
        "--regex",
        pattern,
        "--tokenizer",
        str(tokenizer_json),
        "-o",
        str(out),
        "--max-states",
        "100000",
    )
    assert r.returncode == 1 and "max_states" in r.stderr + r.stdout


def test_cli_ahead_of_time_automaton_memory_budget(tmp_path: Path, tokenizer_json: Path) -> None:
    # 4,375 copies of Unicode \w: more than a lazy grammar's 64 MiB of automaton while building,
    # within the ahead-of-time default (1 GiB). A small state budget then stops the build quickly,
    # so the error says which budget was reached first. (Nested repetitions of up to 32 are
    # copied; one repetition of 4,000 would be a counter, one copy of \w.)
    pattern = r"(?:(?:\w{25}){25}){7}"
    with pytest.raises(ts.BudgetError, match="max_nfa_bytes"):
        ts.Grammar.from_regex(pattern, ts.Vocabulary.from_pretrained(tokenizer_json))
    out = tmp_path / "wide.tsidx"
    args = ["compile", "--regex", pattern, "--tokenizer", str(tokenizer_json), "-o", str(out)]
    r = cli(*args, "--max-states", "1000")
    assert r.returncode == 1 and "(max_states)" in r.stderr + r.stdout, r.stderr
    r = cli(*args, "--max-states", "1000", "--max-nfa-bytes", str(64 << 20))
    assert r.returncode == 1 and "max_nfa_bytes" in r.stderr + r.stdout, r.stderr


def test_cli_every_option_has_a_flag() -> None:
    """Each compile option of the core can be given to `tokensieve compile`."""
    from tokensieve import cli as cli_module

    r = subprocess.run(
        [sys.executable, "-m", "tokensieve.cli", "compile", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "max_stack_depth" in cli_module.OPTION_NAMES
    for name in cli_module.OPTION_NAMES:
        assert "--" + name.replace("_", "-") in r.stdout, name


def test_cli_recursive_schema(tmp_path: Path, tokenizer_json: Path) -> None:
    # two recursive call sites: every stack up to the bound is a state of its own, so the
    # complete automaton needs recursion unrolled or a small stack bound
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}},
                "additionalProperties": False,
            }
        )
    )
    base = ["compile", "--json-schema", str(schema), "--tokenizer", str(tokenizer_json)]
    r = cli(*base, "-o", str(tmp_path / "a.tsidx"), "--max-states", "20000")
    assert r.returncode == 1 and "max_stack_depth" in r.stderr + r.stdout
    for extra in (["--recursion", "unroll"], ["--max-stack-depth", "3"]):
        r = cli(*base, "-o", str(tmp_path / "b.tsidx"), *extra)
        assert r.returncode == 0, r.stderr
