//! Applying a packed token bitmask to logits in place: disallowed tokens become `-inf`.
//!
//! Bitmask layout (the one vLLM and xgrammar use): row `r` is `words` 32-bit words; token `t` is
//! allowed iff bit `t % 32` (lowest bit first) of word `t / 32` is 1. Logits are `rows` rows of
//! `cols` elements, `row_stride` elements apart (`row_stride >= cols`): `f32`, or the bit
//! patterns of `f16` / `bf16` as `u16` (`-inf` is [`F16_NEG_INF`] / [`BF16_NEG_INF`]).
//!
//! Semantics, per masked row `r` (every row `0..rows`, or the rows listed in `indices`; row `r`
//! of the logits always goes with row `r` of the bitmask, vLLM's convention):
//!
//! * column `c < min(vocab_size, 32 * words)`: set to `-inf` iff its bit is 0;
//! * column `c >= min(vocab_size, 32 * words)` (up to `cols`): set to `-inf`.
//!
//! Rows not masked, and the gaps between rows (`cols..row_stride`), are never written.
//!
//! The hot loop looks at one word (32 logits) at a time and skips all-ones words. The rest is
//! chosen at run time by CPU:
//!
//! * AVX-512 (x86-64): the word's zero bits are the lane mask of masked stores of `-inf` (two
//!   16-lane stores for `f32`, one 32-lane store for 16-bit types): write-only, branch-free.
//! * otherwise (portable; AVX2 where the CPU has it): zero word → fill 32 elements; a few zero
//!   bits → store `-inf` at exactly those positions; many zero bits → a branch-free blend of the
//!   32 elements (this reads them, but a partial store fetches the cache line anyway, and the
//!   blend vectorizes where scattered stores cannot).
//!
//! Rows (and, for small batches, column blocks of a row) run in parallel on the rayon pool; small
//! jobs run on the calling thread.
//!
//! ```
//! use tokensieve_core::kernel::{apply_token_bitmask_f32, LogitsLayout};
//! let mut logits = vec![1.0f32; 40];
//! // tokens 0 and 33 allowed; vocab of 40 → two words
//! let mask = [0b1u32, 0b10u32];
//! apply_token_bitmask_f32(&mut logits, LogitsLayout::contiguous(1, 40), &mask, 1, 2, None, 40).unwrap();
//! assert_eq!(logits[0], 1.0);
//! assert_eq!(logits[33], 1.0);
//! assert_eq!(logits.iter().filter(|x| x.is_finite()).count(), 2);
//! ```

use std::sync::atomic::{AtomicU8, Ordering};

use rayon::prelude::*;

use crate::error::{Error, Result};

/// `-inf` as an IEEE half-precision bit pattern.
pub const F16_NEG_INF: u16 = 0xFC00;
/// `-inf` as a bfloat16 bit pattern.
pub const BF16_NEG_INF: u16 = 0xFF80;

/// Jobs with fewer masked elements than this run on the calling thread.
const PARALLEL_MIN_ELEMS: usize = 1 << 17;
/// Column block (a multiple of 32) when a small batch splits its rows across threads.
const COL_BLOCK: usize = 1 << 15;
/// Partial words with at most this many zero bits store `-inf` bit by bit; denser ones blend.
const SPARSE_ZEROS: u32 = 6;

/// A bitmask word: `u32`, or `i32` as torch and numpy store it.
pub trait MaskWord: Copy + Send + Sync {
    /// The word's 32 bits.
    fn bits(self) -> u32;
}

impl MaskWord for u32 {
    #[inline(always)]
    fn bits(self) -> u32 {
        self
    }
}

impl MaskWord for i32 {
    #[inline(always)]
    fn bits(self) -> u32 {
        self as u32
    }
}

/// A logits element: `f32`, or the `u16` bit pattern of an `f16` / `bf16`.
pub trait LogitElem: Copy + Send + Sync {
    /// Keep element `i` of `chunk` where bit `i` of `word` is 1, else store `neg_inf`; branch-free
    /// (lane masks from a per-nibble table: vectorizes with baseline SSE2).
    fn blend32(chunk: &mut [Self; 32], word: u32, neg_inf: Self);

    /// As [`blend32`](Self::blend32), lane masks from per-lane shifts (vectorizes with AVX2).
    fn blend32_shift(chunk: &mut [Self; 32], word: u32, neg_inf: Self);

    /// Mask `head` (`32 * words.len()` elements) with the best SIMD path this CPU has; `false`
    /// when there is none and the portable loop must run.
    fn mask_words_simd<W: MaskWord>(head: &mut [Self], words: &[W], neg_inf: Self) -> bool;
}

/// Lane masks for 4 consecutive elements: entry `n` has lane `j` all ones iff bit `j` of `n`.
macro_rules! nibble_table {
    ($t:ty) => {{
        let mut t = [[0 as $t; 4]; 16];
        let mut n = 0;
        while n < 16 {
            let mut j = 0;
            while j < 4 {
                t[n][j] = if n & (1 << j) != 0 { <$t>::MAX } else { 0 };
                j += 1;
            }
            n += 1;
        }
        t
    }};
}

static NIBBLE_U32: [[u32; 4]; 16] = nibble_table!(u32);
static NIBBLE_U16: [[u16; 4]; 16] = nibble_table!(u16);

impl LogitElem for f32 {
    #[inline(always)]
    fn blend32(chunk: &mut [f32; 32], word: u32, neg_inf: f32) {
        let nb = neg_inf.to_bits();
        for g in 0..8 {
            let m = &NIBBLE_U32[((word >> (4 * g)) & 15) as usize];
            for j in 0..4 {
                let x = &mut chunk[4 * g + j];
                *x = f32::from_bits((x.to_bits() & m[j]) | (nb & !m[j]));
            }
        }
    }

    #[inline(always)]
    fn blend32_shift(chunk: &mut [f32; 32], word: u32, neg_inf: f32) {
        let nb = neg_inf.to_bits();
        for (i, x) in chunk.iter_mut().enumerate() {
            let m = ((word >> i) & 1).wrapping_neg();
            *x = f32::from_bits((x.to_bits() & m) | (nb & !m));
        }
    }

    #[inline]
    fn mask_words_simd<W: MaskWord>(head: &mut [f32], words: &[W], neg_inf: f32) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            if simd_level() >= 2 && std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F.
                unsafe { x86::words_avx512_f32(head, words, neg_inf) };
                return true;
            }
            if simd_level() >= 1 && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                unsafe { x86::words_avx2(head, words, neg_inf) };
                return true;
            }
        }
        let _ = (head, words, neg_inf);
        false
    }
}

impl LogitElem for u16 {
    #[inline(always)]
    fn blend32(chunk: &mut [u16; 32], word: u32, neg_inf: u16) {
        for g in 0..8 {
            let m = &NIBBLE_U16[((word >> (4 * g)) & 15) as usize];
            for j in 0..4 {
                let x = &mut chunk[4 * g + j];
                *x = (*x & m[j]) | (neg_inf & !m[j]);
            }
        }
    }

    #[inline(always)]
    fn blend32_shift(chunk: &mut [u16; 32], word: u32, neg_inf: u16) {
        for (i, x) in chunk.iter_mut().enumerate() {
            let m = (((word >> i) & 1) as u16).wrapping_neg();
            *x = (*x & m) | (neg_inf & !m);
        }
    }

    #[inline]
    fn mask_words_simd<W: MaskWord>(head: &mut [u16], words: &[W], neg_inf: u16) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            if simd_level() >= 2 && std::arch::is_x86_feature_detected!("avx512bw") {
                // SAFETY: the CPU has AVX-512BW (which implies AVX-512F).
                unsafe { x86::words_avx512_u16(head, words, neg_inf) };
                return true;
            }
            if simd_level() >= 1 && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                unsafe { x86::words_avx2(head, words, neg_inf) };
                return true;
            }
        }
        let _ = (head, words, neg_inf);
        false
    }
}

/// Whole-word loops compiled for wider x86 vector units, chosen at run time.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{mask_words_portable, LogitElem, MaskWord};
    use std::arch::x86_64::*;

    /// AVX-512: one masked store per 16 lanes, lanes selected by the word's zero bits directly.
    /// Write-only; all-ones words are skipped.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn words_avx512_f32<W: MaskWord>(head: &mut [f32], words: &[W], neg: f32) {
        debug_assert_eq!(head.len(), 32 * words.len());
        let v = _mm512_set1_ps(neg);
        for (chunk, w) in head.chunks_exact_mut(32).zip(words) {
            let zeros = !w.bits();
            if zeros == 0 {
                continue;
            }
            let p = chunk.as_mut_ptr();
            // SAFETY: `chunk` is 32 f32s; each store covers 16 of them, masked lanes only.
            unsafe {
                _mm512_mask_storeu_ps(p, zeros as u16, v);
                _mm512_mask_storeu_ps(p.add(16), (zeros >> 16) as u16, v);
            }
        }
    }

    /// AVX-512BW: one masked store of 32 16-bit lanes per word.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn words_avx512_u16<W: MaskWord>(head: &mut [u16], words: &[W], neg: u16) {
        debug_assert_eq!(head.len(), 32 * words.len());
        let v = _mm512_set1_epi16(neg as i16);
        for (chunk, w) in head.chunks_exact_mut(32).zip(words) {
            let zeros = !w.bits();
            if zeros == 0 {
                continue;
            }
            // SAFETY: `chunk` is 32 u16s, the store's exact width; masked lanes only.
            unsafe { _mm512_mask_storeu_epi16(chunk.as_mut_ptr().cast::<i16>(), zeros, v) };
        }
    }

    /// The portable loop, compiled with AVX2 (the per-lane shift blend vectorizes well there).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn words_avx2<T: LogitElem, W: MaskWord>(
        head: &mut [T],
        words: &[W],
        neg: T,
    ) {
        mask_words_portable::<T, W, true>(head, words, neg)
    }
}

/// Shape of a logits buffer: `rows` rows of `cols` elements, `row_stride` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogitsLayout {
    /// Number of rows.
    pub rows: usize,
    /// Distance between the starts of consecutive rows, in elements (`>= cols` unless `rows <= 1`).
    pub row_stride: usize,
    /// Logits per row (the model's vocabulary width).
    pub cols: usize,
}

impl LogitsLayout {
    /// Rows stored back to back.
    pub fn contiguous(rows: usize, cols: usize) -> Self {
        LogitsLayout {
            rows,
            row_stride: cols,
            cols,
        }
    }

    /// Elements a buffer must hold: `(rows - 1) * row_stride + cols` (0 when empty).
    pub fn required_len(&self) -> Option<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Some(0);
        }
        (self.rows - 1)
            .checked_mul(self.row_stride)?
            .checked_add(self.cols)
    }
}

/// Apply a bitmask to `f32` logits in place. See the [module docs](self) for the semantics.
///
/// `bitmask` holds `bitmask_rows` rows of `bitmask_words` words back to back. `indices`, when
/// given, lists the rows to mask (no duplicates); otherwise every row is masked and the bitmask
/// needs at least `layout.rows` rows. `vocab_size <= layout.cols`. Errors (never writes) when a
/// size, index or length is inconsistent.
pub fn apply_token_bitmask_f32<W: MaskWord>(
    logits: &mut [f32],
    layout: LogitsLayout,
    bitmask: &[W],
    bitmask_rows: usize,
    bitmask_words: usize,
    indices: Option<&[usize]>,
    vocab_size: usize,
) -> Result<()> {
    apply_token_bitmask(
        logits,
        layout,
        f32::NEG_INFINITY,
        bitmask,
        bitmask_rows,
        bitmask_words,
        indices,
        vocab_size,
    )
}

/// [`apply_token_bitmask_f32`] for IEEE `f16` logits given as their `u16` bit patterns.
pub fn apply_token_bitmask_f16<W: MaskWord>(
    logits: &mut [u16],
    layout: LogitsLayout,
    bitmask: &[W],
    bitmask_rows: usize,
    bitmask_words: usize,
    indices: Option<&[usize]>,
    vocab_size: usize,
) -> Result<()> {
    apply_token_bitmask(
        logits,
        layout,
        F16_NEG_INF,
        bitmask,
        bitmask_rows,
        bitmask_words,
        indices,
        vocab_size,
    )
}

/// [`apply_token_bitmask_f32`] for `bf16` logits given as their `u16` bit patterns.
pub fn apply_token_bitmask_bf16<W: MaskWord>(
    logits: &mut [u16],
    layout: LogitsLayout,
    bitmask: &[W],
    bitmask_rows: usize,
    bitmask_words: usize,
    indices: Option<&[usize]>,
    vocab_size: usize,
) -> Result<()> {
    apply_token_bitmask(
        logits,
        layout,
        BF16_NEG_INF,
        bitmask,
        bitmask_rows,
        bitmask_words,
        indices,
        vocab_size,
    )
}

fn invalid(msg: String) -> Error {
    Error::InvalidArgument(msg)
}

/// The generic kernel behind the typed entry points; `neg_inf` is the element written.
#[allow(clippy::too_many_arguments)]
pub fn apply_token_bitmask<T: LogitElem, W: MaskWord>(
    logits: &mut [T],
    layout: LogitsLayout,
    neg_inf: T,
    bitmask: &[W],
    bitmask_rows: usize,
    bitmask_words: usize,
    indices: Option<&[usize]>,
    vocab_size: usize,
) -> Result<()> {
    let LogitsLayout { rows, cols, .. } = layout;
    // A single row has no stride to speak of.
    let row_stride = if rows <= 1 { cols } else { layout.row_stride };
    if rows > 1 && row_stride < cols {
        return Err(invalid(format!(
            "logits row stride {row_stride} is smaller than the row width {cols}: rows overlap"
        )));
    }
    let need = LogitsLayout {
        rows,
        row_stride,
        cols,
    }
    .required_len()
    .ok_or_else(|| invalid("logits layout overflows usize".into()))?;
    if logits.len() < need {
        return Err(invalid(format!(
            "logits buffer has {} elements but {rows} rows of {cols} with stride {row_stride} \
             need {need}",
            logits.len()
        )));
    }
    if vocab_size > cols {
        return Err(invalid(format!(
            "vocab_size {vocab_size} is larger than the logits width {cols}"
        )));
    }
    let mask_len = bitmask_rows
        .checked_mul(bitmask_words)
        .ok_or_else(|| invalid("bitmask size overflows usize".into()))?;
    if bitmask.len() < mask_len {
        return Err(invalid(format!(
            "bitmask buffer has {} words but {bitmask_rows} rows of {bitmask_words} need {mask_len}",
            bitmask.len()
        )));
    }
    // Which rows to mask.
    let selected: Option<Vec<bool>> = match indices {
        None => {
            if bitmask_rows < rows {
                return Err(invalid(format!(
                    "the bitmask has {bitmask_rows} rows but the logits have {rows}"
                )));
            }
            None
        }
        Some(idx) => {
            let mut sel = vec![false; rows];
            for &i in idx {
                if i >= rows || i >= bitmask_rows {
                    return Err(invalid(format!(
                        "index {i} is out of range for logits with {rows} rows and a bitmask \
                         with {bitmask_rows} rows"
                    )));
                }
                if std::mem::replace(&mut sel[i], true) {
                    return Err(invalid(format!("index {i} appears twice in indices")));
                }
            }
            Some(sel)
        }
    };
    let n_masked = selected
        .as_ref()
        .map_or(rows, |s| s.iter().filter(|&&b| b).count());
    if n_masked == 0 || cols == 0 {
        return Ok(());
    }
    // Columns below `limit` follow their bit; the rest of the row is -inf.
    let limit = vocab_size.min(bitmask_words.saturating_mul(32));
    let bitmask = &bitmask[..mask_len];
    let logits = &mut logits[..need];
    let is_selected = |r: usize| match &selected {
        None => true,
        Some(s) => s[r],
    };
    let mask_row = |r: usize, row: &mut [T]| {
        let words = &bitmask[r * bitmask_words..(r + 1) * bitmask_words];
        mask_segment(&mut row[..cols], 0, words, limit, neg_inf);
    };

    let threads = rayon::current_num_threads();
    if threads <= 1 || n_masked.saturating_mul(cols) < PARALLEL_MIN_ELEMS {
        for (r, row) in logits.chunks_mut(row_stride).enumerate() {
            if is_selected(r) {
                mask_row(r, row);
            }
        }
    } else if n_masked >= threads * 2 || cols <= COL_BLOCK {
        logits
            .par_chunks_mut(row_stride)
            .enumerate()
            .with_min_len(1)
            .for_each(|(r, row)| {
                if is_selected(r) {
                    mask_row(r, row);
                }
            });
    } else {
        // Few rows: split each row into column blocks so every thread has work.
        logits
            .par_chunks_mut(row_stride)
            .enumerate()
            .with_min_len(1)
            .for_each(|(r, row)| {
                if !is_selected(r) {
                    return;
                }
                let words = &bitmask[r * bitmask_words..(r + 1) * bitmask_words];
                row[..cols]
                    .par_chunks_mut(COL_BLOCK)
                    .enumerate()
                    .with_min_len(1)
                    .for_each(|(b, seg)| mask_segment(seg, b * COL_BLOCK, words, limit, neg_inf));
            });
    }
    Ok(())
}

/// Mask whole words: `head` is `32 * words.len()` elements. All-ones words are skipped, zero
/// words filled, words with few zero bits get exactly those stores, and dense partial words a
/// branch-free blend (`SHIFT`: per-lane shifts for AVX2, else the nibble table).
#[inline(always)]
fn mask_words_portable<T: LogitElem, W: MaskWord, const SHIFT: bool>(
    head: &mut [T],
    words: &[W],
    neg_inf: T,
) {
    for (chunk, w) in head.chunks_exact_mut(32).zip(words) {
        let chunk: &mut [T; 32] = chunk.try_into().expect("chunks_exact(32)");
        let w = w.bits();
        if w == u32::MAX {
            continue;
        }
        if w == 0 {
            chunk.fill(neg_inf);
        } else if (!w).count_ones() <= SPARSE_ZEROS {
            let mut zeros = !w;
            while zeros != 0 {
                chunk[(zeros.trailing_zeros() & 31) as usize] = neg_inf;
                zeros &= zeros - 1;
            }
        } else if SHIFT {
            T::blend32_shift(chunk, w, neg_inf);
        } else {
            T::blend32(chunk, w, neg_inf);
        }
    }
}

/// The widest SIMD path allowed: 0 portable, 1 up to AVX2, 2 up to AVX-512 (default: the best
/// the CPU has). Tests lower it to check every path against the same reference.
static SIMD_LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);

/// Cap the SIMD paths (0 portable only, 1 up to AVX2, 2 or more: everything the CPU has), for
/// tests and benchmarks; returns the previous cap. Every path gives identical results.
#[doc(hidden)]
pub fn set_simd_level(level: u8) -> u8 {
    SIMD_LEVEL.swap(level, Ordering::Relaxed)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn simd_level() -> u8 {
    SIMD_LEVEL.load(Ordering::Relaxed)
}

/// Mask `seg`, the columns `c0..c0 + seg.len()` of one row (`c0` a multiple of 32), against that
/// row's `words`. Columns `>= limit` become -inf; `limit <= 32 * words.len()`.
#[inline]
fn mask_segment<T: LogitElem, W: MaskWord>(
    seg: &mut [T],
    c0: usize,
    words: &[W],
    limit: usize,
    neg_inf: T,
) {
    debug_assert_eq!(c0 % 32, 0);
    let end = c0 + seg.len();
    let n_valid = limit.clamp(c0, end) - c0;
    let full = n_valid / 32;
    let w0 = c0 / 32;
    let (head, tail) = seg.split_at_mut(full * 32);
    let head_words = &words[w0..w0 + full];
    if !T::mask_words_simd(head, head_words, neg_inf) {
        mask_words_portable::<T, W, false>(head, head_words, neg_inf);
    }
    // The last, partial word below `limit`, then everything from `limit` on.
    let rem = n_valid % 32;
    let (part, rest) = tail.split_at_mut(rem);
    if rem > 0 {
        let mut zeros = !words[w0 + full].bits() & ((1u32 << rem) - 1);
        while zeros != 0 {
            part[zeros.trailing_zeros() as usize] = neg_inf;
            zeros &= zeros - 1;
        }
    }
    rest.fill(neg_inf);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*, deterministic.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn mask(&mut self, n: usize, density: f64) -> Vec<u32> {
            (0..n)
                .map(|_| {
                    let mut w = 0u32;
                    for b in 0..32 {
                        if ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < density {
                            w |= 1 << b;
                        }
                    }
                    w
                })
                .collect()
        }
        /// Words of mixed kinds: all zero, all one, sparse, dense, half.
        fn mixed_mask(&mut self, n: usize) -> Vec<u32> {
            (0..n)
                .map(|_| {
                    let density = [0.0, 1.0, 0.03, 0.97, 0.5][(self.next() % 5) as usize];
                    self.mask(1, density)[0]
                })
                .collect()
        }
    }

    fn allowed(words: &[u32], t: usize) -> bool {
        t / 32 < words.len() && words[t / 32] >> (t % 32) & 1 == 1
    }

    /// The obviously correct version.
    #[allow(clippy::too_many_arguments)]
    fn reference<T: Copy>(
        logits: &mut [T],
        layout: LogitsLayout,
        neg_inf: T,
        mask: &[u32],
        words: usize,
        indices: Option<&[usize]>,
        vocab_size: usize,
    ) {
        let rows: Vec<usize> = indices.map_or((0..layout.rows).collect(), |i| i.to_vec());
        let stride = if layout.rows <= 1 {
            layout.cols
        } else {
            layout.row_stride
        };
        for r in rows {
            let w = &mask[r * words..(r + 1) * words];
            for c in 0..layout.cols {
                if c >= vocab_size || !allowed(w, c) {
                    logits[r * stride + c] = neg_inf;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_f32(
        rng: &mut Rng,
        rows: usize,
        stride: usize,
        cols: usize,
        words: usize,
        mask_rows: usize,
        density: f64,
        indices: Option<&[usize]>,
        vocab_size: usize,
    ) {
        let layout = LogitsLayout {
            rows,
            row_stride: stride,
            cols,
        };
        let len = layout.required_len().unwrap() + 3;
        let init: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 7.0).collect();
        let mask = if density < 0.0 {
            rng.mixed_mask(mask_rows * words)
        } else {
            rng.mask(mask_rows * words, density)
        };
        let mut got = init.clone();
        let mut want = init.clone();
        apply_token_bitmask_f32(
            &mut got, layout, &mask, mask_rows, words, indices, vocab_size,
        )
        .unwrap();
        reference(
            &mut want,
            layout,
            f32::NEG_INFINITY,
            &mask,
            words,
            indices,
            vocab_size,
        );
        assert_eq!(
            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            "rows={rows} stride={stride} cols={cols} words={words} density={density} \
             indices={indices:?} vocab_size={vocab_size}"
        );
    }

    /// Tests run in parallel and the SIMD cap is global: tests that change it hold this lock.
    static LEVEL_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn matches_reference_on_random_masks_at_every_simd_level() {
        let _guard = LEVEL_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for level in [0u8, 1, 2] {
            let previous = set_simd_level(level);
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ level as u64);
            for &cols in &[1usize, 31, 32, 33, 63, 64, 65, 1000, 32001, 128256, 128257] {
                let words = cols.div_ceil(32);
                for &density in &[0.0, 0.01, 0.3, 0.5, 0.9, 0.99, 1.0, -1.0] {
                    for &rows in &[1usize, 3] {
                        check_f32(&mut rng, rows, cols, cols, words, rows, density, None, cols);
                    }
                }
            }
            half_precision_at_current_level(&mut rng);
            set_simd_level(previous);
        }
    }

    #[test]
    fn large_batches_take_the_parallel_paths() {
        let mut rng = Rng(7);
        for &rows in &[1usize, 2, 5, 16] {
            for &cols in &[40_000usize, 151_936, 128_257] {
                let words = cols.div_ceil(32);
                check_f32(&mut rng, rows, cols, cols, words, rows, 0.5, None, cols);
                let idx: Vec<usize> = (0..rows).filter(|r| r % 2 == 0).collect();
                check_f32(
                    &mut rng,
                    rows,
                    cols + 5,
                    cols,
                    words,
                    rows + 1,
                    0.2,
                    Some(&idx),
                    cols - 3,
                );
            }
        }
    }

    #[test]
    fn vocab_size_and_word_limits() {
        let mut rng = Rng(3);
        // vocab_size below the width; the bitmask narrower than the width; wider than needed.
        check_f32(&mut rng, 2, 100, 100, 4, 2, 0.7, None, 70);
        check_f32(&mut rng, 2, 100, 100, 2, 2, 0.7, None, 100);
        check_f32(&mut rng, 2, 100, 100, 9, 2, 0.7, None, 100);
        check_f32(&mut rng, 2, 100, 100, 9, 2, 1.0, None, 0);
        check_f32(&mut rng, 1, 0, 33, 1, 1, 1.0, None, 33);
    }

    #[test]
    fn indices_touch_only_listed_rows_and_strides_leave_gaps_alone() {
        let mut rng = Rng(11);
        check_f32(&mut rng, 5, 80, 70, 3, 6, 0.5, Some(&[4, 0, 2]), 70);
        check_f32(&mut rng, 5, 80, 70, 3, 6, 0.5, Some(&[]), 70);
    }

    #[test]
    fn half_precision_bit_patterns() {
        half_precision_at_current_level(&mut Rng(5));
    }

    fn half_precision_at_current_level(rng: &mut Rng) {
        for &(neg, cols) in &[
            (F16_NEG_INF, 33usize),
            (BF16_NEG_INF, 128_257),
            (F16_NEG_INF, 999),
        ] {
            let rows = 3;
            let words = cols.div_ceil(32);
            let mask = rng.mixed_mask(rows * words);
            let layout = LogitsLayout::contiguous(rows, cols);
            let init: Vec<u16> = (0..rows * cols).map(|i| (i % 30000) as u16).collect();
            let mut got = init.clone();
            let mut want = init.clone();
            if neg == F16_NEG_INF {
                apply_token_bitmask_f16(&mut got, layout, &mask, rows, words, None, cols - 1)
                    .unwrap();
            } else {
                apply_token_bitmask_bf16(&mut got, layout, &mask, rows, words, None, cols - 1)
                    .unwrap();
            }
            reference(&mut want, layout, neg, &mask, words, None, cols - 1);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn i32_words_work_like_u32() {
        let mut a = vec![0f32; 64];
        let mut b = vec![0f32; 64];
        let l = LogitsLayout::contiguous(1, 64);
        apply_token_bitmask_f32(&mut a, l, &[-1i32, 5], 1, 2, None, 64).unwrap();
        apply_token_bitmask_f32(&mut b, l, &[u32::MAX, 5], 1, 2, None, 64).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.iter().filter(|x| x.is_finite()).count(), 34);
    }

    #[test]
    fn bad_arguments_are_errors_and_write_nothing() {
        let l = LogitsLayout::contiguous(2, 40);
        let mask = [0u32; 4];
        type Case = (Vec<f32>, LogitsLayout, usize, Option<Vec<usize>>, usize);
        let cases: Vec<Case> = vec![
            (vec![0.0; 79], l, 2, None, 40),             // buffer too short
            (vec![0.0; 80], l, 1, None, 40),             // bitmask has fewer rows
            (vec![0.0; 80], l, 2, Some(vec![2]), 40),    // index out of range
            (vec![0.0; 80], l, 2, Some(vec![1, 1]), 40), // duplicate
            (vec![0.0; 80], l, 2, None, 41),             // vocab_size > cols
            (
                vec![0.0; 80],
                LogitsLayout {
                    rows: 2,
                    row_stride: 30,
                    cols: 40,
                },
                2,
                None,
                40,
            ), // overlapping rows
        ];
        for (mut logits, layout, mrows, idx, vs) in cases {
            let r =
                apply_token_bitmask_f32(&mut logits, layout, &mask, mrows, 2, idx.as_deref(), vs);
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
            assert!(logits.iter().all(|&x| x == 0.0));
        }
        // Bitmask buffer shorter than rows × words.
        let mut logits = vec![0.0f32; 80];
        assert!(apply_token_bitmask_f32(&mut logits, l, &mask[..3], 2, 2, None, 40).is_err());
    }
}
