//! `Tensor::record_stream` (IMPLEMENTATION.md, invariant 4): a tensor used on another stream is reused by its
//! allocating stream only after that stream's work completed — for a shifted view too, which
//! records its storage's whole block. The tests share cuda:0's caching allocator and depend on
//! its best-fit choices, so they take turns.

mod common;

use common::{assert_busy, ms, retry_if_stalled, stream_pair, warm_up};
use cudasem::cuda::{self, StreamGuard};
use cudasem::{testing, DType, Device, Error, Result, Tensor};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// 4 MiB of f32: a large-pool block, at the start of a fresh 20 MiB segment after `empty_cache`.
const N: usize = 1 << 20;

#[test]
fn record_stream_on_a_shifted_view_protects_the_whole_block() -> Result<()> {
    let _s = serial();
    if !common::one_device() {
        return Ok(());
    }
    let (main, side) = stream_pair(0)?;
    warm_up(&main)?;
    warm_up(&side)?;
    let _g = StreamGuard::new(&main)?; // tensors are allocated on `main`

    // Without record_stream the allocating stream reuses the block at once, though `side` still
    // has work queued on it: what record_stream is for.
    cuda::empty_cache()?;
    let t = Tensor::zeros([N], DType::F32, Device::cuda(0))?;
    let block = t.data_ptr();
    side.wait_stream(&main)?;
    testing::delay(&side, ms(200))?;
    cuda::with_stream(&side, || t.narrow(0, 1000, N / 2)?.fill_(0u8))?;
    drop(t);
    let u = Tensor::empty([N], DType::F32, Device::cuda(0))?;
    assert_eq!(u.data_ptr(), block, "without record_stream the block is reused at once (the hazard)");
    drop(u);
    side.synchronize()?;

    retry_if_stalled(ms(300), |delay| {
        cuda::empty_cache()?;
        let t = Tensor::zeros([N], DType::F32, Device::cuda(0))?;
        let block = t.data_ptr();
        let view = t.narrow(0, 1000, N / 2)?; // shifted: starts 4000 bytes into the block
        assert_ne!(view.data_ptr(), block);
        side.wait_stream(&main)?;
        let queued = Instant::now();
        testing::delay(&side, delay)?;
        cuda::with_stream(&side, || view.fill_(0u8))?; // the view is used on `side`
        view.record_stream(&side)?;
        drop((t, view));
        let u = Tensor::empty([N], DType::F32, Device::cuda(0))?;
        let observed = assert_busy(
            u.data_ptr() != block,
            queued,
            delay,
            "the block was reused by its allocating stream while the recorded stream still used it",
        );
        side.synchronize()?;
        let w = Tensor::empty([N], DType::F32, Device::cuda(0))?;
        assert_eq!(w.data_ptr(), block, "once the recorded stream's work completed, the block is reused");
        drop((u, w));
        Ok(observed)
    })
}

#[test]
fn record_stream_needs_a_device_tensor_and_a_stream_of_its_device() -> Result<()> {
    let _s = serial();
    if !common::one_device() {
        return Ok(());
    }
    let s0 = cuda::current_stream(Some(0))?;
    let host = Tensor::zeros([4], DType::F32, Device::Cpu)?;
    assert!(matches!(host.record_stream(&s0), Err(Error::InvalidArgument { op: "record_stream", .. })));
    let t = Tensor::zeros([4], DType::F32, Device::cuda(0))?;
    t.record_stream(&s0)?; // its own stream: nothing to do
    t.record_stream(&cuda::Stream::new(Some(0), 0)?)?;
    Tensor::empty([0], DType::F32, Device::cuda(0))?.record_stream(&s0)?;
    if testing::has_devices(2) {
        let s1 = cuda::current_stream(Some(1))?;
        let err = t.record_stream(&s1).unwrap_err();
        assert!(err.to_string().contains("cuda:0") && err.to_string().contains("cuda:1"), "{err}");
    }
    Ok(())
}
