//! The `cudasem` command: `info` (the machine) and `tour` (a self-checking walk through the CUDA
//! semantics on whatever machine it runs on).

mod cli;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cudasem",
    version,
    about = "PyTorch's CUDA semantics for Rust, on real GPUs or a simulated multi-GPU machine"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The driver, each device (name, memory, SMs, compute capability) and the peer matrix.
    Info,
    /// A guided, self-checking walk through the CUDA semantics; exits non-zero if a section fails.
    Tour,
    /// Replays a PyTorch allocator trace (CSV: action,addr,size,stream) through cudasem's caching
    /// allocator on a simulated device; `CUDASEM_ALLOC_CONF` applies. Exit code 2 on a bad file.
    Replay {
        /// The trace file.
        trace: std::path::PathBuf,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Info => cli::info::run(),
        Command::Tour => cli::tour::run(),
        Command::Replay { trace, json } => cli::replay::run(&trace, json),
    }
}
