//! The CUDA driver's settings: where compiled kernels are cached, which NCCL library to load, and
//! the launch shapes (for benchmark runs). The CUDA driver takes them as an argument at
//! construction (`CudaDriver::new(&CudaSettings)`); nothing in the driver reads them from a global.

use super::env::Lookup;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The variable naming the kernel cache's directory (`off` disables the cache).
pub(crate) const KERNEL_CACHE_ENV: &str = "CUDASEM_KERNEL_CACHE";
/// The variable naming the NCCL library (or its directory).
pub(crate) const NCCL_LIB_ENV: &str = "CUDASEM_NCCL_LIB";
/// The variable giving the launch tuning, `EW_WAVES,VECTORS,REDUCE_WAVES[,STRIDED_LANES]` (for benchmark runs).
pub(crate) const LAUNCH_TUNING_ENV: &str = "CUDASEM_BENCH_TUNING";
/// The variable choosing the attention kernel, `auto`, `fma`, `mma`, … and optionally the order of
/// its query tiles after a colon, `wg64:head` (for benchmark and test runs).
pub(crate) const SDPA_KERNEL_ENV: &str = "CUDASEM_SDPA_KERNEL";

/// The CUDA driver's settings (unused by the simulated machine). `Config::cuda`.
///
/// Deserializes with every field optional: `{"kernel_cache": "off", "nccl_lib":
/// "/opt/nccl/lib", "launch_tuning": "256,0,1"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CudaSettings {
    /// Where compiled kernels are kept between processes. `CUDASEM_KERNEL_CACHE` in the
    /// environment (a directory; `off`, `0`, `none` or empty disable it).
    pub kernel_cache: KernelCache,
    /// The NCCL library to load first: its path, or a directory holding `libnccl.so.2` (`None`:
    /// only the search of the loader and of Python's wheels). `CUDASEM_NCCL_LIB` in the
    /// environment.
    pub nccl_lib: Option<PathBuf>,
    /// The launch shapes of the tensor kernels (benchmark tuning, not an API).
    /// `CUDASEM_BENCH_TUNING` in the environment, and `CUDASEM_SDPA_KERNEL` its attention kernel.
    #[doc(hidden)]
    pub launch_tuning: LaunchTuning,
}

impl CudaSettings {
    /// `CUDASEM_KERNEL_CACHE`, `CUDASEM_NCCL_LIB`, `CUDASEM_BENCH_TUNING` and
    /// `CUDASEM_SDPA_KERNEL` (unset ones take their defaults).
    pub(crate) fn from_lookup(lookup: Lookup) -> Result<CudaSettings> {
        let kernel_cache = match lookup(KERNEL_CACHE_ENV)? {
            Some(v) => KernelCache::parse(&v),
            None => KernelCache::UserCache,
        };
        let nccl_lib = lookup(NCCL_LIB_ENV)?.filter(|v| !v.trim().is_empty()).map(PathBuf::from);
        let mut launch_tuning = match lookup(LAUNCH_TUNING_ENV)? {
            Some(v) if !v.trim().is_empty() => LaunchTuning::parse(&v)?,
            _ => LaunchTuning::default(),
        };
        if let Some(v) = lookup(SDPA_KERNEL_ENV)? {
            (launch_tuning.attention, launch_tuning.attention_order) = parse_sdpa_kernel(&v)?;
        }
        Ok(CudaSettings { kernel_cache, nccl_lib, launch_tuning })
    }
}

/// Where the CUDA driver keeps compiled kernels between processes.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(from = "String")]
pub enum KernelCache {
    /// The user's cache directory: `$XDG_CACHE_HOME/cudasem/kernels`, else
    /// `~/.cache/cudasem/kernels` (none when neither variable is set). The default.
    #[default]
    UserCache,
    /// This directory.
    Dir(PathBuf),
    /// No cache on disk (kernels are still kept for the process).
    Off,
}

impl From<String> for KernelCache {
    fn from(value: String) -> KernelCache {
        KernelCache::parse(&value)
    }
}

impl KernelCache {
    /// Parses `CUDASEM_KERNEL_CACHE`'s value: `off`, `0`, `none` or empty disable the cache, any
    /// other value is the directory.
    pub fn parse(value: &str) -> KernelCache {
        match value.trim() {
            "" | "off" | "0" | "none" => KernelCache::Off,
            dir => KernelCache::Dir(PathBuf::from(dir)),
        }
    }

    /// The directory, or `None` when the cache is off. [`KernelCache::UserCache`] is looked up
    /// in `lookup` (`XDG_CACHE_HOME`, then `HOME`).
    pub(crate) fn dir_with(&self, lookup: Lookup) -> Result<Option<PathBuf>> {
        Ok(match self {
            KernelCache::Off => None,
            KernelCache::Dir(d) => Some(d.clone()),
            KernelCache::UserCache => {
                let base = match lookup("XDG_CACHE_HOME")?.filter(|v| !v.is_empty()) {
                    Some(xdg) => Some(PathBuf::from(xdg)),
                    None => lookup("HOME")?.map(|h| Path::new(&h).join(".cache")),
                };
                base.map(|b| b.join("cudasem").join("kernels"))
            }
        })
    }

    /// The directory in this process's environment, or `None` when the cache is off (a
    /// variable that is not UTF-8 counts as unset).
    pub fn dir(&self) -> Option<PathBuf> {
        self.dir_with(&|k| Ok(super::env::env_var(k).ok().flatten())).ok().flatten()
    }
}

/// The CUDA driver's launch shapes, for benchmark runs (not an API): the most waves of blocks an
/// elementwise grid holds (0: no cap), the vectors per thread of a fast elementwise pass (0: each
/// op's own), the waves of blocks a row split over blocks uses (at least 1), and optionally the
/// strided elementwise kernel's lanes (a sum of 1: a vector per thread where the innermost dim
/// is dense and aligned, 2: multiply-shift index division, and 4: batched transposes through
/// the tiled transpose kernel; 0 runs that kernel as before them, an element and a hardware
/// division per dim per thread, batched transposes included). The defaults are `256,0,1,7`,
/// with the attention kernel chosen per case and the card profile's choices (`driver::card`)
/// unless [`CardOverrides`] names them.
///
/// The string form, `CUDASEM_BENCH_TUNING`, is comma-separated items: the integers
/// `EW_WAVES,VECTORS,REDUCE_WAVES[,STRIDED_LANES]` (three or four, or none, first), then any of
/// the card profile's choices as `key=value` (`heavy_vectors=2,sum_blocks=4,sum_loads=8`;
/// [`CardOverrides::parse_item`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct LaunchTuning {
    /// Waves of blocks an elementwise grid holds at most (0: no cap).
    pub elementwise_waves: u32,
    /// 16-byte vectors per thread of a fast elementwise pass (0: each op's own).
    pub vectors_per_thread: u32,
    /// Waves of blocks a reduction split over blocks uses (0 counts as 1).
    pub reduce_waves: u32,
    /// Which kernel scaled dot-product attention runs (`CUDASEM_SDPA_KERNEL`).
    pub attention: AttentionKernel,
    /// The order in which its tensor-core kernels take their query tiles (`CUDASEM_SDPA_KERNEL`'s
    /// suffix, `:heavy`, `:head`, `:natural` or `:swizzle`).
    pub attention_order: AttentionOrder,
    /// The strided elementwise kernel's lanes allowed: a sum of 1 (vectors), 2 (multiply-shift
    /// division) and 4 (batched transposes tiled); the default 7 allows all, 0 none (the kernel
    /// before them, for comparing).
    pub strided_lanes: u32,
    /// The card profile's choices set by hand (`None`: the card's own).
    pub card: CardOverrides,
}

/// The card profile's launch choices (`driver::card::CardProfile`, computed from the device's
/// properties) set by hand for a tuning run; `None` keeps the card's choice. Named in
/// `CUDASEM_BENCH_TUNING` as `key=value` items.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CardOverrides {
    /// `heavy_vectors=N` (1 to 16): 16-byte vectors per thread of the fast elementwise kernel of
    /// bf16 `sin` and `cos`, the functions compute-bound even on a card of less bandwidth (the
    /// other heavy ones take `mid_vectors`).
    pub heavy_vectors: Option<u32>,
    /// `sum_blocks=N` (0 to 64): blocks per SM of a reduction into one output split over blocks
    /// (0: as many as fit at once, the occupancy's wave).
    pub sum_blocks: Option<u32>,
    /// `sum_loads=N` (4 or 8): the 16-byte loads of that reduction's loop (4: the narrow kernel,
    /// one load in flight a thread as ptxas schedules it; 8: the sum and mean kernels' wide
    /// variant, the next four in flight while the four before them are added).
    pub sum_loads: Option<u32>,
    /// `swizzle_heads=N` (1 to [`MAX_SWIZZLE_HEADS`]): the (batch, head)s of a section of the
    /// attention kernels' swizzled query-tile order ([`AttentionOrder::Swizzle`]), in place of as
    /// many as fill half the device's L2 with their keys and values (and span two waves of blocks).
    pub swizzle_heads: Option<u32>,
    /// `ew_threads=N` (64, 128, 256): the threads of a block of the fast elementwise kernel over
    /// a large tensor (its grid then holds 256 / N times as many blocks).
    pub ew_threads: Option<u32>,
    /// `norm_blocks=N` (0 to 64): blocks per SM of the layer / RMS norm's grid, each taking rows
    /// in turn (0: a block a row, the hardware scheduling them).
    pub norm_blocks: Option<u32>,
    /// `norm_threads=N` (64, 128, 256): the threads of a block of the norm kernels (a row's; the
    /// row's vectors or values a thread follow).
    pub norm_threads: Option<u32>,
    /// `heavy_unroll=N` (0 or 1): whether the fast elementwise kernel of the functions of
    /// `heavy_vectors` and `mid_vectors` takes two of its vectors at a time (1) or one (0: fewer
    /// registers a thread, so more blocks an SM).
    pub heavy_unroll: Option<u32>,
    /// `mid_vectors=N` (1 to 16): 16-byte vectors per thread of the fast elementwise kernel of
    /// the functions of `heavy_vectors` that stay memory-bound on a card of less bandwidth (all
    /// but bf16 `sin` and `cos`: half-type `sin` / `cos` of f16, f16 `tanh`, f32 `pow`).
    pub mid_vectors: Option<u32>,
    /// `early_waves=N` (0 to 64): a grid of the fast elementwise kernel or of a softmax kernel
    /// over rows of at least N waves of blocks (a wave: as many as the device holds at once) is
    /// launched with programmatic stream serialization, captured or not, on compute capability
    /// 9.0 or later (its blocks are scheduled while the kernel before it drains, and wait for it
    /// in their first statement);
    /// 0: only as every other kernel (small grids being captured). The card's own: 2.
    pub early_waves: Option<u32>,
    /// `gemv_rows=N` (0 to 7): the row-vector product kernel of a row-major weight (`gv_rows`),
    /// three bits: 1, an f32 weight takes it too (0: cuBLASLt); 2, it is launched with programmatic
    /// stream serialization on compute capability 9.0 or later (its blocks are scheduled while
    /// the kernel before it drains, and wait for it first); 4, its variant with eight rows a
    /// lane in flight and four blocks an SM (`gv_rows8`). The card's own: 0.
    pub gemv_rows: Option<u32>,
    /// `norm_early=N` (0 or 1): 1, the layer / RMS norm kernels are launched with programmatic
    /// stream serialization on compute capability 9.0 or later, whatever their grid (their blocks
    /// are scheduled while the kernel before it drains, and wait for it first); 0, plainly. The
    /// card's own: 1.
    pub norm_early: Option<u32>,
}

#[doc(hidden)]
/// The most (batch, head)s a swizzle section may hold ([`CardOverrides::swizzle_heads`]): the
/// section travels to the kernels in the bits of an `int` above its low 8.
pub const MAX_SWIZZLE_HEADS: u32 = (i32::MAX >> 8) as u32;

impl CardOverrides {
    /// The keys of [`CardOverrides::parse_item`], with their ranges.
    pub const KEYS: &'static str =
        "heavy_vectors (1-16), sum_blocks (0-64), sum_loads (4 or 8), swizzle_heads (1-8388607), ew_threads (64, 128 or 256), \
         norm_blocks (0-64), norm_threads (64, 128 or 256), heavy_unroll (0 or 1), mid_vectors (1-16), \
         early_waves (0-64), gemv_rows (0-7), norm_early (0 or 1)";

    /// Takes one `key=value` item of `CUDASEM_BENCH_TUNING` (`value` the whole variable, for
    /// the error).
    pub fn parse_item(&mut self, item: &str, value: &str) -> Result<()> {
        let bad = |reason: String| Error::InvalidConfig {
            key: LAUNCH_TUNING_ENV.into(),
            value: crate::error::quote_prefix(value, 80),
            reason,
        };
        let (key, v) = item.split_once('=').ok_or_else(|| bad(format!("`{item}` is not `key=value`")))?;
        let (key, v) = (key.trim(), v.trim());
        let n = v.parse::<u32>().map_err(|_| bad(format!("`{key}={v}`: the value is not a whole number")))?;
        let (slot, ok) = match key {
            "heavy_vectors" => (&mut self.heavy_vectors, (1..=16).contains(&n)),
            "sum_blocks" => (&mut self.sum_blocks, n <= 64),
            "sum_loads" => (&mut self.sum_loads, n == 4 || n == 8),
            "swizzle_heads" => (&mut self.swizzle_heads, (1..=MAX_SWIZZLE_HEADS).contains(&n)),
            "ew_threads" => (&mut self.ew_threads, matches!(n, 64 | 128 | 256)),
            "norm_blocks" => (&mut self.norm_blocks, n <= 64),
            "norm_threads" => (&mut self.norm_threads, matches!(n, 64 | 128 | 256)),
            "heavy_unroll" => (&mut self.heavy_unroll, n <= 1),
            "mid_vectors" => (&mut self.mid_vectors, (1..=16).contains(&n)),
            "early_waves" => (&mut self.early_waves, n <= 64),
            "gemv_rows" => (&mut self.gemv_rows, n <= 7),
            "norm_early" => (&mut self.norm_early, n <= 1),
            _ => return Err(bad(format!("unknown key `{key}`; expected {}", Self::KEYS))),
        };
        if !ok {
            return Err(bad(format!("`{key}={n}` is out of range; expected {}", Self::KEYS)));
        }
        *slot = Some(n);
        Ok(())
    }
}

impl Default for LaunchTuning {
    fn default() -> LaunchTuning {
        LaunchTuning {
            elementwise_waves: 256,
            vectors_per_thread: 0,
            reduce_waves: 1,
            attention: AttentionKernel::Auto,
            attention_order: AttentionOrder::Heavy,
            strided_lanes: 7,
            card: CardOverrides::default(),
        }
    }
}

/// Which kernel the CUDA driver's scaled dot-product attention runs, for benchmark and test runs
/// (not an API). `CUDASEM_SDPA_KERNEL` in the environment: `auto` (the default), `fma`, `mma`,
/// `mma1`, `wg64`, `wg128`, `pp64`, `pp128`, `fa128`, `fa128g`, `fa128n`, `tma`, `tmasync`, `tmaws` or
/// `tmaov`, optionally followed by `:` and an [`AttentionOrder`] (`pp128:natural`; the `fa128*` kernels
/// keep their own order).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionKernel {
    /// The tensor-core kernel where it applies and pays (f16 / bf16, head dims 64 or 128, 16 or
    /// more queries, compute capability 8.0 or later; on 9.0 Hopper's wgmma kernel from 64
    /// queries, the tiles of `wg64` for head dim 64 and `pp128` for 128 copied by TMA: as `tma`
    /// for head dim 64, as `tmaov` for 128), else the FMA kernel.
    #[default]
    Auto,
    /// Always the FMA flash kernel (with its key splits for decoding).
    Fma,
    /// The tensor-core kernel wherever it applies (any number of queries; Hopper's, as `tma`, from
    /// 64 queries on compute capability 9.0), else the FMA kernel.
    Mma,
    /// The `mma.sync` tensor-core kernel (compute capability 8.0's) wherever it applies, else
    /// the FMA kernel.
    Mma1,
    /// Hopper's wgmma kernel with tiles of 64 keys wherever it applies (compute capability 9.0),
    /// else as [`AttentionKernel::Mma1`].
    Wg64,
    /// Hopper's wgmma kernel with tiles of 128 keys, as [`AttentionKernel::Wg64`].
    Wg128,
    /// [`AttentionKernel::Wg64`] with the block's two warpgroups taking turns on the tensor
    /// cores (ping-pong: one's products overlap the other's softmax).
    Pp64,
    /// [`AttentionKernel::Wg128`] with the warpgroups taking turns.
    Pp128,
    /// Hopper's wgmma kernel on FlashAttention 3's schedule wherever it applies (compute
    /// capability 9.0; else as [`AttentionKernel::Mma1`]): persistent blocks taking the heaviest
    /// query tiles first, three stages of keys and values, each warpgroup's softmax beside its
    /// previous tile's values product; tiles of 64 keys for head dim 64, of 128 with the
    /// warpgroups taking turns for 128.
    Fa128,
    /// [`AttentionKernel::Fa128`] with a block per query tile instead of persistent blocks.
    Fa128g,
    /// [`AttentionKernel::Fa128`] without the warpgroups' turns.
    Fa128n,
    /// Hopper's wgmma kernel (tiles and turns as under `Auto`) with its keys and values copied by
    /// the Tensor Memory Accelerator into mbarrier-phased stages, the warpgroups never meeting at
    /// a block barrier, wherever it applies and the operands' strides are multiples of 16 bytes
    /// (else as [`AttentionKernel::Mma`]); where the driver encodes no tensor map for operands the
    /// kernel applies to, the launch fails (`Auto` and `Mma` take the copying kernel instead), so
    /// a run under this choice shows that the TMA kernel ran.
    Tma,
    /// [`AttentionKernel::Tma`] with a block barrier a tile freeing its stage.
    TmaSync,
    /// [`AttentionKernel::Tma`]'s tiles on persistent blocks (SMs × blocks an SM) whose copies a
    /// producer warp beside the warpgroups issues, the next task's queries and tiles landing while
    /// they finish a task.
    TmaWs,
    /// [`AttentionKernel::TmaWs`] with FlashAttention 3's intra-warpgroup overlap: a warpgroup
    /// issues a tile's scores and the previous tile's values product together and runs the
    /// tile's softmax while the values' product runs.
    TmaOv,
}

impl AttentionKernel {
    /// Every kernel with its name in `CUDASEM_SDPA_KERNEL`, in the order of their discriminants.
    const NAMED: [(&'static str, AttentionKernel); 15] = [
        ("auto", AttentionKernel::Auto),
        ("fma", AttentionKernel::Fma),
        ("mma", AttentionKernel::Mma),
        ("mma1", AttentionKernel::Mma1),
        ("wg64", AttentionKernel::Wg64),
        ("wg128", AttentionKernel::Wg128),
        ("pp64", AttentionKernel::Pp64),
        ("pp128", AttentionKernel::Pp128),
        ("fa128", AttentionKernel::Fa128),
        ("fa128g", AttentionKernel::Fa128g),
        ("fa128n", AttentionKernel::Fa128n),
        ("tma", AttentionKernel::Tma),
        ("tmasync", AttentionKernel::TmaSync),
        ("tmaws", AttentionKernel::TmaWs),
        ("tmaov", AttentionKernel::TmaOv),
    ];

    /// Every kernel, in the order of their discriminants.
    pub const ALL: [AttentionKernel; 15] = {
        let mut all = [AttentionKernel::Auto; 15];
        let mut i = 0;
        while i < all.len() {
            all[i] = Self::NAMED[i].1;
            i += 1;
        }
        all
    };

    /// Parses `auto`, `fma`, `mma`, `mma1`, `wg64`, `wg128`, `pp64`, `pp128`, `fa128`, `fa128g`,
    /// `fa128n`, `tma`, `tmasync`, `tmaws` or `tmaov` (empty: `auto`).
    pub fn parse(value: &str) -> Result<AttentionKernel> {
        let name = match value.trim() {
            "" => "auto",
            name => name,
        };
        Self::NAMED.iter().find(|(n, _)| *n == name).map(|&(_, k)| k).ok_or_else(|| {
            let names: Vec<String> = Self::NAMED.iter().map(|(n, _)| format!("`{n}`")).collect();
            Error::InvalidConfig {
                key: SDPA_KERNEL_ENV.into(),
                value: crate::error::quote_prefix(value, 80),
                reason: format!("expected one of {}", names.join(", ")),
            }
        })
    }
}

/// The order in which the CUDA driver's tensor-core attention kernels (`mma.sync` and Hopper's)
/// take their query tiles, a block each, for benchmark runs (not an API): the suffix of
/// `CUDASEM_SDPA_KERNEL` (`auto:head`). A causal query tile sees the keys up to its last query, so
/// the last tiles of each (batch, head) do the most work; blocks launched last decide the tail.
/// Non-causal launches, whose tiles all do the same work, keep each (batch, head)'s tiles
/// together whatever the choice ([`AttentionOrder::Head`]: they share its keys and values in L2).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionOrder {
    /// The heaviest tiles first across the grid: every (batch, head)'s last query tile, then the
    /// tiles before them, so the grid ends on its lightest blocks (FlashAttention 3's longest-
    /// processing-time-first order, without its L2 swizzle). The default; `heavy`.
    #[default]
    Heavy,
    /// Each (batch, head)'s tiles together, its last (heaviest) first (FlashAttention 2's
    /// reversed query-block index); `head`.
    Head,
    /// Each (batch, head)'s tiles together, in order (the launch order of the block index);
    /// `natural`.
    Natural,
    /// FlashAttention 3's head swizzle: the (batch, head)s in sections whose keys and values
    /// fit in half the device's L2 cache, section after section (the shortest first, so the grid
    /// ends on a whole section), the heaviest tiles first inside each (every head's last tile of
    /// the section, then the tiles before them); `swizzle`.
    Swizzle,
}

impl AttentionOrder {
    /// Every order, in the order of their discriminants.
    pub const ALL: [AttentionOrder; 4] =
        [AttentionOrder::Heavy, AttentionOrder::Head, AttentionOrder::Natural, AttentionOrder::Swizzle];

    /// Parses `heavy`, `head`, `natural` or `swizzle` (empty: `heavy`).
    pub fn parse(value: &str) -> Result<AttentionOrder> {
        match value.trim() {
            "" | "heavy" => Ok(AttentionOrder::Heavy),
            "head" => Ok(AttentionOrder::Head),
            "natural" => Ok(AttentionOrder::Natural),
            "swizzle" => Ok(AttentionOrder::Swizzle),
            _ => Err(Error::InvalidConfig {
                key: SDPA_KERNEL_ENV.into(),
                value: crate::error::quote_prefix(value, 80),
                reason: "expected the query-tile order `heavy`, `head`, `natural` or `swizzle` after the colon".into(),
            }),
        }
    }
}

/// Parses `CUDASEM_SDPA_KERNEL`'s `KERNEL[:ORDER]`.
fn parse_sdpa_kernel(value: &str) -> Result<(AttentionKernel, AttentionOrder)> {
    match value.split_once(':') {
        Some((kernel, order)) => Ok((AttentionKernel::parse(kernel)?, AttentionOrder::parse(order)?)),
        None => Ok((AttentionKernel::parse(value)?, AttentionOrder::Heavy)),
    }
}

impl TryFrom<String> for LaunchTuning {
    type Error = Error;
    fn try_from(value: String) -> Result<LaunchTuning> {
        LaunchTuning::parse(&value)
    }
}

impl LaunchTuning {
    /// Parses `EW_WAVES,VECTORS,REDUCE_WAVES[,STRIDED_LANES]` (three or four integers, or none:
    /// the defaults; the lanes default to 7), then any `key=value` items of [`CardOverrides`].
    pub fn parse(value: &str) -> Result<LaunchTuning> {
        let bad = || Error::InvalidConfig {
            key: LAUNCH_TUNING_ENV.into(),
            value: crate::error::quote_prefix(value, 80),
            reason: format!(
                "expected three or four integers, EW_WAVES,VECTORS,REDUCE_WAVES[,STRIDED_LANES] (e.g. `256,0,1` or \
                 `256,0,1,0`), then any of {} as `key=value`",
                CardOverrides::KEYS
            ),
        };
        let items: Vec<&str> = value.split(',').map(str::trim).collect();
        let named = items.iter().position(|i| i.contains('=')).unwrap_or(items.len());
        let mut t = LaunchTuning::default();
        let n = |x: &str| x.parse::<u32>().map_err(|_| bad());
        match &items[..named] {
            [] => {}
            [w, v, r, lanes @ ..] if lanes.len() <= 1 => {
                (t.elementwise_waves, t.vectors_per_thread, t.reduce_waves) = (n(w)?, n(v)?, n(r)?);
                if let [l] = lanes {
                    t.strided_lanes = n(l)?;
                    if t.strided_lanes > 7 {
                        return Err(bad());
                    }
                }
            }
            _ => return Err(bad()),
        }
        for item in &items[named..] {
            t.card.parse_item(item, value)?;
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(env: &[(&str, &str)]) -> Result<CudaSettings> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        CudaSettings::from_lookup(&|k| Ok(env.get(k).cloned()))
    }

    #[test]
    fn the_variables_parse_and_unset_ones_take_the_defaults() {
        assert_eq!(with(&[]).unwrap(), CudaSettings::default());
        for off in ["", "off", " 0 ", "none"] {
            assert_eq!(with(&[(KERNEL_CACHE_ENV, off)]).unwrap().kernel_cache, KernelCache::Off, "{off:?}");
        }
        let s =
            with(&[(KERNEL_CACHE_ENV, "/tmp/k"), (NCCL_LIB_ENV, "/opt/nccl"), (LAUNCH_TUNING_ENV, "8, 2,3")]).unwrap();
        assert_eq!(s.kernel_cache, KernelCache::Dir("/tmp/k".into()));
        assert_eq!(s.nccl_lib, Some(PathBuf::from("/opt/nccl")));
        let want = LaunchTuning { elementwise_waves: 8, vectors_per_thread: 2, reduce_waves: 3, ..Default::default() };
        assert_eq!(s.launch_tuning, want);
        let four = with(&[(LAUNCH_TUNING_ENV, "8,2,3, 0")]).unwrap().launch_tuning;
        assert_eq!(four, LaunchTuning { strided_lanes: 0, ..want });
        assert_eq!(want.strided_lanes, 7, "three fields leave the strided lanes on");
        for bad in ["1,2", "a,b,c", "1,2,3,4,5", "1,2,3,8", "-1,0,1"] {
            let e = with(&[(LAUNCH_TUNING_ENV, bad)]).unwrap_err();
            assert!(matches!(&e, Error::InvalidConfig { key, .. } if key == LAUNCH_TUNING_ENV), "{bad}: {e}");
        }
        let kinds = [
            ("", AttentionKernel::Auto),
            (" auto", AttentionKernel::Auto),
            ("fma", AttentionKernel::Fma),
            ("mma1", AttentionKernel::Mma1),
            ("wg64", AttentionKernel::Wg64),
            (" wg128", AttentionKernel::Wg128),
            ("pp64", AttentionKernel::Pp64),
            ("pp128 ", AttentionKernel::Pp128),
            ("fa128", AttentionKernel::Fa128),
            ("fa128g", AttentionKernel::Fa128g),
            (" fa128n", AttentionKernel::Fa128n),
            ("tma", AttentionKernel::Tma),
            ("tmasync ", AttentionKernel::TmaSync),
            ("tmaws", AttentionKernel::TmaWs),
            (" tmaov", AttentionKernel::TmaOv),
        ];
        for (v, k) in kinds {
            assert_eq!(with(&[(SDPA_KERNEL_ENV, v)]).unwrap().launch_tuning.attention, k, "{v:?}");
        }
        let s = with(&[(LAUNCH_TUNING_ENV, "8,2,3"), (SDPA_KERNEL_ENV, "mma ")]).unwrap();
        assert_eq!(s.launch_tuning, LaunchTuning { attention: AttentionKernel::Mma, ..want });
        let orders = [
            ("wg64", AttentionKernel::Wg64, AttentionOrder::Heavy),
            ("pp128:natural", AttentionKernel::Pp128, AttentionOrder::Natural),
            (" auto : head ", AttentionKernel::Auto, AttentionOrder::Head),
            ("mma1:heavy", AttentionKernel::Mma1, AttentionOrder::Heavy),
            (":natural", AttentionKernel::Auto, AttentionOrder::Natural),
            ("mma:", AttentionKernel::Mma, AttentionOrder::Heavy),
            ("auto:swizzle", AttentionKernel::Auto, AttentionOrder::Swizzle),
            (" pp128 : swizzle", AttentionKernel::Pp128, AttentionOrder::Swizzle),
        ];
        for (v, k, o) in orders {
            let t = with(&[(SDPA_KERNEL_ENV, v)]).unwrap().launch_tuning;
            assert_eq!((t.attention, t.attention_order), (k, o), "{v:?}");
        }
        assert_eq!(LaunchTuning::default().attention_order, AttentionOrder::Heavy);
        for bad in [
            "MMA",
            "wmma",
            "1",
            "wg",
            "wg256",
            "mma2",
            "wg64:last",
            "wg64:head:x",
            "wg65:head",
            "head",
            "auto:swizzled",
            "swizzle",
        ] {
            let e = with(&[(SDPA_KERNEL_ENV, bad)]).unwrap_err();
            assert!(matches!(&e, Error::InvalidConfig { key, .. } if key == SDPA_KERNEL_ENV), "{bad}: {e}");
        }
    }

    /// The card profile's choices parse as `key=value` items after the three integers (or
    /// alone); a bad key, value, range or form is a typed error naming the variable.
    #[test]
    fn card_overrides_parse_with_typed_errors() {
        let t = |v: &str| with(&[(LAUNCH_TUNING_ENV, v)]).map(|s| s.launch_tuning);
        let card = |h, b, l| CardOverrides { heavy_vectors: h, sum_blocks: b, sum_loads: l, ..Default::default() };
        assert_eq!(
            t("heavy_vectors=2").unwrap(),
            LaunchTuning { card: card(Some(2), None, None), ..Default::default() }
        );
        let all = t("8,1,2, sum_loads=8 ,sum_blocks=0,heavy_vectors=16").unwrap();
        let want = LaunchTuning {
            elementwise_waves: 8,
            vectors_per_thread: 1,
            reduce_waves: 2,
            card: card(Some(16), Some(0), Some(8)),
            ..Default::default()
        };
        assert_eq!(all, want);
        assert_eq!(t("sum_blocks=64,sum_blocks=3").unwrap().card, card(None, Some(3), None), "the last one counts");
        let swizzle = |n| CardOverrides { swizzle_heads: Some(n), ..Default::default() };
        assert_eq!(t("swizzle_heads=5").unwrap().card, swizzle(5));
        assert_eq!(t("swizzle_heads=8388607").unwrap().card, swizzle(MAX_SWIZZLE_HEADS));
        for n in [64, 128, 256] {
            let want = CardOverrides { ew_threads: Some(n), ..Default::default() };
            assert_eq!(t(&format!("ew_threads={n}")).unwrap().card, want);
        }
        for n in [0, 8, 64] {
            let want = CardOverrides { norm_blocks: Some(n), ..Default::default() };
            assert_eq!(t(&format!("norm_blocks={n}")).unwrap().card, want);
        }
        let want = CardOverrides { norm_blocks: Some(0), norm_threads: Some(128), ..Default::default() };
        assert_eq!(t("norm_blocks=0,norm_threads=128").unwrap().card, want);
        for n in [0, 1] {
            let want = CardOverrides { heavy_unroll: Some(n), ..Default::default() };
            assert_eq!(t(&format!("heavy_unroll={n}")).unwrap().card, want);
        }
        for n in [1, 16] {
            let want = CardOverrides { mid_vectors: Some(n), ..Default::default() };
            assert_eq!(t(&format!("mid_vectors={n}")).unwrap().card, want);
        }
        for n in [0, 2, 64] {
            let want = CardOverrides { early_waves: Some(n), ..Default::default() };
            assert_eq!(t(&format!("early_waves={n}")).unwrap().card, want);
        }
        for n in [0, 3, 7] {
            let want = CardOverrides { gemv_rows: Some(n), ..Default::default() };
            assert_eq!(t(&format!("gemv_rows={n}")).unwrap().card, want);
        }
        for n in [0, 1] {
            let want = CardOverrides { norm_early: Some(n), ..Default::default() };
            assert_eq!(t(&format!("norm_early={n}")).unwrap().card, want);
        }
        for bad in [
            "gemv_rows=8",
            "norm_early=2",
            "early_waves=65",
            "mid_vectors=0",
            "mid_vectors=17",
            "heavy_unroll=2",
            "norm_blocks=65",
            "norm_threads=32",
            "norm_threads=512",
            "ew_threads=32",
            "ew_threads=192",
            "ew_threads=512",
            "heavy_vectors=0",
            "heavy_vectors=17",
            "sum_blocks=65",
            "sum_loads=2",
            "sum_loads=x",
            "sum_loads=-4",
            "swizzle_heads=0",
            "swizzle_heads=8388608",
            "loads=8",
            "heavy_vectors",
            "sum_loads=8,1,2,3",
            "1,2,sum_loads=8",
            "sum_blocks=4,",
        ] {
            let e = t(bad).unwrap_err();
            assert!(matches!(&e, Error::InvalidConfig { key, .. } if key == LAUNCH_TUNING_ENV), "{bad}: {e}");
        }
        let e = t("sum_loads=6").unwrap_err().to_string();
        assert!(e.contains("sum_loads=6") && e.contains("4 or 8"), "{e}");
        let e = t("sum_load=8").unwrap_err().to_string();
        assert!(e.contains("unknown key `sum_load`") && e.contains("heavy_vectors"), "{e}");
    }

    #[test]
    fn the_user_cache_follows_xdg_then_home() {
        let dir = |env: &'static [(&'static str, &'static str)]| {
            KernelCache::UserCache.dir_with(&|k| Ok(env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())))
        };
        assert_eq!(dir(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]).unwrap(), Some("/x/cudasem/kernels".into()));
        assert_eq!(dir(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]).unwrap(), Some("/h/.cache/cudasem/kernels".into()));
        assert_eq!(dir(&[]).unwrap(), None);
        assert_eq!(KernelCache::Off.dir(), None);
        assert_eq!(KernelCache::Dir("/d".into()).dir(), Some("/d".into()));
    }
}
