use super::*;
use crate::automata::dfa::{LazyDfa, DEAD};
use crate::regex::RegexOptions;

/// `text` compiled with the default options and no vocabulary.
fn compiled(text: &str) -> Result<Compiled> {
    compile(
        text,
        &LarkOptions::default(),
        1 << 24,
        &mut crate::atoms::AtomList::new(None),
    )
}

/// The message `text` is refused with (empty when it compiles).
fn err(text: &str) -> String {
    compiled(text)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

fn dfa(text: &str) -> LazyDfa {
    let c = compiled(text).unwrap();
    LazyDfa::from_lexed("lark", c.parser, c.lexer, &RegexOptions::default()).unwrap()
}

fn accepts(d: &LazyDfa, s: &str) -> bool {
    let st = d.walk(d.start(), s.as_bytes()).unwrap();
    st != DEAD && d.is_accepting(st)
}

fn prefix(d: &LazyDfa, s: &str) -> bool {
    d.walk(d.start(), s.as_bytes()).unwrap() != DEAD
}

#[test]
fn greedy_lexemes_end_only_where_no_longer_one_is_allowed() {
    // "ab" is lexed as C, never as A then B
    let d = dfa("start: A B | C \"x\"\nA: \"a\"\nB: \"b\"\nC: \"ab\"");
    assert!(!accepts(&d, "ab"));
    assert!(accepts(&d, "abx"));
    let d = dfa("start: A B\nA: \"a\"\nB: \"b\"");
    assert!(accepts(&d, "ab"));
}

#[test]
fn keywords_and_identifiers_follow_the_parser() {
    let d = dfa("start: \"if\" ID | ID \"=\" ID\nID: /[a-z]+/\n%ignore \" \"");
    assert!(accepts(&d, "if x"));
    assert!(accepts(&d, "if = x"));
    assert!(accepts(&d, "iffy = x"));
    assert!(!accepts(&d, "ifx"));
    assert!(accepts(&d, "if   x"));
    // blanks only between two lexemes: not first, not after the last
    assert!(!prefix(&d, " if"));
    assert!(!prefix(&d, "if x "));
    assert!(!prefix(&d, "x y"));
}

#[test]
fn ignored_lexemes_stand_between_any_two() {
    let d = dfa(
        "start: expr\nexpr: expr \"+\" term | term\nterm: NUMBER | \"(\" expr \")\"\n\
         %import common.NUMBER\n%import common.WS\n%ignore WS",
    );
    assert!(accepts(&d, "1+2"));
    assert!(accepts(&d, "( 1 + 2.5 ) +3"));
    // a blank may follow the last number: an operator could still come after it
    assert!(accepts(&d, "1+3 "));
    assert!(!accepts(&d, "1 2"));
    assert!(!accepts(&d, "1+"));
    // a number is one lexeme: no blank inside it
    assert!(!prefix(&d, "1. 5+"));
}

#[test]
fn a_skip_stands_where_some_lexeme_may_follow_and_the_end_may_still_come() {
    let d = dfa("start: \"a\" B \"c\"?\nB: /[0-9]+/\n%ignore \" \"");
    assert!(accepts(&d, "a1 "));
    assert!(accepts(&d, "a 1 c"));
    assert!(!prefix(&d, "a1 c "));
    let d = dfa("%llguidance {\"allow_initial_skip\": true}\nstart: \"a\"\n%ignore \" \"");
    assert!(accepts(&d, "  a"));
    let d = dfa("%llguidance {\"ignore_once\": true}\nstart: \"a\" \"b\"\n%ignore /[ ]{1,2}/");
    assert!(accepts(&d, "a  b"));
    assert!(!prefix(&d, "a   "));
}

#[test]
fn a_terminal_both_skipped_and_in_a_rule_is_read_both_ways() {
    let d = dfa("start: \"a\" WS \"b\" | \"a\" \"c\"\nWS: \" \"\n%ignore WS");
    assert!(accepts(&d, "a b"));
    assert!(accepts(&d, "a c"));
    assert!(accepts(&d, "a  b"));
    assert!(!accepts(&d, "ab"));
}

#[test]
fn a_lexeme_of_the_empty_string_is_optional_where_used() {
    let d = dfa("start: \"a\" /b*/ \"c\"");
    assert!(accepts(&d, "ac"));
    assert!(accepts(&d, "abbc"));
    let d = dfa("start: /[a-z]*/ \"x\"");
    assert!(accepts(&d, "x"));
    assert!(!accepts(&d, "ax"));
    let d = dfa("start:");
    assert!(accepts(&d, ""));
    assert!(!prefix(&d, "a"));
}

#[test]
fn a_lazy_lexeme_ends_where_it_first_matches() {
    let d = dfa("start: \"<\" r \">\"\nr[lazy]: /[a-z]+/");
    assert!(accepts(&d, "<a>"));
    assert!(!prefix(&d, "<ab"));
    // a lazy lexeme the parser allows ends first, even where a greedy one could go on
    let d = dfa("start: r \"b\" | Y \"c\"\nr[lazy]: /a+/\nY: /a+/");
    assert!(accepts(&d, "ab"));
    assert!(!prefix(&d, "ac"));
    let d = dfa("start: r\nr[suffix=\"x\"]: /[a-z]*/");
    assert!(accepts(&d, "abx"));
    assert!(accepts(&d, "x"));
    assert!(!prefix(&d, "axb"));
}

#[test]
fn a_lexeme_begun_is_never_nothing_read() {
    // after `a` the lexer's NFA states are the start's again: the state must still know a
    // lexeme is under way (the end of the text there is no lexeme)
    let d = dfa("start: A?\nA: /a*b/");
    assert!(accepts(&d, ""));
    assert!(!accepts(&d, "a"));
    assert!(!accepts(&d, "aa"));
    assert!(accepts(&d, "aab"));
}

#[test]
fn more_than_256_symbols_take_two_bytes_each() {
    // 300 keywords beside an identifier: each keyword ends alone or with the identifier, and
    // has its probe: far more than 256 symbols
    let mut g = String::from("start: word+\nword: ID");
    for i in 0..300 {
        g.push_str(&format!(" | \"k{i}x\""));
    }
    g.push_str("\nID: /[a-z][a-z0-9]*/\n%ignore \" \"\n");
    let d = dfa(&g);
    assert!(accepts(&d, "k7x k299x abc k12"));
    assert!(accepts(&d, "k300x"));
    assert!(!prefix(&d, "7"));
    let mut g = String::from("start: option\noption: \"option-000\"");
    for i in 1..300 {
        g.push_str(&format!(" | \"option-{i:03}\""));
    }
    let d = dfa(&g);
    assert!(accepts(&d, "option-255"));
    assert!(accepts(&d, "option-299"));
    assert!(!accepts(&d, "option-300"));
}

#[test]
fn and_and_not_on_terminals() {
    let d = dfa("start: ST\nST: LOWER & ABC\nLOWER: /[a-z]+/\nABC: /[abcABC]+/");
    assert!(accepts(&d, "abc") && !accepts(&d, "abd") && !accepts(&d, "A"));
    // `&` binds tighter than `|`
    let d = dfa("start: ST\nST: /[ab]+/ | /[cd]+/ & /[def]+/");
    assert!(accepts(&d, "ab") && accepts(&d, "dd") && !accepts(&d, "c"));
    let d = dfa("start: ST\nST: /[abcd]+/ & ~/(.*)[ab](.*)/");
    assert!(accepts(&d, "cdc") && !accepts(&d, "cad"));
    // `~` binds tighter than `+`
    let d = dfa("start: ST \"!\"\nST: (~/a/ & /[ab]/)+");
    assert!(accepts(&d, "bb!") && !accepts(&d, "ab!"));
    // in a rule, an expression of terminals joined by `&` is one lexeme
    let d = dfa("start: LOWER & ABC\nLOWER: /[a-z]+/\nABC: /[abcABC]+/");
    assert!(accepts(&d, "cab") && !accepts(&d, "C"));
}

#[test]
fn refusals_name_what_they_refuse() {
    assert!(err("start: r\nr[stop=\"\"]: /a+/").contains("`stop=\"\"`"));
    assert!(err("start: r\nr[stop=\"x\", suffix=\"y\"]: /a+/").contains("one `suffix` or `stop`"));
    assert!(err("start: R\nR[stop=\"x\"]: /a+/").contains("not of terminals"));
    assert!(err("start: r\nr[stop_capture=\"m\"]: /a+/").contains("needs a `stop` or `suffix`"));
    assert!(err("start[capture=\"a b\"]: \"a\"").contains("capture name"));
    assert!(err("start[capture, capture]: \"a\"").contains("given twice"));
    assert!(err("start: %lark { start: \"a\" }").contains("nested grammars (`%lark { ... }`)"));
    assert!(err("start[temperature=abc]: \"a\"").contains("takes a number"));
    assert!(err("start[capture=\"x\", temperature=0.7]: \"a\"").is_empty());
    assert!(err("start: r\nr[stop=\"x\", stop_capture=\"a b\"]: /a+/").contains("capture name"));
    assert!(err("start: \"a\"\n%declare X").contains("`%declare` is not supported"));
    assert!(err("start: x{a, b}").contains("templates are not supported"));
    assert!(err("start: %json {\"type\": \"object\"}").is_empty());
    let many: Vec<String> = (0..257)
        .map(|i| format!("%json {{\"type\": \"object\", \"required\": [\"p{i}\"]}}"))
        .collect();
    let e = err(&format!("start: {}", many.join(" | ")));
    assert!(e.contains("more than 256 different"), "{e}");
    assert!(err("start: \"a\"\n%ignore %json {\"type\": \"array\"}")
        .contains("`%ignore` of a `%json` value is not supported"));
}

#[test]
fn json_values_of_any_depth_are_read_beside_the_lexer() {
    // values of any shape under an object; a lexeme of the grammar on either side
    let d = dfa(
        "start: (WORD | call)+\ncall: \"<\" %json {\"type\": \"object\"} \">\"\n\
                 WORD: /[a-z]+/\n%ignore \" \"",
    );
    assert!(accepts(&d, "ab <{}> cd"));
    assert!(accepts(&d, "<{\"a\": [1, {\"b\": [[[]]]}, \"x\"]}><{ }>x"));
    assert!(!accepts(&d, "<{\"a\": }>"));
    assert!(!accepts(&d, "<{\"a\": 1}"));
    // a blank before `>` (a lexeme of the main class), none before a JSON value
    assert!(accepts(&d, "<{\"a\": 1} >"));
    assert!(!prefix(&d, "< {"));
    assert!(prefix(&d, "<{\"a\": [[[[[[[["));
    // recursion through a definition
    let d = dfa(
        "start: \"t\" %json {\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": \
         {\"v\": {\"type\": \"integer\"}, \"k\": {\"type\": \"array\", \"items\": \
         {\"$ref\": \"#/$defs/n\"}}}, \"required\": [\"v\"], \"additionalProperties\": false}}, \
         \"$ref\": \"#/$defs/n\"} (\";\" N)?\nN: /[0-9]+/",
    );
    assert!(accepts(&d, "t{\"v\":1}"));
    assert!(accepts(
        &d,
        "t{\"v\":1,\"k\":[{\"v\":2,\"k\":[{\"v\":3}]}]};12"
    ));
    assert!(!accepts(&d, "t{\"v\":1,\"k\":[{}]}"));
    assert!(!accepts(&d, "t{\"v\":1};"));
    // a top-level number is greedy like any lexeme: "12" is never "1" then "2"
    let d = dfa("start: %json {\"type\": [\"integer\", \"array\"]} N?\nN: /[0-9]/");
    assert!(accepts(&d, "12") && accepts(&d, "[1]2") && accepts(&d, "[]"));
    // a JSON value never starts right after a skipped lexeme (llguidance's reading)
    let d = dfa("start: \"=\" (N | %json {\"type\": \"array\"}) \"!\"\nN: /[0-9]+/\n%ignore \" \"");
    assert!(accepts(&d, "= 1 !") && accepts(&d, "=[1] !"));
    assert!(!prefix(&d, "= ["));
    let d = dfa("start: %json {\"type\": [\"integer\", \"array\"]} N\nN: /[0-9]/");
    assert!(!accepts(&d, "12") && accepts(&d, "[1]2"));
}

#[test]
fn hostile_chains_of_operators_are_bounded() {
    let text = format!("start: \"a\"{}", "?".repeat(100_000));
    let e = err(&text);
    assert!(e.contains("more than 200 repetition operators"), "{e}");
    // `~` twice is nothing: any number of them is one or none
    let d = dfa(&format!("start: T\nT: {}/a/ & /[ab]/", "~".repeat(100_001)));
    assert!(accepts(&d, "b") && !accepts(&d, "a"));
}

#[test]
fn a_stop_rule_reads_as_its_body_then_the_stop() {
    // the body ends at the first stop; the stop text is part of the text
    let d = dfa("start: r \"c\"\nr[stop=\"b\"]: /[a-z]*/");
    assert!(accepts(&d, "aabc") && accepts(&d, "bc"));
    assert!(!accepts(&d, "abbc") && !accepts(&d, "aac") && !accepts(&d, "aab"));
    let d = dfa("start: \"<\" r \">\"\nr[stop=/!!+/]: /[a-z]{1,4}/");
    assert!(accepts(&d, "<a!!>") && accepts(&d, "<abcd!!>"));
    assert!(!accepts(&d, "<!!>") && !accepts(&d, "<a!>") && !accepts(&d, "<a!!!>"));
}

#[test]
fn parametric_rules_expand_per_parameter_value() {
    // permutations of a, b, c
    let d = dfa("start: perm::0x0\nperm::_: \"\" %if is_ones([0:3])\n\
                 | \"a\" perm::set_bit(0) %if bit_clear(0)\n\
                 | \"b\" perm::set_bit(1) %if bit_clear(1)\n\
                 | \"c\" perm::set_bit(2) %if bit_clear(2)");
    for s in ["abc", "acb", "bac", "bca", "cab", "cba"] {
        assert!(accepts(&d, s), "{s}");
    }
    for s in ["", "ab", "aab", "abca", "abcc"] {
        assert!(!accepts(&d, s), "{s}");
    }
    // a saturating counter in bits 0..2: at most 3 `a`s, then `b`s counting down
    let d = dfa("start: n::0\nn::_: \"a\" n::incr([0:2]) %if lt([0:2], 3)\n\
                 | m::_\nm::_: \"b\" m::decr([0:2]) %if ne([0:2], 0) | \"\"");
    assert!(accepts(&d, "aaabbb") && accepts(&d, "ab") && accepts(&d, "aab"));
    assert!(!accepts(&d, "aaaa") && !accepts(&d, "abb") && !accepts(&d, "b"));
    // an instance whose conditions all fail holds no string
    let d = dfa("start: \"x\" | r::1\nr::_: \"y\" %if eq(_, 0)");
    assert!(accepts(&d, "x") && !prefix(&d, "y"));
    // saturation: incr of a full range keeps it
    use super::param::{PExpr, Range};
    let r = Range { lo: 2, hi: 4 };
    assert_eq!(PExpr::Incr(r).eval(0b1100), 0b1100);
    assert_eq!(PExpr::Incr(r).eval(0b0100), 0b1000);
    assert_eq!(PExpr::Decr(r).eval(0b0011), 0b0011);
    assert_eq!(
        PExpr::Incr(Range { lo: 0, hi: 64 }).eval(u64::MAX),
        u64::MAX
    );
}

#[test]
fn parametric_rules_are_bounded_and_checked() {
    // a counter over 64 bits reaches more values than any grammar may hold
    let e = err("start: c::0\nc::_: \"a\" c::incr(_) | \"\"");
    assert!(e.contains("more than 10000 rules"), "{e}");
    // a large body copied once per value
    let alts: Vec<String> = (0..5_000).map(|i| format!("\"w{i}\"")).collect();
    let e = err(&format!(
        "start: c::0\nc::_: ({}) c::incr([0:10]) %if lt([0:10], 1000) | \"\"",
        alts.join(" | ")
    ));
    assert!(e.contains("expression nodes"), "{e}");
    assert!(err("start: foo\nfoo::_: \"a\"").contains("used without a parameter"));
    assert!(err("start: foo::0").contains("names no parametric rule"));
    assert!(err("start: f::_\nf::_: \"a\"").contains("only a number can be passed"));
    assert!(err("start: \"a\" %if true").contains("`%if` stands only"));
    assert!(err("start: f::0\nf::_: \"a\" %if eq([3:3], 0)").contains("0 <= x < y <= 64"));
    assert!(err("start: f::0\nf::_: \"a\" %if odd(_)").contains("unknown condition `odd`"));
    assert!(err("start: f::0\nf::_[lazy]: \"a\"").contains("takes no attributes"));
    assert!(err("start: f::0\nf::0: \"a\"").contains("defined as `f::_: ...`"));
}

#[test]
fn lenient_json_warns_where_it_reads_a_superset() {
    let text = |lenient: bool| {
        format!(
            "start: %json {{\"x-guidance\": {{\"lenient\": {lenient}}}, \"type\": \"array\", \
             \"contains\": {{\"type\": \"integer\"}}, \"uniqueItems\": true}}"
        )
    };
    let c = compiled(&text(true)).unwrap();
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("`uniqueItems` ignored")),
        "{:?}",
        c.warnings
    );
    assert!(compiled(&text(false)).is_err());
}
