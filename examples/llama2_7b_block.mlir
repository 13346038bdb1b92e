// LLaMA-2-7B decoder block (d=4096, 32 heads x 128, SwiGLU 11008, RMSNorm,
// RoPE theta 1e4, causal attention), batch 1, dynamic sequence length, bf16.
//
// Parameters are function arguments in nn.Linear layout ([out, in]), hence
// `transpose_rhs` on every projection. Activations stay [batch, seq, hidden];
// a rank-2 weight is shared across the batch dimension of the matmul.
func.func @llama2_7b_block(
    %x: tensor<1x?x4096xbf16> {llm.dim_names = ["seq"]},
    %attn_norm_w: tensor<4096xbf16>,
    %wq: tensor<4096x4096xbf16>,
    %wk: tensor<4096x4096xbf16>,
    %wv: tensor<4096x4096xbf16>,
    %wo: tensor<4096x4096xbf16>,
    %ffn_norm_w: tensor<4096xbf16>,
    %w_gate: tensor<11008x4096xbf16>,
    %w_up: tensor<11008x4096xbf16>,
    %w_down: tensor<4096x11008xbf16>) -> tensor<1x?x4096xbf16> {
  // Attention: pre-norm, projections, RoPE, causal (GQA) attention.
  %h = llm.rms_norm %x, %attn_norm_w {eps = 1.0e-05 : f64} : tensor<1x?x4096xbf16>, tensor<4096xbf16>
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x?x4096xbf16>
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x?x4096xbf16>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x?x4096xbf16>
  %q4 = llm.reshape %q : tensor<1x?x4096xbf16> to tensor<1x?x32x128xbf16>
  %k4 = llm.reshape %k : tensor<1x?x4096xbf16> to tensor<1x?x32x128xbf16>
  %v4 = llm.reshape %v : tensor<1x?x4096xbf16> to tensor<1x?x32x128xbf16>
  %qr = llm.rope %q4 half_split {theta = 1.000000e+04 : f64} : tensor<1x?x32x128xbf16>
  %kr = llm.rope %k4 half_split {theta = 1.000000e+04 : f64} : tensor<1x?x32x128xbf16>
  %attn = llm.attention %qr, %kr, %v4 {causal} : tensor<1x?x32x128xbf16>, tensor<1x?x32x128xbf16>, tensor<1x?x32x128xbf16>
  %attn2 = llm.reshape %attn : tensor<1x?x32x128xbf16> to tensor<1x?x4096xbf16>
  %o = llm.matmul %attn2, %wo {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x?x4096xbf16>
  %r1 = llm.add %x, %o : tensor<1x?x4096xbf16>
  // MLP: pre-norm, SwiGLU, down projection.
  %h2 = llm.rms_norm %r1, %ffn_norm_w {eps = 1.0e-05 : f64} : tensor<1x?x4096xbf16>, tensor<4096xbf16>
  %gate = llm.matmul %h2, %w_gate {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<11008x4096xbf16> -> tensor<1x?x11008xbf16>
  %up = llm.matmul %h2, %w_up {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<11008x4096xbf16> -> tensor<1x?x11008xbf16>
  %act = llm.silu %gate : tensor<1x?x11008xbf16>
  %ff = llm.mul %act, %up : tensor<1x?x11008xbf16>
  %down = llm.matmul %ff, %w_down {transpose_rhs} : tensor<1x?x11008xbf16>, tensor<4096x11008xbf16> -> tensor<1x?x4096xbf16>
  %out = llm.add %r1, %down : tensor<1x?x4096xbf16>
  return %out : tensor<1x?x4096xbf16>
}
