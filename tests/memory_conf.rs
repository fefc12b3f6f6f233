//! An invalid `CUDASEM_ALLOC_CONF`: the runtime refuses to start, so every call (not only the
//! first allocation) fails with a typed error naming the key. The environment is read once per
//! process, so the test runs itself again as a child process with the variable set (no test
//! changes its own process's environment).

mod common;

use common::TestRng;
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

/// Set in the child process, which runs the checks.
const CHILD: &str = "CUDASEM_TEST_MEMORY_CONF_CHILD";

#[test]
fn an_invalid_alloc_conf_is_refused_when_the_runtime_starts() -> Result<()> {
    if std::env::var_os(CHILD).is_none() {
        let name = "an_invalid_alloc_conf_is_refused_when_the_runtime_starts";
        let out = std::process::Command::new(std::env::current_exe().expect("the test executable"))
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("CUDASEM_ALLOC_CONF", "max_split_size_mb:abc")
            .output()
            .expect("the test executable runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "the child process failed:\n{text}");
        assert!(text.contains("1 passed"), "the child ran the test:\n{text}");
        return Ok(());
    }
    assert_eq!(std::env::var("CUDASEM_ALLOC_CONF").as_deref(), Ok("max_split_size_mb:abc"));

    // Refused at once: the calls that do not allocate fail too, with the same error.
    assert_bad_conf(cuda::current_device(), "current_device");
    assert_bad_conf(Stream::new(Some(0), 0), "Stream::new");
    assert_bad_conf(cuda::mem_get_info(Some(0)), "mem_get_info");
    assert_bad_conf(cuda::caching_allocator_alloc(1024, None, None), "caching_allocator_alloc");
    assert_bad_conf(cuda::allocator_settings(), "allocator_settings");
    assert_bad_conf(RawBuffer::cached(Some(0), 4096, None), "RawBuffer::cached");
    assert_bad_conf(RawBuffer::new(Some(0), TestRng::new(1).nonzero_bytes(1)[0] as usize + 1), "RawBuffer::new");
    assert_bad_conf(cuda::synchronize(None), "synchronize");
    assert_eq!(cuda::device_count(), 0, "no device is usable while the settings are invalid");
    assert_bad_conf(cuda::caching_allocator_alloc(1024, None, None), "caching_allocator_alloc, again");
    Ok(())
}
