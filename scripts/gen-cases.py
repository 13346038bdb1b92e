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
