//! # cudasem — PyTorch's CUDA semantics for Rust
//!
//! A per-thread current device with guards, streams from a pool with a current stream per device,
//! events for ordering and timing, peer-access checks — with `torch.cuda`'s names and meaning,
//! on real NVIDIA GPUs (the `cuda` driver, through `cudarc`) or on a simulated multi-GPU machine
//! (the `sim` driver: CPU threads as streams, capacity-limited memory, a peer matrix), which is
//! the default where no GPU exists.
//!
//! ```
//! use cudasem::cuda::{self, DeviceGuard, Event, EventFlags, Stream, StreamGuard};
//!
//! # fn main() -> cudasem::Result<()> {
//! assert_eq!(cuda::current_device()?, 0);
//! {
//!     let _g = DeviceGuard::new(cuda::device_count() - 1)?;
//!     assert_eq!(cuda::current_device()?, cuda::device_count() - 1);
//! }
//! assert_eq!(cuda::current_device()?, 0);
//!
//! let s = Stream::new(None, 0)?;
//! let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
//! {
//!     let _g = StreamGuard::new(&s)?;
//!     start.record(None)?;
//!     cudasem::testing::delay(&s, std::time::Duration::from_millis(5))?;
//!     end.record(None)?;
//! }
//! end.synchronize()?;
//! assert!(start.elapsed_time(&end)? >= 4.0);
//! # Ok(()) }
//! ```
//!
//! ## The torch.cuda ↔ cudasem map
//!
//! | torch | cudasem |
//! |---|---|
//! | `torch.cuda.is_available()` | [`cuda::is_available`] |
//! | `torch.cuda.device_count()` | [`cuda::device_count`] |
//! | `torch.cuda.current_device()` | [`cuda::current_device`] |
//! | `torch.cuda.set_device(i)` | [`cuda::set_device`] (index, [`Device`] or `"cuda:N"`) |
//! | `with torch.cuda.device(i):` (`torch.cuda.device`) | `let _g = `[`cuda::DeviceGuard::new`]`(i)?;` or [`cuda::with_device`] |
//! | `torch.cuda.get_device_name(i)` | [`cuda::get_device_name`] |
//! | `torch.cuda.get_device_properties(i)` | [`cuda::get_device_properties`] ([`cuda::DeviceProperties`]: every `_CudaDeviceProperties` field; `Display` is its repr) |
//! | `torch.cuda.synchronize(d)` | [`cuda::synchronize`] |
//! | `cudaGetLastError` / `cudaPeekAtLastError` (asynchronous errors, sticky per device) | [`cuda::get_last_error`], [`cuda::peek_at_last_error`] |
//! | `torch.cuda.can_device_access_peer(a, b)` | [`cuda::can_device_access_peer`] |
//! | (implicit in torch) | [`cuda::enable_peer_access`], [`cuda::is_peer_access_enabled`] |
//! | — | [`cuda::driver_name`] (`"cuda"` or `"sim"`) |
//! | `torch.cuda.Stream(device, priority)` | [`cuda::Stream::new`] (from the pool, round-robin) |
//! | `torch.cuda.current_stream(d)` / `default_stream(d)` | [`cuda::current_stream`] / [`cuda::default_stream`] |
//! | `torch.cuda.set_stream(s)` | [`cuda::set_stream`] |
//! | `with torch.cuda.stream(s):` (`torch.cuda.stream`, `torch.cuda.StreamContext`) | `let _g = `[`cuda::StreamGuard::new`]`(&s)?;` or [`cuda::with_stream`] |
//! | `s.synchronize() / query() / wait_event(e) / wait_stream(o) / record_event(e)` | same names on [`cuda::Stream`] |
//! | `s.cuda_stream` / `torch.cuda.ExternalStream(ptr, device)` | [`cuda::Stream::cuda_stream`] / `unsafe` [`cuda::Stream::from_external`]; the device's `CUcontext`: [`cuda::primary_context`] |
//! | `torch.cuda.jiterator._create_jit_fn(code, **defaults)` / `_create_multi_output_jit_fn(code, n, **defaults)` | [`cuda::jiterator::create_jit_fn`]`(code, &[("alpha", 1.0)])` / [`cuda::jiterator::create_multi_output_jit_fn`] → [`cuda::jiterator::JitFn`]; [`cuda::jiterator::JitFn::call`]`(&[&a, &b], &[("alpha", 2.0)])`, [`cuda::jiterator::JitFn::call_multi`] (broadcasting, promotion, strided inputs; on the simulated machine compiled by the host's C++ compiler) |
//! | `torch.cuda._compile_kernel(src, name, compute_capability, header_code, cuda_include_dirs, nvcc_options)` and its launch | [`cuda::compile_kernel`]`(src, name, `[`cuda::CompileOptions`]`)` → [`cuda::Kernel`]; [`cuda::Kernel::launch`]`(grid, block, shared_mem, &[`[`cuda::KernelArg`]`])` / [`cuda::Kernel::launch_on`] ([`cuda::Dim3`]); PTX and cubins: [`cuda::Kernel::from_ptx`], [`cuda::Kernel::from_cubin`]; on the simulated machine a host twin ([`cuda::Kernel::with_host_twin`], [`cuda::HostLaunch`], [`cuda::KernelScalar`]) |
//! | `torch.cuda.Event(enable_timing, blocking)` | [`cuda::Event::new`]`(`[`cuda::EventFlags`]`)` |
//! | `e.record(s) / query() / synchronize() / wait(s) / elapsed_time(end)` | same names on [`cuda::Event`] |
//! | `PYTORCH_CUDA_ALLOC_CONF`, environment read at first use | [`init`]`(`[`Config`]`)` before first use, else `CUDASEM_*` variables (`CUDASEM_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF` itself); `CUDA_VISIBLE_DEVICES` selects devices on the simulated machine too |
//! | `print(t)` / `repr(t)` | `println!("{t}")` ([`Tensor`]'s `Display`: PyTorch's repr, summarized past 1000 elements) |
//! | `torch.device("cuda:1")` | [`Device`] (`"cpu"`, `"cuda"`, `"cuda:N"`) |
//! | `torch.cuda.OutOfMemoryError`, other errors | [`Error`] (one enum, structured variants) |
//! | `torch.float32`, `torch.int64`, …, `torch.promote_types`, `torch.result_type` | [`DType`], [`DType::promote_types`], [`result_type`] |
//! | `torch.empty/zeros/ones/full/arange/rand/randn(…, dtype, device)` | [`Tensor::empty`], [`Tensor::zeros`], [`Tensor::ones`], [`Tensor::full`], [`Tensor::arange`], [`Tensor::rand`], [`Tensor::randn`] |
//! | `torch.manual_seed(s)` | [`manual_seed`] (every device's and the host's generator: the same numbers on the simulated machine and every GPU), [`initial_seed`] |
//! | **Random numbers** (Philox4x32-10 per device, drawn on the device) | |
//! | `torch.cuda.manual_seed(s)` / `manual_seed_all(s)` / `seed()` / `seed_all()` / `initial_seed()` | [`cuda::manual_seed`] / [`cuda::manual_seed_all`] / [`cuda::seed`] / [`cuda::seed_all`] / [`cuda::initial_seed`] |
//! | `torch.cuda.get_rng_state(d)` / `set_rng_state(s, d)` / `get_rng_state_all()` / `set_rng_state_all(ss)` | [`cuda::get_rng_state`] / [`cuda::set_rng_state`] / [`cuda::get_rng_state_all`] / [`cuda::set_rng_state_all`] (opaque bytes, [`cuda::RNG_STATE_BYTES`]) |
//! | `torch.cuda.default_generators[d]`, `torch.Generator(device="cuda")`, `g.manual_seed/seed/initial_seed/get_state/set_state/clone_state` | [`cuda::default_generator`], [`cuda::Generator::new`] (same method names) |
//! | `philox_cuda_state(increment)` (ATen, for one's own kernels; graph-safe) | [`cuda::Generator::philox_state`] → [`cuda::PhiloxState`]; the stream: [`cuda::philox4x32_10`], [`cuda::philox_block`], [`cuda::u53`], the `f32` normals [`cuda::box_muller_f32`]; sim-vs-GPU bound [`cuda::TRANSCENDENTAL_ULP_F64`] |
//! | `torch.rand/randn/randint/randperm(…)`, `rand_like/randn_like`, `generator=g` | [`Tensor::rand`], [`Tensor::randn`], [`Tensor::randint`], [`Tensor::randperm`], [`Tensor::rand_like`], [`Tensor::randn_like`]; `_gen` forms take a [`cuda::Generator`] ([`Tensor::rand_gen`], …) |
//! | `t.uniform_/normal_/bernoulli_/exponential_/random_`, `torch.multinomial`, `F.dropout(x, p, training)` | [`Tensor::uniform_`], [`Tensor::normal_`], [`Tensor::bernoulli_`], [`Tensor::exponential_`], [`Tensor::random_`] / [`Tensor::random_range_`], [`Tensor::multinomial`], [`Tensor::dropout`] (and `_gen` forms) |
//! | `torch.tensor(data)` / `t.tolist()` / `t.item()` | [`Tensor::from_slice`] / [`Tensor::to_vec`] / [`Tensor::item`] |
//! | `t.shape / t.stride() / t.dtype / t.device / t.data_ptr()` | [`Tensor::shape`], [`Tensor::stride`], [`Tensor::dtype`], [`Tensor::device`], [`Tensor::data_ptr`] |
//! | `t.to(device, non_blocking)` / `t.cuda()` / `t.cpu()` / `t.copy_(src, non_blocking)` | [`Tensor::to`] / [`Tensor::cuda`] / [`Tensor::cpu`] / [`Tensor::copy_`] (non-blocking between pinned memory and a device) |
//! | `t.pin_memory()` / `t.is_pinned()` / `torch.empty(…, pin_memory=True)` | [`Tensor::pin_memory`] / [`Tensor::is_pinned`] / [`Tensor::empty_pinned`] |
//! | `t.record_stream(s)` | [`Tensor::record_stream`] |
//! | libtorch `torch::from_blob(ptr, sizes, strides, deleter, options)` | `unsafe` [`Tensor::from_blob`]`(ptr, shape, strides, dtype, device, owner)`: device memory made elsewhere, without a copy; the owner (the deleter) drops with the last view |
//! | `t.__dlpack__(stream=s)` / `torch.from_dlpack(x)` | [`Tensor::to_dlpack`]`(&`[`DlpackStream`]`)` / [`Tensor::from_dlpack`] (versioned managed tensors of [`dlpark`]; the consumer's stream waits for the tensor's current stream; `stream`'s integers: [`DlpackStream::from_raw`]) |
//! | `torch.cuda.host_memory_stats()`, `torch._C._host_emptyCache()`, `reset_peak_host_memory_stats()`, `reset_accumulated_host_memory_stats()` | [`cuda::host_memory_stats`] ([`cuda::HostMemoryStats`]), [`cuda::host_empty_cache`], [`cuda::reset_peak_host_memory_stats`], [`cuda::reset_accumulated_host_memory_stats`] |
//! | views: `view`, `reshape`, `transpose`, `permute`, `narrow`, `expand`, `squeeze`, … | same names on [`Tensor`] |
//! | `t.amax(dim)` / `t.max(dim)` (values and indices) / `t.max()` | [`Tensor::amax`] / [`Tensor::max`] / [`Tensor::max_all`] (and the `min` forms) |
//! | `t[:, 2:5]` | [`Tensor::slice`]`(1, 2..5)` (Rust ranges), [`Tensor::slice_step`] |
//! | `F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)` | [`nn::functional::scaled_dot_product_attention`] (flash attention on a GPU; `dropout_p > 0` not yet) |
//! | `F.layer_norm(x, shape, w, b, eps)` / `F.rms_norm(x, shape, w, eps)` | [`nn::functional::layer_norm`] / [`nn::functional::rms_norm`] |
//! | `F.gelu(x, approximate=…)` / `F.linear(x, w, b)` | [`nn::functional::gelu`] / [`nn::functional::linear`] |
//! | **Memory** | |
//! | `torch.cuda.memory_allocated(d)` / `max_memory_allocated(d)` | [`cuda::memory_allocated`] / [`cuda::max_memory_allocated`] |
//! | `torch.cuda.memory_reserved(d)` / `max_memory_reserved(d)` | [`cuda::memory_reserved`] / [`cuda::max_memory_reserved`] |
//! | `torch.cuda.memory_stats(d)` | [`cuda::memory_stats`] ([`cuda::MemoryStats`], [`cuda::Stat`], [`cuda::StatPool`]) |
//! | `torch.cuda.memory_summary(d)` | [`cuda::memory_summary`] |
//! | `torch.cuda.memory_snapshot()` / `torch.cuda.memory._snapshot()` | [`cuda::memory_snapshot`] ([`cuda::Snapshot`], [`cuda::SegmentInfo`], [`cuda::BlockInfo`]) |
//! | `torch.cuda.memory._record_memory_history(…)` | [`cuda::record_memory_history`] ([`cuda::TraceEntry`], [`cuda::TraceAction`]) |
//! | `torch.cuda.memory._record_memory_history(enabled, context, stacks="all", max_entries)` | [`cuda::record_memory_history_with`] ([`cuda::MemoryHistory`], [`cuda::Stacks`], [`cuda::HistoryContext`]); frames `{filename, line, name}` on events and blocks ([`cuda::Frames`], [`cuda::Frame`]) |
//! | `torch._C._cuda_attach_out_of_memory_observer(f)` | [`cuda::memory::attach_out_of_memory_observer`] ([`cuda::memory::OutOfMemoryInfo`]) |
//! | `torch.cuda.memory._set_allocator_settings(s)` | [`cuda::memory::set_allocator_settings`] ([`cuda::AllocatorSettings::apply`]) |
//! | `torch.cuda.reset_accumulated_memory_stats(d)` | [`cuda::reset_accumulated_memory_stats`] |
//! | `torch.cuda.reset_peak_memory_stats(d)` | [`cuda::reset_peak_memory_stats`] |
//! | `torch.cuda.empty_cache()` | [`cuda::empty_cache`] |
//! | `torch.cuda.set_per_process_memory_fraction(f, d)` / `get_per_process_memory_fraction(d)` | [`cuda::set_per_process_memory_fraction`] / [`cuda::get_per_process_memory_fraction`] |
//! | `torch.cuda.mem_get_info(d)` | [`cuda::mem_get_info`] |
//! | `torch.cuda.caching_allocator_alloc(size, d, s)` / `caching_allocator_delete(ptr)` | [`cuda::caching_allocator_alloc`] / [`cuda::caching_allocator_delete`] (and [`cuda::caching_allocator_record_stream`]) |
//! | `torch.cuda.memory.get_allocator_backend()`, `PYTORCH_CUDA_ALLOC_CONF`'s keys | [`cuda::allocator_settings`] ([`cuda::AllocatorSettings`]) |
//! | `torch.cuda.OutOfMemoryError` | [`Error::OutOfMemory`] |
//! | `torch.cuda.MemPool()` / `pool.id` / `pool.use_count()` / `pool.snapshot()` | [`cuda::MemPool::new`], [`cuda::MemPool::id`], [`cuda::MemPool::use_count`], [`cuda::MemPool::snapshot`] |
//! | `with torch.cuda.use_mem_pool(pool):` | [`cuda::use_mem_pool`]`(&pool, \|\| …)` |
//! | `torch.cuda.graph_pool_handle()` | [`cuda::graph_pool_handle`] ([`cuda::MemPoolId`]) |
//! | `torch.cuda.memory` trace tools | [`cuda::memory::replay_trace`] (a PyTorch allocator trace through cudasem's allocator), [`cuda::memory::format_bytes`] |
//! | environment read at first use | the same, or [`init`]`(`[`Config`]`)` in code before first use |
//! | `torch.cuda.CUDAGraph()`, `g.capture_begin(pool, capture_error_mode)`, `g.capture_end()`, `g.replay()`, `g.reset()`, `g.pool()`, `g.debug_dump(path)` | [`cuda::CUDAGraph`] (same method names; [`cuda::CaptureErrorMode`]) |
//! | `with torch.cuda.graph(g, pool=…, stream=…, capture_error_mode=…):` | [`cuda::graph`]`(&mut g, `[`cuda::GraphOptions`]`, \|\| …)` |
//! | `torch.cuda.is_current_stream_capturing()` | [`cuda::is_current_stream_capturing`] |
//! | **Stream safety and diagnostics** | |
//! | `TORCH_CUDA_SANITIZER=1` / `torch.cuda._sanitizer.enable_cuda_sanitizer()` | `CUDASEM_SANITIZER=1` / [`cuda::sanitizer`]`::enable()`, `disable()`, `is_enabled()`, `set_stack_traces(on)`; a race is [`Error::UnsynchronizedAccess`] ([`cuda::sanitizer::AccessRace`]) |
//! | `torch.cuda.set_sync_debug_mode("default"/"warn"/"error")` / `get_sync_debug_mode()` | [`cuda::set_sync_debug_mode`]`(`[`cuda::SyncDebugMode`]`::…)` / [`cuda::get_sync_debug_mode`]; `Error` mode: [`Error::SynchronizingOperation`] |
//! | `torch.cuda.utilization(d)` / `memory_usage(d)` / `temperature(d)` / `power_draw(d)` / `clock_rate(d)` / `device_memory_used(d)` | [`cuda::utilization`], [`cuda::memory_usage`], [`cuda::temperature`], [`cuda::power_draw`] (mW), [`cuda::clock_rate`] (MHz), [`cuda::device_memory_used`]: NVML on GPUs, the simulation's own readings on the sim; [`Error::NotSupported`] where a reading cannot be had |
//! | `torch.cuda.list_gpu_processes(d)` | [`cuda::list_gpu_processes`] ([`cuda::GpuProcesses`]; `Display` is PyTorch's text) |
//! | `torch.cuda.nvtx.range_push/range_pop/range_start/range_end/mark/range` | [`cuda::nvtx`]`::range_push`, `range_pop` (depths; `-1` with none open), `range_start`, `range_end`, `mark`, `range` (a guard, [`cuda::nvtx::Range`]); to NVIDIA's NVTX library where it loads, and recorded per thread ([`testing::take_nvtx_records`]) |
//! | `torch.autograd.profiler.emit_nvtx()` | [`cuda::nvtx::emit_nvtx`] (a guard) or `CUDASEM_NVTX=1` / [`Config::nvtx`]: an NVTX range per operation, copy, collective and graph replay (`"aten::add, seq = 3"`) |
//! | `torch.cuda.profiler.start()` / `stop()` / `profile()` | [`cuda::profiler`]`::start`, `stop`, `profile` (a guard; `cuProfilerStart/Stop`) |
//! | `torch.cuda.make_graphed_callables(f, sample_args)` (forward) | [`cuda::make_graphed`] → [`cuda::GraphedCallable`] |
//! | `torch.backends.cuda.matmul.allow_tf32 = True` | [`cuda::backends`]`::matmul::set_allow_tf32(true)` |
//! | ops: `+ - * /`, `add`, `matmul`, `sum`, `softmax`, `where`, … | methods on [`Tensor`] ([`Tensor::where_cond`] for `torch.where`; see [`Tensor`] for the signatures) and `std::ops` operators with `Output = Result<Tensor>` |
//!
//! Tensors follow CUDA semantics: a tensor made on `"cuda"` lands on the current device; an op
//! runs on its tensors' device, on that device's current stream, whatever the current device;
//! tensors on two devices are [`Error::DeviceMismatch`] unless peer access between them was
//! enabled.
//!
//! ```
//! use cudasem::{cuda, DType, Device, Tensor};
//! # fn main() -> cudasem::Result<()> {
//! let x = {
//!     let _g = cuda::DeviceGuard::new(cuda::device_count() - 1)?;
//!     Tensor::ones(&[2, 3], DType::F32, "cuda")? // on the current device: the last one
//! };
//! let y = (&x * 2.0)?; // runs where `x` lives, whatever the current device is now
//! assert_eq!(y.device(), x.device());
//! assert_eq!(y.sum_all()?.cpu()?.item::<f32>()?, 12.0);
//! # Ok(()) }
//! ```
//!
//! ## Choosing the driver
//!
//! Every process-wide setting is one value, [`Config`], resolved once. In code, [`init`] with a
//! `Config` before the first other cudasem call: the driver ([`DriverKind`]), the simulated
//! machine ([`SimConfig`]) and its visible devices, the allocator settings
//! ([`cuda::AllocatorSettings`]) and the CUDA driver's ([`CudaSettings`]: the kernel cache
//! `CUDASEM_KERNEL_CACHE`, the NCCL library `CUDASEM_NCCL_LIB`); code wins over the environment
//! for each of them. Without it, the environment decides, read once at first use:
//! `CUDASEM_DRIVER=cuda|sim|auto` (default `auto`: CUDA when a driver and a GPU are found);
//! the simulated machine is shaped by `CUDASEM_SIM_DEVICES` (default 2), `CUDASEM_SIM_MEMORY`
//! (default `16GiB`) and `CUDASEM_SIM_PEER` (`all`, `none`, or pairs like `0-1,2-3`); the
//! allocator by `CUDASEM_ALLOC_CONF` (`PYTORCH_CUDA_ALLOC_CONF`'s syntax; `PYTORCH_CUDA_ALLOC_CONF`
//! itself is read when `CUDASEM_ALLOC_CONF` is unset). `CUDA_VISIBLE_DEVICES` selects and orders
//! the simulated machine's devices as it does real GPUs ([`SimConfig::visible`]). Every setting
//! is checked when the runtime starts: a bad value fails the first call (and every later one)
//! with [`Error::InvalidConfig`] naming it. [`cuda::driver_name`] says which driver runs:
//! under `"sim"`, times (events, `cudasem bench`) come from the simulated machine's model of a
//! GPU, not from a measurement.
//!
//! ## Features
//!
//! `cli` (default): the `cudasem` command and its dependencies; a library user can turn it off
//! with `default-features = false` (the command itself uses only the public API).
//! `memviz` (default, and with `cli`): [`memviz`], pictures of allocator snapshots (the renderer of
//! `cudasem memviz`, PyTorch's `torch.cuda._memory_viz`; its interactive page shows each
//! allocation's stack frames on hover; no dependencies of its own).
//! `top` (with `cli`): [`top`], the live per-device view of `cudasem top` (ratatui).
//! `unstable-internals`: the allocator, driver and kernel layers as hidden modules for this
//! crate's own tests and benches; not public API.
//!
//! ## Errors
//!
//! Every fallible call returns [`Result`]. [`Error`]'s `Debug` prints its variant and its message
//! with the hint, so `fn main() -> cudasem::Result<()>` shows what to do when it fails; it is a
//! `std::error::Error + Send + Sync + 'static`, so `?` also turns it into your own error type or
//! `Box<dyn std::error::Error>`, and the closure helpers ([`cuda::with_device`],
//! [`cuda::with_stream`], [`cuda::use_mem_pool`], [`cuda::graph`]) take closures returning any
//! error type with `From<cudasem::Error>`.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

// The public API is the crate root, `cuda` and `testing`. The allocator and the driver layer are
// internal: the `Driver` trait's contract ("indices are valid, handles are this driver's") is kept by
// the runtime, not by the type system, so safe code outside the crate must not reach it. The
// `unstable-internals` feature (for this crate's own tests and benches) makes them reachable,
// hidden from the docs and outside any stability promise.
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub mod alloc;
#[cfg(not(feature = "unstable-internals"))]
#[allow(dead_code, unused_imports)]
mod alloc;
mod config;
pub mod cuda;
mod device;
pub mod distributed;
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub mod driver;
#[cfg(not(feature = "unstable-internals"))]
#[allow(dead_code, unused_imports)]
mod driver;
mod dtype;
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub mod error;
#[cfg(not(feature = "unstable-internals"))]
mod error;
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub mod kernel;
#[cfg(not(feature = "unstable-internals"))]
#[allow(dead_code, unused_imports)]
mod kernel;
mod kernels;
#[cfg(all(test, loom))]
mod loom_pinned;
#[cfg(feature = "memviz")]
pub mod memviz;
pub mod nn;
mod race;
mod runtime;
mod scalar;
mod stack;
mod sync;
mod tensor;
pub mod testing;
#[cfg(feature = "top")]
pub mod top;

#[doc(hidden)]
pub use config::{AttentionKernel, AttentionOrder, CardOverrides, MAX_SWIZZLE_HEADS};
pub use config::{Config, CudaSettings, KernelCache, LaunchTuning};
pub use config::{DriverKind, PeerSpec, SimConfig, SimGpu};
pub use device::{Device, IntoCudaDevice, IntoDevice};
#[doc(hidden)]
pub use driver::card::{CardFacts, CardProfile, RICH_BYTES_PER_SM_CYCLE};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use runtime::init;
pub use scalar::Scalar;
#[doc(hidden)]
pub use tensor::MatmulPadding;
/// The README's code, compiled (and run where it needs no GPU) by `cargo test --doc`.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The DLPack crate cudasem's [`Tensor::to_dlpack`] and [`Tensor::from_dlpack`] speak
/// (`dlpark::versioned::Dlpack`, the owning handle of a `DLManagedTensorVersioned`), re-exported
/// so that a user's PyO3 module uses the same version.
pub use dlpark;
pub use tensor::DlpackStream;
pub use tensor::{
    initial_seed, manual_seed, result_type, IntoShape, Number, Operand, Shape, SliceBounds, SliceRange, Tensor,
};
