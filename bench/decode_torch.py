#!/usr/bin/env python3
"""Greedy decode of a gpt-fast-style model (test/python/gpt_fast.py: static
KV cache in buffers, index_put writes, position-indexed RoPE and mask):
PyTorch eager vs Inductor vs llmc, in one run on the GPU.

    python3 bench/decode_torch.py [--layers 4 --dim 2048 --heads 16 --ffn 5632 --max-seq 2048]
    python3 bench/decode_torch.py --layers 32 --dim 4096 --heads 32 --ffn 11008   # LLaMA-2-7B shape

bf16, batch 1, random weights. Each backend gets a fresh copy of the model
(its own caches), a 128-token prefill, then --steps decode steps; each step
is timed with CUDA events from the call to the returned token (cloned; the
token feeds the next step, as in generation), 10 warm-up steps excluded,
median reported. LLMC_DUMP_DIR=DIR keeps llmc's IR of the prefill and
decode graphs (`llmc-run DIR/<graph>.llmc_0.mlir --bench` times each
launch). "same" counts the steps whose greedy token equals eager's.
llmc-cuda-graphs is mode="reduce-overhead" (the session's CUDA graph
counters are printed). --profile N runs N more steps of each backend under
torch.profiler and prints the GPU time per step (kernels and copies, as
CUPTI records them, also inside CUDA graphs), their count, and the rest of
the step (the GPU idle: gaps between launches and host time);
DECODE_PROFILE_TABLE=1 also prints the host operations by self CPU time.
"""
import argparse
import copy
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "python"))
from gpt_fast import GptFast  # noqa: E402


def decode(model, prompt, steps):
    t = prompt.shape[1]
    dev = prompt.device
    times, toks = [], []
    with torch.no_grad():
        # .clone(): a CUDA-graph backend (reduce-overhead) reuses its output
        # buffer on the next call, as gpt-fast's generate() does.
        tok = model(prompt, torch.arange(t, device=dev)).clone()
        for i in range(steps):
            pos = torch.tensor([t + i], device=dev)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            tok = model(tok[:, None], pos).clone()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
            toks.append(tok)
    return times, torch.cat(toks)


def profile(model, prompt, steps):
    """(ms per step, GPU ms per step, GPU activities per step) over `steps`
    decode steps after the prompt, under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    t = prompt.shape[1]
    dev = prompt.device
    with torch.no_grad():
        tok = model(prompt, torch.arange(t, device=dev)).clone()
        pos = [torch.tensor([t + i], device=dev) for i in range(steps)]
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for i in range(steps):
                tok = model(tok[:, None], pos[i]).clone()
            b.record()
            torch.cuda.synchronize()
    gpu_us, count = 0.0, 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            gpu_us += e.time_range.elapsed_us()
            count += 1
    if os.environ.get("DECODE_PROFILE_TABLE"):  # where the host time goes
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return a.elapsed_time(b) / steps, gpu_us / 1e3 / steps, count / steps


def main():
    os.environ.setdefault("LLMC_STRICT", "1")  # a fallback to PyTorch raises: no eager time labelled llmc
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="N more steps per backend under torch.profiler: GPU time per step")
    ap.add_argument("--backends", default="eager,inductor,inductor-reduce-overhead,llmc,"
                    "llmc-cuda-graphs", help="comma-separated subset, eager first")
    args = ap.parse_args()
    import llmc.backend
    from llmc import _capi
    sessions = []
    init = _capi.Session.__init__

    def keep(self, *a, **k):  # the llmc sessions, for their CUDA graph counters
        init(self, *a, **k)
        sessions.append(self)

    _capi.Session.__init__ = keep
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialized on the GPU (a 7B model in seconds)
        base = GptFast(vocab=args.vocab, dim=args.dim, heads=args.heads, ffn=args.ffn,
                       layers=args.layers, max_seq=args.max_seq, dtype=torch.bfloat16)
    prompt = torch.randint(0, args.vocab, (1, 128), device="cuda")
    kv_bytes = 2 * args.layers * args.max_seq * args.dim * 2
    print(f"gpt-fast decode: layers={args.layers} dim={args.dim} heads={args.heads} "
          f"ffn={args.ffn} vocab={args.vocab} max_seq={args.max_seq} bf16 B=1; "
          f"KV cache {kv_bytes / 2**20:.0f} MiB")
    print(f"{'backend':22} {'ms/step':>8} {'tok/s':>8} {'same':>6}")
    ref = None
    for name in args.backends.split(","):
        m = copy.deepcopy(base)
        sessions.clear()
        if name == "inductor":
            m = torch.compile(m, backend="inductor", dynamic=False)
        elif name == "inductor-reduce-overhead":
            m = torch.compile(m, backend="inductor", dynamic=False, mode="reduce-overhead")
        elif name == "llmc":
            llmc.backend.reset()
            m = torch.compile(m, backend="llmc", dynamic=False)
        elif name == "llmc-cuda-graphs":
            llmc.backend.reset()
            m = torch.compile(m, backend="llmc", dynamic=False, mode="reduce-overhead")
        try:
            times, toks = decode(m, prompt, args.steps)
        except Exception as e:  # a backend that fails is reported, the run goes on
            print(f"{name:22} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        if ref is None:
            ref = toks
        ms = statistics.median(times[10:])
        same = int((toks == ref).sum())
        print(f"{name:22} {ms:8.3f} {1e3 / ms:8.1f} {same:3d}/{len(ref)}")
        if args.profile:
            step, gpu, n = profile(m, prompt, args.profile)
            print(f"    profiled {args.profile} steps: {step:.3f} ms/step, GPU {gpu:.3f} ms/step "
                  f"in {n:.0f} kernels/copies, GPU idle {step - gpu:.3f} ms/step")
        if name.startswith("llmc"):
            for r in llmc.backend.reports():
                print("   ", str(r).replace("\n", "\n    "))
            for k, sess in enumerate(sessions):
                st = sess.graph_stats()
                if st and (st["captures"] or st["disabled_reason"]):
                    print(f"    session {k}: CUDA graph captures {st['captures']} replays "
                          f"{st['replays']} updates {st['updates']}"
                          + (f" off: {st['disabled_reason']}" if st["disabled_reason"] else ""))


if __name__ == "__main__":
    main()
