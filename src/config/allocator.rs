//! Allocator settings in `PYTORCH_CUDA_ALLOC_CONF`'s syntax (read from `CUDASEM_ALLOC_CONF`), and
//! the size rules they shape: request rounding and segment sizes.

use crate::error::{Error, Result};
use std::fmt;

/// The environment variable holding the allocator settings (`PYTORCH_CUDA_ALLOC_CONF`'s syntax).
pub const ALLOC_CONF_ENV: &str = "CUDASEM_ALLOC_CONF";
/// PyTorch's variable for the same settings, read when `CUDASEM_ALLOC_CONF` is unset.
pub const PYTORCH_ALLOC_CONF_ENV: &str = "PYTORCH_CUDA_ALLOC_CONF";
/// Every block is a multiple of this many bytes (PyTorch's `kMinBlockSize`).
pub const MIN_BLOCK_SIZE: usize = 512;
/// Requests up to this many bytes (after rounding) go to the small pool (`kSmallSize`, 1 MiB).
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`, 2 MiB); also its expandable page size.
pub const SMALL_BUFFER: usize = 2 << 20;
/// Segment size for large requests under [`MIN_LARGE_ALLOC`] (`kLargeBuffer`, 20 MiB); also the
/// large pool's expandable page size.
pub const LARGE_BUFFER: usize = 20 << 20;
/// Large requests from this size get a segment of their own size (`kMinLargeAlloc`, 10 MiB).
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Such segments are rounded up to a multiple of this (`kRoundLarge`, 2 MiB).
pub const ROUND_LARGE: usize = 2 << 20;
/// Number of size intervals of `roundup_power2_divisions` (`< 2 MiB`, `[2, 4) MiB`, …, `≥ 32 GiB`).
const INTERVALS: usize = 16;
const MIB: usize = 1 << 20;

/// The caching allocator's settings (`PYTORCH_CUDA_ALLOC_CONF`'s keys).
///
/// ```
/// use cudasem::cuda::AllocatorSettings;
/// let s = AllocatorSettings::parse("max_split_size_mb:128,roundup_power2_divisions:4").unwrap();
/// assert_eq!(s.max_split_size(), Some(128 << 20));
/// assert_eq!(s.round_size(2600), 3072); // quarters of [2048, 4096)
/// assert!(AllocatorSettings::parse("max_split_size_mb:10").is_err());
/// ```
///
/// Deserializes from the same string (`"max_split_size_mb:128"`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct AllocatorSettings {
    max_split_size: usize,
    max_non_split_rounding: usize,
    divisions: [usize; INTERVALS],
    gc_threshold: f64,
    expandable_segments: bool,
    release_lock_on_cudamalloc: bool,
    pinned_use_cuda_host_register: bool,
    pinned_num_register_threads: usize,
    pinned_use_background_threads: bool,
}

impl Default for AllocatorSettings {
    fn default() -> Self {
        AllocatorSettings {
            max_split_size: usize::MAX,
            max_non_split_rounding: LARGE_BUFFER,
            divisions: [0; INTERVALS],
            gc_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
        }
    }
}

impl TryFrom<String> for AllocatorSettings {
    type Error = Error;
    fn try_from(conf: String) -> Result<AllocatorSettings> {
        AllocatorSettings::parse(&conf)
    }
}

/// The error for `key:value`, quoting at most 80 characters of each (a setting can be long).
fn invalid(key: &str, value: &str, reason: impl Into<String>) -> Error {
    let quote = |text: &str| crate::error::quote_prefix(text, 80);
    Error::InvalidConfig { key: quote(key), value: quote(value), reason: reason.into() }
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(invalid(key, value, format!("expected True or False (in {ALLOC_CONF_ENV})"))),
    }
}

fn parse_uint(key: &str, value: &str, expected: &str) -> Result<usize> {
    value.parse::<usize>().map_err(|_| invalid(key, value, format!("expected {expected} (in {ALLOC_CONF_ENV})")))
}

/// Splits `a:1,b:[x:1,y:2]` at the commas outside brackets.
fn split_items(conf: &str) -> Result<Vec<&str>> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in conf.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&conf[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(invalid(ALLOC_CONF_ENV, conf, "unbalanced brackets; expected lists like [256:1,>:8]"));
        }
    }
    if depth != 0 {
        return Err(invalid(ALLOC_CONF_ENV, conf, "unbalanced brackets; expected lists like [256:1,>:8]"));
    }
    items.push(&conf[start..]);
    Ok(items)
}

impl AllocatorSettings {
    /// Parses `PYTORCH_CUDA_ALLOC_CONF`'s syntax: `key:value` pairs separated by commas.
    ///
    /// Keys: `max_split_size_mb` (integer > 20), `max_non_split_rounding_mb` (integer ≥ 20),
    /// `roundup_power2_divisions` (a power of two, or a list `[256:1,512:2,1024:4,>:8]`),
    /// `garbage_collection_threshold` (strictly between 0 and 1), `expandable_segments`
    /// (`True`/`False`), `backend` (`native`), and the accepted but host-side or no-op keys
    /// `release_lock_on_cudamalloc`, `pinned_use_cuda_host_register`,
    /// `pinned_num_register_threads`, `pinned_use_background_threads`. An empty string gives the
    /// defaults. Anything else is [`Error::InvalidConfig`] naming the key and what it expects.
    pub fn parse(conf: &str) -> Result<AllocatorSettings> {
        AllocatorSettings::default().parse_over(conf)
    }

    /// These settings changed by `conf` as PyTorch's `_set_allocator_settings(conf)` changes them
    /// while running: `max_split_size_mb`, `roundup_power2_divisions` and
    /// `garbage_collection_threshold` return to their defaults unless `conf` sets them; every
    /// other key keeps its value unless `conf` sets it. The same syntax, keys and errors as
    /// [`AllocatorSettings::parse`].
    ///
    /// ```
    /// use cudasem::cuda::AllocatorSettings;
    /// let s = AllocatorSettings::parse("max_split_size_mb:128,expandable_segments:True").unwrap();
    /// let t = s.apply("garbage_collection_threshold:0.5").unwrap();
    /// assert_eq!((t.max_split_size(), t.expandable_segments()), (None, true));
    /// assert_eq!(t.garbage_collection_threshold(), Some(0.5));
    /// ```
    pub fn apply(&self, conf: &str) -> Result<AllocatorSettings> {
        let defaults = AllocatorSettings::default();
        let base = AllocatorSettings {
            max_split_size: defaults.max_split_size,
            divisions: defaults.divisions,
            gc_threshold: defaults.gc_threshold,
            ..self.clone()
        };
        base.parse_over(conf)
    }

    /// `self` with the keys of `conf` set.
    fn parse_over(self, conf: &str) -> Result<AllocatorSettings> {
        let mut s = self;
        for item in split_items(conf)? {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let Some((key, value)) = item.split_once(':') else {
                return Err(invalid(
                    ALLOC_CONF_ENV,
                    item,
                    "expected `key:value` pairs separated by commas, e.g. max_split_size_mb:128,expandable_segments:True",
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "max_split_size_mb" => {
                    let mb = parse_uint(key, value, "an integer number of MiB greater than 20")?;
                    s = s.with_max_split_size_mb(mb)?;
                }
                "max_non_split_rounding_mb" => {
                    let mb = parse_uint(key, value, "an integer number of MiB of at least 20")?;
                    if mb < LARGE_BUFFER / MIB {
                        return Err(invalid(key, value, "expected an integer number of MiB of at least 20"));
                    }
                    s.max_non_split_rounding = mb.saturating_mul(MIB);
                }
                "roundup_power2_divisions" => s.divisions = parse_divisions(value)?,
                "garbage_collection_threshold" => {
                    let t = value.parse::<f64>().map_err(|_| {
                        invalid(
                            key,
                            value,
                            format!("expected a number strictly between 0.0 and 1.0 (in {ALLOC_CONF_ENV})"),
                        )
                    })?;
                    s = s.with_garbage_collection_threshold(t)?;
                }
                "expandable_segments" => s.expandable_segments = parse_bool(key, value)?,
                "release_lock_on_cudamalloc" => s.release_lock_on_cudamalloc = parse_bool(key, value)?,
                "pinned_use_cuda_host_register" => s.pinned_use_cuda_host_register = parse_bool(key, value)?,
                "pinned_use_background_threads" => s.pinned_use_background_threads = parse_bool(key, value)?,
                "pinned_num_register_threads" => {
                    let expected = "a power of two from 1 to 128";
                    let n = parse_uint(key, value, expected)?;
                    if !n.is_power_of_two() || n > 128 {
                        return Err(invalid(key, value, format!("expected {expected}")));
                    }
                    s.pinned_num_register_threads = n;
                }
                "backend" => {
                    if value != "native" {
                        return Err(invalid(
                            key,
                            value,
                            "expected native (cudaMallocAsync is not supported by cudasem)",
                        ));
                    }
                }
                _ => {
                    return Err(invalid(
                        key,
                        value,
                        format!(
                        "unknown {ALLOC_CONF_ENV} key; expected one of max_split_size_mb, roundup_power2_divisions, \
                             garbage_collection_threshold, expandable_segments, max_non_split_rounding_mb, backend, \
                             release_lock_on_cudamalloc, pinned_use_cuda_host_register, pinned_num_register_threads, \
                             pinned_use_background_threads"
                    ),
                    ))
                }
            }
        }
        Ok(s)
    }

    /// The settings from `CUDASEM_ALLOC_CONF`, else (when it is unset) from PyTorch's
    /// `PYTORCH_CUDA_ALLOC_CONF`; the defaults when neither is set or the one read is empty.
    pub fn from_env() -> Result<AllocatorSettings> {
        AllocatorSettings::from_lookup(&super::env::env_var)
    }

    /// As [`AllocatorSettings::from_env`], with `lookup` as the environment (`Ok(None)`: unset).
    pub(crate) fn from_lookup(lookup: super::env::Lookup) -> Result<AllocatorSettings> {
        let value = match lookup(ALLOC_CONF_ENV)? {
            Some(v) => Some(v),
            None => lookup(PYTORCH_ALLOC_CONF_ENV)?,
        };
        match value {
            Some(v) => AllocatorSettings::parse(&v),
            None => Ok(AllocatorSettings::default()),
        }
    }

    /// Sets `max_split_size_mb` (must be > 20, like PyTorch).
    pub fn with_max_split_size_mb(mut self, mb: usize) -> Result<Self> {
        if mb <= LARGE_BUFFER / MIB {
            return Err(invalid(
                "max_split_size_mb",
                &mb.to_string(),
                format!("expected an integer number of MiB greater than 20 (in {ALLOC_CONF_ENV})"),
            ));
        }
        self.max_split_size = mb.saturating_mul(MIB);
        Ok(self)
    }

    /// Sets one `roundup_power2_divisions` for all sizes (a power of two; 1 turns it off).
    pub fn with_roundup_power2_divisions(mut self, divisions: usize) -> Result<Self> {
        if !divisions.is_power_of_two() {
            return Err(invalid(
                "roundup_power2_divisions",
                &divisions.to_string(),
                "expected a power of two (1, 2, 4, 8, …) or a list like [256:1,512:2,>:8]",
            ));
        }
        self.divisions = [divisions; INTERVALS];
        Ok(self)
    }

    /// Sets `garbage_collection_threshold` (strictly between 0 and 1; it acts only together with
    /// a memory fraction, as in PyTorch).
    pub fn with_garbage_collection_threshold(mut self, threshold: f64) -> Result<Self> {
        if !(threshold > 0.0 && threshold < 1.0) {
            return Err(invalid(
                "garbage_collection_threshold",
                &threshold.to_string(),
                format!("expected a number strictly between 0.0 and 1.0 (in {ALLOC_CONF_ENV})"),
            ));
        }
        self.gc_threshold = threshold;
        Ok(self)
    }

    /// Sets `expandable_segments`.
    pub fn with_expandable_segments(mut self, on: bool) -> Self {
        self.expandable_segments = on;
        self
    }

    /// `max_split_size_mb` in bytes, `None` when unset (no limit).
    pub fn max_split_size(&self) -> Option<usize> {
        (self.max_split_size != usize::MAX).then_some(self.max_split_size)
    }

    /// The limit as the allocator uses it: `usize::MAX` when unset.
    pub(crate) fn max_split(&self) -> usize {
        self.max_split_size
    }

    /// How much larger than an oversize request a cached oversize block may be and still serve it
    /// (`max_non_split_rounding_mb`, default 20 MiB).
    pub fn max_non_split_rounding(&self) -> usize {
        self.max_non_split_rounding
    }

    /// The `garbage_collection_threshold`, `None` when unset.
    pub fn garbage_collection_threshold(&self) -> Option<f64> {
        (self.gc_threshold > 0.0).then_some(self.gc_threshold)
    }

    /// Whether `expandable_segments:True` was asked for.
    pub fn expandable_segments(&self) -> bool {
        self.expandable_segments
    }

    /// `release_lock_on_cudamalloc` (accepted for compatibility; cudasem holds its lock, which is
    /// per device and never taken by other devices).
    pub fn release_lock_on_cudamalloc(&self) -> bool {
        self.release_lock_on_cudamalloc
    }

    /// `pinned_use_cuda_host_register` (for the pinned host allocator).
    pub fn pinned_use_cuda_host_register(&self) -> bool {
        self.pinned_use_cuda_host_register
    }

    /// `pinned_num_register_threads` (for the pinned host allocator).
    pub fn pinned_num_register_threads(&self) -> usize {
        self.pinned_num_register_threads
    }

    /// `pinned_use_background_threads` (for the pinned host allocator).
    pub fn pinned_use_background_threads(&self) -> bool {
        self.pinned_use_background_threads
    }

    /// The `roundup_power2_divisions` that apply to a request of `size` bytes (0 or 1: none).
    pub fn roundup_power2_divisions(&self, size: usize) -> usize {
        let log = usize::BITS - 1 - size.max(1).leading_zeros();
        let index = (log as usize).saturating_sub(20).min(INTERVALS - 1);
        self.divisions[index]
    }

    /// The block size a request of `size` bytes gets: 512 for less, else a multiple of 512, or with
    /// `roundup_power2_divisions:N` (for sizes above 512·N) the next of N equal steps between two
    /// powers of two. Saturates near `usize::MAX` (such a request fails as out of memory).
    ///
    /// As in PyTorch's code, sizes up to 512·N keep plain 512-byte rounding, so every step is a
    /// multiple of 512 and blocks stay 512-byte aligned: 1200 bytes with 4 divisions is 1536 (the
    /// 1280 of PyTorch's documentation would be a 256-byte step).
    pub fn round_size(&self, size: usize) -> usize {
        if size < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let divisions = self.roundup_power2_divisions(size);
        // Checked: a setting may give up to 2^63 divisions.
        if divisions > 1 && MIN_BLOCK_SIZE.checked_mul(divisions).is_some_and(|below| size > below) {
            next_division(size, divisions)
        } else {
            round_up(size, MIN_BLOCK_SIZE)
        }
    }
}

/// `roundup_power2_divisions`: one power of two, or `[K1:v1,K2:v2,…,>:vn]` with keys in MiB.
///
/// Beyond PyTorch: intervals follow PyTorch's documentation ("`[256:1,512:2,1024:4,>:8]` sets 1
/// division for all sizes below 256MB, 2 for sizes between 256MB and 512MB, 4 between 512MB and 1GB
/// and 8 for any larger sizes"): a key `K` covers the sizes from the previous key up to `K`. PyTorch's
/// parser shifts every key one interval up and lets `>` overwrite the last key's interval.
fn parse_divisions(value: &str) -> Result<[usize; INTERVALS]> {
    const KEY: &str = "roundup_power2_divisions";
    let expected = "expected a power of two, or a list like [256:1,512:2,1024:4,>:8] whose keys are increasing \
                    powers of two (MiB) or `>`, and whose values are powers of two or 0";
    let Some(list) = value.strip_prefix('[') else {
        let n = parse_uint(KEY, value, expected)?;
        return AllocatorSettings::default().with_roundup_power2_divisions(n).map(|s| s.divisions);
    };
    let list = list.strip_suffix(']').ok_or_else(|| invalid(KEY, value, expected))?;
    let mut out = [0usize; INTERVALS];
    // `next`: the first interval not yet given a value.
    let mut next = 0usize;
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry.split_once(':').ok_or_else(|| invalid(KEY, value, expected))?;
        let v = parse_uint(KEY, v.trim(), expected)?;
        if v != 0 && !v.is_power_of_two() {
            return Err(invalid(KEY, value, expected));
        }
        if next >= INTERVALS {
            return Err(invalid(KEY, value, format!("{expected}; nothing may follow `>`")));
        }
        let last = match k.trim() {
            ">" => INTERVALS - 1,
            k => {
                let mb = parse_uint(KEY, k, expected)?;
                if !mb.is_power_of_two() {
                    return Err(invalid(KEY, value, expected));
                }
                // Interval i holds sizes in [2^i, 2^(i+1)) MiB (interval 0: everything under 2 MiB);
                // key K ends at K MiB, so its last interval is log2(K) - 1.
                let i = (mb.trailing_zeros() as usize).saturating_sub(1).min(INTERVALS - 1);
                if i < next && next > 0 {
                    return Err(invalid(KEY, value, expected));
                }
                i
            }
        };
        out[next..=last].fill(v);
        next = last + 1;
    }
    Ok(out)
}

fn round_up(size: usize, to: usize) -> usize {
    size.div_ceil(to).saturating_mul(to)
}

/// PyTorch's `roundup_power2_next_division`.
fn next_division(size: usize, divisions: usize) -> usize {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.saturating_add(step)
    }
}

/// The segment size asked from the driver for a block of `size` bytes: 2 MiB for small blocks,
/// 20 MiB under 10 MiB, else the size rounded up to 2 MiB.
pub(crate) fn allocation_size(size: usize) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        round_up(size, ROUND_LARGE)
    }
}

impl fmt::Display for AllocatorSettings {
    /// The settings in `CUDASEM_ALLOC_CONF` syntax (only what differs from the defaults).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = AllocatorSettings::default();
        let mut parts = Vec::new();
        if let Some(m) = self.max_split_size() {
            parts.push(format!("max_split_size_mb:{}", m / MIB));
        }
        if self.max_non_split_rounding != d.max_non_split_rounding {
            parts.push(format!("max_non_split_rounding_mb:{}", self.max_non_split_rounding / MIB));
        }
        if self.divisions != d.divisions {
            if self.divisions.iter().all(|&v| v == self.divisions[0]) {
                parts.push(format!("roundup_power2_divisions:{}", self.divisions[0]));
            } else {
                let mut list = Vec::new();
                for i in 0..INTERVALS - 1 {
                    if self.divisions[i] != self.divisions[i + 1] {
                        list.push(format!("{}:{}", 2usize << i, self.divisions[i]));
                    }
                }
                list.push(format!(">:{}", self.divisions[INTERVALS - 1]));
                parts.push(format!("roundup_power2_divisions:[{}]", list.join(",")));
            }
        }
        if let Some(t) = self.garbage_collection_threshold() {
            parts.push(format!("garbage_collection_threshold:{t}"));
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".into());
        }
        for (on, key) in [
            (self.release_lock_on_cudamalloc, "release_lock_on_cudamalloc"),
            (self.pinned_use_cuda_host_register, "pinned_use_cuda_host_register"),
            (self.pinned_use_background_threads, "pinned_use_background_threads"),
        ] {
            if on {
                parts.push(format!("{key}:True"));
            }
        }
        if self.pinned_num_register_threads != 1 {
            parts.push(format!("pinned_num_register_threads:{}", self.pinned_num_register_threads));
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_follows_pytorch() {
        let s = AllocatorSettings::default();
        assert_eq!(s.round_size(0), 512);
        assert_eq!(s.round_size(1), 512);
        assert_eq!(s.round_size(512), 512);
        assert_eq!(s.round_size(513), 1024);
        assert_eq!(s.round_size(1200), 1536);
        let s4 = s.clone().with_roundup_power2_divisions(4).unwrap();
        assert_eq!(s4.round_size(1200), 1536, "1200 ≤ 512·4: steps under 512 bytes are not used");
        assert_eq!(s4.round_size(2600), 3072);
        assert_eq!(s.clone().with_roundup_power2_divisions(2).unwrap().round_size(1200), 1536);
        assert_eq!(s4.round_size(2048), 2048, "powers of two stay");
        assert_eq!(s4.round_size(2000), 2048, "at or under 512·N: plain 512 rounding");
        assert_eq!(s4.round_size(2049), 2560);
        assert_eq!(s4.round_size((1 << 30) + 1), (1 << 30) + (1 << 28));
        assert_eq!(s.round_size(usize::MAX), usize::MAX, "saturates instead of overflowing");
    }

    #[test]
    fn segment_sizes() {
        assert_eq!(allocation_size(512), SMALL_BUFFER);
        assert_eq!(allocation_size(SMALL_SIZE), SMALL_BUFFER);
        assert_eq!(allocation_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(allocation_size(MIN_LARGE_ALLOC - 512), LARGE_BUFFER);
        assert_eq!(allocation_size(MIN_LARGE_ALLOC), MIN_LARGE_ALLOC);
        assert_eq!(allocation_size(MIN_LARGE_ALLOC + 1), 12 << 20);
    }

    #[test]
    fn per_interval_divisions_follow_the_docs() {
        let s = AllocatorSettings::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").unwrap();
        assert_eq!(s.roundup_power2_divisions(1 << 20), 1);
        assert_eq!(s.roundup_power2_divisions(200 << 20), 1);
        assert_eq!(s.roundup_power2_divisions(300 << 20), 2);
        assert_eq!(s.roundup_power2_divisions(700 << 20), 4);
        assert_eq!(s.roundup_power2_divisions(2 << 30), 8);
        assert_eq!(s.roundup_power2_divisions(usize::MAX), 8);
        assert_eq!(s.to_string(), "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
        assert_eq!(AllocatorSettings::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn parse_and_display_round_trip() {
        let s = AllocatorSettings::parse(
            " max_split_size_mb:128 , garbage_collection_threshold:0.6,expandable_segments:True,roundup_power2_divisions:4,",
        )
        .unwrap();
        assert_eq!(s.max_split_size(), Some(128 << 20));
        assert_eq!(s.garbage_collection_threshold(), Some(0.6));
        assert!(s.expandable_segments());
        assert_eq!(AllocatorSettings::parse(&s.to_string()).unwrap(), s);
        assert_eq!(AllocatorSettings::parse("").unwrap(), AllocatorSettings::default());
        assert_eq!(AllocatorSettings::default().to_string(), "");
    }
}
