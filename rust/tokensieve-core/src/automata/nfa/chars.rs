//! Characters in JSON string spellings (raw UTF-8, short escapes, `\uXXXX` and surrogate
//! pairs) as NFA states: unconstrained string contents, strings excluding a set of names, and
//! character DFAs (with length bounds counted as a counted repetition's bodies are).

use regex_automata::nfa::thompson::Transition;
use regex_automata::util::primitives::StateID;
use rustc_hash::FxHashMap;

use super::compiler::{Compiler, Frag};
use super::Count;
use crate::automata::expr::{CharStates, Names};
use crate::error::Result;

/// The states a character read in any spelling continues through, all ending in `to`: the
/// last one to three hex digits of a `\uXXXX` escape, the rest of a surrogate pair, the
/// continuation bytes of a raw UTF-8 character.
pub(super) struct CharTails {
    to: StateID,
    hex: [StateID; 3],
    /// after `\u` and `d`: `[0-7]` and two more digits, or a high surrogate's rest and its low
    /// surrogate
    d: StateID,
    cont: [StateID; 3],
    e0: StateID,
    ed: StateID,
    f0: StateID,
    f4: StateID,
}

impl CharTails {
    /// The lead bytes of raw multi-byte UTF-8 characters and their continuations, after
    /// every ASCII byte.
    fn utf8_lead_runs(&self, raw: &mut Runs) {
        for (a, b, next) in self.leads() {
            raw.push(a, next);
            if let Some(last) = raw.0.last_mut() {
                last.end = b;
            }
        }
    }

    fn leads(&self) -> [(u8, u8, StateID); 8] {
        [
            (0xC2, 0xDF, self.cont[0]),
            (0xE0, 0xE0, self.e0),
            (0xE1, 0xEC, self.cont[1]),
            (0xED, 0xED, self.ed),
            (0xEE, 0xEF, self.cont[1]),
            (0xF0, 0xF0, self.f0),
            (0xF1, 0xF3, self.cont[2]),
            (0xF4, 0xF4, self.f4),
        ]
    }
}

/// The hex digit bytes in increasing order, with their values.
const HEX_BYTES: [(u8, u8); 22] = [
    (b'0', 0),
    (b'1', 1),
    (b'2', 2),
    (b'3', 3),
    (b'4', 4),
    (b'5', 5),
    (b'6', 6),
    (b'7', 7),
    (b'8', 8),
    (b'9', 9),
    (b'A', 10),
    (b'B', 11),
    (b'C', 12),
    (b'D', 13),
    (b'E', 14),
    (b'F', 15),
    (b'a', 10),
    (b'b', 11),
    (b'c', 12),
    (b'd', 13),
    (b'e', 14),
    (b'f', 15),
];

/// [`SHORT_ESCAPES`] by the letter after the backslash, in increasing order: (letter,
/// character).
const ESCAPES_BY_LETTER: [(u8, u8); 8] = [
    (b'"', b'"'),
    (b'/', b'/'),
    (b'\\', b'\\'),
    (b'b', 0x08),
    (b'f', 0x0C),
    (b'n', 0x0A),
    (b'r', 0x0D),
    (b't', 0x09),
];

/// Byte transitions given in increasing byte order, runs of neighbouring bytes with one
/// target merged into one range.
struct Runs(Vec<Transition>);

impl Default for Runs {
    /// Room for the runs of most states read here (a character's raw bytes, hex digits), so
    /// that building one allocates once: a schema's key readers build thousands of them.
    fn default() -> Runs {
        Runs(Vec::with_capacity(16))
    }
}

impl Runs {
    fn push(&mut self, b: u8, next: StateID) {
        if let Some(last) = self.0.last_mut() {
            if last.next == next && last.end.checked_add(1) == Some(b) {
                last.end = b;
                return;
            }
        }
        self.0.push(Transition {
            start: b,
            end: b,
            next,
        });
    }
}

/// A set of bytes: disjoint ranges in increasing order.
type ByteClass = Vec<(u8, u8)>;

/// Spellings of some characters: one byte class per byte read.
type Spelling = Vec<ByteClass>;

/// Where a byte of a [`Partition`]'s trie leads: another node, or the end of a character of
/// a range (by index).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Node(u32),
    End(u32),
}

/// The tries reading the spellings of the characters of some disjoint ranges, ending in the
/// range read: after `\\u` (every range; ASCII by `00XX`, astral characters by surrogate
/// pairs) and raw UTF-8 from its lead byte (the ranges above ASCII).
struct Partition {
    /// Each node's transitions, in increasing byte order.
    nodes: Vec<Vec<(u8, u8, Step)>>,
    /// The range every end below a node is in, when that is one range.
    only: Vec<Option<u32>>,
    esc: u32,
    raw: u32,
}

/// The partitions of a character DFA's split states, and the sub-tries copied so far that
/// lead to one target (by partition, node and target).
#[derive(Default)]
pub(super) struct SplitCache {
    ids: FxHashMap<Vec<(u32, u32)>, usize>,
    parts: Vec<Partition>,
    shared: FxHashMap<(usize, u32, StateID), StateID>,
}

impl Partition {
    fn new(ranges: &[(u32, u32)]) -> Result<Partition> {
        let mut esc: Vec<(Spelling, u32)> = Vec::new();
        let mut raw: Vec<(Spelling, u32)> = Vec::new();
        let mut buf = Vec::new();
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            let i = i as u32;
            if lo < 0x80 {
                esc.extend(hex_spellings(lo, hi.min(0x7F)).map(|s| (s, i)));
            }
            for (a, b) in scalar_ranges(lo.max(0x80), hi) {
                escape_spellings(a, b, &mut buf);
                esc.extend(buf.drain(..).map(|s| (s, i)));
                utf8_spellings(a, b, &mut buf);
                raw.extend(buf.drain(..).map(|s| (s, i)));
            }
        }
        let mut p = Partition {
            nodes: Vec::new(),
            only: Vec::new(),
            esc: 0,
            raw: 0,
        };
        let mut memo = FxHashMap::default();
        p.esc = p.node(&refs(&esc), &mut memo)?;
        p.raw = p.node(&refs(&raw), &mut memo)?;
        Ok(p)
    }

    /// The node reading any of `seqs` (spellings, each with its range); no spelling is a
    /// prefix of another.
    fn node(
        &mut self,
        seqs: &[(&[ByteClass], u32)],
        memo: &mut FxHashMap<Vec<(Spelling, u32)>, u32>,
    ) -> Result<u32> {
        let mut cuts: Vec<u16> = seqs
            .iter()
            .flat_map(|(c, _)| c[0].iter())
            .flat_map(|&(a, b)| [u16::from(a), u16::from(b) + 1])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut trans: Vec<(u8, u8, Step)> = Vec::new();
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1] - 1);
            let mut end: Option<u32> = None;
            let mut more: Vec<(Spelling, u32)> = Vec::new();
            for &(c, i) in seqs {
                if c[0]
                    .iter()
                    .any(|&(x, y)| u16::from(x) <= a && a <= u16::from(y))
                {
                    if c.len() == 1 {
                        if end.is_some_and(|e| e != i) {
                            return Err(overlap());
                        }
                        end = Some(i);
                    } else {
                        more.push((c[1..].to_vec(), i));
                    }
                }
            }
            let step = match (end, more.is_empty()) {
                (None, true) => continue,
                (Some(i), true) => Step::End(i),
                (Some(_), false) => return Err(overlap()),
                (None, false) => {
                    more.sort_unstable();
                    more.dedup();
                    match memo.get(&more) {
                        Some(&n) => Step::Node(n),
                        None => {
                            let n = self.node(&refs(&more), memo)?;
                            memo.insert(more, n);
                            Step::Node(n)
                        }
                    }
                }
            };
            match trans.last_mut() {
                Some(l) if l.2 == step && u16::from(l.1) + 1 == a => l.1 = b as u8,
                _ => trans.push((a as u8, b as u8, step)),
            }
        }
        let mut only = None;
        let mut one = true;
        for &(_, _, step) in &trans {
            let r = match step {
                Step::End(i) => Some(i),
                Step::Node(n) => self.only[n as usize],
            };
            match (r, only) {
                (None, _) => one = false,
                (Some(r), None) => only = Some(r),
                (Some(r), Some(o)) => one &= r == o,
            }
        }
        self.nodes.push(trans);
        self.only.push(if one { only } else { None });
        Ok(self.nodes.len() as u32 - 1)
    }
}

fn overlap() -> crate::error::Error {
    crate::error::Error::Internal("two spellings of characters overlap".into())
}

/// Spellings and what they lead to, borrowed.
fn refs<T: Copy>(v: &[(Spelling, T)]) -> Vec<(&[ByteClass], T)> {
    v.iter().map(|(c, t)| (c.as_slice(), *t)).collect()
}

/// The hex digit bytes of the values `a..=b` (both cases).
fn hex_class(a: u8, b: u8) -> ByteClass {
    let mut c = Vec::with_capacity(3);
    if a <= 9 {
        c.push((b'0' + a, b'0' + b.min(9)));
    }
    if b >= 10 {
        let a = a.max(10) - 10;
        c.push((b'A' + a, b'A' + b - 10));
        c.push((b'a' + a, b'a' + b - 10));
    }
    c
}

/// The `digits` hex digits of the numbers `lo..=hi`: sequences of digit value ranges, one
/// range per digit, together spelling each number exactly once.
fn hex_split(lo: u32, hi: u32, digits: u32) -> Vec<Vec<(u8, u8)>> {
    if digits == 1 {
        return vec![vec![(lo as u8, hi as u8)]];
    }
    let w = 16u32.pow(digits - 1);
    let (lh, ll, hh, hl) = (lo / w, lo % w, hi / w, hi % w);
    let with = |d: u32, tails: Vec<Vec<(u8, u8)>>| {
        tails.into_iter().map(move |t| {
            let mut v = vec![(d as u8, d as u8)];
            v.extend(t);
            v
        })
    };
    if lh == hh {
        return with(lh, hex_split(ll, hl, digits - 1)).collect();
    }
    let mut out = Vec::new();
    let (mut first_full, mut last_full) = (lh, hh);
    if ll != 0 {
        out.extend(with(lh, hex_split(ll, w - 1, digits - 1)));
        first_full = lh + 1;
    }
    let last = (hl != w - 1).then(|| {
        last_full = hh - 1;
        with(hh, hex_split(0, hl, digits - 1)).collect::<Vec<_>>()
    });
    if first_full <= last_full {
        let mut v = vec![(first_full as u8, last_full as u8)];
        v.extend((1..digits).map(|_| (0u8, 15u8)));
        out.push(v);
    }
    out.extend(last.into_iter().flatten());
    out
}

/// The `\uXXXX` digits of the codes `lo..=hi` (at most `0xFFFF`).
fn hex_spellings(lo: u32, hi: u32) -> impl Iterator<Item = Spelling> {
    hex_split(lo, hi, 4)
        .into_iter()
        .map(|ds| ds.into_iter().map(|(a, b)| hex_class(a, b)).collect())
}

/// `lo..=hi` without the surrogate block.
fn scalar_ranges(lo: u32, hi: u32) -> impl Iterator<Item = (u32, u32)> {
    [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi.min(0x10FFFF))]
        .into_iter()
        .filter(|(a, b)| a <= b)
}

/// The spellings after `\u` of the characters `lo..=hi` (no surrogates, above ASCII): four hex
/// digits in the BMP, a surrogate pair's digits, `\u` and the low surrogate's digits above it.
fn escape_spellings(lo: u32, hi: u32, out: &mut Vec<Spelling>) {
    if lo <= 0xFFFF {
        out.extend(hex_spellings(lo, hi.min(0xFFFF)));
    }
    if hi < 0x10000 {
        return;
    }
    let split = |c: u32| {
        let v = c - 0x10000;
        (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF))
    };
    let ((h1, l1), (h2, l2)) = (split(lo.max(0x10000)), split(hi));
    // (high surrogates, low surrogates) pairs covering the range
    let mut parts = Vec::new();
    if h1 == h2 {
        parts.push((h1, h1, l1, l2));
    } else {
        parts.push((h1, h1, l1, 0xDFFF));
        if h1 + 1 < h2 {
            parts.push((h1 + 1, h2 - 1, 0xDC00, 0xDFFF));
        }
        parts.push((h2, h2, 0xDC00, l2));
    }
    for (ha, hb, la, lb) in parts {
        let lows: Vec<Spelling> = hex_spellings(la, lb).collect();
        for high in hex_spellings(ha, hb) {
            for low in &lows {
                let mut s = high.clone();
                s.push(vec![(b'\\', b'\\')]);
                s.push(vec![(b'u', b'u')]);
                s.extend(low.iter().cloned());
                out.push(s);
            }
        }
    }
}

/// The raw UTF-8 spellings of the characters `lo..=hi` (no surrogates, above ASCII).
fn utf8_spellings(lo: u32, hi: u32, out: &mut Vec<Spelling>) {
    let (Some(a), Some(b)) = (char::from_u32(lo), char::from_u32(hi)) else {
        return;
    };
    for seq in regex_syntax::utf8::Utf8Sequences::new(a, b) {
        out.push(
            seq.as_slice()
                .iter()
                .map(|r| vec![(r.start, r.end)])
                .collect(),
        );
    }
}

impl Compiler {
    /// A state whose byte transitions are `t` (bytes mapped to `None` have none).
    fn table(&mut self, t: &[Option<StateID>; 256]) -> Result<StateID> {
        let mut r = Runs::default();
        for (b, next) in t.iter().enumerate() {
            if let Some(next) = *next {
                r.push(b as u8, next);
            }
        }
        self.runs(r)
    }

    /// A state whose byte transitions are `r` (none: the fail state).
    fn runs(&mut self, r: Runs) -> Result<StateID> {
        if r.0.is_empty() {
            self.fail()
        } else {
            self.sparse(r.0)
        }
    }

    /// A state reading the bytes in `ranges` (disjoint, in increasing order) into `next`.
    fn on(&mut self, ranges: &[(u8, u8)], next: StateID) -> Result<StateID> {
        debug_assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0));
        let r = ranges
            .iter()
            .map(|&(start, end)| Transition { start, end, next })
            .collect();
        self.runs(Runs(r))
    }

    fn char_tails(&mut self, to: StateID) -> Result<CharTails> {
        const HEX: [(u8, u8); 3] = [(b'0', b'9'), (b'A', b'F'), (b'a', b'f')];
        let h1 = self.on(&HEX, to)?;
        let h2 = self.on(&HEX, h1)?;
        let h3 = self.on(&HEX, h2)?;
        // a high surrogate's last three digits, then `\u` and a low surrogate
        let low = self.on(&[(b'C', b'F'), (b'c', b'f')], h2)?;
        let low = self.on(&[(b'D', b'D'), (b'd', b'd')], low)?;
        let low = self.on(&[(b'u', b'u')], low)?;
        let low = self.on(&[(b'\\', b'\\')], low)?;
        let high = self.on(&HEX, low)?;
        let high = self.on(&HEX, high)?;
        let mut t = [None; 256];
        for x in b'0'..=b'7' {
            t[x as usize] = Some(h2);
        }
        for x in [b'8', b'9', b'a', b'b', b'A', b'B'] {
            t[x as usize] = Some(high);
        }
        let d = self.table(&t)?;
        let c1 = self.on(&[(0x80, 0xBF)], to)?;
        let c2 = self.on(&[(0x80, 0xBF)], c1)?;
        let c3 = self.on(&[(0x80, 0xBF)], c2)?;
        let e0 = self.on(&[(0xA0, 0xBF)], c1)?;
        let ed = self.on(&[(0x80, 0x9F)], c1)?;
        let f0 = self.on(&[(0x90, 0xBF)], c2)?;
        let f4 = self.on(&[(0x80, 0x8F)], c2)?;
        Ok(CharTails {
            to,
            hex: [h1, h2, h3],
            d,
            cont: [c1, c2, c3],
            e0,
            ed,
            f0,
            f4,
        })
    }

    /// A state reading one character in any JSON string spelling: the ASCII characters of
    /// `kids` (sorted by character) continue in their own states, every other character in
    /// `t.to`.
    fn one_char(&mut self, kids: &[(u8, StateID)], t: &CharTails) -> Result<StateID> {
        let mut kid = [None; 128];
        for &(c, s) in kids {
            kid[c as usize] = Some(s);
        }
        // `\u` and four hex digits: a trie over the kids' codes (`00XY`)
        let mut u = Runs::default();
        for (b, d) in HEX_BYTES {
            if d == 0 && !kids.is_empty() {
                let mut second = Runs::default();
                for (b2, d2) in HEX_BYTES {
                    let next = if d2 == 0 {
                        let mut third = Runs::default();
                        for (b3, h) in HEX_BYTES {
                            let has_kid = h < 8
                                && kid[usize::from(h) << 4..][..16].iter().any(Option::is_some);
                            let next = if has_kid {
                                let mut fourth = Runs::default();
                                for (b4, d4) in HEX_BYTES {
                                    fourth.push(b4, kid[usize::from(h << 4 | d4)].unwrap_or(t.to));
                                }
                                self.runs(fourth)?
                            } else {
                                t.hex[0]
                            };
                            third.push(b3, next);
                        }
                        self.runs(third)?
                    } else {
                        t.hex[1]
                    };
                    second.push(b2, next);
                }
                u.push(b, self.runs(second)?);
            } else {
                u.push(b, if d == 0xD { t.d } else { t.hex[2] });
            }
        }
        let u = self.runs(u)?;
        let mut esc = Runs::default();
        for (e, code) in ESCAPES_BY_LETTER {
            esc.push(e, kid[code as usize].unwrap_or(t.to));
        }
        esc.push(b'u', u);
        let esc = self.runs(esc)?;
        let mut raw = Runs::default();
        for c in 0x20..0x80u8 {
            match c {
                b'"' => {}
                b'\\' => raw.push(c, esc),
                _ => raw.push(c, kid[c as usize].unwrap_or(t.to)),
            }
        }
        t.utf8_lead_runs(&mut raw);
        self.runs(raw)
    }

    /// The trie node after reading some prefix of the names: `names` are what is left of the
    /// names with that prefix. The string may end here unless a name does.
    /// Nodes where every name has ended read one more character of any kind into `t.to`:
    /// one such state (`leaf`, built on first use) serves all of them.
    fn name_node(
        &mut self,
        names: &[&[u8]],
        t: &CharTails,
        end: StateID,
        leaf: &mut Option<StateID>,
    ) -> Result<StateID> {
        let mut firsts: Vec<u8> = names.iter().filter_map(|n| n.first().copied()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        let mut kids = Vec::with_capacity(firsts.len());
        for c in firsts {
            let rest: Vec<&[u8]> = names
                .iter()
                .filter(|n| n.first() == Some(&c))
                .map(|n| &n[1..])
                .collect();
            kids.push((c, self.name_node(&rest, t, end, leaf)?));
        }
        let read = match (kids.is_empty(), *leaf) {
            (true, Some(l)) => l,
            (true, None) => {
                let l = self.one_char(&[], t)?;
                *leaf = Some(l);
                l
            }
            (false, _) => self.one_char(&kids, t)?,
        };
        if names.iter().any(|n| n.is_empty()) {
            Ok(read)
        } else {
            self.union(vec![read, end])
        }
    }

    /// See [`crate::automata::expr::ascii_names_excluded`].
    pub(super) fn names_excluded(&mut self, n: &Names) -> Result<Frag> {
        let names: Vec<&[u8]> = n.names.iter().map(Vec::as_slice).collect();
        let (_, end, t) = self.any_chars()?;
        let entry = self.name_node(&names, &t, end, &mut None)?;
        Ok((entry, end))
    }

    /// See [`crate::automata::expr::char_dfa`] (and [`crate::automata::expr::raw_ascii_dfa`]:
    /// a raw one reads each character as its byte).
    ///
    /// With length bounds (`d.len`), the characters are counted as a counted repetition's
    /// bodies are (see [`Count`]): entering counts zero, each state reads a character only while
    /// the count is below the maximum (its `Take` marker, flagged `sized`) and every character
    /// read counts one on its way into its target state (one `Incr` marker per target); an
    /// accepting state leaves once the count is at the minimum. Which counts can still finish
    /// from a state depends on the state here (a format's remaining parts have lengths of their
    /// own): the lazy DFA checks it (`dfa`'s `LengthSets`).
    pub(super) fn char_dfa(&mut self, d: &CharStates) -> Result<Frag> {
        let (start, states) = (d.start, &d.states);
        let end = self.empty()?;
        let heads = (0..states.len())
            .map(|_| self.empty())
            .collect::<Result<Vec<_>>>()?;
        // where a character read leads: the target's head, or its `Incr` marker when counted
        let into = match d.len {
            None => heads.clone(),
            Some((min, max)) => {
                let cap = max.unwrap_or(min);
                heads
                    .iter()
                    .map(|&h| self.mark(Count::Incr(cap), h))
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let leave = match d.len {
            Some((min, _)) => self.mark(Count::Leave(min), end)?,
            None => end,
        };
        let mut tails: FxHashMap<usize, CharTails> = FxHashMap::default();
        let mut split = SplitCache::default();
        for (s, st) in states.iter().enumerate() {
            let (accept, rest) = (st.accept, st.rest);
            let mut to = [None; 128];
            for &(lo, hi, t) in &st.ascii {
                for c in lo..=hi {
                    to[c as usize] = Some(into[t]);
                }
            }
            if let Some(r) = rest {
                if let std::collections::hash_map::Entry::Vacant(e) = tails.entry(r) {
                    e.insert(self.char_tails(into[r])?);
                }
            }
            let mut read = if d.raw {
                // raw text (number text, a structural tag's free text): each ASCII character
                // is its own byte, every other one its UTF-8 bytes
                let mut r = Runs::default();
                for (c, t) in to.iter().enumerate() {
                    if let Some(t) = *t {
                        r.push(c as u8, t);
                    }
                }
                let (ranges, targets): (Vec<(u32, u32)>, Vec<StateID>) = match rest {
                    Some(x) => (vec![(0x80, 0x10FFFF)], vec![into[x]]),
                    None => st.wide.iter().map(|&(a, b, t)| ((a, b), into[t])).unzip(),
                };
                if !ranges.is_empty() {
                    let utf8 = self.raw_utf8(ranges, &targets, &mut split)?;
                    r.0.extend(utf8);
                }
                self.runs(r)?
            } else if st.wide.is_empty() {
                self.one_char_of(&to, rest.and_then(|r| tails.get(&r)))?
            } else {
                // every range of characters allowed here, ASCII ones by target, and its target
                let mut ranges: Vec<(u32, u32)> = Vec::new();
                let mut targets: Vec<StateID> = Vec::new();
                for c in 0..128u32 {
                    let Some(t) = to[c as usize] else { continue };
                    match (ranges.last_mut(), targets.last()) {
                        (Some(r), Some(&l)) if l == t && r.1 + 1 == c => r.1 = c,
                        _ => {
                            ranges.push((c, c));
                            targets.push(t);
                        }
                    }
                }
                for &(a, b, t) in &st.wide {
                    ranges.push((a, b));
                    targets.push(into[t]);
                }
                self.one_char_split(ranges, &targets, &mut split)?
            };
            if let Some((min, max)) = d.len {
                read = self.mark(
                    Count::Take {
                        min,
                        max,
                        sized: true,
                    },
                    read,
                )?;
            }
            let node = if accept {
                self.union(vec![read, leave])?
            } else {
                read
            };
            self.patch(heads[s], node)?;
        }
        match d.len {
            Some(_) => Ok((self.mark(Count::Enter, heads[start])?, end)),
            None => Ok((heads[start], end)),
        }
    }

    /// The transitions reading one character above ASCII as its raw UTF-8 bytes, where
    /// `ranges` (disjoint, increasing, at or above `0x80`) lead to `targets`.
    fn raw_utf8(
        &mut self,
        ranges: Vec<(u32, u32)>,
        targets: &[StateID],
        cache: &mut SplitCache,
    ) -> Result<Vec<Transition>> {
        let id = match cache.ids.get(&ranges) {
            Some(&id) => id,
            None => {
                let id = cache.parts.len();
                cache.parts.push(Partition::new(&ranges)?);
                cache.ids.insert(ranges, id);
                id
            }
        };
        let mut local = FxHashMap::default();
        let part = &cache.parts[id];
        self.copy_trie(id, part, part.raw, targets, &mut local, &mut cache.shared)
    }

    /// A state reading one character in any JSON string spelling, where the characters
    /// allowed are split between targets: `ranges` (disjoint, increasing; ASCII and above)
    /// lead to `targets`. The tries reading their spellings are built once per set of ranges
    /// (`cache`) and copied for each set of targets, sub-tries that lead to one target shared.
    fn one_char_split(
        &mut self,
        ranges: Vec<(u32, u32)>,
        targets: &[StateID],
        cache: &mut SplitCache,
    ) -> Result<StateID> {
        let id = match cache.ids.get(&ranges) {
            Some(&id) => id,
            None => {
                let id = cache.parts.len();
                cache.parts.push(Partition::new(&ranges)?);
                cache.ids.insert(ranges.clone(), id);
                id
            }
        };
        let mut local = FxHashMap::default();
        let part = &cache.parts[id];
        let mut esc = Runs::default();
        for (e, code) in ESCAPES_BY_LETTER {
            let code = u32::from(code);
            if let Some(i) = ranges.iter().position(|&(a, b)| a <= code && code <= b) {
                esc.push(e, targets[i]);
            }
        }
        let u = self.copy_trie(id, part, part.esc, targets, &mut local, &mut cache.shared)?;
        if !u.is_empty() {
            let u = self.sparse(u)?;
            esc.push(b'u', u);
        }
        let mut raw = Runs::default();
        let mut i = 0;
        for c in 0x20..0x80u32 {
            while i < ranges.len() && ranges[i].1 < c {
                i += 1;
            }
            let t = (i < ranges.len() && ranges[i].0 <= c).then(|| targets[i]);
            match c as u8 {
                b'"' => {}
                b'\\' => {
                    if !esc.0.is_empty() {
                        let e = self.runs(std::mem::take(&mut esc))?;
                        raw.push(b'\\', e);
                    }
                }
                b => {
                    if let Some(next) = t {
                        raw.push(b, next);
                    }
                }
            }
        }
        let utf8 = self.copy_trie(id, part, part.raw, targets, &mut local, &mut cache.shared)?;
        raw.0.extend(utf8);
        self.runs(raw)
    }

    /// The transitions of a copy of `node` of partition `id`'s tries whose ends lead to
    /// `targets` (by range).
    fn copy_trie(
        &mut self,
        id: usize,
        part: &Partition,
        node: u32,
        targets: &[StateID],
        local: &mut FxHashMap<u32, StateID>,
        shared: &mut FxHashMap<(usize, u32, StateID), StateID>,
    ) -> Result<Vec<Transition>> {
        let mut trans: Vec<Transition> = Vec::new();
        for &(a, b, step) in &part.nodes[node as usize] {
            let next = match step {
                Step::End(i) => targets[i as usize],
                Step::Node(c) => {
                    let only = part.only[c as usize].map(|i| (id, c, targets[i as usize]));
                    match local.get(&c).or_else(|| only.and_then(|k| shared.get(&k))) {
                        Some(&s) => s,
                        None => {
                            let t = self.copy_trie(id, part, c, targets, local, shared)?;
                            let s = self.sparse(t)?;
                            local.insert(c, s);
                            if let Some(k) = only {
                                shared.insert(k, s);
                            }
                            s
                        }
                    }
                }
            };
            match trans.last_mut() {
                Some(l) if l.next == next && u16::from(l.end) + 1 == u16::from(a) => l.end = b,
                _ => trans.push(Transition {
                    start: a,
                    end: b,
                    next,
                }),
            }
        }
        Ok(trans)
    }

    /// A state reading one character in any JSON string spelling: an ASCII character `c`
    /// continues in `to[c]` (none: not allowed), every other character in `rest.to` (none:
    /// not allowed).
    fn one_char_of(
        &mut self,
        to: &[Option<StateID>; 128],
        rest: Option<&CharTails>,
    ) -> Result<StateID> {
        // `\u` and four hex digits: `00` and an ASCII code, or (rest) any other code
        let mut fourths: [Option<StateID>; 8] = [None; 8];
        for (h, slot) in fourths.iter_mut().enumerate() {
            let mut fourth = Runs::default();
            for (b, d) in HEX_BYTES {
                if let Some(next) = to[h << 4 | usize::from(d)] {
                    fourth.push(b, next);
                }
            }
            if !fourth.0.is_empty() {
                *slot = Some(self.runs(fourth)?);
            }
        }
        let mut third = Runs::default();
        for (b, h) in HEX_BYTES {
            if h < 8 {
                if let Some(s) = fourths[h as usize] {
                    third.push(b, s);
                }
            } else if let Some(t) = rest {
                third.push(b, t.hex[0]);
            }
        }
        let third = self.runs(third)?;
        let mut second = Runs::default();
        for (b, d) in HEX_BYTES {
            if d == 0 {
                second.push(b, third);
            } else if let Some(t) = rest {
                second.push(b, t.hex[1]);
            }
        }
        let second = self.runs(second)?;
        let mut u = Runs::default();
        for (b, d) in HEX_BYTES {
            if d == 0 {
                u.push(b, second);
            } else if let Some(t) = rest {
                u.push(b, if d == 0xD { t.d } else { t.hex[2] });
            }
        }
        let u = self.runs(u)?;
        let mut esc = Runs::default();
        for (e, code) in ESCAPES_BY_LETTER {
            if let Some(next) = to[code as usize] {
                esc.push(e, next);
            }
        }
        esc.push(b'u', u);
        let esc = self.runs(esc)?;
        let mut raw = Runs::default();
        for c in 0x20..0x80u8 {
            match c {
                b'"' => {}
                b'\\' => raw.push(c, esc),
                _ => {
                    if let Some(next) = to[c as usize] {
                        raw.push(c, next);
                    }
                }
            }
        }
        if let Some(t) = rest {
            t.utf8_lead_runs(&mut raw);
        }
        self.runs(raw)
    }

    /// Any characters in any spelling (`any_char()*`): the loop's head and exit, and the tails
    /// leading back to the head.
    pub(super) fn any_chars(&mut self) -> Result<(StateID, StateID, CharTails)> {
        let end = self.empty()?;
        let head = self.empty()?;
        let t = self.char_tails(head)?;
        let any = self.one_char(&[], &t)?;
        let u = self.union(vec![any, end])?;
        self.patch(head, u)?;
        Ok((head, end, t))
    }
}
