//! The sim driver driven directly through the `Driver` trait: a private machine per test, so
//! these run on any machine whatever CUDASEM_DRIVER selects for the process.

use cudasem::driver::sim::{parse_bytes, PeerSpec, SimConfig, SimDriver};
use cudasem::driver::Driver;
use cudasem::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

fn machine(devices: usize, memory: usize) -> SimDriver {
    SimDriver::new(SimConfig { devices, memory, peer: PeerSpec::All, ..SimConfig::default() })
}

#[test]
fn sim_driver_reports_its_configured_shape() -> Result<()> {
    let d = machine(3, 1 << 30);
    assert_eq!(d.device_count(), 3);
    assert_eq!(d.unavailable_reason(), None);
    assert_eq!(d.config(), &SimConfig { devices: 3, memory: 1 << 30, peer: PeerSpec::All, ..SimConfig::default() });
    for i in 0..3 {
        let p = d.properties(i)?;
        assert_eq!(p.total_memory, 1 << 30);
        assert!(p.multi_processor_count > 0 && p.major >= 1);
        assert_eq!(d.mem_get_info(i)?, (1 << 30, 1 << 30));
    }
    let empty = machine(0, 1 << 20);
    assert_eq!(empty.device_count(), 0);
    assert!(empty.unavailable_reason().is_some());
    assert_eq!(
        SimConfig::default(),
        SimConfig { devices: 2, memory: 16 << 30, peer: PeerSpec::All, ..SimConfig::default() }
    );
    Ok(())
}

#[test]
fn sim_driver_memory_has_a_capacity_and_injected_failures() -> Result<()> {
    let d = machine(2, 1 << 20);
    let a = d.malloc(0, 600 << 10)?;
    let (free, total) = d.mem_get_info(0)?;
    assert_eq!(total, 1 << 20);
    assert!(free <= (1 << 20) - (600 << 10));
    assert_eq!(d.mem_get_info(1)?, (1 << 20, 1 << 20), "device 1 is not charged");
    match d.malloc(0, 600 << 10) {
        Err(Error::OutOfMemory { device: 0, requested, total, free: f, .. }) => {
            assert_eq!((requested, total, f), (600 << 10, 1 << 20, free));
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let b = d.malloc(1, 600 << 10)?;
    // SAFETY: `a` is this driver's allocation on device 0, freed once here.
    unsafe { d.free(0, a) }?;
    assert_eq!(d.mem_get_info(0)?, (1 << 20, 1 << 20), "freed bytes return");
    // SAFETY: the contract is broken on purpose: the simulated driver checks every pointer it
    // frees, so on it a second free is a typed error, which this checks (never on a real GPU).
    let again = unsafe { d.free(0, a) };
    assert!(matches!(again, Err(Error::InvalidPointer { .. })), "double free is refused");
    d.fail_next_malloc(1)?;
    // SAFETY: `b` is this driver's allocation on device 1, freed once here.
    unsafe { d.free(1, b) }?;
    assert_eq!(d.malloc(1, 16), Err(Error::Injected { device: 1, op: "malloc" }));
    let c = d.malloc(1, 16)?;
    // SAFETY: `c` is this driver's allocation on device 1, freed once here.
    unsafe { d.free(1, c) }?;
    assert!(d.materialized_bytes(0) == 0 && d.materialized_bytes(1) == 0);
    Ok(())
}

#[test]
fn sim_driver_streams_run_queued_work_in_order_and_time_it() -> Result<()> {
    let d = machine(1, 1 << 20);
    let s = d.create_stream(0, 0)?;
    let (start, end) = (d.event_create(0, true, false)?, d.event_create(0, true, false)?);
    let buf = d.malloc(0, 64)?;
    d.event_record(start, s)?;
    d.delay(s, Duration::from_millis(200))?;
    d.memset_d8(buf, 0xab, 64, s)?;
    d.event_record(end, s)?;
    assert!(!d.stream_query(s)?);
    assert!(!d.event_query(end)?);
    assert_eq!(d.event_elapsed_ms(start, end), Err(Error::EventNotReady));
    d.event_synchronize(end)?;
    let t = d.event_elapsed_ms(start, end)?;
    // The simulated clock: exactly the delay, and the fill of 64 bytes (a few µs), whatever the load.
    assert!((200.0..200.01).contains(&t), "200 ms delay and a 64-byte fill measured as {t} ms");
    let mut out = [0u8; 64];
    d.memcpy_dtoh(&mut out, buf, s)?;
    assert_eq!(out, [0xab; 64]);
    d.stream_synchronize(s)?;
    assert!(d.stream_query(s)?);
    let untimed = d.event_create(0, false, false)?;
    d.event_record(untimed, s)?;
    d.event_synchronize(untimed)?;
    assert_eq!(d.event_elapsed_ms(start, untimed), Err(Error::EventTimingDisabled));
    d.event_destroy(untimed);
    // SAFETY: `buf` is this driver's allocation on device 0, its work done; freed once here.
    unsafe { d.free(0, buf) }?;
    Ok(())
}

#[test]
fn sim_driver_is_object_safe_and_shareable() -> Result<()> {
    let d: Arc<dyn Driver> = Arc::new(machine(2, 1 << 20));
    let d2 = d.clone();
    let n = std::thread::spawn(move || d2.device_count()).join().unwrap();
    assert_eq!(n, 2);
    assert_ne!(d.default_stream(0)?, d.default_stream(1)?);
    let (least, greatest) = d.stream_priority_range(0)?;
    assert!(greatest <= least, "greater priority is the more negative number");
    Ok(())
}

#[test]
fn byte_sizes_parse_with_binary_units() {
    assert_eq!(parse_bytes("16GiB"), Ok(16 << 30));
    assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
    assert_eq!(parse_bytes("64k"), Ok(64 << 10));
    assert_eq!(parse_bytes("1.5GB"), Ok(3 << 29));
    assert_eq!(parse_bytes("4096"), Ok(4096));
    for bad in ["", "0", "lots", "12 parsecs", "-1GiB", "GiB"] {
        assert!(parse_bytes(bad).is_err(), "{bad:?}");
    }
}
