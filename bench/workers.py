"""GPU-side measurement workers for bench/run.py (torch, Inductor, JAX/XLA).

Each worker runs in its own subprocess (started by run.py with a hard
timeout) and writes its results to a JSON file after EVERY measurement, so a
timeout or crash still leaves everything measured up to that point.

    python3 bench/workers.py NAME RESULT.json [key=value ...]

Timing: CUDA events around each call, warm-up first, median of >= 50
repeats, no L2 flush (llmc-run times back-to-back CUDA-graph replays, so both
sides see the same cache state). Inputs are fresh random tensors (never
zeros); none of the workloads here fit in the 50 MB L2 (weights alone are
405 MB, every memory-bound tensor is 134 MB), so inputs are not rotated.
"""
import json
import os
import sys
import time
import traceback

RESULT = {}
RESULT_PATH = None


def save():
    tmp = RESULT_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULT, f, indent=1, default=str)
    os.replace(tmp, RESULT_PATH)


def record(key, value):
    RESULT[key] = value
    save()


def attempt(key, fn):
    """Run one measurement; on failure record the error under errors[key]."""
    try:
        v = fn()
        if v is not None:
            record(key, v)
        return v
    except Exception as e:  # noqa: BLE001 - every failure is recorded, never fatal
        RESULT.setdefault("errors", {})[key] = f"{type(e).__name__}: {e}"[:2000]
        RESULT.setdefault("tracebacks", {})[key] = traceback.format_exc()[-4000:]
        save()
        try:
            import torch
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
        return None


# --------------------------------------------------------------------------- torch timing

def bench_ms(fn, min_reps=50, max_reps=200, warmup=10, target_s=1.0):
    """Median milliseconds of fn() over >= min_reps calls, CUDA events per call."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # Estimate one call to pick the repeat count (bounded by target_s).
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(3):
        fn()
    e.record()
    torch.cuda.synchronize()
    est = max(s.elapsed_time(e) / 3, 1e-3)
    reps = int(min(max_reps, max(min_reps, target_s * 1e3 / est)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in zip(starts, stops))
    return {"median_ms": t[len(t) // 2], "min_ms": t[0], "max_ms": t[-1], "reps": reps}


def compile_and_time(fn, args, mode=None):
    """torch.compile(fn); compile time = first call - steady-state median."""
    import torch
    kw = {} if mode is None else {"mode": mode}
    cfn = torch.compile(fn, **kw)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    cfn(*args)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    r = bench_ms(lambda: cfn(*args))
    r["first_call_s"] = first_s
    r["compile_s"] = max(0.0, first_s - r["median_ms"] / 1e3)
    return r


# --------------------------------------------------------------------------- workers

def w_ceilings(opts):
    import torch
    dev = "cuda"
    RESULT["gpu"] = torch.cuda.get_device_name(0)
    RESULT["torch"] = torch.__version__
    save()

    def copy():
        n = 4 * 2**30 // 2  # 4 GiB of bf16
        src = torch.randn(n, device=dev, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        r = bench_ms(lambda: dst.copy_(src), min_reps=30, max_reps=60, warmup=3)
        r["bytes"] = 2 * n * 2
        r["tbps"] = r["bytes"] / (r["median_ms"] * 1e-3) / 1e12
        return r  # the 8 GiB are freed on return

    def gemm():
        n = 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
        r = bench_ms(lambda: torch.matmul(a, b, out=c))
        r["tflops"] = 2 * n**3 / (r["median_ms"] * 1e-3) / 1e12
        return r

    def fp8():
        n = 8192
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        bt = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = bt.t()  # column-major, as cuBLASLt fp8 wants
        one = torch.tensor(1.0, device=dev)
        r = bench_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                              out_dtype=torch.bfloat16))
        r["tflops"] = 2 * n**3 / (r["median_ms"] * 1e-3) / 1e12
        return r

    attempt("copy", copy)
    torch.cuda.empty_cache()
    attempt("bf16_gemm", gemm)
    attempt("fp8_gemm", fp8)


# ---- memory-bound kernels

def _kernel_fns():
    import torch
    import torch.nn.functional as F

    def rmsnorm(x, w, eps=1e-5):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return w * xf.to(x.dtype)

    def add_rmsnorm(x, r, w):
        s = x + r
        return s, rmsnorm(s, w)

    def swiglu(g, u):
        return F.silu(g) * u

    def softmax(x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype)

    return {"rmsnorm": rmsnorm, "add_rmsnorm": add_rmsnorm, "swiglu": swiglu,
            "softmax": softmax}


def w_kernels(opts):
    import torch
    fns = _kernel_fns()
    M, N = 16384, 4096
    bf = torch.bfloat16

    def x():
        return torch.randn(M, N, device="cuda", dtype=bf)

    w = torch.randn(N, device="cuda", dtype=bf)
    inputs = {"rmsnorm": lambda: (x(), w), "add_rmsnorm": lambda: (x(), x(), w),
              "swiglu": lambda: (x(), x()), "softmax": lambda: (x(),)}
    for name in opts.get("only", "rmsnorm,add_rmsnorm,swiglu,softmax").split(","):
        args = inputs[name]()
        fn = fns[name]
        with torch.no_grad():
            attempt(f"{name}.eager", lambda: bench_ms(lambda: fn(*args)))
            attempt(f"{name}.inductor", lambda: compile_and_time(fn, args))
        args = None  # noqa: F841 - free before the next kernel's inputs
        torch.cuda.empty_cache()


def w_attention(opts):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shapes = [tuple(int(v) for v in s.split("x")) for s in opts.get("shapes", "4x2048,1x8192").split(",")]
    H, D = 32, 128
    for B, S in shapes:
        # llmc's layout is [B, S, H, D]; SDPA wants [B, H, S, D]: pass transposed views.
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        flops = 4 * B * H * S * S * D / 2
        for backend, label in ((SDPBackend.FLASH_ATTENTION, "flash"),
                               (SDPBackend.CUDNN_ATTENTION, "cudnn")):
            def run(backend=backend):
                with sdpa_kernel(backend):
                    return bench_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True))
            r = attempt(f"attn_b{B}_s{S}.{label}", run)
            if r:
                r["tflops"] = flops / (r["median_ms"] * 1e-3) / 1e12
                record(f"attn_b{B}_s{S}.{label}", r)
        q = k = v = qt = kt = vt = None  # noqa: F841
        torch.cuda.empty_cache()


# ---- LLaMA-2-7B block (torch)

D_MODEL, N_HEADS, HEAD_DIM, FFN, EPS, THETA, KV_LEN = 4096, 32, 128, 11008, 1e-5, 1e4, 2048


def _weights(torch, d=D_MODEL, ffn=FFN):
    dev, bf = "cuda", torch.bfloat16

    def lin(o, i):  # nn.Linear layout [out, in], ~N(0, 1/sqrt(in))
        return (torch.randn(o, i, device=dev) * i ** -0.5).to(bf)

    return {"attn_norm": torch.randn(d, device=dev, dtype=bf),
            "wq": lin(d, d), "wk": lin(d, d), "wv": lin(d, d), "wo": lin(d, d),
            "ffn_norm": torch.randn(d, device=dev, dtype=bf),
            "w_gate": lin(ffn, d), "w_up": lin(ffn, d), "w_down": lin(d, ffn)}


def _rope_tables(torch, n):
    inv = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2, device="cuda", dtype=torch.float32) / HEAD_DIM))
    f = torch.outer(torch.arange(n, device="cuda", dtype=torch.float32), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


def _make_block(torch):
    import torch.nn.functional as F

    def rmsnorm(x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        return w * xf.to(x.dtype)

    def rope(x, cos, sin):  # half-split; x [B, S, H, D], cos/sin broadcastable
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def mlp(r1, W):
        h2 = rmsnorm(r1, W["ffn_norm"])
        f = F.silu(F.linear(h2, W["w_gate"])) * F.linear(h2, W["w_up"])
        return r1 + F.linear(f, W["w_down"])

    class Prefill(torch.nn.Module):
        def __init__(self, W, S):
            super().__init__()
            for k, v in W.items():
                self.register_buffer(k, v)
            cos, sin = _rope_tables(torch, S)
            self.register_buffer("cos", cos[None, :, None, :])
            self.register_buffer("sin", sin[None, :, None, :])

        def forward(self, x):
            W = {k: getattr(self, k) for k in ("attn_norm", "wq", "wk", "wv", "wo",
                                               "ffn_norm", "w_gate", "w_up", "w_down")}
            B, S, d = x.shape
            h = rmsnorm(x, W["attn_norm"])
            q = F.linear(h, W["wq"]).view(B, S, N_HEADS, HEAD_DIM)
            k = F.linear(h, W["wk"]).view(B, S, N_HEADS, HEAD_DIM)
            v = F.linear(h, W["wv"]).view(B, S, N_HEADS, HEAD_DIM)
            q, k = rope(q, self.cos, self.sin), rope(k, self.cos, self.sin)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            o = o.transpose(1, 2).reshape(B, S, d)
            r1 = x + F.linear(o, W["wo"])
            return mlp(r1, W)

    class Decode(torch.nn.Module):
        """One decode step against [B, KV_LEN, H, D] caches; pos is a 0-d int64 tensor.
        Appends k/v at pos in place and attends the first pos+1 rows (length mask)."""

        def __init__(self, W):
            super().__init__()
            for k, v in W.items():
                self.register_buffer(k, v)
            cos, sin = _rope_tables(torch, KV_LEN)
            self.register_buffer("cos", cos)
            self.register_buffer("sin", sin)
            self.register_buffer("idx", torch.arange(KV_LEN, device="cuda"))

        def forward(self, x, k_cache, v_cache, pos):
            W = {k: getattr(self, k) for k in ("attn_norm", "wq", "wk", "wv", "wo",
                                               "ffn_norm", "w_gate", "w_up", "w_down")}
            B, _, d = x.shape
            h = rmsnorm(x, W["attn_norm"])
            q = F.linear(h, W["wq"]).view(B, 1, N_HEADS, HEAD_DIM)
            k = F.linear(h, W["wk"]).view(B, 1, N_HEADS, HEAD_DIM)
            v = F.linear(h, W["wv"]).view(B, 1, N_HEADS, HEAD_DIM)
            cos = self.cos.index_select(0, pos.view(1)).view(1, 1, 1, HEAD_DIM)
            sin = self.sin.index_select(0, pos.view(1)).view(1, 1, 1, HEAD_DIM)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            k_cache.index_copy_(1, pos.view(1), k)
            v_cache.index_copy_(1, pos.view(1), v)
            mask = (self.idx <= pos).view(1, 1, 1, KV_LEN)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache.transpose(1, 2),
                                               v_cache.transpose(1, 2), attn_mask=mask)
            o = o.transpose(1, 2).reshape(B, 1, d)
            r1 = x + F.linear(o, W["wo"])
            return mlp(r1, W)

    return Prefill, Decode


def w_block(opts):
    """opts: kind=prefill|decode, batch=B, modes=eager,inductor | max-autotune"""
    import torch
    torch.manual_seed(0)
    kind, B = opts["kind"], int(opts["batch"])
    modes = opts.get("modes", "eager,inductor").split(",")
    Prefill, Decode = _make_block(torch)
    W = _weights(torch)
    if kind == "prefill":
        S = int(opts.get("seq", 2048))
        m = Prefill(W, S).eval()
        args = (torch.randn(B, S, D_MODEL, device="cuda", dtype=torch.bfloat16),)
    else:
        m = Decode(W).eval()
        kc = torch.randn(B, KV_LEN, N_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        vc = torch.randn(B, KV_LEN, N_HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        pos = torch.tensor(int(opts.get("pos", KV_LEN - 1)), device="cuda", dtype=torch.int64)
        args = (torch.randn(B, 1, D_MODEL, device="cuda", dtype=torch.bfloat16), kc, vc, pos)
    with torch.no_grad():
        for mode in modes:
            if mode == "eager":
                attempt("eager", lambda: bench_ms(lambda: m(*args)))
            elif mode == "inductor":
                attempt("inductor", lambda: compile_and_time(m, args))
            elif mode == "max-autotune":
                record("max_autotune_started", time.time())
                attempt("max_autotune", lambda: compile_and_time(
                    m, args, mode="max-autotune-no-cudagraphs"))


# ---- JAX / XLA block (prefill)

def w_xla(opts):
    import jax
    import jax.numpy as jnp
    RESULT["jax"] = jax.__version__
    RESULT["jax_devices"] = [str(d) for d in jax.devices()]
    save()
    B, S = int(opts["batch"]), int(opts.get("seq", 2048))
    d, ffn = int(opts.get("d", D_MODEL)), int(opts.get("ffn", FFN))
    H = d // HEAD_DIM
    bf = jnp.bfloat16
    key = jax.random.PRNGKey(0)
    ks = jax.random.split(key, 12)

    def lin(k, o, i):
        return (jax.random.normal(k, (o, i), jnp.float32) * i ** -0.5).astype(bf)

    W = {"attn_norm": jax.random.normal(ks[0], (d,), bf), "wq": lin(ks[1], d, d),
         "wk": lin(ks[2], d, d), "wv": lin(ks[3], d, d), "wo": lin(ks[4], d, d),
         "ffn_norm": jax.random.normal(ks[5], (d,), bf), "w_gate": lin(ks[6], ffn, d),
         "w_up": lin(ks[7], ffn, d), "w_down": lin(ks[8], d, ffn)}
    x = jax.random.normal(ks[9], (B, S, d), bf)
    inv = 1.0 / (THETA ** (jnp.arange(0, HEAD_DIM, 2, dtype=jnp.float32) / HEAD_DIM))
    f = jnp.outer(jnp.arange(S, dtype=jnp.float32), inv)
    emb = jnp.concatenate([f, f], -1)
    cos, sin = jnp.cos(emb).astype(bf)[None, :, None, :], jnp.sin(emb).astype(bf)[None, :, None, :]

    def rmsnorm(x, w):
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + EPS)
        return w * xf.astype(x.dtype)

    def rope(t):
        t1, t2 = t[..., : HEAD_DIM // 2], t[..., HEAD_DIM // 2:]
        return t * cos + jnp.concatenate([-t2, t1], -1) * sin

    def block(x, W):
        h = rmsnorm(x, W["attn_norm"])
        q = (h @ W["wq"].T).reshape(B, S, H, HEAD_DIM)
        k = (h @ W["wk"].T).reshape(B, S, H, HEAD_DIM)
        v = (h @ W["wv"].T).reshape(B, S, H, HEAD_DIM)
        o = jax.nn.dot_product_attention(rope(q), rope(k), v, is_causal=True)  # [B,S,H,D]
        r1 = x + o.reshape(B, S, d) @ W["wo"].T
        h2 = rmsnorm(r1, W["ffn_norm"])
        ff = jax.nn.silu(h2 @ W["w_gate"].T) * (h2 @ W["w_up"].T)
        return r1 + ff @ W["w_down"].T

    jitted = jax.jit(block)
    t0 = time.perf_counter()
    lowered = jitted.lower(x, W)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    record("compile", {"lower_s": t1 - t0, "compile_s": t2 - t1, "total_s": t2 - t0})
    for _ in range(5):
        compiled(x, W).block_until_ready()
    # No CUDA events in JAX: time batches of back-to-back calls (dispatch is
    # asynchronous, so the host overhead hides) and take the median batch.
    per = int(opts.get("calls_per_batch", 10))
    nb = int(opts.get("batches", 8))
    samples = []
    for _ in range(nb):
        t0 = time.perf_counter()
        for _ in range(per):
            out = compiled(x, W)
        out.block_until_ready()
        samples.append((time.perf_counter() - t0) * 1e3 / per)
    samples.sort()
    record("xla", {"median_ms": samples[len(samples) // 2], "min_ms": samples[0],
                   "max_ms": samples[-1], "reps": per * nb,
                   "method": f"host clock, median of {nb} batches of {per} calls"})


WORKERS = {"ceilings": w_ceilings, "kernels": w_kernels, "attention": w_attention,
           "block": w_block, "xla": w_xla}


def main(argv):
    global RESULT_PATH
    name, RESULT_PATH = argv[1], argv[2]
    opts = dict(a.split("=", 1) for a in argv[3:])
    RESULT["worker"] = name
    RESULT["opts"] = opts
    save()
    try:
        WORKERS[name](opts)
    except Exception as e:  # noqa: BLE001
        RESULT.setdefault("errors", {})["worker"] = f"{type(e).__name__}: {e}"[:2000]
        RESULT.setdefault("tracebacks", {})["worker"] = traceback.format_exc()[-4000:]
    RESULT["done"] = True
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
