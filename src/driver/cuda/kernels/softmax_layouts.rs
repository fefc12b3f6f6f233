//! The softmax kernels' layouts (which register layouts a softmax module compiles, and their
//! block sizes): a leaf of `codegen.rs`, which generates them, and of `reduce.rs`, which picks one
//! per launch.

use crate::dtype::DType;

/// Elements per 16-byte access of a softmax module: of the wider of its two dtypes.
pub(in crate::driver::cuda) fn softmax_vec(src: DType, dst: DType) -> usize {
    16 / src.size().max(dst.size())
}

/// The softmax kernels' register layouts: `(w, ch, g)` of the warp kernels (`w` elements per
/// access, `ch` chunks per lane, at most 32 values per lane, groups of `g` lanes per row: 32,
/// fewer for rows of one chunk, or 4 to 16 lanes of two or four chunks each) and `ch` of the
/// block kernels (`v` elements per access, at most 64 values per thread).
pub(in crate::driver::cuda) fn softmax_layouts(v: usize) -> (Vec<(u8, u8, u8)>, Vec<u8>) {
    let mut warp = Vec::new();
    for w in [1, v] {
        if warp.iter().any(|&(x, _, _)| x as usize == w) {
            continue;
        }
        for g in [1u8, 2, 4, 8, 16] {
            warp.push((w as u8, 1, g));
        }
        // Two or four chunks per lane in groups of fewer lanes, for rows a full warp would hold
        // in one (`softmax_warp_layout`).
        for ch in [2u8, 4] {
            for g in [4u8, 8, 16] {
                if ch as usize * w <= 32 && (w > 1 || (ch, g) == (2, 16)) {
                    warp.push((w as u8, ch, g));
                }
            }
        }
        let mut ch = 1;
        while ch * w <= 32 {
            warp.push((w as u8, ch as u8, 32));
            ch *= 2;
        }
    }
    let block = [2u8, 4, 8, 16].into_iter().filter(|&ch| softmax_block_fits(v, ch as u64)).collect();
    (warp, block)
}

/// Whether a softmax module has a kernel of 256-thread blocks with `ch` chunks per thread (`v`
/// elements per access, at most 64 values per thread).
pub(in crate::driver::cuda) fn softmax_block_fits(v: usize, ch: u64) -> bool {
    matches!(ch, 2 | 4 | 8 | 16) && ch * v as u64 <= 64
}

/// Whether a softmax module has a kernel of 1,024-thread blocks with `ch` chunks per thread (`v`
/// elements per access; at most 32 registers of values per thread, the most a full-size block
/// leaves).
pub(in crate::driver::cuda) fn softmax_big_fits(v: usize, value_bytes: usize, ch: u64) -> bool {
    matches!(ch, 2 | 4 | 8 | 16) && ch * (v * value_bytes) as u64 <= 128
}

/// Threads per block of the softmax kernels for rows of a few thousand elements
/// (`Entry::MidRows`).
pub(in crate::driver::cuda) const SOFTMAX_MID_THREADS: u32 = 128;

/// Whether a softmax module has a kernel of [`SOFTMAX_MID_THREADS`]-thread blocks with `ch`
/// chunks per thread (`v` elements per access, at most 32 values per thread).
pub(in crate::driver::cuda) fn softmax_mid_fits(v: usize, ch: u64) -> bool {
    matches!(ch, 4 | 8) && ch * v as u64 <= 32
}

/// `ch` of every kernel of [`SOFTMAX_MID_THREADS`]-thread blocks of a softmax module.
pub(in crate::driver::cuda) fn softmax_mid_layouts(v: usize) -> Vec<u8> {
    [4u8, 8].into_iter().filter(|&ch| softmax_mid_fits(v, ch as u64)).collect()
}

/// Threads per block of the softmax kernels that hold a row's raw elements (`Entry::RawRows`).
pub(in crate::driver::cuda) const SOFTMAX_RAW_THREADS: u32 = 512;

/// `ch` of every raw-register kernel of a softmax module: eight chunks of 16-byte vectors of a
/// half type (32 registers of raw elements per thread, so two blocks of 512 fit an SM where a
/// block of 1,024 holding `float` values fits alone), for half-type rows to half-type or `f32`
/// outputs. Measured on the H200 for rows of 32,768: `softmax_bf16` 25.2 µs / `_f16` 24.5
/// (`log_softmax` 23.7 / 23.2), against 28.4 / 28.1 (27.9 / 27.6) for 1,024 threads of `float`
/// values; blocks of 1,024 or 256 holding raw elements 24.3–30.7.
pub(in crate::driver::cuda) fn softmax_raw_layouts(src: DType, dst: DType) -> Vec<u8> {
    if src.size() == 2 && softmax_vec(src, dst) == 8 {
        vec![8]
    } else {
        Vec::new()
    }
}

/// `ch` of every kernel of 1,024-thread blocks of a softmax module ([`softmax_big_fits`]).
pub(in crate::driver::cuda) fn softmax_big_layouts(v: usize, value_bytes: usize) -> Vec<u8> {
    [2u8, 4, 8, 16].into_iter().filter(|&ch| softmax_big_fits(v, value_bytes, ch as u64)).collect()
}

/// Bytes of a softmax module's compute type.
pub(in crate::driver::cuda) fn softmax_value_bytes(src: DType, dst: DType) -> usize {
    if src == DType::F64 || dst == DType::F64 {
        8
    } else {
        4
    }
}
