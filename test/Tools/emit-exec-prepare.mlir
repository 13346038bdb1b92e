// The lowering builds the parameter-preparation segment as the exec.prepare
// region directly (lib/Compiler/ExecBuilder.h): the fp8 scaling (one row
// kernel finds the amax, the scale and its reciprocal of this small weight,
// read as one row; then the scaling cast, which multiplies by the
// reciprocal and writes the [k,n] weight straight into cuBLASLt's [n,k])
// runs there, the per-call launches follow it. The preparation results that
// per-call launches read are persistent; the reciprocal, read only there,
// is preparation scratch in the arena.
// RUN: llmc-compile %s --precision=fp8 --emit=exec | FileCheck %s
// RUN: llmc-compile %s --precision=bf16 --emit=exec | FileCheck %s --check-prefix=BF16

// CHECK-LABEL: exec.executable @proj
// CHECK:         exec.input "arg1" : tensor<64x32xf32> parameter
// CHECK:         %[[W:.+]] = exec.buffer input[1] 8192 bytes
// CHECK:         %[[SCALE:.+]] = exec.buffer persistent 4 bytes
// CHECK-NEXT:    %[[RECIP:.+]] = exec.buffer arena 4 bytes live [-{{[0-9]+}}, -{{[0-9]+}}]
// CHECK-NEXT:    %[[WT:.+]] = exec.buffer persistent 2048 bytes
// CHECK:         exec.prepare {
// CHECK-NEXT:      exec.launch @llmc_rowfused_{{.+}} grid [1, 1, 1] {{.+}}(%[[SCALE]][0], %[[RECIP]][0], %[[W]][0], 1 : i64) label "llm.div"
// The tiled elementwise kernel reads the [k,n] weight through the transpose:
// numel 2048, rows 32 (n), cols 64 (k).
// CHECK-NEXT:      exec.launch @llmc_ew_{{.+}} grid [1, 1, 1] {{.+}}(%[[WT]][0], %[[W]][0], %[[RECIP]][0], 2048 : i64, 32 : i64, 64 : i64) label "llm.cast"
// CHECK-NEXT:    }
// CHECK-NEXT:    exec.launch @llmc_rowfused_{{.+}} label "llm.div"
// CHECK:         exec.gemm a %{{.+}}[0] b %[[WT]][0] c %{{.+}}[0] d %{{.+}}[0] scale_a %{{.+}}[0] scale_b %[[SCALE]][0]
// CHECK-NOT:     exec.prepare

// BF16-LABEL: exec.executable @proj
// BF16:         %[[WB:.+]] = exec.buffer persistent 4096 bytes
// BF16:         exec.prepare {
// BF16-NEXT:      exec.launch @{{.+}}(%[[WB]][0], %{{.+}}[0], 2048 : i64) label "llm.cast"
// BF16-NEXT:    }
// BF16-NEXT:    exec.launch {{.+}} label "llm.cast"
// BF16-NEXT:    exec.gemm a %{{.+}}[0] b %[[WB]][0]
func.func @proj(%x: tensor<8x64xf32>, %w: tensor<64x32xf32> {llm.param}) -> tensor<8x32xf32> {
  %y = llm.matmul %x, %w : tensor<8x64xf32>, tensor<64x32xf32> -> tensor<8x32xf32>
  %z = llm.silu %y : tensor<8x32xf32>
  return %z : tensor<8x32xf32>
}

// The preparation's scratch buffers (here the row maxima of a weight too
// large for one row) live before every per-call step (negative steps), so
// llmc-plan-arena lets them share offsets with per-call buffers.
// RUN: llmc-compile %s --precision=fp8 --emit=exec --fn=proj_large | FileCheck %s --check-prefix=LARGE
// LARGE-LABEL: exec.executable @proj_large
// LARGE:         %[[ROWMAX:.+]] = exec.buffer arena 512 bytes live [-{{[0-9]+}}, -{{[0-9]+}}] offset 0
// LARGE:         exec.buffer arena 4 bytes live [{{[0-9]+}}, {{[0-9]+}}] offset 0
// LARGE:         exec.prepare {
// LARGE-NEXT:      exec.launch @llmc_rowfused_{{.+}} grid [128, 1, 1] {{.+}}(%[[ROWMAX]][0], %{{.+}}[0], 128 : i64) label "llm.reduce_max"
// LARGE-NEXT:      exec.launch @llmc_rowfused_{{.+}}(%{{.+}}[0], %{{.+}}[0], %[[ROWMAX]][0], 1 : i64) label "llm.div"
// The tiled cast: 256 rows (n) in 4 row tiles along x, 512 columns (k) in 8 along y.
// LARGE-NEXT:      exec.launch @llmc_ew_{{.+}} grid [4, 8, 1] {{.+}} label "llm.cast"
// LARGE-NEXT:    }
func.func @proj_large(%x: tensor<8x512xf32>, %w: tensor<512x256xf32> {llm.param}) -> tensor<8x256xf32> {
  %y = llm.matmul %x, %w : tensor<8x512xf32>, tensor<512x256xf32> -> tensor<8x256xf32>
  return %y : tensor<8x256xf32>
}

// Nothing to prepare (f32: the weight is read as it is): no exec.prepare.
// RUN: llmc-compile %s --emit=exec --fn=plain | FileCheck %s --check-prefix=PLAIN
// PLAIN-LABEL: exec.executable @plain
// PLAIN-NOT:   exec.prepare
func.func @plain(%x: tensor<8x64xf32>, %w: tensor<64x32xf32>) -> tensor<8x32xf32> {
  %y = llm.matmul %x, %w : tensor<8x64xf32>, tensor<64x32xf32> -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// An fp8 weight stored [k, n] is relaid out to [n, k] once per parameter
// set: the input that preparation launch reads is marked parameter, so that
// the runtime's guard runs it again when the weight changes.
// RUN: llmc-compile %s --emit=exec --fn=fp8_weight_relayout | FileCheck %s --check-prefix=RELAYOUT
// RELAYOUT-LABEL: exec.executable @fp8_weight_relayout
// RELAYOUT:         exec.input "arg1" : tensor<32x32xf8E4M3FN> parameter
// RELAYOUT:         %[[W:.+]] = exec.buffer input[1]
// RELAYOUT:         exec.prepare {
// RELAYOUT-NEXT:      exec.launch @{{.+}}(%{{.+}}[0], %[[W]][0], {{.*}}) label "llm.matmul"
// RELAYOUT-NEXT:    }
func.func @fp8_weight_relayout(%x: tensor<32x32xf8E4M3FN>, %w: tensor<32x32xf8E4M3FN> {llm.param}) -> tensor<32x32xbf16> {
  %y = llm.matmul %x, %w : tensor<32x32xf8E4M3FN>, tensor<32x32xf8E4M3FN> -> tensor<32x32xbf16>
  return %y : tensor<32x32xbf16>
}

// A donated argument returned through a reshape to another shape is copied
// into the result; it is not the result's storage (alias_input needs the
// same type).
// RUN: llmc-compile %s --emit=exec --fn=donated_reshape | FileCheck %s --check-prefix=DONATE
// DONATE-LABEL: exec.executable @donated_reshape
// DONATE:         exec.output "result0" : tensor<32xf32>{{$}}
// DONATE:         exec.copy 128 bytes from
func.func @donated_reshape(%x: tensor<4x8xf32> {llm.donate}) -> tensor<32xf32> {
  %y = llm.reshape %x : tensor<4x8xf32> to tensor<32xf32>
  return %y : tensor<32xf32>
}
