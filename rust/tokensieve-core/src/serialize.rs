//! Index files: a compiled, fully precomputed grammar written to disk and loaded back.
//!
//! The file holds everything needed to step and mask without recompiling: the complete DFA
//! (every state, including those passed through inside tokens), the accepting flags, and the
//! mask of every state reachable by whole tokens. Loading checks the magic, the format version,
//! every section's checksum, the vocabulary fingerprint and the internal consistency of the
//! tables, so a file for another vocabulary, a newer format, or a truncated or corrupted file is
//! an error, never a crash or a wrong mask. The format is documented in `docs/index-format.md`.
//!
//! Layout: `MAGIC` (8 bytes), format version (u32 LE), then sections, each
//! `tag (4 ASCII bytes) | payload length (u64 LE) | payload | CRC-32 of payload (u32 LE)`,
//! in the order `HEAD`, `CLSS`, `TRNS`, `ACPT`, `SMSK`, `MASK`, `END_`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::automata::dfa::{DfaParts, LazyDfa};
use crate::error::{Error, Result};
use crate::index::TokenIndex;
use crate::matcher::{ConstraintSource, Grammar, GrammarOptions};
use crate::vocab::Vocabulary;

/// First bytes of every index file.
pub const MAGIC: &[u8; 8] = b"TKSIEVE\x1a";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// The `HEAD` section: what the file is, as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IndexHeader {
    /// Version of tokensieve that wrote the file.
    pub tokensieve_version: String,
    /// Constraint kind: regex, json_schema, choice, json_object.
    pub constraint_kind: String,
    /// The constraint text (pattern or canonical JSON).
    pub constraint: String,
    /// Language-changing options, canonical JSON.
    pub options: String,
    /// Hash of kind + constraint + options (hex), the file's cache key.
    pub source_hash: String,
    /// Fingerprint of the vocabulary the index was built for (hex).
    pub vocab_fingerprint: String,
    /// The vocabulary's size (logits width).
    pub vocab_size: usize,
    /// Number of DFA states.
    pub states: usize,
    /// Number of byte classes.
    pub classes: usize,
    /// States that have a mask.
    pub masked_states: usize,
    /// Distinct masks.
    pub distinct_masks: usize,
    /// Words per mask.
    pub mask_words: usize,
}

fn corrupt(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("invalid index file: {}", msg.into()))
}

fn section(out: &mut Vec<u8>, tag: &[u8; 4], payload: &[u8]) {
    out.extend_from_slice(tag);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
}

fn put_u32s(out: &mut Vec<u8>, xs: impl IntoIterator<Item = u32>) {
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Serialize a grammar, precomputing its full index first if needed.
pub fn save(grammar: &Grammar) -> Result<Vec<u8>> {
    if grammar.has_unique_arrays() {
        return Err(Error::InvalidArgument(
            "a grammar whose schema has uniqueItems over strings or integers cannot be saved as \
             an index file (the values an array holds are checked beside the automaton, which \
             the file does not carry); compile the schema where it is used"
                .into(),
        ));
    }
    if grammar.index().atoms().is_some() {
        return Err(Error::InvalidArgument(
            "a grammar that names special tokens (token atoms) cannot be saved as an index file \
             yet; compile it where it is used"
                .into(),
        ));
    }
    if !grammar.is_precomputed() {
        grammar.precompute()?;
    }
    let dfa = grammar.dfa().export().ok_or_else(|| {
        Error::InvalidArgument("the automaton is not complete; precompute() first".into())
    })?;
    let (by_state, masks) = grammar.index().export();
    let vocab = grammar.vocab();
    let n = dfa.accepting.len();
    let src = grammar.source();
    let header = IndexHeader {
        tokensieve_version: env!("CARGO_PKG_VERSION").into(),
        constraint_kind: src.kind.clone(),
        constraint: src.text.clone(),
        options: src.options.clone(),
        source_hash: format!("{:016x}", src.hash()),
        vocab_fingerprint: format!("{:016x}", vocab.fingerprint()),
        vocab_size: vocab.vocab_size(),
        states: n,
        classes: dfa.stride,
        masked_states: by_state.len(),
        distinct_masks: masks.len(),
        mask_words: vocab.mask_words(),
    };
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    let head = serde_json::to_vec(&header).expect("header serializes");
    section(&mut out, b"HEAD", &head);
    section(&mut out, b"CLSS", &dfa.classes);
    let mut trns = Vec::with_capacity(8 + dfa.trans.len() * 4);
    put_u32s(&mut trns, [n as u32, dfa.stride as u32, dfa.start]);
    put_u32s(&mut trns, dfa.trans.iter().copied());
    section(&mut out, b"TRNS", &trns);
    let acpt: Vec<u8> = dfa.accepting.iter().map(|&a| a as u8).collect();
    section(&mut out, b"ACPT", &acpt);
    let mut smsk = Vec::new();
    let mut per_state = vec![u32::MAX; n];
    for (s, m) in by_state {
        per_state[s as usize] = m;
    }
    put_u32s(&mut smsk, per_state);
    section(&mut out, b"SMSK", &smsk);
    // Each mask is stored as its difference from an all-zero or all-one base: a base byte, the
    // number of differing words, then (word index, word) pairs. Most masks are nearly empty or
    // nearly full, so this is far smaller than the dense words.
    let mut mask = Vec::new();
    put_u32s(&mut mask, [masks.len() as u32, vocab.mask_words() as u32]);
    for m in &masks {
        let zeros = m.iter().filter(|&&w| w != 0).count();
        let ones = m.iter().filter(|&&w| w != u32::MAX).count();
        let (base, diff) = if zeros <= ones {
            (0u32, zeros)
        } else {
            (u32::MAX, ones)
        };
        mask.push((base != 0) as u8);
        put_u32s(&mut mask, [diff as u32]);
        for (i, &w) in m.iter().enumerate() {
            if w != base {
                put_u32s(&mut mask, [i as u32, w]);
            }
        }
    }
    section(&mut out, b"MASK", &mask);
    section(&mut out, b"END_", &[]);
    Ok(out)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(e) => {
                let s = &self.buf[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => Err(corrupt("the file is truncated")),
        }
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn section(&mut self, want: &[u8; 4]) -> Result<&'a [u8]> {
        let tag = self.take(4)?;
        if tag != want {
            return Err(corrupt(format!(
                "expected section {:?}, found {:?}",
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(tag)
            )));
        }
        let len = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        let len = usize::try_from(len).map_err(|_| corrupt("section length overflows"))?;
        let payload = self.take(len)?;
        let crc = self.u32()?;
        if crc != crc32fast::hash(payload) {
            return Err(corrupt(format!(
                "section {:?} fails its checksum (the file is corrupted)",
                String::from_utf8_lossy(want)
            )));
        }
        Ok(payload)
    }

    fn done(&self) -> bool {
        self.pos == self.buf.len()
    }
}

/// Length of the prefix [`check_prefix`] reads: the magic bytes and the format version.
pub const PREFIX_LEN: usize = 12;

/// Check the first bytes of an index file (at least [`PREFIX_LEN`] of them, or the whole file
/// when it is shorter): the magic bytes and a format version this build reads. Returns the
/// version. A reader of files checks this before reading the rest.
pub fn check_prefix(bytes: &[u8]) -> Result<u32> {
    let mut r = Reader { buf: bytes, pos: 0 };
    if r.take(8).map(|m| m != MAGIC).unwrap_or(true) {
        return Err(corrupt("not a tokensieve index file (bad magic bytes)"));
    }
    let version = r.u32()?;
    if version > FORMAT_VERSION {
        return Err(Error::InvalidArgument(format!(
            "index file format version {version} is newer than this tokensieve supports \
             ({FORMAT_VERSION}); upgrade tokensieve or recompile the index"
        )));
    }
    if version == 0 {
        return Err(corrupt("format version 0 does not exist"));
    }
    Ok(version)
}

/// Read only the header of an index file (for `tokensieve inspect`): the bytes up to the end of
/// the `HEAD` section are enough.
pub fn read_header(bytes: &[u8]) -> Result<(u32, IndexHeader)> {
    let version = check_prefix(bytes)?;
    let mut r = Reader {
        buf: bytes,
        pos: PREFIX_LEN,
    };
    let head = r.section(b"HEAD")?;
    let header: IndexHeader =
        serde_json::from_slice(head).map_err(|e| corrupt(format!("bad header: {e}")))?;
    Ok((version, header))
}

/// Load an index file for `vocab`. Fails unless the file was built for exactly this vocabulary.
/// Its masks must fit the default mask cache budget ([`load_within`]).
pub fn load(bytes: &[u8], vocab: Arc<Vocabulary>) -> Result<Grammar> {
    load_within(bytes, vocab, GrammarOptions::default().mask_cache_bytes)
}

/// [`load`] with the masks' memory bounded by `mask_cache_bytes` (the budget of
/// [`Grammar::precompute`], which bounded them when the file was written): a file whose header
/// declares more distinct masks than fit is refused with [`Error::Budget`] before any is
/// decoded (a mask of a few bytes in the file takes `mask_words × 4` bytes in memory).
pub fn load_within(
    bytes: &[u8],
    vocab: Arc<Vocabulary>,
    mask_cache_bytes: usize,
) -> Result<Grammar> {
    let (_, header) = read_header(bytes)?;
    let fp = format!("{:016x}", vocab.fingerprint());
    if header.vocab_fingerprint != fp || header.vocab_size != vocab.vocab_size() {
        return Err(Error::InvalidArgument(format!(
            "this index was compiled for another vocabulary (file: fingerprint {}, vocab_size \
             {}; given: fingerprint {fp}, vocab_size {}); recompile it for this tokenizer",
            header.vocab_fingerprint,
            header.vocab_size,
            vocab.vocab_size()
        )));
    }
    let mask_bytes = header
        .distinct_masks
        .checked_mul(vocab.mask_words())
        .and_then(|w| w.checked_mul(4));
    if mask_bytes.is_none_or(|b| b > mask_cache_bytes) {
        return Err(Error::Budget(format!(
            "the index holds {} distinct masks of {} bytes, more than the mask cache budget \
             ({mask_cache_bytes} bytes); load it with a larger mask_cache_bytes",
            header.distinct_masks,
            vocab.mask_words() * 4
        )));
    }
    let mut r = Reader { buf: bytes, pos: 0 };
    r.take(PREFIX_LEN)?;
    r.section(b"HEAD")?;
    let clss = r.section(b"CLSS")?;
    let classes: [u8; 256] = clss
        .try_into()
        .map_err(|_| corrupt("CLSS must be 256 bytes"))?;
    let trns = r.section(b"TRNS")?;
    let mut t = Reader { buf: trns, pos: 0 };
    let n = t.u32()? as usize;
    let stride = t.u32()? as usize;
    let start = t.u32()?;
    if n != header.states || stride != header.classes {
        return Err(corrupt("TRNS dimensions disagree with the header"));
    }
    let count = n
        .checked_mul(stride)
        .ok_or_else(|| corrupt("TRNS too large"))?;
    if count.checked_mul(4).and_then(|b| b.checked_add(12)) != Some(trns.len()) {
        return Err(corrupt("TRNS length does not match its dimensions"));
    }
    let trans: Vec<u32> = (0..count).map(|_| t.u32()).collect::<Result<_>>()?;
    let acpt = r.section(b"ACPT")?;
    if acpt.len() != n || acpt.iter().any(|&a| a > 1) {
        return Err(corrupt("ACPT must hold one 0/1 byte per state"));
    }
    let accepting: Vec<bool> = acpt.iter().map(|&a| a == 1).collect();
    let dfa = LazyDfa::from_parts(
        DfaParts {
            classes,
            stride,
            trans,
            accepting,
            start,
        },
        header.constraint.clone(),
    )
    .map_err(|e| corrupt(e.to_string()))?;
    let smsk = r.section(b"SMSK")?;
    if n.checked_mul(4) != Some(smsk.len()) {
        return Err(corrupt("SMSK must hold one u32 per state"));
    }
    let mut s = Reader { buf: smsk, pos: 0 };
    let per_state: Vec<u32> = (0..n).map(|_| s.u32()).collect::<Result<_>>()?;
    let mask_sec = r.section(b"MASK")?;
    let mut m = Reader {
        buf: mask_sec,
        pos: 0,
    };
    let num_masks = m.u32()? as usize;
    let words = m.u32()? as usize;
    if words != vocab.mask_words() || num_masks != header.distinct_masks {
        return Err(corrupt(
            "MASK dimensions disagree with the header or vocabulary",
        ));
    }
    // Bits no mask may ever set: ids at or past vocab_size, and special ids other than EOS.
    let mut forbidden = vec![0u32; words];
    for id in vocab.vocab_size()..words * 32 {
        forbidden[id >> 5] |= 1 << (id & 31);
    }
    for &sp in vocab.special_ids() {
        if !vocab.is_eos(sp) {
            forbidden[(sp >> 5) as usize] |= 1 << (sp & 31);
        }
    }
    let mut masks: Vec<Arc<[u32]>> = Vec::with_capacity(num_masks.min(1 << 20));
    for _ in 0..num_masks {
        let base = match m.u8()? {
            0 => 0u32,
            1 => u32::MAX,
            _ => return Err(corrupt("bad mask base")),
        };
        let diff = m.u32()? as usize;
        if diff > words {
            return Err(corrupt("mask has more entries than words"));
        }
        let mut w = vec![base; words];
        for _ in 0..diff {
            let i = m.u32()? as usize;
            let v = m.u32()?;
            if i >= words {
                return Err(corrupt("mask word index out of range"));
            }
            w[i] = v;
        }
        if w.iter().zip(&forbidden).any(|(a, f)| a & f != 0) {
            return Err(corrupt(
                "a mask allows a special, padding or out-of-range token",
            ));
        }
        masks.push(w.into());
    }
    if !m.done() {
        return Err(corrupt("trailing bytes in MASK"));
    }
    let mut by_state = Vec::new();
    for (st, &id) in per_state.iter().enumerate() {
        if id != u32::MAX {
            if id as usize >= masks.len() {
                return Err(corrupt("a state refers to a mask that does not exist"));
            }
            by_state.push((st as u32, id));
        }
    }
    if by_state.len() != header.masked_states {
        return Err(corrupt("SMSK disagrees with the header"));
    }
    let end = r.section(b"END_")?;
    if !end.is_empty() || !r.done() {
        return Err(corrupt("trailing bytes after END_"));
    }
    let index = TokenIndex::from_parts(by_state, masks, mask_cache_bytes);
    let source = ConstraintSource {
        kind: header.constraint_kind,
        text: header.constraint,
        options: header.options,
    };
    Ok(Grammar::from_loaded(vocab, dfa, index, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Arc<Vocabulary>, Grammar) {
        let toks: Vec<Vec<u8>> = ["a", "b", "ab", "1", "12", "-", "<ctl>", "</s>"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let v = Arc::new(Vocabulary::new(toks, vec![7], vec![6], Some(70)).unwrap());
        let g =
            Grammar::from_regex("(ab|a)+-?[12]*", v.clone(), &GrammarOptions::default()).unwrap();
        (v, g)
    }

    #[test]
    fn round_trip_gives_identical_masks() {
        let (v, g) = setup();
        let bytes = save(&g).unwrap();
        let h = read_header(&bytes).unwrap().1;
        assert_eq!(h.constraint, "(ab|a)+-?[12]*");
        let loaded = Arc::new(load(&bytes, v.clone()).unwrap());
        let g = Arc::new(g);
        for seq in [vec![], vec![0], vec![2, 5], vec![0, 0, 3, 4], vec![2, 4, 3]] {
            let (mut a, mut b) = (g.matcher(), loaded.matcher());
            assert_eq!(a.accept_tokens(&seq).unwrap(), seq.len());
            assert_eq!(b.accept_tokens(&seq).unwrap(), seq.len());
            let (mut x, mut y) = (vec![0u32; 3], vec![0u32; 3]);
            a.fill_next_token_bitmask(&mut x).unwrap();
            b.fill_next_token_bitmask(&mut y).unwrap();
            assert_eq!(x, y);
            assert_eq!(a.is_accepting(), b.is_accepting());
        }
    }

    #[test]
    fn masks_are_bounded_by_the_budget_before_they_are_decoded() {
        let (v, g) = setup();
        let bytes = save(&g).unwrap();
        let h = read_header(&bytes).unwrap().1;
        let need = h.distinct_masks * v.mask_words() * 4;
        assert!(load_within(&bytes, v.clone(), need).is_ok());
        let e = load_within(&bytes, v.clone(), need - 1).unwrap_err();
        assert!(matches!(e, Error::Budget(_)), "{e}");
        // a header declaring more masks than memory can hold is refused, not allocated
        let mut forged = h.clone();
        forged.distinct_masks = usize::MAX / 2;
        let mut out = bytes[..PREFIX_LEN].to_vec();
        section(&mut out, b"HEAD", &serde_json::to_vec(&forged).unwrap());
        let e = load(&out, v).unwrap_err();
        assert!(matches!(e, Error::Budget(_)), "{e}");
    }

    #[test]
    fn prefix_check_reads_only_the_first_bytes() {
        assert_eq!(
            check_prefix(&[MAGIC.as_slice(), &1u32.to_le_bytes()].concat()),
            Ok(1)
        );
        for bad in [&b""[..], b"TKSIEVE", b"garbage garbage"] {
            assert!(check_prefix(bad)
                .unwrap_err()
                .to_string()
                .contains("not a tokensieve index"));
        }
        let newer = [MAGIC.as_slice(), &99u32.to_le_bytes()].concat();
        assert!(check_prefix(&newer)
            .unwrap_err()
            .to_string()
            .contains("newer"));
    }

    #[test]
    fn other_vocabulary_newer_version_truncation_corruption() {
        let (_, g) = setup();
        let bytes = save(&g).unwrap();
        let other = Arc::new(
            Vocabulary::new(vec![b"a".to_vec(), b"</s>".to_vec()], vec![1], vec![], None).unwrap(),
        );
        assert!(load(&bytes, other)
            .unwrap_err()
            .to_string()
            .contains("another vocabulary"));
        let v = g.vocab().clone();
        let mut newer = bytes.clone();
        newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        assert!(load(&newer, v.clone())
            .unwrap_err()
            .to_string()
            .contains("newer"));
        for cut in [0, 5, 12, 40, bytes.len() / 2, bytes.len() - 1] {
            assert!(load(&bytes[..cut], v.clone()).is_err(), "cut at {cut}");
        }
        for i in (8..bytes.len()).step_by(7) {
            let mut c = bytes.clone();
            c[i] ^= 0x5a;
            assert!(load(&c, v.clone()).is_err(), "flip at {i}");
        }
    }
}
