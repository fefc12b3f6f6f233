//! An invalid `CUDASEM_ALLOC_CONF`: every call that needs the caching allocator fails with a typed
//! error naming the key, and everything else keeps working. The settings are read once per
//! process, so this file holds one test, which sets them before any other cudasem call.

mod common;

use common::XorShift64;
use cudasem::cuda::{self, Stream};
use cudasem::testing::RawBuffer;
use cudasem::{Error, Result};

#[track_caller]
fn assert_bad_conf<T: std::fmt::Debug>(r: Result<T>, call: &str) {
    match r {
        Err(e @ Error::InvalidConfig { .. }) => {
            let msg = e.to_string();
            let Error::InvalidConfig { key, value, reason } = e else { unreachable!() };
            assert_eq!((key.as_str(), value.as_str()), ("max_split_size_mb", "abc"), "{call}: {msg}");
            assert!(!reason.is_empty(), "{call}: {msg}");
            assert!(msg.contains("max_split_size_mb") && msg.contains("abc"), "{call}: {msg}");
        }
        other => panic!("{call}: expected Error::InvalidConfig for max_split_size_mb, got {other:?}"),
    }
}

#[test]
fn an_invalid_alloc_conf_is_a_typed_error_of_the_allocating_calls_only() -> Result<()> {
    // Before any other cudasem call: the runtime reads the settings once.
    std::env::set_var(cudasem::alloc::ALLOC_CONF_ENV, "max_split_size_mb:abc");

    assert_bad_conf(cuda::caching_allocator_alloc(1024, None, None), "caching_allocator_alloc");
    assert_bad_conf(cuda::allocator_settings(), "allocator_settings");
    assert_bad_conf(RawBuffer::cached(Some(0), 4096, None), "RawBuffer::cached");
    assert_bad_conf(cuda::caching_allocator_alloc(1024, None, None), "caching_allocator_alloc, again");

    // What does not allocate through the caching allocator still works.
    assert!(cuda::device_count() >= 1);
    let s = Stream::new(Some(0), 0)?;
    assert_eq!(s.device(), 0);
    s.synchronize()?;
    cuda::synchronize(None)?;
    let (free, total) = cuda::mem_get_info(Some(0))?;
    assert!(free <= total && total > 0);
    let raw = RawBuffer::new(Some(0), 4096)?; // straight from the driver
    let data = XorShift64::new(1).nonzero_bytes(4096);
    raw.write(&data, &s)?;
    assert_eq!(raw.read(&s)?, data);
    Ok(())
}
