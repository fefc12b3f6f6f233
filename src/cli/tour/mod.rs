//! `cudasem tour`: one section per rule of PyTorch's CUDA semantics. Each explains the rule in a
//! sentence, shows it happening with real figures, and ends with `ok <section>`,
//! `skipped <section>: <why>` or `FAILED <section>: <why>`.
//!
//! `section.rs` holds what every section shares (the runner, the checks); `runtime.rs`,
//! `tensors.rs`, `memory.rs`, `graphs.rs` and `sanitizer.rs` hold the sections; this file only
//! lists them in order.

mod graphs;
mod memory;
mod runtime;
mod sanitizer;
mod section;
mod tensors;

use cudasem::cuda;
use section::{run_section, Section};
use std::process::ExitCode;

const SECTIONS: &[(&str, &str, Section)] = &[
    (
        "devices",
        "Each thread has a selected (current) device, cuda:0 until changed; device queries name any device.",
        runtime::devices,
    ),
    (
        "device-guard",
        "A DeviceGuard selects a device for a scope and restores the previous one on exit, when nested, and on panic; other threads are unaffected.",
        runtime::device_guard,
    ),
    (
        "streams",
        "Each device has a default stream; the current stream starts as the default, pool streams are handed out round-robin, and a StreamGuard switches device and stream together.",
        runtime::streams,
    ),
    (
        "asynchrony",
        "Device work is queued and the call returns at once, with the stream still busy; events time the work on the device's clock.",
        runtime::asynchrony,
    ),
    (
        "events",
        "An event marks a point in a stream: other streams can wait for it without blocking the host, and timing follows PyTorch's rules.",
        runtime::events,
    ),
    (
        "tensor-placement",
        "A tensor made on \"cuda\" lands on the current device: cuda:0 until changed, cuda:i under DeviceGuard(i); an explicit index wins.",
        tensors::placement,
    ),
    (
        "tensor-ops",
        "An op runs on its tensors' device and that device's current stream, whatever device is selected; the result lives with the operands.",
        tensors::ops_follow_operands,
    ),
    (
        "cross-device-ops",
        "An op mixing tensors of two GPUs fails naming both devices, unless peer access between them is enabled: then it runs on the first operand's device and reads the other over the link.",
        tensors::cross_device,
    ),
    (
        "peer-access",
        "can_device_access_peer answers from the topology; enable_peer_access turns the link on (or says why it cannot); copies between devices work either way.",
        runtime::peer_access,
    ),
    (
        "caching-allocator",
        "Device memory comes from a caching allocator: a freed block stays reserved, the next request reuses it without a driver call, and empty_cache() returns it.",
        memory::caching_allocator,
    ),
    (
        "out-of-memory",
        "When memory runs out the allocator frees its cache and retries; if the request still cannot fit it fails with PyTorch's out-of-memory message, and the device stays usable.",
        memory::out_of_memory,
    ),
    (
        "pinned-memory",
        "A non_blocking copy to the host lands in pinned memory and returns at once; reading it waits for the copy; pinned blocks come from a caching host allocator.",
        tensors::pinned_memory,
    ),
    (
        "non-blocking-overlap",
        "A non_blocking copy from pinned memory is queued on its stream and overlaps with compute on another stream: both finish in about the longer time, not the sum.",
        tensors::overlap,
    ),
    (
        "pinned-vs-pageable",
        "Host-to-device copies from pinned memory go straight to the copy engine; from pageable memory they are staged through a bounce buffer and block the host.",
        tensors::pinned_vs_pageable,
    ),
    (
        "cuda-graphs",
        "Work captured once into a CUDA graph replays with one launch, from whatever its captured inputs hold then; the capture allocates from a private pool that the allocator's statistics and snapshots count.",
        graphs::graphs,
    ),
    (
        "stream-sanitizer",
        "With the stream sanitizer on (CUDASEM_SANITIZER=1), a tensor used on a second stream without wait_stream is refused before the work is queued, naming both streams, both operations and both stacks.",
        sanitizer::stream_sanitizer,
    ),
];

/// Runs every section; the exit code is 1 if any failed.
pub fn run() -> ExitCode {
    println!("cudasem tour — PyTorch's CUDA semantics, checked on this machine");
    println!(
        "driver: {}, devices: {} (set CUDASEM_DRIVER=cuda|sim, CUDASEM_SIM_DEVICES, CUDASEM_SIM_PEER to change)\n",
        cuda::driver_name(),
        cuda::device_count()
    );
    if cuda::driver_name() == "sim" {
        println!(
            "(simulated machine: device times below — events, copies — are modelled from an H200's figures, not measured; \
             host times are measured)\n"
        );
    }
    let mut failed = Vec::new();
    for (name, rule, section) in SECTIONS {
        if !run_section(name, rule, *section) {
            failed.push(*name);
        }
    }
    if failed.is_empty() {
        println!("tour passed: every section held on this machine ({} driver)", cuda::driver_name());
        ExitCode::SUCCESS
    } else {
        println!("tour FAILED: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
