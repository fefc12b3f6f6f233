//! [`Driver::launch`](crate::driver::Driver::launch) on the CUDA driver: per-device kernel state
//! and the dispatch of a [`KernelOp`] to a kernel and its parameters.
//!
//! Elementwise ops (fill, cast, copy, unary, binary, where) collapse the dimensions their
//! operands agree on (innermost first, size-1 dims dropped). When the output is then one dense
//! run and every input is either the same dense run or a single broadcast element, the *fast*
//! kernel runs: a grid-stride loop over 16-byte vectors when every dense operand is aligned, one
//! element at a time otherwise. Any other layout runs the *strided* kernel, which takes the
//! collapsed shape and strides (up to [`MAXD`] dims) by value. Parameters are `#[repr(C)]`
//! structs on the stack, functions come from a read-locked table, so a launch allocates nothing
//! beyond what [`KernelOp::validate`] does. Grids are sized from the SM count and the kernel's
//! occupancy: a wave is the blocks that fit on the GPU at once; elementwise grids cover the work
//! in one pass up to 256 waves (measured fastest, see [`EW_WAVES`]), reductions split a row over
//! one wave.

use super::codegen::{ew_vec, fast_masks, raw_dtype, Entry, EwOp, KernelId, ModuleKey, MAXD, PARTIAL_BYTES, THREADS};
use super::module_cache::{Func, FxMap, Kernels};
use super::{driver_error, lock, Device, RawStream, DRIVER};
use crate::driver::kernel::{BufferView, DenseBinary, KernelOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// Waves of blocks (one wave: as many as fit on the GPU at once) an elementwise kernel's grid
/// holds at most (0: no cap). Measured on an H200 (f32 add of 2^28 elements, same run as
/// PyTorch's 4.35 TB/s): one wave of grid-stride blocks 4.05 TB/s, 8 waves 4.17, a single pass
/// with 4 / 2 / 1 vectors per thread 4.32 / 4.34 / 4.36; so the cap only bounds huge grids.
pub(super) static EW_WAVES: AtomicU32 = AtomicU32::new(256);
/// 16-byte vectors each thread of a fast elementwise kernel handles in a single pass.
pub(super) static EW_VECTORS: AtomicU32 = AtomicU32::new(1);
/// Waves of blocks a reduction split over blocks uses.
pub(super) static REDUCE_WAVES: AtomicU32 = AtomicU32::new(1);

/// Tuning for benchmarks, not an API: the most waves of blocks elementwise grids hold (0: no
/// cap), the vectors per thread of a fast elementwise pass, and the waves of blocks a reduction
/// split over blocks uses. The defaults are `(256, 1, 1)`.
#[doc(hidden)]
pub fn set_tuning(elementwise_waves: u32, vectors_per_thread: u32, reduce_waves: u32) {
    EW_WAVES.store(elementwise_waves, Ordering::Relaxed);
    EW_VECTORS.store(vectors_per_thread.max(1), Ordering::Relaxed);
    REDUCE_WAVES.store(reduce_waves.max(1), Ordering::Relaxed);
}

/// Partial results a reduction may keep per stream (and outputs it may split).
pub(super) const PARTIALS: usize = 1 << 16;

/// What a launch needs to know about the device.
#[derive(Debug, Clone, Copy)]
pub(super) struct Info {
    pub sms: u32,
    pub major: u32,
    pub minor: u32,
}

/// Per-stream device memory the kernels reuse (work on one stream is ordered, so it is never
/// used by two kernels at once).
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// [`PARTIALS`] partial results, then [`PARTIALS`] zeroed `u32` counters (0: none yet).
    pub reduce: u64,
    /// The cuBLASLt workspace (0: none yet).
    pub gemm: u64,
}

/// A device's tensor-kernel state.
pub(super) struct DeviceOps {
    pub kernels: Kernels,
    info: OnceLock<Info>,
    scratch: Mutex<FxMap<u64, Scratch>>,
    pub blas: super::gemm::Blas,
}

impl DeviceOps {
    pub(super) fn new() -> DeviceOps {
        DeviceOps {
            kernels: Kernels::new(),
            info: OnceLock::new(),
            scratch: Mutex::new(FxMap::default()),
            blas: super::gemm::Blas::new(),
        }
    }

    fn info(&self, dev: sys::CUdevice) -> Result<Info> {
        if let Some(i) = self.info.get() {
            return Ok(*i);
        }
        let attr = |a: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `dev` came from `cuDeviceGet`; `a` is a valid attribute.
            let v = unsafe { cu::device::get_attribute(dev, a) };
            Ok(v.map_err(|e| driver_error("cuDeviceGetAttribute", e))?.max(0) as u32)
        };
        use sys::CUdevice_attribute::*;
        let info = Info {
            sms: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1),
            major: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            minor: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        };
        Ok(*self.info.get_or_init(|| info))
    }

    /// Frees the scratch memory, destroys the BLAS handle and unloads the modules. The device's
    /// context must be current and every stream idle.
    pub(super) fn release(&self) {
        for (_, s) in lock(&self.scratch).drain() {
            for p in [s.reduce, s.gemm] {
                if p != 0 {
                    // SAFETY: allocated by `cuMemAlloc` in this context, drained from the table, so freed exactly once; the streams that used it are idle.
                    let _ = unsafe { cu::free_sync(p) };
                }
            }
        }
        self.blas.release();
        self.kernels.unload_all();
    }
}

/// One launch: the device, its state and the stream.
pub(super) struct Ctx<'a> {
    pub ops: &'a DeviceOps,
    pub info: Info,
    pub stream: sys::CUstream,
    pub stream_id: u64,
}

pub(super) fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported { op: "launch", driver: DRIVER, reason: reason.into() }
}

impl Ctx<'_> {
    /// The kernel `id` of this device.
    #[inline]
    pub(super) fn kernel(&self, id: KernelId) -> Result<Func> {
        self.ops.kernels.get(id, self.info.major, self.info.minor)
    }

    /// Blocks of `f` that run at once on the whole GPU (one wave), times `waves` (0: no cap
    /// but the grid's).
    #[inline]
    pub(super) fn wave(&self, f: Func, waves: &AtomicU32) -> u64 {
        let wave = (self.info.sms as u64) * (f.blocks_per_sm as u64);
        match waves.load(Ordering::Relaxed) {
            0 => i32::MAX as u64,
            w => wave * w as u64,
        }
    }

    /// Blocks for `work` items of [`THREADS`] per block, at most [`Ctx::wave`] of them.
    #[inline]
    pub(super) fn grid(&self, f: Func, work: u64) -> u32 {
        work.div_ceil(THREADS as u64).clamp(1, self.wave(f, &EW_WAVES).max(1)) as u32
    }

    /// Queues `f` with the one by-value parameter `p`.
    #[inline]
    pub(super) fn run<P>(&self, f: Func, grid: u32, p: &mut P) -> Result<()> {
        let mut args = [(p as *mut P).cast::<c_void>()];
        // SAFETY: `f` is a live kernel of the current context taking one parameter whose C layout is `P`'s (`#[repr(C)]`, mirrored in codegen); `cuLaunchKernel` copies it before returning; the stream is live and of the current context.
        unsafe { cu::launch_kernel(f.handle(), (grid, 1, 1), (THREADS, 1, 1), 0, self.stream, &mut args) }
            .map_err(|e| driver_error("cuLaunchKernel", e))
    }

    /// This stream's scratch memory: `(partials, counters)` for reductions.
    pub(super) fn reduce_scratch(&self) -> Result<(u64, u64)> {
        let mut map = lock(&self.ops.scratch);
        let s = map.entry(self.stream_id).or_default();
        if s.reduce == 0 {
            let bytes = PARTIALS * PARTIAL_BYTES + PARTIALS * 4;
            // SAFETY: the device's context is current; the memory is used as raw bytes.
            let p = unsafe { cu::malloc_sync(bytes) }.map_err(|e| driver_error("cuMemAlloc", e))?;
            // SAFETY: `p` holds `bytes` bytes; the counters are zeroed in stream order, before any kernel on this stream reads them.
            unsafe { cu::memset_d8_async(p + (PARTIALS * PARTIAL_BYTES) as u64, 0, PARTIALS * 4, self.stream) }
                .map_err(|e| driver_error("cuMemsetD8Async", e))?;
            s.reduce = p;
        }
        Ok((s.reduce, s.reduce + (PARTIALS * PARTIAL_BYTES) as u64))
    }

    /// This stream's cuBLASLt workspace of `bytes` bytes.
    pub(super) fn gemm_workspace(&self, bytes: usize) -> Result<u64> {
        let mut map = lock(&self.ops.scratch);
        let s = map.entry(self.stream_id).or_default();
        if s.gemm == 0 {
            // SAFETY: the device's context is current; the memory is cuBLASLt's scratch.
            s.gemm = unsafe { cu::malloc_sync(bytes) }.map_err(|e| driver_error("cuMemAlloc", e))?;
        }
        Ok(s.gemm)
    }
}

/// Collapsed dimensions, innermost first: sizes and, per operand, strides in elements.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dims<const K: usize> {
    pub n: usize,
    pub shape: [i64; MAXD],
    pub st: [[i64; MAXD]; K],
}

/// The dims `d` of `shape` with `keep(d)`, size-1 ones dropped and neighbours merged where every
/// operand's strides allow (`None`: a zero stride); `None` past [`MAXD`] dims.
pub(super) fn collapse<const K: usize>(
    shape: &[usize],
    strides: [Option<&[usize]>; K],
    keep: impl Fn(usize) -> bool,
) -> Option<Dims<K>> {
    let mut d = Dims { n: 0, shape: [0; MAXD], st: [[0; MAXD]; K] };
    let stride = |k: usize, i: usize| strides[k].map_or(0, |s| s[i] as i64);
    for i in (0..shape.len()).rev() {
        let size = shape[i] as i64;
        if size == 1 || !keep(i) {
            continue;
        }
        if d.n > 0 && (0..K).all(|k| stride(k, i) == d.st[k][d.n - 1] * d.shape[d.n - 1]) {
            d.shape[d.n - 1] *= size;
            continue;
        }
        if d.n == MAXD {
            return None;
        }
        d.shape[d.n] = size;
        for k in 0..K {
            d.st[k][d.n] = stride(k, i);
        }
        d.n += 1;
    }
    Some(d)
}

/// The address of a view's first element.
#[inline]
pub(super) fn addr(v: &BufferView) -> u64 {
    v.ptr.0 + (v.offset * v.dtype.size()) as u64
}

/// Parameters of the fast elementwise kernels (`EwFast` in the generated C).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct EwFast {
    out: u64,
    ins: [u64; 3],
    n: u64,
    value: u64,
    vec: i32,
    pad: i32,
}

/// Parameters of the strided elementwise kernel (`EwStrided`).
#[repr(C)]
struct EwStrided {
    b: EwFast,
    ndim: i32,
    pad: i32,
    shape: [i64; MAXD],
    st: [[i64; MAXD]; 4],
}

/// Runs `op` (already validated) on the stream of `dev`, whose context is current.
pub(super) fn launch(dev: &Device, stream: RawStream, stream_id: u64, op: &KernelOp) -> Result<()> {
    let out = op.output();
    if out.numel() == 0 {
        return Ok(());
    }
    let c = Ctx { ops: &dev.ops, info: dev.ops.info(dev.cu)?, stream: stream.0, stream_id };
    match op {
        KernelOp::Fill { dst, value } => elementwise(&c, EwOp::Fill, dst, &[], scalar_bits(*value, dst.dtype), 0),
        KernelOp::Cast { src, dst } if src.dtype == dst.dtype => elementwise(&c, EwOp::Copy, dst, &[src], 0, 0),
        KernelOp::Cast { src, dst } => elementwise(&c, EwOp::Cast, dst, &[src], 0, 0),
        KernelOp::CopyStrided { src, dst } => elementwise(&c, EwOp::Copy, dst, &[src], 0, 0),
        KernelOp::Unary { op, src, dst } => elementwise(&c, EwOp::Unary(*op), dst, &[src], 0, 0),
        KernelOp::Binary { op, lhs, rhs, dst, compute } => {
            elementwise(&c, EwOp::Binary(*op, *compute), dst, &[lhs, rhs], 0, 0)
        }
        KernelOp::BinaryScalar { op, lhs, value, rhs_dtype, dst, compute } => {
            // The number travels in the parameters' `value` (its bits as `rhs_dtype`), input 1 marked
            // as given by value.
            let imm = BufferView::number(*rhs_dtype, &dst.shape);
            elementwise(&c, EwOp::Binary(*op, *compute), dst, &[lhs, &imm], scalar_bits(*value, *rhs_dtype), 0b10)
        }
        KernelOp::Where { cond, a, b, dst } => elementwise(&c, EwOp::Where, dst, &[cond, a, b], 0, 0),
        KernelOp::Reduce { op, src, dst, dims } => super::reduce::reduce(&c, *op, src, dst, dims),
        KernelOp::Softmax { src, dst, dim, log } => super::reduce::softmax(&c, src, dst, *dim, *log),
        KernelOp::Gemm { lhs, rhs, dst } => super::gemm::gemm(&c, lhs, rhs, dst),
    }
}

/// Runs a dense binary op (already validated) on the stream of `dev`, whose context is current:
/// the fast kernel at once, with no views to classify.
pub(super) fn dense_binary(dev: &Device, stream: RawStream, stream_id: u64, op: &DenseBinary) -> Result<()> {
    if op.n == 0 {
        return Ok(());
    }
    let c = Ctx { ops: &dev.ops, info: dev.ops.info(dev.cu)?, stream: stream.0, stream_id };
    // A number goes in `value`, its input's address 0 and its mask bit set (one broadcast element).
    let (rhs, value, mask) = match op.rhs_value {
        Some(v) => (0, scalar_bits(v, op.rhs.1), 2),
        None => (op.rhs.0 .0, 0, 0),
    };
    let p = EwFast { out: op.dst.0 .0, ins: [op.lhs.0 .0, rhs, 0], n: op.n as u64, value, vec: 0, pad: 0 };
    let dtypes = [op.lhs.1, op.rhs.1, DType::Bool];
    ew_fast(&c, EwOp::Binary(op.op, op.compute), op.dst.1, dtypes, 2, mask, p)
}

/// `value` as one element of `dtype`, in the low bytes of a kernel parameter.
fn scalar_bits(value: crate::scalar::Scalar, dtype: DType) -> u64 {
    let mut bits = [0u8; 8];
    let bytes = crate::kernels::cpu::scalar_bytes(value, dtype);
    bits[..bytes.len()].copy_from_slice(&bytes);
    u64::from_ne_bytes(bits)
}

/// The common case of an elementwise op, told without collapsing dimensions: with a contiguous
/// output, and inputs that are contiguous too (same shape, validated) or one broadcast element
/// (every stride 0), the fast kernel's mask (bit `k`: input `k` is broadcast); `None` otherwise.
fn contiguous_mask(dst: &BufferView, ins: &[&BufferView]) -> Option<u8> {
    if !dst.is_contiguous() {
        return None;
    }
    let mut mask = 0u8;
    for (k, v) in ins.iter().enumerate() {
        if v.is_contiguous() {
            continue;
        }
        if !v.strides.iter().all(|&s| s == 0) {
            return None;
        }
        mask |= 1 << k;
    }
    Some(mask)
}

/// Whether collapsed dims (output first, then `ins` inputs) are one dense run whose inputs are
/// dense or one broadcast element, and the mask of the broadcast inputs.
fn collapsed_mask<const K: usize>(d: &Dims<K>, ins: usize) -> (bool, u8) {
    let mut mask = 0u8;
    if d.n == 1 {
        for k in 0..ins {
            if d.st[k + 1][0] == 0 {
                mask |= 1 << k;
            }
        }
    }
    let dense = d.n == 0 || (d.n == 1 && d.st[0][0] == 1 && (1..=ins).all(|k| d.st[k][0] <= 1));
    (dense, mask)
}

/// The dtypes an elementwise kernel is built for and the address of each input's first element:
/// `(output dtype, input dtypes, input addresses)` (raw types for fills and copies).
#[inline]
fn ew_operands(op: EwOp, dst: &BufferView, ins: &[&BufferView]) -> (DType, [DType; 3], [u64; 3]) {
    let raw = matches!(op, EwOp::Fill | EwOp::Copy);
    let out_dtype = if raw { raw_dtype(dst.dtype) } else { dst.dtype };
    let mut dtypes = [DType::Bool; 3];
    let mut ptrs = [0u64; 3];
    for (i, v) in ins.iter().enumerate() {
        dtypes[i] = if raw { out_dtype } else { v.dtype };
        ptrs[i] = addr(v);
    }
    (out_dtype, dtypes, ptrs)
}

/// Queues an elementwise kernel writing `dst` from `ins` (at most 3); bit `k` of `imm`: input `k`
/// is a number given in `value` (its view has address 0), one broadcast element to the kernels.
///
/// The common case (a dense output whose inputs are dense or one broadcast element, told
/// without collapsing dimensions) takes a short path; everything else is out of line.
#[inline]
pub(super) fn elementwise(c: &Ctx, op: EwOp, dst: &BufferView, ins: &[&BufferView], value: u64, imm: u8) -> Result<()> {
    match contiguous_mask(dst, ins).map(|m| m | imm) {
        Some(mask) if mask < fast_masks(op) => {
            let (out_dtype, dtypes, ptrs) = ew_operands(op, dst, ins);
            let p = EwFast { out: addr(dst), ins: ptrs, n: dst.numel() as u64, value, vec: 0, pad: 0 };
            ew_fast(c, op, out_dtype, dtypes, ins.len(), mask, p)
        }
        _ => elementwise_strided(c, op, dst, ins, value, imm),
    }
}

/// Queues the fast kernel of `op` over `p` (its `vec` set here), `mask` of the `nin` inputs
/// being one broadcast element.
fn ew_fast(c: &Ctx, op: EwOp, out_dtype: DType, dtypes: [DType; 3], nin: usize, mask: u8, mut p: EwFast) -> Result<()> {
    // Vectors are 16 bytes: a power of two of elements, so a vector of a dtype is a power of
    // two of bytes (alignment by mask, no division).
    let vec = ew_vec(op, out_dtype, dtypes) as u64;
    let fits = |a: u64, d: DType| a & (d.size() as u64 * vec - 1) == 0;
    let mut aligned = vec > 1 && fits(p.out, out_dtype);
    for (k, (&a, &d)) in p.ins.iter().zip(&dtypes).enumerate().take(nin) {
        if mask & (1 << k) == 0 {
            aligned &= fits(a, d);
        }
    }
    p.vec = aligned as i32;
    let module = ModuleKey::Elementwise { op, out: out_dtype, ins: dtypes };
    let f = c.kernel(KernelId { module, entry: Entry::Fast(mask) })?;
    let mut work = if aligned { p.n.div_ceil(vec) } else { p.n };
    let per_thread = EW_VECTORS.load(Ordering::Relaxed) as u64;
    if aligned && per_thread > 1 {
        work = work.div_ceil(per_thread);
    }
    let grid = c.grid(f, work);
    c.run(f, grid, &mut p)
}

/// [`elementwise`] for every layout the short path does not take: the dimensions collapsed,
/// then the fast kernel when they make one dense run, the strided kernel otherwise.
#[inline(never)]
fn elementwise_strided(c: &Ctx, op: EwOp, dst: &BufferView, ins: &[&BufferView], value: u64, imm: u8) -> Result<()> {
    let (out_dtype, dtypes, ptrs) = ew_operands(op, dst, ins);
    let mut strides: [Option<&[usize]>; 4] = [Some(&dst.strides), None, None, None];
    for (i, v) in ins.iter().enumerate() {
        strides[i + 1] = Some(&v.strides);
    }
    let n = dst.numel() as u64;
    let p = EwFast { out: addr(dst), ins: ptrs, n, value, vec: 0, pad: 0 };
    let dims = collapse(&dst.shape, strides, |_| true)
        .ok_or_else(|| unsupported(format!("{} dims that do not collapse below {MAXD}", dst.shape.len())))?;
    let (dense, mask) = collapsed_mask(&dims, ins.len());
    let mask = mask | imm;
    if dense && mask < fast_masks(op) {
        return ew_fast(c, op, out_dtype, dtypes, ins.len(), mask, p);
    }
    let module = ModuleKey::Elementwise { op, out: out_dtype, ins: dtypes };
    let mut s = EwStrided { b: p, ndim: dims.n as i32, pad: 0, shape: dims.shape, st: dims.st };
    let f = c.kernel(KernelId { module, entry: Entry::Strided })?;
    let grid = c.grid(f, n);
    c.run(f, grid, &mut s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DevicePtr;

    fn view(shape: &[usize], strides: &[usize]) -> BufferView {
        BufferView { ptr: DevicePtr(4096), dtype: DType::F32, shape: shape.into(), strides: strides.into(), offset: 0 }
    }

    /// The classification without collapsing agrees with the collapse wherever it answers, and
    /// declines every layout that is not a dense run.
    #[test]
    fn the_contiguous_shortcut_agrees_with_the_collapse() {
        let shape = [4usize, 1, 6];
        let layouts: [&[usize]; 6] = [&[6, 6, 1], &[6, 99, 1], &[0, 0, 0], &[0, 0, 1], &[1, 6, 4], &[12, 6, 2]];
        for out in layouts {
            for a in layouts {
                for b in layouts {
                    let (dst, x, y) = (view(&shape, out), view(&shape, a), view(&shape, b));
                    let ins = [&x, &y];
                    let st = [Some(&dst.strides[..]), Some(&x.strides[..]), Some(&y.strides[..])];
                    let d = collapse(&shape, st, |_| true).expect("3 dims collapse");
                    let (dense, mask) = collapsed_mask(&d, 2);
                    match contiguous_mask(&dst, &ins) {
                        Some(m) => assert!(dense && m == mask, "{out:?} {a:?} {b:?}: shortcut {m}, collapse {mask}"),
                        None => assert!(
                            !dense || !dst.is_contiguous() || ins.iter().any(|v| !v.is_contiguous()),
                            "{out:?} {a:?} {b:?}: the shortcut declined a plain dense op"
                        ),
                    }
                }
            }
        }
        assert_eq!(contiguous_mask(&view(&[1, 1], &[5, 7]), &[&view(&[1, 1], &[3, 3])]), Some(0), "one element");
    }
}
