//! Jiterator functions on the simulated machine: the user's C++ function compiled by the host's
//! C++ compiler (`$CXX`, else `c++`) into a shared library, with the few CUDA names such a
//! function may use defined for the host (`__device__` and the like as nothing, `__expf`,
//! `rsqrtf`, `__fdividef`, … as their `<cmath>` equivalents, `__float_as_uint` and its kin as
//! bit copies), loaded once per (code, compute
//! type) and kept for the process's life; its entry runs on the stream's worker, in stream
//! order, over the inputs converted to the compute type (`f32` for half types, as on the GPU).
//!
//! Libraries are cached on disk by a hash of their source and the compiler's name, in the
//! process's kernel cache directory (`CUDASEM_KERNEL_CACHE`, else the user's cache directory, as
//! the CUDA driver's kernels), so a second process does not compile again; with the cache off,
//! in a directory of the process's own under the system's temporary directory.

use super::sim_driver::SimDriver;
use crate::driver::comm::DeviceBytes;
use crate::driver::{DevicePtr, StreamId};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{jit_ctype, BufferView, JitCode, JitOp};
use crate::kernels::cpu::gather_as;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The compiled entry: `(inputs, scalars, outputs, n)` over dense arrays of the compute type.
type Entry = unsafe extern "C" fn(*const *const u8, *const u8, *const *mut u8, i64);

/// A loaded library and its entry (the library is never unloaded: its code may run at any
/// time a captured graph replays).
struct Loaded {
    _lib: libloading::Library,
    entry: Entry,
}

/// Every library loaded in this process, by source hash.
static LOADED: Mutex<Vec<(u64, Arc<Loaded>)>> = Mutex::new(Vec::new());
/// The most functions [`BY_CODE`] remembers (the oldest is forgotten first).
const BY_CODE_MAX: usize = 256;
/// The library of each function (by identity, the function kept alive here) and compute type
/// seen so far: a call finds its library without generating its source.
static BY_CODE: Mutex<Vec<CodeLibrary>> = Mutex::new(Vec::new());

/// A function, a compute type and its library.
type CodeLibrary = (Arc<JitCode>, DType, Arc<Loaded>);

/// The definitions a jiterator function may use beyond standard C++.
const PRELUDE: &str = r#"#include <math.h>
#include <cmath>
#include <cstdint>
#include <algorithm>
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __inline__ inline
#define __restrict__
#define __noinline__ __attribute__((noinline))
static inline float cudasem___expf(float x) { return expf(x); }
static inline float cudasem___logf(float x) { return logf(x); }
static inline float cudasem___log2f(float x) { return log2f(x); }
static inline float cudasem___log10f(float x) { return log10f(x); }
static inline float cudasem___exp10f(float x) { return powf(10.0f, x); }
static inline float cudasem___sinf(float x) { return sinf(x); }
static inline float cudasem___cosf(float x) { return cosf(x); }
static inline float cudasem___tanf(float x) { return tanf(x); }
static inline float cudasem___powf(float x, float y) { return powf(x, y); }
static inline float cudasem___fdividef(float x, float y) { return x / y; }
static inline float cudasem_fdividef(float x, float y) { return x / y; }
static inline float cudasem___frcp_rn(float x) { return 1.0f / x; }
static inline float cudasem___fsqrt_rn(float x) { return sqrtf(x); }
static inline float cudasem___saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float cudasem_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double cudasem_rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float cudasem_exp10f(float x) { return powf(10.0f, x); }
static inline float cudasem___fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline unsigned cudasem___float_as_uint(float x) { unsigned u; __builtin_memcpy(&u, &x, 4); return u; }
static inline float cudasem___uint_as_float(unsigned u) { float x; __builtin_memcpy(&x, &u, 4); return x; }
static inline int cudasem___float_as_int(float x) { int u; __builtin_memcpy(&u, &x, 4); return u; }
static inline float cudasem___int_as_float(int u) { float x; __builtin_memcpy(&x, &u, 4); return x; }
#define __expf cudasem___expf
#define __logf cudasem___logf
#define __log2f cudasem___log2f
#define __log10f cudasem___log10f
#define __exp10f cudasem___exp10f
#define __sinf cudasem___sinf
#define __cosf cudasem___cosf
#define __tanf cudasem___tanf
#define __powf cudasem___powf
#define __fdividef cudasem___fdividef
#define fdividef cudasem_fdividef
#define __frcp_rn cudasem___frcp_rn
#define __fsqrt_rn cudasem___fsqrt_rn
#define __saturatef cudasem___saturatef
#define rsqrtf cudasem_rsqrtf
#define rsqrt cudasem_rsqrt
#define exp10f cudasem_exp10f
#define __fmaf_rn cudasem___fmaf_rn
#define __float_as_uint cudasem___float_as_uint
#define __uint_as_float cudasem___uint_as_float
#define __float_as_int cudasem___float_as_int
#define __int_as_float cudasem___int_as_float
"#;

/// The library source of `code` computing in `compute`.
fn host_source(code: &JitCode, compute: DType) -> String {
    let ct = jit_ctype(compute);
    let call = code.call(ct, |k| format!("in{k}[i]"), |k| format!("sc[{k}]"), |k| format!("out{k}[i]"));
    let mut s = String::from(PRELUDE);
    s.push_str("#line 1 \"jiterator\"\n");
    s.push_str(&code.source);
    s.push_str("\n#line 1 \"cudasem_jit_host\"\n");
    s.push_str(&format!(
        "extern \"C\" void cudasem_jit(const unsigned char* const* ins, const unsigned char* scalars, \
         unsigned char* const* outs, long long n) {{\n    typedef {ct} CT;\n    const CT* sc = (const CT*)scalars;\n    (void)sc;\n"
    ));
    for k in 0..code.inputs() {
        s.push_str(&format!("    const CT* in{k} = (const CT*)ins[{k}];\n"));
    }
    for k in 0..code.outputs {
        s.push_str(&format!("    CT* out{k} = (CT*)outs[{k}];\n"));
    }
    if code.outputs == 1 && !code.params.iter().any(|p| matches!(p, crate::kernel::JitParam::Output(_))) {
        s.push_str(&format!("    for (long long i = 0; i < n; ++i) out0[i] = (CT)({call});\n}}\n"));
    } else {
        s.push_str(&format!("    for (long long i = 0; i < n; ++i) {call};\n}}\n"));
    }
    s
}

/// FNV-1a over `parts`.
fn hash(parts: &[&str]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The compiler: `$CXX`, else `c++`.
fn compiler() -> String {
    crate::config::env_var("CXX").ok().flatten().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| "c++".into())
}

/// The loaded library of `code` in `compute`: by the function's identity, else by its source.
fn library(code: &Arc<JitCode>, compute: DType, cache: Option<&std::path::Path>) -> Result<Arc<Loaded>> {
    let mut by_code = BY_CODE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((.., l)) = by_code.iter().find(|(c, d, _)| Arc::ptr_eq(c, code) && *d == compute) {
        return Ok(l.clone());
    }
    let l = load(code, compute, cache)?;
    if by_code.len() >= BY_CODE_MAX {
        by_code.remove(0);
    }
    by_code.push((code.clone(), compute, l.clone()));
    Ok(l)
}

/// The loaded library of `code` in `compute`, compiled (or found on disk) on first use.
fn load(code: &JitCode, compute: DType, cache: Option<&std::path::Path>) -> Result<Arc<Loaded>> {
    let source = host_source(code, compute);
    let cxx = compiler();
    let key = hash(&[&source, &cxx]);
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, l)) = loaded.iter().find(|(k, _)| *k == key) {
        return Ok(l.clone());
    }
    let dir = match cache {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(format!("cudasem-jit-{}", std::process::id())),
    };
    let lib_path = dir.join(format!("jit-{key:016x}.so"));
    if !lib_path.exists() {
        compile(&source, &cxx, &dir, &lib_path)?;
    }
    // SAFETY: the library is one this module compiled from the source above (its constructors
    // are the C++ runtime's); it stays loaded for the process's life.
    let lib = unsafe { libloading::Library::new(&lib_path) }.map_err(|e| Error::Unsupported {
        op: "jiterator",
        driver: "sim",
        reason: format!("cannot load the compiled jiterator library {}: {e}", lib_path.display()),
    })?;
    // SAFETY: `cudasem_jit` is defined by the source above with exactly `Entry`'s C signature.
    let entry: Entry = *unsafe { lib.get::<Entry>(b"cudasem_jit\0") }
        .map_err(|e| Error::Internal { op: "jiterator", reason: format!("the compiled library has no entry: {e}") })?;
    let l = Arc::new(Loaded { _lib: lib, entry });
    loaded.push((key, l.clone()));
    Ok(l)
}

/// Compiles `source` with `cxx` into `out` (through a file of this process, renamed).
fn compile(source: &str, cxx: &str, dir: &PathBuf, out: &PathBuf) -> Result<()> {
    let io = |what: &str, e: std::io::Error| Error::Unsupported {
        op: "jiterator",
        driver: "sim",
        reason: format!("{what} {}: {e}", dir.display()),
    };
    std::fs::create_dir_all(dir).map_err(|e| io("cannot create the jiterator cache", e))?;
    let stem = format!("{}-{}", out.file_stem().and_then(|s| s.to_str()).unwrap_or("jit"), std::process::id());
    let src = dir.join(format!("{stem}.cpp"));
    let tmp = dir.join(format!("{stem}.so.tmp"));
    std::fs::write(&src, source).map_err(|e| io("cannot write to the jiterator cache", e))?;
    let run = Command::new(cxx).args(["-std=c++17", "-O2", "-shared", "-fPIC", "-o"]).arg(&tmp).arg(&src).output();
    let _ = std::fs::remove_file(&src);
    let output = run.map_err(|e| Error::Unsupported {
        op: "jiterator",
        driver: "sim",
        reason: format!(
            "the simulated machine runs jiterator functions compiled by the host's C++ compiler, and `{cxx}` \
             could not be run ({e}); install one (g++ or clang++) or point CXX at it"
        ),
    })?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Driver {
            op: "c++",
            code: output.status.code().unwrap_or(-1),
            name: "COMPILE_ERROR".into(),
            message: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    std::fs::rename(&tmp, out).map_err(|e| io("cannot write to the jiterator cache", e))
}

/// A view's bytes as the worker reads them: the span it covers, and the view rebased to it.
fn span(v: &BufferView) -> (DevicePtr, usize, BufferView) {
    let size = v.dtype.size();
    let (lo, hi) = v
        .shape
        .iter()
        .zip(v.strides.iter())
        .fold((v.offset, v.offset), |(lo, hi), (&n, &s)| (lo, hi + n.saturating_sub(1) * s));
    let mut rebased = v.clone();
    rebased.offset -= lo;
    (DevicePtr(v.ptr.0 + (lo * size) as u64), (hi - lo + 1) * size, rebased)
}

impl SimDriver {
    /// [`Driver::jit_launch`](crate::driver::Driver::jit_launch): compiles (or finds) the
    /// function's library now, so a compile error is the call's, and queues its run.
    pub(super) fn sim_jit_launch(&self, stream: StreamId, op: &JitOp) -> Result<()> {
        op.validate()?;
        let device = self.stream(stream)?.device;
        self.check_views(device, op.ins.iter().chain(&op.outs), || "jiterator".into())?;
        let compute = op.compute();
        let lib = library(&op.code, compute, self.jit_cache.as_deref())?;
        let ins: Vec<(DevicePtr, usize, BufferView)> = op.ins.iter().map(span).collect();
        let outs: Vec<(DevicePtr, DType)> =
            op.outs.iter().map(|v| (v.ptr.offset(v.offset * v.dtype.size()), v.dtype)).collect();
        let (common, scalars, n) = (op.common, op.scalars.clone(), op.outs[0].numel());
        let kernel = move |mem: &dyn DeviceBytes| -> Result<()> {
            let mut values: Vec<Vec<u8>> = Vec::with_capacity(ins.len());
            for (at, len, view) in &ins {
                let mut bytes = vec![0u8; *len];
                mem.read(*at, &mut bytes)?;
                values.push(gather_as(&bytes, view, common, compute));
            }
            let mut results: Vec<Vec<u8>> = outs.iter().map(|_| vec![0u8; n * compute.size()]).collect();
            let in_ptrs: Vec<*const u8> = values.iter().map(|v| v.as_ptr()).collect();
            let out_ptrs: Vec<*mut u8> = results.iter_mut().map(|v| v.as_mut_ptr()).collect();
            let scalar_ptr = if scalars.is_empty() { std::ptr::null() } else { scalars.as_ptr() };
            // SAFETY: each input array holds `n` elements of the compute type (gathered over the
            // outputs' shape), each output array room for `n`, the scalars one element each per
            // scalar parameter; the entry reads and writes exactly those, in the compute type
            // its source was generated for.
            unsafe { (lib.entry)(in_ptrs.as_ptr(), scalar_ptr, out_ptrs.as_ptr(), n as i64) };
            for ((at, dtype), r) in outs.iter().zip(&results) {
                mem.write(*at, &encode_from(r, compute, *dtype))?;
            }
            Ok(())
        };
        self.queue_host_kernel_as(stream, Arc::new(kernel), "jiterator", super::time::jit(op))
    }
}

/// Dense bytes of `from` converted to `to` (the compute type's results into the outputs' dtype).
fn encode_from(bytes: &[u8], from: DType, to: DType) -> Vec<u8> {
    if from == to {
        return bytes.to_vec();
    }
    let view = BufferView {
        ptr: DevicePtr(0),
        dtype: from,
        shape: crate::kernel::Dims::from(&[bytes.len() / from.size()][..]),
        strides: crate::kernel::Dims::from(&[1usize][..]),
        offset: 0,
    };
    gather_as(bytes, &view, to, to)
}
