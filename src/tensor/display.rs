//! `Display` for tensors: PyTorch's `repr`, with its default print options.
//!
//! `println!("{t}")` prints what `print(t)` prints in PyTorch:
//! `tensor([[1., 2.],\n        [3., 4.]], device='cuda:0', dtype=torch.float16)`. Floats take
//! PyTorch's three modes (whole numbers as `1.`, fixed with 4 decimals, or scientific when the
//! magnitudes span more than 1000× or leave `[1e-4, 1e8]`), columns are right-aligned to the widest
//! value, rows wrap at 80 characters, and a tensor of more than 1000 elements shows the first and
//! last 3 items of each dimension with `...` between (`threshold=1000, edgeitems=3`). The device
//! is shown for CUDA tensors, the dtype when it is not float32, int64 or bool.
//!
//! Printing reads the values to the host after the work queued on the tensor's device's current
//! stream; an error doing so is printed in place of the values.

use super::Tensor;
use crate::dtype::DType;
use crate::error::Result;
use half::{bf16, f16};
use std::fmt;

/// PyTorch's `threshold`: more elements than this are summarized.
const THRESHOLD: usize = 1000;
/// PyTorch's `edgeitems`: items shown at each end of a summarized dimension.
const EDGEITEMS: usize = 3;
/// PyTorch's `precision`: decimals of floats.
const PRECISION: usize = 4;
/// PyTorch's `linewidth`.
const LINEWIDTH: usize = 80;
/// `"tensor("`.
const PREFIX: &str = "tensor(";

#[derive(Clone, Copy)]
enum Value {
    Float(f64),
    Int(i64),
    Bool(bool),
}

/// The elements, row-major.
fn values(t: &Tensor) -> Result<Vec<Value>> {
    fn map<T: crate::dtype::Element>(t: &Tensor, f: impl Fn(T) -> Value) -> Result<Vec<Value>> {
        Ok(t.to_vec::<T>()?.into_iter().map(f).collect())
    }
    match t.dtype() {
        DType::Bool => map(t, Value::Bool),
        DType::U8 => map(t, |v: u8| Value::Int(v.into())),
        DType::I32 => map(t, |v: i32| Value::Int(v.into())),
        DType::I64 => map(t, Value::Int),
        DType::F16 => map(t, |v: f16| Value::Float(v.to_f64())),
        DType::BF16 => map(t, |v: bf16| Value::Float(v.to_f64())),
        DType::F32 => map(t, |v: f32| Value::Float(v.into())),
        DType::F64 => map(t, Value::Float),
    }
}

/// How every value of one tensor is written (PyTorch's `_Formatter`).
struct Formatter {
    int_mode: bool,
    sci_mode: bool,
    width: usize,
}

impl Formatter {
    fn new(shown: &[Value]) -> Formatter {
        let floats: Vec<f64> = shown
            .iter()
            .filter_map(|v| match v {
                Value::Float(x) if x.is_finite() && *x != 0.0 => Some(*x),
                _ => None,
            })
            .collect();
        let mut f = Formatter { int_mode: true, sci_mode: false, width: 1 };
        if !shown.iter().any(|v| matches!(v, Value::Float(_))) {
            f.width = shown.iter().map(|&v| f.plain(v).len()).max().unwrap_or(1);
            return f;
        }
        if floats.is_empty() {
            return f;
        }
        let (min, max) = floats.iter().fold((f64::INFINITY, 0f64), |(lo, hi), x| (lo.min(x.abs()), hi.max(x.abs())));
        f.int_mode = floats.iter().all(|x| x.ceil() == *x);
        f.sci_mode = max / min > 1000.0 || max > 1.0e8 || (!f.int_mode && min < 1.0e-4);
        f.width = floats.iter().map(|&x| f.plain(Value::Float(x)).len()).max().unwrap_or(1);
        f
    }

    /// The value, unpadded.
    fn plain(&self, v: Value) -> String {
        match v {
            Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(x) if x.is_nan() => "nan".to_string(),
            Value::Float(x) if x.is_infinite() => if x > 0.0 { "inf" } else { "-inf" }.to_string(),
            Value::Float(x) if self.sci_mode => python_exp(x),
            Value::Float(x) if self.int_mode => format!("{x:.0}."),
            Value::Float(x) => format!("{x:.PRECISION$}"),
        }
    }

    /// The value, right-aligned to the widest.
    fn format(&self, v: Value) -> String {
        format!("{:>1$}", self.plain(v), self.width)
    }
}

/// Python's `f"{x:.4e}"`: `1.2346e-05` (a sign and at least two digits in the exponent).
fn python_exp(x: f64) -> String {
    let s = format!("{x:.PRECISION$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
}

/// The tensor's values in nested brackets, from `offset` of the row-major `vals`.
struct Writer<'a> {
    vals: &'a [Value],
    shape: &'a [usize],
    summarize: bool,
    formatter: Formatter,
}

impl Writer<'_> {
    /// The indices of dimension `dim` that are shown (`None`: the `...` between the edges).
    fn shown(&self, dim: usize) -> Vec<Option<usize>> {
        let n = self.shape[dim];
        if self.summarize && n > 2 * EDGEITEMS {
            (0..EDGEITEMS).map(Some).chain([None]).chain((n - EDGEITEMS..n).map(Some)).collect()
        } else {
            (0..n).map(Some).collect()
        }
    }

    fn stride(&self, dim: usize) -> usize {
        self.shape[dim + 1..].iter().product()
    }

    /// Every value that is shown (for the formatter's widths).
    fn gather(&self, dim: usize, offset: usize, out: &mut Vec<Value>) {
        if dim == self.shape.len() {
            out.push(self.vals[offset]);
            return;
        }
        for i in self.shown(dim).into_iter().flatten() {
            self.gather(dim + 1, offset + i * self.stride(dim), out);
        }
    }

    fn write(&self, dim: usize, offset: usize, indent: usize) -> String {
        let ndim = self.shape.len();
        if dim == ndim {
            return self.formatter.format(self.vals[offset]);
        }
        let shown = self.shown(dim);
        if dim + 1 == ndim {
            let items: Vec<String> = shown
                .iter()
                .map(|i| i.map_or_else(|| " ...".to_string(), |i| self.formatter.format(self.vals[offset + i])))
                .collect();
            let per_line = ((LINEWIDTH.saturating_sub(indent)) / (self.formatter.width + 2)).max(1);
            let lines: Vec<String> = items.chunks(per_line).map(|c| c.join(", ")).collect();
            return format!("[{}]", lines.join(&format!(",\n{}", " ".repeat(indent + 1))));
        }
        let slices: Vec<String> = shown
            .iter()
            .map(|i| {
                i.map_or_else(|| "...".to_string(), |i| self.write(dim + 1, offset + i * self.stride(dim), indent + 1))
            })
            .collect();
        let sep = format!(",{}{}", "\n".repeat(ndim - dim - 1), " ".repeat(indent + 1));
        format!("[{}]", slices.join(&sep))
    }
}

/// Python's `str(tuple(shape))`: `(0, 3)`, `(5,)`, `()`.
fn python_tuple(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// PyTorch's `_add_suffixes`: `, device='cuda:0'`, on a new line where the line would pass 80.
fn add_suffixes(body: String, suffixes: &[String]) -> String {
    let indent = PREFIX.len();
    let mut out = body;
    // As PyTorch counts it (one more than the last line's length, two more without a newline).
    let mut last_line = out.len() as isize - out.rfind('\n').map_or(-1, |i| i as isize) + 1;
    for suffix in suffixes {
        if last_line as usize + suffix.len() + 2 > LINEWIDTH {
            out.push_str(&format!(",\n{}{suffix}", " ".repeat(indent)));
            last_line = (indent + suffix.len()) as isize;
        } else {
            out.push_str(&format!(", {suffix}"));
            last_line += suffix.len() as isize + 2;
        }
    }
    out.push(')');
    out
}

impl Tensor {
    /// PyTorch's `repr(t)`; the text of `Display`.
    fn repr(&self) -> Result<String> {
        let mut suffixes = Vec::new();
        if self.device().is_cuda() {
            suffixes.push(format!("device='{}'", self.device()));
        }
        let dtype = format!("dtype=torch.{}", self.dtype().name());
        if self.numel() == 0 {
            if self.dim() != 1 {
                suffixes.push(format!("size={}", python_tuple(self.shape())));
            }
            if self.dtype() != DType::F32 {
                suffixes.push(dtype);
            }
            return Ok(add_suffixes(format!("{PREFIX}[]"), &suffixes));
        }
        if !matches!(self.dtype(), DType::F32 | DType::I64 | DType::Bool) {
            suffixes.push(dtype);
        }
        let vals = values(self)?;
        let shape = self.shape();
        let mut w = Writer { vals: &vals, shape, summarize: self.numel() > THRESHOLD, formatter: Formatter::new(&[]) };
        let mut shown = Vec::new();
        w.gather(0, 0, &mut shown);
        w.formatter = Formatter::new(&shown);
        let body = if shape.is_empty() { w.formatter.plain(vals[0]) } else { w.write(0, 0, PREFIX.len()) };
        Ok(add_suffixes(format!("{PREFIX}{body}"), &suffixes))
    }
}

/// PyTorch's `print(t)` (see the module's documentation for the rules).
///
/// ```
/// use cudasem::{DType, Tensor};
/// # fn main() -> cudasem::Result<()> {
/// let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], [2, 2], "cpu")?;
/// assert_eq!(t.to_string(), "tensor([[1., 2.],\n        [3., 4.]])");
/// let h = Tensor::from_slice(&[0.5f32, 1.25], [2], "cuda:0")?.to_dtype(DType::F16)?;
/// assert_eq!(h.to_string(), "tensor([0.5000, 1.2500], device='cuda:0', dtype=torch.float16)");
/// println!("{}", Tensor::arange(0.0, 2000.0, 1.0, DType::I64, "cuda")?); // tensor([0, 1, 2, ..., 1997, 1998, 1999], device='cuda:0')
/// # Ok(()) }
/// ```
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.repr() {
            Ok(s) => f.write_str(&s),
            Err(e) => write!(f, "{PREFIX}<the values could not be read: {e}>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_print_as_python_does() {
        assert_eq!(python_exp(1.0), "1.0000e+00");
        assert_eq!(python_exp(-1.23456e-5), "-1.2346e-05");
        assert_eq!(python_exp(3.0e120), "3.0000e+120");
    }

    #[test]
    fn tuples_print_as_python_does() {
        assert_eq!(python_tuple(&[0, 3]), "(0, 3)");
        assert_eq!(python_tuple(&[0]), "(0,)");
    }
}
