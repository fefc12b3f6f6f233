//! `cuda::nvtx` (PyTorch's `torch.cuda.nvtx`) and `cuda::profiler`: the values NVTX returns
//! (depths, `-1` for a pop with nothing open, range ids), the ranges a program emits as the
//! calling thread's log records them (the same on the simulated machine and on a GPU, where the
//! calls also reach NVIDIA's library), and `emit_nvtx`'s range around every operation, copy,
//! collective and graph replay, named as PyTorch names them.
//!
//! Operation ranges are process-wide: the tests that turn them on or check they are off, or
//! call the driver, take turns (`SERIAL`); each reads only its own thread's log.

mod common;

use cudasem::cuda::nvtx::{self, Record};
use cudasem::cuda::{self, profiler, CUDAGraph, GraphOptions};
use cudasem::distributed::{ProcessGroup, ReduceOp};
use cudasem::testing::take_nvtx_records;
use cudasem::{Device, Result, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The names of the ranges pushed in `records`, without their `", seq = N"` part, and the
/// sequence numbers; checks every push is popped at its depth, in order.
fn op_ranges(records: &[Record]) -> (Vec<String>, Vec<u64>) {
    let (mut names, mut seqs, mut open) = (Vec::new(), Vec::new(), Vec::new());
    for r in records {
        match r {
            Record::Push { message, depth } => {
                assert_eq!(*depth as usize, open.len(), "{records:?}");
                open.push(*depth);
                match message.rsplit_once(", seq = ") {
                    Some((name, seq)) => {
                        names.push(name.to_string());
                        seqs.push(seq.parse().expect("a sequence number"));
                    }
                    None => names.push(message.clone()),
                }
            }
            Record::Pop { depth } => assert_eq!(Some(*depth), open.pop(), "{records:?}"),
            other => panic!("only pushes and pops expected, got {other:?}"),
        }
    }
    assert!(open.is_empty(), "every range popped: {records:?}");
    (names, seqs)
}

/// Random pushes and pops against a model stack: each push returns the depth of the range it
/// starts, each pop the depth of the range it ends, or -1 with none open (nothing popped).
#[test]
fn push_and_pop_return_depths_as_a_stack_does() {
    take_nvtx_records();
    let mut rng = StdRng::seed_from_u64(0x4e56_5458);
    let mut model: Vec<String> = Vec::new();
    let mut want = Vec::new();
    for i in 0..500 {
        if rng.random_bool(0.55) {
            let name = format!("r{i}-{}", rng.random_range(0..1_000_000u32));
            let depth = nvtx::range_push(&name);
            assert_eq!(depth, model.len() as i32, "push #{i}");
            want.push(Record::Push { message: name.clone(), depth });
            model.push(name);
        } else {
            let depth = nvtx::range_pop();
            let expect = if model.pop().is_some() { model.len() as i32 } else { -1 };
            assert_eq!(depth, expect, "pop #{i}");
            want.push(Record::Pop { depth });
        }
    }
    while !model.is_empty() {
        model.pop();
        let depth = nvtx::range_pop();
        assert_eq!(depth, model.len() as i32);
        want.push(Record::Pop { depth });
    }
    assert_eq!(nvtx::range_pop(), -1, "PyTorch's range_pop with nothing pushed");
    want.push(Record::Pop { depth: -1 });
    assert_eq!(take_nvtx_records(), want);
    assert!(take_nvtx_records().is_empty(), "taking the records empties the log");
}

/// `range` is a guard: its range ends when it drops, on every path out of a scope, and nested
/// guards end innermost first.
#[test]
fn a_range_guard_pops_when_it_drops() {
    take_nvtx_records();
    let base = nvtx::range_push("outer");
    let step = |fail: bool| -> std::result::Result<(), &'static str> {
        let g = nvtx::range("step");
        assert_eq!(g.depth(), base + 1);
        let _inner = nvtx::range(&format!("layer {}", 3));
        if fail {
            return Err("early");
        }
        Ok(())
    };
    assert!(step(false).is_ok());
    assert!(step(true).is_err());
    assert_eq!(nvtx::range_pop(), base, "the guards left only `outer` open");
    let push = |m: &str, d| Record::Push { message: m.into(), depth: base + d };
    let pop = |d| Record::Pop { depth: base + d };
    let once = [push("step", 1), push("layer 3", 2), pop(2), pop(1)];
    let mut want = vec![push("outer", 0)];
    want.extend(once.iter().cloned());
    want.extend(once.iter().cloned());
    want.push(pop(0));
    assert_eq!(take_nvtx_records(), want);
}

/// `range_start` ids are unique in the process and never 0, a range may end on another thread,
/// and marks and messages reach the log as NVTX's C strings carry them (cut at a NUL byte).
#[test]
fn start_end_ids_are_unique_and_ranges_may_end_on_another_thread() {
    take_nvtx_records();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || (0..50).map(|i| nvtx::range_start(&format!("t{t} r{i}"))).collect::<Vec<u64>>())
        })
        .collect();
    let ids: Vec<u64> =
        threads.into_iter().flat_map(|h| h.join().unwrap_or_else(|_| panic!("a thread panicked"))).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "ids unique across threads");
    assert!(!ids.contains(&0));
    assert!(take_nvtx_records().is_empty(), "other threads' ranges are in their own logs");
    let id = nvtx::range_start("load");
    let ended = std::thread::spawn(move || {
        nvtx::range_end(id);
        take_nvtx_records()
    });
    assert_eq!(ended.join().ok(), Some(vec![Record::End { id }]));
    nvtx::mark("checkpoint\0 hidden");
    nvtx::range_end(u64::MAX); // an id never given: recorded, otherwise ignored as NVTX does
    let want = vec![
        Record::Start { message: "load".into(), id },
        Record::Mark { message: "checkpoint".into() },
        Record::End { id: u64::MAX },
    ];
    assert_eq!(take_nvtx_records(), want);
}

/// With `emit_nvtx`, each operation is one range named as PyTorch's `emit_nvtx` names it,
/// numbered by the thread's sequence; user ranges enclose them; without it, none. The results
/// are those of the float64 reference either way.
#[test]
fn emit_nvtx_puts_an_aten_named_range_around_every_operation() -> Result<()> {
    let _turn = serial();
    if !common::one_device() {
        return Ok(());
    }
    let mut rng = StdRng::seed_from_u64(7);
    let (a, b): (Vec<f32>, Vec<f32>) =
        (0..96).map(|_| (rng.random_range(-2.0..2.0), rng.random_range(-2.0..2.0))).unzip();
    let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| (x as f64 + y as f64).exp()).collect();
    let run = || -> Result<Vec<f32>> {
        let x = Tensor::from_slice(&a, [96], Device::cuda(0))?;
        let y = Tensor::from_slice(&b, [96], Device::cuda(0))?;
        let _step = nvtx::range("step");
        x.add(&y)?.exp()?.to_vec::<f32>()
    };
    take_nvtx_records();
    let got = if nvtx::is_emitting() {
        None // CUDASEM_NVTX=1 in the environment: ranges cannot be off here
    } else {
        let got = run()?;
        let records = take_nvtx_records();
        assert_eq!(op_ranges(&records).0, ["step"], "no operation ranges while off");
        Some(got)
    };
    let emitting = nvtx::emit_nvtx();
    assert!(nvtx::is_emitting());
    let with_ranges = run()?;
    drop(emitting);
    let records = take_nvtx_records();
    let (names, seqs) = op_ranges(&records);
    assert_eq!(names, ["aten::copy_", "aten::copy_", "step", "aten::add", "aten::exp", "aten::copy_"], "{records:?}");
    let ops: Vec<u64> = seqs.clone();
    assert!(ops.windows(2).all(|w| w[1] == w[0] + 1), "one sequence number per operation: {seqs:?}");
    // The operations inside `step` are one level deeper than those before it.
    let depths: Vec<i32> =
        records.iter().filter_map(|r| if let Record::Push { depth, .. } = r { Some(*depth) } else { None }).collect();
    assert_eq!(depths[3..], [depths[2] + 1; 3], "{records:?}");
    for (i, (&g, &w)) in with_ranges.iter().zip(&want).enumerate() {
        assert!((g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0), "[{i}] {g} vs {w}");
    }
    if let Some(got) = got {
        assert_eq!(got, with_ranges);
    }
    Ok(())
}

/// A graph's capture records the captured operations' ranges; each replay is one range,
/// `CUDAGraph::replay`, and a matrix product is `aten::mm`; a collective is `nccl:all_reduce`.
#[test]
fn graph_replays_products_and_collectives_have_their_ranges() -> Result<()> {
    let _turn = serial();
    if !common::one_device() {
        return Ok(());
    }
    let mut rng = StdRng::seed_from_u64(11);
    let data: Vec<f32> = (0..64).map(|_| rng.random_range(-1.0..1.0)).collect();
    let x = Tensor::from_slice(&data, [8, 8], Device::cuda(0))?;
    let emitting = nvtx::emit_nvtx();
    take_nvtx_records();
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || x.matmul(&x))?;
    g.replay()?;
    g.replay()?;
    let product = y.to_vec::<f32>()?;
    let groups = ProcessGroup::from_devices(&[0])?;
    let t = Tensor::from_slice(&data, [64], Device::cuda(0))?;
    take_nvtx_records(); // the copy in
    groups[0].all_reduce(&t, ReduceOp::Sum, false)?;
    let reduce = take_nvtx_records();
    drop(emitting);
    let names = op_ranges(&reduce).0;
    assert_eq!(names.first().map(String::as_str), Some("nccl:all_reduce"), "{reduce:?}");
    // The product against its float64 reference, replayed twice from the same input.
    for i in 0..8 {
        for j in 0..8 {
            let want: f64 = (0..8).map(|k| data[i * 8 + k] as f64 * data[k * 8 + j] as f64).sum();
            let got = product[i * 8 + j] as f64;
            assert!((got - want).abs() <= 1e-3 * want.abs().max(1.0), "[{i},{j}] {got} vs {want}");
        }
    }
    assert_eq!(t.to_vec::<f32>()?, data, "a sum over one rank is the tensor itself");
    Ok(())
}

/// The capture's records: checked apart so the list above stays readable.
#[test]
fn a_capture_records_its_operations_and_each_replay_one_range() -> Result<()> {
    let _turn = serial();
    if !common::one_device() {
        return Ok(());
    }
    let x = Tensor::from_slice(&[1.5f32, -2.0, 0.25, 4.0], [2, 2], Device::cuda(0))?;
    let emitting = nvtx::emit_nvtx();
    take_nvtx_records();
    let mut g = CUDAGraph::new();
    let y = cuda::graph(&mut g, GraphOptions::default(), || x.matmul(&x))?;
    let captured = op_ranges(&take_nvtx_records()).0;
    g.replay()?;
    g.replay()?;
    let replays = op_ranges(&take_nvtx_records()).0;
    drop(emitting);
    assert!(captured.iter().any(|n| n == "aten::mm"), "{captured:?}");
    assert_eq!(replays, ["CUDAGraph::replay", "CUDAGraph::replay"]);
    assert_eq!(
        y.to_vec::<f32>()?,
        [1.5 * 1.5 - 2.0 * 0.25, 1.5 * -2.0 - 2.0 * 4.0, 0.25 * 1.5 + 4.0 * 0.25, 0.25 * -2.0 + 16.0]
    );
    Ok(())
}

/// `profiler::start/stop` and the `profile` guard reach the driver (cuProfilerStart/Stop on a
/// GPU, accepted on the simulated machine) and are recorded with the current device.
#[test]
fn profiler_start_stop_and_profile_are_recorded_with_the_device() -> Result<()> {
    // Not while another test captures a graph (CUDA's global capture mode).
    let _turn = serial();
    if !common::one_device() {
        return Ok(());
    }
    take_nvtx_records();
    let device = common::last_device();
    cuda::with_device(device, || -> Result<()> {
        profiler::start()?;
        profiler::stop()?;
        let p = profiler::profile()?;
        assert_eq!(p.device(), device);
        nvtx::mark("inside");
        drop(p);
        Ok(())
    })?;
    let want = vec![
        Record::ProfilerStart { device },
        Record::ProfilerStop { device },
        Record::ProfilerStart { device },
        Record::Mark { message: "inside".into() },
        Record::ProfilerStop { device },
    ];
    assert_eq!(take_nvtx_records(), want);
    Ok(())
}
