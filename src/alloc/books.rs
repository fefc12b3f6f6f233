//! [`DepartureBooks`]: what the departures from PyTorch (`departures.rs`) keep track of beyond
//! PyTorch's state: the segments made for large requests under 10 MiB, and allocated blocks per
//! stream.

use super::block::PoolKind;
use super::settings::MIN_LARGE_ALLOC;
use crate::driver::StreamId;

/// A large-pool segment made for a request under [`MIN_LARGE_ALLOC`] (departure 1's large class).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrownSegment {
    addr: u64,
    stream: StreamId,
    bytes: usize,
}

/// The books of the departures: what they need to know beyond PyTorch's state.
#[derive(Debug, Default)]
pub(crate) struct DepartureBooks {
    /// Departure 1: the large-pool segments made for requests under 10 MiB (few: tens).
    grown: Vec<GrownSegment>,
    /// Departure 2: allocated blocks per stream.
    live: Vec<(StreamId, usize)>,
}

impl DepartureBooks {
    /// A block of `stream` was handed out.
    #[inline]
    pub fn allocated(&mut self, stream: StreamId) {
        match self.live.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, n)) => *n += 1,
            None => self.live.push((stream, 1)),
        }
    }

    /// A block of `stream` was freed by the program.
    #[inline]
    pub fn freed(&mut self, stream: StreamId) {
        if let Some((_, n)) = self.live.iter_mut().find(|(s, _)| *s == stream) {
            *n -= 1;
        }
    }

    pub fn holds_blocks(&self, stream: StreamId) -> bool {
        self.live.iter().any(|&(s, n)| s == stream && n > 0)
    }

    /// A segment of `bytes` at `addr` was made for `stream`'s request of `size` (rounded) bytes.
    pub fn segment_made(&mut self, addr: u64, bytes: usize, stream: StreamId, pool: PoolKind, size: usize) {
        if pool == PoolKind::Large && size < MIN_LARGE_ALLOC {
            self.grown.push(GrownSegment { addr, stream, bytes });
        }
    }

    /// The segment at `addr` went back to the driver.
    pub fn segment_freed(&mut self, addr: u64) {
        if let Some(i) = self.grown.iter().position(|g| g.addr == addr) {
            self.grown.swap_remove(i);
        }
    }

    pub fn segment_adopted(&mut self, addr: u64, stream: StreamId) {
        if let Some(g) = self.grown.iter_mut().find(|g| g.addr == addr) {
            g.stream = stream;
        }
    }

    pub fn grown_bytes(&self, stream: StreamId) -> usize {
        self.grown.iter().filter(|g| g.stream == stream).map(|g| g.bytes).sum()
    }
}
