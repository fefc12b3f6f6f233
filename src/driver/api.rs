//! The driver layer's contract: the object-safe [`Driver`] trait every backend implements, and
//! the handles and properties it speaks in ([`StreamId`], [`EventId`], [`GraphId`],
//! [`CaptureMode`], [`DeviceProperties`]).

use super::comm;
pub use super::properties::DeviceProperties;
use super::telemetry::Telemetry;
use crate::error::{Error, Result};
use crate::kernel::{DenseBinary, DevicePtr, HostPtr, KernelOp};
use std::sync::Arc;
use std::time::Duration;

/// Device memory from [`Driver::malloc`], owned: neither `Copy` nor `Clone`, and given back only
/// by [`DeviceAllocation::free`], which consumes it, so it is freed at most once and only by the
/// driver that allocated it. Dropping it without `free` leaks the memory (never unsafe).
#[derive(Debug)]
#[must_use = "device memory is freed only by DeviceAllocation::free"]
pub struct DeviceAllocation {
    driver: Arc<dyn Driver>,
    device: usize,
    ptr: DevicePtr,
    bytes: usize,
}

impl DeviceAllocation {
    /// `bytes` of new memory on `device` (an index the caller checked) from `driver`.
    pub fn new(driver: &Arc<dyn Driver>, device: usize, bytes: usize) -> Result<DeviceAllocation> {
        let ptr = driver.malloc(device, bytes)?;
        Ok(DeviceAllocation { driver: driver.clone(), device, ptr, bytes })
    }

    /// The memory's device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Its device.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Frees the memory (work already queued that uses it stays valid, as with `cudaFree`). On
    /// an error the memory stays allocated and unreachable (see [`DeviceAllocation::try_free`]).
    pub fn free(self) -> Result<()> {
        self.try_free().map_err(|(e, _)| e)
    }

    /// [`DeviceAllocation::free`], giving the allocation back with the error when the driver
    /// refused to free it (the memory then stays allocated), so that the owner may try again.
    pub fn try_free(self) -> std::result::Result<(), (Error, DeviceAllocation)> {
        // SAFETY: the value was made by `new` from this driver's `malloc` for `device` and is not
        // `Copy` or `Clone`; it is consumed here, and given back only when the driver did not
        // free the memory: a pointer is freed at most once, and no safe code reaches it after.
        match unsafe { self.driver.free(self.device, self.ptr) } {
            Ok(()) => Ok(()),
            Err(e) => Err((e, self)),
        }
    }
}

impl std::fmt::Debug for dyn Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} driver", self.name())
    }
}

/// Opaque handle of a driver stream (unique within one driver instance, whatever the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

/// Opaque handle of a driver event (unique within one driver instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub u64);

/// Opaque handle of a captured, instantiated graph (unique within one driver instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GraphId(pub u64);

/// How strictly a stream capture refuses calls that could break it (`cudaStreamCaptureMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CaptureMode {
    /// Unsafe calls (synchronizing, querying events, `cudaMalloc`) are refused on every thread
    /// while the capture is underway (PyTorch's default).
    #[default]
    Global,
    /// Unsafe calls are refused only on the thread that began the capture.
    ThreadLocal,
    /// Only calls on the capturing streams themselves are refused.
    Relaxed,
}

/// A user kernel compiled and loaded by [`Driver::user_module_load`] (unique within one driver
/// instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UserFunctionId(pub u64);

/// One argument of a user kernel launch, as the driver passes it to the kernel (the driver
/// reads as many bytes as the kernel's parameter has from the argument's first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserArg {
    /// A device address (a `T*` parameter).
    Ptr(DevicePtr),
    /// A scalar's bytes, in the host's byte order, from the first byte (a by-value parameter of
    /// up to 8 bytes).
    Bytes(ScalarBytes),
}

/// A scalar argument's bytes, 8-aligned as the largest scalar parameter.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScalarBytes(pub [u8; 8]);

/// What a user kernel is loaded from (see [`Driver::user_module_load`]).
#[derive(Debug, Clone, Copy)]
pub enum UserImage<'a> {
    /// CUDA C compiled with NVRTC: the complete source, options beyond the target architecture,
    /// and the target's compute capability (`None`: the device's).
    Source {
        /// The complete source (header code included).
        source: &'a str,
        /// NVRTC options (`-I…`, `-lineinfo`, …).
        options: &'a [String],
        /// `(major, minor)` to compile for instead of the device's.
        arch: Option<(u32, u32)>,
    },
    /// PTX text (without a NUL).
    Ptx(&'a str),
    /// A cubin (or fatbin) image.
    Cubin(&'a [u8]),
}

/// A user kernel launch's shape: grid and block dimensions and dynamic shared memory bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem: u32,
}

/// The operations every backend provides. Object-safe: the runtime holds an `Arc<dyn Driver>`.
///
/// Device indices passed in are always valid (`< device_count()`), and stream/event handles were
/// made by this driver: the runtime guarantees both.
pub trait Driver: Send + Sync + 'static {
    /// `"cuda"` or `"sim"`.
    fn name(&self) -> &'static str;
    /// Number of devices (0 when the backend found none).
    fn device_count(&self) -> usize;
    /// Why there are no devices, when `device_count() == 0`.
    fn unavailable_reason(&self) -> Option<String>;
    /// The device's properties.
    fn properties(&self, device: usize) -> Result<DeviceProperties>;
    /// The device readings NVML gives (utilization, temperature, power, …), or what stands for
    /// them on a simulated machine.
    fn telemetry(&self) -> &dyn Telemetry;
    /// `(free, total)` bytes of device memory.
    fn mem_get_info(&self, device: usize) -> Result<(usize, usize)>;
    /// Whether `device` can map `peer`'s memory (`false` for `device == peer`, as CUDA says).
    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool>;
    /// Lets kernels and copies on `device` read and write `peer`'s memory. Idempotent.
    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()>;
    /// Waits for all work on every stream of `device`.
    fn synchronize_device(&self, device: usize) -> Result<()>;

    /// `(least, greatest)` stream priority; greater priority is the more negative number.
    fn stream_priority_range(&self, device: usize) -> Result<(i32, i32)>;
    /// The device's default stream.
    fn default_stream(&self, device: usize) -> Result<StreamId>;
    /// A new non-blocking stream with the given priority (within the range).
    fn create_stream(&self, device: usize, priority: i32) -> Result<StreamId>;
    /// Whether all work queued on the stream has completed.
    fn stream_query(&self, stream: StreamId) -> Result<bool>;
    /// Waits for all work queued on the stream.
    fn stream_synchronize(&self, stream: StreamId) -> Result<()>;
    /// Makes future work on `stream` wait for the last recording of `event` (no-op if never recorded).
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()>;
    /// The stream's native handle, for interop: its `CUstream` as a number on CUDA (0 for the
    /// legacy default stream); its own handle number on the simulated machine.
    fn raw_stream(&self, stream: StreamId) -> Result<u64>;
    /// The device's primary context (`CUcontext`) as a number, for interop;
    /// [`Error::Unsupported`] where the driver has none (the simulated machine).
    fn raw_context(&self, device: usize) -> Result<u64>;
    /// A handle for the native stream `raw` of `device` (a [`Driver::raw_stream`] value, or on
    /// CUDA a `CUstream` made elsewhere), and the stream's priority. A stream this driver already
    /// knows keeps its handle. Errors: a stream of another device or context, or (simulated
    /// machine) one it did not make.
    ///
    /// # Safety
    /// `raw` must be a live native stream of `device` (on CUDA: of its primary context, or
    /// 0 for the legacy default stream), and must stay live for as long as the returned handle
    /// is used: the driver never destroys a stream it did not make.
    unsafe fn import_stream(&self, device: usize, raw: u64) -> Result<(StreamId, i32)>;
    /// Checks that `bytes` bytes from `ptr` are memory `device` can address, for memory made
    /// elsewhere (`Tensor::from_blob`, DLPack imports): on the simulated machine, live memory of that
    /// device (one allocation, or mapped pieces of one reservation); on CUDA, device memory whose
    /// first and last bytes the driver attributes to `device`. [`Error::InvalidPointer`] otherwise.
    fn check_foreign_range(&self, device: usize, ptr: DevicePtr, bytes: usize) -> Result<()>;

    /// A new event on `device`.
    fn event_create(&self, device: usize, enable_timing: bool, blocking: bool) -> Result<EventId>;
    /// Releases an event (best effort; called from `Drop`).
    fn event_destroy(&self, event: EventId);
    /// Captures the work queued on `stream` so far into `event`.
    fn event_record(&self, event: EventId, stream: StreamId) -> Result<()>;
    /// Whether the captured work has completed (`true` if never recorded).
    fn event_query(&self, event: EventId) -> Result<bool>;
    /// Waits for the captured work.
    fn event_synchronize(&self, event: EventId) -> Result<()>;
    /// Milliseconds between two completed timing events.
    fn event_elapsed_ms(&self, start: EventId, end: EventId) -> Result<f32>;

    /// Allocates `bytes` of device memory (synchronous, like `cuMemAlloc`). Owned memory that
    /// can be freed safely is [`DeviceAllocation::new`]'s.
    fn malloc(&self, device: usize, bytes: usize) -> Result<DevicePtr>;
    /// Frees memory from [`Driver::malloc`]; work already queued that uses it stays valid.
    ///
    /// # Safety
    /// `ptr` was returned by this driver's [`Driver::malloc`] for `device` and has not been
    /// freed since, and nothing will use it after this call (beyond the work already queued):
    /// on a real GPU freeing any other address, or freeing twice, corrupts the driver's heap or
    /// another allocation. [`DeviceAllocation::free`] is the safe form.
    unsafe fn free(&self, device: usize, ptr: DevicePtr) -> Result<()>;
    /// Queues a byte fill of `bytes` bytes at `dst` on `stream`.
    fn memset_d8(&self, dst: DevicePtr, value: u8, bytes: usize, stream: StreamId) -> Result<()>;
    /// Copies host bytes to the device in `stream` order; returns once `src` may be reused.
    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], stream: StreamId) -> Result<()>;
    /// Copies device bytes to the host in `stream` order; returns once `dst` holds them.
    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, stream: StreamId) -> Result<()>;
    /// Queues a copy within one device.
    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()>;
    /// Queues a copy between two devices on `stream` (of either device); uses the peer link
    /// when peer access is enabled, else the driver stages it.
    fn memcpy_peer(
        &self,
        dst_device: usize,
        dst: DevicePtr,
        src_device: usize,
        src: DevicePtr,
        bytes: usize,
        stream: StreamId,
    ) -> Result<()>;

    /// Allocates `bytes` of page-locked (pinned) host memory, zeroed, that copies of every device
    /// can use (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE`). A zero-byte request still gets
    /// an address. [`Error::HostOutOfMemory`] when the host cannot provide it.
    fn host_alloc(&self, bytes: usize) -> Result<HostPtr>;
    /// Frees memory from [`Driver::host_alloc`] (`cuMemFreeHost`). No queued copy may still use it.
    fn host_free(&self, ptr: HostPtr) -> Result<()>;
    /// Queues a copy of `bytes` bytes from pinned host memory at `src` to device memory at `dst`
    /// on `stream` and returns at once, without waiting for the stream (`cuMemcpyHtoDAsync`).
    ///
    /// # Safety
    /// `[src, src + bytes)` must lie inside one live allocation from [`Driver::host_alloc`] of
    /// this driver, which must stay allocated and must not be written by the host until the
    /// stream has passed the copy (an event recorded after it has completed). `dst` must be live
    /// device memory that the stream's device can reach.
    unsafe fn memcpy_htod_async(&self, dst: DevicePtr, src: HostPtr, bytes: usize, stream: StreamId) -> Result<()>;
    /// Queues a copy of `bytes` bytes from device memory at `src` to pinned host memory at `dst`
    /// on `stream` and returns at once, without waiting for the stream (`cuMemcpyDtoHAsync`).
    ///
    /// # Safety
    /// `[dst, dst + bytes)` must lie inside one live allocation from [`Driver::host_alloc`] of
    /// this driver, which must stay allocated and must be neither read nor written by the host
    /// until the stream has passed the copy. `src` must be live device memory that the stream's
    /// device can reach.
    unsafe fn memcpy_dtoh_async(&self, dst: HostPtr, src: DevicePtr, bytes: usize, stream: StreamId) -> Result<()>;

    /// Granularity of physical pages for virtual-memory mapping (expandable segments), or `None`
    /// where the device cannot map memory into a reserved range.
    fn vmm_granularity(&self, device: usize) -> Option<usize>;
    /// Reserves `bytes` (a multiple of the granularity) of address space on `device`, with no memory
    /// behind it (`cuMemAddressReserve`).
    fn vmm_reserve(&self, device: usize, bytes: usize) -> Result<DevicePtr>;
    /// Backs `[at, at + bytes)` of a reserved range with new physical memory and makes it readable
    /// and writable by `device` and by every device peer access was enabled for (`cuMemCreate`,
    /// `cuMemMap`, `cuMemSetAccess`). `at` and `bytes` are multiples of the granularity. Fails with
    /// [`Error::OutOfMemory`] when the device has no room.
    fn vmm_map(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()>;
    /// Unmaps `[at, at + bytes)`, exactly a range given to one earlier `vmm_map` call or a union of
    /// whole such ranges, and frees the physical memory behind it (`cuMemUnmap`, `cuMemRelease`).
    fn vmm_unmap(&self, device: usize, at: DevicePtr, bytes: usize) -> Result<()>;
    /// Returns a whole reserved range (all of it unmapped first) to the driver (`cuMemAddressFree`).
    fn vmm_release(&self, device: usize, base: DevicePtr, bytes: usize) -> Result<()>;

    /// Queues `op` on `stream`; returns once it is queued (like a kernel launch). Every address
    /// the op reads or writes must be live memory of the stream's device, or of a device whose
    /// memory the stream's device may access (peer access enabled); the caller keeps it alive
    /// until the work completes. [`Error::Unsupported`] where the driver has no kernel for it.
    fn launch(&self, stream: StreamId, op: &KernelOp) -> Result<()>;

    /// Queues a binary elementwise op over dense operands on `stream`: the same as
    /// [`launch`](Driver::launch) of [`op.to_kernel_op()`](DenseBinary::to_kernel_op),
    /// which is what it does unless a driver has a shorter path (the CUDA driver launches the
    /// fast kernel at once: the host cost of a small op is mostly this call).
    fn launch_dense_binary(&self, stream: StreamId, op: &DenseBinary) -> Result<()> {
        op.validate()?;
        self.launch(stream, &op.to_kernel_op())
    }

    /// Starts capturing the work queued on `stream` into a graph instead of running it
    /// (`cuStreamBeginCapture_v2`). Streams that wait on an event recorded in the capture join it.
    /// The runtime guarantees the stream is not the default stream and is not capturing.
    fn begin_capture(&self, stream: StreamId, mode: CaptureMode) -> Result<()>;
    /// Ends the capture begun on `stream` and returns its graph, instantiated (auto-free on
    /// launch, node priorities) and uploaded, ready to [`graph_launch`](Driver::graph_launch).
    /// Errors when the driver saw the capture invalidated or a joined stream not joined back;
    /// the capture is over either way.
    fn end_capture(&self, stream: StreamId) -> Result<GraphId>;
    /// Queues one run of `graph`'s work on `stream` (of the device it was captured on).
    fn graph_launch(&self, graph: GraphId, stream: StreamId) -> Result<()>;
    /// Releases a graph (best effort; called from `Drop`). Launches already queued complete.
    fn graph_destroy(&self, graph: GraphId);
    /// The number of nodes (kernels, copies, fills) in `graph`.
    fn graph_node_count(&self, graph: GraphId) -> Result<usize>;
    /// Writes `graph` as a Graphviz DOT file at `path` (`cuGraphDebugDotPrint`).
    fn graph_debug_dot(&self, graph: GraphId, path: &std::path::Path) -> Result<()>;

    /// Test hook: queues work that keeps `stream` busy for `duration` (a spin kernel on CUDA).
    fn delay(&self, stream: StreamId, duration: Duration) -> Result<()>;
    /// Test hook: the next [`Driver::malloc`] on `device` fails with [`Error::Injected`].
    fn fail_next_malloc(&self, device: usize) -> Result<()>;
    /// Test hook: the next [`Driver::free`] on `device` fails with [`Error::Injected`] (the
    /// memory stays allocated).
    fn fail_next_free(&self, device: usize) -> Result<()>;

    /// Keeps `error`, raised for `device` where it could not be returned (in a `Drop`: destroying
    /// an event, freeing memory or a pinned block), until [`Driver::take_error`]. Errors are kept
    /// in the order raised, none merged; an invalid `device` is ignored.
    fn record_error(&self, device: usize, error: Error);
    /// The oldest error [`Driver::record_error`] kept for `device`, which is no longer kept; `Ok`
    /// when none. The runtime moves it into the device's pending errors at every synchronization point
    /// (`runtime/errors.rs`, which keeps its own errors there), so a failure in `Drop` is not lost.
    fn take_error(&self, device: usize) -> Result<()>;

    /// A new communicator's unique id (`ncclGetUniqueId`), for the first rank to share with the
    /// others through the store; [`Error::Unsupported`] (or [`Error::NcclNotFound`]) where the
    /// driver has no collectives library.
    fn comm_unique_id(&self) -> Result<Vec<u8>> {
        Err(no_collectives(self.name(), "comm_unique_id"))
    }
    /// Joins the communicator `id` as `rank` of `world` on `device` (`ncclCommInitRank`); blocks
    /// until every rank joined.
    fn comm_init_rank(&self, device: usize, world: usize, rank: usize, id: &[u8]) -> Result<Box<dyn comm::Comm>> {
        let _ = (device, world, rank, id);
        Err(no_collectives(self.name(), "comm_init_rank"))
    }
    /// One communicator per device of `devices`, rank `i` on `devices[i]`, for one process
    /// (`ncclCommInitAll`).
    fn comm_init_all(&self, devices: &[usize]) -> Result<Vec<Box<dyn comm::Comm>>> {
        let _ = devices;
        Err(no_collectives(self.name(), "comm_init_all"))
    }
    /// Queues `job` on `stream`: the stream's worker runs it on the host, with the device memory,
    /// when the stream reaches it (the simulated machine; [`Error::Unsupported`] elsewhere).
    fn host_job(&self, stream: StreamId, job: comm::HostJob) -> Result<()> {
        let _ = (stream, job);
        Err(Error::Unsupported {
            op: "host_job",
            driver: self.name(),
            reason: "host jobs over device memory exist on the simulated machine only".into(),
        })
    }
    /// Loads `image` (CUDA C compiled with NVRTC, PTX or a cubin) into `device`'s context and
    /// returns its kernel `name` (an `extern "C"` name). A compile error is an
    /// [`Error::Driver`] whose message is NVRTC's log; a bad image or a missing name is the
    /// driver's error. [`Error::Unsupported`] where the driver cannot run CUDA kernels (the
    /// simulated machine).
    fn user_module_load(&self, device: usize, image: UserImage<'_>, name: &str) -> Result<UserFunctionId> {
        let _ = (device, image, name);
        Err(Error::Unsupported {
            op: "compile_kernel",
            driver: self.name(),
            reason: "this driver cannot compile or run CUDA kernels".into(),
        })
    }
    /// The byte sizes of the parameters of the user kernel `func`, where the driver can tell
    /// (`cuFuncGetParamInfo`, CUDA 12.4 and newer); `None` where it cannot.
    fn user_param_sizes(&self, func: UserFunctionId) -> Result<Option<Vec<usize>>> {
        let _ = func;
        Ok(None)
    }
    /// Queues the user kernel `func` (loaded for the stream's device) on `stream` with `args`.
    /// The caller checked the shape against the device's limits and keeps every address alive
    /// until the kernel has run.
    fn user_launch(&self, stream: StreamId, func: UserFunctionId, shape: LaunchShape, args: &[UserArg]) -> Result<()> {
        let _ = (stream, func, shape, args);
        Err(Error::Unsupported {
            op: "launch",
            driver: self.name(),
            reason: "this driver cannot run CUDA C kernels".into(),
        })
    }
    /// Queues `kernel`, a kernel's host twin, on `stream`: the stream's worker runs it over the
    /// device memory when the stream reaches it, and again at each replay of a graph that
    /// captured it (the simulated machine; [`Error::Unsupported`] elsewhere).
    fn host_kernel(&self, stream: StreamId, kernel: comm::HostKernel) -> Result<()> {
        let _ = (stream, kernel);
        Err(Error::Unsupported {
            op: "launch",
            driver: self.name(),
            reason: "host twins of kernels run on the simulated machine only".into(),
        })
    }
    /// Queues a jiterator call on `stream` (`torch.cuda.jiterator`): the CUDA driver compiles
    /// the function into its elementwise kernels, the simulated machine into a host library run
    /// on the stream's worker. The caller validated the op (shapes, dtypes, devices) and keeps
    /// its memory alive until it has run. A compile error is an [`Error::Driver`] whose message
    /// is the compiler's log.
    fn jit_launch(&self, stream: StreamId, op: &crate::kernel::JitOp) -> Result<()> {
        let _ = (stream, op);
        Err(Error::Unsupported {
            op: "jiterator",
            driver: self.name(),
            reason: "this driver cannot run jiterator functions".into(),
        })
    }
    /// Queues a one-output jiterator call over dense operands on `stream`: the same as
    /// [`jit_launch`](Driver::jit_launch) of [`op.to_jit_op()`](crate::kernel::DenseJit::to_jit_op),
    /// which is what it does unless a driver has a shorter path (the CUDA driver launches the
    /// fast elementwise kernel at once, as [`launch_dense_binary`](Driver::launch_dense_binary)).
    fn launch_dense_jit(&self, stream: StreamId, op: &crate::kernel::DenseJit<'_>) -> Result<()> {
        op.validate()?;
        self.jit_launch(stream, &op.to_jit_op())
    }
    /// Changes the launch shapes of the tensor kernels ([`Config::cuda`](crate::Config::cuda)'s
    /// `launch_tuning`, given at construction) for the launches that follow (benchmark tuning;
    /// nothing to change on the simulated machine).
    fn set_launch_tuning(&self, tuning: crate::config::LaunchTuning) {
        let _ = tuning;
    }
    /// Starts (`start`) or stops the profiler's collection for `device`'s context
    /// (`cuProfilerStart` / `cuProfilerStop`; `torch.cuda.profiler.start/stop`). A profiler not
    /// attached ignores it.
    fn profiler(&self, device: usize, start: bool) -> Result<()>;
}

/// The error of a driver without a collectives library.
fn no_collectives(driver: &'static str, op: &'static str) -> Error {
    Error::Unsupported {
        op,
        driver,
        reason: "this driver has no collectives library (NCCL needs the cuda driver)".into(),
    }
}
