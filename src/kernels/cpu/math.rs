//! Scalar math the standard library lacks: `erfc` (for GELU's exact, erf-based form).

use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// The complementary error function `1 - erf(x)`, to about 1e-15 relative accuracy.
///
/// `|x| < 1`: the Maclaurin series of `erf`; beyond: the continued fraction
/// `erfc(x) = e^{-x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))`, evaluated bottom-up.
pub(crate) fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 1.0 {
        return 1.0 - erf_series(x);
    }
    if x > 27.0 {
        return 0.0; // below the smallest subnormal
    }
    let mut frac = x;
    for k in (1..=200).rev() {
        frac = x + (k as f64 / 2.0) / frac;
    }
    (-x * x).exp() / (PI.sqrt() * frac)
}

/// `erf(x)` for small `|x|` by its Maclaurin series `2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))`.
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x2 / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-17 * sum.abs() {
            break;
        }
    }
    sum * 2.0 / PI.sqrt()
}

/// GELU, exact form: `x · Φ(x) = x/2 · erfc(-x/√2)`.
pub(crate) fn gelu(x: f64) -> f64 {
    0.5 * x * erfc(-x * FRAC_1_SQRT_2)
}

/// `√(2/π)`, the scale of GELU's tanh approximation.
const GELU_TANH_BETA: f64 = 0.797_884_560_802_865_4;

/// GELU's tanh approximation, `x/2 · (1 + tanh(u))` with `u = √(2/π) (x + 0.044715 x³)`, as the
/// equal `x · σ(2u)` (accurate for x < 0, where `1 + tanh(u)` cancels).
pub(crate) fn gelu_tanh(x: f64) -> f64 {
    x * sigmoid(2.0 * GELU_TANH_BETA * (x + 0.044715 * x * x * x))
}

/// The logistic function, without overflow for large `|x|`.
pub(crate) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_known_values() {
        // Values from Abramowitz & Stegun / high-precision tables.
        let known = [
            (0.0, 1.0),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (2.0, 0.004_677_734_981_047_266),
            (3.0, 2.209_049_699_858_544e-5),
            (5.0, 1.537_459_794_428_035e-12),
            (-1.0, 1.842_700_792_949_715),
        ];
        for (x, want) in known {
            let got = erfc(x);
            assert!(((got - want) / want).abs() < 1e-13, "erfc({x}) = {got}, want {want}");
        }
        let (below, above) = (erfc(1.0 - 1e-12), erfc(1.0));
        assert!((below - above - 4.151e-13).abs() < 1e-15, "the two methods meet at 1: {below} vs {above}");
    }

    #[test]
    fn gelu_and_sigmoid() {
        assert!((gelu(1.0) - 0.841_344_746_068_542_9).abs() < 1e-14);
        assert!((gelu(-3.0) + 0.004_049_694_094_890_284).abs() < 1e-14);
        assert_eq!(sigmoid(-1000.0), 0.0);
        assert_eq!(sigmoid(1000.0), 1.0);
        assert!((sigmoid(0.3) - 1.0 / (1.0 + (-0.3f64).exp())).abs() < 1e-16);
    }
}
