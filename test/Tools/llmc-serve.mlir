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
// LONG: llmc-serve: error: {{.*}}long.jsonl:1: request 0 needs 72 tokens (prompt + max_new_tokens); the step's block table holds 64 per sequence

// RUN: echo '{"id": 0, "prompt": [1, 200]}' > %t/vocab.jsonl
// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %t/vocab.jsonl 2>&1 | FileCheck %s --check-prefix=VOCAB
// VOCAB: llmc-serve: error: {{.*}}vocab.jsonl:1: {{.*}}97

// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 16 --max-seqs 4 --token-buckets=1,4,2 2>&1 | FileCheck %s --check-prefix=BUCKETS
// BUCKETS: llmc-serve: error: --token-buckets: bucketing.token_buckets: not strictly ascending at index 2 (4 then 2)

// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_serving_step.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl --max-batch-tokens 16 --max-seqs 4 --token-buckets=1,2,8 2>&1 | FileCheck %s --check-prefix=SMALL
// SMALL: llmc-serve: error: --token-buckets: the largest bucket (8) is below --max-batch-tokens (16)

// RUN: not llmc-serve %llmc_src_root/examples/tiny_llama_block.mlir --backend=ref --requests %S/Inputs/serve-requests.jsonl 2>&1 | FileCheck %s --check-prefix=NOTSTEP
// NOTSTEP: llmc-serve: error: serving step @{{.*}}: {{.*}}expected
