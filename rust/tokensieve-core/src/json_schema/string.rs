//! JSON string content: the spellings of decoded characters, ECMA-262 patterns, formats.
//!
//! Constraints on strings (`const`, `enum`, `pattern`, `format`, lengths) are stated over the
//! *decoded* string. They are first built as a HIR over decoded characters, then
//! [`encode`]d: every character class becomes the set of all its JSON spellings — the raw
//! character (unless it is `"`, `\` or a control character), its short escape (`\" \\ \/ \b \f
//! \n \r \t`), `\uXXXX` with hex digits of either case, and for characters outside the BMP the
//! UTF-16 surrogate pair `\uD8xx\uDCxx`. So a pattern or length applies exactly to the decoded
//! string, whatever spelling the model chooses.

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use super::hirs::{alt, class, concat, lit, rep, star};
use super::number::{fixed_width, Base};

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
/// character, written compactly (it occurs in every unconstrained string).
pub(crate) fn any_char() -> Hir {
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

fn strip_capture(h: &Hir) -> &Hir {
    match h.kind() {
        HirKind::Capture(c) => strip_capture(&c.sub),
        _ => h,
    }
}

/// The decoded-string language of an ECMA `pattern` (unanchored search semantics): each
/// top-level alternative gets `.*` on the sides where it is not anchored.
pub(crate) fn search_form(h: &Hir) -> Hir {
    let top = strip_capture(h);
    let branches: Vec<&Hir> = match top.kind() {
        HirKind::Alternation(xs) => xs.iter().collect(),
        _ => vec![top],
    };
    let mut out = Vec::new();
    for b in branches {
        let b = strip_capture(b);
        let mut items: Vec<Hir> = match b.kind() {
            HirKind::Concat(xs) => xs.clone(),
            _ => vec![b.clone()],
        };
        let mut start = false;
        while matches!(
            items.first().map(|x| x.kind()),
            Some(HirKind::Look(Look::Start))
        ) {
            items.remove(0);
            start = true;
        }
        let mut end = false;
        while matches!(
            items.last().map(|x| x.kind()),
            Some(HirKind::Look(Look::End))
        ) {
            items.pop();
            end = true;
        }
        if !start {
            items.insert(0, star(dot_all()));
        }
        if !end {
            items.push(star(dot_all()));
        }
        out.push(concat(items));
    }
    alt(out)
}

/// Translate ECMA-262 pattern syntax into `regex-syntax` syntax: `\d \w \s` and `.` take their
/// ECMA meanings (ASCII digits and word characters; ECMA white space and line terminators),
/// `\uXXXX` (and surrogate pairs of them), `\cX`, `\0`, `[\b]`; look-around and backreferences
/// are refused with a message.
pub(crate) fn translate_ecma(p: &str) -> Result<String, String> {
    const WS: &str = r"\t\n\x0B\x0C\r \xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";
    let cs: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut in_class = false;
    let hex_at = |i: usize, n: usize| -> Option<u32> {
        if i + n > cs.len() {
            return None;
        }
        let s: String = cs[i..i + n].iter().collect();
        if s.chars().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(&s, 16).ok()
        } else {
            None
        }
    };
    while i < cs.len() {
        let c = cs[i];
        match c {
            '\\' => {
                let Some(&n) = cs.get(i + 1) else {
                    return Err("the pattern ends with a lone backslash".into());
                };
                i += 2;
                let class_text = |inner: &str, neg: bool| -> String {
                    match (in_class, neg) {
                        (true, false) => inner.to_string(),
                        (_, true) => format!("[^{inner}]"),
                        (false, false) => format!("[{inner}]"),
                    }
                };
                match n {
                    'd' => out.push_str(&class_text("0-9", false)),
                    'D' => out.push_str(&class_text("0-9", true)),
                    'w' => out.push_str(&class_text("A-Za-z0-9_", false)),
                    'W' => out.push_str(&class_text("A-Za-z0-9_", true)),
                    's' => out.push_str(&class_text(WS, false)),
                    'S' => out.push_str(&class_text(WS, true)),
                    'b' if in_class => out.push_str(r"\x08"),
                    'b' | 'B' => {
                        return Err("word boundaries (\\b, \\B) are not supported".into());
                    }
                    '1'..='9' | 'k' => {
                        return Err(
                            "backreferences are not supported by a regular-language engine".into(),
                        );
                    }
                    '0' => out.push_str(r"\x00"),
                    'c' => match cs.get(i) {
                        Some(&l) if l.is_ascii_alphabetic() => {
                            out.push_str(&format!("\\x{{{:X}}}", (l as u32) % 32));
                            i += 1;
                        }
                        _ => return Err("\\c must be followed by a letter".into()),
                    },
                    'u' => {
                        let (cp, len) = if cs.get(i) == Some(&'{') {
                            let end = cs[i..]
                                .iter()
                                .position(|&x| x == '}')
                                .ok_or("unterminated \\u{...}")?;
                            let s: String = cs[i + 1..i + end].iter().collect();
                            (
                                u32::from_str_radix(&s, 16).map_err(|_| "bad \\u{...} escape")?,
                                end + 1,
                            )
                        } else {
                            (hex_at(i, 4).ok_or("\\u needs four hex digits")?, 4)
                        };
                        i += len;
                        let mut cp = cp;
                        if (0xD800..0xDC00).contains(&cp)
                            && cs.get(i) == Some(&'\\')
                            && cs.get(i + 1) == Some(&'u')
                        {
                            if let Some(lo) = hex_at(i + 2, 4) {
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                    i += 6;
                                }
                            }
                        }
                        if (0xD800..0xE000).contains(&cp) {
                            return Err("a lone surrogate \\u escape is not a character".into());
                        }
                        out.push_str(&format!("\\x{{{cp:X}}}"));
                    }
                    'x' => {
                        let v = hex_at(i, 2).ok_or("\\x needs two hex digits")?;
                        i += 2;
                        out.push_str(&format!("\\x{{{v:X}}}"));
                    }
                    't' | 'n' | 'r' | 'f' | 'v' => {
                        let v = match n {
                            't' => 9,
                            'n' => 10,
                            'r' => 13,
                            'f' => 12,
                            _ => 11,
                        };
                        out.push_str(&format!("\\x{{{v:X}}}"));
                    }
                    'p' | 'P' => {
                        // Unicode property escapes (with the u flag): same syntax.
                        out.push('\\');
                        out.push(n);
                    }
                    c if c.is_ascii_alphanumeric() => {
                        return Err(format!("unknown escape \\{c}"));
                    }
                    c => out.push_str(&format!("\\x{{{:X}}}", c as u32)),
                }
                continue;
            }
            '[' if !in_class => {
                if cs.get(i + 1) == Some(&'^') && cs.get(i + 2) == Some(&']') {
                    out.push_str(r"[\x00-\x{10FFFF}]");
                    i += 3;
                    continue;
                }
                if cs.get(i + 1) == Some(&']') {
                    out.push_str(r"[^\x00-\x{10FFFF}]");
                    i += 2;
                    continue;
                }
                in_class = true;
                out.push('[');
                if cs.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                // A leading ']' is literal in regex-syntax but ends the class in ECMA: handled
                // above for the empty class; otherwise fine.
            }
            '[' => out.push_str(r"\["),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '&' | '~' | '-' if in_class && cs.get(i + 1) == Some(&c) => {
                // regex-syntax set operators (&&, ~~, --) are plain characters in ECMA
                out.push_str(&format!("\\x{{{:X}}}", c as u32));
            }
            '.' if !in_class => out.push_str(r"[^\n\r\x{2028}\x{2029}]"),
            '(' if !in_class && cs.get(i + 1) == Some(&'?') => {
                let next = cs.get(i + 2).copied();
                let next2 = cs.get(i + 3).copied();
                match (next, next2) {
                    (Some('='), _)
                    | (Some('!'), _)
                    | (Some('<'), Some('='))
                    | (Some('<'), Some('!')) => {
                        return Err("look-around ((?=...), (?!...), (?<=...), (?<!...)) is not \
                                    supported by a regular-language engine"
                            .into())
                    }
                    (Some(':'), _) | (Some('<'), _) => out.push('('),
                    _ => return Err("unsupported group syntax (?...)".into()),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// Character-length bounds (min, max) of a decoded-string HIR.
pub(crate) fn char_len(h: &Hir) -> (u64, Option<u64>) {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => (0, Some(0)),
        HirKind::Literal(l) => {
            let n = String::from_utf8_lossy(&l.0).chars().count() as u64;
            (n, Some(n))
        }
        HirKind::Class(_) => (1, Some(1)),
        HirKind::Repetition(r) => {
            let (a, b) = char_len(&r.sub);
            let min = a.saturating_mul(u64::from(r.min));
            let max = match (b, r.max) {
                (Some(0), _) => Some(0),
                (Some(b), Some(m)) => Some(b.saturating_mul(u64::from(m))),
                _ => None,
            };
            (min, max)
        }
        HirKind::Capture(c) => char_len(&c.sub),
        HirKind::Concat(xs) => xs.iter().fold((0, Some(0)), |(a, b), x| {
            let (c, d) = char_len(x);
            (a + c, b.zip(d).map(|(b, d)| b + d))
        }),
        HirKind::Alternation(xs) => {
            let v: Vec<_> = xs.iter().map(char_len).collect();
            let min = v.iter().map(|x| x.0).min().unwrap_or(0);
            let max = v.iter().try_fold(0u64, |m, x| x.1.map(|b| m.max(b)));
            (min, max)
        }
    }
}

/// The regex (decoded-string language, ASCII) of a format, if the format is asserted.
pub(crate) fn format_regex(name: &str) -> Option<&'static str> {
    Some(match name {
        "date" => DATE,
        "time" => TIME,
        "date-time" => DATE_TIME,
        "duration" => {
            // RFC 3339 appendix A: components come in contiguous runs (Y[M[D]], M[D], D;
            // H[M[S]], M[S], S), weeks alone.
            r"P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))"
        }
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "ipv4" => IPV4,
        "ipv6" => IPV6,
        "hostname" => HOSTNAME,
        "email" => EMAIL,
        "uri" => URI,
        "uri-reference" => URI_REF,
        _ => return None,
    })
}

const DATE: &str = r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
const TIME: &str = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const DATE_TIME: &str = r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const IPV4: &str = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
macro_rules! ipv6 {
    () => {
        concat!(
            r"(?:",
            r"(?:[0-9A-Fa-f]{1,4}:){6}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|::(?:[0-9A-Fa-f]{1,4}:){5}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:){4}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,1}[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:){3}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,2}[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:){2}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,3}[0-9A-Fa-f]{1,4})?::[0-9A-Fa-f]{1,4}:(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,4}[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4})?::[0-9A-Fa-f]{1,4}",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,6}[0-9A-Fa-f]{1,4})?::",
            r")"
        )
    };
}
const IPV6: &str = ipv6!();
const HOSTNAME: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
const EMAIL: &str = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
// RFC 3986, section 3 and appendix A, transcribed: every production is regular.
// pchar = unreserved / pct-encoded / sub-delims / ":" / "@"
macro_rules! pchar {
    () => {
        r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"
    };
}
// authority = [ userinfo "@" ] host [ ":" port ]; host = IP-literal / IPv4address / reg-name
// (an IPv4 address is also a reg-name).
macro_rules! authority {
    () => {
        concat!(
            r"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*@)?",
            r"(?:\[(?:",
            ipv6!(),
            r"|[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+)\]",
            r"|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*)",
            r"(?::[0-9]*)?"
        )
    };
}
// query / fragment = *( pchar / "/" / "?" )
macro_rules! tail {
    () => {
        concat!(
            r"(?:\?(?:",
            pchar!(),
            r"|[/?])*)?(?:#(?:",
            pchar!(),
            r"|[/?])*)?"
        )
    };
}
// URI = scheme ":" hier-part [ "?" query ] [ "#" fragment ]
macro_rules! uri {
    () => {
        concat!(
            r"[A-Za-z][A-Za-z0-9+.-]*:",
            // hier-part = "//" authority path-abempty / path-absolute / path-rootless / path-empty
            r"(?://",
            authority!(),
            r"(?:/",
            pchar!(),
            r"*)*|/(?:",
            pchar!(),
            r"+(?:/",
            pchar!(),
            r"*)*)?|",
            pchar!(),
            r"+(?:/",
            pchar!(),
            r"*)*|)",
            tail!()
        )
    };
}
const URI: &str = uri!();
const URI_REF: &str = concat!(
    r"(?:",
    uri!(),
    // relative-ref: "//" authority path-abempty / path-absolute / path-noscheme / path-empty
    r"|(?://",
    authority!(),
    r"(?:/",
    pchar!(),
    r"*)*|/(?:",
    pchar!(),
    r"+(?:/",
    pchar!(),
    r"*)*)?|(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|%[0-9A-Fa-f]{2})+(?:/",
    pchar!(),
    r"*)*|)",
    tail!(),
    r")"
);

#[cfg(test)]
mod tests {
    use super::super::test_util::Re;
    use super::*;

    fn json_content(h: &Hir) -> Re {
        Re::new(&concat(vec![lit("\""), h.clone(), lit("\"")]))
    }

    #[test]
    fn spellings_of_characters() {
        let r = json_content(&spell_str("a\"/é😀\n"));
        for ok in [
            r#""a\"/é😀\n""#,
            r#""\u0061\u0022\/\u00E9\ud83d\ude00\u000a""#,
            r#""a\"\u002Fé\uD83D\uDE00\n""#,
        ] {
            assert!(r.is_match(ok), "{ok}");
        }
        for bad in [r#""a"/é😀\n""#, "\"a\\\"/é😀\n\"", r#""A\"/é😀\n""#] {
            assert!(!r.is_match(bad), "{bad}");
        }
        let any = json_content(&star(any_char()));
        assert!(any.is_match(r#""x\\y\u12aB\b""#));
        assert!(!any.is_match(r#""\x""#));
        assert!(!any.is_match("\"\u{1}\""));
        assert!(!any.is_match(r#""\ud800""#));
    }

    fn pattern(p: &str) -> Re {
        let t = translate_ecma(p).unwrap();
        let h = crate::regex::parse(&t, 250).unwrap();
        json_content(&encode(&search_form(&h)).unwrap())
    }

    #[test]
    fn ecma_patterns() {
        let r = pattern(r"^\d{3}$");
        assert!(r.is_match(r#""123""#) && r.is_match(r#""\u0031\u00323""#));
        assert!(!r.is_match(r#""1234""#) && !r.is_match(r#""١٢٣""#));
        let r = pattern("b.");
        assert!(r.is_match(r#""abc""#) && !r.is_match(r#""ab\n""#) && !r.is_match(r#""ab""#));
        let r = pattern(r"^a|b$");
        assert!(r.is_match(r#""ax""#) && r.is_match(r#""xb""#) && !r.is_match(r#""xa""#));
        assert!(translate_ecma("(?=a)").is_err());
        assert!(translate_ecma(r"(a)\1").is_err());
        let r = pattern(r"^[\w-]+\/\x41$");
        assert!(r.is_match(r#""a-b/A""#) && !r.is_match(r#""a b/A""#));
    }

    #[test]
    fn formats_compile() {
        for f in [
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
        ] {
            let h = crate::regex::parse(format_regex(f).unwrap(), 250).unwrap();
            encode(&h).unwrap();
        }
        let uri = Re::new(&crate::regex::parse(URI, 250).unwrap());
        for ok in [
            "http://example.com/a/b?x=1#f",
            "urn:isbn:0451450523",
            "mailto:a@b.c",
            "http://[2001:db8::7]/c=GB?objectClass?one",
            "ldap://[::ffff:1.2.3.4]:389/",
            "file:///etc/hosts",
            "tel:+1-816-555-1212",
            "http://a%20b.com/%7Efoo",
        ] {
            assert!(uri.is_match(ok), "{ok}");
        }
        for bad in [
            "a:]",
            "//foo.bar/?baz=qux#quux",
            "http://[1.2.3.4]/",
            "\\WINDOWS\\share",
            "http:// x",
            "1ab:c",
            ":x",
        ] {
            assert!(!uri.is_match(bad), "{bad}");
        }
        let uri_ref = Re::new(&crate::regex::parse(URI_REF, 250).unwrap());
        for ok in [
            "",
            "/abc",
            "abc/def",
            "//example.com/x",
            "?q",
            "#f",
            "http://a/b",
            "a:b",
        ] {
            assert!(uri_ref.is_match(ok), "{ok}");
        }
        for bad in ["\\WINDOWS\\filename", "#frag#ment", "a:]", "[x]"] {
            assert!(!uri_ref.is_match(bad), "{bad}");
        }
        let dur = Re::new(&crate::regex::parse(format_regex("duration").unwrap(), 250).unwrap());
        for ok in [
            "P1Y", "P1Y2M3D", "P2M3D", "P4D", "PT1H2M3S", "PT2M3S", "PT3S", "P1W", "P1DT1H",
        ] {
            assert!(dur.is_match(ok), "{ok}");
        }
        for bad in ["P1Y2D", "PT1H2S", "P", "PT", "P1W2D", "P1D2Y"] {
            assert!(!dur.is_match(bad), "{bad}");
        }
        let d = Re::new(&crate::regex::parse(DATE, 250).unwrap());
        assert!(d.is_match("2024-02-29") && !d.is_match("2023-02-29") && !d.is_match("2023-04-31"));
        assert!(d.is_match("2000-02-29") && !d.is_match("1900-02-29"));
        let v6 = Re::new(&crate::regex::parse(IPV6, 250).unwrap());
        for ok in [
            "::",
            "::1",
            "fe80::1:2",
            "1:2:3:4:5:6:7:8",
            "::ffff:1.2.3.4",
        ] {
            assert!(v6.is_match(ok), "{ok}");
        }
        assert!(!v6.is_match("1:2:3:4:5:6:7:8:9") && !v6.is_match("1::2::3"));
    }
}
