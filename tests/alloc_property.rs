//! Property test: 10^5+ random malloc / free / record_stream / event completion / empty_cache
//! operations against a simple reference model, under several settings.
//!
//! The model knows which blocks the program holds (and which freed blocks still wait for
//! recorded streams). Invariants checked:
//! * a new block lies within no other live or pending block, is a multiple of 512 bytes and at
//!   least the rounded request;
//! * `allocated_bytes`, `active_bytes`, `requested_bytes`, `allocation`, `active` equal the model's
//!   sums; `reserved ≥ active ≥ allocated`; the device's used bytes equal `reserved_bytes`;
//! * (every 64 operations) the snapshot tiles every segment with blocks exactly, segments do not
//!   overlap, the snapshot's totals equal the statistics, and every model block is in it with
//!   its state;
//! * after `empty_cache`, every segment left holds a live block.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{AccountingMemory, AllocatorSettings, BlockState, CachingAllocator, StatPool};
    use cudasem::driver::{DevicePtr, StreamId};
    use cudasem::Error;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// xorshift64*: small, seeded, good enough to drive a test.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[derive(Clone, Copy, Debug)]
    struct ModelBlock {
        size: usize,
        requested: usize,
        /// Freed by the program, waiting for recorded streams.
        pending: bool,
        /// Its events completed (it is freed at the next malloc).
        completed: bool,
        /// Used on another stream than its own (`record_stream`).
        recorded: bool,
        stream: StreamId,
    }

    /// Blocks the program holds or freed pending, with running totals.
    #[derive(Default)]
    struct Model {
        blocks: BTreeMap<u64, ModelBlock>,
        /// Addresses of the blocks the program holds (for picking one at random).
        live: Vec<u64>,
        allocated: i64,
        active: i64,
        requested: i64,
        pending: usize,
    }

    impl Model {
        fn insert(&mut self, p: u64, b: ModelBlock) {
            self.blocks.insert(p, b);
            self.live.push(p);
            self.allocated += b.size as i64;
            self.active += b.size as i64;
            self.requested += b.requested as i64;
        }
        fn free(&mut self, i: usize, idle: bool) {
            let p = self.live.swap_remove(i);
            let b = self.blocks.get_mut(&p).expect("live");
            self.allocated -= b.size as i64;
            if b.recorded {
                b.pending = true;
                b.completed = idle; // events of idle streams complete as they are recorded
                self.pending += 1;
            } else {
                let b = self.blocks.remove(&p).expect("live");
                self.active -= b.size as i64;
                self.requested -= b.requested as i64;
            }
        }
        fn drop_pending(&mut self, all: bool) {
            if self.pending == 0 {
                return;
            }
            let gone: Vec<u64> =
                self.blocks.iter().filter(|(_, b)| b.pending && (all || b.completed)).map(|(&p, _)| p).collect();
            for p in gone {
                let b = self.blocks.remove(&p).expect("pending");
                self.active -= b.size as i64;
                self.requested -= b.requested as i64;
                self.pending -= 1;
            }
        }
    }

    fn request_size(rng: &mut Rng) -> usize {
        match rng.below(100) {
            0..=59 => 1 + rng.below(64 << 10) as usize,
            60..=84 => 1 + rng.below(1 << 20) as usize,
            85..=96 => (1 << 20) + rng.below(12 << 20) as usize,
            _ => (10 << 20) + rng.below(60 << 20) as usize,
        }
    }

    /// `idle`: streams have no queued work, so events complete at once (and other streams' free
    /// segments can be adopted).
    fn run(conf: &str, fraction: Option<f64>, idle: bool, seed: u64, ops: usize) {
        let settings = AllocatorSettings::parse(conf).unwrap();
        let capacity = 256 << 20;
        let mem = Arc::new(AccountingMemory::new(capacity));
        mem.set_events_complete_at_once(idle);
        let a = CachingAllocator::new(0, mem.clone(), settings.clone());
        if let Some(f) = fraction {
            a.set_memory_fraction(f).unwrap();
        }
        let mut rng = Rng(seed);
        let mut model = Model::default();
        let streams = [StreamId(0), StreamId(7), StreamId(9)];
        let mut syncs = 0;
        let mut ooms = 0;
        for op in 0..ops {
            let what = rng.below(100);
            // Free more often the more is held, so the device fills up now and then, not always.
            let free_bias = (model.allocated as u64 * 12 / capacity as u64).min(12);
            if what < 48 - free_bias || model.live.is_empty() {
                let size = request_size(&mut rng);
                let stream = streams[rng.below(3) as usize];
                let result = a.malloc(size, stream);
                // The malloc first released the blocks whose events completed, and if it had to
                // synchronize (the retry before out of memory), all pending blocks.
                let s = a.memory_stats().num_sync_all_streams();
                model.drop_pending(s > syncs);
                syncs = s;
                match result {
                    Ok(p) => {
                        let block = a.block_size(p).expect("a live block");
                        assert!(block >= settings.round_size(size) && block.is_multiple_of(512), "{size} → {block}");
                        let end = p.0 + block as u64;
                        if let Some((&q, b)) = model.blocks.range(..end).next_back() {
                            assert!(q + b.size as u64 <= p.0, "op {op}: [{:#x}, {end:#x}) overlaps {q:#x} {b:?}", p.0);
                        }
                        let (pending, completed, recorded) = (false, false, false);
                        let b = ModelBlock { size: block, requested: size, pending, completed, recorded, stream };
                        model.insert(p.0, b);
                    }
                    Err(Error::OutOfMemory { .. }) => ooms += 1,
                    Err(e) => panic!("op {op}: {e}"),
                }
            } else if what < 85 {
                let i = rng.below(model.live.len() as u64) as usize;
                let p = model.live[i];
                a.free(DevicePtr(p)).unwrap();
                model.free(i, idle);
                assert!(a.free(DevicePtr(p)).is_err(), "a double free is refused");
            } else if what < 93 {
                let p = model.live[rng.below(model.live.len() as u64) as usize];
                let s = streams[rng.below(3) as usize];
                a.record_stream(DevicePtr(p), s).unwrap();
                let b = model.blocks.get_mut(&p).expect("live");
                b.recorded |= s != b.stream; // the block's own stream needs no waiting
            } else if what < 98 {
                mem.complete_events();
                model.blocks.values_mut().filter(|b| b.pending).for_each(|b| b.completed = true);
            } else {
                a.empty_cache().unwrap();
                syncs = a.memory_stats().num_sync_all_streams();
                model.drop_pending(true);
                for seg in a.snapshot().segments {
                    assert!(seg.blocks.iter().any(|b| b.state.is_active()), "op {op}: empty segment kept {seg:?}");
                }
            }
            check_stats(&a, &mem, &model, op);
            if op % 64 == 0 {
                check_snapshot(&a, &model, op);
            }
        }
        for p in std::mem::take(&mut model.live) {
            a.free(DevicePtr(p)).unwrap();
        }
        a.empty_cache().unwrap();
        assert_eq!((a.memory_reserved(), mem.used()), (0, 0), "{conf}: everything is returned");
        let stats = a.memory_stats();
        println!(
            "{conf:<50} {ops} ops: {ooms} out of memory, {} retries, {} driver allocs",
            stats.num_alloc_retries(),
            stats.num_device_alloc()
        );
    }

    #[track_caller]
    fn check_stats(a: &CachingAllocator, mem: &AccountingMemory, m: &Model, op: usize) {
        let s = a.memory_stats();
        let current = |metric: &str| s.stat(metric, StatPool::All).expect("a metric").current;
        assert_eq!(current("allocated_bytes"), m.allocated, "op {op}");
        assert_eq!(current("active_bytes"), m.active, "op {op}");
        assert_eq!(current("requested_bytes"), m.requested, "op {op}");
        assert_eq!(current("allocation"), m.live.len() as i64, "op {op}");
        assert_eq!(current("active"), m.blocks.len() as i64, "op {op}");
        assert!(current("reserved_bytes") >= current("active_bytes"), "op {op}");
        assert_eq!(mem.used() as i64, current("reserved_bytes"), "op {op}: the device agrees");
    }

    #[track_caller]
    fn check_snapshot(a: &CachingAllocator, m: &Model, op: usize) {
        let (snap, stats) = (a.snapshot(), a.memory_stats());
        let bad = snap.mismatches(&stats);
        assert!(bad.is_empty(), "op {op}: {bad:#?}");
        for w in snap.segments.windows(2) {
            assert!(w[0].address + w[0].total_size as u64 <= w[1].address, "op {op}: segments overlap");
        }
        let blocks: BTreeMap<u64, (usize, BlockState)> =
            snap.segments.iter().flat_map(|s| s.blocks.iter()).map(|b| (b.address, (b.size, b.state))).collect();
        for (p, b) in &m.blocks {
            let want = if b.pending { BlockState::ActivePendingFree } else { BlockState::ActiveAllocated };
            assert_eq!(blocks.get(p), Some(&(b.size, want)), "op {op}: block {p:#x}");
        }
    }

    #[test]
    fn default_settings() {
        run("", None, false, 0x9E37_79B9_7F4A_7C15, 30_000);
    }

    #[test]
    fn max_split_and_rounding() {
        run("max_split_size_mb:24,roundup_power2_divisions:[1:1,16:4,>:8]", None, true, 42, 25_000);
    }

    #[test]
    fn expandable_segments() {
        run("expandable_segments:True", None, false, 7, 25_000);
    }

    #[test]
    fn fraction_and_garbage_collection() {
        run("garbage_collection_threshold:0.6,max_split_size_mb:32", Some(0.4), false, 1234, 25_000);
    }

    #[test]
    fn idle_streams() {
        run("", None, true, 99, 10_000);
    }
}
