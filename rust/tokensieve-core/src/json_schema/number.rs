//! Numeric ranges as regexes over JSON number spellings.
//!
//! Bounds are exact decimals (parsed from the schema's number text, exponent included), and the
//! languages built here are exact for the spellings they cover:
//!
//! * integers: `-?(0|[1-9][0-9]*)` — no fraction, no exponent;
//! * bounded numbers: `-?(0|[1-9][0-9]*)(\.[0-9]+)?` — no exponent (a value with an exponent,
//!   such as `1e3`, is a spelling the grammar does not produce);
//! * unbounded numbers: the full JSON number grammar, exponent included.
//!
//! `-0` (and `-0.0`) equal zero and are accepted wherever zero is in range.

use std::cmp::Ordering;

use regex_syntax::hir::Hir;

use crate::automata::hir::{
    alt, alt_opt, class, concat, digits, fixed_width, lit, opt, rep, star, Base,
};

/// A decimal number: sign, integer digits (no leading zeros; empty = 0) and fraction digits
/// (no trailing zeros). Zero is never negative.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Dec {
    pub neg: bool,
    pub int: Vec<u8>,
    pub frac: Vec<u8>,
}

/// Largest decimal exponent of a number the compiler reads (its digits are expanded).
pub(crate) const MAX_EXPONENT: i64 = 10_000;

impl Dec {
    pub fn zero() -> Dec {
        Dec {
            neg: false,
            int: vec![],
            frac: vec![],
        }
    }

    /// Parse JSON number text (`-?digits(.digits)?([eE][+-]?digits)?`).
    pub fn parse(s: &str) -> Option<Dec> {
        let (neg, s) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (mant, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i64>().ok()?),
            None => (s, 0),
        };
        let (ip, fp) = match mant.find('.') {
            Some(i) => (&mant[..i], &mant[i + 1..]),
            None => (mant, ""),
        };
        if ip.is_empty() || !ip.bytes().chain(fp.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        if exp.abs() > MAX_EXPONENT {
            return None;
        }
        let all: Vec<u8> = ip.bytes().chain(fp.bytes()).map(|b| b - b'0').collect();
        let point = ip.len() as i64 + exp;
        let (mut int, mut frac): (Vec<u8>, Vec<u8>);
        if point <= 0 {
            int = vec![];
            frac = std::iter::repeat_n(0u8, (-point) as usize)
                .chain(all.iter().copied())
                .collect();
        } else if point as usize >= all.len() {
            int = all.clone();
            int.extend(std::iter::repeat_n(0u8, point as usize - all.len()));
            frac = vec![];
        } else {
            int = all[..point as usize].to_vec();
            frac = all[point as usize..].to_vec();
        }
        let lead = int.iter().take_while(|&&d| d == 0).count();
        int.drain(..lead);
        while frac.last() == Some(&0) {
            frac.pop();
        }
        let zero = int.is_empty() && frac.is_empty();
        Some(Dec {
            neg: neg && !zero,
            int,
            frac,
        })
    }

    /// The exact value of a schema number (checked by `resolve::prepare`: its exponent is
    /// within `MAX_EXPONENT`).
    pub fn from_json(n: &serde_json::Number) -> Dec {
        Dec::parse(&n.to_string()).expect("schema numbers are checked by resolve::prepare")
    }

    /// The magnitude times `10^k` as an integer (`k` at least the number of fraction digits);
    /// `None` on overflow.
    pub fn scaled(&self, k: usize) -> Option<u128> {
        let mut n: u128 = 0;
        for d in self.int.iter().chain(self.frac.iter()) {
            n = n.checked_mul(10)?.checked_add(u128::from(*d))?;
        }
        for _ in self.frac.len()..k {
            n = n.checked_mul(10)?;
        }
        Some(n)
    }

    pub fn is_zero(&self) -> bool {
        self.int.is_empty() && self.frac.is_empty()
    }

    pub fn negated(&self) -> Dec {
        Dec {
            neg: !self.neg && !self.is_zero(),
            int: self.int.clone(),
            frac: self.frac.clone(),
        }
    }

    fn cmp_mag(&self, o: &Dec) -> Ordering {
        self.int
            .len()
            .cmp(&o.int.len())
            .then_with(|| self.int.cmp(&o.int))
            .then_with(|| self.frac.cmp(&o.frac))
    }
}

impl PartialOrd for Dec {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Dec {
    fn cmp(&self, o: &Dec) -> Ordering {
        match (self.neg, o.neg) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_mag(o),
            (true, true) => o.cmp_mag(self),
        }
    }
}

/// One end of an interval.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Bound {
    pub value: Dec,
    pub inclusive: bool,
}

fn increment(d: &[u8]) -> Vec<u8> {
    let mut v = d.to_vec();
    let mut i = v.len();
    loop {
        if i == 0 {
            v.insert(0, 1);
            return v;
        }
        i -= 1;
        if v[i] == 9 {
            v[i] = 0;
        } else {
            v[i] += 1;
            return v;
        }
    }
}

fn canon(d: &[u8]) -> Vec<u8> {
    if d.is_empty() {
        vec![0]
    } else {
        d.to_vec()
    }
}

fn cmp_int(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Canonical decimal integers (`0|[1-9][0-9]*`) with value in `a..=b` (`b = None`: no upper end).
/// `a`, `b` have no leading zeros (empty = 0).
fn int_between(a: &[u8], b: Option<&[u8]>) -> Option<Hir> {
    if let Some(b) = b {
        if cmp_int(a, b) == Ordering::Greater {
            return None;
        }
    }
    let a = canon(a);
    let la = a.len();
    let mut parts = Vec::new();
    let lb = b.map(|b| canon(b).len());
    let last = lb.unwrap_or(la);
    for n in la..=last {
        let lo = if n == la {
            a.clone()
        } else {
            let mut v = vec![0u8; n];
            v[0] = 1;
            v
        };
        let hi = match b {
            Some(b) if n == last => canon(b),
            _ => vec![9u8; n],
        };
        parts.push(fixed_width(&lo, &hi, Base::Decimal));
    }
    if b.is_none() {
        parts.push(concat(vec![
            digits(1, 9),
            rep(digits(0, 9), la as u32, None),
        ]));
    }
    Some(alt(parts))
}

fn any_digits() -> Hir {
    star(digits(0, 9))
}

fn some_nonzero() -> Hir {
    concat(vec![any_digits(), digits(1, 9), any_digits()])
}

/// Does the zero fraction satisfy `0.s >= 0.f` (`>` when exclusive)?
fn zero_ge(f: &[u8], incl: bool) -> bool {
    f.is_empty() && incl
}

fn zero_le(f: &[u8], incl: bool) -> bool {
    !f.is_empty() || incl
}

fn with_empty(h: Option<Hir>, empty: bool) -> Option<Hir> {
    match (h, empty) {
        (Some(h), true) => Some(opt(h)),
        (Some(h), false) => Some(h),
        (None, true) => Some(Hir::empty()),
        (None, false) => None,
    }
}

/// Non-empty digit strings `s` with `0.s >= 0.f` (`>` if not inclusive).
fn frac_ge(f: &[u8], incl: bool) -> Option<Hir> {
    match f.split_first() {
        None => Some(if incl {
            rep(digits(0, 9), 1, None)
        } else {
            some_nonzero()
        }),
        Some((&d, rest)) => {
            let above = (d < 9).then(|| concat(vec![digits(d + 1, 9), any_digits()]));
            let same = with_empty(frac_ge(rest, incl), zero_ge(rest, incl))
                .map(|t| concat(vec![digits(d, d), t]));
            alt_opt(vec![above, same])
        }
    }
}

/// Non-empty digit strings `s` with `0.s <= 0.f` (`<` if not inclusive).
fn frac_le(f: &[u8], incl: bool) -> Option<Hir> {
    match f.split_first() {
        None => incl.then(|| rep(digits(0, 0), 1, None)),
        Some((&d, rest)) => {
            let below = (d > 0).then(|| concat(vec![digits(0, d - 1), any_digits()]));
            let same = with_empty(frac_le(rest, incl), zero_le(rest, incl))
                .map(|t| concat(vec![digits(d, d), t]));
            alt_opt(vec![below, same])
        }
    }
}

/// Non-empty digit strings with `0.lo <(=) 0.s <(=) 0.hi`, given `0.lo <= 0.hi`.
fn frac_between(lo: &[u8], il: bool, hi: &[u8], ih: bool) -> Option<Hir> {
    match (lo.split_first(), hi.split_first()) {
        (None, _) if il => frac_le(hi, ih),
        (None, None) => None,
        (None, Some((&h, rest))) => {
            // 0 < 0.s <= 0.hi
            let mid = (h > 1).then(|| concat(vec![digits(1, h - 1), any_digits()]));
            let zero_lead = (h > 0).then(|| concat(vec![digits(0, 0), some_nonzero()]));
            let same = if h > 0 {
                with_empty(frac_le(rest, ih), zero_le(rest, ih))
            } else {
                with_empty(frac_between(&[], false, rest, ih), false)
            }
            .map(|t| concat(vec![digits(h, h), t]));
            alt_opt(vec![mid, zero_lead, same])
        }
        (Some(_), None) => None,
        (Some((&l, rl)), Some((&h, rh))) => {
            if l == h {
                let empty = zero_ge(rl, il) && zero_le(rh, ih);
                with_empty(frac_between(rl, il, rh, ih), empty)
                    .map(|t| concat(vec![digits(l, l), t]))
            } else {
                let mid = (l + 1 < h).then(|| concat(vec![digits(l + 1, h - 1), any_digits()]));
                let low = with_empty(frac_ge(rl, il), zero_ge(rl, il))
                    .map(|t| concat(vec![digits(l, l), t]));
                let high = with_empty(frac_le(rh, ih), zero_le(rh, ih))
                    .map(|t| concat(vec![digits(h, h), t]));
                alt_opt(vec![mid, low, high])
            }
        }
    }
}

/// The fraction part `(\.digits)?` given the language of its digits and whether an absent
/// fraction (value zero) qualifies. Integers take only the absent fraction.
fn frac_part(digits_lang: Option<Hir>, zero_ok: bool, integer: bool) -> Option<Hir> {
    if integer {
        return zero_ok.then(Hir::empty);
    }
    let dotted = digits_lang.map(|d| concat(vec![lit("."), d]));
    with_empty(dotted, zero_ok)
}

fn any_frac(integer: bool) -> Hir {
    if integer {
        Hir::empty()
    } else {
        opt(concat(vec![lit("."), rep(digits(0, 9), 1, None)]))
    }
}

/// Non-negative numbers in `[lo, hi]` (lo >= 0).
fn nonneg(lo: &Bound, hi: Option<&Bound>, integer: bool) -> Option<Hir> {
    if let Some(hi) = hi {
        match lo.value.cmp(&hi.value) {
            Ordering::Greater => return None,
            Ordering::Equal if !(lo.inclusive && hi.inclusive) => return None,
            _ => {}
        }
    }
    let (il, fl) = (&lo.value.int, &lo.value.frac);
    let low_int = |frac: Option<Hir>| {
        int_between(il, Some(il))
            .zip(frac)
            .map(|(i, f)| concat(vec![i, f]))
    };
    match hi {
        None => {
            let at = low_int(frac_part(
                frac_ge(fl, lo.inclusive),
                zero_ge(fl, lo.inclusive),
                integer,
            ));
            let above =
                int_between(&increment(il), None).map(|i| concat(vec![i, any_frac(integer)]));
            alt_opt(vec![at, above])
        }
        Some(hi) => {
            let (ih, fh) = (&hi.value.int, &hi.value.frac);
            if il == ih {
                let zero = zero_ge(fl, lo.inclusive) && zero_le(fh, hi.inclusive);
                low_int(frac_part(
                    frac_between(fl, lo.inclusive, fh, hi.inclusive),
                    zero,
                    integer,
                ))
            } else {
                let at_low = low_int(frac_part(
                    frac_ge(fl, lo.inclusive),
                    zero_ge(fl, lo.inclusive),
                    integer,
                ));
                let inner = if cmp_int(&increment(il), ih) == Ordering::Less {
                    // il + 1 ..= ih - 1
                    let top = decrement(ih);
                    int_between(&increment(il), Some(&top))
                        .map(|i| concat(vec![i, any_frac(integer)]))
                } else {
                    None
                };
                let at_high = int_between(ih, Some(ih)).zip(frac_part(
                    frac_le(fh, hi.inclusive),
                    zero_le(fh, hi.inclusive),
                    integer,
                ));
                let at_high = at_high.map(|(i, f)| concat(vec![i, f]));
                alt_opt(vec![at_low, inner, at_high])
            }
        }
    }
}

fn decrement(d: &[u8]) -> Vec<u8> {
    // d > 0
    let mut v = d.to_vec();
    let mut i = v.len();
    while i > 0 {
        i -= 1;
        if v[i] == 0 {
            v[i] = 9;
        } else {
            v[i] -= 1;
            break;
        }
    }
    let lead = v.iter().take_while(|&&x| x == 0).count();
    v.drain(..lead);
    v
}

/// The unbounded JSON number grammar (with exponent) or integer grammar.
pub(crate) fn any_number(integer: bool) -> Hir {
    let int = alt(vec![
        lit("0"),
        concat(vec![digits(1, 9), star(digits(0, 9))]),
    ]);
    let mut parts = vec![opt(lit("-")), int];
    if !integer {
        parts.push(any_frac(false));
        parts.push(opt(concat(vec![
            class(&[('E', 'E'), ('e', 'e')]),
            opt(class(&[('+', '+'), ('-', '-')])),
            rep(digits(0, 9), 1, None),
        ])));
    }
    concat(parts)
}

/// Bounds of at most this many digits in all have their [`number_range`] kept.
const KEPT_RANGE_DIGITS: usize = 40;

/// At most this many [`number_range`] results are kept (all are dropped when it is reached).
const KEPT_RANGES: usize = 1024;

type RangeKey = (Option<Bound>, Option<Bound>, bool);

/// Numbers (or integers) within the bounds; `None` if the interval is empty.
///
/// Results are kept process-wide (bounds of up to [`KEPT_RANGE_DIGITS`] digits, at most
/// [`KEPT_RANGES`] of them): the same bounds recur across a schema's properties, the tools of a
/// structural tag and requests (`minimum: 0`, `1` to `100`), and a copy costs less than
/// building the range again.
pub(crate) fn number_range(lo: Option<&Bound>, hi: Option<&Bound>, integer: bool) -> Option<Hir> {
    let digits = |b: Option<&Bound>| b.map_or(0, |b| b.value.int.len() + b.value.frac.len());
    if digits(lo) + digits(hi) > KEPT_RANGE_DIGITS {
        return number_range_built(lo, hi, integer);
    }
    static KEPT: std::sync::OnceLock<
        std::sync::Mutex<rustc_hash::FxHashMap<RangeKey, Option<Hir>>>,
    > = std::sync::OnceLock::new();
    let kept = || {
        KEPT.get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let key = (lo.cloned(), hi.cloned(), integer);
    if let Some(h) = kept().get(&key) {
        return h.clone();
    }
    let h = number_range_built(lo, hi, integer);
    let mut k = kept();
    if k.len() >= KEPT_RANGES {
        k.clear();
    }
    k.insert(key, h.clone());
    h
}

/// [`number_range`], built.
fn number_range_built(lo: Option<&Bound>, hi: Option<&Bound>, integer: bool) -> Option<Hir> {
    if lo.is_none() && hi.is_none() {
        return Some(any_number(integer));
    }
    if let (Some(l), Some(h)) = (lo, hi) {
        match l.value.cmp(&h.value) {
            Ordering::Greater => return None,
            Ordering::Equal if !(l.inclusive && h.inclusive) => return None,
            _ => {}
        }
    }
    let zero = Bound {
        value: Dec::zero(),
        inclusive: true,
    };
    // x >= 0 part
    let pos_lo = match lo {
        Some(l) if !l.value.neg => l.clone(),
        _ => zero.clone(),
    };
    let pos = match hi {
        Some(h) if h.value.neg => None,
        _ => nonneg(&pos_lo, hi, integer),
    };
    // x <= 0 part, as "-" followed by y = -x in [-hi, -lo] ∩ [0, inf)
    let neg = match lo {
        Some(l) if !l.value.neg && !l.value.is_zero() => None,
        _ => {
            let ylo = match hi {
                Some(h) if h.value.neg || h.value.is_zero() => Bound {
                    value: h.value.negated(),
                    inclusive: h.inclusive,
                },
                _ => zero.clone(),
            };
            let yhi = lo.map(|l| Bound {
                value: l.value.negated(),
                inclusive: l.inclusive,
            });
            nonneg(&ylo, yhi.as_ref(), integer).map(|h| concat(vec![lit("-"), h]))
        }
    };
    alt_opt(vec![pos, neg])
}

/// All decimal spellings without exponent of the value `d`: the integer digits as written
/// canonically, any number of trailing fraction zeros; zero also as `-0`.
pub(crate) fn number_literal(d: &Dec) -> Hir {
    let b = Bound {
        value: d.clone(),
        inclusive: true,
    };
    number_range(Some(&b), Some(&b), false).unwrap_or_else(Hir::fail)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::Re;
    use super::*;

    fn re(h: &Hir) -> Re {
        Re::new(h)
    }

    fn bound(s: &str, inclusive: bool) -> Bound {
        Bound {
            value: Dec::parse(s).unwrap(),
            inclusive,
        }
    }

    /// A kept range is the one built for exactly its bounds: asked again, and asked with only
    /// the inclusiveness, the integer flag or one bound changed, each answer equals the range
    /// built afresh.
    #[test]
    fn kept_ranges_are_the_built_ones() {
        let cases = [
            (Some(bound("1", true)), None),
            (Some(bound("1", false)), None),
            (Some(bound("0", true)), Some(bound("100", true))),
            (Some(bound("0", true)), Some(bound("100", false))),
            (Some(bound("-2.5", true)), Some(bound("7", true))),
            (None, Some(bound("-3", true))),
            (Some(bound("12345678901234567890123", true)), None),
            (
                Some(bound("12345678901234567890123", true)),
                Some(bound("1e30", true)),
            ),
        ];
        for _ in 0..2 {
            for (lo, hi) in &cases {
                for integer in [false, true] {
                    let want = number_range_built(lo.as_ref(), hi.as_ref(), integer);
                    let got = number_range(lo.as_ref(), hi.as_ref(), integer);
                    assert_eq!(got, want, "{lo:?} {hi:?} integer={integer}");
                }
            }
        }
    }

    #[test]
    fn parse_decimals() {
        let d = Dec::parse("-12.500e1").unwrap();
        assert_eq!(
            (d.neg, d.int.clone(), d.frac.clone()),
            (true, vec![1, 2, 5], vec![])
        );
        let d = Dec::parse("1e-3").unwrap();
        assert_eq!((d.int.clone(), d.frac.clone()), (vec![], vec![0, 0, 1]));
        assert!(Dec::parse("-0.0").unwrap().is_zero());
        assert!(Dec::parse("1.5").unwrap() > Dec::parse("1.25").unwrap());
        assert!(Dec::parse("-1.5").unwrap() < Dec::parse("-1.25").unwrap());
    }

    fn check(lo: Option<(&str, bool)>, hi: Option<(&str, bool)>, integer: bool) {
        let lb = lo.map(|(s, i)| bound(s, i));
        let hb = hi.map(|(s, i)| bound(s, i));
        let h = number_range(lb.as_ref(), hb.as_ref(), integer);
        let r = h.as_ref().map(re);
        let lo_f = lo.map(|(s, i)| (s.parse::<f64>().unwrap(), i));
        let hi_f = hi.map(|(s, i)| (s.parse::<f64>().unwrap(), i));
        let mut texts: Vec<String> = Vec::new();
        for i in -1200..=1200 {
            texts.push(format!("{i}"));
            if !integer {
                texts.push(format!("{}", i as f64 / 8.0));
                texts.push(format!("{:.3}", i as f64 / 7.0));
                texts.push(format!("{}.0", i));
            }
        }
        texts.push("-0".into());
        for t in texts {
            let v: f64 = t.parse().unwrap();
            let want = lo_f.is_none_or(|(l, inc)| if inc { v >= l } else { v > l })
                && hi_f.is_none_or(|(h, inc)| if inc { v <= h } else { v < h });
            let got = r.as_ref().is_some_and(|r| r.is_match(&t));
            assert_eq!(got, want, "{t} with lo={lo:?} hi={hi:?} integer={integer}");
        }
    }

    #[test]
    fn integer_ranges() {
        for &(lo, hi) in &[
            (Some(("0", true)), Some(("100", true))),
            (Some(("-37", true)), Some(("1045", false))),
            (Some(("7", false)), None),
            (None, Some(("-13", true))),
            (Some(("-1000", true)), Some(("-999", true))),
            (Some(("1.5", true)), Some(("19.5", true))),
            (Some(("0", false)), Some(("0", true))),
            (Some(("99", true)), Some(("1001", true))),
        ] {
            check(lo, hi, true);
        }
    }

    #[test]
    fn decimal_ranges() {
        for &(lo, hi) in &[
            (Some(("0", true)), Some(("1", true))),
            (Some(("-2.5", false)), Some(("3.125", true))),
            (Some(("0.05", true)), Some(("0.75", false))),
            (Some(("0", false)), None),
            (None, Some(("-0.5", true))),
            (Some(("12.34", true)), Some(("12.5", true))),
            (Some(("-1", true)), Some(("0", false))),
        ] {
            check(lo, hi, false);
        }
    }

    #[test]
    fn literal_spellings() {
        let r = re(&number_literal(&Dec::parse("1.0").unwrap()));
        for ok in ["1", "1.0", "1.000"] {
            assert!(r.is_match(ok), "{ok}");
        }
        for bad in ["01", "1.", "1e0", "1.01", "-1"] {
            assert!(!r.is_match(bad), "{bad}");
        }
        let r = re(&number_literal(&Dec::zero()));
        for ok in ["0", "-0", "0.00", "-0.0"] {
            assert!(r.is_match(ok), "{ok}");
        }
    }

    #[test]
    fn hex_ranges() {
        let h = concat(vec![
            lit("x"),
            fixed_width(&[0, 0, 10, 15], &[13, 7, 15, 15], Base::HexAnyCase),
        ]);
        let r = re(&h);
        for v in 0u32..0x10000 {
            let want = (0xAF..=0xD7FF).contains(&v);
            assert_eq!(r.is_match(&format!("x{v:04x}")), want, "{v:04x}");
            assert_eq!(r.is_match(&format!("x{v:04X}")), want, "{v:04X}");
        }
    }
}
