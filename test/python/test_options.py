"""torch.compile(backend="llmc", options=...) validates every option value
when the backend is first called: a bad value is a ValueError listing what
is allowed, never a compile error turned into a warning and a fallback to
eager (which left the model silently unaccelerated)."""

import warnings

import pytest
import torch

from llmc import _capi
from llmc.backend import FP8_SCALINGS, PRECISIONS, WEIGHT_ONLY, Options


def test_precision_values():
    for p in PRECISIONS + (None,):
        assert Options.from_dict({"precision": p}).precision == p
    for bad in ("fp7", "FP16", "int8", "", 16):
        with pytest.raises(ValueError, match=r"precision must be one of fp32, bf16, fp16, fp8"):
            Options.from_dict({"precision": bad})


def test_weight_only_values():
    for w in WEIGHT_ONLY + (None,):
        assert Options.from_dict({"weight_only": w}).weight_only == w
    assert Options.from_dict({"weight_only": "int4"}).compiler_options() == {"weight_only": "int4"}
    assert "weight_only" not in Options.from_dict({"weight_only": "none"}).compiler_options()
    for bad in ("int3", "INT8", "fp8", "", 8):
        with pytest.raises(ValueError, match=r"weight_only must be one of none, int8, int4"):
            Options.from_dict({"weight_only": bad})
    with pytest.raises(ValueError, match=r"weight_only and precision='fp8'"):
        Options.from_dict({"weight_only": "int8", "precision": "fp8"})


def test_fp8_scaling_values():
    assert Options.from_dict({}).fp8_scaling == "tensor"
    for s in FP8_SCALINGS:
        o = Options.from_dict({"precision": "fp8", "fp8_scaling": s})
        assert o.fp8_scaling == s
    assert Options.from_dict({"precision": "fp8", "fp8_scaling": "row"}).compiler_options() == \
        {"precision": "fp8", "fp8_scaling": "row"}
    assert "fp8_scaling" not in Options.from_dict({"precision": "fp8"}).compiler_options()
    for bad in ("rows", "block", "", None, 1):
        with pytest.raises(ValueError, match=r"fp8_scaling must be one of tensor, row"):
            Options.from_dict({"precision": "fp8", "fp8_scaling": bad})
    with pytest.raises(ValueError, match=r"fp8_scaling='row' needs precision='fp8'"):
        Options.from_dict({"precision": "bf16", "fp8_scaling": "row"})


def test_compiler_checks_fp8_scaling():
    """The C API's compiler options take fp8_scaling and name a bad value."""
    try:
        _capi.load()
    except Exception as e:  # LibraryNotFound
        pytest.skip(f"libllmc.so not found: {e}")
    _capi.Compiler({"precision": "fp8", "fp8_scaling": "row"})
    with pytest.raises(_capi.LlmcError, match=r"fp8_scaling: expected tensor or row, found 'rows'"):
        _capi.Compiler({"precision": "fp8", "fp8_scaling": "rows"})


def test_arch_values():
    for a in ("sm_90a", "sm_80", "sm_100f", "compute_90"):
        assert Options.from_dict({"arch": a}).arch == a
    # The C API's rule (rt::IsValidArch): no leading zero, 'a' from sm_90
    # and 'f' from sm_100 on; such values would only fail in the compiler,
    # a silent fallback to eager.
    for bad in ("sm90", "gfx90a", "sm_9x", "", 90, "sm_9", "sm_090", "sm_80a", "sm_90f"):
        with pytest.raises(ValueError, match="arch must look like sm_90a"):
            Options.from_dict({"arch": bad})


def test_torch_compile_raises_instead_of_falling_back():
    f = torch.compile(lambda x: torch.relu(x) * 2.0, backend="llmc",
                      options={"precision": "fp7"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "falling back" warning either
        with pytest.raises(Exception, match=r"precision must be one of .*got 'fp7'"):
            f(torch.randn(4, 8))


def test_mode_reduce_overhead_turns_cuda_graphs_on(monkeypatch):
    """torch.compile(mode="reduce-overhead") means CUDA graphs (torch.compile
    takes mode or options, not both); an unknown mode is a ValueError, not
    silently ignored."""
    import llmc.backend as backend
    seen = []
    compile_graph = backend._compile_graph

    def spy(gm, example_inputs, *, options, kind):
        seen.append(options.cuda_graphs)
        return compile_graph(gm, example_inputs, options=options, kind=kind)

    monkeypatch.setattr(backend, "_compile_graph", spy)
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mode, options, want in (("reduce-overhead", None, True), (None, None, False),
                                    (None, {"cuda_graphs": True}, True)):
            torch._dynamo.reset()
            f = torch.compile(lambda t: torch.relu(t) * 2.0, backend="llmc", mode=mode,
                              options=options)
            torch.testing.assert_close(f(x), torch.relu(x) * 2.0)
            assert seen[-1] is want, (mode, options, seen)
        torch._dynamo.reset()
        f = torch.compile(lambda t: torch.relu(t) * 2.0, backend="llmc", mode="max-autotune")
        with pytest.raises(Exception, match="mode='max-autotune': expected 'default' or "
                                            "'reduce-overhead'"):
            f(x)


def test_weight_only_compiles_a_model():
    """weight_only reaches the compiler: a tiny LLaMA whose projections have
    K % 128 == 0 compiles with int8 and int4 weights (what it does to the
    executable: test/unit/capi/PrecisionTest.cpp); on a CPU it then runs in
    PyTorch."""
    from conftest import capi_or_skip
    import llmc.backend
    capi_or_skip()
    torch.manual_seed(0)
    from transformers import LlamaConfig, LlamaForCausalLM
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)).eval()
    ids = torch.randint(1, 1000, (1, 9))
    with torch.no_grad():
        want = model(ids).logits
    for mode in ("int8", "int4"):
        torch._dynamo.reset()
        llmc.backend.reset()
        cm = torch.compile(model, backend="llmc", options={"weight_only": mode})
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = cm(ids).logits
        torch.testing.assert_close(got, want)  # PyTorch ran it: no GPU here
        reps = llmc.backend.reports()
        assert reps and all(r.compiles >= 1 and not r.compile_failures for r in reps), \
            [str(r) for r in reps]
        # The weights are quantized once, in the preparation segment.
        assert all(st["prepare_launches"] > 0 for r in reps for st in r.executables.values()), \
            [r.executables for r in reps]


def test_strict_values(monkeypatch):
    assert Options.from_dict({}).strict is False
    assert Options.from_dict({"strict": True}).strict is True
    monkeypatch.setenv("LLMC_STRICT", "1")
    assert Options.from_dict({}).strict is True
    assert Options.from_dict({"strict": False}).strict is False  # the option wins
    monkeypatch.setenv("LLMC_STRICT", "yes")
    with pytest.raises(ValueError, match="LLMC_STRICT must be 0 or 1"):
        Options.from_dict({})
    monkeypatch.delenv("LLMC_STRICT")
    with pytest.raises(ValueError, match="strict must be False or True"):
        Options.from_dict({"strict": "1"})


def test_strict_raises_where_llmc_would_fall_back(monkeypatch):
    """A subgraph that fails to compile runs in PyTorch with a warning; with
    strict=True the call raises FallbackRefused naming the subgraph and the
    compiler's message instead."""
    from conftest import capi_or_skip
    import llmc.backend as backend
    capi = capi_or_skip()

    def failing_compile(self, run_args):
        raise capi.LlmcError(12, "codegen: no lowering for 'llm.frobnicate' (test)")

    monkeypatch.setattr(backend.LlmcSubgraph, "_compile", failing_compile)
    x = torch.randn(4, 8)
    for strict in (False, True):
        torch._dynamo.reset()
        backend.reset()
        f = torch.compile(lambda t: torch.relu(t) * 2.0, backend="llmc",
                          options={"strict": strict})
        if not strict:
            with pytest.warns(RuntimeWarning, match="runs in PyTorch: .*llm.frobnicate"):
                torch.testing.assert_close(f(x), torch.relu(x) * 2.0)
            continue
        # Static shapes: compiled inside the backend call, so the failure
        # comes out of torch.compile as BackendCompilerFailed (as an
        # Inductor failure does), with llmc's diagnostic.
        for _ in range(2):  # every call, not only the first
            with pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                               match=r"llmc \(strict\): subgraph llmc_0 of .* cannot run in llmc: "
                                     r"(.|\n)*llm.frobnicate") as info:
                f(x)
            assert isinstance(info.value.inner_exception, backend.FallbackRefused)


def test_strict_dynamic_shapes_raise_from_the_call(monkeypatch):
    """A subgraph traced with dynamic shapes compiles on its first call: with
    strict=True a compile failure raises FallbackRefused from that call (and
    every later one) rather than from torch.compile's backend call."""
    from conftest import capi_or_skip
    import llmc.backend as backend
    capi = capi_or_skip()

    def failing_compile(self, run_args):
        raise capi.LlmcError(12, "codegen: no lowering for 'llm.frobnicate' (test)")

    monkeypatch.setattr(backend.LlmcSubgraph, "_compile", failing_compile)
    torch._dynamo.reset()
    backend.reset()
    f = torch.compile(lambda t: torch.relu(t) * 2.0, backend="llmc", dynamic=True,
                      options={"strict": True, "dynamic_buckets": "none"})
    for n in (5, 7):
        with pytest.raises(backend.FallbackRefused, match=r"llmc \(strict\): .*llm.frobnicate"):
            f(torch.randn(n, 8))
