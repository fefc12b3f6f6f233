//! The op matrix: every case's op, dtype and layout, its name, the bytes it moves and whether it is
//! memory-bound — and the same list as the JSON `bench/pytorch_ops.py` reads ([`spec_json`]).
//!
//! Not every op × dtype × layout is a case (that would take many minutes on each side): every op
//! appears at least once, and the common ops (add, sub, mul, div, sum, mean, amax, softmax) in every
//! layout and float dtype. [`matrix`] lists the choice.

use cudasem::DType;
use serde::Serialize;

/// An elementwise function of one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unary {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
}

impl Unary {
    /// Every unary op.
    pub const ALL: [Unary; 12] = [
        Unary::Neg,
        Unary::Abs,
        Unary::Exp,
        Unary::Log,
        Unary::Sqrt,
        Unary::Rsqrt,
        Unary::Sin,
        Unary::Cos,
        Unary::Tanh,
        Unary::Sigmoid,
        Unary::Relu,
        Unary::Gelu,
    ];

    /// The method's name (and PyTorch's).
    pub fn name(self) -> &'static str {
        match self {
            Unary::Neg => "neg",
            Unary::Abs => "abs",
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Tanh => "tanh",
            Unary::Sigmoid => "sigmoid",
            Unary::Relu => "relu",
            Unary::Gelu => "gelu",
        }
    }

    /// Whether the op is defined for positive inputs only (they get the positive operand).
    pub fn positive_domain(self) -> bool {
        matches!(self, Unary::Log | Unary::Sqrt | Unary::Rsqrt)
    }
}

/// An elementwise function of two operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Pow,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Binary {
    /// Every binary op.
    pub const ALL: [Binary; 13] = [
        Binary::Add,
        Binary::Sub,
        Binary::Mul,
        Binary::Div,
        Binary::Maximum,
        Binary::Minimum,
        Binary::Pow,
        Binary::Eq,
        Binary::Ne,
        Binary::Lt,
        Binary::Le,
        Binary::Gt,
        Binary::Ge,
    ];

    /// The method's name (and PyTorch's).
    pub fn name(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Maximum => "maximum",
            Binary::Minimum => "minimum",
            Binary::Pow => "pow",
            Binary::Eq => "eq",
            Binary::Ne => "ne",
            Binary::Lt => "lt",
            Binary::Le => "le",
            Binary::Gt => "gt",
            Binary::Ge => "ge",
        }
    }

    /// Whether the result is bool.
    pub fn is_comparison(self) -> bool {
        matches!(self, Binary::Eq | Binary::Ne | Binary::Lt | Binary::Le | Binary::Gt | Binary::Ge)
    }

    /// The result's dtype for operands of `dtype` (true division of integers gives f32).
    pub fn out_dtype(self, dtype: DType) -> DType {
        match self {
            _ if self.is_comparison() => DType::Bool,
            Binary::Div if !dtype.is_float() => DType::F32,
            _ => dtype,
        }
    }
}

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Amax,
    Amin,
    Argmax,
    Argmin,
    /// `max(dim)`: values and indices (`max_all` over all).
    MaxDim,
    /// `min(dim)`: values and indices (`min_all` over all).
    MinDim,
}

impl Reduce {
    /// Every reduction.
    pub const ALL: [Reduce; 8] = [
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Amax,
        Reduce::Amin,
        Reduce::Argmax,
        Reduce::Argmin,
        Reduce::MaxDim,
        Reduce::MinDim,
    ];

    /// The name in case names and the spec.
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Mean => "mean",
            Reduce::Amax => "amax",
            Reduce::Amin => "amin",
            Reduce::Argmax => "argmax",
            Reduce::Argmin => "argmin",
            Reduce::MaxDim => "max",
            Reduce::MinDim => "min",
        }
    }
}

/// What a reduction reduces: the last dim (rows), the first (columns) or everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Last,
    First,
    All,
}

impl Axis {
    /// The name in case names and the spec.
    pub fn name(self) -> &'static str {
        match self {
            Axis::Last => "last",
            Axis::First => "first",
            Axis::All => "all",
        }
    }
}

/// The operation of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Unary(Unary),
    Binary(Binary),
    /// `where(cond, a, b)`.
    Where,
    /// `to_dtype(to)`.
    Cast(DType),
    Reduce(Reduce, Axis),
    /// Softmax (or log-softmax) over the last dim of 2^k elements as rows of `row`.
    Softmax {
        log: bool,
        row: usize,
    },
    /// `contiguous()` of a transposed view: a copy.
    Contiguous,
    /// A device-to-device `copy_` of a contiguous tensor: the bandwidth yardstick.
    Copy,
    /// `x.matmul(&w)` with `w` the `[C, R]` reading of a second `[R, C]` matrix (or, in the
    /// `Linear` layout, its transpose); in the matrix only with `x` a `[1, C]` vector (a decode
    /// step's product: the weight streams once).
    Matmul,
}

/// How the operands are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[R, C]` contiguous (both operands of a binary op).
    Contig,
    /// `[R, C] op [C]`.
    BcastRow,
    /// `[R, C] op [R, 1]`.
    BcastCol,
    /// The (first) input is the transposed view `a.t()` of a contiguous `[R, C]`.
    Transposed,
    /// `[1, C]`: launch-bound.
    Vector,
    /// `[R, C] op number`.
    Scalar,
    /// `a.op_(b)` in place, both `[R, C]`.
    InPlace,
    /// A matrix product's `[1, C] @ w.t()` with `w` a contiguous `[R, C]`: `nn.Linear`'s form.
    Linear,
}

impl Layout {
    /// The suffix of case names (`None` for contiguous).
    pub fn suffix(self) -> Option<&'static str> {
        match self {
            Layout::Contig => None,
            Layout::BcastRow => Some("bcast_row"),
            Layout::BcastCol => Some("bcast_col"),
            Layout::Transposed => Some("transposed"),
            Layout::Vector => Some("vec"),
            Layout::Scalar => Some("scalar"),
            Layout::InPlace => Some("inplace"),
            Layout::Linear => Some("linear"),
        }
    }

    /// The name in the spec.
    pub fn name(self) -> &'static str {
        self.suffix().unwrap_or("contig")
    }
}

/// One case of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// `op_dtype[_layout]`, e.g. `add_f16_bcast_row`, `softmax_bf16_rows1024`, `sum_f32_first`.
    pub name: String,
    pub op: Op,
    /// The dtype of the (first) input.
    pub dtype: DType,
    pub layout: Layout,
}

/// The short dtype name of case names.
pub fn short(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

impl Case {
    /// The case of `op` on `dtype` in `layout`, named by the convention.
    pub fn new(op: Op, dtype: DType, layout: Layout) -> Case {
        let d = short(dtype);
        let mut name = match op {
            Op::Unary(u) => format!("{}_{d}", u.name()),
            Op::Binary(b) => format!("{}_{d}", b.name()),
            Op::Where => format!("where_{d}"),
            Op::Cast(to) => format!("cast_{d}_to_{}", short(to)),
            Op::Reduce(r, axis) => format!("{}_{d}_{}", r.name(), axis.name()),
            Op::Softmax { log, row } => format!("{}_{d}_rows{row}", if log { "log_softmax" } else { "softmax" }),
            Op::Contiguous => format!("contiguous_{d}"),
            Op::Copy => "copy_d2d".to_string(),
            Op::Matmul => format!("matmul_{d}"),
        };
        if let Some(s) = layout.suffix() {
            name = format!("{name}_{s}");
        }
        Case { name, op, dtype, layout }
    }

    /// Whether the case is limited by memory bandwidth (all but the `[1, C]` ones, which are
    /// limited by the launch; a vector's matrix product streams its `[C, R]` weight).
    pub fn memory_bound(&self) -> bool {
        self.layout != Layout::Vector || self.op == Op::Matmul
    }

    /// The dtype of the (first) output.
    pub fn out_dtype(&self) -> DType {
        match self.op {
            Op::Binary(b) => b.out_dtype(self.dtype),
            Op::Unary(_) => self.dtype,
            Op::Cast(to) => to,
            Op::Reduce(Reduce::Sum, _) if !self.dtype.is_float() => DType::I64,
            Op::Reduce(Reduce::Argmax | Reduce::Argmin, _) => DType::I64,
            _ => self.dtype,
        }
    }

    /// The logical bytes the op reads and writes for a `[r, c]` matrix (each input element once,
    /// a broadcast operand as its own size, each output element once).
    pub fn bytes(&self, r: usize, c: usize) -> usize {
        let n = if matches!(self.layout, Layout::Vector | Layout::Linear) { c } else { r * c };
        let (s, out) = (self.dtype.size(), self.out_dtype().size());
        match self.op {
            Op::Unary(_) | Op::Cast(_) => n * (s + out),
            Op::Binary(_) => {
                let rhs = match self.layout {
                    Layout::BcastRow => c * s,
                    Layout::BcastCol => r * s,
                    Layout::Scalar => 0,
                    _ => n * s,
                };
                n * s + rhs + n * out
            }
            Op::Where => {
                let b = if self.layout == Layout::BcastRow { c } else { n };
                n + n * s + b * s + n * s
            }
            Op::Reduce(red, axis) => {
                let outs = match axis {
                    Axis::Last => r,
                    Axis::First => c,
                    Axis::All => 1,
                };
                let index = if matches!(red, Reduce::MaxDim | Reduce::MinDim) && axis != Axis::All { 8 } else { 0 };
                n * s + outs * (out + index)
            }
            Op::Softmax { .. } | Op::Contiguous | Op::Copy => 2 * n * s,
            // x [n / c, c] @ w [c, r]: both inputs once, then the [n / c, r] output.
            Op::Matmul => n * s + c * r * s + (n / c) * r * out,
        }
    }
}

/// The float dtypes of the matrix.
pub const FLOATS: [DType; 3] = [DType::F32, DType::BF16, DType::F16];
/// The integer dtypes of the matrix.
pub const INTS: [DType; 2] = [DType::I32, DType::I64];
/// The softmax row lengths.
pub const SOFTMAX_ROWS: [usize; 4] = [128, 1024, 4096, 32768];

/// Every case, in run order: the copy yardstick first, then unary, binary, where, casts, copies,
/// reductions, softmax, matrix products of a vector.
pub fn matrix() -> Vec<Case> {
    use Layout::*;
    let mut v = vec![Case::new(Op::Copy, DType::F32, Contig)];
    let mut add = |op: Op, dtypes: &[DType], layouts: &[Layout]| {
        for &d in dtypes {
            for &l in layouts {
                v.push(Case::new(op, d, l));
            }
        }
    };
    for u in Unary::ALL {
        add(Op::Unary(u), &FLOATS, &[Contig]);
    }
    for u in [Unary::Exp, Unary::Gelu] {
        add(Op::Unary(u), &FLOATS, &[Transposed, Vector]);
    }
    add(Op::Unary(Unary::Rsqrt), &[DType::F32], &[Vector]);
    add(Op::Unary(Unary::Neg), &INTS, &[Contig]);
    add(Op::Unary(Unary::Abs), &[DType::I32], &[Contig]);
    for b in [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div] {
        add(Op::Binary(b), &FLOATS, &[Contig, BcastRow, BcastCol, Transposed, Vector]);
    }
    for b in Binary::ALL.into_iter().skip(4) {
        add(Op::Binary(b), &[DType::F32], &[Contig]);
    }
    for b in [Binary::Maximum, Binary::Minimum, Binary::Pow, Binary::Lt, Binary::Eq] {
        add(Op::Binary(b), &[DType::BF16, DType::F16], &[Contig]);
    }
    add(Op::Binary(Binary::Mul), &FLOATS, &[Scalar]);
    add(Op::Binary(Binary::Add), &FLOATS, &[InPlace]);
    for b in [Binary::Add, Binary::Mul] {
        add(Op::Binary(b), &INTS, &[Contig, BcastRow]);
    }
    add(Op::Binary(Binary::Div), &[DType::I32], &[Contig]);
    add(Op::Where, &FLOATS, &[Contig]);
    add(Op::Where, &[DType::F32], &[BcastRow]);
    for (from, to) in [
        (DType::F32, DType::BF16),
        (DType::F32, DType::F16),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F16),
        (DType::F32, DType::I32),
        (DType::I32, DType::F32),
        (DType::I64, DType::I32),
    ] {
        add(Op::Cast(to), &[from], &[Contig]);
    }
    add(Op::Cast(DType::BF16), &[DType::F32], &[Transposed]);
    add(Op::Contiguous, &[DType::F32, DType::BF16, DType::F16, DType::I64], &[Transposed]);
    for axis in [Axis::Last, Axis::First, Axis::All] {
        for r in Reduce::ALL {
            add(Op::Reduce(r, axis), &[DType::F32], &[Contig]);
        }
        for r in [Reduce::Sum, Reduce::Mean, Reduce::Amax] {
            add(Op::Reduce(r, axis), &[DType::BF16, DType::F16], &[Contig]);
        }
    }
    for r in [Reduce::Amin, Reduce::Argmax, Reduce::MaxDim] {
        add(Op::Reduce(r, Axis::Last), &[DType::BF16, DType::F16], &[Contig]);
    }
    add(Op::Reduce(Reduce::Sum, Axis::Last), &[DType::F32], &[Transposed]);
    for r in [Reduce::Sum, Reduce::Amax] {
        add(Op::Reduce(r, Axis::Last), &INTS, &[Contig]);
        add(Op::Reduce(r, Axis::All), &INTS, &[Contig]);
    }
    for log in [false, true] {
        for row in SOFTMAX_ROWS {
            add(Op::Softmax { log, row }, &FLOATS, &[Contig]);
        }
    }
    add(Op::Matmul, &FLOATS, &[Vector, Linear]);
    v
}

/// The cases whose names contain one of the comma-separated substrings of `only` (all when
/// `None`); `copy_d2d` always comes along, the summary's yardstick. An `only` that selects nothing
/// (apart from the copy) is an error naming some of the cases.
pub fn select(all: Vec<Case>, only: Option<&str>) -> Result<Vec<Case>, String> {
    let Some(only) = only else { return Ok(all) };
    let parts: Vec<&str> = only.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let chosen: Vec<Case> =
        all.iter().filter(|c| c.op == Op::Copy || parts.iter().any(|p| c.name.contains(p))).cloned().collect();
    if chosen.iter().all(|c| c.op == Op::Copy) && !parts.iter().any(|p| "copy_d2d".contains(p)) {
        let some: Vec<&str> = all.iter().take(6).map(|c| c.name.as_str()).collect();
        return Err(format!("--only `{only}` matches no case of --ops; cases are named like {}, …", some.join(", ")));
    }
    Ok(chosen)
}

/// One case as `bench/pytorch_ops.py` reads it.
#[derive(Debug, Serialize)]
pub struct SpecCase<'a> {
    pub name: &'a str,
    /// `unary`, `binary`, `where`, `cast`, `reduce`, `softmax`, `log_softmax`, `contiguous`, `copy`,
    /// `matmul`.
    pub kind: &'static str,
    /// The op's name (`exp`, `add`, `sum`, `max`, …; the kind for the others).
    pub op: &'static str,
    /// PyTorch's dtype name (`bfloat16`).
    pub dtype: &'static str,
    /// The cast's target dtype.
    pub to: Option<&'static str>,
    /// `contig`, `bcast_row`, `bcast_col`, `transposed`, `vec`, `scalar`, `inplace`, `linear`.
    pub layout: &'static str,
    /// `last`, `first`, `all` for reductions.
    pub axis: Option<&'static str>,
    /// The input's shape: `[R, C]` (`[N / row, row]` for softmax).
    pub shape: [usize; 2],
}

/// The spec file of `bench/pytorch_ops.py`: the matrix's shape, repeat counts and the cases.
#[derive(Debug, Serialize)]
pub struct Spec<'a> {
    /// `[R, C]`.
    pub shape: [usize; 2],
    pub warmup: usize,
    pub runs: usize,
    pub reps: usize,
    /// The number multiplied in the `scalar` cases.
    pub scalar: f64,
    pub cases: Vec<SpecCase<'a>>,
}

/// The case as the script reads it, for a `[r, c]` matrix.
pub fn spec_case(case: &Case, r: usize, c: usize) -> SpecCase<'_> {
    let (kind, op, axis) = match case.op {
        Op::Unary(u) => ("unary", u.name(), None),
        Op::Binary(b) => ("binary", b.name(), None),
        Op::Where => ("where", "where", None),
        Op::Cast(_) => ("cast", "cast", None),
        Op::Reduce(red, axis) => ("reduce", red.name(), Some(axis.name())),
        Op::Softmax { log: false, .. } => ("softmax", "softmax", None),
        Op::Softmax { log: true, .. } => ("log_softmax", "log_softmax", None),
        Op::Contiguous => ("contiguous", "contiguous", None),
        Op::Copy => ("copy", "copy", None),
        Op::Matmul => ("matmul", "matmul", None),
    };
    let shape = match case.op {
        Op::Softmax { row, .. } => [r * c / row, row],
        _ => [r, c],
    };
    let to = match case.op {
        Op::Cast(to) => Some(to.name()),
        _ => None,
    };
    SpecCase { name: &case.name, kind, op, dtype: case.dtype.name(), to, layout: case.layout.name(), axis, shape }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_matrix_covers_every_op_and_has_unique_names() {
        let m = matrix();
        let names: HashSet<&str> = m.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), m.len(), "names are unique");
        for u in Unary::ALL {
            assert!(m.iter().any(|c| c.op == Op::Unary(u)), "{u:?}");
        }
        for b in Binary::ALL {
            assert!(m.iter().any(|c| c.op == Op::Binary(b)), "{b:?}");
        }
        for r in Reduce::ALL {
            for a in [Axis::Last, Axis::First, Axis::All] {
                assert!(m.iter().any(|c| c.op == Op::Reduce(r, a)), "{r:?} {a:?}");
            }
        }
        for d in FLOATS {
            for l in [Layout::Contig, Layout::BcastRow, Layout::BcastCol, Layout::Transposed, Layout::Vector] {
                assert!(m.iter().any(|c| c.op == Op::Binary(Binary::Add) && c.dtype == d && c.layout == l));
            }
            for row in SOFTMAX_ROWS {
                assert!(names.contains(format!("softmax_{}_rows{row}", short(d)).as_str()));
                assert!(names.contains(format!("log_softmax_{}_rows{row}", short(d)).as_str()));
            }
        }
        for name in ["add_f16_bcast_row", "softmax_bf16_rows1024", "sum_f32_first", "cast_f32_to_bf16", "copy_d2d"] {
            assert!(names.contains(name), "{name}");
        }
        assert_eq!(m[0].name, "copy_d2d");
    }

    #[test]
    fn bytes_count_each_operand_once() {
        let (r, c) = (4096, 4096);
        let n = r * c;
        assert_eq!(Case::new(Op::Copy, DType::F32, Layout::Contig).bytes(r, c), 8 * n);
        assert_eq!(Case::new(Op::Binary(Binary::Add), DType::F32, Layout::Contig).bytes(r, c), 12 * n);
        assert_eq!(Case::new(Op::Binary(Binary::Add), DType::BF16, Layout::BcastRow).bytes(r, c), 4 * n + 2 * c);
        assert_eq!(Case::new(Op::Binary(Binary::Lt), DType::F16, Layout::Contig).bytes(r, c), 5 * n);
        assert_eq!(Case::new(Op::Binary(Binary::Div), DType::I32, Layout::Contig).bytes(r, c), 12 * n);
        assert_eq!(Case::new(Op::Unary(Unary::Exp), DType::F32, Layout::Vector).bytes(r, c), 8 * c);
        assert_eq!(Case::new(Op::Cast(DType::BF16), DType::F32, Layout::Contig).bytes(r, c), 6 * n);
        assert_eq!(
            Case::new(Op::Reduce(Reduce::MaxDim, Axis::Last), DType::F32, Layout::Contig).bytes(r, c),
            4 * n + 12 * r
        );
        assert_eq!(Case::new(Op::Reduce(Reduce::Sum, Axis::All), DType::I32, Layout::Contig).bytes(r, c), 4 * n + 8);
        assert!(!Case::new(Op::Unary(Unary::Exp), DType::F32, Layout::Vector).memory_bound());
        let gemv = Case::new(Op::Matmul, DType::BF16, Layout::Vector);
        assert_eq!(
            (gemv.name.as_str(), gemv.bytes(r, c), gemv.memory_bound()),
            ("matmul_bf16_vec", 2 * (c + n + r), true)
        );
    }

    #[test]
    fn only_selects_by_substring_and_keeps_the_yardstick() {
        let s = select(matrix(), Some("softmax_bf16")).unwrap();
        assert_eq!(s.len(), 1 + 8, "{s:?}");
        assert_eq!(s[0].name, "copy_d2d");
        assert!(select(matrix(), Some("nothing_like_this")).unwrap_err().contains("matches no case"));
        assert_eq!(select(matrix(), Some("copy")).unwrap().len(), 1);
        assert_eq!(select(matrix(), None).unwrap().len(), matrix().len());
    }
}
