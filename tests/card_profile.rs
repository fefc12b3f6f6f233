//! The card profile (a hidden bench API, `cudasem::cuda::card_profile`): the launch choices
//! computed from each device's properties as `src/driver/card.rs` documents, on the simulated
//! machine (its default GPU has an H100 SXM's clocks and bus) and on a GPU.

mod common;

use common::is_sim;
use cudasem::{cuda, CardFacts, CardProfile, Result, RICH_BYTES_PER_SM_CYCLE};

/// Bandwidth per SM cycle of at least 15 bytes (or unknown) gives four vectors per thread to
/// the heavy functions, two at a time; less, two to bf16 `sin` / `cos` and one to the others, one
/// at a time; the one-output reduction takes one wave and the wide kernel.
#[test]
fn the_card_profile_follows_the_device_properties() -> Result<()> {
    let hand_set = std::env::var("CUDASEM_BENCH_TUNING").is_ok_and(|v| !v.trim().is_empty());
    for i in 0..cuda::device_count() {
        let props = cuda::get_device_properties(Some(i))?;
        let p = cuda::card_profile(Some(i))?;
        let facts = CardFacts::from(&props);
        assert_eq!(p.facts, facts);
        assert_eq!(
            (facts.sms, facts.clock_khz, facts.bus_bits),
            (props.multi_processor_count, props.clock_rate, props.memory_bus_width)
        );
        if hand_set {
            continue;
        }
        assert_eq!(p, CardProfile::from_properties(&props));
        let rich = facts.bytes_per_sm_cycle().is_none_or(|b| b >= RICH_BYTES_PER_SM_CYCLE);
        let want = if rich { (4, 4, 1, 128) } else { (2, 1, 0, 256) };
        assert_eq!((p.heavy_vectors, p.mid_vectors, p.heavy_unroll, p.ew_threads), want, "{p}");
        assert_eq!((p.sum_blocks, p.sum_loads), (0, 8), "{p}");
        if is_sim() {
            // 2 × 2.619 GHz × 640 bytes over 132 SMs at 1.98 GHz: 12.8 bytes a cycle per SM.
            let b = facts.bytes_per_sm_cycle().expect("the sim reports its clocks");
            assert!((b - 12.82).abs() < 0.01, "{b}");
            assert_eq!(p.heavy_vectors, 2);
            assert!(
                p.to_string().starts_with(
                    "heavy_vectors=2 sum_blocks=0 sum_loads=8 ew_threads=256 norm_blocks=8 norm_threads=256 heavy_unroll=0 mid_vectors=1 early_waves=2 gemv_rows=0 norm_early=1 (12.8 B/cycle/SM"
                ),
                "{p}"
            );
        }
    }
    Ok(())
}
