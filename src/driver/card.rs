//! The card profile: the launch choices that depend on the card rather than on the op, computed
//! once per device from its properties ([`CardFacts`], from [`DeviceProperties`] or the CUDA
//! driver's attributes) by one function, [`CardProfile::of`], and overridden by hand for tuning
//! runs ([`CardOverrides`], `CUDASEM_BENCH_TUNING`'s `key=value` items).
//!
//! The card's balance is its memory bandwidth per SM and per SM clock cycle
//! ([`CardFacts::bytes_per_sm_cycle`]: `2 × memory clock × bus width / 8 / (SMs × SM clock)`, the
//! double data rate of HBM and GDDR as the driver reports their clocks). An H100 SXM (132 SMs at
//! 1.98 GHz, HBM3 at 2.619 GHz on 5,120 bits: 3.35 TB/s) has 12.8 bytes a cycle per SM; an H200
//! (the same SMs, HBM3e at 3.2 GHz on 6,144 bits: 4.9 TB/s) 18.8; an A100 SXM or an H100 PCIe
//! about 10. A half-type `sin` of a [4096, 4096] tensor (4 bytes moved per element and about 40
//! instructions) computes at about 11 bytes a cycle per SM (22.5 µs on both cards, session 20
//! and 21's op matrices): on the H200 it is compute-bound, on the H100 memory-bound.
//!
//! Choices:
//! * `heavy_vectors` — the 16-byte vectors each thread of the fast elementwise kernel takes for
//!   the functions that are compute-bound on a card of much bandwidth (half-type `sin` / `cos`,
//!   f16 `tanh`, f32 `pow`: `elementwise_policy::ew_heavy`): 4 at [`RICH_BYTES_PER_SM_CYCLE`] (15) or
//!   more (their loads then overlap the math of the vectors before them: measured best on the
//!   H200, 4–7 % over one), else 2 (the four left `sin` / `cos` at 0.94 on the H100); 4 when a
//!   clock is unknown (the H200's measured choice, kept before this profile). On a card of less
//!   bandwidth it holds for bf16 `sin` / `cos` alone: `mid_vectors` below.
//! * `sum_blocks` and `sum_loads` — the grid and the loads in flight of a reduction into one
//!   output (`sum_f32_1gib`: `a.sum()` of 2^28 f32): 0 blocks per SM (as many as fit at once:
//!   one wave of 256-thread blocks) and the wide kernel (`sum_loads=8`; sums and means of `f32`
//!   and `f64`, `reduce_layouts::wide_block`) on every card. The
//!   arithmetic: the 1 GiB read takes 0.32 ms at the H100's 3.35 TB/s; keeping it busy wants
//!   bandwidth × latency ≈ 3.35 TB/s × 0.7 µs ≈ 2.3 MB in flight, 18 KB per SM (26 KB on the
//!   H200), more under load. The narrow kernel (`red_block`, 40 registers, six blocks per SM)
//!   unrolls four loads, but ptxas issues each just before its additions (NVRTC 12.9's SASS:
//!   `LDG.E.128` then at once `F2F.F64.F32` of its registers), so a thread has one 16-byte load in
//!   flight: 24 KB per SM, at the edge of the need. The wide kernel (`red_block8`, 64 registers,
//!   four blocks per SM) issues the next four loads before it adds the four before them (a value
//!   carried round the loop): four in flight a thread, 64 KB per SM, with the same additions in
//!   the same order (the same bits). PyTorch's `reduce_kernel` (`Reduce.cuh`: blocks of 512
//!   threads, 16-byte loads into four `float` accumulators, `ctas_per_output` = 2,048 blocks,
//!   about four waves, the last block combining their partials) stays at 0.98–0.99 × of it
//!   with the narrow kernel on the H100 (session 21). The grid stays one wave: the bytes in flight,
//!   not more blocks, are what the arithmetic asks for; `bench/sweep_card.sh` measures both.
//! * `ew_threads` — the threads of a block of the fast elementwise kernel over a tensor of more
//!   than a wave of vectors: 128 (PyTorch's `vectorized_elementwise_kernel` block: twice the
//!   blocks, half the work each) on a card rich in bandwidth, 256 on the others (and where a clock
//!   is unknown, 128 as for the H200). Measured with `bench/sweep_card.sh` beside PyTorch: on the
//!   H200 (session 31) 128 gained 1–3 % on every half-type case of the sweep over 256 (`sin_bf16`
//!   23.32 → 22.97 µs, `cos_bf16` 22.92 → 22.29, `neg_f16` 19.12 → 18.86, `relu_f16` 19.20 →
//!   18.88; two lines of the same choices differed by at most 0.3 %), 64 lost 20 % on the
//!   memory-bound ones; on the H100 (session 29) no half-type case moved beyond the run's spread
//!   (`neg_f16` 25.60 → 25.76 µs, `sin_bf16` 26.61 → 26.60, `add_f16` 36.32 → 36.39).
//! * `norm_blocks`, `norm_threads`, `norm_early` — the layer / RMS norm kernels' grid, in blocks
//!   per SM taking rows in turn (0: a block a row, the hardware scheduling them), their block (a
//!   row's threads; its vectors or values a thread follow) and whether they are launched early
//!   (programmatic stream serialization, as `early_waves` launches the elementwise kernel): 8,
//!   256 and 1 on every card. PyTorch's kernel runs a block of 128 a row; `bench/sweep_card.sh`
//!   sweeps all three beside `F.layer_norm` / `F.rms_norm`. The early launch, measured on the
//!   H100 (session 37, one run): `layer_norm_bf16_8192x4096` 0.0556 → 0.0541 ms,
//!   `rms_norm_bf16_8192x4096` 0.0524 → 0.0512, and 1.0–1.7 µs on each of the two other grids
//!   and blocks it was paired with (lines of the same launch differed by at most 0.6 µs); the
//!   H200's `rms_norm_bf16_8192x4096` (0.92 × PyTorch in session 31) is not measured with it.
//! * `mid_vectors` — of the heavy functions, bf16 `sin` and `cos` take
//!   `heavy_vectors`; the others (f16 `sin` / `cos` / `tanh`, f32 `pow`) `mid_vectors`: 4 like
//!   them on a card rich in bandwidth, where all are compute-bound, but 1 on one of less, where
//!   only bf16 `sin` and `cos` are (Nsight Compute on the H100, session 32: 15.3 M warp
//!   instructions over [4096, 4096] against f16's 13.7 M, the wider range's reduction). On the
//!   H100 (session 33, same runs, µs): f16 `sin` 26.2 with two vectors a thread, 25.7 with one
//!   (one at a time); `cos` 26.2 → 25.7; f16 `tanh` 25.9 → 25.6; f32 `pow` 71.2 → 69.1; bf16 `sin`
//!   26.4 with two one at a time, 26.7 with one — PyTorch's layout, one vector a thread, is then
//!   the memory-bound functions' best, and two the compute-bound ones'.
//! * `early_waves` — the fast elementwise kernel's and the softmax kernels' grids of at least this
//!   many waves of blocks are launched with programmatic stream serialization, eager or captured
//!   (`Ctx::run_early`): the next kernel's blocks are scheduled as the one before it drains, and
//!   wait for it in their first statement. 2 on every card (compute capability 9.0 and later;
//!   below, the plain launch). On the H100 (session 34, each line beside PyTorch in one run):
//!   `neg_f16` 25.86 → 24.32 µs, `relu_f16` 25.93 → 24.22, `add_bf16` 36.72 → 34.96, `neg_f32`
//!   48.06 → 46.26, `sin_bf16` 26.53 → 24.79; 1 and 2 the same within the spread, 4 lost the gain
//!   on grids of two to four waves (`exp_f16`, `sin_bf16`: back to 25.8 / 26.4); the op matrix's
//!   geomean 1.354 → 1.387, from 45 cases below parity to none. The softmax kernels (session 35,
//!   two pairs of lines beside PyTorch in one run): `softmax_f32_rows128` 48.48 / 48.32 → 46.79 /
//!   46.82 µs, `log_softmax_f32_rows128` 48.42 / 48.28 → 46.75 / 46.77, `softmax_bf16_rows128`
//!   26.44 / 26.26 → 24.97 / 24.96, rows of 32,768 (under a wave: plain) unchanged. Grids of one
//!   wave stay plain: on the H200 (session 8) the attribute on every launch lost up to a third on
//!   reductions of one wave and tiled copies.
//! * `heavy_unroll` — whether the fast elementwise kernel of the heavy functions takes two of
//!   its vectors at a time (1: each module's `ew_f*` entry) or one (0: its `ew_g*` entry). Two at
//!   a time hold both in registers: the bf16 `sin` kernel takes 44 a thread, five blocks of 256
//!   an SM, where one at a time takes 32 and fills it, as PyTorch's kernel does (Nsight Compute
//!   on the H100, session 32: the same instructions as PyTorch's, 2–3 % more cycles; session 33,
//!   the results rounded a pair at a time: 2.8 % fewer instructions than PyTorch's). 0 on a card
//!   of less bandwidth (H100, session 33: bf16 `sin` 26.75 / 26.80 → 26.37 / 26.39 µs, `cos`
//!   26.66 / 26.61 → 26.34 / 26.30, in two runs), 1 on one rich in bandwidth, where the four
//!   vectors' loads overlap the math of the ones before them (session 7's measured choice;
//!   `bench/sweep_card.sh` measures both).
//! * `gemv_rows` — the row-vector product of a row-major weight (`x @ w`, a decode step's): its
//!   kernel `gv_rows` (rows split over the blocks of half a wave, one launch) takes half-type
//!   weights; bit 1 sends f32 weights to it too, where cuBLASLt's kernel otherwise reads them
//!   (`matmul_f32_vec`: 64 MiB in 25.8 µs on the H100, 2.6 TB/s, at parity with PyTorch's, which
//!   reaches the same library); bit 2 launches it early as `early_waves` does the elementwise
//!   kernel; bit 4 takes its variant `gv_rows8` (groups of eight rows a lane, four blocks an SM:
//!   four of f32's 16-byte loads in flight a thread where `gv_rows` has two, by NVRTC 12.9's
//!   SASS). 0 on every card: on the H100 (session 35, `bench/sweep_card.sh`'s `gemv` lines, µs)
//!   f32 `gv_rows` 28.39 against cuBLASLt's 25.84, launched early 27.16; the half types launched
//!   early 10.79 / 10.73 against 10.02 / 10.05; on another H100 the same session, f32 `gv_rows`
//!   over a whole wave of blocks instead of half, 27.72 / 27.91 against 25.71 / 25.25 (the same
//!   ratio: half a wave kept); on the H200, as `gemv.rs` notes, f32 `gv_rows` 21.4–21.7 against
//!   cuBLASLt's 19.5–19.9. Session 36 (H100, the same sweep with `gv_rows8`): f32 through `gv_rows8`
//!   26.92 against `gv_rows`' 27.80, launched early 25.87 against 26.88, cuBLASLt 25.24–25.43
//!   (PyTorch's 25.86): eight rows in flight gain 3–4 % and still lose to cuBLASLt; the half
//!   types through `gv_rows8` 9.82–10.17 against `gv_rows`' 9.97–10.29 (1.9 × PyTorch either way,
//!   within the run's spread).

use super::DeviceProperties;
use crate::config::CardOverrides;

/// Bytes of memory bandwidth per SM and SM clock cycle from which a card counts as rich in
/// bandwidth: between the H100 SXM's 12.8 and the H200's 18.8, below their midpoint so that an
/// H200 whose driver reported a slower memory clock (2.6 GHz: 15.4) would still count.
pub const RICH_BYTES_PER_SM_CYCLE: f64 = 15.0;

/// What the card profile is computed from: the device's properties that set its balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CardFacts {
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Compute capability, major part.
    pub major: u32,
    /// Compute capability, minor part.
    pub minor: u32,
    /// Peak SM clock in kHz (0: unknown).
    pub clock_khz: u32,
    /// Peak memory clock in kHz (0: unknown).
    pub memory_clock_khz: u32,
    /// Memory bus width in bits (0: unknown).
    pub bus_bits: u32,
    /// L2 cache in bytes.
    pub l2_bytes: usize,
}

impl From<&DeviceProperties> for CardFacts {
    fn from(p: &DeviceProperties) -> CardFacts {
        CardFacts {
            sms: p.multi_processor_count,
            major: p.major,
            minor: p.minor,
            clock_khz: p.clock_rate,
            memory_clock_khz: p.memory_clock_rate,
            bus_bits: p.memory_bus_width,
            l2_bytes: p.l2_cache_size,
        }
    }
}

impl CardFacts {
    /// Peak memory bandwidth in bytes per second (double data rate: two transfers a memory
    /// clock), 0 when the clock or the bus is unknown.
    pub fn bandwidth(&self) -> f64 {
        2.0 * self.memory_clock_khz as f64 * 1e3 * self.bus_bits as f64 / 8.0
    }

    /// [`CardFacts::bandwidth`] per SM and SM clock cycle; `None` when a figure is unknown.
    pub fn bytes_per_sm_cycle(&self) -> Option<f64> {
        let compute = self.sms as f64 * self.clock_khz as f64 * 1e3;
        let b = self.bandwidth();
        (compute > 0.0 && b > 0.0).then(|| b / compute)
    }
}

/// The launch choices of one card (see the module documentation for each and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardProfile {
    /// What the choices were computed from.
    pub facts: CardFacts,
    /// Vectors per thread of the fast elementwise kernel of the heavy functions.
    pub heavy_vectors: u32,
    /// Blocks per SM of a reduction into one output (0: as many as fit at once).
    pub sum_blocks: u32,
    /// 16-byte loads of that reduction's loop (4: the narrow kernel, 8: the wide one, whose next
    /// four are in flight while it adds the four before them).
    pub sum_loads: u32,
    /// Threads of a block of the fast elementwise kernel over a large tensor.
    pub ew_threads: u32,
    /// Blocks per SM of the norm kernels' grid (0: a block a row).
    pub norm_blocks: u32,
    /// Threads of a block of the norm kernels.
    pub norm_threads: u32,
    /// Whether the fast elementwise kernel of the heavy functions takes two vectors at a time (1)
    /// or one (0).
    pub heavy_unroll: u32,
    /// Vectors per thread of the heavy functions that stay memory-bound on a card of less
    /// bandwidth (all but bf16 `sin` and `cos`).
    pub mid_vectors: u32,
    /// Waves of blocks from which a grid of the fast elementwise kernel or of a softmax kernel
    /// over rows is launched early
    /// (programmatic stream serialization, captured or not; 0: never).
    pub early_waves: u32,
    /// The row-vector product kernel of a row-major weight (`gv_rows`): bit 1, f32 weights take
    /// it too (else cuBLASLt); bit 2, it is launched early (programmatic stream serialization);
    /// bit 4, its variant with eight rows a lane in flight (`gv_rows8`).
    pub gemv_rows: u32,
    /// Whether the norm kernels are launched early (1: programmatic stream serialization at any
    /// grid; 0: as every other kernel).
    pub norm_early: u32,
}

impl CardProfile {
    /// The card's own choices.
    pub fn of(facts: CardFacts) -> CardProfile {
        let rich = facts.bytes_per_sm_cycle().is_none_or(|b| b >= RICH_BYTES_PER_SM_CYCLE);
        let (heavy_vectors, mid_vectors, heavy_unroll, ew_threads) = if rich { (4, 4, 1, 128) } else { (2, 1, 0, 256) };
        CardProfile {
            facts,
            heavy_vectors,
            sum_blocks: 0,
            sum_loads: 8,
            ew_threads,
            norm_blocks: 8,
            norm_threads: 256,
            heavy_unroll,
            mid_vectors,
            early_waves: 2,
            gemv_rows: 0,
            norm_early: 1,
        }
    }

    /// [`CardProfile::of`] the device's properties.
    pub fn from_properties(p: &DeviceProperties) -> CardProfile {
        CardProfile::of(p.into())
    }

    /// These choices with the ones `o` sets by hand in their place.
    pub fn with(self, o: &CardOverrides) -> CardProfile {
        CardProfile {
            heavy_vectors: o.heavy_vectors.unwrap_or(self.heavy_vectors),
            sum_blocks: o.sum_blocks.unwrap_or(self.sum_blocks),
            sum_loads: o.sum_loads.unwrap_or(self.sum_loads),
            ew_threads: o.ew_threads.unwrap_or(self.ew_threads),
            norm_blocks: o.norm_blocks.unwrap_or(self.norm_blocks),
            norm_threads: o.norm_threads.unwrap_or(self.norm_threads),
            heavy_unroll: o.heavy_unroll.unwrap_or(self.heavy_unroll),
            mid_vectors: o.mid_vectors.unwrap_or(self.mid_vectors),
            early_waves: o.early_waves.unwrap_or(self.early_waves),
            gemv_rows: o.gemv_rows.unwrap_or(self.gemv_rows),
            norm_early: o.norm_early.unwrap_or(self.norm_early),
            ..self
        }
    }
}

impl std::fmt::Display for CardProfile {
    /// The choices as `CUDASEM_BENCH_TUNING` names them, then the balance they came from:
    /// `heavy_vectors=2 sum_blocks=0 sum_loads=8 ew_threads=256 norm_blocks=8 norm_threads=256
    /// heavy_unroll=0 mid_vectors=1 early_waves=2 gemv_rows=0 norm_early=1 (12.8 B/cycle/SM, 3352 GB/s, 132
    /// SMs, cc 9.0)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.facts;
        write!(
            f,
            "heavy_vectors={} sum_blocks={} sum_loads={} ew_threads={} norm_blocks={} norm_threads={} heavy_unroll={} mid_vectors={} early_waves={} gemv_rows={} norm_early={} (",
            self.heavy_vectors,
            self.sum_blocks,
            self.sum_loads,
            self.ew_threads,
            self.norm_blocks,
            self.norm_threads,
            self.heavy_unroll,
            self.mid_vectors,
            self.early_waves,
            self.gemv_rows,
            self.norm_early
        )?;
        match c.bytes_per_sm_cycle() {
            Some(b) => write!(f, "{b:.1} B/cycle/SM, {:.0} GB/s", c.bandwidth() / 1e9)?,
            None => f.write_str("bandwidth unknown")?,
        }
        write!(f, ", {} SMs, cc {}.{})", c.sms, c.major, c.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H100 SXM's and an H200's figures as their drivers report them.
    fn h100() -> CardFacts {
        CardFacts {
            sms: 132,
            major: 9,
            minor: 0,
            clock_khz: 1_980_000,
            memory_clock_khz: 2_619_000,
            bus_bits: 5120,
            l2_bytes: 50 << 20,
        }
    }

    fn h200() -> CardFacts {
        CardFacts { memory_clock_khz: 3_201_000, bus_bits: 6144, l2_bytes: 60 << 20, ..h100() }
    }

    #[test]
    fn the_balance_is_bandwidth_per_sm_cycle() {
        assert!((h100().bandwidth() / 1e12 - 3.352).abs() < 1e-3, "{}", h100().bandwidth());
        assert!((h200().bandwidth() / 1e12 - 4.917).abs() < 1e-3, "{}", h200().bandwidth());
        let b = |f: CardFacts| f.bytes_per_sm_cycle().unwrap();
        assert!((b(h100()) - 12.82).abs() < 0.01, "{}", b(h100()));
        assert!((b(h200()) - 18.81).abs() < 0.01, "{}", b(h200()));
        assert_eq!(CardFacts { clock_khz: 0, ..h100() }.bytes_per_sm_cycle(), None);
        assert_eq!(CardFacts { memory_clock_khz: 0, ..h100() }.bytes_per_sm_cycle(), None);
        assert_eq!(CardFacts { sms: 0, ..h100() }.bytes_per_sm_cycle(), None);
    }

    /// The H100 takes two vectors a thread for bf16 `sin` / `cos`, one for the other heavy
    /// functions, one at a time, and blocks of 256 for the fast elementwise kernel; the H200 four
    /// for all, two at a time, and 128; a card of unknown clocks keeps the H200's measured
    /// choices; the reduction's and the norms' choices are the same on all.
    #[test]
    fn the_choices_follow_the_balance() {
        let p = CardProfile::of(h100());
        assert_eq!((p.heavy_vectors, p.sum_blocks, p.sum_loads, p.ew_threads), (2, 0, 8, 256));
        let p = CardProfile::of(h200());
        assert_eq!((p.heavy_vectors, p.sum_blocks, p.sum_loads, p.ew_threads), (4, 0, 8, 128));
        assert_eq!((p.norm_blocks, p.norm_threads), (8, 256), "the norms' grid and block on every card");
        assert_eq!((p.early_waves, CardProfile::of(h100()).early_waves), (2, 2), "early from two waves on every card");
        assert_eq!(
            (p.norm_early, CardProfile::of(h100()).norm_early),
            (1, 1),
            "the norms launched early on every card"
        );
        assert_eq!((p.mid_vectors, p.heavy_unroll), (4, 1), "four for every heavy function, two at a time");
        let p = CardProfile::of(h100());
        assert_eq!((p.mid_vectors, p.heavy_unroll), (1, 0), "the memory-bound ones one a thread, one at a time");
        let unknown = CardProfile::of(CardFacts { clock_khz: 0, ..h100() });
        assert_eq!(
            (unknown.heavy_vectors, unknown.mid_vectors, unknown.heavy_unroll, unknown.ew_threads),
            (4, 4, 1, 128)
        );
        // An A100 SXM (108 SMs at 1.41 GHz, 1.555 TB/s): 10.2 bytes a cycle per SM.
        let a100 = CardFacts { sms: 108, clock_khz: 1_410_000, memory_clock_khz: 1_215_000, ..h100() };
        let p = CardProfile::of(a100);
        assert_eq!((p.heavy_vectors, p.mid_vectors, p.heavy_unroll), (2, 1, 0));
        // The threshold itself counts as rich (2 × 1 MHz × 60 bits / 8 over one SM at 1 MHz).
        let edge = CardFacts { sms: 1, clock_khz: 1000, memory_clock_khz: 1000, bus_bits: 60, ..h100() };
        assert_eq!(edge.bytes_per_sm_cycle(), Some(RICH_BYTES_PER_SM_CYCLE));
        assert_eq!(CardProfile::of(edge).heavy_vectors, 4);
    }

    #[test]
    fn overrides_replace_only_what_they_name() {
        let p = CardProfile::of(h100());
        assert_eq!(p.with(&CardOverrides::default()), p);
        let o = CardOverrides {
            heavy_vectors: Some(8),
            sum_loads: Some(4),
            ew_threads: Some(128),
            heavy_unroll: Some(1),
            mid_vectors: Some(3),
            early_waves: Some(0),
            gemv_rows: Some(3),
            ..Default::default()
        };
        let q = p.with(&o);
        assert_eq!((q.heavy_vectors, q.sum_blocks, q.sum_loads, q.ew_threads, q.facts), (8, 0, 4, 128, p.facts));
        assert_eq!((q.heavy_unroll, q.mid_vectors, q.norm_blocks, q.early_waves), (1, 3, p.norm_blocks, 0));
        assert_eq!((q.gemv_rows, p.gemv_rows), (3, 0));
        assert_eq!(
            p.to_string(),
            "heavy_vectors=2 sum_blocks=0 sum_loads=8 ew_threads=256 norm_blocks=8 norm_threads=256 heavy_unroll=0 mid_vectors=1 early_waves=2 gemv_rows=0 norm_early=1 (12.8 B/cycle/SM, 3352 GB/s, 132 SMs, cc 9.0)"
        );
        let unknown = CardProfile::of(CardFacts { memory_clock_khz: 0, ..h200() });
        assert_eq!(
            unknown.to_string(),
            "heavy_vectors=4 sum_blocks=0 sum_loads=8 ew_threads=128 norm_blocks=8 norm_threads=256 heavy_unroll=1 mid_vectors=4 early_waves=2 gemv_rows=0 norm_early=1 (bandwidth unknown, 132 SMs, cc 9.0)"
        );
    }
}
