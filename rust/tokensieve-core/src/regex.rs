//! The regex front end: a pattern parsed with `regex-syntax` into a HIR, with every construct
//! the engine cannot honour rejected with its offset, and the options of a regex grammar. The
//! automaton itself is `crate::automata::dfa`'s lazy DFA ([`LazyDfa::new`] parses and builds).
//!
//! The language is the *full match* of the pattern (as Python's `re.fullmatch`): the automaton
//! starts anchored and a state is accepting when the NFA can reach its match state at the end
//! of the input. `\A`/`^` and `\z`/`$` are honoured at the two ends; multi-line anchors and word
//! boundaries need context the engine does not track and are rejected with their offset, like
//! look-around and backreferences (which `regex-syntax` itself rejects).
//!
//! Because the NFA is built over UTF-8 bytes, `.` or `[^"]` matches whole UTF-8 characters: a
//! state reached in the middle of a multi-byte character only continues with its tail bytes.
//!
//! ```
//! use tokensieve_core::automata::dfa::{LazyDfa, DEAD};
//! use tokensieve_core::regex::RegexOptions;
//! let dfa = LazyDfa::new("[0-9]+", &RegexOptions::default()).unwrap();
//! let s = dfa.walk(dfa.start(), b"42").unwrap();
//! assert!(dfa.is_accepting(s));
//! assert_eq!(dfa.walk(dfa.start(), b"4x").unwrap(), DEAD);
//! ```

use regex_syntax::ast;
use regex_syntax::hir::{self, Hir, HirKind};

use crate::automata::dfa::LazyDfa;
pub use crate::automata::dfa::RegexOptions;
use crate::error::{Error, Result};

fn regex_error(offset: usize, message: impl Into<String>) -> Error {
    Error::Regex {
        offset,
        message: message.into(),
    }
}

/// Parse a pattern into HIR, turning every unsupported construct into an error with its offset.
/// Anchors may stand anywhere (a JSON Schema `pattern` is searched, and its anchors are read
/// by the schema compiler); a regex grammar takes [`parse_full_match`].
pub fn parse(pattern: &str, nest_limit: u32) -> Result<Hir> {
    parse_ast(pattern, nest_limit).map(|(_, hir)| hir)
}

/// [`parse`] for a regex grammar (full-match semantics): also refuses an anchor inside the
/// pattern (`a$b`, `(a$|b)c`, `x^y`) with its offset. `^`/`\A` are accepted only where
/// nothing can have been read before them and `$`/`\z` only where nothing can follow them
/// (`^abc$`, `(?:^a|^b)$`, `(^a)?b`); an anchor inside a repetition that may run more than
/// once is inside the pattern.
pub fn parse_full_match(pattern: &str, nest_limit: u32) -> Result<Hir> {
    let (ast, hir) = parse_ast(pattern, nest_limit)?;
    let mut anchors = Anchors {
        zero: Default::default(),
    };
    if let Some(a) = anchors.misplaced(&ast, true, true) {
        let (start, end) = (a.span.start.offset, a.span.end.offset);
        let text = pattern.get(start..end).unwrap_or("an anchor");
        let (kind, side) = match a.kind {
            ast::AssertionKind::StartLine | ast::AssertionKind::StartText => ("start", "before it"),
            _ => ("end", "after it"),
        };
        return Err(regex_error(
            start,
            format!(
                "the {kind} anchor {text} stands inside the pattern (something can come {side}): \
                 ^, \\A, $ and \\z are supported only at the ends of the whole text"
            ),
        ));
    }
    Ok(hir)
}

/// Where anchors may stand in a pattern's AST: [`Anchors::misplaced`] walks it top down,
/// asking of the items of each concatenation whether they are zero width (match only the empty
/// string); the answers are kept per node, so that the walk stays linear in the pattern.
struct Anchors {
    zero: rustc_hash::FxHashMap<*const ast::Ast, bool>,
}

impl Anchors {
    /// Whether `a` matches only the empty string at any position: empty, flags, anchors, and
    /// groups, alternations, concatenations and repetitions of those.
    fn zero_width(&mut self, a: &ast::Ast) -> bool {
        use ast::AssertionKind::*;
        if let Some(&z) = self.zero.get(&(a as *const ast::Ast)) {
            return z;
        }
        let z = match a {
            ast::Ast::Empty(_) | ast::Ast::Flags(_) => true,
            ast::Ast::Assertion(x) => matches!(x.kind, StartLine | StartText | EndLine | EndText),
            ast::Ast::Group(g) => self.zero_width(&g.ast),
            ast::Ast::Repetition(r) => self.zero_width(&r.ast),
            ast::Ast::Concat(c) => c.asts.iter().all(|x| self.zero_width(x)),
            ast::Ast::Alternation(x) => x.asts.iter().all(|x| self.zero_width(x)),
            _ => false,
        };
        self.zero.insert(a as *const ast::Ast, z);
        z
    }

    /// The first start anchor (`^`, `\A`) in `a` that text may precede, or end anchor (`$`,
    /// `\z`) that text may follow. `at_start`: nothing can be read before `a`; `at_end`:
    /// nothing after. Multi-line anchors are refused before this (by [`parse`]), so `^`/`$`
    /// here are `\A`/`\z`.
    fn misplaced<'a>(
        &mut self,
        a: &'a ast::Ast,
        at_start: bool,
        at_end: bool,
    ) -> Option<&'a ast::Assertion> {
        use ast::AssertionKind::*;
        match a {
            ast::Ast::Assertion(x) => match x.kind {
                StartLine | StartText if !at_start => Some(x),
                EndLine | EndText if !at_end => Some(x),
                _ => None,
            },
            ast::Ast::Group(g) => self.misplaced(&g.ast, at_start, at_end),
            ast::Ast::Alternation(x) => x
                .asts
                .iter()
                .find_map(|b| self.misplaced(b, at_start, at_end)),
            ast::Ast::Concat(c) => {
                // the items before the first one that reads text, and after the last one
                let zero: Vec<bool> = c.asts.iter().map(|x| self.zero_width(x)).collect();
                let first = zero.iter().position(|z| !z).unwrap_or(zero.len());
                let last = zero.iter().rposition(|z| !z);
                c.asts.iter().enumerate().find_map(|(i, x)| {
                    let start = at_start && i <= first;
                    let end = at_end && last.is_none_or(|l| i >= l);
                    self.misplaced(x, start, end)
                })
            }
            ast::Ast::Repetition(r) => {
                use ast::{RepetitionKind as K, RepetitionRange as R};
                let at_most_once = match &r.op.kind {
                    K::ZeroOrOne => true,
                    K::Range(R::Exactly(n)) => *n <= 1,
                    K::Range(R::Bounded(_, n)) => *n <= 1,
                    K::ZeroOrMore | K::OneOrMore | K::Range(R::AtLeast(_)) => false,
                };
                // a later round follows an earlier one, which reads text unless the body cannot
                if at_most_once || self.zero_width(&r.ast) {
                    self.misplaced(&r.ast, at_start, at_end)
                } else {
                    self.misplaced(&r.ast, false, false)
                }
            }
            _ => None,
        }
    }
}

/// The AST and HIR of a pattern, with every unsupported construct refused (see [`parse`]).
fn parse_ast(pattern: &str, nest_limit: u32) -> Result<(ast::Ast, Hir)> {
    let ast = ast::parse::ParserBuilder::new()
        .nest_limit(nest_limit)
        .build()
        .parse(pattern)
        .map_err(|e| {
            let what = match e.kind() {
                ast::ErrorKind::UnsupportedLookAround => {
                    "look-around ((?=...), (?!...), (?<=...), (?<!...)) is not supported by a \
                     regular-language engine"
                        .to_string()
                }
                ast::ErrorKind::UnsupportedBackreference => {
                    "backreferences (\\1, \\k<name>) are not supported by a regular-language engine"
                        .to_string()
                }
                other => other.to_string(),
            };
            regex_error(e.span().start.offset, what)
        })?;
    let hir = hir::translate::TranslatorBuilder::new()
        .unicode(true)
        .utf8(true)
        .build()
        .translate(pattern, &ast)
        .map_err(|e| regex_error(e.span().start.offset, e.kind().to_string()))?;
    if let Some(look) = first_unsupported_look(&hir) {
        let offset = find_assertion_offset(&ast, look).unwrap_or(0);
        return Err(regex_error(
            offset,
            format!(
                "the assertion {} is not supported: only \\A, ^, \\z and $ at the ends of the \
                 whole text are (multi-line anchors and word boundaries need context the token \
                 index does not track)",
                look_name(look)
            ),
        ));
    }
    Ok((ast, hir))
}

fn look_name(look: hir::Look) -> &'static str {
    use hir::Look::*;
    match look {
        Start => "\\A",
        End => "\\z",
        StartLF | StartCRLF => "multi-line ^",
        EndLF | EndCRLF => "multi-line $",
        WordAscii | WordUnicode => "\\b",
        WordAsciiNegate | WordUnicodeNegate => "\\B",
        _ => "word-boundary",
    }
}

fn first_unsupported_look(hir: &Hir) -> Option<hir::Look> {
    match hir.kind() {
        HirKind::Look(l) => match l {
            hir::Look::Start | hir::Look::End => None,
            other => Some(*other),
        },
        HirKind::Repetition(r) => first_unsupported_look(&r.sub),
        HirKind::Capture(c) => first_unsupported_look(&c.sub),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => {
            xs.iter().find_map(first_unsupported_look)
        }
        _ => None,
    }
}

fn find_assertion_offset(ast: &ast::Ast, look: hir::Look) -> Option<usize> {
    let line = matches!(
        look,
        hir::Look::StartLF | hir::Look::StartCRLF | hir::Look::EndLF | hir::Look::EndCRLF
    );
    fn walk(a: &ast::Ast, line: bool) -> Option<usize> {
        match a {
            ast::Ast::Assertion(x) => {
                let is_line = matches!(
                    x.kind,
                    ast::AssertionKind::StartLine | ast::AssertionKind::EndLine
                );
                let is_text = matches!(
                    x.kind,
                    ast::AssertionKind::StartText | ast::AssertionKind::EndText
                );
                if (line && is_line) || (!line && !is_line && !is_text) {
                    Some(x.span.start.offset)
                } else {
                    None
                }
            }
            ast::Ast::Repetition(r) => walk(&r.ast, line),
            ast::Ast::Group(g) => walk(&g.ast, line),
            ast::Ast::Alternation(x) => x.asts.iter().find_map(|a| walk(a, line)),
            ast::Ast::Concat(x) => x.asts.iter().find_map(|a| walk(a, line)),
            _ => None,
        }
    }
    walk(ast, line)
}

impl LazyDfa {
    /// Compile `pattern` (full-match semantics) into a lazy DFA.
    pub fn new(pattern: &str, opts: &RegexOptions) -> Result<LazyDfa> {
        let hir = parse_full_match(pattern, opts.nest_limit)?;
        Self::from_hir(pattern, &hir, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::dfa::DEAD;

    fn full(pattern: &str, s: &str) -> bool {
        let d = LazyDfa::new(pattern, &RegexOptions::default()).unwrap();
        let st = d.walk(d.start(), s.as_bytes()).unwrap();
        st != DEAD && d.is_accepting(st)
    }

    #[test]
    fn basic_full_match() {
        assert!(full("[0-9]+", "123"));
        assert!(!full("[0-9]+", ""));
        assert!(!full("[0-9]+", "12a"));
        assert!(full("a|bc", "bc"));
        assert!(full("", ""));
        assert!(full("^ab$", "ab"));
        assert!(full("x*", ""));
    }

    #[test]
    fn anchors_only_at_the_ends() {
        for (pattern, offset) in [
            ("a$b", 1),
            ("a^b", 1),
            ("(?:a^)?b", 4),
            ("(a$|b)c", 2),
            ("a\\Ab", 1),
            ("a\\zb", 1),
            ("(?:^a)+", 3),
            ("(?:a$){2}", 4),
            ("a?^b", 2),
            ("x|a$b", 3),
            ("(?i)a^", 5),
            ("$^a", 0),
        ] {
            let e = LazyDfa::new(pattern, &RegexOptions::default()).unwrap_err();
            assert!(
                matches!(&e, Error::Regex { offset: o, message } if *o == offset
                    && message.contains("inside the pattern")),
                "{pattern}: {e}"
            );
        }
        for (pattern, yes, no) in [
            ("^ab$", &["ab"][..], &["a", "abab"][..]),
            ("\\Aa+\\z", &["a", "aa"], &[""]),
            ("(?:^a|^b)$", &["a", "b"], &["ab"]),
            ("(^a)?b$", &["ab", "b"], &["a"]),
            ("a|^b$", &["a", "b"], &["ab"]),
            ("^^a$$", &["a"], &["aa"]),
            ("(?:^)*a(?:$){2,}", &["a"], &["aa"]),
            ("(?i)^a(?-i)$", &["A"], &["b"]),
            ("$^", &[""], &["a"]),
        ] {
            for s in yes {
                assert!(full(pattern, s), "{pattern} {s:?}");
            }
            for s in no {
                assert!(!full(pattern, s), "{pattern} {s:?}");
            }
        }
        // a JSON Schema pattern is searched: its anchors may stand anywhere
        assert!(parse("(?:^|,)a$", 250).is_ok());
    }

    #[test]
    fn utf8_dot_matches_whole_chars() {
        let d = LazyDfa::new(".", &RegexOptions::default()).unwrap();
        let e = "é".as_bytes();
        let mid = d.walk(d.start(), &e[..1]).unwrap();
        assert_ne!(mid, DEAD);
        assert!(!d.is_accepting(mid));
        assert!(d.is_accepting(d.walk(mid, &e[1..]).unwrap()));
        // A lone continuation byte is never valid.
        assert_eq!(d.walk(d.start(), &[0x80]).unwrap(), DEAD);
        assert!(!full(".", "\n"));
    }

    #[test]
    fn dead_states_are_pruned() {
        let hir = parse("a$b|c", 250).unwrap();
        let d = LazyDfa::from_hir("a$b|c", &hir, &RegexOptions::default()).unwrap();
        assert_eq!(d.walk(d.start(), b"a").unwrap(), DEAD);
    }

    #[test]
    fn unsupported_constructs_name_their_offset() {
        let e = LazyDfa::new("ab(?=c)", &RegexOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Regex { offset: 2, .. }), "{e}");
        assert!(e.to_string().contains("look-around"));
        let e = LazyDfa::new("(a)\\1", &RegexOptions::default()).unwrap_err();
        assert!(e.to_string().contains("backreference"), "{e}");
        let e = LazyDfa::new("ab\\bc", &RegexOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Regex { offset: 2, .. }), "{e}");
        let e = LazyDfa::new("(?m)a^b", &RegexOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Regex { offset: 5, .. }), "{e}");
    }

    #[test]
    fn state_budget_is_enforced() {
        let opts = RegexOptions {
            max_states: 10,
            ..Default::default()
        };
        let d = LazyDfa::new("[a-z]{0,40}", &opts).unwrap();
        let err = d
            .walk(d.start(), "abcdefghijklmnopqrstuvwxyz".as_bytes())
            .unwrap_err();
        assert!(matches!(err, Error::Budget(_)));
    }

    #[test]
    fn nfa_budget_is_enforced() {
        let opts = RegexOptions {
            max_nfa_bytes: 1 << 16,
            ..Default::default()
        };
        // Repetitions of up to 32 are copied (larger ones are counters): 27,000 copies.
        assert!(matches!(
            LazyDfa::new("(?:(?:[a-z]{30}){30}){30}", &opts),
            Err(Error::Budget(_))
        ));
    }

    #[test]
    fn large_repetitions_are_counted_exactly() {
        let opts = RegexOptions {
            max_nfa_bytes: 1 << 16,
            ..Default::default()
        };
        // the inner repetition is a counter, the outer one copies it 100 times
        let d = LazyDfa::new("(?:[a-z]{100}){100}", &opts).unwrap();
        let s = d.walk(d.start(), &[b'q'; 9_999]).unwrap();
        assert!(!d.is_accepting(s));
        let s = d.walk(s, b"q").unwrap();
        assert!(d.is_accepting(s));
        assert_eq!(d.walk(s, b"q").unwrap(), crate::automata::dfa::DEAD);
        // bounds far past what copies could hold
        let d = LazyDfa::new("x[0-9]{3,4000000000}y", &opts).unwrap();
        let s = d.walk(d.start(), b"x12").unwrap();
        assert_eq!(d.walk(s, b"y").unwrap(), crate::automata::dfa::DEAD);
        let s = d.walk(s, b"3").unwrap();
        assert!(d.is_accepting(d.walk(s, b"y").unwrap()));
    }
}
