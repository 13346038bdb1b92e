// Hugging Face LLaMA's RoPE tables, as AOTAutograd traces them on CUDA:
// angles = inverse frequencies [1, 64, 1] x positions [1, 1, S], a K = 1
// bmm in float32 (autocast off), then cos and sin of [angles, angles]. No
// policy may round that product's operands (positions above 256 round in
// bf16, above 16 in e4m3: the fp8 training step's cos/sin tables were noise,
// relative error 0.8): under bf16, fp16 and fp8 the tables are bit-identical
// to fp32's on the reference executor, and the CUDA executable keeps an f32
// GEMM.
// RUN: rm -rf %t && mkdir -p %t/fp32 %t/bf16 %t/fp16 %t/fp8
// RUN: llmc-run %s --backend=ref --seed=7 --output-dir=%t/fp32
// RUN: llmc-run %s --backend=ref --seed=7 --precision=bf16 --output-dir=%t/bf16
// RUN: llmc-run %s --backend=ref --seed=7 --precision=fp16 --output-dir=%t/fp16
// RUN: llmc-run %s --backend=ref --seed=7 --precision=fp8 --output-dir=%t/fp8
// RUN: cmp %t/fp32/result0.f32 %t/bf16/result0.f32
// RUN: cmp %t/fp32/result1.f32 %t/bf16/result1.f32
// RUN: cmp %t/fp32/result0.f32 %t/fp16/result0.f32
// RUN: cmp %t/fp32/result0.f32 %t/fp8/result0.f32
// RUN: cmp %t/fp32/result1.f32 %t/fp8/result1.f32
// RUN: llmc-compile %s --fn=rope_angles --precision=fp8 --emit=executable-dump | FileCheck %s
// RUN: llmc-compile %s --fn=rope_angles --precision=bf16 --emit=executable-dump | FileCheck %s
// CHECK: gemm 0 m=64 n=2048 k={{[0-9]+}} {{.*}} dtypes=[f32,f32,f32,f32]
// The 1B training step's forward (bench/testdata): its one RoPE GEMM stays
// f32, every linear layer's is fp8.
// RUN: llmc-compile %llmc_src_root/bench/testdata/llama1b_train_fwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump | FileCheck %s --check-prefix=B1
// RUN: llmc-compile %llmc_src_root/bench/testdata/llama1b_train_fwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump | grep -c "dtypes=\[f8e4m3,f8e4m3,bf16,bf16\]" | FileCheck %s --check-prefix=B1-FP8
// B1: counts {{.*}} gemms=114
// B1: gemm {{[0-9]+}} m=64 n=2048 k={{[0-9]+}} {{.*}}dtypes=[f32,f32,f32,f32]
// B1-FP8: 113
func.func @rope_table(%inv: tensor<1x64x1xf32>) -> (tensor<1x2048x128xf32>, tensor<1x2048x128xf32>) {
  %one = llm.constant dense<1.0> : tensor<1x1x2048xf32>
  %c = llm.cumsum %one dim = 2 : tensor<1x1x2048xf32> -> tensor<1x1x2048xf32>
  %m1 = llm.constant dense<-1.0> : tensor<1x1x2048xf32>
  %pos = llm.add %c, %m1 : tensor<1x1x2048xf32>
  %f = llm.matmul %inv, %pos : tensor<1x64x1xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
  %t = llm.transpose %f [0, 2, 1] : tensor<1x64x2048xf32>
  %e = llm.concat %t, %t dim = 2 : tensor<1x2048x64xf32>, tensor<1x2048x64xf32>
  %cos = llm.cos %e : tensor<1x2048x128xf32>
  %sin = llm.sin %e : tensor<1x2048x128xf32>
  return %cos, %sin : tensor<1x2048x128xf32>, tensor<1x2048x128xf32>
}

func.func @rope_angles(%inv: tensor<1x64x1xf32>, %pos: tensor<1x1x2048xf32>) -> tensor<1x64x2048xf32> {
  %f = llm.matmul %inv, %pos : tensor<1x64x1xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
  return %f : tensor<1x64x2048xf32>
}
