"""The plugin's parameter guard: llmc prepares parameter-only work (weight
casts, fp8 scaling, quantization) once per set of parameter pointers; an
in-place update at the same address must make it run again."""
import torch

from llmc import _capi


class _Lib:
    def __init__(self):
        self.invalidations = 0

    def llmc_session_invalidate_parameters(self, handle):
        self.invalidations += 1
        return None  # NULL status: success


def _session(always_prepare=False):
    s = _capi.Session.__new__(_capi.Session)
    s._lib = _Lib()
    s._handle = None
    s.always_prepare = always_prepare
    s._versions = None
    return s


def test_in_place_update_of_an_input_invalidates():
    s = _session()
    w, x = torch.randn(4, 4), torch.randn(2, 4)
    s._guard_parameters([x, w])
    s._guard_parameters([torch.randn(2, 4), w])  # new activation, same weight
    assert s._lib.invalidations == 0
    with torch.no_grad():
        w.add_(1.0)  # an optimizer step: same pointer, new version
    s._guard_parameters([torch.randn(2, 4), w])
    assert s._lib.invalidations == 1
    s._guard_parameters([torch.randn(2, 4), w])  # unchanged since
    assert s._lib.invalidations == 1


def test_new_pointer_is_left_to_the_runtime_guard():
    s = _session()
    s._guard_parameters([torch.randn(4, 4)])
    s._guard_parameters([torch.randn(4, 4)])  # another tensor: the runtime re-prepares
    assert s._lib.invalidations == 0


def test_training_sessions_prepare_every_call():
    s = _session(always_prepare=True)
    w = torch.randn(4, 4)
    for _ in range(3):
        s._guard_parameters([w])
    assert s._lib.invalidations == 3
