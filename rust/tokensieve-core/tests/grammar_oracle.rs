//! Grammars against an independent recognizer: random grammars (a few rules calling one another,
//! left recursion, nullable rules, repetitions, multi-byte literals) are written as GBNF text for
//! `Grammar::from_ebnf` and, from the same structure, as plain BNF for an Earley recognizer over
//! bytes written here. Walking each compiled grammar token by token over a small vocabulary,
//! every mask must equal, token for token, the set of tokens after which the text is still a
//! prefix of some string of the grammar (Earley), and EOS must be allowed exactly when the text
//! is a whole string of it. Random junk texts must end in `Ok` or a typed error, never a panic.
//!
//! `TOKENSIEVE_FUZZ_CASES` (default 300) and `TOKENSIEVE_FUZZ_SEED` run more or other cases;
//! `TOKENSIEVE_FUZZ_RULES` (default 4) sets the rules per grammar; `TOKENSIEVE_FUZZ_LOG=FILE`
//! writes each grammar to FILE before it runs and prints refusals.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use tokensieve_core::{EbnfOptions, Error, Grammar, GrammarOptions, Vocabulary};

const EOS: u32 = 0;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runner(salt: u8, cases: u32) -> TestRunner {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&env_u64("TOKENSIEVE_FUZZ_SEED", 0x6772_616d).to_le_bytes());
    seed[8] = salt;
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

// ---- random grammars ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum G {
    Lit(&'static str),
    /// An ASCII class `[lo-hi]`.
    Class(u8, u8),
    Ref(usize),
    Seq(Vec<G>),
    Alt(Vec<G>),
    Rep(Box<G>, u32, Option<u32>),
}

/// Rules per grammar (`TOKENSIEVE_FUZZ_RULES`, default 4).
fn rules_per_grammar() -> usize {
    env_u64("TOKENSIEVE_FUZZ_RULES", 4).clamp(1, 64) as usize
}

fn node() -> impl Strategy<Value = G> {
    let rules = rules_per_grammar();
    let leaf = prop_oneof![
        4 => proptest::sample::select(vec!["a", "b", "ab", "(", ")", "+", "\u{e9}", "", "ba"])
            .prop_map(G::Lit),
        2 => proptest::sample::select(vec![(b'a', b'c'), (b'0', b'9'), (b'(', b')')])
            .prop_map(|(a, b)| G::Class(a, b)),
        4 => (0..rules).prop_map(G::Ref),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(G::Seq),
            prop::collection::vec(inner.clone(), 2..4).prop_map(G::Alt),
            (inner, 0usize..5).prop_map(|(x, k)| {
                let (min, max) = [
                    (0, Some(1)),
                    (0, None),
                    (1, None),
                    (1, Some(2)),
                    (0, Some(3)),
                ][k];
                G::Rep(Box::new(x), min, max)
            }),
        ]
    })
}

fn text_of(n: &G, out: &mut String) {
    match n {
        G::Lit(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' | '\\' => {
                        out.push('\\');
                        out.push(c)
                    }
                    '\u{e9}' => out.push_str("\\u00e9"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        G::Class(a, b) => out.push_str(&format!("[{}-{}]", *a as char, *b as char)),
        G::Ref(r) => out.push_str(&format!("r-{r}")),
        G::Seq(xs) | G::Alt(xs) => {
            out.push('(');
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    out.push_str(if matches!(n, G::Alt(_)) { " | " } else { " " });
                }
                text_of(x, out);
            }
            out.push(')');
        }
        G::Rep(x, min, max) => {
            text_of(x, out);
            match (min, max) {
                (0, Some(1)) => out.push('?'),
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (m, Some(n)) => out.push_str(&format!("{{{m},{n}}}")),
                (m, None) => out.push_str(&format!("{{{m},}}")),
            }
        }
    }
}

fn grammar_text(rules: &[G]) -> String {
    let mut s = String::from("root ::= r-0\n");
    for (i, r) in rules.iter().enumerate() {
        s.push_str(&format!("r-{i} ::= "));
        text_of(r, &mut s);
        s.push_str("  # rule\n");
    }
    s
}

// ---- the oracle: BNF over bytes and an Earley recognizer ---------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Sym {
    T(u8, u8),
    N(usize),
}

struct Bnf {
    alts: Vec<Vec<Vec<Sym>>>,
}

impl Bnf {
    fn fresh(&mut self) -> usize {
        self.alts.push(Vec::new());
        self.alts.len() - 1
    }

    /// The symbols of `n` (a fresh nonterminal where it needs one).
    fn syms(&mut self, n: &G) -> Vec<Sym> {
        match n {
            G::Lit(s) => s.bytes().map(|b| Sym::T(b, b)).collect(),
            G::Class(a, b) => vec![Sym::T(*a, *b)],
            G::Ref(r) => vec![Sym::N(*r)],
            G::Seq(xs) => xs.iter().flat_map(|x| self.syms(x)).collect(),
            G::Alt(xs) => {
                let k = self.fresh();
                for x in xs {
                    let s = self.syms(x);
                    self.alts[k].push(s);
                }
                vec![Sym::N(k)]
            }
            G::Rep(x, min, max) => {
                let body = self.syms(x);
                let mut out = Vec::new();
                for _ in 0..*min {
                    out.extend(body.iter().copied());
                }
                match max {
                    None => {
                        // star ::= ε | body star
                        let k = self.fresh();
                        self.alts[k].push(Vec::new());
                        let mut again = body.clone();
                        again.push(Sym::N(k));
                        self.alts[k].push(again);
                        out.push(Sym::N(k));
                    }
                    Some(m) => {
                        for _ in *min..*m {
                            let k = self.fresh();
                            self.alts[k].push(Vec::new());
                            self.alts[k].push(body.clone());
                            out.push(Sym::N(k));
                        }
                    }
                }
                out
            }
        }
    }

    fn new(rules: &[G]) -> (Bnf, usize) {
        let mut b = Bnf {
            alts: vec![Vec::new(); rules.len()],
        };
        for (i, r) in rules.iter().enumerate() {
            let s = b.syms(r);
            b.alts[i].push(s);
        }
        let start = b.fresh();
        b.alts[start].push(vec![Sym::N(0)]);
        b.drop_unproductive();
        (b, start)
    }

    /// Removes the alternatives that can derive no string, so that every chart item can be
    /// finished (a non-empty last set then means a viable prefix).
    fn drop_unproductive(&mut self) {
        let n = self.alts.len();
        let mut prod = vec![false; n];
        loop {
            let mut changed = false;
            for k in 0..n {
                if !prod[k]
                    && self.alts[k].iter().any(|a| {
                        a.iter().all(|s| match s {
                            Sym::T(..) => true,
                            Sym::N(j) => prod[*j],
                        })
                    })
                {
                    prod[k] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for k in 0..n {
            self.alts[k].retain(|a| {
                a.iter().all(|s| match s {
                    Sym::T(..) => true,
                    Sym::N(j) => prod[*j],
                })
            });
        }
    }
}

/// (nonterminal, alternative, dot, origin)
type Item = (usize, usize, usize, usize);

#[derive(Clone, Default)]
struct Set {
    items: Vec<Item>,
    seen: HashSet<Item>,
}

impl Set {
    fn add(&mut self, it: Item) {
        if self.seen.insert(it) {
            self.items.push(it);
        }
    }
}

struct Earley<'a> {
    g: &'a Bnf,
    start: usize,
}

impl Earley<'_> {
    fn initial(&self) -> Vec<Set> {
        let mut s = Set::default();
        for a in 0..self.g.alts[self.start].len() {
            s.add((self.start, a, 0, 0));
        }
        let mut chart = vec![s];
        self.close(&mut chart);
        chart
    }

    /// Predicts and completes in the last set of `chart` until nothing changes.
    fn close(&self, chart: &mut [Set]) {
        let i = chart.len() - 1;
        loop {
            let mut added = false;
            let mut k = 0;
            while k < chart[i].items.len() {
                let (nt, a, d, o) = chart[i].items[k];
                k += 1;
                let alt = &self.g.alts[nt][a];
                if d < alt.len() {
                    if let Sym::N(b) = alt[d] {
                        for bi in 0..self.g.alts[b].len() {
                            let before = chart[i].items.len();
                            chart[i].add((b, bi, 0, i));
                            added |= chart[i].items.len() > before;
                        }
                    }
                } else {
                    let parents: Vec<Item> = chart[o].items.clone();
                    for (pn, pa, pd, po) in parents {
                        let palt = &self.g.alts[pn][pa];
                        if pd < palt.len() && palt[pd] == Sym::N(nt) {
                            let before = chart[i].items.len();
                            chart[i].add((pn, pa, pd + 1, po));
                            added |= chart[i].items.len() > before;
                        }
                    }
                }
            }
            if !added {
                return;
            }
        }
    }

    /// The chart after one more byte (`None`: no item can read it).
    fn scan(&self, chart: &[Set], byte: u8) -> Option<Vec<Set>> {
        let last = chart.last()?;
        let mut next = Set::default();
        for &(nt, a, d, o) in &last.items {
            let alt = &self.g.alts[nt][a];
            if let Some(Sym::T(lo, hi)) = alt.get(d) {
                if (*lo..=*hi).contains(&byte) {
                    next.add((nt, a, d + 1, o));
                }
            }
        }
        if next.items.is_empty() {
            return None;
        }
        let mut out = chart.to_vec();
        out.push(next);
        self.close(&mut out);
        Some(out)
    }

    fn complete(&self, chart: &[Set]) -> bool {
        chart.last().is_some_and(|s| {
            s.items
                .iter()
                .any(|&(nt, a, d, o)| nt == self.start && o == 0 && d == self.g.alts[nt][a].len())
        })
    }
}

// ---- the walk ----------------------------------------------------------------------------------

fn vocab() -> Arc<Vocabulary> {
    let mut tokens: Vec<Vec<u8>> = vec![b"</s>".to_vec()];
    for t in [
        "a", "b", "c", "ab", "ba", "abc", "(", ")", "((", "))", "()", "+", "a+", "+b", "0", "1",
        "9", "12", "a(", ")b", "\u{e9}", "a\u{e9}", "x", " ",
    ] {
        tokens.push(t.as_bytes().to_vec());
    }
    tokens.push(vec![0xC3]); // the two halves of é
    tokens.push(vec![0xA9]);
    Arc::new(Vocabulary::new(tokens, vec![EOS], vec![], None).expect("vocabulary"))
}

fn options() -> GrammarOptions {
    let mut o = GrammarOptions::default();
    o.set("max_states", "50000").unwrap();
    o.set("max_compile_seconds", "5").unwrap();
    o
}

#[test]
fn random_grammars_match_an_earley_recognizer() {
    let v = vocab();
    let opts = options();
    let cases = env_u64("TOKENSIEVE_FUZZ_CASES", 300) as u32;
    let (compiled, steps, refused) = (Cell::new(0usize), Cell::new(0usize), Cell::new(0usize));
    runner(1, cases)
        .run(
            &(
                prop::collection::vec(node(), rules_per_grammar()),
                prop::collection::vec(any::<u16>(), 14),
            ),
            |(rules, picks)| {
                let text = grammar_text(&rules);
                if let Ok(path) = std::env::var("TOKENSIEVE_FUZZ_LOG") {
                    std::fs::write(path, &text).ok();
                }
                let (bnf, start) = Bnf::new(&rules);
                let oracle = Earley { g: &bnf, start };
                let g = match Grammar::from_ebnf(&text, v.clone(), &EbnfOptions::default(), &opts) {
                    Ok(g) => Arc::new(g),
                    // an empty language, or a form of left recursion the rewriting refuses
                    // by name: both typed errors
                    Err(Error::Grammar { message, .. }) => {
                        refused.set(refused.get() + 1);
                        if std::env::var("TOKENSIEVE_FUZZ_LOG").is_ok() {
                            eprintln!("refused: {message}\n{text}");
                        }
                        prop_assert!(
                            message.contains("matches no string")
                                || message.contains("not supported")
                                || message.contains("could not be rewritten"),
                            "{}: {}",
                            text,
                            message
                        );
                        prop_assert!(
                            message.contains("not supported")
                                || message.contains("could not be rewritten")
                                || oracle.g.alts[start].is_empty(),
                            "{} refused ({}) but the language is not empty",
                            text,
                            message
                        );
                        return Ok(());
                    }
                    Err(Error::Budget(_)) => return Ok(()),
                    Err(e) => return Err(TestCaseError::fail(format!("{text}: {e}"))),
                };
                compiled.set(compiled.get() + 1);
                let mut m = g.matcher();
                let mut chart = oracle.initial();
                let mut row = vec![0u32; v.mask_words()];
                let mut so_far: Vec<u8> = Vec::new();
                for &pick in &picks {
                    if m.fill_next_token_bitmask(&mut row).is_err() {
                        return Ok(()); // a budget at run time (never a wrong mask)
                    }
                    steps.set(steps.get() + 1);
                    let mut allowed = Vec::new();
                    for t in 0..v.vocab_size() as u32 {
                        let bit = row[(t / 32) as usize] >> (t % 32) & 1 == 1;
                        let expect = if t == EOS {
                            oracle.complete(&chart)
                        } else {
                            let mut c = Some(chart.clone());
                            for &b in v.token_bytes(t).unwrap_or_default() {
                                c = c.and_then(|c| oracle.scan(&c, b));
                            }
                            c.is_some()
                        };
                        prop_assert_eq!(
                            bit,
                            expect,
                            "grammar\n{}\nafter {:?}: token {:?} (mask {}, Earley {})",
                            text,
                            String::from_utf8_lossy(&so_far),
                            String::from_utf8_lossy(v.token_bytes(t).unwrap_or_default()),
                            bit,
                            expect
                        );
                        if bit {
                            allowed.push(t);
                        }
                    }
                    prop_assert!(
                        !allowed.is_empty(),
                        "{}: empty mask after {:?}",
                        text,
                        so_far
                    );
                    let go_on: Vec<u32> = allowed.iter().copied().filter(|&t| t != EOS).collect();
                    let t = if go_on.is_empty() || pick % 6 == 0 && allowed.contains(&EOS) {
                        EOS
                    } else {
                        go_on[pick as usize % go_on.len()]
                    };
                    prop_assert!(m.accept_token(t).unwrap_or(false));
                    if t == EOS {
                        break;
                    }
                    for &b in v.token_bytes(t).unwrap_or_default() {
                        chart = oracle.scan(&chart, b).expect("allowed by the oracle");
                    }
                    so_far.extend_from_slice(v.token_bytes(t).unwrap_or_default());
                }
                Ok(())
            },
        )
        .unwrap();
    let (compiled, steps, refused) = (compiled.get(), steps.get(), refused.get());
    eprintln!(
        "grammars: {cases} cases, {compiled} compiled, {refused} refused by name, {steps} masks \
         checked against Earley"
    );
    assert!(
        compiled as u32 * 2 >= cases,
        "only {compiled} grammars compiled"
    );
}

/// Junk and mutated grammar texts: `Ok` or a typed error, never a panic or a hang.
#[test]
fn junk_grammar_texts_end_in_ok_or_a_typed_error() {
    let v = vocab();
    let opts = options();
    let pieces = prop::collection::vec(
        proptest::sample::select(vec![
            "root",
            " ::= ",
            "::=",
            "\"a\"",
            "\"",
            "[",
            "]",
            "[^a-z]",
            "(",
            ")",
            "|",
            "*",
            "+",
            "?",
            "{2,3}",
            "{",
            "}",
            "{,",
            "x",
            "\n",
            "#",
            "\\",
            "\\x4",
            "\\u00e9",
            "\\q",
            ".",
            "(=",
            "'a'",
            "/re/",
            "r-1",
            " ",
            "\u{e9}",
            "{999999999999}",
            "root ::= root",
        ]),
        0..24,
    )
    .prop_map(|v| v.concat());
    let typed = Cell::new(0usize);
    runner(2, env_u64("TOKENSIEVE_FUZZ_CASES", 300) as u32 * 4)
        .run(&pieces, |text| {
            match Grammar::from_ebnf(&text, v.clone(), &EbnfOptions::default(), &opts) {
                Ok(_) => {}
                Err(Error::Grammar { line, column, .. }) => {
                    typed.set(typed.get() + 1);
                    prop_assert!(line >= 1 && column >= 1);
                }
                Err(Error::Budget(_) | Error::Unspellable { .. }) => {}
                Err(e) => return Err(TestCaseError::fail(format!("{text:?}: {e}"))),
            }
            Ok(())
        })
        .unwrap();
    assert!(typed.get() > 0);
}
