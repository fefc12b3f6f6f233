//! The tour's stream-sanitizer section: a side stream reads a tensor the current stream is still
//! writing, without `wait_stream`; the sanitizer refuses the read before it is queued and names
//! both streams, both operations and both stacks; with the wait added, the same code runs and
//! gives the right numbers.

use super::section::{check, e, Failure, Outcome};
use cudasem::cuda::{self, sanitizer, Stream, StreamGuard};
use cudasem::{DType, Device, Error, Tensor};

/// The frames of a resolved stack that are this program's own (not std's or cudasem's plumbing).
fn own_frames(stack: &str) -> Vec<&str> {
    stack.lines().map(str::trim).filter(|l| l.contains("tour::sanitizer::")).collect()
}

/// The missing `wait_stream`, caught; then fixed.
pub fn stream_sanitizer() -> Result<Outcome, Failure> {
    let was_on = sanitizer::is_enabled();
    cuda::synchronize(None).map_err(e)?;
    sanitizer::enable();
    let out = run();
    if !was_on {
        sanitizer::disable();
    }
    out
}

fn produce() -> cudasem::Result<Tensor> {
    Tensor::randn([1 << 16], DType::F32, Device::cuda(cuda::current_device()?))?.mul(0.5)
}

fn consume(side: &Stream, x: &Tensor) -> cudasem::Result<Tensor> {
    let _g = StreamGuard::new(side)?;
    x.mul(2.0)
}

fn run() -> Result<Outcome, Failure> {
    let main = cuda::current_stream(None).map_err(e)?;
    let side = Stream::new(None, 0).map_err(e)?;
    // The bug: `x` is written on `main`, and `side` reads it without waiting for `main`.
    let x = produce().map_err(e)?;
    let report = match consume(&side, &x) {
        Err(Error::UnsynchronizedAccess { report }) => report,
        other => return Err(format!("the missing wait_stream was not caught: {other:?}")),
    };
    check(report.current.stream == side.id() && report.previous.stream == main.id(), || format!("{report}"))?;
    check(!report.current.write && report.previous.write, || format!("{report}"))?;
    let t = report.tensor.clone().ok_or("the report names no tensor")?;
    check(t.data_ptr == x.data_ptr() && t.shape == [1 << 16], || format!("{t:?}"))?;
    println!(
        "   missing wait_stream: {} on stream {:#x} reads the tensor (F32 {:?}, data_ptr {:#x}) that {} on stream {:#x} writes",
        report.current.operation, report.current.stream, t.shape, t.data_ptr, report.previous.operation, report.previous.stream
    );
    println!("   refused before it was queued: Error::UnsynchronizedAccess");
    for (which, a) in [("the read", &report.current), ("the earlier write", &report.previous)] {
        let captured = a.backtrace.as_ref().ok_or("a stack is missing")?;
        let stack = captured.to_string();
        let own = own_frames(&stack);
        println!("   stack of {which} ({} frames), this program's own:", captured.ips().len());
        for f in own.iter().take(3) {
            println!("     {f}");
        }
        check(!own.is_empty() || cfg!(not(debug_assertions)), || format!("no frame of the tour in {which}'s stack"))?;
    }
    // The fix: side waits for main, then reads.
    side.wait_stream(&main).map_err(e)?;
    let y = consume(&side, &x).map_err(e)?;
    main.wait_stream(&side).map_err(e)?;
    let (xs, ys) = (x.to_vec::<f32>().map_err(e)?, y.to_vec::<f32>().map_err(e)?);
    let wrong = xs.iter().zip(&ys).filter(|(a, b)| (f64::from(**a) * 2.0 - f64::from(**b)).abs() > 1e-6).count();
    check(wrong == 0, || format!("{wrong} of {} elements differ from 2x", xs.len()))?;
    println!("   fixed with side.wait_stream(&main): the read runs, {} elements equal 2x", ys.len());
    Ok(Outcome::Ok)
}
