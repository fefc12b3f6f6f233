//! Which driver a process uses: [`DriverKind`] (from `CUDASEM_DRIVER` or the config), [`build`]
//! and the process-wide driver ([`configure`], [`global`]).

use super::api::Driver;
use super::{cuda, sim};
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex, OnceLock};

/// Which driver to use: `CUDASEM_DRIVER`'s values, or [`Config::driver`](crate::Config::driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// Real GPUs.
    Cuda,
    /// The simulated machine.
    Sim,
    /// CUDA when a driver and at least one GPU are found, else the simulated machine.
    #[default]
    Auto,
}

impl DriverKind {
    /// Parses `CUDASEM_DRIVER`'s value (`cuda`, `sim`, `auto`; empty means `auto`).
    pub fn parse(value: &str) -> Result<DriverKind> {
        match value.trim().to_ascii_lowercase().as_str() {
            "cuda" => Ok(DriverKind::Cuda),
            "sim" => Ok(DriverKind::Sim),
            "auto" | "" => Ok(DriverKind::Auto),
            _ => Err(Error::InvalidConfig {
                key: DRIVER_ENV.into(),
                value: value.into(),
                reason: "expected `cuda`, `sim` or `auto`".into(),
            }),
        }
    }

    /// `CUDASEM_DRIVER` (`auto` when unset or empty).
    pub(crate) fn from_lookup(lookup: &dyn Fn(&str) -> Result<Option<String>>) -> Result<DriverKind> {
        DriverKind::parse(&lookup(DRIVER_ENV)?.unwrap_or_default())
    }
}

/// The variable naming the driver.
pub(crate) const DRIVER_ENV: &str = "CUDASEM_DRIVER";

/// One environment variable: `Ok(None)` when unset, an error when it is not UTF-8.
pub(crate) fn env_var(key: &str) -> Result<Option<String>> {
    match std::env::var(key) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::InvalidConfig {
            key: key.into(),
            value: v.to_string_lossy().into_owned(),
            reason: "expected UTF-8 text".into(),
        }),
    }
}

/// Builds the driver of `kind`; `sim` shapes the simulated machine (asked for only when it is
/// used: `Auto` on a machine with a GPU, or `Cuda`, never calls it).
///
/// The simulated machine honours `CUDA_VISIBLE_DEVICES` as CUDA does (see
/// [`sim::SimConfig::visible`]): `sim` describes the whole machine, the variable selects from it.
pub fn build(kind: DriverKind, sim: impl FnOnce() -> Result<sim::SimConfig>) -> Result<Arc<dyn Driver>> {
    let sim_driver = |sim: sim::SimConfig| -> Result<Arc<dyn Driver>> {
        let visible = env_var(VISIBLE_DEVICES_ENV)?;
        Ok(Arc::new(sim::SimDriver::with_visible_devices(sim, visible.as_deref())))
    };
    match kind {
        DriverKind::Cuda => Ok(Arc::new(cuda::CudaDriver::new())),
        DriverKind::Sim => sim_driver(sim()?),
        DriverKind::Auto => {
            let cuda = cuda::CudaDriver::new();
            if cuda.device_count() > 0 {
                Ok(Arc::new(cuda))
            } else {
                sim_driver(sim()?)
            }
        }
    }
}

/// CUDA's variable selecting the visible devices, honoured by the simulated machine too.
pub(crate) const VISIBLE_DEVICES_ENV: &str = "CUDA_VISIBLE_DEVICES";

/// Builds the driver that the environment asks for.
pub fn from_env() -> Result<Arc<dyn Driver>> {
    build(DriverKind::from_lookup(&env_var)?, sim::SimConfig::from_env)
}

/// The driver `cudasem::init` asked for, until the first use takes it.
enum Slot {
    /// Nothing asked: the environment decides.
    Unset,
    /// `init` asked for this driver and machine.
    Given(DriverKind, sim::SimConfig),
    /// The driver was built (from the environment or from what `init` gave).
    Taken,
}

static SLOT: Mutex<Slot> = Mutex::new(Slot::Unset);
static GLOBAL: OnceLock<Result<Arc<dyn Driver>>> = OnceLock::new();

/// Sets the driver that the first use of [`global`] builds, instead of the environment's.
/// [`Error::AlreadyInitialized`] after an earlier call, or once the driver was built.
pub(crate) fn configure(kind: DriverKind, sim: sim::SimConfig) -> Result<()> {
    let mut slot = SLOT.lock().unwrap_or_else(|e| e.into_inner());
    match *slot {
        Slot::Unset => {
            *slot = Slot::Given(kind, sim);
            Ok(())
        }
        Slot::Given(..) => Err(Error::AlreadyInitialized { reason: "cudasem::init was already called" }),
        Slot::Taken => {
            Err(Error::AlreadyInitialized { reason: "the runtime already started (another cudasem call came first)" })
        }
    }
}

/// The process-wide driver: the one `cudasem::init` asked for, else the environment's; built
/// on first use.
pub fn global() -> Result<&'static Arc<dyn Driver>> {
    GLOBAL
        .get_or_init(|| {
            let given = std::mem::replace(&mut *SLOT.lock().unwrap_or_else(|e| e.into_inner()), Slot::Taken);
            match given {
                Slot::Given(kind, sim) => build(kind, || Ok(sim)),
                Slot::Unset | Slot::Taken => from_env(),
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}
