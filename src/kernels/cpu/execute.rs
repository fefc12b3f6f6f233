//! The dispatcher: [`execute`] loads each input's span through [`Memory`], runs the op's kernel
//! over host bytes, and writes back only the output's elements.

use super::elem::{for_each_offset, scalar_bytes, Operand};
use super::{elementwise, fused, gemm, random, reduce};
use crate::error::Result;
use crate::kernel::DevicePtr;
use crate::kernel::{BufferView, KernelOp, ReduceOp};

/// Byte access to the memory an op's views point into.
pub(crate) trait Memory {
    /// Reads `out.len()` bytes at `at`.
    fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()>;
    /// Writes the byte ranges `runs` (`(start, len)` within `span`) of `span` to `at + start`.
    fn write_runs(&self, at: DevicePtr, span: &[u8], runs: &[(usize, usize)]) -> Result<()>;
}

/// A view's span as host bytes, and the view rebased onto them.
struct Loaded {
    bytes: Vec<u8>,
    view: BufferView,
}

fn rebased(v: &BufferView) -> (Option<(DevicePtr, usize)>, BufferView) {
    let mut local = v.clone();
    if let Some((first, _)) = v.span() {
        local.offset -= first;
    }
    (v.byte_span(), local)
}

fn load(mem: &dyn Memory, v: &BufferView) -> Result<Loaded> {
    let (span, view) = rebased(v);
    let mut bytes = Vec::new();
    if let Some((at, len)) = span {
        bytes = vec![0u8; len];
        mem.read(at, &mut bytes)?;
    }
    Ok(Loaded { bytes, view })
}

/// The byte ranges of a view's elements within its span, adjacent ones merged.
pub(crate) fn runs(v: &BufferView) -> Vec<(usize, usize)> {
    let size = v.dtype.size();
    if v.is_contiguous() {
        return vec![(v.offset * size, v.numel() * size)];
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    for_each_offset(&v.shape, &v.strides, v.offset, |o| {
        let start = o * size;
        match out.last_mut() {
            Some((s, l)) if *s + *l == start => *l += size,
            _ => out.push((start, size)),
        }
    });
    out
}

/// Runs `op` to completion over `mem`.
pub(crate) fn execute(op: &KernelOp, mem: &dyn Memory) -> Result<()> {
    op.validate()?;
    let (span, dst) = rebased(op.output());
    let Some((at, len)) = span else {
        return Ok(()); // an empty output: nothing to write
    };
    let inputs = op.inputs().into_iter().map(|v| load(mem, v)).collect::<Result<Vec<_>>>()?;
    let arg = |i: usize| Operand { bytes: &inputs[i].bytes, view: &inputs[i].view };
    let mut out = vec![0u8; len];
    match op {
        KernelOp::Fill { value, .. } => elementwise::fill(&mut out, &dst, *value),
        KernelOp::Cast { .. } => elementwise::cast_copy(arg(0), &mut out, &dst),
        KernelOp::CopyStrided { .. } => elementwise::copy_strided(arg(0), &mut out, &dst),
        KernelOp::Unary { op, .. } => elementwise::unary(*op, arg(0), &mut out, &dst),
        KernelOp::Binary { op, compute, .. } => elementwise::binary(*op, arg(0), arg(1), *compute, &mut out, &dst),
        KernelOp::BinaryScalar { op, value, rhs_dtype, compute, .. } => {
            // The number as one element of `rhs_dtype`, broadcast.
            let bytes = scalar_bytes(*value, *rhs_dtype);
            let view = BufferView::number(*rhs_dtype, &dst.shape);
            let rhs = Operand { bytes: &bytes, view: &view };
            elementwise::binary(*op, arg(0), rhs, *compute, &mut out, &dst)
        }
        KernelOp::Where { .. } => elementwise::select(arg(0), arg(1), arg(2), &mut out, &dst),
        KernelOp::Reduce { op, dims, .. } => reduce::reduce(*op, arg(0), dims, &mut out, &dst),
        KernelOp::Extreme { max, dims, indices, .. } => {
            let (value_op, index_op) =
                if *max { (ReduceOp::Max, ReduceOp::ArgMax) } else { (ReduceOp::Min, ReduceOp::ArgMin) };
            reduce::reduce(value_op, arg(0), dims, &mut out, &dst);
            // The indices: the same groups, the arg-reduction's kernel.
            let (ispan, idst) = rebased(indices);
            if let Some((iat, ilen)) = ispan {
                let mut iout = vec![0u8; ilen];
                reduce::reduce(index_op, arg(0), dims, &mut iout, &idst);
                mem.write_runs(iat, &iout, &runs(&idst))?;
            }
        }
        KernelOp::Softmax { dim, log, .. } => reduce::softmax(arg(0), *dim, *log, &mut out, &dst),
        KernelOp::Gemm { bias, .. } => gemm::gemm(arg(0), arg(1), bias.as_ref().map(|_| arg(2)), &mut out, &dst)?,
        KernelOp::Norm { src, weight, bias, dims, eps, rms, .. } => {
            // Inputs in order: src, then the weight and bias that are given.
            let w = weight.as_ref().map(|_| arg(1));
            let b = bias.as_ref().map(|_| arg(1 + weight.is_some() as usize));
            let n = src.shape[src.shape.len() - dims..].iter().product();
            fused::norm(arg(0), w, b, fused::NormRows { n, eps: *eps, rms: *rms }, &mut out, &dst)
        }
        KernelOp::Attention { mask, scale, causal, .. } => {
            let mask = mask.as_ref().map(|_| arg(3));
            let a = fused::Attn { q: arg(0), k: arg(1), v: arg(2), mask, scale: *scale, causal: *causal };
            fused::attention(a, &mut out, &dst)
        }
        KernelOp::Random(r) => {
            let src = r.src.as_ref().map(|_| (&inputs[0].bytes[..], &inputs[0].view));
            let slot = r.slot().map(|_| &inputs[inputs.len() - 1].bytes[..]);
            random::random(r, src, slot, &mut out)
        }
    }
    mem.write_runs(at, &out, &runs(&dst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::kernel::{BinaryOp, UnaryOp};
    use crate::scalar::Scalar;
    use std::cell::RefCell;

    /// A flat byte array at address 0.
    struct Flat(RefCell<Vec<u8>>);

    impl Memory for Flat {
        fn read(&self, at: DevicePtr, out: &mut [u8]) -> Result<()> {
            let m = self.0.borrow();
            out.copy_from_slice(&m[at.0 as usize..at.0 as usize + out.len()]);
            Ok(())
        }
        fn write_runs(&self, at: DevicePtr, span: &[u8], runs: &[(usize, usize)]) -> Result<()> {
            let mut m = self.0.borrow_mut();
            for &(s, l) in runs {
                m[at.0 as usize + s..at.0 as usize + s + l].copy_from_slice(&span[s..s + l]);
            }
            Ok(())
        }
    }

    fn f32s(m: &Flat, at: usize, n: usize) -> Vec<f32> {
        let b = m.0.borrow();
        (0..n).map(|i| f32::from_ne_bytes(b[at + 4 * i..at + 4 * i + 4].try_into().unwrap())).collect()
    }

    fn view(at: u64, dtype: DType, shape: &[usize], strides: &[usize]) -> BufferView {
        BufferView { ptr: DevicePtr(at), dtype, shape: shape.into(), strides: strides.into(), offset: 0 }
    }

    fn memory_with(values: &[f32]) -> Flat {
        let mut bytes: Vec<u8> = values.iter().flat_map(|x| x.to_ne_bytes()).collect();
        bytes.resize(1024, 0xAB);
        Flat(RefCell::new(bytes))
    }

    #[test]
    fn strided_outputs_leave_the_gaps_alone() {
        let mem = memory_with(&[1.0, 2.0, 3.0, 4.0]);
        // dst: every other f32 of bytes 256.., written from a broadcast scalar fill.
        let dst = view(256, DType::F32, &[3], &[2]);
        execute(&KernelOp::Fill { dst, value: Scalar::Float(7.5) }, &mem).unwrap();
        assert_eq!(f32s(&mem, 256, 5)[0], 7.5);
        assert_eq!(f32s(&mem, 256, 5)[2], 7.5);
        assert_eq!(mem.0.borrow()[260..264], [0xAB; 4], "the gap between elements is untouched");
        assert_eq!(runs(&view(0, DType::F32, &[2, 2], &[1, 2])), [(0, 4), (8, 4), (4, 4), (12, 4)]);
    }

    #[test]
    fn binary_broadcasts_and_aliases_in_place() {
        let mem = memory_with(&[1.0, 2.0, 3.0, 4.0, 10.0, 20.0]);
        let a = view(0, DType::F32, &[2, 2], &[2, 1]);
        let b = BufferView { offset: 4, ..view(0, DType::F32, &[2, 2], &[0, 1]) };
        let op = KernelOp::Binary { op: BinaryOp::Add, lhs: a.clone(), rhs: b, dst: a, compute: DType::F32 };
        execute(&op, &mem).unwrap();
        assert_eq!(f32s(&mem, 0, 4), [11.0, 22.0, 13.0, 24.0]);
    }

    #[test]
    fn reduce_softmax_gemm_unary() {
        let mem = memory_with(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let x = view(0, DType::F32, &[2, 3], &[3, 1]);
        let sum = KernelOp::Reduce {
            op: ReduceOp::Sum,
            src: x.clone(),
            dst: view(100, DType::F32, &[1, 3], &[3, 1]),
            dims: vec![0],
        };
        execute(&sum, &mem).unwrap();
        assert_eq!(f32s(&mem, 100, 3), [5.0, 7.0, 9.0]);
        let arg = KernelOp::Reduce {
            op: ReduceOp::ArgMax,
            src: x.clone(),
            dst: view(200, DType::I64, &[2, 1], &[1, 1]),
            dims: vec![1],
        };
        execute(&arg, &mem).unwrap();
        assert_eq!(mem.0.borrow()[200..216], [2i64.to_ne_bytes(), 2i64.to_ne_bytes()].concat());
        let sm = KernelOp::Softmax { src: x.clone(), dst: view(300, DType::F32, &[2, 3], &[3, 1]), dim: 1, log: false };
        execute(&sm, &mem).unwrap();
        let s = f32s(&mem, 300, 3);
        assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-6 && s[0] < s[1] && s[1] < s[2]);
        let xt = view(0, DType::F32, &[3, 2], &[1, 3]);
        let mm = KernelOp::Gemm {
            lhs: x.clone(),
            rhs: xt,
            dst: view(400, DType::F32, &[2, 2], &[2, 1]),
            bias: None,
            workspace: None,
        };
        execute(&mm, &mem).unwrap();
        assert_eq!(f32s(&mem, 400, 4), [14.0, 32.0, 32.0, 77.0]);
        let bias = Some(view(0, DType::F32, &[2], &[1])); // [1, 2], added to each row
        let KernelOp::Gemm { lhs, rhs, dst, .. } = mm else { unreachable!() };
        execute(&KernelOp::Gemm { lhs, rhs, dst, bias, workspace: None }, &mem).unwrap();
        assert_eq!(f32s(&mem, 400, 4), [15.0, 34.0, 33.0, 79.0]);
        let neg = KernelOp::Unary { op: UnaryOp::Neg, src: x.clone(), dst: view(500, DType::I32, &[2, 3], &[3, 1]) };
        execute(&neg, &mem).unwrap();
        assert_eq!(mem.0.borrow()[500..504], (-1i32).to_ne_bytes());
    }
}
