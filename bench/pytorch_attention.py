#!/usr/bin/env python3
"""PyTorch's side of `cudasem bench`'s transformer-op rows: F.scaled_dot_product_attention (whatever
backend PyTorch picks: flash, cuDNN or efficient) on causal bf16 prefill and one-query decode shapes,
F.layer_norm / F.rms_norm over 8192 x 4096 bf16 rows, softmax over a few vocabulary-length rows, the
lm-head pattern F.log_softmax((x @ w).float(), -1) and a pre-LN GPT block written with PyTorch's fused
ops, timed as src/cli/bench/transformer.rs, long_rows.rs and gpt_block.rs time cudasem's: device ms per
call between timing events (warm-up, then the median of runs of reps calls), each result checked
against a float64 host reference on sampled rows first. `cudasem bench` runs this script
after its own figures; it can also run alone: `python3 bench/pytorch_attention.py [--quick] [--only a,b]`.

Output protocol: as bench/pytorch_bench.py's (INFO / PROGRESS / RESULT / SKIP / ERROR / FATAL lines).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_bench import FULL, QUICK, check, device_ms, say, start_torch  # noqa: E402  (the shared protocol)

STEPS = ["sdpa", "norms", "vocab_softmax", "lm_head", "gpt_block"]

SDPA_ROWS = [
    ("sdpa_bf16_causal_b8_h16_t1024_e64", (8, 16, 1024, 1024, 64), True),
    ("sdpa_bf16_causal_b1_h32_t4096_e128", (1, 32, 4096, 4096, 128), True),
    ("sdpa_decode_bf16_b8_h32_s8192_e128", (8, 32, 1, 8192, 128), False),
    ("sdpa_bf16_b4_h16_t2048_e128", (4, 16, 2048, 2048, 128), False),
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


def vocab_softmax(torch, sizes):
    for name, rows, n, dtype, log in [("softmax_f32_8x50257", 8, 50257, torch.float32, False),
                                      ("log_softmax_bf16_1x128256", 1, 128256, torch.bfloat16, True)]:
        x = (torch.randn(rows, n, device="cuda") * 2).to(dtype)
        f = (lambda: torch.log_softmax(x, -1)) if log else (lambda: torch.softmax(x, -1))
        want = torch.log_softmax(x.double().cpu(), -1)
        want = want if log else want.exp()
        got = f().double().cpu()
        rel, ab = (1e-5, 1e-10) if dtype == torch.float32 else (8e-3, 1e-2)
        check(bool(((got - want).abs() <= rel * want.abs() + ab).all()), f"{name} differs from float64")
        say("RESULT", name, f"{device_ms(torch, sizes, f):.5f}", "ms")


def lm_head(torch, sizes, quick):
    F = torch.nn.functional
    m, k, n = (64, 128, 1001) if quick else (8192, 1024, 50257)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(k, n, device="cuda") / k ** 0.5).to(torch.bfloat16)
    f = lambda: F.log_softmax((x @ w).float(), -1)  # noqa: E731
    got = f()
    rows = [0, m // 2, m - 1]
    want = torch.log_softmax(x[rows].double().cpu() @ w.double().cpu(), -1)
    check(bool(((got[rows].double().cpu() - want).abs() <= 3e-2 + 4e-3 * want.abs()).all()),
          "lm_head_bf16_8192x1024x50257 differs from float64")
    del got
    say("RESULT", "lm_head_bf16_8192x1024x50257", f"{device_ms(torch, sizes, f):.5f}", "ms")


def gpt_block(torch, sizes, quick):
    F = torch.nn.functional
    shapes = [(2, 32, 64, 4), (1, 64, 128, 4)] if quick else [(8, 1024, 1024, 16), (1, 2048, 2048, 16)]
    names = ["e2e_gpt_block_bf16_b8_t1024_d1024_h16", "e2e_gpt_block_bf16_b1_t2048_d2048_h16"]
    for name, (b, t, d, h) in zip(names, shapes):
        def param(shape, scale, shift=0.0):
            return (torch.randn(*shape, device="cuda") * scale + shift).to(torch.bfloat16)

        def lin(o, i):
            return param((o, i), 1 / i ** 0.5), param((o,), 0.02)

        p = dict(ln1=(param((d,), 0.1, 1.0), param((d,), 0.1)), qkv=lin(3 * d, d), proj=lin(d, d),
                 ln2=(param((d,), 0.1, 1.0), param((d,), 0.1)), fc1=lin(4 * d, d), fc2=lin(d, 4 * d))

        def block(x, p, causal_sdpa):
            bb, tt, dd = x.shape
            a = F.layer_norm(x, (dd,), *p["ln1"], 1e-5)
            q, k, v = F.linear(a, *p["qkv"]).view(bb, tt, 3, h, dd // h).permute(2, 0, 3, 1, 4).unbind(0)
            att = causal_sdpa(q, k, v).transpose(1, 2).reshape(bb, tt, dd)
            h1 = x + F.linear(att, *p["proj"])
            m = F.gelu(F.linear(F.layer_norm(h1, (dd,), *p["ln2"], 1e-5), *p["fc1"]), approximate="tanh")
            return h1 + F.linear(m, *p["fc2"])

        x = torch.randn(b, t, d, device="cuda", dtype=torch.bfloat16)
        fused = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731

        def math(q, k, v):
            s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril().logical_not(), float("-inf"))
            return torch.softmax(s, -1) @ v

        got = block(x, p, fused)
        n = min(t, 8)
        pd = {key: tuple(w.double().cpu() for w in ws) for key, ws in p.items()}
        want = block(x[:1, :n].double().cpu(), pd, math)
        got0 = got[:1, :n].double().cpu()
        check(bool(((got0 - want).abs() <= 6e-2 * (1 + want.abs())).all()), f"{name} differs from float64")
        del got
        say("RESULT", name, f"{device_ms(torch, sizes, lambda: block(x, p, fused)):.5f}", "ms")


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
            if step in ("lm_head", "gpt_block"):
                (lm_head if step == "lm_head" else gpt_block)(torch, sizes, args.quick)
            else:
                dict(sdpa=sdpa, norms=norms, vocab_softmax=vocab_softmax)[step](torch, sizes)
        except Exception as e:  # a wrong result or an error: this step has no figure
            say("ERROR", step, f"{type(e).__name__}: {e}".replace("\n", " ")[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
