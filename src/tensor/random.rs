//! Random tensors: `torch.rand`, `randn`, `randint`, `rand_like`, `randn_like`, the in-place
//! samplers `uniform_`, `normal_`, `bernoulli_`, `exponential_`, `random_`, and `F.dropout`.
//!
//! Each draw is one [`KernelOp::Random`] on the tensor's device (on the CPU for host tensors),
//! from the device's default generator or a given [`Generator`] (the `_gen` forms: the
//! generator decides the device of a new tensor and must be of an existing tensor's device). A
//! draw writes each element once; a non-contiguous tensor is filled through a contiguous one.
//! Arguments are checked as PyTorch checks them, with its wording.

use super::exec::{Exec, Place};
use super::generator::{default_generator, Generator};
use super::{IntoShape, Tensor};
use crate::device::IntoDevice;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{Distribution, KernelOp, RandomOp};

fn invalid(op: &'static str, reason: String) -> Error {
    Error::InvalidArgument { op, reason }
}

fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType { op, dtype })
    }
}

/// The values an integer draw into `dtype` may take, `[min, max]` (floats: the integers they
/// hold exactly, as PyTorch's `random_` bounds them).
fn int_bounds(dtype: DType) -> (i128, i128) {
    match dtype {
        DType::Bool => (0, 1),
        DType::U8 => (0, 255),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::I64 => (i64::MIN.into(), i64::MAX.into()),
        DType::F16 => (-(1 << 11), 1 << 11),
        DType::BF16 => (-(1 << 8), 1 << 8),
        DType::F32 => (-(1 << 24), 1 << 24),
        DType::F64 => (-(1 << 53), 1 << 53),
    }
}

/// [`Distribution::Integers`] for `[low, high)` into `dtype`, checked as PyTorch's `random_`.
fn integers(op: &'static str, low: i64, high: i64, dtype: DType) -> Result<Distribution> {
    if low >= high {
        return Err(invalid(
            op,
            format!("random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"),
        ));
    }
    let (min, max) = int_bounds(dtype);
    if i128::from(low) < min || i128::from(high) - 1 > max {
        return Err(invalid(
            op,
            format!("random_ expects 'from' and 'to' - 1 to be within [{min}, {max}] for {dtype}, got [{low}, {high})"),
        ));
    }
    Ok(Distribution::Integers { low, range: (i128::from(high) - i128::from(low)) as u64 })
}

fn generator_for(op: &'static str, place: Place, gen: Option<&Generator>) -> Result<Generator> {
    match gen {
        None => Ok(default_generator(place)),
        Some(g) if g.place() == place => Ok(g.clone()),
        Some(g) => Err(invalid(
            op,
            format!("Expected a '{}' device type for generator but found '{}'", place.device(), g.device()),
        )),
    }
}

impl Tensor {
    /// Fills `self` with `dist` from `gen` (the device's default generator when `None`); `src`
    /// is dropout's input (same shape and dtype, contiguous).
    pub(super) fn draw_(
        &self,
        op: &'static str,
        dist: Distribution,
        gen: Option<&Generator>,
        src: Option<&Tensor>,
    ) -> Result<()> {
        self.check_writable(op)?;
        let place = self.place();
        let gen = generator_for(op, place, gen)?;
        if self.numel() == 0 {
            return Ok(());
        }
        if !self.is_contiguous() {
            let dense = Tensor::empty_at(self.shape(), self.dtype, place)?;
            dense.draw_(op, dist, Some(&gen), src)?;
            return self.copy_(&dense, false);
        }
        let exec = Exec::on(place);
        let stream = place.stream()?;
        let philox = gen.reserve(dist.blocks(self.numel(), self.dtype), stream.as_ref())?;
        let random = RandomOp { dist, dst: self.buffer_view(), src: src.map(Tensor::buffer_view), philox };
        match src {
            Some(x) => exec.run(&KernelOp::Random(Box::new(random)), &[self, x]),
            None => exec.run(&KernelOp::Random(Box::new(random)), &[self]),
        }
    }

    /// A new tensor of `shape` and `dtype` on `place` filled with `dist`.
    fn drawn(
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        place: Place,
        dist: Distribution,
        gen: Option<&Generator>,
    ) -> Result<Tensor> {
        let t = Tensor::empty_at(shape, dtype, place)?;
        t.draw_(op, dist, gen, None)?;
        Ok(t)
    }

    /// Uniform random numbers in `[0, 1)` (`torch.rand`) from `device`'s default generator;
    /// floating-point dtypes only. Reproducible with [`crate::manual_seed`], the same on the
    /// simulated machine and every GPU.
    pub fn rand(shape: impl IntoShape, dtype: DType, device: impl IntoDevice) -> Result<Tensor> {
        float_only("rand", dtype)?;
        let place = Place::resolve(device.into_device()?)?;
        Tensor::drawn("rand", shape.into_shape().sizes("rand")?, dtype, place, UNIT, None)
    }

    /// [`Tensor::rand`] from `gen`, on its device (`torch.rand(…, generator=g)`).
    pub fn rand_gen(shape: impl IntoShape, dtype: DType, gen: &Generator) -> Result<Tensor> {
        float_only("rand", dtype)?;
        Tensor::drawn("rand", shape.into_shape().sizes("rand")?, dtype, gen.place(), UNIT, Some(gen))
    }

    /// Standard normal random numbers (`torch.randn`); floating-point dtypes only.
    /// Reproducible with [`crate::manual_seed`], the same on the simulated machine and every GPU
    /// (within the bound in [`TRANSCENDENTAL_ULP_F64`](crate::cuda::TRANSCENDENTAL_ULP_F64)'s docs).
    pub fn randn(shape: impl IntoShape, dtype: DType, device: impl IntoDevice) -> Result<Tensor> {
        float_only("randn", dtype)?;
        let place = Place::resolve(device.into_device()?)?;
        Tensor::drawn("randn", shape.into_shape().sizes("randn")?, dtype, place, STANDARD, None)
    }

    /// [`Tensor::randn`] from `gen`, on its device.
    pub fn randn_gen(shape: impl IntoShape, dtype: DType, gen: &Generator) -> Result<Tensor> {
        float_only("randn", dtype)?;
        Tensor::drawn("randn", shape.into_shape().sizes("randn")?, dtype, gen.place(), STANDARD, Some(gen))
    }

    /// Integers uniform in `[low, high)` (`torch.randint(low, high, size, dtype=…)`), any dtype
    /// that holds them.
    pub fn randint(
        low: i64,
        high: i64,
        shape: impl IntoShape,
        dtype: DType,
        device: impl IntoDevice,
    ) -> Result<Tensor> {
        let dist = integers("randint", low, high, dtype)?;
        let place = Place::resolve(device.into_device()?)?;
        Tensor::drawn("randint", shape.into_shape().sizes("randint")?, dtype, place, dist, None)
    }

    /// [`Tensor::randint`] from `gen`, on its device.
    pub fn randint_gen(low: i64, high: i64, shape: impl IntoShape, dtype: DType, gen: &Generator) -> Result<Tensor> {
        let dist = integers("randint", low, high, dtype)?;
        Tensor::drawn("randint", shape.into_shape().sizes("randint")?, dtype, gen.place(), dist, Some(gen))
    }

    /// Uniform numbers in `[0, 1)` of this tensor's shape, dtype and device (`torch.rand_like`).
    pub fn rand_like(&self) -> Result<Tensor> {
        float_only("rand_like", self.dtype)?;
        Tensor::drawn("rand_like", self.shape(), self.dtype, self.place(), UNIT, None)
    }

    /// Standard normal numbers of this tensor's shape, dtype and device (`torch.randn_like`).
    pub fn randn_like(&self) -> Result<Tensor> {
        float_only("randn_like", self.dtype)?;
        Tensor::drawn("randn_like", self.shape(), self.dtype, self.place(), STANDARD, None)
    }

    /// Fills the tensor with numbers uniform in `[low, high)` (`Tensor.uniform_`).
    pub fn uniform_(&self, low: f64, high: f64) -> Result<()> {
        self.uniform_gen_impl(low, high, None)
    }

    /// [`Tensor::uniform_`] from `gen`.
    pub fn uniform_gen_(&self, low: f64, high: f64, gen: &Generator) -> Result<()> {
        self.uniform_gen_impl(low, high, Some(gen))
    }

    fn uniform_gen_impl(&self, low: f64, high: f64, gen: Option<&Generator>) -> Result<()> {
        float_only("uniform_", self.dtype)?;
        if low.partial_cmp(&high).is_none_or(|o| o.is_gt()) || !(high - low).is_finite() {
            return Err(invalid(
                "uniform_",
                format!("uniform_ expects to return a [from, to) range, but found from={low} > to={high}"),
            ));
        }
        self.draw_("uniform_", Distribution::Uniform { low, high }, gen, None)
    }

    /// Fills the tensor with normal numbers of `mean` and `std` (`Tensor.normal_`).
    pub fn normal_(&self, mean: f64, std: f64) -> Result<()> {
        self.normal_gen_impl(mean, std, None)
    }

    /// [`Tensor::normal_`] from `gen`.
    pub fn normal_gen_(&self, mean: f64, std: f64, gen: &Generator) -> Result<()> {
        self.normal_gen_impl(mean, std, Some(gen))
    }

    fn normal_gen_impl(&self, mean: f64, std: f64, gen: Option<&Generator>) -> Result<()> {
        float_only("normal_", self.dtype)?;
        if std.is_nan() || std < 0.0 {
            return Err(invalid("normal_", format!("normal expects std >= 0.0, but found std {std}")));
        }
        self.draw_("normal_", Distribution::Normal { mean, std }, gen, None)
    }

    /// Sets each element to 1 with probability `p`, else 0 (`Tensor.bernoulli_(p)`), any dtype.
    pub fn bernoulli_(&self, p: f64) -> Result<()> {
        self.bernoulli_gen_impl(p, None)
    }

    /// [`Tensor::bernoulli_`] from `gen`.
    pub fn bernoulli_gen_(&self, p: f64, gen: &Generator) -> Result<()> {
        self.bernoulli_gen_impl(p, Some(gen))
    }

    fn bernoulli_gen_impl(&self, p: f64, gen: Option<&Generator>) -> Result<()> {
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid("bernoulli_", format!("bernoulli_ expects p to be in [0, 1], but got p={p}")));
        }
        self.draw_("bernoulli_", Distribution::Bernoulli { p }, gen, None)
    }

    /// Fills the tensor with exponential numbers of rate `lambd` (`Tensor.exponential_`).
    pub fn exponential_(&self, lambd: f64) -> Result<()> {
        self.exponential_gen_impl(lambd, None)
    }

    /// [`Tensor::exponential_`] from `gen`.
    pub fn exponential_gen_(&self, lambd: f64, gen: &Generator) -> Result<()> {
        self.exponential_gen_impl(lambd, Some(gen))
    }

    fn exponential_gen_impl(&self, lambd: f64, gen: Option<&Generator>) -> Result<()> {
        float_only("exponential_", self.dtype)?;
        if lambd.is_nan() || lambd <= 0.0 || lambd.is_infinite() {
            return Err(invalid(
                "exponential_",
                format!("exponential_ expects lambda > 0.0, but found lambda={lambd}"),
            ));
        }
        self.draw_("exponential_", Distribution::Exponential { lambda: lambd }, gen, None)
    }

    /// Fills the tensor with integers uniform over what its dtype holds (`Tensor.random_()`):
    /// `[0, max]` for integers, `[0, 2^digits]` for floats (every value exact), 0 or 1 for bool.
    pub fn random_(&self) -> Result<()> {
        let (_, max) = int_bounds(self.dtype);
        let high = i64::try_from(max + 1).unwrap_or(i64::MAX);
        let dist = match self.dtype {
            // [0, i64::MAX]: a range of 2^63.
            DType::I64 => Distribution::Integers { low: 0, range: 1 << 63 },
            d => integers("random_", 0, high, d)?,
        };
        self.draw_("random_", dist, None, None)
    }

    /// Fills the tensor with integers uniform in `[from, to)` (`Tensor.random_(from, to)`).
    pub fn random_range_(&self, from: i64, to: i64) -> Result<()> {
        self.draw_("random_", integers("random_", from, to, self.dtype)?, None, None)
    }

    /// [`Tensor::random_range_`] from `gen`.
    pub fn random_range_gen_(&self, from: i64, to: i64, gen: &Generator) -> Result<()> {
        self.draw_("random_", integers("random_", from, to, self.dtype)?, Some(gen), None)
    }

    /// Dropout (`F.dropout(x, p, training)`): in training, each element zeroed with
    /// probability `p` and the others scaled by `1 / (1 − p)` (a new tensor); otherwise the
    /// tensor itself. Floating-point dtypes.
    pub fn dropout(&self, p: f64, train: bool) -> Result<Tensor> {
        self.dropout_impl(p, train, None)
    }

    /// [`Tensor::dropout`] from `gen`.
    pub fn dropout_gen(&self, p: f64, train: bool, gen: &Generator) -> Result<Tensor> {
        self.dropout_impl(p, train, Some(gen))
    }

    fn dropout_impl(&self, p: f64, train: bool, gen: Option<&Generator>) -> Result<Tensor> {
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid("dropout", format!("dropout probability has to be between 0 and 1, but got {p}")));
        }
        float_only("dropout", self.dtype)?;
        if !train {
            return Ok(self.clone());
        }
        let x = self.contiguous()?;
        let out = Tensor::empty_at(self.shape(), self.dtype, self.place())?;
        out.draw_("dropout", Distribution::Dropout { p }, gen, Some(&x))?;
        Ok(out)
    }
}

/// `[0, 1)`.
const UNIT: Distribution = Distribution::Uniform { low: 0.0, high: 1.0 };
/// Mean 0, deviation 1.
const STANDARD: Distribution = Distribution::Normal { mean: 0.0, std: 1.0 };
