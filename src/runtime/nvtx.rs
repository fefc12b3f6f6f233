//! `torch.cuda.nvtx`: named ranges and marks for a profiler's timeline (Nsight Systems, Nsight
//! Compute), and PyTorch's `emit_nvtx`: a range around every operation cudasem queues.
//!
//! Each call goes to NVIDIA's NVTX library where one loads (`libnvtx3interop.so.1`, or the older
//! `libnvToolsExt.so.1`; nothing is needed to build, and without it the calls still work), and
//! is recorded in the calling thread's log, on every driver, so a program (a test) can read back
//! the ranges it emitted: [`crate::testing::take_nvtx_records`]. The log keeps a thread's last
//! [`LOG_CAPACITY`] records.
//!
//! The values returned are cudasem's own tracking, the same with or without a profiler attached
//! (the bare library returns `-2`, "no tracking", when none is): [`range_push`] the zero-based
//! depth of the range started, [`range_pop`] that of the range ended, or `-1` when the thread
//! has no range open (NVTX's error value); [`range_start`] a process-wide id, never 0.
//!
//! **Ranges around operations** ([`emit_nvtx`], `CUDASEM_NVTX=1`, [`Config::nvtx`](crate::Config::nvtx)):
//! every kernel, fill, copy, collective and graph replay passing the door is wrapped in a range
//! pushed on the calling thread and popped once the work is queued (as PyTorch's ranges cover the
//! op's host side; the kernels appear under them in Nsight Systems through CUDA's correlation).
//! The names follow `torch.autograd.profiler.emit_nvtx`: `"aten::add, seq = 12"` — the ATen op
//! the work is in PyTorch (`aten::copy_` for every copy, `aten::fill_`, `aten::zero_` for a
//! memset, `aten::mm` for a matrix product, …), then the thread's sequence number of operations
//! (PyTorch's is its autograd sequence number; cudasem counts every op the thread queued with
//! ranges on). Collectives are named as `ProcessGroupNCCL` names its profiler ranges
//! (`"nccl:all_reduce"`), a graph replay `"CUDAGraph::replay"`. Off, each door call pays one
//! relaxed atomic load.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::driver::nvtx_lib;
use crate::kernel::random::Distribution;
use crate::kernel::{KernelOp, ReduceOp};

/// How many records a thread's log keeps (the oldest are dropped first).
pub const LOG_CAPACITY: usize = 1 << 16;

/// One NVTX call (or profiler start/stop) as the calling thread's log records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Record {
    /// [`range_push`] (or an operation's range): the message and the depth returned.
    Push {
        /// The range's message (cut at its first NUL byte, as NVTX's C string sees it).
        message: String,
        /// The zero-based depth of the range started.
        depth: i32,
    },
    /// [`range_pop`]: the zero-based depth of the range ended, `-1` with none open.
    Pop {
        /// The value returned.
        depth: i32,
    },
    /// [`range_start`]: the message and the id returned.
    Start {
        /// The range's message.
        message: String,
        /// The range's id.
        id: u64,
    },
    /// [`range_end`] of range `id`.
    End {
        /// The id given.
        id: u64,
    },
    /// [`mark`].
    Mark {
        /// The mark's message.
        message: String,
    },
    /// [`profiler::start`](crate::cuda::profiler::start) on `device`.
    ProfilerStart {
        /// The device whose context the profiler collects.
        device: usize,
    },
    /// [`profiler::stop`](crate::cuda::profiler::stop) on `device`.
    ProfilerStop {
        /// The device.
        device: usize,
    },
}

/// A thread's open push/pop ranges, its operation count and its log.
#[derive(Default)]
struct ThreadLog {
    depth: i32,
    seq: u64,
    records: VecDeque<Record>,
}

impl ThreadLog {
    fn push_record(&mut self, r: Record) {
        if self.records.len() == LOG_CAPACITY {
            self.records.pop_front();
        }
        self.records.push_back(r);
    }
}

thread_local! {
    static LOG: RefCell<ThreadLog> = RefCell::default();
}

/// `f` over the calling thread's log (nothing, and `R`'s default, once the thread is ending and
/// its log is gone).
fn with_log<R: Default>(f: impl FnOnce(&mut ThreadLog) -> R) -> R {
    LOG.try_with(|l| f(&mut l.borrow_mut())).unwrap_or_default()
}

/// `message` as the C string NVTX receives: cut at its first NUL byte.
fn c_message(message: &str) -> CString {
    let cut = message.split('\0').next().unwrap_or_default();
    CString::new(cut).unwrap_or_default()
}

/// Pushes a range named `msg` onto the calling thread's stack of nested ranges
/// (`torch.cuda.nvtx.range_push`); returns the zero-based depth of the range started.
pub fn range_push(msg: &str) -> i32 {
    let c = c_message(msg);
    let _ = nvtx_lib::range_push(&c);
    with_log(|l| {
        let depth = l.depth;
        l.depth += 1;
        l.push_record(Record::Push { message: c.to_string_lossy().into_owned(), depth });
        depth
    })
}

/// Pops the calling thread's innermost range (`torch.cuda.nvtx.range_pop`); returns the
/// zero-based depth of the range ended, or `-1` when the thread has no range open (nothing is
/// popped then).
pub fn range_pop() -> i32 {
    with_log(|l| {
        let depth = if l.depth > 0 {
            let _ = nvtx_lib::range_pop();
            l.depth -= 1;
            l.depth
        } else {
            -1
        };
        l.push_record(Record::Pop { depth });
        depth
    })
}

/// Process-wide range ids, and the library's id of each range started while a profiler gave one.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static LIBRARY_IDS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);

/// Starts a range named `msg` that need not nest and may end on another thread
/// (`torch.cuda.nvtx.range_start`); returns its id (unique in the process, never 0), for
/// [`range_end`].
pub fn range_start(msg: &str) -> u64 {
    let c = c_message(msg);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    if let Some(lib_id) = nvtx_lib::range_start(&c).filter(|&i| i != 0) {
        let mut ids = LIBRARY_IDS.lock().unwrap_or_else(PoisonError::into_inner);
        ids.get_or_insert_with(HashMap::new).insert(id, lib_id);
    }
    with_log(|l| l.push_record(Record::Start { message: c.to_string_lossy().into_owned(), id }));
    id
}

/// Ends the range [`range_start`] returned `id` for (`torch.cuda.nvtx.range_end`); an id it
/// did not return is recorded and otherwise ignored, as NVTX ignores it.
pub fn range_end(id: u64) {
    let lib_id = LIBRARY_IDS.lock().unwrap_or_else(PoisonError::into_inner).as_mut().and_then(|ids| ids.remove(&id));
    if let Some(lib_id) = lib_id {
        nvtx_lib::range_end(lib_id);
    }
    with_log(|l| l.push_record(Record::End { id }));
}

/// Marks an instant named `msg` on the timeline (`torch.cuda.nvtx.mark`).
pub fn mark(msg: &str) {
    let c = c_message(msg);
    nvtx_lib::mark(&c);
    with_log(|l| l.push_record(Record::Mark { message: c.to_string_lossy().into_owned() }));
}

/// A range open on the calling thread until dropped (`torch.cuda.nvtx.range`, the context
/// manager): [`range_push`] as it is made, [`range_pop`] as it drops. It stays on its thread.
#[must_use = "the range ends when this guard drops"]
pub struct Range {
    depth: i32,
    /// Push and pop belong to one thread's stack.
    _thread: PhantomData<*const ()>,
}

impl Range {
    /// The zero-based depth of the range ([`range_push`]'s value).
    pub fn depth(&self) -> i32 {
        self.depth
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        range_pop();
    }
}

/// Opens a range named `msg` until the returned guard drops (`with torch.cuda.nvtx.range(msg):`;
/// format the message with `format!` where PyTorch takes `msg.format(*args)`).
pub fn range(msg: &str) -> Range {
    Range { depth: range_push(msg), _thread: PhantomData }
}

/// How many reasons to emit operation ranges hold: the configuration's, and each live [`EmitNvtx`].
static EMIT: AtomicUsize = AtomicUsize::new(0);

/// Operation ranges are on while this guard lives (`with torch.autograd.profiler.emit_nvtx():`);
/// process-wide, for every thread's operations.
#[must_use = "operation ranges stop when this guard drops"]
pub struct EmitNvtx(());

impl Drop for EmitNvtx {
    fn drop(&mut self) {
        EMIT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Turns on a range around every operation cudasem queues, until the guard drops
/// (`torch.autograd.profiler.emit_nvtx()`; the module documentation gives the names).
pub fn emit_nvtx() -> EmitNvtx {
    EMIT.fetch_add(1, Ordering::Relaxed);
    EmitNvtx(())
}

/// Whether operation ranges are on now ([`emit_nvtx`] or `CUDASEM_NVTX=1`).
pub fn is_emitting() -> bool {
    op_ranges()
}

/// Operation ranges from the configuration (`CUDASEM_NVTX`): on for the rest of the process.
pub(crate) fn enable_from_config() {
    EMIT.fetch_add(1, Ordering::Relaxed);
}

/// The door's check (one relaxed load).
#[inline]
pub(crate) fn op_ranges() -> bool {
    EMIT.load(Ordering::Relaxed) != 0
}

/// An operation's range, popped as it drops.
pub(crate) struct OpRange(PhantomData<*const ()>);

impl Drop for OpRange {
    fn drop(&mut self) {
        range_pop();
    }
}

/// A range around the operation `name` gives (its ATen name) when operation ranges are on; one
/// relaxed load and `None` when they are off.
#[inline]
pub(crate) fn op_range(name: impl FnOnce() -> Cow<'static, str>) -> Option<OpRange> {
    if !op_ranges() {
        return None;
    }
    Some(open_op_range(&name()))
}

#[cold]
fn open_op_range(name: &str) -> OpRange {
    let seq = with_log(|l| {
        l.seq += 1;
        l.seq - 1
    });
    range_push(&format!("{name}, seq = {seq}"));
    OpRange(PhantomData)
}

/// Every copy's range (PyTorch's copies, between devices and the host or within one, are all
/// `aten::copy_`).
pub(crate) const COPY: &str = "aten::copy_";
/// A user kernel's range (`cuda::compile_kernel`'s kernels, and their host twins).
pub(crate) const USER_KERNEL: &str = "cudasem::user_kernel";

/// `aten::NAME`.
pub(crate) fn aten(name: &str) -> Cow<'static, str> {
    format!("aten::{name}").into()
}

/// The ATen op a kernel is in PyTorch.
pub(crate) fn kernel_name(op: &KernelOp) -> Cow<'static, str> {
    let name = match op {
        KernelOp::Fill { .. } => "aten::fill_",
        KernelOp::Cast { .. } | KernelOp::CopyStrided { .. } => COPY,
        KernelOp::Unary { op, .. } => return aten(op.name()),
        KernelOp::Binary { op, .. } | KernelOp::BinaryScalar { op, .. } => return aten(op.name()),
        KernelOp::Where { .. } => "aten::where",
        KernelOp::Reduce { op, .. } => match op {
            ReduceOp::Max => "aten::amax",
            ReduceOp::Min => "aten::amin",
            other => return aten(other.name()),
        },
        KernelOp::Extreme { max: true, .. } => "aten::max",
        KernelOp::Extreme { max: false, .. } => "aten::min",
        KernelOp::Softmax { log: false, .. } => "aten::_softmax",
        KernelOp::Softmax { log: true, .. } => "aten::_log_softmax",
        KernelOp::Gemm { .. } => "aten::mm",
        KernelOp::Norm { rms: false, .. } => "aten::native_layer_norm",
        KernelOp::Norm { rms: true, .. } => "aten::rms_norm",
        KernelOp::Attention { .. } => "aten::scaled_dot_product_attention",
        KernelOp::Random(r) => match r.dist {
            Distribution::Uniform { .. } => "aten::uniform_",
            Distribution::Normal { .. } => "aten::normal_",
            Distribution::Bernoulli { .. } => "aten::bernoulli_",
            Distribution::Exponential { .. } => "aten::exponential_",
            Distribution::Integers { .. } => "aten::random_",
            Distribution::Dropout { .. } => "aten::native_dropout",
            Distribution::Multinomial { .. } => "aten::multinomial",
            Distribution::Permutation => "aten::randperm",
        },
    };
    name.into()
}

/// Records a profiler start or stop on the calling thread's log.
pub(crate) fn record(r: Record) {
    with_log(|l| l.push_record(r));
}

/// The calling thread's records, oldest first, leaving its log empty (its open ranges stay open).
pub(crate) fn take_records() -> Vec<Record> {
    with_log(|l| std::mem::take(&mut l.records).into())
}

/// Whether NVIDIA's NVTX library loaded (then a profiler attached to the process sees the ranges).
pub fn library_loaded() -> bool {
    nvtx_lib::available()
}
