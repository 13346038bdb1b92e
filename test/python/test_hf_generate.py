"""Hugging Face `generate()` through the backend (issue 17), greedy, as a
user writes it: `model.forward = torch.compile(model.forward,
backend="llmc")`, on tiny LLaMA and Mistral (GQA) configurations.

* Static cache (`cache_implementation="static"`): the tokens equal eager's;
  the prefill and the decode step are one llmc subgraph each holding every
  ATen op (the KV-cache writes included), the decode step is compiled once
  for all 47 positions, and every layer's K and V cache is donated (written
  in place when llmc runs the subgraph, on a GPU).
* Default dynamic cache (the cache grows by `cat`): the tokens equal eager's,
  each step is one llmc subgraph, and the decode step compiles once per
  bucket of the cache length (pow2: 16, 32, 64, ...): bucketing pads the
  cache, rewrites each `cat` into an append at the real length and masks
  the padded keys of the attention (llmc.bucketing, "Rewrites"). Compiles
  for n new tokens after a prompt of p: the prefill, Dynamo's first
  (static) decode step, then one per bucket of the lengths p+1 .. p+n-2.
On a CPU the subgraphs are compiled but run in PyTorch; the GPU test runs
them in llmc and checks the cache buffers themselves."""
import copy
import warnings

import pytest

import torch

import llmc.backend
from conftest import capi_or_skip, gpu, tiny_llama, tiny_mistral

FAMILIES = {"llama": tiny_llama, "mistral": tiny_mistral}
NEW_TOKENS = 48


def _generate(model, ids, **kw):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                              pad_token_id=0, **kw)


def _compiled(model, dynamic):
    m = copy.deepcopy(model)
    m.forward = torch.compile(m.forward, backend="llmc", dynamic=dynamic)
    return m


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_static_cache_tokens_equal_eager_one_subgraph_per_step(family, batch):
    capi_or_skip()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    compiled = _compiled(model, dynamic=False)
    for prompt_len in (3, 17, 40):
        ids = torch.randint(1, 1000, (batch, prompt_len))
        want = _generate(model, ids, cache_implementation="static")
        llmc.backend.reset()
        got = _generate(compiled, ids, cache_implementation="static")
        assert torch.equal(got, want), f"prompt {prompt_len}: {got.tolist()} vs {want.tolist()}"
        reps = llmc.backend.reports()
        # The prefill graph, then the decode step's (one graph, all positions).
        assert len(reps) == 2, [str(r) for r in reps]
        for r in reps:
            assert r.num_partitions == 1, str(r)
            assert not r.unsupported and r.num_llmc_nodes == r.num_nodes, str(r)
            assert r.compiles == 1 and not r.compile_failures, str(r)
        decode = reps[1]
        assert decode.llmc_runs + decode.eager_runs == NEW_TOKENS - 1, str(decode)
        assert ("llmc_0: 4 mutated input(s) (KV caches) donated: written in place when llmc "
                "runs the subgraph") in decode.notes, str(decode)


def test_static_cache_counters_are_copied_back_not_staged(created_subgraphs):
    """The static cache's per-layer position counters (StaticLayer's
    cumulative_length, add_ed by every step): AOTAutograd returns their new
    values for a copy back into the buffers, which the llmc decode subgraph
    neither donates (an add, not a KV write) nor needs to stage for a CUDA
    graph (a buffer that stays where it is); their outputs get one tensor
    per session. What is staged is the token, the position ids and the
    mask, new tensors every step (on the 7B model: 3 copies instead of 35,
    3 allocations instead of 33 before the first kernel)."""
    capi_or_skip()
    subs = created_subgraphs
    torch.manual_seed(0)
    model = tiny_llama().eval()
    m = copy.deepcopy(model)
    m.forward = torch.compile(m.forward, backend="llmc", dynamic=False, mode="reduce-overhead")
    ids = torch.randint(1, 1000, (1, 7))
    got = _generate(m, ids, cache_implementation="static")
    assert torch.equal(got, _generate(model, ids, cache_implementation="static"))
    layers = model.config.num_hidden_layers
    decode = subs[-1]
    (entry,) = decode.sessions.values()
    if len(decode.copied_back_inputs) == 0:
        pytest.skip("this transformers' static cache mutates no counter")
    assert len(decode.copied_back_inputs) == len(decode.copied_back_outputs) == layers
    infos = entry.exe.inputs
    staged = decode._staged_inputs(entry.exe, entry.imp)
    kinds = sorted((tuple(infos[k].shape), str(infos[k].dtype)) for k in staged)
    assert kinds == sorted([((1, 1), "torch.int64"), ((1, 1), "torch.int64"),
                            ((1, 1, 1, infos[staged[-1]].shape[-1]), "torch.bool")]), kinds
    persistent = decode._persistent_outputs(entry.imp)
    assert len(persistent) == layers
    assert all(entry.exe.outputs[o].shape == () and entry.exe.outputs[o].dtype == torch.int64
               for o in persistent)
    # The prefill's graph also returns each counter's new value as another
    # output (a value the caller keeps): those stay fresh tensors.
    assert not subs[0].copied_back_outputs


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_dynamic_cache_tokens_equal_eager_one_subgraph_per_step(family, batch):
    """Prompts of 3, 17 and 40 tokens, 48 new tokens each: every graph is one
    llmc subgraph holding every ATen op, and each compiles once per bucket
    of its lengths (Dynamo's first graphs of the prefill and the decode step
    are static: one compile each)."""
    capi_or_skip()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    compiled = _compiled(model, dynamic=None)
    llmc.backend.reset()
    for prompt_len in (3, 17, 40):
        ids = torch.randint(1, 1000, (batch, prompt_len))
        want = _generate(model, ids)
        got = _generate(compiled, ids)
        assert torch.equal(got, want), f"prompt {prompt_len}: {got.tolist()} vs {want.tolist()}"
    reps = llmc.backend.reports()
    assert len(reps) == 4, [str(r) for r in reps]  # prefill and decode, static then dynamic
    for r in reps:
        assert r.num_partitions == 1, str(r)
        assert not r.unsupported and r.num_llmc_nodes == r.num_nodes, str(r)
        assert not r.compile_failures, str(r)
        if r.bucketing:
            buckets = max(len(v["buckets"]) for v in r.bucketing.values())
            assert r.compiles == buckets, str(r)
        else:
            assert r.compiles == 1, str(r)
    # The dynamic decode step: cache lengths 4 .. 86 -> buckets 16, 32, 64, 128.
    assert sum(r.compiles for r in reps) <= 1 + 3 + 1 + 4, [str(r) for r in reps]


def test_dynamic_cache_compiles_are_bounded_by_the_buckets():
    capi_or_skip()
    torch.manual_seed(0)
    compiled = _compiled(tiny_llama().eval(), dynamic=None)
    llmc.backend.reset()
    _generate(compiled, torch.randint(1, 1000, (1, 9)))
    reps = llmc.backend.reports()
    # Prefill, the first decode step and one per bucket the cache passes
    # (cache lengths 10 .. 55: buckets 16, 32, 64).
    assert [r.compiles for r in reps] == [1, 1, 3], [str(r) for r in reps]
    assert not any(r.compile_failures for r in reps), [str(r) for r in reps]
    assert "buckets 16,32,64; 3 shape(s) compiled for 46 length(s)" in str(reps[2]), str(reps[2])


def _cache_tensors(cache):
    """The K and V tensors of every layer of a Hugging Face cache (the
    `layers` of transformers >= 4.56, `key_cache`/`value_cache` before)."""
    if hasattr(cache, "layers"):
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return [t for pair in zip(cache.key_cache, cache.value_cache) for t in pair]


def _assert_greedy_under_f32(ref, seqs, prompt_len, rel, what):
    """Each token of `seqs` after the prompt is a greedy choice of the
    float32 model `ref` run on the same prefix (teacher forcing), up to
    rounding: its logit is within `rel` * max|logit| of the row's maximum.
    A wrong KV-cache write or position gives tokens far from the argmax."""
    with torch.no_grad():
        logits = ref(seqs).logits.float()
    for t in range(prompt_len - 1, seqs.shape[1] - 1):
        row = logits[:, t]
        chosen = row.gather(1, seqs[:, t + 1:t + 2]).squeeze(1)
        best, tol = row.max(1).values, rel * row.abs().max(1).values
        bad = (chosen < best - tol).nonzero().flatten().tolist()
        assert not bad, (f"{what}: token {t + 1} of row(s) {bad} is not a greedy choice: logit "
                         f"{chosen[bad].tolist()} vs max {best[bad].tolist()} (tolerance "
                         f"{tol[bad].tolist()}); tokens {seqs[bad].tolist()}")


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gpu_static_cache_written_in_place(family, dtype, donated_outputs):
    """On the GPU, the subgraphs run in llmc and return every donated cache
    tensor itself (written in place, no copy). float32: the tokens equal
    eager's and the caches hold eager's values (1e-5). bfloat16: 48 greedy
    tokens of a random model differ from eager's once a near-tie flips (seen
    on the H200: row 0 of 2 after 19 tokens), so every token must instead
    be a greedy choice of the float32 model on its own prefix within bf16's
    1e-2 (eager's tokens are held to the same check), and the caches equal
    eager's (1e-2) at the positions before the rows' tokens differ."""
    capi_or_skip()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval().to("cuda", dtype)
    ref = copy.deepcopy(model).float()
    compiled = _compiled(model, dynamic=False)
    ids = torch.randint(1, 1000, (2, 11), device="cuda")
    want = _generate(model, ids, cache_implementation="static", return_dict_in_generate=True)
    llmc.backend.reset()
    _generate(compiled, ids, cache_implementation="static")  # compiles
    got = _generate(compiled, ids, cache_implementation="static", return_dict_in_generate=True)
    assert all(r.llmc_runs > 0 for r in llmc.backend.reports()), \
        [str(r) for r in llmc.backend.reports()]
    assert donated_outputs and all(donated_outputs), donated_outputs
    gs, ws = got.sequences, want.sequences
    if dtype == torch.float32:
        assert torch.equal(gs, ws), f"{gs.tolist()} vs {ws.tolist()}"
        same = [gs.shape[1]] * gs.shape[0]
    else:
        _assert_greedy_under_f32(ref, gs, ids.shape[1], 2e-2, "llmc")
        _assert_greedy_under_f32(ref, ws, ids.shape[1], 2e-2, "eager")
        # Cache slot p holds token p's K/V: equal inputs up to the first
        # differing token of each row.
        same = [int((g != w).nonzero()[0]) if (g != w).any() else gs.shape[1]
                for g, w in zip(gs, ws)]
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for g, e in zip(_cache_tensors(got.past_key_values), _cache_tensors(want.past_key_values)):
        for b, n in enumerate(same):
            gb, eb = g[b, :, :n].float(), e[b, :, :n].float()
            err = float((gb - eb).norm() / eb.norm())
            assert err <= tol, f"cache row {b} (first {n} positions): relative error {err:.3e}"


@gpu
def test_gpu_static_cache_counters_with_cuda_graphs():
    """mode="reduce-overhead" (CUDA graphs, staged token/position/mask,
    persistent outputs for the copied-back counters), float32: the tokens
    and every layer's K/V cache and position counter equal eager's after
    two generate() calls (the second replays the graphs)."""
    capi_or_skip()
    torch.manual_seed(0)
    model = tiny_llama().eval().to("cuda")
    compiled = copy.deepcopy(model)
    compiled.forward = torch.compile(compiled.forward, backend="llmc", dynamic=False,
                                     mode="reduce-overhead")
    ids = torch.randint(1, 1000, (2, 11), device="cuda")
    want = _generate(model, ids, cache_implementation="static", return_dict_in_generate=True)
    llmc.backend.reset()
    _generate(compiled, ids, cache_implementation="static")
    got = _generate(compiled, ids, cache_implementation="static", return_dict_in_generate=True)
    assert all(r.llmc_runs > 0 for r in llmc.backend.reports())
    assert torch.equal(got.sequences, want.sequences), \
        f"{got.sequences.tolist()} vs {want.sequences.tolist()}"
    for g, e in zip(_cache_tensors(got.past_key_values), _cache_tensors(want.past_key_values)):
        assert float((g - e).norm() / e.norm()) <= 1e-5
    counters = [(getattr(a, "cumulative_length", None), getattr(b, "cumulative_length", None))
                for a, b in zip(got.past_key_values.layers, want.past_key_values.layers)]
    for a, b in counters:
        if isinstance(a, torch.Tensor):
            assert int(a) == int(b), (int(a), int(b))


@gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gpu_dynamic_cache_bucketed_tokens_equal_eager(family):
    """On the GPU the dynamic cache's decode step runs in llmc, padded to its
    bucket (appends at the real length, padded keys masked): float32 tokens
    equal eager's, every grown cache holds eager's values (1e-5), no call
    of the bucketed step falls back to PyTorch, and the compiles are the
    prefill, the first decode step and one per bucket."""
    capi_or_skip()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval().to("cuda")
    compiled = _compiled(model, dynamic=None)
    ids = torch.randint(1, 1000, (3, 9), device="cuda")
    want = _generate(model, ids, return_dict_in_generate=True)
    llmc.backend.reset()
    got = _generate(compiled, ids, return_dict_in_generate=True)
    reps = llmc.backend.reports()
    assert [r.compiles for r in reps] == [1, 1, 3], [str(r) for r in reps]
    bucketed = reps[2]
    assert bucketed.bucketing and bucketed.llmc_runs == NEW_TOKENS - 2, str(bucketed)
    assert bucketed.eager_runs == 0 and not bucketed.compile_failures, str(bucketed)
    assert torch.equal(got.sequences, want.sequences), \
        f"{got.sequences.tolist()} vs {want.sequences.tolist()}"
    for g, e in zip(_cache_tensors(got.past_key_values), _cache_tensors(want.past_key_values)):
        assert g.shape == e.shape, (g.shape, e.shape)
        err = float((g - e).norm() / e.norm())
        assert err <= 1e-5, f"cache: relative error {err:.3e}"
