//! The one NVRTC path of the CUDA driver: a CUDA C [`Program`] (source + NVRTC options) compiled
//! for a device's architecture, cached in this process and on disk, and loaded as a [`Module`]
//! into the current context. The tensor kernels (`table.rs`) and the delay kernel (`spin.rs`)
//! both come through here, and so will any other kernel the crate compiles.
//!
//! * An image is CUBIN for `sm_XY` when NVRTC supports the device's architecture (else PTX for
//!   the newest `compute_XY` it supports, which the driver compiles at load). Its cache key is a
//!   128-bit hash of the source, the NVRTC version, the target and the options, and it is stored
//!   as `<hash>.cubin` / `<hash>.ptx` in the directory the driver was given (the process's
//!   [`KernelCache`](crate::config::KernelCache): `$CUDASEM_KERNEL_CACHE`, `off` disables it, else
//!   `$XDG_CACHE_HOME/cudasem/kernels`, else `~/.cache/cudasem/kernels`). Each file starts with a
//!   header naming its hash and length (a file that does not match is recompiled) and is written
//!   to a temporary file of its own and renamed, so concurrent writers never mix their images.

use crate::driver::cuda::status::{driver_error, lock, DRIVER};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys::{self, CUresult};
use cudarc::nvrtc::{result as nv, sys as nvsys};
use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A CUDA C program to build: its source, NVRTC options beyond the target architecture (which
/// [`image`] picks for the device, with `-default-device` and `--std=c++17`), and the operation
/// its errors name. Source and options together (with NVRTC's version and the target) are the
/// cache key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Program<'a> {
    /// The complete CUDA C source.
    pub source: &'a str,
    /// Extra NVRTC options (for example `-lineinfo`).
    pub options: &'a [&'a str],
    /// The operation named by the errors (`"launch"`, `"delay"`).
    pub op: &'static str,
}

impl<'a> Program<'a> {
    /// A tensor-kernel program: `source` with the default options, errors naming `launch`.
    pub(crate) fn tensor(source: &'a str) -> Program<'a> {
        Program { source, options: &[], op: "launch" }
    }

    /// A tensor-kernel program built for its device's architecture-specific features where the
    /// device has them (`sm_90a` on compute capability 9.0: `wgmma`), errors naming `launch`.
    pub(crate) fn arch_specific(source: &'a str) -> Program<'a> {
        Program { source, options: &[ARCH_SPECIFIC], op: "launch" }
    }
}

/// The option of [`Program::arch_specific`]: not passed to NVRTC, it turns the target `sm_90`
/// (or `compute_90`) into `sm_90a` (`compute_90a`).
const ARCH_SPECIFIC: &str = "-cudasem-arch-specific";

/// NVRTC's options for `program` on the target `arch` ([`target`]).
fn program_options(arch: &str, program: &Program) -> Vec<String> {
    let specific = program.options.contains(&ARCH_SPECIFIC) && matches!(arch, "sm_90" | "compute_90");
    let arch = if specific { format!("{arch}a") } else { arch.to_owned() };
    let mut o = options(&arch).to_vec();
    o.extend(program.options.iter().filter(|&&x| x != ARCH_SPECIFIC).map(|o| o.to_string()));
    o
}

raw_handle!(
    /// A loaded module (`CUmodule`).
    RawModule(sys::CUmodule)
);
raw_handle!(
    /// A kernel of a loaded module (`CUfunction`).
    pub(crate) RawFunction(sys::CUfunction)
);

/// A module loaded into a context by [`Module::load`]; unloaded only by [`Module::unload`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Module(RawModule);

impl Module {
    /// `program`'s image for a device of compute capability `major.minor` ([`image`], with the
    /// disk cache in `cache`) loaded into the current context, which must be that device's.
    pub(crate) fn load(program: &Program, major: u32, minor: u32, cache: Option<&Path>) -> Result<Module> {
        let img = image(program, major, minor, cache)?;
        Module::load_image(&img, program.op)
    }

    /// A CUBIN, fatbin or NUL-terminated PTX `img` (checked by the driver: a bad image is its
    /// error) loaded into the current context, which must be the device's; `op` names the errors.
    pub(crate) fn load_image(img: &[u8], op: &'static str) -> Result<Module> {
        if img.is_empty() {
            return Err(Error::InvalidArgument { op, reason: "the kernel image is empty".into() });
        }
        // SAFETY:
        // `img` is non-empty and outlives the call; the driver validates the image (a CUBIN or fatbin
        // by its header, PTX up to the NUL every caller appends); the caller made the device's
        // context current.
        match unsafe { cu::module::load_data(img.as_ptr().cast()) } {
            Ok(m) => Ok(Module(RawModule(m))),
            Err(e) if e.0 == CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => Err(unsupported(
                op,
                "the PTX is newer than the NVIDIA driver accepts (an NVRTC newer than the driver's CUDA \
                 version made it); use an NVRTC no newer than the driver's CUDA version (nvidia-smi shows it) \
                 or update the driver",
            )),
            Err(e) => Err(driver_error("cuModuleLoadData", e)),
        }
    }

    /// The kernel `name` (its `extern "C"` name) of this module.
    pub(crate) fn function(&self, name: &str) -> Result<RawFunction> {
        let name = CString::new(name).map_err(|_| unsupported("launch", "a kernel name holds a NUL byte"))?;
        // SAFETY: the module is loaded (only `unload` ends that, and it takes the module by value).
        let f = unsafe { cu::module::get_function(self.0 .0, name) };
        f.map(RawFunction).map_err(|e| driver_error("cuModuleGetFunction", e))
    }

    /// Unloads the module (best effort); its context must be current.
    ///
    /// # Safety
    /// No kernel of the module runs or is launched afterwards, and no copy of this `Module`
    /// is used again.
    pub(crate) unsafe fn unload(self) {
        // SAFETY: per this function's contract, this is the module's last use.
        let _ = unsafe { cu::module::unload(self.0 .0) };
    }
}

/// Images compiled in this process, by hash.
static IMAGES: Mutex<Vec<(u128, Arc<Vec<u8>>)>> = Mutex::new(Vec::new());
/// NVRTC compilations this process ran.
static COMPILES: AtomicUsize = AtomicUsize::new(0);
/// Images read from the disk cache.
static DISK_HITS: AtomicUsize = AtomicUsize::new(0);

/// `(compilations, disk-cache hits)` so far in this process (for tests).
#[cfg(test)]
pub(in crate::driver::cuda) fn counters() -> (usize, usize) {
    (COMPILES.load(Ordering::SeqCst), DISK_HITS.load(Ordering::SeqCst))
}

/// What NVRTC offers: its version and the `sm_XY` numbers it compiles for.
struct Nvrtc {
    version: (i32, i32),
    archs: Vec<i32>,
}

fn unsupported(op: &'static str, reason: impl Into<String>) -> Error {
    Error::Unsupported { op, driver: DRIVER, reason: reason.into() }
}

fn nvrtc() -> Result<&'static Nvrtc> {
    static NVRTC: OnceLock<Result<Nvrtc>> = OnceLock::new();
    NVRTC.get_or_init(probe_nvrtc).as_ref().map_err(Clone::clone)
}

fn probe_nvrtc() -> Result<Nvrtc> {
    // SAFETY: only asks the dynamic loader whether libnvrtc can be opened.
    if !unsafe { nvsys::is_culib_present() } {
        return Err(unsupported(
            "launch",
            "the kernels (tensor ops and the delay kernel) are compiled with NVRTC, but libnvrtc.so was \
             not found by the dynamic loader; install the CUDA toolkit's NVRTC or add its lib directory \
             to LD_LIBRARY_PATH",
        ));
    }
    let probed = std::panic::catch_unwind(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both are valid out-pointers.
        unsafe { nvsys::nvrtcVersion(&mut major, &mut minor) }.result()?;
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        unsafe { nvsys::nvrtcGetNumSupportedArchs(&mut n) }.result()?;
        let mut archs = vec![0i32; n.max(0) as usize];
        // SAFETY: `archs` has room for the `n` entries NVRTC writes.
        unsafe { nvsys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }.result()?;
        Ok::<_, nv::NvrtcError>(Nvrtc { version: (major, minor), archs })
    });
    match probed {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(unsupported("launch", format!("NVRTC failed to report its version: {e}"))),
        Err(_) => {
            Err(unsupported("launch", "libnvrtc lacks a symbol the kernels need (NVRTC 11.2 or newer is needed)"))
        }
    }
}

/// `--gpu-architecture` for a device of compute capability `major.minor`, and whether the
/// image is CUBIN (else PTX).
fn target(n: &Nvrtc, major: u32, minor: u32) -> Result<(String, bool)> {
    let want = (major * 10 + minor) as i32;
    if n.archs.contains(&want) {
        return Ok((format!("sm_{want}"), true));
    }
    match n.archs.iter().copied().filter(|&a| a <= want).max() {
        Some(a) => Ok((format!("compute_{a}"), false)),
        None => Err(unsupported(
            "launch",
            format!(
                "NVRTC {}.{} cannot compile for compute capability {major}.{minor} (it supports {:?})",
                n.version.0, n.version.1, n.archs
            ),
        )),
    }
}

/// FNV-1a over `bytes`, from `seed`.
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// The image of `program` for a device of compute capability `major.minor`: from this process's
/// cache, else the disk cache in the directory `cache` (none: no disk cache), else NVRTC (then
/// stored in both).
pub(crate) fn image(program: &Program, major: u32, minor: u32, cache: Option<&Path>) -> Result<Arc<Vec<u8>>> {
    let op = program.op;
    let n = nvrtc().map_err(|e| with_op(e, op))?;
    let (arch, cubin) = target(n, major, minor).map_err(|e| with_op(e, op))?;
    let options = program_options(&arch, program);
    let src = program.source;
    let mut key = format!("{}.{}\n{}\n", n.version.0, n.version.1, options.join(" ")).into_bytes();
    key.extend_from_slice(src.as_bytes());
    let hash = (fnv(0xcbf2_9ce4_8422_2325, &key) as u128) << 64 | fnv(0x6c62_272e_07bb_0142, &key) as u128;
    if let Some((_, img)) = lock(&IMAGES).iter().find(|(h, _)| *h == hash) {
        return Ok(img.clone());
    }
    let file = cache.map(|d| d.join(format!("{hash:032x}.{}", if cubin { "cubin" } else { "ptx" })));
    let from_disk = file.as_ref().and_then(|f| std::fs::read(f).ok()).and_then(|b| unwrap_cached(b, hash));
    let img = match from_disk {
        Some(bytes) => {
            DISK_HITS.fetch_add(1, Ordering::SeqCst);
            bytes
        }
        None => {
            let bytes = compile(src, &options, cubin, op)?;
            if let Some(f) = &file {
                store(f, hash, &bytes);
            }
            bytes
        }
    };
    let img = Arc::new(img);
    lock(&IMAGES).push((hash, img.clone()));
    Ok(img)
}

/// `e` naming `op` when it is an [`Error::Unsupported`] (NVRTC's probe is shared by every op).
fn with_op(e: Error, op: &'static str) -> Error {
    match e {
        Error::Unsupported { driver, reason, .. } => Error::Unsupported { op, driver, reason },
        e => e,
    }
}

/// NVRTC's options for a target (`compute_XY` or `sm_XY`).
fn options(arch: &str) -> [String; 3] {
    [format!("--gpu-architecture={arch}"), "-default-device".into(), "--std=c++17".into()]
}

/// NVRTC's version and its report of `src` compiled for compute capability `major.minor` as
/// [`image`] compiles it, with ptxas's resource usage (registers, spills) of every kernel (for
/// tests).
#[cfg(test)]
pub(in crate::driver::cuda) fn resource_report(src: &str, major: u32, minor: u32) -> Result<((i32, i32), String)> {
    resource_report_of(&Program::tensor(src), major, minor)
}

/// [`resource_report`] of `program` (with its options).
#[cfg(test)]
pub(in crate::driver::cuda) fn resource_report_of(
    program: &Program,
    major: u32,
    minor: u32,
) -> Result<((i32, i32), String)> {
    let n = nvrtc()?;
    let (arch, _) = target(n, major, minor)?;
    let mut options = program_options(&arch, program);
    options.push("--ptxas-options=--verbose".into());
    let src = program.source;
    let csrc = CString::new(src).map_err(|_| unsupported("launch", "a generated kernel source holds a NUL byte"))?;
    let prog = NvrtcProgram::new(&csrc).map_err(nvrtc_error)?;
    prog.compile(&options).map_err(nvrtc_error)?;
    Ok((n.version, prog.log()))
}

/// Whether libnvrtc can be loaded (for tests that compile kernels).
#[cfg(test)]
pub(in crate::driver::cuda) fn nvrtc_present() -> bool {
    // SAFETY: only asks the dynamic loader whether libnvrtc can be opened.
    unsafe { nvsys::is_culib_present() }
}

/// Forgets this process's compiled images, so the next [`image`] reads the disk (for tests).
#[cfg(test)]
pub(in crate::driver::cuda) fn forget_images() {
    lock(&IMAGES).clear();
}

/// The header of a cached image: a magic, the key's hash, the image's length.
const MAGIC: &[u8; 8] = b"CSEMKRN1";
const HEADER: usize = 8 + 16 + 8;

/// The image in a cache file, when its header names `hash` and its length is right.
fn unwrap_cached(mut bytes: Vec<u8>, hash: u128) -> Option<Vec<u8>> {
    let header = bytes.get(..HEADER)?;
    let len = u64::from_le_bytes(header[24..32].try_into().ok()?) as usize;
    let ok = &header[..8] == MAGIC && header[8..24] == hash.to_le_bytes() && bytes.len() == HEADER + len && len > 0;
    ok.then(|| bytes.split_off(HEADER))
}

/// `bytes` framed as [`store`] writes them (for tests).
#[cfg(test)]
pub(in crate::driver::cuda) fn store_for_test(hash: u128, bytes: &[u8]) -> Vec<u8> {
    let mut data = MAGIC.to_vec();
    data.extend_from_slice(&hash.to_le_bytes());
    data.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    data.extend_from_slice(bytes);
    data
}

/// [`unwrap_cached`] (for tests).
#[cfg(test)]
pub(in crate::driver::cuda) fn unwrap_for_test(bytes: Vec<u8>, hash: u128) -> Option<Vec<u8>> {
    unwrap_cached(bytes, hash)
}

/// Writes `bytes` with its header to `file` through a temporary file of its own, then renames it
/// (best effort: the cache is an optimization). Readers see a whole file or none.
fn store(file: &std::path::Path, hash: u128, bytes: &[u8]) {
    static TMP: AtomicUsize = AtomicUsize::new(0);
    let Some(dir) = file.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let unique = TMP.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{hash:032x}.{}.{unique}.tmp", std::process::id()));
    let mut data = Vec::with_capacity(HEADER + bytes.len());
    data.extend_from_slice(MAGIC);
    data.extend_from_slice(&hash.to_le_bytes());
    data.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    data.extend_from_slice(bytes);
    if std::fs::write(&tmp, &data).is_err() || std::fs::rename(&tmp, file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// An NVRTC program handle, destroyed when dropped: on every path out of [`compile`], errors and
/// panics included.
struct NvrtcProgram(nvsys::nvrtcProgram);

impl Drop for NvrtcProgram {
    fn drop(&mut self) {
        // SAFETY: made by `nvrtcCreateProgram`, owned by `self`, destroyed once here.
        let _ = unsafe { nv::destroy_program(self.0) };
    }
}

/// An NVRTC failure: the call, the result and the compiler's log (empty when there is none).
type NvrtcFailure = (&'static str, nv::NvrtcError, String);

/// An NVRTC failure as an [`Error::Driver`] whose message is the compiler's log.
fn nvrtc_error((op, e, log): NvrtcFailure) -> Error {
    let message = if log.trim().is_empty() { "NVRTC gave no log".to_owned() } else { log.trim().to_owned() };
    Error::Driver { op, code: e.0 as i32, name: format!("{:?}", e.0), message }
}

impl NvrtcProgram {
    fn new(src: &CString) -> std::result::Result<NvrtcProgram, NvrtcFailure> {
        nv::create_program(src, Some(c"cudasem.cu"))
            .map(NvrtcProgram)
            .map_err(|e| ("nvrtcCreateProgram", e, String::new()))
    }

    /// Compiles the program; the error carries the compiler's log.
    fn compile(&self, options: &[String]) -> std::result::Result<(), NvrtcFailure> {
        // SAFETY: `self.0` is live (owned by `self`).
        let compiled = unsafe { nv::compile_program(self.0, options) };
        compiled.map_err(|e| ("nvrtcCompileProgram", e, self.log()))
    }

    /// The compiler's log of the last compilation (empty when there is none).
    fn log(&self) -> String {
        // SAFETY: `self.0` is live (owned by `self`).
        let log = unsafe { nv::get_program_log(self.0) }.unwrap_or_default();
        let log: Vec<u8> = log.into_iter().map(|c| c as u8).take_while(|&c| c != 0).collect();
        String::from_utf8_lossy(&log).into_owned()
    }

    /// The compiled CUBIN.
    fn cubin(&self) -> std::result::Result<Vec<u8>, NvrtcFailure> {
        let mut size = 0usize;
        // SAFETY: `self.0` is live and compiled; `size` is a valid out-pointer.
        unsafe { nvsys::nvrtcGetCUBINSize(self.0, &mut size) }
            .result()
            .map_err(|e| ("nvrtcGetCUBINSize", e, String::new()))?;
        let mut bytes = vec![0u8; size];
        // SAFETY: `bytes` has the `size` bytes NVRTC writes; `self.0` is live and compiled.
        unsafe { nvsys::nvrtcGetCUBIN(self.0, bytes.as_mut_ptr().cast()) }
            .result()
            .map(|_| bytes)
            .map_err(|e| ("nvrtcGetCUBIN", e, String::new()))
    }

    /// The compiled PTX, NUL-terminated.
    fn ptx(&self) -> std::result::Result<Vec<u8>, NvrtcFailure> {
        // SAFETY: `self.0` is live and compiled.
        let ptx = unsafe { nv::get_ptx(self.0) }.map_err(|e| ("nvrtcGetPTX", e, String::new()))?;
        let mut v: Vec<u8> = ptx.into_iter().map(|c| c as u8).collect();
        if v.last() != Some(&0) {
            v.push(0);
        }
        Ok(v)
    }
}

/// Compiles `src` with NVRTC; CUBIN or NUL-terminated PTX.
fn compile(src: &str, options: &[String], cubin: bool, op: &'static str) -> Result<Vec<u8>> {
    COMPILES.fetch_add(1, Ordering::SeqCst);
    let csrc = CString::new(src).map_err(|_| unsupported(op, "a kernel source holds a NUL byte"))?;
    let run = || -> std::result::Result<Vec<u8>, NvrtcFailure> {
        let prog = NvrtcProgram::new(&csrc)?;
        prog.compile(options)?;
        if cubin {
            prog.cubin()
        } else {
            prog.ptx()
        }
    };
    match std::panic::catch_unwind(run) {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(failure)) => Err(nvrtc_error(failure)),
        Err(_) => Err(unsupported(op, "NVRTC panicked while compiling a kernel (is libnvrtc older than CUDA 13?)")),
    }
}
