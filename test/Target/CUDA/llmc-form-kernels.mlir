// The kernels the CUDA lowering emits, shown in IR by llmc-form-kernels
// (llm.kernel = {group, kind} on every op of a kernel of two or more ops,
// and llm.kernels_formed on the function): the one decision of the kernel
// grouping, which LowerToExecutable reads back (lib/Compiler/KernelPlan.h;
// test/unit/compiler/KernelPlanTest.cpp checks that it obeys), pinned here
// instead of through --print-stats counts.
// RUN: llmc-opt --split-input-file --llmc-hoist-parameter-work --llmc-form-kernels %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-hoist-parameter-work --llmc-form-kernels="gemv=0" %s | FileCheck %s --check-prefix=NOGEMV
// RUN: echo 'func.func @d(%%x: tensor<?x8xf32>) -> tensor<?x8xf32> { %%e = llm.exp %%x : tensor<?x8xf32>  func.return %%e : tensor<?x8xf32> }' | not llmc-opt --llmc-form-kernels 2>&1 | FileCheck %s --check-prefix=DYN

// A residual add computed by the norm kernel; an elementwise chain.
// CHECK-LABEL: func.func @residual_and_chain
// CHECK-SAME: attributes {llm.kernels_formed, llm.parameter_preparation_planned}
// CHECK: llm.add %arg0, %arg1 {llm.kernel = {group = 0 : i64, kind = "residual_norm"}}
// CHECK: llm.rms_norm {{.*}}llm.kernel = {group = 0 : i64, kind = "residual_norm"}
// CHECK: llm.exp %{{.+}} {llm.kernel = {group = 1 : i64, kind = "elementwise"}}
// CHECK: llm.neg %{{.+}} {llm.kernel = {group = 1 : i64, kind = "elementwise"}}
// CHECK: llm.mul %{{.+}}, %{{.+}} {llm.kernel = {group = 1 : i64, kind = "elementwise"}}
func.func @residual_and_chain(%h: tensor<4x64xbf16>, %r: tensor<4x64xbf16>, %g: tensor<64xbf16>) -> (tensor<4x64xbf16>, tensor<4x64xbf16>) {
  %s = llm.add %h, %r : tensor<4x64xbf16>
  %n = llm.rms_norm %s, %g {eps = 1.0e-05 : f64} : tensor<4x64xbf16>, tensor<64xbf16>
  %e = llm.exp %n : tensor<4x64xbf16>
  %x = llm.neg %e : tensor<4x64xbf16>
  %y = llm.mul %x, %s : tensor<4x64xbf16>
  return %s, %y : tensor<4x64xbf16>, tensor<4x64xbf16>
}

// -----

// Parameter preparation never shares a kernel with per-call work: the
// weight's cast and negation are one prepared kernel, the multiply by the
// activation runs per call on its own (no llm.kernel: a one-op kernel).
// CHECK-LABEL: func.func @prepared_boundary
// CHECK: llm.cast %arg1 {llm.kernel = {group = 0 : i64, kind = "elementwise"}, llm.parameter_preparation}
// CHECK: llm.neg %{{.+}} {llm.kernel = {group = 0 : i64, kind = "elementwise"}, llm.parameter_preparation}
// CHECK: llm.mul %arg0, %{{.+}} : tensor<4x64xbf16>
func.func @prepared_boundary(%x: tensor<4x64xbf16>, %w: tensor<64xf32> {llm.param}) -> tensor<4x64xbf16> {
  %c = llm.cast %w : tensor<64xf32> to tensor<64xbf16>
  %n = llm.neg %c : tensor<64xbf16>
  %b = llm.broadcast %n : tensor<64xbf16> to tensor<4x64xbf16>
  %y = llm.mul %x, %b : tensor<4x64xbf16>
  return %y : tensor<4x64xbf16>
}

// -----

// Decode: the q, k and v projections of one token read x once in a
// multi-output GEMV; SwiGLU's gate and up projections, the SiLU and the
// product are one GEMV kernel. With gemv=0 each projection is a GEMM.
// CHECK-LABEL: func.func @decode_gemvs
// CHECK: llm.matmul {{.*}}llm.kernel = {group = 0 : i64, kind = "multi_gemv"}
// CHECK: llm.matmul {{.*}}llm.kernel = {group = 0 : i64, kind = "multi_gemv"}
// CHECK: llm.matmul {{.*}}llm.kernel = {group = 0 : i64, kind = "multi_gemv"}
// CHECK: llm.matmul {{.*}}llm.kernel = {group = 1 : i64, kind = "swiglu_gemv"}
// CHECK: llm.matmul {{.*}}llm.kernel = {group = 1 : i64, kind = "swiglu_gemv"}
// CHECK: llm.silu %{{.+}} {llm.kernel = {group = 1 : i64, kind = "swiglu_gemv"}}
// CHECK: llm.mul %{{.+}}, %{{.+}} {llm.kernel = {group = 1 : i64, kind = "swiglu_gemv"}}
// NOGEMV-LABEL: func.func @decode_gemvs
// NOGEMV-NOT: gemv
// NOGEMV: llm.silu %{{.+}} {llm.kernel = {group = 0 : i64, kind = "elementwise"}}
// NOGEMV: llm.mul %{{.+}}, %{{.+}} {llm.kernel = {group = 0 : i64, kind = "elementwise"}}
func.func @decode_gemvs(%x: tensor<1x256xbf16>, %wq: tensor<256x256xbf16>, %wk: tensor<128x256xbf16>, %wv: tensor<128x256xbf16>,
                        %h: tensor<1x256xbf16>, %wg: tensor<512x256xbf16>, %wu: tensor<512x256xbf16>)
    -> (tensor<1x256xbf16>, tensor<1x128xbf16>, tensor<1x128xbf16>, tensor<1x512xbf16>) {
  %q = llm.matmul %x, %wq {transpose_rhs} : tensor<1x256xbf16>, tensor<256x256xbf16> -> tensor<1x256xbf16>
  %k = llm.matmul %x, %wk {transpose_rhs} : tensor<1x256xbf16>, tensor<128x256xbf16> -> tensor<1x128xbf16>
  %v = llm.matmul %x, %wv {transpose_rhs} : tensor<1x256xbf16>, tensor<128x256xbf16> -> tensor<1x128xbf16>
  %g = llm.matmul %h, %wg {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %u = llm.matmul %h, %wu {transpose_rhs} : tensor<1x256xbf16>, tensor<512x256xbf16> -> tensor<1x512xbf16>
  %a = llm.silu %g : tensor<1x512xbf16>
  %m = llm.mul %a, %u : tensor<1x512xbf16>
  return %q, %k, %v, %m : tensor<1x256xbf16>, tensor<1x128xbf16>, tensor<1x128xbf16>, tensor<1x512xbf16>
}

// -----

// RoPE written into a KV cache by the index_put's kernel (rope_cache_write):
// a decode step's k into a [B, H, S, D] cache through gpt-fast's transpose,
// reshape and broadcast of size-1 dims, and a 3-token prefill into a
// [B, S, H, D] cache.
// CHECK-LABEL: func.func @rope_cache_writes
// CHECK: llm.rope {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.index_put {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.rope {{.*}}llm.kernel = {group = 1 : i64, kind = "rope_cache_write"}
// CHECK: llm.index_put {{.*}}llm.kernel = {group = 1 : i64, kind = "rope_cache_write"}
// CHECK: return
func.func @rope_cache_writes(%k: tensor<1x1x4x64xbf16>, %c1: tensor<1x1x64xbf16>, %s1: tensor<1x1x64xbf16>,
                             %hnd: tensor<1x4x128x64xbf16> {llm.donate}, %pos: tensor<1xi64>,
                             %kp: tensor<2x3x4x64xbf16>, %c3: tensor<3x64xf32>, %s3: tensor<3x64xf32>,
                             %nhd: tensor<2x128x4x64xbf16> {llm.donate}, %pos3: tensor<3xi64>)
    -> (tensor<1x4x128x64xbf16>, tensor<2x128x4x64xbf16>) {
  %kr = llm.rope %k cos(%c1 : tensor<1x1x64xbf16>) sin(%s1 : tensor<1x1x64xbf16>) half_split : tensor<1x1x4x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x4x64xbf16>
  %k3 = llm.reshape %kt : tensor<1x4x1x64xbf16> to tensor<4x1x64xbf16>
  %kb = llm.broadcast %k3 : tensor<4x1x64xbf16> to tensor<1x4x1x64xbf16>
  %w1 = llm.index_put %hnd[%pos], %kb dim = 2 : tensor<1x4x128x64xbf16>, tensor<1xi64>, tensor<1x4x1x64xbf16>
  %pr = llm.rope %kp cos(%c3 : tensor<3x64xf32>) sin(%s3 : tensor<3x64xf32>) interleaved : tensor<2x3x4x64xbf16>
  %w2 = llm.index_put %nhd[%pos3], %pr dim = 1 : tensor<2x128x4x64xbf16>, tensor<3xi64>, tensor<2x3x4x64xbf16>
  return %w1, %w2 : tensor<1x4x128x64xbf16>, tensor<2x128x4x64xbf16>
}

// -----

// Not fused: a rotated q that is also returned (read twice), a write that
// accumulates, and a RoPE whose sequence dimension is not the written one.
// CHECK-LABEL: func.func @not_rope_cache_writes
// CHECK-NOT: rope_cache_write
// CHECK: return
func.func @not_rope_cache_writes(%kp: tensor<2x3x4x64xbf16>, %c3: tensor<3x64xf32>, %s3: tensor<3x64xf32>,
                                 %pos3: tensor<3xi64>, %q: tensor<2x3x4x64xbf16>,
                                 %acc: tensor<2x128x4x64xbf16>,
                                 %byhead: tensor<2x3x128x64xbf16> {llm.donate}, %h4: tensor<4xi64>,
                                 %nhd2: tensor<2x128x4x64xbf16> {llm.donate})
    -> (tensor<2x3x4x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x3x128x64xbf16>) {
  %qr = llm.rope %q cos(%c3 : tensor<3x64xf32>) sin(%s3 : tensor<3x64xf32>) half_split : tensor<2x3x4x64xbf16>
  %w3 = llm.index_put %nhd2[%pos3], %qr dim = 1 : tensor<2x128x4x64xbf16>, tensor<3xi64>, tensor<2x3x4x64xbf16>
  %ar = llm.rope %q cos(%c3 : tensor<3x64xf32>) sin(%s3 : tensor<3x64xf32>) interleaved : tensor<2x3x4x64xbf16>
  %w4 = llm.index_put %acc[%pos3], %ar dim = 1 {accumulate} : tensor<2x128x4x64xbf16>, tensor<3xi64>, tensor<2x3x4x64xbf16>
  %hr = llm.rope %kp cos(%c3 : tensor<3x64xf32>) sin(%s3 : tensor<3x64xf32>) half_split : tensor<2x3x4x64xbf16>
  %w5 = llm.index_put %byhead[%h4], %hr dim = 2 : tensor<2x3x128x64xbf16>, tensor<4xi64>, tensor<2x3x4x64xbf16>
  return %qr, %w3, %w4, %w5 : tensor<2x3x4x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x3x128x64xbf16>
}

// -----

// A decode step's q, k and v from one fused QKV output (gpt-fast): the q
// RoPE (same tables; GQA: more heads) and the v cache write (same index
// and cache layout) join the k write's launch, which runs at the last of
// them.
// CHECK-LABEL: func.func @decode_qkv
// CHECK: llm.rope {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.index_put {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.index_put {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.rope {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.attention
func.func @decode_qkv(%qkv: tensor<1x1x512xbf16>, %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
                      %kc: tensor<1x2x128x64xbf16> {llm.donate}, %vc: tensor<1x2x128x64xbf16> {llm.donate},
                      %pos: tensor<1xi64>) -> (tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>) {
  %k0 = llm.slice %qkv [0, 0, 256] to [1, 1, 384] step [1, 1, 1] : tensor<1x1x512xbf16>
  %k1 = llm.reshape %k0 : tensor<1x1x128xbf16> to tensor<1x1x2x64xbf16>
  %kr = llm.rope %k1 cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x2x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %kw = llm.index_put %kc[%pos], %kt dim = 2 : tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %v0 = llm.slice %qkv [0, 0, 384] to [1, 1, 512] step [1, 1, 1] : tensor<1x1x512xbf16>
  %v1 = llm.reshape %v0 : tensor<1x1x128xbf16> to tensor<1x1x2x64xbf16>
  %vt = llm.transpose %v1 [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %vw = llm.index_put %vc[%pos], %vt dim = 2 : tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %q0 = llm.slice %qkv [0, 0, 0] to [1, 1, 256] step [1, 1, 1] : tensor<1x1x512xbf16>
  %q1 = llm.reshape %q0 : tensor<1x1x256xbf16> to tensor<1x1x4x64xbf16>
  %qr = llm.rope %q1 cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x4x64xbf16>
  %o = llm.attention %qr, %kw, %vw {kv_hnd} : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
  return %o, %kw, %vw : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
}

// -----

// Hugging Face's order: q and k rotated together (q first), then the cache
// updates: the q RoPE before k's joins the launch too.
// CHECK-LABEL: func.func @decode_qkv_hf_order
// CHECK: llm.rope {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.rope {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.index_put {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.index_put {{.*}}llm.kernel = {group = 0 : i64, kind = "rope_cache_write"}
// CHECK: llm.attention
func.func @decode_qkv_hf_order(%q: tensor<1x1x4x64xbf16>, %k: tensor<1x1x2x64xbf16>, %v: tensor<1x1x2x64xbf16>,
                               %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
                               %kc: tensor<1x2x128x64xbf16> {llm.donate}, %vc: tensor<1x2x128x64xbf16> {llm.donate},
                               %pos: tensor<1xi64>) -> (tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>) {
  %qr = llm.rope %q cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x4x64xbf16>
  %kr = llm.rope %k cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x2x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %kw = llm.index_put %kc[%pos], %kt dim = 2 : tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %vt = llm.transpose %v [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %vw = llm.index_put %vc[%pos], %vt dim = 2 : tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %o = llm.attention %qr, %kw, %vw {kv_hnd} : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
  return %o, %kw, %vw : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
}

// DYN: error: 'llm.exp' op llmc-form-kernels expects static shapes and element types codegen supports, found 'tensor<?x8xf32>'
