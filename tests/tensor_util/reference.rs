//! The ops the elementwise tests call by name, and their float64 references with PyTorch's
//! result dtypes.
#![allow(dead_code)]

use super::round_to;
use cudasem::{DType, Operand, Result, Tensor};

/// Every binary op of the tensor API.
pub const BINARY: [&str; 13] =
    ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge"];

/// Every unary op of the tensor API.
pub const UNARY: [&str; 12] =
    ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "gelu"];

/// `a op b` by the op's name.
pub fn apply_binary(op: &str, a: &Tensor, b: Operand<'_>) -> Result<Tensor> {
    match op {
        "add" => a.add(b),
        "sub" => a.sub(b),
        "mul" => a.mul(b),
        "div" => a.div(b),
        "maximum" => a.maximum(b),
        "minimum" => a.minimum(b),
        "pow" => a.pow(b),
        "eq" => a.eq(b),
        "ne" => a.ne(b),
        "lt" => a.lt(b),
        "le" => a.le(b),
        "gt" => a.gt(b),
        "ge" => a.ge(b),
        _ => panic!("no binary op {op}"),
    }
}

/// `op(x)` by the op's name.
pub fn apply_unary(op: &str, x: &Tensor) -> Result<Tensor> {
    match op {
        "neg" => x.neg(),
        "abs" => x.abs(),
        "exp" => x.exp(),
        "log" => x.log(),
        "sqrt" => x.sqrt(),
        "rsqrt" => x.rsqrt(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tanh" => x.tanh(),
        "sigmoid" => x.sigmoid(),
        "relu" => x.relu(),
        "gelu" => x.gelu(),
        _ => panic!("no unary op {op}"),
    }
}

/// PyTorch's integer `pow` (negative exponents: 0 unless the base is ±1), wrapping.
pub fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 if exp % 2 == 0 => 1,
            -1 => -1,
            _ => 0,
        };
    }
    (0..exp).fold(1i64, |acc, _| acc.wrapping_mul(base))
}

/// PyTorch's result dtype of a binary op whose operands promote to `common`.
pub fn out_dtype(op: &str, common: DType) -> DType {
    match op {
        "div" if !common.is_float() => DType::F32,
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" => DType::Bool,
        _ => common,
    }
}

/// Whether `op` is a comparison.
pub fn is_comparison(op: &str) -> bool {
    matches!(op, "eq" | "ne" | "lt" | "le" | "gt" | "ge")
}

/// The float64 reference of one element: operands converted to the compute dtype, the op in
/// f64 (floats), i64 with wrapping (integers) or logic (bool), the result converted to `out`.
pub fn binary_reference(op: &str, a: f64, b: f64, common: DType) -> f64 {
    let out = out_dtype(op, common);
    let compute = if op == "div" { out } else { common };
    let (x, y) = (round_to(compute, a), round_to(compute, b));
    let r = match op {
        "eq" => (x == y) as u8 as f64,
        "ne" => (x != y) as u8 as f64,
        "lt" => (x < y) as u8 as f64,
        "le" => (x <= y) as u8 as f64,
        "gt" => (x > y) as u8 as f64,
        "ge" => (x >= y) as u8 as f64,
        _ if compute.is_float() => match op {
            "add" => x + y,
            "sub" => x - y,
            "mul" => x * y,
            "div" => x / y,
            "maximum" | "minimum" if x.is_nan() || y.is_nan() => f64::NAN,
            "maximum" => x.max(y),
            "minimum" => x.min(y),
            _ => x.powf(y),
        },
        _ if compute.is_bool() => match op {
            "add" | "maximum" => (x != 0.0 || y != 0.0) as u8 as f64,
            _ => (x != 0.0 && y != 0.0) as u8 as f64, // mul, minimum
        },
        _ => {
            let (i, j) = (x as i64, y as i64);
            (match op {
                "add" => i.wrapping_add(j),
                "sub" => i.wrapping_sub(j),
                "mul" => i.wrapping_mul(j),
                "maximum" => i.max(j),
                "minimum" => i.min(j),
                _ => int_pow(i, j),
            }) as f64
        }
    };
    round_to(out, r)
}

/// PyTorch's result dtype of a unary op on `dtype` (`None`: refused).
pub fn unary_out(op: &str, dtype: DType) -> Option<DType> {
    match op {
        "neg" | "abs" | "relu" if dtype.is_bool() => None,
        "neg" | "abs" | "relu" => Some(dtype),
        "gelu" if !dtype.is_float() => None,
        _ if !dtype.is_float() => Some(DType::F32),
        _ => Some(dtype),
    }
}

/// The float64 value of `op(x)` with IEEE special values: `relu(NaN)` is NaN (PyTorch's),
/// `gelu(-inf)` NaN (`-inf · Φ(-inf)` = `-inf · 0`, PyTorch's on CPU and CUDA), `gelu(+inf)`
/// +inf (CUDA's; PyTorch's vectorized CPU kernel gives NaN). GELU's Φ comes from `libm`'s
/// `erfc` (musl's), not the crate's own.
pub fn unary_reference(op: &str, x: f64) -> f64 {
    match op {
        "neg" => -x,
        "abs" => x.abs(),
        "exp" => x.exp(),
        "log" => x.ln(),
        "sqrt" => x.sqrt(),
        "rsqrt" => 1.0 / x.sqrt(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tanh" => x.tanh(),
        "sigmoid" if x < 0.0 => x.exp() / (1.0 + x.exp()),
        "sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "relu" if x.is_nan() => x,
        "relu" => x.max(0.0),
        "gelu" if x == f64::INFINITY => x,
        "gelu" => 0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2),
        _ => panic!("no unary op {op}"),
    }
}
