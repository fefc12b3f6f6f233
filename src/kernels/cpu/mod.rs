//! The CPU kernels: one implementation of every [`KernelOp`], over bytes.
//!
//! Both the CPU device (host tensors, run at once on the calling thread) and the sim driver
//! (device tensors, run by a stream's worker thread) execute ops here, so the two give the same
//! results bit for bit. Memory is reached through the small [`Memory`] trait: the kernels read
//! each input's span into host bytes, compute, and write back only the output's elements (as a
//! device kernel would: bytes between a strided output's elements are never touched, so work on
//! interleaved views from other streams is not clobbered).

mod elem;
mod elementwise;
mod execute;
mod fused;
mod gemm;
mod math;
mod random;
mod reduce;

pub(crate) use elem::{encode, gather_as, gather_bytes, scalar_bytes, store_scalar};
pub(crate) use elem::{f64_to_bf16, f64_to_f16};
pub(crate) use execute::{execute, Memory};
