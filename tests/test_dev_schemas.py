"""Random walks over real-world schemas: every sampled output must be valid JSON that the
`jsonschema` package validates.

The sample: 300 lines of `../shared/data/jsonschemabench-dev.jsonl.gz` (6,761 schemas; the first
300 lines are all BFCL, so the slice is seeded instead): line numbers
`sorted(random.Random(20240601).sample(range(6761), 300))`, which covers every group of the dev
split. Each schema is compiled twice (Llama 3 vocabulary, `formats="assert"`,
`max_compile_seconds=COMPILE_SECONDS`): with the default options, and with
`additional_properties="forbid"` — a subset of the same language whose walks reach the declared
properties instead of inventing keys. `WALKS` random walks alternate between the two grammars.
At every step the mask is filled and a random allowed token accepted: EOS with probability
`P_EOS` when allowed; early in a walk, with probability up to `P_AVOID`, no token holding `]` or
`}` (so walks go deep); a token holding `"`, `]` or `}` with a probability growing from
`P_CLOSE_START` to `P_CLOSE` over `MAX_TOKENS` (so walks finish); a token of at most 2 bytes with
probability `P_SHORT`; else any allowed token. Every step also checks that the mask agrees with
`accept_token` and `is_accepting`. A walk that reaches `MAX_TOKENS` without EOS is discarded
(counted, not a failure: mostly schemas whose `pattern` must occur in a string, which a random
walk rarely spells).

Each finished text must decode as UTF-8, parse with `json.loads` and validate with `jsonschema`
(the validator class of the schema's `$schema`; without one 2020-12, or draft 4/7 for draft-4
forms) with format checking for exactly the formats the compiler asserts. Where the installed
`jsonschema` has no checker for one of those formats (its `date-time`, `time`, `duration`,
`hostname`, `uri`, `uri-reference` checkers need optional packages) a strict checker from this
file is used: RFC 3339 (a leap second at any time, as `rfc3339-validator` accepts), RFC 3339
Appendix A durations, RFC 1123 host names (at most 253 characters; no IDNA checks), RFC 3986
URIs and URI references; `date` always uses the local RFC 3339 check (Python has no year 0000).
`test_local_format_checkers_agree_with_the_suite` checks those against JSON-Schema-Test-Suite.

Walks are seeded per schema id, so a failure reproduces; its message holds the schema id, the
sampled text and the jsonschema error. `test_dev_sample_summary` prints the counts (run with
`-s` or `-rP`): compiled, unsupported by reason, walks finished/discarded.
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import json
import random
import re
import time
import zlib
from collections import Counter
from typing import Any, Callable

import numpy as np
import pytest
from shared_data import DEV_SET, SUITE_DIR
from shared_data import LLAMA3_DIR as TOKENIZER_DIR

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

DEV_LINES = 6761
SAMPLE_SEED = 20240601
SAMPLE_SIZE = 300
WALKS = 20
MAX_TOKENS = 300
P_EOS = 0.5
P_CLOSE_START = 0.05
P_AVOID = 0.7
P_CLOSE = 0.6
P_SHORT = 0.2
COMPILE_SECONDS = 10.0
# Walks of one schema stop (counted as "not run") after this many seconds.
WALK_SECONDS = 3.0
# The formats the compiler asserts (docs/json-schema.md); only these are checked.
ASSERTED_FORMATS = (
    "date",
    "time",
    "date-time",
    "duration",
    "uuid",
    "ipv4",
    "ipv6",
    "hostname",
    "email",
    "uri",
    "uri-reference",
)

SAMPLE_LINES = sorted(random.Random(SAMPLE_SEED).sample(range(DEV_LINES), SAMPLE_SIZE))


def _read_sample() -> list[dict[str, Any]]:
    wanted = set(SAMPLE_LINES)
    rows = []
    with gzip.open(DEV_SET, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i in wanted:
                rows.append(json.loads(line))
    return rows


_SAMPLE: list[dict[str, Any]] | None = None


def sample() -> list[dict[str, Any]]:
    global _SAMPLE
    if _SAMPLE is None:
        _SAMPLE = _read_sample() if DEV_SET.is_file() else []
    return _SAMPLE


STATS: Counter[str] = Counter()
UNSUPPORTED: Counter[str] = Counter()


# --------------------------------------------------------------------------------------------
# Format checkers for asserted formats that the installed jsonschema cannot check


_TIME_RE = re.compile(
    r"([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):([0-5]\d))",
    re.ASCII,
)
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)


def _is_date(s: str) -> bool:
    """RFC 3339 `full-date`; the year 0000 is valid (proleptic Gregorian, a leap year)."""
    m = _DATE_RE.fullmatch(s)
    if not m:
        return False
    year = int(m.group(1))
    try:  # Python dates have no year 0; 2000 has the same leap-year status
        datetime.date(year or 2000, int(m.group(2)), int(m.group(3)))
    except ValueError:
        return False
    return True


def check_date(s: object) -> bool:
    return not isinstance(s, str) or _is_date(s)


def check_date_time(s: object) -> bool:
    if not isinstance(s, str):
        return True
    parts = re.split("[Tt]", s, maxsplit=1)
    return len(parts) == 2 and _is_date(parts[0]) and bool(_TIME_RE.fullmatch(parts[1]))


def check_time(s: object) -> bool:
    return not isinstance(s, str) or bool(_TIME_RE.fullmatch(s))


_S = r"\d+S"
_MI = rf"\d+M(?:{_S})?"
_H = rf"\d+H(?:{_MI})?"
_DT = rf"T(?:{_H}|{_MI}|{_S})"
_D = r"\d+D"
_MO = rf"\d+M(?:{_D})?"
_Y = rf"\d+Y(?:{_MO})?"
_DURATION_RE = re.compile(rf"P(?:(?:{_D}|{_MO}|{_Y})(?:{_DT})?|{_DT}|\d+W)", re.ASCII)


def check_duration(s: object) -> bool:
    """RFC 3339 Appendix A (the grammar JSON Schema's `duration` refers to)."""
    return not isinstance(s, str) or bool(_DURATION_RE.fullmatch(s))


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def check_hostname(s: object) -> bool:
    """RFC 1123 host names: LDH labels of 1-63 characters, at most 253 characters (no IDNA
    checks of `xn--` labels)."""
    if not isinstance(s, str):
        return True
    return 0 < len(s) <= 253 and all(_LABEL.fullmatch(label) for label in s.split("."))


_UNRES = r"[A-Za-z0-9\-._~]"
_PCT = r"%[0-9A-Fa-f]{2}"
_SUB = r"[!$&'()*+,;=]"
_PCHAR = rf"(?:{_UNRES}|{_PCT}|{_SUB}|[:@])"
_SEG = rf"{_PCHAR}*"
_SEG_NZ = rf"{_PCHAR}+"
_SEG_NZ_NC = rf"(?:{_UNRES}|{_PCT}|{_SUB}|@)+"
_QUERY = rf"(?:{_PCHAR}|[/?])*"
_AUTH = (
    rf"(?:(?:{_UNRES}|{_PCT}|{_SUB}|:)*@)?"  # userinfo
    rf"(?P<host>\[[^\]]*\]|(?:{_UNRES}|{_PCT}|{_SUB})*)"  # IP-literal or reg-name / IPv4
    r"(?::\d*)?"
)
_HIER = rf"(?://{_AUTH}(?:/{_SEG})*|/(?:{_SEG_NZ}(?:/{_SEG})*)?|{_SEG_NZ}(?:/{_SEG})*|)"
_REL = rf"(?://{_AUTH}(?:/{_SEG})*|/(?:{_SEG_NZ}(?:/{_SEG})*)?|{_SEG_NZ_NC}(?:/{_SEG})*|)"
_TAIL = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"
_URI_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+.\-]*:{_HIER}{_TAIL}", re.ASCII)
_RELREF_RE = re.compile(rf"{_REL}{_TAIL}", re.ASCII)
_IPVFUTURE = re.compile(rf"v[0-9A-Fa-f]+\.(?:{_UNRES}|{_SUB}|:)+", re.ASCII)


def _host_ok(m: re.Match[str]) -> bool:
    host = m.group("host")
    if host is None or not host.startswith("["):
        return True
    inner = host[1:-1]
    if _IPVFUTURE.fullmatch(inner):
        return True
    try:
        return "%" not in inner and isinstance(ipaddress.ip_address(inner), ipaddress.IPv6Address)
    except ValueError:
        return False


def check_uri(s: object) -> bool:
    """RFC 3986 `URI`."""
    if not isinstance(s, str):
        return True
    m = _URI_RE.fullmatch(s)
    return m is not None and _host_ok(m)


def check_uri_reference(s: object) -> bool:
    """RFC 3986 `URI-reference`."""
    if not isinstance(s, str):
        return True
    m = _URI_RE.fullmatch(s) or _RELREF_RE.fullmatch(s)
    return m is not None and _host_ok(m)


# Used instead of the installed jsonschema's checker: its `date` check is
# `datetime.date.fromisoformat`, which rejects the valid RFC 3339 year 0000.
OVERRIDES: dict[str, Callable[[object], bool]] = {"date": check_date}
FALLBACK_CHECKERS: dict[str, Callable[[object], bool]] = {
    "date-time": check_date_time,
    "time": check_time,
    "duration": check_duration,
    "hostname": check_hostname,
    "uri": check_uri,
    "uri-reference": check_uri_reference,
}


def format_checker(cls: Any) -> Any:
    """`cls.FORMAT_CHECKER` restricted to the asserted formats, with fallbacks for the ones the
    installed jsonschema cannot check."""
    base = cls.FORMAT_CHECKER
    fc = jsonschema.FormatChecker(formats=())
    for name in ASSERTED_FORMATS:
        if name in OVERRIDES:
            fc.checkers[name] = (OVERRIDES[name], ())
        elif name in base.checkers:
            fc.checkers[name] = base.checkers[name]
        elif name in FALLBACK_CHECKERS:
            fc.checkers[name] = (FALLBACK_CHECKERS[name], ())
    return fc


def _walk_schema(s: Any, pred: Callable[[str, Any], bool]) -> bool:
    if isinstance(s, dict):
        return any(pred(k, v) or _walk_schema(v, pred) for k, v in s.items())
    if isinstance(s, list):
        return any(_walk_schema(x, pred) for x in s)
    return False


def validator(schema: Any) -> Any:
    """The schema's own draft (`$schema`), else 2020-12, or draft 4/7 for draft-4 forms."""
    cls = jsonschema.Draft202012Validator
    if isinstance(schema, dict) and isinstance(schema.get("$schema"), str):
        cls = jsonschema.validators.validator_for(schema, default=cls)
    elif _walk_schema(
        schema, lambda k, v: k in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(v, bool)
    ):
        cls = jsonschema.Draft4Validator
    elif _walk_schema(schema, lambda k, v: k == "items" and isinstance(v, list)):
        cls = jsonschema.Draft7Validator
    return cls(schema, format_checker=format_checker(cls))


# --------------------------------------------------------------------------------------------
# Random walks


class Walker:
    def __init__(self, vocab: ts.Vocabulary) -> None:
        self.vocab = vocab
        n = vocab.vocab_size
        self.bytes = [vocab.token_bytes(i) or b"" for i in range(n)]
        self.closing = np.array([any(c in b for c in b'"]}') for b in self.bytes], dtype=bool)
        self.closers = np.array([any(c in b for c in b"]}") for b in self.bytes], dtype=bool)
        self.short = np.array([0 < len(b) <= 2 for b in self.bytes], dtype=bool)
        self.eos = np.zeros(n, dtype=bool)
        self.eos[list(vocab.eos_token_ids)] = True
        self.bitmask = ts.allocate_token_bitmask(1, n)

    def allowed(self) -> np.ndarray:
        row = np.ascontiguousarray(np.asarray(self.bitmask)[0]).view(np.uint8)
        return np.unpackbits(row, bitorder="little")[: self.vocab.vocab_size].astype(bool)

    def walk(self, grammar: ts.Grammar, rng: random.Random) -> tuple[str | None, list[int]]:
        """(text, tokens) of one walk to EOS; text None when MAX_TOKENS was reached first."""
        m = grammar.matcher()
        ids: list[int] = []
        for _ in range(MAX_TOKENS + 1):
            m.fill_next_token_bitmask(self.bitmask)
            ok = self.allowed()
            eos_ok = bool((ok & self.eos).any())
            assert eos_ok == m.is_accepting(), f"mask and is_accepting disagree after {ids}"
            other = ok & ~self.eos
            assert eos_ok or other.any(), f"empty mask after {ids}"
            if eos_ok and (rng.random() < P_EOS or not other.any()):
                tok = int(np.flatnonzero(ok & self.eos)[0])
                assert m.accept_token(tok), "EOS in the mask but not accepted"
                assert m.is_finished()
                text = b"".join(self.bytes[i] for i in ids)
                return text.decode("utf-8"), ids
            if len(ids) == MAX_TOKENS:
                return None, ids
            pool = other
            if rng.random() < P_AVOID * (1 - len(ids) / MAX_TOKENS):
                # early on, prefer tokens that do not close anything, so that walks go deep
                if (other & ~self.closers).any():
                    pool = other & ~self.closers
            r = rng.random()
            # the closing bias grows with the length, so that walks first build, then finish
            p_close = P_CLOSE_START + (P_CLOSE - P_CLOSE_START) * len(ids) / MAX_TOKENS
            if r < p_close and (other & self.closing).any():
                pool = other & self.closing
            elif r < p_close + P_SHORT and (other & self.short).any():
                pool = other & self.short
            choices = np.flatnonzero(pool)
            tok = int(choices[rng.randrange(len(choices))])
            assert m.accept_token(tok), f"token {tok} in the mask but not accepted after {ids}"
            ids.append(tok)
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def walker() -> Walker:
    if not (TOKENIZER_DIR / "tokenizer.json").is_file():
        pytest.skip(f"{TOKENIZER_DIR} not found: the dev-set walks need the Llama 3 tokenizer")
    if not DEV_SET.is_file():
        pytest.skip(f"{DEV_SET} not found: the dev-set walks need ../shared/data")
    return Walker(ts.Vocabulary.from_pretrained(str(TOKENIZER_DIR)))


def _ids() -> list[str]:
    rows = sample()
    if len(rows) == SAMPLE_SIZE:
        return [r["id"] for r in rows]
    return [f"line{i}" for i in SAMPLE_LINES]


@pytest.mark.parametrize("index", range(SAMPLE_SIZE), ids=_ids())
def test_dev_schema_walks(walker: Walker, index: int) -> None:
    row = sample()[index]
    schema = row["schema"]
    start = time.monotonic()
    try:
        grammar = ts.Grammar.from_json_schema(
            schema, walker.vocab, max_compile_seconds=COMPILE_SECONDS
        )
    except ts.TokensieveError as e:
        STATS["unsupported"] += 1
        UNSUPPORTED[f"{type(e).__name__} {getattr(e, 'keyword', '')}".strip()] += 1
        if time.monotonic() - start > COMPILE_SECONDS:
            STATS["slow"] += 1
        return
    STATS["compiled"] += 1
    grammars = [grammar]
    try:  # a subset of the same language whose walks reach the declared properties
        grammars.append(
            ts.Grammar.from_json_schema(
                schema,
                walker.vocab,
                additional_properties="forbid",
                max_compile_seconds=COMPILE_SECONDS,
            )
        )
    except ts.TokensieveError:
        STATS["no additional_properties='forbid' grammar"] += 1
    check = validator(schema)
    rng = random.Random(zlib.crc32(row["id"].encode()))
    deadline = time.monotonic() + WALK_SECONDS
    failures = []
    for w in range(WALKS):
        if time.monotonic() > deadline:
            STATS["walks not run (time)"] += WALKS - w
            break
        text, ids = walker.walk(grammars[w % len(grammars)], rng)
        if text is None:
            STATS["walks discarded (length)"] += 1
            continue
        STATS["walks finished"] += 1
        try:
            value = json.loads(text)
        except ValueError as e:
            failures.append(f"walk {w}: not JSON ({e}): {text!r}")
            continue
        err = jsonschema.exceptions.best_match(check.iter_errors(value))
        if err is not None:
            path = "/".join(map(str, err.absolute_path))
            failures.append(
                f"walk {w}: {text!r} is invalid at /{path}: {err.message} "
                f"(schema keyword {err.validator!r} at /{'/'.join(map(str, err.schema_path))})"
            )
    if failures:
        STATS["schemas with invalid output"] += 1
    assert not failures, f"schema {row['id']}:\n" + "\n".join(failures)


def test_dev_sample_summary(walker: Walker) -> None:
    """Runs last: prints the counts, and guards against the walks silently checking nothing."""
    if STATS["compiled"] + STATS["unsupported"] < SAMPLE_SIZE:
        pytest.skip("only meaningful after every test_dev_schema_walks case ran")
    print(
        "dev sample: "
        + ", ".join(f"{k} {v}" for k, v in sorted(STATS.items()))
        + "; unsupported by reason: "
        + ", ".join(f"{k} {v}" for k, v in UNSUPPORTED.most_common())
    )
    assert STATS["compiled"] >= 200
    assert STATS["walks finished"] >= 0.7 * WALKS * STATS["compiled"]


SUITE_FORMATS = SUITE_DIR / "draft2020-12" / "optional"


def _known_gap(fmt: str, description: str, data: object) -> bool:
    """Suite cases the local checkers knowingly accept: leap seconds at any time (as
    `rfc3339-validator` does) and IDNA rules of `xn--` labels."""
    if fmt in ("time", "date-time") and "leap second" in description:
        return True
    return fmt == "hostname" and isinstance(data, str) and data.lower().startswith("xn--")


@pytest.mark.parametrize("fmt", sorted({**OVERRIDES, **FALLBACK_CHECKERS}))
def test_local_format_checkers_agree_with_the_suite(fmt: str) -> None:
    """The oracle's own format checkers against JSON-Schema-Test-Suite's format tests."""
    path = SUITE_FORMATS / "format" / f"{fmt}.json"
    if not path.is_file():
        pytest.skip(f"{path} not found: needs ../shared/data")
    check = {**FALLBACK_CHECKERS, **OVERRIDES}[fmt]
    wrong = [
        (t["description"], t["data"], t["valid"])
        for g in json.loads(path.read_text())
        for t in g["tests"]
        if check(t["data"]) != t["valid"] and not _known_gap(fmt, t["description"], t["data"])
    ]
    assert not wrong
