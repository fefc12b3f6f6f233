//! The jiterator (`torch.cuda.jiterator`): a C++ template function over elements, turned into a
//! broadcasting, type-promoting elementwise op over tensors.
//!
//! ```
//! use cudasem::cuda::jiterator;
//! use cudasem::Tensor;
//! # fn main() -> cudasem::Result<()> {
//! let code = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }";
//! let f = jiterator::create_jit_fn(code, &[("alpha", 1.0)])?;
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0], [3], "cuda")?;
//! let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0], [3], "cuda")?;
//! assert_eq!(f.call(&[&a, &b], &[])?.to_vec::<f32>()?, [9.0, 18.0, 27.0]);
//! assert_eq!(f.call(&[&a, &b], &[("alpha", 0.5)])?.to_vec::<f32>()?, [4.0, 8.0, 12.0]);
//! # Ok(())
//! # }
//! ```
//!
//! On the CUDA driver the function is compiled (NVRTC, with the crate's process and disk caches)
//! into the same vectorized elementwise kernels as the built-in ops. On the simulated machine it
//! is compiled by the host's C++ compiler (`$CXX`, else `c++`) into a shared library that the
//! stream's worker runs in stream order; without a compiler a call is [`Error::Unsupported`].

use super::exec::{Exec, Place};
use super::layout::broadcast_shapes;
use super::ops::operand::{result_type, Operand};
use super::Tensor;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{jit_compute, DenseJit, DevicePtr, JitCode, JitOp, JitParam};
use crate::kernels::cpu::store_scalar;
use crate::runtime::{capture_active, current_of, driver_name, Stream};
use crate::scalar::Scalar;
use std::sync::{Arc, Mutex};

/// The most tensor inputs a jiterator function takes (PyTorch's limit).
pub const MAX_INPUTS: usize = 8;
/// The most outputs a multi-output jiterator function has.
pub const MAX_OUTPUTS: usize = 8;
/// Scalar arrays kept in device memory per function (per stream, dtype and values).
const SCALAR_CACHE: usize = 8;
/// Scalar values the fast lane ([`JitFn::call_dense`]) holds on the stack, of at most 8 bytes
/// each (a function of more scalars takes the general path).
const DENSE_SCALARS: usize = 8;

/// Scalar values in device memory: the stream they were written on, their dtype and bytes.
type ScalarCopy = (Stream, DType, Vec<u8>, Tensor);

/// A function made by [`create_jit_fn`] or [`create_multi_output_jit_fn`]: call it with
/// [`JitFn::call`] (one output) or [`JitFn::call_multi`]. Cheap to clone.
#[derive(Clone)]
pub struct JitFn {
    code: Arc<JitCode>,
    /// The scalar parameters' names and default values, in parameter order.
    scalars: Arc<[(String, f64)]>,
    /// Device copies of scalar values (the CUDA driver's kernels read them there).
    cache: Arc<Mutex<Vec<ScalarCopy>>>,
}

impl std::fmt::Debug for JitFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitFn")
            .field("name", &self.code.name)
            .field("inputs", &self.code.inputs())
            .field("outputs", &self.code.outputs)
            .field("scalars", &self.scalars)
            .finish()
    }
}

/// `torch.cuda.jiterator._create_jit_fn(code, **defaults)`: `code` is C++ whose last function is
/// a template over the element type `T` (`template <typename T> T f(T x, T y, T alpha) { … }`),
/// returning the output element by value. Its parameters named in `defaults` are scalars (with
/// those default values, overridable per call); the others are tensor inputs, in order.
///
/// Errors ([`Error::InvalidArgument`]): code without a template function, a default naming no
/// parameter, no tensor parameter or more than [`MAX_INPUTS`].
pub fn create_jit_fn(code: &str, defaults: &[(&str, f64)]) -> Result<JitFn> {
    make("create_jit_fn", code, 1, false, defaults)
}

/// `torch.cuda.jiterator._create_multi_output_jit_fn(code, num_outputs, **defaults)`: as
/// [`create_jit_fn`], but the function's last `num_outputs` parameters are outputs it assigns
/// (`T& out0, T& out1`); call it with [`JitFn::call_multi`].
pub fn create_multi_output_jit_fn(code: &str, num_outputs: usize, defaults: &[(&str, f64)]) -> Result<JitFn> {
    make("create_multi_output_jit_fn", code, num_outputs, true, defaults)
}

fn make(op: &'static str, code: &str, outputs: usize, by_ref: bool, defaults: &[(&str, f64)]) -> Result<JitFn> {
    let bad = |reason: String| Error::InvalidArgument { op, reason };
    if outputs == 0 || outputs > MAX_OUTPUTS {
        return Err(bad(format!("num_outputs must be 1 to {MAX_OUTPUTS}, got {outputs}")));
    }
    let sig = parse(code).ok_or_else(|| {
        bad("the code holds no function of the form `template <typename T> T name(T a, …) { … }`".into())
    })?;
    let n = sig.params.len();
    let refs = if by_ref { outputs } else { 0 };
    if n < refs {
        return Err(bad(format!("{} has {n} parameters, fewer than its {outputs} outputs", sig.name)));
    }
    for (name, _) in defaults {
        if !sig.params[..n - refs].iter().any(|(p, _)| p == name) {
            return Err(bad(format!("`{name}` is not declared in function definition of {}", sig.name)));
        }
    }
    let mut params = Vec::with_capacity(n);
    let mut scalars = Vec::new();
    let mut inputs = 0u8;
    for (i, (name, by_ref)) in sig.params.iter().enumerate() {
        if i >= n - refs {
            if !by_ref {
                return Err(bad(format!(
                    "output parameter `{name}` of {} must be a reference (`T& {name}`)",
                    sig.name
                )));
            }
            params.push(JitParam::Output((i - (n - refs)) as u8));
        } else if let Some((_, v)) = defaults.iter().find(|(d, _)| d == name) {
            params.push(JitParam::Scalar(scalars.len() as u8));
            scalars.push((name.clone(), *v));
        } else {
            params.push(JitParam::Input(inputs));
            inputs += 1;
        }
    }
    if inputs == 0 || inputs as usize > MAX_INPUTS {
        return Err(bad(format!(
            "{} takes {inputs} tensor inputs; a jiterator function takes 1 to {MAX_INPUTS} (PyTorch's limit): \
             pass the others as scalars (with defaults) or split the function",
            sig.name
        )));
    }
    let code = JitCode { source: code.into(), name: sig.name, params, outputs };
    Ok(JitFn { code: Arc::new(code), scalars: scalars.into(), cache: Arc::default() })
}

/// The entry function's name and parameters (name, passed by reference).
struct Signature {
    name: String,
    params: Vec<(String, bool)>,
}

/// The last template function of `code`: `template <…> RET NAME(PARAMS) {`.
fn parse(code: &str) -> Option<Signature> {
    let starts: Vec<usize> = code.match_indices("template").map(|(i, _)| i).collect();
    starts.into_iter().rev().find_map(|i| parse_at(&code[i + "template".len()..]))
}

fn parse_at(s: &str) -> Option<Signature> {
    let s = s.trim_start().strip_prefix('<')?;
    let close = matching(s, '<', '>')?;
    let rest = s[close + 1..].trim_start();
    let ident_end = |t: &str| t.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(t.len());
    let ret = ident_end(rest);
    if ret == 0 {
        return None;
    }
    let rest = rest[ret..].trim_start();
    let n = ident_end(rest);
    if n == 0 {
        return None;
    }
    let name = rest[..n].to_owned();
    let rest = rest[n..].trim_start().strip_prefix('(')?;
    let close = matching(rest, '(', ')')?;
    if !rest[close + 1..].trim_start().starts_with('{') {
        return None;
    }
    let list = rest[..close].trim();
    let mut params = Vec::new();
    if !list.is_empty() && list != "void" {
        for p in list.split(',') {
            let p = p.split('=').next()?.trim_end();
            let start = p.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
            let pname = &p[start..];
            if pname.is_empty() || pname.starts_with(|c: char| c.is_ascii_digit()) {
                return None;
            }
            params.push((pname.to_owned(), p[..start].contains('&')));
        }
    }
    Some(Signature { name, params })
}

/// The index of the `close` that ends a group opened just before `s`.
fn matching(s: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            if depth == 0 {
                return Some(i);
            }
            depth -= 1;
        }
    }
    None
}

impl JitFn {
    /// The entry function's name.
    pub fn name(&self) -> &str {
        &self.code.name
    }

    /// Number of tensor inputs.
    pub fn num_inputs(&self) -> usize {
        self.code.inputs()
    }

    /// Number of outputs.
    pub fn num_outputs(&self) -> usize {
        self.code.outputs
    }

    /// Calls a one-output function on `inputs` (CUDA tensors; 0-dim CPU tensors are taken as
    /// numbers), with `scalars` overriding defaults by name. The inputs broadcast together and
    /// promote to one dtype (PyTorch's `result_type`); the function computes in it (`f32` for
    /// `f16`/`bf16`); the output, of the promoted dtype and the broadcast shape, is on the inputs'
    /// device.
    ///
    /// Errors: a wrong number of inputs, a scalar name the function does not declare, or a
    /// multi-output function: [`Error::InvalidArgument`]; inputs on two devices without peer
    /// access: [`Error::DeviceMismatch`]; shapes that do not broadcast: [`Error::ShapeMismatch`];
    /// the code failing to compile: [`Error::Driver`] with the compiler's log (lines of the
    /// user's code are reported as `jiterator:LINE`); on the simulated machine without a C++
    /// compiler: [`Error::Unsupported`].
    pub fn call(&self, inputs: &[&Tensor], scalars: &[(&str, f64)]) -> Result<Tensor> {
        if self.code.outputs != 1 {
            return Err(Error::InvalidArgument {
                op: "jiterator",
                reason: format!("{} has {} outputs: call it with call_multi", self.code.name, self.code.outputs),
            });
        }
        if let Some(out) = self.call_dense(inputs, scalars)? {
            return Ok(out);
        }
        self.run(inputs, scalars)?
            .pop()
            .ok_or_else(|| Error::Internal { op: "jiterator", reason: "a one-output function gave no output".into() })
    }

    /// Calls the function (of any number of outputs) and returns its outputs in order; see
    /// [`JitFn::call`].
    pub fn call_multi(&self, inputs: &[&Tensor], scalars: &[(&str, f64)]) -> Result<Vec<Tensor>> {
        self.run(inputs, scalars)
    }

    /// Refuses a wrong number of inputs, or an override naming no scalar of the function
    /// (checked before any work).
    fn check_arguments(&self, inputs: &[&Tensor], overrides: &[(&str, f64)]) -> Result<()> {
        let (op, code) = ("jiterator", &self.code);
        if inputs.len() != code.inputs() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{} takes {} tensor inputs, got {}", code.name, code.inputs(), inputs.len()),
            });
        }
        for (name, _) in overrides {
            if !self.scalars.iter().any(|(n, _)| n == name) {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("`{name}` is not declared in function definition of {}", code.name),
                });
            }
        }
        Ok(())
    }

    /// The scalars' values (defaults, overridden by name: the last override of a name wins) as
    /// elements of `compute`, written into `out[..scalars × compute.size()]`.
    fn scalar_values(&self, overrides: &[(&str, f64)], compute: DType, out: &mut [u8]) {
        let size = compute.size();
        for ((name, default), slot) in self.scalars.iter().zip(out.chunks_exact_mut(size)) {
            let v = overrides.iter().rev().find(|(n, _)| n == name).map_or(*default, |(_, v)| *v);
            store_scalar(Scalar::Float(v), compute, slot);
        }
    }

    /// The common small call, the jiterator's fast lane (as the built-in binary ops' dense lane):
    /// a one-output function over inputs that are all dense tensors of one shape on one CUDA
    /// device. Nothing broadcasts or moves, so the general path's answers are known: the output
    /// is a new dense tensor of that shape, and the call is one [`DenseJit`] with no views,
    /// vectors or maps made on the way. `Ok(None)`: not such a call (the general path takes it,
    /// and gives its errors).
    fn call_dense(&self, inputs: &[&Tensor], overrides: &[(&str, f64)]) -> Result<Option<Tensor>> {
        let Some(first) = inputs.first() else { return Ok(None) };
        let place = first.place();
        let Place::Cuda(d) = place else { return Ok(None) };
        let shape = first.shape();
        if inputs.len() > MAX_INPUTS
            || self.scalars.len() > DENSE_SCALARS
            || !inputs.iter().all(|t| t.place() == place && t.shape() == shape && t.is_contiguous())
        {
            return Ok(None);
        }
        self.check_arguments(inputs, overrides)?;
        let common = promoted(inputs);
        let compute = jit_compute(common);
        let mut values = [0u8; DENSE_SCALARS * 8];
        let scalars = &mut values[..self.scalars.len() * compute.size()];
        self.scalar_values(overrides, compute, scalars);
        let scalars = &*scalars;
        let stream = current_of(d)?;
        let out = Tensor::empty_on(shape, common, d, &stream)?;
        let n = out.numel();
        if n == 0 {
            return Ok(Some(out));
        }
        let on_device = (!scalars.is_empty() && driver_name() == "cuda")
            .then(|| self.device_scalars(&stream, d, compute, scalars))
            .transpose()?;
        let mut ins = [(DevicePtr(0), DType::Bool); MAX_INPUTS];
        let mut uses: [&Tensor; MAX_INPUTS + 2] = [&out; MAX_INPUTS + 2];
        for (k, t) in inputs.iter().enumerate() {
            ins[k] = (DevicePtr(t.data_ptr()), t.dtype());
            uses[k] = t;
        }
        let mut used = inputs.len() + 1; // the output is there already
        if let Some(t) = &on_device {
            uses[used] = t;
            used += 1;
        }
        let op = DenseJit {
            code: &self.code,
            common,
            n,
            out: DevicePtr(out.data_ptr()),
            ins: &ins[..inputs.len()],
            scalars,
            scalars_at: on_device.as_ref().map_or(DevicePtr(0), |t| DevicePtr(t.data_ptr())),
        };
        stream.launch_dense_jit(&op, &uses[..used])?;
        Ok(Some(out))
    }

    fn run(&self, inputs: &[&Tensor], overrides: &[(&str, f64)]) -> Result<Vec<Tensor>> {
        let op = "jiterator";
        let code = &self.code;
        self.check_arguments(inputs, overrides)?;
        let exec = Exec::for_operands(op, inputs)?;
        let Device::Cuda(Some(device)) = exec.place.device() else {
            return Err(Error::InvalidArgument { op, reason: "a jiterator function runs on CUDA tensors".into() });
        };
        let common = promoted(inputs);
        let shape = broadcast(op, inputs)?;
        let admitted = inputs.iter().map(|t| exec.admit(t)).collect::<Result<Vec<_>>>()?;
        let outs = (0..code.outputs).map(|_| exec.empty(&shape, common)).collect::<Result<Vec<Tensor>>>()?;
        if shape.contains(&0) {
            return Ok(outs);
        }
        let compute = jit_compute(common);
        let mut scalars = vec![0u8; self.scalars.len() * compute.size()];
        self.scalar_values(overrides, compute, &mut scalars);
        let ins = admitted.iter().map(|t| t.broadcast_view(op, &shape)).collect::<Result<Vec<_>>>()?;
        exec.on_stream(op, |stream| {
            let on_device = (driver_name() == "cuda" && !scalars.is_empty())
                .then(|| self.device_scalars(stream, device, compute, &scalars))
                .transpose()?;
            let jit = JitOp {
                code: code.clone(),
                common,
                ins,
                outs: outs.iter().map(|t| t.buffer_view()).collect(),
                scalars_at: on_device.as_ref().map_or(DevicePtr(0), |t| DevicePtr(t.data_ptr())),
                scalars,
            };
            let mut uses: Vec<&Tensor> = Vec::with_capacity(admitted.len() + outs.len() + 1);
            uses.extend(admitted.iter().map(|t| &**t));
            uses.extend(outs.iter());
            uses.extend(on_device.iter());
            stream.jit_launch(&jit, &uses)
        })?;
        Ok(outs)
    }

    /// The scalar values `bytes` (elements of `dtype`) in memory of `device`, written on
    /// `stream` by fill kernels (capture-safe); kept for later calls on the stream, except
    /// those made while a capture is underway (a captured fill runs only at replay).
    fn device_scalars(&self, stream: &Stream, device: usize, dtype: DType, bytes: &[u8]) -> Result<Tensor> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((.., t)) = cache.iter().find(|(s, d, b, _)| s == stream && *d == dtype && b == bytes) {
            return Ok(t.clone());
        }
        let n = bytes.len() / dtype.size();
        let t = Tensor::empty([n], dtype, Device::cuda(device))?;
        for (k, one) in bytes.chunks_exact(dtype.size()).enumerate() {
            t.narrow(0, k, 1)?.fill_(element_scalar(one, dtype))?;
        }
        if !capture_active() {
            if cache.len() >= SCALAR_CACHE {
                cache.remove(0);
            }
            cache.push((stream.clone(), dtype, bytes.to_vec(), t.clone()));
        }
        Ok(t)
    }
}

/// The dtype `inputs` promote to (PyTorch's `result_type`; inputs of one dtype: that dtype).
fn promoted(inputs: &[&Tensor]) -> DType {
    let first = inputs[0].dtype();
    if inputs.iter().all(|t| t.dtype() == first) {
        return first;
    }
    let operands: Vec<Operand> = inputs.iter().map(|t| Operand::Tensor(t)).collect();
    result_type(&operands)
}

/// The shape `inputs` broadcast to (inputs of one shape: that shape).
fn broadcast(op: &'static str, inputs: &[&Tensor]) -> Result<Vec<usize>> {
    let first = inputs[0].shape();
    if inputs.iter().all(|t| t.shape() == first) {
        return Ok(first.to_vec());
    }
    let mut shape = first.to_vec();
    for t in &inputs[1..] {
        shape = broadcast_shapes(op, &shape, t.shape())?;
    }
    Ok(shape)
}

/// One element's bytes of `dtype` as a [`Scalar`] (exactly: the compute dtypes are `f32`,
/// `f64`, integers and bool).
fn element_scalar(b: &[u8], dtype: DType) -> Scalar {
    match dtype {
        DType::F32 => Scalar::Float(f32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64),
        DType::F64 => Scalar::Float(f64::from_ne_bytes(b.try_into().unwrap_or_default())),
        DType::I32 => Scalar::Int(i32::from_ne_bytes(b.try_into().unwrap_or_default()) as i64),
        DType::I64 => Scalar::Int(i64::from_ne_bytes(b.try_into().unwrap_or_default())),
        DType::Bool => Scalar::Bool(b[0] != 0),
        _ => Scalar::Int(b[0] as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_function_is_the_last_template_and_its_parameters_are_classified() {
        let code = "template <typename T> T helper(T v) { return v * v; }\n\
                    template <typename T> T my_fn(T x, const T y, T alpha) { return helper(x) + alpha * y; }";
        let f = create_jit_fn(code, &[("alpha", 2.0)]).unwrap();
        assert_eq!(f.name(), "my_fn");
        assert_eq!(f.code.params, [JitParam::Input(0), JitParam::Input(1), JitParam::Scalar(0)]);
        let multi = "template <typename T> void two(T a, T b, T& s, T& d) { s = a + b; d = a - b; }";
        let g = create_multi_output_jit_fn(multi, 2, &[]).unwrap();
        assert_eq!(g.code.params, [JitParam::Input(0), JitParam::Input(1), JitParam::Output(0), JitParam::Output(1)]);
        assert!(matches!(create_jit_fn("int f(int x) { return x; }", &[]), Err(Error::InvalidArgument { .. })));
        assert!(matches!(create_jit_fn(code, &[("beta", 1.0)]), Err(Error::InvalidArgument { .. })));
        let eight = "template <typename T> T f(T a, T b, T c, T d, T e, T g, T h, T k) { return a + b + c + d + e + g + h + k; }";
        assert_eq!(create_jit_fn(eight, &[]).unwrap().num_inputs(), 8);
        let nine = "template <typename T> T f(T a, T b, T c, T d, T e, T g, T h, T k, T m) { return a + m; }";
        match create_jit_fn(nine, &[]) {
            Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("1 to 8"), "{reason}"),
            other => panic!("nine inputs: {other:?}"),
        }
        assert_eq!(create_jit_fn(nine, &[("m", 1.0)]).unwrap().num_inputs(), 8, "a scalar is not an input");
        assert!(matches!(create_multi_output_jit_fn(multi, 0, &[]), Err(Error::InvalidArgument { .. })));
    }
}
