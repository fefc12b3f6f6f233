//! The [`Stream`] handle itself (device, driver stream, priority): the value the thread-local
//! context holds; its methods are in `stream.rs`.

use crate::driver::StreamId;
use std::fmt;

/// A CUDA stream: an in-order queue of work on one device (`torch.cuda.Stream`).
///
/// Cheap to clone; two handles to the same stream compare equal. Streams made by
/// [`Stream::new`] come from the device's pool (32 per priority level, handed out round-robin,
/// as PyTorch does) and live for the whole process.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Stream {
    pub(super) device: usize,
    pub(super) id: StreamId,
    pub(super) priority: i32,
    pub(super) default: bool,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<cudasem Stream device=cuda:{} id={:#x} priority={}", self.device, self.id.0, self.priority)?;
        f.write_str(if self.default { " default>" } else { ">" })
    }
}
