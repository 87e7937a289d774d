//! The core's layers point one way (see `docs/architecture.md`): every top-level module may
//! import only the modules listed for it below. The test reads the production code of each
//! module (comments and `#[cfg(test)]` modules left out, `tests.rs` files and `tests/` folders
//! skipped) and fails on any
//! `crate::X` path that the table does not allow.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Module → the modules it may import, bottom layer first.
const ALLOWED: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("budget", &["error"]),
    ("automata", &["error", "budget"]),
    ("trie", &["error", "budget"]),
    ("vocab", &["error", "budget", "trie"]),
    ("atoms", &["error", "budget", "automata", "trie", "vocab"]),
    ("kernel", &["error", "budget"]),
    ("regex", &["error", "budget", "automata"]),
    ("json_schema", &["error", "budget", "automata", "regex"]),
    (
        "ebnf",
        &[
            "error", "budget", "automata", "trie", "vocab", "atoms", "regex",
        ],
    ),
    (
        "lark",
        &[
            "error",
            "budget",
            "automata",
            "atoms",
            "regex",
            "json_schema",
            "ebnf",
        ],
    ),
    (
        "structural_tag",
        &[
            "error",
            "budget",
            "automata",
            "trie",
            "vocab",
            "atoms",
            "regex",
            "json_schema",
            "ebnf",
        ],
    ),
    (
        "index",
        &["error", "budget", "automata", "trie", "vocab", "atoms"],
    ),
    (
        "fit",
        &[
            "error", "budget", "automata", "vocab", "index", "atoms", "trie",
        ],
    ),
    ("reasoning", &["error", "budget", "automata", "vocab"]),
    (
        "unique",
        &[
            "error",
            "budget",
            "automata",
            "trie",
            "vocab",
            "json_schema",
        ],
    ),
    (
        "matcher",
        &[
            "error",
            "budget",
            "automata",
            "trie",
            "vocab",
            "atoms",
            "regex",
            "json_schema",
            "ebnf",
            "lark",
            "structural_tag",
            "index",
            "fit",
            "reasoning",
            "unique",
        ],
    ),
    (
        "serialize",
        &[
            "error",
            "budget",
            "automata",
            "trie",
            "vocab",
            "atoms",
            "regex",
            "json_schema",
            "ebnf",
            "index",
            "fit",
            "reasoning",
            "unique",
            "matcher",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            // test folders (e.g. json_schema/tests/) are not production code
            if p.file_name().is_some_and(|n| n != "tests") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The modules a source text names as `crate::X`, outside comments and test modules.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", |l| l.trim_start());
        if line.trim() == "#[cfg(test)]" && (next.starts_with("mod ") || next.contains(" mod ")) {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(k) = rest.find("crate::") {
            rest = &rest[k + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue; // the crate root re-exports the public API
        }
        let allowed = ALLOWED
            .iter()
            .find(|(m, _)| *m == top)
            .unwrap_or_else(|| panic!("module {top} has no row in the layer table"))
            .1;
        let text = std::fs::read_to_string(&f).unwrap();
        for m in imports(&text) {
            if m != top && !allowed.contains(&m.as_str()) {
                bad.push(format!("{} imports crate::{m}", rel.display()));
            }
        }
    }
    bad
}

#[test]
fn layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "imports against the layer table:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_upward_imports() {
    let text = "use crate::error::Result;\n// crate::matcher in a comment\nfn f() { crate::index::g() }\n#[cfg(test)]\nmod tests {\n    use crate::matcher::X;\n}\n";
    let got: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(got, ["error", "index"]);
}
