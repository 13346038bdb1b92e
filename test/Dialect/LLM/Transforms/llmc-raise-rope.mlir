// RUN: llmc-opt --split-input-file --llmc-raise %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-raise --canonicalize %s | FileCheck %s --check-prefix=CANON

// The IR the torch.compile plugin imports for Hugging Face's
// apply_rotary_pos_emb on q [B, H, S, D] = transpose of the projection's
// [B, S, H, D] view: q*cos + rotate_half(q)*sin with rotate_half's inner
// concat spelled transpose / outer concat / transpose, and cos/sin [1, S, D]
// (f32, cast to bf16) unsqueezed at the head dimension.
// CHECK-LABEL: func.func @hf_llama_bf16
// CHECK-SAME: (%[[Y:.+]]: tensor<2x8x4x16xbf16>, %[[C:.+]]: tensor<1x8x16xf32>, %[[S:.+]]: tensor<1x8x16xf32>)
// CHECK-DAG: %[[CB:.+]] = llm.cast %[[C]] : tensor<1x8x16xf32> to tensor<1x8x16xbf16>
// CHECK-DAG: %[[SB:.+]] = llm.cast %[[S]] : tensor<1x8x16xf32> to tensor<1x8x16xbf16>
// CHECK: %[[R:.+]] = llm.rope %[[Y]] cos(%{{.+}} : tensor<1x8x16xbf16>) sin(%{{.+}} : tensor<1x8x16xbf16>) half_split : tensor<2x8x4x16xbf16>
// CHECK: %[[T:.+]] = llm.transpose %[[R]] [0, 2, 1, 3] : tensor<2x8x4x16xbf16>
// CHECK: return %[[T]]
// After canonicalization the tables are the casts themselves and the
// caller's transpose pair (here: the one inside the function) is gone.
// CANON-LABEL: func.func @hf_llama_bf16
// CANON-NOT: llm.slice
// CANON-NOT: llm.concat
// CANON-NOT: llm.neg
// CANON: llm.rope %{{.+}} cos(%{{.+}} : tensor<1x8x16xbf16>) sin(%{{.+}} : tensor<1x8x16xbf16>)
// CANON-NOT: llm.slice
// CANON-NOT: llm.concat
// CANON-NOT: llm.neg
// CANON: return
func.func @hf_llama_bf16(%y: tensor<2x8x4x16xbf16>, %cos: tensor<1x8x16xf32>, %sin: tensor<1x8x16xf32>) -> tensor<2x4x8x16xbf16> {
  %q = llm.transpose %y [0, 2, 1, 3] : tensor<2x8x4x16xbf16>
  %c1 = llm.cast %cos : tensor<1x8x16xf32> to tensor<1x8x16xbf16>
  %c2 = llm.reshape %c1 : tensor<1x8x16xbf16> to tensor<1x1x8x16xbf16>
  %c3 = llm.broadcast %c2 : tensor<1x1x8x16xbf16> to tensor<2x4x8x16xbf16>
  %qc = llm.mul %q, %c3 : tensor<2x4x8x16xbf16>
  %hi = llm.slice %q [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x4x8x16xbf16>
  %nhi = llm.neg %hi : tensor<2x4x8x8xbf16>
  %t0 = llm.transpose %nhi [3, 0, 1, 2] : tensor<2x4x8x8xbf16>
  %lo = llm.slice %q [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x4x8x16xbf16>
  %t1 = llm.transpose %lo [3, 0, 1, 2] : tensor<2x4x8x8xbf16>
  %cat = llm.concat %t0, %t1 dim = 0 : tensor<8x2x4x8xbf16>, tensor<8x2x4x8xbf16>
  %rot = llm.transpose %cat [1, 2, 3, 0] : tensor<16x2x4x8xbf16>
  %s1 = llm.cast %sin : tensor<1x8x16xf32> to tensor<1x8x16xbf16>
  %s2 = llm.reshape %s1 : tensor<1x8x16xbf16> to tensor<1x1x8x16xbf16>
  %s3 = llm.broadcast %s2 : tensor<1x1x8x16xbf16> to tensor<2x4x8x16xbf16>
  %rs = llm.mul %rot, %s3 : tensor<2x4x8x16xbf16>
  %out = llm.add %qc, %rs : tensor<2x4x8x16xbf16>
  return %out : tensor<2x4x8x16xbf16>
}

// -----

// x already [B, S, H, D] (tables broadcast over dim 2), a direct concat on
// the last dimension, and every operand order swapped: rope on x itself.
// CHECK-LABEL: func.func @bshd_swapped
// CHECK-SAME: (%[[X:.+]]: tensor<2x8x4x16xf32>, %[[C:.+]]: tensor<8x16xf32>, %[[S:.+]]: tensor<8x16xf32>)
// CHECK: %[[R:.+]] = llm.rope %[[X]] cos(%{{.+}} : tensor<1x8x16xf32>) sin(%{{.+}} : tensor<1x8x16xf32>) half_split : tensor<2x8x4x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @bshd_swapped(%x: tensor<2x8x4x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>) -> tensor<2x8x4x16xf32> {
  %c2 = llm.reshape %cos : tensor<8x16xf32> to tensor<8x1x16xf32>
  %c3 = llm.broadcast %c2 : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %hi = llm.slice %x [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %nhi = llm.neg %hi : tensor<2x8x4x8xf32>
  %lo = llm.slice %x [0, 0, 0, 0] to [2, 8, 4, 8] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %rot = llm.concat %nhi, %lo dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %s2 = llm.reshape %sin : tensor<8x16xf32> to tensor<8x1x16xf32>
  %s3 = llm.broadcast %s2 : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %rs = llm.mul %s3, %rot : tensor<2x8x4x16xf32>
  %xc = llm.mul %c3, %x : tensor<2x8x4x16xf32>
  %out = llm.add %rs, %xc : tensor<2x8x4x16xf32>
  return %out : tensor<2x8x4x16xf32>
}

// -----

// Not rotate_half: cat(-x[..., :D/2], x[..., D/2:]) (the halves swapped).
// CHECK-LABEL: func.func @not_rotate_half
// CHECK-NOT: llm.rope
func.func @not_rotate_half(%x: tensor<2x8x4x16xf32>, %cos: tensor<8x1x16xf32>, %sin: tensor<8x1x16xf32>) -> tensor<2x8x4x16xf32> {
  %c3 = llm.broadcast %cos : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %lo = llm.slice %x [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %nlo = llm.neg %lo : tensor<2x8x4x8xf32>
  %hi = llm.slice %x [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %rot = llm.concat %nlo, %hi dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %s3 = llm.broadcast %sin : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %xc = llm.mul %x, %c3 : tensor<2x8x4x16xf32>
  %rs = llm.mul %rot, %s3 : tensor<2x8x4x16xf32>
  %out = llm.add %xc, %rs : tensor<2x8x4x16xf32>
  return %out : tensor<2x8x4x16xf32>
}

// -----

// The rotated value is of another tensor than the one times cos.
// CHECK-LABEL: func.func @different_x
// CHECK-NOT: llm.rope
func.func @different_x(%x: tensor<2x8x4x16xf32>, %z: tensor<2x8x4x16xf32>, %cos: tensor<8x1x16xf32>, %sin: tensor<8x1x16xf32>) -> tensor<2x8x4x16xf32> {
  %c3 = llm.broadcast %cos : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %hi = llm.slice %z [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %nhi = llm.neg %hi : tensor<2x8x4x8xf32>
  %lo = llm.slice %z [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %rot = llm.concat %nhi, %lo dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %s3 = llm.broadcast %sin : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %xc = llm.mul %x, %c3 : tensor<2x8x4x16xf32>
  %rs = llm.mul %rot, %s3 : tensor<2x8x4x16xf32>
  %out = llm.add %xc, %rs : tensor<2x8x4x16xf32>
  return %out : tensor<2x8x4x16xf32>
}

// -----

// Tables that vary per head (not broadcast over the head dimension) are not
// RoPE tables.
// CHECK-LABEL: func.func @per_head_tables
// CHECK-NOT: llm.rope
func.func @per_head_tables(%x: tensor<2x8x4x16xf32>, %cos: tensor<8x4x16xf32>, %sin: tensor<8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  %c3 = llm.broadcast %cos : tensor<8x4x16xf32> to tensor<2x8x4x16xf32>
  %hi = llm.slice %x [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %nhi = llm.neg %hi : tensor<2x8x4x8xf32>
  %lo = llm.slice %x [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %rot = llm.concat %nhi, %lo dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %s3 = llm.broadcast %sin : tensor<8x4x16xf32> to tensor<2x8x4x16xf32>
  %xc = llm.mul %x, %c3 : tensor<2x8x4x16xf32>
  %rs = llm.mul %rot, %s3 : tensor<2x8x4x16xf32>
  %out = llm.add %xc, %rs : tensor<2x8x4x16xf32>
  return %out : tensor<2x8x4x16xf32>
}

// -----

// q*cos is also returned: the decomposed ops must stay, so nothing is raised.
// CHECK-LABEL: func.func @partial_product_escapes
// CHECK-NOT: llm.rope
func.func @partial_product_escapes(%x: tensor<2x8x4x16xf32>, %cos: tensor<8x1x16xf32>, %sin: tensor<8x1x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) {
  %c3 = llm.broadcast %cos : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %hi = llm.slice %x [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %nhi = llm.neg %hi : tensor<2x8x4x8xf32>
  %lo = llm.slice %x [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %rot = llm.concat %nhi, %lo dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %s3 = llm.broadcast %sin : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %xc = llm.mul %x, %c3 : tensor<2x8x4x16xf32>
  %rs = llm.mul %rot, %s3 : tensor<2x8x4x16xf32>
  %out = llm.add %xc, %rs : tensor<2x8x4x16xf32>
  return %out, %xc : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
}

// -----

// Not raised: one cos table per batch ([2, 1, S, D]) but one sin table for
// all ([1, 1, S, D]); llm.rope takes cos and sin of one type. The pattern
// used to build the tables' reshapes before finding that out, so every
// greedy iteration changed the IR and the pass failed (no convergence).
// CHECK-LABEL: func.func @tables_of_different_batch
// CHECK-NOT: llm.rope
// CHECK: return
func.func @tables_of_different_batch(%y: tensor<2x8x4x16xf32>, %cos: tensor<2x8x16xf32>, %sin: tensor<1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %q = llm.transpose %y [0, 2, 1, 3] : tensor<2x8x4x16xf32>
  %c2 = llm.reshape %cos : tensor<2x8x16xf32> to tensor<2x1x8x16xf32>
  %c3 = llm.broadcast %c2 : tensor<2x1x8x16xf32> to tensor<2x4x8x16xf32>
  %qc = llm.mul %q, %c3 : tensor<2x4x8x16xf32>
  %hi = llm.slice %q [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x4x8x16xf32>
  %nhi = llm.neg %hi : tensor<2x4x8x8xf32>
  %lo = llm.slice %q [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x4x8x16xf32>
  %rot = llm.concat %nhi, %lo dim = 3 : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
  %s2 = llm.reshape %sin : tensor<1x8x16xf32> to tensor<1x1x8x16xf32>
  %s3 = llm.broadcast %s2 : tensor<1x1x8x16xf32> to tensor<2x4x8x16xf32>
  %rs = llm.mul %rot, %s3 : tensor<2x4x8x16xf32>
  %out = llm.add %qc, %rs : tensor<2x4x8x16xf32>
  return %out : tensor<2x4x8x16xf32>
}

// -----

// RoPE's backward as AOTAutograd writes it for the gradient %g of q_embed
// [B, H, S, D]: g*cos + rotate_half^T(g*sin), the transposed rotation
// spelled as two slice_scatter's into zeros (a zero half concatenated, in
// the transpose / outer concat / transpose spelling, with -m[..., :D/2] and
// with m[..., D/2:]). It becomes llm.rope on g transposed to [B, S, H, D]
// with the cosine table and the sine table's halves swapped and negated.
// CHECK-LABEL: func.func @hf_backward
// CHECK-SAME: (%[[G:.+]]: tensor<2x4x8x16xf32>, %[[C:.+]]: tensor<1x8x16xf32>, %[[S:.+]]: tensor<1x8x16xf32>)
// CHECK-DAG: %[[SHI:.+]] = llm.slice %[[S]] [0, 0, 8] to [-1, -1, 16] step [1, 1, 1] : tensor<1x8x16xf32>
// CHECK-DAG: %[[THI:.+]] = llm.transpose %[[SHI]] [2, 0, 1] : tensor<1x8x8xf32>
// CHECK-DAG: %[[SLO:.+]] = llm.slice %[[S]] [0, 0, 0] to [-1, -1, 8] step [1, 1, 1] : tensor<1x8x16xf32>
// CHECK-DAG: %[[TLO:.+]] = llm.transpose %[[SLO]] [2, 0, 1] : tensor<1x8x8xf32>
// CHECK: %[[CAT:.+]] = llm.concat %[[THI]], %[[TLO]] dim = 0 : tensor<8x1x8xf32>, tensor<8x1x8xf32>
// CHECK: %[[SW:.+]] = llm.transpose %[[CAT]] [1, 2, 0] : tensor<16x1x8xf32>
// CHECK: %[[NS:.+]] = llm.neg %[[SW]] : tensor<1x8x16xf32>
// CHECK: %[[GT:.+]] = llm.transpose %[[G]] [0, 2, 1, 3] : tensor<2x4x8x16xf32>
// CHECK: %[[R:.+]] = llm.rope %[[GT]] cos(%{{.+}} : tensor<1x8x16xf32>) sin(%[[NS]] : tensor<1x8x16xf32>) half_split : tensor<2x8x4x16xf32>
// CHECK: %[[OUT:.+]] = llm.transpose %[[R]] [0, 2, 1, 3] : tensor<2x8x4x16xf32>
// CHECK: return %[[OUT]]
func.func @hf_backward(%g: tensor<2x4x8x16xf32>, %cos: tensor<1x8x16xf32>, %sin: tensor<1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %c4 = llm.reshape %cos : tensor<1x8x16xf32> to tensor<1x1x8x16xf32>
  %cb = llm.broadcast %c4 : tensor<1x1x8x16xf32> to tensor<2x4x8x16xf32>
  %s4 = llm.reshape %sin : tensor<1x8x16xf32> to tensor<1x1x8x16xf32>
  %sb = llm.broadcast %s4 : tensor<1x1x8x16xf32> to tensor<2x4x8x16xf32>
  %m = llm.mul %g, %sb : tensor<2x4x8x16xf32>
  %z0 = llm.constant dense<0.0> : tensor<2x4x8x16xf32>
  %z0lo = llm.slice %z0 [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x4x8x16xf32>
  %tz0 = llm.transpose %z0lo [3, 0, 1, 2] : tensor<2x4x8x8xf32>
  %mlo = llm.slice %m [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x4x8x16xf32>
  %nlo = llm.neg %mlo : tensor<2x4x8x8xf32>
  %tn = llm.transpose %nlo [3, 0, 1, 2] : tensor<2x4x8x8xf32>
  %cata = llm.concat %tz0, %tn dim = 0 : tensor<8x2x4x8xf32>, tensor<8x2x4x8xf32>
  %a = llm.transpose %cata [1, 2, 3, 0] : tensor<16x2x4x8xf32>
  %mhi = llm.slice %m [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x4x8x16xf32>
  %tm = llm.transpose %mhi [3, 0, 1, 2] : tensor<2x4x8x8xf32>
  %z1 = llm.constant dense<0.0> : tensor<2x4x8x16xf32>
  %z1hi = llm.slice %z1 [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x4x8x16xf32>
  %tz1 = llm.transpose %z1hi [3, 0, 1, 2] : tensor<2x4x8x8xf32>
  %catb = llm.concat %tm, %tz1 dim = 0 : tensor<8x2x4x8xf32>, tensor<8x2x4x8xf32>
  %bb = llm.transpose %catb [1, 2, 3, 0] : tensor<16x2x4x8xf32>
  %rot = llm.add %a, %bb : tensor<2x4x8x16xf32>
  %gc = llm.mul %g, %cb : tensor<2x4x8x16xf32>
  %out = llm.add %gc, %rot : tensor<2x4x8x16xf32>
  return %out : tensor<2x4x8x16xf32>
}

// -----

// Not the backward: the halves filled with ones, not zeros (cat(1, -m_lo) +
// cat(m_hi, 1)), and a direct last-dim concat; nothing is raised.
// CHECK-LABEL: func.func @backward_not_zero_fill
// CHECK-NOT: llm.rope
func.func @backward_not_zero_fill(%g: tensor<2x8x4x16xf32>, %cos: tensor<8x1x16xf32>, %sin: tensor<8x1x16xf32>) -> tensor<2x8x4x16xf32> {
  %cb = llm.broadcast %cos : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %sb = llm.broadcast %sin : tensor<8x1x16xf32> to tensor<2x8x4x16xf32>
  %m = llm.mul %g, %sb : tensor<2x8x4x16xf32>
  %one = llm.constant dense<1.0> : tensor<2x8x4x8xf32>
  %mlo = llm.slice %m [0, 0, 0, 0] to [-1, -1, -1, 8] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %nlo = llm.neg %mlo : tensor<2x8x4x8xf32>
  %a = llm.concat %one, %nlo dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %mhi = llm.slice %m [0, 0, 0, 8] to [-1, -1, -1, 16] step [1, 1, 1, 1] : tensor<2x8x4x16xf32>
  %one2 = llm.constant dense<1.0> : tensor<2x8x4x8xf32>
  %bb = llm.concat %mhi, %one2 dim = 3 : tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>
  %rot = llm.add %a, %bb : tensor<2x8x4x16xf32>
  %gc = llm.mul %g, %cb : tensor<2x8x4x16xf32>
  %out = llm.add %gc, %rot : tensor<2x8x4x16xf32>
  return %out : tensor<2x8x4x16xf32>
}
