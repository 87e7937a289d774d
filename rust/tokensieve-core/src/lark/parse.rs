//! Lark text → definitions: rules (lowercase names) and terminals (uppercase names), each an
//! [`Ex`] tree, and the directives (`%ignore`, `%import common`, `%llguidance`).
//!
//! Accepted: `name: alternatives` with `|` continuing on the next lines, `?name` / `!name`
//! (tree shaping only), `-> alias` (ignored), rule priorities `name.N` (they choose among
//! parse trees, never the language), `"strings"` (Python escapes, `i` suffix), `/regex/flags`
//! (`i`, `m`, `s`, `x`, `u`), `"a".."z"`, `( )`, `[ ]`, `?`, `*`, `+`, `~ n`, `~ n..m`,
//! `{n}`, `{n,}`, `{,m}`, `{n,m}`, `//` and `#` comments, rule attributes `capture`,
//! `stop_capture` and `temperature` (which do not change the language), `lazy`, `suffix` and
//! `stop` (read as `suffix`; the rule is then one lazy lexeme), llguidance's parametric rules
//! (`name::_`, `%if`, `name::expr`; expanded by [`super::param`]) and its terminal operators
//! `&` (intersection, looser than a sequence, tighter than `|`) and prefix `~` (complement
//! over bytes, tighter than the repetitions). Refused by name, with a position: templates,
//! `%declare`, `%override`, `%extend`, imports other than `common`, terminal priorities,
//! `stop=""` and `max_tokens`, token sets `<[a-b,...]>`, `@grammar` references.

use super::param::{Cmp, Cond, PExpr, Range};
use crate::ebnf::{grammar_error, Pos};
use crate::error::Result;

/// A Lark expression.
#[derive(Clone, Debug)]
pub(crate) enum Ex {
    Seq(Vec<Ex>),
    Alt(Vec<Ex>),
    Rep(Box<Ex>, u32, Option<u32>),
    /// a string literal (`ci`: the `i` suffix)
    Lit {
        text: String,
        ci: bool,
    },
    /// a `/regex/` with its flags
    Re {
        pattern: String,
        flags: String,
        pos: Pos,
    },
    /// `"a".."z"`
    Range(char, char),
    /// a rule or terminal name
    Name(String, Pos),
    /// `%regex { "substring_*": ... }`: the contiguous runs of these chunks (and the empty
    /// string)
    Substring(Vec<String>),
    /// a special token: `<|name|>` by its text, `<[id]>` by id
    Special(crate::atoms::TokenRef, Pos),
    /// `A & B`: the strings of all (llguidance's terminal operator)
    And(Vec<Ex>),
    /// `~A`: every byte string not in it (llguidance's terminal operator)
    Not(Box<Ex>),
    /// `%json { schema }`: a JSON value the schema accepts
    Json(serde_json::Value, Pos),
    /// `name::expr`: parametric rule `name` for the parameter `expr` computes (see
    /// [`super::param`])
    Call(String, PExpr, Pos),
    /// an alternative of a parametric rule kept only where `%if` holds
    If(Box<Ex>, Cond, Pos),
}

/// One definition as written.
pub(crate) struct Def {
    pub name: String,
    pub pos: Pos,
    pub body: Ex,
    /// `name[lazy]` or `name[suffix=...]`: the rule is one lazy lexeme
    pub lazy: bool,
    /// `name[suffix=X]`: X follows the body inside the lexeme
    pub suffix: Option<Ex>,
    /// `name::_`: a parametric rule (see [`super::param`])
    pub param: bool,
}

/// The grammar as written.
#[derive(Default)]
pub(crate) struct Text {
    pub rules: Vec<Def>,
    pub terminals: Vec<Def>,
    /// `%ignore` expressions
    pub ignore: Vec<(Ex, Pos)>,
    /// `%import common.NAME -> ALIAS`: (name in common, name here, position)
    pub imports: Vec<(String, String, Pos)>,
    /// `%llguidance {"allow_initial_skip": true}`: ignored lexemes may open the text too
    pub initial_skip: bool,
    /// `%llguidance {"ignore_once": true}` (or `"skip_repetition": "once"`): at most one
    /// ignored lexeme between two others
    pub ignore_once: bool,
}

/// Groups nest at most this deep.
const MAX_DEPTH: u32 = 200;
/// Largest repetition bound.
const MAX_COUNT: u64 = 100_000;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Name(String),
    Str(String, bool),
    Re(String, String),
    Num(u64),
    Punct(&'static str),
    Directive(String),
    /// a JSON object after `%json`, `%regex` or `%llguidance`
    Json(serde_json::Value),
    Special(String),
    Nl,
}

struct Lexed {
    toks: Vec<(Tok, Pos)>,
}

fn err<T>(pos: Pos, msg: impl AsRef<str>) -> Result<T> {
    Err(grammar_error(pos, msg.as_ref()))
}

const PUNCTS: &[&str] = &[
    "->", "..", ":", "|", "(", ")", "[", "]", "{", "}", "?", "*", "+", "~", ",", "=", "&", "!",
    ".", "@", "-",
];

fn lex(text: &str) -> Result<Lexed> {
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1u32, 1u32);
    let mut toks = Vec::new();
    let adv = |i: &mut usize, line: &mut u32, col: &mut u32, c: char| {
        *i += 1;
        if c == '\n' {
            *line += 1;
            *col = 1;
        } else {
            *col += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let pos = Pos { line, col };
        if c == '\n' {
            toks.push((Tok::Nl, pos));
            adv(&mut i, &mut line, &mut col, c);
            continue;
        }
        if c.is_whitespace() {
            adv(&mut i, &mut line, &mut col, c);
            continue;
        }
        if c == '#' || (c == '/' && chars.get(i + 1) == Some(&'/')) {
            while i < chars.len() && chars[i] != '\n' {
                {
                    let ch = chars[i];
                    adv(&mut i, &mut line, &mut col, ch);
                }
            }
            continue;
        }
        if c == '"' {
            adv(&mut i, &mut line, &mut col, c);
            let mut s = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return err(pos, "a string is not closed");
                };
                if d == '\n' {
                    return err(pos, "a string is not closed on its line");
                }
                adv(&mut i, &mut line, &mut col, d);
                if d == '"' {
                    break;
                }
                if d == '\\' {
                    let Some(&e) = chars.get(i) else {
                        return err(pos, "a string is not closed");
                    };
                    let epos = Pos { line, col };
                    adv(&mut i, &mut line, &mut col, e);
                    let hex = |n: usize, i: &mut usize, line: &mut u32, col: &mut u32| {
                        let mut v = 0u32;
                        for _ in 0..n {
                            let h = chars.get(*i).and_then(|h| h.to_digit(16));
                            let Some(h) = h else {
                                return err(epos, "a \\x, \\u or \\U escape needs hex digits");
                            };
                            v = v * 16 + h;
                            let ch = chars[*i];
                            adv(i, line, col, ch);
                        }
                        char::from_u32(v)
                            .map_or_else(|| err(epos, "the escape names no Unicode character"), Ok)
                    };
                    match e {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        'r' => s.push('\r'),
                        'f' => s.push('\x0c'),
                        'v' => s.push('\x0b'),
                        'a' => s.push('\x07'),
                        'b' => s.push('\x08'),
                        '0' => s.push('\0'),
                        '\\' | '"' | '\'' => s.push(e),
                        'x' => s.push(hex(2, &mut i, &mut line, &mut col)?),
                        'u' => s.push(hex(4, &mut i, &mut line, &mut col)?),
                        'U' => s.push(hex(8, &mut i, &mut line, &mut col)?),
                        '\n' => {}
                        // as Python reads an unknown escape: the backslash stays
                        other => {
                            s.push('\\');
                            s.push(other);
                        }
                    }
                    continue;
                }
                s.push(d);
            }
            let ci = chars.get(i) == Some(&'i')
                && !chars
                    .get(i + 1)
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_');
            if ci {
                adv(&mut i, &mut line, &mut col, 'i');
            }
            toks.push((Tok::Str(s, ci), pos));
            continue;
        }
        if c == '/' {
            adv(&mut i, &mut line, &mut col, c);
            let mut s = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return err(pos, "a /regex/ is not closed");
                };
                if d == '\n' {
                    return err(pos, "a /regex/ is not closed on its line");
                }
                adv(&mut i, &mut line, &mut col, d);
                if d == '/' {
                    break;
                }
                if d == '\\' && chars.get(i) == Some(&'/') {
                    s.push('/');
                    adv(&mut i, &mut line, &mut col, '/');
                    continue;
                }
                if d == '\\' {
                    if let Some(&e) = chars.get(i) {
                        s.push('\\');
                        s.push(e);
                        adv(&mut i, &mut line, &mut col, e);
                        continue;
                    }
                }
                s.push(d);
            }
            let mut flags = String::new();
            while let Some(&f) = chars.get(i) {
                if !f.is_ascii_alphabetic() {
                    break;
                }
                flags.push(f);
                adv(&mut i, &mut line, &mut col, f);
            }
            toks.push((Tok::Re(s, flags), pos));
            continue;
        }
        if c == '%' {
            adv(&mut i, &mut line, &mut col, c);
            let mut name = String::new();
            while let Some(&d) = chars.get(i) {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                name.push(d);
                adv(&mut i, &mut line, &mut col, d);
            }
            if name.is_empty() {
                return err(
                    pos,
                    "`%` must start a directive (`%ignore`, `%import`, ...)",
                );
            }
            let takes_json = matches!(
                name.as_str(),
                "json" | "regex" | "llguidance" | "grammar_options"
            );
            toks.push((Tok::Directive(name), pos));
            if takes_json {
                while i < chars.len() && chars[i].is_whitespace() {
                    {
                        let ch = chars[i];
                        adv(&mut i, &mut line, &mut col, ch);
                    }
                }
                let jpos = Pos { line, col };
                if chars.get(i) != Some(&'{') {
                    return err(jpos, "the directive needs a JSON object `{ ... }`");
                }
                // the balanced object, strings skipped
                let start = i;
                let (mut depth, mut in_str, mut esc) = (0i32, false, false);
                while i < chars.len() {
                    let d = chars[i];
                    adv(&mut i, &mut line, &mut col, d);
                    if in_str {
                        if esc {
                            esc = false;
                        } else if d == '\\' {
                            esc = true;
                        } else if d == '"' {
                            in_str = false;
                        }
                        continue;
                    }
                    match d {
                        '"' => in_str = true,
                        '{' | '[' => depth += 1,
                        '}' | ']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let body: String = chars[start..i].iter().collect();
                let v: serde_json::Value = serde_json::from_str(&body).or_else(|_| {
                    err(
                        jpos,
                        "the JSON object after the directive is not valid JSON",
                    )
                })?;
                toks.push((Tok::Json(v), jpos));
            }
            continue;
        }
        if c == '<' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '>' && chars[j] != '\n' {
                j += 1;
            }
            if chars.get(j) == Some(&'>') {
                let s: String = chars[i + 1..j].iter().collect();
                while i <= j {
                    {
                        let ch = chars[i];
                        adv(&mut i, &mut line, &mut col, ch);
                    }
                }
                toks.push((Tok::Special(s), pos));
                continue;
            }
            return err(
                pos,
                "`<` must start a special token `<name>` closed on its line",
            );
        }
        if c == '0'
            && matches!(chars.get(i + 1), Some('x') | Some('X'))
            && chars.get(i + 2).is_some_and(|d| d.is_ascii_hexdigit())
        {
            adv(&mut i, &mut line, &mut col, '0');
            adv(&mut i, &mut line, &mut col, 'x');
            let mut v: u64 = 0;
            while let Some(d) = chars.get(i).and_then(|d| d.to_digit(16)) {
                if v >> 60 != 0 {
                    return err(pos, "the number does not fit 64 bits");
                }
                v = v << 4 | u64::from(d);
                let ch = chars[i];
                adv(&mut i, &mut line, &mut col, ch);
            }
            toks.push((Tok::Num(v), pos));
            continue;
        }
        if c.is_ascii_digit() {
            let mut v: u64 = 0;
            while let Some(d) = chars.get(i).and_then(|d| d.to_digit(10)) {
                v = v.saturating_mul(10).saturating_add(u64::from(d));
                {
                    let ch = chars[i];
                    adv(&mut i, &mut line, &mut col, ch);
                }
            }
            toks.push((Tok::Num(v), pos));
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let mut s = String::new();
            while let Some(&d) = chars.get(i) {
                if !(d.is_alphanumeric() || d == '_' || d == '-') {
                    break;
                }
                // `-` inside a name, not `->`
                if d == '-' && chars.get(i + 1) == Some(&'>') {
                    break;
                }
                s.push(d);
                adv(&mut i, &mut line, &mut col, d);
            }
            toks.push((Tok::Name(s), pos));
            continue;
        }
        if c == '\'' {
            return err(
                pos,
                "single-quoted strings are not Lark syntax: use \"...\"",
            );
        }
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) else {
            return err(pos, format!("unexpected character {c:?}"));
        };
        for ch in p.chars() {
            adv(&mut i, &mut line, &mut col, ch);
        }
        toks.push((Tok::Punct(p), pos));
    }
    Ok(Lexed { toks })
}

struct P {
    toks: Vec<(Tok, Pos)>,
    i: usize,
    /// open groups: newlines inside them are blanks
    depth: u32,
    end: Pos,
    /// reading the body of a parametric rule (its alternatives may end in `%if`)
    param_rule: bool,
}

fn is_terminal_name(n: &str) -> bool {
    let n = n.trim_start_matches('_');
    n.chars().next().is_some_and(|c| c.is_uppercase()) && !n.chars().any(|c| c.is_lowercase())
}

impl P {
    fn peek(&mut self) -> Option<&Tok> {
        if self.depth > 0 {
            while matches!(self.toks.get(self.i), Some((Tok::Nl, _))) {
                self.i += 1;
            }
        }
        self.toks.get(self.i).map(|t| &t.0)
    }
    fn pos(&mut self) -> Pos {
        self.peek();
        self.toks.get(self.i).map_or(self.end, |t| t.1)
    }
    fn next(&mut self) -> Option<(Tok, Pos)> {
        self.peek();
        let t = self.toks.get(self.i).cloned();
        self.i += 1;
        t
    }
    fn is(&mut self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn eat(&mut self, p: &str) -> bool {
        let yes = self.is(p);
        if yes {
            self.i += 1;
        }
        yes
    }
    fn expect(&mut self, p: &str, what: &str) -> Result<()> {
        if self.eat(p) {
            return Ok(());
        }
        let pos = self.pos();
        err(pos, format!("expected `{p}` {what}"))
    }
    fn skip_nl(&mut self) {
        while matches!(self.toks.get(self.i), Some((Tok::Nl, _))) {
            self.i += 1;
        }
    }
    /// Whether the next line goes on with `|` (a rule's alternatives across lines).
    fn continues(&mut self) -> bool {
        let mut j = self.i;
        while matches!(self.toks.get(j), Some((Tok::Nl, _))) {
            j += 1;
        }
        if matches!(self.toks.get(j), Some((Tok::Punct("|"), _))) {
            self.i = j;
            return true;
        }
        false
    }
    fn num(&mut self, what: &str) -> Result<u32> {
        let pos = self.pos();
        match self.next() {
            Some((Tok::Num(n), _)) if n <= MAX_COUNT => Ok(n as u32),
            Some((Tok::Num(_), _)) => err(pos, format!("{what} is larger than {MAX_COUNT}")),
            _ => err(pos, format!("expected a number ({what})")),
        }
    }

    fn expansions(&mut self) -> Result<Ex> {
        let mut alts = vec![self.alternative()?];
        loop {
            if self.eat("|") || (self.depth == 0 && self.continues() && self.eat("|")) {
                alts.push(self.alternative()?);
            } else {
                break;
            }
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Ex::Seq(Vec::new()))
        } else {
            Ex::Alt(alts)
        })
    }

    /// An alternative, with its `%if` condition in a parametric rule's body.
    fn alternative(&mut self) -> Result<Ex> {
        let x = self.alias()?;
        if !matches!(self.peek(), Some(Tok::Directive(d)) if d == "if") {
            return Ok(x);
        }
        let pos = self.pos();
        if !self.param_rule || self.depth > 0 {
            return err(
                pos,
                "`%if` stands only at the end of an alternative of a parametric rule \
                 (`name::_: ...`)",
            );
        }
        self.i += 1;
        let c = self.cond(0)?;
        Ok(Ex::If(Box::new(x), c, pos))
    }

    /// A bit range: `_` or `[x:y]` (`0 <= x < y <= 64`).
    fn range(&mut self) -> Result<Range> {
        let pos = self.pos();
        if matches!(self.peek(), Some(Tok::Name(n)) if n == "_") {
            self.i += 1;
            return Ok(Range { lo: 0, hi: 64 });
        }
        self.expect("[", "(a bit range `[x:y]` or `_`)")?;
        let lo = self.bits("the range's first bit")?;
        self.expect(":", "in the bit range `[x:y]`")?;
        let hi = self.bits("the range's end")?;
        self.expect("]", "to close the bit range")?;
        if lo >= hi || hi > 64 {
            return err(pos, "a bit range `[x:y]` needs 0 <= x < y <= 64");
        }
        Ok(Range { lo, hi })
    }

    /// A number up to 64 (a bit index or range end).
    fn bits(&mut self, what: &str) -> Result<u32> {
        let pos = self.pos();
        match self.next() {
            Some((Tok::Num(n), _)) if n <= 64 => Ok(n as u32),
            _ => err(pos, format!("expected a number from 0 to 64 ({what})")),
        }
    }

    /// A 64-bit value (decimal or `0x` hexadecimal).
    fn value(&mut self) -> Result<u64> {
        let pos = self.pos();
        match self.next() {
            Some((Tok::Num(n), _)) => Ok(n),
            _ => err(pos, "expected a number"),
        }
    }

    /// A bit index, below 64.
    fn bit(&mut self) -> Result<u32> {
        let pos = self.pos();
        let k = self.bits("a bit index")?;
        if k >= 64 {
            return err(pos, "a bit index is below 64");
        }
        Ok(k)
    }

    /// The parameter after `name::`.
    fn pexpr(&mut self) -> Result<PExpr> {
        let pos = self.pos();
        match self.next() {
            Some((Tok::Num(v), _)) => Ok(PExpr::Lit(v)),
            Some((Tok::Name(n), _)) if n == "_" => Ok(PExpr::Same),
            Some((Tok::Name(f), _)) => {
                self.expect("(", &format!("after `{f}`"))?;
                let e = match f.as_str() {
                    "set_bit" => PExpr::SetBit(self.bit()?),
                    "clear_bit" => PExpr::ClearBit(self.bit()?),
                    "bit_and" => PExpr::And(self.value()?),
                    "bit_or" => PExpr::Or(self.value()?),
                    "incr" => PExpr::Incr(self.range()?),
                    "decr" => PExpr::Decr(self.range()?),
                    _ => {
                        return err(
                            pos,
                            format!(
                                "unknown parameter function `{f}` (set_bit, clear_bit, bit_and, \
                                 bit_or, incr, decr)"
                            ),
                        )
                    }
                };
                self.expect(")", "to close the parameter")?;
                Ok(e)
            }
            _ => err(
                pos,
                "expected a parameter after `::` (a number, `_` or a function)",
            ),
        }
    }

    /// An `%if` condition.
    fn cond(&mut self, depth: u32) -> Result<Cond> {
        let pos = self.pos();
        if depth > MAX_DEPTH {
            return err(
                pos,
                format!("conditions nest more than {MAX_DEPTH} levels deep"),
            );
        }
        let Some((Tok::Name(f), _)) = self.next() else {
            return err(pos, "expected a condition after `%if`");
        };
        if f == "true" {
            if self.eat("(") {
                self.expect(")", "after `true(`")?;
            }
            return Ok(Cond::True);
        }
        self.expect("(", &format!("after `{f}`"))?;
        let c = match f.as_str() {
            "bit_clear" | "bit_set" => {
                let k = self.bit()?;
                let v = u64::from(f == "bit_set");
                Cond::Value(Cmp::Eq, Range { lo: k, hi: k + 1 }, v)
            }
            "is_ones" => Cond::Ones(self.range()?),
            "is_zeros" => Cond::Value(Cmp::Eq, self.range()?, 0),
            "and" | "or" => {
                let a = self.cond(depth + 1)?;
                self.expect(",", &format!("between the two conditions of `{f}`"))?;
                let b = self.cond(depth + 1)?;
                if f == "and" {
                    Cond::And(Box::new(a), Box::new(b))
                } else {
                    Cond::Or(Box::new(a), Box::new(b))
                }
            }
            "not" => Cond::Not(Box::new(self.cond(depth + 1)?)),
            _ => {
                let (count, cmp) = match f.strip_prefix("bit_count_") {
                    Some(s) => (true, Cmp::from_suffix(s)),
                    None => (false, Cmp::from_suffix(&f)),
                };
                let Some(cmp) = cmp else {
                    return err(pos, format!("unknown condition `{f}`"));
                };
                let r = self.range()?;
                self.expect(",", &format!("after the range of `{f}`"))?;
                let v = self.value()?;
                if count {
                    Cond::Count(cmp, r, v)
                } else {
                    Cond::Value(cmp, r, v)
                }
            }
        };
        self.expect(")", &format!("to close `{f}(...)`"))?;
        Ok(c)
    }

    fn alias(&mut self) -> Result<Ex> {
        // `&` binds tighter than `|`, looser than a sequence
        let mut conj = vec![self.sequence()?];
        while self.eat("&") {
            conj.push(self.sequence()?);
        }
        let x = if conj.len() == 1 {
            conj.pop().unwrap_or(Ex::Seq(Vec::new()))
        } else {
            Ex::And(conj)
        };
        if self.eat("->") {
            let pos = self.pos();
            if !matches!(self.next(), Some((Tok::Name(_), _))) {
                return err(pos, "expected a name after `->`");
            }
        }
        Ok(x)
    }

    fn sequence(&mut self) -> Result<Ex> {
        let mut items = Vec::new();
        loop {
            match self.peek() {
                None | Some(Tok::Nl) => break,
                Some(Tok::Punct(p)) if matches!(*p, "|" | ")" | "]" | "->" | "," | "&") => break,
                Some(Tok::Directive(d)) if d == "if" => break,
                _ => {}
            }
            items.push(self.expr()?);
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Ex::Seq(Vec::new()))
        } else {
            Ex::Seq(items)
        })
    }

    fn expr(&mut self) -> Result<Ex> {
        // `~` binds tighter than the repetitions: `~A+` is `(~A)+`
        let mut nots = 0;
        while self.is("~") {
            self.i += 1;
            nots += 1;
        }
        let start = self.pos();
        let mut x = self.atom()?;
        // `~~A` is `A`: at most one complement is kept
        if nots % 2 == 1 {
            x = Ex::Not(Box::new(x));
        }
        // every later walk recurses per operator: a chain of them is bounded
        let mut ops = 0u32;
        loop {
            ops += 1;
            if ops > MAX_DEPTH {
                return err(
                    start,
                    format!("more than {MAX_DEPTH} repetition operators on one expression"),
                );
            }
            let pos = self.pos();
            if self.eat("?") {
                x = Ex::Rep(Box::new(x), 0, Some(1));
            } else if self.eat("*") {
                x = Ex::Rep(Box::new(x), 0, None);
            } else if self.eat("+") {
                x = Ex::Rep(Box::new(x), 1, None);
            } else if self.eat("~") {
                let a = self.num("the count after `~`")?;
                let b = if self.eat("..") {
                    self.num("the upper count after `..`")?
                } else {
                    a
                };
                if b < a {
                    return err(pos, "the repetition's upper count is below its lower count");
                }
                x = Ex::Rep(Box::new(x), a, Some(b));
            } else if self.is("{") {
                self.i += 1;
                let a = if matches!(self.peek(), Some(Tok::Num(_))) {
                    Some(self.num("the repetition's lower count")?)
                } else {
                    None
                };
                let b = if self.eat(",") {
                    if matches!(self.peek(), Some(Tok::Num(_))) {
                        Some(self.num("the repetition's upper count")?)
                    } else {
                        None
                    }
                } else {
                    if a.is_none() {
                        return err(pos, "templates are not supported (`name{...}`)");
                    }
                    a
                };
                self.expect("}", "to close the repetition")?;
                let min = a.unwrap_or(0);
                if b.is_some_and(|b| b < min) {
                    return err(pos, "the repetition's upper count is below its lower count");
                }
                x = Ex::Rep(Box::new(x), min, b);
            } else {
                break;
            }
        }
        Ok(x)
    }

    fn group(&mut self, close: &str) -> Result<Ex> {
        let pos = self.pos();
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return err(
                pos,
                format!("groups nest more than {MAX_DEPTH} levels deep"),
            );
        }
        let x = self.expansions()?;
        self.expect(close, "to close the group")?;
        self.depth -= 1;
        Ok(x)
    }

    fn atom(&mut self) -> Result<Ex> {
        let pos = self.pos();
        let Some((t, _)) = self.next() else {
            return err(pos, "the definition ends too early");
        };
        match t {
            Tok::Punct("(") => self.group(")"),
            Tok::Punct("[") => Ok(Ex::Rep(Box::new(self.group("]")?), 0, Some(1))),
            Tok::Str(s, ci) => {
                if self.eat("..") {
                    let p2 = self.pos();
                    let Some((Tok::Str(e, _), _)) = self.next() else {
                        return err(p2, "expected a string after `..`");
                    };
                    let (mut a, mut b) = (s.chars(), e.chars());
                    match (a.next(), a.next(), b.next(), b.next()) {
                        (Some(x), None, Some(y), None) if x <= y => Ok(Ex::Range(x, y)),
                        _ => err(
                            pos,
                            "a range `\"a\"..\"z\"` needs two single characters in order",
                        ),
                    }
                } else {
                    Ok(Ex::Lit { text: s, ci })
                }
            }
            Tok::Re(pattern, flags) => Ok(Ex::Re {
                pattern,
                flags,
                pos,
            }),
            Tok::Name(n) => {
                if parametric(self) {
                    self.i += 2;
                    let e = self.pexpr()?;
                    return Ok(Ex::Call(n, e, pos));
                }
                if self.is("{") {
                    // `name{2,3}` is a repetition; `name{a, b}` a template
                    let nxt = self.toks.get(self.i + 1).map(|t| &t.0);
                    if !matches!(nxt, Some(Tok::Num(_)) | Some(Tok::Punct(","))) {
                        return err(pos, format!("templates are not supported (`{n}{{...}}`)"));
                    }
                }
                Ok(Ex::Name(n, pos))
            }
            Tok::Directive(d) if d == "regex" => {
                let jpos = self.pos();
                let Some((Tok::Json(v), _)) = self.next() else {
                    return err(jpos, "`%regex` needs a JSON object");
                };
                substring(&v, jpos)
            }
            Tok::Directive(d) if d == "json" => {
                let jpos = self.pos();
                let Some((Tok::Json(v), _)) = self.next() else {
                    return err(jpos, "`%json` needs a JSON Schema object");
                };
                Ok(Ex::Json(v, pos))
            }
            Tok::Directive(d) if d == "lark" => {
                err(pos, "nested grammars (`%lark { ... }`) are not supported")
            }
            Tok::Directive(d) => err(pos, format!("`%{d}` cannot stand inside a definition")),
            Tok::Special(s) => special(&s, pos),
            Tok::Punct("@") => err(
                pos,
                "references to other grammars (`@name`) are not supported",
            ),
            Tok::Punct("&") | Tok::Punct("~") => err(
                pos,
                "the `&` and `~` operators on terminals are not supported",
            ),
            Tok::Punct(p) => err(pos, format!("unexpected `{p}`")),
            Tok::Num(_) => err(pos, "unexpected number"),
            Tok::Json(_) => err(pos, "unexpected JSON object"),
            Tok::Nl => err(pos, "the definition ends too early"),
        }
    }
}

/// A special token `<|name|>` (by its text, brackets included) or `<[id]>`.
fn special(s: &str, pos: Pos) -> Result<Ex> {
    use crate::atoms::TokenRef;
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        return match inner.trim().parse::<u64>() {
            Ok(id) => Ok(Ex::Special(TokenRef::Id(id), pos)),
            Err(_) => err(
                pos,
                format!(
                    "the token set `<[{inner}]>` is not supported (one token id, `<[id]>`, \
                     is): any of several tokens is a choice of where a token ends, not text"
                ),
            ),
        };
    }
    if s.is_empty() {
        return err(pos, "`<>` names no special token");
    }
    Ok(Ex::Special(TokenRef::Text(format!("<{s}>")), pos))
}

/// `%regex { "substring_chunks" | "substring_words" | "substring_chars": ... }`.
fn substring(v: &serde_json::Value, pos: Pos) -> Result<Ex> {
    let Some(o) = v.as_object() else {
        return err(pos, "`%regex` needs a JSON object");
    };
    if o.len() != 1 {
        return err(
            pos,
            "`%regex` takes exactly one of substring_chunks, substring_words, substring_chars",
        );
    }
    let (k, val) = o.iter().next().expect("one key");
    let chunks: Vec<String> = match (k.as_str(), val) {
        ("substring_chunks", serde_json::Value::Array(xs)) => {
            let mut out = Vec::new();
            for x in xs {
                let Some(s) = x.as_str() else {
                    return err(pos, "substring_chunks must be a list of strings");
                };
                out.push(s.to_string());
            }
            out
        }
        ("substring_chars", serde_json::Value::String(s)) => {
            s.chars().map(|c| c.to_string()).collect()
        }
        ("substring_words", serde_json::Value::String(s)) => words(s),
        ("substring_chunks" | "substring_chars" | "substring_words", _) => {
            return err(pos, format!("`{k}` has the wrong type"))
        }
        _ => return err(pos, format!("`%regex` key `{k}` is not supported")),
    };
    if chunks.len() > 10_000 {
        return err(pos, "`%regex` substring lists more than 10,000 chunks");
    }
    Ok(Ex::Substring(chunks))
}

/// Words and the characters between them as chunks: runs of alphanumerics, each other
/// character on its own.
fn words(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if c.is_alphanumeric() || c == '_' {
            cur.push(c);
        } else {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Parse the grammar text.
pub(crate) fn parse(text: &str) -> Result<Text> {
    let lexed = lex(text)?;
    let lines = text.lines().count() as u32;
    let mut p = P {
        toks: lexed.toks,
        i: 0,
        depth: 0,
        param_rule: false,
        end: Pos {
            line: lines.max(1),
            col: 1,
        },
    };
    let mut out = Text::default();
    loop {
        p.skip_nl();
        let pos = p.pos();
        let Some((t, _)) = p.next() else { break };
        match t {
            Tok::Directive(d) => match d.as_str() {
                "ignore" => {
                    let x = p.expansions()?;
                    out.ignore.push((x, pos));
                }
                "import" => import(&mut p, &mut out, pos)?,
                "llguidance" | "grammar_options" => {
                    let Some((Tok::Json(v), _)) = p.next() else {
                        return err(pos, format!("`%{d}` needs a JSON object"));
                    };
                    let Some(o) = v.as_object() else {
                        return err(pos, format!("`%{d}` needs a JSON object"));
                    };
                    for (k, v) in o {
                        match (k.as_str(), v) {
                            ("allow_initial_skip", serde_json::Value::Bool(b)) => {
                                out.initial_skip = *b
                            }
                            ("ignore_once", serde_json::Value::Bool(b)) => out.ignore_once = *b,
                            ("skip_repetition", serde_json::Value::String(s))
                                if s == "once" || s == "many" =>
                            {
                                out.ignore_once = s == "once"
                            }
                            // these change how masks are computed or sampled, not the language
                            ("no_forcing", serde_json::Value::Bool(_)) => {}
                            // text is UTF-8 already (its `true` would let lexemes hold other
                            // bytes)
                            ("allow_invalid_utf8", serde_json::Value::Bool(false)) => {}
                            _ => {
                                return err(
                                    pos,
                                    format!(
                                    "the `%{d}` option `{k}` (with this value) is not supported"
                                ),
                                )
                            }
                        }
                    }
                }
                "declare" | "override" | "extend" => {
                    return err(pos, format!("`%{d}` is not supported"));
                }
                other => return err(pos, format!("unknown directive `%{other}`")),
            },
            Tok::Punct("?") | Tok::Punct("!") => {
                let pos2 = p.pos();
                let Some((Tok::Name(n), _)) = p.next() else {
                    return err(pos2, "expected a rule name");
                };
                definition(&mut p, &mut out, n, pos)?;
            }
            Tok::Name(n) => definition(&mut p, &mut out, n, pos)?,
            _ => return err(pos, "expected a definition (`name: ...`) or a directive"),
        }
        match p.peek() {
            None | Some(Tok::Nl) => {}
            _ => {
                let pos = p.pos();
                return err(pos, "unexpected text after the end of the definition");
            }
        }
    }
    Ok(out)
}

/// Whether `::` follows (llguidance's parametric rules, `name::param`).
fn parametric(p: &mut P) -> bool {
    p.is(":") && matches!(p.toks.get(p.i + 1), Some((Tok::Punct(":"), _)))
}

fn definition(p: &mut P, out: &mut Text, name: String, pos: Pos) -> Result<()> {
    let terminal = is_terminal_name(&name);
    let param = parametric(p);
    if param {
        p.i += 2;
        let ppos = p.pos();
        if !matches!(p.next(), Some((Tok::Name(u), _)) if u == "_") {
            return err(
                ppos,
                format!("a parametric rule is defined as `{name}::_: ...`"),
            );
        }
        if terminal {
            return err(pos, format!("terminals cannot be parametric (`{name}`)"));
        }
        if p.is("[") {
            return err(
                pos,
                format!("a parametric rule takes no attributes (`{name}::_[...]`)"),
            );
        }
    }
    if p.is("{") {
        return err(
            pos,
            format!("templates are not supported (`{name}{{...}}`)"),
        );
    }
    let (mut lazy, mut suffix, mut stop, mut stop_capture) = (false, None, false, false);
    if p.eat("[") {
        // attributes
        let mut seen: Vec<String> = Vec::new();
        loop {
            let apos = p.pos();
            let Some((Tok::Name(k), _)) = p.next() else {
                return err(apos, "expected an attribute name");
            };
            let mut value = None;
            let mut numeric = false;
            if p.eat("=") {
                // the value: a string, a number, a name or a regex
                let vpos = p.pos();
                value = match p.next() {
                    Some((Tok::Str(text, ci), _)) => Some(Ex::Lit { text, ci }),
                    Some((Tok::Re(pattern, flags), _)) => Some(Ex::Re {
                        pattern,
                        flags,
                        pos: vpos,
                    }),
                    Some((Tok::Name(n), _)) => Some(Ex::Name(n, vpos)),
                    Some((Tok::Num(_), _)) => {
                        numeric = true;
                        None
                    }
                    _ => return err(vpos, format!("expected a value for the attribute `{k}`")),
                };
                // a decimal value such as 0.7
                if p.eat(".") {
                    let _ = p.next();
                }
            }
            if seen.contains(&k) {
                return err(apos, format!("the attribute `{k}` is given twice"));
            }
            seen.push(k.clone());
            let name_ok = |n: &str| {
                let mut c = n.chars();
                c.next().is_some_and(|f| f.is_alphabetic() || f == '_')
                    && c.all(|x| x.is_alphanumeric() || x == '_')
            };
            match k.as_str() {
                // names of captures and sampling temperatures: not the language
                "capture" => {
                    match &value {
                        None if !numeric => {}
                        Some(Ex::Lit { text, .. }) if name_ok(text) => {}
                        _ => return err(
                            apos,
                            "`capture` takes a capture name in quotes (letters, digits, `_`), or \
                             none",
                        ),
                    }
                }
                "temperature" => {
                    if !numeric {
                        return err(apos, "`temperature` takes a number");
                    }
                }
                "stop_capture" => {
                    match &value {
                        Some(Ex::Lit { text, .. }) if name_ok(text) => {}
                        _ => {
                            return err(
                                apos,
                                "`stop_capture` needs a capture name in quotes (letters, digits, \
                                 `_`)",
                            )
                        }
                    }
                    if stop_capture {
                        return err(apos, "a rule takes one `stop_capture`");
                    }
                    stop_capture = true;
                }
                "lazy" => lazy = true,
                "suffix" | "stop" => {
                    if suffix.is_some() {
                        return err(apos, "a rule takes one `suffix` or `stop`");
                    }
                    let v = match value {
                        Some(Ex::Lit { text, .. }) if text.is_empty() && k == "stop" => {
                            return err(
                                apos,
                                "`stop=\"\"` (a lexeme ended only by the end of the output) is \
                                 not supported",
                            )
                        }
                        Some(v) => v,
                        None => {
                            return err(
                                apos,
                                format!("`{k}` needs a string, a regex or a terminal"),
                            )
                        }
                    };
                    lazy = true;
                    stop = k == "stop";
                    suffix = Some(v);
                }
                "max_tokens" => {
                    return err(
                        apos,
                        "the attribute `max_tokens` is not supported: it bounds tokens, not text",
                    )
                }
                other => return err(apos, format!("the attribute `{other}` is not supported")),
            }
            if !p.eat(",") {
                break;
            }
        }
        p.expect("]", "to close the attributes")?;
        if stop_capture && suffix.is_none() {
            return err(
                pos,
                format!("`stop_capture` needs a `stop` or `suffix` on the same rule (`{name}`)"),
            );
        }
        if stop && terminal {
            return err(
                pos,
                format!("`stop` is an attribute of rules, not of terminals (`{name}`)"),
            );
        }
    }
    if p.eat(".") {
        let ppos = p.pos();
        let _ = p.eat("-");
        if !matches!(p.next(), Some((Tok::Num(_), _))) {
            return err(ppos, "expected a priority number after `.`");
        }
        if terminal {
            return err(
                pos,
                format!("terminal priorities are not supported (`{name}`)"),
            );
        }
    }
    p.expect(":", "after the name being defined")?;
    p.param_rule = param;
    let body = p.expansions();
    p.param_rule = false;
    let def = Def {
        name,
        pos,
        body: body?,
        lazy,
        suffix,
        param,
    };
    if terminal {
        out.terminals.push(def);
    } else {
        out.rules.push(def);
    }
    Ok(())
}

fn import(p: &mut P, out: &mut Text, pos: Pos) -> Result<()> {
    let npos = p.pos();
    let Some((Tok::Name(module), _)) = p.next() else {
        return err(
            npos,
            "expected a module after `%import` (only `common` is built in)",
        );
    };
    if module != "common" {
        return err(
            npos,
            format!("only `%import common` is supported, not `{module}`"),
        );
    }
    if p.eat(".") {
        let n2 = p.pos();
        let Some((Tok::Name(n), _)) = p.next() else {
            return err(n2, "expected a name after `common.`");
        };
        let alias = if p.eat("->") {
            let a2 = p.pos();
            let Some((Tok::Name(a), _)) = p.next() else {
                return err(a2, "expected a name after `->`");
            };
            a
        } else {
            n.clone()
        };
        out.imports.push((n, alias, pos));
        return Ok(());
    }
    p.expect("(", "or `.NAME` after `%import common`")?;
    p.depth += 1;
    loop {
        let n2 = p.pos();
        let Some((Tok::Name(n), _)) = p.next() else {
            return err(n2, "expected a name in the import list");
        };
        out.imports.push((n.clone(), n, pos));
        if !p.eat(",") {
            break;
        }
    }
    p.expect(")", "to close the import list")?;
    p.depth -= 1;
    Ok(())
}

/// Whether `name` names a terminal (uppercase, maybe after leading underscores).
pub(crate) fn names_terminal(name: &str) -> bool {
    is_terminal_name(name)
}
