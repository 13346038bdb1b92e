#!/usr/bin/env python3
"""Paged flash-decoding (llm.paged_attention) against the dense KV cache's
flash-decoding (llm.attention with kv_len) and the copy bandwidth, in one
run on the GPU (issue 19).

    python3 bench/paged_decode.py --out DIR [--batches 1,8,32 --kv 2048,8192]

Shapes: LLaMA-2-7B decode attention (32 query heads, head dim 128, bf16)
with 32 KV heads (MHA) and with 8 (GQA, group 4); one new token per
sequence, every sequence `kv` keys long, pages of 16 keys handed out in a
shuffled order. The page pool holds exactly the sequences' pages, so the
bytes a split kernel reads are the pool (K and V) plus the queries; the
dense cache is [B, kv, Hkv, D] with kv_len = kv.

Each graph runs through `llmc-run --bench --check=ref` (results checked
against the float64 CPU reference on the same random inputs; block tables,
cu_seqlens and seq_lens given as .npy files), 50 timed CUDA-graph replays,
median. Reported: end-to-end median (split + combine), the split kernel's
time from the per-launch events, and KV bytes / median as effective
bandwidth, next to the device-to-device copy bandwidth torch measures in
the same run (2 x bytes / time of a 1 GiB copy). Results go to
DIR/paged_decode_ps<page size>_<order>.json and a table on stdout.

With --fp8-kv the paged graph also runs over an fp8 KV cache (issue 20):
e4m3 pages with one scale per KV head (llm.paged_attention scales), the
same block tables; its KV bytes are half the bf16 pages', and the row
reports its time, its effective bandwidth over those bytes, and the
speedup over the bf16 pages.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HQ, D, PAGE = 32, 128, 16


def paged_source(b, kv, hkv, fp8=False):
    """The paged attention graph; fp8: e4m3 pages with per-KV-head scales
    (arguments 6 and 7)."""
    pages = b * kv // PAGE
    q = f"tensor<{b}x{HQ}x{D}xbf16>"
    kp = f"tensor<{pages}x{PAGE}x{hkv}x{D}x{'f8E4M3FN' if fp8 else 'bf16'}>"
    bt = f"tensor<{b}x{kv // PAGE}xi32>"
    sc = f"tensor<{hkv}xf32>"
    scale_args = f", %ks: {sc}, %vs: {sc}" if fp8 else ""
    scales = " scales(%ks, %vs)" if fp8 else ""
    scale_types = f", {sc}, {sc}" if fp8 else ""
    return (f"func.func @paged(%q: {q}, %kp: {kp}, %vp: {kp}, %bt: {bt}, "
            f"%cu: tensor<{b + 1}xi32>, %lens: tensor<{b}xi32>{scale_args}) -> {q} {{\n"
            f"  %o = llm.paged_attention %q, %kp, %vp, %bt, %cu, %lens{scales} {{causal}} : "
            f"{q}, {kp}, {kp}, {bt}, tensor<{b + 1}xi32>, tensor<{b}xi32>{scale_types}\n"
            f"  return %o : {q}\n}}\n")


def dense_source(b, kv, hkv):
    q = f"tensor<{b}x1x{HQ}x{D}xbf16>"
    c = f"tensor<{b}x{kv}x{hkv}x{D}xbf16>"
    return (f"func.func @dense(%q: {q}, %k: {c}, %v: {c}, %n: tensor<i64>) -> {q} {{\n"
            f"  %o = llm.attention %q, %k, %v kv_len(%n : tensor<i64>) {{causal}} : "
            f"{q}, {c}, {c}\n  return %o : {q}\n}}\n")


def run_llmc(llmc_run, src, fn, inputs, workdir, values=(), check=True):
    path = os.path.join(workdir, fn + ".mlir")
    with open(path, "w") as f:
        f.write(src)
    cmd = [llmc_run, path, "--bench", "--iters", "50", "--seed", "7"]
    if check:
        cmd += ["--check=ref", "--ref-max-memory=24"]
    for i, arr in inputs.items():
        npy = os.path.join(workdir, f"{fn}_arg{i}.npy")
        np.save(npy, arr)
        cmd += ["--input", f"arg{i}={npy}"]
    for v in values:
        cmd += ["--value", v]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out}")
    median = float(re.search(r"end to end: median ([0-9.]+) ms", out).group(1))
    split = re.search(r"llm\.(paged_)?attention\s+([0-9.]+) ms", out)
    return {"median_ms": median, "split_ms": float(split.group(2)) if split else None,
            "check": [l for l in out.splitlines() if "check" in l.lower()][-1:]}


def copy_bandwidth():
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return 2 * x.numel() / (times[len(times) // 2] * 1e-3) / 1e12


def main():
    global PAGE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--kv", default="2048,8192")
    ap.add_argument("--heads-kv", default="32,8", help="KV heads (32 query heads)")
    ap.add_argument("--page-size", type=int, default=PAGE, help="keys per page")
    ap.add_argument("--page-order", choices=["shuffled", "sequential"], default="shuffled",
                    help="pages handed out in a random order (a long-running pool) or in order")
    ap.add_argument("--llmc-run", default="llmc-run")
    ap.add_argument("--fp8-kv", action="store_true",
                    help="also run the paged graph over e4m3 pages (half the KV bytes)")
    ap.add_argument("--check-max-mb", type=float, default=1100,
                    help="check against the CPU reference up to this many MB of K and V")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    PAGE = args.page_size
    ceiling = copy_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for hkv in [int(x) for x in args.heads_kv.split(",")]:
            for b in [int(x) for x in args.batches.split(",")]:
                for kv in [int(x) for x in args.kv.split(",")]:
                    pages = b * kv // PAGE
                    order = (rng.permutation(pages) if args.page_order == "shuffled"
                             else np.arange(pages))
                    bt = order.astype(np.int32).reshape(b, kv // PAGE)
                    cu = np.arange(b + 1, dtype=np.int32)
                    lens = np.full(b, kv, dtype=np.int32)
                    kv_bytes = 2 * b * kv * hkv * D * 2
                    check = kv_bytes / 1e6 <= args.check_max_mb
                    paged = run_llmc(args.llmc_run, paged_source(b, kv, hkv), "paged",
                                     {3: bt, 4: cu, 5: lens}, work, check=check)
                    dense = run_llmc(args.llmc_run, dense_source(b, kv, hkv), "dense", {},
                                     work, values=(f"arg3={kv}",), check=check)
                    row = {"batch": b, "kv": kv, "heads_kv": hkv, "kv_mb": kv_bytes / 1e6,
                           "checked": check,
                           "paged": paged, "dense": dense,
                           "paged_tbps": kv_bytes / (paged["median_ms"] * 1e-3) / 1e12,
                           "dense_tbps": kv_bytes / (dense["median_ms"] * 1e-3) / 1e12}
                    if args.fp8_kv:
                        scales = np.full(hkv, 0.0625, dtype=np.float32)
                        fp8 = run_llmc(args.llmc_run, paged_source(b, kv, hkv, fp8=True),
                                       "paged_fp8", {3: bt, 4: cu, 5: lens, 6: scales,
                                                     7: scales}, work, check=check)
                        row["paged_fp8"] = fp8
                        row["fp8_kv_mb"] = kv_bytes / 2 / 1e6
                        row["paged_fp8_tbps"] = kv_bytes / 2 / (fp8["median_ms"] * 1e-3) / 1e12
                        row["fp8_speedup"] = paged["median_ms"] / fp8["median_ms"]
                    rows.append(row)
                    print(f"Hkv {hkv:2d} B {b:3d} kv {kv:5d}  KV {row['kv_mb']:8.1f} MB  "
                          f"paged {paged['median_ms']:.4f} ms ({row['paged_tbps']:.2f} TB/s)  "
                          f"dense {dense['median_ms']:.4f} ms ({row['dense_tbps']:.2f} TB/s)"
                          + ("" if check else "  (not checked)")
                          + (f"  paged/copy {row['paged_tbps'] / ceiling:.2f}" if ceiling else "")
                          + (f"  fp8 KV {row['paged_fp8']['median_ms']:.4f} ms "
                             f"({row['paged_fp8_tbps']:.2f} TB/s, {row['fp8_speedup']:.2f}x)"
                             if args.fp8_kv else ""),
                          flush=True)
    result = {"copy_tbps": ceiling, "page_size": PAGE, "page_order": args.page_order,
              "rows": rows}
    name = f"paged_decode_ps{PAGE}_{args.page_order}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(result, f, indent=1)
    print(f"copy bandwidth: {ceiling:.2f} TB/s" if ceiling else "copy bandwidth: (no torch/GPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
