//! [`Tensor`]: n-dimensional arrays with PyTorch's CUDA semantics.
//!
//! * **Placement.** A tensor lives on the host ([`Device::Cpu`]) or on one CUDA device.
//!   `Device::Cuda(None)` / `"cuda"` means the current device *when the tensor is made*.
//! * **Where ops run.** An op runs on the device of its tensors, on that device's *current
//!   stream*, whatever the thread's current device is, and its result lives there. Tensors on two
//!   devices are [`Error::DeviceMismatch`] — unless peer access between the two CUDA devices was
//!   enabled ([`crate::cuda::enable_peer_access`]): then the op runs on the first operand's
//!   device and reads the other from peer memory, with a two-way stream barrier. A 0-dim CPU
//!   tensor may be used with CUDA tensors (it is copied over), as in PyTorch.
//! * **Asynchrony.** Device ops are queued; a host read ([`Tensor::to_vec`], [`Tensor::cpu`])
//!   waits for the tensor's data (it is ordered on the device's current stream).
//! * **Memory.** Device storage is a block of the device's caching allocator, taken on the
//!   current stream and given back when the last view drops ([`Tensor::record_stream`] keeps it
//!   from reuse until another stream's work is done). Host storage is pageable, or pinned
//!   ([`Tensor::pin_memory`]) from the caching host allocator.
//! * **Non-blocking copies.** `to(device, true)` and `copy_(src, true)` between pinned host memory
//!   and a device are queued on the device's current stream and return at once; a host read or
//!   write of the pinned tensor waits for the copy, so no program sees a half-copied buffer.
//! * **Views.** `reshape`, `transpose`, `narrow`, `expand`, … share storage: clones and views
//!   alias like PyTorch tensors, and in-place ops (`add_`, `fill_`, `copy_`) write through every
//!   view of the storage (they take `&self` for that reason).
//! * **Errors.** Every op returns [`Result`]; the `std::ops` operators on `&Tensor` have
//!   `Output = Result<Tensor>` (`(&a + &b)?`), so no bad input can panic.
//! * **Signatures that compose.** Every shape argument is one [`IntoShape`]: `&[usize]` (so
//!   `x.reshape(y.shape())`), arrays, `Vec`s, and signed forms with PyTorch's `-1` where PyTorch
//!   allows it (`reshape`/`view`: one inferred dim; `expand`: keep a size) — elsewhere a negative
//!   size is [`Error::InvalidShape`] naming the shape. `slice` takes Rust ranges ([`SliceRange`]:
//!   `2..5`, `3..`, `..=4`, `..`, negative bounds from the end) and refuses ones out of bounds.
//!   Numbers go on either side of an operator (`2.0 * &t`, `1 - &t`, `&t / x`).
//!
//! Ops compute as PyTorch does: [`result_type`] promotion (dimensioned tensors > 0-dim tensors >
//! Rust scalars), true division, comparisons into `Bool`, integer sums into `I64`. On the CPU
//! and on the simulated GPU the same kernels run ([`crate::kernel`]).

mod copy;
mod core;
mod create;
mod display;
mod dlpack;
mod exec;
mod foreign;
mod generator;
mod graphed;
pub mod jiterator;
mod layout;
mod ops;
pub(crate) use ops::fused::SdpaOptions;
mod pinned;
mod random;
mod range;
mod sample;
mod shape;
mod storage;
mod user_kernel;
mod view;

pub use self::core::Tensor;
pub use dlpack::DlpackStream;
pub use generator::cuda as rng_cuda;
pub use generator::{initial_seed, manual_seed, Generator, PhiloxState, RNG_STATE_BYTES};
pub use graphed::{make_graphed, GraphedCallable};
pub use ops::matmul_pad::{matmul_padding, set_matmul_padding, MatmulPadding};
pub use ops::operand::{result_type, Number, Operand};
pub use range::{SliceBounds, SliceRange};
pub use shape::{IntoShape, Shape};
pub(crate) use storage::PoisonHandle;
pub use user_kernel::{compile_kernel, CompileOptions, Dim3, HostLaunch, Kernel, KernelArg, KernelScalar};
