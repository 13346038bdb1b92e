// One LLaMA-2-7B decode step for a batch of B sequences (d=4096, 32 heads x
// 128, SwiGLU 11008, bf16) against preallocated KV caches of 2048 positions.
//
// %pos is the index of the new token in every sequence. RoPE rotates q and k
// at that position, the new k/v rows are appended to the caches at %pos, and
// q attends the first %pos + 1 cache rows. The updated caches are returned
// (`llm.donate`: the caches are updated in place; pass each cache buffer as
// its output too and no copy is made).
func.func @llama2_7b_decode_step(
    %x: tensor<?x1x4096xbf16> {llm.dim_names = ["batch"]},
    %k_cache: tensor<?x2048x32x128xbf16> {llm.dim_names = ["batch"], llm.donate},
    %v_cache: tensor<?x2048x32x128xbf16> {llm.dim_names = ["batch"], llm.donate},
    %pos: tensor<i64>,
    %attn_norm_w: tensor<4096xbf16>,
    %wq: tensor<4096x4096xbf16>,
    %wk: tensor<4096x4096xbf16>,
    %wv: tensor<4096x4096xbf16>,
    %wo: tensor<4096x4096xbf16>,
    %ffn_norm_w: tensor<4096xbf16>,
    %w_gate: tensor<11008x4096xbf16>,
    %w_up: tensor<11008x4096xbf16>,
    %w_down: tensor<4096x11008xbf16>)
    -> (tensor<?x1x4096xbf16>, tensor<?x2048x32x128xbf16>, tensor<?x2048x32x128xbf16>) {
  %one = llm.constant dense<1> : tensor<i64>
  %kv_len = llm.add %pos, %one : tensor<i64>
  // Attention against the cache.
  %h = llm.rms_norm %x, %attn_norm_w {eps = 1.0e-05 : f64} : tensor<?x1x4096xbf16>, tensor<4096xbf16>
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<?x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x1x4096xbf16>
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<?x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x1x4096xbf16>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<?x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x1x4096xbf16>
  %q4 = llm.reshape %q : tensor<?x1x4096xbf16> to tensor<?x1x32x128xbf16>
  %k4 = llm.reshape %k : tensor<?x1x4096xbf16> to tensor<?x1x32x128xbf16>
  %v4 = llm.reshape %v : tensor<?x1x4096xbf16> to tensor<?x1x32x128xbf16>
  %qr = llm.rope %q4 offset %pos half_split {theta = 1.000000e+04 : f64} : tensor<?x1x32x128xbf16>, tensor<i64>
  %kr = llm.rope %k4 offset %pos half_split {theta = 1.000000e+04 : f64} : tensor<?x1x32x128xbf16>, tensor<i64>
  %k_new = llm.kv_cache_append %k_cache, %kr, %pos : tensor<?x2048x32x128xbf16>, tensor<?x1x32x128xbf16>, tensor<i64>
  %v_new = llm.kv_cache_append %v_cache, %v4, %pos : tensor<?x2048x32x128xbf16>, tensor<?x1x32x128xbf16>, tensor<i64>
  %attn = llm.attention %qr, %k_new, %v_new kv_len(%kv_len : tensor<i64>) {causal}
      : tensor<?x1x32x128xbf16>, tensor<?x2048x32x128xbf16>, tensor<?x2048x32x128xbf16>
  %attn2 = llm.reshape %attn : tensor<?x1x32x128xbf16> to tensor<?x1x4096xbf16>
  %o = llm.matmul %attn2, %wo {transpose_rhs} : tensor<?x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<?x1x4096xbf16>
  %r1 = llm.add %x, %o : tensor<?x1x4096xbf16>
  // MLP.
  %h2 = llm.rms_norm %r1, %ffn_norm_w {eps = 1.0e-05 : f64} : tensor<?x1x4096xbf16>, tensor<4096xbf16>
  %gate = llm.matmul %h2, %w_gate {transpose_rhs} : tensor<?x1x4096xbf16>, tensor<11008x4096xbf16> -> tensor<?x1x11008xbf16>
  %up = llm.matmul %h2, %w_up {transpose_rhs} : tensor<?x1x4096xbf16>, tensor<11008x4096xbf16> -> tensor<?x1x11008xbf16>
  %act = llm.silu %gate : tensor<?x1x11008xbf16>
  %ff = llm.mul %act, %up : tensor<?x1x11008xbf16>
  %down = llm.matmul %ff, %w_down {transpose_rhs} : tensor<?x1x11008xbf16>, tensor<4096x11008xbf16> -> tensor<?x1x4096xbf16>
  %out = llm.add %r1, %down : tensor<?x1x4096xbf16>
  return %out, %k_new, %v_new : tensor<?x1x4096xbf16>, tensor<?x2048x32x128xbf16>, tensor<?x2048x32x128xbf16>
}
