"""PyTorch eager and Inductor on bench/column_reduce.mlir's reduction (the
same run as llmc-run --bench): sum over dims [0, 1] of [4, 2048, 4096] bf16.
Prints median ms over 50 runs (CUDA events) and the effective read TB/s."""
import torch

x = torch.randn(4, 2048, 4096, device="cuda", dtype=torch.bfloat16)


def f(t):
    return t.sum(dim=(0, 1))


def median_ms(fn, iters=50):
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(x)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


for name, fn in (("eager", f), ("inductor", torch.compile(f))):
    ms = median_ms(fn)
    print(f"{name}: {ms:.4f} ms, {x.numel() * 2 / ms / 1e9:.2f} TB/s")
