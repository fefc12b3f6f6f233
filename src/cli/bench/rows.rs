//! The rows of the bench's table: what each figure is ([`RowSpec`], [`ROWS`]), the steps that
//! measure them and `--only`'s choice among those, and what came of one side of a row ([`Outcome`]).

/// The allocator trace `replay_resnet50` replays, carried inside the binary (bench/traces/README.md).
pub const RESNET50_TRACE: &str = include_str!("../../../bench/traces/resnet50_train.csv");

/// One row of the table: a figure measured on both sides.
#[derive(Debug, Clone, Copy)]
pub struct RowSpec {
    /// The row's name (in the table and the JSON).
    pub name: &'static str,
    /// The step that measures it (what `--only` selects; several rows may share one).
    pub step: &'static str,
    /// The unit of both values.
    pub unit: &'static str,
    /// Whether a smaller value is better (times, bytes); else a larger one is (rates).
    pub lower_is_better: bool,
    /// The speedup (cudasem over PyTorch, > 1 = cudasem better) the project aims at.
    pub goal: Option<f64>,
}

const fn row(name: &'static str, step: &'static str, unit: &'static str, lower: bool, goal: f64) -> RowSpec {
    RowSpec { name, step, unit, lower_is_better: lower, goal: if goal > 0.0 { Some(goal) } else { None } }
}

/// Every row, in the order the steps run (steps in the order of their first row).
pub const ROWS: &[RowSpec] = &[
    row("alloc_free_pair", "alloc_free_pair", "ns", true, 2.0),
    row("alloc_free_pair_512b", "alloc_free_pair", "ns", true, 0.0),
    row("alloc_free_pair_64mib", "alloc_free_pair", "ns", true, 0.0),
    row("alloc_free_pair_stacks", "alloc_free_pair_stacks", "ns", true, 0.0),
    row("alloc_free_pair_history", "alloc_free_pair_stacks", "ns", true, 0.0),
    row("empty_tensor", "empty_tensor", "ns", true, 2.0),
    row("small_op", "small_op", "ns", true, 1.6),
    row("small_op_cpp", "small_op", "ns", true, 0.0),
    row("add_f32_256m", "add_f32_256m", "GB/s", false, 1.0),
    row("sum_f32_1gib", "sum_f32_1gib", "GB/s", false, 1.0),
    row("matmul_fp32_8192", "matmul_fp32_8192", "TFLOP/s", false, 0.98),
    row("matmul_tf32_8192", "matmul_tf32_8192", "TFLOP/s", false, 0.98),
    row("matmul_bf16_8192", "matmul_bf16_8192", "TFLOP/s", false, 0.98),
    row("h2d_pinned_1gib", "h2d_pinned_1gib", "GB/s", false, 0.98),
    row("d2h_pinned_1gib", "d2h_pinned_1gib", "GB/s", false, 0.98),
    row("h2d_pageable_1gib", "h2d_pageable_1gib", "GB/s", false, 0.0),
    row("p2p_copy_1gib", "p2p_copy_1gib", "GB/s", false, 0.95),
    row("replay_resnet50", "replay_resnet50", "bytes", true, 1.0),
    row("e2e_mlp_pipeline_bf16", "e2e_mlp_pipeline_bf16", "ms", true, 1.05),
    row("e2e_decode_step", "e2e_decode_step", "µs", true, 1.5),
    row("e2e_decode_step_graphed", "e2e_decode_step_graphed", "µs", true, 1.0),
    row("graph_replay_10", "graph_replay", "ns", true, 1.25),
    row("graph_replay_100", "graph_replay", "ns", true, 1.25),
    row("graph_replay_1000", "graph_replay", "ns", true, 1.25),
    row("graph_device_per_op_100", "graph_replay", "ns", true, 1.0),
    row("graph_eager_device_per_op_100", "graph_replay", "ns", true, 0.0),
    row("graph_capture_100", "graph_replay", "ms", true, 2.0),
    row("allreduce_1gib_busbw", "allreduce", "GB/s", false, 1.0),
    row("allreduce_8kib_latency", "allreduce", "µs", true, 1.0),
    row("user_kernel_launch_host", "user_kernel_launch_host", "ns", true, 5.0),
    row("user_kernel_launch_raw_cudarc", "user_kernel_launch_raw_cudarc", "ns", true, 0.0),
    row("randn_f32_256m", "random", "GB/s", false, 1.0),
    row("rand_bf16_256m", "random", "GB/s", false, 1.0),
    row("dropout_bf16_8192x8192", "random", "GB/s", false, 1.0),
    row("multinomial_32x50257", "random", "µs", true, 3.0),
    row("multinomial_32x50257_graphed", "random", "µs", true, 0.0),
    row("e2e_decode_sample_graphed", "random", "µs", true, 1.1),
    row("jit_swiglu_bf16", "jit_swiglu", "µs", true, 1.0),
    row("jit_swiglu_bf16_eager", "jit_swiglu", "µs", true, 1.6),
    row("jit_small_call_host", "jit_small_call", "ns", true, 2.0),
    row("jit_first_call_cold", "jit_first_call", "ms", true, 0.0),
    row("jit_first_call_warm", "jit_first_call", "ms", true, 0.0),
    row("jit_first_call_warm_disk", "jit_first_call", "ms", true, 0.0),
    row("sdpa_bf16_causal_b8_h16_t1024_e64", "sdpa", "ms", true, 0.8),
    row("sdpa_bf16_causal_b1_h32_t4096_e128", "sdpa", "ms", true, 0.8),
    row("sdpa_decode_bf16_b8_h32_s8192_e128", "sdpa", "ms", true, 0.8),
    row("sdpa_bf16_b4_h16_t2048_e128", "sdpa", "ms", true, 0.8),
    row("layer_norm_bf16_8192x4096", "norms", "ms", true, 1.0),
    row("rms_norm_bf16_8192x4096", "norms", "ms", true, 1.0),
    row("softmax_f32_8x50257", "vocab_softmax", "ms", true, 1.0),
    row("log_softmax_bf16_1x128256", "vocab_softmax", "ms", true, 1.0),
    row("lm_head_bf16_8192x1024x50257", "lm_head", "ms", true, 1.0),
    row("e2e_gpt_block_bf16_b8_t1024_d1024_h16", "gpt_block", "ms", true, 0.9),
    row("e2e_gpt_block_bf16_b1_t2048_d2048_h16", "gpt_block", "ms", true, 0.9),
    // Last: PyTorch's CUDA Sanitizer cannot be switched off once on.
    row("small_op_sanitized", "small_op_sanitized", "ns", true, 20.0),
    row("small_op_sanitized_no_stacks", "small_op_sanitized", "ns", true, 0.0),
];

/// The steps (what `--only` names), in run order.
pub fn steps() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in ROWS {
        if !out.contains(&r.step) {
            out.push(r.step);
        }
    }
    out
}

/// What happened to one side of one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Measured (already checked against the reference).
    Value(f64),
    /// Not measurable on this machine (e.g. one GPU for a peer copy), with the reason.
    Skipped(String),
    /// An error or a wrong result, with the reason.
    Failed(String),
    /// Not run (PyTorch disabled or unavailable), with the reason.
    Missing(String),
}

impl Outcome {
    /// The value, when measured.
    pub fn value(&self) -> Option<f64> {
        match self {
            Outcome::Value(v) => Some(*v),
            _ => None,
        }
    }

    /// The reason there is no value.
    pub fn note(&self) -> Option<String> {
        match self {
            Outcome::Value(_) => None,
            Outcome::Skipped(r) => Some(format!("skipped: {r}")),
            Outcome::Failed(r) => Some(format!("failed: {r}")),
            Outcome::Missing(r) => Some(r.clone()),
        }
    }
}

/// Parses `--only`: known step names (or row names, which select their step), comma-separated.
pub fn parse_only(only: Option<&str>) -> Result<Vec<&'static str>, String> {
    let all = steps();
    let Some(list) = only else { return Ok(all) };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let step =
            all.iter().copied().find(|s| *s == name).or_else(|| ROWS.iter().find(|r| r.name == name).map(|r| r.step));
        match step {
            Some(s) if !chosen.contains(&s) => chosen.push(s),
            Some(_) => {}
            None => return Err(format!("unknown figure `{name}` in --only; the figures are: {}", all.join(", "))),
        }
    }
    if chosen.is_empty() {
        return Err(format!("--only names no figure; the figures are: {}", all.join(", ")));
    }
    // Run order is the table's order, whatever order --only gave.
    Ok(all.into_iter().filter(|s| chosen.contains(s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_steps_in_run_order_and_rejects_unknown_names() {
        assert_eq!(parse_only(Some("small_op,alloc_free_pair")).unwrap(), ["alloc_free_pair", "small_op"]);
        assert_eq!(parse_only(Some("small_op_cpp")).unwrap(), ["small_op"]);
        assert!(parse_only(Some("nope")).unwrap_err().contains("unknown figure `nope`"));
        assert!(parse_only(Some(",")).is_err());
        assert_eq!(parse_only(Some("graph_capture_100,graph_replay_10")).unwrap(), ["graph_replay"]);
        assert_eq!(parse_only(Some("allreduce_8kib_latency")).unwrap(), ["allreduce"]);
        assert_eq!(
            parse_only(Some("rms_norm_bf16_8192x4096,sdpa_decode_bf16_b8_h32_s8192_e128")).unwrap(),
            ["sdpa", "norms"]
        );
        assert_eq!(parse_only(Some("small_op_sanitized_no_stacks")).unwrap(), ["small_op_sanitized"]);
        assert_eq!(parse_only(Some("alloc_free_pair_history")).unwrap(), ["alloc_free_pair_stacks"]);
        assert_eq!(
            parse_only(Some("lm_head_bf16_8192x1024x50257,softmax_f32_8x50257")).unwrap(),
            ["vocab_softmax", "lm_head"]
        );
        assert_eq!(parse_only(None).unwrap().len(), 31);
    }

    #[test]
    fn the_trace_is_embedded() {
        assert!(RESNET50_TRACE.starts_with("action,addr,size,stream"));
    }
}
