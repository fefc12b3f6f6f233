//! `torch.cuda` for Rust: devices, guards, streams, events, peer access, device memory and pinned
//! host memory, and native handles for interop.
//!
//! Every name here is PyTorch's (see the crate documentation for the full map). For one's own
//! kernels or a CUDA library on cudasem's streams: [`Stream::cuda_stream`] (the `CUstream`),
//! [`primary_context`] (the `CUcontext`) and [`Tensor::data_ptr`](crate::Tensor::data_ptr);
//! for a stream made elsewhere, `unsafe` [`Stream::from_external`] (`torch.cuda.ExternalStream`).

pub use crate::alloc::MemPoolId;
pub use crate::alloc::{
    AllocatorSettings, BlockInfo, BlockState, DurationStat, HostMemoryStats, MemoryStats, PoolKind, SegmentInfo,
    Snapshot, Stat, StatPool, TraceAction, TraceEntry,
};
pub use crate::alloc::{Frame, Frames, HistoryContext, HistoryEnabled, MemoryHistory, Stacks};
pub use crate::driver::{DeviceProperties, DeviceUuid, GpuProcess, GpuProcesses, StreamId};
pub use crate::kernel::box_muller::box_muller_f32;
pub use crate::kernel::random::{philox4x32_10, philox_block, u53, TRANSCENDENTAL_ULP_F64};
pub use crate::runtime::sanitizer;
pub use crate::runtime::{
    allocator_settings, caching_allocator_alloc, caching_allocator_delete, caching_allocator_record_stream,
    can_device_access_peer, current_device, current_stream, default_stream, device_count, driver_name, empty_cache,
    enable_peer_access, get_device_name, get_device_properties, get_last_error, get_per_process_memory_fraction,
    host_empty_cache, host_memory_stats, is_available, is_peer_access_enabled, max_memory_allocated,
    max_memory_reserved, mem_get_info, memory_allocated, memory_reserved, memory_snapshot, memory_stats,
    memory_summary, peek_at_last_error, primary_context, record_memory_history, reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats, reset_peak_memory_stats, set_device, set_per_process_memory_fraction, set_stream,
    synchronize, with_device, with_stream, DeviceGuard, Event, EventFlags, Stream, StreamGuard,
};
pub use crate::runtime::{
    clock_rate, device_memory_used, list_gpu_processes, memory_usage, power_draw, temperature, utilization,
};
pub use crate::runtime::{get_sync_debug_mode, set_sync_debug_mode, SyncDebugMode};
pub use crate::runtime::{graph, is_current_stream_capturing, CUDAGraph, CaptureErrorMode, GraphOptions};
pub use crate::runtime::{graph_pool_handle, use_mem_pool, MemPool};
pub use crate::runtime::{nvtx, profiler};
pub use crate::runtime::{record_memory_history_with, reset_accumulated_memory_stats};
pub use crate::tensor::jiterator;
pub use crate::tensor::rng_cuda::{
    default_generator, get_rng_state, get_rng_state_all, initial_seed, manual_seed, manual_seed_all, seed, seed_all,
    set_rng_state, set_rng_state_all,
};
pub use crate::tensor::{compile_kernel, CompileOptions, Dim3, HostLaunch, Kernel, KernelArg, KernelScalar};
pub use crate::tensor::{make_graphed, GraphedCallable};
pub use crate::tensor::{Generator, PhiloxState, RNG_STATE_BYTES};

/// Allocator traces and their replay, and byte counts as PyTorch prints them (the
/// `torch.cuda.memory` helpers that are not also in `torch.cuda`).
///
/// A trace is a PyTorch caching-allocator trace in CSV (`action,addr,size,stream` rows, recorded
/// with `torch.cuda.memory._record_memory_history()`, or made from a [`Snapshot`]'s history with
/// [`Trace::from_entries`](memory::Trace::from_entries)). [`replay_trace`](memory::replay_trace)
/// runs it through cudasem's caching allocator on a simulated device of a chosen capacity and
/// settings and reports the peaks, driver allocations and host time per operation, as the
/// `cudasem replay TRACE.csv` command does.
pub mod memory {
    pub use crate::alloc::OutOfMemoryInfo;
    pub use crate::alloc::{
        replay_trace, PageMoves, PytorchExpandable, PytorchOutcome, ReplayOptions, ReplayReport, Trace, TraceEvent,
    };
    pub use crate::error::fmt_bytes as format_bytes;
    pub use crate::runtime::{attach_out_of_memory_observer, reset_accumulated_memory_stats, set_allocator_settings};
}

/// `torch.backends.cuda`: `backends::matmul::set_allow_tf32(true)` mirrors
/// `torch.backends.cuda.matmul.allow_tf32 = True`.
pub use crate::driver::cuda::backends;

/// Tuning of the CUDA driver's launch shapes for benchmark runs, not an API: the most waves of
/// blocks an elementwise grid holds (0: no cap), the vectors per thread of a fast elementwise pass
/// (0: each op's own), and the waves of blocks a row split over blocks uses. The defaults are
/// `(256, 0, 1)`. The setting is [`Config::cuda`](crate::Config::cuda)'s `launch_tuning`
/// (`CUDASEM_BENCH_TUNING` in the environment); this call starts the runtime and changes it in
/// the runtime's driver, the one place it is held (the simulated machine ignores it), keeping the
/// configuration's attention kernel, query-tile order, strided lanes and card overrides.
#[doc(hidden)]
pub fn set_launch_tuning(elementwise_waves: u32, vectors_per_thread: u32, reduce_waves: u32) {
    let base = crate::runtime::resolved_config().map(|c| c.cuda.launch_tuning).unwrap_or_default();
    let tuning = crate::config::LaunchTuning { elementwise_waves, vectors_per_thread, reduce_waves, ..base };
    // A runtime that cannot start has no driver to tune; its error comes with the next call.
    let _ = crate::runtime::set_launch_tuning(tuning);
}

/// Sets the card profile's launch choices by hand for the launches that follow (benchmark
/// tuning, not an API; `None` keeps the card's own, [`card_profile`]), with the configuration's
/// other launch shapes. `CUDASEM_BENCH_TUNING`'s `key=value` items in the environment.
#[doc(hidden)]
pub fn set_card_overrides(card: crate::CardOverrides) -> crate::Result<()> {
    let tuning = crate::runtime::resolved_config()?.cuda.launch_tuning;
    crate::runtime::set_launch_tuning(crate::config::LaunchTuning { card, ..tuning })
}

/// The card profile of `device` (`None`: the current one): the launch choices the CUDA driver
/// computes from the device's properties ([`get_device_properties`], `driver::card` documents
/// each choice), with the configuration's overrides (`CUDASEM_BENCH_TUNING`) in their place.
/// For benchmark runs, not an API (the simulated machine computes it from its properties too,
/// and launches nothing by it).
#[doc(hidden)]
pub fn card_profile(device: impl crate::IntoCudaDevice) -> crate::Result<crate::CardProfile> {
    let props = get_device_properties(device)?;
    let overrides = crate::runtime::resolved_config()?.cuda.launch_tuning.card;
    Ok(crate::CardProfile::from_properties(&props).with(&overrides))
}

/// How matrix products treat matrices whose rows are not 16-byte aligned (padded copies for
/// cuBLASLt's fast kernels, `Auto` by default), for benchmark and test runs, not an API; see
/// [`MatmulPadding`](crate::MatmulPadding).
#[doc(hidden)]
pub fn set_matmul_padding(padding: crate::MatmulPadding) {
    crate::tensor::set_matmul_padding(padding)
}

/// The current setting of [`set_matmul_padding`], not an API.
#[doc(hidden)]
pub fn matmul_padding() -> crate::MatmulPadding {
    crate::tensor::matmul_padding()
}

/// Chooses the CUDA driver's scaled dot-product attention kernel for the launches that follow,
/// for benchmark and test runs, not an API: [`AttentionKernel::Fma`](crate::AttentionKernel)
/// always runs the FMA flash kernel, `Mma` the tensor-core kernel wherever it applies (f16 /
/// bf16, head dims 64 or 128, compute capability 8.0 or later), `Auto` (the default) picks per
/// case. The setting is [`Config::cuda`](crate::Config::cuda)'s `launch_tuning.attention`
/// (`CUDASEM_SDPA_KERNEL` in the environment); this call starts the runtime and sets it, with
/// the configuration's other launch shapes, in the runtime's driver (the simulated machine
/// ignores it: it computes attention in `f64`).
#[doc(hidden)]
pub fn set_attention_kernel(attention: crate::config::AttentionKernel) -> crate::Result<()> {
    let tuning = crate::runtime::resolved_config()?.cuda.launch_tuning;
    crate::runtime::set_launch_tuning(crate::config::LaunchTuning { attention, ..tuning })
}

/// [`set_attention_kernel`] with the order in which the tensor-core kernels take their query
/// tiles ([`AttentionOrder`](crate::AttentionOrder): the heaviest first across the grid by
/// default), for benchmark and test runs, not an API (`CUDASEM_SDPA_KERNEL=KERNEL:ORDER` in the
/// environment).
#[doc(hidden)]
pub fn set_attention(
    attention: crate::config::AttentionKernel,
    attention_order: crate::config::AttentionOrder,
) -> crate::Result<()> {
    let tuning = crate::runtime::resolved_config()?.cuda.launch_tuning;
    crate::runtime::set_launch_tuning(crate::config::LaunchTuning { attention, attention_order, ..tuning })
}

/// [`set_attention`] with the swizzled query-tile order
/// ([`AttentionOrder::Swizzle`](crate::AttentionOrder::Swizzle)) in sections of `heads` (batch,
/// head)s (`None`: as many as fill half the device's L2 with their keys and values), for test and
/// benchmark runs, not an API (`CUDASEM_SDPA_KERNEL=KERNEL:swizzle` with
/// `CUDASEM_BENCH_TUNING=swizzle_heads=N` in the environment). `heads` of 0 or past
/// [`MAX_SWIZZLE_HEADS`](crate::MAX_SWIZZLE_HEADS) is an
/// [`Error::InvalidConfig`](crate::Error::InvalidConfig).
#[doc(hidden)]
pub fn set_attention_swizzle(attention: crate::config::AttentionKernel, heads: Option<u32>) -> crate::Result<()> {
    if let Some(n) = heads.filter(|n| !(1..=crate::config::MAX_SWIZZLE_HEADS).contains(n)) {
        return Err(crate::Error::InvalidConfig {
            key: "swizzle_heads".into(),
            value: n.to_string(),
            reason: format!("a swizzle section holds 1 to {} (batch, head)s", crate::config::MAX_SWIZZLE_HEADS),
        });
    }
    let tuning = crate::runtime::resolved_config()?.cuda.launch_tuning;
    let card = crate::CardOverrides { swizzle_heads: heads, ..tuning.card };
    let attention_order = crate::config::AttentionOrder::Swizzle;
    crate::runtime::set_launch_tuning(crate::config::LaunchTuning { attention, attention_order, card, ..tuning })
}
