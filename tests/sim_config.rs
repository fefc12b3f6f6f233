//! `SimConfig::from_env`: the `CUDASEM_SIM_*` variables and their errors. Environment variables
//! are process-wide, so this file holds one test, in its own process, that never starts the runtime.

use cudasem::driver::sim::{PeerSpec, SimConfig};
use cudasem::Error;

const VARS: [&str; 3] = ["CUDASEM_SIM_DEVICES", "CUDASEM_SIM_MEMORY", "CUDASEM_SIM_PEER"];

fn with_env(devices: &str, memory: &str, peer: &str) -> cudasem::Result<SimConfig> {
    for (k, v) in VARS.iter().zip([devices, memory, peer]) {
        std::env::set_var(k, v);
    }
    SimConfig::from_env()
}

#[track_caller]
fn assert_bad(r: cudasem::Result<SimConfig>, var: &str) {
    match r {
        Err(Error::InvalidConfig { key, reason, .. }) => {
            assert_eq!(key, var);
            assert!(!reason.is_empty());
        }
        other => panic!("expected InvalidConfig for {var}, got {other:?}"),
    }
}

#[test]
fn sim_config_reads_the_environment_and_reports_bad_values() {
    assert_eq!(with_env("", "", ""), Ok(SimConfig::default()), "empty variables mean the defaults");
    assert_eq!(
        with_env("4", "512MiB", "0-1,2-3"),
        Ok(SimConfig { devices: 4, memory: 512 << 20, peer: PeerSpec::Pairs(vec![(0, 1), (2, 3)]) })
    );
    assert_eq!(with_env(" 3 ", "1GiB", "none"), Ok(SimConfig { devices: 3, memory: 1 << 30, peer: PeerSpec::None }));

    assert_bad(with_env("two", "", ""), "CUDASEM_SIM_DEVICES");
    assert_bad(with_env("-1", "", ""), "CUDASEM_SIM_DEVICES");
    assert_bad(with_env("65", "", ""), "CUDASEM_SIM_DEVICES");
    assert_bad(with_env("2", "lots", ""), "CUDASEM_SIM_MEMORY");
    assert_bad(with_env("2", "0", ""), "CUDASEM_SIM_MEMORY");
    assert_bad(with_env("2", "", "0_1"), "CUDASEM_SIM_PEER");
    assert_bad(with_env("2", "", "0-2"), "CUDASEM_SIM_PEER"); // device 2 does not exist
    assert_bad(with_env("", "", "1-5"), "CUDASEM_SIM_PEER"); // the default machine has 2
    let msg = with_env("2", "", "0-2").unwrap_err().to_string();
    assert!(msg.contains("CUDASEM_SIM_PEER"), "{msg}");
    for k in VARS {
        std::env::remove_var(k);
    }
    assert_eq!(SimConfig::from_env(), Ok(SimConfig::default()));
}
