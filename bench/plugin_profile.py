#!/usr/bin/env python3
"""Where the time of a torch.compile(backend=...) forward goes, per GPU kernel.

On the GPU machine, from the repository root (plugin installed as in
bench/plugin.py):

    LLMC_LIB=$PWD/dist/lib/libllmc.so python3 bench/plugin_profile.py \
        --backend llmc --shape 4x2048 [--layers 1] [--top 30]

Builds the Hugging Face LlamaForCausalLM of bench/plugin.py (hidden 4096,
random weights, bf16), compiles it (static shapes), warms up 3 calls, then
records 5 calls under torch.profiler (CUPTI) and prints: the median wall time
per call (CUDA events), the GPU kernel time per call summed over kernels, and
the top kernels by total GPU time (name, calls per forward, microseconds per
forward). llmc's kernels carry their generated names (llmc_ew_*, llmc_rms*,
...), cuBLASLt's and cuDNN's their library names; the gap between wall time
and kernel time is host overhead (Python, guards, launches) plus idle GPU.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    os.environ.setdefault("LLMC_STRICT", "1")  # a fallback to PyTorch raises: no eager time labelled llmc
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="llmc")
    ap.add_argument("--model", default="llama")
    ap.add_argument("--shape", default="4x2048")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--options", default="", help="k=v,... passed as torch.compile options")
    ap.add_argument("--trace", default=None, help="write the profiled calls as a Chrome trace (JSON)")
    args = ap.parse_args()

    import torch
    from plugin import build  # bench/plugin.py
    torch.manual_seed(0)
    model, vocab = build(args.model, args.layers)
    model = model.cuda().to(torch.bfloat16).eval()
    opts = {}
    for kv in filter(None, args.options.split(",")):
        k, v = kv.split("=", 1)
        opts[k] = {"true": True, "false": False}.get(v.lower(), v)
    if args.backend == "eager":
        run = model
    else:
        run = torch.compile(model, backend=args.backend, dynamic=False,
                            **({"options": opts} if opts else {}))
    b, s = map(int, args.shape.split("x"))
    x = torch.randint(0, vocab, (b, s), device="cuda")

    def step():
        with torch.no_grad():
            return run(x, use_cache=False).logits

    t0 = time.time()
    step()
    torch.cuda.synchronize()
    print(f"first call {time.time() - t0:.2f} s")
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    n = 5
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    if args.trace:
        prof.export_chrome_trace(args.trace)
    rows = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(ev.name, [0, 0.0])
            r[0] += 1
            r[1] += ev.device_time
    total = sum(r[1] for r in rows.values()) / n
    print(f"{args.model} {args.backend} {args.shape}: wall median {times[len(times) // 2]:.3f} ms, "
          f"GPU kernel time {total / 1000:.3f} ms per forward, {sum(r[0] for r in rows.values()) / n:.0f} kernels")
    print(f"{'us/fwd':>9} {'calls':>6}  kernel")
    for name, (cnt, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{t / n:9.1f} {cnt / n:6.1f}  {name[:110]}")
    if args.backend == "llmc":
        import llmc.backend
        for r in llmc.backend.reports():
            print(r)


if __name__ == "__main__":
    main()
