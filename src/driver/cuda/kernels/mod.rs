//! The kernel wing of the CUDA driver: everything that makes, compiles and launches the tensor
//! kernels and the delay kernel.
//!
//! * Vocabulary both sides share: [`vocab`] (module keys, kernel ids, elementwise ops, limits).
//! * Sources: the CUDA C in `cu/*.cu`, read by [`sources`] and specialized per module by
//!   [`codegen`].
//! * One NVRTC path: [`nvrtc`] compiles a source with its options for a device, caches the image
//!   in memory and on disk, and loads it as a module; [`table`] keeps each device's loaded tensor
//!   kernels, [`spin`] the delay kernel.
//! * Launchers with their policies beside them: [`launch`] dispatches a [`crate::kernel::KernelOp`]
//!   to [`elementwise`] ([`elementwise_policy`], [`strided`]), [`reduce`] ([`reduce_layouts`],
//!   [`softmax_layouts`]), [`gemv`] and [`gemm`] (cuBLASLt), over the per-launch context [`ctx`].

pub(super) mod attn_order;
pub(super) mod codegen;
pub(super) mod ctx;
pub(super) mod elementwise;
pub(super) mod elementwise_policy;
pub(super) mod fused;
pub(super) mod fused_codegen;
pub(super) mod gemm;
pub(super) mod gemv;
pub(super) mod jit;
pub(super) mod launch;
pub(super) mod nvrtc;
pub(super) mod random;
pub(super) mod reduce;
pub(super) mod reduce_layouts;
pub(super) mod softmax_layouts;
pub(super) mod sources;
pub(super) mod spin;
pub(super) mod strided;
pub(super) mod table;
pub(super) mod tma;
pub(super) mod vocab;

#[cfg(test)]
mod attn_order_tests;
#[cfg(test)]
mod codegen_tests;
#[cfg(test)]
mod fused_tests;
#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod nvrtc_tests;
#[cfg(test)]
mod resource_tests;
#[cfg(test)]
mod source_hash_tests;
#[cfg(test)]
mod strided_tests;
