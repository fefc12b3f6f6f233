//! [`Device`]: where a tensor or a call lives, parsed from PyTorch's strings.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A device: the host, or a CUDA device (`None` index = the current device when used).
///
/// Parsed from the strings PyTorch takes: `"cpu"`, `"cuda"`, `"cuda:1"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// A CUDA device; `None` means "the current device" at the moment of use.
    Cuda(Option<usize>),
}

impl Device {
    /// `Device::Cuda(Some(index))`.
    pub fn cuda(index: usize) -> Device {
        Device::Cuda(Some(index))
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(None) => f.write_str("cuda"),
            Device::Cuda(Some(i)) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Device> {
        let bad = |reason: &str| Error::InvalidDeviceString { input: s.to_string(), reason: reason.to_string() };
        let t = s.trim();
        match t {
            "cpu" => return Ok(Device::Cpu),
            "cuda" => return Ok(Device::Cuda(None)),
            _ => {}
        }
        if let Some(idx) = t.strip_prefix("cuda:") {
            // As strict as PyTorch's parser: digits only, no sign, no leading zero.
            let digits = !idx.is_empty() && idx.bytes().all(|b| b.is_ascii_digit());
            if !digits || (idx.len() > 1 && idx.starts_with('0')) {
                return Err(bad(
                    "the index after `cuda:` must be a non-negative integer without sign or leading zeros",
                ));
            }
            return idx.parse::<usize>().map(|i| Device::Cuda(Some(i))).map_err(|_| bad("the index is too large"));
        }
        if t.starts_with("cpu:") {
            return Err(bad("cpu takes no index"));
        }
        Err(bad("unknown device type"))
    }
}

/// Anything that names a device, CPU or CUDA: a [`Device`] or a string like `"cpu"`,
/// `"cuda"`, `"cuda:1"` (used where tensors are placed).
pub trait IntoDevice {
    /// The device this names (a CUDA index is not yet checked against the device count).
    fn into_device(self) -> Result<Device>;
}

impl IntoDevice for Device {
    fn into_device(self) -> Result<Device> {
        Ok(self)
    }
}

impl IntoDevice for &str {
    fn into_device(self) -> Result<Device> {
        self.parse()
    }
}

impl IntoDevice for &String {
    fn into_device(self) -> Result<Device> {
        self.parse()
    }
}

/// Anything that names a CUDA device — the one argument type of every `cudasem::cuda` function
/// that takes a device: an index (`1`), `Option<usize>` (`None`: the current device, like
/// torch's `device=None`), a [`Device`], or a string (`"cuda:1"`; `"cuda"` is the current device).
///
/// `Device::Cpu` / `"cpu"` are refused with [`Error::NotCudaDevice`]. The current device is
/// looked up, and every index checked against the device count, by the runtime when it is used.
pub trait IntoCudaDevice {
    /// The CUDA index this names, or `None` for "the current device" (not yet checked against
    /// the device count).
    fn cuda_device(self) -> Result<Option<usize>>;
}

impl IntoCudaDevice for usize {
    #[inline]
    fn cuda_device(self) -> Result<Option<usize>> {
        Ok(Some(self))
    }
}

impl IntoCudaDevice for Option<usize> {
    #[inline]
    fn cuda_device(self) -> Result<Option<usize>> {
        Ok(self)
    }
}

impl IntoCudaDevice for Device {
    #[inline]
    fn cuda_device(self) -> Result<Option<usize>> {
        match self {
            Device::Cuda(index) => Ok(index),
            Device::Cpu => Err(Error::NotCudaDevice { device: "cpu".into() }),
        }
    }
}

impl IntoCudaDevice for &str {
    fn cuda_device(self) -> Result<Option<usize>> {
        match self.parse::<Device>()? {
            Device::Cpu => Err(Error::NotCudaDevice { device: self.to_string() }),
            d => d.cuda_device(),
        }
    }
}

impl IntoCudaDevice for &String {
    fn cuda_device(self) -> Result<Option<usize>> {
        self.as_str().cuda_device()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pytorch_device_strings() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(None));
        assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::cuda(3));
        assert_eq!(Device::cuda(1).to_string(), "cuda:1");
        for bad in ["gpu", "cuda:-1", "cuda:x", "cpu:0", ""] {
            assert!(matches!(bad.parse::<Device>(), Err(Error::InvalidDeviceString { .. })), "{bad}");
        }
        assert!(matches!("cpu".cuda_device(), Err(Error::NotCudaDevice { .. })));
        assert!(matches!(Device::Cpu.cuda_device(), Err(Error::NotCudaDevice { .. })));
        assert_eq!("cuda".cuda_device().unwrap(), None);
        assert_eq!("cuda:2".cuda_device().unwrap(), Some(2));
        assert_eq!(Device::Cuda(None).cuda_device().unwrap(), None);
        assert_eq!(3.cuda_device().unwrap(), Some(3));
        assert_eq!(None::<usize>.cuda_device().unwrap(), None);
    }
}
