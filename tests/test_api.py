"""The Python API: vocabularies, grammars, matchers, bitmask buffers and their errors."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from shared_data import require, tokenizer_dir

import tokensieve as ts


def shared_tokenizer(name: str) -> Path:
    path = tokenizer_dir(name)
    require(path / "tokenizer.json", "this real-vocabulary test")
    return path


def allowed(row: np.ndarray) -> set[int]:
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


def small_vocab(vocab_size: int | None = None) -> ts.Vocabulary:
    tokens = [b"a", b"b", b"ab", b"1", b"2", b"12", b"<eos>", b"<ctl>", b'"', b" "]
    return ts.Vocabulary(tokens, eos_token_ids=[6], special_token_ids=[7], vocab_size=vocab_size)


# --- Vocabulary -------------------------------------------------------------------------------


def test_vocabulary_padding_and_specials() -> None:
    v = small_vocab(vocab_size=70)
    assert v.vocab_size == 70 and len(v) == 70
    assert v.tokenizer_size == 10
    assert v.eos_token_ids == [6]
    assert v.special_token_ids == [6, 7]
    assert v.token_bytes(0) == b"a"
    assert v.token_bytes(6) is None and v.token_bytes(7) is None and v.token_bytes(50) is None
    assert v.token_bytes(-1) is None and v.token_bytes(10**12) is None
    g = ts.Grammar.from_regex(r"[\s\S]*", v)
    bm = ts.allocate_token_bitmask(1, v.vocab_size)
    g.matcher().fill_next_token_bitmask(bm)
    assert allowed(np.asarray(bm)[0]) == {0, 1, 2, 3, 4, 5, 6, 8, 9}


def test_vocabulary_truncation_rules() -> None:
    # A special token past the model's vocab_size is dropped; a regular one is an error.
    toks = [b"a", b"<eos>", b"<sp>"]
    v = ts.Vocabulary(toks, eos_token_ids=[1], special_token_ids=[2], vocab_size=2)
    assert v.vocab_size == 2
    with pytest.raises(ts.VocabularyError, match="regular token"):
        ts.Vocabulary(toks, eos_token_ids=[1], vocab_size=2)
    with pytest.raises(ts.VocabularyError, match="EOS"):
        ts.Vocabulary(toks, eos_token_ids=[])
    with pytest.raises(ts.VocabularyError, match="outside"):
        ts.Vocabulary(toks, eos_token_ids=[5])


def test_vocabulary_several_eos() -> None:
    v = ts.Vocabulary([b"x", b"<e1>", b"<e2>"], eos_token_ids=[2, 1])
    assert v.eos_token_ids == [1, 2]
    m = ts.Grammar.from_regex("x", v).matcher()
    assert m.accept_token(0)
    bm = ts.allocate_token_bitmask(1, v.vocab_size)
    m.fill_next_token_bitmask(bm)
    assert allowed(np.asarray(bm)[0]) == {1, 2}
    assert m.accept_token(2) and m.is_finished()


def test_tekken_vocabulary_is_always_available() -> None:
    v = ts.Vocabulary.from_tekken()
    assert v.vocab_size == 131072
    assert v.eos_token_ids == [2]
    assert all(v.token_bytes(i) is None for i in range(1000))
    assert v.token_bytes(1000) == b"\x00"


@pytest.mark.parametrize(
    "name,kind,size,eos,hello",
    [
        ("llama3", "byte_level", 128257, [128001], [9906, 1917]),
        ("qwen2", "byte_level", 151936, [151643], [9707, 1879]),
        ("gpt2", "byte_level", 50257, [50256], [15496, 995]),
        ("llama2", "sentencepiece", 32000, [2], [15043, 3186]),
        ("phi3", "sentencepiece", 32064, [32000], None),
    ],
)
def test_real_vocabularies(
    name: str, kind: str, size: int, eos: list[int], hello: list[int] | None
) -> None:
    path = shared_tokenizer(name)
    v = ts.Vocabulary.from_pretrained(path)
    assert v.kind == kind
    assert v.vocab_size == size
    assert v.eos_token_ids == eos
    if hello is not None:
        text = b"".join(v.token_bytes(t) or b"?" for t in hello)
        assert text.strip() == b"Hello world"
    # Every special id is refused by a grammar that accepts any text.
    g = ts.Grammar.from_regex(r"(?s:.)*", v)
    bm = ts.allocate_token_bitmask(1, v.vocab_size)
    g.matcher().fill_next_token_bitmask(bm)
    ok = allowed(np.asarray(bm)[0])
    for s in v.special_token_ids:
        assert (s in ok) == (s in eos)


def test_from_pretrained_accepts_tokenizer_objects_and_files() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    path = shared_tokenizer("llama3")
    a = ts.Vocabulary.from_pretrained(path / "tokenizer.json")
    b = ts.Vocabulary.from_pretrained(tokenizers.Tokenizer.from_file(str(path / "tokenizer.json")))
    assert a.fingerprint == b.fingerprint
    # The model's logits width may be smaller: the trailing added special token is dropped.
    c = ts.Vocabulary.from_pretrained(path, vocab_size=128256)
    assert c.vocab_size == 128256 and c.fingerprint != a.fingerprint
    # ... but a regular token cannot be dropped.
    with pytest.raises(ts.VocabularyError, match="regular token"):
        ts.Vocabulary.from_pretrained(path, vocab_size=1000)
    with pytest.raises(FileNotFoundError):
        ts.Vocabulary.from_pretrained(path / "missing")
    with pytest.raises(TypeError):
        ts.Vocabulary.from_pretrained(42)


def test_sentencepiece_byte_fallback() -> None:
    v = ts.Vocabulary.from_pretrained(shared_tokenizer("llama2"))
    nl = [i for i in range(v.vocab_size) if v.token_bytes(i) == b"\n"]
    assert nl, "<0x0A> decodes to a newline"
    assert v.token_bytes(29871) == b" "  # '▁'


def test_tiktoken_rank_file(tmp_path: Path) -> None:
    import base64

    f = tmp_path / "r.tiktoken"
    f.write_text(
        "".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate([b"a", b"b", b"ab"]))
    )
    v = ts.Vocabulary.from_tiktoken(f, eos_token_ids=[3], vocab_size=4)
    assert v.token_bytes(2) == b"ab" and v.vocab_size == 4


# --- Grammar and matcher ----------------------------------------------------------------------


def test_regex_errors_name_the_construct_and_offset() -> None:
    v = small_vocab()
    with pytest.raises(ts.RegexError, match="look-around") as e:
        ts.Grammar.from_regex("ab(?=c)", v)
    assert e.value.offset == 2
    with pytest.raises(ts.RegexError, match="backreference"):
        ts.Grammar.from_regex(r"(a)\1", v)
    with pytest.raises(ts.RegexError, match=r"\\b"):
        ts.Grammar.from_regex(r"a\bb", v)
    with pytest.raises(ts.RegexError) as e:
        ts.Grammar.from_regex("a(b", v)
    assert e.value.offset == 1
    assert isinstance(e.value, ts.TokensieveError)


def test_budgets() -> None:
    v = small_vocab()
    with pytest.raises(ts.BudgetError, match="max_states"):
        g = ts.Grammar.from_regex("[ab]{0,200}", v, max_states=5)
        m = g.matcher()
        for _ in range(50):
            m.accept_token(0)
    # repetitions of up to 32 are copied (larger ones are counters): 27,000 copies
    with pytest.raises(ts.BudgetError):
        ts.Grammar.from_regex("(?:(?:[ab]{30}){30}){30}", v, max_nfa_bytes=1 << 16)
    # a counter keeps a large bound small, and exact
    g = ts.Grammar.from_regex("(?:[ab]{100}){100}", v, max_nfa_bytes=1 << 16)
    m = g.matcher()
    assert m.accept_tokens([2] * 4_999) == 4_999  # "ab" × 4,999: 9,998 characters
    assert not m.is_accepting()
    assert m.accept_token(0) and m.accept_token(1) and m.is_accepting()  # 10,000
    assert not m.accept_token(0)
    with pytest.raises(ValueError):
        ts.Grammar.from_regex("a", v, max_compile_seconds=-1)


def test_unspellable_state_is_an_error_not_an_empty_mask() -> None:
    v = small_vocab()
    with pytest.raises(ts.UnspellableError, match="z"):
        ts.Grammar.from_regex("z", v)


def test_matcher_lifecycle() -> None:
    v = small_vocab()
    g = ts.Grammar.from_regex("(ab)+", v)
    m = g.matcher()
    bm = np.zeros((2, ts.bitmask_words(v.vocab_size)), dtype=np.int32)
    m.fill_next_token_bitmask(bm, 1)
    assert allowed(bm[1]) == {0, 2} and not bm[0].any()
    assert not m.accept_token(1) and m.state == g.matcher().state
    assert not m.accept_token(6)  # EOS not allowed yet
    assert not m.accept_token(7)  # control token
    assert not m.accept_token(-3) and not m.accept_token(10**15)
    assert m.accept_tokens([0, 1, 2, 3]) == 3
    assert m.is_accepting() and not m.is_finished()
    assert m.accept_token(6) and m.is_finished()
    m.fill_next_token_bitmask(bm, 0)
    assert allowed(bm[0]) == {6}
    assert m.accept_token(6) and m.is_finished()
    assert not m.accept_token(0)
    m.rollback(2)
    assert not m.is_finished() and m.is_accepting()
    with pytest.raises(ValueError, match="roll back"):
        m.rollback(99)
    m.reset()
    assert m.history_len == 0 and not m.is_accepting()
    bounded = g.matcher(max_rollback=1)
    assert bounded.accept_tokens([0, 1, 2]) == 3
    assert bounded.history_len == 1
    with pytest.raises(ValueError, match="max_rollback=1"):
        bounded.rollback(2)


def test_precompute_matches_lazy_masks() -> None:
    v = small_vocab()
    lazy = ts.Grammar.from_regex(r"(a|b)*12?", v)
    eager = ts.Grammar.from_regex(r"(a|b)*12?", v)
    stats = eager.precompute()
    assert stats["precomputed"] and stats["states"] >= 2 and stats["distinct_masks"] >= 2
    words = ts.bitmask_words(v.vocab_size)
    for seq in ([], [0], [2, 1], [3], [5], [0, 3, 4]):
        a, b = lazy.matcher(), eager.matcher()
        assert a.accept_tokens(seq) == b.accept_tokens(seq) == len(seq)
        x = np.zeros((1, words), np.int32)
        y = np.zeros((1, words), np.int32)
        a.fill_next_token_bitmask(x)
        b.fill_next_token_bitmask(y)
        np.testing.assert_array_equal(x, y)


def test_grammar_is_shared_across_threads() -> None:
    v = small_vocab()
    g = ts.Grammar.from_regex(r"[ab12]{0,100}", v)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            m = g.matcher()
            bm = np.zeros((1, ts.bitmask_words(v.vocab_size)), np.int32)
            for i in range(40):
                m.fill_next_token_bitmask(bm)
                assert m.accept_token(i % 6)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# --- Bitmask buffers --------------------------------------------------------------------------


def test_bitmask_validation() -> None:
    v = small_vocab(vocab_size=40)
    m = ts.Grammar.from_regex("a", v).matcher()
    words = ts.bitmask_words(40)
    assert words == 2
    with pytest.raises(ValueError, match="int32"):
        m.fill_next_token_bitmask(np.zeros((1, words), np.int64))
    with pytest.raises(ValueError, match="needs 2"):
        m.fill_next_token_bitmask(np.zeros((1, 3), np.int32))
    with pytest.raises(ValueError, match="contiguous"):
        m.fill_next_token_bitmask(np.zeros((1, 4), np.int32)[:, ::2])
    with pytest.raises(ValueError, match="out of range"):
        m.fill_next_token_bitmask(np.zeros((1, words), np.int32), 1)
    ro = np.zeros((1, words), np.int32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        m.fill_next_token_bitmask(ro)
    with pytest.raises(ValueError, match="numpy array or a torch tensor"):
        m.fill_next_token_bitmask([[0, 0]])
    bm = np.zeros((3, words), np.int32)
    with pytest.raises(ValueError, match="duplicates"):
        ts.fill_next_token_bitmask([m, m], bm, [1, 1])
    with pytest.raises(ValueError, match="out of range"):
        ts.fill_next_token_bitmask([m], bm, [3])
    with pytest.raises(ValueError, match="indices"):
        ts.fill_next_token_bitmask([m, m], bm, [0])
    with pytest.raises(ValueError, match="only 3 rows"):
        ts.fill_next_token_bitmask([m] * 4, bm)
    with pytest.raises(ValueError):
        ts.allocate_token_bitmask(0, 10)
    # 1-D buffers are one row; bits past vocab_size stay zero.
    row = np.full(words, -1, np.int32)
    ts.Grammar.from_regex(r"[\s\S]*", v).matcher().fill_next_token_bitmask(row)
    assert max(allowed(row)) < 40


def test_batch_fill_with_mixed_grammars_and_vocab_check() -> None:
    v = small_vocab()
    other = small_vocab(vocab_size=100)
    m1 = ts.Grammar.from_regex("a+", v).matcher()
    m2 = ts.Grammar.from_regex("1|2", v).matcher()
    bm = np.full((3, ts.bitmask_words(v.vocab_size)), -1, np.int32)
    ts.fill_next_token_bitmask([m1, m2], bm, [2, 0])
    assert allowed(bm[2]) == {0} and allowed(bm[0]) == {3, 4} and (bm[1] == -1).all()
    m3 = ts.Grammar.from_regex("a", other).matcher()
    with pytest.raises(ValueError, match="vocab_size=100"):
        ts.fill_next_token_bitmask([m1, m3], bm)


def test_torch_bitmask_is_accepted() -> None:
    torch = pytest.importorskip("torch")
    v = small_vocab()
    bm = ts.allocate_token_bitmask(2, v.vocab_size)
    assert isinstance(bm, torch.Tensor) and bm.dtype == torch.int32
    assert bm.shape == (2, 1) and (bm == -1).all()
    m = ts.Grammar.from_regex("ab", v).matcher()
    ts.fill_next_token_bitmask([m], bm, [1])
    assert allowed(bm[1].numpy()) == {0, 2}
    with pytest.raises(ValueError, match="int32"):
        m.fill_next_token_bitmask(torch.zeros((1, 1), dtype=torch.int64))
    with pytest.raises(ValueError, match="contiguous"):
        m.fill_next_token_bitmask(torch.zeros((2, 2), dtype=torch.int32).t()[:1])


def test_grammar_repr_shows_kind_and_source() -> None:
    v = small_vocab()
    r = repr(ts.Grammar.from_regex("[ab]+", v))
    assert r.startswith('Grammar(kind="regex", source="[ab]+", dfa_states='), r
    v = ts.Vocabulary([bytes([i]) for i in range(256)] + [b"<eos>"], eos_token_ids=[256])
    schema = {"type": "object", "properties": {"a": {"type": "string", "not": {"pattern": "x"}}}}
    r = repr(ts.Grammar.from_json_schema(schema, v, whitespace="compact"))
    assert r.startswith('Grammar(kind="json_schema", source="{'), r
    assert "tokensieve:" not in r and "\\0" not in r and "\\u{0}" not in r, r
    long = {"enum": ["x" * 50 for _ in range(20)]}
    r = repr(ts.Grammar.from_json_schema(long, v))
    assert "..." in r and len(r) < 400, r
