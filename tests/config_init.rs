//! `cudasem::init` shapes the process's machine in code: a simulated machine of four GPUs with
//! 256 MiB each and peer access only within the pairs 0-1 and 2-3, and allocator settings — the
//! runtime then reports exactly that, whatever the environment says; a second `init` is a typed
//! error. Each test file is one process, and this one calls `init` once, before anything else
//! (a `OnceLock`, whichever test runs first).

use cudasem::cuda::{self, AllocatorSettings};
use cudasem::{Config, DType, DriverKind, Error, PeerSpec, Result, Tensor};
use std::sync::OnceLock;

const MEMORY: usize = 256 << 20;

fn machine() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let settings = AllocatorSettings::default().with_max_split_size_mb(64).unwrap();
        let config = Config::default()
            .with_driver(DriverKind::Sim)
            .with_sim(4, MEMORY, PeerSpec::Pairs(vec![(0, 1), (2, 3)]))
            .with_allocator(settings);
        cudasem::init(config).expect("init before any other cudasem call");
    });
}

#[test]
fn the_runtime_has_the_machine_init_asked_for() -> Result<()> {
    machine();
    assert_eq!(cuda::driver_name(), "sim");
    assert_eq!(cuda::device_count(), 4);
    for d in 0..4 {
        let (free, total) = cuda::mem_get_info(Some(d))?;
        assert_eq!(total, MEMORY, "cuda:{d}");
        assert!(free <= total);
        assert_eq!(cuda::get_device_properties(Some(d))?.total_memory, MEMORY);
    }
    for a in 0..4 {
        for b in 0..4 {
            let expected = a != b && a / 2 == b / 2;
            assert_eq!(cuda::can_device_access_peer(a, b)?, expected, "{a} -> {b}");
        }
    }
    assert!(matches!(cuda::set_device(4), Err(Error::InvalidDevice { index: 4, count: 4, .. })));
    Ok(())
}

#[test]
fn the_allocator_uses_the_settings_init_gave() -> Result<()> {
    machine();
    let settings = cuda::allocator_settings()?;
    assert_eq!(settings.max_split_size(), Some(64 << 20));
    // The machine's memory is real: more than 256 MiB on one GPU is out of memory.
    match Tensor::empty([300 << 18], DType::F32, "cuda:3") {
        Err(Error::OutOfMemory { device, .. }) => assert_eq!(device, 3),
        other => panic!("expected OutOfMemory on cuda:3, got {other:?}"),
    }
    let data: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() + 2.0).collect();
    let t = Tensor::from_slice(&data, [1000], "cuda:3")?;
    assert_eq!(t.to_vec::<f32>()?, data);
    assert_eq!(cuda::memory_stats(Some(3))?.get("max_split_size"), Some(64 << 20));
    Ok(())
}

#[test]
fn init_is_once() {
    machine();
    for again in
        [Config::default(), Config::default().with_driver(DriverKind::Sim).with_sim(1, 1 << 20, PeerSpec::None)]
    {
        match cudasem::init(again) {
            Err(e @ Error::AlreadyInitialized { .. }) => assert!(e.to_string().contains("cudasem::init"), "{e}"),
            other => panic!("a second init: expected AlreadyInitialized, got {other:?}"),
        }
    }
    assert_eq!(cuda::device_count(), 4, "a refused init changes nothing");
}
