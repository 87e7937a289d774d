r"""Random JSON Schemas and instances: tokensieve's masks against `jsonschema` (issue #32).

Each case is one seed. From it the generator (`SchemaGen`) builds a small random schema over every
keyword the compiler supports (`keywords.rs` SUPPORTED: type — single and lists —, enum, const,
properties/required/additionalProperties/minProperties/maxProperties/patternProperties/
propertyNames/dependentRequired/dependentSchemas, items/prefixItems/minItems/maxItems/
uniqueItems/contains/minContains/maxContains, minLength/maxLength/pattern/format,
minimum/maximum/exclusive*/multipleOf with decimal divisors, anyOf/oneOf/allOf/not/
if-then-else, $ref into $defs (recursive ones too), unevaluatedProperties/unevaluatedItems),
nested a few levels. It is compiled for a byte vocabulary (one token per byte plus a few
multi-byte tokens). A refusal must be one of tokensieve's typed errors (counted per class),
never another exception or a crash.

A schema refused as having no value at all ("no JSON value satisfies this schema") must have
none: random and schema-following values must all be invalid. For a schema that compiles,
instances come from four sources:
* random JSON values biased to the schema's own literals, names and bounds;
* values built by following the schema (`sample`), kept when `jsonschema` says they are valid;
* mutations of valid values (a property dropped or added, a value changed, an item added,
  removed or duplicated, a number moved by a little);
* the grammar's own random walks over the mask (every finished output must be UTF-8, one JSON
  document with whitespace only where `whitespace="default"` allows it, and valid).

Each instance is serialized as the documented language writes it and fed token by token (a random
segmentation into the vocabulary's tokens); at every step the mask bit of the token fed must
agree with `accept_token`, the mask must be closed under prefixes (a multi-byte token is allowed
only with every token that spells a prefix of it), and the EOS bit must agree with
`is_accepting()`. The verdict is compared with `jsonschema`'s Draft 2020-12 validator:
* an invalid instance must never be accepted, in whatever order or number spelling it is fed
  (schema order, a random key order, `1.0`/`1e0`/`-0` spellings); a finished walk must be valid;
* a valid instance serialized in schema order must be accepted, except where
  docs/json-schema.md documents a subset (`Case.exemption`: deeper than `max_nesting_depth`;
  a recursive `$ref` that the compiler unrolls `max_recursion_depth` times; and, for walk
  outputs only, duplicate additional keys, which are "not prevented"). Spellings outside the
  documented language are never fed as valid instances (see *Serialization*), so they need no
  exemption.

The oracle is exact where Python's semantics differ from JSON Schema's: numbers are parsed as
`Decimal` and `multipleOf` is decided in exact integer arithmetic (`is_multiple`: any exponent;
`multipleOf: 0.1` on 0.3 holds), integral values become `int` and the integer type accepts
integral Decimals (so `1.0` is an integer, as the spec says), patterns are ECMA-262 translated
to Python by the generator that wrote them (`$` → `\Z`, `.` without line terminators, ASCII
`\d`/`\w`), and the formats (`date`, `ipv4`, `uuid`, `duration`, and an unknown one) are
checked by the RFC grammars here, not by jsonschema's lenient checkers.

Serialization ("the documented language", docs/json-schema.md *JSON text*):
* separators `", "`/`": "` (json.dumps's default) or `","`/`":"` (compact), both "default"
  whitespace; strings as `json.dumps` writes them, with or without `ensure_ascii` (*Strings
  written in the schema*: "The JSON text json.dumps produces for a valid instance, with or
  without ensure_ascii, is always in the language");
* numbers: integral values as plain integers, others as the shortest decimal without exponent
  ("integer: no fraction, no exponent"; "number with bounds: no exponent");
* property order ("Property order is the order of `properties` in the schema ... Required names
  missing from `properties` come after them ... additional properties come after the declared
  ones"; dependencies: "names that only `required` introduces come after the declared
  properties, in `required` order"; `const`/`enum` objects: "property order as written").
  The docs do not say how the orders of several `properties` maps combine, so the schema order
  of an object is any of these candidates, and a valid instance must be accepted in at least
  one of them:
  - declared names: those of every `properties` map that applies to the object, by first
    appearance in a walk of the schema — the holder's own map first, then `$ref`'s target, the
    `allOf`, `anyOf`, `oneOf` branches, `not`, `if`, `then`, `else`, `dependentSchemas` (the
    order the schema text is written in, which the generator keeps) — or with the holder's own
    map after its `$ref` target and `allOf` branches (how `allOf` is merged);
  - a view decides which branches apply: all of them, or one `anyOf`/`oneOf` branch, `then` or
    `else`, each dependency's trigger present or absent, chosen at every choice point (the
    union view and up to 48 views per convention, consistently at every level of the instance);
  - then the names only `required` introduces (and a dependency whose trigger is present: the
    trigger, then what it needs), in their order; then the other keys;
  - names inside `not` keep their place (`¬properties {a, b}` still orders `a, b`), and so do
    the names of a negated `const`/`enum` object (`¬const {a: 1, b: 2}` orders `a, b`);
    an item beside `contains` takes `contains` or its negation (a choice, as a branch is);
  - an object equal in keys to a `const`/`enum` object that applies: that object's order.

A disagreement is minimized (keywords and sub-schemas removed, instance parts removed) and
reported with the schema, the text, and the expected and actual verdicts. `FOUND` lists the
minimized findings as regression cases.

Budget: `CI_EXAMPLES` seeds, derandomized, run by default; `TOKENSIEVE_FUZZ_EXAMPLES=N` runs `N`
random seeds instead; `TOKENSIEVE_FUZZ_COLLECT=path` writes every seed's findings and counts
there instead of failing (triage). `python tests/test_schema_fuzz.py --start S --count N
--budget B --out F.jsonl` runs seeds S..S+N-1 (B times the instances per schema) without
stopping at a finding, and writes every finding and the totals.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import tokensieve as ts

jsonschema = pytest.importorskip("jsonschema")

# ---- vocabulary -----------------------------------------------------------------------------

MULTI_TOKENS = [
    b'{"',
    b'"}',
    b'":',
    b'": ',
    b'", "',
    b'","',
    b", ",
    b"[1",
    b", 2]",
    b"true",
    b"false",
    b"null",
    b"12",
    b"0.",
    b".5",
    b"-1",
    b"ab",
    b"abc",
    b'"a',
    b'a"',
    b"\\u00",
    b"\\n",
    "é".encode(),
    b"}]",
    b'"]',
    b"{}",
    b"[]",
    b'""',
    b"-0",
    b"e+",
]
TOKENS: list[bytes] = [bytes([i]) for i in range(256)] + MULTI_TOKENS
EOS = len(TOKENS)
VOCAB = ts.Vocabulary(TOKENS + [b"<eos>"], eos_token_ids=[EOS])
TOKEN_ID = {t: i for i, t in enumerate(TOKENS)}
LONGEST = max(map(len, TOKENS))
# (token, proper prefix that is a token): the first must be allowed only with the second
_PAIRS = [
    (i, TOKEN_ID[t[:k]])
    for i, t in enumerate(TOKENS)
    for k in range(1, len(t))
    if t[:k] in TOKEN_ID
]
PAIR_TOKEN = np.array([p[0] for p in _PAIRS], dtype=np.int64)
PAIR_PREFIX = np.array([p[1] for p in _PAIRS], dtype=np.int64)
# tokens a random walk prefers, so that strings and containers close
PREFERRED = np.array(
    sorted(
        {TOKEN_ID[t] for t in [b'"', b"}", b"]", b",", b":", b" ", b"0", b"1", b"7", b"a"]}
        | {TOKEN_ID[t] for t in MULTI_TOKENS}
    ),
    dtype=np.int64,
)

COMPILE_OPTIONS: dict[str, Any] = {"max_compile_seconds": 5}
# the documented bounds the exemptions refer to (the defaults, see docs/json-schema.md *Options*)
MAX_NESTING_DEPTH = 64
MAX_RECURSION_DEPTH = 3

CI_EXAMPLES = 2000  # seeds in the default (CI) run (about 16 s on 2 cores)
TYPED_ERRORS = (ts.SchemaError, ts.BudgetError, ts.UnspellableError, ts.TokensieveError)

# ---- JSON helpers ---------------------------------------------------------------------------


def norm(v: Any) -> Any:
    """Integral Decimals become ints (JSON Schema: 1.0 is an integer), recursively."""
    if isinstance(v, Decimal):
        if v.is_finite() and v.adjusted() < 400 and v == v.to_integral_value():
            return int(v)
        return v  # huge exponents stay Decimal (the oracle's integer type accepts them)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def num_text(v: int | Decimal) -> str:
    if isinstance(v, Decimal):
        if abs(v.adjusted()) > 400:
            return str(v)  # only values a walk produced, where exponents are allowed
        return format(v.normalize(), "f")
    return str(v)


def dump(v: Any) -> str:
    """JSON text of a schema or value that may hold Decimals (written without exponent)."""
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, (int, Decimal)):
        return num_text(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(dump(x) for x in v) + "]"
    return (
        "{"
        + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {dump(x)}" for k, x in v.items())
        + "}"
    )


def depth_of(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max((depth_of(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((depth_of(x) for x in v.values()), default=0)
    return 0


def same(a: Any, b: Any) -> bool:
    """JSON equality (booleans apart from numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, Decimal)) and isinstance(b, (int, Decimal)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# ---- patterns: ECMA-262 text and its exact Python translation --------------------------------

# (ECMA text, Python text, sample characters)
PATTERN_ATOMS: list[tuple[str, str, str]] = [
    ("a", "a", "a"),
    ("b", "b", "b"),
    ("c", "c", "c"),
    ("0", "0", "0"),
    ("-", "-", "-"),
    ("é", "é", "é"),
    ("[a-c]", "[a-c]", "abc"),
    ("[0-9]", "[0-9]", "0179"),
    ("[^a]", "[^a]", "bz\né"),
    (".", "[^\\n\\r\\u2028\\u2029]", "ab0é"),
    ("\\d", "[0-9]", "09"),
    ("\\w", "[A-Za-z0-9_]", "aZ_1"),
    ("[bé]", "[bé]", "bé"),
]
NAME_ATOMS: list[tuple[str, str, str]] = [
    ("a", "a", "a"),
    ("b", "b", "b"),
    ("c", "c", "c"),
    ("d", "d", "d"),
    ("[cd]", "[cd]", "cd"),
    ("[^a]", "[^a]", "bcz"),
    ("é", "é", "é"),
]

# ECMA pattern text → (Python text, sampler); filled by the generator, read by the oracle
PATTERNS: dict[str, tuple[str, Callable[[random.Random], str]]] = {}


def gen_pattern(r: random.Random, atoms: list[tuple[str, str, str]]) -> str:
    """A random ECMA-262 pattern over `atoms`, registered in `PATTERNS` with its Python form
    and a sampler of matching strings. No `*`/`+` applies to something already repeated, so
    Python's backtracking `re` (the oracle's) stays polynomial: `((?:[^a])+)+$` would take it
    exponential time on a long key."""

    def node(d: int) -> tuple[str, str, Callable[[random.Random], str], bool]:
        k = r.random()
        if d >= 2 or k < 0.45:
            e, p, chars = r.choice(atoms)
            return e, p, lambda rr: rr.choice(chars), False
        if k < 0.65:
            parts = [node(d + 1) for _ in range(r.randint(2, 3))]
            return (
                "".join(x[0] for x in parts),
                "".join(x[1] for x in parts),
                lambda rr: "".join(x[2](rr) for x in parts),
                any(x[3] for x in parts),
            )
        if k < 0.8:
            parts = [node(d + 1) for _ in range(2)]
            return (
                "(?:" + "|".join(x[0] for x in parts) + ")",
                "(?:" + "|".join(x[1] for x in parts) + ")",
                lambda rr: rr.choice(parts)[2](rr),
                any(x[3] for x in parts),
            )
        e, p, f, repeated = node(d + 1)
        q, lo, hi = r.choice(
            [("*", 0, 3), ("+", 1, 3), ("?", 0, 1), ("{2}", 2, 2), ("{1,3}", 1, 3)]
        )
        if repeated and q in ("*", "+"):
            q, lo, hi = "?", 0, 1
        return (
            f"(?:{e}){q}",
            f"(?:{p}){q}",
            lambda rr: "".join(f(rr) for _ in range(rr.randint(lo, hi))),
            True,
        )

    e, p, f, _ = node(0)
    start, end = r.random() < 0.5, r.random() < 0.5
    ecma = ("^" if start else "") + e + ("$" if end else "")
    py = ("^" if start else "") + p + ("\\Z" if end else "")
    pad = [a[2] for a in atoms]

    def sample(rr: random.Random) -> str:
        s = f(rr)
        if not start and rr.random() < 0.3:
            s = rr.choice(rr.choice(pad)) + s
        if not end and rr.random() < 0.3:
            s += rr.choice(rr.choice(pad))
        return s

    PATTERNS.setdefault(ecma, (py, sample))
    return ecma


def py_pattern(ecma: str) -> str:
    return PATTERNS[ecma][0] if ecma in PATTERNS else ecma


def translate_patterns(s: Any) -> Any:
    """The schema with every pattern in Python syntax (for jsonschema, which uses `re`)."""
    if isinstance(s, list):
        return [translate_patterns(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k == "pattern" and isinstance(v, str):
            out[k] = py_pattern(v)
        elif k == "patternProperties" and isinstance(v, dict):
            out[k] = {py_pattern(p): translate_patterns(x) for p, x in v.items()}
        elif k in ("const", "enum"):
            out[k] = v
        else:
            out[k] = translate_patterns(v)
    return out


# ---- formats: the RFC grammars (docs/json-schema.md `format`) ---------------------------------

_DURATION = re.compile(
    # RFC 3339 appendix A
    r"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)"
)


def is_date(s: str) -> bool:
    m = re.fullmatch(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", s)
    if not m:
        return False
    y, mo, d = (int(x) for x in m.groups())
    leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return 1 <= mo <= 12 and 1 <= d <= days[mo - 1]


def is_ipv4(s: str) -> bool:
    parts = s.split(".")
    return len(parts) == 4 and all(
        re.fullmatch(r"0|[1-9][0-9]{0,2}", p) is not None and int(p) <= 255 for p in parts
    )


def is_uuid(s: str) -> bool:
    h = "[0-9a-fA-F]"
    return re.fullmatch(f"{h}{{8}}-{h}{{4}}-{h}{{4}}-{h}{{4}}-{h}{{12}}", s) is not None


FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "date": is_date,
    "ipv4": is_ipv4,
    "uuid": is_uuid,
    "duration": lambda s: _DURATION.fullmatch(s) is not None,
}
FORMATS = [*FORMAT_CHECKS, "color"]  # "color": unknown to tokensieve, any string
FORMAT_SAMPLES = {
    "date": ["2024-02-29", "2023-02-29", "2023-12-31", "2023-13-01", "2023-04-31", "0000-02-29"]
    + ["1900-02-29", "2000-02-29", "2023-1-01", "2023-04-30"],
    "ipv4": ["192.168.0.1", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3"],
    "uuid": [
        "123e4567-e89b-12d3-a456-426614174000",
        "123E4567-E89B-12D3-A456-42661417400F",
        "123e4567e89b12d3a456426614174000",
        "123e4567-e89b-12d3-a456-42661417400",
    ],
    "duration": ["P1D", "PT1H", "P1W", "P1Y2M3DT4H5M6S", "P1M1Y", "PT", "P", "P1DT", "PT1H1S"]
    + ["P1Y1D", "PT2M", "P2M3D"],
    "color": ["red", ""],
}


def _format_checker() -> Any:
    fc = jsonschema.FormatChecker(formats=())
    for name, check in FORMAT_CHECKS.items():
        fc.checks(name)(functools.partial(lambda c, v: not isinstance(v, str) or c(v), check))
    return fc


FORMAT_CHECKER = _format_checker()


def is_multiple(x: int | Decimal, m: int | Decimal) -> bool:
    """`x` is an integer multiple of `m`, exactly (any exponent; Decimal's `%` is bounded by
    its context's precision)."""
    tx, tm = Decimal(x).as_tuple(), Decimal(m).as_tuple()
    cx = int("".join(map(str, tx.digits)) or "0")
    cm = int("".join(map(str, tm.digits)) or "0")
    if cx == 0:
        return True
    d = int(tx.exponent) - int(tm.exponent)  # x / m = cx / cm * 10^d
    if d >= 0:
        return cx * pow(10, d, cm) % cm == 0
    if -d > len(str(cx)):
        return False  # cx < 10^-d <= cm * 10^-d
    return cx % (cm * 10**-d) == 0


def _multiple_of(validator: Any, m: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "number") and not is_multiple(instance, m):
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {m}")


def _is_integer(checker: Any, v: Any) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (
        isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value()
    )


Oracle = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"multipleOf": _multiple_of},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


def validator_for(schema: Any) -> Any:
    return Oracle(translate_patterns(schema), format_checker=FORMAT_CHECKER)


# ---- the schema generator -------------------------------------------------------------------

NAME_POOL = ["a", "b", "c", "d", "e"]
ODD_NAMES = ["é", 'q"', "a b", "\n"]
EXTRA_KEYS = ["z", "ab", ""]
INTS = [-3, -1, 0, 1, 2, 3, 5, 7, 10]
DECS = [Decimal(x) for x in ["-2.5", "-0.1", "0.1", "0.5", "1.5", "2.25", "3.75"]]
MULTS: list[int | Decimal] = [2, 3, 5] + [
    Decimal(x) for x in ["0.1", "0.25", "0.5", "1.5", "2.5", "0.3"]
]
STRINGS = ["", "a", "ab", "abc", "b", "é", 'x"y', "a\\b", "\n", "😀", "0", "-1"]
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]


class SchemaGen:
    """A random schema, and the literals, names and bounds it uses (to bias instances)."""

    def __init__(self, r: random.Random) -> None:
        self.r = r
        self.names = list(NAME_POOL)
        if r.random() < 0.25:
            self.names.insert(r.randrange(len(self.names)), r.choice(ODD_NAMES))
        self.defs: list[str] = []
        self.strings: list[str] = []
        self.numbers: list[int | Decimal] = []
        self.patterns: list[str] = []
        self.formats: list[str] = []
        self.size = 0

    # -- helpers --
    def p(self, x: float) -> bool:
        return self.r.random() < x

    def num(self, integral: bool = False) -> int | Decimal:
        v: int | Decimal = self.r.choice(INTS) if integral or self.p(0.6) else self.r.choice(DECS)
        self.numbers.append(v)
        return v

    def literal(self, depth: int = 0) -> Any:
        k = self.r.random()
        if k < 0.3:
            v: Any = self.num()
        elif k < 0.6:
            v = self.r.choice(STRINGS + self.names)
            self.strings.append(v)
        elif k < 0.7:
            v = None
        elif k < 0.8:
            v = self.p(0.5)
        elif k < 0.9 and depth == 0:
            v = [self.literal(1) for _ in range(self.r.randint(0, 2))]
        elif depth == 0:
            v = {n: self.literal(1) for n in self.r.sample(self.names, self.r.randint(0, 2))}
        else:
            v = self.num(True)
        return v

    def sorted_names(self, k: int) -> list[str]:
        picked = set(self.r.sample(self.names, k))
        return [n for n in self.names if n in picked]

    # -- schemas --
    def root(self) -> Any:
        if self.p(0.3):
            self.defs = [f"d{i}" for i in range(self.r.randint(1, 2))]
        defs = {name: self.schema(1) for name in self.defs}
        s = self.schema(0)
        if defs:
            if not isinstance(s, dict):
                s = {"allOf": [s]} if s is False else {}
            s["$defs"] = defs
        return s

    def schema(self, depth: int) -> Any:
        self.size += 1
        r = self.r
        if self.size > 16 or depth >= 4:
            return self.leaf()
        k = r.random()
        if k < 0.03:
            return r.choice([True, False, {}])
        if k < (0.25 if depth else 0.1) and self.defs:
            s: dict[str, Any] = {"$ref": f"#/$defs/{r.choice(self.defs)}"}
            if self.p(0.3):
                s.update(self.typed(depth, r.choice(TYPES)))
            return s
        if k < (0.3 if depth else 0.12):
            return self.leaf()
        if k < (0.45 if depth else 0.32) and depth < 3:
            return self.applicator(depth)
        if k < (0.52 if depth else 0.38):
            return self.untyped(depth)
        t: Any = r.choice(TYPES if depth else ["object", "object", "object", "array", *TYPES])
        if self.p(0.12):
            t = sorted({t, r.choice(TYPES)}, key=TYPES.index)
        s = self.typed(depth, t)
        if depth < 3 and self.p(0.25):
            s.update(self.applicator(depth))
        return s

    def leaf(self) -> Any:
        r = self.r
        k = r.random()
        if k < 0.25:
            return {"enum": [self.literal() for _ in range(r.randint(1, 4))]}
        if k < 0.35:
            return {"const": self.literal()}
        if k < 0.4 and self.defs:
            return {"$ref": f"#/$defs/{r.choice(self.defs)}"}
        t = r.choice(["null", "boolean", "integer", "number", "string"])
        return self.typed(3, t)

    def typed(self, depth: int, t: Any) -> dict[str, Any]:
        s: dict[str, Any] = {"type": t}
        ts_ = t if isinstance(t, list) else [t]
        for one in ts_:
            s.update(self.keywords(one, depth))
        if self.p(0.1):
            s["enum"] = [self.literal() for _ in range(self.r.randint(1, 3))]
        return s

    def untyped(self, depth: int) -> dict[str, Any]:
        s: dict[str, Any] = {}
        for one in self.r.sample(["integer", "string", "array", "object"], self.r.randint(1, 2)):
            s.update(self.keywords(one, depth))
        return s

    def keywords(self, t: str, depth: int) -> dict[str, Any]:
        r, p = self.r, self.p
        s: dict[str, Any] = {}
        if t in ("integer", "number"):
            integral = t == "integer"
            if p(0.4):
                s["minimum"] = self.num(integral and p(0.7))
            elif p(0.2):
                s["exclusiveMinimum"] = self.num(integral and p(0.7))
            if p(0.4):
                s["maximum"] = self.num(integral and p(0.7))
            elif p(0.2):
                s["exclusiveMaximum"] = self.num(integral and p(0.7))
            lo_kw = next((k for k in ("minimum", "exclusiveMinimum") if k in s), None)
            hi_kw = next((k for k in ("maximum", "exclusiveMaximum") if k in s), None)
            if lo_kw and hi_kw and s[lo_kw] > s[hi_kw] and p(0.8):
                s[lo_kw], s[hi_kw] = s[hi_kw], s[lo_kw]
            if p(0.35):
                m = r.choice(MULTS)
                s["multipleOf"] = m
                self.numbers.append(m)
        elif t == "string":
            if p(0.3):
                s["minLength"] = r.randint(0, 3)
            if p(0.3):
                s["maxLength"] = r.randint(0, 5)
            if p(0.3):
                pat = gen_pattern(r, PATTERN_ATOMS)
                self.patterns.append(pat)
                s["pattern"] = pat
            elif p(0.2):
                f = r.choice(FORMATS)
                self.formats.append(f)
                s["format"] = f
        elif t == "array" and depth < 4:
            if p(0.3) and depth < 3:
                s["prefixItems"] = [self.schema(depth + 1) for _ in range(r.randint(1, 2))]
            if p(0.6):
                if p(0.35):  # a finite domain (what uniqueItems needs)
                    s["items"] = r.choice(
                        [
                            {"enum": [self.literal(1) for _ in range(r.randint(1, 4))]},
                            {"type": "boolean"},
                            {"type": ["boolean", "null"]},
                            {"const": self.literal()},
                        ]
                    )
                else:
                    s["items"] = self.schema(depth + 1) if depth < 3 else self.leaf()
            elif p(0.1):
                s["items"] = False
            if p(0.3):
                s["minItems"] = r.randint(0, 2)
            if p(0.35):
                s["maxItems"] = r.randint(0, 4)
            if p(0.25):
                s["uniqueItems"] = p(0.85)
            if p(0.3):
                s["contains"] = self.schema(depth + 1) if depth < 3 else self.leaf()
                if p(0.4):
                    s["minContains"] = r.randint(0, 2)
                if p(0.4):
                    s["maxContains"] = r.randint(0, 2)
            if p(0.1):
                s["unevaluatedItems"] = False if p(0.5) else self.leaf()
        elif t == "object" and depth < 4:
            declared: list[str] = []
            if p(0.8):
                declared = self.sorted_names(r.randint(1, 3))
                s["properties"] = {
                    n: (self.schema(depth + 1) if depth < 3 else self.leaf()) for n in declared
                }
            if p(0.5):
                pool = declared + ([r.choice(self.names)] if p(0.2) else [])
                req = [n for n in self.names if n in pool and p(0.6)]
                if req:
                    s["required"] = req
            if p(0.2):
                pats = list(
                    dict.fromkeys(gen_pattern(r, NAME_ATOMS) for _ in range(r.randint(1, 2)))
                )
                s["patternProperties"] = {q: self.leaf() for q in pats}
            if p(0.35):
                s["additionalProperties"] = (
                    p(0.5) if p(0.6) else (self.schema(depth + 1) if depth < 3 else self.leaf())
                )
            if p(0.15):
                s["minProperties"] = r.randint(0, 2)
            if p(0.15):
                s["maxProperties"] = r.randint(0, 3)
            if p(0.1):
                k = r.random()
                if k < 0.4:
                    s["propertyNames"] = {"pattern": gen_pattern(r, NAME_ATOMS)}
                elif k < 0.7:
                    s["propertyNames"] = {"maxLength": r.randint(0, 2)}
                elif k < 0.85:
                    s["propertyNames"] = {"enum": r.sample(self.names, 3)}
                else:
                    s["propertyNames"] = r.choice(
                        [{"const": r.choice(self.names)}, {"format": "date"}, {"type": "string"}]
                    )
            if p(0.15):
                trig = r.choice(self.names)
                s["dependentRequired"] = {trig: self.sorted_names(r.randint(1, 2))}
            if p(0.1) and depth < 3:
                s["dependentSchemas"] = {r.choice(self.names): self.schema(depth + 1)}
            if p(0.1):
                s["unevaluatedProperties"] = False if p(0.5) else self.leaf()
        return s

    def applicator(self, depth: int) -> dict[str, Any]:
        r = self.r
        k = r.random()
        if k < 0.25:
            return {"anyOf": [self.schema(depth + 1) for _ in range(r.randint(2, 3))]}
        if k < 0.45:
            return {"oneOf": [self.schema(depth + 1) for _ in range(r.randint(2, 3))]}
        if k < 0.65:
            return {"allOf": [self.schema(depth + 1) for _ in range(r.randint(1, 2))]}
        if k < 0.82:
            return {"not": self.schema(depth + 1)}
        s = {"if": self.schema(depth + 1), "then": self.schema(depth + 1)}
        if self.p(0.6):
            s["else"] = self.schema(depth + 1)
        return s


# ---- schema navigation: contexts and orders ---------------------------------------------------


def deref(root: Any, ref: str) -> Any:
    if isinstance(root, dict) and ref.startswith("#/$defs/"):
        return root.get("$defs", {}).get(ref[len("#/$defs/") :])
    return None


Pick = Callable[[dict[str, Any], str, int], "int | None"]


def every_branch(s: dict[str, Any], kw: str, n: int) -> int | None:
    """The union view: every `anyOf`/`oneOf` branch, both `then` and `else`, every dependency."""
    return None


def flat(root: Any, schemas: list[Any], pick: Pick = every_branch) -> list[dict[str, Any]]:
    """Every keyword map that may apply where `schemas` apply (through every applicator; at a
    choice point only the branch `pick` chooses, if it chooses one)."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()

    def visit(s: Any) -> None:
        if not isinstance(s, dict) or id(s) in seen:
            return
        seen.add(id(s))
        out.append(s)
        if isinstance(s.get("$ref"), str):
            visit(deref(root, s["$ref"]))
        for b in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            visit(b)
        for kw in ("anyOf", "oneOf"):
            bs = s.get(kw) if isinstance(s.get(kw), list) else []
            k = pick(s, kw, len(bs)) if bs else None
            for i, b in enumerate(bs):
                if k is None or k == i:
                    visit(b)
        visit(s.get("not"))
        if "if" in s:
            visit(s["if"])
            k = pick(s, "if", 2)
            if k in (None, 0):
                visit(s.get("then"))
            if k in (None, 1):
                visit(s.get("else"))
        if isinstance(s.get("dependentSchemas"), dict):
            for name, b in s["dependentSchemas"].items():
                if pick(s, f"dep:{name}", 2) in (None, 0):
                    visit(b)

    for s in schemas:
        visit(s)
    return out


def child_of_property(root: Any, ctx: list[Any], key: str, pick: Pick = every_branch) -> list[Any]:
    out: list[Any] = []
    for s in flat(root, ctx, pick):
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        if key in props:
            out.append(props[key])
        else:
            matched = False
            pats = s.get("patternProperties")
            for q, sub in pats.items() if isinstance(pats, dict) else []:
                if re.search(py_pattern(q), key):
                    out.append(sub)
                    matched = True
            if not matched and isinstance(s.get("additionalProperties"), dict):
                out.append(s["additionalProperties"])
        if isinstance(s.get("unevaluatedProperties"), dict):
            out.append(s["unevaluatedProperties"])
        for lit in literals(s):  # inside a const/enum object, its member's value as written
            if isinstance(lit, dict) and key in lit:
                out.append({"const": lit[key]})
    return out


def literals(s: dict[str, Any]) -> list[Any]:
    """The `const` and `enum` values of a keyword map."""
    out = [s["const"]] if "const" in s else []
    return out + (s["enum"] if isinstance(s.get("enum"), list) else [])


def child_of_item(root: Any, ctx: list[Any], i: int, pick: Pick = every_branch) -> list[Any]:
    out: list[Any] = []
    for s in flat(root, ctx, pick):
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        if i < len(prefix):
            out.append(prefix[i])
        elif isinstance(s.get("items"), dict):
            out.append(s["items"])
        if isinstance(s.get("contains"), dict):
            # an item matches `contains` or not (its negation, which declares names too)
            out.append({"anyOf": [s["contains"], {"not": s["contains"]}]})
        if isinstance(s.get("unevaluatedItems"), dict):
            out.append(s["unevaluatedItems"])
        for lit in literals(s):
            if isinstance(lit, list) and i < len(lit):
                out.append({"const": lit[i]})
    return out


def declared_order(root: Any, ctx: list[Any], own_first: bool, pick: Pick) -> list[str]:
    """The names an object's schema declares, in schema order (see the module docstring)."""
    decl: list[str] = []
    req: list[str] = []
    path: set[int] = set()

    def own(s: dict[str, Any], neg: bool) -> None:
        if isinstance(s.get("properties"), dict):
            decl.extend(s["properties"])
        if neg:
            # an object other than a listed one declares the listed names
            for lit in literals(s):
                if isinstance(lit, dict):
                    decl.extend(lit)
        if not neg and isinstance(s.get("required"), list):
            req.extend(x for x in s["required"] if isinstance(x, str))

    def visit(s: Any, neg: bool) -> None:
        if not isinstance(s, dict) or id(s) in path:
            return
        path.add(id(s))
        if own_first:
            own(s, neg)
        if isinstance(s.get("$ref"), str):
            visit(deref(root, s["$ref"]), neg)
        for b in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            visit(b, neg)
        if not own_first:
            own(s, neg)
        for kw in ("anyOf", "oneOf"):
            bs = s.get(kw) if isinstance(s.get(kw), list) else []
            k = pick(s, kw, len(bs)) if bs else None
            if k is not None:
                visit(bs[k], neg)
            for i, b in enumerate(bs):
                if k is None:
                    visit(b, neg)
                elif kw == "oneOf" and i != k:  # exclusive: the other branches fail (negated)
                    visit(b, not neg)
        visit(s.get("not"), not neg)
        if "if" in s:
            k = pick(s, "if", 2)
            if k in (None, 0):  # `if` holds, then `then`
                visit(s["if"], neg)
                visit(s.get("then"), neg)
            if k in (None, 1):  # `if` fails (negated), then `else`
                visit(s["if"], not neg)
                visit(s.get("else"), neg)
        # a dependency is a choice: its trigger absent, or present and required with what it
        # needs (negated: present, and a dependency absent or the schema failing)
        if isinstance(s.get("dependentRequired"), dict):
            for name, deps in s["dependentRequired"].items():
                if pick(s, f"dep:{name}", 2) in (None, 0):
                    req.append(name)
                    if not neg:
                        req.extend(d for d in deps if isinstance(d, str))
        if isinstance(s.get("dependentSchemas"), dict):
            for name, sub in s["dependentSchemas"].items():
                if pick(s, f"dep:{name}", 2) in (None, 0):
                    req.append(name)
                    visit(sub, neg)
        path.discard(id(s))

    for s in ctx:
        visit(s, False)
    return list(dict.fromkeys(decl + req))


def order_keys(declared: list[str], keys: list[str]) -> list[str]:
    ks = set(keys)
    first = [n for n in declared if n in ks]
    return first + [k for k in keys if k not in set(first)]


MAX_VIEWS = 24  # branch choices enumerated per object schema and convention


def views(root: Any, ctx: list[Any]) -> list[list[str]]:
    """The declared-name orders of an object schema: both conventions, with all branches and
    with each combination of one `anyOf`/`oneOf` branch and `then` or `else` (the first
    `MAX_VIEWS` combinations, in odometer order)."""
    out: list[list[str]] = []
    for own_first in (True, False):
        out.append(declared_order(root, ctx, own_first, every_branch))
        seq: list[int] = []
        for _ in range(MAX_VIEWS):
            arities: list[int] = []

            def pick(
                s: dict[str, Any],
                kw: str,
                n: int,
                arities: list[int] = arities,
                seq: list[int] = seq,
            ) -> int:
                i = len(arities)
                arities.append(n)
                return seq[i] if i < len(seq) else 0

            out.append(declared_order(root, ctx, own_first, pick))
            full = [seq[i] if i < len(seq) else 0 for i in range(len(arities))]
            j = len(full) - 1
            while j >= 0 and full[j] + 1 >= arities[j]:
                j -= 1
            if j < 0:
                break
            seq = full[:j] + [full[j] + 1]
    uniq: list[list[str]] = []
    for o in out:
        if o not in uniq:
            uniq.append(o)
    return uniq


def candidate_orders(
    root: Any, ctx: list[Any], keys: list[str], cache: dict[str, Any]
) -> list[list[str]]:
    """The schema orders of an object with `keys` where `ctx` applies (module docstring)."""
    ck = dump(ctx)
    if ck not in cache:
        # const/enum objects: "element/property order as written" (Keywords, `const`, `enum`)
        lits = [lit for s in flat(root, ctx) for lit in literals(s) if isinstance(lit, dict)]
        cache[ck] = (lits, views(root, ctx))
    lits, vs = cache[ck]
    out = [list(lit) for lit in lits if set(lit) == set(keys)]
    out += [order_keys(v, keys) for v in vs]
    uniq: list[list[str]] = []
    for o in out:
        if o not in uniq:
            uniq.append(o)
    return uniq


# ---- serialization ---------------------------------------------------------------------------


class Spelling:
    """How one text writes an instance: separators, ensure_ascii, property orders, numbers."""

    def __init__(
        self,
        r: random.Random,
        strategy: int,
        compact: bool,
        ensure_ascii: bool,
        odd_numbers: bool = False,
        cache: dict[str, Any] | None = None,
        view: tuple[Pick, bool] | None = None,
    ) -> None:
        self.r = r
        # a global view: one branch at every choice point, and the convention (own_first)
        self.view = view
        self.cache: dict[str, Any] = {} if cache is None else cache
        # k: the k-th candidate order of every object (a random one where there are fewer);
        # -1: the value's own order; 99: a random permutation (the last two: soundness only)
        self.strategy = strategy
        self.item_sep, self.key_sep = (",", ":") if compact else (", ", ": ")
        self.ensure_ascii = ensure_ascii
        self.odd_numbers = odd_numbers

    @property
    def pick(self) -> Pick:
        return self.view[0] if self.view is not None else every_branch

    def number(self, v: int | Decimal) -> str:
        t = num_text(v)
        if self.odd_numbers and self.r.random() < 0.5:
            k = self.r.random()
            if k < 0.4:
                t = t + ".0" if "." not in t else t + "0"
            elif k < 0.6:
                t = t + "e0"
            elif k < 0.8 and t in ("0", "0.0"):
                t = "-" + t
            else:
                t = t + "E+0"
        return t

    def order(self, root: Any, ctx: list[Any], keys: list[str]) -> list[str]:
        if self.view is not None:
            pick, own_first = self.view
            for lit in (x for n in flat(root, ctx, pick) for x in literals(n)):
                if isinstance(lit, dict) and set(lit) == set(keys):
                    return list(lit)
            return order_keys(declared_order(root, ctx, own_first, pick), keys)
        if self.strategy < 0:  # as the value holds them (texts fed for soundness only)
            return keys
        if self.strategy == 99:  # a random permutation (soundness only)
            ks = list(keys)
            self.r.shuffle(ks)
            return ks
        cands = candidate_orders(root, ctx, keys, self.cache)
        if self.strategy < len(cands):
            return cands[self.strategy]
        return self.r.choice(cands)

    def write(self, root: Any, v: Any, ctx: list[Any]) -> str:
        if v is None or isinstance(v, bool):
            return json.dumps(v)
        if isinstance(v, (int, Decimal)):
            return self.number(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=self.ensure_ascii)
        if isinstance(v, list):
            return (
                "["
                + self.item_sep.join(
                    self.write(root, x, child_of_item(root, ctx, i, self.pick))
                    for i, x in enumerate(v)
                )
                + "]"
            )
        keys = self.order(root, ctx, list(v))
        return (
            "{"
            + self.item_sep.join(
                json.dumps(k, ensure_ascii=self.ensure_ascii)
                + self.key_sep
                + self.write(root, v[k], child_of_property(root, ctx, k, self.pick))
                for k in keys
            )
            + "}"
        )


# ---- feeding ----------------------------------------------------------------------------------


class Stats(Counter):  # type: ignore[type-arg]
    pass


def mask_bits(m: ts.Matcher, bm: Any) -> np.ndarray:
    m.fill_next_token_bitmask(bm)
    return np.unpackbits(np.asarray(bm)[0].view(np.uint8), bitorder="little")[: EOS + 1]


class Disagreement(AssertionError):
    pass


class OracleError(Exception):
    """jsonschema could not judge a value (a `$ref` cycle, a number it cannot hold)."""


def check_mask(bits: np.ndarray, m: ts.Matcher, where: str) -> None:
    bad = bits[PAIR_TOKEN] & (1 - bits[PAIR_PREFIX])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise Disagreement(
            f"mask not prefix-closed after {where}: {TOKENS[PAIR_TOKEN[k]]!r} allowed, "
            f"{TOKENS[PAIR_PREFIX[k]]!r} not"
        )
    if bool(bits[EOS]) != m.is_accepting():
        raise Disagreement(
            f"EOS bit {bool(bits[EOS])} but is_accepting() {m.is_accepting()} after {where}"
        )


def feed(g: ts.Grammar, text: str, r: random.Random, stats: Stats) -> bool | None:
    """Whether `g` accepts `text` (a random tokenization), every step checked; None: budget."""
    data = text.encode()
    m = g.matcher()
    bm = ts.allocate_token_bitmask(1, VOCAB.vocab_size)
    i = 0
    stats["texts_fed"] += 1
    try:
        while i < len(data):
            options = [
                TOKEN_ID[data[i : i + n]]
                for n in range(min(LONGEST, len(data) - i), 0, -1)
                if data[i : i + n] in TOKEN_ID
            ]
            tok = options[0] if r.random() < 0.6 else r.choice(options)
            bits = mask_bits(m, bm)
            stats["steps"] += 1
            where = repr(data[:i])
            check_mask(bits, m, where)
            ok = m.accept_token(tok)
            if ok != bool(bits[tok]):
                raise Disagreement(
                    f"mask bit {bool(bits[tok])} but accept_token {ok} for {TOKENS[tok]!r} after {where}"
                )
            if not ok:
                return False
            i += len(TOKENS[tok])
        bits = mask_bits(m, bm)
        check_mask(bits, m, repr(data))
        return m.accept_token(EOS)
    except ts.BudgetError:
        stats["feed_budget"] += 1
        return None


# ---- the oracle and instance sources ----------------------------------------------------------


class Case:
    """One schema, compiled, with its oracle."""

    def __init__(self, root: Any, gen: SchemaGen | None, g: Any) -> None:
        self.root = root
        self.gen = gen
        self.g = g
        self.validator = validator_for(root)
        self.orders: dict[str, Any] = {}  # candidate_orders' cache
        # jsonschema recurses without end on a $ref cycle that stays on one value, and where
        # the RecursionError meets rpds (referencing's maps) it surfaces as a Rust panic that
        # prints to stderr: such oracle calls run with stderr silenced
        self.quiet = in_place_ref_cycle(root)
        self.unrolls = recursive(root) and uses_unrolling(root)

    def valid(self, v: Any) -> bool:
        """jsonschema's verdict; `OracleError` where it cannot give one."""
        try:
            if self.quiet:
                with quiet_stderr():
                    return bool(self.validator.is_valid(v))
            return bool(self.validator.is_valid(v))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # e.g. RecursionError on a $ref cycle, or rpds's panic on it
            raise OracleError(type(e).__name__) from e

    def exemption(self, v: Any) -> str | None:
        """A documented subset that may refuse this valid instance (docs/json-schema.md)."""
        d = depth_of(v)
        # "max_nesting_depth | 64 | levels of nested arrays/objects inside an unconstrained
        # ("any JSON") value" (Options): deeper valid values are not produced
        if d > MAX_NESTING_DEPTH:
            return "max_nesting_depth"
        # Nesting and recursion: "inside schemas with unevaluatedProperties/unevaluatedItems ...
        # a $ref may be entered max_recursion_depth times ... $ref cycles met while expanding
        # not, oneOf exclusivity or if/then/else are always unrolled this way"
        if self.unrolls and d >= MAX_RECURSION_DEPTH:
            return "max_recursion_depth"
        return None


IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")


def in_place_ref_cycle(root: Any) -> bool:
    """Whether a `$defs` entry reaches itself through `$ref`s and keywords that apply to the
    same value (no `properties`, `items`, ... in between)."""
    if not isinstance(root, dict) or not isinstance(root.get("$defs"), dict):
        return False
    defs = root["$defs"]

    def refs(s: Any) -> Iterator[str]:
        if not isinstance(s, dict):
            return
        r = s.get("$ref")
        if isinstance(r, str) and r.startswith("#/$defs/"):
            yield r[len("#/$defs/") :]
        for kw in IN_PLACE:
            x = s.get(kw)
            subs = (
                x
                if isinstance(x, list)
                else list(x.values())
                if kw == "dependentSchemas" and isinstance(x, dict)
                else [x]
            )
            for sub in subs:
                yield from refs(sub)

    graph = {d: set(refs(x)) for d, x in defs.items()}
    for d in graph:
        todo, seen = list(graph[d]), set()
        while todo:
            x = todo.pop()
            if x == d:
                return True
            if x not in seen and x in graph:
                seen.add(x)
                todo.extend(graph[x])
    return False


class quiet_stderr:
    """Silence file descriptor 2 (Rust panic messages) for a block."""

    def __enter__(self) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)


def recursive(root: Any) -> bool:
    if not isinstance(root, dict) or not isinstance(root.get("$defs"), dict):
        return False
    defs = root["$defs"]

    def refs(s: Any) -> Iterator[str]:
        if isinstance(s, dict):
            for k, x in s.items():
                if k == "$ref" and isinstance(x, str) and x.startswith("#/$defs/"):
                    yield x[len("#/$defs/") :]
                elif k not in ("const", "enum"):
                    yield from refs(x)
        elif isinstance(s, list):
            for x in s:
                yield from refs(x)

    graph = {d: set(refs(s)) for d, s in defs.items()}
    for d in graph:
        todo, seen = list(graph[d]), set()
        while todo:
            x = todo.pop()
            if x == d:
                return True
            if x not in seen and x in graph:
                seen.add(x)
                todo.extend(graph[x])
    return False


def uses_unrolling(s: Any) -> bool:
    if isinstance(s, dict):
        if any(k in s for k in ("not", "oneOf", "if", "unevaluatedProperties", "unevaluatedItems")):
            return True
        return any(uses_unrolling(x) for k, x in s.items() if k not in ("const", "enum"))
    if isinstance(s, list):
        return any(uses_unrolling(x) for x in s)
    return False


class Values:
    """Random JSON values biased to a schema's literals, and values built by following it."""

    def __init__(self, r: random.Random, gen: SchemaGen | None) -> None:
        self.r = r
        self.gen = gen
        self.names = (gen.names if gen else NAME_POOL) + EXTRA_KEYS
        self.strings = (gen.strings if gen else []) + STRINGS
        self.numbers: list[int | Decimal] = (gen.numbers if gen else []) + INTS[:4] + DECS[:3]
        self.formats = gen.formats if gen else []
        self.patterns = gen.patterns if gen else []

    def number(self) -> int | Decimal:
        r = self.r
        base = r.choice(self.numbers)
        k = r.random()
        if k < 0.4:
            return norm(Decimal(base))
        if k < 0.6:
            return norm(Decimal(base) + r.choice([-1, 1]))
        if k < 0.75:
            delta = r.choice([Decimal(x) for x in ("-0.1", "0.1", "0.5", "0.01", "-0.01", "0.05")])
            return norm(Decimal(base) + delta)
        if k < 0.9:
            return norm(Decimal(base) * r.choice([2, 3, -1, 4, Decimal("0.5")]))
        return r.randint(-20, 20)

    def string(self) -> str:
        r = self.r
        k = r.random()
        if k < 0.35:
            return r.choice(self.strings)
        if k < 0.55 and self.formats:
            return r.choice(FORMAT_SAMPLES[r.choice(self.formats)])
        if k < 0.75 and self.patterns:
            return PATTERNS[r.choice(self.patterns)][1](r)
        return "".join(r.choice('abcé0-"\\\n') for _ in range(r.randint(0, 4)))

    def any(self, depth: int = 0) -> Any:
        r = self.r
        k = r.random()
        if k < 0.08:
            return None
        if k < 0.15:
            return r.random() < 0.5
        if k < 0.4:
            return self.number()
        if k < 0.6:
            return self.string()
        if k < 0.8 and depth < 3:
            return [self.any(depth + 1) for _ in range(r.randint(0, 3))]
        if depth < 3:
            keys = r.sample(self.names, r.randint(0, 3))
            return {n: self.any(depth + 1) for n in keys}
        return self.number()

    # -- following a schema (best effort; jsonschema decides) --
    def sample(self, root: Any, s: Any, depth: int = 0) -> Any:
        r = self.r
        if depth > 5 or s is True or not isinstance(s, dict) or not s:
            return self.any(depth + 1)
        if isinstance(s.get("$ref"), str) and r.random() < 0.7:
            target = deref(root, s["$ref"])
            rest = {k: v for k, v in s.items() if k != "$ref"}
            return self.sample(root, merged(target, rest), depth + 1)
        if "const" in s and r.random() < 0.9:
            return s["const"]
        if isinstance(s.get("enum"), list) and s["enum"] and r.random() < 0.9:
            return r.choice(s["enum"])
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list) and s[kw]:
                rest = {k: v for k, v in s.items() if k != kw}
                return self.sample(root, merged(rest, r.choice(s[kw])), depth + 1)
        if isinstance(s.get("allOf"), list):
            rest = {k: v for k, v in s.items() if k != "allOf"}
            acc: Any = rest
            for b in s["allOf"]:
                acc = merged(acc, b)
            return self.sample(root, acc, depth + 1)
        if "if" in s and r.random() < 0.7:
            rest = {k: v for k, v in s.items() if k not in ("if", "then", "else")}
            branch = (
                merged(s["if"], s.get("then", True)) if r.random() < 0.5 else s.get("else", True)
            )
            return self.sample(root, merged(rest, branch), depth + 1)
        t = s.get("type")
        types = t if isinstance(t, list) else [t] if isinstance(t, str) else []
        if not types:
            hinted = [
                ty
                for ty, kws in [
                    (
                        "object",
                        ("properties", "required", "additionalProperties", "patternProperties"),
                    ),
                    ("array", ("items", "prefixItems", "contains", "minItems")),
                    ("string", ("pattern", "format", "minLength", "maxLength")),
                    ("number", ("minimum", "maximum", "multipleOf", "exclusiveMinimum")),
                ]
                if any(k in s for k in kws)
            ]
            types = hinted or TYPES
        ty = r.choice(types)
        if ty == "null":
            return None
        if ty == "boolean":
            return r.random() < 0.5
        if ty in ("integer", "number"):
            return self.sample_number(s, ty == "integer")
        if ty == "string":
            return self.sample_string(s)
        if ty == "array":
            return self.sample_array(root, s, depth)
        return self.sample_object(root, s, depth)

    def sample_number(self, s: dict[str, Any], integral: bool) -> int | Decimal:
        r = self.r
        lo = s.get("minimum", s.get("exclusiveMinimum"))
        hi = s.get("maximum", s.get("exclusiveMaximum"))
        lo = Decimal(lo) if isinstance(lo, (int, Decimal)) and not isinstance(lo, bool) else None
        hi = Decimal(hi) if isinstance(hi, (int, Decimal)) and not isinstance(hi, bool) else None
        m = s.get("multipleOf")
        m = Decimal(m) if isinstance(m, (int, Decimal)) and not isinstance(m, bool) else None
        start = lo if lo is not None else (hi - 3 if hi is not None else Decimal(r.randint(-5, 5)))
        for _ in range(8):
            if m is not None:
                k = (start / m).to_integral_value() + r.randint(-1, 3)
                v = k * m
            elif integral:
                v = Decimal(int(start) + r.randint(0, 3))
            else:
                v = start + r.choice(
                    [Decimal(0), Decimal("0.5"), Decimal(1), Decimal("0.25"), Decimal(2)]
                )
            if (lo is None or v >= lo) and (hi is None or v <= hi):
                break
        return norm(v)

    def sample_string(self, s: dict[str, Any]) -> str:
        r = self.r
        if isinstance(s.get("pattern"), str) and s["pattern"] in PATTERNS and r.random() < 0.8:
            return PATTERNS[s["pattern"]][1](r)
        if s.get("format") in FORMAT_SAMPLES and r.random() < 0.8:
            return r.choice(FORMAT_SAMPLES[s["format"]])
        lo = s.get("minLength", 0) if isinstance(s.get("minLength"), int) else 0
        hi = s.get("maxLength", lo + 3) if isinstance(s.get("maxLength"), int) else lo + 3
        n = r.randint(lo, max(lo, hi))
        return "".join(r.choice('abcé0-"\\\n😀') for _ in range(n))

    def sample_array(self, root: Any, s: dict[str, Any], depth: int) -> list[Any]:
        r = self.r
        prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
        lo = s.get("minItems", 0) if isinstance(s.get("minItems"), int) else 0
        hi = s.get("maxItems", lo + 3) if isinstance(s.get("maxItems"), int) else lo + 3
        n = r.randint(lo, max(lo, min(hi, 4)))
        items = s.get("items", True)
        out: list[Any] = []
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else items
            if "contains" in s and r.random() < 0.4:
                sub = merged(sub, s["contains"])
            out.append(self.sample(root, sub, depth + 1))
        if s.get("uniqueItems") is True:
            uniq: list[Any] = []
            for x in out:
                if not any(same(x, y) for y in uniq):
                    uniq.append(x)
            out = uniq
        return out

    def sample_object(self, root: Any, s: dict[str, Any], depth: int) -> dict[str, Any]:
        r = self.r
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        required = s.get("required") if isinstance(s.get("required"), list) else []
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or r.random() < 0.6:
                out[name] = self.sample(root, sub, depth + 1)
        extra = s.get("additionalProperties", True)
        for name in required:
            if name not in out:
                out[name] = self.sample(root, extra if isinstance(extra, dict) else True, depth + 1)
        pats = s.get("patternProperties") if isinstance(s.get("patternProperties"), dict) else {}
        for q, sub in pats.items():
            if q in PATTERNS and r.random() < 0.5:
                out.setdefault(PATTERNS[q][1](r), self.sample(root, sub, depth + 1))
        if extra is not False and r.random() < 0.3:
            out.setdefault(r.choice(self.names), self.sample(root, extra, depth + 1))
        deps = s.get("dependentRequired") if isinstance(s.get("dependentRequired"), dict) else {}
        for trig, names in deps.items():
            if trig in out:
                for name in names:
                    out.setdefault(name, self.any(depth + 1))
        return out

    # -- mutations --
    def mutate(self, v: Any, depth: int = 0) -> Any:
        r = self.r
        if isinstance(v, dict) and v and r.random() < 0.7:
            v = dict(v)
            k = r.random()
            key = r.choice(list(v))
            if k < 0.3:
                del v[key]
            elif k < 0.5:
                v[r.choice(self.names)] = self.any(depth + 1)
            else:
                v[key] = self.mutate(v[key], depth + 1)
            return v
        if isinstance(v, list) and r.random() < 0.7:
            v = list(v)
            k = r.random()
            if k < 0.25 and v:
                del v[r.randrange(len(v))]
            elif k < 0.45 and v:
                v.insert(r.randrange(len(v) + 1), r.choice(v))  # a duplicate
            elif k < 0.65:
                v.insert(r.randrange(len(v) + 1), self.any(depth + 1))
            elif v:
                i = r.randrange(len(v))
                v[i] = self.mutate(v[i], depth + 1)
            return v
        if isinstance(v, Decimal) and abs(v.adjusted()) > 50:
            return self.any(depth)
        if isinstance(v, (int, Decimal)) and not isinstance(v, bool) and r.random() < 0.7:
            return norm(
                Decimal(v) + r.choice([Decimal(x) for x in ("1", "-1", "0.1", "-0.1", "0.5", "-2")])
            )
        if isinstance(v, str) and r.random() < 0.6:
            if v and r.random() < 0.5:
                i = r.randrange(len(v))
                return v[:i] + v[i + 1 :]
            return v + r.choice("ab0-é")
        return self.any(depth)


def merged(a: Any, b: Any) -> Any:
    """A rough `allOf` of two schemas for the sampler (jsonschema has the last word)."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    out = dict(a)
    for k, v in b.items():
        if k == "properties" and isinstance(out.get(k), dict) and isinstance(v, dict):
            out[k] = {**out[k], **{n: merged(out[k].get(n, True), x) for n, x in v.items()}}
        elif k == "required" and isinstance(out.get(k), list) and isinstance(v, list):
            out[k] = list(dict.fromkeys(out[k] + v))
        elif k == "allOf" and isinstance(out.get(k), list) and isinstance(v, list):
            out[k] = out[k] + v
        elif k in out and k not in ("anyOf", "oneOf", "not", "if", "then", "else"):
            pass  # keep the first: the sampler is only a heuristic
        else:
            out[k] = v
    return out


# ---- one case -----------------------------------------------------------------------------------


EMPTY = "no JSON value satisfies this schema"  # the compiler's verdict "this schema is false"


def compile_schema(root: Any, stats: Stats) -> tuple[ts.Grammar | None, str | None]:
    """The grammar, or None with the typed error's class name. Anything else is re-raised."""
    t = time.monotonic()
    try:
        g = ts.Grammar.from_json_schema(dump(root), VOCAB, **COMPILE_OPTIONS)
    except TYPED_ERRORS as e:
        if str(e).endswith(EMPTY):
            return None, "SchemaError:empty"
        return None, type(e).__name__
    finally:
        took = time.monotonic() - t
        stats["compile_seconds_x1000"] += int(took * 1000)
        if took > COMPILE_OPTIONS["max_compile_seconds"] + 5:
            raise Disagreement(f"compile took {took:.1f} s, past its deadline")
    return g, None


def texts_for(case: Case, v: Any, r: random.Random, valid: bool) -> list[str]:
    """Serializations to feed: schema-order candidates; for invalid values also odd ones."""
    compact, ascii_ = r.random() < 0.3, r.random() < 0.7
    c = case.orders
    out = [
        Spelling(r, k, compact, ascii_, cache=c).write(case.root, v, [case.root]) for k in range(6)
    ]
    if not valid:
        out.append(Spelling(r, 99, compact, ascii_).write(case.root, v, [case.root]))
        if r.random() < 0.3:
            out.append(
                Spelling(r, 0, compact, ascii_, odd_numbers=True).write(case.root, v, [case.root])
            )
    return list(dict.fromkeys(out))


def check_value(
    case: Case, v: Any, r: random.Random, stats: Stats, source: str
) -> tuple[dict[str, Any] | None, bool]:
    """Compare the grammar with the oracle on one value: a finding or None, and the verdict."""
    v = norm(v)
    try:
        valid = case.valid(v)
    except OracleError as e:
        stats[f"oracle_error:{e}"] += 1
        return None, False
    return _check_value(case, v, r, stats, source, valid), valid


def _check_value(
    case: Case, v: Any, r: random.Random, stats: Stats, source: str, valid: bool
) -> dict[str, Any] | None:
    stats["valid" if valid else "invalid"] += 1
    stats[f"{source}:{'valid' if valid else 'invalid'}"] += 1
    texts = texts_for(case, v, r, valid)
    if not valid:
        for text in texts:
            if feed(case.g, text, r, stats):
                return finding("accepts an invalid instance", case, v, text)
        return None
    why = case.exemption(v)
    if why:
        stats[f"exempt:{why}"] += 1
        return None
    results = [feed(case.g, text, r, stats) for text in texts]
    if any(results) or None in results:
        return None
    # then every global view (one branch at each choice point), and every combination of the
    # objects' candidate orders (each up to a bound), before a verdict
    for text in itertools.chain(view_texts(case, v, texts[0]), all_texts(case, v, texts[0])):
        if text not in texts:
            stats["order_fallback_texts"] += 1
            if feed(case.g, text, r, stats) is not False:
                return None
    return finding("refuses a valid instance in schema order", case, v, texts[0])


def view_texts(case: Case, v: Any, like: str, cap: int = 48) -> Iterator[str]:
    """Texts of `v` in each global view: a choice of one branch at every `anyOf`/`oneOf`, of
    `then` or `else`, of each dependency's presence, applied consistently at every level
    (the first `cap` choice sequences in odometer order, for both conventions)."""
    compact = not re.search(r"[,:] ", like) and bool(re.search(r"[,:]", like))
    for own_first in (True, False):
        seq: list[int] = []
        for _ in range(cap):
            arities: list[int] = []
            memo: dict[tuple[int, str], int] = {}

            def pick(
                s: dict[str, Any],
                kw: str,
                n: int,
                arities: list[int] = arities,
                memo: dict[tuple[int, str], int] = memo,
                seq: list[int] = seq,
            ) -> int:
                key = (id(s), kw)
                if key not in memo:
                    i = len(arities)
                    arities.append(n)
                    memo[key] = seq[i] if i < len(seq) else 0
                return memo[key]

            sp = Spelling(random.Random(0), 0, compact, like.isascii(), view=(pick, own_first))
            yield sp.write(case.root, v, [case.root])
            full = [seq[i] if i < len(seq) else 0 for i in range(len(arities))]
            j = len(full) - 1
            while j >= 0 and full[j] + 1 >= arities[j]:
                j -= 1
            if j < 0:
                break
            seq = full[:j] + [full[j] + 1]


def all_texts(case: Case, v: Any, like: str, cap: int = 64) -> list[str]:
    """Texts of `v` in the combinations of every object's candidate orders (at most `cap`),
    spelled like `like` (separators and ensure_ascii)."""
    compact = not re.search(r"[,:] ", like) and bool(re.search(r"[,:]", like))
    sp = Spelling(random.Random(0), 0, compact, like.isascii(), cache=case.orders)

    def go(x: Any, ctx: list[Any]) -> list[str]:
        if isinstance(x, list):
            parts = [go(y, child_of_item(case.root, ctx, i))[:8] for i, y in enumerate(x)]
            combos = itertools.islice(itertools.product(*parts), cap)
            return ["[" + sp.item_sep.join(c) + "]" for c in combos]
        if isinstance(x, dict):
            out: list[str] = []
            for order in candidate_orders(case.root, ctx, list(x), case.orders):
                parts = [
                    [
                        json.dumps(k, ensure_ascii=sp.ensure_ascii) + sp.key_sep + t
                        for t in go(x[k], child_of_property(case.root, ctx, k))[:8]
                    ]
                    for k in order
                ]
                combos = itertools.islice(itertools.product(*parts), cap)
                out += ["{" + sp.item_sep.join(c) + "}" for c in combos]
                if len(out) >= cap:
                    break
            return out[:cap]
        return [sp.write(case.root, x, ctx)]

    return go(v, [case.root])


def finding(kind: str, case: Case, v: Any, text: str) -> dict[str, Any]:
    return {"kind": kind, "schema": dump(case.root), "instance": dump(v), "text": text}


def whitespace_outside_policy(text: str) -> int | None:
    """The index of whitespace outside strings that `whitespace="default"` does not allow
    (at most one space after `:` and `,`, nowhere else), or None."""
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in " \t\n\r" and (ch != " " or i == 0 or text[i - 1] not in ",:"):
            return i
    return None


def walk(case: Case, r: random.Random, stats: Stats, max_steps: int = 80) -> dict[str, Any] | Any:
    """A random walk over the mask; returns a finding, the finished value, or None."""
    m = case.g.matcher()
    bm = ts.allocate_token_bitmask(1, VOCAB.vocab_size)
    out = bytearray()
    stats["walks"] += 1
    try:
        for step in range(max_steps):
            bits = mask_bits(m, bm)
            stats["walk_steps"] += 1
            check_mask(bits, m, repr(bytes(out)))
            allowed = np.flatnonzero(bits)
            go_on = allowed[allowed != EOS]
            if bits[EOS] and (not len(go_on) or r.random() < 0.2 + step / 60):
                if not m.accept_token(EOS):
                    raise Disagreement("EOS in the mask but refused")
                break
            if not len(go_on):
                raise Disagreement(f"empty mask after {bytes(out)!r}")
            pref = np.intersect1d(go_on, PREFERRED)
            t = int(r.choice(list(pref if len(pref) and r.random() < 0.6 else go_on)))
            if not m.accept_token(t):
                raise Disagreement(f"{TOKENS[t]!r} in the mask but refused after {bytes(out)!r}")
            out += TOKENS[t]
        else:
            return None
    except ts.BudgetError:
        stats["walk_budget"] += 1
        return None
    stats["walks_finished"] += 1
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError:
        return {
            "kind": "walk output is not UTF-8",
            "schema": dump(case.root),
            "text": repr(bytes(out)),
        }
    bad_space = whitespace_outside_policy(text)
    if bad_space is not None:
        return {
            "kind": f"walk output breaks the whitespace policy at {bad_space}",
            "schema": dump(case.root),
            "text": text,
        }
    dups: list[str] = []

    def pairs(kv: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in kv]
        dups.extend(k for k in set(keys) if keys.count(k) > 1)
        return dict(kv)

    def no_constant(x: str) -> Any:
        raise ValueError(x)

    def number(x: str) -> Decimal:
        try:
            return Decimal(x)
        except ArithmeticError as e:  # an exponent beyond Decimal's range
            raise OracleError("number") from e

    try:
        value = json.loads(
            text,
            parse_float=number,
            parse_int=number,
            parse_constant=no_constant,
            object_pairs_hook=pairs,
        )
        value = norm(value)
    except ValueError:
        return {
            "kind": "walk output is not one JSON document",
            "schema": dump(case.root),
            "text": text,
        }
    except (OracleError, ArithmeticError):
        stats["oracle_error:number"] += 1
        return None
    if dups:
        # "Duplicate additional keys are not prevented" (JSON text, *Additional properties*)
        stats["walk_duplicate_keys"] += 1
        return None
    try:
        valid = case.valid(value)
    except OracleError as e:
        stats[f"oracle_error:{e}"] += 1
        return None
    if not valid:
        return {
            "kind": "walk outputs an invalid instance",
            "schema": dump(case.root),
            "instance": dump(value),
            "text": text,
        }
    stats["walk_valid"] += 1
    if has_huge_number(value):
        return None  # only spelled with an exponent here, which bounded numbers do not allow
    return ("value", value)


def has_huge_number(v: Any) -> bool:
    if isinstance(v, Decimal):
        return abs(v.adjusted()) > 400
    if isinstance(v, int) and not isinstance(v, bool):
        return len(str(abs(v))) > 400
    if isinstance(v, list):
        return any(has_huge_number(x) for x in v)
    if isinstance(v, dict):
        return any(has_huge_number(x) for x in v.values())
    return False


def check_empty(
    root: Any, gen: SchemaGen, r: random.Random, stats: Stats, budget: int, seed: int
) -> list[dict[str, Any]]:
    """A schema refused as having no value: random and schema-following values must all be
    invalid."""
    case = Case(root, gen, None)
    vals = Values(r, gen)
    for k in range(12 * budget):
        v = norm(vals.any() if k % 2 else vals.sample(root, root))
        try:
            valid = case.valid(v)
        except OracleError as e:
            stats[f"oracle_error:{e}"] += 1
            continue
        stats["empty:checked"] += 1
        if valid and not case.exemption(v):
            return [
                {
                    "kind": "refuses a satisfiable schema as empty",
                    "schema": dump(root),
                    "instance": dump(v),
                    "seed": seed,
                }
            ]
    return []


def run_case(seed: int, stats: Stats, budget: int = 1) -> list[dict[str, Any]]:
    """Generate, compile and check one schema; the findings (minimized)."""
    r = random.Random(seed)
    gen = SchemaGen(r)
    root = gen.root()
    stats["schemas"] += 1
    g, err = compile_schema(root, stats)
    if g is None:
        stats[f"refused:{err}"] += 1
        if err == "SchemaError:empty":  # then no value may be valid
            return [minimize(f) for f in check_empty(root, gen, r, stats, budget, seed)]
        return []
    stats["compiled"] += 1
    case = Case(root, gen, g)
    vals = Values(r, gen)
    found: list[dict[str, Any]] = []
    valid_pool: list[Any] = []

    def check(v: Any, source: str) -> None:
        if found:
            return
        try:
            f, valid = check_value(case, v, r, stats, source)
        except Disagreement as e:
            f, valid = finding(f"step check: {e}", case, norm(v), ""), False
        if f:
            found.append(f)
        elif valid and len(valid_pool) < 40:
            valid_pool.append(norm(v))

    for _ in range(4 * budget):
        try:
            w = walk(case, r, stats)
        except Disagreement as e:
            found.append({"kind": f"walk: {e}", "schema": dump(root)})
            break
        if isinstance(w, dict):
            found.append(w)
            break
        if w is not None:
            valid_pool.append(w[1])
    for _ in range(10 * budget):
        check(vals.any(), "random")
    for _ in range(10 * budget):
        check(vals.sample(root, root), "sampled")
    for _ in range(12 * budget):
        if not valid_pool:
            break
        check(vals.mutate(r.choice(valid_pool)), "mutated")
    for f in found:
        f["seed"] = seed
    return [minimize(f) for f in found]


# ---- minimization -----------------------------------------------------------------------------


def reproduces(kind: str, root: Any, v: Any) -> bool:
    g, err = compile_schema(root, Stats())
    if kind == "refuses a satisfiable schema as empty":
        if err != "SchemaError:empty":
            return False
        case = Case(root, None, None)
        try:
            return case.valid(v) and not case.exemption(v)
        except OracleError:
            return False
    if g is None:
        return False
    case = Case(root, None, g)
    try:
        valid = case.valid(v)
    except OracleError:
        return False
    r = random.Random(0)
    st_ = Stats()
    try:
        if kind == "accepts an invalid instance" or kind == "walk outputs an invalid instance":
            if valid:
                return False
            texts = [Spelling(r, -1, False, True).write(root, v, [root])]
            texts += texts_for(case, v, r, False)
            return any(feed(g, t, r, st_) for t in texts)
        if kind == "refuses a valid instance in schema order":
            if not valid or case.exemption(v):
                return False
            return not any(feed(g, t, r, st_) is not False for t in texts_for(case, v, r, True))
    except Disagreement:
        return False
    return False


def shrinks(v: Any) -> Iterator[Any]:
    """Smaller variants of a JSON value or schema, most aggressive first."""
    if isinstance(v, dict):
        for k in list(v):
            yield {x: y for x, y in v.items() if x != k}
        for k in list(v):
            for s in shrinks(v[k]):
                yield {**v, k: s}
    elif isinstance(v, list):
        for i in range(len(v)):
            yield v[:i] + v[i + 1 :]
        for i in range(len(v)):
            for s in shrinks(v[i]):
                yield v[:i] + [s] + v[i + 1 :]
    elif isinstance(v, str) and v:
        yield ""
        if len(v) > 1:
            yield v[1:]
            yield v[:-1]
    elif isinstance(v, Decimal):
        yield int(v) if abs(v.adjusted()) < 400 else 1
    elif isinstance(v, int) and not isinstance(v, bool) and v not in (0, 1):
        yield 0
        yield 1


def schema_shrinks(s: Any) -> Iterator[Any]:
    yield from (x for x in shrinks(s) if not isinstance(x, (str, int)) or isinstance(x, bool))
    if isinstance(s, dict):
        for k, x in s.items():
            if isinstance(x, dict) and k not in (
                "properties",
                "patternProperties",
                "$defs",
                "dependentSchemas",
                "dependentRequired",
                "const",
                "enum",
            ):
                yield {**s, k: True}


def minimize(f: dict[str, Any], max_tries: int = 600, max_seconds: float = 20.0) -> dict[str, Any]:
    kind = f["kind"]
    if "instance" not in f or kind not in (
        "refuses a satisfiable schema as empty",
        "accepts an invalid instance",
        "walk outputs an invalid instance",
        "refuses a valid instance in schema order",
    ):
        return f
    root = json.loads(f["schema"], parse_float=Decimal)
    v = json.loads(f["instance"], parse_float=Decimal)
    if not reproduces(kind, root, v):
        f["minimized"] = False
        return f
    tries, t0 = 0, time.monotonic()
    progress = True
    while progress and tries < max_tries and time.monotonic() - t0 < max_seconds:
        progress = False
        for cand in itertools.chain(schema_shrinks(root), ((None, x) for x in shrinks(v))):
            tries += 1
            if tries > max_tries or time.monotonic() - t0 > max_seconds:
                break
            nr, nv = (root, cand[1]) if isinstance(cand, tuple) else (cand, v)
            if reproduces(kind, nr, nv):
                root, v = nr, nv
                progress = True
                break
    g, _ = compile_schema(root, Stats())
    case = Case(root, None, g) if g is not None else None
    out = dict(f)
    out.update(schema=dump(root), instance=dump(v), minimized=True)
    if case is not None:
        r = random.Random(0)
        valid = case.valid(v)
        texts = texts_for(case, v, r, valid)
        out["texts"] = {t: feed(case.g, t, r, Stats()) for t in texts}
        out["text"] = texts[0]
        out["expected"] = "accept" if valid else "refuse"
        if valid:
            out["accepted_in_some_order"] = some_order_accepted(case, v)
    return out


def some_order_accepted(case: Case, v: Any) -> str | None:
    """A text of `v` in another key order that the grammar accepts (classifies a refusal)."""
    r = random.Random(0)
    objs = 0

    def count(x: Any) -> None:
        nonlocal objs
        if isinstance(x, dict):
            objs += 1
            for y in x.values():
                count(y)
        elif isinstance(x, list):
            for y in x:
                count(y)

    count(v)
    if objs == 0:
        return None
    for _ in range(200):
        text = Spelling(r, 99, False, True).write(case.root, v, [case.root])
        if feed(case.g, text, r, Stats()):
            return text
    return None


# ---- the tests ---------------------------------------------------------------------------------

_EXAMPLES = int(os.environ.get("TOKENSIEVE_FUZZ_EXAMPLES", "0"))
# a path: append each seed's findings and counts there and do not fail (triage of a CI run)
_COLLECT = os.environ.get("TOKENSIEVE_FUZZ_COLLECT", "")


def describe(findings: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(f, ensure_ascii=False, default=str) for f in findings)


@settings(
    max_examples=_EXAMPLES or CI_EXAMPLES,
    derandomize=not _EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    # a seed is not worth shrinking: a finding is minimized by `minimize` instead
    phases=[Phase.explicit, Phase.generate],
)
@given(st.integers(0, 2**40))
def test_random_schemas_agree_with_jsonschema(seed: int) -> None:
    stats = Stats()
    findings = run_case(seed, stats)
    if _COLLECT:  # triage: list every failing seed instead of stopping at the first
        with open(_COLLECT, "a") as out:
            out.write(
                json.dumps({"seed": seed, "findings": findings, "stats": stats}, default=str) + "\n"
            )
        return
    assert not findings, describe(findings)


# Disagreements the fuzzer found, minimized: (schema, text in schema order, must be accepted).
FOUND: list[tuple[Any, str, bool]] = [
    # issue #32 (known): uniqueItems dropped contains/minContains
    (
        {"type": "array", "items": {"enum": [1, 2]}, "contains": {"const": 1}, "uniqueItems": True},
        "[]",
        False,
    ),
    (
        {"type": "array", "items": {"enum": [1, 2]}, "contains": {"const": 1}, "uniqueItems": True},
        "[2]",
        False,
    ),
    ({"items": {"type": "boolean"}, "uniqueItems": True, "contains": True}, "[]", False),
    ({"maxItems": 0, "uniqueItems": True, "contains": True}, "[]", False),
    ({"items": False, "uniqueItems": True, "contains": True}, "[]", False),
    (
        {"properties": {"e": {"items": {"enum": []}, "uniqueItems": True, "contains": {}}}},
        '{"e": []}',
        False,
    ),
    # issue #32 (known): a negated `properties` loses the schema order (through not, if, oneOf)
    (
        {"not": {"properties": {"a": {"type": "null"}, "b": {"type": "integer", "minimum": 7}}}},
        '{"a": null, "b": 6}',
        True,
    ),
    (
        {"if": {"properties": {"a": {}, "c": {"enum": []}}}, "then": True},
        '{"a": 0, "c": null}',
        True,
    ),
    (
        {"oneOf": [{}, {"properties": {"c": {}, "d": {"type": "string"}}}]},
        '{"c": 1, "d": null}',
        True,
    ),
    # ¬dependentRequired allows non-objects (dependentRequired holds for them, its negation not)
    ({"not": {"dependentRequired": {"b": ["a"]}}}, "false", False),
    ({"not": {"dependentRequired": {"b": ["a"]}}}, "0", False),
    ({"oneOf": [{"dependentRequired": {"c": ["a"]}}, {}]}, "false", False),
    (
        {"properties": {"d": {"contains": {"dependentRequired": {"e": ["a"]}}, "maxContains": 1}}},
        '{"d": [null, null]}',
        False,
    ),
    # ¬dependentSchemas allows non-objects too (its sub-schema's negation lets them through)
    ({"not": {"dependentSchemas": {"d": {"type": "number"}}}}, "null", False),
    ({"oneOf": [{"dependentSchemas": {"b": False}}, {}]}, "false", False),
    # a negated properties beside a negated required: the term "a absent" forgets that b is
    # declared, so b comes after the required-only d (the rest of issue #32's order defect)
    (
        {"not": {"properties": {"b": {}}, "required": ["a"]}, "required": ["d"]},
        '{"b": "", "d": ""}',
        True,
    ),
    (
        {
            "if": {"allOf": [{"properties": {"b": {}}, "required": ["a"]}]},
            "else": {"required": ["d"]},
        },
        '{"b": "", "d": ""}',
        True,
    ),
    # A name declared only in a branch the value does not take (the oneOf branch it fails, the
    # positive `properties` under a double negation when the value takes the other term) is an
    # additional property for that value (docs/json-schema.md, *Property order*): it comes after
    # the required-only names and the names of the branches taken, so these are the texts in
    # schema order (the reverse order is outside the documented language)
    (
        {
            "required": ["e"],
            "oneOf": [{"type": "object"}, {"properties": {"b": {}}, "additionalProperties": False}],
        },
        '{"e": 0, "b": []}',
        True,
    ),
    (
        {
            "allOf": [
                {"not": {"type": "integer", "not": {"properties": {"e": {"enum": []}}}}},
                {"properties": {"a": {}}},
            ]
        },
        '{"a": true, "e": ""}',
        True,
    ),
    # contains beside its own negation (one conjunction: allOf, not, oneOf exclusivity, a
    # recursive $ref under not) keeps only the negated count: arrays without a match pass
    ({"contains": {}, "not": {"contains": {}}}, "[]", False),
    ({"type": "array", "contains": {"const": 1}, "not": {"contains": {"const": 1}}}, "[2]", False),
    ({"oneOf": [{"contains": {"const": 1}}, {"contains": {"const": 1}}]}, "[2]", False),
    (
        {"$ref": "#/$defs/d0", "$defs": {"d0": {"contains": {}, "not": {"$ref": "#/$defs/d0"}}}},
        "[]",
        False,
    ),
    # unevaluated*: a branch holding $ref and unevaluatedProperties/Items sees the holder's
    # properties/items as evaluated (without the $ref it does not)
    (
        {
            "properties": {"a": {}},
            "allOf": [{"$ref": "#/$defs/d", "unevaluatedProperties": False}],
            "$defs": {"d": {}},
        },
        '{"a": 1}',
        False,
    ),
    (
        {
            "additionalProperties": {},
            "oneOf": [{"$ref": "#/$defs/d", "unevaluatedProperties": False}],
            "$defs": {"d": {}},
        },
        '{"ab": {}}',
        False,
    ),
    (
        {
            "prefixItems": [{}],
            "allOf": [{"$ref": "#/$defs/d", "unevaluatedItems": False}],
            "$defs": {"d": {}},
        },
        "[1]",
        False,
    ),
    # a dependentRequired trigger listed among its own dependencies empties the language
    ({"dependentRequired": {"c": ["c"]}}, '{"c": 1}', True),
    ({"dependentRequired": {"c": ["c", "a"]}}, '{"c": 1, "a": 2}', True),
]


@pytest.mark.parametrize(("schema", "text", "accept"), FOUND)
def test_found_disagreements(schema: Any, text: str, accept: bool) -> None:
    """The minimized findings (this test fails until they are fixed)."""
    assert validator_for(schema).is_valid(norm(json.loads(text, parse_float=Decimal))) == accept
    g, err = compile_schema(schema, Stats())
    if g is None and not accept:
        return  # a typed refusal of the whole schema accepts nothing either
    assert g is not None, err
    assert feed(g, text, random.Random(0), Stats()) == accept, (schema, text)


def test_oracle_is_exact() -> None:
    """The oracle's own corner cases: decimal multipleOf, 1.0 as integer, ECMA `$`, formats."""
    assert validator_for({"multipleOf": Decimal("0.1")}).is_valid(norm(Decimal("0.3")))
    assert not validator_for({"multipleOf": Decimal("0.1")}).is_valid(norm(Decimal("0.35")))
    assert validator_for({"type": "integer"}).is_valid(norm(Decimal("1.0")))
    assert validator_for({"type": "integer", "multipleOf": 3}).is_valid(norm(Decimal("3e999999")))
    assert not validator_for({"multipleOf": Decimal("0.3")}).is_valid(norm(Decimal("1e-999999")))
    assert validator_for({"multipleOf": Decimal("2.5")}).is_valid(norm(Decimal("7.5")))
    for x, m in itertools.product(["0", "0.3", "7.5", "-12", "1e3", "2.5e-2", "44"], MULTS):
        exact = Fraction(Decimal(x)) / Fraction(Decimal(m))
        assert is_multiple(Decimal(x), m) == (exact.denominator == 1), (x, m)
    r = random.Random(0)
    while True:
        pat = gen_pattern(r, PATTERN_ATOMS)
        if pat.endswith("$"):
            break
    assert py_pattern(pat).endswith("\\Z")
    assert validator_for({"format": "date"}).is_valid("2000-02-29")
    assert not validator_for({"format": "date"}).is_valid("1900-02-29")
    assert not validator_for({"format": "ipv4"}).is_valid("01.2.3.4")
    assert not validator_for({"format": "duration"}).is_valid("PT1H1S")
    assert validator_for({"format": "duration"}).is_valid("P1Y2M3DT4H5M6S")
    assert validator_for({"format": "color"}).is_valid("anything")
    assert whitespace_outside_policy('{"a b": [1, 2], "c":3}') is None
    assert whitespace_outside_policy('{"a":  1}') == 6
    assert whitespace_outside_policy(" 1") == 0


# ---- the large run -------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--out", default="-")
    ap.add_argument("--budget", type=int, default=1)
    a = ap.parse_args()
    stats = Stats()
    findings: list[dict[str, Any]] = []
    t0 = time.monotonic()
    out = sys.stdout if a.out == "-" else open(a.out, "a")  # noqa: SIM115
    for seed in range(a.start, a.start + a.count):
        with open(f"{a.out}.current" if a.out != "-" else os.devnull, "w") as cur:
            cur.write(str(seed))
        try:
            fs = run_case(seed, stats, a.budget)
        except Disagreement as e:
            fs = [{"kind": f"disagreement: {e}", "seed": seed}]
        except Exception as e:  # noqa: BLE001 - any other exception type is a finding
            fs = [{"kind": f"exception {type(e).__name__}: {e}", "seed": seed}]
        except BaseException as e:  # a Rust panic surfaces as a BaseException
            if isinstance(e, KeyboardInterrupt):
                raise
            fs = [{"kind": f"panic {type(e).__name__}: {e}", "seed": seed}]
        for f in fs:
            stats["findings"] += 1
            findings.append(f)
            out.write(json.dumps({"finding": f}, ensure_ascii=False, default=str) + "\n")
            out.flush()
    stats["seconds"] = int(time.monotonic() - t0)
    out.write(json.dumps({"stats": dict(stats), "start": a.start, "count": a.count}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
