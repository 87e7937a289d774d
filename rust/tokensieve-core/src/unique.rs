//! `uniqueItems: true` over strings and integers, enforced beside the automaton.
//!
//! An automaton cannot remember which values an array already holds, so the JSON Schema
//! compiler registers each unique array of strings or integers by where it stands in the
//! document (its instance path: property names and item positions, see [`Step`]) together with
//! its items' language ([`ItemLang`]: decoded strings, or integer spellings). A matcher of such a
//! grammar reads its own output with a small JSON reader ([`Lex`]) that knows, at every byte,
//! the path it is at, the values each open unique array holds, and the decoded prefix of the
//! item being written.
//!
//! A mask is the automaton's mask with the tokens taken away that would (a) finish an item equal
//! to one the array already holds, or (b) leave the output where no finish is possible any more
//! because every way to end the current item gives a value already held (a prefix whose
//! completions in the item language are all taken), or a new item is needed and every value of
//! a finite item language is taken. Over strings only few tokens can do either: those holding
//! `"` or `\` (`,` when the item language is finite; `[` with `"`, a digit or `-` outside such
//! an array), and, inside an item, the tokens spelling the next bytes of a value already held.
//! Over integers every allowed token is checked (few are allowed there). Each is run through a
//! copy of the reader ([`filter`]). The compiler registers an array only where the path alone
//! decides which schema the array has (see `json_schema::compile`), so the reader never needs
//! the automaton's state.

mod held;

use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashSet;

use held::Held;

use crate::json_schema::unique::{ItemLang, Kind, Step, UniqueArray};
use crate::vocab::Vocabulary;

/// The unique arrays of a grammar, and the vocabulary's token lists the masks need.
#[derive(Debug)]
pub struct Uniques {
    arrays: Vec<UniqueArray>,
    lists: OnceLock<Lists>,
}

/// Tokens of a vocabulary that [`filter`] runs through the reader.
#[derive(Debug)]
struct Lists {
    /// Holding `"` or `\`: inside a unique array.
    quotes: Vec<u32>,
    /// Holding `,` and neither `"` nor `\`: between the items of a unique array whose item
    /// language is finite.
    commas: Vec<u32>,
    /// Holding `[` and `"`, `-` or a digit: elsewhere.
    opening: Vec<u32>,
}

impl Uniques {
    pub(crate) fn new(arrays: Vec<UniqueArray>) -> Uniques {
        Uniques {
            arrays,
            lists: OnceLock::new(),
        }
    }

    fn lists(&self, vocab: &Vocabulary) -> &Lists {
        self.lists.get_or_init(|| {
            let mut quotes = Vec::new();
            let mut commas = Vec::new();
            let mut opening = Vec::new();
            for id in 0..vocab.vocab_size() as u32 {
                let Some(b) = vocab.token_bytes(id) else {
                    continue;
                };
                let quote = b.contains(&b'"');
                if quote || b.contains(&b'\\') {
                    quotes.push(id);
                } else if b.contains(&b',') {
                    commas.push(id);
                }
                let item = quote || b.iter().any(|&c| c == b'-' || c.is_ascii_digit());
                if item && b.contains(&b'[') {
                    opening.push(id);
                }
            }
            Lists {
                quotes,
                commas,
                opening,
            }
        })
    }

    /// The array registered at this path, if any.
    fn at(&self, frames: &[Frame]) -> Option<u32> {
        'arrays: for (i, a) in self.arrays.iter().enumerate() {
            if a.path.len() != frames.len() {
                continue;
            }
            for (step, f) in a.path.iter().zip(frames) {
                let ok = match (step, f) {
                    (Step::Key(k), Frame::Obj { key: Some(key), .. }) => k.as_bytes() == &key[..],
                    (Step::Item, Frame::Arr { .. }) => true,
                    (Step::Other(names), Frame::Obj { key: Some(key), .. }) => {
                        !names.iter().any(|n| n.as_bytes() == &key[..])
                    }
                    _ => false,
                };
                if !ok {
                    continue 'arrays;
                }
            }
            return Some(i as u32);
        }
        None
    }
}

/// An open container of the output.
#[derive(Debug, Clone)]
enum Frame {
    /// An object: the key of the member being written, and whether a key comes next.
    Obj {
        key: Option<Arc<[u8]>>,
        want_key: bool,
    },
    /// An array, and its values when it is a registered unique array.
    Arr { set: Option<Set> },
}

/// What a unique array holds so far.
#[derive(Debug, Clone)]
struct Set {
    /// Index into [`Uniques::arrays`].
    id: u32,
    /// The decoded values of its items (UTF-8; a lone surrogate as its three-byte form), in
    /// a set whose copies share it (see [`held`]).
    values: Held,
    /// After a `,`: an item must come.
    want_item: bool,
}

/// Where the reader is inside a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Str {
    /// Not in a string.
    Out,
    /// An object key.
    Key,
    /// An item of the innermost unique array.
    Item,
    /// An integer item of the innermost unique array (its spelling so far in `buf`).
    Num,
    /// Any other string.
    Other,
}

/// An escape being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Esc {
    None,
    /// After `\`.
    Slash,
    /// After `\u` and this many hex digits, of this value so far.
    U(u8, u32),
}

/// The reader of a matcher's output (see the module comment).
#[derive(Debug)]
pub struct Lex {
    frames: Vec<Frame>,
    str: Str,
    esc: Esc,
    /// A high surrogate read as `\uXXXX`, waiting for its low half.
    high: Option<u32>,
    /// The decoded bytes of the key or item being read.
    buf: Vec<u8>,
}

impl Clone for Lex {
    fn clone(&self) -> Self {
        Lex {
            frames: self.frames.clone(),
            str: self.str,
            esc: self.esc,
            high: self.high,
            buf: self.buf.clone(),
        }
    }

    /// Without allocating once `self` has room: [`filter`] reads each token from a copy.
    fn clone_from(&mut self, src: &Self) {
        self.frames.clone_from(&src.frames);
        self.str = src.str;
        self.esc = src.esc;
        self.high = src.high;
        self.buf.clone_from(&src.buf);
    }
}

impl Default for Lex {
    fn default() -> Self {
        Lex::new()
    }
}

/// A JSON number's spelling as one text per value: `[-]DIGITSeEXP` with no leading or trailing
/// zeros in the digits (`0` for zero, whatever its sign), the exponent exact however long it is
/// written.
fn canonical_number(s: &[u8]) -> Vec<u8> {
    let (neg, s) = match s.split_first() {
        Some((b'-', r)) => (true, r),
        _ => (false, s),
    };
    let (mant, exp) = match s.iter().position(|&c| c == b'e' || c == b'E') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &b""[..]),
    };
    let (int, frac) = match mant.iter().position(|&c| c == b'.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, &b""[..]),
    };
    let mut digits: Vec<u8> = int.iter().chain(frac).copied().collect();
    let lead = digits.iter().take_while(|&&c| c == b'0').count();
    digits.drain(..lead);
    let trail = digits.iter().rev().take_while(|&&c| c == b'0').count();
    digits.truncate(digits.len() - trail);
    if digits.is_empty() {
        return b"0".to_vec();
    }
    // value: digits × 10^(exp + trail − frac.len())
    let (eneg, edigits) = match exp.split_first() {
        Some((b'-', r)) => (true, r),
        Some((b'+', r)) => (false, r),
        _ => (false, exp),
    };
    let shift = trail as i128 - frac.len() as i128;
    let (rneg, rdigits) = add_decimal(eneg, edigits, shift);
    let mut out = Vec::with_capacity(digits.len() + rdigits.len() + 3);
    if neg {
        out.push(b'-');
    }
    out.extend(digits);
    out.push(b'e');
    if rneg {
        out.push(b'-');
    }
    out.extend(rdigits);
    out
}

/// `(-1)^neg × digits + d`, as a sign and decimal digits without leading zeros (`0` alone for
/// zero, not negative); `digits` may be of any length.
fn add_decimal(neg: bool, digits: &[u8], d: i128) -> (bool, Vec<u8>) {
    let lead = digits.iter().take_while(|&&c| c == b'0').count();
    let a = &digits[lead..];
    if a.len() <= 30 {
        let v: i128 = std::str::from_utf8(a)
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let v = if neg { -v } else { v } + d;
        return (v < 0, v.unsigned_abs().to_string().into_bytes());
    }
    // past 30 digits |a| > 10^29 > |d|: the sign is a's, the magnitude |a| ± |d|
    let b = d.unsigned_abs().to_string().into_bytes();
    let same = (d < 0) == neg;
    let mut out = Vec::with_capacity(a.len() + 1);
    let (mut carry, mut i, mut j) = (0i32, a.len(), b.len());
    while i > 0 {
        i -= 1;
        let x = i32::from(a[i] - b'0');
        let y = if j > 0 {
            j -= 1;
            i32::from(b[j] - b'0')
        } else {
            0
        };
        let mut r = if same { x + y + carry } else { x - y + carry };
        carry = 0;
        if r >= 10 {
            r -= 10;
            carry = 1;
        } else if r < 0 {
            r += 10;
            carry = -1;
        }
        out.push(b'0' + r as u8);
    }
    if carry > 0 {
        out.push(b'1');
    }
    while out.len() > 1 && out.last() == Some(&b'0') {
        out.pop();
    }
    out.reverse();
    (neg, out)
}

fn push_code(buf: &mut Vec<u8>, c: u32) {
    // UTF-8, with surrogates in the same three-byte form (they never form a valid value, but
    // stay distinct from each other)
    if c < 0x80 {
        buf.push(c as u8);
    } else if c < 0x800 {
        buf.extend_from_slice(&[0xC0 | (c >> 6) as u8, 0x80 | (c & 0x3F) as u8]);
    } else if c < 0x10000 {
        buf.extend_from_slice(&[
            0xE0 | (c >> 12) as u8,
            0x80 | ((c >> 6) & 0x3F) as u8,
            0x80 | (c & 0x3F) as u8,
        ]);
    } else {
        buf.extend_from_slice(&[
            0xF0 | (c >> 18) as u8,
            0x80 | ((c >> 12) & 0x3F) as u8,
            0x80 | ((c >> 6) & 0x3F) as u8,
            0x80 | (c & 0x3F) as u8,
        ]);
    }
}

/// Decode generalized UTF-8 (as [`push_code`] writes it): the complete characters, and the
/// bytes of an incomplete last one.
fn decode(bytes: &[u8]) -> (Vec<u32>, &[u8]) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let n = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        if i + n > bytes.len() {
            return (out, &bytes[i..]);
        }
        let c = match n {
            1 => u32::from(b),
            2 => (u32::from(b & 0x1F) << 6) | u32::from(bytes[i + 1] & 0x3F),
            3 => {
                (u32::from(b & 0x0F) << 12)
                    | (u32::from(bytes[i + 1] & 0x3F) << 6)
                    | u32::from(bytes[i + 2] & 0x3F)
            }
            _ => {
                (u32::from(b & 0x07) << 18)
                    | (u32::from(bytes[i + 1] & 0x3F) << 12)
                    | (u32::from(bytes[i + 2] & 0x3F) << 6)
                    | u32::from(bytes[i + 3] & 0x3F)
            }
        };
        out.push(c);
        i += n;
    }
    (out, &[])
}

/// The characters whose UTF-8 form starts with `part` (the first bytes of one character).
fn utf8_range(part: &[u8]) -> (u32, u32) {
    let n = match part[0] {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    };
    let mut lo = part.to_vec();
    let mut hi = part.to_vec();
    lo.resize(n, 0x80);
    hi.resize(n, 0xBF);
    (decode(&lo).0[0], decode(&hi).0[0])
}

fn simple_escape(b: u8) -> u32 {
    match b {
        b'b' => 0x08,
        b'f' => 0x0C,
        b'n' => 0x0A,
        b'r' => 0x0D,
        b't' => 0x09,
        other => u32::from(other),
    }
}

fn hex(b: u8) -> u32 {
    match b {
        b'0'..=b'9' => u32::from(b - b'0'),
        b'a'..=b'f' => u32::from(b - b'a' + 10),
        b'A'..=b'F' => u32::from(b - b'A' + 10),
        _ => 0,
    }
}

/// The characters whose JSON spelling can start with a `\\u` code unit in `lo..=hi`, after a
/// high surrogate `high` if one is waiting. The grammar spells no lone surrogate (a character
/// above the BMP is a high and a low surrogate), so after a high one only a low one can come.
fn unit_ranges(high: Option<u32>, lo: u32, hi: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    match high {
        Some(h) => {
            let (a, b) = (lo.max(0xDC00), hi.min(0xDFFF));
            if a <= b {
                let base = 0x10000 + ((h - 0xD800) << 10);
                out.push((base + (a - 0xDC00), base + (b - 0xDC00)));
            }
        }
        None => {
            if lo < 0xD800 {
                out.push((lo, hi.min(0xD7FF)));
            }
            let (a, b) = (lo.max(0xD800), hi.min(0xDBFF));
            if a <= b {
                out.push((
                    0x10000 + ((a - 0xD800) << 10),
                    0x10000 + ((b - 0xD800) << 10) + 0x3FF,
                ));
            }
            if hi > 0xDFFF {
                out.push((lo.max(0xE000), hi));
            }
        }
    }
    out
}

impl Lex {
    /// Before the output's first byte.
    pub fn new() -> Lex {
        Lex {
            frames: Vec::new(),
            str: Str::Out,
            esc: Esc::None,
            high: None,
            buf: Vec::new(),
        }
    }

    fn set(&self) -> Option<&Set> {
        match self.frames.last() {
            Some(Frame::Arr { set: Some(s) }) => Some(s),
            _ => None,
        }
    }

    fn set_mut(&mut self) -> Option<&mut Set> {
        match self.frames.last_mut() {
            Some(Frame::Arr { set: Some(s) }) => Some(s),
            _ => None,
        }
    }

    fn flush_high(&mut self) {
        if let Some(h) = self.high.take() {
            if self.str != Str::Other {
                push_code(&mut self.buf, h);
            }
        }
    }

    fn code_unit(&mut self, u: u32) {
        let keep = self.str != Str::Other;
        match self.high.take() {
            Some(h) if (0xDC00..=0xDFFF).contains(&u) => {
                if keep {
                    push_code(&mut self.buf, 0x10000 + ((h - 0xD800) << 10) + (u - 0xDC00));
                }
            }
            h => {
                if let (Some(h), true) = (h, keep) {
                    push_code(&mut self.buf, h);
                }
                if (0xD800..=0xDBFF).contains(&u) {
                    self.high = Some(u);
                } else if keep {
                    push_code(&mut self.buf, u);
                }
            }
        }
    }

    /// The string just read has ended. `false`: it was an item already in its array.
    fn end_string(&mut self) -> bool {
        self.flush_high();
        let kind = std::mem::replace(&mut self.str, Str::Out);
        if kind == Str::Other {
            return true;
        }
        let buf = std::mem::take(&mut self.buf);
        match kind {
            Str::Key => {
                if let Some(Frame::Obj { key, .. }) = self.frames.last_mut() {
                    *key = Some(buf.into());
                }
                return true;
            }
            Str::Item => return self.add_item(buf),
            _ => {}
        }
        true
    }

    /// Add the value of an item just ended to its array. `false`: the array holds it already.
    fn add_item(&mut self, value: Vec<u8>) -> bool {
        if let Some(s) = self.set_mut() {
            if !s.values.insert(&value) {
                return false;
            }
            s.want_item = false;
        }
        true
    }

    /// A number item has ended. `false`: it was already in its array.
    fn end_number(&mut self, kind: Kind) -> bool {
        self.str = Str::Out;
        let mut buf = std::mem::take(&mut self.buf);
        if kind == Kind::Num {
            buf = canonical_number(&buf);
        } else if buf == b"-0" {
            buf.remove(0);
        }
        self.add_item(buf)
    }

    /// Read `bytes` of output. `false`: they finish an item equal to an earlier one of its
    /// unique array (the reader is then left part way).
    pub fn step(&mut self, u: &Uniques, bytes: &[u8]) -> bool {
        for &b in bytes {
            if self.str == Str::Num {
                if b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E') {
                    self.buf.push(b);
                    continue;
                }
                let kind = self
                    .set()
                    .map_or(Kind::Int, |s| u.arrays[s.id as usize].kind);
                if !self.end_number(kind) {
                    return false;
                }
            }
            if self.str != Str::Out {
                match self.esc {
                    Esc::Slash => {
                        if b == b'u' {
                            self.esc = Esc::U(0, 0);
                        } else {
                            self.esc = Esc::None;
                            self.code_unit(simple_escape(b));
                        }
                    }
                    Esc::U(n, v) => {
                        let v = v * 16 + hex(b);
                        if n == 3 {
                            self.esc = Esc::None;
                            self.code_unit(v);
                        } else {
                            self.esc = Esc::U(n + 1, v);
                        }
                    }
                    Esc::None => match b {
                        b'"' => {
                            if !self.end_string() {
                                return false;
                            }
                        }
                        b'\\' => self.esc = Esc::Slash,
                        _ => {
                            self.flush_high();
                            if self.str != Str::Other {
                                self.buf.push(b);
                            }
                        }
                    },
                }
                continue;
            }
            match b {
                b'-' | b'0'..=b'9' => {
                    if let Some(s) = self.set() {
                        if matches!(u.arrays[s.id as usize].kind, Kind::Int | Kind::Num) {
                            self.str = Str::Num;
                            self.buf.clear();
                            self.buf.push(b);
                        }
                    }
                }
                b'"' => {
                    self.str = match self.frames.last() {
                        Some(Frame::Obj { want_key: true, .. }) => Str::Key,
                        Some(Frame::Arr { set: Some(_) }) => Str::Item,
                        _ => Str::Other,
                    };
                    self.buf.clear();
                }
                b'{' => self.frames.push(Frame::Obj {
                    key: None,
                    want_key: true,
                }),
                b'[' => {
                    let set = u.at(&self.frames).map(|id| Set {
                        id,
                        values: Held::default(),
                        want_item: false,
                    });
                    self.frames.push(Frame::Arr { set });
                }
                b'}' | b']' => {
                    self.frames.pop();
                }
                b':' => {
                    if let Some(Frame::Obj { want_key, .. }) = self.frames.last_mut() {
                        *want_key = false;
                    }
                }
                b',' => match self.frames.last_mut() {
                    Some(Frame::Obj { key, want_key }) => {
                        *key = None;
                        *want_key = true;
                    }
                    Some(Frame::Arr { set: Some(s) }) => s.want_item = true,
                    _ => {}
                },
                _ => {}
            }
        }
        true
    }

    /// Whether the output read so far can still be finished as far as uniqueness goes (the
    /// automaton answers for the rest): the item being written has a completion that its array
    /// does not hold yet, and an item that must come has a value left.
    pub fn live(&self, u: &Uniques) -> bool {
        let Some(set) = self.set() else { return true };
        let a = &u.arrays[set.id as usize];
        let lang = &a.item;
        match self.str {
            Str::Item => !self.dead_item(lang, set),
            Str::Num if a.kind == Kind::Num => self
                .pinned_number(lang)
                .is_none_or(|v| !set.values.contains(&v)),
            Str::Num => !self.dead_number(lang, set),
            Str::Out if set.want_item => a.distinct().is_none_or(|n| n > set.values.len() as u64),
            _ => true,
        }
    }

    /// The one value (its canonical text) that every completion of the number being written
    /// has, where there is one: its completions only add what leaves a value as it is (a sign
    /// or a leading `0` before any digit, a point after the integer digits, zeros after the
    /// point). `None`: infinitely many values (see [`Kind::Num`]).
    fn pinned_number(&self, lang: &ItemLang) -> Option<Vec<u8>> {
        const NO_DIGIT: u8 = 0;
        const INT: u8 = 1;
        const FRACTION: u8 = 2;
        if self.buf.iter().any(|&c| c == b'e' || c == b'E') {
            return None;
        }
        let s = lang.run(self.buf.iter().map(|&c| u32::from(c)))?;
        let phase = if self.buf.contains(&b'.') {
            FRACTION
        } else if self.buf.iter().any(u8::is_ascii_digit) {
            INT
        } else {
            NO_DIGIT
        };
        // (state, phase); every state of the item language reaches acceptance
        let mut todo = vec![(s, phase)];
        let mut seen: FxHashSet<(usize, u8)> = FxHashSet::default();
        while let Some((at, phase)) = todo.pop() {
            if !seen.insert((at, phase)) {
                continue;
            }
            for &(lo, hi, t) in lang.edges(at) {
                for c in lo..=hi {
                    let next = match (phase, u8::try_from(c).ok()?) {
                        (NO_DIGIT, b'-') => NO_DIGIT,
                        (NO_DIGIT, b'0') => INT,
                        (INT, b'.') | (FRACTION, b'0') => FRACTION,
                        _ => return None,
                    };
                    todo.push((t, next));
                }
            }
        }
        if phase == NO_DIGIT {
            return Some(b"0".to_vec());
        }
        Some(canonical_number(&self.buf))
    }

    /// Every way to finish the integer being written spells a value its array holds already
    /// (`-0` spells zero too).
    fn dead_number(&self, lang: &ItemLang, set: &Set) -> bool {
        let Some(s) = lang.run(self.buf.iter().map(|&c| u32::from(c))) else {
            return true;
        };
        let Some(count) = lang.count_from(s, None) else {
            return false;
        };
        let minus_zero = lang.accepts("-0") && b"-0".starts_with(&self.buf);
        let held = set.values.count_prefixed(&self.buf)
            + u64::from(minus_zero && set.values.contains(b"0"));
        count <= held
    }

    /// Every completion of the item being written is a value its array holds already.
    fn dead_item(&self, lang: &ItemLang, set: &Set) -> bool {
        let (chars, part) = decode(&self.buf);
        let Some(s) = lang.run(chars.iter().copied()) else {
            return true;
        };
        // the next character, where it is partly read already
        let ranges: Option<Vec<(u32, u32)>> = if !part.is_empty() {
            Some(vec![utf8_range(part)])
        } else {
            match (self.esc, self.high) {
                (Esc::None, None) => None,
                (Esc::Slash, h) => Some(unit_ranges(h, 0, 0xFFFF)),
                (Esc::U(n, v), h) => {
                    let shift = 4 * (4 - u32::from(n));
                    Some(unit_ranges(h, v << shift, ((v + 1) << shift) - 1))
                }
                (Esc::None, Some(h)) => Some(unit_ranges(Some(h), 0xDC00, 0xDFFF)),
            }
        };
        let count = lang.count_from(s, ranges.as_deref());
        let Some(count) = count else { return false };
        // the values spelling these characters, then (when it is partly read) a next character
        // in the ranges: values are UTF-8 (surrogates in the same three-byte form), whose byte
        // order is the order of the characters, so each range is one range of ranks
        let mut prefix = Vec::with_capacity(self.buf.len());
        for &c in &chars {
            push_code(&mut prefix, c);
        }
        let held = match ranges {
            None => set.values.count_prefixed(&prefix),
            Some(mut r) => {
                r.sort_unstable();
                let mut merged: Vec<(u32, u32)> = Vec::with_capacity(r.len());
                for (a, b) in r {
                    match merged.last_mut() {
                        Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                        _ => merged.push((a, b)),
                    }
                }
                let mut n = 0u64;
                for (a, b) in merged {
                    let mut lo = prefix.clone();
                    push_code(&mut lo, a);
                    let mut hi = prefix.clone();
                    push_code(&mut hi, b);
                    hi.push(0xFF);
                    n += set.values.rank(&hi).saturating_sub(set.values.rank(&lo)) as u64;
                }
                n
            }
        };
        count <= held
    }

    /// Inside an item with an escape or a character partly read.
    fn pending(&self) -> bool {
        self.esc != Esc::None || self.high.is_some()
    }
}

fn allowed(row: &[u32], t: u32) -> bool {
    row.get(t as usize / 32)
        .is_some_and(|w| w >> (t % 32) & 1 == 1)
}

fn clear(row: &mut [u32], t: u32) {
    row[t as usize / 32] &= !(1 << (t % 32));
}

/// Take away from `row` (the automaton's mask at the position `lex` has read up to) the tokens
/// that uniqueness forbids (see the module comment).
pub(crate) fn filter(u: &Uniques, lex: &Lex, vocab: &Vocabulary, row: &mut [u32]) {
    let lists = u.lists(vocab);
    let mut l = lex.clone();
    let mut check = |t: u32, row: &mut [u32]| {
        if !allowed(row, t) {
            return;
        }
        let Some(bytes) = vocab.token_bytes(t) else {
            return;
        };
        l.clone_from(lex);
        if !(l.step(u, bytes) && l.live(u)) {
            clear(row, t);
        }
    };
    let Some(set) = lex.set() else {
        for &t in &lists.opening {
            check(t, row);
        }
        return;
    };
    let int = matches!(u.arrays[set.id as usize].kind, Kind::Int | Kind::Num);
    if int || (lex.str == Str::Item && lex.pending()) {
        // integers (few tokens continue or end one: digits, separators), or an escape or a
        // surrogate pair under way: every token allowed
        for w in 0..row.len() {
            let mut bits = row[w];
            while bits != 0 {
                let t = (w * 32) as u32 + bits.trailing_zeros();
                bits &= bits - 1;
                check(t, row);
            }
        }
        return;
    }
    for &t in &lists.quotes {
        check(t, row);
    }
    if lex.str != Str::Item {
        // a `,` asks for one more item: it matters only when the values can run out
        if u.arrays[set.id as usize].distinct().is_some() {
            for &t in &lists.commas {
                check(t, row);
            }
        }
        return;
    }
    // tokens of plain bytes that continue the item into a prefix of a value it holds: the
    // values (ordered) and the token trie walked together, one next byte at a time, so the
    // walk meets each trie node at most once, whatever the number of values
    let trie = vocab.trie();
    let nodes = trie.nodes();
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let held = &set.values;
    let mut work: Vec<(Vec<u8>, Option<usize>)> = vec![(lex.buf.clone(), None)];
    while let Some((prefix, at)) = work.pop() {
        let range = held.prefixed(&prefix);
        let (mut i, end) = (range.start, range.end);
        while i < end {
            let Some(v) = held.nth(i) else { break };
            let Some(&b) = v.get(prefix.len()) else {
                i += 1; // the value that is the prefix itself
                continue;
            };
            let mut next_prefix = prefix.clone();
            next_prefix.push(b);
            // past every value continuing with `b`
            i = held.prefixed(&next_prefix).end;
            if matches!(b, b'"' | b'\\') || b < 0x20 {
                continue;
            }
            let next = match at {
                None => trie
                    .roots()
                    .iter()
                    .find(|&&(c, _)| c == b)
                    .map(|&(_, i)| i as usize),
                Some(i) => {
                    let end = i + nodes[i].subtree as usize;
                    let mut j = i + 1;
                    let mut found = None;
                    while j < end {
                        if nodes[j].byte == b {
                            found = Some(j);
                            break;
                        }
                        j += nodes[j].subtree as usize;
                    }
                    found
                }
            };
            let Some(j) = next else { continue };
            let t = nodes[j].token;
            if t != crate::trie::NO_TOKEN && seen.insert(t) {
                check(t, row);
            }
            work.push((next_prefix, Some(j)));
        }
    }
    // the walk met only the tokens the trie keeps; their duplicates follow them
    trie.copy_duplicate_bits(row);
}

#[cfg(test)]
mod number_tests {
    use super::canonical_number;

    fn c(s: &str) -> String {
        String::from_utf8(canonical_number(s.as_bytes())).unwrap()
    }

    #[test]
    fn one_text_per_numeric_value() {
        for same in [
            &["1", "1.0", "10e-1", "0.1e1", "100E-2", "1.000e+0", "0.01e2"][..],
            &["0", "-0", "0.000", "0e5", "-0.0E-7"],
            &["-1.5", "-15e-1", "-0.15E1", "-1.50"],
            &["120", "1.2e2", "12e1", "1200e-1"],
        ] {
            let want = c(same[0]);
            for s in same {
                assert_eq!(c(s), want, "{s}");
            }
        }
        for (a, b) in [
            ("1", "-1"),
            ("1", "10"),
            ("0.1", "1"),
            ("1e2", "1e3"),
            ("12", "21"),
        ] {
            assert_ne!(c(a), c(b), "{a} {b}");
        }
        // exponents of any length, exactly
        let big = "9".repeat(40);
        assert_eq!(
            c(&format!("10e{big}")),
            c(&format!("1e1{}", "0".repeat(40)))
        );
        assert_ne!(c(&format!("1e{big}")), c(&format!("1e1{}", "0".repeat(40))));
        assert_eq!(
            c(&format!("1000e-{big}")),
            c(&format!("1e-{}6", "9".repeat(39)))
        );
        assert_eq!(
            c(&format!("1.5e-{big}")),
            c(&format!("15e-1{}", "0".repeat(40)))
        );
    }
}
