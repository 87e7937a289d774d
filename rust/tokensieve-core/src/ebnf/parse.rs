//! The GBNF / EBNF text → rules, each body a [`Node`] tree with rule references by name.
//!
//! Accepted: llama.cpp's GBNF (`name ::= body`, `"literals"`, `[classes]` with ranges and `^`,
//! the escapes `\n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH` and any other ASCII punctuation
//! escaped as itself, `.`, `( )`, `|`, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`, `{,n}`, `#`
//! comments, names of letters, digits, `_` and `-`) and the EBNF xgrammar reads (the same,
//! whitespace and line breaks free between rules). A rule ends where the next `name ::=`
//! starts. Refused with a position: lookahead assertions `(= ...)`, anything else unknown.

use super::{grammar_error, Pos};
use crate::atoms::{AtomList, TokenRef};
use crate::error::Result;
use regex_syntax::hir::Hir;

/// A grammar expression over Unicode characters.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    /// A literal string (possibly empty).
    Lit(String),
    /// One character of the ranges (`negated`: of none of them).
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
    /// Any one character.
    Any,
    /// A rule, by name until resolved (`rule` is then its index).
    Ref {
        name: String,
        rule: usize,
        pos: Pos,
    },
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Rep {
        sub: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
    /// xgrammar's `Regex("...")` built-in: the strings that fully match the pattern (the
    /// language of [`crate::regex::parse_full_match`]); `nullable`: it matches the empty string.
    Regex {
        hir: Box<regex_syntax::hir::Hir>,
        nullable: bool,
    },
    /// A ready expression over bytes: the free text of xgrammar's `TagDispatch(...)` built-in
    /// (see [`crate::automata::freetext`]); `nullable`: it matches the empty string.
    Text {
        expr: Box<crate::automata::expr::Expr>,
        nullable: bool,
    },
}

impl Node {
    /// The empty language (a class of no character).
    pub(crate) fn fail() -> Node {
        Node::Class {
            ranges: Vec::new(),
            negated: false,
        }
    }

    /// Calls `f` on each rule reference, in order.
    pub(crate) fn refs(&self, f: &mut dyn FnMut(usize, Pos)) {
        match self {
            Node::Ref { rule, pos, .. } => f(*rule, *pos),
            Node::Seq(xs) | Node::Alt(xs) => xs.iter().for_each(|x| x.refs(f)),
            Node::Rep { sub, max, .. } if *max != Some(0) => sub.refs(f),
            _ => {}
        }
    }

    /// Height of the tree (a leaf is 1).
    pub(crate) fn height(&self) -> u32 {
        self.height_with(&|_| 1)
    }

    /// Height of the tree, a rule reference counting `of_ref(rule)` (what it stands for); a
    /// repetition of no copies counts 1.
    pub(crate) fn height_with(&self, of_ref: &dyn Fn(usize) -> u32) -> u32 {
        match self {
            Node::Seq(xs) | Node::Alt(xs) => {
                1 + xs.iter().map(|x| x.height_with(of_ref)).max().unwrap_or(0)
            }
            Node::Rep { max: Some(0), .. } => 1,
            Node::Rep { sub, .. } => 1 + sub.height_with(of_ref),
            Node::Ref { rule, .. } => of_ref(*rule),
            _ => 1,
        }
    }

    /// Number of nodes (the size budget of the rewriting of left recursion).
    pub(crate) fn size(&self) -> usize {
        match self {
            Node::Seq(xs) | Node::Alt(xs) => 1 + xs.iter().map(Node::size).sum::<usize>(),
            Node::Rep { sub, .. } => 1 + sub.size(),
            _ => 1,
        }
    }
}

/// One rule as written.
pub(crate) struct RuleText {
    pub name: String,
    pub pos: Pos,
    pub body: Node,
}

struct Parser<'a, 'v> {
    chars: Vec<char>,
    i: usize,
    line: u32,
    col: u32,
    _text: &'a str,
    /// How deep groups nest (bounded: the parser recurses per group).
    depth: u32,
    /// The special tokens the grammar names (`<[id]>`, `Token(...)`), see [`crate::atoms`].
    atoms: AtomList<'v>,
}

/// Groups nest at most this deep.
const MAX_GROUP_DEPTH: u32 = 200;

/// The most bytes a `Substring(...)` may hold written out as its runs (see
/// `Parser::substring_macro`).
pub(crate) const MAX_SUBSTRING_BYTES: usize = 1 << 20;
/// A rule's body is a tree at most this high (groups, sequences, alternatives and repetitions
/// that do not merge, together): every later walk over it recurses at most this deep.
pub(crate) const MAX_HEIGHT: u32 = 1000;

/// The error of a tree past [`MAX_HEIGHT`], at `pos`.
fn too_deep(pos: Pos) -> crate::error::Error {
    grammar_error(
        pos,
        &format!(
            "the expression nests more than {MAX_HEIGHT} levels deep (groups and repetitions \
             together)"
        ),
    )
}

/// `x{a,b}` repeated `{c,d}` times as one repetition `x{min,max}`, where that is the same
/// language: when `a` is 0 or 1 (the counts `k·a ..= k·b` of `k` copies then meet for
/// consecutive `k`), or when the outer count is exact (`c = d`). `None`: the two must nest.
pub(crate) fn merge_counts(
    (a, b): (u32, Option<u32>),
    (c, d): (u32, Option<u32>),
) -> Option<(u32, Option<u32>)> {
    if a > 1 && Some(c) != d {
        return None;
    }
    let min = a.checked_mul(c)?;
    let max = match (b, d) {
        (Some(0), _) | (_, Some(0)) => Some(0),
        (Some(b), Some(d)) => Some(b.checked_mul(d)?),
        _ => None,
    };
    Some((min, max))
}

/// The rules of `text`, and `atoms` with the special tokens it names added.
pub(crate) fn parse_with<'v>(
    text: &str,
    atoms: AtomList<'v>,
) -> Result<(Vec<RuleText>, AtomList<'v>)> {
    let mut p = Parser {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
        _text: text,
        depth: 0,
        atoms,
    };
    let mut rules = Vec::new();
    p.skip();
    while !p.at_end() {
        let pos = p.pos();
        let Some(name) = p.name() else {
            return Err(p.err_here("expected a rule name (letters, digits, `_` or `-`)"));
        };
        if p.peek() == Some('[') {
            p.rule_attributes(&name)?;
        }
        p.skip();
        if !p.eat_str("::=") {
            return Err(p.err_here(&format!("expected `::=` after the rule name `{name}`")));
        }
        p.skip();
        let (body, _) = p.alternatives()?;
        if !p.at_end() && !p.at_rule_start() {
            let c = p.peek().unwrap_or(' ');
            let what = match c {
                ')' => "an unmatched `)`".to_string(),
                _ => format!("an unexpected {}", describe(c)),
            };
            return Err(p.err_here(&format!("{what} in the rule `{name}`")));
        }
        rules.push(RuleText { name, pos, body });
    }
    if rules.is_empty() {
        return Err(grammar_error(
            Pos { line: 1, col: 1 },
            "the grammar defines no rule",
        ));
    }
    Ok((rules, p.atoms))
}

fn describe(c: char) -> String {
    if c.is_control() || c.is_whitespace() {
        format!("character {:?}", c)
    } else {
        format!("`{c}`")
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl Parser<'_, '_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    fn err_here(&self, msg: &str) -> crate::error::Error {
        grammar_error(self.pos(), msg)
    }

    fn at_end(&self) -> bool {
        self.i >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.chars.get(self.i + k).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if s.chars()
            .enumerate()
            .all(|(k, c)| self.peek_at(k) == Some(c))
        {
            for _ in 0..n {
                self.bump();
            }
            true
        } else {
            false
        }
    }

    /// Skips white space and `#` comments.
    fn skip(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.bump();
            } else if c == '#' {
                while let Some(c) = self.bump() {
                    if c == '\n' {
                        break;
                    }
                }
            } else {
                break;
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let mut out = String::new();
        while let Some(c) = self.peek().filter(|&c| is_name_char(c)) {
            out.push(c);
            self.bump();
        }
        (!out.is_empty()).then_some(out)
    }

    /// Whether a `name ::=` starts here (the end of the rule before it).
    fn at_rule_start(&self) -> bool {
        let mut k = self.i;
        while self.chars.get(k).is_some_and(|&c| is_name_char(c)) {
            k += 1;
        }
        if k == self.i {
            return false;
        }
        // xgrammar's rule attributes: `name[...] ::=`
        if self.chars.get(k) == Some(&'[') {
            while self.chars.get(k).is_some_and(|&c| c != ']' && c != '\n') {
                k += 1;
            }
            if self.chars.get(k) != Some(&']') {
                return false;
            }
            k += 1;
        }
        while self.chars.get(k).is_some_and(|c| c.is_whitespace()) {
            k += 1;
        }
        self.chars.get(k..k + 3) == Some(&[':', ':', '='])
    }

    /// xgrammar's rule attributes after a rule's name, at the `[`: `temperature=X` (a sampling
    /// setting: no part of the language, so read and checked only); the others, which change
    /// the language by tokens or by a rule's own reading (`lazy`, `max_chars`, `max_tokens`),
    /// are refused by name.
    fn rule_attributes(&mut self, name: &str) -> Result<()> {
        let pos = self.pos();
        self.bump();
        loop {
            while self.peek().is_some_and(|c| c == ' ' || c == '\t') {
                self.bump();
            }
            if self.eat(']') {
                return Ok(());
            }
            let key = self.name().unwrap_or_default();
            while self.peek().is_some_and(|c| c == ' ' || c == '\t') {
                self.bump();
            }
            let mut value = String::new();
            if self.eat('=') {
                while let Some(c) = self.peek().filter(|&c| c != ',' && c != ']' && c != '\n') {
                    value.push(c);
                    self.bump();
                }
            }
            let value = value.trim();
            match key.as_str() {
                "temperature" => {
                    let ok = value
                        .parse::<f64>()
                        .is_ok_and(|t| t.is_finite() && t >= 0.0);
                    if !ok {
                        return Err(grammar_error(
                            pos,
                            &format!(
                                "the temperature of rule `{name}` is a finite number of at least \
                                 0, not {value:?}"
                            ),
                        ));
                    }
                }
                "" => return Err(grammar_error(pos, "a rule attribute has no name")),
                other => {
                    return Err(grammar_error(
                        pos,
                        &format!(
                            "the rule attribute `{other}` (of rule `{name}`) is not supported \
                             (`temperature` is)"
                        ),
                    ))
                }
            }
            if !self.eat(',') && self.peek() != Some(']') {
                return Err(grammar_error(
                    pos,
                    "rule attributes are not closed with `]`",
                ));
            }
        }
    }

    /// The alternatives from here, and the height of their tree (at most [`MAX_HEIGHT`]).
    fn alternatives(&mut self) -> Result<(Node, u32)> {
        let (first, mut height) = self.sequence()?;
        let mut alts = vec![first];
        while self.eat('|') {
            self.skip();
            let (x, h) = self.sequence()?;
            height = height.max(h);
            alts.push(x);
        }
        Ok(if alts.len() == 1 {
            (alts.pop().expect("one"), height)
        } else {
            (Node::Alt(alts), height + 1)
        })
    }

    fn sequence(&mut self) -> Result<(Node, u32)> {
        let mut items = Vec::new();
        let mut height = 1;
        loop {
            self.skip();
            match self.peek() {
                None | Some('|') | Some(')') => break,
                _ if self.at_rule_start() => break,
                _ => {}
            }
            let pos = self.pos();
            let (item, h) = self.primary()?;
            let (item, h) = self.postfix(item, h)?;
            // the sequence node above it
            if h + 1 > MAX_HEIGHT {
                return Err(too_deep(pos));
            }
            height = height.max(h);
            items.push(item);
        }
        Ok(if items.len() == 1 {
            (items.pop().expect("one"), height)
        } else {
            (Node::Seq(items), height + 1)
        })
    }

    /// One item, and the height of its tree.
    fn primary(&mut self) -> Result<(Node, u32)> {
        let pos = self.pos();
        let leaf = |n: Node| Ok((n, 1));
        match self.peek() {
            Some('"') => leaf(Node::Lit(self.string()?)),
            Some('[') => {
                self.bump();
                let negated = self.eat('^');
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let c = match self.peek() {
                        None => return Err(grammar_error(pos, "a character class is not closed")),
                        Some(']') if !first => {
                            self.bump();
                            break;
                        }
                        Some('\\') => self.escape()?,
                        Some(c) => {
                            self.bump();
                            c
                        }
                    };
                    first = false;
                    if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                        let at = self.pos();
                        self.bump();
                        let hi = match self.peek() {
                            Some('\\') => self.escape()?,
                            Some(h) => {
                                self.bump();
                                h
                            }
                            None => {
                                return Err(grammar_error(pos, "a character class is not closed"))
                            }
                        };
                        if hi < c {
                            return Err(grammar_error(
                                at,
                                &format!(
                                    "the range {c:?}-{hi:?} is empty (its end is below its start)"
                                ),
                            ));
                        }
                        ranges.push((c, hi));
                    } else {
                        ranges.push((c, c));
                    }
                }
                leaf(Node::Class { ranges, negated })
            }
            Some('.') => {
                self.bump();
                leaf(Node::Any)
            }
            Some('(') => {
                self.bump();
                if self.peek() == Some('=') {
                    return Err(grammar_error(
                        pos,
                        "lookahead assertions `(= ...)` are not supported",
                    ));
                }
                self.depth += 1;
                if self.depth > MAX_GROUP_DEPTH {
                    return Err(grammar_error(
                        pos,
                        &format!("groups nest more than {MAX_GROUP_DEPTH} levels deep"),
                    ));
                }
                self.skip();
                let inner = self.alternatives()?;
                self.depth -= 1;
                self.skip();
                if !self.eat(')') {
                    return Err(grammar_error(pos, "a `(` is not closed"));
                }
                Ok(inner)
            }
            Some(c) if is_name_char(c) => {
                let name = self.name().expect("a name character");
                if name == "Regex" && self.peek() == Some('(') {
                    return leaf(self.regex_macro(pos)?);
                }
                if name == "Substring" && self.peek() == Some('(') {
                    return leaf(self.substring_macro(pos)?);
                }
                if name == "TagDispatch" && self.peek() == Some('(') {
                    return leaf(self.tag_dispatch_macro(pos)?);
                }
                if name == "Token" && self.peek() == Some('(') {
                    return leaf(self.token_macro(pos)?);
                }
                if name == "TokenTagDispatch" && self.peek() == Some('(') {
                    return leaf(self.token_tag_dispatch_macro(pos)?);
                }
                if name == "ExcludeToken" && self.peek() == Some('(') {
                    return Err(grammar_error(
                        pos,
                        "`ExcludeToken(...)` (any one token but these) is not supported: where \
                         one token ends is not part of a text's language",
                    ));
                }
                leaf(Node::Ref {
                    name,
                    rule: usize::MAX,
                    pos,
                })
            }
            Some('<') if self.peek_at(1) == Some('[') => {
                let r = self.token_ref()?;
                leaf(self.atom(r, pos)?)
            }
            Some('!') if self.peek_at(1) == Some('<') => Err(self.err_here(
                "`!<[id]>` (any one token but this one) is not supported: where one token ends \
                 is not part of a text's language",
            )),
            Some('\'') => Err(self.err_here(
                "single-quoted strings are not GBNF; write string literals in double quotes",
            )),
            Some('/') => Err(self.err_here(
                "`/regex/` terminals are Lark syntax, which this reader does not accept; \
                 write the grammar in GBNF",
            )),
            Some(c) => Err(self.err_here(&format!("unexpected {}", describe(c)))),
            None => Err(self.err_here("unexpected end of the grammar")),
        }
    }

    /// The repetition operators after an item of height `height`. A repetition of a
    /// repetition is one repetition where that is the same language (`x??`, `x*+`, `x{2}{3}`,
    /// `x{0,2}*`: see [`merge_counts`]); the others nest, within [`MAX_HEIGHT`].
    fn postfix(&mut self, mut item: Node, mut height: u32) -> Result<(Node, u32)> {
        loop {
            self.blanks_before_operator();
            let pos = self.pos();
            let (min, max) = match self.peek() {
                Some('*') => {
                    self.bump();
                    (0, None)
                }
                Some('+') => {
                    self.bump();
                    (1, None)
                }
                Some('?') => {
                    self.bump();
                    (0, Some(1))
                }
                Some('{') => {
                    self.bump();
                    self.bounds(pos)?
                }
                _ => return Ok((item, height)),
            };
            item = match item {
                Node::Rep {
                    sub,
                    min: a,
                    max: b,
                } => match merge_counts((a, b), (min, max)) {
                    Some((min, max)) => Node::Rep { sub, min, max },
                    None => {
                        height += 1;
                        Node::Rep {
                            sub: Box::new(Node::Rep {
                                sub,
                                min: a,
                                max: b,
                            }),
                            min,
                            max,
                        }
                    }
                },
                item => {
                    height += 1;
                    Node::Rep {
                        sub: Box::new(item),
                        min,
                        max,
                    }
                }
            };
            if height > MAX_HEIGHT {
                return Err(too_deep(pos));
            }
        }
    }

    /// `m}`, `m,}`, `m,n}`, `,n}` after a `{` at `pos`.
    fn bounds(&mut self, pos: Pos) -> Result<(u32, Option<u32>)> {
        self.skip();
        let min = self.number(pos)?;
        self.skip();
        let out = if self.eat(',') {
            self.skip();
            let max = self.number(pos)?;
            (min.unwrap_or(0), max)
        } else {
            let Some(m) = min else {
                return Err(grammar_error(pos, "a repetition `{...}` needs a count"));
            };
            (m, Some(m))
        };
        self.skip();
        if !self.eat('}') {
            return Err(grammar_error(pos, "a repetition `{...}` is not closed"));
        }
        if let (min, Some(max)) = out {
            if max < min {
                return Err(grammar_error(
                    pos,
                    &format!("the repetition {{{min},{max}}} has its maximum below its minimum"),
                ));
            }
        }
        Ok(out)
    }

    fn number(&mut self, pos: Pos) -> Result<Option<u32>> {
        let mut s = String::new();
        while let Some(c) = self.peek().filter(char::is_ascii_digit) {
            s.push(c);
            self.bump();
        }
        if s.is_empty() {
            return Ok(None);
        }
        s.parse::<u32>()
            .map(Some)
            .map_err(|_| grammar_error(pos, &format!("the repetition count {s} is too large")))
    }

    /// A string literal at its `"`, escapes applied.
    fn string(&mut self) -> Result<String> {
        let pos = self.pos();
        self.bump();
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return Err(grammar_error(pos, "a string literal is not closed")),
                Some('"') => {
                    self.bump();
                    return Ok(s);
                }
                Some('\\') => s.push(self.escape()?),
                Some(c) => {
                    self.bump();
                    s.push(c);
                }
            }
        }
    }

    /// xgrammar's `Regex("pattern", flags="...", json_string=true)` built-in after its name,
    /// at the `(`: the strings that fully match the pattern, read as
    /// [`crate::regex::parse_full_match`] reads a regex (`docs/regex.md`). Without `flags`, `.`
    /// takes line breaks too, as xgrammar reads it; with `flags`, only with `s` among them (`i`:
    /// case-insensitive, `u`: nothing more, any other letter an error). A case-insensitive
    /// pattern over characters past ASCII is refused (xgrammar folds ASCII case only). With
    /// `json_string=true`, only strings that JSON writes as themselves inside quotes (no `"`,
    /// no `\`, no control character below U+0020).
    fn regex_macro(&mut self, pos: Pos) -> Result<Node> {
        self.bump();
        self.skip();
        if self.peek() != Some('"') {
            return Err(grammar_error(
                pos,
                "`Regex(...)` takes a string literal pattern",
            ));
        }
        let mut pattern = self.string()?;
        let mut flags: Option<String> = None;
        let mut json_string = false;
        loop {
            self.skip();
            if !self.eat(',') {
                break;
            }
            self.skip();
            let key = self.option_key(pos, "Regex")?;
            match key.as_str() {
                "flags" if self.peek() == Some('"') && flags.is_none() => {
                    let f = self.string()?;
                    if let Some(bad) = f.chars().find(|c| !matches!(c, 'i' | 's' | 'u')) {
                        return Err(grammar_error(
                            pos,
                            &format!(
                                "the `Regex(...)` flag {bad:?} is not supported (`i`, `s` and \
                                 `u` are)"
                            ),
                        ));
                    }
                    flags = Some(f);
                }
                "flags" => {
                    return Err(grammar_error(
                        pos,
                        "`flags` of `Regex(...)` is one string literal (`flags=\"is\"`)",
                    ))
                }
                "json_string" => json_string = self.bool_option(pos, "Regex", "json_string")?,
                _ => {
                    return Err(grammar_error(
                        pos,
                        &format!(
                            "the `Regex(...)` option `{key}` is not supported (`flags` and \
                             `json_string` are)"
                        ),
                    ))
                }
            }
        }
        if !self.eat(')') {
            return Err(grammar_error(pos, "`Regex(...)` is not closed"));
        }
        let inline_fold = pattern.contains("(?") && {
            let b = pattern.as_bytes();
            (0..b.len()).any(|k| {
                b[k..].starts_with(b"(?")
                    && b[k + 2..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphabetic() || **c == b'-')
                        .any(|c| *c == b'i')
            })
        };
        let folds = inline_fold || flags.as_deref().is_some_and(|f| f.contains('i'));
        if folds
            && (!pattern.is_ascii()
                || pattern.contains("\\u")
                || pattern.contains("\\U")
                || pattern.contains("\\x{")
                || pattern.contains("\\p")
                || pattern.contains("\\P"))
        {
            return Err(grammar_error(
                pos,
                "a case-insensitive `Regex(...)` over characters past ASCII is not supported (its \
                 case folding is ASCII only in xgrammar's reading)",
            ));
        }
        // xgrammar's reading: without flags, `.` takes any character, a line break included
        let mode = match &flags {
            None => "s".to_string(),
            Some(f) => f.chars().filter(|c| matches!(c, 'i' | 's')).collect(),
        };
        if !mode.is_empty() {
            pattern = format!("(?{mode}:{pattern})");
        }
        let nest = crate::regex::RegexOptions::default().nest_limit;
        let hir = crate::regex::parse_full_match(&pattern, nest).map_err(|e| {
            grammar_error(
                pos,
                &format!("the pattern of `Regex(...)` does not compile: {e}"),
            )
        })?;
        let hir = if json_string {
            let plain = crate::automata::hir::star(crate::automata::hir::class(&[
                ('\u{20}', '!'),
                ('#', '['),
                (']', '\u{10FFFF}'),
            ]));
            match crate::automata::strlang::combine(&[hir, plain], &[]) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    return Err(grammar_error(
                        pos,
                        "this `Regex(...)` with `json_string=true` matches no string",
                    ))
                }
                Err(e) => {
                    return Err(grammar_error(
                        pos,
                        &format!("the `Regex(...)` with `json_string=true`: {e}"),
                    ))
                }
            }
        } else {
            hir
        };
        let nullable = hir.properties().minimum_len() == Some(0);
        Ok(Node::Regex {
            hir: Box::new(hir),
            nullable,
        })
    }

    /// xgrammar's `TagDispatch(("trigger", rule), ..., excludes=("s", ...),
    /// loop_after_dispatch=true)` built-in after its name, at the `(`: free text (any
    /// characters) in which the first place a trigger is complete goes on with its rule (the
    /// longest trigger complete there), and, with `loop_after_dispatch` (the default), free
    /// text again after the rule, any number of times; free text never holds an excluded string
    /// and may end anywhere else (see [`crate::automata::freetext`]); `excludes` is a
    /// parenthesized list (`("s")`, `("s", "t")`). `stop_eos` and `stop_str` are refused by
    /// name, and so is a string both a trigger and excluded.
    fn tag_dispatch_macro(&mut self, pos: Pos) -> Result<Node> {
        use crate::automata::freetext::FreeText;
        const BAD: &str = "a `TagDispatch(...)` case is (\"trigger\", rule)";
        let mut triggers: Vec<String> = Vec::new();
        let mut rules: Vec<Node> = Vec::new();
        let mut excludes: Vec<String> = Vec::new();
        let looped = self.dispatch_args(
            pos,
            "TagDispatch",
            "(\"trigger\", rule)",
            &mut |p: &mut Self| {
                if p.peek() != Some('"') {
                    return Err(grammar_error(pos, BAD));
                }
                let t = p.string()?;
                if t.is_empty() {
                    return Err(grammar_error(pos, "a `TagDispatch(...)` trigger is empty"));
                }
                let rule = p.case_rule(
                    pos,
                    BAD,
                    "a `TagDispatch(...)` case names its rule after the trigger",
                )?;
                triggers.push(t);
                rules.push(rule);
                Ok(())
            },
            &mut |p: &mut Self| {
                excludes = p.string_tuple(pos, "excludes")?;
                Ok(())
            },
        )?;
        if excludes.iter().any(String::is_empty) {
            return Err(grammar_error(
                pos,
                "a `TagDispatch(...)` excluded string is empty",
            ));
        }
        if let Some(t) = triggers.iter().find(|t| excludes.contains(t)) {
            return Err(grammar_error(
                pos,
                &format!("{t:?} is both a trigger and an excluded string of `TagDispatch(...)`"),
            ));
        }
        let free = at_pos(FreeText::new(&triggers, &excludes), pos)?;
        let end = Node::Text {
            expr: Box::new(at_pos(free.end(), pos)?),
            nullable: true,
        };
        let mut cases = Vec::new();
        for (k, rule) in rules.into_iter().enumerate() {
            if let Some(lead) = at_pos(free.to_trigger(k), pos)? {
                let lead = Node::Text {
                    expr: Box::new(lead),
                    nullable: false,
                };
                cases.push(Node::Seq(vec![lead, rule]));
            }
        }
        Ok(dispatch_node(cases, end, looped))
    }

    /// A built-in's `key=` option name, at the name, past the `=` and the space after it
    /// (`builtin` names the built-in in the message when the `=` is missing).
    fn option_key(&mut self, pos: Pos, builtin: &str) -> Result<String> {
        let key = self.name().unwrap_or_default();
        self.skip();
        if !self.eat('=') {
            return Err(grammar_error(
                pos,
                &format!("the `{builtin}(...)` option `{key}` needs a value (`{key}=...`)"),
            ));
        }
        self.skip();
        Ok(key)
    }

    /// A built-in's boolean option value, `true` or `false` (`key` of `builtin` in the message).
    fn bool_option(&mut self, pos: Pos, builtin: &str, key: &str) -> Result<bool> {
        match self.name().as_deref() {
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            _ => Err(grammar_error(
                pos,
                &format!("`{key}` of `{builtin}(...)` is `true` or `false`"),
            )),
        }
    }

    /// The arguments of a dispatch built-in (`name` `TagDispatch` or `TokenTagDispatch`), at
    /// the `(`: cases, each read by `case` after its own `(` (`form` shows one in messages),
    /// and the options `excludes` (its value read by `excludes`) and `loop_after_dispatch`;
    /// returns `loop_after_dispatch` (default true).
    fn dispatch_args(
        &mut self,
        pos: Pos,
        name: &str,
        form: &str,
        case: &mut dyn FnMut(&mut Self) -> Result<()>,
        excludes: &mut dyn FnMut(&mut Self) -> Result<()>,
    ) -> Result<bool> {
        self.bump();
        let mut looped = true;
        let mut first = true;
        loop {
            self.skip();
            if self.eat(')') {
                return Ok(looped);
            }
            if !first {
                if !self.eat(',') {
                    return Err(grammar_error(pos, &format!("`{name}(...)` is not closed")));
                }
                self.skip();
                if self.eat(')') {
                    return Ok(looped);
                }
            }
            first = false;
            match self.peek() {
                Some('(') => {
                    self.bump();
                    self.skip();
                    case(self)?;
                }
                Some(c) if is_name_char(c) => {
                    let key = self.option_key(pos, name)?;
                    match key.as_str() {
                        "excludes" => excludes(self)?,
                        "loop_after_dispatch" => {
                            looped = self.bool_option(pos, name, "loop_after_dispatch")?;
                        }
                        other => {
                            return Err(grammar_error(
                                pos,
                                &format!(
                                    "the `{name}(...)` option `{other}` is not supported \
                                     (`excludes` and `loop_after_dispatch` are)"
                                ),
                            ))
                        }
                    }
                }
                _ => {
                    return Err(grammar_error(
                        pos,
                        &format!("`{name}(...)` takes {form} cases and options"),
                    ))
                }
            }
        }
    }

    /// The rest of a dispatch case after its trigger: `, rule)`, as a reference to the rule
    /// (`bad`: the message of a malformed case, `no_name`: of a case without its rule).
    fn case_rule(&mut self, pos: Pos, bad: &str, no_name: &str) -> Result<Node> {
        self.skip();
        if !self.eat(',') {
            return Err(grammar_error(pos, bad));
        }
        self.skip();
        let rpos = self.pos();
        let Some(name) = self.name() else {
            return Err(grammar_error(pos, no_name));
        };
        self.skip();
        if !self.eat(')') {
            return Err(grammar_error(pos, bad));
        }
        Ok(Node::Ref {
            name,
            rule: usize::MAX,
            pos: rpos,
        })
    }

    /// llama.cpp's token reference `<[id]>`, at the `<`.
    fn token_ref(&mut self) -> Result<TokenRef> {
        let pos = self.pos();
        self.bump();
        self.bump();
        let id = match self.token_id(pos, "the token id is too large") {
            Some(id) if self.eat(']') && self.eat('>') => id?,
            _ => {
                return Err(grammar_error(
                    pos,
                    "a token reference is `<[id]>` (a token id)",
                ))
            }
        };
        Ok(TokenRef::Id(id))
    }

    /// A token id here (its digits), `None` when no digit is; `too_large`: the message of an id
    /// past `u64`.
    fn token_id(&mut self, pos: Pos, too_large: &str) -> Option<Result<u64>> {
        let mut digits = String::new();
        while let Some(c) = self.peek().filter(char::is_ascii_digit) {
            digits.push(c);
            self.bump();
        }
        (!digits.is_empty()).then(|| {
            digits
                .parse::<u64>()
                .map_err(|_| grammar_error(pos, too_large))
        })
    }

    /// A token named here: an id or a special token's text in quotes; `None` when neither
    /// starts here.
    fn token_item(&mut self, pos: Pos) -> Option<Result<TokenRef>> {
        if self.peek() == Some('"') {
            return Some(self.string().map(TokenRef::Text));
        }
        self.token_id(pos, "a token id is too large")
            .map(|r| r.map(TokenRef::Id))
    }

    /// The expression of special token `r` (see [`crate::atoms`]).
    fn atom(&mut self, r: TokenRef, pos: Pos) -> Result<Node> {
        let hir = self.atoms.atom(r).map_err(|e| grammar_error(pos, &e))?;
        Ok(Node::Regex {
            hir: Box::new(hir),
            nullable: false,
        })
    }

    /// A parenthesized list of tokens (ids or special tokens' texts), at the `(`.
    fn token_list(&mut self, pos: Pos, what: &str) -> Result<Vec<TokenRef>> {
        self.paren_list(
            pos,
            what,
            &format!("`{what}` is a list of tokens"),
            &format!("`{what}` lists token ids or special tokens' texts"),
            &mut |p: &mut Self| p.token_item(pos),
        )
    }

    /// xgrammar's `Token(id, ...)` built-in after its name, at the `(`: one of these special
    /// tokens (ids or texts).
    fn token_macro(&mut self, pos: Pos) -> Result<Node> {
        let refs = self.token_list(pos, "Token(...)")?;
        if refs.is_empty() {
            return Err(grammar_error(pos, "`Token()` names no token"));
        }
        let mut alts = Vec::with_capacity(refs.len());
        for r in refs {
            alts.push(self.atoms.atom(r).map_err(|e| grammar_error(pos, &e))?);
        }
        Ok(Node::Regex {
            hir: Box::new(Hir::alternation(alts)),
            nullable: false,
        })
    }

    /// xgrammar's `TokenTagDispatch((id, rule), ..., excludes=(id, ...),
    /// loop_after_dispatch=true)` built-in after its name, at the `(`: free text (any
    /// characters, never a special token) in which a trigger token goes on with its rule, and,
    /// with `loop_after_dispatch` (the default), free text again after it, any number of
    /// times. Triggers are special tokens; `excludes` must be special tokens too (never allowed
    /// in free text anyway).
    fn token_tag_dispatch_macro(&mut self, pos: Pos) -> Result<Node> {
        use crate::automata::freetext::FreeText;
        const BAD: &str = "a `TokenTagDispatch(...)` case is (token, rule)";
        let end = Node::Text {
            expr: Box::new(FreeText::new(&[], &[])?.end()?),
            nullable: true,
        };
        let mut cases = Vec::new();
        let looped = self.dispatch_args(
            pos,
            "TokenTagDispatch",
            "(token, rule)",
            &mut |p: &mut Self| {
                let Some(r) = p.token_item(pos) else {
                    return Err(grammar_error(pos, BAD));
                };
                let r = r?;
                let rule = p.case_rule(pos, BAD, BAD)?;
                let atom = p.atom(r, pos)?;
                cases.push(Node::Seq(vec![end.clone(), atom, rule]));
                Ok(())
            },
            &mut |p: &mut Self| {
                for r in p.token_list(pos, "excludes")? {
                    p.atoms.resolve(&r).map_err(|e| grammar_error(pos, &e))?;
                }
                Ok(())
            },
        )?;
        Ok(dispatch_node(cases, end, looped))
    }

    /// A parenthesized list of string literals (`()`, `("a")`, `("a",)`, `("a", "b")`), the
    /// value of option `what`.
    fn string_tuple(&mut self, pos: Pos, what: &str) -> Result<Vec<String>> {
        let shape = format!("`{what}` is a tuple of strings (`(\"a\", \"b\")`)");
        self.paren_list(pos, what, &shape, &shape, &mut |p: &mut Self| {
            (p.peek() == Some('"')).then(|| p.string())
        })
    }

    /// A parenthesized, comma-separated list (a comma after the last item allowed) of what
    /// `item` reads (`None`: no item starts here), at the `(`; `open` and `bad` are the
    /// messages of a missing `(` and of something not an item, `what` names the list.
    fn paren_list<T>(
        &mut self,
        pos: Pos,
        what: &str,
        open: &str,
        bad: &str,
        item: &mut dyn FnMut(&mut Self) -> Option<Result<T>>,
    ) -> Result<Vec<T>> {
        if !self.eat('(') {
            return Err(grammar_error(pos, open));
        }
        let mut out = Vec::new();
        loop {
            self.skip();
            if self.eat(')') {
                return Ok(out);
            }
            match item(self) {
                Some(x) => out.push(x?),
                None => return Err(grammar_error(pos, bad)),
            }
            self.skip();
            if !self.eat(',') {
                self.skip();
                if !self.eat(')') {
                    return Err(grammar_error(pos, &format!("`{what}` is not closed")));
                }
                return Ok(out);
            }
        }
    }

    /// xgrammar's `Substring("s1", "s2", ...)` built-in after its name, at the `(`: a run of
    /// consecutive strings of the list, `s_i s_i+1 ... s_j-1` for any `i <= j` (the empty
    /// string included; `Substring()` is the empty string alone). Written out, the runs hold
    /// each string once per run starting at or before it: at most
    /// [`MAX_SUBSTRING_BYTES`] bytes in all.
    fn substring_macro(&mut self, pos: Pos) -> Result<Node> {
        self.bump();
        let mut items: Vec<String> = Vec::new();
        loop {
            self.skip();
            if self.eat(')') {
                break;
            }
            if !items.is_empty() {
                if !self.eat(',') {
                    return Err(grammar_error(pos, "`Substring(...)` is not closed"));
                }
                self.skip();
            }
            match self.peek() {
                Some('"') => items.push(self.string()?),
                Some(c) if is_name_char(c) => {
                    let key = self.name().unwrap_or_default();
                    self.skip();
                    let what = if self.peek() == Some('=') {
                        format!("does not take named arguments (`{key}=`)")
                    } else {
                        "arguments must be string literals".to_string()
                    };
                    return Err(grammar_error(pos, &format!("`Substring(...)` {what}")));
                }
                None => return Err(grammar_error(pos, "`Substring(...)` is not closed")),
                Some(_) => {
                    return Err(grammar_error(
                        pos,
                        "`Substring(...)` arguments must be string literals",
                    ))
                }
            }
        }
        // each run from string i: s_i (s_i+1 (...)?)?
        let mut size = 0usize;
        let mut tail = 0usize;
        for s in items.iter().rev() {
            tail += s.len() + 1;
            size = size.saturating_add(tail);
        }
        if size > MAX_SUBSTRING_BYTES {
            return Err(grammar_error(
                pos,
                &format!(
                    "`Substring(...)` of {} strings is too large ({size} bytes written out; at \
                     most {MAX_SUBSTRING_BYTES})",
                    items.len()
                ),
            ));
        }
        let mut runs = vec![Hir::empty()];
        for i in 0..items.len() {
            let mut chain: Option<Hir> = None;
            for s in items[i..].iter().rev() {
                let lit = Hir::literal(s.as_bytes());
                chain = Some(match chain {
                    None => lit,
                    Some(rest) => Hir::concat(vec![lit, crate::automata::hir::opt(rest)]),
                });
            }
            runs.extend(chain);
        }
        Ok(Node::Regex {
            hir: Box::new(Hir::alternation(runs)),
            nullable: true,
        })
    }

    /// Spaces and tabs before a repetition operator (`"a" *`, `item {2, 3}`), as other GBNF
    /// readers accept them: skipped when `*`, `+`, `?` or `{` follows on the same line (none of
    /// them can start an item, so nothing else is read differently); left in place otherwise.
    fn blanks_before_operator(&mut self) {
        let mut k = 0;
        while matches!(self.peek_at(k), Some(' ' | '\t')) {
            k += 1;
        }
        if k > 0 && matches!(self.peek_at(k), Some('*' | '+' | '?' | '{')) {
            for _ in 0..k {
                self.bump();
            }
        }
    }

    /// An escape sequence at a `\`.
    fn escape(&mut self) -> Result<char> {
        let pos = self.pos();
        self.bump();
        let Some(c) = self.bump() else {
            return Err(grammar_error(
                pos,
                "an escape `\\` at the end of the grammar",
            ));
        };
        let digits = match c {
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '0' => return Ok('\0'),
            'a' => return Ok('\u{7}'),
            'f' => return Ok('\u{c}'),
            'v' => return Ok('\u{b}'),
            'e' => return Ok('\u{1b}'),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            c if c.is_ascii_punctuation() || c == ' ' => return Ok(c),
            c => return Err(grammar_error(pos, &format!("unknown escape `\\{c}`"))),
        };
        let mut v: u32 = 0;
        for _ in 0..digits {
            let Some(d) = self.peek().and_then(|d| d.to_digit(16)) else {
                return Err(grammar_error(
                    pos,
                    &format!("the escape `\\{c}` needs {digits} hexadecimal digits"),
                ));
            };
            self.bump();
            v = v * 16 + d;
        }
        char::from_u32(v).ok_or_else(|| {
            grammar_error(
                pos,
                &format!("the escape `\\{c}` names U+{v:04X}, which is not a Unicode character"),
            )
        })
    }
}

/// A free-text automaton's refusal (a sentence) as a grammar error at `pos`.
fn at_pos<T>(r: Result<T>, pos: Pos) -> Result<T> {
    r.map_err(|e| match e {
        crate::error::Error::InvalidArgument(m) => grammar_error(pos, &m),
        other => other,
    })
}

/// A dispatch built-in's language: with `looped`, any number of `cases`, then `end` (free
/// text); without, `end` or one case.
fn dispatch_node(mut cases: Vec<Node>, end: Node, looped: bool) -> Node {
    if cases.is_empty() {
        end
    } else if looped {
        Node::Seq(vec![
            Node::Rep {
                sub: Box::new(Node::Alt(cases)),
                min: 0,
                max: None,
            },
            end,
        ])
    } else {
        cases.insert(0, end);
        Node::Alt(cases)
    }
}
