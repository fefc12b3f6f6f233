//! Batched matrix product on the CPU, through the `gemm` crate (`f64` for `float64`, `f32` for
//! the other floating-point dtypes, whose results are rounded once into the output dtype).

use super::elem::{gather, scatter, Elem};
use super::Operand;
use crate::dtype::DType;
use crate::kernel::BufferView;
use gemm::Parallelism;

/// Operand work above which `gemm` may use the rayon pool.
const PARALLEL_FLOPS: usize = 1 << 18;

/// The element types `gemm::gemm` supports that the kernels use.
trait GemmElem: Elem + Default {}
impl GemmElem for f32 {}
impl GemmElem for f64 {}

/// One product `dst = lhs · rhs` of dense row-major matrices: `lhs` is `m×k`, `rhs` `k×n`,
/// `dst` `m×n`.
fn matmul<T: GemmElem>(m: usize, k: usize, n: usize, lhs: &[T], rhs: &[T], dst: &mut [T]) {
    if m == 0 || n == 0 || k == 0 || lhs.len() != m * k || rhs.len() != k * n || dst.len() != m * n {
        return; // nothing to compute (`dst` keeps its zeros for k == 0)
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
}

fn batched<T: GemmElem>(lhs: Operand<'_>, rhs: Operand<'_>, out: &mut [u8], dst: &BufferView) {
    let r = dst.shape.len();
    let (m, n, k) = (dst.shape[r - 2], dst.shape[r - 1], lhs.view.shape[r - 1]);
    let batch: usize = dst.shape[..r - 2].iter().product();
    let a = gather::<T>(lhs.bytes, lhs.view);
    let b = gather::<T>(rhs.bytes, rhs.view);
    let mut c = vec![T::default(); batch * m * n];
    for i in 0..batch {
        matmul(
            m,
            k,
            n,
            &a[i * m * k..(i + 1) * m * k],
            &b[i * k * n..(i + 1) * k * n],
            &mut c[i * m * n..(i + 1) * m * n],
        );
    }
    scatter(&c, out, dst);
}

pub(super) fn gemm(lhs: Operand<'_>, rhs: Operand<'_>, out: &mut [u8], dst: &BufferView) {
    if dst.dtype == DType::F64 {
        batched::<f64>(lhs, rhs, out, dst)
    } else {
        batched::<f32>(lhs, rhs, out, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_product() {
        let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2×3
        let b = [7.0f64, 8.0, 9.0, 10.0, 11.0, 12.0]; // 3×2
        let mut c = [0.0f64; 4];
        matmul(2, 3, 2, &a, &b, &mut c);
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
        let mut c32 = [0.0f32; 4];
        matmul(2, 3, 2, &a.map(|x| x as f32), &b.map(|x| x as f32), &mut c32);
        assert_eq!(c32, [58.0, 64.0, 139.0, 154.0]);
        let mut empty = [5.0f64; 4];
        matmul(2, 3, 2, &a[..5], &b, &mut empty);
        assert_eq!(empty, [5.0; 4], "mismatched lengths are refused, not read past");
    }
}
