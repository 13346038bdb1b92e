#!/usr/bin/env python3
"""Embedding backward (index_put accumulate, llm.index_put) through the llmc
backend vs PyTorch eager vs Inductor, in one run on the GPU.

    python3 bench/index_put_torch.py [--vocab 32000 --dim 4096 --tokens 16384]

The function is `aten.embedding_dense_backward(grad [N, D], tokens [N],
V, padding_idx=-1)`, f32 and bf16; tokens are drawn uniformly from [0, V)
(duplicates included). Each backend's result is compared with eager's in
float64 (relative L2). Timing: 5 warm-up calls, then 50 calls timed with
CUDA events, median. The bytes column counts the grad read, the index read
and the [V, D] result written once.
"""
import argparse
import os
import statistics

import torch


def bench(fn, args, iters=50):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*args)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    os.environ.setdefault("LLMC_STRICT", "1")  # a fallback to PyTorch raises: no eager time labelled llmc
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=16384)
    args = ap.parse_args()
    import llmc.backend  # noqa: F401  (registers "llmc")
    V, D, N = args.vocab, args.dim, args.tokens
    print(f"embedding backward: V={V} D={D} N={N}")
    print(f"{'dtype':6} {'backend':9} {'ms':>8} {'GB/s':>8} {'rel err':>9}")
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.randn(N, D, device="cuda", dtype=dtype)
        tok = torch.randint(0, V, (N,), device="cuda")

        def f(g, tok):
            return torch.ops.aten.embedding_dense_backward(g, tok, V, -1, False)

        want = f(g, tok).double()
        size = g.element_size()
        gbytes = (N * D * size + N * 8 + V * D * size) / 1e9
        for name, fn in (("eager", f),
                         ("inductor", torch.compile(f, backend="inductor", dynamic=False)),
                         ("llmc", torch.compile(f, backend="llmc", dynamic=False))):
            got = fn(g, tok)
            err = float((got.double() - want).norm() / want.norm())
            ms = bench(fn, (g, tok))
            print(f"{str(dtype).split('.')[-1]:6} {name:9} {ms:8.4f} {gbytes / ms * 1e3:8.0f} {err:9.2e}")
    rep = llmc.backend.last_report()
    print(rep)


if __name__ == "__main__":
    main()
