"""Grammar anchors for the GBNF differential tests (tests/test_grammar_differential.py) and the
grammar benchmark (benches/bench_grammars.py).

* An independent reference: a small GBNF parser (llama.cpp syntax plus ``{,n}``), flattened to
  plain BNF over Unicode code points, and an Earley recognizer over the code points of the UTF-8
  bytes fed to it. ``Oracle.viable(state, data)`` says whether the bytes so far extend to a
  string of the grammar (a token ending inside a UTF-8 character is viable when some character
  it starts continues the text); ``Oracle.complete`` whether they are a whole string. Nothing
  here reads tokensieve, xgrammar or llguidance.
* The same flat grammar rendered for the anchors when they refuse the file as written: GBNF
  with only the syntax xgrammar reads (``.`` and ``{,n}`` spelled out), and a Lark grammar for
  llguidance whose terminals are single characters (``llguidance.gbnf_to_lark`` turns rules
  made of literals into greedy lexemes, which accept fewer strings than the GBNF does, and
  mistranslates ``\\u``/``\\U`` escapes).
* One adapter per engine over one token list (the same bytes for every engine), and seeded
  token walks that compare the engines' masks at every prefix they all accept.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_CP = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)

# --------------------------------------------------------------------------------------------
# character sets
# --------------------------------------------------------------------------------------------


class CharSet:
    """A set of Unicode scalar values (surrogates never included), as sorted disjoint ranges."""

    __slots__ = ("ranges", "starts")

    def __init__(self, ranges: Iterable[tuple[int, int]], negate: bool = False) -> None:
        rs = sorted((max(0, lo), min(MAX_CP, hi)) for lo, hi in ranges if lo <= hi)
        merged: list[tuple[int, int]] = []
        for lo, hi in rs:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        if negate:
            comp, nxt = [], 0
            for lo, hi in merged:
                if lo > nxt:
                    comp.append((nxt, lo - 1))
                nxt = hi + 1
            if nxt <= MAX_CP:
                comp.append((nxt, MAX_CP))
            merged = comp
        out: list[tuple[int, int]] = []
        for lo, hi in merged:  # take the surrogates out
            if hi < SURROGATES[0] or lo > SURROGATES[1]:
                out.append((lo, hi))
                continue
            if lo < SURROGATES[0]:
                out.append((lo, SURROGATES[0] - 1))
            if hi > SURROGATES[1]:
                out.append((SURROGATES[1] + 1, hi))
        self.ranges = out
        self.starts = [lo for lo, _ in out]

    @classmethod
    def single(cls, cp: int) -> CharSet:
        return cls([(cp, cp)])

    def __contains__(self, cp: int) -> bool:
        i = bisect.bisect_right(self.starts, cp) - 1
        return i >= 0 and cp <= self.ranges[i][1]

    def meets(self, lo: int, hi: int) -> bool:
        """Whether some member lies in ``[lo, hi]``."""
        i = bisect.bisect_right(self.starts, hi) - 1
        return i >= 0 and self.ranges[i][1] >= lo

    def empty(self) -> bool:
        return not self.ranges

    def key(self) -> tuple[tuple[int, int], ...]:
        return tuple(self.ranges)

    def __repr__(self) -> str:
        return f"CharSet({self.ranges})"


ANY_CHAR = CharSet([(0, MAX_CP)])

# --------------------------------------------------------------------------------------------
# GBNF parser (llama.cpp syntax, `{,n}` too)
# --------------------------------------------------------------------------------------------

# AST nodes: ("alt", [node]), ("seq", [node]), ("chars", CharSet), ("ref", name, line, col),
# ("rep", node, min, max or None)
Node = tuple[Any, ...]


class GbnfParseError(ValueError):
    def __init__(self, msg: str, line: int, col: int) -> None:
        super().__init__(f"{msg} at line {line}, column {col}")
        self.line, self.column = line, col


def _is_name_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c in "-_")


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def where(self, i: int) -> tuple[int, int]:
        """(line, column) of offset ``i``, both from 1."""
        return self.s.count("\n", 0, i) + 1, i - (self.s.rfind("\n", 0, i) + 1) + 1

    def err(self, msg: str) -> GbnfParseError:
        return GbnfParseError(msg, *self.where(self.i))

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def space(self) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] not in "\r\n":
                    self.i += 1
            else:
                break

    def name(self) -> str:
        j = self.i
        while self.i < len(self.s) and _is_name_char(self.s[self.i]):
            self.i += 1
        if j == self.i:
            raise self.err("expected a rule name")
        return self.s[j : self.i]

    def at_rule_start(self) -> bool:
        """A name followed by ``::=`` starts the next rule (so rules need no separator)."""
        j = self.i
        while j < len(self.s) and _is_name_char(self.s[j]):
            j += 1
        if j == self.i:
            return False
        while j < len(self.s) and self.s[j] in " \t":
            j += 1
        return self.s.startswith("::=", j)

    def int_(self) -> int:
        j = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if j == self.i:
            raise self.err("expected an integer")
        return int(self.s[j : self.i])

    def char(self) -> int:
        """One character of a literal or class, escapes decoded, as a code point."""
        if self.i >= len(self.s):
            raise self.err("unexpected end of input")
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return ord(c)
        e = self.peek(2)[1:]
        simple = {"n": 10, "t": 9, "r": 13, "0": 0}
        if e in simple:
            self.i += 2
            return simple[e]
        widths = {"x": 2, "u": 4, "U": 8}
        if e in widths:
            h = self.s[self.i + 2 : self.i + 2 + widths[e]]
            if len(h) != widths[e] or any(ch not in "0123456789abcdefABCDEF" for ch in h):
                raise self.err(f"bad \\{e} escape")
            cp = int(h, 16)
            if cp > MAX_CP or SURROGATES[0] <= cp <= SURROGATES[1]:
                raise self.err("an escape names a surrogate or a value past U+10FFFF")
            self.i += 2 + widths[e]
            return cp
        if e and e.isascii() and not e.isalnum() and e.isprintable() and e != " ":
            self.i += 2  # \\ \" \' \[ \] \- and other ASCII punctuation: itself
            return ord(e)
        raise self.err(f"unknown escape \\{e}")

    def grammar(self) -> tuple[dict[str, Node], list[str], dict[str, tuple[int, int]]]:
        rules: dict[str, Node] = {}
        order: list[str] = []
        where: dict[str, tuple[int, int]] = {}
        self.space()
        while self.i < len(self.s):
            start = self.i
            name = self.name()
            self.space()
            if self.peek(3) != "::=":
                raise self.err("expected ::=")
            self.i += 3
            self.space()
            body = self.alternatives(top=True)
            if name in rules:
                raise self.err(f"rule {name} defined twice")
            rules[name] = body
            order.append(name)
            where[name] = self.where(start)
            self.space()
        return rules, order, where

    def alternatives(self, top: bool) -> Node:
        alts = [self.sequence(top)]
        while self.peek() == "|":
            self.i += 1
            self.space()
            alts.append(self.sequence(top))
        return ("alt", alts)

    def sequence(self, top: bool) -> Node:
        items: list[Node] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in "|)" or (top and self.at_rule_start()):
                break
            if c == '"':
                self.i += 1
                cps = []
                while self.peek() != '"':
                    cps.append(self.char())
                self.i += 1
                items.append(("seq", [("chars", CharSet.single(cp)) for cp in cps]))
            elif c == "[":
                self.i += 1
                neg = self.peek() == "^"
                if neg:
                    self.i += 1
                ranges = []
                while self.peek() != "]":
                    lo = self.char()
                    hi = lo
                    if self.peek() == "-" and self.peek(2) != "-]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                items.append(("chars", CharSet(ranges, negate=neg)))
            elif c == ".":
                self.i += 1
                items.append(("chars", ANY_CHAR))
            elif c == "(":
                self.i += 1
                self.space()
                inner = self.alternatives(top=False)
                if self.peek() != ")":
                    raise self.err("expected )")
                self.i += 1
                items.append(inner)
            elif _is_name_char(c):
                line, col = self.where(self.i)
                items.append(("ref", self.name(), line, col))
            else:
                raise self.err(f"unexpected {c!r}")
            self.space()
            items[-1] = self.repetition(items[-1])
            self.space()
        return ("seq", items)

    def repetition(self, node: Node) -> Node:
        c = self.peek()
        if c == "*":
            self.i += 1
            return ("rep", node, 0, None)
        if c == "+":
            self.i += 1
            return ("rep", node, 1, None)
        if c == "?":
            self.i += 1
            return ("rep", node, 0, 1)
        if c != "{":
            return node
        self.i += 1
        self.space()
        lo = 0 if self.peek() == "," else self.int_()
        self.space()
        hi: int | None = lo
        if self.peek() == ",":
            self.i += 1
            self.space()
            hi = self.int_() if self.peek().isdigit() else None
            self.space()
        if self.peek() != "}":
            raise self.err("expected }")
        self.i += 1
        if hi is not None and hi < lo:
            raise self.err("repeat bounds out of order")
        return ("rep", node, lo, hi)


# --------------------------------------------------------------------------------------------
# flat BNF
# --------------------------------------------------------------------------------------------


@dataclass
class Flat:
    """Plain BNF: nonterminals ``0..n-1`` (``names[i]``), symbols ``>= 0`` nonterminals and
    ``< 0`` terminals (``terms[-s - 1]``); ``prods[k] = (lhs, rhs)``; ``start`` derives the
    root rule. ``rules`` is the parsed AST by rule name, ``order`` the rules as written."""

    names: list[str]
    terms: list[CharSet]
    prods: list[tuple[int, tuple[int, ...]]]
    start: int
    rules: dict[str, Node]
    order: list[str]
    positions: dict[str, tuple[int, int]]  # rule name → (line, column) of its definition
    unreachable: list[str] = field(default_factory=list)


def parse_gbnf(text: str, start: str = "root") -> Flat:
    """Parse GBNF text into flat BNF over code points (unproductive parts removed)."""
    rules, order, where = _Parser(text).grammar()
    if start not in rules:
        raise GbnfParseError(f"no rule named {start}", 1, 1)
    names: list[str] = []
    ids: dict[str, int] = {}
    terms: list[CharSet] = []
    term_ids: dict[Any, int] = {}
    prods: list[tuple[int, tuple[int, ...]]] = []

    def nt(name: str) -> int:
        if name not in ids:
            ids[name] = len(names)
            names.append(name)
        return ids[name]

    def term(cs: CharSet) -> int:
        k = cs.key()
        if k not in term_ids:
            term_ids[k] = len(terms)
            terms.append(cs)
        return -term_ids[k] - 1

    helper = [0]

    def fresh(base: str) -> int:
        helper[0] += 1
        return nt(f"{base}~{helper[0]}")

    def alts_of(node: Node, owner: str) -> list[list[Node]]:
        if node[0] == "alt":
            out: list[list[Node]] = []
            for a in node[1]:
                out += alts_of(a, owner)
            return out
        if node[0] == "seq":
            seqs: list[list[Node]] = [[]]
            for it in node[1]:
                if it[0] == "seq":  # a literal: its characters in place
                    seqs = [s + list(it[1]) for s in seqs]
                else:
                    seqs = [s + [it] for s in seqs]
            return seqs
        return [[node]]

    def sym(node: Node, owner: str) -> list[int]:
        """The symbols a node stands for inside a sequence."""
        kind = node[0]
        if kind == "chars":
            return [term(node[1])]
        if kind == "ref":
            if node[1] not in rules:
                raise GbnfParseError(f"undefined rule {node[1]}", node[2], node[3])
            return [nt(node[1])]
        if kind == "seq":
            return [s for it in node[1] for s in sym(it, owner)]
        if kind == "alt":
            if len(node[1]) == 1:
                return sym(node[1][0], owner)
            h = fresh(owner)
            define(h, node, owner)
            return [h]
        # repetition
        _, body, lo, hi = node
        b = sym(body, owner)
        out = b * lo
        if hi is None:
            star = fresh(owner)  # star ::= "" | star body   (left recursive: flat for Earley)
            prods.append((star, ()))
            prods.append((star, (star, *b)))
            out.append(star)
        elif hi > lo:
            opt = None  # opt_k ::= "" | body opt_{k-1}
            for _ in range(hi - lo):
                h = fresh(owner)
                prods.append((h, ()))
                prods.append((h, (*b, *([opt] if opt is not None else []))))
                opt = h
            assert opt is not None
            out.append(opt)
        return out

    def define(lhs: int, node: Node, owner: str) -> None:
        for seq in alts_of(node, owner):
            prods.append((lhs, tuple(s for it in seq for s in sym(it, owner))))

    top = nt("<start>")
    for name in order:
        nt(name)
    prods.append((top, (nt(start),)))
    for name in order:
        define(ids[name], rules[name], name)

    # reachability (for the report) before pruning
    reach = {top}
    todo = [top]
    by_lhs: dict[int, list[tuple[int, ...]]] = {}
    for lhs, rhs in prods:
        by_lhs.setdefault(lhs, []).append(rhs)
    while todo:
        x = todo.pop()
        for rhs in by_lhs.get(x, []):
            for s in rhs:
                if s >= 0 and s not in reach:
                    reach.add(s)
                    todo.append(s)
    unreachable = [n for n in order if ids[n] not in reach]

    # productive symbols; drop productions that use an unproductive one
    productive: set[int] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in prods:
            if lhs not in productive and all(
                (s >= 0 and s in productive) or (s < 0 and not terms[-s - 1].empty()) for s in rhs
            ):
                productive.add(lhs)
                changed = True
    kept = [
        (lhs, rhs)
        for lhs, rhs in prods
        if lhs in productive and all(s < 0 or s in productive for s in rhs)
    ]
    return Flat(names, terms, kept, top, rules, order, where, unreachable)


# --------------------------------------------------------------------------------------------
# Earley recognizer over code points
# --------------------------------------------------------------------------------------------


class _ESet:
    __slots__ = ("items", "waiting", "scans", "predicted")

    def __init__(self) -> None:
        self.items: set[tuple[int, int, int]] = set()
        self.waiting: dict[int, list[tuple[int, int, int]]] = {}
        self.scans: list[tuple[int, int, int, int]] = []
        self.predicted: set[int] = set()


@dataclass(frozen=True)
class OracleState:
    """The Earley sets after the complete characters fed so far, and the bytes of an
    unfinished UTF-8 character (``tail``)."""

    sets: tuple[_ESet, ...]
    tail: bytes = b""


def _utf8_len(b0: int) -> tuple[int, int, int]:
    """(length, smallest, largest code point) of a UTF-8 sequence led by ``b0``; (0,0,0) for a
    byte that leads none."""
    if b0 < 0x80:
        return 1, 0, 0x7F
    if 0xC2 <= b0 <= 0xDF:
        return 2, 0x80, 0x7FF
    if 0xE0 <= b0 <= 0xEF:
        return 3, 0x800, 0xFFFF
    if 0xF0 <= b0 <= 0xF4:
        return 4, 0x10000, MAX_CP
    return 0, 0, 0


def utf8_prefix_range(prefix: bytes) -> tuple[int, int] | None:
    """The code points whose UTF-8 encoding starts with ``prefix`` (a proper prefix of one
    character), as a range with surrogates at its ends removed; ``None`` if there are none."""
    n, lo_ok, hi_ok = _utf8_len(prefix[0])
    if n <= len(prefix):
        return None
    for c in prefix[1:]:
        if not 0x80 <= c <= 0xBF:
            return None
    cp = prefix[0] & (0x7F >> n)
    for c in prefix[1:]:
        cp = (cp << 6) | (c & 0x3F)
    rest = n - len(prefix)
    lo, hi = max(cp << (6 * rest), lo_ok), min((cp << (6 * rest)) | ((1 << (6 * rest)) - 1), hi_ok)
    if SURROGATES[0] <= lo <= SURROGATES[1]:
        lo = SURROGATES[1] + 1
    if SURROGATES[0] <= hi <= SURROGATES[1]:
        hi = SURROGATES[0] - 1
    return (lo, hi) if lo <= hi else None


def utf8_decode_one(seq: bytes) -> int | None:
    """The code point of one complete UTF-8 sequence, or ``None`` if it is not valid."""
    n, lo, hi = _utf8_len(seq[0])
    if n != len(seq):
        return None
    if n == 1:
        return seq[0]
    cp = seq[0] & (0x7F >> n)
    for c in seq[1:]:
        if not 0x80 <= c <= 0xBF:
            return None
        cp = (cp << 6) | (c & 0x3F)
    if not lo <= cp <= hi or SURROGATES[0] <= cp <= SURROGATES[1]:
        return None
    return cp


class Oracle:
    """Earley recognition of a flat grammar's prefixes, fed UTF-8 bytes."""

    def __init__(self, flat: Flat) -> None:
        self.flat = flat
        self.prods = flat.prods
        self.rhs = [r for _, r in flat.prods]
        self.lhs = [lhs for lhs, _ in flat.prods]
        self.terms = flat.terms
        self.by_lhs: dict[int, list[int]] = {}
        for k, (lhs, _) in enumerate(flat.prods):
            self.by_lhs.setdefault(lhs, []).append(k)
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in flat.prods:
                if lhs not in nullable and all(s >= 0 and s in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        self.nullable = nullable
        self.start_prods = {k for k in self.by_lhs.get(flat.start, [])}
        s0 = _ESet()
        self._close([], s0, 0, [(k, 0, 0) for k in self.start_prods])
        self.initial = OracleState((s0,))

    def _close(
        self, sets: list[_ESet], cur: _ESet, j: int, agenda: list[tuple[int, int, int]]
    ) -> None:
        rhs_all, lhs_all, by_lhs, nullable = self.rhs, self.lhs, self.by_lhs, self.nullable
        items = cur.items
        todo = [it for it in agenda if it not in items]
        items.update(todo)

        def add(it: tuple[int, int, int]) -> None:
            if it not in items:
                items.add(it)
                todo.append(it)

        while todo:
            it = todo.pop()
            p, d, o = it
            rhs = rhs_all[p]
            if d == len(rhs):
                if o != j:  # completions at their own set are nullable: advanced at prediction
                    for p2, d2, o2 in sets[o].waiting.get(lhs_all[p], ()):
                        add((p2, d2 + 1, o2))
                continue
            s = rhs[d]
            if s >= 0:
                cur.waiting.setdefault(s, []).append(it)
                if s not in cur.predicted:
                    cur.predicted.add(s)
                    for k in by_lhs.get(s, ()):
                        add((k, 0, j))
                if s in nullable:
                    add((p, d + 1, o))
            else:
                cur.scans.append((-s - 1, p, d, o))

    def _scan(self, sets: tuple[_ESet, ...], cp: int) -> tuple[_ESet, ...] | None:
        last = sets[-1]
        terms = self.terms
        moved = [(p, d + 1, o) for t, p, d, o in last.scans if cp in terms[t]]
        if not moved:
            return None
        new = _ESet()
        self._close(list(sets), new, len(sets), moved)
        return (*sets, new)

    def _tail_ok(self, sets: tuple[_ESet, ...], tail: bytes) -> bool:
        r = utf8_prefix_range(tail)
        if r is None:
            return False
        lo, hi = r
        return any(self.terms[t].meets(lo, hi) for t, _, _, _ in sets[-1].scans)

    def feed(self, state: OracleState, data: bytes) -> OracleState | None:
        """The state after ``data``, or ``None`` when no string of the grammar starts with the
        bytes fed so far."""
        sets = state.sets
        buf = state.tail + data
        i = 0
        while i < len(buf):
            n = _utf8_len(buf[i])[0]
            if n == 0:
                return None
            if i + n > len(buf):
                tail = buf[i:]
                return OracleState(sets, tail) if self._tail_ok(sets, tail) else None
            cp = utf8_decode_one(buf[i : i + n])
            if cp is None:
                return None
            nxt = self._scan(sets, cp)
            if nxt is None:
                return None
            sets = nxt
            i += n
        return OracleState(sets, b"")

    def viable(self, state: OracleState, data: bytes) -> bool:
        return self.feed(state, data) is not None

    def complete(self, state: OracleState) -> bool:
        if state.tail:
            return False
        last = state.sets[-1]
        return any((k, 1, 0) in last.items for k in self.start_prods)

    def accepts(self, text: str | bytes) -> bool:
        data = text.encode() if isinstance(text, str) else text
        st = self.feed(self.initial, data)
        return st is not None and self.complete(st)

    def mask(self, state: OracleState, trie: TokenTrie) -> set[int]:
        """The token ids (of ``trie``) whose bytes keep the text viable."""
        out: set[int] = set()

        def walk(node: dict[int, Any], st: OracleState) -> None:
            for b, child in node.items():
                if b == -1:
                    continue
                nst = self.feed(st, bytes([b]))
                if nst is None:
                    continue
                out.update(child.get(-1, ()))
                walk(child, nst)

        walk(trie.root, state)
        return out


class TokenTrie:
    """Token bytes as a byte trie: ``node[byte] = child``, ``node[-1] = ids ending here``."""

    def __init__(self, tokens: Sequence[bytes | None]) -> None:
        self.root: dict[int, Any] = {}
        for i, t in enumerate(tokens):
            if not t:
                continue
            node = self.root
            for b in t:
                node = node.setdefault(b, {})
            node.setdefault(-1, []).append(i)


# --------------------------------------------------------------------------------------------
# renderings for the anchors
# --------------------------------------------------------------------------------------------


def _gbnf_cp(cp: int) -> str:
    # never \xHH: xgrammar 0.2.8 reads every hex digit after \x ("[\x5Cb]" is U+05CB)
    if 0x20 < cp < 0x7F and chr(cp) not in '\\"[]-^':
        return chr(cp)
    if cp <= 0xFFFF:
        return f"\\u{cp:04X}"
    return f"\\U{cp:08X}"


def _bnf_names(flat: Flat) -> list[str]:
    """ASCII names for the flat grammar's nonterminals (``<start>`` → ``root``)."""
    return ["root" if i == flat.start else f"n{i}" for i in range(len(flat.names))]


def _render(
    flat: Flat, names: list[str], term: Callable[[Sequence[tuple[int, int]]], str], form: str
) -> list[str]:
    """One line per nonterminal of ``flat``, the start first: ``form`` filled with its
    ``name`` and its ``alts`` (nonterminals by ``names``, a terminal class by ``term`` of its
    ranges, an empty alternative as ``""``)."""
    by_lhs: dict[int, list[tuple[int, ...]]] = {}
    for lhs, rhs in flat.prods:
        by_lhs.setdefault(lhs, []).append(rhs)
    lines = []
    for lhs in sorted(by_lhs, key=lambda x: (x != flat.start, x)):
        alts = []
        for rhs in by_lhs[lhs]:
            parts = [names[s] if s >= 0 else term(flat.terms[-s - 1].ranges) for s in rhs]
            alts.append(" ".join(parts) if parts else '""')
        lines.append(form.format(name=names[lhs], alts=" | ".join(alts)))
    return lines


def _ranges(ranges: Sequence[tuple[int, int]], cp: Callable[[int], str]) -> str:
    return "".join(cp(lo) if lo == hi else f"{cp(lo)}-{cp(hi)}" for lo, hi in ranges)


def to_gbnf(flat: Flat) -> str:
    """The flat grammar as GBNF in the syntax every engine reads (classes, ``::=``, ``|``)."""
    lines = _render(
        flat, _bnf_names(flat), lambda r: f"[{_ranges(r, _gbnf_cp)}]", "{name} ::= {alts}"
    )
    return "\n".join(lines) + "\n"


def _rx_cp(cp: int) -> str:
    return f"\\x{{{cp:X}}}"


def to_lark(flat: Flat) -> str:
    """The flat grammar as llguidance Lark: one rule per nonterminal, every terminal a one-
    character regex, so that llguidance's lexer never has to choose between lexemes of
    different lengths."""
    names = ["start" if i == flat.start else f"n{i}" for i in range(len(flat.names))]
    lines = _render(flat, names, lambda r: f"/[{_ranges(r, _rx_cp)}]/", "{name}: {alts}")
    return "\n".join(["%llguidance {}", ""] + lines) + "\n"


# --------------------------------------------------------------------------------------------
# vocabularies
# --------------------------------------------------------------------------------------------


@dataclass
class VocabSpec:
    """One token list for every engine: ``tokens[i]`` the bytes of token ``i`` (``None`` for a
    special token, never text), the EOS ids and the special ids (EOS included)."""

    name: str
    tokens: list[bytes | None]
    eos: list[int]
    special: list[int]

    @property
    def size(self) -> int:
        return len(self.tokens)

    def show(self, ids: Iterable[int], limit: int = 12) -> str:
        """Token ids with their text (bytes that are not UTF-8 as ``\\xNN``)."""
        ids = sorted(ids)
        shown = []
        for i in ids[:limit]:
            b = self.tokens[i]
            text = (
                "<eos>" if i in self.eos else repr((b or b"").decode("utf-8", "backslashreplace"))
            )
            shown.append(f"{i}:{text}")
        more = f" … (+{len(ids) - limit})" if len(ids) > limit else ""
        return "[" + ", ".join(shown) + more + "]"


def small_vocab() -> VocabSpec:
    """A few hundred short tokens: printable ASCII, whitespace, words and pieces the corpus's
    grammars use, whole multi-byte characters and UTF-8 fragments (valid and invalid)."""
    toks: list[bytes | None] = [None, None]  # 0: EOS, 1: a special token
    seen: set[bytes] = set()

    def add(b: bytes) -> None:
        if b not in seen:
            seen.add(b)
            toks.append(b)

    for c in range(0x20, 0x7F):
        add(bytes([c]))
    for s in ["\n", "\t", "\r", "\x00", "\x1f", "\x7f"]:
        add(s.encode())
    words = (
        "if while else let fn return print true false null or and in is it ab abc xyz foo bar "
        "hello hi hey world there Hello Ada csv name id x1 10 12 42 00 007 99 123 0. 1.5 1e 1E+ "
        'e- -1 == != <= >= && || += :: :  , ", ": {" "} [" "] [] {} () (( )) [[ ]] {{ }} '
        '\\" \\\\ \\n \\t \\u \\u00 \\ud83d \\uDE00 \\/ \\b 00e9 D83D dc00 O-O O-O-O Nf3 e4 exd5 '
        "Qxf7# =Q 1. 2. 1-0 0-1 1/2 -1/2 * - \n- \n\n \n   \r\n \t\t ... -- ;; ; a, "
    ).split(" ")
    for w in words:
        if w:
            add(w.encode())
    for w in ["  ", "   ", "    ", ", ", ": ", "- ", " x", " =", " {", " }", " +", " *", " -"]:
        add(w.encode())
    for ch in "αβγδεζηθλμξπρσςτφχψωΑΒΩ§éüöàøÿñç€™→中文日本😀😃🙏☀⛄":
        add(ch.encode())
    for w in ["αβ", "γδε", "ωω", "-Α", '"α', 'é"', "😀😀", "§1"]:
        add(w.encode())
    # fragments of multi-byte characters, valid and not
    for b in [
        b"\xce",
        b"\xcf",
        b"\xc3",
        b"\xb1",
        b"\x89",
        b"\xa9",
        b"\xe2",
        b"\xe2\x82",
        b"\x82\xac",
        b"\xac",
        b"\xe4\xb8",
        b"\xad",
        b"\xf0",
        b"\xf0\x9f",
        b"\xf0\x9f\x98",
        b"\x9f\x98\x80",
        b"\x98\x80",
        b"\x80",
        b"\xbf",
        b"\xc0",
        b"\xc1\xbf",
        b"\xe0\x80",
        b"\xed\xa0",
        b"\xed\x9f",
        b"\xf4\x90",
        b"\xf5",
        b"\xff",
        b"a\xce",
        b"\xb1b",
        b'"\xf0\x9f',
    ]:
        add(b)
    return VocabSpec("small", toks, eos=[0], special=[0, 1])


def llama3_vocab(tokenizer_dir: Path) -> tuple[VocabSpec, Any]:
    """The Llama 3 token list as tokensieve reads it, and that tokensieve Vocabulary."""
    import tokensieve as ts

    v = ts.Vocabulary.from_pretrained(str(tokenizer_dir))
    specials = set(v.special_token_ids) | set(v.eos_token_ids)
    tokens = [None if i in specials else v.token_bytes(i) for i in range(v.vocab_size)]
    spec = VocabSpec("llama3", tokens, list(v.eos_token_ids), sorted(specials))
    return spec, v


def greedy_tokenize(trie: TokenTrie, data: bytes) -> list[int]:
    """Longest-match tokenization (for llguidance's tokenizer callback; never asserted on)."""
    out = []
    i = 0
    while i < len(data):
        node, best, j = trie.root, None, i
        while j < len(data) and data[j] in node:
            node = node[data[j]]
            j += 1
            if -1 in node:
                best = (j, node[-1][0])
        if best is None:
            i += 1
            continue
        i, tok = best
        out.append(tok)
    return out


# --------------------------------------------------------------------------------------------
# engine adapters
# --------------------------------------------------------------------------------------------


class EngineRefused(Exception):
    """The engine refused to compile the grammar."""


class AnchorGaveUp(Exception):
    """An anchor stopped on a limit of its own (it leaves the walk)."""


def unpack(bits: np.ndarray, size: int) -> np.ndarray:
    """A one-row int32 bitmask as a bool array of ``size`` token ids."""
    row = np.ascontiguousarray(np.asarray(bits).reshape(-1)).view(np.uint8)
    return np.unpackbits(row, bitorder="little")[:size].astype(bool)


class Engine:
    name: str
    note: str = ""  # how the grammar reached the engine (rewrites)

    def matcher(self) -> Any:
        raise NotImplementedError

    def mask(self, m: Any) -> np.ndarray:
        raise NotImplementedError

    def accept(self, m: Any, tok: int) -> bool:
        raise NotImplementedError


class TsVocab:
    """tokensieve's Vocabulary for a VocabSpec (built once)."""

    def __init__(self, spec: VocabSpec, vocab: Any = None) -> None:
        import tokensieve as ts

        self.spec = spec
        if vocab is None:
            toks = [
                t if t is not None else f"<|special_{i}|>".encode()
                for i, t in enumerate(spec.tokens)
            ]
            vocab = ts.Vocabulary(toks, spec.eos, spec.special)
        self.vocab = vocab
        self.bm = ts.allocate_token_bitmask(1, vocab.vocab_size)


def has_from_ebnf() -> bool:
    import tokensieve as ts

    return hasattr(ts.Grammar, "from_ebnf")


class TsEngine(Engine):
    name = "tokensieve"

    def __init__(self, tv: TsVocab, text: str, grammar: Any = None, **options: Any) -> None:
        import tokensieve as ts

        self.tv = tv
        if grammar is None:
            try:
                grammar = ts.Grammar.from_ebnf(text, tv.vocab, **options)
            except ts.TokensieveError as e:
                raise EngineRefused(f"{type(e).__name__}: {e}") from None
        self.grammar = grammar

    def matcher(self) -> Any:
        return self.grammar.matcher()

    def mask(self, m: Any) -> np.ndarray:
        m.fill_next_token_bitmask(self.tv.bm)
        bits = self.tv.bm.numpy() if hasattr(self.tv.bm, "numpy") else self.tv.bm
        return unpack(bits, self.tv.spec.size)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


class XgrVocab:
    def __init__(self, spec: VocabSpec) -> None:
        import xgrammar as xgr

        self.spec = spec
        # specials as empty strings: xgrammar's RAW vocabulary marks those special
        enc = [t if t is not None else b"" for t in spec.tokens]
        self.info = xgr.TokenizerInfo(
            enc, xgr.VocabType.RAW, vocab_size=spec.size, stop_token_ids=spec.eos
        )
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self.bm = xgr.allocate_token_bitmask(1, spec.size)


class XgrEngine(Engine):
    name = "xgrammar"

    def __init__(self, xv: XgrVocab, text: str, flat: Flat | None) -> None:
        import xgrammar as xgr

        self.xv, self.xgr = xv, xgr
        try:
            self.compiled = xv.compiler.compile_grammar(xgr.Grammar.from_ebnf(text))
        except Exception as e:  # noqa: BLE001 - xgrammar raises RuntimeError and others
            if flat is None:
                raise EngineRefused(f"{type(e).__name__}: {str(e).strip()[:300]}") from None
            first = str(e).strip().splitlines()[-1]
            if "EBNF parser error" in first:  # no time stamp, no source path
                first = first[first.index("EBNF parser error") :]
            first = first[:200]
            try:
                self.compiled = xv.compiler.compile_grammar(xgr.Grammar.from_ebnf(to_gbnf(flat)))
            except Exception as e2:  # noqa: BLE001
                raise EngineRefused(f"{type(e2).__name__}: {str(e2).strip()[:300]}") from None
            self.note = f"flat GBNF rendering (as written: {first})"

    def matcher(self) -> Any:
        return self.xgr.GrammarMatcher(self.compiled)

    def mask(self, m: Any) -> np.ndarray:
        m.fill_next_token_bitmask(self.xv.bm)
        return unpack(self.xv.bm.numpy(), self.xv.spec.size)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.accept_token(tok))


class _LlgTok:
    def __init__(self, spec: VocabSpec, trie: TokenTrie) -> None:
        self.eos_token_id = spec.eos[0]
        self.bos_token_id = None
        self.tokens = [
            t if t is not None else f"<|special_{i}|>".encode() for i, t in enumerate(spec.tokens)
        ]
        self.special_token_ids = list(spec.special)
        self._trie = trie

    def __call__(self, s: bytes) -> list[int]:
        return greedy_tokenize(self._trie, s)


class LlgVocab:
    def __init__(self, spec: VocabSpec, trie: TokenTrie) -> None:
        import llguidance as llg

        self.spec = spec
        self.tok = llg.LLTokenizer(llg.TokenizerWrapper(_LlgTok(spec, trie)), eos_token=spec.eos)
        self.bits = np.zeros((1, (spec.size + 31) // 32), dtype=np.int32)


class LlgEngine(Engine):
    """llguidance on the flat grammar rendered as Lark with one-character terminals (a
    rendering of the same language: see the module docstring)."""

    name = "llguidance"

    def __init__(
        self, lv: LlgVocab, text: str, flat: Flat | None, as_written: bool = False
    ) -> None:
        import llguidance as llg
        import llguidance.numpy as llg_np

        self.lv, self.llg_np = lv, llg_np
        if as_written or flat is None:
            try:
                lark = llg.gbnf_to_lark.gbnf_to_lark(text)
            except Exception as e:  # noqa: BLE001
                raise EngineRefused(f"gbnf_to_lark: {e}") from None
            self.note = "gbnf_to_lark"
        else:
            lark = to_lark(flat)
            self.note = "flat Lark rendering, one-character terminals"
        # one-character terminals make many Earley items per step: raise llguidance's cap
        limits = llg.LLParserLimits(step_max_items=2_000_000, verbose_errors=False)
        self.proto = llg.LLMatcher(
            lv.tok, llg.grammar_from("lark", lark), log_level=0, limits=limits
        )
        if self.proto.is_error():
            raise EngineRefused(self.proto.get_error()[:300])

    def matcher(self) -> Any:
        return self.proto.deep_copy()

    def mask(self, m: Any) -> np.ndarray:
        self.llg_np.fill_next_token_bitmask(m, self.lv.bits, 0)
        if m.is_error():
            raise AnchorGaveUp(f"llguidance: {m.get_error()[:200]}")
        return unpack(self.lv.bits, self.lv.spec.size)

    def accept(self, m: Any, tok: int) -> bool:
        return bool(m.consume_token(tok))


# --------------------------------------------------------------------------------------------
# walks
# --------------------------------------------------------------------------------------------

# Anchor behaviours that differ from the grammar's language, each checked token by token (a
# disagreement is explained only when its token fits the description). Nothing here excuses
# tokensieve: a token tokensieve allows that the oracle finds dead, or a viable token it
# refuses, is never explained.
ANCHOR_DEVIATIONS = {
    # xgrammar 0.2.8 lets a negated class (or the any-character class of the flat rendering)
    # match the UTF-8 encoding of a surrogate (ED A0..BF ..): not UTF-8, no character (in the
    # token, or after a text ending in ED).
    "xgrammar-surrogates": "xgrammar allows UTF-8-encoded surrogates (ED A0..BF ..)",
    # Where the grammar forces the next bytes, llguidance allows only the longest token spelling
    # them (guidance-ai/llguidance#263, guidance-ai/guidance#1352): a shorter token that is a
    # prefix of an allowed one is left out, though consume_token accepts it.
    "llguidance-forced": "llguidance allows only the longest token of forced bytes",
    # After a text that ends inside a UTF-8 character (a lead byte with its continuation still
    # to come), llguidance 1.9.1 masks the tokens that start with continuation bytes wrongly
    # by the oracle: with the character class U+1F600..U+1F64F and the text ending in F0, it
    # allows `98 80` (F0 98 80 starts no character of the class) and refuses `9F 98 80`.
    "llguidance-partial-char": "llguidance misjudges tokens continuing a split UTF-8 character",
}


def _explain(
    engine: str,
    tok: int,
    engine_allows: bool,
    viable: bool,
    spec: VocabSpec,
    mask: np.ndarray,
    prefix: bytes = b"",
) -> str | None:
    """The ANCHOR_DEVIATIONS key that explains ``engine`` disagreeing with the oracle on
    ``tok`` after the text ``prefix``, or None."""
    b = spec.tokens[tok] or b""
    if engine == "xgrammar" and engine_allows and not viable:
        # the surrogate's ED lead byte in the token, or ending the text before it
        s = prefix[-1:] + b
        i = s.find(b"\xed")
        if i >= 0 and (i + 1 == len(s) or 0xA0 <= s[i + 1] <= 0xBF):
            return "xgrammar-surrogates"
    if engine == "llguidance" and b and 0x80 <= b[0] <= 0xBF:
        return "llguidance-partial-char"
    if engine == "llguidance" and not engine_allows and viable and b:
        for j in np.flatnonzero(mask):
            t = spec.tokens[int(j)]
            if t is not None and len(t) > len(b) and t.startswith(b):
                return "llguidance-forced"
    return None


@dataclass
class TokenVerdict:
    tok: int
    ref_allows: bool
    viable: bool | None  # the oracle's verdict (None: no oracle)
    explained: str | None  # ANCHOR_DEVIATIONS key


@dataclass
class Disagreement:
    grammar: str
    vocab: str
    driver: str
    engine: str  # the engine (or "oracle") compared with the reference one
    reference: str
    prefix: bytes
    verdicts: list[TokenVerdict]
    kind: str = "mask"  # "mask", "oracle" (brute force), "walk" (a walked token the oracle
    # finds dead), "rejected" (a token in the engine's own mask that it then refused)

    def culprit(self, v: TokenVerdict) -> str:
        """The engine that is wrong about ``v``'s token: by the oracle's verdict for a mask
        disagreement; the engine compared with the oracle; the engine whose own mask held a
        token it then refused."""
        if self.kind == "rejected":
            return self.engine
        if self.kind in ("oracle", "walk"):
            return self.reference
        if v.viable is None:
            return "?"
        return self.reference if v.ref_allows != v.viable else self.engine

    def faults(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.verdicts:
            who = self.culprit(v)
            key = f"{who} ({v.explained})" if v.explained else who
            out[key] = out.get(key, 0) + 1
        return out

    def describe(self, spec: VocabSpec) -> str:
        only_ref = [v.tok for v in self.verdicts if v.ref_allows]
        only_eng = [v.tok for v in self.verdicts if not v.ref_allows]
        text = self.prefix.decode("utf-8", "backslashreplace")
        return (
            f"[{self.grammar} / {self.vocab} / walk by {self.driver}] {self.kind}: "
            f"{self.reference} vs {self.engine} after {text!r} (who is wrong, by the oracle: "
            f"{self.faults()})\n"
            f"    only {self.reference}: {spec.show(only_ref)}\n"
            f"    only {self.engine}: {spec.show(only_eng)}"
        )


@dataclass
class Counts:
    walks: int = 0
    steps: int = 0  # masks compared (per engine pair)
    tokens: int = 0  # tokens accepted along walks
    finished: int = 0  # walks that ended with EOS
    oracle_masks: int = 0  # brute-force masks compared with the oracle
    disagreements: list[Disagreement] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)  # anchors that left a walk on a limit
    prefix: bytes = b""  # the text of the walk at its last step (for errors raised mid-walk)


def _choose(
    rng: random.Random, allowed: np.ndarray, eos: Sequence[int], p_stop: float
) -> int | None:
    ids = np.flatnonzero(allowed)
    if ids.size == 0:
        return None
    stops = [i for i in eos if allowed[i]]
    if stops and rng.random() < p_stop:
        return stops[0]
    rest = ids[~np.isin(ids, eos)] if stops else ids
    if rest.size == 0:
        return stops[0]
    return int(rest[rng.randrange(rest.size)])


def walk(
    engines: dict[str, Engine],
    reference: str,
    driver: str,
    spec: VocabSpec,
    oracle: Oracle | None,
    rng: random.Random,
    counts: Counts,
    grammar: str,
    max_tokens: int = 60,
    p_stop: float = 0.15,
    brute_force_steps: int = 0,
    trie: TokenTrie | None = None,
) -> None:
    """One token walk under ``driver``'s masks; every engine follows while it accepts the walk's
    tokens, and its mask is compared with ``reference``'s at every prefix. Every token in only
    one of the two masks is judged by the oracle. For the first ``brute_force_steps`` steps,
    ``reference``'s mask is also compared with the oracle's over the whole vocabulary
    (``trie``). Every walked token is checked against the oracle too."""
    ms = {n: e.matcher() for n, e in engines.items()}
    live = set(engines)
    prefix = b""
    ost = oracle.initial if oracle is not None else None
    counts.walks += 1
    eos = set(spec.eos)

    def viable(i: int) -> bool | None:
        if oracle is None or ost is None:
            return None
        return oracle.complete(ost) if i in eos else oracle.viable(ost, spec.tokens[i] or b"")

    def verdict(
        i: int, ref_allows: bool, engine: str, masks: dict[str, Any], ref: str = reference
    ) -> TokenVerdict:
        """The oracle's verdict on token ``i`` (in ``ref``'s mask iff ``ref_allows``, the
        other way round in ``engine``'s), explained when the engine it finds wrong is an
        anchor that behaves as ANCHOR_DEVIATIONS says."""
        v = viable(i)
        why = None
        if v is not None:
            wrong = ref if ref_allows != v else engine
            if wrong in masks and wrong != "tokensieve":
                why = _explain(
                    wrong, i, ref_allows == (wrong == ref), v, spec, masks[wrong], prefix
                )
        return TokenVerdict(i, ref_allows, v, why)

    for step in range(max_tokens + 1):
        counts.prefix = prefix
        masks = {}
        for n in sorted(live):
            try:
                masks[n] = engines[n].mask(ms[n])
            except AnchorGaveUp as e:
                if n in (reference, driver):
                    raise
                live.discard(n)
                counts.gave_up.append(f"{n} after {len(prefix)} bytes: {e}")
        ref = masks.get(reference)
        if ref is not None:
            for n in sorted(live - {reference}):
                counts.steps += 1
                diff = ref != masks[n]
                if not diff.any():
                    continue
                ids_ref = [int(i) for i in np.flatnonzero(diff & ref)]
                ids_eng = [int(i) for i in np.flatnonzero(diff & masks[n])]
                vs = [
                    verdict(i, ref_allows, n, masks)
                    for ids, ref_allows in ((ids_ref, True), (ids_eng, False))
                    for i in ids
                ]
                counts.disagreements.append(
                    Disagreement(grammar, spec.name, driver, n, reference, prefix, vs)
                )
            if oracle is not None and ost is not None and step < brute_force_steps:
                assert trie is not None
                want = oracle.mask(ost, trie)
                if oracle.complete(ost):
                    want |= eos
                got = {int(i) for i in np.flatnonzero(ref)}
                counts.oracle_masks += 1
                vs = [verdict(i, True, "oracle", masks) for i in sorted(got - want)]
                vs += [verdict(i, False, "oracle", masks) for i in sorted(want - got)]
                if vs:
                    counts.disagreements.append(
                        Disagreement(
                            grammar, spec.name, driver, "oracle", reference, prefix, vs, "oracle"
                        )
                    )
        if driver not in live or step == max_tokens:
            break
        tok = _choose(rng, masks[driver], spec.eos, p_stop)
        if tok is None:
            break
        if oracle is not None and ost is not None and viable(tok) is False:
            counts.disagreements.append(
                Disagreement(
                    grammar,
                    spec.name,
                    driver,
                    "oracle",
                    driver,
                    prefix,
                    [verdict(tok, True, "oracle", masks, ref=driver)],
                    "walk",
                )
            )
        for n in sorted(live):
            if not engines[n].accept(ms[n], tok):
                live.discard(n)
                if masks[n][tok]:  # in its own mask, yet refused
                    counts.disagreements.append(
                        Disagreement(
                            grammar,
                            spec.name,
                            driver,
                            n,
                            n,
                            prefix,
                            [verdict(tok, True, n, masks, ref=n)],
                            "rejected",
                        )
                    )
        if driver not in live:
            break
        counts.tokens += 1
        if tok in eos:
            counts.finished += 1
            break
        prefix += spec.tokens[tok] or b""
        if oracle is not None and ost is not None:
            ost = oracle.feed(ost, spec.tokens[tok] or b"")


def grammar_files(*folders: Path) -> Iterator[Path]:
    for d in folders:
        if d.is_dir():
            yield from sorted(d.glob("*.gbnf"))
