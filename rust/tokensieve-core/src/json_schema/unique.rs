//! What the schema walker registers for `uniqueItems: true` over strings: where each such array
//! stands (its instance path) and its items' decoded-string language, counted. Matchers enforce
//! it (`crate::unique`).

use crate::automata::charlang::CharDfa;

/// One step of an instance path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    /// The value of this property.
    Key(String),
    /// Any item of an array.
    Item,
    /// The value of any property but these (an object's `additionalProperties`).
    Other(Vec<String>),
}

/// Counts of strings at or above this are not told apart from infinitely many.
const COUNT_CAP: u64 = 1 << 40;

/// The decoded-string language of a unique array's items, as a character DFA, with the number
/// of strings each state still accepts (`None`: infinitely many, or at least [`COUNT_CAP`]).
#[derive(Debug, Clone)]
pub(crate) struct ItemLang {
    pub(crate) start: usize,
    accept: Vec<bool>,
    edges: Vec<Vec<(u32, u32, usize)>>,
    counts: Vec<Option<u64>>,
}

impl ItemLang {
    /// From the minimal DFA of the language (every state can reach acceptance).
    pub(crate) fn new(d: CharDfa) -> ItemLang {
        let n = d.edges.len();
        let counts = count_strings(&d);
        debug_assert_eq!(counts.len(), n);
        ItemLang {
            start: d.start,
            accept: d.accept,
            edges: d.edges,
            counts,
        }
    }

    /// How many strings the language has (`None`: infinitely many, or very many).
    pub(crate) fn total(&self) -> Option<u64> {
        self.counts[self.start]
    }

    /// Whether the language holds `s`.
    pub(crate) fn accepts(&self, s: &str) -> bool {
        self.run(s.chars().map(u32::from))
            .is_some_and(|at| self.accept[at])
    }

    /// The state after reading `chars` from the start (`None`: no string starts so).
    pub(crate) fn run(&self, chars: impl IntoIterator<Item = u32>) -> Option<usize> {
        chars
            .into_iter()
            .try_fold(self.start, |at, c| self.step(at, c))
    }

    /// The transitions of state `s`: character ranges and their targets.
    pub(crate) fn edges(&self, s: usize) -> &[(u32, u32, usize)] {
        &self.edges[s]
    }

    pub(crate) fn step(&self, s: usize, c: u32) -> Option<usize> {
        self.edges[s]
            .iter()
            .find(|&&(lo, hi, _)| lo <= c && c <= hi)
            .map(|&(_, _, t)| t)
    }

    /// Strings accepted from `s` whose first character lies in one of `ranges` (`None`: any
    /// string accepted from `s`, the empty one included); `None` when infinitely many.
    pub(crate) fn count_from(&self, s: usize, ranges: Option<&[(u32, u32)]>) -> Option<u64> {
        let Some(ranges) = ranges else {
            return self.counts[s];
        };
        let mut sum = 0u64;
        for &(lo, hi, t) in &self.edges[s] {
            for &(a, b) in ranges {
                let (l, h) = (lo.max(a), hi.min(b));
                if l <= h {
                    sum = plus(Some(sum), self.counts[t], h - l + 1)?;
                }
            }
        }
        Some(sum)
    }
}

/// Per state of a DFA whose states all reach acceptance: how many strings it accepts (`None`:
/// infinitely many — a cycle is reachable — or at least [`COUNT_CAP`]). Depth-first, without
/// recursion: a state is finished after all its successors; an edge back into a state still
/// open closes a cycle, which makes the state it leaves (and so every state reaching it)
/// infinite.
fn count_strings(d: &CharDfa) -> Vec<Option<u64>> {
    const NEW: u8 = 0;
    const OPEN: u8 = 1;
    const DONE: u8 = 2;
    let n = d.edges.len();
    let mut mark = vec![NEW; n];
    let mut out: Vec<Option<u64>> = vec![Some(0); n];
    for root in 0..n {
        if mark[root] != NEW {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = OPEN;
        out[root] = Some(u64::from(d.accept[root]));
        while let Some(&mut (s, ref mut i)) = stack.last_mut() {
            if let Some(&(lo, hi, t)) = d.edges[s].get(*i) {
                *i += 1;
                match mark[t] {
                    NEW => {
                        mark[t] = OPEN;
                        out[t] = Some(u64::from(d.accept[t]));
                        stack.push((t, 0));
                    }
                    OPEN => out[s] = None,
                    _ => out[s] = plus(out[s], out[t], hi - lo + 1),
                }
            } else {
                stack.pop();
                mark[s] = DONE;
                if let Some(&(p, pi)) = stack.last() {
                    let (lo, hi, _) = d.edges[p][pi - 1];
                    out[p] = plus(out[p], out[s], hi - lo + 1);
                }
            }
        }
    }
    out
}

/// `a + w × b` of two counts (`None`: infinitely many, or at least [`COUNT_CAP`]).
fn plus(a: Option<u64>, b: Option<u64>, w: u32) -> Option<u64> {
    a?.checked_add(b?.saturating_mul(u64::from(w)))
        .filter(|&x| x < COUNT_CAP)
}

/// What a unique array's items are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Strings: the language is of their decoded values.
    Str,
    /// Integers: the language is of their spellings, `-?(0|[1-9][0-9]*)` within the bounds
    /// (`-0` as well as `0` where zero is in range; nothing else spells one value twice).
    Int,
    /// Numbers (`{"type": "number"}`, with no `multipleOf` or listing, and bounds, if any,
    /// that leave more than one value): compared by value (`1`, `1.0` and `10e-1` are one
    /// number). A prefix of a spelling has either infinitely many values among its
    /// completions (the values it can still take are an interval of positive length) or one
    /// (a prefix at a bound, whose completions only pad it with zeros after the point:
    /// `1` or `1.` under `maximum: 1`); nothing is counted: an item equal to a held one is
    /// refused, and so is a prefix whose one value is held.
    Num,
}

/// A registered unique array of strings or integers.
#[derive(Debug, Clone)]
pub(crate) struct UniqueArray {
    pub path: Vec<Step>,
    pub kind: Kind,
    pub item: ItemLang,
}

impl UniqueArray {
    /// How many distinct values its items can take (`None`: infinitely many, or very many):
    /// every string and integer has one spelling in the language, but zero also `-0`.
    pub(crate) fn distinct(&self) -> Option<u64> {
        let n = self.item.total()?;
        Some(match self.kind {
            Kind::Str => n,
            Kind::Int => n - u64::from(self.item.accepts("-0")),
            Kind::Num => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::charlang::{Lang, LangBudget};
    use crate::json_schema::compile::pattern_language;

    fn lang(p: &str) -> ItemLang {
        let h = pattern_language(p).unwrap();
        let d = Lang::from_hir(&h)
            .unwrap()
            .to_char_dfa(&LangBudget::default())
            .unwrap()
            .unwrap();
        ItemLang::new(d)
    }

    #[test]
    fn counts_strings_of_finite_languages() {
        assert_eq!(lang("^[ab]{1,2}$").total(), Some(6));
        assert_eq!(lang("^(a|ab|b)$").total(), Some(3));
        assert_eq!(lang("^a*$").total(), None);
        // 26^8 is past the cap: as good as infinite
        assert_eq!(lang("^[a-z]{4}$").total(), Some(26u64.pow(4)));
        assert_eq!(lang("^[a-z]{9}$").total(), None);
        let l = lang("^(a|ab|b)$");
        let s = l.step(l.start, 'a' as u32).unwrap();
        assert_eq!(l.count_from(s, None), Some(2)); // "a", "ab"
        assert_eq!(l.count_from(s, Some(&[(0x62, 0x62)])), Some(1)); // "ab"
        assert_eq!(l.count_from(l.start, Some(&[(0, 0x10FFFF)])), Some(3));
    }
}
