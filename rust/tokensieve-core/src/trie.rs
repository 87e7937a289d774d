//! The token trie: every token's byte string in one flat, depth-first array.
//!
//! Each node holds the byte that leads to it, its depth, the size of its subtree and the token
//! that ends there (if any). Walking the array in order visits the trie depth first; when the
//! automaton dies on a node's byte, the walk jumps over the node's whole subtree in one step.
//! The walk keeps one automaton state per depth, so the state of a node's parent is always the
//! last one written at `depth - 1` (preorder guarantees the parent was visited last at that
//! depth).
//!
//! String-body tokens: most tokens of a vocabulary are plain text that may stand anywhere inside
//! a JSON string (complete UTF-8 without `"`, `\` or control characters). The trie keeps their
//! ids as ready masks, one per first byte (all non-ASCII first bytes share one), flags every
//! node whose subtree holds only such tokens, and lists them in preorder so that a subtree's are
//! one slice. A walk (see `crate::index`) takes the masks of the first bytes after which every
//! string character leads back to the same state, and then visits only the paths towards the
//! other tokens (a trie of its own); deeper down, the body tokens of a subtree below such a
//! state are taken from the list.
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

/// [`Node::flags`] bit: every token in the node's subtree is a string-body token. The seven
/// bits above it then hold the longest such token's length in characters (saturating at 127).
pub const ALL_STRING_BODY: u8 = 1;

/// Cumulative masks of string-body tokens by length are kept for lengths 1 to this.
pub const BODY_LEN_MASKS: usize = 16;

/// Tokens longer than this many bytes are kept in a trie of their own (see
/// [`TokenTrie::long_nodes`]): near a length bound only they are walked, the shorter ones being
/// allowed as from a representative for tokens of this many bytes.
pub const SHORT_TOKEN_BYTES: usize = 16;

/// Whether `bytes` is non-empty, complete UTF-8, and free of `"`, `\` and U+0000–U+001F: a
/// token that can stand anywhere inside a JSON string without an escape.
pub fn is_string_body(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && std::str::from_utf8(bytes).is_ok()
        && bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// One trie node. 12 bytes; the hot walk reads `byte`, `depth`, `subtree`, `token` and `flags`.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Node {
    /// Token id that ends at this node, or [`NO_TOKEN`].
    pub token: u32,
    /// Number of nodes in this node's subtree, itself included.
    pub subtree: u32,
    /// The byte on the edge from the parent.
    pub byte: u8,
    /// Bits such as [`ALL_STRING_BODY`].
    pub flags: u8,
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
    /// The number of tokens the trie holds (duplicates not included), and the words of a packed
    /// mask up to the highest of their ids.
    tokens: usize,
    mask_words: usize,
    /// Packed masks (bit `id % 32` of word `id / 32`) of the string-body tokens by first byte:
    /// slot `b` for an ASCII byte `b`, slot 128 for every non-ASCII first byte; empty when no
    /// such token exists. All masks have the same length.
    body_first: Vec<Vec<u32>>,
    /// The union of `body_first`.
    body_all: Vec<u32>,
    /// `body_upto[k - 1]`: the string-body tokens of at most `k` characters.
    body_upto: Vec<Vec<u32>>,
    /// A second, small trie of the other tokens: those that are not string-body tokens or
    /// longer than `BODY_LEN_MASKS` characters. Walked instead of the whole trie when the ready
    /// masks already hold every string-body token up to that length; being small and
    /// contiguous, it stays cheap even when the CPU caches are cold.
    rest: Vec<Node>,
    /// The tokens that are not string-body tokens (`rest` without the long body tokens).
    other: Vec<Node>,
    /// Every token longer than [`SHORT_TOKEN_BYTES`] bytes, as a trie of its own, and their ids
    /// (duplicates included).
    long: Vec<Node>,
    long_roots: Vec<(u8, u32)>,
    long_ids: Vec<u32>,
    /// `(first byte, node index)` of the root's children, in `nodes` and `rest`.
    roots: Vec<(u8, u32)>,
    rest_roots: Vec<(u8, u32)>,
    other_roots: Vec<(u8, u32)>,
    /// The string-body tokens in the preorder of their nodes, and per node the number of them
    /// ending before it (one more entry at the end): the body tokens of a subtree are one slice
    /// (see [`TokenTrie::body_ids_below`]).
    body_ids: Vec<u32>,
    body_before: Vec<u32>,
}

/// The root's children of a preorder trie, found by hopping over subtrees.
fn root_children(nodes: &[Node]) -> Vec<(u8, u32)> {
    let mut out = Vec::new();
    let mut i = 1usize;
    while i < nodes.len() {
        out.push((nodes[i].byte, i as u32));
        i += nodes[i].subtree as usize;
    }
    out
}

/// Ends the subtrees of the open nodes of `rest` at depth `depth` or deeper (a node of that
/// depth comes next): each one's size is what was written since it.
fn close(rest: &mut [Node], open: &mut Vec<usize>, depth: usize) {
    while let Some(&idx) = open.last() {
        if (rest[idx].depth as usize) < depth {
            break;
        }
        open.pop();
        rest[idx].subtree = (rest.len() - idx) as u32;
    }
}

/// Flat preorder nodes of sorted, distinct, non-empty byte strings (no flags).
fn flat_nodes(toks: &[(u32, &[u8])]) -> Vec<Node> {
    let mut nodes = vec![Node {
        token: NO_TOKEN,
        subtree: 1,
        byte: 0,
        flags: 0,
        depth: 0,
    }];
    let mut path: Vec<usize> = vec![0];
    let mut prev: &[u8] = &[];
    for &(id, bytes) in toks {
        let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
        while path.len() > common + 1 {
            let idx = path.pop().unwrap();
            nodes[idx].subtree = (nodes.len() - idx) as u32;
        }
        for (d, &b) in bytes.iter().enumerate().skip(common) {
            nodes.push(Node {
                token: NO_TOKEN,
                subtree: 1,
                byte: b,
                flags: 0,
                depth: (d + 1) as u16,
            });
            path.push(nodes.len() - 1);
        }
        nodes[*path.last().unwrap()].token = id;
        prev = bytes;
    }
    while let Some(idx) = path.pop() {
        nodes[idx].subtree = (nodes.len() - idx) as u32;
    }
    nodes
}

/// Slot of [`TokenTrie::body_first_mask`] for a token's first byte.
#[inline]
pub fn body_slot(first: u8) -> usize {
    (first as usize).min(128)
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
            flags: 0,
            depth: 0,
        }];
        let mut duplicates = Vec::new();
        // path[d] = index of the node at depth d on the current path (path[0] = root)
        let mut path: Vec<usize> = vec![0];
        let mut prev: &[u8] = &[];
        let mut max_depth = 0;
        let mut body: Vec<(u32, usize, usize)> = Vec::new();
        let mut rest: Vec<(u32, &[u8])> = Vec::new();
        let mut long_toks: Vec<(u32, &[u8])> = Vec::new();
        let mut long_ids: Vec<u32> = Vec::new();
        // Nodes that end a token which is not a string-body token.
        let mut other: Vec<bool> = vec![false];
        // Parent of each node, and the length in characters of the body token ending there.
        let mut parent: Vec<u32> = vec![0];
        let mut chars: Vec<u8> = vec![0];
        for (id, bytes) in toks {
            let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            if common == bytes.len() && common == prev.len() {
                // Same bytes as the previous token.
                let primary = nodes[path[common]].token;
                duplicates.push((primary, id));
                if bytes.len() > SHORT_TOKEN_BYTES {
                    long_ids.push(id);
                }
                continue;
            }
            // Close the nodes below the shared prefix.
            while path.len() > common + 1 {
                let idx = path.pop().unwrap();
                nodes[idx].subtree = (nodes.len() - idx) as u32;
            }
            for (d, &b) in bytes.iter().enumerate().skip(common) {
                parent.push(*path.last().unwrap() as u32);
                chars.push(0);
                nodes.push(Node {
                    token: NO_TOKEN,
                    subtree: 1,
                    byte: b,
                    flags: 0,
                    depth: (d + 1) as u16,
                });
                path.push(nodes.len() - 1);
            }
            let last = *path.last().unwrap();
            nodes[last].token = id;
            other.resize(nodes.len(), false);
            if is_string_body(bytes) {
                let n = std::str::from_utf8(bytes).map_or(0, |t| t.chars().count());
                chars[last] = n.min(127) as u8;
                body.push((id, body_slot(bytes[0]), n));
                if n > BODY_LEN_MASKS {
                    rest.push((id, bytes));
                }
            } else {
                other[last] = true;
                rest.push((id, bytes));
            }
            if bytes.len() > SHORT_TOKEN_BYTES {
                long_toks.push((id, bytes));
                long_ids.push(id);
            }
            max_depth = max_depth.max(bytes.len());
            prev = bytes;
        }
        while let Some(idx) = path.pop() {
            nodes[idx].subtree = (nodes.len() - idx) as u32;
        }
        // A subtree is all string body when no node in its preorder range ends another token.
        other.resize(nodes.len(), false);
        let mut before = Vec::with_capacity(nodes.len() + 1);
        before.push(0u32);
        for &o in &other {
            before.push(before.last().unwrap() + o as u32);
        }
        // Longest body token per subtree: children come after their parent in preorder.
        for i in (1..nodes.len()).rev() {
            let p = parent[i] as usize;
            chars[p] = chars[p].max(chars[i]);
        }
        for (i, n) in nodes.iter_mut().enumerate().skip(1) {
            if before[i + n.subtree as usize] == before[i] {
                n.flags |= ALL_STRING_BODY | chars[i] << 1;
            }
        }
        let words = body
            .iter()
            .map(|&(id, _, _)| id as usize / 32 + 1)
            .max()
            .unwrap_or(0);
        let mut body_first = vec![Vec::new(); 129];
        let mut body_all = vec![0u32; words];
        let mut body_upto = vec![vec![0u32; words]; BODY_LEN_MASKS];
        for &(id, _, n) in &body {
            for m in body_upto.iter_mut().skip(n.max(1) - 1) {
                m[id as usize / 32] |= 1 << (id & 31);
            }
        }
        for (id, slot, _) in body {
            let m: &mut Vec<u32> = &mut body_first[slot];
            if m.is_empty() {
                m.resize(words, 0);
            }
            m[id as usize / 32] |= 1 << (id & 31);
            body_all[id as usize / 32] |= 1 << (id & 31);
        }
        let mut body_ids = Vec::new();
        let mut body_before = Vec::with_capacity(nodes.len() + 1);
        for (n, &o) in nodes.iter().zip(&other) {
            body_before.push(body_ids.len() as u32);
            if n.token != NO_TOKEN && !o {
                body_ids.push(n.token);
            }
        }
        body_before.push(body_ids.len() as u32);
        let others: Vec<(u32, &[u8])> = rest
            .iter()
            .copied()
            .filter(|(_, b)| !is_string_body(b))
            .collect();
        let other = flat_nodes(&others);
        let rest = flat_nodes(&rest);
        let long = flat_nodes(&long_toks);
        let roots = root_children(&nodes);
        let rest_roots = root_children(&rest);
        let (tokens, mask_words) = nodes
            .iter()
            .filter(|n| n.token != NO_TOKEN)
            .fold((0, 0), |(k, w), n| {
                (k + 1, w.max(n.token as usize / 32 + 1))
            });
        TokenTrie {
            tokens,
            mask_words,
            roots,
            rest_roots,
            other_roots: root_children(&other),
            other,
            long_roots: root_children(&long),
            long,
            long_ids,
            nodes,
            duplicates,
            max_depth,
            body_first,
            body_all,
            body_upto,
            rest,
            body_ids,
            body_before,
        }
    }

    /// The string-body tokens in the subtree of node `i` of [`TokenTrie::nodes`] (duplicates
    /// not included).
    #[inline]
    pub fn body_ids_below(&self, i: usize) -> &[u32] {
        let end = i + self.nodes[i].subtree as usize;
        &self.body_ids[self.body_before[i] as usize..self.body_before[end] as usize]
    }

    /// All nodes in depth-first order; index 0 is the root.
    #[inline]
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The trie of the tokens outside the length-bounded string-body masks (see the field
    /// docs): preorder nodes, root first, without flags.
    #[inline]
    pub fn rest_nodes(&self) -> &[Node] {
        &self.rest
    }

    /// `(first byte, node index)` of the root's children in [`TokenTrie::nodes`].
    #[inline]
    pub fn roots(&self) -> &[(u8, u32)] {
        &self.roots
    }

    /// `(first byte, node index)` of the root's children in [`TokenTrie::rest_nodes`].
    #[inline]
    pub fn rest_roots(&self) -> &[(u8, u32)] {
        &self.rest_roots
    }

    /// The tokens that are not string-body tokens, as a trie of their own, and its roots:
    /// walked below a closed state, where every string-body token is set already.
    #[inline]
    pub fn other_nodes(&self) -> (&[Node], &[(u8, u32)]) {
        (&self.other, &self.other_roots)
    }

    /// Every token longer than [`SHORT_TOKEN_BYTES`] bytes, as a trie of its own, and its roots.
    #[inline]
    pub fn long_nodes(&self) -> (&[Node], &[(u8, u32)]) {
        (&self.long, &self.long_roots)
    }

    /// The ids of the tokens longer than [`SHORT_TOKEN_BYTES`] bytes, duplicates included.
    #[inline]
    pub fn long_ids(&self) -> &[u32] {
        &self.long_ids
    }

    /// Number of nodes, the root included.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Length of the longest token in bytes.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Packed mask of the string-body tokens whose first byte has slot `slot` (see
    /// [`body_slot`]); empty when there are none. Duplicates are not included, and the mask may
    /// be shorter than a vocabulary mask when the highest ids are not string-body tokens.
    pub fn body_first_mask(&self, slot: usize) -> &[u32] {
        &self.body_first[slot]
    }

    /// Packed mask of the string-body tokens of at most `k` characters, for `k` in
    /// `1..=BODY_LEN_MASKS` (same conventions as [`TokenTrie::body_first_mask`]).
    pub fn body_upto_mask(&self, k: usize) -> &[u32] {
        &self.body_upto[k - 1]
    }

    /// Packed mask of every string-body token (same conventions as
    /// [`TokenTrie::body_first_mask`]).
    pub fn body_mask(&self) -> &[u32] {
        &self.body_all
    }

    /// Pairs (primary, duplicate) of tokens with equal bytes.
    pub fn duplicates(&self) -> &[(u32, u32)] {
        &self.duplicates
    }

    /// In a packed mask (bit `id % 32` of word `id / 32`) decided for the tokens the trie
    /// keeps, give each duplicate the bit of the token whose bytes it repeats.
    pub fn copy_duplicate_bits(&self, out: &mut [u32]) {
        for &(primary, dup) in &self.duplicates {
            let on = out[(primary >> 5) as usize] >> (primary & 31) & 1;
            let w = &mut out[(dup >> 5) as usize];
            *w = (*w & !(1 << (dup & 31))) | (on << (dup & 31));
        }
    }
}

/// What [`TokenTrie::text_class`] knows after a token's first bytes: whether a byte set apart
/// or bytes that no UTF-8 text begins with were among them, and how many continuation bytes
/// (in which range for the next one) the last character still needs.
#[derive(Clone, Copy)]
struct Utf8Text {
    bad: bool,
    need: u8,
    lo: u8,
    hi: u8,
}

impl Utf8Text {
    const START: Utf8Text = Utf8Text {
        bad: false,
        need: 0,
        lo: 0x80,
        hi: 0xBF,
    };

    /// The state after one more byte (the ranges of `std::str::from_utf8`: no overlong forms,
    /// no surrogates, nothing above U+10FFFF).
    fn then(self, b: u8, except: u128) -> Utf8Text {
        let bad = Utf8Text { bad: true, ..self };
        if self.bad {
            return self;
        }
        if self.need > 0 {
            if b < self.lo || b > self.hi {
                return bad;
            }
            return Utf8Text {
                bad: false,
                need: self.need - 1,
                lo: 0x80,
                hi: 0xBF,
            };
        }
        let (need, lo, hi) = match b {
            0x00..=0x7F => {
                if except >> b & 1 == 1 {
                    return bad;
                }
                (0, 0x80, 0xBF)
            }
            0xC2..=0xDF => (1, 0x80, 0xBF),
            0xE0 => (2, 0xA0, 0xBF),
            0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
            0xED => (2, 0x80, 0x9F),
            0xF0 => (3, 0x90, 0xBF),
            0xF1..=0xF3 => (3, 0x80, 0xBF),
            0xF4 => (3, 0x80, 0x8F),
            _ => return bad,
        };
        Utf8Text {
            bad: false,
            need,
            lo,
            hi,
        }
    }
}

/// The tokens of plain text that holds none of a few ASCII bytes (the first bytes of the
/// strings that end or interrupt a free text: a raw value's closing tag, the triggers of tool
/// calls), for masks of states that every other character leads back to themselves (see
/// `crate::index`): `mask` holds those tokens, `rest` is a trie of all the others, walked as
/// usual. A class that would set apart more than a quarter of the tokens is kept empty
/// ([`TextClass::useful`] false: such states are walked as usual), so that a class never holds
/// much more than its mask.
#[derive(Debug)]
pub struct TextClass {
    /// The ASCII bytes set apart (bit `b` for byte `b`).
    pub except: u128,
    /// Whether the class holds its tokens (at most a quarter of the tokens set apart).
    pub useful: bool,
    /// Packed mask of the tokens that are complete UTF-8 with no byte in `except`; duplicates
    /// not included (as in [`TokenTrie::body_mask`]).
    pub mask: Vec<u32>,
    /// The other tokens as a trie of their own (preorder nodes, root first, without flags),
    /// and its roots.
    pub rest: Vec<Node>,
    pub rest_roots: Vec<(u8, u32)>,
}

impl TextClass {
    /// A class that sets apart too many tokens to be worth holding (see [`TextClass::useful`]).
    fn not_useful(except: u128) -> TextClass {
        TextClass {
            except,
            useful: false,
            mask: Vec::new(),
            rest: Vec::new(),
            rest_roots: Vec::new(),
        }
    }

    /// A class holding `mask` and the trie `rest` of the tokens set apart.
    fn holding(except: u128, mask: Vec<u32>, rest: Vec<Node>) -> TextClass {
        TextClass {
            except,
            useful: true,
            mask,
            rest_roots: root_children(&rest),
            rest,
        }
    }
}

impl TokenTrie {
    /// Clear in `mask` the bit of every token below a first byte `b` for which `first(b)`
    /// holds (primaries only: duplicates are not in the trie; words past `mask` are skipped).
    pub fn clear_below_first(&self, first: impl Fn(u8) -> bool, mask: &mut [u32]) {
        for &(b, at) in &self.roots {
            if !first(b) {
                continue;
            }
            let at = at as usize;
            for n in &self.nodes[at..at + self.nodes[at].subtree as usize] {
                if n.token != NO_TOKEN {
                    if let Some(w) = mask.get_mut((n.token >> 5) as usize) {
                        *w &= !(1 << (n.token & 31));
                    }
                }
            }
        }
    }

    /// The [`TextClass`] of the ASCII bytes in `except` (bit `b` for byte `b`).
    ///
    /// One preorder pass decides each token from its parent's state (a byte set apart seen,
    /// bytes no UTF-8 text holds, the last character still open), so a token costs O(1), not
    /// its length. A subtree below a byte set apart (or bytes no text holds) is set apart whole
    /// and copied to `rest` as it is; the other nodes go to `rest` when a token set apart ends
    /// at or below them. It stops as soon as more than a quarter of the tokens are set apart.
    pub fn text_class(&self, except: u128) -> TextClass {
        let nodes = &self.nodes;
        let mut mask = vec![0u32; self.mask_words];
        let mut rest = vec![Node {
            token: NO_TOKEN,
            subtree: 1,
            byte: 0,
            flags: 0,
            depth: 0,
        }];
        // per depth on the current path: the state after its bytes, the node, and whether the
        // node is in `rest` already (the root is)
        let mut state: Vec<Utf8Text> = vec![Utf8Text::START; self.max_depth + 1];
        let mut path: Vec<usize> = vec![0; self.max_depth + 1];
        let mut written: Vec<bool> = vec![true; self.max_depth + 1];
        // the nodes of `rest` whose subtree is still being written
        let mut open: Vec<usize> = vec![0];
        let mut others = 0usize;
        let mut i = 1;
        while i < nodes.len() {
            let n = nodes[i];
            let d = n.depth as usize;
            let s = state[d - 1].then(n.byte, except);
            if !s.bad && (n.token == NO_TOKEN || s.need == 0) {
                if n.token != NO_TOKEN {
                    mask[n.token as usize / 32] |= 1 << (n.token & 31);
                }
                state[d] = s;
                path[d] = i;
                written[d] = false;
                i += 1;
                continue;
            }
            // `rest` gets this node, after the ones above it not written yet (their tokens, if
            // any, are plain: one set apart would have written its node)
            for k in 1..d {
                if !written[k] {
                    close(&mut rest, &mut open, k);
                    rest.push(Node {
                        token: NO_TOKEN,
                        flags: 0,
                        subtree: 1,
                        ..nodes[path[k]]
                    });
                    open.push(rest.len() - 1);
                    written[k] = true;
                }
            }
            close(&mut rest, &mut open, d);
            if s.bad {
                // every token below is set apart: the subtree as it is
                let end = i + n.subtree as usize;
                for m in &nodes[i..end] {
                    others += usize::from(m.token != NO_TOKEN);
                    rest.push(Node { flags: 0, ..*m });
                }
                i = end;
            } else {
                // a token whose last character is not complete yet
                others += 1;
                rest.push(Node {
                    flags: 0,
                    subtree: 1,
                    ..n
                });
                open.push(rest.len() - 1);
                state[d] = s;
                path[d] = i;
                written[d] = true;
                i += 1;
            }
            if others * 4 > self.tokens {
                return TextClass::not_useful(except);
            }
        }
        close(&mut rest, &mut open, 0);
        TextClass::holding(except, mask, rest)
    }

    /// [`TokenTrie::text_class`] as first written (each token's bytes checked from its
    /// start): the oracle of the incremental one.
    #[cfg(test)]
    fn text_class_by_paths(&self, except: u128) -> TextClass {
        let words = self
            .nodes
            .iter()
            .filter(|n| n.token != NO_TOKEN)
            .map(|n| n.token as usize / 32 + 1)
            .max()
            .unwrap_or(0);
        let mut mask = vec![0u32; words];
        let mut path: Vec<u8> = vec![0; self.max_depth + 1];
        // the other tokens' bytes, one after the other, in preorder (that is, sorted)
        let mut bytes: Vec<u8> = Vec::new();
        let mut others: Vec<(u32, usize, usize)> = Vec::new();
        for n in &self.nodes[1..] {
            let d = n.depth as usize;
            path[d - 1] = n.byte;
            if n.token == NO_TOKEN {
                continue;
            }
            let t = &path[..d];
            let plain = t.iter().all(|&b| b >= 0x80 || except >> b & 1 == 0)
                && std::str::from_utf8(t).is_ok();
            if plain {
                mask[n.token as usize / 32] |= 1 << (n.token & 31);
            } else {
                others.push((n.token, bytes.len(), d));
                bytes.extend_from_slice(t);
            }
        }
        let plain: usize = mask.iter().map(|w| w.count_ones() as usize).sum();
        if others.len() * 4 > plain + others.len() {
            return TextClass::not_useful(except);
        }
        let others: Vec<(u32, &[u8])> = others
            .iter()
            .map(|&(id, at, len)| (id, &bytes[at..at + len]))
            .collect();
        TextClass::holding(except, mask, flat_nodes(&others))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text class as comparable fields: useful, mask, rest's nodes, rest's roots.
    type ClassParts = (bool, Vec<u32>, Vec<(u32, u32, u8, u8, u16)>, Vec<(u8, u32)>);

    fn class_parts(c: &TextClass) -> ClassParts {
        (
            c.useful,
            c.mask.clone(),
            c.rest
                .iter()
                .map(|n| (n.token, n.subtree, n.byte, n.flags, n.depth))
                .collect(),
            c.rest_roots.clone(),
        )
    }

    proptest::proptest! {
        /// The incremental text class equals the one that checks each token's bytes whole:
        /// tokens of ASCII, UTF-8 of every length, its edge cases (overlong leads, surrogates,
        /// the top code point, stray continuation bytes) and duplicates, under sets of bytes
        /// set apart that hold none, some or most of the tokens' bytes.
        #[test]
        fn text_class_matches_the_whole_token_check(
            toks in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec![
                        b'a', b'b', b'{', b'<', b'"', b' ', 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                        0xBF, 0xC0, 0xC2, 0xC3, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xF0, 0xF3, 0xF4,
                        0xF5, 0xFF,
                    ]),
                    1..6,
                ),
                1..120,
            ),
            except_bits in proptest::sample::subsequence(vec![b'a', b'b', b'{', b'<', b'"', b' ', 0x7F], 0..=7),
        ) {
            // beside them every string of `b`s and `c`s up to 8 long, so that the tokens set
            // apart stay few enough for the class to hold them (unless `b` is set apart)
            let plain: Vec<Vec<u8>> = (1..=8)
                .flat_map(|len| (0..1u32 << len).map(move |bits| {
                    (0..len).map(|k| if bits >> k & 1 == 1 { b'b' } else { b'c' }).collect()
                }))
                .collect();
            let trie = TokenTrie::new(
                toks.iter().chain(&plain).enumerate().map(|(i, t)| (i as u32, t.as_slice())),
            );
            let except = except_bits.iter().fold(0u128, |e, &b| e | 1u128 << b);
            proptest::prop_assert_eq!(
                class_parts(&trie.text_class(except)),
                class_parts(&trie.text_class_by_paths(except))
            );
        }
    }

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
    fn string_body_flags() {
        let toks: Vec<&[u8]> = vec![b"ab", b"a\"", b"c", b"\xc3", b"\xc3\xa9", b"d\n"];
        let trie = TokenTrie::new(toks.iter().enumerate().map(|(i, t)| (i as u32, *t)));
        let body: Vec<u32> = (0..6)
            .filter(|&t| trie.body_mask()[0] >> t & 1 == 1)
            .collect();
        assert_eq!(body, vec![0, 2, 4]);
        assert_eq!(trie.body_first_mask(b'a' as usize), &[1]);
        assert_eq!(trie.body_first_mask(b'c' as usize), &[4]);
        assert_eq!(trie.body_first_mask(128), &[16]);
        assert!(trie.body_first_mask(b'd' as usize).is_empty());
        // "ab" and "c" have at most 2 characters, "é" 1
        assert_eq!(trie.body_upto_mask(1), &[4 | 16]);
        assert_eq!(trie.body_upto_mask(2), &[1 | 4 | 16]);
        // the subtree of "a" holds "a\"" (not body); that of "c" only "c", one character
        let c = trie.nodes().iter().find(|n| n.byte == b'c').unwrap();
        assert_eq!(c.flags, ALL_STRING_BODY | 1 << 1);
        // the other trie: "a\"", "\xc3", "d\n" (sorted by bytes)
        let rest: Vec<u32> = trie
            .rest_nodes()
            .iter()
            .filter(|n| n.token != NO_TOKEN)
            .map(|n| n.token)
            .collect();
        assert_eq!(rest, vec![1, 5, 3]);
        for n in &trie.nodes()[1..] {
            let first = trie
                .nodes()
                .iter()
                .position(|m| std::ptr::eq(m, n))
                .unwrap();
            let range = &trie.nodes()[first..first + n.subtree as usize];
            let all = range
                .iter()
                .all(|m| m.token == NO_TOKEN || body.contains(&m.token));
            assert_eq!(n.flags & ALL_STRING_BODY != 0, all);
        }
    }

    #[test]
    fn duplicates_and_empty_tokens() {
        let toks: Vec<&[u8]> = vec![b"x", b"", b"x"];
        let trie = TokenTrie::new(toks.iter().enumerate().map(|(i, t)| (i as u32, *t)));
        assert_eq!(trie.num_nodes(), 2);
        assert_eq!(trie.duplicates(), &[(0, 2)]);
    }
}
