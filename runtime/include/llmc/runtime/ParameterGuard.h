// Once-per-parameter-set execution of an Executable's parameter-preparation
// segment (launches[0, num_prepare_launches): the work that depends on
// parameters only — weight casts, fp8 weight scaling, pads and relayouts of
// weights, weight-only quantization (llm.quantize_weight)).
//
// Guard: pointer identity. The segment runs on the first Run and again
// whenever the device pointer of any input marked `parameter` differs from
// the previous preparation. A caller who overwrites a weight in place (same
// pointer, new values) must call Session::InvalidateParameters() (C API:
// llmc_session_invalidate_parameters) before the next Run; otherwise the
// persistent results (e.g. quantized weights) of the old values are used.
// The same holds for new contents at a reused address: a caller that frees a
// parameter and passes another whose allocation landed at the same pointer
// must invalidate, or keep the old allocation alive until the next Run (what
// the torch.compile plugin does, python/llmc/_capi.py Session).
#ifndef LLMC_RUNTIME_PARAMETERGUARD_H
#define LLMC_RUNTIME_PARAMETERGUARD_H

#include <cstdint>
#include <vector>

#include "llmc/runtime/Executable.h"

namespace llmc::rt {

/// The device pointers of the inputs marked `parameter`, in input order
/// (`input_ptrs` has one pointer per Executable input).
inline std::vector<uint64_t> ParameterKey(const Executable& exe,
                                          const std::vector<uint64_t>& input_ptrs) {
  std::vector<uint64_t> key;
  for (size_t i = 0; i < exe.inputs.size() && i < input_ptrs.size(); ++i)
    if (exe.inputs[i].parameter) key.push_back(input_ptrs[i]);
  return key;
}

/// Decides when the preparation segment must run (see file comment).
class ParameterGuard {
 public:
  /// True before the first preparation, after Invalidate(), or when `key`
  /// (ParameterKey) differs from the last prepared one.
  bool NeedsPrepare(const std::vector<uint64_t>& key) const {
    return !valid_ || key != key_;
  }
  /// Records a successful preparation for `key`.
  void Prepared(std::vector<uint64_t> key) {
    key_ = std::move(key);
    valid_ = true;
  }
  /// Forces the next NeedsPrepare to be true (weights changed in place).
  void Invalidate() { valid_ = false; }

 private:
  bool valid_ = false;
  std::vector<uint64_t> key_;
};

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_PARAMETERGUARD_H
