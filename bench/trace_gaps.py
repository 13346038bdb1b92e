#!/usr/bin/env python3
"""Where a profiled step leaves the GPU idle.

    python3 bench/trace_gaps.py DIR/profile-fwdbwd-llmc.json.gz [--top 15]

Reads a torch.profiler Chrome trace (bench/train_llama.py --profile --trace)
and prints the step's span on the GPU (first kernel start to last kernel
end), the GPU's busy and idle time in it (the union of kernels, copies and
memsets), and the longest idle gaps, each with the launch call that ended
it (the host API call of the next GPU event, by correlation id) and the
innermost CPU op around that call: what the host was still doing while the
GPU waited.
"""
import argparse
import gzip
import json
import sys

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15, help="gaps to list")
    ap.add_argument("--min-us", type=float, default=5.0, help="smallest gap counted as idle, µs")
    args = ap.parse_args(argv)
    events = [e for e in load(args.trace) if e.get("ph") == "X"]
    gpu = sorted((e for e in events if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    if not gpu:
        sys.exit("no GPU events in the trace")
    runtime = {e["args"].get("correlation"): e for e in events
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    cpu_ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "python_function")]

    def innermost(ts):
        best = None
        for e in cpu_ops:
            if e["ts"] <= ts <= e["ts"] + e["dur"] and (best is None or e["dur"] < best["dur"]):
                best = e
        return best

    start, end = gpu[0]["ts"], max(e["ts"] + e["dur"] for e in gpu)
    busy, gaps, reach = 0.0, [], start
    for e in gpu:
        s, t = e["ts"], e["ts"] + e["dur"]
        if s > reach:
            gaps.append((s - reach, reach, e))
        busy += max(0.0, t - max(s, reach))
        reach = max(reach, t)
    idle = [g for g in gaps if g[0] >= args.min_us]
    span = end - start
    print(f"GPU span {span / 1e3:.2f} ms: busy {busy / 1e3:.2f} ms, idle {(span - busy) / 1e3:.2f} ms "
          f"({len(idle)} gaps of {args.min_us:g} µs or more, {sum(g[0] for g in idle) / 1e3:.2f} ms)")
    print(f"\n{'gap µs':>9}  {'at ms':>8}  next GPU event / launched by / host op around the launch")
    for dur, at, e in sorted(idle, key=lambda g: -g[0])[:args.top]:
        call = runtime.get(e.get("args", {}).get("correlation"))
        op = innermost(call["ts"]) if call else None
        print(f"{dur:9.1f}  {(at - start) / 1e3:8.2f}  {e['name'][:60]}")
        print(f"{'':21}{call['name'] if call else '?'} / {op['name'][:70] if op else '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
