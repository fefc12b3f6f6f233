//! Failures of distributed work are typed errors within the timeout, never hangs: a tensor on
//! another device than the rank's, sizes or dtypes that differ across ranks (found through the
//! store before the backend could hang; on the simulated backend also inside the collective when
//! the check is off), a rank that never arrives at a collective or at the rendezvous, and the
//! group stays usable after a mismatch. The tests of this file run one at a time: an error a
//! failed collective leaves on its device is returned by that device's synchronization points
//! until `cuda::get_last_error` takes it.

mod common;
mod dist_util;

use common::is_sim;
use cudasem::cuda;
use cudasem::distributed::{InitOptions, ProcessGroup, ReduceOp};
use cudasem::{DType, Device, Error, Result, Tensor};
use dist_util::{on_ranks, quick, serial};

fn pair(options: &InitOptions) -> Option<Vec<ProcessGroup>> {
    cudasem::testing::has_devices(2).then(|| ProcessGroup::from_devices_with(&[0, 1], options).unwrap())
}

#[test]
fn a_tensor_off_the_ranks_device_is_refused() -> Result<()> {
    let _one = serial();
    if !cudasem::testing::has_devices(1) {
        return Ok(());
    }
    let solo = ProcessGroup::from_devices(&[0])?.remove(0);
    let host = Tensor::ones([4], DType::F32, Device::Cpu)?;
    match solo.all_reduce(&host, ReduceOp::Sum, false) {
        Err(Error::WrongDeviceForRank { op: "all_reduce", rank: 0, expected: 0, found: Device::Cpu }) => {}
        other => panic!("expected WrongDeviceForRank, got {other:?}"),
    }
    if let Some(groups) = pair(&InitOptions::default()) {
        let on_one = Tensor::ones([4], DType::F32, "cuda:1")?;
        let r = groups[0].broadcast(&on_one, 0, false);
        assert!(matches!(r, Err(Error::WrongDeviceForRank { rank: 0, expected: 0, .. })), "{r:?}");
        let out = Tensor::zeros([8], DType::F32, "cuda:0")?;
        let r = groups[0].all_gather_into_tensor(&out, &on_one, false);
        assert!(matches!(r, Err(Error::WrongDeviceForRank { found, .. }) if found == Device::cuda(1)), "{r:?}");
    }
    // Local checks: sizes a collective needs, dtypes, contiguity.
    let t = Tensor::ones([4], DType::F32, "cuda:0")?;
    let wrong = Tensor::zeros([3], DType::F32, "cuda:0")?;
    assert!(matches!(solo.all_gather_into_tensor(&wrong, &t, false), Err(Error::InvalidArgument { .. })));
    let ints = Tensor::zeros([4], DType::I32, "cuda:0")?;
    assert!(matches!(solo.reduce_scatter_tensor(&ints, &t, ReduceOp::Sum, false), Err(Error::DTypeMismatch { .. })));
    let flags = Tensor::zeros([4], DType::Bool, "cuda:0")?;
    assert!(matches!(solo.all_reduce(&flags, ReduceOp::Max, false), Err(Error::UnsupportedDType { .. })));
    let strided = Tensor::ones([4, 4], DType::F32, "cuda:0")?.transpose(0, 1)?;
    assert!(matches!(solo.all_reduce(&strided, ReduceOp::Sum, false), Err(Error::InvalidArgument { .. })));
    assert!(matches!(solo.send(&t, 0, false), Err(Error::InvalidArgument { .. })), "no send to oneself");
    // The group still works after all that.
    solo.all_reduce(&t, ReduceOp::Avg, false)?;
    assert_eq!(t.to_vec::<f32>()?, [1.0; 4]);
    Ok(())
}

#[test]
fn sizes_or_dtypes_that_differ_across_ranks_fail_on_every_rank_and_the_group_goes_on() -> Result<()> {
    let _one = serial();
    let Some(groups) = pair(&quick(20_000)) else { return Ok(()) };
    for (what, shapes, dtypes) in
        [("sizes", [4, 5], [DType::F32, DType::F32]), ("dtypes", [4, 4], [DType::F32, DType::F64])]
    {
        let results = on_ranks(&groups, |g| {
            let t = Tensor::ones([shapes[g.rank()]], dtypes[g.rank()], Device::cuda(g.device()))?;
            g.all_reduce(&t, ReduceOp::Sum, false).map(|_| ())
        });
        for (r, res) in results.iter().enumerate() {
            match res {
                Err(Error::CollectiveMismatch { rank, peer, .. }) => assert_eq!((*rank, *peer), (r, 1 - r), "{what}"),
                other => panic!("{what}, rank {r}: expected CollectiveMismatch, got {other:?}"),
            }
        }
        // Both ranks counted the failed call: the next matching collective pairs up.
        let sums = on_ranks(&groups, |g| {
            let t = Tensor::full([2], (g.rank() + 1) as f64, DType::F32, Device::cuda(g.device()))?;
            g.all_reduce(&t, ReduceOp::Sum, false)?;
            t.to_vec::<f32>()
        });
        for s in sums {
            assert_eq!(s?, [3.0, 3.0], "{what}: the group works after the mismatch");
        }
    }
    Ok(())
}

#[test]
fn the_simulated_backend_finds_a_mismatch_inside_the_collective_when_the_check_is_off() -> Result<()> {
    let _one = serial();
    // Through NCCL a mismatch with the check off hangs, as in PyTorch: only the test double
    // checks inside the collective.
    if !is_sim() {
        return Ok(());
    }
    let options = InitOptions { check_collectives: false, ..quick(20_000) };
    let Some(groups) = pair(&options) else { return Ok(()) };
    let results = on_ranks(&groups, |g| {
        let t = Tensor::ones([4 + g.rank()], DType::F32, Device::cuda(g.device()))?;
        let work = g.all_reduce(&t, ReduceOp::Sum, true)?;
        let outcome = work.wait_blocking();
        // The error is also left on the device: sticky, until get_last_error takes it.
        let kept = cuda::synchronize(g.device());
        assert_eq!(cuda::synchronize(g.device()), kept, "rank {}: still pending", g.rank());
        assert_eq!(cuda::get_last_error(g.device()), kept, "rank {}: taken", g.rank());
        cuda::synchronize(g.device())?;
        Ok((outcome, kept))
    });
    for (r, res) in results.into_iter().enumerate() {
        let (outcome, kept) = res?;
        assert!(matches!(outcome, Err(Error::CollectiveMismatch { .. })), "rank {r}: {outcome:?}");
        assert_eq!(kept, outcome, "rank {r}");
    }
    Ok(())
}

#[test]
fn a_rank_that_never_arrives_is_a_timeout_naming_it() -> Result<()> {
    let _one = serial();
    let Some(groups) = pair(&quick(300)) else { return Ok(()) };
    // Rank 1 never calls the collective (as if it had died).
    let t = Tensor::ones([4], DType::F32, "cuda:0")?;
    match groups[0].all_reduce(&t, ReduceOp::Sum, false) {
        Err(Error::DistributedTimeout { what, timeout_ms: 300 }) => assert!(what.contains("[1]"), "{what}"),
        other => panic!("expected a timeout naming rank 1, got {other:?}"),
    }
    if is_sim() {
        // Without the check, the collective itself times out on the stream, reported by the work.
        let options = InitOptions { check_collectives: false, ..quick(300) };
        let groups = pair(&options).expect("two devices");
        let work = groups[0].all_reduce(&t, ReduceOp::Sum, true)?;
        let outcome = work.wait_blocking();
        assert!(
            matches!(outcome, Err(Error::DistributedTimeout { ref what, .. }) if what.contains("[1]")),
            "{outcome:?}"
        );
        assert_eq!(cuda::synchronize(0), outcome, "kept for the device's synchronize");
        assert_eq!(cuda::get_last_error(0), outcome, "until get_last_error takes it");
    }
    Ok(())
}

#[test]
fn a_rendezvous_that_a_rank_misses_times_out() {
    let _one = serial();
    if !cudasem::testing::has_devices(1) {
        return;
    }
    // A free port for rank 0's store; rank 1 of 2 never comes.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let options = InitOptions {
        init_method: format!("tcp://127.0.0.1:{port}"),
        rank: Some(0),
        world_size: Some(2),
        device: Some(0),
        ..quick(300)
    };
    match ProcessGroup::new(&options) {
        Err(Error::DistributedTimeout { what, .. }) => {
            assert!(what.contains("rendezvous") && what.contains("[1]"), "{what}")
        }
        other => panic!("expected a rendezvous timeout, got {other:?}"),
    }
    // A rank whose store's server never comes times out connecting (another free port: the
    // first one's server may still be closing).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let lonely = InitOptions { rank: Some(1), init_method: format!("tcp://127.0.0.1:{port}"), ..options };
    assert!(matches!(ProcessGroup::new(&lonely), Err(Error::DistributedTimeout { .. })));
}

#[test]
fn ranks_that_are_threads_meet_over_a_tcp_store_and_reduce() -> Result<()> {
    let _one = serial();
    if !cudasem::testing::has_devices(2) {
        return Ok(());
    }
    // A free port (rank 0 serves the store there).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let method = format!("tcp://127.0.0.1:{port}");
    let sums: Vec<Result<Vec<f64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let method = method.clone();
                s.spawn(move || {
                    let options = InitOptions {
                        init_method: method,
                        rank: Some(rank),
                        world_size: Some(2),
                        device: Some(rank),
                        ..quick(20_000)
                    };
                    let g = ProcessGroup::new(&options)?;
                    let t = Tensor::full([5], (rank + 1) as f64, DType::F64, Device::cuda(rank))?;
                    g.all_reduce(&t, ReduceOp::Product, false)?;
                    g.barrier()?;
                    t.to_vec::<f64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for s in sums {
        assert_eq!(s?, [2.0; 5]);
    }
    Ok(())
}

/// `r` is the InvalidArgument of `all_to_all_single` whose reason says `what`.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::InvalidArgument { op: "all_to_all_single", reason }) => {
            assert!(reason.contains(what), "{what}: {reason}")
        }
        other => panic!("{what}: expected InvalidArgument naming all_to_all_single, got {other:?}"),
    }
}

/// Rank 0 of two sends 1 element to itself and 2 to rank 1; rank 1 sends 1 to rank 0. Rank 0
/// expects `from_zero` elements from itself and 1 from rank 1; rank 1 expects `2 + extra` from
/// rank 0 (its output holds that many). Returns each rank's output.
fn uneven_pair(g: &ProcessGroup, extra: usize) -> Result<Vec<f32>> {
    let dev = Device::cuda(g.device());
    let (input, sends, recvs): (Tensor, [usize; 2], [usize; 2]) = if g.rank() == 0 {
        (Tensor::from_slice(&[10.0f32, 11.0, 12.0], [3], dev)?, [1, 2], [1, 1])
    } else {
        (Tensor::from_slice(&[20.0f32], [1], dev)?, [1, 0], [2 + extra, 0])
    };
    let output = Tensor::zeros([recvs.iter().sum::<usize>()], DType::F32, dev)?;
    // The work's own outcome: with the check off a mismatch is found on the stream.
    g.all_to_all_single_splits(&output, &input, Some(&recvs), Some(&sends), true)?.wait_blocking()?;
    output.to_vec::<f32>()
}

#[test]
fn all_to_all_split_sizes_are_checked_locally_naming_the_call() -> Result<()> {
    let _one = serial();
    if !cudasem::testing::has_devices(1) {
        return Ok(());
    }
    let solo = ProcessGroup::from_devices(&[0])?.remove(0);
    let input = Tensor::ones([3, 2], DType::F32, "cuda:0")?;
    let output = Tensor::zeros([3, 2], DType::F32, "cuda:0")?;
    refused(solo.all_to_all_single_splits(&output, &input, Some(&[3]), Some(&[1, 2]), false), "2 entries");
    refused(solo.all_to_all_single_splits(&output, &input, Some(&[2]), Some(&[3]), false), "sums to 2");
    let scalar = Tensor::ones([], DType::F32, "cuda:0")?;
    refused(solo.all_to_all_single_splits(&output, &scalar, None, Some(&[1]), false), "0-dim");
    let ints = Tensor::zeros([3, 2], DType::I32, "cuda:0")?;
    let r = solo.all_to_all_single_splits(&ints, &input, Some(&[3]), Some(&[3]), false);
    assert!(matches!(r, Err(Error::DTypeMismatch { op: "all_to_all_single", .. })), "{r:?}");
    if let Some(groups) = pair(&quick(20_000)) {
        // Dim 0 of 3 rows does not split equally over 2 ranks when a side's splits are None.
        let results = on_ranks(&groups, |g| {
            let dev = Device::cuda(g.device());
            let (input, output) = (Tensor::ones([3, 2], DType::F32, dev)?, Tensor::zeros([3, 2], DType::F32, dev)?);
            g.all_to_all_single_splits(&output, &input, None, Some(&[1, 2]), false).map(|_| ())
        });
        for r in results {
            refused(r, "does not split equally");
        }
        // Every rank refused the same call before the store: the next one pairs up.
        let got: Vec<Vec<f32>> = on_ranks(&groups, |g| uneven_pair(g, 0)).into_iter().collect::<Result<_>>()?;
        assert_eq!(got, [vec![10.0, 20.0], vec![11.0, 12.0]], "the group works after the refusals");
    }
    // The group of one still works after all that.
    solo.all_to_all_single_splits(&output, &input, Some(&[3]), None, false)?;
    assert_eq!(output.to_vec::<f32>()?, [1.0; 6]);
    Ok(())
}

#[test]
fn all_to_all_splits_that_do_not_pair_up_fail_on_every_rank_and_the_group_goes_on() -> Result<()> {
    let _one = serial();
    // With the check (any backend), and inside the collective with the check off (the simulated
    // backend only: NCCL would hang or mix the data, as in PyTorch).
    let mut cases = vec![quick(20_000)];
    if is_sim() {
        cases.push(InitOptions { check_collectives: false, ..quick(20_000) });
    }
    for options in cases {
        let Some(groups) = pair(&options) else { return Ok(()) };
        // Rank 1 expects 3 elements from rank 0, which sends it 2.
        let results = on_ranks(&groups, |g| uneven_pair(g, 1));
        for (r, res) in results.into_iter().enumerate() {
            match res {
                Err(Error::SplitMismatch {
                    op: "all_to_all_single",
                    rank,
                    src: 0,
                    dst: 1,
                    sent: 2,
                    expected: 3,
                    ..
                }) => {
                    assert_eq!(rank, r)
                }
                other => panic!("check {}, rank {r}: expected SplitMismatch, got {other:?}", options.check_collectives),
            }
        }
        // The error left on each device (with the check off) is taken; the group goes on.
        for g in &groups {
            let _ = cuda::get_last_error(g.device());
        }
        let got: Vec<Vec<f32>> = on_ranks(&groups, |g| uneven_pair(g, 0)).into_iter().collect::<Result<_>>()?;
        assert_eq!(got, [vec![10.0, 20.0], vec![11.0, 12.0]], "check {}", options.check_collectives);
    }
    // Four ranks: only ranks 1 and 2 disagree; all four report that pair.
    if !cudasem::testing::has_devices(4) {
        return Ok(());
    }
    let groups = ProcessGroup::from_devices_with(&[0, 1, 2, 3], &quick(20_000))?;
    let results = on_ranks(&groups, |g| {
        let dev = Device::cuda(g.device());
        // Every rank sends one element to every rank, but rank 2 expects two from rank 1.
        let input = Tensor::full([4], g.rank() as f64, DType::F64, dev)?;
        let recvs: Vec<usize> = (0..4).map(|s| if g.rank() == 2 && s == 1 { 2 } else { 1 }).collect();
        let output = Tensor::zeros([recvs.iter().sum::<usize>()], DType::F64, dev)?;
        g.all_to_all_single_splits(&output, &input, Some(&recvs), Some(&[1, 1, 1, 1]), false).map(|_| ())
    });
    for (r, res) in results.into_iter().enumerate() {
        assert!(
            matches!(res, Err(Error::SplitMismatch { rank, src: 1, dst: 2, sent: 1, expected: 2, .. }) if rank == r),
            "rank {r}: {res:?}"
        );
    }
    Ok(())
}

#[test]
fn a_collective_that_cannot_finish_aborts_the_group_and_later_calls_fail_at_once() -> Result<()> {
    let _one = serial();
    if !cudasem::testing::has_devices(1) {
        return Ok(());
    }
    // The communication stream is held far beyond the group's timeout, so the collective behind
    // it never finishes in time (as if a peer never came): the watchdog aborts the group (NCCL:
    // ncclCommAbort) instead of letting the host wait, on the simulated backend and through NCCL.
    let solo = ProcessGroup::from_devices_with(&[0], &quick(200))?.remove(0);
    let t = Tensor::ones([4], DType::F32, "cuda:0")?;
    // A first collective sets the communicator up (NCCL connects lazily, and its first call may
    // wait for the communication stream on the host), so the stuck one below is queued at once.
    solo.all_reduce(&t, ReduceOp::Sum, false)?;
    cuda::synchronize(0)?;
    cudasem::testing::delay(solo.comm_stream(), std::time::Duration::from_secs(3))?;
    let work = solo.all_reduce(&t, ReduceOp::Sum, true)?;
    let outcome = work.wait_blocking();
    match &outcome {
        Err(Error::DistributedTimeout { what, timeout_ms: 200 }) => {
            assert!(what.contains("all_reduce (collective #2)") && what.contains("watchdog"), "{what}")
        }
        other => panic!("expected the watchdog's timeout, got {other:?}"),
    }
    assert_eq!(solo.abort_cause().map(Err::<(), _>), Some(outcome.clone()));
    assert_eq!(work.is_completed().map(|_| ()), outcome, "the work keeps its error");
    // Every later call is refused at once, naming itself and the cause.
    for r in
        [solo.all_reduce(&t, ReduceOp::Sum, false).map(|_| ()), solo.broadcast(&t, 0, true).map(|_| ()), solo.barrier()]
    {
        match r {
            Err(Error::ProcessGroupAborted { rank: 0, cause, .. }) => assert_eq!(Err(*cause), outcome),
            other => panic!("expected ProcessGroupAborted, got {other:?}"),
        }
    }
    // The abort is also the device's pending error, until taken.
    assert_eq!(cuda::get_last_error(0), outcome, "the abort is left on the device");
    // Destroying the aborted group does not wait for the stuck stream; the runtime goes on.
    drop((work, solo));
    let fresh = ProcessGroup::from_devices_with(&[0], &quick(20_000))?.remove(0);
    let t = Tensor::full([4], 2.0, DType::F32, "cuda:0")?;
    fresh.all_reduce(&t, ReduceOp::Sum, false)?;
    assert_eq!(t.to_vec::<f32>()?, [2.0; 4]);
    cuda::synchronize(0)?;
    Ok(())
}

#[test]
fn a_rank_stuck_mid_collective_is_an_error_on_every_rank() -> Result<()> {
    let _one = serial();
    // Both ranks pass the check; rank 1's collective then never runs in time (its communication
    // stream is held): rank 0's collective times out waiting for rank 1 (naming it, on the
    // simulated backend; through NCCL the watchdog aborts it), rank 1's watchdog aborts its group.
    let Some(groups) = pair(&quick(300)) else { return Ok(()) };
    cudasem::testing::delay(groups[1].comm_stream(), std::time::Duration::from_secs(3))?;
    let results = on_ranks(&groups, |g| {
        let t = Tensor::ones([4], DType::F32, Device::cuda(g.device()))?;
        g.all_reduce(&t, ReduceOp::Sum, true)?.wait_blocking()
    });
    for (r, res) in results.iter().enumerate() {
        match res {
            Err(Error::DistributedTimeout { what, .. }) => {
                let sim_wait = is_sim() && r == 0;
                assert!(if sim_wait { what.contains("[1]") } else { what.contains("watchdog") }, "rank {r}: {what}");
            }
            other => panic!("rank {r}: expected a timeout, got {other:?}"),
        }
    }
    assert!(groups[1].abort_cause().is_some(), "rank 1's group aborted");
    let t = Tensor::ones([4], DType::F32, "cuda:1")?;
    assert!(matches!(groups[1].all_reduce(&t, ReduceOp::Sum, true), Err(Error::ProcessGroupAborted { rank: 1, .. })));
    drop(groups);
    // The errors the ranks' collectives left on their devices are taken.
    for d in [0, 1] {
        assert!(cuda::get_last_error(d).is_err(), "cuda:{d} kept its rank's error");
        cuda::synchronize(d)?;
    }
    Ok(())
}

/// Rank 1 of two comes to an all_reduce past the group's timeout (its communication stream is
/// held): on both ranks the collective fails after it was queued. The error reaches the user at
/// the first read: the tensor it was to write is poisoned (to_vec, item, cpu return the error, not
/// the rank's own un-reduced data), the work's wait and the device's synchronization points
/// return it, until get_last_error takes it; the poisoned tensor stays unreadable, others read.
#[test]
fn a_collective_that_fails_after_queueing_is_the_error_of_the_first_read() -> Result<()> {
    let _one = serial();
    let Some(groups) = pair(&quick(300)) else { return Ok(()) };
    cudasem::testing::delay(groups[1].comm_stream(), std::time::Duration::from_secs(3))?;
    let results = on_ranks(&groups, |g| {
        let mut rng = dist_util::Rng::new(36 + g.rank() as u64);
        let data: Vec<f32> = (0..64).map(|_| rng.float() as f32).collect();
        let dev = Device::cuda(g.device());
        let t = Tensor::from_slice(&data, [64], dev)?;
        let work = g.all_reduce(&t, ReduceOp::Sum, false)?;
        let read = t.to_vec::<f32>();
        if let Ok(v) = &read {
            panic!("rank {}: to_vec returned data (its own: {}) after a failed all_reduce", g.rank(), *v == data);
        }
        // The sim: a timeout (rank 0's collective names rank 1); NCCL: the watchdog's timeout, or
        // the communicator's error once the peer aborted.
        assert!(
            matches!(read, Err(Error::DistributedTimeout { .. } | Error::Nccl { .. })),
            "rank {}: {read:?}",
            g.rank()
        );
        let err = read.clone().map(|_| ());
        assert_eq!(t.narrow(0, 0, 1)?.item::<f32>().map(|_| ()), err, "item");
        assert_eq!(t.cpu().map(|_| ()), err, "cpu");
        assert_eq!(work.wait(), err, "Work::wait");
        assert_eq!(cuda::current_stream(g.device())?.synchronize(), err, "the stream's synchronize");
        assert_eq!(cuda::synchronize(g.device()), err, "the device's synchronize, still");
        assert_eq!(cuda::get_last_error(g.device()), err, "taken");
        // The device reads again; the tensor the collective was to write does not.
        assert_eq!(t.to_vec::<f32>().map(|_| ()), err, "the poisoned tensor stays unreadable");
        let fresh = Tensor::from_slice(&data, [64], dev)?;
        assert_eq!(fresh.to_vec::<f32>()?, data);
        cuda::synchronize(g.device())
    });
    for (r, res) in results.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
    Ok(())
}

/// The same with `async_op = true`: the work is waited for before it failed; the first read
/// after that still returns the error.
#[test]
fn an_async_collective_that_fails_later_is_the_error_of_the_first_read() -> Result<()> {
    let _one = serial();
    let Some(groups) = pair(&quick(300)) else { return Ok(()) };
    cudasem::testing::delay(groups[1].comm_stream(), std::time::Duration::from_secs(3))?;
    let results = on_ranks(&groups, |g| {
        let mut rng = dist_util::Rng::new(360 + g.rank() as u64);
        let data: Vec<f64> = (0..16).map(|_| rng.float()).collect();
        let out = Tensor::zeros([32], DType::F64, Device::cuda(g.device()))?;
        let input = Tensor::from_slice(&data, [16], Device::cuda(g.device()))?;
        let work = g.all_gather_into_tensor(&out, &input, true)?;
        // Queued; the failure comes later (or, on a slow host, has come: then it is its error).
        let early = work.wait();
        // A non-blocking copy to pinned host memory, queued before the failure: the host's
        // first read of it waits for the copy and returns the error.
        let staged = out.to(Device::Cpu, true)?;
        assert!(staged.is_pinned());
        let read = staged.to_vec::<f64>().map(|_| ());
        assert!(
            matches!(read, Err(Error::DistributedTimeout { .. } | Error::Nccl { .. })),
            "rank {}: {read:?}",
            g.rank()
        );
        assert!(early.is_ok() || early == read, "rank {}: {early:?}", g.rank());
        assert_eq!(out.to_vec::<f64>().map(|_| ()), read, "the poisoned output");
        assert_eq!(out.to(Device::Cpu, true).map(|_| ()), read, "a new non-blocking copy of it");
        assert_eq!(work.wait(), read, "Work::wait after the failure");
        assert_eq!(cuda::get_last_error(g.device()), read, "the device kept it");
        // The input was only read: it is not poisoned.
        assert_eq!(input.to_vec::<f64>()?, data);
        Ok(())
    });
    for (r, res) in results.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
    Ok(())
}
