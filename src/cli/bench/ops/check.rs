//! Each case through cudasem's public API ([`Call`]), and its check against the float64 reference
//! before it is timed.
//!
//! Tolerances: `reference.rs` (the op tests' table). Big outputs are checked on a sample: elementwise, softmax and matrix-product outputs of more than 2^16 elements
//! on their first and last rows (at least 8,192 elements each) and 8 random rows; reductions on every
//! output element (their reference reads every input element anyway).

use super::cases::{Axis, Binary, Case, Layout, Op, Reduce, Unary};
use super::inputs::{host_f64, Operand, View};
use super::reference::{self, Acc, Tol};
use cudasem::{DType, Result, Tensor};

/// The number multiplied in the `scalar` cases.
pub const SCALAR: f64 = 2.5;

/// A case ready to run: its operands and, for in-place and copy cases, the tensor it writes.
pub struct Call<'a> {
    case: &'a Case,
    ops: Vec<Operand>,
    target: Option<Tensor>,
}

impl<'a> Call<'a> {
    /// `case` over `ops` (from [`super::inputs::Inputs::operands`]).
    pub fn new(case: &'a Case, ops: Vec<Operand>) -> Result<Call<'a>> {
        let target = match case.op {
            Op::Copy => Some(Tensor::empty(ops[0].dev.shape(), ops[0].dev.dtype(), "cuda")?),
            _ if case.layout == Layout::InPlace => Some(ops[0].dev.contiguous()?.add(0.0)?),
            _ => None,
        };
        Ok(Call { case, ops, target })
    }

    /// Runs the op once; returns its outputs (values, then indices for `max` / `min` along a dim).
    pub fn run(&self) -> Result<Vec<Tensor>> {
        let x = &self.ops[0].dev;
        let y = || &self.ops[1].dev;
        Ok(match self.case.op {
            Op::Unary(u) => vec![unary(u, x)?],
            Op::Binary(b) if self.case.layout == Layout::Scalar => vec![binary(b, x, SCALAR.into())?],
            Op::Binary(Binary::Add) if self.case.layout == Layout::InPlace => {
                let t = self.target.as_ref().expect("an in-place case has a target");
                t.add_(y())?;
                vec![t.clone()]
            }
            Op::Binary(b) => vec![binary(b, x, y().into())?],
            Op::Where => vec![Tensor::where_cond(x, y(), &self.ops[2].dev)?],
            Op::Cast(to) => vec![x.to_dtype(to)?],
            Op::Reduce(r, axis) => reduce(r, axis, x)?,
            Op::Softmax { log: false, .. } => vec![x.softmax(-1)?],
            Op::Softmax { log: true, .. } => vec![x.log_softmax(-1)?],
            Op::Contiguous => vec![x.contiguous()?],
            Op::Matmul => vec![x.matmul(y())?],
            Op::Copy => {
                let t = self.target.as_ref().expect("a copy case has a target");
                t.copy_(x, false)?;
                vec![t.clone()]
            }
        })
    }

    /// Runs the op once on fresh data and compares what it gave with the reference; `Err` says
    /// where it disagreed (or the error).
    pub fn check(&self) -> std::result::Result<(), String> {
        if let Some(t) = &self.target {
            // In place: start again from the first operand's values.
            t.copy_(&self.ops[0].dev, false).map_err(|e| e.to_string())?;
        }
        let outs = self.run().map_err(|e| e.to_string())?;
        let r = match self.case.op {
            Op::Reduce(r, axis) => self.check_reduce(r, axis, &outs),
            Op::Softmax { log, .. } => self.check_rows(&outs[0], |v, i| softmax_row(v, i, log, self.case.dtype)),
            Op::Matmul => self.check_matmul(&outs[0]),
            _ => self.check_rows(&outs[0], |v, i| self.elementwise_row(v, i)),
        };
        r.map_err(|e| match e {
            Mismatch::Error(e) => e.to_string(),
            Mismatch::Value(m) => format!("wrong result: {m}"),
        })
    }

    /// Row `i` of the reference of an elementwise case, rounded to the output's dtype.
    fn elementwise_row(&self, views: &[View], i: usize) -> Vec<f64> {
        let case = self.case;
        let at = |k: usize, j: usize| views[k].at(i, j);
        let f: Box<dyn Fn(usize) -> f64> = match case.op {
            Op::Unary(u) => Box::new(move |j| reference::unary(u, at(0, j))),
            Op::Binary(b) if case.layout == Layout::Scalar => {
                let s = reference::cast(case.dtype, SCALAR, true);
                Box::new(move |j| reference::binary(b, at(0, j), s))
            }
            Op::Binary(b) => Box::new(move |j| reference::binary(b, at(0, j), at(1, j))),
            Op::Where => Box::new(move |j| if at(0, j) != 0.0 { at(1, j) } else { at(2, j) }),
            Op::Cast(to) => Box::new(move |j| reference::cast(to, at(0, j), case.dtype.is_float())),
            _ => Box::new(move |j| at(0, j)),
        };
        let out = case.out_dtype();
        (0..views[0].cols).map(|j| reference::round(out, f(j))).collect()
    }

    /// Compares sampled rows of the 2-D output `out` with `want(views, row)`, within the case's
    /// tolerance.
    fn check_rows(&self, out: &Tensor, want: impl Fn(&[View], usize) -> Vec<f64>) -> std::result::Result<(), Mismatch> {
        let tol = reference::tolerance(self.case);
        let views: Vec<View> = self.ops.iter().map(|o| o.view.clone()).collect();
        let (rows, cols) = (views[0].rows, views[0].cols);
        if out.shape() != [rows, cols] {
            return Err(Mismatch::Value(format!("shape {:?}, expected [{rows}, {cols}]", out.shape())));
        }
        for (start, len) in sample_rows(rows, cols)? {
            let got = host_f64(&out.narrow(0, start, len)?)?;
            for i in start..start + len {
                let w = want(&views, i);
                let g = &got[(i - start) * cols..(i - start + 1) * cols];
                if let Some(j) = (0..cols).find(|&j| !tol.accepts(g[j], w[j])) {
                    return Err(mismatch(&format!("({i}, {j})"), g[j], w[j], tol));
                }
            }
        }
        Ok(())
    }

    /// Compares sampled rows of a matrix product with the reference, each output within the
    /// tests' matmul tolerance relative to its Σ|x·w| (the scale of the rounding errors).
    fn check_matmul(&self, out: &Tensor) -> std::result::Result<(), Mismatch> {
        let (x, w) = (&self.ops[0].view, &self.ops[1].view);
        let (rows, cols) = (x.rows, w.cols);
        if out.shape() != [rows, cols] {
            return Err(Mismatch::Value(format!("shape {:?}, expected [{rows}, {cols}]", out.shape())));
        }
        let tol = reference::tolerance(self.case);
        for (start, len) in sample_rows(rows, cols)? {
            let got = host_f64(&out.narrow(0, start, len)?)?;
            for i in start..start + len {
                let (want, scale) = product_row(x, w, i);
                let g = &got[(i - start) * cols..(i - start + 1) * cols];
                for j in 0..cols {
                    let t = Tol { rel: 0.0, abs: tol.abs + tol.rel * scale[j] };
                    let want = reference::round(self.case.out_dtype(), want[j]);
                    if !t.accepts(g[j], want) {
                        return Err(mismatch(&format!("({i}, {j})"), g[j], want, t));
                    }
                }
            }
        }
        Ok(())
    }

    /// Compares every element of a reduction's outputs with the reference.
    fn check_reduce(&self, r: Reduce, axis: Axis, outs: &[Tensor]) -> std::result::Result<(), Mismatch> {
        let v = &self.ops[0].view;
        let max = reference::tracks_max(r);
        let accs = accumulate(v, axis, max);
        let out_dtype = self.case.out_dtype();
        let (values, indices) = (host_f64(&outs[0])?, outs.get(1).map(host_f64).transpose()?);
        if values.len() != accs.len() {
            return Err(Mismatch::Value(format!("{} results, expected {}", values.len(), accs.len())));
        }
        let tol = reference::tolerance(self.case);
        for (k, acc) in accs.iter().enumerate() {
            let (w, abs_sum) = acc.result(r, out_dtype);
            let tol = Tol { abs: tol.abs + reference::accumulation(self.case.dtype, acc.len(), abs_sum), ..tol };
            if !tol.accepts(values[k], w) {
                return Err(mismatch(&format!("{k}"), values[k], w, tol));
            }
            if let Some(idx) = &indices {
                let arg = if max { Reduce::Argmax } else { Reduce::Argmin };
                let (w, _) = acc.result(arg, DType::I64);
                if idx[k] != w {
                    return Err(mismatch(&format!("index {k}"), idx[k], w, Tol::EXACT));
                }
            }
        }
        Ok(())
    }
}

/// Why a check failed: an error, or a value that disagreed.
enum Mismatch {
    Error(cudasem::Error),
    Value(String),
}

impl From<cudasem::Error> for Mismatch {
    fn from(e: cudasem::Error) -> Mismatch {
        Mismatch::Error(e)
    }
}

fn mismatch(at: &str, got: f64, want: f64, tol: Tol) -> Mismatch {
    let allowed =
        if tol == Tol::EXACT { "exact".to_string() } else { format!("±{:.3e}", tol.rel * want.abs() + tol.abs) };
    Mismatch::Value(format!("element {at} is {got}, the CPU (f64) {want} ({allowed})"))
}

/// Row `i` of the softmax reference, rounded to `dtype`.
fn softmax_row(views: &[View], i: usize, log: bool, dtype: DType) -> Vec<f64> {
    let v = &views[0];
    let row: Vec<f64> = (0..v.cols).map(|j| v.at(i, j)).collect();
    reference::softmax(&row, log, dtype)
}

/// Row `i` of `x · w` in f64, with each output's Σ|x·w|.
fn product_row(x: &View, w: &View, i: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut scale) = (vec![0.0; w.cols], vec![0.0; w.cols]);
    for k in 0..x.cols {
        let a = x.at(i, k);
        for (j, (o, s)) in out.iter_mut().zip(scale.iter_mut()).enumerate() {
            let p = a * w.at(k, j);
            *o += p;
            *s += p.abs();
        }
    }
    (out, scale)
}

/// One accumulator per output element of a reduction of `v` along `axis`, fed in row-major order
/// (so the first extreme is the one kept), each element with its index along the reduced dims.
fn accumulate(v: &View, axis: Axis, max: bool) -> Vec<Acc> {
    let mut accs = vec![
        Acc::default();
        match axis {
            Axis::Last => v.rows,
            Axis::First => v.cols,
            Axis::All => 1,
        }
    ];
    for i in 0..v.rows {
        for j in 0..v.cols {
            let x = v.at(i, j);
            match axis {
                Axis::Last => accs[i].push(x, j, max),
                Axis::First => accs[j].push(x, i, max),
                Axis::All => accs[0].push(x, i * v.cols + j, max),
            }
        }
    }
    accs
}

/// The row blocks `(start, len)` checked of a `[rows, cols]` output: all of it up to 2^16
/// elements; else the first and last rows (8,192 elements at least) and 8 random rows.
fn sample_rows(rows: usize, cols: usize) -> Result<Vec<(usize, usize)>> {
    if rows * cols <= 1 << 16 {
        return Ok(vec![(0, rows)]);
    }
    let k = (8192 / cols).clamp(1, rows);
    let mut blocks = vec![(0, k), (rows - k, k)];
    // The library's generator picks them, as the main bench's matmul check does.
    for u in Tensor::rand([8], DType::F64, "cpu")?.to_vec::<f64>()? {
        blocks.push((((u * rows as f64) as usize).min(rows - 1), 1));
    }
    Ok(blocks)
}

fn unary(u: Unary, x: &Tensor) -> Result<Tensor> {
    match u {
        Unary::Neg => x.neg(),
        Unary::Abs => x.abs(),
        Unary::Exp => x.exp(),
        Unary::Log => x.log(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => x.rsqrt(),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tanh => x.tanh(),
        Unary::Sigmoid => x.sigmoid(),
        Unary::Relu => x.relu(),
        Unary::Gelu => x.gelu(),
    }
}

fn binary(b: Binary, x: &Tensor, y: cudasem::Operand<'_>) -> Result<Tensor> {
    match b {
        Binary::Add => x.add(y),
        Binary::Sub => x.sub(y),
        Binary::Mul => x.mul(y),
        Binary::Div => x.div(y),
        Binary::Maximum => x.maximum(y),
        Binary::Minimum => x.minimum(y),
        Binary::Pow => x.pow(y),
        Binary::Eq => x.eq(y),
        Binary::Ne => x.ne(y),
        Binary::Lt => x.lt(y),
        Binary::Le => x.le(y),
        Binary::Gt => x.gt(y),
        Binary::Ge => x.ge(y),
    }
}

fn reduce(r: Reduce, axis: Axis, x: &Tensor) -> Result<Vec<Tensor>> {
    let dims: &[isize] = match axis {
        Axis::Last => &[-1],
        Axis::First => &[0],
        Axis::All => &[],
    };
    let dim = dims.first().copied();
    Ok(match (r, dim) {
        (Reduce::Sum, _) => vec![x.sum(dims, false)?],
        (Reduce::Mean, _) => vec![x.mean(dims, false)?],
        (Reduce::Amax, _) => vec![x.amax(dims, false)?],
        (Reduce::Amin, _) => vec![x.amin(dims, false)?],
        (Reduce::Argmax, _) => vec![x.argmax(dim, false)?],
        (Reduce::Argmin, _) => vec![x.argmin(dim, false)?],
        (Reduce::MaxDim, None) => vec![x.max_all()?],
        (Reduce::MinDim, None) => vec![x.min_all()?],
        (Reduce::MaxDim, Some(d)) => {
            let (v, i) = x.max(d, false)?;
            vec![v, i]
        }
        (Reduce::MinDim, Some(d)) => {
            let (v, i) = x.min(d, false)?;
            vec![v, i]
        }
    })
}
