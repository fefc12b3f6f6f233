//! The process's configuration: one [`Config`] value holding every process-wide setting, below
//! the driver and the runtime (it imports only the vocabulary), so that every layer receives what
//! it needs from it as arguments and none keeps a setting of its own in a global.
//!
//! Resolution, once per process: [`init`](crate::init) gives a `Config` in code, before the first
//! other cudasem call; without it, the runtime takes [`Config::from_env`] as it starts. Code
//! wins: a `Config` given to `init` replaces the environment's for every setting it holds
//! (`Config::from_env()?.with_…` changes a part and keeps the rest). The variables:
//! `CUDASEM_DRIVER`, `CUDASEM_SIM_DEVICES`, `CUDASEM_SIM_MEMORY`, `CUDASEM_SIM_PEER`,
//! `CUDASEM_ALLOC_CONF` (PyTorch's `PYTORCH_CUDA_ALLOC_CONF` when `CUDASEM_ALLOC_CONF` is unset),
//! `CUDASEM_KERNEL_CACHE`, `CUDASEM_NCCL_LIB`, `CUDASEM_BENCH_TUNING`, `CUDASEM_SANITIZER`, `CUDASEM_NVTX`,
//! `CUDASEM_SDPA_KERNEL` and `CUDA_VISIBLE_DEVICES`.
//!
//! Every setting is checked when the runtime starts (the first cudasem call that needs a device):
//! an invalid value fails that call and every later one with
//! [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming it, so `cudasem info` reports it
//! at once. `CUDA_VISIBLE_DEVICES` applies to the simulated machine as to real GPUs: `sim`
//! describes the whole machine and the variable selects from it ([`SimConfig::visible`] gives
//! CUDA's rules).
//!
//! Files: [`Config`] (here), the driver's kind (`driver_kind.rs`), the simulated machine
//! (`sim.rs`), the caching allocator's settings and size rules (`allocator.rs`), the CUDA
//! driver's settings (`cuda.rs`) and the environment reader (`env.rs`). Settings still to come
//! (the random generator's seed) join `Config` as fields the same
//! way: a type here, a variable read in [`Config::from_env`], handed down at construction.

pub(crate) mod allocator;
mod cuda;
mod driver_kind;
mod env;
pub(crate) mod sim;

pub use allocator::AllocatorSettings;
pub use cuda::{
    AttentionKernel, AttentionOrder, CardOverrides, CudaSettings, KernelCache, LaunchTuning, MAX_SWIZZLE_HEADS,
};
pub use driver_kind::DriverKind;
pub(crate) use env::{env_var, Lookup};
pub use sim::{parse_bytes, PeerSpec, SimConfig, SimGpu};

use crate::error::Result;

/// The variable selecting the visible devices (CUDA's, honoured by the simulated machine too).
pub(crate) const VISIBLE_DEVICES_ENV: &str = "CUDA_VISIBLE_DEVICES";

/// How the process uses cudasem: which driver, the simulated machine's shape, the caching
/// allocator's settings and the CUDA driver's. Give it to [`init`](crate::init) before the
/// first other cudasem call.
///
/// `Config::default()` is the environment's defaults with no variable set: the `auto` driver, two
/// simulated GPUs of 16 GiB with peer access between them, PyTorch's allocator defaults, the
/// kernel cache in the user's cache directory.
///
/// ```
/// use cudasem::{Config, DriverKind, PeerSpec, SimConfig};
/// # fn main() -> cudasem::Result<()> {
/// cudasem::init(Config {
///     driver: DriverKind::Sim,
///     sim: SimConfig { devices: 4, memory: 1 << 30, peer: PeerSpec::Pairs(vec![(0, 1), (2, 3)]), ..SimConfig::default() },
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
/// "allocator": "max_split_size_mb:128", "cuda": {"kernel_cache": "off"}}`.
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
    /// Which of the simulated machine's devices are visible, in `CUDA_VISIBLE_DEVICES`' syntax
    /// and rules ([`SimConfig::visible`]); `None` (the default) takes `CUDA_VISIBLE_DEVICES`
    /// from the environment as the runtime starts, as CUDA does. Real GPUs always follow the
    /// environment's variable (CUDA reads it itself).
    pub visible_devices: Option<String>,
    /// The caching allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`'s keys; see
    /// [`Config::with_alloc_conf`] for the string form). `CUDASEM_ALLOC_CONF` in the environment,
    /// else `PYTORCH_CUDA_ALLOC_CONF` (`CUDASEM_ALLOC_CONF` wins when both are set, even empty).
    pub allocator: AllocatorSettings,
    /// The CUDA driver's settings: the kernel cache (`CUDASEM_KERNEL_CACHE`), the NCCL library
    /// (`CUDASEM_NCCL_LIB`) and the launch tuning of benchmark runs.
    pub cuda: CudaSettings,
    /// Whether the stream sanitizer starts on (`cuda::sanitizer`; PyTorch's
    /// `TORCH_CUDA_SANITIZER`). `CUDASEM_SANITIZER` in the environment (`1`/`true`/`on`; unset,
    /// empty, `0`, `false` or `off`: off).
    pub sanitizer: bool,
    /// Whether every operation cudasem queues (kernel, fill, copy, collective, graph replay) is
    /// wrapped in an NVTX range named as PyTorch's `emit_nvtx` names it (`cuda::nvtx`).
    /// `CUDASEM_NVTX` in the environment (`1`/`true`/`on`; unset, empty, `0`, `false` or
    /// `off`: off).
    pub nvtx: bool,
    /// The simulated machine's schedule: `None` the default, `Some(seed)` an adversarial one
    /// (hostile but legal orders of its streams' work, reproducible per seed).
    /// `CUDASEM_SIM_SCHEDULE` in the environment: `default` or `adversarial:SEED`.
    pub sim_schedule: Option<u64>,
}

impl Config {
    /// The configuration the environment gives (the variables above; unset ones take their
    /// defaults). [`Error::InvalidConfig`](crate::Error::InvalidConfig) names a variable whose
    /// value does not parse.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(&env_var)
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

    fn from_lookup(lookup: Lookup) -> Result<Config> {
        Ok(Config {
            driver: DriverKind::from_lookup(lookup)?,
            sim: SimConfig::from_lookup(lookup)?,
            visible_devices: lookup(VISIBLE_DEVICES_ENV)?,
            allocator: AllocatorSettings::from_lookup(lookup)?,
            cuda: CudaSettings::from_lookup(lookup)?,
            sanitizer: switch_from_lookup(lookup, "CUDASEM_SANITIZER")?,
            nvtx: switch_from_lookup(lookup, "CUDASEM_NVTX")?,
            sim_schedule: schedule_from_lookup(lookup)?,
        })
    }

    /// The same with the stream sanitizer on or off from the start.
    pub fn with_sanitizer(mut self, on: bool) -> Config {
        self.sanitizer = on;
        self
    }

    /// The same with operation ranges for NVTX on or off from the start.
    pub fn with_nvtx(mut self, on: bool) -> Config {
        self.nvtx = on;
        self
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

    /// The same with the simulated machine's visible devices set (`CUDA_VISIBLE_DEVICES`'
    /// syntax; `None`: the environment's).
    pub fn with_visible_devices(mut self, visible: Option<&str>) -> Config {
        self.visible_devices = visible.map(str::to_string);
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

    /// The same with the CUDA driver's kernel cache set.
    pub fn with_kernel_cache(mut self, cache: KernelCache) -> Config {
        self.cuda.kernel_cache = cache;
        self
    }

    /// The same with the NCCL library set (its path, or a directory holding `libnccl.so.2`).
    pub fn with_nccl_lib(mut self, path: impl Into<std::path::PathBuf>) -> Config {
        self.cuda.nccl_lib = Some(path.into());
        self
    }

    /// The same with the CUDA driver's launch tuning set (benchmark runs, not an API).
    #[doc(hidden)]
    pub fn with_launch_tuning(mut self, tuning: LaunchTuning) -> Config {
        self.cuda.launch_tuning = tuning;
        self
    }

    /// Checks what a `Config` built in code may get wrong (the environment's values are checked
    /// as they are read): a simulated machine of more than 64 GPUs, no memory, or a peer pair
    /// naming a missing device is [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    pub(crate) fn validate(&self) -> Result<()> {
        self.sim.validate(["Config::sim.devices", "Config::sim.memory", "Config::sim.peer"])
    }

    /// The list of visible devices the simulated machine applies: [`Config::visible_devices`],
    /// else the environment's `CUDA_VISIBLE_DEVICES` (read in `lookup`); `None`: all visible.
    pub(crate) fn visible_devices_with(&self, lookup: Lookup) -> Result<Option<String>> {
        match &self.visible_devices {
            Some(v) => Ok(Some(v.clone())),
            None => lookup(VISIBLE_DEVICES_ENV),
        }
    }
}

/// `CUDASEM_SIM_SCHEDULE`: `default` (or unset / empty) or `adversarial:SEED`.
fn schedule_from_lookup(lookup: Lookup) -> Result<Option<u64>> {
    const KEY: &str = "CUDASEM_SIM_SCHEDULE";
    let Some(v) = lookup(KEY)? else { return Ok(None) };
    match v.trim() {
        "" | "default" => Ok(None),
        s => s.strip_prefix("adversarial:").and_then(|n| n.trim().parse().ok()).map(Some).ok_or_else(|| {
            crate::error::Error::InvalidConfig {
                key: KEY.into(),
                value: v.clone(),
                reason: "expected `default` or `adversarial:SEED` with SEED a number such as `adversarial:7`".into(),
            }
        }),
    }
}

/// A switch (`CUDASEM_SANITIZER`, `CUDASEM_NVTX`): on or off.
fn switch_from_lookup(lookup: Lookup, key: &str) -> Result<bool> {
    match lookup(key)?.as_deref().map(str::trim) {
        None | Some("" | "0" | "false" | "off") => Ok(false),
        Some("1" | "true" | "on") => Ok(true),
        Some(other) => Err(crate::error::Error::InvalidConfig {
            key: key.into(),
            value: other.into(),
            reason: "expected 1/true/on or 0/false/off".into(),
        }),
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

    fn from(env: &[(&str, &str)]) -> Result<Config> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_env_with(|k| env.get(k).cloned())
    }

    #[test]
    fn the_sanitizer_and_the_sim_schedule_read_from_the_environment() {
        assert!(!from(&[]).unwrap().sanitizer);
        for (v, on) in [("1", true), ("true", true), ("on", true), ("0", false), ("off", false), ("", false)] {
            assert_eq!(from(&[("CUDASEM_SANITIZER", v)]).unwrap().sanitizer, on, "{v}");
        }
        let e = from(&[("CUDASEM_SANITIZER", "yes please")]).unwrap_err();
        assert!(matches!(&e, crate::Error::InvalidConfig { key, .. } if key == "CUDASEM_SANITIZER"), "{e}");
        assert!(!from(&[]).unwrap().nvtx);
        for (v, on) in [("1", true), ("on", true), ("off", false), ("0", false)] {
            assert_eq!(from(&[("CUDASEM_NVTX", v)]).unwrap().nvtx, on, "{v}");
        }
        let e = from(&[("CUDASEM_NVTX", "ranges")]).unwrap_err();
        assert!(matches!(&e, crate::Error::InvalidConfig { key, .. } if key == "CUDASEM_NVTX"), "{e}");
        assert_eq!(from(&[]).unwrap().sim_schedule, None);
        for (v, want) in [("default", None), ("adversarial:7", Some(7)), (" adversarial:123 ", Some(123))] {
            assert_eq!(from(&[("CUDASEM_SIM_SCHEDULE", v)]).unwrap().sim_schedule, want, "{v}");
        }
        for bad in ["adversarial", "adversarial:x", "hostile:3"] {
            let e = from(&[("CUDASEM_SIM_SCHEDULE", bad)]).unwrap_err();
            assert!(matches!(&e, crate::Error::InvalidConfig { key, .. } if key == "CUDASEM_SIM_SCHEDULE"), "{e}");
        }
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
