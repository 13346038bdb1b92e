//===- ServingStep.h - the serving step on the reference executor -*- C++ -*-===//
//
// ReferenceStepModel runs a serving-step function (the convention of
// llmc/runtime/ServingStep.h) on the CPU reference executor, over a
// KvPagePool whose pages are in host memory: llmc-serve's --backend=ref, the
// C API's reference engine and the engine's CPU acceptance tests. With a bucketing it pads every batch
// exactly as rt::SessionStepModel does on the GPU (rt::PadStepBatch), so
// the padding is proven on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_REFERENCE_SERVINGSTEP_H
#define LLMC_REFERENCE_SERVINGSTEP_H

#include "llmc/Reference/ReferenceExecutor.h"
#include "llmc/runtime/ServingStep.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <memory>
#include <optional>
#include <vector>

namespace llmc::reference {

/// The page arguments of a serving-step function: the donated arguments
/// 6 .. 6 + 2L - 1 (key then value pages of each layer, [P, page_size,
/// Hkv, D]).
struct ServingStepPages {
  int64_t num_layers = 0;
  int64_t num_pages = 0, page_size = 0, num_kv_heads = 0, head_dim = 0;
  mlir::Type element_type;
  int64_t max_pages = 0;  ///< block-table columns
  int64_t vocab = 0;      ///< logits columns

  /// The options of a KvPagePool holding exactly these pages (copy_page
  /// left to the caller).
  rt::KvPagePoolOptions poolOptions() const;
};

/// Reads the layout of serving-step function `fn` from its signature.
/// InvalidArgument naming the argument and what was expected.
absl::StatusOr<ServingStepPages> readServingStepPages(mlir::func::FuncOp fn);

/// Fills every page of `pool`, whose pages are in host memory, with 0xFF
/// bytes (NaN in f32, bf16 and f16): a row a step reads before any step
/// wrote it turns the logits into NaN instead of reading stale values.
void poisonHostPages(rt::KvPagePool &pool);

class ReferenceStepModel : public rt::StepModel {
public:
  /// `weights`: the arguments from 6 + 2L on. `pool`: pages in host memory,
  /// of the function's page shape with at most its page count (the rest of
  /// the function's pages read NaN). With `bucketing`, every batch is padded
  /// as rt::SessionStepModel pads it (the padding pages reserved in
  /// `pool` here); without, the arrays are the batch's own.
  static absl::StatusOr<std::unique_ptr<ReferenceStepModel>>
  create(mlir::func::FuncOp fn, std::vector<HostTensor> weights,
         rt::KvPagePool *pool, std::optional<rt::StepBucketing> bucketing = std::nullopt);
  ~ReferenceStepModel() override;

  absl::StatusOr<std::vector<std::vector<float>>> Run(const rt::StepBatch &batch,
                                                     rt::KvPagePool &pool) override;
  int64_t steps() const { return steps_; }
  /// The (T, B) each step ran at.
  const std::vector<rt::StepBucket> &shapes() const { return shapes_; }

private:
  ReferenceStepModel() = default;
  mlir::func::FuncOp fn_;
  ServingStepPages layout_;
  std::vector<HostTensor> weights_;
  rt::KvPagePool *pool_ = nullptr;
  std::optional<rt::StepBucketing> bucketing_;
  int64_t paddingSequence_ = -1;
  std::vector<int32_t> paddingPages_;
  int64_t steps_ = 0;
  std::vector<rt::StepBucket> shapes_;
};

} // namespace llmc::reference

#endif // LLMC_REFERENCE_SERVINGSTEP_H
