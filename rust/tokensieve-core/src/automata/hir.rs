//! Small constructors over `regex_syntax::hir::Hir`, so the schema compiler never builds regex
//! text (and never has to escape it).

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind, Repetition};

/// The bytes of `s`, literally.
pub(crate) fn lit(s: &str) -> Hir {
    Hir::literal(s.as_bytes())
}

/// One character out of the inclusive code point ranges.
pub(crate) fn class(ranges: &[(char, char)]) -> Hir {
    let c = ClassUnicode::new(ranges.iter().map(|&(a, b)| ClassUnicodeRange::new(a, b)));
    Hir::class(Class::Unicode(c))
}

/// One ASCII digit in `lo..=hi` (`lo <= hi <= 9`).
pub(crate) fn digits(lo: u8, hi: u8) -> Hir {
    class(&[((b'0' + lo) as char, (b'0' + hi) as char)])
}

pub(crate) fn concat(items: Vec<Hir>) -> Hir {
    Hir::concat(items)
}

/// The alternation of `items`; the empty alternation matches nothing.
pub(crate) fn alt(items: Vec<Hir>) -> Hir {
    Hir::alternation(items)
}

pub(crate) fn rep(sub: Hir, min: u32, max: Option<u32>) -> Hir {
    if max == Some(0) {
        return Hir::empty();
    }
    if min == 1 && max == Some(1) {
        return sub;
    }
    Hir::repetition(Repetition {
        min,
        max,
        greedy: true,
        sub: Box::new(sub),
    })
}

pub(crate) fn opt(sub: Hir) -> Hir {
    rep(sub, 0, Some(1))
}

pub(crate) fn star(sub: Hir) -> Hir {
    rep(sub, 0, None)
}

/// `Some(alternation)` of the present items, `None` when there is none.
pub(crate) fn alt_opt(items: Vec<Option<Hir>>) -> Option<Hir> {
    let v: Vec<Hir> = items.into_iter().flatten().collect();
    if v.is_empty() {
        None
    } else {
        Some(alt(v))
    }
}

/// Nodes of `h` as held in memory: a repetition counts its sub-expression once (unlike
/// [`weight`], which estimates the automaton the HIR becomes).
pub(crate) fn nodes(h: &Hir) -> u64 {
    use regex_syntax::hir::HirKind::*;
    match h.kind() {
        Empty | Look(_) => 1,
        Literal(l) => 1 + l.0.len() as u64 / 16,
        Class(c) => {
            1 + match c {
                regex_syntax::hir::Class::Unicode(u) => u.ranges().len() as u64 / 8,
                regex_syntax::hir::Class::Bytes(b) => b.ranges().len() as u64 / 8,
            }
        }
        Repetition(r) => 1 + nodes(&r.sub),
        Capture(c) => 1 + nodes(&c.sub),
        Concat(xs) | Alternation(xs) => xs.iter().fold(1u64, |acc, x| acc.saturating_add(nodes(x))),
    }
}

/// A rough size of a HIR (number of nodes, repetitions counted by their bound), used for the
/// schema size budget before the NFA is built.
pub(crate) fn weight(h: &Hir) -> u64 {
    use regex_syntax::hir::HirKind::*;
    match h.kind() {
        Empty | Look(_) => 1,
        Literal(l) => l.0.len() as u64,
        Class(_) => 2,
        Repetition(r) if counts(r) => weight(&r.sub).saturating_add(COUNTER_WEIGHT),
        Repetition(r) => {
            let k = u64::from(r.max.unwrap_or(r.min).max(1));
            k.saturating_mul(weight(&r.sub)).saturating_add(1)
        }
        Capture(c) => weight(&c.sub),
        Concat(xs) | Alternation(xs) => {
            xs.iter().fold(1u64, |acc, x| acc.saturating_add(weight(x)))
        }
    }
}

/// Repetitions whose bound (the maximum, or the minimum when there is none) is above this are
/// counted instead of copied, when they can be (see [`counts`]).
pub(crate) const COUNT_FROM: u32 = 32;

/// Repetitions of one JSON string character in any spelling (a string's length bounds) are
/// counted from a smaller bound: each copy of that character is a few dozen states, so even
/// `maxLength: 20` is cheaper to build and to step through as a counter (measured on the
/// MaskBench sample: first mask p50 0.76 → 0.67 ms, mask p99 113 → 101 µs).
pub(crate) const CHAR_COUNT_FROM: u32 = 2;

/// Whether `h` is [`crate::automata::spell::any_char`]'s HIR (compared with one copy kept per
/// thread: the check runs for every repetition weighed or built).
pub(crate) fn is_any_char(h: &Hir) -> bool {
    thread_local! {
        static ANY: Hir = crate::automata::spell::any_char();
    }
    matches!(h.kind(), HirKind::Alternation(xs) if xs.len() == 2) && ANY.with(|a| a == h)
}

/// The weight of a counter's four marker states and loop.
pub(crate) const COUNTER_WEIGHT: u64 = 8;

/// Whether the repetition compiles to a counter (one copy of its body, the count kept by the
/// lazy DFA) instead of a copy per count: its bound is large, its body never matches the empty
/// string (so a count always means bytes read), and its body holds no counter (counters do
/// not nest; the innermost large repetition is the one counted).
pub(crate) fn counts(r: &Repetition) -> bool {
    counts_unless_inner(r) && !has_counter(&r.sub)
}

/// [`counts`] but for its body's own counters (the caller knows whether it has any): each
/// level of nested repetitions then looks at the levels below once, not twice.
fn counts_unless_inner(r: &Repetition) -> bool {
    let bound = r.max.unwrap_or(r.min);
    counting()
        && (bound > COUNT_FROM || (bound > CHAR_COUNT_FROM && is_any_char(&r.sub)))
        && r.max.is_none_or(|m| r.min <= m)
        && r.sub.properties().minimum_len().is_some_and(|n| n > 0)
}

#[cfg(test)]
thread_local! {
    static COPIES_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether large repetitions may become counters: always, except inside [`with_copies`].
pub(crate) fn counting() -> bool {
    #[cfg(test)]
    if COPIES_ONLY.with(std::cell::Cell::get) {
        return false;
    }
    true
}

/// Runs `f` with every repetition copied, as before counters existed: the differential tests'
/// oracle. Applies to weights and NFAs built on this thread during `f`.
#[cfg(test)]
pub(crate) fn with_copies<T>(f: impl FnOnce() -> T) -> T {
    crate::budget::with_setting(&COPIES_ONLY, true, f)
}

/// Whether some repetition inside `h` compiles to a counter.
pub(crate) fn has_counter(h: &Hir) -> bool {
    use regex_syntax::hir::HirKind::*;
    match h.kind() {
        Empty | Look(_) | Literal(_) | Class(_) => false,
        // (the body looked at once: `counts` would look at it again, 2^depth calls in all)
        Repetition(r) => has_counter(&r.sub) || counts_unless_inner(r),
        Capture(c) => has_counter(&c.sub),
        Concat(xs) | Alternation(xs) => xs.iter().any(has_counter),
    }
}

/// Digits of a positional system, for fixed-width range construction.
#[derive(Clone, Copy)]
pub(crate) enum Base {
    Decimal,
    /// Hexadecimal, either case (`\uXXXX` escapes).
    HexAnyCase,
}

impl Base {
    fn max(self) -> u8 {
        match self {
            Base::Decimal => 9,
            Base::HexAnyCase => 15,
        }
    }

    fn range(self, lo: u8, hi: u8) -> Hir {
        match self {
            Base::Decimal => digits(lo, hi),
            Base::HexAnyCase => {
                let mut r: Vec<(char, char)> = Vec::new();
                if lo <= 9 {
                    r.push(((b'0' + lo) as char, (b'0' + hi.min(9)) as char));
                }
                if hi >= 10 {
                    let a = lo.max(10) - 10;
                    let b = hi - 10;
                    r.push(((b'a' + a) as char, (b'a' + b) as char));
                    r.push(((b'A' + a) as char, (b'A' + b) as char));
                }
                class(&r)
            }
        }
    }
}

/// Strings of `lo.len()` digits whose value lies in `lo..=hi` (same length, `lo <= hi`).
pub(crate) fn fixed_width(lo: &[u8], hi: &[u8], base: Base) -> Hir {
    debug_assert_eq!(lo.len(), hi.len());
    if lo.is_empty() {
        return Hir::empty();
    }
    let n = lo.len() - 1;
    let any = |k: usize| rep(base.range(0, base.max()), k as u32, Some(k as u32));
    let (a, b) = (lo[0], hi[0]);
    if a == b {
        return concat(vec![
            base.range(a, a),
            fixed_width(&lo[1..], &hi[1..], base),
        ]);
    }
    let lo_min = lo[1..].iter().all(|&d| d == 0);
    let hi_max = hi[1..].iter().all(|&d| d == base.max());
    if lo_min && hi_max {
        return concat(vec![base.range(a, b), any(n)]);
    }
    let mut parts = Vec::new();
    let top = vec![base.max(); n];
    let bottom = vec![0u8; n];
    if lo_min {
        parts.push(concat(vec![base.range(a, b - 1), any(n)]));
    } else {
        parts.push(concat(vec![
            base.range(a, a),
            fixed_width(&lo[1..], &top, base),
        ]));
        if a + 1 < b {
            parts.push(concat(vec![base.range(a + 1, b - 1), any(n)]));
        }
    }
    if hi_max {
        parts.push(concat(vec![base.range(b, b), any(n)]));
    } else {
        parts.push(concat(vec![
            base.range(b, b),
            fixed_width(&bottom, &hi[1..], base),
        ]));
    }
    alt(parts)
}
