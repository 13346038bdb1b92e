"""llmc-serve (issue 19's engine as a program) against HF greedy decoding.

A tiny HF LLaMA (f32, GQA) is generated into a serving step
(llmc.serving.llama_serving_step_mlir), its weights written for
`llmc-serve --weights`, and a request file with prompts of different lengths
served with continuous batching and chunked prefill. Every request's tokens
must equal HF's greedy `generate()` of that request alone. On the CPU the
step runs on the reference executor (with the GPU's bucketed padding); with
a GPU, on the compiled CUDA step (`rt::SessionStepModel`: token buckets,
CUDA graphs), where the test also checks that the steps replay graphs.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import REPO, gpu

LLMC_SERVE = Path(os.environ.get("LLMC_SERVE", REPO / "build" / "bin" / "llmc-serve"))
if not LLMC_SERVE.exists() and (REPO / "dist" / "bin" / "llmc-serve").exists():
    LLMC_SERVE = REPO / "dist" / "bin" / "llmc-serve"


def _need_llmc_serve():
    if not LLMC_SERVE.exists():
        pytest.skip(f"{LLMC_SERVE} not built (cmake --build build --target llmc-serve)")


def _tiny_model(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=176,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


def _serve(tmp_path: Path, model, requests, backend: str, extra=(), **step_kw):
    from llmc.serving import (llama_serving_step_mlir, llama_serving_step_weights,
                              write_serving_step_weights)
    cfg = model.config
    step = tmp_path / "step.mlir"
    step.write_text(llama_serving_step_mlir(cfg, num_pages=48, page_size=4, max_pages=24,
                                            dtype=torch.float32, **step_kw))
    weights = tmp_path / "weights"
    weights.mkdir(exist_ok=True)
    write_serving_step_weights(llama_serving_step_weights(model), weights,
                               6 + 2 * cfg.num_hidden_layers)
    req = tmp_path / "requests.jsonl"
    req.write_text("".join(json.dumps(r) + "\n" for r in requests))
    out, summary = tmp_path / f"out-{backend}.jsonl", tmp_path / f"summary-{backend}.json"
    cmd = [str(LLMC_SERVE), str(step), f"--backend={backend}", "--requests", str(req),
           "--weights", str(weights), "--out", str(out), "--summary", str(summary),
           *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    tokens = {d["id"]: d["tokens"] for d in map(json.loads, out.read_text().splitlines())}
    return tokens, json.loads(summary.read_text())


def _requests(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(1, 30, (1,), generator=g))
        out.append({"id": i, "prompt": torch.randint(0, 97, (length,), generator=g).tolist(),
                    "max_new_tokens": int(torch.randint(3, 16, (1,), generator=g))})
    return out


def _hf_greedy(model, request, device):
    ids = torch.tensor([request["prompt"]], device=device)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=request["max_new_tokens"], do_sample=False,
                             min_new_tokens=request["max_new_tokens"], eos_token_id=None,
                             pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


def test_reference_serving_equals_hf_greedy_per_request(tmp_path):
    """CPU: the reference executor with bucketed padding, a token budget that
    chunks the prompts and fewer running slots than requests."""
    _need_llmc_serve()
    model = _tiny_model(0)
    requests = _requests(6, 1)
    tokens, summary = _serve(tmp_path, model, requests, "ref",
                             ["--max-batch-tokens", "16", "--max-seqs", "3",
                              "--token-buckets", "1,2,4,8,16"])
    assert summary["failed"] == 0 and summary["partial_prefills"] > 0, summary
    for r in requests:
        assert tokens[r["id"]] == _hf_greedy(model, r, "cpu"), f"request {r['id']}"


def test_reference_serving_with_an_fp8_kv_cache(tmp_path):
    """CPU: the same requests over an fp8 (e4m3) KV cache (kv_cache_dtype,
    issue 20). The pages take a quarter of the float32 step's bytes, every
    request finishes, and greedy decoding keeps most requests' tokens: fp8
    K/V change the logits by about 2% (test_serving_step_mlir), which flips
    a greedy choice only where two logits are that close (here the random
    tiny model keeps 5 of 6 requests whole; a broken cache keeps none)."""
    _need_llmc_serve()
    model = _tiny_model(0)
    requests = _requests(6, 1)
    flags = ["--max-batch-tokens", "16", "--max-seqs", "3", "--token-buckets", "1,2,4,8,16"]
    (tmp_path / "f32").mkdir()
    (tmp_path / "fp8").mkdir()
    exact, summary32 = _serve(tmp_path / "f32", model, requests, "ref", flags)
    tokens, summary8 = _serve(tmp_path / "fp8", model, requests, "ref", flags,
                              kv_cache_dtype="fp8", kv_scale=1 / 16)
    assert summary8["failed"] == 0, summary8
    assert 4 * summary8["kv"]["bytes_per_page_all_layers"] == \
        summary32["kv"]["bytes_per_page_all_layers"], (summary8["kv"], summary32["kv"])
    same = [r["id"] for r in requests if tokens[r["id"]] == exact[r["id"]]]
    assert len(same) >= 4, (tokens, exact)
    for r in requests:
        assert len(tokens[r["id"]]) == r["max_new_tokens"], r


@gpu
def test_gpu_serving_equals_hf_greedy_per_request(tmp_path):
    """GPU: the compiled step in token buckets, replayed as CUDA graphs."""
    _need_llmc_serve()
    model = _tiny_model(2)
    requests = _requests(12, 3)
    tokens, summary = _serve(tmp_path, model, requests, "cuda",
                             ["--max-batch-tokens", "32", "--max-seqs", "6"])
    assert summary["failed"] == 0 and summary["partial_prefills"] > 0, summary
    graphs = summary["cuda_graphs"]
    assert graphs["disabled_reason"] == "" and graphs["replays"] > 0, graphs
    model = model.cuda()
    for r in requests:
        assert tokens[r["id"]] == _hf_greedy(model, r, "cuda"), f"request {r['id']}"
