//! [`Storage`]: the bytes behind tensors — host memory (pageable, or a pinned block of the caching
//! host allocator), a block of a device's caching allocator, or device memory made elsewhere and
//! kept alive by its owner ([`ForeignBlock`]: `Tensor::from_blob`, DLPack imports); blocks go back
//! to their allocator, and owners are dropped, when the last tensor using them drops.

use crate::device::Device;
use crate::driver::DevicePtr;
use crate::error::{Error, Result};
use crate::kernels::cpu::Memory;
use crate::runtime::{DeviceBlock, PinnedBlock, PinnedRead, PinnedWrite, Stream};
use std::ops::{Deref, DerefMut};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

/// Host bytes, with the address of their first byte (their [`DevicePtr`] in kernel views):
/// ordinary (pageable) memory, or a pinned block of the caching host allocator.
pub(crate) struct HostBytes {
    data: HostData,
    addr: u64,
    /// Fixed for the storage's life.
    len: usize,
}

enum HostData {
    Pageable(RwLock<Vec<u8>>),
    /// Host access waits for the non-blocking copies still using the block (see `PinnedBlock`).
    Pinned(PinnedBlock),
}

/// Shared access to host bytes (after any copy writing them into pinned memory has completed).
pub(crate) enum HostRead<'a> {
    Pageable(RwLockReadGuard<'a, Vec<u8>>),
    Pinned(PinnedRead<'a>),
}

impl Deref for HostRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            HostRead::Pageable(g) => g,
            HostRead::Pinned(g) => g,
        }
    }
}

/// Exclusive access to host bytes (after every copy using pinned memory has completed).
pub(crate) enum HostWrite<'a> {
    Pageable(RwLockWriteGuard<'a, Vec<u8>>),
    Pinned(PinnedWrite<'a>),
}

impl Deref for HostWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            HostWrite::Pageable(g) => g,
            HostWrite::Pinned(g) => g,
        }
    }
}

impl DerefMut for HostWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            HostWrite::Pageable(g) => g,
            HostWrite::Pinned(g) => g,
        }
    }
}

impl HostBytes {
    /// The bytes for reading; for pinned memory, waits for copies in flight that write them.
    pub fn read(&self) -> Result<HostRead<'_>> {
        match &self.data {
            HostData::Pageable(v) => Ok(HostRead::Pageable(v.read().unwrap_or_else(|e| e.into_inner()))),
            HostData::Pinned(b) => Ok(HostRead::Pinned(b.read()?)),
        }
    }

    /// The bytes for writing; for pinned memory, waits for every copy in flight that uses them.
    pub fn write(&self) -> Result<HostWrite<'_>> {
        match &self.data {
            HostData::Pageable(v) => Ok(HostWrite::Pageable(v.write().unwrap_or_else(|e| e.into_inner()))),
            HostData::Pinned(b) => Ok(HostWrite::Pinned(b.write()?)),
        }
    }

    /// The pinned block, when the bytes are pinned.
    pub fn pinned(&self) -> Option<&PinnedBlock> {
        match &self.data {
            HostData::Pageable(_) => None,
            HostData::Pinned(b) => Some(b),
        }
    }
}

/// A tensor's memory, shared (`Arc`) by every view of it.
pub(crate) enum Storage {
    Host(HostBytes),
    Device(DeviceBlock),
    Foreign(ForeignBlock),
}

/// What keeps memory made elsewhere alive: dropped (on whatever thread drops the last view) when
/// the last tensor viewing the memory is gone.
pub(crate) type Owner = Box<dyn std::any::Any + Send + Sync>;

/// Device memory that cudasem did not allocate (`Tensor::from_blob`, a DLPack import): the caching
/// allocator never frees nor reuses it; `owner` is dropped with the storage.
pub(crate) struct ForeignBlock {
    device: usize,
    ptr: DevicePtr,
    /// Dropped with the block: the deleter of the memory.
    _owner: Owner,
}

impl ForeignBlock {
    /// Memory at `ptr` on `device`, checked by the caller, kept alive by `owner`.
    pub fn new(device: usize, ptr: u64, owner: Owner) -> ForeignBlock {
        ForeignBlock { device, ptr: DevicePtr(ptr), _owner: owner }
    }

    /// The device holding the memory.
    pub fn device(&self) -> usize {
        self.device
    }
}

impl Storage {
    /// Host storage holding `bytes`.
    pub fn host(bytes: Vec<u8>) -> Storage {
        let (addr, len) = (bytes.as_ptr() as usize as u64, bytes.len());
        Storage::Host(HostBytes { data: HostData::Pageable(RwLock::new(bytes)), addr, len })
    }

    /// `len` bytes of pinned host memory from the caching host allocator (a reused block keeps
    /// its old contents).
    pub fn pinned(len: usize) -> Result<Storage> {
        let block = PinnedBlock::new(len)?;
        let addr = block.addr();
        Ok(Storage::Host(HostBytes { data: HostData::Pinned(block), addr, len }))
    }

    /// `len` zeroed host bytes, or [`Error::HostOutOfMemory`].
    pub fn host_zeroed(len: usize) -> Result<Storage> {
        Ok(Storage::host(zeroed_bytes(len)?))
    }

    /// `bytes` bytes from the caching allocator of `stream`'s device, for use on `stream`
    /// (uninitialized).
    #[inline]
    pub fn device_block(bytes: usize, stream: &Stream) -> Result<Storage> {
        Ok(Storage::Device(DeviceBlock::new(bytes, stream)?))
    }

    /// The address of byte 0 (a device address, or the host address of the bytes).
    pub fn ptr(&self) -> DevicePtr {
        match self {
            Storage::Host(h) => DevicePtr(h.addr),
            Storage::Device(d) => d.ptr(),
            Storage::Foreign(f) => f.ptr,
        }
    }

    /// The private memory pool the storage's device block came from (`None`: a default pool,
    /// or host memory).
    pub fn pool(&self) -> Option<crate::alloc::MemPoolId> {
        match self {
            Storage::Host(_) | Storage::Foreign(_) => None,
            Storage::Device(d) => d.pool(),
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Storage::Host(_) => Device::Cpu,
            Storage::Device(d) => Device::cuda(d.device()),
            Storage::Foreign(f) => Device::cuda(f.device),
        }
    }

    pub fn as_host(&self) -> Option<&HostBytes> {
        match self {
            Storage::Host(h) => Some(h),
            Storage::Device(_) | Storage::Foreign(_) => None,
        }
    }

    /// Whether the storage is pinned host memory.
    pub fn is_pinned(&self) -> bool {
        self.as_host().is_some_and(|h| h.pinned().is_some())
    }

    /// `Ok` unless a collective that was to write this storage failed (its contents are then
    /// undefined, and host reads return that error for as long as it lives).
    #[inline]
    pub fn poisoned(&self) -> Result<()> {
        match self {
            Storage::Device(block) => block.poisoned(),
            Storage::Host(_) | Storage::Foreign(_) => Ok(()),
        }
    }

    /// Marks the whole device block as used on `stream` (a stream of the block's device): once
    /// freed, it is reused only after the work queued on `stream` until then has completed.
    /// Memory made elsewhere is not the allocator's to reuse: recording a stream on it only checks
    /// the devices.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        let device = match self {
            Storage::Host(_) => {
                return Err(Error::InvalidArgument {
                    op: "record_stream",
                    reason: "record_stream applies to CUDA tensors; this tensor is in host memory".into(),
                })
            }
            Storage::Device(block) => block.device(),
            Storage::Foreign(f) => f.device,
        };
        if stream.device() != device {
            return Err(Error::InvalidArgument {
                op: "record_stream",
                reason: format!(
                    "the tensor is on cuda:{} but the stream is on cuda:{}; record a stream of the tensor's device \
                     (make that stream wait for the other device's work with wait_stream)",
                    device,
                    stream.device()
                ),
            });
        }
        let Storage::Device(block) = self else {
            return Ok(()); // foreign memory: its owner decides when it is reused
        };
        if block.ptr().0 == 0 {
            return Ok(()); // an empty tensor holds no block
        }
        block.record_stream(stream)
    }

    /// Records that device work queued on `stream` uses this storage (a user kernel's
    /// argument), as [`Storage::record_stream`] does, when the storage is a device block of the
    /// stream's device allocated on another stream; nothing otherwise (host memory, a peer's
    /// block, a block of that stream).
    #[inline]
    pub fn record_use(&self, stream: &Stream) -> Result<()> {
        match self {
            Storage::Device(block) if block.device() == stream.device() => block.record_use(stream),
            _ => Ok(()),
        }
    }
}

/// A tensor's storage as a collective that writes it sees it: without keeping it alive, it can
/// mark its contents undefined if the collective fails ([`Storage::poisoned`]).
pub(crate) struct PoisonHandle(pub(super) Weak<Storage>);

impl PoisonHandle {
    /// Marks the storage's contents undefined because of `error` (nothing if it is gone or in
    /// host memory).
    pub fn poison(&self, error: &Error) {
        if let Some(storage) = self.0.upgrade() {
            if let Storage::Device(block) = &*storage {
                block.poison(error);
            }
        }
    }
}

/// `len` zeroed bytes, or [`Error::HostOutOfMemory`] instead of an abort.
pub(crate) fn zeroed_bytes(len: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::HostOutOfMemory { requested: len })?;
    v.resize(len, 0);
    Ok(v)
}

/// Host storages addressed as one memory, for running kernels on the CPU.
pub(crate) struct HostBuffers<'a> {
    pub buffers: Vec<&'a HostBytes>,
}

impl HostBuffers<'_> {
    fn find(&self, at: DevicePtr, len: usize) -> Result<&HostBytes> {
        self.buffers.iter().copied().find(|b| at.0 >= b.addr && at.0 + len as u64 <= b.addr + b.len as u64).ok_or(
            Error::InvalidPointer {
                device: usize::MAX,
                ptr: at.0,
                reason: format!("{len} bytes here are not inside a host tensor of this op"),
            },
        )
    }
}

impl Memory for HostBuffers<'_> {
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
        let b = self.find(at, out.len())?;
        let start = (at.0 - b.addr) as usize;
        out.copy_from_slice(&b.read()?[start..start + out.len()]);
        Ok(())
    }

    fn write_runs(&self, at: DevicePtr, span: &[u8], runs: &[(usize, usize)]) -> Result<()> {
        let b = self.find(at, span.len())?;
        let base = (at.0 - b.addr) as usize;
        let mut data = b.write()?;
        for &(start, len) in runs {
            data[base + start..base + start + len].copy_from_slice(&span[start..start + len]);
        }
        Ok(())
    }
}
