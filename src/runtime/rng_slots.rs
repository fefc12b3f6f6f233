//! Device memory for the generator slots of captured draws (`[seed, base offset]`, 16 bytes,
//! one per graph and generator; `tensor/generator.rs`).
//!
//! A slot is written by each replay's prologue, before the graph runs, so it must not share
//! memory with anything the graph itself uses: a block of the graph's private pool could be one
//! that an earlier captured op freed (the pool hands it on, in the graph's order), and that op
//! would overwrite the seed after the prologue wrote it. Slots therefore come from chunks of
//! the driver's own memory (`cuMemAlloc`, which a capture allows), outside the caching allocator
//! and its pools; they are kept for the process (16 bytes per captured graph and generator), so
//! a slot is never handed on while a replay of an earlier graph may still read it.

use super::registry::rt;
use crate::error::Result;
use crate::kernel::DevicePtr;
use std::sync::Mutex;

/// Bytes of one slot (two `i64`).
const SLOT_BYTES: u64 = 16;
/// Slots per chunk of device memory.
const CHUNK_SLOTS: u64 = 256;

/// Per device: the chunk slots are taken from and how many of it are taken.
static CHUNKS: Mutex<Vec<Option<(DevicePtr, u64)>>> = Mutex::new(Vec::new());

/// A fresh slot on `device`, never used by anything else.
pub(crate) fn rng_slot(device: usize) -> Result<DevicePtr> {
    let mut chunks = CHUNKS.lock().unwrap_or_else(|e| e.into_inner());
    if chunks.len() <= device {
        chunks.resize(device + 1, None);
    }
    let (base, used) = match chunks[device] {
        Some((base, used)) if used < CHUNK_SLOTS => (base, used),
        _ => (rt()?.driver.malloc(device, (SLOT_BYTES * CHUNK_SLOTS) as usize)?, 0),
    };
    chunks[device] = Some((base, used + 1));
    let slot = DevicePtr(base.0 + used * SLOT_BYTES);
    Ok(slot)
}
