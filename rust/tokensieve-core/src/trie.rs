//! The token trie: every token's byte string in one flat, depth-first array.
//!
//! Each node holds the byte that leads to it, its depth, the size of its subtree and the token
//! that ends there (if any). Walking the array in order visits the trie depth first; when the
//! automaton dies on a node's byte, the walk jumps over the node's whole subtree in one step.
//! The walk keeps one automaton state per depth, so the state of a node's parent is always the
//! last one written at `depth - 1` (preorder guarantees the parent was visited last at that
//! depth).
//!
//! Tokens whose byte strings are equal (an added token that spells the same bytes as a regular
//! one) share a node; the extra ids are kept beside the array and copied after a walk.
//!
//! ```
//! use tokensieve_core::trie::TokenTrie;
//! let toks: Vec<Vec<u8>> = vec![b"a".to_vec(), b"ab".to_vec(), b"b".to_vec()];
//! let trie = TokenTrie::new(toks.iter().enumerate().map(|(i, t)| (i as u32, t.as_slice())));
//! assert_eq!(trie.num_nodes(), 4); // root, a, ab, b
//! ```

/// Sentinel for a node that ends no token.
pub const NO_TOKEN: u32 = u32::MAX;

/// One trie node. 12 bytes; the hot walk reads `byte`, `depth`, `subtree` and `token`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Node {
    /// Token id that ends at this node, or [`NO_TOKEN`].
    pub token: u32,
    /// Number of nodes in this node's subtree, itself included.
    pub subtree: u32,
    /// The byte on the edge from the parent.
    pub byte: u8,
    /// Distance from the root (the root has depth 0).
    pub depth: u16,
}

/// A flat depth-first token trie.
#[derive(Debug, Clone)]
pub struct TokenTrie {
    nodes: Vec<Node>,
    /// (primary token, duplicate token) pairs: the duplicate spells the same bytes.
    duplicates: Vec<(u32, u32)>,
    max_depth: usize,
}

impl TokenTrie {
    /// Build a trie from `(token id, bytes)` pairs. Empty byte strings are skipped: a token that
    /// spells nothing could be emitted forever without changing the state, so it is never allowed.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a [u8])>) -> TokenTrie {
        let mut toks: Vec<(u32, &[u8])> =
            tokens.into_iter().filter(|(_, b)| !b.is_empty()).collect();
        toks.sort_unstable_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)));
        let mut nodes = vec![Node {
            token: NO_TOKEN,
            subtree: 1,
            byte: 0,
            depth: 0,
        }];
        let mut duplicates = Vec::new();
        // path[d] = index of the node at depth d on the current path (path[0] = root)
        let mut path: Vec<usize> = vec![0];
        let mut prev: &[u8] = &[];
        let mut max_depth = 0;
        for (id, bytes) in toks {
            let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            if common == bytes.len() && common == prev.len() {
                // Same bytes as the previous token.
                let primary = nodes[path[common]].token;
                duplicates.push((primary, id));
                continue;
            }
            // Close the nodes below the shared prefix.
            while path.len() > common + 1 {
                let idx = path.pop().unwrap();
                nodes[idx].subtree = (nodes.len() - idx) as u32;
            }
            for (d, &b) in bytes.iter().enumerate().skip(common) {
                nodes.push(Node {
                    token: NO_TOKEN,
                    subtree: 1,
                    byte: b,
                    depth: (d + 1) as u16,
                });
                path.push(nodes.len() - 1);
            }
            let last = *path.last().unwrap();
            nodes[last].token = id;
            max_depth = max_depth.max(bytes.len());
            prev = bytes;
        }
        while let Some(idx) = path.pop() {
            nodes[idx].subtree = (nodes.len() - idx) as u32;
        }
        TokenTrie {
            nodes,
            duplicates,
            max_depth,
        }
    }

    /// All nodes in depth-first order; index 0 is the root.
    #[inline]
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Number of nodes, the root included.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Length of the longest token in bytes.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Pairs (primary, duplicate) of tokens with equal bytes.
    pub fn duplicates(&self) -> &[(u32, u32)] {
        &self.duplicates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_and_subtree_sizes() {
        let toks: Vec<&[u8]> = vec![b"ab", b"a", b"b", b"abc", b"ac"];
        let trie = TokenTrie::new(toks.iter().enumerate().map(|(i, t)| (i as u32, *t)));
        let n = trie.nodes();
        // root, a, ab, abc, ac, b
        let bytes: Vec<u8> = n[1..].iter().map(|x| x.byte).collect();
        assert_eq!(
            bytes,
            b"abcc b"
                .iter()
                .copied()
                .filter(|&c| c != b' ')
                .collect::<Vec<_>>()
        );
        assert_eq!(n[0].subtree, 6);
        assert_eq!(n[1].subtree, 4);
        assert_eq!(n[1].token, 1);
        assert_eq!(n[2].token, 0);
        assert_eq!(n[3].token, 3);
        assert_eq!(n[4].token, 4);
        assert_eq!(n[5].token, 2);
        assert_eq!(trie.max_depth(), 3);
    }

    #[test]
    fn duplicates_and_empty_tokens() {
        let toks: Vec<&[u8]> = vec![b"x", b"", b"x"];
        let trie = TokenTrie::new(toks.iter().enumerate().map(|(i, t)| (i as u32, *t)));
        assert_eq!(trie.num_nodes(), 2);
        assert_eq!(trie.duplicates(), &[(0, 2)]);
    }
}
