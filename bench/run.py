#!/usr/bin/env python3
"""llmc benchmarks against PyTorch eager, Inductor and XLA (see docs/performance.md).

On the GPU machine, from the repository root with dist/ carried:

    python3 bench/run.py --out $OUT            # full run, ~7.5 min hard budget
    python3 bench/run.py --out $OUT --quick    # ~3 min: no max-autotune, B=1 shapes only
    python3 bench/run.py --dry-run [--out DIR] # no GPU: parsers, table, JSON, plot on fake numbers

Every workload runs in its own subprocess with a hard timeout (torch/JAX
workers: bench/workers.py; llmc: dist/bin/llmc-run, dist/bin/llmc-compile);
a failing or hanging workload is recorded and the run goes on. Results are
written to $OUT/bench.json after every step, and the table, plot and
markdown section at the end from whatever was measured.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# DESIGN.md "What fast means" anchors (H200, 2026-11-29); used only as a
# fallback when a ceiling could not be measured in this run, and as targets.
ANCHOR_COPY_TBPS, ANCHOR_BF16_TFLOPS, ANCHOR_FP8_TFLOPS = 4.18, 761.0, 1376.0

D, H, HD, FFN, KV = 4096, 32, 128, 11008, 2048
WEIGHT_PARAMS = 4 * D * D + 3 * D * FFN  # 202,375,168
MB_ELEMS = 16384 * 4096
BF16 = 2

# --------------------------------------------------------------------------- workload model

def attn_flops(B, S, causal=True):
    f = 4 * B * H * S * S * HD
    return f / 2 if causal else f


def prefill_flops(B, S):
    return 2 * WEIGHT_PARAMS * B * S + attn_flops(B, S)


def decode_bytes(B):
    return WEIGHT_PARAMS * BF16 + B * 2 * KV * D * BF16


def decode_flops(B):
    return 2 * WEIGHT_PARAMS * B + 4 * B * H * KV * HD


# name: (label, class, bytes, flops, target text, target check(ms, rate))
# class: "gemm" (roofline = flops / bf16 GEMM ceiling), "mem" (bytes / copy bw).
# Nominal flops of the memory-bound kernels (per element: rmsnorm 4, add+rms 5,
# swiglu 5, softmax 5) only place them on the roofline plot.
WORKLOADS = {
    "prefill_b1": dict(label="prefill B=1 S=2048", cls="gemm", flops=prefill_flops(1, 2048),
                       bytes=WEIGHT_PARAMS * BF16 + 2 * 2048 * D * BF16, target_ms=1.25),
    "prefill_b4": dict(label="prefill B=4 S=2048", cls="gemm", flops=prefill_flops(4, 2048),
                       bytes=WEIGHT_PARAMS * BF16 + 2 * 4 * 2048 * D * BF16, target_ms=4.90),
    "decode_b1": dict(label="decode B=1, KV 2048", cls="mem", bytes=decode_bytes(1),
                      flops=decode_flops(1), target_ms=0.14),
    "decode_b32": dict(label="decode B=32, KV 2048", cls="mem", bytes=decode_bytes(32),
                       flops=decode_flops(32), target_ms=0.45),
    "rmsnorm": dict(label="RMSNorm 16384x4096", cls="mem", bytes=2 * MB_ELEMS * BF16 + D * BF16,
                    flops=4 * MB_ELEMS, target_tbps=3.8),
    "add_rmsnorm": dict(label="residual add + RMSNorm", cls="mem",
                        bytes=4 * MB_ELEMS * BF16 + D * BF16, flops=5 * MB_ELEMS, target_tbps=3.8),
    "swiglu": dict(label="SwiGLU 16384x4096", cls="mem", bytes=3 * MB_ELEMS * BF16,
                   flops=5 * MB_ELEMS, target_tbps=3.9),
    "softmax": dict(label="softmax (f32 math, bf16 io)", cls="mem", bytes=2 * MB_ELEMS * BF16,
                    flops=5 * MB_ELEMS, target_tbps=3.7),
    "attn_b4_s2048": dict(label="causal attention B=4 S=2048", cls="gemm",
                          flops=attn_flops(4, 2048), bytes=4 * 4 * 2048 * H * HD * BF16,
                          target_tflops=500),
    "attn_b1_s8192": dict(label="causal attention B=1 S=8192", cls="gemm",
                          flops=attn_flops(1, 8192), bytes=4 * 1 * 8192 * H * HD * BF16,
                          target_tflops=None),
}

# --------------------------------------------------------------------------- generated .mlir

T = "tensor<16384x4096xbf16>"
KERNEL_MLIR = {
    "rmsnorm": f"""func.func @rmsnorm(%x: {T}, %w: tensor<4096xbf16>) -> {T} {{
  %y = llm.rms_norm %x, %w {{eps = 1.0e-05 : f64}} : {T}, tensor<4096xbf16>
  return %y : {T}
}}
""",
    "add_rmsnorm": f"""func.func @add_rmsnorm(%x: {T}, %r: {T}, %w: tensor<4096xbf16>) -> ({T}, {T}) {{
  %s = llm.add %x, %r : {T}
  %y = llm.rms_norm %s, %w {{eps = 1.0e-05 : f64}} : {T}, tensor<4096xbf16>
  return %s, %y : {T}, {T}
}}
""",
    "swiglu": f"""func.func @swiglu(%g: {T}, %u: {T}) -> {T} {{
  %a = llm.silu %g : {T}
  %y = llm.mul %a, %u : {T}
  return %y : {T}
}}
""",
    "softmax": f"""func.func @softmax(%x: {T}) -> {T} {{
  %y = llm.softmax %x : {T}
  return %y : {T}
}}
""",
}


def attention_mlir(B, S):
    t = f"tensor<{B}x{S}x{H}x{HD}xbf16>"
    return f"""func.func @attention(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
  %o = llm.attention %q, %k, %v {{causal}} : {t}, {t}, {t}
  return %o : {t}
}}
"""


def batched_block_mlir(text, batch):
    """The example block has batch 1 fixed in its activation types: rewrite it."""
    out = text.replace("tensor<1x", f"tensor<{batch}x")
    if out == text:
        raise ValueError("no 'tensor<1x' activation type found in the block example")
    return out


def pos_arg_index(text, name="pos"):
    """0-based index of the %pos argument in the first func signature (for --value argI=)."""
    sig = text[text.index("func.func"):]
    sig = sig[sig.index("(") + 1:]
    args = re.findall(r"%([A-Za-z_][\w$.]*)\s*:", sig[: re.search(r"\)\s*->", sig).start()])
    return args.index(name)

# --------------------------------------------------------------------------- parsers

RE_E2E = re.compile(r"end to end: median ([0-9.]+) ms over (\d+) runs \(([^)]*)\)")
RE_LOAD = re.compile(r"loaded (\d+) kernels, (\d+) GEMMs in ([0-9.]+) ms")
RE_LAUNCH = re.compile(r"^\s+(\d+)\s+(.+?)\s+([0-9.]+) ms(?:\s+([0-9.]+) (TFLOP/s|TB/s)(.*))?$")
RE_COMPILED = re.compile(r"compiled: (\d+) llm ops -> (\d+) kernel launches \((\d+) distinct kernels\) \+ (\d+) GEMMs")
RE_CSTATS = re.compile(r"compile time: ([0-9.]+) ms front end \+ codegen, ([0-9.]+) ms NVRTC "
                       r"\((\d+) compiled, (\d+) memory hits, (\d+) disk hits\)")


def parse_llmc_run(text):
    r = {"launches": []}
    m = RE_E2E.search(text)
    if m:
        r["median_ms"], r["runs"], r["mode"] = float(m.group(1)), int(m.group(2)), m.group(3)
    m = RE_LOAD.search(text)
    if m:
        r["kernels"], r["gemms"], r["load_ms"] = int(m.group(1)), int(m.group(2)), float(m.group(3))
    m = RE_COMPILED.search(text)
    if m:
        r["llm_ops"], r["kernel_launches"] = int(m.group(1)), int(m.group(2))
    in_launches = False
    for line in text.splitlines():
        if line.startswith("per-launch times"):
            in_launches = True
            continue
        if in_launches:
            m = RE_LAUNCH.match(line)
            if not m:
                in_launches = False
                continue
            r["launches"].append({"i": int(m.group(1)), "label": m.group(2), "ms": float(m.group(3)),
                                  "rate": float(m.group(4)) if m.group(4) else None,
                                  "unit": m.group(5)})
    errs = [l for l in text.splitlines() if "error" in l.lower()]
    if errs:
        r["error_lines"] = errs[:10]
    return r


def parse_llmc_compile(text):
    m = RE_CSTATS.search(text)
    if not m:
        return {}
    return {"frontend_ms": float(m.group(1)), "nvrtc_ms": float(m.group(2)),
            "nvrtc_compiled": int(m.group(3)), "memory_hits": int(m.group(4)),
            "disk_hits": int(m.group(5))}

# --------------------------------------------------------------------------- process running

def run_proc(cmd, timeout, env=None, log=None):
    """Run cmd in its own process group; kill that group on timeout.
    Returns (rc or None on timeout, combined output, wall seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         cwd=ROOT, start_new_session=True, text=True, errors="replace")
    try:
        out, _ = p.communicate(timeout=max(1, timeout))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the group we started, by its id
        except (ProcessLookupError, PermissionError):
            pass
        try:
            out, _ = p.communicate(timeout=10)
        except Exception:  # noqa: BLE001
            out = ""
        rc = None
    wall = time.perf_counter() - t0
    if log:
        with open(log, "w") as f:
            f.write(f"$ {' '.join(cmd)}\n# rc={rc} wall={wall:.2f}s\n{out or ''}")
    return rc, out or "", wall


class Runner:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.t_start = time.perf_counter()
        self.tmp = tempfile.mkdtemp(prefix="llmc-bench-")
        self.res = {"meta": {}, "ceilings": {}, "workloads": {k: {} for k in WORKLOADS},
                    "compile": {}, "steps": {}, "errors": {}}
        self.env = dict(os.environ)
        self.env.setdefault("LLMC_CACHE_DIR", os.path.join(self.tmp, "llmc-cache"))
        self.env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        self.env["PYTHONUNBUFFERED"] = "1"
        bindir = args.llmc_bin
        libdir = os.path.join(os.path.dirname(bindir), "lib")
        self.env["LD_LIBRARY_PATH"] = libdir + ":" + self.env.get("LD_LIBRARY_PATH", "")
        self.llmc_run = os.path.join(bindir, "llmc-run")
        self.llmc_compile = os.path.join(bindir, "llmc-compile")

    def remaining(self):
        return self.args.budget - (time.perf_counter() - self.t_start)

    def save(self):
        self.res["meta"]["elapsed_s"] = round(time.perf_counter() - self.t_start, 1)
        path = os.path.join(self.out, "bench.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.res, f, indent=1, default=str)
        os.replace(path + ".tmp", path)

    def step(self, name, cap, fn, min_s=15):
        """Run one step under min(cap, remaining budget); never raises."""
        left = self.remaining()
        if left < min_s:
            self.res["steps"][name] = {"status": f"skipped: time budget ({left:.0f} s left)"}
            print(f"[bench] {name}: skipped (budget)", flush=True)
            self.save()
            return
        limit = min(cap, left)
        t0 = time.perf_counter()
        print(f"[bench] {name} (limit {limit:.0f} s) ...", flush=True)
        try:
            status = fn(limit) or "ok"
        except Exception as e:  # noqa: BLE001
            status = f"error: {type(e).__name__}: {e}"
            self.res["errors"][name] = traceback.format_exc()[-3000:]
        wall = time.perf_counter() - t0
        self.res["steps"][name] = {"status": status, "wall_s": round(wall, 2)}
        print(f"[bench] {name}: {status} ({wall:.1f} s)", flush=True)
        self.save()

    # ---- workers

    def worker(self, name, limit, **opts):
        path = os.path.join(self.tmp, f"w-{name}-{time.time_ns()}.json")
        env = dict(self.env)
        # Fresh Inductor/Triton caches per worker: compile times are cold.
        wdir = tempfile.mkdtemp(prefix="w-", dir=self.tmp)
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(wdir, "inductor")
        env["TRITON_CACHE_DIR"] = os.path.join(wdir, "triton")
        cmd = [sys.executable, os.path.join(HERE, "workers.py"), name, path] + \
              [f"{k}={v}" for k, v in opts.items()]
        tag = "-".join([name] + [f"{v}" for v in opts.values()]).replace(",", "+")
        rc, out, wall = run_proc(cmd, limit, env=env, log=os.path.join(self.logs, f"worker-{tag}.log"))
        data = {}
        if os.path.exists(path):
            try:
                with open(path) as f:
                    data = json.load(f)
            except Exception:  # noqa: BLE001
                data = {}
        data["_rc"], data["_wall_s"] = rc, round(wall, 2)
        if rc is None:
            data["_timeout"] = True
        if data.get("errors"):
            self.res["errors"][tag] = data["errors"]
        return data

    # ---- llmc

    def llmc(self, key, mlir_text, limit, extra=(), iters=50, filename=None):
        path = os.path.join(self.tmp, filename or f"{key}.mlir")
        with open(path, "w") as f:
            f.write(mlir_text)
        cmd = [self.llmc_run, path, "--bench", f"--iters={iters}"] + list(extra)
        rc, out, wall = run_proc(cmd, limit, env=self.env, log=os.path.join(self.logs, f"llmc-run-{key}.log"))
        r = parse_llmc_run(out)
        r["rc"], r["wall_s"], r["cmd"] = rc, round(wall, 2), " ".join(cmd[1:])
        self.res["workloads"][key]["llmc"] = r
        if rc is None:
            return f"timeout after {wall:.0f} s"
        if rc != 0 or "median_ms" not in r:
            return f"failed rc={rc}: " + " | ".join(r.get("error_lines", [out.strip()[-200:]]))[:300]
        return f"ok: {r['median_ms']:.4f} ms"

    def llmc_compile_times(self, key, mlir_path, limit, extra=()):
        cache = tempfile.mkdtemp(prefix="cc-", dir=self.tmp)
        env = dict(self.env)
        env["LLMC_CACHE_DIR"] = cache
        base = [self.llmc_compile, mlir_path, "--print-stats"] + list(extra)
        rec = {}
        deadline = time.perf_counter() + limit
        for label, flags in (("cold", ["--no-cache"]), ("populate", []), ("warm", [])):
            left = deadline - time.perf_counter()
            rc, out, wall = run_proc(base + flags, left, env=env,
                                     log=os.path.join(self.logs, f"llmc-compile-{key}-{label}.log"))
            rec[label] = dict(parse_llmc_compile(out), wall_s=wall, rc=rc)
            self.res["compile"][key] = {"llmc": rec}
            if rc != 0:
                return f"{label} failed rc={rc}"
        return f"ok: cold {rec['cold']['wall_s']:.2f} s, warm {rec['warm']['wall_s']*1e3:.0f} ms"


# --------------------------------------------------------------------------- the plan

def run_all(args):
    R = Runner(args)
    res = R.res
    q = args.quick
    meta = res["meta"]
    meta.update(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                quick=q, budget_s=args.budget, python=sys.version.split()[0],
                host=os.uname().nodename)
    # The commit the measured binaries were built from: dist/COMMIT (written by
    # scripts/make-dist.sh), else this checkout's HEAD.
    meta["commit"] = None
    try:
        with open(os.path.join(ROOT, "dist", "COMMIT")) as f:
            meta["commit"] = f.read().strip() or None
    except OSError:
        pass
    if not meta["commit"]:
        try:
            meta["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                            text=True, timeout=10).stdout.strip() or None
        except Exception:  # noqa: BLE001
            meta["commit"] = None
    meta["commit"] = meta["commit"] or os.environ.get("LLMC_COMMIT", "unknown")
    try:
        meta["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001
        meta["nvidia_smi"] = f"unavailable: {e}"
    R.save()

    try:
        plan(R, args)
    except Exception:  # noqa: BLE001 - a bug in the plan still leaves the report
        R.res["errors"]["plan"] = traceback.format_exc()
        print(R.res["errors"]["plan"], flush=True)
    finish(R.res, args.out)
    shutil.rmtree(R.tmp, ignore_errors=True)
    return R.res


def plan(R, args):
    res, q, meta = R.res, args.quick, R.res["meta"]
    ex_dir = args.examples
    block_path = os.path.join(ex_dir, "llama2_7b_block.mlir")
    decode_path = os.path.join(ex_dir, "llama2_7b_decode_step.mlir")
    W = res["workloads"]

    # 1. ceilings
    def ceilings(limit):
        d = R.worker("ceilings", limit)
        meta["gpu"] = d.get("gpu")
        meta["torch"] = d.get("torch")
        c = res["ceilings"]
        if "copy" in d:
            c["copy_tbps"], c["copy"] = d["copy"]["tbps"], d["copy"]
        if "bf16_gemm" in d:
            c["bf16_tflops"], c["bf16_gemm"] = d["bf16_gemm"]["tflops"], d["bf16_gemm"]
        if "fp8_gemm" in d:
            c["fp8_tflops"], c["fp8_gemm"] = d["fp8_gemm"]["tflops"], d["fp8_gemm"]
        return "ok" if len(c) >= 6 else f"partial: {sorted(k for k in c if not isinstance(c[k], dict))} rc={d['_rc']}"
    R.step("ceilings", 90, ceilings)

    # 2. llmc compile times (no GPU needed for these)
    R.step("llmc.compile.block", 60, lambda l: R.llmc_compile_times(
        "block_b1_s2048", block_path, l, ["--shape", "seq=2048"]))

    # 3. llmc workloads
    def block_text(batch):
        with open(block_path) as f:
            t = f.read()
        return t if batch == 1 else batched_block_mlir(t, batch)

    try:
        with open(decode_path) as f:
            decode_text = f.read()
        pos_idx = pos_arg_index(decode_text)  # 3: x, k_cache, v_cache, pos, ...
    except Exception:  # noqa: BLE001 - the decode steps then fail on their own
        R.res["errors"]["decode_example"] = traceback.format_exc()
        decode_text, pos_idx = "", 3
    meta["decode_pos_arg"] = f"arg{pos_idx}"

    R.step("llmc.prefill_b1", 90, lambda l: R.llmc("prefill_b1", block_text(1), l,
                                                   ["--shape", "seq=2048"], iters=50))
    R.step("llmc.decode_b1", 90, lambda l: R.llmc("decode_b1", decode_text, l,
                                                  ["--shape", "batch=1", "--value", f"arg{pos_idx}=2047"],
                                                  iters=100))
    for k in ("rmsnorm", "add_rmsnorm", "swiglu", "softmax"):
        R.step(f"llmc.{k}", 60, lambda l, k=k: R.llmc(k, KERNEL_MLIR[k], l, iters=100))
    attn_shapes = [(4, 2048)] + ([] if q else [(1, 8192)])
    for B, S in attn_shapes:
        R.step(f"llmc.attn_b{B}_s{S}", 60, lambda l, B=B, S=S: R.llmc(
            f"attn_b{B}_s{S}", attention_mlir(B, S), l, iters=50))

    # 4. torch: memory-bound kernels, attention
    def torch_kernels(limit):
        d = R.worker("kernels", limit)
        n = 0
        for k in ("rmsnorm", "add_rmsnorm", "swiglu", "softmax"):
            for mode in ("eager", "inductor"):
                if f"{k}.{mode}" in d:
                    W[k][mode] = d[f"{k}.{mode}"]
                    n += 1
        return ("ok: " if n == 8 else "partial: ") + f"{n}/8 measured" + (" (timeout)" if d.get("_timeout") else "")
    R.step("torch.kernels", 150, torch_kernels)

    def torch_attention(limit):
        shapes = ",".join(f"{B}x{S}" for B, S in attn_shapes)
        d = R.worker("attention", limit, shapes=shapes)
        n = 0
        for B, S in attn_shapes:
            key = f"attn_b{B}_s{S}"
            if f"{key}.flash" in d:
                W[key]["eager"] = d[f"{key}.flash"]
                n += 1
            if f"{key}.cudnn" in d:
                W[key]["cudnn"] = d[f"{key}.cudnn"]
                n += 1
        return ("ok: " if n == 2 * len(attn_shapes) else "partial: ") + f"{n} measured"
    R.step("torch.attention", 60, torch_attention)

    # 5. torch blocks (eager + Inductor default), XLA
    def torch_block(key, kind, batch, limit):
        d = R.worker("block", limit, kind=kind, batch=batch, modes="eager,inductor")
        for mode in ("eager", "inductor"):
            if mode in d:
                W[key][mode] = d[mode]
        if "inductor" in d:
            res["compile"].setdefault(key, {})["inductor_s"] = d["inductor"]["compile_s"]
        got = [m for m in ("eager", "inductor") if m in d]
        tail = (" (timeout)" if d.get("_timeout") else "") + (f" rc={d['_rc']}" if d.get("_rc") else "")
        if not got:
            return "no result" + tail
        return ("ok: " if len(got) == 2 else "partial: ") + f"measured {got}" + tail

    def xla_block(key, batch, limit):
        d = R.worker("xla", limit, batch=batch)
        if "xla" in d:
            W[key]["xla"] = d["xla"]
        if "compile" in d:
            res["compile"].setdefault(key, {})["xla_s"] = d["compile"]["total_s"]
            W[key]["xla_compile"] = d["compile"]
        return "ok" if "xla" in d else f"no result rc={d['_rc']}" + (" (timeout)" if d.get("_timeout") else "")

    R.step("torch.prefill_b1", 120, lambda l: torch_block("prefill_b1", "prefill", 1, l))
    R.step("torch.decode_b1", 120, lambda l: torch_block("decode_b1", "decode", 1, l))
    R.step("xla.prefill_b1", 90, lambda l: xla_block("prefill_b1", 1, l))
    if not q:
        R.step("llmc.prefill_b4", 90, lambda l: R.llmc("prefill_b4", block_text(4), l,
                                                       ["--shape", "seq=2048"], iters=50,
                                                       filename="llama2_7b_block_b4.mlir"))
        R.step("torch.prefill_b4", 120, lambda l: torch_block("prefill_b4", "prefill", 4, l))
        R.step("xla.prefill_b4", 90, lambda l: xla_block("prefill_b4", 4, l))
        R.step("torch.decode_b32", 120, lambda l: torch_block("decode_b32", "decode", 32, l))
        # llmc-run builds its inputs on the host in float64 (2 x 1 GiB KV caches
        # here) and reads the updated caches back: slow on the host, short on the GPU.
        R.step("llmc.decode_b32", 240, lambda l: R.llmc(
            "decode_b32", decode_text, l,
            ["--shape", "batch=32", "--value", f"arg{pos_idx}=2047"], iters=100), min_s=60)

        # 6. max-autotune last: only if it compiles within ~90 s.
        def max_autotune(key, batch, limit):
            d = R.worker("block", limit, kind="prefill", batch=batch, modes="max-autotune")
            if "max_autotune" in d:
                W[key]["max_autotune"] = d["max_autotune"]
                res["compile"].setdefault(key, {})["max_autotune_s"] = d["max_autotune"]["compile_s"]
                return "ok"
            if d.get("_timeout"):
                if limit < 110:  # cut short by the run's budget, not by the 90 s compile rule
                    W[key]["max_autotune_skipped"] = f"skipped: time budget ({limit:.0f} s)"
                elif "max_autotune_started" in d:
                    W[key]["max_autotune_skipped"] = "skipped: compile > 90 s"
                else:
                    W[key]["max_autotune_skipped"] = "skipped: worker timeout"
                return W[key]["max_autotune_skipped"]
            return f"no result rc={d['_rc']}"
        R.step("torch.max_autotune_b1", 120, lambda l: max_autotune("prefill_b1", 1, l), min_s=60)
        R.step("torch.max_autotune_b4", 120, lambda l: max_autotune("prefill_b4", 4, l), min_s=60)
        for key in ("prefill_b1", "prefill_b4"):
            st = res["steps"].get(f"torch.max_autotune_{key[-2:]}", {}).get("status", "")
            if st.startswith("skipped: time budget"):
                W[key]["max_autotune_skipped"] = "skipped: time budget"

# --------------------------------------------------------------------------- report

def ceilings_used(res):
    c = res.get("ceilings", {})
    return (c.get("copy_tbps") or ANCHOR_COPY_TBPS, c.get("bf16_tflops") or ANCHOR_BF16_TFLOPS,
            "copy_tbps" in c and "bf16_tflops" in c)


def ms_of(entry):
    return entry.get("median_ms") if isinstance(entry, dict) else None


def derive(res):
    """Roofline, fractions, speedups, rates for every workload row."""
    copy_tbps, bf16_tflops, measured = ceilings_used(res)
    rows = []
    for key, spec in WORKLOADS.items():
        w = res["workloads"].get(key, {})
        roof_ms = (spec["flops"] / (bf16_tflops * 1e12) if spec["cls"] == "gemm"
                   else spec["bytes"] / (copy_tbps * 1e12)) * 1e3
        r = {"key": key, "label": spec["label"], "roofline_ms": roof_ms,
             "llmc_ms": ms_of(w.get("llmc")), "eager_ms": ms_of(w.get("eager")),
             "inductor_ms": ms_of(w.get("inductor")), "max_autotune_ms": ms_of(w.get("max_autotune")),
             "xla_ms": ms_of(w.get("xla")), "cudnn_ms": ms_of(w.get("cudnn")),
             "max_autotune_note": w.get("max_autotune_skipped")}
        lm = r["llmc_ms"]
        if lm:
            r["llmc_frac_roofline"] = roof_ms / lm
            r["llmc_tbps"] = spec["bytes"] / (lm * 1e-3) / 1e12
            r["llmc_tflops"] = spec["flops"] / (lm * 1e-3) / 1e12
            for other in ("eager", "inductor", "max_autotune", "xla"):
                if r[f"{other}_ms"]:
                    r[f"speedup_vs_{other}"] = r[f"{other}_ms"] / lm
        for other in ("eager", "inductor", "xla"):
            if r[f"{other}_ms"]:
                r[f"{other}_tbps"] = spec["bytes"] / (r[f"{other}_ms"] * 1e-3) / 1e12
                r[f"{other}_tflops"] = spec["flops"] / (r[f"{other}_ms"] * 1e-3) / 1e12
        # Target from DESIGN.md.
        if "target_ms" in spec:
            r["target"] = f"<= {spec['target_ms']} ms"
            r["target_met"] = lm is not None and lm <= spec["target_ms"]
        elif spec.get("target_tbps"):
            r["target"] = f">= {spec['target_tbps']} TB/s"
            r["target_met"] = lm is not None and r["llmc_tbps"] >= spec["target_tbps"]
        elif spec.get("target_tflops"):
            r["target"] = f">= {spec['target_tflops']} TFLOP/s"
            r["target_met"] = lm is not None and r["llmc_tflops"] >= spec["target_tflops"]
        rows.append(r)
    res["derived"] = {"rows": rows, "copy_tbps_used": copy_tbps, "bf16_tflops_used": bf16_tflops,
                      "ceilings_measured": measured}
    return rows


def fmt(v, nd=3):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if v >= 100:
        return f"{v:.1f}"
    if v >= 10:
        return f"{v:.2f}"
    return f"{v:.{nd}f}" if v >= 1 else f"{v:.4f}"


def rate_str(r):
    spec = WORKLOADS[r["key"]]
    if r.get("llmc_ms") is None:
        return "—"
    if spec["cls"] == "mem" and r["key"].startswith(("decode",)):
        return f"{r['llmc_tbps']:.2f} TB/s"
    if spec["cls"] == "mem":
        return f"{r['llmc_tbps']:.2f} TB/s"
    return f"{r['llmc_tflops']:.0f} TFLOP/s"


def table_markdown(res):
    rows = res["derived"]["rows"]
    hdr = ["workload", "llmc ms", "eager", "inductor", "max-autotune", "XLA", "roofline ms",
           "llmc / roofline", "llmc rate", "vs eager", "vs inductor", "target"]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in rows:
        ma = r["max_autotune_ms"] if r["max_autotune_ms"] else (r["max_autotune_note"] or None)
        tgt = r.get("target", "")
        if tgt and r.get("llmc_ms") is not None:
            tgt += " ✓" if r.get("target_met") else " ✗"
        eager = fmt(r["eager_ms"])
        if r["key"].startswith("attn") and r.get("cudnn_ms"):
            eager += f" (cuDNN {fmt(r['cudnn_ms'])})"
        cells = [r["label"], fmt(r["llmc_ms"]), eager, fmt(r["inductor_ms"]), fmt(ma),
                 fmt(r["xla_ms"]), fmt(r["roofline_ms"]),
                 f"{r['llmc_frac_roofline']:.2f}" if r.get("llmc_frac_roofline") else "—",
                 rate_str(r),
                 f"{r['speedup_vs_eager']:.2f}x" if r.get("speedup_vs_eager") else "—",
                 f"{r['speedup_vs_inductor']:.2f}x" if r.get("speedup_vs_inductor") else "—",
                 tgt]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ceilings_markdown(res):
    c = res.get("ceilings", {})
    copy_tbps, bf16, measured = ceilings_used(res)

    def g(k, unit, anchor):
        v = c.get(k)
        return f"{v:.2f} {unit} ({v / anchor:.2f}x the DESIGN anchor {anchor})" if v else \
            f"not measured (DESIGN anchor {anchor} {unit} used)"
    return "\n".join([
        f"- device copy (4 GiB, read+write): {g('copy_tbps', 'TB/s', ANCHOR_COPY_TBPS)}",
        f"- bf16 GEMM 8192³ (torch.matmul): {g('bf16_tflops', 'TFLOP/s', ANCHOR_BF16_TFLOPS)}",
        f"- fp8 e4m3 GEMM 8192³ (torch._scaled_mm): {g('fp8_tflops', 'TFLOP/s', ANCHOR_FP8_TFLOPS)}",
    ])


def compile_markdown(res):
    comp = res.get("compile", {})
    lines = ["| block | llmc cold (wall) | llmc cold (in-process) | llmc warm, cache hit (wall) | "
             "llmc warm (in-process) | Inductor | max-autotune | XLA lower+compile |",
             "|---|---|---|---|---|---|---|---|"]
    keys = ["block_b1_s2048", "prefill_b1", "prefill_b4", "decode_b1", "decode_b32"]
    names = {"block_b1_s2048": "prefill B=1 S=2048 (llmc-compile)", "prefill_b1": "prefill B=1 S=2048",
             "prefill_b4": "prefill B=4 S=2048", "decode_b1": "decode B=1", "decode_b32": "decode B=32"}
    merged = {}
    for k in keys:
        merged[k] = dict(comp.get(k, {}))
    # The llmc compile measurement is of the B=1 block: show it on that row.
    if "llmc" in merged.get("block_b1_s2048", {}):
        merged["prefill_b1"]["llmc"] = merged["block_b1_s2048"]["llmc"]
    for k in keys[1:]:
        m = merged[k]
        ll = m.get("llmc", {})
        cold, warm = ll.get("cold", {}), ll.get("warm", {})

        def inproc(d):
            if "frontend_ms" not in d:
                return "—"
            return f"{(d['frontend_ms'] + d['nvrtc_ms']):.0f} ms ({d['nvrtc_compiled']} NVRTC, {d['disk_hits']} disk hits)"
        if not any(m.get(x) is not None for x in ("llmc", "inductor_s", "max_autotune_s", "xla_s")):
            continue
        lines.append("| " + " | ".join([
            names[k],
            f"{cold['wall_s']:.2f} s" if cold.get("wall_s") is not None and cold.get("rc") == 0 else "—",
            inproc(cold),
            f"{warm['wall_s'] * 1e3:.0f} ms" if warm.get("wall_s") is not None and warm.get("rc") == 0 else "—",
            inproc(warm),
            f"{m['inductor_s']:.1f} s" if m.get("inductor_s") is not None else "—",
            f"{m['max_autotune_s']:.1f} s" if m.get("max_autotune_s") is not None else "—",
            f"{m['xla_s']:.1f} s" if m.get("xla_s") is not None else "—",
        ]) + " |")
    return "\n".join(lines)


def steps_markdown(res):
    bad = [(k, v["status"]) for k, v in res.get("steps", {}).items()
           if not str(v.get("status", "")).startswith("ok")]
    if not bad:
        return ""
    return "Steps not fully measured:\n\n" + "\n".join(f"- `{k}`: {s}" for k, s in bad)


def section_markdown(res):
    m = res["meta"]
    parts = [f"## Run {m.get('date')} — {m.get('gpu') or 'unknown GPU'}, commit `{str(m.get('commit'))[:12]}`",
             "",
             f"Machine: {m.get('gpu')} ({m.get('nvidia_smi', '')}); torch {m.get('torch')}; "
             f"python {m.get('python')}; {'--quick' if m.get('quick') else 'full'} run, {m.get('elapsed_s')} s.",
             "",
             "Ceilings measured in this run:", "", ceilings_markdown(res), "",
             "Times are medians in ms (CUDA events; llmc: CUDA-graph replay from `llmc-run --bench`). "
             "Roofline = FLOPs / measured bf16 GEMM rate (prefill, attention) or bytes / measured copy "
             "bandwidth (decode: weights + KV cache; kernels: inputs read once + outputs written once). "
             "`llmc / roofline` = roofline ms / llmc ms (1.0 = at the ceiling).", "",
             table_markdown(res), "", "Compile times:", "", compile_markdown(res), ""]
    s = steps_markdown(res)
    if s:
        parts += [s, ""]
    return "\n".join(parts)


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    copy_tbps, bf16, _ = ceilings_used(res)
    fig, ax = plt.subplots(figsize=(9, 6))
    ai = [10 ** (x / 20) for x in range(-20, 91)]  # 0.01 .. 1e5 FLOP/B
    ax.plot(ai, [min(bf16, a * copy_tbps) for a in ai], "k-", lw=1.5,
            label=f"roofline: copy {copy_tbps:.2f} TB/s, bf16 GEMM {bf16:.0f} TFLOP/s")
    fp8 = res.get("ceilings", {}).get("fp8_tflops")
    if fp8:
        ax.axhline(fp8, color="gray", ls=":", lw=1, label=f"fp8 GEMM {fp8:.0f} TFLOP/s")
    styles = {"llmc": ("o", "tab:red"), "eager": ("s", "tab:blue"), "inductor": ("^", "tab:green")}
    for who, (mk, col) in styles.items():
        first = True
        for r in res["derived"]["rows"]:
            ms = r.get(f"{who}_ms")
            if not ms:
                continue
            spec = WORKLOADS[r["key"]]
            x = spec["flops"] / spec["bytes"]
            y = spec["flops"] / (ms * 1e-3) / 1e12
            ax.scatter([x], [y], marker=mk, color=col, s=40 if who == "llmc" else 20,
                       label=who if first else None, zorder=3)
            first = False
            if who == "llmc":
                ax.annotate(r["label"], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    g = res.get("ceilings", {}).get("bf16_gemm")
    if g:
        n = 8192
        ax.scatter([2 * n**3 / (3 * n * n * 2)], [res["ceilings"]["bf16_tflops"]], marker="*",
                   color="k", s=80, label="torch bf16 GEMM 8192³", zorder=3)
    ax.set_xlim(0.1, 3e4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte that must move)")
    ax.set_ylabel("achieved TFLOP/s")
    m = res["meta"]
    ax.set_title(f"llmc on {m.get('gpu') or '?'} — {m.get('date')} — {str(m.get('commit'))[:10]}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def finish(res, out):
    try:
        derive(res)
    except Exception:  # noqa: BLE001
        res["errors"]["derive"] = traceback.format_exc()
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    try:
        plot(res, os.path.join(out, "roofline.png"))
    except Exception:  # noqa: BLE001
        res["errors"]["plot"] = traceback.format_exc()
        print("[bench] plot failed:\n" + res["errors"]["plot"], flush=True)
    try:
        sec = section_markdown(res)
        with open(os.path.join(out, "performance_section.md"), "w") as f:
            f.write(sec)
    except Exception:  # noqa: BLE001
        res["errors"]["markdown"] = traceback.format_exc()
        sec = None
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    # The table LAST.
    print()
    if res.get("errors"):
        print(f"[bench] errors recorded for: {', '.join(sorted(res['errors']))} (see bench.json, logs/)")
    if sec:
        print(ceilings_markdown(res))
        print()
        print(compile_markdown(res))
        print()
        s = steps_markdown(res)
        if s:
            print(s)
            print()
        print(table_markdown(res))
    else:
        print(json.dumps(res.get("derived", {}), indent=1, default=str)[-6000:])

# --------------------------------------------------------------------------- dry run

def dry_run(args):
    """No GPU: exercise parsers, .mlir generation, timeouts, table, JSON and plot."""
    sample = os.path.join(HERE, "testdata", "llmc-run-sample.txt")
    with open(sample) as f:
        p = parse_llmc_run(f.read())
    assert abs(p["median_ms"] - 1.4123) < 1e-9 and p["runs"] == 50, p
    assert p["kernels"] == 6 and p["gemms"] == 7 and len(p["launches"]) == 14, p
    assert p["launches"][1]["unit"] == "TFLOP/s" and p["launches"][0]["unit"] == "TB/s", p
    with open(os.path.join(HERE, "testdata", "llmc-compile-sample.txt")) as f:
        c = parse_llmc_compile(f.read())
    assert c == {"frontend_ms": 0.9, "nvrtc_ms": 1155.2, "nvrtc_compiled": 6, "memory_hits": 0,
                 "disk_hits": 0}, c
    bad = parse_llmc_run("llmc-run: error: cannot load libcuda.so.1\n")
    assert "median_ms" not in bad and bad["error_lines"], bad
    print("[dry-run] parsers ok")

    # Generated .mlir: decode pos index, batched block, and (if built) llmc-opt verifies them.
    with open(os.path.join(args.examples, "llama2_7b_decode_step.mlir")) as f:
        assert pos_arg_index(f.read()) == 3
    with open(os.path.join(args.examples, "llama2_7b_block.mlir")) as f:
        b4 = batched_block_mlir(f.read(), 4)
    assert "tensor<1x" not in b4 and "tensor<4x?x4096xbf16>" in b4
    tmp = tempfile.mkdtemp(prefix="llmc-bench-dry-")
    texts = dict(KERNEL_MLIR, attn_b4_s2048=attention_mlir(4, 2048), attn_b1_s8192=attention_mlir(1, 8192),
                 prefill_b4=b4)
    opt = os.path.join(args.llmc_bin, "llmc-opt")
    for k, t in texts.items():
        path = os.path.join(tmp, k + ".mlir")
        with open(path, "w") as f:
            f.write(t)
        if os.path.exists(opt):
            rc, out, _ = run_proc([opt, path], 30)
            assert rc == 0, (k, out)
    print(f"[dry-run] generated .mlir ok ({'verified by llmc-opt' if os.path.exists(opt) else 'llmc-opt not found, not verified'})")

    # Timeout path: a child that sleeps past its limit is killed, and a failing step is recorded.
    rc, out, wall = run_proc([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"], 1)
    assert rc is None and wall < 15, (rc, wall)
    print(f"[dry-run] timeout kill ok ({wall:.1f} s)")

    # Fake numbers through derive/table/JSON/plot, including a missing row and a skipped column.
    res = {"meta": {"date": "dry-run", "gpu": "FAKE H200", "commit": os.environ.get("LLMC_COMMIT", "dry-run"),
                    "quick": False, "python": sys.version.split()[0], "elapsed_s": 0},
           "ceilings": {"copy_tbps": 4.18, "bf16_tflops": 761.0, "fp8_tflops": 1376.0,
                        "bf16_gemm": {"median_ms": 1.445}},
           "workloads": {k: {} for k in WORKLOADS}, "compile": {}, "steps": {}, "errors": {}}
    fake = {"prefill_b1": (1.4123, 1.92, 1.56, 1.52, 1.48), "prefill_b4": (5.1, 6.87, 5.62, None, 5.86),
            "decode_b1": (0.16, 0.64, 0.51, None, None), "decode_b32": (0.5, 2.97, 1.10, None, None),
            "rmsnorm": (0.075, 0.87, 0.11, None, None), "add_rmsnorm": (0.15, 0.96, 0.196, None, None),
            "swiglu": (0.105, 0.366, 0.108, None, None), "softmax": (0.08, 0.51, 0.226, None, None),
            "attn_b4_s2048": (0.3, 0.53, None, None, None)}  # attn_b1_s8192 left missing on purpose
    for k, (l, e, i, ma, x) in fake.items():
        w = res["workloads"][k]
        w["llmc"] = dict(p, median_ms=l)
        w["eager"] = {"median_ms": e}
        if i:
            w["inductor"] = {"median_ms": i}
        if ma:
            w["max_autotune"] = {"median_ms": ma}
        if x:
            w["xla"] = {"median_ms": x}
    res["workloads"]["prefill_b4"]["max_autotune_skipped"] = "skipped: compile > 90 s"
    res["workloads"]["attn_b4_s2048"]["cudnn"] = {"median_ms": 0.29}
    res["compile"] = {"block_b1_s2048": {"llmc": {"cold": dict(c, wall_s=0.61, rc=0),
                                                  "warm": dict(c, nvrtc_compiled=0, disk_hits=6, wall_s=0.05, rc=0)}},
                      "prefill_b1": {"inductor_s": 6.4, "max_autotune_s": 32.0, "xla_s": 2.3},
                      "decode_b1": {"inductor_s": 5.0}}
    res["steps"] = {"ceilings": {"status": "ok"}, "llmc.attn_b1_s8192": {"status": "timeout after 60 s"}}
    out = args.out or tempfile.mkdtemp(prefix="llmc-bench-dry-out-")
    os.makedirs(out, exist_ok=True)
    finish(res, out)
    for f in ("bench.json", "roofline.png", "performance_section.md"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    r = {x["key"]: x for x in res["derived"]["rows"]}
    assert abs(r["prefill_b1"]["roofline_ms"] - 1.134) < 0.01, r["prefill_b1"]["roofline_ms"]
    assert abs(r["decode_b1"]["roofline_ms"] - 0.105) < 0.001, r["decode_b1"]["roofline_ms"]
    assert abs(r["decode_b32"]["roofline_ms"] - 0.354) < 0.001, r["decode_b32"]["roofline_ms"]
    print(f"\n[dry-run] ok: outputs in {out}")
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--quick", action="store_true", help="~3.5 min: no max-autotune, no B=4/B=32/S=8192 rows")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: test parsing, table, JSON, plot")
    ap.add_argument("--budget", type=float, default=None,
                    help="hard wall-clock budget in seconds (default 470, --quick 210)")
    dist = os.path.join(ROOT, "dist")
    default_bin = os.path.join(dist, "bin") if os.path.exists(os.path.join(dist, "bin", "llmc-run")) \
        else os.path.join(ROOT, "build", "bin")
    default_ex = os.path.join(dist, "share", "llmc", "examples")
    if not os.path.isdir(default_ex):
        default_ex = os.path.join(ROOT, "examples")
    ap.add_argument("--llmc-bin", default=default_bin)
    ap.add_argument("--examples", default=default_ex)
    args = ap.parse_args()
    if args.budget is None:
        args.budget = 210.0 if args.quick else 470.0
    if args.dry_run:
        dry_run(args)
        return 0
    if not args.out:
        args.out = os.path.join(ROOT, "bench-out")
    os.makedirs(args.out, exist_ok=True)
    try:
        run_all(args)
    except Exception:  # noqa: BLE001 - last resort: still leave a JSON behind
        tb = traceback.format_exc()
        print(tb, flush=True)
        with open(os.path.join(args.out, "driver-error.txt"), "w") as f:
            f.write(tb)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
