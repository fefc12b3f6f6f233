//! `cudasem top`: the live per-device view ([`cudasem::top`]) in the terminal, refreshing until
//! `q`, Esc or Ctrl-C; or, with `--once` / `--frames N`, frames printed as plain text (for logs,
//! CI and tests). On the simulated machine a demo workload ([`cudasem::top::Demo`]) runs on
//! background threads unless `--no-demo`, so that the numbers move.
//!
//! Where stdout is not a terminal, the live view would have nothing to draw on and nobody to
//! press `q`: without `--once` or `--frames` the command refuses at once (exit code 2) and says
//! which to pass, so a CI job never hangs on it.

use cudasem::top::{render_text, Demo, Sample};
use cudasem::{cuda, Error};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What `cudasem top` was asked for.
#[derive(Debug, Clone)]
pub struct TopArgs {
    /// Print one frame as text and exit.
    pub once: bool,
    /// Print this many frames as text, `interval` apart, and exit.
    pub frames: Option<u32>,
    /// Time between refreshes.
    pub interval: Duration,
    /// Columns of a text frame (default: the terminal's, else 120).
    pub width: Option<u16>,
    /// Run the demo workload: `Some(true)` / `Some(false)` as asked, `None` on the sim only.
    pub demo: Option<bool>,
}

/// Runs the command; exit code 2 for a usage or runtime error.
pub fn run(args: TopArgs) -> ExitCode {
    match top(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn top(args: &TopArgs) -> cudasem::Result<()> {
    if args.interval.is_zero() {
        return Err(usage("--interval must be at least 1 millisecond"));
    }
    if args.frames == Some(0) {
        return Err(usage("--frames must be at least 1"));
    }
    let text_frames = if args.once { Some(1) } else { args.frames };
    if text_frames.is_none() && !std::io::stdout().is_terminal() {
        return Err(usage(
            "stdout is not a terminal, so the live view has nothing to draw on; pass --once for one frame as text, or --frames N for N frames --interval apart",
        ));
    }
    // Starts the runtime (or says why it cannot) before anything is drawn.
    cuda::current_device()?;
    let demo = match args.demo.unwrap_or(cuda::driver_name() == "sim") {
        true => Some(Demo::start()?),
        false => None,
    };
    let result = match text_frames {
        Some(n) => print_frames(n, args, demo.is_some()),
        None => live(args.interval),
    };
    if let Some(e) = demo.as_ref().and_then(Demo::error) {
        eprintln!("note: the demo workload stopped: {e}");
    }
    result
}

fn usage(reason: &str) -> Error {
    Error::InvalidArgument { op: "cudasem top", reason: reason.into() }
}

/// `n` text frames, `interval` apart (with a demo running, the first after one interval too, so
/// that it shows the workload).
fn print_frames(n: u32, args: &TopArgs, demo: bool) -> cudasem::Result<()> {
    let width = args
        .width
        .or_else(|| {
            std::io::stdout().is_terminal().then(|| ratatui::crossterm::terminal::size().ok()).flatten().map(|s| s.0)
        })
        .unwrap_or(120);
    for i in 0..n {
        if i > 0 || demo {
            std::thread::sleep(args.interval);
        }
        if i > 0 {
            println!();
        }
        print!("{}", render_text(&Sample::take()?, width));
    }
    Ok(())
}

/// The live view until `q`, Esc or Ctrl-C.
fn live(interval: Duration) -> cudasem::Result<()> {
    let io = |e: std::io::Error| Error::InvalidArgument { op: "cudasem top", reason: format!("the terminal: {e}") };
    let mut terminal = ratatui::try_init().map_err(io)?;
    let result = (|| -> cudasem::Result<()> {
        loop {
            let sample = Sample::take()?;
            terminal.draw(|f| cudasem::top::draw(f, &sample)).map_err(io)?;
            let next = Instant::now() + interval;
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                if !event::poll(left).map_err(io)? {
                    break;
                }
                if let Event::Key(k) = event::read().map_err(io)? {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if k.kind == KeyEventKind::Press && (ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc))
                    {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}
