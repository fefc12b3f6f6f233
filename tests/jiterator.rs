//! `cuda::jiterator` (`torch.cuda.jiterator._create_jit_fn` and `_create_multi_output_jit_fn`)
//! against a float64 CPU reference on random data: broadcasting, type promotion, strided and
//! transposed inputs, half types computed in f32, scalars with defaults and overrides, several
//! outputs, a call captured in a CUDA graph and replayed, and the typed errors (after each of
//! which the runtime goes on). On the simulated machine the function runs compiled by the host's
//! C++ compiler; on a GPU, compiled by NVRTC into the elementwise kernels.

mod common;

use cudasem::cuda::{self, jiterator, CUDAGraph, GraphOptions};
use cudasem::{DType, Error, Result, Tensor};
use half::{bf16, f16};
use std::sync::{Mutex, MutexGuard};

/// Every test holds this: a capture (Global mode) refuses other threads' synchronizing calls.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const AXPY: &str = "template <typename T> T my_kernel(T x, T y, T alpha) { return -x + alpha * y; }";

/// Deterministic values in [-2, 2).
fn random(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        })
        .collect()
}

/// A CUDA tensor of `dtype` holding `values` (rounded to it), and the rounded values.
fn tensor(values: &[f64], shape: &[usize], dtype: DType) -> Result<(Tensor, Vec<f64>)> {
    let t = Tensor::from_slice(values, shape.to_vec(), "cuda")?.to_dtype(dtype)?;
    let back = t.to_dtype(DType::F64)?.to_vec::<f64>()?;
    Ok((t, back))
}

fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.to_vec::<f64>()
}

/// Row-major index of `i` (an index into `shape`) in a tensor of `from` broadcast to `shape`.
fn broadcast_index(i: usize, shape: &[usize], from: &[usize]) -> usize {
    let (mut rem, mut idx, mut stride) = (i, 0, 1);
    for (d, &n) in shape.iter().enumerate().rev() {
        let k = rem % n;
        rem /= n;
        let fd = d as isize - (shape.len() - from.len()) as isize;
        if fd >= 0 {
            let m = from[fd as usize];
            if m != 1 {
                idx += k * stride;
            }
            stride *= m;
        }
    }
    idx
}

#[track_caller]
fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: element count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= rel * w.abs().max(1.0), "{what}: element {i}: got {g}, want {w}");
    }
}

#[test]
fn scalars_take_their_defaults_and_per_call_overrides() -> Result<()> {
    let _s = serial();
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 1.0)])?;
    assert_eq!((f.name(), f.num_inputs(), f.num_outputs()), ("my_kernel", 2, 1));
    let (x, xv) = tensor(&random(37 * 19, 1), &[37, 19], DType::F32)?;
    let (y, yv) = tensor(&random(37 * 19, 2), &[37, 19], DType::F32)?;
    for alpha in [None, Some(2.75), Some(-0.5)] {
        let out = match alpha {
            None => f.call(&[&x, &y], &[])?,
            Some(a) => f.call(&[&x, &y], &[("alpha", a)])?,
        };
        assert_eq!((out.dtype(), out.shape()), (DType::F32, &[37usize, 19][..]));
        assert_eq!(out.device(), x.device(), "the output is on the inputs' device");
        let a = alpha.unwrap_or(1.0) as f32 as f64;
        let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| -x + a * y).collect();
        assert_close(&values(&out)?, &want, 1e-6, "axpy");
    }
    // The default is unchanged by an override.
    let again = f.call(&[&x, &y], &[])?;
    let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| -x + y).collect();
    assert_close(&values(&again)?, &want, 1e-6, "axpy with the default again");
    Ok(())
}

#[test]
fn inputs_broadcast_and_promote() -> Result<()> {
    let _s = serial();
    let code = "template <typename T> T fma3(T a, T b, T c) { return a * b + c; }";
    let f = jiterator::create_jit_fn(code, &[])?;
    let shapes: [&[usize]; 3] = [&[4, 1, 5], &[3, 1], &[5]];
    let out_shape = [4usize, 3, 5];
    // (dtypes, the promoted dtype, relative tolerance of the result)
    let cases = [
        ([DType::F32, DType::F32, DType::F32], DType::F32, 1e-6),
        ([DType::F16, DType::F32, DType::F16], DType::F32, 1e-6),
        ([DType::F16, DType::BF16, DType::F16], DType::F32, 1e-6),
        ([DType::I32, DType::F32, DType::I64], DType::F32, 1e-6),
        ([DType::F64, DType::F32, DType::F16], DType::F64, 1e-12),
        ([DType::BF16, DType::BF16, DType::BF16], DType::BF16, 1.0 / 128.0),
        ([DType::I32, DType::I32, DType::I64], DType::I64, 0.0),
    ];
    for (seed, (dtypes, common, rel)) in cases.into_iter().enumerate() {
        let mut ts = Vec::new();
        let mut vs = Vec::new();
        for (k, (&shape, &d)) in shapes.iter().zip(&dtypes).enumerate() {
            let n: usize = shape.iter().product();
            let raw: Vec<f64> = random(n, 10 * seed as u64 + k as u64).iter().map(|v| (v * 4.0).round()).collect();
            let raw = if d.is_float() { random(n, 10 * seed as u64 + k as u64) } else { raw };
            let (t, v) = tensor(&raw, shape, d)?;
            ts.push(t);
            vs.push(v);
        }
        let out = f.call(&[&ts[0], &ts[1], &ts[2]], &[])?;
        assert_eq!(out.dtype(), common, "{dtypes:?} promote to {common:?}");
        assert_eq!(out.shape(), &out_shape[..]);
        let want: Vec<f64> = (0..60)
            .map(|i| {
                let g = |k: usize| vs[k][broadcast_index(i, &out_shape, shapes[k])];
                g(0) * g(1) + g(2)
            })
            .collect();
        assert_close(&values(&out)?, &want, rel, &format!("{dtypes:?}"));
    }
    Ok(())
}

#[test]
fn strided_and_transposed_inputs_are_read_through_their_strides() -> Result<()> {
    let _s = serial();
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 2.0)])?;
    let (a, av) = tensor(&random(48 * 40, 3), &[48, 40], DType::F32)?;
    let (b, bv) = tensor(&random(40 * 96, 4), &[40, 96], DType::F32)?;
    let x = a.t()?; // [40, 48], transposed
    let y = b.narrow(1, 5, 48)?; // [40, 48], rows of stride 96
    let out = f.call(&[&x, &y], &[])?;
    assert_eq!(out.shape(), &[40, 48]);
    let want: Vec<f64> = (0..40 * 48)
        .map(|i| {
            let (r, c) = (i / 48, i % 48);
            -av[c * 40 + r] + 2.0 * bv[r * 96 + 5 + c]
        })
        .collect();
    assert_close(&values(&out)?, &want, 1e-6, "transposed and sliced");
    Ok(())
}

#[test]
fn half_types_compute_in_f32_and_round_once() -> Result<()> {
    let code = "template <typename T> T swiglu(T x, T y) { return x / (T(1) + exp(-x)) * y; }";
    let f = jiterator::create_jit_fn(code, &[])?;
    for dtype in [DType::BF16, DType::F16] {
        let (x, xv) = tensor(&random(1000, 5), &[10, 100], dtype)?;
        let (y, yv) = tensor(&random(1000, 6), &[10, 100], dtype)?;
        let out = f.call(&[&x, &y], &[])?;
        assert_eq!(out.dtype(), dtype);
        let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| x / (1.0 + (-x).exp()) * y).collect();
        // One rounding of a float result into the half type: half an ulp, plus the float math.
        let ulp = if dtype == DType::BF16 { 1.0 / 128.0 } else { 1.0 / 1024.0 };
        let got = values(&out)?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let rounded = match dtype {
                DType::BF16 => bf16::from_f64(*w).to_f64(),
                _ => f16::from_f64(*w).to_f64(),
            };
            assert!((g - w).abs() <= ulp * w.abs() + 1e-6, "{dtype:?} element {i}: got {g}, want {w}");
            assert!((g - rounded).abs() <= ulp * w.abs().max(1e-3), "{dtype:?} {i}: {g} vs rounded {rounded}");
        }
    }
    Ok(())
}

#[test]
fn a_multi_output_function_returns_each_output() -> Result<()> {
    let _s = serial();
    let code = "template <typename T> void sum_diff(T a, T b, T scale, T& s, T& d) { s = (a + b) * scale; d = a - b; }";
    let f = jiterator::create_multi_output_jit_fn(code, 2, &[("scale", 0.5)])?;
    assert_eq!(f.num_outputs(), 2);
    let (a, av) = tensor(&random(6 * 7, 7), &[6, 7], DType::F32)?;
    let (b, bv) = tensor(&random(7, 8), &[7], DType::F32)?;
    let outs = f.call_multi(&[&a, &b], &[("scale", 3.0)])?;
    assert_eq!(outs.len(), 2);
    let s: Vec<f64> = (0..42).map(|i| (av[i] + bv[i % 7]) * 3.0).collect();
    let d: Vec<f64> = (0..42).map(|i| av[i] - bv[i % 7]).collect();
    assert_close(&values(&outs[0])?, &s, 1e-6, "sum");
    assert_close(&values(&outs[1])?, &d, 1e-6, "difference");
    assert!(matches!(f.call(&[&a, &b], &[]), Err(Error::InvalidArgument { .. })), "call on two outputs");
    Ok(())
}

#[test]
fn a_captured_call_replays_over_new_input_values() -> Result<()> {
    let _s = serial();
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 1.5)])?;
    let (x, _) = tensor(&random(512, 9), &[512], DType::F32)?;
    let (y, _) = tensor(&random(512, 10), &[512], DType::F32)?;
    f.call(&[&x, &y], &[])?; // warm-up: compiled before the capture
    let mut g = CUDAGraph::new();
    let out = cuda::graph(&mut g, GraphOptions::default(), || f.call(&[&x, &y], &[("alpha", -2.0)]))?;
    for seed in 0..3 {
        let (nx, xv) = tensor(&random(512, 20 + seed), &[512], DType::F32)?;
        let (ny, yv) = tensor(&random(512, 30 + seed), &[512], DType::F32)?;
        x.copy_(&nx, false)?;
        y.copy_(&ny, false)?;
        g.replay()?;
        let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| -x - 2.0 * y).collect();
        assert_close(&values(&out)?, &want, 1e-6, &format!("replay {seed}"));
    }
    Ok(())
}

#[test]
fn bad_calls_are_typed_errors_and_the_runtime_goes_on() -> Result<()> {
    let _s = serial();
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 1.0)])?;
    let (x, xv) = tensor(&random(64, 11), &[64], DType::F32)?;
    let (y, yv) = tensor(&random(64, 12), &[64], DType::F32)?;
    let works = || -> Result<()> {
        let out = f.call(&[&x, &y], &[])?;
        let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| -x + y).collect();
        assert_close(&values(&out)?, &want, 1e-6, "after an error");
        Ok(())
    };
    match f.call(&[&x], &[]) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("takes 2 tensor inputs"), "{reason}"),
        other => panic!("one input of two: {other:?}"),
    }
    works()?;
    match f.call(&[&x, &y, &x], &[]) {
        Err(Error::InvalidArgument { .. }) => {}
        other => panic!("three inputs of two: {other:?}"),
    }
    match f.call(&[&x, &y], &[("beta", 2.0)]) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("beta"), "{reason}"),
        other => panic!("an unknown scalar: {other:?}"),
    }
    works()?;
    let (z, _) = tensor(&random(5, 13), &[5], DType::F32)?;
    assert!(matches!(f.call(&[&x, &z], &[]), Err(Error::ShapeMismatch { .. })), "shapes that do not broadcast");
    // A line of the user's code that does not compile: the compiler's log, naming the line.
    let bad =
        format!("template <typename T>\nT broken{}(T x) {{\n  return x + undeclared_name;\n}}", std::process::id());
    let g = jiterator::create_jit_fn(&bad, &[])?;
    match g.call(&[&x], &[]) {
        Err(Error::Driver { message, .. }) => {
            assert!(message.contains("undeclared_name"), "the log names the error: {message}");
            assert!(message.contains("jiterator"), "the log names the user's code: {message}");
            assert!(message.contains('3'), "the log names the line: {message}");
        }
        other => panic!("a compile error: {other:?}"),
    }
    works()?;
    let cpu = Tensor::from_slice(&[1.0f32; 64], [64], "cpu")?;
    assert!(f.call(&[&cpu, &cpu], &[]).is_err(), "CPU tensors are refused");
    works()
}

#[test]
fn a_cross_device_call_is_refused_without_peer_access() -> Result<()> {
    let _s = serial();
    if !common::two_devices() {
        return Ok(());
    }
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 1.0)])?;
    let x = Tensor::from_slice(&random(16, 14), [16], "cuda:0")?.to_dtype(DType::F32)?;
    let y = Tensor::from_slice(&random(16, 15), [16], "cuda:1")?.to_dtype(DType::F32)?;
    if !cuda::is_peer_access_enabled(0, 1)? {
        assert!(matches!(f.call(&[&x, &y], &[]), Err(Error::DeviceMismatch { .. })));
    }
    let y0 = y.to("cuda:0", false)?;
    let out = f.call(&[&x, &y0], &[])?;
    assert_eq!(out.device(), x.device());
    let (xv, yv) = (values(&x)?, values(&y0)?);
    let want: Vec<f64> = xv.iter().zip(&yv).map(|(x, y)| -x + y).collect();
    assert_close(&values(&out)?, &want, 1e-6, "same device after the refusal");
    // With peer access enabled, as for every op: the call runs on the first input's device.
    if cuda::can_device_access_peer(0, 1)? {
        cuda::enable_peer_access(0, 1)?;
        let mixed = f.call(&[&x, &y], &[])?;
        assert_eq!(mixed.device(), x.device());
        assert_close(&values(&mixed)?, &want, 1e-6, "over a peer link");
    }
    Ok(())
}

#[test]
fn a_call_runs_in_its_streams_order() -> Result<()> {
    let _s = serial();
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 3.0)])?;
    let (x, xv) = tensor(&random(4096, 16), &[4096], DType::F32)?;
    let (y, _) = tensor(&random(4096, 17), &[4096], DType::F32)?;
    f.call(&[&x, &y], &[])?; // compiled before the timed part
    let side = cuda::Stream::new(None, 0)?;
    side.wait_stream(&cuda::current_stream(None)?)?;
    let out = cuda::with_stream(&side, || {
        // The side stream is held back; the fill and the call queued after it wait their turn.
        cudasem::testing::delay(&side, std::time::Duration::from_millis(50))?;
        y.fill_(0.25)?;
        f.call(&[&x, &y], &[])
    })?;
    side.synchronize()?;
    let want: Vec<f64> = xv.iter().map(|x| -x + 0.75).collect();
    assert_close(&values(&out)?, &want, 1e-6, "after the fill queued before it");
    Ok(())
}

/// A function of `k` inputs `a0..` and its float64 reference: `r = a0`, then for each next input
/// `r = r * a_i` (odd `i`) or `r = r + a_i` (even `i`).
fn chain(k: usize) -> (String, impl Fn(&[f64]) -> f64) {
    let params: Vec<String> = (0..k).map(|i| format!("T a{i}")).collect();
    let mut body = "a0".to_owned();
    for i in 1..k {
        body = format!("({body} {} a{i})", if i % 2 == 1 { '*' } else { '+' });
    }
    let code = format!("template <typename T> T chain{k}({}) {{ return {body}; }}", params.join(", "));
    let reference =
        |v: &[f64]| v.iter().enumerate().skip(1).fold(v[0], |r, (i, x)| if i % 2 == 1 { r * x } else { r + x });
    (code, reference)
}

/// Four to eight inputs (PyTorch's limit): broadcast shapes, a transposed and a sliced input,
/// promotion over mixed dtypes, half types computed in f32 and rounded once, integers exactly;
/// nine are a typed error naming the limit.
#[test]
fn four_to_eight_inputs_broadcast_promote_and_read_strides() -> Result<()> {
    let _s = serial();
    let out_shape = [4usize, 3, 5];
    // Each input's shape as stored, and how it is viewed: 0 as is, 1 transposed ([5, 3] -> [3, 5]),
    // 2 narrowed along its last dim ([4, 3, 9] -> [4, 3, 5] from column 2).
    let layouts: [(&[usize], u8); 8] = [
        (&[4, 3, 5], 0),
        (&[3, 1], 0),
        (&[5, 3], 1),
        (&[5], 0),
        (&[4, 1, 5], 0),
        (&[4, 3, 9], 2),
        (&[1], 0),
        (&[4, 3, 1], 0),
    ];
    use DType::*;
    let mixed = [F16, BF16, I32, F32, I64, F16, Bool, BF16];
    let cases: [([DType; 8], DType, f64); 6] = [
        ([F32; 8], F32, 1e-5),
        (mixed, F32, 1e-5),
        ([F64, F32, F16, I32, F64, BF16, I64, F32], F64, 1e-12),
        ([BF16; 8], BF16, 1.0 / 128.0),
        ([F16; 8], F16, 1.0 / 1024.0),
        ([I32, I64, I32, I64, I32, I32, I64, I32], I64, 0.0),
    ];
    for k in 4..=8 {
        let (code, reference) = chain(k);
        let f = jiterator::create_jit_fn(&code, &[])?;
        assert_eq!(f.num_inputs(), k);
        for (case, (dtypes, common, rel)) in cases.iter().enumerate() {
            let mut ts = Vec::new();
            let mut refs = Vec::new();
            for (i, &(stored, how)) in layouts.iter().enumerate().take(k) {
                let n: usize = stored.iter().product();
                let seed = (100 * k + 10 * case + i) as u64;
                let raw: Vec<f64> = match dtypes[i] {
                    Bool => random(n, seed).iter().map(|v| (*v > 0.0) as u8 as f64).collect(),
                    d if !d.is_float() => random(n, seed).iter().map(|v| (v * 2.0).round()).collect(),
                    _ => random(n, seed),
                };
                let (t, v) = tensor(&raw, stored, dtypes[i])?;
                // The view and its values in row-major order of the view's shape.
                let (view, shape, vals): (Tensor, Vec<usize>, Vec<f64>) = match how {
                    1 => (t.t()?, vec![3, 5], (0..15).map(|j| v[(j % 5) * 3 + j / 5]).collect()),
                    2 => (t.narrow(2, 2, 5)?, vec![4, 3, 5], (0..60).map(|j| v[(j / 5) * 9 + 2 + j % 5]).collect()),
                    _ => (t, stored.to_vec(), v),
                };
                ts.push(view);
                refs.push((shape, vals));
            }
            let inputs: Vec<&Tensor> = ts.iter().collect();
            let out = f.call(&inputs, &[])?;
            let what = format!("{k} inputs of {:?}", &dtypes[..k]);
            assert_eq!(out.dtype(), *common, "{what}: the promoted dtype");
            assert_eq!(out.shape(), &out_shape[..], "{what}: the broadcast shape");
            let want: Vec<f64> = (0..60)
                .map(|j| {
                    let args: Vec<f64> =
                        refs.iter().map(|(shape, v)| v[broadcast_index(j, &out_shape, shape)]).collect();
                    let r = reference(&args);
                    match common {
                        BF16 => bf16::from_f64(r).to_f64(),
                        F16 => f16::from_f64(r).to_f64(),
                        _ => r,
                    }
                })
                .collect();
            assert_close(&values(&out)?, &want, *rel, &what);
        }
    }
    let (nine, _) = chain(9);
    match jiterator::create_jit_fn(&nine, &[]) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("1 to 8"), "{reason}"),
        other => panic!("nine inputs: {other:?}"),
    }
    Ok(())
}

/// A function of several outputs is one kernel writing all of them (a captured call is one
/// graph node, as a one-output call is), for few and many inputs, with a scalar, in f32 and bf16.
#[test]
fn a_multi_output_call_is_one_launch_writing_every_output() -> Result<()> {
    let _s = serial();
    let one = jiterator::create_jit_fn("template <typename T> T add2(T a, T b) { return a + b; }", &[])?;
    let three = jiterator::create_multi_output_jit_fn(
        "template <typename T> void stats(T a, T b, T& s, T& p, T& m) { s = a + b; p = a * b; m = a > b ? a : b; }",
        3,
        &[],
    )?;
    let five = jiterator::create_multi_output_jit_fn(
        "template <typename T> void lin(T a, T b, T c, T d, T e, T w, T& u, T& v) \
         { u = a * b + c; v = (d - e) * w; }",
        2,
        &[("w", 0.5)],
    )?;
    for dtype in [DType::F32, DType::BF16] {
        let ulp = if dtype == DType::BF16 { 1.0 / 128.0 } else { 1e-6 };
        let (a, av) = tensor(&random(8 * 33, 40), &[8, 33], dtype)?;
        let (b, bv) = tensor(&random(33, 41), &[33], dtype)?;
        let (c, cv) = tensor(&random(8, 42), &[8, 1], dtype)?;
        let (d, dv) = tensor(&random(8 * 33, 43), &[8, 33], dtype)?;
        let (e, ev) = tensor(&random(33 * 8, 44), &[33, 8], dtype)?;
        let e = e.t()?;
        let outs = three.call_multi(&[&a, &b], &[])?;
        let g = |i: usize| (av[i], bv[i % 33]);
        let s: Vec<f64> = (0..264).map(|i| g(i).0 + g(i).1).collect();
        let p: Vec<f64> = (0..264).map(|i| g(i).0 * g(i).1).collect();
        let m: Vec<f64> = (0..264).map(|i| g(i).0.max(g(i).1)).collect();
        assert_close(&values(&outs[0])?, &s, ulp, "a + b");
        assert_close(&values(&outs[1])?, &p, ulp, "a * b");
        assert_close(&values(&outs[2])?, &m, ulp, "max(a, b)");
        let outs = five.call_multi(&[&a, &b, &c, &d, &e], &[("w", 1.5)])?;
        let u: Vec<f64> = (0..264).map(|i| av[i] * bv[i % 33] + cv[i / 33]).collect();
        let v: Vec<f64> = (0..264).map(|i| (dv[i] - ev[(i % 33) * 8 + i / 33]) * 1.5).collect();
        assert_close(&values(&outs[0])?, &u, ulp, "a * b + c");
        assert_close(&values(&outs[1])?, &v, ulp, "(d - e) * w");
    }
    // Captured, each call is as many graph nodes as a one-output call: one kernel for all outputs.
    let (a, _) = tensor(&random(1024, 45), &[1024], DType::F32)?;
    let (b, _) = tensor(&random(1024, 46), &[1024], DType::F32)?;
    one.call(&[&a, &b], &[])?;
    let nodes = |f: &dyn Fn() -> Result<Vec<Tensor>>| -> Result<(usize, CUDAGraph, Vec<Tensor>)> {
        f()?; // compiled before the capture
        let mut g = CUDAGraph::new();
        let outs = cuda::graph(&mut g, GraphOptions::default(), f)?;
        Ok((g.node_count(), g, outs))
    };
    let (n1, _, _) = nodes(&|| Ok(vec![one.call(&[&a, &b], &[])?]))?;
    let (n3, g, outs) = nodes(&|| three.call_multi(&[&a, &b], &[]))?;
    assert!(n1 >= 1, "a captured call is at least one node");
    assert_eq!(n3, n1, "three outputs in as many nodes as one output");
    g.replay()?;
    let (av, bv) = (values(&a)?, values(&b)?);
    let p: Vec<f64> = av.iter().zip(&bv).map(|(x, y)| x * y).collect();
    assert_close(&values(&outs[1])?, &p, 1e-6, "the captured call's second output");
    Ok(())
}

/// Functions of more inputs than the elementwise kernels take (the one-kernel module), all dense
/// and of mixed dtypes, against float64.
fn many_dense_inputs_match_float64() -> Result<()> {
    for k in [5usize, 8] {
        let (code, reference) = chain(k);
        let g = jiterator::create_jit_fn(&code, &[])?;
        let dtypes = [DType::F32, DType::F16, DType::F32, DType::BF16, DType::F64, DType::F32, DType::F16, DType::F32];
        let mut ts = Vec::new();
        let mut vs = Vec::new();
        for (i, &d) in dtypes.iter().enumerate().take(k) {
            let (t, v) = tensor(&random(30, 60 + i as u64), &[6, 5], d)?;
            ts.push(t);
            vs.push(v);
        }
        let inputs: Vec<&Tensor> = ts.iter().collect();
        let out = g.call(&inputs, &[])?;
        assert_eq!((out.dtype(), out.shape()), (DType::F64, &[6usize, 5][..]), "{k} dense inputs");
        let want: Vec<f64> = (0..30).map(|j| reference(&vs.iter().map(|v| v[j]).collect::<Vec<_>>())).collect();
        assert_close(&values(&out)?, &want, 1e-12, &format!("{k} dense inputs"));
    }
    Ok(())
}

/// A function of more scalars than the small-call lane holds on its stack takes the general path
/// and gives the same result (x a dense f32 tensor, xv its values).
fn nine_scalars_take_the_general_path(x: &Tensor, xv: &[f64]) -> Result<()> {
    let many = "template <typename T> T many(T x, T a, T b, T c, T d, T e, T g, T h, T k, T m) \
                { return x * a + b + c + d + e + g + h + k + m; }";
    let named: Vec<(String, f64)> =
        (0..9).map(|i| (["a", "b", "c", "d", "e", "g", "h", "k", "m"][i].into(), i as f64 + 1.0)).collect();
    let defaults: Vec<(&str, f64)> = named.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let h = jiterator::create_jit_fn(many, &defaults)?;
    let out = h.call(&[x], &[("a", -2.0)])?;
    assert_close(&values(&out)?, &xv.iter().map(|x| x * -2.0 + 44.0).collect::<Vec<_>>(), 1e-6, "nine scalars");
    Ok(())
}

/// A small call's fast lane (inputs dense, of one shape, on one device: no views, no vectors)
/// and the general path agree, call after call of one function, whichever ran before: dense
/// calls whose scalar values change from call to call, then broadcast, transposed, mixed-dtype,
/// integer, half, empty and 0-dim calls, functions of more inputs than the elementwise kernels
/// take and of more scalars than the lane holds, each against float64; and a bad call after a
/// fast one is the typed error the general path gives, the runtime going on.
#[test]
fn the_small_call_lane_and_the_general_path_agree_call_after_call() -> Result<()> {
    let _s = serial();
    let f = jiterator::create_jit_fn(AXPY, &[("alpha", 1.25)])?;
    let axpy = |x: &[f64], y: &[f64], a: f64| -> Vec<f64> { x.iter().zip(y).map(|(x, y)| -x + a * y).collect() };
    let (x, xv) = tensor(&random(12 * 7, 50), &[12, 7], DType::F32)?;
    let (y, yv) = tensor(&random(12 * 7, 51), &[12, 7], DType::F32)?;
    let dense = |alpha: Option<f64>, what: &str| -> Result<()> {
        let out = match alpha {
            None => f.call(&[&x, &y], &[])?,
            Some(a) => f.call(&[&x, &y], &[("alpha", a)])?,
        };
        assert_eq!((out.dtype(), out.shape(), out.is_contiguous()), (DType::F32, &[12usize, 7][..], true), "{what}");
        assert_eq!(out.device(), x.device(), "{what}");
        assert_close(&values(&out)?, &axpy(&xv, &yv, alpha.unwrap_or(1.25)), 1e-6, what);
        Ok(())
    };
    for (round, alpha) in [None, Some(-3.5), None, Some(0.75), Some(-3.5), None].into_iter().enumerate() {
        dense(alpha, &format!("dense call {round} (alpha {alpha:?})"))?;
    }
    // A name given twice: the last value wins, on either path.
    let twice = f.call(&[&x, &y], &[("alpha", 9.0), ("alpha", -1.5)])?;
    assert_close(&values(&twice)?, &axpy(&xv, &yv, -1.5), 1e-6, "the last override");
    // Broadcast ([12, 7] with [7]), then dense again.
    let (r, rv) = tensor(&random(7, 52), &[7], DType::F32)?;
    let out = f.call(&[&x, &r], &[])?;
    let want: Vec<f64> = (0..84).map(|i| -xv[i] + 1.25 * rv[i % 7]).collect();
    assert_close(&values(&out)?, &want, 1e-6, "broadcast after dense calls");
    dense(Some(2.0), "dense after a broadcast")?;
    // Transposed inputs of one shape (not dense: the general path), then dense again.
    let out = f.call(&[&x.t()?, &y.t()?], &[("alpha", 2.0)])?;
    assert_eq!(out.shape(), &[7, 12]);
    let want: Vec<f64> = (0..84).map(|i| -xv[(i % 12) * 7 + i / 12] + 2.0 * yv[(i % 12) * 7 + i / 12]).collect();
    assert_close(&values(&out)?, &want, 1e-6, "transposed after dense calls");
    dense(None, "dense after a transposed call")?;
    // Dense inputs of mixed dtypes promote on the lane too.
    let (yh, yhv) = tensor(&random(84, 53), &[12, 7], DType::F16)?;
    let out = f.call(&[&x, &yh], &[])?;
    assert_eq!(out.dtype(), DType::F32);
    assert_close(&values(&out)?, &axpy(&xv, &yhv, 1.25), 1e-6, "f32 with f16");
    let ints: Vec<f64> = random(84, 54).iter().map(|v| (v * 50.0).round()).collect();
    let (xi, xiv) = tensor(&ints, &[12, 7], DType::I32)?;
    let (yi, yiv) = tensor(&ints.iter().rev().copied().collect::<Vec<_>>(), &[12, 7], DType::I64)?;
    let out = f.call(&[&xi, &yi], &[("alpha", 3.0)])?;
    assert_eq!(out.dtype(), DType::I64);
    assert_eq!(values(&out)?, axpy(&xiv, &yiv, 3.0), "i32 with i64, exactly");
    for dtype in [DType::BF16, DType::F16] {
        let (xb, xbv) = tensor(&xv, &[12, 7], dtype)?;
        let (yb, ybv) = tensor(&yv, &[12, 7], dtype)?;
        let out = f.call(&[&xb, &yb], &[("alpha", 0.5)])?;
        assert_eq!(out.dtype(), dtype);
        let ulp = if dtype == DType::BF16 { 1.0 / 128.0 } else { 1.0 / 1024.0 };
        assert_close(&values(&out)?, &axpy(&xbv, &ybv, 0.5), ulp, &format!("{dtype:?}"));
    }
    // Empty and 0-dim inputs.
    let (e, _) = tensor(&[], &[0, 7], DType::F32)?;
    let out = f.call(&[&e, &e], &[])?;
    assert_eq!((out.shape(), out.dtype()), (&[0usize, 7][..], DType::F32), "an empty call");
    let (s0, _) = tensor(&[1.5], &[], DType::F32)?;
    let (s1, _) = tensor(&[-0.25], &[], DType::F32)?;
    let out = f.call(&[&s0, &s1], &[])?;
    assert_eq!(out.shape(), &[] as &[usize]);
    assert_close(&values(&out)?, &[-1.5 - 0.3125], 1e-6, "0-dim CUDA inputs");
    // A 0-dim CPU tensor is a number (the general path), beside a dense CUDA input.
    let cpu = Tensor::from_slice(&[2.0f32], Vec::<usize>::new(), "cpu")?;
    let out = f.call(&[&x, &cpu], &[])?;
    assert_close(&values(&out)?, &xv.iter().map(|x| -x + 2.5).collect::<Vec<_>>(), 1e-6, "a CPU number");
    dense(Some(-3.5), "dense after a CPU number")?;
    // Bad calls after fast ones: the general path's typed errors.
    match f.call(&[&x], &[]) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("takes 2 tensor inputs"), "{reason}"),
        other => panic!("one dense input of two: {other:?}"),
    }
    match f.call(&[&x, &y], &[("beta", 2.0)]) {
        Err(Error::InvalidArgument { reason, .. }) => assert!(reason.contains("beta"), "{reason}"),
        other => panic!("an unknown scalar on dense inputs: {other:?}"),
    }
    let host = Tensor::from_slice(&[1.0f32; 84], [12, 7], "cpu")?;
    assert!(matches!(f.call(&[&host, &host], &[]), Err(Error::InvalidArgument { .. })), "CPU tensors");
    assert!(matches!(f.call(&[&x, &host], &[]), Err(Error::DeviceMismatch { .. })), "a CPU tensor beside a CUDA one");
    dense(None, "dense after the errors")?;
    many_dense_inputs_match_float64()?;
    nine_scalars_take_the_general_path(&x, &xv)?;
    dense(None, "dense after the other functions")?;
    if common::two_devices() {
        // The lane on another device: the output there, the scalars there.
        let (x1, y1) = (x.to("cuda:1", false)?, y.to("cuda:1", false)?);
        let out = f.call(&[&x1, &y1], &[("alpha", -3.5)])?;
        assert_eq!(out.device(), x1.device());
        assert_close(&values(&out)?, &axpy(&xv, &yv, -3.5), 1e-6, "dense on cuda:1");
        dense(Some(-3.5), "dense on cuda:0 after cuda:1")?;
    }
    Ok(())
}
