//! A picture of device memory: record the caching allocator's history, run a small workload,
//! and write the page `cudasem memviz` writes (the active memory timeline, the segments at the
//! peak, a summary) — `torch.cuda.memory._record_memory_history()` + `_dump_snapshot()` +
//! `pytorch.org/memory_viz`, in one program. Checks the picture's figures against the
//! allocator's own and exits non-zero if they disagree.
//!
//! `cargo run --example memory_picture [OUT.html]` (default: memory_picture.html in the temporary
//! folder; other arguments are ignored); the snapshot is written beside it as a pickle PyTorch's
//! memory_viz opens too.
use cudasem::cuda::{self, memory::format_bytes};
use cudasem::memviz::{self, Options};
use cudasem::{DType, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The page's path is the argument ending in `.html`; others (a test harness's flags and their
    // values: the example runs as a test target too) are not file names.
    let out = std::env::args()
        .skip(1)
        .find(|a| a.ends_with(".html"))
        .map_or_else(|| std::env::temp_dir().join("memory_picture.html"), Into::into);
    cuda::record_memory_history(true, 100_000)?;

    // A two-layer MLP forward over six batches of different sizes, keeping each batch's row
    // sums: the weights stay, activations come and go, and blocks of one size land in holes left
    // by another.
    let w1 = Tensor::randn([16, 8192], DType::F32, "cuda")?; // 512 KiB
    let w2 = Tensor::randn([8192, 16], DType::F32, "cuda")?; // 512 KiB
    let mut kept = Vec::new();
    for rows in [64, 48, 80, 32, 96, 56] {
        let x = Tensor::randn([rows, 16], DType::F32, "cuda")?; // 2 to 6 KiB
        let h = x.matmul(&w1)?.relu()?; // 1 to 3 MiB (and the matmul's output before relu)
        let y = h.matmul(&w2)?.softmax(-1)?; // 2 to 6 KiB
        kept.push(y.sum(&[-1], false)?); // a few hundred bytes, kept
    }
    let row_sums = kept[5].to_vec::<f32>()?;
    assert!(row_sums.iter().all(|s| (s - 1.0).abs() < 1e-3), "softmax rows sum to 1");

    let device = cuda::current_device()?;
    let snapshot = cuda::memory_snapshot()?;
    let picture = memviz::render(&snapshot, &Options { device: Some(device), ..Options::default() })?;
    let s = picture.summary();
    println!("{s}");

    // The picture's figures are the allocator's.
    let weights = 1 << 20;
    check(s.peak_reserved == cuda::max_memory_reserved(device)?, "peak reserved is the allocator's")?;
    let largest = 96 * 8192 * 4; // the largest batch's activation: the matmul's output, then relu's
    check(s.peak_allocated >= weights + 2 * largest, "the peak holds the weights and the largest activation twice")?;
    check(s.peak_allocated <= cuda::max_memory_allocated(device)?, "requested bytes stay under the rounded peak")?;
    check(s.events > 0 && s.driver_allocations > 0 && s.ooms == 0, "the history has the segments' allocations")?;
    // At the last event the segments are the snapshot's own.
    let end =
        memviz::render(&snapshot, &Options { device: Some(device), at: Some(s.events - 1), ..Options::default() })?;
    let now = end.summary();
    check(now.reserved == cuda::memory_reserved(device)?, "at the end, the reserved bytes are memory_reserved()")?;
    check(now.allocated == cuda::memory_allocated(device)?, "at the end, the allocated bytes are memory_allocated()")?;
    let segments = snapshot.segments.iter().filter(|g| g.device == device).count();
    check(now.segments == segments, "at the end, the segments are the snapshot's")?;

    let html = picture.to_html();
    check(html.contains("<svg") && !html.contains("src=") && !html.contains("href="), "one file: nothing to fetch")?;
    std::fs::write(&out, html)?;
    let pickle = out.with_extension("pickle");
    std::fs::write(&pickle, snapshot.to_pickle())?;
    println!(
        "wrote {} ({} peak allocated) and {} (opens in pytorch.org/memory_viz)",
        out.display(),
        format_bytes(s.peak_allocated),
        pickle.display()
    );
    drop((w1, w2, kept));
    Ok(())
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}"))
    }
}
