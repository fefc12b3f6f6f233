//! Random number generators: [`Generator`] (`torch.Generator`), one default generator per CUDA
//! device and one for the host, and the seeding and state functions of `torch` and `torch.cuda`.
//!
//! Every generator is a Philox4x32-10 stream (`kernel/random.rs`): a seed and an offset, the
//! next unused Philox block. A draw reserves its blocks under the generator's lock (two threads
//! drawing from one generator get disjoint blocks) and then runs on the device as a kernel that
//! makes element `i` from block `offset + i / E` — so the numbers depend only on the seed, the
//! offset and the draw, and are the same on the simulated machine, on every GPU and on the CPU.
//!
//! A draw queued on a stream that is capturing a CUDA graph leaves the generator alone: its
//! kernel reads the seed and a base offset from a 16-byte slot in device memory (one per
//! generator and graph, outside every pool: `runtime/rng_slots.rs`) plus the blocks the graph's earlier draws took.
//! Each replay first writes the generator's seed and offset into the slot and advances the
//! generator by the blocks the graph takes (PyTorch's `capture_prologue` / `replay_prologue`):
//! two replays differ, and seeding, capturing and replaying `k` times gives the numbers of `k`
//! eager runs.

use super::exec::Place;
use super::Tensor;
use crate::device::{Device, IntoCudaDevice, IntoDevice};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{BufferView, DevicePtr, Dims, KernelOp, PhiloxSource};
use crate::runtime::{device_count, resolve_device, rng_draw, RngReplay, Stream};
use crate::scalar::Scalar;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// PyTorch's default seed (`torch.initial_seed()` of a fresh process).
const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// The first bytes of a generator state.
const MAGIC: &[u8; 8] = b"csPhilox";

/// Bytes of a state from [`Generator::get_state`]: the tag, the seed and the offset.
pub const RNG_STATE_BYTES: usize = 24;

/// A generator's seed and next unused Philox block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    seed: u64,
    offset: u64,
}

#[derive(Debug)]
struct Inner {
    id: u64,
    place: Place,
    initial: AtomicU64,
    state: Mutex<State>,
}

/// A random number generator (`torch.Generator`): a Philox4x32-10 stream (seed and offset) for
/// one device. Clones share the stream (as Python references to one generator do);
/// [`Generator::clone_state`] makes an independent copy.
#[derive(Debug, Clone)]
pub struct Generator {
    inner: Arc<Inner>,
}

/// A `(seed, offset)` pair for one's own Philox kernel (PyTorch's `philox_cuda_state`), from
/// [`Generator::philox_state`]: use blocks `offset .. offset + increment` of the stream `seed`
/// (counter `(lo, hi, 0, 0)` of the block number, key `(lo, hi)` of the seed, as
/// [`philox4x32_10`](crate::cuda::philox4x32_10)). When `slot` is set (the stream is capturing
/// a graph), the kernel must read the seed and a base offset from the two `u64` at that device
/// address when it runs and add `offset` to the base (PyTorch's `philox::unpack`): each replay
/// writes them there first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhiloxState {
    /// The seed (unused when `slot` is set).
    pub seed: u64,
    /// The first block (added to the slot's base offset when `slot` is set).
    pub offset: u64,
    /// The device address of `[seed, base offset]` in a captured graph.
    pub slot: Option<u64>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The seed new default CUDA generators start from (the last `manual_seed_all`'s).
static DEFAULT_CUDA_SEED: AtomicU64 = AtomicU64::new(DEFAULT_SEED);
static HOST: OnceLock<Generator> = OnceLock::new();
static CUDA: Mutex<Vec<Generator>> = Mutex::new(Vec::new());

fn cuda_defaults() -> MutexGuard<'static, Vec<Generator>> {
    CUDA.lock().unwrap_or_else(|e| e.into_inner())
}

/// A seed from the operating system's randomness (`torch.seed()`).
fn nondeterministic_seed() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_ok() {
        return u64::from_ne_bytes(b);
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

impl Generator {
    fn on(place: Place, seed: u64) -> Generator {
        Generator {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                place,
                initial: AtomicU64::new(seed),
                state: Mutex::new(State { seed, offset: 0 }),
            }),
        }
    }

    /// A new generator for `device` (`torch.Generator(device=…)`; a CUDA index is checked),
    /// seeded with PyTorch's default seed.
    pub fn new(device: impl IntoDevice) -> Result<Generator> {
        Ok(Generator::on(Place::resolve(device.into_device()?)?, DEFAULT_SEED))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn place(&self) -> Place {
        self.inner.place
    }

    /// The device the generator draws for.
    pub fn device(&self) -> Device {
        self.inner.place.device()
    }

    /// Seeds the generator (offset 0).
    pub fn manual_seed(&self, seed: u64) -> &Generator {
        *self.state() = State { seed, offset: 0 };
        self.inner.initial.store(seed, Ordering::Relaxed);
        self
    }

    /// Seeds the generator from the operating system's randomness and returns the seed.
    pub fn seed(&self) -> u64 {
        let s = nondeterministic_seed();
        self.manual_seed(s);
        s
    }

    /// The seed the generator was last seeded with.
    pub fn initial_seed(&self) -> u64 {
        self.inner.initial.load(Ordering::Relaxed)
    }

    /// The generator's state as opaque bytes ([`RNG_STATE_BYTES`] of them) that
    /// [`Generator::set_state`] takes back.
    pub fn get_state(&self) -> Vec<u8> {
        let s = *self.state();
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&s.seed.to_le_bytes());
        out.extend_from_slice(&s.offset.to_le_bytes());
        out
    }

    /// Restores a state from [`Generator::get_state`] (of any generator);
    /// [`Error::InvalidArgument`] for bytes that are not one.
    pub fn set_state(&self, state: &[u8]) -> Result<&Generator> {
        let s = parse_state("Generator::set_state", state)?;
        *self.state() = s;
        self.inner.initial.store(s.seed, Ordering::Relaxed);
        Ok(self)
    }

    /// A new generator for the same device with a copy of this one's state.
    pub fn clone_state(&self) -> Generator {
        let g = Generator::on(self.place(), 0);
        *g.state() = *self.state();
        g.inner.initial.store(self.initial_seed(), Ordering::Relaxed);
        g
    }

    /// Reserves `increment` Philox blocks for one's own kernel on the device's current stream
    /// (PyTorch's `philox_cuda_state`; see [`PhiloxState`]).
    pub fn philox_state(&self, increment: u64) -> Result<PhiloxState> {
        let stream = self.place().stream()?;
        Ok(match self.reserve(increment, stream.as_ref())? {
            PhiloxSource::Value { seed, offset } => PhiloxState { seed, offset, slot: None },
            PhiloxSource::Slot { slot, offset } => {
                PhiloxState { seed: 0, offset, slot: Some(slot.ptr.0 + (slot.offset * 8) as u64) }
            }
        })
    }

    /// Advances the offset by `blocks` and returns the state before.
    fn advance(&self, blocks: u64) -> State {
        let mut s = self.state();
        let before = *s;
        s.offset = s.offset.wrapping_add(blocks);
        before
    }

    /// Reserves `blocks` Philox blocks for a draw queued on `stream` (`None`: on the host): the
    /// seed and first block, or, on a capturing stream, the graph's slot and the blocks before.
    pub(crate) fn reserve(&self, blocks: u64, stream: Option<&Stream>) -> Result<PhiloxSource> {
        if let (Some(s), Place::Cuda(d)) = (stream, self.place()) {
            let make = || self.make_slot(d);
            if let Some((ptr, offset)) = rng_draw(s, self.inner.id, blocks, make)? {
                let slot = BufferView {
                    ptr,
                    dtype: DType::I64,
                    shape: Dims::from(&[2][..]),
                    strides: Dims::from(&[1][..]),
                    offset: 0,
                };
                return Ok(PhiloxSource::Slot { slot, offset });
            }
        }
        let s = self.advance(blocks);
        Ok(PhiloxSource::Value { seed: s.seed, offset: s.offset })
    }

    /// A graph's slot for this generator (two `i64` of device `d`, from memory nothing else
    /// uses: `runtime/rng_slots.rs` says why not the graph's pool), what keeps it alive, and the
    /// replay's prologue that fills it: the offset on every replay, the seed when it differs
    /// from the one the slot holds (a kernel launch less per replay).
    fn make_slot(&self, d: usize) -> Result<(DevicePtr, crate::runtime::KeepAlive, RngReplay)> {
        let ptr = crate::runtime::rng_slot(d)?;
        let keep: crate::runtime::KeepAlive = Arc::new(());
        let gen = self.clone();
        let held: Mutex<Option<u64>> = Mutex::new(None);
        let replay: RngReplay = Arc::new(move |stream: &Stream, blocks: u64| {
            let st = gen.advance(blocks);
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            let first = if *held == Some(st.seed) { 1 } else { 0 };
            for (k, value) in [(0, st.seed), (1, st.offset)].into_iter().skip(first) {
                let dst = BufferView {
                    ptr,
                    dtype: DType::I64,
                    shape: Dims::from(&[1][..]),
                    strides: Dims::from(&[1][..]),
                    offset: k,
                };
                stream.launch(&KernelOp::Fill { dst, value: Scalar::Int(value as i64) }, &[] as &[&Tensor])?;
            }
            *held = Some(st.seed);
            Ok(())
        });
        Ok((ptr, keep, replay))
    }
}

fn parse_state(op: &'static str, b: &[u8]) -> Result<State> {
    if b.len() != RNG_STATE_BYTES || &b[..8] != MAGIC {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "RNG state is wrong size or kind: expected the {RNG_STATE_BYTES} bytes of a get_rng_state / \
                 get_state, got {} bytes",
                b.len()
            ),
        });
    }
    let word = |k: usize| u64::from_le_bytes(b[k..k + 8].try_into().unwrap_or([0; 8]));
    Ok(State { seed: word(8), offset: word(16) })
}

/// The default generator of `place` (the host's, or a CUDA device's).
pub(crate) fn default_generator(place: Place) -> Generator {
    match place {
        Place::Cpu => HOST.get_or_init(|| Generator::on(Place::Cpu, DEFAULT_SEED)).clone(),
        Place::Cuda(d) => {
            let mut all = cuda_defaults();
            while all.len() <= d {
                let i = all.len();
                all.push(Generator::on(Place::Cuda(i), DEFAULT_CUDA_SEED.load(Ordering::Relaxed)));
            }
            all[d].clone()
        }
    }
}

fn cuda_default(device: impl IntoCudaDevice) -> Result<Generator> {
    Ok(default_generator(Place::Cuda(resolve_device(device.cuda_device()?)?)))
}

/// Seeds every generator's default stream: the host's and every CUDA device's
/// (`torch.manual_seed`).
pub fn manual_seed(seed: u64) {
    default_generator(Place::Cpu).manual_seed(seed);
    cuda::manual_seed_all(seed);
}

/// The host generator's seed (`torch.initial_seed()`).
pub fn initial_seed() -> u64 {
    default_generator(Place::Cpu).initial_seed()
}

/// `torch.cuda`'s seeding and RNG-state functions over the default CUDA generators.
pub mod cuda {
    use super::*;

    /// Seeds the current device's default generator (`torch.cuda.manual_seed`).
    pub fn manual_seed(seed: u64) -> Result<()> {
        cuda_default(None)?.manual_seed(seed);
        Ok(())
    }

    /// Seeds every device's default generator (`torch.cuda.manual_seed_all`), those not yet
    /// used included.
    pub fn manual_seed_all(seed: u64) {
        let all = cuda_defaults();
        DEFAULT_CUDA_SEED.store(seed, Ordering::Relaxed);
        for g in all.iter() {
            g.manual_seed(seed);
        }
    }

    /// Seeds the current device's default generator from the operating system's randomness
    /// (`torch.cuda.seed`) and returns the seed.
    pub fn seed() -> Result<u64> {
        Ok(cuda_default(None)?.seed())
    }

    /// Seeds every device's default generator with one seed from the operating system's
    /// randomness (`torch.cuda.seed_all`) and returns it.
    pub fn seed_all() -> u64 {
        let s = nondeterministic_seed();
        manual_seed_all(s);
        s
    }

    /// The current device's default generator's seed (`torch.cuda.initial_seed`).
    pub fn initial_seed() -> Result<u64> {
        Ok(cuda_default(None)?.initial_seed())
    }

    /// The default generator of `device` (`torch.cuda.default_generators[d]`).
    pub fn default_generator(device: impl IntoCudaDevice) -> Result<Generator> {
        cuda_default(device)
    }

    /// The RNG state of `device`'s default generator (`torch.cuda.get_rng_state`): opaque bytes.
    pub fn get_rng_state(device: impl IntoCudaDevice) -> Result<Vec<u8>> {
        Ok(cuda_default(device)?.get_state())
    }

    /// Restores `device`'s default generator from [`get_rng_state`]'s bytes
    /// (`torch.cuda.set_rng_state`); [`Error::InvalidArgument`] for bytes that are not a state.
    pub fn set_rng_state(state: &[u8], device: impl IntoCudaDevice) -> Result<()> {
        let s = parse_state("set_rng_state", state)?;
        let g = cuda_default(device)?;
        *g.state() = s;
        g.inner.initial.store(s.seed, Ordering::Relaxed);
        Ok(())
    }

    /// Every device's RNG state, in device order (`torch.cuda.get_rng_state_all`).
    pub fn get_rng_state_all() -> Result<Vec<Vec<u8>>> {
        (0..device_count()).map(get_rng_state).collect()
    }

    /// Restores device `i` from `states[i]` (`torch.cuda.set_rng_state_all`); every state is
    /// checked before any is set.
    pub fn set_rng_state_all(states: &[Vec<u8>]) -> Result<()> {
        if states.len() > device_count() {
            return Err(Error::InvalidArgument {
                op: "set_rng_state_all",
                reason: format!("{} states for {} devices", states.len(), device_count()),
            });
        }
        for s in states {
            parse_state("set_rng_state_all", s)?;
        }
        for (d, s) in states.iter().enumerate() {
            set_rng_state(s, d)?;
        }
        Ok(())
    }
}
