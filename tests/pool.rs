//! The stream pool: 32 streams per device and priority level, handed out round-robin across the
//! whole process (PyTorch's getStreamFromPool). The round-robin counter is process-global, so
//! this file holds a single test and runs in its own process.

use cudasem::cuda::{self, Stream};
use cudasem::Result;
use std::collections::HashSet;

const POOL: usize = 32;

#[test]
fn pool_hands_out_32_streams_round_robin_per_device_and_priority() -> Result<()> {
    let n = cuda::device_count();
    let mut all_normal: HashSet<Stream> = HashSet::new();
    for d in 0..n {
        let normal: Vec<Stream> = (0..POOL).map(|_| Stream::new(Some(d), 0)).collect::<Result<_>>()?;
        let distinct: HashSet<&Stream> = normal.iter().collect();
        assert_eq!(distinct.len(), POOL, "cuda:{d}: 32 consecutive pool streams are pairwise distinct");
        assert!(normal.iter().all(|s| s.device() == d && !s.is_default() && s.priority() == 0));
        assert!(!normal.contains(&cuda::default_stream(Some(d))?), "the default stream is not in the pool");
        let wrapped = Stream::new(Some(d), 0)?;
        assert_eq!(wrapped, normal[0], "cuda:{d}: the 33rd stream is the 1st again");
        assert_eq!(wrapped.id(), normal[0].id());
        assert_eq!(Stream::new(Some(d), 0)?, normal[1], "cuda:{d}: then the 2nd");

        // The high-priority level is a separate pool of 32.
        let high: Vec<Stream> = (0..POOL).map(|_| Stream::new(Some(d), -1)).collect::<Result<_>>()?;
        let high_set: HashSet<&Stream> = high.iter().collect();
        assert_eq!(high_set.len(), POOL, "cuda:{d}: 32 distinct high-priority streams");
        assert!(high.iter().all(|s| s.device() == d && s.priority() < 0));
        assert!(high.iter().all(|h| !normal.iter().any(|s| s.id() == h.id())), "cuda:{d}: the pools are disjoint");
        assert_eq!(Stream::new(Some(d), -1)?, high[0], "cuda:{d}: the high-priority pool wraps on its own");
        // Taking high-priority streams did not advance the normal pool: it continues at the 3rd.
        assert_eq!(Stream::new(Some(d), 0)?, normal[2], "cuda:{d}: the normal pool's counter is its own");

        all_normal.extend(normal);
    }
    assert_eq!(all_normal.len(), POOL * n, "pools of different devices share no stream");

    // The counter is shared by every thread of the process.
    let first = std::thread::spawn(|| Stream::new(Some(0), 0)).join().unwrap()?;
    let others = std::thread::spawn(|| (1..POOL).map(|_| Stream::new(Some(0), 0)).collect::<Result<Vec<_>>>())
        .join()
        .unwrap()?;
    let mut seen: HashSet<Stream> = others.into_iter().collect();
    assert!(seen.insert(first.clone()), "32 streams taken by two threads are distinct");
    assert_eq!(seen.len(), POOL);
    assert_eq!(Stream::new(Some(0), 0)?, first, "after 32 from other threads, this thread gets the same 1st");
    Ok(())
}
