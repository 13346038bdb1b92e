// Row kernels (llmc-form-kernels' row_reduction, cuda::EmitRowFused): a
// reduction over the last dimension with the elementwise ops that compute
// its input and read its result, in one launch. Each function here is one
// kernel (the weight gradient's: and the column reduction of its blocks'
// partial sums); on a GPU, `llmc-run %s --fn=<name> --check=ref` compares it with
// the float64 reference executor (scripts/gpu-round.sh runs them).
// RUN: llmc-compile %s --fn=rms_norm_backward --print-stats | FileCheck %s --check-prefix=ONE
// RUN: llmc-compile %s --fn=rms_norm_backward_wide --print-stats | FileCheck %s --check-prefix=ONE
// RUN: llmc-compile %s --fn=rms_norm_forward_saving_rstd --print-stats | FileCheck %s --check-prefix=ONE
// RUN: llmc-compile %s --fn=softmax_written_out --print-stats | FileCheck %s --check-prefix=ONE
// RUN: llmc-compile %s --fn=layer_norm_backward --print-stats | FileCheck %s --check-prefix=ONE
// RUN: llmc-compile %s --fn=rms_norm_backward_wide --emit=exec | FileCheck %s --check-prefix=EXEC
// RUN: llmc-compile %s --fn=rms_norm_backward_weight_grad --print-stats | FileCheck %s --check-prefix=WGRAD
// RUN: llmc-compile %s --fn=rms_norm_backward_weight_grad --emit=exec | FileCheck %s --check-prefix=WEXEC
// ONE: kernel launches: 1 (1 distinct kernels)
// ONE: arena peak bytes: 0

// The launch writes the row sum s (one value per row) and dx, and reads g,
// w (per column), rstd (per row, once though used directly and broadcast),
// x and the residual gradient: 7 pointers and the row count.
// EXEC-DAG: %[[G:b[0-9]+]] = exec.buffer input[0]
// EXEC-DAG: %[[W:b[0-9]+]] = exec.buffer input[1]
// EXEC-DAG: %[[X:b[0-9]+]] = exec.buffer input[2]
// EXEC-DAG: %[[RSTD:b[0-9]+]] = exec.buffer input[3]
// EXEC-DAG: %[[RES:b[0-9]+]] = exec.buffer input[4]
// EXEC-DAG: %[[DX:b[0-9]+]] = exec.buffer output[0]
// EXEC-DAG: %[[S:b[0-9]+]] = exec.buffer output[1]
// EXEC: exec.launch @llmc_rowfused_{{[0-9a-f]+}} grid [512, 1, 1] block [{{[0-9]+}}, 1, 1] smem 0 (%[[S]][0], %[[DX]][0], %[[G]][0], %[[W]][0], %[[RSTD]][0], %[[X]][0], %[[RES]][0], 512 : i64) label "llm.add"
// EXEC-NOT: exec.launch

// Hugging Face LlamaRMSNorm's backward as AOTAutograd decomposes it (x the
// float32 input, rstd the saved rsqrt(mean(x^2) + eps), g the output's
// gradient): dx = g*w*rstd - 0.5 * rstd^3 / n * sum(g*w*x) * 2x.
func.func @rms_norm_backward(%g: tensor<3x5x64xbf16>, %w: tensor<64xbf16>, %x: tensor<3x5x64xf32>,
                             %rstd: tensor<3x5x1xf32>) -> tensor<3x5x64xbf16> {
  %half = llm.constant dense<-5.000000e-01> : tensor<f32>
  %three = llm.constant dense<3.000000e+00> : tensor<f32>
  %n = llm.constant dense<6.400000e+01> : tensor<f32>
  %two = llm.constant dense<2.000000e+00> : tensor<f32>
  %wb = llm.broadcast %w : tensor<64xbf16> to tensor<3x5x64xbf16>
  %gw = llm.mul %g, %wb : tensor<3x5x64xbf16>
  %gwf = llm.cast %gw : tensor<3x5x64xbf16> to tensor<3x5x64xf32>
  %rb = llm.broadcast %rstd : tensor<3x5x1xf32> to tensor<3x5x64xf32>
  %a = llm.mul %gwf, %rb : tensor<3x5x64xf32>
  %b = llm.mul %gwf, %x : tensor<3x5x64xf32>
  %s = llm.reduce_sum %b [2] keepdim : tensor<3x5x64xf32>
  %hb = llm.broadcast %half : tensor<f32> to tensor<3x5x1xf32>
  %c = llm.mul %s, %hb : tensor<3x5x1xf32>
  %tb = llm.broadcast %three : tensor<f32> to tensor<3x5x1xf32>
  %r3 = llm.pow %rstd, %tb : tensor<3x5x1xf32>
  %d = llm.mul %c, %r3 : tensor<3x5x1xf32>
  %db = llm.broadcast %d : tensor<3x5x1xf32> to tensor<3x5x64xf32>
  %nb = llm.broadcast %n : tensor<f32> to tensor<3x5x64xf32>
  %e = llm.div %db, %nb : tensor<3x5x64xf32>
  %twob = llm.broadcast %two : tensor<f32> to tensor<3x5x64xf32>
  %x2 = llm.mul %x, %twob : tensor<3x5x64xf32>
  %f = llm.mul %e, %x2 : tensor<3x5x64xf32>
  %dx = llm.add %a, %f : tensor<3x5x64xf32>
  %out = llm.cast %dx : tensor<3x5x64xf32> to tensor<3x5x64xbf16>
  return %out : tensor<3x5x64xbf16>
}

// The same at a training step's size (rows of 2048), also returning the
// row sum, and with the residual stream's gradient added (the next layer's
// dx): the 1B LLaMA backward's form.
func.func @rms_norm_backward_wide(%g: tensor<2x256x2048xbf16>, %w: tensor<2048xbf16>, %x: tensor<2x256x2048xf32>,
                                  %rstd: tensor<2x256x1xf32>, %res: tensor<2x256x2048xbf16>)
    -> (tensor<2x256x2048xbf16>, tensor<2x256x1xf32>) {
  %half = llm.constant dense<-5.000000e-01> : tensor<f32>
  %three = llm.constant dense<3.000000e+00> : tensor<f32>
  %n = llm.constant dense<2.048000e+03> : tensor<f32>
  %two = llm.constant dense<2.000000e+00> : tensor<f32>
  %wb = llm.broadcast %w : tensor<2048xbf16> to tensor<2x256x2048xbf16>
  %gw = llm.mul %g, %wb : tensor<2x256x2048xbf16>
  %gwf = llm.cast %gw : tensor<2x256x2048xbf16> to tensor<2x256x2048xf32>
  %rb = llm.broadcast %rstd : tensor<2x256x1xf32> to tensor<2x256x2048xf32>
  %a = llm.mul %gwf, %rb : tensor<2x256x2048xf32>
  %b = llm.mul %gwf, %x : tensor<2x256x2048xf32>
  %s = llm.reduce_sum %b [2] keepdim : tensor<2x256x2048xf32>
  %hb = llm.broadcast %half : tensor<f32> to tensor<2x256x1xf32>
  %c = llm.mul %s, %hb : tensor<2x256x1xf32>
  %tb = llm.broadcast %three : tensor<f32> to tensor<2x256x1xf32>
  %r3 = llm.pow %rstd, %tb : tensor<2x256x1xf32>
  %d = llm.mul %c, %r3 : tensor<2x256x1xf32>
  %db = llm.broadcast %d : tensor<2x256x1xf32> to tensor<2x256x2048xf32>
  %nb = llm.broadcast %n : tensor<f32> to tensor<2x256x2048xf32>
  %e = llm.div %db, %nb : tensor<2x256x2048xf32>
  %twob = llm.broadcast %two : tensor<f32> to tensor<2x256x2048xf32>
  %x2 = llm.mul %x, %twob : tensor<2x256x2048xf32>
  %f = llm.mul %e, %x2 : tensor<2x256x2048xf32>
  %dx = llm.add %a, %f : tensor<2x256x2048xf32>
  %out = llm.cast %dx : tensor<2x256x2048xf32> to tensor<2x256x2048xbf16>
  %sum = llm.add %res, %out : tensor<2x256x2048xbf16>
  return %sum, %s : tensor<2x256x2048xbf16>, tensor<2x256x1xf32>
}

// The 1B LLaMA backward's RMSNorm as the training graph has it: the
// gradient is the sum of two GEMMs' results (gate and up projections), and
// the weight gradient sum(g * xhat, dims=[0, 1]) is summed over the rows by
// the same kernel: one row kernel writing dx and each block's partial
// column sums (512 blocks x 2048 f32 = 4 MiB of arena), then a column
// reduction of the partials over the blocks (8 splits of 64, and their
// combine).
// WGRAD: kernel launches: 3 (3 distinct kernels)
// WGRAD: arena peak bytes: 4259840
// WEXEC: exec.launch @llmc_rowfused_{{[0-9a-f]+}} grid [512, 1, 1] block [256, 1, 1] smem 0 ({{%b[0-9]+}}[0], %[[P:b[0-9]+]][0],
// WEXEC-NEXT: exec.launch @llmc_colreduce_sum_f32_bf16_v4 grid [16, 8, 1] block [256, 1, 1] smem 0 ({{%b[0-9]+}}[0], {{%b[0-9]+}}[0], %[[P]][0], 1 : i64, 512 : i64, 2048 : i64, 64 : i64) label "llm.reduce_sum"
// WEXEC-NEXT: exec.launch @llmc_colreduce_combine_sum_f32_bf16 grid [8, 1, 1] block [256, 1, 1] smem 0 ({{.*}}, 2048 : i64, 512 : i64, 8 : i32) label "llm.reduce_sum"
// WEXEC-NOT: exec.launch
func.func @rms_norm_backward_weight_grad(%g1: tensor<2x256x2048xbf16>, %g2: tensor<2x256x2048xbf16>,
                                         %w: tensor<2048xbf16>, %x: tensor<2x256x2048xf32>,
                                         %rstd: tensor<2x256x1xf32>, %xhat: tensor<2x256x2048xbf16>,
                                         %res: tensor<2x256x2048xbf16>)
    -> (tensor<2x256x2048xbf16>, tensor<2048xbf16>) {
  %half = llm.constant dense<-5.000000e-01> : tensor<f32>
  %three = llm.constant dense<3.000000e+00> : tensor<f32>
  %n = llm.constant dense<2.048000e+03> : tensor<f32>
  %two = llm.constant dense<2.000000e+00> : tensor<f32>
  %g = llm.add %g1, %g2 : tensor<2x256x2048xbf16>
  %p = llm.mul %g, %xhat : tensor<2x256x2048xbf16>
  %dw3 = llm.reduce_sum %p [0, 1] keepdim : tensor<2x256x2048xbf16>
  %dw = llm.reshape %dw3 : tensor<1x1x2048xbf16> to tensor<2048xbf16>
  %wb = llm.broadcast %w : tensor<2048xbf16> to tensor<2x256x2048xbf16>
  %gw = llm.mul %g, %wb : tensor<2x256x2048xbf16>
  %gwf = llm.cast %gw : tensor<2x256x2048xbf16> to tensor<2x256x2048xf32>
  %rb = llm.broadcast %rstd : tensor<2x256x1xf32> to tensor<2x256x2048xf32>
  %a = llm.mul %gwf, %rb : tensor<2x256x2048xf32>
  %b = llm.mul %gwf, %x : tensor<2x256x2048xf32>
  %s = llm.reduce_sum %b [2] keepdim : tensor<2x256x2048xf32>
  %hb = llm.broadcast %half : tensor<f32> to tensor<2x256x1xf32>
  %c = llm.mul %s, %hb : tensor<2x256x1xf32>
  %tb = llm.broadcast %three : tensor<f32> to tensor<2x256x1xf32>
  %r3 = llm.pow %rstd, %tb : tensor<2x256x1xf32>
  %d = llm.mul %c, %r3 : tensor<2x256x1xf32>
  %db = llm.broadcast %d : tensor<2x256x1xf32> to tensor<2x256x2048xf32>
  %nb = llm.broadcast %n : tensor<f32> to tensor<2x256x2048xf32>
  %e = llm.div %db, %nb : tensor<2x256x2048xf32>
  %twob = llm.broadcast %two : tensor<f32> to tensor<2x256x2048xf32>
  %x2 = llm.mul %x, %twob : tensor<2x256x2048xf32>
  %f = llm.mul %e, %x2 : tensor<2x256x2048xf32>
  %dx = llm.add %a, %f : tensor<2x256x2048xf32>
  %out = llm.cast %dx : tensor<2x256x2048xf32> to tensor<2x256x2048xbf16>
  %sum = llm.add %res, %out : tensor<2x256x2048xbf16>
  return %sum, %dw : tensor<2x256x2048xbf16>, tensor<2048xbf16>
}

// A training forward's RMSNorm, its statistic saved for the backward.
func.func @rms_norm_forward_saving_rstd(%x: tensor<2x7x256xbf16>, %w: tensor<256xbf16>)
    -> (tensor<2x7x256xbf16>, tensor<2x7x1xf32>) {
  %wb = llm.broadcast %w : tensor<256xbf16> to tensor<2x7x256xbf16>
  %xf = llm.cast %x : tensor<2x7x256xbf16> to tensor<2x7x256xf32>
  %two = llm.constant dense<2.0> : tensor<f32>
  %twob = llm.broadcast %two : tensor<f32> to tensor<2x7x256xf32>
  %sq = llm.pow %xf, %twob : tensor<2x7x256xf32>
  %ms = llm.reduce_mean %sq [2] keepdim : tensor<2x7x256xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<f32>
  %epsb = llm.broadcast %eps : tensor<f32> to tensor<2x7x1xf32>
  %v = llm.add %ms, %epsb : tensor<2x7x1xf32>
  %rstd = llm.rsqrt %v : tensor<2x7x1xf32>
  %rb = llm.broadcast %rstd : tensor<2x7x1xf32> to tensor<2x7x256xf32>
  %y = llm.mul %xf, %rb : tensor<2x7x256xf32>
  %yb = llm.cast %y : tensor<2x7x256xf32> to tensor<2x7x256xbf16>
  %out = llm.mul %wb, %yb : tensor<2x7x256xbf16>
  return %out, %rstd : tensor<2x7x256xbf16>, tensor<2x7x1xf32>
}

// Softmax written out: the sum reads the max's result (two passes).
func.func @softmax_written_out(%x: tensor<6x37xf32>) -> tensor<6x37xf32> {
  %m = llm.reduce_max %x [1] keepdim : tensor<6x37xf32>
  %mb = llm.broadcast %m : tensor<6x1xf32> to tensor<6x37xf32>
  %d = llm.sub %x, %mb : tensor<6x37xf32>
  %e = llm.exp %d : tensor<6x37xf32>
  %s = llm.reduce_sum %e [1] keepdim : tensor<6x37xf32>
  %sb = llm.broadcast %s : tensor<6x1xf32> to tensor<6x37xf32>
  %y = llm.div %e, %sb : tensor<6x37xf32>
  return %y : tensor<6x37xf32>
}

// LayerNorm's backward (no affine bias term in dx): two sums of one pass,
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)).
func.func @layer_norm_backward(%g: tensor<4x96xf32>, %w: tensor<96xf32>, %xhat: tensor<4x96xf32>,
                               %rstd: tensor<4x1xf32>) -> tensor<4x96xf32> {
  %wb = llm.broadcast %w : tensor<96xf32> to tensor<4x96xf32>
  %gw = llm.mul %g, %wb : tensor<4x96xf32>
  %m1 = llm.reduce_mean %gw [1] keepdim : tensor<4x96xf32>
  %p = llm.mul %gw, %xhat : tensor<4x96xf32>
  %m2 = llm.reduce_mean %p [1] keepdim : tensor<4x96xf32>
  %m1b = llm.broadcast %m1 : tensor<4x1xf32> to tensor<4x96xf32>
  %m2b = llm.broadcast %m2 : tensor<4x1xf32> to tensor<4x96xf32>
  %t = llm.mul %xhat, %m2b : tensor<4x96xf32>
  %u = llm.sub %gw, %m1b : tensor<4x96xf32>
  %v = llm.sub %u, %t : tensor<4x96xf32>
  %rb = llm.broadcast %rstd : tensor<4x1xf32> to tensor<4x96xf32>
  %dx = llm.mul %v, %rb : tensor<4x96xf32>
  return %dx : tensor<4x96xf32>
}
