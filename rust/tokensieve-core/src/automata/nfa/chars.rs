//! Characters in JSON string spellings (raw UTF-8, short escapes, `\uXXXX` and surrogate
//! pairs) as NFA states: unconstrained string contents, strings excluding a set of names, and
//! character DFAs (with length bounds counted as a counted repetition's bodies are).

use regex_automata::nfa::thompson::Transition;
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Hir, HirKind};
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
#[derive(Default)]
struct Runs(Vec<Transition>);

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

/// Whether `h` is [`crate::automata::spell::any_char`]'s HIR.
pub(super) fn is_any_char(h: &Hir) -> bool {
    thread_local! {
        static ANY: Hir = crate::automata::spell::any_char();
    }
    matches!(h.kind(), HirKind::Alternation(xs) if xs.len() == 2) && ANY.with(|a| a == h)
}

impl Compiler {
    /// A state whose byte transitions are `t` (bytes mapped to `None` have none).
    fn table(&mut self, t: &[Option<StateID>; 256]) -> Result<StateID> {
        let mut trans = Vec::new();
        let mut b = 0usize;
        while b < 256 {
            let Some(next) = t[b] else {
                b += 1;
                continue;
            };
            let mut e = b;
            while e + 1 < 256 && t[e + 1] == Some(next) {
                e += 1;
            }
            trans.push(Transition {
                start: b as u8,
                end: e as u8,
                next,
            });
            b = e + 1;
        }
        if trans.is_empty() {
            self.fail()
        } else {
            self.sparse(trans)
        }
    }

    /// A state whose byte transitions are `r` (none: the fail state).
    fn runs(&mut self, r: Runs) -> Result<StateID> {
        if r.0.is_empty() {
            self.fail()
        } else {
            self.sparse(r.0)
        }
    }

    /// A state reading the bytes in `ranges` into `next`.
    fn on(&mut self, ranges: &[(u8, u8)], next: StateID) -> Result<StateID> {
        let mut t = [None; 256];
        for &(a, b) in ranges {
            for x in a..=b {
                t[x as usize] = Some(next);
            }
        }
        self.table(&t)
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
    fn name_node(&mut self, names: &[&[u8]], t: &CharTails, end: StateID) -> Result<StateID> {
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
            kids.push((c, self.name_node(&rest, t, end)?));
        }
        let read = self.one_char(&kids, t)?;
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
        let entry = self.name_node(&names, &t, end)?;
        Ok((entry, end))
    }

    /// See [`crate::automata::expr::char_dfa`].
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
            let mut read = self.one_char_of(&to, rest.and_then(|r| tails.get(&r)))?;
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
