//! Unit tests of grammars, matchers, token budgets and reasoning spans.

use super::*;

fn setup(pattern: &str) -> Arc<Grammar> {
    let toks: Vec<Vec<u8>> = ["a", "b", "ab", "ba", "c", "</s>"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let v = Arc::new(Vocabulary::new(toks, vec![5], vec![], Some(40)).unwrap());
    Arc::new(Grammar::from_regex(pattern, v, &GrammarOptions::default()).unwrap())
}

fn bits(row: &[u32]) -> Vec<u32> {
    (0..row.len() as u32 * 32)
        .filter(|&t| row[(t >> 5) as usize] >> (t & 31) & 1 == 1)
        .collect()
}

#[test]
fn accept_rollback_finish() {
    let g = setup("(ab)+");
    let mut m = g.matcher();
    let mut row = vec![0u32; 2];
    m.fill_next_token_bitmask(&mut row).unwrap();
    assert_eq!(bits(&row), vec![0, 2]);
    assert!(!m.accept_token(1).unwrap());
    assert!(!m.accept_token(5).unwrap());
    assert!(!m.accept_token(39).unwrap()); // padding id
    assert!(!m.accept_token(400).unwrap()); // out of range
    assert!(m.accept_token(2).unwrap());
    assert!(m.is_accepting());
    m.fill_next_token_bitmask(&mut row).unwrap();
    assert_eq!(bits(&row), vec![0, 2, 5]);
    assert!(m.accept_token(5).unwrap());
    assert!(m.is_finished());
    m.fill_next_token_bitmask(&mut row).unwrap();
    assert_eq!(bits(&row), vec![5]);
    assert!(m.accept_token(5).unwrap());
    assert!(m.is_finished());
    assert!(!m.accept_token(0).unwrap());
    m.rollback(2).unwrap();
    assert!(!m.is_finished());
    assert_eq!(m.accept_tokens(&[0, 1, 0, 4]).unwrap(), 3);
    assert!(m.rollback(10).is_err());
    m.reset();
    assert_eq!(m.history_len(), 0);
}

#[test]
fn max_rollback_bounds_history() {
    let g = setup("[ab]*");
    let mut m = Matcher::new(g, Some(2));
    assert_eq!(m.accept_tokens(&[0, 1, 0, 1]).unwrap(), 4);
    assert_eq!(m.history_len(), 2);
    assert!(m.rollback(3).is_err());
    m.rollback(2).unwrap();
}

#[test]
fn batch_fill_equals_row_fill() {
    let g1 = setup("(ab)+");
    let g2 = setup("c|ba");
    let mut m1 = g1.matcher();
    m1.accept_token(0).unwrap();
    let m2 = g2.matcher();
    let reqs = vec![MaskRequest::from(&m1), MaskRequest::from(&m2)];
    let mut bm = vec![0xFFFF_FFFFu32; 6];
    fill_next_token_bitmask_batch(&reqs, &[2, 0], &mut bm, 2).unwrap();
    let mut r = vec![0u32; 2];
    m1.fill_next_token_bitmask(&mut r).unwrap();
    assert_eq!(&bm[4..6], &r[..]);
    m2.fill_next_token_bitmask(&mut r).unwrap();
    assert_eq!(&bm[0..2], &r[..]);
    assert_eq!(&bm[2..4], &[0xFFFF_FFFF, 0xFFFF_FFFF]);
    assert!(fill_next_token_bitmask_batch(&reqs, &[1, 1], &mut bm, 2).is_err());
    assert!(fill_next_token_bitmask_batch(&reqs, &[0, 3], &mut bm, 2).is_err());
}

/// Whether some token sequence of at most `steps` tokens leads from `state` to acceptance
/// (brute force over the vocabulary).
fn can_finish(g: &Grammar, state: u32, steps: u32) -> bool {
    if g.dfa.is_accepting(state) {
        return true;
    }
    if steps == 0 {
        return false;
    }
    (0..g.vocab.vocab_size() as u32).any(|t| {
        !g.vocab.is_eos(t)
            && matches!(g.advance(state, t), Ok(Some(s)) if can_finish(g, s, steps - 1))
    })
}

#[test]
fn budget_keeps_exactly_the_tokens_that_fit() {
    // brute force: kept = the tokens after which some token sequence finishes in time
    let toks: Vec<Vec<u8>> = ["a", "b", "c", "{", "}", ",", "ab", "abc", "{a", "}}", "<e>"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let v = Arc::new(Vocabulary::new(toks, vec![10], vec![], None).unwrap());
    for pattern in [
        "a{2,9}",
        "(ab|c)*b",
        r"\{(a,)*a\}",
        r"(\{a*\})+",
        "abc(a|b)*c",
    ] {
        let g =
            Arc::new(Grammar::from_regex(pattern, v.clone(), &GrammarOptions::default()).unwrap());
        let words = v.mask_words();
        // walk a few prefixes; at each, every budget from 1 to 8
        let mut m = g.matcher();
        for step in 0..6 {
            for left in 1..=8u32 {
                let mut full = vec![0u32; words];
                let mut kept = vec![0u32; words];
                g.fill_mask(m.state, false, &mut full).unwrap();
                g.fill_mask_within(m.state, false, Some(left), &mut kept)
                    .unwrap();
                let fits: Vec<u32> = bits(&full)
                    .into_iter()
                    .filter(|&t| {
                        v.is_eos(t)
                            || can_finish(&g, g.advance(m.state, t).unwrap().unwrap(), left - 1)
                    })
                    .collect();
                let expected = if fits.is_empty() { bits(&full) } else { fits };
                assert_eq!(bits(&kept), expected, "{pattern} step {step} left {left}");
            }
            // advance by the first allowed non-EOS token
            let mut row = vec![0u32; words];
            m.fill_next_token_bitmask(&mut row).unwrap();
            match bits(&row).into_iter().find(|&t| !v.is_eos(t)) {
                Some(t) => assert!(m.accept_token(t).unwrap()),
                None => break,
            }
        }
    }
}

#[test]
fn budgeted_walks_finish_in_time() {
    // a random walk over what the budgeted mask allows always ends accepting in budget
    let toks: Vec<Vec<u8>> = ["1", "2", "12", "123", "[", "]", ",", "[1", "],", "<e>"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let v = Arc::new(Vocabulary::new(toks, vec![9], vec![], None).unwrap());
    let g = Arc::new(
        Grammar::from_regex(
            r"\[([123]+(,[123]+)*)?\]",
            v.clone(),
            &GrammarOptions::default(),
        )
        .unwrap(),
    );
    let mut seed = 7u64;
    for budget in [2u32, 3, 5, 8, 20] {
        for _ in 0..200 {
            let mut m = g.matcher();
            m.set_max_tokens(Some(budget)).unwrap();
            let mut row = vec![0u32; v.mask_words()];
            loop {
                assert_eq!(m.tokens_left(), Some(budget - m.consumed()));
                if m.consumed() == budget {
                    break;
                }
                m.fill_next_token_bitmask(&mut row).unwrap();
                let allowed = bits(&row);
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let t = allowed[(seed >> 33) as usize % allowed.len()];
                assert!(m.accept_token(t).unwrap());
                if m.is_finished() {
                    break;
                }
            }
            assert!(m.is_accepting(), "budget {budget}: not finished in time");
        }
    }
    // rollback and reset keep the count
    let mut m = g.matcher();
    m.set_max_tokens(Some(4)).unwrap();
    assert_eq!(m.accept_tokens(&[4, 0, 1]).unwrap(), 3);
    assert_eq!(m.tokens_left(), Some(1));
    m.rollback(2).unwrap();
    assert_eq!(m.tokens_left(), Some(3));
    m.reset();
    assert_eq!(m.tokens_left(), Some(4));
    assert_eq!(g.min_tokens_to_accept(g.dfa.start()).unwrap(), 2);
}

/// The reference for reasoning spans, by plain string search (no matching automaton):
/// can the non-EOS token sequence `seq` be continued into a complete output? Every byte
/// of `marker` is a token of the test vocabulary, so an unfinished marker can always be
/// finished.
fn reasoning_prefix_ok(
    v: &Vocabulary,
    marker: &[u8],
    language: &[&str],
    budget: Option<u32>,
    seq: &[u32],
) -> bool {
    let mut bytes = Vec::new();
    let mut starts = Vec::new();
    for &t in seq {
        starts.push(bytes.len());
        bytes.extend_from_slice(v.token_bytes(t).unwrap());
    }
    let end = bytes
        .windows(marker.len())
        .position(|w| w == marker)
        .map(|i| i + marker.len());
    // the token the marker ends in, or the whole sequence while reasoning
    let k = match end {
        Some(e) => starts.iter().rposition(|&s| s < e).unwrap(),
        None => seq.len(),
    };
    if let Some(n) = budget.map(|b| b as usize) {
        if k >= n && n < seq.len() {
            // from token n on, the bytes go straight along what is left of the marker
            let before = &bytes[..starts[n]];
            let p = (0..marker.len())
                .rev()
                .find(|&p| before.ends_with(&marker[..p]))
                .unwrap();
            let rest = &marker[p..];
            let after = &bytes[starts[n]..];
            let ok = match end {
                Some(e) => after.starts_with(rest) && starts[n] + rest.len() == e,
                None => rest.starts_with(after),
            };
            if !ok {
                return false;
            }
        }
    }
    match end {
        None => true,
        Some(e) => {
            let rest = &bytes[e..];
            language.iter().any(|w| w.as_bytes().starts_with(rest))
        }
    }
}

fn reasoning_complete(v: &Vocabulary, marker: &[u8], language: &[&str], seq: &[u32]) -> bool {
    let bytes: Vec<u8> = seq
        .iter()
        .flat_map(|&t| v.token_bytes(t).unwrap().to_vec())
        .collect();
    match bytes.windows(marker.len()).position(|w| w == marker) {
        Some(i) => language.contains(&std::str::from_utf8(&bytes[i + marker.len()..]).unwrap()),
        None => false,
    }
}

#[test]
fn reasoning_masks_match_string_search() {
    let toks: Vec<Vec<u8>> = [
        "<", "e", ">", "<e>", "<e>a", "x", "e>b", "a", "b", "c", "<<e", "aa", "aab", "</s>",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let eos = toks.len() as u32 - 1;
    let v = Arc::new(Vocabulary::new(toks, vec![eos], vec![], None).unwrap());
    let language = ["a", "bc", "bcc"];
    let g = Arc::new(Grammar::from_regex("a|bcc?", v.clone(), &GrammarOptions::default()).unwrap());
    let words = v.mask_words();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut checked = 0;
    for marker in [&b"<e>"[..], b"aab", b"e"] {
        for budget in [None, Some(0), Some(1), Some(2), Some(4)] {
            for _walk in 0..40 {
                let mut m = g.matcher();
                m.set_reasoning(Some(marker), budget).unwrap();
                let mut seq: Vec<u32> = Vec::new();
                loop {
                    let mut row = vec![0u32; words];
                    m.fill_next_token_bitmask(&mut row).unwrap();
                    let allowed = bits(&row);
                    for t in 0..v.vocab_size() as u32 {
                        let expected = if t == eos {
                            reasoning_complete(&v, marker, &language, &seq)
                        } else {
                            let mut s2 = seq.clone();
                            s2.push(t);
                            reasoning_prefix_ok(&v, marker, &language, budget, &s2)
                        };
                        assert_eq!(
                            allowed.contains(&t),
                            expected,
                            "marker {:?} budget {budget:?} after {seq:?}, token {t}",
                            String::from_utf8_lossy(marker)
                        );
                        // accept_token agrees with the mask
                        let mut probe = m.clone();
                        assert_eq!(probe.accept_token(t).unwrap(), expected);
                        checked += 1;
                    }
                    assert_eq!(m.is_reasoning(), still_reasoning(&v, marker, &seq));
                    // long walks end in the grammar; short ones may stop anywhere
                    if allowed.is_empty() || seq.len() > 12 {
                        break;
                    }
                    let t = allowed[next(allowed.len())];
                    if next(5) == 0 && !seq.is_empty() {
                        // a step back and forth through the history
                        let before = m.clone();
                        m.rollback(1).unwrap();
                        let last = *seq.last().unwrap();
                        assert!(m.accept_token(last).unwrap());
                        assert_eq!(format!("{m:?}"), format!("{before:?}"));
                    }
                    assert!(m.accept_token(t).unwrap());
                    if t == eos {
                        break;
                    }
                    seq.push(t);
                    if let (Some(b), true) = (budget, m.is_reasoning()) {
                        // past the budget only the marker's own bytes follow
                        assert!(m.reasoning_tokens() <= b + marker.len() as u32);
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

fn still_reasoning(v: &Vocabulary, marker: &[u8], seq: &[u32]) -> bool {
    let bytes: Vec<u8> = seq
        .iter()
        .flat_map(|&t| v.token_bytes(t).unwrap().to_vec())
        .collect();
    !bytes.windows(marker.len()).any(|w| w == marker)
}

#[test]
fn option_values_name_every_option_and_read_back() {
    let d = GrammarOptions::default();
    let names: Vec<&str> = d.values().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, GrammarOptions::NAMES);
    let mut o = GrammarOptions::default();
    for (name, value) in d.values() {
        o.set(name, &(value * 2.0).to_string()).unwrap();
    }
    for ((_, a), (_, b)) in o.values().iter().zip(d.values()) {
        assert_eq!(*a, b * 2.0);
    }
}

#[test]
fn reasoning_settings_are_checked() {
    let g = setup("ab");
    let mut m = g.matcher();
    assert!(m.set_reasoning(None, Some(3)).is_err());
    assert!(m.set_reasoning(Some(b""), None).is_err());
    // "z" is no token: the marker cannot be spelled
    assert!(m.set_reasoning(Some(b"z"), None).is_err());
    // a marker whose only completions leave the grammar ("c" cannot start "ab")
    assert!(m.set_reasoning(Some(b"c"), None).is_ok());
    m.set_max_tokens(Some(5)).unwrap_err();
    let mut m2 = g.matcher();
    m2.set_max_tokens(Some(5)).unwrap();
    assert!(m2.set_reasoning(Some(b"c"), None).is_err());
    let mut m3 = g.matcher();
    assert!(m3.accept_token(0).unwrap());
    assert!(m3.set_reasoning(Some(b"c"), None).is_err());
}

/// A grammar's shared lazily built states never run out for good: outputs that together need
/// more states than `max_states` move the grammar's matchers to later generations, with the same
/// masks as a grammar with room for all of them, and rollbacks still work after a move.
#[test]
fn shared_states_renew_instead_of_running_out() {
    let toks: Vec<Vec<u8>> = ["a", "b", "ab", "ba", "c", "</s>"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let v = Arc::new(Vocabulary::new(toks, vec![5], vec![], None).unwrap());
    // 2^13 states in all; one output of at most 16 tokens builds at most a hundred
    let pattern = "c?c?[ab]*a[ab]{12}";
    let mut small = GrammarOptions::default();
    small.regex.max_states = 300;
    let g = Arc::new(Grammar::from_regex(pattern, v.clone(), &small).unwrap());
    let roomy = Arc::new(Grammar::from_regex(pattern, v, &GrammarOptions::default()).unwrap());
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let (mut row, mut want) = (vec![0u32; 1], vec![0u32; 1]);
    let mut live: Vec<(Matcher, Matcher)> = Vec::new();
    let (mut outputs, mut rollbacks) = (0, 0);
    while outputs < 600 {
        while live.len() < 6 {
            let (mut m, mut r) = (g.matcher(), roomy.matcher());
            if live.len().is_multiple_of(2) {
                m.set_reasoning(Some(b"cc"), Some(3)).unwrap();
                r.set_reasoning(Some(b"cc"), Some(3)).unwrap();
            }
            live.push((m, r));
        }
        for (m, r) in live.iter_mut() {
            m.fill_next_token_bitmask(&mut row).unwrap();
            r.fill_next_token_bitmask(&mut want).unwrap();
            assert_eq!(bits(&row), bits(&want));
            let allowed = bits(&want);
            let mut t = allowed[rand(allowed.len())];
            if r.consumed() > 16 && allowed.contains(&5) {
                t = 5;
            }
            assert!(m.accept_token(t).unwrap());
            assert!(r.accept_token(t).unwrap());
            if r.consumed() > 4 && rand(8) == 0 {
                m.rollback(2).unwrap();
                r.rollback(2).unwrap();
                rollbacks += 1;
            }
        }
        let before = live.len();
        live.retain(|(_, r)| !r.is_finished());
        outputs += before - live.len();
    }
    assert!(rollbacks > 100);
    assert!(g.generations() > 3, "{} generations", g.generations());
    assert!(g.current().dfa().num_states() <= 300);
    // an output that alone needs more than max_states still fails, with the budget error
    let mut tiny = GrammarOptions::default();
    tiny.regex.max_states = 12;
    let v = roomy.vocab().clone();
    let g = Arc::new(Grammar::from_regex(pattern, v, &tiny).unwrap());
    let mut m = g.matcher();
    let err = (0..40)
        .find_map(|i| m.accept_token((i % 2) as u32).err())
        .expect("runs out of room");
    assert!(matches!(err, Error::Budget(_)), "{err}");
}

#[test]
fn rules_are_built_ahead_only_once_a_token_is_accepted() {
    use crate::json_schema::JsonSchemaOptions;
    let toks: Vec<Vec<u8>> = (0u8..128)
        .map(|b| vec![b])
        .chain([b"</s>".to_vec()])
        .collect();
    let v = Arc::new(Vocabulary::new(toks, vec![128], vec![], None).unwrap());
    let member = |f: &str| {
        serde_json::json!({"type": "object", "properties": {
            "mail": {"type": "string", "format": f},
            "when": {"type": "string", "format": "date-time"}}})
    };
    let schema = serde_json::json!({"type": "object", "properties": {
        "a": member("email"), "b": member("uri"), "c": member("date")},
        "additionalProperties": false});
    let g = Arc::new(
        Grammar::from_json_schema(
            &schema,
            v,
            &JsonSchemaOptions::default(),
            &GrammarOptions::default(),
        )
        .unwrap(),
    );
    let (rules, at_start) = g.dfa().rules_built();
    assert!(
        rules >= 3 && at_start < rules,
        "{rules} rules, {at_start} built"
    );
    // a grammar that only fills its first mask (an admission check) builds nothing more
    let mut m = g.matcher();
    let mut row = vec![0u32; 5];
    m.fill_next_token_bitmask(&mut row).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        g.dfa().rules_ready(),
        0,
        "rules built before any token was accepted"
    );
    assert_eq!(g.dfa().rules_built().1, at_start);
    // its first accepted token hands the rest to the background builder
    assert!(m.accept_token(u32::from(b'{')).unwrap());
    let t = std::time::Instant::now();
    while g.dfa().rules_ready() + g.dfa().rules_built().1 < rules {
        assert!(t.elapsed().as_secs() < 60, "the builder did not start");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The fewest non-EOS tokens from `state` to acceptance, by breadth-first search over
/// `Grammar::advance` (independent of the budget's own search and bounds); `UNREACHABLE`
/// past `limit`.
fn tokens_to_accept(g: &Grammar, state: u32, limit: u32) -> u32 {
    let mut seen = std::collections::HashSet::from([state]);
    let mut frontier = vec![state];
    for depth in 0..=limit {
        if frontier.iter().any(|&s| g.dfa.is_accepting(s)) {
            return depth;
        }
        let mut next = Vec::new();
        for &s in &frontier {
            for t in 0..g.vocab.vocab_size() as u32 {
                if g.vocab.is_eos(t) {
                    continue;
                }
                if let Ok(Some(r)) = g.advance(s, t) {
                    if seen.insert(r) {
                        next.push(r);
                    }
                }
            }
        }
        frontier = next;
    }
    crate::fit::UNREACHABLE
}

#[test]
fn budgets_in_any_order_keep_exactly_the_tokens_that_fit() {
    // the budget's bounds (a spelled completion, a proven lower bound, cached per state) are
    // asked with budgets in a scrambled order, large and small, on grammars whose shortest
    // completions are long, on a vocabulary that cannot spell every byte alone ("y", "z"), and
    // with a special token the grammar names (an atom); EOS as regular text (successors found
    // token by token) and as a special token (successors found in one walk of the trie)
    for eos_special in [false, true] {
        let special = if eos_special { vec![11, 15] } else { vec![15] };
        budgets_in_any_order(special);
    }
}

fn budgets_in_any_order(special: Vec<u32>) {
    let toks: Vec<Vec<u8>> = [
        "a", "b", "c", "{", "}", ",", "\"", "ab", "abc", "{a", "}}", "<e>", "xy", "xyz", "zz",
        "<end>",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let v = Arc::new(Vocabulary::new(toks, vec![11], special, None).unwrap());
    let words = v.mask_words();
    let mut grammars: Vec<(String, Arc<Grammar>)> = [
        r"a{2,9}",
        r#"\{("[abc]{0,6}",)*"[abc]{3}"\}"#,
        r"(ab|c)*b(xy|xyz)+c",
        r"(a|b){0,3}c(\{a\}){2,4}",
    ]
    .iter()
    .map(|p| {
        let g = Grammar::from_regex(p, v.clone(), &GrammarOptions::default()).unwrap();
        (p.to_string(), Arc::new(g))
    })
    .collect();
    let tag = r#"{"type": "structural_tag", "format": {"type": "tag", "begin": "{",
        "content": {"type": "regex", "pattern": "(ab|c){1,5}"},
        "end": {"type": "token", "token": "<end>"}}}"#;
    let g = Grammar::from_structural_tag(
        tag,
        v.clone(),
        &crate::JsonSchemaOptions::default(),
        &GrammarOptions::default(),
    )
    .unwrap();
    grammars.push(("tag with a token end".into(), Arc::new(g)));
    let order = [9u32, 1, 14, 3, 30, 2, 7, 5, 12, 4, 6, 8, 20, 10, 11];
    for (name, g) in &grammars {
        let mut m = g.matcher();
        let mut seed = 11u64;
        for step in 0..8 {
            for &left in &order {
                let mut full = vec![0u32; words];
                let mut kept = vec![0u32; words];
                g.fill_mask(m.state, false, &mut full).unwrap();
                g.fill_mask_within(m.state, false, Some(left), &mut kept)
                    .unwrap();
                let fits: Vec<u32> = bits(&full)
                    .into_iter()
                    .filter(|&t| {
                        v.is_eos(t)
                            || tokens_to_accept(g, g.advance(m.state, t).unwrap().unwrap(), left)
                                < left
                    })
                    .collect();
                let expected = if fits.is_empty() { bits(&full) } else { fits };
                assert_eq!(bits(&kept), expected, "{name} step {step} left {left}");
            }
            let d = tokens_to_accept(g, m.state, 64);
            assert_eq!(
                g.min_tokens_to_accept(m.state).unwrap(),
                d,
                "{name} step {step}"
            );
            // advance by a pseudo-random allowed non-EOS token
            let mut row = vec![0u32; words];
            m.fill_next_token_bitmask(&mut row).unwrap();
            let allowed: Vec<u32> = bits(&row).into_iter().filter(|&t| !v.is_eos(t)).collect();
            if allowed.is_empty() {
                break;
            }
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert!(m
                .accept_token(allowed[(seed >> 33) as usize % allowed.len()])
                .unwrap());
        }
    }
}
