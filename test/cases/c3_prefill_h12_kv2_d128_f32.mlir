// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C3: causal GQA attention, query length 7 against KV length 7, RoPE at 0.
func.func @c3_prefill_h12_kv2_d128_f32(%q: tensor<1x7x12x128xf32>, %k: tensor<1x7x2x128xf32>, %v: tensor<1x7x2x128xf32>) -> tensor<1x7x12x128xf32> {
  %qr = llm.rope %q half_split : tensor<1x7x12x128xf32>
  %kr = llm.rope %k half_split : tensor<1x7x2x128xf32>
  %o = llm.attention %qr, %kr, %v {causal} : tensor<1x7x12x128xf32>, tensor<1x7x2x128xf32>, tensor<1x7x2x128xf32>
  return %o : tensor<1x7x12x128xf32>
}
