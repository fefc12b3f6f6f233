//! Property test (proptest): random programs of malloc / free / record_stream / event completion /
//! empty_cache run against the caching allocator and a simple reference model, under several
//! settings; a failing program shrinks to a minimal sequence of operations.
//!
//! The model knows which blocks the program holds (and which freed blocks still wait for
//! recorded streams). Properties, checked after every operation unless said otherwise:
//! 1. a new block lies within no other live or pending block, is a multiple of 512 bytes and at
//!    least the rounded request;
//! 2. `allocated_bytes`, `active_bytes`, `requested_bytes`, `allocation`, `active` equal the
//!    model's sums; `reserved ≥ active`; the device's used bytes equal `reserved_bytes`;
//! 3. a freed block cannot be freed again;
//! 4. (every 64 operations, and at the end) the snapshot tiles every segment with blocks exactly,
//!    segments do not overlap, the snapshot's totals equal the statistics, and every model block
//!    is in it with its state;
//! 5. after `empty_cache`, every segment left holds an active block;
//! 6. at the end, once the program frees everything, `empty_cache` returns every byte.
//!
//! Each setting runs 64 programs of up to 1000 operations (over 30,000 operations per setting) from
//! a fixed seed, so a run is reproducible.

// In a module named `alloc` so that `cargo test alloc` selects these tests.
mod alloc {
    use cudasem::alloc::{AccountingMemory, AllocatorSettings, BlockState, CachingAllocator, StatPool};
    use cudasem::driver::{DevicePtr, StreamId};
    use cudasem::Error;
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::test_runner::{Config, RngSeed, TestCaseError};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// The device's memory.
    const CAPACITY: usize = 256 << 20;
    /// The streams a program uses.
    const STREAMS: [StreamId; 3] = [StreamId(0), StreamId(7), StreamId(9)];

    /// One operation of a program. Blocks and streams are picked by [`Index`], resolved against
    /// what the program holds at that moment (so a shrunk program stays meaningful).
    #[derive(Clone, Debug)]
    enum Op {
        /// `malloc(size)` on a stream — or, when `roll` is below the fill bias (0 to 12, growing
        /// with the bytes held), a free instead: the fuller the device, the more is freed, so it
        /// fills up now and then, not always.
        Malloc { size: usize, stream: Index, roll: u8 },
        /// Frees a block the program holds (then checks a second free is refused).
        Free(Index),
        /// `record_stream` of a held block on a stream.
        RecordStream(Index, Index),
        /// Every recorded event completes.
        CompleteEvents,
        /// `empty_cache`.
        EmptyCache,
    }

    /// Request sizes: mostly small, some up to 70 MiB.
    fn request_size() -> impl Strategy<Value = usize> {
        prop_oneof![
            60 => 1..=64usize << 10,
            25 => 1..=1usize << 20,
            12 => (1usize << 20)..(13 << 20),
            3 => (10usize << 20)..(70 << 20),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            48 => (request_size(), any::<Index>(), 0..48u8).prop_map(|(size, stream, roll)| Op::Malloc { size, stream, roll }),
            37 => any::<Index>().prop_map(Op::Free),
            8 => (any::<Index>(), any::<Index>()).prop_map(|(b, s)| Op::RecordStream(b, s)),
            5 => Just(Op::CompleteEvents),
            2 => Just(Op::EmptyCache),
        ]
    }

    fn program() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(op(), 0..=1000)
    }

    /// 64 programs from a fixed seed; a failure shrinks for as long as it takes (the automatic
    /// limit, 4 steps per case, would leave hundreds of operations).
    fn config(seed: u64) -> Config {
        Config { cases: 64, rng_seed: RngSeed::Fixed(seed), max_shrink_iters: 100_000, ..Config::default() }
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
        /// Addresses of the blocks the program holds (what an [`Index`] picks from).
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

    /// The allocator under test, its memory and the model.
    struct Run {
        a: CachingAllocator,
        mem: Arc<AccountingMemory>,
        settings: AllocatorSettings,
        model: Model,
        idle: bool,
        syncs: i64,
    }

    /// `idle`: streams have no queued work, so events complete at once (and other streams' free
    /// segments can be adopted).
    fn run(conf: &str, fraction: Option<f64>, idle: bool, ops: &[Op]) -> Result<(), TestCaseError> {
        let settings = AllocatorSettings::parse(conf).unwrap();
        let mem = Arc::new(AccountingMemory::new(CAPACITY));
        mem.set_events_complete_at_once(idle);
        let a = CachingAllocator::new(0, mem.clone(), settings.clone());
        if let Some(f) = fraction {
            a.set_memory_fraction(f).unwrap();
        }
        let mut r = Run { a, mem, settings, model: Model::default(), idle, syncs: 0 };
        for (i, op) in ops.iter().enumerate() {
            r.apply(op, i)?;
            r.check_stats(i)?;
            if i % 64 == 0 {
                r.check_snapshot(i)?;
            }
        }
        r.check_snapshot(ops.len())?;
        for p in std::mem::take(&mut r.model.live) {
            r.a.free(DevicePtr(p)).unwrap();
        }
        r.a.empty_cache().unwrap();
        prop_assert_eq!((r.a.memory_reserved(), r.mem.used()), (0, 0), "{}: everything is returned", conf);
        Ok(())
    }

    impl Run {
        fn apply(&mut self, op: &Op, i: usize) -> Result<(), TestCaseError> {
            let (a, model) = (&self.a, &mut self.model);
            match *op {
                Op::Malloc { size, stream, roll } => {
                    let free_bias = (model.allocated as u64 * 12 / CAPACITY as u64).min(12) as u8;
                    if roll < free_bias && !model.live.is_empty() {
                        return self.apply(&Op::Free(stream), i);
                    }
                    let stream = *stream.get(&STREAMS);
                    let result = a.malloc(size, stream);
                    // The malloc first released the blocks whose events completed, and if it had
                    // to synchronize (the retry before out of memory), all pending blocks.
                    let s = a.memory_stats().num_sync_all_streams();
                    model.drop_pending(s > self.syncs);
                    self.syncs = s;
                    match result {
                        Ok(p) => {
                            let block = a.block_size(p).expect("a live block");
                            prop_assert!(
                                block >= self.settings.round_size(size) && block.is_multiple_of(512),
                                "op {}: {} → {}",
                                i,
                                size,
                                block
                            );
                            let end = p.0 + block as u64;
                            if let Some((&q, b)) = model.blocks.range(..end).next_back() {
                                prop_assert!(
                                    q + b.size as u64 <= p.0,
                                    "op {}: [{:#x}, {:#x}) overlaps {:#x} {:?}",
                                    i,
                                    p.0,
                                    end,
                                    q,
                                    b
                                );
                            }
                            let (pending, completed, recorded) = (false, false, false);
                            model.insert(
                                p.0,
                                ModelBlock { size: block, requested: size, pending, completed, recorded, stream },
                            );
                        }
                        Err(Error::OutOfMemory { .. }) => {}
                        Err(e) => return Err(TestCaseError::fail(format!("op {i}: {e}"))),
                    }
                }
                Op::Free(_) | Op::RecordStream(..) if model.live.is_empty() => {}
                Op::Free(pick) => {
                    let k = pick.index(model.live.len());
                    let p = model.live[k];
                    a.free(DevicePtr(p)).unwrap();
                    model.free(k, self.idle);
                    prop_assert!(a.free(DevicePtr(p)).is_err(), "op {}: a double free is refused", i);
                }
                Op::RecordStream(pick, stream) => {
                    let p = *pick.get(&model.live);
                    let s = *stream.get(&STREAMS);
                    a.record_stream(DevicePtr(p), s).unwrap();
                    let b = model.blocks.get_mut(&p).expect("live");
                    b.recorded |= s != b.stream; // the block's own stream needs no waiting
                }
                Op::CompleteEvents => {
                    self.mem.complete_events();
                    model.blocks.values_mut().filter(|b| b.pending).for_each(|b| b.completed = true);
                }
                Op::EmptyCache => {
                    a.empty_cache().unwrap();
                    self.syncs = a.memory_stats().num_sync_all_streams();
                    model.drop_pending(true);
                    for seg in a.snapshot().segments {
                        prop_assert!(
                            seg.blocks.iter().any(|b| b.state.is_active()),
                            "op {}: empty segment kept {:?}",
                            i,
                            seg
                        );
                    }
                }
            }
            Ok(())
        }

        fn check_stats(&self, op: usize) -> Result<(), TestCaseError> {
            let (s, m) = (self.a.memory_stats(), &self.model);
            let current = |metric: &str| s.stat(metric, StatPool::All).expect("a metric").current;
            prop_assert_eq!(current("allocated_bytes"), m.allocated, "op {}", op);
            prop_assert_eq!(current("active_bytes"), m.active, "op {}", op);
            prop_assert_eq!(current("requested_bytes"), m.requested, "op {}", op);
            prop_assert_eq!(current("allocation"), m.live.len() as i64, "op {}", op);
            prop_assert_eq!(current("active"), m.blocks.len() as i64, "op {}", op);
            prop_assert!(current("reserved_bytes") >= current("active_bytes"), "op {}", op);
            prop_assert_eq!(self.mem.used() as i64, current("reserved_bytes"), "op {}: the device agrees", op);
            Ok(())
        }

        fn check_snapshot(&self, op: usize) -> Result<(), TestCaseError> {
            let (snap, stats) = (self.a.snapshot(), self.a.memory_stats());
            let bad = snap.mismatches(&stats);
            prop_assert!(bad.is_empty(), "op {}: {:#?}", op, bad);
            for w in snap.segments.windows(2) {
                prop_assert!(w[0].address + w[0].total_size as u64 <= w[1].address, "op {}: segments overlap", op);
            }
            let blocks: BTreeMap<u64, (usize, BlockState)> =
                snap.segments.iter().flat_map(|s| s.blocks.iter()).map(|b| (b.address, (b.size, b.state))).collect();
            for (p, b) in &self.model.blocks {
                let want = if b.pending { BlockState::ActivePendingFree } else { BlockState::ActiveAllocated };
                prop_assert_eq!(blocks.get(p), Some(&(b.size, want)), "op {}: block {:#x}", op, p);
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(config(0x9E37_79B9_7F4A_7C15))]
        #[test]
        fn default_settings(ops in program()) {
            run("", None, false, &ops)?;
        }
    }

    proptest! {
        #![proptest_config(config(42))]
        #[test]
        fn max_split_and_rounding(ops in program()) {
            run("max_split_size_mb:24,roundup_power2_divisions:[1:1,16:4,>:8]", None, true, &ops)?;
        }
    }

    proptest! {
        #![proptest_config(config(7))]
        #[test]
        fn expandable_segments(ops in program()) {
            run("expandable_segments:True", None, false, &ops)?;
        }
    }

    proptest! {
        #![proptest_config(config(1234))]
        #[test]
        fn fraction_and_garbage_collection(ops in program()) {
            run("garbage_collection_threshold:0.6,max_split_size_mb:32", Some(0.4), false, &ops)?;
        }
    }

    proptest! {
        #![proptest_config(config(99))]
        #[test]
        fn idle_streams(ops in program()) {
            run("", None, true, &ops)?;
        }
    }
}
