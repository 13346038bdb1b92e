// llmc-serve on the CPU reference executor: the tiny LLaMA serving step
// serves a request file with continuous batching. Bucketed padding (the
// GPU's shapes) and unpadded steps give the same tokens; so does a budget
// small enough to chunk every prompt. Bad input is an error naming the line
// or flag.
// RUN: rm -rf %t && mkdir -p %t
// RUN: llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 16 --max-seqs 4 --token-buckets=none --out %t/exact.jsonl --summary %t/exact.json
// RUN: llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 16 --max-seqs 4 --token-buckets=1,2,4,8,16 --out %t/padded.jsonl --summary %t/padded.json
// RUN: llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 4 --max-seqs 2 --out %t/chunked.jsonl --summary %t/chunked.json
// RUN: python3 -c "import json,sys; t=[{d['id']: d['tokens'] for d in map(json.loads, open(sys.argv[1] + f))} for f in ('/exact.jsonl', '/padded.jsonl', '/chunked.jsonl')]; assert t[0] == t[1] == t[2], t; print(sorted(t[0].items()))" %t | FileCheck %s --check-prefix=TOKENS
// RUN: FileCheck %s --check-prefix=SUMMARY < %t/chunked.json

// TOKENS: [(0, [{{[0-9, ]+}}]), (1, [{{[0-9, ]+}}]), (2, [{{[0-9, ]+}}]), (3, [{{[0-9, ]+}}])]
// SUMMARY-DAG: "backend": "ref"
// SUMMARY-DAG: "output_tokens": 22
// SUMMARY-DAG: "failed": 0
// SUMMARY-DAG: "waste_mean":
// SUMMARY-DAG: "peak_used_pages":
// SUMMARY-DAG: "partial_prefills": {{[1-9]}}

// RUN: echo '{"id": 0, "prompt": [1, 2], "max_new_tokens": 3}' > %t/bad.jsonl
// RUN: echo '{"id": 1, "prompt": "hello"}' >> %t/bad.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/bad.jsonl 2>&1 | FileCheck %s --check-prefix=BADLINE
// BADLINE: llmc-serve: error: {{.*}}bad.jsonl:2: "prompt": missing, empty or not an array of token ids

// RUN: echo '{"id": 0, "prompt": [1, 2], "max_new_tokens": 70}' > %t/long.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/long.jsonl 2>&1 | FileCheck %s --check-prefix=LONG
// LONG: llmc-serve: error: {{.*}}long.jsonl:1: request 0 needs 2 + 70 tokens (prompt + max_new_tokens); the step's block table holds 64 per sequence

// RUN: echo '{"id": 0, "prompt": [1, 200]}' > %t/vocab.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/vocab.jsonl 2>&1 | FileCheck %s --check-prefix=VOCAB
// VOCAB: llmc-serve: error: {{.*}}vocab.jsonl:1: {{.*}}97

// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 16 --max-seqs 4 --token-buckets=1,4,2 2>&1 | FileCheck %s --check-prefix=BUCKETS
// BUCKETS: llmc-serve: error: --token-buckets: bucketing.token_buckets: not strictly ascending at index 2 (4 then 2)

// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 16 --max-seqs 4 --token-buckets=1,2,8 2>&1 | FileCheck %s --check-prefix=SMALL
// SMALL: llmc-serve: error: --token-buckets: the largest bucket (8) is below --max-batch-tokens (16)

// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_block.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl 2>&1 | FileCheck %s --check-prefix=NOTSTEP
// NOTSTEP: llmc-serve: error: serving step @{{.*}}: {{.*}}expected

// A request field llmc-serve does not know (a typo would silently mean the
// default), an id given twice, an arrival time out of range:
// RUN: echo '{"id": 0, "prompt": [1], "max_tokens": 4}' > %t/unknown.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/unknown.jsonl 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: llmc-serve: error: {{.*}}unknown.jsonl:1: unknown field "max_tokens"
// RUN: echo '{"id": 3, "prompt": [1]}' > %t/dup.jsonl
// RUN: echo '{"id": 3, "prompt": [2]}' >> %t/dup.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/dup.jsonl --realtime 2>&1 | FileCheck %s --check-prefix=DUP
// DUP: llmc-serve: error: {{.*}}dup.jsonl:2: "id": 3 is also the id of line 1; ids must be unique in the file
// RUN: echo '{"id": 0, "prompt": [1], "arrival_s": 1e300}' > %t/far.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/far.jsonl --realtime 2>&1 | FileCheck %s --check-prefix=FAR
// FAR: llmc-serve: error: {{.*}}far.jsonl:1: "arrival_s": expected seconds in [0, 1e7], found 1e+300

// A bad request leaves no --out file behind; a failed request fails the run.
// RUN: echo '{"id": 0, "prompt": [1, 2]}' > %t/oov.jsonl
// RUN: echo '{"id": 1, "prompt": [97]}' >> %t/oov.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/oov.jsonl --out %t/oov-out.jsonl 2>&1 | FileCheck %s --check-prefix=OOV
// RUN: not test -e %t/oov-out.jsonl
// OOV: llmc-serve: error: {{.*}}oov.jsonl:2: {{.*}}prompt[0]: expected a token in [0, 97), found 97

// Buckets whose padding needs more pages than the block table has columns
// (page size 4, 16 columns: at most 64 padding tokens) are refused before
// serving, naming the padding.
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 128 --max-seqs 4 --token-buckets=1,128 2>&1 | FileCheck %s --check-prefix=PADDING
// PADDING: llmc-serve: error: the token buckets pad a step by up to 126 tokens, which take 32 pages of 4 in one padding sequence; the step's block table has 16 columns

// Functions that break the convention: pages not returned in place, logits
// with static rows, a weight that is no tensor.
// RUN: echo 'func.func @f(%%t: tensor<?xi32> {llm.dim_names = ["tokens"]}, %%p: tensor<?xi32> {llm.dim_names = ["tokens"]}, %%c: tensor<?xi32> {llm.dim_names = ["seqs_plus_one"]}, %%s: tensor<?xi32> {llm.dim_names = ["seqs"]}, %%b: tensor<?x4xi32> {llm.dim_names = ["seqs"]}, %%r: tensor<?xi32> {llm.dim_names = ["logit_rows"]}, %%k: tensor<8x4x1x4xf32> {llm.donate}, %%v: tensor<8x4x1x4xf32> {llm.donate}, %%w: tensor<64x8xf32>) -> (tensor<?x8xf32>, tensor<8x4x1x4xf32>, tensor<8x4x1x4xf32>) { %%l = llm.gather %%w, %%r axis = 0 : tensor<64x8xf32>, tensor<?xi32> return %%l, %%k, %%v : tensor<?x8xf32>, tensor<8x4x1x4xf32>, tensor<8x4x1x4xf32> }' | sed 's/%%/%/g' > %t/noalias.mlir
// RUN: not llmc-serve %t/noalias.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 4 --max-seqs 2 2>&1 | FileCheck %s --check-prefix=NOALIAS
// NOALIAS: llmc-serve: error: serving step @f: argument 6 (page tensor) must be returned in place as result 1 (llm.aliasing_output = 1
