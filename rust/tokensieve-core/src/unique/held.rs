//! The values a unique array holds ([`Held`]): a persistent set of byte strings, ordered.
//!
//! A matcher keeps its reader's state for every token of its history, and a mask reads each
//! candidate token through a copy of the reader; both copy the values held. A copy here is one
//! reference count, and adding a value copies one path of the tree (O(log n) nodes), so memory
//! and time per item stay logarithmic in the number of items before it, however long the
//! history. Being ordered, the values with a given prefix are one range of ranks, counted and
//! walked without looking at the others.
//!
//! The tree is a treap: ordered by the values, each node's priority above its children's.
//! Priorities are a keyed hash of the value (the key drawn per process), so no client can
//! choose values that make it degenerate into a list; its height is O(log n) with high
//! probability, and every walk is a loop or recurses only that deep.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock};

type Link = Option<Arc<Node>>;

#[derive(Debug)]
struct Node {
    value: Arc<[u8]>,
    priority: u64,
    /// Values in this subtree.
    size: usize,
    left: Link,
    right: Link,
}

fn size(l: &Link) -> usize {
    l.as_ref().map_or(0, |n| n.size)
}

fn node(value: Arc<[u8]>, priority: u64, left: Link, right: Link) -> Link {
    Some(Arc::new(Node {
        size: 1 + size(&left) + size(&right),
        value,
        priority,
        left,
        right,
    }))
}

fn priority(value: &[u8]) -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    h.write(value);
    h.finish()
}

/// `t` split into its values below `value` and above it (`value` is not in `t`).
fn split(t: &Link, value: &[u8]) -> (Link, Link) {
    match t {
        None => (None, None),
        Some(n) if &n.value[..] < value => {
            let (a, b) = split(&n.right, value);
            (node(n.value.clone(), n.priority, n.left.clone(), a), b)
        }
        Some(n) => {
            let (a, b) = split(&n.left, value);
            (a, node(n.value.clone(), n.priority, b, n.right.clone()))
        }
    }
}

/// `t` with `value` (not in it) added: the nodes on its way copied, the rest shared.
fn insert(t: &Link, value: Arc<[u8]>, p: u64) -> Link {
    match t {
        Some(n) if p <= n.priority => {
            if value[..] < n.value[..] {
                let l = insert(&n.left, value, p);
                node(n.value.clone(), n.priority, l, n.right.clone())
            } else {
                let r = insert(&n.right, value, p);
                node(n.value.clone(), n.priority, n.left.clone(), r)
            }
        }
        _ => {
            let (l, r) = split(t, &value);
            node(value, p, l, r)
        }
    }
}

/// A set of byte strings that is cheap to copy and to add to (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Held {
    root: Link,
}

impl Held {
    pub(crate) fn len(&self) -> usize {
        size(&self.root)
    }

    pub(crate) fn contains(&self, value: &[u8]) -> bool {
        let mut at = &self.root;
        while let Some(n) = at {
            match value.cmp(&n.value[..]) {
                std::cmp::Ordering::Less => at = &n.left,
                std::cmp::Ordering::Greater => at = &n.right,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    /// Adds `value`; `false` when it is held already (nothing changes then).
    pub(crate) fn insert(&mut self, value: &[u8]) -> bool {
        if self.contains(value) {
            return false;
        }
        self.root = insert(&self.root, Arc::from(value), priority(value));
        true
    }

    /// How many values are below `value`.
    pub(crate) fn rank(&self, value: &[u8]) -> usize {
        let mut at = &self.root;
        let mut below = 0;
        while let Some(n) = at {
            if &n.value[..] < value {
                below += size(&n.left) + 1;
                at = &n.right;
            } else {
                at = &n.left;
            }
        }
        below
    }

    /// The value with `i` values below it.
    pub(crate) fn nth(&self, mut i: usize) -> Option<&[u8]> {
        let mut at = &self.root;
        while let Some(n) = at {
            let l = size(&n.left);
            match i.cmp(&l) {
                std::cmp::Ordering::Less => at = &n.left,
                std::cmp::Ordering::Equal => return Some(&n.value),
                std::cmp::Ordering::Greater => {
                    i -= l + 1;
                    at = &n.right;
                }
            }
        }
        None
    }

    /// The ranks of the values starting with `prefix`: `lo..hi`. (A value never holds the byte
    /// 0xFF, which UTF-8 and integer spellings never use, so `prefix` + 0xFF is above them all.)
    pub(crate) fn prefixed(&self, prefix: &[u8]) -> std::ops::Range<usize> {
        let lo = self.rank(prefix);
        let mut above = Vec::with_capacity(prefix.len() + 1);
        above.extend_from_slice(prefix);
        above.push(0xFF);
        lo..self.rank(&above)
    }

    /// How many values start with `prefix`.
    pub(crate) fn count_prefixed(&self, prefix: &[u8]) -> u64 {
        self.prefixed(prefix).len() as u64
    }

    /// Every value, in order.
    #[cfg(test)]
    pub(crate) fn values(&self) -> Vec<Vec<u8>> {
        (0..self.len())
            .filter_map(|i| self.nth(i))
            .map(<[u8]>::to_vec)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Against a `BTreeSet`, with every version kept (as a matcher's history keeps them).
    #[test]
    fn matches_an_ordered_set_and_keeps_every_version() {
        let mut x: u64 = 7;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut held = Held::default();
        let mut model = BTreeSet::new();
        let mut versions = vec![(held.clone(), model.clone())];
        for _ in 0..3000 {
            let len = (next() % 4) as usize;
            let v: Vec<u8> = (0..len)
                .map(|_| b"ab0\xc3"[(next() % 4) as usize])
                .collect();
            assert_eq!(held.insert(&v), model.insert(v.clone()));
            versions.push((held.clone(), model.clone()));
        }
        for (h, m) in versions.iter().step_by(97) {
            assert_eq!(h.len(), m.len());
            assert_eq!(h.values(), m.iter().cloned().collect::<Vec<_>>());
            for p in [&b""[..], b"a", b"ab", b"b0", b"0", b"\xc3"] {
                let want = m.iter().filter(|v| v.starts_with(p)).count() as u64;
                assert_eq!(h.count_prefixed(p), want, "{p:?}");
                assert_eq!(h.rank(p), m.iter().filter(|v| &v[..] < p).count());
            }
            for v in m.iter().take(20) {
                assert!(h.contains(v));
            }
        }
    }

    /// Sorted input (what an array of consecutive integers sends) keeps the tree shallow.
    #[test]
    fn sorted_values_keep_it_shallow() {
        fn height(l: &Link) -> usize {
            l.as_ref()
                .map_or(0, |n| 1 + height(&n.left).max(height(&n.right)))
        }
        let mut held = Held::default();
        for i in 0..100_000u32 {
            assert!(held.insert(format!("{i:08}").as_bytes()));
        }
        assert_eq!(held.len(), 100_000);
        assert!(height(&held.root) < 80, "{}", height(&held.root));
    }
}
