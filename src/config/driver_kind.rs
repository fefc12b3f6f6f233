//! Which driver a process uses: [`DriverKind`], from `CUDASEM_DRIVER` or [`Config::driver`](super::Config::driver).

use super::env::Lookup;
use crate::error::{Error, Result};

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

/// The variable naming the driver.
pub(crate) const DRIVER_ENV: &str = "CUDASEM_DRIVER";

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
    pub(crate) fn from_lookup(lookup: Lookup) -> Result<DriverKind> {
        DriverKind::parse(&lookup(DRIVER_ENV)?.unwrap_or_default())
    }
}
