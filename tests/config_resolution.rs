//! One configuration value, resolved once per process: for every setting (the simulated machine,
//! the allocator, the kernel cache, the NCCL library, the launch tuning) a value given in code
//! through `cudasem::init` wins over the environment's variable, the environment's is the default
//! without `init`, and changing the environment afterwards changes nothing. The environment is
//! read once per process, so each test runs itself again as a child process with the variables
//! set (no test changes the environment of the process that spawned it).

mod common;

use common::TestRng;
use cudasem::cuda;
use cudasem::{Config, DriverKind, Error, KernelCache, LaunchTuning, PeerSpec, Result};
use std::path::PathBuf;

/// Set in the child process, which runs the checks.
const CHILD: &str = "CUDASEM_TEST_CONFIG_RESOLUTION_CHILD";

/// Random values for every setting: one set for the environment, one for the code.
#[derive(Debug, Clone)]
struct Values {
    devices: usize,
    memory_mib: usize,
    split_mb: usize,
    cache: String,
    nccl: String,
    tuning: [u32; 3],
}

impl Values {
    fn random(rng: &mut TestRng, tag: &str) -> Values {
        let mut pick = |n: u64| (rng.next_u64() % n) as usize;
        Values {
            devices: 1 + pick(8),
            memory_mib: 64 + pick(512),
            split_mb: 21 + pick(1000),
            cache: format!("/tmp/cudasem-{tag}-cache-{}", pick(1 << 20)),
            nccl: format!("/opt/{tag}-{}/libnccl.so.2", pick(1 << 20)),
            tuning: [pick(512) as u32, pick(8) as u32, 1 + pick(16) as u32],
        }
    }

    /// The environment variables that give these values.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CUDASEM_DRIVER", "sim".into()),
            ("CUDASEM_SIM_DEVICES", self.devices.to_string()),
            ("CUDASEM_SIM_MEMORY", format!("{}MiB", self.memory_mib)),
            ("CUDASEM_SIM_PEER", "none".into()),
            ("CUDA_VISIBLE_DEVICES", self.visible()),
            ("CUDASEM_ALLOC_CONF", format!("max_split_size_mb:{}", self.split_mb)),
            ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:abc".into()),
            ("CUDASEM_KERNEL_CACHE", self.cache.clone()),
            ("CUDASEM_NCCL_LIB", self.nccl.clone()),
            ("CUDASEM_BENCH_TUNING", format!("{},{},{}", self.tuning[0], self.tuning[1], self.tuning[2])),
        ]
    }

    /// Every device visible, as a `CUDA_VISIBLE_DEVICES` list.
    fn visible(&self) -> String {
        (0..self.devices).map(|d| d.to_string()).collect::<Vec<_>>().join(",")
    }

    /// The same values given in code (over the environment's `Config`, so nothing is left to it).
    fn config(&self, base: Config) -> Config {
        let [elementwise_waves, vectors_per_thread, reduce_waves] = self.tuning;
        base.with_driver(DriverKind::Sim)
            .with_sim(self.devices, self.memory_mib << 20, PeerSpec::None)
            .with_visible_devices(Some(&self.visible()))
            .with_alloc_conf(&format!("max_split_size_mb:{}", self.split_mb))
            .unwrap()
            .with_kernel_cache(KernelCache::Dir(self.cache.clone().into()))
            .with_nccl_lib(&self.nccl)
            .with_launch_tuning(LaunchTuning {
                elementwise_waves,
                vectors_per_thread,
                reduce_waves,
                ..Default::default()
            })
    }

    /// The runtime holds exactly these values, and its machine and allocator are theirs.
    #[track_caller]
    fn assert_in_force(&self) -> Result<()> {
        let c = cudasem::testing::config()?;
        assert_eq!((c.sim.devices, c.sim.memory), (self.devices, self.memory_mib << 20));
        assert_eq!(c.cuda.kernel_cache, KernelCache::Dir(self.cache.clone().into()));
        assert_eq!(c.cuda.kernel_cache.dir(), Some(PathBuf::from(&self.cache)));
        assert_eq!(c.cuda.nccl_lib, Some(PathBuf::from(&self.nccl)));
        let t = c.cuda.launch_tuning;
        assert_eq!([t.elementwise_waves, t.vectors_per_thread, t.reduce_waves], self.tuning);
        assert_eq!(cuda::device_count(), self.devices);
        assert_eq!(cuda::mem_get_info(Some(self.devices - 1))?.1, self.memory_mib << 20);
        assert_eq!(cuda::allocator_settings()?.max_split_size(), Some(self.split_mb << 20));
        Ok(())
    }
}

/// The values of the environment and of the code, the same in the parent and the child.
fn values() -> (Values, Values) {
    let seed = std::env::var("CUDASEM_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_c0f1);
    let mut rng = TestRng::new(seed);
    let env = Values::random(&mut rng, "env");
    let mut code = Values::random(&mut rng, "code");
    // Distinct from the environment's in every setting, so that each one shows which won.
    code.devices = 1 + env.devices % 8;
    code.memory_mib = env.memory_mib + 1 + code.memory_mib % 64;
    code.split_mb = env.split_mb + 1;
    code.tuning[2] = env.tuning[2] + 1;
    (env, code)
}

/// Runs the test `name` again in a child process with `values`' environment; `true` in the child.
fn in_child(name: &str, values: &Values) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test executable"))
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(values.env())
        .output()
        .expect("the test executable runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child process failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
    false
}

/// The environment the child was given no longer holds: the variables now say something else.
fn change_the_environment() {
    for (k, v) in [
        ("CUDASEM_SIM_DEVICES", "1"),
        ("CUDASEM_ALLOC_CONF", "max_split_size_mb:4000"),
        ("CUDASEM_KERNEL_CACHE", "off"),
        ("CUDASEM_NCCL_LIB", "/nowhere"),
        ("CUDASEM_BENCH_TUNING", "9,9,9"),
    ] {
        std::env::set_var(k, v);
    }
}

#[test]
fn every_setting_given_in_code_wins_over_its_variable() -> Result<()> {
    let (env, code) = values();
    if !in_child("every_setting_given_in_code_wins_over_its_variable", &env) {
        return Ok(());
    }
    // The environment's configuration is the environment's values...
    let from_env = Config::from_env()?;
    assert_eq!(from_env.sim.devices, env.devices);
    assert_eq!(from_env.cuda.nccl_lib, Some(PathBuf::from(&env.nccl)));
    // ... and `init` with the code's values replaces every one of them.
    cudasem::init(code.config(from_env))?;
    code.assert_in_force()?;
    change_the_environment();
    code.assert_in_force()?;
    match cudasem::init(env.config(Config::default())) {
        Err(e @ Error::AlreadyInitialized { .. }) => assert!(e.to_string().contains("already called"), "{e}"),
        other => panic!("a second init: expected AlreadyInitialized, got {other:?}"),
    }
    code.assert_in_force()
}

#[test]
fn without_init_the_environment_is_read_once() -> Result<()> {
    let (env, code) = values();
    if !in_child("without_init_the_environment_is_read_once", &env) {
        return Ok(());
    }
    env.assert_in_force()?; // starts the runtime from the environment
    change_the_environment();
    env.assert_in_force()?;
    assert_eq!(Config::from_env()?.sim.devices, 1, "Config::from_env reads the environment as it is now");
    match cudasem::init(code.config(Config::default())) {
        Err(e @ Error::AlreadyInitialized { .. }) => assert!(e.to_string().contains("already started"), "{e}"),
        other => panic!("init after the runtime started: expected AlreadyInitialized, got {other:?}"),
    }
    env.assert_in_force()
}

#[test]
fn every_setting_reads_from_its_variable() {
    let mut rng = TestRng::new(0x000c_0f19);
    for _ in 0..20 {
        let v = Values::random(&mut rng, "env");
        let vars = v.env();
        let c = Config::from_env_with(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
        let [elementwise_waves, vectors_per_thread, reduce_waves] = v.tuning;
        assert_eq!(c, v.config(Config::default()), "{v:?}");
        let want = LaunchTuning { elementwise_waves, vectors_per_thread, reduce_waves, ..Default::default() };
        assert_eq!(c.cuda.launch_tuning, want);
    }
    let tuning = |v: &str| Config::from_env_with(|k| (k == "CUDASEM_BENCH_TUNING").then(|| v.to_string()));
    assert_eq!(tuning("").unwrap().cuda.launch_tuning, LaunchTuning::default());
    match tuning("1,2") {
        Err(Error::InvalidConfig { key, .. }) => assert_eq!(key, "CUDASEM_BENCH_TUNING"),
        other => panic!("expected InvalidConfig for CUDASEM_BENCH_TUNING, got {other:?}"),
    }
    let cache = |v: &str| Config::from_env_with(|k| (k == "CUDASEM_KERNEL_CACHE").then(|| v.to_string()));
    assert_eq!(cache("off").unwrap().cuda.kernel_cache, KernelCache::Off);
    assert_eq!(Config::from_env_with(|_| None).unwrap().cuda.kernel_cache, KernelCache::UserCache);
    // The same settings through serde, in the variables' syntax.
    let c: Config = serde_json::from_str(
        r#"{"cuda": {"kernel_cache": "/k", "nccl_lib": "/n/libnccl.so.2", "launch_tuning": "8,2,3"},
            "visible_devices": "1,0"}"#,
    )
    .unwrap();
    let tuning = LaunchTuning { elementwise_waves: 8, vectors_per_thread: 2, reduce_waves: 3, ..Default::default() };
    let expected = Config::default()
        .with_kernel_cache(KernelCache::Dir("/k".into()))
        .with_nccl_lib("/n/libnccl.so.2")
        .with_launch_tuning(tuning)
        .with_visible_devices(Some("1,0"));
    assert_eq!(c, expected);
    let off: Config = serde_json::from_str(r#"{"cuda": {"kernel_cache": "off"}}"#).unwrap();
    assert_eq!(off.cuda.kernel_cache, KernelCache::Off);
    for bad in [r#"{"cuda": {"launch_tuning": "1,2"}}"#, r#"{"cuda": {"nccl": "/n"}}"#] {
        assert!(serde_json::from_str::<Config>(bad).is_err(), "{bad}");
    }
}
