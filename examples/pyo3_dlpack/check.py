"""Checks cudasem_dlpack beside PyTorch on a GPU: values against a float64 reference computed by
torch, no copy either way (data_ptr equality), writes landing in torch's memory, and DLPack's stream
handshake in both directions (torch's work on a side stream seen by cudasem, cudasem's result seen on
torch's side stream).

Run on a machine with a GPU, PyTorch and the built module beside this file:
    CUDASEM_DRIVER=cuda python3 examples/pyo3_dlpack/check.py
Exits non-zero on the first failed check.
"""

import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cudasem_dlpack  # noqa: E402

# silu(a) * b in the dtype: cudasem's sigmoid, then two products, each rounded once in the dtype
# (PyTorch's fused silu rounds once less); the reference is float64.
TOLERANCE = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float16: dict(rtol=4e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=3e-2, atol=2e-2),
}


def reference(x):
    a, b = x.double().chunk(2, dim=-1)
    return F.silu(a) * b


def check_swiglu(x, what):
    assert cudasem_dlpack.data_ptr_via_dlpack(x) == x.data_ptr(), f"{what}: the import copied"
    out = cudasem_dlpack.swiglu_from_torch(x)
    y = torch.from_dlpack(out)
    assert y.data_ptr() == out.data_ptr(), f"{what}: torch.from_dlpack copied"
    assert y.device == x.device and y.dtype == x.dtype and list(y.shape) == out.shape, what
    torch.testing.assert_close(y.double(), reference(x), **TOLERANCE[x.dtype], msg=lambda m: f"{what}: {m}")
    # The capsule keeps cudasem's tensor alive after the Python object is gone.
    want = y.clone()
    del out
    gc.collect()
    _ = torch.empty(1 << 24, device=x.device)  # churn torch's allocator
    _ = torch.from_dlpack(cudasem_dlpack.swiglu_from_torch(torch.randn_like(x)))  # and cudasem's
    torch.cuda.synchronize()
    assert torch.equal(y, want), f"{what}: the result changed after its producer object was dropped"
    print(f"ok  swiglu {what}")


def check_write_through(device):
    z = torch.randn(300, 70, device=device)
    z0 = z.clone()
    view = z[5:, ::2]  # strided, with a storage offset
    cudasem_dlpack.mul_(view, 2.5)
    torch.cuda.synchronize()
    want = z0.clone()
    want[5:, ::2] *= 2.5
    assert torch.equal(z, want), "cudasem's in-place multiply did not land in torch's memory (or spilled)"
    print("ok  in-place write through a strided view")


def check_stream_handshake(device):
    n = 1 << 22
    side = torch.cuda.Stream(device=device)
    x = torch.randn(n, 2 * 8, device=device)
    fresh = torch.randn(n, 2 * 8, device=device)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keep the side stream busy (~0.1 s)
        x.copy_(fresh)  # queued behind the sleep, on the side stream
        # torch's __dlpack__ makes cudasem's stream wait for the side stream (producer handshake) ...
        out = cudasem_dlpack.swiglu_from_torch(x)
        # ... and cudasem's to_dlpack makes the side stream (torch's current) wait for cudasem's op.
        y = torch.from_dlpack(out)
        got = y.double()  # read on the side stream
    torch.cuda.synchronize()
    torch.testing.assert_close(got, reference(fresh), **TOLERANCE[torch.float32])
    print("ok  stream handshake both ways")


def main():
    assert torch.cuda.is_available(), "needs a GPU"
    assert cudasem_dlpack.driver_name() == "cuda", "run with CUDASEM_DRIVER=cuda"
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        check_swiglu(torch.randn(64, 2 * 1024, device=device, dtype=dtype), f"{dtype} contiguous")
    check_swiglu(torch.randn(2 * 384, 96, device=device).t(), "transposed input")
    check_swiglu(torch.randn(50, 2 * 200, device=device)[7:, :], "input with a storage offset")
    check_write_through(device)
    check_stream_handshake(device)
    try:
        cudasem_dlpack.swiglu_from_torch(torch.randn(4, 7, device=device))
        raise AssertionError("an odd last dimension was accepted")
    except ValueError:
        pass
    try:
        cudasem_dlpack.swiglu_from_torch(torch.randn(4, 8))
        raise AssertionError("a CPU tensor was accepted")
    except TypeError:
        pass
    check_swiglu(torch.randn(8, 2 * 32, device=device), "after the errors")
    print("all checks passed")


if __name__ == "__main__":
    main()
