//! `cudasem top`'s live view, in the library so that a program can show the same picture (in a
//! log, or a terminal pane of its own): per device, NVML's utilization and memory traffic, the
//! device memory in use (NVML's `device_memory_used`) beside this process's caching allocator
//! (allocated, reserved, peak), its largest segments, and temperature, power and SM clock where
//! the machine gives them (`n/a` and the reason where it does not).
//!
//! [`Sample::take`] reads every device once through the public API ([`crate::cuda`]);
//! [`draw`] draws a sample into a [`ratatui`] frame and [`render_text`] into plain text of a
//! given width (the `--once` output of `cudasem top`, and what its tests read). [`Demo`] is the
//! demo workload `cudasem top` runs on the simulated machine so that the numbers move.
//! Like [`crate::memviz`], this module sits above the public API and uses nothing else.
//!
//! ```
//! # fn main() -> cudasem::Result<()> {
//! let x = cudasem::Tensor::randn([1024, 256], cudasem::DType::F32, "cuda:0")?;
//! let sample = cudasem::top::Sample::take()?;
//! assert_eq!(sample.devices[0].allocated, cudasem::cuda::memory_allocated(0)?);
//! let text = cudasem::top::render_text(&sample, 120);
//! assert!(text.contains("cuda:0"));
//! # drop(x); Ok(()) }
//! ```

mod demo;
mod render;
mod sample;

pub use demo::Demo;
pub use render::{draw, render_text};
pub use sample::{DeviceSample, Reading, Sample, SegmentLine};
