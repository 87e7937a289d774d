r"""Exact masks: every bit of tokensieve's token mask checked against independent oracles.

For each regex and each real vocabulary, the matcher is driven along sample strings that fully
match, and at each step the mask is compared, token by token over the whole vocabulary, with what
the PyPI ``regex`` module says: token ``t`` may follow the output ``prefix`` iff
``regex.fullmatch(pattern, prefix + text(t), partial=True)`` matches, i.e. the text is a prefix of
some full match. EOS may follow iff ``regex.fullmatch(pattern, prefix)`` matches; ``interegular``
(an independent regex -> FSM library) is a second oracle for that wherever it shares the
dialect. Special tokens must never be allowed. Zero differences are allowed.

The oracle works on text, while tokens are bytes and may split a character. A byte string
``prefix + token`` is split into a decodable head and an incomplete last character (anything
else that is not UTF-8 is rejected: no match of a Unicode regex contains it). A token that ends
mid-character is allowed iff some character whose UTF-8 encoding starts with those bytes
continues the head, tried with one representative per interval of code points on which every
character predicate the pattern uses is constant (computed with the ``regex`` module over all
code points; ``test_representatives_are_exact`` checks the intervals against exhaustive scans).

Two oracle workarounds, both keeping the language and neither consulting tokensieve:
- lazy quantifiers are made greedy before the ``regex`` module sees them (its partial matching
  mishandles them, see ``greedy_equivalent``);
- tokensieve's Unicode tables and the ``regex`` module's may be of different Unicode versions.
  For patterns that use Unicode data (``\p{..}``, ``\w``, ``\d``, ``(?i)``), a token whose
  verdict hinges on a character assigned or recategorised between the versions (see
  ``unicode_drift``) is left out of the comparison; a step with over 1% such tokens fails.

Speed: "is a prefix of a match" is prefix-closed, so tokens are grouped by their first character,
and a group is dropped when prefix + that character already fails (non-ASCII first characters
are tried one interval at a time first); ``test_first_char_grouping_is_exact`` checks these
shortcuts against the plain per-token loop. One vocabulary (llama3 when ../shared is present,
else Tekken) gets every step of every sample; the others get the first step, the final steps and
a few random middle steps, while the cheap checks (EOS bit, ``is_accepting``, special tokens,
the sample's next token in the mask and accepted) run at every step everywhere.
"""

from __future__ import annotations

import bisect
import functools
import random
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import interegular
import numpy as np
import pytest
import regex
from shared_data import TOKENIZERS_DIR as SHARED_TOKENIZERS  # noqa: E402

import tokensieve as ts

HF_VOCABS = ("llama3", "qwen2", "llama2")
VOCAB_NAMES = (*HF_VOCABS, "tekken")
FULL_SWEEP_VOCAB = (
    "llama3" if (SHARED_TOKENIZERS / "llama3" / "tokenizer.json").is_file() else "tekken"
)
RANDOM_MIDDLE_STEPS = 2  # per (regex, vocabulary) on the vocabularies without the full sweep
MAX_REPORTED = 25


@dataclass(frozen=True)
class Case:
    id: str
    pattern: str
    samples: tuple[str, ...]


CASES = [
    # numbers
    Case("int", r"-?(?:0|[1-9][0-9]*)", ("0", "-42", "1234567890")),
    Case(
        "float",
        r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",
        ("3.14159", "-0.5e-10", "6.02E23"),
    ),
    Case("hex", r"0[xX][0-9a-fA-F]{1,8}", ("0xDEADbeef", "0X1f")),
    Case("digits_3_5", r"[0-9]{3,5}", ("123", "99999", "2024")),
    Case("unicode_digits", r"\d+(?:\.\d+)?", ("123", "٣.١٤", "४२")),
    Case("currency", r"[$€£¥] ?[0-9]+(?:\.[0-9]{2})?", ("€ 12.50", "¥1000", "$3")),
    Case(
        "semver",
        r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)(?:-[0-9A-Za-z.-]+)?",
        ("1.2.3", "10.0.0-rc.1"),
    ),
    # dates and times
    Case(
        "date_iso",
        r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])",
        ("2024-02-29", "1999-12-31"),
    ),
    Case(
        "datetime_iso",
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
        r"(?:Z|[+-][0-9]{2}:[0-9]{2})",
        ("2024-05-01T12:30:45Z", "2001-01-01T00:00:00.123+05:30"),
    ),
    Case(
        "date_us",
        r"(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12][0-9]|3[01])/[0-9]{2}(?:[0-9]{2})?",
        ("7/4/1776", "12/25/24"),
    ),
    Case("time_12h", r"(?:1[0-2]|0?[1-9]):[0-5][0-9] ?(?:AM|PM|am|pm)", ("9:05 AM", "12:59pm")),
    Case(
        "date_text",
        r"(?:January|February|March|April|May|June|July|August|September|October|November"
        r"|December) [1-9][0-9]?, [0-9]{4}",
        ("March 14, 2015", "May 1, 1999"),
    ),
    # emails, identifiers, UUIDs, URLs
    Case(
        "email",
        r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
        ("john.doe@example.com", "a+b@x.io", "first_last%tag@mail.co.uk"),
    ),
    Case(
        "email_unicode",
        r"[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.\p{L}{2,}",
        ("jörg@müller.de", "用户@例子.广告"),
    ),
    Case(
        "uuid_v1_5",
        r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        ("123e4567-e89b-12d3-a456-426614174000", "f47ac10b-58cc-4372-a567-0e02b2c3d479"),
    ),
    Case(
        "uuid_any",
        r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}",
        ("00000000-0000-0000-0000-000000000000", "A987FBC9-4BED-3078-CF07-9141BA07C9F3"),
    ),
    Case(
        "ipv4",
        r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}"
        r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])",
        ("192.168.0.1", "255.255.255.0", "8.8.8.8"),
    ),
    Case(
        "phone",
        r"\(?[0-9]{3}\)?[-. ]?[0-9]{3}[-. ][0-9]{4}",
        ("(555) 123-4567", "555.123.4567", "555123-4567"),
    ),
    Case("hex_color", r"#(?:[0-9a-fA-F]{3}){1,2}", ("#fff", "#A1b2C3")),
    Case(
        "url",
        r"https?://[a-zA-Z0-9.-]+(?::[0-9]{1,5})?(?:/[a-zA-Z0-9._~%-]*)*",
        ("https://example.com/path/to", "http://localhost:8080/"),
    ),
    Case("identifier", r"[A-Za-z_][A-Za-z0-9_]{0,15}", ("foo_bar", "_x1", "CamelCase99")),
    # quoted strings with escapes
    Case(
        "json_string",
        r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
        ('"hello"', r'"say \"hi\"\n"', r'"caf\u00e9 \\ done"', '"héllo wörld 日本 😀"'),
    ),
    Case("single_quoted", r"'(?:[^'\\\n]|\\.)*'", (r"'it\'s'", "'naïve café'", "''")),
    Case("backtick", r"`[^`]*`", ("`ls -la`", "`Grüße\n日本`")),
    Case(
        "json_object",
        r'\{"name": ?"[A-Za-z ]{1,20}", ?"age": ?[0-9]{1,3}\}',
        ('{"name": "Ada Lovelace", "age": 36}', '{"name":"Bo","age":7}'),
    ),
    Case("lazy_quoted", r'"[^\n]*?"', ('"a"b"', '""')),
    Case("c_comment", r"(?s)/\*.*?\*/", ("/* a\nb */", "/**/", "/* x */ y */")),
    Case("json_int_array", r"\[(?:[0-9]+(?:, ?[0-9]+)*)?\]", ("[]", "[1, 2,3]", "[100]")),
    # alternations
    Case("bool_null", r"true|false|null", ("true", "false", "null")),
    Case(
        "keywords_shared_prefix",
        r"in|int|integer|interface|internal|into",
        ("in", "integer", "internal"),
    ),
    Case("yes_no_ci", r"(?i)yes|no|maybe", ("YES", "No", "mAyBe")),
    Case(
        "literal_unicode_alt",
        r"café|naïve|résumé|日本|😀!",
        ("café", "résumé", "日本", "😀!"),
    ),
    Case("alt_star", r"(?:a|ab)*c", ("c", "abac", "aabababc")),
    Case("empty_branch", r"(?:|x|xy)+z", ("z", "xxyz")),
    Case("nested_star", r"(?:a*b?)*c", ("c", "aabbac")),
    Case("case_folding_unicode", r"(?i)σοφία|straße|ǆ", ("ΣΟΦΊΑ", "STRAßE", "ǅ")),
    # bounded and unbounded repeats
    Case("optional_empty", r"(?:abc)?", ("", "abc")),
    Case("ab_repeat", r"(?:ab){2,5}c?", ("abab", "ababababc")),
    Case("long_bounded", r"[a-z]{10,50}", ("abcdefghij", "thequickbrownfoxjumpsoverthelazydog")),
    Case("csv_words", r"[a-z]+(?:,[a-z]+){0,4}", ("a,bc,def", "hello")),
    Case("indent", r" {2,4}[a-z]+", ("  ab", "    x")),
    Case("lines", r"(?:[a-z]+\n){1,3}[a-z]+", ("ab\ncd", "x\ny\nz\nw")),
    Case("md_heading", r"#{1,6} [^\n]+", ("## Hello world", "# Ünïcödé títle 📘")),
    Case("bounded_dot", r".{0,12}", ("hello", "¿qué tal?", "日本語テキスト")),
    Case("dot_then_period", r".*\.", ("Done.", "Ünicode… ends.")),
    # Unicode classes
    Case("letter_words", r"\p{L}+(?: \p{L}+)*", ("hello world", "Grüße aus Köln", "日本語")),
    Case("capitalized", r"\p{Lu}\p{Ll}+", ("Émile", "Straße", "Ωμέγα")),
    Case("greek", r"\p{Greek}+", ("αβγ", "Ωμέγα")),
    Case("han", r"\p{Han}{1,4}", ("日本", "漢字文化")),
    Case("cyrillic_words", r"\p{Cyrillic}+(?: \p{Cyrillic}+)*", ("привет мир", "Ёлка")),
    Case(
        "japanese_sentence",
        r"[\p{Han}\p{Hiragana}\p{Katakana}ー]+[。！？]",
        ("日本語を話します。", "カタカナ！"),
    ),
    Case(
        "latin_or_arabic",
        r"(?:\p{Latin}+|\p{Arabic}+)(?: (?:\p{Latin}+|\p{Arabic}+))*",
        ("hello مرحبا", "سلام world"),
    ),
    Case("hangul_range", r"[가-힣]+(?: [가-힣]+)*", ("안녕하세요 세계", "한국어")),
    Case("emoji_range", r"[😀-🙏]+", ("😀", "🙂🙃")),
    Case("latin1_range", r"[à-ÿ]{2,}", ("éèà", "ÿü")),
    Case("negated_unicode", r"[^a-z0-9\n]+", ("ÄÖÜ!!", "中文。", "ABC")),
    Case("word_chars", r"\w+", ("hello_world", "naïve", "日本語123")),
    Case("non_letters", r"\P{L}+", ("123 !?", "١٢٣ — ٤")),
]


# --- UTF-8 helpers --------------------------------------------------------------------------


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """``(head, tail)``: the decodable text and an incomplete last character; None if invalid."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as e:
        if e.reason != "unexpected end of data" or e.end != len(data):
            return None
        return data[: e.start].decode("utf-8"), data[e.start :]


# Allowed second bytes where they are narrower than 80..BF (no overlongs, surrogates, > U+10FFFF).
_SECOND_BYTE = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}


@functools.cache
def tail_range(tail: bytes) -> tuple[int, int]:
    """The code points (a contiguous range) whose UTF-8 encoding starts with ``tail``."""
    lead = tail[0]
    n = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4

    def complete(second: int, rest: int) -> int:
        b = bytearray(tail)
        while len(b) < n:
            b.append(second if len(b) == 1 else rest)
        return ord(bytes(b).decode("utf-8"))

    lo2, hi2 = _SECOND_BYTE.get(lead, (0x80, 0xBF))
    return complete(lo2, 0x80), complete(hi2, 0xBF)


# --- The regex-module oracle ----------------------------------------------------------------

_ALL_CHARS: list[str] = []


def _all_chars() -> str:
    """Every Unicode scalar value, in order (surrogates left out)."""
    if not _ALL_CHARS:
        _ALL_CHARS.append("".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)])))
    return _ALL_CHARS[0]


def _code_point(index: int) -> int:
    return index if index < 0xD800 else index + 0x800


@functools.cache
def _predicate_boundaries(predicate: str) -> tuple[int, ...]:
    """Code points where membership in ``predicate`` (a one-character regex) changes."""
    out: list[int] = []
    for m in regex.finditer(f"(?:{predicate})+", _all_chars()):
        out += [_code_point(m.start()), _code_point(m.end() - 1) + 1]
    return tuple(out)


def char_predicates(pattern: str) -> tuple[list[str], set[int]]:
    """The character predicates a pattern can use on non-ASCII characters.

    Returns the property classes it names (``\\p{..}``, ``\\d``, ...) and its literal non-ASCII
    characters (range ends included). Non-ASCII characters must be written literally.
    """
    preds: list[str] = []
    for m in regex.finditer(r"\\(?:[pP]\{[^}]*\}|[pP][A-Za-z]|.)", pattern, flags=regex.DOTALL):
        c = m.group()[1]
        if c in "pP":
            preds.append("\\p" + m.group()[2:])
        elif c in "dDwWsS":
            preds.append("\\" + c.lower())
        elif c in "uUN" or (c == "x" and not regex.match(r"[0-7][0-9a-fA-F]", pattern[m.end() :])):
            raise ValueError(f"write non-ASCII characters literally in {pattern!r}")
    if "(?i" in pattern:
        preds.append("(?i)[a-z]")
        preds += ["(?i)" + regex.escape(ch) for ch in set(pattern) if ch.isalpha()]
    return preds, {ord(ch) for ch in pattern if ord(ch) >= 0x80}


_GENERAL_CATEGORIES = (
    "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Co Cn"
).split()


@functools.lru_cache(maxsize=1)
def unicode_drift() -> frozenset[int]:
    """Code points whose Unicode data may differ between tokensieve and the ``regex`` oracle.

    tokensieve reads ``\\p{..}``, ``\\w``, ``\\d`` and case folding from regex-syntax's tables
    (regex-syntax 0.8: Unicode 16.0), the ``regex`` module from its own (17.0 in 2026.11): e.g.
    U+0295 is Ll in 16.0 and Lo in 17.0, and U+1D127 is unassigned in 16.0 and Mn in 17.0. The
    oracle cannot rule on such characters for patterns that use Unicode data. This set, every
    code point whose general category differs between Python's ``unicodedata`` (Unicode 14.0 to
    16.0 depending on the Python) and the ``regex`` module, covers every character assigned or
    recategorised in between.
    """
    chars = _all_chars()
    regex_gc = np.full(len(chars), -1, dtype=np.int8)
    for k, gc in enumerate(_GENERAL_CATEGORIES):
        for m in regex.finditer(rf"\p{{gc={gc}}}+", chars):
            regex_gc[m.start() : m.end()] = k
    number = {gc: k for k, gc in enumerate(_GENERAL_CATEGORIES)}
    python_gc = np.fromiter(
        (number[unicodedata.category(ch)] for ch in chars), dtype=np.int8, count=len(chars)
    )
    return frozenset(_code_point(int(i)) for i in np.flatnonzero(regex_gc != python_gc))


def greedy_equivalent(pattern: str) -> str:
    """The pattern with lazy quantifiers made greedy: the same language under full matching.

    The ``regex`` module's partial matching mishandles lazy quantifiers, e.g.
    ``regex.fullmatch(r"a[^x]*?b", "ax", partial=True)`` matches although no match starts
    with "ax" (regex 2026.11.15), so the oracle only ever sees greedy ones.
    """
    out: list[str] = []
    i, in_class, after_quantifier = 0, False, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            braced = regex.match(r"\\[pPx]\{[^}]*\}", pattern[i:])  # \p{..}: not a quantifier
            n = braced.end() if braced else 2
            out.append(pattern[i : i + n])
            i, after_quantifier = i + n, False
            continue
        if in_class:
            in_class = c != "]"
        elif c == "?" and after_quantifier:
            i, after_quantifier = i + 1, False  # the lazy marker
            continue
        elif c == "[":
            in_class = True
        out.append(c)
        after_quantifier = not in_class and (
            c in "*+}" or (c == "?" and i > 0 and pattern[i - 1] != "(")
        )
        i += 1
    return "".join(out)


class RegexOracle:
    """Answers from the PyPI ``regex`` module (Unicode ``str`` patterns, full-match semantics).

    Verdicts are True, False, or None where they depend on a character of ``unicode_drift()``
    (only for patterns that use Unicode data); None verdicts are left out of the comparison.
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.rx = regex.compile(greedy_equivalent(pattern))
        preds, literals = char_predicates(pattern)
        self.drift: frozenset[int] = unicode_drift() if preds else frozenset()
        self._predicates = preds
        self._literals = literals
        self._boundaries: list[int] | None = None

    def partial(self, text: str) -> bool:
        """``text`` is a prefix of some full match."""
        return self.rx.fullmatch(text, partial=True) is not None

    def full(self, text: str) -> bool:
        return self.rx.fullmatch(text) is not None

    def first_drift(self, text: str) -> int:
        """Index of the first character of ``text`` whose Unicode data drifts, or -1."""
        if self.drift:
            for i, ch in enumerate(text):
                if ord(ch) in self.drift:
                    return i
        return -1

    def boundaries(self) -> list[int]:
        if self._boundaries is None:
            points = {0x80, *self._literals, *(c + 1 for c in self._literals)}
            points.update(self.drift)
            points.update(c + 1 for c in self.drift)
            for p in self._predicates:
                points.update(_predicate_boundaries(p))
            self._boundaries = sorted(points)
        return self._boundaries

    def interval(self, code_point: int) -> int:
        """Which interval between boundaries holds a non-ASCII ``code_point``.

        Every character predicate the pattern uses (its literal non-ASCII characters, range ends
        and property classes) is constant on an interval, so the ``regex`` module treats all its
        characters alike: one character stands for all of them (``test_representatives_are_exact``
        checks this against exhaustive scans). ASCII is not split this way: only ``>= 0x80``.
        """
        return bisect.bisect_right(self.boundaries(), code_point)

    def representatives(self, lo: int, hi: int) -> Iterable[int]:
        """Code points in [lo, hi] (non-ASCII) covering every behaviour the pattern has there."""
        b = self.boundaries()
        return [lo, *b[bisect.bisect_right(b, lo) : bisect.bisect_right(b, hi)]]

    def continues_with_char_in(self, text: str, lo: int, hi: int) -> bool | None:
        """Some character in [lo, hi] extends ``text`` to a prefix of a match."""
        drifting = False
        for c in self.representatives(lo, hi):
            if self.partial(text + chr(c)):
                if c not in self.drift:
                    return True
                drifting = True
        return None if drifting else False

    def allows(self, text: str, tail: bytes = b"") -> bool | None:
        """``text`` then the incomplete UTF-8 character ``tail`` can start a match."""
        j = self.first_drift(text)
        if j >= 0:
            return None if self.partial(text[:j]) else False
        if not self.partial(text):
            return False
        return True if not tail else self.continues_with_char_in(text, *tail_range(tail))

    def allows_bytes(self, head: str, data: bytes) -> bool | None:
        """``head`` (text) followed by ``data`` (bytes) is a prefix of a match's UTF-8."""
        split = split_utf8(data)
        if split is None:
            return False  # not UTF-8: no match of a Unicode regex contains it
        return self.allows(head + split[0], split[1])


@functools.cache
def oracle_for(pattern: str) -> RegexOracle:
    return RegexOracle(pattern)


_DIALECT_SENSITIVE = regex.compile(r"\\[pPdDwWsSbB]")


@functools.cache
def interegular_fsm(pattern: str) -> Any:
    """interegular's FSM where it reads the pattern with the same meaning, else None.

    interegular's ``\\d``/``\\w``/``\\s`` are ASCII and it has no ``\\p{..}``: those patterns
    keep the ``regex`` oracle only.
    """
    if _DIALECT_SENSITIVE.search(pattern) or ("(?i" in pattern and not pattern.isascii()):
        return None  # interegular also folds case by lower()/upper() only, without titlecase
    try:
        return interegular.parse_pattern(pattern).to_fsm()
    except Exception:  # an unsupported construct
        return None


# --- Vocabularies ---------------------------------------------------------------------------


class VocabIndex:
    """A vocabulary's token texts arranged for the oracle, and tokenizations of sample strings."""

    def __init__(self, name: str, vocab: ts.Vocabulary, tokenizer_json: Path | None) -> None:
        self.name = name
        self.vocab = vocab
        self.size = vocab.vocab_size
        self.eos = set(vocab.eos_token_ids)
        self.token_bytes: list[bytes | None] = [vocab.token_bytes(i) for i in range(self.size)]
        self.never = {i for i, b in enumerate(self.token_bytes) if b is None} - self.eos
        # Tokens by first character (those that decode), those ending mid-character, and those
        # starting with a continuation byte (they can only follow a split character).
        self.groups: dict[str, list[tuple[int, str]]] = {}
        self.tails: list[tuple[int, str, bytes]] = []
        self.continuations: list[tuple[int, bytes]] = []
        self.by_bytes: dict[bytes, int] = {}
        for i, b in enumerate(self.token_bytes):
            if not b:
                continue
            self.by_bytes.setdefault(b, i)
            if 0x80 <= b[0] < 0xC0:
                self.continuations.append((i, b))
            split = split_utf8(b)
            if split is None:
                continue
            text, tail = split
            if tail:
                self.tails.append((i, text, tail))
            else:
                self.groups.setdefault(text[0], []).append((i, text))
        self.max_len = max(map(len, self.by_bytes))
        self._drift_pos: dict[int, int] | None = None
        self._buckets: dict[str, list[list[str]]] = {}
        self.hf = None
        if tokenizer_json is not None:
            import tokenizers

            self.hf = tokenizers.Tokenizer.from_file(str(tokenizer_json))

    def spell(self, ids: list[int]) -> bytes:
        return b"".join(self.token_bytes[i] or b"<special>" for i in ids)

    def tokenize(self, text: str) -> list[int]:
        """The tokenizer's own ids when they spell exactly ``text``, else greedy longest match."""
        data = text.encode("utf-8")
        if self.hf is not None:
            ids = list(self.hf.encode(text, add_special_tokens=False).ids)
            if ids and self.token_bytes[ids[0]] == b" " and self.spell(ids) == b" " + data:
                ids = ids[1:]  # SentencePiece's prefix space as a token of its own
            if self.spell(ids) == data:
                return ids
        out: list[int] = []
        i = 0
        while i < len(data):
            for n in range(min(self.max_len, len(data) - i), 0, -1):
                t = self.by_bytes.get(data[i : i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                raise AssertionError(f"{self.name}: no token spells {data[i:]!r}")
        return out

    def tokenize_bytewise(self, text: str) -> list[int]:
        """One token per byte: splits every multibyte character."""
        return [self.by_bytes[bytes([b])] for b in text.encode("utf-8")]

    def drift_positions(self, drift: frozenset[int]) -> dict[int, int]:
        """Token id -> index of the first drifting character of its text (tokens that have one)."""
        if self._drift_pos is None:
            self._drift_pos = {}
            for i, text in [
                *(t for g in self.groups.values() for t in g),
                *(t[:2] for t in self.tails),
            ]:
                j = next((k for k, ch in enumerate(text) if ord(ch) in drift), -1)
                if j >= 0:
                    self._drift_pos[i] = j
        return self._drift_pos

    def first_char_buckets(self, oracle: RegexOracle) -> list[list[str]]:
        """Tokens' first characters: ASCII ones alone, the others by the oracle's intervals."""
        if oracle.pattern not in self._buckets:
            buckets: dict[int, list[str]] = {}
            for ch in self.groups:
                key = -ord(ch) if ord(ch) < 0x80 else oracle.interval(ord(ch))
                buckets.setdefault(key, []).append(ch)
            self._buckets[oracle.pattern] = list(buckets.values())
        return self._buckets[oracle.pattern]

    def expected_mask(
        self, oracle: RegexOracle, prefix: bytes, *, grouped: bool = True
    ) -> tuple[set[int], set[int]]:
        """The tokens the oracle allows after ``prefix`` (EOS included), and those it can't judge."""
        split = split_utf8(prefix)
        assert split is not None, f"sample prefix {prefix!r} is not UTF-8"
        head, tail = split
        assert oracle.first_drift(head) < 0, f"sample prefix {prefix!r} has drifting characters"
        allowed: set[int] = set()
        unknown: set[int] = set()

        def record(i: int, verdict: bool | None) -> None:
            if verdict is None:
                unknown.add(i)
            elif verdict:
                allowed.add(i)

        if not tail and oracle.full(head):
            allowed |= self.eos
        if not grouped or tail:
            # Per token. After a split character, only a token starting with continuation bytes
            # can finish it (anything else is not UTF-8).
            tokens = self.continuations if tail and grouped else enumerate(self.token_bytes)
            for i, b in tokens:
                if b:
                    record(i, oracle.allows_bytes(head, tail + b))
            return allowed, unknown
        drift_pos = self.drift_positions(oracle.drift) if oracle.drift else {}
        fullmatch = oracle.rx.fullmatch
        for bucket in self.first_char_buckets(oracle):
            if len(bucket) > 1 and fullmatch(head + bucket[0], partial=True) is None:
                continue  # no character of this interval can come next
            for first in bucket:
                group = self.groups[first]
                if ord(first) in oracle.drift:
                    unknown.update(i for i, _ in group)  # the prefix itself partially matches
                    continue
                if fullmatch(head + first, partial=True) is None:
                    continue  # prefix-closed: no token starting with `first` can continue
                for i, text in group:
                    j = drift_pos.get(i, -1)
                    if j >= 0:
                        record(i, None if oracle.partial(head + text[:j]) else False)
                    elif len(text) == 1 or fullmatch(head + text, partial=True) is not None:
                        allowed.add(i)
        cache: dict[tuple[str, bytes], bool | None] = {}
        for i, text, t in self.tails:
            if (text, t) not in cache:
                cache[text, t] = oracle.allows(head + text, t)
            record(i, cache[text, t])
        return allowed, unknown


_INDEXES: dict[str, VocabIndex] = {}


def vocab_index(name: str, request: pytest.FixtureRequest) -> VocabIndex:
    if name not in _INDEXES:
        if name == "tekken":
            _INDEXES[name] = VocabIndex(name, ts.Vocabulary.from_tekken(), None)
        else:
            shared: Path = request.getfixturevalue("shared_dir")
            folder = shared / "tokenizers" / name
            if not (folder / "tokenizer.json").is_file():
                pytest.skip(f"{folder}/tokenizer.json not found: needs the shared data folder")
            vocab = ts.Vocabulary.from_pretrained(str(folder))
            _INDEXES[name] = VocabIndex(name, vocab, folder / "tokenizer.json")
    return _INDEXES[name]


def mask_ids(bitmask: np.ndarray) -> set[int]:
    bits = np.unpackbits(np.ascontiguousarray(bitmask[0]).view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


def describe_diff(index: VocabIndex, got: set[int], expected: set[int], where: str) -> list[str]:
    lines = []
    for side, ids in (
        ("tokensieve allows, oracle rejects", got - expected),
        ("oracle allows, tokensieve rejects", expected - got),
    ):
        for i in sorted(ids)[:MAX_REPORTED]:
            b = index.token_bytes[i] if i < index.size else None
            lines.append(f"{where}: token {i} {b!r}: {side}")
        if len(ids) > MAX_REPORTED:
            lines.append(f"{where}: ... {len(ids) - MAX_REPORTED} more where {side}")
    return lines


# --- The tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("vocab_name", VOCAB_NAMES)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_mask_matches_oracle(case: Case, vocab_name: str, request: pytest.FixtureRequest) -> None:
    index = vocab_index(vocab_name, request)
    oracle = oracle_for(case.pattern)
    fsm = interegular_fsm(case.pattern)
    grammar = ts.Grammar.from_regex(case.pattern, index.vocab)

    runs: list[tuple[str, list[int]]] = []
    for s in case.samples:
        assert oracle.full(s), f"sample {s!r} does not match {case.pattern!r} (regex module)"
        assert fsm is None or fsm.accepts(s), f"interegular rejects sample {s!r}"
        runs.append((f"{s!r}", index.tokenize(s)))
    non_ascii = [s for s in case.samples if not s.isascii()]
    if non_ascii:
        runs.append((f"{non_ascii[0]!r} byte by byte", index.tokenize_bytewise(non_ascii[0])))

    steps = [(r, k) for r, (_, ids) in enumerate(runs) for k in range(len(ids) + 1)]
    if vocab_name == FULL_SWEEP_VOCAB:
        selected = set(steps)
    else:
        selected = {(0, 0)} | {(r, len(ids)) for r, (_, ids) in enumerate(runs)}
        middle = [st for st in steps if st not in selected]
        rng = random.Random(f"{case.id}/{vocab_name}")
        selected |= set(rng.sample(middle, min(RANDOM_MIDDLE_STEPS, len(middle))))

    errors: list[str] = []
    expected_by_prefix: dict[bytes, tuple[set[int], set[int]]] = {}
    bitmask = np.zeros((1, ts.bitmask_words(index.size)), dtype=np.int32)
    for r, (label, ids) in enumerate(runs):
        matcher = grammar.matcher()
        prefix = b""
        for k in range(len(ids) + 1):
            where = f"[{vocab_name}] {case.pattern!r} run {label} step {k} prefix {prefix!r}"
            bitmask[:] = 0
            matcher.fill_next_token_bitmask(bitmask, 0)
            got = mask_ids(bitmask)
            head, tail = split_utf8(prefix) or ("", b"?")
            complete = not tail and oracle.full(head)
            # Checks at every step: EOS bit, is_accepting, special and padding ids, next token.
            if fsm is not None and not tail and fsm.accepts(head) != complete:
                errors.append(f"{where}: oracles disagree on full match (interegular vs regex)")
            for e in index.eos:
                if (e in got) != complete:
                    errors.append(f"{where}: EOS {e} bit is {e in got}, full match is {complete}")
            if matcher.is_accepting() != complete:
                errors.append(f"{where}: is_accepting() is not {complete}")
            if bad := sorted(i for i in got if i >= index.size or i in index.never)[:10]:
                errors.append(f"{where}: special/padding ids allowed: {bad}")
            if k < len(ids) and ids[k] not in got:
                errors.append(f"{where}: the sample's next token {ids[k]} is not in the mask")
            if (r, k) in selected:
                if prefix not in expected_by_prefix:
                    expected_by_prefix[prefix] = index.expected_mask(oracle, prefix)
                expected, unknown = expected_by_prefix[prefix]
                errors += describe_diff(index, got - unknown, expected, where)
                if len(unknown) > index.size // 100:
                    errors.append(f"{where}: {len(unknown)} tokens the oracle cannot judge")
            if k == len(ids):
                break
            if not matcher.accept_token(ids[k]):
                errors.append(f"{where}: accept_token({ids[k]}) refused the sample's token")
                break
            prefix += index.token_bytes[ids[k]] or b""
    assert not errors, f"{len(errors)} differences:\n" + "\n".join(errors[:200])


# --- Checks of the oracle itself ------------------------------------------------------------


def test_utf8_helpers() -> None:
    assert split_utf8("aé".encode()) == ("aé", b"")
    assert split_utf8(b"a\xc3") == ("a", b"\xc3")
    assert split_utf8(b"\xf0\x9f\x98") == ("", b"\xf0\x9f\x98")
    for bad in (b"\x80", b"\xc3a", b"\xe0\x80", b"\xed\xa0", b"\xf4\x90", b"\xf5", b"\xc0"):
        assert split_utf8(bad) is None, bad
    assert tail_range(b"\xc3") == (0xC0, 0xFF)
    assert tail_range(b"\xe0") == (0x800, 0xFFF)
    assert tail_range(b"\xed") == (0xD000, 0xD7FF)
    assert tail_range(b"\xf0") == (0x10000, 0x3FFFF)
    assert tail_range(b"\xf4") == (0x100000, 0x10FFFF)
    assert tail_range(b"\xf0\x9f\x98") == (0x1F600, 0x1F63F)
    # Exhaustive: every tail of every 1..4-byte character maps back onto a range holding it.
    for cp in [
        *range(0x80, 0x3000),
        *range(0xD7F0, 0xD800),
        *range(0xE000, 0xE010),
        *range(0x1F600, 0x1F700),
        0x10FFFF,
    ]:
        enc = chr(cp).encode()
        for n in range(1, len(enc)):
            lo, hi = tail_range(enc[:n])
            assert lo <= cp <= hi
            assert chr(lo).encode()[:n] == enc[:n] == chr(hi).encode()[:n]


def test_greedy_equivalent() -> None:
    assert greedy_equivalent(r'"[^\n]*?"') == r'"[^\n]*"'
    assert greedy_equivalent(r"(?s)/\*.*?\*/") == r"(?s)/\*.*\*/"
    assert greedy_equivalent(r"(?:ab)??x{2,3}?y+?") == r"(?:ab)?x{2,3}y+"
    assert greedy_equivalent(r"\p{L}??\P{Lu}{2}?") == r"\p{L}?\P{Lu}{2}"
    for unchanged in (r"a\*?b", r"[*?]+", r"(?:a)?(?i:b)", r"\??", r"a{2}", r"\p{L}?[\p{N}]?"):
        assert greedy_equivalent(unchanged) == unchanged


@pytest.mark.parametrize(
    "pattern, text",
    [
        (r"\p{L}+(?: \p{L}+)*", "Grüße "),
        (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"', '"ab\\'),
        (r"[😀-🙏]+", "😀"),
        (r"[à-ÿ]{2,}|[가-힣]+", ""),
        (r"\d+", "٣"),
        (r"(?i)yes|no|maybe", ""),
        (r"[0-9]{4}-[0-9]{2}", "2024"),
    ],
    ids=[
        "letters",
        "json_escape",
        "emoji",
        "literal_ranges",
        "digits",
        "case_insensitive",
        "ascii",
    ],
)
def test_representatives_are_exact(pattern: str, text: str) -> None:
    """One character per interval decides as every character of the range would."""
    oracle = RegexOracle(pattern)
    # Every lead byte of 2- and 3-byte characters, and the 4-byte planes 1-3 and 16.
    for lead in [*range(0xC2, 0xF1), 0xF4]:
        lo, hi = tail_range(bytes([lead]))
        hits = {c for c in range(lo, hi + 1) if oracle.partial(text + chr(c))}
        exhaustive = True if hits - oracle.drift else None if hits else False
        assert oracle.continues_with_char_in(text, lo, hi) == exhaustive, (pattern, hex(lead))
        # The intervals split exactly where the verdict can change.
        for c in range(lo, hi):
            if oracle.interval(c) == oracle.interval(c + 1):
                assert (c in hits) == (c + 1 in hits), (pattern, hex(c))


@pytest.mark.parametrize(
    "pattern, prefix",
    [
        (r"\p{L}+(?: \p{L}+)*", "Grüße aus".encode()),
        (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"', b'"caf\\u00'),
        (r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])", b"2024-1"),
        (r"[😀-🙏]+", "🙂".encode()[:2]),
    ],
    ids=["letters", "json_escape", "date", "split_emoji"],
)
def test_first_char_grouping_is_exact(pattern: str, prefix: bytes) -> None:
    """The grouped oracle gives what a plain per-token loop over the vocabulary gives."""
    index = _INDEXES.get("tekken") or VocabIndex("tekken", ts.Vocabulary.from_tekken(), None)
    _INDEXES["tekken"] = index
    oracle = RegexOracle(pattern)
    grouped = index.expected_mask(oracle, prefix)
    assert grouped == index.expected_mask(oracle, prefix, grouped=False)
    assert grouped[0], "a sample prefix must have a continuation"


@pytest.mark.parametrize(
    "mask_pattern, oracle_pattern, prefix",
    [
        (r"[a-z]{1,4}", r"[a-z]{1,3}", b"ab"),
        (r"[😀-🙏]+", r"[😀-🙐]+", "🙂".encode()[:3]),
    ],
    ids=["bounded_repeat", "split_emoji"],
)
def test_harness_reports_a_wrong_mask(
    mask_pattern: str, oracle_pattern: str, prefix: bytes
) -> None:
    """A mask for a slightly different regex does not pass: the comparison is not vacuous."""
    index = _INDEXES.get("tekken") or VocabIndex("tekken", ts.Vocabulary.from_tekken(), None)
    _INDEXES["tekken"] = index
    matcher = ts.Grammar.from_regex(mask_pattern, index.vocab).matcher()
    for b in prefix:
        assert matcher.accept_token(index.by_bytes[bytes([b])])
    bitmask = np.zeros((1, ts.bitmask_words(index.size)), dtype=np.int32)
    matcher.fill_next_token_bitmask(bitmask, 0)
    expected, unknown = index.expected_mask(RegexOracle(oracle_pattern), prefix)
    assert describe_diff(index, mask_ids(bitmask) - unknown, expected, "x")
