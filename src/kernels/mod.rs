//! Kernels that run on the host: [`cpu`], one implementation of every `KernelOp`, used by CPU
//! tensors (at once, on the calling thread) and by the sim driver (on a stream's worker thread).

pub(crate) mod cpu;
