//! The simulated machine's own clock: how long each piece of device work takes on it.
//!
//! Every stream keeps a simulated time, in nanoseconds since the machine was built. A job starts
//! when its stream is free and, for a wait, when the awaited event was reached; it ends after its
//! modelled duration, which comes from the figures below, never from the host's clock. An event's
//! timestamp is the simulated time at which its stream reached it, so `elapsed_time`, overlap and
//! ordering come out the same however busy the host is. Only [`Driver::delay`] also takes real
//! time (its worker sleeps), so that host-side checks can see a stream still busy.
//!
//! The host is not on this clock: host waits do not move simulated time, and a job queued on an
//! idle stream starts at that stream's time. Threads share streams (the default stream, the
//! pool), so a per-thread host clock would leak one thread's waits into another's timings.
//!
//! The figures are those of an H200 as measured by `cudasem bench` (BENCHMARKS.md), rounded.
//!
//! [`Driver::delay`]: crate::driver::Driver::delay

use crate::kernel::{BufferView, KernelOp};
use std::time::Duration;

/// A point on the simulated clock, or a span of it, in nanoseconds.
pub(crate) type SimTime = u64;

/// Host ↔ device copies from or to pinned memory (the copy engine over PCIe Gen5 x16, measured
/// 55 GB/s both ways).
pub(crate) const PINNED_BYTES_PER_S: f64 = 55e9;
/// Host ↔ device copies from or to pageable memory (staged through a driver bounce buffer,
/// measured 7–8 GB/s).
pub(crate) const PAGEABLE_BYTES_PER_S: f64 = 8e9;
/// Device memory traffic of kernels (HBM3e, measured 4.3 TB/s counting bytes read and written).
pub(crate) const DEVICE_BYTES_PER_S: f64 = 4.3e12;
/// Copies between two devices over the peer link (NVLink, measured 396 GB/s).
pub(crate) const PEER_BYTES_PER_S: f64 = 396e9;
/// Fused multiply-adds count as two operations (the H200's FP32 figure, 67 TFLOPS).
pub(crate) const FLOPS: f64 = 67e12;
/// What any queued copy, fill or kernel costs besides its bytes (the order of an empty kernel).
pub(crate) const OP_OVERHEAD: SimTime = 2_000;

/// `bytes` at `bytes_per_s`, plus the fixed overhead.
pub(crate) fn transfer(bytes: usize, bytes_per_s: f64) -> SimTime {
    OP_OVERHEAD + (bytes as f64 / bytes_per_s * 1e9).round() as SimTime
}

/// A copy within one device: every byte is read and written.
pub(crate) fn device_copy(bytes: usize) -> SimTime {
    transfer(bytes.saturating_mul(2), DEVICE_BYTES_PER_S)
}

/// A copy between two devices: over the link when peer access is enabled, else staged through
/// host memory (a device → host copy, then a host → device one).
pub(crate) fn peer_copy(bytes: usize, linked: bool) -> SimTime {
    if linked {
        transfer(bytes, PEER_BYTES_PER_S)
    } else {
        transfer(bytes, PINNED_BYTES_PER_S / 2.0)
    }
}

/// A test delay: exactly what was asked for.
pub(crate) fn delay(d: Duration) -> SimTime {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Bytes a view's elements occupy (a number operand, at address 0, is not in memory).
fn view_bytes(v: &BufferView) -> usize {
    if v.ptr.0 == 0 {
        return 0;
    }
    v.numel().saturating_mul(v.dtype.size())
}

/// A kernel: its memory traffic at the device's bandwidth, or its arithmetic for a matrix
/// product, whichever takes longer.
pub(crate) fn kernel(op: &KernelOp) -> SimTime {
    let bytes = op.inputs().into_iter().chain(op.outputs()).map(view_bytes).fold(0usize, usize::saturating_add);
    let memory = transfer(bytes, DEVICE_BYTES_PER_S);
    if let KernelOp::Gemm { lhs, dst, .. } = op {
        let k = lhs.shape.last().copied().unwrap_or(0);
        let flops = 2.0 * dst.numel() as f64 * k as f64;
        return memory.max(OP_OVERHEAD + (flops / FLOPS * 1e9).round() as SimTime);
    }
    memory
}

/// A jiterator call: its memory traffic at the device's bandwidth (a multi-output function
/// reads its inputs once per output, as the CUDA driver's kernels do).
pub(crate) fn jit(op: &crate::kernel::JitOp) -> SimTime {
    let reads = op.ins.iter().map(view_bytes).fold(0usize, usize::saturating_add);
    let writes = op.outs.iter().map(view_bytes).fold(0usize, usize::saturating_add);
    transfer(reads.saturating_mul(op.outs.len()).saturating_add(writes), DEVICE_BYTES_PER_S)
}

/// Milliseconds from `t0` to `t1` (negative when `t1` is earlier), as `elapsed_time` reports.
pub(crate) fn signed_ms(t0: SimTime, t1: SimTime) -> f32 {
    ((t1 as f64 - t0 as f64) / 1e6) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_take_their_bytes_at_the_modelled_bandwidth() {
        let gib = 1usize << 30;
        // 1 GiB over PCIe at 55 GB/s: 19.52 ms, plus the overhead.
        assert_eq!(transfer(gib, PINNED_BYTES_PER_S), OP_OVERHEAD + 19_522_579);
        assert!(transfer(gib, PAGEABLE_BYTES_PER_S) > 6 * transfer(gib, PINNED_BYTES_PER_S));
        assert!(peer_copy(gib, true) < peer_copy(gib, false));
        assert_eq!(peer_copy(gib, false), transfer(gib, PINNED_BYTES_PER_S / 2.0));
        assert_eq!(device_copy(0), OP_OVERHEAD);
        assert_eq!(delay(Duration::from_millis(3)), 3_000_000);
        assert_eq!(signed_ms(5_000_000, 2_000_000), -3.0);
    }
}
