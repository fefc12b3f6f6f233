//! What every CUDA launch helper shares, below the dispatch (`launch.rs`) and the kernels it
//! dispatches to (`elementwise.rs`, `reduce.rs`, `gemm.rs`): a device's [`Launcher`] state, the
//! [`Ctx`] of one launch (kernel lookup, grid sizing, the launch call, per-stream scratch), the
//! tuning knobs, and the collapse of dimensions the operands agree on.

use super::reduce_layouts::PARTIAL_BYTES;
use super::table::{Func, Kernels};
use super::vocab::{KernelId, MAXD, PDL_MAX_GRID, THREADS};
use crate::config::{AttentionKernel, AttentionOrder, CardOverrides, LaunchTuning};
use crate::driver::card::{CardFacts, CardProfile};
use crate::driver::cuda::fxmap::FxMap;
use crate::driver::cuda::status::{driver_error, lock, DRIVER};
use crate::error::{Error, Result, Sticky};
use crate::kernel::BufferView;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The launch shapes ([`LaunchTuning`], given at the driver's construction), shared by the
/// driver and its devices' launchers and changed by
/// [`Driver::set_launch_tuning`](crate::driver::Driver::set_launch_tuning).
///
/// `ew_waves`: waves of blocks (one wave: as many as fit on the GPU at once) an elementwise
/// kernel's grid holds at most (0: no cap). Measured on an H200 (f32 add of 2^28 elements, same
/// run as PyTorch's 4.35 TB/s): one wave of grid-stride blocks 4.05 TB/s, 8 waves 4.17, a single
/// pass with 4 / 2 / 1 vectors per thread 4.32 / 4.34 / 4.36; so the default cap of 256 only
/// bounds huge grids. `ew_vectors`: 16-byte vectors each thread of a fast elementwise kernel
/// handles in a single pass (0: the op's own, `elementwise_policy::ew_per_thread`).
/// `reduce_waves`: waves of blocks a reduction split over blocks uses. `attention`: the
/// attention kernel ([`AttentionKernel`] as its discriminant, `fused::attention_path`),
/// `attention_order` the order of its query tiles ([`AttentionOrder`] as its discriminant).
/// `strided_lanes`: the strided elementwise kernel's lanes allowed (bits of `strided.rs`:
/// `LANE_VECTORS`, `LANE_DIVISION`, `LANE_TILES`; 0 runs it as before them, to measure the
/// difference). `card`: the card profile's choices set by hand ([`CardOverrides`]:
/// `heavy_vectors`, `sum_blocks`, `sum_loads`, `swizzle_heads`, `ew_threads`, `norm_blocks`, `norm_threads`,
/// `heavy_unroll`, `mid_vectors`, `early_waves`, `gemv_rows`, `norm_early`, [`NO_OVERRIDE`] where the card's own
/// hold).
#[derive(Debug)]
pub(in crate::driver::cuda) struct Tuning {
    pub ew_waves: AtomicU32,
    pub ew_vectors: AtomicU32,
    pub reduce_waves: AtomicU32,
    pub attention: AtomicU32,
    pub attention_order: AtomicU32,
    pub strided_lanes: AtomicU32,
    pub card: [AtomicU32; 12],
}

/// Parameters of a kernel whose `cs_enter` runs at any grid once told to (a field the kernel
/// reads): such a kernel may be launched with programmatic stream serialization whatever its
/// grid ([`Ctx::run_early`]), where the others may only below [`PDL_MAX_GRID`] blocks.
pub(in crate::driver::cuda) trait WaitsWhenTold {
    /// Sets the field: the kernel's blocks wait for the kernels before them first.
    fn tell_to_wait(&mut self);
}

/// Whether a grid of `grid` blocks, `wave` of which the device holds at once, is launched early
/// ([`Ctx::run_early`]): from `waves` waves of blocks on (the card's `early_waves`; 0: never). Its
/// blocks are then scheduled while the kernel before it drains and wait for it first. Only grids
/// of several waves: on the H200 (session 8) eager launches with the attribute gained up to 9 % on
/// grids of many waves and lost up to a third on reductions of one wave.
pub(in crate::driver::cuda) fn launch_early(grid: u32, wave: u64, waves: u32) -> bool {
    waves > 0 && grid as u64 >= wave.max(1).saturating_mul(waves as u64)
}

/// A [`Tuning::card`] slot that overrides nothing.
const NO_OVERRIDE: u32 = u32::MAX;

impl Tuning {
    pub(in crate::driver::cuda) fn new(t: LaunchTuning) -> Tuning {
        let tuning = Tuning {
            ew_waves: AtomicU32::new(0),
            ew_vectors: AtomicU32::new(0),
            reduce_waves: AtomicU32::new(1),
            attention: AtomicU32::new(0),
            attention_order: AtomicU32::new(0),
            strided_lanes: AtomicU32::new(0),
            card: [NO_OVERRIDE; 12].map(AtomicU32::new),
        };
        tuning.set(t);
        tuning
    }

    /// Takes `t` for the launches that follow.
    pub(in crate::driver::cuda) fn set(&self, t: LaunchTuning) {
        self.ew_waves.store(t.elementwise_waves, Ordering::Relaxed);
        self.ew_vectors.store(t.vectors_per_thread, Ordering::Relaxed);
        self.reduce_waves.store(t.reduce_waves.max(1), Ordering::Relaxed);
        self.attention.store(t.attention as u32, Ordering::Relaxed);
        self.strided_lanes.store(t.strided_lanes, Ordering::Relaxed);
        self.attention_order.store(t.attention_order as u32, Ordering::Relaxed);
        let c = t.card;
        for (slot, v) in self.card.iter().zip([
            c.heavy_vectors,
            c.sum_blocks,
            c.sum_loads,
            c.swizzle_heads,
            c.ew_threads,
            c.norm_blocks,
            c.norm_threads,
            c.heavy_unroll,
            c.mid_vectors,
            c.early_waves,
            c.gemv_rows,
            c.norm_early,
        ]) {
            slot.store(v.unwrap_or(NO_OVERRIDE), Ordering::Relaxed);
        }
    }

    /// The order of the attention kernels' query tiles ([`LaunchTuning::attention_order`]).
    pub(in crate::driver::cuda) fn attention_order(&self) -> AttentionOrder {
        let x = self.attention_order.load(Ordering::Relaxed);
        AttentionOrder::ALL.into_iter().find(|&o| o as u32 == x).unwrap_or_default()
    }

    /// The card profile's choices set by hand.
    pub(in crate::driver::cuda) fn card_overrides(&self) -> CardOverrides {
        let [h, b, l, s, t, n, nt, u, m, e, g, ne] =
            self.card.each_ref().map(|a| Some(a.load(Ordering::Relaxed)).filter(|&v| v != NO_OVERRIDE));
        CardOverrides {
            heavy_vectors: h,
            sum_blocks: b,
            sum_loads: l,
            swizzle_heads: s,
            ew_threads: t,
            norm_blocks: n,
            norm_threads: nt,
            heavy_unroll: u,
            mid_vectors: m,
            early_waves: e,
            gemv_rows: g,
            norm_early: ne,
        }
    }

    /// The attention kernel chosen ([`LaunchTuning::attention`]).
    pub(in crate::driver::cuda) fn attention(&self) -> AttentionKernel {
        let x = self.attention.load(Ordering::Relaxed);
        AttentionKernel::ALL.into_iter().find(|&k| k as u32 == x).unwrap_or(AttentionKernel::Auto)
    }
}

/// Partial results a reduction may keep per stream (and outputs it may split). (2^18 was
/// measured on the H200: column reductions split over more blocks ran 1.4-1.9 x slower, also
/// with their partials combined by a thread per output.)
pub(in crate::driver::cuda) const PARTIALS: usize = 1 << 16;

/// What a launch needs to know about the device: its SMs, compute capability and card profile
/// (the choices computed from its properties, before any set by hand).
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct Info {
    pub sms: u32,
    pub major: u32,
    pub minor: u32,
    pub card: CardProfile,
}

/// The scratch table's keys for captures (stream handles are small counters).
const CAPTURE_KEY: u64 = 1 << 63;

/// Per-stream device memory the kernels reuse (work on one stream is ordered, so it is never
/// used by two kernels at once).
#[derive(Debug, Default)]
pub(in crate::driver::cuda) struct Scratch {
    /// [`PARTIALS`] partial results, then [`PARTIALS`] zeroed `u32` counters (0: none yet).
    pub reduce: u64,
    /// The cuBLASLt workspace of products given none with the op (0: none yet): eager ones (a
    /// captured product queued through the runtime brings its capture's, from its pool).
    pub gemm: u64,
}

/// A device's kernel state: its kernels, what a launch needs to know about it, and per-stream
/// scratch memory.
pub(in crate::driver::cuda) struct Launcher {
    pub kernels: Kernels,
    /// The driver's launch shapes.
    pub tuning: Arc<Tuning>,
    info: OnceLock<Info>,
    scratch: Mutex<FxMap<u64, Scratch>>,
}

impl Launcher {
    /// A device's launcher: its kernels are cached on disk under `kernel_cache` (none: not on
    /// disk), its launches shaped by `tuning`.
    pub(in crate::driver::cuda) fn new(kernel_cache: Option<PathBuf>, tuning: Arc<Tuning>) -> Launcher {
        Launcher {
            kernels: Kernels::new(kernel_cache),
            tuning,
            info: OnceLock::new(),
            scratch: Mutex::new(FxMap::default()),
        }
    }

    pub(in crate::driver::cuda) fn info(&self, dev: sys::CUdevice) -> Result<Info> {
        if let Some(i) = self.info.get() {
            return Ok(*i);
        }
        let attr = |a: sys::CUdevice_attribute| -> Result<u32> {
            // SAFETY: `dev` came from `cuDeviceGet`; `a` is a valid attribute.
            let v = unsafe { cu::device::get_attribute(dev, a) };
            Ok(v.map_err(|e| driver_error("cuDeviceGetAttribute", e))?.max(0) as u32)
        };
        use sys::CUdevice_attribute::*;
        // The same attributes as `DeviceProperties` (`telemetry::properties`) gives the profile.
        let facts = CardFacts {
            sms: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1),
            major: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            minor: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            clock_khz: attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
            memory_clock_khz: attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
            bus_bits: attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
            l2_bytes: attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
        };
        let info = Info { sms: facts.sms, major: facts.major, minor: facts.minor, card: CardProfile::of(facts) };
        Ok(*self.info.get_or_init(|| info))
    }

    /// The scratch memory of capture `id`, now the graph's to free (nothing if it used none).
    pub(in crate::driver::cuda) fn take_capture_scratch(&self, id: u64) -> Vec<u64> {
        let s = lock(&self.scratch).remove(&(CAPTURE_KEY | id)).unwrap_or_default();
        [s.reduce, s.gemm].into_iter().filter(|&p| p != 0).collect()
    }

    /// Frees the scratch memory and unloads the modules. The device's context must be current
    /// and every stream idle.
    pub(in crate::driver::cuda) fn release(&self) {
        for (_, s) in lock(&self.scratch).drain() {
            for p in [s.reduce, s.gemm] {
                if p != 0 {
                    // SAFETY:
                    // - allocated by `cuMemAlloc` in this context, drained from the table, so freed exactly
                    //   once;
                    // - the streams that used it are idle.
                    let _ = unsafe { cu::free_sync(p) };
                }
            }
        }
        self.kernels.unload_all();
    }
}

/// One launch: the device, its state and the stream.
pub(in crate::driver::cuda) struct Ctx<'a> {
    pub ops: &'a Launcher,
    pub info: Info,
    pub stream: sys::CUstream,
    pub stream_id: u64,
    /// The device's slot for errors raised in `Drop` (a temporary's stream-ordered free).
    pub dropped: &'a Sticky,
}

pub(in crate::driver::cuda) fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported { op: "launch", driver: DRIVER, reason: reason.into() }
}

impl Ctx<'_> {
    /// The kernel `id` of this device.
    #[inline]
    pub(in crate::driver::cuda) fn kernel(&self, id: KernelId) -> Result<Func> {
        self.ops.kernels.get(id, self.info.major, self.info.minor)
    }

    /// Blocks of `f` that run at once on the whole GPU (one wave), times `waves` (0: no cap
    /// but the grid's).
    #[inline]
    pub(in crate::driver::cuda) fn wave(&self, f: Func, waves: &AtomicU32) -> u64 {
        let wave = (self.info.sms as u64) * (f.blocks_per_sm as u64);
        match waves.load(Ordering::Relaxed) {
            0 => i32::MAX as u64,
            w => wave * w as u64,
        }
    }

    /// The card profile's choices for this launch: the device's own, with those set by hand
    /// (`CUDASEM_BENCH_TUNING`'s `key=value` items) in their place.
    #[inline]
    pub(in crate::driver::cuda) fn card(&self) -> CardProfile {
        self.info.card.with(&self.ops.tuning.card_overrides())
    }

    /// Threads of `f` the device holds at once (one full wave of blocks of [`THREADS`]).
    #[inline]
    pub(in crate::driver::cuda) fn full_wave_threads(&self, f: Func) -> u64 {
        (self.info.sms as u64 * f.blocks_per_sm as u64 * THREADS as u64).max(1)
    }

    /// Blocks for `work` items of [`THREADS`] per block, at most [`Ctx::wave`] of them.
    #[inline]
    pub(in crate::driver::cuda) fn grid(&self, f: Func, work: u64) -> u32 {
        self.grid_of(f, work, THREADS)
    }

    /// [`Ctx::grid`] for blocks of `threads` (at most [`THREADS`]): the cap's waves hold
    /// `THREADS / threads` times as many blocks (never more than a grid may: 2^31 − 1).
    #[inline]
    pub(in crate::driver::cuda) fn grid_of(&self, f: Func, work: u64, threads: u32) -> u32 {
        let threads = threads.clamp(1, THREADS);
        let cap = self.wave(f, &self.ops.tuning.ew_waves) * (THREADS / threads) as u64;
        work.div_ceil(threads as u64).clamp(1, cap.clamp(1, i32::MAX as u64)) as u32
    }

    /// Queues `f` with the one by-value parameter `p`.
    #[inline]
    pub(in crate::driver::cuda) fn run<P>(&self, f: Func, grid: u32, p: &mut P) -> Result<()> {
        self.run_threads(f, grid, THREADS, p)
    }

    /// [`Ctx::run`] with blocks of `threads` threads (at most the kernel's launch bound).
    ///
    /// A small grid captured into a graph on a device of compute capability 9.0 or later is
    /// launched with programmatic stream serialization ([`Ctx::programmatic`]).
    #[inline]
    pub(in crate::driver::cuda) fn run_threads<P>(&self, f: Func, grid: u32, threads: u32, p: &mut P) -> Result<()> {
        self.run_shared(f, grid, threads, 0, p)
    }

    /// [`Ctx::run_threads`] with `smem` bytes of dynamic shared memory a block (at most what the
    /// kernel was allowed when loaded, `Entry::dynamic_smem`).
    #[inline]
    pub(in crate::driver::cuda) fn run_shared<P>(
        &self,
        f: Func,
        grid: u32,
        threads: u32,
        smem: u32,
        p: &mut P,
    ) -> Result<()> {
        self.launch(f, (grid, threads, smem), p, self.programmatic(grid))
    }

    /// [`Ctx::run_threads`] of a kernel that waits for the kernels before it at any grid when
    /// its parameters say so ([`WaitsWhenTold`]): told so and launched with programmatic stream
    /// serialization, captured or not, on compute capability 9.0 or later (its blocks may be
    /// scheduled while the kernel before it drains); otherwise as [`Ctx::run_threads`].
    #[inline]
    pub(in crate::driver::cuda) fn run_early<P: WaitsWhenTold>(
        &self,
        f: Func,
        grid: u32,
        threads: u32,
        p: &mut P,
    ) -> Result<()> {
        if self.info.major < 9 {
            return self.run_threads(f, grid, threads, p);
        }
        p.tell_to_wait();
        self.launch(f, (grid, threads, 0), p, true)
    }

    /// [`Ctx::run_early`] when `early` (the card profile's choice for the kernel), else
    /// [`Ctx::run_threads`].
    #[inline]
    pub(in crate::driver::cuda) fn run_early_when<P: WaitsWhenTold>(
        &self,
        early: bool,
        f: Func,
        (grid, threads): (u32, u32),
        p: &mut P,
    ) -> Result<()> {
        if early {
            return self.run_early(f, grid, threads, p);
        }
        self.run_threads(f, grid, threads, p)
    }

    /// [`Ctx::run_early_when`], early when `grid` holds `early_waves` waves of `f`'s blocks of `threads` or
    /// more ([`launch_early`]: the card's `early_waves`): the launch of the fast elementwise
    /// kernel and of the softmax kernels over rows.
    #[inline]
    pub(in crate::driver::cuda) fn run_waves<P: WaitsWhenTold>(
        &self,
        f: Func,
        (grid, threads): (u32, u32),
        early_waves: u32,
        p: &mut P,
    ) -> Result<()> {
        let early = launch_early(grid, self.full_wave_threads(f) / threads as u64, early_waves);
        self.run_early_when(early, f, (grid, threads), p)
    }

    /// Queues `f` over `grid` blocks of `threads` threads with `smem` bytes of dynamic shared
    /// memory, with programmatic stream serialization when `programmatic` (the kernel then waits
    /// in `cs_enter` for the kernels before it: every launch path makes sure of it).
    fn launch<P>(&self, f: Func, (grid, threads, smem): (u32, u32, u32), p: &mut P, programmatic: bool) -> Result<()> {
        let mut args = [(p as *mut P).cast::<c_void>()];
        if !programmatic {
            // SAFETY:
            // - `f` is a live kernel of the current context taking one parameter whose C layout is
            //   `P`'s (`#[repr(C)]`, mirrored in codegen);
            // - `cuLaunchKernel` copies it before returning;
            // - the stream is live and of the current context.
            return unsafe {
                cu::launch_kernel(f.handle(), (grid, 1, 1), (threads, 1, 1), smem, self.stream, &mut args)
            }
            .map_err(|e| driver_error("cuLaunchKernel", e));
        }
        // SAFETY: zero is a valid bit pattern for this C union (an all-zero attribute value).
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let config = sys::CUlaunchConfig {
            gridDimX: grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: self.stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY:
        // - `f` is a live kernel of the current context taking one parameter whose C layout is `P`'s
        //   (`#[repr(C)]`, mirrored in codegen), and the kernel waits for the grids before it
        //   (`cs_enter`) before it touches memory, as the attribute requires: every generated
        //   kernel of a grid of at most `PDL_MAX_GRID` blocks (`programmatic`), a `WaitsWhenTold`
        //   one at any grid once told (`run_early`);
        // - `cuLaunchKernelEx` copies the configuration, the attribute and the parameter before
        //   returning;
        // - the stream is live and of the current context.
        unsafe { sys::cuLaunchKernelEx(&config, f.handle(), args.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(|e| driver_error("cuLaunchKernelEx", e))
    }

    /// Whether a launch of `grid` blocks allows programmatic stream serialization: the kernel
    /// may be scheduled while the kernel before it on the stream still runs, and waits for it in
    /// its first statement (`cs_enter`, `cu/common.cu`); captured, that is a programmatic edge
    /// of the graph. Only for grids of at most a block per SM being captured on compute
    /// capability 9.0 or later: measured on the H200, a graph of 100 tiny kernels went from 853
    /// to 552 ns per node, while eager launches gained at most 9 % on grids of many waves and
    /// lost up to a third on reductions of one wave, tiled copies and launch-bound ops. The fast
    /// elementwise kernel's and the softmax kernels' grids of many waves, and `gv_rows` when the card
    /// says so, take the attribute through [`Ctx::run_early`].
    #[inline]
    fn programmatic(&self, grid: u32) -> bool {
        self.info.major >= 9
            && grid <= self.info.sms.min(PDL_MAX_GRID)
            && crate::driver::cuda::capture::capturing()
            && crate::driver::cuda::capture::capture_id(self.stream).is_some()
    }

    /// Whose scratch a launch uses: its stream's, or while the stream is capturing, the
    /// capture's own (which the graph takes over, `graph.rs`).
    fn scratch_key(&self) -> u64 {
        if crate::driver::cuda::capture::capturing() {
            if let Some(id) = crate::driver::cuda::capture::capture_id(self.stream) {
                return CAPTURE_KEY | id;
            }
        }
        self.stream_id
    }

    /// This stream's scratch memory: `(partials, counters)` for reductions.
    pub(in crate::driver::cuda) fn reduce_scratch(&self) -> Result<(u64, u64)> {
        let key = self.scratch_key();
        let mut map = lock(&self.ops.scratch);
        let s = map.entry(key).or_default();
        if s.reduce == 0 {
            let bytes = PARTIALS * PARTIAL_BYTES + PARTIALS * 4;
            // SAFETY: the device's context is current; the memory is used as raw bytes.
            let p = unsafe { cu::malloc_sync(bytes) }.map_err(|e| driver_error("cuMemAlloc", e))?;
            // SAFETY:
            // - `p` holds `bytes` bytes;
            // - the counters are zeroed in stream order, before any kernel on this stream reads them.
            unsafe { cu::memset_d8_async(p + (PARTIALS * PARTIAL_BYTES) as u64, 0, PARTIALS * 4, self.stream) }
                .map_err(|e| driver_error("cuMemsetD8Async", e))?;
            s.reduce = p;
        }
        Ok((s.reduce, s.reduce + (PARTIALS * PARTIAL_BYTES) as u64))
    }

    /// This stream's cuBLASLt workspace of `bytes` bytes, for a product given none with the op
    /// (an eager one; a captured product launched on the driver directly gets its capture's).
    pub(in crate::driver::cuda) fn gemm_workspace(&self, bytes: usize) -> Result<u64> {
        let key = self.scratch_key();
        let mut map = lock(&self.ops.scratch);
        let s = map.entry(key).or_default();
        if s.gemm == 0 {
            // SAFETY: the device's context is current; the memory is cuBLASLt's scratch.
            s.gemm = unsafe { cu::malloc_sync(bytes) }.map_err(|e| driver_error("cuMemAlloc", e))?;
        }
        Ok(s.gemm)
    }
}

/// Collapsed dimensions, innermost first: sizes and, per operand, strides in elements.
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct Dims<const K: usize> {
    pub n: usize,
    pub shape: [i64; MAXD],
    pub st: [[i64; MAXD]; K],
}

/// The dims `d` of `shape` with `keep(d)`, size-1 ones dropped and neighbours merged where every
/// operand's strides allow (`None`: a zero stride); `None` past [`MAXD`] dims.
pub(in crate::driver::cuda) fn collapse<const K: usize>(
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
pub(in crate::driver::cuda) fn addr(v: &BufferView) -> u64 {
    v.ptr.0 + (v.offset * v.dtype.size()) as u64
}
