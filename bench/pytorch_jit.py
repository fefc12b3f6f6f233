#!/usr/bin/env python3
"""PyTorch's side of cudasem's jiterator rows (src/cli/bench/jit.rs): `torch.cuda.jiterator` with the
same code strings, sizes and checks. `bench/pytorch_bench.py` runs these steps for `cudasem bench`; this
script also runs alone: `python3 bench/pytorch_jit.py [--quick] [--only jit_swiglu,...]`, printing the same
protocol lines (INFO / PROGRESS / RESULT ROW VALUE UNIT / SKIP / ERROR / FATAL).

  jit_swiglu_bf16        device µs of a jiterator SwiGLU `x / (1 + exp(-x)) * y` on bf16 [8192, 14336]
  jit_swiglu_bf16_eager  device µs of eager `F.silu(x) * y` on the same tensors
  jit_small_call_host    host ns per jiterator call of `-x + alpha * y` on 16 f32 elements
  jit_first_call_cold    ms from `_create_jit_fn` of a never-compiled code string to its first result
  jit_first_call_warm    the same for a new function of a code string compiled before
  jit_first_call_warm_disk  the same in a fresh Python process (torch imported and CUDA started
                         first, untimed) after this one compiled the code: PyTorch's kernel disk
                         cache (PYTORCH_KERNEL_CACHE_PATH, ~/.cache/torch/kernels) holds it

Device times: CUDA events around `reps` calls, median of `runs` runs, after `warmup` calls (as
pytorch_bench.py's device_ms). Host times: median of runs, each after a synchronize.
"""
import argparse
import os
import statistics
import sys
import time

STEPS = ["jit_swiglu", "jit_small_call", "jit_first_call"]

# The same code strings as src/cli/bench/jit.rs.
SWIGLU = "template <typename T> T swiglu(T x, T y) { return x / (T(1) + exp(-x)) * y; }"
AXPY = "template <typename T> T axpy(T x, T y, T alpha) { return -x + alpha * y; }"

FULL = dict(warmup=3, runs=15, reps=10, small_ops=200, small_runs=51, first_runs=15, shape=(8192, 14336))
QUICK = dict(warmup=1, runs=3, reps=2, small_ops=200, small_runs=5, first_runs=3, shape=(64, 1024))


def say(*parts):
    print(*parts, flush=True)


class Wrong(Exception):
    """A result that disagrees with the float64 reference."""


def device_us(torch, s, f):
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
        times.append(start.elapsed_time(end) / s["reps"] * 1e3)
    return statistics.median_high(times)


def check_swiglu(torch, x, y, out, what, roundings=1):
    """`out` against float64, within `roundings` bf16 roundings (eager rounds silu(x) to bf16 first)."""
    for row in (0, x.shape[0] - 1):
        a, b = x[row].double().cpu(), y[row].double().cpu()
        want = a / (1.0 + torch.exp(-a)) * b
        got = out[row].double().cpu()
        bad = ~((got - want).abs() <= (roundings / 256.0 + 1e-5) * want.abs().clamp(min=1e-3))
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise Wrong(f"{what} row {row} element {j}: {float(got[j])}, float64 {float(want[j])}")


def jit_swiglu(torch, s):
    x = torch.randn(s["shape"], device="cuda").bfloat16()
    y = torch.randn(s["shape"], device="cuda").bfloat16()
    f = torch.cuda.jiterator._create_jit_fn(SWIGLU)
    check_swiglu(torch, x, y, f(x, y), "jiterator")
    say("RESULT", "jit_swiglu_bf16", f"{device_us(torch, s, lambda: f(x, y)):.3f}", "µs")
    silu = torch.nn.functional.silu
    check_swiglu(torch, x, y, silu(x) * y, "eager", roundings=2)
    say("RESULT", "jit_swiglu_bf16_eager", f"{device_us(torch, s, lambda: silu(x) * y):.3f}", "µs")


def jit_small_call(torch, s):
    x, y = torch.randn(16, device="cuda"), torch.randn(16, device="cuda")
    f = torch.cuda.jiterator._create_jit_fn(AXPY, alpha=2.0)
    want = -x.double() + 2.0 * y.double()
    if not bool(((f(x, y).double() - want).abs() <= 1e-6 * want.abs().clamp(min=1.0)).all()):
        raise Wrong("axpy disagrees with float64")
    times = []
    for run in range(s["small_runs"] + 2):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        for _ in range(s["small_ops"]):
            f(x, y)
        if run >= 2:
            times.append((time.perf_counter_ns() - t) / s["small_ops"])
    torch.cuda.synchronize()
    say("RESULT", "jit_small_call_host", f"{statistics.median_high(times):.1f}", "ns")


def first(torch, code, x, want):
    torch.cuda.synchronize()
    t = time.perf_counter()
    f = torch.cuda.jiterator._create_jit_fn(code, alpha=2.0)
    out = f(x, x)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t) * 1e3
    if not bool(((out.double() - want).abs() <= 1e-6 * want.abs().clamp(min=1.0)).all()):
        raise Wrong("a first call disagrees with float64")
    return ms


def jit_first_call(torch, s):
    x = torch.randn(16, device="cuda")
    want = -x.double() + 2.0 * x.double()
    cold, warm = [], []
    for i in range(s["first_runs"]):
        # A name never compiled (by this process or an earlier one: the disk cache misses too).
        code = AXPY.replace("axpy", f"axpy_{os.getpid()}_{i}_{time.time_ns()}")
        cold.append(first(torch, code, x, want))
        warm.append(first(torch, code, x, want))
    say("RESULT", "jit_first_call_cold", f"{statistics.median_high(cold):.3f}", "ms")
    say("RESULT", "jit_first_call_warm", f"{statistics.median_high(warm):.4f}", "ms")
    disk = [child_first_call(code) for _ in range(max(1, min(5, s["first_runs"])))]
    say("RESULT", "jit_first_call_warm_disk", f"{statistics.median_high(disk):.3f}", "ms")


# A fresh process: CUDA started untimed, then the first call of `code` timed and checked.
CHILD = """
import sys, time, torch
code = sys.argv[1]
x = torch.randn(16, device="cuda")
want = -x.double() + 2.0 * x.double()
torch.cuda.synchronize()
t = time.perf_counter()
f = torch.cuda.jiterator._create_jit_fn(code, alpha=2.0)
out = f(x, x)
torch.cuda.synchronize()
ms = (time.perf_counter() - t) * 1e3
assert bool(((out.double() - want).abs() <= 1e-6 * want.abs().clamp(min=1.0)).all()), "wrong result"
print(ms)
"""


def child_first_call(code):
    import subprocess
    r = subprocess.run([sys.executable, "-c", CHILD, code], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise Wrong(f"the child's first call failed: {r.stderr.strip()[-300:]}")
    return float(r.stdout.strip().splitlines()[-1])


def measure(torch, step, quick):
    """Measures `step` (one of STEPS), printing its RESULT lines; raises on a wrong result."""
    s = QUICK if quick else FULL
    {"jit_swiglu": jit_swiglu, "jit_small_call": jit_small_call, "jit_first_call": jit_first_call}[step](torch, s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes and few repeats")
    ap.add_argument("--only", default=",".join(STEPS), help="comma-separated steps")
    args = ap.parse_args()
    try:
        sys.stdout.reconfigure(encoding="utf-8")
    except (AttributeError, ValueError):
        pass
    try:
        import torch
    except Exception as e:
        say(f"FATAL torch is not importable with {sys.executable}: {type(e).__name__}: {e}")
        return 3
    if not torch.cuda.is_available():
        say("FATAL torch sees no CUDA device")
        return 3
    say("INFO torch", torch.__version__)
    torch.manual_seed(20261201)
    for step in [x for x in args.only.split(",") if x]:
        if step not in STEPS:
            say("SKIP", step, "bench/pytorch_jit.py does not know this figure")
            continue
        say("PROGRESS", step)
        try:
            measure(torch, step, args.quick)
        except Exception as e:
            say("ERROR", step, f"{type(e).__name__}: {e}".replace("\n", " ")[:500])
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
