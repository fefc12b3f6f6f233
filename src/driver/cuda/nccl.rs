//! NCCL, loaded at run time: the communicators of [`Driver::comm_init_rank`] and
//! [`Driver::comm_init_all`](crate::driver::Driver::comm_init_all) and their collectives.
//!
//! The ABI types are cudarc's (`cudarc::nccl::sys`); the library is found here, because
//! cudarc's loader looks only for names that PyTorch's `nvidia-nccl` wheel and most system
//! packages do not ship (`libnccl.so.2`). The search, first hit wins:
//! 1. the driver's [`CudaSettings::nccl_lib`](crate::config::CudaSettings::nccl_lib)
//!    (`CUDASEM_NCCL_LIB`): the library's path, or a directory holding `libnccl.so.2`;
//! 2. the dynamic loader's own search (`LD_LIBRARY_PATH`, the ld.so cache, system directories)
//!    for `libnccl.so.2` and `libnccl.so`;
//! 3. PyTorch's wheel, `site-packages/nvidia/nccl/lib/libnccl.so.2` (also `dist-packages`), under
//!    `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, `/usr/local`, `/usr` and `/opt/conda`.
//!
//! Nothing found is [`Error::NcclNotFound`] listing every place tried. Function results are read
//! as plain integers (never as Rust enums), so a status a newer NCCL adds cannot be undefined
//! behaviour. Every call first makes the device's primary context current, as NCCL expects of
//! the CUDA runtime's current device.
//!
//! [`Driver::comm_init_rank`]: crate::driver::Driver::comm_init_rank

use super::handles::{make_current, RawCtx};
use crate::driver::comm::{offsets, Collective, Comm, ReduceOp};
use crate::driver::DevicePtr;
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

type Status = c_int;
type Stream = cudaStream_t;

/// The NCCL functions cudasem calls, from the loaded library (kept loaded for the process).
struct Nccl {
    _lib: libloading::Library,
    path: String,
    version: c_int,
    get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> Status,
    init_rank: unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> Status,
    init_all: unsafe extern "C" fn(*mut ncclComm_t, c_int, *const c_int) -> Status,
    finalize: Option<unsafe extern "C" fn(ncclComm_t) -> Status>,
    destroy: unsafe extern "C" fn(ncclComm_t) -> Status,
    abort: unsafe extern "C" fn(ncclComm_t) -> Status,
    async_error: unsafe extern "C" fn(ncclComm_t, *mut c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    last_error: Option<unsafe extern "C" fn(ncclComm_t) -> *const c_char>,
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclDataType_t,
        ncclRedOp_t,
        ncclComm_t,
        Stream,
    ) -> Status,
    broadcast:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> Status,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, Stream) -> Status,
    reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclDataType_t,
        ncclRedOp_t,
        ncclComm_t,
        Stream,
    ) -> Status,
    send: unsafe extern "C" fn(*const c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> Status,
    recv: unsafe extern "C" fn(*mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> Status,
    group_start: unsafe extern "C" fn() -> Status,
    group_end: unsafe extern "C" fn() -> Status,
}

/// Where to look, in order (see the module docs): `first` (the settings' library), then the
/// loader's search and Python's wheels, with `env` as the environment.
fn candidates(first: Option<&Path>, env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = first {
        out.push(if p.is_dir() { p.join("libnccl.so.2") } else { p.to_path_buf() });
    }
    out.push("libnccl.so.2".into());
    out.push("libnccl.so".into());
    let home = env("HOME").map(|h| Path::new(&h).join(".local"));
    let prefixes = [env("VIRTUAL_ENV").map(PathBuf::from), env("CONDA_PREFIX").map(PathBuf::from), home]
        .into_iter()
        .flatten()
        .chain(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { continue };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3")))
            .collect();
        pythons.sort();
        for py in pythons.iter().rev() {
            for packages in ["site-packages", "dist-packages"] {
                let lib = py.join(packages).join("nvidia/nccl/lib/libnccl.so.2");
                if lib.exists() {
                    out.push(lib);
                }
            }
        }
    }
    out
}

/// Copies the symbol `name` out of `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C signature of `name` in NCCL's `nccl.h`.
unsafe fn symbol<F: Copy>(lib: &libloading::Library, name: &str, tried: &[String]) -> Result<F> {
    // SAFETY: the caller gives the symbol's true type; the library stays loaded as long as the
    // pointer is used (`Nccl` keeps it, and lives for the process).
    unsafe { lib.get::<F>(name.as_bytes()) }.map(|s| *s).map_err(|e| Error::NcclNotFound {
        reason: format!("the library has no {name} ({e}); NCCL 2.12 or newer is needed"),
        searched: tried.to_vec(),
    })
}

impl Nccl {
    fn load(first: Option<&Path>, env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Result<Nccl> {
        let mut tried = Vec::new();
        let mut last = String::from("no candidate");
        for path in candidates(first, env) {
            tried.push(path.display().to_string());
            // SAFETY: loading runs the library's initializers; NCCL is made to be dlopen'ed (PyTorch
            // and cudarc load it the same way) and its initializers have no preconditions.
            match unsafe { libloading::Library::new(&path) } {
                Ok(lib) => return Nccl::bind(lib, path.display().to_string(), &tried),
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::NcclNotFound { reason: format!("no libnccl could be loaded (last: {last})"), searched: tried })
    }

    fn bind(lib: libloading::Library, path: String, tried: &[String]) -> Result<Nccl> {
        // SAFETY: for every symbol below, the type is the function's C signature in nccl.h (NCCL 2.12
        // to 2.30, results read as plain `int`s); `ncclGetVersion` writes one `int` through a valid pointer.
        unsafe {
            let get_version: unsafe extern "C" fn(*mut c_int) -> Status = symbol(&lib, "ncclGetVersion", tried)?;
            let mut version = 0;
            get_version(&mut version);
            Ok(Nccl {
                get_unique_id: symbol(&lib, "ncclGetUniqueId", tried)?,
                init_rank: symbol(&lib, "ncclCommInitRank", tried)?,
                init_all: symbol(&lib, "ncclCommInitAll", tried)?,
                finalize: symbol(&lib, "ncclCommFinalize", tried).ok(),
                destroy: symbol(&lib, "ncclCommDestroy", tried)?,
                abort: symbol(&lib, "ncclCommAbort", tried)?,
                async_error: symbol(&lib, "ncclCommGetAsyncError", tried)?,
                error_string: symbol(&lib, "ncclGetErrorString", tried)?,
                last_error: symbol(&lib, "ncclGetLastError", tried).ok(),
                all_reduce: symbol(&lib, "ncclAllReduce", tried)?,
                broadcast: symbol(&lib, "ncclBroadcast", tried)?,
                all_gather: symbol(&lib, "ncclAllGather", tried)?,
                reduce_scatter: symbol(&lib, "ncclReduceScatter", tried)?,
                send: symbol(&lib, "ncclSend", tried)?,
                recv: symbol(&lib, "ncclRecv", tried)?,
                group_start: symbol(&lib, "ncclGroupStart", tried)?,
                group_end: symbol(&lib, "ncclGroupEnd", tried)?,
                version,
                path,
                _lib: lib,
            })
        }
    }

    /// `Ok` for `ncclSuccess`, else the error with NCCL's name, description and last message.
    fn check(&self, op: &'static str, status: Status, comm: Option<ncclComm_t>) -> Result<()> {
        if status == 0 {
            return Ok(());
        }
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: NCCL returns a NUL-terminated string that stays valid (static text, or the
                // communicator's last-error buffer, read before any other call on it).
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        // SAFETY: `ncclGetErrorString` takes any result value.
        let mut message = text(unsafe { (self.error_string)(status) });
        if let (Some(last), Some(c)) = (self.last_error, comm) {
            // SAFETY: `c` is a live communicator (or null, which NCCL accepts here).
            let detail = text(unsafe { last(c) });
            if !detail.is_empty() {
                message = format!("{message}: {detail}");
            }
        }
        Err(Error::Nccl { op, code: status, name: status_name(status).into(), message })
    }
}

/// `ncclResult_t`'s names.
fn status_name(status: Status) -> &'static str {
    match status {
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "ncclUnknownError",
    }
}

/// The process's NCCL, loaded on first use, `first` tried first (the driver's settings; a
/// library once loaded stays the process's).
fn nccl(first: Option<&Path>) -> Result<&'static Nccl> {
    static LIB: OnceLock<Result<Nccl>> = OnceLock::new();
    LIB.get_or_init(|| Nccl::load(first, &|k| std::env::var_os(k))).as_ref().map_err(Clone::clone)
}

/// Where NCCL was loaded from and its version (`22703` for 2.27.3), or why it was not; `first`
/// is the library to try first when none is loaded yet
/// ([`CudaSettings::nccl_lib`](crate::config::CudaSettings::nccl_lib)).
pub fn describe(first: Option<&Path>) -> Result<(String, i32)> {
    nccl(first).map(|n| (n.path.clone(), n.version))
}

fn dtype(d: DType) -> Result<ncclDataType_t> {
    Ok(match d {
        DType::U8 => ncclDataType_t::ncclUint8,
        DType::I32 => ncclDataType_t::ncclInt32,
        DType::I64 => ncclDataType_t::ncclInt64,
        DType::F16 => ncclDataType_t::ncclFloat16,
        DType::BF16 => ncclDataType_t::ncclBfloat16,
        DType::F32 => ncclDataType_t::ncclFloat32,
        DType::F64 => ncclDataType_t::ncclFloat64,
        DType::Bool => return Err(Error::UnsupportedDType { op: "nccl", dtype: d }),
    })
}

fn red_op(op: ReduceOp) -> ncclRedOp_t {
    match op {
        ReduceOp::Sum => ncclRedOp_t::ncclSum,
        ReduceOp::Product => ncclRedOp_t::ncclProd,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
        ReduceOp::Avg => ncclRedOp_t::ncclAvg,
    }
}

/// A new unique id (`ncclGetUniqueId`), as its 128 bytes (`first`: the library to try first).
pub(super) fn unique_id(first: Option<&Path>) -> Result<Vec<u8>> {
    let lib = nccl(first)?;
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: `id` is a valid out-parameter of the right type.
    lib.check("ncclGetUniqueId", unsafe { (lib.get_unique_id)(&mut id) }, None)?;
    Ok(id.internal.iter().map(|&c| c as u8).collect())
}

/// `ncclCommInitRank` on `device` (primary context `ctx`).
pub(super) fn init_rank(
    first: Option<&Path>,
    ctx: RawCtx,
    world: usize,
    rank: usize,
    id: &[u8],
) -> Result<Box<dyn Comm>> {
    let lib = nccl(first)?;
    let mut unique = ncclUniqueId { internal: [0; 128] };
    if id.len() != unique.internal.len() {
        return Err(Error::InvalidArgument { op: "ncclCommInitRank", reason: format!("a {}-byte id", id.len()) });
    }
    for (d, s) in unique.internal.iter_mut().zip(id) {
        *d = *s as c_char;
    }
    make_current(ctx.0).map_err(|e| super::status::driver_error("cuCtxSetCurrent", e))?;
    let mut comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: `comm` is an out-parameter; the id came from `ncclGetUniqueId` on rank 0 (through the
    // store); the device's context is current, so NCCL binds the communicator to it.
    let status = unsafe { (lib.init_rank)(&mut comm, world as c_int, unique, rank as c_int) };
    lib.check("ncclCommInitRank", status, None)?;
    Ok(Box::new(NcclComm { lib, comm: RawComm(comm), ctx, world, aborted: Default::default() }))
}

/// `ncclCommInitAll` over `devices` (with their primary contexts).
pub(super) fn init_all(first: Option<&Path>, devices: &[(usize, RawCtx)]) -> Result<Vec<Box<dyn Comm>>> {
    let lib = nccl(first)?;
    let ordinals: Vec<c_int> = devices.iter().map(|&(d, _)| d as c_int).collect();
    let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
    // SAFETY: `comms` has room for one communicator per ordinal; the ordinals are this process's
    // devices (the runtime checked them).
    let status = unsafe { (lib.init_all)(comms.as_mut_ptr(), ordinals.len() as c_int, ordinals.as_ptr()) };
    lib.check("ncclCommInitAll", status, None)?;
    let world = devices.len();
    Ok(comms
        .into_iter()
        .zip(devices)
        .map(|(c, &(_, ctx))| {
            Box::new(NcclComm { lib, comm: RawComm(c), ctx, world, aborted: Default::default() }) as Box<dyn Comm>
        })
        .collect())
}

raw_handle!(
    /// A communicator (`ncclComm_t`).
    RawComm(ncclComm_t)
);

/// One rank's NCCL communicator.
struct NcclComm {
    lib: &'static Nccl,
    comm: RawComm,
    ctx: RawCtx,
    world: usize,
    /// Set by [`Comm::abort`], which frees the communicator.
    aborted: std::sync::atomic::AtomicBool,
}

impl NcclComm {
    fn enter(&self) -> Result<()> {
        make_current(self.ctx.0).map_err(|e| super::status::driver_error("cuCtxSetCurrent", e))
    }

    /// PyTorch's `all2all_single_unequal_split`: in one group, for every peer, a send of its part
    /// of `send` and a receive of its part of `recv` (each at its byte offset; parts of no
    /// elements are skipped, as in PyTorch). The status of the first failing call, else
    /// `ncclGroupEnd`'s.
    ///
    /// # Safety
    /// `send` and `recv` are live device memory of this communicator's device holding the
    /// counts' sums of elements of `size` bytes, `counts` have one entry per rank, `s` is a live
    /// stream of the device, whose context is current.
    #[allow(clippy::too_many_arguments)]
    unsafe fn all_to_all(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        t: ncclDataType_t,
        size: usize,
        send_counts: &[usize],
        recv_counts: &[usize],
        s: Stream,
    ) -> Status {
        let (lib, c) = (self.lib, self.comm.0);
        let at = |p: DevicePtr, elements: usize| (p.0 + (elements * size) as u64) as usize as *mut c_void;
        let (send_at, recv_at) = (offsets(send_counts), offsets(recv_counts));
        // SAFETY: the caller's contract: every part lies inside its buffer (offset + count ≤ the
        // sum), peers are ranks of this live communicator.
        unsafe {
            let mut status = (lib.group_start)();
            if status != 0 {
                return status;
            }
            for peer in 0..self.world.min(send_counts.len()).min(recv_counts.len()) {
                if status == 0 && send_counts[peer] > 0 {
                    status = (lib.send)(at(send, send_at[peer]), send_counts[peer], t, peer as c_int, c, s);
                }
                if status == 0 && recv_counts[peer] > 0 {
                    status = (lib.recv)(at(recv, recv_at[peer]), recv_counts[peer], t, peer as c_int, c, s);
                }
            }
            // A group that was started is ended whatever happened inside it.
            let end = (lib.group_end)();
            if status == 0 {
                end
            } else {
                status
            }
        }
    }
}

impl Comm for NcclComm {
    fn run(&self, op: &Collective, stream: u64) -> Result<()> {
        if self.aborted.load(std::sync::atomic::Ordering::Acquire) {
            // The distributed layer refuses calls on an aborted group first; this keeps a freed
            // communicator from ever reaching NCCL.
            return Err(Error::Internal { op: "nccl", reason: "the communicator was aborted".into() });
        }
        self.enter()?;
        let (lib, c, s) = (self.lib, self.comm.0, stream as usize as Stream);
        let ptr = |p: crate::driver::DevicePtr| p.0 as usize as *mut c_void;
        // SAFETY: for every call below, the addresses are live device memory of this communicator's
        // device holding the counts given (the distributed layer checked the tensors and keeps them
        // alive until the stream passes the collective); `s` is a live stream of the device, whose
        // context is current; `c` is this live communicator.
        let (name, status) = unsafe {
            match *op {
                Collective::AllReduce { send, recv, count, dtype: d, op } => {
                    ("ncclAllReduce", (lib.all_reduce)(ptr(send), ptr(recv), count, dtype(d)?, red_op(op), c, s))
                }
                Collective::Broadcast { send, recv, count, dtype: d, root } => {
                    ("ncclBroadcast", (lib.broadcast)(ptr(send), ptr(recv), count, dtype(d)?, root as c_int, c, s))
                }
                Collective::AllGather { send, recv, count, dtype: d } => {
                    ("ncclAllGather", (lib.all_gather)(ptr(send), ptr(recv), count, dtype(d)?, c, s))
                }
                Collective::ReduceScatter { send, recv, count, dtype: d, op } => (
                    "ncclReduceScatter",
                    (lib.reduce_scatter)(ptr(send), ptr(recv), count, dtype(d)?, red_op(op), c, s),
                ),
                Collective::Send { buf, count, dtype: d, peer } => {
                    ("ncclSend", (lib.send)(ptr(buf), count, dtype(d)?, peer as c_int, c, s))
                }
                Collective::Recv { buf, count, dtype: d, peer } => {
                    ("ncclRecv", (lib.recv)(ptr(buf), count, dtype(d)?, peer as c_int, c, s))
                }
                Collective::AllToAll { send, recv, dtype: d, ref send_counts, ref recv_counts } => {
                    ("ncclGroupEnd", self.all_to_all(send, recv, dtype(d)?, d.size(), send_counts, recv_counts, s))
                }
            }
        };
        lib.check(name, status, Some(c))
    }

    fn async_error(&self) -> Result<()> {
        if self.aborted.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let mut status: c_int = 0;
        // SAFETY: a live communicator (not aborted: the flag above, and the distributed layer's
        // watchdog never aborts it during a call) and a valid out-parameter. NCCL lets another
        // thread ask while collectives are queued (ProcessGroupNCCL's watchdog does).
        let called = unsafe { (self.lib.async_error)(self.comm.0, &mut status) };
        self.lib.check("ncclCommGetAsyncError", called, Some(self.comm.0))?;
        // `ncclInProgress` is a non-blocking communicator's pending state, not an error.
        if status == 7 {
            return Ok(());
        }
        self.lib.check("ncclCommGetAsyncError", status, Some(self.comm.0))
    }

    fn abort(&self) {
        if self.aborted.swap(true, std::sync::atomic::Ordering::AcqRel) || self.enter().is_err() {
            return;
        }
        let _in_flight = super::nccl_exit::begin();
        // SAFETY: a live communicator, aborted once (the flag) and with no other call on it in
        // progress (the distributed layer's watchdog leaves the abort to the last call to
        // return); abort frees it, so nothing uses it afterwards (`run` and `async_error` check
        // the flag, `Drop` skips an aborted one). Kernels it queued that wait for a dead peer exit.
        let _ = unsafe { (self.lib.abort)(self.comm.0) };
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if *self.aborted.get_mut() || self.enter().is_err() {
            return;
        }
        let _in_flight = super::nccl_exit::begin();
        // SAFETY: this live communicator is finalized (its queued work flushed) and destroyed once;
        // nothing uses it afterwards.
        unsafe {
            if let Some(finalize) = self.lib.finalize {
                let _ = finalize(self.comm.0);
            }
            let _ = (self.lib.destroy)(self.comm.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn the_search_takes_the_variable_then_the_loader_then_pythons_wheels() {
        let root = std::env::temp_dir().join(format!("cudasem-nccl-search-{}", std::process::id()));
        let wheel = root.join("venv/lib/python3.12/site-packages/nvidia/nccl/lib");
        std::fs::create_dir_all(&wheel).unwrap();
        std::fs::write(wheel.join("libnccl.so.2"), b"not a library").unwrap();
        let env = |k: &str| -> Option<OsString> { (k == "VIRTUAL_ENV").then(|| root.join("venv").into()) };
        let found = candidates(Some(&wheel), &env);
        assert_eq!(found[0], wheel.join("libnccl.so.2"), "a directory in the variable names its libnccl.so.2");
        assert_eq!(found[1..3], [PathBuf::from("libnccl.so.2"), PathBuf::from("libnccl.so")]);
        assert!(found[3..].contains(&wheel.join("libnccl.so.2")), "PyTorch's wheel in the virtual environment");
        // A file that is not a library is skipped; nothing loadable is a typed error listing the search.
        match Nccl::load(Some(&wheel.join("libnccl.so.2")), &|_| None) {
            Err(Error::NcclNotFound { searched, .. }) => {
                assert_eq!(searched[0], wheel.join("libnccl.so.2").display().to_string());
            }
            Ok(n) => assert!(n.version > 0, "a machine with NCCL loads it from the loader's search"),
            Err(other) => panic!("expected NcclNotFound, got {other}"),
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_process_library_loads_or_says_why() {
        match describe(None) {
            Ok((path, version)) => assert!(version >= 21200 && !path.is_empty(), "{path} {version}"),
            Err(Error::NcclNotFound { searched, reason }) => {
                assert!(searched.iter().any(|s| s == "libnccl.so.2"), "{reason}: {searched:?}");
                assert!(Error::NcclNotFound { searched, reason }.to_string().starts_with("NCCL not found: "));
            }
            Err(other) => panic!("expected NcclNotFound, got {other}"),
        }
    }
}
