"""Hugging Face LLaMA, GPT-2 and Mistral (tiny configs, random weights, no
downloads) through torch.compile(backend="llmc").

CPU tests: the whole compile path runs (Dynamo -> AOTAutograd -> partition ->
import -> llmc_compile when the C API is there) and, because llmc executes
only on a GPU, the subgraphs fall back to PyTorch, so the outputs equal eager
exactly. GPU tests (skipped without one) compare llmc's execution with eager.
"""

import copy
import os
import warnings
from pathlib import Path

import pytest
import torch

import llmc.backend
from conftest import HAS_GPU, MODELS, REPO, capi_or_skip, gpu, tiny_llama


def _compile(model, **kw):
    return torch.compile(model, backend="llmc", **kw)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cpu_compile_path_runs_and_falls_back_to_eager_exactly(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    cm = _compile(model)
    x = torch.randint(0, 1000, (2, 7))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cm(x, use_cache=False).logits
        want = model(x, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rep = llmc.backend.last_report()
    assert rep is not None and rep.num_partitions > 0, str(rep)
    assert rep.num_llmc_nodes > 0 and rep.flops_fraction > 0.9, str(rep)
    assert not rep.compile_failures, str(rep)
    from llmc import _capi
    if _capi.available()[0]:
        assert rep.compiles == rep.num_partitions, str(rep)
        # What llmc made of each subgraph (issue 18): the executable's counts.
        assert sorted(rep.executables) == [f"llmc_{i}" for i in range(rep.num_partitions)]
        for sub, st in rep.executables.items():
            assert st["kernels"] > 0 and st["launches"] >= st["kernels"], st
            assert st["gemms"] > 0 and st["compile_s"] >= 0, st
            assert f"{sub}: {st['kernels']} kernels, {st['launches']} launches per call" \
                in str(rep), str(rep)


def test_backend_found_by_entry_point_without_import():
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("llmc") is llmc.backend.llmc_backend


def test_unknown_option_is_an_error():
    with pytest.raises(ValueError, match="unknown option"):
        llmc.backend.Options.from_dict({"fast": True})
    with pytest.raises(ValueError, match="bucket"):
        llmc.backend.Options.from_dict({"bucket": "sometimes"})


def test_dump_dir_writes_mlir(tmp_path):
    torch.manual_seed(0)
    model = tiny_llama().eval()
    cm = _compile(model, options={"dump_dir": str(tmp_path)})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm(torch.randint(0, 1000, (1, 5)), use_cache=False)
    files = list(tmp_path.glob("*.mlir"))
    assert files and all("func.func @llmc_" in f.read_text() for f in files)


def test_missing_library_warns_once_and_runs_eagerly(monkeypatch):
    from llmc import _capi
    monkeypatch.setattr(_capi, "candidate_paths", lambda: [Path("/nonexistent/libllmc.so")])
    _capi._reset_for_tests()
    try:
        torch.manual_seed(0)
        model = tiny_llama().eval()
        cm = _compile(model)
        x = torch.randint(0, 1000, (1, 6))
        with torch.no_grad(), pytest.warns(RuntimeWarning, match="libllmc.so"):
            got = cm(x, use_cache=False).logits
        torch.testing.assert_close(got, model(x, use_cache=False).logits, rtol=0, atol=0)
    finally:
        monkeypatch.undo()
        _capi._reset_for_tests()


def test_unsupported_op_stays_in_pytorch_and_is_reported():
    def f(x, w):
        return torch.atan(x @ w) @ w.t()
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _compile(f)(x, w)
    torch.testing.assert_close(got, f(x, w))
    rep = llmc.backend.last_report()
    assert rep.unsupported.get("aten.atan.default") == 1
    assert "aten.atan.default" in str(rep)


def test_training_backward_reductions_and_slice_scatters_compile_in_llmc():
    """The weight gradients of RMSNorm and the projections reduce over batch
    and sequence (aten.sum.dim_IntList over dims [0, 1]), the gradients of
    the q/k/v split and the RoPE halves are slice_scatters, cross-entropy
    gathers and scatters one class per row: they join llmc subgraphs and
    compile, instead of splitting the graphs."""
    torch.manual_seed(0)
    m = tiny_llama()
    x = torch.randint(0, 1000, (2, 9))
    llmc.backend.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _compile(m)(x, labels=x, use_cache=False).loss.backward()
    backward = [r for r in llmc.backend.reports() if r.graph.endswith("_backward")]
    forward = [r for r in llmc.backend.reports() if r.graph.endswith("_forward")]
    assert backward and forward, [r.graph for r in llmc.backend.reports()]
    rep = backward[-1]
    assert "aten.sum.dim_IntList" not in rep.unsupported, str(rep)
    assert "aten.slice_scatter.default" not in rep.unsupported, str(rep)
    # Cross-entropy: the NLL gather in the forward, its one-hot scatter in
    # the backward.
    assert "aten.scatter.value" not in rep.unsupported, str(rep)
    assert "aten.gather.default" not in forward[-1].unsupported, str(forward[-1])
    for r in (rep, forward[-1]):
        assert r.compiles > 0 and not r.compile_failures, str(r)


def test_training_cpu_graphs_partitioned_and_grads_equal_eager():
    """Forward and backward graphs both go through the partitioner (CPU: eager values)."""
    torch.manual_seed(0)
    m = tiny_llama()
    ref = copy.deepcopy(m)
    x = torch.randint(0, 1000, (2, 9))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = _compile(m)(x, labels=x, use_cache=False).loss
        loss.backward()
    ref_loss = ref(x, labels=x, use_cache=False).loss
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    kinds = {r.graph.split("_", 1)[1] for r in llmc.backend.reports()}
    assert {"forward", "backward"} <= kinds
    assert all(r.num_partitions > 0 for r in llmc.backend.reports())


# --- GPU ---------------------------------------------------------------------

def _need_llmc_gpu():
    capi_or_skip()


@gpu
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("seq", [1, 7, 128, 2048])
def test_gpu_logits_match_eager_bf16(name, batch, seq):
    _need_llmc_gpu()
    torch.manual_seed(0)
    model = MODELS[name]().eval().cuda().to(torch.bfloat16)
    cm = _compile(model)
    x = torch.randint(0, 1000, (batch, seq), device="cuda")
    with torch.no_grad():
        got = cm(x, use_cache=False).logits.float()
        want = model(x, use_cache=False).logits.float()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    rep = llmc.backend.last_report()
    assert rep.llmc_runs > 0 and not rep.compile_failures, str(rep)


@gpu
def test_gpu_training_step_tiny_llama():
    _need_llmc_gpu()
    torch.manual_seed(0)
    m = tiny_llama().cuda()
    ref = copy.deepcopy(m)
    x = torch.randint(0, 1000, (2, 16), device="cuda")
    loss = _compile(m)(x, labels=x, use_cache=False).loss
    loss.backward()
    ref_loss = ref(x, labels=x, use_cache=False).loss
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-4)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4)


@gpu
def test_gpu_sequence_sweep_dynamic_counts_compiles():
    _need_llmc_gpu()
    torch.manual_seed(0)
    model = tiny_llama().eval().cuda()
    cm = _compile(model, dynamic=True)  # dynamic_buckets="pow2", the default
    with torch.no_grad():
        for s in range(3, 41):
            x = torch.randint(0, 1000, (1, s), device="cuda")
            torch.testing.assert_close(cm(x, use_cache=False).logits,
                                       model(x, use_cache=False).logits, rtol=1e-4, atol=1e-4)
    rep = llmc.backend.last_report()
    # One Dynamo graph for every length; every partition is bucketed (16, 32,
    # 64): 3 compiles per partition for the 38 lengths, all run on llmc.
    assert len(llmc.backend.reports()) == 1, [str(r) for r in llmc.backend.reports()]
    assert rep.compiles == 3 * rep.num_partitions, str(rep)
    assert rep.llmc_runs == 38 * rep.num_partitions and rep.eager_runs == 0, str(rep)
    assert "buckets 16,32,64; 3 shape(s) compiled for 38 length(s)" in str(rep), str(rep)


@gpu
def test_gpu_training_step_check_localizes_mismatch(tmp_path):
    """The f32 training step of tiny LLaMA with check=True: every llmc
    partition of the forward and backward graphs is compared with PyTorch on
    the same inputs. Fails with the first mismatching partition (graph,
    subgraph, output, errors, and the llmc-run command on its dumped IR and
    inputs under tmp_path)."""
    _need_llmc_gpu()
    torch.manual_seed(0)
    m = tiny_llama().cuda()
    x = torch.randint(0, 1000, (2, 16), device="cuda")
    cm = _compile(m, options={"check": True, "dump_dir": str(tmp_path)})
    try:
        cm(x, labels=x, use_cache=False).loss.backward()
    except llmc.backend.CheckMismatch as e:
        pytest.fail(f"{e}\n" + "\n".join(str(r) for r in llmc.backend.reports()))
    reps = llmc.backend.reports()
    assert {"forward", "backward"} <= {r.kind for r in reps}
    assert all(r.llmc_runs > 0 for r in reps), "\n".join(map(str, reps))


@gpu
@pytest.mark.parametrize("head_dim", [80, 96])
@pytest.mark.parametrize("seq", [1, 5, 127, 129])
def test_gpu_case_c2_tiny_decoder(head_dim, seq):
    """Shared case C2: tied-embedding decoder, hidden 200, vocab 50257, RoPE,
    causal attention, SwiGLU, batch 3, bf16, through the plugin; logits within
    2e-2 of the float32 eager reference."""
    _need_llmc_gpu()
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    heads = {80: 2, 96: 2}[head_dim]
    cfg = LlamaConfig(vocab_size=50257, hidden_size=200, intermediate_size=536,
                      num_hidden_layers=1, num_attention_heads=heads, num_key_value_heads=heads,
                      head_dim=head_dim, tie_word_embeddings=True, max_position_embeddings=2048)
    ref = LlamaForCausalLM(cfg).eval().cuda()
    model = copy.deepcopy(ref).to(torch.bfloat16)
    x = torch.randint(0, 50257, (3, seq), device="cuda")
    with torch.no_grad():
        got = _compile(model)(x, use_cache=False).logits.float()
        want = ref(x, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_profiler_shows_each_llmc_subgraph_as_a_range():
    """Under torch.profiler every llmc subgraph call is a record_function
    range named llmc:<graph>:<subgraph> (with emit_nvtx, an NVTX range), so
    a trace attributes llmc's launches; outside the profiler no range is
    recorded."""
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    model = MODELS["llama"]().eval()
    cm = _compile(model)
    x = torch.randint(0, 1000, (1, 7))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm(x, use_cache=False)  # compiles
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            cm(x, use_cache=False)
    names = [e.name for e in prof.events() if e.name.startswith("llmc:")]
    rep = llmc.backend.last_report()
    assert names == [f"llmc:{rep.graph}:llmc_{i}" for i in range(rep.num_partitions)], names


def test_logs_and_tlparse_artifacts(monkeypatch, caplog):
    """TORCH_LOGS=llmc (the "llmc" logger at INFO) gets the partition report
    and one line per compile with what the executable holds; at DEBUG the
    imported IR; TORCH_TRACE's structured trace (tlparse) gets all three as
    artifacts named by graph and subgraph."""
    import inspect
    import logging
    trace_structured = torch._logging.trace_structured
    artifacts, compile_ids = {}, {}

    def trace(kind, metadata_fn=None, *, payload_fn=None, compile_id=None, **kw):  # Dynamo's too
        kw["compile_id"] = compile_id
        if kind == "artifact" and metadata_fn is not None:
            meta = metadata_fn()
            if str(meta.get("name", "")).startswith("llmc_"):
                artifacts[meta["name"]] = payload_fn()
                compile_ids[meta["name"]] = kw.get("compile_id")

    monkeypatch.setattr(torch._logging, "trace_structured", trace)
    torch.manual_seed(0)
    cm = _compile(MODELS["llama"]().eval())
    with caplog.at_level(logging.DEBUG, logger="llmc"), torch.no_grad(), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm(torch.randint(0, 1000, (1, 7)), use_cache=False)
    rep = llmc.backend.last_report()
    g = rep.graph
    assert f"llmc_partition_report_{g}" in artifacts, sorted(artifacts)
    assert artifacts[f"llmc_partition_report_{g}"].startswith(f"llmc partition report ({g})")
    from llmc import _capi
    if not _capi.available()[0]:
        return
    ir = artifacts[f"llmc_ir_{g}_llmc_0"]
    assert "func.func" in ir and "llm." in ir, ir[:200]
    summary = artifacts[f"llmc_compile_{g}_llmc_0"]
    assert summary.startswith(f"llmc: compiled {g}.llmc_0 for ") and \
        f"kernels {rep.executables['llmc_0']['kernels']}" in summary, summary
    # Written at the first call, outside Dynamo's compile: attributed to the
    # compile that made the subgraph (where this torch takes a compile_id).
    if "compile_id" in inspect.signature(trace_structured).parameters:
        assert compile_ids[f"llmc_compile_{g}_llmc_0"] is not None
    messages = [r.getMessage() for r in caplog.records if r.name == "llmc"]
    assert any(m == summary for m in messages), messages
    assert any(m.startswith(f"llmc: IR of {g}.llmc_0:") for m in messages), messages
    assert any(m.startswith(f"llmc partition report ({g})") for m in messages), messages
