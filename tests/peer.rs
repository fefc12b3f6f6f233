//! Peer access: can_device_access_peer / enable_peer_access / is_peer_access_enabled on the
//! process's machine, and the simulated driver's peer topologies (`PeerSpec`) driven directly.

mod common;

use common::assert_invalid_device;
use cudasem::cuda;
use cudasem::driver::sim::{PeerSpec, SimConfig, SimDriver};
use cudasem::driver::Driver;
use cudasem::{Error, Result};

#[test]
fn a_device_cannot_access_itself_as_a_peer() -> Result<()> {
    for i in 0..cuda::device_count() {
        assert!(!cuda::can_device_access_peer(i, i)?, "cuda:{i} -> cuda:{i} (CUDA and PyTorch say false)");
    }
    Ok(())
}

#[test]
fn peer_access_capability_is_symmetric() -> Result<()> {
    let n = cuda::device_count();
    for i in 0..n {
        for j in 0..n {
            assert_eq!(cuda::can_device_access_peer(i, j)?, cuda::can_device_access_peer(j, i)?, "{i} <-> {j}");
        }
    }
    Ok(())
}

#[test]
fn enable_peer_access_succeeds_exactly_when_the_pair_can() -> Result<()> {
    let n = cuda::device_count();
    for i in 0..n {
        for j in (0..n).filter(|&j| j != i) {
            let can = cuda::can_device_access_peer(i, j)? && cuda::can_device_access_peer(j, i)?;
            let r = cuda::enable_peer_access(i, j);
            if can {
                assert_eq!(r, Ok(()), "cuda:{i} <-> cuda:{j} can access each other");
                assert!(cuda::is_peer_access_enabled(i, j)?, "{i} -> {j} enabled");
                assert!(cuda::is_peer_access_enabled(j, i)?, "{j} -> {i} enabled (both directions)");
                assert_eq!(cuda::enable_peer_access(i, j), Ok(()), "enabling twice is fine");
                assert_eq!(cuda::enable_peer_access(j, i), Ok(()), "and the other way round");
            } else {
                assert!(matches!(r, Err(Error::PeerAccessUnsupported { .. })), "{i} <-> {j}: {r:?}");
            }
        }
    }
    Ok(())
}

#[test]
fn enabling_peer_access_to_the_same_device_is_a_no_op() -> Result<()> {
    for i in 0..cuda::device_count() {
        cuda::enable_peer_access(i, i)?;
        assert!(cuda::is_peer_access_enabled(i, i)?);
        assert!(!cuda::can_device_access_peer(i, i)?);
    }
    Ok(())
}

#[test]
fn peer_calls_with_invalid_devices_are_invalid_device() {
    assert_invalid_device(cuda::enable_peer_access(0, 99), 99);
    assert_invalid_device(cuda::enable_peer_access(99, 0), 99);
    assert_invalid_device(cuda::enable_peer_access(99, 99), 99);
    assert_invalid_device(cuda::is_peer_access_enabled(0, 99), 99);
    assert_invalid_device(cuda::can_device_access_peer(cuda::device_count(), 0), cuda::device_count());
}

// ---- The sim driver, driven directly (independent of CUDASEM_DRIVER and of the process runtime).

fn sim(devices: usize, peer: PeerSpec) -> SimDriver {
    SimDriver::new(SimConfig { devices, memory: 1 << 30, peer, ..SimConfig::default() })
}

#[test]
fn sim_driver_pairs_topology() -> Result<()> {
    let d = sim(4, PeerSpec::parse("0-1,2-3")?);
    assert_eq!(d.name(), "sim");
    assert_eq!(d.device_count(), 4);
    let expected = |a: usize, b: usize| matches!((a.min(b), a.max(b)), (0, 1) | (2, 3));
    for a in 0..4 {
        for b in 0..4 {
            assert_eq!(d.can_access_peer(a, b)?, expected(a, b), "{a} -> {b}");
        }
    }
    d.enable_peer_access(0, 1)?;
    d.enable_peer_access(1, 0)?;
    d.enable_peer_access(0, 1)?; // idempotent
    d.enable_peer_access(3, 2)?;
    d.enable_peer_access(2, 2)?; // same device: a no-op
    assert_eq!(d.enable_peer_access(0, 2), Err(Error::PeerAccessUnsupported { from: 0, to: 2 }));
    assert_eq!(d.enable_peer_access(3, 1), Err(Error::PeerAccessUnsupported { from: 3, to: 1 }));
    let msg = d.enable_peer_access(0, 2).unwrap_err().to_string();
    assert!(msg.contains("cuda:0") && msg.contains("cuda:2"), "{msg}");
    Ok(())
}

#[test]
fn sim_driver_peer_none_and_all() -> Result<()> {
    let none = sim(3, PeerSpec::None);
    let all = sim(3, PeerSpec::All);
    for a in 0..3 {
        for b in 0..3 {
            assert!(!none.can_access_peer(a, b)?, "none: {a} -> {b}");
            assert_eq!(all.can_access_peer(a, b)?, a != b, "all: {a} -> {b}");
            if a != b {
                assert_eq!(none.enable_peer_access(a, b), Err(Error::PeerAccessUnsupported { from: a, to: b }));
                all.enable_peer_access(a, b)?;
            }
        }
    }
    assert!(PeerSpec::All.allows(0, 63) && !PeerSpec::All.allows(5, 5));
    Ok(())
}

#[test]
fn peer_spec_parses_all_none_and_pairs() -> Result<()> {
    assert_eq!(PeerSpec::parse("all")?, PeerSpec::All);
    assert_eq!(PeerSpec::parse("ALL")?, PeerSpec::All);
    assert_eq!(PeerSpec::parse("none")?, PeerSpec::None);
    assert_eq!(PeerSpec::parse(" None ")?, PeerSpec::None);
    assert_eq!(PeerSpec::parse("0-1,2-3")?, PeerSpec::Pairs(vec![(0, 1), (2, 3)]));
    assert_eq!(PeerSpec::parse(" 0 - 1 , 3-2 ")?, PeerSpec::Pairs(vec![(0, 1), (3, 2)]));
    let p = PeerSpec::parse("1-0")?;
    assert!(p.allows(0, 1) && p.allows(1, 0) && !p.allows(0, 0) && !p.allows(0, 2));
    Ok(())
}

#[test]
fn peer_spec_parse_errors_are_invalid_config() {
    for bad in ["0-0", "0_1", "a-b", "1-", "-1", "0-1-2", "0-1,x", "some", "0:1"] {
        match PeerSpec::parse(bad) {
            Err(Error::InvalidConfig { key, value, reason }) => {
                assert_eq!(key, "CUDASEM_SIM_PEER", "{bad:?}");
                assert_eq!(value, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("PeerSpec::parse({bad:?}) should be InvalidConfig, got {other:?}"),
        }
    }
}
