//! `multipleOf` (and its negation) on number text, exactly.
//!
//! A divisor `m` is written `a × 10^-k` (`a` a positive integer). A number spelled without an
//! exponent is a multiple of `m` iff it has at most `k` fraction digits after dropping trailing
//! zeros and its digits, read as an integer scaled by `10^k`, are divisible by `a`. That is a
//! finite automaton over the number's characters (remainder mod `a`, fraction digits used); it
//! is run in lockstep with the automaton of the numeric range (the product keeps the bounds),
//! then minimized and turned back into a HIR by `charlang`.

use std::collections::HashMap;

use regex_syntax::hir::Hir;

use super::number::{number_range, Bound, Dec};
use crate::automata::charlang::{CharDfa, Lang, LangBudget};
use crate::automata::dfa::{LazyDfa, DEAD};
use crate::automata::strlang::lang_hir;
use crate::regex::RegexOptions;

/// Largest `a` (divisor digits) handled; the automaton has about `2·a·(k+1)` states.
const MAX_DIVISOR: u64 = 10_000;
/// Largest product automaton.
const MAX_STATES: usize = 50_000;
/// Largest result.
const MAX_WEIGHT: u64 = 400_000;

const ALPHABET: &[u8] = b"-.0123456789";

/// Arithmetic state while reading a number's characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Arith {
    /// integer part (or nothing yet): remainder
    Int(u64),
    /// fraction digits: remainder, digits used
    Frac(u64, u32),
    /// a non-zero digit beyond `k` fraction digits: never a multiple
    Never,
}

struct Divisor {
    a: u64,
    k: u32,
}

impl Divisor {
    fn new(m: &Dec) -> Result<Divisor, String> {
        if m.neg || m.is_zero() {
            return Err("multipleOf must be greater than 0".into());
        }
        let k = m.frac.len() as u32;
        let mut a: u64 = 0;
        for d in m.int.iter().chain(m.frac.iter()) {
            a = a
                .checked_mul(10)
                .and_then(|x| x.checked_add(u64::from(*d)))
                .filter(|x| *x <= MAX_DIVISOR)
                .ok_or_else(|| {
                    format!(
                        "multipleOf with more than {} significant digits is not supported",
                        MAX_DIVISOR.to_string().len() - 1
                    )
                })?;
        }
        Ok(Divisor { a, k })
    }

    fn step(&self, s: Arith, b: u8) -> Arith {
        match (s, b) {
            (Arith::Never, _) => Arith::Never,
            (s, b'-') => s,
            (Arith::Int(r), b'.') => Arith::Frac(r, 0),
            (Arith::Int(r), d) => Arith::Int((r * 10 + u64::from(d - b'0')) % self.a),
            (Arith::Frac(r, j), d) if j < self.k => {
                Arith::Frac((r * 10 + u64::from(d - b'0')) % self.a, j + 1)
            }
            (Arith::Frac(r, j), b'0') => Arith::Frac(r, j),
            (Arith::Frac(..), _) => Arith::Never,
        }
    }

    fn is_multiple(&self, s: Arith) -> bool {
        let (r, j) = match s {
            Arith::Never => return false,
            Arith::Int(r) => (r, 0),
            Arith::Frac(r, j) => (r, j),
        };
        let mut x = r;
        for _ in j..self.k {
            x = x * 10 % self.a;
        }
        x == 0
    }
}

/// Numbers (integers if `integer`) within the bounds that are (or, with `negate`, are not)
/// multiples of `m`, spelled without exponent. `Ok(None)`: no such number.
pub(super) fn multiple_of(
    m: &Dec,
    lo: Option<&Bound>,
    hi: Option<&Bound>,
    integer: bool,
    negate: bool,
) -> Result<Option<Hir>, String> {
    let div = Divisor::new(m)?;
    let Some(range) = number_range(lo, hi, integer) else {
        return Ok(None);
    };
    let d = LazyDfa::from_hir("multipleOf", &range, &RegexOptions::default())
        .map_err(|e| e.to_string())?;
    // product automaton, breadth first
    let mut ids: HashMap<(u32, Arith), usize> = HashMap::new();
    let mut states: Vec<(u32, Arith)> = Vec::new();
    let mut edges: Vec<Vec<(u8, usize)>> = Vec::new();
    let start = (d.start(), Arith::Int(0));
    ids.insert(start, 0);
    states.push(start);
    edges.push(Vec::new());
    let mut i = 0;
    while i < states.len() {
        let (rs, ar) = states[i];
        for &b in ALPHABET {
            let rn = d.walk(rs, &[b]).map_err(|e| e.to_string())?;
            if rn == DEAD {
                continue;
            }
            let an = div.step(ar, b);
            if an == Arith::Never && !negate {
                continue;
            }
            let key = (rn, an);
            let j = match ids.get(&key) {
                Some(&j) => j,
                None => {
                    if states.len() >= MAX_STATES {
                        return Err(format!(
                            "multipleOf with these bounds needs more than {MAX_STATES} automaton \
                             states"
                        ));
                    }
                    ids.insert(key, states.len());
                    states.push(key);
                    edges.push(Vec::new());
                    states.len() - 1
                }
            };
            edges[i].push((b, j));
        }
        i += 1;
    }
    let accept: Vec<bool> = states
        .iter()
        .map(|&(rs, ar)| d.is_accepting(rs) && (div.is_multiple(ar) != negate))
        .collect();
    // minimized and turned back into a regex by the character-language algebra
    let dfa = CharDfa {
        start: 0,
        accept,
        edges: edges
            .into_iter()
            .map(|es| {
                es.into_iter()
                    .map(|(b, j)| (u32::from(b), u32::from(b), j))
                    .collect()
            })
            .collect(),
    };
    let budget = LangBudget {
        max_states: MAX_STATES,
        max_weight: MAX_WEIGHT,
        ..LangBudget::default()
    };
    lang_hir(&Lang::from_dfa(&dfa)?, &budget).map_err(|e| format!("multipleOf: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::test_util::Re;

    fn dec(s: &str) -> Dec {
        Dec::parse(s).unwrap()
    }

    #[test]
    fn integers_and_decimals_brute_force() {
        for (m, integer) in [
            ("3", true),
            ("7", true),
            ("2.5", false),
            ("0.01", false),
            ("4", false),
        ] {
            for negate in [false, true] {
                let lo = Bound {
                    value: dec("-30"),
                    inclusive: true,
                };
                let hi = Bound {
                    value: dec("30.5"),
                    inclusive: false,
                };
                let h = multiple_of(&dec(m), Some(&lo), Some(&hi), integer, negate)
                    .unwrap()
                    .unwrap();
                let re = Re::new(&h);
                let md = dec(m);
                let mut texts: Vec<String> = Vec::new();
                for i in -40..40 {
                    texts.push(i.to_string());
                    for f in ["5", "25", "50", "01", "10", "0", "125"] {
                        texts.push(format!("{i}.{f}"));
                    }
                }
                texts.push("-0".into());
                for t in texts {
                    let v = dec(&t);
                    let in_range = v >= lo.value && v < hi.value;
                    let int_ok = !integer || !t.contains('.');
                    let mult = crate::json_schema::validate::is_multiple(&v, &md).unwrap();
                    let spelled = range_spelling(&t, integer);
                    let want = in_range && int_ok && spelled && (mult != negate);
                    assert_eq!(re.is_match(&t), want, "m={m} negate={negate} {t}");
                }
            }
        }
    }

    /// Whether `t` is spelled the way the number grammar spells numbers.
    fn range_spelling(t: &str, integer: bool) -> bool {
        let h = number_range(None, None, integer).unwrap();
        Re::new(&h).is_match(t)
    }

    #[test]
    fn unbounded_and_errors() {
        let h = multiple_of(&dec("5"), None, None, true, false)
            .unwrap()
            .unwrap();
        let re = Re::new(&h);
        for (t, ok) in [
            ("0", true),
            ("5", true),
            ("-15", true),
            ("12", false),
            ("100", true),
        ] {
            assert_eq!(re.is_match(t), ok, "{t}");
        }
        assert!(multiple_of(&dec("0"), None, None, true, false).is_err());
        assert!(multiple_of(&dec("123456789"), None, None, true, false).is_err());
        let lo = Bound {
            value: dec("1"),
            inclusive: true,
        };
        let hi = Bound {
            value: dec("4"),
            inclusive: true,
        };
        assert!(multiple_of(&dec("5"), Some(&lo), Some(&hi), true, false)
            .unwrap()
            .is_none());
    }
}
