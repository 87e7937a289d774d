//! `multipleOf` (and its negation) on number text, exactly.
//!
//! A divisor `m` is written `a × 10^-k` (`a` a positive integer). A number spelled without an
//! exponent is a multiple of `m` iff it has at most `k` fraction digits after dropping trailing
//! zeros and its digits, read as an integer scaled by `10^k`, are divisible by `a`. That is a
//! finite automaton over the number's characters (remainder mod `a`, fraction digits used); it
//! is run in lockstep with the automaton of the numeric range (the product keeps the bounds),
//! minimized, and turned back into a HIR by state elimination.

use std::collections::HashMap;

use regex_syntax::hir::Hir;

use super::hirs::{alt, class, concat, star, weight};
use super::number::{number_range, Bound, Dec};
use crate::regex::{LazyDfa, RegexOptions, DEAD};

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
    let (start, accept, edges) = minimize(0, &accept, &edges);
    eliminate(start, &accept, &edges)
}

/// Moore partition refinement; drops states that cannot reach acceptance.
#[allow(clippy::type_complexity)]
fn minimize(
    start: usize,
    accept: &[bool],
    edges: &[Vec<(u8, usize)>],
) -> (usize, Vec<bool>, Vec<Vec<(u8, usize)>>) {
    let n = accept.len();
    // live states: can reach an accepting state
    let mut rev: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, es) in edges.iter().enumerate() {
        for &(_, j) in es {
            rev[j].push(i);
        }
    }
    let mut live = accept.to_vec();
    let mut stack: Vec<usize> = (0..n).filter(|&i| accept[i]).collect();
    while let Some(j) = stack.pop() {
        for &i in &rev[j] {
            if !live[i] {
                live[i] = true;
                stack.push(i);
            }
        }
    }
    let mut block: Vec<usize> = (0..n).map(|i| usize::from(accept[i])).collect();
    loop {
        let mut sigs: HashMap<(usize, Vec<(u8, usize)>), usize> = HashMap::new();
        let mut next = vec![0; n];
        for i in 0..n {
            let mut sig: Vec<(u8, usize)> = edges[i]
                .iter()
                .filter(|(_, j)| live[*j])
                .map(|&(b, j)| (b, block[j]))
                .collect();
            sig.sort_unstable();
            let k = sigs.len();
            next[i] = *sigs.entry((block[i], sig)).or_insert(k);
        }
        let same = sigs.len() == block.iter().collect::<std::collections::HashSet<_>>().len();
        block = next;
        if same {
            break;
        }
    }
    let nb = block.iter().max().map_or(0, |m| m + 1);
    let mut acc = vec![false; nb];
    let mut out: Vec<Vec<(u8, usize)>> = vec![Vec::new(); nb];
    let mut done = vec![false; nb];
    for i in 0..n {
        let b = block[i];
        acc[b] = accept[i];
        if !done[b] && live[i] {
            done[b] = true;
            out[b] = edges[i]
                .iter()
                .filter(|(_, j)| live[*j])
                .map(|&(c, j)| (c, block[j]))
                .collect();
        }
    }
    (block[start], acc, out)
}

fn byte_class(bytes: &[u8]) -> Hir {
    let ranges: Vec<(char, char)> = bytes.iter().map(|&b| (b as char, b as char)).collect();
    class(&ranges)
}

/// State elimination: the language of the automaton as a HIR.
fn eliminate(
    start: usize,
    accept: &[bool],
    edges: &[Vec<(u8, usize)>],
) -> Result<Option<Hir>, String> {
    let n = accept.len();
    // r[i][j]: label from i to j; states n (new start) and n+1 (new final)
    let (s, f) = (n, n + 1);
    let mut r: Vec<HashMap<usize, Hir>> = vec![HashMap::new(); n + 2];
    for (i, es) in edges.iter().enumerate() {
        let mut by_target: HashMap<usize, Vec<u8>> = HashMap::new();
        for &(b, j) in es {
            by_target.entry(j).or_default().push(b);
        }
        for (j, bs) in by_target {
            r[i].insert(j, byte_class(&bs));
        }
    }
    r[s].insert(start, Hir::empty());
    for (i, &a) in accept.iter().enumerate() {
        if a {
            r[i].insert(f, Hir::empty());
        }
    }
    let mut alive: Vec<bool> = vec![true; n];
    for _ in 0..n {
        // the state with the fewest in × out edges next
        let mut best: Option<(usize, usize)> = None;
        for k in (0..n).filter(|&k| alive[k]) {
            let ins = (0..n + 2)
                .filter(|&i| i != k && (i >= n || alive[i]) && r[i].contains_key(&k))
                .count();
            let outs = r[k].keys().filter(|&&j| j != k).count();
            let cost = ins * outs;
            if best.is_none_or(|(_, c)| cost < c) {
                best = Some((k, cost));
            }
        }
        let Some((k, _)) = best else { break };
        alive[k] = false;
        let self_loop = r[k].remove(&k).map(star);
        let outs: Vec<(usize, Hir)> = r[k].drain().collect();
        for i in 0..n + 2 {
            if i == k || (i < n && !alive[i]) {
                continue;
            }
            let Some(into) = r[i].remove(&k) else {
                continue;
            };
            for (j, out) in &outs {
                let mut parts = vec![into.clone()];
                if let Some(l) = &self_loop {
                    parts.push(l.clone());
                }
                parts.push(out.clone());
                let path = concat(parts);
                let merged = match r[i].remove(j) {
                    Some(old) => alt(vec![old, path]),
                    None => path,
                };
                if weight(&merged) > MAX_WEIGHT {
                    return Err("multipleOf with these bounds makes too large an automaton".into());
                }
                r[i].insert(*j, merged);
            }
        }
    }
    Ok(r[s].remove(&f))
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
