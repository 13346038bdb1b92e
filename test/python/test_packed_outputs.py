"""Outputs a training forward saves for its backward are allocated in one
piece per dtype (_capi.Session's packed_outputs, backend._saved_outputs):
hundreds of torch.empty calls before the forward's first kernel cost ~9 µs
of host time each. CPU tests: the session's allocation and the pointers it
passes, and which outputs of a real training forward are packed."""
import ctypes
import operator
import warnings

import pytest
import torch

from llmc import _capi
from conftest import capi_or_skip


class _Lib:
    """The session's library calls without a GPU: records run's outputs."""

    def __init__(self):
        self.outputs = []

    def llmc_session_run(self, handle, in_arr, n_in, out_arr, n_out, stream):
        self.outputs.append([out_arr[k].data for k in range(n_out)])
        return None

    def llmc_session_invalidate_parameters(self, handle):
        return None


class _Exe:
    def __init__(self, inputs, outputs, aliases=None):
        self.inputs, self.outputs = inputs, outputs
        self.output_aliases = aliases or {}


def _session(outputs, packed, aliases=None, views=None, persistent=(), fixed=()):
    f32 = torch.float32
    exe = _Exe([_capi.TensorInfo(f32, (4,))], [_capi.TensorInfo(d, s) for d, s in outputs], aliases)
    s = _capi.Session.__new__(_capi.Session)
    lib = _Lib()
    s._setup(lib, exe, torch.device("cpu"), False, packed, views, persistent, fixed)
    s._handle = None
    s._stream = lambda: 0
    return s, lib


def _span(t):
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


@pytest.mark.parametrize("fast", [True, False])
def test_packed_outputs_share_one_allocation_per_dtype(fast):
    f32, bf16 = torch.float32, torch.bfloat16
    outputs = [(f32, (3, 5)), (bf16, (7,)), (f32, (2, 2)), (bf16, (4, 4)), (f32, (9,)), (bf16, (2,)),
               (f32, (4,)), (f32, (2, 64)), (f32, (3, 5)), (f32, (2, 64)), (bf16, (7,))]
    # Output 6 is a donated input's (an alias): never packed; output 4 is
    # not listed; 99 is no output. Packed: f32 0, 2, 7, 8, 9 (7 and 9 of one
    # shape of 512 bytes: one unbind; 0 and 8 of 60 bytes: each aligned),
    # bf16 1, 3, 5, 10.
    packed = [0, 1, 2, 3, 5, 7, 8, 9, 10]
    s, lib = _session(outputs, packed=packed + [6, 99], aliases={6: 0})
    assert s._pack[1] == set(packed)
    assert [st for _, _, st, _ in s._pack[0] if st] == [[([7, 9], 192, (2, 64))]]  # after 0, 8 and 2, 64 elements each
    x = torch.randn(4)
    outs = s.run_fast([x]) if fast else s.run([x])
    assert outs is not None
    for (dtype, shape), t in zip(outputs, outs):
        assert t.dtype == dtype and tuple(t.shape) == shape and t.is_contiguous()
    base = {o: outs[o].untyped_storage().data_ptr() for o in range(len(outs))}
    assert base[0] == base[2] == base[7] == base[8] == base[9] != base[1] == base[3] == base[5] == base[10]
    assert base[4] not in (base[0], base[1])  # not packed: its own allocation
    assert outs[6] is x  # the donated input holds its output
    for o in packed:
        assert (outs[o].data_ptr() - base[o]) % _capi.Session.PACK_ALIGN == 0
    spans = sorted(_span(outs[o]) for o in packed)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "packed outputs overlap"
    # The runtime gets the tensors' own addresses.
    assert lib.outputs[-1] == [t.data_ptr() for t in outs]
    # Every call allocates anew (the previous call's tensors stay valid).
    again = s.run_fast([x]) if fast else s.run([x])
    assert again[0].untyped_storage().data_ptr() != base[0]


@pytest.mark.parametrize("fast", [True, False])
def test_an_output_viewing_another_shares_its_memory_and_address(fast):
    """Saved tensors that are reshapes of one value: one allocation, the
    same address for both (the runtime then skips the executable's copy)."""
    f32, bf16 = torch.float32, torch.bfloat16
    outputs = [(bf16, (4, 6)), (bf16, (24,)), (bf16, (2, 12)), (f32, (24,)), (bf16, (5,)),
               (f32, (4,)), (bf16, (3, 8))]
    # 1 and 2 view 0 (packed with it); 3 (another dtype), 4 (another
    # size), 5 (a donated input's) and 6 -> 2 (a view of a view) are
    # refused: 6 stays an output of its own.
    s, lib = _session(outputs, packed=[0, 1, 2, 6], aliases={5: 0},
                      views={1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 2, 9: 0})
    assert s._views == {1: 0, 2: 0}
    x = torch.randn(4)
    outs = s.run_fast([x]) if fast else s.run([x])
    for (dtype, shape), t in zip(outputs, outs):
        assert t.dtype == dtype and tuple(t.shape) == shape and t.is_contiguous()
    assert outs[1].data_ptr() == outs[2].data_ptr() == outs[0].data_ptr()
    assert outs[0].untyped_storage().data_ptr() == outs[6].untyped_storage().data_ptr()  # packed
    assert len({outs[o].data_ptr() for o in (0, 3, 4, 6)}) == 4
    assert outs[5] is x
    ptrs = lib.outputs[-1]
    assert ptrs[1] == ptrs[2] == ptrs[0] and ptrs == [t.data_ptr() for t in outs]
    outs[0].copy_(torch.arange(24, dtype=bf16).view(4, 6))
    assert torch.equal(outs[2], torch.arange(24, dtype=bf16).view(2, 12))


def test_nothing_packed_without_a_list_or_with_one_output_of_a_dtype():
    f32, bf16 = torch.float32, torch.bfloat16
    s, _ = _session([(f32, (3,)), (bf16, (3,))], packed=[0, 1])
    assert s._pack == ([], set())
    s, _ = _session([(f32, (3,)), (f32, (3,))], packed=[])
    assert s._pack == ([], set())


def test_a_training_forward_packs_its_saved_tensors_not_the_users_outputs(created_subgraphs):
    """Tiny LLaMA training step on the CPU (llmc compiles, PyTorch runs): the
    forward subgraph's saved outputs are the ones the backward reads, the
    logits (the user's output) are not among them, and the backward packs
    nothing. With AOTAutograd's CSE off, so that the forward saves the q, k
    and v projections' input as three views of one value (the backend's
    default partition runs the CSE and saves it once:
    test_training_graphs.py::test_default_partition_saves_each_forward_value_once),
    the views are packed as one memory."""
    capi_or_skip()
    from conftest import tiny_llama
    from torch._functorch import config as functorch_config

    subs = created_subgraphs
    torch._dynamo.reset()
    model = tiny_llama()
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    cm = torch.compile(model, backend="llmc")
    with warnings.catch_warnings(), functorch_config.patch(cse=False):
        warnings.simplefilter("ignore")
        logits = cm(ids, use_cache=False).logits
        logits.float().sum().backward()
    fwd = [s for s in subs if s.name.endswith("forward") or "_forward" in s.report.graph]
    bwd = [s for s in subs if "_backward" in s.report.graph]
    assert fwd and bwd
    f = fwd[0]
    assert f.saved, "no saved tensors found"
    user = [k for k, m in enumerate(f.out_metas)
            if isinstance(m, torch.Tensor) and tuple(m.shape) == tuple(logits.shape)]
    assert user and not (set(user) & f.saved)
    assert len(f.saved) == len(f.out_metas) - len(user)
    assert all(not s.saved and not s.saved_views for s in bwd)
    # The q, k and v projections' input is saved three times, as views of
    # the normed hidden states: one memory.
    assert f.saved_views and set(f.saved_views) | set(f.saved_views.values()) <= f.saved
    assert f.imported is not None
    packed = f._packed_outputs(f.imported)
    results = {i for kind, i in f.imported.outputs if kind == "out"}
    assert packed and set(packed) <= results
    views = f._output_views(f.imported)
    assert len(views) >= 2 * model.config.num_hidden_layers, views
    for a, b in views.items():
        ma, mb = f.out_metas[[k for k, o in enumerate(f.imported.outputs) if o == ("out", a)][0]], \
            f.out_metas[[k for k, o in enumerate(f.imported.outputs) if o == ("out", b)][0]]
        assert ma.dtype == mb.dtype and ma.numel() == mb.numel()


def test_no_saved_outputs_are_assumed_when_the_graph_threads_effect_tokens():
    """Effect tokens come first among a forward's outputs and are not in
    ViewAndMutationMeta.num_forward: the saved-tensor boundary is unknown,
    so nothing is packed. Without tokens the same graph's outputs from
    num_forward on are found."""
    import types
    import llmc.backend as B

    def f(x):
        return x + 1, x * 2, x - 3

    # One submodule computing all three, called as the partitioner does.
    sub = torch.fx.symbolic_trace(f)
    g = torch.fx.Graph()
    x = g.placeholder("x")
    call = g.call_module("llmc_0", (x,))
    outs = tuple(g.call_function(operator.getitem, (call, i)) for i in range(3))
    g.output(outs)
    fused = torch.fx.GraphModule({"llmc_0": sub}, g)

    def saved(tokens):
        meta = types.SimpleNamespace(num_forward=1, tokens=tokens)
        ctx = torch._guards.TracingContext(None)
        ctx.fw_metadata = meta
        with torch._guards.tracing(ctx):
            return B._saved_outputs(fused, {"llmc_0"}, "forward")

    assert saved({}) == {"llmc_0": {1, 2}}
    assert saved({0: torch.empty(0)}) == {}


@pytest.mark.parametrize("fast", [True, False])
def test_persistent_outputs_are_one_tensor_for_every_call(fast):
    """persistent_outputs (a mutated input's new value that AOTAutograd
    copies back at once): the same tensor, at the same address, on every
    call; the other outputs are fresh. A donated input's output, a view and
    an output another one views are never persistent; a persistent output
    is not packed."""
    i64, f32 = torch.int64, torch.float32
    outputs = [(i64, ()), (f32, (4,)), (i64, ()), (f32, (4,)), (f32, (4,)), (f32, (4,))]
    # 3 is a donated input's, 4 views 5; 99 is no output; 0 is also listed
    # as packed.
    s, lib = _session(outputs, packed=[0, 1], aliases={3: 0}, views={4: 5},
                      persistent=[0, 2, 3, 4, 5, 99])
    assert set(s._persistent) == {0, 2}
    assert s._pack == ([], set())  # 1 is the only packed f32 left
    x = torch.randn(4)
    calls = [s.run_fast([x]) if fast else s.run([x]) for _ in range(3)]
    for outs in calls[1:]:
        assert outs[0] is calls[0][0] and outs[2] is calls[0][2]
        assert outs[1] is not calls[0][1]
    if fast:
        assert [o[0] for o in lib.outputs] == [calls[0][0].data_ptr()] * 3
        assert [o[2] for o in lib.outputs] == [calls[0][2].data_ptr()] * 3


def test_persistent_outputs_are_not_shared_between_threads():
    """Two calls in flight at once (two threads) must not share a persistent
    output: the second could overwrite it before the first one's copy back
    has read it. Each thread keeps its own, call after call."""
    import threading
    i64 = torch.int64
    s, _ = _session([(i64, ()), (i64, ())], packed=[], persistent=[0])
    x = torch.randn(4)
    got = {}
    # Both threads stay alive until both have called: a thread's identity
    # (the session's key) may be reused once the thread has ended.
    both_called = threading.Barrier(2)

    def call(name):
        got[name] = [s.run_fast([x])[0] for _ in range(2)]
        both_called.wait(timeout=60)

    threads = [threading.Thread(target=call, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    main = [s.run_fast([x])[0] for _ in range(2)]
    for calls in (got["a"], got["b"], main):
        assert calls[0] is calls[1]
    assert got["a"][0] is not got["b"][0] and main[0] is not got["a"][0]


def test_a_fixed_input_that_moves_is_reported():
    """fixed_inputs (mutated buffers left unstaged for the CUDA graphs):
    the session says when one is at another address than in the previous
    call, so that the caller can stage it instead."""
    f32 = torch.float32
    s, _ = _session([(f32, (4,))], packed=[], fixed=[0])
    x = torch.randn(4)
    for _ in range(3):
        s.run_fast([x])
    assert not s.fixed_input_moved
    s.run_fast([torch.randn(4)])
    assert s.fixed_input_moved


def test_the_subgraph_stages_a_copied_back_buffer_once_it_moved():
    """LlmcSubgraph._moved_fixed_input: after a call in which a copied-back
    buffer moved, its inputs count as staged and the session is dropped (a
    new one, with them staged, is made on the next call)."""
    import types
    import llmc.backend as B
    sub = B.LlmcSubgraph.__new__(B.LlmcSubgraph)
    torch.nn.Module.__init__(sub)
    sub.name = "llmc_0"
    sub.report = types.SimpleNamespace(notes=[])
    sub.copied_back_inputs = {3, 5}
    entry = types.SimpleNamespace(session=types.SimpleNamespace(fixed_input_moved=False))
    sub._last = entry
    sub._moved_fixed_input(entry)
    assert sub.copied_back_inputs == {3, 5} and entry.session is not None
    entry.session.fixed_input_moved = True
    sub._moved_fixed_input(entry)
    assert sub.copied_back_inputs == set() and entry.session is None and sub._last is None
    assert "moved between calls" in sub.report.notes[0]
