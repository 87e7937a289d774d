//! JSON spellings of decoded characters: the automaton-level view of string content.
//!
//! Constraints on strings are stated over the *decoded* string. They are first built as a HIR
//! over decoded characters, then [`encode`]d: every character class becomes the set of all its
//! JSON spellings — the raw character (unless it is `"`, `\` or a control character), its short
//! escape (`\" \\ \/ \b \f \n \r \t`), `\uXXXX` with hex digits of either case, and for
//! characters outside the BMP the UTF-16 surrogate pair `\uD8xx\uDCxx`. So a pattern or length
//! applies exactly to the decoded string, whatever spelling the model chooses. Strings written
//! in the schema itself (property names, `const`/`enum` strings) are spelled by [`Spelling`]:
//! by default only as written. Nothing here knows JSON Schema; `crate::json_schema::string`
//! builds on it.

use regex_syntax::hir::{Class, Hir, HirKind};

use super::hir::{alt, class, concat, fixed_width, lit, rep, Base};

const SHORT_ESCAPES: [(u32, char); 8] = [
    (0x22, '"'),
    (0x5C, '\\'),
    (0x2F, '/'),
    (0x08, 'b'),
    (0x0C, 'f'),
    (0x0A, 'n'),
    (0x0D, 'r'),
    (0x09, 't'),
];

fn hex4(v: u32) -> [u8; 4] {
    [
        ((v >> 12) & 15) as u8,
        ((v >> 8) & 15) as u8,
        ((v >> 4) & 15) as u8,
        (v & 15) as u8,
    ]
}

fn u_escape(lo: u32, hi: u32) -> Hir {
    concat(vec![
        lit("\\u"),
        fixed_width(&hex4(lo), &hex4(hi), Base::HexAnyCase),
    ])
}

/// All JSON spellings of one character out of `ranges` (inclusive code point ranges, sorted,
/// non-overlapping, no surrogates).
pub(crate) fn spell_class(ranges: &[(u32, u32)]) -> Hir {
    // Languages from the string algebra repeat the same classes many times over, and a wide
    // class's `\uXXXX` ranges are costly to spell out.
    thread_local! {
        static CACHE: std::cell::RefCell<rustc_hash::FxHashMap<Vec<(u32, u32)>, Hir>> =
            std::cell::RefCell::new(rustc_hash::FxHashMap::default());
    }
    if let Some(h) = CACHE.with(|c| c.borrow().get(ranges).cloned()) {
        return h;
    }
    let h = spell_class_uncached(ranges);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= 1024 {
            c.clear();
        }
        c.insert(ranges.to_vec(), h.clone());
    });
    h
}

fn spell_class_uncached(ranges: &[(u32, u32)]) -> Hir {
    let mut parts = Vec::new();
    // raw characters: everything but '"', '\\' and controls
    let mut raw: Vec<(char, char)> = Vec::new();
    for &(a, b) in ranges {
        for (x, y) in [
            (a, b.min(0x21)),
            (a.max(0x23), b.min(0x5B)),
            (a.max(0x5D), b),
        ] {
            let x = x.max(0x20);
            if x <= y {
                if let (Some(x), Some(y)) = (char::from_u32(x), char::from_u32(y)) {
                    raw.push((x, y));
                }
            }
        }
    }
    if !raw.is_empty() {
        parts.push(class(&raw));
    }
    let contains = |c: u32| ranges.iter().any(|&(a, b)| a <= c && c <= b);
    let shorts: Vec<(char, char)> = SHORT_ESCAPES
        .iter()
        .filter(|(c, _)| contains(*c))
        .map(|&(_, e)| (e, e))
        .collect();
    if !shorts.is_empty() {
        parts.push(concat(vec![lit("\\"), class(&shorts)]));
    }
    for &(a, b) in ranges {
        // BMP: \uXXXX
        if a <= 0xFFFF {
            let hi = b.min(0xFFFF);
            // split around the surrogate block (not characters; classes never contain it)
            if a < 0xD800 {
                parts.push(u_escape(a, hi.min(0xD7FF)));
            }
            if hi > 0xDFFF {
                parts.push(u_escape(a.max(0xE000), hi));
            }
        }
        // astral: surrogate pairs
        if b >= 0x10000 {
            let x = a.max(0x10000) - 0x10000;
            let y = b - 0x10000;
            let (hx, lx, hy, ly) = (x >> 10, x & 0x3FF, y >> 10, y & 0x3FF);
            let pair = |h: u32, l1: u32, l2: u32| {
                concat(vec![
                    u_escape(0xD800 + h, 0xD800 + h),
                    u_escape(0xDC00 + l1, 0xDC00 + l2),
                ])
            };
            if hx == hy {
                parts.push(pair(hx, lx, ly));
            } else {
                parts.push(pair(hx, lx, 0x3FF));
                if hx + 1 < hy {
                    parts.push(concat(vec![
                        u_escape(0xD800 + hx + 1, 0xD800 + hy - 1),
                        u_escape(0xDC00, 0xDFFF),
                    ]));
                }
                parts.push(pair(hy, 0, ly));
            }
        }
    }
    alt(parts)
}

/// All spellings of any one character: the same language as `spell_class` over every
/// character, written compactly (it occurs in every unconstrained string). Built once per
/// process.
pub(crate) fn any_char() -> Hir {
    static ANY: std::sync::OnceLock<Hir> = std::sync::OnceLock::new();
    ANY.get_or_init(build_any_char).clone()
}

fn build_any_char() -> Hir {
    let hex = class(&[('0', '9'), ('A', 'F'), ('a', 'f')]);
    let hex_n = |n: u32| rep(hex.clone(), n, Some(n));
    let d = class(&[('D', 'D'), ('d', 'd')]);
    alt(vec![
        // raw: everything but '"', '\\' and controls
        class(&[
            (' ', '!'),
            ('#', '['),
            (']', '\u{D7FF}'),
            ('\u{E000}', '\u{10FFFF}'),
        ]),
        concat(vec![
            lit("\\"),
            alt(vec![
                class(&[
                    ('"', '"'),
                    ('\\', '\\'),
                    ('/', '/'),
                    ('b', 'b'),
                    ('f', 'f'),
                    ('n', 'n'),
                    ('r', 'r'),
                    ('t', 't'),
                ]),
                concat(vec![
                    lit("u"),
                    alt(vec![
                        // BMP outside the surrogates
                        concat(vec![
                            class(&[('0', '9'), ('A', 'C'), ('E', 'F'), ('a', 'c'), ('e', 'f')]),
                            hex_n(3),
                        ]),
                        concat(vec![d.clone(), class(&[('0', '7')]), hex_n(2)]),
                        // a surrogate pair
                        concat(vec![
                            d.clone(),
                            class(&[('8', '9'), ('A', 'B'), ('a', 'b')]),
                            hex_n(2),
                            lit("\\u"),
                            d,
                            class(&[('C', 'F'), ('c', 'f')]),
                            hex_n(2),
                        ]),
                    ]),
                ]),
            ]),
        ]),
    ])
}

/// Hex digits (either case) with values in `digits` (a 16-bit set).
fn hex_digits(digits: u16) -> Hir {
    let mut ranges = Vec::new();
    for d in 0..16u32 {
        if digits >> d & 1 == 1 {
            if d < 10 {
                let c = char::from_u32('0' as u32 + d).expect("digit");
                ranges.push((c, c));
            } else {
                for base in ['a', 'A'] {
                    let c = char::from_u32(base as u32 + d - 10).expect("letter");
                    ranges.push((c, c));
                }
            }
        }
    }
    class(&ranges)
}

/// The four hex digits of `\uXXXX` for every BMP character outside the surrogates and outside
/// `codes` (sorted). `prefix` holds the `depth` digits written so far.
fn hex_not_in(codes: &[u32], depth: u32, prefix: u32) -> Hir {
    if depth == 4 {
        // only reached with the code itself in `codes`
        return Hir::fail();
    }
    let shift = 4 * (3 - depth);
    let allowed: u16 = if depth == 1 && prefix == 0xD {
        0x00FF
    } else {
        0xFFFF
    };
    let mut used: u16 = 0;
    for &c in codes {
        used |= 1 << ((c >> shift) & 15);
    }
    let mut parts = Vec::new();
    // digits no code continues with: any valid rest
    let mut free = allowed & !used;
    if depth == 0 && free >> 0xD & 1 == 1 {
        free &= !(1 << 0xD);
        parts.push(concat(vec![
            hex_digits(1 << 0xD),
            hex_digits(0x00FF),
            rep(hex_digits(0xFFFF), 2, Some(2)),
        ]));
    }
    if free != 0 {
        parts.push(concat(vec![
            hex_digits(free),
            rep(hex_digits(0xFFFF), 3 - depth, Some(3 - depth)),
        ]));
    }
    for d in 0..16u32 {
        if used >> d & 1 == 1 {
            let sub: Vec<u32> = codes
                .iter()
                .copied()
                .filter(|&c| (c >> shift) & 15 == d)
                .collect();
            parts.push(concat(vec![
                hex_digits(1 << d),
                hex_not_in(&sub, depth + 1, prefix << 4 | d),
            ]));
        }
    }
    alt(parts)
}

/// All spellings of one character other than `except`: the language of `spell_class` over the
/// complement of `except`, built without splitting the `\uXXXX` ranges around every excluded
/// character (a trie over the excluded characters' hex digits instead).
pub(crate) fn spell_not(except: &[char]) -> Hir {
    let mut codes: Vec<u32> = except.iter().map(|&c| c as u32).collect();
    codes.sort_unstable();
    codes.dedup();
    // Key languages ask for the same small sets over and over (one per position in a name).
    thread_local! {
        static CACHE: std::cell::RefCell<rustc_hash::FxHashMap<Vec<u32>, Hir>> =
            std::cell::RefCell::new(rustc_hash::FxHashMap::default());
    }
    if let Some(h) = CACHE.with(|c| c.borrow().get(&codes).cloned()) {
        return h;
    }
    let h = spell_not_codes(&codes);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= 4096 {
            c.clear();
        }
        c.insert(codes, h.clone());
    });
    h
}

fn spell_not_codes(codes: &[u32]) -> Hir {
    if codes.iter().any(|&c| c > 0xFFFF) {
        // Excluded characters outside the BMP: split the ranges, surrogate pairs included.
        let mut ranges = Vec::new();
        let mut next = 0u32;
        for &c in codes {
            for (x, y) in [(next, c.min(0xD800)), (next.max(0xE000), c)] {
                if x < y {
                    ranges.push((x, y - 1));
                }
            }
            next = c + 1;
        }
        for (x, y) in [(next, 0xD7FF), (next.max(0xE000), 0x10FFFF)] {
            if x <= y {
                ranges.push((x, y));
            }
        }
        return spell_class(&ranges);
    }
    // raw characters
    let mut raw: Vec<(char, char)> = Vec::new();
    let mut next = 0x20u32;
    let mut cut: Vec<u32> = codes.to_vec();
    cut.extend([0x22, 0x5C]);
    cut.sort_unstable();
    cut.dedup();
    for c in cut.into_iter().filter(|&c| c >= 0x20) {
        for (x, y) in [(next, c.min(0xD800)), (next.max(0xE000), c)] {
            if x < y {
                raw.push((
                    char::from_u32(x).expect("scalar"),
                    char::from_u32(y - 1).expect("scalar"),
                ));
            }
        }
        next = c + 1;
    }
    for (x, y) in [(next, 0xD7FF), (next.max(0xE000), 0x10FFFF)] {
        if x <= y {
            raw.push((
                char::from_u32(x).expect("scalar"),
                char::from_u32(y).expect("scalar"),
            ));
        }
    }
    let shorts: Vec<(char, char)> = SHORT_ESCAPES
        .iter()
        .filter(|(c, _)| !codes.contains(c))
        .map(|&(_, e)| (e, e))
        .collect();
    let hex = hex_digits(0xFFFF);
    let pair = concat(vec![
        hex_digits(1 << 0xD),
        hex_digits(0x0F00),
        rep(hex.clone(), 2, Some(2)),
        lit("\\u"),
        hex_digits(1 << 0xD),
        hex_digits(0xF000),
        rep(hex, 2, Some(2)),
    ]);
    let mut escapes = Vec::new();
    if !shorts.is_empty() {
        escapes.push(class(&shorts));
    }
    escapes.push(concat(vec![
        lit("u"),
        alt(vec![hex_not_in(codes, 0, 0), pair]),
    ]));
    let mut parts = Vec::new();
    if !raw.is_empty() {
        parts.push(class(&raw));
    }
    parts.push(concat(vec![lit("\\"), alt(escapes)]));
    alt(parts)
}

/// All spellings of the string `s` (JSON string content, without the quotes).
pub(crate) fn spell_str(s: &str) -> Hir {
    concat(s.chars().map(spell_char).collect())
}

/// Which spellings a string written in a schema (a declared property name, a `const` or
/// `enum` string) may take in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Spelling {
    /// As written: the form `json.dumps` writes, and for a non-ASCII character also its raw
    /// UTF-8 (see [`spell_char_as_written`]).
    AsWritten,
    /// Every JSON spelling of each character ([`spell_char`]).
    Any,
}

impl Spelling {
    /// The spellings of one character under this choice.
    pub(crate) fn char(self, c: char) -> Hir {
        match self {
            Spelling::AsWritten => spell_char_as_written(c),
            Spelling::Any => spell_char(c),
        }
    }

    /// The spellings of the string `s` (without the quotes) under this choice (adjacent
    /// literals merge in the concatenation).
    pub(crate) fn str(self, s: &str) -> Hir {
        concat(s.chars().map(|c| self.char(c)).collect())
    }
}

/// The one spelling `json.dumps` writes for an ASCII character: the character itself, `\"`
/// and `\\`, the short escapes `\b \f \n \r \t`, and `\u00xx` (lowercase hex) for the
/// other control characters.
fn push_written_ascii(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    }
}

/// The spellings of `c` as written: for an ASCII character the one form `json.dumps` writes
/// (see [`push_written_ascii`]); for DEL and any non-ASCII character its raw UTF-8 or the
/// `\uxxxx` form (lowercase hex; a surrogate pair above the BMP) that `json.dumps` writes by
/// default (`ensure_ascii=False` writes them raw).
pub(crate) fn spell_char_as_written(c: char) -> Hir {
    let mut s = String::new();
    if c.is_ascii() && c != '\u{7f}' {
        push_written_ascii(&mut s, c);
        return lit(&s);
    }
    let mut units = [0u16; 2];
    let escaped: String = c
        .encode_utf16(&mut units)
        .iter()
        .map(|u| format!("\\u{u:04x}"))
        .collect();
    alt(vec![lit(c.encode_utf8(&mut [0u8; 4])), lit(&escaped)])
}

/// The spellings (under `spelling`) of any one of `strings`, with shared prefixes spelled once
/// (a trie): an enum of many strings becomes an automaton the size of its distinct prefixes,
/// not one branch per member. The language is exactly the union of `spelling.str` of each
/// string.
///
/// `Err(n)` when the trie would hold `n > max_chars` characters (counted before anything is
/// built: a huge literal is refused without allocating its automaton).
pub(crate) fn spell_any_of(
    strings: &[&str],
    max_chars: usize,
    spelling: Spelling,
) -> Result<Hir, usize> {
    let mut words: Vec<Vec<char>> = strings.iter().map(|s| s.chars().collect()).collect();
    words.sort_unstable();
    words.dedup();
    // characters of the trie: each word adds what it does not share with the word before
    let mut chars = words.first().map_or(0, Vec::len);
    for w in words.windows(2) {
        let common = w[0].iter().zip(&w[1]).take_while(|(a, b)| a == b).count();
        chars += w[1].len() - common;
    }
    if chars > max_chars {
        return Err(chars);
    }
    Ok(trie(&words, 0, 0, spelling))
}

/// Deepest branching level built as a trie; below it the remaining suffixes are alternatives
/// (the recursion is bounded whatever the strings).
const MAX_TRIE_DEPTH: usize = 512;

/// The spellings of the suffixes from `at` of `words` (sorted, distinct; all sharing their first
/// `at` characters).
fn trie(words: &[Vec<char>], mut at: usize, depth: usize, spelling: Spelling) -> Hir {
    let mut out = Vec::new();
    // the common prefix of a sorted slice is that of its first and last words
    let (first, last) = (&words[0], &words[words.len() - 1]);
    while at < first.len() && at < last.len() && first[at] == last[at] {
        out.push(spelling.char(first[at]));
        at += 1;
    }
    if words.len() == 1 {
        return concat(out);
    }
    if depth >= MAX_TRIE_DEPTH {
        let rest = words
            .iter()
            .map(|w| concat(w[at..].iter().map(|&c| spelling.char(c)).collect()));
        out.push(alt(rest.collect()));
        return concat(out);
    }
    let mut branches = Vec::new();
    let mut i = 0;
    if first.len() == at {
        branches.push(Hir::empty()); // a word ends here (it sorts first)
        i = 1;
    }
    while i < words.len() {
        let c = words[i][at];
        let j = i + words[i..].partition_point(|w| w[at] == c);
        branches.push(trie(&words[i..j], at, depth + 1, spelling));
        i = j;
    }
    out.push(alt(branches));
    concat(out)
}

/// All JSON spellings of one character (ASCII ones built once per thread: property names and
/// enum strings are spelled character by character).
pub(crate) fn spell_char(c: char) -> Hir {
    thread_local! {
        static ASCII: Vec<Hir> = (0u32..128).map(|c| spell_class(&[(c, c)])).collect();
    }
    if c.is_ascii() {
        ASCII.with(|a| a[c as usize].clone())
    } else {
        spell_class(&[(c as u32, c as u32)])
    }
}

fn class_ranges(c: &Class) -> Result<Vec<(u32, u32)>, String> {
    match c {
        Class::Unicode(u) => Ok(u
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect()),
        Class::Bytes(b) => {
            let v: Vec<(u32, u32)> = b
                .ranges()
                .iter()
                .map(|r| (u32::from(r.start()), u32::from(r.end())))
                .collect();
            if v.iter().any(|&(_, e)| e > 0x7F) {
                return Err("byte classes beyond ASCII are not characters".into());
            }
            Ok(v)
        }
    }
}

/// Turn a HIR over decoded characters into a HIR over JSON string content.
pub(crate) fn encode(h: &Hir) -> Result<Hir, String> {
    Ok(match h.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(l) => {
            let s = std::str::from_utf8(&l.0).map_err(|_| "a literal is not valid UTF-8")?;
            spell_str(s)
        }
        HirKind::Class(c) => {
            let r = class_ranges(c)?;
            if r.is_empty() {
                Hir::fail()
            } else if r == [(0, 0x10FFFF)] || r == [(0, 0xD7FF), (0xE000, 0x10FFFF)] {
                // the same language, in the form the automaton builder recognizes
                any_char()
            } else {
                spell_class(&r)
            }
        }
        HirKind::Look(_) => {
            return Err(
                "anchors (^, $) are supported only at the start and end of the pattern \
                        or of its top-level alternatives; word boundaries are not supported"
                    .into(),
            )
        }
        HirKind::Repetition(r) => rep(encode(&r.sub)?, r.min, r.max),
        HirKind::Capture(c) => encode(&c.sub)?,
        HirKind::Concat(xs) => concat(xs.iter().map(encode).collect::<Result<_, _>>()?),
        HirKind::Alternation(xs) => alt(xs.iter().map(encode).collect::<Result<_, _>>()?),
    })
}

/// Any decoded character (search semantics, length bounds, key languages).
pub(crate) fn dot_all() -> Hir {
    class(&[('\0', '\u{10FFFF}')])
}
