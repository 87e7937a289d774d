//! Lark grammars (the dialect llguidance documents) → a lexer and a parser over its symbols
//! (see `docs/grammars.md`, *Lark*).
//!
//! * `parse` — the text → rules, terminals and directives ([`parse::Ex`] trees).
//! * here — terminals (uppercase names) become regular byte languages: strings, `/regex/`s
//!   (Rust `regex` syntax, as llguidance reads them), ranges and other terminals, composed;
//!   every string or regex written inside a rule is a lexeme of its own, so is every terminal
//!   a rule names and every `%ignore`. They make one [`Lexer`]. The rules become an
//!   [`crate::ebnf`] grammar over the lexer's symbols (a lexeme is the byte class of its
//!   symbols), lowered like a GBNF grammar (left recursion, recursion on the stack). The
//!   `%ignore`d lexemes are the lexer's skipped ones: read wherever the parser allows some
//!   lexeme next (so never after the last one), not at the start unless
//!   `%llguidance {"allow_initial_skip": true}` says so, one at most in a row with
//!   `"ignore_once": true`.
//!
//! The automaton ([`crate::automata::dfa::LazyDfa::from_lexed`]) then runs the lexer beside
//! the parser: a lexeme ends only where the next byte continues no lexeme the parser allows
//! (greedy, without backtracking), and every lexeme ending there that the parser allows is
//! read (a keyword that is also an identifier is both, the parser keeps the readings it can).

mod param;
mod parse;

use std::sync::Arc;

use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, Hir};
use rustc_hash::FxHashMap;

use crate::atoms::AtomList;
use crate::automata::bytedfa::ByteDfa;
use crate::automata::expr::Expr;
use crate::automata::lexer::{LexLang, LexemeSpec, Lexer, SkipPolicy, Sym};
use crate::ebnf::parse::{Node, RuleText};
use crate::ebnf::{grammar_error, EbnfOptions, Pos};
use crate::error::{Error, Result};
use parse::{Def, Ex};

/// The options of a Lark grammar that change its language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LarkOptions {
    /// The rule the output must match (default `start`).
    pub start: String,
    /// Most rule calls open at once (see [`EbnfOptions::max_stack_depth`]).
    pub max_stack_depth: u32,
}

impl Default for LarkOptions {
    fn default() -> Self {
        LarkOptions {
            start: "start".into(),
            max_stack_depth: crate::ebnf::DEFAULT_MAX_STACK_DEPTH,
        }
    }
}

impl LarkOptions {
    /// The options as canonical JSON (the cache key).
    pub fn canonical(&self) -> String {
        serde_json::json!({"max_stack_depth": self.max_stack_depth, "start": self.start})
            .to_string()
    }
}

/// A compiled Lark grammar: the parser's language over the lexer's symbols, and the lexer.
pub(crate) struct Compiled {
    pub parser: Expr,
    pub lexer: Arc<Lexer>,
    pub warnings: Vec<String>,
}

/// Lark's `common` terminals (the ones `%import common.NAME` reads), in Lark syntax, with the
/// languages llguidance gives them: a string holds any character but a quote or a backslash raw, a
/// backslash escapes any character but a line break; a C comment holds no `*/`.
const COMMON: &str = r#"
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
_STRING_ESC_INNER: /([^"\\]|\\.)*/
ESCAPED_STRING: "\"" _STRING_ESC_INNER "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: (" " | /\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*([^*]|\*+[^*\/])*\*+\//
SQL_COMMENT: /--[^\n]*/
"#;

/// [`COMMON`], parsed once per process.
fn common_terminals() -> Result<&'static parse::Text> {
    static PARSED: std::sync::OnceLock<std::result::Result<parse::Text, String>> =
        std::sync::OnceLock::new();
    PARSED
        .get_or_init(|| parse::parse(COMMON).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::Grammar {
            line: 1,
            column: 1,
            message: format!("Lark's common terminals: {e}"),
        })
}

const START: &str = "$start";
/// Most rules and terminals in one grammar.
const MAX_DEFINITIONS: usize = 100_000;
/// Most `%json` values read by an automaton of their own in one grammar.
const MAX_JSON_AUTOMATA: usize = 256;

struct Builder<'a, 'v> {
    /// the special tokens named, resolved against the vocabulary
    atoms: &'a mut AtomList<'v>,
    /// the grammar's terminals (and the imported ones, under their names here)
    terminals: FxHashMap<String, (&'a Def, bool)>,
    /// Lark's common terminals (what an imported one refers to)
    common: FxHashMap<String, &'a Def>,
    /// terminal name → its language (memoized)
    terminal_lang: FxHashMap<String, Lang>,
    /// lexemes: key (`T:NAME`, `R:regex`, ...) → index
    lexeme_ids: FxHashMap<String, usize>,
    lexeme_lang: Vec<Lang>,
    lexeme_names: Vec<String>,
    /// whether a special token is a lexeme
    has_atoms: bool,
    lexeme_lazy: Vec<bool>,
    nest_limit: u32,
    nfa_bytes: usize,
    /// the `%json` lexemes (a lexeme class of their own: no skipped lexeme before one)
    json_lexemes: Vec<usize>,
    /// the warnings of the `%json` schemas (a keyword left out under `lenient`, ...)
    json_warnings: Vec<String>,
}

/// A terminal's language: regex text, a ready HIR (a special token's bytes, a `%json` value's
/// regular language), or, where `&` or `~` stand in it, a DFA over bytes.
#[derive(Clone)]
enum Lang {
    Re(String),
    Hir(Hir),
    /// a DFA, and whether it may hold bytes that are not UTF-8 text (a complement)
    Dfa(Arc<ByteDfa>, bool),
    /// a `%json` value that is not a plain regex (objects, arrays, values of any shape or
    /// depth): read beside the lexer, in the schema's own automaton (an external lexeme, see
    /// [`Lexer::externals`]); never part of a terminal
    Json(Arc<crate::automata::expr::Expr>),
}

/// A `%json` value met inside a terminal (the front end never puts one there).
fn json_in_terminal() -> Error {
    Error::Internal("a `%json` value is never part of a terminal".into())
}

impl Lang {
    fn dfa(&self, nest_limit: u32, nfa_bytes: usize) -> Result<ByteDfa> {
        match self {
            Lang::Dfa(d, _) => Ok((**d).clone()),
            Lang::Re(r) => ByteDfa::from_hir(&crate::regex::parse(r, nest_limit)?, nfa_bytes),
            Lang::Hir(h) => ByteDfa::from_hir(h, nfa_bytes),
            Lang::Json(_) => Err(json_in_terminal()),
        }
    }
}

/// A rule's body with its lexemes numbered.
enum Lx {
    Seq(Vec<Lx>),
    Alt(Vec<Lx>),
    Rep(Box<Lx>, u32, Option<u32>),
    Lexeme(usize),
    Ref(String, Pos),
}

fn escape(s: &str) -> String {
    regex_syntax::escape(s)
}

impl<'a, 'v> Builder<'a, 'v> {
    /// The language of a terminal expression; `stack` holds the terminals being expanded.
    fn lang(&mut self, x: &Ex, stack: &mut Vec<String>, common: bool) -> Result<Lang> {
        let (limit, bytes) = (self.nest_limit, self.nfa_bytes);
        let dfas = |parts: &[Lang]| -> Result<Vec<ByteDfa>> {
            parts.iter().map(|l| l.dfa(limit, bytes)).collect()
        };
        let any = |parts: &[Lang]| parts.iter().any(|l| matches!(l, Lang::Dfa(_, true)));
        let res = |parts: &[Lang]| -> Option<Vec<String>> {
            parts
                .iter()
                .map(|l| match l {
                    Lang::Re(r) => Some(r.clone()),
                    Lang::Hir(_) | Lang::Dfa(..) | Lang::Json(_) => None,
                })
                .collect()
        };
        Ok(match x {
            Ex::Seq(xs) | Ex::Alt(xs) => {
                let parts: Vec<Lang> = xs
                    .iter()
                    .map(|x| self.lang(x, stack, common))
                    .collect::<Result<_>>()?;
                let seq = matches!(x, Ex::Seq(_));
                match res(&parts) {
                    Some(r) if seq => Lang::Re(format!("(?:{})", r.join(""))),
                    Some(r) => Lang::Re(format!("(?:{})", r.join("|"))),
                    None if seq => {
                        Lang::Dfa(Arc::new(ByteDfa::concat(&dfas(&parts)?)?), any(&parts))
                    }
                    None => Lang::Dfa(Arc::new(ByteDfa::alt(&dfas(&parts)?)?), any(&parts)),
                }
            }
            Ex::Rep(sub, min, max) => match self.lang(sub, stack, common)? {
                Lang::Re(s) => Lang::Re(match max {
                    Some(m) => format!("(?:{s}){{{min},{m}}}"),
                    None => format!("(?:{s}){{{min},}}"),
                }),
                Lang::Hir(h) => Lang::Hir(crate::automata::hir::rep(h, *min, *max)),
                Lang::Dfa(d, a) => Lang::Dfa(Arc::new(d.rep(*min, *max)?), a),
                Lang::Json(_) => return Err(json_in_terminal()),
            },
            Ex::And(xs) => {
                let parts: Vec<Lang> = xs
                    .iter()
                    .map(|x| self.lang(x, stack, common))
                    .collect::<Result<_>>()?;
                let mut ds = dfas(&parts)?.into_iter();
                let mut d = ds.next().expect("`&` joins two or more");
                for o in ds {
                    d = d.and(&o)?;
                }
                // within any part that holds text only
                let all = parts.iter().all(|l| matches!(l, Lang::Dfa(_, true)));
                Lang::Dfa(Arc::new(d), all)
            }
            Ex::Not(sub) => {
                let d = self.lang(sub, stack, common)?.dfa(limit, bytes)?;
                Lang::Dfa(Arc::new(d.not()), true)
            }
            Ex::Name(n, pos) => {
                if !parse::names_terminal(n) {
                    return Err(grammar_error(
                        *pos,
                        &format!("the terminal uses the rule `{n}`: terminals hold terminals only"),
                    ));
                }
                self.terminal(n, *pos, stack, common)?
            }
            // a chain entered and left anywhere: linear as a DFA, quadratic as a regex
            Ex::Substring(chunks) => Lang::Dfa(Arc::new(ByteDfa::substrings(chunks)?), false),
            leaf => Lang::Re(self.leaf(leaf)?),
        })
    }

    /// The regex text of a string, regex, range or substring.
    fn leaf(&mut self, x: &Ex) -> Result<String> {
        Ok(match x {
            Ex::Lit { text, ci } => {
                if *ci {
                    format!("(?i:{})", escape(text))
                } else {
                    format!("(?:{})", escape(text))
                }
            }
            Ex::Re {
                pattern,
                flags,
                pos,
            } => {
                let mut f = String::new();
                for c in flags.chars() {
                    match c {
                        'i' | 'm' | 's' | 'x' => f.push(c),
                        'u' => {}
                        other => {
                            return Err(grammar_error(
                                *pos,
                                &format!("the regex flag `{other}` is not supported"),
                            ))
                        }
                    }
                }
                // the pattern alone must parse (its errors then point into it)
                crate::regex::parse(pattern, self.nest_limit)
                    .map_err(|e| grammar_error(*pos, &format!("in /{pattern}/: {e}")))?;
                if f.is_empty() {
                    format!("(?:{pattern})")
                } else {
                    format!("(?{f}:{pattern})")
                }
            }
            Ex::Range(a, b) => format!("[\\x{{{:x}}}-\\x{{{:x}}}]", *a as u32, *b as u32),
            Ex::Special(r, pos) => {
                return Err(grammar_error(
                    *pos,
                    &format!("{r} cannot stand inside a terminal (a special token is a lexeme)"),
                ))
            }
            Ex::Json(_, pos) => {
                return Err(grammar_error(
                    *pos,
                    "`%json` cannot stand inside a terminal (a JSON value is a lexeme)",
                ))
            }
            Ex::Call(n, _, pos) => return Err(param::call_in_terminal(n, *pos)),
            Ex::If(_, _, pos) => return Err(param::misplaced_if(*pos)),
            other => unreachable!("not a leaf: {other:?}"),
        })
    }

    fn terminal(
        &mut self,
        n: &str,
        pos: Pos,
        stack: &mut Vec<String>,
        common: bool,
    ) -> Result<Lang> {
        let key = if common {
            format!("common.{n}")
        } else {
            n.to_string()
        };
        if let Some(r) = self.terminal_lang.get(&key) {
            return Ok(r.clone());
        }
        if stack.contains(&key) {
            return Err(grammar_error(
                pos,
                &format!("the terminal `{n}` refers to itself (terminals cannot be recursive)"),
            ));
        }
        let found = if common {
            self.common.get(n).map(|d| (*d, true))
        } else {
            self.terminals.get(n).copied()
        };
        let Some((def, in_common)) = found else {
            return Err(grammar_error(
                pos,
                &format!("the terminal `{n}` is not defined"),
            ));
        };
        if stack.len() > 200 {
            return Err(grammar_error(
                pos,
                "terminals nest more than 200 levels deep",
            ));
        }
        stack.push(key.clone());
        let r = self.lang(&def.body, stack, in_common)?;
        stack.pop();
        self.terminal_lang.insert(key, r.clone());
        Ok(r)
    }

    fn lexeme(&mut self, key: String, regex: Lang, name: String, lazy: bool) -> usize {
        if let Some(&i) = self.lexeme_ids.get(&key) {
            return i;
        }
        let i = self.lexeme_lang.len();
        self.lexeme_ids.insert(key, i);
        self.lexeme_lang.push(regex);
        self.lexeme_names.push(name);
        self.lexeme_lazy.push(lazy);
        i
    }

    /// The lazy lexeme a `name[lazy]` / `name[suffix=...]` rule is.
    fn lazy_rule(&mut self, def: &Def) -> Result<usize> {
        let key = format!("L:{}", def.name);
        if let Some(&i) = self.lexeme_ids.get(&key) {
            return Ok(i);
        }
        let mut r = self
            .lang(&def.body, &mut Vec::new(), false)
            .map_err(|e| match e {
                Error::Grammar {
                    line,
                    column,
                    message,
                } if message.contains("uses the rule") => Error::Grammar {
                    line,
                    column,
                    message: format!(
                        "{message} (a `lazy` or `suffix` rule is one lexeme: its body holds \
                         strings, regexes and terminals only)"
                    ),
                },
                other => other,
            })?;
        if let Some(sfx) = &def.suffix {
            let s = self.lang(sfx, &mut Vec::new(), false)?;
            r = self.cat(r, s)?;
        }
        Ok(self.lexeme(key, r, def.name.clone(), true))
    }

    /// The lexeme of a `%json` schema: its JSON values (tokensieve's JSON Schema reading, every
    /// JSON spelling of a string), whitespace of any length where JSON allows it inside the
    /// value (llguidance's default), none around it; `x-guidance` options at the root that
    /// change the whitespace are read, others refused. A plain regular language is read by the
    /// lexer's DFA; any other (objects, arrays, values of any shape or depth) is an external
    /// lexeme, read beside the lexer by the schema's own automaton (see [`Lexer::externals`]).
    fn json(&mut self, schema: &serde_json::Value, pos: Pos) -> Result<usize> {
        let key = format!("J:{schema}");
        if let Some(&i) = self.lexeme_ids.get(&key) {
            return Ok(i);
        }
        use crate::json_schema::options::Whitespace;
        let mut opts = crate::json_schema::JsonSchemaOptions {
            whitespace: Whitespace::Pattern("[ \t\n\r]*".into()),
            ..Default::default()
        };
        let mut schema = schema.clone();
        // llguidance's options, at the root: those that keep this reading of JSON
        if let Some(o) = schema.as_object_mut() {
            if let Some(x) = o.remove("x-guidance") {
                let Some(x) = x.as_object() else {
                    return Err(grammar_error(pos, "`x-guidance` must be an object"));
                };
                for (k, v) in x {
                    match (k.as_str(), v) {
                        // every JSON spelling of a string is this reading already
                        ("json_allow_general_unicode_escapes", serde_json::Value::Bool(true)) => {}
                        // keywords it cannot read become warnings (a superset), as tokensieve's
                        // own `lenient` option does
                        ("lenient", serde_json::Value::Bool(b)) => opts.lenient = *b,
                        ("whitespace_flexible", serde_json::Value::Bool(b)) => {
                            opts.whitespace = if *b {
                                Whitespace::Pattern("[ \t\n\r]*".into())
                            } else {
                                Whitespace::Compact
                            };
                        }
                        ("whitespace_pattern", serde_json::Value::String(p)) => {
                            opts.whitespace = Whitespace::Pattern(p.clone());
                        }
                        _ => {
                            return Err(grammar_error(
                                pos,
                                &format!(
                                    "the `x-guidance` option `{k}` (with this value) is not \
                                     supported in `%json`"
                                ),
                            ))
                        }
                    }
                }
            }
        }
        if schema.to_string().contains("\"x-guidance\"") {
            return Err(grammar_error(
                pos,
                "`x-guidance` is read at the root of a `%json` schema only",
            ));
        }
        let c = crate::json_schema::compile(&schema, &opts)
            .map_err(|e| grammar_error(pos, &format!("in `%json`: {e}")))?;
        for w in &c.warnings {
            self.json_warnings.push(format!(
                "`%json` at line {}, column {}: {w}",
                pos.line, pos.col
            ));
        }
        if !c.uniques.is_empty() {
            return Err(grammar_error(
                pos,
                "`%json` with `uniqueItems` over strings or numbers is not supported",
            ));
        }
        let name = format!("%json {}", text_excerpt(&schema.to_string()));
        if let Some(h) = c.expr.as_hir() {
            let i = self.lexeme(key, Lang::Hir(h.clone()), name, false);
            self.json_lexemes.push(i);
            return Ok(i);
        }
        // objects, arrays, values of any depth: the schema's own automaton, built lazily and
        // read beside the lexer (each pair state holds one state per such value)
        let externals = self
            .lexeme_lang
            .iter()
            .filter(|l| matches!(l, Lang::Json(_)))
            .count();
        if externals >= MAX_JSON_AUTOMATA {
            return Err(grammar_error(
                pos,
                &format!(
                    "more than {MAX_JSON_AUTOMATA} different `%json` values that are not plain \
                     regexes (objects, arrays) in one grammar"
                ),
            ));
        }
        let i = self.lexeme(key, Lang::Json(Arc::new(c.expr)), name, false);
        self.json_lexemes.push(i);
        Ok(i)
    }

    /// `a` then `b`.
    fn cat(&self, a: Lang, b: Lang) -> Result<Lang> {
        Ok(match (a, b) {
            (Lang::Re(a), Lang::Re(b)) => Lang::Re(format!("(?:{a}{b})")),
            (a, b) => {
                let (l, n) = (self.nest_limit, self.nfa_bytes);
                let any_bytes = matches!(a, Lang::Dfa(_, true)) || matches!(b, Lang::Dfa(_, true));
                Lang::Dfa(
                    Arc::new(ByteDfa::concat(&[a.dfa(l, n)?, b.dfa(l, n)?])?),
                    any_bytes,
                )
            }
        })
    }

    /// A rule's body: names of rules stay references, terminals and literals become lexemes.
    fn rule(&mut self, x: &Ex) -> Result<Lx> {
        Ok(match x {
            Ex::Seq(xs) => Lx::Seq(xs.iter().map(|x| self.rule(x)).collect::<Result<_>>()?),
            Ex::Alt(xs) => Lx::Alt(xs.iter().map(|x| self.rule(x)).collect::<Result<_>>()?),
            Ex::Rep(sub, a, b) => Lx::Rep(Box::new(self.rule(sub)?), *a, *b),
            Ex::Name(n, pos) if parse::names_terminal(n) => {
                let r = self.terminal(n, *pos, &mut Vec::new(), false)?;
                let lazy = self.terminals.get(n).is_some_and(|(d, _)| d.lazy);
                let r = match self.terminals.get(n).and_then(|(d, _)| d.suffix.clone()) {
                    Some(sfx) => {
                        let s = self.lang(&sfx, &mut Vec::new(), false)?;
                        self.cat(r, s)?
                    }
                    None => r,
                };
                Lx::Lexeme(self.lexeme(format!("T:{n}"), r, n.clone(), lazy))
            }
            Ex::Name(n, pos) => Lx::Ref(n.clone(), *pos),
            Ex::Json(v, pos) => {
                let i = self.json(v, *pos)?;
                Lx::Lexeme(i)
            }
            Ex::Special(r, pos) => {
                let hir = self
                    .atoms
                    .atom(r.clone())
                    .map_err(|e| grammar_error(*pos, &e))?;
                self.has_atoms = true;
                Lx::Lexeme(self.lexeme(format!("A:{r}"), Lang::Hir(hir), r.to_string(), false))
            }
            other => {
                let l = self.lang(other, &mut Vec::new(), false)?;
                let (key, shown) = match &l {
                    Lang::Re(r) => (format!("R:{r}"), r.clone()),
                    Lang::Hir(_) | Lang::Dfa(..) | Lang::Json(_) => {
                        let n = self.lexeme_lang.len();
                        (format!("D:{n}"), "an expression with `&` or `~`".into())
                    }
                };
                let name = match other {
                    Ex::Lit { text, .. } => format!("{text:?}"),
                    Ex::Re { pattern, .. } => format!("/{pattern}/"),
                    _ => shown,
                };
                Lx::Lexeme(self.lexeme(key, l, name, false))
            }
        })
    }
}

fn bytes_class(bytes: impl Iterator<Item = u8>) -> Hir {
    let ranges: Vec<ClassBytesRange> = bytes.map(|b| ClassBytesRange::new(b, b)).collect();
    Hir::class(Class::Bytes(ClassBytes::new(ranges)))
}

/// The parser's reading of one of `symbols` (one byte each, or high byte then low byte).
fn symbol_class(lexer: &Lexer, symbols: &[Sym]) -> Node {
    let hir = if lexer.wide() {
        let mut by_high: std::collections::BTreeMap<u8, Vec<u8>> = Default::default();
        for &s in symbols {
            let ([hi, lo], _) = lexer.spell(s);
            by_high.entry(hi).or_default().push(lo);
        }
        Hir::alternation(
            by_high
                .into_iter()
                .map(|(hi, los)| {
                    Hir::concat(vec![Hir::literal([hi]), bytes_class(los.into_iter())])
                })
                .collect(),
        )
    } else {
        bytes_class(symbols.iter().map(|&s| s as u8))
    };
    Node::Text {
        expr: Box::new(Expr::Hir(hir)),
        nullable: false,
    }
}

fn node(x: &Lx, sym: &dyn Fn(usize) -> Node) -> Node {
    match x {
        Lx::Seq(xs) => Node::Seq(xs.iter().map(|x| node(x, sym)).collect()),
        // (no alternative: a parametric rule's instance whose conditions all fail)
        Lx::Alt(xs) if xs.is_empty() => Node::fail(),
        Lx::Alt(xs) => Node::Alt(xs.iter().map(|x| node(x, sym)).collect()),
        Lx::Rep(sub, a, b) => Node::Rep {
            sub: Box::new(node(sub, sym)),
            min: *a,
            max: *b,
        },
        Lx::Lexeme(i) => sym(*i),
        Lx::Ref(n, pos) => Node::Ref {
            name: n.clone(),
            rule: usize::MAX,
            pos: *pos,
        },
    }
}

/// Compiles a Lark grammar (see the module docs).
pub(crate) fn compile(
    text: &str,
    opts: &LarkOptions,
    nfa_bytes: usize,
    atoms: &mut AtomList<'_>,
) -> Result<Compiled> {
    let ebnf_opts = EbnfOptions {
        start: START.into(),
        max_stack_depth: opts.max_stack_depth,
    };
    ebnf_opts.validate()?;
    if opts.start.is_empty() {
        return Err(Error::InvalidArgument("start must name a rule".into()));
    }
    let mut g = parse::parse(text)?;
    param::expand(&mut g)?;
    if g.rules.len() + g.terminals.len() > MAX_DEFINITIONS {
        return Err(grammar_error(
            Pos { line: 1, col: 1 },
            &format!("the grammar has more than {MAX_DEFINITIONS} rules and terminals"),
        ));
    }
    let common = common_terminals()?;
    let mut terminals: FxHashMap<String, (&Def, bool)> = FxHashMap::default();
    for d in &g.terminals {
        if terminals.insert(d.name.clone(), (d, false)).is_some() {
            return Err(grammar_error(
                d.pos,
                &format!("the terminal `{}` is defined twice", d.name),
            ));
        }
    }
    let common_defs: FxHashMap<String, &Def> = common
        .terminals
        .iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    for (name, alias, pos) in &g.imports {
        let Some(d) = common_defs.get(name.as_str()) else {
            return Err(grammar_error(
                *pos,
                &format!("`common` has no terminal `{name}`"),
            ));
        };
        if terminals.contains_key(alias.as_str()) {
            return Err(grammar_error(
                *pos,
                &format!("the terminal `{alias}` is defined twice"),
            ));
        }
        terminals.insert(alias.clone(), (*d, true));
    }
    let own: std::collections::HashSet<String> = terminals.keys().cloned().collect();
    let mut b = Builder {
        atoms,
        terminals,
        common: common_defs,
        terminal_lang: FxHashMap::default(),
        lexeme_ids: FxHashMap::default(),
        lexeme_lang: Vec::new(),
        has_atoms: false,
        lexeme_names: Vec::new(),
        lexeme_lazy: Vec::new(),
        nest_limit: 250,
        nfa_bytes,
        json_lexemes: Vec::new(),
        json_warnings: Vec::new(),
    };
    let check_visible = |x: &Ex| -> Result<()> {
        let mut bad = None;
        visit_names(x, &mut |n, pos| {
            if parse::names_terminal(n) && !own.contains(n) && bad.is_none() {
                bad = Some((n.to_string(), pos));
            }
        });
        match bad {
            Some((n, pos)) => Err(grammar_error(
                pos,
                &format!("the terminal `{n}` is not defined"),
            )),
            None => Ok(()),
        }
    };
    for d in g.rules.iter().chain(g.terminals.iter()) {
        check_visible(&d.body)?;
    }
    let mut seen_rules: FxHashMap<&str, Pos> = FxHashMap::default();
    let mut bodies = Vec::new();
    for d in &g.rules {
        if seen_rules.insert(d.name.as_str(), d.pos).is_some() {
            return Err(grammar_error(
                d.pos,
                &format!("the rule `{}` is defined twice", d.name),
            ));
        }
        let body = if d.lazy {
            Lx::Lexeme(b.lazy_rule(d)?)
        } else {
            b.rule(&d.body)?
        };
        bodies.push((d.name.clone(), d.pos, body));
    }
    if !seen_rules.contains_key(opts.start.as_str()) {
        return Err(grammar_error(
            Pos { line: 1, col: 1 },
            &format!("the grammar has no rule `{}` (the start rule)", opts.start),
        ));
    }
    let mut ignored = Vec::new();
    for (x, _) in &g.ignore {
        check_visible(x)?;
        // `%ignore A | B` ignores each
        let alts: Vec<&Ex> = match x {
            Ex::Alt(xs) => xs.iter().collect(),
            x => vec![x],
        };
        for a in alts {
            match b.rule(a)? {
                Lx::Lexeme(i) => ignored.push(i),
                _ => {
                    return Err(grammar_error(
                        g.ignore[0].1,
                        "`%ignore` takes terminals, strings or regexes",
                    ))
                }
            }
        }
    }
    // every lexeme parsed once more as a whole (for its HIR)
    let mut specs = Vec::with_capacity(b.lexeme_lang.len() + 1);
    for (i, (l, name)) in b.lexeme_lang.iter().zip(&b.lexeme_names).enumerate() {
        let lang = match l {
            Lang::Hir(h) => LexLang::Hir(h.clone()),
            Lang::Dfa(d, _) => LexLang::Dfa(d.clone()),
            Lang::Json(_) if ignored.contains(&i) => {
                return Err(grammar_error(
                    g.ignore[0].1,
                    "`%ignore` of a `%json` value is not supported",
                ))
            }
            Lang::Json(_) => LexLang::External,
            Lang::Re(r) => LexLang::Hir(crate::regex::parse(r, b.nest_limit).map_err(|e| {
                grammar_error(Pos { line: 1, col: 1 }, &format!("the lexeme {name}: {e}"))
            })?),
        };
        specs.push(LexemeSpec {
            own_class: b.json_lexemes.contains(&i),
            lang,
            name: name.clone(),
            skipped: ignored.contains(&i),
            lazy: b.lexeme_lazy[i],
        });
    }
    let complements = b
        .lexeme_lang
        .iter()
        .any(|l| matches!(l, Lang::Dfa(_, true)));
    if b.has_atoms && complements {
        // a complement may hold any bytes, a special token's stand-in bytes among them
        return Err(grammar_error(
            Pos { line: 1, col: 1 },
            "a grammar naming special tokens cannot also hold terminals written with `&` or `~`",
        ));
    }
    if specs.is_empty() {
        // a grammar of empty rules: a lexer that reads nothing
        specs.push(LexemeSpec {
            own_class: false,
            lang: LexLang::Hir(Hir::fail()),
            name: "(none)".into(),
            skipped: false,
            lazy: false,
        });
    }
    let policy = SkipPolicy {
        at_start: g.initial_skip,
        once: g.ignore_once,
    };
    let lexer = Lexer::build(&specs, policy, nfa_bytes).map_err(|e| match e {
        Error::InvalidArgument(m) => grammar_error(Pos { line: 1, col: 1 }, &m),
        other => other,
    })?;
    // a lexeme whose language held the empty string is optional where it is used
    let sym = |i: usize| -> Node {
        let t = symbol_class(&lexer, &lexer.symbols_of(i));
        if lexer.nullable(i) {
            Node::Rep {
                sub: Box::new(t),
                min: 0,
                max: Some(1),
            }
        } else {
            t
        }
    };
    let mut rules: Vec<RuleText> = bodies
        .iter()
        .map(|(name, pos, lx)| RuleText {
            name: name.clone(),
            pos: *pos,
            body: node(lx, &sym),
        })
        .collect();
    rules.push(RuleText {
        name: START.into(),
        pos: Pos { line: 1, col: 1 },
        body: Node::Ref {
            name: opts.start.clone(),
            rule: usize::MAX,
            pos: Pos { line: 1, col: 1 },
        },
    });
    let c = crate::ebnf::lower_rules(rules, &ebnf_opts)?;
    // each `%json` value read beside the lexer: its automaton, behind its entry symbol, in the
    // same automaton as the parser (see `Lexer::externals`)
    let mut parser = c.expr;
    if !lexer.externals().is_empty() {
        use crate::automata::expr::{self, Expr};
        let mut alts = vec![parser];
        // (the builder's languages are not read again: each value's expression is moved)
        let mut langs = std::mem::take(&mut b.lexeme_lang);
        for (k, &i) in lexer.externals().iter().enumerate() {
            let Lang::Json(x) = std::mem::replace(&mut langs[i], Lang::Re(String::new())) else {
                return Err(Error::Internal(
                    "an external lexeme is a `%json` value".into(),
                ));
            };
            let (bytes, n) = lexer.spell(lexer.entry(k));
            alts.push(expr::concat(vec![
                Expr::Hir(Hir::literal(bytes[..n].to_vec())),
                Arc::unwrap_or_clone(x),
            ]));
        }
        parser = expr::alt(alts);
    }
    let mut warnings: Vec<String> = c
        .warnings
        .into_iter()
        .filter(|w| !w.contains(START))
        .map(|w| {
            w.replace(
                &format!("from `{START}`"),
                &format!("from `{}`", opts.start),
            )
        })
        .collect();
    warnings.extend(b.json_warnings);
    Ok(Compiled {
        parser,
        lexer: Arc::new(lexer),
        warnings,
    })
}

fn text_excerpt(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}

fn visit_names(x: &Ex, f: &mut dyn FnMut(&str, Pos)) {
    match x {
        Ex::Seq(xs) | Ex::Alt(xs) | Ex::And(xs) => xs.iter().for_each(|x| visit_names(x, f)),
        Ex::Rep(sub, ..) | Ex::Not(sub) => visit_names(sub, f),
        Ex::Name(n, pos) => f(n, *pos),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
