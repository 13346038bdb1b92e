// LLaMA-2-7B (32 heads) and Mistral (32 query / 8 KV heads) blocks, 2, 4 and 8 ways.
// RUN: llmc-opt --llmc-shard="tp=2 rank=1" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s --check-prefix=L2
// RUN: llmc-opt --llmc-shard="tp=4 rank=3" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s --check-prefix=L4
// RUN: llmc-opt --llmc-shard="tp=8 rank=0" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s --check-prefix=L8
// RUN: llmc-opt --llmc-shard="tp=2 rank=0" %llmc_src_root/examples/mistral_gqa_block.mlir | FileCheck %s --check-prefix=M2
// RUN: llmc-opt --llmc-shard="tp=4 rank=1" %llmc_src_root/examples/mistral_gqa_block.mlir | FileCheck %s --check-prefix=M4
// RUN: llmc-opt --llmc-shard="tp=8 rank=7" %llmc_src_root/examples/mistral_gqa_block.mlir | FileCheck %s --check-prefix=M8
//
// tp=1 (the default) leaves the IR unchanged.
// RUN: llmc-opt %llmc_src_root/examples/llama2_7b_block.mlir -o %t.before.mlir
// RUN: llmc-opt --llmc-shard %llmc_src_root/examples/llama2_7b_block.mlir -o %t.default.mlir
// RUN: llmc-opt --llmc-shard="tp=1 rank=0" %llmc_src_root/examples/llama2_7b_block.mlir -o %t.tp1.mlir
// RUN: diff %t.before.mlir %t.default.mlir
// RUN: diff %t.before.mlir %t.tp1.mlir
//
// The cases of this file, as rank 1 and rank 0 of 2 (biases, layouts, diagnostics).
// RUN: llmc-opt --split-input-file --verify-diagnostics --llmc-shard="tp=2 rank=1" %s | FileCheck %s
// RUN: llmc-opt --split-input-file --verify-diagnostics --llmc-shard="tp=2 rank=0" %s | FileCheck %s --check-prefix=RANK0
//
// Options out of range, tiny_llama's 2 KV heads 4 ways, a KV-cache decode step.
// RUN: not llmc-opt --llmc-shard="tp=2 rank=2" %llmc_src_root/examples/tiny_llama_block.mlir 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not llmc-opt --llmc-shard="tp=4 rank=0" %llmc_src_root/examples/tiny_llama_block.mlir 2>&1 | FileCheck %s --check-prefix=KV
// RUN: not llmc-opt --llmc-shard="tp=2 rank=0" %llmc_src_root/examples/llama2_7b_decode_step.mlir 2>&1 | FileCheck %s --check-prefix=DECODE
// OPT: error: 'func.func' op llmc-shard needs tp >= 1 and 0 <= rank < tp, found tp=2 rank=2
// KV: error: 'llm.attention' op cannot shard 4 query heads and 2 KV heads 4 ways: both head counts must be divisible by tp=4
// DECODE: error: 'llm.attention' op cannot shard: the key comes from a KV cache (llm.kv_cache_append); decode graphs are not supported yet

// L2-LABEL: func.func @llama2_7b_block
// L2: %[[H:[^ ]+]] = llm.rms_norm %arg0, %arg1
// L2: %[[WQ:[^ ]+]] = llm.slice %arg2 [2048, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L2: %[[Q:[^ ]+]] = llm.matmul %[[H]], %[[WQ]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<2048x4096xbf16> -> tensor<1x?x2048xbf16>
// L2: %[[WK:[^ ]+]] = llm.slice %arg3 [2048, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L2: %[[K:[^ ]+]] = llm.matmul %[[H]], %[[WK]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<2048x4096xbf16> -> tensor<1x?x2048xbf16>
// L2: %[[WV:[^ ]+]] = llm.slice %arg4 [2048, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L2: %[[V:[^ ]+]] = llm.matmul %[[H]], %[[WV]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<2048x4096xbf16> -> tensor<1x?x2048xbf16>
// L2: %[[Q4:[^ ]+]] = llm.reshape %[[Q]] : tensor<1x?x2048xbf16> to tensor<1x?x16x128xbf16>
// L2: %[[K4:[^ ]+]] = llm.reshape %[[K]] : tensor<1x?x2048xbf16> to tensor<1x?x16x128xbf16>
// L2: %[[V4:[^ ]+]] = llm.reshape %[[V]] : tensor<1x?x2048xbf16> to tensor<1x?x16x128xbf16>
// L2: %[[QR:[^ ]+]] = llm.rope %[[Q4]] half_split {{.*}}: tensor<1x?x16x128xbf16>
// L2: %[[KR:[^ ]+]] = llm.rope %[[K4]] half_split {{.*}}: tensor<1x?x16x128xbf16>
// L2: %[[A:[^ ]+]] = llm.attention %[[QR]], %[[KR]], %[[V4]] {causal} : tensor<1x?x16x128xbf16>, tensor<1x?x16x128xbf16>, tensor<1x?x16x128xbf16>
// L2: %[[A2:[^ ]+]] = llm.reshape %[[A]] : tensor<1x?x16x128xbf16> to tensor<1x?x2048xbf16>
// L2: %[[WO:[^ ]+]] = llm.slice %arg5 [0, 2048] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L2: %[[O:[^ ]+]] = llm.matmul %[[A2]], %[[WO]] {transpose_rhs} : tensor<1x?x2048xbf16>, tensor<4096x2048xbf16> -> tensor<1x?x4096xbf16>
// L2: %[[OR:[^ ]+]] = llm.all_reduce %[[O]] sum group_size = 2 : tensor<1x?x4096xbf16>
// L2: %[[R1:[^ ]+]] = llm.add %arg0, %[[OR]] : tensor<1x?x4096xbf16>
// L2: %[[H2:[^ ]+]] = llm.rms_norm %[[R1]], %arg6
// L2: %[[WG:[^ ]+]] = llm.slice %arg7 [5504, 0] to [11008, 4096] step [1, 1] : tensor<11008x4096xbf16>
// L2: %[[G:[^ ]+]] = llm.matmul %[[H2]], %[[WG]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<5504x4096xbf16> -> tensor<1x?x5504xbf16>
// L2: %[[WU:[^ ]+]] = llm.slice %arg8 [5504, 0] to [11008, 4096] step [1, 1] : tensor<11008x4096xbf16>
// L2: %[[U:[^ ]+]] = llm.matmul %[[H2]], %[[WU]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<5504x4096xbf16> -> tensor<1x?x5504xbf16>
// L2: %[[S:[^ ]+]] = llm.silu %[[G]] : tensor<1x?x5504xbf16>
// L2: %[[M:[^ ]+]] = llm.mul %[[S]], %[[U]] : tensor<1x?x5504xbf16>
// L2: %[[WD:[^ ]+]] = llm.slice %arg9 [0, 5504] to [4096, 11008] step [1, 1] : tensor<4096x11008xbf16>
// L2: %[[DN:[^ ]+]] = llm.matmul %[[M]], %[[WD]] {transpose_rhs} : tensor<1x?x5504xbf16>, tensor<4096x5504xbf16> -> tensor<1x?x4096xbf16>
// L2: %[[DR:[^ ]+]] = llm.all_reduce %[[DN]] sum group_size = 2 : tensor<1x?x4096xbf16>
// L2: %[[OUT:[^ ]+]] = llm.add %[[R1]], %[[DR]] : tensor<1x?x4096xbf16>
// L2: return %[[OUT]] : tensor<1x?x4096xbf16>

// L4-LABEL: func.func @llama2_7b_block
// L4: %[[H:[^ ]+]] = llm.rms_norm %arg0, %arg1
// L4: %[[WQ:[^ ]+]] = llm.slice %arg2 [3072, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L4: %[[Q:[^ ]+]] = llm.matmul %[[H]], %[[WQ]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x?x1024xbf16>
// L4: %[[WK:[^ ]+]] = llm.slice %arg3 [3072, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L4: %[[K:[^ ]+]] = llm.matmul %[[H]], %[[WK]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x?x1024xbf16>
// L4: %[[WV:[^ ]+]] = llm.slice %arg4 [3072, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L4: %[[V:[^ ]+]] = llm.matmul %[[H]], %[[WV]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x?x1024xbf16>
// L4: %[[Q4:[^ ]+]] = llm.reshape %[[Q]] : tensor<1x?x1024xbf16> to tensor<1x?x8x128xbf16>
// L4: %[[K4:[^ ]+]] = llm.reshape %[[K]] : tensor<1x?x1024xbf16> to tensor<1x?x8x128xbf16>
// L4: %[[V4:[^ ]+]] = llm.reshape %[[V]] : tensor<1x?x1024xbf16> to tensor<1x?x8x128xbf16>
// L4: %[[QR:[^ ]+]] = llm.rope %[[Q4]] half_split {{.*}}: tensor<1x?x8x128xbf16>
// L4: %[[KR:[^ ]+]] = llm.rope %[[K4]] half_split {{.*}}: tensor<1x?x8x128xbf16>
// L4: %[[A:[^ ]+]] = llm.attention %[[QR]], %[[KR]], %[[V4]] {causal} : tensor<1x?x8x128xbf16>, tensor<1x?x8x128xbf16>, tensor<1x?x8x128xbf16>
// L4: %[[A2:[^ ]+]] = llm.reshape %[[A]] : tensor<1x?x8x128xbf16> to tensor<1x?x1024xbf16>
// L4: %[[WO:[^ ]+]] = llm.slice %arg5 [0, 3072] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L4: %[[O:[^ ]+]] = llm.matmul %[[A2]], %[[WO]] {transpose_rhs} : tensor<1x?x1024xbf16>, tensor<4096x1024xbf16> -> tensor<1x?x4096xbf16>
// L4: %[[OR:[^ ]+]] = llm.all_reduce %[[O]] sum group_size = 4 : tensor<1x?x4096xbf16>
// L4: %[[R1:[^ ]+]] = llm.add %arg0, %[[OR]] : tensor<1x?x4096xbf16>
// L4: %[[H2:[^ ]+]] = llm.rms_norm %[[R1]], %arg6
// L4: %[[WG:[^ ]+]] = llm.slice %arg7 [8256, 0] to [11008, 4096] step [1, 1] : tensor<11008x4096xbf16>
// L4: %[[G:[^ ]+]] = llm.matmul %[[H2]], %[[WG]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<2752x4096xbf16> -> tensor<1x?x2752xbf16>
// L4: %[[WU:[^ ]+]] = llm.slice %arg8 [8256, 0] to [11008, 4096] step [1, 1] : tensor<11008x4096xbf16>
// L4: %[[U:[^ ]+]] = llm.matmul %[[H2]], %[[WU]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<2752x4096xbf16> -> tensor<1x?x2752xbf16>
// L4: %[[S:[^ ]+]] = llm.silu %[[G]] : tensor<1x?x2752xbf16>
// L4: %[[M:[^ ]+]] = llm.mul %[[S]], %[[U]] : tensor<1x?x2752xbf16>
// L4: %[[WD:[^ ]+]] = llm.slice %arg9 [0, 8256] to [4096, 11008] step [1, 1] : tensor<4096x11008xbf16>
// L4: %[[DN:[^ ]+]] = llm.matmul %[[M]], %[[WD]] {transpose_rhs} : tensor<1x?x2752xbf16>, tensor<4096x2752xbf16> -> tensor<1x?x4096xbf16>
// L4: %[[DR:[^ ]+]] = llm.all_reduce %[[DN]] sum group_size = 4 : tensor<1x?x4096xbf16>
// L4: %[[OUT:[^ ]+]] = llm.add %[[R1]], %[[DR]] : tensor<1x?x4096xbf16>
// L4: return %[[OUT]] : tensor<1x?x4096xbf16>

// L8-LABEL: func.func @llama2_7b_block
// L8: %[[H:[^ ]+]] = llm.rms_norm %arg0, %arg1
// L8: %[[WQ:[^ ]+]] = llm.slice %arg2 [0, 0] to [512, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L8: %[[Q:[^ ]+]] = llm.matmul %[[H]], %[[WQ]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<512x4096xbf16> -> tensor<1x?x512xbf16>
// L8: %[[WK:[^ ]+]] = llm.slice %arg3 [0, 0] to [512, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L8: %[[K:[^ ]+]] = llm.matmul %[[H]], %[[WK]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<512x4096xbf16> -> tensor<1x?x512xbf16>
// L8: %[[WV:[^ ]+]] = llm.slice %arg4 [0, 0] to [512, 4096] step [1, 1] : tensor<4096x4096xbf16>
// L8: %[[V:[^ ]+]] = llm.matmul %[[H]], %[[WV]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<512x4096xbf16> -> tensor<1x?x512xbf16>
// L8: %[[Q4:[^ ]+]] = llm.reshape %[[Q]] : tensor<1x?x512xbf16> to tensor<1x?x4x128xbf16>
// L8: %[[K4:[^ ]+]] = llm.reshape %[[K]] : tensor<1x?x512xbf16> to tensor<1x?x4x128xbf16>
// L8: %[[V4:[^ ]+]] = llm.reshape %[[V]] : tensor<1x?x512xbf16> to tensor<1x?x4x128xbf16>
// L8: %[[QR:[^ ]+]] = llm.rope %[[Q4]] half_split {{.*}}: tensor<1x?x4x128xbf16>
// L8: %[[KR:[^ ]+]] = llm.rope %[[K4]] half_split {{.*}}: tensor<1x?x4x128xbf16>
// L8: %[[A:[^ ]+]] = llm.attention %[[QR]], %[[KR]], %[[V4]] {causal} : tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
// L8: %[[A2:[^ ]+]] = llm.reshape %[[A]] : tensor<1x?x4x128xbf16> to tensor<1x?x512xbf16>
// L8: %[[WO:[^ ]+]] = llm.slice %arg5 [0, 0] to [4096, 512] step [1, 1] : tensor<4096x4096xbf16>
// L8: %[[O:[^ ]+]] = llm.matmul %[[A2]], %[[WO]] {transpose_rhs} : tensor<1x?x512xbf16>, tensor<4096x512xbf16> -> tensor<1x?x4096xbf16>
// L8: %[[OR:[^ ]+]] = llm.all_reduce %[[O]] sum group_size = 8 : tensor<1x?x4096xbf16>
// L8: %[[R1:[^ ]+]] = llm.add %arg0, %[[OR]] : tensor<1x?x4096xbf16>
// L8: %[[H2:[^ ]+]] = llm.rms_norm %[[R1]], %arg6
// L8: %[[WG:[^ ]+]] = llm.slice %arg7 [0, 0] to [1376, 4096] step [1, 1] : tensor<11008x4096xbf16>
// L8: %[[G:[^ ]+]] = llm.matmul %[[H2]], %[[WG]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1376x4096xbf16> -> tensor<1x?x1376xbf16>
// L8: %[[WU:[^ ]+]] = llm.slice %arg8 [0, 0] to [1376, 4096] step [1, 1] : tensor<11008x4096xbf16>
// L8: %[[U:[^ ]+]] = llm.matmul %[[H2]], %[[WU]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1376x4096xbf16> -> tensor<1x?x1376xbf16>
// L8: %[[S:[^ ]+]] = llm.silu %[[G]] : tensor<1x?x1376xbf16>
// L8: %[[M:[^ ]+]] = llm.mul %[[S]], %[[U]] : tensor<1x?x1376xbf16>
// L8: %[[WD:[^ ]+]] = llm.slice %arg9 [0, 0] to [4096, 1376] step [1, 1] : tensor<4096x11008xbf16>
// L8: %[[DN:[^ ]+]] = llm.matmul %[[M]], %[[WD]] {transpose_rhs} : tensor<1x?x1376xbf16>, tensor<4096x1376xbf16> -> tensor<1x?x4096xbf16>
// L8: %[[DR:[^ ]+]] = llm.all_reduce %[[DN]] sum group_size = 8 : tensor<1x?x4096xbf16>
// L8: %[[OUT:[^ ]+]] = llm.add %[[R1]], %[[DR]] : tensor<1x?x4096xbf16>
// L8: return %[[OUT]] : tensor<1x?x4096xbf16>

// M2-LABEL: func.func @mistral_gqa_block
// M2: %[[H:[^ ]+]] = llm.rms_norm %arg0, %arg1
// M2: %[[WQ:[^ ]+]] = llm.slice %arg2 [0, 0] to [2048, 4096] step [1, 1] : tensor<4096x4096xbf16>
// M2: %[[Q:[^ ]+]] = llm.matmul %[[H]], %[[WQ]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<2048x4096xbf16> -> tensor<1x?x2048xbf16>
// M2: %[[WK:[^ ]+]] = llm.slice %arg3 [0, 0] to [512, 4096] step [1, 1] : tensor<1024x4096xbf16>
// M2: %[[K:[^ ]+]] = llm.matmul %[[H]], %[[WK]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<512x4096xbf16> -> tensor<1x?x512xbf16>
// M2: %[[WV:[^ ]+]] = llm.slice %arg4 [0, 0] to [512, 4096] step [1, 1] : tensor<1024x4096xbf16>
// M2: %[[V:[^ ]+]] = llm.matmul %[[H]], %[[WV]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<512x4096xbf16> -> tensor<1x?x512xbf16>
// M2: %[[Q4:[^ ]+]] = llm.reshape %[[Q]] : tensor<1x?x2048xbf16> to tensor<1x?x16x128xbf16>
// M2: %[[K4:[^ ]+]] = llm.reshape %[[K]] : tensor<1x?x512xbf16> to tensor<1x?x4x128xbf16>
// M2: %[[V4:[^ ]+]] = llm.reshape %[[V]] : tensor<1x?x512xbf16> to tensor<1x?x4x128xbf16>
// M2: %[[QR:[^ ]+]] = llm.rope %[[Q4]] half_split {{.*}}: tensor<1x?x16x128xbf16>
// M2: %[[KR:[^ ]+]] = llm.rope %[[K4]] half_split {{.*}}: tensor<1x?x4x128xbf16>
// M2: %[[A:[^ ]+]] = llm.attention %[[QR]], %[[KR]], %[[V4]] {causal} : tensor<1x?x16x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>
// M2: %[[A2:[^ ]+]] = llm.reshape %[[A]] : tensor<1x?x16x128xbf16> to tensor<1x?x2048xbf16>
// M2: %[[WO:[^ ]+]] = llm.slice %arg5 [0, 0] to [4096, 2048] step [1, 1] : tensor<4096x4096xbf16>
// M2: %[[O:[^ ]+]] = llm.matmul %[[A2]], %[[WO]] {transpose_rhs} : tensor<1x?x2048xbf16>, tensor<4096x2048xbf16> -> tensor<1x?x4096xbf16>
// M2: %[[OR:[^ ]+]] = llm.all_reduce %[[O]] sum group_size = 2 : tensor<1x?x4096xbf16>
// M2: %[[R1:[^ ]+]] = llm.add %arg0, %[[OR]] : tensor<1x?x4096xbf16>
// M2: %[[H2:[^ ]+]] = llm.rms_norm %[[R1]], %arg6
// M2: %[[WG:[^ ]+]] = llm.slice %arg7 [0, 0] to [7168, 4096] step [1, 1] : tensor<14336x4096xbf16>
// M2: %[[G:[^ ]+]] = llm.matmul %[[H2]], %[[WG]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<7168x4096xbf16> -> tensor<1x?x7168xbf16>
// M2: %[[WU:[^ ]+]] = llm.slice %arg8 [0, 0] to [7168, 4096] step [1, 1] : tensor<14336x4096xbf16>
// M2: %[[U:[^ ]+]] = llm.matmul %[[H2]], %[[WU]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<7168x4096xbf16> -> tensor<1x?x7168xbf16>
// M2: %[[S:[^ ]+]] = llm.silu %[[G]] : tensor<1x?x7168xbf16>
// M2: %[[M:[^ ]+]] = llm.mul %[[S]], %[[U]] : tensor<1x?x7168xbf16>
// M2: %[[WD:[^ ]+]] = llm.slice %arg9 [0, 0] to [4096, 7168] step [1, 1] : tensor<4096x14336xbf16>
// M2: %[[DN:[^ ]+]] = llm.matmul %[[M]], %[[WD]] {transpose_rhs} : tensor<1x?x7168xbf16>, tensor<4096x7168xbf16> -> tensor<1x?x4096xbf16>
// M2: %[[DR:[^ ]+]] = llm.all_reduce %[[DN]] sum group_size = 2 : tensor<1x?x4096xbf16>
// M2: %[[OUT:[^ ]+]] = llm.add %[[R1]], %[[DR]] : tensor<1x?x4096xbf16>
// M2: return %[[OUT]] : tensor<1x?x4096xbf16>

// M4-LABEL: func.func @mistral_gqa_block
// M4: %[[H:[^ ]+]] = llm.rms_norm %arg0, %arg1
// M4: %[[WQ:[^ ]+]] = llm.slice %arg2 [1024, 0] to [2048, 4096] step [1, 1] : tensor<4096x4096xbf16>
// M4: %[[Q:[^ ]+]] = llm.matmul %[[H]], %[[WQ]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x?x1024xbf16>
// M4: %[[WK:[^ ]+]] = llm.slice %arg3 [256, 0] to [512, 4096] step [1, 1] : tensor<1024x4096xbf16>
// M4: %[[K:[^ ]+]] = llm.matmul %[[H]], %[[WK]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<256x4096xbf16> -> tensor<1x?x256xbf16>
// M4: %[[WV:[^ ]+]] = llm.slice %arg4 [256, 0] to [512, 4096] step [1, 1] : tensor<1024x4096xbf16>
// M4: %[[V:[^ ]+]] = llm.matmul %[[H]], %[[WV]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<256x4096xbf16> -> tensor<1x?x256xbf16>
// M4: %[[Q4:[^ ]+]] = llm.reshape %[[Q]] : tensor<1x?x1024xbf16> to tensor<1x?x8x128xbf16>
// M4: %[[K4:[^ ]+]] = llm.reshape %[[K]] : tensor<1x?x256xbf16> to tensor<1x?x2x128xbf16>
// M4: %[[V4:[^ ]+]] = llm.reshape %[[V]] : tensor<1x?x256xbf16> to tensor<1x?x2x128xbf16>
// M4: %[[QR:[^ ]+]] = llm.rope %[[Q4]] half_split {{.*}}: tensor<1x?x8x128xbf16>
// M4: %[[KR:[^ ]+]] = llm.rope %[[K4]] half_split {{.*}}: tensor<1x?x2x128xbf16>
// M4: %[[A:[^ ]+]] = llm.attention %[[QR]], %[[KR]], %[[V4]] {causal} : tensor<1x?x8x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>
// M4: %[[A2:[^ ]+]] = llm.reshape %[[A]] : tensor<1x?x8x128xbf16> to tensor<1x?x1024xbf16>
// M4: %[[WO:[^ ]+]] = llm.slice %arg5 [0, 1024] to [4096, 2048] step [1, 1] : tensor<4096x4096xbf16>
// M4: %[[O:[^ ]+]] = llm.matmul %[[A2]], %[[WO]] {transpose_rhs} : tensor<1x?x1024xbf16>, tensor<4096x1024xbf16> -> tensor<1x?x4096xbf16>
// M4: %[[OR:[^ ]+]] = llm.all_reduce %[[O]] sum group_size = 4 : tensor<1x?x4096xbf16>
// M4: %[[R1:[^ ]+]] = llm.add %arg0, %[[OR]] : tensor<1x?x4096xbf16>
// M4: %[[H2:[^ ]+]] = llm.rms_norm %[[R1]], %arg6
// M4: %[[WG:[^ ]+]] = llm.slice %arg7 [3584, 0] to [7168, 4096] step [1, 1] : tensor<14336x4096xbf16>
// M4: %[[G:[^ ]+]] = llm.matmul %[[H2]], %[[WG]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<3584x4096xbf16> -> tensor<1x?x3584xbf16>
// M4: %[[WU:[^ ]+]] = llm.slice %arg8 [3584, 0] to [7168, 4096] step [1, 1] : tensor<14336x4096xbf16>
// M4: %[[U:[^ ]+]] = llm.matmul %[[H2]], %[[WU]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<3584x4096xbf16> -> tensor<1x?x3584xbf16>
// M4: %[[S:[^ ]+]] = llm.silu %[[G]] : tensor<1x?x3584xbf16>
// M4: %[[M:[^ ]+]] = llm.mul %[[S]], %[[U]] : tensor<1x?x3584xbf16>
// M4: %[[WD:[^ ]+]] = llm.slice %arg9 [0, 3584] to [4096, 7168] step [1, 1] : tensor<4096x14336xbf16>
// M4: %[[DN:[^ ]+]] = llm.matmul %[[M]], %[[WD]] {transpose_rhs} : tensor<1x?x3584xbf16>, tensor<4096x3584xbf16> -> tensor<1x?x4096xbf16>
// M4: %[[DR:[^ ]+]] = llm.all_reduce %[[DN]] sum group_size = 4 : tensor<1x?x4096xbf16>
// M4: %[[OUT:[^ ]+]] = llm.add %[[R1]], %[[DR]] : tensor<1x?x4096xbf16>
// M4: return %[[OUT]] : tensor<1x?x4096xbf16>

// M8-LABEL: func.func @mistral_gqa_block
// M8: %[[H:[^ ]+]] = llm.rms_norm %arg0, %arg1
// M8: %[[WQ:[^ ]+]] = llm.slice %arg2 [3584, 0] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// M8: %[[Q:[^ ]+]] = llm.matmul %[[H]], %[[WQ]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<512x4096xbf16> -> tensor<1x?x512xbf16>
// M8: %[[WK:[^ ]+]] = llm.slice %arg3 [896, 0] to [1024, 4096] step [1, 1] : tensor<1024x4096xbf16>
// M8: %[[K:[^ ]+]] = llm.matmul %[[H]], %[[WK]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<128x4096xbf16> -> tensor<1x?x128xbf16>
// M8: %[[WV:[^ ]+]] = llm.slice %arg4 [896, 0] to [1024, 4096] step [1, 1] : tensor<1024x4096xbf16>
// M8: %[[V:[^ ]+]] = llm.matmul %[[H]], %[[WV]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<128x4096xbf16> -> tensor<1x?x128xbf16>
// M8: %[[Q4:[^ ]+]] = llm.reshape %[[Q]] : tensor<1x?x512xbf16> to tensor<1x?x4x128xbf16>
// M8: %[[K4:[^ ]+]] = llm.reshape %[[K]] : tensor<1x?x128xbf16> to tensor<1x?x1x128xbf16>
// M8: %[[V4:[^ ]+]] = llm.reshape %[[V]] : tensor<1x?x128xbf16> to tensor<1x?x1x128xbf16>
// M8: %[[QR:[^ ]+]] = llm.rope %[[Q4]] half_split {{.*}}: tensor<1x?x4x128xbf16>
// M8: %[[KR:[^ ]+]] = llm.rope %[[K4]] half_split {{.*}}: tensor<1x?x1x128xbf16>
// M8: %[[A:[^ ]+]] = llm.attention %[[QR]], %[[KR]], %[[V4]] {causal} : tensor<1x?x4x128xbf16>, tensor<1x?x1x128xbf16>, tensor<1x?x1x128xbf16>
// M8: %[[A2:[^ ]+]] = llm.reshape %[[A]] : tensor<1x?x4x128xbf16> to tensor<1x?x512xbf16>
// M8: %[[WO:[^ ]+]] = llm.slice %arg5 [0, 3584] to [4096, 4096] step [1, 1] : tensor<4096x4096xbf16>
// M8: %[[O:[^ ]+]] = llm.matmul %[[A2]], %[[WO]] {transpose_rhs} : tensor<1x?x512xbf16>, tensor<4096x512xbf16> -> tensor<1x?x4096xbf16>
// M8: %[[OR:[^ ]+]] = llm.all_reduce %[[O]] sum group_size = 8 : tensor<1x?x4096xbf16>
// M8: %[[R1:[^ ]+]] = llm.add %arg0, %[[OR]] : tensor<1x?x4096xbf16>
// M8: %[[H2:[^ ]+]] = llm.rms_norm %[[R1]], %arg6
// M8: %[[WG:[^ ]+]] = llm.slice %arg7 [12544, 0] to [14336, 4096] step [1, 1] : tensor<14336x4096xbf16>
// M8: %[[G:[^ ]+]] = llm.matmul %[[H2]], %[[WG]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1792x4096xbf16> -> tensor<1x?x1792xbf16>
// M8: %[[WU:[^ ]+]] = llm.slice %arg8 [12544, 0] to [14336, 4096] step [1, 1] : tensor<14336x4096xbf16>
// M8: %[[U:[^ ]+]] = llm.matmul %[[H2]], %[[WU]] {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<1792x4096xbf16> -> tensor<1x?x1792xbf16>
// M8: %[[S:[^ ]+]] = llm.silu %[[G]] : tensor<1x?x1792xbf16>
// M8: %[[M:[^ ]+]] = llm.mul %[[S]], %[[U]] : tensor<1x?x1792xbf16>
// M8: %[[WD:[^ ]+]] = llm.slice %arg9 [0, 12544] to [4096, 14336] step [1, 1] : tensor<4096x14336xbf16>
// M8: %[[DN:[^ ]+]] = llm.matmul %[[M]], %[[WD]] {transpose_rhs} : tensor<1x?x1792xbf16>, tensor<4096x1792xbf16> -> tensor<1x?x4096xbf16>
// M8: %[[DR:[^ ]+]] = llm.all_reduce %[[DN]] sum group_size = 8 : tensor<1x?x4096xbf16>
// M8: %[[OUT:[^ ]+]] = llm.add %[[R1]], %[[DR]] : tensor<1x?x4096xbf16>
// M8: return %[[OUT]] : tensor<1x?x4096xbf16>

// -----

// A GPT-style MLP in [in, out] layout with biases: the column-parallel bias
// is sliced with its weight; the row-parallel bias is added by rank 0 only.
// CHECK-LABEL: func.func @gelu_mlp_bias
// CHECK-SAME: (%[[X:[^:]+]]: tensor<3x8xf32>, %[[W1:[^:]+]]: tensor<8x32xf32>, %[[B1:[^:]+]]: tensor<32xf32>, %[[W2:[^:]+]]: tensor<32x8xf32>, %[[B2:[^:]+]]: tensor<8xf32>)
// CHECK: %[[W1S:.+]] = llm.slice %[[W1]] [0, 16] to [8, 32] step [1, 1] : tensor<8x32xf32>
// CHECK: %[[B1S:.+]] = llm.slice %[[B1]] [16] to [32] step [1] : tensor<32xf32>
// CHECK: %[[H:.+]] = llm.matmul %[[X]], %[[W1S]] bias %[[B1S]] : tensor<3x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<3x16xf32>
// CHECK: %[[A:.+]] = llm.gelu %[[H]] tanh : tensor<3x16xf32>
// CHECK: %[[W2S:.+]] = llm.slice %[[W2]] [16, 0] to [32, 8] step [1, 1] : tensor<32x8xf32>
// CHECK: %[[Y:.+]] = llm.matmul %[[A]], %[[W2S]] : tensor<3x16xf32>, tensor<16x8xf32> -> tensor<3x8xf32>
// CHECK: %[[R:.+]] = llm.all_reduce %[[Y]] sum group_size = 2 : tensor<3x8xf32>
// CHECK: return %[[R]]
// RANK0-LABEL: func.func @gelu_mlp_bias
// RANK0: llm.slice %{{.+}} [0, 0] to [8, 16] step [1, 1] : tensor<8x32xf32>
// RANK0: llm.slice %{{.+}} [0] to [16] step [1] : tensor<32xf32>
// RANK0: llm.slice %{{.+}} [0, 0] to [16, 8] step [1, 1] : tensor<32x8xf32>
// RANK0: %[[Y:.+]] = llm.matmul %{{.+}}, %{{.+}} bias %{{.+}} : tensor<3x16xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<3x8xf32>
// RANK0: llm.all_reduce %[[Y]] sum group_size = 2 : tensor<3x8xf32>
func.func @gelu_mlp_bias(%x: tensor<3x8xf32>, %w1: tensor<8x32xf32>, %b1: tensor<32xf32>, %w2: tensor<32x8xf32>, %b2: tensor<8xf32>) -> tensor<3x8xf32> {
  %h = llm.matmul %x, %w1 bias %b1 : tensor<3x8xf32>, tensor<8x32xf32>, tensor<32xf32> -> tensor<3x32xf32>
  %a = llm.gelu %h tanh : tensor<3x32xf32>
  %y = llm.matmul %a, %w2 bias %b2 : tensor<3x32xf32>, tensor<32x8xf32>, tensor<8xf32> -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A matmul outside every block (an LM head) stays replicated, with a warning.
// CHECK-LABEL: func.func @mlp_then_head
// CHECK: llm.all_reduce
// CHECK: llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<3x8xf32>, tensor<100x8xf32> -> tensor<3x100xf32>
func.func @mlp_then_head(%x: tensor<3x8xf32>, %w1: tensor<32x8xf32>, %w2: tensor<8x32xf32>, %head: tensor<100x8xf32>) -> tensor<3x100xf32> {
  %h = llm.matmul %x, %w1 {transpose_rhs} : tensor<3x8xf32>, tensor<32x8xf32> -> tensor<3x32xf32>
  %a = llm.relu %h : tensor<3x32xf32>
  %y = llm.matmul %a, %w2 {transpose_rhs} : tensor<3x32xf32>, tensor<8x32xf32> -> tensor<3x8xf32>
  // expected-warning @+1 {{left replicated by llmc-shard: not a projection of an attention or MLP block}}
  %l = llm.matmul %y, %head {transpose_rhs} : tensor<3x8xf32>, tensor<100x8xf32> -> tensor<3x100xf32>
  return %l : tensor<3x100xf32>
}

// -----

// 6 query heads and 3 KV heads do not split 2 ways.
func.func @heads_not_divisible(%x: tensor<1x5x24xf32>, %wq: tensor<24x24xf32>, %wk: tensor<12x24xf32>, %wv: tensor<12x24xf32>, %wo: tensor<24x24xf32>) -> tensor<1x5x24xf32> {
  %q = llm.matmul %x, %wq {transpose_rhs} : tensor<1x5x24xf32>, tensor<24x24xf32> -> tensor<1x5x24xf32>
  %k = llm.matmul %x, %wk {transpose_rhs} : tensor<1x5x24xf32>, tensor<12x24xf32> -> tensor<1x5x12xf32>
  %v = llm.matmul %x, %wv {transpose_rhs} : tensor<1x5x24xf32>, tensor<12x24xf32> -> tensor<1x5x12xf32>
  %q4 = llm.reshape %q : tensor<1x5x24xf32> to tensor<1x5x6x4xf32>
  %k4 = llm.reshape %k : tensor<1x5x12xf32> to tensor<1x5x3x4xf32>
  %v4 = llm.reshape %v : tensor<1x5x12xf32> to tensor<1x5x3x4xf32>
  // expected-error @+1 {{'llm.attention' op cannot shard 6 query heads and 3 KV heads 2 ways: both head counts must be divisible by tp=2}}
  %a = llm.attention %q4, %k4, %v4 {causal} : tensor<1x5x6x4xf32>, tensor<1x5x3x4xf32>, tensor<1x5x3x4xf32>
  %a2 = llm.reshape %a : tensor<1x5x6x4xf32> to tensor<1x5x24xf32>
  %o = llm.matmul %a2, %wo {transpose_rhs} : tensor<1x5x24xf32>, tensor<24x24xf32> -> tensor<1x5x24xf32>
  return %o : tensor<1x5x24xf32>
}

// -----

// RoPE with cos/sin tables (HF apply_rotary_pos_emb) is on the head split's
// path like the theta form: the tables are per position and broadcast over
// heads, so every rank reads them whole and only the rope's type changes.
// CHECK-LABEL: func.func @rope_tables
// CHECK-SAME: %[[COS:[^:]+]]: tensor<5x4xf32>, %[[SIN:[^:]+]]: tensor<5x4xf32>, %[[COSB:[^:]+]]: tensor<1x5x4xbf16>, %[[SINB:[^:]+]]: tensor<1x5x4xbf16>
// CHECK: %[[Q4:.+]] = llm.reshape %{{.+}} : tensor<1x5x8xf32> to tensor<1x5x2x4xf32>
// CHECK: %[[K4:.+]] = llm.reshape %{{.+}} : tensor<1x5x8xf32> to tensor<1x5x2x4xf32>
// CHECK: %[[QR:.+]] = llm.rope %[[Q4]] cos(%[[COS]] : tensor<5x4xf32>) sin(%[[SIN]] : tensor<5x4xf32>) half_split : tensor<1x5x2x4xf32>
// CHECK: %[[KR:.+]] = llm.rope %[[K4]] cos(%[[COSB]] : tensor<1x5x4xbf16>) sin(%[[SINB]] : tensor<1x5x4xbf16>) interleaved : tensor<1x5x2x4xf32>
// CHECK: llm.attention %[[QR]], %[[KR]], %{{.+}} {causal} : tensor<1x5x2x4xf32>, tensor<1x5x2x4xf32>, tensor<1x5x2x4xf32>
// CHECK: llm.all_reduce
func.func @rope_tables(%x: tensor<1x5x16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<16x16xf32>,
                       %cos: tensor<5x4xf32>, %sin: tensor<5x4xf32>, %cosb: tensor<1x5x4xbf16>, %sinb: tensor<1x5x4xbf16>) -> tensor<1x5x16xf32> {
  %q = llm.matmul %x, %wq {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  %k = llm.matmul %x, %wk {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  %v = llm.matmul %x, %wv {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  %q4 = llm.reshape %q : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %k4 = llm.reshape %k : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %v4 = llm.reshape %v : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %qr = llm.rope %q4 cos(%cos : tensor<5x4xf32>) sin(%sin : tensor<5x4xf32>) half_split : tensor<1x5x4x4xf32>
  %kr = llm.rope %k4 cos(%cosb : tensor<1x5x4xbf16>) sin(%sinb : tensor<1x5x4xbf16>) interleaved : tensor<1x5x4x4xf32>
  %a = llm.attention %qr, %kr, %v4 {causal} : tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>
  %a2 = llm.reshape %a : tensor<1x5x4x4xf32> to tensor<1x5x16xf32>
  %o = llm.matmul %a2, %wo {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  return %o : tensor<1x5x16xf32>
}

// -----

// A fused QKV projection (sliced into q, k, v) is not recognized.
func.func @fused_qkv(%x: tensor<1x5x16xf32>, %wqkv: tensor<48x16xf32>, %wo: tensor<16x16xf32>) -> tensor<1x5x16xf32> {
  %qkv = llm.matmul %x, %wqkv {transpose_rhs} : tensor<1x5x16xf32>, tensor<48x16xf32> -> tensor<1x5x48xf32>
  %q = llm.slice %qkv [0, 0, 0] to [-1, -1, 16] step [1, 1, 1] : tensor<1x5x48xf32>
  %k = llm.slice %qkv [0, 0, 16] to [-1, -1, 32] step [1, 1, 1] : tensor<1x5x48xf32>
  %v = llm.slice %qkv [0, 0, 32] to [-1, -1, 48] step [1, 1, 1] : tensor<1x5x48xf32>
  %q4 = llm.reshape %q : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %k4 = llm.reshape %k : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %v4 = llm.reshape %v : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  // expected-error @+1 {{'llm.attention' op cannot shard: the query head split reads 'llm.slice', not an llm.matmul projection (fused QKV projections are not supported)}}
  %a = llm.attention %q4, %k4, %v4 : tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>
  %a2 = llm.reshape %a : tensor<1x5x4x4xf32> to tensor<1x5x16xf32>
  %o = llm.matmul %a2, %wo {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  return %o : tensor<1x5x16xf32>
}

// -----

// The key after RoPE is also returned (as for a KV cache): it would need
// every head, so the attention cannot be sharded.
func.func @key_escapes(%x: tensor<1x5x16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<16x16xf32>) -> (tensor<1x5x16xf32>, tensor<1x5x4x4xf32>) {
  %q = llm.matmul %x, %wq {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  %k = llm.matmul %x, %wk {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  %v = llm.matmul %x, %wv {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  %q4 = llm.reshape %q : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %k4 = llm.reshape %k : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %v4 = llm.reshape %v : tensor<1x5x16xf32> to tensor<1x5x4x4xf32>
  %kr = llm.rope %k4 half_split : tensor<1x5x4x4xf32>
  // expected-error @+1 {{'llm.attention' op cannot shard: the key (or a value on its path from the projection) is also used outside the attention}}
  %a = llm.attention %q4, %kr, %v4 {causal} : tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>, tensor<1x5x4x4xf32>
  %a2 = llm.reshape %a : tensor<1x5x4x4xf32> to tensor<1x5x16xf32>
  %o = llm.matmul %a2, %wo {transpose_rhs} : tensor<1x5x16xf32>, tensor<16x16xf32> -> tensor<1x5x16xf32>
  return %o, %kr : tensor<1x5x16xf32>, tensor<1x5x4x4xf32>
}

// -----

// The SwiGLU gate activation is also returned: it would need an all_gather.
func.func @mlp_value_escapes(%x: tensor<3x8xf32>, %wg: tensor<32x8xf32>, %wu: tensor<32x8xf32>, %wd: tensor<8x32xf32>) -> (tensor<3x8xf32>, tensor<3x32xf32>) {
  %g = llm.matmul %x, %wg {transpose_rhs} : tensor<3x8xf32>, tensor<32x8xf32> -> tensor<3x32xf32>
  %u = llm.matmul %x, %wu {transpose_rhs} : tensor<3x8xf32>, tensor<32x8xf32> -> tensor<3x32xf32>
  // expected-note @+1 {{used here}}
  %s = llm.silu %g : tensor<3x32xf32>
  %m = llm.mul %s, %u : tensor<3x32xf32>
  // expected-error @+1 {{'llm.matmul' op cannot shard the MLP: the result of 'llm.silu' is also used outside the block (it would need an all_gather)}}
  %d = llm.matmul %m, %wd {transpose_rhs} : tensor<3x32xf32>, tensor<8x32xf32> -> tensor<3x8xf32>
  return %d, %s : tensor<3x8xf32>, tensor<3x32xf32>
}

// -----

// An intermediate size that does not divide by tp.
func.func @mlp_not_divisible(%x: tensor<3x8xf32>, %w1: tensor<33x8xf32>, %w2: tensor<8x33xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{'llm.matmul' op cannot shard the MLP input projection: its output size 33 does not divide by tp=2}}
  %h = llm.matmul %x, %w1 {transpose_rhs} : tensor<3x8xf32>, tensor<33x8xf32> -> tensor<3x33xf32>
  %a = llm.silu %h : tensor<3x33xf32>
  %y = llm.matmul %a, %w2 {transpose_rhs} : tensor<3x33xf32>, tensor<8x33xf32> -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// Nothing to shard.
// expected-error @+1 {{'func.func' op found no attention or MLP block to shard 2 ways}}
func.func @nothing(%x: tensor<3x8xf32>, %w: tensor<4x8xf32>) -> tensor<3x4xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<3x8xf32>, tensor<4x8xf32> -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}
