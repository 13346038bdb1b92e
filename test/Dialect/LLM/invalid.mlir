// RUN: llmc-opt %s --split-input-file --verify-diagnostics

func.func @add_type_mismatch(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error @+1 {{use of value '%b' expects different type than prior uses}}
  %0 = llm.add %a, %b : tensor<4xf32>
  // expected-note @-3 {{prior use here}}
  return
}

// -----

func.func @add_generic_mismatch(%a: tensor<4xf32>, %b: tensor<5xf32>) {
  // expected-error @+1 {{'llm.add' op all non-scalar operands/results must have the same shape and base type}}
  %0 = "llm.add"(%a, %b) : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @silu_int(%a: tensor<4xi32>) {
  // expected-error @+1 {{'llm.silu' op operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type or f8E4M3FN type or f8E5M2 type values, but got 'tensor<4xi32>'}}
  %0 = llm.silu %a : tensor<4xi32>
  return
}

// -----

func.func @sin_int(%a: tensor<4xi64>) {
  // expected-error @+1 {{'llm.sin' op operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type or f8E4M3FN type or f8E5M2 type values, but got 'tensor<4xi64>'}}
  %0 = llm.sin %a : tensor<4xi64>
  return
}

// -----

func.func @cos_int(%a: tensor<4xi32>) {
  // expected-error @+1 {{'llm.cos' op operand #0 must be ranked tensor of}}
  %0 = llm.cos %a : tensor<4xi32>
  return
}

// -----

func.func @unsupported_element_type(%a: tensor<4xf64>) {
  // expected-error @+1 {{'llm.exp' op operand #0 must be ranked tensor of}}
  %0 = llm.exp %a : tensor<4xf64>
  return
}

// -----

func.func @select_shape(%c: tensor<3xi1>, %a: tensor<4xf32>) {
  // expected-error @+1 {{'llm.select' op all non-scalar operands/results must have the same shape and base type}}
  %0 = llm.select %c, %a, %a : tensor<3xi1>, tensor<4xf32>
  return
}

// -----

func.func @cast_shape(%a: tensor<4xf32>) {
  // expected-error @+1 {{'llm.cast' op all non-scalar operands/results must have the same shape and base type}}
  %0 = llm.cast %a : tensor<4xf32> to tensor<5xbf16>
  return
}

// -----

func.func @broadcast_bad(%a: tensor<3xf32>) {
  // expected-error @+1 {{'llm.broadcast' op input of shape [3] does not broadcast to [2, 4]: dimension 0 is 3, expected 1 or 4}}
  %0 = llm.broadcast %a : tensor<3xf32> to tensor<2x4xf32>
  return
}

// -----

func.func @broadcast_rank(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.broadcast' op input of rank 2 cannot broadcast to rank 1}}
  %0 = llm.broadcast %a : tensor<2x3xf32> to tensor<3xf32>
  return
}

// -----

func.func @broadcast_elem(%a: tensor<3xf32>) {
  // expected-error @+1 {{'llm.broadcast' op element type f32 of the input differs from the result's bf16}}
  %0 = llm.broadcast %a : tensor<3xf32> to tensor<2x3xbf16>
  return
}

// -----

func.func @reshape_count(%a: tensor<4x6xf32>) {
  // expected-error @+1 {{'llm.reshape' op input [4, 6] has 24 elements but result [5, 5] has 25}}
  %0 = llm.reshape %a : tensor<4x6xf32> to tensor<5x5xf32>
  return
}

// -----

func.func @reshape_two_dynamic(%a: tensor<?x4096xf32>) {
  // expected-error @+1 {{'llm.reshape' op result [?, ?, 128] has 2 dynamic dimensions; expected at most 1 when the input is dynamic}}
  %0 = llm.reshape %a : tensor<?x4096xf32> to tensor<?x?x128xf32>
  return
}

// -----

func.func @reshape_indivisible(%a: tensor<10xf32>) {
  // expected-error @+1 {{'llm.reshape' op input [10] cannot be reshaped to [?, 3]}}
  %0 = llm.reshape %a : tensor<10xf32> to tensor<?x3xf32>
  return
}

// -----

func.func @reshape_elem(%a: tensor<4xf32>) {
  // expected-error @+1 {{'llm.reshape' op element type f32 of the input differs from the result's f16}}
  %0 = llm.reshape %a : tensor<4xf32> to tensor<2x2xf16>
  return
}

// -----

func.func @transpose_len(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.transpose' permutation has 3 entries, expected 2 (the input rank)}}
  %0 = llm.transpose %a [0, 1, 2] : tensor<2x3xf32>
  return
}

// -----

func.func @transpose_not_perm(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.transpose' permutation [0, 0] is not a permutation of [0, 2)}}
  %0 = llm.transpose %a [0, 0] : tensor<2x3xf32>
  return
}

// -----

func.func @transpose_result(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{'llm.transpose' op inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @+1 {{'llm.transpose' op failed to infer returned types}}
  %0 = "llm.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @transpose_missing_attr(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.transpose' op requires attribute 'permutation'}}
  %0 = "llm.transpose"(%a) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @slice_count(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.slice' expects 2 starts, limits and steps (the input rank), found 1, 2 and 2}}
  %0 = llm.slice %a [0] to [1, 1] step [1, 1] : tensor<2x3xf32>
  return
}

// -----

func.func @slice_range(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.slice' range [0, 4) of dimension 1 is outside [0, 3]}}
  %0 = llm.slice %a [0, 0] to [2, 4] step [1, 1] : tensor<2x3xf32>
  return
}

// -----

func.func @slice_step(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.slice' step 0 of dimension 0 must be >= 1}}
  %0 = llm.slice %a [0, 0] to [2, 3] step [0, 1] : tensor<2x3xf32>
  return
}

// -----

func.func @slice_dynamic(%a: tensor<?x3xf32>) {
  // expected-error @+1 {{'llm.slice' dynamic dimension 0 must be taken whole (start 0, limit -1, step 1)}}
  %0 = llm.slice %a [1, 0] to [-1, 3] step [1, 1] : tensor<?x3xf32>
  return
}

// -----

func.func @concat_rank(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'llm.concat' input 1 has rank 1, expected 2}}
  %0 = llm.concat %a, %b dim = 0 : tensor<2x3xf32>, tensor<3xf32>
  return
}

// -----

func.func @concat_dim(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.concat' dim 2 is out of range for rank 2}}
  %0 = llm.concat %a, %a dim = 2 : tensor<2x3xf32>, tensor<2x3xf32>
  return
}

// -----

func.func @concat_size(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{'llm.concat' input 1 has size 4 in dimension 1, expected 3}}
  %0 = llm.concat %a, %b dim = 0 : tensor<2x3xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @concat_elem(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @+1 {{'llm.concat' op requires the same element type for all operands}}
  %0 = "llm.concat"(%a, %b) <{dim = 0 : i64}> : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  return
}

// -----

func.func @concat_empty() {
  // expected-error @+1 {{'llm.concat' op expected 1 or more operands, but found 0}}
  %0 = "llm.concat"() <{dim = 0 : i64}> : () -> tensor<4x3xf32>
  return
}

// -----

func.func @gather_axis(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{'llm.gather' axis 2 is out of range for a table of rank 2}}
  %0 = llm.gather %t, %i axis = 2 : tensor<10x4xf32>, tensor<3xi64>
  return
}

// -----

func.func @gather_float_indices(%t: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{'llm.gather' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = llm.gather %t, %i axis = 0 : tensor<10x4xf32>, tensor<3xf32>
  return
}

// -----

func.func @reduce_range(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.reduce_sum' dimension 2 is out of range for rank 2}}
  %0 = llm.reduce_sum %a [2] : tensor<2x3xf32>
  return
}

// -----

func.func @reduce_unsorted(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.reduce_max' dimensions [1, 0] must be sorted and unique}}
  %0 = llm.reduce_max %a [1, 0] : tensor<2x3xf32>
  return
}

// -----

func.func @reduce_empty(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.reduce_mean' expects at least one dimension to reduce}}
  %0 = llm.reduce_mean %a [] : tensor<2x3xf32>
  return
}

// -----

func.func @softmax_mask(%a: tensor<2x3xf32>, %m: tensor<4xf32>) {
  // expected-error @+1 {{'llm.softmax' op mask of shape [4] does not broadcast to [2, 3]: dimension 0 is 4, expected 1 or 3}}
  %0 = llm.softmax %a mask %m : tensor<2x3xf32>, tensor<4xf32>
  return
}

// -----

func.func @softmax_scale(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'llm.softmax' op scale must be > 0, found -1}}
  %0 = llm.softmax %a {scale = -1.0 : f64} : tensor<2x3xf32>
  return
}

// -----

func.func @softmax_rank0(%a: tensor<f32>) {
  // expected-error @+1 {{'llm.softmax' op input must have rank >= 1, found rank 0}}
  %0 = llm.softmax %a : tensor<f32>
  return
}

// -----

func.func @rms_norm_weight(%x: tensor<2x4096xbf16>, %w: tensor<4095xbf16>) {
  // expected-error @+1 {{'llm.rms_norm' op weight must have shape [4096] (the input's last dimension), found [4095]}}
  %0 = llm.rms_norm %x, %w : tensor<2x4096xbf16>, tensor<4095xbf16>
  return
}

// -----

func.func @rms_norm_eps(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llm.rms_norm' op eps must be >= 0, found -1}}
  %0 = llm.rms_norm %x, %w {eps = -1.0 : f64} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_rank0(%x: tensor<f32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llm.rms_norm' op input must have rank >= 1, found rank 0}}
  %0 = llm.rms_norm %x, %w : tensor<f32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_bias(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<2x8xf32>) {
  // expected-error @+1 {{'llm.layer_norm' op bias must have shape [8] (the input's last dimension), found [2, 8]}}
  %0 = llm.layer_norm %x, %w, %b : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_weight(%x: tensor<2x8xf32>, %w: tensor<7xf32>) {
  // expected-error @+1 {{'llm.layer_norm' op weight must have shape [8] (the input's last dimension), found [7]}}
  %0 = llm.layer_norm %x, %w : tensor<2x8xf32>, tensor<7xf32>
  return
}

// -----

func.func @layer_norm_eps(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llm.layer_norm' op eps must be >= 0, found -5.000000e-01}}
  %0 = llm.layer_norm %x, %w {eps = -0.5 : f64} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_rank0(%x: tensor<f32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'llm.layer_norm' op input must have rank >= 1, found rank 0}}
  %0 = llm.layer_norm %x, %w : tensor<f32>, tensor<8xf32>
  return
}

// -----

func.func @rope_rank(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op input must be [B, S, H, D] (rank 4), found [2, 8, 64]}}
  %0 = llm.rope %x half_split : tensor<2x8x64xf32>
  return
}

// -----

func.func @rope_odd(%x: tensor<1x8x2x63xf32>) {
  // expected-error @+1 {{'llm.rope' op head dimension must be even, found 63}}
  %0 = llm.rope %x half_split : tensor<1x8x2x63xf32>
  return
}

// -----

func.func @rope_theta(%x: tensor<1x8x2x64xf32>) {
  // expected-error @+1 {{'llm.rope' op theta must be > 0, found 0}}
  %0 = llm.rope %x half_split {theta = 0.0 : f64} : tensor<1x8x2x64xf32>
  return
}

// -----

func.func @rope_offset(%x: tensor<2x8x2x64xf32>, %o: tensor<3xi64>) {
  // expected-error @+1 {{'llm.rope' op offset must be a scalar or have shape [2] (one per batch), found [3]}}
  %0 = llm.rope %x offset %o half_split : tensor<2x8x2x64xf32>, tensor<3xi64>
  return
}

// -----

func.func @rope_cos_only(%x: tensor<2x8x2x64xf32>, %c: tensor<8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op cos and sin tables must be given together, found cos only}}
  %0 = llm.rope %x cos(%c : tensor<8x64xf32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_sin_only(%x: tensor<2x8x2x64xf32>, %s: tensor<8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op cos and sin tables must be given together, found sin only}}
  %0 = llm.rope %x sin(%s : tensor<8x64xf32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_offset(%x: tensor<2x8x2x64xf32>, %o: tensor<i64>, %c: tensor<8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op offset cannot be combined with cos/sin tables (the tables already hold the positions)}}
  %0 = llm.rope %x offset %o cos(%c : tensor<8x64xf32>) sin(%c : tensor<8x64xf32>) half_split : tensor<2x8x2x64xf32>, tensor<i64>
  return
}

// -----

func.func @rope_table_theta(%x: tensor<2x8x2x64xf32>, %c: tensor<8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op theta is not used with cos/sin tables: expected the default (10000), found 5.000000e+05}}
  %0 = llm.rope %x cos(%c : tensor<8x64xf32>) sin(%c : tensor<8x64xf32>) half_split {theta = 5.0e5 : f64} : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_types(%x: tensor<2x8x2x64xf32>, %c: tensor<8x64xf32>, %s: tensor<8x64xbf16>) {
  // expected-error @+1 {{'llm.rope' op sin must have the same type as cos, found 'tensor<8x64xbf16>' and 'tensor<8x64xf32>'}}
  %0 = llm.rope %x cos(%c : tensor<8x64xf32>) sin(%s : tensor<8x64xbf16>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_rank(%x: tensor<2x8x2x64xf32>, %c: tensor<2x1x8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op cos must be [S, D] or [Bt, S, D] (rank 2 or 3), found [2, 1, 8, 64]}}
  %0 = llm.rope %x cos(%c : tensor<2x1x8x64xf32>) sin(%c : tensor<2x1x8x64xf32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_seq(%x: tensor<2x8x2x64xf32>, %c: tensor<1x7x64xf32>) {
  // expected-error @+1 {{'llm.rope' op cos must have the input's sequence length 8 in dimension 1, found [1, 7, 64]}}
  %0 = llm.rope %x cos(%c : tensor<1x7x64xf32>) sin(%c : tensor<1x7x64xf32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_half_width(%x: tensor<2x8x2x64xf32>, %c: tensor<8x32xf32>) {
  // expected-error @+1 {{'llm.rope' op cos must hold the full head dimension 64 per position (as HF passes it), found [8, 32]}}
  %0 = llm.rope %x cos(%c : tensor<8x32xf32>) sin(%c : tensor<8x32xf32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_batch(%x: tensor<2x8x2x64xf32>, %c: tensor<3x8x64xf32>) {
  // expected-error @+1 {{'llm.rope' op cos batch dimension must be 1 or the input's 2, found [3, 8, 64]}}
  %0 = llm.rope %x cos(%c : tensor<3x8x64xf32>) sin(%c : tensor<3x8x64xf32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @rope_table_int(%x: tensor<2x8x2x64xf32>, %c: tensor<8x64xi32>) {
  // expected-error @+1 {{'llm.rope' op operand #1 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type or f8E4M3FN type or f8E5M2 type values, but got 'tensor<8x64xi32>'}}
  %0 = llm.rope %x cos(%c : tensor<8x64xi32>) sin(%c : tensor<8x64xi32>) half_split : tensor<2x8x2x64xf32>
  return
}

// -----

func.func @matmul_rank(%a: tensor<4xf32>, %b: tensor<4x4xf32>) {
  // expected-error @+1 {{'llm.matmul' op operands must have rank >= 2, found lhs [4] and rhs [4, 4]}}
  %0 = llm.matmul %a, %b : tensor<4xf32>, tensor<4x4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @matmul_k(%a: tensor<4x8xbf16>, %b: tensor<4096x4096xbf16>) {
  // expected-error @+1 {{'llm.matmul' op contraction sizes differ: lhs K = 8, rhs K = 4096}}
  %0 = llm.matmul %a, %b {transpose_rhs} : tensor<4x8xbf16>, tensor<4096x4096xbf16> -> tensor<4x4096xbf16>
  return
}

// -----

func.func @matmul_elem(%a: tensor<4x8xbf16>, %b: tensor<8x4xf16>) {
  // expected-error @+1 {{'llm.matmul' op lhs element type bf16 differs from rhs element type f16}}
  %0 = llm.matmul %a, %b : tensor<4x8xbf16>, tensor<8x4xf16> -> tensor<4x4xbf16>
  return
}

// -----

func.func @matmul_result(%a: tensor<4x8xbf16>, %b: tensor<8x5xbf16>) {
  // expected-error @+1 {{'llm.matmul' op result shape [4, 4] differs from the expected [4, 5]}}
  %0 = llm.matmul %a, %b : tensor<4x8xbf16>, tensor<8x5xbf16> -> tensor<4x4xbf16>
  return
}

// -----

func.func @matmul_batch(%a: tensor<3x4x8xbf16>, %b: tensor<2x8x5xbf16>) {
  // expected-error @+1 {{'llm.matmul' op batch dimensions [3] and [2] do not broadcast}}
  %0 = llm.matmul %a, %b : tensor<3x4x8xbf16>, tensor<2x8x5xbf16> -> tensor<3x4x5xbf16>
  return
}

// -----

func.func @matmul_bias(%a: tensor<4x8xbf16>, %b: tensor<8x5xbf16>, %bias: tensor<4xbf16>) {
  // expected-error @+1 {{'llm.matmul' op bias must have shape [5] (N), found [4]}}
  %0 = llm.matmul %a, %b bias %bias : tensor<4x8xbf16>, tensor<8x5xbf16>, tensor<4xbf16> -> tensor<4x5xbf16>
  return
}

// -----

func.func @matmul_float_to_int(%a: tensor<4x8xbf16>, %b: tensor<8x5xbf16>) {
  // expected-error @+1 {{'llm.matmul' op float operands need a float result, found i32}}
  %0 = llm.matmul %a, %b : tensor<4x8xbf16>, tensor<8x5xbf16> -> tensor<4x5xi32>
  return
}

// -----

func.func @matmul_scales_need_fp8(%a: tensor<4x32xbf16>, %b: tensor<32x16xbf16>, %s: tensor<f32>) {
  // expected-error @+1 {{'llm.matmul' op scales dequantize fp8 operands, found bf16 and bf16}}
  %0 = llm.matmul %a, %b scales(%s, %s) : tensor<4x32xbf16>, tensor<32x16xbf16> -> tensor<4x16xbf16>
  return
}

// -----

func.func @matmul_one_scale(%a: tensor<4x32xf8E4M3FN>, %b: tensor<32x16xf8E4M3FN>, %s: tensor<f32>) {
  // expected-error @+1 {{'llm.matmul' op has an lhs scale but no rhs scale; fp8 scales come in pairs}}
  %0 = "llm.matmul"(%a, %b, %s) {operandSegmentSizes = array<i32: 1, 1, 0, 1, 0>} : (tensor<4x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>, tensor<f32>) -> tensor<4x16xbf16>
  return
}

// -----

func.func @matmul_scale_rank(%a: tensor<4x32xf8E4M3FN>, %b: tensor<32x16xf8E4M3FN>, %s: tensor<4xf32>) {
  // expected-error @+1 {{operand #2 must be 0D tensor of 32-bit float values}}
  %0 = "llm.matmul"(%a, %b, %s, %s) {operandSegmentSizes = array<i32: 1, 1, 0, 1, 1>} : (tensor<4x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x16xbf16>
  return
}

// -----

func.func @matmul_fp8_out(%a: tensor<4x32xf8E4M3FN>, %b: tensor<32x16xf8E4M3FN>) {
  // expected-error @+1 {{'llm.matmul' op fp8 operands need an f32, f16 or bf16 result, found f8E4M3FN}}
  %0 = llm.matmul %a, %b : tensor<4x32xf8E4M3FN>, tensor<32x16xf8E4M3FN> -> tensor<4x16xf8E4M3FN>
  return
}

// -----

func.func @attention_rank(%q: tensor<1x7x128xbf16>, %k: tensor<1x7x8x128xbf16>) {
  // expected-error @+1 {{'llm.attention' op query must be [B, S, H, D] (rank 4), found [1, 7, 128]}}
  %0 = "llm.attention"(%q, %k, %k) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>}> : (tensor<1x7x128xbf16>, tensor<1x7x8x128xbf16>, tensor<1x7x8x128xbf16>) -> tensor<1x7x128xbf16>
  return
}

// -----

// With kv_hnd the key length is key dimension 2: a mask over 7 keys does
// not fit 9.
func.func @attention_hnd_mask(%q: tensor<1x1x8x64xbf16>, %k: tensor<1x2x9x64xbf16>, %m: tensor<1x1x1x7xbf16>) {
  // expected-error @+1 {{'llm.attention' op mask}}
  %0 = llm.attention %q, %k, %k mask(%m : tensor<1x1x1x7xbf16>) {kv_hnd} : tensor<1x1x8x64xbf16>, tensor<1x2x9x64xbf16>, tensor<1x2x9x64xbf16>
  return
}

// -----

func.func @attention_hnd_gqa(%q: tensor<1x1x9x64xbf16>, %k: tensor<1x2x7x64xbf16>) {
  // expected-error @+1 {{'llm.attention' op query heads (9) must be a multiple of key/value heads (2) for grouped-query attention}}
  %0 = llm.attention %q, %k, %k {kv_hnd} : tensor<1x1x9x64xbf16>, tensor<1x2x7x64xbf16>, tensor<1x2x7x64xbf16>
  return
}

// -----

func.func @attention_no_kv_heads(%q: tensor<1x7x2x64xbf16>, %k: tensor<1x7x0x64xbf16>) {
  // expected-error @+1 {{'llm.attention' op expected at least one key/value head, found 0}}
  %0 = llm.attention %q, %k, %k : tensor<1x7x2x64xbf16>, tensor<1x7x0x64xbf16>, tensor<1x7x0x64xbf16>
  return
}

// -----

func.func @attention_gqa(%q: tensor<1x7x9x64xbf16>, %k: tensor<1x7x2x64xbf16>) {
  // expected-error @+1 {{'llm.attention' op query heads (9) must be a multiple of key/value heads (2) for grouped-query attention}}
  %0 = llm.attention %q, %k, %k : tensor<1x7x9x64xbf16>, tensor<1x7x2x64xbf16>, tensor<1x7x2x64xbf16>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<1x7x8x64xbf16>, %k: tensor<1x7x8x80xbf16>) {
  // expected-error @+1 {{'llm.attention' op head dimensions differ: query 64, key 80}}
  %0 = llm.attention %q, %k, %k : tensor<1x7x8x64xbf16>, tensor<1x7x8x80xbf16>, tensor<1x7x8x80xbf16>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x7x8x64xbf16>, %k: tensor<3x7x8x64xbf16>) {
  // expected-error @+1 {{'llm.attention' op batch sizes differ: query 2, key 3}}
  %0 = llm.attention %q, %k, %k : tensor<2x7x8x64xbf16>, tensor<3x7x8x64xbf16>, tensor<3x7x8x64xbf16>
  return
}

// -----

func.func @attention_kv_shape(%q: tensor<1x7x8x64xbf16>, %k: tensor<1x7x8x64xbf16>, %v: tensor<1x6x8x64xbf16>) {
  // expected-error @+1 {{'llm.attention' op key [1, 7, 8, 64] and value [1, 6, 8, 64] must have the same shape}}
  %0 = llm.attention %q, %k, %v : tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>, tensor<1x6x8x64xbf16>
  return
}

// -----

func.func @attention_dtype(%q: tensor<1x7x8x64xbf16>, %k: tensor<1x7x8x64xf16>) {
  // expected-error @+1 {{'llm.attention' op query and key must share an element type, found bf16 and f16}}
  %0 = llm.attention %q, %k, %k : tensor<1x7x8x64xbf16>, tensor<1x7x8x64xf16>, tensor<1x7x8x64xf16>
  return
}

// -----

func.func @attention_mask(%q: tensor<1x7x8x64xbf16>, %k: tensor<1x9x8x64xbf16>, %m: tensor<1x1x7x7xf32>) {
  // expected-error @+1 {{'llm.attention' op mask of shape [1, 1, 7, 7] does not broadcast to [1, 8, 7, 9]: dimension 3 is 7, expected 1 or 9}}
  %0 = llm.attention %q, %k, %k mask(%m : tensor<1x1x7x7xf32>) : tensor<1x7x8x64xbf16>, tensor<1x9x8x64xbf16>, tensor<1x9x8x64xbf16>
  return
}

// -----

func.func @attention_kv_len(%q: tensor<1x1x8x64xbf16>, %k: tensor<1x9x8x64xbf16>, %l: tensor<1xi64>) {
  // expected-error @+1 {{'llm.attention' op kv_len must be a scalar (rank 0), found tensor<1xi64>}}
  %0 = llm.attention %q, %k, %k kv_len(%l : tensor<1xi64>) : tensor<1x1x8x64xbf16>, tensor<1x9x8x64xbf16>, tensor<1x9x8x64xbf16>
  return
}

// -----

func.func @attention_scale(%q: tensor<1x7x8x64xbf16>) {
  // expected-error @+1 {{'llm.attention' op scale must be > 0, found 0}}
  %0 = llm.attention %q, %q, %q {scale = 0.0 : f64} : tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>
  return
}

// -----

func.func @kv_append_rank(%c: tensor<4x2048x8xbf16>, %u: tensor<4x1x8x64xbf16>, %p: tensor<i64>) {
  // expected-error @+1 {{'llm.kv_cache_append' op cache and update must be [B, S, H, D], found [4, 2048, 8] and [4, 1, 8, 64]}}
  %0 = llm.kv_cache_append %c, %u, %p : tensor<4x2048x8xbf16>, tensor<4x1x8x64xbf16>, tensor<i64>
  return
}

// -----

func.func @kv_append_heads(%c: tensor<4x2048x8x64xbf16>, %u: tensor<4x1x4x64xbf16>, %p: tensor<i64>) {
  // expected-error @+1 {{'llm.kv_cache_append' op update [4, 1, 4, 64] does not match cache [4, 2048, 8, 64] in dimension 2}}
  %0 = llm.kv_cache_append %c, %u, %p : tensor<4x2048x8x64xbf16>, tensor<4x1x4x64xbf16>, tensor<i64>
  return
}

// -----

func.func @kv_append_rows(%c: tensor<4x16x8x64xbf16>, %u: tensor<4x17x8x64xbf16>, %p: tensor<i64>) {
  // expected-error @+1 {{'llm.kv_cache_append' op update has 17 rows, more than the cache's 16}}
  %0 = llm.kv_cache_append %c, %u, %p : tensor<4x16x8x64xbf16>, tensor<4x17x8x64xbf16>, tensor<i64>
  return
}

// -----

func.func @kv_append_dtype(%c: tensor<4x16x8x64xbf16>, %u: tensor<4x1x8x64xf16>, %p: tensor<i64>) {
  // expected-error @+1 {{'llm.kv_cache_append' op update element type f16 differs from the cache's bf16}}
  %0 = llm.kv_cache_append %c, %u, %p : tensor<4x16x8x64xbf16>, tensor<4x1x8x64xf16>, tensor<i64>
  return
}

// -----

func.func @kv_append_position(%c: tensor<4x16x8x64xbf16>, %u: tensor<4x1x8x64xbf16>, %p: tensor<4xi64>) {
  // expected-error @+1 {{'llm.kv_cache_append' op position must be a scalar (rank 0), found tensor<4xi64>}}
  %0 = llm.kv_cache_append %c, %u, %p : tensor<4x16x8x64xbf16>, tensor<4x1x8x64xbf16>, tensor<4xi64>
  return
}

// -----

func.func @all_reduce_group(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llm.all_reduce' op group_size must be >= 1, found 0}}
  %0 = llm.all_reduce %x sum group_size = 0 : tensor<8xf32>
  return
}

// -----

func.func @all_gather_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llm.all_gather' dim 1 is out of range for rank 1}}
  %0 = llm.all_gather %x dim = 1 group_size = 2 : tensor<8xf32>
  return
}

// -----

func.func @all_gather_group(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llm.all_gather' group_size must be >= 1, found 0}}
  %0 = llm.all_gather %x dim = 0 group_size = 0 : tensor<8xf32>
  return
}

// -----

func.func @reduce_scatter_divisible(%x: tensor<6xf32>) {
  // expected-error @+1 {{'llm.reduce_scatter' dimension 0 of size 6 does not divide by group_size 4}}
  %0 = llm.reduce_scatter %x sum dim = 0 group_size = 4 : tensor<6xf32>
  return
}

// -----

func.func @reduce_scatter_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llm.reduce_scatter' dim -1 is out of range for rank 1}}
  %0 = llm.reduce_scatter %x sum dim = -1 group_size = 2 : tensor<8xf32>
  return
}

// -----

func.func @reduce_scatter_group(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llm.reduce_scatter' group_size must be >= 1, found -2}}
  %0 = llm.reduce_scatter %x sum dim = 0 group_size = -2 : tensor<8xf32>
  return
}

// -----

func.func @constant_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llm.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "llm.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<8xf32>
  return
}

// -----

func.func @pad_entries(%x: tensor<7x48xf32>) {
  // expected-error @+1 {{'llm.pad' op expected 2 high padding entries (one per dimension), found 1}}
  %0 = llm.pad %x high [9] : tensor<7x48xf32> to tensor<16x48xf32>
  return
}

// -----

func.func @pad_rank(%x: tensor<7x48xf32>) {
  // expected-error @+1 {{'llm.pad' op result rank 1 differs from the input rank 2}}
  %0 = llm.pad %x high [9, 0] : tensor<7x48xf32> to tensor<16xf32>
  return
}

// -----

func.func @pad_negative(%x: tensor<7x48xf32>) {
  // expected-error @+1 {{'llm.pad' op high padding must be >= 0, found -1 for dimension 0}}
  %0 = llm.pad %x high [-1, 0] : tensor<7x48xf32> to tensor<6x48xf32>
  return
}

// -----

func.func @pad_dynamic(%x: tensor<?x48xf32>) {
  // expected-error @+1 {{'llm.pad' op dynamic dimension 0 cannot be padded, found high padding 9}}
  %0 = llm.pad %x high [9, 0] : tensor<?x48xf32> to tensor<?x48xf32>
  return
}

// -----

func.func @pad_shape(%x: tensor<7x48xf32>) {
  // expected-error @+1 {{'llm.pad' op result shape [16, 64] differs from the expected [16, 48]}}
  %0 = llm.pad %x high [9, 0] : tensor<7x48xf32> to tensor<16x64xf32>
  return
}

// -----

func.func @quantize_weight_k_not_multiple(%w: tensor<64x96xbf16>) {
  // expected-error @+1 {{'llm.quantize_weight' op K = 96 is not a multiple of group_size = 128 (pad the weight along K first; llmc-precision leaves such matmuls unquantized)}}
  %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 128 : i64} : tensor<64x96xbf16> -> tensor<64x48xi8>, tensor<64x1xf32>
  return
}

// -----

func.func @quantize_weight_bits(%w: tensor<64x128xbf16>) {
  // expected-error @+1 {{'llm.quantize_weight' op bits must be 4 or 8, found 3}}
  %q, %s = llm.quantize_weight %w {bits = 3 : i64, group_size = 128 : i64} : tensor<64x128xbf16> -> tensor<64x64xi8>, tensor<64x1xf32>
  return
}

// -----

func.func @quantize_weight_group(%w: tensor<64x128xbf16>) {
  // expected-error @+1 {{'llm.quantize_weight' op group_size must be a positive even number, found 0}}
  %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 0 : i64} : tensor<64x128xbf16> -> tensor<64x64xi8>, tensor<64x1xf32>
  return
}

// -----

func.func @quantize_weight_rank(%w: tensor<2x64x128xbf16>) {
  // expected-error @+1 {{'llm.quantize_weight' op expects a rank-2 [N, K] weight, found rank 3}}
  %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 128 : i64} : tensor<2x64x128xbf16> -> tensor<64x64xi8>, tensor<64x1xf32>
  return
}

// -----

func.func @quantize_weight_packed_shape(%w: tensor<64x256xbf16>) {
  // expected-error @+1 {{'llm.quantize_weight' op packed result has shape [64, 256], expected [64, 128]}}
  %q, %s = llm.quantize_weight %w {bits = 4 : i64, group_size = 128 : i64} : tensor<64x256xbf16> -> tensor<64x256xi8>, tensor<64x2xf32>
  return
}

// -----

func.func @quantize_weight_scales_shape(%w: tensor<64x256xbf16>) {
  // expected-error @+1 {{'llm.quantize_weight' op scales result has shape [64, 1], expected [64, 2]}}
  %q, %s = llm.quantize_weight %w {bits = 8 : i64, group_size = 128 : i64} : tensor<64x256xbf16> -> tensor<64x256xi8>, tensor<64x1xf32>
  return
}

// -----

func.func @dequantize_weight_packed_shape(%q: tensor<64x256xi8>, %s: tensor<64x2xf32>) {
  // expected-error @+1 {{'llm.dequantize_weight' op packed operand has shape [64, 256], expected [64, 128]}}
  %w = llm.dequantize_weight %q, %s {bits = 4 : i64, group_size = 128 : i64} : tensor<64x256xi8>, tensor<64x2xf32> -> tensor<64x256xbf16>
  return
}

// -----

func.func @dequantize_weight_scales_shape(%q: tensor<64x256xi8>, %s: tensor<64x4xf32>) {
  // expected-error @+1 {{'llm.dequantize_weight' op scales operand has shape [64, 4], expected [64, 2]}}
  %w = llm.dequantize_weight %q, %s {bits = 8 : i64, group_size = 128 : i64} : tensor<64x256xi8>, tensor<64x4xf32> -> tensor<64x256xbf16>
  return
}

// -----

func.func @dequantize_weight_k(%q: tensor<64x48xi8>, %s: tensor<64x1xf32>) {
  // expected-error @+1 {{'llm.dequantize_weight' op K = 96 is not a multiple of group_size = 128}}
  %w = llm.dequantize_weight %q, %s {bits = 4 : i64, group_size = 128 : i64} : tensor<64x48xi8>, tensor<64x1xf32> -> tensor<64x96xbf16>
  return
}

// -----

// Element counts: every tensor an llm op takes or makes has at most 2^40
// elements (the BoundedTensors trait of every op).

func.func @size_overflows_int64(%a: tensor<1099511627776x1099511627776x1099511627776xf32>) {
  // expected-error @+1 {{'llm.neg' op operand #0 has type 'tensor<1099511627776x1099511627776x1099511627776xf32>' with over 2^63 elements, more than the supported 2^40 (1099511627776)}}
  %0 = llm.neg %a : tensor<1099511627776x1099511627776x1099511627776xf32>
  return
}

// -----

func.func @size_above_2_40(%a: tensor<1048576x1048577xf32>) {
  // expected-error @+1 {{'llm.exp' op operand #0 has type 'tensor<1048576x1048577xf32>' with 1099512676352 elements, more than the supported 2^40 (1099511627776)}}
  %0 = llm.exp %a : tensor<1048576x1048577xf32>
  return
}

// -----

func.func @size_dimension_above_2_40(%a: tensor<4611686018427387904x4xf32>) {
  // expected-error @+1 {{'llm.neg' op operand #0 has type 'tensor<4611686018427387904x4xf32>' whose dimension 0 is 4611686018427387904, more than the supported 2^40 (1099511627776)}}
  %0 = llm.neg %a : tensor<4611686018427387904x4xf32>
  return
}

// -----

func.func @size_static_dims_of_dynamic_type(%a: tensor<?x1048576x1048577xf32>) {
  // expected-error @+1 {{'llm.neg' op operand #0 has type 'tensor<?x1048576x1048577xf32>' with 1099512676352 elements in its static dimensions alone, more than the supported 2^40 (1099511627776)}}
  %0 = llm.neg %a : tensor<?x1048576x1048577xf32>
  return
}

// -----

func.func @size_empty_tensor_with_huge_strides(%a: tensor<0x1099511627776x1099511627776xf32>) {
  // expected-error @+1 {{'llm.neg' op operand #0 has type 'tensor<0x1099511627776x1099511627776xf32>' whose non-empty dimensions multiply to over 2^63, more than the supported 2^40 (1099511627776)}}
  %0 = llm.neg %a : tensor<0x1099511627776x1099511627776xf32>
  return
}

// -----

func.func @size_result(%a: tensor<1x1024xf32>) {
  // Exactly 2^40 elements is allowed.
  %0 = llm.broadcast %a : tensor<1x1024xf32> to tensor<1073741824x1024xf32>
  // expected-error @+1 {{'llm.broadcast' op result #0 has type 'tensor<1073741825x1024xf32>' with 1099511628800 elements, more than the supported 2^40 (1099511627776)}}
  %1 = llm.broadcast %a : tensor<1x1024xf32> to tensor<1073741825x1024xf32>
  return
}

// -----

// A wrapped-around element count made this reshape "equal".
func.func @reshape_of_overflowing_count(%a: tensor<1099511627776x1099511627776x1099511627776xf32>) {
  // expected-error @+1 {{'llm.reshape' op operand #0 has type 'tensor<1099511627776x1099511627776x1099511627776xf32>' with over 2^63 elements}}
  %0 = llm.reshape %a : tensor<1099511627776x1099511627776x1099511627776xf32> to tensor<0xf32>
  return
}

// -----

func.func @concat_dimension_overflows(%a: tensor<9223372036854775807xf32>) {
  // expected-error @+1 {{'llm.concat' result dimension 0 is more than the supported 2^40 (1099511627776) at input 1}}
  %0 = llm.concat %a, %a dim = 0 : tensor<9223372036854775807xf32>, tensor<9223372036854775807xf32>
  return
}

// -----

func.func @all_gather_dimension_overflows(%a: tensor<4611686018427387904xf32>) {
  // expected-error @+1 {{'llm.all_gather' result dimension 0 (4611686018427387904 x group_size 4) is more than the supported 2^40 (1099511627776)}}
  %0 = llm.all_gather %a dim = 0 group_size = 4 : tensor<4611686018427387904xf32>
  return
}

// -----

// 4 + high overflowed int64 before it was compared with the result.
func.func @pad_high_too_large(%a: tensor<4xf32>) {
  // expected-error @+1 {{'llm.pad' op high padding 9223372036854775804 of dimension 0 is more than the supported 2^40 (1099511627776)}}
  %0 = llm.pad %a high [9223372036854775804] : tensor<4xf32> to tensor<8xf32>
  return
}

// -----

// Function argument attributes.

// expected-error @+1 {{attribute 'llm.dim_names' of argument 0 of @dim_names_not_strings must be an array of non-empty strings (one name per dynamic dimension), found 1 : i64 at position 0}}
func.func @dim_names_not_strings(%x: tensor<?x4xf32> {llm.dim_names = [1]}) {
  return
}

// -----

// expected-error @+1 {{attribute 'llm.dim_names' of argument 0 of @dim_names_not_an_array must be an array of strings, found "seq"}}
func.func @dim_names_not_an_array(%x: tensor<?x4xf32> {llm.dim_names = "seq"}) {
  return
}

// -----

// expected-error @+1 {{attribute 'llm.donate' of argument 1 of @donate_with_a_value is a unit attribute (write it without a value), found 1 : i64}}
func.func @donate_with_a_value(%x: tensor<4xf32>, %c: tensor<4xf32> {llm.donate = 1}) {
  return
}

// -----

// expected-error @+1 {{attribute 'llm.gradient' of argument 0 of @gradient_with_a_value is a unit attribute (write it without a value), found true}}
func.func @gradient_with_a_value(%dy: tensor<4xf32> {llm.gradient = true}) {
  return
}

// -----

// expected-error @+1 {{attribute 'llm.aliasing_output' of argument 0 of @alias_without_donate needs llm.donate on the same argument}}
func.func @alias_without_donate(%p: tensor<4xf32> {llm.aliasing_output = 0 : i64}) -> tensor<4xf32> {
  return %p : tensor<4xf32>
}

// -----

// expected-error @+1 {{attribute 'llm.aliasing_output' of argument 0 of @alias_out_of_range names result 1, but the function has 1 result(s)}}
func.func @alias_out_of_range(%p: tensor<4xf32> {llm.donate, llm.aliasing_output = 1 : i64}) -> tensor<4xf32> {
  return %p : tensor<4xf32>
}

// -----

// expected-error @+1 {{attribute 'llm.aliasing_output' of argument 0 of @alias_other_type names result 0 of type 'tensor<4xbf16>', not the argument's type 'tensor<4xf32>'}}
func.func @alias_other_type(%p: tensor<4xf32> {llm.donate, llm.aliasing_output = 0 : i64}) -> tensor<4xbf16> {
  %c = llm.cast %p : tensor<4xf32> to tensor<4xbf16>
  return %c : tensor<4xbf16>
}

// -----

// expected-error @+1 {{attribute 'llm.aliasing_output' of argument 0 of @alias_twice names result 0, as argument 1 does}}
func.func @alias_twice(%p: tensor<4xf32> {llm.donate, llm.aliasing_output = 0 : i64},
                       %q: tensor<4xf32> {llm.donate, llm.aliasing_output = 0 : i64}) -> tensor<4xf32> {
  %s = llm.add %p, %q : tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// expected-error @+1 {{attribute 'llm.aliasing_output' of argument 0 of @alias_not_an_index must be an i64 result index, found "r0"}}
func.func @alias_not_an_index(%p: tensor<4xf32> {llm.donate, llm.aliasing_output = "r0"}) -> tensor<4xf32> {
  return %p : tensor<4xf32>
}

// -----

// expected-error @+1 {{attribute 'llm.dim_name' of argument 0 of @unknown_argument_attribute is not an llm argument attribute (expected llm.dim_names, llm.donate, llm.aliasing_output, llm.param or llm.gradient)}}
func.func @unknown_argument_attribute(%x: tensor<?x4xf32> {llm.dim_name = ["seq"]}) {
  return
}

// -----

// Edge cases with one semantics for the CUDA backend and the reference
// executor: no reduction over an empty dimension, K >= 1, D in [1, 1024].

func.func @reduce_over_empty_dimension(%a: tensor<4x0xf32>) {
  // expected-error @+1 {{'llm.reduce_max' op reduces dimension 1 of the input [4, 0], which is empty; reduced dimensions must have size >= 1}}
  %0 = llm.reduce_max %a [1] : tensor<4x0xf32>
  return
}

// -----

func.func @reduce_sum_over_empty_dimension(%a: tensor<0x4xf32>) {
  // expected-error @+1 {{'llm.reduce_sum' op reduces dimension 0 of the input [0, 4], which is empty; reduced dimensions must have size >= 1}}
  %0 = llm.reduce_sum %a [0, 1] : tensor<0x4xf32>
  return
}

// -----

func.func @matmul_empty_contraction(%a: tensor<4x0xf32>, %b: tensor<0x8xf32>) {
  // expected-error @+1 {{'llm.matmul' op contraction size K is 0; a matmul needs K >= 1}}
  %0 = llm.matmul %a, %b : tensor<4x0xf32>, tensor<0x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_empty_contraction_dynamic_lhs(%a: tensor<4x?xf32>, %b: tensor<8x0xf32>) {
  // expected-error @+1 {{'llm.matmul' op contraction size K is 0; a matmul needs K >= 1}}
  %0 = llm.matmul %a, %b {transpose_rhs} : tensor<4x?xf32>, tensor<8x0xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @attention_head_dim_too_large(%q: tensor<1x4x2x4096xf32>, %k: tensor<1x4x2x4096xf32>) {
  // expected-error @+1 {{'llm.attention' op head dimension D = 4096 is outside the supported range [1, 1024]}}
  %0 = llm.attention %q, %k, %k : tensor<1x4x2x4096xf32>, tensor<1x4x2x4096xf32>, tensor<1x4x2x4096xf32>
  return
}

// -----

func.func @attention_head_dim_zero(%q: tensor<1x4x2x?xf32>, %k: tensor<1x4x2x0xf32>) {
  // expected-error @+1 {{'llm.attention' op head dimension D = 0 is outside the supported range [1, 1024]}}
  %0 = llm.attention %q, %k, %k : tensor<1x4x2x?xf32>, tensor<1x4x2x0xf32>, tensor<1x4x2x0xf32>
  return
}

// -----

func.func @index_put_dim(%b: tensor<4x8xf32>, %i: tensor<2xi64>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{'llm.index_put' op dim 2 is out of range for the base [4, 8] of rank 2}}
  %0 = llm.index_put %b[%i], %s dim = 2 : tensor<4x8xf32>, tensor<2xi64>, tensor<4x2xf32>
  return
}

// -----

func.func @index_put_rank2_indices(%b: tensor<4x8xf32>, %i: tensor<2x1xi64>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{'llm.index_put' op indices must be rank 1 [N], found [2, 1]}}
  %0 = llm.index_put %b[%i], %s dim = 1 : tensor<4x8xf32>, tensor<2x1xi64>, tensor<4x2xf32>
  return
}

// -----

func.func @index_put_count(%b: tensor<4x8xf32>, %i: tensor<3xi64>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{'llm.index_put' op source [4, 2] has size 2 in dimension 1, expected 3 (the number of indices)}}
  %0 = llm.index_put %b[%i], %s dim = 1 : tensor<4x8xf32>, tensor<3xi64>, tensor<4x2xf32>
  return
}

// -----

func.func @index_put_other_dim(%b: tensor<4x8xf32>, %i: tensor<2xi64>, %s: tensor<5x2xf32>) {
  // expected-error @+1 {{'llm.index_put' op source [5, 2] has size 5 in dimension 0, expected 4 (the base's)}}
  %0 = llm.index_put %b[%i], %s dim = 1 : tensor<4x8xf32>, tensor<2xi64>, tensor<5x2xf32>
  return
}

// -----

func.func @index_put_type(%b: tensor<4x8xf32>, %i: tensor<2xi64>, %s: tensor<4x2xbf16>) {
  // expected-error @+1 {{'llm.index_put' op source element type bf16 differs from the base's f32}}
  %0 = llm.index_put %b[%i], %s dim = 1 : tensor<4x8xf32>, tensor<2xi64>, tensor<4x2xbf16>
  return
}

// -----

func.func @index_put_float_indices(%b: tensor<4x8xf32>, %i: tensor<2xf32>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{'llm.index_put' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2xf32>'}}
  %0 = llm.index_put %b[%i], %s dim = 1 : tensor<4x8xf32>, tensor<2xf32>, tensor<4x2xf32>
  return
}

// -----

func.func @index_put_scalar(%b: tensor<f32>, %i: tensor<2xi64>, %s: tensor<f32>) {
  // expected-error @+1 {{'llm.index_put' op base must have rank >= 1, found a scalar}}
  %0 = llm.index_put %b[%i], %s dim = 0 : tensor<f32>, tensor<2xi64>, tensor<f32>
  return
}

// -----

func.func @argmax_dim(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llm.argmax' dim 2 is out of range for an input of rank 2}}
  %0 = llm.argmax %x dim = 2 : tensor<4x8xf32>
  return
}

// -----

func.func @argmax_empty(%x: tensor<4x0xf32>) {
  // expected-error @+1 {{'llm.argmax' over dimension 1 of size 0 (no element to pick)}}
  %0 = llm.argmax %x dim = 1 : tensor<4x0xf32>
  return
}

// -----

func.func @attention_value_dtype(%q: tensor<1x7x8x64xbf16>, %v: tensor<1x7x8x64xf16>) {
  // expected-error @+1 {{'llm.attention' op value must have key's element type bf16, found f16}}
  %0 = llm.attention %q, %q, %v : tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>, tensor<1x7x8x64xf16>
  return
}

// -----

func.func @logsumexp_layout(%q: tensor<2x7x8x64xbf16>) {
  // expected-error @+1 {{'llm.attention_logsumexp' op result must be [B, Hq, Sq] = [2, 8, 7] for query [2, 7, 8, 64], found [2, 7, 8]}}
  %0 = llm.attention_logsumexp %q, %q : tensor<2x7x8x64xbf16>, tensor<2x7x8x64xbf16> -> tensor<2x7x8xf32>
  return
}

// -----

func.func @logsumexp_gqa(%q: tensor<1x7x9x64xbf16>, %k: tensor<1x7x2x64xbf16>) {
  // expected-error @+1 {{'llm.attention_logsumexp' op query heads (9) must be a multiple of key/value heads (2) for grouped-query attention}}
  %0 = llm.attention_logsumexp %q, %k : tensor<1x7x9x64xbf16>, tensor<1x7x2x64xbf16> -> tensor<1x9x7xf32>
  return
}

// -----

func.func @backward_output_shape(%q: tensor<1x7x8x64xf32>, %o: tensor<1x6x8x64xf32>, %l: tensor<1x8x7xf32>) {
  // expected-error @+1 {{'llm.attention_backward' op query [1, 7, 8, 64] and output [1, 6, 8, 64] must have the same shape}}
  %g:3 = llm.attention_backward %q, %q, %q, %o, %q, %l : tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x6x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x8x7xf32>
  return
}

// -----

func.func @backward_grad_output_type(%q: tensor<1x7x8x64xbf16>, %do: tensor<1x7x8x64xf32>, %l: tensor<1x8x7xf32>) {
  // expected-error @+1 {{'llm.attention_backward' op grad_output must have query's element type bf16, found f32}}
  %g:3 = llm.attention_backward %q, %q, %q, %q, %do, %l : tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>, tensor<1x7x8x64xbf16>, tensor<1x7x8x64xf32>, tensor<1x8x7xf32>
  return
}

// -----

func.func @backward_logsumexp_shape(%q: tensor<1x7x8x64xf32>, %l: tensor<1x8x6xf32>) {
  // expected-error @+1 {{'llm.attention_backward' op logsumexp must be [B, Hq, Sq] = [1, 8, 7] for query [1, 7, 8, 64], found [1, 8, 6]}}
  %g:3 = llm.attention_backward %q, %q, %q, %q, %q, %l : tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x8x6xf32>
  return
}

// -----

func.func @backward_mask(%q: tensor<1x7x8x64xf32>, %l: tensor<1x8x7xf32>, %m: tensor<1x1x7x6xf32>) {
  // expected-error @+1 {{'llm.attention_backward' op mask of shape [1, 1, 7, 6] does not broadcast to [1, 8, 7, 7]}}
  %g:3 = llm.attention_backward %q, %q, %q, %q, %q, %l mask(%m : tensor<1x1x7x6xf32>) : tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x7x8x64xf32>, tensor<1x8x7xf32>
  return
}

// -----

func.func @cumsum_dim(%x: tensor<2x9xf32>) {
  // expected-error @+1 {{'llm.cumsum' op dim 2 is out of range for rank 2}}
  %0 = llm.cumsum %x dim = 2 : tensor<2x9xf32> -> tensor<2x9xf32>
  return
}

// -----

func.func @cumsum_float_type(%x: tensor<2x9xbf16>) {
  // expected-error @+1 {{'llm.cumsum' op a bf16 input gives a bf16 result, found f32}}
  %0 = llm.cumsum %x dim = 1 : tensor<2x9xbf16> -> tensor<2x9xf32>
  return
}

// -----

func.func @cumsum_i8_result(%x: tensor<2x9xi1>) {
  // expected-error @+1 {{'llm.cumsum' op an integer or boolean input gives an i64, i32 or float (not fp8) result, found i8}}
  %0 = llm.cumsum %x dim = 1 : tensor<2x9xi1> -> tensor<2x9xi8>
  return
}

// -----

// The kernel has no fp8 accumulator: refused here, not at lowering.
func.func @cumsum_fp8_result(%x: tensor<2x9xi64>) {
  // expected-error @+1 {{'llm.cumsum' op an integer or boolean input gives an i64, i32 or float (not fp8) result, found f8E4M3FN}}
  %0 = llm.cumsum %x dim = 1 : tensor<2x9xi64> -> tensor<2x9xf8E4M3FN>
  return
}

// -----

func.func @cumsum_shape(%x: tensor<2x9xi1>) {
  // expected-error @+1 {{'llm.cumsum' op result shape [2, 8] differs from the input's [2, 9]}}
  %0 = llm.cumsum %x dim = 1 : tensor<2x9xi1> -> tensor<2x8xi64>
  return
}

// -----

func.func @dropout_mask_p(%seed: tensor<i64>) {
  // expected-error @+1 {{'llm.dropout_mask' op p must be in [0, 1], found 1.5}}
  %0 = llm.dropout_mask %seed {p = 1.5 : f64, stream = 0 : i64} : tensor<i64> -> tensor<4xi1>
  return
}

// -----

func.func @dropout_mask_seed(%seed: tensor<2xi64>) {
  // expected-error @+1 {{'llm.dropout_mask' op seed must be a scalar (rank 0) i64, found tensor<2xi64>}}
  %0 = llm.dropout_mask %seed {p = 0.5 : f64, stream = 0 : i64} : tensor<2xi64> -> tensor<4xi1>
  return
}

// -----

func.func @dropout_mask_stream(%seed: tensor<i64>) {
  // expected-error @+1 {{'llm.dropout_mask' op stream must be in [0, 2^31), found 3000000000}}
  %0 = llm.dropout_mask %seed {p = 0.5 : f64, stream = 3000000000 : i64} : tensor<i64> -> tensor<4xi1>
  return
}

// -----

func.func @paged_attention_query_rank(%q: tensor<1x5x32x128xbf16>, %kp: tensor<64x16x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_attention' op query must be [T, Hq, D] (rank 3), found [1, 5, 32, 128]}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens : tensor<1x5x32x128xbf16>, tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_attention_gqa(%q: tensor<5x30x128xbf16>, %kp: tensor<64x16x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_attention' op query heads (30) must be a multiple of key/value heads (8) for grouped-query attention}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens : tensor<5x30x128xbf16>, tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_attention_sequences(%q: tensor<5x32x128xbf16>, %kp: tensor<64x16x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<4xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_attention' op block_table [4, 8], cu_seqlens_q [4] and seq_lens [4] must describe the same B sequences ([B, max_pages], [B + 1], [B])}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens : tensor<5x32x128xbf16>, tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>, tensor<4x8xi32>, tensor<4xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_attention_head_dim(%q: tensor<5x32x64xbf16>, %kp: tensor<64x16x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_attention' op head dimensions differ: query 64, key_pages 128}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens : tensor<5x32x64xbf16>, tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_attention_value_pages(%q: tensor<5x32x128xbf16>, %kp: tensor<64x16x8x128xbf16>, %vp: tensor<64x32x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_attention' op key_pages [64, 16, 8, 128] and value_pages [64, 32, 8, 128] must have the same shape}}
  %0 = llm.paged_attention %q, %kp, %vp, %bt, %cu, %lens : tensor<5x32x128xbf16>, tensor<64x16x8x128xbf16>, tensor<64x32x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_kv_append_update_rank(%kp: tensor<64x16x8x128xbf16>, %k: tensor<1x5x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op update must be [T, Hkv, D] (rank 3), found [1, 5, 8, 128]}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x16x8x128xbf16>, tensor<1x5x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_kv_append_heads(%kp: tensor<64x16x8x128xbf16>, %k: tensor<5x4x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op update [5, 4, 128] must be [T, Hkv, D] of the pages [64, 16, 8, 128] ([P, page_size, Hkv, D])}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x16x8x128xbf16>, tensor<5x4x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_kv_append_dtype(%kp: tensor<64x16x8x128xbf16>, %k: tensor<5x8x128xf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op update element type f16 differs from the pages' bf16}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x16x8x128xbf16>, tensor<5x8x128xf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @paged_kv_append_sequences(%kp: tensor<64x16x8x128xbf16>, %k: tensor<5x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<3xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op block_table [4, 8], cu_seqlens_q [5] and seq_lens [3] must describe the same B sequences}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x16x8x128xbf16>, tensor<5x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<3xi32>
  return
}

// -----

func.func @paged_kv_append_page_size(%kp: tensor<64x0x8x128xbf16>, %k: tensor<5x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op page_size (pages dimension 1) must be at least 1}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x0x8x128xbf16>, tensor<5x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @varlen_attention_offsets(%q: tensor<9x32x128xbf16>, %k: tensor<12x8x128xbf16>, %cuq: tensor<5xi32>, %cuk: tensor<4xi32>) {
  // expected-error @+1 {{'llm.varlen_attention' op cu_seqlens_q and cu_seqlens_k must both be [B + 1], found [5] and [4]}}
  %0 = llm.varlen_attention %q, %k, %k, %cuq, %cuk : tensor<9x32x128xbf16>, tensor<12x8x128xbf16>, tensor<12x8x128xbf16>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @varlen_attention_key_rank(%q: tensor<9x32x128xbf16>, %k: tensor<1x12x8x128xbf16>, %cuq: tensor<5xi32>, %cuk: tensor<5xi32>) {
  // expected-error @+1 {{'llm.varlen_attention' op key must be [Tk, Hkv, D] (rank 3), found [1, 12, 8, 128]}}
  %0 = llm.varlen_attention %q, %k, %k, %cuq, %cuk : tensor<9x32x128xbf16>, tensor<1x12x8x128xbf16>, tensor<1x12x8x128xbf16>, tensor<5xi32>, tensor<5xi32>
  return
}

// -----

func.func @fp8_pages_without_scales(%q: tensor<5x32x128xbf16>, %kp: tensor<64x16x8x128xf8E4M3FN>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_attention' op fp8 pages (f8E4M3FN) need scales(key_scale, value_scale), one f32 per KV head}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens : tensor<5x32x128xbf16>, tensor<64x16x8x128xf8E4M3FN>, tensor<64x16x8x128xf8E4M3FN>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @scales_on_bf16_pages(%q: tensor<5x32x128xbf16>, %kp: tensor<64x16x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'llm.paged_attention' op scales are for fp8 pages only; the pages are bf16}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens scales(%s, %s) : tensor<5x32x128xbf16>, tensor<64x16x8x128xbf16>, tensor<64x16x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @fp8_page_scale_per_kv_head(%q: tensor<5x32x128xbf16>, %kp: tensor<64x16x8x128xf8E4M3FN>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %s: tensor<32xf32>, %vs: tensor<8xf32>) {
  // expected-error @+1 {{'llm.paged_attention' op key_scale must be [Hkv] (one f32 per KV head) of the pages [64, 16, 8, 128], found [32]}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens scales(%s, %vs) : tensor<5x32x128xbf16>, tensor<64x16x8x128xf8E4M3FN>, tensor<64x16x8x128xf8E4M3FN>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>, tensor<32xf32>, tensor<8xf32>
  return
}

// -----

func.func @fp8_queries_over_fp8_pages(%q: tensor<5x32x128xf8E4M3FN>, %kp: tensor<64x16x8x128xf8E4M3FN>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'llm.paged_attention' op query must be f32, f16 or bf16 (the fp8 pages are read into it), found f8E4M3FN}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens scales(%s, %s) : tensor<5x32x128xf8E4M3FN>, tensor<64x16x8x128xf8E4M3FN>, tensor<64x16x8x128xf8E4M3FN>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @fp8_append_without_scale(%kp: tensor<64x16x8x128xf8E4M3FN>, %k: tensor<5x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op a bf16 update into f8E4M3FN pages needs a scale (one f32 per KV head)}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x16x8x128xf8E4M3FN>, tensor<5x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}

// -----

func.func @append_scale_without_fp8(%kp: tensor<64x16x8x128xbf16>, %k: tensor<5x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op a scale is for a float update into fp8 pages only; update and pages are both bf16}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens scale %s : tensor<64x16x8x128xbf16>, tensor<5x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>
  return
}

// -----

func.func @fp8_value_scale_per_kv_head(%q: tensor<5x32x128xbf16>, %kp: tensor<64x16x8x128xf8E4M3FN>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %ks: tensor<8xf32>, %vs: tensor<4xf32>) {
  // expected-error @+1 {{'llm.paged_attention' op value_scale must be [Hkv] (one f32 per KV head) of the pages [64, 16, 8, 128], found [4]}}
  %0 = llm.paged_attention %q, %kp, %kp, %bt, %cu, %lens scales(%ks, %vs) : tensor<5x32x128xbf16>, tensor<64x16x8x128xf8E4M3FN>, tensor<64x16x8x128xf8E4M3FN>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @fp8_append_scale_per_kv_head(%kp: tensor<64x16x8x128xf8E4M3FN>, %k: tensor<5x8x128xbf16>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op scale must be [Hkv] (one f32 per KV head) of the pages [64, 16, 8, 128], found [1]}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens scale %s : tensor<64x16x8x128xf8E4M3FN>, tensor<5x8x128xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>, tensor<1xf32>
  return
}

// -----

func.func @fp8_append_of_another_fp8_type(%kp: tensor<64x16x8x128xf8E4M3FN>, %k: tensor<5x8x128xf8E5M2>, %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) {
  // expected-error @+1 {{'llm.paged_kv_append' op update element type f8E5M2 differs from the pages' f8E4M3FN}}
  %0 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<64x16x8x128xf8E4M3FN>, tensor<5x8x128xf8E5M2>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return
}
