#!/usr/bin/env python3
"""Generates test/cases/*.mlir from ../shared/cases/README.md (C2, C3).

Each file has a lit RUN line (every kernel compiles with NVRTC for sm_90a and
sm_80) and a line `// ARGS: <llmc-run flags>`; scripts/gpu-round.sh
runs every case with `llmc-run --check` against the CPU reference executor.
"""
import os

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "cases")
os.makedirs(OUT, exist_ok=True)

# C3: (query heads, KV heads) x head dims x dtypes; prefill 7x7 and decode 1x300.
for hq, hkv in [(8, 1), (9, 3), (12, 2), (32, 8)]:
    for d in [64, 80, 96, 128, 256]:
        for dt in ["f32", "bf16"]:
            q = f"tensor<1x7x{hq}x{d}x{dt}>"
            kv = f"tensor<1x7x{hkv}x{d}x{dt}>"
            name = f"c3_prefill_h{hq}_kv{hkv}_d{d}_{dt}"
            with open(os.path.join(OUT, name + ".mlir"), "w") as f:
                f.write(f"""// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C3: causal GQA attention, query length 7 against KV length 7, RoPE at 0.
func.func @{name}(%q: {q}, %k: {kv}, %v: {kv}) -> {q} {{
  %qr = llm.rope %q half_split : {q}
  %kr = llm.rope %k half_split : {kv}
  %o = llm.attention %qr, %kr, %v {{causal}} : {q}, {kv}, {kv}
  return %o : {q}
}}
""")
            q1 = f"tensor<1x1x{hq}x{d}x{dt}>"
            k1 = f"tensor<1x1x{hkv}x{d}x{dt}>"
            cache = f"tensor<1x300x{hkv}x{d}x{dt}>"
            name = f"c3_decode_h{hq}_kv{hkv}_d{d}_{dt}"
            with open(os.path.join(OUT, name + ".mlir"), "w") as f:
                f.write(f"""// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS: --value arg4=299
// C3: one decode step at position 299: RoPE at offset 299, append K/V to a
// 300-row cache, attend the 300 valid rows (kv_len = pos + 1).
func.func @{name}(%q: {q1}, %k: {k1}, %kc: {cache}, %vc: {cache}, %pos: tensor<i64>) -> {q1} {{
  %one = llm.constant dense<1> : tensor<i64>
  %len = llm.add %pos, %one : tensor<i64>
  %qr = llm.rope %q offset %pos half_split : {q1}, tensor<i64>
  %kr = llm.rope %k offset %pos half_split : {k1}, tensor<i64>
  %kc2 = llm.kv_cache_append %kc, %kr, %pos : {cache}, {k1}, tensor<i64>
  %vc2 = llm.kv_cache_append %vc, %k, %pos : {cache}, {k1}, tensor<i64>
  %o = llm.attention %qr, %kc2, %vc2 kv_len(%len : tensor<i64>) {{causal}} : {q1}, {cache}, {cache}
  return %o : {q1}
}}
""")

# C2: tiny decoder with sizes that are not multiples of 8/16/128: vocab 50257
# (LM head tied to the embedding), hidden 200, head dims 80 and 96, batch 3.
for d in [80, 96]:
    heads = 2
    inner = heads * d
    ffn = 536
    dt = "bf16"
    name = f"c2_tiny_decoder_d{d}"
    x = f"tensor<3x?x200x{dt}>"
    with open(os.path.join(OUT, name + ".mlir"), "w") as f:
        f.write(f"""// RUN: llmc-compile %s --shape seq=129 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: GEMMs: 8
// ARGS: --shape seq=5
// C2: tied-embedding decoder, hidden 200, {heads} heads x {d}, SwiGLU {ffn},
// vocab 50257, batch 3, bf16; f32 logits.
func.func @{name}(%tokens: tensor<3x?xi64> {{llm.dim_names = ["seq"]}},
    %wte: tensor<50257x200x{dt}>, %n1: tensor<200x{dt}>,
    %wq: tensor<{inner}x200x{dt}>, %wk: tensor<{inner}x200x{dt}>, %wv: tensor<{inner}x200x{dt}>,
    %wo: tensor<200x{inner}x{dt}>, %n2: tensor<200x{dt}>,
    %wg: tensor<{ffn}x200x{dt}>, %wu: tensor<{ffn}x200x{dt}>, %wd: tensor<200x{ffn}x{dt}>,
    %nf: tensor<200x{dt}>) -> tensor<3x?x50257xf32> {{
  %x = llm.gather %wte, %tokens axis = 0 : tensor<50257x200x{dt}>, tensor<3x?xi64>
  %h = llm.rms_norm %x, %n1 : {x}, tensor<200x{dt}>
  %q = llm.matmul %h, %wq {{transpose_rhs}} : {x}, tensor<{inner}x200x{dt}> -> tensor<3x?x{inner}x{dt}>
  %k = llm.matmul %h, %wk {{transpose_rhs}} : {x}, tensor<{inner}x200x{dt}> -> tensor<3x?x{inner}x{dt}>
  %v = llm.matmul %h, %wv {{transpose_rhs}} : {x}, tensor<{inner}x200x{dt}> -> tensor<3x?x{inner}x{dt}>
  %q4 = llm.reshape %q : tensor<3x?x{inner}x{dt}> to tensor<3x?x{heads}x{d}x{dt}>
  %k4 = llm.reshape %k : tensor<3x?x{inner}x{dt}> to tensor<3x?x{heads}x{d}x{dt}>
  %v4 = llm.reshape %v : tensor<3x?x{inner}x{dt}> to tensor<3x?x{heads}x{d}x{dt}>
  %qr = llm.rope %q4 half_split : tensor<3x?x{heads}x{d}x{dt}>
  %kr = llm.rope %k4 half_split : tensor<3x?x{heads}x{d}x{dt}>
  %a = llm.attention %qr, %kr, %v4 {{causal}} : tensor<3x?x{heads}x{d}x{dt}>, tensor<3x?x{heads}x{d}x{dt}>, tensor<3x?x{heads}x{d}x{dt}>
  %a2 = llm.reshape %a : tensor<3x?x{heads}x{d}x{dt}> to tensor<3x?x{inner}x{dt}>
  %o = llm.matmul %a2, %wo {{transpose_rhs}} : tensor<3x?x{inner}x{dt}>, tensor<200x{inner}x{dt}> -> {x}
  %r1 = llm.add %x, %o : {x}
  %h2 = llm.rms_norm %r1, %n2 : {x}, tensor<200x{dt}>
  %g = llm.matmul %h2, %wg {{transpose_rhs}} : {x}, tensor<{ffn}x200x{dt}> -> tensor<3x?x{ffn}x{dt}>
  %u = llm.matmul %h2, %wu {{transpose_rhs}} : {x}, tensor<{ffn}x200x{dt}> -> tensor<3x?x{ffn}x{dt}>
  %s = llm.silu %g : tensor<3x?x{ffn}x{dt}>
  %m = llm.mul %s, %u : tensor<3x?x{ffn}x{dt}>
  %dn = llm.matmul %m, %wd {{transpose_rhs}} : tensor<3x?x{ffn}x{dt}>, tensor<200x{ffn}x{dt}> -> {x}
  %r2 = llm.add %r1, %dn : {x}
  %hf = llm.rms_norm %r2, %nf : {x}, tensor<200x{dt}>
  %logits = llm.matmul %hf, %wte {{transpose_rhs}} : {x}, tensor<50257x200x{dt}> -> tensor<3x?x50257xf32>
  return %logits : tensor<3x?x50257xf32>
}}
""")

# C2 under the fp8 policy: the tiny decoder's GEMMs (hidden 200, head dims 80
# and 96 with 2 heads, SwiGLU 536, the tied LM head over vocab 50257, batch 3)
# at every sequence length, so M = 3 * seq and K in {200, 160, 192, 536} are
# (mostly) not multiples of 16. llmc-pad-layout pads them for cuBLASLt's fp8
# GEMMs; each GEMM reads its own random inputs and is checked on its own
# against the graph as written (fp8 tolerance 0.125: one GEMM is ~0.05).
for d in [80, 96]:
    inner = 2 * d
    for seq in [1, 5, 127, 129, 1025]:
        name = f"c2_fp8_gemms_d{d}_s{seq}"
        x = f"tensor<3x{seq}x200xbf16>"
        a = f"tensor<3x{seq}x{inner}xbf16>"
        m = f"tensor<3x{seq}x536xbf16>"
        with open(os.path.join(OUT, name + ".mlir"), "w") as f:
            f.write(f"""// RUN: llmc-compile %s --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: GEMMs: 5
// ARGS: --precision=fp8
// C2 under fp8: the tiny decoder's GEMMs with M = 3 x {seq} = {3 * seq}, head dim {d}
// (2 heads), SwiGLU 536, LM head tied to the [50257, 200] embedding; bf16
// operands, per-tensor scaled e4m3 on the GPU, padded to multiples of 32.
func.func @{name}(%x: {x}, %a: {a}, %m: {m},
    %wq: tensor<{inner}x200xbf16>, %wo: tensor<200x{inner}xbf16>,
    %wg: tensor<536x200xbf16>, %wd: tensor<200x536xbf16>,
    %wte: tensor<50257x200xbf16>) -> (tensor<3x{seq}x{inner}xbf16>, {x}, {m}, {x}, tensor<3x{seq}x50257xf32>) {{
  %q = llm.matmul %x, %wq {{transpose_rhs}} : {x}, tensor<{inner}x200xbf16> -> tensor<3x{seq}x{inner}xbf16>
  %o = llm.matmul %a, %wo {{transpose_rhs}} : {a}, tensor<200x{inner}xbf16> -> {x}
  %g = llm.matmul %x, %wg {{transpose_rhs}} : {x}, tensor<536x200xbf16> -> {m}
  %dn = llm.matmul %m, %wd {{transpose_rhs}} : {m}, tensor<200x536xbf16> -> {x}
  %logits = llm.matmul %x, %wte {{transpose_rhs}} : {x}, tensor<50257x200xbf16> -> tensor<3x{seq}x50257xf32>
  return %q, %o, %g, %dn, %logits : tensor<3x{seq}x{inner}xbf16>, {x}, {m}, {x}, tensor<3x{seq}x50257xf32>
}}
""")

# C1: low-precision norms and long reductions.
for dt in ["f16", "bf16"]:
    x = f"tensor<3x7x4096x{dt}>"
    w = f"tensor<4096x{dt}>"
    name = f"c1_norms_{dt}"
    # "Within a few ulps of the output type": 2e-3 is ~2 f16 ulps; bf16's
    # ulp is 2^-8..2^-7 relative, so the default 1e-2 is ~1-2 ulps.
    tol = " --tol=2e-3" if dt == "f16" else ""
    with open(os.path.join(OUT, name + ".mlir"), "w") as f:
        f.write(f"""// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches: 2
// ARGS: --input arg0=@C1X@{tol}
// C1: RMSNorm and LayerNorm over [3, 7, 4096] in {dt}, eps 1e-5. The input
// (scripts/gen-c1-inputs.py) has row block 0 ~ N(0, 1), block 1 scaled to
// |x| ~ 300 (the sum of squares overflows fp16), block 2 constant 1e-6
// (variance ~ eps). Norms accumulate in fp32, so every output is finite.
func.func @{name}(%x: {x}, %w: {w}, %b: {w}) -> ({x}, {x}) {{
  %r = llm.rms_norm %x, %w {{eps = 1.0e-05 : f64}} : {x}, {w}
  %l = llm.layer_norm %x, %w, %b {{eps = 1.0e-05 : f64}} : {x}, {w}, {w}
  return %r, %l : {x}, {x}
}}
""")

with open(os.path.join(OUT, "c1_variance_norm_f16.mlir"), "w") as f:
    f.write("""// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS: --input arg0=@C1TINY@
// C1: a variance-style norm on an f16 [3, 5] tensor whose every value is
// 1e-10: var over the last dim, + 1e-9, rsqrt, times x. In f16, 1e-10 and
// 1e-9 both round to 0 (below half the smallest subnormal, 2^-25), so the
// variance is 0, rsqrt(0) = inf and x * inf = 0 * inf = NaN: llmc returns NaN
// everywhere, fused or not, because every llm op's result is rounded to its
// element type (fused kernels round each node too) — the same as PyTorch
// eager in f16. Compute such norms in f32 to get a finite result.
func.func @c1_variance_norm_f16(%x: tensor<3x5xf16>) -> tensor<3x5xf16> {
  %m = llm.reduce_mean %x [1] keepdim : tensor<3x5xf16>
  %mb = llm.broadcast %m : tensor<3x1xf16> to tensor<3x5xf16>
  %d = llm.sub %x, %mb : tensor<3x5xf16>
  %sq = llm.mul %d, %d : tensor<3x5xf16>
  %v = llm.reduce_mean %sq [1] keepdim : tensor<3x5xf16>
  %eps = llm.constant dense<1.0e-09> : tensor<3x1xf16>
  %ve = llm.add %v, %eps : tensor<3x1xf16>
  %r = llm.rsqrt %ve : tensor<3x1xf16>
  %rb = llm.broadcast %r : tensor<3x1xf16> to tensor<3x5xf16>
  %y = llm.mul %x, %rb : tensor<3x5xf16>
  return %y : tensor<3x5xf16>
}
""")

with open(os.path.join(OUT, "c1_long_sum_bf16.mlir"), "w") as f:
    f.write("""// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C1: the sum of 2^25 ones stored in bf16 is 2^25 (fp32 accumulation split
// over blocks; a bf16 accumulator would stall at 256).
func.func @c1_long_sum_bf16() -> tensor<bf16> {
  %one = llm.constant dense<1.0> : tensor<1xbf16>
  %x = llm.broadcast %one : tensor<1xbf16> to tensor<33554432xbf16>
  %s = llm.reduce_sum %x [0] : tensor<33554432xbf16>
  return %s : tensor<bf16>
}
""")

with open(os.path.join(OUT, "c1_long_mean_f32.mlir"), "w") as f:
    f.write("""// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C1: the mean of 2^28 float32 values, all 0.5, is 0.5 within 1e-5.
func.func @c1_long_mean_f32() -> tensor<f32> {
  %half = llm.constant dense<0.5> : tensor<1xf32>
  %x = llm.broadcast %half : tensor<1xf32> to tensor<268435456xf32>
  %m = llm.reduce_mean %x [0] : tensor<268435456xf32>
  return %m : tensor<f32>
}
""")
