// A tiny LLaMA-style block for fast numerics: d=64, 4 query heads x 16 and
// 2 KV heads (GQA), SwiGLU 176, RoPE theta 1e4, dynamic sequence length, f32.
//
// Parameters are function arguments in nn.Linear layout ([out, in]), hence
// `transpose_rhs` on every projection. Activations stay [batch, seq, hidden];
// a rank-2 weight is shared across the batch dimension of the matmul.
func.func @tiny_llama_block(
    %x: tensor<1x?x64xf32> {llm.dim_names = ["seq"]},
    %attn_norm_w: tensor<64xf32>,
    %wq: tensor<64x64xf32>,
    %wk: tensor<32x64xf32>,
    %wv: tensor<32x64xf32>,
    %wo: tensor<64x64xf32>,
    %ffn_norm_w: tensor<64xf32>,
    %w_gate: tensor<176x64xf32>,
    %w_up: tensor<176x64xf32>,
    %w_down: tensor<64x176xf32>) -> tensor<1x?x64xf32> {
  // Attention: pre-norm, projections, RoPE, causal (GQA) attention.
  %h = llm.rms_norm %x, %attn_norm_w {eps = 1.0e-05 : f64} : tensor<1x?x64xf32>, tensor<64xf32>
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<1x?x64xf32>, tensor<32x64xf32> -> tensor<1x?x32xf32>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<1x?x64xf32>, tensor<32x64xf32> -> tensor<1x?x32xf32>
  %q4 = llm.reshape %q : tensor<1x?x64xf32> to tensor<1x?x4x16xf32>
  %k4 = llm.reshape %k : tensor<1x?x32xf32> to tensor<1x?x2x16xf32>
  %v4 = llm.reshape %v : tensor<1x?x32xf32> to tensor<1x?x2x16xf32>
  %qr = llm.rope %q4 half_split {theta = 1.000000e+04 : f64} : tensor<1x?x4x16xf32>
  %kr = llm.rope %k4 half_split {theta = 1.000000e+04 : f64} : tensor<1x?x2x16xf32>
  %attn = llm.attention %qr, %kr, %v4 {causal} : tensor<1x?x4x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>
  %attn2 = llm.reshape %attn : tensor<1x?x4x16xf32> to tensor<1x?x64xf32>
  %o = llm.matmul %attn2, %wo {transpose_rhs} : tensor<1x?x64xf32>, tensor<64x64xf32> -> tensor<1x?x64xf32>
  %r1 = llm.add %x, %o : tensor<1x?x64xf32>
  // MLP: pre-norm, SwiGLU, down projection.
  %h2 = llm.rms_norm %r1, %ffn_norm_w {eps = 1.0e-05 : f64} : tensor<1x?x64xf32>, tensor<64xf32>
  %gate = llm.matmul %h2, %w_gate {transpose_rhs} : tensor<1x?x64xf32>, tensor<176x64xf32> -> tensor<1x?x176xf32>
  %up = llm.matmul %h2, %w_up {transpose_rhs} : tensor<1x?x64xf32>, tensor<176x64xf32> -> tensor<1x?x176xf32>
  %act = llm.silu %gate : tensor<1x?x176xf32>
  %ff = llm.mul %act, %up : tensor<1x?x176xf32>
  %down = llm.matmul %ff, %w_down {transpose_rhs} : tensor<1x?x176xf32>, tensor<64x176xf32> -> tensor<1x?x64xf32>
  %out = llm.add %r1, %down : tensor<1x?x64xf32>
  return %out : tensor<1x?x64xf32>
}
