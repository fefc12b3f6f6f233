//! Jiterator functions in the elementwise generator: each user function (`JitCode`) is interned
//! once per process under a small id, so a module key ([`EwOp::Jit`](super::vocab::EwOp)) stays
//! a copyable value; `codegen.rs` writes such a module (the user's code before the generated
//! part, and an `apply` that converts the inputs to the promoted dtype and the compute type,
//! calls the function and converts its result back).

use crate::driver::cuda::status::{read, write};
use crate::kernel::JitCode;
use std::sync::{Arc, RwLock};

/// Every jiterator function of the process, by id (the index).
static CODES: RwLock<Vec<Arc<JitCode>>> = RwLock::new(Vec::new());

/// The id of `code` (interned on first use).
pub(in crate::driver::cuda) fn intern(code: &Arc<JitCode>) -> u32 {
    if let Some(i) = read(&CODES).iter().position(|c| Arc::ptr_eq(c, code) || **c == **code) {
        return i as u32;
    }
    let mut codes = write(&CODES);
    if let Some(i) = codes.iter().position(|c| **c == **code) {
        return i as u32;
    }
    codes.push(code.clone());
    codes.len() as u32 - 1
}

/// The function interned as `id`.
pub(in crate::driver::cuda) fn code(id: u32) -> Arc<JitCode> {
    read(&CODES).get(id as usize).cloned().unwrap_or_else(|| {
        Arc::new(JitCode { source: "".into(), name: "missing".into(), params: Vec::new(), outputs: 1 })
    })
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
    /// one, two and three inputs, scalars, several outputs and the dtype families; a compile
    /// error is NVRTC's log naming the user's line.
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
        for m in modules {
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
