//! README's example: tensors on the current device, an op queued on a side stream, timed with events.
//! Runs on the simulated machine without a GPU, on real GPUs with one.
use cudasem::cuda::{self, Event, EventFlags, Stream};
use cudasem::{DType, Tensor};

fn main() -> cudasem::Result<()> {
    let x = Tensor::randn([512, 512], DType::F32, "cuda")?; // on the current device, cuda:0
    let side = Stream::new(None, 0)?; // a stream from cuda:0's pool
    let (start, end) = (Event::new(EventFlags::timing()), Event::new(EventFlags::timing()));
    let y = cuda::with_stream(&side, || {
        start.record(None)?; // on the current stream: `side`
        let y = x.matmul(&x)?.softmax(-1)?; // queued; returns before the work is done
        end.record(None)?;
        Ok(y)
    })?;
    cuda::current_stream(None)?.wait_stream(&side)?; // as in PyTorch: order the streams before using `y`
    let row_sums = y.sum(&[-1], false)?.to_vec::<f32>()?; // a host read waits for the work
    assert!(row_sums.iter().all(|s| (s - 1.0).abs() < 1e-4), "softmax rows sum to 1");
    println!("{} on {}: {:.3} ms on the device", cuda::driver_name(), y.device(), start.elapsed_time(&end)?);
    Ok(())
}
