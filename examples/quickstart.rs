//! README's example: tensors on the current device, an op queued on a side stream, timed with
//! events — after a warm-up, since the first use of an op pays one-time setup (PyTorch's first op
//! does too). Runs on the simulated machine without a GPU, on real GPUs with one.
use cudasem::cuda::{self, Event, EventFlags, Stream};
use cudasem::{DType, Tensor};

/// Queues `x @ x` and a softmax on `side`, between two timing events; returns the result and the
/// device time in ms.
fn timed_step(x: &Tensor, side: &Stream) -> cudasem::Result<(Tensor, f32)> {
    let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    let y = cuda::with_stream(side, || {
        start.record(None)?; // on the current stream: `side`
        let y = x.matmul(x)?.softmax(-1)?; // queued; returns before the work is done
        end.record(None)?;
        Ok(y)
    })?;
    cuda::current_stream(None)?.wait_stream(side)?; // as in PyTorch: order the streams before using `y`
    end.synchronize()?;
    Ok((y, start.elapsed_time(&end)?))
}

fn main() -> cudasem::Result<()> {
    let x = Tensor::randn([512, 512], DType::F32, "cuda")?; // on the current device, cuda:0
    let side = Stream::new(None, 0)?; // a stream from cuda:0's pool
    side.wait_stream(&cuda::current_stream(None)?)?; // `x` is written on the current stream: order `side` after it
                                                     // The first step pays one-time setup inside its events: compiling the kernels (NVRTC), making
                                                     // the cuBLAS handle and workspace, the allocator's first segment. Time the steps after it.
    let (_, first_ms) = timed_step(&x, &side)?;
    let (y, ms) = timed_step(&x, &side)?;
    let row_sums = y.sum(&[-1], false)?.to_vec::<f32>()?; // a host read waits for the work
    assert!(row_sums.iter().all(|s| (s - 1.0).abs() < 1e-4), "softmax rows sum to 1");
    println!("y = {y}");
    // `driver_name()` says whether a GPU measured the times or the simulated machine modelled them.
    let how = if cuda::driver_name() == "sim" {
        "modelled by the simulated machine (no GPU measured it)"
    } else {
        "measured on the GPU with events"
    };
    println!(
        "{} on {}: first use {first_ms:.3} ms (one-time setup included), then {ms:.3} ms; {how}",
        cuda::driver_name(),
        y.device()
    );
    Ok(())
}
