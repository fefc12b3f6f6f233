//! The command-line tool's commands.

pub mod bench;
pub mod info;
pub mod replay;
pub mod tour;
pub mod tour_memory;
pub mod tour_tensors;
