"""Generation through the backend with a static KV cache (issue 17), on a
gpt-fast-style decoder (gpt_fast.py): the KV-cache writes (index_put), the
position-indexed RoPE tables and mask rows and the greedy argmax stay in
llmc, a decode step is one llmc subgraph compiled once for every position, and the caches (buffers
AOTAutograd copies back after the call) are written in place."""
import copy
import re
import subprocess
import warnings

import pytest

import torch

import llmc.backend
from conftest import LLMC_OPT, capi_or_skip, gpu
from gpt_fast import GptFast, generate


def _decode_reports(model, device="cpu", steps=4):
    cm = torch.compile(model, backend="llmc", dynamic=False)
    llmc.backend.reset()
    prompt = torch.randint(0, 1000, (1, 5), device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        toks = generate(cm, prompt, steps)
    return toks, prompt, llmc.backend.reports()


def test_decode_step_is_one_subgraph_with_caches_in_place(tmp_path):
    """Prefill and decode graphs: one llmc subgraph each with every ATen op
    (the greedy argmax included); every layer's K and V cache donated; the
    decode graph compiled once for all positions."""
    capi_or_skip()
    torch.manual_seed(0)
    _, _, reps = _decode_reports(GptFast(layers=2))
    assert [r.graph.endswith("_inference") for r in reps] == [True, True], [str(r) for r in reps]
    for r in reps:
        assert r.num_partitions == 1, str(r)
        assert not r.unsupported and r.num_llmc_nodes == r.num_nodes, str(r)
        assert ("llmc_0: 4 mutated input(s) (KV caches) donated: written in place when llmc "
                "runs the subgraph") in r.notes, str(r)
        assert r.compiles == 1 and not r.compile_failures, str(r)


def test_decode_attention_reads_the_cache_in_place(tmp_path):
    """The decode step's SDPA over gpt-fast's [B, H, S, D] caches under the
    position mask compiles to flash-decoding that reads the caches in HND
    layout (kv_hnd) and skips the masked rows: no transposed copy of a
    cache and no FlashAttention-2 kernel over the whole cache."""
    capi_or_skip()
    compile_tool = LLMC_OPT.parent / "llmc-compile"
    if not compile_tool.exists():
        pytest.skip(f"{compile_tool} not built")
    torch.manual_seed(0)
    cm = torch.compile(GptFast(layers=2), backend="llmc", dynamic=False,
                       options={"dump_dir": str(tmp_path)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generate(cm, torch.randint(0, 1000, (1, 5)), 3)
    # Prefill's graph, then the decode step's (numbered in compile order).
    graphs = sorted(tmp_path.glob("g*_inference.llmc_0.mlir"),
                    key=lambda p: int(p.name[1:p.name.index("_")]))
    assert len(graphs) == 2, sorted(p.name for p in tmp_path.iterdir())
    exe = subprocess.run([str(compile_tool), str(graphs[1]), "--emit=exec"],
                         capture_output=True, text=True, check=True).stdout
    kernels = re.findall(r"exec\.launch @(\w+)", exe)
    split = [k for k in kernels if k.startswith("llmc_flashdec_split_")]
    assert len(split) == 2 and all("_maskf32_hnd_" in k for k in split), kernels
    assert not any(k.startswith(("llmc_flash_attn_", "llmc_attn_simple_")) for k in kernels), kernels
    # The cache is [1, 4, 64, 16] f32 (16384 bytes): nothing moves it whole
    # except the copies llmc-compile adds without the plugin's donations.
    assert exe.count("exec.copy 16384 bytes") <= 4, exe


def test_donation_needs_the_cache_to_be_read_only_by_the_write():
    """A cache that is also read outside the write (here: returned as well)
    keeps value semantics: no donation."""
    class Peek(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 2, 8, 4))

        def forward(self, pos, k):
            old = self.cache.sum()
            self.cache[:, :, pos] = k
            return self.cache * 2, old

    capi_or_skip()
    llmc.backend.reset()
    m = torch.compile(Peek(), backend="llmc", dynamic=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m(torch.tensor([3]), torch.randn(1, 2, 1, 4))
    rep = llmc.backend.last_report()
    assert not any("donated" in n for n in rep.notes), str(rep)


def test_no_donation_when_the_write_reads_the_cache():
    """index_copy_ of a buffer with itself as the source (a permutation)
    reads the rows it overwrites: no donation (found by review: the kernel
    would read rows other threads already wrote)."""
    class Permute(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.arange(64.0).view(32, 2))

        def forward(self, perm):
            self.c.index_copy_(0, perm, self.c)
            return self.c * 1

    capi_or_skip()
    llmc.backend.reset()
    m = Permute()
    ref = Permute()
    cm = torch.compile(m, backend="llmc", dynamic=False)
    perm = torch.roll(torch.arange(32), 1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cm(perm)
        ref.c.copy_(torch.index_copy(ref.c.clone(), 0, perm, ref.c.clone()))
    rep = llmc.backend.last_report()
    assert rep.num_partitions == 1 and not any("donated" in n for n in rep.notes), str(rep)
    assert torch.equal(got, ref.c) and torch.equal(m.c, ref.c)


@gpu
def test_gpu_greedy_tokens_and_caches_match_eager(donated_outputs):
    """bf16 and f32: 12 greedy tokens equal to eager's, every layer's caches
    equal to eager's, and the llmc subgraph returns the cache buffers
    themselves (written in place, no copy)."""
    capi_or_skip()
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        model = GptFast(layers=2, dtype=dtype).cuda()
        ref = copy.deepcopy(model)
        toks, prompt, reps = _decode_reports(model, "cuda", steps=12)
        want = generate(ref, prompt, 12)
        assert torch.equal(toks, want), f"{dtype}: {toks.tolist()} vs eager {want.tolist()}"
        for a, b in zip(model.layers, ref.layers):
            for name in ("k_cache", "v_cache"):
                got, exp = getattr(a.kv, name).float(), getattr(b.kv, name).float()
                err = float((got - exp).norm() / exp.norm())
                assert err <= (1e-5 if dtype is torch.float32 else 1e-2), f"{dtype} {name}: {err:.3e}"
        assert all(r.llmc_runs > 0 for r in reps), [str(r) for r in reps]
    assert donated_outputs and all(donated_outputs), donated_outputs


def test_cuda_graph_sessions_stage_the_token_and_position(created_subgraphs):
    """With CUDA graphs, the decode subgraph's inputs that are not at fixed
    addresses -- the token and the position, new tensors every step -- are
    staged through the session's buffers; weights, the RoPE tables, the
    mask buffer and the donated caches are not (they stay in the graph)."""
    capi_or_skip()
    subs = created_subgraphs
    torch.manual_seed(0)
    cm = torch.compile(GptFast(layers=2), backend="llmc", dynamic=False,
                       options={"cuda_graphs": True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generate(cm, torch.randint(0, 1000, (1, 5)), 3)
    assert len(subs) == 2, subs
    decode = subs[1]
    (entry,) = decode.sessions.values()
    staged = decode._staged_inputs(entry.exe, entry.imp)
    infos = entry.exe.inputs
    kinds = sorted((tuple(infos[k].shape), infos[k].dtype) for k in staged)
    assert kinds == [((1,), torch.int64), ((1, 1), torch.int64)], kinds
    assert not set(staged) & {entry.imp.arg_placeholders.index(p) for p in decode.donate}


def test_cudnn_spelling_of_a_boolean_mask_is_read_as_the_boolean_mask(tmp_path):
    """PyTorch's cuDNN SDPA path passes a boolean mask as where(mask, 0,
    -65504) (-65536 in bf16) to _scaled_dot_product_cudnn_attention. The
    importer reads the boolean mask itself: masked keys become -inf (what
    the user's boolean mask means), so flash-decoding skips them instead of
    loading the whole cache. Traced with fake tensors (the graph AOTAutograd
    hands the backend on a GPU)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from llmc import importer
    capi_or_skip()

    def decode(q, k, v, keep):
        m = torch.where(keep, torch.scalar_tensor(0.0, dtype=q.dtype),
                        torch.scalar_tensor(-65504.0, dtype=q.dtype))
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, m, False, 0.0, False, False)[0]

    q = torch.randn(1, 4, 1, 16, dtype=torch.bfloat16)
    k = torch.randn(1, 4, 64, 16, dtype=torch.bfloat16)
    keep = (torch.arange(64) <= 9)[None, None, None, :]
    gm = make_fx(decode, tracing_mode="fake")(q, k, k, keep)
    ir = importer.import_graph(gm, func_name="decode").text
    assert "0xFF80" in ir and "0xC780" not in ir, ir  # bf16 -inf, not -65536
    path = tmp_path / "decode.mlir"
    path.write_text(ir)
    compile_tool = LLMC_OPT.parent / "llmc-compile"
    if compile_tool.exists():
        exe = subprocess.run([str(compile_tool), str(path), "--emit=exec"],
                             capture_output=True, text=True, check=True).stdout
        assert "llmc_flashdec_split_bf16_d16_g1_q1_lenarg_maskbf16_hnd" in exe, exe
