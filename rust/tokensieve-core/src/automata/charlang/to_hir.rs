//! State elimination: a minimal character DFA turned back into a compact HIR (counted
//! repetitions folded, shared ends factored), within the output budget.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq)]
struct R(Rc<RNode>);

#[derive(Debug, PartialEq, Eq)]
struct RNode {
    kind: RKind,
    /// an estimate of `hir::weight` of the HIR
    weight: u64,
    depth: u32,
}

#[derive(Debug, PartialEq, Eq)]
enum RKind {
    Eps,
    Set(Vec<(u32, u32)>),
    Cat(Vec<R>),
    Alt(Vec<R>),
    Rep(R, u32, Option<u32>),
}

impl R {
    fn mk(kind: RKind) -> R {
        let (weight, depth) = match &kind {
            RKind::Eps => (1, 1),
            RKind::Set(r) => {
                let w = if r.len() == 1 && r[0].0 == r[0].1 {
                    char::from_u32(r[0].0).map_or(2, |c| c.len_utf8() as u64)
                } else {
                    2
                };
                (w, 1)
            }
            RKind::Cat(xs) | RKind::Alt(xs) => (
                xs.iter().fold(1u64, |a, x| a.saturating_add(x.w())),
                1 + xs.iter().map(|x| x.0.depth).max().unwrap_or(0),
            ),
            RKind::Rep(x, min, max) => (
                u64::from(max.unwrap_or(*min).max(1))
                    .saturating_mul(x.w())
                    .saturating_add(1),
                1 + x.0.depth,
            ),
        };
        R(Rc::new(RNode {
            kind,
            weight,
            depth,
        }))
    }

    fn w(&self) -> u64 {
        self.0.weight
    }

    fn kind(&self) -> &RKind {
        &self.0.kind
    }

    fn eps() -> R {
        R::mk(RKind::Eps)
    }

    fn is_eps(&self) -> bool {
        matches!(self.kind(), RKind::Eps)
    }

    /// `(base, min, max)`: a repetition's parts, or `(self, 1, 1)`.
    fn as_rep(&self) -> (R, u32, Option<u32>) {
        match self.kind() {
            RKind::Rep(x, a, b) => (x.clone(), *a, *b),
            _ => (self.clone(), 1, Some(1)),
        }
    }

    /// The items of a concatenation (a single item otherwise).
    fn seq(&self) -> Vec<R> {
        match self.kind() {
            RKind::Cat(xs) => xs.clone(),
            RKind::Eps => vec![],
            _ => vec![self.clone()],
        }
    }
}

fn rep(x: R, min: u32, max: Option<u32>) -> R {
    if max == Some(0) || x.is_eps() {
        return R::eps();
    }
    if min == 1 && max == Some(1) {
        return x;
    }
    if let RKind::Rep(y, a, b) = x.kind() {
        let (a, b) = (*a, *b);
        // (y*)*, (y+)*, (y*){0,k} → y*
        if b.is_none() && a <= 1 && min == 0 {
            return rep(y.clone(), 0, None);
        }
        // (y?)*, (y?)+ → y*
        if a == 0 && b == Some(1) && max.is_none() {
            return rep(y.clone(), 0, None);
        }
        // (y{0|1,b})? → y{0,b}
        if min == 0 && max == Some(1) && a <= 1 {
            return rep(y.clone(), 0, b);
        }
    }
    R::mk(RKind::Rep(x, min, max))
}

fn opt(x: R) -> R {
    rep(x, 0, Some(1))
}

fn star(x: R) -> R {
    rep(x, 0, None)
}

type Counted = (R, u32, Option<u32>);

fn add_counts(x: &Counted, y: &Counted) -> Option<(u32, Option<u32>)> {
    let lo = x.1.checked_add(y.1)?;
    let hi = match (x.2, y.2) {
        (Some(a), Some(b)) => Some(a.checked_add(b)?),
        _ => None,
    };
    Some((lo, hi))
}

fn is_plain(x: &Counted) -> bool {
    (x.1, x.2) == (1, Some(1))
}

/// Whether the items of `flat[at..]` start with the concatenation `ys`.
fn spells(flat: &[Counted], at: usize, ys: &[R]) -> bool {
    flat.len() >= at + ys.len()
        && ys
            .iter()
            .zip(&flat[at..])
            .all(|(y, e)| *y == rep(e.0.clone(), e.1, e.2))
}

/// Append `x` to a concatenation, folding repeats into counted repetitions:
/// `x x{a,b}` → `x{a+1,b+1}`, `x{a,b} x{c,d}` → `x{a+c,b+d}`, `y z (yz){a,b}` → `(yz){a+1,b+1}`.
fn push_fold(flat: &mut Vec<Counted>, x: R) {
    flat.push(x.as_rep());
    loop {
        let n = flat.len();
        if n < 2 {
            return;
        }
        let (y, z) = (&flat[n - 2], &flat[n - 1]);
        if y.0 == z.0 && !(is_plain(y) && is_plain(z)) {
            if let Some((lo, hi)) = add_counts(y, z) {
                flat.pop();
                flat[n - 2].1 = lo;
                flat[n - 2].2 = hi;
                continue;
            }
        }
        // y z (yz){a,b}
        if let RKind::Cat(ys) = flat[n - 1].0.kind() {
            let m = ys.len();
            if n > m && spells(flat, n - 1 - m, ys) {
                let e = flat.pop().expect("non-empty");
                if let Some((lo, hi)) = add_counts(&e, &(e.0.clone(), 1, Some(1))) {
                    flat.truncate(n - 1 - m);
                    flat.push((e.0, lo, hi));
                    continue;
                }
                flat.push(e);
            }
        }
        // (yz){a,b} y z
        let mut folded = false;
        for j in (n.saturating_sub(33)..n - 1).rev() {
            if let RKind::Cat(ys) = flat[j].0.kind() {
                if ys.len() == n - 1 - j && spells(flat, j + 1, ys) {
                    let e = flat[j].clone();
                    if let Some((lo, hi)) = add_counts(&e, &(e.0.clone(), 1, Some(1))) {
                        flat.truncate(j);
                        flat.push((e.0, lo, hi));
                        folded = true;
                    }
                    break;
                }
            }
        }
        if !folded {
            return;
        }
    }
}

fn cat(items: Vec<R>) -> R {
    let mut flat: Vec<Counted> = Vec::new();
    for it in items {
        match it.kind() {
            RKind::Eps => {}
            RKind::Cat(xs) => xs.iter().for_each(|x| push_fold(&mut flat, x.clone())),
            _ => push_fold(&mut flat, it),
        }
    }
    let mut out: Vec<R> = flat.into_iter().map(|(x, a, b)| rep(x, a, b)).collect();
    match out.len() {
        0 => R::eps(),
        1 => out.pop().expect("one item"),
        _ => R::mk(RKind::Cat(out)),
    }
}

fn union_ranges(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    norm(a.iter().chain(b).copied().collect())
}

/// Whether two (non-alternation) expressions share a first or last item.
fn shares_end(a: &R, b: &R) -> bool {
    if matches!(a.kind(), RKind::Alt(_)) || matches!(b.kind(), RKind::Alt(_)) {
        return false;
    }
    let (x, y) = (a.seq(), b.seq());
    (!x.is_empty() && !y.is_empty()) && (x[0] == y[0] || x[x.len() - 1] == y[y.len() - 1])
}

fn alt2(e: R, x: R) -> R {
    if e == x {
        return e;
    }
    if e.is_eps() {
        return opt(x);
    }
    if x.is_eps() {
        return opt(e);
    }
    if let RKind::Rep(y, 0, Some(1)) = e.kind() {
        return opt(alt2(y.clone(), x));
    }
    if let RKind::Rep(y, 0, Some(1)) = x.kind() {
        return opt(alt2(e, y.clone()));
    }
    if let (RKind::Set(a), RKind::Set(b)) = (e.kind(), x.kind()) {
        return R::mk(RKind::Set(union_ranges(a, b)));
    }
    if shares_end(&e, &x) {
        let (a, b) = (e.seq(), x.seq());
        let m = a.len().min(b.len());
        let mut p = 0;
        while p < m && a[p] == b[p] {
            p += 1;
        }
        let mut s = 0;
        while s < m - p && a[a.len() - 1 - s] == b[b.len() - 1 - s] {
            s += 1;
        }
        let mid = alt2(
            cat(a[p..a.len() - s].to_vec()),
            cat(b[p..b.len() - s].to_vec()),
        );
        let mut items = a[..p].to_vec();
        items.push(mid);
        items.extend_from_slice(&a[a.len() - s..]);
        return cat(items);
    }
    let mut list: Vec<R> = match e.kind() {
        RKind::Alt(xs) => xs.clone(),
        _ => vec![e.clone()],
    };
    let news: Vec<R> = match x.kind() {
        RKind::Alt(xs) => xs.clone(),
        _ => vec![x.clone()],
    };
    for m in news {
        if list.contains(&m) {
            continue;
        }
        let merge = list.iter().position(|y| {
            matches!((y.kind(), m.kind()), (RKind::Set(_), RKind::Set(_))) || shares_end(y, &m)
        });
        match merge {
            Some(i) => {
                let y = list[i].clone();
                list[i] = alt2(y, m);
            }
            None => list.push(m),
        }
    }
    if list.len() == 1 {
        list.pop().expect("one item")
    } else {
        R::mk(RKind::Alt(list))
    }
}

fn r_to_hir(r: &R) -> Hir {
    match r.kind() {
        RKind::Eps => Hir::empty(),
        RKind::Set(rs) => {
            if rs.len() == 1 && rs[0].0 == rs[0].1 {
                if let Some(c) = char::from_u32(rs[0].0) {
                    return hir::lit(c.encode_utf8(&mut [0; 4]));
                }
            }
            let chars: Vec<(char, char)> = rs
                .iter()
                .filter_map(|&(a, b)| Some((char::from_u32(a)?, char::from_u32(b)?)))
                .collect();
            hir::class(&chars)
        }
        RKind::Cat(xs) => hir::concat(xs.iter().map(r_to_hir).collect()),
        RKind::Alt(xs) => hir::alt(xs.iter().map(r_to_hir).collect()),
        RKind::Rep(x, a, b) => hir::rep(r_to_hir(x), *a, *b),
    }
}

// The same languages spell strings and numbers (a number's bounds and multipleOf), so the
// messages name both.
fn too_big(b: &LangBudget) -> String {
    format!(
        "the regular expression for the combination of these constraints (on a string's or a \
         number's spelling) would exceed the size budget (weight {})",
        b.max_weight
    )
}

fn too_deep(b: &LangBudget) -> String {
    format!(
        "the regular expression for the combination of these constraints (on a string's or a \
         number's spelling) would nest deeper than {} levels",
        b.max_depth
    )
}

/// The states of `d` from which an accepting state can be reached.
pub(super) fn live_states(d: &Dfa) -> Vec<bool> {
    let arcs = (0..d.n()).flat_map(|s| (0..d.k).map(move |c| (s, d.next(s, c))));
    coreachable(&d.accept, arcs)
}

/// State elimination on the live part of a minimal DFA.
pub(super) fn dfa_hir(d: &Dfa, alpha: &Alphabet, b: &LangBudget) -> Result<Hir, String> {
    let n = d.n();
    let k = d.k;
    // live: can reach acceptance (all states are reachable from 0)
    let live = live_states(d);
    if !live[0] {
        return Ok(hir::alt(vec![]));
    }
    // node ids: DFA states 0..n (dead ones unused), S = n, F = n + 1
    let (start, fin) = (n, n + 1);
    let mut out: Vec<BTreeMap<usize, R>> = vec![BTreeMap::new(); n + 2];
    let mut inn: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n + 2];
    let mut total: u64 = 0;
    for s in (0..n).filter(|&s| live[s]) {
        let mut by_target: BTreeMap<usize, Vec<(u32, u32)>> = BTreeMap::new();
        for c in 0..k {
            let t = d.next(s, c);
            if live[t] {
                by_target
                    .entry(t)
                    .or_default()
                    .extend_from_slice(&alpha.class_ranges[c]);
            }
        }
        for (t, ranges) in by_target {
            let r = R::mk(RKind::Set(norm(ranges)));
            total += r.w();
            out[s].insert(t, r);
            inn[t].insert(s);
        }
        if d.accept[s] {
            out[s].insert(fin, R::eps());
            inn[fin].insert(s);
            total += 1;
        }
    }
    out[start].insert(0, R::eps());
    inn[0].insert(start);
    let limit = b.max_weight.saturating_mul(4);
    let mut remaining: Vec<usize> = (0..n).filter(|&s| live[s]).collect();
    while !remaining.is_empty() {
        // the state with the fewest in × out edges (self-loops aside)
        let (idx, &s) = remaining
            .iter()
            .enumerate()
            .min_by_key(|(_, &s)| {
                let loops = usize::from(out[s].contains_key(&s));
                let i = inn[s].len() - loops;
                let o = out[s].len() - loops;
                // ties: states far from the start first (chains fold into x{0,k})
                (i * o, i + o, std::cmp::Reverse(s))
            })
            .expect("non-empty");
        remaining.swap_remove(idx);
        let lp = out[s].remove(&s);
        inn[s].remove(&s);
        if let Some(l) = &lp {
            total -= l.w().min(total);
        }
        let mid = lp.map(star);
        let ins: Vec<(usize, R)> = std::mem::take(&mut inn[s])
            .into_iter()
            .map(|p| (p, out[p].remove(&s).expect("edge")))
            .collect();
        let outs: Vec<(usize, R)> = std::mem::take(&mut out[s]).into_iter().collect();
        for (q, r) in &outs {
            inn[*q].remove(&s);
            total -= r.w().min(total);
        }
        for (_, r) in &ins {
            total -= r.w().min(total);
        }
        for (p, rp) in &ins {
            for (q, rq) in &outs {
                let mut items = vec![rp.clone()];
                items.extend(mid.clone());
                items.push(rq.clone());
                let new = cat(items);
                let merged = match out[*p].remove(q) {
                    Some(e) => {
                        total -= e.w().min(total);
                        alt2(e, new)
                    }
                    None => new,
                };
                total = total.saturating_add(merged.w());
                if total > limit || merged.w() > limit {
                    return Err(too_big(b));
                }
                // edges only get wrapped further, so a deep one stays deep (and recursion over
                // the expression stays bounded)
                if merged.0.depth > b.max_depth {
                    return Err(too_deep(b));
                }
                out[*p].insert(*q, merged);
                inn[*q].insert(*p);
            }
        }
    }
    let r = match out[start].remove(&fin) {
        Some(r) => r,
        None => return Ok(hir::alt(vec![])),
    };
    if r.0.depth > b.max_depth {
        return Err(too_deep(b));
    }
    if r.w() > limit {
        return Err(too_big(b));
    }
    let h = r_to_hir(&r);
    if hir::weight(&h) > b.max_weight {
        return Err(too_big(b));
    }
    Ok(h)
}
