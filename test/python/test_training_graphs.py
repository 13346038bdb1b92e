"""Training graphs in llmc (issue 16), on the CPU: attention, whole steps.

PyTorch's SDPA forward returns its row statistics (logsumexp) when the
backward needs them, and the backward is an op of its own. Both now import
as llm ops (`llm.attention_logsumexp`, `llm.attention_backward`) instead of
staying in PyTorch and splitting the graphs:

- their semantics, evaluated by the CPU reference executor on fresh random
  inputs, equal PyTorch's SDPA forward and backward run in float64;
- llmc-decompose-attention (the path codegen takes) equals those semantics
  for GQA, causal, masks, odd and unequal lengths and rows that see no key;
- the training step of a plain-PyTorch LLaMA, HF LLaMA and HF Mistral is
  one llmc subgraph forward and one backward with nothing kept in PyTorch
  (GPT-2 keeps its dropout), and every partition of the three HF models'
  training graphs matches PyTorch in float64.
"""

import copy
import math
import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import llmc.backend
from conftest import MODELS, capi_or_skip, gpu
from llmc import importer
from test_importer import trace
from test_importer_numerics import LLMC_RUN, TOL, _capture_backend, _check_partitions, \
    _need_llmc_run, check_graph, compare, logical_result, run_ref

aten = torch.ops.aten
LLMC_OPT = LLMC_RUN.parent / "llmc-opt"


# ---------------------------------------------------------------------------
# SDPA forward statistics and backward against PyTorch in float64

def _sdpa_train(causal, scale, with_mask, with_lse=True):
    """out, lse and the gradients of q, k, v through PyTorch's CPU SDPA
    forward and backward ops, as AOTAutograd's graphs call them."""
    def f(q, k, v, do, *mask):
        m = mask[0] if with_mask else None
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=m, scale=scale)
        dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            do, q, k, v, out, lse, 0.0, causal, attn_mask=m, scale=scale)
        return (out, lse, dq, dk, dv) if with_lse else (out, dq, dk, dv)
    return f


# (B, H, Sq, Skv, D, causal, scale, mask shape or None)
SDPA_CASES = {
    "causal_b2_h3_s13_d40": (2, 3, 13, 13, 40, True, None, None),
    "causal_s33_d64_scale": (1, 2, 33, 33, 64, True, 0.3, None),
    "cross_s5_kv11_d24": (2, 2, 5, 11, 24, False, None, None),
    "mask_b2_s9_kv17": (2, 2, 9, 17, 32, False, None, (2, 1, 9, 17)),
    "mask_2d_causal_s16": (1, 4, 16, 16, 16, True, None, (16, 16)),
}


@pytest.mark.parametrize("name", sorted(SDPA_CASES))
def test_sdpa_statistics_and_backward_match_torch(name):
    _need_llmc_run()
    b, h, sq, skv, d, causal, scale, mshape = SDPA_CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    args = [torch.randn(b, h, sq, d), torch.randn(b, h, skv, d),
            torch.randn(b, h, skv, d), torch.randn(b, h, sq, d)]
    if mshape is not None:
        args.append(torch.randn(*mshape))
    gm = trace(_sdpa_train(causal, scale, mshape is not None), *args)
    text = importer.import_graph(gm).text
    assert "llm.attention_logsumexp" in text and "llm.attention_backward" in text, text
    errs = check_graph(gm, args, name)
    assert len(errs) == 5 and all(e is None or e <= TOL[torch.float32] for e in errs.values()), errs


def test_sdpa_row_that_sees_no_key_matches_torch():
    """An additive mask that hides every key from some query rows: their
    output and gradients are 0 in PyTorch and in llmc (the statistics
    differ there by convention: PyTorch's CPU kernel writes 0, llmc +inf as
    FlashAttention's CUDA kernels, so they are not compared)."""
    _need_llmc_run()
    torch.manual_seed(5)
    mask = torch.randn(2, 1, 7, 10)
    mask[:, :, 3] = float("-inf")
    mask[1, :, 5] = float("-inf")
    args = [torch.randn(2, 3, 7, 16), torch.randn(2, 3, 10, 16), torch.randn(2, 3, 10, 16),
            torch.randn(2, 3, 7, 16), mask]
    gm = trace(_sdpa_train(False, None, True, with_lse=False), *args)
    errs = check_graph(gm, args, "masked_rows")
    assert len(errs) == 4 and all(e is None or e <= TOL[torch.float32] for e in errs.values()), errs


def _trace_fake_cuda(fn, shapes, dtype=torch.bfloat16):
    """`fn` traced on fake CUDA tensors (no GPU needed), as the backend sees
    the graphs of a GPU training step."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = [torch.empty(*sh, device="cuda", dtype=dtype) for sh in shapes]
    return make_fx(fn, tracing_mode="real")(*fake)


def _flash_cuda(q, k, v, do):
    out, lse, cq, ck, mq, mk, seed, off, _ = aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, True, scale=0.3)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_backward(
        do, q, k, v, out, lse, cq, ck, mq, mk, 0.0, True, seed, off, scale=0.3)
    return out, lse, seed, off, dq, dk, dv


def _efficient_cuda(q, k, v, do):
    out, lse, seed, off = aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, 0.0, True, scale=0.3)
    dq, dk, dv, _ = aten._scaled_dot_product_efficient_attention_backward(
        do, q, k, v, None, out, lse, seed, off, 0.0, [True, True, True, False], True, scale=0.3)
    return out, lse, seed, off, dq, dk, dv


def _cudnn_cuda(q, k, v, do):
    out, lse, cq, ck, mq, mk, seed, off, _ = aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, True, scale=0.3)
    dq, dk, dv = aten._scaled_dot_product_cudnn_attention_backward(
        do, q, k, v, out, lse, seed, off, None, cq, ck, mq, mk, 0.0, True, scale=0.3)
    return out, lse, seed, off, dq, dk, dv


@pytest.mark.parametrize("kernel", ["flash", "efficient", "cudnn"])
def test_cuda_sdpa_training_ops_import_and_match_torch(kernel):
    """The SDPA forward and backward ops PyTorch emits on CUDA (flash,
    efficient, cuDNN), traced on fake CUDA tensors: all of them import
    (statistics in each kernel's layout, the unused RNG state as
    torch.empty outputs, uint64 for flash), and the reference executor's
    values equal PyTorch's CPU SDPA in float64 on the same bf16 inputs."""
    _need_llmc_run()
    fn = {"flash": _flash_cuda, "efficient": _efficient_cuda, "cudnn": _cudnn_cuda}[kernel]
    shapes = [(2, 4, 13, 64)] * 4
    gm = _trace_fake_cuda(fn, shapes)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            assert importer.check_node(n) is None, f"{n.format_node()}: {importer.check_node(n)}"
    res = importer.import_graph(gm)
    kinds = [k for k, _ in res.outputs]
    assert kinds == ["out", "out", "empty", "empty", "out", "out", "out"], res.outputs
    rng_dtype = torch.uint64 if kernel == "flash" else torch.int64
    assert all(v.dtype == rng_dtype for k, v in res.outputs if k == "empty"), res.outputs
    torch.manual_seed(sum(map(ord, kernel)))
    args = [torch.randn(*sh).to(torch.bfloat16) for sh in shapes]
    got = run_ref(res, args)
    q, k, v, do = (a.to(torch.float64) for a in args)
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=0.3)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        do, q, k, v, out, lse, 0.0, True, scale=0.3)
    lse_all = got[res.outputs[1][1]].reshape(2, 4, -1)
    compare(lse_all[:, :, :13], lse, torch.float32, f"{kernel} logsumexp")
    # The efficient kernel's rows past Sq (padded to 32) hold +inf, as
    # PyTorch's kernel writes them (check=True compares every element).
    assert lse_all.shape[2] == (32 if kernel == "efficient" else 13), lse_all.shape
    assert torch.all(lse_all[:, :, 13:] == math.inf), lse_all[:, :, 13:]
    for (kind, i), want, what in zip([res.outputs[j] for j in (0, 4, 5, 6)], (out, dq, dk, dv),
                                     ("out", "dq", "dk", "dv")):
        # (The efficient kernel's out is laid out [B, S, H, D]: returned in
        # memory order, viewed back.)
        compare(logical_result(res, i, got[i], want.shape), want, torch.bfloat16,
                f"{kernel} {what}")


# ---------------------------------------------------------------------------
# llmc-decompose-attention == the ops' reference semantics

def _ty(shape, et):
    return f"tensor<{'x'.join(map(str, shape))}x{et}>"


def _training_ir(b, sq, skv, hq, hkv, d, et, causal, mask_rows_off):
    """@f(q, k, v, do) -> (lse, dq, dk, dv) with llm.attention's output in
    between; `mask_rows_off`: query rows whose additive mask is -inf for
    every key (rows that see nothing)."""
    q, kv = _ty((b, sq, hq, d), et), _ty((b, skv, hkv, d), et)
    lse = _ty((b, hq, sq), "f32")
    attrs = " {causal}" if causal else ""
    mask = ""
    lines = []
    if mask_rows_off:
        rows = ", ".join(
            "[" + ", ".join("0xFF800000" if i in mask_rows_off else f"{(i * 7 + j) % 5 * 0.25}"
                            for j in range(skv)) + "]" for i in range(sq))
        mty = _ty((1, 1, sq, skv), "f32")
        lines.append(f"  %m = llm.constant dense<[[[{rows}]]]> : {mty}")
        mask = f" mask(%m : {mty})"
    lines += [
        f"  %o = llm.attention %q, %k, %v{mask}{attrs} : {q}, {kv}, {kv}",
        f"  %lse = llm.attention_logsumexp %q, %k{mask}{attrs} : {q}, {kv} -> {lse}",
        f"  %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse{mask}{attrs}"
        f" : {q}, {kv}, {kv}, {q}, {q}, {lse}",
        f"  return %lse, %dq, %dk, %dv : {lse}, {q}, {kv}, {kv}",
    ]
    return (f"func.func @f(%q: {q}, %k: {kv}, %v: {kv}, %do: {q}) -> ({lse}, {q}, {kv}, {kv}) {{\n"
            + "\n".join(lines) + "\n}\n")


def _ref_outputs(path: Path, out: Path, seed: int, inputs=()):
    out.mkdir()
    r = subprocess.run([str(LLMC_RUN), str(path), "--backend=ref", f"--seed={seed}",
                        f"--output-dir={out}"] + [f"--input={x}" for x in inputs],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [np.fromfile(out / f"result{i}.f32", dtype=np.float32) for i in range(4)]


def _decompose(tmp: Path, text: str) -> Path:
    src = tmp / "ops.mlir"
    src.write_text(text)
    dec = tmp / "decomposed.mlir"
    r = subprocess.run([str(LLMC_OPT), str(src), "--llmc-decompose-attention=fused-kernels=false", "-o", str(dec)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "attention_backward" not in dec.read_text()
    return dec


def test_decomposition_keeps_nan_of_a_causally_hidden_key_out():
    """NaN in the value of the last key (seen only by the last query row,
    causal): the rows that do not see it keep finite gradients, and the
    decomposition has NaN exactly where the op's semantics have it."""
    _need_llmc_run()
    b, s, h, d = 1, 6, 2, 16
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(4)]
    arrays[2][0, s - 1, :, 0] = np.nan
    with tempfile.TemporaryDirectory(prefix="llmc_attn_") as tmp:
        tmp = Path(tmp)
        text = _training_ir(b, s, s, h, h, d, "f32", True, set())
        dec = _decompose(tmp, text)
        inputs = []
        for i, a in enumerate(arrays):
            np.save(tmp / f"in{i}.npy", a)
            inputs.append(f"arg{i}={tmp / f'in{i}.npy'}")
        want = _ref_outputs(tmp / "ops.mlir", tmp / "want", 1, inputs)
        got = _ref_outputs(dec, tmp / "got", 1, inputs)
    dq_want = want[1].reshape(b, s, h, d)
    assert np.isnan(dq_want[0, s - 1]).all() and not np.isnan(dq_want[0, :s - 1]).any()
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"result {i}: NaN positions differ"
        fin = np.isfinite(w)
        err = np.linalg.norm(g[fin].astype(np.float64) - w[fin]) / max(np.linalg.norm(w[fin]), 1e-30)
        assert err <= TOL[torch.float32], f"result {i}: relative L2 error {err:.3e}"


@pytest.mark.parametrize("sq,skv", [(4, 0), (0, 5)])
def test_decomposition_of_empty_attention(sq, skv):
    """No (query, key) pair: the statistics are +inf, every gradient 0."""
    _need_llmc_run()
    with tempfile.TemporaryDirectory(prefix="llmc_attn_") as tmp:
        tmp = Path(tmp)
        text = _training_ir(2, sq, skv, 4, 2, 16, "f32", False, set())
        dec = _decompose(tmp, text)
        assert "llm.matmul" not in dec.read_text()
        got = _ref_outputs(dec, tmp / "got", 1)
        want = _ref_outputs(tmp / "ops.mlir", tmp / "want", 1)
    assert got[0].size == 2 * 4 * sq and np.isposinf(got[0]).all()
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    assert all((g == 0).all() for g in got[1:])


# (B, Sq, Skv, Hq, Hkv, D, element type, causal, rows that see no key)
DECOMPOSE_CASES = {
    "gqa_causal_f32": (2, 13, 13, 4, 2, 40, "f32", True, ()),
    "gqa4_cross_f32": (1, 5, 11, 8, 2, 16, "f32", False, ()),
    "mha_causal_kv_longer_f32": (2, 7, 19, 2, 2, 24, "f32", True, ()),
    "masked_rows_f32": (1, 6, 9, 2, 1, 16, "f32", False, (0, 4)),
    "gqa_causal_bf16": (2, 17, 17, 6, 3, 64, "bf16", True, ()),
}


@pytest.mark.parametrize("name", sorted(DECOMPOSE_CASES))
def test_decomposition_equals_reference_semantics(name):
    _need_llmc_run()
    b, sq, skv, hq, hkv, d, et, causal, rows_off = DECOMPOSE_CASES[name]
    with tempfile.TemporaryDirectory(prefix="llmc_attn_") as tmp:
        tmp = Path(tmp)
        src = tmp / "ops.mlir"
        src.write_text(_training_ir(b, sq, skv, hq, hkv, d, et, causal, set(rows_off)))
        dec = tmp / "decomposed.mlir"
        r = subprocess.run([str(LLMC_OPT), str(src), "--llmc-decompose-attention=fused-kernels=false", "-o", str(dec)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        text = dec.read_text()
        assert "attention_backward" not in text and "attention_logsumexp" not in text, text
        seed = sum(map(ord, name))
        want = _ref_outputs(src, tmp / "want", seed)
        got = _ref_outputs(dec, tmp / "got", seed)
    # The decomposition rounds P and dS to the element type for the
    # products, as FlashAttention-2 does: bf16's tolerance for bf16.
    tol = TOL[torch.bfloat16 if et == "bf16" else torch.float32]
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"result {i}: NaN positions differ"
        assert not np.isnan(w).any(), f"result {i}: NaN in the reference"
        fin = np.isfinite(w)
        assert np.array_equal(g[~fin], w[~fin]), f"result {i}: inf positions differ"
        err = np.linalg.norm(g[fin].astype(np.float64) - w[fin]) / max(np.linalg.norm(w[fin]), 1e-30)
        assert err <= tol, f"result {i}: relative L2 error {err:.3e} > {tol}"
        assert np.abs(w[fin]).max() > 0, f"result {i} is all zeros: the case checks nothing"
    if rows_off:
        lse = want[0].reshape(b, hq, sq)
        assert np.isposinf(lse[:, :, list(rows_off)]).all()
        dq = got[1].reshape(b, sq, hq, d)
        assert (dq[:, list(rows_off)] == 0).all(), "a row that sees no key has no gradient"


# ---------------------------------------------------------------------------
# Whole training steps: one subgraph forward, one backward

class _RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = _RMSNorm(d), _RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(d, -1)
        q, k, v = [z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v)]

        def rope(z):
            lo, hi = z.chunk(2, -1)
            return z * cos + torch.cat([-hi, lo], -1) * sin
        y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class PlainLlama(nn.Module):
    """LLaMA as users write it in plain PyTorch: RMSNorm by hand, RoPE,
    F.scaled_dot_product_attention(is_causal=True), SwiGLU, untied head."""

    def __init__(self, vocab=512, d=64, heads=4, layers=2, max_seq=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.norm = _RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        angles = torch.arange(max_seq)[:, None] * 10000.0 ** (-torch.arange(0, hd, 2) / hd)
        angles = torch.cat([angles, angles], -1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, self.cos[:t], self.sin[:t])
        return self.head(self.norm(x))


def test_plain_llama_training_step_is_one_subgraph_each_way():
    torch.manual_seed(0)
    m = PlainLlama()
    x = torch.randint(0, 512, (2, 16))
    llmc.backend.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = torch.compile(m, backend="llmc")(x)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
    reports = {r.graph.split("_", 1)[1]: r for r in llmc.backend.reports()}
    assert set(reports) == {"forward", "backward"}, list(reports)
    for kind, r in reports.items():
        assert r.num_partitions == 1 and not r.unsupported, f"{kind}: {r}"
        assert r.compiles > 0 and not r.compile_failures, f"{kind}: {r}"


def _capture_plain_llama_step():
    """The llmc partitions ([_Recorder]) and graph kinds of one PlainLlama
    training step (seed 0, tokens [2, 16]) through the capture backend."""
    torch.manual_seed(0)
    m = PlainLlama()
    x = torch.randint(0, 512, (2, 16))
    sink, kinds = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = torch.compile(m, backend=_capture_backend(sink, kinds))(x)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
    return sink, kinds


def test_plain_llama_training_partitions_match_torch():
    """The forward and backward subgraphs, with every attention op in them,
    against PyTorch in float64 through the reference executor."""
    _need_llmc_run()
    sink, kinds = _capture_plain_llama_step()
    assert {"forward", "backward"} <= set(kinds), kinds
    targets = {str(n.target) for rec in sink for n in rec.eager.graph.nodes}
    assert any("attention_for_cpu_backward" in t for t in targets), targets
    _check_partitions(sink)


def _capture_hf_training_step(name):
    """The llmc partitions ([_Recorder]) of one training step of the HF model
    `name` (loss in the graph) through the capture backend. GPT-2 without
    dropout: llmc's masks are not PyTorch's (its dropout is checked on its
    own below)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = MODELS[name](**({"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
                        if name == "gpt2" else {}))
    x = torch.randint(0, 1000, (2, 11))
    sink, kinds = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(m, backend=_capture_backend(sink, kinds))(
            x, labels=x, use_cache=False).loss.backward()
    assert {"forward", "backward"} <= set(kinds), kinds
    return sink


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hf_training_partitions_match_torch(name):
    """Every llmc partition of the HF models' training forward and backward
    graphs (attention forward statistics and backward, LayerNorm statistics,
    the label shift, mask lookups) against PyTorch in float64."""
    _need_llmc_run()
    _check_partitions(_capture_hf_training_step(name))


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_mincut_partition_saves_less_and_matches_torch(name, monkeypatch):
    """LLMC_PARTITION=mincut (Inductor's min-cut rematerialization): the
    forward hands the backward fewer saved values than with the default
    partition, and every llmc partition of both graphs still matches
    PyTorch in float64. An unknown value is an error naming the choices."""
    _need_llmc_run()
    saved = {}
    for how in ("default", "mincut"):
        monkeypatch.setenv("LLMC_PARTITION", how)
        sink = _capture_hf_training_step(name)
        bw = [rec for rec in sink if rec.name.startswith("backward")]
        saved[how] = sum(len([n for n in rec.eager.graph.nodes if n.op == "placeholder"])
                         for rec in bw)
        if how == "mincut":
            _check_partitions(sink)
    assert saved["mincut"] < saved["default"], saved
    monkeypatch.setenv("LLMC_PARTITION", "sometimes")
    from llmc.backend import _partition_fn
    with pytest.raises(ValueError, match="LLMC_PARTITION='sometimes': expected 'default' or 'mincut'"):
        _partition_fn()


def test_default_partition_saves_each_forward_value_once(monkeypatch):
    """The default partition runs AOTAutograd's CSE of the joint graph first:
    the q, k and v projections' three identical `view`s of one normalized
    activation reach the backward as one saved input, not three (each of
    which an fp8 backward would quantize on its own). Without the CSE
    (torch._functorch.config.cse off) the same step saves more, which is
    what the count below would show if the CSE were lost."""
    monkeypatch.setenv("LLMC_PARTITION", "default")
    from torch._functorch import config as functorch_config

    def forward_outputs_and_backward_inputs():
        torch._dynamo.reset()
        sink, _ = _capture_plain_llama_step()
        fw = [rec for rec in sink if rec.name.startswith("forward")]
        bw = [rec for rec in sink if rec.name.startswith("backward")]
        assert fw and bw, [rec.name for rec in sink]
        outs = [a for rec in fw for n in rec.eager.graph.nodes if n.op == "output"
                for a in n.all_input_nodes]
        ins = sum(len([n for n in rec.eager.graph.nodes if n.op == "placeholder"]) for rec in bw)
        return outs, ins

    def saved_bytes(outs):
        return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in outs
                   if isinstance(n.meta.get("val"), torch.Tensor))

    outs, ins = forward_outputs_and_backward_inputs()
    keys = [(str(n.target), tuple(map(str, n.args)), str(n.kwargs)) for n in outs
            if n.op == "call_function"]
    repeated = {k for k in keys if keys.count(k) > 1}
    assert not repeated, f"forward outputs computed twice: {sorted(repeated)}"
    with functorch_config.patch(cse=False):
        outs_raw, ins_raw = forward_outputs_and_backward_inputs()
    assert ins < ins_raw, (ins, ins_raw)
    # The CSE may let the backward read a forward value it recomputed; the
    # forward must not hand over more bytes for it.
    assert saved_bytes(outs) < saved_bytes(outs_raw), (saved_bytes(outs), saved_bytes(outs_raw))


def test_partition_option_is_checked_and_overrides_the_environment(monkeypatch):
    """options={"partition": ...} chooses the partitioner per torch.compile
    call (LLMC_PARTITION only when the option is not given); a value outside
    PARTITIONS is a ValueError naming the choices, not a silent default."""
    from llmc.backend import Options
    monkeypatch.setenv("LLMC_PARTITION", "mincut")
    assert Options.from_dict({}).partition == "mincut"
    assert Options.from_dict({"partition": "default"}).partition == "default"
    monkeypatch.setenv("LLMC_PARTITION", "default")
    assert Options.from_dict({"partition": "mincut"}).partition == "mincut"
    with pytest.raises(ValueError, match="partition .* must be one of default, mincut, got 'greedy'"):
        Options.from_dict({"partition": "greedy"})


def test_hf_backward_takes_the_forwards_causal_mask_as_causal():
    """HF LLaMA under torch.compile builds its causal mask in the forward
    graph and saves it for the backward, where it arrives as an input. The
    forward proves it causal (a constant subgraph) and the backward's
    attention reads the same tensor (same node name, shape and attention
    shape), so both become is_causal (the fused backward kernel's causal
    path instead of a masked one). The gradients (run by PyTorch on the
    rewritten graphs here, on the CPU) equal eager's."""
    torch.manual_seed(0)
    m = MODELS["llama"]()
    ref = copy.deepcopy(m)
    x = torch.randint(0, 1000, (2, 9))
    llmc.backend.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(m, backend="llmc")(x, labels=x, use_cache=False).loss.backward()
        ref(x, labels=x, use_cache=False).loss.backward()
    reports = {r.graph.split("_", 1)[1]: r for r in llmc.backend.reports()}
    for kind in ("forward", "backward"):
        assert "2 constant causal attention mask(s) folded into is_causal" in reports[kind].notes, \
            f"{kind}: {reports[kind]}"
    # The backward's mask is the forward's saved output (an input there), not
    # a recomputed constant: the name link folded it.
    assert any("(an input): the causal mask the forward proved" in n
               for n in reports["backward"].notes), str(reports["backward"])
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        err = float((p.grad - q.grad).norm() / q.grad.norm())
        assert err <= 1e-5, f"{name}: relative error {err:.3e}"


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_hf_training_step_is_one_subgraph_each_way(name):
    """HF LLaMA and Mistral with the loss in the model (label shift by
    F.pad, packed-sequence mask bookkeeping by cumsum and two-index
    lookups, attention statistics and backward): nothing stays in PyTorch."""
    torch.manual_seed(0)
    m = MODELS[name]()
    x = torch.randint(0, 1000, (2, 9))
    llmc.backend.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(m, backend="llmc")(x, labels=x, use_cache=False).loss.backward()
    reports = {r.graph.split("_", 1)[1]: r for r in llmc.backend.reports()}
    assert set(reports) == {"forward", "backward"}, list(reports)
    for kind, r in reports.items():
        assert r.num_partitions == 1 and not r.unsupported, f"{kind}: {r}"
        assert r.compiles > 0 and not r.compile_failures, f"{kind}: {r}"


def test_gpt2_training_graphs_are_whole_dropout_included():
    """GPT-2 trains with dropout (p = 0.1 by default): native_dropout is
    llm.dropout_mask on a per-call seed, so on the CPU trace nothing stays
    in PyTorch. (HF's GPT-2 loss makes Dynamo break the graph: two graphs
    each way, one llmc subgraph each. On a GPU the attention dropout goes
    into PyTorch's SDPA kernels instead, which llmc does not take yet.)"""
    torch.manual_seed(0)
    m = MODELS["gpt2"]()
    x = torch.randint(0, 1000, (2, 9))
    llmc.backend.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(m, backend="llmc")(x, labels=x, use_cache=False).loss.backward()
    reports = llmc.backend.reports()
    assert {r.graph.split("_", 1)[1] for r in reports} == {"forward", "backward"}
    for r in reports:
        assert r.num_partitions == 1 and not r.unsupported, str(r)
        assert r.compiles > 0 and not r.compile_failures, str(r)


def _philox_x(c, k):
    """Philox4x32-10's first output word (Salmon et al. 2011)."""
    c, k = list(c), list(k)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
        k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
    return c[0]


def test_dropout_is_a_philox_keep_mask_scaled_by_one_over_keep():
    """native_dropout(x, 0.1, True) through the reference executor (seed 0):
    the mask is Philox4x32-10's (Random123's known answers hold for this
    copy), about 90% kept, out = x * keep / 0.9; two sites get different
    masks; without training every element is kept."""
    _need_llmc_run()
    assert _philox_x([0, 0, 0, 0], [0, 0]) == 0x6627E8D5
    assert _philox_x([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
                     [0xA4093822, 0x299F31D0]) == 0xD16CFE09
    torch.manual_seed(3)
    x = torch.randn(40, 500)
    def two_sites(t):
        a, ka = aten.native_dropout(t, 0.1, True)
        b, kb = aten.native_dropout(t, 0.1, True)
        return a, ka, b, kb
    gm = trace(two_sites, x)
    res = importer.import_graph(gm)
    assert res.rng_seed and "%rng_seed: tensor<i64>" in res.text, res.text
    got = run_ref(res, [x])
    out_a, keep_a, out_b, keep_b = (got[i] for _, i in res.outputs)
    keep_a, keep_b = keep_a.reshape(-1).bool(), keep_b.reshape(-1).bool()
    threshold = math.ceil(0.1 * 2 ** 24)
    want = torch.tensor([(_philox_x([i, 0, 0, 0], [0, 0]) >> 8) >= threshold
                         for i in range(2000)])
    assert torch.equal(keep_a[:2000], want)
    n = keep_a.numel()
    assert abs(int(keep_a.sum()) - 0.9 * n) <= 5 * math.sqrt(n * 0.09), int(keep_a.sum())
    assert not torch.equal(keep_a, keep_b)  # stream 0 and stream 1
    torch.testing.assert_close(out_a.reshape(-1), (x.reshape(-1) * keep_a) / 0.9,
                               rtol=1e-6, atol=0)
    off = importer.import_graph(trace(lambda t: aten.native_dropout(t, 0.3, False), x))
    assert not off.rng_seed and "llm.dropout_mask" not in off.text


def test_dropout_scales_in_float32_like_pytorchs_cuda_kernel():
    """bf16 dropout: out = bf16(x * keep * float32(1/0.9)), one rounding (a
    bf16 scale would be 1.109375 and bias the mean by 0.15%); p beyond
    1 - 2^-24, where the 24-bit threshold keeps nothing, is refused."""
    _need_llmc_run()
    torch.manual_seed(4)
    x = torch.randn(64, 256).to(torch.bfloat16)
    res = importer.import_graph(trace(lambda t: aten.native_dropout(t, 0.1, True), x))
    out, keep = (run_ref(res, [x])[i] for _, i in res.outputs)
    keep = keep.reshape(x.shape).bool()
    want = (x.float() * keep * torch.tensor(1 / 0.9, dtype=torch.float32)).to(torch.bfloat16)
    assert torch.equal(out.reshape(x.shape).to(torch.bfloat16), want)
    node = next(n for n in trace(lambda t: aten.native_dropout(t, 1 - 2 ** -30, True), x).graph.nodes
                if n.op == "call_function")
    assert "p =" in (importer.check_node(node) or "")


# ---------------------------------------------------------------------------
# Compiled optimizer steps: torch.compile(opt.step)

def _trained(opt_factory):
    torch.manual_seed(0)
    m = PlainLlama(layers=1)
    x = torch.randint(0, 512, (2, 16))
    opt = opt_factory(m.parameters())
    F.cross_entropy(m(x).flatten(0, 1), x.flatten()).backward()
    return m, opt


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1, foreach=True),
    "adam_amsgrad_free": lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True,
                                              weight_decay=1e-4, foreach=True),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_optimizer_step_is_one_subgraph(name):
    """The _foreach_* ops of torch.optim's foreach implementations become
    elementwise llm ops per parameter: the step is one llmc subgraph with
    nothing kept in PyTorch, and three compiled steps leave the parameters
    where three eager steps do."""
    m, opt = _trained(OPTIMIZERS[name])
    ref, ref_opt = _trained(OPTIMIZERS[name])
    llmc.backend.reset()
    step = torch.compile(opt.step, backend="llmc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            step()
            ref_opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    reports = llmc.backend.reports()
    assert reports
    for r in reports:
        assert r.num_partitions == 1 and not r.unsupported, str(r)
        assert r.compiles > 0 and not r.compile_failures, str(r)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_optimizer_step_updates_in_place(name, tmp_path):
    """Every parameter and every state tensor the step mutates (momenta,
    AdamW's moments and step counters) is donated with the result it
    becomes (llm.aliasing_output), and the compiled executable writes each
    over its input (alias_input): AOTAutograd's copy-back is then a copy of
    a tensor onto itself, no device copy (the 1B step's 4.2 ms of copies).
    Two steps: SGD's momentum buffers are made by the first (the second
    step's graph reads them)."""
    compile_tool = LLMC_RUN.parent / "llmc-compile"
    if not compile_tool.exists():
        pytest.skip(f"{compile_tool} not built")
    m, opt = _trained(OPTIMIZERS[name])
    llmc.backend.reset()
    step = torch.compile(opt.step, backend="llmc", options={"dump_dir": str(tmp_path)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step()
        step()
    mutated = sum(1 for _ in m.parameters()) + sum(
        1 for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor))
    rep = llmc.backend.last_report()
    assert (f"llmc_0: {mutated} mutated input(s) donated for an in-place update "
            "(llm.aliasing_output): written in place where llmc's kernel is their only reader"
            ) in rep.notes, str(rep)
    dump = max(tmp_path.glob("g*_inference.llmc_0.mlir"),
               key=lambda p: int(p.name[1:p.name.index("_")]))
    assert dump.read_text().count("llm.aliasing_output") == mutated
    exe = subprocess.run([str(compile_tool), str(dump), "--emit=executable-dump"],
                         capture_output=True, text=True, check=True).stdout
    aliased = [line for line in exe.splitlines()
               if line.startswith("output ") and "alias_input=-1" not in line]
    assert len(aliased) == mutated, exe[:4000]


def test_no_in_place_update_when_the_old_value_is_returned(tmp_path):
    """A buffer updated in place whose old value (a clone, which the import
    reads as the argument itself) is also returned: the update is not
    written over the buffer (no llm.aliasing_output); without the clone it
    is (found by review)."""
    class Momentum(nn.Module):
        def __init__(self, keep_old):
            super().__init__()
            self.keep_old = keep_old
            self.register_buffer("buf", torch.randn(64))

        def forward(self, v):
            old = self.buf.clone()
            self.buf.mul_(0.9).add_(v)
            return (old, self.buf * 2) if self.keep_old else self.buf * 2

    for keep_old in (True, False):
        d = tmp_path / str(keep_old)
        m = Momentum(keep_old)
        want_old = m.buf.clone()
        llmc.backend.reset()
        cm = torch.compile(m, backend="llmc", dynamic=False, options={"dump_dir": str(d)})
        v = torch.randn(64)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = cm(v)
        if keep_old:
            torch.testing.assert_close(out[0], want_old)
        [dump] = d.glob("g*.llmc_0.mlir")
        assert ("llm.aliasing_output" in dump.read_text()) == (not keep_old), dump.read_text()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_optimizer_step_matches_torch(name):
    """The step's graph (new parameters and optimizer state as outputs)
    through the reference executor against PyTorch in float64."""
    _need_llmc_run()
    m, opt = _trained(OPTIMIZERS[name])
    sink, kinds = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = torch.compile(opt.step, backend=_capture_backend(sink, kinds))
        step()
        step()
    assert sink, kinds
    targets = {str(n.target) for rec in sink for n in rec.eager.graph.nodes}
    assert any("_foreach_" in t for t in targets), targets
    _check_partitions(sink)


def _ref_of(fn, args):
    gm = trace(fn, *args)
    res = importer.import_graph(gm)
    got = run_ref(res, args)
    return [got[i] for kind, i in res.outputs if kind == "out"]


def test_foreach_bf16_rounds_once_like_pytorch():
    """PyTorch's foreach kernels compute in float32 and round once to bf16;
    so does the import (rounding every step in bf16 made a fifth of a bf16
    AdamW step's values differ): lerp, mul, addcmul and addcdiv are
    bit-identical to PyTorch's bf16 results."""
    _need_llmc_run()
    torch.manual_seed(7)
    bf = torch.bfloat16
    a, b, c = (torch.randn(4, 1024).to(bf) for _ in range(3))
    c = c.abs() + 0.5
    cases = {
        "lerp": (lambda x, y: torch._foreach_lerp([x], [y], 0.1), (a, b)),
        "mul": (lambda x: torch._foreach_mul([x], 0.999), (a,)),
        "addcmul": (lambda x, y, z: torch._foreach_addcmul([x], [y], [z], 1e-3), (a, b, c)),
        "addcdiv": (lambda x, y, z: torch._foreach_addcdiv([x], [y], [z], -1e-3), (a, b, c)),
    }
    for name, (fn, args) in cases.items():
        want = fn(*args)[0]
        got = _ref_of(fn, list(args))[0].reshape(want.shape).to(bf)
        mismatches = int((got.float() != want.float()).sum())
        assert mismatches == 0, f"{name}: {mismatches} of {want.numel()} bf16 values differ"


def test_foreach_lerp_uses_pytorchs_formula_for_large_weights():
    """w >= 0.5: end - (end - self) * (1 - w), so w = 1 gives end exactly
    (Adam with beta1 = 0), as torch.lerp."""
    _need_llmc_run()
    torch.manual_seed(8)
    start, end = torch.randn(4096) * 1e3, torch.randn(4096) * 1e-3
    for w in (1.0, 0.9):
        got = _ref_of(lambda x, y: torch._foreach_lerp([x], [y], w), [start, end])[0]
        want = torch.lerp(start.double(), end.double(), w)
        if w == 1.0:
            assert torch.equal(got.double(), end.double())
        compare(got, want, torch.float32, f"lerp w={w}")


def test_two_index_lookup_out_of_range_is_an_error_not_another_row():
    """P[[0, 1], [2, 7]] on a 4x6 tensor: PyTorch raises; the linearized
    gather must not read P[2, 1] instead."""
    _need_llmc_run()
    from test_importer_numerics import RefRunError
    p = torch.arange(24.0).view(4, 6)
    rows, cols = torch.tensor([0, 1]), torch.tensor([2, 7])
    with pytest.raises(RefRunError, match="out of range"):
        _ref_of(lambda t, i, j: t[i, j], [p, rows, cols])
    ok = _ref_of(lambda t, i, j: t[i, j], [p, rows, torch.tensor([2, -6])])[0]
    assert ok.tolist() == [2.0, 6.0]


def test_any_forms_that_codegen_refuses_stay_in_pytorch():
    """any over no dimension is the elementwise test; over an empty one or
    over dimensions that are not adjacent it is refused per node (not a
    compile failure of the whole subgraph)."""
    from llmc import partition
    x = torch.randn(3, 4, 5)
    gm = trace(lambda t: torch.any(t, dim=()), x)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert importer.check_node(node) is None and partition._codegen_limit(node) is None
    res = importer.import_graph(gm)
    assert "llm.reduce_max" not in res.text, res.text
    for fn, arg, why in ((lambda t: t.any(-1), torch.randn(3, 0), "empty"),
                         (lambda t: torch.any(t, dim=(0, 2)), x, "not adjacent")):
        node = next(n for n in trace(fn, arg).graph.nodes if n.op == "call_function")
        reason = importer.check_node(node) or partition._codegen_limit(node)
        assert reason and why in reason, reason


# ---------------------------------------------------------------------------
# GPU: the same steps executed by llmc (skipped without a GPU)

def _grads_close(m, ref, rtol, atol):
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.float(), q.grad.float(), rtol=rtol, atol=atol,
                                   msg=lambda s, name=name: f"grad of {name}: {s}")


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_plain_llama_step_runs_in_llmc_and_matches_eager(dtype):
    """Forward and backward of the plain-PyTorch LLaMA run as one llmc
    subgraph each on the GPU (attention backward through the decomposition),
    loss and every gradient close to eager's (f32 1e-4, bf16 2e-2)."""
    capi_or_skip()
    torch.manual_seed(0)
    m = PlainLlama().cuda().to(dtype)
    ref = copy.deepcopy(m)
    x = torch.randint(0, 512, (2, 64), device="cuda")
    llmc.backend.reset()
    loss = F.cross_entropy(torch.compile(m, backend="llmc")(x).float().flatten(0, 1), x.flatten())
    loss.backward()
    ref_loss = F.cross_entropy(ref(x).float().flatten(0, 1), x.flatten())
    ref_loss.backward()
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(loss, ref_loss, rtol=tol, atol=tol)
    _grads_close(m, ref, rtol=tol, atol=tol)
    for r in llmc.backend.reports():
        assert r.num_partitions == 1 and not r.unsupported, str(r)
        assert r.llmc_runs > 0 and r.eager_runs == 0, str(r)


@gpu
def test_gpu_compiled_adamw_steps_match_eager(updated_outputs):
    """Three compiled AdamW steps on the GPU (the foreach ops in llmc) leave
    the parameters and optimizer state where eager's do, written in place:
    every input donated for the update is returned as its own output."""
    capi_or_skip()
    def make():
        torch.manual_seed(0)
        m = PlainLlama(layers=1).cuda()
        return m, torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    m, opt = make()
    ref, ref_opt = make()
    x = torch.randint(0, 512, (2, 16), device="cuda")
    llmc.backend.reset()
    step = torch.compile(opt.step, backend="llmc")
    for _ in range(3):
        for model, o, run in ((m, opt, step), (ref, ref_opt, ref_opt.step)):
            o.zero_grad()
            F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
            run()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    for st, ref_st in zip(opt.state.values(), ref_opt.state.values()):
        # (The compiled step keeps `step` on the GPU, eager on the CPU.)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(st[key].cpu(), ref_st[key].cpu(), rtol=1e-5, atol=1e-6)
    rep = llmc.backend.last_report()
    assert rep.llmc_runs > 0 and rep.eager_runs == 0, str(rep)
    assert updated_outputs and all(updated_outputs), updated_outputs


def _autocast_loss(fwd, x, dtype):
    """The next-token loss of a CUDA forward under autocast to `dtype`."""
    with torch.autocast("cuda", dtype=dtype):
        return F.cross_entropy(fwd(x).float().flatten(0, 1), x.flatten())


@gpu
def test_gpu_bf16_autocast_training_with_in_place_adamw_matches_eager(updated_outputs):
    """Five steps of a bf16-autocast forward (its weight casts are parameter
    preparation, run once per parameter set) and backward through llmc with
    a compiled AdamW step that writes the f32 master weights in place: the
    in-place writes must renew the forward's prepared weights every step
    (AOTAutograd's copy-back of a tensor onto itself bumps its version
    counter), so the losses follow eager's; stale bf16 weights would repeat
    the first step's loss."""
    capi_or_skip()
    def run(compiled):
        torch.manual_seed(0)
        m = PlainLlama(layers=1).cuda()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
        fwd = torch.compile(m, backend="llmc") if compiled else m
        step = torch.compile(opt.step, backend="llmc") if compiled else opt.step
        x = torch.randint(0, 512, (2, 32), device="cuda")
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = _autocast_loss(fwd, x, torch.bfloat16)
            loss.backward()
            step()
            # An inference graph: its bf16 weight casts are prepared once per
            # parameter set (the parameter guard), so they must see the step.
            with torch.no_grad():
                losses.append((float(loss), float(_autocast_loss(fwd, x, torch.bfloat16))))
        return losses
    llmc.backend.reset()
    got = run(True)
    want = run(False)
    assert len(set(round(v, 4) for _, v in want)) == len(want), want  # the loss moves
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert abs(a - b) <= 1e-2 * abs(b), (got, want)
    assert any(r.graph.endswith("_inference") and r.llmc_runs for r in llmc.backend.reports()), \
        [str(r) for r in llmc.backend.reports()]
    assert updated_outputs and all(updated_outputs), updated_outputs


@gpu
def test_gpu_check_mode_reruns_an_in_place_step_on_its_old_inputs():
    """options={"check": True} compares every llmc result with PyTorch's on
    the same inputs: for a step that llmc writes in place, on the inputs'
    values before the call (an optimizer step is not idempotent)."""
    capi_or_skip()
    torch.manual_seed(0)
    m = PlainLlama(layers=1).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    x = torch.randint(0, 512, (2, 16), device="cuda")
    llmc.backend.reset()
    step = torch.compile(opt.step, backend="llmc", options={"check": True})
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(m(x).flatten(0, 1), x.flatten()).backward()
        step()  # raises CheckMismatch on a mismatch
    rep = llmc.backend.last_report()
    assert rep.llmc_runs == 3 and rep.eager_runs == 0, str(rep)


@gpu
def test_gpu_old_value_of_an_updated_buffer_is_returned_as_it_was():
    """A graph that returns a clone of a buffer and updates the buffer in
    place: the clone is the buffer's old value, so the update is not written
    over the buffer (no llm.aliasing_output; found by review)."""
    capi_or_skip()
    buf = torch.randn(4096, device="cuda")
    ref = buf.clone()

    @torch.compile(backend="llmc")
    def f(v):
        with torch.no_grad():
            old = buf.clone()
            buf.mul_(0.9).add_(v)
            return old

    v = torch.randn(4096, device="cuda")
    old = f(v)
    torch.testing.assert_close(old, ref)
    torch.testing.assert_close(buf, ref * 0.9 + v)


@gpu
def test_gpu_fp16_grad_scaler_skips_the_steps_eager_skips():
    """fp16 autocast with torch.amp.GradScaler for 20 steps, a loss scale
    that starts too high (2^24) and grows every 2 good steps, so fp16
    gradients overflow and steps are skipped now and then (a learning rate
    alone did not overflow on the H200): llmc's forward and backward give
    the same sequence of scales (so the same skipped steps) as eager."""
    capi_or_skip()
    def run(compiled):
        torch.manual_seed(0)
        m = PlainLlama().cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 24, growth_interval=2)
        fwd = torch.compile(m, backend="llmc") if compiled else m
        x = torch.randint(0, 512, (2, 32), device="cuda")
        scales = []
        for _ in range(20):
            opt.zero_grad()
            scaler.scale(_autocast_loss(fwd, x, torch.float16)).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        return scales
    llmc.backend.reset()
    got = run(True)
    want = run(False)
    assert got == want, (got, want)
    assert any(b < a for a, b in zip(want, want[1:])), "no step was skipped: the test checks nothing"
