//! The real-GPU backend: NVIDIA's driver API through `cudarc`'s thin `result`/`sys` layers.
//!
//! `libcuda`, `libnvrtc` (for [`Driver::delay`](crate::driver::Driver::delay) and the tensor kernels) and `libcublasLt` (for
//! matrix products) are loaded at run time, so this
//! compiles and runs everywhere; where no driver or GPU is found, [`CudaDriver::new`] returns a
//! driver with no devices whose [`Driver::unavailable_reason`](crate::driver::Driver::unavailable_reason) says why.
//!
//! Design:
//!
//! The backend's files, by trade:
//! * core: [`CudaDriver`] and its lookups (`driver.rs`), the [`Driver`](super::Driver) methods
//!   (`driver_impl.rs`), raw handles (`handles.rs`), statuses and locks (`status.rs`), device
//!   properties and NVML readings (`telemetry.rs`), the
//!   tables' hasher (`fxmap.rs`);
//! * operations: events (`events.rs`), device memory and copies (`memory.rs`), pinned host
//!   memory (`host.rs`), expandable segments (`vmm.rs`, state in `vmm_table.rs`), graphs
//!   (`graph.rs`, state in `graph_table.rs`, capture mode in `capture.rs`), NCCL (`nccl.rs`), the
//!   TF32 switch ([`backends`]);
//! * the kernel wing (`kernels/`): the tensor kernels' vocabulary, CUDA C sources, generator,
//!   the one NVRTC compile + cache path, launchers and their policies, and the delay kernel.

// Declared first (and apart, so that it stays first) so that every file can use `raw_handle!`.
#[macro_use]
mod handles;

pub mod backends;
mod capture;
mod driver;
mod driver_impl;
mod events;
mod fxmap;
mod graph;
mod graph_table;
mod host;
mod kernels;
mod memory;
mod nccl;
mod nccl_exit;
mod status;
mod telemetry;
mod user;
pub(crate) use user::{nvrtc_cubin, RawCudarcKernel};
mod vmm;
mod vmm_table;

#[cfg(test)]
mod tests;

pub use driver::CudaDriver;
pub use nccl::describe as nccl_library;
