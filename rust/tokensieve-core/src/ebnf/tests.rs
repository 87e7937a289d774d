//! The grammar front end: parsing, errors with positions, left recursion, the stack.

use super::*;

fn lang(text: &str) -> Result<Compiled> {
    compile(text, &EbnfOptions::default())
}

#[test]
fn parses_and_lowers_a_small_grammar() {
    let c = lang("root ::= \"a\" [b-d]* (\"e\" | x)?\nx ::= \"x\"+ # comment\n").unwrap();
    assert!(
        c.expr.is_plain(),
        "a grammar without recursion is one regular expression"
    );
    assert!(c.warnings.is_empty());
}

#[test]
fn errors_carry_line_and_column() {
    let e = lang("root ::= a\n  a ::= \"x\" b\n").err().unwrap();
    match e {
        Error::Grammar {
            line,
            column,
            message,
        } => {
            assert_eq!((line, column), (2, 13), "{message}");
            assert!(message.contains("`b`"), "{message}");
        }
        e => panic!("{e}"),
    }
    let e = lang("root ::= \"x\" (= \"y\")").err().unwrap();
    assert!(e.to_string().contains("lookahead"), "{e}");
    let e = lang("r ::= \"x\"").err().unwrap();
    assert!(e.to_string().contains("no rule `root`"), "{e}");
    let e = lang("root ::= [z-a]").err().unwrap();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = lang("root ::= \"x\" )").err().unwrap();
    assert!(e.to_string().contains("unmatched"), "{e}");
}

#[test]
fn unreachable_rules_warn() {
    let c = lang("root ::= \"a\"\nunused ::= \"b\"\n").unwrap();
    assert_eq!(c.warnings.len(), 1);
    assert!(c.warnings[0].contains("`unused`"));
}

#[test]
fn recursion_becomes_a_knot() {
    let c = lang("root ::= \"(\" root \")\" | \"x\"").unwrap();
    assert!(matches!(c.expr, Expr::Knot { .. }));
}

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::regex::RegexOptions;

/// The grammar's automaton and a test: (whether `s` is a prefix of some string of the
/// language, whether it is in the language).
fn automaton(text: &str, depth: u32) -> LazyDfa {
    let c = compile(
        text,
        &EbnfOptions {
            max_stack_depth: depth,
            ..Default::default()
        },
    )
    .unwrap();
    LazyDfa::from_owned(
        "test",
        c.expr,
        &RegexOptions {
            max_states: 2_000_000,
            ..Default::default()
        },
    )
    .unwrap()
}

fn run(d: &LazyDfa, s: &str) -> (bool, bool) {
    let st = d.walk(d.start(), s.as_bytes()).unwrap();
    (st != DEAD, st != DEAD && d.is_accepting(st))
}

fn accepts(d: &LazyDfa, s: &str) -> bool {
    run(d, s).1
}

const ARITH_LEFT: &str = r#"
root ::= expr
expr ::= expr "+" term | expr "-" term | term
term ::= term "*" factor | term "/" factor | factor
factor ::= num | "(" expr ")" | "-" factor
num ::= [0-9]+
"#;

#[test]
fn left_recursive_arithmetic() {
    let d = automaton(ARITH_LEFT, 1000);
    for ok in [
        "1",
        "1+2",
        "1+2*3-4/5",
        "(1+2)*3",
        "-(1)",
        "--1",
        "((1))+((2*3))",
    ] {
        assert!(accepts(&d, ok), "{ok}");
    }
    for bad in ["", "+", "1+", "(1", "1)", "1++2", "()", "1 + 2"] {
        assert!(!accepts(&d, bad), "{bad}");
    }
    // prefixes stay alive exactly when they can be finished
    assert_eq!(run(&d, "(1+"), (true, false));
    assert_eq!(run(&d, "1)"), (false, false));
    // a long left-recursive chain needs no stack
    let long = vec!["7"; 3000].join("+");
    assert!(accepts(&d, &long));
}

#[test]
fn indirect_left_recursion_and_nullable_prefixes() {
    let g = r#"
root ::= a
a ::= b "x" | "y"
b ::= opt a "z" | c
c ::= a "w"
opt ::= "" | "o"
"#;
    let d = automaton(g, 100);
    // a = y ((o? a z | a w) x)* flattened: strings built by hand
    for ok in ["y", "yzx", "ywx", "yzxwx", "oyzx", "oyzxzx"] {
        assert!(accepts(&d, ok), "{ok}");
    }
    for bad in ["", "x", "yz", "yx", "oy", "zx"] {
        assert!(!accepts(&d, bad), "{bad}");
    }
}

#[test]
fn nested_parentheses_to_the_stack_bound() {
    let g = "root ::= p\np ::= \"(\" p \")\" | \"x\"";
    let d = automaton(g, 1000);
    let nest = |n: usize| format!("{}x{}", "(".repeat(n), ")".repeat(n));
    assert!(accepts(&d, &nest(50)));
    assert!(accepts(&d, &nest(500)));
    // at the bound: the deepest call still allowed, no deeper opening
    let d = automaton(g, 10);
    let mut deepest = 0;
    for n in 0..20 {
        if accepts(&d, &nest(n)) {
            deepest = n;
        }
    }
    // the start rule's own call counts as one of the ten
    assert_eq!(deepest, 9, "deepest {deepest}");
    let at = "(".repeat(deepest);
    assert_eq!(run(&d, &at), (true, false));
    assert!(!run(&d, &format!("{at}(")).0, "no opening past the bound");
}

#[test]
fn tail_recursion_uses_no_stack() {
    let g = "root ::= ws \"!\"\nws ::= \" \" ws | \"\"";
    let d = automaton(g, 2);
    assert!(accepts(&d, &format!("{}!", " ".repeat(5000))));
}

#[test]
fn unicode_classes_escapes_and_any() {
    let g = r#"root ::= [α-ω]+ "\u00e9" [^"\\\x00-\x1f] . "\x41" "\U0001F600"{2}"#;
    let d = automaton(g, 10);
    assert!(accepts(&d, "αβé#zA😀😀"));
    assert!(accepts(&d, "ωé€\nA😀😀"));
    assert!(!accepts(&d, "αé\"zA😀😀"));
    assert!(!accepts(&d, "aé#zA😀😀"));
    assert!(!accepts(&d, "αé#zA😀"));
}

#[test]
fn repetition_bounds() {
    let d = automaton(r#"root ::= "a"{2,3} "b"{,2} "c"{2,} "d"{1}"#, 10);
    for ok in ["aaccd", "aaabbcccd", "aabcccccd"] {
        assert!(accepts(&d, ok), "{ok}");
    }
    for bad in ["acc", "aaaaccd", "aabbbccd", "aacd"] {
        assert!(!accepts(&d, bad), "{bad}");
    }
}

#[test]
fn a_rule_with_no_way_out_matches_nothing() {
    let e = compile("root ::= \"x\" | a\na ::= a \"y\"", &EbnfOptions::default()).unwrap();
    let d = LazyDfa::from_owned("t", e.expr, &RegexOptions::default()).unwrap();
    assert!(accepts(&d, "x"));
    assert!(!run(&d, "y").0);
}

#[test]
fn shared_heavy_rules_are_called_not_copied() {
    // each level uses the one below twice: written out, the grammar would double per level
    let mut g = String::from("root ::= r0\n");
    for i in 0..40 {
        g.push_str(&format!("r{i} ::= r{} \"a\" r{} | \"b\"\n", i + 1, i + 1));
    }
    g.push_str("r40 ::= [a-z]{1,3}\n");
    let c = compile(&g, &EbnfOptions::default()).unwrap();
    assert!(c.expr.weight() < 1_000_000, "weight {}", c.expr.weight());
    let d = LazyDfa::from_owned("t", c.expr, &RegexOptions::default()).unwrap();
    assert!(accepts(&d, "b"));
}

#[test]
fn nullable_left_recursion_is_split_and_rewritten() {
    // each rule can match the empty string and calls itself (or the other) first
    let d = automaton(
        "root ::= \"a\" r\nr ::= (\"a\" | r)?\ns ::= t? \"x\" | \"\"\nt ::= s \"y\"\n",
        100,
    );
    // r = ε | "a" | r: just ε and "a"
    for ok in ["a", "aa"] {
        assert!(accepts(&d, ok), "{ok}");
    }
    for bad in ["aaa", "ab", ""] {
        assert!(!accepts(&d, bad), "{bad}");
    }
    let d = automaton("root ::= s\ns ::= t? \"x\" | \"\"\nt ::= s \"y\"\n", 100);
    // s = ε | (s y)? x  →  ε, x, yx, xyx, yxyx, ...
    for ok in ["", "x", "yx", "xyx", "yxyx", "xyxyx"] {
        assert!(accepts(&d, ok), "{ok:?}");
    }
    for bad in ["y", "xx", "yy", "xy"] {
        assert!(!accepts(&d, bad), "{bad:?}");
    }
}

#[test]
fn postfix_chains_through_several_rules_stay_small() {
    // member, call and index each start with postfix: rewritten with postfix last, the chain is
    // one loop, and a long chain keeps a handful of stacks per state
    let g = r#"
root    ::= postfix
postfix ::= member | call | index | atom
member  ::= postfix "." name
call    ::= postfix "(" args? ")"
index   ::= postfix "[" [0-9]+ "]"
args    ::= postfix ("," postfix)*
atom    ::= name | "(" postfix ")"
name    ::= [a-z]+
"#;
    let d = automaton(g, 1000);
    let long = "a.b(c,d[1]).e[2](f)".to_string() + &".g(h)[3]".repeat(200);
    assert!(accepts(&d, &long));
    assert!(accepts(&d, "(a.b)(c)"));
    for bad in ["a.", "a(", "a[]", ".a", "a(b,)"] {
        assert!(!accepts(&d, bad), "{bad}");
    }
}

/// `from_ebnf` on a thread whose own stack is small (a server's compile thread): every stage
/// runs on the compile's big stack, so only the front end's bounds decide.
fn compile_on_small_thread(text: String) -> Result<crate::Grammar> {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let toks: Vec<Vec<u8>> = (0..=255u8)
                .map(|b| vec![b])
                .chain([b"<e>".to_vec()])
                .collect();
            let v = std::sync::Arc::new(crate::Vocabulary::new(toks, vec![256], vec![], None)?);
            crate::Grammar::from_ebnf(
                &text,
                v,
                &EbnfOptions::default(),
                &crate::GrammarOptions::default(),
            )
        })
        .unwrap()
        .join()
        .unwrap()
}

/// A chain of `n` rules, `r{i}` written with `body` (`{j}` the next rule), ending in `"z"`.
fn chain(n: usize, body: &str) -> String {
    let mut g = String::from("root ::= r0\n");
    for i in 0..n {
        g += &format!("r{i} ::= {}\n", body.replace("{j}", &(i + 1).to_string()));
    }
    g + &format!("r{n} ::= \"z\"\n")
}

#[test]
fn repetitions_of_repetitions_merge_where_the_language_is_the_same() {
    // brute force over counts: the lengths `k` copies of `x{a,b}`, `k` in `c..=d`, can take
    for a in 0..4u32 {
        for b in a..6 {
            for c in 0..4u32 {
                for d in c..5 {
                    let mut lens = std::collections::BTreeSet::new();
                    for k in c..=d {
                        lens.extend(k * a..=k * b);
                    }
                    let contiguous = lens.len() as u32
                        == lens.last().map_or(0, |l| l + 1) - lens.first().copied().unwrap_or(0);
                    match parse::merge_counts((a, Some(b)), (c, Some(d))) {
                        Some((lo, hi)) => assert_eq!(
                            lens,
                            (lo..=hi.unwrap()).collect(),
                            "x{{{a},{b}}}{{{c},{d}}}"
                        ),
                        None => assert!(a > 1 && c != d, "x{{{a},{b}}}{{{c},{d}}}: {contiguous}"),
                    }
                }
            }
        }
    }
    assert_eq!(
        parse::merge_counts((0, Some(1)), (0, None)),
        Some((0, None))
    );
    assert_eq!(parse::merge_counts((1, None), (1, None)), Some((1, None)));
    assert_eq!(
        parse::merge_counts((2, None), (3, Some(3))),
        Some((6, None))
    );
    assert_eq!(parse::merge_counts((1, Some(u32::MAX)), (0, Some(2))), None);
    let d = automaton(&format!("root ::= \"a\"{}", "?".repeat(10_000)), 10);
    assert!(accepts(&d, "") && accepts(&d, "a") && !accepts(&d, "aa"));
    let d = automaton("root ::= (\"ab\"{2}){3} \"c\"{1,2}* \"d\"+?", 10);
    assert!(accepts(&d, &"ab".repeat(6)) && !accepts(&d, &"ab".repeat(5)));
    assert!(accepts(&d, &("ab".repeat(6) + "cccdd")));
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // repetitions that do not merge nest; past the bound, an error with a position
    let e = lang(&format!("root ::= \"a\"{}", "{2,3}{2}{2,3}".repeat(500)))
        .err()
        .unwrap();
    assert!(e.to_string().contains("nests more than 1000 levels"), "{e}");
    assert!(lang(&format!("root ::= \"a\"{}", "{2,3}{2,4}".repeat(200))).is_ok());
    // merged chains of any length compile, also on a thread with a small stack of its own
    let g = compile_on_small_thread(format!("root ::= \"a\"{}", "?".repeat(10_000))).unwrap();
    assert_eq!(g.dfa().walk(g.dfa().start(), b"aa").unwrap(), DEAD);
    let e = compile_on_small_thread(format!("root ::= \"a\"{}", "{2}{2,3}".repeat(2000)))
        .err()
        .unwrap();
    assert!(e.to_string().contains("nests more than"), "{e}");
}

#[test]
fn long_rule_chains_compile_on_a_small_stack() {
    // left corners: `r_i ::= r_{i+1} "x" | "y"`; inlined, the chain would nest 6,000 levels
    let g = compile_on_small_thread(chain(3000, "r{j} \"x\" | \"y\"")).unwrap();
    let d = g.dfa();
    for s in [
        "y",
        "yx",
        &format!("z{}", "x".repeat(3000)),
        &format!("y{}", "x".repeat(2999)),
    ] {
        let st = d.walk(d.start(), s.as_bytes()).unwrap();
        assert!(st != DEAD && d.is_accepting(st), "{}", &s[..s.len().min(8)]);
    }
    let st = d
        .walk(d.start(), format!("y{}", "x".repeat(3000)).as_bytes())
        .unwrap();
    assert!(st == DEAD || !d.is_accepting(st));
    // optional left corners and parentheses, used once each: built once, not once per rule
    for (n, body) in [(5000, "r{j}? \"a\""), (60_000, "\"(\" r{j} \")\"")] {
        let g = compile_on_small_thread(chain(n, body)).unwrap();
        assert_ne!(g.dfa().start(), DEAD);
    }
    // the paren chain: exactly n pairs around "z"
    let d = automaton(&chain(300, "\"(\" r{j} \")\""), 1000);
    let s = format!("{}z{}", "(".repeat(300), ")".repeat(300));
    assert!(accepts(&d, &s));
    assert!(!accepts(&d, &s[1..s.len() - 1]));
}

#[test]
fn left_recursive_cycles_stay_within_the_group_budget() {
    let cycle = |n: usize| {
        let mut g = String::from("root ::= r0\n");
        for i in 0..n {
            g += &format!("r{i} ::= r{} \"a\" | \"b\"\n", (i + 1) % n);
        }
        g
    };
    // r0 = b a*: every order of the rewriting keeps the group's nodes within its budget
    let d = automaton(&cycle(300), 10);
    assert!(accepts(&d, "b") && accepts(&d, "baaaa") && !accepts(&d, "ab"));
    let e = lang(&cycle(2000)).err().unwrap();
    assert!(e.to_string().contains("grows past"), "{e}");
}

#[test]
fn empty_prefix_chains_before_left_recursion_are_bounded() {
    // `a ::= n0 a "x" | "y"` with n0 → n1 → … all able to match nothing: the non-empty forms of
    // the chain are written out in front of the recursion, so the chain is bounded in depth and
    // in size (a 15,000-rule chain took 7 s and a 50,000-rule one 101 s, past the deadline)
    let g = |n: usize, body: &str| {
        let mut t = String::from("root ::= a\na ::= n0 a \"x\" | \"y\"\n");
        for i in 0..n {
            t += &format!("n{i} ::= {}\n", body.replace("{j}", &(i + 1).to_string()));
        }
        t + &format!("n{n} ::= \"w\"?\n")
    };
    let d = automaton(&g(40, "n{j}? \"q\"?"), 50);
    for s in ["y", "yx", "qyx", "wqqyx", "wyx", "qwyx"] {
        assert_eq!(accepts(&d, s), s != "qwyx", "{s}");
    }
    let e = lang(&g(15_000, "n{j}? \"q\"?")).err().unwrap();
    assert!(e.to_string().contains("more than 64 nested rules"), "{e}");
    let e = lang(&g(40, "n{j}? n{j}? \"q\"?")).err().unwrap();
    assert!(e.to_string().contains("open into more than"), "{e}");
}

#[test]
fn a_rewritten_rule_stays_within_twice_the_height_bound() {
    // `n` rules that can match nothing, each 40 levels high, written out in front of the
    // recursion: 60 of them nest about 2,400 levels, past twice the 1,000 of a rule as written
    let grammar = |n: usize| {
        let mut body = "n{j}? \"q\"?".to_string();
        for _ in 0..20 {
            body = format!("({body})? \"q\"?");
        }
        let mut t = String::from("root ::= a\na ::= n0 a \"x\" | \"y\"\n");
        for i in 0..n {
            t += &format!("n{i} ::= {}\n", body.replace("{j}", &(i + 1).to_string()));
        }
        t + &format!("n{n} ::= \"w\"?\n")
    };
    let e = lang(&grammar(60)).err().unwrap();
    assert!(e.to_string().contains("levels deep"), "{e}");
    assert!(lang(&grammar(20)).is_ok());
}

#[test]
fn nested_repetitions_that_do_not_merge_are_weighed_in_linear_time() {
    // 60 nested counted repetitions (`{33,34}{35,40}` does not merge): looking for counters
    // looked at each level's body twice, 2^60 steps before any deadline check
    let text = format!("root ::= \"a\"{}", "{33,34}{35,40}".repeat(30));
    let c = lang(&text).unwrap();
    let t = std::time::Instant::now();
    // a hang guard, not a speed claim: 2^60 steps would never finish
    assert!(c.expr.weight() > 1);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn blanks_before_a_repetition_operator_and_c_escapes() {
    let d = automaton("root ::= \"a\" * \"b\" {2, 3} [x] + \"c\"\t?\n", 8);
    for (s, ok) in [
        ("bb", false),
        ("bbx", true),
        ("aaabbbxxc", true),
        ("bbbbx", false),
        ("bbxcc", false),
    ] {
        assert_eq!(accepts(&d, s), ok, "{s:?}");
    }
    // a blank before something else is still a sequence: `"a" "b"` stays two items
    let d = automaton("root ::= \"a\" \"b\"\nother ::= \"c\" *\n", 8);
    assert!(accepts(&d, "ab"));
    // a newline before an operator is not skipped: `*` cannot start a rule
    assert!(lang("root ::= \"a\"\n* \"b\"\n").is_err());
    let d = automaton("root ::= \"\\a\\f\\v\" [\\a-\\f]\n", 8);
    assert!(accepts(&d, "\u{7}\u{c}\u{b}\u{8}"));
    assert!(!accepts(&d, "\u{7}\u{c}\u{b}\u{e}"));
    let d = automaton("root ::= \"\\e\"\n", 8);
    assert!(accepts(&d, "\u{1b}") && !accepts(&d, "e"));
}

#[test]
fn regex_built_in_is_the_full_match_language_of_its_pattern() {
    let d = automaton(
        "root ::= \"x\" Regex(\"[0-9]{2,3}\") \"y\" | Regex(\"^a.b$\")\n",
        8,
    );
    for (s, ok) in [
        ("x12y", true),
        ("x123y", true),
        ("x1y", false),
        ("x1234y", false),
        ("acb", true),
        ("a\nb", true), // `.` takes a line break, as xgrammar reads it
        ("ab", false),
    ] {
        assert_eq!(accepts(&d, s), ok, "{s:?}");
    }
    let d = automaton("root ::= Regex(\"(?i)ab\") Regex(\"c*\")?\n", 8);
    assert!(accepts(&d, "aB") && accepts(&d, "Abccc"));
    // flags: `i` folds ASCII case, `.` takes a line break only with `s`
    let d = automaton("root ::= Regex(\"a.b\", flags=\"i\")\n", 8);
    assert!(accepts(&d, "AcB") && !accepts(&d, "A\nB"));
    let d = automaton("root ::= Regex(\"a.b\", flags=\"su\")\n", 8);
    assert!(accepts(&d, "a\nb") && !accepts(&d, "A\nb"));
    // json_string: only what JSON writes as itself between quotes
    let d = automaton("root ::= Regex(\".+\", json_string=true)\n", 8);
    assert!(accepts(&d, "a b") && accepts(&d, "你好"));
    for s in ["a\"b", "a\\b", "a\tb", ""] {
        assert!(!accepts(&d, s), "{s:?}");
    }
    for (g, what) in [
        (
            "root ::= Regex(\"a\", flags=\"m\")\n",
            "flag 'm' is not supported",
        ),
        ("root ::= Regex(\"a\", flags=true)\n", "one string literal"),
        (
            "root ::= Regex(\"a\", json_string=1)\n",
            "`true` or `false`",
        ),
        (
            "root ::= Regex(\"a\", lazy=true)\n",
            "option `lazy` is not supported",
        ),
        (
            "root ::= Regex(\"\\\"\", json_string=true)\n",
            "matches no string",
        ),
        ("root ::= Regex(\"(?i)Σ\")\n", "past ASCII"),
        ("root ::= Regex(\"a(?=b)\")\n", "does not compile"),
        ("root ::= Regex(abc)\n", "string literal"),
        ("root ::= Regex(\"a\"\n", "not closed"),
    ] {
        let e = lang(g).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(what), "{g:?}: {e}");
    }
    // a pattern that can be empty in front of a left recursion is refused, with line and column
    let e = lang("root ::= Regex(\"a*\") root \"b\" | \"c\"\n")
        .err()
        .map(|e| e.to_string());
    assert!(e.unwrap_or_default().contains("left recursion"));
}

/// xgrammar's `TagDispatch`: free text until a trigger completes, then its rule, then free
/// text again (with `loop_after_dispatch`, the default); excluded strings never in free text.
#[test]
fn tag_dispatch_built_in() {
    let g =
        "root ::= TagDispatch((\"<a>\", ra), (\"<b>\", rb))\nra ::= \"1\" [x]*\nrb ::= \"22\"\n";
    let d = automaton(g, 64);
    for (s, ok) in [
        ("", true),
        ("free text", true),
        ("hi <a>1xx and <b>22 bye", true),
        ("<a>1<a>1x", true),
        ("<b>2", false),  // inside the rule: not finished
        ("<a>2", false),  // the rule after its trigger
        ("<<b>22", true), // the trigger completes inside the free text
        ("<a", true),     // an unfinished trigger ends free text
    ] {
        assert_eq!(accepts(&d, s), ok, "{s:?}");
    }
    assert!(run(&d, "<a>").0);
    let once = automaton(
        "root ::= TagDispatch((\"<a>\", ra), loop_after_dispatch=false) \"!\"\nra ::= \"1\"\n",
        64,
    );
    assert!(accepts(&once, "x<a>1!") && accepts(&once, "xy!"));
    assert!(!accepts(&once, "x<a>1 more!"));
    let ex = automaton(
        "root ::= TagDispatch((\"go\", r), excludes=(\"END\",)) \"END\"\nr ::= \"()\"\n",
        64,
    );
    assert!(accepts(&ex, "a go() b END") && !accepts(&ex, "a END b END"));
    // recursion through a dispatch's rule: after a trigger, so no left recursion
    let rec = automaton(
        "root ::= r\nr ::= TagDispatch((\"[\", inner))\ninner ::= r \"]\"\n",
        64,
    );
    assert!(accepts(&rec, "a[b[c]d]e") && !accepts(&rec, "a[b"));
    for (g, what) in [
        (
            "root ::= TagDispatch((\"\", r))\nr ::= \"a\"\n",
            "trigger is empty",
        ),
        ("root ::= TagDispatch((\"t\", nope))\n", "nope"),
        (
            "root ::= TagDispatch(\"t\", r)\nr ::= \"a\"\n",
            "takes (\"trigger\", rule)",
        ),
        (
            "root ::= TagDispatch((\"t\" r))\nr ::= \"a\"\n",
            "is (\"trigger\", rule)",
        ),
        (
            "root ::= TagDispatch((\"t\", r), stop_eos=false)\nr ::= \"a\"\n",
            "option `stop_eos` is not supported",
        ),
        (
            "root ::= TagDispatch((\"t\", r), excludes=(\"t\"))\nr ::= \"a\"\n",
            "both a trigger and an excluded string",
        ),
    ] {
        let e = lang(g).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(what), "{g:?}: {e}");
    }
}

/// xgrammar's rule attributes: `temperature` is read and checked (no part of the language);
/// the attributes that change the language are refused by name.
#[test]
fn rule_attributes() {
    let d = automaton(
        "root ::= \"a\" value \"z\"\nvalue[temperature=0.6] ::= \"x\"+\n",
        8,
    );
    assert!(accepts(&d, "axxz") && !accepts(&d, "az"));
    for (g, what) in [
        ("root[temperature=-0.1] ::= \"a\"\n", "at least 0"),
        ("root[temperature=1e999] ::= \"a\"\n", "finite"),
        ("root[temperature=abc] ::= \"a\"\n", "finite"),
        (
            "root[lazy, temperature=0.6] ::= \"a\"\n",
            "attribute `lazy`",
        ),
        ("root[max_chars=2] ::= \"a\"\n", "attribute `max_chars`"),
        (
            "root[temperature=0.5 ::= \"a\"\n",
            "temperature of rule `root`",
        ),
    ] {
        let e = lang(g).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(what), "{g:?}: {e}");
    }
}
