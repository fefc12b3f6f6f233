//! The command-line tool's commands.

pub mod info;
pub mod tour;
