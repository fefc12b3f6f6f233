//! The functions an op names: elementwise functions of one and two operands, and reductions.

/// Elementwise functions of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x` (integers wrap).
    Neg,
    /// `|x|`.
    Abs,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Hyperbolic tangent.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `max(x, 0)` (NaN stays NaN).
    Relu,
    /// `x · Φ(x)` with the exact normal CDF (erf form, PyTorch's default `approximate='none'`).
    Gelu,
    /// GELU's tanh approximation (PyTorch's `approximate='tanh'`):
    /// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`, computed as the equal
    /// `x / (1 + e^(-2u))` with `u = √(2/π) · (x + 0.044715 x³)` (no cancellation for x < 0).
    GeluTanh,
}

impl UnaryOp {
    /// The op's PyTorch name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu | UnaryOp::GeluTanh => "gelu",
        }
    }
}

/// Elementwise functions of two operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b` (logical or on bool).
    Add,
    /// `a - b`.
    Sub,
    /// `a * b` (logical and on bool).
    Mul,
    /// True division `a / b` (computed in a floating-point type).
    Div,
    /// Elementwise maximum (NaN propagates).
    Maximum,
    /// Elementwise minimum (NaN propagates).
    Minimum,
    /// `a ^ b` (integers: wrapping; a negative exponent gives 0 unless `|a| = 1`).
    Pow,
    /// `a == b` → bool.
    Eq,
    /// `a != b` → bool.
    Ne,
    /// `a < b` → bool.
    Lt,
    /// `a <= b` → bool.
    Le,
    /// `a > b` → bool.
    Gt,
    /// `a >= b` → bool.
    Ge,
}

impl BinaryOp {
    /// The op's PyTorch name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "pow",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
        }
    }

    /// Whether the op is a comparison (its output is bool).
    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge)
    }
}

/// Reductions over some dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (0 for no elements).
    Sum,
    /// Arithmetic mean (NaN for no elements).
    Mean,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Index of the first maximum within the reduced dimensions, row-major (output `I64`).
    ArgMax,
    /// Index of the first minimum within the reduced dimensions, row-major (output `I64`).
    ArgMin,
}

impl ReduceOp {
    /// The op's PyTorch name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
}
