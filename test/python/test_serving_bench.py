"""bench/serving.py (issue 19's serving benchmark) runs end to end in its
--cpu-smoke form: llmc-serve --backend=ref (the CPU reference executor) and
Hugging Face generate() in static batches serve the same 6 requests at
every rate, every request finishes with its max_new_tokens, llmc's KV
figures are recorded, and with --check-hf llmc's tokens (the requests served
together, on the HF model's f32 weights) equal HF's greedy tokens of each
request alone. The speed figures of this mode mean nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LLMC_SERVE = Path(os.environ.get("LLMC_SERVE", REPO / "build" / "bin" / "llmc-serve"))


def _bench_env():
    """The environment of a bench/serving.py run: llmc-serve on PATH, the
    package from this checkout."""
    env = dict(os.environ)
    env["PATH"] = f"{LLMC_SERVE.parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
    return env


def test_cpu_smoke_serves_every_request_and_matches_hf(tmp_path):
    if not LLMC_SERVE.exists():
        pytest.skip(f"{LLMC_SERVE} not built (cmake --build build --target llmc-serve)")
    env = _bench_env()
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "bench" / "serving.py"), "--cpu-smoke", "--check-hf",
           "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"

    result = json.loads((out / "results.json").read_text())
    assert result["llmc"]["llmc_serve"] == str(LLMC_SERVE), result["llmc"]
    rates = result["workload"]["rates"]
    assert rates == ["inf", "20"], rates
    wanted = result["workload"]["output"]["drawn"]["total"]  # every request's max_new_tokens
    runs = result["runs"]
    assert [(x["rate"], x["backend"]) for x in runs] == [
        (rate, b) for rate in rates for b in ("llmc", "hf")], runs
    for x in runs:
        assert "error" not in x, x
        assert x["requests"] == x["finished"] == 6 and x["failed"] == 0, x
        assert x["output_tokens"] == wanted > 0, x
        assert x["output_tok_per_s"] > 0 and x["duration_s"] > 0, x
        for key in ("ttft_s", "tpot_s", "latency_s"):
            assert x[key]["count"] == 6 and 0 <= x[key]["p50"] <= x[key]["p99"], (key, x)
    for x in runs:
        if x["backend"] == "llmc":
            kv = x["kv"]
            assert set(kv) >= {"pages", "page_size", "bytes_allocated", "peak_used_pages",
                               "peak_bytes_used", "waste_mean", "waste_max"}, kv
            assert 0 < kv["peak_bytes_used"] <= kv["bytes_allocated"], kv
            assert 0 <= kv["waste_mean"] <= kv["waste_max"] < 1, kv
            assert x["preemptions"] >= 0 and x["compile_s"] >= 0 and x["steps"] > 0, x
            assert "wrong_token_counts" not in x, x
        else:
            assert x["llmc_over_hf"] > 0, x
            assert 0 <= x["wasted_token_fraction"] < 1, x

    check = result["check_hf"]
    assert "error" not in check, check
    assert len(check["requests"]) == 6, check
    assert check["all_equal"], check  # f32 on both sides: exactly HF's greedy tokens
    for row in check["requests"]:
        assert row["equal"] and row["new_tokens"] > 0, row
        # One HF forward of prompt + llmc's tokens picks each of them.
        assert row["hf_argmax_agrees"] == f"{row['new_tokens']}/{row['new_tokens']}", row

    table = (out / "results.md").read_text()
    assert "| inf | llmc |" in table and "| 20 | hf |" in table, table
    assert "KV waste mean / max" in table and "6/6 requests" in table, table


def test_cpu_smoke_with_an_fp8_kv_cache(tmp_path):
    """--kv-cache-dtype fp8: the step's pages are e4m3 (1 byte), the page
    pool is 1-byte per element, and every request still finishes."""
    if not LLMC_SERVE.exists():
        pytest.skip(f"{LLMC_SERVE} not built (cmake --build build --target llmc-serve)")
    env = _bench_env()
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "bench" / "serving.py"), "--cpu-smoke", "--skip-hf",
           "--kv-cache-dtype", "fp8", "--kv-scale", "0.0625", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    result = json.loads((out / "results.json").read_text())
    kv = result["kv"]
    assert kv["cache_dtype"] == "fp8" and kv["scale"] == 0.0625, kv
    model = result["model"]
    head_dim = model["hidden"] // model["heads"]
    assert kv["bytes_per_page_all_layers"] == \
        2 * model["layers"] * kv["page_size"] * model["kv_heads"] * head_dim, kv
    assert "f8E4M3FN" in (out / "files" / "step.mlir").read_text()
    for x in result["runs"]:
        assert "error" not in x and x["finished"] == 6 and x["failed"] == 0, x
        assert x["kv"]["bytes_allocated"] == kv["bytes_allocated"], (x["kv"], kv)
