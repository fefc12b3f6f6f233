//! Box–Muller in `f32` with its own logarithm, sine and cosine, written as the same sequence of
//! correctly rounded `f32` operations (`+`, `−`, `×`, `÷`, `√`, fused multiply-add) as the CUDA
//! kernel's `bm_*` functions (`driver/cuda/kernels/cu/random.cu`), so the simulated machine and
//! a GPU give the same bits: every step is an IEEE operation with one rounding (`f32::mul_add`
//! here, `__fmaf_rn` there; nothing left for a compiler to contract; the kernel's division and
//! square root are the fast paths of CUDA's correctly rounded ones, which the operands here never
//! leave), and the integer steps are integer math.
//!
//! * `u1 = w0 · 2^−32 + 2^−33` (the word rounded to `f32`, then one fused multiply-add: `(0, 1]`,
//!   as cuRAND's uniform), and `ln u1` from `u1 = m · 2^e` with `m ∈ [√½, √2)`: `f = m − 1`
//!   (exact), `s = f / (2 + f)`, `ln(1 + f) = f − (f²/2 − s (f²/2 + s² Q(s²)))` with `Q` the
//!   series of `2 artanh` to the `s⁸` term, plus `e · ln 2` in two parts;
//! * the angle in quarter turns from the top 24 bits `k` of `w1`: `q = ⌊(k + 2^21) / 2^22⌋`,
//!   `r = (k − q·2^22) · 2^−22 ∈ [−½, ½)` (integer math, exact), `sin(π r / 2)` and `cos(π r / 2)`
//!   by their Taylor polynomials (to `r¹¹` and `r¹⁰`), then rotated by `q` quarter turns;
//! * `ρ = √(−2 ln u1)`, the pair `(ρ cos θ, ρ sin θ)`.
//!
//! The logarithm is within [`LN_ULP`] and the sine and cosine within [`SINCOS_ULP`] `f32` ulp of
//! the exact values (tested over every input), so each normal is within a few ulp of the
//! `f64` formula on the same words.

/// `ln 2` rounded to `f32` and the rest.
const LN2_HI: f32 = f32::from_bits(0x3f31_7218);
const LN2_LO: f32 = f32::from_bits(0xb102_e308);
/// `2/3, 2/5, 2/7, 2/9` (the series of `2 artanh(s) / s − 2` in `s²`).
const L: [f32; 4] = [
    f32::from_bits(0x3f2a_aaab),
    f32::from_bits(0x3ecc_cccd),
    f32::from_bits(0x3e92_4925),
    f32::from_bits(0x3e63_8e39),
];
/// `(−1)^k (π/2)^(2k+1) / (2k+1)!`, `k = 0..6`.
const S: [f32; 6] = [
    f32::from_bits(0x3fc9_0fdb),
    f32::from_bits(0xbf25_5de7),
    f32::from_bits(0x3da3_35e3),
    f32::from_bits(0xbb99_6966),
    f32::from_bits(0x3928_3c1a),
    f32::from_bits(0xb671_83a8),
];
/// `(−1)^k (π/2)^(2k) / (2k)!`, `k = 1..6`.
const C: [f32; 5] = [
    f32::from_bits(0xbf9d_e9e6),
    f32::from_bits(0x3e81_e0f8),
    f32::from_bits(0xbcaa_e9e4),
    f32::from_bits(0x3a70_fa83),
    f32::from_bits(0xb7d3_68f9),
];

/// The largest error of [`ln_f32`] on `(0, 1]`, in `f32` ulp of the result.
pub const LN_ULP: u32 = 2;
/// The largest error of the sine and cosine of [`sincos_quarter`], in `f32` ulp of the result.
pub const SINCOS_ULP: u32 = 2;

/// `ln x` of a positive normal `x ≤ 1` (module docs).
pub fn ln_f32(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = (bits >> 23) as i32 - 127;
    let mant = bits & 0x007f_ffff;
    let m = if mant > 0x0035_04f3 {
        e += 1;
        f32::from_bits(mant | 0x3f00_0000)
    } else {
        f32::from_bits(mant | 0x3f80_0000)
    };
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let q = z.mul_add(z.mul_add(z.mul_add(L[3], L[2]), L[1]), L[0]);
    let hfsq = (0.5 * f) * f;
    let g = s.mul_add(z.mul_add(q, hfsq), -hfsq);
    let l = f + g;
    let ef = e as f32;
    ef.mul_add(LN2_HI, ef.mul_add(LN2_LO, l))
}

/// `(sin θ, cos θ)` of `θ = 2π k / 2^24` for `k < 2^24` (module docs).
pub fn sincos_quarter(k: u32) -> (f32, f32) {
    let q = (k + (1 << 21)) >> 22;
    let r = (k as i32 - (q << 22) as i32) as f32 * f32::from_bits(0x3480_0000);
    let w = r * r;
    let ps = w.mul_add(w.mul_add(w.mul_add(w.mul_add(w.mul_add(S[5], S[4]), S[3]), S[2]), S[1]), S[0]);
    let s = r * ps;
    let c = w.mul_add(w.mul_add(w.mul_add(w.mul_add(w.mul_add(C[4], C[3]), C[2]), C[1]), C[0]), 1.0);
    match q & 3 {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// The standard normal pair `(ρ cos θ, ρ sin θ)` of two Philox words (module docs).
pub fn box_muller_f32(w0: u32, w1: u32) -> (f32, f32) {
    let u1 = (w0 as f32).mul_add(f32::from_bits(0x2f80_0000), f32::from_bits(0x2f00_0000));
    let rho = (-2.0 * ln_f32(u1)).sqrt();
    let (s, c) = sincos_quarter(w1 >> 8);
    (rho * c, rho * s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, exact: f64) -> f64 {
        let b = exact as f32;
        let ulp = f32::from_bits(b.abs().to_bits() + 1) - b.abs();
        (f64::from(a) - exact).abs() / f64::from(ulp)
    }

    #[test]
    fn constants_are_what_they_say() {
        assert_eq!(f32::from_bits(0x3480_0000), 2f32.powi(-22));
        assert_eq!(f32::from_bits(0x2f80_0000), 2f32.powi(-32));
        assert_eq!(f32::from_bits(0x2f00_0000), 2f32.powi(-33));
        let h = std::f64::consts::FRAC_PI_2;
        let fact = |n: u32| (1..=n).map(f64::from).product::<f64>();
        for (k, s) in S.iter().enumerate() {
            let want = (-1f64).powi(k as i32) * h.powi(2 * k as i32 + 1) / fact(2 * k as u32 + 1);
            assert_eq!(*s, want as f32, "S[{k}]");
        }
        for (k, c) in C.iter().enumerate() {
            let want = (-1f64).powi(k as i32 + 1) * h.powi(2 * k as i32 + 2) / fact(2 * k as u32 + 2);
            assert_eq!(*c, want as f32, "C[{k}]");
        }
        for (k, l) in L.iter().enumerate() {
            assert_eq!(*l, (2.0 / (2 * k + 3) as f64) as f32);
        }
        assert_eq!(LN2_HI, std::f64::consts::LN_2 as f32);
        assert_eq!(LN2_LO, (std::f64::consts::LN_2 - f64::from(LN2_HI)) as f32);
    }

    /// Every `u1` the generator makes from the words `k · 2^8` and a spread of others, against
    /// the `f64` logarithm.
    #[test]
    fn the_logarithm_is_within_its_bound() {
        let mut worst = 0f64;
        for w in (0..=u32::MAX).step_by(97).chain([0, 1, 2, 255, 256, u32::MAX]) {
            let u1 = (w as f32).mul_add(2f32.powi(-32), 2f32.powi(-33));
            let got = ln_f32(u1);
            let exact = f64::from(u1).ln();
            if exact == 0.0 {
                assert_eq!(got, 0.0);
                continue;
            }
            worst = worst.max(ulps(got, exact));
        }
        assert!(worst <= f64::from(LN_ULP), "ln is {worst} ulp off");
    }

    /// Every angle, against the `f64` sine and cosine.
    #[test]
    fn sine_and_cosine_are_within_their_bound() {
        let mut worst = 0f64;
        for k in 0..1u32 << 24 {
            let (s, c) = sincos_quarter(k);
            // The exact values by the same quarter-turn reduction (exact) in f64.
            let q = (k + (1 << 21)) >> 22;
            let x = std::f64::consts::FRAC_PI_2 * f64::from(k as i32 - (q << 22) as i32) * 2f64.powi(-22);
            let (xs, xc) = (x.sin(), x.cos());
            let (es, ec) = [(xs, xc), (xc, -xs), (-xs, -xc), (-xc, xs)][(q & 3) as usize];
            for (got, exact) in [(s, es), (c, ec)] {
                if exact == 0.0 {
                    assert_eq!(got, 0.0);
                } else {
                    worst = worst.max(ulps(got, exact));
                }
            }
        }
        assert!(worst <= f64::from(SINCOS_ULP), "sincos is {worst} ulp off");
    }
}
