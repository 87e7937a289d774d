//! The vocabulary: token id → the bytes it emits, which ids a grammar may never produce, and EOS.
//!
//! A [`Vocabulary`] covers the model's whole logits width (`vocab_size`). Ids past the
//! tokenizer's tokens are padding; special and control tokens (`<|im_start|>`, `<s>`, `</s>`,
//! `<unk>`, ...) never spell text; EOS ids are allowed only where the grammar accepts. Everything
//! else is a regular token whose bytes are decoded from the tokenizer's spelling:
//!
//! * byte-level BPE (GPT-2 alphabet): each character stands for one byte (`Ġ` = space);
//! * SentencePiece: `▁` is a space and `<0xNN>` is the raw byte `NN` (byte fallback);
//! * raw: the token string's own UTF-8 bytes (or bytes given directly).
//!
//! The kind is read from the tokenizer's decoder and cross-checked against the tokens themselves,
//! so a mislabeled tokenizer fails loudly instead of producing wrong masks.
//!
//! ```
//! use tokensieve_core::vocab::Vocabulary;
//! let v = Vocabulary::new(vec![b"a".to_vec(), b"b".to_vec(), b"</s>".to_vec()], vec![2], vec![], None).unwrap();
//! assert_eq!(v.vocab_size(), 3);
//! assert!(v.is_eos(2));
//! assert_eq!(v.token_bytes(0), Some(&b"a"[..]));
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::trie::{TextClass, TokenTrie};

/// How token strings map to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabKind {
    /// GPT-2 style byte-level BPE.
    ByteLevel,
    /// SentencePiece with `▁` for space and `<0xNN>` byte fallback.
    SentencePiece,
    /// Token strings (or given bytes) are the output bytes.
    Raw,
}

impl VocabKind {
    /// Lower-case name used in Python and messages.
    pub fn name(self) -> &'static str {
        match self {
            VocabKind::ByteLevel => "byte_level",
            VocabKind::SentencePiece => "sentencepiece",
            VocabKind::Raw => "raw",
        }
    }
}

/// A text class's mask without the tokens that begin with some bytes: `(except, first, mask)`.
type FirstMask = (u128, u128, Arc<[u32]>);

/// An immutable vocabulary, shared by every grammar compiled for it.
#[derive(Debug)]
pub struct Vocabulary {
    /// Concatenated bytes of all grammar-usable tokens; `offsets[i]..offsets[i+1]` is token `i`.
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    /// Tokens that a grammar may emit as text (regular, non-empty, below `vocab_size`).
    regular: Vec<bool>,
    eos: Vec<u32>,
    special: Vec<u32>,
    /// The text of each special token that has one (`<|im_start|>`), for grammars that name
    /// special tokens by text (token atoms, see `crate::atoms`); the lowest id per text.
    special_text: HashMap<Vec<u8>, u32>,
    /// Regular tokens holding the byte 0xFF (never in UTF-8 text), found on first use.
    with_ff: std::sync::OnceLock<Vec<u32>>,
    /// The text classes made so far (see [`Vocabulary::text_class`]), newest last.
    text_classes: std::sync::Mutex<Vec<Arc<TextClass>>>,
    /// Masks of text classes without the tokens that begin with some bytes:
    /// `(except, first bytes, mask)`, most recently used last, at most [`TEXT_CLASSES`].
    first_masks: std::sync::Mutex<Vec<FirstMask>>,
    vocab_size: usize,
    tokenizer_size: usize,
    kind: VocabKind,
    trie: TokenTrie,
    fingerprint: u64,
}

/// The GPT-2 byte-level alphabet: `BYTE_TO_CHAR[b]` is the character that spells byte `b`.
fn byte_to_char() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            let c = char::from_u32(256 + n).unwrap();
            n += 1;
            c
        };
    }
    out
}

fn char_to_byte_map() -> HashMap<char, u8> {
    byte_to_char()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

/// Decode a byte-level BPE token; `None` when a character is outside the alphabet.
fn decode_byte_level(s: &str, map: &HashMap<char, u8>) -> Option<Vec<u8>> {
    s.chars().map(|c| map.get(&c).copied()).collect()
}

fn decode_sentencepiece(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    if b.len() == 6 && s.starts_with("<0x") && s.ends_with('>') {
        if let Ok(v) = u8::from_str_radix(&s[3..5], 16) {
            return vec![v];
        }
    }
    s.replace('\u{2581}', " ").into_bytes()
}

/// Names that SentencePiece-style tokenizers use for control tokens (never text).
const CONTROL_NAMES: &[&str] = &["<s>", "</s>", "<unk>", "<pad>", "<mask>"];

/// EOS names tried, in order, when neither ids nor names were given.
const EOS_FALLBACK_NAMES: &[&str] = &[
    "</s>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<eos>",
    "<|end|>",
];

fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100000001b3);
    }
}

/// Text classes a vocabulary keeps (see [`Vocabulary::text_class`]); each holds a mask and a
/// trie of the tokens it sets apart, at most a quarter of them (for Llama 3, 50–150 KB for the
/// classes of tool calling's free text; about 3 ms to make one).
pub const TEXT_CLASSES: usize = 8;

/// Largest logits width (and number of token strings) a vocabulary may have: 2^24 ids, 64 times
/// the largest vocabularies in use. Larger sizes are refused before anything is allocated.
pub const MAX_VOCAB_SIZE: usize = 1 << 24;

/// Longest token that spells text: 65,535 bytes (the token trie keeps a node's depth in 16
/// bits). Real vocabularies' tokens have at most a few hundred bytes; a longer one is refused
/// when the vocabulary is built. Special, EOS and padding ids spell nothing and are not limited.
pub const MAX_TOKEN_BYTES: usize = u16::MAX as usize;

/// The error for a `vocab_size` outside `1..=MAX_VOCAB_SIZE`, given as the text of an integer
/// (the bindings report Python integers of any size with it).
pub fn vocab_size_error(value: &str) -> Error {
    if value == "0" || value.starts_with('-') {
        Error::Vocabulary(format!("vocab_size must be positive, got {value}"))
    } else {
        Error::Vocabulary(format!(
            "vocab_size {value} is larger than the supported {MAX_VOCAB_SIZE} (2^24) token ids"
        ))
    }
}

/// The error for a token id at or past [`MAX_VOCAB_SIZE`], raised before any table is sized by
/// it.
fn id_too_large(what: &str, id: u64) -> Error {
    Error::Vocabulary(format!(
        "{what} has id {id}, past the supported {MAX_VOCAB_SIZE} (2^24) token ids"
    ))
}

impl Vocabulary {
    /// Build from token byte strings indexed by id.
    ///
    /// `special` lists ids that never spell text (EOS ids are special too). `vocab_size` is the
    /// model's logits width: larger than `tokens.len()` pads with never-allowed ids; smaller drops
    /// special ids past it, and is an error if a regular token would be dropped.
    pub fn new(
        tokens: Vec<Vec<u8>>,
        eos: Vec<u32>,
        special: Vec<u32>,
        vocab_size: Option<usize>,
    ) -> Result<Vocabulary> {
        Self::build(tokens, eos, special, vocab_size, VocabKind::Raw)
    }

    fn build(
        mut tokens: Vec<Vec<u8>>,
        eos: Vec<u32>,
        special: Vec<u32>,
        vocab_size: Option<usize>,
        kind: VocabKind,
    ) -> Result<Vocabulary> {
        let tokenizer_size = tokens.len();
        let vocab_size = vocab_size.unwrap_or(tokenizer_size);
        if vocab_size == 0 || vocab_size > MAX_VOCAB_SIZE {
            return Err(vocab_size_error(&vocab_size.to_string()));
        }
        if tokenizer_size > MAX_VOCAB_SIZE {
            return Err(Error::Vocabulary(format!(
                "vocab_size {} is larger than the supported {MAX_VOCAB_SIZE} (2^24) token ids",
                vocab_size.max(tokenizer_size)
            )));
        }
        if eos.is_empty() {
            return Err(Error::Vocabulary(
                "no EOS token id: pass eos_token_ids (a grammar must be able to end)".into(),
            ));
        }
        let mut is_special = vec![false; tokenizer_size.max(vocab_size)];
        for &s in special.iter().chain(eos.iter()) {
            if (s as usize) < is_special.len() {
                is_special[s as usize] = true;
            }
        }
        if tokenizer_size > vocab_size {
            for id in vocab_size..tokenizer_size {
                if !is_special[id] && !tokens[id].is_empty() {
                    return Err(Error::Vocabulary(format!(
                        "token {id} ({:?}) is a regular token but vocab_size is {vocab_size}: the \
                         model cannot emit it. Pass the model's real vocab_size (the logits width)",
                        String::from_utf8_lossy(&tokens[id])
                    )));
                }
            }
            tokens.truncate(vocab_size);
        }
        for &e in &eos {
            if e as usize >= vocab_size {
                return Err(Error::Vocabulary(format!(
                    "EOS id {e} is outside the vocabulary (vocab_size {vocab_size})"
                )));
            }
        }
        let mut regular = vec![false; vocab_size];
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(vocab_size + 1);
        offsets.push(0u32);
        for id in 0..vocab_size {
            let tok = tokens.get(id).map(|t| t.as_slice()).unwrap_or(&[]);
            if !is_special[id] && !tok.is_empty() {
                if tok.len() > MAX_TOKEN_BYTES {
                    return Err(Error::Vocabulary(format!(
                        "token {id} is {} bytes long; tokens that spell text may have at most \
                         {MAX_TOKEN_BYTES} bytes",
                        tok.len()
                    )));
                }
                regular[id] = true;
                bytes.extend_from_slice(tok);
            }
            if bytes.len() >= u32::MAX as usize {
                return Err(Error::Vocabulary("vocabulary bytes exceed 4 GiB".into()));
            }
            offsets.push(bytes.len() as u32);
        }
        let mut eos = eos;
        eos.sort_unstable();
        eos.dedup();
        let mut special: Vec<u32> = special
            .into_iter()
            .filter(|&s| (s as usize) < vocab_size)
            .collect();
        special.extend(eos.iter().copied());
        special.sort_unstable();
        special.dedup();
        let mut special_text = HashMap::new();
        for &s in &special {
            if let Some(t) = tokens.get(s as usize).filter(|t| !t.is_empty()) {
                special_text.entry(t.clone()).or_insert(s);
            }
        }
        let trie = {
            let b = &bytes;
            let o = &offsets;
            TokenTrie::new(
                (0..vocab_size)
                    .filter(|&i| regular[i])
                    .map(|i| (i as u32, &b[o[i] as usize..o[i + 1] as usize])),
            )
        };
        let mut fp = 0xcbf29ce484222325u64;
        fnv1a(&mut fp, b"tokensieve-vocab-v1");
        fnv1a(&mut fp, &(vocab_size as u64).to_le_bytes());
        for id in 0..vocab_size {
            let t = &bytes[offsets[id] as usize..offsets[id + 1] as usize];
            fnv1a(&mut fp, &(t.len() as u32).to_le_bytes());
            fnv1a(&mut fp, t);
        }
        for &e in &eos {
            fnv1a(&mut fp, &e.to_le_bytes());
        }
        fnv1a(&mut fp, b"|");
        for &s in &special {
            fnv1a(&mut fp, &s.to_le_bytes());
        }
        Ok(Vocabulary {
            bytes,
            offsets,
            regular,
            eos,
            special,
            special_text,
            with_ff: std::sync::OnceLock::new(),
            text_classes: Default::default(),
            first_masks: Default::default(),
            vocab_size,
            tokenizer_size,
            kind,
            trie,
            fingerprint: fp,
        })
    }

    /// Build from a Hugging Face `tokenizer.json` document.
    ///
    /// `eos` ids win; otherwise `eos_names` (e.g. from `tokenizer_config.json`) are looked up;
    /// otherwise common EOS spellings are tried in order.
    pub fn from_tokenizer_json(
        json: &str,
        vocab_size: Option<usize>,
        eos: Option<Vec<u32>>,
        eos_names: &[String],
    ) -> Result<Vocabulary> {
        let doc: TokenizerDoc = serde_json::from_str(json)
            .map_err(|e| Error::Vocabulary(format!("tokenizer.json is not valid JSON: {e}")))?;
        let model = doc
            .model
            .ok_or_else(|| Error::Vocabulary("tokenizer.json has no \"model\"".into()))?;
        let mtype = model.kind.as_deref().unwrap_or("BPE");
        let mut strings: Vec<Option<String>> = Vec::new();
        // Every id is checked against the size limit before the table grows to it.
        let put = |strings: &mut Vec<Option<String>>, id: usize, s: String| {
            debug_assert!(id < MAX_VOCAB_SIZE);
            if strings.len() <= id {
                strings.resize(id + 1, None);
            }
            strings[id] = Some(s);
        };
        match (mtype, model.vocab) {
            ("BPE" | "WordLevel", Some(VocabDoc::Map(map))) => {
                for (s, id) in map {
                    let id = id.as_u64().ok_or_else(|| {
                        Error::Vocabulary(format!("token {s:?} has a non-integer id"))
                    })?;
                    if id >= MAX_VOCAB_SIZE as u64 {
                        return Err(id_too_large(&format!("token {s:?}"), id));
                    }
                    put(&mut strings, id as usize, s);
                }
            }
            ("Unigram", Some(VocabDoc::List(list))) => {
                if list.len() > MAX_VOCAB_SIZE {
                    return Err(Error::Vocabulary(format!(
                        "the tokenizer has {} tokens, more than the supported {MAX_VOCAB_SIZE} \
                         (2^24) token ids",
                        list.len()
                    )));
                }
                for (id, e) in list.iter().enumerate() {
                    let s = e.get(0).and_then(Value::as_str).ok_or_else(|| {
                        Error::Vocabulary(format!("unigram entry {id} has no token string"))
                    })?;
                    put(&mut strings, id, s.to_string());
                }
            }
            ("WordPiece", _) => {
                return Err(Error::Vocabulary(
                    "WordPiece tokenizers (BERT-style, '##' continuations) are not supported: \
                     their tokens do not map to fixed byte strings"
                        .into(),
                ))
            }
            (t, _) => {
                return Err(Error::Vocabulary(format!(
                    "unsupported tokenizer model type {t:?} or missing vocab"
                )))
            }
        }
        let mut special_ids: Vec<u32> = Vec::new();
        let mut added_text: Vec<(usize, String)> = Vec::new();
        if let Some(Value::Array(added)) = &doc.added_tokens {
            for a in added {
                let id = a
                    .get("id")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| Error::Vocabulary("an added token has no integer id".into()))?;
                let content = a
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if id >= MAX_VOCAB_SIZE as u64 {
                    return Err(id_too_large(&format!("added token {content:?}"), id));
                }
                let id = id as usize;
                let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
                put(&mut strings, id, content.clone());
                if special || CONTROL_NAMES.contains(&content.as_str()) {
                    special_ids.push(id as u32);
                } else {
                    added_text.push((id, content));
                }
            }
        }
        let kind = detect_kind(doc.decoder.as_ref(), doc.pre_tokenizer.as_ref());
        let decoded = decode_strings(&strings, kind, &added_text)?;
        if kind == VocabKind::SentencePiece {
            for (id, s) in strings.iter().enumerate() {
                if let Some(s) = s {
                    if CONTROL_NAMES.contains(&s.as_str()) {
                        special_ids.push(id as u32);
                    }
                }
            }
        }
        let eos_ids = match eos {
            Some(ids) if !ids.is_empty() => ids,
            _ => {
                let lookup = |name: &str| {
                    strings
                        .iter()
                        .position(|s| s.as_deref() == Some(name))
                        .map(|i| i as u32)
                };
                let mut ids: Vec<u32> = eos_names.iter().filter_map(|n| lookup(n)).collect();
                if ids.is_empty() && !eos_names.is_empty() {
                    return Err(Error::Vocabulary(format!(
                        "EOS token(s) {eos_names:?} are not in the tokenizer"
                    )));
                }
                if ids.is_empty() {
                    ids = EOS_FALLBACK_NAMES
                        .iter()
                        .find_map(|n| lookup(n))
                        .into_iter()
                        .collect();
                }
                if ids.is_empty() {
                    return Err(Error::Vocabulary(
                        "could not determine the EOS token: pass eos_token_ids".into(),
                    ));
                }
                ids
            }
        };
        // An EOS id past a smaller model vocab_size is dropped like other specials only if
        // another EOS remains.
        let eos_ids: Vec<u32> = match vocab_size {
            Some(v) if eos_ids.iter().any(|&e| (e as usize) < v) => {
                eos_ids.into_iter().filter(|&e| (e as usize) < v).collect()
            }
            _ => eos_ids,
        };
        Self::build(decoded, eos_ids, special_ids, vocab_size, kind)
    }

    /// Number of ids the model can emit (the logits width).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Number of ids the tokenizer defined (before padding or truncation to `vocab_size`).
    pub fn tokenizer_size(&self) -> usize {
        self.tokenizer_size
    }

    /// The decoding rule of the tokenizer.
    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// EOS ids, sorted.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    /// Special ids (EOS included), sorted.
    pub fn special_ids(&self) -> &[u32] {
        &self.special
    }

    /// Whether `id` is a special token (EOS included).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.binary_search(&id).is_ok()
    }

    /// The special token spelled `text` in the tokenizer (`<|im_start|>`), if any.
    pub fn special_id(&self, text: &[u8]) -> Option<u32> {
        self.special_text.get(text).copied()
    }

    /// The special tokens that have a text: (text, id).
    pub fn special_texts(&self) -> impl Iterator<Item = (&[u8], u32)> {
        self.special_text.iter().map(|(k, &v)| (k.as_slice(), v))
    }

    /// The regular tokens holding the byte 0xFF, which no UTF-8 text holds.
    pub fn tokens_with_ff(&self) -> &[u32] {
        self.with_ff.get_or_init(|| {
            (0..self.vocab_size as u32)
                .filter(|&t| self.token_bytes(t).is_some_and(|b| b.contains(&0xFF)))
                .collect()
        })
    }

    /// The [`TextClass`] of the ASCII bytes in `except` (bit `b` for byte `b`), made on first
    /// use and kept: at most [`TEXT_CLASSES`] per vocabulary (the least recently used goes).
    pub fn text_class(&self, except: u128) -> Arc<TextClass> {
        let mut kept = self
            .text_classes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = kept.iter().position(|c| c.except == except) {
            let c = kept.remove(i);
            kept.push(c.clone());
            return c;
        }
        // (made under the lock: two walks needing the same class make it once)
        let c = Arc::new(self.trie.text_class(except));
        if kept.len() >= TEXT_CLASSES {
            kept.remove(0);
        }
        kept.push(c.clone());
        c
    }

    /// The [`TextClass`] of `except` and its mask without the tokens whose first byte is in
    /// `first` (ASCII bytes, bit `b` for byte `b`), kept per vocabulary like the classes.
    pub fn text_class_without_first(
        &self,
        except: u128,
        first: u128,
    ) -> (Arc<TextClass>, Arc<[u32]>) {
        let class = self.text_class(except);
        let mut kept = self
            .first_masks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = kept.iter().position(|c| c.0 == except && c.1 == first) {
            let c = kept.remove(i);
            let mask = c.2.clone();
            kept.push(c);
            return (class, mask);
        }
        let mut mask = class.mask.clone();
        self.trie
            .clear_below_first(|b| b < 128 && first >> b & 1 == 1, &mut mask);
        let mask: Arc<[u32]> = mask.into();
        if kept.len() >= TEXT_CLASSES {
            kept.remove(0);
        }
        kept.push((except, first, mask.clone()));
        (class, mask)
    }

    /// Whether `id` is an EOS token.
    #[inline]
    pub fn is_eos(&self, id: u32) -> bool {
        self.eos.binary_search(&id).is_ok()
    }

    /// The bytes of a regular token; `None` for special, padding, empty or out-of-range ids.
    #[inline]
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if i < self.vocab_size && self.regular[i] {
            Some(&self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize])
        } else {
            None
        }
    }

    /// Raw bytes of any id below `vocab_size` (empty for specials and padding).
    pub fn raw_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i < self.vocab_size {
            &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
        } else {
            &[]
        }
    }

    /// The token trie over regular tokens.
    pub fn trie(&self) -> &TokenTrie {
        &self.trie
    }

    /// A stable 64-bit fingerprint of tokens, EOS ids, special ids and `vocab_size`.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Number of 32-bit words in one bitmask row.
    pub fn mask_words(&self) -> usize {
        self.vocab_size.div_ceil(32)
    }
}

fn decoder_types(v: &Value, out: &mut Vec<String>) {
    if let Some(t) = v.get("type").and_then(Value::as_str) {
        if t == "Replace" {
            let pat = v
                .get("pattern")
                .and_then(|p| p.get("String"))
                .and_then(Value::as_str);
            if pat == Some("\u{2581}") {
                out.push("ReplaceMetaspace".into());
            }
        } else {
            out.push(t.to_string());
        }
    }
    if let Some(Value::Array(ds)) = v.get("decoders") {
        for d in ds {
            decoder_types(d, out);
        }
    }
}

/// The parts of a `tokenizer.json` the vocabulary reads; the rest (the merges above all, most
/// of the text) is skipped by the parser without being stored.
#[derive(serde::Deserialize)]
struct TokenizerDoc {
    model: Option<ModelDoc>,
    added_tokens: Option<Value>,
    decoder: Option<Value>,
    pre_tokenizer: Option<Value>,
}

#[derive(serde::Deserialize)]
struct ModelDoc {
    #[serde(rename = "type")]
    kind: Option<String>,
    vocab: Option<VocabDoc>,
}

/// A model's `vocab`: token → id (BPE, WordLevel), or a list of `[token, score]` (Unigram).
enum VocabDoc {
    Map(Vec<(String, Value)>),
    List(Vec<Value>),
    Other,
}

impl<'de> serde::Deserialize<'de> for VocabDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = VocabDoc;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a vocab object or list")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<VocabDoc, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0));
                while let Some(e) = m.next_entry::<String, Value>()? {
                    out.push(e);
                }
                Ok(VocabDoc::Map(out))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<VocabDoc, A::Error> {
                let mut out = Vec::with_capacity(s.size_hint().unwrap_or(0));
                while let Some(e) = s.next_element::<Value>()? {
                    out.push(e);
                }
                Ok(VocabDoc::List(out))
            }
            fn visit_unit<E>(self) -> std::result::Result<VocabDoc, E> {
                Ok(VocabDoc::Other)
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<VocabDoc, E> {
                Ok(VocabDoc::Other)
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<VocabDoc, E> {
                Ok(VocabDoc::Other)
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<VocabDoc, E> {
                Ok(VocabDoc::Other)
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<VocabDoc, E> {
                Ok(VocabDoc::Other)
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<VocabDoc, E> {
                Ok(VocabDoc::Other)
            }
        }
        d.deserialize_any(Visit)
    }
}

fn detect_kind(decoder: Option<&Value>, pre_tokenizer: Option<&Value>) -> VocabKind {
    let mut types = Vec::new();
    if let Some(d) = decoder {
        decoder_types(d, &mut types);
    }
    if types.iter().any(|t| t == "ByteLevel") {
        return VocabKind::ByteLevel;
    }
    if types
        .iter()
        .any(|t| t == "ReplaceMetaspace" || t == "Metaspace" || t == "ByteFallback")
    {
        return VocabKind::SentencePiece;
    }
    let mut pre = Vec::new();
    if let Some(p) = pre_tokenizer {
        decoder_types(p, &mut pre);
        if let Some(Value::Array(ps)) = p.get("pretokenizers") {
            for x in ps {
                decoder_types(x, &mut pre);
            }
        }
    }
    if pre.iter().any(|t| t == "ByteLevel") {
        return VocabKind::ByteLevel;
    }
    if pre.iter().any(|t| t == "Metaspace") {
        return VocabKind::SentencePiece;
    }
    VocabKind::Raw
}

fn decode_strings(
    strings: &[Option<String>],
    kind: VocabKind,
    added_text: &[(usize, String)],
) -> Result<Vec<Vec<u8>>> {
    let total = strings.iter().filter(|s| s.is_some()).count();
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(strings.len());
    match kind {
        VocabKind::ByteLevel => {
            let map = char_to_byte_map();
            let mut bad: Vec<&str> = Vec::new();
            let is_added: std::collections::HashSet<usize> =
                added_text.iter().map(|(i, _)| *i).collect();
            for (id, s) in strings.iter().enumerate() {
                out.push(match s {
                    None => Vec::new(),
                    Some(s) => match decode_byte_level(s, &map) {
                        Some(b) => b,
                        None => {
                            if !is_added.contains(&id) {
                                bad.push(s);
                            }
                            s.as_bytes().to_vec()
                        }
                    },
                });
            }
            if bad.len() > 10.max(total / 100) {
                return Err(Error::Vocabulary(format!(
                    "the tokenizer's decoder is byte-level BPE, but {} of {} tokens contain \
                     characters outside the byte-level alphabet (e.g. {:?}): the vocabulary does \
                     not look byte-level",
                    bad.len(),
                    total,
                    &bad[..3.min(bad.len())]
                )));
            }
        }
        VocabKind::SentencePiece => {
            let meta = strings
                .iter()
                .flatten()
                .filter(|s| s.contains('\u{2581}'))
                .count();
            let gpt = strings
                .iter()
                .flatten()
                .filter(|s| s.contains('\u{0120}'))
                .count();
            if meta == 0 && gpt > total / 10 {
                return Err(Error::Vocabulary(format!(
                    "the tokenizer's decoder is SentencePiece, but no token contains '\u{2581}' \
                     and {gpt} of {total} contain 'Ġ': the vocabulary looks byte-level"
                )));
            }
            for s in strings {
                out.push(s.as_deref().map(decode_sentencepiece).unwrap_or_default());
            }
        }
        VocabKind::Raw => {
            for s in strings {
                out.push(
                    s.as_deref()
                        .map(|s| s.as_bytes().to_vec())
                        .unwrap_or_default(),
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_round_trips() {
        let b2c = byte_to_char();
        let c2b = char_to_byte_map();
        for b in 0..=255u8 {
            assert_eq!(c2b[&b2c[b as usize]], b);
        }
        assert_eq!(b2c[b' ' as usize], 'Ġ');
        assert_eq!(b2c[b'\n' as usize], 'Ċ');
    }

    #[test]
    fn sentencepiece_decoding() {
        assert_eq!(decode_sentencepiece("\u{2581}hello"), b" hello");
        assert_eq!(decode_sentencepiece("<0x0A>"), b"\n");
        assert_eq!(decode_sentencepiece("<0xZZ>"), b"<0xZZ>");
    }

    #[test]
    fn vocab_size_padding_and_truncation() {
        let toks = vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"<eos>".to_vec(),
            b"<x>".to_vec(),
        ];
        let v = Vocabulary::new(toks.clone(), vec![2], vec![3], Some(8)).unwrap();
        assert_eq!(v.vocab_size(), 8);
        assert_eq!(v.token_bytes(5), None);
        let v = Vocabulary::new(toks.clone(), vec![2], vec![3], Some(3)).unwrap();
        assert_eq!(v.vocab_size(), 3);
        let e = Vocabulary::new(toks, vec![2], vec![], Some(3)).unwrap_err();
        assert!(e.to_string().contains("regular token"), "{e}");
    }

    #[test]
    fn tokenizer_json_byte_level() {
        let json = r#"{"model":{"type":"BPE","vocab":{"a":0,"Ġb":1,"Ċ":2}},
            "added_tokens":[{"id":3,"content":"<|endoftext|>","special":true},
                            {"id":4,"content":"[PAD]","special":false}],
            "decoder":{"type":"ByteLevel"}}"#;
        let v = Vocabulary::from_tokenizer_json(json, None, None, &[]).unwrap();
        assert_eq!(v.kind(), VocabKind::ByteLevel);
        assert_eq!(v.token_bytes(1), Some(&b" b"[..]));
        assert_eq!(v.token_bytes(2), Some(&b"\n"[..]));
        assert_eq!(v.token_bytes(3), None);
        assert_eq!(v.token_bytes(4), Some(&b"[PAD]"[..]));
        assert_eq!(v.eos_ids(), &[3]);
    }

    #[test]
    fn tokens_that_spell_text_are_at_most_65535_bytes() {
        let ok = Vocabulary::new(
            vec![vec![b'a'; MAX_TOKEN_BYTES], b"a".to_vec(), b"<e>".to_vec()],
            vec![2],
            vec![],
            None,
        )
        .unwrap();
        assert_eq!(ok.trie().max_depth(), MAX_TOKEN_BYTES);
        let e = Vocabulary::new(
            vec![
                b"a".to_vec(),
                vec![b'a'; MAX_TOKEN_BYTES + 1],
                b"<e>".to_vec(),
            ],
            vec![2],
            vec![],
            None,
        )
        .unwrap_err();
        assert!(matches!(e, Error::Vocabulary(_)), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("token 1 ") && msg.contains("65536 bytes") && msg.contains("65535"),
            "{msg}"
        );
        // a special token spells nothing: not limited
        Vocabulary::new(
            vec![
                b"a".to_vec(),
                vec![b'a'; MAX_TOKEN_BYTES + 1],
                b"<e>".to_vec(),
            ],
            vec![2],
            vec![1],
            None,
        )
        .unwrap();
    }

    #[test]
    fn tokenizer_json_ids_past_the_limit_are_refused_before_allocation() {
        for id in [1u64 << 24, 1 << 26, 1 << 31, 1 << 60, u64::MAX] {
            let vocab = format!(
                r#"{{"model":{{"type":"BPE","vocab":{{"a":0,"b":{id}}}}},
                    "added_tokens":[{{"id":1,"content":"</s>","special":true}}]}}"#
            );
            let added = format!(
                r#"{{"model":{{"type":"BPE","vocab":{{"a":0}}}},
                    "added_tokens":[{{"id":{id},"content":"</s>","special":true}}]}}"#
            );
            for (json, what) in [(vocab, "token \"b\""), (added, "added token \"</s>\"")] {
                let e = Vocabulary::from_tokenizer_json(&json, None, None, &[]).unwrap_err();
                assert!(matches!(e, Error::Vocabulary(_)), "{e}");
                let msg = e.to_string();
                assert!(
                    msg.contains(what) && msg.contains(&id.to_string()) && msg.contains("2^24"),
                    "{msg}"
                );
            }
        }
        // the largest id that fits is still a vocabulary
        let json = format!(
            r#"{{"model":{{"type":"BPE","vocab":{{"a":0,"b":{}}}}},
                "added_tokens":[{{"id":1,"content":"</s>","special":true}}]}}"#,
            MAX_VOCAB_SIZE - 1
        );
        let v = Vocabulary::from_tokenizer_json(&json, None, None, &[]).unwrap();
        assert_eq!(v.vocab_size(), MAX_VOCAB_SIZE);
    }

    #[test]
    fn tokenizer_json_kind_cross_check() {
        let json = r#"{"model":{"type":"BPE","vocab":{"ĠaĠ":0,"Ġb":1,"Ġc":2,"Ġd":3,"</s>":4}},
            "decoder":{"type":"Sequence","decoders":[{"type":"ByteFallback"}]}}"#;
        let e = Vocabulary::from_tokenizer_json(json, None, None, &[]).unwrap_err();
        assert!(e.to_string().contains("looks byte-level"), "{e}");
    }
}
