"""The plugin's per-call fast path (CPU): precomputed llmc_tensor templates in
`_capi.Session.run_fast`, the last-shape lookup and cached restride actions
of `LlmcSubgraph.forward`, and the batched position check of the bucketed
path.

The GPU is stood in for: the subgraph inputs are a Tensor subclass that says
is_cuda, and the session's library writes, for every llmc result, the bytes
of the subgraph's PyTorch output (contiguous) to the output pointer it was
given, recording the llmc_tensor descriptions it received. So a forward
through the fast path must return exactly PyTorch's outputs, with PyTorch's
strides, and pass the runtime the right pointers, dtypes and shapes."""
import ctypes
import warnings

import pytest
import torch

import llmc.backend as B
from llmc import _capi, bucketing, importer
from conftest import capi_or_skip, tiny_llama
from cuda_standin import StandInLib, fake_cuda, record_subgraphs, stand_in_session


def _describe(arr, n):
    out = []
    for k in range(n):
        t = arr[k]
        out.append((t.data or 0, _capi.LLMC_TO_TORCH[t.dtype],
                    tuple(t.shape[j] for j in range(t.rank))))
    return out


class FakeLib(StandInLib):
    """The library with llmc_session_run writing `self.results`."""

    def __init__(self, real):
        super().__init__(real)
        self.calls = []  # (inputs, outputs) as (data, dtype, shape)
        self.results = None  # None: leave the outputs as allocated
        self.invalidations = 0

    def llmc_session_run(self, handle, in_arr, n_in, out_arr, n_out, stream):
        ins, outs = _describe(in_arr, n_in), _describe(out_arr, n_out)
        self.calls.append((ins, outs))
        if self.results is None:
            return None
        assert len(self.results) == n_out
        for (ptr, dtype, shape), r in zip(outs, self.results):
            assert r.dtype == dtype and r.numel() == torch.Size(shape).numel(), (r, dtype, shape)
            ctypes.memmove(ptr, r.data_ptr(), r.numel() * r.element_size())
        return None

    def llmc_session_invalidate_parameters(self, handle):
        self.invalidations += 1
        return None


@pytest.fixture
def fake_gpu(monkeypatch):
    capi_or_skip()
    Session = stand_in_session(_capi.Session, lambda: FakeLib(_capi.load()))

    def on():
        """After compiling (Dynamo asks the real torch.cuda)."""
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(_capi, "Session", Session)
    return on


def _record(model, xs, dynamic):
    """[(subgraph, [args per call])] of compiling `model` (no buckets) and running `xs`."""
    return record_subgraphs(model, xs, dynamic=dynamic, options={"dynamic_buckets": "none"})


def _llmc_results(sub, imp, want):
    """What llmc's results would be: PyTorch's outputs, contiguous, by result index."""
    res = {}
    for (kind, i), w in zip(imp.outputs, want):
        if kind == "out":
            if i in imp.out_perms:  # returned in memory order
                w = w.permute(importer.inverse_permutation(imp.out_perms[i]))
            res[i] = w.contiguous()
    return [res[i] for i in range(len(res))]


def _flat(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _call(sub, lib_of, args):
    """One forward with the stand-in library primed; returns (got, want)."""
    want = _flat(sub.eager(*args))
    key = sub._key(list(args))
    entry = sub.sessions.get(key)
    if entry is not None and entry.session is not None:
        entry.session._lib.results = _llmc_results(sub, entry.imp, want)
    got = _flat(sub(*[fake_cuda(a) for a in args]))
    return got, want


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if not isinstance(w, torch.Tensor):
            assert g == w
            continue
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.stride() == w.stride() or g.numel() <= 1, (g.stride(), w.stride())
        assert torch.equal(g, w)


def _prime(sub, args):
    """A first call: compiles and creates the session (its outputs are not
    written: the library is primed from the next call on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sub(*[fake_cuda(a) for a in args])


def test_fast_path_returns_pytorch_outputs_and_passes_pointers(fake_gpu):
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record(model, [torch.randint(0, 1000, (2, 9))], dynamic=False)
    assert subs
    fake_gpu()
    for sub, recorded in subs:
        args = recorded[0]
        _prime(sub, args)
        assert sub.disabled is None, sub.disabled
        entry = next(iter(sub.sessions.values()))
        lib = entry.session._lib
        assert sub._last is entry
        for call in range(3):
            fresh = [torch.randn_like(a) if isinstance(a, torch.Tensor) and a.is_floating_point()
                     else a for a in args]
            lib.calls.clear()
            got, want = _call(sub, fake_gpu, fresh)
            _assert_same(got, want)
            (ins, outs), = lib.calls
            tensors = [fresh[i] for i in entry.imp.arg_placeholders]
            # The runtime sees each input's own pointer, dtype and shape.
            assert [(p, d, s) for p, d, s in ins] == [
                (t.data_ptr(), t.dtype, tuple(t.shape)) for t in tensors]
            assert [(d, s) for _, d, s in outs] == [
                (i.dtype, tuple(i.shape)) for i in entry.session.output_info]
        assert len(sub.sessions) == 1


def test_general_path_builds_the_same_description(fake_gpu):
    """Session.run's general path (a call that does not match the template)
    and the fast path describe the same tensors identically."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record(model, [torch.randint(0, 1000, (1, 5))], dynamic=False)
    sub, recorded = subs[0]
    fake_gpu()
    _prime(sub, recorded[0])
    entry = next(iter(sub.sessions.values()))
    s, lib = entry.session, entry.session._lib
    tensors = [recorded[0][i] for i in entry.imp.arg_placeholders]
    lib.results = [torch.zeros(i.shape, dtype=i.dtype) for i in s.output_info]
    lib.calls.clear()
    s.run(tensors)            # fast: matches the template
    fast = lib.calls[-1][0]
    bad = list(tensors)
    bad[0] = bad[0].to(torch.float64) if bad[0].is_floating_point() else bad[0].to(torch.int32)
    assert s.run_fast(bad) is None  # dtype differs: nothing done
    assert len(lib.calls) == 1
    s.run(tensors[:-1] + [tensors[-1].clone()])  # fast again, new last pointer
    assert lib.calls[-1][0][:-1] == fast[:-1]
    # The general path (what run used to do for every call) on the same tensors.
    run_fast, s.run_fast = s.run_fast, lambda inputs: None
    try:
        s.run(tensors)
    finally:
        s.run_fast = run_fast
    assert lib.calls[-1][0] == fast


def test_shape_change_switches_sessions_and_templates(fake_gpu):
    """Per-size compiles (dynamic shapes, no buckets): alternating lengths
    must leave the fast path for the other compiled shape each time."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record(model, [torch.randint(0, 1000, (1, s)) for s in (6, 7, 6)], dynamic=True)
    checked = 0
    fake_gpu()
    for sub, recorded in subs:
        by_len = {}
        for args in recorded:
            by_len.setdefault(tuple(a.shape if isinstance(a, torch.Tensor) else a for a in args),
                              args)
        variants = list(by_len.values())
        if len(variants) < 2:
            continue
        for args in variants:
            _prime(sub, args)
        if sub.disabled is not None:
            continue
        for args in variants * 2:
            got, want = _call(sub, fake_gpu, args)
            _assert_same(got, want)
            entry = sub._last
            (ins, _), = [entry.session._lib.calls[-1]]
            tensors = [args[i] for i in entry.imp.arg_placeholders]
            assert [s for _, _, s in ins] == [tuple(t.shape) for t in tensors]
        assert len(sub.sessions) == len(variants)
        checked += 1
    assert checked, "no subgraph saw two shapes"


def _record_bf16(model, xs):
    """_record under the bf16 policy, whose weight casts are parameter
    preparation (so the weights are parameters of the executable)."""
    return record_subgraphs(model, xs, dynamic=False,
                            options={"dynamic_buckets": "none", "precision": "bf16"})


def _primed_bf16_layer(fake_gpu):
    """The tiny LLaMA's largest bf16 subgraph, compiled and primed on the
    stand-in GPU: (subgraph, its recorded arguments, session entry, library)."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record_bf16(model, [torch.randint(0, 1000, (1, 4))])
    sub, recorded = max(subs, key=lambda s: len(s[1][0]))
    args = list(recorded[0])
    fake_gpu()
    _prime(sub, args)
    entry = next(iter(sub.sessions.values()))
    return sub, args, entry, entry.session._lib


def _parameter_args(entry, args):
    """The placeholder indices of the session's parameter inputs."""
    return [entry.imp.arg_placeholders[k] for k in entry.session._params]


def test_parameter_update_in_place_invalidates_on_the_fast_path(fake_gpu):
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record_bf16(model, [torch.randint(0, 1000, (1, 4))])
    sub, recorded = max(subs, key=lambda s: len(s[1][0]))
    args = recorded[0]
    fake_gpu()
    _prime(sub, args)
    entry = next(iter(sub.sessions.values()))
    lib = entry.session._lib
    _call(sub, fake_gpu, args)
    before = lib.invalidations
    _call(sub, fake_gpu, args)
    assert lib.invalidations == before
    params = _parameter_args(entry, args)
    w = next(args[i] for i in params if args[i].dim() == 2)
    with torch.no_grad():
        w.add_(1.0)  # same pointer, new version
    got, want = _call(sub, fake_gpu, args)
    _assert_same(got, want)
    assert lib.invalidations == before + 1


@pytest.mark.parametrize("mode", ["on_change", "every_call"])
def test_writes_behind_version_counters_on_the_fast_path(fake_gpu, mode):
    """`w.data.add_()` bumps no version counter the guard sees: by default
    (prepare_parameters="on_change") the inference session keeps its
    preparation until llmc.invalidate_parameters(); with "every_call" it
    prepares on every call, as training graphs do."""
    import llmc
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = record_subgraphs(model, [torch.randint(0, 1000, (1, 4))], dynamic=False,
                            options={"dynamic_buckets": "none", "precision": "bf16",
                                     "prepare_parameters": mode})
    sub, recorded = max(subs, key=lambda s: len(s[1][0]))
    args = recorded[0]
    fake_gpu()
    _prime(sub, args)
    entry = next(iter(sub.sessions.values()))
    assert entry.session.always_prepare == (mode == "every_call")
    lib = entry.session._lib
    _call(sub, fake_gpu, args)
    before = lib.invalidations
    w = next(args[i] for i in _parameter_args(entry, args) if args[i].dim() == 2)
    w.data.add_(1.0)  # no version bump on w
    _call(sub, fake_gpu, args)
    if mode == "on_change":
        assert lib.invalidations == before  # the documented limit
        llmc.invalidate_parameters()
        assert lib.invalidations == before + 1
    else:
        assert lib.invalidations > before  # every call prepares again


def test_non_contiguous_parameters_reach_the_runtime_at_distinct_addresses(fake_gpu):
    """A layer compiled once and applied to other weights laid out
    transposed: each is passed as a contiguous copy, and the runtime keys
    preparation by pointer; a copy of other weights must never arrive at the
    address of the copy it prepared from (the session keeps its copy while
    the source is unchanged, and makes the next one while it still holds
    it). The runtime's guard (rt::ParameterGuard) compares a call's
    parameter pointers with those of the last preparation only, so what
    must hold is: a pointer equal to the previous call's carries the
    previous call's contents. An address freed two calls ago may come back
    with other weights (the allocator decides; torch 2.11's CPU allocator
    does, after the earlier tests of this file): the pointers then differ
    from the last preparation's and the runtime prepares again."""
    sub, args, entry, lib = _primed_bf16_layer(fake_gpu)
    k = next(i for i in _parameter_args(entry, args)
             if args[i].dim() == 2 and args[i].shape[0] > 1 and args[i].shape[1] > 1)
    ai = entry.imp.arg_placeholders.index(k)
    last = None  # (pointer, contents) of the previous call: the last preparation
    for n in range(6):
        args[k] = (torch.randn_like(args[k]) if n % 2 else args[k]).t().contiguous().t()
        assert not args[k].is_contiguous()
        lib.calls.clear()
        got, want = _call(sub, fake_gpu, args)
        _assert_same(got, want)
        (ins, _), = lib.calls
        ptr = ins[ai][0]
        value = args[k].contiguous()
        if last is not None and last[0] == ptr:
            assert torch.equal(last[1], value), f"call {n}: other weights at the prepared address"
        last = (ptr, value)
    assert lib.invalidations == 0


def test_inference_mode_forward_runs_on_the_fast_path(fake_gpu):
    """Under torch.inference_mode the inputs are inference tensors, which
    have no version counter (reading it raises): the guard must not read
    it from them, and must treat such a parameter as possibly changed."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record_bf16(model, [torch.randint(0, 1000, (1, 4))])
    sub, recorded = max(subs, key=lambda s: len(s[1][0]))
    fake_gpu()
    _prime(sub, recorded[0])
    entry = next(iter(sub.sessions.values()))
    lib = entry.session._lib
    with torch.inference_mode():
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in recorded[0]]
        before = lib.invalidations
        for _ in range(2):
            got, want = _call(sub, fake_gpu, args)
            _assert_same(got, want)
    # The first call holds new parameter tensors; the second sees the same
    # pointers with no version to compare: prepared again.
    assert lib.invalidations == before + 1


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_position_offsets_one_read_matches_is_position(dtype):
    cases = [
        (torch.arange(4, 9, dtype=dtype).view(1, 5), 1, 4),
        (torch.arange(0, 7, dtype=dtype).view(7, 1), 0, 0),
        (torch.arange(-3, 2, dtype=dtype).view(1, 5), 1, -3),
        (torch.tensor([[0, 1, 3]], dtype=dtype), 1, None),
        (torch.tensor([[5, 5, 5]], dtype=dtype), 1, None),
        (torch.arange(6, dtype=dtype).view(2, 3), 1, None),  # other sizes not 1
        (torch.zeros(1, 0, dtype=dtype), 1, None),
        (torch.tensor([[7]], dtype=dtype), 1, 7),
    ]
    got = bucketing.position_offsets([(t, a) for t, a, _ in cases])
    assert got == [c for _, _, c in cases]
    for t, a, c in cases:
        assert bucketing.is_position(t, a) == c
    # Random positions: arange + random offset, and one value disturbed.
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        n = int(torch.randint(1, 40, (1,), generator=g))
        c = int(torch.randint(-100, 100, (1,), generator=g))
        t = (torch.arange(n) + c).to(dtype).view(1, n)
        assert bucketing.is_position(t, 1) == c
        if n > 1:
            u = t.clone()
            u[0, int(torch.randint(0, n, (1,), generator=g))] += 1
            assert bucketing.is_position(u, 1) is None


def test_position_offsets_reads_the_device_once(monkeypatch):
    """All position inputs of a call are decided with one .tolist()."""
    reads = []
    orig = torch.Tensor.tolist

    def tolist(self):
        reads.append(self.numel())
        return orig(self)

    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    items = [(torch.arange(3, 9).view(1, 6), 1), (torch.arange(2, 8).view(6), 0),
             (torch.tensor([1, 0, 2]), 0)]
    assert bucketing.position_offsets(items) == [3, 2, None]
    assert len(reads) == 1


def test_restride_plan_replays_what_restride_did():
    """The cached actions give the same tensors (values and strides) as
    deciding again."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((x,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    sub = B.LlmcSubgraph.__new__(B.LlmcSubgraph)
    torch.nn.Module.__init__(sub)
    base = torch.randn(4, 6)
    sub.out_metas = [base.t(), base, torch.randn(1, 4).expand(3, 4)]
    sub.placeholders = []
    sub._sym_sources = sub._lin_sources = None

    class Imp:
        outputs = [("out", 0), ("out", 1), ("out", 2), ("out", 0)]
    outs = [base.t().contiguous(), base.clone(), torch.randn(3, 4)]
    first = list(outs)
    plan = sub._restride_plan(first, Imp, [])
    assert plan == [(0, (1, 6))]  # only the transposed result is restrided
    again = list(outs)
    B._apply_restride(again, plan)
    for a, b in zip(first, again):
        assert a.stride() == b.stride() and torch.equal(a, b)
    assert first[0].stride() == base.t().stride()
    del gm


def test_kept_inputs_are_reused_until_their_address_changes(fake_gpu):
    """run_fast keeps the previous call's checked inputs: the same tensor
    objects at the same addresses are not checked again, but an input given
    new storage under the same object (`.data = ...`) or a new object is
    seen, and the runtime gets every input's current pointer."""
    torch.manual_seed(0)
    model = tiny_llama().eval()
    subs = _record(model, [torch.randint(0, 1000, (2, 9))], dynamic=False)
    sub, recorded = max(subs, key=lambda s: len(s[1][0]))
    args = recorded[0]
    fake_gpu()
    _prime(sub, args)
    entry = next(iter(sub.sessions.values()))
    lib = entry.session._lib
    fargs = [fake_cuda(a) for a in args]  # the same objects on every call
    tensors = lambda: [fargs[i] for i in entry.imp.arg_placeholders]  # noqa: E731

    def run():
        lib.calls.clear()
        lib.results = _llmc_results(sub, entry.imp, _flat(sub.eager(*fargs)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _flat(sub(*fargs))
        (ins, _), = lib.calls
        assert [p for p, _, _ in ins] == [t.data_ptr() for t in tensors()]
        return got

    run()
    run()
    kept = entry.session._last_in
    assert kept is not None and all(v is not None for v in kept[2])  # all may be kept
    # New storage under the same object: the new address reaches the runtime.
    w = next(k for k, t in enumerate(tensors()) if t.dim() == 2 and t.is_floating_point())
    p = entry.imp.arg_placeholders[w]
    old = fargs[p].data_ptr()
    fargs[p].data = fargs[p].data.clone()
    assert fargs[p].data_ptr() != old
    _assert_same(run(), _flat(sub.eager(*fargs)))
    # An in-place change of shape or strides under the same object and
    # address bumps the version counter: the input is checked again.
    t = tensors()[w]
    t.t_()
    checked = entry.session._checked_inputs(tensors())
    if t.shape[0] == t.shape[1]:
        assert checked is not None and w in checked[1]  # now non-contiguous: copied
    else:
        assert checked is None  # [k, n] is not the signature's [n, k]
    t.t_()
    assert entry.session._checked_inputs(tensors()) is not None
    # A new object of the wrong shape is checked: the fast path declines.
    bad = list(fargs)
    bad[p] = fake_cuda(torch.zeros(3, 3, dtype=fargs[p].dtype))
    assert entry.session.run_fast([bad[i] for i in entry.imp.arg_placeholders]) is None


def test_permuted_inputs_and_results_cross_without_copies(fake_gpu):
    """A backward-style subgraph: a weight saved transposed (strides (1, k))
    and a [B, H, S, D] view of a [B, S, H, D] buffer come in, a result PyTorch
    lays out [B, S, H, D] goes out. The runtime gets the inputs' own memory
    (their data pointers, in memory order: no copy), and the result is a view
    of llmc's buffer with PyTorch's strides (no restride copy); the fast path
    and the general path agree."""
    def f(x, wt, q):
        return torch.mm(x, wt) * 2, (q * 3).transpose(1, 2).transpose(1, 2) + 1

    torch.manual_seed(0)
    x = torch.randn(4, 8)
    wt = torch.randn(16, 8).t()
    q = torch.randn(2, 5, 3, 4).transpose(1, 2)
    subs = record_subgraphs(f, [(x, wt, q)], call=lambda cm, a: cm(*a),
                            options={"dynamic_buckets": "none"})
    (sub, recorded), = subs
    args = list(recorded[0])
    assert not args[1].is_contiguous() and not args[2].is_contiguous()
    fake_gpu()
    _prime(sub, args)
    entry = next(iter(sub.sessions.values()))
    imp, lib = entry.imp, entry.session._lib
    assert set(imp.arg_perms) == {imp.arg_placeholders.index(1), imp.arg_placeholders.index(2)}
    assert imp.out_perms, imp.text
    for n in range(3):  # the general path, then the fast path
        lib.calls.clear()
        got, want = _call(sub, fake_gpu, args)
        _assert_same(got, want)
        (ins, outs), = lib.calls
        for k in (1, 2):
            ptr, _, shape = ins[imp.arg_placeholders.index(k)]
            assert ptr == args[k].data_ptr(), f"call {n}: input {k} was copied"
            assert shape == tuple(args[k].permute(imp.arg_perms[imp.arg_placeholders.index(k)]).shape)
        out_ptrs = {p for p, _, _ in outs}
        assert got[1].data_ptr() in out_ptrs, f"call {n}: the permuted result was copied"


def test_misaligned_inputs_reach_the_runtime_as_aligned_copies(fake_gpu):
    """The runtime refuses an input or output address that is not 16-byte
    aligned (its kernels use 16-byte vectors; rt::kTensorAlignment). A
    contiguous input at such an address, here each floating-point input in
    turn as a view one element into a flat buffer, is passed as an aligned
    copy with the same contents (and the results stay PyTorch's); an aligned
    input is still passed as it is."""
    sub, args, entry, lib = _primed_bf16_layer(fake_gpu)
    floats = [k for k, a in enumerate(args)
              if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 1]
    assert floats
    for k in floats:
        flat = torch.empty(args[k].numel() + 16, dtype=args[k].dtype)
        view = flat[1:1 + args[k].numel()].view(args[k].shape)
        view.copy_(args[k])
        assert view.is_contiguous() and view.data_ptr() % 16 != 0
        call = list(args)
        call[k] = view
        for _ in range(2):  # the first call checks every input, the next keeps some
            lib.calls.clear()
            got, want = _call(sub, fake_gpu, call)
            _assert_same(got, want)
            (ins, outs), = lib.calls
            assert all(p % 16 == 0 for p, _, shape in ins + outs if p), (k, ins)
            ai = entry.imp.arg_placeholders.index(k)
            assert ins[ai][0] != view.data_ptr()


def test_staged_misaligned_inputs_are_left_to_the_runtime():
    """An input the session stages (SessionOptions::staged_inputs, with CUDA
    graphs) is copied by the runtime through its aligned staging buffer, so
    a misaligned one (a decode step's `ids[:, -1:]`) is passed as it is,
    not cloned on every call; an unstaged one is copied, and a
    non-contiguous one is copied whatever its staging."""
    capi_or_skip()
    s = object.__new__(_capi.Session)
    s._staged_set = frozenset({1})
    flat = torch.empty(40)
    view = flat[1:33]
    assert view.is_contiguous() and view.data_ptr() % 16 != 0
    assert s._needs_copy(view, 0, view.data_ptr())
    assert not s._needs_copy(view, 1, view.data_ptr())
    aligned = torch.empty(32)
    assert not s._needs_copy(aligned, 0, aligned.data_ptr())
    t = torch.empty(4, 8).t()
    assert s._needs_copy(t, 1, t.data_ptr())
    assert not s._needs_copy(flat[1:1], 0, flat[1:1].data_ptr())  # empty: never read
