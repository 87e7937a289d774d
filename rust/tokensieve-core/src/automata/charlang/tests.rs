use std::sync::OnceLock;

use proptest::prelude::*;

use super::*;
use crate::automata::spell::encode;
use crate::json_schema::compile::not_in;
use crate::json_schema::string::{search_form, translate_ecma};
use crate::json_schema::test_util::Re;

const ALPHA: [char; 5] = ['a', 'b', 'c', 'é', '😀'];

/// Small regexes over (mostly) the test alphabet.
const PATS: [&str; 22] = [
    "a*",
    "(ab|c)+",
    "[a-c]{1,2}",
    "é?😀*",
    "(a|é)*b",
    "[^a]*",
    "",
    "😀{2}",
    "a{0,3}",
    "(?:ab)*c?",
    "[b-é]+",
    ".",
    "(?i)A+B?",
    "[^😀]{2,}",
    r"\w{1,3}",
    "(a|b)*a(a|b)",
    ".*é.*",
    "[a😀]*c[a😀]*",
    "(é|😀)(é|😀)*",
    "b{2,}|c{0,1}",
    "(a|bc|😀é)*",
    "[^abc]",
];

fn parse(p: &str) -> Hir {
    crate::regex::parse(p, 250).unwrap()
}

fn pat(p: &str) -> Lang {
    Lang::from_hir(&parse(p)).unwrap()
}

/// Every string of `min..=max` characters (`max: None`: no upper bound).
fn len_between(min: u64, max: Option<u64>) -> Lang {
    match max {
        Some(m) if m < min => Lang::nothing(),
        Some(m) => pat(&format!("(?s:.){{{min},{m}}}")),
        None => pat(&format!("(?s:.){{{min},}}")),
    }
}

fn pat_res() -> &'static Vec<Re> {
    static RES: OnceLock<Vec<Re>> = OnceLock::new();
    RES.get_or_init(|| PATS.iter().map(|p| Re::new(&parse(p))).collect())
}

fn strings(max_len: usize) -> Vec<String> {
    let mut all = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..max_len {
        let mut next = Vec::new();
        for s in &layer {
            for c in ALPHA {
                let mut t = s.clone();
                t.push(c);
                next.push(t);
            }
        }
        all.extend(next.iter().cloned());
        layer = next;
    }
    all
}

fn test_strings() -> &'static Vec<String> {
    static S: OnceLock<Vec<String>> = OnceLock::new();
    S.get_or_init(|| strings(4))
}

/// Output HIRs are over characters: no look-around, no non-ASCII byte classes.
fn assert_char_hir(h: &Hir) {
    match h.kind() {
        HirKind::Look(_) => panic!("look-around in output"),
        HirKind::Class(Class::Bytes(b)) => {
            assert!(b.ranges().iter().all(|r| r.end() <= 0x7F), "byte class")
        }
        HirKind::Repetition(r) => assert_char_hir(&r.sub),
        HirKind::Capture(c) => assert_char_hir(&c.sub),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => xs.iter().for_each(assert_char_hir),
        _ => {}
    }
}

/// Whether the built automaton `d` (deterministic, `None`: empty) accepts `s`, by walking it.
fn walk(d: &Option<CharDfa>, s: &str) -> bool {
    let Some(d) = d else { return false };
    let mut at = d.start;
    for c in s.chars() {
        let c = c as u32;
        match d.edges[at].iter().find(|&&(lo, hi, _)| lo <= c && c <= hi) {
            Some(&(_, _, t)) => at = t,
            None => return false,
        }
    }
    d.accept[at]
}

fn to_hir(l: &Lang) -> Hir {
    let h = l.to_hir(&LangBudget::default()).unwrap();
    assert_char_hir(&h);
    encode(&h).expect("encode accepts the output");
    h
}

fn empty(l: &Lang) -> bool {
    l.is_empty(&LangBudget::default()).unwrap()
}

/// Exact equivalence, decided on automata.
fn equivalent(a: &Lang, b: &Lang) -> bool {
    empty(&a.and(&b.not()).or(&b.and(&a.not())))
}

/// `matches`, the output HIR and `reference` agree on `strs`; the output HIR is equivalent.
fn check(l: &Lang, reference: impl Fn(&str) -> bool, strs: &[String]) {
    let h = to_hir(l);
    let re = Re::new(&h);
    for s in strs {
        let want = reference(s);
        assert_eq!(l.matches(s), want, "matches({s:?}) for {l:?}");
        assert_eq!(re.is_match(s), want, "to_hir {h:?} on {s:?} for {l:?}");
    }
    let back = Lang::from_hir(&h).unwrap();
    assert!(
        equivalent(l, &back),
        "to_hir output {h:?} is not equivalent"
    );
}

#[derive(Debug, Clone)]
enum E {
    Pat(usize),
    Lit(String),
    Len(u64, Option<u64>),
    Any,
    Nothing,
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Not(Box<E>),
}

impl E {
    fn lang(&self) -> Lang {
        match self {
            E::Pat(i) => pat(PATS[*i]),
            E::Lit(s) => Lang::literal(s),
            E::Len(a, b) => len_between(*a, *b),
            E::Any => Lang::any(),
            E::Nothing => Lang::nothing(),
            E::And(a, b) => a.lang().and(&b.lang()),
            E::Or(a, b) => a.lang().or(&b.lang()),
            E::Not(a) => a.lang().not(),
        }
    }

    /// Brute-force membership: leaves by the crate's byte-level regex engine.
    fn member(&self, s: &str) -> bool {
        match self {
            E::Pat(i) => pat_res()[*i].is_match(s),
            E::Lit(t) => s == t,
            E::Len(a, b) => {
                let n = s.chars().count() as u64;
                n >= *a && b.is_none_or(|b| n <= b)
            }
            E::Any => true,
            E::Nothing => false,
            E::And(a, b) => a.member(s) && b.member(s),
            E::Or(a, b) => a.member(s) || b.member(s),
            E::Not(a) => !a.member(s),
        }
    }
}

fn expr() -> impl Strategy<Value = E> {
    let leaf = prop_oneof![
        6 => (0..PATS.len()).prop_map(E::Pat),
        2 => "[abcé😀]{0,3}".prop_map(E::Lit),
        2 => (0u64..4, prop::option::of(0u64..5)).prop_map(|(a, b)| E::Len(a, b)),
        1 => Just(E::Any),
        1 => Just(E::Nothing),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| E::Not(Box::new(a))),
        ]
    })
}

/// An explicit automaton of `n` states: `raw` lists (state, range, target), states and targets
/// taken modulo `n`, ranges indexing ranges over and around the test alphabet (some overlapping
/// the surrogates);
/// an edge overlapping an earlier one of its state is dropped unless `overlap` (then a
/// character may lead to several states: a nondeterministic choice).
fn explicit_dfa(n: usize, raw: &[(usize, usize, usize)], acc: &[bool], overlap: bool) -> CharDfa {
    const RANGES: [(u32, u32); 8] = [
        ('a' as u32, 'a' as u32),
        ('b' as u32, 'c' as u32),
        ('c' as u32, 'é' as u32),
        ('é' as u32, 'é' as u32),
        (0x1F600, 0x1F600),
        (0, 0x10FFFF),
        (0xD000, 0xE100),
        ('a' as u32, 'b' as u32),
    ];
    let mut d = CharDfa {
        start: 0,
        accept: acc[..n].to_vec(),
        edges: vec![Vec::new(); n],
    };
    for &(s, r, t) in raw {
        let (s, t) = (s % n, t % n);
        let (lo, hi) = RANGES[r];
        if overlap || d.edges[s].iter().all(|&(a, b, _)| hi < a || b < lo) {
            d.edges[s].push((lo, hi, t));
        }
    }
    d
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_expressions_agree_with_brute_force(e in expr()) {
        let l = e.lang();
        check(&l, |s| e.member(s), test_strings());
        let is_empty = empty(&l);
        let some = test_strings().iter().any(|s| e.member(s));
        prop_assert!(!(is_empty && some), "is_empty but {:?} has members", e);
    }

    #[test]
    fn random_dfas_agree_with_walking(
        n in 1usize..6,
        raw in prop::collection::vec((0usize..6, 0usize..8, 0usize..6), 0..20),
        acc in prop::collection::vec(any::<bool>(), 6),
    ) {
        // keep it deterministic: disjoint ranges per state
        let d = explicit_dfa(n, &raw, &acc, false);
        let l = Lang::from_dfa(&d).unwrap();
        let h = Lang::from_dfa(&d).unwrap().to_hir(&LangBudget::default()).unwrap();
        assert_char_hir(&h);
        let re = Re::new(&h);
        for s in test_strings() {
            prop_assert_eq!(re.is_match(s), l.matches(s), "{:?} on {:?}", d, s);
        }
        prop_assert!(equivalent(&l, &Lang::from_hir(&h).unwrap()));
    }

    /// Explicit automata read straight off their edges (deterministic ones) and by subset
    /// construction (overlapping edges to different states: a nondeterministic choice) agree
    /// with walking them, alone and combined with patterns.
    #[test]
    fn random_explicit_automata_combined(
        n in 1usize..6,
        raw in prop::collection::vec((0usize..6, 0usize..8, 0usize..6), 0..20),
        acc in prop::collection::vec(any::<bool>(), 6),
        other in 0..PATS.len(),
        overlap in any::<bool>(),
    ) {
        let d = explicit_dfa(n, &raw, &acc, overlap);
        let l = Lang::from_dfa(&d).unwrap();
        let o = pat(PATS[other]);
        let b = LangBudget::default();
        let both = l.and(&o).to_char_dfa(&b).unwrap();
        let either = l.or(&o.not()).to_char_dfa(&b).unwrap();
        let ro = &pat_res()[other];
        for s in test_strings() {
            let (x, y) = (l.matches(s), ro.is_match(s));
            prop_assert_eq!(walk(&both, s), x && y, "{:?} and {} on {:?}", d, PATS[other], s);
            prop_assert_eq!(walk(&either, s), x || !y, "{:?} or not {} on {:?}", d, PATS[other], s);
        }
    }
}

#[test]
fn complement_of_names_is_not_in() {
    let names = ["ab", "a", "é😀", "", "abc"];
    let set = names
        .iter()
        .fold(Lang::nothing(), |acc, n| acc.or(&Lang::literal(n)));
    let not = set.not();
    let reference = Re::new(&not_in(
        &names
            .iter()
            .map(|n| n.chars().collect())
            .collect::<Vec<_>>(),
    ));
    check(&not, |s| !names.contains(&s), test_strings());
    for s in test_strings() {
        assert_eq!(not.matches(s), reference.is_match(s), "{s:?}");
    }
    // characters far away from the alphabet, next to the surrogate block, at the end
    for s in ["\u{D7FF}", "\u{E000}", "\u{10FFFF}", "a\u{10FFFF}", "\0"] {
        assert!(not.matches(s));
        assert!(Re::new(&to_hir(&not)).is_match(s), "{s:?}");
        assert!(reference.is_match(s));
    }
    // without the empty name
    let not2 = Lang::literal("x").or(&Lang::literal("yz")).not();
    assert!(not2.matches(""));
    assert!(equivalent(
        &not2,
        &Lang::from_hir(&not_in(&[vec!['x'], vec!['y', 'z']])).unwrap()
    ));
}

fn ecma(p: &str) -> Lang {
    let h = crate::regex::parse(&translate_ecma(p).unwrap(), 250).unwrap();
    Lang::from_hir(&search_form(&h)).unwrap()
}

#[test]
fn pattern_and_length() {
    let l = ecma("^[a-c]+é?$").and(&len_between(2, Some(3)));
    check(
        &l,
        |s| {
            let n = s.chars().count();
            (2..=3).contains(&n)
                && s.trim_end_matches('é').chars().all(|c| "abc".contains(c))
                && s.matches('é').count() <= 1
                && !s.starts_with('é')
        },
        test_strings(),
    );
    // unanchored search semantics
    let l = ecma("ab").and(&len_between(0, Some(3)));
    check(
        &l,
        |s| s.contains("ab") && s.chars().count() <= 3,
        test_strings(),
    );
    // a long bound stays compact: [a-z]{1,300} with a counted repetition
    let l = ecma("^[a-z]*$").and(&len_between(1, Some(300)));
    let h = to_hir(&l);
    assert!(hir::weight(&h) < 1000, "{h:?}");
    let re = Re::new(&h);
    assert!(re.is_match(&"q".repeat(300)));
    assert!(!re.is_match(&"q".repeat(301)));
    assert!(!re.is_match(""));
    // minimum only
    let l = ecma("^a*$").and(&len_between(3, None));
    check(
        &l,
        |s| s.len() >= 3 && s.chars().all(|c| c == 'a'),
        test_strings(),
    );
}

#[test]
fn emptiness() {
    assert!(empty(&pat("a+").and(&pat("b+"))));
    assert!(!empty(&pat("a+").and(&pat("[ab]+"))));
    assert!(empty(&Lang::any().not()));
    assert!(!empty(&Lang::any()));
    assert!(empty(&Lang::nothing()));
    assert!(empty(&len_between(3, Some(2))));
    assert!(empty(&pat("[^a]").and(&pat("a"))));
    assert!(!empty(&pat("").not().not()));
    assert!(empty(&pat("a{3}").and(&len_between(0, Some(2)))));
    assert!(empty(&pat(r"\p{Greek}+").and(&pat(r"[a-z]+"))));
    assert!(!empty(&pat(r"\p{L}+").and(&pat(r"\P{Latin}+"))));
    // an empty language becomes a HIR matching nothing
    let h = to_hir(&pat("a+").and(&pat("b+")));
    let re = Re::new(&h);
    assert!(test_strings().iter().all(|s| !re.is_match(s)));
}

#[test]
fn complement_of_nothing_is_any() {
    // built through the automaton: not(a+ ∩ b+)
    let l = pat("a+").and(&pat("b+")).not();
    check(&l, |_| true, test_strings());
    assert!(equivalent(&l, &Lang::any()));
    let h = to_hir(&l);
    let re = Re::new(&h);
    for s in ["\u{10FFFF}", "\0\n", "日本語"] {
        assert!(re.is_match(s));
    }
    assert!(equivalent(&Lang::nothing().not(), &Lang::any()));
    assert!(equivalent(&pat("(?s:.)*"), &Lang::any()));
    assert!(!equivalent(&pat(".*"), &Lang::any()), "'.' excludes \\n");
}

#[test]
fn double_negation() {
    for p in PATS {
        let x = pat(p);
        // ¬(¬x ∪ (a+ ∩ b+)) = x, through the automata (no syntactic shortcut)
        let y = x.not().or(&pat("a+").and(&pat("b+"))).not();
        let r = &pat_res()[PATS.iter().position(|q| *q == p).unwrap()];
        check(&y, |s| r.is_match(s), test_strings());
        assert!(equivalent(&x, &y), "{p}");
    }
}

#[test]
fn budget_errors() {
    let b = LangBudget::default();
    let e = pat("(?s:.){0,5000}").to_hir(&b).unwrap_err();
    assert!(e.contains("4096 automaton states"), "{e}");
    let e = pat("(a|b)*a(a|b){20}").is_empty(&b).unwrap_err();
    assert!(e.contains("automaton states"), "{e}");
    let small = LangBudget {
        max_states: 1000,
        ..LangBudget::default()
    };
    let e = pat(".{0,2000}").to_hir(&small).unwrap_err();
    assert!(e.contains("1000 automaton states"), "{e}");
    let e = pat("((a{100}){100}){100}").to_hir(&b).unwrap_err();
    assert!(e.contains("NFA states"), "{e}");
    let e = len_between(0, Some(10_000)).to_hir(&b).unwrap_err();
    assert!(e.contains("automaton states"), "{e}");
    // products are bounded too
    let a = pat("(?s:.){0,3000}b");
    let c = pat("a(?s:.){0,3000}");
    let e = a.and(&c).not().to_hir(&b).unwrap_err();
    assert!(e.contains("automaton states"), "{e}");
    // the output size
    let tiny = LangBudget {
        max_weight: 20,
        ..LangBudget::default()
    };
    let e = pat("(abc|def|ghi){5}")
        .and(&pat("[a-i]*"))
        .to_hir(&tiny)
        .unwrap_err();
    assert!(e.contains("size budget"), "{e}");
    // a state-elimination blow-up is caught by the weight budget, not by memory
    let e = pat("(a|b)*a(a|b){9}").not().to_hir(&b).unwrap_err();
    assert!(
        e.contains("size budget") || e.contains("nest deeper"),
        "{e}"
    );
    // within budget: .{0,2000} comes back as one counted repetition
    let h = pat("(?s:.){0,2000}").to_hir(&b).unwrap();
    assert!(hir::weight(&h) < 10_000, "{h:?}");
    let re = Re::new(&h);
    assert!(re.is_match(&"é".repeat(2000)));
    assert!(!re.is_match(&"é".repeat(2001)));
}

#[test]
fn explicit_dfa_divisible_by_seven() {
    // state 7 = no digit read yet; state r = value mod 7
    let mut d = CharDfa {
        start: 7,
        accept: vec![false; 8],
        edges: vec![Vec::new(); 8],
    };
    d.accept[0] = true;
    for r in 0..8usize {
        let base = if r == 7 { 0 } else { r };
        for dig in 0..10u32 {
            let t = (base * 10 + dig as usize) % 7;
            let ch = '0' as u32 + dig;
            d.edges[r].push((ch, ch, t));
        }
    }
    let h = Lang::from_dfa(&d)
        .unwrap()
        .to_hir(&LangBudget::default())
        .unwrap();
    assert_char_hir(&h);
    let re = Re::new(&h);
    for n in 0..3000u32 {
        assert_eq!(re.is_match(&n.to_string()), n % 7 == 0, "{n}");
        assert_eq!(re.is_match(&format!("0{n}")), n % 7 == 0, "0{n}");
    }
    assert!(!re.is_match(""));
    assert!(!re.is_match("7a"));
    // and combined with a pattern: no leading zeros
    let l = Lang::from_dfa(&d).unwrap().and(&pat("0|[1-9][0-9]*"));
    let re = Re::new(&to_hir(&l));
    assert!(re.is_match("0") && re.is_match("14") && !re.is_match("014") && !re.is_match("15"));
    // malformed DFAs are refused
    let bad = CharDfa {
        start: 0,
        accept: vec![true],
        edges: vec![vec![(0, 10, 3)]],
    };
    assert!(Lang::from_dfa(&bad)
        .and_then(|l| l.to_hir(&LangBudget::default()))
        .is_err());
}

#[test]
fn unicode_classes_and_matches() {
    let l = pat(r"\p{L}+").and(&pat(".*[a-z].*").not());
    let h = to_hir(&l);
    let re = Re::new(&h);
    for (s, want) in [
        ("É", true),
        ("日本", true),
        ("aé", false),
        ("", false),
        ("1", false),
    ] {
        assert_eq!(l.matches(s), want, "{s}");
        assert_eq!(re.is_match(s), want, "{s}");
    }
    assert!(Lang::any().matches("😀\u{10FFFF}"));
    assert!(Lang::literal("é😀").matches("é😀"));
    assert!(!Lang::literal("é😀").matches("é"));
    assert!(len_between(2, Some(2)).matches("😀😀"));
    assert!(!len_between(2, Some(2)).matches("😀"));
    // case-insensitive and ASCII byte classes
    let l = pat("(?i)k").and(&pat("(?-u:[a-z])").not());
    let re = Re::new(&to_hir(&l));
    assert!(re.is_match("K") && re.is_match("\u{212A}") && !re.is_match("k"));
    assert!(Lang::from_hir(&parse("^a")).is_err());
    let word = Hir::look(regex_syntax::hir::Look::WordAscii);
    assert!(Lang::from_hir(&hir::concat(vec![hir::lit("a"), word])).is_err());
}

/// Prints sample outputs (`--ignored --nocapture`), to eyeball their shape.
#[test]
#[ignore]
fn show_outputs() {
    for p in PATS {
        let x = pat(p);
        println!("{p:?}  not: {}", hir_text(&to_hir(&x.not())));
        println!(
            "{p:?}  and [abc]{{0,3}}: {}",
            hir_text(&to_hir(&x.and(&pat("[abc]{0,3}"))))
        );
    }
}

/// Prints timings of large cases (`--ignored --nocapture`).
#[test]
#[ignore]
fn stress_timing() {
    let b = LangBudget::default();
    let t = std::time::Instant::now();
    let mut names = Vec::new();
    let mut x: u64 = 12345;
    for _ in 0..2000 {
        let mut w = String::new();
        for _ in 0..(3 + x % 8) {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            w.push((b'a' + ((x >> 33) % 26) as u8) as char);
        }
        names.push(w);
    }
    let set = names
        .iter()
        .fold(Lang::nothing(), |a, n| a.or(&Lang::literal(n)));
    let r = set.not().to_hir(&b);
    println!(
        "not(2000 names): {:?} weight {:?} {:?}",
        r.is_ok(),
        r.as_ref().map(hir::weight),
        t.elapsed()
    );
    let t = std::time::Instant::now();
    let r = pat(r"\w{1,40}")
        .and(&pat(".*[0-9].*").not())
        .and(&pat(r"\p{L}.*"))
        .to_hir(&b);
    println!(
        "unicode: {:?} {:?}",
        r.as_ref().map(hir::weight),
        t.elapsed()
    );
    let t = std::time::Instant::now();
    let r = pat("(a|b)*a(a|b){9}").not().to_hir(&b);
    println!("dense: {:?} {:?}", r.as_ref().map(hir::weight), t.elapsed());
    let t = std::time::Instant::now();
    let r = pat("(a|b)*a(a|b){11}").is_empty(&b);
    println!("dense 4096 emptiness: {:?} {:?}", r, t.elapsed());
    let t = std::time::Instant::now();
    let r = pat("[a-z0-9]{0,4000}").and(&pat(".*[0-9]{3}.*")).to_hir(&b);
    println!(
        "long: {:?} {:?}",
        r.as_ref().map(hir::weight).map_err(|e| e.len()),
        t.elapsed()
    );
    let t = std::time::Instant::now();
    let r = pat(r"[\p{L}\p{N}]{0,1000}")
        .and(&pat(r"(?i)[a-zé]+.*"))
        .and(&pat(r".*[\p{Greek}\p{Han}].*").not())
        .to_hir(&b);
    println!(
        "classes: {:?} {:?}",
        r.as_ref().map(hir::weight).map_err(|e| e.clone()),
        t.elapsed()
    );
}

fn hir_text(h: &Hir) -> String {
    h.to_string()
}

#[test]
fn counted_sequences_fold() {
    for (p, max_weight) in [
        // each comes back as the same counted repetition
        ("(?:ab){0,1000}", 2001),
        ("(?:ab|c){0,300}", 1201),
        ("x(?:abé){2,700}y", 2804),
        ("[a-c]{3,900}", 1801),
    ] {
        let l = pat(p).and(&pat("(?s:.)*"));
        let h = to_hir(&l);
        assert!(hir::weight(&h) <= max_weight, "{p}: {h}");
        assert!(equivalent(&l, &Lang::from_hir(&h).unwrap()), "{p}: {h}");
    }
    let h = to_hir(&pat("(?:ab){0,1000}").and(&Lang::any()).and(&pat("[ab]*")));
    let re = Re::new(&h);
    assert!(re.is_match(&"ab".repeat(1000)) && !re.is_match(&"ab".repeat(1001)));
}

#[test]
fn automata_are_minimal() {
    let b = LangBudget::default();
    let states = |l: &Lang| Ctx::build(l, &b).unwrap().dfa.n();
    // the last four characters matter: 16 live states plus the dead one (non-[ab])
    assert_eq!(states(&pat("(a|b)*a(a|b){3}")), 17);
    assert_eq!(states(&pat("(a|b)*a(a|b){3}").not()), 17);
    assert_eq!(states(&pat("(a*b*)*")), 2);
    assert_eq!(states(&pat("(a|b)*").and(&pat("(a*b*)*"))), 2);
    assert_eq!(states(&len_between(2, Some(5))), 7);
    assert_eq!(states(&pat("a+").and(&pat("b+"))), 1);
}

#[test]
fn outputs_are_compact() {
    // parallel edges merge into one class; self-loops are stars
    let h = to_hir(&pat("[a-c]*").and(&pat("[b-d]*")));
    assert_eq!(h, parse("[bc]*"), "{h:?}");
    let h = to_hir(&pat("a+").or(&pat("a*")));
    assert_eq!(h, parse("a*"), "{h:?}");
    let h = to_hir(&pat("abc|abd"));
    assert!(hir::weight(&h) <= 6, "{h:?}");
}
