"""PyTorch's side of `cudasem bench`'s random-number figures (step `random`), imported by
pytorch_bench.py: torch.randn (f32) and torch.rand (bf16) of `elems` elements on the device (GB/s
written) and F.dropout(p=0.1, training=True) of an mm x mm bf16 tensor (GB/s read and written),
measured as cudasem measures them (src/cli/bench/random.rs); then the sampling rows
(src/cli/bench/sampling.rs): torch.multinomial(probs [32, 50257] f32, 1, replacement=True) (µs per
call) and a decode sampler (logits [8, 50257] -> softmax -> multinomial(1)) captured with
torch.cuda.graph and replayed (µs per replay)."""

VOCAB = 50257


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
    sampling(torch, s, say, check, device_ms)


def sampling(torch, s, say, check, device_ms):
    g = torch.Generator(device="cuda")
    g.manual_seed(20261206)
    probs = (torch.randn(32, VOCAB, device="cuda", generator=g) * 3).softmax(1)
    picks = torch.multinomial(probs, 1, True, generator=g)
    check(bool(((picks >= 0) & (picks < VOCAB)).all()) and picks.shape == (32, 1), "multinomial picks")
    ms = device_ms(torch, s, lambda: torch.multinomial(probs, 1, True, generator=g))
    say("RESULT multinomial_32x50257", f"{ms * 1e3:.6g}", "µs")
    say("RESULT multinomial_32x50257_graphed", f"{graphed_us(torch, s, lambda: torch.multinomial(probs, 1, True)):.6g}", "µs")
    logits = torch.randn(8, VOCAB, device="cuda") * 3
    out = {}

    def sampler():
        out["p"] = logits.softmax(1)
        out["next"] = torch.multinomial(out["p"], 1, True)

    us = graphed_us(torch, s, sampler)
    p, nxt = out["p"], out["next"]
    check(bool(((nxt >= 0) & (nxt < VOCAB)).all()) and bool((p.gather(1, nxt) > 0).all()), "graphed picks")
    say("RESULT e2e_decode_sample_graphed", f"{us:.6g}", "µs")


def graphed_us(torch, s, work):
    """µs per replay of `work` captured with torch.cuda.graph (warmed up on a side stream first,
    as torch.cuda.graphs asks), the median of s["runs"] timings of s["decode_steps"] replays."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        work()
    graph.replay()
    torch.cuda.synchronize()
    steps = s["decode_steps"]
    times = []
    for _ in range(s["runs"]):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / steps)
    times.sort()
    return times[len(times) // 2]
