//! The sampling figures (step `random`): `multinomial_32x50257` (µs per
//! `multinomial(probs, 1, replacement=true)` of `f32` probabilities `[32, 50257]`, as
//! `torch.multinomial`; `multinomial_32x50257_graphed`: the same draw captured alone, µs per replay)
//! and `e2e_decode_sample_graphed` (µs per replay of a captured decode
//! sampler: logits `[8, 50257]` → `softmax(1)` → `multinomial(1)`, as `torch.cuda.graphs`). Each
//! first checks the device's picks against the host driver's (`Device::Cpu`) from the same
//! generator state and the same probabilities: the same integers.

use super::measure::{check, event_ms, Sizes, StepResult};
use cudasem::cuda::{self, CUDAGraph, Generator, GraphOptions};
use cudasem::{DType, Device, Tensor};

/// A GPT-2 vocabulary.
const VOCAB: usize = 50257;

/// The picks of `probs` (on the device) from the state `state`, on the host driver.
fn host_picks(probs: &Tensor, state: &[u8]) -> cudasem::Result<Vec<i64>> {
    let g = Generator::new(Device::Cpu)?;
    g.set_state(state)?;
    probs.to(Device::Cpu, false)?.multinomial_gen(1, true, &g)?.to_vec::<i64>()
}

/// The two rows.
pub fn rows(s: &Sizes) -> StepResult {
    let g = Generator::new(Device::cuda(0))?;
    g.manual_seed(20261206);
    let probs = Tensor::randn_gen([32, VOCAB], DType::F32, &g)?.mul(3.0)?.softmax(1)?;
    let state = g.get_state();
    let picks = probs.multinomial_gen(1, true, &g)?.to_vec::<i64>()?;
    check(picks == host_picks(&probs, &state)?, || "multinomial's picks differ from the host driver's".into())?;
    let sample = event_ms(s.warmup, s.runs, s.reps, || probs.multinomial_gen(1, true, &g).map(drop))? * 1e3;
    // The same draw captured alone: the kernel, without the host's check and wait.
    let mut alone = CUDAGraph::new();
    let picked = cuda::graph(&mut alone, GraphOptions::default(), || probs.multinomial(1, true))?;
    let state = cuda::get_rng_state(0)?;
    alone.replay()?;
    check(picked.to_vec::<i64>()? == host_picks(&probs, &state)?, || "the captured multinomial's picks differ".into())?;
    let sample_graphed = event_ms(0, s.runs, s.decode_steps, || alone.replay())? * 1e3;

    let logits = Tensor::randn_gen([8, VOCAB], DType::F32, &g)?.mul(3.0)?;
    let mut graph = CUDAGraph::new();
    let (p, next) = cuda::graph(&mut graph, GraphOptions::default(), || {
        let p = logits.softmax(1)?;
        let next = p.multinomial(1, true)?;
        Ok::<_, cudasem::Error>((p, next))
    })?;
    let check_replay = |when: &str| -> Result<(), super::measure::Stop> {
        let state = cuda::get_rng_state(0)?;
        graph.replay()?;
        let got = next.to_vec::<i64>()?;
        check(got == host_picks(&p, &state)?, || format!("the graphed sampler's picks {when} differ from the host's"))
    };
    check_replay("before timing")?;
    let replay_us = event_ms(0, s.runs, s.decode_steps, || graph.replay())? * 1e3;
    check_replay("after timing")?;
    Ok(vec![
        ("multinomial_32x50257", sample),
        ("multinomial_32x50257_graphed", sample_graphed),
        ("e2e_decode_sample_graphed", replay_us),
    ])
}
