//! The simulated multi-GPU machine.
//!
//! A faithful model of what the runtime relies on: every stream is a worker thread that runs its
//! queue in order, so queued work is really asynchronous; each stream keeps its own simulated time
//! (`time.rs`: copies take their bytes at modelled bandwidths, kernels their memory traffic), and
//! events complete when their stream reaches them, stamped with that simulated time, so timings
//! do not depend on how busy the host is; memory has a capacity (out-of-memory is real) and host
//! bytes only for what was written; a peer matrix decides which pairs may access each other.
//! Test hooks delay a stream or fail the next allocation, to prove ordering and error paths.
//!
//! Files: the driver and its lookups (`sim_driver.rs`), the [`Driver`](crate::driver::Driver)
//! methods (`driver_impl.rs`), device memory (`memory.rs`), streams, events and captured work
//! (`stream.rs`), captures and graphs (`capture.rs`), kernels (`launch.rs`), pinned host memory
//! (`host.rs`), the time model (`time.rs`), busy time and NVML-like readings (`busy.rs`,
//! `telemetry.rs`) and the machine's description
//! (`crate::config::sim`, below the driver: it is a part of the process's configuration).

mod busy;
mod capture;
mod driver_impl;
mod host;
mod jit;
mod launch;
mod memory;
pub(crate) mod schedule;
mod sim_driver;
mod stream;
mod telemetry;
#[cfg(test)]
mod tests;
mod time;

pub use crate::config::{parse_bytes, PeerSpec, SimConfig, SimGpu};
pub use sim_driver::SimDriver;
