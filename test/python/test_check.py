"""The debug check (options={"check": True} / LLMC_CHECK=1) and the output
glue, on the CPU: the comparison, the localization message, the dump that
reproduces a partition with llmc-run, and outputs that must not alias.

The check itself runs after llmc executed a partition, i.e. on a GPU
(test_models.py::test_gpu_training_step_check_localizes_mismatch); here its
pieces are driven directly with a wrong result standing in for a GPU bug."""

import subprocess

import pytest
import torch

import llmc.backend
from llmc import importer, partition
from llmc.backend import CheckMismatch, LlmcSubgraph, Options, assemble_outputs, compare_outputs
from test_importer import trace
from test_importer_numerics import LLMC_RUN, _need_llmc_run


def test_check_option_and_env(monkeypatch):
    monkeypatch.delenv("LLMC_CHECK", raising=False)
    assert Options.from_dict({}).check is False
    assert Options.from_dict({"check": True}).check is True
    monkeypatch.setenv("LLMC_CHECK", "1")
    assert Options.from_dict({}).check is True
    monkeypatch.setenv("LLMC_CHECK", "warn")
    assert Options.from_dict({}).check == "warn"
    monkeypatch.setenv("LLMC_CHECK", "maybe")
    with pytest.raises(ValueError, match="LLMC_CHECK"):
        Options.from_dict({})
    with pytest.raises(ValueError, match="check_tol"):
        Options.from_dict({"check": True, "check_tol": -1})


def test_compare_outputs():
    r = torch.randn(64, 32)
    assert compare_outputs(r.clone(), r, 1e-4) is None
    assert compare_outputs(r * (1 + 1e-6), r, 1e-4) is None
    bad = compare_outputs(r * 1.01, r, 1e-4)
    assert "relative L2 error 1.0" in bad and "max abs error" in bad and "max rel error" in bad
    n = r.clone()
    n[3, 4] = float("nan")
    assert "NaN" in compare_outputs(n, r, 1e-4)
    assert "NaN" in compare_outputs(r, n, 1e-4)
    i = torch.randint(0, 9, (5,))
    assert compare_outputs(i.clone(), i, 1e-4) is None
    assert "values differ" in compare_outputs(i + 1, i, 1e-4)
    assert "shape" in compare_outputs(r[:3], r, 1e-4)
    b = r.to(torch.bfloat16)
    assert compare_outputs((r * (1 + 2e-3)).to(torch.bfloat16), b, 2e-2) is None


def _sub(fn, *args, options=None):
    gm = trace(fn, *args)
    fused, names, report = partition.partition(gm, "g0_backward")
    report.kind = "backward"
    eager = getattr(fused, names[0])
    sub = LlmcSubgraph(eager, names[0], Options.from_dict(options or {}), report, index=0)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return sub, list(args)


def test_check_mismatch_names_the_partition_and_dumps_a_reproducer(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    sub, args = _sub(lambda x, w: torch.relu(x @ w) + 1.0, x, w,
                     options={"check": True, "dump_dir": str(tmp_path)})
    want = sub.eager(*args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    sub._check(args, [w_.clone() for w_ in want], sub.imported)  # equal: silent
    wrong = [want[0].clone()]
    wrong[0][1, 2] += 0.5  # a kernel bug
    with pytest.raises(CheckMismatch) as e:
        sub._check(args, wrong, sub.imported)
    msg = str(e.value)
    assert "g0_backward (graph backward) subgraph #0 llmc_0, output 0 float32[4, 8]" in msg
    assert "relative L2 error" in msg and "max abs error 5.000e-01" in msg
    assert "reproduce: llmc-run" in msg
    d = tmp_path / "g0_backward.llmc_0.check"
    assert (d / "f.mlir").exists() and (d / "cmd.txt").exists() and (d / "inputs.pt").exists()
    assert sub.report.check_failures and "check failure" in str(sub.report)
    # The dump reproduces the partition: the reference executor on the dumped
    # IR and inputs gives PyTorch's result.
    _need_llmc_run()
    cmd = (d / "cmd.txt").read_text().split()
    cmd = [str(LLMC_RUN)] + [c for c in cmd[1:] if not c.startswith("--check")] + [
        "--backend=ref", f"--output-dir={tmp_path}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = torch.frombuffer(bytearray((tmp_path / "result0.f32").read_bytes()), dtype=torch.float32)
    torch.testing.assert_close(got.reshape(4, 8), want[0], rtol=1e-5, atol=1e-5)


def test_check_warn_mode_goes_on(tmp_path):
    x = torch.randn(4, 8)
    sub, args = _sub(lambda x: torch.softmax(x * 2.0, -1), x,
                     options={"check": "warn", "dump_dir": str(tmp_path)})
    want = sub.eager(*args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    with pytest.warns(RuntimeWarning, match="llmc check: .*output 0"):
        sub._check(args, [want[0] * 1.1], sub.imported)
    assert len(sub.report.check_failures) == 1


def test_outputs_never_alias_inputs_or_each_other():
    """A subgraph output that is an input passed through (clone/alias are
    identities in the IR) or a result returned twice comes back as its own
    tensor, as PyTorch's clone would: AOTAutograd and the caller may mutate one."""
    imp = importer.ImportResult(text="", func_name="f", arg_placeholders=[0],
                                dim_bindings={}, outputs=[("arg", 0), ("out", 0), ("out", 0),
                                                          ("none", None)], dynamic=False)
    a, o = torch.randn(3), torch.randn(3)
    res = assemble_outputs(imp, [o], [a])
    assert torch.equal(res[0], a) and res[0].data_ptr() != a.data_ptr()
    assert res[1] is o and torch.equal(res[2], o) and res[2].data_ptr() != o.data_ptr()
    assert res[3] is None


def test_results_get_pytorchs_strides():
    """A result PyTorch lays out transposed (mul keeps its input's layout)
    comes back with those strides, so as_strided/view downstream read the
    same elements; a padded result sliced back becomes dense."""
    x, w = torch.randn(4, 6), torch.randn(6, 8)
    sub, args = _sub(lambda x, w: (x @ w).t() * 2.0, x, w)
    want = sub.eager(*args)
    want = want[0] if isinstance(want, (tuple, list)) else want
    assert not want.is_contiguous()
    ours = want.contiguous()  # what llmc's session returns
    got = sub._restride([ours], sub.imported, args)[0]
    assert got.stride() == want.stride() and torch.equal(got, want)
    # as_strided with eager's strides (AOTAutograd's alias regeneration) agrees.
    assert torch.equal(got.as_strided(want.shape, want.stride()),
                       want.as_strided(want.shape, want.stride()))
    sliced = torch.randn(8, 4, 3)[:, :, :1].squeeze(-1)  # non-dense
    got2 = sub._restride([sliced], sub.imported, args)[0]
    assert got2.stride() == want.stride() and torch.equal(got2, sliced)
