#!/usr/bin/env python3
"""Serving benchmark: llmc-serve's continuous batching against Hugging Face
generate() with static batching, one command, both in the same run (issue
19's serving benchmark):

    python3 bench/serving.py --out DIR                         # 7B-shaped LLaMA on the GPU
    python3 bench/serving.py --out DIR --rates inf --skip-hf   # llmc only
    python3 bench/serving.py --out DIR --check-hf              # + llmc's tokens vs HF's
    python3 bench/serving.py --cpu-smoke --check-hf --out DIR  # tiny, on the CPU (CI)

Workload: --num-requests requests (256) whose prompt and output lengths are
drawn from lognormal distributions shaped like ShareGPT's (prompt: median
128, sigma 1.0, clipped to [4, 1024]; output: median 128, sigma 0.8,
clipped to [4, 512]; length = round(exp(ln(median) + sigma * N(0, 1))),
numpy's default_rng(--seed)), prompt token ids uniform in [1, vocab) (0 is
the padding id of HF's batches). Every request generates exactly its
max_new_tokens (no stop token: the model has no EOS here). For each rate in
--rates (requests/s; "inf": every request at t = 0) the same requests arrive
as a Poisson process (exponential gaps, the first at t = 0); each rate's
request file is written to DIR/files/requests-<rate>.jsonl.

Model: Hugging Face LlamaForCausalLM shaped like LLaMA-2-7B (32 layers,
hidden 4096, 32 heads and 32 KV heads, FFN 11008, vocab 32000, 4096
positions), bf16, random weights (no download); --model tiny is a 2-layer,
64-wide model for tests (head dim 16: the reference executor only, the CUDA
paged-attention kernels take head dims 64..256).

llmc: the model's serving step (llmc.serving.llama_serving_step_mlir; pages
of --page-size 16 tokens, --kv-gib 32 GiB of K and V pages over all layers
(in --dtype, or fp8 with --kv-cache-dtype: twice the pages),
a block table of ceil(longest request / page size) pages) served by
`llmc-serve STEP --realtime --max-batch-tokens 512 --max-seqs 64` per rate:
continuous batching with chunked prefill over the paged KV cache, CUDA
graphs per token bucket (--backend cuda; --backend ref is the CPU reference
executor). Weights are llmc-serve's random weights from --seed: the
throughput does not depend on the weights' values (every request generates
its max_new_tokens whatever the tokens are). With --check-hf they are the HF
model's (llama_serving_step_weights, written with
write_serving_step_weights), and --check-requests requests (4) are also
served together (all at t = 0) and compared token by token with HF
generate() greedy on each request alone (batch 1, no padding): equal or not,
the first mismatch, and how llmc's tokens score under one HF forward of
prompt + llmc's tokens (where HF's argmax is llmc's token, and the largest
logit gap where not). bf16 greedy decoding meets near-ties (a gap of one
bf16 rounding step), after which two correct implementations part; in f32
(--cpu-smoke) the tokens must be equal.

HF baseline (same requests, same process, after llmc): the default
generate() -- DynamicCache, no torch.compile, the model's default attention
(sdpa) -- greedy, in static batches of --hf-batch (32) requests in arrival
order, prompts left-padded, max_new_tokens = the batch's largest. A batch
starts when its last request has arrived and the previous batch is done; the
batches run back to back and are placed on that timeline (the GPU idles
while a batch waits for arrivals, so the timeline is the one a real-time run
would have, without the idle waits), after --hf-warmups (1) untimed passes
over the same batches (HF's first pass over a sequence of shapes ran 2.5-3x
slower per step on the H200; the timed passes are its best case, the cold
pass is recorded in results.json). Per request: TTFT = the batch's first
token (a BaseStreamer timestamps every step) - arrival, TPOT = (its own last
token - its first) / (tokens - 1), latency = its own last token - arrival.
Only each request's own max_new_tokens count as output; the batch's other
generated tokens are static batching's waste (reported).

Reported per rate and backend: output tok/s (output tokens / makespan, from
the first arrival to the last token), requests, duration, TTFT, TPOT and
latency p50/p99; for llmc the KV cache (waste: unfilled slots of the used
pages, mean over steps and max; peak bytes used vs allocated), preemptions,
compile time; and llmc/HF throughput. DIR/results.json is written as the
measurements come, DIR/results.md at the end; DIR/files/ holds the step,
the request files, llmc-serve's per-request outputs, summaries and logs
(with the exact command of each run) and HF's per-request outputs.

On an H200, 48 requests at three rates with --check-hf took 7 minutes; the
default 256 requests take several times that (mostly HF's static batches,
about 15-30 s a batch, a warm-up pass plus one pass per rate): split the
rates over calls (--rates inf, --rates 8, ...) with an --out each where a
call's time is limited.

--cpu-smoke: the tiny model, llmc-serve --backend=ref on f32 weights, HF on
the CPU in f32, 6 short requests at rates inf and 20: it checks this script
(and, with --check-hf, that llmc's tokens equal HF's exactly), not speed.
"""
import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]

MODELS = {
    # LLaMA-2-7B's shape.
    "llama2-7b": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                      num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                      max_position_embeddings=4096),
    # For tests (head_dim 16: the CPU reference executor only; the CUDA
    # paged-attention kernels take head dims 64..256).
    "tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=176, vocab_size=97,
                 max_position_embeddings=2048),
}

# (full run, --cpu-smoke) defaults of the options left unset on the command line.
DEFAULTS = {
    "model": ("llama2-7b", "tiny"),
    "dtype": ("bf16", "f32"),
    "backend": ("cuda", "ref"),
    "num_requests": (256, 6),
    "rates": ("inf,8,4", "inf,20"),
    "prompt_median": (128, 8), "prompt_sigma": (1.0, 0.5),
    "prompt_min": (4, 2), "prompt_max": (1024, 16),
    "output_median": (128, 6), "output_sigma": (0.8, 0.5),
    "output_min": (4, 2), "output_max": (512, 12),
    "page_size": (16, 4),
    "max_batch_tokens": (512, 16),
    "max_seqs": (64, 4),
    "hf_batch": (32, 4),
    "check_requests": (4, 6),
}
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for results.json and results.md")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="tiny model, llmc-serve --backend=ref, HF on the CPU in f32, 6 short "
                         "requests: checks this script, not speed")
    ap.add_argument("--model", choices=sorted(MODELS), help="llama2-7b (default) or tiny")
    ap.add_argument("--dtype", choices=sorted(DTYPES),
                    help="weights, KV pages and activations of both backends (bf16; smoke: f32)")
    ap.add_argument("--backend", choices=("cuda", "ref"), help="llmc-serve's --backend")
    ap.add_argument("--num-requests", type=int)
    ap.add_argument("--rates", help="comma-separated request rates per second; inf: all at t=0 "
                                    "(default inf,8,4)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seeds the workload, the HF model and llmc-serve's random weights")
    for what, help_ in (("prompt", "prompt lengths"), ("output", "output lengths "
                                                                   "(max_new_tokens)")):
        ap.add_argument(f"--{what}-median", type=float, help=f"{help_}: lognormal median")
        ap.add_argument(f"--{what}-sigma", type=float, help=f"{help_}: lognormal sigma")
        ap.add_argument(f"--{what}-min", type=int, help=f"{help_}: clipped below")
        ap.add_argument(f"--{what}-max", type=int, help=f"{help_}: clipped above")
    ap.add_argument("--page-size", type=int)
    ap.add_argument("--kv-cache-dtype", choices=("fp8", "fp8_e4m3", "fp8_e5m2"),
                    help="an fp8 KV cache (issue 20): 1-byte pages, so --kv-gib holds twice "
                         "the bf16 pages; default: pages in --dtype")
    ap.add_argument("--kv-scale", type=float, default=1.0,
                    help="with --kv-cache-dtype: the pages hold K / scale and V / scale "
                         "(vLLM's default 1.0)")
    ap.add_argument("--kv-gib", type=float, default=32.0,
                    help="GiB of K and V pages (all layers); gives the page count")
    ap.add_argument("--num-pages", type=int, help="the page count (instead of --kv-gib)")
    ap.add_argument("--max-batch-tokens", type=int)
    ap.add_argument("--max-seqs", type=int)
    ap.add_argument("--token-buckets", help="llmc-serve's --token-buckets (default: its own)")
    ap.add_argument("--llmc-serve", help="the llmc-serve binary (default: llmc-serve on PATH, "
                                         "then build/bin/llmc-serve)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per llmc-serve run")
    ap.add_argument("--hf-batch", type=int, help="HF's static batch size (32)")
    ap.add_argument("--hf-warmups", type=int, default=1,
                    help="untimed HF passes over the batches before the timed ones (1)")
    ap.add_argument("--skip-hf", action="store_true", help="no HF baseline")
    ap.add_argument("--skip-llmc", action="store_true", help="no llmc-serve runs")
    ap.add_argument("--check-hf", action="store_true",
                    help="llmc-serve on the HF model's weights; --check-requests requests "
                         "served together vs HF generate() on each alone, token by token")
    ap.add_argument("--check-requests", type=int)
    args = ap.parse_args(argv)
    smoke = 1 if args.cpu_smoke else 0
    for key, values in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, values[smoke])
    if args.cpu_smoke and args.num_pages is None:
        args.num_pages = 64
    args.rate_labels = [r.strip() for r in args.rates.split(",") if r.strip()]
    for r in args.rate_labels:
        try:
            v = float(r)
        except ValueError:
            ap.error(f"--rates: {r!r} is not a number or inf")
        if not v > 0:
            ap.error(f"--rates: {r!r}: expected a rate > 0 (or inf)")
    if args.num_requests < 1:
        ap.error("--num-requests must be >= 1")
    if args.max_seqs < 1 or args.max_batch_tokens < args.max_seqs:
        ap.error("--max-seqs must be >= 1 and --max-batch-tokens >= --max-seqs")
    if args.skip_llmc and args.check_hf:
        ap.error("--check-hf needs the llmc runs (drop --skip-llmc)")
    return args


# --- environment ---------------------------------------------------------------


def git_commit():
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=30).stdout.strip()
        return (sha + ("+uncommitted changes" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def find_llmc_serve(path):
    if path:
        return path
    found = shutil.which("llmc-serve")
    if found:
        return found
    for p in (REPO / "build" / "bin" / "llmc-serve", REPO / "dist" / "bin" / "llmc-serve"):
        if p.exists():
            return str(p)
    return None


def environment(args, device, serve):
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "git_commit": git_commit(), "python": platform.python_version(),
           "torch": torch.__version__, "host": platform.node(), "cpus": os.cpu_count()}
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if torch.cuda.is_available() and (device == "cuda" or args.backend == "cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    if serve:
        try:
            r = subprocess.run([serve, "--version"], capture_output=True, text=True, timeout=60)
            env["llmc_serve_version"] = (r.stdout + r.stderr).strip()
        except (OSError, subprocess.SubprocessError) as e:
            env["llmc_serve_version"] = f"unavailable: {e}"
    return env


# --- workload ----------------------------------------------------------------------


def lognormal_lengths(rng, n, median, sigma, lo, hi):
    x = rng.lognormal(mean=math.log(median), sigma=sigma, size=n)
    return np.clip(np.round(x), lo, hi).astype(np.int64)


def make_workload(args, vocab):
    """The requests (id, prompt, max_new_tokens) shared by every rate."""
    rng = np.random.default_rng(args.seed)
    n = args.num_requests
    prompts = lognormal_lengths(rng, n, args.prompt_median, args.prompt_sigma, args.prompt_min,
                                args.prompt_max)
    outputs = lognormal_lengths(rng, n, args.output_median, args.output_sigma, args.output_min,
                                args.output_max)
    return [{"id": i, "prompt": rng.integers(1, vocab, size=int(p)).tolist(),
             "max_new_tokens": int(o)} for i, (p, o) in enumerate(zip(prompts, outputs))]


def arrivals(args, label, n):
    """Poisson arrivals at `label` requests/s (exponential gaps, the first at
    0); all at 0 for inf. Seeded by --seed and the rate."""
    rate = float(label)
    if math.isinf(rate):
        return [0.0] * n
    rng = np.random.default_rng([args.seed, 1 + int(round(rate * 1000))])
    gaps = rng.exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def length_stats(v):
    v = np.asarray(v)
    return {"mean": float(v.mean()), "p50": float(np.median(v)), "min": int(v.min()),
            "max": int(v.max()), "total": int(v.sum())}


def write_requests(path, requests, times):
    with open(path, "w") as f:
        for r, t in zip(requests, times):
            f.write(json.dumps({**r, "arrival_s": t}) + "\n")


# --- statistics (llmc-serve's: nearest rank) ---------------------------------


def quantile(v, q):
    if not v:
        return 0.0
    v = sorted(v)
    i = math.ceil(q * len(v))
    return v[min(len(v) - 1, max(i, 1) - 1)]


def stats(v):
    return {"count": len(v), "mean": sum(v) / len(v) if v else 0.0, "p50": quantile(v, 0.5),
            "p90": quantile(v, 0.9), "p99": quantile(v, 0.99), "max": quantile(v, 1.0)}


# --- the model -----------------------------------------------------------------------


def make_model(args, device):
    """LlamaForCausalLM of --model's shape in --dtype on `device`, with fresh
    random weights from --seed: embeddings N(0, 1), projections N(0,
    1/fan_in), norm weights 1 + N(0, 0.2^2) (scores and logits O(1): greedy
    tokens far from ties)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**MODELS[args.model], rms_norm_eps=1e-5, tie_word_embeddings=False)
    dtype = DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0, 0.2)
            elif "embed" in name:
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
    gc = model.generation_config
    gc.eos_token_id = None  # every request generates exactly its max_new_tokens
    gc.pad_token_id = 0
    gc.do_sample = False
    return model


# --- llmc -----------------------------------------------------------------------------


def run_llmc_serve(args, serve, step, requests_path, name, files, weights=None, realtime=True):
    """One llmc-serve run; returns (summary, per-request lines) or raises
    RuntimeError with the command and its error output."""
    out = files / f"llmc-{name}.jsonl"
    summary = files / f"llmc-{name}-summary.json"
    log = files / f"llmc-{name}.log"
    cmd = [serve, str(step), "--requests", str(requests_path), "--out", str(out),
           "--summary", str(summary), f"--backend={args.backend}", f"--seed={args.seed}",
           f"--max-batch-tokens={args.max_batch_tokens}", f"--max-seqs={args.max_seqs}"]
    if args.token_buckets:
        cmd.append(f"--token-buckets={args.token_buckets}")
    if weights:
        cmd.append(f"--weights={weights}")
    if realtime:
        cmd.append("--realtime")
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"timed out after {args.timeout:.0f} s: {' '.join(cmd)}") from e
    wall = time.perf_counter() - t0
    log.write_text(f"$ {' '.join(cmd)}\n# exit {r.returncode}, {wall:.1f} s\n"
                   f"--- stdout\n{r.stdout}--- stderr\n{r.stderr}")
    if r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stderr.strip()[-2000:]}")
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return json.loads(summary.read_text()), lines, cmd, wall


def llmc_record(summary, lines, requests):
    kv = summary["kv"]
    failed = [x for x in lines if "error" in x]
    expected = {r["id"]: r["max_new_tokens"] for r in requests}
    short = [x["id"] for x in lines if "error" not in x
             and len(x["tokens"]) != expected.get(x["id"])]
    rec = {"requests": summary["requests"], "finished": len(lines), "failed": len(failed),
           "output_tokens": summary["output_tokens"], "prompt_tokens": summary["prompt_tokens"],
           "duration_s": summary["duration_s"], "output_tok_per_s": summary["output_tok_per_s"],
           "ttft_s": summary["ttft_s"], "tpot_s": summary["tpot_s"],
           "latency_s": summary["latency_s"], "steps": summary["steps"],
           "tokens_per_step": summary.get("tokens_per_step"),
           "partial_prefills": summary.get("partial_prefills"),
           "preemptions": summary["preemptions"],
           "recomputed_tokens": summary.get("recomputed_tokens"),
           "compile_s": summary["compile_s"],
           "kv": {k: kv[k] for k in ("pages", "page_size", "bytes_allocated", "peak_used_pages",
                                     "peak_bytes_used", "waste_mean", "waste_max")},
           "token_buckets": summary.get("token_buckets")}
    for key in ("steps_per_bucket", "cuda_graphs", "device"):
        if key in summary:
            rec[key] = summary[key]
    if failed:
        rec["first_failure"] = failed[0]["error"]
    if short:
        rec["wrong_token_counts"] = short[:10]
    return rec


# --- Hugging Face ----------------------------------------------------------------------


def step_clock():
    """A generate() streamer that timestamps every put(): the prompt first,
    then each decoding step's tokens (after their copy to the host, so the
    step has finished)."""
    from transformers.generation.streamers import BaseStreamer

    class StepClock(BaseStreamer):
        def __init__(self):
            self.times = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    return StepClock()


def hf_generate(model, ids, mask, new, streamer=None):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                              do_sample=False, pad_token_id=0, streamer=streamer)


def hf_static_batches(model, args, requests, times, device, sync):
    """HF generate() in static batches on the timeline described in the
    module docstring; (record, per-request lines)."""
    clock = 0.0
    lines, ttft, tpot, latency = [], [], [], []
    useful = generated = 0
    batches = []
    for b in range(0, len(requests), args.hf_batch):
        batch = requests[b:b + args.hf_batch]
        arrive = times[b:b + args.hf_batch]
        width = max(len(r["prompt"]) for r in batch)
        new = max(r["max_new_tokens"] for r in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, width - len(r["prompt"]):] = torch.tensor(r["prompt"])
            mask[i, width - len(r["prompt"]):] = 1
        ids, mask = ids.to(device), mask.to(device)
        start = max(clock, max(arrive))
        streamer = step_clock()
        sync()
        t0 = time.perf_counter()
        out = hf_generate(model, ids, mask, new, streamer)
        sync()
        t1 = time.perf_counter()
        steps = [t - t0 for t in streamer.times[1:]]
        if len(steps) != new or out.shape[1] != width + new:
            raise RuntimeError(f"generate() made {out.shape[1] - width} tokens in "
                               f"{len(steps)} steps; expected {new}")
        tokens = out[:, width:].tolist()
        for i, r in enumerate(batch):
            n = r["max_new_tokens"]
            first, last = start + steps[0], start + steps[n - 1]
            line = {"id": r["id"], "tokens": tokens[i][:n], "finish": "length",
                    "prompt_tokens": len(r["prompt"]), "arrival_s": arrive[i],
                    "ttft_s": first - arrive[i], "latency_s": last - arrive[i]}
            ttft.append(line["ttft_s"])
            latency.append(line["latency_s"])
            if n > 1:
                line["tpot_s"] = (last - first) / (n - 1)
                tpot.append(line["tpot_s"])
            lines.append(line)
            useful += n
        generated += len(batch) * new
        clock = start + (t1 - t0)
        batches.append({"requests": len(batch), "start_s": start, "prefill_s": steps[0],
                        "generate_s": t1 - t0, "prompt_width": width, "max_new_tokens": new})
    rec = {"requests": len(requests), "finished": len(lines), "failed": 0,
           "output_tokens": useful, "prompt_tokens": sum(len(r["prompt"]) for r in requests),
           "duration_s": clock, "output_tok_per_s": useful / clock if clock > 0 else 0.0,
           "ttft_s": stats(ttft), "tpot_s": stats(tpot), "latency_s": stats(latency),
           "generated_tokens": generated,
           "wasted_token_fraction": 1 - useful / generated if generated else 0.0,
           "batches": len(batches),
           "busy_s": sum(x["generate_s"] for x in batches), "batch_log": batches}
    return rec, lines


def check_against_hf(args, model, serve, step, weights, requests, files, device):
    """--check-hf: the requests served together by llmc-serve on the HF
    model's weights vs HF generate() greedy on each alone (batch 1, no
    padding): equal or not, the first mismatch; and how llmc's tokens score
    under one HF forward of prompt + llmc's tokens (teacher forcing): the
    positions where HF's argmax is llmc's token, and the largest logit gap
    max - logit[llmc's token] where it is not. In bf16 greedy decoding meets
    near-ties (gaps of a bf16 rounding step, ~1/128 of the logits' scale),
    after which two correct implementations go separate ways; in f32 (the
    CPU smoke) the tokens must be equal."""
    path = files / "requests-check.jsonl"
    write_requests(path, requests, [0.0] * len(requests))
    summary, lines, cmd, _ = run_llmc_serve(args, serve, step, path, "check", files,
                                            weights=weights, realtime=False)
    got = {x["id"]: x for x in lines}
    rows = []
    for r in requests:
        ids = torch.tensor([r["prompt"]], device=device)
        out = hf_generate(model, ids, torch.ones_like(ids), r["max_new_tokens"])
        hf = out[0, ids.shape[1]:].tolist()
        mine = got.get(r["id"], {}).get("tokens")
        row = {"id": r["id"], "prompt_tokens": len(r["prompt"]), "new_tokens": len(hf)}
        if not mine:
            row.update(equal=False, error=got.get(r["id"], {}).get("error", "no output line"))
            rows.append(row)
            continue
        row["equal"] = mine == hf
        P = len(r["prompt"])
        with torch.no_grad():
            seq = torch.tensor([r["prompt"] + mine], device=device)
            pred = model(input_ids=seq).logits[0, P - 1:-1].float()
        tok = torch.tensor(mine, device=device)
        chosen = pred.gather(-1, tok[:, None])[:, 0]
        gap = pred.max(-1).values - chosen
        agree = pred.argmax(-1) == tok
        row["hf_argmax_agrees"] = f"{int(agree.sum())}/{len(mine)}"
        row["worst_gap"] = float(gap[~agree].max()) if bool((~agree).any()) else 0.0
        row["logit_scale"] = float(pred.abs().max())
        if not row["equal"]:
            k = next((i for i, (a, b) in enumerate(zip(mine, hf)) if a != b),
                     min(len(mine), len(hf)))
            row.update(first_mismatch=k, llmc_tokens=len(mine))
            if k < min(len(mine), len(hf)):
                # The prefixes agree up to k: HF's logit of its own token minus
                # that of llmc's there (one forward: how near a tie).
                row["hf_logit_gap"] = float(pred[k, hf[k]] - pred[k, mine[k]])
        rows.append(row)
    equal = sum(row["equal"] for row in rows)
    return {"command": " ".join(cmd), "requests": rows, "equal": f"{equal}/{len(rows)}",
            "all_equal": equal == len(rows)}


# --- report -----------------------------------------------------------------------------


def table(result):
    env, wl, kv = result["environment"], result["workload"], result["kv"]
    rows = result["runs"]
    ms = lambda x: f"{1e3 * x:.1f}"  # noqa: E731
    s = lambda x: f"{x:.2f}"  # noqa: E731
    m = result["model"]
    lines = [
        f"# Serving benchmark: llmc-serve (continuous batching) vs HF generate() "
        f"(static batches)",
        "",
        f"{env['date']}, {env.get('gpu', 'CPU')}, torch {env['torch']}, transformers "
        f"{env['transformers']}, commit {env['git_commit']}.",
        "",
        f"Model: LlamaForCausalLM `{m['name']}` ({m['layers']} layers, hidden {m['hidden']}, "
        f"{m['heads']}/{m['kv_heads']} heads, FFN {m['ffn']}, vocab {m['vocab']}), {m['dtype']}, "
        f"random weights. Workload: {wl['num_requests']} requests, prompt lognormal(median "
        f"{wl['prompt']['median']:g}, sigma {wl['prompt']['sigma']:g}) clipped to "
        f"[{wl['prompt']['min']}, {wl['prompt']['max']}] (mean {wl['prompt']['drawn']['mean']:.0f}, "
        f"max {wl['prompt']['drawn']['max']}), output lognormal(median "
        f"{wl['output']['median']:g}, sigma {wl['output']['sigma']:g}) clipped to "
        f"[{wl['output']['min']}, {wl['output']['max']}] (mean {wl['output']['drawn']['mean']:.0f}, "
        f"max {wl['output']['drawn']['max']}); Poisson arrivals, seed {wl['seed']}.",
        "",
        (f"llmc: `llmc-serve --backend={result['llmc']['backend']} --realtime "
         f"--max-batch-tokens={result['llmc']['max_batch_tokens']} "
         f"--max-seqs={result['llmc']['max_seqs']}`, {kv['num_pages']} pages of "
         f"{kv['page_size']} tokens ({kv['bytes_allocated'] / 2**30:.2f} GiB of K and V), "
         f"{result['llmc']['weights']}." if not result["llmc"]["skipped"] else "llmc: skipped.")
        + (f" HF: {result['hf']['what']}." if not result["hf"]["skipped"] else " HF: skipped."),
        "",
        "| rate (req/s) | backend | requests | output tok/s | duration s | TTFT p50 / p99 s "
        "| TPOT p50 / p99 ms | latency p50 / p99 s | llmc / HF |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['rate']} | {r['backend']} | failed: "
                         f"{r['error'].splitlines()[0][:300]} | | | | | | |")
            continue
        ratio = r.get("llmc_over_hf")
        lines.append(
            f"| {r['rate']} | {r['backend']} | {r['finished']}/{r['requests']} "
            f"| {r['output_tok_per_s']:.1f} | {s(r['duration_s'])} "
            f"| {s(r['ttft_s']['p50'])} / {s(r['ttft_s']['p99'])} "
            f"| {ms(r['tpot_s']['p50'])} / {ms(r['tpot_s']['p99'])} "
            f"| {s(r['latency_s']['p50'])} / {s(r['latency_s']['p99'])} "
            f"| {f'{ratio:.2f}' if ratio else '-'} |")
    llmc_rows = [r for r in rows if r["backend"] == "llmc" and "error" not in r]
    if llmc_rows:
        lines += ["", "llmc's KV cache and scheduler (waste: the unfilled slots of the used "
                      "pages, mean over steps weighted by pages used, and max):", "",
                  "| rate | KV waste mean / max | peak KV used / allocated GiB | peak pages "
                  "| preemptions | steps | tokens / step | compile s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in llmc_rows:
            k = r["kv"]
            lines.append(
                f"| {r['rate']} | {k['waste_mean']:.3f} / {k['waste_max']:.3f} "
                f"| {k['peak_bytes_used'] / 2**30:.2f} / {k['bytes_allocated'] / 2**30:.2f} "
                f"| {k['peak_used_pages']} / {k['pages']} | {r['preemptions']} | {r['steps']} "
                f"| {r['tokens_per_step'] or 0:.1f} | {r['compile_s']:.1f} |")
    hf_rows = [r for r in rows if r["backend"] == "hf" and "error" not in r]
    if hf_rows:
        lines += ["", "HF's static batches: tokens generated past a request's own "
                      "max_new_tokens are waste:", "",
                  "| rate | batches | generated tokens | wasted fraction | busy s |",
                  "|---|---|---|---|---|"]
        for r in hf_rows:
            lines.append(f"| {r['rate']} | {r['batches']} | {r['generated_tokens']} "
                         f"| {r['wasted_token_fraction']:.3f} | {s(r['busy_s'])} |")
        for w in result["hf"].get("warmup_passes", []):
            lines.append(f"\nHF's untimed warm-up pass over the same batches (all at t=0): "
                         f"{s(w['busy_s'])} s busy, {w['output_tok_per_s']:.1f} output tok/s, "
                         f"TPOT p50 {ms(w['tpot_p50_s'])} ms.")
    check = result.get("check_hf")
    if check and "error" in check:
        lines += ["", f"--check-hf failed: {check['error'].splitlines()[0][:300]}"]
    elif check:
        lines += ["", f"--check-hf: {check['equal']} requests with llmc's tokens (served "
                      f"together) equal to HF generate() greedy on each alone.", "",
                  "| request | prompt | new tokens | equal | first mismatch (HF's logit gap "
                  "there) | HF's argmax is llmc's token (teacher forcing) | largest gap / "
                  "max logit |", "|---|---|---|---|---|---|---|"]
        for row in check.get("requests", []):
            first = row.get("first_mismatch", row.get("error", "-"))
            if "hf_logit_gap" in row:
                first = f"{first} ({row['hf_logit_gap']:.3g})"
            worst = (f"{row['worst_gap']:.3g} / {row['logit_scale']:.3g}"
                     if "worst_gap" in row else "-")
            lines.append(f"| {row['id']} | {row['prompt_tokens']} | {row['new_tokens']} "
                         f"| {'yes' if row['equal'] else 'no'} | {first} "
                         f"| {row.get('hf_argmax_agrees', '-')} | {worst} |")
    return "\n".join(lines) + "\n"


# --- main ---------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, str(REPO / "python"))  # a checkout's llmc when none is installed
    from llmc import serving

    out = Path(args.out)
    files = out / "files"
    files.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.cpu_smoke else "cuda"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    serve = None if args.skip_llmc else find_llmc_serve(args.llmc_serve)
    if not args.skip_llmc and not serve:
        sys.exit("serving.py: llmc-serve not found (--llmc-serve PATH, PATH, build/bin)")

    cfg_kw = MODELS[args.model]
    from transformers import LlamaConfig
    config = LlamaConfig(**cfg_kw, rms_norm_eps=1e-5, tie_word_embeddings=False)
    vocab = cfg_kw["vocab_size"]
    requests = make_workload(args, vocab)
    longest = max(len(r["prompt"]) + r["max_new_tokens"] for r in requests)
    if longest > cfg_kw["max_position_embeddings"]:
        sys.exit(f"serving.py: a request needs {longest} positions; the model has "
                 f"{cfg_kw['max_position_embeddings']}")
    L, Hkv = cfg_kw["num_hidden_layers"], cfg_kw["num_key_value_heads"]
    D = cfg_kw["hidden_size"] // cfg_kw["num_attention_heads"]
    elem = 1 if args.kv_cache_dtype else torch.empty((), dtype=DTYPES[args.dtype]).element_size()
    page_bytes = 2 * L * args.page_size * Hkv * D * elem  # K and V, every layer
    num_pages = args.num_pages or int(args.kv_gib * 2**30 // page_bytes)
    max_pages = -(-longest // args.page_size)
    if num_pages < max_pages + 1:
        sys.exit(f"serving.py: {num_pages} pages cannot hold the longest request "
                 f"({longest} tokens, {max_pages} pages of {args.page_size})")

    result = {
        "environment": environment(args, device, serve),
        "command": [sys.argv[0]] + (list(argv) if argv is not None else sys.argv[1:]),
        "args": {k: v for k, v in vars(args).items() if k != "rate_labels"},
        "model": {"name": args.model, "layers": L, "hidden": cfg_kw["hidden_size"],
                  "heads": cfg_kw["num_attention_heads"], "kv_heads": Hkv,
                  "ffn": cfg_kw["intermediate_size"], "vocab": vocab,
                  "max_position_embeddings": cfg_kw["max_position_embeddings"],
                  "dtype": args.dtype},
        "workload": {
            "num_requests": len(requests), "seed": args.seed, "rates": args.rate_labels,
            "arrivals": "Poisson (exponential gaps, the first request at t=0); inf: all at t=0",
            "token_ids": f"uniform in [1, {vocab})",
            "prompt": {"distribution": "lognormal", "median": args.prompt_median,
                       "sigma": args.prompt_sigma, "min": args.prompt_min,
                       "max": args.prompt_max,
                       "drawn": length_stats([len(r["prompt"]) for r in requests])},
            "output": {"distribution": "lognormal", "median": args.output_median,
                       "sigma": args.output_sigma, "min": args.output_min,
                       "max": args.output_max,
                       "drawn": length_stats([r["max_new_tokens"] for r in requests])},
            "longest_request": longest},
        "kv": {"page_size": args.page_size, "num_pages": num_pages, "max_pages": max_pages,
               "cache_dtype": args.kv_cache_dtype or args.dtype,
               "scale": args.kv_scale if args.kv_cache_dtype else None,
               "bytes_per_page_all_layers": page_bytes, "bytes_allocated": num_pages * page_bytes,
               "from": "--num-pages" if args.num_pages else f"--kv-gib {args.kv_gib:g}"},
        "llmc": {"llmc_serve": serve, "backend": args.backend, "skipped": args.skip_llmc,
                 "max_batch_tokens": args.max_batch_tokens, "max_seqs": args.max_seqs,
                 "token_buckets": args.token_buckets or "llmc-serve's default",
                 "weights": ("the HF model's (--check-hf)" if args.check_hf else
                             f"llmc-serve's random weights (--seed {args.seed}); the throughput "
                             f"does not depend on the values: every request generates its "
                             f"max_new_tokens whatever the tokens are")},
        "hf": {"batch": args.hf_batch, "device": device, "dtype": args.dtype,
               "what": (f"generate() as shipped (DynamicCache, no torch.compile, the model's "
                        f"default attention), greedy, static batches of {args.hf_batch} in "
                        f"arrival order, left-padded, max_new_tokens = the batch's largest; "
                        f"a batch starts when its last request has arrived and the previous "
                        f"batch is done (measured batches placed on that timeline); only each "
                        f"request's own tokens count; timed after {args.hf_warmups} untimed "
                        f"pass(es) over the same batches"),
               "skipped": args.skip_hf},
        "runs": [],
    }
    path = out / "results.json"

    def save():
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        os.replace(tmp, path)

    save()
    print(f"{args.model}: {len(requests)} requests, prompt mean "
          f"{result['workload']['prompt']['drawn']['mean']:.0f}, output mean "
          f"{result['workload']['output']['drawn']['mean']:.0f}, longest {longest}; "
          f"{num_pages} pages of {args.page_size} ({num_pages * page_bytes / 2**30:.2f} GiB), "
          f"block table {max_pages}", flush=True)

    step = files / "step.mlir"
    fp8_kv = ({"kv_cache_dtype": args.kv_cache_dtype, "kv_scale": args.kv_scale}
              if args.kv_cache_dtype else {})
    step.write_text(serving.llama_serving_step_mlir(
        config, num_pages=num_pages, page_size=args.page_size, max_pages=max_pages,
        dtype=DTYPES[args.dtype], **fp8_kv))
    times = {label: arrivals(args, label, len(requests)) for label in args.rate_labels}
    req_files = {}
    for label in args.rate_labels:
        req_files[label] = files / f"requests-{label}.jsonl"
        write_requests(req_files[label], requests, times[label])

    model = None
    weights_dir = None
    if not args.skip_hf or args.check_hf:
        if device == "cuda" and not torch.cuda.is_available():
            sys.exit("serving.py: the HF baseline needs a CUDA GPU (or --cpu-smoke / --skip-hf)")
        t0 = time.perf_counter()
        model = make_model(args, device)
        result["hf"]["attn_implementation"] = getattr(model.config, "_attn_implementation",
                                                      None)
        result["hf"]["model_build_s"] = time.perf_counter() - t0
    try:
        if args.check_hf:
            weights_dir = tempfile.mkdtemp(prefix="llmc-serving-weights-")
            tensors = serving.llama_serving_step_weights(model, dtype=DTYPES[args.dtype])
            serving.write_serving_step_weights(
                tensors, weights_dir, serving.SERVING_STEP_BATCH_ARGS + 2 * L)
            del tensors

        llmc_tok_s = {}
        if not args.skip_llmc:
            for label in args.rate_labels:
                run = {"rate": label, "backend": "llmc"}
                try:
                    summary, lines, cmd, wall = run_llmc_serve(
                        args, serve, step, req_files[label], f"rate-{label}", files,
                        weights=weights_dir)
                    run.update(llmc_record(summary, lines, requests))
                    run["command"] = " ".join(cmd)
                    run["process_s"] = wall
                    llmc_tok_s[label] = run["output_tok_per_s"]
                except Exception as e:  # recorded; the other runs go on
                    run["error"] = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                result["runs"].append(run)
                save()
                print(json.dumps({k: v for k, v in run.items()
                                  if k not in ("steps_per_bucket", "token_buckets")}), flush=True)

        if args.check_hf:
            try:
                result["check_hf"] = check_against_hf(
                    args, model, serve, step, weights_dir, requests[:args.check_requests],
                    files, device)
            except Exception as e:
                result["check_hf"] = {"error": f"{type(e).__name__}: {e}", "all_equal": False}
                traceback.print_exc()
            save()
            print(json.dumps(result["check_hf"]), flush=True)

        if not args.skip_hf:
            # Warm-up: untimed passes over the batches every rate runs (the
            # batches depend on the arrival order alone, the same at every
            # rate). Seen on the H200 (7B, batches of 32 and 16 requests,
            # 502/909-token prompts, ~500 new tokens): generate() ran each
            # new sequence of shapes 2.5-3x slower per step (65-90 ms against
            # 27 ms; per-shape setup, presumably, not the caching allocator:
            # expandable_segments did not change it), so without this pass
            # the first rate measured would carry it and the others not.
            # It is the best case for HF: a server meets new shapes all the
            # time (llmc-serve's buckets are compiled and captured before
            # its clock starts, compile_s).
            result["hf"]["warmup_passes"] = []
            for _ in range(args.hf_warmups):
                rec, _lines = hf_static_batches(model, args, requests, [0.0] * len(requests),
                                                device, sync)
                result["hf"]["warmup_passes"].append(
                    {"busy_s": rec["busy_s"], "output_tok_per_s": rec["output_tok_per_s"],
                     "tpot_p50_s": rec["tpot_s"]["p50"]})
                print(f"HF warm-up pass: {rec['busy_s']:.1f} s, "
                      f"{rec['output_tok_per_s']:.1f} output tok/s", flush=True)
            for label in args.rate_labels:
                run = {"rate": label, "backend": "hf"}
                try:
                    rec, lines = hf_static_batches(model, args, requests, times[label], device,
                                                   sync)
                    run.update(rec)
                    with open(files / f"hf-rate-{label}.jsonl", "w") as f:
                        for line in lines:
                            f.write(json.dumps(line) + "\n")
                    if llmc_tok_s.get(label) and run["output_tok_per_s"] > 0:
                        ratio = llmc_tok_s[label] / run["output_tok_per_s"]
                        run["llmc_over_hf"] = ratio
                        for r in result["runs"]:
                            if r["backend"] == "llmc" and r["rate"] == label:
                                r["llmc_over_hf"] = ratio
                except Exception as e:
                    run["error"] = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                result["runs"].append(run)
                save()
                print(json.dumps({k: v for k, v in run.items() if k != "batch_log"}),
                      flush=True)
            if device == "cuda":
                result["hf"]["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    finally:
        if weights_dir:
            shutil.rmtree(weights_dir, ignore_errors=True)

    # Runs in rate order, llmc before HF.
    order = {label: i for i, label in enumerate(args.rate_labels)}
    result["runs"].sort(key=lambda r: (order[r["rate"]], r["backend"] != "llmc"))
    result["ratios"] = {r["rate"]: r["llmc_over_hf"] for r in result["runs"]
                        if r["backend"] == "hf" and "llmc_over_hf" in r}
    save()
    text = table(result)
    (out / "results.md").write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
