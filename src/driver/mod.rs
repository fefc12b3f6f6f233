//! The driver layer: one object-safe trait, [`Driver`], with two implementations; both run device
//! work described by op and dtype ([`crate::kernel::KernelOp`]), which [`Driver::launch`] queues on a
//! stream.
//!
//! * [`sim`]: a simulated multi-GPU machine (CPU threads as streams, capacity-limited memory,
//!   a peer matrix, fault injection). Always compiled; the default where no GPU exists.
//! * [`cuda`]: real NVIDIA GPUs through `cudarc` (driver API, NVRTC), loaded dynamically so the
//!   crate builds and runs on machines without CUDA.
//!
//! Like `wgpu-hal`, the driver does **no validation** that the caller can do: device indices,
//! stream/event ownership and argument ranges are checked by the runtime above it. The driver
//! reports only what callers cannot foresee (out of memory, device failures, unsupported
//! operations). Handles are opaque numbers, unique within one driver instance.

//! Files: the trait and its handles (`api.rs`), device properties (`properties.rs`), the launch
//! choices computed from them (`card.rs`), NVML-like
//! readings (`telemetry.rs`), building the driver a
//! [`Config`](crate::Config) asks for (`select.rs`), collectives (`comm.rs`), NVIDIA's NVTX library
//! loaded at run time (`nvtx_lib.rs`), and the two backends.

mod api;
pub mod card;
pub mod comm;
pub mod cuda;
pub(crate) mod dlpack;
pub(crate) mod exit;
pub(crate) mod nvtx_lib;
mod properties;
mod select;
pub mod sim;
pub mod telemetry;

pub use crate::config::DriverKind;
pub use crate::kernel::{DevicePtr, HostPtr};
pub use api::{CaptureMode, DeviceAllocation, DeviceProperties, Driver, EventId, GraphId, StreamId};
pub use api::{LaunchShape, ScalarBytes, UserArg, UserFunctionId, UserImage};
pub use properties::DeviceUuid;
pub use select::build;
pub use telemetry::{GpuProcess, GpuProcesses, Telemetry};
