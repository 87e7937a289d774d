//! Complete transition tables, as index files hold them: [`DfaParts`] exported from a fully
//! determinized automaton and loaded back into one with nothing left to determinize.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use super::determinize::Table;
use super::graph::Graph;
use super::{LazyDfa, DEAD, UNKNOWN};
use crate::error::{Error, Result};

impl LazyDfa {
    /// The complete transition table, if every transition of every state is known (after
    /// [`LazyDfa::determinize_all`]); `None` otherwise. Bytes whose transitions agree in every
    /// state share one class.
    pub fn export(&self) -> Option<DfaParts> {
        let t = self.lock();
        if t.trans.contains(&UNKNOWN) {
            return None;
        }
        let n = t.accepting.len();
        // The classes of the table itself: bytes whose columns agree in every state share one
        // (a split automaton's single-byte classes shrink back to what its states tell apart).
        let (trans_all, stride_all) = (&t.trans, self.stride);
        let column = |c: usize| (0..n).map(move |s| trans_all[s * stride_all + c]);
        let mut by_hash: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
        let mut class_of = vec![0usize; self.stride];
        let mut firsts: Vec<usize> = Vec::new();
        for (c, class) in class_of.iter_mut().enumerate() {
            let h = column(c).fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
                (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01B3)
            });
            let group = by_hash.entry(h).or_default();
            match group.iter().find(|&&k| column(firsts[k]).eq(column(c))) {
                Some(&k) => *class = k,
                None => {
                    *class = firsts.len();
                    group.push(firsts.len());
                    firsts.push(c);
                }
            }
        }
        let mut classes = [0u8; 256];
        for b in 0..256 {
            classes[b] = class_of[self.classes[b] as usize] as u8;
        }
        let stride = firsts.len();
        let mut trans = Vec::with_capacity(n * stride);
        for s in 0..n {
            for &f in &firsts {
                trans.push(t.trans[s * self.stride + f]);
            }
        }
        Some(DfaParts {
            classes,
            stride,
            trans,
            accepting: t.accepting.clone(),
            start: self.start,
        })
    }

    /// Rebuild a complete DFA from exported parts (no NFA; nothing left to determinize).
    /// Checks that the parts are consistent, so a corrupted file cannot index out of bounds.
    pub fn from_parts(parts: DfaParts, pattern: String) -> Result<LazyDfa> {
        let DfaParts {
            classes,
            stride,
            trans,
            accepting,
            start,
        } = parts;
        let n = accepting.len();
        let bad = |m: &str| Error::InvalidArgument(format!("inconsistent automaton: {m}"));
        if stride == 0 || stride > 256 || n == 0 || trans.len() != n * stride {
            return Err(bad("table size does not match states × classes"));
        }
        if classes.iter().any(|&c| c as usize >= stride) {
            return Err(bad("byte class out of range"));
        }
        if trans.iter().any(|&t| t as usize >= n) || start as usize >= n {
            return Err(bad("transition to a state that does not exist"));
        }
        if trans[..stride].iter().any(|&t| t != DEAD) || accepting[0] {
            return Err(bad("state 0 must be the dead state"));
        }
        let mut reps = Vec::with_capacity(stride);
        for c in 0..stride {
            match (0..=255u8).find(|&b| classes[b as usize] as usize == c) {
                Some(b) => reps.push(b),
                None => return Err(bad("a byte class has no byte")),
            }
        }
        let mut table = Table {
            trans,
            accepting,
            sets: vec![Box::new([]); n],
            ..Table::new(Graph::loaded())
        };
        table.mark_ready();
        Ok(LazyDfa {
            classes,
            reps,
            stride,
            split: false,
            depths: None,
            registers: false,
            max_states: n,
            table: Mutex::new(table),
            start,
            start_nfa: 0,
            pattern,
            lexer: None,
        })
    }
}

/// A complete DFA table, as exported for index files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DfaParts {
    /// byte → class
    pub classes: [u8; 256],
    /// classes per state
    pub stride: usize,
    /// `states × stride` transitions
    pub trans: Vec<u32>,
    /// accepting flag per state
    pub accepting: Vec<bool>,
    /// start state
    pub start: u32,
}
