//! Tests of the strided kernel's lanes without a GPU: the policy's choice for the layouts a
//! transformer produces (and the ones that must fall back), and the kernel's index arithmetic,
//! mirrored on the host over the parameters the launch passes, against every element's offsets
//! computed from the views themselves.

use super::ctx::{addr, collapse, Dims};
use super::elementwise::memory_order;
use super::strided::{batched_tile, magic_divider, strided_dims, strided_lane, Operands, StridedDims, StridedLane};
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::kernel::BufferView;
use std::collections::HashMap;

/// A view of `dtype` at the 256-byte aligned address `base` plus `offset` elements.
fn view(dtype: DType, shape: &[usize], strides: &[usize], offset: usize) -> BufferView {
    BufferView { ptr: DevicePtr(1 << 20), dtype, shape: shape.into(), strides: strides.into(), offset }
}

/// Row-major strides of `shape`.
fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    st
}

/// `src`'s dims permuted by `perm` (as `Tensor::permute`).
fn permuted(src: &BufferView, perm: &[usize]) -> BufferView {
    BufferView {
        shape: perm.iter().map(|&d| src.shape[d]).collect(),
        strides: perm.iter().map(|&d| src.strides[d]).collect(),
        ..src.clone()
    }
}

/// What the launch computes for `dst = f(ins)` on the strided kernel: the collapsed dims in the
/// output's memory order, the lane, and the kernel's parameters (the module's vectors of 16
/// bytes of the widest operand).
fn plan(dst: &BufferView, ins: &[&BufferView], lanes: u32) -> (Dims<4>, StridedLane, StridedDims) {
    let (shape, views) = memory_order(dst, ins);
    let mut strides: [Option<&[usize]>; 4] = [None; 4];
    for (slot, v) in strides.iter_mut().zip(&views) {
        *slot = Some(v);
    }
    let d = collapse(&shape, strides, |_| true).expect("dims collapse");
    let mut ops = Operands { addr: [addr(dst), 0, 0, 0], size: [dst.dtype.size(), 1, 1, 1], nin: ins.len() };
    let mut widest = dst.dtype.size();
    for (k, v) in ins.iter().enumerate() {
        ops.addr[k + 1] = addr(v);
        ops.size[k + 1] = v.dtype.size();
        widest = widest.max(v.dtype.size());
    }
    let lane = strided_lane(&d, &ops, 16 / widest, lanes);
    (d, lane, strided_dims(&d, lane))
}

/// The kernel's offsets of item `i` (`s_offsets` in `cu/elementwise.cu`), in 32-bit
/// multiply-shift arithmetic when `s.div`, else by division.
fn item_offsets(s: &StridedDims, i: u64) -> [i64; 4] {
    let mut o = [0i64; 4];
    let mut add = |k: i64, d: usize| {
        for (x, st) in o.iter_mut().zip(&s.st) {
            *x += k * st[d];
        }
    };
    let n = s.ndim as usize;
    if s.div != 0 {
        let mut rem = u32::try_from(i).expect("32-bit items");
        for d in 0..n.saturating_sub(1) {
            let hi = ((rem as u64 * s.magic[d] as u64) >> 32) as u32;
            let q = ((hi as u64 + rem as u64) >> s.shift[d]) as u32;
            add((rem - q * s.shape[d] as u32) as i64, d);
            rem = q;
        }
        if n > 0 {
            add(rem as i64, n - 1);
        }
    } else {
        let mut rem = i;
        for d in 0..n {
            add((rem % s.shape[d] as u64) as i64, d);
            rem /= s.shape[d] as u64;
        }
    }
    o
}

/// Every element the kernel writes, as `output offset -> input offsets`, by running its item
/// loop on the host (`vec` elements per item in the vector lane), checking each vector access's
/// alignment on the way.
fn kernel_map(s: &StridedDims, lane: StridedLane, n: u64, bases: [(u64, usize); 4]) -> HashMap<i64, [i64; 3]> {
    let v = lane.vec as i64;
    let mut map = HashMap::new();
    for i in 0..n / lane.vec as u64 {
        let o = item_offsets(s, i);
        if lane.vec > 1 {
            assert_eq!(s.st[0][0], v, "the output is dense along dim 0");
            for (k, &(base, size)) in bases.iter().enumerate() {
                if base != 0 && (k == 0 || s.st[k][0] == v) {
                    let at = base as i64 + o[k] * size as i64;
                    assert_eq!(at % (v * size as i64), 0, "operand {k}'s vector at {at} is misaligned");
                }
            }
        }
        for j in 0..v {
            let ins = [1, 2, 3].map(|k| o[k] + j * (s.st[k][0] / v));
            assert!(map.insert(o[0] + j, ins).is_none(), "output element {} written twice", o[0] + j);
        }
    }
    map
}

/// The same map from the views: every logical index's offsets (relative to each view's start).
fn view_map(dst: &BufferView, ins: &[&BufferView]) -> HashMap<i64, [i64; 3]> {
    let n: usize = dst.shape.iter().product();
    let mut map = HashMap::new();
    for flat in 0..n {
        let (mut rem, mut o) = (flat, [0i64; 4]);
        for d in (0..dst.shape.len()).rev() {
            let idx = (rem % dst.shape[d]) as i64;
            rem /= dst.shape[d];
            o[0] += idx * dst.strides[d] as i64;
            for (k, v) in ins.iter().enumerate() {
                o[k + 1] += idx * v.strides[d] as i64;
            }
        }
        map.insert(o[0], [o[1], o[2], o[3]]);
    }
    map
}

/// Runs the plan for `dst = f(ins)` with `lanes` and checks the kernel's map against the views';
/// returns the lane.
#[track_caller]
fn check(dst: &BufferView, ins: &[&BufferView], lanes: u32) -> StridedLane {
    let (_, lane, s) = plan(dst, ins, lanes);
    let n: u64 = dst.shape.iter().product::<usize>() as u64;
    let mut bases = [(addr(dst), dst.dtype.size()), (0, 1), (0, 1), (0, 1)];
    for (k, v) in ins.iter().enumerate() {
        bases[k + 1] = (addr(v), v.dtype.size());
    }
    let got = kernel_map(&s, lane, n, bases);
    let want = view_map(dst, ins);
    assert_eq!(got.len(), want.len(), "elements written");
    for (o, w) in &want {
        let g = got.get(o).unwrap_or_else(|| panic!("output element {o} not written"));
        assert_eq!(&g[..ins.len()], &w[..ins.len()], "inputs of output element {o}");
    }
    lane
}

/// `[B, H, T, E]` → `[B, T, H, E]` (attention's output to the block's rows) takes vectors for
/// every dtype when E is a multiple of the vector width, elements for an odd E, and both lanes
/// give every element's offsets exactly once.
#[test]
fn head_permutes_take_vectors_where_the_head_dim_allows() {
    for (dtype, vec) in [(DType::BF16, 8), (DType::F16, 8), (DType::F32, 4), (DType::I64, 2)] {
        for (e, vector) in [(64, true), (8, true), (7, false), (2 * vec + 1, false)] {
            let shape = [2usize, 3, 5, e];
            let src = view(dtype, &shape, &dense_strides(&shape), 0);
            let x = permuted(&src, &[0, 2, 1, 3]);
            let dst = view(dtype, &x.shape, &dense_strides(&x.shape), 0);
            for lanes in 0..4 {
                let lane = check(&dst, &[&x], lanes);
                let want = if vector && lanes & 1 != 0 { vec } else { 1 };
                assert_eq!(lane, StridedLane { vec: want, magic: lanes & 2 != 0 }, "{dtype} E={e} lanes {lanes}");
            }
        }
    }
}

/// Permutes of three to five dims, as the output's memory orders them: vectors when its
/// innermost dim is a whole number of vectors (the input's dense, or gathered along it),
/// elements otherwise.
#[test]
fn permutes_of_three_to_five_dims_agree_with_the_views() {
    let cases: [(&[usize], &[usize], bool); 8] = [
        (&[4, 6, 16], &[1, 0, 2], true),
        (&[4, 6, 16], &[2, 1, 0], true),
        (&[5, 6, 16], &[2, 1, 0], false),
        (&[3, 4, 5, 8], &[2, 0, 1, 3], true),
        (&[3, 4, 5, 8], &[0, 1, 3, 2], false),
        (&[2, 3, 4, 5, 16], &[4, 3, 2, 1, 0], false),
        (&[2, 3, 4, 5, 16], &[3, 1, 0, 2, 4], true),
        (&[2, 3, 2, 5, 24], &[0, 3, 2, 1, 4], true),
    ];
    for (shape, perm, vector) in cases {
        let src = view(DType::F32, shape, &dense_strides(shape), 0);
        let x = permuted(&src, perm);
        let dst = view(DType::F32, &x.shape, &dense_strides(&x.shape), 0);
        assert_eq!(check(&dst, &[&x], 3).vec > 1, vector, "{shape:?} permuted {perm:?}");
        check(&dst, &[&x], 0);
    }
}

/// A base moved off the vector boundary (`narrow` of the innermost dim) in the output or an
/// input falls back to elements; a broadcast input (stride 0) and a number keep the vectors.
#[test]
fn misaligned_bases_fall_back_and_broadcasts_keep_vectors() {
    let shape = [2usize, 3, 4, 16];
    let big = [2usize, 3, 4, 17];
    let src = view(DType::BF16, &big, &dense_strides(&big), 1);
    let x = permuted(&BufferView { shape: shape.into(), ..src.clone() }, &[0, 2, 1, 3]);
    let dst = view(DType::BF16, &x.shape, &dense_strides(&x.shape), 0);
    assert_eq!(check(&dst, &[&x], 3).vec, 1, "an input narrowed by one element");
    let src = view(DType::BF16, &shape, &dense_strides(&shape), 8);
    let x = permuted(&src, &[0, 2, 1, 3]);
    assert_eq!(check(&dst, &[&x], 3).vec, 8, "narrowed by a whole vector");
    let moved = BufferView { offset: 3, ..dst.clone() };
    assert_eq!(check(&moved, &[&x], 3).vec, 1, "a misaligned output");
    // add(x.permute, row broadcast over [B, T, H], a column broadcast along E), and a number.
    let row = view(DType::BF16, &x.shape, &[0, 0, 0, 1], 0);
    let col = view(DType::BF16, &x.shape, &[0, 4, 1, 0], 0);
    assert_eq!(check(&dst, &[&x, &row], 3).vec, 8, "a broadcast row");
    assert_eq!(check(&dst, &[&x, &col, &row], 3).vec, 8, "a value per vector");
    let number = BufferView { ptr: DevicePtr(0), strides: [0, 0, 0, 0].into(), ..row.clone() };
    assert_eq!(check(&dst, &[&x, &number], 3).vec, 8, "a number");
    // Gathered along dim 0 (a transposed input of three dims): vectors of the output.
    let g = permuted(&view(DType::BF16, &[2, 16, 12], &dense_strides(&[2, 16, 12]), 0), &[0, 2, 1]);
    let out = view(DType::BF16, &g.shape, &dense_strides(&g.shape), 0);
    assert_eq!(check(&out, &[&g], 3).vec, 8, "a gathered input");
    // A transposed output is taken in its memory order (dense again); every other element of
    // a row is not dense in any order: elements.
    let t = permuted(&out, &[0, 2, 1]);
    let xin = view(DType::BF16, &t.shape, &dense_strides(&t.shape), 0);
    let same = permuted(&view(DType::BF16, &[2, 12, 16], &dense_strides(&[2, 12, 16]), 0), &[0, 2, 1]);
    assert_eq!(check(&t, &[&xin, &same], 3).vec, 8, "a transposed output, in its memory order");
    let gaps = view(DType::BF16, &[2, 12, 16], &[384, 32, 2], 1);
    assert_eq!(check(&gaps, &[&g, &out], 3).vec, 1, "an output with gaps");
}

/// Mixed widths take the widest operand's vectors (a cast bf16 → f32: 4 elements), and a
/// shape with no dims left after collapsing (one element) takes neither lane.
#[test]
fn mixed_widths_and_single_elements() {
    let shape = [2usize, 3, 4, 8];
    let x = permuted(&view(DType::BF16, &shape, &dense_strides(&shape), 0), &[0, 2, 1, 3]);
    let dst = view(DType::F32, &x.shape, &dense_strides(&x.shape), 0);
    assert_eq!(check(&dst, &[&x], 3).vec, 4);
    let one = view(DType::F32, &[1, 1], &[7, 3], 0);
    let a = view(DType::F32, &[1, 1], &[5, 2], 0);
    assert_eq!(check(&one, &[&a], 3), StridedLane { vec: 1, magic: false });
}

/// The multiply-shift division agrees with `/` (the kernel's arithmetic, in 64 bits).
#[test]
fn magic_division_divides() {
    let div = |x: u32, (m, s): (u32, u32)| ((((x as u64) * (m as u64)) >> 32) + x as u64) >> s;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let ds =
        [1u64, 2, 3, 7, 128, 1000, 4096, 4097, 65535, 1 << 20, (1 << 31) - 1, 1 << 31, (1 << 31) + 1, u32::MAX as u64];
    for &d in &ds {
        let md = magic_divider(d);
        for x in [0u32, 1, d as u32 - 1, d as u32, u32::MAX, u32::MAX - 1] {
            assert_eq!(div(x, md), x as u64 / d, "{x} / {d}");
        }
        for _ in 0..20_000 {
            let x = next() as u32;
            assert_eq!(div(x, md), x as u64 / d, "{x} / {d}");
        }
    }
    for _ in 0..2_000 {
        let d = (next() % u32::MAX as u64) + 1;
        let md = magic_divider(d);
        let x = next() as u32;
        assert_eq!(div(x, md), x as u64 / d, "{x} / {d}");
    }
}

/// Batched transposes of matrices at least 16 on a side go to the tiled kernel (with its lane
/// allowed), smaller ones, four-dim layouts and layouts with no transposed input do not.
#[test]
fn batched_transposes_of_large_enough_matrices_are_tiled() {
    let tiled = |shape: &[usize], perm: &[usize], lanes: u32| {
        let x = permuted(&view(DType::BF16, shape, &dense_strides(shape), 0), perm);
        let dst = view(DType::BF16, &x.shape, &dense_strides(&x.shape), 0);
        let (d, _, _) = plan(&dst, &[&x], lanes);
        batched_tile(&d, 1, lanes)
    };
    assert!(tiled(&[6, 64, 32], &[0, 2, 1], 7), "k.transpose(-2, -1) of [B * H, T, E]");
    assert!(tiled(&[2, 3, 33, 17], &[0, 1, 3, 2], 4), "[B, H] collapse into one batch dim");
    assert!(!tiled(&[6, 64, 32], &[0, 2, 1], 3), "the lane off");
    assert!(!tiled(&[6, 64, 8], &[0, 2, 1], 7), "a matrix 8 wide");
    assert!(!tiled(&[2, 3, 64, 32], &[1, 0, 3, 2], 7), "four dims after collapsing");
    assert!(!tiled(&[2, 3, 64, 32], &[0, 2, 1, 3], 7), "the inner dim kept");
    // Both inputs transposed against a third, dense one: the output stays the reference.
    let x = permuted(&view(DType::F32, &[4, 32, 48], &dense_strides(&[4, 32, 48]), 0), &[0, 2, 1]);
    let y = view(DType::F32, &x.shape, &dense_strides(&x.shape), 0);
    let dst = view(DType::F32, &x.shape, &dense_strides(&x.shape), 0);
    let (d, _, _) = plan(&dst, &[&y, &x], 7);
    assert!(batched_tile(&d, 2, 7), "a dense and a transposed input");
    let (d, _, _) = plan(&dst, &[&y, &y], 7);
    assert!(!batched_tile(&d, 2, 7), "no transposed input");
}
