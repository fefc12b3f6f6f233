//! What the interactive page shows on hover, as one compact JSON blob: a row per drawn band of the
//! timeline and per block of the segment view with its own tooltip (in the order of their
//! `data-b` / `data-k` attributes), and the stacks they name, each frame and stack written once.
//!
//! ```text
//! {"device", "events", "t0": first time_us,
//!  "frames": ["name  file:line", ...], "stacks": [[frame, ...], ...], "pools": ["large pool", ...],
//!  "bands":  [[size, "stream", "addr", alloc event, free event, alloc µs, free µs, pool, stack], ...],
//!  "blocks": [["addr", size, requested, "state", "stream", pool, alloc event, alloc µs, stack], ...]}
//! ```
//! Events are trace indices (-1: before the trace / still live), times microseconds after `t0`
//! (-1: none), stacks indices into `stacks` (-1: none); streams and addresses are hex text (they
//! are 64-bit, past what a JavaScript number holds exactly).

use super::history::{History, Life};
use super::segment_view::pool_name;
use super::stacks::Stacks;
use crate::cuda::{PoolKind, SegmentInfo, Snapshot};
use serde_json::{json, Value};
use std::collections::HashMap;

/// PyTorch's small-pool requests (`kSmallSize`): where a block's segment is unknown, its pool
/// follows from its size.
const SMALL_SIZE: usize = 1 << 20;

/// The page's tables, filled as rows are added.
struct Tables<'a> {
    stacks: Option<&'a Stacks>,
    frame_ids: HashMap<String, usize>,
    frames: Vec<String>,
    stack_ids: HashMap<u32, usize>,
    stack_rows: Vec<Vec<usize>>,
    pools: Vec<String>,
}

impl Tables<'_> {
    /// The page's index of stack `id` of `stacks` (-1 for none).
    fn stack(&mut self, id: u32) -> i64 {
        let Some(stacks) = self.stacks.filter(|_| id != 0) else { return -1 };
        if let Some(&i) = self.stack_ids.get(&id) {
            return i as i64;
        }
        let mut row = Vec::new();
        for f in stacks.frames_of(id) {
            let text = crate::alloc::trace::quote_prefix(&f.to_string(), 300);
            let next = self.frames.len();
            let i = *self.frame_ids.entry(text.clone()).or_insert(next);
            if i == next {
                self.frames.push(text);
            }
            row.push(i);
        }
        self.stack_rows.push(row);
        self.stack_ids.insert(id, self.stack_rows.len() - 1);
        (self.stack_rows.len() - 1) as i64
    }

    fn pool(&mut self, name: String) -> usize {
        match self.pools.iter().position(|p| *p == name) {
            Some(i) => i,
            None => {
                self.pools.push(name);
                self.pools.len() - 1
            }
        }
    }
}

/// A segment's pool as the page names it.
fn segment_pool(s: &SegmentInfo) -> String {
    let (a, b) = s.segment_pool_id.pair();
    let private = if (a, b) == (0, 0) { String::new() } else { format!(", private pool ({a}, {b})") };
    format!("{}{private}", pool_name(s.segment_type))
}

/// The blob (see the module's docs) for `bands` (indices into `h.lives`) and `blocks` (`(segment,
/// block)` of `segs`, the segments at `moment`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    snapshot: &Snapshot,
    device: usize,
    h: &History,
    bands: &[usize],
    segs: &[SegmentInfo],
    blocks: &[(usize, usize)],
    moment: usize,
    stacks: Option<&Stacks>,
) -> String {
    let mut t = Tables {
        stacks,
        frame_ids: HashMap::new(),
        frames: Vec::new(),
        stack_ids: HashMap::new(),
        stack_rows: Vec::new(),
        pools: Vec::new(),
    };
    let t0 = h.events.first().map_or(0, |e| e.time_us);
    let event = |m: usize| if m == 0 || m >= h.moments() { -1 } else { m as i64 - 1 };
    let time =
        |m: usize| if m == 0 || m >= h.moments() { -1 } else { h.events[m - 1].time_us.saturating_sub(t0) as i64 };
    // A band's pool: that of the snapshot's segment holding its address, or by its size.
    let mut ends: Vec<(u64, u64, &SegmentInfo)> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .map(|s| (s.address, s.address + s.total_size as u64, s))
        .collect();
    ends.sort_unstable_by_key(|e| e.0);
    let pool_of = |addr: u64, size: usize| -> String {
        let i = ends.partition_point(|e| e.0 <= addr);
        match i.checked_sub(1).map(|i| ends[i]).filter(|e| addr < e.1) {
            Some((_, _, s)) => segment_pool(s),
            None if size <= SMALL_SIZE => format!("{} (by its size)", pool_name(PoolKind::Small)),
            None => format!("{} (by its size)", pool_name(PoolKind::Large)),
        }
    };
    let stack_of = |t: &mut Tables, l: &Life| {
        let id = match (l.start, stacks) {
            (_, None) => 0,
            (0, Some(s)) => s.block_id(device, l.addr),
            (m, Some(s)) => s.entry_id(device, m - 1),
        };
        t.stack(id)
    };
    let band_rows: Vec<Value> = bands
        .iter()
        .map(|&i| {
            let l = &h.lives[i];
            let pool = t.pool(pool_of(l.addr, l.size));
            let stack = stack_of(&mut t, l);
            let (stream, addr) = (format!("{:#x}", l.stream), format!("{:#x}", l.addr));
            json!([l.size, stream, addr, event(l.start), event(l.end), time(l.start), time(l.end), pool, stack])
        })
        .collect();
    // The life of each block live at `moment`, by address.
    let live: HashMap<u64, &Life> =
        h.lives.iter().filter(|l| l.start <= moment && moment < l.end).map(|l| (l.addr, l)).collect();
    let block_rows: Vec<Value> = blocks
        .iter()
        .map(|&(si, bi)| {
            let (s, b) = (&segs[si], &segs[si].blocks[bi]);
            let pool = t.pool(segment_pool(s));
            let life = live.get(&b.address).filter(|_| b.state.is_active());
            let (alloc, at, stack) = match life {
                Some(l) if l.start > 0 => (event(l.start), time(l.start), stack_of(&mut t, l)),
                _ if b.state.is_active() => (-1, -1, t.stack(stacks.map_or(0, |st| st.block_id(device, b.address)))),
                _ => (-1, -1, -1),
            };
            let (addr, stream) = (format!("{:#x}", b.address), format!("{:#x}", s.stream.0));
            json!([addr, b.size, b.requested_size, b.state.name(), stream, pool, alloc, at, stack])
        })
        .collect();
    let blob = json!({
        "device": device,
        "events": h.events.len(),
        "t0": t0,
        "frames": t.frames,
        "stacks": t.stack_rows,
        "pools": t.pools,
        "bands": band_rows,
        "blocks": block_rows,
    });
    // Inside <script>: no `<` may open a tag; JSON has it only in strings, where `\u003c` reads the same.
    blob.to_string().replace('<', "\\u003c")
}

#[cfg(test)]
mod tests {
    use crate::memviz::{load_snapshot, render, Options, Stacks};
    use serde_json::{json, Value};

    #[test]
    fn rows_name_their_allocation_its_events_and_its_stack() {
        let f = |name: &str, line: u32| json!([{"filename": "m.rs", "line": line, "name": name}, {"filename": "main.rs", "line": 1, "name": "main"}]);
        let e = |action: &str, addr: u64, size: u64, t: u64, frames: Value| json!({"action": action, "addr": addr, "size": size, "stream": 7, "time_us": t, "frames": frames});
        let file = json!({
        "segments": [{"device": 0, "address": 0, "total_size": 4 << 20, "stream": 7, "segment_type": "large", "blocks": [
            {"address": 0, "size": 3 << 20, "requested_size": 3 << 20, "state": "active_allocated", "frames": f("keep", 5)},
            {"address": 3 << 20, "size": 1 << 20, "requested_size": 0, "state": "inactive", "frames": []}]}],
        "device_traces": [[
            e("alloc", 0, 3 << 20, 100, f("keep", 5)),
            e("alloc", 3 << 20, 1 << 19, 160, f("scratch", 9)),
            e("free_requested", 3 << 20, 1 << 19, 170, json!([])),
            e("free_completed", 3 << 20, 1 << 19, 180, json!([])),
            e("alloc", 8 << 20, 1 << 18, 190, f("small", 2)),
        ]]});
        let bytes = file.to_string().into_bytes();
        let stacks = Some(std::sync::Arc::new(Stacks::load(&bytes).unwrap()));
        let picture = render(&load_snapshot(&bytes).unwrap(), &Options { stacks, ..Default::default() }).unwrap();
        let page = picture.to_interactive_html();
        let at = page.find("id=\"memviz-data\">").unwrap() + 17;
        let data: Value = serde_json::from_str(&page[at..at + page[at..].find("</script>").unwrap()]).unwrap();
        let stack = |row: &Value, column: usize| -> Vec<String> {
            let s = row[column].as_i64().unwrap();
            let ids = data["stacks"][s as usize].as_array().unwrap();
            ids.iter().map(|i| data["frames"][i.as_u64().unwrap() as usize].as_str().unwrap().to_string()).collect()
        };
        let band = |addr: &str| {
            data["bands"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b[2] == addr)
                .unwrap_or_else(|| panic!("no band at {addr}: {data}"))
                .clone()
        };
        let scratch = band("0x300000");
        // size, stream, address, alloc and free events, their µs after the first event, pool, stack.
        assert_eq!(
            scratch.as_array().unwrap()[..7],
            json!([1 << 19, "0x7", "0x300000", 1, 3, 60, 80]).as_array().unwrap()[..]
        );
        assert_eq!(data["pools"][scratch[7].as_u64().unwrap() as usize], "large pool", "its segment's pool");
        assert_eq!(stack(&scratch, 8), ["scratch  m.rs:9", "main  main.rs:1"], "first frames first");
        let small = band("0x800000");
        assert_eq!((small[4].as_i64(), small[6].as_i64()), (Some(-1), Some(-1)), "still live");
        assert_eq!(
            data["pools"][small[7].as_u64().unwrap() as usize],
            "small pool (by its size)",
            "outside every segment"
        );
        let blocks = data["blocks"].as_array().unwrap();
        let kept = blocks.iter().find(|b| b[0] == "0x0").unwrap();
        assert_eq!((kept[3].as_str(), kept[6].as_i64()), (Some("active_allocated"), Some(0)));
        assert_eq!(stack(kept, 8), ["keep  m.rs:5", "main  main.rs:1"]);
        assert_eq!(data["stacks"].as_array().unwrap().len(), 3, "one row per stack shown, shared by band and block");
        // Without stacks: the same rows, no stack.
        let plain = render(&load_snapshot(&bytes).unwrap(), &Options::default()).unwrap().to_interactive_html();
        assert!(plain.contains("\"stacks\":[]") && !plain.contains("m.rs"));
    }
}
