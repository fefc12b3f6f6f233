//! `cudasem::init` after the runtime started is a typed error and changes nothing; an invalid
//! simulated machine is refused before anything is set. (A process of its own: it starts the
//! runtime from the environment first.)

use cudasem::{Config, DriverKind, Error, PeerSpec};

#[test]
fn init_after_the_first_call_is_a_typed_error() {
    // Invalid shapes are refused first, and do not count as an init.
    let bad = |c: Config| match cudasem::init(c) {
        Err(Error::InvalidConfig { key, .. }) => key,
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    let sim = Config::default().with_driver(DriverKind::Sim);
    assert_eq!(bad(sim.clone().with_sim(65, 1 << 30, PeerSpec::All)), "Config::sim.devices");
    assert_eq!(bad(sim.clone().with_sim(2, 0, PeerSpec::All)), "Config::sim.memory");
    assert_eq!(bad(sim.clone().with_sim(2, 1 << 30, PeerSpec::Pairs(vec![(0, 2)]))), "Config::sim.peer");

    let before = cudasem::cuda::device_count(); // starts the runtime from the environment
    match cudasem::init(sim.with_sim(before + 1, 1 << 20, PeerSpec::None)) {
        Err(e @ Error::AlreadyInitialized { .. }) => {
            assert!(e.to_string().contains("already started"), "{e}")
        }
        other => panic!("init after the runtime started: expected AlreadyInitialized, got {other:?}"),
    }
    assert_eq!(cudasem::cuda::device_count(), before, "a refused init changes nothing");
}
