//! `Display` for tensors prints PyTorch's `repr` (its default print options: precision 4,
//! threshold 1000, edgeitems 3, linewidth 80). The expected texts are PyTorch 2's output.

mod common;

use common::TestRng;
use cudasem::{DType, Tensor};

#[test]
fn small_tensors_print_like_pytorch() -> cudasem::Result<()> {
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], "cuda:0")?;
    assert_eq!(t.to_string(), "tensor([[1., 2.],\n        [3., 4.]], device='cuda:0')");
    assert_eq!(
        t.to_dtype(DType::F16)?.to_string(),
        "tensor([[1., 2.],\n        [3., 4.]], device='cuda:0', dtype=torch.float16)"
    );
    let f = Tensor::from_slice(&[0.5f32, -1.25, 3.0], [3], "cpu")?;
    assert_eq!(f.to_string(), "tensor([ 0.5000, -1.2500,  3.0000])");
    let sci = Tensor::from_slice(&[1.0e-5f64, 1.0, 2.5e4], [3], "cpu")?;
    assert_eq!(sci.to_string(), "tensor([1.0000e-05, 1.0000e+00, 2.5000e+04], dtype=torch.float64)");
    let special = Tensor::from_slice(&[f32::NAN, f32::INFINITY, -1.0, 0.0], [4], "cpu")?;
    assert_eq!(special.to_string(), "tensor([nan, inf, -1.,  0.])");
    let ints = Tensor::from_slice(&[3i64, -20, 7], [3], "cpu")?;
    assert_eq!(ints.to_string(), "tensor([  3, -20,   7])");
    let i32s = Tensor::from_slice(&[1i32, 2], [1, 2], "cuda")?;
    let dev = i32s.device();
    assert_eq!(i32s.to_string(), format!("tensor([[1, 2]], device='{dev}', dtype=torch.int32)"));
    let b = Tensor::from_slice(&[true, false], [2], "cpu")?;
    assert_eq!(b.to_string(), "tensor([ True, False])");
    assert_eq!(Tensor::from_slice(&[2.5f32], [], "cpu")?.to_string(), "tensor(2.5000)");
    assert_eq!(Tensor::zeros([0, 3], DType::F32, "cpu")?.to_string(), "tensor([], size=(0, 3))");
    assert_eq!(Tensor::zeros([0], DType::I64, "cpu")?.to_string(), "tensor([], dtype=torch.int64)");
    let cube = Tensor::arange(0, 8, 1, DType::I64, "cpu")?.reshape([2, 2, 2])?;
    assert_eq!(cube.to_string(), "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]])");
    Ok(())
}

#[test]
fn long_rows_wrap_at_80_columns() -> cudasem::Result<()> {
    let t = Tensor::arange(0, 30, 1, DType::I64, "cpu")?;
    assert_eq!(
        t.to_string(),
        "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])"
    );
    Ok(())
}

#[test]
fn large_tensors_are_summarized_with_edge_items() -> cudasem::Result<()> {
    let t = Tensor::arange(0, 2000, 1, DType::I64, "cuda:0")?;
    assert_eq!(t.to_string(), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], device='cuda:0')");
    let m = Tensor::arange(0, 1001 * 2, 1, DType::F32, "cpu")?.reshape([1001, 2])?;
    let s = m.to_string();
    assert_eq!(
        s,
        "tensor([[0.0000e+00, 1.0000e+00],\n        [2.0000e+00, 3.0000e+00],\n        [4.0000e+00, 5.0000e+00],\n        ...,\n        [1.9960e+03, 1.9970e+03],\n        [1.9980e+03, 1.9990e+03],\n        [2.0000e+03, 2.0010e+03]])"
    );
    // Random data: a summarized tensor shows exactly its edge items, each as its value.
    let mut rng = TestRng::new(7);
    for _ in 0..5 {
        let (rows, cols) = (7 + (rng.next_u64() % 50) as usize, 150 + (rng.next_u64() % 40) as usize);
        let data: Vec<i64> = (0..rows * cols).map(|_| (rng.next_u64() % 100) as i64).collect();
        let t = Tensor::from_slice(&data, [rows, cols], "cuda")?;
        let s = t.to_string();
        let numbers: Vec<i64> =
            s.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
        let mut want = Vec::new();
        for r in [0, 1, 2, rows - 3, rows - 2, rows - 1] {
            for c in [0, 1, 2, cols - 3, cols - 2, cols - 1] {
                want.push(data[r * cols + c]);
            }
        }
        let device = match t.device() {
            cudasem::Device::Cuda(Some(i)) => i as i64,
            other => panic!("a CUDA tensor on {other}"),
        };
        assert_eq!(&numbers[..36], &want[..], "{s}");
        assert_eq!(numbers[36..], [device], "only the device index follows: {s}");
        assert_eq!(s.matches("...").count(), 7, "one per row and one between rows: {s}");
    }
    Ok(())
}
