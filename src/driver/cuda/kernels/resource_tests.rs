//! The registers and spills of the kernels whose launch policies assume an occupancy, from
//! ptxas's report through NVRTC (no GPU needed).

use super::elementwise_policy as codegen;
use super::nvrtc::{nvrtc_present, resource_report};
use super::vocab::{EwOp, ModuleKey};
use crate::dtype::DType;
use crate::kernel::{BinaryOp, ReduceOp};
use std::collections::HashMap;

/// ptxas's registers and spill-store bytes of every kernel in a report of
/// [`resource_report`], by name.
fn kernel_resources(report: &str) -> HashMap<String, (u32, u32)> {
    let mut out = HashMap::new();
    let mut name = String::new();
    let number_before = |line: &str, word: &str| -> Option<u32> {
        let head = &line[..line.find(word)?];
        head.split_whitespace().last()?.parse().ok()
    };
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            name = rest.split('\'').next().unwrap_or_default().to_owned();
            out.insert(name.clone(), (u32::MAX, u32::MAX));
        }
        let e = out.get_mut(&name);
        if let (Some(e), Some(n)) = (e, number_before(line, " bytes spill stores")) {
            e.1 = n;
        }
        if let (Some(e), Some(n)) = (out.get_mut(&name), number_before(line, " registers")) {
            e.0 = n;
        }
    }
    out
}

/// The occupancy the launch policies were measured with (sm_90, blocks of 256 threads): the
/// two-dimensional elementwise kernel in 32 registers (48 cost every broadcast case 2.5–4 µs on
/// the H200), the transpose kernel's pairs in 32 without spills (`elementwise_policy::tile_pairs`), and
/// nn.Linear's vector product in 64 without spills (`gv_dots`: 128 halved its speed), and the
/// half types' `x @ w` in 64 without spills (`gv_rows`, four blocks per SM), and the column
/// reductions in 128 without spills (`red_colsv`: two blocks per SM), the strided kernel with
/// its vector lane in 48 without spills (32–40 when written; five blocks per SM), the wide
/// one-output reduction in 64 (`red_block8`: four blocks per SM at least). Registers
/// are the compiler's choice, so the budgets hold for the NVRTC they were read with, CI's (12.9);
/// another version's figures are printed, not judged.
#[test]
fn kernels_fit_the_registers_their_launches_assume() {
    if !nvrtc_present() {
        crate::testing::skip(1, "libnvrtc not found");
        return;
    }
    use DType::*;
    let judged = std::cell::Cell::new(true);
    let report = |k: &ModuleKey| {
        let (version, r) = resource_report(&k.source(), 9, 0).unwrap_or_else(|e| panic!("{k:?}: {e}"));
        if version != (12, 9) {
            judged.set(false);
        }
        let found = kernel_resources(&r);
        eprintln!("NVRTC {}.{} {k:?}: {found:?}", version.0, version.1);
        found
    };
    // `name` within `max` registers and, unless `spills` allows some, without spill stores.
    let fits = |found: &HashMap<String, (u32, u32)>, k: &ModuleKey, name: &str, max: u32, spills: bool| {
        let (regs, spilled) = found.get(name).copied().unwrap_or((u32::MAX, u32::MAX));
        let ok = regs <= max && (spills || spilled == 0);
        assert!(ok || !judged.get(), "{k:?}: {name} takes {regs} registers and {spilled} bytes of spills");
    };
    for d in [F32, BF16, F16] {
        for b in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum] {
            let k = ModuleKey::Elementwise { op: EwOp::Binary(b, d), out: d, ins: [d, d, Bool] };
            let found = report(&k);
            fits(&found, &k, "ew_2d", 32, false);
            fits(&found, &k, "ew_s", 48, false);
            if codegen::tile_pairs(EwOp::Binary(b, d), d, [d, d, Bool]) {
                // `div` and `maximum` spill a word (4 bytes) in 32 registers; measured faster still.
                fits(&found, &k, "ew_tile", 32, matches!(b, BinaryOp::Div | BinaryOp::Maximum));
            }
        }
        let raw = codegen::raw_dtype(d);
        let copy = ModuleKey::Elementwise { op: EwOp::Copy, out: raw, ins: [raw, Bool, Bool] };
        let found = report(&copy);
        fits(&found, &copy, "ew_2d", 32, false);
        fits(&found, &copy, "ew_s", 48, false);
        if d.size() == 2 {
            fits(&found, &copy, "ew_tile", 32, false);
        }
        let gemv = ModuleKey::Gemv { dtype: d };
        let found = report(&gemv);
        fits(&found, &gemv, "gv_dots", 64, false);
        // `gv_rows` launches half a wave; measured with four or more blocks per SM (f32 weights
        // take it under the card's `gemv_rows`).
        fits(&found, &gemv, "gv_rows", 64, false);
        fits(&found, &gemv, "gv_rows8", 64, false);
        // A column reduction split over rows takes two blocks per SM, which fit at 128.
        for (op, out) in [(ReduceOp::Sum, d), (ReduceOp::Max, d), (ReduceOp::ArgMax, DType::I64)] {
            let red = ModuleKey::Reduce { op, src: d, dst: out, values: false };
            let found = report(&red);
            fits(&found, &red, "red_colsv", 128, false);
            if op == ReduceOp::Sum && d == F32 {
                // The one-output reduction's wide variant (`sum_loads=8`, the default) in 64: four
                // blocks per SM, 64 KiB of loads in flight on each.
                fits(&found, &red, "red_block8", 64, false);
            }
        }
    }
}
