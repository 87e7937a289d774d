//! `multipleOf` (and its negation) on number text, exactly; several divisors at once.
//!
//! A divisor `m` is written `a × 10^-k` (`a` a positive integer). A number spelled without an
//! exponent is a multiple of `m` iff it has at most `k` fraction digits after dropping trailing
//! zeros and its digits, read as an integer scaled by `10^k`, are divisible by `a`. That is a
//! finite automaton over the number's characters (remainder mod `a`, fraction digits used).
//! Several divisors, each required or negated (`multipleOf` beside negated ones from `not`,
//! merged by `allOf`), share one remainder modulo the least common multiple of the divisors
//! scaled to a common number of fraction digits. The automaton is run in lockstep with the
//! automaton of the numeric range (the product keeps the bounds), then minimized and turned
//! back into a HIR by `charlang`, or kept as the minimal DFA where that HIR would be too large.

use std::collections::HashMap;

use regex_syntax::hir::Hir;

use super::number::{number_range, Bound, Dec};
use crate::automata::charlang::{CharDfa, Lang, LangBudget};
use crate::automata::dfa::{LazyDfa, DEAD};
use crate::automata::expr::Expr;
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

/// Several divisors read at once: a number `x` spelled without exponent is scaled to the
/// integer `X = x · 10^k` (`k` the most fraction digits of any divisor), and divisor `i`
/// (`a_i × 10^-k_i`) becomes the integer `b_i = a_i · 10^(k - k_i)`: `x` is a multiple of it
/// iff `X` is an integer divisible by `b_i`. The automaton keeps `X mod l`, `l` the least
/// common multiple of the `b_i`, which decides every divisor at once.
struct Divisors {
    /// `l`, the modulus of the remainder.
    l: u64,
    /// `k`, the fraction digits of the scale.
    k: u32,
    /// `b_i` and whether the number must not be a multiple of it.
    each: Vec<(u64, bool)>,
}

impl Divisors {
    fn new(divisors: &[(Dec, bool)]) -> Result<Divisors, String> {
        let too_many = || {
            format!(
                "multipleOf with more than {} significant digits (of all the divisors that \
                 apply to one number together) is not supported",
                MAX_DIVISOR.to_string().len() - 1
            )
        };
        let mut parsed = Vec::with_capacity(divisors.len());
        for (m, negated) in divisors {
            if m.neg || m.is_zero() {
                return Err("multipleOf must be greater than 0".into());
            }
            let mut a: u64 = 0;
            for d in m.int.iter().chain(m.frac.iter()) {
                a = a
                    .checked_mul(10)
                    .and_then(|x| x.checked_add(u64::from(*d)))
                    .filter(|x| *x <= MAX_DIVISOR)
                    .ok_or_else(too_many)?;
            }
            parsed.push((a, m.frac.len() as u32, *negated));
        }
        let k = parsed.iter().map(|p| p.1).max().unwrap_or(0);
        let mut l: u64 = 1;
        let mut each = Vec::with_capacity(parsed.len());
        for (a, ki, negated) in parsed {
            let b = 10u64
                .checked_pow(k - ki)
                .and_then(|p| p.checked_mul(a))
                .filter(|b| *b <= MAX_DIVISOR)
                .ok_or_else(too_many)?;
            l = lcm(l, b)
                .filter(|l| *l <= MAX_DIVISOR)
                .ok_or_else(too_many)?;
            each.push((b, negated));
        }
        Ok(Divisors { l, k, each })
    }

    fn step(&self, s: Arith, b: u8) -> Arith {
        match (s, b) {
            (Arith::Never, _) => Arith::Never,
            (s, b'-') => s,
            (Arith::Int(r), b'.') => Arith::Frac(r, 0),
            (Arith::Int(r), d) => Arith::Int((r * 10 + u64::from(d - b'0')) % self.l),
            (Arith::Frac(r, j), d) if j < self.k => {
                Arith::Frac((r * 10 + u64::from(d - b'0')) % self.l, j + 1)
            }
            (Arith::Frac(r, j), b'0') => Arith::Frac(r, j),
            (Arith::Frac(..), _) => Arith::Never,
        }
    }

    /// Whether a number read into `s` meets every divisor's condition. A number with a
    /// non-zero digit past `k` fraction digits (`Never`) is a multiple of none of them.
    fn accepts(&self, s: Arith) -> bool {
        let (r, j) = match s {
            Arith::Never => return self.each.iter().all(|(_, negated)| *negated),
            Arith::Int(r) => (r, 0),
            Arith::Frac(r, j) => (r, j),
        };
        let mut x = r;
        for _ in j..self.k {
            x = x * 10 % self.l;
        }
        self.each
            .iter()
            .all(|(b, negated)| (x % b == 0) != *negated)
    }
}

/// Whether [`multiple_of_spelled`] takes these divisors together (`Err`: its refusal), without
/// building any automaton.
pub(crate) fn divisors_supported(divisors: &[(Dec, bool)]) -> Result<(), String> {
    Divisors::new(divisors).map(|_| ())
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> Option<u64> {
    (a / gcd(a, b)).checked_mul(b)
}

/// Numbers (integers if `integer`) within the bounds that meet every divisor condition —
/// a multiple of `m`, or with `true` not a multiple of it —, spelled without exponent.
/// `Ok(None)`: no such number. (The tests' form of [`multiple_of_spelled`], whose expression
/// must fit the budget.)
#[cfg(test)]
fn multiple_of(
    divisors: &[(Dec, bool)],
    lo: Option<&Bound>,
    hi: Option<&Bound>,
    integer: bool,
) -> Result<Option<Hir>, String> {
    match multiple_of_lang(divisors, lo, hi, integer)? {
        None => Ok(None),
        Some(l) => lang_hir(&l, &budget()).map_err(|e| format!("multipleOf: {e}")),
    }
}

/// [`multiple_of`] as a regular expression where one fits the budget, else as its minimal
/// character DFA: a remainder automaton's expression grows exponentially with the modulus
/// (`multipleOf: 11` already passes the budget), its DFA only linearly. `Ok(None)`: no such
/// number.
///
/// Answers are kept process-wide ([`SPELLED_NODES`]): one schema often asks for the same
/// numbers several times (the branches of an `anyOf`, each `not`), and schemas of one family
/// ask for the same ones again, where each answer costs up to milliseconds of state elimination.
pub(crate) fn multiple_of_spelled(
    divisors: &[(Dec, bool)],
    lo: Option<&Bound>,
    hi: Option<&Bound>,
    integer: bool,
) -> Result<Option<NumLang>, String> {
    let key: SpelledKey = (divisors.to_vec(), lo.cloned(), hi.cloned(), integer);
    if let Some(found) = spelled_cache().get(&key) {
        return Ok(found);
    }
    #[cfg(test)]
    SPELLED_ASKED.with(|n| n.set(n.get() + 1));
    let spelled = match multiple_of_lang(divisors, lo, hi, integer)? {
        None => None,
        Some(l) => spelled(&l).map_err(|e| format!("multipleOf: {e}"))?,
    };
    spelled_cache().put(key, &spelled);
    Ok(spelled)
}

#[cfg(test)]
thread_local! {
    /// How many questions [`multiple_of_spelled`] answered on this thread without its kept
    /// answers (tests).
    pub(crate) static SPELLED_ASKED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// What [`multiple_of_spelled`] was asked: the divisors, the bounds, integers only.
type SpelledKey = (Vec<(Dec, bool)>, Option<Bound>, Option<Bound>, bool);

/// The most nodes (HIR nodes, DFA states and transitions, and the digits of the questions) the
/// process keeps of [`multiple_of_spelled`]'s answers: a few megabytes. Past it the kept
/// answers are dropped and the cache starts again.
const SPELLED_NODES: u64 = 200_000;

/// One answer is kept only up to this size (a larger one is recomputed when asked again).
const SPELLED_NODES_ONE: u64 = SPELLED_NODES / 4;

#[derive(Default)]
struct SpelledCache {
    answers: HashMap<SpelledKey, (Option<NumLang>, u64)>,
    nodes: u64,
}

struct Spelled(std::sync::Mutex<SpelledCache>);

fn spelled_cache() -> &'static Spelled {
    static CACHE: std::sync::OnceLock<Spelled> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Spelled(std::sync::Mutex::new(SpelledCache::default())))
}

impl Spelled {
    fn lock(&self) -> std::sync::MutexGuard<'_, SpelledCache> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &SpelledKey) -> Option<Option<NumLang>> {
        self.lock().answers.get(key).map(|(n, _)| n.clone())
    }

    fn put(&self, key: SpelledKey, answer: &Option<NumLang>) {
        // the key's digits count too (a bound may have thousands)
        let digits = |d: &Dec| (d.int.len() + d.frac.len() + 1) as u64;
        let key_size: u64 = key.0.iter().map(|(d, _)| digits(d)).sum::<u64>()
            + [&key.1, &key.2]
                .into_iter()
                .flatten()
                .map(|b| digits(&b.value))
                .sum::<u64>();
        let size = answer.as_ref().map_or(1, NumLang::nodes) + key_size;
        if size > SPELLED_NODES_ONE {
            return;
        }
        let mut c = self.lock();
        if c.nodes + size > SPELLED_NODES {
            c.answers.clear();
            c.nodes = 0;
        }
        if let Some((_, old)) = c.answers.insert(key, (answer.clone(), size)) {
            c.nodes -= old;
        }
        c.nodes += size;
    }
}

/// Most states of a minimal DFA whose regular expression is tried (past it, state elimination
/// spends up to the weight budget, tens of milliseconds, to find it too large).
const REGEX_STATES: usize = 24;

/// A number language's regular expression is used only up to this many times the size of its
/// minimal DFA (states and transitions); past it the DFA is the smaller automaton to build and
/// to step through, and state elimination stops early. (A remainder automaton of 9 states, from
/// `multipleOf: 10` beside `not: {multipleOf: 20}`, has an expression of weight 31,613, 2-3 ms
/// of state elimination.)
const HIR_PER_DFA_NODE: u64 = 8;

/// `l` as a regular expression where its minimal DFA is small and the expression is not much
/// larger than that DFA, else as the DFA; `Ok(None)`: empty.
fn spelled(l: &Lang) -> Result<Option<NumLang>, String> {
    let Some(d) = l.to_char_dfa(&budget())? else {
        return Ok(None);
    };
    if d.accept.len() > REGEX_STATES {
        return Ok(Some(NumLang::Dfa(d)));
    }
    let b = LangBudget {
        max_weight: dfa_nodes(&d)
            .saturating_mul(HIR_PER_DFA_NODE)
            .min(MAX_WEIGHT),
        ..budget()
    };
    match lang_hir(l, &b) {
        Ok(h) => Ok(h.map(NumLang::Hir)),
        Err(_) => Ok(Some(NumLang::Dfa(d))),
    }
}

/// A DFA's size in nodes: its states and transitions.
fn dfa_nodes(d: &CharDfa) -> u64 {
    d.edges.iter().map(|e| e.len() as u64 + 1).sum()
}

/// The spellings of some numbers: a regular expression, or a character DFA over their ASCII
/// characters (see [`multiple_of_spelled`]).
#[derive(Debug, Clone)]
pub(crate) enum NumLang {
    Hir(Hir),
    Dfa(CharDfa),
}

impl NumLang {
    /// Its size in nodes: a HIR's nodes, or a DFA's states and transitions.
    fn nodes(&self) -> u64 {
        match self {
            NumLang::Hir(h) => crate::automata::hir::nodes(h),
            NumLang::Dfa(d) => dfa_nodes(d),
        }
    }

    /// As a language of the character algebra.
    pub(crate) fn lang(&self) -> Result<Lang, String> {
        match self {
            NumLang::Hir(h) => Lang::from_hir(h),
            NumLang::Dfa(d) => Lang::from_dfa(d),
        }
    }

    /// Its minimal character DFA (`None`: empty), for the readers of unique arrays.
    pub(crate) fn char_dfa(&self) -> Result<Option<CharDfa>, String> {
        match self {
            NumLang::Hir(h) => crate::automata::strlang::combined_dfa(std::slice::from_ref(h), &[]),
            NumLang::Dfa(d) => Ok(Some(d.clone())),
        }
    }

    /// As an expression of number text: the DFA's characters read as raw bytes (a number has
    /// no escapes).
    pub(crate) fn into_expr(self) -> Option<Expr> {
        match self {
            NumLang::Hir(h) => Some(Expr::Hir(h)),
            NumLang::Dfa(d) => crate::automata::expr::raw_ascii_dfa(&d),
        }
    }

    /// Intersected with the number text `other` (a regular expression); `Ok(None)`: empty.
    pub(crate) fn and(&self, other: &Hir) -> Result<Option<NumLang>, String> {
        spelled(&self.lang()?.and(&Lang::from_hir(other)?))
    }
}

fn budget() -> LangBudget {
    LangBudget {
        max_states: MAX_STATES,
        max_weight: MAX_WEIGHT,
        ..LangBudget::default()
    }
}

/// [`multiple_of`]'s language before it is turned into an expression.
fn multiple_of_lang(
    divisors: &[(Dec, bool)],
    lo: Option<&Bound>,
    hi: Option<&Bound>,
    integer: bool,
) -> Result<Option<Lang>, String> {
    let div = Divisors::new(divisors)?;
    // a number past `k` fraction digits can only meet conditions that are all negations
    let never_ok = div.accepts(Arith::Never);
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
            if an == Arith::Never && !never_ok {
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
        .map(|&(rs, ar)| d.is_accepting(rs) && div.accepts(ar))
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
    Lang::from_dfa(&dfa).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::hir;
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
                let h = multiple_of(&[(dec(m), negate)], Some(&lo), Some(&hi), integer)
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

    /// Divisors whose remainder automaton has no expression within the budget (11, 13, 97,
    /// 1024, several at once) are kept as DFAs: the same language, checked by brute force on
    /// the DFA read as raw bytes.
    #[test]
    fn large_moduli_as_dfas_brute_force() {
        let sets: &[&[(&str, bool)]] = &[
            &[("11", false)],
            &[("13", false)],
            &[("97", false)],
            &[("1024", false)],
            &[("11", false), ("3", true)],
            &[("2.5", false), ("7", false)],
            &[("0.11", false)],
        ];
        // unbounded above (a bounded range is a finite language, whose expression fits)
        let lo = Bound {
            value: dec("-3000"),
            inclusive: true,
        };
        let mut dfas = 0;
        for (set, bounded) in sets.iter().flat_map(|s| [(s, false), (s, true)]) {
            let divisors: Vec<(Dec, bool)> = set.iter().map(|(m, n)| (dec(m), *n)).collect();
            let lo = bounded.then_some(&lo);
            for integer in [false, true] {
                let n = multiple_of_spelled(&divisors, lo, None, integer)
                    .unwrap()
                    .unwrap();
                dfas += usize::from(matches!(n, NumLang::Dfa(_)));
                let d = n.char_dfa().unwrap().unwrap();
                let run = |t: &str| dfa_matches(&d, t);
                let mut texts: Vec<String> = Vec::new();
                for i in (-3100..5100).step_by(7) {
                    texts.push(i.to_string());
                    for f in ["5", "25", "0", "00", "11", "75", "125"] {
                        texts.push(format!("{i}.{f}"));
                    }
                }
                for i in [0, 11, 22, 13, 97, 1024, 2048, -1024, 4096, 5000, -3000] {
                    texts.push(i.to_string());
                    texts.push(format!("{i}.0"));
                }
                texts.push("-0".into());
                for t in texts {
                    let v = dec(&t);
                    let in_range = lo.is_none_or(|l| v >= l.value);
                    let spelled = range_spelling(&t, integer);
                    let meets = divisors.iter().all(|(m, negated)| {
                        crate::json_schema::validate::is_multiple(&v, m).unwrap() != *negated
                    });
                    let want = in_range && spelled && meets;
                    assert_eq!(run(&t), want, "{set:?} {lo:?} integer={integer} {t}");
                }
            }
        }
        // most of them have no expression within the budget
        assert!(dfas >= 8, "{dfas} kept as DFAs");
    }

    #[test]
    fn several_divisors_brute_force() {
        // (divisor, negated) sets: required with negated, two negated, decimals of different
        // scales, a divisor that divides another
        let sets: &[&[(&str, bool)]] = &[
            &[("2", true), ("3", true)],
            &[("4", false), ("6", true)],
            &[("0.5", true), ("3", true)],
            &[("0.25", false), ("0.1", true)],
            &[("2", true), ("4", true), ("0.3", true)],
            &[("3", false), ("9", false)],
            &[("1.5", true), ("0.01", false)],
        ];
        let lo = Bound {
            value: dec("-20"),
            inclusive: false,
        };
        let hi = Bound {
            value: dec("25"),
            inclusive: true,
        };
        for set in sets {
            let divisors: Vec<(Dec, bool)> = set.iter().map(|(m, n)| (dec(m), *n)).collect();
            for integer in [false, true] {
                let h = multiple_of(&divisors, Some(&lo), Some(&hi), integer).unwrap();
                let re = h.as_ref().map(Re::new);
                let mut checked = 0;
                for i in -25..30 {
                    let mut texts = vec![i.to_string()];
                    for f in ["5", "25", "50", "01", "1", "75", "3", "30", "125", "0"] {
                        texts.push(format!("{i}.{f}"));
                    }
                    for t in texts {
                        let v = dec(&t);
                        let in_range = v > lo.value && v <= hi.value;
                        let spelled = range_spelling(&t, integer);
                        let meets = divisors.iter().all(|(m, negated)| {
                            crate::json_schema::validate::is_multiple(&v, m).unwrap() != *negated
                        });
                        let want = in_range && spelled && meets;
                        let got = re.as_ref().is_some_and(|r| r.is_match(&t));
                        assert_eq!(got, want, "{set:?} integer={integer} {t}");
                        checked += 1;
                    }
                }
                assert!(checked > 500);
            }
        }
        // the common modulus is bounded like a single divisor
        let big = [(dec("9973"), true), (dec("9967"), true)];
        assert!(multiple_of(&big, None, None, true).is_err());
    }

    /// `multipleOf: 10` beside `not: {multipleOf: 20}` (and the like) has a 9-state remainder
    /// DFA whose regular expression weighs tens of thousands: it is kept as the DFA (or an
    /// expression at most `HIR_PER_DFA_NODE` times its size), the same language by brute
    /// force; a second ask gets the kept answer, the same language; and the kept answers stay
    /// within `SPELLED_NODES` whatever is asked.
    #[test]
    fn spelled_answers_are_small_kept_and_bounded() {
        let run = |n: &NumLang, t: &str| dfa_matches(&n.char_dfa().unwrap().unwrap(), t);
        let sets: &[&[(&str, bool)]] = &[
            &[("10", false), ("20", true)],
            &[("2.5", false), ("7", true)],
            &[("30", false), ("7", true)],
        ];
        let lo = Bound {
            value: dec("15"),
            inclusive: true,
        };
        for set in sets {
            let divisors: Vec<(Dec, bool)> = set.iter().map(|(m, n)| (dec(m), *n)).collect();
            for lo in [None, Some(&lo)] {
                let first = multiple_of_spelled(&divisors, lo, None, false)
                    .unwrap()
                    .unwrap();
                let again = multiple_of_spelled(&divisors, lo, None, false)
                    .unwrap()
                    .unwrap();
                let dfa = first.char_dfa().unwrap().unwrap();
                if let NumLang::Hir(h) = &first {
                    assert!(
                        hir::weight(h) <= dfa_nodes(&dfa) * HIR_PER_DFA_NODE,
                        "{set:?} {lo:?}"
                    );
                }
                for i in (-200..400).step_by(3) {
                    for t in [
                        i.to_string(),
                        format!("{i}.5"),
                        format!("{i}.25"),
                        format!("{i}.0"),
                    ] {
                        let v = dec(&t);
                        let meets = divisors.iter().all(|(m, negated)| {
                            crate::json_schema::validate::is_multiple(&v, m).unwrap() != *negated
                        });
                        let want =
                            lo.is_none_or(|l| v >= l.value) && range_spelling(&t, false) && meets;
                        assert_eq!(run(&first, &t), want, "{set:?} {lo:?} {t}");
                        assert_eq!(run(&again, &t), want, "{set:?} {lo:?} {t} (kept)");
                    }
                }
            }
        }
        // a remainder automaton whose expression is small keeps it (integers ending in 0 or 5)
        let five = multiple_of_spelled(&[(dec("5"), false)], None, None, true);
        assert!(matches!(five, Ok(Some(NumLang::Hir(_)))), "{five:?}");
        for m in 2..400u32 {
            let bound = Bound {
                value: dec(&m.to_string()),
                inclusive: false,
            };
            let _ = multiple_of_spelled(&[(dec("3"), false)], Some(&bound), None, m % 2 == 0);
            assert!(spelled_cache().lock().nodes <= SPELLED_NODES);
        }
    }

    /// Whether the character DFA `d` accepts `t`.
    fn dfa_matches(d: &CharDfa, t: &str) -> bool {
        let mut at = d.start;
        for c in t.chars().map(u32::from) {
            match d.edges[at].iter().find(|&&(a, b, _)| a <= c && c <= b) {
                Some(&(_, _, next)) => at = next,
                None => return false,
            }
        }
        d.accept[at]
    }

    /// Whether `t` is spelled the way the number grammar spells numbers.
    fn range_spelling(t: &str, integer: bool) -> bool {
        let h = number_range(None, None, integer).unwrap();
        Re::new(&h).is_match(t)
    }

    #[test]
    fn unbounded_and_errors() {
        let h = multiple_of(&[(dec("5"), false)], None, None, true)
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
        assert!(multiple_of(&[(dec("0"), false)], None, None, true).is_err());
        assert!(multiple_of(&[(dec("123456789"), false)], None, None, true).is_err());
        let lo = Bound {
            value: dec("1"),
            inclusive: true,
        };
        let hi = Bound {
            value: dec("4"),
            inclusive: true,
        };
        assert!(
            multiple_of(&[(dec("5"), false)], Some(&lo), Some(&hi), true)
                .unwrap()
                .is_none()
        );
    }
}
