//! Tensor maps for the Tensor Memory Accelerator (compute capability 9.0): the descriptor
//! `cuTensorMapEncodeTiled` makes of an attention operand, which `cu/attention_tma.cu`'s copies
//! read from the kernel's parameter.

use crate::dtype::DType;
use crate::kernel::BufferView;
use cudarc::driver::sys;
use std::ffi::c_void;

/// A `CUtensorMap`: 128 opaque bytes the driver fills, 64-byte aligned in the kernel's parameter
/// (`TmaMap` of `cu/attention_tma.cu`).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct TmaMap([u64; 16]);

/// Where the driver encodes a map: CUDA 13's `CUtensorMap` is 128-byte aligned (the bytes are
/// position-free and are copied into a [`TmaMap`] after).
#[repr(C, align(128))]
struct Encoded([u64; 16]);

/// Byte strides past the innermost of a `[B, H, rows, E]` view, innermost first (rows, heads,
/// batch), where each is a multiple of 16 below 2^40 (the driver's rule); a dim of length 1
/// (whose coordinate is always 0) takes the extent of the dims inside it.
fn strides(v: &BufferView) -> Option<[u64; 3]> {
    let es = v.dtype.size() as u64;
    let mut out = [0u64; 3];
    let mut extent = v.shape[3] as u64 * es;
    for (i, d) in [2usize, 1, 0].into_iter().enumerate() {
        let s = if v.shape[d] == 1 { extent.next_multiple_of(16) } else { v.strides[d] as u64 * es };
        if !s.is_multiple_of(16) || s >= 1 << 40 {
            return None;
        }
        out[i] = s;
        extent = s * v.shape[d] as u64;
    }
    Some(out)
}

/// The tensor map of a 16-bit `[B, H, rows, E]` view (last dim contiguous, `E` a multiple of 64)
/// whose boxes are 64 columns by `box_rows` rows of one (head, batch), copied into the 128-byte
/// swizzled layout the wgmma kernels read, rows past the end filled with zeros; `None` where the
/// driver's rules (16-byte aligned start, strides multiples of 16 bytes) do not hold or it
/// refuses the map (the caller takes a kernel that copies by itself).
pub(super) fn tensor_map(v: &BufferView, box_rows: u32) -> Option<TmaMap> {
    use sys::{
        CUtensorMapDataType as Ty, CUtensorMapFloatOOBfill as Fill, CUtensorMapInterleave as Il,
        CUtensorMapL2promotion as L2, CUtensorMapSwizzle as Sw,
    };
    let ty = match v.dtype {
        DType::BF16 => Ty::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => Ty::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        _ => return None,
    };
    let base = super::ctx::addr(v);
    let dims = [3usize, 2, 1, 0].map(|d| v.shape[d] as u64);
    if v.strides[3] != 1 || !dims[0].is_multiple_of(64) || !base.is_multiple_of(16) {
        return None;
    }
    if dims.iter().any(|&d| d == 0 || d > 1 << 32) || !(1..=256).contains(&box_rows) {
        return None;
    }
    let strides = strides(v)?;
    let boxes = [64u32, box_rows, 1, 1];
    let steps = [1u32; 4];
    let mut map = Encoded([0; 16]);
    // SAFETY: `map` is 128 writable bytes aligned to 128 (CUDA 13's CUtensorMap, which the driver
    // only writes); the dims, strides, box and element-step arrays hold the 4, 3, 4 and 4
    // entries a rank-4 map reads and outlive the call; the address is only recorded (a kernel
    // reads through it later, on the view's device, while the view's buffer is alive: the launch
    // is queued on the stream its tensors are used on).
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            (&mut map as *mut Encoded).cast::<sys::CUtensorMap>(),
            ty,
            4,
            base as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            steps.as_ptr(),
            Il::CU_TENSOR_MAP_INTERLEAVE_NONE,
            Sw::CU_TENSOR_MAP_SWIZZLE_128B,
            L2::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            Fill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(TmaMap(map.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::DevicePtr;

    fn view(shape: [usize; 4], strides: [usize; 4], dtype: DType) -> BufferView {
        BufferView { ptr: DevicePtr(1 << 20), dtype, shape: shape.into(), strides: strides.into(), offset: 0 }
    }

    /// Byte strides follow the view's; dims of length 1 take their inner extent; strides that
    /// are not multiples of 16 bytes have no map.
    #[test]
    fn tensor_map_strides_follow_the_drivers_rules() {
        // [B 2, H 4, S 100, E 128] contiguous: rows 256 bytes, heads 25600, batch 102400.
        let v = view([2, 4, 100, 128], [51200, 12800, 128, 1], DType::BF16);
        assert_eq!(strides(&v), Some([256, 25600, 102400]));
        // [B, L, H, E] memory viewed as [B, H, L, E] (PyTorch's SDPA layout), batch of 1.
        let v = view([1, 4, 100, 64], [25600, 64, 256, 1], DType::F16);
        assert_eq!(strides(&v), Some([512, 128, 512]));
        // A row stride of 72 elements (144 bytes) is a multiple of 16; of 68 (136) is not.
        assert!(strides(&view([1, 1, 8, 64], [576, 576, 72, 1], DType::BF16)).is_some());
        assert_eq!(strides(&view([1, 2, 8, 64], [544, 544, 68, 1], DType::BF16)), None);
    }
}

/// On a GPU the driver encodes the map of a contiguous operand in device memory and of PyTorch's
/// SDPA layout (`[B, L, H, E]` memory seen as `[B, H, L, E]`); 136-byte rows have none.
#[cfg(test)]
mod gpu_tests {
    use super::*;
    use crate::driver::cuda::CudaDriver;
    use crate::driver::Driver;

    #[test]
    fn the_driver_encodes_maps_of_attention_operands() {
        let driver = CudaDriver::default();
        if driver.device_count() == 0 {
            crate::testing::skip(1, &driver.unavailable_reason().unwrap_or_default());
            return;
        }
        // [B 2, H 4, S 200, E 128] of bf16, as a tensor of that shape would lie.
        let bytes = 2 * 4 * 200 * 128 * 2;
        let ptr = driver.malloc(0, bytes).expect("device memory for the operand");
        let view = |shape: [usize; 4], strides: [usize; 4]| BufferView {
            ptr,
            dtype: DType::BF16,
            shape: shape.into(),
            strides: strides.into(),
            offset: 0,
        };
        let contiguous = tensor_map(&view([2, 4, 200, 128], [102400, 25600, 128, 1]), 128).is_some();
        let blhe = tensor_map(&view([2, 4, 200, 64], [51200, 64, 256, 1]), 64).is_some();
        let odd = tensor_map(&view([1, 2, 8, 64], [544, 544, 68, 1]), 64).is_some();
        // SAFETY: memory from this driver's malloc for device 0, freed once, nothing queued on it.
        unsafe { driver.free(0, ptr) }.expect("free");
        assert_eq!((contiguous, blhe, odd), (true, true, false), "contiguous, [B, L, H, E] memory, 136-byte rows");
    }
}
