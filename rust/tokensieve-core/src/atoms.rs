//! Token atoms: special tokens a grammar names (a structural tag's `token`, a tag's `begin` or
//! `end` given as a token), allowed exactly where the grammar places them.
//!
//! The automata read bytes. An atom is written into a grammar's expression as three bytes that
//! no text holds: `0xFF` (never a byte of UTF-8, and every grammar's text is UTF-8), then the
//! atom's number among the grammar's atoms (two bytes). The grammar keeps which token each
//! number stands for ([`Atoms`]): the special token of an atom walks the automaton over its
//! three bytes, and its mask bit is set wherever those bytes can be read. A regular token
//! holding the byte 0xFF (a byte-fallback `<0xFF>`) could walk into an atom's bytes: in a
//! grammar with atoms it is never allowed (no UTF-8 text holds it anyway). A grammar without
//! atoms is untouched.
//!
//! Only special tokens can be atoms: a regular token's text is already what the grammar's
//! text spells, and one token with two meanings would make a matcher's next state ambiguous.
//! EOS cannot be an atom (it ends the output where the grammar accepts).

use std::collections::HashMap;

use regex_syntax::hir::Hir;

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::error::Result;
use crate::vocab::Vocabulary;

/// The first byte of every atom (never a byte of UTF-8 text).
pub const ESCAPE: u8 = 0xFF;

/// Most atoms one grammar may name.
pub const MAX_ATOMS: usize = 1 << 16;

/// The bytes of atom `k`.
fn escape(k: usize) -> [u8; 3] {
    [ESCAPE, (k >> 8) as u8, k as u8]
}

/// A special token as a grammar names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TokenRef {
    /// By id.
    Id(u64),
    /// By its text in the tokenizer (`<|tool_call|>`).
    Text(String),
}

impl std::fmt::Display for TokenRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenRef::Id(i) => write!(f, "token {i}"),
            TokenRef::Text(t) => write!(f, "token {t:?}"),
        }
    }
}

/// The atoms of one compile, numbered in the order they are first named, each resolved to its
/// token id in the vocabulary.
pub struct AtomList<'v> {
    vocab: Option<&'v Vocabulary>,
    ids: Vec<u32>,
    by_ref: HashMap<TokenRef, usize>,
}

impl<'v> AtomList<'v> {
    /// An empty list; without a vocabulary every atom is refused.
    pub fn new(vocab: Option<&'v Vocabulary>) -> AtomList<'v> {
        AtomList {
            vocab,
            ids: Vec::new(),
            by_ref: HashMap::new(),
        }
    }

    /// The expression of the special token `r` (numbered on first use); an error (a sentence)
    /// when the vocabulary has no such special token.
    pub fn atom(&mut self, r: TokenRef) -> std::result::Result<Hir, String> {
        if let Some(&k) = self.by_ref.get(&r) {
            return Ok(Hir::literal(escape(k)));
        }
        let id = self.resolve(&r)?;
        if let Some(k) = self.ids.iter().position(|&x| x == id) {
            // the same token named another way (by id and by text): one number
            self.by_ref.insert(r, k);
            return Ok(Hir::literal(escape(k)));
        }
        if self.ids.len() >= MAX_ATOMS {
            return Err(format!("more than {MAX_ATOMS} token atoms"));
        }
        let k = self.ids.len();
        self.ids.push(id);
        self.by_ref.insert(r, k);
        Ok(Hir::literal(escape(k)))
    }

    /// The id of special token `r` (not EOS); an error (a sentence) when there is none.
    pub fn resolve(&self, r: &TokenRef) -> std::result::Result<u32, String> {
        let Some(v) = self.vocab else {
            return Err(format!("{r}: token atoms need the vocabulary"));
        };
        let id = match r {
            TokenRef::Id(i) => {
                if *i >= v.vocab_size() as u64 {
                    return Err(format!(
                        "{r} is outside the vocabulary ({} tokens)",
                        v.vocab_size()
                    ));
                }
                let id = *i as u32;
                if !v.is_special(id) {
                    let text = v
                        .token_bytes(id)
                        .map(|b| format!(" (its text is {:?})", String::from_utf8_lossy(b)))
                        .unwrap_or_default();
                    return Err(format!(
                        "{r} is not a special token{text}: only special tokens can be named as \
                         tokens; write an ordinary token's text instead"
                    ));
                }
                id
            }
            TokenRef::Text(t) => match v.special_id(t.as_bytes()) {
                Some(id) => id,
                None => {
                    return Err(format!(
                        "{r}: the vocabulary has no special token with this text"
                    ))
                }
            },
        };
        if v.is_eos(id) {
            return Err(format!(
                "{r} is an EOS token: EOS ends the output where the grammar accepts, it cannot \
                 be placed inside it"
            ));
        }
        Ok(id)
    }

    /// The token ids of the atoms, by number.
    pub fn into_ids(self) -> Vec<u32> {
        self.ids
    }
}

/// A grammar's atoms: each special token and the bytes of its number.
#[derive(Debug)]
pub struct Atoms {
    by_id: HashMap<u32, [u8; 3]>,
}

impl Atoms {
    /// The atoms numbered `0..ids.len()`; `None` when there are none.
    pub fn new(ids: Vec<u32>) -> Option<Atoms> {
        if ids.is_empty() {
            return None;
        }
        let by_id = ids
            .iter()
            .enumerate()
            .map(|(k, &id)| (id, escape(k)))
            .collect();
        Some(Atoms { by_id })
    }

    /// The bytes token `t` walks in a grammar with these atoms: an atom's three bytes, a
    /// regular token's text (`None` for one holding 0xFF, never allowed), `None` for other
    /// special tokens.
    pub fn bytes<'a>(&'a self, vocab: &'a Vocabulary, t: u32) -> Option<&'a [u8]> {
        if let Some(e) = self.by_id.get(&t) {
            return Some(e);
        }
        vocab.token_bytes(t).filter(|b| !b.contains(&ESCAPE))
    }

    /// Completes `row`, the mask of the grammar's text at `state`: each atom's bit set exactly
    /// when its bytes can be read there, the regular tokens holding 0xFF cleared.
    pub fn complete(
        &self,
        vocab: &Vocabulary,
        dfa: &LazyDfa,
        state: u32,
        row: &mut [u32],
    ) -> Result<()> {
        for &t in vocab.tokens_with_ff() {
            row[(t >> 5) as usize] &= !(1 << (t & 31));
        }
        for (&t, e) in &self.by_id {
            let bit = 1 << (t & 31);
            if dfa.walk(state, e)? != DEAD {
                row[(t >> 5) as usize] |= bit;
            } else {
                row[(t >> 5) as usize] &= !bit;
            }
        }
        Ok(())
    }
}
