//! The device registry: the process-wide [`Runtime`] over the driver (per-device state, pinned
//! host memory), built on first use from the process's one [`Config`] ([`init`], else the
//! environment), and [`rt`], the way every runtime file reaches it.

use super::context;
use super::device_errors::DeviceErrors;
use super::host_alloc::HostMemory;
use super::pool::Pool;
use crate::alloc::{AllocatorSettings, CachingAllocator};
use crate::config::{Config, LaunchTuning};
use crate::device::IntoCudaDevice;
use crate::driver::{self, Driver, StreamId};
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex, OnceLock};

/// Per-device state shared by all threads.
pub(crate) struct DeviceState {
    pub pool: Pool,
    /// `peer_enabled[j]`: this device may read device `j`'s memory (set by `enable_peer_access`).
    pub peer_enabled: Mutex<Vec<bool>>,
    /// The device's caching allocator, made on first use.
    pub allocator: OnceLock<CachingAllocator>,
    /// The device's default stream, asked of the driver once (`None` if it could not say; then
    /// every lookup asks it and reports its error).
    pub default_stream: Option<StreamId>,
    /// Asynchronous errors pending on the device (`errors.rs`).
    pub errors: DeviceErrors,
}

/// The process-wide runtime.
pub(crate) struct Runtime {
    pub driver: Arc<dyn Driver>,
    pub devices: Vec<DeviceState>,
    /// The allocator settings of the process's [`Config`], as `set_allocator_settings` changed
    /// them since.
    pub alloc_settings: std::sync::RwLock<AllocatorSettings>,
    /// Pinned host memory and its caching allocator, made on first use.
    pub(super) host: OnceLock<HostMemory>,
}

impl Runtime {
    /// The runtime over the driver that `config` asks for.
    fn new(config: &Config) -> Result<Runtime> {
        let driver = driver::build(config)?;
        if config.sanitizer {
            super::sanitizer::enable();
        }
        if config.nvtx {
            super::nvtx::enable_from_config();
        }
        let n = driver.device_count();
        let devices = (0..n)
            .map(|d| DeviceState {
                pool: Pool::default(),
                peer_enabled: Mutex::new(vec![false; n]),
                allocator: OnceLock::new(),
                default_stream: driver.default_stream(d).ok(),
                errors: DeviceErrors::default(),
            })
            .collect();
        // Errors still pending at exit are written to stderr, not lost.
        driver::exit::at_exit(report_at_exit);
        Ok(Runtime {
            driver,
            devices,
            alloc_settings: std::sync::RwLock::new(config.allocator.clone()),
            host: OnceLock::new(),
        })
    }

    /// Checks a device index against the device count.
    #[inline]
    pub fn check(&self, index: usize) -> Result<usize> {
        if index >= self.devices.len() {
            return Err(self.bad_index(index));
        }
        Ok(index)
    }

    /// Why `index` is not a device: there are none, or it is past the count.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_index(&self, index: usize) -> Error {
        if self.devices.is_empty() {
            return self.no_device();
        }
        Error::InvalidDevice { index, count: self.devices.len(), driver: self.driver.name() }
    }

    pub fn no_device(&self) -> Error {
        Error::NoDevice {
            driver: self.driver.name(),
            reason: self.driver.unavailable_reason().unwrap_or_else(|| "no devices".into()),
        }
    }

    /// The checked index that `device` names: an index, or the thread's current device for
    /// `None`, `"cuda"` and `Device::Cuda(None)` (resolved here, at the moment of use).
    #[inline]
    pub fn device(&self, device: impl IntoCudaDevice) -> Result<usize> {
        self.resolve(device.cuda_device()?)
    }

    /// Resolves `None` to the thread's current device and checks the index.
    #[inline]
    pub fn resolve(&self, device: Option<usize>) -> Result<usize> {
        match device {
            Some(i) => self.check(i),
            None => {
                let i = context::current_index();
                self.check(i)
            }
        }
    }
}

/// Resolves `None` to the thread's current device and checks the index (for the tensor layer).
#[inline]
pub(crate) fn resolve_device(device: Option<usize>) -> Result<usize> {
    rt()?.resolve(device)
}

/// The process's configuration, resolved once: `init`'s, else the environment's (taken as the
/// runtime starts). The one place a setting is held; the driver and the allocators receive
/// theirs from it at construction.
static CONFIG: OnceLock<Resolved> = OnceLock::new();

/// The process's [`Config`] and where it came from.
struct Resolved {
    config: Result<Config>,
    /// Given by [`init`] (else read from the environment as the runtime started).
    by_init: bool,
}

/// The process's configuration: the one [`init`] gave, else [`Config::from_env`] (read now, once).
fn config() -> &'static Resolved {
    CONFIG.get_or_init(|| Resolved { config: Config::from_env(), by_init: false })
}

/// Configures cudasem in code (`torch`'s environment variables, set before first use): every
/// setting of `config` — the driver, the simulated machine, the allocator settings, the CUDA
/// driver's settings — replaces the environment's for this process (build it from
/// [`Config::from_env`] to change only a part).
///
/// Call it once, before any other cudasem call: afterwards (or a second time) it changes nothing
/// and returns [`Error::AlreadyInitialized`]. A simulated machine with more than 64 GPUs, no
/// memory, or a peer pair naming a missing device is [`Error::InvalidConfig`] (and does not
/// count as a call). Without `init`, the environment decides ([`Config::from_env`]), read once
/// when the runtime starts.
pub fn init(config: Config) -> Result<()> {
    config.validate()?;
    let mut taken = false;
    let held = CONFIG.get_or_init(|| {
        taken = true;
        Resolved { config: Ok(config), by_init: true }
    });
    match (taken, held.by_init) {
        (true, _) => Ok(()),
        (false, true) => Err(Error::AlreadyInitialized { reason: "cudasem::init was already called" }),
        (false, false) => {
            Err(Error::AlreadyInitialized { reason: "the runtime already started (another cudasem call came first)" })
        }
    }
}

/// The process's configuration as the runtime holds it (resolving it from the environment when
/// `init` did not come first, after which `init` is refused).
pub(crate) fn resolved_config() -> Result<Config> {
    config().config.clone()
}

static RUNTIME: OnceLock<Result<Runtime>> = OnceLock::new();

/// The process-wide runtime, built on first use over the driver the process's [`Config`] asks
/// for. An invalid setting (say `CUDASEM_ALLOC_CONF`) is refused at once, by every call, not at
/// the first allocation.
pub(crate) fn rt() -> Result<&'static Runtime> {
    RUNTIME.get_or_init(|| Runtime::new(config().config.as_ref().map_err(Clone::clone)?)).as_ref().map_err(Clone::clone)
}

/// The process's driver (for the crate's own tests and benches).
#[cfg(feature = "unstable-internals")]
pub(crate) fn driver() -> Result<&'static Arc<dyn Driver>> {
    rt().map(|rt| &rt.driver)
}

/// Sets the CUDA driver's launch tuning ([`LaunchTuning`]): the runtime's driver takes it now,
/// and keeps it for the process (the simulated machine has no launch shapes). Starts the
/// runtime; give it in [`Config::cuda`] to set it from the start.
pub(crate) fn set_launch_tuning(tuning: LaunchTuning) -> Result<()> {
    rt()?.driver.set_launch_tuning(tuning);
    Ok(())
}

/// Writes the errors still pending on every device to stderr (run at process exit).
extern "C" fn report_at_exit() {
    let Some(Ok(rt)) = RUNTIME.get() else { return };
    for device in 0..rt.devices.len() {
        rt.devices[device].errors.drain(rt.driver.as_ref(), device);
        rt.devices[device].errors.report_pending(device);
    }
}
