// Every verifier branch of the exec dialect.
// RUN: llmc-opt %s --split-input-file --verify-diagnostics

// expected-error @+1 {{expected non-negative arena_bytes, found -1}}
exec.executable @negative_arena attributes {arena_bytes = -1 : i64} {
}

// -----

// expected-error @+1 {{expected an i64 binding for 'seq', found "7"}}
exec.executable @string_binding attributes {symbol_bindings = {seq = "7"}} {
}

// -----

exec.executable @alias_out_of_range {
  exec.input "arg0" : tensor<4xf32>
  // expected-error @+1 {{expected alias_input below 1 (the number of inputs), found 1}}
  exec.output "result0" : tensor<4xf32> alias_input 1
}

// -----

exec.executable @alias_type {
  exec.input "arg0" : tensor<4xf32>
  // expected-error @+1 {{expected aliased input 0 of type 'tensor<8xf32>', found 'tensor<4xf32>'}}
  exec.output "result0" : tensor<8xf32> alias_input 0
}

// -----

exec.executable @two_prepares {
  exec.prepare {
  }
  // expected-error @+1 {{expected at most one exec.prepare, found 2}}
  exec.prepare {
  }
}

// -----

exec.executable @prepare_after_launch {
  exec.input "arg0" : tensor<4xf32>
  %b0 = exec.buffer input[0] 16 bytes
  exec.copy 16 bytes from %b0[0] to %b0[0]
  // expected-error @+1 {{expected exec.prepare before every launch, found it after one}}
  exec.prepare {
  }
}

// -----

exec.executable @io_index_out_of_range {
  exec.input "arg0" : tensor<4xf32>
  // expected-error @+1 {{expected io_index below 0 (the number of outputs), found 0}}
  %b0 = exec.buffer output[0] 16 bytes
}

// -----

exec.executable @io_bytes {
  exec.input "arg0" : tensor<4xbf16>
  // expected-error @+1 {{expected 8 bytes (input 0, 'tensor<4xbf16>'), found 16}}
  %b0 = exec.buffer input[0] 16 bytes
}

// -----

exec.executable @arena_outside attributes {arena_bytes = 128 : i64} {
  // expected-error @+1 {{expected the arena buffer inside arena_bytes (128), found 64 bytes at offset 128}}
  %b0 = exec.buffer arena 64 bytes live [0, 1] offset 128
}

// -----

exec.executable @input_f64 {
  // expected-error @+1 {{expected an element type of f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64, found 'f64'}}
  exec.input "arg0" : tensor<4xf64>
}

// -----

exec.executable @output_f64 {
  // expected-error @+1 {{expected an element type of f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64, found 'f64'}}
  exec.output "result0" : tensor<4xf64>
}

// -----

exec.executable @negative_bytes {
  // expected-error @+1 {{expected non-negative bytes, found -4}}
  %b0 = exec.buffer persistent -4 bytes
}

// -----

exec.executable @input_without_index {
  // expected-error @+1 {{expected an io_index on an input buffer, found none}}
  %b0 = exec.buffer input 16 bytes
}

// -----

exec.executable @arena_with_index {
  // expected-error @+1 {{expected no io_index on a arena buffer, found 0}}
  %b0 = exec.buffer arena[0] 16 bytes live [0, 0]
}

// -----

exec.executable @negative_index {
  // expected-error @+1 {{expected a non-negative io_index, found -1}}
  %b0 = exec.buffer input[-1] 16 bytes
}

// -----

exec.executable @live_on_persistent {
  // expected-error @+1 {{expected live and offset only on arena buffers, found them on a persistent buffer}}
  %b0 = exec.buffer persistent 16 bytes live [0, 1]
}

// -----

exec.executable @live_reversed {
  // expected-error @+1 {{expected live = [first, last] with first <= last, found array<i64: 3, 1>}}
  %b0 = exec.buffer arena 16 bytes live [3, 1]
}

// -----

exec.executable @negative_offset {
  // expected-error @+1 {{expected a non-negative offset, found -128}}
  %b0 = exec.buffer arena 16 bytes live [0, 1] offset -128
}

// -----

exec.executable @constant_without_data {
  // expected-error @+1 {{expected data on a constant buffer, found none}}
  %b0 = exec.buffer constant 4 bytes
}

// -----

exec.executable @constant_short {
  // expected-error @+1 {{expected 4 bytes of data, found 2}}
  %b0 = exec.buffer constant 4 bytes data "ab"
}

// -----

exec.executable @data_on_arena {
  // expected-error @+1 {{expected data only on constant buffers, found it on a arena buffer}}
  %b0 = exec.buffer arena 2 bytes live [0, 0] data "ab"
}

// -----

exec.executable @header_not_string {
  // expected-error @+1 {{expected the contents of header 'a.h' as a string, found 1 : i64}}
  exec.kernel @k source "" {headers = {"a.h" = 1}}
}

// -----

exec.executable @unknown_kernel {
  // expected-error @+1 {{expected @missing to name an exec.kernel, found none}}
  exec.launch @missing grid [1, 1, 1] block [1, 1, 1] smem 0 ()
}

// -----

exec.executable @grid_rank {
  exec.kernel @k source ""
  // expected-error @+1 {{expected grid of 3 dimensions, found 2}}
  exec.launch @k grid [1, 1] block [1, 1, 1] smem 0 ()
}

// -----

exec.executable @block_range {
  exec.kernel @k source ""
  // expected-error @+1 {{expected block dimensions in [1, 2^31), found 4294967296}}
  exec.launch @k grid [1, 1, 1] block [4294967296, 1, 1] smem 0 ()
}

// -----

exec.executable @smem_range {
  exec.kernel @k source ""
  // expected-error @+1 {{expected smem in [0, 2^32), found -1}}
  exec.launch @k grid [1, 1, 1] block [1, 1, 1] smem -1 ()
}

// -----

exec.executable @f64_argument {
  exec.kernel @k source ""
  // expected-error @+1 {{expected argument 0 to be a buffer pointer, i32, i64, f32 or bytes, found 1.000000e+00 : f64}}
  exec.launch @k grid [1, 1, 1] block [1, 1, 1] smem 0 (1.0 : f64)
}

// -----

exec.executable @pointer_outside {
  exec.kernel @k source ""
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected argument 1 [32, +0) inside its buffer of 16 bytes, found it outside}}
  exec.launch @k grid [1, 1, 1] block [1, 1, 1] smem 0 (7, %b0[32])
}

// -----

exec.executable @pointer_count {
  exec.kernel @k source ""
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected 0 buffer operands (one per pointer argument), found 1}}
  "exec.launch"(%b0) <{kernel = @k, grid = array<i64: 1, 1, 1>, block = array<i64: 1, 1, 1>, smem = 0 : i64, args = [], operandSegmentSizes = array<i32: 1, 0>}> : (!exec.buffer) -> ()
}

// -----

exec.executable @attention_without_operands {
  exec.kernel @k source ""
  // expected-error @+1 {{expected 4, 5 or 11 attention operands (q, k, v, o[, lse] or a backward's q, k, v, o, lse, dO, dQ, dK, dV, row sum, dQ accumulator), found 0}}
  "exec.launch"() <{kernel = @k, grid = array<i64: 1, 1, 1>, block = array<i64: 1, 1, 1>, smem = 0 : i64, args = [], attention = #exec.attention<b = 1, sq = 1, skv = 1, hq = 1, hkv = 1, d = 64, causal = false, scale = 1.0 : f32, dtype = bf16>, operandSegmentSizes = array<i32: 0, 0>}> : () -> ()
}

// -----

exec.executable @attention_with_six_operands {
  exec.kernel @k source ""
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected 4, 5 or 11 attention operands (q, k, v, o[, lse] or a backward's q, k, v, o, lse, dO, dQ, dK, dV, row sum, dQ accumulator), found 6}}
  "exec.launch"(%b0, %b0, %b0, %b0, %b0, %b0) <{kernel = @k, grid = array<i64: 1, 1, 1>, block = array<i64: 1, 1, 1>, smem = 0 : i64, args = [], attention = #exec.attention<b = 1, sq = 1, skv = 1, hq = 1, hkv = 1, d = 64, causal = false, scale = 1.0 : f32, dtype = bf16>, attention_offsets = array<i64: 0, 0, 0, 0, 0, 0>, operandSegmentSizes = array<i32: 0, 6>}> : (!exec.buffer, !exec.buffer, !exec.buffer, !exec.buffer, !exec.buffer, !exec.buffer) -> ()
}

// -----

exec.executable @attention_without_offsets {
  exec.kernel @k source ""
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected 4 attention offsets}}
  "exec.launch"(%b0, %b0, %b0, %b0) <{kernel = @k, grid = array<i64: 1, 1, 1>, block = array<i64: 1, 1, 1>, smem = 0 : i64, args = [], attention = #exec.attention<b = 1, sq = 1, skv = 1, hq = 1, hkv = 1, d = 64, causal = false, scale = 1.0 : f32, dtype = bf16>, operandSegmentSizes = array<i32: 0, 4>}> : (!exec.buffer, !exec.buffer, !exec.buffer, !exec.buffer) -> ()
}

// -----

exec.executable @attention_outside {
  exec.kernel @k source ""
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected attention operand [64, +0) inside its buffer of 16 bytes, found it outside}}
  exec.launch @k grid [1, 1, 1] block [1, 1, 1] smem 0 () attention(%b0[0], %b0[0], %b0[0], %b0[64]) #exec.attention<b = 1, sq = 1, skv = 1, hq = 1, hkv = 1, d = 64, causal = false, scale = 1.0 : f32, dtype = bf16>
}

// -----

exec.executable @gemm_m {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected m > 0, found 0}}
  exec.gemm a %b0[0] b %b0[0] d %b0[0] {m = 0 : i64, n = 1 : i64, k = 1 : i64, lda = 1 : i64, ldb = 1 : i64, ldc = 1 : i64, ldd = 1 : i64, dtype_a = f32, dtype_b = f32, dtype_c = f32, dtype_d = f32}
}

// -----

exec.executable @gemm_dtype {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected dtype_b of f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64, found 'f64'}}
  exec.gemm a %b0[0] b %b0[0] d %b0[0] {m = 1 : i64, n = 1 : i64, k = 1 : i64, lda = 1 : i64, ldb = 1 : i64, ldc = 1 : i64, ldd = 1 : i64, dtype_a = f32, dtype_b = f64, dtype_c = f32, dtype_d = f32}
}

// -----

exec.executable @gemm_compute {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected compute f32, found 'f16'}}
  exec.gemm a %b0[0] b %b0[0] d %b0[0] {m = 1 : i64, n = 1 : i64, k = 1 : i64, lda = 1 : i64, ldb = 1 : i64, ldc = 1 : i64, ldd = 1 : i64, dtype_a = f32, dtype_b = f32, dtype_c = f32, dtype_d = f32, compute = f16}
}

// -----

exec.executable @gemm_bias_outside {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected operand bias [20, +0) inside its buffer of 16 bytes, found it outside}}
  exec.gemm a %b0[0] b %b0[0] d %b0[0] bias %b0[20] {m = 1 : i64, n = 1 : i64, k = 1 : i64, lda = 1 : i64, ldb = 1 : i64, ldc = 1 : i64, ldd = 1 : i64, dtype_a = f32, dtype_b = f32, dtype_c = f32, dtype_d = f32}
}

// -----

exec.executable @copy_negative {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected non-negative bytes, found -1}}
  exec.copy -1 bytes from %b0[0] to %b0[0]
}

// -----

exec.executable @copy_outside {
  %b0 = exec.buffer persistent 16 bytes
  %b1 = exec.buffer persistent 8 bytes
  // expected-error @+1 {{expected destination [0, +16) inside its buffer of 8 bytes, found it outside}}
  exec.copy 16 bytes from %b0[0] to %b1[0]
}

// -----

exec.executable @collective_count {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected a non-negative count, found -4}}
  exec.collective all_reduce sum -4 x f32 from %b0[0] to %b0[0]
}

// -----

exec.executable @collective_dtype {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected dtype of f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64, found 'f64'}}
  exec.collective all_reduce sum 2 x f64 from %b0[0] to %b0[0]
}

// -----

exec.executable @collective_outside {
  %b0 = exec.buffer persistent 16 bytes
  // expected-error @+1 {{expected recv [17, +0) inside its buffer of 16 bytes, found it outside}}
  exec.collective reduce_scatter max 2 x f32 from %b0[0] to %b0[17]
}

// -----

exec.executable @binding_width attributes {symbol_bindings = {seq = 7 : si32}} {
// expected-error @-1 {{expected an i64 binding for 'seq', found 7 : si32}}
}

// -----

exec.executable @signed_argument {
  %b0 = exec.buffer arena 64 bytes
  exec.kernel @k source ""
  // expected-error @+1 {{expected argument 1 to be a buffer pointer, i32, i64, f32 or bytes, found 64 : si64}}
  exec.launch @k grid [1, 1, 1] block [1, 1, 1] smem 0 (%b0[0], 64 : si64)
}

// -----

exec.executable @empty_grid {
  exec.kernel @k source ""
  // expected-error @+1 {{expected grid dimensions in [1, 2^31), found 0}}
  exec.launch @k grid [0, 1, 1] block [1, 1, 1] smem 0 ()
}

// -----

exec.executable @attention_offsets_without_operands {
  exec.kernel @k source ""
  // expected-error @+1 {{expected 0 attention offsets (one per attention operand), found 2}}
  "exec.launch"() <{kernel = @k, grid = array<i64: 1, 1, 1>, block = array<i64: 1, 1, 1>, smem = 0 : i64, args = [], attention_offsets = array<i64: 0, 0>, operandSegmentSizes = array<i32: 0, 0>}> : () -> ()
}

// -----

exec.executable @gemm_operand_without_offset {
  %b0 = exec.buffer arena 64 bytes
  // expected-error @+1 {{expected operand c and c_offset together, found the operand without its offset}}
  "exec.gemm"(%b0, %b0, %b0, %b0) <{a_offset = 0 : i64, b_offset = 0 : i64, d_offset = 0 : i64, m = 1 : i64, n = 1 : i64, k = 1 : i64, lda = 1 : i64, ldb = 1 : i64, ldc = 1 : i64, ldd = 1 : i64, dtype_a = f32, dtype_b = f32, dtype_c = f32, dtype_d = f32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0>}> : (!exec.buffer, !exec.buffer, !exec.buffer, !exec.buffer) -> ()
}

// -----

exec.executable @gemm_offset_without_operand {
  %b0 = exec.buffer arena 64 bytes
  // expected-error @+1 {{expected operand scale_a and scale_a_offset together, found an offset without the operand}}
  exec.gemm a %b0[0] b %b0[0] d %b0[0] {m = 1 : i64, n = 1 : i64, k = 1 : i64, lda = 1 : i64, ldb = 1 : i64, ldc = 1 : i64, ldd = 1 : i64, dtype_a = f32, dtype_b = f32, dtype_c = f32, dtype_d = f32, scale_a_offset = 8 : i64}
}

// -----

exec.executable @output_without_buffer {
  // expected-error @+1 {{expected an output buffer for output 0, found none}}
  exec.output "result0" : tensor<4xf32>
}

// -----

exec.executable @two_output_buffers {
  exec.output "result0" : tensor<4xf32>
  %b0 = exec.buffer output[0] 16 bytes
  // expected-error @+1 {{expected one output buffer for output 0, found a second}}
  %b1 = exec.buffer output[0] 16 bytes
}

// -----

exec.executable @output_never_written {
  exec.input "arg0" : tensor<4xf32>
  exec.output "result0" : tensor<4xf32>
  %b0 = exec.buffer input[0] 16 bytes
  // expected-error @+1 {{expected output 0 to be written by a launch, GEMM, collective or copy, found no writer}}
  %b1 = exec.buffer output[0] 16 bytes
  exec.copy 16 bytes from %b1[0] to %b0[0]
}

// -----

exec.executable @kernel_after_launch {
  exec.input "arg0" : tensor<4xf32>
  exec.output "result0" : tensor<4xf32>
  %b0 = exec.buffer input[0] 16 bytes
  %b1 = exec.buffer output[0] 16 bytes
  exec.copy 16 bytes from %b0[0] to %b1[0]
  // expected-error @+1 {{expected the kernels before the launches (and exec.prepare)}}
  exec.kernel @k source "extern \"C\" __global__ void k() {}"
}

// -----

exec.executable @buffer_before_signature {
  %b0 = exec.buffer arena 16 bytes live [0, 0]
  // expected-error @+1 {{expected the signature (exec.input, exec.output) before the buffers}}
  exec.input "arg0" : tensor<4xf32>
}

// -----

exec.executable @prepare_reads_a_per_call_input {
  exec.input "arg0" : tensor<4xf32>
  exec.output "result0" : tensor<4xf32>
  %b0 = exec.buffer input[0] 16 bytes
  %b1 = exec.buffer persistent 16 bytes
  %b2 = exec.buffer output[0] 16 bytes
  exec.prepare {
    // expected-error @+1 {{in exec.prepare expected to read parameter inputs only, found input 0 (not marked parameter)}}
    exec.copy 16 bytes from %b0[0] to %b1[0]
  }
  exec.copy 16 bytes from %b1[0] to %b2[0]
}
