//! `cudasem memviz SNAPSHOT -o OUT.html [--svg OUT.svg] [--static]`: the timeline and segment
//! pictures of a snapshot (cudasem's JSON or pickle, or PyTorch's `_dump_snapshot` pickle); the
//! page is interactive (hover for who allocated what, with the file's stack frames; zoom and pan)
//! unless `--static` asks for the script-free one.

use cudasem::memviz::{read_snapshot, render, ColorBy, Options, Stacks};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What to read, what to write, and what to draw.
pub struct Args {
    /// The snapshot file.
    pub snapshot: PathBuf,
    /// The HTML page to write.
    pub html: Option<PathBuf>,
    /// The SVG document to write.
    pub svg: Option<PathBuf>,
    /// The device.
    pub device: Option<usize>,
    /// The segment view's event.
    pub at: Option<usize>,
    /// Colour allocations by stream instead of size.
    pub by_stream: bool,
    /// Write the page without its script (no tooltips from the data, no zoom).
    pub static_page: bool,
}

/// Renders and writes the files, prints the summary; exit code 2 on a bad file or option.
pub fn run(args: Args) -> ExitCode {
    match write(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn write_file(path: &Path, text: &str) -> cudasem::Result<()> {
    std::fs::write(path, text).map_err(|e| cudasem::Error::InvalidArgument {
        op: "memviz",
        reason: format!("cannot write {}: {e}", path.display()),
    })
}

fn write(args: &Args) -> cudasem::Result<String> {
    if args.html.is_none() && args.svg.is_none() {
        return Err(cudasem::Error::InvalidArgument {
            op: "memviz",
            reason: "nothing to write: give -o OUT.html and/or --svg OUT.svg".into(),
        });
    }
    let snapshot = read_snapshot(&args.snapshot)?;
    let color_by = if args.by_stream { ColorBy::Stream } else { ColorBy::Size };
    let interactive = args.html.is_some() && !args.static_page;
    let stacks = if interactive { Some(std::sync::Arc::new(Stacks::read(&args.snapshot)?)) } else { None };
    let picture = render(&snapshot, &Options { device: args.device, at: args.at, color_by, stacks })?;
    let mut wrote = Vec::new();
    if let Some(path) = &args.html {
        let page = if interactive { picture.to_interactive_html() } else { picture.to_html() };
        write_file(path, &page)?;
        wrote.push(path.display().to_string());
    }
    if let Some(path) = &args.svg {
        write_file(path, &picture.to_svg())?;
        wrote.push(path.display().to_string());
    }
    Ok(format!("{}\nwrote {}", picture.summary(), wrote.join(", ")))
}
