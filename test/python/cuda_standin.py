"""Stand-ins for the GPU parts of a plugin call, so that the real Python path
of `LlmcSubgraph.forward` runs on a CPU machine.

Shared by test/python/test_fast_path.py and bench/plugin_overhead.py (which
puts this directory on sys.path). llmc is imported only inside the functions,
so the bench's `--python DIR` decides which copy of the package they use.
"""
import warnings

import torch


class FakeCuda(torch.Tensor):
    """A CPU tensor that answers is_cuda=True (nothing else differs)."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self):
        return True

    def permute(self, *dims):
        # The backend permutes inputs into memory order (arg_perms): the
        # view of a GPU tensor is on the GPU too.
        return fake_cuda(torch.Tensor.permute(self, *dims))


def fake_cuda(a):
    """`a` as a FakeCuda (same storage); anything else unchanged."""
    if isinstance(a, torch.Tensor) and not isinstance(a, FakeCuda):
        return torch.Tensor._make_subclass(FakeCuda, a, a.requires_grad)
    return a


class StandInLib:
    """Forwards to the real library (`_capi.load()`) except the calls that
    need a GPU: llmc_session_run, llmc_session_invalidate_parameters and
    llmc_session_release return success at once."""

    def __init__(self, real):
        self._real = real

    def llmc_session_run(self, *args):
        return None

    def llmc_session_invalidate_parameters(self, handle):
        return None

    def llmc_session_release(self, handle):
        return None

    def __getattr__(self, name):
        return getattr(self._real, name)


def stand_in_session(base, make_lib):
    """A subclass of `_capi.Session` (`base`) whose sessions use the library
    `make_lib()` returns, CPU as their device, no llmc session handle and
    stream 0."""

    class Session(base):
        def __init__(self, executable, device_ordinal=0, cuda_graphs=False,
                     communicator=None, always_prepare=False, **staging):
            lib = make_lib()
            self.communicator = None
            if hasattr(base, "_pack_plan"):
                self._setup(lib, executable, torch.device("cpu"), always_prepare,
                            staging.get("packed_outputs", ()), staging.get("output_views"),
                            staging.get("persistent_outputs", ()), staging.get("fixed_inputs", ()))
            elif hasattr(base, "_setup"):
                self._setup(lib, executable, torch.device("cpu"), always_prepare)
            else:  # a package from before the per-key argument templates
                self._lib = lib
                self.always_prepare = always_prepare
                self._versions = None
                self.executable = executable
                self.output_info = executable.outputs
                self.device = torch.device("cpu")
            self._handle = None

        def _stream(self):
            return 0

    return Session


def record_subgraphs(model, inputs_list, call=None, compile_forward=False, **compile_kw):
    """Compiles `model` with torch.compile(backend="llmc", **compile_kw) (with
    `compile_forward`, its `forward` in place instead, as for Hugging Face's
    generate()), runs it on each of `inputs_list` (call(compiled, x);
    default: a Hugging Face forward with use_cache=False; no grad); returns
    [(subgraph, [args of each call])], the args cloned as they were passed."""
    import llmc.backend as B
    calls = {}
    orig = B.LlmcSubgraph.forward

    def spy(self, *args):
        calls.setdefault(id(self), (self, []))[1].append(
            [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args])
        return orig(self, *args)

    B.LlmcSubgraph.forward = spy
    try:
        if compile_forward:
            model.forward = torch.compile(model.forward, backend="llmc", **compile_kw)
            cm = model
        else:
            cm = torch.compile(model, backend="llmc", **compile_kw)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x in inputs_list:
                if call is None:
                    cm(x, use_cache=False)
                else:
                    call(cm, x)
    finally:
        B.LlmcSubgraph.forward = orig
    return list(calls.values())
