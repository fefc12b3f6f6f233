//! The operands of the cases: random device tensors per dtype, each with its values on the host
//! (downloaded once, as f64), and views of them in the layouts of the matrix.
//!
//! Drawing 2^24 random numbers on the host takes seconds, so the f32 bases are drawn once per run:
//! a block of at most 2^20 values tiled on the device, plus a random offset per row so that no two
//! rows repeat each other (a kernel reading the wrong row still gives a wrong answer). Every dtype's
//! operands are cast from the bases on the device, then downloaded: the downloaded values are the
//! reference's inputs, whatever rounding made them.

use super::cases::{Case, Layout, Op};
use cudasem::{DType, Result, Tensor};
use half::{bf16, f16};
use std::sync::Arc;

/// Elements drawn on the host per base; larger bases tile them.
const DRAWN: usize = 1 << 20;

/// The elements of a tensor as f64, row-major (any dtype, read in its own element type and
/// widened on the host: independent of the library's casts).
pub fn host_f64(t: &Tensor) -> Result<Vec<f64>> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F64 => t.to_vec::<f64>()?,
        DType::BF16 => t.to_vec::<bf16>()?.into_iter().map(bf16::to_f64).collect(),
        DType::F16 => t.to_vec::<f16>()?.into_iter().map(f16::to_f64).collect(),
        DType::I32 => t.to_vec::<i32>()?.into_iter().map(f64::from).collect(),
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(|x| x as f64).collect(),
        DType::U8 => t.to_vec::<u8>()?.into_iter().map(f64::from).collect(),
        DType::Bool => t.to_vec::<bool>()?.into_iter().map(|b| f64::from(u8::from(b))).collect(),
    })
}

/// A `[rows, cols]` view of host values: element `(i, j)` is `data[offset + i·s0 + j·s1]` (a stride
/// of 0 broadcasts).
#[derive(Debug, Clone)]
pub struct View {
    data: Arc<Vec<f64>>,
    /// Rows of the view.
    pub rows: usize,
    /// Columns of the view.
    pub cols: usize,
    s0: usize,
    s1: usize,
}

impl View {
    /// Element `(i, j)`.
    pub fn at(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.s0 + j * self.s1]
    }
}

/// A device tensor and its values on the host.
#[derive(Debug, Clone)]
pub struct Operand {
    /// What the case's op gets.
    pub dev: Tensor,
    /// Its elements, in the coordinates of the case's output.
    pub view: View,
}

/// A contiguous device tensor and its downloaded values.
#[derive(Debug, Clone)]
struct Pair {
    dev: Tensor,
    host: Arc<Vec<f64>>,
}

impl Pair {
    fn new(dev: Tensor) -> Result<Pair> {
        let host = Arc::new(host_f64(&dev)?);
        Ok(Pair { dev, host })
    }

    fn view(&self, rows: usize, cols: usize, s0: usize, s1: usize) -> View {
        View { data: self.host.clone(), rows, cols, s0, s1 }
    }
}

/// The f32 bases every dtype's operands are cast from, on the current device: `a`, `b` in [-2.5, 2.5),
/// `p` (positive) in [0.5, 2.7), `row` `[C]` and `col` `[R, 1]` in [0.5, 2.5).
pub struct Bases {
    r: usize,
    c: usize,
    a: Tensor,
    b: Tensor,
    p: Tensor,
    row: Tensor,
    col: Tensor,
}

/// `[r, c]` uniform values in [0, 1): a drawn block tiled, plus a per-row offset in [0, 1) times
/// `spread`.
fn tiled(r: usize, c: usize, spread: f64) -> Result<Tensor> {
    let n = r * c;
    let drawn = n.min(DRAWN);
    let base = Tensor::rand([drawn], DType::F32, "cuda")?;
    let flat = if drawn == n {
        base
    } else {
        base.reshape([1, drawn as isize])?.expand([(n / drawn) as isize, drawn as isize])?.contiguous()?
    };
    let offset = Tensor::rand([r, 1], DType::F32, "cuda")?.mul(spread)?;
    flat.reshape([r as isize, c as isize])?.add(&offset)
}

impl Bases {
    /// Draws the bases of an `[r, c]` matrix (`r·c` a multiple of 2^20 or at most 2^20).
    pub fn draw(r: usize, c: usize) -> Result<Bases> {
        let a = tiled(r, c, 0.25)?.mul(4.0)?.sub(2.5)?;
        let b = tiled(r, c, 0.25)?.mul(4.0)?.sub(2.5)?;
        let p = tiled(r, c, 0.1)?.mul(2.0)?.add(0.5)?;
        let row = Tensor::rand([c], DType::F32, "cuda")?.mul(2.0)?.add(0.5)?;
        let col = Tensor::rand([r, 1], DType::F32, "cuda")?.mul(2.0)?.add(0.5)?;
        Ok(Bases { r, c, a, b, p, row, col })
    }
}

/// Every operand of one dtype's cases.
pub struct Inputs {
    /// Their dtype.
    pub dtype: DType,
    r: usize,
    c: usize,
    a: Pair,
    b: Pair,
    p: Pair,
    row: Pair,
    col: Pair,
    /// `b > 0`, for `where`.
    cond: Pair,
}

impl Inputs {
    /// The bases in `dtype` (integers: `a`, `b` × 100 and `p`, `row`, `col` × 10, truncated).
    pub fn new(bases: &Bases, dtype: DType) -> Result<Inputs> {
        let cast = |t: &Tensor, scale: f64| -> Result<Pair> {
            let t = if dtype.is_float() { t.to_dtype(dtype)? } else { t.mul(scale)?.to_dtype(dtype)? };
            Pair::new(t)
        };
        Ok(Inputs {
            dtype,
            r: bases.r,
            c: bases.c,
            a: cast(&bases.a, 100.0)?,
            b: cast(&bases.b, 100.0)?,
            p: cast(&bases.p, 10.0)?,
            row: cast(&bases.row, 10.0)?,
            col: cast(&bases.col, 10.0)?,
            cond: Pair::new(bases.b.gt(0.0)?)?,
        })
    }

    /// `x` as it is: `[R, C]`.
    fn whole(&self, x: &Pair) -> Result<Operand> {
        Ok(Operand { dev: x.dev.clone(), view: x.view(self.r, self.c, self.c, 1) })
    }

    /// `x.t()`: `[C, R]`, element `(i, j)` is `x[j, i]`.
    fn transposed(&self, x: &Pair) -> Result<Operand> {
        Ok(Operand { dev: x.dev.t()?, view: x.view(self.c, self.r, 1, self.c) })
    }

    /// `x` read as a contiguous `[C, R]` (the other operand of a transposed one, the weight of a
    /// matrix product).
    fn as_columns(&self, x: &Pair) -> Result<Operand> {
        let dev = x.dev.reshape([self.c as isize, self.r as isize])?;
        Ok(Operand { dev, view: x.view(self.c, self.r, self.r, 1) })
    }

    /// Row 0 of `x`: `[1, C]`.
    fn vector(&self, x: &Pair) -> Result<Operand> {
        Ok(Operand { dev: x.dev.narrow(0, 0, 1)?, view: x.view(1, self.c, self.c, 1) })
    }

    /// `x` as `[N / row, row]`.
    fn rows_of(&self, x: &Pair, row: usize) -> Result<Operand> {
        let rows = self.r * self.c / row;
        Ok(Operand { dev: x.dev.reshape([rows as isize, row as isize])?, view: x.view(rows, row, row, 1) })
    }

    /// `x` in `layout` as the first operand.
    fn first(&self, x: &Pair, layout: Layout) -> Result<Operand> {
        match layout {
            Layout::Transposed => self.transposed(x),
            Layout::Vector | Layout::Linear => self.vector(x),
            _ => self.whole(x),
        }
    }

    /// `x` as the second operand in `layout` (`None` for a number).
    fn second(&self, x: &Pair, layout: Layout) -> Result<Option<Operand>> {
        Ok(Some(match layout {
            Layout::BcastRow => Operand { dev: self.row.dev.clone(), view: self.row.view(self.r, self.c, 0, 1) },
            Layout::BcastCol => Operand { dev: self.col.dev.clone(), view: self.col.view(self.r, self.c, 1, 0) },
            Layout::Transposed => self.as_columns(x)?,
            Layout::Vector => self.vector(x)?,
            Layout::Linear => self.transposed(x)?,
            Layout::Scalar => return Ok(None),
            Layout::Contig | Layout::InPlace => self.whole(x)?,
        }))
    }

    /// The operands of `case`, in the order its op takes them; views in the output's coordinates.
    /// Ops defined on positive numbers get `p` (log, sqrt, rsqrt, the base of pow, the divisor).
    pub fn operands(&self, case: &Case) -> Result<Vec<Operand>> {
        use super::cases::Binary;
        let l = case.layout;
        Ok(match case.op {
            Op::Unary(u) => vec![self.first(if u.positive_domain() { &self.p } else { &self.a }, l)?],
            Op::Binary(b) => {
                let (lhs, rhs) = match b {
                    Binary::Pow => (&self.p, &self.b),
                    Binary::Div => (&self.a, &self.p),
                    _ => (&self.a, &self.b),
                };
                let mut v = vec![self.first(lhs, l)?];
                v.extend(self.second(rhs, l)?);
                v
            }
            Op::Where => {
                let b = self.second(&self.b, l)?.into_iter();
                [self.whole(&self.cond)?, self.whole(&self.a)?].into_iter().chain(b).collect()
            }
            Op::Cast(_) | Op::Reduce(..) | Op::Copy => vec![self.first(&self.a, l)?],
            Op::Contiguous => vec![self.transposed(&self.a)?],
            Op::Softmax { row, .. } => vec![self.rows_of(&self.a, row)?],
            Op::Matmul if l == Layout::Linear => vec![self.first(&self.a, l)?, self.transposed(&self.b)?],
            Op::Matmul => vec![self.first(&self.a, l)?, self.as_columns(&self.b)?],
        })
    }
}
