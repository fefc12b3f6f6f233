//! Which driver a process uses: [`build`] makes the one a [`Config`] asks for. The driver keeps
//! no settings of its own: what it needs (the simulated machine, the CUDA driver's
//! [`CudaSettings`](crate::config::CudaSettings)) comes from the `Config` as arguments; the
//! runtime holds the process's one `Config` and the driver built from it.

use super::api::Driver;
use super::{cuda, sim};
use crate::config::{env_var, Config, DriverKind};
use crate::error::Result;
use std::sync::Arc;

/// Builds the driver that `config` asks for. The simulated machine (built only when it is used:
/// `Auto` on a machine with a GPU, or `Cuda`, never reads `config.sim`) honours
/// [`Config::visible_devices`] as CUDA honours `CUDA_VISIBLE_DEVICES` (see
/// [`sim::SimConfig::visible`]): `sim` describes the whole machine, the list selects from it.
pub fn build(config: &Config) -> Result<Arc<dyn Driver>> {
    let sim_driver = || -> Result<Arc<dyn Driver>> {
        sim::schedule::set(config.sim_schedule);
        let visible = config.visible_devices_with(&env_var)?;
        let sim = sim::SimDriver::with_visible_devices(config.sim.clone(), visible.as_deref());
        Ok(Arc::new(sim.with_jit_cache(config.cuda.kernel_cache.dir())))
    };
    match config.driver {
        DriverKind::Cuda => Ok(Arc::new(cuda::CudaDriver::new(&config.cuda))),
        DriverKind::Sim => sim_driver(),
        DriverKind::Auto => {
            let cuda = cuda::CudaDriver::new(&config.cuda);
            if cuda.device_count() > 0 {
                Ok(Arc::new(cuda))
            } else {
                sim_driver()
            }
        }
    }
}
