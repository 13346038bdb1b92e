//===- ExecBuilder.h - the lowering's sink: exec ops, built in order -*- C++ -*-===//
//
// Internal to lib/Compiler. The CUDA lowering (Lowering.h) emits its result
// through this class, which builds one `exec.executable` (dialects/Exec) as
// the lowering goes: the signature (exec.input/exec.output), buffers
// (exec.buffer, numbered in creation order), the kernel table (exec.kernel,
// deduplicated by name) and the launches (exec.launch/gemm/copy/collective)
// in emission order. Launches made while `preparing()` go into the
// parameter-preparation region (exec.prepare), the others after it, so the
// preparation segment is a region of the IR, not a flag on a launch list.
//
// Buffers are referred to by their number while the lowering runs (the
// lowering's maps key on it); operands are exec.buffer values. The arena is
// left unplanned: each arena buffer carries its liveness (`live`, in the
// lowering's launch steps; the preparation's shifted before every per-call
// step) for llmc-plan-arena.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_LIB_COMPILER_EXECBUILDER_H
#define LLMC_LIB_COMPILER_EXECBUILDER_H

#include "Exec/IR/ExecOps.h"
#include "llmc/runtime/Executable.h"

#include "absl/status/statusor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <utility>

namespace llmc::codegen {

/// A buffer and a byte offset into it (an exec op's `%b[offset]` operand).
struct BufferRef {
  int buffer = -1;
  int64_t offset = 0;
};

/// One kernel argument, in kernel-parameter order: a buffer address plus a
/// byte offset, an i32/i64/f32 scalar, or a by-value struct as its bytes
/// (the elementwise kernels' shape struct).
struct KernelArg {
  enum Kind { Buffer, I32, I64, F32, Bytes };
  Kind kind = Buffer;
  BufferRef ref;     // Buffer
  int64_t i = 0;     // I32, I64
  float f = 0;       // F32
  std::string bytes; // Bytes

  static KernelArg buffer(int buffer, int64_t byteOffset = 0) {
    KernelArg a;
    a.ref = {buffer, byteOffset};
    return a;
  }
  static KernelArg i32(int64_t v) { return scalar(I32, v); }
  static KernelArg i64(int64_t v) { return scalar(I64, v); }
  static KernelArg f32(float v) {
    KernelArg a;
    a.kind = F32;
    a.f = v;
    return a;
  }
  static KernelArg struct_(std::string bytes) {
    KernelArg a;
    a.kind = Bytes;
    a.bytes = std::move(bytes);
    return a;
  }

private:
  static KernelArg scalar(Kind kind, int64_t v) {
    KernelArg a;
    a.kind = kind;
    a.i = v;
    return a;
  }
};

/// cuDNN's fused attention attached to a kernel launch (exec.launch's
/// `attention`): [b, s, h, d] row-major Q/K/V/O of `dtype`, and the f32
/// [b, hq, sq] logsumexp `lse` when the launch writes one (buffer -1: none),
/// the kernel staying the runtime's fallback.
///
/// `backward`: cuDNN's SDPA backward, attached to each launch of llmc's
/// backward kernels (they fall back together); q, k, v, o, lse,
/// grad_output read, grad_query/key/value written, row_sum and dq_accum
/// scratch (rt::AttentionSpec).
struct AttentionAttachment {
  BufferRef q, k, v, o, lse;
  bool backward = false;
  BufferRef grad_output, grad_query, grad_key, grad_value, row_sum, dq_accum;
  int64_t b = 0, sq = 0, skv = 0, hq = 0, hkv = 0, d = 0;
  bool causal = false;
  float scale = 1.f;
  rt::DType dtype = rt::DType::bf16;
};

/// The operands of an exec.gemm (row-major D = alpha op(A) op(B) + beta C
/// [+ bias] [activation]; see ExecOps.td). `c`, `bias`, `scale_a` and
/// `scale_b` are absent when their buffer is -1.
struct GemmDesc {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  bool transa = false, transb = false;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  rt::DType dtype_a = rt::DType::bf16, dtype_b = rt::DType::bf16,
            dtype_c = rt::DType::bf16, dtype_d = rt::DType::bf16,
            compute = rt::DType::f32;
  float alpha = 1.f, beta = 0.f;
  exec::Epilogue epilogue = exec::Epilogue::none;
  BufferRef a, b, c, d, bias, scale_a, scale_b;
};

class ExecBuilder {
public:
  /// An empty `exec.executable @name` in `context` (the Exec dialect is
  /// loaded). `prepStepShift` is subtracted from the liveness steps of arena
  /// buffers made while preparing: the preparation runs before every
  /// per-call launch, so its scratch may overlap any per-call buffer.
  ExecBuilder(mlir::MLIRContext &context, llvm::StringRef name, int64_t prepStepShift);

  // --- signature ---
  void addInput(llvm::StringRef name, llvm::ArrayRef<int64_t> shape, rt::DType dtype);
  void addOutput(llvm::StringRef name, llvm::ArrayRef<int64_t> shape, rt::DType dtype);
  void markParameter(int input);
  void setAliasInput(int output, int input);

  // --- buffers (numbered in creation order) ---
  int addIOBuffer(exec::BufferKind kind, int ioIndex); // input or output
  int addArenaBuffer(int64_t bytes, int64_t firstStep, int64_t lastStep);
  int addConstantBuffer(int64_t bytes, llvm::StringRef data);
  int addPersistentBuffer(int64_t bytes);
  /// Turns the arena buffer `id` into a persistent one (a preparation result
  /// that per-call launches read); its liveness goes.
  void makePersistent(int id);

  // --- kernels and launches ---
  /// The kernel table's index of `name`, added with `source` on first use;
  /// `gridDependency`: the kernel waits for the previous launch itself
  /// (exec.kernel's grid_dependency).
  int addKernel(llvm::StringRef name, llvm::StringRef source, bool gridDependency);
  void launch(int kernel, llvm::ArrayRef<int64_t> grid, llvm::ArrayRef<int64_t> block,
              int64_t smem, llvm::ArrayRef<KernelArg> args, llvm::StringRef name,
              const AttentionAttachment *attention = nullptr);
  /// `name` labels the launch in profiles (the op's name).
  void gemm(const GemmDesc &g, llvm::StringRef name);
  void copy(BufferRef src, BufferRef dst, int64_t bytes, llvm::StringRef name);
  void collective(exec::CollectiveKind kind, exec::Reduction reduction, int64_t count,
                  rt::DType dtype, BufferRef send, BufferRef recv, llvm::StringRef name);

  /// Whether launches and arena buffers made now belong to the preparation.
  bool preparing() const { return preparing_; }
  /// Sets preparing() and returns its previous value.
  bool setPreparing(bool on) { return std::exchange(preparing_, on); }

  /// The executable: the preparation region dropped when empty. Internal
  /// error when it does not verify (an output of nonzero size no launch
  /// writes, sections out of order, ...): a bug of the lowering.
  absl::StatusOr<mlir::OwningOpRef<exec::ExecutableOp>> finish();

private:
  mlir::Value value(BufferRef r) { return buffers[r.buffer].getResult(); }
  mlir::IntegerAttr offset(BufferRef r) { return b.getI64IntegerAttr(r.offset); }
  mlir::StringAttr label(llvm::StringRef s) {
    return s.empty() ? mlir::StringAttr() : b.getStringAttr(s);
  }
  int addBuffer(exec::BufferKind kind, int64_t bytes, mlir::IntegerAttr ioIndex,
                mlir::DenseI64ArrayAttr live, mlir::StringAttr data);
  /// Positions `b` where the next launch goes; a preparation launch marks
  /// the inputs among its `reads` parameter.
  void atLaunch(llvm::ArrayRef<mlir::Value> reads);

  mlir::MLIRContext *ctx;
  mlir::OpBuilder b;
  mlir::OwningOpRef<exec::ExecutableOp> exe;
  int64_t prepStepShift;
  bool preparing_ = false;
  llvm::SmallVector<exec::InputOp> inputs;
  llvm::SmallVector<exec::OutputOp> outputs;
  llvm::SmallVector<exec::BufferOp> buffers;
  llvm::SmallVector<exec::KernelOp> kernels;
  llvm::StringMap<int> kernelIndex;
  std::string internalError; // the first, reported by finish()
  exec::PrepareOp prepare;
  // The last op of each section (null while empty): the signature, the
  // buffers, the kernel table. Launches go at the block's end or in prepare.
  mlir::Operation *lastSignature = nullptr, *lastBuffer = nullptr,
                  *lastKernel = nullptr;
};

} // namespace llmc::codegen

#endif // LLMC_LIB_COMPILER_EXECBUILDER_H
