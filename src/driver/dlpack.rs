//! DLPack's C side, through `dlpark`: the codes of devices and dtypes, and building the versioned
//! managed tensor (`DLManagedTensorVersioned`) of an export. The tensor layer (`tensor/dlpack.rs`)
//! decides what to export and checks what it imports; the one unsafe step of the protocol, vouching
//! for a finished descriptor, is here.

use crate::dtype::DType;
use crate::error::{Error, Result};
use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType};
use dlpark::metadata::Dynamic;
use dlpark::versioned::Dlpack;
use dlpark::DlpackFlags;

/// DLPack's dtype of `dtype` (one lane).
pub(crate) fn dl_dtype(dtype: DType) -> DLDataType {
    let (code, bits) = match dtype {
        DType::Bool => (DLDataTypeCode::BOOL, 8),
        DType::U8 => (DLDataTypeCode::UINT, 8),
        DType::I32 => (DLDataTypeCode::INT, 32),
        DType::I64 => (DLDataTypeCode::INT, 64),
        DType::F16 => (DLDataTypeCode::FLOAT, 16),
        DType::BF16 => (DLDataTypeCode::BFLOAT, 16),
        DType::F32 => (DLDataTypeCode::FLOAT, 32),
        DType::F64 => (DLDataTypeCode::FLOAT, 64),
    };
    DLDataType::scalar(code, bits)
}

/// cudasem's dtype of a DLPack dtype; `op`'s [`Error::InvalidArgument`] for one it has not.
pub(crate) fn dtype_of(op: &'static str, dt: DLDataType) -> Result<DType> {
    let found = DType::ALL.into_iter().find(|&d| {
        let want = dl_dtype(d);
        want.code == dt.code && want.bits == dt.bits && dt.lanes == 1
    });
    found.ok_or_else(|| Error::InvalidArgument {
        op,
        reason: format!(
            "DLPack dtype (code {}, {} bits, {} lanes) has no cudasem dtype; cudasem has bool, uint8, int32, \
             int64, float16, bfloat16, float32 and float64 (one lane): convert the tensor in its library first",
            dt.code.0, dt.bits, dt.lanes
        ),
    })
}

/// Where an exported or imported tensor's memory is, in DLPack's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DlPlace {
    /// `kDLCUDA` with the device's index.
    Cuda(usize),
    /// `kDLCUDAHost`: pinned host memory.
    CudaHost,
    /// `kDLCPU`: pageable host memory.
    Cpu,
}

impl DlPlace {
    fn device(self) -> DLDevice {
        match self {
            DlPlace::Cuda(i) => DLDevice::cuda(i32::try_from(i).unwrap_or(i32::MAX)),
            DlPlace::CudaHost => DLDevice { device_type: DLDeviceType::CUDAHOST, device_id: 0 },
            DlPlace::Cpu => DLDevice::CPU,
        }
    }

    /// The place of a DLPack device; `op`'s [`Error::InvalidArgument`] for a device type cudasem does
    /// not address.
    pub fn of(op: &'static str, device: DLDevice) -> Result<DlPlace> {
        match device.device_type {
            DLDeviceType::CUDA => {
                usize::try_from(device.device_id).map(DlPlace::Cuda).map_err(|_| Error::InvalidArgument {
                    op,
                    reason: format!("negative CUDA device id {} in the DLPack tensor", device.device_id),
                })
            }
            DLDeviceType::CUDAHOST => Ok(DlPlace::CudaHost),
            DLDeviceType::CPU => Ok(DlPlace::Cpu),
            other => Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "DLPack device type {} (device id {}) is not one cudasem addresses: it imports CUDA device \
                     memory (kDLCUDA, type 2); copy the tensor to a CUDA device in its library first",
                    other.0, device.device_id
                ),
            }),
        }
    }
}

/// What an export describes: memory, place, dtype and layout (in elements).
pub(crate) struct ExportSpec<'a> {
    /// The address `byte_offset` counts from.
    pub data: u64,
    pub byte_offset: u64,
    pub place: DlPlace,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub strides: &'a [usize],
}

/// A versioned managed tensor (writable, DLPack's current version) describing `spec`, whose deleter
/// drops `owner`.
///
/// The caller guarantees what the descriptor claims: `owner` keeps the memory `spec` describes
/// alive and writable until it is dropped, and the consumer may write it.
pub(crate) fn export<T: Send + 'static>(spec: &ExportSpec<'_>, owner: Box<T>) -> Result<Dlpack> {
    let as_i64 = |v: &[usize], what: &str| -> Result<Vec<i64>> {
        v.iter().map(|&n| i64::try_from(n)).collect::<std::result::Result<_, _>>().map_err(|_| Error::InvalidArgument {
            op: "Tensor::to_dlpack",
            reason: format!("a {what} entry does not fit DLPack's int64"),
        })
    };
    let (shape, strides) = (as_i64(spec.shape, "size")?, as_i64(spec.strides, "stride")?);
    let mut init = Dynamic::new(shape, strides).initialize(owner).map_err(|e| Error::InvalidArgument {
        op: "Tensor::to_dlpack",
        reason: format!("the DLPack descriptor could not be made: {e}"),
    })?;
    init.set_data(spec.data as usize as *mut std::ffi::c_void)
        .set_device(spec.place.device())
        .set_dtype(dl_dtype(spec.dtype))
        .set_byte_offset(spec.byte_offset);
    // Writable, not a copy: the flags DLPack's default (none) means.
    init.set_flags(DlpackFlags::empty())
        .map_err(|e| Error::Internal { op: "Tensor::to_dlpack", reason: format!("DLPack flags: {e}") })?;
    // SAFETY:
    // - the descriptor is complete: data, device, dtype, byte offset and flags set above; shape and
    //   explicit strides copied into the managed allocation by `Dynamic::new`, which lives with it;
    // - the data stays valid and writable until the deleter runs, because the deleter is what drops
    //   `owner`, which keeps the memory alive (this function's contract with its caller);
    // - the flags claim nothing (not read-only, not a copy), which holds for any memory.
    Ok(unsafe { init.finish() })
}
