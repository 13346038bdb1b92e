"""Hugging Face `generate()` through the backend (issue 17), greedy, as a
user writes it: `model.forward = torch.compile(model.forward,
backend="llmc")`, on tiny LLaMA and Mistral (GQA) configurations.

* Static cache (`cache_implementation="static"`): the tokens equal eager's;
  the prefill and the decode step are one llmc subgraph each holding every
  ATen op (the KV-cache writes included), the decode step is compiled once
  for all 47 positions, and every layer's K and V cache is donated (written
  in place when llmc runs the subgraph, on a GPU).
* Default dynamic cache (the cache grows by `cat`): the tokens equal eager's
  and each step is one llmc subgraph, but the decode step compiles once per
  cache length: bucketing refuses a `cat` along the padded dimension. The
  issue asks for compiles bounded by the buckets; that is not done yet and
  is pinned by a strict xfail.
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


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_dynamic_cache_tokens_equal_eager_one_subgraph_per_step(family):
    capi_or_skip()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    compiled = _compiled(model, dynamic=None)
    ids = torch.randint(1, 1000, (3, 9))
    want = _generate(model, ids)
    llmc.backend.reset()
    got = _generate(compiled, ids)
    assert torch.equal(got, want), f"{got.tolist()} vs {want.tolist()}"
    for r in llmc.backend.reports():
        assert r.num_partitions == 1, str(r)
        assert not r.unsupported and r.num_llmc_nodes == r.num_nodes, str(r)


@pytest.mark.xfail(strict=True, reason="issue 17: a dynamic cache grown by cat is compiled per "
                   "length (bucketing refuses a cat along the padded dimension)")
def test_dynamic_cache_compiles_are_bounded_by_the_buckets():
    capi_or_skip()
    torch.manual_seed(0)
    compiled = _compiled(tiny_llama().eval(), dynamic=None)
    llmc.backend.reset()
    _generate(compiled, torch.randint(1, 1000, (1, 9)))
    compiles = sum(r.compiles for r in llmc.backend.reports())
    # Prefill, the first decode step and one per bucket the cache passes
    # (pow2 buckets from 10 to 57 positions: 16, 32, 64).
    assert compiles <= 5, [str(r) for r in llmc.backend.reports()]


def _cache_tensors(cache):
    """The K and V tensors of every layer of a Hugging Face cache (the
    `layers` of transformers >= 4.56, `key_cache`/`value_cache` before)."""
    if hasattr(cache, "layers"):
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return [t for pair in zip(cache.key_cache, cache.value_cache) for t in pair]


@gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gpu_static_cache_written_in_place_tokens_equal_eager(family, donated_outputs):
    """bf16 on the GPU: tokens equal eager's, the subgraphs run in llmc and
    return every donated cache tensor itself (written in place, no copy),
    and the static cache's tensors hold eager's values."""
    capi_or_skip()
    torch.manual_seed(0)
    model = FAMILIES[family]().eval().to("cuda", torch.bfloat16)
    compiled = _compiled(model, dynamic=False)
    ids = torch.randint(1, 1000, (2, 11), device="cuda")
    want = _generate(model, ids, cache_implementation="static", return_dict_in_generate=True)
    llmc.backend.reset()
    _generate(compiled, ids, cache_implementation="static")  # compiles
    got = _generate(compiled, ids, cache_implementation="static", return_dict_in_generate=True)
    assert torch.equal(got.sequences, want.sequences), \
        f"{got.sequences.tolist()} vs {want.sequences.tolist()}"
    assert all(r.llmc_runs > 0 for r in llmc.backend.reports()), \
        [str(r) for r in llmc.backend.reports()]
    for g, e in zip(_cache_tensors(got.past_key_values), _cache_tensors(want.past_key_values)):
        err = float((g.float() - e.float()).norm() / e.float().norm())
        assert err <= 1e-2, f"cache: relative error {err:.3e}"
    assert donated_outputs and all(donated_outputs), donated_outputs
