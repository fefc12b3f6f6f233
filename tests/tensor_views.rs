//! Creation (every dtype, every device), the seeded generator, views sharing storage, and the
//! typed errors of bad input.

mod tensor_util;

use cudasem::{manual_seed, DType, Device, Error, Result, Tensor};
use half::{bf16, f16};
use tensor_util::{devices, expect_ok, values};

#[test]
fn creation_works_for_every_dtype_on_every_device() -> Result<()> {
    for device in devices() {
        for dtype in DType::ALL {
            let what = format!("{dtype} on {device}");
            let z = Tensor::zeros([2, 3], dtype, device)?;
            assert_eq!((z.shape(), z.dtype(), z.device(), z.numel()), (&[2usize, 3][..], dtype, device, 6), "{what}");
            assert_eq!(z.stride(), [3, 1]);
            assert!(z.is_contiguous());
            assert_eq!(values(&z)?, vec![0.0; 6], "{what}");
            assert_eq!(values(&Tensor::ones([5], dtype, device)?)?, vec![1.0; 5], "{what}");
            // 2.5 is exact in every float dtype; integers truncate it, bool makes it true.
            let want = if dtype.is_float() {
                2.5
            } else if dtype == DType::Bool {
                1.0
            } else {
                2.0
            };
            assert_eq!(values(&Tensor::full([3, 1], 2.5, dtype, device)?)?, vec![want; 3], "{what}");
            if dtype != DType::Bool {
                let a = Tensor::arange(1, 9, 2, dtype, device)?;
                assert_eq!(values(&a)?, [1.0, 3.0, 5.0, 7.0], "{what}");
            }
            let e = Tensor::empty([0, 4], dtype, device)?;
            assert_eq!((e.numel(), values(&e)?.len()), (0, 0));
            let s = Tensor::full([], 1, dtype, device)?;
            assert_eq!((s.dim(), s.numel(), values(&s)?), (0, 1, vec![1.0]));
        }
        assert_eq!(Tensor::arange(0.0, 1.0, 0.25, DType::F32, device)?.to_vec::<f32>()?, [0.0, 0.25, 0.5, 0.75]);
        assert_eq!(Tensor::arange(5, 0, -2, DType::I64, device)?.to_vec::<i64>()?, [5, 3, 1]);
        assert_eq!(Tensor::full([2], 300, DType::U8, device)?.to_vec::<u8>()?, [44, 44], "integers wrap");
        let h = Tensor::from_slice(&[f16::from_f32(0.5), f16::from_f32(-2.0)], [2], device)?;
        assert_eq!(h.to_vec::<f16>()?, [f16::from_f32(0.5), f16::from_f32(-2.0)]);
        let b = Tensor::from_slice(&[bf16::from_f32(1.5)], [1, 1], device)?;
        assert_eq!((b.dtype(), b.item::<bf16>()?), (DType::BF16, bf16::from_f32(1.5)));
        // A large fill of a pattern that is not one repeated byte.
        let big = Tensor::full([300_000], -1.25, DType::F32, device)?;
        let v = big.to_vec::<f32>()?;
        assert!(v.len() == 300_000 && v.iter().all(|&x| x == -1.25), "{device}");
    }
    Ok(())
}

/// The only test of this binary that draws random numbers, so that no other draws interleave.
/// Ulps between two f64 values (the distance of their ordered bit patterns).
fn f64_ulps(a: f64, b: f64) -> u64 {
    let key = |v: f64| {
        let bits = v.to_bits();
        let mag = i128::from(bits & !(1u64 << 63));
        if bits >> 63 == 1 {
            -mag
        } else {
            mag
        }
    };
    (key(a) - key(b)).unsigned_abs() as u64
}

#[test]
fn manual_seed_makes_rand_and_randn_reproducible_on_every_device() -> Result<()> {
    let mut first: Option<(Vec<f32>, Vec<f64>)> = None;
    for device in devices() {
        manual_seed(1234);
        assert_eq!(cudasem::initial_seed(), 1234);
        let u = Tensor::rand([64, 64], DType::F32, device)?.to_vec::<f32>()?;
        let n = Tensor::randn([4096], DType::F64, device)?.to_vec::<f64>()?;
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)), "rand is in [0, 1)");
        let mean_u = u.iter().map(|&x| x as f64).sum::<f64>() / u.len() as f64;
        assert!((mean_u - 0.5).abs() < 0.02, "uniform mean {mean_u}");
        let mean = n.iter().sum::<f64>() / n.len() as f64;
        let var = n.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.len() as f64;
        assert!(mean.abs() < 0.06 && (var - 1.0).abs() < 0.08, "randn mean {mean}, variance {var}");
        match &first {
            None => first = Some((u, n)),
            Some((u0, n0)) => {
                assert!(u0 == &u, "the same seed gives the same uniforms on {device}, bit for bit");
                // Normals pass through log and cos: equal within the stated bound for f64.
                let worst = n0.iter().zip(&n).map(|(&a, &b)| f64_ulps(a, b)).max().unwrap_or(0);
                let bound = cudasem::cuda::TRANSCENDENTAL_ULP_F64;
                assert!(worst <= bound, "the same seed gives the same normals on {device}: {worst} > {bound} ulp");
            }
        }
        let h = Tensor::rand([1000], DType::F16, device)?.to_vec::<f16>()?;
        assert!(h.iter().all(|x| x.to_f32() < 1.0), "rounding to f16 never reaches 1");
        manual_seed(1234);
        let again = Tensor::rand([64, 64], DType::F32, Device::Cpu)?.to_vec::<f32>()?;
        assert_eq!(Some(&again), first.as_ref().map(|f| &f.0), "reseeding restarts the sequence");
        assert_eq!(
            Tensor::rand([2], DType::I64, device).unwrap_err(),
            Error::UnsupportedDType { op: "rand", dtype: DType::I64 }
        );
    }
    Ok(())
}

#[test]
fn views_share_storage() -> Result<()> {
    for device in devices() {
        let what = format!("views on {device}");
        let x = Tensor::arange(0, 24, 1, DType::F32, device)?;
        let r = x.reshape([2, 3, 4])?;
        assert!(r.shares_storage(&x) && r.is_contiguous());
        assert_eq!(r.stride(), [12, 4, 1]);
        let v = r.view([-1, 4])?;
        assert_eq!(v.shape(), [6, 4]);
        let p = r.permute(&[2, 0, 1])?;
        assert_eq!((p.shape(), p.stride()), (&[4usize, 2, 3][..], &[1usize, 12, 4][..]));
        assert!(!p.is_contiguous());
        assert_eq!(p.to_vec::<f32>()?[..4], [0.0, 4.0, 8.0, 12.0]);
        let tr = r.transpose(0, -1)?;
        assert_eq!(tr.shape(), [4, 3, 2]);
        assert!(
            matches!(tr.view([-1]), Err(Error::InvalidShape { op: "view", .. })),
            "a transposed view cannot flatten"
        );
        let flat = expect_ok(tr.reshape([-1]), &what);
        assert!(!flat.shares_storage(&x), "reshape copies when it must");
        assert_eq!(flat.to_vec::<f32>()?[..4], [0.0, 12.0, 4.0, 16.0]);
        assert_eq!(tr.contiguous()?.to_vec::<f32>()?, flat.to_vec::<f32>()?);
        let n = r.narrow(2, 1, 2)?;
        assert_eq!((n.shape(), n.storage_offset()), (&[2usize, 3, 2][..], 1));
        assert_eq!(n.data_ptr(), x.data_ptr() + 4);
        let sl = x.slice_step(0, -6.., 2)?;
        assert_eq!(sl.to_vec::<f32>()?, [18.0, 20.0, 22.0]);
        assert_eq!(x.slice(0, 2..5)?.to_vec::<f32>()?, [2.0, 3.0, 4.0]);
        assert!(
            matches!(x.slice(0, 30..40), Err(Error::InvalidShape { op: "slice", .. })),
            "unlike Python's, a range past the end is an error"
        );
        let col = Tensor::arange(0, 3, 1, DType::I64, device)?.unsqueeze(-1)?;
        assert_eq!(col.shape(), [3, 1]);
        let e = col.expand([2, -1, 4])?;
        assert_eq!((e.shape(), e.stride()), (&[2usize, 3, 4][..], &[0usize, 1, 0][..]));
        assert_eq!(e.to_vec::<i64>()?[..8], [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(col.broadcast_to([3, 5])?.shape(), [3, 5]);
        assert_eq!(e.squeeze().shape(), [2, 3, 4]);
        assert_eq!(col.squeeze().shape(), [3]);
        assert_eq!(col.squeeze_dim(1)?.shape(), [3]);
        assert_eq!(col.squeeze_dim(0)?.shape(), [3, 1], "a dim that is not 1 is kept");
        assert_eq!(r.flatten()?.shape(), [24]);
        assert_eq!(r.size(-1)?, 4);
        // A write through a view is seen by the base tensor.
        expect_ok(n.fill_(-1.0), &what);
        let all = x.to_vec::<f32>()?;
        assert_eq!(all[..4], [0.0, -1.0, -1.0, 3.0], "{what}");
        let m = Tensor::zeros([2, 3], DType::F64, device)?;
        assert_eq!(m.t()?.shape(), [3, 2]);
        assert!(matches!(r.t(), Err(Error::InvalidArgument { op: "t", .. })));
        assert!(format!("{:?}", p).contains("shape=[4, 2, 3]"));
    }
    Ok(())
}

/// One shape argument everywhere: a shape read from a tensor, arrays, vectors and slices of
/// `usize`, and the signed forms with PyTorch's `-1` where PyTorch allows it.
#[test]
fn every_function_takes_one_shape_argument() -> Result<()> {
    for device in devices() {
        let x = Tensor::arange(0, 24, 1, DType::F32, device)?;
        let y = Tensor::zeros([2, 3, 4], DType::F32, device)?;
        let want = x.to_vec::<f32>()?;
        let dims: Vec<usize> = vec![4, 6];
        let signed: Vec<i64> = vec![-1, 4];
        let isz: [isize; 2] = [3, -1];
        for (r, shape) in [
            (x.reshape(y.shape())?, vec![2, 3, 4]),
            (x.reshape(&dims)?, vec![4, 6]),
            (x.reshape(dims.clone())?, vec![4, 6]),
            (x.reshape(dims.as_slice())?, vec![4, 6]),
            (x.reshape([12usize, 2])?, vec![12, 2]),
            (x.reshape(&signed)?, vec![6, 4]),
            (x.reshape(signed.as_slice())?, vec![6, 4]),
            (x.reshape(isz)?, vec![3, 8]),
            (x.reshape([2, -1, 3])?, vec![2, 4, 3]),
            (x.view(y.shape())?, vec![2, 3, 4]),
            (x.view([-1i64])?, vec![24]),
        ] {
            assert_eq!((r.shape(), r.to_vec::<f32>()?), (shape.as_slice(), want.clone()), "on {device}");
        }
        let ones = |shape: &[usize]| Tensor::ones(shape, DType::F32, device);
        assert_eq!(ones(y.shape())?.shape(), y.shape(), "creation takes a tensor's shape");
        assert_eq!(Tensor::empty(&dims, DType::U8, device)?.shape(), [4, 6]);
        // No `rand` that succeeds here: the seed test is the only one drawing numbers (a refused
        // shape draws none).
        assert_eq!(Tensor::zeros(dims.clone(), DType::F32, device)?.shape(), [4, 6]);
        assert_eq!(Tensor::full(vec![2i64, 2], 7, DType::I64, device)?.to_vec::<i64>()?, [7; 4]);
        assert_eq!(Tensor::from_slice(&[1u8, 2, 3, 4], [2i32, 2], device)?.shape(), [2, 2]);
        // expand / broadcast_to take the same forms; -1 keeps a size in expand.
        let col = x.narrow(0, 0, 3)?.reshape([3, 1])?;
        let e = col.expand(y.shape().iter().skip(1).copied().collect::<Vec<_>>())?;
        assert_eq!((e.shape(), e.stride()), (&[3usize, 4][..], &[1usize, 0][..]));
        assert_eq!(col.expand([2, -1, 5])?.shape(), [2, 3, 5]);
        assert_eq!(col.broadcast_to(e.shape())?.to_vec::<f32>()?, e.to_vec::<f32>()?);

        // A bad -1 is a typed error naming the shape.
        let e = Tensor::zeros([2, -1], DType::F32, device).unwrap_err();
        assert!(matches!(&e, Error::InvalidShape { op: "zeros", shape, .. } if *shape == [2, -1]), "{e:?}");
        assert!(e.to_string().contains("[2, -1]") && e.to_string().contains("negative size -1"), "{e}");
        for made in [
            Tensor::empty([-1], DType::F32, device),
            Tensor::ones(&[3i64, -2][..], DType::F32, device),
            Tensor::randn(vec![-1isize], DType::F32, device),
            Tensor::from_slice(&[1.0f32], [-1], device),
        ] {
            assert!(matches!(made, Err(Error::InvalidShape { .. })), "-1 is not a size when making a tensor");
        }
        let e = x.reshape([-1, 2, -1]).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidShape {
                op: "reshape",
                shape: vec![-1, 2, -1],
                reason: "only one dimension can be inferred (-1)".into()
            }
        );
        assert!(e.to_string().contains("[-1, 2, -1]"), "{e}");
        assert!(matches!(x.view([-2, 12]), Err(Error::InvalidShape { op: "view", .. })), "a negative size");
        assert!(matches!(x.reshape([5, -1]), Err(Error::InvalidShape { op: "reshape", .. })), "24 is not 5k");
        let e = col.expand([-1, 3, 1]).unwrap_err();
        assert!(matches!(&e, Error::InvalidShape { op: "expand", shape, .. } if *shape == [-1, 3, 1]), "{e:?}");
        assert!(matches!(col.expand([3, -3]), Err(Error::InvalidShape { op: "expand", .. })));
        assert!(matches!(col.broadcast_to([3, -1]), Err(Error::InvalidShape { op: "broadcast_to", .. })));
    }
    Ok(())
}

/// `slice` takes Rust's ranges (negative bounds from the end) and checks them like Rust does.
#[test]
fn slices_take_rust_ranges() -> Result<()> {
    let mut rng = tensor_util::Rng::new(21);
    for device in devices() {
        let data: Vec<f64> = (0..42).map(|_| rng.uniform(-4.0, 4.0)).collect();
        let x = Tensor::from_slice(&data, [6, 7], device)?;
        // The reference: the rows `rows` and columns `cols` (as index lists) of `data`.
        let pick = |rows: &[usize], cols: &[usize]| -> Vec<f64> {
            let data = &data;
            rows.iter().flat_map(|&r| cols.iter().map(move |&c| data[r * 7 + c])).collect()
        };
        let all_cols: Vec<usize> = (0..7).collect();
        let all_rows: Vec<usize> = (0..6).collect();
        let (lo, hi) = (1usize, 4usize);
        for (t, rows, cols) in [
            (x.slice(0, 2..5)?, vec![2, 3, 4], all_cols.clone()),
            (x.slice(0, ..)?, all_rows.clone(), all_cols.clone()),
            (x.slice(0, 3..)?, vec![3, 4, 5], all_cols.clone()),
            (x.slice(0, ..=4)?, vec![0, 1, 2, 3, 4], all_cols.clone()),
            (x.slice(0, -2..)?, vec![4, 5], all_cols.clone()),
            (x.slice(0, ..-4)?, vec![0, 1], all_cols.clone()),
            (x.slice(-1, lo..hi)?, all_rows.clone(), vec![1, 2, 3]),
            (x.slice(1, lo..=hi)?, all_rows.clone(), vec![1, 2, 3, 4]),
            (x.slice(1, 7..)?, all_rows.clone(), vec![]),
            (x.slice_step(1, .., 3)?, all_rows.clone(), vec![0, 3, 6]),
            (x.slice_step(1, 1..=5, 2)?, all_rows.clone(), vec![1, 3, 5]),
            (x.slice_step(0, -5..-1, 3)?, vec![1, 4], all_cols.clone()),
            (x.slice(0, 1..5)?.slice_step(1, 2.., 4)?, vec![1, 2, 3, 4], vec![2, 6]),
        ] {
            assert_eq!(t.shape(), [rows.len(), cols.len()], "on {device}");
            assert!(t.shares_storage(&x), "a slice is a view");
            assert_eq!(t.to_vec::<f64>()?, pick(&rows, &cols), "rows {rows:?}, cols {cols:?} on {device}");
        }
        for (what, r) in [
            ("past the end", x.slice(0, 2..7)),
            ("an inclusive end past the last", x.slice(0, ..=6)),
            ("starts after it ends", x.slice(1, hi..lo)),
            ("before the start", x.slice(1, -8..)),
            ("past the end, stepped", x.slice_step(1, 8.., 2)),
        ] {
            let e = r.unwrap_err();
            assert!(matches!(&e, Error::InvalidShape { shape, .. } if *shape == [6, 7]), "{what}: {e:?}");
            assert!(e.to_string().contains("out of bounds for dimension"), "{what}: {e}");
        }
        let e = x.slice(0, 2..7).unwrap_err();
        assert!(e.to_string().contains("range 2..7 is out of bounds for dimension 0 of size 6"), "{e}");
        assert!(matches!(x.slice(2, ..), Err(Error::InvalidDim { op: "slice", dim: 2, ndim: 2 })));
        let s = Tensor::full([0usize; 0], 1.0, DType::F32, device)?;
        assert!(matches!(s.slice(0, ..), Err(Error::InvalidArgument { op: "slice", .. })));
    }
    Ok(())
}

#[test]
fn bad_input_gives_typed_errors_with_actionable_messages() -> Result<()> {
    for device in devices() {
        let a = Tensor::ones([2, 3], DType::F32, device)?;
        let e = a.add(&Tensor::ones([4], DType::F32, device)?).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { op: "add", lhs: vec![2, 3], rhs: vec![4] });
        assert!(
            e.to_string()
                .contains("size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1"),
            "{e}"
        );

        let e = a.sum(&[2], false).unwrap_err();
        assert_eq!(e, Error::InvalidDim { op: "sum", dim: 2, ndim: 2 });
        assert!(
            e.to_string().contains("Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
            "{e}"
        );
        assert!(matches!(a.transpose(0, -3), Err(Error::InvalidDim { op: "transpose", dim: -3, .. })));
        assert!(matches!(a.softmax(5), Err(Error::InvalidDim { op: "softmax", .. })));
        assert!(matches!(a.unsqueeze(4), Err(Error::InvalidDim { op: "unsqueeze", .. })));
        assert!(matches!(a.argmax(Some(2), false), Err(Error::InvalidDim { .. })));
        assert!(matches!(a.sum(&[0, -2], false), Err(Error::InvalidArgument { op: "sum", .. })), "a repeated dim");

        let e = a.reshape([4, -1]).unwrap_err();
        assert!(matches!(&e, Error::InvalidShape { op: "reshape", shape, .. } if shape == &[4, -1]), "{e}");
        assert!(e.to_string().contains("invalid for input of size 6"), "{e}");
        assert!(matches!(a.reshape([-1, -1]), Err(Error::InvalidShape { .. })));
        assert!(matches!(a.narrow(1, 2, 2), Err(Error::InvalidShape { op: "narrow", .. })));
        assert!(matches!(a.expand([4, 3, 2]), Err(Error::ShapeMismatch { op: "expand", .. })));
        assert!(matches!(a.permute(&[0, 0]), Err(Error::InvalidArgument { op: "permute", .. })));
        assert!(matches!(a.slice_step(0, 0..1, 0), Err(Error::InvalidArgument { op: "slice_step", .. })));
        assert!(matches!(
            Tensor::from_slice(&[1.0f32; 5], [2, 3], device),
            Err(Error::InvalidShape { op: "from_slice", .. })
        ));
        assert!(matches!(
            Tensor::arange(0, 5, 0, DType::I64, device),
            Err(Error::InvalidArgument { op: "arange", .. })
        ));
        assert!(matches!(
            Tensor::arange(5, 0, 1, DType::I64, device),
            Err(Error::InvalidArgument { op: "arange", .. })
        ));

        let i = Tensor::ones([3], DType::I64, device)?;
        let e = i.gelu().unwrap_err();
        assert_eq!(e, Error::UnsupportedDType { op: "gelu", dtype: DType::I64 });
        assert!(e.to_string().starts_with("\"gelu\" not implemented for 'Long'"), "{e}");
        assert_eq!(i.mean_all().unwrap_err(), Error::UnsupportedDType { op: "mean", dtype: DType::I64 });
        let b = Tensor::ones([3], DType::Bool, device)?;
        assert_eq!(b.sub(&b).unwrap_err(), Error::UnsupportedDType { op: "sub", dtype: DType::Bool });
        assert_eq!(b.neg().unwrap_err(), Error::UnsupportedDType { op: "neg", dtype: DType::Bool });

        let e = a.to_vec::<f64>().unwrap_err();
        assert_eq!(e, Error::DTypeMismatch { op: "to_vec", expected: DType::F64, found: DType::F32 });
        assert!(matches!(a.item::<f32>(), Err(Error::InvalidArgument { op: "item", .. })));
        let e = i.mul_(1.5).unwrap_err();
        assert!(e.to_string().contains("result type Float can't be cast to the desired output type Long"), "{e}");
        assert!(matches!(Tensor::zeros([2], DType::F32, "tpu"), Err(Error::InvalidDeviceString { .. })));
    }
    Ok(())
}

#[test]
fn tensors_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tensor>();
    assert_send_sync::<DType>();
    assert_send_sync::<cudasem::Scalar>();
    assert_send_sync::<cudasem::kernel::KernelOp>();
}

#[test]
fn tensors_cross_threads() -> Result<()> {
    let device = *devices().last().unwrap_or(&Device::Cpu);
    let x = Tensor::arange(0, 100, 1, DType::F64, device)?;
    let handles: Vec<_> = (0..4)
        .map(|k| {
            let x = x.clone();
            std::thread::spawn(move || -> Result<f64> {
                // A new thread's current device is 0, but the op runs where `x` lives.
                let y = expect_ok(x.mul(k as f64), "mul on another thread");
                y.sum_all()?.item::<f64>()
            })
        })
        .collect();
    for (k, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().expect("thread")?, 4950.0 * k as f64);
    }
    Ok(())
}

/// A transposed tensor made contiguous, cast, mapped by a unary op or combined with a contiguous
/// one moves every element to its place, for shapes that leave partial tiles (the CUDA driver
/// stages transposes through shared tiles of 64 × 64 half-type elements for one input, 32 × 32
/// otherwise): odd sizes, and multiples of 8 that are not multiples of a tile.
#[test]
fn transposed_tensors_become_contiguous_in_place_order() -> Result<()> {
    for (r, c) in [(131usize, 67usize), (200, 136)] {
        let base: Vec<f32> = (0..r * c).map(|i| ((i * 37) % 1001) as f32 / 8.0 - 60.0).collect();
        let other_base: Vec<f32> = (0..r * c).map(|i| ((i * 53) % 997) as f32 / 8.0 - 60.0).collect();
        for device in devices() {
            for dtype in [DType::BF16, DType::F16, DType::F32, DType::U8, DType::F64] {
                let what = format!("{dtype} [{c}, {r}] on {device}");
                let x = Tensor::from_slice(&base, [r, c], device)?.to_dtype(dtype)?;
                let xv = values(&x)?;
                let want: Vec<f64> = (0..c * r).map(|k| xv[(k % r) * c + k / r]).collect();
                let t = x.t()?;
                assert!(!t.is_contiguous(), "{what}");
                assert_eq!(values(&t.contiguous()?)?, want, "{what}: contiguous");
                transposed_casts_and_unary(&t, &want, device, &what)?;
                // Binary and ternary ops with the transposed operand in each place (exact results).
                let y = Tensor::from_slice(&other_base, [c, r], device)?.to_dtype(dtype)?;
                let yv = values(&y)?;
                let max: Vec<f64> = want.iter().zip(&yv).map(|(a, b)| a.max(*b)).collect();
                assert_eq!(values(&t.maximum(&y)?)?, max, "{what}: maximum(t, y)");
                assert_eq!(values(&y.maximum(&t)?)?, max, "{what}: maximum(y, t)");
                let picked = Tensor::where_cond(&t.gt(&y)?, &t, &y)?;
                assert_eq!(values(&picked)?, max, "{what}: where(t > y, t, y)");
            }
        }
    }
    Ok(())
}

/// `t` (transposed, holding `want` in row-major order) cast, copied with a conversion and negated.
fn transposed_casts_and_unary(t: &Tensor, want: &[f64], device: Device, what: &str) -> Result<()> {
    let (dtype, shape) = (t.dtype(), t.shape().to_vec());
    let other = if dtype == DType::F16 { DType::BF16 } else { DType::F16 };
    let cast = t.contiguous()?.to_dtype(other)?;
    let cast_t = Tensor::empty(shape.clone(), other, device)?;
    cast_t.copy_(&t.to_dtype(other)?, false)?;
    assert_eq!(values(&cast_t)?, values(&cast)?, "{what}: cast to {other}");
    let converted = Tensor::empty(shape.clone(), other, device)?;
    converted.copy_(t, false)?;
    assert_eq!(values(&converted)?, values(&cast)?, "{what}: copy_ converting to {other}");
    if dtype.is_float() {
        let neg = Tensor::empty(shape, dtype, device)?;
        neg.copy_(&t.neg()?, false)?;
        let want_neg: Vec<f64> = want.iter().map(|v| -v).collect();
        assert_eq!(values(&neg)?, want_neg, "{what}: neg");
    }
    Ok(())
}
