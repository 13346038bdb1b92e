"""The plugin's parameter guard: llmc prepares parameter-only work (weight
casts, fp8 scaling, quantization) once per set of parameter pointers, so the
session must make a pointer identify the contents it was prepared from: an
in-place update at the same address must make preparation run again, and a
new tensor (or a new contiguous copy of a non-contiguous parameter) must never
reach the runtime at the address of the tensor it prepared from.

The runtime is stood in for by `_Runtime`, which follows
rt::ParameterGuard (runtime/include/llmc/runtime/ParameterGuard.h): it
prepares (here: snapshots the bytes of every parameter input) on the first
run, after an invalidation and when a parameter pointer differs from the last
preparation's, and "computes" its output from the snapshot; so a stale
preparation shows up as a wrong output."""
import ctypes

import pytest
import torch

from llmc import _capi


class _Runtime:
    """llmc_session_run / llmc_session_invalidate_parameters of the runtime,
    for an executable whose output 0 is its (only) parameter input as
    prepared."""

    def __init__(self, params):
        self.params = params
        self.valid = False
        self.key = None
        self.snapshot = None
        self.invalidations = 0
        self.preparations = 0
        self.pointers = []  # the parameter pointers of every run

    def llmc_session_invalidate_parameters(self, handle):
        self.invalidations += 1
        self.valid = False
        return None  # NULL status: success

    def llmc_session_run(self, handle, in_arr, n_in, out_arr, n_out, stream):
        key = tuple(in_arr[k].data for k in self.params)
        self.pointers.append(key)
        if not self.valid or key != self.key:
            t = in_arr[self.params[0]]
            n = 4
            for j in range(t.rank):
                n *= t.shape[j]
            self.snapshot = ctypes.string_at(t.data, n)
            self.key, self.valid = key, True
            self.preparations += 1
        ctypes.memmove(out_arr[0].data, self.snapshot, len(self.snapshot))
        return None


class _Exe:
    def __init__(self, inputs, outputs):
        self.inputs, self.outputs = inputs, outputs


def _session(n=16, always_prepare=False):
    """A Session over an executable (x [n], w [n, n] parameter) -> [n, n]
    whose runtime is _Runtime."""
    f32 = torch.float32
    exe = _Exe([_capi.TensorInfo(f32, (n,)), _capi.TensorInfo(f32, (n, n), parameter=True)],
               [_capi.TensorInfo(f32, (n, n))])
    s = _capi.Session.__new__(_capi.Session)
    lib = _Runtime([1])
    s._setup(lib, exe, torch.device("cpu"), always_prepare)
    s._handle = None
    s._stream = lambda: 0
    return s, lib


def _run(s, x, w):
    (out,) = s.run([x, w])
    return out


def test_in_place_update_of_a_parameter_invalidates():
    s, rt = _session()
    w, x = torch.randn(16, 16), torch.randn(16)
    assert torch.equal(_run(s, x, w), w)
    assert torch.equal(_run(s, torch.randn(16), w), w)  # new activation, same weight
    assert rt.invalidations == 0 and rt.preparations == 1
    with torch.no_grad():
        w.add_(1.0)  # an optimizer step: same pointer, new version
    assert torch.equal(_run(s, torch.randn(16), w), w)
    assert rt.invalidations == 1 and rt.preparations == 2
    assert torch.equal(_run(s, torch.randn(16), w), w)  # unchanged since
    assert rt.invalidations == 1 and rt.preparations == 2


def test_activation_in_place_update_does_not_invalidate():
    s, rt = _session()
    w, x = torch.randn(16, 16), torch.randn(16)
    _run(s, x, w)
    x.add_(1.0)  # not a parameter: nothing to prepare again
    _run(s, x, w)
    assert rt.invalidations == 0 and rt.preparations == 1


def test_fresh_parameter_at_a_reused_address_is_prepared_again():
    """A new tensor each call (freed after it), each one version 0: the
    allocator would hand the freed block to the next one, and the runtime
    would see the pointer it prepared from. The session keeps the last
    call's parameters alive, so every new one lands elsewhere."""
    s, rt = _session()
    x = torch.randn(16)
    for i in range(6):
        w = torch.full((16, 16), float(i))
        assert torch.equal(_run(s, x, w), w), f"call {i} used stale prepared weights"
        del w
    assert rt.preparations == 6
    assert rt.invalidations == 0  # the runtime saw a new pointer each time


def test_non_contiguous_parameter_copies_are_not_confused():
    """A layer compiled once and applied to several layers' transposed
    weights: each call passes a contiguous copy; copies of different
    weights must never share the address the runtime prepared from."""
    s, rt = _session()
    x = torch.randn(16)
    weights = [torch.randn(16, 16) for _ in range(3)]
    for i in range(9):
        w = weights[i % 3].t()
        assert not w.is_contiguous()
        assert torch.equal(_run(s, x, w), w.contiguous()), f"call {i}: stale prepared weights"
    assert rt.preparations == 9


def test_unchanged_non_contiguous_parameter_is_copied_and_prepared_once():
    s, rt = _session()
    x = torch.randn(16)
    w = torch.randn(16, 16).t()
    for _ in range(3):
        assert torch.equal(_run(s, x, w), w.contiguous())
    assert rt.preparations == 1
    assert len(set(rt.pointers)) == 1  # the kept copy is passed again
    with torch.no_grad():
        w.mul_(2.0)  # in place through the view: the copy is stale
    assert torch.equal(_run(s, x, w), w.contiguous())
    assert rt.preparations == 2


def test_same_storage_other_strides_is_another_parameter():
    """w and w.t() of a square tensor share pointer and version."""
    s, rt = _session()
    x = torch.randn(16)
    base = torch.randn(16, 16)
    v = base.t()
    assert torch.equal(_run(s, x, v), v.contiguous())
    w = torch.as_strided(base, (16, 16), (1, 16))  # == base.t() again, new object
    assert torch.equal(_run(s, x, w), w.contiguous())
    u = torch.as_strided(base, (16, 16), (16, 1)).t().t().t()  # same strides, another view
    assert torch.equal(_run(s, x, u), u.contiguous())
    assert rt.preparations == 1
    s2, rt2 = _session()
    _run(s2, x, base)
    assert torch.equal(_run(s2, x, base.t()), base.t().contiguous())
    assert rt2.preparations == 2


def test_inference_tensor_parameter_always_invalidates():
    """Inference tensors have no version counter: an in-place update cannot
    be seen, so the same pointer never counts as unchanged."""
    s, rt = _session()
    with torch.inference_mode():
        w = torch.randn(16, 16)
        x = torch.randn(16)
        assert torch.equal(_run(s, x, w), w)
        w.add_(1.0)
        assert torch.equal(_run(s, x, w), w)
    assert rt.preparations == 2


def test_training_sessions_prepare_every_call_and_keep_nothing():
    s, rt = _session(always_prepare=True)
    w = torch.randn(16, 16)
    x = torch.randn(16)
    for _ in range(3):
        _run(s, x, w)
    assert rt.invalidations == 3 and rt.preparations == 3
    assert s._held is None  # activations saved for backward are not kept alive
    wt = w.t()
    for _ in range(2):
        assert torch.equal(_run(s, x, wt), wt.contiguous())
    assert not s._param_copies


def test_no_parameters_nothing_kept():
    f32 = torch.float32
    exe = _Exe([_capi.TensorInfo(f32, (4,))], [_capi.TensorInfo(f32, (4,))])
    s = _capi.Session.__new__(_capi.Session)
    lib = _Runtime([0])
    s._setup(lib, exe, torch.device("cpu"), False)
    s._guard([torch.randn(4)])
    assert s._held is None and lib.invalidations == 0


def test_executable_reports_parameter_inputs():
    """The C API's llmc_executable_input_is_parameter: under the bf16 policy
    the rank-2 matmul weight (llm::parameterArguments) is cast by the
    preparation launches and so is a parameter; the activation is not; in
    fp32 nothing is prepared and nothing is a parameter."""
    try:
        _capi.load()
    except _capi.LibraryNotFound as e:
        pytest.skip(f"libllmc.so not built: {e}")
    text = """
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %y = llm.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
"""
    exe = _capi.Compiler({"arch": "sm_90a", "precision": "bf16"}).compile(text)
    assert [i.parameter for i in exe.inputs] == [False, True]
    assert [i.parameter for i in exe.outputs] == [False]
    exe = _capi.Compiler({"arch": "sm_90a"}).compile(text)
    assert [i.parameter for i in exe.inputs] == [False, False]


def test_writes_behind_the_version_counter_need_invalidate_parameters():
    """`w.data.add_()` writes w's memory without bumping w's version counter
    (`.data` has its own), so the guard cannot see it: the next call would
    reuse the preparation of the old values. llmc.invalidate_parameters()
    (every live session) makes the next call prepare again; non-contiguous
    parameters are copied anew too."""
    import llmc
    s, rt = _session()
    w, x = torch.randn(16, 16), torch.randn(16)
    assert torch.equal(_run(s, x, w), w)
    w.data.add_(1.0)
    assert w._version == 0
    stale = _run(s, x, w)
    assert not torch.equal(stale, w)  # the documented limit (Options.prepare_parameters)
    llmc.invalidate_parameters()
    assert torch.equal(_run(s, x, w), w)
    assert rt.invalidations == 1 and rt.preparations == 2

    s2, rt2 = _session()
    base = torch.randn(16, 16)
    wt = base.t()
    assert torch.equal(_run(s2, x, wt), wt.contiguous())
    base.data.mul_(-2.0)
    llmc.invalidate_parameters()
    assert torch.equal(_run(s2, x, wt), wt.contiguous())  # a new copy of the new values


def test_every_call_preparation_sees_writes_behind_the_version_counter():
    """Options(prepare_parameters="every_call") gives inference sessions the
    training graphs' always_prepare: a flat buffer updated in place, which
    the parameters are `.data` views of, is seen without any call."""
    from llmc import backend
    assert backend.Options.from_dict({"prepare_parameters": "every_call"}).prepare_parameters \
        == "every_call"
    with pytest.raises(ValueError, match="prepare_parameters must be one of on_change, every_call"):
        backend.Options.from_dict({"prepare_parameters": "always"})
    s, rt = _session(always_prepare=True)
    flat = torch.randn(16 * 16 + 8)
    w = torch.empty(0)
    w.data = flat[8:].view(16, 16)
    x = torch.randn(16)
    assert torch.equal(_run(s, x, w), w)
    flat.mul_(0.5)  # bumps flat's counter, not w's
    assert torch.equal(_run(s, x, w), w)
