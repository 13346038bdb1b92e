"""Issue #6: the graphs Hugging Face models hand the llmc backend.

* Constant causal masks (`llmc/fold.py`): HF builds the attention mask in the
  graph under torch.compile; the backend folds it into is_causal, so no
  [B, H, S, S] mask is materialized and arange/index/cumsum do not split the
  graph.
* Concat along an inner dimension (RoPE's rotate_half) is imported as
  transpose + outer concat + transpose, which the CUDA codegen lowers, so
  the projections, RoPE and attention stay in one llmc subgraph.
CPU only; the numerics go through `llmc-run --backend=ref`.
"""

import warnings

import pytest
import torch

import llmc.backend
from conftest import MODELS
from llmc import fold, importer
from test_importer import trace
from test_importer_numerics import _need_llmc_run, check_graph


def _tril(s, dtype=torch.bool):
    m = torch.ones(s, s, dtype=torch.bool).tril()
    if dtype == torch.bool:
        return m
    return torch.zeros(s, s, dtype=dtype).masked_fill(~m, float("-inf"))


def test_causal_mask_recognized_bool_and_additive():
    assert fold.is_causal_mask(_tril(8)[None, None].expand(2, 4, 8, 8), 8, 8)
    assert fold.is_causal_mask(_tril(8, torch.float32)[None, None], 8, 8)
    assert fold.is_causal_mask(_tril(8, torch.bfloat16).expand(3, 8, 8), 8, 8)
    # HF's finfo(dtype).min, and the -65504 (float16's lowest) of the graph
    # PyTorch 2.11 traces on CUDA for transformers 5.17, in every float type
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        for low in (torch.finfo(dt).min, -65504.0):
            f = torch.zeros(8, 8, dtype=dt).masked_fill(~_tril(8), low)
            assert fold.is_causal_mask(f[None, None], 8, 8), (dt, low)


def test_non_causal_masks_rejected():
    assert not fold.is_causal_mask(torch.ones(8, 8, dtype=torch.bool), 8, 8)
    m = _tril(8).clone()
    m[5, 1] = False  # a padded key
    assert not fold.is_causal_mask(m, 8, 8)
    f = _tril(8, torch.float32)
    f[3, 0] = -1.0  # a finite bias
    assert not fold.is_causal_mask(f, 8, 8)
    f = _tril(8, torch.float32)
    f[4, 1] = -60000.0  # a large bias above the masked threshold: a real bias
    assert not fold.is_causal_mask(f, 8, 8)
    f = torch.zeros(8, 8).masked_fill(~_tril(8), -1e4)  # not masking for sure
    assert not fold.is_causal_mask(f, 8, 8)
    f = _tril(8, torch.float32)
    f[2, 1] = float("nan")
    assert not fold.is_causal_mask(f, 8, 8)
    # one batch entry different
    b = _tril(8)[None].repeat(2, 1, 1)
    b[1, 7, 7] = False
    assert not fold.is_causal_mask(b, 8, 8)
    # query and key lengths differ: torch's causal is top-left, llm's bottom-right
    assert not fold.is_causal_mask(torch.ones(4, 8, dtype=torch.bool).tril(), 4, 8)
    assert not fold.is_causal_mask(torch.ones(8, 8, dtype=torch.int64).tril(), 8, 8)


def test_masks_broadcast_along_query_or_key_are_rejected_not_raised():
    # HF's padding mask [B, 1, 1, S] expanded over the queries (stride 0 along
    # dim -2), one bias per query expanded over the keys, and a scalar zero
    # expanded to [S, S]: none is causal, and the answer is False, not an
    # exception (fold_causal_masks would report "evaluating it failed").
    pad = torch.ones(2, 1, 1, 8, dtype=torch.bool)
    pad[1, 0, 0, :3] = False
    assert not fold.is_causal_mask(pad.expand(2, 1, 8, 8), 8, 8)
    assert not fold.is_causal_mask(torch.zeros(8, 1).expand(8, 8), 8, 8)
    assert not fold.is_causal_mask(torch.zeros(()).expand(1, 1, 8, 8), 8, 8)
    # ... and a causal mask whose batch/head dimensions broadcast still folds
    assert fold.is_causal_mask(_tril(8, torch.float16).expand(2, 4, 8, 8), 8, 8)


def test_mask_from_an_input_is_not_folded():
    def f(q, k, v, pad):
        s = q.shape[2]
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=causal & pad[:, None, None, :])
    q = torch.randn(1, 2, 8, 16)
    gm = trace(f, q, q, q, torch.ones(1, 8, dtype=torch.bool))
    assert fold.fold_causal_masks(gm) == 0


def test_mask_drawing_random_numbers_is_not_folded():
    # A mask computed from rand/bernoulli/dropout is new on every call: it is
    # no constant even when one draw comes out causal (here every draw keeps
    # every pair, so one evaluation would look causal). Before, the fold
    # evaluated it once (consuming the user's RNG) and replaced it with
    # is_causal=True for every later call.
    def f(q, k, v):
        s = q.shape[2]
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        keep = torch.rand(s, s) >= 0.0
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=causal & keep)
    q = torch.randn(1, 2, 8, 16)
    gm = trace(f, q, q, q)
    assert any("rand" in importer.op_name(n) for n in gm.graph.nodes if n.op == "call_function")
    state = torch.get_rng_state()
    assert fold.fold_causal_masks(gm) == 0
    assert torch.equal(torch.get_rng_state(), state)


def test_random_mask_under_activation_checkpointing_is_not_folded():
    # Under torch.utils.checkpoint AOTAutograd wraps the random op in a
    # higher-order op (run_and_save_rng_state) that carries no tags: it is
    # no constant either (the backward replays the draw from the saved RNG
    # state, so a folded forward would disagree with its own backward).
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def block(q, k, v):
        s = q.shape[2]
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        keep_ = torch.rand(s, s) >= 0.0
        return torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                 attn_mask=causal & keep_)

    def f(q, k, v):
        return torch.utils.checkpoint.checkpoint(block, q, k, v, use_reentrant=False)

    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    torch._dynamo.reset()
    torch.compile(f, backend=lambda gm, ex: aot_module_simplified(
        gm, ex, fw_compiler=keep, bw_compiler=keep), dynamic=False)(q, q, q)
    forward = graphs[0]
    assert any("run_and_save_rng_state" in str(n.target) for n in forward.graph.nodes)
    state = torch.get_rng_state()
    assert fold.fold_causal_masks(forward) == 0
    assert torch.equal(torch.get_rng_state(), state)


def test_constant_causal_mask_folded_and_exact():
    def f(q, k, v):
        s = q.shape[2]
        i = torch.arange(s)
        mask = i[None, :] <= i[:, None]
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    gm = trace(f, q, k, v)
    want = gm(q, k, v)
    assert fold.fold_causal_masks(gm) == 1
    ops = {importer.op_name(n) for n in gm.graph.nodes if n.op == "call_function"}
    assert not any("arange" in o or o.startswith("aten.le") for o in ops), ops
    got = gm(q, k, v)
    got = got[0] if isinstance(got, (tuple, list)) else got
    want = want[0] if isinstance(want, (tuple, list)) else want
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_cuda_style_float_mask_folded_and_exact():
    """The mask graph PyTorch 2.11 traces on CUDA for transformers 5.17:
    where(causal, 0, -65504) in the query's dtype. Folded, and the attention
    result equals the masked one."""
    def f(q, k, v):
        s = q.shape[2]
        i = torch.arange(s)
        causal = (i[None, :] <= i[:, None]).expand(1, 1, s, s)
        bias = torch.where(causal, torch.scalar_tensor(0.0, dtype=q.dtype),
                           torch.scalar_tensor(-65504.0, dtype=q.dtype))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    gm = trace(f, q, k, v)
    want = gm(q, k, v)
    notes = []
    assert fold.fold_causal_masks(gm, notes) == 1 and notes == []
    got = gm(q, k, v)
    got = got[0] if isinstance(got, (tuple, list)) else got
    want = want[0] if isinstance(want, (tuple, list)) else want
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_constant_non_causal_mask_kept_with_a_note():
    def f(q, k, v):
        s = q.shape[2]
        i = torch.arange(s)
        window = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 4)  # sliding window
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=window)
    q = torch.randn(1, 2, 8, 16)
    gm = trace(f, q, q, q)
    notes = []
    assert fold.fold_causal_masks(gm, notes) == 0
    assert len(notes) == 1 and "not the causal pattern" in notes[0], notes


# Expected with static shapes (torch 2.15, transformers 5.x): the whole
# forward is one llmc subgraph and nothing is left to PyTorch; the position
# ids (a static arange) become a constant and RoPE's cos/sin table is
# computed by llm.cos/llm.sin.
EXPECTED = {"gpt2": (1, set()),
            "llama": (1, set()),
            "mistral": (1, set())}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hf_model_graph_partitions(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    cm = torch.compile(model, backend="llmc", dynamic=False)
    x = torch.randint(0, 1000, (2, 16))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cm(x, use_cache=False).logits
        want = model(x, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rep = llmc.backend.last_report()
    parts, left = EXPECTED[name]
    assert any("2 constant causal attention mask(s) folded" in n for n in rep.notes), str(rep)
    assert set(rep.unsupported) == left, str(rep)
    assert rep.num_llmc_nodes == rep.num_nodes, str(rep)
    assert rep.num_partitions == parts, str(rep)
    assert rep.flops_fraction == 1.0, str(rep)


def _rope(q, cos, sin):
    h = q.shape[-1] // 2
    rot = torch.cat((-q[..., h:], q[..., :h]), dim=-1)
    return q * cos + rot * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotate_half_concat_inner_matches_torch(dtype):
    _need_llmc_run()
    torch.manual_seed(0)
    q = torch.randn(2, 4, 6, 16, dtype=dtype)
    cos = torch.randn(1, 1, 6, 16, dtype=dtype)
    sin = torch.randn(1, 1, 6, 16, dtype=dtype)
    gm = trace(_rope, q, cos, sin)
    text = importer.import_graph(gm).text
    assert "llm.concat" in text and "dim = 0" in text, text
    assert all(importer.check_node(n) is None for n in gm.graph.nodes if n.op == "call_function")
    check_graph(gm, [q, cos, sin], f"rope_{dtype}")


def _efficient_with_aligned_mask(q, k, v, m):
    """PyTorch's SDPA on CUDA for the memory-efficient kernel: the mask padded
    to a multiple of 16 keys and sliced back (aligned rows)."""
    n = m.shape[-1]
    padded = torch.ops.aten.constant_pad_nd.default(m, [0, 16 - n % 16])
    bias = padded[..., :n].expand(q.shape[0], q.shape[1], q.shape[2], n)  # over the heads
    return torch.ops.aten._scaled_dot_product_efficient_attention.default(
        q, k, v, bias, False)[0]


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_aligned_attention_mask_is_read_unpadded(mode):
    """The pad and slice around the efficient kernel's mask are dropped: the
    attention reads the mask itself (static and symbolic key lengths; with
    a symbolic length the pad amount is an expression llmc cannot pad).
    A slice that does not restore the shape, or one read by another op, is
    kept."""
    from torch.fx.experimental.proxy_tensor import make_fx
    q, k, v = (torch.randn(1, 2, 11, 8) for _ in range(3))
    m = torch.randn(1, 1, 11, 11)
    gm = make_fx(_efficient_with_aligned_mask, tracing_mode=mode)(q, k, v, m)
    assert fold.unpad_attention_masks(gm) == 1
    att = [n for n in gm.graph.nodes
           if n.target is torch.ops.aten._scaled_dot_product_efficient_attention.default]
    assert att[0].args[3].args[0].op == "placeholder", gm.code  # expand(m)
    assert not any(n.target in (torch.ops.aten.constant_pad_nd.default, torch.ops.aten.slice.Tensor)
                   for n in gm.graph.nodes), gm.code

    def partial(q, k, v, m):  # slices off one real key: not the mask itself
        padded = torch.ops.aten.constant_pad_nd.default(m, [0, 5])
        return torch.ops.aten._scaled_dot_product_efficient_attention.default(
            q, k[:, :, :10], v[:, :, :10], padded[..., :10], False)[0]
    gm = make_fx(partial, tracing_mode=mode)(q, k, v, m)
    assert fold.unpad_attention_masks(gm) == 0
