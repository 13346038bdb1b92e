// The translation exec.executable -> rt::Executable (llmc-compile
// --from-exec): it copies fields, and refuses an arena that is not planned.
// RUN: not llmc-compile %s --from-exec --fn=unplanned --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// RUN: not llmc-compile %s --from-exec --fn=no_offset --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=NO-OFFSET
// RUN: llmc-opt %s --llmc-plan-arena | llmc-compile - --from-exec --fn=unplanned --emit=executable-dump | FileCheck %s

// UNPLANNED: error: exec to executable: 'exec.executable' at {{.+}}: has no arena_bytes; run llmc-plan-arena first
// NO-OFFSET: error: exec to executable: 'exec.buffer' at {{.+}}: arena buffer has no offset; run llmc-plan-arena first

// CHECK:      llmc-executable-dump 1
// CHECK:      counts inputs=1 outputs=1 buffers=4 kernels=1 gemms=0 collectives=0 attentions=0 launches=3
// CHECK-NEXT: num_prepare_launches 1
// CHECK-NEXT: arena_bytes 256
// CHECK-NEXT: symbol "seq"=4
// CHECK-NEXT: input 0 "arg0" f32 [4,16] alias_input=-1 parameter=1
// CHECK-NEXT: output 0 "result0" f32 [4,16] alias_input=-1 parameter=0
// CHECK-NEXT: buffer 0 input bytes=256 io_index=0
// CHECK-NEXT: buffer 1 output bytes=256 io_index=0
// CHECK-NEXT: buffer 2 arena bytes=256 arena_offset=0
// CHECK-NEXT: buffer 3 persistent bytes=256
// CHECK-NEXT: kernel 0 neg source=
// CHECK:      launch 0 prepare kernel neg grid=[1,1,1] block=[64,1,1] smem=0 args=[b0+0,b3+0,i32:64,f32:0.5] label="prep"
// CHECK-NEXT: launch 1 call copy src=b3+0 dst=b2+0 bytes=256 label=""
// CHECK-NEXT: launch 2 call kernel neg grid=[1,1,1] block=[64,1,1] smem=0 args=[b2+0,b1+0,i64:64] label="neg"
exec.executable @unplanned attributes {symbol_bindings = {seq = 4 : i64}} {
  exec.input "arg0" : tensor<4x16xf32> parameter
  exec.output "result0" : tensor<4x16xf32>
  %b0 = exec.buffer input[0] 256 bytes
  %b1 = exec.buffer output[0] 256 bytes
  %b2 = exec.buffer arena 256 bytes live [1, 2]
  %b3 = exec.buffer persistent 256 bytes
  exec.kernel @neg source "extern \22C\22 __global__ void neg(const float *x, float *y, long n) {}"
  exec.prepare {
    exec.launch @neg grid [1, 1, 1] block [64, 1, 1] smem 0 (%b0[0], %b3[0], 64 : i32, 0.5 : f32) label "prep"
  }
  exec.copy 256 bytes from %b3[0] to %b2[0]
  exec.launch @neg grid [1, 1, 1] block [64, 1, 1] smem 0 (%b2[0], %b1[0], 64) label "neg"
}

exec.executable @no_offset attributes {arena_bytes = 256 : i64} {
  %b0 = exec.buffer arena 256 bytes live [1, 2]
}
