//! Each device's loaded tensor kernels: a map from [`KernelId`] to its loaded `CUfunction` (with
//! its occupancy), read under a read lock with a cheap hasher, so a launch that hits does no
//! allocation and no formatting. A miss builds the module's source (`codegen.rs`), compiles it
//! through the NVRTC path (`nvrtc.rs`, outside every lock), loads it and registers all of its
//! entries at once.

use super::nvrtc::{image, Module, RawFunction};
use super::vocab::{KernelId, ModuleKey};
use crate::driver::cuda::fxmap::FxMap;
use crate::driver::cuda::status::{driver_error, lock, read, write, DRIVER};
use crate::error::{Error, Result};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

/// The attribute that lets a kernel use more than 48 KiB of dynamic shared memory.
const MAX_DYNAMIC_SMEM: sys::CUfunction_attribute =
    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;

fn unsupported(reason: impl Into<String>) -> Error {
    Error::Unsupported { op: "launch", driver: DRIVER, reason: reason.into() }
}

/// A loaded kernel and how many of its blocks (of [`THREADS`] threads) fit on one SM.
#[derive(Debug, Clone, Copy)]
pub(in crate::driver::cuda) struct Func {
    raw: RawFunction,
    pub blocks_per_sm: u32,
}

impl Func {
    /// The `CUfunction`.
    #[inline]
    pub(in crate::driver::cuda) fn handle(&self) -> sys::CUfunction {
        self.raw.0
    }
}

/// One device's loaded tensor kernels.
pub(in crate::driver::cuda) struct Kernels {
    funcs: RwLock<FxMap<KernelId, Func>>,
    /// The disk cache of compiled kernels (none: kept for the process only).
    cache: Option<PathBuf>,
    /// Loaded modules (unloaded when the driver drops), also serializing loads.
    modules: Mutex<Vec<Module>>,
    /// This table's current generation (unique in the process): the key of the threads' last
    /// lookups, renewed when the modules are unloaded.
    generation: AtomicU64,
}

/// Generations of kernel tables, process-wide.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's last kernel lookup: `(generation, id, kernel)`. A thread launching the same
    /// kernel again (the common case of a loop of small ops) skips the table's lock.
    static LAST: Cell<Option<(u64, KernelId, Func)>> = const { Cell::new(None) };
}

impl Kernels {
    pub(in crate::driver::cuda) fn new(cache: Option<PathBuf>) -> Kernels {
        Kernels {
            cache,
            funcs: RwLock::new(FxMap::default()),
            modules: Mutex::new(Vec::new()),
            generation: AtomicU64::new(GENERATIONS.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// The kernel `id`, loaded into the current context (which must be this device's) on first use.
    #[inline]
    pub(in crate::driver::cuda) fn get(&self, id: KernelId, major: u32, minor: u32) -> Result<Func> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Some((g, i, f)) = LAST.get() {
            if g == generation && i == id {
                return Ok(f);
            }
        }
        // (The read guard must be gone before `load`, which takes the write lock.)
        let cached = read(&self.funcs).get(&id).copied();
        let f = match cached {
            Some(f) => f,
            None => {
                self.load(id.module, major, minor)?;
                read(&self.funcs)
                    .get(&id)
                    .copied()
                    .ok_or_else(|| unsupported(format!("no kernel {id:?} in its module")))?
            }
        };
        LAST.set(Some((generation, id, f)));
        Ok(f)
    }

    #[cold]
    fn load(&self, key: ModuleKey, major: u32, minor: u32) -> Result<()> {
        let source = key.source();
        let program = key.program(&source);
        // Compiled (or read from a cache) before the lock, so loads of other modules overlap it.
        image(&program, major, minor, self.cache.as_deref())?;
        let mut modules = lock(&self.modules);
        let entries = key.entries();
        if entries.iter().all(|&entry| read(&self.funcs).contains_key(&KernelId { module: key, entry })) {
            return Ok(()); // another thread loaded it meanwhile
        }
        let module = Module::load(&program, major, minor, self.cache.as_deref())?;
        modules.push(module);
        let mut found = Vec::with_capacity(entries.len());
        for entry in entries {
            let f = module.function(&entry.name(&key))?;
            let smem = entry.dynamic_smem();
            if smem > 0 {
                // SAFETY: `f` is a live kernel of the current context; the attribute takes a byte count.
                unsafe { cu::function::set_function_attribute(f.0, MAX_DYNAMIC_SMEM, smem as i32) }
                    .map_err(|e| driver_error("cuFuncSetAttribute", e))?;
            }
            // SAFETY: `f` is a live kernel of the current context.
            let blocks =
                unsafe { cu::occupancy::max_active_block_per_multiprocessor(f.0, entry.occupancy_threads(), smem) }
                    .map_err(|e| driver_error("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?;
            found.push((KernelId { module: key, entry }, Func { raw: f, blocks_per_sm: blocks.max(1) as u32 }));
        }
        write(&self.funcs).extend(found);
        Ok(())
    }

    /// Unloads every module; the device's context must be current and its work done.
    pub(in crate::driver::cuda) fn unload_all(&self) {
        self.generation.store(GENERATIONS.fetch_add(1, Ordering::Relaxed), Ordering::Release);
        write(&self.funcs).clear();
        for m in lock(&self.modules).drain(..) {
            // SAFETY:
            // loaded by `load` and drained from the list, so unloaded exactly once; the table is cleared
            // and its generation renewed above, so no launch finds its kernels again.
            unsafe { m.unload() };
        }
    }
}
