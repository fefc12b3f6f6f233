//! The crate's one public error type.
//!
//! Every fallible call in cudasem returns [`Result<T>`](crate::Result). Variants carry structured
//! fields so a program can react to them, and their `Display` text says what to do next.

/// Result alias used throughout cudasem.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in cudasem.
///
/// Errors never poison the runtime: after any of them the same thread (and every other thread)
/// can keep using every device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A device index outside `0..count`.
    #[error("invalid device index {index}: this machine has {count} CUDA device(s) ({driver} driver), valid indices are 0..{count}; check CUDA_VISIBLE_DEVICES / CUDASEM_SIM_DEVICES or use cudasem::cuda::device_count()")]
    InvalidDevice {
        /// The index that was asked for.
        index: usize,
        /// How many devices there are.
        count: usize,
        /// The driver in use (`"cuda"` or `"sim"`).
        driver: &'static str,
    },
    /// The call needs a CUDA device and the driver found none.
    #[error("no CUDA device is available ({driver} driver: {reason}); run on a machine with an NVIDIA GPU, or use the simulated machine with CUDASEM_DRIVER=sim")]
    NoDevice {
        /// The driver in use.
        driver: &'static str,
        /// Why no device was found.
        reason: String,
    },
    /// A CPU device (or another non-CUDA device) was given where a CUDA device is required.
    #[error("expected a CUDA device but got `{device}`; pass a CUDA device such as \"cuda:0\" or an index")]
    NotCudaDevice {
        /// The device as it was written.
        device: String,
    },
    /// A device string that does not parse.
    #[error("invalid device string `{input}`: {reason}; expected \"cpu\", \"cuda\" or \"cuda:N\"")]
    InvalidDeviceString {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Peer access between two devices is not possible on this machine.
    #[error("peer access from cuda:{from} to cuda:{to} is not supported on this machine (check cudasem::cuda::can_device_access_peer first; copies between the two still work, staged through the host)")]
    PeerAccessUnsupported {
        /// The device that would read.
        from: usize,
        /// The device whose memory would be read.
        to: usize,
    },
    /// `Event::elapsed_time` on an event created without timing.
    #[error("both events must be created with enable_timing = true to measure elapsed time (Event::new(EventFlags {{ enable_timing: true, .. }}))")]
    EventTimingDisabled,
    /// An event that was never recorded was used where a recorded one is needed.
    #[error("both events must be recorded before calculating elapsed time; call Event::record(&stream) on each first")]
    EventNotRecorded,
    /// An event's recorded work has not finished yet.
    #[error("the event's work has not completed yet; call end_event.synchronize() before elapsed_time")]
    EventNotReady,
    /// An event and a stream (or two events) that belong to different devices.
    #[error("event is on cuda:{event_device} but the {what} is on cuda:{other_device}; events can only be recorded on, and timed against, the device they were first recorded on")]
    EventDeviceMismatch {
        /// The event's device.
        event_device: usize,
        /// The other party's device.
        other_device: usize,
        /// What the other party is (`"stream"` or `"end event"`).
        what: &'static str,
    },
    /// A stream handle that this process's runtime does not know.
    #[error("unknown stream {stream} on cuda:{device}; use streams made by cudasem::cuda::Stream::new or current_stream/default_stream")]
    UnknownStream {
        /// Device of the stream.
        device: usize,
        /// Driver handle of the stream.
        stream: u64,
    },
    /// The device is out of memory.
    ///
    /// The message has PyTorch's shape: what was asked for, the device's capacity and free memory,
    /// and how much of the caching allocator's memory is allocated and how much is cached.
    #[error("CUDA out of memory. Tried to allocate {}. GPU {device} has a total capacity of {} of which {} is free. Of the allocated memory {} is allocated by cudasem, and {} is reserved by cudasem but unallocated. If reserved but unallocated memory is large try setting CUDASEM_ALLOC_CONF=expandable_segments:True to avoid fragmentation; otherwise free tensors or call cudasem::cuda::empty_cache()", fmt_bytes(*requested), fmt_bytes(*total), fmt_bytes(*free), fmt_bytes(*allocated), fmt_bytes(*reserved_unallocated))]
    OutOfMemory {
        /// Device index.
        device: usize,
        /// Bytes that were asked for (from the caching allocator: the segment it tried to get).
        requested: usize,
        /// The device's total memory.
        total: usize,
        /// The device's free memory at the time.
        free: usize,
        /// Bytes the caching allocator had handed out (0 for a raw driver allocation).
        allocated: usize,
        /// Bytes the caching allocator held from the driver but had not handed out (0 for a raw
        /// driver allocation).
        reserved_unallocated: usize,
    },
    /// A malformed allocator trace (see `cudasem::alloc::trace`).
    #[error("invalid allocator trace at line {line}: {reason}; expected CSV rows `action,addr,size,stream`")]
    InvalidTrace {
        /// 1-based line number in the trace text.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A device pointer that is not (or no longer) a live allocation of that device.
    #[error("invalid device pointer {ptr:#x} on cuda:{device}: {reason}")]
    InvalidPointer {
        /// Device index.
        device: usize,
        /// The pointer.
        ptr: u64,
        /// Why it is invalid.
        reason: String,
    },
    /// A malformed environment variable or configuration value.
    #[error("invalid value `{value}` for {key}: {reason}")]
    InvalidConfig {
        /// The variable or key.
        key: String,
        /// The value found.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// A bad argument to a call that is not covered by a more specific variant.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The call.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The driver does not support this operation on this machine.
    #[error("{op} is not supported by the {driver} driver: {reason}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The driver.
        driver: &'static str,
        /// Why.
        reason: String,
    },
    /// An error injected by a test hook (see `cudasem::testing`).
    #[error("injected failure on cuda:{device}: {op}")]
    Injected {
        /// Device index.
        device: usize,
        /// The operation that was made to fail.
        op: &'static str,
    },
    /// An error reported by the CUDA driver that no other variant describes.
    #[error("CUDA driver error in {op}: {code} ({message})")]
    Driver {
        /// The driver call.
        op: &'static str,
        /// The driver's error name, e.g. `CUDA_ERROR_LAUNCH_FAILED`.
        code: String,
        /// The driver's description.
        message: String,
    },
}

/// Formats a byte count the way PyTorch's messages do (`200.00 GiB`).
pub fn fmt_bytes(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_format_like_pytorch() {
        assert_eq!(fmt_bytes(512), "512 bytes");
        assert_eq!(fmt_bytes(2048), "2.00 KiB");
        assert_eq!(fmt_bytes(200 << 30), "200.00 GiB");
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = Error::InvalidDevice { index: 7, count: 2, driver: "sim" };
        let m = e.to_string();
        assert!(m.contains("invalid device index 7") && m.contains("0..2"), "{m}");
        let oom = Error::OutOfMemory {
            device: 0,
            requested: 200 << 30,
            total: 16 << 30,
            free: 1 << 30,
            allocated: 32 << 20,
            reserved_unallocated: 34 << 20,
        };
        let m = oom.to_string();
        assert!(m.starts_with("CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free."), "{m}");
        assert!(m.contains("Of the allocated memory 32.00 MiB is allocated by cudasem, and 34.00 MiB is reserved by cudasem but unallocated."), "{m}");
        assert!(m.contains("expandable_segments:True"), "{m}");
    }
}
