//! A reasoning span before the grammar: free text up to an end marker (`</think>`), then the
//! grammar's language.
//!
//! The language of a matcher with a reasoning span is `R · marker · G`, where `R` is any text
//! in which the marker does not occur (its first occurrence ends the reasoning) and `G` is the
//! grammar's language. Outputs are read byte by byte, so a marker spelled by one token, by
//! several tokens, or inside a token that also carries the grammar's first bytes (`</think>{`)
//! ends the reasoning at the same place; the bytes after the marker go to the grammar.
//!
//! While reasoning, with `p` bytes of the marker matched so far (the longest suffix of the
//! output that is a prefix of the marker), a token is allowed when it is a regular token, not
//! EOS, and, if the marker completes inside it, the grammar accepts the bytes after the marker
//! as the start of an output. With a thinking budget spent, the output is *forced* onto the
//! marker: a token is allowed only if its bytes continue the marker from `p` (a part of what is
//! left of it, or all of it followed by grammar bytes) and the marker can still be finished
//! from where it leads.
//!
//! [`Span`] holds, per matched length `p`, the tokens whose bytes do anything other than
//! drop the match back to 0 (few: those containing a part of the marker), computed once per
//! (grammar, marker); the masks per (`p`, forced) are built on first use and cached.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::error::{Error, Result};
use crate::vocab::Vocabulary;

/// The longest end marker accepted, in bytes.
pub const MAX_MARKER_BYTES: usize = 256;

/// Where a token leads from a matched length `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Still reasoning, with `p` bytes of the marker matched.
    Partial(u32),
    /// The marker completes inside the token; the grammar is then in `state` ([`DEAD`] when
    /// the bytes after the marker cannot start an output).
    Complete(u32),
}

/// A token's effect from one matched length: where it leads and whether its bytes go straight
/// along the marker (the only tokens allowed once the thinking budget is spent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The token id.
    pub token: u32,
    /// Where it leads.
    pub step: Step,
    /// Its bytes are the next bytes of the marker (or all of the rest of it, then grammar bytes).
    pub along: bool,
}

/// The reasoning span of one grammar for one end marker.
pub struct Span {
    marker: Vec<u8>,
    /// `moves[p]`: the tokens that do not drop a match of `p` bytes back to 0, by token id.
    moves: Vec<Vec<Move>>,
    /// `finishable[p]`: from `p` matched bytes, tokens along the marker can complete it into a
    /// state the grammar can go on from.
    finishable: Vec<bool>,
    /// Every regular non-EOS token.
    text: Arc<[u32]>,
    masks: Mutex<MaskCache>,
}

/// Masks by (matched length, forced).
type MaskCache = FxHashMap<(u32, bool), Arc<[u32]>>;

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Span")
            .field("marker", &String::from_utf8_lossy(&self.marker))
            .finish_non_exhaustive()
    }
}

/// The marker's matching automaton (Knuth–Morris–Pratt): the matched length after one byte.
struct Kmp<'a> {
    marker: &'a [u8],
    fail: Vec<usize>,
}

impl<'a> Kmp<'a> {
    fn new(marker: &'a [u8]) -> Kmp<'a> {
        let mut fail = vec![0usize; marker.len()];
        let mut k = 0;
        for i in 1..marker.len() {
            while k > 0 && marker[i] != marker[k] {
                k = fail[k - 1];
            }
            if marker[i] == marker[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Kmp { marker, fail }
    }

    fn next(&self, mut p: usize, b: u8) -> usize {
        while p > 0 && self.marker[p] != b {
            p = self.fail[p - 1];
        }
        if self.marker[p] == b {
            p + 1
        } else {
            0
        }
    }
}

impl Span {
    /// The span for `marker` before the grammar (`dfa` from its start state `start`; `atoms`:
    /// the grammar has token atoms, so text holding 0xFF never enters it, see
    /// [`crate::atoms`]).
    pub fn new(
        marker: &[u8],
        vocab: &Vocabulary,
        dfa: &LazyDfa,
        start: u32,
        atoms: bool,
    ) -> Result<Span> {
        if marker.is_empty() {
            return Err(Error::InvalidArgument(
                "the reasoning end marker is empty".into(),
            ));
        }
        if marker.len() > MAX_MARKER_BYTES {
            return Err(Error::InvalidArgument(format!(
                "the reasoning end marker has {} bytes; at most {MAX_MARKER_BYTES} are supported",
                marker.len()
            )));
        }
        let m = marker.len();
        let kmp = Kmp::new(marker);
        let mut moves: Vec<Vec<Move>> = vec![Vec::new(); m];
        let words = vocab.mask_words();
        let mut text = vec![0u32; words];
        for t in 0..vocab.vocab_size() as u32 {
            if vocab.is_eos(t) {
                continue;
            }
            let Some(bytes) = vocab.token_bytes(t) else {
                continue;
            };
            if bytes.is_empty() {
                continue;
            }
            text[(t >> 5) as usize] |= 1 << (t & 31);
            for (p, out) in moves.iter_mut().enumerate() {
                let mut q = p;
                let mut step = None;
                for (i, &b) in bytes.iter().enumerate() {
                    q = kmp.next(q, b);
                    if q == m {
                        // few tokens get here: the table is locked per walk, not per scan
                        let rest = &bytes[i + 1..];
                        step = Some(Step::Complete(if atoms && rest.contains(&0xFF) {
                            crate::automata::dfa::DEAD
                        } else {
                            dfa.walk(start, rest)?
                        }));
                        break;
                    }
                }
                let step = step.unwrap_or(Step::Partial(q as u32));
                if step == Step::Partial(0) {
                    continue;
                }
                let rest = &marker[p..];
                let along = if bytes.len() < rest.len() {
                    rest.starts_with(bytes)
                } else {
                    bytes.starts_with(rest)
                };
                out.push(Move {
                    token: t,
                    step,
                    along,
                });
            }
        }
        // Moves along the marker only lengthen the match, so finishability is known from the
        // longest match down.
        let mut finishable = vec![false; m];
        for p in (0..m).rev() {
            finishable[p] = moves[p].iter().any(|mv| {
                mv.along
                    && match mv.step {
                        Step::Complete(s) => s != DEAD,
                        Step::Partial(q) => (q as usize) > p && finishable[q as usize],
                    }
            });
        }
        if !finishable[0] {
            return Err(Error::InvalidArgument(format!(
                "no sequence of tokens spells the reasoning end marker {:?} followed by the \
                 start of an output of the grammar",
                String::from_utf8_lossy(marker)
            )));
        }
        Ok(Span {
            marker: marker.to_vec(),
            moves,
            finishable,
            text: text.into(),
            masks: Mutex::new(FxHashMap::default()),
        })
    }

    /// The end marker.
    pub fn marker(&self) -> &[u8] {
        &self.marker
    }

    /// Where `token` leads from `p` matched bytes; `None` for a token never allowed while
    /// reasoning (EOS, special, padding, out of range).
    pub fn step(&self, vocab: &Vocabulary, p: u32, token: u32) -> Option<Move> {
        if vocab.is_eos(token) || vocab.token_bytes(token).is_none_or(<[u8]>::is_empty) {
            return None;
        }
        let moves = &self.moves[p as usize];
        Some(match moves.binary_search_by_key(&token, |mv| mv.token) {
            Ok(i) => moves[i],
            Err(_) => Move {
                token,
                step: Step::Partial(0),
                along: false,
            },
        })
    }

    /// Whether a token with this move is allowed from `p` (`forced`: the thinking budget is
    /// spent).
    pub fn allows(&self, p: u32, mv: &Move, forced: bool) -> bool {
        match mv.step {
            Step::Complete(s) => s != DEAD && (mv.along || !forced),
            Step::Partial(q) => {
                !forced || (mv.along && q as usize > p as usize && self.finishable[q as usize])
            }
        }
    }

    /// The mask of tokens allowed with `p` bytes of the marker matched.
    pub fn mask(&self, p: u32, forced: bool) -> Arc<[u32]> {
        let mut cache = self.masks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = cache.get(&(p, forced)) {
            return m.clone();
        }
        let moves = &self.moves[p as usize];
        let mut row: Vec<u32> = if forced {
            vec![0; self.text.len()]
        } else {
            self.text.to_vec()
        };
        for mv in moves {
            let (w, bit) = ((mv.token >> 5) as usize, 1u32 << (mv.token & 31));
            if self.allows(p, mv, forced) {
                row[w] |= bit;
            } else {
                row[w] &= !bit;
            }
        }
        let row: Arc<[u32]> = row.into();
        cache.insert((p, forced), row.clone());
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmp_follows_overlaps() {
        let k = Kmp::new(b"abab");
        let mut p = 0;
        for &b in b"aababab" {
            p = k.next(p, b);
            if p == 4 {
                break;
            }
        }
        assert_eq!(p, 4);
        let k = Kmp::new(b"</think>");
        assert_eq!(k.next(k.next(0, b'<'), b'<'), 1);
        assert_eq!(k.next(1, b'x'), 0);
    }
}
