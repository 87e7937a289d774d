//! The schema walker: JSON Schema (a `serde_json::Value`) → the automata layer's intermediate
//! form ([`Expr`]) over JSON text.
//!
//! Every function returns `Ok(None)` for an empty language (no JSON value satisfies that part:
//! `false`, an empty interval, or a `$ref` cut at the recursion limit) so that optional
//! properties, `anyOf` branches and array tails can be dropped exactly, and a required
//! property that was cut by the recursion limit can be reported instead of silently lost.

mod arrays;
mod objects;
mod one_of;
mod refs;
mod scalars;

pub(super) use refs::{normalize, Piece};
pub(in crate::json_schema) use scalars::count_in;
#[cfg(test)]
pub(crate) use scalars::{not_in, spelled_not_in};
pub(crate) use scalars::{pattern_language, pattern_parts};

use regex_syntax::hir::Hir;
use serde_json::{Map, Value};

use super::extra::{Built, Extra};
use super::keywords::{ANNOTATIONS, SUPPORTED, UNSUPPORTED};
use super::number::{any_number, Dec};
use super::options::{JsonSchemaOptions, OneOf, Whitespace};
use crate::automata::expr::{alt, alt_opt, concat, lit, opt, rep, Expr};
use crate::automata::hir::{self as hirs, class, star};
use crate::automata::spell::any_char;
use crate::error::{Error, Result};
use crate::json_schema::unique::{Step, UniqueArray};

/// Rough upper bound on the HIR size of one schema (see `hirs::weight`). A HIR node costs on
/// the order of 100 bytes, and the NFA built from it more, so this keeps a compile well below a
/// gigabyte; the NFA's own byte limit applies after it.
const MAX_WEIGHT: u64 = 2_000_000;

/// Most automaton nodes a whole schema may expand to: a schema is cut into rules, each built
/// when first entered (or with the root when they are large together), within `max_nfa_bytes`
/// for all the parts built; this only stops one far past what that budget holds early. (One
/// part's own expansion, by copies, stays within [`MAX_WEIGHT`].)
const MAX_SCHEMA_WEIGHT: u64 = 20_000_000;

/// The [`Expr::Recursive`] id of the any-JSON value; recursive `$ref` targets get ids above it.
const ANY_VALUE: u32 = 0;

/// Upper bound on the summed size (`hirs::nodes`, copies included) of the sub-schema HIRs
/// built during one compile: the memory they take (the automaton they become is bounded by
/// `MAX_WEIGHT` per schema and by the NFA's byte limit).
const MAX_BUILT: u64 = 8_000_000;

/// Deepest nesting of sub-schema compiles (each level uses a few kilobytes of stack).
pub(super) const MAX_DEPTH: u32 = 2000;

/// Longest `minLength`/`maxLength`/`minItems`/`maxItems` bound compiled as a counted repeat.
const MAX_COUNT: u64 = 10_000;

pub(crate) fn schema_error(keyword: &str, pointer: &str, message: impl Into<String>) -> Error {
    Error::Schema {
        keyword: keyword.to_string(),
        pointer: bounded_pointer(pointer),
        message: message.into(),
    }
}

/// Most bytes of a pointer an error carries: a recursion unrolled in place (through the merge
/// of several schemas) repeats the same steps hundreds of times, and the message must stay
/// readable (a server returns it as the HTTP body).
const MAX_POINTER: usize = 512;

/// `pointer`, or its beginning and end around a count of the steps left out when it is longer
/// than [`MAX_POINTER`].
pub(crate) fn bounded_pointer(pointer: &str) -> String {
    if pointer.len() <= MAX_POINTER {
        return pointer.to_string();
    }
    let steps: Vec<&str> = pointer.split('/').collect();
    let (mut head, mut tail) = (0usize, steps.len());
    let mut len = 0usize;
    // whole steps from both ends, alternately, within the bound
    while head < tail {
        let next = if head <= steps.len() - tail {
            steps[head]
        } else {
            steps[tail - 1]
        };
        if len + next.len() + 1 > MAX_POINTER - 40 {
            break;
        }
        len += next.len() + 1;
        if head <= steps.len() - tail {
            head += 1;
        } else {
            tail -= 1;
        }
    }
    let left_out = tail - head;
    let mut out = steps[..head].join("/");
    out.push_str(&format!("/…({left_out} steps)…/"));
    out.push_str(&steps[tail..].join("/"));
    out
}

pub(super) fn escape_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The JSON pointer of `key` under `ptr` (one allocation; made for every node walked).
pub(super) fn child(ptr: &str, key: &str) -> String {
    let mut out = String::with_capacity(ptr.len() + 1 + key.len());
    out.push_str(ptr);
    out.push('/');
    if key.contains(['~', '/']) {
        out.push_str(&escape_token(key));
    } else {
        out.push_str(key);
    }
    out
}

/// JSON equality as the spec defines it (numbers by value, objects unordered).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Dec::from_json(x) == Dec::from_json(y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// A `$ref` target compiled as a recursive expression (see [`Compiler::reference`]).
pub(super) struct RecTarget {
    pub ptr: String,
    pub id: u32,
    /// Whether a recursive call of it was built.
    pub called: bool,
}

pub(crate) struct Compiler<'a> {
    /// The root document (`docs[0]`).
    root: &'a Value,
    /// The root and the registry documents, `$ref`s rewritten (see `resolve`).
    docs: &'a [Value],
    pub(super) opts: &'a JsonSchemaOptions,
    /// After `:` and `,`.
    sep: Hir,
    /// Inside brackets and before `:` and `,`.
    inner: Hir,
    pub warnings: Vec<String>,
    /// The `$ref` targets being expanded, innermost last (for the unrolling limit).
    pub(super) stack: Vec<String>,
    /// The `$ref` targets being compiled as recursive expressions, innermost last: a `$ref`
    /// to one of them is a recursive call.
    pub(super) recs: Vec<RecTarget>,
    /// The id of the next recursive expression (see [`ANY_VALUE`]).
    pub(super) next_rec: u32,
    /// The schema resources entered, outermost first, that have `$dynamicAnchor`s: where a
    /// `$dynamicRef` looks for its target.
    /// (Each entry is a resource's dynamic anchors: name → internal reference.)
    pub(super) dyn_scope: Vec<Map<String, Value>>,
    /// While above zero, resources may have been entered without their dynamic scope being
    /// recorded (the algebra's expansions, merged maps): a `$dynamicRef` there is an error.
    pub(super) scope_lost: u32,
    /// Set by `flatten` when it follows a `$ref` into a resource with dynamic anchors.
    pub(super) lossy: std::cell::Cell<bool>,
    /// Set while `reference` resolves: the only place a `$dynamicRef` is resolved.
    pub(super) dynamic_ok: std::cell::Cell<bool>,
    /// Recursive `$ref`s become calls on a stack (otherwise they are unrolled
    /// `max_recursion_depth` times, as the algebra does).
    stack_recursion: bool,
    pub(super) cuts: u64,
    /// How many enclosing schemas being expanded have `unevaluated*` keywords.
    pub(super) eval_scopes: u32,
    /// Current nesting of `schema` calls.
    depth: u32,
    #[cfg(test)]
    any_cache: Vec<Expr>,
    /// A JSON string of any value, built when first needed.
    any_string: std::cell::OnceCell<Hir>,
    /// Total size (`hirs::nodes`) of the reference expansions and object member lists built so
    /// far (copies included): bounds the memory spent while compiling, before the final size
    /// check.
    built: u64,
    /// The instance path of the schema being compiled, when the path alone decides that this
    /// schema (and nothing beside it) describes the values there: reached from the root only
    /// through `properties`, `items` without `prefixItems`, `$ref` and `allOf` (see
    /// [`Compiler::pass_path`]). `None` below any other keyword.
    pub(super) path: Option<Vec<Step>>,
    /// The path the next [`Compiler::schema`] or [`Compiler::schema_built`] call takes as its
    /// own; every such call takes it away, so a sub-schema compiled from anywhere else has none.
    pass: Option<Vec<Step>>,
    /// The unique arrays of strings registered so far, by a text of their item schema.
    pub(crate) uniques: Vec<(String, UniqueArray)>,
    /// Registrations made (a repeated one included): a recursive `$ref` target compiled once
    /// for every place it is called must not make any.
    pub(super) unique_regs: u64,
    /// Whether some document says `"uniqueItems": true` (paths are followed only then).
    track_paths: bool,
}

/// Whether `uniqueItems: true` appears anywhere in `v`.
fn says_unique(v: &Value) -> bool {
    let mut todo = vec![v];
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(m) => {
                if m.get("uniqueItems") == Some(&Value::Bool(true)) {
                    return true;
                }
                todo.extend(m.values());
            }
            Value::Array(xs) => todo.extend(xs),
            _ => {}
        }
    }
    false
}

fn ws_chars_only(h: &Hir) -> bool {
    use regex_syntax::hir::HirKind::*;
    let ok = |c: u32| matches!(c, 0x20 | 0x09 | 0x0A | 0x0D);
    match h.kind() {
        Empty => true,
        Look(_) => false,
        Literal(l) => l.0.iter().all(|&b| ok(u32::from(b))),
        Class(regex_syntax::hir::Class::Unicode(c)) => c
            .ranges()
            .iter()
            .all(|r| (r.start() as u32..=r.end() as u32).all(ok)),
        Class(regex_syntax::hir::Class::Bytes(c)) => c
            .ranges()
            .iter()
            .all(|r| (u32::from(r.start())..=u32::from(r.end())).all(ok)),
        Repetition(r) => ws_chars_only(&r.sub),
        Capture(c) => ws_chars_only(&c.sub),
        Concat(xs) | Alternation(xs) => xs.iter().all(ws_chars_only),
    }
}

/// A whitespace pattern read and checked. The last one read on this thread is kept: a
/// structural tag compiles one schema per tool, each with the same pattern.
fn whitespace_pattern(p: &str) -> Result<Hir> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(String, Hir)>> =
            const { std::cell::RefCell::new(None) };
    }
    if let Some(h) = LAST.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|(q, _)| q == p)
            .map(|(_, h)| h.clone())
    }) {
        return Ok(h);
    }
    let h = crate::regex::parse(p, 250)
        .map_err(|e| Error::InvalidArgument(format!("whitespace pattern {p:?}: {e}")))?;
    if !ws_chars_only(&h) {
        return Err(Error::InvalidArgument(format!(
            "whitespace pattern {p:?} may match characters other than JSON whitespace (space, \
             \\t, \\n, \\r)"
        )));
    }
    LAST.with(|l| *l.borrow_mut() = Some((p.to_string(), h.clone())));
    Ok(h)
}

impl<'a> Compiler<'a> {
    pub fn new(docs: &'a [Value], opts: &'a JsonSchemaOptions) -> Result<Compiler<'a>> {
        let root = &docs[0];
        let ws_class = class(&[('\t', '\n'), ('\r', '\r'), (' ', ' ')]);
        let (sep, inner) = match &opts.whitespace {
            Whitespace::Default => (hirs::opt(hirs::lit(" ")), Hir::empty()),
            Whitespace::Compact => (Hir::empty(), Hir::empty()),
            Whitespace::Flexible => {
                let w = hirs::rep(ws_class, 0, Some(opts.max_whitespace));
                (w.clone(), w)
            }
            Whitespace::Pattern(p) => {
                let h = whitespace_pattern(p)?;
                (h.clone(), h)
            }
        };
        Ok(Compiler {
            root,
            docs,
            opts,
            sep,
            inner,
            warnings: Vec::new(),
            stack: Vec::new(),
            recs: Vec::new(),
            next_rec: ANY_VALUE + 1,
            dyn_scope: Vec::new(),
            scope_lost: 0,
            lossy: std::cell::Cell::new(false),
            dynamic_ok: std::cell::Cell::new(false),
            stack_recursion: opts.recursion == crate::json_schema::Recursion::Stack,
            cuts: 0,
            eval_scopes: 0,
            depth: 0,
            #[cfg(test)]
            any_cache: Vec::new(),
            any_string: std::cell::OnceCell::new(),
            built: 0,
            path: None,
            pass: None,
            uniques: Vec::new(),
            unique_regs: 0,
            track_paths: docs.iter().any(says_unique),
        })
    }

    /// Unroll recursive `$ref`s whatever the options say: with `$dynamicRef`s, what a
    /// reference means depends on the resources entered on the way, so one compiled copy of a
    /// target cannot serve every call.
    pub(crate) fn unroll_recursion(&mut self) {
        self.stack_recursion = false;
    }

    /// Compile the root schema.
    pub fn compile_root(&mut self) -> Result<Expr> {
        let root = self.root;
        if let Some(m) = self.scope_at("#") {
            self.dyn_scope.push(m.clone());
        }
        let h = self.recursive_target("", |c| {
            c.pass = Some(Vec::new());
            c.schema(root, "")
        })?;
        let h = match h {
            Some(h) => h,
            None if self.cuts > 0 => {
                return Err(schema_error(
                    "$ref",
                    "",
                    format!(
                        "every value of this schema needs recursion deeper than \
                         max_recursion_depth={}; raise max_recursion_depth",
                        self.opts.max_recursion_depth
                    ),
                ))
            }
            None => return Err(schema_error("", "", "no JSON value satisfies this schema")),
        };
        self.check_weight(&h)?;
        Ok(h)
    }

    fn check_weight(&self, h: &Expr) -> Result<()> {
        let w = h.weight();
        if w > MAX_SCHEMA_WEIGHT {
            return Err(Error::Budget(format!(
                "the schema expands to an automaton of about {w} nodes (limit {MAX_SCHEMA_WEIGHT}): \
                 lower max_nesting_depth / max_recursion_depth, count bounds, or \
                 additional_properties=\"forbid\""
            )));
        }
        Ok(())
    }

    pub(super) fn unsupported(&mut self, keyword: &str, ptr: &str, why: &str) -> Result<()> {
        // A step the compile deadline stopped (its error turned into `why` by the step) is the
        // deadline's error: never a keyword ignored under `lenient`, nor a schema error.
        crate::budget::check(&format!("compiling `{keyword}`"))?;
        if self.opts.lenient {
            self.warnings.push(format!(
                "#{ptr}: `{keyword}` ignored ({why}); the grammar accepts a superset"
            ));
            Ok(())
        } else {
            Err(schema_error(keyword, ptr, why))
        }
    }

    fn colon(&self) -> Expr {
        hirs::concat(vec![self.inner.clone(), hirs::lit(":"), self.sep.clone()]).into()
    }

    fn comma(&self) -> Expr {
        hirs::concat(vec![self.inner.clone(), hirs::lit(","), self.sep.clone()]).into()
    }

    /// Any JSON string, in any spelling.
    fn any_string(&self) -> Expr {
        self.any_string
            .get_or_init(|| hirs::concat(vec![hirs::lit("\""), star(any_char()), hirs::lit("\"")]))
            .clone()
            .into()
    }

    fn wrap(&self, open: &str, body: Expr, close: &str) -> Expr {
        concat(vec![
            lit(open),
            self.inner.clone().into(),
            body,
            self.inner.clone().into(),
            lit(close),
        ])
    }

    /// `first (, item){..}` lists: `a..=b` items, each `item`.
    fn list(&self, item: Expr, a: u64, b: Option<u64>) -> Expr {
        if b == Some(0) {
            return Expr::empty();
        }
        if b.is_none() && a <= 1 {
            // one copy of the item in the automaton (see `automata::nfa`)
            let core = crate::automata::expr::sep_list(item, self.comma());
            return if a == 0 { opt(core) } else { core };
        }
        let more = rep(
            concat(vec![self.comma(), item.clone()]),
            a.saturating_sub(1) as u32,
            b.map(|b| (b - 1) as u32),
        );
        let core = concat(vec![item, more]);
        if a == 0 {
            opt(core)
        } else {
            core
        }
    }

    /// Any JSON value with at most `depth` levels of nested containers.
    /// Any JSON value nested at most `depth` levels: a shared part (see
    /// [`crate::automata::nfa::share`]), so its automaton is built once per process and options.
    pub fn any_value(&mut self, depth: u32) -> Result<Expr> {
        let key = format!("any-value {depth} ({}) ({})", self.inner, self.sep);
        if let Some(m) = crate::automata::nfa::shared_part(&key) {
            return Ok(m);
        }
        let h = self.any_value_expr(depth)?;
        crate::automata::nfa::share(&key, h)
    }

    /// Any JSON value, containers nested at most `depth` levels: one copy of the value, called
    /// again for each array item and object value through a stack (`Expr::Recursive`); the
    /// containers are allowed only while fewer than `depth + 1` calls are open (the outermost
    /// value is one), so the size does not grow with the depth.
    fn any_value_expr(&mut self, depth: u32) -> Result<Expr> {
        let mut parts = self.any_scalars();
        if depth == 0 {
            return Ok(alt(parts));
        }
        let room = Expr::DepthBelow(depth.saturating_add(1));
        for c in self.any_containers(Expr::Recur(ANY_VALUE)) {
            parts.push(concat(vec![room.clone(), c]));
        }
        Ok(Expr::Recursive {
            id: ANY_VALUE,
            body: Box::new(alt(parts)),
        })
    }

    /// The scalars of an unconstrained value.
    fn any_scalars(&self) -> Vec<Expr> {
        vec![
            lit("null"),
            lit("true"),
            lit("false"),
            any_number(false).into(),
            self.any_string(),
        ]
    }

    /// An array and an object whose items and member values are `v`.
    fn any_containers(&self, v: Expr) -> [Expr; 2] {
        let arr = self.wrap("[", self.list(v.clone(), 0, None), "]");
        let kv = concat(vec![self.any_string(), self.colon(), v]);
        let obj = self.wrap("{", self.list(kv, 0, None), "}");
        [arr, obj]
    }

    /// The same language as [`Self::any_value_expr`], with each level copied (as values were
    /// built before the stack): the differential tests' oracle.
    #[cfg(test)]
    pub(crate) fn any_value_copies(&mut self, depth: u32) -> Result<Expr> {
        while self.any_cache.len() <= depth as usize {
            let d = self.any_cache.len();
            let mut parts = self.any_scalars();
            if d > 0 {
                parts.extend(self.any_containers(self.any_cache[d - 1].clone()));
            }
            let h = alt(parts);
            // Each level holds the one below several times over: the size grows geometrically
            // with the depth, so check it level by level, before it can exhaust memory.
            let w = h.weight();
            if w > MAX_WEIGHT {
                return Err(Error::Budget(format!(
                    "an unconstrained JSON value nested {d} levels deep expands to about {w} \
                     automaton nodes (limit {MAX_WEIGHT}); lower max_nesting_depth (now {depth})"
                )));
            }
            self.any_cache.push(h);
        }
        Ok(self.any_cache[depth as usize].clone())
    }

    /// Any JSON object (values up to `max_nesting_depth` levels deep).
    pub fn any_object(&mut self) -> Result<Expr> {
        let v = self.any_value(self.opts.max_nesting_depth)?;
        let kv = concat(vec![self.any_string(), self.colon(), v]);
        Ok(self.wrap("{", self.list(kv, 0, None), "}"))
    }

    pub fn schema(&mut self, s: &Value, ptr: &str) -> Result<Option<Expr>> {
        crate::budget::check("compiling the schema")?;
        self.with_passed_path(|c| c.one_level_deeper(ptr, |c| c.schema_unchecked(s, ptr)))
    }

    /// Run `f` with the path passed to this call (see [`Compiler::path`]) as the current one.
    fn with_passed_path(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<Option<Expr>>,
    ) -> Result<Option<Expr>> {
        let p = self.pass.take();
        let outer = std::mem::replace(&mut self.path, p);
        let out = f(self);
        self.path = outer;
        out
    }

    /// Give the next sub-schema compile the current path, one `step` further (`None`: the
    /// same path, for a conjunction such as `allOf` or a `$ref`).
    pub(super) fn pass_path(&mut self, step: Option<Step>) {
        if !self.track_paths {
            return;
        }
        self.pass = self.path.clone().map(|mut p| {
            p.extend(step);
            p
        });
    }

    /// Run `f` (the compilation of one schema) one nesting level deeper, unless the schema
    /// already nests [`MAX_DEPTH`] levels.
    fn one_level_deeper(
        &mut self,
        ptr: &str,
        f: impl FnOnce(&mut Self) -> Result<Option<Expr>>,
    ) -> Result<Option<Expr>> {
        if self.depth >= MAX_DEPTH {
            return Err(schema_error(
                "",
                ptr,
                format!(
                    "the schema nests more than {MAX_DEPTH} levels deep (counting $ref \
                     expansions); lower max_recursion_depth or simplify the schema"
                ),
            ));
        }
        self.depth += 1;
        let h = f(self);
        self.depth -= 1;
        h
    }

    /// Add a reference expansion's size to the running total. Copies of a sub-schema only
    /// multiply through references (recursion unrolled level by level), so counting there
    /// stops a runaway expansion early without weighing every sub-schema at every level.
    fn count_built(&mut self, h: &Option<Expr>, ptr: &str) -> Result<()> {
        if let Some(h) = h {
            self.built = self.built.saturating_add(h.nodes());
            if self.built > MAX_BUILT {
                return Err(Error::Budget(format!(
                    "the schema expands to more than {MAX_BUILT} expression nodes while compiling \
                     (at #{ptr}): lower max_nesting_depth / max_recursion_depth, count bounds, \
                     or use additional_properties=\"forbid\""
                )));
            }
        }
        Ok(())
    }

    fn schema_unchecked(&mut self, s: &Value, ptr: &str) -> Result<Option<Expr>> {
        match s {
            Value::Bool(true) => Ok(Some(self.any_value(self.opts.max_nesting_depth)?)),
            Value::Bool(false) => Ok(None),
            Value::Object(m) => {
                // a resource with dynamic anchors entered without a $ref (an embedded $id)
                let scope = m.get(super::resolve::SCOPE).and_then(Value::as_object);
                let enters = scope.is_some_and(|x| !self.dyn_scope.contains(x));
                if let (true, Some(x)) = (enters, scope) {
                    self.dyn_scope.push(x.clone());
                }
                let out = self.object_schema(m, &Extra::default(), ptr);
                if enters {
                    self.dyn_scope.pop();
                }
                out
            }
            _ => Err(schema_error(
                "",
                ptr,
                "a schema must be a JSON object or a boolean",
            )),
        }
    }

    pub(super) fn check_keywords(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<()> {
        for (k, v) in m {
            let k = k.as_str();
            if SUPPORTED.contains(&k) || UNSUPPORTED.contains(&k) {
                if let Some(what) = super::keywords::malformed(k, v) {
                    return Err(schema_error(k, ptr, format!("{k} must be {what}")));
                }
            }
            if SUPPORTED.contains(&k) || ANNOTATIONS.contains(&k) {
                continue;
            }
            if UNSUPPORTED.contains(&k) {
                self.unsupported(k, ptr, &format!("the keyword `{k}` is not supported"))?;
            } else if !k.starts_with("x-") {
                self.warnings
                    .push(format!("#{ptr}: unknown keyword `{k}` ignored"));
            }
        }
        Ok(())
    }

    /// A keyword that changes which values are valid. Unknown keywords are not: they are
    /// ignored with a warning (see `check_keywords`), wherever they appear.
    pub(super) fn is_validity(k: &str) -> bool {
        (SUPPORTED.contains(&k) || UNSUPPORTED.contains(&k))
            && !ANNOTATIONS.contains(&k)
            && k != "$defs"
            && k != "definitions"
    }

    /// A schema the compiler assembled (`None`: `false`), like [`Compiler::schema`].
    pub(super) fn schema_built(&mut self, b: &Option<Built>, ptr: &str) -> Result<Option<Expr>> {
        crate::budget::check("compiling the schema")?;
        let Some(b) = b else {
            self.pass = None;
            return Ok(None);
        };
        self.with_passed_path(|c| c.one_level_deeper(ptr, |c| c.object_schema(&b.map, &b.x, ptr)))
    }

    /// A keyword map with its typed constraints `x` (see [`Extra`]).
    /// A schema whose conjunction holds a `const` or `enum` (its own, or a branch of its
    /// `allOf`) has at most those values: each is kept when it validates against the whole
    /// schema, which is exact whatever the other keywords are (negations the algebra cannot
    /// write included). `None` when no such keyword applies, or when the validator cannot
    /// decide a value (the schema then takes the general path).
    fn listed_values(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Option<Expr>>> {
        if !x.is_empty() {
            return Ok(None);
        }
        let candidates = literal_values(m).or_else(|| {
            m.get("allOf")?
                .as_array()?
                .iter()
                .find_map(|b| b.as_object().and_then(literal_values))
        });
        let Some(candidates) = candidates else {
            return Ok(None);
        };
        let whole = Value::Object(m.clone());
        let mut kept = Vec::new();
        for v in candidates {
            match self.validates(&v, &whole, ptr, 0) {
                Ok(true) => kept.push(v),
                Ok(false) => {}
                Err(_) => return Ok(None),
            }
        }
        if kept.is_empty() {
            return Ok(Some(None));
        }
        let mut only = Map::new();
        only.insert("enum".into(), Value::Array(kept));
        self.schema(&Value::Object(only), ptr).map(Some)
    }

    fn object_schema(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        self.check_keywords(m, ptr)?;
        if self.needs_algebra(m, ptr)? {
            if let Some(values) = self.listed_values(m, x, ptr)? {
                return Ok(values);
            }
            self.scope_lost += 1;
            let out = self
                .expand_object(m, x, ptr, 0)
                .and_then(|terms| self.compile_terms(terms, ptr));
            self.scope_lost -= 1;
            return out;
        }
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| schema_error("$ref", ptr, "$ref must be a string"))?;
            let rest: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "$ref" && Self::is_validity(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if rest.is_empty() && x.is_empty() {
                return self.reference(r, ptr);
            }
            let mut one = Map::new();
            one.insert("$ref".into(), Value::from(r));
            let one = Value::Object(one);
            let own = Piece::Built(Box::new(Built {
                map: rest,
                x: x.clone(),
            }));
            return self.merged_owned(vec![Piece::Json(&one), own], ptr, ptr);
        }
        if let Some(all) = m.get("allOf") {
            let branches = all
                .as_array()
                .ok_or_else(|| schema_error("allOf", ptr, "allOf must be an array"))?;
            let rest: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "allOf" && Self::is_validity(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut items: Vec<Piece> = branches.iter().map(Piece::Json).collect();
            items.push(Piece::Built(Box::new(Built {
                map: rest,
                x: x.clone(),
            })));
            return self.merged_owned(items, &child(ptr, "allOf"), ptr);
        }
        let any = m.get("anyOf");
        let one = m.get("oneOf");
        if any.is_some() || one.is_some() {
            // Both together, and a oneOf whose branches may overlap (under the default
            // one_of), were sent to the expansion by `needs_algebra`.
            let (kw, list) = match (any, one) {
                (Some(a), None) => ("anyOf", a),
                (None, Some(o)) => ("oneOf", o),
                _ => {
                    let terms = self.expand_object(m, x, ptr, 0)?;
                    return self.compile_terms(terms, ptr);
                }
            };
            let branches = list
                .as_array()
                .ok_or_else(|| schema_error(kw, ptr, format!("{kw} must be an array")))?;
            if kw == "oneOf" && self.opts.one_of == OneOf::AnyOf && !self.disjoint(branches, m)? {
                self.warnings.push(format!(
                    "#{ptr}: oneOf compiled as anyOf (branches not provably disjoint)"
                ));
            }
            let rest: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != kw && Self::is_validity(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            // the one branch that may hold a container here, when every other is a scalar
            // (`Optional[set[str]]`: an array or null): it alone describes the values below
            let sole = if self.track_paths && self.path.is_some() {
                self.sole_container_branch(branches)?
            } else {
                None
            };
            let mut alts = Vec::new();
            for (i, b) in branches.iter().enumerate() {
                let bptr = child(&child(ptr, kw), &i.to_string());
                let h = if rest.is_empty() && x.is_empty() {
                    if sole == Some(i) {
                        self.pass_path(None);
                    }
                    self.schema(b, &bptr)?
                } else {
                    let own = Piece::Built(Box::new(Built {
                        map: rest.clone(),
                        x: x.clone(),
                    }));
                    let merged = self.merge_all(vec![own, Piece::Json(b)], &bptr)?;
                    if sole == Some(i) {
                        self.pass_path(None);
                    }
                    self.owned(merged, &bptr)?
                };
                alts.push(h);
            }
            return Ok(alt_opt(alts));
        }
        if m.contains_key("enum") || m.contains_key("const") {
            return self.values(m, x, ptr);
        }
        self.typed(m, x, ptr)
    }

    /// The index of the only branch that may be an object or an array, when every other branch
    /// surely is a scalar (`null`, a boolean, a number or a string, by its `type`, `const` or
    /// `enum`, through `$ref`s that stand alone) or `false`.
    fn sole_container_branch(&self, branches: &[Value]) -> Result<Option<usize>> {
        let mut sole = None;
        for (i, b) in branches.iter().enumerate() {
            if !self.surely_scalar(b)? {
                if sole.is_some() {
                    return Ok(None);
                }
                sole = Some(i);
            }
        }
        Ok(sole)
    }

    fn surely_scalar(&self, v: &Value) -> Result<bool> {
        const SCALARS: [&str; 5] = ["null", "boolean", "integer", "number", "string"];
        let m = match self.through_refs(v, "")? {
            Some(Value::Bool(b)) => return Ok(!b),
            Some(Value::Object(m)) => m,
            _ => return Ok(false),
        };
        let typed = match m.get("type") {
            Some(Value::String(t)) => SCALARS.contains(&t.as_str()),
            Some(Value::Array(ts)) => ts
                .iter()
                .all(|t| t.as_str().is_some_and(|t| SCALARS.contains(&t))),
            _ => false,
        };
        let listed =
            literal_values(m).is_some_and(|vs| vs.iter().all(|v| !v.is_object() && !v.is_array()));
        Ok(typed || listed)
    }

    /// `v` with the `$ref`s that stand alone (no validity keyword beside them) followed; `None`
    /// when a `$ref` has such a sibling, or after 64 of them.
    pub(super) fn through_refs<'b>(&self, mut v: &'b Value, ptr: &str) -> Result<Option<&'b Value>>
    where
        'a: 'b,
    {
        for _ in 0..64 {
            let Some(r) = v.get("$ref").and_then(Value::as_str) else {
                return Ok(Some(v));
            };
            if v.as_object()
                .is_some_and(|m| m.keys().any(|k| k != "$ref" && Self::is_validity(k)))
            {
                return Ok(None);
            }
            v = self.resolve(r, ptr)?.0;
        }
        Ok(None)
    }

    /// A merged schema that is trivially empty (no type left, no value left).
    pub(super) fn quick_empty(&self, b: &Option<Built>) -> bool {
        match b {
            None => true,
            Some(b) => {
                matches!(b.map.get("type"), Some(Value::Array(a)) if a.is_empty())
                    || matches!(b.map.get("enum"), Some(Value::Array(a)) if a.is_empty())
            }
        }
    }

    /// [`Compiler::merge_all`] of `items`, compiled; with the dynamic scope marked lost when
    /// the merge entered a resource with dynamic anchors.
    fn merged_owned(&mut self, items: Vec<Piece>, at: &str, ptr: &str) -> Result<Option<Expr>> {
        let was = self.lossy.replace(false);
        let merged = self.merge_all(items, at);
        let lost = self.lossy.replace(was);
        let merged = merged?;
        self.scope_lost += u32::from(lost);
        // a conjunction: the same values as the schema holding it
        self.pass_path(None);
        let out = self.owned(merged, ptr);
        self.scope_lost -= u32::from(lost);
        out
    }

    /// Compile a schema that was built here (merged).
    fn owned(&mut self, b: Option<Built>, ptr: &str) -> Result<Option<Expr>> {
        self.schema_built(&b, ptr)
    }
}

/// Whether two listed value sets (`const`/`enum`) have a value in common (as JSON values).
pub(in crate::json_schema) fn share_a_value(a: &[Value], b: &[Value]) -> bool {
    a.iter().any(|p| b.iter().any(|q| json_eq(p, q)))
}

pub(in crate::json_schema) fn literal_values(m: &Map<String, Value>) -> Option<Vec<Value>> {
    match (m.get("const"), m.get("enum")) {
        (Some(c), Some(Value::Array(e))) => {
            Some(e.iter().filter(|v| json_eq(v, c)).cloned().collect())
        }
        (Some(c), _) => Some(vec![c.clone()]),
        (None, Some(Value::Array(e))) => Some(e.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod pointer_tests {
    use super::bounded_pointer;

    #[test]
    fn long_pointers_keep_their_ends_and_count_the_rest() {
        let short = "#/$defs/node/properties/links";
        assert_eq!(bounded_pointer(short), short);
        let long = format!("#/$defs/n{}", "/patternProperties".repeat(1000));
        let b = bounded_pointer(&long);
        assert!(b.len() <= 512, "{}", b.len());
        assert!(b.starts_with("#/$defs/n/patternProperties/"), "{b}");
        assert!(b.ends_with("/patternProperties"), "{b}");
        let kept = b.matches("patternProperties").count();
        assert!(b.contains(&format!("({} steps)", 1000 - kept)), "{b}");
        // one step longer than the bound: only the count stays
        let huge = format!("#/properties/{}", "é".repeat(600));
        let b = bounded_pointer(&huge);
        assert!(b.len() <= 512 && b.contains("steps)"), "{b}");
    }

    /// A child's pointer escapes `~` and `/` in its key (RFC 6901), and only those.
    #[test]
    fn child_pointers_escape_their_key() {
        assert_eq!(super::child("#", "name"), "#/name");
        assert_eq!(
            super::child("#/properties", "a/b~c"),
            "#/properties/a~1b~0c"
        );
        assert_eq!(super::child("#/p", "~1"), "#/p/~01");
        assert_eq!(super::child("", "é ü"), "/é ü");
    }
}

#[cfg(test)]
mod deadline_tests {
    use std::time::Duration;

    use super::Compiler;
    use crate::budget::{scope, Deadline};
    use crate::error::Error;
    use crate::json_schema::JsonSchemaOptions;

    /// A keyword's step that fails once the compile deadline has passed gives the deadline's
    /// error, lenient or not; before it, the keyword's own error or warning.
    #[test]
    fn a_step_stopped_by_the_deadline_is_the_deadlines_error() {
        let docs = [serde_json::json!({"multipleOf": 3})];
        for lenient in [false, true] {
            let opts = JsonSchemaOptions {
                lenient,
                ..JsonSchemaOptions::default()
            };
            let mut c = Compiler::new(&docs, &opts).unwrap();
            let passed = scope(Some(Deadline::after(Duration::ZERO)), || {
                std::thread::sleep(Duration::from_millis(1));
                c.unsupported("multipleOf", "", "stopped")
            });
            assert!(
                matches!(passed, Err(Error::Budget(_))),
                "{lenient}: {passed:?}"
            );
            let before = c.unsupported("multipleOf", "", "not handled");
            assert_eq!(before.is_ok(), lenient, "{before:?}");
            assert_eq!(c.warnings.len(), usize::from(lenient));
        }
    }
}
