// RUN: llmc-opt %s --split-input-file --verify-diagnostics --llmc-specialize-shapes="dims=seq=1099511627776"
// RUN: not llmc-opt %s --split-input-file --llmc-specialize-shapes="dims=seq=4611686018427387904" 2>&1 | FileCheck %s --check-prefix=HUGE

// Shape specialization keeps every tensor within the 2^40 elements of the
// llm dialect: a bound dimension, the argument it makes, every result it
// makes, and the function's own argument and result types.

// HUGE: error: dimension 'seq' = 4611686018427387904 (argument 0 of @seq_at_the_limit, dimension 0) is more than the supported 2^40 (1099511627776)
func.func @seq_at_the_limit(%x: tensor<?xf32> {llm.dim_names = ["seq"]}) -> tensor<?xf32> {
  %y = llm.neg %x : tensor<?xf32>
  return %y : tensor<?xf32>
}

// -----

// expected-error @+1 {{argument 0 of @argument_too_large (seq = 1099511627776) has type 'tensor<1099511627776x2xf32>' with 2199023255552 elements, more than the supported 2^40 (1099511627776)}}
func.func @argument_too_large(%x: tensor<?x2xf32> {llm.dim_names = ["seq"]}) -> tensor<?x2xf32> {
  %y = llm.neg %x : tensor<?x2xf32>
  return %y : tensor<?x2xf32>
}

// -----

func.func @result_too_large(%x: tensor<?x1xf32> {llm.dim_names = ["seq"]}) -> tensor<?x4xf32> {
  // expected-error @+1 {{'llm.broadcast' op result #0 for the bound dimensions has type 'tensor<1099511627776x4xf32>' with 4398046511104 elements, more than the supported 2^40 (1099511627776)}}
  %y = llm.broadcast %x : tensor<?x1xf32> to tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

func.func @inferred_result_too_large(%x: tensor<?xf32> {llm.dim_names = ["seq"]}) -> tensor<?xf32> {
  // expected-error @+2 {{'llm.concat' result dimension 0 is more than the supported 2^40 (1099511627776) at input 1}}
  // expected-error @+1 {{'llm.concat' op cannot compute its result types from the specialized operand types ('tensor<1099511627776xf32>', 'tensor<1099511627776xf32>')}}
  %y = llm.concat %x, %x dim = 0 : tensor<?xf32>, tensor<?xf32>
  return %y : tensor<?xf32>
}

// -----

// No llm op sees a tensor that only passes through.
// expected-error @+1 {{argument 0 of @static_argument_too_large has type 'tensor<4611686018427387904x4xf32>' whose dimension 0 is 4611686018427387904, more than the supported 2^40 (1099511627776)}}
func.func @static_argument_too_large(%x: tensor<4611686018427387904x4xf32>, %s: tensor<?xf32> {llm.dim_names = ["seq"]}) -> tensor<4611686018427387904x4xf32> {
  return %x : tensor<4611686018427387904x4xf32>
}

// -----

// expected-error @+1 {{argument 0 of @unsupported_element_type has element type 'complex<f32>', which llmc does not support (expected f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64)}}
func.func @unsupported_element_type(%x: tensor<4xcomplex<f32>>, %s: tensor<?xf32> {llm.dim_names = ["seq"]}) -> tensor<4xcomplex<f32>> {
  return %x : tensor<4xcomplex<f32>>
}

// -----

// expected-error @+1 {{result 0 of @unsupported_result_type has element type 'index', which llmc does not support}}
func.func @unsupported_result_type(%x: tensor<4xi64>, %s: tensor<?xf32> {llm.dim_names = ["seq"]}) -> tensor<4xindex> {
  %i = arith.index_cast %x : tensor<4xi64> to tensor<4xindex>
  return %i : tensor<4xindex>
}
