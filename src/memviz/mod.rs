//! Pictures of the caching allocator's memory, as PyTorch's `memory_viz` draws them, from
//! cudasem's snapshots ([`cuda::memory_snapshot`](crate::cuda::memory_snapshot)) and PyTorch's
//! (`torch.cuda.memory._dump_snapshot`): the renderer of `cudasem memviz`.
//!
//! - The **active memory timeline**: every live allocation a band, stacked in the order they
//!   were made, over the trace's events; the peak marked, the reserved bytes as a line above.
//! - The **segment view** at the peak (or at a chosen event): every segment a bar split into its
//!   blocks — allocated (requested bytes and rounding), pending free, free — per stream and pool.
//! - A [`Summary`]: peaks, fragmentation, driver allocations, OOMs.
//!
//! [`Picture::to_html`] is one self-contained page (inline SVG, no script, nothing fetched);
//! [`Picture::to_interactive_html`] the same page with an inline script that answers "who
//! allocated this": hover a band or a block for its size, stream, pool, events and stack trace
//! ([`Stacks`], read from the snapshot's file), zoom and pan the timeline — still one file,
//! nothing fetched; [`Picture::to_svg`] one SVG document. A trace of millions of events draws in seconds and stays
//! small: many events share a pixel column (drawn at its highest moment), and allocations thinner
//! than a pixel are summed into one band.
//!
//! ```
//! use cudasem::memviz::{self, Options};
//! # fn main() -> cudasem::Result<()> {
//! cudasem::cuda::record_memory_history(true, 10_000)?;
//! let x = cudasem::Tensor::ones([1024, 1024], cudasem::DType::F32, "cuda")?;
//! let picture = memviz::render(&cudasem::cuda::memory_snapshot()?, &Options::default())?;
//! assert!(picture.summary().peak_allocated >= 4 << 20);
//! assert!(picture.to_html().starts_with("<!DOCTYPE html>"));
//! # drop(x); Ok(()) }
//! ```
//!
//! This module sits above the public API (it uses nothing else), like the command-line tool;
//! it is the `memviz` feature (on by default, and with `cli`).

mod bounds;
mod frame;
mod history;
mod html;
mod interactive;
mod load;
mod options;
mod page_data;
mod pickle_tree;
mod picture;
mod segment_view;
mod segments;
mod stacks;
mod summary;
mod svg;
mod timeline;

pub mod chart;

pub use html::html_page;
pub use load::{load_snapshot, read_snapshot};
pub use options::{ColorBy, Options};
pub use picture::{render, Picture};
pub use stacks::{StackFrame, Stacks};
pub use summary::Summary;
