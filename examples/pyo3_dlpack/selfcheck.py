"""Checks cudasem_dlpack's Python side without PyTorch: cudasem tensors go out through `__dlpack__`
capsules and come back in through `ImportRequest` (the same protocol code PyTorch's tensors take),
with values against a float64 reference, no copy (data_ptr equality), the producer's tensor kept alive
by the capsule, and typed errors. Runs on the simulated machine (no GPU) and on a GPU:
    python3 examples/pyo3_dlpack/selfcheck.py
"""

import gc
import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cudasem_dlpack  # noqa: E402


def close(got, want, rtol=1e-5, atol=1e-5):
    return all(abs(g - w) <= atol + rtol * abs(w) for g, w in zip(got, want)) and len(got) == len(want)


def main():
    rng = random.Random(0)
    rows, half = 6, 40
    # float32 values (what the tensor holds), as Python floats.
    values = [struct.unpack("f", struct.pack("f", rng.uniform(-4.0, 4.0)))[0] for _ in range(rows * 2 * half)]
    x = cudasem_dlpack.tensor(values, [rows, 2 * half])
    assert cudasem_dlpack.data_ptr_via_dlpack(x) == x.data_ptr(), "the import copied"
    out = cudasem_dlpack.swiglu_from_torch(x)
    assert out.shape == [rows, half]
    want = []
    for r in range(rows):
        for c in range(half):
            a, b = values[r * 2 * half + c], values[r * 2 * half + half + c]
            want.append(a / (1.0 + math.exp(-a)) * b)
    assert close(out.tolist(), want), "swiglu values"
    # Round trip of the result: the capsule's tensor is the same memory.
    assert cudasem_dlpack.data_ptr_via_dlpack(out) == out.data_ptr()
    # In place, through an import: the write lands in the producer's memory.
    cudasem_dlpack.mul_(x, 2.0)
    assert close(x.tolist(), [2.0 * v for v in values], rtol=0, atol=0), "in-place write"
    # The consumer's deleter runs when its view is gone; the producer object stays usable.
    del out
    gc.collect()
    assert close(x.tolist(), [2.0 * v for v in values], rtol=0, atol=0)
    try:
        cudasem_dlpack.swiglu_from_torch(cudasem_dlpack.tensor([1.0, 2.0, 3.0], [3]))
        raise AssertionError("an odd last dimension was accepted")
    except ValueError:
        pass
    print(f"all self-checks passed (driver: {cudasem_dlpack.driver_name()})")


if __name__ == "__main__":
    main()
