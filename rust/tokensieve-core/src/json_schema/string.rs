//! JSON string constraints: ECMA-262 patterns, formats and length measures over decoded
//! strings (the character spellings they are encoded with live in `crate::automata::spell`).

use regex_syntax::hir::{Hir, HirKind, Look};

use crate::automata::hir::{alt, concat, rep, star};
use crate::automata::spell::dot_all;

fn strip_capture(h: &Hir) -> &Hir {
    match h.kind() {
        HirKind::Capture(c) => strip_capture(&c.sub),
        _ => h,
    }
}

/// The decoded-string language of an ECMA `pattern` (unanchored search semantics): each
/// top-level alternative gets `.*` on the sides where it is not anchored.
pub(crate) fn search_form(h: &Hir) -> Hir {
    let top = strip_capture(h);
    let branches: Vec<&Hir> = match top.kind() {
        HirKind::Alternation(xs) => xs.iter().collect(),
        _ => vec![top],
    };
    let mut out = Vec::new();
    for b in branches {
        let b = strip_capture(b);
        let mut items: Vec<Hir> = match b.kind() {
            HirKind::Concat(xs) => xs.clone(),
            _ => vec![b.clone()],
        };
        let mut start = false;
        while matches!(
            items.first().map(|x| x.kind()),
            Some(HirKind::Look(Look::Start))
        ) {
            items.remove(0);
            start = true;
        }
        let mut end = false;
        while matches!(
            items.last().map(|x| x.kind()),
            Some(HirKind::Look(Look::End))
        ) {
            items.pop();
            end = true;
        }
        if !start {
            items.insert(0, star(dot_all()));
        }
        if !end {
            items.push(star(dot_all()));
        }
        out.push(concat(items));
    }
    alt(out)
}

/// The asserted formats whose language is exactly their definition's (the others —
/// `hostname`, `email`, and `time`/`date-time` with their leap second — approximate it, so their
/// complement would admit strings the definition calls formatted).
pub(crate) const EXACT_FORMATS: &[&str] = &[
    "date",
    "duration",
    "uuid",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
];

/// Whether `h` holds a look-around assertion (`^`, `$`, word boundaries) anywhere.
pub(crate) fn has_look(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Look(_) => true,
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) => false,
        HirKind::Repetition(r) => has_look(&r.sub),
        HirKind::Capture(c) => has_look(&c.sub),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => xs.iter().any(has_look),
    }
}

/// The decoded-string language of a pattern searched for in the string, with `^` and `$`
/// standing anywhere in it (`(^a|b)c`, `^a$|^b$` after the parser lifted the common `^`,
/// `(?:^|/)foo$`): exact, without anchors. [`search_form`] covers the patterns anchored only at
/// the ends of their top-level alternatives; this is for the others.
///
/// A sub-pattern `h` is read in four contexts `(s, e)`: whether its match starts at the
/// beginning of the whole string, whether it ends at its end. `^` matches the empty string where
/// `s` holds, `$` where `e` holds; in a concatenation the position between two parts is the
/// beginning only when `s` holds and the left part matched nothing, the end only when `e`
/// holds and the right part matches nothing. So each part is kept as its non-empty strings per
/// context ([`Anchored::plus`]) and whether it matches the empty string per context. The
/// searched language is then `M(T,T) | .+M(F,T) | M(T,F).+ | .+M(F,F).+`.
pub(crate) fn anchored_search(h: &Hir) -> Result<Hir, String> {
    let a = Anchored::of(h, 0)?;
    let m = |s: bool, e: bool| {
        let mut v = vec![a.plus[s as usize][e as usize].clone()];
        if a.empty[s as usize][e as usize] {
            v.push(Hir::empty());
        }
        alt(v)
    };
    let some = || rep(dot_all(), 1, None);
    let out = alt(vec![
        m(true, true),
        concat(vec![some(), m(false, true)]),
        concat(vec![m(true, false), some()]),
        concat(vec![some(), m(false, false), some()]),
    ]);
    if hir_size(&out, 0) > MAX_ANCHORED_NODES {
        return Err(format!(
            "anchors inside the pattern make its language too large to spell (more than \
             {MAX_ANCHORED_NODES} parts); move `^`/`$` to the ends of the pattern"
        ));
    }
    Ok(out)
}

/// Most nodes the language of a pattern with inner anchors may have.
const MAX_ANCHORED_NODES: usize = 20_000;

fn hir_size(h: &Hir, acc: usize) -> usize {
    if acc > MAX_ANCHORED_NODES {
        return acc;
    }
    match h.kind() {
        HirKind::Repetition(r) => hir_size(&r.sub, acc + 1),
        HirKind::Capture(c) => hir_size(&c.sub, acc + 1),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => {
            xs.iter().fold(acc + 1, |n, x| hir_size(x, n))
        }
        _ => acc + 1,
    }
}

/// The non-empty strings of an anchor-free `h`.
fn non_empty(h: &Hir) -> Hir {
    if !nullable(h) {
        return h.clone();
    }
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Hir::fail(),
        HirKind::Literal(_) | HirKind::Class(_) => h.clone(),
        HirKind::Capture(c) => non_empty(&c.sub),
        HirKind::Alternation(xs) => alt(xs.iter().map(non_empty).collect()),
        HirKind::Concat(xs) => {
            // the first non-empty part is some part, the ones before it empty
            let mut alts = Vec::new();
            for i in 0..xs.len() {
                let mut v = vec![non_empty(&xs[i])];
                v.extend(xs[i + 1..].iter().cloned());
                alts.push(concat(v));
                if !nullable(&xs[i]) {
                    break;
                }
            }
            alt(alts)
        }
        // the body matches the empty string: copies may be dropped, the first non-empty one
        // is followed by at most max - 1 more
        HirKind::Repetition(r) if r.max == Some(0) => Hir::fail(),
        HirKind::Repetition(r) => concat(vec![
            non_empty(&r.sub),
            rep((*r.sub).clone(), 0, r.max.map(|m| m.saturating_sub(1))),
        ]),
    }
}

fn nullable(h: &Hir) -> bool {
    h.properties().minimum_len() == Some(0)
}

/// A sub-pattern in the four contexts of [`anchored_search`]: `plus[s][e]` its non-empty
/// strings, `empty[s][e]` whether it matches the empty string.
struct Anchored {
    plus: [[Hir; 2]; 2],
    empty: [[bool; 2]; 2],
}

impl Anchored {
    fn same(plus: Hir, empty: bool) -> Anchored {
        Anchored {
            plus: [[plus.clone(), plus.clone()], [plus.clone(), plus]],
            empty: [[empty; 2]; 2],
        }
    }

    fn empty_only(f: impl Fn(bool, bool) -> bool) -> Anchored {
        Anchored {
            plus: std::array::from_fn(|_| std::array::from_fn(|_| Hir::fail())),
            empty: std::array::from_fn(|s| std::array::from_fn(|e| f(s == 1, e == 1))),
        }
    }

    fn of(h: &Hir, depth: u32) -> Result<Anchored, String> {
        if depth > 250 {
            return Err("the pattern nests too deeply".into());
        }
        if !has_look(h) {
            return Ok(Anchored::same(non_empty(h), nullable(h)));
        }
        Ok(match h.kind() {
            HirKind::Look(Look::Start) => Anchored::empty_only(|s, _| s),
            HirKind::Look(Look::End) => Anchored::empty_only(|_, e| e),
            HirKind::Look(_) => {
                return Err(
                    "word boundaries and line anchors are not supported in a pattern".into(),
                )
            }
            HirKind::Capture(c) => Anchored::of(&c.sub, depth + 1)?,
            HirKind::Alternation(xs) => {
                let parts = xs
                    .iter()
                    .map(|x| Anchored::of(x, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                Anchored {
                    plus: std::array::from_fn(|s| {
                        std::array::from_fn(|e| {
                            alt(parts.iter().map(|p| p.plus[s][e].clone()).collect())
                        })
                    }),
                    empty: std::array::from_fn(|s| {
                        std::array::from_fn(|e| parts.iter().any(|p| p.empty[s][e]))
                    }),
                }
            }
            HirKind::Concat(xs) => {
                let mut acc = Anchored::of(&xs[xs.len() - 1], depth + 1)?;
                for x in xs[..xs.len() - 1].iter().rev() {
                    acc = Anchored::concat(&Anchored::of(x, depth + 1)?, &acc);
                }
                acc
            }
            HirKind::Repetition(r) => {
                let body = Anchored::of(&r.sub, depth + 1)?;
                let opt = Anchored::optional(&body);
                let mut acc = match r.max {
                    None => Anchored::star(&body),
                    Some(max) => {
                        if max - r.min > 8 {
                            return Err(
                                "an anchor inside a repetition of more than 8 optional copies \
                                 is not supported"
                                    .into(),
                            );
                        }
                        let mut acc = Anchored::same(Hir::fail(), true);
                        for _ in r.min..max {
                            acc = Anchored::concat(&opt, &acc);
                        }
                        acc
                    }
                };
                if r.min > 8 {
                    return Err(
                        "an anchor inside a repetition of more than 8 copies is not supported"
                            .into(),
                    );
                }
                for _ in 0..r.min {
                    acc = Anchored::concat(&body, &acc);
                }
                acc
            }
            HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) => {
                unreachable!("no anchor in a leaf")
            }
        })
    }

    /// `a` then `b` (see [`anchored_search`] for the contexts of the position between them).
    fn concat(a: &Anchored, b: &Anchored) -> Anchored {
        let f = 0usize;
        Anchored {
            plus: std::array::from_fn(|s| {
                std::array::from_fn(|e| {
                    let mut v = Vec::new();
                    // a empty: the position between is the beginning when s, not the end
                    if a.empty[s][f] {
                        v.push(b.plus[s][e].clone());
                    }
                    // b empty: the position between is the end when e, not the beginning
                    if b.empty[f][e] {
                        v.push(a.plus[s][e].clone());
                    }
                    v.push(concat(vec![a.plus[s][f].clone(), b.plus[f][e].clone()]));
                    alt(v)
                })
            }),
            empty: std::array::from_fn(|s| std::array::from_fn(|e| a.empty[s][e] && b.empty[s][e])),
        }
    }

    /// `a` or nothing.
    fn optional(a: &Anchored) -> Anchored {
        Anchored {
            plus: a.plus.clone(),
            empty: [[true; 2]; 2],
        }
    }

    /// Any number of copies of `a`: the empty ones can be left out, so a non-empty string is
    /// one or more non-empty copies (only the first may start at the beginning, only the last
    /// end at the end).
    fn star(a: &Anchored) -> Anchored {
        let f = 0usize;
        Anchored {
            plus: std::array::from_fn(|s| {
                std::array::from_fn(|e| {
                    alt(vec![
                        a.plus[s][e].clone(),
                        concat(vec![
                            a.plus[s][f].clone(),
                            star(a.plus[f][f].clone()),
                            a.plus[f][e].clone(),
                        ]),
                    ])
                })
            }),
            empty: [[true; 2]; 2],
        }
    }
}

/// Translate ECMA-262 pattern syntax into `regex-syntax` syntax: `\d \w \s` and `.` take their
/// ECMA meanings (ASCII digits and word characters; ECMA white space and line terminators),
/// `\uXXXX` (and surrogate pairs of them), `\cX`, `\0`, `[\b]`; look-around and backreferences
/// are refused with a message.
pub(crate) fn translate_ecma(p: &str) -> Result<String, String> {
    const WS: &str = r"\t\n\x0B\x0C\r \xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";
    let cs: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut in_class = false;
    let hex_at = |i: usize, n: usize| -> Option<u32> {
        if i + n > cs.len() {
            return None;
        }
        let s: String = cs[i..i + n].iter().collect();
        if s.chars().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(&s, 16).ok()
        } else {
            None
        }
    };
    while i < cs.len() {
        let c = cs[i];
        match c {
            '\\' => {
                let Some(&n) = cs.get(i + 1) else {
                    return Err("the pattern ends with a lone backslash".into());
                };
                i += 2;
                let class_text = |inner: &str, neg: bool| -> String {
                    match (in_class, neg) {
                        (true, false) => inner.to_string(),
                        (_, true) => format!("[^{inner}]"),
                        (false, false) => format!("[{inner}]"),
                    }
                };
                match n {
                    'd' => out.push_str(&class_text("0-9", false)),
                    'D' => out.push_str(&class_text("0-9", true)),
                    'w' => out.push_str(&class_text("A-Za-z0-9_", false)),
                    'W' => out.push_str(&class_text("A-Za-z0-9_", true)),
                    's' => out.push_str(&class_text(WS, false)),
                    'S' => out.push_str(&class_text(WS, true)),
                    'b' if in_class => out.push_str(r"\x08"),
                    'b' | 'B' => {
                        return Err("word boundaries (\\b, \\B) are not supported".into());
                    }
                    '1'..='9' | 'k' => {
                        return Err(
                            "backreferences are not supported by a regular-language engine".into(),
                        );
                    }
                    '0' => out.push_str(r"\x00"),
                    'c' => match cs.get(i) {
                        Some(&l) if l.is_ascii_alphabetic() => {
                            out.push_str(&format!("\\x{{{:X}}}", (l as u32) % 32));
                            i += 1;
                        }
                        _ => return Err("\\c must be followed by a letter".into()),
                    },
                    'u' => {
                        let (cp, len) = if cs.get(i) == Some(&'{') {
                            let end = cs[i..]
                                .iter()
                                .position(|&x| x == '}')
                                .ok_or("unterminated \\u{...}")?;
                            let s: String = cs[i + 1..i + end].iter().collect();
                            (
                                u32::from_str_radix(&s, 16).map_err(|_| "bad \\u{...} escape")?,
                                end + 1,
                            )
                        } else {
                            (hex_at(i, 4).ok_or("\\u needs four hex digits")?, 4)
                        };
                        i += len;
                        let mut cp = cp;
                        if (0xD800..0xDC00).contains(&cp)
                            && cs.get(i) == Some(&'\\')
                            && cs.get(i + 1) == Some(&'u')
                        {
                            if let Some(lo) = hex_at(i + 2, 4) {
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                    i += 6;
                                }
                            }
                        }
                        if (0xD800..0xE000).contains(&cp) {
                            return Err("a lone surrogate \\u escape is not a character".into());
                        }
                        out.push_str(&format!("\\x{{{cp:X}}}"));
                    }
                    'x' => {
                        let v = hex_at(i, 2).ok_or("\\x needs two hex digits")?;
                        i += 2;
                        out.push_str(&format!("\\x{{{v:X}}}"));
                    }
                    't' | 'n' | 'r' | 'f' | 'v' => {
                        let v = match n {
                            't' => 9,
                            'n' => 10,
                            'r' => 13,
                            'f' => 12,
                            _ => 11,
                        };
                        out.push_str(&format!("\\x{{{v:X}}}"));
                    }
                    'p' | 'P' => {
                        // Unicode property escapes (with the u flag): same syntax.
                        out.push('\\');
                        out.push(n);
                    }
                    c if c.is_ascii_alphanumeric() => {
                        return Err(format!("unknown escape \\{c}"));
                    }
                    c => out.push_str(&format!("\\x{{{:X}}}", c as u32)),
                }
                continue;
            }
            '[' if !in_class => {
                if cs.get(i + 1) == Some(&'^') && cs.get(i + 2) == Some(&']') {
                    out.push_str(r"[\x00-\x{10FFFF}]");
                    i += 3;
                    continue;
                }
                if cs.get(i + 1) == Some(&']') {
                    out.push_str(r"[^\x00-\x{10FFFF}]");
                    i += 2;
                    continue;
                }
                in_class = true;
                out.push('[');
                if cs.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                // A leading ']' is literal in regex-syntax but ends the class in ECMA: handled
                // above for the empty class; otherwise fine.
            }
            '[' => out.push_str(r"\["),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '&' | '~' | '-' if in_class && cs.get(i + 1) == Some(&c) => {
                // regex-syntax set operators (&&, ~~, --) are plain characters in ECMA
                out.push_str(&format!("\\x{{{:X}}}", c as u32));
            }
            '.' if !in_class => out.push_str(r"[^\n\r\x{2028}\x{2029}]"),
            '(' if !in_class && cs.get(i + 1) == Some(&'?') => {
                let next = cs.get(i + 2).copied();
                let next2 = cs.get(i + 3).copied();
                match (next, next2) {
                    (Some('='), _)
                    | (Some('!'), _)
                    | (Some('<'), Some('='))
                    | (Some('<'), Some('!')) => {
                        return Err("look-around ((?=...), (?!...), (?<=...), (?<!...)) is \
                                    supported only as look-aheads at the very start of a \
                                    string's pattern (`^(?!...)`, `^(?=...)`, before the rest of \
                                    a pattern with no top-level `|`)"
                            .into())
                    }
                    (Some(':'), _) | (Some('<'), _) => out.push('('),
                    _ => return Err("unsupported group syntax (?...)".into()),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// Character-length bounds (min, max) of a decoded-string HIR.
pub(crate) fn char_len(h: &Hir) -> (u64, Option<u64>) {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => (0, Some(0)),
        HirKind::Literal(l) => {
            let n = String::from_utf8_lossy(&l.0).chars().count() as u64;
            (n, Some(n))
        }
        HirKind::Class(_) => (1, Some(1)),
        HirKind::Repetition(r) => {
            let (a, b) = char_len(&r.sub);
            let min = a.saturating_mul(u64::from(r.min));
            let max = match (b, r.max) {
                (Some(0), _) => Some(0),
                (Some(b), Some(m)) => Some(b.saturating_mul(u64::from(m))),
                _ => None,
            };
            (min, max)
        }
        HirKind::Capture(c) => char_len(&c.sub),
        HirKind::Concat(xs) => xs.iter().fold((0, Some(0)), |(a, b), x| {
            let (c, d) = char_len(x);
            (a + c, b.zip(d).map(|(b, d)| b + d))
        }),
        HirKind::Alternation(xs) => {
            let v: Vec<_> = xs.iter().map(char_len).collect();
            let min = v.iter().map(|x| x.0).min().unwrap_or(0);
            let max = v.iter().try_fold(0u64, |m, x| x.1.map(|b| m.max(b)));
            (min, max)
        }
    }
}

/// A format's entry in `cache`, made by `make` from the format's regex the first time it is
/// asked for (made outside the lock: two threads may both make it, and the second one's is
/// kept); `None` for a format `format_regex` does not know.
fn kept_per_format<T: Clone>(
    cache: &'static PerFormat<T>,
    name: &str,
    make: impl FnOnce(&'static str) -> Option<T>,
) -> Option<T> {
    let re = format_regex(name)?;
    let cache = cache.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(re) {
        return Some(v.clone());
    }
    let v = make(re)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(re, v.clone());
    Some(v)
}

type PerFormat<T> = std::sync::OnceLock<std::sync::Mutex<rustc_hash::FxHashMap<&'static str, T>>>;

/// The decoded-string language of a known format ([`format_regex`], parsed once per process:
/// a format recurs across schemas, and parsing `uri` costs more than the rest of a small
/// schema).
pub(crate) fn format_hir(name: &str) -> Option<Hir> {
    static PARSED: PerFormat<Hir> = PerFormat::new();
    kept_per_format(&PARSED, name, |re| {
        Some(crate::regex::parse(re, 250).expect("built-in format regex"))
    })
}

/// The JSON spelling ([`encode`]) of a known format's language, built once per process (for
/// a lone `uri` it is most of the schema walk).
pub(crate) fn format_spelled(name: &str) -> Option<Result<Hir, String>> {
    static SPELLED: PerFormat<Result<Hir, String>> = PerFormat::new();
    kept_per_format(&SPELLED, name, |_| {
        Some(crate::automata::spell::encode(&format_hir(name)?))
    })
}

/// Every format [`format_regex`] asserts (`formats="assert"`); others accept any string.
pub const ASSERTED_FORMATS: [&str; 11] = [
    "date",
    "time",
    "date-time",
    "duration",
    "uuid",
    "ipv4",
    "ipv6",
    "hostname",
    "email",
    "uri",
    "uri-reference",
];

/// Builds what the process keeps per asserted format, for every one of them: its language
/// (`format_hir`), its JSON spelling (`format_spelled`) and its minimal automaton, which a
/// format combined with a pattern or lengths is built from (`automata::strlang`'s
/// cache), ahead of the first schema that uses it ([`super::prepare`] runs it). Idempotent.
pub fn prepare_formats() {
    for f in ASSERTED_FORMATS {
        let Some(h) = format_hir(f) else { continue };
        let _ = format_spelled(f);
        let _ = crate::automata::strlang::combined_dfa(std::slice::from_ref(&h), &[]);
    }
}

/// The regex (decoded-string language, ASCII) of a format, if the format is asserted.
pub(crate) fn format_regex(name: &str) -> Option<&'static str> {
    Some(match name {
        "date" => DATE,
        "time" => TIME,
        "date-time" => DATE_TIME,
        "duration" => {
            // RFC 3339 appendix A: components come in contiguous runs (Y[M[D]], M[D], D;
            // H[M[S]], M[S], S), weeks alone.
            r"P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))"
        }
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "ipv4" => IPV4,
        "ipv6" => IPV6,
        "hostname" => HOSTNAME,
        "email" => EMAIL,
        "uri" => URI,
        "uri-reference" => URI_REF,
        _ => return None,
    })
}

const DATE: &str = r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
const TIME: &str = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const DATE_TIME: &str = r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const IPV4: &str = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
macro_rules! ipv6 {
    () => {
        concat!(
            r"(?:",
            r"(?:[0-9A-Fa-f]{1,4}:){6}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|::(?:[0-9A-Fa-f]{1,4}:){5}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:){4}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,1}[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:){3}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,2}[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:){2}(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,3}[0-9A-Fa-f]{1,4})?::[0-9A-Fa-f]{1,4}:(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,4}[0-9A-Fa-f]{1,4})?::(?:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4})?::[0-9A-Fa-f]{1,4}",
            r"|(?:(?:[0-9A-Fa-f]{1,4}:){0,6}[0-9A-Fa-f]{1,4})?::",
            r")"
        )
    };
}
const IPV6: &str = ipv6!();
const HOSTNAME: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
const EMAIL: &str = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*";
// RFC 3986, section 3 and appendix A, transcribed: every production is regular.
// pchar = unreserved / pct-encoded / sub-delims / ":" / "@"
macro_rules! pchar {
    () => {
        r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})"
    };
}
// authority = [ userinfo "@" ] host [ ":" port ]; host = IP-literal / IPv4address / reg-name
// (an IPv4 address is also a reg-name).
macro_rules! authority {
    () => {
        concat!(
            r"(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*@)?",
            r"(?:\[(?:",
            ipv6!(),
            r"|[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+)\]",
            r"|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*)",
            r"(?::[0-9]*)?"
        )
    };
}
// query / fragment = *( pchar / "/" / "?" )
macro_rules! tail {
    () => {
        concat!(
            r"(?:\?(?:",
            pchar!(),
            r"|[/?])*)?(?:#(?:",
            pchar!(),
            r"|[/?])*)?"
        )
    };
}
// URI = scheme ":" hier-part [ "?" query ] [ "#" fragment ]
macro_rules! uri {
    () => {
        concat!(
            r"[A-Za-z][A-Za-z0-9+.-]*:",
            // hier-part = "//" authority path-abempty / path-absolute / path-rootless / path-empty
            r"(?://",
            authority!(),
            r"(?:/",
            pchar!(),
            r"*)*|/(?:",
            pchar!(),
            r"+(?:/",
            pchar!(),
            r"*)*)?|",
            pchar!(),
            r"+(?:/",
            pchar!(),
            r"*)*|)",
            tail!()
        )
    };
}
const URI: &str = uri!();
const URI_REF: &str = concat!(
    r"(?:",
    uri!(),
    // relative-ref: "//" authority path-abempty / path-absolute / path-noscheme / path-empty
    r"|(?://",
    authority!(),
    r"(?:/",
    pchar!(),
    r"*)*|/(?:",
    pchar!(),
    r"+(?:/",
    pchar!(),
    r"*)*)?|(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|%[0-9A-Fa-f]{2})+(?:/",
    pchar!(),
    r"*)*|)",
    tail!(),
    r")"
);

#[cfg(test)]
mod tests {
    use super::super::test_util::Re;
    use super::*;
    use crate::automata::hir::lit;
    use crate::automata::spell::{any_char, encode, spell_str};

    fn json_content(h: &Hir) -> Re {
        Re::new(&concat(vec![lit("\""), h.clone(), lit("\"")]))
    }

    #[test]
    fn spellings_of_characters() {
        let r = json_content(&spell_str("a\"/é😀\n"));
        for ok in [
            r#""a\"/é😀\n""#,
            r#""\u0061\u0022\/\u00E9\ud83d\ude00\u000a""#,
            r#""a\"\u002Fé\uD83D\uDE00\n""#,
        ] {
            assert!(r.is_match(ok), "{ok}");
        }
        for bad in [r#""a"/é😀\n""#, "\"a\\\"/é😀\n\"", r#""A\"/é😀\n""#] {
            assert!(!r.is_match(bad), "{bad}");
        }
        let any = json_content(&star(any_char()));
        assert!(any.is_match(r#""x\\y\u12aB\b""#));
        assert!(!any.is_match(r#""\x""#));
        assert!(!any.is_match("\"\u{1}\""));
        assert!(!any.is_match(r#""\ud800""#));
    }

    fn pattern(p: &str) -> Re {
        let t = translate_ecma(p).unwrap();
        let h = crate::regex::parse(&t, 250).unwrap();
        json_content(&encode(&search_form(&h)).unwrap())
    }

    #[test]
    fn ecma_patterns() {
        let r = pattern(r"^\d{3}$");
        assert!(r.is_match(r#""123""#) && r.is_match(r#""\u0031\u00323""#));
        assert!(!r.is_match(r#""1234""#) && !r.is_match(r#""١٢٣""#));
        let r = pattern("b.");
        assert!(r.is_match(r#""abc""#) && !r.is_match(r#""ab\n""#) && !r.is_match(r#""ab""#));
        let r = pattern(r"^a|b$");
        assert!(r.is_match(r#""ax""#) && r.is_match(r#""xb""#) && !r.is_match(r#""xa""#));
        assert!(translate_ecma("(?=a)").is_err());
        assert!(translate_ecma(r"(a)\1").is_err());
        let r = pattern(r"^[\w-]+\/\x41$");
        assert!(r.is_match(r#""a-b/A""#) && !r.is_match(r#""a b/A""#));
    }

    use super::ASSERTED_FORMATS as FORMATS;

    /// The languages and spellings kept per process are those parsed and spelled afresh.
    #[test]
    fn kept_formats_are_fresh_ones() {
        for f in FORMATS {
            for _ in 0..2 {
                let fresh = crate::regex::parse(format_regex(f).unwrap(), 250).unwrap();
                assert_eq!(format_hir(f).unwrap(), fresh, "{f}");
                let spelled = format_spelled(f).unwrap().unwrap();
                assert_eq!(spelled, encode(&fresh).unwrap(), "{f}");
            }
        }
        assert!(format_hir("no-such-format").is_none());
        assert!(format_spelled("no-such-format").is_none());
    }

    /// What `prepare_formats` keeps can be built for every asserted format: a language, a
    /// spelling and a non-empty minimal DFA within the direct-DFA budget. Preparing twice is
    /// harmless.
    #[test]
    fn every_format_prepares() {
        prepare_formats();
        prepare_formats();
        for f in FORMATS {
            let h = format_hir(f).unwrap();
            assert!(format_spelled(f).unwrap().is_ok(), "{f}");
            let d = crate::automata::strlang::combined_dfa(std::slice::from_ref(&h), &[]);
            assert!(
                matches!(d, Ok(Some(_))),
                "{f}: {:?}",
                d.map(|d| d.is_some())
            );
        }
    }

    #[test]
    fn formats_compile() {
        for f in FORMATS {
            let h = crate::regex::parse(format_regex(f).unwrap(), 250).unwrap();
            encode(&h).unwrap();
        }
        let uri = Re::new(&crate::regex::parse(URI, 250).unwrap());
        for ok in [
            "http://example.com/a/b?x=1#f",
            "urn:isbn:0451450523",
            "mailto:a@b.c",
            "http://[2001:db8::7]/c=GB?objectClass?one",
            "ldap://[::ffff:1.2.3.4]:389/",
            "file:///etc/hosts",
            "tel:+1-816-555-1212",
            "http://a%20b.com/%7Efoo",
        ] {
            assert!(uri.is_match(ok), "{ok}");
        }
        for bad in [
            "a:]",
            "//foo.bar/?baz=qux#quux",
            "http://[1.2.3.4]/",
            "\\WINDOWS\\share",
            "http:// x",
            "1ab:c",
            ":x",
        ] {
            assert!(!uri.is_match(bad), "{bad}");
        }
        let uri_ref = Re::new(&crate::regex::parse(URI_REF, 250).unwrap());
        for ok in [
            "",
            "/abc",
            "abc/def",
            "//example.com/x",
            "?q",
            "#f",
            "http://a/b",
            "a:b",
        ] {
            assert!(uri_ref.is_match(ok), "{ok}");
        }
        for bad in ["\\WINDOWS\\filename", "#frag#ment", "a:]", "[x]"] {
            assert!(!uri_ref.is_match(bad), "{bad}");
        }
        let dur = Re::new(&crate::regex::parse(format_regex("duration").unwrap(), 250).unwrap());
        for ok in [
            "P1Y", "P1Y2M3D", "P2M3D", "P4D", "PT1H2M3S", "PT2M3S", "PT3S", "P1W", "P1DT1H",
        ] {
            assert!(dur.is_match(ok), "{ok}");
        }
        for bad in ["P1Y2D", "PT1H2S", "P", "PT", "P1W2D", "P1D2Y"] {
            assert!(!dur.is_match(bad), "{bad}");
        }
        let d = Re::new(&crate::regex::parse(DATE, 250).unwrap());
        assert!(d.is_match("2024-02-29") && !d.is_match("2023-02-29") && !d.is_match("2023-04-31"));
        assert!(d.is_match("2000-02-29") && !d.is_match("1900-02-29"));
        let v6 = Re::new(&crate::regex::parse(IPV6, 250).unwrap());
        for ok in [
            "::",
            "::1",
            "fe80::1:2",
            "1:2:3:4:5:6:7:8",
            "::ffff:1.2.3.4",
        ] {
            assert!(v6.is_match(ok), "{ok}");
        }
        assert!(!v6.is_match("1:2:3:4:5:6:7:8:9") && !v6.is_match("1::2::3"));
    }
}
