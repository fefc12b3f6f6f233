//! Launch policy of the elementwise kernels, shared by the generator (which compiles each
//! module for it) and `elementwise.rs` (which launches by it): vector widths, fast-kernel masks,
//! the transpose kernel's tiles and the elements each thread takes.

use super::vocab::{Entry, EwOp};
use crate::driver::card::CardProfile;
use crate::dtype::DType;
use crate::kernel::{BinaryOp, UnaryOp};

/// A dtype with the storage type of `d`'s size, for raw fills and copies.
pub(in crate::driver::cuda) fn raw_dtype(d: DType) -> DType {
    match d.size() {
        1 => DType::U8,
        2 => DType::F16,
        4 => DType::I32,
        _ => DType::I64,
    }
}

/// Elements per vector access of an elementwise kernel: 16 bytes of its widest operand.
#[inline]
pub(in crate::driver::cuda) fn ew_vec(op: EwOp, out: DType, ins: [DType; 3]) -> usize {
    let mut widest = out.size();
    for d in &ins[..op.inputs()] {
        widest = widest.max(d.size());
    }
    // Sizes are powers of two: a shift, not a division.
    16 >> widest.trailing_zeros()
}

/// The edge of the transpose kernel's square tiles (`ew_tile`, `TILE` in its module): 64 when no
/// element is wider than 4 bytes and the inputs' tiles fit in 40 KiB of shared memory, else 32.
/// Measured on the H200 with the tile's vector accesses: `add_bf16_transposed` 49.8 µs with 32-tiles,
/// 33.6 with 64; `add_f32_transposed` 67.2 and 55.6; `contiguous_f32_transposed` 44.1 and 37.3;
/// `contiguous_i64_transposed` 67.8 and 68.4 (8-byte types keep 32).
pub(in crate::driver::cuda) fn tile_edge(op: EwOp, out: DType, ins: [DType; 3]) -> u64 {
    let ins = &ins[..op.inputs()];
    // A tile's row is padded to a multiple of 4 bytes plus one word (`TPAD` in the kernel).
    let tile = |d: &DType| 64 * (64 * d.size() + 4 + d.size().saturating_sub(4));
    let shared: usize = ins.iter().map(tile).sum();
    if out.size() <= 4 && ins.iter().all(|d| d.size() <= 4) && shared <= 40 << 10 {
        64
    } else {
        32
    }
}

/// Whether the transpose kernel (`ew_tile`) moves two-byte elements through its tiles in pairs,
/// compiled for at least eight blocks per SM (32 registers, every thread slot of the SM): for
/// an output and at most two inputs of two bytes (64-tiles). Measured on the H200 ([4096, 4096],
/// transposed operand): `contiguous_bf16_transposed` 22.95 µs with one element per shared
/// access (48 registers), 21.34 in pairs with six blocks (40), 20.62 in pairs with eight;
/// `add_bf16_transposed` 33.67 / 32.32 / 29.34; `div_bf16_transposed` 36.76 / 34.74 / 31.50 (16
/// bytes of spills). Other modules keep one element per access and the compiler's registers:
/// eight blocks cost `add_f32_transposed` 55.5 → 82.8 µs (80 bytes of spills), six 55.5 → 63.4,
/// and the pairs' registers a `where` of three tiles one block per SM.
pub(in crate::driver::cuda) fn tile_pairs(op: EwOp, out: DType, ins: [DType; 3]) -> bool {
    let edge = tile_edge(op, out, ins);
    let ins = &ins[..op.inputs()];
    edge == 64 && out.size() == 2 && ins.len() <= 2 && ins.iter().all(|d| d.size() == 2)
}

/// Vectors each thread of a fast kernel takes over a large tensor (the launch caps it so that
/// the grid still fills the device: `elementwise.rs`): more than one for the functions of many
/// instructions, whose loads then overlap the math of the vectors before them. Measured on the
/// H200 over [4096, 4096] (docs/gpu-runs.md, session 7's kernel probes): `sin`, `cos`, `gelu` of a
/// half type and f16 `tanh` gain 4–7 % with four; `exp`, `sigmoid`, bf16 `tanh` and `pow` of a
/// half type, and f32 `gelu`, 2–3 % with two; f32 `pow` 7 % with four; the cheap functions lose
/// a little with more. This is the most a module is compiled for (`unrolled`); the launch takes
/// the card's own number for the functions of [`ew_heavy`] ([`fast_choice`]).
pub(in crate::driver::cuda) fn ew_per_thread(op: EwOp, out: DType, vec: usize) -> u64 {
    let half = vec >= 8 && matches!(out, DType::F16 | DType::BF16);
    match op {
        EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Gelu) if half => 4,
        EwOp::Unary(UnaryOp::Tanh) if half => 2 + 2 * (out == DType::F16) as u64,
        EwOp::Unary(UnaryOp::Exp | UnaryOp::Sigmoid | UnaryOp::GeluTanh) if half => 2,
        EwOp::Binary(BinaryOp::Pow, c) if c.is_float() => {
            if half {
                2
            } else if out == DType::F32 {
                4
            } else {
                1
            }
        }
        EwOp::Unary(UnaryOp::Gelu) if out == DType::F32 => 2,
        _ => 1,
    }
}

/// Whether `op` is one of the functions whose vectors per thread depend on the card: compute-bound
/// on a card of much bandwidth, memory-bound on one of less (`driver::card`, `heavy_vectors`):
/// half-type `sin` and `cos`, f16 `tanh` and f32 `pow`, the cases of the H100's op matrix below
/// PyTorch with [`ew_per_thread`]'s four (session 21: 0.94, 0.98, 0.99).
pub(in crate::driver::cuda) fn ew_heavy(op: EwOp, out: DType, vec: usize) -> bool {
    let half = matches!(out, DType::F16 | DType::BF16);
    op.card_vectors(out) && (vec >= 8 || !half)
}

/// Whether `op` is one of [`ew_heavy`]'s functions that stay compute-bound on a card of less
/// bandwidth (the H100): bf16 `sin` and `cos`, whose reduction of a wider range takes 11 % more
/// instructions than f16's (`driver::card`, `heavy_vectors` and `mid_vectors`).
pub(in crate::driver::cuda) fn ew_heaviest(op: EwOp, out: DType) -> bool {
    matches!(op, EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos)) && out == DType::BF16
}

/// The fast kernel of `op` for broadcast `mask` and the vectors each of its threads takes on this
/// card, from one read of the card profile (`card()`, called only for the functions of
/// [`ew_heavy`]: op dispatch is hot). For those, the kernel that takes one vector at a time
/// ([`Entry::FastOne`]) when `heavy_unroll` is 0, else the module's own ([`Entry::Fast`]), and
/// `heavy_vectors` for [`ew_heaviest`]'s functions, `mid_vectors` for the others; for every other
/// function [`Entry::Fast`] and [`ew_per_thread`].
pub(in crate::driver::cuda) fn fast_choice(
    op: EwOp,
    out: DType,
    vec: usize,
    mask: u8,
    card: impl FnOnce() -> CardProfile,
) -> (Entry, u64) {
    if !ew_heavy(op, out, vec) {
        return (Entry::Fast(mask), ew_per_thread(op, out, vec));
    }
    let c = card();
    let entry = if c.heavy_unroll == 0 { Entry::FastOne(mask) } else { Entry::Fast(mask) };
    let v = if ew_heaviest(op, out) { c.heavy_vectors } else { c.mid_vectors };
    (entry, v.max(1) as u64)
}

/// Whether the fast kernel's grid-stride loop takes two vectors at a time: when a thread takes
/// several ([`ew_per_thread`]), and otherwise where the unrolled loop's registers cost nothing
/// (it runs only on tensors past the grid's cap, but its registers limit every launch's
/// occupancy): not for the functions of many instructions, f32 `sigmoid` and `log` among them
/// (the unrolled loop cost f32 `sigmoid` 8 %).
pub(in crate::driver::cuda) fn unrolled(op: EwOp, out: DType, vec: usize) -> bool {
    if ew_per_thread(op, out, vec) > 1 {
        return true;
    }
    match op {
        EwOp::Binary(BinaryOp::Pow, c) => !c.is_float(),
        EwOp::Binary(BinaryOp::Div, c) if vec >= 8 => !c.is_float(),
        EwOp::Unary(UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Gelu) if vec >= 8 => false,
        EwOp::Unary(UnaryOp::Tanh | UnaryOp::Sqrt) if vec >= 8 => out != DType::F16,
        EwOp::Unary(UnaryOp::Sigmoid | UnaryOp::Log | UnaryOp::GeluTanh) if out == DType::F32 => false,
        _ => true,
    }
}
