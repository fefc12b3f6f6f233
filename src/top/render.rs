//! Drawing a [`Sample`]: one bordered block per device, a header, and the reasons of the
//! readings shown as `n/a`.

use super::sample::{DeviceSample, Reading, Sample};
use crate::cuda::memory::format_bytes;
use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::{Frame, Terminal};

/// Cells of a utilization bar.
const BAR: usize = 20;

/// `[████░░░░]  40%`.
fn bar(pct: u32) -> String {
    let full = (pct.min(100) as usize * BAR + 50) / 100;
    format!("[{}{}] {pct:>3}%", "█".repeat(full), "░".repeat(BAR - full))
}

/// A reading as text, `n/a` where it is missing.
fn show<T>(r: &Reading<T>, f: impl Fn(&T) -> String) -> String {
    match r {
        Ok(v) => f(v),
        Err(_) => "n/a".into(),
    }
}

/// The lines inside one device's block.
fn device_lines(d: &DeviceSample) -> Vec<Line<'static>> {
    let mut lines = vec![
        Line::from(format!(
            "utilization    {}    memory traffic {}",
            show(&d.utilization, |p| bar(*p)),
            show(&d.memory_usage, |p| format!("{p}%"))
        )),
        Line::from(format!(
            "device memory  used {} of {} (all processes)",
            show(&d.device_memory_used, |b| format_bytes(*b)),
            format_bytes(d.total_memory)
        )),
        Line::from(format!(
            "this process   allocated {}  reserved {}  peak allocated {}",
            format_bytes(d.allocated),
            format_bytes(d.reserved),
            format_bytes(d.max_allocated)
        )),
        Line::from(format!(
            "sensors        temperature {}  power {}  SM clock {}",
            show(&d.temperature, |c| format!("{c} C")),
            show(&d.power_draw, |mw| format!("{:.1} W", *mw as f64 / 1000.0)),
            show(&d.clock_rate, |mhz| format!("{mhz} MHz"))
        )),
    ];
    if d.largest_segments.is_empty() {
        lines.push(Line::from("largest segments  none (nothing reserved by this process)"));
    } else {
        lines.push(Line::from("largest segments"));
        for s in &d.largest_segments {
            lines.push(Line::from(format!(
                "  {:#014x}  {:>12}  {:<5}  {:>12} allocated",
                s.address,
                format_bytes(s.total_size),
                s.pool,
                format_bytes(s.allocated_size)
            )));
        }
    }
    lines
}

/// The reasons behind every `n/a`, one line per distinct reason, naming the readings it covers.
fn reasons(sample: &Sample) -> Vec<String> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for d in &sample.devices {
        let missing = [
            ("utilization", d.utilization.as_ref().err()),
            ("memory_usage", d.memory_usage.as_ref().err()),
            ("device_memory_used", d.device_memory_used.as_ref().err()),
            ("temperature", d.temperature.as_ref().err()),
            ("power_draw", d.power_draw.as_ref().err()),
            ("clock_rate", d.clock_rate.as_ref().err()),
        ];
        for (what, why) in missing {
            let Some(why) = why else { continue };
            let name = format!("{what} (cuda:{})", d.index);
            match out.iter_mut().find(|(w, _)| w == why) {
                Some((_, names)) => names.push(name),
                None => out.push((why.clone(), vec![name])),
            }
        }
    }
    out.into_iter().map(|(why, names)| format!("n/a {}: {why}", names.join(", "))).collect()
}

/// The rows one device's block takes.
fn device_height(d: &DeviceSample) -> u16 {
    2 + device_lines(d).len() as u16
}

/// The rows the footer of reasons takes at `width` columns (each reason wraps).
fn footer_height(sample: &Sample, width: u16) -> u16 {
    let w = width.max(20) as usize;
    reasons(sample).iter().map(|r| (r.chars().count().div_ceil(w) + 1) as u16).sum()
}

/// Draws `sample` into `frame`: a header line, one block per device (as many as fit), and the
/// reasons of the `n/a` readings at the bottom.
pub fn draw(frame: &mut Frame<'_>, sample: &Sample) {
    let area = frame.area();
    let mut rows = vec![Constraint::Length(1)];
    rows.extend(sample.devices.iter().map(|d| Constraint::Length(device_height(d))));
    rows.push(Constraint::Min(0));
    let chunks = Layout::vertical(rows).split(area);
    let header =
        format!("cudasem top: {} driver, {} device(s); q or Ctrl-C quits", sample.driver, sample.devices.len());
    frame.render_widget(Paragraph::new(header), chunks[0]);
    for (i, d) in sample.devices.iter().enumerate() {
        let block = Block::default().borders(Borders::ALL).title(format!(" cuda:{}  {} ", d.index, d.name));
        frame.render_widget(Paragraph::new(device_lines(d)).block(block), chunks[i + 1]);
    }
    let footer: Vec<Line<'static>> = reasons(sample).into_iter().map(Line::from).collect();
    let last: Rect = chunks[chunks.len() - 1];
    frame.render_widget(Paragraph::new(footer).wrap(Wrap { trim: false }), last);
}

/// `sample` drawn at `width` columns as plain text, as tall as it needs to be (trailing blanks
/// trimmed from each line): `cudasem top --once`'s output.
pub fn render_text(sample: &Sample, width: u16) -> String {
    let width = width.max(40);
    let height = 1 + sample.devices.iter().map(device_height).sum::<u16>() + footer_height(sample, width);
    let mut terminal = match Terminal::new(TestBackend::new(width, height)) {
        Ok(t) => t,
        Err(never) => match never {},
    };
    // The test backend cannot fail to draw.
    let _ = terminal.draw(|f| draw(f, sample));
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let line: String = (0..width).map(|x| buffer[(x, y)].symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_in_proportion() {
        assert_eq!(bar(0), format!("[{}]   0%", "░".repeat(BAR)));
        assert_eq!(bar(50), format!("[{}{}]  50%", "█".repeat(10), "░".repeat(10)));
        assert_eq!(bar(100), format!("[{}] 100%", "█".repeat(BAR)));
    }
}
