//! Tensor ops: each validates its operands (devices, dtypes, shapes), picks where it runs
//! ([`super::exec::Exec`]) and lowers itself to one [`crate::kernel::KernelOp`].

mod elementwise;
pub(crate) mod fused;
mod matmul;
pub(crate) mod matmul_pad;
pub(crate) mod operand;
mod operators;
mod reduce;
