// A tiny LLaMA (2 layers, d=64, 4 query heads and 2 KV heads of 16, SwiGLU 176,
// vocab 97, f32) as one serving step over a paged KV cache (issue 19): the new
// tokens of B sequences packed without padding (tokens [T], positions [T]),
// the sequence layout of llm.paged_attention (cu_seqlens_q [B + 1], seq_lens
// [B] with the new tokens, block_table [B, 16]), each layer's K and V
// pages [64, 4, 2, 16] updated in place (donated; result k aliases its
// argument), and `last_token` [R], the packed rows whose logits [R, 97] the
// step returns (the last new token of each sequence that samples: a prefill
// chunk that does not finish its prompt wants none). RoPE (half split) reads
// precomputed cos/sin tables [256, 16] at each token's position. What a
// continuous-batching engine runs every iteration: prefill chunks and decode
// tokens of any mix of requests in one batch.
//
// Weights in nn.Linear layout ([out, in]), hence `transpose_rhs`.
func.func @tiny_llama_serving_step(
    %tokens: tensor<?xi32> {llm.dim_names = ["tokens"]},
    %positions: tensor<?xi32> {llm.dim_names = ["tokens"]},
    %cu_seqlens_q: tensor<?xi32> {llm.dim_names = ["seqs_plus_one"]},
    %seq_lens: tensor<?xi32> {llm.dim_names = ["seqs"]},
    %block_table: tensor<?x16xi32> {llm.dim_names = ["seqs"]},
    %last_token: tensor<?xi32> {llm.dim_names = ["logit_rows"]},
    %k_pages0: tensor<64x4x2x16xf32> {llm.donate, llm.aliasing_output = 1 : i64},
    %v_pages0: tensor<64x4x2x16xf32> {llm.donate, llm.aliasing_output = 2 : i64},
    %k_pages1: tensor<64x4x2x16xf32> {llm.donate, llm.aliasing_output = 3 : i64},
    %v_pages1: tensor<64x4x2x16xf32> {llm.donate, llm.aliasing_output = 4 : i64},
    %wte: tensor<97x64xf32>,
    %rope_cos: tensor<256x16xf32>,
    %rope_sin: tensor<256x16xf32>,
    %attn_norm_w0: tensor<64xf32>,
    %wq0: tensor<64x64xf32>,
    %wk0: tensor<32x64xf32>,
    %wv0: tensor<32x64xf32>,
    %wo0: tensor<64x64xf32>,
    %ffn_norm_w0: tensor<64xf32>,
    %w_gate0: tensor<176x64xf32>,
    %w_up0: tensor<176x64xf32>,
    %w_down0: tensor<64x176xf32>,
    %attn_norm_w1: tensor<64xf32>,
    %wq1: tensor<64x64xf32>,
    %wk1: tensor<32x64xf32>,
    %wv1: tensor<32x64xf32>,
    %wo1: tensor<64x64xf32>,
    %ffn_norm_w1: tensor<64xf32>,
    %w_gate1: tensor<176x64xf32>,
    %w_up1: tensor<176x64xf32>,
    %w_down1: tensor<64x176xf32>,
    %final_norm_w: tensor<64xf32>,
    %lm_head: tensor<97x64xf32>)
    -> (tensor<?x97xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>) {
  %x0 = llm.gather %wte, %tokens axis = 0 : tensor<97x64xf32>, tensor<?xi32>
  %cos2 = llm.gather %rope_cos, %positions axis = 0 : tensor<256x16xf32>, tensor<?xi32>
  %sin2 = llm.gather %rope_sin, %positions axis = 0 : tensor<256x16xf32>, tensor<?xi32>
  %cos = llm.reshape %cos2 : tensor<?x16xf32> to tensor<1x?x16xf32>
  %sin = llm.reshape %sin2 : tensor<?x16xf32> to tensor<1x?x16xf32>
  // Layer 0: attention over the paged cache.
  %h0 = llm.rms_norm %x0, %attn_norm_w0 {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %q0 = llm.matmul %h0, %wq0 {transpose_rhs} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %k0 = llm.matmul %h0, %wk0 {transpose_rhs} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  %v0 = llm.matmul %h0, %wv0 {transpose_rhs} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  %q4_0 = llm.reshape %q0 : tensor<?x64xf32> to tensor<1x?x4x16xf32>
  %k4_0 = llm.reshape %k0 : tensor<?x32xf32> to tensor<1x?x2x16xf32>
  %qr0 = llm.rope %q4_0 cos(%cos : tensor<1x?x16xf32>) sin(%sin : tensor<1x?x16xf32>) half_split : tensor<1x?x4x16xf32>
  %kr0 = llm.rope %k4_0 cos(%cos : tensor<1x?x16xf32>) sin(%sin : tensor<1x?x16xf32>) half_split : tensor<1x?x2x16xf32>
  %qt0 = llm.reshape %qr0 : tensor<1x?x4x16xf32> to tensor<?x4x16xf32>
  %kt0 = llm.reshape %kr0 : tensor<1x?x2x16xf32> to tensor<?x2x16xf32>
  %vt0 = llm.reshape %v0 : tensor<?x32xf32> to tensor<?x2x16xf32>
  %kp0 = llm.paged_kv_append %k_pages0, %kt0, %block_table, %cu_seqlens_q, %seq_lens : tensor<64x4x2x16xf32>, tensor<?x2x16xf32>, tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
  %vp0 = llm.paged_kv_append %v_pages0, %vt0, %block_table, %cu_seqlens_q, %seq_lens : tensor<64x4x2x16xf32>, tensor<?x2x16xf32>, tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
  %a0 = llm.paged_attention %qt0, %kp0, %vp0, %block_table, %cu_seqlens_q, %seq_lens {causal} : tensor<?x4x16xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>, tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
  %a2_0 = llm.reshape %a0 : tensor<?x4x16xf32> to tensor<?x64xf32>
  %o0 = llm.matmul %a2_0, %wo0 {transpose_rhs} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %r0 = llm.add %x0, %o0 : tensor<?x64xf32>
  // Layer 0: SwiGLU MLP.
  %m0 = llm.rms_norm %r0, %ffn_norm_w0 {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %g0 = llm.matmul %m0, %w_gate0 {transpose_rhs} : tensor<?x64xf32>, tensor<176x64xf32> -> tensor<?x176xf32>
  %u0 = llm.matmul %m0, %w_up0 {transpose_rhs} : tensor<?x64xf32>, tensor<176x64xf32> -> tensor<?x176xf32>
  %s0 = llm.silu %g0 : tensor<?x176xf32>
  %f0 = llm.mul %s0, %u0 : tensor<?x176xf32>
  %d0 = llm.matmul %f0, %w_down0 {transpose_rhs} : tensor<?x176xf32>, tensor<64x176xf32> -> tensor<?x64xf32>
  %x1 = llm.add %r0, %d0 : tensor<?x64xf32>
  // Layer 1: attention over the paged cache.
  %h1 = llm.rms_norm %x1, %attn_norm_w1 {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %q1 = llm.matmul %h1, %wq1 {transpose_rhs} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %k1 = llm.matmul %h1, %wk1 {transpose_rhs} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  %v1 = llm.matmul %h1, %wv1 {transpose_rhs} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  %q4_1 = llm.reshape %q1 : tensor<?x64xf32> to tensor<1x?x4x16xf32>
  %k4_1 = llm.reshape %k1 : tensor<?x32xf32> to tensor<1x?x2x16xf32>
  %qr1 = llm.rope %q4_1 cos(%cos : tensor<1x?x16xf32>) sin(%sin : tensor<1x?x16xf32>) half_split : tensor<1x?x4x16xf32>
  %kr1 = llm.rope %k4_1 cos(%cos : tensor<1x?x16xf32>) sin(%sin : tensor<1x?x16xf32>) half_split : tensor<1x?x2x16xf32>
  %qt1 = llm.reshape %qr1 : tensor<1x?x4x16xf32> to tensor<?x4x16xf32>
  %kt1 = llm.reshape %kr1 : tensor<1x?x2x16xf32> to tensor<?x2x16xf32>
  %vt1 = llm.reshape %v1 : tensor<?x32xf32> to tensor<?x2x16xf32>
  %kp1 = llm.paged_kv_append %k_pages1, %kt1, %block_table, %cu_seqlens_q, %seq_lens : tensor<64x4x2x16xf32>, tensor<?x2x16xf32>, tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
  %vp1 = llm.paged_kv_append %v_pages1, %vt1, %block_table, %cu_seqlens_q, %seq_lens : tensor<64x4x2x16xf32>, tensor<?x2x16xf32>, tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
  %a1 = llm.paged_attention %qt1, %kp1, %vp1, %block_table, %cu_seqlens_q, %seq_lens {causal} : tensor<?x4x16xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>, tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
  %a2_1 = llm.reshape %a1 : tensor<?x4x16xf32> to tensor<?x64xf32>
  %o1 = llm.matmul %a2_1, %wo1 {transpose_rhs} : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %r1 = llm.add %x1, %o1 : tensor<?x64xf32>
  // Layer 1: SwiGLU MLP.
  %m1 = llm.rms_norm %r1, %ffn_norm_w1 {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %g1 = llm.matmul %m1, %w_gate1 {transpose_rhs} : tensor<?x64xf32>, tensor<176x64xf32> -> tensor<?x176xf32>
  %u1 = llm.matmul %m1, %w_up1 {transpose_rhs} : tensor<?x64xf32>, tensor<176x64xf32> -> tensor<?x176xf32>
  %s1 = llm.silu %g1 : tensor<?x176xf32>
  %f1 = llm.mul %s1, %u1 : tensor<?x176xf32>
  %d1 = llm.matmul %f1, %w_down1 {transpose_rhs} : tensor<?x176xf32>, tensor<64x176xf32> -> tensor<?x64xf32>
  %x2 = llm.add %r1, %d1 : tensor<?x64xf32>
  // The last new token of each sequence: final norm and LM head.
  %xl = llm.gather %x2, %last_token axis = 0 : tensor<?x64xf32>, tensor<?xi32>
  %hn = llm.rms_norm %xl, %final_norm_w {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %logits = llm.matmul %hn, %lm_head {transpose_rhs} : tensor<?x64xf32>, tensor<97x64xf32> -> tensor<?x97xf32>
  return %logits, %kp0, %vp0, %kp1, %vp1 : tensor<?x97xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>, tensor<64x4x2x16xf32>
}
