// RUN: llmc-opt %s | FileCheck %s
// RUN: llmc-opt %s | llmc-opt | FileCheck %s
// RUN: llmc-opt --mlir-print-op-generic %s | llmc-opt | FileCheck %s

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<4x?xbf16>, %b: tensor<4x?xbf16>, %i: tensor<8xi32>) -> tensor<4x?xbf16> {
  // CHECK: llm.add %{{.*}}, %{{.*}} : tensor<4x?xbf16>
  %0 = llm.add %a, %b : tensor<4x?xbf16>
  // CHECK: llm.sub
  %1 = llm.sub %0, %b : tensor<4x?xbf16>
  // CHECK: llm.mul
  %2 = llm.mul %1, %b : tensor<4x?xbf16>
  // CHECK: llm.div
  %3 = llm.div %2, %b : tensor<4x?xbf16>
  // CHECK: llm.pow
  %4 = llm.pow %3, %b : tensor<4x?xbf16>
  // CHECK: llm.maximum
  %5 = llm.maximum %4, %b : tensor<4x?xbf16>
  // CHECK: llm.minimum
  %6 = llm.minimum %5, %b : tensor<4x?xbf16>
  // CHECK: llm.neg
  %7 = llm.neg %6 : tensor<4x?xbf16>
  // CHECK: llm.abs
  %8 = llm.abs %7 : tensor<4x?xbf16>
  // CHECK: llm.exp
  %9 = llm.exp %8 : tensor<4x?xbf16>
  // CHECK: llm.log
  %10 = llm.log %9 : tensor<4x?xbf16>
  // CHECK: llm.tanh
  %11 = llm.tanh %10 : tensor<4x?xbf16>
  // CHECK: llm.sqrt
  %12 = llm.sqrt %11 : tensor<4x?xbf16>
  // CHECK: llm.rsqrt
  %13 = llm.rsqrt %12 : tensor<4x?xbf16>
  // CHECK: llm.silu
  %14 = llm.silu %13 : tensor<4x?xbf16>
  // CHECK: llm.gelu %{{.*}} erf : tensor<4x?xbf16>
  %15 = llm.gelu %14 erf : tensor<4x?xbf16>
  // CHECK: llm.gelu %{{.*}} tanh : tensor<4x?xbf16>
  %16 = llm.gelu %15 tanh : tensor<4x?xbf16>
  // CHECK: llm.relu
  %17 = llm.relu %16 : tensor<4x?xbf16>
  // CHECK: llm.sigmoid
  %18 = llm.sigmoid %17 : tensor<4x?xbf16>
  // CHECK: %[[C:.+]] = llm.compare ge, %{{.*}}, %{{.*}} : tensor<4x?xbf16>
  %c = llm.compare ge, %18, %a : tensor<4x?xbf16>
  // CHECK: llm.select %[[C]], %{{.*}}, %{{.*}} : tensor<4x?xi1>, tensor<4x?xbf16>
  %19 = llm.select %c, %18, %a : tensor<4x?xi1>, tensor<4x?xbf16>
  // CHECK: llm.add %{{.*}}, %{{.*}} : tensor<8xi32>
  %20 = llm.add %i, %i : tensor<8xi32>
  return %19 : tensor<4x?xbf16>
}

// CHECK-LABEL: func.func @trig
func.func @trig(%x: tensor<16x?xf32>, %h: tensor<3xbf16>) -> (tensor<16x?xf32>, tensor<16x?xf32>, tensor<3xbf16>) {
  // CHECK: llm.sin %{{.*}} : tensor<16x?xf32>
  %s = llm.sin %x : tensor<16x?xf32>
  // CHECK: llm.cos %{{.*}} : tensor<16x?xf32>
  %c = llm.cos %x : tensor<16x?xf32>
  // CHECK: llm.sin %{{.*}} : tensor<3xbf16>
  %t = llm.sin %h : tensor<3xbf16>
  return %s, %c, %t : tensor<16x?xf32>, tensor<16x?xf32>, tensor<3xbf16>
}

// CHECK-LABEL: func.func @element_types
func.func @element_types(%a: tensor<2xf32>, %b: tensor<2xf16>, %c: tensor<2xf8E4M3FN>, %d: tensor<2xf8E5M2>, %e: tensor<2xi8>, %f: tensor<2xi64>, %g: tensor<2xi1>) {
  // CHECK: llm.cast %{{.*}} : tensor<2xf32> to tensor<2xf8E4M3FN>
  %0 = llm.cast %a : tensor<2xf32> to tensor<2xf8E4M3FN>
  // CHECK: llm.cast %{{.*}} : tensor<2xf8E5M2> to tensor<2xf16>
  %1 = llm.cast %d : tensor<2xf8E5M2> to tensor<2xf16>
  // CHECK: llm.cast %{{.*}} : tensor<2xi8> to tensor<2xi64>
  %2 = llm.cast %e : tensor<2xi8> to tensor<2xi64>
  // CHECK: llm.cast %{{.*}} : tensor<2xi1> to tensor<2xf32>
  %3 = llm.cast %g : tensor<2xi1> to tensor<2xf32>
  return
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<?x4096xbf16>, %w: tensor<4096xbf16>, %t: tensor<50257x768xf32>, %ids: tensor<1x?xi64>, %ids32: tensor<5xi32>) {
  // CHECK: llm.constant dense<1.000000e+00> : tensor<4096xbf16>
  %one = llm.constant dense<1.0> : tensor<4096xbf16>
  // CHECK: llm.broadcast %{{.*}} : tensor<4096xbf16> to tensor<?x4096xbf16>
  %b = llm.broadcast %w : tensor<4096xbf16> to tensor<?x4096xbf16>
  // CHECK: llm.reshape %{{.*}} : tensor<?x4096xbf16> to tensor<?x32x128xbf16>
  %r = llm.reshape %x : tensor<?x4096xbf16> to tensor<?x32x128xbf16>
  // CHECK: %[[T:.+]] = llm.transpose %{{.*}} [1, 0, 2] : tensor<?x32x128xbf16>
  %tr = llm.transpose %r [1, 0, 2] : tensor<?x32x128xbf16>
  // CHECK: llm.reshape %[[T]] : tensor<32x?x128xbf16> to tensor<32x?xbf16>
  %r2 = llm.reshape %tr : tensor<32x?x128xbf16> to tensor<32x?xbf16>
  // CHECK: llm.slice %{{.*}} [0, 0] to [-1, 2048] step [1, 2] : tensor<?x4096xbf16>
  %s = llm.slice %x [0, 0] to [-1, 2048] step [1, 2] : tensor<?x4096xbf16>
  // CHECK: llm.concat %{{.*}}, %{{.*}} dim = 1 : tensor<?x4096xbf16>, tensor<?x1024xbf16>
  %cat = llm.concat %x, %s dim = 1 : tensor<?x4096xbf16>, tensor<?x1024xbf16>
  // CHECK: llm.gather %{{.*}}, %{{.*}} axis = 0 : tensor<50257x768xf32>, tensor<1x?xi64>
  %e = llm.gather %t, %ids axis = 0 : tensor<50257x768xf32>, tensor<1x?xi64>
  // CHECK: llm.gather %{{.*}}, %{{.*}} axis = 1 : tensor<50257x768xf32>, tensor<5xi32>
  %e2 = llm.gather %t, %ids32 axis = 1 : tensor<50257x768xf32>, tensor<5xi32>
  return
}

// CHECK-LABEL: func.func @reductions_and_norms
func.func @reductions_and_norms(%x: tensor<3x7x4096xf16>, %w: tensor<4096xf16>, %b: tensor<4096xf16>, %m: tensor<1x4096xf32>) {
  // CHECK: llm.reduce_sum %{{.*}} [2] keepdim : tensor<3x7x4096xf16>
  %0 = llm.reduce_sum %x [2] keepdim : tensor<3x7x4096xf16>
  // CHECK: llm.reduce_mean %{{.*}} [0, 2] : tensor<3x7x4096xf16>
  %1 = llm.reduce_mean %x [0, 2] : tensor<3x7x4096xf16>
  // CHECK: llm.reduce_max
  %2 = llm.reduce_max %x [1] : tensor<3x7x4096xf16>
  // CHECK: llm.reduce_min
  %3 = llm.reduce_min %x [0, 1, 2] : tensor<3x7x4096xf16>
  // CHECK: llm.softmax %{{.*}} : tensor<3x7x4096xf16>
  %4 = llm.softmax %x : tensor<3x7x4096xf16>
  // CHECK: llm.softmax %{{.*}} mask %{{.*}} {scale = 1.250000e-01 : f64} : tensor<3x7x4096xf16>, tensor<1x4096xf32>
  %5 = llm.softmax %x mask %m {scale = 0.125 : f64} : tensor<3x7x4096xf16>, tensor<1x4096xf32>
  // CHECK: llm.rms_norm %{{.*}}, %{{.*}} {eps = 9.9999999999999995E-7 : f64} : tensor<3x7x4096xf16>, tensor<4096xf16>
  %6 = llm.rms_norm %x, %w {eps = 1.0e-6 : f64} : tensor<3x7x4096xf16>, tensor<4096xf16>
  // CHECK: llm.layer_norm %{{.*}}, %{{.*}}, %{{.*}} : tensor<3x7x4096xf16>, tensor<4096xf16>, tensor<4096xf16>
  %7 = llm.layer_norm %x, %w, %b : tensor<3x7x4096xf16>, tensor<4096xf16>, tensor<4096xf16>
  // CHECK: llm.layer_norm %{{.*}}, %{{.*}} : tensor<3x7x4096xf16>, tensor<4096xf16>
  %8 = llm.layer_norm %x, %w : tensor<3x7x4096xf16>, tensor<4096xf16>
  return
}

// CHECK-LABEL: func.func @transformer
func.func @transformer(%x: tensor<?x4096xbf16>, %wq: tensor<4096x4096xbf16>, %bias: tensor<4096xbf16>,
                       %q: tensor<4x?x32x128xbf16>, %k: tensor<4x?x8x128xbf16>, %mask: tensor<1x1x?x?xf32>,
                       %cache: tensor<4x2048x8x128xbf16>, %hc: tensor<4x8x2048x128xbf16>, %pos: tensor<i64>, %posb: tensor<4xi32>,
                       %a3: tensor<8x?x64xf16>, %b2: tensor<64x32xf16>,
                       %cos1: tensor<1x?x128xf32>, %sin1: tensor<1x?x128xf32>,
                       %cos4: tensor<4x?x128xbf16>, %sin4: tensor<4x?x128xbf16>,
                       %cos2: tensor<?x128xf32>, %sin2: tensor<?x128xf32>) {
  // CHECK: llm.matmul %{{.*}}, %{{.*}} {transpose_rhs} : tensor<?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x4096xbf16>
  %0 = llm.matmul %x, %wq {transpose_rhs} : tensor<?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x4096xbf16>
  // CHECK: llm.matmul %{{.*}}, %{{.*}} bias %{{.*}} {transpose_rhs} : tensor<?x4096xbf16>, tensor<4096x4096xbf16>, tensor<4096xbf16> -> tensor<?x4096xf32>
  %1 = llm.matmul %x, %wq bias %bias {transpose_rhs} : tensor<?x4096xbf16>, tensor<4096x4096xbf16>, tensor<4096xbf16> -> tensor<?x4096xf32>
  // CHECK: llm.matmul %{{.*}}, %{{.*}} : tensor<8x?x64xf16>, tensor<64x32xf16> -> tensor<8x?x32xf16>
  %2 = llm.matmul %a3, %b2 : tensor<8x?x64xf16>, tensor<64x32xf16> -> tensor<8x?x32xf16>
  // CHECK: llm.matmul %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) {transpose_rhs} : tensor<64x32xf8E4M3FN>, tensor<16x32xf8E5M2> -> tensor<64x16xbf16>
  %sx = llm.constant dense<0.5> : tensor<f32>
  %sw = llm.constant dense<0.25> : tensor<f32>
  %x8 = llm.constant dense<1.0> : tensor<64x32xf8E4M3FN>
  %w8 = llm.constant dense<1.0> : tensor<16x32xf8E5M2>
  %s8 = llm.matmul %x8, %w8 scales(%sx, %sw) {transpose_rhs} : tensor<64x32xf8E4M3FN>, tensor<16x32xf8E5M2> -> tensor<64x16xbf16>
  // CHECK: llm.matmul %{{.*}}, %{{.*}} bias %{{.*}} scales(%{{.*}}, %{{.*}}) {transpose_rhs} : tensor<64x32xf8E4M3FN>, tensor<16x32xf8E5M2>, tensor<16xbf16> -> tensor<64x16xf32>
  %bias16 = llm.constant dense<1.0> : tensor<16xbf16>
  %s8b = llm.matmul %x8, %w8 bias %bias16 scales(%sx, %sw) {transpose_rhs} : tensor<64x32xf8E4M3FN>, tensor<16x32xf8E5M2>, tensor<16xbf16> -> tensor<64x16xf32>
  // CHECK: llm.rope %{{.*}} half_split : tensor<4x?x32x128xbf16>
  %3 = llm.rope %q half_split : tensor<4x?x32x128xbf16>
  // CHECK: llm.rope %{{.*}} offset %{{.*}} interleaved {theta = 1.000000e+06 : f64} : tensor<4x?x32x128xbf16>, tensor<4xi32>
  %4 = llm.rope %q offset %posb interleaved {theta = 1.0e6 : f64} : tensor<4x?x32x128xbf16>, tensor<4xi32>
  // CHECK: llm.rope %{{.*}} cos(%{{.*}} : tensor<1x?x128xf32>) sin(%{{.*}} : tensor<1x?x128xf32>) half_split : tensor<4x?x32x128xbf16>
  %r1 = llm.rope %q cos(%cos1 : tensor<1x?x128xf32>) sin(%sin1 : tensor<1x?x128xf32>) half_split : tensor<4x?x32x128xbf16>
  // CHECK: llm.rope %{{.*}} cos(%{{.*}} : tensor<4x?x128xbf16>) sin(%{{.*}} : tensor<4x?x128xbf16>) interleaved : tensor<4x?x32x128xbf16>
  %r2 = llm.rope %q cos(%cos4 : tensor<4x?x128xbf16>) sin(%sin4 : tensor<4x?x128xbf16>) interleaved : tensor<4x?x32x128xbf16>
  // CHECK: llm.rope %{{.*}} cos(%{{.*}} : tensor<?x128xf32>) sin(%{{.*}} : tensor<?x128xf32>) half_split : tensor<4x?x32x128xbf16>
  %r3 = llm.rope %q cos(%cos2 : tensor<?x128xf32>) sin(%sin2 : tensor<?x128xf32>) half_split : tensor<4x?x32x128xbf16>
  // CHECK: llm.attention %{{.*}}, %{{.*}}, %{{.*}} {causal} : tensor<4x?x32x128xbf16>, tensor<4x?x8x128xbf16>, tensor<4x?x8x128xbf16>
  %5 = llm.attention %q, %k, %k {causal} : tensor<4x?x32x128xbf16>, tensor<4x?x8x128xbf16>, tensor<4x?x8x128xbf16>
  // CHECK: llm.attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<1x1x?x?xf32>) {scale = 1.250000e-01 : f64} : tensor<4x?x32x128xbf16>, tensor<4x?x8x128xbf16>, tensor<4x?x8x128xbf16>
  %6 = llm.attention %q, %k, %k mask(%mask : tensor<1x1x?x?xf32>) {scale = 0.125 : f64} : tensor<4x?x32x128xbf16>, tensor<4x?x8x128xbf16>, tensor<4x?x8x128xbf16>
  // CHECK: %[[KC:.+]] = llm.kv_cache_append %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x2048x8x128xbf16>, tensor<4x?x8x128xbf16>, tensor<i64>
  %kc = llm.kv_cache_append %cache, %k, %pos : tensor<4x2048x8x128xbf16>, tensor<4x?x8x128xbf16>, tensor<i64>
  // CHECK: llm.attention %{{.*}}, %[[KC]], %[[KC]] kv_len(%{{.*}} : tensor<i64>) {causal} : tensor<4x?x32x128xbf16>, tensor<4x2048x8x128xbf16>, tensor<4x2048x8x128xbf16>
  %7 = llm.attention %q, %kc, %kc kv_len(%pos : tensor<i64>) {causal} : tensor<4x?x32x128xbf16>, tensor<4x2048x8x128xbf16>, tensor<4x2048x8x128xbf16>
  // CHECK: llm.attention %{{.*}}, %{{.*}}, %{{.*}} kv_len(%{{.*}} : tensor<i64>) {kv_hnd} : tensor<4x?x32x128xbf16>, tensor<4x8x2048x128xbf16>, tensor<4x8x2048x128xbf16>
  %8 = llm.attention %q, %hc, %hc kv_len(%pos : tensor<i64>) {kv_hnd} : tensor<4x?x32x128xbf16>, tensor<4x8x2048x128xbf16>, tensor<4x8x2048x128xbf16>
  return
}

// CHECK-LABEL: func.func @attention_training
func.func @attention_training(%q: tensor<2x?x8x64xbf16>, %k: tensor<2x?x2x64xbf16>, %o: tensor<2x?x8x64xbf16>, %do: tensor<2x?x8x64xbf16>, %mask: tensor<1x1x?x?xf32>) {
  // CHECK: %[[LSE:.+]] = llm.attention_logsumexp %{{.*}}, %{{.*}} {causal} : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16> -> tensor<2x8x?xf32>
  %lse = llm.attention_logsumexp %q, %k {causal} : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16> -> tensor<2x8x?xf32>
  // CHECK: llm.attention_logsumexp %{{.*}}, %{{.*}} mask(%{{.*}} : tensor<1x1x?x?xf32>) {scale = 1.250000e-01 : f64} : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16> -> tensor<2x8x?xf32>
  %lse2 = llm.attention_logsumexp %q, %k mask(%mask : tensor<1x1x?x?xf32>) {scale = 0.125 : f64} : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16> -> tensor<2x8x?xf32>
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = llm.attention_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[LSE]] {causal} : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>
  %dq, %dk, %dv = llm.attention_backward %q, %k, %k, %o, %do, %lse {causal} : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>
  // CHECK: llm.attention_backward {{.*}} mask(%{{.*}} : tensor<1x1x?x?xf32>) :
  %g:3 = llm.attention_backward %q, %k, %k, %o, %do, %lse2 mask(%mask : tensor<1x1x?x?xf32>) : tensor<2x?x8x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x2x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x?x8x64xbf16>, tensor<2x8x?xf32>
  return
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<?x4096xbf16>, %y: tensor<4096x4096xf32>) {
  // CHECK: llm.all_reduce %{{.*}} sum group_size = 2 : tensor<?x4096xbf16>
  %0 = llm.all_reduce %x sum group_size = 2 : tensor<?x4096xbf16>
  // CHECK: llm.all_reduce %{{.*}} max group_size = 8 : tensor<?x4096xbf16>
  %1 = llm.all_reduce %x max group_size = 8 : tensor<?x4096xbf16>
  // CHECK: llm.all_gather %{{.*}} dim = 1 group_size = 4 : tensor<?x4096xbf16>
  %2 = llm.all_gather %x dim = 1 group_size = 4 : tensor<?x4096xbf16>
  // CHECK: llm.reduce_scatter %{{.*}} sum dim = 0 group_size = 4 : tensor<4096x4096xf32>
  %3 = llm.reduce_scatter %y sum dim = 0 group_size = 4 : tensor<4096x4096xf32>
  return
}

// CHECK-LABEL: func.func @pad
func.func @pad(%x: tensor<7x48xbf16>, %d: tensor<?x48xf32>) -> (tensor<16x64xbf16>, tensor<?x64xf32>) {
  // CHECK: llm.pad %{{.*}} high [9, 16] : tensor<7x48xbf16> to tensor<16x64xbf16>
  %p = llm.pad %x high [9, 16] : tensor<7x48xbf16> to tensor<16x64xbf16>
  // CHECK: llm.pad %{{.*}} high [0, 16] : tensor<?x48xf32> to tensor<?x64xf32>
  %q = llm.pad %d high [0, 16] : tensor<?x48xf32> to tensor<?x64xf32>
  return %p, %q : tensor<16x64xbf16>, tensor<?x64xf32>
}

// CHECK-LABEL: func.func @weight_only_quantization
func.func @weight_only_quantization(%w: tensor<?x256xbf16>) -> tensor<?x256xf16> {
  // CHECK: %[[Q:.+]], %[[S:.+]] = llm.quantize_weight %{{.+}} {bits = 4 : i64, group_size = 128 : i64} : tensor<?x256xbf16> -> tensor<?x128xi8>, tensor<?x2xf32>
  %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 128 : i64} : tensor<?x256xbf16> -> tensor<?x128xi8>, tensor<?x2xf32>
  // CHECK: llm.dequantize_weight %[[Q]], %[[S]] {bits = 4 : i64, group_size = 128 : i64} : tensor<?x128xi8>, tensor<?x2xf32> -> tensor<?x256xf16>
  %d = llm.dequantize_weight %q, %s {bits = 4 : i64, group_size = 128 : i64} : tensor<?x128xi8>, tensor<?x2xf32> -> tensor<?x256xf16>
  return %d : tensor<?x256xf16>
}

// A step larger than the dimension takes one element (the inferred size
// computed limit - start + step - 1, which overflowed int64 for this step).
// CHECK-LABEL: func.func @slice_with_the_largest_step
func.func @slice_with_the_largest_step(%x: tensor<4x6xf32>) -> tensor<1x2xf32> {
  // CHECK: llm.slice %{{.*}} [1, 0] to [-1, 6] step [9223372036854775807, 5] : tensor<4x6xf32>
  %s = llm.slice %x [1, 0] to [-1, 6] step [9223372036854775807, 5] : tensor<4x6xf32>
  return %s : tensor<1x2xf32>
}

// CHECK-LABEL: func.func @index_put
func.func @index_put(%cache: tensor<1x8x2048x64xbf16>, %pos: tensor<?xi64>, %k: tensor<1x8x?x64xbf16>,
                     %w: tensor<32000x64xf32>, %tok: tensor<16xi32>, %g: tensor<16x64xf32>) {
  // CHECK: llm.index_put %{{.*}}[%{{.*}}], %{{.*}} dim = 2 : tensor<1x8x2048x64xbf16>, tensor<?xi64>, tensor<1x8x?x64xbf16>
  %0 = llm.index_put %cache[%pos], %k dim = 2 : tensor<1x8x2048x64xbf16>, tensor<?xi64>, tensor<1x8x?x64xbf16>
  // CHECK: llm.index_put %{{.*}}[%{{.*}}], %{{.*}} dim = 0 {accumulate} : tensor<32000x64xf32>, tensor<16xi32>, tensor<16x64xf32>
  %1 = llm.index_put %w[%tok], %g dim = 0 {accumulate} : tensor<32000x64xf32>, tensor<16xi32>, tensor<16x64xf32>
  return
}

// CHECK-LABEL: func.func @argmax
func.func @argmax(%x: tensor<4x32000xf32>, %y: tensor<2x?x8xbf16>) {
  // CHECK: llm.argmax %{{.*}} dim = 1 : tensor<4x32000xf32>
  %0 = llm.argmax %x dim = 1 : tensor<4x32000xf32>
  // CHECK: llm.argmax %{{.*}} dim = 1 keepdim : tensor<2x?x8xbf16>
  %1 = llm.argmax %y dim = 1 keepdim : tensor<2x?x8xbf16>
  return
}

// CHECK-LABEL: func.func @cumsum
func.func @cumsum(%m: tensor<2x?xi1>, %x: tensor<3x5xbf16>) {
  // CHECK: llm.cumsum %{{.*}} dim = 1 : tensor<2x?xi1> -> tensor<2x?xi64>
  %0 = llm.cumsum %m dim = 1 : tensor<2x?xi1> -> tensor<2x?xi64>
  // CHECK: llm.cumsum %{{.*}} dim = 0 : tensor<3x5xbf16> -> tensor<3x5xbf16>
  %1 = llm.cumsum %x dim = 0 : tensor<3x5xbf16> -> tensor<3x5xbf16>
  return
}

// CHECK-LABEL: func.func @dropout_mask
func.func @dropout_mask(%seed: tensor<i64>) -> tensor<2x9x64xi1> {
  // CHECK: llm.dropout_mask %{{.*}} {p = 1.000000e-01 : f64, stream = 3 : i64} : tensor<i64> -> tensor<2x9x64xi1>
  %0 = llm.dropout_mask %seed {p = 0.1 : f64, stream = 3 : i64} : tensor<i64> -> tensor<2x9x64xi1>
  return %0 : tensor<2x9x64xi1>
}

// CHECK-LABEL: func.func @paged_attention
func.func @paged_attention(%q: tensor<?x32x128xbf16>, %kp: tensor<512x16x8x128xbf16>, %bt: tensor<4x128xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) -> (tensor<?x32x128xbf16>, tensor<?x32x128xbf16>) {
  // CHECK: llm.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal} : tensor<?x32x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens {causal} : tensor<?x32x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
  // CHECK: llm.paged_attention {{.*}} {scale = 1.250000e-01 : f64} :
  %1 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens {scale = 0.125 : f64} : tensor<?x32x128xbf16>, tensor<512x16x8x128xbf16>, tensor<512x16x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
  return %0, %1 : tensor<?x32x128xbf16>, tensor<?x32x128xbf16>
}

// CHECK-LABEL: func.func @paged_kv_append
func.func @paged_kv_append(%kp: tensor<512x16x8x128xbf16>, %k: tensor<?x8x128xbf16>, %bt: tensor<4x128xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) -> tensor<512x16x8x128xbf16> {
  // CHECK: llm.paged_kv_append %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<512x16x8x128xbf16>, tensor<?x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<512x16x8x128xbf16>, tensor<?x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>
  return %0 : tensor<512x16x8x128xbf16>
}

// An fp8 KV cache: e4m3 pages with one f32 scale per KV head.
// CHECK-LABEL: func.func @fp8_paged_kv
func.func @fp8_paged_kv(%q: tensor<?x32x128xbf16>, %kp: tensor<512x16x8x128xf8E4M3FN>, %k: tensor<?x8x128xbf16>, %bt: tensor<4x128xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %ks: tensor<8xf32>, %vs: tensor<8xf32>) -> (tensor<512x16x8x128xf8E4M3FN>, tensor<?x32x128xbf16>) {
  // CHECK: llm.paged_kv_append %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale %{{.*}} : tensor<512x16x8x128xf8E4M3FN>, tensor<?x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens scale %ks : tensor<512x16x8x128xf8E4M3FN>, tensor<?x8x128xbf16>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>
  // CHECK: llm.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}) {causal} : tensor<?x32x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>, tensor<8xf32>
  %1 = llm.paged_attention %q, %0, %0, %bt, %cu, %lens scales(%ks, %vs) {causal} : tensor<?x32x128xbf16>, tensor<512x16x8x128xf8E4M3FN>, tensor<512x16x8x128xf8E4M3FN>, tensor<4x128xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>, tensor<8xf32>
  return %0, %1 : tensor<512x16x8x128xf8E4M3FN>, tensor<?x32x128xbf16>
}

// CHECK-LABEL: func.func @varlen_attention
func.func @varlen_attention(%q: tensor<?x32x128xbf16>, %k: tensor<?x8x128xbf16>, %cuq: tensor<9xi32>, %cuk: tensor<9xi32>) -> tensor<?x32x128xbf16> {
  // CHECK: llm.varlen_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal} : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<9xi32>, tensor<9xi32>
  %0 = llm.varlen_attention %q, %k, %k, %cuq, %cuk {causal} : tensor<?x32x128xbf16>, tensor<?x8x128xbf16>, tensor<?x8x128xbf16>, tensor<9xi32>, tensor<9xi32>
  return %0 : tensor<?x32x128xbf16>
}
