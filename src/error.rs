//! The crate's one public error type.
//!
//! Every fallible call in cudasem returns [`Result<T>`](crate::Result). Variants carry structured
//! fields so a program can react to them, and their `Display` text says what to do next.
//!
//! `Debug` prints the variant's name and that text (`DeviceMismatch: Expected all tensors to be
//! on the same device, …`), so `fn main() -> cudasem::Result<()>` shows the hint when it fails.
//! [`Error`] is a `std::error::Error + Send + Sync + 'static` whose causes chain through
//! [`source`](std::error::Error::source), so `?` turns it into `Box<dyn std::error::Error>`,
//! `anyhow::Error` or an error type of your own with `From<cudasem::Error>`; and
//! `std::io::Error` turns into it ([`Error::Io`]), for `?` on file reads inside a cudasem program.

/// Result alias used throughout cudasem.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in cudasem.
///
/// Errors never poison the runtime: after any of them the same thread (and every other thread)
/// can keep using every device.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[doc(alias = "OutOfMemoryError", alias = "CudaError")]
pub enum Error {
    /// A device index outside `0..count`.
    #[error("invalid device index {index}: this machine has {count} CUDA device(s) ({driver} driver), valid indices are 0..{count}; check CUDA_VISIBLE_DEVICES / CUDASEM_SIM_DEVICES or use cudasem::cuda::device_count()")]
    InvalidDevice {
        /// The index that was asked for.
        index: usize,
        /// How many devices there are.
        count: usize,
        /// The driver in use (`"cuda"` or `"sim"`).
        driver: &'static str,
    },
    /// The call needs a CUDA device and the driver found none.
    #[error("no CUDA device is available ({driver} driver: {reason}); run on a machine with an NVIDIA GPU, or use the simulated machine with CUDASEM_DRIVER=sim")]
    NoDevice {
        /// The driver in use.
        driver: &'static str,
        /// Why no device was found.
        reason: String,
    },
    /// A CPU device (or another non-CUDA device) was given where a CUDA device is required.
    #[error("expected a CUDA device but got `{device}`; pass a CUDA device such as \"cuda:0\" or an index")]
    NotCudaDevice {
        /// The device as it was written.
        device: String,
    },
    /// A device string that does not parse.
    #[error("invalid device string `{input}`: {reason}; expected \"cpu\", \"cuda\" or \"cuda:N\"")]
    InvalidDeviceString {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Peer access between two devices is not possible on this machine.
    #[error("peer access from cuda:{from} to cuda:{to} is not supported on this machine (check cudasem::cuda::can_device_access_peer first; copies between the two still work, staged through the host)")]
    PeerAccessUnsupported {
        /// The device that would read.
        from: usize,
        /// The device whose memory would be read.
        to: usize,
    },
    /// `Event::elapsed_time` on an event created without timing.
    #[error("both events must be created with enable_timing = true to measure elapsed time (Event::new(EventFlags {{ enable_timing: true, .. }}))")]
    EventTimingDisabled,
    /// An event that was never recorded was used where a recorded one is needed.
    #[error("both events must be recorded before calculating elapsed time; call record(None) (the current stream) or record(Some(&stream)) on each first")]
    EventNotRecorded,
    /// An event's recorded work has not finished yet.
    #[error("the event's work has not completed yet; call end_event.synchronize() before elapsed_time")]
    EventNotReady,
    /// An event and a stream (or two events) that belong to different devices.
    #[error("event is on cuda:{event_device} but the {what} is on cuda:{other_device}; events can only be recorded on, and timed against, the device they were first recorded on")]
    EventDeviceMismatch {
        /// The event's device.
        event_device: usize,
        /// The other party's device.
        other_device: usize,
        /// What the other party is (`"stream"` or `"end event"`).
        what: &'static str,
    },
    /// A stream handle that this process's runtime does not know.
    #[error("unknown stream handle {stream}; use streams made by cudasem::cuda::Stream::new or current_stream/default_stream")]
    UnknownStream {
        /// Driver handle of the stream.
        stream: u64,
    },
    /// The device is out of memory.
    ///
    /// The message has PyTorch's shape: what was asked for, the device's capacity and free memory,
    /// and how much of the caching allocator's memory is allocated and how much is cached.
    #[error("CUDA out of memory. Tried to allocate {}. GPU {device} has a total capacity of {} of which {} is free. Of the allocated memory {} is allocated by cudasem, and {} is reserved by cudasem but unallocated. If reserved but unallocated memory is large try setting CUDASEM_ALLOC_CONF=expandable_segments:True to avoid fragmentation; otherwise free tensors or call cudasem::cuda::empty_cache()", fmt_bytes(*requested), fmt_bytes(*total), fmt_bytes(*free), fmt_bytes(*allocated), fmt_bytes(*reserved_unallocated))]
    OutOfMemory {
        /// Device index.
        device: usize,
        /// Bytes that were asked for (from the caching allocator: the segment it tried to get).
        requested: usize,
        /// The device's total memory.
        total: usize,
        /// The device's free memory at the time.
        free: usize,
        /// Bytes the caching allocator had handed out (0 for a raw driver allocation).
        allocated: usize,
        /// Bytes the caching allocator held from the driver but had not handed out (0 for a raw
        /// driver allocation).
        reserved_unallocated: usize,
    },
    /// A malformed allocator trace (see `cudasem::alloc::trace`).
    #[error("invalid allocator trace at line {line}: {reason}; expected CSV rows `action,addr,size,stream`")]
    InvalidTrace {
        /// 1-based line number in the trace text.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A memory snapshot file that cannot be read as cudasem's JSON or PyTorch's pickle (see
    /// `cudasem::memviz::load_snapshot`).
    #[error("invalid memory snapshot: {reason}; expected cudasem's JSON (Snapshot::to_json) or PyTorch's pickle (torch.cuda.memory._dump_snapshot)")]
    InvalidSnapshot {
        /// What is wrong with it.
        reason: String,
    },
    /// A device pointer that is not (or no longer) a live allocation of that device.
    #[error("invalid device pointer {ptr:#x} on cuda:{device}: {reason}")]
    InvalidPointer {
        /// Device index.
        device: usize,
        /// The pointer.
        ptr: u64,
        /// Why it is invalid.
        reason: String,
    },
    /// A private memory pool (`MemPool`, a CUDA graph's pool) that the device's allocator does
    /// not know (never made there, or freed and deleted), or an operation its state forbids
    /// (releasing it past its last use, routing to it twice, sharing a pool being freed).
    #[error("{op}: memory pool ({}, {}) on cuda:{device}: {reason}", pool.0, pool.1)]
    MemPool {
        /// The operation.
        op: &'static str,
        /// Device index.
        device: usize,
        /// The pool's id pair (`MemPoolId`).
        pool: (u64, u64),
        /// Why it was refused.
        reason: String,
    },
    /// A malformed environment variable or configuration value.
    #[error("invalid value `{value}` for {key}: {reason}")]
    InvalidConfig {
        /// The variable or key.
        key: String,
        /// The value found.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// A bad argument to a call that is not covered by a more specific variant.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The call.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The driver does not support this operation on this machine.
    #[error("{op} is not supported by the {driver} driver: {reason}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The driver.
        driver: &'static str,
        /// Why.
        reason: String,
    },
    /// A reading or facility that this machine cannot give: NVML missing or not answering, a
    /// sensor the device lacks, or something a simulated GPU cannot know (its temperature). Never
    /// replaced by a made-up value such as zero.
    #[error("{what} is not available: {why}")]
    NotSupported {
        /// What was asked for (`"temperature"`, `"power_draw"`, …).
        what: &'static str,
        /// Why it cannot be had here, and what would make it available.
        why: String,
    },
    /// An error injected by a test hook (see `cudasem::testing`).
    #[error("injected failure on cuda:{device}: {op}")]
    Injected {
        /// Device index.
        device: usize,
        /// The operation that was made to fail.
        op: &'static str,
    },
    /// An error reported by the CUDA driver (or NVRTC, cuBLASLt) that no other variant describes.
    ///
    /// `code` and `name` are the library's own (`CUresult`, `nvrtcResult`, `cublasStatus_t`), so
    /// a program can match on them and look them up in NVIDIA's documentation.
    #[error("CUDA error in {op}: {name} (code {code}): {message}")]
    Driver {
        /// The driver call, e.g. `cuLaunchKernel`.
        op: &'static str,
        /// The error's number, e.g. `719` for `CUDA_ERROR_LAUNCH_FAILED`.
        code: i32,
        /// The error's name, e.g. `CUDA_ERROR_LAUNCH_FAILED`.
        name: String,
        /// The library's description, or the compiler's log.
        message: String,
    },
    /// A broken internal invariant of cudasem: a bug, not a misuse.
    #[error(
        "internal error in {op}: {reason}; this is a bug in cudasem, please report it with the steps that led here"
    )]
    Internal {
        /// Where it was found.
        op: &'static str,
        /// What was found broken.
        reason: String,
    },
    /// Tensors of one op live on different devices (and peer access between the two CUDA
    /// devices is not enabled).
    #[error("Expected all tensors to be on the same device, but found at least two devices, {lhs} and {rhs}! ({op}: {})", device_mismatch_hint(*lhs, *rhs))]
    DeviceMismatch {
        /// The op.
        op: &'static str,
        /// The device the op runs on (its first operand's).
        lhs: crate::Device,
        /// The device of the operand that does not fit.
        rhs: crate::Device,
    },
    /// Two shapes that must broadcast together (or be equal) do not.
    #[error("{op}: the size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension {}; shapes {lhs:?} and {rhs:?} are not broadcastable (sizes must be equal or 1 in each dimension, aligned from the right)", mismatch_at(lhs, rhs).1, mismatch_at(lhs, rhs).2, mismatch_at(lhs, rhs).0)]
    ShapeMismatch {
        /// The op.
        op: &'static str,
        /// The first shape (for `expand`/`copy_`: the tensor's own; for in-place ops: the source's).
        lhs: Vec<usize>,
        /// The second shape (for `expand`/`copy_`/in-place ops: the target shape).
        rhs: Vec<usize>,
    },
    /// A matrix product whose inner dimensions differ.
    #[error("{op}: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{}); the last dimension of the first operand must equal the second-to-last dimension of the second (shapes {lhs:?} and {rhs:?}); transpose or reshape an operand", matrix_dims(lhs).0, matrix_dims(lhs).1, matrix_dims(rhs).0, matrix_dims(rhs).1)]
    MatmulShapeMismatch {
        /// The op (`matmul`, `bmm`).
        op: &'static str,
        /// Shape of the first operand.
        lhs: Vec<usize>,
        /// Shape of the second operand.
        rhs: Vec<usize>,
    },
    /// A dimension index outside the tensor's rank.
    #[error("{op}: Dimension out of range (expected to be in range of [{}, {}], but got {dim})", -(dim_bound(*ndim) as i64), dim_bound(*ndim) - 1)]
    InvalidDim {
        /// The op.
        op: &'static str,
        /// The dimension as given (negative counts from the end).
        dim: i64,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// A shape that does not fit the op or the data (a reshape to another element count, a
    /// `view` of incompatible strides, a slice past the end, …).
    #[error("{op}: invalid shape {shape:?}: {reason}")]
    InvalidShape {
        /// The op.
        op: &'static str,
        /// The shape as given (`-1` = inferred).
        shape: Vec<i64>,
        /// What is wrong with it.
        reason: String,
    },
    /// An op that has no implementation for a dtype (PyTorch: `"gelu" not implemented for 'Long'`).
    #[error("\"{op}\" not implemented for '{}' (dtype {dtype}); convert the tensor first, e.g. with .to_dtype(DType::F32)", dtype.scalar_type_name())]
    UnsupportedDType {
        /// The op.
        op: &'static str,
        /// The dtype it does not support.
        dtype: crate::DType,
    },
    /// A tensor of the wrong dtype where one dtype is required (a bool condition, `to_vec::<T>`
    /// of another dtype, matmul operands of two dtypes).
    #[error("{op}: expected a tensor of dtype {expected} but found {found}")]
    DTypeMismatch {
        /// The op.
        op: &'static str,
        /// The dtype required.
        expected: crate::DType,
        /// The dtype found.
        found: crate::DType,
    },
    /// Host memory for a CPU tensor (or a staging buffer) could not be allocated.
    #[error("host out of memory: tried to allocate {} for a CPU tensor or staging buffer; use smaller tensors", fmt_bytes(*requested))]
    HostOutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
    /// An in-place op whose result dtype cannot be stored in the tensor (PyTorch's `can_cast`).
    #[error("{op}: result type {} can't be cast to the desired output type {}; use an out-of-place op or convert the operand", from.scalar_type_name(), to.scalar_type_name())]
    CannotCast {
        /// The op.
        op: &'static str,
        /// The result dtype of the op.
        from: crate::DType,
        /// The dtype of the tensor written in place.
        to: crate::DType,
    },
    /// `cudasem::init` came too late: after an earlier `init`, or after the runtime started.
    #[error("cudasem::init must be called at most once, before any other cudasem call: {reason}")]
    AlreadyInitialized {
        /// What came first.
        reason: &'static str,
    },
    /// A collective was given a tensor that is not on the device of this rank's process group.
    #[error("{op}: rank {rank} of the process group drives cuda:{expected}, but the tensor is on {found}; move the tensor with .to(\"cuda:{expected}\", false) or make the group on the tensor's device")]
    WrongDeviceForRank {
        /// The collective.
        op: &'static str,
        /// The rank in its group.
        rank: usize,
        /// The group's device for this rank.
        expected: usize,
        /// Where the tensor lives.
        found: crate::Device,
    },
    /// Ranks called different collectives, or the same one with different sizes or dtypes: found
    /// through the store before the backend could hang.
    #[error("collective #{seq} does not match across ranks: rank {rank} called {ours} but rank {peer} called {theirs}; every rank must call the same collectives in the same order with the same sizes and dtypes")]
    CollectiveMismatch {
        /// The collective's sequence number in its group (from 1).
        seq: u64,
        /// This rank.
        rank: usize,
        /// A rank that disagrees.
        peer: usize,
        /// What this rank called (op, dtype, element counts).
        ours: String,
        /// What `peer` called.
        theirs: String,
    },
    /// The split sizes of an `all_to_all_single` do not pair up across ranks: what rank `src`
    /// sends to rank `dst` is not what `dst` expects from `src`. Found through the store, so
    /// every rank reports the same pair.
    #[error("collective #{seq} ({op}) does not match across ranks (seen by rank {rank}): rank {src} sends {sent} elements to rank {dst}, which expects {expected} from it; rank r's output_split_sizes[s] must equal rank s's input_split_sizes[r] (rows of the same size)")]
    SplitMismatch {
        /// The collective (`all_to_all_single`).
        op: &'static str,
        /// Its sequence number in its group (from 1).
        seq: u64,
        /// The rank reporting.
        rank: usize,
        /// The sending rank of the first pair that disagrees.
        src: usize,
        /// The receiving rank.
        dst: usize,
        /// Elements `src` sends to `dst`.
        sent: usize,
        /// Elements `dst` expects from `src`.
        expected: usize,
    },
    /// Ranks did not arrive in time: at a rendezvous, a store wait or a collective.
    #[error("distributed timeout after {timeout_ms} ms waiting for {what}; a rank may have died or not started (check every rank's output), or raise the timeout")]
    DistributedTimeout {
        /// What was awaited (keys, ranks, the rendezvous).
        what: String,
        /// The timeout in milliseconds.
        timeout_ms: u64,
    },
    /// A rank of the group, or the store's server, is gone (its connection closed or failed).
    #[error("rank {rank} is gone ({reason}); the process group cannot continue: destroy it and restart every rank")]
    RankFailed {
        /// The rank that failed (0 for the store's server).
        rank: usize,
        /// What was seen.
        reason: String,
    },
    /// The process group was aborted (its communicator too: NCCL's `ncclCommAbort`) after
    /// `cause`: a collective that did not finish within the group's timeout, or an error the
    /// communicator met asynchronously. Every later call on the group fails with this at once.
    #[error("{op}: the process group (rank {rank}) was aborted after an earlier failure and cannot run collectives any more; destroy it and make a new one on every rank. The failure: {cause}")]
    ProcessGroupAborted {
        /// The refused call.
        op: &'static str,
        /// This rank.
        rank: usize,
        /// What made the group abort.
        #[source]
        cause: Box<Error>,
    },
    /// The key-value store (`TcpStore`) failed: connecting, a malformed message, a bad request.
    #[error("store error in {op}: {reason}")]
    Store {
        /// The store call (`set`, `get`, `connect`, ...).
        op: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The NCCL library could not be loaded.
    #[error("NCCL not found: {reason}; searched {searched:?}. Install NCCL (a system package, or `pip install nvidia-nccl-cu12` / PyTorch's wheel) or set CUDASEM_NCCL_LIB to the path of libnccl.so.2")]
    NcclNotFound {
        /// Why it was not loaded.
        reason: String,
        /// Every path and name tried, in order.
        searched: Vec<String>,
    },
    /// An error reported by NCCL.
    #[error("NCCL error in {op}: {name} (code {code}): {message}")]
    Nccl {
        /// The NCCL call, e.g. `ncclAllReduce`.
        op: &'static str,
        /// The `ncclResult_t` number.
        code: i32,
        /// Its name, e.g. `ncclInvalidUsage`.
        name: String,
        /// NCCL's description and last error text.
        message: String,
    },
    /// A call CUDA forbids while a stream capture is underway (synchronizing, querying or
    /// timing an event, a blocking copy to or from the host, host tensor work, …). It was not
    /// made, and the capture is invalidated: `capture_end` reports it and records nothing.
    #[error("{call} is not allowed while a CUDA graph capture is underway ({reason}); the capture (id {capture}) is invalidated, so end it and capture again without this call (do host work and synchronization before capture_begin or after capture_end)")]
    IllegalDuringCapture {
        /// The refused call (`Tensor::to_vec`, `Stream::synchronize`, …).
        call: &'static str,
        /// The capture it would have broken.
        capture: u64,
        /// Why it is refused.
        reason: String,
    },
    /// `capture_end` of a capture that an earlier refused call invalidated; the capture is over
    /// and nothing was recorded.
    #[error("the CUDA graph capture (id {capture}) was invalidated by {call} ({reason}); it has ended without a graph: begin a new capture without that call")]
    CaptureInvalidated {
        /// The capture.
        capture: u64,
        /// The call that invalidated it.
        call: &'static str,
        /// Why that call was refused.
        reason: String,
    },
    /// A stream joined a capture (it waited on an event recorded in it) and queued work that the
    /// capturing stream never waited for before `capture_end`.
    #[error("stream {stream:#x} joined the CUDA graph capture (id {capture}) but its last captured work was not joined back into the capturing stream before capture_end; call capturing_stream.wait_stream(&that_stream) after that work (the capture has ended without a graph)")]
    CaptureUnjoined {
        /// The capture.
        capture: u64,
        /// The stream left unjoined ([`Stream::id`](crate::cuda::Stream::id)).
        stream: u64,
    },
    /// A graph or capture call made in the wrong state: capturing the default stream, a second
    /// `capture_begin`, `capture_end` without a capture or on another stream, `replay` before a
    /// capture, inputs that do not match a graphed callable's.
    #[error("{op}: {reason}")]
    GraphState {
        /// The call.
        op: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The stream sanitizer ([`cuda::sanitizer`](crate::cuda::sanitizer)) refused an operation
    /// whose access to device memory is not ordered after a conflicting access on another stream
    /// (or after a use, on another stream, of memory freed since without `record_stream`). The
    /// operation was not queued; the runtime goes on. The report names the tensor, both streams,
    /// both operations, read or write, and the backtraces of both accesses and of the allocation.
    #[error("{report}")]
    UnsynchronizedAccess {
        /// What raced, where, and where each access came from.
        report: Box<crate::race::AccessRace>,
    },
    /// A call that makes the host wait for the device, made while
    /// [`cuda::set_sync_debug_mode`](crate::cuda::set_sync_debug_mode) is `Error`
    /// (PyTorch's "called a synchronizing CUDA operation"). It was not made.
    #[error("{call} at {location} is a synchronizing CUDA operation (it makes the host wait for the device), refused because cuda::set_sync_debug_mode is Error; avoid the wait (keep the data on the device, use a pinned non_blocking copy and an Event) or set the mode back to Default or Warn")]
    SynchronizingOperation {
        /// The call (`Tensor::to_vec`, `Stream::synchronize`, …).
        call: &'static str,
        /// Where it was called from (`file:line:column`).
        location: String,
    },
    /// Several asynchronous errors are pending on one device (raised in a `Drop`, or by a
    /// collective that failed after it was queued); each is kept, in the order raised. One
    /// pending error is returned as itself. Sticky, as CUDA's: every synchronization point of the
    /// device returns them until [`cuda::get_last_error`](crate::cuda::get_last_error) takes them.
    #[error("{} asynchronous errors are pending on cuda:{device} (sticky until cudasem::cuda::get_last_error({device}) takes them): {}", errors.len(), numbered(errors))]
    DeviceErrors {
        /// The device.
        device: usize,
        /// The errors, oldest first.
        errors: Vec<Error>,
    },
}

/// `errors` as `1) …; 2) …`.
fn numbered(errors: &[Error]) -> String {
    let items: Vec<String> = errors.iter().enumerate().map(|(i, e)| format!("{}) {e}", i + 1)).collect();
    items.join("; ")
}

impl Error {
    /// The variant's name (`"DeviceMismatch"`), as `Debug` prints it before the message.
    pub fn variant_name(&self) -> &'static str {
        match self {
            Error::InvalidDevice { .. } => "InvalidDevice",
            Error::NoDevice { .. } => "NoDevice",
            Error::NotCudaDevice { .. } => "NotCudaDevice",
            Error::InvalidDeviceString { .. } => "InvalidDeviceString",
            Error::PeerAccessUnsupported { .. } => "PeerAccessUnsupported",
            Error::EventTimingDisabled => "EventTimingDisabled",
            Error::EventNotRecorded => "EventNotRecorded",
            Error::EventNotReady => "EventNotReady",
            Error::EventDeviceMismatch { .. } => "EventDeviceMismatch",
            Error::UnknownStream { .. } => "UnknownStream",
            Error::OutOfMemory { .. } => "OutOfMemory",
            Error::InvalidTrace { .. } => "InvalidTrace",
            Error::InvalidSnapshot { .. } => "InvalidSnapshot",
            Error::InvalidPointer { .. } => "InvalidPointer",
            Error::MemPool { .. } => "MemPool",
            Error::InvalidConfig { .. } => "InvalidConfig",
            Error::InvalidArgument { .. } => "InvalidArgument",
            Error::Unsupported { .. } => "Unsupported",
            Error::NotSupported { .. } => "NotSupported",
            Error::Injected { .. } => "Injected",
            Error::Driver { .. } => "Driver",
            Error::Internal { .. } => "Internal",
            Error::DeviceMismatch { .. } => "DeviceMismatch",
            Error::ShapeMismatch { .. } => "ShapeMismatch",
            Error::MatmulShapeMismatch { .. } => "MatmulShapeMismatch",
            Error::InvalidDim { .. } => "InvalidDim",
            Error::InvalidShape { .. } => "InvalidShape",
            Error::UnsupportedDType { .. } => "UnsupportedDType",
            Error::DTypeMismatch { .. } => "DTypeMismatch",
            Error::HostOutOfMemory { .. } => "HostOutOfMemory",
            Error::CannotCast { .. } => "CannotCast",
            Error::AlreadyInitialized { .. } => "AlreadyInitialized",
            Error::WrongDeviceForRank { .. } => "WrongDeviceForRank",
            Error::CollectiveMismatch { .. } => "CollectiveMismatch",
            Error::SplitMismatch { .. } => "SplitMismatch",
            Error::DistributedTimeout { .. } => "DistributedTimeout",
            Error::RankFailed { .. } => "RankFailed",
            Error::ProcessGroupAborted { .. } => "ProcessGroupAborted",
            Error::Store { .. } => "Store",
            Error::NcclNotFound { .. } => "NcclNotFound",
            Error::Nccl { .. } => "Nccl",
            Error::IllegalDuringCapture { .. } => "IllegalDuringCapture",
            Error::CaptureInvalidated { .. } => "CaptureInvalidated",
            Error::CaptureUnjoined { .. } => "CaptureUnjoined",
            Error::GraphState { .. } => "GraphState",
            Error::DeviceErrors { .. } => "DeviceErrors",
            Error::UnsynchronizedAccess { .. } => "UnsynchronizedAccess",
            Error::SynchronizingOperation { .. } => "SynchronizingOperation",
        }
    }
}

/// The variant's name and the message (`OutOfMemory: CUDA out of memory. Tried to allocate …`):
/// what `fn main() -> cudasem::Result<()>` prints when it returns an error. `{:#?}` adds the
/// chain of causes, one a line.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {self}", self.variant_name())?;
        if f.alternate() {
            let mut cause = std::error::Error::source(self);
            while let Some(c) = cause {
                write!(f, "\n  caused by: {c}")?;
                cause = c.source();
            }
        }
        Ok(())
    }
}

/// Errors raised where they cannot be returned (in `Drop`: destroying an event, freeing memory or
/// a pinned block), kept in the order raised until calls that can return errors take them
/// (cudarc's `record_err`, without merging: the runtime drains them one by one into the device's
/// pending list, `runtime/errors.rs`).
#[derive(Debug, Default)]
pub(crate) struct Sticky(std::sync::Mutex<std::collections::VecDeque<Error>>);

impl Sticky {
    /// Keeps `e` after the errors already waiting.
    pub(crate) fn record(&self, e: Error) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push_back(e);
    }

    /// Keeps the error of `r`, if any.
    pub(crate) fn record_result(&self, r: Result<()>) {
        if let Err(e) = r {
            self.record(e);
        }
    }

    /// The oldest waiting error, if any, which no longer waits.
    pub(crate) fn take(&self) -> Result<()> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn device_mismatch_hint(lhs: crate::Device, rhs: crate::Device) -> String {
    match (lhs, rhs) {
        (crate::Device::Cuda(Some(a)), crate::Device::Cuda(Some(b))) => format!(
            "move one operand with .to(), or call cudasem::cuda::enable_peer_access({a}, {b}) to let ops read across the two GPUs"
        ),
        _ => "move one operand with .to(), .cuda() or .cpu(); only 0-dimensional CPU tensors mix with CUDA tensors"
            .to_string(),
    }
}

/// How many dimension indices a rank allows on each side (a 0-dim tensor takes `0` and `-1`).
fn dim_bound(ndim: usize) -> usize {
    ndim.max(1)
}

/// `(dimension from the left of the longer shape, size in lhs, size in rhs)` of the first
/// mismatch from the right.
fn mismatch_at(lhs: &[usize], rhs: &[usize]) -> (usize, usize, usize) {
    let n = lhs.len().max(rhs.len());
    for i in 0..n {
        let a = if i < lhs.len() { lhs[lhs.len() - 1 - i] } else { 1 };
        let b = if i < rhs.len() { rhs[rhs.len() - 1 - i] } else { 1 };
        if a != b && a != 1 && b != 1 {
            return (n - 1 - i, a, b);
        }
    }
    (n.saturating_sub(1), lhs.last().copied().unwrap_or(1), rhs.last().copied().unwrap_or(1))
}

/// `(rows, cols)` of a shape seen as a (batch of) matrices; a vector is one row.
fn matrix_dims(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [k] => (1, *k),
        [.., m, k] => (*m, *k),
    }
}

/// At most `chars` characters of `text`, with `…` where it was cut: how an error message quotes
/// what came from a file or a setting, which may be of any length.
pub(crate) fn quote_prefix(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Formats a byte count the way PyTorch's messages do (`200.00 GiB`).
pub fn fmt_bytes(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_format_like_pytorch() {
        assert_eq!(fmt_bytes(512), "512 bytes");
        assert_eq!(fmt_bytes(2048), "2.00 KiB");
        assert_eq!(fmt_bytes(200 << 30), "200.00 GiB");
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = Error::InvalidDevice { index: 7, count: 2, driver: "sim" };
        let m = e.to_string();
        assert!(m.contains("invalid device index 7") && m.contains("0..2"), "{m}");
        let oom = Error::OutOfMemory {
            device: 0,
            requested: 200 << 30,
            total: 16 << 30,
            free: 1 << 30,
            allocated: 32 << 20,
            reserved_unallocated: 34 << 20,
        };
        let m = oom.to_string();
        assert!(m.starts_with("CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free."), "{m}");
        assert!(m.contains("Of the allocated memory 32.00 MiB is allocated by cudasem, and 34.00 MiB is reserved by cudasem but unallocated."), "{m}");
        assert!(m.contains("expandable_segments:True"), "{m}");
    }

    #[test]
    fn driver_errors_keep_their_cause_and_internal_ones_say_bug() {
        let e = Error::Driver {
            op: "cuLaunchKernel",
            code: 719,
            name: "CUDA_ERROR_LAUNCH_FAILED".into(),
            message: "unspecified launch failure".into(),
        };
        assert!(matches!(e, Error::Driver { code: 719, .. }));
        let m = e.to_string();
        assert!(m.contains("cuLaunchKernel") && m.contains("CUDA_ERROR_LAUNCH_FAILED (code 719)"), "{m}");
        assert!(m.contains("unspecified launch failure"), "{m}");
        let m = Error::Internal { op: "malloc", reason: "a broken link".into() }.to_string();
        assert!(m.contains("internal error in malloc: a broken link") && m.contains("bug in cudasem"), "{m}");
    }

    #[test]
    fn debug_prints_the_variant_and_the_message_with_its_hint() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..50 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let (index, count) = ((seed % 97) as usize, (seed >> 8) as usize % 9);
            let e = Error::InvalidDevice { index, count, driver: "sim" };
            let debug = format!("{e:?}");
            assert_eq!(debug, format!("InvalidDevice: {e}"));
            assert!(debug.contains("CUDA_VISIBLE_DEVICES") && debug.contains(&format!("index {index}")), "{debug}");
            // What `fn main() -> Result` prints (`Error: {:?}`) carries the hint, not the fields.
            let shown = format!("Error: {e:?}");
            assert!(shown.contains("use cudasem::cuda::device_count()") && !shown.contains("index:"), "{shown}");
        }
        let lhs = crate::Device::cuda(0);
        let e = Error::DeviceMismatch { op: "add", lhs, rhs: crate::Device::Cpu };
        assert!(format!("{e:?}").starts_with("DeviceMismatch: Expected all tensors to be on the same device"), "{e:?}");
        assert_eq!(format!("{:?}", Error::EventNotReady), format!("EventNotReady: {}", Error::EventNotReady));
    }

    #[test]
    fn errors_are_std_errors_whose_causes_chain() {
        use std::error::Error as _;
        fn assert_std_error<T: std::error::Error + Send + Sync + 'static>() {}
        assert_std_error::<Error>();
        let mut seed = 0x9e37_79b9_u64;
        for _ in 0..20 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let cause = Error::InvalidDevice { index: (seed >> 40) as usize % 100, count: 2, driver: "sim" };
            let aborted = Error::ProcessGroupAborted {
                op: "all_reduce",
                rank: (seed >> 20) as usize % 8,
                cause: Box::new(cause.clone()),
            };
            assert_eq!(aborted.source().map(|c| c.to_string()), Some(cause.to_string()));
            assert!(format!("{aborted:#?}").contains(&format!("caused by: {cause}")), "{aborted:#?}");
            assert!(!format!("{aborted:?}").contains("caused by"), "{aborted:?}");
        }
        // Into a boxed error with `?`, and back out by downcasting.
        fn boxed() -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
            Err(Error::EventNotReady)?
        }
        let e = boxed().unwrap_err();
        assert_eq!(e.downcast_ref::<Error>(), Some(&Error::EventNotReady));
    }

    #[test]
    fn sticky_keeps_every_error_in_order_until_taken() {
        let s = Sticky::default();
        assert_eq!(s.take(), Ok(()));
        s.record(Error::Injected { device: 1, op: "free" });
        s.record_result(Err(Error::Injected { device: 1, op: "event_destroy" }));
        s.record_result(Ok(()));
        assert_eq!(s.take(), Err(Error::Injected { device: 1, op: "free" }), "the oldest first");
        assert_eq!(s.take(), Err(Error::Injected { device: 1, op: "event_destroy" }), "none merged away");
        assert_eq!(s.take(), Ok(()), "each taken once");
    }
}
