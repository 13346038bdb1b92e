"""FP8 training (issue 20), on the CPU reference executor.

The fp8 policy quantizes every GEMM operand per tensor with current scaling
(llmc-precision). In backward graphs it follows Transformer Engine's HYBRID
format: the importer marks AOTAutograd's tangents `llm.gradient`, and GEMM
operands computed from them are e5m2 (range), all others e4m3 (precision).

The acceptance run: a tiny LLaMA (plain PyTorch: RMSNorm, RoPE, causal SDPA,
SwiGLU, untied head, cross-entropy in the compiled graph) trains for 200
AdamW steps on a fixed synthetic dataset, its forward and backward graphs
evaluated by the reference executor (`llmc-run --backend=ref`) under the
bf16 and the fp8 policies (per-tensor and row scaling); master weights and
optimizer state stay fp32 in PyTorch. The fp8 losses must stay within 2% of
the bf16 loss at every 20th step (docs/fp8.md has the measured curves), and both must learn: the loss falls from ln(vocab) towards the
entropy rate of the Markov chain the tokens come from.
"""

import math
import subprocess
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from llmc import importer, partition
from test_importer_numerics import LLMC_RUN, _flat, _need_llmc_run, assemble_ref_outputs, \
    import_for, run_ref
from test_training_graphs import PlainLlama

LLMC_OPT = LLMC_RUN.parent / "llmc-opt"

VOCAB, SEQ, BATCH, STEPS = 64, 32, 4, 200


class _WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, targets):
        logits = self.model(tokens)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class _OnReference(nn.Module):
    """Stands in for one llmc partition: evaluates it with
    `llmc-run --backend=ref --precision=<policy>` on every call."""

    def __init__(self, gm, name, flags, texts):
        super().__init__()
        self.gm, self.name, self.flags, self.texts = gm, name, flags, texts
        self.res = None
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.tuple_out = isinstance(out_node.args[0], (tuple, list))
        self.metas = [importer._meta(o) for o in _flat(out_node.args[0])]

    def forward(self, *args):
        args = list(args)
        if self.res is None:
            self.res = import_for(self.gm, args, self.name)
            self.texts[self.name] = self.res.text
        got = run_ref(self.res, args, flags=self.flags)
        outs = assemble_ref_outputs(self.res, got,
                                    [getattr(m, "shape", None) for m in self.metas], args)
        outs = [o.to(m.dtype) if isinstance(o, torch.Tensor) and m is not None else o
                for o, m in zip(outs, self.metas)]
        return tuple(outs) if self.tuple_out else outs[0]


def _reference_backend(flags, texts, kinds):
    """aot_autograd with the backend's partitioner and decompositions, every
    llmc partition evaluated by the reference executor with the llmc-run
    `flags` (the precision policy)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from llmc.backend import _decompositions, _partition_fn

    def compiler(kind):
        def comp(gm, example_inputs):
            fused, names, _ = partition.partition(gm, kind)
            for sub in names:
                setattr(fused, sub, _OnReference(getattr(fused, sub), f"{kind}_{sub}",
                                                 flags, texts))
            fused.recompile()
            kinds.append(kind)
            return make_boxed_func(fused.forward)
        return comp

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        partition_fn=_partition_fn(), decompositions=_decompositions())


def _markov_chain():
    """The fixed first-order Markov chain the tokens come from: [VOCAB, VOCAB]
    transition probabilities, and its entropy rate in nats (the lowest loss
    a model can reach on it; ln(VOCAB) is a uniform guess)."""
    g = torch.Generator().manual_seed(20261205)
    probs = torch.softmax(torch.randn(VOCAB, VOCAB, generator=g, dtype=torch.float64) * 3.0, -1)
    stationary = torch.full((VOCAB,), 1.0 / VOCAB, dtype=torch.float64)
    for _ in range(1000):
        stationary = stationary @ probs
    entropy = -(probs * probs.log()).sum(-1)
    return probs, float((stationary * entropy).sum())


def _dataset(steps):
    """`steps` fixed batches of [BATCH, SEQ + 1] tokens drawn from
    _markov_chain (a new batch every step, so that the model learns the
    chain instead of memorizing a few batches)."""
    probs, _ = _markov_chain()
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(steps):
        seq = torch.empty(BATCH, SEQ + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(0, VOCAB, (BATCH,), generator=g)
        for t in range(SEQ):
            seq[:, t + 1] = torch.multinomial(probs[seq[:, t]], 1, generator=g).squeeze(1)
        batches.append(seq)
    return batches


def _train(*flags):
    """Losses of STEPS AdamW steps of the tiny LLaMA with the llmc-run
    `flags` (--precision=...), and the IR of its partitions."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _WithLoss(PlainLlama(vocab=VOCAB, d=64, heads=4, layers=2, max_seq=SEQ))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    texts, kinds = {}, []
    step = torch.compile(model, backend=_reference_backend(list(flags), texts, kinds))
    losses = []
    data = _dataset(STEPS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(STEPS):
            batch = data[i]
            loss = step(batch[:, :-1], batch[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            assert math.isfinite(loss.item()), f"{flags}: step {i}: loss {loss.item()}"
            losses.append(loss.item())
    assert {"forward", "backward"} <= set(kinds), kinds
    return losses, texts


def _with_policy(text, policy):
    r = subprocess.run([str(LLMC_OPT), f"--llmc-precision=policy={policy}"],
                       input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_importer_marks_tangents_and_fp8_quantizes_gradients_to_e5m2():
    """The backward graph's tangent is `llm.gradient`; under fp8 its GEMMs
    read e5m2 gradients next to e4m3 weights and activations."""
    _need_llmc_run()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _WithLoss(PlainLlama(vocab=VOCAB, d=64, heads=4, layers=1, max_seq=SEQ))
    texts, kinds = {}, []
    batch = _dataset(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = torch.compile(model, backend=_reference_backend(["--precision=fp8"], texts,
                                                               kinds))
        step(batch[:, :-1], batch[:, 1:]).backward()
    (fw,) = [t for n, t in texts.items() if n.startswith("forward")]
    (bw,) = [t for n, t in texts.items() if n.startswith("backward")]
    assert "llm.gradient" not in fw
    assert bw.count("llm.gradient") == 1, bw  # the loss's tangent
    fw8, bw8 = _with_policy(fw, "fp8"), _with_policy(bw, "fp8")
    assert "f8E5M2" not in fw8 and "f8E4M3FN" in fw8
    mixed = [line for line in bw8.splitlines()
             if "llm.matmul" in line and "xf8E5M2>" in line and "xf8E4M3FN>" in line]
    # The backward of every linear layer (qkv, o, gate, up, down, head):
    # dX and dW, each with the gradient in e5m2.
    assert len(mixed) >= 12, bw8


def test_fp8_training_loss_tracks_bf16_for_200_steps():
    """Per-tensor and row scaling (fp8_scaling="row") both stay within 2% of
    bf16 at every 20th step."""
    _need_llmc_run()
    bf16, _ = _train("--precision=bf16")
    runs = {"fp8": _train("--precision=fp8"),
            "fp8 row": _train("--precision=fp8", "--fp8-scaling=row")}
    rows = []
    for i in range(0, STEPS, 20):
        rels = {name: abs(losses[i] - bf16[i]) / bf16[i] for name, (losses, _) in runs.items()}
        rows.append(f"step {i:3d}: bf16 {bf16[i]:.4f} "
                    + " ".join(f"{name} {runs[name][0][i]:.4f} ({100 * r:.2f}%)"
                               for name, r in rels.items()))
    report = "\n".join(rows)
    print(report)
    for name, (losses, texts) in runs.items():
        assert any("llm.gradient" in t for t in texts.values()), name
        for i in range(0, STEPS, 20):
            assert abs(losses[i] - bf16[i]) <= 0.02 * bf16[i], f"{name}\n{report}"
    # Every run learned: over the last 20 steps the loss is below the
    # midpoint between a uniform guess (ln VOCAB) and the chain's entropy rate.
    _, entropy_rate = _markov_chain()
    goal = 0.5 * (math.log(VOCAB) + entropy_rate)
    for name, losses in [("bf16", bf16)] + [(n, l) for n, (l, _) in runs.items()]:
        tail = sum(losses[-20:]) / 20
        assert tail < goal, f"{name}: mean loss {tail:.3f} over the last 20 steps, " \
            f"want < {goal:.3f} (entropy rate {entropy_rate:.3f})\n{report}"
