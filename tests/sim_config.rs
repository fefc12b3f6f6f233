//! The simulated machine's shape from the `CUDASEM_SIM_*` variables and their errors, read
//! through `Config::from_env_with` (an environment given as a function: no test here changes the
//! process's environment or starts the runtime); and a `Config` read through serde.

use cudasem::{Config, DriverKind, Error, PeerSpec, SimConfig};

const VARS: [&str; 3] = ["CUDASEM_SIM_DEVICES", "CUDASEM_SIM_MEMORY", "CUDASEM_SIM_PEER"];

fn with_env(devices: &str, memory: &str, peer: &str) -> cudasem::Result<SimConfig> {
    let values = [devices, memory, peer];
    Config::from_env_with(|k| VARS.iter().position(|v| *v == k).map(|i| values[i].to_string())).map(|c| c.sim)
}

#[track_caller]
fn assert_bad<T: std::fmt::Debug>(r: cudasem::Result<T>, var: &str) {
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
        Ok(SimConfig {
            devices: 4,
            memory: 512 << 20,
            peer: PeerSpec::Pairs(vec![(0, 1), (2, 3)]),
            ..SimConfig::default()
        })
    );
    assert_eq!(
        with_env(" 3 ", "1GiB", "none"),
        Ok(SimConfig { devices: 3, memory: 1 << 30, peer: PeerSpec::None, ..SimConfig::default() })
    );

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
    assert_eq!(Config::from_env_with(|_| None), Ok(Config::default()));
}

#[test]
fn the_driver_variable_parses_and_reports_bad_values() {
    let driver = |v: &'static str| Config::from_env_with(move |k| (k == "CUDASEM_DRIVER").then(|| v.into()));
    assert_eq!(driver("sim").map(|c| c.driver), Ok(DriverKind::Sim));
    assert_eq!(driver(" CUDA ").map(|c| c.driver), Ok(DriverKind::Cuda));
    assert_eq!(driver("").map(|c| c.driver), Ok(DriverKind::Auto));
    assert_bad(driver("gpu"), "CUDASEM_DRIVER");
}

#[test]
fn a_config_reads_from_serde_with_every_field_optional() {
    let c: Config = serde_json::from_str(
        r#"{"driver": "sim", "sim": {"devices": 4, "memory": "1GiB", "peer": "0-1,2-3"},
            "allocator": "max_split_size_mb:128"}"#,
    )
    .unwrap();
    let expected = Config::default()
        .with_driver(DriverKind::Sim)
        .with_sim(4, 1 << 30, PeerSpec::Pairs(vec![(0, 1), (2, 3)]))
        .with_alloc_conf("max_split_size_mb:128")
        .unwrap();
    assert_eq!(c, expected);
    let c: Config = serde_json::from_str(r#"{"sim": {"memory": 4096}}"#).unwrap();
    assert_eq!((c.driver, c.sim.devices, c.sim.memory), (DriverKind::Auto, 2, 4096));
    assert_eq!(serde_json::from_str::<Config>("{}").unwrap(), Config::default());
    for (bad, names) in [
        (r#"{"driver": "gpu"}"#, "gpu"),
        (r#"{"sim": {"peer": "0_1"}}"#, "CUDASEM_SIM_PEER"),
        (r#"{"sim": {"memory": "lots"}}"#, "16GiB"),
        (r#"{"allocator": "max_split_size_mb:abc"}"#, "max_split_size_mb"),
        (r#"{"devices": 4}"#, "devices"),
    ] {
        let e = serde_json::from_str::<Config>(bad).unwrap_err().to_string();
        assert!(e.contains(names), "{bad}: {e}");
    }
}
