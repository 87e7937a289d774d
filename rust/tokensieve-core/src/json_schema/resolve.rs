//! Static `$ref` resolution: base URIs from `$id` (`id` in draft 4), `$anchor` and
//! `$dynamicAnchor` names, plain-name `$id: "#foo"` fragments (drafts 6/7), JSON-pointer
//! fragments relative to the resource they name, and documents supplied in a registry.
//!
//! Before compiling, every `$ref` at a schema position is rewritten into one absolute internal
//! form, `#/pointer` into the root document or `tsdoc:N#/pointer` into registry document `N`,
//! so the compiler resolves references without tracking base URIs (merged `allOf` branches move
//! sub-schemas away from the resource they were written in). Nothing is fetched: a URI that is
//! neither in the documents nor in the registry is a `SchemaError` saying so.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::compile::{child, schema_error};
use super::keywords::{DATA, LIST, MAP, ONE};
use super::number::{Dec, MAX_EXPONENT};
use crate::error::Result;

/// Prefix of a rewritten `$ref` that could not be resolved, followed by the reason.
pub(crate) const UNRESOLVED: &str = "tserror:";

/// Base URI of the root document when it has no `$id`.
const ROOT_BASE: &str = "tokensieve:/root";

/// Split `uri` into (without fragment, fragment).
fn split(uri: &str) -> (&str, &str) {
    match uri.find('#') {
        Some(i) => (&uri[..i], &uri[i + 1..]),
        None => (uri, ""),
    }
}

fn scheme_end(s: &str) -> Option<usize> {
    let i = s.find(':')?;
    let sch = &s[..i];
    let ok = !sch.is_empty()
        && sch.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && sch
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some(i)
}

fn remove_dots(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').collect();
    for (i, s) in segs.iter().enumerate() {
        match *s {
            "." => {
                if i == segs.len() - 1 {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == segs.len() - 1 {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    out.join("/")
}

/// (scheme, authority or None, path, query or None) of an absolute URI without fragment.
fn parts(u: &str) -> (&str, Option<&str>, &str, Option<&str>) {
    let se = scheme_end(u).unwrap_or(0);
    let scheme = &u[..se];
    let mut rest = if se < u.len() { &u[se + 1..] } else { "" };
    let mut auth = None;
    if let Some(r) = rest.strip_prefix("//") {
        let end = r.find(['/', '?']).unwrap_or(r.len());
        auth = Some(&r[..end]);
        rest = &r[end..];
    }
    let (path, query) = match rest.find('?') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    (scheme, auth, path, query)
}

fn join(scheme: &str, auth: Option<&str>, path: &str, query: Option<&str>) -> String {
    let mut s = format!("{scheme}:");
    if let Some(a) = auth {
        s.push_str("//");
        s.push_str(a);
    }
    s.push_str(path);
    if let Some(q) = query {
        s.push('?');
        s.push_str(q);
    }
    s
}

/// RFC 3986 §5.2 reference resolution (`base` absolute, without fragment).
pub(super) fn resolve_uri(base: &str, r: &str) -> String {
    let (r_nofrag, frag) = split(r);
    let with_frag = |s: String| {
        if r.contains('#') {
            format!("{s}#{frag}")
        } else {
            s
        }
    };
    if scheme_end(r_nofrag).is_some() {
        let (sc, au, pa, qu) = parts(r_nofrag);
        let pa = if au.is_some() || pa.starts_with('/') {
            remove_dots(pa)
        } else {
            pa.to_string()
        };
        return with_frag(join(sc, au, &pa, qu));
    }
    let (bs, ba, bp, bq) = parts(base);
    if r_nofrag.is_empty() {
        return with_frag(join(bs, ba, bp, bq));
    }
    if let Some(rest) = r_nofrag.strip_prefix("//") {
        let u = format!("{bs}://{rest}");
        let (sc, au, pa, qu) = parts(&u);
        return with_frag(join(sc, au, &remove_dots(pa), qu));
    }
    let (rp, rq) = match r_nofrag.find('?') {
        Some(i) => (&r_nofrag[..i], Some(&r_nofrag[i + 1..])),
        None => (r_nofrag, None),
    };
    let path = if rp.is_empty() {
        bp.to_string()
    } else if rp.starts_with('/') {
        remove_dots(rp)
    } else if ba.is_some() && bp.is_empty() {
        remove_dots(&format!("/{rp}"))
    } else {
        let dir = match bp.rfind('/') {
            Some(i) => &bp[..=i],
            None => "",
        };
        let merged = format!("{dir}{rp}");
        if ba.is_some() || bp.starts_with('/') {
            remove_dots(&merged)
        } else {
            merged
        }
    };
    let q = if rp.is_empty() && rq.is_none() {
        bq
    } else {
        rq
    };
    with_frag(join(bs, ba, &path, q))
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a resource or anchor lives: document index and JSON pointer.
type Loc = (usize, String);

#[derive(Default)]
struct Index {
    /// absolute URI (no fragment) of a resource → location
    resources: HashMap<String, Loc>,
    /// absolute URI with a plain-name fragment → location
    anchors: HashMap<String, Loc>,
    /// The `anchors` keys written by `$dynamicAnchor`.
    dynamic: std::collections::HashSet<String>,
    /// resource URI → its dynamic anchors (name, location)
    scopes: HashMap<String, Vec<(String, Loc)>>,
}

/// The documents with every `$ref` rewritten; `docs[0]` is the root.
pub(crate) struct Prepared {
    pub docs: Vec<Value>,
    /// Whether some `$dynamicRef` was rewritten into a dynamic reference (see
    /// [`DYNAMIC`]).
    pub dynamic: bool,
}

/// Prefix of a rewritten `$dynamicRef` whose target has a matching `$dynamicAnchor`:
/// `tsdyn:NAME|FALLBACK`. The compiler takes the outermost resource in its dynamic scope that
/// has a `$dynamicAnchor` NAME, else FALLBACK (an internal reference).
pub(crate) const DYNAMIC: &str = "tsdyn:";

/// Keyword added to every resource root with `$dynamicAnchor`s: name → internal reference.
pub(crate) const SCOPE: &str = "tsdynscope";

/// Drafts up to 7 ignore every sibling of `$ref` (including `$id`).
fn ref_overrides(root: &Value) -> bool {
    root.get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| {
            ["draft-03", "draft-04", "draft-05", "draft-06", "draft-07"]
                .iter()
                .any(|d| s.contains(d))
        })
}

/// Drafts before 2020-12 (their `$schema` names draft 3 to 7 or 2019-09) have no
/// `prefixItems`: there it is an unknown keyword, which validates nothing.
fn before_2020(root: &Value) -> bool {
    root.get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| {
            [
                "draft-03", "draft-04", "draft-05", "draft-06", "draft-07", "2019-09",
            ]
            .iter()
            .any(|d| s.contains(d))
        })
}

fn is_draft4(root: &Value) -> bool {
    root.get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("draft-04") || s.contains("draft-03"))
}

/// How a document names its resources.
#[derive(Clone, Copy)]
struct Draft {
    /// `id` rather than `$id` (draft 4)
    draft4: bool,
    /// siblings of `$ref`, `$id` included, are ignored (drafts up to 7)
    legacy: bool,
    /// `prefixItems` is no keyword (drafts before 2020-12)
    before_2020: bool,
}

impl Draft {
    fn of(doc: &Value) -> Draft {
        Draft {
            draft4: is_draft4(doc),
            legacy: ref_overrides(doc),
            before_2020: before_2020(doc),
        }
    }

    /// The identifier of a schema object, if it has one that counts.
    fn id<'m>(&self, m: &'m Map<String, Value>) -> Option<&'m str> {
        if self.legacy && m.contains_key("$ref") {
            return None;
        }
        let v = if self.draft4 {
            m.get("id")
        } else {
            m.get("$id")
        };
        v.and_then(Value::as_str)
    }
}

/// Visit every schema position of `v` (pre-order) with its base URI.
fn walk(v: &Value, base: &str, ptr: &str, draft: Draft, visit: &mut dyn FnMut(&Value, &str, &str)) {
    let Value::Object(m) = v else { return };
    let mut base = base.to_string();
    if let Some(id) = draft.id(m) {
        if !id.starts_with('#') {
            base = split(&resolve_uri(&base, id)).0.to_string();
        }
    }
    visit(v, &base, ptr);
    for (k, x) in m {
        if DATA.contains(&k.as_str()) {
            continue;
        }
        let p = child(ptr, k);
        if MAP.contains(&k.as_str()) {
            if let Value::Object(xs) = x {
                for (name, s) in xs {
                    walk(s, &base, &child(&p, name), draft, visit);
                }
            }
        } else if LIST.contains(&k.as_str()) && x.is_array() {
            for (i, s) in x.as_array().into_iter().flatten().enumerate() {
                walk(s, &base, &child(&p, &i.to_string()), draft, visit);
            }
        } else if ONE.contains(&k.as_str()) {
            walk(x, &base, &p, draft, visit);
        }
    }
}

/// Mutable access to the value at a JSON pointer.
fn at_mut<'v>(v: &'v mut Value, ptr: &str) -> Option<&'v mut Value> {
    if ptr.is_empty() {
        Some(v)
    } else {
        v.pointer_mut(ptr)
    }
}

/// Prepare `root` and the registry documents (URI → schema).
pub(crate) fn prepare(root: &Value, registry: &[(String, Value)]) -> Result<Prepared> {
    // the documents as given (each is copied once, into `out`, where references are rewritten)
    let mut docs: Vec<&Value> = vec![root];
    let mut bases: Vec<String> = vec![ROOT_BASE.to_string()];
    for (uri, doc) in registry {
        if scheme_end(uri).is_none() {
            return Err(schema_error(
                "$ref",
                "",
                format!("registry key {uri:?} is not an absolute URI"),
            ));
        }
        docs.push(doc);
        bases.push(split(uri).0.to_string());
    }
    for doc in &docs {
        check_numbers(doc, "", 0)?;
    }
    let drafts: Vec<Draft> = docs.iter().map(|d| Draft::of(d)).collect();
    // pass 1: resources and anchors
    let mut idx = Index::default();
    for (d, doc) in docs.iter().enumerate() {
        idx.resources.insert(bases[d].clone(), (d, String::new()));
        let draft = drafts[d];
        walk(doc, &bases[d], "", draft, &mut |v, base, ptr| {
            let Value::Object(m) = v else { return };
            if let Some(id) = draft.id(m) {
                let abs = resolve_uri(base, id);
                let (u, frag) = split(&abs);
                if id.starts_with('#') {
                    if !frag.is_empty() && !frag.starts_with('/') {
                        idx.anchors
                            .entry(format!("{base}#{frag}"))
                            .or_insert((d, ptr.to_string()));
                    }
                } else {
                    idx.resources
                        .entry(u.to_string())
                        .or_insert((d, ptr.to_string()));
                    if !frag.is_empty() && !frag.starts_with('/') {
                        idx.anchors
                            .entry(format!("{u}#{frag}"))
                            .or_insert((d, ptr.to_string()));
                    }
                }
            }
            for kw in ["$anchor", "$dynamicAnchor"] {
                if let Some(a) = m.get(kw).and_then(Value::as_str) {
                    idx.anchors
                        .entry(format!("{base}#{a}"))
                        .or_insert((d, ptr.to_string()));
                }
            }
            if let Some(a) = m.get("$dynamicAnchor").and_then(Value::as_str) {
                if !draft.legacy {
                    idx.dynamic.insert(format!("{base}#{a}"));
                    idx.scopes
                        .entry(base.to_string())
                        .or_default()
                        .push((a.to_string(), (d, ptr.to_string())));
                }
            }
        });
    }
    // pass 2: rewrite every $ref (and $dynamicRef)
    let mut out: Vec<Value> = docs.iter().map(|&d| d.clone()).collect();
    let mut dynamic = false;
    for (d, doc) in docs.iter().enumerate() {
        let mut edits: Vec<(String, std::result::Result<String, String>)> = Vec::new();
        walk(doc, &bases[d], "", drafts[d], &mut |v, base, ptr| {
            if let Some(Value::String(r)) = v.get("$ref") {
                edits.push((ptr.to_string(), target(&idx, base, r)));
            } else if let Some(Value::String(r)) = v.get("$dynamicRef") {
                if !drafts[d].legacy {
                    edits.push((ptr.to_string(), dynamic_target(&idx, base, r)));
                }
            }
        });
        // deepest first, so that dropping siblings never moves a later edit's target
        edits.reverse();
        for (ptr, t) in edits {
            // An unresolvable reference fails only when it is used (unused `$defs` and
            // registry documents may hold references that are never followed).
            let t = t.unwrap_or_else(|why| format!("{UNRESOLVED}{why}"));
            if let Some(Value::Object(m)) = at_mut(&mut out[d], &ptr) {
                dynamic |= t.starts_with(DYNAMIC);
                m.remove("$dynamicRef");
                m.insert("$ref".into(), Value::String(t));
                if drafts[d].legacy {
                    // only the reference counts; definitions stay reachable by pointer
                    m.retain(|k, _| matches!(k.as_str(), "$ref" | "definitions" | "$defs"));
                }
            }
        }
    }
    // keywords a document's own draft does not have validate nothing there (a 2020-12 schema
    // may refer to a 2019-09 document holding `prefixItems`)
    for (d, doc) in docs.iter().enumerate() {
        if !drafts[d].before_2020 {
            continue;
        }
        let mut found: Vec<String> = Vec::new();
        walk(doc, &bases[d], "", drafts[d], &mut |v, _, ptr| {
            if v.get("prefixItems").is_some() {
                found.push(ptr.to_string());
            }
        });
        for ptr in found.into_iter().rev() {
            if let Some(Value::Object(m)) = at_mut(&mut out[d], &ptr) {
                m.remove("prefixItems");
            }
        }
    }
    // the dynamic anchors of each resource, on its root
    for (uri, anchors) in &idx.scopes {
        let Some((d, ptr)) = idx.resources.get(uri) else {
            continue;
        };
        let mut scope = Map::new();
        for (name, (d2, p2)) in anchors {
            scope
                .entry(name.clone())
                .or_insert_with(|| Value::String(internal(*d2, p2)));
        }
        if let Some(Value::Object(m)) = at_mut(&mut out[*d], ptr) {
            m.insert(SCOPE.into(), Value::Object(scope));
        }
    }
    Ok(Prepared { docs: out, dynamic })
}

/// The internal form of a location.
fn internal(doc: usize, ptr: &str) -> String {
    if doc == 0 {
        format!("#{ptr}")
    } else {
        format!("tsdoc:{doc}#{ptr}")
    }
}

/// The internal form of `$dynamicRef` `r` written where the base URI is `base`: its static
/// target, as a dynamic reference ([`DYNAMIC`]) when that target is a `$dynamicAnchor` of the
/// same name (otherwise it behaves as `$ref`).
fn dynamic_target(idx: &Index, base: &str, r: &str) -> std::result::Result<String, String> {
    let t = target(idx, base, r)?;
    let abs = resolve_uri(base, r);
    let (u, frag) = split(&abs);
    let frag = pct_decode(frag);
    if !frag.is_empty()
        && !frag.starts_with('/')
        && !frag.contains('|')
        && idx.dynamic.contains(&format!("{u}#{frag}"))
    {
        return Ok(format!("{DYNAMIC}{frag}|{t}"));
    }
    Ok(t)
}

/// Every number in a document must be exact as a decimal (`number::Dec`): the compiler reads
/// bounds, `const`, `enum` and `multipleOf` from the number's text, at any size, but an exponent
/// beyond `number::MAX_EXPONENT` would spell a number with more digits than any grammar can
/// hold. Documents nest at most `MAX_DOCUMENT_DEPTH` levels.
fn check_numbers(v: &Value, ptr: &str, depth: usize) -> Result<()> {
    if depth > MAX_DOCUMENT_DEPTH {
        return Err(schema_error(
            "",
            ptr,
            format!("the document nests more than {MAX_DOCUMENT_DEPTH} levels deep"),
        ));
    }
    match v {
        Value::Number(n) if Dec::parse(&n.to_string()).is_none() => {
            let kw = ptr.rsplit('/').next().unwrap_or("");
            return Err(schema_error(
                kw,
                ptr,
                format!(
                    "the number {n} has an exponent beyond \u{b1}{MAX_EXPONENT}; such numbers \
                     are not supported"
                ),
            ));
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                if !matches!(x, Value::Null | Value::Bool(_) | Value::String(_)) {
                    check_numbers(x, &child(ptr, &i.to_string()), depth + 1)?;
                }
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                if !matches!(x, Value::Null | Value::Bool(_) | Value::String(_)) {
                    check_numbers(x, &child(ptr, k), depth + 1)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Deepest nesting of arrays and objects in a schema document (JSON text parsed by the
/// bindings nests at most 128 levels; this bounds documents built in Rust).
pub(crate) const MAX_DOCUMENT_DEPTH: usize = 1000;

/// The internal form of reference `r` written where the base URI is `base`.
fn target(idx: &Index, base: &str, r: &str) -> std::result::Result<String, String> {
    let abs = resolve_uri(base, r);
    let (u, frag) = split(&abs);
    let frag = pct_decode(frag);
    let (doc, ptr) = if frag.is_empty() || frag.starts_with('/') {
        let Some((d, p)) = idx.resources.get(u) else {
            return Err(missing(r, u));
        };
        (*d, format!("{p}{frag}"))
    } else {
        match idx.anchors.get(&format!("{u}#{frag}")) {
            Some((d, p)) => (*d, p.clone()),
            None if idx.resources.contains_key(u) => {
                return Err(format!("$ref {r:?}: no anchor {frag:?} in {u}"))
            }
            None => return Err(missing(r, u)),
        }
    };
    Ok(if doc == 0 {
        format!("#{ptr}")
    } else {
        format!("tsdoc:{doc}#{ptr}")
    })
}

fn missing(r: &str, u: &str) -> String {
    format!(
        "$ref {r:?} names {u:?}, which is neither in this schema nor in the registry; pass that \
         document in the `registry` option (URI → schema); nothing is fetched from the network"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc3986_examples() {
        let b = "http://a/b/c/d;p?q";
        for (r, want) in [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q#s"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
            ("urn:x:y", "urn:x:y"),
        ] {
            assert_eq!(resolve_uri(b, r), want, "{r}");
        }
        assert_eq!(
            resolve_uri("urn:uuid:1234", "#/$defs/a"),
            "urn:uuid:1234#/$defs/a"
        );
    }

    #[test]
    fn ids_anchors_and_registry() {
        let root = json!({
            "$id": "http://example.com/root.json",
            "properties": {
                "a": {"$ref": "item.json"},
                "b": {"$ref": "#foo"},
                "c": {"$ref": "http://other.org/x.json#/$defs/y"},
                "d": {"$ref": "nested/n.json#bar"}
            },
            "$defs": {
                "i": {"$id": "item.json", "type": "integer"},
                "f": {"$anchor": "foo", "type": "string"},
                "n": {"$id": "nested/n.json", "$defs": {"x": {"$anchor": "bar", "const": 1}}},
                "data": {"const": {"$id": "fake.json"}}
            }
        });
        let reg = vec![(
            "http://other.org/x.json".to_string(),
            json!({"$defs": {"y": {"$ref": "#/$defs/z"}, "z": {"type": "null"}}}),
        )];
        let p = prepare(&root, &reg).unwrap();
        let props = &p.docs[0]["properties"];
        assert_eq!(props["a"]["$ref"], "#/$defs/i");
        assert_eq!(props["b"]["$ref"], "#/$defs/f");
        assert_eq!(props["c"]["$ref"], "tsdoc:1#/$defs/y");
        assert_eq!(props["d"]["$ref"], "#/$defs/n/$defs/x");
        assert_eq!(p.docs[1]["$defs"]["y"]["$ref"], "tsdoc:1#/$defs/z");
        // an $id inside const is data, not an identifier
        let bad = json!({"$id": "http://e.com/r", "$ref": "fake.json", "$defs": {"d": {"const": {"$id": "fake.json"}}}});
        let p = prepare(&bad, &[]).unwrap();
        assert!(p.docs[0]["$ref"].as_str().unwrap().starts_with(UNRESOLVED));
        // unknown remote: kept as an unresolved reference, reported when followed
        let p = prepare(&json!({"$ref": "http://nowhere.test/s.json"}), &[]).unwrap();
        let r = p.docs[0]["$ref"].as_str().unwrap();
        assert!(r.starts_with(UNRESOLVED) && r.contains("registry"), "{r}");
        // draft 4 ids and draft 7 plain-name fragments
        let d4 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "id": "http://x/y.json",
                        "properties": {"a": {"$ref": "#n"}}, "definitions": {"n": {"id": "#n", "type": "null"}}});
        let p = prepare(&d4, &[]).unwrap();
        assert_eq!(p.docs[0]["properties"]["a"]["$ref"], "#/definitions/n");
    }
}
