// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
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
