#!/usr/bin/env python3
"""Model-level speed of the torch.compile backend: eager vs Inductor vs llmc.

On the GPU machine (torch with CUDA + transformers; no downloads: random
weights from configs), from the repository root:

    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e python/
    LLMC_LIB=$PWD/dist/lib/libllmc.so python3 bench/plugin.py --out $OUT [--quick]

Workloads:
  * inference forward (no KV cache, logits) of Hugging Face LlamaForCausalLM
    (hidden 4096, 32 heads, FFN 11008, vocab 32000), GPT2LMHeadModel (1600
    wide, 25 heads, vocab 50257) and MistralForCausalLM (4096, 32 heads, 8 KV
    heads, FFN 14336), --layers decoder layers (default 1), bf16, at batch
    1/4 and sequence 128/2048;
  * a training step (forward + backward, f32) of a small LLaMA (hidden 1024,
    8 heads, FFN 2816, 2 layers, vocab 32000), batch 4, sequence 512.
Each (model, backend) runs in its own subprocess with a timeout, so a crash
or hang is recorded and the run goes on. Timing (see the device notes'
METHOD.md): static shapes (dynamic=False; compile happens in warm-up), 3
warm-up calls, then `--iters` calls each timed with CUDA events, on 8
different input sets in rotation, median reported. Every backend's output is
compared with eager's on the same input (relative L2 error in the table), so
a fast wrong result shows.

--quick (about 3 minutes on an H200): LLaMA at 1x128 and 4x2048, GPT-2 and
Mistral at 1x128, the training step; 10 iterations, 60 s per worker.
Output: a table on stdout and OUT/plugin.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SHAPES_FULL = [(1, 128), (4, 128), (1, 2048), (4, 2048)]
BACKENDS = ["eager", "inductor", "llmc"]


def build(name, layers):
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM)
    if name == "llama":
        cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                          num_hidden_layers=layers, num_attention_heads=32,
                          num_key_value_heads=32, max_position_embeddings=4096)
        return LlamaForCausalLM(cfg), 32000
    if name == "gpt2":
        cfg = GPT2Config(vocab_size=50257, n_embd=1600, n_layer=layers, n_head=25,
                         n_positions=2048)
        return GPT2LMHeadModel(cfg), 50257
    if name == "mistral":
        cfg = MistralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                            num_hidden_layers=layers, num_attention_heads=32,
                            num_key_value_heads=8, max_position_embeddings=4096,
                            sliding_window=None)
        return MistralForCausalLM(cfg), 32000
    if name == "llama-train":
        cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                          num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
                          max_position_embeddings=1024)
        return LlamaForCausalLM(cfg), 32000
    raise ValueError(name)


def _rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def worker(args):
    """One (model, backend): every shape; prints one JSON line per result."""
    import torch
    torch.manual_seed(0)
    dev = "cuda"
    model, vocab = build(args.model, args.layers)
    train = args.model == "llama-train"
    model = model.to(dev).to(torch.float32 if train else torch.bfloat16)
    if not train:
        model.eval()
    ref_model = model
    if args.backend == "eager":
        run_model = model
    else:
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = 64
        run_model = torch.compile(model, backend=args.backend, dynamic=False)
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")]
    for b, s in shapes:
        rec = {"model": args.model, "backend": args.backend, "batch": b, "seq": s,
               "mode": "train" if train else "forward"}
        try:
            gen = torch.Generator(device=dev).manual_seed(1000 + b * s)
            inputs = [torch.randint(0, vocab, (b, s), device=dev, generator=gen) for _ in range(8)]

            def step(x):
                if train:
                    model.zero_grad(set_to_none=True)
                    out = run_model(x, labels=x, use_cache=False)
                    out.loss.backward()
                    return out.loss.detach()
                with torch.no_grad():
                    return run_model(x, use_cache=False).logits
            t0 = time.time()
            got = step(inputs[0])
            torch.cuda.synchronize()
            rec["first_call_s"] = round(time.time() - t0, 2)
            if args.backend != "eager":
                if train:
                    model.zero_grad(set_to_none=True)
                    want = ref_model(inputs[0], labels=inputs[0], use_cache=False).loss.detach()
                else:
                    with torch.no_grad():
                        want = ref_model(inputs[0], use_cache=False).logits
                rec["rel_l2_vs_eager"] = _rel_l2(got.float(), want.float())
                del want
            del got
            for i in range(3):
                step(inputs[i % 8])
            torch.cuda.synchronize()
            times = []
            for i in range(args.iters):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                step(inputs[i % 8])
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
            times.sort()
            rec["median_ms"] = times[len(times) // 2]
            rec["min_ms"] = times[0]
            rec["iters"] = len(times)
            if args.backend == "llmc":
                import llmc.backend
                reps = llmc.backend.reports()
                rec["llmc"] = {"compiles": sum(r.compiles for r in reps),
                               "llmc_runs": sum(r.llmc_runs for r in reps),
                               "eager_runs": sum(r.eager_runs for r in reps),
                               "flops_covered": min((r.flops_fraction for r in reps), default=0),
                               "compile_failures": sum(len(r.compile_failures) for r in reps)}
        except Exception as e:  # recorded, the other shapes go on
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        print("RESULT " + json.dumps(rec), flush=True)
        torch.cuda.empty_cache()


def main():
    os.environ.setdefault("LLMC_STRICT", "1")  # a fallback to PyTorch raises: no eager time labelled llmc
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for plugin.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--models", default="llama,gpt2,mistral,llama-train")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--timeout", type=int, default=None, help="seconds per (model, backend)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--shapes", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    iters = args.iters or (10 if args.quick else 30)
    timeout = args.timeout or (60 if args.quick else 240)
    plan = []
    for m in args.models.split(","):
        if m == "llama-train":
            shapes = [(4, 512)]
        elif args.quick:
            shapes = [(1, 128), (4, 2048)] if m == "llama" else [(1, 128)]
        else:
            shapes = SHAPES_FULL
        for be in args.backends.split(","):
            plan.append((m, be, shapes))
    results, t_start = [], time.time()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for m, be, shapes in plan:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", m,
               "--backend", be, "--layers", str(args.layers), "--iters", str(iters),
               "--shapes", ",".join(f"{b}x{s}" for b, s in shapes)]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = f"timeout after {timeout}s", "timeout"
        got = [json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")]
        done = {(r["batch"], r["seq"]) for r in got}
        for b, s in shapes:
            if (b, s) not in done:
                tail = (err or "").strip().splitlines()[-1:] or [""]
                got.append({"model": m, "backend": be, "batch": b, "seq": s,
                            "error": f"worker rc={rc}: {tail[0][:300]}"})
        results.extend(got)
        print(f"# {m}/{be}: {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "plugin.json"), "w") as f:
                json.dump({"layers": args.layers, "quick": args.quick, "iters": iters,
                           "results": results}, f, indent=1)
    table(results)
    print(f"total {time.time() - t_start:.0f}s")


def table(results):
    eager = {(r["model"], r["batch"], r["seq"]): r.get("median_ms") for r in results
             if r["backend"] == "eager"}
    print(f"{'model':12} {'mode':7} {'B':>2} {'S':>5} {'backend':9} {'median ms':>10} "
          f"{'vs eager':>8} {'rel L2':>9} {'1st call s':>10}  notes")
    for r in sorted(results, key=lambda r: (r["model"], r["batch"], r["seq"],
                                            BACKENDS.index(r["backend"]) if r["backend"] in BACKENDS else 9)):
        med = r.get("median_ms")
        e = eager.get((r["model"], r["batch"], r["seq"]))
        speed = f"{e / med:.2f}x" if med and e else ""
        l2 = f"{r['rel_l2_vs_eager']:.1e}" if "rel_l2_vs_eager" in r else ""
        notes = r.get("error", "")
        if "llmc" in r:
            x = r["llmc"]
            notes = (f"compiles {x['compiles']}, llmc runs {x['llmc_runs']}, eager runs "
                     f"{x['eager_runs']}, FLOPs {100 * x['flops_covered']:.0f}%"
                     + (f", {x['compile_failures']} compile failures" if x["compile_failures"] else "")
                     + (f"; {notes}" if notes else ""))
        print(f"{r['model']:12} {r.get('mode', ''):7} {r['batch']:>2} {r['seq']:>5} "
              f"{r['backend']:9} {med if med is None else round(med, 3)!s:>10} {speed:>8} "
              f"{l2:>9} {r.get('first_call_s', '')!s:>10}  {notes}")


if __name__ == "__main__":
    sys.exit(main())
