//! How a process group is set up: the [`Backend`] that moves the data and the [`InitOptions`]
//! of [`init_process_group`](super::init_process_group) and
//! [`ProcessGroup::from_devices_with`](super::ProcessGroup::from_devices_with).

use super::store::Store;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// The library that moves the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// NVIDIA's NCCL (the CUDA driver).
    Nccl,
    /// The simulated backend (the simulated machine): a test double with NCCL's semantics.
    Sim,
}

impl Backend {
    /// The backend of the driver in use: NCCL on `cuda`, the simulated one on `sim`.
    pub fn for_driver() -> Backend {
        if crate::runtime::driver_name() == "cuda" {
            Backend::Nccl
        } else {
            Backend::Sim
        }
    }
}

/// How [`init_process_group`](super::init_process_group) (and
/// [`ProcessGroup::from_devices_with`](super::ProcessGroup::from_devices_with)) set a group up.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// The backend; `None`: the driver's ([`Backend::for_driver`]).
    pub backend: Option<Backend>,
    /// `env://` (torchrun's variables; the default) or `tcp://host:port`.
    pub init_method: String,
    /// This process's rank; `None`: `RANK`.
    pub rank: Option<usize>,
    /// The number of ranks; `None`: `WORLD_SIZE`.
    pub world_size: Option<usize>,
    /// This rank's device; `None`: `LOCAL_RANK`, else the current device.
    pub device: Option<usize>,
    /// How long a rank waits for the others (rendezvous, store, each collective). Default 10
    /// minutes, ProcessGroupNCCL's.
    pub timeout: Duration,
    /// Compare every collective across ranks through the store before running it (on by
    /// default): a mismatch becomes an error instead of a hang, at the cost of a store round trip.
    pub check_collectives: bool,
    /// A store to use instead of making a [`TcpStore`](super::TcpStore) from `init_method`.
    pub store: Option<Arc<dyn Store>>,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            backend: None,
            init_method: "env://".into(),
            rank: None,
            world_size: None,
            device: None,
            timeout: Duration::from_secs(600),
            check_collectives: true,
            store: None,
        }
    }
}

impl InitOptions {
    /// The backend, checked against the driver in use.
    pub(super) fn resolved_backend(&self) -> Result<Backend> {
        let backend = self.backend.unwrap_or_else(Backend::for_driver);
        let driver = crate::runtime::driver_name();
        match (backend, driver) {
            (Backend::Sim, "sim") | (Backend::Nccl, "cuda") => Ok(backend),
            (Backend::Sim, _) => Err(Error::Unsupported {
                op: "init_process_group",
                driver,
                reason: "the sim backend runs on the simulated machine (CUDASEM_DRIVER=sim)".into(),
            }),
            (Backend::Nccl, _) => Err(Error::Unsupported {
                op: "init_process_group",
                driver,
                reason:
                    "the nccl backend needs real GPUs (CUDASEM_DRIVER=cuda); use Backend::Sim on the simulated machine"
                        .into(),
            }),
        }
    }
}
