//! `torch.cuda.memory_summary()`: the statistics as PyTorch's 75-column table.

use super::stats::{MemoryStats, Metric, Stat, StatPool};
use std::fmt::Write;

/// PyTorch's `_format_size`: the unit is chosen by `pref` (the row's "all" value).
fn format_size(mut v: i64, pref: i64) -> String {
    const UNITS: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let (mut unit, mut pref) = (UNITS[0], pref as f64);
    for u in &UNITS[1..] {
        if pref < 768.0 * 1024.0 {
            break;
        }
        unit = u;
        v /= 1024;
        pref /= 1024.0;
    }
    format!("{v:6} {unit}")
}

/// PyTorch's `_format_count`.
fn format_count(mut v: i64, pref: i64) -> String {
    const UNITS: [&str; 3] = [" ", "K", "M"];
    let (mut unit, mut pref) = (UNITS[0], pref as f64);
    for u in &UNITS[1..] {
        if pref < 750.0 * 1000.0 {
            break;
        }
        unit = u;
        v /= 1000;
        pref /= 1000.0;
    }
    format!("{v:7} {unit} ")
}

/// The table for `device`.
pub(crate) fn memory_summary(device: usize, stats: &MemoryStats) -> String {
    let rule = |c: char| c.to_string().repeat(75);
    let mut lines = vec![
        rule('='),
        format!(" {:16} cudasem CUDA memory summary, device ID {device:<17} ", ""),
        rule('-'),
        format!(
            "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
            "",
            stats.num_ooms(),
            "",
            stats.num_alloc_retries()
        ),
        rule('='),
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".to_string(),
    ];
    type Formatter = fn(i64, i64) -> String;
    let metrics: [(Metric, &str, Formatter); 9] = [
        (Metric::AllocatedBytes, "Allocated memory", format_size),
        (Metric::ActiveBytes, "Active memory", format_size),
        (Metric::RequestedBytes, "Requested memory", format_size),
        (Metric::ReservedBytes, "GPU reserved memory", format_size),
        (Metric::InactiveSplitBytes, "Non-releasable memory", format_size),
        (Metric::Allocation, "Allocations", format_count),
        (Metric::Active, "Active allocs", format_count),
        (Metric::Segment, "GPU reserved segments", format_count),
        (Metric::InactiveSplit, "Non-releasable allocs", format_count),
    ];
    let row = |name: &str, s: Stat, all: Stat, f: Formatter| {
        format!(
            " {name:<21} | {} | {} | {} | {} ",
            f(s.current, all.current),
            f(s.peak, all.peak),
            f(s.allocated, all.allocated),
            f(s.freed, all.freed)
        )
    };
    for (metric, name, f) in metrics {
        lines.push(rule('-'));
        let all = stats.metric(metric, StatPool::All);
        lines.push(row(name, all, all, f));
        lines.push(row("      from large pool", stats.metric(metric, StatPool::LargePool), all, f));
        lines.push(row("      from small pool", stats.metric(metric, StatPool::SmallPool), all, f));
    }
    for (name, s) in
        [("Oversize allocations", stats.s.oversize_allocations), ("Oversize GPU segments", stats.s.oversize_segments)]
    {
        lines.push(rule('-'));
        lines.push(row(name, s, s, format_count));
    }
    lines.push(rule('='));
    let mut out = String::new();
    for l in lines {
        let _ = writeln!(out, "|{l}|");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::block::PoolKind;
    use crate::alloc::stats::DeviceStats;

    #[test]
    fn table_shape() {
        let mut s = DeviceStats::default();
        s.increase(Metric::AllocatedBytes, PoolKind::Large, 3 << 30);
        s.increase(Metric::Allocation, PoolKind::Small, 2_000_000);
        let t = memory_summary(3, &MemoryStats { s });
        assert!(t.lines().all(|l| l.chars().count() == 77), "{t}");
        assert!(t.contains("device ID 3"), "{t}");
        // Like PyTorch, a unit is used once the row's value reaches 768 of it.
        assert!(t.contains("| Allocated memory      |   3072 MiB |   3072 MiB |   3072 MiB |      0 B   |"), "{t}");
        assert!(t.contains("|       from small pool |      0 MiB |"), "{t}");
        assert!(t.contains("| Allocations           |    2000 K  |"), "{t}");
    }
}
