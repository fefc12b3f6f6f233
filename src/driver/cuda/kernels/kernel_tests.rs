//! Tests of the tensor kernels of the CUDA driver.
//!
//! * With a GPU: every op family against the CPU kernels (`src/kernels/cpu`) on random data, each
//!   output buffer compared whole (so bytes between strided elements must be left alone), over
//!   the dispatch paths: contiguous (aligned and not), broadcast, strided, split reductions,
//!   batched and transposed matrix products.

use super::nvrtc::nvrtc_present;
use crate::driver::cuda::{backends, CudaDriver};
use crate::driver::{DevicePtr, Driver, StreamId};
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::KernelOp;
use crate::kernel::{BinaryOp, BufferView, DenseBinary, ReduceOp, UnaryOp};
use crate::kernels::cpu::{self, Memory};
use crate::scalar::Scalar;
use half::{bf16, f16};
use std::cell::RefCell;
use std::time::Duration;

/// The device addresses of a test, mirrored in host buffers for the CPU kernels.
struct Mirror(RefCell<Vec<(u64, Vec<u8>)>>);

impl Mirror {
    fn find(&self, at: DevicePtr, len: usize) -> (usize, usize) {
        let bufs = self.0.borrow();
        let i = bufs
            .iter()
            // `at` itself lies in the buffer: one ending where another starts does not hold it.
            .position(|(b, v)| at.0 >= *b && at.0 < b + v.len() as u64 && at.0 + len as u64 <= b + v.len() as u64)
            .expect("a mirrored range");
        (i, (at.0 - bufs[i].0) as usize)
    }
}

impl Memory for Mirror {
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
        let (i, o) = self.find(at, out.len());
        out.copy_from_slice(&self.0.borrow()[i].1[o..o + out.len()]);
        Ok(())
    }
    fn write_runs(&self, at: DevicePtr, span: &[u8], runs: &[(usize, usize)]) -> Result<()> {
        let (i, o) = self.find(at, span.len());
        let mut bufs = self.0.borrow_mut();
        for &(s, l) in runs {
            bufs[i].1[o + s..o + s + l].copy_from_slice(&span[s..s + l]);
        }
        Ok(())
    }
}

/// The tests' random numbers: rand's seeded `StdRng`, as every other test of the crate.
struct Rng(rand::rngs::StdRng);

impl Rng {
    fn seeded(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }
    fn next(&mut self) -> u64 {
        rand::RngExt::random(&mut self.0)
    }
    fn unit(&mut self) -> f64 {
        rand::RngExt::random(&mut self.0)
    }
}

/// `n` random elements of `dtype` as bytes: floats in ±4 (some NaN if `nan`), small integers.
fn random(rng: &mut Rng, dtype: DType, n: usize, nan: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        let x = rng.unit() * 8.0 - 4.0;
        let x = if nan && rng.next().is_multiple_of(17) { f64::NAN } else { x };
        let i = (rng.next() % 41) as i64 - 20;
        match dtype {
            DType::F32 => out.extend((x as f32).to_ne_bytes()),
            DType::F64 => out.extend(x.to_ne_bytes()),
            DType::F16 => out.extend(crate::kernels::cpu::f64_to_f16(x).to_ne_bytes()),
            DType::BF16 => out.extend(crate::kernels::cpu::f64_to_bf16(x).to_ne_bytes()),
            DType::I32 => out.extend((i as i32).to_ne_bytes()),
            DType::I64 => out.extend(i.to_ne_bytes()),
            DType::U8 => out.push(rng.next() as u8),
            DType::Bool => out.push((rng.next() & 1) as u8),
        }
    }
    out
}

/// Element `i` of `bytes` as `f64`.
fn value(bytes: &[u8], dtype: DType, i: usize) -> f64 {
    let s = dtype.size();
    let b = &bytes[i * s..(i + 1) * s];
    match dtype {
        DType::F32 => f32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DType::F64 => f64::from_ne_bytes(b.try_into().unwrap()),
        DType::F16 => f16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DType::BF16 => bf16::from_ne_bytes(b.try_into().unwrap()).to_f64(),
        DType::I32 => i32::from_ne_bytes(b.try_into().unwrap()) as f64,
        DType::I64 => i64::from_ne_bytes(b.try_into().unwrap()) as f64,
        DType::U8 | DType::Bool => b[0] as f64,
    }
}

/// A driver, a stream and the buffers of one test.
struct Bench {
    d: CudaDriver,
    s: StreamId,
    rng: Rng,
    mirror: Mirror,
}

impl Bench {
    fn new() -> Option<Bench> {
        let d = CudaDriver::default();
        if d.device_count() == 0 || !nvrtc_present() {
            crate::testing::skip(1, &d.unavailable_reason().unwrap_or_else(|| "libnvrtc not found".into()));
            return None;
        }
        let s = d.create_stream(0, 0).unwrap();
        Some(Bench { d, s, rng: Rng::seeded(0x9E37_79B9_7F4A_7C15), mirror: Mirror(RefCell::new(Vec::new())) })
    }

    /// A device buffer of `n` random elements (mirrored).
    fn buffer(&mut self, dtype: DType, n: usize, nan: bool) -> DevicePtr {
        let bytes = random(&mut self.rng, dtype, n, nan);
        let p = self.d.malloc(0, bytes.len().max(1)).unwrap();
        self.d.memcpy_htod(p, &bytes, self.s).unwrap();
        self.mirror.0.borrow_mut().push((p.0, bytes));
        p
    }

    /// A view of `ptr` with `shape`, `strides`, `offset`.
    fn view(ptr: DevicePtr, dtype: DType, shape: &[usize], strides: &[usize], offset: usize) -> BufferView {
        BufferView { ptr, dtype, shape: shape.into(), strides: strides.into(), offset }
    }

    /// A contiguous view of a new random buffer.
    fn dense(&mut self, dtype: DType, shape: &[usize]) -> BufferView {
        let n = shape.iter().product::<usize>();
        let p = self.buffer(dtype, n, false);
        let mut strides = vec![1; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        Self::view(p, dtype, shape, &strides, 0)
    }

    /// Runs `op` on the GPU and the CPU and compares the output's whole buffer within `tol`
    /// (relative, for floats; 0: exact).
    #[track_caller]
    fn check(&mut self, op: &KernelOp, tol: f64) {
        self.check_abs(op, tol, 0.0)
    }

    /// [`Bench::check`] with an absolute tolerance `abs` as well.
    #[track_caller]
    fn check_abs(&mut self, op: &KernelOp, tol: f64, abs: f64) {
        self.d.launch(self.s, op).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
        self.compare(op, tol, abs);
    }

    /// Runs a dense binary op through the driver's short path and compares it with the CPU
    /// kernels' run of the same op as a [`KernelOp`].
    #[track_caller]
    fn check_dense(&mut self, op: &DenseBinary, tol: f64) {
        self.d.launch_dense_binary(self.s, op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        self.compare(&op.to_kernel_op(), tol, 0.0);
    }

    /// Runs `op` (already launched on the GPU) on the CPU and compares the output buffers.
    #[track_caller]
    fn compare(&mut self, op: &KernelOp, tol: f64, abs: f64) {
        cpu::execute(op, &self.mirror).unwrap();
        for out in op.outputs() {
            let (i, _) = self.mirror.find(out.ptr, 0);
            let (base, want) = self.mirror.0.borrow()[i].clone();
            let mut got = vec![0u8; want.len()];
            // The whole buffer, from its start (the view's address may lie inside it).
            self.d.memcpy_dtoh(&mut got, DevicePtr(base), self.s).unwrap();
            let dt = out.dtype;
            for k in 0..want.len() / dt.size() {
                let (g, w) = (value(&got, dt, k), value(&want, dt, k));
                let ok =
                    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= (tol * w.abs()).max(tol * 1e-6).max(abs);
                assert!(ok, "{} ({op:?}): element {k} is {g}, want {w}", op.name());
            }
            // Keep the GPU's bytes as the mirror's, so later ops read what the GPU holds.
            self.mirror.0.borrow_mut()[i].1 = got;
        }
    }
}

fn tol(d: DType) -> f64 {
    match d {
        DType::F64 => 1e-12,
        DType::F32 => 4e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// [`tol`], doubled for GELU's tanh approximation: its `e^(-2u)` carries the few roundings of
/// `u = √(2/π) (x + 0.044715 x³)` times `|2u|` (up to 11 over the tests' x in [-4, 4]) into the
/// result's relative error (about 3e-6 at worst in `f32`).
fn gelu_tanh_tol(op: UnaryOp, d: DType) -> f64 {
    tol(d) * if op == UnaryOp::GeluTanh { 2.0 } else { 1.0 }
}

/// One step of `d` in its subnormal range (the smallest positive value): an absolute tolerance
/// of one ulp where the relative [`tol`] of a normal number is narrower than a step (softmax over
/// a vocabulary's length gives f16 results near 2e-5, below f16's normal range).
fn subnormal_step(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
        _ => 0.0,
    }
}

#[test]
fn elementwise_paths_contiguous_unaligned_broadcast_strided_and_large() {
    let Some(mut b) = Bench::new() else { return };
    let f = DType::F32;
    for n in [1usize, 16, 1000, 3 << 20] {
        let (x, y, z) = (b.dense(f, &[n]), b.dense(f, &[n]), b.dense(f, &[n]));
        b.check(
            &KernelOp::Binary { op: BinaryOp::Add, lhs: x.clone(), rhs: y.clone(), dst: z.clone(), compute: f },
            0.0,
        );
        // Unaligned: one element in.
        let m = n - 1;
        let sh = |v: &BufferView| BufferView { shape: [m].into(), offset: 1, ..v.clone() };
        let op = KernelOp::Binary {
            op: BinaryOp::Mul,
            lhs: sh(&x),
            rhs: BufferView { shape: [m].into(), ..y.clone() },
            dst: sh(&z),
            compute: f,
        };
        b.check(&op, 0.0);
        // A broadcast scalar, in place.
        let s = BufferView { shape: [n].into(), strides: [0].into(), ..y.clone() };
        b.check(&KernelOp::Binary { op: BinaryOp::Sub, lhs: x.clone(), rhs: s, dst: x.clone(), compute: f }, 0.0);
    }
    // A broadcast row, a transposed operand and a strided output (every other element).
    let (r, c) = (37, 129);
    let a = b.dense(f, &[r, c]);
    let row = b.dense(f, &[c]);
    let t = b.dense(f, &[c, r]);
    let wide = b.dense(f, &[r, 2 * c]);
    let out = Bench::view(wide.ptr, f, &[r, c], &[2 * c, 2], 1);
    let row_b = Bench::view(row.ptr, f, &[r, c], &[0, 1], 0);
    let t_v = Bench::view(t.ptr, f, &[r, c], &[1, r], 0);
    b.check(&KernelOp::Binary { op: BinaryOp::Add, lhs: a.clone(), rhs: row_b, dst: out.clone(), compute: f }, 0.0);
    b.check(
        &KernelOp::Binary { op: BinaryOp::Maximum, lhs: t_v.clone(), rhs: a.clone(), dst: out.clone(), compute: f },
        0.0,
    );
    b.check(&KernelOp::CopyStrided { src: t_v, dst: out.clone() }, 0.0);
    b.check(&KernelOp::Fill { dst: out, value: Scalar::Float(2.5) }, 0.0);
}

/// The short path for dense binary ops (what `Tensor::add` of two contiguous tensors takes)
/// agrees with the CPU: aligned and unaligned operands, mixed input dtypes, comparisons.
#[test]
fn dense_binary_ops_take_the_short_path_and_agree_with_the_cpu() {
    let Some(mut b) = Bench::new() else { return };
    use DType::*;
    for n in [1usize, 16, 1001, 1 << 20] {
        for (op, lhs, rhs, compute, out) in [
            (BinaryOp::Add, F32, F32, F32, F32),
            (BinaryOp::Mul, F16, F16, F16, F16),
            (BinaryOp::Sub, BF16, BF16, BF16, BF16),
            (BinaryOp::Div, F64, F64, F64, F64),
            (BinaryOp::Add, I32, I64, I64, I64),
            (BinaryOp::Maximum, U8, U8, U8, U8),
            (BinaryOp::Lt, F32, F32, F32, Bool),
        ] {
            let (x, y, z) = (b.buffer(lhs, n + 1, false), b.buffer(rhs, n + 1, false), b.buffer(out, n + 1, false));
            let dense = |shift: u64| DenseBinary {
                op,
                compute,
                n,
                dst: (DevicePtr(z.0 + shift * out.size() as u64), out),
                lhs: (DevicePtr(x.0 + shift * lhs.size() as u64), lhs),
                rhs: (DevicePtr(y.0 + shift * rhs.size() as u64), rhs),
                rhs_value: None,
            };
            // Aligned (16-byte vectors), then one element in (one element at a time).
            b.check_dense(&dense(0), tol(compute));
            b.check_dense(&dense(1), tol(compute));
            // A number as the right operand (its address unused).
            for shift in [0, 1] {
                let number =
                    DenseBinary { rhs: (DevicePtr(0), rhs), rhs_value: Some(Scalar::Float(-1.25)), ..dense(shift) };
                b.check_dense(&number, tol(compute));
            }
        }
    }
    let overflowing = DenseBinary {
        op: BinaryOp::Add,
        compute: F32,
        n: usize::MAX / 2,
        dst: (DevicePtr(1 << 40), F32),
        lhs: (DevicePtr(1 << 40), F32),
        rhs: (DevicePtr(1 << 40), F32),
        rhs_value: None,
    };
    assert!(b.d.launch_dense_binary(b.s, &overflowing).is_err(), "an extent that overflows is refused");
}

/// A binary op with a number as its second operand (the number in the launch's parameters) agrees
/// with the CPU for every dtype, over the fast path (dense, one element, 0-dim) and the strided
/// path (a transposed operand).
#[test]
fn binary_ops_with_a_number_for_every_dtype_and_path() {
    let Some(mut b) = Bench::new() else { return };
    use DType::*;
    for d in DType::ALL {
        for (value, rhs_dtype) in [(Scalar::Float(-2.5), d), (Scalar::Int(3), F64)] {
            for op in [BinaryOp::Add, BinaryOp::Maximum, BinaryOp::Lt] {
                let compute = if rhs_dtype == F64 && d != F64 { F64 } else { d };
                let out = if op == BinaryOp::Lt { Bool } else { compute };
                let t = b.dense(d, &[37, 129]);
                let transposed = Bench::view(t.ptr, d, &[129, 37], &[1, 129], 0);
                for (lhs, shape) in [
                    (b.dense(d, &[1000]), vec![1000]),
                    (b.dense(d, &[1]), vec![1]),
                    (b.dense(d, &[]), vec![]),
                    (transposed, vec![129, 37]),
                ] {
                    let dst = b.dense(out, &shape);
                    let k = KernelOp::BinaryScalar { op, lhs, value, rhs_dtype, dst, compute };
                    b.check(&k, tol(compute));
                }
            }
        }
    }
}

#[test]
fn casts_fills_and_where_for_every_dtype() {
    let Some(mut b) = Bench::new() else { return };
    for from in DType::ALL {
        for to in DType::ALL {
            let src = b.dense(from, &[9, 70]);
            let dst = b.dense(to, &[9, 70]);
            b.check(&KernelOp::Cast { src: src.clone(), dst: dst.clone() }, 0.0);
            let st = Bench::view(src.ptr, from, &[70, 9], &[1, 70], 0);
            let dt = Bench::view(dst.ptr, to, &[70, 9], &[9, 1], 0);
            b.check(&KernelOp::Cast { src: st, dst: dt }, 0.0);
        }
        let dst = b.dense(from, &[1001]);
        for value in [Scalar::Float(-2.75), Scalar::Int(-3), Scalar::Bool(true), Scalar::Float(f64::NAN)] {
            b.check(&KernelOp::Fill { dst: dst.clone(), value }, 0.0);
        }
        let cond = b.dense(DType::Bool, &[5, 33]);
        let x = b.dense(from, &[5, 33]);
        let y = b.dense(DType::F32, &[33]);
        let yb = Bench::view(y.ptr, DType::F32, &[5, 33], &[0, 1], 0);
        let out = b.dense(from, &[5, 33]);
        b.check(&KernelOp::Where { cond, a: x, b: yb, dst: out }, 0.0);
    }
}

#[test]
fn unary_and_binary_ops_for_every_dtype() {
    let Some(mut b) = Bench::new() else { return };
    let (unary, binary) = (super::source_hash_tests::UNARY, super::source_hash_tests::BINARY);
    for d in DType::ALL {
        let x = b.dense(d, &[3, 333]);
        for op in unary {
            if !d.is_float() && !matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu) {
                continue;
            }
            let out = b.dense(d, &[3, 333]);
            // Gelu's erf form (PyTorch's) cancels in `1 + erf(x/√2)` for x < −3: an absolute
            // error of a few f32 ulp of 1, times |x| / 2.
            let abs = if op == UnaryOp::Gelu && d != DType::F64 { 1e-6 } else { subnormal_step(d) };
            b.check_abs(&KernelOp::Unary { op, src: x.clone(), dst: out }, gelu_tanh_tol(op, d), abs);
        }
        for op in binary {
            // Mixed operand dtypes: the rhs is i64 or f32 converted to the compute dtype.
            for rhs_dtype in [d, DType::I64, DType::Bool] {
                let y = b.dense(rhs_dtype, &[333]);
                let yb = Bench::view(y.ptr, rhs_dtype, &[3, 333], &[0, 1], 0);
                let yd = b.dense(rhs_dtype, &[3, 333]);
                let out_dtype = if op.is_comparison() { DType::Bool } else { d };
                let out = b.dense(out_dtype, &[3, 333]);
                let t = if matches!(op, BinaryOp::Pow) { tol(d) * 4.0 } else { tol(d) };
                b.check(&KernelOp::Binary { op, lhs: x.clone(), rhs: yd, dst: out.clone(), compute: d }, t);
                b.check(&KernelOp::Binary { op, lhs: x.clone(), rhs: yb, dst: out, compute: d }, t);
            }
        }
    }
    // Integer semantics at the edges: wrapping, division by zero, i64::MIN / -1, negative powers.
    let edge: Vec<u8> = [i64::MIN, -1, 0, 2, i64::MAX, 7, -7, 1].iter().flat_map(|x| x.to_ne_bytes()).collect();
    let p = b.d.malloc(0, edge.len()).unwrap();
    b.d.memcpy_htod(p, &edge, b.s).unwrap();
    b.mirror.0.borrow_mut().push((p.0, edge));
    let v = Bench::view(p, DType::I64, &[8], &[1], 0);
    let w = Bench::view(p, DType::I64, &[8, 8], &[1, 0], 0);
    let vv = Bench::view(p, DType::I64, &[8, 8], &[0, 1], 0);
    for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Sub] {
        let out = b.dense(DType::I64, &[8, 8]);
        b.check(&KernelOp::Binary { op, lhs: w.clone(), rhs: vv.clone(), dst: out, compute: DType::I64 }, 0.0);
    }
    let out = b.dense(DType::I64, &[8]);
    b.check(&KernelOp::Unary { op: UnaryOp::Neg, src: v.clone(), dst: out.clone() }, 0.0);
    b.check(&KernelOp::Unary { op: UnaryOp::Abs, src: v, dst: out }, 0.0);
}

/// The functions of many instructions on tensors large enough for the fast kernel to give a
/// thread several vectors (`elementwise_policy::ew_per_thread`), with a tail past the last whole vector.
#[test]
fn heavy_functions_on_large_tensors_take_several_vectors_per_thread() {
    let Some(mut b) = Bench::new() else { return };
    let n = (9 << 20) + 13;
    for d in [DType::F32, DType::BF16, DType::F16] {
        let (x, y, out) = (b.dense(d, &[n]), b.dense(d, &[n]), b.dense(d, &[n]));
        for op in [
            UnaryOp::Sin,
            UnaryOp::Cos,
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
            UnaryOp::Tanh,
            UnaryOp::Exp,
            UnaryOp::Sigmoid,
            UnaryOp::Log,
        ] {
            let abs = if op == UnaryOp::Gelu { 1e-6 } else { subnormal_step(d) };
            b.check_abs(&KernelOp::Unary { op, src: x.clone(), dst: out.clone() }, gelu_tanh_tol(op, d), abs);
        }
        let pow = KernelOp::Binary { op: BinaryOp::Pow, lhs: x.clone(), rhs: y.clone(), dst: out.clone(), compute: d };
        // Half types' `pow` (`pow_half`) is within an ulp of the type, so a subnormal f16 result
        // may be one subnormal step (2^-24) from the CPU's, a relative 1 % near 6e-6.
        let step = if d == DType::F16 { 2f64.powi(-24) } else { 0.0 };
        b.check_abs(&pow, tol(d) * 4.0, step);
    }
}

#[test]
fn reductions_over_every_path() {
    let Some(mut b) = Bench::new() else { return };
    let ops = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin];
    let shape = [5usize, 37, 300];
    for d in DType::ALL {
        let p = b.buffer(d, 5 * 37 * 300, d.is_float());
        // Contiguous, and a permuted view of a [300, 37, 5] buffer.
        let views = [Bench::view(p, d, &shape, &[37 * 300, 300, 1], 0), Bench::view(p, d, &shape, &[1, 5, 5 * 37], 0)];
        for src in views {
            for dims in [vec![2], vec![0], vec![1], vec![0, 2], vec![0, 1, 2]] {
                for op in ops {
                    if op == ReduceOp::Mean && !d.is_float() {
                        continue;
                    }
                    let dst_dtype = match op {
                        ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
                        ReduceOp::Sum if !d.is_float() => DType::I64,
                        _ => d,
                    };
                    let keep: Vec<usize> = (0..3).map(|i| if dims.contains(&i) { 1 } else { shape[i] }).collect();
                    let dst = b.dense(dst_dtype, &keep);
                    b.check(&KernelOp::Reduce { op, src: src.clone(), dst, dims: dims.clone() }, tol(dst_dtype) * 2.0);
                }
            }
        }
    }
    // Long rows (split over blocks), a long column (split over threads), ties.
    for (shape, dims) in [(vec![1usize << 22], vec![0]), (vec![3, 100_000], vec![1]), (vec![100_000, 3], vec![0])] {
        let src = b.dense(DType::F32, &shape);
        for op in ops {
            let keep: Vec<usize> =
                shape.iter().enumerate().map(|(i, &s)| if dims.contains(&i) { 1 } else { s }).collect();
            let dst_dtype = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) { DType::I64 } else { DType::F32 };
            let dst = b.dense(dst_dtype, &keep);
            b.check(&KernelOp::Reduce { op, src: src.clone(), dst, dims: dims.clone() }, 1e-6);
        }
    }
    let ints = b.dense(DType::U8, &[1 << 20]);
    let ties = BufferView { strides: [0].into(), ..ints.clone() };
    let dst = b.dense(DType::I64, &[1]);
    b.check(&KernelOp::Reduce { op: ReduceOp::ArgMax, src: ties, dst: dst.clone(), dims: vec![0] }, 0.0);
    b.check(&KernelOp::Reduce { op: ReduceOp::Sum, src: ints, dst, dims: vec![0] }, 0.0);
}

/// Values and indices of an extreme in one pass (`torch.max(t, dim)`) over every path, with
/// NaNs and ties: rows (warp, block, split block), columns (vector loads and single elements,
/// split over blocks), a middle dim, and outputs of different layouts (two reductions).
#[test]
fn extremes_with_indices_over_every_path() {
    let Some(mut b) = Bench::new() else { return };
    let cases: [(&[usize], usize); 8] = [
        (&[5, 37, 300], 0),
        (&[5, 37, 300], 1),
        (&[5, 37, 300], 2),
        (&[4099, 64], 0),
        (&[4099, 7], 0),
        (&[64, 4099], 1),
        (&[2, 70000], 1),
        (&[1000, 3, 16], 0),
    ];
    for d in DType::ALL {
        for (shape, dim) in cases {
            let n: usize = shape.iter().product();
            let p = b.buffer(d, n, d.is_float());
            let mut strides = vec![1; shape.len()];
            for i in (0..shape.len() - 1).rev() {
                strides[i] = strides[i + 1] * shape[i + 1];
            }
            let src = Bench::view(p, d, shape, &strides, 0);
            let keep: Vec<usize> = (0..shape.len()).map(|i| if i == dim { 1 } else { shape[i] }).collect();
            for max in [true, false] {
                let (values, indices) = (b.dense(d, &keep), b.dense(DType::I64, &keep));
                let op = KernelOp::Extreme { max, src: src.clone(), values, indices, dims: vec![dim] };
                b.check(&op, 0.0);
            }
        }
        // Indices in a layout of their own (every other element of a larger buffer).
        let src = b.dense(d, &[300, 20]);
        let values = b.dense(d, &[1, 20]);
        let wide = b.dense(DType::I64, &[1, 40]);
        let indices = BufferView { shape: [1, 20].into(), strides: [40, 2].into(), ..wide };
        b.check(&KernelOp::Extreme { max: true, src, values, indices, dims: vec![0] }, 0.0);
    }
}

#[test]
fn softmax_rows_columns_and_long_rows() {
    let Some(mut b) = Bench::new() else { return };
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (shape, dim) in
            // Rows of 128, 256 and 25: two rows per warp of 16 lanes (aligned for f32 and for
            // the half types; unaligned) for an odd number of rows.
            [
                (vec![7usize, 300], 1),
                (vec![300, 7], 0),
                (vec![4, 5000], 1),
                (vec![3, 4, 5], 1),
                (vec![9, 3], 1),
                (vec![33, 128], 1),
                (vec![5, 256], 1),
                (vec![7, 25], 1),
            ]
        {
            for log in [false, true] {
                let src = b.dense(d, &shape);
                let dst = b.dense(d, &shape);
                // A log-softmax output near 0 is a difference of O(1) terms summed in the
                // compute type (f32 for the narrow floats, as PyTorch's): its error is absolute.
                let abs = if log && d != DType::F64 { 1e-5 } else { 0.0 };
                b.check_abs(&KernelOp::Softmax { src, dst, dim, log }, tol(d) * 2.0, abs);
            }
        }
    }
}

/// Few long rows split over blocks (`reduce::split_rows`): vocabulary lengths (whole vectors
/// or not, so rows start anywhere in a vector), a view from an offset whose output starts at the
/// same offset (vectors after each row's lead) or at another (element by element), rows strided
/// in the input, and a half-type input into an `f32` output.
#[test]
fn softmax_of_few_long_rows_split_over_blocks() {
    let Some(mut b) = Bench::new() else { return };
    let check = |b: &mut Bench, src: BufferView, dst: BufferView, dim: usize| {
        let d = dst.dtype;
        for log in [false, true] {
            let abs = if log && d != DType::F64 { 1e-5 } else { subnormal_step(d) };
            b.check_abs(&KernelOp::Softmax { src: src.clone(), dst: dst.clone(), dim, log }, tol(d) * 2.0, abs);
        }
    };
    for d in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        for shape in [[8usize, 50257], [1, 128256], [3, 32000], [2, 151936]] {
            let (src, dst) = (b.dense(d, &shape), b.dense(d, &shape));
            check(&mut b, src, dst, 1);
        }
        let (rows, n) = (3, 20001);
        let (sp, dp, dq) =
            (b.buffer(d, rows * n + 3, false), b.buffer(d, rows * n + 3, false), b.buffer(d, rows * n + 3, false));
        let src = Bench::view(sp, d, &[rows, n], &[n, 1], 3);
        check(&mut b, src.clone(), Bench::view(dp, d, &[rows, n], &[n, 1], 3), 1);
        check(&mut b, src, Bench::view(dq, d, &[rows, n], &[n, 1], 0), 1);
        let (sp, dp) = (b.buffer(d, 2 * 2 * 10000, false), b.buffer(d, 2 * 10000, false));
        let strided = Bench::view(sp, d, &[2, 10000], &[20000, 2], 1);
        check(&mut b, strided, Bench::view(dp, d, &[2, 10000], &[10000, 1], 0), 1);
    }
    let (src, dst) = (b.dense(DType::BF16, &[4, 50257]), b.dense(DType::F32, &[4, 50257]));
    check(&mut b, src, dst, 1);
}

/// Many rows of a length that is no multiple of the vector width (`Entry::LeadRows`: a block per
/// row, vectors from each row's first 16-byte boundary), dense and from an offset, and the same
/// rows whose output starts elsewhere (element by element).
#[test]
fn softmax_of_many_rows_of_odd_lengths() {
    let Some(mut b) = Bench::new() else { return };
    for d in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        for (rows, n) in [(300usize, 5001usize), (140, 20001), (150, 1025)] {
            let (sp, dp, dq) =
                (b.buffer(d, rows * n + 1, false), b.buffer(d, rows * n + 1, false), b.buffer(d, rows * n, false));
            for (src, dst) in [
                (Bench::view(sp, d, &[rows, n], &[n, 1], 0), Bench::view(dp, d, &[rows, n], &[n, 1], 0)),
                (Bench::view(sp, d, &[rows, n], &[n, 1], 1), Bench::view(dp, d, &[rows, n], &[n, 1], 1)),
                (Bench::view(sp, d, &[rows, n], &[n, 1], 1), Bench::view(dq, d, &[rows, n], &[n, 1], 0)),
            ] {
                for log in [false, true] {
                    let abs = if log && d != DType::F64 { 1e-5 } else { subnormal_step(d) };
                    let op = KernelOp::Softmax { src: src.clone(), dst: dst.clone(), dim: 1, log };
                    b.check_abs(&op, tol(d) * 2.0, abs);
                }
            }
        }
    }
}

/// The relative tolerance of a matrix product's elements in `d` (cuBLAS's own accumulation).
fn gemm_tol(d: DType) -> f64 {
    match d {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        _ => tol(d) * 2.0,
    }
}

/// Products with a bias `[N]` (`F.linear`'s): cuBLASLt's bias epilogue for a row-major output
/// and a packed, aligned bias (one row as well, which the bias keeps from the gemv kernel), the
/// product and an elementwise add for a column-major output, a strided or unaligned bias and a
/// batch; each against the CPU's product with the bias added before the one rounding.
#[test]
fn matrix_products_with_a_bias_on_every_path() {
    let Some(mut b) = Bench::new() else { return };
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let t = gemm_tol(d);
        let (m, k, n) = (33, 70, 45);
        let (a, w) = (b.dense(d, &[m, k]), b.dense(d, &[k, n]));
        let bias = b.dense(d, &[n]);
        let strided = Bench::view(b.buffer(d, 2 * n + 1, false), d, &[n], &[2], 1);
        let c = b.dense(d, &[m, n]);
        let ct = b.dense(d, &[n, m]);
        let ctv = Bench::view(ct.ptr, d, &[m, n], &[1, m], 0);
        let gemm = |lhs: &BufferView, dst: &BufferView, bias: &BufferView| KernelOp::Gemm {
            lhs: lhs.clone(),
            rhs: w.clone(),
            dst: dst.clone(),
            bias: Some(bias.clone()),
            workspace: None,
        };
        for (dst, bias) in [(&c, &bias), (&ctv, &bias), (&c, &strided)] {
            b.check_abs(&gemm(&a, dst, bias), t, t * 70.0 * 16.0);
        }
        let (row, c1) = (b.dense(d, &[1, k]), b.dense(d, &[1, n]));
        b.check_abs(&gemm(&row, &c1, &bias), t, t * 70.0 * 16.0);
        let (ab, cb) = (b.dense(d, &[3, m, k]), b.dense(d, &[3, m, n]));
        let wb = Bench::view(w.ptr, d, &[3, k, n], &[0, n, 1], 0);
        let op = KernelOp::Gemm { lhs: ab, rhs: wb, dst: cb, bias: Some(bias.clone()), workspace: None };
        b.check_abs(&op, t, t * 70.0 * 16.0);
    }
}

#[test]
fn matrix_products_plain_transposed_batched_broadcast_and_strided() {
    let Some(mut b) = Bench::new() else { return };
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let t = gemm_tol(d);
        let (m, k, n) = (33, 70, 45);
        let a = b.dense(d, &[m, k]);
        let bb = b.dense(d, &[k, n]);
        let c = b.dense(d, &[m, n]);
        b.check_abs(
            &KernelOp::Gemm { lhs: a.clone(), rhs: bb.clone(), dst: c.clone(), bias: None, workspace: None },
            t,
            t * 70.0 * 16.0,
        );
        // Transposed operands and a transposed (column-major) output.
        let at = b.dense(d, &[k, m]);
        let bt = b.dense(d, &[n, k]);
        let atv = Bench::view(at.ptr, d, &[m, k], &[1, m], 0);
        let btv = Bench::view(bt.ptr, d, &[k, n], &[1, k], 0);
        let ct = b.dense(d, &[n, m]);
        let ctv = Bench::view(ct.ptr, d, &[m, n], &[1, m], 0);
        b.check_abs(
            &KernelOp::Gemm { lhs: atv, rhs: btv.clone(), dst: c.clone(), bias: None, workspace: None },
            t,
            t * 70.0 * 16.0,
        );
        b.check_abs(
            &KernelOp::Gemm { lhs: a.clone(), rhs: btv, dst: ctv, bias: None, workspace: None },
            t,
            t * 70.0 * 16.0,
        );
        // Batched, with the rhs broadcast over the batch (stride 0), and a strided lhs.
        let ab = b.dense(d, &[3, m, k]);
        let cb = b.dense(d, &[3, m, n]);
        let bb3 = Bench::view(bb.ptr, d, &[3, k, n], &[0, n, 1], 0);
        b.check_abs(
            &KernelOp::Gemm { lhs: ab.clone(), rhs: bb3.clone(), dst: cb.clone(), bias: None, workspace: None },
            t,
            t * 70.0 * 16.0,
        );
        let wide = b.dense(d, &[3, m, 2 * k]);
        let strided = Bench::view(wide.ptr, d, &[3, m, k], &[m * 2 * k, 2 * k, 2], 1);
        b.check_abs(
            &KernelOp::Gemm { lhs: strided, rhs: bb3, dst: cb, bias: None, workspace: None },
            t,
            t * 70.0 * 16.0,
        );
        // K = 0 writes zeros.
        let e = Bench::view(a.ptr, d, &[m, 0], &[k, 1], 0);
        let e2 = Bench::view(bb.ptr, d, &[0, n], &[n, 1], 0);
        b.check(&KernelOp::Gemm { lhs: e, rhs: e2, dst: c, bias: None, workspace: None }, 0.0);
    }
    // TF32 is within its own (looser) tolerance.
    backends::matmul::set_allow_tf32(true);
    let a = b.dense(DType::F32, &[64, 256]);
    let bb = b.dense(DType::F32, &[256, 64]);
    let c = b.dense(DType::F32, &[64, 64]);
    b.check_abs(&KernelOp::Gemm { lhs: a, rhs: bb, dst: c, bias: None, workspace: None }, 1e-2, 1.0);
    backends::matmul::set_allow_tf32(false);
}

#[test]
fn matrix_products_use_a_workspace_given_with_the_op_of_any_size() {
    use crate::kernel::{Workspace, GEMM_WORKSPACE_BYTES};
    let Some(mut b) = Bench::new() else { return };
    // The full size (a capture's block of its pool), a small one the heuristics must respect,
    // and one at an offset inside a larger allocation (256-byte aligned, as allocator blocks are).
    let big = b.d.malloc(0, GEMM_WORKSPACE_BYTES + 4096).unwrap();
    for w in [
        Workspace { ptr: big, bytes: GEMM_WORKSPACE_BYTES },
        Workspace { ptr: big, bytes: 1 << 20 },
        Workspace { ptr: big.offset(4096), bytes: GEMM_WORKSPACE_BYTES },
    ] {
        for d in [DType::F32, DType::BF16] {
            let t = if d == DType::F32 { 1e-5 } else { tol(d) * 2.0 };
            let (m, k, n) = (256, 1024, 192);
            let (x, y, z) = (b.dense(d, &[m, k]), b.dense(d, &[k, n]), b.dense(d, &[m, n]));
            let op = KernelOp::Gemm { lhs: x, rhs: y, dst: z, bias: None, workspace: Some(w) };
            b.check_abs(&op, t, t * k as f64 * 16.0);
        }
    }
    b.d.stream_synchronize(b.s).unwrap();
    // SAFETY: memory from this driver's malloc for that device, freed once after its last use.
    unsafe { b.d.free(0, big) }.unwrap();
}

#[test]
fn launches_from_many_threads_and_streams_agree() {
    let Some(b) = Bench::new() else { return };
    let d = &b.d;
    std::thread::scope(|scope| {
        for t in 0..6u64 {
            scope.spawn(move || {
                let s = d.create_stream(0, 0).unwrap();
                let n = 1usize << 20;
                let p = d.malloc(0, n * 4).unwrap();
                let out = d.malloc(0, 4).unwrap();
                let v = Bench::view(p, DType::F32, &[n], &[1], 0);
                d.launch(s, &KernelOp::Fill { dst: v.clone(), value: Scalar::Float(t as f64) }).unwrap();
                let o = Bench::view(out, DType::F32, &[1], &[1], 0);
                d.launch(s, &KernelOp::Reduce { op: ReduceOp::Sum, src: v, dst: o, dims: vec![0] }).unwrap();
                let mut got = [0u8; 4];
                d.memcpy_dtoh(&mut got, out, s).unwrap();
                assert_eq!(f32::from_ne_bytes(got), (t * n as u64) as f32);
            });
        }
    });
}

/// How long loading a new module takes while a kernel runs on another stream (informational:
/// the driver may wait for the context to go idle).
#[test]
fn loading_a_module_while_a_kernel_runs() {
    let Some(b) = Bench::new() else { return };
    let (s1, s2) = (b.d.create_stream(0, 0).unwrap(), b.d.create_stream(0, 0).unwrap());
    b.d.delay(s1, Duration::from_millis(1)).unwrap();
    b.d.stream_synchronize(s1).unwrap();
    let p = b.d.malloc(0, 64).unwrap();
    let v = Bench::view(p, DType::U8, &[64], &[1], 0);
    let c = Bench::view(p, DType::Bool, &[64], &[1], 0);
    // A module no other test loads.
    let op = KernelOp::Where { cond: c, a: v.clone(), b: v.clone(), dst: v };
    let warm = std::time::Instant::now();
    b.d.delay(s1, Duration::from_millis(300)).unwrap();
    b.d.launch(s2, &op).unwrap();
    let waited = warm.elapsed();
    let busy = !b.d.stream_query(s1).unwrap();
    eprintln!("a first launch during a 300 ms kernel took {waited:?} on the host (the kernel still running: {busy})");
    b.d.stream_synchronize(s2).unwrap();
    b.d.stream_synchronize(s1).unwrap();
}

/// The card profile's choices set by hand, on the GPU (`card_tests.rs`).
#[path = "card_tests.rs"]
mod card_tests;
