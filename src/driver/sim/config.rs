//! The simulated machine's shape, from `CUDASEM_SIM_*` variables or built in code.

use crate::error::{Error, Result};

/// Which device pairs can access each other's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Number of simulated GPUs.
    pub devices: usize,
    /// Capacity of each GPU in bytes.
    pub memory: usize,
    /// Peer topology.
    pub peer: PeerSpec,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { devices: 2, memory: 16 << 30, peer: PeerSpec::All }
    }
}

impl SimConfig {
    /// Reads `CUDASEM_SIM_DEVICES`, `CUDASEM_SIM_MEMORY` and `CUDASEM_SIM_PEER` (defaults 2, 16GiB, all).
    pub fn from_env() -> Result<SimConfig> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut cfg = SimConfig::default();
        if let Some(v) = var("CUDASEM_SIM_DEVICES") {
            cfg.devices = v.trim().parse().map_err(|_| Error::InvalidConfig {
                key: "CUDASEM_SIM_DEVICES".into(),
                value: v.clone(),
                reason: "expected a number of devices such as `2`".into(),
            })?;
            if cfg.devices > 64 {
                return Err(Error::InvalidConfig {
                    key: "CUDASEM_SIM_DEVICES".into(),
                    value: v,
                    reason: "at most 64 simulated devices".into(),
                });
            }
        }
        if let Some(v) = var("CUDASEM_SIM_MEMORY") {
            cfg.memory = parse_bytes(&v).map_err(|reason| Error::InvalidConfig {
                key: "CUDASEM_SIM_MEMORY".into(),
                value: v.clone(),
                reason,
            })?;
        }
        if let Some(v) = var("CUDASEM_SIM_PEER") {
            cfg.peer = PeerSpec::parse(&v)?;
        }
        if let PeerSpec::Pairs(p) = &cfg.peer {
            if let Some(&(a, b)) = p.iter().find(|&&(a, b)| a.max(b) >= cfg.devices) {
                return Err(Error::InvalidConfig {
                    key: "CUDASEM_SIM_PEER".into(),
                    value: format!("{a}-{b}"),
                    reason: format!("the machine has {} simulated devices", cfg.devices),
                });
            }
        }
        Ok(cfg)
    }
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
