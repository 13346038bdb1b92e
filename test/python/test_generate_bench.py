"""bench/generate_hf.py (issue 17's generation benchmark) runs end to end in
its --smoke form on the CPU: every backend asked for is measured without
error, llmc's tokens equal eager's, and the table is written. The speed
figures of this mode mean nothing (llmc runs in PyTorch without a GPU)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import generate_hf  # noqa: E402
from conftest import capi_or_skip  # noqa: E402


def test_smoke_run_measures_every_backend(tmp_path):
    capi_or_skip()
    generate_hf.main(["--smoke", "--out", str(tmp_path), "--batches", "1,3",
                      "--backends", "eager,llmc-graphs,llmc-int4"])
    result = json.loads((tmp_path / "generate.json").read_text())
    runs = result["runs"]
    assert [(r["batch"], r["backend"]) for r in runs] == [
        (b, n) for b in (1, 3) for n in ("eager", "llmc-graphs", "llmc-int4")]
    for r in runs:
        assert "error" not in r, r
        assert r["decode_tok_s"] and r["decode_tok_s"] > 0, r
    for r in runs:
        if r["backend"] == "llmc-graphs":
            assert r["same_tokens"] == f"{r['batch']}/{r['batch']}", r
            assert r["compiles"] == 2, r  # prefill and the decode step
    table = (tmp_path / "generate.md").read_text()
    assert "| 3 | llmc-int4 |" in table, table


def test_smoke_run_with_the_dynamic_cache_compiles_per_bucket(tmp_path):
    """--cache dynamic: llmc's tokens equal eager's, and the compiles are the
    prefill, the first decode step and one per bucket (lengths 10..13: 16)."""
    capi_or_skip()
    generate_hf.main(["--smoke", "--out", str(tmp_path), "--batches", "2", "--cache", "dynamic",
                      "--backends", "eager,llmc"])
    runs = json.loads((tmp_path / "generate.json").read_text())["runs"]
    assert [r["backend"] for r in runs] == ["eager", "llmc"], runs
    assert all("error" not in r for r in runs), runs
    assert runs[1]["same_tokens"] == "2/2" and runs[1]["compiles"] == 3, runs[1]
    assert "dynamic cache" in (tmp_path / "generate.md").read_text()


def test_profile_writes_the_top_ops_and_a_timeline(tmp_path):
    """--profile N: one generate() of N tokens per backend under the
    profiler; its top host ops (the model's forward among them) and a
    Chrome trace that bench/trace_gaps.py can read."""
    import gzip
    capi_or_skip()
    generate_hf.main(["--smoke", "--out", str(tmp_path), "--batches", "1",
                      "--backends", "llmc-graphs", "--profile", "3"])
    text = (tmp_path / "profile-B1-llmc-graphs.txt").read_text()
    assert "Self CPU" in text, text[:2000]
    with gzip.open(tmp_path / "profile-B1-llmc-graphs.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("name", "").startswith("aten::") for e in events), len(events)


def test_only_the_hf_compile_row_lets_hugging_face_compile():
    """Hugging Face compiles a static-cache generate()'s forward with
    Inductor (mode "reduce-overhead") on a GPU by itself: the eager row and
    the backends' rows turn that off, the hf-compile row keeps it."""
    capi_or_skip()
    import types
    model = types.SimpleNamespace(generation_config=types.SimpleNamespace(), forward=None)
    def base(*args, **kwargs):
        return None

    for name, allowed in (("eager", False), ("hf-compile", True), ("llmc-graphs", False)):
        generate_hf.set_backend(model, base, name)
        assert model.generation_config.disable_compile is (not allowed), name
        if name in ("eager", "hf-compile"):
            assert model.forward is base, name
