//! The stream sanitizer (`cuda::sanitizer`, PyTorch's CSAN): the event-handler scenarios of
//! PyTorch's `test/test_cuda_sanitizer.py` written against cudasem's streams, events and tensors.
//! Each race is refused before it is queued with `Error::UnsynchronizedAccess` naming the tensor,
//! both streams, both operations and read/write; the refused work never runs; correct code runs
//! clean. Collectives of a process group are checked as any other op: their inputs read, their
//! outputs written on the group's stream. The sanitizer is process-wide and host synchronizations order every stream, so the
//! tests take turns and each ends with the device synchronized.

mod common;

use cudasem::cuda::{self, sanitizer, Event, Stream, StreamGuard};
use cudasem::distributed::{ProcessGroup, ReduceOp};
use cudasem::{DType, Device, Error, Result, Tensor};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// The test's turn, with the sanitizer on and the device idle.
fn turn() -> Option<MutexGuard<'static, ()>> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::one_device() {
        return None;
    }
    sanitizer::enable();
    cuda::synchronize(0).expect("synchronize");
    Some(g)
}

fn streams(n: usize) -> Vec<Stream> {
    common::distinct_streams(0, n).expect("streams")
}

/// A tensor of random values written on `s` (its allocation and its write are on `s`).
fn written_on(s: &Stream, n: usize) -> Result<Tensor> {
    let _g = StreamGuard::new(s)?;
    let t = Tensor::rand([n], DType::F32, Device::cuda(0))?;
    t.add_(1.0)?;
    Ok(t)
}

/// A tensor written on `s[0]`, its values read on `s[1]` after a wait (the test's reference),
/// then written once more on `s[0]` (`add_(1.0)`), a write `s[1]` has not waited for.
fn rewritten_unseen(s: &[Stream]) -> Result<(Tensor, Vec<f32>)> {
    let x = written_on(&s[0], 4096)?;
    let before = {
        s[1].wait_stream(&s[0])?;
        let _g = StreamGuard::new(&s[1])?;
        x.to_vec::<f32>()?
    };
    let _g = StreamGuard::new(&s[0])?;
    x.add_(1.0)?;
    Ok((x, before))
}

/// Reads `t` on `s` (an op whose output is a fresh tensor of `s`).
fn read_on(s: &Stream, t: &Tensor) -> Result<Tensor> {
    let _g = StreamGuard::new(s)?;
    t.mul(2.0)
}

/// Writes `t` on `s` in place.
fn write_on(s: &Stream, t: &Tensor) -> Result<()> {
    let _g = StreamGuard::new(s)?;
    t.mul_(3.0)
}

/// The race report of `r`, which must be a refusal.
#[track_caller]
fn race<T: std::fmt::Debug>(r: Result<T>) -> Box<sanitizer::AccessRace> {
    match r {
        Err(Error::UnsynchronizedAccess { report }) => report,
        other => panic!("expected an UnsynchronizedAccess refusal, got {other:?}"),
    }
}

fn done() {
    cuda::synchronize(0).expect("synchronize");
}

#[test]
fn simple_race_is_refused_with_both_streams_ops_and_the_tensor_named() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let (x, before) = rewritten_unseen(&s)?;
    // s1 writes it without waiting: refused, never queued.
    let r = race(write_on(&s[1], &x));
    assert_eq!(r.current.stream, s[1].id());
    assert_eq!(r.previous.stream, s[0].id());
    assert!(r.current.write && r.previous.write, "{r}");
    assert!(r.current.operation.contains("mul"), "{}", r.current.operation);
    assert!(r.previous.operation.contains("add"), "{}", r.previous.operation);
    assert!(!r.freed);
    let t = r.tensor.as_ref().expect("the tensor is named");
    assert_eq!((t.dtype, t.shape.as_slice(), t.data_ptr), (DType::F32, &[4096usize][..], x.data_ptr()));
    assert!(r.current.backtrace.is_some() && r.previous.backtrace.is_some() && r.allocation.is_some());
    let msg = r.to_string();
    for needle in [format!("{:#x}", s[0].id()), format!("{:#x}", s[1].id()), "writing".into(), "F32".into()] {
        assert!(msg.contains(&needle), "{needle} missing from {msg}");
    }
    // The backtraces resolve to this test (where this executable can name its own frames: a
    // stripped one, as the GPU machine's copies are, cannot name any).
    let resolves = std::backtrace::Backtrace::force_capture().to_string().contains("simple_race_is_refused");
    assert!(!resolves || msg.contains("simple_race_is_refused"), "{msg}");
    // Nothing ran: after the wait, x is (before + 1) * 3 exactly as if the refused call never was.
    s[1].wait_stream(&s[0])?;
    write_on(&s[1], &x)?;
    let after = {
        let _g = StreamGuard::new(&s[1])?;
        x.to_vec::<f32>()?
    };
    for (a, b) in after.iter().zip(&before) {
        let want = (f64::from(*b) + 1.0) * 3.0;
        assert!((f64::from(*a) - want).abs() <= 1e-5 * want.abs().max(1.0), "{a} vs {want}");
    }
    done();
    Ok(())
}

#[test]
fn concurrent_reads_pass_and_a_write_after_them_needs_a_wait() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(3);
    let x = written_on(&s[0], 256)?;
    s[1].wait_stream(&s[0])?;
    s[2].wait_stream(&s[0])?;
    // Branch: both read after waiting for the writer.
    read_on(&s[1], &x)?;
    read_on(&s[2], &x)?;
    // A write on s1 races with s2's read.
    let r = race(write_on(&s[1], &x));
    assert_eq!((r.current.stream, r.previous.stream), (s[1].id(), s[2].id()));
    assert!(r.current.write && !r.previous.write, "{r}");
    done();
    Ok(())
}

#[test]
fn read_after_write_across_streams_checks_every_reader() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(3);
    let x = written_on(&s[0], 256)?;
    let e = s[0].record_event(None)?;
    s[1].wait_event(&e)?;
    read_on(&s[1], &x)?;
    // s2 never waited: its read races with s0's write.
    let r = race(read_on(&s[2], &x));
    assert_eq!((r.current.stream, r.previous.stream), (s[2].id(), s[0].id()));
    assert!(!r.current.write && r.previous.write);
    done();
    Ok(())
}

#[test]
fn event_and_stream_waits_order_the_access() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = written_on(&s[0], 256)?;
    read_on(&s[0], &x)?;
    let e = Event::new(Default::default());
    e.record(Some(&s[0]))?;
    s[1].wait_event(&e)?;
    write_on(&s[1], &x)?;
    // wait_stream the other way.
    s[0].wait_stream(&s[1])?;
    write_on(&s[0], &x)?;
    done();
    Ok(())
}

#[test]
fn a_chain_of_waits_orders_the_last_stream_after_the_first() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(8);
    let x = written_on(&s[0], 256)?;
    for i in 0..7 {
        let e = s[i].record_event(None)?;
        s[i + 1].wait_event(&e)?;
    }
    write_on(&s[7], &x)?;
    // ...and a broken chain does not.
    let y = written_on(&s[0], 256)?;
    for i in 1..7 {
        let e = s[i].record_event(None)?;
        s[i + 1].wait_event(&e)?;
    }
    race(write_on(&s[7], &y));
    done();
    Ok(())
}

#[test]
fn an_expired_record_does_not_cover_later_work() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = written_on(&s[0], 256)?;
    s[1].wait_stream(&s[0])?;
    read_on(&s[1], &x)?;
    let e = s[1].record_event(None)?;
    read_on(&s[1], &x)?; // after the record
    s[0].wait_event(&e)?;
    let r = race(write_on(&s[0], &x));
    assert_eq!((r.current.stream, r.previous.stream), (s[0].id(), s[1].id()));
    done();
    Ok(())
}

#[test]
fn a_dropped_event_or_a_fresh_one_orders_nothing() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = written_on(&s[0], 256)?;
    let e = s[0].record_event(None)?;
    drop(e);
    let fresh = Event::new(Default::default()); // never recorded: waiting on it is a no-op
    s[1].wait_event(&fresh)?;
    race(write_on(&s[1], &x));
    done();
    Ok(())
}

#[test]
fn every_read_is_checked_before_a_write() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(6);
    let x = written_on(&s[0], 256)?;
    cuda::synchronize(0)?;
    let mut events = Vec::new();
    for st in &s[1..] {
        read_on(st, &x)?;
        events.push(st.record_event(None)?);
    }
    // s0 waits for all but the last reader: refused, naming that reader.
    for e in &events[..events.len() - 1] {
        s[0].wait_event(e)?;
    }
    let r = race(write_on(&s[0], &x));
    assert_eq!(r.previous.stream, s[5].id());
    assert!(!r.previous.write);
    // Waiting for the last one too: passes.
    s[0].wait_event(&events[events.len() - 1])?;
    write_on(&s[0], &x)?;
    done();
    Ok(())
}

#[test]
fn waits_merge_clocks_pointwise() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let (a, b) = (written_on(&s[0], 256)?, written_on(&s[1], 256)?);
    let (e1, e2) = (s[0].record_event(None)?, s[1].record_event(None)?);
    write_on(&s[0], &a)?;
    write_on(&s[1], &b)?;
    s[1].wait_event(&e1)?;
    s[0].wait_event(&e2)?;
    let e3 = s[1].record_event(None)?;
    s[0].wait_event(&e3)?;
    // s0 is now after s1's write of b (through e3) and its own of a.
    let _g = StreamGuard::new(&s[0])?;
    a.add_(&b)?;
    b.mul_(2.0)?;
    drop(_g);
    done();
    Ok(())
}

#[test]
fn a_record_overrides_the_previous_one() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(3);
    let x = written_on(&s[0], 256)?;
    let y = written_on(&s[1], 256)?;
    let e = s[0].record_event(None)?;
    e.record(Some(&s[1]))?; // now stands for s1's work only
    s[2].wait_event(&e)?;
    write_on(&s[2], &y)?;
    let r = race(write_on(&s[2], &x));
    assert_eq!(r.previous.stream, s[0].id());
    done();
    Ok(())
}

#[test]
fn several_streams_may_wait_on_one_event() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(3);
    let x = written_on(&s[0], 256)?;
    let e = s[0].record_event(None)?;
    s[1].wait_event(&e)?;
    s[2].wait_event(&e)?;
    read_on(&s[1], &x)?;
    read_on(&s[2], &x)?;
    done();
    Ok(())
}

#[test]
fn host_synchronizations_order_every_stream() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    // Stream synchronize.
    let x = written_on(&s[0], 256)?;
    s[0].synchronize()?;
    write_on(&s[1], &x)?;
    // Event synchronize.
    let e = s[1].record_event(None)?;
    e.synchronize()?;
    write_on(&s[0], &x)?;
    // Device synchronize.
    cuda::synchronize(0)?;
    write_on(&s[1], &x)?;
    // A blocking read on the writer's stream (to_vec) waits for it too.
    let y = written_on(&s[0], 256)?;
    {
        let _g = StreamGuard::new(&s[0])?;
        y.to_vec::<f32>()?;
    }
    write_on(&s[1], &y)?;
    // An event or stream query that saw the work done orders it too (the host saw it finish).
    let z = written_on(&s[0], 256)?;
    let e = s[0].record_event(None)?;
    while !e.query()? {
        std::thread::yield_now();
    }
    write_on(&s[1], &z)?;
    let w = written_on(&s[1], 256)?;
    while !s[1].query()? {
        std::thread::yield_now();
    }
    write_on(&s[0], &w)?;
    done();
    Ok(())
}

#[test]
fn a_host_read_on_another_stream_is_checked() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = written_on(&s[1], 256)?;
    // to_vec reads on the current stream (s0), which did not wait for s1's write.
    let r = {
        let _g = StreamGuard::new(&s[0])?;
        race(x.to_vec::<f32>())
    };
    assert_eq!((r.current.stream, r.previous.stream), (s[0].id(), s[1].id()));
    assert!(r.current.operation.contains("device to host"), "{}", r.current.operation);
    s[0].wait_stream(&s[1])?;
    let _g = StreamGuard::new(&s[0])?;
    assert_eq!(x.to_vec::<f32>()?.len(), 256);
    drop(_g);
    done();
    Ok(())
}

#[test]
fn operands_are_read_or_written_as_the_op_declares() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let (a, b) = (written_on(&s[0], 128)?, written_on(&s[0], 128)?);
    s[1].wait_stream(&s[0])?;
    // out-of-place: reads a and b, writes a new tensor of s0.
    let c = {
        let _g = StreamGuard::new(&s[0])?;
        a.add(&b)?
    };
    // s1 may read a and b concurrently (reads only)...
    {
        let _g = StreamGuard::new(&s[1])?;
        a.mul(&b)?;
        b.sub(&a)?;
    }
    // ...not read c (written by s0), nor write a (read by s0's add).
    let r = race(read_on(&s[1], &c));
    assert!(!r.current.write && r.previous.write);
    let r = race(write_on(&s[1], &a));
    assert!(r.current.write && !r.previous.write);
    // In place on s0 reads and writes a: s1's reads of a came after s0 ... not ordered: refused.
    let r = {
        let _g = StreamGuard::new(&s[0])?;
        race(a.add_(&b))
    };
    assert_eq!((r.current.stream, r.previous.stream), (s[0].id(), s[1].id()));
    done();
    Ok(())
}

#[test]
fn a_jiterator_call_reads_its_inputs_and_writes_its_output() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let code = "template <typename T> T axpy(T x, T y, T alpha) { return alpha * x + y; }";
    let f = cuda::jiterator::create_jit_fn(code, &[("alpha", 2.0)])?;
    let (a, b) = (written_on(&s[0], 256)?, written_on(&s[0], 256)?);
    // s1 reads a and b, which s0 wrote, without waiting: refused, nothing queued.
    let r = {
        let _g = StreamGuard::new(&s[1])?;
        race(f.call(&[&a, &b], &[]))
    };
    assert!(!r.current.write && r.previous.write, "{r:?}");
    assert!(r.current.operation.contains("axpy"), "the jiterator names its function: {r:?}");
    assert_eq!((r.current.stream, r.previous.stream), (s[1].id(), s[0].id()));
    // After the wait it runs, and its output is a write of s1: s0 may not read it unordered.
    s[1].wait_stream(&s[0])?;
    let c = {
        let _g = StreamGuard::new(&s[1])?;
        f.call(&[&a, &b], &[])?
    };
    let r = race(read_on(&s[0], &c));
    assert!(!r.current.write && r.previous.write, "{r:?}");
    s[0].wait_stream(&s[1])?;
    let (av, bv, cv) = {
        let _g = StreamGuard::new(&s[0])?;
        (a.to_vec::<f32>()?, b.to_vec::<f32>()?, c.to_vec::<f32>()?)
    };
    for i in 0..av.len() {
        let want = 2.0 * f64::from(av[i]) + f64::from(bv[i]);
        assert!((f64::from(cv[i]) - want).abs() <= 1e-6 * want.abs().max(1.0), "element {i}: {} vs {want}", cv[i]);
    }
    done();
    Ok(())
}

#[test]
fn a_view_names_its_own_shape_and_disjoint_halves_do_not_race() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = written_on(&s[0], 512)?;
    s[1].wait_stream(&s[0])?;
    let (lo, hi) = (x.narrow(0, 0, 256)?, x.narrow(0, 256, 256)?);
    write_on(&s[0], &lo)?;
    write_on(&s[1], &hi)?; // disjoint bytes: no race
    let r = race(read_on(&s[1], &lo));
    let t = r.tensor.expect("named");
    assert_eq!((t.shape.as_slice(), t.data_ptr), (&[256usize][..], lo.data_ptr()));
    done();
    Ok(())
}

#[test]
fn freeing_memory_another_stream_uses_without_record_stream_is_caught_on_reuse() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    const N: usize = 1 << 20;
    for record in [false, true] {
        cuda::empty_cache()?;
        let x = written_on(&s[0], N)?; // allocated on s0
        let ptr = x.data_ptr();
        s[1].wait_stream(&s[0])?;
        let y = read_on(&s[1], &x)?;
        if record {
            x.record_stream(&s[1])?;
        }
        drop(x);
        // s0 reuses the block at once (stream order): its write races with s1's read.
        let _g = StreamGuard::new(&s[0])?;
        let z = Tensor::empty([N], DType::F32, Device::cuda(0))?;
        let fill = z.fill_(7.0);
        drop(_g);
        if record {
            // Reused only once s1's read is done (or not at all): no race either way.
            fill?;
        } else {
            assert_eq!(z.data_ptr(), ptr, "the allocator reused the block");
            let r = race(fill);
            assert!(r.freed, "{r}");
            assert_eq!((r.current.stream, r.previous.stream), (s[0].id(), s[1].id()));
            assert!(r.to_string().contains("record_stream"));
        }
        drop(y);
        done();
    }
    Ok(())
}

#[test]
fn the_runtime_goes_on_after_a_refusal() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let data: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32) * 0.25 - 7.0).collect();
    let x = {
        let _g = StreamGuard::new(&s[0])?;
        let x = Tensor::from_slice(&data, [1000], Device::cuda(0))?;
        x.mul_(2.0)?; // queued on s0, not waited for
        x
    };
    for _ in 0..3 {
        race(write_on(&s[1], &x));
    }
    s[1].wait_stream(&s[0])?;
    let _g = StreamGuard::new(&s[1])?;
    let y = x.mul(2.0)?.add(&x.mul(0.5)?)?;
    let got = y.to_vec::<f32>()?;
    for (g, d) in got.iter().zip(&data) {
        let want = f64::from(*d) * 5.0;
        assert!((f64::from(*g) - want).abs() < 1e-5, "{g} vs {want}");
    }
    drop(_g);
    done();
    Ok(())
}

#[test]
fn a_pinned_pipeline_and_a_graph_run_clean() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(1);
    let main = cuda::current_stream(0)?;
    // Pinned pipeline: copy in on a side stream, compute on main after wait_stream.
    let host: Vec<f32> = (0..4096).map(|i| (i as f32).sin()).collect();
    let mut total = 0.0f64;
    for _ in 0..3 {
        let pinned = Tensor::from_slice(&host, [4096], Device::Cpu)?.pin_memory()?;
        let dev = {
            let _g = StreamGuard::new(&s[0])?;
            pinned.to(Device::cuda(0), true)?
        };
        main.wait_stream(&s[0])?;
        dev.record_stream(&main)?;
        total += f64::from(dev.mul(2.0)?.sum_all()?.item::<f32>()?);
    }
    let want: f64 = host.iter().map(|&v| f64::from(v) * 2.0).sum::<f64>() * 3.0;
    assert!((total - want).abs() < 1e-2, "{total} vs {want}");
    // A graph: captured on its own stream, replayed on main, read on main.
    let x = Tensor::rand([1024], DType::F32, Device::cuda(0))?;
    let mut g = cuda::CUDAGraph::new();
    let y = cuda::graph(&mut g, cuda::GraphOptions::default(), || x.mul(2.0)?.add(1.0))?;
    x.fill_(0.5)?;
    g.replay()?;
    // The replay wrote y on main: a side stream reading it without a wait races with the replay.
    let r = race(read_on(&s[0], &y));
    assert!(r.previous.operation.contains("graph replay"), "{}", r.previous.operation);
    assert!(y.to_vec::<f32>()?.iter().all(|&v| v == 2.0));
    s[0].wait_stream(&main)?;
    read_on(&s[0], &y)?;
    done();
    Ok(())
}

#[test]
fn inside_a_capture_the_graph_order_rules() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = Tensor::rand([1024], DType::F32, Device::cuda(0))?;
    cuda::synchronize(0)?;
    let mut g = cuda::CUDAGraph::new();
    let r = cuda::with_stream(&s[0], || {
        g.capture_begin(None, Default::default())?;
        // Fork s1 into the capture, write x there, then read it on s0 without joining first.
        s[1].wait_stream(&s[0])?;
        write_on(&s[1], &x)?;
        let refused = read_on(&s[0], &x).map(|_| ());
        s[0].wait_stream(&s[1])?;
        let fine = read_on(&s[0], &x)?;
        g.capture_end()?;
        Ok((refused, fine))
    })?;
    let report = race(r.0);
    assert_eq!((report.current.stream, report.previous.stream), (s[0].id(), s[1].id()));
    drop(r.1);
    drop(g);
    done();
    Ok(())
}

#[test]
fn disabled_it_checks_nothing() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    sanitizer::disable();
    assert!(!sanitizer::is_enabled());
    let x = written_on(&s[0], 256)?;
    write_on(&s[1], &x)?; // a race, not checked
    done();
    sanitizer::enable();
    assert!(sanitizer::is_enabled());
    done();
    Ok(())
}

/// A group of one rank on device 0 (the simulated backend, or NCCL on a GPU).
fn group_of_one() -> Result<ProcessGroup> {
    Ok(ProcessGroup::from_devices(&[0])?.remove(0))
}

/// `got` is `want` (host values) mapped by `f`, within f32 rounding.
#[track_caller]
fn assert_values(got: &[f32], want: &[f32], f: impl Fn(f64) -> f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let w = f(f64::from(*w));
        assert!((f64::from(*g) - w).abs() <= 1e-5 * w.abs().max(1.0), "element {i}: {g} vs {w}");
    }
}

#[test]
fn a_collective_reading_a_tensor_written_on_another_stream_needs_a_wait() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let g = group_of_one()?;
    let (x, before) = rewritten_unseen(&s)?;
    // The collective waits for the current stream s1 only, not for s0's write: refused, not queued.
    let r = {
        let _g = StreamGuard::new(&s[1])?;
        race(g.all_reduce(&x, ReduceOp::Sum, false))
    };
    assert_eq!(r.current.operation, "all_reduce sum", "{r}");
    assert_eq!((r.current.stream, r.previous.stream), (g.comm_stream().id(), s[0].id()), "{r}");
    assert!(r.previous.write && r.previous.operation.contains("add"), "{r}");
    let t = r.tensor.as_ref().expect("the tensor is named");
    assert_eq!((t.shape.as_slice(), t.data_ptr), (&[4096usize][..], x.data_ptr()));
    let msg = r.to_string();
    for needle in [format!("{:#x}", s[0].id()), format!("{:#x}", g.comm_stream().id()), "all_reduce sum".into()] {
        assert!(msg.contains(&needle), "{needle} missing from {msg}");
    }
    // After the wait it runs, as does a gather of x into a tensor of s1; a group of one reduces
    // to x itself and gathers a copy of it.
    s[1].wait_stream(&s[0])?;
    let _g = StreamGuard::new(&s[1])?;
    g.all_reduce(&x, ReduceOp::Sum, false)?;
    let out = Tensor::zeros([4096], DType::F32, Device::cuda(0))?;
    g.all_gather_into_tensor(&out, &x, false)?;
    assert_values(&x.to_vec::<f32>()?, &before, |v| v + 1.0);
    assert_values(&out.to_vec::<f32>()?, &before, |v| v + 1.0);
    done();
    Ok(())
}

#[test]
fn a_collectives_output_is_a_write_of_the_group_stream() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let g = group_of_one()?;
    let x = written_on(&s[1], 1000)?;
    let want = {
        let _g = StreamGuard::new(&s[1])?;
        x.to_vec::<f32>()?
    };
    let out = {
        let _g = StreamGuard::new(&s[1])?;
        let out = Tensor::zeros([1000], DType::F32, Device::cuda(0))?;
        g.all_gather_into_tensor(&out, &x, false)?;
        out
    };
    // s1 waited for the gather (async_op = false); s0 did not: its read of the output is refused.
    let r = race(read_on(&s[0], &out));
    assert!(!r.current.write && r.previous.write, "{r}");
    assert_eq!(r.previous.operation, "all_gather_into_tensor", "{r}");
    assert_eq!((r.current.stream, r.previous.stream), (s[0].id(), g.comm_stream().id()), "{r}");
    s[0].wait_stream(&s[1])?;
    let doubled = read_on(&s[0], &out)?;
    // An asynchronous collective orders nothing until Work::wait: s1 may not read its result before.
    let sum = {
        let _g = StreamGuard::new(&s[1])?;
        let work = g.all_reduce(&x, ReduceOp::Sum, true)?;
        let r = race(x.mul(2.0));
        assert_eq!((r.previous.operation.as_str(), r.previous.stream), ("all_reduce sum", g.comm_stream().id()), "{r}");
        work.wait()?;
        x.mul(2.0)?
    };
    s[0].wait_stream(&s[1])?;
    let _g = StreamGuard::new(&s[0])?;
    assert_values(&doubled.to_vec::<f32>()?, &want, |v| 2.0 * v);
    assert_values(&sum.to_vec::<f32>()?, &want, |v| 2.0 * v);
    done();
    Ok(())
}

/// The allocation stack of an op's result is the op's own (the one unwinding of that op serves
/// both), and a block from `Tensor::empty` has the stack of that call, not of its first use.
#[test]
fn allocation_stacks_name_the_allocating_call() -> Result<()> {
    let Some(_t) = turn() else { return Ok(()) };
    let s = streams(2);
    let x = written_on(&s[0], 256)?;
    let (y, e) = {
        let _g = StreamGuard::new(&s[0])?;
        let y = x.mul(2.0)?;
        let e = Tensor::empty([256], DType::F32, Device::cuda(0))?;
        e.copy_(&x, false)?;
        (y, e)
    };
    let ry = race(write_on(&s[1], &y));
    let re = race(write_on(&s[1], &e));
    let (ay, ae) = (ry.allocation.expect("y's allocation stack"), re.allocation.expect("e's allocation stack"));
    // Names resolve where this executable can name its own frames (a stripped one cannot).
    let here = "allocation_stacks_name_the_allocating_call";
    if std::backtrace::Backtrace::force_capture().to_string().contains(here) {
        let (ay, ae) = (ay.to_string(), ae.to_string());
        assert!(ay.contains(here) && ay.contains("mul"), "y's allocation stack: {ay}");
        assert!(ae.contains(here) && ae.contains("empty") && !ae.contains("copy_"), "e's allocation stack: {ae}");
    }
    s[1].wait_stream(&s[0])?;
    write_on(&s[1], &y)?;
    done();
    Ok(())
}
