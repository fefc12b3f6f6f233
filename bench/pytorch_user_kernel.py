#!/usr/bin/env python3
"""PyTorch's side of `cudasem bench`'s user-kernel rows: torch.cuda._compile_kernel's launch of a tiny
kernel with three tensor arguments (`c = a + b` on 16 float32, one block), timed as
src/cli/bench/user_kernel.rs times cudasem's Kernel::launch: host clocks around runs of launches, each
run after a synchronize, the median of the runs. `cudasem bench` runs this script after its own figures;
it can also run alone: `python3 bench/pytorch_user_kernel.py [--quick] [--only a,b]`.

Output protocol: as bench/pytorch_bench.py's (INFO / PROGRESS / RESULT / SKIP / ERROR / FATAL lines).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_bench import check, say, start_torch  # noqa: E402  (the shared protocol)

STEPS = ["user_kernel_launch_host", "user_kernel_launch_raw_cudarc"]

# As `Sizes` in src/cli/bench/measure.rs: small_ops launches per run, small_runs runs.
FULL = dict(small_ops=200, small_runs=51)
QUICK = dict(small_ops=200, small_runs=5)

ADD3 = r"""extern "C" __global__ void add3(const float* a, const float* b, float* c) {
    int i = threadIdx.x;
    c[i] = a[i] + b[i];
}"""
N = 16


def launch_host(torch, sizes):
    compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
    if compile_kernel is None:
        say("SKIP user_kernel_launch_host", f"torch {torch.__version__} has no torch.cuda._compile_kernel")
        return
    kernel = compile_kernel(ADD3, "add3")
    a = torch.randn(N, device="cuda")
    b = torch.randn(N, device="cuda")
    c = torch.zeros(N, device="cuda")
    kernel(grid=(1, 1, 1), block=(N, 1, 1), args=[a, b, c])
    torch.cuda.synchronize()
    check(torch.equal(c.cpu(), a.cpu() + b.cpu()), f"add3 gave {c.tolist()}")
    times = []
    for run in range(sizes["small_runs"] + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(sizes["small_ops"]):
            kernel(grid=(1, 1, 1), block=(N, 1, 1), args=[a, b, c])
        ns = (time.perf_counter_ns() - t0) / sizes["small_ops"]
        if run >= 2:
            times.append(ns)
    torch.cuda.synchronize()
    say("RESULT user_kernel_launch_host", f"{statistics.median_high(times):.1f}", "ns")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repeats")
    ap.add_argument("--only", default=",".join(STEPS), help="comma-separated steps")
    args = ap.parse_args()
    steps = [x for x in args.only.split(",") if x]
    torch = start_torch()
    if torch is None:
        return 3
    torch.manual_seed(20261201)
    sizes = QUICK if args.quick else FULL
    for step in steps:
        say("PROGRESS", step)
        if step == "user_kernel_launch_raw_cudarc":
            say("SKIP", step, "no PyTorch counterpart: cudasem's floor, a launch through cudarc by hand")
            continue
        if step != "user_kernel_launch_host":
            say("SKIP", step, "bench/pytorch_user_kernel.py does not know this figure")
            continue
        try:
            launch_host(torch, sizes)
        except Exception as e:  # a wrong result or an error: this step has no figure
            say("ERROR", step, f"{type(e).__name__}: {e}".replace("\n", " ")[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
