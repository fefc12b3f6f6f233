//! A jiterator op (`torch.cuda.jiterator`): a user's C++ template function applied elementwise.
//! The tensor layer parses the function ([`JitCode`]), promotes, broadcasts and checks devices,
//! and lowers a call to one [`JitOp`] over [`BufferView`]s; the CUDA driver compiles the
//! function into its elementwise kernels, the simulated machine into a host library.

use super::{BufferView, DevicePtr, Dims};
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

/// A one-output jiterator call over dense operands: `n` contiguous elements at each input's
/// address and at the output's (of the promoted dtype `common`). The short form of the
/// [`JitOp`] that [`to_jit_op`](Self::to_jit_op) makes (every view one run of `n`), for the
/// common small call: drivers may launch it without building, validating or classifying views
/// ([`Driver::launch_dense_jit`](crate::driver::Driver::launch_dense_jit)), as
/// [`DenseBinary`](super::DenseBinary) does for the built-in binary ops.
#[derive(Debug, Clone, Copy)]
pub struct DenseJit<'a> {
    /// The function (one output).
    pub code: &'a Arc<JitCode>,
    /// The promoted dtype of the inputs, and the output's dtype.
    pub common: DType,
    /// Elements of each operand.
    pub n: usize,
    /// The address of the output's first element.
    pub out: DevicePtr,
    /// Each input's first element's address and its dtype, in order.
    pub ins: &'a [(DevicePtr, DType)],
    /// The scalars' values as elements of `jit_compute(common)`, native-endian, in order.
    pub scalars: &'a [u8],
    /// The same values in device memory (as [`JitOp::scalars_at`]).
    pub scalars_at: DevicePtr,
}

impl DenseJit<'_> {
    /// The same call as a [`JitOp`] over one-dimensional views of `n` elements.
    pub fn to_jit_op(&self) -> JitOp {
        let view = |ptr: DevicePtr, dtype: DType| BufferView {
            ptr,
            dtype,
            shape: Dims::from(&[self.n][..]),
            strides: Dims::from(&[1][..]),
            offset: 0,
        };
        JitOp {
            code: self.code.clone(),
            common: self.common,
            ins: self.ins.iter().map(|&(p, d)| view(p, d)).collect(),
            outs: vec![view(self.out, self.common)],
            scalars: self.scalars.to_vec(),
            scalars_at: self.scalars_at,
        }
    }

    /// The dtype the function computes in.
    pub fn compute(&self) -> DType {
        jit_compute(self.common)
    }

    /// Checks what a driver relies on (as [`JitOp::validate`]): a one-output function given as
    /// many inputs as it takes and a value for each scalar, and for `n > 0` operands whose byte
    /// extents neither overflow nor start at a null address.
    #[inline]
    pub fn validate(&self) -> crate::error::Result<()> {
        let bad = |reason: String| Err(crate::error::Error::Internal { op: "jiterator", reason });
        let code = &**self.code;
        if code.outputs != 1 || self.ins.len() != code.inputs() {
            return bad(format!("{} inputs and 1 output for {}", self.ins.len(), code.name));
        }
        if self.scalars.len() != code.scalars() * self.compute().size() {
            return bad(format!("{} bytes of scalars for {} scalar parameters", self.scalars.len(), code.scalars()));
        }
        let fits = |ptr: DevicePtr, dtype: DType| {
            ptr.0 != 0 && self.n.checked_mul(dtype.size()).is_some_and(|b| ptr.0.checked_add(b as u64).is_some())
        };
        if self.n > 0 && !(fits(self.out, self.common) && self.ins.iter().all(|&(p, d)| fits(p, d))) {
            return bad(format!(
                "a dense call over {} elements with a null address or an extent that overflows",
                self.n
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense call is the jiterator op over one-dimensional views of `n` elements, and is
    /// refused where that op would be (or would touch a null address).
    #[test]
    fn a_dense_call_is_the_jit_op_over_one_dimensional_views() {
        let code = Arc::new(JitCode {
            source: "template <typename T> T f(T x, T y, T a) { return x + a * y; }".into(),
            name: "f".into(),
            params: vec![JitParam::Input(0), JitParam::Input(1), JitParam::Scalar(0)],
            outputs: 1,
        });
        let ins = [(DevicePtr(128), DType::F16), (DevicePtr(256), DType::F32)];
        let scalars = 2.5f32.to_ne_bytes();
        let d = DenseJit {
            code: &code,
            common: DType::F32,
            n: 9,
            out: DevicePtr(64),
            ins: &ins,
            scalars: &scalars,
            scalars_at: DevicePtr(512),
        };
        let op = d.to_jit_op();
        assert!(d.validate().is_ok() && op.validate().is_ok());
        assert!(Arc::ptr_eq(&op.code, &code));
        assert_eq!((op.common, &op.scalars[..], op.scalars_at), (DType::F32, &scalars[..], DevicePtr(512)));
        let got: Vec<_> =
            op.ins.iter().chain(&op.outs).map(|v| (v.ptr, v.dtype, &v.shape[..], &v.strides[..], v.offset)).collect();
        let one = |p, t| (DevicePtr(p), t, &[9usize][..], &[1usize][..], 0usize);
        assert_eq!(got, [one(128, DType::F16), one(256, DType::F32), one(64, DType::F32)]);
        assert!(DenseJit { ins: &ins[..1], ..d }.validate().is_err(), "an input missing");
        assert!(DenseJit { scalars: &[], ..d }.validate().is_err(), "a scalar missing");
        assert!(DenseJit { scalars: &2.5f64.to_ne_bytes(), ..d }.validate().is_err(), "a scalar of another type");
        assert!(DenseJit { out: DevicePtr(0), ..d }.validate().is_err(), "a null output");
        let null_in = [(DevicePtr(128), DType::F16), (DevicePtr(0), DType::F32)];
        assert!(DenseJit { ins: &null_in, ..d }.validate().is_err(), "a null input");
        let huge = DenseJit { n: usize::MAX / 2, ..d };
        assert!(huge.validate().is_err(), "4-byte elements overflow the address space");
        assert!(DenseJit { n: 0, ..huge }.validate().is_ok(), "nothing to touch");
        let two = Arc::new(JitCode { outputs: 2, ..(*code).clone() });
        assert!(DenseJit { code: &two, ..d }.validate().is_err(), "a function of two outputs");
    }
}
