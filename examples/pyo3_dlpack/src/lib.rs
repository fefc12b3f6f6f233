//! `cudasem_dlpack`: a Python module that runs cudasem's ops on PyTorch's CUDA tensors, and hands
//! the results back, through DLPack — without a copy either way.
//!
//! ```python
//! import torch, cudasem_dlpack
//! x = torch.randn(4, 2 * 64, device="cuda")
//! out = torch.from_dlpack(cudasem_dlpack.swiglu_from_torch(x))  # silu(x[:, :64]) * x[:, 64:]
//! ```
//!
//! In: [`ImportRequest`] calls `x.__dlpack__(stream=…)` with cudasem's current stream of the tensor's
//! device, so PyTorch makes that stream wait for its own work before handing the capsule over;
//! [`Tensor::from_dlpack`] views the memory (PyTorch's deleter runs when the last view is gone).
//! Out: the result is a [`CudasemTensor`] with `__dlpack__` / `__dlpack_device__`, so
//! `torch.from_dlpack` asks for it with PyTorch's current stream, which [`Tensor::to_dlpack`] makes
//! wait for cudasem's work (DLPack's handshake); the capsule keeps the tensor alive until PyTorch
//! calls its deleter.

use cudasem::cuda;
use cudasem::{DType, Device, DlpackStream, Tensor};
use dlpark::ffi::{DLDevice, DLDeviceType};
use dlpark::python::consumer::stream as py_stream;
use dlpark::python::{CudaStreamRequest, ExportAbi, ExportRequest, ImportRequest, ImportedDlpack, StreamArg};
use dlpark::DlpackFlags;
use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::IntoPyObject;

/// A cudasem error as a Python `RuntimeError` (variant and message).
fn py_err(e: cudasem::Error) -> PyErr {
    PyRuntimeError::new_err(format!("{e:?}"))
}

/// The consumer's stream handed to a producer's `__dlpack__`: a native CUDA stream of cudasem.
struct CudasemStream(u64);

// SAFETY: the handle is a cudasem stream of the producer's device (its current stream there), alive
// for the process; `cuda` encodes it with DLPack's CUDA convention (0, the legacy stream, as 1).
unsafe impl dlpark::python::DlpackStream for CudasemStream {
    fn as_python_arg(&self, _py: Python<'_>, _device: DLDevice) -> PyResult<StreamArg> {
        Ok(py_stream::cuda(self.0 as usize as *mut std::ffi::c_void))
    }
}

/// `x` (any object with `__dlpack__`: a torch CUDA tensor) as a cudasem tensor over the same memory,
/// ready on cudasem's current stream of its device.
fn import(x: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let request = ImportRequest::new(x.as_borrowed())?;
    let device = request.device()?;
    if device.device_type != DLDeviceType::CUDA {
        return Err(PyTypeError::new_err("cudasem_dlpack takes CUDA tensors (DLPack device type kDLCUDA)"));
    }
    let index = usize::try_from(device.device_id).map_err(|_| PyValueError::new_err("negative device id"))?;
    let stream = cuda::current_stream(index).map_err(py_err)?;
    let raw = stream.cuda_stream().map_err(py_err)?;
    match request.import(Some(&CudasemStream(raw)), None)? {
        ImportedDlpack::Versioned(managed) => Tensor::from_dlpack(managed).map_err(py_err),
        ImportedDlpack::Legacy(_) => Err(PyBufferError::new_err(
            "the producer exported a legacy (pre-1.0) DLPack capsule; cudasem takes versioned ones",
        )),
    }
}

fn cuda_index(t: &Tensor) -> PyResult<usize> {
    match t.device() {
        Device::Cuda(Some(i)) => Ok(i),
        d => Err(PyValueError::new_err(format!("not a CUDA tensor: {d}"))),
    }
}

/// A cudasem tensor held by Python: give it to `torch.from_dlpack` (or any DLPack consumer).
#[pyclass(frozen)]
struct CudasemTensor(Tensor);

#[pymethods]
impl CudasemTensor {
    /// DLPack's export (`__dlpack__`): a versioned capsule over the tensor's memory, after the
    /// consumer's `stream` was made to wait for cudasem's work on the tensor.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = ExportRequest::parse(stream.as_ref(), max_version, dl_device, copy)?;
        let index = cuda_index(&self.0)?;
        request.validate_zero_copy(DLDevice::cuda(index as i32), DlpackFlags::empty())?;
        if request.abi() == ExportAbi::Legacy {
            return Err(PyBufferError::new_err("cudasem exports versioned DLPack tensors: pass max_version=(1, 0)"));
        }
        let consumer = match request.cuda_stream()? {
            CudaStreamRequest::Omitted | CudaStreamRequest::LegacyDefault => DlpackStream::LegacyDefault,
            CudaStreamRequest::PerThreadDefault => DlpackStream::PerThreadDefault,
            CudaStreamRequest::NoSync => DlpackStream::NoSync,
            CudaStreamRequest::Pointer(p) => {
                // SAFETY: the consumer passes its live stream of this device for the duration of the
                // call, as DLPack's protocol says; PyTorch's streams live as long as the process.
                unsafe { DlpackStream::from_raw(Some(p as i64), index) }.map_err(py_err)?
            }
        };
        let managed = self.0.to_dlpack(&consumer).map_err(py_err)?;
        Ok(managed.into_pyobject(py)?.unbind())
    }

    /// `(kDLCUDA, device index)`.
    fn __dlpack_device__(&self) -> PyResult<(u32, i32)> {
        Ok((DLDeviceType::CUDA.0, cuda_index(&self.0)? as i32))
    }

    /// The device address of the first element (`t.data_ptr()`).
    fn data_ptr(&self) -> u64 {
        self.0.data_ptr()
    }

    /// The tensor's shape.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.0.shape().to_vec()
    }

    /// The elements in row-major order, as Python floats (a host read, on cudasem's current stream).
    fn tolist(&self) -> PyResult<Vec<f64>> {
        self.0.to_dtype(DType::F64).and_then(|t| t.to_vec::<f64>()).map_err(py_err)
    }
}

/// A cudasem float32 tensor of `values` with `shape` on CUDA device `device`: cudasem's own memory,
/// for `torch.from_dlpack` (and, on the simulated machine, for the module's self-check).
#[pyfunction]
#[pyo3(signature = (values, shape, device=0))]
fn tensor(values: Vec<f32>, shape: Vec<usize>, device: usize) -> PyResult<CudasemTensor> {
    Tensor::from_slice(&values, shape, Device::cuda(device)).map(CudasemTensor).map_err(py_err)
}

/// SwiGLU of `x`'s last dimension, computed by cudasem on `x`'s memory: with `a, b` its two halves,
/// `silu(a) * b = a * sigmoid(a) * b` (cudasem's `sigmoid` and `mul`).
#[pyfunction]
fn swiglu_from_torch(x: &Bound<'_, PyAny>) -> PyResult<CudasemTensor> {
    let t = import(x)?;
    let last = t.shape().last().copied().unwrap_or(0);
    if t.dim() == 0 || last % 2 != 0 {
        return Err(PyValueError::new_err(format!("swiglu needs an even last dimension, got shape {:?}", t.shape())));
    }
    let (a, b) = (t.narrow(-1, 0, last / 2).map_err(py_err)?, t.narrow(-1, last / 2, last / 2).map_err(py_err)?);
    let silu = (&a * &a.sigmoid().map_err(py_err)?).map_err(py_err)?;
    Ok(CudasemTensor((&silu * &b).map_err(py_err)?))
}

/// Multiplies `x` by `alpha` in place, by cudasem, in `x`'s own memory.
#[pyfunction]
fn mul_(x: &Bound<'_, PyAny>, alpha: f64) -> PyResult<()> {
    import(x)?.mul_(alpha).map_err(py_err)
}

/// The `data_ptr()` cudasem sees for `x` imported through DLPack (PyTorch's own, if no copy happened).
#[pyfunction]
fn data_ptr_via_dlpack(x: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(import(x)?.data_ptr())
}

/// Which cudasem driver runs (`"cuda"`; `"sim"` cannot address PyTorch's memory).
#[pyfunction]
fn driver_name() -> &'static str {
    cuda::driver_name()
}

/// The module.
#[pymodule]
fn cudasem_dlpack(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CudasemTensor>()?;
    m.add_function(wrap_pyfunction!(tensor, m)?)?;
    m.add_function(wrap_pyfunction!(swiglu_from_torch, m)?)?;
    m.add_function(wrap_pyfunction!(mul_, m)?)?;
    m.add_function(wrap_pyfunction!(data_ptr_via_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(driver_name, m)?)?;
    Ok(())
}
