// RUN: llmc-opt --split-input-file --llmc-fuse %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-fuse="elementwise=false gemm-epilogue=false residual-norm=false rope-attention=false" %s | FileCheck %s --check-prefix=OFF

// CHECK-LABEL: func.func @swiglu_chain
// CHECK-SAME: (%[[G:.+]]: tensor<7x176xf32>, %[[U:.+]]: tensor<7x176xf32>)
// CHECK: %[[F:.+]] = llm.fusion "elementwise"(%[[G]], %[[U]]) : (tensor<7x176xf32>, tensor<7x176xf32>) -> tensor<7x176xf32> {
// CHECK-NEXT: ^bb0(%[[A:.+]]: tensor<7x176xf32>, %[[B:.+]]: tensor<7x176xf32>):
// CHECK-NEXT:   %[[S:.+]] = llm.silu %[[A]]
// CHECK-NEXT:   %[[M:.+]] = llm.mul %[[S]], %[[B]]
// CHECK-NEXT:   llm.yield %[[M]] : tensor<7x176xf32>
// CHECK: return %[[F]]
// OFF-LABEL: func.func @swiglu_chain
// OFF-NOT: llm.fusion
func.func @swiglu_chain(%g: tensor<7x176xf32>, %u: tensor<7x176xf32>) -> tensor<7x176xf32> {
  %s = llm.silu %g : tensor<7x176xf32>
  %m = llm.mul %s, %u : tensor<7x176xf32>
  return %m : tensor<7x176xf32>
}

// -----

// A producer with two users is not duplicated: it stays outside.
// CHECK-LABEL: func.func @multi_use_producer
// CHECK: %[[E:.+]] = llm.exp
// CHECK-NOT: llm.fusion
// CHECK: llm.neg %[[E]]
// CHECK: llm.abs %[[E]]
func.func @multi_use_producer(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = llm.exp %x : tensor<8xf32>
  %n = llm.neg %e : tensor<8xf32>
  %a = llm.abs %e : tensor<8xf32>
  return %n, %a : tensor<8xf32>, tensor<8xf32>
}

// -----

// CHECK-LABEL: func.func @gemm_epilogue
// CHECK-SAME: (%[[X:.+]]: tensor<7x48xf32>, %[[W:.+]]: tensor<48x192xf32>, %[[B:.+]]: tensor<7x192xf32>)
// CHECK: llm.fusion "gemm_epilogue"(%[[X]], %[[W]], %[[B]])
// CHECK:   llm.matmul
// CHECK:   llm.add
// CHECK:   llm.gelu
// CHECK:   llm.cast
// CHECK:   llm.yield
// OFF-LABEL: func.func @gemm_epilogue
// OFF-NOT: llm.fusion
func.func @gemm_epilogue(%x: tensor<7x48xf32>, %w: tensor<48x192xf32>, %b: tensor<7x192xf32>) -> tensor<7x192xbf16> {
  %m = llm.matmul %x, %w : tensor<7x48xf32>, tensor<48x192xf32> -> tensor<7x192xf32>
  %a = llm.add %m, %b : tensor<7x192xf32>
  %g = llm.gelu %a tanh : tensor<7x192xf32>
  %c = llm.cast %g : tensor<7x192xf32> to tensor<7x192xbf16>
  return %c : tensor<7x192xbf16>
}

// -----

// The GEMM main loop is never fused into: the producer of a matmul operand
// stays outside, and two GEMMs never share a group.
// CHECK-LABEL: func.func @no_fusion_into_gemm
// CHECK: %[[E:.+]] = llm.exp
// CHECK: %[[M2:.+]] = llm.matmul
// CHECK: llm.fusion "gemm_epilogue"(%[[E]], %{{.+}}, %[[M2]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   llm.matmul
// CHECK-NEXT:   llm.add
// CHECK-NEXT:   llm.yield
// CHECK-NOT: llm.fusion
// CHECK: return
func.func @no_fusion_into_gemm(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %e = llm.exp %x : tensor<8x8xf32>
  %m1 = llm.matmul %e, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %m2 = llm.matmul %y, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %s = llm.add %m1, %m2 : tensor<8x8xf32>
  return %s : tensor<8x8xf32>
}

// -----

// The residual sum is used again after the norm: the fusion yields it too.
// CHECK-LABEL: func.func @residual_norm
// CHECK: %[[F:.+]]:2 = llm.fusion "residual_norm"
// CHECK:   %[[S:.+]] = llm.add
// CHECK:   %[[N:.+]] = llm.rms_norm %[[S]]
// CHECK:   llm.yield %[[S]], %[[N]]
// CHECK: llm.add %[[F]]#0, %[[F]]#1
// OFF-LABEL: func.func @residual_norm
// OFF-NOT: llm.fusion
func.func @residual_norm(%x: tensor<7x64xf32>, %o: tensor<7x64xf32>, %w: tensor<64xf32>) -> tensor<7x64xf32> {
  %r = llm.add %x, %o : tensor<7x64xf32>
  %h = llm.rms_norm %r, %w {eps = 1.0e-05 : f64} : tensor<7x64xf32>, tensor<64xf32>
  %y = llm.add %r, %h : tensor<7x64xf32>
  return %y : tensor<7x64xf32>
}

// -----

// The sum is used before the norm: no residual-norm fusion.
// CHECK-LABEL: func.func @residual_used_before_norm
// CHECK-NOT: "residual_norm"
// CHECK: llm.rms_norm
func.func @residual_used_before_norm(%x: tensor<7x64xf32>, %o: tensor<7x64xf32>, %w: tensor<64xf32>) -> (tensor<7x64xf32>, tensor<7x64xf32>) {
  %r = llm.add %x, %o : tensor<7x64xf32>
  %t = llm.reshape %r : tensor<7x64xf32> to tensor<448xf32>
  %t2 = llm.reshape %t : tensor<448xf32> to tensor<7x64xf32>
  %h = llm.rms_norm %r, %w {eps = 1.0e-05 : f64} : tensor<7x64xf32>, tensor<64xf32>
  return %h, %t2 : tensor<7x64xf32>, tensor<7x64xf32>
}

// -----

// CHECK-LABEL: func.func @rope_attention
// CHECK: llm.fusion "rope_attention"
// CHECK:   llm.rope
// CHECK:   llm.rope
// CHECK:   llm.attention
// CHECK:   llm.yield
// OFF-LABEL: func.func @rope_attention
// OFF-NOT: llm.fusion
func.func @rope_attention(%q: tensor<1x7x4x16xf32>, %k: tensor<1x7x2x16xf32>, %v: tensor<1x7x2x16xf32>) -> tensor<1x7x4x16xf32> {
  %qr = llm.rope %q half_split : tensor<1x7x4x16xf32>
  %kr = llm.rope %k half_split : tensor<1x7x2x16xf32>
  %a = llm.attention %qr, %kr, %v {causal} : tensor<1x7x4x16xf32>, tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>
  return %a : tensor<1x7x4x16xf32>
}

// -----

// The table form joins the attention prologue too; cos/sin become inputs of
// the region.
// CHECK-LABEL: func.func @rope_tables_attention
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<1x7x4x16xf32>, %[[K:[^:]+]]: tensor<1x7x2x16xf32>, %[[V:[^:]+]]: tensor<1x7x2x16xf32>, %[[C:[^:]+]]: tensor<7x16xbf16>, %[[S:[^:]+]]: tensor<7x16xbf16>)
// CHECK: llm.fusion "rope_attention"(%[[Q]], %[[C]], %[[S]], %[[K]], %[[V]])
// CHECK: ^bb0(%[[AQ:[^:]+]]: tensor<1x7x4x16xf32>, %[[AC:[^:]+]]: tensor<7x16xbf16>, %[[AS:[^:]+]]: tensor<7x16xbf16>, %[[AK:[^:]+]]: tensor<1x7x2x16xf32>
// CHECK:   llm.rope %[[AQ]] cos(%[[AC]] : tensor<7x16xbf16>) sin(%[[AS]] : tensor<7x16xbf16>) half_split
// CHECK:   llm.rope %[[AK]] cos(%[[AC]] : tensor<7x16xbf16>) sin(%[[AS]] : tensor<7x16xbf16>) half_split
// CHECK:   llm.attention
// CHECK:   llm.yield
// OFF-LABEL: func.func @rope_tables_attention
// OFF-NOT: llm.fusion
func.func @rope_tables_attention(%q: tensor<1x7x4x16xf32>, %k: tensor<1x7x2x16xf32>, %v: tensor<1x7x2x16xf32>, %c: tensor<7x16xbf16>, %s: tensor<7x16xbf16>) -> tensor<1x7x4x16xf32> {
  %qr = llm.rope %q cos(%c : tensor<7x16xbf16>) sin(%s : tensor<7x16xbf16>) half_split : tensor<1x7x4x16xf32>
  %kr = llm.rope %k cos(%c : tensor<7x16xbf16>) sin(%s : tensor<7x16xbf16>) half_split : tensor<1x7x2x16xf32>
  %a = llm.attention %qr, %kr, %v {causal} : tensor<1x7x4x16xf32>, tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>
  return %a : tensor<1x7x4x16xf32>
}

// -----

// A rope whose result is also returned stays outside the attention.
// CHECK-LABEL: func.func @rope_multi_use
// CHECK: %[[QR:.+]] = llm.rope
// CHECK-NOT: llm.fusion
// CHECK: llm.attention %[[QR]]
func.func @rope_multi_use(%q: tensor<1x7x2x16xf32>, %v: tensor<1x7x2x16xf32>) -> (tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>) {
  %qr = llm.rope %q half_split : tensor<1x7x2x16xf32>
  %a = llm.attention %qr, %v, %v : tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>
  return %a, %qr : tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>
}
