// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C3: causal GQA attention, query length 7 against KV length 7, RoPE at 0.
func.func @c3_prefill_h8_kv1_d96_bf16(%q: tensor<1x7x8x96xbf16>, %k: tensor<1x7x1x96xbf16>, %v: tensor<1x7x1x96xbf16>) -> tensor<1x7x8x96xbf16> {
  %qr = llm.rope %q half_split : tensor<1x7x8x96xbf16>
  %kr = llm.rope %k half_split : tensor<1x7x1x96xbf16>
  %o = llm.attention %qr, %kr, %v {causal} : tensor<1x7x8x96xbf16>, tensor<1x7x1x96xbf16>, tensor<1x7x1x96xbf16>
  return %o : tensor<1x7x8x96xbf16>
}
