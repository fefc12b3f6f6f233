//! The query-tile orders of the tensor-core attention kernels (`attn_order.rs`, `attn_task` of
//! `cu/attention_params.cu`): every order is a permutation of the grid's tasks, the swizzle's
//! sections fit half the L2, and a greedy list-scheduling simulation of the device (blocks taken
//! in grid order by the first free slot, a tile's work one unit for its queries and output plus
//! its key tiles) compares the orders' makespans, the keys and values their resident blocks read
//! and, through an LRU model of the L2, the bytes of keys and values read from memory.
//! `cargo test --lib attn_order -- --nocapture` prints the tables.

use super::attn_order::{
    attn_order, attn_task, swizzle_section, TileGrid, MAX_SECTION, ORDER_BITS, ORDER_HEAD, ORDER_HEAVY, ORDER_NATURAL,
    ORDER_SWIZZLE,
};
use crate::config::AttentionOrder;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

const MIB: u64 = 1 << 20;

/// The swizzle's order code with sections of `g` heads.
fn swizzle(g: u64) -> i32 {
    ORDER_SWIZZLE | ((g as i32) << ORDER_BITS)
}

/// The (query tile, head) of every task of a grid under `code`, in grid order.
fn tasks(code: i32, heads: u64, qtiles: u64) -> Vec<(u64, u64)> {
    (0..heads * qtiles).map(|t| attn_task(code, heads, qtiles, t)).collect()
}

/// Panics unless `order` holds every (query tile, head) of the grid once.
fn assert_permutation(order: &[(u64, u64)], heads: u64, qtiles: u64, what: &str) {
    assert_eq!(order.len() as u64, heads * qtiles, "{what}");
    let mut seen = vec![false; (heads * qtiles) as usize];
    for &(qt, bh) in order {
        assert!(qt < qtiles && bh < heads, "{what}: ({qt}, {bh}) out of the grid");
        let i = (bh * qtiles + qt) as usize;
        assert!(!seen[i], "{what}: ({qt}, {bh}) twice");
        seen[i] = true;
    }
}

/// Every order maps the grid's tasks onto its tiles one to one, for many grids, and the swizzle
/// for every section size, dividing B·Hq or not (and past it: one section).
#[test]
fn every_order_is_a_permutation_of_the_tasks() {
    for heads in (1..=24).chain([31, 32, 37, 64, 100, 128]) {
        for qtiles in [1, 2, 3, 5, 8, 13, 32] {
            for code in [ORDER_HEAVY, ORDER_HEAD, ORDER_NATURAL] {
                assert_permutation(&tasks(code, heads, qtiles), heads, qtiles, &format!("code {code}"));
            }
            let sections = (1..=heads.min(40) + 2).chain([heads / 3 + 1, heads - 1, heads, heads + 7]);
            for g in sections.filter(|&g| g >= 1) {
                let what = format!("swizzle G {g}, B·Hq {heads}, {qtiles} query tiles");
                let order = tasks(swizzle(g), heads, qtiles);
                assert_permutation(&order, heads, qtiles, &what);
                assert_sections(&order, heads, qtiles, g, &what);
            }
        }
    }
}

/// The swizzle's shape: the short section (B·Hq mod G heads) first, then sections of G
/// consecutive heads, each taking its heads' tiles heaviest first (every head's last tile of the
/// section before any head's tile before it).
fn assert_sections(order: &[(u64, u64)], heads: u64, qtiles: u64, g: u64, what: &str) {
    let first = heads % g;
    let mut sizes: Vec<u64> = if first > 0 { vec![first] } else { vec![] };
    sizes.extend(std::iter::repeat_n(g, (heads / g) as usize));
    let (mut h0, mut at) = (0, 0);
    for n in sizes {
        let section = &order[at..at + (n * qtiles) as usize];
        for (i, &(qt, bh)) in section.iter().enumerate() {
            let i = i as u64;
            assert_eq!((qt, bh), (qtiles - 1 - i / n, h0 + i % n), "{what}: task {}", at as u64 + i);
        }
        h0 += n;
        at += section.len();
    }
}

/// With one section (G at least B·Hq) the swizzle is the heaviest-first order.
#[test]
fn one_section_is_the_heaviest_first_order() {
    for (heads, qtiles) in [(1, 1), (7, 3), (32, 32), (128, 8)] {
        let heavy = tasks(ORDER_HEAVY, heads, qtiles);
        for g in [heads, heads + 1, 2 * heads + 3] {
            assert_eq!(tasks(swizzle(g), heads, qtiles), heavy, "B·Hq {heads}, G {g}");
        }
    }
}

/// The codes the kernels read: the chosen order for causal launches (the swizzle with its
/// section above the low 8 bits), each (batch, head)'s tiles together (code 1) otherwise.
#[test]
fn the_order_code_is_the_chosen_one_when_causal() {
    use AttentionOrder::{Head, Heavy, Natural, Swizzle};
    let codes = |causal| [Heavy, Head, Natural, Swizzle].map(|o| attn_order(o, causal, 12));
    assert_eq!(codes(true), [0, 1, 2, 3 | (12 << 8)]);
    assert_eq!(codes(false), [1, 1, 1, 1]);
    assert_eq!(attn_order(Swizzle, true, 0), 3 | (1 << 8), "at least one head a section");
    let most = attn_order(Swizzle, true, u64::MAX);
    assert!(most > 0 && (most >> ORDER_BITS) as u64 == MAX_SECTION, "{most:#x}");
    assert_eq!(MAX_SECTION, (i32::MAX >> ORDER_BITS) as u64, "the config's limit is what the code holds");
}

/// The tuning the driver holds keeps every order (its discriminant round trip).
#[test]
fn the_tuning_holds_every_order() {
    for order in AttentionOrder::ALL {
        let t = super::ctx::Tuning::new(crate::config::LaunchTuning { attention_order: order, ..Default::default() });
        assert_eq!(t.attention_order(), order);
    }
}

/// Sections of as many heads as fill half the L2 with their keys and values, at least two
/// waves of blocks, at most all heads.
#[test]
fn a_section_fills_half_the_l2_and_spans_two_waves() {
    let grid = |heads, qtiles, slots| TileGrid { heads, qtiles, slots };
    // The E128 bench row on an H100 (50 MiB of L2, pp128: one block an SM): 2 MiB a head.
    assert_eq!(swizzle_section(grid(32, 32, 132), 2 * MIB, 50 * MIB), 12);
    assert_eq!(swizzle_section(grid(32, 32, 132), 2 * MIB, 60 * MIB), 15, "an H200's 60 MiB");
    // The E64 row (wg64: two blocks an SM): 256 KiB a head, 100 of its 128 heads.
    assert_eq!(swizzle_section(grid(128, 8, 264), MIB / 4, 50 * MIB), 100);
    // Keys and values past the L2: two waves of tiles (264 / 32 rounded up), or one head.
    assert_eq!(swizzle_section(grid(32, 32, 132), 1 << 30, 50 * MIB), 9);
    assert_eq!(swizzle_section(grid(32, 512, 132), 1 << 30, 50 * MIB), 1);
    assert_eq!(swizzle_section(grid(32, 512, 132), 1 << 30, 0), 1, "no L2 reported");
    // All of it fits: one section.
    assert_eq!(swizzle_section(grid(16, 8, 132), MIB / 4, 50 * MIB), 16);
    assert_eq!(swizzle_section(grid(1 << 40, 1, 132), 1, 1 << 40), MAX_SECTION);
    assert_eq!(swizzle_section(grid(0, 0, 0), 0, 0), 1);
}

/// A simulated grid: `heads` × `qtiles` causal tiles, S = L, query tile `qt` reading
/// `keys × (qt + 1)` key tiles of `tile_bytes` (keys and values) on `slots` block slots.
#[derive(Clone, Copy)]
struct Sim {
    heads: u64,
    qtiles: u64,
    slots: u64,
    keys: u64,
    tile_bytes: u64,
}

impl Sim {
    fn key_tiles(&self, qt: u64) -> u64 {
        self.keys * (qt + 1)
    }

    /// The keys and values of one head.
    fn head_bytes(&self) -> u64 {
        self.key_tiles(self.qtiles - 1) * self.tile_bytes
    }

    fn section(&self, l2: u64) -> u64 {
        swizzle_section(TileGrid { heads: self.heads, qtiles: self.qtiles, slots: self.slots }, self.head_bytes(), l2)
    }
}

/// One block of a simulated schedule.
#[derive(Clone, Copy)]
struct Run {
    qt: u64,
    bh: u64,
    start: u64,
    end: u64,
}

/// Greedy list scheduling: each block of `order` in turn on the slot free first (the lowest
/// slot of those free at once), for one unit plus its key tiles.
fn schedule(sim: &Sim, order: &[(u64, u64)]) -> Vec<Run> {
    let mut free: BinaryHeap<Reverse<(u64, u64)>> = (0..sim.slots).map(|s| Reverse((0, s))).collect();
    let mut runs = Vec::with_capacity(order.len());
    for &(qt, bh) in order {
        let Reverse((start, slot)) = free.pop().expect("a slot");
        let end = start + 1 + sim.key_tiles(qt);
        runs.push(Run { qt, bh, start, end });
        free.push(Reverse((end, slot)));
    }
    runs
}

/// The most bytes of keys and values the resident blocks read at once: over time, the sum over
/// heads of the keys of the resident block of each head that reads the most.
fn peak_live(sim: &Sim, runs: &[Run]) -> u64 {
    let mut events: Vec<(u64, bool, Run)> =
        runs.iter().flat_map(|&r| [(r.start, true, r), (r.end, false, r)]).collect();
    events.sort_by_key(|&(t, start, _)| (t, start)); // ends before starts at the same time
    let mut count = vec![0u32; (sim.heads * sim.qtiles) as usize];
    let mut top: Vec<Option<u64>> = vec![None; sim.heads as usize];
    let (mut live, mut peak) = (0u64, 0u64);
    let keys = |t: Option<u64>| t.map_or(0, |qt| sim.key_tiles(qt));
    for (_, start, r) in events {
        let base = (r.bh * sim.qtiles) as usize;
        let h = r.bh as usize;
        let before = keys(top[h]);
        if start {
            count[base + r.qt as usize] += 1;
            top[h] = top[h].max(Some(r.qt));
        } else {
            count[base + r.qt as usize] -= 1;
            top[h] = (0..sim.qtiles).rev().find(|&q| count[base + q as usize] > 0);
        }
        live = live + keys(top[h]) - before;
        peak = peak.max(live);
    }
    peak * sim.tile_bytes
}

/// Bytes of keys and values read from memory through an LRU cache of `l2` bytes (key tiles of
/// `tile_bytes`), each block reading its key tiles one a unit after its first unit.
fn memory_bytes(sim: &Sim, runs: &[Run], l2: u64) -> u64 {
    let mut reads: Vec<(u64, u64, u64)> =
        runs.iter().flat_map(|r| (0..sim.key_tiles(r.qt)).map(move |j| (r.start + 1 + j, r.bh, j))).collect();
    reads.sort_unstable();
    let capacity = (l2 / sim.tile_bytes) as usize;
    let (mut stamp_of, mut by_stamp) = (HashMap::new(), BTreeMap::new());
    let mut misses = 0;
    for (stamp, &(_, bh, j)) in reads.iter().enumerate() {
        match stamp_of.insert((bh, j), stamp) {
            Some(old) => {
                by_stamp.remove(&old);
            }
            None => misses += 1,
        }
        by_stamp.insert(stamp, (bh, j));
        if by_stamp.len() > capacity {
            let (_, victim) = by_stamp.pop_first().expect("a cached tile");
            stamp_of.remove(&victim);
        }
    }
    misses * sim.tile_bytes
}

/// The alternatives the swizzle was chosen among, as explicit task lists: `sizes` sections of
/// consecutive heads, each heaviest first unless `light_first(section)`.
fn sections(sim: &Sim, sizes: &[u64], light_first: impl Fn(usize) -> bool) -> Vec<(u64, u64)> {
    let mut order = Vec::new();
    let mut h0 = 0;
    for (i, &n) in sizes.iter().enumerate() {
        for k in 0..n * sim.qtiles {
            let step = k / n;
            let qt = if light_first(i) { step } else { sim.qtiles - 1 - step };
            order.push((qt, h0 + k % n));
        }
        h0 += n;
    }
    order
}

/// The orders compared: heavy, head, the swizzle, and three other arrangements of the same
/// sections: FlashAttention 3's (the short section last), sections of balanced sizes, and a
/// serpentine (the short section first, directions alternating so the last runs heaviest first).
fn candidates(sim: &Sim, l2: u64) -> Vec<(&'static str, Vec<(u64, u64)>)> {
    let (h, q) = (sim.heads, sim.qtiles);
    let g = sim.section(l2);
    let full = std::iter::repeat_n(g, (h / g) as usize);
    let last: Vec<u64> = full.clone().chain(Some(h % g).filter(|&r| r > 0)).collect();
    let first: Vec<u64> = Some(h % g).filter(|&r| r > 0).into_iter().chain(full).collect();
    let count = h.div_ceil(g);
    let balanced: Vec<u64> = (0..count).map(|i| h / count + u64::from(i < h % count)).collect();
    let n = first.len();
    vec![
        ("heavy", tasks(ORDER_HEAVY, h, q)),
        ("head", tasks(ORDER_HEAD, h, q)),
        ("swizzle", tasks(swizzle(g), h, q)),
        ("fa3-short-last", sections(sim, &last, |_| false)),
        ("balanced", sections(sim, &balanced, |_| false)),
        ("serpentine", sections(sim, &first, |i| (n - 1 - i) % 2 == 1)),
    ]
}

/// The H100's L2.
const H100_L2: u64 = 50 * MIB;

/// The two causal bench rows on an H100-like device (132 SMs): `b1_h32_t4096_e128` under pp128
/// (tiles of 128 queries and 128 keys, 161 KiB of shared memory: one block an SM) and
/// `b8_h16_t1024_e64` under wg64 (128 queries, 64 keys, 49 KiB and 128 registers a thread: two
/// blocks an SM). Simulated: the swizzle's makespan is the heaviest-first order's (within 1 %),
/// the keys and values its resident blocks read stay within three quarters of the L2 where the
/// heaviest-first order's exceed it, and it reads them from memory about once; the head order's
/// makespan is longer.
#[test]
fn the_bench_rows_keep_their_makespan_and_fit_the_l2() {
    let e128 = Sim { heads: 32, qtiles: 32, slots: 132, keys: 1, tile_bytes: 128 * 128 * 2 * 2 };
    let e64 = Sim { heads: 128, qtiles: 8, slots: 264, keys: 2, tile_bytes: 64 * 64 * 2 * 2 };
    for (name, sim) in
        [("sdpa_bf16_causal_b1_h32_t4096_e128 (pp128)", e128), ("sdpa_bf16_causal_b8_h16_t1024_e64 (wg64)", e64)]
    {
        let work: u64 = (0..sim.qtiles).map(|qt| 1 + sim.key_tiles(qt)).sum::<u64>() * sim.heads;
        println!(
            "{name}: {} tasks on {} slots, section {} heads, ideal makespan {:.1} units",
            sim.heads * sim.qtiles,
            sim.slots,
            sim.section(H100_L2),
            work as f64 / sim.slots as f64
        );
        let mut by_name = HashMap::new();
        for (order_name, order) in candidates(&sim, H100_L2) {
            assert_permutation(&order, sim.heads, sim.qtiles, order_name);
            let runs = schedule(&sim, &order);
            let makespan = runs.iter().map(|r| r.end).max().unwrap_or(0);
            let (live, read) = (peak_live(&sim, &runs), memory_bytes(&sim, &runs, H100_L2));
            println!(
                "  {order_name:15} makespan {makespan:4}  peak live K/V {:5.1} MiB  K/V read {:6.1} MiB",
                live as f64 / MIB as f64,
                read as f64 / MIB as f64
            );
            by_name.insert(order_name, (makespan, live, read));
        }
        let (heavy, swizzle, head) = (by_name["heavy"], by_name["swizzle"], by_name["head"]);
        assert!(swizzle.0 * 100 <= heavy.0 * 101, "{name}: makespan {} against heavy's {}", swizzle.0, heavy.0);
        assert!(head.0 > swizzle.0, "{name}: head {} swizzle {}", head.0, swizzle.0);
        assert!(swizzle.1 <= H100_L2 * 3 / 4, "{name}: {} bytes live", swizzle.1);
        assert!(swizzle.2 <= heavy.2, "{name}: {} bytes read against heavy's {}", swizzle.2, heavy.2);
        let all = sim.heads * sim.head_bytes();
        assert!(swizzle.2 <= all + all / 20, "{name}: {} bytes read of {all}", swizzle.2);
    }
    assert!(e128.heads * e128.head_bytes() > H100_L2, "the E128 row's keys and values exceed the L2");
}

/// Per candidate over the shapes: the sums of the logs of the makespan and of the peak live keys
/// and values over the heaviest-first order's, the worst makespan ratio, and the shapes.
#[derive(Default, Clone, Copy)]
struct Tally {
    log_makespan: f64,
    log_live: f64,
    worst: f64,
    shapes: usize,
}

/// Over many shapes (B·Hq, query tiles, one to four blocks an SM, head dims 64 and 128) on an
/// H100-like device: the swizzle's makespan stays within 5 % of the heaviest-first order's
/// (geometric mean within 1 %), below FlashAttention 3's arrangement's worst case, and the keys
/// and values its resident blocks read stay within 2.5 sections, or four where sections are their
/// two-wave floor — where the heaviest-first order's grow with B·Hq.
#[test]
fn the_swizzle_keeps_the_makespan_over_many_shapes() {
    let mut tally: HashMap<&str, Tally> = HashMap::new();
    for (e, slots) in [(64, 264), (64, 528), (128, 132)] {
        let (keys, tile_bytes) = if e == 64 { (2, 64 * 64 * 4) } else { (1, 128 * 128 * 4) };
        for heads in [4, 8, 12, 16, 24, 32, 40, 48, 64, 96, 128, 256] {
            for qtiles in [2, 4, 8, 16, 32, 64] {
                let sim = Sim { heads, qtiles, slots, keys, tile_bytes };
                if sim.heads * sim.head_bytes() <= H100_L2 / 2 {
                    continue; // one section: the heaviest-first order itself
                }
                let shape = format!("E{e}, {slots} slots, B·Hq {heads}, {qtiles} query tiles");
                simulate_shape(&sim, &shape, &mut tally);
            }
        }
    }
    let mut rows: Vec<_> = tally.into_iter().collect();
    rows.sort_by(|a, b| a.1.log_makespan.total_cmp(&b.1.log_makespan));
    println!("over the heaviest-first order's, {} shapes (geometric means):", rows[0].1.shapes);
    let mean = |log: f64, n: usize| (log / n as f64).exp();
    for (name, t) in &rows {
        let (m, l) = (mean(t.log_makespan, t.shapes), mean(t.log_live, t.shapes));
        println!("  {name:15} makespan {m:.4} (worst {:.3})  peak live K/V {l:.3}", t.worst);
    }
    let get = |n: &str| rows.iter().find(|r| r.0 == n).expect("a candidate").1;
    let (swizzle, fa3) = (get("swizzle"), get("fa3-short-last"));
    assert!(mean(swizzle.log_makespan, swizzle.shapes) <= 1.01, "{}", mean(swizzle.log_makespan, swizzle.shapes));
    assert!(
        swizzle.worst < fa3.worst,
        "worst {} against FlashAttention 3's arrangement's {}",
        swizzle.worst,
        fa3.worst
    );
    assert!(mean(swizzle.log_live, swizzle.shapes) < 0.6, "{}", mean(swizzle.log_live, swizzle.shapes));
}

/// Schedules every candidate on `sim`, checks the swizzle's bounds and adds to `tally`.
fn simulate_shape(sim: &Sim, shape: &str, tally: &mut HashMap<&'static str, Tally>) {
    let runs: Vec<(&str, Vec<Run>)> =
        candidates(sim, H100_L2).into_iter().map(|(n, o)| (n, schedule(sim, &o))).collect();
    let makespan = |i: usize| runs[i].1.iter().map(|r| r.end).max().unwrap_or(1) as f64;
    let live = |i: usize| peak_live(sim, &runs[i].1) as f64;
    let (heavy, heavy_live) = (makespan(0), live(0));
    for (i, (name, _)) in runs.iter().enumerate() {
        let t = tally.entry(name).or_default();
        t.log_makespan += (makespan(i) / heavy).ln();
        t.log_live += (live(i) / heavy_live).ln();
        t.worst = t.worst.max(makespan(i) / heavy);
        t.shapes += 1;
    }
    let swizzle = makespan(2) / heavy;
    assert!(swizzle <= 1.05, "{shape}: the swizzle's makespan {swizzle:.3} × heavy's");
    let section = sim.section(H100_L2);
    let fits = (H100_L2 / 2) / sim.head_bytes() >= section;
    let bound = section * sim.head_bytes() * if fits { 5 } else { 8 } / 2;
    assert!(live(2) <= bound as f64, "{shape}: {} bytes live, section {section}", live(2));
}
