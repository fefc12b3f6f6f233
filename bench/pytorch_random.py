"""PyTorch's side of `cudasem bench`'s random-number figures (step `random`), imported by
pytorch_bench.py: torch.randn (f32) and torch.rand (bf16) of `elems` elements on the device (GB/s
written) and F.dropout(p=0.1, training=True) of an mm x mm bf16 tensor (GB/s read and written),
measured as cudasem measures them (src/cli/bench/random.rs)."""


def rows(torch, s, say, check, device_ms, gb_per_s):
    n, m = s["elems"], s["mm"]
    z = torch.randn(n, device="cuda")
    check(abs(z.double().mean().item()) < 0.05 and abs(z.double().std().item() - 1) < 0.05, "randn moments")
    u = torch.rand(n, device="cuda", dtype=torch.bfloat16)
    check(bool(((u >= 0) & (u < 1)).all()), "rand out of [0, 1)")
    ms = device_ms(torch, s, lambda: torch.randn(n, device="cuda"))
    say("RESULT randn_f32_256m", f"{gb_per_s(4 * n, ms):.6g}", "GB/s")
    ms = device_ms(torch, s, lambda: torch.rand(n, device="cuda", dtype=torch.bfloat16))
    say("RESULT rand_bf16_256m", f"{gb_per_s(2 * n, ms):.6g}", "GB/s")
    x = torch.ones(m, m, device="cuda", dtype=torch.bfloat16)
    y = torch.nn.functional.dropout(x, 0.1, True)
    kept = (y != 0).double().mean().item()
    check(abs(kept - 0.9) < 0.02, f"dropout kept {kept}")
    ms = device_ms(torch, s, lambda: torch.nn.functional.dropout(x, 0.1, True))
    say("RESULT dropout_bf16_8192x8192", f"{gb_per_s(2 * 2 * m * m, ms):.6g}", "GB/s")
