//! The checks at a kernel's door: a name, a cubin image, a launch shape against the device
//! limits, and each tensor argument (its device, host memory pinned, contiguous).

use super::args::Dim3;
use crate::device::Device;
use crate::driver::LaunchShape;
use crate::error::{Error, Result};
use crate::runtime::is_peer_access_enabled;
use crate::tensor::Tensor;

/// The most threads in one block, and the most in z.
const MAX_BLOCK_THREADS: u64 = 1024;
const MAX_BLOCK_Z: u32 = 64;
/// The most blocks in y and z, and in x.
const MAX_GRID_YZ: u32 = 65535;
const MAX_GRID_X: u32 = i32::MAX as u32;
/// The most dynamic shared memory per block without opting in (48 KiB).
const MAX_SHARED_MEM: usize = 48 << 10;

/// The launch shape, checked against the device limits.
pub(super) fn check_shape(grid: Dim3, block: Dim3, shared_mem: usize) -> Result<LaunchShape> {
    let threads = block.x as u64 * block.y as u64 * block.z as u64;
    let bad = if [grid.x, grid.y, grid.z, block.x, block.y, block.z].contains(&0) {
        Some("every grid and block dimension must be at least 1".to_owned())
    } else if threads > MAX_BLOCK_THREADS {
        Some(format!("a block of {threads} threads exceeds the limit of {MAX_BLOCK_THREADS} threads per block"))
    } else if block.z > MAX_BLOCK_Z {
        Some(format!("block z of {} exceeds the limit of {MAX_BLOCK_Z}", block.z))
    } else if grid.x > MAX_GRID_X || grid.y > MAX_GRID_YZ || grid.z > MAX_GRID_YZ {
        Some(format!("grid {grid:?} exceeds the limits (x ≤ 2³¹−1, y and z ≤ {MAX_GRID_YZ})"))
    } else if shared_mem > MAX_SHARED_MEM {
        Some(format!("{shared_mem} bytes of shared memory exceed the limit of {MAX_SHARED_MEM} bytes per block"))
    } else {
        None
    };
    match bad {
        Some(reason) => Err(Error::InvalidArgument { op: "launch", reason }),
        None => Ok(LaunchShape {
            grid: [grid.x, grid.y, grid.z],
            block: [block.x, block.y, block.z],
            shared_mem: shared_mem as u32,
        }),
    }
}

/// Where a tensor argument's memory is, once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Device memory of the launch's device or of a peer it may access.
    Device,
    /// Pinned host memory (the kernel reaches it through its mapped address).
    Pinned,
}

/// Tensor argument `i` must be contiguous, and a CUDA tensor of `device` (or of a peer it may
/// access) or pinned host memory.
pub(super) fn check_tensor(i: usize, t: &Tensor, device: usize) -> Result<Place> {
    let place = match t.device() {
        Device::Cuda(Some(d)) if d == device || is_peer_access_enabled(device, d)? => Place::Device,
        Device::Cpu if t.is_pinned() => Place::Pinned,
        Device::Cpu => {
            return Err(Error::InvalidArgument {
                op: "launch",
                reason: format!(
                    "argument {i} is a CPU tensor in pageable memory, which a kernel cannot reach; pass a CUDA \
                     tensor, or pinned host memory (Tensor::pin_memory)"
                ),
            })
        }
        other => return Err(Error::DeviceMismatch { op: "launch", lhs: Device::cuda(device), rhs: other }),
    };
    if !t.is_contiguous() {
        return Err(Error::InvalidArgument {
            op: "launch",
            reason: format!("argument {i}: a kernel's tensor arguments must be contiguous (call .contiguous() first)"),
        });
    }
    Ok(place)
}

/// `name` must be a C identifier.
pub(super) fn check_name(op: &'static str, name: &str) -> Result<()> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if name.is_empty() || !name.chars().all(ident) || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(Error::InvalidArgument { op, reason: format!("kernel name {name:?} is not a C identifier") });
    }
    Ok(())
}

/// The fatbin header's magic number.
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// `e_machine` of a CUDA ELF image.
const EM_CUDA: u16 = 190;

/// `bytes` must be a whole cubin (a 64-bit little-endian CUDA ELF whose tables lie inside it,
/// naming `name`) or a whole fatbin, before the driver reads it.
pub(super) fn check_cubin(bytes: &[u8], name: &str) -> Result<()> {
    let bad = |reason: String| Err(Error::InvalidArgument { op: "Kernel::from_cubin", reason });
    let u16_at = |o: usize| bytes.get(o..o + 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]])) as u64;
    let u64_at =
        |o: usize| bytes.get(o..o + 8).map_or(u64::MAX, |b| b.iter().rev().fold(0u64, |v, &x| v << 8 | x as u64));
    let len = bytes.len() as u64;
    if bytes.starts_with(b"\x7fELF") {
        if bytes.len() < 64 || bytes[4] != 2 || bytes[5] != 1 {
            return bad("the ELF image is truncated or not 64-bit little-endian (a cubin is)".into());
        }
        if u16_at(18) != EM_CUDA as u64 {
            return bad(format!("the ELF image is for machine {} (a cubin's is {EM_CUDA}, CUDA)", u16_at(18)));
        }
        let ends = |off: u64, size: u64, n: u64| off.checked_add(size.saturating_mul(n)).is_some_and(|e| e <= len);
        if !ends(u64_at(32), u16_at(54), u16_at(56)) || !ends(u64_at(40), u16_at(58), u16_at(60)) {
            return bad(format!("the cubin is truncated: its tables run past its {len} bytes"));
        }
        let mut symbol = Vec::with_capacity(name.len() + 2);
        symbol.push(0);
        symbol.extend_from_slice(name.as_bytes());
        symbol.push(0);
        if !bytes.windows(symbol.len()).any(|w| w == symbol.as_slice()) {
            return bad(format!("the cubin defines no kernel named {name:?}"));
        }
        return Ok(());
    }
    if bytes.len() >= 16 && bytes[..4] == FATBIN_MAGIC.to_le_bytes() {
        let whole = u16_at(6).checked_add(u64_at(8)).is_some_and(|e| e <= len);
        return if whole {
            Ok(())
        } else {
            bad(format!("the fatbin is truncated: its header says more than {len} bytes"))
        };
    }
    bad("the image is neither a cubin (ELF) nor a fatbin; PTX text goes to Kernel::from_ptx".into())
}
