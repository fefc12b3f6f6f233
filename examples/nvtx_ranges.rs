//! NVTX ranges around cudasem's work, for Nsight Systems and Nsight Compute: a named range
//! (`cuda::nvtx::range`, `torch.cuda.nvtx.range`) around a matrix product and an elementwise
//! op, a mark, a `range_start`/`range_end` pair, the profiler's collection switched on only
//! around them (`cuda::profiler::profile`, `torch.cuda.profiler.profile`), and, with
//! `CUDASEM_NVTX=1`, a range per operation named as PyTorch's `emit_nvtx` names it.
//!
//! `cargo run --example nvtx_ranges`: on the simulated machine or a real GPU (it reads back the
//! ranges it emitted from the thread's log and exits non-zero if they are not the expected ones).
//! On a GPU, a profiler sees them, e.g. Nsight Compute profiling only the kernels inside the range:
//!
//! ```text
//! ncu --nvtx --nvtx-include "cudasem_step/" --print-summary none target/debug/examples/nvtx_ranges
//! nsys profile --capture-range=cudaProfilerApi -t cuda,nvtx target/debug/examples/nvtx_ranges
//! ```
use cudasem::cuda::nvtx::{self, Record};
use cudasem::cuda::{self, profiler};
use cudasem::testing::take_nvtx_records;
use cudasem::{DType, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Tensor::rand([256, 256], DType::F32, "cuda")?;
    let b = Tensor::rand([256, 256], DType::F32, "cuda")?;
    cuda::synchronize(None)?;
    take_nvtx_records();
    let out = {
        let _collect = profiler::profile()?;
        let _step = nvtx::range("cudasem_step");
        nvtx::mark("step begins");
        let id = nvtx::range_start("matmul+relu");
        let c = a.matmul(&b)?.relu()?;
        nvtx::range_end(id);
        cuda::synchronize(None)?;
        c
    };
    let records = take_nvtx_records();
    let pushed: Vec<&str> = records
        .iter()
        .filter_map(|r| if let Record::Push { message, .. } = r { Some(message.as_str()) } else { None })
        .collect();
    println!(
        "NVTX library loaded: {} (where it is, a profiler attached to the process sees these ranges)",
        nvtx::library_loaded()
    );
    println!("operation ranges (CUDASEM_NVTX): {}", nvtx::is_emitting());
    for r in &records {
        println!("  {r:?}");
    }
    let first_is_step = pushed.first() == Some(&"cudasem_step");
    // `CUDASEM_NVTX=1` (read as the runtime started) turns operation ranges on: the product's is there.
    let asked = std::env::var("CUDASEM_NVTX").is_ok_and(|v| v == "1");
    let ops_ok = asked == nvtx::is_emitting()
        && (!asked
            || ["aten::mm, seq = ", "aten::relu, seq = "].iter().all(|n| pushed.iter().any(|p| p.starts_with(n))));
    let framed = matches!(records.first(), Some(Record::ProfilerStart { .. }))
        && matches!(records.last(), Some(Record::ProfilerStop { .. }));
    // Each element of a product of two uniform [0, 1) matrices of 256 columns is near 64.
    let mean = out.sum_all()?.item::<f32>()? / (256.0 * 256.0);
    if !(first_is_step && ops_ok && framed && (mean - 64.0).abs() < 4.0) {
        return Err(format!("unexpected ranges or result (mean {mean}): {records:?}").into());
    }
    Ok(())
}
