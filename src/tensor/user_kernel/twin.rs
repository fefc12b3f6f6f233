//! A kernel's host twin: what the simulated machine runs for a kernel ([`HostLaunch`]: the
//! launch's shape and its arguments' bytes), queued on the stream's worker as a kernel.

use super::args::{Access, Arg, KernelArg, KernelScalar};
use crate::driver::comm::{DeviceBytes, HostKernel};
use crate::driver::{DevicePtr, HostPtr, LaunchShape};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use std::sync::Arc;

use super::Dim3;

/// An argument as a host twin sees it.
#[derive(Debug)]
enum HostArg {
    Tensor { bytes: Vec<u8>, dtype: DType, access: Access },
    Scalar { ty: &'static str, bytes: Vec<u8> },
}

/// One launch as a host twin sees it: the shape, and the arguments in order, tensors as their
/// bytes (read from device memory before the twin runs; those given as `write` or `read_write`
/// written back after it returns `Ok`) and scalars by value.
#[derive(Debug)]
pub struct HostLaunch {
    grid: Dim3,
    block: Dim3,
    shared_mem: usize,
    args: Vec<HostArg>,
}

impl HostLaunch {
    /// The grid's dimensions.
    pub fn grid(&self) -> Dim3 {
        self.grid
    }
    /// The block's dimensions.
    pub fn block(&self) -> Dim3 {
        self.block
    }
    /// Dynamic shared memory bytes per block.
    pub fn shared_mem(&self) -> usize {
        self.shared_mem
    }
    /// The number of arguments.
    pub fn num_args(&self) -> usize {
        self.args.len()
    }

    fn tensor(&self, i: usize) -> Result<(&[u8], DType)> {
        match self.args.get(i) {
            Some(HostArg::Tensor { bytes, dtype, .. }) => Ok((bytes, *dtype)),
            _ => Err(twin_arg(i, "is not a tensor")),
        }
    }

    /// Tensor argument `i`'s bytes.
    pub fn bytes(&self, i: usize) -> Result<&[u8]> {
        self.tensor(i).map(|(b, _)| b)
    }

    /// Tensor argument `i`'s bytes, to change; an error for a tensor given as `read`.
    pub fn bytes_mut(&mut self, i: usize) -> Result<&mut [u8]> {
        match self.args.get_mut(i) {
            Some(HostArg::Tensor { access: Access::Read, .. }) => {
                Err(twin_arg(i, "was given as KernelArg::read and cannot be written"))
            }
            Some(HostArg::Tensor { bytes, .. }) => Ok(bytes),
            _ => Err(twin_arg(i, "is not a tensor")),
        }
    }

    /// Tensor argument `i`'s elements; an error when its dtype is not `T`'s.
    pub fn read<T: Element>(&self, i: usize) -> Result<Vec<T>> {
        let (bytes, dtype) = self.tensor(i)?;
        if dtype != T::DTYPE {
            return Err(twin_arg(i, &format!("is a {dtype:?} tensor, read as {:?}", T::DTYPE)));
        }
        bytes
            .chunks_exact(dtype.size())
            .map(|c| T::read_bytes(c).ok_or_else(|| twin_arg(i, "holds a bad element")))
            .collect()
    }

    /// Writes `values` as tensor argument `i`'s elements (as many as it has, of its dtype).
    pub fn write<T: Element>(&mut self, i: usize, values: &[T]) -> Result<()> {
        let dtype = self.tensor(i)?.1;
        let out = self.bytes_mut(i)?;
        if dtype != T::DTYPE || out.len() != values.len() * dtype.size() {
            return Err(twin_arg(
                i,
                &format!(
                    "is a {dtype:?} tensor of {} bytes, written as {} {:?} elements",
                    out.len(),
                    values.len(),
                    T::DTYPE
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(out.len());
        values.iter().for_each(|v| v.write_bytes(&mut bytes));
        out.copy_from_slice(&bytes);
        Ok(())
    }

    /// Scalar argument `i`; an error when it was not given as a `T`.
    pub fn scalar<T: KernelScalar>(&self, i: usize) -> Result<T> {
        match self.args.get(i) {
            Some(HostArg::Scalar { ty, bytes }) if *ty == T::NAME => {
                T::from_bytes(bytes).ok_or_else(|| twin_arg(i, "holds bad bytes"))
            }
            _ => Err(twin_arg(i, &format!("is not a {}", T::NAME))),
        }
    }
}

fn twin_arg(i: usize, what: &str) -> Error {
    Error::InvalidArgument { op: "host twin", reason: format!("kernel argument {i} {what}") }
}

/// A kernel's host twin (see [`Kernel::with_host_twin`](super::Kernel::with_host_twin)).
pub(super) type Twin = Arc<dyn Fn(&mut HostLaunch) -> Result<()> + Send + Sync + 'static>;

/// Where a tensor argument's bytes are: device memory, or pinned host memory.
#[derive(Debug, Clone, Copy)]
enum At {
    Device(DevicePtr),
    Host(HostPtr),
}

/// What a tensor argument is to the worker: where, its byte length, dtype and access.
type TensorSpan = (At, usize, DType, Access);

/// The host kernel that runs `twin` over the arguments' memory.
pub(super) fn host_kernel(twin: Twin, shape: LaunchShape, args: &[KernelArg]) -> HostKernel {
    let spans: Vec<std::result::Result<TensorSpan, (&'static str, Vec<u8>)>> = args
        .iter()
        .map(|a| match &a.0 {
            Arg::Tensor(t, access) => {
                let at =
                    if t.is_pinned() { At::Host(HostPtr(t.data_ptr())) } else { At::Device(DevicePtr(t.data_ptr())) };
                Ok((at, t.numel() * t.element_size(), t.dtype(), *access))
            }
            Arg::Scalar(s) => Err((s.ty, s.value().to_vec())),
        })
        .collect();
    let [gx, gy, gz] = shape.grid;
    let [bx, by, bz] = shape.block;
    Arc::new(move |mem: &dyn DeviceBytes| {
        let mut launch = HostLaunch {
            grid: Dim3 { x: gx, y: gy, z: gz },
            block: Dim3 { x: bx, y: by, z: bz },
            shared_mem: shape.shared_mem as usize,
            args: Vec::with_capacity(spans.len()),
        };
        for s in &spans {
            launch.args.push(match s {
                Ok((at, len, dtype, access)) => {
                    let mut bytes = vec![0u8; *len];
                    match at {
                        At::Device(p) => mem.read(*p, &mut bytes)?,
                        At::Host(p) => mem.read_host(*p, &mut bytes)?,
                    }
                    HostArg::Tensor { bytes, dtype: *dtype, access: *access }
                }
                Err((ty, bytes)) => HostArg::Scalar { ty, bytes: bytes.clone() },
            });
        }
        twin(&mut launch)?;
        for (s, a) in spans.iter().zip(&launch.args) {
            if let (Ok((at, _, _, access)), HostArg::Tensor { bytes, .. }) = (s, a) {
                match at {
                    _ if *access == Access::Read => {}
                    At::Device(p) => mem.write(*p, bytes)?,
                    At::Host(p) => mem.write_host(*p, bytes)?,
                }
            }
        }
        Ok(())
    })
}
