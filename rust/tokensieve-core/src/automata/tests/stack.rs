//! Recursion through a stack against copies: any JSON value built once and called again for each
//! nested value (`Expr::Recursive`) must have exactly the language of the same value copied once
//! per nesting level, which is how it was built before the stack.

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::json_schema::{any_value_both, any_value_stacked, JsonSchemaOptions};
use crate::regex::RegexOptions;

use super::counters::same_language;

fn opts() -> RegexOptions {
    RegexOptions {
        max_states: 2_000_000,
        ..Default::default()
    }
}

#[test]
fn any_value_through_the_stack_equals_copies() {
    use crate::json_schema::Whitespace;
    for (depth, ws) in [
        (0, Whitespace::Default),
        (1, Whitespace::Compact),
        (2, Whitespace::Flexible),
        (3, Whitespace::Default),
        (4, Whitespace::Pattern("[ \n]?".into())),
        (6, Whitespace::Default),
    ] {
        let o = JsonSchemaOptions {
            whitespace: ws,
            ..Default::default()
        };
        let (stacked, copied) = any_value_both(&o, depth);
        let a = LazyDfa::from_expr("stacked", &stacked, &opts()).unwrap();
        let b = LazyDfa::from_expr("copied", &copied, &opts()).unwrap();
        if let Err(path) = same_language(&a, &b) {
            panic!(
                "depth {depth}: stack and copies differ after {:?}",
                String::from_utf8_lossy(&path)
            );
        }
    }
}

#[test]
fn any_value_nests_to_the_bound_and_no_further() {
    let o = JsonSchemaOptions::default();
    let stacked = any_value_stacked(&o, 50);
    let d = LazyDfa::from_expr("stacked", &stacked, &opts()).unwrap();
    let accepts = |s: &str| {
        let st = d.walk(d.start(), s.as_bytes()).unwrap();
        st != DEAD && d.is_accepting(st)
    };
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    assert!(accepts(&nested(50)));
    assert!(!accepts(&nested(51)));
    // at the bound a value can still be written, only not a deeper container
    let at = d.walk(d.start(), "[".repeat(50).as_bytes()).unwrap();
    assert_ne!(at, DEAD);
    assert_eq!(d.walk(at, b"[").unwrap(), DEAD);
    assert_eq!(d.walk(at, b"{").unwrap(), DEAD);
    assert_ne!(d.walk(at, b"\"x\"").unwrap(), DEAD);
    // 16 × 3 = 48 levels
    let mixed = format!("{}{}", r#"{"a":[{"b":"#.repeat(16), "}]}".repeat(16));
    assert!(accepts(&format!(
        "{}null{}",
        r#"{"a":[{"b":"#.repeat(16),
        "}]}".repeat(16)
    )));
    assert!(!accepts(&mixed), "a member needs a value");
    assert!(!accepts(&format!(
        "{}null{}",
        r#"{"a":[{"b":"#.repeat(17),
        "}]}".repeat(17)
    )));
    assert!(!accepts("[1}"));
    assert!(!accepts("{\"a\":1]"));
}
