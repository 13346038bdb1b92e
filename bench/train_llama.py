#!/usr/bin/env python3
"""A LLaMA training step through eager, Inductor and llmc, one command, same run
(issue 16's training benchmark):

    python3 bench/train_llama.py --out DIR                  # 1B-shaped LLaMA on the GPU
    python3 bench/train_llama.py --out DIR --dtype f32 --batch 1 --seq 512
    python3 bench/train_llama.py --smoke --out DIR          # tiny, on the CPU (CI)

The model is Hugging Face's `LlamaForCausalLM` with random weights (no
download): 16 layers, hidden 2048, 16 heads, FFN 5632, vocab 32000, weights
in --dtype (bf16 by default), batch 4 x 2048 tokens, the loss taken outside
the compiled model in float32 (cross-entropy of logits.float()). Per
backend (eager, Inductor `torch.compile(model)`, llmc
`torch.compile(model, backend="llmc")`; llmc-mincut: the same with
options={"partition": "mincut"}, Inductor's min-cut rematerialization
instead of saving every intermediate) and mode:

  fwdbwd   forward + backward, gradients cleared between steps
  adamw    the same plus an AdamW step (foreach), compiled with the same
           backend (eager's stays eager)

aot_eager (PyTorch's backend that traces with Dynamo and AOTAutograd and
runs the traced graphs eagerly) shows what tracing alone costs a first step.

FP8 training (issue 20): llmc-fp8 is llmc with options={"precision": "fp8"}
(every GEMM but outer products in fp8 with per-tensor current scaling,
gradients in e5m2 and the rest in e4m3: Transformer Engine's HYBRID
format; attention stays bf16), llmc-fp8-row the same with fp8_scaling="row" (one scale per row of
each GEMM's LHS and column of its RHS); inductor-float8 is Inductor on the
model converted by torchao's convert_to_float8_training (tensorwise
dynamic scaling, the LM head left in bf16 as torchao's examples do), when
torchao is importable (else the run records the import error). MFU stays
measured against the bf16 GEMM ceiling, so fp8 runs can exceed what bf16
could reach.

Reported: the first step's time (compiles included) in seconds, split into
Dynamo's bytecode tracing, AOTAutograd (create_aot_dispatcher_function:
tracing the joint graph, partitioning it, the backend's partition of the
forward), llmc's own import and compile of each subgraph (done on the
subgraph's first call, so in neither of the two), and the rest (running
the step, first-run setup); the
median steady-state step time over --steps steps (CUDA-synchronized);
tokens/s = batch * seq / step time; MFU = model FLOPs / step time / the
bf16 (or f32) GEMM ceiling measured in this run (torch.mm of 8192^3), with
model FLOPs = 6 * N * tokens (N: parameters of the matmuls, the LM head
included, the embedding not) + 6 * layers * seq * hidden * tokens (causal
attention's score and value products, forward and backward); the first
step's loss relative to eager's; every step's loss (`losses`; in adamw mode
a training curve on the fixed batch); in fwdbwd mode every parameter's
gradient error against eager's (or, with --grad-reference f32, against
eager's in float32 on the same weights); and llmc's partition report
(subgraphs and ops kept in PyTorch for each graph). Each measurement is appended to
DIR/train.json as soon as it is made; DIR/train.md gets the table.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback
import warnings

import torch
import torch.nn.functional as F

BACKENDS = ("eager", "inductor", "llmc", "llmc-mincut", "aot_eager",
            "llmc-fp8", "llmc-fp8-row", "inductor-float8")
# torch.compile options of the llmc backends.
LLMC_OPTIONS = {"llmc": {}, "llmc-mincut": {"partition": "mincut"},
                "llmc-fp8": {"precision": "fp8"},
                "llmc-fp8-row": {"precision": "fp8", "fp8_scaling": "row"}}
MODES = ("fwdbwd", "adamw")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for train.json and train.md")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16",
                    help="weights and activations (the loss is always float32)")
    ap.add_argument("--steps", type=int, default=10, help="steady-state steps; median")
    ap.add_argument("--backends", default="eager,inductor,llmc",
                    help=f"comma-separated, of {','.join(BACKENDS)}")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--profile", action="store_true",
                    help="also profile one steady-state step per run (torch.profiler): "
                         "DIR/profile-MODE-BACKEND.txt lists the 80 kernels with the most "
                         "GPU time")
    ap.add_argument("--trace", action="store_true",
                    help="with --profile: also the profiled step's timeline, "
                         "DIR/profile-MODE-BACKEND.json.gz (Chrome trace format)")
    ap.add_argument("--grad-reference", choices=("eager", "f32"), default="eager",
                    help="what every backend's gradients are compared with: eager's in "
                         "--dtype (default), or eager's in float32 on the same weights (the "
                         "--dtype weights widened), which also measures eager's own error")
    ap.add_argument("--smoke", action="store_true",
                    help="a 2-layer, 64-wide model on the CPU: checks this script, not speed")
    args = ap.parse_args(argv)
    if args.smoke:
        args.layers, args.dim, args.heads, args.kv_heads, args.ffn = 2, 64, 4, 2, 176
        args.vocab, args.batch, args.seq, args.steps, args.dtype = 1000, 2, 16, 2, "f32"
    args.backends = args.backends.split(",")
    args.modes = args.modes.split(",")
    for got, allowed, what in ((args.backends, BACKENDS, "backend"), (args.modes, MODES, "mode")):
        bad = [x for x in got if x not in allowed]
        if bad:
            ap.error(f"unknown {what}(s) {bad}; choose from {', '.join(allowed)}")
    return args


def build_model(args, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.dim, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, max_position_embeddings=args.seq,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype).train()


def model_flops(model, args, tokens):
    """6 * N * tokens + causal attention (forward and backward)."""
    n = sum(p.numel() for name, p in model.named_parameters()
            if p.dim() == 2 and "embed_tokens" not in name)
    return 6 * n * tokens + 6 * args.layers * args.seq * args.dim * tokens


def gemm_ceiling(device, dtype):
    """FLOP/s of torch.mm at 8192^3 in `dtype`, best of 5 (None on the CPU)."""
    if device.type != "cuda":
        return None
    n = 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 5)
    return 2 * n ** 3 / best


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def make_step(model, backend, mode):
    """step(ids, labels) -> loss (float) for one backend and mode."""
    if backend == "eager":
        fwd = model
    elif backend == "inductor":
        fwd = torch.compile(model)
    elif backend == "aot_eager":
        fwd = torch.compile(model, backend="aot_eager")
    elif backend == "inductor-float8":
        from torchao.float8 import convert_to_float8_training
        convert_to_float8_training(model, module_filter_fn=lambda mod, fqn: fqn != "lm_head")
        fwd = torch.compile(model)
    else:
        fwd = torch.compile(model, backend="llmc", options=llmc_options(backend))
    opt = None
    if mode == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        opt_backend = ("llmc" if backend.startswith("llmc")
                       else "inductor" if backend == "inductor-float8" else backend)
        opt_kw = {"options": {"strict": llmc_options(backend)["strict"]}} if opt_backend == "llmc" else {}
        opt_step = (opt.step if backend == "eager"
                    else torch.compile(opt.step, backend=opt_backend, **opt_kw))
    # (opt.step has no backward: the partition option does not apply.)

    def step(ids, labels, keep_grads=False):
        logits = fwd(ids).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        loss.backward()
        if opt is not None:
            opt_step()
            opt.zero_grad(set_to_none=True)
        elif not keep_grads:
            model.zero_grad(set_to_none=True)
        return float(loss)
    return step


def gradients(model, step, ids, labels):
    """Every parameter's gradient of one forward+backward (fwdbwd mode: the
    weights never change, so this is the first step's)."""
    step(ids, labels, keep_grads=True)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def gradient_errors(grads, reference):
    """{parameter: relative L2 error of its gradient}; inf for a missing
    gradient or a NaN."""
    errors = {}
    for n, ref in reference.items():
        g = grads.get(n)
        if g is None:
            errors[n] = float("inf")
            continue
        err = float((g.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))
        errors[n] = err if err == err else float("inf")
    return errors


def f32_reference(args, device, dtype):
    """(loss, gradients) of eager in float32 on the weights of build_model
    (--dtype values widened exactly) and the same tokens as run_one."""
    model = build_model(args, device, dtype).float()
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(device)
    labels = torch.roll(ids, -1, dims=1)
    step = make_step(model, "eager", "fwdbwd")
    loss = step(ids, labels, keep_grads=True)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    del model
    return loss, grads


def llmc_options(backend):
    """torch.compile options of an llmc backend. strict unless LLMC_STRICT is 0 or empty:
    a subgraph that would run in PyTorch instead (no loadable libllmc.so, a
    failed compile) raises, and the run is recorded as an error rather than
    eager's time under llmc's name."""
    return dict(LLMC_OPTIONS[backend], strict=os.environ.get("LLMC_STRICT", "1") not in ("", "0"))


def llmc_report():
    import llmc.backend
    out = []
    for r in llmc.backend.reports():
        out.append({"graph": r.graph, "subgraphs": r.num_partitions,
                    "kept_in_pytorch": dict(r.unsupported),
                    "compile_failures": len(r.compile_failures),
                    "llmc_runs": r.llmc_runs, "eager_runs": r.eager_runs})
    return out


def first_step_parts(backend):
    """Seconds of the first step spent in Dynamo's bytecode tracing, in
    AOTAutograd (tracing the joint graph, partitioning, the backend's graph
    partition of the forward), and, for llmc, in its import + compile of the
    subgraphs (forward and backward, each on its first call: outside the
    other two). From torch._dynamo.utils.compilation_time_metrics, cleared
    before the step."""
    from torch._dynamo.utils import compilation_time_metrics as m
    parts = {"dynamo_tracing": sum(m.get("bytecode_tracing", [])),
             "aot_autograd": sum(m.get("create_aot_dispatcher_function", []))}
    if backend.startswith("llmc"):
        import llmc.backend
        parts["llmc_compile"] = sum(st.get("compile_s", 0.0) for r in llmc.backend.reports()
                                    for st in r.executables.values())
    return parts


def profile_step(step, ids, labels, device, path, trace=False):
    """One step under torch.profiler; the kernels with the most device time
    (CPU ops when there is no GPU) written to `path`, and with `trace` the
    step's timeline (Chrome trace format, gzip) next to it."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        step(ids, labels)
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    path.write_text(prof.key_averages().table(sort_by=key, row_limit=80, max_name_column_width=90))
    if trace:
        import gzip
        raw = path.with_suffix(".json")
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as f, gzip.open(str(raw) + ".gz", "wb") as g:
            g.write(f.read())
        raw.unlink()


def run_one(args, device, dtype, backend, mode, eager_loss, ceiling, eager_grads=None):
    model = build_model(args, device, dtype)
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(device)
    labels = torch.roll(ids, -1, dims=1)
    # Every run compiles afresh: its first step includes its compiles, and
    # llmc's report covers its own graphs.
    torch._dynamo.reset()
    if backend.startswith("llmc"):
        import llmc.backend
        llmc.backend.reset()
    step = make_step(model, backend, mode)
    sync(device)
    from torch._dynamo.utils import compilation_time_metrics
    compilation_time_metrics.clear()
    t0 = time.perf_counter()
    first_loss = step(ids, labels)
    sync(device)
    first = time.perf_counter() - t0
    first_parts = first_step_parts(backend)
    times, losses = [], [first_loss]
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step(ids, labels))  # float(): synchronizes, as sync() below
        sync(device)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    tokens = args.batch * args.seq
    flops = model_flops(model, args, tokens)
    rec = {"backend": backend, "mode": mode, "dtype": args.dtype, "first_step_s": first,
           "first_step_parts_s": first_parts,
           "step_ms": t * 1e3, "tokens_s": tokens / t, "first_loss": first_loss,
           "mfu": flops / t / ceiling if ceiling else None,
           # Every step's loss: in adamw mode a training curve on the fixed
           # batch (fp8 against bf16: issue 20's loss-curve criterion).
           "losses": losses}
    if eager_loss is not None:
        rec["loss_rel_to_eager"] = abs(first_loss - eager_loss) / max(abs(eager_loss), 1e-30)
    if mode == "fwdbwd":
        grads = gradients(model, step, ids, labels)
        if backend == "eager" and args.grad_reference == "eager":
            rec["_grads"] = grads
        elif eager_grads is not None:
            # Every parameter's error, worst first (train.json; the table
            # shows the worst).
            errors = sorted(gradient_errors(grads, eager_grads).items(), key=lambda kv: -kv[1])
            rec["grad_rel_to_eager"], rec["grad_worst_param"] = (
                (errors[0][1], errors[0][0]) if errors else (0.0, ""))
            rec["grad_errors"] = dict(errors)
            rec["grad_median"] = statistics.median(e for _, e in errors) if errors else 0.0
            rec["grad_reference"] = ("eager in float32" if args.grad_reference == "f32"
                                     else f"eager in {args.dtype}")
        del grads
    if backend.startswith("llmc"):
        rec["partitions"] = llmc_report()
    if args.profile:
        from pathlib import Path
        profile_step(step, ids, labels, device, Path(args.out) / f"profile-{mode}-{backend}.txt",
                     trace=args.trace)
    return rec


def table(args, runs, ceiling):
    ref = "eager in float32" if args.grad_reference == "f32" else "eager"
    lines = [f"LLaMA {args.layers} layers, hidden {args.dim}, {args.heads} heads "
             f"({args.kv_heads} KV), FFN {args.ffn}, vocab {args.vocab}; {args.dtype}; "
             f"batch {args.batch} x {args.seq}; GEMM ceiling "
             + (f"{ceiling / 1e12:.0f} TFLOP/s" if ceiling else "not measured (CPU)"), "",
             "| mode | backend | first step s | of which Dynamo / AOTAutograd / llmc compile s "
             "| step ms | tokens/s | MFU | loss vs eager "
             f"| gradients vs {ref} (relative L2: worst parameter; median) "
             "| llmc subgraphs (kept in PyTorch) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['mode']} | {r['backend']} | error: {r['error']} | | | | | | | |")
            continue
        parts = "; ".join(f"{p['graph']}: {p['subgraphs']}"
                          + (f" ({', '.join(p['kept_in_pytorch'])})" if p["kept_in_pytorch"] else "")
                          + (f" **ran in PyTorch {p['eager_runs']} times**"
                             if p.get("eager_runs") else "")
                          for p in r.get("partitions", []))
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        rel = f"{r['loss_rel_to_eager']:.1e}" if "loss_rel_to_eager" in r else "-"
        grad = (f"{r['grad_rel_to_eager']:.1e} ({r['grad_worst_param']}); "
                f"{r.get('grad_median', 0.0):.1e}" if "grad_rel_to_eager" in r else "-")
        fp = r.get("first_step_parts_s", {})
        split = (" / ".join(f"{fp[k]:.2f}" if k in fp else "-"
                            for k in ("dynamo_tracing", "aot_autograd", "llmc_compile"))
                 if r["backend"] != "eager" else "-")
        lines.append(f"| {r['mode']} | {r['backend']} | {r['first_step_s']:.2f} | {split} | {r['step_ms']:.1f} | "
                     f"{r['tokens_s']:.0f} | {mfu} | {rel} | {grad} | {parts or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    from pathlib import Path
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    ceiling = gemm_ceiling(device, dtype)
    result = {"args": {k: v for k, v in vars(args).items()}, "device": str(device),
              "gemm_flops": ceiling, "runs": []}
    path = out / "train.json"
    warnings.simplefilter("ignore")
    reference = None
    if args.grad_reference == "f32" and "fwdbwd" in args.modes:
        ref_loss, ref_grads = f32_reference(args, device, dtype)
        result["f32_reference_loss"] = ref_loss
        reference = ref_grads
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the f32 step's cached blocks: llmc allocates outside PyTorch
    for mode in args.modes:
        eager_loss = None
        eager_grads = reference if mode == "fwdbwd" else None
        for backend in args.backends:
            try:
                rec = run_one(args, device, dtype, backend, mode, eager_loss, ceiling, eager_grads)
                if backend == "eager":
                    eager_loss = rec["first_loss"]
                eager_grads = rec.pop("_grads", eager_grads)
            except Exception as e:  # one backend failing must not lose the others
                traceback.print_exc()
                rec = {"backend": backend, "mode": mode, "error": f"{type(e).__name__}: {e}"[:300]}
            result["runs"].append(rec)
            path.write_text(json.dumps(result, indent=1))
            print(json.dumps(rec), flush=True)
        if mode == "fwdbwd":
            reference = eager_grads = None  # gradients are compared in fwdbwd mode only
    (out / "train.md").write_text(table(args, result["runs"], ceiling))
    print(table(args, result["runs"], ceiling))
    return 0


if __name__ == "__main__":
    sys.exit(main())
