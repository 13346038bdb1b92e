"""all_reduce bus bandwidth of torch.distributed (NCCL), to compare with llmc's.

    torchrun --standalone --nproc-per-node=2 bench/allreduce_torch.py [--mib 256] [--iters 50]

Every rank all-reduces (sum) a bf16 tensor of --mib MiB (256 MiB =
134217728 elements, as examples/allreduce_bf16_256mb.mlir), times each call
with CUDA events after warm-up and rank 0 prints the median time and the
bus bandwidth busbw = 2(n-1)/n * bytes / time (NCCL's doc/PERFORMANCE.md,
nccl-tests' convention; GB = 1e9 bytes), the same quantity
`llmc-run examples/allreduce_bf16_256mb.mlir --tp=2 --bench` prints as
"collective bus bandwidth".
"""
import argparse
import os
import statistics

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    n = dist.get_world_size()
    numel = args.mib * (1 << 20) // 2
    x = torch.randn(numel, dtype=torch.bfloat16, device="cuda")
    # Correctness first: the sum of known per-rank values.
    probe = torch.full((1024,), float(dist.get_rank() + 1), device="cuda")
    dist.all_reduce(probe)
    expected = n * (n + 1) / 2
    if not torch.all(probe == expected):
        raise SystemExit(f"all_reduce returned {probe[0].item()}, expected {expected}")

    for _ in range(args.warmup):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(args.iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        dist.all_reduce(x)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    ms = statistics.median(times)
    nbytes = numel * x.element_size()
    busbw = 2 * (n - 1) / n * nbytes / (ms * 1e-3) / 1e9
    if dist.get_rank() == 0:
        print(f"torch.distributed all_reduce: {n} ranks, {nbytes / 2**20:.0f} MiB bf16, "
              f"median {ms:.4f} ms over {args.iters} runs, "
              f"bus bandwidth {busbw:.1f} GB/s (torch {torch.__version__}, "
              f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
