//! Keyword tables: the keywords the compiler knows, the annotation keywords, which JSON types
//! each validity keyword constrains, the applicators the algebra expands, and where
//! sub-schemas sit (for reference resolution). The constraints no keyword spells (from
//! negation and merging) are typed, in `extra`, never keywords.

use serde_json::Value;

use super::number::Dec;

/// Keywords compiled by `compile`.
pub(super) const SUPPORTED: &[&str] = &[
    "type",
    "enum",
    "const",
    "nullable",
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
];

/// Keywords that never change validity.
pub(super) const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "discriminator",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "xml",
    "externalDocs",
    // written by `resolve::prepare` on resources with dynamic anchors
    super::resolve::SCOPE,
];

/// Validity keywords this version does not compile.
pub(super) const UNSUPPORTED: &[&str] = &["$dynamicRef", "$recursiveRef"];

// Type bits: a value's JSON type, integers and non-integral numbers apart.
pub(super) const T_NULL: u8 = 1;
pub(super) const T_BOOL: u8 = 2;
pub(super) const T_INT: u8 = 4;
pub(super) const T_FRAC: u8 = 8;
pub(super) const T_STRING: u8 = 16;
pub(super) const T_ARRAY: u8 = 32;
pub(super) const T_OBJECT: u8 = 64;
pub(super) const T_ALL: u8 = 127;

pub(super) fn type_bits(name: &str) -> Option<u8> {
    Some(match name {
        "null" => T_NULL,
        "boolean" => T_BOOL,
        "integer" => T_INT,
        "number" => T_INT | T_FRAC,
        "string" => T_STRING,
        "array" => T_ARRAY,
        "object" => T_OBJECT,
        _ => return None,
    })
}

pub(super) fn value_bits(v: &Value) -> u8 {
    match v {
        Value::Null => T_NULL,
        Value::Bool(_) => T_BOOL,
        Value::Number(n) => {
            if Dec::from_json(n).frac.is_empty() {
                T_INT
            } else {
                T_FRAC
            }
        }
        Value::String(_) => T_STRING,
        Value::Array(_) => T_ARRAY,
        Value::Object(_) => T_OBJECT,
    }
}

/// The type names of `bits`, and whether the numbers are the non-integral ones only (which no
/// type name spells: `number` is listed, see `extra::Extra::fraction_only`).
pub(super) fn bits_to_types(bits: u8) -> (Value, bool) {
    let mut v = Vec::new();
    for (b, n) in [
        (T_NULL, "null"),
        (T_BOOL, "boolean"),
        (T_STRING, "string"),
        (T_ARRAY, "array"),
        (T_OBJECT, "object"),
    ] {
        if bits & b != 0 {
            v.push(Value::from(n));
        }
    }
    let fraction_only = match (bits & T_INT != 0, bits & T_FRAC != 0) {
        (true, true) => {
            v.push(Value::from("number"));
            false
        }
        (true, false) => {
            v.push(Value::from("integer"));
            false
        }
        (false, true) => {
            v.push(Value::from("number"));
            true
        }
        (false, false) => false,
    };
    (Value::Array(v), fraction_only)
}

/// The types a validity keyword constrains (`T_ALL` when it is not type-specific).
pub(super) fn applies_to(k: &str) -> u8 {
    match k {
        "properties"
        | "required"
        | "additionalProperties"
        | "minProperties"
        | "maxProperties"
        | "patternProperties"
        | "propertyNames"
        | "dependentRequired"
        | "dependentSchemas" => T_OBJECT,
        "items" | "prefixItems" | "additionalItems" | "minItems" | "maxItems" | "uniqueItems"
        | "contains" | "minContains" | "maxContains" => T_ARRAY,
        "pattern" | "format" | "minLength" | "maxLength" => T_STRING,
        "multipleOf" | "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
            T_INT | T_FRAC
        }
        _ => T_ALL,
    }
}

/// Keywords with sub-schemas or boolean structure, removed from a part's keyword map.
pub(super) const APPLICATORS: &[&str] = &[
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$defs",
    "definitions",
];

/// Keywords that only `algebra` compiles.
pub(super) const ALGEBRA: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
];

/// Keywords whose value is a schema (for reference resolution's walk).
pub(super) const ONE: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "items",
];

/// Keywords whose value is an array of schemas.
pub(super) const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value is an object of schemas.
pub(super) const MAP: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Keywords whose values are data, never schemas.
pub(super) const DATA: &[&str] = &["const", "enum", "examples", "default", "example"];

/// What the meta-schema requires of a validity keyword's value, when `v` is not that:
/// `Some(description)` of the expected value. A keyword with a malformed value is refused
/// wherever it stands (even where its type does not apply, such as `uniqueItems` on a
/// string), never ignored.
pub(super) fn malformed(k: &str, v: &Value) -> Option<&'static str> {
    let schema = |v: &Value| v.is_object() || v.is_boolean();
    let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
    let count = |v: &Value| {
        v.as_u64().is_some()
            || v.as_number().is_some_and(|n| {
                let d = Dec::from_json(n);
                !d.neg && d.frac.is_empty()
            })
    };
    let (ok, what) = match k {
        "type" => (
            v.is_string() || strings(v),
            "a type name or an array of type names",
        ),
        "enum" | "prefixItems" | "allOf" | "anyOf" | "oneOf" => (v.is_array(), "an array"),
        "nullable" | "uniqueItems" => (v.is_boolean(), "a boolean"),
        "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => (
            v.as_object().is_some_and(|o| o.values().all(schema)),
            "an object whose values are schemas",
        ),
        "dependentRequired" => (
            v.as_object().is_some_and(|o| o.values().all(strings)),
            "an object whose values are arrays of strings",
        ),
        "dependencies" => (
            v.as_object()
                .is_some_and(|o| o.values().all(|d| schema(d) || strings(d))),
            "an object whose values are schemas or arrays of strings",
        ),
        "required" => (strings(v), "an array of strings"),
        "additionalProperties"
        | "additionalItems"
        | "contains"
        | "propertyNames"
        | "not"
        | "if"
        | "then"
        | "else"
        | "unevaluatedProperties"
        | "unevaluatedItems" => (schema(v), "a schema (an object or a boolean)"),
        "items" => (
            schema(v) || v.as_array().is_some_and(|a| a.iter().all(schema)),
            "a schema or an array of schemas",
        ),
        "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
        | "minContains" | "maxContains" => (count(v), "a non-negative integer"),
        "minimum" | "maximum" => (v.is_number(), "a number"),
        "exclusiveMinimum" | "exclusiveMaximum" => (
            v.is_number() || v.is_boolean(),
            "a number (or, in draft 4, a boolean)",
        ),
        "multipleOf" => (
            v.as_number().is_some_and(|n| {
                let d = Dec::from_json(n);
                !d.neg && !d.is_zero()
            }),
            "a number greater than 0",
        ),
        "pattern" | "format" | "$ref" | "$dynamicRef" | "$recursiveRef" => {
            (v.is_string(), "a string")
        }
        _ => (true, ""),
    };
    (!ok).then_some(what)
}
