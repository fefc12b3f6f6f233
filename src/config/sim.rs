//! The simulated machine's shape, from `CUDASEM_SIM_*` variables or built in code.

use crate::error::{Error, Result};
use serde::Deserialize;

/// Which device pairs can access each other's memory. Deserializes from the same strings as
/// `CUDASEM_SIM_PEER` (`"all"`, `"none"`, `"0-1,2-3"`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum PeerSpec {
    /// Every pair of distinct devices.
    All,
    /// No pair.
    None,
    /// Only the listed pairs (symmetric), as `0-1,2-3`.
    Pairs(Vec<(usize, usize)>),
}

impl PeerSpec {
    /// Whether `a` can access `b` (never for `a == b`, as CUDA reports).
    pub fn allows(&self, a: usize, b: usize) -> bool {
        if a == b {
            return false;
        }
        match self {
            PeerSpec::All => true,
            PeerSpec::None => false,
            PeerSpec::Pairs(p) => p.iter().any(|&(x, y)| (x, y) == (a, b) || (x, y) == (b, a)),
        }
    }

    /// Parses `all`, `none`, or comma-separated pairs `A-B`.
    pub fn parse(value: &str) -> Result<PeerSpec> {
        let bad = |reason: &str| Error::InvalidConfig {
            key: "CUDASEM_SIM_PEER".into(),
            value: value.into(),
            reason: reason.into(),
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "all" | "" => return Ok(PeerSpec::All),
            "none" => return Ok(PeerSpec::None),
            _ => {}
        }
        let mut pairs = Vec::new();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (a, b) = part.split_once('-').ok_or_else(|| bad("expected `all`, `none` or pairs like `0-1,2-3`"))?;
            let a: usize = a.trim().parse().map_err(|_| bad("a pair's devices must be indices, as in `0-1`"))?;
            let b: usize = b.trim().parse().map_err(|_| bad("a pair's devices must be indices, as in `0-1`"))?;
            if a == b {
                return Err(bad("a pair must name two different devices"));
            }
            pairs.push((a, b));
        }
        Ok(PeerSpec::Pairs(pairs))
    }
}

/// The simulated machine: how many GPUs, how much memory each, and the peer topology.
///
/// Deserializes with every field optional; `memory` as a byte count or a size string (`"16GiB"`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Number of simulated GPUs (default 2, at most 64).
    pub devices: usize,
    /// Capacity of each GPU in bytes (default 16 GiB; host memory is used only as allocated).
    #[serde(deserialize_with = "bytes_or_size")]
    pub memory: usize,
    /// Which pairs of GPUs have peer access (default: all).
    pub peer: PeerSpec,
    /// What each GPU reports as its properties (default: an H100 SXM's figures under the name
    /// `cudasem simulated GPU`).
    pub gpu: SimGpu,
}

/// The properties every simulated GPU reports through `get_device_properties` (its memory is
/// [`SimConfig::memory`]; its UUID and PCI address are made from its index in the machine).
/// The defaults are an H100 SXM's figures. Deserializes with every field optional.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimGpu {
    /// The name (`cudasem simulated GPU`).
    pub name: String,
    /// Compute capability `(major, minor)` (9.0).
    pub major: u32,
    /// Compute capability, minor part.
    pub minor: u32,
    /// Streaming multiprocessors (132).
    pub multi_processor_count: u32,
    /// Integrated with the host's memory (no).
    pub is_integrated: bool,
    /// On a multi-GPU board (no).
    pub is_multi_gpu_board: bool,
    /// Most resident threads per multiprocessor (2048).
    pub max_threads_per_multi_processor: u32,
    /// Most threads per block (1024).
    pub max_threads_per_block: u32,
    /// Threads per warp (32).
    pub warp_size: u32,
    /// Registers per block (65536).
    pub regs_per_block: u32,
    /// Registers per multiprocessor (65536).
    pub regs_per_multiprocessor: u32,
    /// Shared memory per block in bytes (48 KiB).
    pub shared_memory_per_block: usize,
    /// Shared memory per block with opt-in, in bytes (227 KiB).
    pub shared_memory_per_block_optin: usize,
    /// Shared memory per multiprocessor in bytes (228 KiB).
    pub shared_memory_per_multiprocessor: usize,
    /// L2 cache in bytes (50 MiB).
    pub l2_cache_size: usize,
    /// Peak SM clock in kHz (1980000).
    pub clock_rate: u32,
    /// Peak memory clock in kHz (2619000).
    pub memory_clock_rate: u32,
    /// Memory bus width in bits (5120).
    pub memory_bus_width: u32,
}

impl Default for SimGpu {
    fn default() -> Self {
        SimGpu {
            name: "cudasem simulated GPU".into(),
            major: 9,
            minor: 0,
            multi_processor_count: 132,
            is_integrated: false,
            is_multi_gpu_board: false,
            max_threads_per_multi_processor: 2048,
            max_threads_per_block: 1024,
            warp_size: 32,
            regs_per_block: 65536,
            regs_per_multiprocessor: 65536,
            shared_memory_per_block: 48 << 10,
            shared_memory_per_block_optin: 227 << 10,
            shared_memory_per_multiprocessor: 228 << 10,
            l2_cache_size: 50 << 20,
            clock_rate: 1_980_000,
            memory_clock_rate: 2_619_000,
            memory_bus_width: 5120,
        }
    }
}

impl TryFrom<String> for PeerSpec {
    type Error = Error;
    fn try_from(value: String) -> Result<PeerSpec> {
        PeerSpec::parse(&value)
    }
}

/// A size as a byte count (`1073741824`) or a string (`"1GiB"`).
fn bytes_or_size<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(usize),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(s) => parse_bytes(&s).map_err(serde::de::Error::custom),
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { devices: 2, memory: 16 << 30, peer: PeerSpec::All, gpu: SimGpu::default() }
    }
}

impl SimConfig {
    /// Reads `CUDASEM_SIM_DEVICES`, `CUDASEM_SIM_MEMORY` and `CUDASEM_SIM_PEER` (defaults 2, 16GiB, all).
    pub fn from_env() -> Result<SimConfig> {
        SimConfig::from_lookup(&super::env::env_var)
    }

    /// As [`SimConfig::from_env`], with `lookup` as the environment (`Ok(None)`: unset).
    pub(crate) fn from_lookup(lookup: super::env::Lookup) -> Result<SimConfig> {
        let var = |k: &str| lookup(k).map(|v| v.filter(|v| !v.trim().is_empty()));
        let mut cfg = SimConfig::default();
        if let Some(v) = var("CUDASEM_SIM_DEVICES")? {
            cfg.devices = v.trim().parse().map_err(|_| Error::InvalidConfig {
                key: "CUDASEM_SIM_DEVICES".into(),
                value: v.clone(),
                reason: "expected a number of devices such as `2`".into(),
            })?;
        }
        if let Some(v) = var("CUDASEM_SIM_MEMORY")? {
            cfg.memory = parse_bytes(&v).map_err(|reason| Error::InvalidConfig {
                key: "CUDASEM_SIM_MEMORY".into(),
                value: v.clone(),
                reason,
            })?;
        }
        if let Some(v) = var("CUDASEM_SIM_PEER")? {
            cfg.peer = PeerSpec::parse(&v)?;
        }
        cfg.validate(["CUDASEM_SIM_DEVICES", "CUDASEM_SIM_MEMORY", "CUDASEM_SIM_PEER"])?;
        Ok(cfg)
    }

    /// Checks the shape: at most [`SimConfig::MAX_DEVICES`] devices, at least one byte of memory
    /// each, peer pairs naming existing devices. `keys` name the devices, memory and peer settings
    /// in the errors.
    pub(crate) fn validate(&self, keys: [&str; 3]) -> Result<()> {
        let bad = |key: &str, value: String, reason: String| Error::InvalidConfig { key: key.into(), value, reason };
        if self.devices > SimConfig::MAX_DEVICES {
            let reason = format!("at most {} simulated devices", SimConfig::MAX_DEVICES);
            return Err(bad(keys[0], self.devices.to_string(), reason));
        }
        if self.memory == 0 {
            return Err(bad(keys[1], "0".into(), "each simulated device needs at least 1 byte".into()));
        }
        if self.memory > SimConfig::MAX_MEMORY {
            let reason = format!(
                "a simulated device holds at most 16 TiB ({} bytes: its address window); ask for 16TiB or less",
                SimConfig::MAX_MEMORY
            );
            return Err(bad(keys[1], self.memory.to_string(), reason));
        }
        if let PeerSpec::Pairs(p) = &self.peer {
            if let Some(&(a, b)) = p.iter().find(|&&(a, b)| a.max(b) >= self.devices || a == b) {
                let reason = if a == b {
                    "a pair must name two different devices".to_string()
                } else {
                    format!("the machine has {} simulated devices", self.devices)
                };
                return Err(bad(keys[2], format!("{a}-{b}"), reason));
            }
        }
        Ok(())
    }

    /// The most simulated devices a machine may have.
    pub const MAX_DEVICES: usize = 64;

    /// The most memory a simulated device may have: 16 TiB, the address window each device owns
    /// (a larger `memory` is refused with [`Error::InvalidConfig`], never silently capped).
    pub const MAX_MEMORY: usize = 1 << 44;

    /// The machine that `CUDA_VISIBLE_DEVICES = visible` leaves visible: the selected devices,
    /// renumbered `0..` in the list's order, with the peer pairs among them renumbered too.
    /// `None` (the variable unset) leaves the machine as it is.
    ///
    /// The list follows CUDA's rules (and PyTorch's reading of them):
    /// - entries are separated by `,`; spaces around an entry are ignored;
    /// - an entry is read as CUDA's `strtoul` reads it: its leading digits (`"1gpu"` is `1`);
    /// - reading stops at the first entry that is not an index (a negative number such as `-1`,
    ///   an empty entry, a `GPU-…`/`MIG-…` UUID, which the simulated machine does not have) or
    ///   that names a device the machine does not have: the devices before it stay visible;
    /// - an index listed twice makes no device visible;
    /// - so an empty value, or one starting with `-1`, makes no device visible.
    ///
    /// ```
    /// use cudasem::{PeerSpec, SimConfig};
    /// let machine = SimConfig { devices: 4, memory: 1 << 30, peer: PeerSpec::Pairs(vec![(0, 3)]), ..SimConfig::default() };
    /// let visible = machine.visible(Some("3,0,7,1"));
    /// assert_eq!(visible.devices, 2); // 7 is not a device: reading stops there
    /// assert_eq!(visible.peer, PeerSpec::Pairs(vec![(1, 0)]));
    /// assert_eq!(machine.visible(Some("-1")).devices, 0);
    /// assert_eq!(machine.visible(None), machine);
    /// ```
    pub fn visible(&self, visible: Option<&str>) -> SimConfig {
        let Some(list) = visible else { return self.clone() };
        let order = visible_devices(list, self.devices);
        let peer = match &self.peer {
            PeerSpec::Pairs(pairs) => {
                let new = |d: usize| order.iter().position(|&o| o == d);
                let kept = pairs.iter().filter_map(|&(a, b)| Some((new(a)?, new(b)?))).collect();
                PeerSpec::Pairs(kept)
            }
            other => other.clone(),
        };
        SimConfig { devices: order.len(), memory: self.memory, peer, gpu: self.gpu.clone() }
    }
}

/// The physical devices (of `count`) that a `CUDA_VISIBLE_DEVICES` value selects, in its order
/// (the rules of [`SimConfig::visible`]).
pub(crate) fn visible_devices(list: &str, count: usize) -> Vec<usize> {
    let mut order = Vec::new();
    for entry in list.split(',') {
        let entry = entry.trim();
        let digits = entry.find(|c: char| !c.is_ascii_digit()).unwrap_or(entry.len());
        let Ok(index) = entry[..digits].parse::<usize>() else { break };
        if index >= count {
            break;
        }
        if order.contains(&index) {
            return Vec::new();
        }
        order.push(index);
    }
    order
}

/// Parses a byte size: `1073741824`, `512MiB`, `16GiB`, `1.5GB`, `64k` (binary units for K/M/G/T).
pub fn parse_bytes(value: &str) -> std::result::Result<usize, String> {
    let v = value.trim();
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().map_err(|_| "expected a size such as `16GiB`, `512MiB` or a byte count".to_string())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown unit `{other}`; use B, KiB, MiB, GiB or TiB")),
    };
    let bytes = n * mult as f64;
    if !(bytes >= 1.0 && bytes < (1u64 << 52) as f64) {
        return Err("the size must be at least 1 byte and below 4 PiB".into());
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_bytes("16GiB"), Ok(16 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5g"), Ok(3 << 29));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("12 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("0").is_err());
    }

    #[test]
    fn memory_above_the_address_window_is_refused() {
        let keys = ["d", "CUDASEM_SIM_MEMORY", "p"];
        let mut cfg = SimConfig { memory: SimConfig::MAX_MEMORY, ..SimConfig::default() };
        assert_eq!(cfg.validate(keys), Ok(()));
        for memory in [SimConfig::MAX_MEMORY + 1, 17 << 40, (1 << 52) - 1] {
            cfg.memory = memory;
            let e = cfg.validate(keys).unwrap_err();
            assert!(matches!(&e, Error::InvalidConfig { key, .. } if key == "CUDASEM_SIM_MEMORY"), "{e}");
            assert!(e.to_string().contains("16 TiB"), "{e}");
        }
        let env = |k: &str| Ok((k == "CUDASEM_SIM_MEMORY").then(|| "32TiB".to_string()));
        assert!(matches!(SimConfig::from_lookup(&env), Err(Error::InvalidConfig { .. })));
    }

    #[test]
    fn visible_devices_follow_cuda_rules() {
        let cases: &[(&str, &[usize])] = &[
            ("0,1,2,3", &[0, 1, 2, 3]),
            ("2,0", &[2, 0]),
            (" 3 , 1 ", &[3, 1]),
            ("1gpu,2", &[1, 2]),
            ("1,-1,2", &[1]),
            ("-1", &[]),
            ("", &[]),
            ("0,,1", &[0]),
            ("1,9,2", &[1]),
            ("GPU-1234,0", &[]),
            ("1,1", &[]),
            ("0,2,0", &[]),
        ];
        for &(list, want) in cases {
            assert_eq!(visible_devices(list, 4), want, "CUDA_VISIBLE_DEVICES={list:?}");
        }
        // Random lists: the result is the longest prefix of valid, distinct indices (or nothing).
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200 {
            let mut entries = Vec::new();
            for _ in 0..(seed % 6) {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                entries.push(((seed >> 33) % 7) as i64 - 1);
            }
            let list = entries.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
            let prefix: Vec<usize> =
                entries.iter().take_while(|&&e| (0..4).contains(&e)).map(|&e| e as usize).collect();
            let distinct = prefix.iter().enumerate().all(|(i, d)| !prefix[..i].contains(d));
            let want = if distinct { prefix } else { Vec::new() };
            assert_eq!(visible_devices(&list, 4), want, "CUDA_VISIBLE_DEVICES={list:?}");
        }
    }

    #[test]
    fn visible_devices_renumber_the_peer_pairs() {
        let machine = SimConfig {
            devices: 4,
            memory: 1 << 30,
            peer: PeerSpec::Pairs(vec![(0, 1), (2, 3)]),
            ..SimConfig::default()
        };
        let v = machine.visible(Some("3,1,2"));
        assert_eq!((v.devices, v.memory), (3, 1 << 30));
        assert!(v.peer.allows(0, 2) && !v.peer.allows(0, 1) && !v.peer.allows(1, 2));
        assert_eq!(machine.visible(Some("")).devices, 0);
        assert_eq!(SimConfig::default().visible(Some("1")).peer, PeerSpec::All);
    }

    #[test]
    fn peer_specs_parse_and_answer() {
        let p = PeerSpec::parse("0-1, 2-3").unwrap();
        assert!(p.allows(0, 1) && p.allows(1, 0) && p.allows(3, 2));
        assert!(!p.allows(0, 2) && !p.allows(1, 1));
        assert!(PeerSpec::parse("all").unwrap().allows(0, 3));
        assert!(!PeerSpec::parse("none").unwrap().allows(0, 1));
        assert!(!PeerSpec::All.allows(2, 2));
        for bad in ["0-0", "0_1", "a-b", "1-"] {
            let e = PeerSpec::parse(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidConfig { ref key, .. } if key == "CUDASEM_SIM_PEER"), "{bad}: {e}");
        }
    }
}
