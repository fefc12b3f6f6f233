//! Tests of the NVRTC path without a GPU (they need libnvrtc, and skip without it): every
//! generated module compiles, the delay kernel comes through the same path, the on-disk cache
//! serves a second load and checks its files' keys.

use super::elementwise_policy::raw_dtype;
use super::nvrtc::{counters, forget_images, image, nvrtc_present, Program};
use super::vocab::{EwOp, ModuleKey};
use crate::dtype::DType;
use crate::kernel::{BinaryOp, ReduceOp, UnaryOp};

/// A sample of the modules the tensor layer asks for.
fn sample_modules() -> Vec<ModuleKey> {
    use DType::*;
    let mut v = Vec::new();
    for d in DType::ALL {
        v.push(ModuleKey::Elementwise { op: EwOp::Fill, out: raw_dtype(d), ins: [Bool; 3] });
        v.push(ModuleKey::Elementwise { op: EwOp::Copy, out: raw_dtype(d), ins: [raw_dtype(d), Bool, Bool] });
        for s in DType::ALL {
            v.push(ModuleKey::Elementwise { op: EwOp::Cast, out: d, ins: [s, Bool, Bool] });
        }
        v.push(ModuleKey::Elementwise { op: EwOp::Where, out: d, ins: [Bool, d, I64] });
        for u in [
            UnaryOp::Neg,
            UnaryOp::Abs,
            UnaryOp::Exp,
            UnaryOp::Sigmoid,
            UnaryOp::Relu,
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
            UnaryOp::Rsqrt,
        ] {
            v.push(ModuleKey::Elementwise { op: EwOp::Unary(u), out: d, ins: [d, Bool, Bool] });
        }
        for b in [BinaryOp::Add, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Pow, BinaryOp::Lt] {
            let out = if b == BinaryOp::Lt { Bool } else { d };
            v.push(ModuleKey::Elementwise { op: EwOp::Binary(b, d), out, ins: [d, I64, Bool] });
        }
        for r in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::ArgMin] {
            let dst = match r {
                ReduceOp::ArgMin => I64,
                ReduceOp::Sum if !d.is_float() => I64,
                _ => d,
            };
            v.push(ModuleKey::Reduce { op: r, src: d, dst, values: false });
        }
        // `max` / `min` along a dim: the arg-reduction writing the values too.
        v.push(ModuleKey::Reduce { op: ReduceOp::ArgMax, src: d, dst: I64, values: true });
        if d.is_float() {
            v.push(ModuleKey::Softmax { src: d, dst: d, log: d == F16 });
        }
        if matches!(d, F32 | BF16 | F16) {
            v.push(ModuleKey::Gemv { dtype: d });
        }
    }
    v
}

#[test]
fn every_generated_module_compiles() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    let modules = sample_modules();
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get().clamp(2, 16));
        for chunk in modules.chunks(modules.len().div_ceil(threads)) {
            s.spawn(move || {
                for m in chunk {
                    if let Err(e) = image(&Program::tensor(&m.source()), 9, 0, None) {
                        panic!("{m:?} does not compile: {e}\n{}", m.source());
                    }
                }
            });
        }
    });
    eprintln!("{} modules ready in {:?}", modules.len(), start.elapsed());
}

/// The delay kernel comes through the same NVRTC path as the tensor kernels, and its name is
/// the one `spin.rs` looks up.
#[test]
fn the_spin_kernel_compiles_through_the_nvrtc_path() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    let program = Program { source: super::sources::SPIN, options: &["-lineinfo"], op: "delay" };
    let img = image(&program, 9, 0, None).unwrap();
    assert!(img.len() > 100, "an image");
    let plain = image(&Program { options: &[], ..program }, 9, 0, None).unwrap();
    assert!(!std::sync::Arc::ptr_eq(&img, &plain), "options are part of the cache key");
}

#[test]
fn a_second_load_of_a_module_hits_the_disk_cache() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cudasem-kernel-cache-{}", std::process::id()));
    let cache = Some(dir.as_path());
    // A source no other test compiles (the nonce makes it new to the disk cache as well).
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let src = format!("// {nonce} {}\nextern \"C\" __global__ void k(int* p) {{ *p = 1; }}\n", std::process::id());
    let (c0, d0) = counters();
    let first = image(&Program::tensor(&src), 9, 0, cache).unwrap();
    let (c1, d1) = counters();
    assert!(c1 > c0, "the first load compiles");
    forget_images();
    let second = image(&Program::tensor(&src), 9, 0, cache).unwrap();
    let (c2, d2) = counters();
    assert!(d2 > d1.max(d0), "the second load reads the disk cache");
    assert_eq!(first, second, "the same image");
    let _ = (c2, std::fs::remove_dir_all(&dir));
}

#[test]
fn cached_images_are_checked_against_their_key() {
    use super::nvrtc::{store_for_test, unwrap_for_test};
    let framed = store_for_test(7, b"image");
    assert_eq!(unwrap_for_test(framed.clone(), 7).as_deref(), Some(&b"image"[..]));
    assert_eq!(unwrap_for_test(framed.clone(), 8), None, "another key's image is refused");
    assert_eq!(unwrap_for_test(framed[..framed.len() - 1].to_vec(), 7), None, "a short file is refused");
}
