//! A launch's arguments: the grid and block dimensions ([`Dim3`]), tensors marked read, written
//! or both, and scalars by value ([`KernelArg`], [`KernelScalar`]).

use crate::tensor::Tensor;

/// Grid or block dimensions (`dim3`): from a `u32` (x), or a tuple of 2 or 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type a kernel takes by value: `f32`, `f64`, `i32`, `i64`, `u32`, `u64`. Sealed.
pub trait KernelScalar: Copy + Send + Sync + sealed::Sealed + 'static {
    /// The C type's name (`float`, `int`, …), for errors.
    const NAME: &'static str;
    /// The value's native-endian bytes.
    fn to_bytes(self) -> Vec<u8>;
    /// The value from exactly its size in native-endian bytes.
    fn from_bytes(bytes: &[u8]) -> Option<Self>;
}

/// A scalar argument: its C type's name and its bytes (the first `len` of 8).
#[derive(Debug, Clone, Copy)]
pub(super) struct ScalarArg {
    pub ty: &'static str,
    pub bytes: [u8; 8],
    pub len: u8,
}

impl ScalarArg {
    /// The value's bytes.
    pub fn value(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

macro_rules! kernel_scalar {
    ($($t:ty => $name:literal),*) => {$(
        impl sealed::Sealed for $t {}
        impl KernelScalar for $t {
            const NAME: &'static str = $name;
            fn to_bytes(self) -> Vec<u8> {
                self.to_ne_bytes().to_vec()
            }
            fn from_bytes(bytes: &[u8]) -> Option<Self> {
                Some(<$t>::from_ne_bytes(bytes.try_into().ok()?))
            }
        }
        impl From<$t> for KernelArg<'_> {
            #[inline]
            fn from(v: $t) -> Self {
                let mut bytes = [0u8; 8];
                let value = v.to_ne_bytes();
                bytes[..value.len()].copy_from_slice(&value);
                KernelArg(Arg::Scalar(ScalarArg { ty: $name, bytes, len: value.len() as u8 }))
            }
        }
    )*};
}

kernel_scalar!(f32 => "float", f64 => "double", i32 => "int", i64 => "long long", u32 => "unsigned int",
    u64 => "unsigned long long");

/// How a kernel uses a tensor argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
    ReadWrite,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Arg<'a> {
    Tensor(&'a Tensor, Access),
    Scalar(ScalarArg),
}

/// One argument of [`Kernel::launch`](super::Kernel::launch): a tensor (passed as its
/// `data_ptr()`, a `T*`) that the kernel reads, writes or both, or a scalar by value
/// (`KernelArg::from(2.0f32)`, `2.0f32.into()`).
#[derive(Debug, Clone, Copy)]
pub struct KernelArg<'a>(pub(super) Arg<'a>);

impl<'a> KernelArg<'a> {
    /// A tensor the kernel only reads.
    pub fn read(t: &'a Tensor) -> KernelArg<'a> {
        KernelArg(Arg::Tensor(t, Access::Read))
    }
    /// A tensor the kernel writes (a host twin sees its current contents too).
    pub fn write(t: &'a Tensor) -> KernelArg<'a> {
        KernelArg(Arg::Tensor(t, Access::Write))
    }
    /// A tensor the kernel reads and writes.
    pub fn read_write(t: &'a Tensor) -> KernelArg<'a> {
        KernelArg(Arg::Tensor(t, Access::ReadWrite))
    }
}

/// The door's view of an argument: a tensor is an operand the launch reads or writes as declared
/// (what the stream sanitizer checks); a scalar covers no memory.
impl crate::runtime::Operand for KernelArg<'_> {
    fn pool(&self) -> Option<crate::alloc::MemPoolId> {
        match self.0 {
            Arg::Tensor(t, _) => t.pool(),
            Arg::Scalar(_) => None,
        }
    }
    fn keep_alive(&self) -> crate::runtime::KeepAlive {
        match self.0 {
            Arg::Tensor(t, _) => t.keep_alive(),
            Arg::Scalar(_) => std::sync::Arc::new(()),
        }
    }
    fn describe(&self) -> Option<(crate::runtime::SanitizerSpan, crate::race::RaceTensor)> {
        match self.0 {
            Arg::Tensor(t, _) => t.describe(),
            Arg::Scalar(_) => None,
        }
    }
    fn writes(&self) -> bool {
        matches!(self.0, Arg::Tensor(_, Access::Write | Access::ReadWrite))
    }
}
