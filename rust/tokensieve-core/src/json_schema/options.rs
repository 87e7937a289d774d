//! The one options table of the JSON Schema compiler. The Python keyword arguments, and later
//! the vLLM request keys, CLI flags and cache keys, use these names and string values.

use crate::error::{Error, Result};

pub use crate::automata::spell::Spelling;

/// Whether objects accept properties the schema does not declare, when it says nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdditionalProperties {
    /// The JSON Schema default: undeclared properties are allowed (after the declared ones).
    Allow,
    /// Behave as if every object schema said `"additionalProperties": false`.
    Forbid,
}

/// What `format` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Formats {
    /// Known formats constrain the string (unknown formats accept any string).
    Assert,
    /// `format` is an annotation: any string.
    Annotate,
}

/// How `oneOf` is compiled when its branches are not provably disjoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OneOf {
    /// A `SchemaError` naming `oneOf` (a warning and `anyOf` when `lenient`).
    Error,
    /// Compile it as `anyOf` (a superset: a value matching two branches is accepted).
    AnyOf,
}

/// Where whitespace may appear in the JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Whitespace {
    /// At most one space after `:` and `,`, nowhere else (what `json.dumps` writes).
    Default,
    /// No whitespace at all.
    Compact,
    /// Up to `max_whitespace` characters of `[ \t\n\r]` at every place JSON allows whitespace
    /// inside a value (not before or after the top-level value).
    Flexible,
    /// A regex (over `[ \t\n\r]` only) used at every place JSON allows whitespace inside a value.
    Pattern(String),
}

/// In which order an object's declared properties may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PropertyOrder {
    /// In the order the schema declares them (what generation usually wants; the default).
    Schema,
    /// In any order, each at most once, undeclared properties (where allowed) anywhere among
    /// them; `const`/`enum` objects likewise. Built lazily: the set of properties written so
    /// far is part of the automaton's state, and only the sets a prefix reaches are built.
    Any,
}

/// How a recursive `$ref` is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recursion {
    /// As a call on a stack kept by the automaton: exact to `max_stack_depth` open calls, the
    /// automaton's size independent of the depth; its states multiply with the depth reached,
    /// so `precompute` of a recursive schema may need a small `max_stack_depth`.
    Stack,
    /// Unrolled: the target is copied `max_recursion_depth` times into itself, deeper values
    /// are dropped (a plain finite automaton, which `precompute` handles like any other).
    Unroll,
}

/// Options of [`crate::Grammar::from_json_schema`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonSchemaOptions {
    pub additional_properties: AdditionalProperties,
    pub formats: Formats,
    pub one_of: OneOf,
    pub whitespace: Whitespace,
    /// Bound of each whitespace run for `Whitespace::Flexible`.
    pub max_whitespace: u32,
    /// Where recursion is unrolled (a `$ref` cycle through `not`, `oneOf` exclusivity,
    /// `if`/`then`/`else` or `unevaluated*`): how many times one `$ref` may be entered while it
    /// is already being expanded.
    pub max_recursion_depth: u32,
    /// How a recursive `$ref` is compiled elsewhere (see [`Recursion`]).
    pub recursion: Recursion,
    /// With `Recursion::Stack`: at most this many recursive calls may be open at once (a tree
    /// of depth `d` built through one `$ref` needs `d`).
    pub max_stack_depth: u32,
    /// Levels of nested arrays/objects inside an unconstrained ("any JSON") value.
    pub max_nesting_depth: u32,
    /// At the recursion limit, drop values that need deeper recursion even when they are
    /// required (the grammar then accepts a subset); without it such a schema is an error.
    pub truncate_recursion: bool,
    /// Unsupported keywords become warnings (the grammar then accepts a superset).
    pub lenient: bool,
    /// How declared property names and `const`/`enum` strings may be spelled in the output:
    /// as written (the default) or in any JSON spelling. String values keep every spelling.
    pub literal_spelling: Spelling,
    /// See [`PropertyOrder`].
    pub property_order: PropertyOrder,
    /// Documents `$ref` may name by URI: (absolute URI, schema as canonical JSON text), sorted
    /// by URI. Nothing is ever fetched.
    pub registry: Vec<(String, String)>,
}

impl Default for JsonSchemaOptions {
    fn default() -> Self {
        JsonSchemaOptions {
            additional_properties: AdditionalProperties::Allow,
            formats: Formats::Assert,
            one_of: OneOf::Error,
            whitespace: Whitespace::Default,
            max_whitespace: 4,
            max_recursion_depth: 3,
            recursion: Recursion::Stack,
            max_stack_depth: 128,
            max_nesting_depth: 64,
            truncate_recursion: false,
            lenient: false,
            literal_spelling: Spelling::AsWritten,
            property_order: PropertyOrder::Schema,
            registry: Vec::new(),
        }
    }
}

fn bad(name: &str, value: &str, allowed: &str) -> Error {
    Error::InvalidArgument(format!(
        "{name}={value:?} is not an option value; use one of {allowed}"
    ))
}

impl JsonSchemaOptions {
    /// Every name [`JsonSchemaOptions::set`] takes: [`Self::NAMES`], `property_order` and
    /// `registry`.
    pub fn option_names() -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .iter()
            .copied()
            .chain(["property_order", "registry"])
    }

    /// Set an option from its name and string value (the form shared by all front ends).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let int = |v: &str| -> Result<u32> {
            Ok(crate::error::uint_option(name, v, u32::MAX as u64)? as u32)
        };
        let boolean = |v: &str| -> Result<bool> {
            match v {
                "true" | "True" | "1" => Ok(true),
                "false" | "False" | "0" => Ok(false),
                _ => Err(bad(name, v, "true, false")),
            }
        };
        match name {
            "additional_properties" => {
                self.additional_properties = match value {
                    "allow" => AdditionalProperties::Allow,
                    "forbid" => AdditionalProperties::Forbid,
                    _ => return Err(bad(name, value, "\"allow\", \"forbid\"")),
                }
            }
            "formats" => {
                self.formats = match value {
                    "assert" => Formats::Assert,
                    "annotate" => Formats::Annotate,
                    _ => return Err(bad(name, value, "\"assert\", \"annotate\"")),
                }
            }
            "one_of" => {
                self.one_of = match value {
                    "error" => OneOf::Error,
                    "any_of" => OneOf::AnyOf,
                    _ => return Err(bad(name, value, "\"error\", \"any_of\"")),
                }
            }
            "whitespace" => {
                self.whitespace = match value {
                    "default" => Whitespace::Default,
                    "compact" => Whitespace::Compact,
                    "flexible" => Whitespace::Flexible,
                    p => Whitespace::Pattern(p.to_string()),
                }
            }
            "max_whitespace" => self.max_whitespace = int(value)?,
            "max_recursion_depth" => self.max_recursion_depth = int(value)?,
            "recursion" => {
                self.recursion = match value {
                    "stack" => Recursion::Stack,
                    "unroll" => Recursion::Unroll,
                    _ => return Err(bad(name, value, "\"stack\", \"unroll\"")),
                }
            }
            "max_stack_depth" => {
                self.max_stack_depth = crate::automata::depth::stack_depth_option(value)?
            }
            "max_nesting_depth" => self.max_nesting_depth = int(value)?,
            "truncate_recursion" => self.truncate_recursion = boolean(value)?,
            "lenient" => self.lenient = boolean(value)?,
            "literal_spelling" => {
                self.literal_spelling = match value {
                    "as_written" => Spelling::AsWritten,
                    "any" => Spelling::Any,
                    _ => return Err(bad(name, value, "\"as_written\", \"any\"")),
                }
            }
            "property_order" => {
                self.property_order = match value {
                    "schema" => PropertyOrder::Schema,
                    "any" => PropertyOrder::Any,
                    _ => return Err(bad(name, value, "\"schema\", \"any\"")),
                }
            }
            "registry" => {
                // the documents nest one level inside the registry's object
                let depth = super::MAX_TEXT_DEPTH;
                let v = super::parse_json_within(value, depth + 1)
                    .ok_or_else(|| Error::Schema {
                        keyword: String::new(),
                        pointer: String::new(),
                        message: format!("a registry document nests more than {depth} levels deep"),
                    })?
                    .map_err(|e| {
                        Error::InvalidArgument(format!(
                            "registry must be a JSON object mapping URIs to schemas: {e}"
                        ))
                    })?;
                let serde_json::Value::Object(m) = v else {
                    return Err(Error::InvalidArgument(
                        "registry must be a JSON object mapping URIs to schemas".into(),
                    ));
                };
                let mut reg = Vec::new();
                for (uri, doc) in m {
                    if !(doc.is_object() || doc.is_boolean()) {
                        return Err(Error::InvalidArgument(format!(
                            "registry entry {uri:?} is not a schema (an object or a boolean)"
                        )));
                    }
                    reg.push((uri, doc.to_string()));
                }
                reg.sort();
                self.registry = reg;
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                "unknown JSON Schema option {name:?}; options are: {}, property_order, registry",
                Self::NAMES.join(", ")
            )))
            }
        }
        Ok(())
    }

    /// The options as canonical JSON (every option, in [`Self::NAMES`] order, as the string
    /// value `set` accepts): part of cache keys and index-file headers.
    pub fn canonical(&self) -> String {
        let ws = match &self.whitespace {
            Whitespace::Default => "default".to_string(),
            Whitespace::Compact => "compact".to_string(),
            Whitespace::Flexible => "flexible".to_string(),
            Whitespace::Pattern(p) => p.clone(),
        };
        let values: [String; 12] = [
            match self.additional_properties {
                AdditionalProperties::Allow => "allow",
                AdditionalProperties::Forbid => "forbid",
            }
            .into(),
            match self.formats {
                Formats::Assert => "assert",
                Formats::Annotate => "annotate",
            }
            .into(),
            match self.one_of {
                OneOf::Error => "error",
                OneOf::AnyOf => "any_of",
            }
            .into(),
            ws,
            self.max_whitespace.to_string(),
            self.max_recursion_depth.to_string(),
            match self.recursion {
                Recursion::Stack => "stack",
                Recursion::Unroll => "unroll",
            }
            .into(),
            self.max_stack_depth.to_string(),
            self.max_nesting_depth.to_string(),
            self.truncate_recursion.to_string(),
            self.lenient.to_string(),
            match self.literal_spelling {
                Spelling::AsWritten => "as_written",
                Spelling::Any => "any",
            }
            .into(),
        ];
        let mut map = serde_json::Map::new();
        for (k, v) in Self::NAMES.iter().zip(values) {
            map.insert((*k).to_string(), serde_json::Value::String(v));
        }
        // only when not the default, so that keys and index files written before the option
        // existed stay as they were
        if self.property_order == PropertyOrder::Any {
            map.insert("property_order".into(), "any".into());
        }
        // only when given, so that keys without a registry stay as they were
        if !self.registry.is_empty() {
            let mut reg = serde_json::Map::new();
            for (uri, text) in &self.registry {
                // read by `set` within these limits, so never Null
                let v = super::parse_json_within(text, super::MAX_TEXT_DEPTH)
                    .and_then(|parsed| parsed.ok())
                    .unwrap_or(serde_json::Value::Null);
                reg.insert(uri.clone(), v);
            }
            map.insert("registry".into(), serde_json::Value::Object(reg));
        }
        serde_json::Value::Object(map).to_string()
    }

    /// The option names.
    pub const NAMES: [&'static str; 12] = [
        "additional_properties",
        "formats",
        "one_of",
        "whitespace",
        "max_whitespace",
        "max_recursion_depth",
        "recursion",
        "max_stack_depth",
        "max_nesting_depth",
        "truncate_recursion",
        "lenient",
        "literal_spelling",
    ];
}
