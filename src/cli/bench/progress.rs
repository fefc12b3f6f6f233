//! One progress bar on stderr over cudasem's steps and PyTorch's: an `indicatif` bar redrawn in
//! place on a terminal; one line per step otherwise (logs, CI, a GPU machine's captured output),
//! where a bar would draw nothing.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar: `done` of `total` steps and the current label.
pub struct Progress {
    bar: ProgressBar,
    total: usize,
    done: usize,
    label: String,
}

impl Progress {
    /// A bar over `total` steps, drawn in place when stderr is a terminal.
    pub fn new(total: usize) -> Progress {
        let total = total.max(1);
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("[{bar:30}] {pos:>2}/{len} {elapsed:>4} {msg}")
            .map(|s| s.progress_chars("#>-"))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress { bar, total, done: 0, label: String::new() }
    }

    /// Whether the bar is drawn (stderr is a terminal); else each change is a line.
    fn lines(&self) -> bool {
        self.bar.is_hidden()
    }

    /// Starts a step: `side` (`cudasem` or `pytorch`) measures `name`. The steps before it count
    /// as done.
    pub fn step(&mut self, side: &str, name: &str) {
        if !self.label.is_empty() {
            self.set_done(self.done + 1);
        }
        self.label = format!("{side} {name}");
        self.show();
    }

    /// Changes the label without finishing a step (e.g. PyTorch building its extension).
    pub fn label(&mut self, text: &str) {
        self.label = text.to_string();
        self.show();
    }

    /// Counts every step as done up to `done` (a side that ended early skips the rest).
    pub fn advance_to(&mut self, done: usize) {
        self.set_done(self.done.max(done));
    }

    /// How many steps are done.
    pub fn done(&self) -> usize {
        self.done
    }

    /// A message above the bar.
    pub fn note(&mut self, text: &str) {
        self.bar.suspend(|| eprintln!("  {text}"));
    }

    /// All steps done: the full bar (or its line), which stays.
    pub fn finish(&mut self) {
        self.set_done(self.total);
        self.label = "done".into();
        self.show();
        self.bar.finish();
        if !self.lines() {
            eprintln!(); // the table starts on a line of its own
        }
    }

    fn set_done(&mut self, done: usize) {
        self.done = done.min(self.total);
        self.bar.set_position(self.done as u64);
    }

    fn show(&self) {
        self.bar.set_message(self.label.clone());
        if self.lines() {
            let secs = self.bar.elapsed().as_secs();
            eprintln!("bench {:>2}/{} {}:{:02} {}", self.done, self.total, secs / 60, secs % 60, self.label);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_count_up_to_the_total_and_never_past_it() {
        let mut p = Progress::new(4);
        assert_eq!(p.done(), 0);
        p.step("cudasem", "small_op");
        assert_eq!(p.done(), 0, "a started step is not done");
        p.step("cudasem", "add_f32_256m");
        assert_eq!((p.done(), p.bar.position()), (1, 1));
        p.label("pytorch build_extension");
        assert_eq!(p.done(), 1);
        p.advance_to(9);
        assert_eq!((p.done(), p.bar.position()), (4, 4));
        p.finish();
        assert!(p.bar.is_finished());
    }
}
