#!/usr/bin/env python3
"""PyTorch's side of `cudasem bench`'s transformer-op rows: F.scaled_dot_product_attention (whatever
backend PyTorch picks: flash, cuDNN or efficient) on causal bf16 prefill and one-query decode shapes, and
F.layer_norm / F.rms_norm over 8192 x 4096 bf16 rows, timed as src/cli/bench/transformer.rs times cudasem's
ops: device ms per call between timing events (warm-up, then the median of runs of reps calls), each
result checked against a float64 host reference on sampled rows first. `cudasem bench` runs this script
after its own figures; it can also run alone: `python3 bench/pytorch_attention.py [--quick] [--only a,b]`.

Output protocol: as bench/pytorch_bench.py's (INFO / PROGRESS / RESULT / SKIP / ERROR / FATAL lines).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_bench import FULL, QUICK, check, device_ms, say, start_torch  # noqa: E402  (the shared protocol)

STEPS = ["sdpa", "norms"]

SDPA_ROWS = [
    ("sdpa_bf16_causal_b8_h16_t1024_e64", (8, 16, 1024, 1024, 64), True),
    ("sdpa_bf16_causal_b1_h32_t4096_e128", (1, 32, 4096, 4096, 128), True),
    ("sdpa_decode_bf16_b8_h32_s8192_e128", (8, 32, 1, 8192, 128), False),
]


def sdpa(torch, sizes):
    F = torch.nn.functional
    for name, (b, h, l, s, e), causal in SDPA_ROWS:
        q = torch.randn(b, h, l, e, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, h, s, e, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, h, s, e, device="cuda", dtype=torch.bfloat16)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        q0, k0, v0 = q[0, 0].double().cpu(), k[0, 0].double().cpu(), v[0, 0].double().cpu()
        sc = q0 @ k0.T / e ** 0.5
        if causal:
            sc = sc.masked_fill(torch.ones(l, s, dtype=torch.bool).tril().logical_not(), float("-inf"))
        want = torch.softmax(sc, -1) @ v0
        got = out[0, 0].double().cpu()
        check(bool(((got - want).abs() <= 2e-2 * (1 + want.abs())).all()), f"{name} differs from float64")
        ms = device_ms(torch, sizes, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        say("RESULT", name, f"{ms:.5f}", "ms")


def norms(torch, sizes):
    F = torch.nn.functional
    rows, n = 8192, 4096
    x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    xd, wd, bd = x[:4].double().cpu(), w.double().cpu(), b.double().cpu()
    for name, f, ref in [
        ("layer_norm_bf16_8192x4096", lambda: F.layer_norm(x, (n,), w, b, 1e-5),
         lambda: F.layer_norm(xd, (n,), wd, bd, 1e-5)),
        ("rms_norm_bf16_8192x4096", lambda: F.rms_norm(x, (n,), w, 1e-5),
         lambda: F.rms_norm(xd, (n,), wd, 1e-5)),
    ]:
        if name.startswith("rms") and not hasattr(F, "rms_norm"):
            say("SKIP", name, f"torch {torch.__version__} has no F.rms_norm")
            continue
        got, want = f()[:4].double().cpu(), ref()
        check(bool(((got - want).abs() <= 2e-2 * (1 + want.abs())).all()), f"{name} differs from float64")
        say("RESULT", name, f"{device_ms(torch, sizes, f):.5f}", "ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repeats")
    ap.add_argument("--only", default=",".join(STEPS), help="comma-separated steps")
    args = ap.parse_args()
    steps = [x for x in args.only.split(",") if x]
    torch = start_torch()
    if torch is None:
        return 3
    torch.manual_seed(20261206)
    sizes = QUICK if args.quick else FULL
    for step in steps:
        say("PROGRESS", step)
        if step not in STEPS:
            say("SKIP", step, "bench/pytorch_attention.py does not know this figure")
            continue
        try:
            (sdpa if step == "sdpa" else norms)(torch, sizes)
        except Exception as e:  # a wrong result or an error: this step has no figure
            say("ERROR", step, f"{type(e).__name__}: {e}".replace("\n", " ")[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
