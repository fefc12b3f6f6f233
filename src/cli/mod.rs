//! The command-line tool's commands.

pub mod bench;
pub mod info;
pub mod memviz;
pub mod replay;
pub mod replay_plot;
pub mod run;
pub mod top;
pub mod tour;
mod trace_file;
