//! The CUDA driver's expandable-segment state, as [`CudaDriver`](super::CudaDriver) holds it:
//! reserved and mapped ranges per device and peer pairs (`vmm.rs` operates on it).

use cudarc::driver::sys;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};

/// Physical memory mapped at one address.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mapping {
    /// Length of the mapped range.
    pub bytes: usize,
    /// The `cuMemCreate` handle behind it (a plain integer, released once when unmapped).
    pub handle: sys::CUmemGenericAllocationHandle,
}

/// The reserved and mapped ranges and the peer pairs.
#[derive(Debug, Default)]
pub(super) struct Tables {
    /// Reserved ranges: `(device, base) → bytes`.
    pub reserved: BTreeMap<(usize, u64), usize>,
    /// Mapped ranges: `(device, address) → mapping`.
    pub mapped: BTreeMap<(usize, u64), Mapping>,
    /// Device pairs `(low, high)` with peer access enabled in at least one direction.
    pub peers: BTreeSet<(usize, usize)>,
}

impl Tables {
    /// The devices that mapped memory of `device` must be made accessible to, `device` first.
    pub(super) fn accessors(&self, device: usize) -> Vec<usize> {
        let peers = self.peers.iter().filter_map(|&(a, b)| match (a == device, b == device) {
            (true, _) => Some(b),
            (_, true) => Some(a),
            _ => None,
        });
        std::iter::once(device).chain(peers).collect()
    }

    /// The mapped ranges of `device` that start inside `[at, end)`.
    pub(super) fn mapped_in(&self, device: usize, at: u64, end: u64) -> Vec<(u64, Mapping)> {
        self.mapped.range((device, at)..(device, end)).map(|(&(_, a), &m)| (a, m)).collect()
    }
}

/// The CUDA driver's virtual-memory state (`vmm.rs` reserves, maps and releases).
#[derive(Debug)]
pub(super) struct Vmm {
    /// Per device: the recommended granularity, or `None` without VMM support (asked once).
    pub granularity: Vec<OnceLock<Option<usize>>>,
    pub tables: Mutex<Tables>,
}

impl Vmm {
    /// State for a driver with `devices` devices.
    pub(super) fn new(devices: usize) -> Vmm {
        Vmm { granularity: (0..devices).map(|_| OnceLock::new()).collect(), tables: Mutex::new(Tables::default()) }
    }
}
