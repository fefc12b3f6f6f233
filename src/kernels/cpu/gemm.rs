//! Batched matrix product on the CPU, through the `gemm` crate (`f64` for `float64`, `f32` for
//! the other floating-point dtypes, whose results are rounded once into the output dtype).

use super::elem::{gather, scatter, Elem, Operand};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::BufferView;
use gemm::Parallelism;

/// Operand work above which `gemm` may use the rayon pool.
const PARALLEL_FLOPS: usize = 1 << 18;

/// The element types `gemm::gemm` supports that the kernels use.
trait GemmElem: Elem + Default {}
impl GemmElem for f32 {}
impl GemmElem for f64 {}

/// Whether a buffer of `len` elements holds exactly the `dims` (`[batch, rows, cols]` or
/// `[rows, cols]`) its operand's shape says: an [`Error::Internal`] if not, since the op was
/// validated before it reached the kernel, so a mismatch is a bug, never a user's input.
fn check_len(name: &str, len: usize, dims: &[usize]) -> Result<()> {
    if dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) == Some(len) {
        return Ok(());
    }
    Err(Error::Internal {
        op: "cpu gemm",
        reason: format!("the {name} buffer holds {len} elements, not the {dims:?} its shape says"),
    })
}

/// One product `dst = lhs · rhs` of dense row-major matrices: `lhs` is `m×k`, `rhs` `k×n`,
/// `dst` `m×n`. A slice of the wrong length is an error (see [`check_len`]) and `dst` is left
/// as it was.
fn matmul<T: GemmElem>(m: usize, k: usize, n: usize, lhs: &[T], rhs: &[T], dst: &mut [T]) -> Result<()> {
    check_len("lhs", lhs.len(), &[m, k])?;
    check_len("rhs", rhs.len(), &[k, n])?;
    check_len("dst", dst.len(), &[m, n])?;
    if m == 0 || n == 0 || k == 0 {
        return Ok(()); // nothing to compute (`dst` keeps its zeros for k == 0)
    }
    let par = if m * n * k >= PARALLEL_FLOPS { Parallelism::Rayon(0) } else { Parallelism::None };
    let (k_, n_) = (k as isize, n as isize);
    // SAFETY:
    // - - `T: GemmElem` is `f32` or `f64`, types `gemm` supports (it panics on any other). - `dst`, `lhs`,
    //   `rhs` are live, distinct slices of exactly `m·n`, `m·k`, `k·n` elements, checked above;
    // - with column stride 1 and row strides `n`, `k`, `n` every address `gemm` forms (`row · rs + col · cs`
    //   for `row < rows`, `col < cols`) lies inside its slice. - `dst` is borrowed mutably, so nothing else
    //   reads or writes it during the call. - `read_dst = false`: `dst`'s previous contents are not read
    //   (`alpha` is ignored).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n_,
            false,
            lhs.as_ptr(),
            1,
            k_,
            rhs.as_ptr(),
            1,
            n_,
            T::default(),
            T::from_f64(1.0),
            false,
            false,
            false,
            par,
        )
    }
    Ok(())
}

fn batched<T: GemmElem>(
    lhs: Operand<'_>,
    rhs: Operand<'_>,
    bias: Option<Operand<'_>>,
    out: &mut [u8],
    dst: &BufferView,
) -> Result<()> {
    let r = dst.shape.len();
    let (m, n, k) = (dst.shape[r - 2], dst.shape[r - 1], lhs.view.shape[r - 1]);
    let batch: usize = dst.shape[..r - 2].iter().product();
    let a = gather::<T>(lhs.bytes, lhs.view);
    let b = gather::<T>(rhs.bytes, rhs.view);
    check_len("lhs", a.len(), &[batch, m, k])?;
    check_len("rhs", b.len(), &[batch, k, n])?;
    let mut c = vec![T::default(); batch * m * n];
    for i in 0..batch {
        matmul(
            m,
            k,
            n,
            &a[i * m * k..(i + 1) * m * k],
            &b[i * k * n..(i + 1) * k * n],
            &mut c[i * m * n..(i + 1) * m * n],
        )?;
    }
    if let Some(bias) = bias {
        // Added to the accumulator (`f32` for the half types), rounded once by `scatter`.
        let b = gather::<T>(bias.bytes, bias.view);
        check_len("bias", b.len(), &[n])?;
        for (j, v) in c.iter_mut().enumerate() {
            *v = T::from_f64(v.to_f64() + b[j % n].to_f64());
        }
    }
    scatter(&c, out, dst);
    Ok(())
}

/// `dst = lhs · rhs (+ bias)` over the last two dimensions, batched over the others, the bias
/// `[N]` added to each row in the accumulator's type before the one rounding; an error if the
/// operands do not hold the elements their shapes say (a broken invariant, not a misuse).
pub(super) fn gemm(
    lhs: Operand<'_>,
    rhs: Operand<'_>,
    bias: Option<Operand<'_>>,
    out: &mut [u8],
    dst: &BufferView,
) -> Result<()> {
    if dst.dtype == DType::F64 {
        batched::<f64>(lhs, rhs, bias, out, dst)
    } else {
        batched::<f32>(lhs, rhs, bias, out, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::DevicePtr;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// The product by the definition, in `f64`.
    fn naive(m: usize, k: usize, n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        (0..m * n).map(|ij| (0..k).map(|l| a[ij / n * k + l] * b[l * n + ij % n]).sum()).collect()
    }

    fn random(rng: &mut StdRng, len: usize) -> Vec<f64> {
        (0..len).map(|_| f64::from(rng.random_range(-8i32..8))).collect()
    }

    #[test]
    fn small_product() {
        let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2×3
        let b = [7.0f64, 8.0, 9.0, 10.0, 11.0, 12.0]; // 3×2
        let mut c = [0.0f64; 4];
        matmul(2, 3, 2, &a, &b, &mut c).unwrap();
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        let mut c32 = [0.0f32; 4];
        matmul(2, 3, 2, &a.map(|x| x as f32), &b.map(|x| x as f32), &mut c32).unwrap();
        assert_eq!(c32, [58.0, 64.0, 139.0, 154.0]);
    }

    #[test]
    fn random_products_match_the_definition() {
        let mut rng = StdRng::seed_from_u64(0x6E33);
        for _ in 0..50 {
            let (m, k, n) = (rng.random_range(0..9usize), rng.random_range(0..9usize), rng.random_range(0..9usize));
            let (a, b) = (random(&mut rng, m * k), random(&mut rng, k * n));
            let mut c = vec![0.0f64; m * n];
            matmul(m, k, n, &a, &b, &mut c).unwrap();
            // Small integers: every sum is exact, so the product equals the definition's.
            assert_eq!(c, naive(m, k, n, &a, &b), "{m}×{k} by {k}×{n}");
        }
    }

    #[test]
    fn a_buffer_of_the_wrong_length_is_an_error_not_a_silent_no_op() {
        let mut rng = StdRng::seed_from_u64(0x6E34);
        for _ in 0..50 {
            let (m, k, n) = (rng.random_range(1..9usize), rng.random_range(1..9usize), rng.random_range(1..9usize));
            // One of the three buffers one element short or long; `dst` must keep its contents.
            let which = rng.random_range(0..3usize);
            let mut lens = [m * k, k * n, m * n];
            lens[which] = if rng.random_range(0..2u8) == 0 { lens[which] + 1 } else { lens[which] - 1 };
            let (a, b) = (random(&mut rng, lens[0]), random(&mut rng, lens[1]));
            let mut c = vec![5.0f64; lens[2]];
            let err = matmul(m, k, n, &a, &b, &mut c).expect_err("a mismatched length must be refused");
            let name = ["lhs", "rhs", "dst"][which];
            assert!(
                matches!(&err, Error::Internal { op: "cpu gemm", reason } if reason.contains(name)),
                "{name} of {m}×{k} by {k}×{n}: {err}"
            );
            assert!(c.iter().all(|&x| x == 5.0), "dst is not written when the product is refused");
        }
    }

    #[test]
    fn batched_operands_that_do_not_fit_their_shapes_are_an_error() {
        // lhs 2×3 but rhs's view says 2×2: the inner dimensions disagree, which `validate`
        // refuses; the kernel refuses it too, instead of reading past or writing nothing.
        let view = |shape: [usize; 2]| BufferView {
            ptr: DevicePtr(0),
            dtype: DType::F32,
            shape: shape.into(),
            strides: [shape[1], 1].into(),
            offset: 0,
        };
        let (lv, rv, dv) = (view([2, 3]), view([2, 2]), view([2, 2]));
        let lb: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_ne_bytes()).collect();
        let rb: Vec<u8> = (0..4).flat_map(|i| (i as f32).to_ne_bytes()).collect();
        let mut out = vec![0xABu8; 16];
        let err = gemm(Operand { bytes: &lb, view: &lv }, Operand { bytes: &rb, view: &rv }, None, &mut out, &dv)
            .expect_err("an rhs of 4 elements for a 3×2 matrix must be refused");
        assert!(matches!(&err, Error::Internal { reason, .. } if reason.contains("rhs")), "{err}");
        assert_eq!(out, [0xAB; 16], "nothing is written");
    }
}
