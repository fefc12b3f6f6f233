//! PyTorch's stream pool: per device and priority level, 32 streams handed out round-robin
//! (`getStreamFromPool`), created lazily and kept for the life of the process.

use crate::driver::{Driver, StreamId};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Streams per priority level, as PyTorch's `kStreamsPerPool`.
pub const STREAMS_PER_POOL: usize = 32;
/// At most this many priority levels, as PyTorch's `max_compile_time_stream_priorities`.
pub const MAX_PRIORITY_LEVELS: usize = 4;

struct Level {
    next: AtomicUsize,
    slots: Vec<Mutex<Option<StreamId>>>,
}

/// One device's pool.
#[derive(Default)]
pub(crate) struct Pool {
    levels: OnceLock<Vec<Level>>,
}

impl Pool {
    fn init(&self, driver: &dyn Driver, device: usize) -> Result<&Vec<Level>> {
        if let Some(l) = self.levels.get() {
            return Ok(l);
        }
        let (least, greatest) = driver.stream_priority_range(device)?;
        let range = (least - greatest + 1).max(1) as usize;
        let n = range.min(MAX_PRIORITY_LEVELS);
        let levels = (0..n)
            .map(|_| Level {
                next: AtomicUsize::new(0),
                slots: (0..STREAMS_PER_POOL).map(|_| Mutex::new(None)).collect(),
            })
            .collect();
        Ok(self.levels.get_or_init(|| levels))
    }

    /// The priority of the pool's stream `id`, if the pool made it.
    pub fn priority_of(&self, id: StreamId) -> Option<i32> {
        let levels = self.levels.get()?;
        levels.iter().enumerate().find_map(|(level, l)| {
            let made = l.slots.iter().any(|slot| *slot.lock().unwrap_or_else(|e| e.into_inner()) == Some(id));
            made.then_some(-(level as i32))
        })
    }

    /// The next stream of the level that `priority` (0 = normal, negative = higher) selects,
    /// and that stream's priority. Priorities beyond the highest level use the highest.
    pub fn next(&self, driver: &dyn Driver, device: usize, priority: i32) -> Result<(StreamId, i32)> {
        if priority > 0 {
            return Err(Error::InvalidArgument {
                op: "Stream::new",
                reason: format!(
                    "stream priority must be <= 0 (0 is normal, lower numbers are higher priority), got {priority}"
                ),
            });
        }
        let levels = self.init(driver, device)?;
        let level = (priority.unsigned_abs() as usize).min(levels.len() - 1);
        let l = &levels[level];
        let idx = l.next.fetch_add(1, Ordering::Relaxed) % STREAMS_PER_POOL;
        let mut slot = l.slots[idx].lock().unwrap_or_else(|e| e.into_inner());
        let actual = -(level as i32);
        if let Some(id) = *slot {
            return Ok((id, actual));
        }
        let id = driver.create_stream(device, actual)?;
        *slot = Some(id);
        Ok((id, actual))
    }
}
