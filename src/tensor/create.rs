//! Making tensors: `empty`, `zeros`, `ones`, `full`, `arange`, `from_slice`, and `fill_`
//! (random tensors: `random.rs`).
//!
//! Device tensors get their memory from the device's caching allocator on its current stream.
//! Contents that are one repeated byte are written with a device memset; other fills run the
//! `Fill` kernel, or — where the driver has no kernels yet (CUDA before NVRTC kernels) — a copy
//! from a host-staged pattern. Data made on the host (`arange`, `from_slice`) is copied
//! over in the stream's order.

use super::exec::{Exec, Place};
use super::layout::checked_numel;
use super::layout::Layout;
use super::storage::Storage;
use super::{IntoShape, Tensor};
use crate::device::IntoDevice;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::KernelOp;
use crate::kernels::cpu::{encode, scalar_bytes};
use crate::scalar::Scalar;
use std::sync::Arc;

/// Largest host buffer used to stage a fill pattern.
const STAGE_BYTES: usize = 1 << 20;

fn place_of(device: impl IntoDevice) -> Result<Place> {
    Place::resolve(device.into_device()?)
}

impl Tensor {
    /// A tensor of `bytes` (dense, `dtype`) on `place`.
    pub(crate) fn from_host_bytes(bytes: Vec<u8>, shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
        match place {
            Place::Cpu => Ok(Tensor::from_parts(Arc::new(Storage::host(bytes)), Layout::contiguous(shape), dtype)),
            Place::Cuda(_) => {
                let t = Tensor::empty_at(shape, dtype, place)?;
                t.write_host_bytes(&bytes)?;
                Ok(t)
            }
        }
    }

    /// A tensor whose contents are made on the host by `make(numel)` (dense bytes of `dtype`). The
    /// tensor is allocated first, so a size the device or host cannot hold is an error, not a
    /// host allocation failure.
    fn generated(shape: &[usize], dtype: DType, place: Place, make: impl FnOnce(usize) -> Vec<u8>) -> Result<Tensor> {
        let t = Tensor::empty_at(shape, dtype, place)?;
        t.write_host_bytes(&make(t.numel()))?;
        Ok(t)
    }

    /// Copies dense bytes into a contiguous device tensor, in its device's current-stream order.
    pub(crate) fn write_host_bytes(&self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let stream = self.place().stream()?;
        match stream {
            Some(s) => s.memcpy_htod(crate::driver::DevicePtr(self.data_ptr()), bytes),
            None => {
                let host = self
                    .storage
                    .as_host()
                    .ok_or(Error::InvalidArgument { op: "write_host_bytes", reason: "not a host tensor".into() })?;
                let start = self.layout.offset * self.dtype.size();
                host.write()?[start..start + bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// An uninitialized tensor (`torch.empty`); on the host its bytes are zero. `device` is a
    /// [`crate::Device`] or a string (`"cpu"`, `"cuda"`, `"cuda:1"`); `"cuda"` is the current device.
    pub fn empty(shape: impl IntoShape, dtype: DType, device: impl IntoDevice) -> Result<Tensor> {
        let shape = shape.into_shape();
        let (sizes, place) = (shape.sizes("empty")?, place_of(device)?);
        // No access follows in this call: the sanitizer takes the allocation's stack now.
        crate::runtime::sanitizer::eager_allocation_stacks(|| Tensor::empty_at(sizes, dtype, place))
    }

    /// A tensor of zeros (`torch.zeros`).
    pub fn zeros(shape: impl IntoShape, dtype: DType, device: impl IntoDevice) -> Result<Tensor> {
        let t = Tensor::empty_at(shape.into_shape().sizes("zeros")?, dtype, place_of(device)?)?;
        if let Some(s) = t.place().stream()? {
            let bytes = t.numel() * dtype.size();
            if bytes > 0 {
                s.memset_d8(t.storage.ptr(), 0, bytes, &[&t])?;
            }
        }
        Ok(t)
    }

    /// A tensor of ones (`torch.ones`).
    pub fn ones(shape: impl IntoShape, dtype: DType, device: impl IntoDevice) -> Result<Tensor> {
        let t = Tensor::empty_at(shape.into_shape().sizes("ones")?, dtype, place_of(device)?)?;
        t.fill_(1)?;
        Ok(t)
    }

    /// A tensor filled with `value` converted to `dtype` (`torch.full`).
    pub fn full(
        shape: impl IntoShape,
        value: impl Into<Scalar>,
        dtype: DType,
        device: impl IntoDevice,
    ) -> Result<Tensor> {
        let t = Tensor::empty_at(shape.into_shape().sizes("full")?, dtype, place_of(device)?)?;
        t.fill_(value)?;
        Ok(t)
    }

    /// `start, start + step, …` below `end` (above, for a negative step), as `dtype`
    /// (`torch.arange(start, end, step, dtype=…)`). With integer arguments and an integer dtype
    /// the values are exact.
    pub fn arange(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        step: impl Into<Scalar>,
        dtype: DType,
        device: impl IntoDevice,
    ) -> Result<Tensor> {
        let (start, end, step) = (start.into(), end.into(), step.into());
        let bad = |reason: &str| Error::InvalidArgument { op: "arange", reason: reason.into() };
        let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
        if st == 0.0 {
            return Err(bad("step must be nonzero"));
        }
        let count = ((e - s) / st).ceil();
        if !count.is_finite() || count < 0.0 {
            return Err(bad("upper bound and larger bound inconsistent with step sign"));
        }
        if count > (isize::MAX as f64) {
            return Err(bad("the number of elements overflows"));
        }
        let n = count as usize;
        let ints = [start, end, step].iter().all(|x| !x.is_float());
        Tensor::generated(&[n], dtype, place_of(device)?, |n| {
            if ints && !dtype.is_float() {
                let (s, st) = (start.to_i64(), step.to_i64());
                let v: Vec<i64> = (0..n as i64).map(|i| s.wrapping_add(i.wrapping_mul(st))).collect();
                encode(&v, dtype)
            } else {
                let v: Vec<f64> = (0..n).map(|i| s + i as f64 * st).collect();
                encode(&v, dtype)
            }
        })
    }

    /// A tensor of `shape` holding `data` (row-major), of `T`'s dtype (`torch.tensor(data)`).
    pub fn from_slice<T: Element>(data: &[T], shape: impl IntoShape, device: impl IntoDevice) -> Result<Tensor> {
        let shape = shape.into_shape();
        let shape = shape.sizes("from_slice")?;
        let n = checked_numel("from_slice", shape)?;
        if n != data.len() {
            return Err(Error::InvalidShape {
                op: "from_slice",
                shape: shape.iter().map(|&s| s as i64).collect(),
                reason: format!("the shape has {n} elements but the slice has {}", data.len()),
            });
        }
        let mut bytes = Vec::with_capacity(n * T::DTYPE.size());
        data.iter().for_each(|x| x.write_bytes(&mut bytes));
        Tensor::from_host_bytes(bytes, shape, T::DTYPE, place_of(device)?)
    }

    /// Sets every element to `value` converted to the tensor's dtype, in place (`t.fill_(value)`);
    /// on a device, queued on its current stream.
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<()> {
        self.check_writable("fill_")?;
        let value = value.into();
        if self.numel() == 0 {
            return Ok(());
        }
        let exec = Exec::on(self.place());
        let op = KernelOp::Fill { dst: self.buffer_view(), value };
        let Some(stream) = self.place().stream()? else {
            return exec.run(&op, &[self]);
        };
        let pattern = scalar_bytes(value, self.dtype);
        let bytes = self.numel() * self.dtype.size();
        let ptr = crate::driver::DevicePtr(self.data_ptr());
        if self.is_contiguous() && pattern.iter().all(|&b| b == pattern[0]) {
            return stream.memset_d8(ptr, pattern[0], bytes, &[self]);
        }
        match exec.run(&op, &[self]) {
            Err(Error::Unsupported { .. }) if self.is_contiguous() => {
                // No fill kernel on this driver yet: copy a host-staged pattern, chunk by chunk.
                let per = (STAGE_BYTES / pattern.len()).max(1).min(self.numel());
                let chunk = pattern.repeat(per);
                let mut done = 0;
                while done < bytes {
                    let n = chunk.len().min(bytes - done);
                    stream.memcpy_htod(ptr.offset(done), &chunk[..n])?;
                    done += n;
                }
                Ok(())
            }
            other => other,
        }
    }
}
