//! `torch.distributed` for cudasem: process groups, collectives on tensors with
//! ProcessGroupNCCL's stream semantics, and the stores of the rendezvous.
//!
//! | torch.distributed | cudasem |
//! |---|---|
//! | `dist.init_process_group("nccl", init_method="env://")` | [`init_process_group`]`(InitOptions::default())` (torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`) |
//! | `init_method="tcp://host:port", rank=r, world_size=n` | `InitOptions { init_method: "tcp://host:port".into(), rank: Some(r), world_size: Some(n), .. }` |
//! | one process driving several GPUs (`ncclCommInitAll`) | [`ProcessGroup::from_devices`]`(&[0, 1])` (one group handle per rank; drive each from its own thread) |
//! | `dist.get_rank()`, `get_world_size()`, `barrier()`, `new_group(ranks)` | [`ProcessGroup::rank`], [`world_size`](ProcessGroup::world_size), [`barrier`](ProcessGroup::barrier), [`new_group`](ProcessGroup::new_group) (also free functions over the default group) |
//! | `dist.destroy_process_group()` | [`destroy_process_group`], or drop the last handle |
//! | `dist.all_reduce(t, op, async_op=…)` | [`ProcessGroup::all_reduce`]`(&t, ReduceOp::Sum, async_op)` → [`Work`] |
//! | `broadcast`, `all_gather_into_tensor`, `reduce_scatter_tensor`, `all_to_all_single`, `send`/`isend`, `recv`/`irecv` | the same names on [`ProcessGroup`] |
//! | `all_to_all_single(out, in, output_split_sizes, input_split_sizes)` | [`ProcessGroup::all_to_all_single_splits`]`(&out, &in, Some(&[…]), Some(&[…]), async_op)` (splits count rows of dim 0; `None`: equal) |
//! | `work.wait()`, `work.is_completed()` | [`Work::wait`] (the current stream waits; the host does not), [`Work::is_completed`] |
//! | `dist.TCPStore`, `dist.HashStore` | [`TcpStore`], [`HashStore`] (trait [`Store`]: set / get / add / wait / check / delete_key); unlike PyTorch's, the TCP store lets in only clients that prove the job's secret (`CUDASEM_STORE_SECRET`), caps messages at 4 GiB, limits connections and closes idle ones |
//! | `torchrun --nproc-per-node N prog` | `cudasem run --nproc-per-node N -- prog` (makes the job's store secret; `--timeout`; leaves no process behind) |
//!
//! **Stream semantics.** A collective runs on the group's communication stream, which first
//! waits for an event recorded on the device's current stream, so it sees every op queued
//! before it; its tensors are `record_stream`ed on the communication stream, so memory of a
//! tensor dropped at once is not handed out again before the collective is done. With
//! `async_op = false` the current stream waits for the collective before the call returns;
//! with `true`, [`Work::wait`] does that later. The host never blocks on the device in either.
//!
//! **Backends.** [`Backend::Nccl`] (the CUDA driver) runs NCCL, loaded at run time (see the
//! README for where it is looked for, and `CUDASEM_NCCL_LIB`). [`Backend::Sim`] (the simulated
//! machine) is a test double with the same semantics: each collective is a job on the
//! communication stream that exchanges the bytes through the group's store — between threads of
//! one process, or between processes over loopback TCP.
//!
//! **Failures are errors, not hangs.** A tensor on another device than the rank's is
//! [`Error::WrongDeviceForRank`]; with `check_collectives` (on by default) every rank compares
//! each collective's op, dtype and sizes through the store first, so a mismatch is
//! [`Error::CollectiveMismatch`] on every rank (split sizes of an `all_to_all_single` that do not
//! pair up across ranks: [`Error::SplitMismatch`]); a rank that never arrives (dead, or not started)
//! is [`Error::DistributedTimeout`] after the group's timeout; a store server that went away is
//! [`Error::RankFailed`]. After a collective is queued, the group's watchdog (ProcessGroupNCCL's)
//! follows it: one that does not finish on the device within the timeout (a peer that died
//! mid-collective) or an error NCCL reports asynchronously (`ncclCommGetAsyncError`) aborts the
//! group (`ncclCommAbort`, so stuck kernels exit) — the outstanding works fail with that error,
//! [`Work::wait_blocking`] and [`ProcessGroup::barrier`] return it instead of hanging, and every
//! later call is [`Error::ProcessGroupAborted`] at once.

mod agree;
mod collectives;
mod group;
mod init;
mod options;
mod reduce;
mod sim;
mod store;
mod tcp_server;
mod tcp_store;
mod tcp_wire;
mod watchdog;

pub use crate::driver::comm::ReduceOp;
pub use collectives::{Work, COLLECTIVE_DTYPES};
pub use group::ProcessGroup;
pub use options::{Backend, InitOptions};
pub use store::{HashStore, Store};
pub use tcp_store::TcpStore;

use crate::error::{Error, Result};
use std::sync::Mutex;

/// The group `init_process_group` made, until `destroy_process_group`.
static DEFAULT_GROUP: Mutex<Option<ProcessGroup>> = Mutex::new(None);

fn default_slot() -> std::sync::MutexGuard<'static, Option<ProcessGroup>> {
    DEFAULT_GROUP.lock().unwrap_or_else(|e| e.into_inner())
}

/// Joins the world (`dist.init_process_group`): the rendezvous of `options.init_method` through
/// a [`TcpStore`] served by rank 0, then the backend's communicator. The group is also the
/// process's default group ([`default_group`]) until [`destroy_process_group`].
pub fn init_process_group(options: InitOptions) -> Result<ProcessGroup> {
    if default_slot().is_some() {
        return Err(Error::InvalidArgument {
            op: "init_process_group",
            reason: "the default process group is already initialized; call destroy_process_group first".into(),
        });
    }
    let group = ProcessGroup::new(&options)?;
    *default_slot() = Some(group.clone());
    Ok(group)
}

/// Whether [`init_process_group`] made a default group that is not destroyed (`dist.is_initialized`).
pub fn is_initialized() -> bool {
    default_slot().is_some()
}

/// The default group (`dist.group.WORLD`).
pub fn default_group() -> Result<ProcessGroup> {
    default_slot().clone().ok_or(Error::InvalidArgument {
        op: "default_group",
        reason: "the default process group is not initialized; call init_process_group first".into(),
    })
}

/// A subgroup of the default group (`dist.new_group(ranks)`; see [`ProcessGroup::new_group`]).
pub fn new_group(ranks: &[usize]) -> Result<Option<ProcessGroup>> {
    default_group()?.new_group(ranks)
}

/// Forgets the default group (`dist.destroy_process_group()`); it is destroyed when its last
/// handle drops (its queued collectives finish first).
pub fn destroy_process_group() {
    default_slot().take();
}
