//! `torch.backends.cuda`: process-wide switches of how CUDA kernels compute
//! (re-exported as [`cudasem::cuda::backends`](crate::cuda::backends)).

/// `torch.backends.cuda.matmul`.
pub mod matmul {
    use std::sync::atomic::{AtomicBool, Ordering};

    static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

    /// `torch.backends.cuda.matmul.allow_tf32 = allow`: lets `float32` matrix products on the
    /// CUDA driver use TF32 tensor cores (inputs rounded to 10 mantissa bits, `f32`
    /// accumulation; `CUBLAS_COMPUTE_32F_FAST_TF32`). Off by default, as in PyTorch; products
    /// already queued are not affected. The sim driver and the CPU always compute in full `f32`.
    pub fn set_allow_tf32(allow: bool) {
        ALLOW_TF32.store(allow, Ordering::Relaxed);
    }

    /// `torch.backends.cuda.matmul.allow_tf32`: whether `float32` matrix products may use TF32.
    pub fn allow_tf32() -> bool {
        ALLOW_TF32.load(Ordering::Relaxed)
    }
}
