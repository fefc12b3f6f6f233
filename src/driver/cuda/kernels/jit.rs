//! Jiterator functions on the CUDA driver: each user function (`JitCode`) is interned once per
//! process under a small id, so a module key stays a copyable value. A function of at most three
//! inputs and one output is an op of the elementwise generator ([`EwOp::Jit`](super::vocab::EwOp):
//! `codegen.rs` writes the user's code before the generated part, and an `apply` that converts
//! the inputs to the promoted dtype and the compute type, calls the function and converts its
//! result back), with its vectorized and broadcast paths. A function of more inputs (up to
//! eight, PyTorch's limit) or of several outputs has a [`ModuleKey::JitMulti`] module, launched
//! here: one kernel (`cu/jit_multi.cu`, its generated part in `codegen.rs`) that reads each input
//! through its own strides, calls the function once per element and writes every output, so a
//! call is one launch whatever its outputs.

use super::ctx::{addr, collapse, unsupported, Ctx};
use super::vocab::{Entry, KernelId, ModuleKey, JIT_INPUTS, MAXD};
use crate::driver::cuda::status::{read, write};
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::{JitCode, JitOp};
use std::cell::Cell;
use std::sync::{Arc, RwLock};

/// Every jiterator function of the process, by id (the index); never shrinks, so each `Arc` here
/// (and its address) lives as long as the process.
static CODES: RwLock<Vec<Arc<JitCode>>> = RwLock::new(Vec::new());

thread_local! {
    /// This thread's last function interned by identity: the address of an `Arc` that [`CODES`]
    /// holds (so never freed, never another function's) and its id. A loop of calls of one
    /// function skips the table's lock.
    static LAST: Cell<(usize, u32)> = const { Cell::new((0, 0)) };
}

/// The id of `code` (interned on first use): the id of the same `Arc`, else of an equal
/// function made separately, else a new one.
#[inline]
pub(in crate::driver::cuda) fn intern(code: &Arc<JitCode>) -> u32 {
    let at = Arc::as_ptr(code) as usize;
    let (last, id) = LAST.get();
    if last == at {
        return id;
    }
    intern_slow(code, at)
}

#[cold]
fn intern_slow(code: &Arc<JitCode>, at: usize) -> u32 {
    let by_identity = |codes: &[Arc<JitCode>]| codes.iter().position(|c| Arc::ptr_eq(c, code));
    let by_value = |codes: &[Arc<JitCode>]| codes.iter().position(|c| **c == **code);
    {
        let codes = read(&CODES);
        if let Some(i) = by_identity(&codes) {
            LAST.set((at, i as u32));
            return i as u32;
        }
        // An equal function of another `Arc` (not held here: its address is not remembered).
        if let Some(i) = by_value(&codes) {
            return i as u32;
        }
    }
    let mut codes = write(&CODES);
    if let Some(i) = by_identity(&codes) {
        LAST.set((at, i as u32));
        return i as u32;
    }
    if let Some(i) = by_value(&codes) {
        return i as u32;
    }
    codes.push(code.clone());
    let id = codes.len() as u32 - 1;
    LAST.set((at, id));
    id
}

/// The function interned as `id`.
pub(in crate::driver::cuda) fn code(id: u32) -> Arc<JitCode> {
    read(&CODES).get(id as usize).cloned().unwrap_or_else(|| {
        Arc::new(JitCode { source: "".into(), name: "missing".into(), params: Vec::new(), outputs: 1 })
    })
}

/// Parameters of the kernel `jm` (`CsJitP` in the generated C: `codegen::JIT_P`): output and input addresses,
/// elements, the scalars' address, and the inputs' layout (`ndim < 0`: dense, bit `k` of `mask`
/// for input `k` one broadcast element; else the collapsed shape and each input's strides).
#[repr(C)]
#[derive(Default)]
struct JitP {
    out: [u64; JIT_INPUTS],
    ins: [u64; JIT_INPUTS],
    n: u64,
    value: u64,
    ndim: i32,
    mask: i32,
    shape: [i64; MAXD],
    st: [[i64; MAXD]; JIT_INPUTS],
}

/// Whether a call of `op` runs the [`ModuleKey::JitMulti`] kernel: more inputs than an
/// elementwise module takes, or several outputs.
pub(in crate::driver::cuda) fn is_multi(op: &JitOp) -> bool {
    op.ins.len() > 3 || op.outs.len() > 1
}

/// Queues the one kernel computing every output of `op` (validated, not empty; the function
/// interned as `id`).
pub(in crate::driver::cuda) fn launch_multi(c: &Ctx, id: u32, op: &JitOp) -> Result<()> {
    let dst = &op.outs[0];
    let nin = op.ins.len();
    let mut p = JitP { n: dst.numel() as u64, value: op.scalars_at.0, ..JitP::default() };
    let mut ins = [DType::Bool; JIT_INPUTS];
    for (k, v) in op.ins.iter().enumerate() {
        ins[k] = v.dtype;
        p.ins[k] = addr(v);
    }
    for (k, v) in op.outs.iter().enumerate() {
        p.out[k] = addr(v);
    }
    // The outputs are contiguous (validated): the output's strides (operand 0) keep the
    // collapsed dims in its row-major order, so element `i` of the loop is output element `i`.
    let mut strides: [Option<&[usize]>; JIT_INPUTS + 1] = [None; JIT_INPUTS + 1];
    strides[0] = Some(&dst.strides[..]);
    for (slot, v) in strides[1..].iter_mut().zip(&op.ins) {
        *slot = Some(&v.strides[..]);
    }
    let d = collapse(&dst.shape, strides, |_| true)
        .ok_or_else(|| unsupported(format!("{} dims that do not collapse below {MAXD}", dst.shape.len())))?;
    if d.n <= 1 && (1..=nin).all(|k| d.n == 0 || d.st[k][0] <= 1) {
        p.ndim = -1;
        for k in 0..nin {
            if d.n == 1 && d.st[k + 1][0] == 0 {
                p.mask |= 1 << k;
            }
        }
    } else {
        p.ndim = d.n as i32;
        p.shape = d.shape;
        p.st[..nin].copy_from_slice(&d.st[1..=nin]);
    }
    let module = ModuleKey::JitMulti { code: id, out: op.common, ins };
    let f = c.kernel(KernelId { module, entry: Entry::JitMulti })?;
    let grid = c.grid(f, p.n);
    c.run(f, grid, &mut p)
}

#[cfg(test)]
mod tests {
    use super::super::nvrtc::{image, nvrtc_present, Program};
    use super::super::vocab::{EwOp, JitKey, ModuleKey};
    use super::*;
    use crate::dtype::DType;
    use crate::error::Error;
    use crate::kernel::JitParam;

    fn key(source: &str, params: Vec<JitParam>, outputs: usize, out: u8) -> JitKey {
        let nin = params.iter().filter(|p| matches!(p, JitParam::Input(_))).count() as u8;
        let code = Arc::new(JitCode { source: source.into(), name: "f".into(), params, outputs });
        JitKey { code: intern(&code), nin, out }
    }

    /// Jiterator modules compile with NVRTC (every launch path of the elementwise generator) for
    /// one, two and three inputs, scalars, several outputs and the dtype families, and the
    /// one-kernel modules of eight inputs of mixed dtypes and of two outputs; a compile error is
    /// NVRTC's log naming the user's line.
    #[test]
    fn jiterator_modules_compile_and_errors_name_the_users_line() {
        if !nvrtc_present() {
            eprintln!("skipped: libnvrtc is not loadable");
            return;
        }
        use DType::*;
        use JitParam::*;
        let axpy = key(
            "template <typename T> T f(T x, T y, T a) { return -x + a * y; }",
            vec![Input(0), Input(1), Scalar(0)],
            1,
            0,
        );
        let three = key(
            "template <typename T> T f(T x, T y, T z) { return x * y + z; }",
            vec![Input(0), Input(1), Input(2)],
            1,
            0,
        );
        let silu = key("template <typename T> T f(T x) { return x / (T(1) + exp(-x)); }", vec![Input(0)], 1, 0);
        let two = "template <typename T> void f(T x, T y, T& s, T& d) { s = x + y; d = x - y; }";
        let two_params = vec![Input(0), Input(1), Output(0), Output(1)];
        let modules = [
            ModuleKey::Elementwise { op: EwOp::Jit(axpy), out: F32, ins: [F32, F16, Bool] },
            ModuleKey::Elementwise { op: EwOp::Jit(axpy), out: BF16, ins: [BF16, BF16, Bool] },
            ModuleKey::Elementwise { op: EwOp::Jit(axpy), out: I64, ins: [I32, I64, Bool] },
            ModuleKey::Elementwise { op: EwOp::Jit(three), out: F64, ins: [F64, F32, I32] },
            ModuleKey::Elementwise { op: EwOp::Jit(silu), out: F16, ins: [F16, Bool, Bool] },
            ModuleKey::Elementwise {
                op: EwOp::Jit(key(two, two_params.clone(), 2, 1)),
                out: F32,
                ins: [F32, F32, Bool],
            },
        ];
        let eight = key(
            "template <typename T> T f(T a, T b, T c, T d, T e, T g, T h, T k, T s) \
             { return a * b + c * d - e * g + h * k * s; }",
            vec![Input(0), Input(1), Input(2), Input(3), Input(4), Input(5), Input(6), Input(7), Scalar(0)],
            1,
            0,
        );
        let two_out = key(two, two_params, 2, 0);
        let multi = [
            ModuleKey::JitMulti { code: eight.code, out: F32, ins: [F32, F16, BF16, I32, I64, Bool, U8, F32] },
            ModuleKey::JitMulti { code: eight.code, out: F64, ins: [F64, F32, F16, F64, I32, F64, F64, BF16] },
            ModuleKey::JitMulti { code: eight.code, out: BF16, ins: [BF16; 8] },
            ModuleKey::JitMulti { code: two_out.code, out: F16, ins: [F16, F16, Bool, Bool, Bool, Bool, Bool, Bool] },
            ModuleKey::JitMulti { code: two_out.code, out: I64, ins: [I32, I64, Bool, Bool, Bool, Bool, Bool, Bool] },
        ];
        for m in modules.into_iter().chain(multi) {
            let source = m.source();
            let program = Program { source: &source, options: &[], op: "launch" };
            if let Err(e) = image(&program, 9, 0, None) {
                panic!("{m:?} does not compile: {e}");
            }
        }
        let bad = key(
            &format!("template <typename T>\nT f(T x) {{\n  return x + undeclared_{};\n}}", std::process::id()),
            vec![Input(0)],
            1,
            0,
        );
        let source = ModuleKey::Elementwise { op: EwOp::Jit(bad), out: F32, ins: [F32, Bool, Bool] }.source();
        match image(&Program { source: &source, options: &[], op: "launch" }, 9, 0, None) {
            Err(Error::Driver { message, .. }) => assert!(message.contains("jiterator(3)"), "{message}"),
            other => panic!("a compile error, got {other:?}"),
        }
    }
}
