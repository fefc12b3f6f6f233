#!/usr/bin/env python3
"""PyTorch's side of `cudasem bench --ops`: the op matrix's cases, timed as cudasem times them.

`cudasem bench --ops` writes the cases (src/cli/bench/ops/cases.rs is the one list) and the repeat
counts to a JSON file and runs `python3 bench/pytorch_ops.py --cases FILE` after its own side; the
script also runs alone on such a file. Each case builds operands of the same shapes, dtypes, layouts
and value ranges as cudasem's (not the same values) and calls the same op the way a PyTorch user
does; it is not checked for correctness (it is the yardstick: cudasem's side is checked).

Timing: bench/pytorch_bench.py's `device_ms`, with the spec's counts: `warmup` calls, then `runs`
runs of `reps` calls between two CUDA events on the current stream; the median run's time per call,
in microseconds.

Output protocol, one message per line (as bench/pytorch_bench.py; everything else is ignored):
  INFO torch|cuda|machine TEXT     versions and the GPUs
  PROGRESS NAME                    starts a case (or another stage)
  RESULT NAME VALUE us             the case's median time per call
  ERROR NAME REASON                a case without a figure, and why
  FATAL REASON                     nothing can be measured (no torch, no CUDA); exit status 3

`--check-spec` checks that the script knows every case of the file (no torch needed) and exits.
"""
import argparse
import gc
import json
import sys

# The same protocol, start and timing as the figures' script (beside this one, so on the import
# path when run as a script): `device_ms(torch, {"warmup", "runs", "reps"}, f)`.
from pytorch_bench import device_ms, say, start_torch

UNARY = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "gelu"}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge"}
REDUCE = {"sum", "mean", "amax", "amin", "argmax", "argmin", "max", "min"}
LAYOUTS = {
    "unary": {"contig", "transposed", "vec"},
    "binary": {"contig", "bcast_row", "bcast_col", "transposed", "vec", "scalar", "inplace"},
    "where": {"contig", "bcast_row"},
    "cast": {"contig", "transposed"},
    "reduce": {"contig", "transposed"},
    "softmax": {"contig"},
    "log_softmax": {"contig"},
    "contiguous": {"transposed"},
    "copy": {"contig"},
    "matmul": {"vec", "linear"},
}
DTYPES = {"float32", "bfloat16", "float16", "int32", "int64"}
POSITIVE = {"log", "sqrt", "rsqrt"}


def unknown(case):
    """Why the script cannot run `case` (None when it can)."""
    kind, op, layout = case.get("kind"), case.get("op"), case.get("layout")
    if kind not in LAYOUTS:
        return f"kind `{kind}`"
    if layout not in LAYOUTS[kind]:
        return f"layout `{layout}` of a {kind} case"
    if case.get("dtype") not in DTYPES or (kind == "cast" and case.get("to") not in DTYPES):
        return f"dtype `{case.get('dtype')}` / `{case.get('to')}`"
    if kind in ("unary", "binary", "reduce") and op not in {"unary": UNARY, "binary": BINARY, "reduce": REDUCE}[kind]:
        return f"{kind} op `{op}`"
    if kind == "reduce" and case.get("axis") not in ("last", "first", "all"):
        return f"axis `{case.get('axis')}`"
    if op == "add" and layout == "inplace":
        return None
    if layout == "inplace":
        return f"in-place {op}"
    return None


class Operands:
    """One dtype's operands of an [R, C] matrix, the value ranges of cudasem's (ops/inputs.rs): a, b
    in [-2.5, 2.5), p in [0.5, 2.7), row [C] and col [R, 1] in [0.5, 2.5), cond = b > 0; integers
    are a, b x 100 and p, row, col x 10, truncated."""

    def __init__(self, torch, dtype, r, c):
        self.r, self.c = r, c
        u = lambda *shape: torch.rand(*shape, device="cuda")
        a, b = u(r, c) * 4 - 2.5, u(r, c) * 4 - 2.5
        p, row, col = u(r, c) * 2.2 + 0.5, u(c) * 2 + 0.5, u(r, 1) * 2 + 0.5
        d = getattr(torch, dtype)
        if d.is_floating_point:
            cast = lambda t, scale: t.to(d)
        else:
            cast = lambda t, scale: (t * scale).to(d)
        self.a, self.b, self.p = cast(a, 100), cast(b, 100), cast(p, 10)
        self.row, self.col = cast(row, 10), cast(col, 10)
        self.cond = b > 0

    def first(self, x, layout):
        if layout == "transposed":
            return x.t()
        if layout in ("vec", "linear"):
            return x[0:1]
        return x

    def second(self, x, layout):
        return {
            "bcast_row": lambda: self.row,
            "bcast_col": lambda: self.col,
            "transposed": lambda: x.reshape(self.c, self.r),
            "vec": lambda: x[0:1],
            "scalar": lambda: None,
        }.get(layout, lambda: x)()


def unary_fn(torch, op):
    if op == "gelu":
        return torch.nn.functional.gelu
    return getattr(torch, op)


def reduce_fn(torch, op, axis):
    """`torch.<op>` along the axis (`max` / `min` along a dim give values and indices) or over all."""
    f, dim = getattr(torch, op), {"last": -1, "first": 0, "all": None}[axis]
    return f if dim is None else (lambda x: f(x, dim))


def build(torch, case, ops, scalar):
    """The zero-argument call that runs `case` once."""
    kind, op, layout = case["kind"], case["op"], case["layout"]
    if kind == "unary":
        f, x = unary_fn(torch, op), ops.first(ops.p if op in POSITIVE else ops.a, layout)
        return lambda: f(x)
    if kind == "binary":
        lhs, rhs = {"pow": (ops.p, ops.b), "div": (ops.a, ops.p)}.get(op, (ops.a, ops.b))
        x, y = ops.first(lhs, layout), ops.second(rhs, layout)
        if layout == "scalar":
            f = getattr(torch, op)
            return lambda: f(x, scalar)
        if layout == "inplace":
            target = x.clone()
            return lambda: target.add_(y)
        f = getattr(torch, op)
        return lambda: f(x, y)
    if kind == "where":
        cond, a, b = ops.cond, ops.a, ops.second(ops.b, layout)
        return lambda: torch.where(cond, a, b)
    if kind == "cast":
        x, to = ops.first(ops.a, layout), getattr(torch, case["to"])
        return lambda: x.to(to)
    if kind == "reduce":
        f, x = reduce_fn(torch, op, case["axis"]), ops.first(ops.a, layout)
        return lambda: f(x)
    if kind in ("softmax", "log_softmax"):
        f, x = getattr(torch, kind), ops.a.reshape(*case["shape"])
        return lambda: f(x, -1)
    if kind == "contiguous":
        x = ops.a.t()
        return lambda: x.contiguous()
    if kind == "matmul":
        x = ops.first(ops.a, layout)
        w = ops.b.t() if layout == "linear" else ops.b.reshape(ops.c, ops.r)
        return lambda: x @ w
    if kind == "copy":
        src = ops.a
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    raise ValueError(f"unknown kind {kind}")


def run(torch, spec, cases):
    timing = {k: spec[k] for k in ("warmup", "runs", "reps")}
    operands = {}
    for case in cases:
        say("PROGRESS", case["name"])
        try:
            r, c = spec["shape"]
            key = case["dtype"]
            if key not in operands:
                operands[key] = Operands(torch, key, r, c)
            f = build(torch, case, operands[key], spec["scalar"])
            us = device_ms(torch, timing, f) * 1e3
            say("RESULT", case["name"], f"{us:.6g}", "us")
        except Exception as e:  # an error: this case has no figure
            say("ERROR", case["name"], f"{type(e).__name__}: {e}".replace("\n", " ")[:500])
    operands.clear()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="the JSON spec `cudasem bench --ops` writes")
    ap.add_argument("--check-spec", action="store_true", help="only check that every case is known")
    args = ap.parse_args()
    with open(args.cases) as f:
        spec = json.load(f)
    cases = []
    for case in spec["cases"]:
        why = unknown(case)
        if why is None:
            cases.append(case)
        else:  # a newer cudasem than this script: say so, measure the rest
            say("ERROR", case.get("name"), f"bench/pytorch_ops.py does not know this case ({why})")
    if args.check_spec:
        say("KNOWN", len(cases), "of", len(spec["cases"]))
        return 0 if len(cases) == len(spec["cases"]) else 1
    torch = start_torch()
    if torch is None:
        return 3
    torch.manual_seed(20261201)
    run(torch, spec, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
