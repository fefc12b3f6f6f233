#!/usr/bin/env python3
"""PyTorch's side of `cudasem bench`: the same figures, measured with the same method and sizes as
src/cli/bench/ (BENCHMARKS.md explains each). `cudasem bench` runs this script after its own figures
and reads its stdout; it can also run alone: `python3 bench/pytorch_bench.py [--quick] [--only a,b]`.

Output protocol, one message per line (everything else on stdout is ignored by the reader):
  INFO torch|cuda|machine TEXT     versions and the GPUs
  PROGRESS NAME                    starts a step (or another stage, e.g. build_extension)
  RESULT ROW VALUE UNIT            a figure, checked against a CPU reference before timing
  SKIP NAME REASON / ERROR NAME REASON   a step or row without a figure, and why
  FATAL REASON                     nothing can be measured (no torch, no CUDA); exit status 3

The allocator figures of PyTorch (alloc_free_pair, empty_tensor) are timed in C++ (a small extension built
on the spot with torch.utils.cpp_extension.load_inline) since Python's own call costs more than what is
measured. small_op is torch.add through Python, as PyTorch users call it (the figure the goal was set
against: PyTorch's small op costs about 2x a bare launch); small_op_cpp is the same op through C++ at::add.
The e2e_ rows are whole programs (a pinned, two-stream bf16 MLP pipeline; a decode step of ten small ops),
written here as in src/cli/bench/e2e.rs, stream for stream and op for op.
"""
import argparse
import gc
import math
import os
import statistics
import sys
import tempfile
import time

STEPS = [
    "alloc_free_pair", "alloc_free_pair_stacks", "empty_tensor", "small_op", "add_f32_256m", "sum_f32_1gib", "matmul_fp32_8192",
    "matmul_tf32_8192", "matmul_bf16_8192", "h2d_pinned_1gib", "d2h_pinned_1gib", "h2d_pageable_1gib",
    "p2p_copy_1gib", "replay_resnet50", "e2e_mlp_pipeline_bf16", "e2e_decode_step", "e2e_decode_step_graphed",
    "graph_replay", "allreduce", "random",
]
# The jiterator rows live in pytorch_jit.py beside this script (their own sizes, the same protocol).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_jit  # noqa: E402
STEPS += pytorch_jit.STEPS
# Last: PyTorch's CUDA Sanitizer cannot be switched off once on.
STEPS.append("small_op_sanitized")

# The same table as `Sizes` in src/cli/bench/measure.rs.
FULL = dict(pairs=200_000, empties=100_000, host_runs=7, small_ops=200, small_runs=51, elems=1 << 28,
            mm=8192, copy_elems=1 << 28, warmup=3, runs=15, reps=10,
            mlp_rows=1024, mlp_hidden=4096, mlp_ff=16384, mlp_batches=50, decode_hidden=4096, decode_steps=200,
            graph_replays=50)
QUICK = dict(pairs=20_000, empties=5_000, host_runs=3, small_ops=200, small_runs=5, elems=1 << 16,
             mm=128, copy_elems=1 << 18, warmup=1, runs=3, reps=2,
             mlp_rows=32, mlp_hidden=64, mlp_ff=256, mlp_batches=4, decode_hidden=256, decode_steps=20,
             graph_replays=5)

CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <chrono>
using Clock = std::chrono::steady_clock;
static double ns_per(Clock::time_point t0, int64_t n) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}
// raw_alloc + raw_delete of a cached block: host ns per pair.
double pair_ns(int64_t size, int64_t n) {
  auto* a = c10::cuda::CUDACachingAllocator::get();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) a->raw_delete(a->raw_alloc(size));
  return ns_per(t0, n);
}
// at::empty({1024}, float, cuda) created and dropped: host ns per tensor.
double empty_ns(int64_t n) {
  auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) { auto t = at::empty({1024}, opts); }
  return ns_per(t0, n);
}
// at::add(x, y): host ns per op.
double add_ns(at::Tensor x, at::Tensor y, int64_t n) {
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) { auto z = at::add(x, y); }
  return ns_per(t0, n);
}
"""


def say(*parts):
    print(*parts, flush=True)


class Wrong(Exception):
    """A result that disagrees with the CPU reference."""


def check(ok, what):
    if not ok:
        raise Wrong("wrong result: " + what)


def host_ns(torch, runs, f):
    """Median host ns per call over `runs` timed runs (after two untimed ones), each run after a
    synchronize; `f()` runs one whole run and returns its ns per call (timed inside, in C++ or here)."""
    times = []
    for run in range(runs + 2):
        torch.cuda.synchronize()
        ns = f()
        if run >= 2:
            times.append(ns)
    torch.cuda.synchronize()
    return statistics.median_high(times)


def device_ms(torch, s, f):
    """Median device ms per call: warm-up, then runs of `reps` calls between two timing events on the
    current stream."""
    for _ in range(s["warmup"]):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(s["runs"]):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(s["reps"]):
            f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / s["reps"])
    return statistics.median_high(times)


def gb_per_s(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


# Pinned buffers per direction of the MLP pipeline: batch i uses buffer i % BUFFERS.
BUFFERS = 2
# The decode step's variance epsilon (LayerNorm's default).
DECODE_EPS = 1e-5


def sample_rows(rows):
    """The rows the MLP pipeline's check samples: first, two inner ones, last."""
    return [0, rows // 3, 2 * rows // 3, rows - 1]


class Bench:
    def __init__(self, torch, s, trace):
        self.torch, self.s, self.trace = torch, s, trace
        self._ext, self._ext_error = None, None

    def ext(self):
        """The C++ extension, built once on first use (in a fresh temporary folder)."""
        if self._ext is None and self._ext_error is None:
            say("PROGRESS build_extension")
            try:
                from torch.utils.cpp_extension import load_inline
                build = tempfile.mkdtemp(prefix="cudasem_bench_ext_", dir=os.environ.get("TMPDIR"))
                self._ext = load_inline("cudasem_bench_ext", cpp_sources=CPP,
                                        functions=["pair_ns", "empty_ns", "add_ns"], with_cuda=True,
                                        extra_cflags=["-O2"], build_directory=build, verbose=False)
            except Exception as e:  # no compiler or headers: the C++ rows say why
                self._ext_error = f"the C++ extension did not build: {type(e).__name__}: {str(e)[:300]}"
        if self._ext is None:
            raise RuntimeError(self._ext_error)
        return self._ext

    def alloc_free_pair(self):
        torch, s, ext = self.torch, self.s, self.ext()
        for name, size in [("alloc_free_pair", 1 << 20), ("alloc_free_pair_512b", 512),
                           ("alloc_free_pair_64mib", 64 << 20)]:
            p = torch.cuda.caching_allocator_alloc(size)
            check(p != 0, f"caching_allocator_alloc({size}) returned a null pointer")
            torch.cuda.caching_allocator_delete(p)
            before = torch.cuda.memory_stats().get("num_device_alloc")
            ns = host_ns(torch, s["host_runs"], lambda: ext.pair_ns(size, s["pairs"]))
            after = torch.cuda.memory_stats().get("num_device_alloc")
            check(before == after, f"timed pairs of {size} B reached the driver")
            say("RESULT", name, f"{ns:.6g}", "ns")

    def alloc_free_pair_stacks(self):
        """alloc_free_pair of 4096 B (1024 float32) with the memory history on: _stacks with
        _record_memory_history(context="all", stacks="all") (Python and C++ stacks of each alloc and
        free), _history with context=None (events, no stacks). The history is off again after."""
        torch, s, ext = self.torch, self.s, self.ext()
        size = 4096
        for name, kw in [("alloc_free_pair_stacks", dict(context="all", stacks="all")),
                         ("alloc_free_pair_history", dict(context=None))]:
            torch.cuda.memory._record_memory_history(max_entries=100_000, **kw)
            try:
                ext.pair_ns(size, 100)  # warm: a block of this size cached with the history on
                before = torch.cuda.memory_stats().get("num_device_alloc")
                ns = host_ns(torch, s["host_runs"], lambda: ext.pair_ns(size, s["pairs"]))
                after = torch.cuda.memory_stats().get("num_device_alloc")
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
            check(before == after, f"{name}: timed pairs of {size} B reached the driver")
            say("RESULT", name, f"{ns:.6g}", "ns")

    def empty_tensor(self):
        torch, s, ext = self.torch, self.s, self.ext()
        t = torch.empty(1024, dtype=torch.float32, device="cuda")
        check(t.shape == (1024,) and t.is_cuda, f"empty gave {t.shape} on {t.device}")
        del t
        ns = host_ns(torch, s["host_runs"], lambda: ext.empty_ns(s["empties"]))
        say("RESULT empty_tensor", f"{ns:.6g}", "ns")

    def small_op(self):
        torch, s = self.torch, self.s
        xs, ys = torch.rand(16) * 2 - 1, torch.rand(16) * 2 - 1
        x, y = xs.cuda(), ys.cuda()
        check(torch.equal(torch.add(x, y).cpu(), xs + ys), "torch.add of 16 float32 disagrees with the CPU")
        n = s["small_ops"]

        def python_run():
            t = time.perf_counter_ns()
            for _ in range(n):
                torch.add(x, y)
            return (time.perf_counter_ns() - t) / n

        ns = host_ns(torch, s["small_runs"], python_run)
        say("RESULT small_op", f"{ns:.6g}", "ns")
        ext = self.ext()  # after the Python row, so that row survives a failed build
        ns = host_ns(torch, s["small_runs"], lambda: ext.add_ns(x, y, n))
        say("RESULT small_op_cpp", f"{ns:.6g}", "ns")

    def small_op_sanitized(self):
        # torch.add under the CUDA Sanitizer (CSAN), which stays on for the rest of the process: the
        # last step.
        torch, s = self.torch, self.s
        import torch.cuda._sanitizer as csan

        x, y = torch.rand(16, device="cuda"), torch.rand(16, device="cuda")
        csan.enable_cuda_sanitizer()
        check(torch.equal(torch.add(x, y).cpu(), x.cpu() + y.cpu()), "torch.add under CSAN disagrees with the CPU")
        n = s["small_ops"]

        def python_run():
            t = time.perf_counter_ns()
            for _ in range(n):
                torch.add(x, y)
            return (time.perf_counter_ns() - t) / n

        ns = host_ns(torch, s["small_runs"], python_run)
        say("RESULT small_op_sanitized", f"{ns:.6g}", "ns")

    def add_f32_256m(self):
        torch, s = self.torch, self.s
        n = s["elems"]
        a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        check(torch.equal(torch.add(a, b).cpu(), a.cpu() + b.cpu()), "torch.add disagrees with the CPU")
        ms = device_ms(torch, s, lambda: torch.add(a, b))
        say("RESULT add_f32_256m", f"{gb_per_s(3 * 4 * n, ms):.6g}", "GB/s")

    def sum_f32_1gib(self):
        torch, s = self.torch, self.s
        n = s["elems"]
        a = torch.rand(n, device="cuda")
        want = a.cpu().double().sum().item()
        got = a.sum().item()
        check(abs(got - want) <= 1e-4 * abs(want), f"sum gave {got}, the CPU (float64) {want}")
        ms = device_ms(torch, s, lambda: a.sum())
        say("RESULT sum_f32_1gib", f"{gb_per_s(4 * n, ms):.6g}", "GB/s")

    def matmul(self, name, dtype, tf32):
        torch, s = self.torch, self.s
        mm = s["mm"]
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            x = torch.rand(mm, mm, device="cuda").to(dtype)
            y = torch.rand(mm, mm, device="cuda").to(dtype)
            z = (x @ y).float().cpu()
            xv, yv = x.double().cpu(), y.double().cpu()
            tol = 1e-3 if dtype == torch.float32 and not tf32 else 2e-2
            g = torch.Generator().manual_seed(mm)
            for _ in range(32):
                i, j = (int(v) for v in torch.randint(0, mm, (2,), generator=g))
                want = float(xv[i] @ yv[:, j])
                got = float(z[i, j])
                check(abs(got - want) <= tol * max(abs(want), 1.0), f"{name}: entry ({i}, {j}) is {got}, the CPU {want}")
            del z, xv, yv
            ms = device_ms(torch, s, lambda: x @ y)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
        say("RESULT", name, f"{2.0 * mm ** 3 / (ms * 1e-3) / 1e12:.6g}", "TFLOP/s")

    def matmul_fp32_8192(self):
        self.matmul("matmul_fp32_8192", self.torch.float32, False)

    def matmul_tf32_8192(self):
        self.matmul("matmul_tf32_8192", self.torch.float32, True)

    def matmul_bf16_8192(self):
        self.matmul("matmul_bf16_8192", self.torch.bfloat16, False)

    def h2d_pinned_1gib(self):
        torch, s = self.torch, self.s
        n = s["copy_elems"]
        host = torch.rand(n).pin_memory()
        dev = torch.empty(n, device="cuda")
        dev.copy_(host, non_blocking=True)
        check(torch.equal(dev.cpu(), host), "pinned → device copy")
        ms = device_ms(torch, s, lambda: dev.copy_(host, non_blocking=True))
        say("RESULT h2d_pinned_1gib", f"{gb_per_s(4 * n, ms):.6g}", "GB/s")

    def d2h_pinned_1gib(self):
        torch, s = self.torch, self.s
        n = s["copy_elems"]
        dev = torch.rand(n, device="cuda")
        host = torch.empty(n, pin_memory=True)
        host.copy_(dev, non_blocking=True)
        torch.cuda.synchronize()
        check(torch.equal(host, dev.cpu()), "device → pinned copy")
        ms = device_ms(torch, s, lambda: host.copy_(dev, non_blocking=True))
        say("RESULT d2h_pinned_1gib", f"{gb_per_s(4 * n, ms):.6g}", "GB/s")

    def h2d_pageable_1gib(self):
        torch, s = self.torch, self.s
        n = s["copy_elems"]
        host = torch.rand(n)
        dev = torch.empty(n, device="cuda")
        dev.copy_(host)
        check(torch.equal(dev.cpu(), host), "pageable → device copy")
        for _ in range(s["warmup"]):
            dev.copy_(host)
        times = []
        for _ in range(s["runs"]):
            torch.cuda.synchronize()
            t = time.perf_counter()
            dev.copy_(host)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        say("RESULT h2d_pageable_1gib", f"{gb_per_s(4 * n, statistics.median_high(times)):.6g}", "GB/s")

    def p2p_copy_1gib(self):
        torch, s = self.torch, self.s
        count = torch.cuda.device_count()
        if count < 2:
            say("SKIP p2p_copy_1gib", f"needs 2 devices; torch sees {count}")
            return
        if not torch.cuda.can_device_access_peer(0, 1):
            say("SKIP p2p_copy_1gib cuda:0 cannot access cuda:1 (no peer access)")
            return
        n = s["copy_elems"]
        with torch.cuda.device(0):
            src = torch.rand(n, device="cuda:0")
            dst = torch.empty(n, device="cuda:1")
            dst.copy_(src, non_blocking=True)  # PyTorch enables peer access on its first peer copy
            check(torch.equal(dst.cpu(), src.cpu()), "cuda:0 → cuda:1 copy")
            ms = device_ms(torch, s, lambda: dst.copy_(src, non_blocking=True))
        del src, dst
        torch.cuda.synchronize(1)
        say("RESULT p2p_copy_1gib", f"{gb_per_s(4 * n, ms):.6g}", "GB/s")

    def allreduce(self):
        torch, s = self.torch, self.s
        count = torch.cuda.device_count()
        if count < 2:
            reason = f"a world of one rank has no bus bandwidth: needs 2 devices; torch sees {count}"
            say("SKIP allreduce_1gib_busbw", reason)
            say("SKIP allreduce_8kib_latency", reason)
            return
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        port = free_port()
        procs = [ctx.Process(target=allreduce_rank, args=(r, count, port, s, queue)) for r in range(count)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        check(all(p.exitcode == 0 for p in procs), "every rank of the all-reduce bench exits 0")
        big_ms, small_ms = queue.get()
        n = s["copy_elems"]
        busbw = 4 * n / (big_ms * 1e-3) / 1e9 * 2 * (count - 1) / count
        say("RESULT allreduce_1gib_busbw", f"{busbw:.6g}", "GB/s")
        say("RESULT allreduce_8kib_latency", f"{small_ms * 1e3:.6g}", "µs")

    def replay_resnet50(self):
        """The trace's alloc / free_completed rows through PyTorch's caching allocator, from an empty
        cache: reserved_bytes.all.peak."""
        torch = self.torch
        rows = []
        with open(self.trace) as f:
            for line in f:
                parts = line.strip().split(",")
                if len(parts) == 4 and parts[0] in ("alloc", "free_completed"):
                    rows.append((parts[0], parts[1], int(parts[2])))
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        live, requested, peak_requested = {}, 0, 0
        for action, addr, size in rows:
            if action == "alloc":
                live[addr] = (torch.cuda.caching_allocator_alloc(size), size)
                requested += size
                peak_requested = max(peak_requested, requested)
            else:
                ptr, size = live.pop(addr)
                torch.cuda.caching_allocator_delete(ptr)
                requested -= size
        peak = torch.cuda.memory_stats()["reserved_bytes.all.peak"]
        check(not live, f"{len(live)} blocks still live after the trace")
        check(peak >= peak_requested, f"peak reserved {peak} B is below the live bytes {peak_requested} B")
        torch.cuda.empty_cache()
        say("RESULT replay_resnet50", str(peak), "bytes")

    # The end-to-end rows: the programs of src/cli/bench/e2e.rs, op for op and stream for stream.

    def e2e_mlp_pipeline_bf16(self):
        """bf16 batches uploaded from pinned memory on a side stream while the previous batch computes
        softmax(float(gelu(x @ w1) @ w2), -1) on the current stream, each result downloaded without
        blocking into pinned memory: one untimed pass (its last batch checked), then timed passes (the
        last one's last batch checked again); median device ms per batch."""
        torch, s = self.torch, self.s
        rows, hidden, ff, n = s["mlp_rows"], s["mlp_hidden"], s["mlp_ff"], s["mlp_batches"]
        gelu = torch.nn.functional.gelu
        w1 = (torch.randn(hidden, ff, device="cuda") * (1.0 / math.sqrt(hidden))).to(torch.bfloat16)
        w2 = (torch.randn(ff, hidden, device="cuda") * (1.0 / math.sqrt(ff))).to(torch.bfloat16)
        inputs = [torch.randn(rows, hidden).to(torch.bfloat16).pin_memory() for _ in range(BUFFERS)]
        outputs = [torch.empty(rows, hidden, pin_memory=True) for _ in range(BUFFERS)]
        side = torch.cuda.Stream()

        def upload(i):
            with torch.cuda.stream(side):
                return inputs[i % BUFFERS].to("cuda", non_blocking=True)

        def one_pass():
            current = torch.cuda.current_stream()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            side.wait_stream(current)
            nxt = upload(0)
            for i in range(n):
                current.wait_stream(side)
                x = nxt
                x.record_stream(current)
                if i + 1 < n:
                    nxt = upload(i + 1)
                y = torch.softmax((gelu(x @ w1) @ w2).float(), dim=-1)
                outputs[i % BUFFERS].copy_(y, non_blocking=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        def check_batch(i):
            # float64 from the same bf16 inputs, rounded to bf16 where the device's bf16 ops round; a
            # logit's rounding that falls the other way (or a GEMM's reduced-precision reduction) moves a
            # probability by 1.6 % per ulp of a logit near 2: 5 % allows three.
            w1d, w2d = w1.cpu().double(), w2.cpu().double()

            def bf(t):
                return t.to(torch.bfloat16).double()

            for row in sample_rows(rows):
                g = bf(gelu(bf(inputs[i % BUFFERS][row].double() @ w1d)))
                want = torch.softmax(bf(g @ w2d), dim=-1)
                got = outputs[i % BUFFERS][row].double()
                bad = ~((got - want).abs() <= 5e-2 * want)
                if bool(bad.any()):
                    j = int(bad.nonzero()[0])
                    raise Wrong(f"mlp pipeline batch {i}: output ({row}, {j}) is {float(got[j])}, "
                                f"the CPU (float64) {float(want[j])}")

        one_pass()
        check_batch(n - 1)
        times = [one_pass() / n for _ in range(s["runs"])]
        check_batch(n - 1)
        say("RESULT e2e_mlp_pipeline_bf16", f"{statistics.median_high(times):.6g}", "ms")

    def e2e_decode_step(self):
        """Ten small ops on a [1, hidden] float32 vector, each step's output the next one's input: one
        step checked, an untimed run, timed runs of chained steps between events, one more step
        checked; median µs per step (launch-bound: the host's pace shows in the device's timeline)."""
        torch, s = self.torch, self.s
        steps = s["decode_steps"]
        weights = decode_weights(torch, s["decode_hidden"])
        x = torch.randn(1, s["decode_hidden"], device="cuda")
        check_decode_step(torch, x, weights, "before timing")
        for _ in range(steps):
            x = decode_step(torch, x, *weights)
        torch.cuda.synchronize()

        def run():
            nonlocal x
            x = decode_step(torch, x, *weights)
        ms = device_ms(torch, dict(s, warmup=0, reps=steps), run)
        check_decode_step(torch, x, weights, "after timing")
        say("RESULT e2e_decode_step", f"{ms * 1e3:.6g}", "\u00b5s")

    def e2e_decode_step_graphed(self):
        """The decode step captured once by torch.cuda.graph with its output copied back into its
        input, so each replay is the next step: one replay checked against eager, timed runs of
        replays between events, one more replay checked; median µs per step."""
        torch, s = self.torch, self.s
        weights = decode_weights(torch, s["decode_hidden"])
        x = torch.randn(1, s["decode_hidden"], device="cuda")
        check_decode_step(torch, x, weights, "before timing")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.copy_(decode_step(torch, x, *weights))

        def check_replay(when):
            want = decode_step(torch, x, *weights)
            g.replay()
            bad = ~((x - want).abs() <= 1e-5 * (1.0 + want.abs()))
            if bool(bad.any()):
                raise Wrong(f"graphed decode step {when}: element {int(bad.flatten().nonzero()[0])} differs from eager")
        check_replay("before timing")
        ms = device_ms(torch, dict(s, warmup=0, reps=s["decode_steps"]), g.replay)
        check_replay("after timing")
        say("RESULT e2e_decode_step_graphed", f"{ms * 1e3:.6g}", "\u00b5s")

    def graph_replay(self):
        """torch.cuda.CUDAGraph on a chain of z = z + y over 16 float32 elements (ANCHORS.md): host ns
        per g.replay() for chains of 10, 100 and 1000 ops, device ns per op of the 100-op graph and of
        the same chain eager, and ms of a whole `with torch.cuda.graph(g):` capture of 100 ops."""
        torch, s = self.torch, self.s
        x = torch.full((16,), 3.0, device="cuda")
        y = torch.ones(16, device="cuda")
        reps = s["graph_replays"]

        def chain(n):
            z = x
            for _ in range(n):
                z = z + y
            return z

        for n in (10, 100, 1000):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                z = chain(n)
            g.replay()
            check(bool((z == 3.0 + n).all()), f"a {n}-op graph gave {z[:4].tolist()}")

            def run():
                t0 = time.perf_counter_ns()
                for _ in range(reps):
                    g.replay()
                return (time.perf_counter_ns() - t0) / reps
            say(f"RESULT graph_replay_{n}", f"{host_ns(torch, s['host_runs'], run):.6g}", "ns")
            if n == 100:
                for name, f in (("graph_device_per_op_100", g.replay), ("graph_eager_device_per_op_100", lambda: chain(n))):
                    ms = device_ms(torch, dict(s, warmup=1, reps=reps), f)
                    say(f"RESULT {name}", f"{ms * 1e6 / n:.6g}", "ns")
        times = []
        for _ in range(s["runs"]):
            g = torch.cuda.CUDAGraph()
            t0 = time.perf_counter()
            with torch.cuda.graph(g):
                z = chain(100)
            times.append((time.perf_counter() - t0) * 1e3)
            del g, z
        say("RESULT graph_capture_100", f"{statistics.median_high(times):.6g}", "ms")

    def random(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import pytorch_random
        pytorch_random.rows(self.torch, self.s, say, check, device_ms, gb_per_s)


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def allreduce_rank(rank, world, port, s, queue):
    """One rank of the all-reduce rows: a process per GPU, as torchrun starts them."""
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))

    def median_ms(elems):
        t = torch.ones(elems, device="cuda")
        dist.all_reduce(t)
        check(bool((t[:4] == world).all()), "a sum of ones over the ranks")
        times = []
        for i in range(s["warmup"] + s["runs"]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(s["reps"]):
                dist.all_reduce(t)
            b.record()
            b.synchronize()
            if i >= s["warmup"]:
                times.append(a.elapsed_time(b) / s["reps"])
        return statistics.median_high(times)

    big, small = median_ms(s["copy_elems"]), median_ms(2048)
    if rank == 0:
        queue.put((big, small))
    dist.destroy_process_group()


def decode_weights(torch, hidden):
    """The decode step's weights: w [hidden, hidden] (N(0, 1/hidden)), gamma (1 + N(0, 0.01)), beta."""
    w = torch.randn(hidden, hidden, device="cuda") * (1.0 / math.sqrt(hidden))
    gamma = torch.randn(hidden, device="cuda") * 0.1 + 1.0
    beta = torch.randn(hidden, device="cuda") * 0.1
    return w, gamma, beta


def decode_step(torch, x, w, gamma, beta):
    """One decode step, ten ops (the mul-add is a mul and an add, as cudasem's tensor API has no fused one)."""
    h = x @ w
    mu = h.mean(-1, keepdim=True)
    d = h - mu
    var = (d * d).mean(-1, keepdim=True)
    r = (var + DECODE_EPS).rsqrt()
    return torch.nn.functional.gelu(d * r) * gamma + beta


def check_decode_step(torch, x, weights, when):
    """One step from x against the same step in float64 on the CPU."""
    got = decode_step(torch, x, *weights).cpu().double()
    want = decode_step(torch, *(t.cpu().double() for t in (x, *weights)))
    bad = ~((got - want).abs() <= 1e-3 * (1.0 + want.abs()))
    if bool(bad.any()):
        j = int(bad.flatten().nonzero()[0])
        raise Wrong(f"decode step {when}: element {j} is {float(got.flatten()[j])}, "
                    f"the CPU (float64) {float(want.flatten()[j])}")


def start_torch():
    """Imports torch and says its versions and the GPUs (`INFO` lines); None, after a `FATAL` line,
    when torch or its CUDA is missing."""
    try:
        import torch
    except Exception as e:
        say(f"FATAL torch is not importable with {sys.executable}: {type(e).__name__}: {e}")
        return None
    say("INFO torch", torch.__version__)
    if not torch.cuda.is_available():
        say(f"FATAL torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)")
        return None
    try:
        v = torch._C._cuda_getDriverVersion()  # the driver's CUDA version, e.g. 13000
        say("INFO cuda", f"{v // 1000}.{v % 1000 // 10}")
    except Exception:
        say("INFO cuda", torch.version.cuda)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    say("INFO machine", " + ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names)))
    return torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats")
    ap.add_argument("--only", default=",".join(STEPS), help="comma-separated steps")
    ap.add_argument("--trace", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces",
                                                     "resnet50_train.csv"), help="the allocator trace")
    args = ap.parse_args()
    try:  # the units include µs: UTF-8 whatever the locale
        sys.stdout.reconfigure(encoding="utf-8")
    except (AttributeError, ValueError):
        pass
    steps = [x for x in args.only.split(",") if x]
    for x in steps:
        if x not in STEPS:  # a newer cudasem than this script: say so, measure the rest
            say("SKIP", x, "bench/pytorch_bench.py does not know this figure")
    steps = [x for x in steps if x in STEPS]
    torch = start_torch()
    if torch is None:
        return 3
    torch.manual_seed(20261201)
    bench = Bench(torch, QUICK if args.quick else FULL, args.trace)
    for step in steps:
        say("PROGRESS", step)
        try:
            if step in pytorch_jit.STEPS:
                pytorch_jit.measure(torch, step, args.quick)
            else:
                getattr(bench, step)()
        except Exception as e:  # a wrong result or an error: this step has no figure
            say("ERROR", step, f"{type(e).__name__}: {e}".replace("\n", " ")[:500])
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
