#!/usr/bin/env bash
# The main job: compile the bundled LLaMA-2-7B decoder block (bf16, seq 2048)
# to an Executable with every kernel built by NVRTC for sm_90a; when a GPU is
# present, run it, check it against an unfused float32 run of the same graph
# and time it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${LLMC_BIN:-build/bin}"
SEQ="${SEQ:-2048}"
mkdir -p build
"$BIN/llmc-compile" examples/llama2_7b_block.mlir --shape seq="$SEQ" \
  --arch=sm_90a --print-stats -o build/llama2_7b_block.llmcx
echo "wrote build/llama2_7b_block.llmcx"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$BIN/llmc-run" examples/llama2_7b_block.mlir --shape seq="$SEQ" --check=gpu-f32 --bench
else
  echo "no GPU found: compiled only (run this script on a machine with an NVIDIA GPU to execute it)"
fi
