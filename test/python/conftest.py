"""Shared fixtures of the llmc Python tests.

CPU machines (CI) run the import, partition and compile paths; execution on
llmc needs a GPU and is in tests marked `gpu` (skipped without one).
"""

import os
import subprocess
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
LLMC_OPT = Path(os.environ.get("LLMC_OPT", REPO / "build" / "bin" / "llmc-opt"))
if not LLMC_OPT.exists() and (REPO / "dist" / "bin" / "llmc-opt").exists():
    LLMC_OPT = REPO / "dist" / "bin" / "llmc-opt"

HAS_GPU = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (llmc executes only there; "
                                             "CPU runs check import + compile only)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _fresh_state():
    import llmc.backend
    torch._dynamo.reset()
    llmc.backend.reset()
    yield
    torch._dynamo.reset()


def llmc_opt_verify(text: str):
    """Parses and verifies `text` with llmc-opt; fails the test on errors."""
    if not LLMC_OPT.exists():
        pytest.skip(f"{LLMC_OPT} not built (cmake --build build)")
    r = subprocess.run([str(LLMC_OPT), "-"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, f"llmc-opt rejected the IR:\n{r.stderr}\n--- IR ---\n{text}"
    return r.stdout


def capi_or_skip():
    from llmc import _capi
    ok, why = _capi.available()
    if not ok:
        pytest.skip(f"C API unavailable: {why}")
    return _capi


def tiny_llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=176,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, **kw)
    return LlamaForCausalLM(cfg)


def tiny_gpt2(**kw):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=2048,
                     bos_token_id=0, eos_token_id=0, **kw)
    return GPT2LMHeadModel(cfg)


def tiny_mistral(**kw):
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(vocab_size=1000, hidden_size=64, intermediate_size=176,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=2048, sliding_window=None, **kw)
    return MistralForCausalLM(cfg)


MODELS = {"llama": tiny_llama, "gpt2": tiny_gpt2, "mistral": tiny_mistral}


def record_instances(monkeypatch, cls) -> list:
    """A list that receives every instance of `cls` created from now on
    (its __init__ spied on for the test)."""
    made = []
    init = cls.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(cls, "__init__", spy)
    return made


@pytest.fixture
def created_subgraphs(monkeypatch):
    """Every llmc.backend.LlmcSubgraph the test creates, in order."""
    import llmc.backend
    return record_instances(monkeypatch, llmc.backend.LlmcSubgraph)


def _spy_donations(monkeypatch, updates: bool):
    import llmc.backend
    returned_inputs = []
    forward = llmc.backend.LlmcSubgraph.forward

    def spy(self, *args):
        out = forward(self, *args)
        outs = out if isinstance(out, tuple) else (out,)
        for a, k in self.donate.items():
            if (a in self.updates) == updates:
                returned_inputs.append(outs[k] is args[a])
        return out

    monkeypatch.setattr(llmc.backend.LlmcSubgraph, "forward", spy)
    return returned_inputs


@pytest.fixture
def donated_outputs(monkeypatch):
    """A list that records, for every input of every llmc subgraph call
    donated as a KV cache (an index_put onto it), whether the subgraph
    returned the input tensor itself as its output (written in place, no
    copy)."""
    return _spy_donations(monkeypatch, updates=False)


@pytest.fixture
def updated_outputs(monkeypatch):
    """The same for the inputs donated for an in-place update
    (llm.aliasing_output: an optimizer's parameters and moments)."""
    return _spy_donations(monkeypatch, updates=True)
