// Results whose storage is a lazy view seen through reshapes: GQA's repeat_kv
// (reshape(broadcast(reshape(k)))) as AOTAutograd saves it for the backward
// pass, a transpose seen through a reshape, a slice then reshape, a bare
// broadcast and a result returned twice. Found by the torch.compile training
// step on the GPU: such a result was never written (every output must be).
// RUN: llmc-compile %s --arch=sm_90a --print-stats | FileCheck %s
// CHECK: kernel launches
// ARGS: --seed=7
func.func @view_results(%k: tensor<2x2x9x16xf32>, %w: tensor<32x64xf32>,
                        %x: tensor<2x9x64xbf16>)
    -> (tensor<2x4x9x16xf32>, tensor<2048xf32>, tensor<2x9x2x16xbf16>,
        tensor<3x2x2x9x16xf32>, tensor<2x4x9x16xf32>) {
  %0 = llm.reshape %k : tensor<2x2x9x16xf32> to tensor<2x2x1x9x16xf32>
  %1 = llm.broadcast %0 : tensor<2x2x1x9x16xf32> to tensor<2x2x2x9x16xf32>
  %2 = llm.reshape %1 : tensor<2x2x2x9x16xf32> to tensor<2x4x9x16xf32>
  %3 = llm.transpose %w [1, 0] : tensor<32x64xf32>
  %4 = llm.reshape %3 : tensor<64x32xf32> to tensor<2048xf32>
  %5 = llm.slice %x [0, 0, 16] to [-1, -1, 48] step [1, 1, 1] : tensor<2x9x64xbf16>
  %6 = llm.reshape %5 : tensor<2x9x32xbf16> to tensor<2x9x2x16xbf16>
  %7 = llm.broadcast %k : tensor<2x2x9x16xf32> to tensor<3x2x2x9x16xf32>
  return %2, %4, %6, %7, %2 : tensor<2x4x9x16xf32>, tensor<2048xf32>, tensor<2x9x2x16xbf16>, tensor<3x2x2x9x16xf32>, tensor<2x4x9x16xf32>
}
