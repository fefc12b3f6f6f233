//! One progress bar on stderr over cudasem's steps and PyTorch's: redrawn in place on a terminal,
//! one line per step otherwise (logs, CI, a GPU machine's captured output).

use std::io::{IsTerminal, Write};
use std::time::Instant;

const WIDTH: usize = 30;

/// The bar: `done` of `total` steps, the current label, and how it is drawn.
pub struct Progress {
    total: usize,
    done: usize,
    label: String,
    tty: bool,
    started: Instant,
    drawn: bool,
}

impl Progress {
    /// A bar over `total` steps, drawn in place when stderr is a terminal.
    pub fn new(total: usize) -> Progress {
        Progress {
            total: total.max(1),
            done: 0,
            label: String::new(),
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            drawn: false,
        }
    }

    /// Starts a step: `side` (`cudasem` or `pytorch`) measures `name`. The steps before it count
    /// as done.
    pub fn step(&mut self, side: &str, name: &str) {
        if !self.label.is_empty() {
            self.done = (self.done + 1).min(self.total);
        }
        self.label = format!("{side} {name}");
        self.draw();
    }

    /// Changes the label without finishing a step (e.g. PyTorch building its extension).
    pub fn label(&mut self, text: &str) {
        self.label = text.to_string();
        if self.tty {
            self.draw();
        } else {
            eprintln!("bench {text}");
        }
    }

    /// Counts every step as done up to `done` (a side that ended early skips the rest).
    pub fn advance_to(&mut self, done: usize) {
        self.done = self.done.max(done.min(self.total));
    }

    /// How many steps are done.
    pub fn done(&self) -> usize {
        self.done
    }

    /// A message between the bar's redraws (the bar is redrawn under it).
    pub fn note(&mut self, text: &str) {
        if self.tty && self.drawn {
            eprint!("\r\x1b[2K");
        }
        eprintln!("  {text}");
        if self.tty && self.drawn {
            self.draw();
        }
    }

    /// All steps done: the full bar, then a new line.
    pub fn finish(&mut self) {
        self.done = self.total;
        self.label = "done".into();
        self.draw();
        if self.tty {
            eprintln!();
        }
    }

    fn draw(&mut self) {
        let filled = self.done * WIDTH / self.total;
        let secs = self.started.elapsed().as_secs();
        let line = format!(
            "[{}{}] {:>2}/{} {:>3}:{:02} {}",
            "#".repeat(filled),
            "-".repeat(WIDTH - filled),
            self.done,
            self.total,
            secs / 60,
            secs % 60,
            self.label
        );
        if self.tty {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("bench {line}");
        }
        self.drawn = true;
    }
}
