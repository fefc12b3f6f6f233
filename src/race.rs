//! What the stream sanitizer reports ([`crate::Error::UnsynchronizedAccess`]): the memory, the
//! two accesses that race on it (stream, operation, read or write, Rust backtrace of each) and
//! where the memory was allocated. PyTorch's `torch.cuda._sanitizer.UnsynchronizedAccessError`.
//!
//! Stacks ([`Stack`], `src/stack/`) are captured as the accesses are made, as the bare instruction
//! pointers of their innermost frames, and resolved to symbols only when the report is printed
//! (`Display`).

use crate::dtype::DType;
pub use crate::stack::Stack;
use std::fmt;

/// One of the two accesses of an [`AccessRace`].
#[derive(Clone)]
pub struct RacingAccess {
    /// The driver's handle of the stream the access was queued on ([`crate::cuda::Stream::id`]).
    pub stream: u64,
    /// The stream's device.
    pub device: usize,
    /// The operation (`binary add`, `memcpy device to device`, `graph replay`, …).
    pub operation: String,
    /// Whether the access writes (else it only reads).
    pub write: bool,
    /// Where the access was made (`None` when the sanitizer runs without stack traces).
    pub backtrace: Option<Stack>,
}

impl PartialEq for RacingAccess {
    /// Equal when stream, device, operation and kind agree (backtraces are not compared).
    fn eq(&self, o: &Self) -> bool {
        (self.stream, self.device, &self.operation, self.write) == (o.stream, o.device, &o.operation, o.write)
    }
}
impl Eq for RacingAccess {}

impl fmt::Debug for RacingAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RacingAccess")
            .field("stream", &format_args!("{:#x}", self.stream))
            .field("operation", &self.operation)
            .field("write", &self.write)
            .finish_non_exhaustive()
    }
}

/// The tensor an access went through, as the operation named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceTensor {
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its `data_ptr` (the address of its first element).
    pub data_ptr: u64,
}

/// A possible data race found by the stream sanitizer: `current` (refused, never queued) is not
/// ordered after `previous`, and one of them writes. When `freed` is set, `previous` used memory
/// that was freed afterwards without [`Tensor::record_stream`](crate::Tensor::record_stream), so
/// the caching allocator handed it out again while that use may still be running.
#[derive(Clone, Debug)]
pub struct AccessRace {
    /// The device of the memory.
    pub device: usize,
    /// The first byte both accesses touch.
    pub address: u64,
    /// The tensor the current access used there, when the operation named one.
    pub tensor: Option<RaceTensor>,
    /// The access that was refused.
    pub current: RacingAccess,
    /// The earlier access it races with.
    pub previous: RacingAccess,
    /// The previous access's memory was freed (and may be reused) while it could still run.
    pub freed: bool,
    /// Where the memory of the current access was allocated, when known.
    pub allocation: Option<Stack>,
}

impl PartialEq for AccessRace {
    /// Equal when everything but the backtraces agrees.
    fn eq(&self, o: &Self) -> bool {
        (self.device, self.address, &self.tensor, &self.current, &self.previous, self.freed)
            == (o.device, o.address, &o.tensor, &o.current, &o.previous, o.freed)
    }
}
impl Eq for AccessRace {}

fn kind(write: bool) -> &'static str {
    if write {
        "writing"
    } else {
        "reading"
    }
}

fn write_access(f: &mut fmt::Formatter<'_>, label: &str, a: &RacingAccess) -> fmt::Result {
    writeln!(f, "{label} by stream {:#x} (cuda:{}) during {}, {}", a.stream, a.device, a.operation, kind(a.write))?;
    match &a.backtrace {
        Some(b) => writeln!(f, "With stack trace:\n{b}"),
        None => writeln!(f, "(no stack trace: the sanitizer runs without stack traces)"),
    }
}

impl fmt::Display for AccessRace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "============================")?;
        write!(
            f,
            "cudasem's stream sanitizer found a possible data race on cuda:{} at {:#x}",
            self.device, self.address
        )?;
        match &self.tensor {
            Some(t) => {
                writeln!(f, " (tensor of dtype {:?}, shape {:?}, data pointer {:#x})", t.dtype, t.shape, t.data_ptr)?
            }
            None => writeln!(f)?,
        }
        writeln!(
            f,
            "The access was refused and not queued; order it after the previous access (Stream::wait_stream, \
             Event::record + Stream::wait_event, or a synchronize){}.",
            if self.freed { ", or call Tensor::record_stream before freeing memory another stream uses" } else { "" }
        )?;
        write_access(f, "Access", &self.current)?;
        let prev = if self.freed {
            "Previous access (to memory since freed without record_stream)"
        } else {
            "Previous access"
        };
        write_access(f, prev, &self.previous)?;
        match &self.allocation {
            Some(b) => write!(f, "Memory was allocated with stack trace:\n{b}"),
            None => write!(f, "(allocation stack trace unknown)"),
        }
    }
}
