// GPT-2 small: token/position embeddings, one decoder block (d=768, 12 heads x
// 64, LayerNorm with bias, biased GEMMs, GELU tanh, causal attention), the final
// LayerNorm and the LM head tied to the embedding; logits [1, seq, 50257] f32.
//
// Weights use Hugging Face GPT-2's Conv1D layout ([in, out]), so the block's
// GEMMs need no transpose; the LM head is tied to the token embedding and
// multiplies by wte transposed.
func.func @gpt2_small_block(
    %tokens: tensor<1x?xi64> {llm.dim_names = ["seq"]},
    %positions: tensor<1x?xi64> {llm.dim_names = ["seq"]},
    %wte: tensor<50257x768xf32>,
    %wpe: tensor<1024x768xf32>,
    %ln1_w: tensor<768xf32>, %ln1_b: tensor<768xf32>,
    %c_attn_w: tensor<768x2304xf32>, %c_attn_b: tensor<2304xf32>,
    %attn_proj_w: tensor<768x768xf32>, %attn_proj_b: tensor<768xf32>,
    %ln2_w: tensor<768xf32>, %ln2_b: tensor<768xf32>,
    %c_fc_w: tensor<768x3072xf32>, %c_fc_b: tensor<3072xf32>,
    %mlp_proj_w: tensor<3072x768xf32>, %mlp_proj_b: tensor<768xf32>,
    %lnf_w: tensor<768xf32>, %lnf_b: tensor<768xf32>) -> tensor<1x?x50257xf32> {
  // Token + position embeddings.
  %tok = llm.gather %wte, %tokens axis = 0 : tensor<50257x768xf32>, tensor<1x?xi64>
  %pos = llm.gather %wpe, %positions axis = 0 : tensor<1024x768xf32>, tensor<1x?xi64>
  %x = llm.add %tok, %pos : tensor<1x?x768xf32>
  // Attention.
  %h = llm.layer_norm %x, %ln1_w, %ln1_b {eps = 1.0e-05 : f64} : tensor<1x?x768xf32>, tensor<768xf32>, tensor<768xf32>
  %qkv = llm.matmul %h, %c_attn_w bias %c_attn_b : tensor<1x?x768xf32>, tensor<768x2304xf32>, tensor<2304xf32> -> tensor<1x?x2304xf32>
  %q = llm.slice %qkv [0, 0, 0] to [-1, -1, 768] step [1, 1, 1] : tensor<1x?x2304xf32>
  %k = llm.slice %qkv [0, 0, 768] to [-1, -1, 1536] step [1, 1, 1] : tensor<1x?x2304xf32>
  %v = llm.slice %qkv [0, 0, 1536] to [-1, -1, 2304] step [1, 1, 1] : tensor<1x?x2304xf32>
  %q4 = llm.reshape %q : tensor<1x?x768xf32> to tensor<1x?x12x64xf32>
  %k4 = llm.reshape %k : tensor<1x?x768xf32> to tensor<1x?x12x64xf32>
  %v4 = llm.reshape %v : tensor<1x?x768xf32> to tensor<1x?x12x64xf32>
  %attn = llm.attention %q4, %k4, %v4 {causal} : tensor<1x?x12x64xf32>, tensor<1x?x12x64xf32>, tensor<1x?x12x64xf32>
  %attn2 = llm.reshape %attn : tensor<1x?x12x64xf32> to tensor<1x?x768xf32>
  %o = llm.matmul %attn2, %attn_proj_w bias %attn_proj_b : tensor<1x?x768xf32>, tensor<768x768xf32>, tensor<768xf32> -> tensor<1x?x768xf32>
  %r1 = llm.add %x, %o : tensor<1x?x768xf32>
  // MLP.
  %h2 = llm.layer_norm %r1, %ln2_w, %ln2_b {eps = 1.0e-05 : f64} : tensor<1x?x768xf32>, tensor<768xf32>, tensor<768xf32>
  %fc = llm.matmul %h2, %c_fc_w bias %c_fc_b : tensor<1x?x768xf32>, tensor<768x3072xf32>, tensor<3072xf32> -> tensor<1x?x3072xf32>
  %act = llm.gelu %fc tanh : tensor<1x?x3072xf32>
  %mlp = llm.matmul %act, %mlp_proj_w bias %mlp_proj_b : tensor<1x?x3072xf32>, tensor<3072x768xf32>, tensor<768xf32> -> tensor<1x?x768xf32>
  %r2 = llm.add %r1, %mlp : tensor<1x?x768xf32>
  // Final norm and the LM head tied to wte.
  %hf = llm.layer_norm %r2, %lnf_w, %lnf_b {eps = 1.0e-05 : f64} : tensor<1x?x768xf32>, tensor<768xf32>, tensor<768xf32>
  %logits = llm.matmul %hf, %wte {transpose_rhs} : tensor<1x?x768xf32>, tensor<50257x768xf32> -> tensor<1x?x50257xf32>
  return %logits : tensor<1x?x50257xf32>
}
