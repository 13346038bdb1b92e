#!/usr/bin/env python3
"""How far fp8 training moves the logits and gradients from float32, and how
far it should (issue 20):

    python3 bench/fp8_gradient_noise.py --out DIR                 # 1B LLaMA, GPU
    python3 bench/fp8_gradient_noise.py --out DIR --layers 2      # same width, 2 layers
    python3 bench/fp8_gradient_noise.py --out DIR --smoke         # tiny, CPU (checks the script)

One forward + backward of bench/train_llama.py's model (same weights, same
tokens, loss in float32) per variant, each against eager in float32 on the
same weights (the bf16 values widened): relative L2 error of the loss, the
logits and every parameter's gradient (median and worst). Variants:

  eager-bf16            PyTorch eager in bf16: the model's own rounding noise
  sim-fp8               every nn.Linear as a fake-quantized per-tensor
                        HYBRID fp8 GEMM (e4m3 activations and weights, e5m2
                        output gradient, current scaling s = amax / fp8 max;
                        Transformer Engine's recipe) in float32 math: what
                        the recipe itself costs
  sim-fp8-nohead        the same with the LM head in bf16
  torchao               torchao's convert_to_float8_training (tensorwise,
                        eager, the LM head in bf16), when importable
  llmc-fp8, llmc-bf16   torch.compile(backend="llmc") with precision fp8 / bf16

llmc-fp8 should sit near sim-fp8. On 2026-12-05 (H100, before the fix of
the RoPE angles' K = 1 matmul in the precision policy) it did not: logits
1.01 against 0.28, gradients 1.22 against 0.42 (median). DIR/noise.json
gets every number.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_llama  # noqa: E402

VARIANTS = ("eager-bf16", "sim-fp8", "sim-fp8-nohead", "torchao", "llmc-fp8", "llmc-bf16")


def fake_fp8(x, dtype, largest):
    """x rounded through `dtype` with one current scale (amax / largest), in float32."""
    xf = x.float()
    s = xf.abs().amax().clamp_min(1e-12) / largest
    return (xf / s).to(dtype).float() * s


class Fp8Linear(torch.autograd.Function):
    """y = x W^T with both operands fake-quantized to e4m3; backward: the output
    gradient in e5m2, x and W in e4m3 (the HYBRID format)."""

    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, w)
        ctx.shape = x.shape
        e4 = torch.float8_e4m3fn
        y = fake_fp8(x2, e4, 448.0) @ fake_fp8(w, e4, 448.0).t()
        return y.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g):
        x2, w = ctx.saved_tensors
        e4 = torch.float8_e4m3fn
        gq = fake_fp8(g.reshape(-1, g.shape[-1]), torch.float8_e5m2, 57344.0)
        dx = (gq @ fake_fp8(w, e4, 448.0)).to(g.dtype).reshape(ctx.shape)
        dw = (gq.t() @ fake_fp8(x2, e4, 448.0)).to(w.dtype)
        return dx, dw


def prepare(variant, model):
    """The callable that runs `model` under `variant`."""
    if variant.startswith("sim-fp8"):
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Linear) and (variant == "sim-fp8" or name != "lm_head"):
                mod.forward = (lambda self, x: Fp8Linear.apply(x, self.weight)).__get__(mod)
        return model
    if variant == "torchao":
        from torchao.float8 import convert_to_float8_training
        convert_to_float8_training(model, module_filter_fn=lambda mod, fqn: fqn != "lm_head")
        return model
    if variant.startswith("llmc"):
        torch._dynamo.reset()
        backend = "llmc-fp8" if variant == "llmc-fp8" else "llmc"
        return torch.compile(model, backend="llmc", options=train_llama.llmc_options(backend))
    return model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args, rest = ap.parse_known_args(argv)
    targs = train_llama.parse_args(rest)
    device = torch.device("cuda" if torch.cuda.is_available() and not targs.smoke else "cpu")
    g = torch.Generator(device="cpu").manual_seed(1)
    ids = torch.randint(0, targs.vocab, (targs.batch, targs.seq), generator=g).to(device)
    labels = torch.roll(ids, -1, dims=1)

    def run(model, fwd):
        logits = fwd(ids).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        loss.backward()
        grads = {n: p.grad.detach().float().clone()
                 for n, p in model.named_parameters() if p.grad is not None}
        return float(loss), logits.detach().float(), grads

    ref_model = train_llama.build_model(targs, device, torch.bfloat16).float()
    ref_loss, ref_logits, ref_grads = run(ref_model, ref_model)
    del ref_model
    out = {"args": vars(targs), "device": str(device), "reference_loss": ref_loss, "variants": {}}
    os.makedirs(targs.out, exist_ok=True)
    for variant in args.variants.split(","):
        t0 = time.time()
        try:
            model = train_llama.build_model(targs, device, torch.bfloat16)
            loss, logits, grads = run(model, prepare(variant, model))
            # NaN or a missing gradient counts as inf (never as a small error).
            errors = train_llama.gradient_errors(grads, ref_grads)
            ranked = sorted(errors.values())
            logits_rel = float((logits - ref_logits).norm() / ref_logits.norm())
            rec = {"loss_rel": abs(loss - ref_loss) / abs(ref_loss),
                   "logits_rel": logits_rel if logits_rel == logits_rel else float("inf"),
                   "grad_median": statistics.median(ranked), "grad_worst": ranked[-1],
                   "seconds": time.time() - t0, "grad_errors": errors}
            print(variant, json.dumps({k: round(v, 5) for k, v in rec.items()
                                       if k != "grad_errors"}), flush=True)
        except Exception as e:  # one variant failing (torchao missing) must not lose the others
            rec = {"error": f"{type(e).__name__}: {e}"[:300]}
            print(variant, rec, flush=True)
        out["variants"][variant] = rec
        # Written after every variant; the next one starts with this one's
        # model, gradients and compiled sessions freed.
        with open(os.path.join(targs.out, "noise.json"), "w") as f:
            json.dump(out, f, indent=1)
        model = loss = logits = grads = None
        torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
