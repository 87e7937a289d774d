//! Structural tags: the JSON that vLLM's and SGLang's tool calling send to describe an output
//! made of free text and tagged, constrained parts (the format xgrammar defined). A tag is read
//! here into one [`Expr`], built from the other front ends' expressions (JSON Schema, regex,
//! GBNF/EBNF) and from the free-text languages below, and compiled like any other constraint.
//!
//! Two shapes are read:
//! - `{"type": "structural_tag", "format": FORMAT}` (`type` optional), where FORMAT is a tree of
//!   nodes (see [`Builder::node`]);
//! - the older `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`, which is
//!   `triggered_tags` over tags whose content is `json_schema`.
//!
//! **Free text.** `any_text` and the text between the tags of `triggered_tags` are sets of
//! strings over all characters, read as raw UTF-8. Free text may not contain an excluded string
//! (a node's `excludes`, and the `end` strings of the nearest enclosing `tag`: so the text
//! inside a tag can never spell its end). In `triggered_tags`, the first place where a trigger
//! is complete ends the free text and starts a tag whose `begin` starts with that trigger; free
//! text may end anywhere else, also inside an unfinished trigger. These are regular languages:
//! one character automaton over the triggers and excluded strings (an Aho–Corasick automaton)
//! gives "free text with no trigger or excluded string in it" and, for each trigger, "free text
//! that ends where that trigger is first complete" ([`FreeText`]).
//!
//! Everything a tag holds is exact in the documented language of its front end; what is not
//! supported (the XML parameter styles, token-level nodes, `dispatch`, `any_text` bounds) is a
//! `GrammarError` that names it and its JSON path.

use serde_json::Value;

use crate::automata::expr::{self, Expr};
use crate::automata::freetext::FreeText;
use crate::automata::hir;
use crate::automata::spell::dot_all;
use std::cell::RefCell;

use crate::atoms::{AtomList, TokenRef};
use crate::error::{Error, Result};
use crate::json_schema::{JsonSchemaOptions, PropertyOrder, Whitespace};
use crate::vocab::Vocabulary;

/// Nodes nested deeper than this are refused (each level is a recursive call here).
pub const MAX_FORMAT_DEPTH: usize = 64;

/// A structural tag read into an expression.
pub(crate) struct Compiled {
    pub expr: Expr,
    /// The token ids of the atoms the expression reads, by number (see [`crate::atoms`]).
    pub atoms: Vec<u32>,
    /// The tag's JSON written back (its key order kept): the text of its source.
    pub written: String,
}

/// Reads a structural tag (JSON text) into its expression. `schema_opts` are the options of its
/// `json_schema` parts (each node's `any_order` and `max_whitespace_cnt` apply on top);
/// `vocab` resolves the special tokens it names (without one, naming a token is an error and
/// markers are text only).
pub(crate) fn compile(
    text: &str,
    schema_opts: &JsonSchemaOptions,
    vocab: Option<&Vocabulary>,
) -> Result<Compiled> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| error("", &format!("the structural tag is not valid JSON: {e}")))?;
    let specials = Specials::new(
        vocab
            .map(|v| {
                v.special_texts()
                    .filter(|&(_, id)| !v.is_eos(id))
                    .filter_map(|(t, id)| Some((std::str::from_utf8(t).ok()?.to_string(), id)))
                    .filter(|(t, _)| t.chars().count() >= 2)
                    .collect()
            })
            .unwrap_or_default(),
    );
    let b = Builder {
        schema_opts,
        atoms: RefCell::new(AtomList::new(vocab)),
        specials,
        built: RefCell::default(),
    };
    let expr = b.top(&value)?;
    let atoms = b.atoms.into_inner().into_ids();
    Ok(Compiled {
        expr,
        atoms,
        written: value.to_string(),
    })
}

/// A token as a tag names it: an id or a special token's text.
fn token_ref(v: Option<&Value>, at: &At) -> Result<TokenRef> {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .map(TokenRef::Id)
            .ok_or_else(|| error(&at.path, "a token id is a non-negative integer")),
        Some(Value::String(t)) if !t.is_empty() => Ok(TokenRef::Text(t.clone())),
        _ => Err(error(
            &at.path,
            "must be a token id or a special token's text",
        )),
    }
}

/// A free-text automaton's refusal (a sentence) as an error at `path`.
fn on<T>(r: Result<T>, path: &str) -> Result<T> {
    r.map_err(|e| match e {
        Error::InvalidArgument(m) => error(path, &m),
        other => other,
    })
}

fn error(path: &str, message: &str) -> Error {
    Error::StructuralTag {
        path: format!("${path}"),
        message: message.to_string(),
    }
}

struct Builder<'a> {
    schema_opts: &'a JsonSchemaOptions,
    /// The special tokens named so far (see [`crate::atoms`]).
    atoms: RefCell<AtomList<'a>>,
    /// The vocabulary's special tokens with a text (not EOS): a marker that holds one's text
    /// may be written with that token (see [`Builder::marker`]).
    specials: Specials,
    /// The `json_schema` nodes built so far, those met more than once with their expression
    /// (see [`Builder::json_schema`]).
    built: RefCell<rustc_hash::FxHashMap<String, Option<Expr>>>,
}

/// Special tokens' texts, found by the longest one a text starts with.
struct Specials {
    /// `(text, id)` by first byte, longest first within a first byte: where two overlap, a
    /// marker takes the longer one.
    texts: Vec<(String, u32)>,
    /// `texts[start[b]..start[b + 1]]` are the texts starting with byte `b`.
    start: Vec<u32>,
}

impl Specials {
    fn new(mut texts: Vec<(String, u32)>) -> Specials {
        texts.sort_by(|a, b| {
            (a.0.as_bytes()[0].cmp(&b.0.as_bytes()[0]))
                .then(b.0.len().cmp(&a.0.len()))
                .then(a.1.cmp(&b.1))
        });
        let mut start = vec![0u32; 257];
        for (t, _) in &texts {
            start[usize::from(t.as_bytes()[0]) + 1] += 1;
        }
        for b in 0..256 {
            start[b + 1] += start[b];
        }
        Specials { texts, start }
    }

    fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The longest special token's `(text, id)` that `text` starts with.
    fn longest_prefix(&self, text: &str) -> Option<(&str, u32)> {
        let b = usize::from(*text.as_bytes().first()?);
        self.texts[self.start[b] as usize..self.start[b + 1] as usize]
            .iter()
            .find(|(t, _)| text.starts_with(t.as_str()))
            .map(|(t, id)| (t.as_str(), *id))
    }
}

/// Where a node stands: its JSON path, its depth, and the `end` strings of the nearest
/// enclosing `tag` (the free text inside may not spell them).
#[derive(Clone)]
struct At<'p> {
    path: String,
    depth: usize,
    ends: &'p [String],
}

impl<'p> At<'p> {
    fn key(&self, k: &str) -> At<'p> {
        At {
            path: format!("{}.{k}", self.path),
            depth: self.depth + 1,
            ends: self.ends,
        }
    }

    fn index(&self, k: &str, i: usize) -> At<'p> {
        At {
            path: if k.is_empty() {
                format!("{}[{i}]", self.path)
            } else {
                format!("{}.{k}[{i}]", self.path)
            },
            depth: self.depth + 1,
            ends: self.ends,
        }
    }
}

impl Builder<'_> {
    fn top(&self, v: &Value) -> Result<Expr> {
        let Some(obj) = v.as_object() else {
            return Err(error("", "a structural tag is a JSON object"));
        };
        let root = At {
            path: String::new(),
            depth: 0,
            ends: &[],
        };
        if let Some(t) = obj.get("type") {
            if t.as_str() != Some("structural_tag") {
                return Err(error(".type", "must be \"structural_tag\""));
            }
        }
        if obj.contains_key("structures") {
            return self.legacy(obj, &root);
        }
        match obj.get("format") {
            Some(f @ Value::Object(_)) => self.node(f, &root.key("format")),
            Some(_) => Err(error(".format", "must be an object")),
            None => Err(error("", "has no `format` (nor the older `structures`)")),
        }
    }

    /// `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`: `triggered_tags`.
    fn legacy(&self, obj: &serde_json::Map<String, Value>, at: &At) -> Result<Expr> {
        let structures = array(obj.get("structures"), &at.key("structures"))?;
        let triggers = strings(obj.get("triggers"), &at.key("triggers"), true)?;
        let mut tags = Vec::new();
        for (i, s) in structures.iter().enumerate() {
            let a = at.index("structures", i);
            let Some(o) = s.as_object() else {
                return Err(error(&a.path, "a structure is an object"));
            };
            let begin = string(o.get("begin"), &a.key("begin"))?;
            let end = string(o.get("end"), &a.key("end"))?;
            let schema = o
                .get("schema")
                .ok_or_else(|| error(&a.path, "has no `schema`"))?;
            let ends = vec![end.to_string()];
            let inner = At {
                path: a.key("schema").path,
                depth: a.depth + 1,
                ends: &ends,
            };
            let content = self.schema(schema, None, None, &inner)?;
            let (begin_expr, begin_plain) = self.marker_checked(begin, &a.key("begin"))?;
            tags.push(Tag {
                begin_text: Some(begin.to_string()),
                begin_plain,
                begin: begin_expr,
                content,
                end: self.marker(end, &a.key("end"))?,
            });
        }
        self.triggered(&triggers, tags, &[], false, false, at)
    }

    /// A `json_schema` node: its schema in its parameter style. Nodes alike (the same text,
    /// depth and enclosing ends; tools whose parameters schemas are the same) are built at most
    /// twice and copied after, so that their contents are also one rule (see
    /// `automata::rules`); a node met once is not copied (a copy costs a good part of a build).
    fn json_schema(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<Expr> {
        let key = serde_json::to_string(o)
            .map(|text| format!("{text}\u{0}{}\u{0}{:?}", at.depth, at.ends))
            .ok();
        let Some(key) = key else {
            return self.json_schema_built(o, at);
        };
        if let Some(Some(x)) = self.built.borrow().get(&key) {
            return Ok(x.clone());
        }
        let x = self.json_schema_built(o, at)?;
        let mut built = self.built.borrow_mut();
        match built.get_mut(&key) {
            // met before: kept from now on
            Some(kept) => *kept = Some(x.clone()),
            None => {
                built.insert(key, None);
            }
        }
        Ok(x)
    }

    /// [`Builder::json_schema`], built.
    fn json_schema_built(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<Expr> {
        #[cfg(test)]
        tests::SCHEMA_BUILDS.with(|n| n.set(n.get() + 1));
        let style = match o.get("style") {
            None | Some(Value::Null) => "json",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(error(&at.key("style").path, "must be a string")),
        };
        let xml = match style {
            "json" => None,
            other => Some(XmlStyle::named(other).ok_or_else(|| {
                error(
                    &at.key("style").path,
                    &format!(
                        "the json_schema style `{other}` is not supported (json, \
                         qwen_xml, minimax_xml, deepseek_xml, deepseek_v4_1_xml, \
                         glm_xml, kimi_k3_xml and cohere_xml are)"
                    ),
                )
            })?),
        };
        if let Some(e) = o.get("excludes") {
            if !is_empty_list(e) {
                return Err(error(
                    &at.key("excludes").path,
                    "excluded strings inside a json_schema are not supported",
                ));
            }
        }
        let any_order = flag(o.get("any_order"), &at.key("any_order"))?;
        let ws = count(o.get("max_whitespace_cnt"), &at.key("max_whitespace_cnt"))?;
        let schema = o
            .get("json_schema")
            .ok_or_else(|| error(&at.path, "has no `json_schema`"))?;
        let at = at.key("json_schema");
        match xml {
            None => self.schema(schema, Some(any_order), ws, &at),
            Some(style) => {
                let x = Xml {
                    b: self,
                    style,
                    root: schema,
                    any_order,
                    ws,
                };
                x.params(&at)
            }
        }
    }

    /// One node of the format tree.
    fn node(&self, v: &Value, at: &At) -> Result<Expr> {
        if at.depth > MAX_FORMAT_DEPTH {
            return Err(error(
                &at.path,
                &format!("formats nested more than {MAX_FORMAT_DEPTH} deep"),
            ));
        }
        let Some(o) = v.as_object() else {
            return Err(error(&at.path, "a format is a JSON object"));
        };
        let kind = match o.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return Err(error(&at.path, "`type` must be a string")),
            // an untyped object with begin/content/end is a tag (as the engines send them)
            None if o.contains_key("begin") => "tag",
            None => return Err(error(&at.path, "a format needs a `type`")),
        };
        match kind {
            "const_string" => {
                let s = string(o.get("value"), &at.key("value"))?;
                self.marker(s, at)
            }
            "token" => self.token(o.get("token"), &at.key("token")),
            "json_schema" => self.json_schema(o, at),
            "qwen_xml_parameter" => {
                let schema = o
                    .get("json_schema")
                    .ok_or_else(|| error(&at.path, "has no `json_schema`"))?;
                let x = Xml {
                    b: self,
                    style: XmlStyle::named("qwen_xml").expect("a known style"),
                    root: schema,
                    any_order: false,
                    ws: None,
                };
                x.params(&at.key("json_schema"))
            }
            "grammar" => {
                let text = string(o.get("grammar"), &at.key("grammar"))?;
                let c = crate::ebnf::compile_with(
                    text,
                    &crate::ebnf::EbnfOptions::default(),
                    &mut self.atoms.borrow_mut(),
                )
                .map_err(|e| error(&at.key("grammar").path, &e.to_string()))?;
                Ok(c.expr)
            }
            "regex" => {
                let pattern = string(o.get("pattern"), &at.key("pattern"))?;
                let nest = crate::regex::RegexOptions::default().nest_limit;
                let h = crate::regex::parse_full_match(pattern, nest)
                    .map_err(|e| error(&at.key("pattern").path, &e.to_string()))?;
                Ok(Expr::Hir(h))
            }
            "any_text" => {
                if o.get("max_tokens").is_some_and(|b| !b.is_null()) {
                    return Err(error(
                        &at.key("max_tokens").path,
                        "`max_tokens` of any_text is not supported (`max_chars` is)",
                    ));
                }
                let max_chars = budget(o.get("max_chars"), &at.key("max_chars"))?;
                let excludes = excluded(o, at)?;
                let free = on(FreeText::new(&[], &excludes), &at.path)?;
                match max_chars {
                    None => on(free.end(), &at.path),
                    Some(n) => on(free.end_within(0, Some(n)), &at.key("max_chars").path),
                }
            }
            "dispatch" => {
                let rules = array(o.get("rules"), &at.key("rules"))?;
                if rules.is_empty() {
                    return Err(error(&at.key("rules").path, "must not be empty"));
                }
                let mut patterns = Vec::with_capacity(rules.len());
                let mut formats = Vec::with_capacity(rules.len());
                for (i, r) in rules.iter().enumerate() {
                    let a = at.index("rules", i);
                    match r.as_array().map(Vec::as_slice) {
                        Some([Value::String(p), f]) if !p.is_empty() => {
                            patterns.push(p.clone());
                            formats.push(self.node(f, &a.index("", 1))?);
                        }
                        _ => {
                            return Err(error(
                                &a.path,
                                "a rule is [pattern, format] (the pattern a non-empty string)",
                            ))
                        }
                    }
                }
                let looped = match o.get("loop") {
                    None | Some(Value::Null) => true,
                    other => flag(other, &at.key("loop"))?,
                };
                let excludes = excluded(o, at)?;
                let free = on(FreeText::new(&patterns, &excludes), &at.path)?;
                let mut dispatch = Vec::new();
                for (k, f) in formats.into_iter().enumerate() {
                    dispatch.extend(self.leads(&free, &patterns[k], k, f, at)?);
                }
                Ok(free_then(dispatch, on(free.end(), &at.path)?, looped))
            }
            "sequence" | "or" => {
                let elements = array(o.get("elements"), &at.key("elements"))?;
                if elements.is_empty() {
                    return Err(error(&at.key("elements").path, "must not be empty"));
                }
                let parts = elements
                    .iter()
                    .enumerate()
                    .map(|(i, e)| self.node(e, &at.index("elements", i)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(if kind == "sequence" {
                    expr::concat(parts)
                } else {
                    expr::alt(parts)
                })
            }
            "optional" | "star" | "plus" => {
                let c = self.content(o, at)?;
                Ok(match kind {
                    "optional" => expr::opt(c),
                    "star" => expr::rep(c, 0, None),
                    _ => expr::rep(c, 1, None),
                })
            }
            "repeat" => {
                let min = int(o.get("min"), &at.key("min"))?;
                let max = int(o.get("max"), &at.key("max"))?;
                if min < 0 || max < -1 || (max >= 0 && min > max) {
                    return Err(error(
                        &at.path,
                        &format!("repeat bounds min={min}, max={max} (max -1: no bound)"),
                    ));
                }
                let c = self.content(o, at)?;
                let clamp = |x: i64| u32::try_from(x).unwrap_or(u32::MAX);
                let max = (max >= 0 && max <= i64::from(i32::MAX)).then(|| clamp(max));
                Ok(expr::rep(c, clamp(min), max))
            }
            "tag" => {
                let t = self.tag(o, at)?;
                Ok(t.full())
            }
            "triggered_tags" => {
                let triggers = strings(o.get("triggers"), &at.key("triggers"), true)?;
                if triggers.is_empty() {
                    return Err(error(&at.key("triggers").path, "must not be empty"));
                }
                let tags = self.tags(o, at)?;
                let excludes = excluded(o, at)?;
                let alo = flag(o.get("at_least_one"), &at.key("at_least_one"))?;
                let saf = flag(o.get("stop_after_first"), &at.key("stop_after_first"))?;
                self.triggered(&triggers, tags, &excludes, alo, saf, at)
            }
            "tags_with_separator" => {
                let tags = self.tags(o, at)?;
                let sep = string(o.get("separator"), &at.key("separator"))?;
                let alo = flag(o.get("at_least_one"), &at.key("at_least_one"))?;
                let saf = flag(o.get("stop_after_first"), &at.key("stop_after_first"))?;
                let one = self.tag_alt(tags.into_iter().map(|t| self.branch(t)).collect());
                let some = if saf {
                    one
                } else {
                    Expr::List {
                        item: Box::new(one),
                        sep: Box::new(self.marker(sep, at)?),
                    }
                };
                Ok(if alo { some } else { expr::opt(some) })
            }
            "exclude_token" => Err(error(
                &at.path,
                "the format `exclude_token` (any one token but these) is not supported: where \
                 one token ends is not part of a text's language",
            )),
            "any_tokens" => {
                if o.get("max_tokens").is_some_and(|b| !b.is_null()) {
                    return Err(error(
                        &at.key("max_tokens").path,
                        "`max_tokens` of any_tokens is not supported",
                    ));
                }
                self.special_excludes(o, at)?;
                let excludes = excluded(o, at)?;
                on(on(FreeText::new(&[], &excludes), &at.path)?.end(), &at.path)
            }
            "token_triggered_tags" => {
                let triggers =
                    self.token_list(o.get("trigger_tokens"), &at.key("trigger_tokens"))?;
                if triggers.is_empty() {
                    return Err(error(&at.key("trigger_tokens").path, "must not be empty"));
                }
                let tags = self.tags(o, at)?;
                self.special_excludes(o, at)?;
                let excludes = excluded(o, at)?;
                let free = on(on(FreeText::new(&[], &excludes), &at.path)?.end(), &at.path)?;
                let mut full = Vec::with_capacity(tags.len());
                for (i, t) in tags.iter().enumerate() {
                    let starts = triggers.iter().any(|g| g.same_as(&t.begin));
                    if t.begin_text.is_some() || !starts {
                        return Err(error(
                            &at.index("tags", i).key("begin").path,
                            "a tag of token_triggered_tags begins with one of its trigger tokens",
                        ));
                    }
                    full.push(t.full());
                }
                let alo = flag(o.get("at_least_one"), &at.key("at_least_one"))?;
                let saf = flag(o.get("stop_after_first"), &at.key("stop_after_first"))?;
                let one_tag = wide_alt(full.clone());
                let dispatch: Vec<Expr> = full
                    .into_iter()
                    .map(|f| expr::concat(vec![free.clone(), f]))
                    .collect();
                Ok(match (alo, saf) {
                    (true, true) => one_tag,
                    (false, saf) => free_then(dispatch, free, !saf),
                    (true, false) => expr::concat(vec![one_tag, free_then(dispatch, free, true)]),
                })
            }
            "token_dispatch" => {
                let rules = array(o.get("rules"), &at.key("rules"))?;
                if rules.is_empty() {
                    return Err(error(&at.key("rules").path, "must not be empty"));
                }
                self.special_excludes(o, at)?;
                let excludes = excluded(o, at)?;
                let free = on(on(FreeText::new(&[], &excludes), &at.path)?.end(), &at.path)?;
                let mut dispatch = Vec::with_capacity(rules.len());
                for (i, r) in rules.iter().enumerate() {
                    let a = at.index("rules", i);
                    match r.as_array().map(Vec::as_slice) {
                        Some([t, f]) => {
                            let atom = self.token(Some(t), &a.index("", 0))?;
                            let f = self.node(f, &a.index("", 1))?;
                            dispatch.push(expr::concat(vec![free.clone(), atom, f]));
                        }
                        _ => return Err(error(&a.path, "a rule is [token, format]")),
                    }
                }
                let looped = match o.get("loop") {
                    None | Some(Value::Null) => true,
                    other => flag(other, &at.key("loop"))?,
                };
                Ok(free_then(dispatch, free, looped))
            }
            other => Err(error(&at.path, &format!("unknown format type `{other}`"))),
        }
    }

    /// The ways free text reaches trigger `k` (text `trigger`) and goes on with `then`: the
    /// trigger completed in the text; and, where the trigger starts with a special token's
    /// text, free text with no trigger in it, that token, then the rest of the trigger.
    fn leads(
        &self,
        free: &FreeText,
        trigger: &str,
        k: usize,
        then: Expr,
        at: &At,
    ) -> Result<Vec<Expr>> {
        let special = self.specials.longest_prefix(trigger);
        let lead = on(free.to_trigger(k), &at.path)?;
        let Some((text, id)) = special else {
            return Ok(lead
                .map(|l| expr::concat(vec![l, then]))
                .into_iter()
                .collect());
        };
        let atom = self.atom(TokenRef::Id(u64::from(id)), at)?;
        let by_token = |rest: Expr| -> Result<Expr> {
            Ok(expr::concat(vec![
                on(free.end(), &at.path)?,
                atom.clone(),
                self.marker(&trigger[text.len()..], at)?,
                rest,
            ]))
        };
        // (what follows is copied only when both ways lead to it)
        Ok(match lead {
            None => vec![by_token(then)?],
            Some(l) => vec![by_token(then.clone())?, expr::concat(vec![l, then])],
        })
    }

    /// A marker's text: as text, and each special token's text in it also as that token (a
    /// model writes its special markers as those tokens).
    fn marker(&self, text: &str, at: &At) -> Result<Expr> {
        Ok(self.marker_checked(text, at)?.0)
    }

    /// [`Builder::marker`], and whether the text holds no special token's text (the marker is
    /// then the text alone).
    fn marker_checked(&self, text: &str, at: &At) -> Result<(Expr, bool)> {
        if self.specials.is_empty() || text.is_empty() {
            return Ok((literal(text), true));
        }
        let mut found = false;
        let mut parts = Vec::new();
        let mut plain = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            match self.specials.longest_prefix(rest) {
                Some((t, id)) => {
                    found = true;
                    if !plain.is_empty() {
                        parts.push(literal(&std::mem::take(&mut plain)));
                    }
                    let atom = self.atom(TokenRef::Id(u64::from(id)), at)?;
                    parts.push(expr::alt(vec![literal(t), atom]));
                    rest = &rest[t.len()..];
                }
                None => {
                    let c = rest.chars().next().expect("not empty");
                    plain.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        if !plain.is_empty() {
            parts.push(literal(&plain));
        }
        Ok((expr::concat(parts), !found))
    }

    /// The atom of special token `r` (see [`crate::atoms`]).
    fn atom(&self, r: TokenRef, at: &At) -> Result<Expr> {
        self.atoms
            .borrow_mut()
            .atom(r)
            .map(Expr::Hir)
            .map_err(|e| error(&at.path, &e))
    }

    /// A `token` node's token: an id or a special token's text.
    fn token(&self, v: Option<&Value>, at: &At) -> Result<Expr> {
        self.atom(token_ref(v, at)?, at)
    }

    /// A list of tokens (ids or special tokens' texts) as their atoms.
    fn token_list(&self, v: Option<&Value>, at: &At) -> Result<Vec<Expr>> {
        array(v, at)?
            .iter()
            .enumerate()
            .map(|(i, t)| self.token(Some(t), &at.index("", i)))
            .collect()
    }

    /// A node's `exclude_tokens`: special tokens (never allowed in free text anyway); an
    /// ordinary token there is refused.
    fn special_excludes(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<()> {
        let a = at.key("exclude_tokens");
        let list = match o.get("exclude_tokens") {
            None | Some(Value::Null) => return Ok(()),
            v => array(v, &a)?,
        };
        for (i, t) in list.iter().enumerate() {
            let at = a.index("", i);
            let r = token_ref(Some(t), &at)?;
            self.atoms
                .borrow()
                .resolve(&r)
                .map_err(|e| error(&at.path, &e))?;
        }
        Ok(())
    }

    /// A tag's begin or end given as `{"type": "token", "token": ...}`.
    fn token_object(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<Expr> {
        if o.get("type").and_then(Value::as_str) != Some("token") {
            return Err(error(&at.path, "must be a string or a `token` format"));
        }
        self.token(o.get("token"), &at.key("token"))
    }

    fn content(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<Expr> {
        let c = o
            .get("content")
            .ok_or_else(|| error(&at.path, "has no `content`"))?;
        self.node(c, &at.key("content"))
    }

    fn tags(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<Vec<Tag>> {
        let list = array(o.get("tags"), &at.key("tags"))?;
        if list.is_empty() {
            return Err(error(&at.key("tags").path, "must not be empty"));
        }
        list.iter()
            .enumerate()
            .map(|(i, t)| {
                let a = at.index("tags", i);
                let Some(obj) = t.as_object() else {
                    return Err(error(&a.path, "a tag is an object"));
                };
                if let Some(ty) = obj.get("type") {
                    if ty.as_str() != Some("tag") {
                        return Err(error(&a.key("type").path, "must be \"tag\""));
                    }
                }
                self.tag(obj, &a)
            })
            .collect()
    }

    /// `begin content end` (`begin` a string or a token; `end` a string, a token or a
    /// non-empty list of strings, `""` allowed).
    fn tag(&self, o: &serde_json::Map<String, Value>, at: &At) -> Result<Tag> {
        let (begin_text, (begin, begin_plain)) = match o.get("begin") {
            Some(Value::String(s)) => (Some(s.clone()), self.marker_checked(s, &at.key("begin"))?),
            Some(Value::Object(b)) => (None, (self.token_object(b, &at.key("begin"))?, false)),
            _ => return Err(error(&at.key("begin").path, "must be a string or a token")),
        };
        let (ends, end): (Vec<String>, Expr) = match o.get("end") {
            Some(Value::Object(e)) => (Vec::new(), self.token_object(e, &at.key("end"))?),
            Some(Value::String(s)) => (vec![s.clone()], self.marker(s, &at.key("end"))?),
            Some(Value::Array(a)) if !a.is_empty() => {
                let ends = a
                    .iter()
                    .map(|e| {
                        e.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| error(&at.key("end").path, "holds a non-string"))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let alts = ends
                    .iter()
                    .map(|e| self.marker(e, &at.key("end")))
                    .collect::<Result<Vec<_>>>()?;
                (ends, expr::alt(alts))
            }
            _ => {
                return Err(error(
                    &at.key("end").path,
                    "must be a string, a token or a non-empty list of strings",
                ))
            }
        };
        let c = o
            .get("content")
            .ok_or_else(|| error(&at.path, "has no `content`"))?;
        let inner = At {
            path: at.key("content").path,
            depth: at.depth + 1,
            ends: &ends,
        };
        let content = self.node(c, &inner)?;
        // A tag's content is built when its begin is read, not when the tags around it are
        // entered (one tool's arguments among many; see `automata::rules`).
        let content = if content.is_plain() {
            content
        } else {
            Expr::Cut(Box::new(content))
        };
        Ok(Tag {
            begin_text,
            begin_plain,
            begin,
            end,
            content,
        })
    }

    /// A `json_schema` node's value (`true`: any JSON value).
    fn schema(
        &self,
        schema: &Value,
        any_order: Option<bool>,
        max_ws: Option<u32>,
        at: &At,
    ) -> Result<Expr> {
        let mut opts = self.schema_opts.clone();
        if any_order == Some(true) {
            opts.property_order = PropertyOrder::Any;
        }
        opts.whitespace = Whitespace::Pattern(match max_ws {
            Some(n) => format!("[ \\n\\t]{{0,{n}}}"),
            None => "[ \\n\\t]*".into(),
        });
        let schema = match schema {
            Value::Bool(true) => Value::Object(serde_json::Map::new()),
            Value::Bool(false) => {
                return Err(error(&at.path, "the schema `false` allows no value"));
            }
            Value::Object(_) => {
                let mut s = schema.clone();
                strict(&mut s);
                s
            }
            _ => return Err(error(&at.path, "a JSON Schema is an object or `true`")),
        };
        let big = crate::json_schema::needs_big_stack(&schema, &opts);
        let c = crate::json_schema::compile_on(&schema, &opts, big)
            .map_err(|e| error(&at.path, &e.to_string()))?;
        if !c.uniques.is_empty() {
            return Err(error(
                &at.path,
                "`uniqueItems` inside a structural tag is not supported",
            ));
        }
        Ok(c.expr)
    }

    /// A tag as a [`Branch`] of [`Builder::tag_alt`]: its begin (text where it is plain text),
    /// then its content and end.
    fn branch(&self, t: Tag) -> Branch {
        Branch {
            text: t.begin_text.filter(|_| t.begin_plain),
            head: t.begin,
            tail: expr::concat(vec![t.content, t.end]),
        }
    }

    /// The alternation of tags (one per tool). The tags whose begin is plain text share the
    /// texts' common prefixes ([`text_trie`]); the others are branches of their own.
    fn tag_alt(&self, branches: Vec<Branch>) -> Expr {
        let (texts, others): (Vec<Branch>, Vec<Branch>) =
            branches.into_iter().partition(|b| b.text.is_some());
        let mut alts: Vec<Expr> = others
            .into_iter()
            .map(|b| expr::concat(vec![b.head, b.tail]))
            .collect();
        if !texts.is_empty() {
            let mut items: Vec<(String, Expr)> = texts
                .into_iter()
                .map(|b| (b.text.expect("partitioned"), b.tail))
                .collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            // the trie stays whole: reading a begin from the point the texts part walks into
            // every branch at once (see `Expr::Inline`)
            alts.push(Expr::Inline(Box::new(text_trie(items, 0, 0))));
        }
        wide_alt(alts)
    }

    /// `triggered_tags`: free text in which each complete trigger starts one of its tags.
    fn triggered(
        &self,
        triggers: &[String],
        tags: Vec<Tag>,
        excludes: &[String],
        at_least_one: bool,
        stop_after_first: bool,
        at: &At,
    ) -> Result<Expr> {
        // each tag's begin starts with exactly one trigger
        let mut groups: Vec<Vec<Branch>> = triggers.iter().map(|_| Vec::new()).collect();
        let mut full = Vec::with_capacity(tags.len());
        for (i, t) in tags.into_iter().enumerate() {
            let a = at.index("tags", i).key("begin");
            let Some(begin) = &t.begin_text else {
                return Err(error(
                    &a.path,
                    "a tag of triggered_tags begins with text (a token begin is for \
                     token_triggered_tags)",
                ));
            };
            let matching: Vec<usize> = (0..triggers.len())
                .filter(|&k| begin.starts_with(triggers[k].as_str()))
                .collect();
            if matching.len() != 1 {
                return Err(error(
                    &a.path,
                    &format!(
                        "the begin {:?} must start with exactly one trigger ({} do)",
                        begin,
                        matching.len()
                    ),
                ));
            }
            let k = matching[0];
            let rest = &begin[triggers[k].len()..];
            let (head, plain) = self.marker_checked(rest, &a)?;
            let text = plain.then(|| rest.to_string());
            let tail = if at_least_one {
                let tail = expr::concat(vec![t.content.clone(), t.end.clone()]);
                full.push(self.branch(t)); // the first tag, with no text before it
                tail
            } else {
                expr::concat(vec![t.content, t.end])
            };
            groups[k].push(Branch { text, head, tail });
        }
        let free = on(FreeText::new(triggers, excludes), &at.path)?;
        let mut dispatch = Vec::new();
        for (k, g) in groups.into_iter().enumerate() {
            if g.is_empty() {
                continue; // a trigger no tag starts with: it only ends free text
            }
            dispatch.extend(self.leads(&free, &triggers[k], k, self.tag_alt(g), at)?);
        }
        let one_tag = self.tag_alt(full);
        Ok(match (at_least_one, stop_after_first) {
            (true, true) => one_tag,
            (false, saf) => free_then(dispatch, on(free.end(), &at.path)?, !saf),
            (true, false) => expr::concat(vec![
                one_tag,
                free_then(dispatch, on(free.end(), &at.path)?, true),
            ]),
        })
    }
}

/// Branches per group of [`wide_alt`].
const ALT_GROUP: usize = 32;

/// The alternation of many branches (one per tool), nested in groups of [`ALT_GROUP`]: each
/// group can then be cut into a rule of its own (see `automata::rules`), compiled when first
/// entered or by the background builder. A flat alternation of many small branches is one
/// rule, built with the root once it is large (a 1,000-tool tag: 160 ms at compile time).
/// Inside a trie of begin texts ([`text_trie`], kept whole) the groups are not cut.
fn wide_alt(items: Vec<Expr>) -> Expr {
    if items.len() <= ALT_GROUP {
        return expr::alt(items);
    }
    let mut level: Vec<Expr> = items;
    while level.len() > ALT_GROUP {
        let mut next = Vec::with_capacity(level.len().div_ceil(ALT_GROUP));
        let mut it = level.into_iter().peekable();
        while it.peek().is_some() {
            next.push(grouped(it.by_ref().take(ALT_GROUP).collect()));
        }
        level = next;
    }
    grouped(level)
}

/// One group of [`wide_alt`], kept as its own node (`expr::alt` would flatten nested groups).
fn grouped(items: Vec<Expr>) -> Expr {
    if items.len() < 2 || items.iter().all(Expr::is_plain) {
        expr::alt(items)
    } else {
        Expr::Alt(items)
    }
}

/// Branchings of a [`text_trie`] from which the rest of each text is a branch of its own.
const MAX_TRIE_DEPTH: usize = 32;

/// One branch of an alternation of tags: `head` then `tail`, where `head` is the plain text
/// `text` when there is one.
struct Branch {
    text: Option<String>,
    head: Expr,
    tail: Expr,
}

/// The alternation of `text tail` over `items` (sorted by text, all sharing their first `at`
/// bytes, a character boundary), as a trie of the texts: the items' longest common prefix
/// once, then a branch for each item that ends there and one per next character. With many
/// tags (a tool's name in each begin) a prefix of the output is then one path of the trie,
/// not one path per tag still possible: entering the tags and reading a name step a few
/// automaton states, not one per tool. Below [`MAX_TRIE_DEPTH`] branchings (`depth`) the
/// items are branches of their own, so that the expression stays shallow whatever the texts.
/// [`Builder::tag_alt`] keeps the trie whole ([`Expr::Inline`]): inside it only the tags' contents
/// (marked [`Expr::Cut`]) are rules.
fn text_trie(items: Vec<(String, Expr)>, at: usize, depth: usize) -> Expr {
    let n = items.len();
    if depth >= MAX_TRIE_DEPTH && n > 1 {
        let alts = items
            .into_iter()
            .map(|(text, tail)| expr::concat(vec![literal(&text[at..]), tail]))
            .collect();
        return wide_alt(alts);
    }
    let (first, last) = (
        &items[0].0.as_bytes()[at..],
        &items[n - 1].0.as_bytes()[at..],
    );
    let mut p = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    while !items[0].0.is_char_boundary(at + p) {
        p -= 1;
    }
    let end = at + p;
    let head = literal(&items[0].0[at..end]);
    if n == 1 {
        let (_, tail) = items.into_iter().next().expect("one item");
        return expr::concat(vec![head, tail]);
    }
    let mut alts = Vec::new();
    let mut group: Vec<(String, Expr)> = Vec::new();
    let mut group_char: Option<char> = None;
    for (text, tail) in items {
        // sorted: the texts that end at `end` come first, then one run per next character
        let c = text[end..].chars().next();
        if c.is_none() {
            alts.push(tail);
            continue;
        }
        if c != group_char && !group.is_empty() {
            alts.push(text_trie(std::mem::take(&mut group), end, depth + 1));
        }
        group_char = c;
        group.push((text, tail));
    }
    if !group.is_empty() {
        alts.push(text_trie(group, end, depth + 1));
    }
    expr::concat(vec![head, wide_alt(alts)])
}

/// Free text that dispatches: with `looped`, any number of `dispatch` branches (each free text
/// up to a trigger and what the trigger starts), then free text to the end; without, free text
/// to the end or one branch.
fn free_then(dispatch: Vec<Expr>, end: Expr, looped: bool) -> Expr {
    if dispatch.is_empty() {
        end
    } else if looped {
        expr::concat(vec![expr::rep(expr::alt(dispatch), 0, None), end])
    } else {
        let mut alts = vec![end];
        alts.extend(dispatch);
        expr::alt(alts)
    }
}

/// A free text's excluded strings: its node's `excludes` and the non-empty `end` strings of the
/// nearest enclosing tag.
fn excluded(o: &serde_json::Map<String, Value>, at: &At) -> Result<Vec<String>> {
    let mut excludes = strings(o.get("excludes"), &at.key("excludes"), true)?;
    excludes.extend(at.ends.iter().filter(|e| !e.is_empty()).cloned());
    Ok(excludes)
}

/// The engines' strict reading of a tag's schema: an object schema that declares `properties`
/// and says nothing of `additionalProperties` (nor `unevaluatedProperties`) allows no other
/// property. Applied to every schema position (not to `const`, `enum`, `default` or `examples`
/// values, which are data).
fn strict(schema: &mut Value) {
    let Value::Object(o) = schema else {
        return;
    };
    if o.get("properties").is_some_and(Value::is_object)
        && !o.contains_key("additionalProperties")
        && !o.contains_key("unevaluatedProperties")
    {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (k, v) in o.iter_mut() {
        match k.as_str() {
            "items"
            | "additionalItems"
            | "contains"
            | "not"
            | "if"
            | "then"
            | "else"
            | "additionalProperties"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties" => match v {
                Value::Array(a) => a.iter_mut().for_each(strict),
                _ => strict(v),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(a) = v {
                    a.iter_mut().for_each(strict);
                }
            }
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas"
            | "dependencies" => {
                if let Value::Object(m) = v {
                    m.values_mut().for_each(strict);
                }
            }
            _ => {}
        }
    }
}

/// How one XML parameter style writes a parameter: `head(key)` VALUE `closing`.
#[derive(Clone, Copy)]
struct XmlStyle {
    before_key: &'static str,
    after_key: &'static str,
    closing: &'static str,
    /// DeepSeek's `string="true"` or `string="false"` attribute after the key (either, for
    /// any value).
    string_attr: bool,
    /// GLM's whitespace between `</arg_key>` and `<arg_value>`.
    ws_inside: bool,
    /// Kimi K3's `type="…"` attribute after the key, and its key escapes (`&amp;`, `&quot;`).
    typed: bool,
    /// Cohere's recursive values: every value is an element `<cofl:value name="KEY"
    /// type="raw|json|dict|list">…</cofl:value>` (array items without `name`); a `dict` holds
    /// its members as elements, a `list` its items.
    cohere: bool,
}

impl XmlStyle {
    fn named(name: &str) -> Option<XmlStyle> {
        let plain = |before_key, after_key, closing| XmlStyle {
            before_key,
            after_key,
            closing,
            string_attr: false,
            ws_inside: false,
            typed: false,
            cohere: false,
        };
        Some(match name {
            "qwen_xml" => plain("<parameter=", ">", "</parameter>"),
            "minimax_xml" => plain("<parameter name=\"", "\">", "</parameter>"),
            "deepseek_xml" => XmlStyle {
                string_attr: true,
                ..plain(
                    "<\u{ff5c}DSML\u{ff5c}parameter name=\"",
                    "\">",
                    "</\u{ff5c}DSML\u{ff5c}parameter>",
                )
            },
            "deepseek_v4_1_xml" => XmlStyle {
                string_attr: true,
                ..plain(
                    "<\u{ff5c}DSML\u{ff5c} parameter name=\"",
                    "\">",
                    "</\u{ff5c}DSML\u{ff5c} parameter>",
                )
            },
            "glm_xml" => XmlStyle {
                ws_inside: true,
                ..plain("<arg_key>", "</arg_key><arg_value>", "</arg_value>")
            },
            "kimi_k3_xml" => XmlStyle {
                typed: true,
                ..plain(
                    "<|open|>argument key=\"",
                    "\"<|sep|>",
                    "<|close|>argument<|sep|>",
                )
            },
            "cohere_xml" => XmlStyle {
                cohere: true,
                ..plain("<cofl:value", ">", "</cofl:value>")
            },
            _ => return None,
        })
    }

    /// A declared key as the style writes it.
    fn key_text(&self, k: &str) -> String {
        let mut out = String::with_capacity(k.len());
        for c in k.chars() {
            match c {
                '&' if self.typed || self.cohere => out.push_str("&amp;"),
                '"' if self.typed || self.cohere => out.push_str("&quot;"),
                '<' if self.cohere => out.push_str("&lt;"),
                '>' if self.cohere => out.push_str("&gt;"),
                c => out.push(c),
            }
        }
        out
    }

    /// The keys of undeclared parameters: names (`[A-Za-z_][A-Za-z0-9_]*`); in Cohere's style
    /// any non-empty text without NUL, `"`, `&`, `<` and `>` except as the entities `&amp;`,
    /// `&lt;`, `&gt;` and `&quot;`.
    fn free_key(&self) -> Hir {
        if self.cohere {
            let plain = hir::class(&[
                ('\u{1}', '!'),
                ('#', '%'),
                ('\'', ';'),
                ('=', '='),
                ('?', '\u{10FFFF}'),
            ]);
            let unit = hir::alt(vec![
                plain,
                hir::lit("&amp;"),
                hir::lit("&lt;"),
                hir::lit("&gt;"),
                hir::lit("&quot;"),
            ]);
            return hir::rep(unit, 1, None);
        }
        hir::concat(vec![
            hir::class(&[('a', 'z'), ('A', 'Z'), ('_', '_')]),
            hir::star(hir::class(&[
                ('a', 'z'),
                ('A', 'Z'),
                ('0', '9'),
                ('_', '_'),
            ])),
        ])
    }
}

/// Characters a key matched by `patternProperties` may hold in an XML style: none that would
/// end the key or start an entity (`"`, `&`, `<`, `>`), so it is written as itself.
fn safe_key() -> Hir {
    hir::rep(
        hir::class(&[
            ('\u{1}', '!'),
            ('#', '%'),
            ('\'', ';'),
            ('=', '='),
            ('?', '\u{10FFFF}'),
        ]),
        1,
        None,
    )
}

use regex_syntax::hir::Hir;

/// A `json_schema` in an XML parameter style: the schema's root object is written without
/// braces, as a parameter element per property (whitespace before, between and after them);
/// a parameter's value is raw text for a plain string (anything without the closing marker),
/// the raw text of a `const`/`enum` value (strings unquoted), and JSON (with whitespace around)
/// for anything else. Cohere's style writes objects and arrays as elements too (see
/// [`XmlStyle::cohere`]).
struct Xml<'b, 'a> {
    b: &'b Builder<'a>,
    style: XmlStyle,
    root: &'b Value,
    any_order: bool,
    ws: Option<u32>,
}

/// Keywords that say nothing about a value's language.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples", "$comment"];

/// The recursion id of any Cohere value (see [`Xml::cohere_any`]).
const COHERE_ANY: u32 = 0xC0E0_0001;

/// Kimi K3's type names (an undeclared parameter, or one whose schema has no single type).
const KIMI_TYPES: [&str; 7] = [
    "string", "number", "integer", "boolean", "object", "array", "null",
];

impl Xml<'_, '_> {
    fn ws(&self) -> Expr {
        let class = hir::class(&[(' ', ' '), ('\n', '\n'), ('\t', '\t')]);
        Expr::Hir(hir::rep(class, 0, self.ws))
    }

    /// `$ref` to the root's `$defs`/`definitions`, followed (a few levels at most).
    fn deref<'v>(&'v self, mut v: &'v Value, at: &At) -> Result<&'v Value> {
        for _ in 0..16 {
            let Some(r) = v.get("$ref").and_then(Value::as_str) else {
                return Ok(v);
            };
            let target = r
                .strip_prefix("#/$defs/")
                .and_then(|n| self.root.get("$defs")?.get(n))
                .or_else(|| {
                    r.strip_prefix("#/definitions/")
                        .and_then(|n| self.root.get("definitions")?.get(n))
                });
            v = target.ok_or_else(|| {
                error(
                    &at.path,
                    &format!("the reference {r:?} (an XML parameter's `$ref` must name one of the root's $defs)"),
                )
            })?;
        }
        Err(error(&at.path, "references that go round"))
    }

    /// The parameters of the root object.
    fn params(&self, at: &At) -> Result<Expr> {
        let root = match self.root {
            Value::Bool(true) => &Value::Object(serde_json::Map::new()),
            r @ Value::Object(_) => self.deref(r, at)?,
            _ => return Err(error(&at.path, "a JSON Schema is an object or `true`")),
        };
        let Some(o) = root.as_object() else {
            return Err(error(
                &at.path,
                "an XML parameter schema is an object schema",
            ));
        };
        let root_only: &[&str] = &["$defs", "definitions", "$schema", "$id", "strict"];
        for k in o.keys() {
            if root_only.contains(&k.as_str()) {
                continue;
            }
            self.object_keyword(k, at)?;
        }
        if let Some(t) = o.get("type") {
            if t.as_str() != Some("object") {
                return Err(error(&at.key("type").path, "XML parameters are an object"));
            }
        }
        let members = self.members(o, at, 0)?;
        Ok(expr::concat(vec![self.ws(), members, self.ws()]))
    }

    /// Refuses a keyword of an object written as XML elements that this does not read.
    fn object_keyword(&self, k: &str, at: &At) -> Result<()> {
        let known = matches!(
            k,
            "type" | "properties" | "required" | "additionalProperties" | "patternProperties"
        ) || ANNOTATIONS.contains(&k);
        if known {
            Ok(())
        } else {
            Err(error(
                &at.key(k).path,
                &format!("`{k}` on an object written as XML elements is not supported"),
            ))
        }
    }

    /// The members of an object written as elements (the root's parameters, a Cohere `dict`),
    /// separated by whitespace: the declared properties (in order unless `any_order`), then
    /// any number of undeclared ones where `patternProperties` or `additionalProperties` allow
    /// them (with no properties declared and nothing said, any).
    fn members(&self, o: &serde_json::Map<String, Value>, at: &At, depth: usize) -> Result<Expr> {
        let required: Vec<&str> = o
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let props = o.get("properties").and_then(Value::as_object);
        let mut items = Vec::new();
        let mut declared = Vec::new();
        for (k, p) in props.into_iter().flatten() {
            let a = at.key("properties").key(k);
            items.push((
                self.element(&hir::lit(&self.style.key_text(k)), p, &a, depth)?,
                required.contains(&k.as_str()),
            ));
            declared.push(k.as_str());
        }
        if let Some(missing) = required.iter().find(|r| !declared.contains(r)) {
            return Err(error(
                &at.key("required").path,
                &format!("the required parameter {missing:?} is not declared"),
            ));
        }
        let written: Vec<Hir> = declared
            .iter()
            .map(|k| hir::lit(&self.style.key_text(k)))
            .collect();
        // patternProperties: each pattern's keys, apart from the declared ones; a key that two
        // patterns (or a pattern and a declared name) share would need both schemas at once
        let mut patterns = Vec::new();
        if let Some(pp) = o.get("patternProperties") {
            let Some(pp) = pp.as_object() else {
                return Err(error(
                    &at.key("patternProperties").path,
                    "must be an object",
                ));
            };
            for (p, s) in pp {
                let a = at.key("patternProperties").key(p);
                let h = crate::json_schema::compile::pattern_language(p)
                    .map_err(|e| error(&a.path, &e))?;
                patterns.push((h, s, a));
            }
        }
        let lang = |pos: Vec<Hir>, neg: &[Hir], a: &At| -> Result<Option<Hir>> {
            crate::automata::strlang::combine(&pos, neg).map_err(|e| error(&a.path, &e))
        };
        for (i, (h, _, a)) in patterns.iter().enumerate() {
            for k in &declared {
                if lang(vec![h.clone(), hir::lit(k)], &[], a)?.is_some() {
                    return Err(error(
                        &a.path,
                        &format!(
                            "the declared parameter {k:?} also matches this pattern (a value \
                             under both schemas is not supported in an XML style)"
                        ),
                    ));
                }
            }
            for (h2, _, a2) in &patterns[i + 1..] {
                if lang(vec![h.clone(), h2.clone(), safe_key()], &[], a)?.is_some() {
                    return Err(error(
                        &a.path,
                        &format!(
                            "keys match both this pattern and {} (a value under both schemas \
                             is not supported in an XML style)",
                            a2.path
                        ),
                    ));
                }
            }
        }
        let mut tail = Vec::new();
        for (h, s, a) in &patterns {
            if let Some(key) = lang(vec![h.clone(), safe_key()], &written, a)? {
                tail.push(self.element(&key, s, a, depth)?);
            }
        }
        let extra = match o.get("additionalProperties") {
            Some(Value::Bool(false)) => None,
            None if props.is_some_and(|p| !p.is_empty()) => None,
            None | Some(Value::Bool(true)) => Some(Value::Bool(true)),
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(_) => {
                return Err(error(
                    &at.key("additionalProperties").path,
                    "must be a boolean or a schema",
                ))
            }
        };
        if let Some(v) = extra {
            let a = at.key("additionalProperties");
            let mut neg = written.clone();
            neg.extend(patterns.iter().map(|(h, _, _)| h.clone()));
            if let Some(key) = lang(vec![self.style.free_key()], &neg, &a)? {
                tail.push(self.element(&key, &v, &a, depth)?);
            }
        }
        let tail = (!tail.is_empty()).then(|| expr::alt(tail));
        Ok(if self.any_order {
            expr::member_set(items, self.ws(), tail)
        } else {
            expr::member_seq(items, self.ws(), tail)
        })
    }

    /// One member's element, with `key` (a language of keys as written) and value schema `p`.
    fn element(&self, key: &Hir, p: &Value, at: &At, depth: usize) -> Result<Expr> {
        if self.style.cohere {
            let name = expr::concat(vec![
                Expr::Hir(hir::lit(" name=\"")),
                Expr::Hir(key.clone()),
                Expr::Hir(hir::lit("\"")),
            ]);
            return self.cohere_element(Some(name), p, at, depth);
        }
        self.param(key, p, at)
    }

    /// One parameter: its element, with `key` (a language of keys) and value schema `p`.
    fn param(&self, key: &Hir, p: &Value, at: &At) -> Result<Expr> {
        let s = self.style;
        let mut head = vec![self.b.marker(s.before_key, at)?, Expr::Hir(key.clone())];
        if s.string_attr {
            head.push(Expr::Hir(hir::lit("\" string=\"")));
            head.push(Expr::Hir(hir::alt(vec![
                hir::lit("true"),
                hir::lit("false"),
            ])));
        }
        if s.typed {
            head.push(Expr::Hir(hir::lit("\" type=\"")));
            let names = match kimi_type(p) {
                Some(t) => vec![hir::lit(t)],
                None => KIMI_TYPES.iter().map(|t| hir::lit(t)).collect(),
            };
            head.push(Expr::Hir(hir::alt(names)));
        }
        if s.ws_inside {
            head.push(Expr::Hir(hir::lit("</arg_key>")));
            head.push(self.ws());
            head.push(Expr::Hir(hir::lit("<arg_value>")));
        } else {
            head.push(self.b.marker(s.after_key, at)?);
        }
        head.push(self.value(p, at, 0)?);
        head.push(self.b.marker(s.closing, at)?);
        Ok(expr::concat(head))
    }

    /// A parameter's value (see the type's docs).
    fn value(&self, p: &Value, at: &At, depth: usize) -> Result<Expr> {
        if depth > 8 {
            return Err(error(&at.path, "XML parameter values nested too deep"));
        }
        let p = self.deref(p, at)?;
        let Some((o, keys)) = self.keywords(p, at)? else {
            return self.untyped(at);
        };
        if let Some(c) = o.get("const") {
            return Ok(raw_value(c));
        }
        if let Some(e) = o.get("enum").and_then(Value::as_array) {
            if e.is_empty() {
                return Err(error(&at.key("enum").path, "an empty enum allows no value"));
            }
            return Ok(expr::alt(e.iter().map(raw_value).collect()));
        }
        for comb in ["anyOf", "oneOf"] {
            if let Some(bs) = o.get(comb).and_then(Value::as_array) {
                if keys.len() == 1 && !bs.is_empty() {
                    let alts = bs
                        .iter()
                        .enumerate()
                        .map(|(i, b)| self.value(b, &at.index(comb, i), depth + 1))
                        .collect::<Result<Vec<_>>>()?;
                    return Ok(expr::alt(alts));
                }
            }
        }
        if let Some(Value::Array(types)) = o.get("type") {
            let mut alts = Vec::new();
            for (i, t) in types.iter().enumerate() {
                let mut one = o.clone();
                one.insert("type".into(), t.clone());
                alts.push(self.value(&Value::Object(one), &at.index("type", i), depth + 1)?);
            }
            return Ok(expr::alt(alts));
        }
        if o.get("type").and_then(Value::as_str) == Some("string") {
            if let Some(text) = self.string_text(o, &keys, at)? {
                return Ok(text);
            }
        }
        // anything else is JSON, with whitespace around it
        let json = self.json(p, at)?;
        Ok(expr::concat(vec![self.ws(), json, self.ws()]))
    }

    /// A parameter schema's object and its keywords other than annotations; `None` for one
    /// that says nothing of its value (`true`, or annotations only).
    #[allow(clippy::type_complexity)]
    fn keywords<'v>(
        &self,
        p: &'v Value,
        at: &At,
    ) -> Result<Option<(&'v serde_json::Map<String, Value>, Vec<&'v str>)>> {
        let o = match p {
            Value::Bool(true) => return Ok(None),
            Value::Object(o) => o,
            _ => {
                return Err(error(
                    &at.path,
                    "a parameter's schema is an object or `true`",
                ))
            }
        };
        let keys: Vec<&str> = o
            .keys()
            .map(String::as_str)
            .filter(|k| !ANNOTATIONS.contains(k))
            .collect();
        Ok((!keys.is_empty()).then_some((o, keys)))
    }

    /// A string schema's raw text (`type`, `minLength`, `maxLength`, `pattern`, `format` only;
    /// `None` when it has other keywords).
    fn string_text(
        &self,
        o: &serde_json::Map<String, Value>,
        keys: &[&str],
        at: &At,
    ) -> Result<Option<Expr>> {
        if !keys.iter().all(|k| {
            matches!(
                *k,
                "type" | "minLength" | "maxLength" | "pattern" | "format"
            )
        }) {
            return Ok(None);
        }
        let min = length(o.get("minLength"), &at.key("minLength"))?;
        let max = length(o.get("maxLength"), &at.key("maxLength"))?;
        let (shapes, excluded) = self.string_shapes(o, at)?;
        if shapes.is_empty() && excluded.is_empty() {
            let text = self.raw_text(at)?;
            return Ok(Some(if min.is_none() && max.is_none() {
                on(text.end(), &at.path)?
            } else {
                on(text.end_within(min.unwrap_or(0), max), &at.path)?
            }));
        }
        // the text in every shape's language, of a length within the bounds, and free of the
        // closing marker (not inside it, nor ending where the marker after it would be read
        // earlier): the minimal automaton of the shapes and the marker (kept process-wide, so
        // that the same format in many tools is built once) read as raw text, its lengths
        // counted beside it
        let none = || {
            error(
                &at.path,
                &format!(
                    "no raw text satisfies this string parameter (its pattern, format and \
                     lengths, without {:?})",
                    self.style.closing
                ),
            )
        };
        let mut neg = marker_free(self.style.closing);
        neg.extend(excluded);
        let d = crate::automata::strlang::combined_dfa(&shapes, &neg)
            .map_err(|e| error(&at.path, &e))?
            .ok_or_else(none)?;
        let built = if min.is_none() && max.is_none() {
            expr::raw_text_dfa(&d).map(Some)
        } else {
            expr::raw_counted_text_dfa(&d, min.unwrap_or(0), max)
        };
        if let Some(x) = built {
            return x.map(Some).ok_or_else(none);
        }
        // (an automaton that cannot be read so: as one expression)
        let mut pos = shapes;
        if min.is_some() || max.is_some() {
            pos.push(hir::rep(dot_all(), min.unwrap_or(0), max));
        }
        match crate::automata::strlang::combine(&pos, &neg) {
            Ok(Some(h)) => Ok(Some(Expr::Hir(h))),
            Ok(None) => Err(none()),
            Err(e) => Err(error(&at.path, &e)),
        }
    }

    /// The decoded-string languages a string schema's `pattern` and `format` (a format the
    /// options assert and this crate knows; other formats accept any string) confine it to, and
    /// those it must stay out of (a pattern's leading negative look-aheads, see
    /// [`crate::json_schema::compile::pattern_parts`]).
    fn string_shapes(
        &self,
        o: &serde_json::Map<String, Value>,
        at: &At,
    ) -> Result<(Vec<Hir>, Vec<Hir>)> {
        let (mut pos, mut neg) = (Vec::new(), Vec::new());
        if let Some(p) = o.get("pattern") {
            let a = at.key("pattern");
            let p = p
                .as_str()
                .ok_or_else(|| error(&a.path, "pattern must be a string"))?;
            let (yes, no) =
                crate::json_schema::compile::pattern_parts(p).map_err(|e| error(&a.path, &e))?;
            pos.extend(yes);
            neg.extend(no);
        }
        if let Some(f) = o.get("format") {
            let a = at.key("format");
            let f = f
                .as_str()
                .ok_or_else(|| error(&a.path, "format must be a string"))?;
            if self.b.schema_opts.formats == crate::json_schema::options::Formats::Assert {
                pos.extend(crate::json_schema::string::format_hir(f));
            }
        }
        Ok((pos, neg))
    }

    /// Raw text of a parameter value: anything without the closing marker.
    fn raw_text(&self, at: &At) -> Result<FreeText> {
        on(
            FreeText::new(&[], &[self.style.closing.to_string()]),
            &at.path,
        )
    }

    /// A value of no schema: raw text, or a JSON array or object.
    fn untyped(&self, at: &At) -> Result<Expr> {
        let raw = on(self.raw_text(at)?.end(), &at.path)?;
        let arr = self.json(&serde_json::json!({"type": "array"}), at)?;
        let obj = self.json(&serde_json::json!({"type": "object"}), at)?;
        Ok(expr::alt(vec![
            raw,
            expr::concat(vec![self.ws(), expr::alt(vec![arr, obj]), self.ws()]),
        ]))
    }

    /// `p` as JSON, its references resolved against the root's definitions.
    fn json(&self, p: &Value, at: &At) -> Result<Expr> {
        let mut p = p.clone();
        if let (Value::Object(m), Value::Object(r)) = (&mut p, self.root) {
            for defs in ["$defs", "definitions"] {
                if let Some(d) = r.get(defs) {
                    m.entry(defs.to_string()).or_insert_with(|| d.clone());
                }
            }
        }
        self.b.schema(&p, Some(self.any_order), self.ws, at)
    }

    /// A Cohere element: `<cofl:value` `name`, then one of the schema's (type, body) cases:
    /// ` type="T">` BODY `</cofl:value>`.
    fn cohere_element(&self, name: Option<Expr>, p: &Value, at: &At, depth: usize) -> Result<Expr> {
        let cases = self.cohere_cases(p, at, depth)?;
        let mut head = vec![Expr::Hir(hir::lit(self.style.before_key))];
        head.extend(name);
        head.push(expr::alt(cases));
        Ok(expr::concat(head))
    }

    fn cohere_suffix(&self, t: &str, body: Expr) -> Expr {
        expr::concat(vec![
            Expr::Hir(hir::lit(&format!(" type=\"{t}\">"))),
            body,
            Expr::Hir(hir::lit(self.style.closing)),
        ])
    }

    /// `ws body ws`.
    fn padded(&self, body: Expr) -> Expr {
        expr::concat(vec![self.ws(), body, self.ws()])
    }

    /// The cases (each ` type="T">` BODY `</cofl:value>`) of a Cohere value of schema `p`: `raw` with raw text for a
    /// string, `json` with JSON for a number, boolean or null, `dict` with member elements for
    /// an object, `list` with item elements for an array; a `const`/`enum` value as its raw
    /// text (`raw` for a string, else `json`); each branch of `anyOf`/`oneOf`/a type list its
    /// own cases.
    fn cohere_cases(&self, p: &Value, at: &At, depth: usize) -> Result<Vec<Expr>> {
        if depth > 16 {
            return Err(error(&at.path, "XML parameter values nested too deep"));
        }
        let p = self.deref(p, at)?;
        let Some((o, keys)) = self.keywords(p, at)? else {
            return self.cohere_any_cases();
        };
        let literal_case = |v: &Value| {
            let t = if v.is_string() { "raw" } else { "json" };
            self.cohere_suffix(t, self.padded(raw_value(v)))
        };
        if let Some(c) = o.get("const") {
            return Ok(vec![literal_case(c)]);
        }
        if let Some(e) = o.get("enum").and_then(Value::as_array) {
            if e.is_empty() {
                return Err(error(&at.key("enum").path, "an empty enum allows no value"));
            }
            return Ok(e.iter().map(literal_case).collect());
        }
        for comb in ["anyOf", "oneOf", "allOf"] {
            if let Some(bs) = o.get(comb).and_then(Value::as_array) {
                if keys.len() != 1 || bs.is_empty() || (comb == "allOf" && bs.len() != 1) {
                    return Err(error(
                        &at.key(comb).path,
                        &format!(
                            "`{comb}` in cohere_xml is supported as the schema's only keyword \
                             (allOf with one branch)"
                        ),
                    ));
                }
                let mut cases = Vec::new();
                for (i, b) in bs.iter().enumerate() {
                    cases.extend(self.cohere_cases(b, &at.index(comb, i), depth + 1)?);
                }
                return Ok(cases);
            }
        }
        match o.get("type") {
            Some(Value::Array(types)) => {
                let mut cases = Vec::new();
                for (i, t) in types.iter().enumerate() {
                    let mut one = o.clone();
                    one.insert("type".into(), t.clone());
                    cases.extend(self.cohere_cases(
                        &Value::Object(one),
                        &at.index("type", i),
                        depth + 1,
                    )?);
                }
                Ok(cases)
            }
            Some(Value::String(t)) => match t.as_str() {
                "string" => match self.string_text(o, &keys, at)? {
                    Some(text) => Ok(vec![self.cohere_suffix("raw", text)]),
                    None => Err(error(
                        &at.path,
                        "a string in cohere_xml may have `minLength` and `maxLength` only",
                    )),
                },
                "object" => {
                    for k in o.keys() {
                        self.object_keyword(k, at)?;
                    }
                    let members = self.members(o, at, depth + 1)?;
                    Ok(vec![self.cohere_suffix("dict", self.padded(members))])
                }
                "array" => {
                    let items = self.cohere_list(o, at, depth)?;
                    Ok(vec![self.cohere_suffix("list", self.padded(items))])
                }
                "integer" | "number" | "boolean" | "null" => Ok(vec![
                    self.cohere_suffix("json", self.padded(self.json(p, at)?))
                ]),
                other => Err(error(
                    &at.key("type").path,
                    &format!("unknown type {other:?}"),
                )),
            },
            _ => Err(error(
                &at.path,
                "a cohere_xml value needs a `type`, `const`, `enum` or one combinator",
            )),
        }
    }

    /// A Cohere `list`'s items: elements without a name, one after another.
    fn cohere_list(
        &self,
        o: &serde_json::Map<String, Value>,
        at: &At,
        depth: usize,
    ) -> Result<Expr> {
        for k in o.keys() {
            let known = matches!(
                k.as_str(),
                "type" | "items" | "prefixItems" | "minItems" | "maxItems"
            ) || ANNOTATIONS.contains(&k.as_str());
            if !known {
                return Err(error(
                    &at.key(k).path,
                    &format!("`{k}` on a cohere_xml list is not supported"),
                ));
            }
        }
        let min = length(o.get("minItems"), &at.key("minItems"))?.unwrap_or(0);
        let max = length(o.get("maxItems"), &at.key("maxItems"))?;
        let prefix = match o.get("prefixItems") {
            None => &[][..],
            Some(Value::Array(a)) => &a[..],
            Some(_) => return Err(error(&at.key("prefixItems").path, "must be an array")),
        };
        let n = prefix.len() as u32;
        // the prefix items that may appear, then the other items
        let shown = max.map_or(n, |m| m.min(n));
        let rest = match o.get("items") {
            Some(Value::Bool(false)) => None,
            None => Some(Value::Bool(true)),
            Some(v) => Some(v.clone()),
        };
        let rest = match rest {
            Some(v) if max.is_none_or(|m| m > n) => {
                let item = self.cohere_element(None, &v, &at.key("items"), depth + 1)?;
                Some(expr::rep(item, min.saturating_sub(n), max.map(|m| m - n)))
            }
            _ => None,
        };
        if min > shown && rest.is_none() || max.is_some_and(|m| m < min) {
            return Err(error(&at.path, "no array satisfies its item bounds"));
        }
        // built from the back: item i is required below `min`, else optional, and the items
        // after it come only with it
        let mut tail = rest.unwrap_or_else(Expr::empty);
        for i in (0..shown as usize).rev() {
            let e =
                self.cohere_element(None, &prefix[i], &at.index("prefixItems", i), depth + 1)?;
            let seq = expr::concat(vec![e, tail]);
            tail = if (i as u32) < min {
                seq
            } else {
                expr::opt(seq)
            };
        }
        Ok(tail)
    }

    /// Any Cohere value's cases: raw text, a JSON number, boolean or null, a `dict` of any
    /// named values, a `list` of any values; containers nested at most the JSON options'
    /// `max_nesting_depth` levels (one copy, called through a stack).
    fn cohere_any_cases(&self) -> Result<Vec<Expr>> {
        let here = At {
            path: String::new(),
            depth: 0,
            ends: &[],
        };
        let raw = self.raw_text(&here)?;
        let scalar = self.json(
            &serde_json::json!({"type": ["number", "boolean", "null"]}),
            &here,
        )?;
        let again = || Expr::Recur(COHERE_ANY);
        let open =
            |e: Expr| expr::concat(vec![Expr::Hir(hir::lit(self.style.before_key)), e, again()]);
        let named = open(expr::concat(vec![
            Expr::Hir(hir::lit(" name=\"")),
            Expr::Hir(self.style.free_key()),
            Expr::Hir(hir::lit("\"")),
        ]));
        let unnamed = open(Expr::empty());
        let room = Expr::DepthBelow(self.b.schema_opts.max_nesting_depth.saturating_add(1));
        let dict = expr::concat(vec![
            room.clone(),
            self.padded(expr::member_seq(Vec::new(), self.ws(), Some(named))),
        ]);
        let list = expr::concat(vec![room, self.padded(expr::star(unnamed))]);
        let body = expr::alt(vec![
            self.cohere_suffix("raw", on(raw.end(), "")?),
            self.cohere_suffix("json", self.padded(scalar)),
            self.cohere_suffix("dict", dict),
            self.cohere_suffix("list", list),
        ]);
        Ok(vec![Expr::Recursive {
            id: COHERE_ANY,
            body: Box::new(body),
        }])
    }
}

/// Kimi K3's `type` attribute of a declared parameter: the one type its schema's values take
/// (`number` for integers too), or `None` where the schema may take several (no `type`, a type
/// list, a combinator, a `$ref`).
fn kimi_type(p: &Value) -> Option<&'static str> {
    let of_value = |v: &Value| match v {
        Value::String(_) => "string",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::Null => "null",
        Value::Object(_) => "object",
        Value::Array(_) => "array",
    };
    let o = p.as_object()?;
    if o.contains_key("$ref") {
        return None;
    }
    if let Some(c) = o.get("const") {
        return Some(of_value(c));
    }
    if let Some(e) = o.get("enum").and_then(Value::as_array) {
        let first = of_value(e.first()?);
        return e.iter().all(|v| of_value(v) == first).then_some(first);
    }
    if ["anyOf", "oneOf", "allOf", "not"]
        .iter()
        .any(|k| o.contains_key(*k))
    {
        return None;
    }
    match o.get("type")?.as_str()? {
        "string" => Some("string"),
        "integer" | "number" => Some("number"),
        "boolean" => Some("boolean"),
        "null" => Some("null"),
        "object" => Some("object"),
        "array" => Some("array"),
        _ => None,
    }
}

/// The raw text of a `const`/`enum` value in an XML parameter: a string as itself, anything
/// else as its JSON text.
fn raw_value(v: &Value) -> Expr {
    match v {
        Value::String(s) => literal(s),
        other => literal(&other.to_string()),
    }
}

/// A tag read: its begin (and the begin's text, `None` for a token), content and end.
struct Tag {
    begin_text: Option<String>,
    /// Whether the begin is its text alone (no special token's text in it).
    begin_plain: bool,
    begin: Expr,
    content: Expr,
    end: Expr,
}

impl Tag {
    fn full(&self) -> Expr {
        expr::concat(vec![
            self.begin.clone(),
            self.content.clone(),
            self.end.clone(),
        ])
    }
}

fn literal(s: &str) -> Expr {
    Expr::Hir(hir::lit(s))
}

fn is_empty_list(v: &Value) -> bool {
    v.is_null() || v.as_array().is_some_and(Vec::is_empty)
}

fn array<'v>(v: Option<&'v Value>, at: &At) -> Result<&'v Vec<Value>> {
    v.and_then(Value::as_array)
        .ok_or_else(|| error(&at.path, "must be a list"))
}

fn string<'v>(v: Option<&'v Value>, at: &At) -> Result<&'v str> {
    v.and_then(Value::as_str)
        .ok_or_else(|| error(&at.path, "must be a string"))
}

/// A list of strings; absent or `null` is empty. `non_empty`: each string must have a
/// character (excluded strings).
fn strings(v: Option<&Value>, at: &At, non_empty: bool) -> Result<Vec<String>> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(error(&at.path, "must be a list of strings")),
    };
    items
        .iter()
        .map(|x| match x.as_str() {
            Some("") if non_empty => Err(error(&at.path, "holds an empty string")),
            Some(s) => Ok(s.to_string()),
            None => Err(error(&at.path, "holds a non-string")),
        })
        .collect()
}

fn flag(v: Option<&Value>, at: &At) -> Result<bool> {
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(error(&at.path, "must be true or false")),
    }
}

fn int(v: Option<&Value>, at: &At) -> Result<i64> {
    v.and_then(Value::as_i64)
        .ok_or_else(|| error(&at.path, "must be an integer"))
}

/// The texts that would not end right before the closing `marker`: those holding it, and,
/// where the marker overlaps itself (it has a period `q` shorter than it), those ending with its
/// first `q` characters (the marker after them would be read `q` characters early).
fn marker_free(marker: &str) -> Vec<Hir> {
    let any = || hir::rep(dot_all(), 0, None);
    let mut out = vec![hir::concat(vec![any(), hir::lit(marker), any()])];
    let m = marker.as_bytes();
    for q in (1..m.len()).filter(|&q| marker.is_char_boundary(q) && m[q..] == m[..m.len() - q]) {
        out.push(hir::concat(vec![any(), hir::lit(&marker[..q])]));
    }
    out
}

/// `minLength`/`maxLength` of an XML string parameter (a non-negative integer, at most 2^31-1).
fn length(v: Option<&Value>, at: &At) -> Result<Option<u32>> {
    match v {
        None => Ok(None),
        Some(x) => x
            .as_u64()
            .or_else(|| {
                x.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .filter(|&n| n <= i32::MAX as u64)
            .map(|n| Some(n as u32))
            .ok_or_else(|| error(&at.path, "must be a non-negative integer")),
    }
}

/// `max_chars`: null, or an integer in `0..=2^31-1`.
fn budget(v: Option<&Value>, at: &At) -> Result<Option<u32>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .filter(|&n| n <= i32::MAX as u64)
            .map(|n| Some(n as u32))
            .ok_or_else(|| error(&at.path, "must be null or an integer from 0 to 2147483647")),
    }
}

fn count(v: Option<&Value>, at: &At) -> Result<Option<u32>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| error(&at.path, "must be a non-negative integer or null")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// `json_schema` nodes built on this thread (see [`Builder::json_schema`]).
        pub(super) static SCHEMA_BUILDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Tools whose parameters schemas are the same have them built at most twice; a schema that
    /// differs in anything (a key, the style, the enclosing tag's end) is built apart, and each
    /// tool still takes exactly its own arguments.
    #[test]
    fn json_schema_nodes_alike_are_built_at_most_twice() {
        use crate::automata::dfa::{LazyDfa, DEAD};
        let a = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}},
                                   "required": ["n"]});
        let b = serde_json::json!({"type": "object", "properties": {"s": {"type": "string"}},
                                   "required": ["s"]});
        let tag = |name: &str, schema: &Value, style: &str, end: &str| {
            serde_json::json!({"type": "tag", "begin": format!("<{name}>"),
                "content": {"type": "json_schema", "json_schema": schema, "style": style},
                "end": end})
        };
        let tags = vec![
            tag("f", &a, "json", "</f>"),
            tag("g", &a, "json", "</f>"),
            tag("h", &a, "json", "</f>"),
            tag("i", &b, "json", "</f>"),
            tag("j", &a, "qwen_xml", "</f>"),
            tag("k", &a, "json", "</k>"),
        ];
        let text = serde_json::json!({"type": "structural_tag",
            "format": {"type": "triggered_tags", "triggers": ["<"], "tags": tags}})
        .to_string();
        let before = SCHEMA_BUILDS.with(|n| n.get());
        let c = compile(&text, &JsonSchemaOptions::default(), None).unwrap();
        assert_eq!(SCHEMA_BUILDS.with(|n| n.get()) - before, 5);
        let d = LazyDfa::from_expr("tag", &c.expr, &Default::default()).unwrap();
        let accepts = |s: &str| {
            let q = d.walk(d.start(), s.as_bytes()).unwrap();
            q != DEAD && d.is_accepting(q)
        };
        for name in ["f", "g", "h"] {
            assert!(accepts(&format!("<{name}>{{\"n\": 1}}</f>")), "{name}");
            assert!(!accepts(&format!("<{name}>{{\"s\": \"x\"}}</f>")), "{name}");
        }
        assert!(accepts("<i>{\"s\": \"x\"}</f>"));
        assert!(!accepts("<i>{\"n\": 1}</f>"));
        assert!(accepts("<j><parameter=n>\n1\n</parameter>\n</f>"));
        assert!(accepts("<k>{\"n\": 1}</k>"));
        assert!(!accepts("<k>{\"n\": 1}</f>"));
    }

    /// The texts [`marker_free`] leaves are exactly those that the marker after them ends,
    /// read as the engines read a parameter (up to the marker's first occurrence); brute force
    /// over short texts, with markers that overlap themselves and one that does not.
    #[test]
    fn marker_free_texts_end_at_the_marker() {
        for marker in ["</p>", "aba", "aa", "abab", "a<a"] {
            let any = hir::rep(dot_all(), 0, None);
            let h = crate::automata::strlang::combine(&[any], &marker_free(marker))
                .expect("small languages")
                .expect("not empty");
            let re = regex::Regex::new(&format!("^(?:{h})$")).expect("printed HIR parses");
            let mut alphabet: Vec<char> = marker.chars().collect();
            alphabet.push('x');
            alphabet.sort();
            alphabet.dedup();
            let mut texts = vec![String::new()];
            for _ in 0..5 {
                let longer: Vec<String> = texts
                    .iter()
                    .filter(|t| t.chars().count() == texts.last().unwrap().chars().count())
                    .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                    .collect();
                texts.extend(longer);
            }
            for t in &texts {
                let whole = format!("{t}{marker}");
                let want = whole.find(marker) == Some(t.len());
                assert_eq!(re.is_match(t), want, "marker {marker:?}, text {t:?}");
            }
        }
    }
}
