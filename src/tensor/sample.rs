//! Sampling: `torch.multinomial` over the rows of a weight tensor (a decode loop's sampler) and
//! `torch.randperm`, as [`KernelOp::Random`](crate::kernel::KernelOp::Random) ops on the
//! tensor's device, from its default generator or a given one (the `_gen` forms). The weights
//! are checked as PyTorch checks them (non-negative, finite, a positive sum per row, enough
//! categories without replacement) by the sampling kernel itself, which writes a status word
//! per row after its picks; the host reads those words (one read, which waits for the kernel,
//! as PyTorch's `.item()` check does) and returns PyTorch's error (the draw's Philox blocks are
//! spent). Inside a CUDA-graph capture, where the host may not wait, the kernel's documented
//! fallbacks stand instead.

use super::exec::Place;
use super::generator::Generator;
use super::Tensor;
use crate::device::IntoDevice;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::random::multinomial_status;
use crate::kernel::Distribution;

fn invalid(op: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument { op, reason: reason.into() }
}

/// Checks the weights' values as PyTorch does from the row's status words the sampling kernel
/// wrote after its picks ([`multinomial_status`]; one read of `rows` numbers, which waits for the
/// kernel, as PyTorch's `.item()` check waits): a negative, NaN or infinite weight anywhere,
/// then a row without positive weight, then (without replacement) a row with fewer positive
/// weights than samples.
fn check_weights(status: &Tensor) -> Result<()> {
    let any = status.to_vec::<i64>()?.into_iter().fold(0, |a, s| a | s);
    if any & multinomial_status::BAD != 0 {
        return Err(invalid("multinomial", "probability tensor contains either `inf`, `nan` or element < 0"));
    }
    if any & multinomial_status::ZERO_SUM != 0 {
        return Err(invalid("multinomial", "invalid multinomial distribution (sum of probabilities <= 0)"));
    }
    if any & multinomial_status::TOO_FEW != 0 {
        return Err(invalid(
            "multinomial",
            "invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)",
        ));
    }
    Ok(())
}

impl Tensor {
    /// `num_samples` category indices (`I64`) drawn from each row of this tensor of weights
    /// (`torch.multinomial(input, num_samples, replacement)`: 1-D → `[num_samples]`, 2-D
    /// `[rows, categories]` → `[rows, num_samples]`); without replacement a row's samples are
    /// distinct.
    pub fn multinomial(&self, num_samples: usize, replacement: bool) -> Result<Tensor> {
        self.multinomial_impl(num_samples, replacement, None)
    }

    /// [`Tensor::multinomial`] from `gen`.
    pub fn multinomial_gen(&self, num_samples: usize, replacement: bool, gen: &Generator) -> Result<Tensor> {
        self.multinomial_impl(num_samples, replacement, Some(gen))
    }

    fn multinomial_impl(&self, samples: usize, replacement: bool, gen: Option<&Generator>) -> Result<Tensor> {
        let op = "multinomial";
        if !matches!(self.dim(), 1 | 2) {
            return Err(invalid(op, format!("prob_dist must be 1 or 2 dim, got {}", self.dim())));
        }
        if !self.dtype.is_float() {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype });
        }
        let (rows, cats) = if self.dim() == 1 { (1, self.shape()[0]) } else { (self.shape()[0], self.shape()[1]) };
        if samples == 0 {
            return Err(invalid(op, "cannot sample n_sample <= 0 samples"));
        }
        if cats == 0 {
            return Err(invalid(op, "number of categories cannot be 0"));
        }
        if !replacement && samples > cats {
            return Err(invalid(
                op,
                format!("cannot sample n_sample > prob_dist.size(-1) samples without replacement ({samples} > {cats})"),
            ));
        }
        if cats > 1 << 24 {
            return Err(invalid(op, "number of categories cannot exceed 2^24"));
        }
        let w = self.contiguous()?.reshape([rows, cats])?;
        // The picks, then a status word per row (the weights' check, made by the same kernel).
        let picked = rows * samples;
        let flat = Tensor::empty_at(&[picked + rows], DType::I64, self.place())?;
        flat.draw_(op, Distribution::Multinomial { samples, replacement }, gen, Some(&w))?;
        let capturing = matches!(self.place(), Place::Cuda(_)) && crate::runtime::is_current_stream_capturing()?;
        if !capturing {
            check_weights(&flat.narrow(0, picked, rows)?)?;
        }
        let out = flat.narrow(0, 0, picked)?;
        if self.dim() == 1 {
            return out.reshape([samples]);
        }
        out.reshape([rows, samples])
    }

    /// A random permutation of `0..n` (`torch.randperm(n, dtype=…)`), any dtype that holds
    /// `n − 1` exactly.
    pub fn randperm(n: usize, dtype: DType, device: impl IntoDevice) -> Result<Tensor> {
        let place = Place::resolve(device.into_device()?)?;
        Tensor::randperm_on(n, dtype, place, None)
    }

    /// [`Tensor::randperm`] from `gen`, on its device.
    pub fn randperm_gen(n: usize, dtype: DType, gen: &Generator) -> Result<Tensor> {
        Tensor::randperm_on(n, dtype, gen.place(), Some(gen))
    }

    fn randperm_on(n: usize, dtype: DType, place: Place, gen: Option<&Generator>) -> Result<Tensor> {
        let max: u64 = match dtype {
            DType::Bool => 1,
            DType::U8 => 255,
            DType::I32 => i32::MAX as u64,
            DType::I64 => i64::MAX as u64,
            DType::F16 => 1 << 11,
            DType::BF16 => 1 << 8,
            DType::F32 => 1 << 24,
            DType::F64 => 1 << 53,
        };
        if n > 0 && (n - 1) as u64 > max {
            return Err(invalid("randperm", format!("n is too large for result tensor type: '{dtype}' (n = {n})")));
        }
        let t = Tensor::empty_at(&[n], dtype, place)?;
        t.draw_("randperm", Distribution::Permutation, gen, None)?;
        Ok(t)
    }
}
