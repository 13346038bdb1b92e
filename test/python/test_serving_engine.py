"""llmc.ServingEngine: the continuous-batching engine through the C API
(llmc_serving_engine_*), on a tiny HF LLaMA's serving step.

On the CPU the engine runs the reference executor (with the GPU's bucketed
padding); with a GPU, the compiled step in token buckets with CUDA graphs.
Every request must produce HF's greedy tokens of that request alone; sampled
requests must produce the same tokens alone and in a batch; bad weights and
requests are errors naming them.
"""

import pytest
import torch

from conftest import capi_or_skip, gpu
from llmc import LlmcError
from llmc.serving import (ServingEngine, llama_serving_step_mlir,
                          llama_serving_step_weights)
from test_llmc_serve import _hf_greedy, _requests, _tiny_model


def _engine(model, device, step_kw=None, **kw):
    step = llama_serving_step_mlir(model.config, num_pages=48, page_size=4, max_pages=24,
                                   dtype=torch.float32, **(step_kw or {}))
    weights = [w.to(device) for w in llama_serving_step_weights(model)]
    return ServingEngine(step, weights, reference=device == "cpu", **kw)


def _serve(engine, requests):
    for r in requests:
        engine.add_request(r["id"], r["prompt"], max_new_tokens=r["max_new_tokens"],
                           temperature=r.get("temperature", 0.0), top_p=r.get("top_p", 1.0),
                           seed=r.get("seed", 0))
    return engine.run()


def _check_against_hf(device):
    capi_or_skip()
    model = _tiny_model(4)
    requests = _requests(8, 5)
    with _engine(model, device, max_batch_tokens=16, max_sequences=3) as engine:
        if device == "cuda":
            engine.warmup()
        done = _serve(engine, requests)
        stats = engine.stats()
    assert stats["partial_prefills"] > 0 and stats["requests_finished"] == len(requests), stats
    # Every request's pages are back; what stays used are the pages reserved
    # for the padding tokens (buckets 1, 2, 4, 8, 16: at most 7 tokens, 2
    # pages of 4).
    assert stats["kv_used_pages"] == 2 and 0 <= stats["kv_waste"] <= 1, stats
    model = model.to(device)
    for r in requests:
        f = done[r["id"]]
        assert f.reason == "max_new_tokens" and f.error == "", f
        assert f.tokens == _hf_greedy(model, r, device), f"request {r['id']}"


def test_reference_engine_equals_hf_greedy_per_request():
    _check_against_hf("cpu")


@gpu
def test_gpu_engine_equals_hf_greedy_per_request():
    _check_against_hf("cuda")


def _check_fp8_kv_cache(device):
    """An e4m3 KV cache (kv_cache_dtype, issue 20) through the engine: every
    request finishes with its max_new_tokens and no error, and most keep
    HF's greedy tokens (fp8 K/V move the logits by about 2%, enough to flip
    a near-tie of the random tiny model: 7 of 8 keep them on the reference
    executor; a broken cache keeps none)."""
    capi_or_skip()
    model = _tiny_model(4)
    requests = _requests(8, 5)
    with _engine(model, device, step_kw={"kv_cache_dtype": "fp8", "kv_scale": 1 / 16},
                 max_batch_tokens=16, max_sequences=3) as engine:
        if device == "cuda":
            engine.warmup()
        done = _serve(engine, requests)
        stats = engine.stats()
    assert stats["requests_finished"] == len(requests), stats
    model = model.to(device)
    same = 0
    for r in requests:
        f = done[r["id"]]
        assert f.reason == "max_new_tokens" and f.error == "", f
        assert len(f.tokens) == r["max_new_tokens"], f
        same += f.tokens == _hf_greedy(model, r, device)
    assert same >= 6, f"{same} of {len(requests)} requests kept HF's greedy tokens"


def test_reference_engine_serves_an_fp8_kv_cache():
    _check_fp8_kv_cache("cpu")


@gpu
def test_gpu_engine_serves_an_fp8_kv_cache():
    _check_fp8_kv_cache("cuda")


def test_sampled_requests_do_not_depend_on_the_batch():
    capi_or_skip()
    model = _tiny_model(6)
    requests = _requests(5, 7)
    for r in requests:
        r.update(temperature=0.9, top_p=0.8, seed=100 + r["id"])
    alone = {}
    for r in requests:
        with _engine(model, "cpu", max_batch_tokens=64, max_sequences=4) as engine:
            alone[r["id"]] = _serve(engine, [r])[r["id"]].tokens
    with _engine(model, "cpu", max_batch_tokens=8, max_sequences=2) as engine:
        together = _serve(engine, requests)
    assert {k: v.tokens for k, v in together.items()} == alone


def test_stop_tokens_end_a_request():
    capi_or_skip()
    model = _tiny_model(4)
    r = _requests(1, 5)[0]
    greedy = _hf_greedy(model, r, "cpu")
    with _engine(model, "cpu", max_batch_tokens=16, max_sequences=2) as engine:
        engine.add_request(0, r["prompt"], max_new_tokens=r["max_new_tokens"],
                           stop_tokens=[greedy[1]])
        f = engine.run()[0]
    stop_at = greedy.index(greedy[1])
    assert f.reason == "stop_token" and f.tokens == greedy[:stop_at + 1]


def test_bad_weights_and_requests_are_named_errors():
    capi_or_skip()
    model = _tiny_model(4)
    step = llama_serving_step_mlir(model.config, num_pages=48, page_size=4, max_pages=24,
                                   dtype=torch.float32)
    weights = llama_serving_step_weights(model)
    with pytest.raises(LlmcError, match="num_weights: the serving step takes"):
        ServingEngine(step, weights[:-1], reference=True)
    wrong = list(weights)
    wrong[3] = wrong[3].to(torch.bfloat16)
    with pytest.raises(LlmcError, match="weight 'arg13' \\(#3\\)"):
        ServingEngine(step, wrong, reference=True)
    wrong = list(weights)
    wrong[1] = wrong[1][:-1]
    with pytest.raises(LlmcError, match="weight 'arg11' \\(#1\\)"):
        ServingEngine(step, wrong, reference=True)
    with pytest.raises(LlmcError, match="options.max_sequences = 8"):
        ServingEngine(step, weights, reference=True, max_batch_tokens=4, max_sequences=8)
    with pytest.raises(LlmcError, match="not strictly ascending"):
        ServingEngine(step, weights, reference=True, max_batch_tokens=4, max_sequences=2,
                      token_buckets=[1, 4, 2])
    with pytest.raises(LlmcError, match="serving step @f: 1 arguments"):
        ServingEngine("func.func @f(%a: tensor<4xi32>) -> tensor<4xi32> {\n"
                      "  return %a : tensor<4xi32>\n}\n", [], reference=True)
    with ServingEngine(step, weights, reference=True, max_batch_tokens=8,
                       max_sequences=2) as engine:
        with pytest.raises(LlmcError, match="request 5 needs 90 \\+ 10 tokens"):
            engine.add_request(5, [1] * 90, max_new_tokens=10)
        with pytest.raises(LlmcError, match="97"):
            engine.add_request(6, [1, 200], max_new_tokens=2)
        with pytest.raises(LlmcError, match="prompt: expected >= 1 tokens"):
            engine.add_request(7, [], max_new_tokens=2)
        engine.add_request(8, [1, 2], max_new_tokens=2)
        with pytest.raises(LlmcError, match="8"):
            engine.add_request(8, [1, 2], max_new_tokens=2)  # id in use
        assert engine.run()[8].tokens == _hf_greedy(model, {"prompt": [1, 2],
                                                            "max_new_tokens": 2}, "cpu")
    with pytest.raises(ValueError, match="closed"):
        engine.step()
    with pytest.raises(ValueError, match="reads weights on the CPU"):
        ServingEngine(step, [w.to("meta") for w in weights], reference=True)


def test_misaligned_weights_are_copied_not_refused():
    """A weight that is a view into the middle of a flat buffer (not 16-byte
    aligned, which the runtime refuses) is passed as an aligned copy: the
    engine serves the same tokens as with the weights as allocated."""
    capi_or_skip()
    model = _tiny_model(4)
    step = llama_serving_step_mlir(model.config, num_pages=48, page_size=4, max_pages=24,
                                   dtype=torch.float32)
    weights = llama_serving_step_weights(model)
    moved = []
    for w in weights:
        flat = torch.empty(w.numel() + 8, dtype=w.dtype)
        v = flat[1:1 + w.numel()].view(w.shape)
        v.copy_(w)
        assert v.data_ptr() % 16 != 0
        moved.append(v)
    requests = _requests(3, 5)
    with ServingEngine(step, weights, reference=True, max_batch_tokens=16,
                       max_sequences=3) as engine:
        want = {k: f.tokens for k, f in _serve(engine, requests).items()}
    with ServingEngine(step, moved, reference=True, max_batch_tokens=16,
                       max_sequences=3) as engine:
        got = {k: f.tokens for k, f in _serve(engine, requests).items()}
    assert got == want and all(want.values())
