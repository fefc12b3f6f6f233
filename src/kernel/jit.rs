//! A jiterator op (`torch.cuda.jiterator`): a user's C++ template function applied elementwise.
//! The tensor layer parses the function ([`JitCode`]), promotes, broadcasts and checks devices,
//! and lowers a call to one [`JitOp`] over [`BufferView`]s; the CUDA driver compiles the
//! function into its elementwise kernels, the simulated machine into a host library.

use super::{BufferView, DevicePtr};
use crate::dtype::DType;
use std::sync::Arc;

/// What one parameter of a jiterator function receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JitParam {
    /// Tensor input `k` (its element, in the compute type).
    Input(u8),
    /// Named scalar `k` (in the compute type).
    Scalar(u8),
    /// Output `k`, a `T&` the function assigns (multi-output functions).
    Output(u8),
}

/// A parsed jiterator function: the user's code, the entry function's name and what each of its
/// parameters receives, in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JitCode {
    /// The user's code, as given.
    pub source: Arc<str>,
    /// The entry function (the last template function of the code).
    pub name: String,
    /// The entry function's parameters in order.
    pub params: Vec<JitParam>,
    /// Number of outputs; with more than one, the function returns them through `T&` parameters.
    pub outputs: usize,
}

impl JitCode {
    /// Tensor inputs the function takes.
    pub fn inputs(&self) -> usize {
        self.params.iter().filter(|p| matches!(p, JitParam::Input(_))).count()
    }

    /// Named scalars the function takes.
    pub fn scalars(&self) -> usize {
        self.params.iter().filter(|p| matches!(p, JitParam::Scalar(_))).count()
    }

    /// The C++ call of the entry function instantiated for `ct`, its arguments written by
    /// `input(k)`, `scalar(k)` and `output(k)`.
    pub fn call(
        &self,
        ct: &str,
        input: impl Fn(usize) -> String,
        scalar: impl Fn(usize) -> String,
        output: impl Fn(usize) -> String,
    ) -> String {
        let args: Vec<String> = self
            .params
            .iter()
            .map(|p| match *p {
                JitParam::Input(k) => input(k as usize),
                JitParam::Scalar(k) => scalar(k as usize),
                JitParam::Output(k) => output(k as usize),
            })
            .collect();
        format!("{}<{ct}>({})", self.name, args.join(", "))
    }
}

/// The C++ type a jiterator function computes in for `compute` (its `T`).
pub fn jit_ctype(compute: DType) -> &'static str {
    match compute {
        DType::Bool => "bool",
        DType::U8 => "unsigned char",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::F16 | DType::BF16 | DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The dtype a jiterator computes in for operands promoted to `common`: `f32` for the half
/// types (as PyTorch's `opmath_type`), the dtype itself otherwise.
pub fn jit_compute(common: DType) -> DType {
    match common {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// One jiterator call: every input broadcast to the outputs' shape, each converted to `common`
/// (the promoted dtype) and then to its compute type; each output (contiguous, of `common`)
/// receives the function's result converted back.
#[derive(Debug, Clone)]
pub struct JitOp {
    /// The function.
    pub code: Arc<JitCode>,
    /// The promoted dtype of the inputs, and the outputs' dtype.
    pub common: DType,
    /// The inputs, broadcast to the outputs' shape.
    pub ins: Vec<BufferView>,
    /// The outputs (contiguous, dtype `common`).
    pub outs: Vec<BufferView>,
    /// The scalars' values as elements of `jit_compute(common)`, native-endian, in order.
    pub scalars: Vec<u8>,
    /// The same values in device memory of the stream's device (the CUDA driver's kernels read
    /// them there; null when there are none, or on the simulated machine).
    pub scalars_at: DevicePtr,
}

impl JitOp {
    /// Checks what a driver relies on: as many inputs and outputs as the function has, every
    /// view of the outputs' shape, the outputs contiguous and of the promoted dtype, and a
    /// scalar value for each scalar parameter.
    pub fn validate(&self) -> crate::error::Result<()> {
        let bad = |reason: String| Err(crate::error::Error::Internal { op: "jiterator", reason });
        let code = &self.code;
        if self.ins.len() != code.inputs() || self.outs.len() != code.outputs || self.outs.is_empty() {
            return bad(format!("{} inputs and {} outputs for {}", self.ins.len(), self.outs.len(), code.name));
        }
        let shape = &self.outs[0].shape;
        if self.ins.iter().chain(&self.outs).any(|v| v.shape != *shape)
            || self.outs.iter().any(|v| !v.is_contiguous() || v.dtype != self.common)
        {
            return bad("views of different shapes, or outputs not contiguous of the promoted dtype".into());
        }
        if self.scalars.len() != code.scalars() * self.compute().size() {
            return bad(format!("{} bytes of scalars for {} scalar parameters", self.scalars.len(), code.scalars()));
        }
        Ok(())
    }

    /// The dtype the function computes in.
    pub fn compute(&self) -> DType {
        jit_compute(self.common)
    }
}
