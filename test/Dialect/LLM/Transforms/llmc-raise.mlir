// RUN: llmc-opt --split-input-file --llmc-raise %s | FileCheck %s

// The IR the torch.compile plugin imports for Hugging Face's LlamaRMSNorm in
// bf16 (x cast to f32, pow/mean/add/rsqrt/mul in f32, cast back, times w).
// CHECK-LABEL: func.func @hf_llama_bf16
// CHECK-SAME: (%[[X:.+]]: tensor<1x16x128xbf16>, %[[W:.+]]: tensor<128xbf16>)
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[X]], %[[W]] {eps = 9.9999999747524271E-7 : f64} : tensor<1x16x128xbf16>, tensor<128xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @hf_llama_bf16(%x: tensor<1x16x128xbf16>, %w: tensor<128xbf16>) -> tensor<1x16x128xbf16> {
  %2 = llm.broadcast %w : tensor<128xbf16> to tensor<1x16x128xbf16>
  %3 = llm.cast %x : tensor<1x16x128xbf16> to tensor<1x16x128xf32>
  %4 = llm.constant dense<2.0> : tensor<f32>
  %5 = llm.broadcast %4 : tensor<f32> to tensor<1x16x128xf32>
  %6 = llm.pow %3, %5 : tensor<1x16x128xf32>
  %7 = llm.reduce_mean %6 [2] keepdim : tensor<1x16x128xf32>
  %8 = llm.constant dense<1.0e-06> : tensor<f32>
  %9 = llm.broadcast %8 : tensor<f32> to tensor<1x16x1xf32>
  %10 = llm.add %7, %9 : tensor<1x16x1xf32>
  %11 = llm.rsqrt %10 : tensor<1x16x1xf32>
  %12 = llm.broadcast %11 : tensor<1x16x1xf32> to tensor<1x16x128xf32>
  %13 = llm.mul %3, %12 : tensor<1x16x128xf32>
  %14 = llm.cast %13 : tensor<1x16x128xf32> to tensor<1x16x128xbf16>
  %15 = llm.mul %2, %14 : tensor<1x16x128xbf16>
  return %15 : tensor<1x16x128xbf16>
}

// -----

// The same norm in f16.
// CHECK-LABEL: func.func @hf_llama_f16
// CHECK-NEXT: llm.rms_norm %{{.+}}, %{{.+}} {eps = 9.9999997473787516E-6 : f64} : tensor<2x3x64xf16>, tensor<64xf16>
// CHECK-NEXT: return
func.func @hf_llama_f16(%x: tensor<2x3x64xf16>, %w: tensor<64xf16>) -> tensor<2x3x64xf16> {
  %2 = llm.broadcast %w : tensor<64xf16> to tensor<2x3x64xf16>
  %3 = llm.cast %x : tensor<2x3x64xf16> to tensor<2x3x64xf32>
  %4 = llm.constant dense<2.0> : tensor<f32>
  %5 = llm.broadcast %4 : tensor<f32> to tensor<2x3x64xf32>
  %6 = llm.pow %3, %5 : tensor<2x3x64xf32>
  %7 = llm.reduce_mean %6 [2] keepdim : tensor<2x3x64xf32>
  %8 = llm.constant dense<1.0e-05> : tensor<f32>
  %9 = llm.broadcast %8 : tensor<f32> to tensor<2x3x1xf32>
  %10 = llm.add %7, %9 : tensor<2x3x1xf32>
  %11 = llm.rsqrt %10 : tensor<2x3x1xf32>
  %12 = llm.broadcast %11 : tensor<2x3x1xf32> to tensor<2x3x64xf32>
  %13 = llm.mul %3, %12 : tensor<2x3x64xf32>
  %14 = llm.cast %13 : tensor<2x3x64xf32> to tensor<2x3x64xf16>
  %15 = llm.mul %2, %14 : tensor<2x3x64xf16>
  return %15 : tensor<2x3x64xf16>
}

// -----

// f32 model: no casts.
// CHECK-LABEL: func.func @hf_llama_f32
// CHECK-SAME: (%[[X:.+]]: tensor<1x16x128xf32>, %[[W:.+]]: tensor<128xf32>)
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[X]], %[[W]] {eps = 9.9999999747524271E-7 : f64} : tensor<1x16x128xf32>, tensor<128xf32>
// CHECK-NEXT: return %[[Y]]
func.func @hf_llama_f32(%x: tensor<1x16x128xf32>, %w: tensor<128xf32>) -> tensor<1x16x128xf32> {
  %2 = llm.broadcast %w : tensor<128xf32> to tensor<1x16x128xf32>
  %4 = llm.constant dense<2.0> : tensor<f32>
  %5 = llm.broadcast %4 : tensor<f32> to tensor<1x16x128xf32>
  %6 = llm.pow %x, %5 : tensor<1x16x128xf32>
  %7 = llm.reduce_mean %6 [2] keepdim : tensor<1x16x128xf32>
  %8 = llm.constant dense<1.0e-06> : tensor<f32>
  %9 = llm.broadcast %8 : tensor<f32> to tensor<1x16x1xf32>
  %10 = llm.add %7, %9 : tensor<1x16x1xf32>
  %11 = llm.rsqrt %10 : tensor<1x16x1xf32>
  %12 = llm.broadcast %11 : tensor<1x16x1xf32> to tensor<1x16x128xf32>
  %13 = llm.mul %x, %12 : tensor<1x16x128xf32>
  %15 = llm.mul %2, %13 : tensor<1x16x128xf32>
  return %15 : tensor<1x16x128xf32>
}

// -----

// Square as mul(x, x); every commutative operand order swapped (eps + mean,
// rsqrt * x, normed * weight); rank-2 input; a full-shape eps splat.
// CHECK-LABEL: func.func @mul_square_swapped
// CHECK-SAME: (%[[X:.+]]: tensor<7x32xbf16>, %[[W:.+]]: tensor<32xbf16>)
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[X]], %[[W]] {eps = 9.9999997473787516E-6 : f64} : tensor<7x32xbf16>, tensor<32xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @mul_square_swapped(%x: tensor<7x32xbf16>, %w: tensor<32xbf16>) -> tensor<7x32xbf16> {
  %xf = llm.cast %x : tensor<7x32xbf16> to tensor<7x32xf32>
  %sq = llm.mul %xf, %xf : tensor<7x32xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<7x32xf32>
  %eps = llm.constant dense<1.0e-05> : tensor<7x1xf32>
  %v = llm.add %eps, %mean : tensor<7x1xf32>
  %r = llm.rsqrt %v : tensor<7x1xf32>
  %rb = llm.broadcast %r : tensor<7x1xf32> to tensor<7x32xf32>
  %m = llm.mul %rb, %xf : tensor<7x32xf32>
  %n = llm.cast %m : tensor<7x32xf32> to tensor<7x32xbf16>
  %wb = llm.broadcast %w : tensor<32xbf16> to tensor<7x32xbf16>
  %y = llm.mul %n, %wb : tensor<7x32xbf16>
  return %y : tensor<7x32xbf16>
}

// -----

// 1 / sqrt(v) instead of rsqrt(v); the weight is a computed value.
// CHECK-LABEL: func.func @div_one_sqrt_computed_weight
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xf32>, %[[A:.+]]: tensor<16xf32>, %[[B:.+]]: tensor<16xf32>)
// CHECK: %[[W:.+]] = llm.add %[[A]], %[[B]] : tensor<16xf32>
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[X]], %[[W]] {eps = 9.9999999747524271E-7 : f64} : tensor<4x16xf32>, tensor<16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @div_one_sqrt_computed_weight(%x: tensor<4x16xf32>, %a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %w = llm.add %a, %b : tensor<16xf32>
  %two = llm.constant dense<2.0> : tensor<f32>
  %twob = llm.broadcast %two : tensor<f32> to tensor<4x16xf32>
  %sq = llm.pow %x, %twob : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<f32>
  %epsb = llm.broadcast %eps : tensor<f32> to tensor<4x1xf32>
  %v = llm.add %mean, %epsb : tensor<4x1xf32>
  %s = llm.sqrt %v : tensor<4x1xf32>
  %one = llm.constant dense<1.0> : tensor<4x1xf32>
  %r = llm.div %one, %s : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// x / sqrt(v).
// CHECK-LABEL: func.func @div_by_sqrt
// CHECK-NEXT: llm.rms_norm %{{.+}}, %{{.+}} {eps = 9.9999999747524271E-7 : f64} : tensor<4x16xf32>, tensor<16xf32>
// CHECK-NEXT: return
func.func @div_by_sqrt(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<f32>
  %epsb = llm.broadcast %eps : tensor<f32> to tensor<4x1xf32>
  %v = llm.add %mean, %epsb : tensor<4x1xf32>
  %s = llm.sqrt %v : tensor<4x1xf32>
  %sb = llm.broadcast %s : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.div %x, %sb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// x.float() written twice (as the plugin imports `x.float().pow(2)` and
// `x.float() * r`): two casts of one value count as the same x.
// CHECK-LABEL: func.func @x_cast_twice
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xbf16>, %[[W:.+]]: tensor<16xbf16>)
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[X]], %[[W]] {{.+}} : tensor<4x16xbf16>, tensor<16xbf16>
// CHECK-NEXT: return %[[Y]]
func.func @x_cast_twice(%x: tensor<4x16xbf16>, %w: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %xf1 = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %xf2 = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %two = llm.constant dense<2.0> : tensor<4x16xf32>
  %sq = llm.pow %xf1, %two : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf2, %rb : tensor<4x16xf32>
  %n = llm.cast %m : tensor<4x16xf32> to tensor<4x16xbf16>
  %wb = llm.broadcast %w : tensor<16xbf16> to tensor<4x16xbf16>
  %y = llm.mul %wb, %n : tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// Two norms of one input (q/k-norm style): the shared x and its cast may have
// other uses, each chain is raised.
// CHECK-LABEL: func.func @two_norms_share_x
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xbf16>, %[[W1:.+]]: tensor<16xbf16>, %[[W2:.+]]: tensor<16xbf16>)
// CHECK-DAG: %[[A:.+]] = llm.rms_norm %[[X]], %[[W1]]
// CHECK-DAG: %[[B:.+]] = llm.rms_norm %[[X]], %[[W2]]
// CHECK-NOT: llm.reduce_mean
// CHECK: return %[[A]], %[[B]]
func.func @two_norms_share_x(%x: tensor<4x16xbf16>, %w1: tensor<16xbf16>, %w2: tensor<16xbf16>) -> (tensor<4x16xbf16>, tensor<4x16xbf16>) {
  %xf = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %sq = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf, %rb : tensor<4x16xf32>
  %n = llm.cast %m : tensor<4x16xf32> to tensor<4x16xbf16>
  %wb = llm.broadcast %w1 : tensor<16xbf16> to tensor<4x16xbf16>
  %y = llm.mul %wb, %n : tensor<4x16xbf16>
  %sq2 = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean2 = llm.reduce_mean %sq2 [1] keepdim : tensor<4x16xf32>
  %v2 = llm.add %mean2, %eps : tensor<4x1xf32>
  %r2 = llm.rsqrt %v2 : tensor<4x1xf32>
  %rb2 = llm.broadcast %r2 : tensor<4x1xf32> to tensor<4x16xf32>
  %m2 = llm.mul %xf, %rb2 : tensor<4x16xf32>
  %n2 = llm.cast %m2 : tensor<4x16xf32> to tensor<4x16xbf16>
  %wb2 = llm.broadcast %w2 : tensor<16xbf16> to tensor<4x16xbf16>
  %y2 = llm.mul %wb2, %n2 : tensor<4x16xbf16>
  return %y, %y2 : tensor<4x16xbf16>, tensor<4x16xbf16>
}

// -----

// Not raised: the mean is over a dimension other than the last.
// CHECK-LABEL: func.func @mean_not_last_dim
// CHECK-NOT: llm.rms_norm
// CHECK: llm.reduce_mean %{{.+}} [0] keepdim
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @mean_not_last_dim(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [0] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<1x16xf32>
  %v = llm.add %mean, %eps : tensor<1x16xf32>
  %r = llm.rsqrt %v : tensor<1x16xf32>
  %rb = llm.broadcast %r : tensor<1x16xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: the mean is over the last dimension and another one.
// CHECK-LABEL: func.func @mean_over_two_dims
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @mean_over_two_dims(%x: tensor<2x4x16xf32>, %w: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %sq = llm.mul %x, %x : tensor<2x4x16xf32>
  %mean = llm.reduce_mean %sq [1, 2] keepdim : tensor<2x4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<2x1x1xf32>
  %v = llm.add %mean, %eps : tensor<2x1x1xf32>
  %r = llm.rsqrt %v : tensor<2x1x1xf32>
  %rb = llm.broadcast %r : tensor<2x1x1xf32> to tensor<2x4x16xf32>
  %m = llm.mul %x, %rb : tensor<2x4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<2x4x16xf32>
  %y = llm.mul %wb, %m : tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// Not raised: the mean drops the reduced dimension (no keepdim).
// CHECK-LABEL: func.func @mean_without_keepdim
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @mean_without_keepdim(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4xf32>
  %v = llm.add %mean, %eps : tensor<4xf32>
  %r = llm.rsqrt %v : tensor<4xf32>
  %r2 = llm.reshape %r : tensor<4xf32> to tensor<4x1xf32>
  %rb = llm.broadcast %r2 : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: a sum, not a mean.
// CHECK-LABEL: func.func @sum_not_mean
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @sum_not_mean(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_sum %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: the square is of another value than the one normalized.
// CHECK-LABEL: func.func @square_of_other_value
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @square_of_other_value(%x: tensor<4x16xf32>, %z: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %z, %z : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: mul(x, z) is not a square.
// CHECK-LABEL: func.func @product_not_square
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @product_not_square(%x: tensor<4x16xf32>, %z: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %z : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: pow(x, 3) is not a square.
// CHECK-LABEL: func.func @cube_not_square
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @cube_not_square(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %three = llm.constant dense<3.0> : tensor<4x16xf32>
  %sq = llm.pow %x, %three : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: eps is not a constant.
// CHECK-LABEL: func.func @eps_not_constant
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @eps_not_constant(%x: tensor<4x16xf32>, %w: tensor<16xf32>, %e: tensor<f32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.broadcast %e : tensor<f32> to tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: eps is negative (rms_norm requires eps >= 0).
// CHECK-LABEL: func.func @eps_negative
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @eps_negative(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<-1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// An f32 weight times the bf16 input's f32 normalized value (no cast back):
// an f32 norm of the f32 value cast(x), exactly what the chain computes.
// CHECK-LABEL: func.func @f32_norm_of_cast_input
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xbf16>, %[[W:.+]]: tensor<16xf32>)
// CHECK-NEXT: %[[XF:.+]] = llm.cast %[[X]] : tensor<4x16xbf16> to tensor<4x16xf32>
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[XF]], %[[W]] {{.+}} : tensor<4x16xf32>, tensor<16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @f32_norm_of_cast_input(%x: tensor<4x16xbf16>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %xf = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %sq = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: HF with an f32 weight and a bf16 input, as imported:
// weight * normed.to(bf16) promotes to f32, so the normalized value is
// rounded to bf16 and cast back before the (f32) weight multiply.
// CHECK-LABEL: func.func @weight_of_other_dtype
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @weight_of_other_dtype(%x: tensor<4x16xbf16>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %xf = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %sq = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf, %rb : tensor<4x16xf32>
  %n = llm.cast %m : tensor<4x16xf32> to tensor<4x16xbf16>
  %nf = llm.cast %n : tensor<4x16xbf16> to tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %nf : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: the bf16 normalized value times an f16 weight (cast first):
// the weight's element type differs from the input's.
// CHECK-LABEL: func.func @weight_f16_input_bf16
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @weight_f16_input_bf16(%x: tensor<4x16xbf16>, %w: tensor<16xf16>) -> tensor<4x16xf16> {
  %xf = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %sq = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf, %rb : tensor<4x16xf32>
  %n = llm.cast %m : tensor<4x16xf32> to tensor<4x16xf16>
  %wb = llm.broadcast %w : tensor<16xf16> to tensor<4x16xf16>
  %y = llm.mul %wb, %n : tensor<4x16xf16>
  return %y : tensor<4x16xf16>
}

// -----

// Not raised: the whole chain in bf16 (no f32 math; every op rounds to bf16).
// CHECK-LABEL: func.func @all_bf16_math
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @all_bf16_math(%x: tensor<4x16xbf16>, %w: tensor<16xbf16>) -> tensor<4x16xbf16> {
  %sq = llm.mul %x, %x : tensor<4x16xbf16>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xbf16>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xbf16>
  %v = llm.add %mean, %eps : tensor<4x1xbf16>
  %r = llm.rsqrt %v : tensor<4x1xbf16>
  %rb = llm.broadcast %r : tensor<4x1xbf16> to tensor<4x16xbf16>
  %m = llm.mul %x, %rb : tensor<4x16xbf16>
  %wb = llm.broadcast %w : tensor<16xbf16> to tensor<4x16xbf16>
  %y = llm.mul %wb, %m : tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// -----

// Not raised: the rsqrt is used again (the decomposed chain would stay alive).
// CHECK-LABEL: func.func @multi_use_intermediate
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @multi_use_intermediate(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x1xf32>) {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %wb = llm.broadcast %w : tensor<16xf32> to tensor<4x16xf32>
  %y = llm.mul %wb, %m : tensor<4x16xf32>
  return %y, %r : tensor<4x16xf32>, tensor<4x1xf32>
}

// -----

// Not raised: the normalized value (before the weight) is used again.
// CHECK-LABEL: func.func @multi_use_normalized
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @multi_use_normalized(%x: tensor<4x16xbf16>, %w: tensor<16xbf16>) -> (tensor<4x16xbf16>, tensor<4x16xbf16>) {
  %xf = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %sq = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf, %rb : tensor<4x16xf32>
  %n = llm.cast %m : tensor<4x16xf32> to tensor<4x16xbf16>
  %wb = llm.broadcast %w : tensor<16xbf16> to tensor<4x16xbf16>
  %y = llm.mul %wb, %n : tensor<4x16xbf16>
  return %y, %n : tensor<4x16xbf16>, tensor<4x16xbf16>
}

// -----

// Not raised: no weight multiply.
// CHECK-LABEL: func.func @no_weight
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @no_weight(%x: tensor<4x16xbf16>) -> tensor<4x16xbf16> {
  %xf = llm.cast %x : tensor<4x16xbf16> to tensor<4x16xf32>
  %sq = llm.mul %xf, %xf : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %xf, %rb : tensor<4x16xf32>
  %n = llm.cast %m : tensor<4x16xf32> to tensor<4x16xbf16>
  return %n : tensor<4x16xbf16>
}

// -----

// Not raised: the "weight" is a full [4, 16] tensor, not a rank-1 [H] value.
// CHECK-LABEL: func.func @weight_not_rank1
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @weight_not_rank1(%x: tensor<4x16xf32>, %w: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %sq = llm.mul %x, %x : tensor<4x16xf32>
  %mean = llm.reduce_mean %sq [1] keepdim : tensor<4x16xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<4x1xf32>
  %v = llm.add %mean, %eps : tensor<4x1xf32>
  %r = llm.rsqrt %v : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x16xf32>
  %m = llm.mul %x, %rb : tensor<4x16xf32>
  %y = llm.mul %w, %m : tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Not raised: an integer result (w and the normalized value cast to i32).
// llm.rms_norm takes floats only; raising made an invalid op.
// CHECK-LABEL: func.func @integer_result
// CHECK-NOT: llm.rms_norm
// CHECK: return
func.func @integer_result(%x: tensor<4x8xi32>, %w: tensor<8xi32>) -> tensor<4x8xi32> {
  %xf = llm.cast %x : tensor<4x8xi32> to tensor<4x8xf32>
  %sq = llm.mul %xf, %xf : tensor<4x8xf32>
  %m = llm.reduce_mean %sq [1] keepdim : tensor<4x8xf32>
  %e = llm.constant dense<1.0e-6> : tensor<4x1xf32>
  %a = llm.add %m, %e : tensor<4x1xf32>
  %r = llm.rsqrt %a : tensor<4x1xf32>
  %rb = llm.broadcast %r : tensor<4x1xf32> to tensor<4x8xf32>
  %n = llm.mul %xf, %rb : tensor<4x8xf32>
  %nc = llm.cast %n : tensor<4x8xf32> to tensor<4x8xi32>
  %wb = llm.broadcast %w : tensor<8xi32> to tensor<4x8xi32>
  %y = llm.mul %wb, %nc : tensor<4x8xi32>
  return %y : tensor<4x8xi32>
}

// -----

// SDPA over a gpt-fast KV cache [B, H, S, D]: the importer's transposes of
// key and value fold into kv_hnd, so attention reads the cache in place.
// CHECK-LABEL: func.func @attention_over_hnd_cache
// CHECK-SAME: (%[[Q:.+]]: tensor<2x1x8x64xbf16>, %[[KC:.+]]: tensor<2x2x32x64xbf16>, %[[VC:.+]]: tensor<2x2x32x64xbf16>, %[[M:.+]]: tensor<1x1x1x32xbf16>)
// CHECK-NOT: llm.transpose
// CHECK: llm.attention %[[Q]], %[[KC]], %[[VC]] mask(%[[M]] : tensor<1x1x1x32xbf16>) {kv_hnd} : tensor<2x1x8x64xbf16>, tensor<2x2x32x64xbf16>, tensor<2x2x32x64xbf16>
func.func @attention_over_hnd_cache(%q: tensor<2x1x8x64xbf16>, %kc: tensor<2x2x32x64xbf16>, %vc: tensor<2x2x32x64xbf16>, %m: tensor<1x1x1x32xbf16>) -> tensor<2x1x8x64xbf16> {
  %k = llm.transpose %kc [0, 2, 1, 3] : tensor<2x2x32x64xbf16>
  %v = llm.transpose %vc [0, 2, 1, 3] : tensor<2x2x32x64xbf16>
  %o = llm.attention %q, %k, %v mask(%m : tensor<1x1x1x32xbf16>) : tensor<2x1x8x64xbf16>, tensor<2x32x2x64xbf16>, tensor<2x32x2x64xbf16>
  return %o : tensor<2x1x8x64xbf16>
}

// -----

// Only key transposed (value in NHD): nothing to fold.
// CHECK-LABEL: func.func @attention_key_only
// CHECK: llm.transpose
// CHECK: llm.attention
// CHECK-NOT: kv_hnd
func.func @attention_key_only(%q: tensor<1x4x2x16xf32>, %kc: tensor<1x2x4x16xf32>, %v: tensor<1x4x2x16xf32>) -> tensor<1x4x2x16xf32> {
  %k = llm.transpose %kc [0, 2, 1, 3] : tensor<1x2x4x16xf32>
  %o = llm.attention %q, %k, %v {causal} : tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>
  return %o : tensor<1x4x2x16xf32>
}

// -----

// gpt-fast's RMSNorm (weight multiplied in f32, then cast back): the casts
// fold into one bf16 rms_norm with the f32 weight.
// CHECK-LABEL: func.func @rms_norm_f32_weight
// CHECK-SAME: (%[[X:.+]]: tensor<1x1x64xbf16>, %[[W:.+]]: tensor<64xf32>)
// CHECK-NEXT: %[[Y:.+]] = llm.rms_norm %[[X]], %[[W]] : tensor<1x1x64xbf16>, tensor<64xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm_f32_weight(%x: tensor<1x1x64xbf16>, %w: tensor<64xf32>) -> tensor<1x1x64xbf16> {
  %xf = llm.cast %x : tensor<1x1x64xbf16> to tensor<1x1x64xf32>
  %n = llm.rms_norm %xf, %w {eps = 1.0e-05 : f64} : tensor<1x1x64xf32>, tensor<64xf32>
  %y = llm.cast %n : tensor<1x1x64xf32> to tensor<1x1x64xbf16>
  return %y : tensor<1x1x64xbf16>
}

// -----

// A cast to another type than x's, or an f32 norm used twice: unchanged.
// CHECK-LABEL: func.func @rms_norm_casts_kept
// CHECK-NOT: tensor<4x64xbf16>, tensor<64xf32>
// CHECK: return
func.func @rms_norm_casts_kept(%x: tensor<4x64xbf16>, %w: tensor<64xf32>) -> (tensor<4x64xf16>, tensor<4x64xbf16>, tensor<4x64xf32>) {
  %xf = llm.cast %x : tensor<4x64xbf16> to tensor<4x64xf32>
  %n = llm.rms_norm %xf, %w {eps = 1.0e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>
  %h = llm.cast %n : tensor<4x64xf32> to tensor<4x64xf16>
  %n2 = llm.rms_norm %xf, %w {eps = 1.0e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>
  %b = llm.cast %n2 : tensor<4x64xf32> to tensor<4x64xbf16>
  return %h, %b, %n2 : tensor<4x64xf16>, tensor<4x64xbf16>, tensor<4x64xf32>
}

// -----

// Key and value transposed twice (a projection's [B, S, H, D] through
// torch's .transpose(1, 2) and the importer's): NHD, not kv_hnd over a
// transposed view, whatever order the rewrites run in.
// CHECK-LABEL: func.func @attention_double_transpose
// CHECK-NOT: kv_hnd
// CHECK: llm.attention %{{.*}}, %arg1, %arg2 {causal}
func.func @attention_double_transpose(%q: tensor<1x4x2x16xf32>, %k: tensor<1x4x2x16xf32>, %v: tensor<1x4x2x16xf32>) -> tensor<1x4x2x16xf32> {
  %kh = llm.transpose %k [0, 2, 1, 3] : tensor<1x4x2x16xf32>
  %vh = llm.transpose %v [0, 2, 1, 3] : tensor<1x4x2x16xf32>
  %kt = llm.transpose %kh [0, 2, 1, 3] : tensor<1x2x4x16xf32>
  %vt = llm.transpose %vh [0, 2, 1, 3] : tensor<1x2x4x16xf32>
  %o = llm.attention %q, %kt, %vt {causal} : tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>
  return %o : tensor<1x4x2x16xf32>
}
