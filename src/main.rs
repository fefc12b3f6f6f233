//! The `cudasem` command: `info` (the machine), `top` (a live view per device), `tour` (a self-checking walk through the CUDA
//! semantics on whatever machine it runs on), `replay` (an allocator trace), `memviz` (pictures of
//! a memory snapshot), `bench` (cudasem's figures beside PyTorch's, BENCHMARKS.md) and `run`
//! (torchrun's launcher for `cudasem::distributed` programs).

#![deny(clippy::undocumented_unsafe_blocks)]

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
    /// The driver, each device (PyTorch's device properties and NVML's readings: utilization,
    /// memory, temperature, power, clock) and the peer matrix.
    Info,
    /// A live view per device: utilization, memory traffic, device memory used, this process's
    /// allocated / reserved / peak and largest segments, temperature, power and SM clock (n/a and
    /// why where the machine cannot say). Refreshes until q, Esc or Ctrl-C. Where stdout is not a
    /// terminal, pass --once or --frames N (frames as text); without either it exits with code 2.
    Top {
        /// Print one frame as text and exit.
        #[arg(long, conflicts_with = "frames")]
        once: bool,
        /// Print N frames as text, --interval apart, and exit.
        #[arg(long, value_name = "N")]
        frames: Option<u32>,
        /// Milliseconds between refreshes.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        interval: u64,
        /// Columns of a text frame (default: the terminal's width, else 120).
        #[arg(long, value_name = "COLUMNS")]
        width: Option<u16>,
        /// Run the demo workload on background threads (the default on the simulated machine).
        #[arg(long, conflicts_with = "no_demo")]
        demo: bool,
        /// Do not run the demo workload.
        #[arg(long)]
        no_demo: bool,
    },
    /// A guided, self-checking walk through the CUDA semantics; exits non-zero if a section fails.
    Tour,
    /// Replays a PyTorch allocator trace (CSV: action,addr,size,stream; `.csv.gz` too) through
    /// cudasem's caching allocator on a simulated device: peaks, live floor, driver calls, moved
    /// pages, ns per op; `CUDASEM_ALLOC_CONF` applies. Exit code 2 on a bad file.
    Replay {
        /// The trace file: CSV (`.csv`, `.csv.gz`), or a snapshot pickle of
        /// torch.cuda.memory._dump_snapshot (its device_traces are replayed).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        trace: Option<std::path::PathBuf>,
        /// PyTorch's outcome on the trace (`NAME.pytorch.json`, as in bench/traces/), set beside
        /// cudasem's figures.
        #[arg(long, value_name = "PYTORCH.json")]
        compare: Option<std::path::PathBuf>,
        /// Replays every trace of a folder (with its NAME.pytorch.json where there is one) and
        /// prints one table.
        #[arg(long, value_name = "DIR")]
        all: Option<std::path::PathBuf>,
        /// Print JSON (one object, or an array with --all) instead of text.
        #[arg(long)]
        json: bool,
        /// Also write a page with reserved and allocated bytes over the trace's rows: cudasem's,
        /// PyTorch's reserved from the trace's segment rows (and, with --compare, its outcome's
        /// peak), and cudasem's allocator over the trace as memviz draws it.
        #[arg(long, value_name = "OUT.html", conflicts_with = "all")]
        plot: Option<std::path::PathBuf>,
    },
    /// Pictures of a memory snapshot (cudasem's JSON or pickle, or PyTorch's
    /// torch.cuda.memory._dump_snapshot pickle) as one self-contained HTML page or SVG: the active
    /// memory timeline, the segments at the peak (or --at an event), and a summary. The page is
    /// interactive (inline script, nothing fetched): hover a band of the timeline or a block of a
    /// segment for its size, stream, pool, allocation and free events and the stack trace the
    /// snapshot recorded (`frames`, first frames first); the wheel or the buttons zoom the
    /// timeline, dragging pans it. Exit code 2 on a bad file or option.
    Memviz {
        /// The snapshot file.
        snapshot: std::path::PathBuf,
        /// The HTML page to write.
        #[arg(short = 'o', long = "output", value_name = "OUT.html")]
        html: Option<std::path::PathBuf>,
        /// The SVG document to write.
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<std::path::PathBuf>,
        /// The device [default: the first with a history or segments].
        #[arg(long)]
        device: Option<usize>,
        /// Show the segments just after this event of the history (0-based) [default: the peak].
        #[arg(long, value_name = "N")]
        at: Option<usize>,
        /// Colour the timeline's allocations by stream instead of by size.
        #[arg(long)]
        by_stream: bool,
        /// Write the page without its script: native tooltips only, no stack traces, no zoom.
        #[arg(long = "static")]
        static_page: bool,
    },
    /// cudasem's figures, then PyTorch's (bench/pytorch_bench.py) measured the same way, as one
    /// table and a JSON file (BENCHMARKS.md). Exit code 1 if a cudasem figure fails, 2 on bad options;
    /// a missing or failing PyTorch leaves its column empty and says why.
    Bench {
        /// Where to write the JSON [default: bench/results/latest.json; with --quick: nowhere].
        #[arg(long, value_name = "PATH")]
        json: Option<std::path::PathBuf>,
        /// Measure cudasem only.
        #[arg(long)]
        no_pytorch: bool,
        /// The Python interpreter that runs the PyTorch script.
        #[arg(long, value_name = "PATH", default_value = "python3")]
        python: std::path::PathBuf,
        /// PyTorch's side of the bench [default: bench/pytorch_bench.py; with --ops:
        /// bench/pytorch_ops.py].
        #[arg(long, value_name = "PATH")]
        script: Option<std::path::PathBuf>,
        /// Only these figures, comma-separated (e.g. small_op,add_f32_256m); with --ops, the cases
        /// whose names contain one of these (e.g. softmax,add_f16).
        #[arg(long, value_name = "NAME,NAME")]
        only: Option<String>,
        /// Tiny sizes and few repeats (seconds on the sim driver, for CI); writes no JSON unless
        /// --json is given.
        #[arg(long)]
        quick: bool,
        /// The op matrix instead: every tensor op × dtype × layout beside PyTorch
        /// (bench/pytorch_ops.py), checked against a CPU reference, written to
        /// bench/results/ops.json.
        #[arg(long)]
        ops: bool,
        /// With --ops: only write the cases as bench/pytorch_ops.py reads them (its --cases file)
        /// to PATH, and measure nothing.
        #[arg(long, value_name = "PATH", requires = "ops")]
        write_spec: Option<std::path::PathBuf>,
    },
    /// Starts a distributed program as torchrun does: --nproc-per-node copies with RANK,
    /// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and torchrun's other variables), one GPU
    /// per local rank, and the store's secret (CUDASEM_STORE_SECRET); forwards SIGINT/SIGTERM/SIGHUP;
    /// when a rank fails, stops the others and exits with its status. Each rank runs in a process
    /// group of its own that is stopped whole, also when the launcher dies: nothing is left behind.
    Run {
        /// Processes on this node (one per GPU), 1 to 1024.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=cli::run::MAX_NPROC_PER_NODE as u64))]
        nproc_per_node: u64,
        /// Nodes in the world, 1 to 65536.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=cli::run::MAX_NNODES as u64))]
        nnodes: u64,
        /// This node's number, 0..nnodes.
        #[arg(long, default_value_t = 0)]
        node_rank: u64,
        /// Rank 0's host (the store's server).
        #[arg(long, default_value = "127.0.0.1")]
        master_addr: String,
        /// Rank 0's store port [default: a free port on one node; 29500 with several nodes].
        #[arg(long)]
        master_port: Option<u16>,
        /// Stop every rank once the job has run this many seconds, and exit with 124.
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
        timeout: Option<u64>,
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM ARGS")]
        command: Vec<String>,
    },
    /// The jiterator bench's child: ms of the first call of a function of CODE in this fresh
    /// process (the disk cache warm from the parent), printed on stdout.
    #[command(name = "jit-first-call", hide = true)]
    JitFirstCall {
        /// The function's code (`template <typename T> T NAME(T x, T y, T alpha)`).
        code: String,
    },
    /// The launcher's helper: stops the ranks' process groups if `cudasem run` dies.
    #[command(name = "run-reaper", hide = true)]
    RunReaper,
    /// The launcher's trampoline for a rank: dies with the launcher, then becomes the program.
    #[command(name = "run-rank", hide = true)]
    RunRank {
        /// The launcher's pid.
        launcher: u32,
        /// The rank's program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Info => cli::info::run(),
        Command::Tour => cli::tour::run(),
        Command::Top { once, frames, interval, width, demo, no_demo } => cli::top::run(cli::top::TopArgs {
            once,
            frames,
            interval: std::time::Duration::from_millis(interval),
            width,
            demo: if demo {
                Some(true)
            } else if no_demo {
                Some(false)
            } else {
                None
            },
        }),
        Command::Replay { trace, compare, all, json, plot } => {
            cli::replay::run(cli::replay::Options { trace, compare, all, json, plot })
        }
        Command::Memviz { snapshot, html, svg, device, at, by_stream, static_page } => {
            cli::memviz::run(cli::memviz::Args { snapshot, html, svg, device, at, by_stream, static_page })
        }
        Command::Run { nproc_per_node, nnodes, node_rank, master_addr, master_port, timeout, command } => {
            cli::run::run(cli::run::Options {
                // In range (clap checked), so these fit.
                nproc_per_node: nproc_per_node as usize,
                nnodes: nnodes as usize,
                node_rank: usize::try_from(node_rank).unwrap_or(usize::MAX),
                master_addr,
                master_port,
                timeout: timeout.map(std::time::Duration::from_secs),
                command,
            })
        }
        Command::JitFirstCall { code } => cli::bench::jit_first_call_child(&code),
        Command::RunReaper => cli::run::reaper(),
        Command::RunRank { launcher, command } => cli::run::rank_trampoline(launcher, &command),
        Command::Bench { json, no_pytorch, python, script, only, quick, ops, write_spec } => {
            let script = script.unwrap_or_else(|| cli::bench::default_script(ops));
            cli::bench::run(cli::bench::Options { json, no_pytorch, python, script, only, quick, ops, write_spec })
        }
    }
}
