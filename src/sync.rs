//! The locks of the pinned-memory protocol (`runtime::host_memory`, `alloc::host`): the standard
//! library's, or loom's when the crate is built with `--cfg loom`, so the model check in
//! `src/loom_pinned.rs` explores every interleaving of the crate's own code (loom only in the
//! crate's own test build: the library as a dependency keeps the standard locks).

#[cfg(all(loom, test))]
pub(crate) use loom::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(all(loom, test)))]
pub(crate) use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
