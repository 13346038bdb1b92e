#!/usr/bin/env python3
"""Greedy Hugging Face `generate()` with a static KV cache (or the default
dynamic one), one command, every backend in the same run (issue 17's
generation benchmark):

    python3 bench/generate_hf.py --out DIR                       # 7B-shaped LLaMA on the GPU
    python3 bench/generate_hf.py --out DIR --batches 1 --backends eager,llmc-graphs
    python3 bench/generate_hf.py --smoke --out DIR               # tiny, on the CPU (CI)
    python3 bench/generate_hf.py --out DIR --cache dynamic --batches 1 --backends eager,llmc

The model is `LlamaForCausalLM` with random bf16 weights (no download):
32 layers, hidden 4096, 32 heads, FFN 11008, vocab 32000 by default. For each
batch size (1 and 8) and backend it runs `model.generate(prompt,
max_new_tokens=N, do_sample=False, cache_implementation="static")` with a
prompt of --prompt tokens (512), where the backend replaces `model.forward`:

  eager                  PyTorch (generation_config.disable_compile: Hugging Face
                         otherwise compiles the forward of a static-cache
                         generate() on a GPU by itself)
  hf-compile             that automatic compile: generation_config.compile_config,
                         by default Inductor with mode="reduce-overhead"
  inductor               torch.compile(model.forward)
  inductor-graphs        torch.compile(model.forward, mode="reduce-overhead")
  llmc                   torch.compile(model.forward, backend="llmc")
  llmc-graphs            ... backend="llmc", mode="reduce-overhead"
  llmc-int8, llmc-int4   llmc-graphs with options={"weight_only": ...}

Reported per (batch, backend): the first call (compiles included) in
seconds; decode tokens/s = batch * (N - 1) / (t(N new tokens) - t(1 new
token)), both steady-state calls, so the prefill cancels; the compiles the
backend made (llmc's reports, or Dynamo's unique graphs); whether the tokens
equal eager's, and how they score under one eager forward of the whole
sequence (teacher forcing: where eager's argmax picks the same token, and
the largest logit gap where it does not; bf16 near-ties are not errors); and the ratio to the bandwidth bound: every decode step must
read the weights and the live KV cache once, so the step takes at least
(weight bytes + batch * mean live KV bytes) / copy bandwidth, the copy
bandwidth measured in this run (torch copy of 4 GiB). int8/int4 read a half
/ a quarter of every linear weight whose K is a multiple of 128, the LM head
included (plus a float32 scale per 128 weights); a step reads only the
batch's rows of the embedding. Generation never stops early (min_new_tokens),
so every backend runs the same number of steps.

--cache dynamic runs the same with Hugging Face's default cache, grown by
`cat` every step, and compiles with `dynamic=None` (Dynamo's default): the
compiles llmc makes are then the prefill, the first decode step and one per
bucket of the cache lengths (bucketing's appends and key masks).

Each measurement is appended to DIR/generate.json as soon as it is made and
DIR/generate.md gets the table at the end, so a call that runs out of time
keeps what it measured; --backends and --batches split the run over calls.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback
import warnings

import torch

BACKENDS = ("eager", "hf-compile", "inductor", "inductor-graphs", "llmc", "llmc-graphs",
            "llmc-int8", "llmc-int4")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for generate.json and generate.md")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128, help="new tokens per generate()")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated subset of " + ", ".join(BACKENDS))
    ap.add_argument("--repeats", type=int, default=3, help="steady-state calls; median")
    ap.add_argument("--cache", choices=("static", "dynamic"), default="static",
                    help="the KV cache generate() uses (static: cache_implementation="
                         "'static', compiled with dynamic=False; dynamic: the default cache, "
                         "compiled with dynamic=None)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the measurements of each backend, one generate() of N new "
                         "tokens under torch.profiler: DIR/profile-B<batch>-<backend>.txt "
                         "(top ops by host time and by GPU time) and .json.gz (Chrome trace; "
                         "bench/trace_gaps.py reads it)")
    ap.add_argument("--smoke", action="store_true",
                    help="a 2-layer, 128-wide model on the CPU: checks this script, not speed")
    args = ap.parse_args(argv)
    if args.smoke:
        args.layers, args.dim, args.heads, args.kv_heads, args.ffn = 2, 128, 4, 2, 256
        args.vocab, args.prompt, args.new, args.repeats = 1000, 9, 6, 3
    args.batches = [int(b) for b in args.batches.split(",")]
    args.backends = args.backends.split(",")
    bad = [b for b in args.backends if b not in BACKENDS]
    if bad:
        ap.error(f"unknown backend(s) {bad}; choose from {', '.join(BACKENDS)}")
    return args


def copy_bandwidth(device):
    """Bytes read + written per second of a 4 GiB device copy (median of 20)."""
    n = 4 * 2**30 // 2
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    times = []
    for i in range(23):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return 2 * n * 2 / statistics.median(times)


def bound_tokens_per_s(model, args, batch, weight_only, bandwidth):
    """batch / the least time of a decode step: the weights (quantized
    projections for weight_only) and the mean live KV cache, read once."""
    linear, other = 0, 0
    embedding = model.get_input_embeddings().weight
    for p in model.parameters():
        if p is embedding:
            other += batch * p.shape[1]  # the rows of this step's tokens
        elif p.dim() == 2 and p.shape[1] % 128 == 0:
            linear += p.numel()  # what weight-only quantizes (LM head included)
        else:
            other += p.numel()
    bits = {"int8": 8, "int4": 4}.get(weight_only, 16)
    weight_bytes = linear * bits / 8 + (linear // 128) * 4 * (bits < 16) + other * 2
    head_dim = args.dim // args.heads
    mean_len = args.prompt + args.new / 2
    kv_bytes = batch * 2 * args.layers * args.kv_heads * head_dim * 2 * mean_len
    return batch / ((weight_bytes + kv_bytes) / bandwidth)


def generate(model, ids, new, cache="static"):
    kw = {"cache_implementation": "static"} if cache == "static" else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                              pad_token_id=0, **kw)


def timed(model, ids, new, sync, cache="static"):
    sync()
    t0 = time.perf_counter()
    out = generate(model, ids, new, cache)
    sync()
    return time.perf_counter() - t0, out


def teacher_forced(base_forward, out, prompt):
    """How a backend's tokens score under one eager forward of the whole
    sequence: (positions where eager's argmax on the same prefix is the
    token, positions, largest logit gap max - logit[token] at the others).
    Greedy decoding in bf16 with random weights meets near-ties, so a
    sequence can leave eager's after a few tokens without a wrong kernel;
    a correct backend agrees at almost every position and loses only
    near-ties (gaps at bf16 rounding, ~1e-2 of the logits' scale), as
    eager's own incremental decode does against this full forward."""
    with torch.no_grad():
        logits = base_forward(input_ids=out).logits.float()
    pred = logits[:, prompt - 1:-1]
    tokens = out[:, prompt:]
    chosen = pred.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    gap = pred.max(-1).values - chosen
    agree = pred.argmax(-1) == tokens
    worst = float(gap[~agree].max()) if (~agree).any() else 0.0
    scale = float(pred.abs().max())
    return int(agree.sum()), agree.numel(), worst, scale


def set_backend(model, base_forward, name, cache="static"):
    """model.forward for backend `name`; Dynamo's and llmc's caches reset."""
    import llmc.backend
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()  # Dynamo's unique_graphs counts this backend's only
    llmc.backend.reset()
    # Hugging Face compiles a static-cache generate()'s forward on a GPU
    # unless told not to (GenerationMixin._valid_auto_compile_criteria):
    # only the hf-compile row lets it, so "eager" is eager and the other
    # rows run the backend they name.
    model.generation_config.disable_compile = name != "hf-compile"
    if name in ("eager", "hf-compile"):
        model.forward = base_forward
        return
    kw = {}
    if name.startswith("llmc"):
        kw["backend"] = "llmc"
    if name in ("llmc-int8", "llmc-int4"):  # options and mode exclude each other
        kw["options"] = {"weight_only": name.split("-")[1], "cuda_graphs": True}
    elif name.endswith("-graphs"):
        kw["mode"] = "reduce-overhead"
    fwd = torch.compile(base_forward, dynamic=False if cache == "static" else None, **kw)
    if name == "inductor-graphs":
        # generate() keeps each step's logits while the next step replays the
        # graph, which overwrites Inductor's CUDA-graph outputs ("accessing
        # tensor output of CUDAGraphs that has been overwritten", seen on the
        # H200): a new step is marked and the logits are copied out, as
        # PyTorch's CUDA-graph trees documentation advises.
        def forward(*a, **k):
            torch.compiler.cudagraph_mark_step_begin()
            out = fwd(*a, **k)
            out.logits = out.logits.clone()
            return out
        model.forward = forward
        return
    model.forward = fwd


def profile_generate(model, ids, new, cache, path):
    """One generate() of `new` tokens under torch.profiler (CPU, and CUDA on a
    GPU): the top operators by host time and by device time to `path`.txt,
    the timeline to `path`.json.gz."""
    import gzip
    from torch.profiler import ProfilerActivity, profile
    cuda = ids.device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        generate(model, ids, new, cache)
        if cuda:
            torch.cuda.synchronize()
    avg = prof.key_averages()
    text = avg.table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=80)
    if cuda:
        text += "\n" + avg.table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=80)
    with open(path + ".txt", "w") as f:
        f.write(text)
    prof.export_chrome_trace(path + ".json")
    with open(path + ".json", "rb") as f, gzip.open(path + ".json.gz", "wb") as g:
        g.write(f.read())
    os.remove(path + ".json")


def compiles(name):
    if name.startswith("llmc"):
        import llmc.backend
        return sum(r.compiles for r in llmc.backend.reports())
    if name == "eager":
        return 0
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    if not args.smoke:  # a fallback to PyTorch raises: no eager time labelled llmc
        os.environ.setdefault("LLMC_STRICT", "1")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    from transformers import LlamaConfig, LlamaForCausalLM
    import llmc.backend  # noqa: F401  (registers the backend)

    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "torch": torch.__version__, "args": {k: v for k, v in vars(args).items()},
              "runs": []}
    path = os.path.join(args.out, "generate.json")

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(result, f, indent=1, default=str)
        os.replace(path + ".tmp", path)

    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
        result["copy_bytes_per_s"] = copy_bandwidth(device)
    save()
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.dim, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads,
                      max_position_embeddings=args.prompt + args.new + 16)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    base_forward = model.forward
    print(f"LlamaForCausalLM layers={args.layers} dim={args.dim} heads={args.heads}/"
          f"{args.kv_heads} ffn={args.ffn} vocab={args.vocab} bf16 on {device}; prompt "
          f"{args.prompt}, {args.new} new tokens", flush=True)
    for batch in args.batches:
        ids = torch.randint(1, args.vocab, (batch, args.prompt), device=device)
        reference = None
        for name in args.backends:
            run = {"batch": batch, "backend": name}
            try:
                set_backend(model, base_forward, name, args.cache)
                t_first, out = timed(model, ids, args.new, sync, args.cache)
                run["first_call_s"] = t_first
                full = [timed(model, ids, args.new, sync, args.cache)[0]
                        for _ in range(args.repeats)]
                one = [timed(model, ids, 1, sync, args.cache)[0] for _ in range(args.repeats)]
                decode_s = statistics.median(full) - statistics.median(one)
                run["decode_tok_s"] = batch * (args.new - 1) / decode_s if decode_s > 0 else None
                run["compiles"] = compiles(name)
                if name == "eager":
                    reference = out
                agree, n, worst, scale = teacher_forced(base_forward, out, args.prompt)
                run["teacher_forced"] = f"{agree}/{n}"
                run["worst_gap"] = worst
                run["logit_scale"] = scale
                if reference is not None and name not in ("llmc-int8", "llmc-int4"):
                    run["same_tokens"] = f"{int((out == reference).all(1).sum())}/{batch}"
                if args.profile:
                    profile_generate(model, ids, args.profile, args.cache,
                                     os.path.join(args.out, f"profile-B{batch}-{name}"))
                if device == "cuda":
                    wo = name.split("-")[1] if name in ("llmc-int8", "llmc-int4") else None
                    bound = bound_tokens_per_s(model, args, batch, wo,
                                               result["copy_bytes_per_s"])
                    run["bound_tok_s"] = bound
                    if run["decode_tok_s"]:
                        run["of_bound"] = run["decode_tok_s"] / bound
            except Exception as e:  # a backend that fails is recorded; the run goes on
                run["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
                traceback.print_exc()
            result["runs"].append(run)
            save()
            print(json.dumps(run), flush=True)
    model.forward = base_forward
    lines = [f"Hugging Face generate(), {args.cache} cache, {result['date']}, "
             f"{result.get('gpu', device)}, torch {torch.__version__}; prompt {args.prompt}, "
             f"{args.new} new tokens; copy bandwidth "
             f"{result.get('copy_bytes_per_s', 0) / 1e12:.2f} TB/s", "",
             "| batch | backend | first call s | decode tok/s | of bound | compiles "
             "| same tokens as eager | eager argmax agrees (largest gap / max logit) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['batch']} | {r['backend']} | failed: {r['error']} | | | | | |")
            continue
        tok = r.get("decode_tok_s")
        cells = [str(r["batch"]), r["backend"], f"{r['first_call_s']:.1f}",
                 f"{tok:.1f}" if tok else "-",
                 f"{r['of_bound']:.2f}" if "of_bound" in r else "-",
                 str(r["compiles"]), r.get("same_tokens", "-"),
                 f"{r['teacher_forced']} ({r['worst_gap']:.3g} / {r['logit_scale']:.3g})"
                 if "teacher_forced" in r else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    with open(os.path.join(args.out, "generate.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
