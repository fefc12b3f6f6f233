//! Configuration in code: [`init`] with a [`Config`], before the first other cudasem call.
//!
//! Without `init`, the environment decides, read once at first use: `CUDASEM_DRIVER`,
//! `CUDASEM_SIM_DEVICES`, `CUDASEM_SIM_MEMORY`, `CUDASEM_SIM_PEER` and `CUDASEM_ALLOC_CONF`
//! (PyTorch's `PYTORCH_CUDA_ALLOC_CONF` when `CUDASEM_ALLOC_CONF` is unset).
//! [`Config::from_env`] reads the same variables into a `Config`, to change a part of them in code.
//!
//! Every setting is checked when the runtime starts (the first cudasem call that needs a device):
//! an invalid value fails that call and every later one with
//! [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming it, so `cudasem info` reports it
//! at once. `CUDA_VISIBLE_DEVICES` applies to the simulated machine as to real GPUs: `sim`
//! describes the whole machine and the variable selects from it ([`SimConfig::visible`] gives
//! CUDA's rules).

use crate::alloc::AllocatorSettings;
use crate::driver::sim::{PeerSpec, SimConfig};
use crate::driver::{self, DriverKind};
use crate::error::Result;
use std::sync::Mutex;

/// How the process uses cudasem: which driver, the simulated machine's shape and the caching
/// allocator's settings. Give it to [`init`] before the first other cudasem call.
///
/// `Config::default()` is the environment's defaults with no variable set: the `auto` driver, two
/// simulated GPUs of 16 GiB with peer access between them, PyTorch's allocator defaults.
///
/// ```
/// use cudasem::{Config, DriverKind, PeerSpec, SimConfig};
/// # fn main() -> cudasem::Result<()> {
/// cudasem::init(Config {
///     driver: DriverKind::Sim,
///     sim: SimConfig { devices: 4, memory: 1 << 30, peer: PeerSpec::Pairs(vec![(0, 1), (2, 3)]) },
///     ..Config::default()
/// }
/// .with_alloc_conf("expandable_segments:True")?)?;
/// assert_eq!(cudasem::cuda::device_count(), 4);
/// assert!(cudasem::cuda::allocator_settings()?.expandable_segments());
/// assert!(cudasem::init(Config::default()).is_err()); // once, and only before first use
/// # Ok(()) }
/// ```
///
/// With serde, a `Config` reads from JSON (or any format) with every field optional:
/// `{"driver": "sim", "sim": {"devices": 4, "memory": "1GiB", "peer": "0-1,2-3"},
/// "allocator": "max_split_size_mb:128"}`.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Which driver: real GPUs ([`DriverKind::Cuda`]), the simulated machine
    /// ([`DriverKind::Sim`]), or CUDA when a GPU is found, else the simulated machine
    /// ([`DriverKind::Auto`], the default). `CUDASEM_DRIVER` in the environment.
    pub driver: DriverKind,
    /// The simulated machine: number of GPUs, memory of each, which pairs have peer access. Used
    /// only when the simulated machine is the driver. `CUDASEM_SIM_*` in the environment.
    pub sim: SimConfig,
    /// The caching allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`'s keys; see
    /// [`Config::with_alloc_conf`] for the string form). `CUDASEM_ALLOC_CONF` in the environment,
    /// else `PYTORCH_CUDA_ALLOC_CONF` (`CUDASEM_ALLOC_CONF` wins when both are set, even empty).
    pub allocator: AllocatorSettings,
}

impl Config {
    /// The configuration the environment gives (the variables above; unset ones take their
    /// defaults). [`Error::InvalidConfig`](crate::Error::InvalidConfig) names a variable whose
    /// value does not parse.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(&driver::env_var)
    }

    /// As [`Config::from_env`], with `lookup` as the environment: it returns a variable's value,
    /// or `None` when it is unset.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// let env = HashMap::from([("CUDASEM_DRIVER", "sim"), ("CUDASEM_SIM_DEVICES", "3")]);
    /// let cfg = cudasem::Config::from_env_with(|k| env.get(k).map(|v| v.to_string())).unwrap();
    /// assert_eq!((cfg.driver, cfg.sim.devices), (cudasem::DriverKind::Sim, 3));
    /// ```
    pub fn from_env_with(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        Config::from_lookup(&|k| Ok(lookup(k)))
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Result<Option<String>>) -> Result<Config> {
        Ok(Config {
            driver: DriverKind::from_lookup(lookup)?,
            sim: SimConfig::from_lookup(lookup)?,
            allocator: AllocatorSettings::from_lookup(lookup)?,
        })
    }

    /// The same with the driver set.
    pub fn with_driver(mut self, driver: DriverKind) -> Config {
        self.driver = driver;
        self
    }

    /// The same with the simulated machine set: `devices` GPUs of `memory` bytes each, `peer`
    /// the pairs with peer access.
    pub fn with_sim(mut self, devices: usize, memory: usize, peer: PeerSpec) -> Config {
        (self.sim.devices, self.sim.memory, self.sim.peer) = (devices, memory, peer);
        self
    }

    /// The same with the allocator settings set.
    pub fn with_allocator(mut self, allocator: AllocatorSettings) -> Config {
        self.allocator = allocator;
        self
    }

    /// The same with the allocator settings parsed from `PYTORCH_CUDA_ALLOC_CONF`'s syntax
    /// (`"max_split_size_mb:128,expandable_segments:True"`); [`AllocatorSettings::parse`]'s errors.
    pub fn with_alloc_conf(self, conf: &str) -> Result<Config> {
        Ok(self.with_allocator(AllocatorSettings::parse(conf)?))
    }
}

/// The allocator settings `init` gave, until the runtime takes them.
static ALLOCATOR: Mutex<Option<AllocatorSettings>> = Mutex::new(None);

/// Configures cudasem in code (`torch`'s environment variables, set before first use): the
/// driver, the simulated machine and the allocator settings of `config` replace the
/// environment's for this process.
///
/// Call it once, before any other cudasem call: afterwards (or a second time) it changes nothing
/// and returns [`Error::AlreadyInitialized`](crate::Error::AlreadyInitialized). A simulated
/// machine with more than 64 GPUs, no memory, or a peer pair naming a missing device is
/// [`Error::InvalidConfig`](crate::Error::InvalidConfig). Without `init`, the environment
/// decides ([`Config::from_env`]).
pub fn init(config: Config) -> Result<()> {
    config.sim.validate(["Config::sim.devices", "Config::sim.memory", "Config::sim.peer"])?;
    // Held across both steps: the runtime takes the allocator settings after the driver, so it
    // sees either none of this call or all of it.
    let mut allocator = ALLOCATOR.lock().unwrap_or_else(|e| e.into_inner());
    driver::configure(config.driver, config.sim)?;
    *allocator = Some(config.allocator);
    Ok(())
}

/// The allocator settings for the runtime being built: `init`'s, else `CUDASEM_ALLOC_CONF`'s
/// (or `PYTORCH_CUDA_ALLOC_CONF`'s); an invalid value stops the runtime from starting.
pub(crate) fn allocator_settings() -> Result<AllocatorSettings> {
    match ALLOCATOR.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(settings) => Ok(settings),
        None => AllocatorSettings::from_env(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn conf(env: &[(&str, &str)]) -> Result<AllocatorSettings> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_env_with(|k| env.get(k).cloned()).map(|c| c.allocator)
    }

    #[test]
    fn pytorch_alloc_conf_is_the_fallback_and_cudasem_wins() {
        for mb in [21usize, 128, 512, 4096] {
            let value = format!("max_split_size_mb:{mb},expandable_segments:True");
            let want = AllocatorSettings::parse(&value).unwrap();
            assert_eq!(conf(&[("PYTORCH_CUDA_ALLOC_CONF", &value)]).unwrap(), want, "{value}");
            assert_eq!(conf(&[("CUDASEM_ALLOC_CONF", &value)]).unwrap(), want, "{value}");
            // Both set: CUDASEM_ALLOC_CONF wins, even when it is empty (the defaults).
            let both = [("CUDASEM_ALLOC_CONF", ""), ("PYTORCH_CUDA_ALLOC_CONF", value.as_str())];
            assert_eq!(conf(&both).unwrap(), AllocatorSettings::default(), "{value}");
            let both = [("CUDASEM_ALLOC_CONF", value.as_str()), ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:abc")];
            assert_eq!(conf(&both).unwrap(), want, "{value}");
        }
        let e = conf(&[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:abc")]).unwrap_err();
        assert!(matches!(e, crate::Error::InvalidConfig { ref key, .. } if key == "max_split_size_mb"), "{e}");
        assert_eq!(conf(&[]).unwrap(), AllocatorSettings::default());
    }
}
