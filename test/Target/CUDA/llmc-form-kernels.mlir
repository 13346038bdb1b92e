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

// DYN: error: 'llm.exp' op llmc-form-kernels expects static shapes and element types codegen supports, found 'tensor<?x8xf32>'
