"""Numerics of the FX -> `llm` importer, on the CPU.

Every importer mapping (the op cases of test_importer.py) and every
llmc-supported partition of the tiny LLaMA / GPT-2 / Mistral forward graphs
and of the tiny-LLaMA training forward and backward graphs (as AOTAutograd
hands them to the backend) is imported, evaluated by the CPU reference
executor (`llmc-run --backend=ref`: float64 math, exact storage rounding) on
the partition's real inputs, and compared with the same FX partition run by
PyTorch in float64 (float32 where float64 cannot run): relative L2 error
<= 1e-5 for float32 results, NaN/inf positions equal.

A mismatch here is a mistranslation by the importer (or a reference-executor
bug), independent of any GPU kernel. LLMC_NUMERICS_DUMP_DIR=DIR keeps each
partition's IR, inputs and llmc-run command line under DIR/<name>/.
"""

import copy
import os
import subprocess
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

from conftest import MODELS, REPO, tiny_llama
from llmc import importer, partition
from test_importer import CASES, trace

LLMC_RUN = Path(os.environ.get("LLMC_RUN", REPO / "build" / "bin" / "llmc-run"))
if not LLMC_RUN.exists() and (REPO / "dist" / "bin" / "llmc-run").exists():
    LLMC_RUN = REPO / "dist" / "bin" / "llmc-run"

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _need_llmc_run():
    if not LLMC_RUN.exists():
        pytest.skip(f"{LLMC_RUN} not built (cmake --build build --target llmc-run); "
                    "the numerics tests need the CPU reference executor")


# ---------------------------------------------------------------------------
# Reference executor


def _write_input(t: torch.Tensor, stem: Path) -> Path:
    t = t.detach().cpu().contiguous()
    if t.dtype.is_floating_point:
        p = stem.with_suffix(".f32")
        p.write_bytes(t.to(torch.float32).numpy().tobytes())
    else:
        p = stem.with_suffix(".i64")
        p.write_bytes(t.to(torch.int64).numpy().tobytes())
    return p


def _symbol_values(gm, args):
    vals = {}
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for ph, a in zip(phs, args):
        m = ph.meta.get("val")
        if isinstance(m, torch.Tensor) and isinstance(a, torch.Tensor):
            for d, s in zip(m.shape, a.shape):
                if isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False):
                    vals[str(d.node.expr)] = int(s)
        elif isinstance(m, torch.SymInt) and isinstance(a, int):
            if getattr(m.node.expr, "is_Symbol", False):
                vals[str(m.node.expr)] = a
    return vals


def import_for(gm, args, name="main"):
    """ImportResult of `gm`, re-imported with concrete shapes if it needs them."""
    try:
        return importer.import_graph(gm, func_name=name)
    except importer.NeedsStatic:
        return importer.import_graph(gm, func_name=name,
                                     bindings=_symbol_values(gm, args))


class RefRunError(AssertionError):
    pass


def run_ref(res: importer.ImportResult, args, flags=()) -> list:
    """The function's results, evaluated by llmc-run --backend=ref on `args`
    (with the extra llmc-run `flags`, e.g. --precision=fp8)."""
    _need_llmc_run()
    with tempfile.TemporaryDirectory(prefix="llmc_num_") as d:
        d = Path(d)
        (d / "f.mlir").write_text(res.text)
        cmd = [str(LLMC_RUN), str(d / "f.mlir"), "--backend=ref", f"--output-dir={d}", *flags]
        tensors = []
        for ai, pi in enumerate(res.arg_placeholders):
            t = args[pi]
            tensors.append(t)
            if ai in res.arg_perms:
                t = t.permute(res.arg_perms[ai])  # the argument in memory order
            p = _write_input(t, d / f"in{ai}")
            cmd.append(f"--input=arg{ai}={p}")
        for nm, (ai, di) in sorted(res.dim_bindings.items()):
            cmd.append(f"--shape={nm}={int(tensors[ai].shape[di])}")
        r = subprocess.run(cmd, capture_output=True, text=True)
        keep = os.environ.get("LLMC_NUMERICS_DUMP_DIR")
        if keep:
            # IR, inputs and the command line, to rerun a partition elsewhere
            # (e.g. `llmc-run --backend=cuda --check=ref` on a GPU machine).
            import shutil
            dst = Path(keep) / res.func_name
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(d, dst)
            (dst / "cmd.txt").write_text(" ".join(c.replace(str(d), str(dst)) for c in cmd) + "\n")
        if r.returncode != 0:
            raise RefRunError(f"llmc-run failed:\n{r.stderr}\n{r.stdout}\n"
                              f"--- IR ---\n{res.text}")
        n = 1 + max([i for k, i in res.outputs if k == "out"], default=-1)
        outs = []
        for i in range(n):
            outs.append(torch.frombuffer(bytearray((d / f"result{i}.f32").read_bytes()),
                                         dtype=torch.float32))
        return outs


# ---------------------------------------------------------------------------
# PyTorch references


def _to64(a):
    if isinstance(a, torch.Tensor) and a.dtype.is_floating_point:
        return a.detach().to(torch.float64)
    if isinstance(a, torch.Tensor):
        return a.detach().clone()
    return a


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _sdpa_with_mask(gm) -> bool:
    return any("scaled_dot_product" in str(n.target) and
               (n.kwargs.get("attn_mask") is not None or len(n.args) > 3 and n.args[3] is not None)
               for n in gm.graph.nodes if n.op == "call_function")


def eager_reference(gm, args):
    """(outputs, precision): float64 when the graph runs in float64, else float32.

    Graphs with an SDPA op and an additive mask run in float32: the mask is
    built inside the graph with an explicit float32 dtype, and PyTorch's CPU
    flash-attention op given float64 q/k/v and a float32 mask silently
    returns wrong values (torch 2.15: max error 3.2 on a 21-token causal
    mask; the same call with a float64 mask is exact)."""
    if _sdpa_with_mask(gm):
        with torch.no_grad():
            return _flat(gm(*[a.detach() if isinstance(a, torch.Tensor) else a
                              for a in args])), "f32"
    with torch.no_grad():
        try:
            outs = _flat(gm(*[_to64(a) for a in args]))
            # A graph that casts to a fixed type computes partly in that type;
            # that is still closer than the float32 run.
            return outs, "f64"
        except Exception:
            outs = _flat(gm(*[a.detach() if isinstance(a, torch.Tensor) else a
                               for a in args]))
            return outs, "f32"


def compare(got: torch.Tensor, want: torch.Tensor, out_dtype: torch.dtype, what: str):
    want = want.detach().to(torch.float64).reshape(-1)
    got = got.to(torch.float64).reshape(-1)
    assert got.numel() == want.numel(), f"{what}: {got.numel()} values, want {want.numel()}"
    gn, wn = torch.isnan(got), torch.isnan(want)
    assert torch.equal(gn, wn), (f"{what}: NaN positions differ "
                                 f"({int(gn.sum())} vs {int(wn.sum())})")
    gi, wi = torch.isinf(got), torch.isinf(want)
    assert torch.equal(gi, wi) and torch.equal(got[gi], want[wi]), f"{what}: inf positions differ"
    fin = ~(wn | wi)
    g, w = got[fin], want[fin]
    if not out_dtype.is_floating_point:
        assert torch.equal(g, w), f"{what}: integer/bool results differ"
        return 0.0
    # The reference executor's result is in the result type; round the
    # float64 reference the same way before comparing.
    w = w.to(out_dtype).to(torch.float64)
    den = float(w.norm())
    err = float((g - w).norm()) / (den if den > 0 else 1.0)
    tol = TOL.get(out_dtype, 1e-5)
    assert err <= tol, f"{what}: relative L2 error {err:.3e} > {tol:.0e}"
    return err


def logical_result(res: importer.ImportResult, i: int, flat: torch.Tensor, shape) -> torch.Tensor:
    """Result `i` of run_ref (flat, in the function's result order) in the
    FX output's shape: a result returned in memory order (res.out_perms) is
    viewed back, as the backend does."""
    shape = [int(d) for d in shape]
    if i not in res.out_perms:
        return flat.reshape(shape)
    inv = res.out_perms[i]
    fwd = importer.inverse_permutation(inv)
    return flat.reshape([shape[p] for p in fwd]).permute(inv)


def assemble_ref_outputs(res: importer.ImportResult, got, shapes, args) -> list:
    """The FX outputs of a graph from run_ref's results `got`, as the backend
    assembles them (results viewed back from memory order, inputs passed
    through, copied or viewed); `shapes`: each FX output's shape."""
    results = [None] * (1 + max([i for k, i in res.outputs if k == "out"], default=-1))
    for j, (kind, i) in enumerate(res.outputs):
        if kind == "out" and results[i] is None:
            results[i] = logical_result(res, i, got[i], shapes[j])
    from llmc.backend import assemble_outputs
    return assemble_outputs(res, results, list(args))


def check_graph(gm, args, name="main"):
    """Imports `gm`, evaluates it on `args` with the reference executor and
    compares every result with PyTorch. Returns {output index: error}."""
    res = import_for(gm, args, name)
    try:
        got = run_ref(res, args)
    except RefRunError:
        if not res.dynamic:
            raise
        # As the backend does when the dynamic IR does not specialize (e.g. a
        # broadcast to unnamed `?` dims): import again per concrete shape.
        res = importer.import_graph(gm, func_name=name, bindings=_symbol_values(gm, args))
        got = run_ref(res, args)
    want, _ = eager_reference(gm, args)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    metas = [importer._meta(o) for o in _flat(out_node.args[0])]
    # The FX outputs as the backend assembles them (results viewed back from
    # memory order, inputs passed through, copied or viewed), so that every
    # output kind is compared, not only the function's results.
    outs = assemble_ref_outputs(res, got, [w.shape for w in want], args)
    errs = {}
    for j, (kind, i) in enumerate(res.outputs):
        if kind in ("none", "empty"):
            continue
        g, w = outs[j], want[j]
        assert tuple(g.shape) == tuple(w.shape), f"{name} output {j} ({kind}): shape " \
            f"{tuple(g.shape)}, want {tuple(w.shape)}"
        if kind != "out" or i in res.out_perms:
            # PyTorch's strides (size-1 dims have any stride).
            assert all(sz <= 1 or a == b for sz, a, b in zip(w.shape, g.stride(), w.stride())), \
                (kind, g.stride(), w.stride())
        errs[j] = compare(g.reshape(-1), w, metas[j].dtype, f"{name} output {j} ({kind})")
    return errs


# ---------------------------------------------------------------------------
# Single ops


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_case_matches_torch(name):
    _need_llmc_run()
    fn, args, _ = CASES[name]
    gm = trace(fn, *args)
    check_graph(gm, list(args), name)


def _extra(fn, *args):
    return fn, args


_f = torch.nn.functional
EXTRA = {
    # reductions over inner dims / keepdim / several dims
    "sum_dim0": _extra(lambda a: a.sum(0), torch.randn(4, 8)),
    "sum_dims_keep": _extra(lambda a: a.sum((0, 2), keepdim=True), torch.randn(3, 4, 5)),
    "mean_dim1": _extra(lambda a: a.mean(1), torch.randn(3, 4, 5)),
    "mean_all": _extra(lambda a: a.mean(), torch.randn(3, 4)),
    "amax_keep": _extra(lambda a: a.amax(1, keepdim=True), torch.randn(3, 4, 5)),
    "sum_i64_to_f": _extra(lambda a, i: a + i.sum(-1, keepdim=True), torch.randn(3, 4),
                           torch.randint(0, 5, (3, 4))),
    "softmax_dim0": _extra(lambda a: torch.softmax(a, 0) * 2, torch.randn(4, 8)),
    "log_softmax_3d": _extra(lambda a: torch.log_softmax(a, -1), torch.randn(2, 3, 8)),
    "layer_norm_eps": _extra(lambda x, w, b: _f.layer_norm(x, (8,), w, b, eps=1e-2),
                             torch.randn(4, 8), torch.randn(8), torch.randn(8)),
    "layer_norm_nobias": _extra(lambda x, w: _f.layer_norm(x, (8,), w, None, eps=1e-5),
                                torch.randn(2, 4, 8), torch.randn(8)),
    "permute_3d": _extra(lambda a: a.permute(1, 2, 0) + 1, torch.randn(2, 3, 4)),
    "permute_twice": _extra(lambda a: a.permute(1, 2, 0).permute(2, 0, 1).permute(0, 2, 1) + 1,
                            torch.randn(2, 3, 4)),
    "slice_step": _extra(lambda a: a[:, 1:7:3] * 2, torch.randn(4, 8)),
    "slice_neg": _extra(lambda a: a[:, -3:] * 2, torch.randn(4, 8)),
    "slice_end_big": _extra(lambda a: a[1:100] * 2, torch.randn(4, 8)),
    "select_neg": _extra(lambda a: a[:, -1] * 2, torch.randn(4, 8)),
    "split_equal": _extra(lambda a: a.split(3, dim=1)[2] * 2, torch.randn(4, 8)),
    "cat_inner": _extra(lambda a, b: torch.cat([a, b], -1) * 2, torch.randn(2, 3), torch.randn(2, 4)),
    "div_int_true": _extra(lambda a: a / 2, torch.randint(-9, 9, (4, 8))),
    "int_tensor_times_float": _extra(lambda a, b: a * b, torch.randint(-9, 9, (4, 8)),
                                     torch.randn(4, 8)),
    "add_int_scalar_float": _extra(lambda a: a + 0.5, torch.randint(-9, 9, (4, 8))),
    "pow_half": _extra(lambda a: a.abs().pow(0.5), torch.randn(4, 8)),
    "pow_neg": _extra(lambda a: a.abs().pow(-0.5), torch.randn(4, 8)),
    "pow_scalar_base": _extra(lambda a: torch.pow(2.0, a), torch.randn(4, 8)),
    "pow_int_exp3": _extra(lambda a: a.pow(3), torch.randn(4, 8)),
    "reciprocal": _extra(torch.reciprocal, torch.randn(4, 8)),
    "sub_alpha": _extra(lambda a, b: torch.sub(a, b, alpha=2), torch.randn(4, 8), torch.randn(4, 8)),
    "rsub_tensor": _extra(lambda a, b: torch.rsub(a, b), torch.randn(4, 8), torch.randn(4, 8)),
    "clamp_min": _extra(lambda a: a.clamp(min=0.1), torch.randn(4, 8)),
    "where_bcast": _extra(lambda c, a, b: torch.where(c, a, b), torch.rand(4, 1) > 0.5,
                          torch.randn(1, 8), torch.randn(4, 8)),
    "where_scalar": _extra(lambda c, a: torch.where(c, a, 0.0), torch.rand(4, 8) > 0.5,
                           torch.randn(4, 8)),
    "masked_fill": _extra(lambda a, m: a.masked_fill(m, -1e4), torch.randn(4, 8),
                          torch.rand(1, 8) > 0.5),
    "logical_ops": _extra(lambda a, b: ((a > 0) & (b > 0)) | ~(a > b), torch.randn(4, 8),
                          torch.randn(4, 8)),
    "ne_eq": _extra(lambda a: (a != 0).float() + (a == 3).float(), torch.randint(0, 5, (4, 8))),
    "compare_int_float": _extra(lambda a: (a < 2.5).float(), torch.randint(0, 5, (4, 8))),
    "embedding_pad": _extra(lambda w, i: _f.embedding(i, w, padding_idx=0), torch.randn(10, 4),
                            torch.randint(0, 10, (3, 5))),
    "index_select_dim1": _extra(lambda w, i: w.index_select(1, i) * 2, torch.randn(4, 10),
                                torch.randint(0, 10, (5,))),
    "bmm_transposed": _extra(lambda a, b: a @ b.transpose(1, 2), torch.randn(2, 4, 8),
                             torch.randn(2, 5, 8)),
    "matmul_lhs_t": _extra(lambda a, b: a.t() @ b, torch.randn(8, 4), torch.randn(8, 5)),
    "addmm": _extra(lambda b, x, w: torch.addmm(b, x, w), torch.randn(5), torch.randn(3, 4),
                    torch.randn(4, 5)),
    "addmm_2d_bias": _extra(lambda b, x, w: torch.addmm(b, x, w), torch.randn(3, 5),
                            torch.randn(3, 4), torch.randn(4, 5)),
    "linear_3d_bias": _extra(lambda x, w, b: _f.linear(x, w, b), torch.randn(2, 3, 8),
                             torch.randn(5, 8), torch.randn(5)),
    "sdpa_plain": _extra(lambda q, k, v: _f.scaled_dot_product_attention(q, k, v),
                         torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)),
    "sdpa_scale": _extra(lambda q, k, v: _f.scaled_dot_product_attention(q, k, v, scale=0.3),
                         torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)),
    "sdpa_causal_sq_lt_skv": _extra(
        lambda q, k, v: _f.scaled_dot_product_attention(q, k, v, is_causal=True),
        torch.randn(1, 2, 3, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)),
    "sdpa_causal_sq_gt_skv": _extra(
        lambda q, k, v: _f.scaled_dot_product_attention(q, k, v, is_causal=True),
        torch.randn(1, 2, 6, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)),
    "sdpa_float_mask": _extra(
        lambda q, k, v, m: _f.scaled_dot_product_attention(q, k, v, attn_mask=m),
        torch.randn(2, 2, 5, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8),
        torch.randn(2, 1, 5, 6)),
    "sdpa_bool_mask": _extra(
        lambda q, k, v, m: _f.scaled_dot_product_attention(q, k, v, attn_mask=m),
        torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8),
        torch.rand(5, 5) > 0.3),
    "sdpa_gqa_causal": _extra(
        lambda q, k, v: _f.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)),
    "gelu_big": _extra(lambda a: _f.gelu(a * 4), torch.randn(4, 8)),
    "mul_bf16_out": _extra(lambda a: (a * 3).to(torch.bfloat16), torch.randn(4, 8)),
    "full_bool": _extra(lambda a: a + torch.ones(4, 8, dtype=torch.int64), torch.randn(4, 8)),
}


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_extra_op_matches_torch(name):
    """Forms of the mappings the import tests do not cover (dims, steps,
    type promotion, alignment)."""
    _need_llmc_run()
    torch.manual_seed(0)
    fn, args = EXTRA[name]
    gm = trace(fn, *args)
    unsupported = [importer.check_node(n) for n in gm.graph.nodes if n.op == "call_function"]
    unsupported = [u for u in unsupported if u is not None]
    if unsupported:
        # Not translated: the partitioner leaves it to PyTorch, which is correct.
        pytest.skip(f"not translated: {unsupported[0]}")
    check_graph(gm, list(args), name)


# ---------------------------------------------------------------------------
# Model partitions, as the backend sees them


class _Recorder(torch.nn.Module):
    """Stands in for one llmc subgraph: runs it eagerly, records the first inputs."""

    def __init__(self, eager, name, sink):
        super().__init__()
        self.eager, self.name, self.sink = eager, name, sink
        self.args = None

    def forward(self, *args):
        if self.args is None:
            self.args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
            self.sink.append(self)
        return self.eager(*args)


def _capture_backend(sink, kinds):
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from llmc.backend import _decompositions, _partition_fn

    def compiler(kind):
        def comp(gm, example_inputs):
            fused, names, _ = partition.partition(gm, kind)
            for sub in names:
                setattr(fused, sub, _Recorder(getattr(fused, sub), f"{kind}.{sub}", sink))
            fused.recompile()
            kinds.append(kind)
            return make_boxed_func(fused.forward)
        return comp

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"),
                        partition_fn=_partition_fn(),  # the backend's (LLMC_PARTITION)
                        decompositions=_decompositions())


def capture_inference(name, batch=2, seq=7, dynamic=None):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    sink, kinds = [], []
    cm = torch.compile(model, backend=_capture_backend(sink, kinds), dynamic=dynamic)
    x = torch.randint(0, 1000, (batch, seq))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm(x, use_cache=False)
    return sink


def capture_training(batch=2, seq=16):
    torch.manual_seed(0)
    m = tiny_llama()
    sink, kinds = [], []
    x = torch.randint(0, 1000, (batch, seq))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = torch.compile(m, backend=_capture_backend(sink, kinds))(
            x, labels=x, use_cache=False).loss
        loss.backward()
    assert {"forward", "backward"} <= set(kinds), kinds
    return sink


def _check_partitions(sink):
    assert sink, "no llmc partition ran"
    failures = []
    for rec in sink:
        try:
            check_graph(rec.eager, rec.args, rec.name.replace(".", "_"))
        except AssertionError as e:
            failures.append(f"{rec.name}: {str(e).splitlines()[0]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_inference_partitions_match_torch(name):
    _need_llmc_run()
    _check_partitions(capture_inference(name))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_inference_dynamic_partitions_match_torch(name):
    """Dynamic batch and sequence: `?` dims bound with --shape (or imported
    per concrete shape, as the backend does)."""
    _need_llmc_run()
    _check_partitions(capture_inference(name, batch=3, seq=11, dynamic=True))


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_llama_training_partitions_match_torch(kind):
    _need_llmc_run()
    sink = [r for r in capture_training() if r.name.startswith(kind + ".")]
    _check_partitions(sink)


# ---------------------------------------------------------------------------
# Permuted layouts: a training step's forward saves transposed weights and
# [B, H, S, D] views of [B, S, H, D] buffers for its backward. The importer
# takes such inputs in memory order (arg_perms), returns such results in
# memory order (out_perms) and returns permuting views of inputs as views
# (argview), so no copy is made on either side of the subgraph.

def _bshd_view(b, s, h, d):
    return torch.randn(b, s, h, d).transpose(1, 2)  # [B, H, S, D], strides of [B, S, H, D]


PERMUTED = {
    # x @ W^T with W^T given as a transposed [n, k] weight: memory order [n, k].
    "input_transposed_weight": (lambda x, wt: torch.mm(x, wt),
                                (torch.randn(4, 8), torch.randn(16, 8).t()),
                                {"arg_perms": {1: (1, 0)}}),
    "input_bshd": (lambda q, k: q * k + q.sum(-1, keepdim=True),
                   (_bshd_view(2, 5, 3, 4), _bshd_view(2, 5, 3, 4)),
                   {"arg_perms": {0: (0, 2, 1, 3), 1: (0, 2, 1, 3)}}),
    # A result PyTorch lays out [B, S, H, D] while its shape is [B, H, S, D].
    "output_bshd": (lambda x: (x.view(2, 5, 3, 4) * 2).transpose(1, 2) + 1,
                    (torch.randn(2, 5, 12),),
                    {"out_perms": {0: (0, 2, 1, 3)}}),
    # The forward returning a weight and its transpose for the backward:
    # PyTorch's views of the input, not results.
    "output_weight_views": (lambda x, w: (torch.mm(x, w.t()), w.t(), w.permute(1, 0).t()),
                            (torch.randn(4, 8), torch.randn(16, 8)),
                            {"kinds": ["out", "argview", "argview"]}),
    # A permuted input returned transposed back is a copy of the input's
    # view in that order; the other result is computed in memory order.
    "input_roundtrip": (lambda wt: (wt.t().clone(), wt * 2), (torch.randn(16, 8).t(),),
                        {"kinds": ["argcopy", "out"], "arg_perms": {0: (1, 0)},
                         "out_perms": {0: (1, 0)}}),
    # A contiguous input returned through views and a clone (the review's
    # reproducer: it came back untransposed): a copy in the output's order.
    "input_transposed_clone": (lambda x: (x.t().clone(), x * 2), (torch.randn(4, 8),),
                               {"kinds": ["argcopy", "out"]}),
    "input_square_transposed_clone": (lambda x: (x.t().clone(), x * 2), (torch.randn(8, 8),),
                                      {"kinds": ["argcopy", "out"]}),
    "input_bshd_clone": (lambda q: (q.transpose(1, 2).clone(), q + 1),
                         (torch.randn(2, 3, 5, 4),), {"kinds": ["argcopy", "out"]}),
    # Returned through a clone in its own order: the plain pass-through.
    "input_clone": (lambda x: (x.clone(), x * 2), (torch.randn(4, 8).t(),),
                    {"kinds": ["arg", "out"]}),
    # Size-1 dims: any stride there is PyTorch's.
    "size_one_dims": (lambda x: x * 2, (torch.randn(4, 1, 8).permute(2, 1, 0),), {}),
}


@pytest.mark.parametrize("name", sorted(PERMUTED))
def test_permuted_layouts_are_taken_and_returned_in_memory_order(name):
    _need_llmc_run()
    torch.manual_seed(0)
    fn, args, expect = PERMUTED[name]
    gm = trace(fn, *args)
    res = import_for(gm, args, name)
    if "arg_perms" in expect:
        assert res.arg_perms == expect["arg_perms"], res.text
    if "out_perms" in expect:
        assert res.out_perms == expect["out_perms"], res.text
    if "kinds" in expect:
        assert [k for k, _ in res.outputs] == expect["kinds"], res.outputs
    check_graph(gm, list(args), name)
