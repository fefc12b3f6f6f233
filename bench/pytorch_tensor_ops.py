#!/usr/bin/env python3
"""PyTorch's figures for benches/tensor_ops.rs: same sizes, same timing (torch.cuda.Event, 3
warm-up calls, the median of 15 runs of 10 calls each; host costs: the median of 25 runs of 200 launches, three
interleaved rounds). Prints a table, then one JSON object per figure and line.

* add_f32_2^28: torch.add(a, b), TB/s counting 3 * 4 * 2^28 bytes
* sum_f32_1GiB: a.sum() of 2^28 float32, TB/s counting 4 * 2^28 bytes
* matmul_8192_{fp32,tf32,bf16}: a @ b of 8192x8192, TFLOP/s counting 2 * 8192^3
  (tf32: torch.backends.cuda.matmul.allow_tf32 = True)
* small_add_host_us: host microseconds per torch.add of 16 float32 (through Python, as PyTorch
  users call it)
"""
import json
import statistics
import time

import torch

RUNS = 15
REPS = 10
HOST_RUNS = 25
HOST_OPS = 200


def device_ms(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(RUNS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPS):
            f()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / REPS)
    return statistics.median(times)


def host_us(f):
    times = []
    for run in range(HOST_RUNS + 2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(HOST_OPS):
            f()
        us = (time.perf_counter() - t) * 1e6 / HOST_OPS
        if run >= 2:
            times.append(us)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    n, mm = 1 << 28, 8192
    figures = []
    a = torch.full((n,), 1.0, dtype=torch.float32, device="cuda")
    b = torch.full((n,), 2.0, dtype=torch.float32, device="cuda")
    ms = device_ms(lambda: torch.add(a, b))
    figures.append(("add_f32_2^28", "TB/s", 3 * 4 * n / (ms * 1e-3) / 1e12))
    ms = device_ms(lambda: a.sum())
    figures.append(("sum_f32_1GiB", "TB/s", 4 * n / (ms * 1e-3) / 1e12))
    del a, b

    flops = 2.0 * mm**3
    for name, dtype, tf32 in [
        ("matmul_8192_fp32", torch.float32, False),
        ("matmul_8192_tf32", torch.float32, True),
        ("matmul_8192_bf16", torch.bfloat16, False),
    ]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        x = torch.rand((mm, mm), dtype=torch.float32, device="cuda").to(dtype)
        y = torch.rand((mm, mm), dtype=torch.float32, device="cuda").to(dtype)
        ms = device_ms(lambda: x @ y)
        figures.append((name, "TFLOP/s", flops / (ms * 1e-3) / 1e12))
    torch.backends.cuda.matmul.allow_tf32 = False

    x = torch.full((16,), 1.0, dtype=torch.float32, device="cuda")
    y = torch.full((16,), 2.0, dtype=torch.float32, device="cuda")
    rounds = [host_us(lambda: torch.add(x, y)) for _ in range(3)]
    figures.append(("small_add_host_us", "us", statistics.median(rounds)))

    print(f"tensor_ops on PyTorch {torch.__version__} ({torch.cuda.get_device_name()})")
    print(f"{'figure':<26} {'value':>12} {'unit':<8}")
    for name, unit, value in figures:
        print(f"{name:<26} {value:>12.3f} {unit:<8}")
    for name, unit, value in figures:
        print(json.dumps({"bench": "tensor_ops", "impl": "pytorch", "figure": name, "unit": unit, "value": round(value, 4)}))


if __name__ == "__main__":
    main()
