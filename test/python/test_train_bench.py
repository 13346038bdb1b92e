"""bench/train_llama.py (issue 16's training benchmark) runs end to end in
its --smoke form on the CPU: eager and llmc, forward+backward and with a
compiled AdamW step, every run measured without error, llmc's first loss
and every parameter's gradient equal to eager's, the partition report in the record and the table
written. The speed figures of this mode mean nothing (llmc runs in PyTorch
without a GPU)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import train_llama  # noqa: E402
from conftest import capi_or_skip  # noqa: E402


def test_smoke_run_measures_every_mode(tmp_path):
    capi_or_skip()
    train_llama.main(["--smoke", "--out", str(tmp_path), "--backends", "eager,llmc"])
    result = json.loads((tmp_path / "train.json").read_text())
    runs = result["runs"]
    assert [(r["mode"], r["backend"]) for r in runs] == [
        (m, b) for m in ("fwdbwd", "adamw") for b in ("eager", "llmc")]
    for r in runs:
        assert "error" not in r, r
        assert r["step_ms"] > 0 and r["tokens_s"] > 0, r
    for r in runs:
        if r["backend"] == "llmc":
            assert r["loss_rel_to_eager"] <= 1e-5, r
            if r["mode"] == "fwdbwd":  # every parameter's gradient, f32 on the CPU
                assert r["grad_rel_to_eager"] <= 1e-5, r
            graphs = {p["graph"].split("_", 1)[1]: p for p in r["partitions"]}
            assert {"forward", "backward"} <= set(graphs), r["partitions"]
            for p in r["partitions"]:
                assert p["subgraphs"] == 1 and not p["kept_in_pytorch"], r["partitions"]
                assert not p["compile_failures"], r["partitions"]
            if r["mode"] == "adamw":
                assert "inference" in graphs, r["partitions"]  # the optimizer step
            # The first step's split: Dynamo traced, AOTAutograd traced and
            # llmc compiled (each some time, together within the step).
            parts = r["first_step_parts_s"]
            assert set(parts) == {"dynamo_tracing", "aot_autograd", "llmc_compile"}, parts
            assert all(v > 0 for v in parts.values()), parts
            assert parts["dynamo_tracing"] + parts["aot_autograd"] < r["first_step_s"], (parts, r)
    table = (tmp_path / "train.md").read_text()
    assert "| adamw | llmc |" in table, table


def test_aot_eager_shows_the_tracing_floor(tmp_path):
    """aot_eager traces as every torch.compile backend does and compiles
    nothing: its run has the same loss as eager and a first-step split."""
    capi_or_skip()
    train_llama.main(["--smoke", "--out", str(tmp_path), "--backends", "eager,aot_eager",
                      "--modes", "fwdbwd"])
    runs = json.loads((tmp_path / "train.json").read_text())["runs"]
    aot = runs[1]
    assert aot["backend"] == "aot_eager" and "error" not in aot, aot
    assert aot["loss_rel_to_eager"] <= 1e-6, aot
    assert aot["first_step_parts_s"]["dynamo_tracing"] > 0, aot
    assert "| fwdbwd | aot_eager |" in (tmp_path / "train.md").read_text()


def test_profile_writes_the_top_kernels_of_each_run(tmp_path):
    """--profile: one profiled step per run, its top operators (CPU time
    here; GPU kernels on a GPU) written to profile-MODE-BACKEND.txt."""
    capi_or_skip()
    train_llama.main(["--smoke", "--out", str(tmp_path), "--backends", "eager",
                      "--modes", "fwdbwd", "--profile"])
    text = (tmp_path / "profile-fwdbwd-eager.txt").read_text()
    assert "aten::mm" in text and "Self CPU" in text, text[:2000]


def test_fp8_backends_run_and_report(tmp_path):
    """llmc-fp8 and llmc-fp8-row compile the training graphs under the fp8
    policy (on the CPU they then run in PyTorch: the loss equals eager's);
    inductor-float8 runs, or records why not (torchao missing), without
    stopping the others."""
    capi_or_skip()
    train_llama.main(["--smoke", "--out", str(tmp_path), "--modes", "fwdbwd",
                      "--backends", "eager,llmc-fp8,llmc-fp8-row,inductor-float8"])
    runs = {r["backend"]: r for r in json.loads((tmp_path / "train.json").read_text())["runs"]}
    assert set(runs) == {"eager", "llmc-fp8", "llmc-fp8-row", "inductor-float8"}, runs
    for b in ("llmc-fp8", "llmc-fp8-row"):
        r = runs[b]
        assert "error" not in r, r
        for p in r["partitions"]:
            assert p["subgraphs"] == 1 and not p["compile_failures"], r["partitions"]
    f8 = runs["inductor-float8"]
    try:
        import torchao  # noqa: F401
    except ImportError:
        assert "ModuleNotFoundError" in f8["error"] and "torchao" in f8["error"], f8
    table = (tmp_path / "train.md").read_text()
    assert "| fwdbwd | llmc-fp8-row |" in table, table


def test_grad_reference_f32_measures_eager_too(tmp_path):
    """--grad-reference f32: every backend, eager included, against eager in
    float32 on the same weights; on the CPU (f32 model) eager's error is 0
    and llmc's (run in PyTorch) too, and each step's loss is recorded."""
    capi_or_skip()
    train_llama.main(["--smoke", "--out", str(tmp_path), "--backends", "eager,llmc",
                      "--modes", "fwdbwd", "--grad-reference", "f32"])
    runs = json.loads((tmp_path / "train.json").read_text())["runs"]
    assert [r["backend"] for r in runs] == ["eager", "llmc"]
    for r in runs:
        assert r["grad_reference"] == "eager in float32", r
        assert len(r["grad_errors"]) > 10 and r["grad_rel_to_eager"] <= 1e-5, r
        assert len(r["losses"]) == 1 + 2 and all(l == l for l in r["losses"]), r
    assert "gradients vs eager in float32" in (tmp_path / "train.md").read_text()


def test_fp8_gradient_noise_smoke(tmp_path):
    """bench/fp8_gradient_noise.py --smoke: every variant measured against
    float32; the fake-quantized fp8 recipe moves the gradients about 0.1
    (an e4m3 / e5m2 rounding, far above bf16's), which the script must see."""
    capi_or_skip()
    import fp8_gradient_noise
    fp8_gradient_noise.main(["--smoke", "--out", str(tmp_path),
                             "--variants", "eager-bf16,sim-fp8,sim-fp8-nohead,llmc-fp8"])
    v = json.loads((tmp_path / "noise.json").read_text())["variants"]
    assert set(v) == {"eager-bf16", "sim-fp8", "sim-fp8-nohead", "llmc-fp8"}
    for name, rec in v.items():
        assert "error" not in rec, (name, rec)
        assert rec["grad_median"] == rec["grad_median"], (name, rec)  # not NaN
    assert 0 < v["eager-bf16"]["grad_median"] < 0.03, v["eager-bf16"]
    assert 0.05 < v["sim-fp8"]["grad_median"] < 0.3, v["sim-fp8"]
    assert v["sim-fp8"]["logits_rel"] > v["sim-fp8-nohead"]["logits_rel"] > v["eager-bf16"]["logits_rel"]


def test_llmc_row_is_an_error_when_llmc_cannot_run(tmp_path, monkeypatch):
    """Without a loadable libllmc.so every llmc subgraph would run in
    PyTorch: the benchmark (strict by default) records an error for the
    llmc run instead of timing eager under llmc's name (on 2026-12-06 a
    GPU run without the CUDA libraries on the library path did exactly
    that, silently)."""
    capi_or_skip()
    import llmc._capi
    monkeypatch.setattr(llmc._capi, "available", lambda: (False, "libllmc.so not loadable (test)"))
    monkeypatch.delenv("LLMC_STRICT", raising=False)  # the benchmark's default
    train_llama.main(["--smoke", "--out", str(tmp_path), "--backends", "eager,llmc",
                      "--modes", "fwdbwd"])
    runs = json.loads((tmp_path / "train.json").read_text())["runs"]
    assert "error" not in runs[0], runs[0]
    assert "error" in runs[1] and "not loadable" in runs[1]["error"], runs[1]
    assert "| fwdbwd | llmc | error:" in (tmp_path / "train.md").read_text()
