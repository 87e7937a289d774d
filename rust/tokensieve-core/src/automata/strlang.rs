//! Boolean combinations of languages over decoded characters.
//!
//! String constraints state languages of decoded strings (a `pattern`, a format, lengths, a
//! list of names); object keys do too (declared names, `patternProperties` regexes,
//! `propertyNames`). [`combine`] builds `pos₁ ∩ … ∩ ¬neg₁ ∩ …` from such HIRs (over
//! characters, no look-around): each is compiled to a character NFA, the alphabet is split into
//! the classes no transition distinguishes, the product automaton is built by subset
//! construction, minimized, and turned back into a HIR by state elimination, ready for
//! `string::encode`. Budgets on automaton states and on the result's size turn blow-ups into
//! errors.

use regex_syntax::hir::{Class, Hir, HirKind};

use super::charlang::{CharDfa, Lang, LangBudget};

/// `pos₁ ∩ … ∩ ¬neg₁ ∩ …` (all strings when both are empty) as a HIR over characters;
/// `Ok(None)` when the language is empty. Built with `charlang` (minimal automata and compact
/// counted repetitions in the output); the direct product below is the cross-check in tests.
pub(crate) fn combine(pos: &[Hir], neg: &[Hir]) -> Result<Option<Hir>, String> {
    lang_hir(&conjunction(pos, neg)?, &LangBudget::default())
}

/// `pos₁ ∩ … ∩ ¬neg₁ ∩ …` as a language expression (nothing built yet).
fn conjunction(pos: &[Hir], neg: &[Hir]) -> Result<Lang, String> {
    let mut l = Lang::any();
    for h in pos {
        l = l.and(&Lang::from_hir(h)?);
    }
    for h in neg {
        l = l.and(&Lang::from_hir(h)?.not());
    }
    Ok(l)
}

/// Budget of [`combined_dfa`]: its automaton is built into the grammar's states directly, so
/// it may be larger than one turned back into an expression.
const DIRECT_DFA_STATES: usize = 1 << 17;

/// The minimal DFA of `pos₁ ∩ … ∩ ¬neg₁ ∩ …` without dead states, `None` when empty.
///
/// Results are kept process-wide, keyed by the printed regexes of the parts: the same format or
/// pattern recurs across schemas and requests, and determinizing and minimizing one (`uri`:
/// about 3 ms) is most of its compile. A large part of a combination (a format beside a
/// pattern) is itself such an entry, so a format met before is not determinized again in a new
/// combination. The cache keeps two generations of at most [`DFA_CACHE`] entries each: when
/// the newer is full it becomes the older and the oldest is dropped; an entry found in the
/// older moves to the newer, so the parts in use stay.
pub(crate) fn combined_dfa(pos: &[Hir], neg: &[Hir]) -> Result<Option<CharDfa>, String> {
    use std::fmt::Write;
    let mut key = String::new();
    for h in pos {
        let _ = writeln!(key, "+{h}");
    }
    for h in neg {
        let _ = writeln!(key, "-{h}");
    }
    if let Some(r) = cached(&key) {
        return r;
    }
    let r = build_combined(pos, neg);
    remember(key, r.clone());
    r
}

/// The parts of [`combined_dfa`]'s results, built: each part of weight at least
/// [`SHARED_PART_WEIGHT`] from its own cached DFA when there are several.
fn build_combined(pos: &[Hir], neg: &[Hir]) -> Result<Option<CharDfa>, String> {
    let budget = LangBudget {
        max_states: DIRECT_DFA_STATES,
        ..LangBudget::default()
    };
    if pos.len() + neg.len() < 2 {
        return conjunction(pos, neg)?.to_char_dfa(&budget);
    }
    let part = |h: &Hir| -> Result<Option<Lang>, String> {
        if super::hir::weight(h) < SHARED_PART_WEIGHT {
            return Lang::from_hir(h).map(Some);
        }
        combined_dfa(std::slice::from_ref(h), &[])?
            .map(|d| Lang::from_dfa(&d))
            .transpose()
    };
    let mut l = Lang::any();
    for h in pos {
        match part(h)? {
            Some(p) => l = l.and(&p),
            // one required language is empty: so is the combination
            None => return Ok(None),
        }
    }
    for h in neg {
        // a language taken away that is empty takes nothing away
        if let Some(p) = part(h)? {
            l = l.and(&p.not());
        }
    }
    l.to_char_dfa(&budget)
}

/// Parts of a combination at least this heavy ([`super::hir::weight`]) are built from their
/// own cached DFA (a format); lighter ones (a short pattern) straight from their expression.
const SHARED_PART_WEIGHT: u64 = 200;

type DfaResult = Result<Option<CharDfa>, String>;

/// [`combined_dfa`]'s cache: the newer generation, then the older.
type Generations = [rustc_hash::FxHashMap<String, DfaResult>; 2];

fn dfa_cache() -> std::sync::MutexGuard<'static, Generations> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<Generations>> = std::sync::OnceLock::new();
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn cached(key: &str) -> Option<DfaResult> {
    let mut c = dfa_cache();
    if let Some(r) = c[0].get(key) {
        return Some(r.clone());
    }
    let r = c[1].remove(key)?;
    insert(&mut c, key.to_string(), r.clone());
    Some(r)
}

fn remember(key: String, r: DfaResult) {
    insert(&mut dfa_cache(), key, r);
}

fn insert(c: &mut Generations, key: String, r: DfaResult) {
    if c[0].len() >= DFA_CACHE {
        c[1] = std::mem::take(&mut c[0]);
    }
    c[0].insert(key, r);
}

/// Entries of each generation of [`combined_dfa`]'s cache.
const DFA_CACHE: usize = 256;

/// The HIR of `l`, `None` when the language is empty (the automaton is built once).
pub(crate) fn lang_hir(l: &Lang, b: &LangBudget) -> Result<Option<Hir>, String> {
    let h = l.to_hir(b)?;
    let empty = match h.kind() {
        HirKind::Class(Class::Bytes(c)) => c.ranges().is_empty(),
        HirKind::Class(Class::Unicode(c)) => c.ranges().is_empty(),
        _ => false,
    };
    Ok((!empty).then_some(h))
}

/// An independent oracle for the tests: the same conjunctions by a direct product of
/// character NFAs (subset construction, Moore minimization, state elimination), sharing no
/// code with `charlang`.
#[cfg(test)]
mod product {
    use std::collections::{BTreeSet, HashMap};

    use regex_syntax::hir::{Class, Hir, HirKind};

    use super::super::charlang::coreachable;
    use super::super::hir::{alt, class, concat, star, weight};

    const MAX_NFA: usize = 20_000;
    const MAX_DFA: usize = 4_096;
    const MAX_WEIGHT: u64 = 200_000;

    type Ranges = Vec<(u32, u32)>;

    #[derive(Default)]
    struct Nfa {
        eps: Vec<Vec<usize>>,
        trans: Vec<Vec<(usize, usize)>>, // (label index, target)
        labels: Vec<Ranges>,
    }

    impl Nfa {
        fn state(&mut self) -> Result<usize, String> {
            if self.eps.len() >= MAX_NFA {
                return Err(format!(
                    "a string or key constraint needs more than {MAX_NFA} automaton states"
                ));
            }
            self.eps.push(Vec::new());
            self.trans.push(Vec::new());
            Ok(self.eps.len() - 1)
        }

        fn label(&mut self, r: Ranges) -> usize {
            self.labels.push(r);
            self.labels.len() - 1
        }

        /// Fragment (start, end) for `h`.
        fn build(&mut self, h: &Hir) -> Result<(usize, usize), String> {
            match h.kind() {
                HirKind::Empty => {
                    let s = self.state()?;
                    Ok((s, s))
                }
                HirKind::Literal(l) => {
                    let text = std::str::from_utf8(&l.0).map_err(|_| "a literal is not UTF-8")?;
                    let start = self.state()?;
                    let mut cur = start;
                    for c in text.chars() {
                        let n = self.state()?;
                        let lab = self.label(vec![(c as u32, c as u32)]);
                        self.trans[cur].push((lab, n));
                        cur = n;
                    }
                    Ok((start, cur))
                }
                HirKind::Class(c) => {
                    let r: Ranges = match c {
                        Class::Unicode(u) => u
                            .ranges()
                            .iter()
                            .map(|x| (x.start() as u32, x.end() as u32))
                            .collect(),
                        Class::Bytes(b) => {
                            let r: Ranges = b
                                .ranges()
                                .iter()
                                .map(|x| (u32::from(x.start()), u32::from(x.end())))
                                .collect();
                            if r.iter().any(|&(_, e)| e > 0x7F) {
                                return Err("byte classes beyond ASCII are not characters".into());
                            }
                            r
                        }
                    };
                    let (s, e) = (self.state()?, self.state()?);
                    if !r.is_empty() {
                        let lab = self.label(r);
                        self.trans[s].push((lab, e));
                    }
                    Ok((s, e))
                }
                HirKind::Look(_) => Err(
                    "anchors inside a pattern (other than at its ends) and word boundaries are not \
                     supported"
                        .into(),
                ),
                HirKind::Capture(c) => self.build(&c.sub),
                HirKind::Concat(xs) => {
                    let start = self.state()?;
                    let mut cur = start;
                    for x in xs {
                        let (s, e) = self.build(x)?;
                        self.eps[cur].push(s);
                        cur = e;
                    }
                    Ok((start, cur))
                }
                HirKind::Alternation(xs) => {
                    let (s, e) = (self.state()?, self.state()?);
                    for x in xs {
                        let (a, b) = self.build(x)?;
                        self.eps[s].push(a);
                        self.eps[b].push(e);
                    }
                    Ok((s, e))
                }
                HirKind::Repetition(r) => {
                    let start = self.state()?;
                    let mut cur = start;
                    for _ in 0..r.min {
                        let (s, e) = self.build(&r.sub)?;
                        self.eps[cur].push(s);
                        cur = e;
                    }
                    match r.max {
                        None => {
                            let (s, e) = self.build(&r.sub)?;
                            self.eps[cur].push(s);
                            self.eps[e].push(cur);
                            Ok((start, cur))
                        }
                        Some(max) => {
                            let end = self.state()?;
                            self.eps[cur].push(end);
                            for _ in r.min..max {
                                let (s, e) = self.build(&r.sub)?;
                                self.eps[cur].push(s);
                                self.eps[e].push(end);
                                cur = e;
                            }
                            Ok((start, end))
                        }
                    }
                }
            }
        }

        fn closure(&self, set: &mut BTreeSet<usize>) {
            let mut stack: Vec<usize> = set.iter().copied().collect();
            while let Some(s) = stack.pop() {
                for &t in &self.eps[s] {
                    if set.insert(t) {
                        stack.push(t);
                    }
                }
            }
        }
    }

    /// A complete DFA over minterm indices (state 0 is the start).
    struct Dfa {
        next: Vec<Vec<usize>>,
        accept: Vec<bool>,
    }

    /// Split the characters into classes no label distinguishes: returns the classes (as ranges)
    /// and, per label, the classes it contains.
    fn minterms(labels: &[&Ranges]) -> (Vec<Ranges>, Vec<Vec<usize>>) {
        let mut cuts: BTreeSet<u32> = BTreeSet::new();
        cuts.insert(0);
        cuts.insert(0x11_0000);
        for l in labels {
            for &(a, b) in l.iter() {
                cuts.insert(a);
                cuts.insert(b + 1);
            }
        }
        let cuts: Vec<u32> = cuts.into_iter().collect();
        // signature of each elementary interval: the labels containing it
        let mut by_sig: HashMap<Vec<usize>, usize> = HashMap::new();
        let mut classes: Vec<Ranges> = Vec::new();
        let mut member: Vec<Vec<usize>> = vec![Vec::new(); labels.len()];
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1] - 1);
            let sig: Vec<usize> = labels
                .iter()
                .enumerate()
                .filter(|(_, l)| l.iter().any(|&(x, y)| x <= a && a <= y))
                .map(|(i, _)| i)
                .collect();
            let k = match by_sig.get(&sig) {
                Some(&k) => k,
                None => {
                    let k = classes.len();
                    by_sig.insert(sig.clone(), k);
                    classes.push(Vec::new());
                    for &i in &sig {
                        member[i].push(k);
                    }
                    k
                }
            };
            classes[k].push((a, b));
        }
        (classes, member)
    }

    fn determinize(
        nfa: &Nfa,
        start: usize,
        end: usize,
        n_classes: usize,
        member: &[Vec<usize>],
        label_offset: usize,
    ) -> Result<Dfa, String> {
        let mut ids: HashMap<BTreeSet<usize>, usize> = HashMap::new();
        let mut sets: Vec<BTreeSet<usize>> = Vec::new();
        let mut s0 = BTreeSet::new();
        s0.insert(start);
        nfa.closure(&mut s0);
        ids.insert(s0.clone(), 0);
        sets.push(s0);
        let mut next: Vec<Vec<usize>> = Vec::new();
        let mut i = 0;
        while i < sets.len() {
            let mut row = vec![0usize; n_classes];
            let mut targets: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n_classes];
            for &s in &sets[i] {
                for &(lab, t) in &nfa.trans[s] {
                    for &c in &member[label_offset + lab] {
                        targets[c].insert(t);
                    }
                }
            }
            for (c, mut t) in targets.into_iter().enumerate() {
                nfa.closure(&mut t);
                let id = match ids.get(&t) {
                    Some(&id) => id,
                    None => {
                        if sets.len() >= MAX_DFA {
                            return Err(format!(
                                "a string or key constraint needs more than {MAX_DFA} automaton states"
                            ));
                        }
                        ids.insert(t.clone(), sets.len());
                        sets.push(t);
                        sets.len() - 1
                    }
                };
                row[c] = id;
            }
            next.push(row);
            i += 1;
        }
        let accept = sets.iter().map(|s| s.contains(&end)).collect();
        Ok(Dfa { next, accept })
    }

    /// The same language by a direct product construction (no minimization of the operands).
    pub(super) fn combine_product(pos: &[Hir], neg: &[Hir]) -> Result<Option<Hir>, String> {
        // one NFA per operand, sharing the label table
        let mut nfas: Vec<(Nfa, usize, usize)> = Vec::new();
        for h in pos.iter().chain(neg) {
            let mut n = Nfa::default();
            let (s, e) = n.build(h)?;
            nfas.push((n, s, e));
        }
        let all_labels: Vec<&Ranges> = nfas.iter().flat_map(|(n, _, _)| n.labels.iter()).collect();
        let (classes, member) = minterms(&all_labels);
        let mut dfas = Vec::new();
        let mut offset = 0;
        for (n, s, e) in &nfas {
            dfas.push(determinize(n, *s, *e, classes.len(), &member, offset)?);
            offset += n.labels.len();
        }
        let np = pos.len();
        // product
        let mut ids: HashMap<Vec<usize>, usize> = HashMap::new();
        let mut states: Vec<Vec<usize>> = vec![vec![0; dfas.len()]];
        ids.insert(states[0].clone(), 0);
        let mut edges: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut i = 0;
        while i < states.len() {
            let mut row = Vec::new();
            for c in 0..classes.len() {
                let t: Vec<usize> = states[i]
                    .iter()
                    .zip(&dfas)
                    .map(|(&q, d)| d.next[q][c])
                    .collect();
                let id = match ids.get(&t) {
                    Some(&id) => id,
                    None => {
                        if states.len() >= MAX_DFA {
                            return Err(format!(
                                "combining these string or key constraints needs more than {MAX_DFA} \
                                 automaton states"
                            ));
                        }
                        ids.insert(t.clone(), states.len());
                        states.push(t);
                        states.len() - 1
                    }
                };
                row.push((c, id));
            }
            edges.push(row);
            i += 1;
        }
        let accept: Vec<bool> = states
            .iter()
            .map(|q| {
                q.iter()
                    .zip(&dfas)
                    .enumerate()
                    .all(|(k, (&s, d))| d.accept[s] == (k < np))
            })
            .collect();
        let (start, accept, edges) = minimize(0, &accept, &edges);
        eliminate(start, &accept, &edges, &classes)
    }

    /// Moore refinement; drops states that cannot reach acceptance.
    #[allow(clippy::type_complexity)]
    fn minimize(
        start: usize,
        accept: &[bool],
        edges: &[Vec<(usize, usize)>],
    ) -> (usize, Vec<bool>, Vec<Vec<(usize, usize)>>) {
        let n = accept.len();
        let arcs = (edges.iter().enumerate()).flat_map(|(i, es)| es.iter().map(move |e| (i, e.1)));
        let live = coreachable(accept, arcs);
        let mut block: Vec<usize> = (0..n).map(|i| usize::from(accept[i])).collect();
        let mut count = block.iter().collect::<BTreeSet<_>>().len();
        loop {
            let mut sigs: HashMap<(usize, Vec<(usize, usize)>), usize> = HashMap::new();
            let mut next = vec![0; n];
            for i in 0..n {
                let sig: Vec<(usize, usize)> = edges[i]
                    .iter()
                    .filter(|(_, j)| live[*j])
                    .map(|&(c, j)| (c, block[j]))
                    .collect();
                let k = sigs.len();
                next[i] = *sigs.entry((block[i], sig)).or_insert(k);
            }
            block = next;
            if sigs.len() == count {
                break;
            }
            count = sigs.len();
        }
        let nb = count;
        let mut acc = vec![false; nb];
        let mut out: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nb];
        let mut done = vec![false; nb];
        for i in 0..n {
            let b = block[i];
            acc[b] = accept[i];
            if !done[b] && live[i] {
                done[b] = true;
                out[b] = edges[i]
                    .iter()
                    .filter(|(_, j)| live[*j])
                    .map(|&(c, j)| (c, block[j]))
                    .collect();
            }
        }
        (block[start], acc, out)
    }

    fn ranges_hir(r: &Ranges) -> Hir {
        let mut v: Vec<(char, char)> = Vec::new();
        for &(a, b) in r {
            // surrogates are not characters
            for (x, y) in [(a, b.min(0xD7FF)), (a.max(0xE000), b)] {
                if x <= y {
                    if let (Some(x), Some(y)) = (char::from_u32(x), char::from_u32(y)) {
                        v.push((x, y));
                    }
                }
            }
        }
        class(&v)
    }

    fn eliminate(
        start: usize,
        accept: &[bool],
        edges: &[Vec<(usize, usize)>],
        classes: &[Ranges],
    ) -> Result<Option<Hir>, String> {
        let n = accept.len();
        let (s, f) = (n, n + 1);
        let mut r: Vec<HashMap<usize, Hir>> = vec![HashMap::new(); n + 2];
        for (i, es) in edges.iter().enumerate() {
            let mut by_target: HashMap<usize, Ranges> = HashMap::new();
            for &(c, j) in es {
                by_target
                    .entry(j)
                    .or_default()
                    .extend(classes[c].iter().copied());
            }
            for (j, mut rs) in by_target {
                rs.sort_unstable();
                r[i].insert(j, ranges_hir(&rs));
            }
        }
        r[s].insert(start, Hir::empty());
        for (i, &a) in accept.iter().enumerate() {
            if a {
                r[i].insert(f, Hir::empty());
            }
        }
        let mut alive = vec![true; n];
        for _ in 0..n {
            let mut best: Option<(usize, usize)> = None;
            for k in (0..n).filter(|&k| alive[k]) {
                let ins = (0..n + 2)
                    .filter(|&i| i != k && (i >= n || alive[i]) && r[i].contains_key(&k))
                    .count();
                let outs = r[k].keys().filter(|&&j| j != k).count();
                if best.is_none_or(|(_, c)| ins * outs < c) {
                    best = Some((k, ins * outs));
                }
            }
            let Some((k, _)) = best else { break };
            alive[k] = false;
            let self_loop = r[k].remove(&k).map(star);
            let outs: Vec<(usize, Hir)> = r[k].drain().collect();
            for i in 0..n + 2 {
                if i == k || (i < n && !alive[i]) {
                    continue;
                }
                let Some(into) = r[i].remove(&k) else {
                    continue;
                };
                for (j, out) in &outs {
                    let mut parts = vec![into.clone()];
                    if let Some(l) = &self_loop {
                        parts.push(l.clone());
                    }
                    parts.push(out.clone());
                    let path = concat(parts);
                    let merged = match r[i].remove(j) {
                        Some(old) => alt(vec![old, path]),
                        None => path,
                    };
                    if weight(&merged) > MAX_WEIGHT {
                        return Err(
                            "combining these string or key constraints gives too large a regex"
                                .into(),
                        );
                    }
                    r[i].insert(*j, merged);
                }
            }
        }
        Ok(r[s].remove(&f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::test_util::Re;

    fn p(s: &str) -> Hir {
        crate::regex::parse(s, 250).unwrap()
    }

    #[test]
    fn brute_force_against_regexes() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["[ab]*"], &["a*"]),
            (&["a.*", ".*b"], &[]),
            (&[], &["x", "xy"]),
            (&["[a-c]{2,3}"], &["ab", "c.*"]),
            (&["(é|😀)+a?"], &["😀+"]),
            (&[".{1,2}"], &["[^b]*"]),
            (&["a+"], &[]),
        ];
        let alphabet = ['a', 'b', 'c', 'x', 'y', 'é', '😀'];
        for (pos, neg) in cases {
            let ph: Vec<Hir> = pos.iter().map(|s| p(s)).collect();
            let nh: Vec<Hir> = neg.iter().map(|s| p(s)).collect();
            let got = combine(&ph, &nh).unwrap();
            let got = got.map(|h| Re::new(&h));
            let other = product::combine_product(&ph, &nh)
                .unwrap()
                .map(|h| Re::new(&h));
            let pr: Vec<Re> = ph.iter().map(Re::new).collect();
            let nr: Vec<Re> = nh.iter().map(Re::new).collect();
            let mut words = vec![String::new()];
            for _ in 0..4 {
                let mut next = Vec::new();
                for w in &words {
                    for c in alphabet {
                        next.push(format!("{w}{c}"));
                    }
                }
                words.extend(next.clone());
                words.dedup();
                if words.len() > 3000 {
                    break;
                }
            }
            for w in &words {
                let want = pr.iter().all(|r| r.is_match(w)) && !nr.iter().any(|r| r.is_match(w));
                let have = got.as_ref().is_some_and(|r| r.is_match(w));
                assert_eq!(have, want, "{pos:?} minus {neg:?} on {w:?}");
                let have2 = other.as_ref().is_some_and(|r| r.is_match(w));
                assert_eq!(have2, want, "product: {pos:?} minus {neg:?} on {w:?}");
            }
        }
        assert!(combine(&[p("a+")], &[p("a*")]).unwrap().is_none());
        assert!(product::combine_product(&[p("a+")], &[p("a*")])
            .unwrap()
            .is_none());
        assert!(combine(&[p(".{0,5000}")], &[p("a")]).is_err());
        assert!(product::combine_product(&[p(".{0,5000}")], &[p("a")]).is_err());
    }

    /// The language of `d` (`None`: empty).
    fn lang(d: &Option<CharDfa>) -> Lang {
        d.as_ref()
            .map_or_else(Lang::nothing, |d| Lang::from_dfa(d).unwrap())
    }

    /// Combinations whose large parts (formats) come from their own cached automata are the
    /// same languages as the whole conjunction built at once, for required and excluded parts,
    /// empty parts and parts met before in another combination; checked on automata and on
    /// strings.
    #[test]
    fn combinations_of_cached_parts() {
        use crate::json_schema::string::{format_hir, search_form};
        let search = |s: &str| search_form(&p(s));
        let uri = format_hir("uri").unwrap();
        let email = format_hir("email").unwrap();
        let host = format_hir("hostname").unwrap();
        assert!(crate::automata::hir::weight(&uri) >= SHARED_PART_WEIGHT);
        let cases: Vec<(Vec<Hir>, Vec<Hir>)> = vec![
            (vec![uri.clone(), search("^https:")], vec![]),
            (vec![search("^https:"), uri.clone()], vec![]),
            (vec![uri.clone()], vec![search("example")]),
            (vec![search("^a")], vec![uri.clone()]),
            (vec![email.clone(), p(".{0,20}")], vec![search("@x\\.")]),
            (vec![host.clone(), uri.clone()], vec![]),
            (vec![uri.clone(), p("a+")], vec![]),
            (vec![email.clone()], vec![p("(?s:.)*")]),
            (vec![p("[ab]*")], vec![email.clone(), p("a")]),
        ];
        let budget = LangBudget {
            max_states: DIRECT_DFA_STATES,
            ..LangBudget::default()
        };
        for (pos, neg) in &cases {
            let got = combined_dfa(pos, neg).unwrap();
            let whole = conjunction(pos, neg).unwrap().to_char_dfa(&budget).unwrap();
            let (a, b) = (lang(&got), lang(&whole));
            let differ = a.and(&b.not()).or(&b.and(&a.not()));
            assert!(
                differ.is_empty(&LangBudget::default()).unwrap(),
                "{pos:?} minus {neg:?}"
            );
            assert_eq!(got.is_none(), whole.is_none());
            for w in [
                "https://example.com/a",
                "http://a.b/c",
                "a@b.co",
                "a@x.io",
                "ab",
                "",
                "host-name.example",
                "https:x",
            ] {
                assert_eq!(a.matches(w), b.matches(w), "{w:?}: {pos:?} minus {neg:?}");
            }
        }
        // the same combination again comes from the cache, unchanged
        let (pos, neg) = &cases[0];
        assert_eq!(
            combined_dfa(pos, neg).unwrap(),
            combined_dfa(pos, neg).unwrap()
        );
    }

    /// The cache keeps the entries in use: one read again while newer ones fill the cache
    /// survives a generation change; one never read again is dropped after two.
    #[test]
    fn cache_generations_keep_entries_in_use() {
        let key = |i: usize| format!("+test-entry-{i}\n");
        remember(key(0), Ok(None));
        remember(key(1), Ok(None));
        for i in 2..(2 * DFA_CACHE + 2) {
            remember(key(i), Ok(None));
            // entry 0 is read all along
            assert!(cached(&key(0)).is_some(), "entry 0 lost at {i}");
        }
        assert!(
            cached(&key(1)).is_none(),
            "an entry never read again is dropped"
        );
    }
}
