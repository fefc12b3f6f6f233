"""PyTorch's side of the allocator benchmark, run in the same GPU call as `cudasem bench-alloc`.

Prints one JSON object per line:
  {"what": "pytorch_cpp_pair_ns", ...}  host ns of a cached raw_alloc + raw_delete pair, from C++
                                        (torch.utils.cpp_extension, when a compiler is there)
  {"what": "pytorch_py_pair_ns", ...}   the same pair through Python's torch.cuda.caching_allocator_*
"""
import json
import os
import statistics
import sys
import time

import torch

SIZES = [512, 1 << 20, 64 << 20]
N = 200_000


def py_pair(size, n=N // 4):
    torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(size))  # warm the cache
    runs = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(size))
        runs.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(runs)


CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <chrono>
double pair_ns(int64_t size, int64_t n) {
  auto* a = c10::cuda::CUDACachingAllocator::get();
  a->raw_delete(a->raw_alloc(size));
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) a->raw_delete(a->raw_alloc(size));
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}
"""


def cpp_pair():
    try:
        from torch.utils.cpp_extension import load_inline

        mod = load_inline("cudasem_bench_alloc", cpp_sources=CPP, functions=["pair_ns"],
                          with_cuda=True, verbose=False,
                          build_directory=os.environ.get("TMPDIR", "/tmp"))
    except Exception as e:  # no compiler or headers on this machine
        return None, f"{type(e).__name__}: {str(e)[:200]}"
    out = {}
    for size in SIZES:
        out[size] = statistics.median(mod.pair_ns(size, N) for _ in range(5))
    return out, None


def main():
    torch.cuda.init()
    dev = torch.cuda.get_device_name(0)
    py = {s: py_pair(s) for s in SIZES}
    print(json.dumps({"what": "pytorch_py_pair_ns", "device": dev, "torch": torch.__version__,
                      "ns": {str(k): round(v, 1) for k, v in py.items()}}))
    cpp, why = cpp_pair()
    if cpp is None:
        print(json.dumps({"what": "pytorch_cpp_pair_ns", "error": why}))
    else:
        print(json.dumps({"what": "pytorch_cpp_pair_ns", "device": dev,
                          "ns": {str(k): round(v, 1) for k, v in cpp.items()}}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
