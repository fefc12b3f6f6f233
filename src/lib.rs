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
//! let (start, end) = (Event::new(EventFlags::timing())?, Event::new(EventFlags::timing())?);
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
//! | `with torch.cuda.device(i):` | `let _g = `[`cuda::DeviceGuard::new`]`(i)?;` or [`cuda::with_device`] |
//! | `torch.cuda.get_device_name(i)` | [`cuda::get_device_name`] |
//! | `torch.cuda.get_device_properties(i)` | [`cuda::get_device_properties`] |
//! | `torch.cuda.synchronize(d)` | [`cuda::synchronize`] |
//! | `torch.cuda.can_device_access_peer(a, b)` | [`cuda::can_device_access_peer`] |
//! | (implicit in torch) | [`cuda::enable_peer_access`], [`cuda::is_peer_access_enabled`] |
//! | `torch.cuda.mem_get_info(d)` | [`cuda::mem_get_info`] |
//! | — | [`cuda::driver_name`] (`"cuda"` or `"sim"`) |
//! | `torch.cuda.Stream(device, priority)` | [`cuda::Stream::new`] (from the pool, round-robin) |
//! | `torch.cuda.current_stream(d)` / `default_stream(d)` | [`cuda::current_stream`] / [`cuda::default_stream`] |
//! | `torch.cuda.set_stream(s)` | [`cuda::set_stream`] |
//! | `with torch.cuda.stream(s):` | `let _g = `[`cuda::StreamGuard::new`]`(&s)?;` or [`cuda::with_stream`] |
//! | `s.synchronize() / query() / wait_event(e) / wait_stream(o) / record_event(e)` | same names on [`cuda::Stream`] |
//! | `torch.cuda.Event(enable_timing, blocking)` | [`cuda::Event::new`]`(`[`cuda::EventFlags`]`)` |
//! | `e.record(s) / query() / synchronize() / wait(s) / elapsed_time(end)` | same names on [`cuda::Event`] |
//! | `torch.device("cuda:1")` | [`Device`] (`"cpu"`, `"cuda"`, `"cuda:N"`) |
//! | `torch.cuda.OutOfMemoryError`, other errors | [`Error`] (one enum, structured variants) |
//!
//! ## Choosing the driver
//!
//! `CUDASEM_DRIVER=cuda|sim|auto` (default `auto`: CUDA when a driver and a GPU are found).
//! The simulated machine is shaped by `CUDASEM_SIM_DEVICES` (default 2), `CUDASEM_SIM_MEMORY`
//! (default `16GiB`) and `CUDASEM_SIM_PEER` (`all`, `none`, or pairs like `0-1,2-3`).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod alloc;
pub mod cuda;
pub mod device;
pub mod driver;
pub mod error;
mod runtime;
pub mod testing;

pub use device::{Device, IntoCudaDevice};
pub use error::{Error, Result};
