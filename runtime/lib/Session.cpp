#include "llmc/runtime/Session.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/Communicator.h"
#include "llmc/runtime/CudnnAttention.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/ParameterGuard.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

#define CU_CALL(fn, ...) LLMC_VENDOR_CALL(*driver_, fn, __VA_ARGS__)

// ---------------------------------------------------------------------------
// Signature checks
// ---------------------------------------------------------------------------
namespace {
std::string Describe(DType t, const std::vector<int64_t>& shape) {
  return absl::StrCat(DTypeName(t), "[", absl::StrJoin(shape, ","), "]");
}
}  // namespace

absl::Status CheckTensors(const std::vector<TensorSig>& sigs,
                          const std::vector<DeviceTensor>& tensors,
                          const char* what) {
  if (sigs.size() != tensors.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", sigs.size(), " ", what, "s, got ", tensors.size()));
  for (size_t i = 0; i < sigs.size(); ++i) {
    const TensorSig& s = sigs[i];
    const DeviceTensor& t = tensors[i];
    if (t.dtype != s.dtype || t.shape != s.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", s.name, "' (#", i, "): expected ",
          Describe(s.dtype, s.shape), ", got ", Describe(t.dtype, t.shape)));
    if (t.dptr == 0 && s.Bytes() > 0)
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", s.name, "' (#", i, ") has a null pointer"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Collective dependencies
// ---------------------------------------------------------------------------
namespace {

/// A byte range of one memory space: the arena, or one input / output /
/// constant tensor.
struct Region {
  std::pair<int, int> space;  // (0 arena | 1 input | 2 output | 3 constant, index)
  int64_t lo = 0, hi = 0;
  bool write = false;
};

void AddRegion(const Executable& exe, int buffer, bool write,
               std::vector<Region>* out) {
  if (buffer < 0 || buffer >= static_cast<int>(exe.buffers.size())) return;
  const Buffer& b = exe.buffers[buffer];
  Region r;
  r.write = write;
  switch (b.kind) {
    case Buffer::Arena:
      r.space = {0, 0};
      r.lo = b.arena_offset;
      r.hi = b.arena_offset + b.bytes;
      break;
    case Buffer::Input:
      r.space = {1, b.io_index};
      r.hi = b.bytes;
      break;
    case Buffer::Output: {
      int alias = b.io_index >= 0 && b.io_index < static_cast<int>(exe.outputs.size())
                      ? exe.outputs[b.io_index].alias_input
                      : -1;
      r.space = alias >= 0 ? std::make_pair(1, alias) : std::make_pair(2, b.io_index);
      r.hi = b.bytes;
      break;
    }
    case Buffer::Constant:
    case Buffer::Persistent:
      r.space = {3, b.id};
      r.hi = b.bytes;
      break;
  }
  // Zero-sized tensors still get a one-byte range: cheap and conservative.
  r.hi = std::max(r.hi, r.lo + 1);
  out->push_back(r);
}

std::vector<Region> RegionsOf(const Executable& exe, const Launch& l) {
  std::vector<Region> out;
  switch (l.kind) {
    case Launch::Kernel:
      for (const Arg& a : l.args)
        if (a.kind == Arg::BufferPtr) AddRegion(exe, a.buffer, true, &out);
      break;
    case Launch::Gemm: {
      const GemmSpec& g = exe.gemms[l.gemm];
      for (const BufferRef* r : {&g.a, &g.b, &g.c, &g.bias, &g.scale_a, &g.scale_b})
        AddRegion(exe, r->buffer, false, &out);
      AddRegion(exe, g.d.buffer, true, &out);
      break;
    }
    case Launch::Collective: {
      const CollectiveSpec& c = exe.collectives[l.collective];
      AddRegion(exe, c.send.buffer, false, &out);
      AddRegion(exe, c.recv.buffer, true, &out);
      break;
    }
    case Launch::Copy:
      AddRegion(exe, l.src.buffer, false, &out);
      AddRegion(exe, l.dst.buffer, true, &out);
      break;
  }
  return out;
}

bool Conflict(const std::vector<Region>& a, const std::vector<Region>& b) {
  for (const Region& x : a)
    for (const Region& y : b)
      if ((x.write || y.write) && x.space == y.space && x.lo < y.hi && y.lo < x.hi)
        return true;
  return false;
}

}  // namespace

std::vector<std::vector<int>> PlanCollectiveJoins(const Executable& exe) {
  std::vector<std::vector<int>> joins(exe.launches.size());
  for (size_t j = 0; j < exe.launches.size(); ++j) {
    if (exe.launches[j].kind != Launch::Collective) continue;
    std::vector<Region> mine = RegionsOf(exe, exe.launches[j]);
    for (size_t i = j + 1; i < exe.launches.size(); ++i) {
      if (exe.launches[i].kind == Launch::Collective) continue;
      if (Conflict(mine, RegionsOf(exe, exe.launches[i]))) {
        joins[i].push_back(static_cast<int>(j));
        break;
      }
    }
  }
  return joins;
}

// ---------------------------------------------------------------------------
// Session internals
// ---------------------------------------------------------------------------
namespace {

absl::StatusOr<cudaDataType_t> CudaType(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    case DType::f8e5m2: return CUDA_R_8F_E5M2;
    case DType::i8: return CUDA_R_8I;
    case DType::i32: return CUDA_R_32I;
    default:
      return absl::UnimplementedError(
          absl::StrCat("dtype ", DTypeName(t), " is not supported by cuBLASLt"));
  }
}

absl::StatusOr<ncclDataType_t> NcclType(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::f8e4m3: return ncclFloat8e4m3;
    case DType::f8e5m2: return ncclFloat8e5m2;
    case DType::i8: return ncclInt8;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default:
      return absl::UnimplementedError(
          absl::StrCat("dtype ", DTypeName(t), " is not supported by NCCL"));
  }
}

bool IsFp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

}  // namespace

struct Session::Impl {
  const CudaDriver* driver_ = nullptr;
  const CublasLt* lt = nullptr;
  const Nccl* nccl = nullptr;
  MemoryPool* pool = nullptr;
  std::vector<CUmodule> modules;
  std::vector<CUfunction> functions;
  std::vector<PooledBuffer> constants;  // by buffer id (empty if not constant)
                                        // (also Persistent buffers)
  ParameterGuard parameters;            // when to run the preparation segment
  PooledBuffer arena, workspace;
  cublasLtHandle_t lt_handle = nullptr;
  std::vector<GemmPlan> gemms;
  // Instantiated CUDA graphs by input/output pointer key, least recently
  // used first out (SessionOptions::use_cuda_graphs).
  struct CachedGraph {
    std::vector<uint64_t> key;
    CUgraphExec exec = nullptr;
    uint64_t last_use = 0;
  };
  std::vector<CachedGraph> graphs;
  uint64_t graph_clock = 0;
  uint32_t graph_history = 0;  // cache misses of the last 32 graph runs
  // Graph runs for callers on the legacy default stream: a private stream
  // and the events that order it after / before the caller's work.
  CUstream graph_stream = nullptr;
  CUevent graph_fork = nullptr, graph_join = nullptr;
  std::vector<uint64_t> base;  // per buffer, resolved each run
  // Collectives: the communicator, the communication stream, per Collective
  // launch a fork event (compute -> comm) and a done event (comm -> compute),
  // and the joins each launch needs (PlanCollectiveJoins).
  ncclComm_t comm = nullptr;
  CUstream comm_stream = nullptr;
  std::map<int, std::pair<CUevent, CUevent>> collective_events;
  std::vector<std::vector<int>> joins;
  std::vector<int> pending;  // Collective launches not yet joined this run
  // cuDNN alternatives of attention kernels (Launch::attention); null: none.
  std::unique_ptr<CudnnAttentionRunner> attention;

  ~Impl() {
    attention.reset();
    for (CachedGraph& g : graphs)
      if (g.exec) driver_->cuGraphExecDestroy(g.exec);
    if (graph_fork) driver_->cuEventDestroy(graph_fork);
    if (graph_join) driver_->cuEventDestroy(graph_join);
    if (graph_stream) driver_->cuStreamDestroy(graph_stream);
    for (auto& [i, ev] : collective_events) {
      if (ev.first) driver_->cuEventDestroy(ev.first);
      if (ev.second) driver_->cuEventDestroy(ev.second);
    }
    if (comm_stream) driver_->cuStreamDestroy(comm_stream);
    for (GemmPlan& g : gemms) {
      if (g.desc) lt->cublasLtMatmulDescDestroy(g.desc);
      for (auto* l : {g.a, g.b, g.c, g.d})
        if (l) lt->cublasLtMatrixLayoutDestroy(l);
    }
    if (lt_handle) lt->cublasLtDestroy(lt_handle);
    for (CUmodule m : modules) driver_->cuModuleUnload(m);
  }

  absl::Status PlanGemm(const GemmSpec& g, size_t workspace_bytes,
                        GemmPlan* plan);
  absl::Status Enqueue(const Executable& exe, const Launch& l, CUstream stream);
  /// Enqueues launch `i` on `stream`, first joining the collectives it
  /// depends on; a collective is forked onto the communication stream (and
  /// joined at once when `join_now`, for per-launch timing).
  absl::Status EnqueueAt(const Executable& exe, size_t i, CUstream stream,
                         bool join_now);
  absl::Status Join(int launch, CUstream stream);
  /// Joins every collective still pending (end of a run).
  absl::Status JoinAll(CUstream stream);
};

#undef CU_CALL
#define CU_CALL(fn, ...) LLMC_VENDOR_CALL(*driver_, fn, __VA_ARGS__)
#define LT_CALL(fn, ...) LLMC_VENDOR_CALL(*lt, fn, __VA_ARGS__)

absl::Status Session::Impl::PlanGemm(const GemmSpec& g, size_t workspace_bytes,
                                     GemmPlan* p) {
  if (g.compute != DType::f32)
    return absl::UnimplementedError("only f32 GEMM accumulation is supported");
  bool fp8 = IsFp8(g.dtype_a) || IsFp8(g.dtype_b);
  if (fp8 && (g.transa || !g.transb))
    return absl::InvalidArgumentError(
        "fp8 GEMM needs transa=false, transb=true (B stored [n,k])");
  LLMC_RT_ASSIGN_OR_RETURN(cudaDataType_t ta, CudaType(g.dtype_a));
  LLMC_RT_ASSIGN_OR_RETURN(cudaDataType_t tb, CudaType(g.dtype_b));
  LLMC_RT_ASSIGN_OR_RETURN(cudaDataType_t tc, CudaType(g.dtype_c));
  LLMC_RT_ASSIGN_OR_RETURN(cudaDataType_t td, CudaType(g.dtype_d));
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescCreate, &p->desc,
                                  CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Row-major D[m,n] = op(A) op(B) is column-major D^T[n,m] = op(B)^T op(A)^T:
  // cuBLASLt's "A" is our B, its "B" is our A, and its (m, n) is our (n, m).
  cublasOperation_t op_lt_a = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_lt_b = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p->desc,
                                  CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a,
                                  sizeof(op_lt_a)));
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p->desc,
                                  CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b,
                                  sizeof(op_lt_b)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (g.epilogue) {
    case Epilogue::none: epi = CUBLASLT_EPILOGUE_DEFAULT; break;
    case Epilogue::bias: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case Epilogue::relu: epi = CUBLASLT_EPILOGUE_RELU; break;
    case Epilogue::gelu: epi = CUBLASLT_EPILOGUE_GELU; break;
    case Epilogue::relu_bias: epi = CUBLASLT_EPILOGUE_RELU_BIAS; break;
    case Epilogue::gelu_bias: epi = CUBLASLT_EPILOGUE_GELU_BIAS; break;
  }
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p->desc,
                                  CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                  sizeof(epi)));
  if (g.bias.buffer >= 0) {
    LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p->desc,
                                    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &td,
                                    sizeof(td)));
  }
  // Layouts of the stored matrices, column-major view of row-major storage.
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows_rm,
                    int64_t cols_rm, int64_t ld,
                    int64_t stride) -> absl::Status {
    LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatrixLayoutCreate, l, t, cols_rm,
                                    rows_rm, ld));
    if (g.batch > 1) {
      int32_t batch = static_cast<int32_t>(g.batch);
      LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatrixLayoutSetAttribute, *l,
                                      CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                      &batch, sizeof(batch)));
      LLMC_RT_RETURN_IF_ERROR(LT_CALL(
          cublasLtMatrixLayoutSetAttribute, *l,
          CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
    return absl::OkStatus();
  };
  // Our B stored row-major [k,n] or [n,k]; our A [m,k] or [k,m].
  LLMC_RT_RETURN_IF_ERROR(layout(&p->a, tb, g.transb ? g.n : g.k,
                                 g.transb ? g.k : g.n, g.ldb, g.stride_b));
  LLMC_RT_RETURN_IF_ERROR(layout(&p->b, ta, g.transa ? g.k : g.m,
                                 g.transa ? g.m : g.k, g.lda, g.stride_a));
  LLMC_RT_RETURN_IF_ERROR(
      layout(&p->c, tc, g.m, g.n, g.c.buffer >= 0 ? g.ldc : g.ldd,
             g.c.buffer >= 0 ? g.stride_c : g.stride_d));
  LLMC_RT_RETURN_IF_ERROR(layout(&p->d, td, g.m, g.n, g.ldd, g.stride_d));

  cublasLtMatmulPreference_t pref = nullptr;
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulPreferenceCreate, &pref));
  struct PrefGuard {
    const CublasLt* lt;
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { lt->cublasLtMatmulPreferenceDestroy(p); }
  } guard{lt, pref};
  uint64_t ws = workspace_bytes;
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulPreferenceSetAttribute, pref,
                                  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                  sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulAlgoGetHeuristic, lt_handle,
                                  p->desc, p->a, p->b, p->c, p->d, pref, 1,
                                  &result, &found));
  if (found == 0)
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for GEMM m=", g.m, " n=", g.n, " k=", g.k,
        " ", DTypeName(g.dtype_a), "x", DTypeName(g.dtype_b), "->",
        DTypeName(g.dtype_d)));
  p->algo = result.algo;
  return absl::OkStatus();
}

absl::Status Session::Impl::Join(int launch, CUstream stream) {
  auto it = std::find(pending.begin(), pending.end(), launch);
  if (it == pending.end()) return absl::OkStatus();
  pending.erase(it);
  return CU_CALL(cuStreamWaitEvent, stream,
                 collective_events.at(launch).second, 0);
}

absl::Status Session::Impl::JoinAll(CUstream stream) {
  while (!pending.empty())
    LLMC_RT_RETURN_IF_ERROR(Join(pending.front(), stream));
  return absl::OkStatus();
}

absl::Status Session::Impl::EnqueueAt(const Executable& exe, size_t i,
                                      CUstream stream, bool join_now) {
  for (int c : joins[i]) LLMC_RT_RETURN_IF_ERROR(Join(c, stream));
  const Launch& l = exe.launches[i];
  if (l.kind != Launch::Collective) return Enqueue(exe, l, stream);
  if (!comm)
    return absl::FailedPreconditionError(
        "the NCCL communicator was aborted after an earlier error");
  // Fork: the communication stream waits for everything enqueued so far
  // (the collective's producers), runs the collective, records `done`.
  auto [fork, done] = collective_events.at(static_cast<int>(i));
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, fork, stream));
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuStreamWaitEvent, comm_stream, fork, 0));
  LLMC_RT_RETURN_IF_ERROR(Enqueue(exe, l, comm_stream));
  LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, done, comm_stream));
  pending.push_back(static_cast<int>(i));
  if (join_now) return Join(static_cast<int>(i), stream);
  return absl::OkStatus();
}

absl::Status Session::Impl::Enqueue(const Executable& exe, const Launch& l,
                                    CUstream stream) {
  auto addr = [&](const BufferRef& r) -> uint64_t {
    return r.buffer < 0 ? 0 : base[r.buffer] + r.offset;
  };
  switch (l.kind) {
    case Launch::Kernel: {
      if (l.attention >= 0 && attention) {
        // cuDNN when it has a plan for this attention, else the kernel.
        const AttentionSpec& a = exe.attentions[l.attention];
        LLMC_RT_ASSIGN_OR_RETURN(bool ran, attention->Run(l.attention, addr(a.q), addr(a.k),
                                                          addr(a.v), addr(a.o), stream));
        if (ran) return absl::OkStatus();
      }
      std::vector<uint64_t> storage(l.args.size());
      std::vector<void*> params(l.args.size());
      for (size_t i = 0; i < l.args.size(); ++i) {
        const Arg& a = l.args[i];
        switch (a.kind) {
          case Arg::BufferPtr: storage[i] = base[a.buffer] + a.byte_offset; break;
          case Arg::I32: {
            int32_t v = static_cast<int32_t>(a.i);
            std::memcpy(&storage[i], &v, sizeof(v));
            break;
          }
          case Arg::I64: std::memcpy(&storage[i], &a.i, sizeof(a.i)); break;
          case Arg::F32: std::memcpy(&storage[i], &a.f, sizeof(a.f)); break;
          case Arg::Bytes: break;
        }
        params[i] = a.kind == Arg::Bytes ? const_cast<char*>(a.bytes.data())
                                         : static_cast<void*>(&storage[i]);
      }
      return CU_CALL(cuLaunchKernel, functions[l.kernel], l.grid[0], l.grid[1],
                     l.grid[2], l.block[0], l.block[1], l.block[2], l.smem,
                     stream, params.data(), nullptr);
    }
    case Launch::Gemm: {
      const GemmSpec& g = exe.gemms[l.gemm];
      GemmPlan& p = gemms[l.gemm];
      if (g.bias.buffer >= 0) {
        uint64_t bias = addr(g.bias);
        LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p.desc,
                                        CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                        &bias, sizeof(bias)));
      }
      // cuBLASLt's A is our B, so the scales swap too.
      if (g.scale_b.buffer >= 0) {
        uint64_t s = addr(g.scale_b);
        LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p.desc,
                                        CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                        &s, sizeof(s)));
      }
      if (g.scale_a.buffer >= 0) {
        uint64_t s = addr(g.scale_a);
        LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulDescSetAttribute, p.desc,
                                        CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                        &s, sizeof(s)));
      }
      uint64_t d = addr(g.d);
      uint64_t c = g.c.buffer >= 0 ? addr(g.c) : d;
      float beta = g.c.buffer >= 0 ? g.beta : 0.f;
      return LT_CALL(cublasLtMatmul, lt_handle, p.desc, &g.alpha,
                     reinterpret_cast<void*>(addr(g.b)), p.a,
                     reinterpret_cast<void*>(addr(g.a)), p.b, &beta,
                     reinterpret_cast<void*>(c), p.c,
                     reinterpret_cast<void*>(d), p.d, &p.algo,
                     reinterpret_cast<void*>(workspace.ptr()), workspace.bytes(),
                     reinterpret_cast<cudaStream_t>(stream));
    }
    case Launch::Collective: {
      const CollectiveSpec& c = exe.collectives[l.collective];
      if (!comm)
        return absl::FailedPreconditionError(
            "executable has collectives but the session has no NCCL "
            "communicator");
      LLMC_RT_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(c.dtype));
      ncclComm_t nc = comm;
      auto cs = reinterpret_cast<cudaStream_t>(stream);
      const void* send = reinterpret_cast<const void*>(addr(c.send));
      void* recv = reinterpret_cast<void*>(addr(c.recv));
      ncclRedOp_t op = static_cast<ncclRedOp_t>(
          std::array<ncclRedOp_t, 5>{ncclSum, ncclProd, ncclMax, ncclMin,
                                     ncclAvg}[c.reduction]);
      ncclResult_t r = ncclSuccess;
      const char* call = "";
      switch (c.op) {
        case CollectiveSpec::AllReduce:
          call = "ncclAllReduce";
          r = nccl->ncclAllReduce(send, recv, c.count, t, op, nc, cs);
          break;
        case CollectiveSpec::AllGather:
          call = "ncclAllGather";
          r = nccl->ncclAllGather(send, recv, c.count, t, nc, cs);
          break;
        case CollectiveSpec::ReduceScatter:
          call = "ncclReduceScatter";
          r = nccl->ncclReduceScatter(send, recv, c.count, t, op, nc, cs);
          break;
      }
      // A non-blocking communicator (Communicator.h) may answer
      // ncclInProgress while it enqueues; the call is complete once
      // ncclCommGetAsyncError stops saying so (NCCL user guide,
      // "Non-blocking communicators").
      while (r == ncclInProgress) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t q = nccl->ncclCommGetAsyncError(nc, &state);
        if (q != ncclSuccess) return nccl->Check(q, "ncclCommGetAsyncError");
        r = state;
        if (r == ncclInProgress) std::this_thread::yield();
      }
      return nccl->Check(r, call);
    }
    case Launch::Copy:
      // A donated input passed as its own output (TensorSig::alias_input):
      // the data is already in place.
      if (addr(l.dst) == addr(l.src)) return absl::OkStatus();
      return CU_CALL(cuMemcpyDtoDAsync, static_cast<CUdeviceptr>(addr(l.dst)),
                     static_cast<CUdeviceptr>(addr(l.src)), l.copy_bytes,
                     stream);
  }
  return InternalBug("unknown launch kind");
}

absl::StatusOr<std::unique_ptr<Session>> Session::Load(
    std::shared_ptr<Device> device, std::shared_ptr<const Executable> exe,
    SessionOptions options) {
  if (!device || !exe)
    return absl::InvalidArgumentError("Session::Load needs a device and an executable");
  LLMC_RT_RETURN_IF_ERROR(exe->Validate());
  LLMC_RT_RETURN_IF_ERROR(device->MakeCurrent());
  std::unique_ptr<Session> s(new Session());
  s->device_ = device;
  s->exe_ = exe;
  s->options_ = options;
  s->impl_ = std::make_unique<Impl>();
  Impl& im = *s->impl_;
  im.driver_ = &device->driver();
  const CudaDriver* driver_ = im.driver_;
  im.pool = options.pool ? options.pool : &device->pool();

  // Kernels: use the cubin when it fits this GPU, else compile the source.
  std::unique_ptr<KernelCompiler> own_compiler;
  KernelCompiler* compiler = options.compiler;
  std::vector<KernelSource> to_compile;
  std::vector<size_t> compile_index;
  for (size_t i = 0; i < exe->kernels.size(); ++i) {
    const KernelSpec& k = exe->kernels[i];
    if (!k.cubin.empty() && device->CanRunCubin(k.arch)) continue;
    if (k.source.empty())
      return absl::FailedPreconditionError(absl::StrCat(
          "kernel '", k.name, "' has a cubin for ", k.arch,
          " only and no source; it cannot run on ", device->name(), " (",
          device->Arch(), ")"));
    KernelSource src{k.name, k.source, k.options, device->Arch(), k.headers};
    to_compile.push_back(std::move(src));
    compile_index.push_back(i);
  }
  std::vector<std::string> binaries(exe->kernels.size());
  for (size_t i = 0; i < exe->kernels.size(); ++i) binaries[i] = exe->kernels[i].cubin;
  if (!to_compile.empty()) {
    if (!compiler) {
      own_compiler = std::make_unique<KernelCompiler>();
      compiler = own_compiler.get();
    }
    LLMC_RT_ASSIGN_OR_RETURN(auto compiled, compiler->CompileAll(to_compile));
    for (size_t j = 0; j < compiled.size(); ++j)
      binaries[compile_index[j]] = std::move(compiled[j].binary);
  }
  std::vector<uint32_t> max_smem(exe->kernels.size(), 0);
  for (const Launch& l : exe->launches)
    if (l.kind == Launch::Kernel)
      max_smem[l.kernel] = std::max(max_smem[l.kernel], l.smem);
  for (size_t i = 0; i < exe->kernels.size(); ++i) {
    CUmodule mod = nullptr;
    LLMC_RT_RETURN_IF_ERROR(Annotate(CU_CALL(cuModuleLoadData, &mod,
                                             binaries[i].data()),
                                     absl::StrCat("kernel '", exe->kernels[i].name, "'")));
    im.modules.push_back(mod);
    CUfunction fn = nullptr;
    LLMC_RT_RETURN_IF_ERROR(Annotate(
        CU_CALL(cuModuleGetFunction, &fn, mod, exe->kernels[i].name.c_str()),
        absl::StrCat("kernel '", exe->kernels[i].name, "'")));
    im.functions.push_back(fn);
    if (max_smem[i] > 48 * 1024) {
      LLMC_RT_RETURN_IF_ERROR(Annotate(
          CU_CALL(cuFuncSetAttribute, fn,
                  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                  static_cast<int>(max_smem[i])),
          absl::StrCat("kernel '", exe->kernels[i].name, "' needs ",
                       max_smem[i], " bytes of shared memory")));
    }
  }

  // Memory: constants, arena.
  im.constants.resize(exe->buffers.size());
  im.base.assign(exe->buffers.size(), 0);
  for (const Buffer& b : exe->buffers) {
    if ((b.kind != Buffer::Constant && b.kind != Buffer::Persistent) ||
        b.bytes == 0)
      continue;
    LLMC_RT_ASSIGN_OR_RETURN(im.constants[b.id],
                             PooledBuffer::Allocate(im.pool, b.bytes));
    if (b.kind == Buffer::Persistent) continue;  // written by the preparation
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuMemcpyHtoD,
                                    static_cast<CUdeviceptr>(im.constants[b.id].ptr()),
                                    b.constant_data.data(), b.bytes));
  }
  if (exe->arena_bytes > 0) {
    LLMC_RT_ASSIGN_OR_RETURN(im.arena,
                             PooledBuffer::Allocate(im.pool, exe->arena_bytes));
  }

  // GEMMs.
  if (!exe->gemms.empty()) {
    LLMC_RT_ASSIGN_OR_RETURN(im.lt, CublasLt::Get());
    const CublasLt* lt = im.lt;
    LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtCreate, &im.lt_handle));
    LLMC_RT_ASSIGN_OR_RETURN(
        im.workspace, PooledBuffer::Allocate(im.pool, options.gemm_workspace_bytes));
    im.gemms.resize(exe->gemms.size());
    for (size_t i = 0; i < exe->gemms.size(); ++i)
      LLMC_RT_RETURN_IF_ERROR(Annotate(
          im.PlanGemm(exe->gemms[i], options.gemm_workspace_bytes, &im.gemms[i]),
          absl::StrCat("gemm ", i)));
  }
  // cuDNN attention plans (never fails: a spec without a plan runs its
  // kernel; attention_report() says which and why).
  if (!exe->attentions.empty()) {
    if (options.use_cudnn_attention) {
      im.attention = CudnnAttentionRunner::Create(*exe, im.pool, GetCudnn());
      s->attention_report_ = im.attention->Report();
    } else {
      s->attention_report_ = absl::StrCat("llmc kernel for all ", exe->attentions.size(),
                                          " attention launch(es): cuDNN disabled "
                                          "(SessionOptions::use_cudnn_attention)");
    }
  }
  im.joins = PlanCollectiveJoins(*exe);
  if (!exe->collectives.empty()) {
    LLMC_RT_ASSIGN_OR_RETURN(im.nccl, Nccl::Get());
    if (options.communicator) {
      if (options.communicator->aborted())
        return absl::FailedPreconditionError(
            "SessionOptions::communicator was aborted after an earlier error");
      if (options.communicator->device() &&
          options.communicator->device()->ordinal() != device->ordinal())
        return absl::InvalidArgumentError(absl::StrCat(
            "the communicator is on GPU ", options.communicator->device()->ordinal(),
            " but the session on GPU ", device->ordinal()));
      im.comm = options.communicator->comm();
      // All-gather and reduce-scatter buffers hold nranks shares.
      LLMC_RT_RETURN_IF_ERROR(
          ValidateCollectives(*exe, options.communicator->nranks()));
    } else {
      im.comm = static_cast<ncclComm_t>(options.nccl_comm);
    }
    if (!im.comm)
      return absl::FailedPreconditionError(absl::StrCat(
          "the executable has ", exe->collectives.size(),
          " collective(s) (all_reduce/all_gather/reduce_scatter) but no NCCL "
          "communicator was given: set SessionOptions::communicator (see "
          "Communicator.h) or nccl_comm"));
    for (const Launch& l : exe->launches)
      if (l.kind == Launch::Collective) {
        LLMC_RT_ASSIGN_OR_RETURN(ncclDataType_t t,
                                 NcclType(exe->collectives[l.collective].dtype));
        (void)t;
      }
    LLMC_RT_RETURN_IF_ERROR(
        CU_CALL(cuStreamCreate, &im.comm_stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < exe->launches.size(); ++i) {
      if (exe->launches[i].kind != Launch::Collective) continue;
      auto& ev = im.collective_events[static_cast<int>(i)];
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuEventCreate, &ev.first, CU_EVENT_DISABLE_TIMING));
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuEventCreate, &ev.second, CU_EVENT_DISABLE_TIMING));
    }
  }
  return s;
}

Session::~Session() {
  if (impl_ && device_) (void)device_->MakeCurrent();
  impl_.reset();
}

void Session::InvalidateParameters() {
  absl::MutexLock lock(&mu_);
  impl_->parameters.Invalidate();
}

namespace {
/// An NVTX range (header-only NVTX v3: a no-op unless a tool such as Nsight
/// Systems is attached), so `nsys profile` shows llmc runs and, for eager and
/// timed runs, one range per launch named by its label.
class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) { nvtxRangePushA(name.c_str()); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

std::string LaunchRangeName(const Launch& l, size_t i) {
  return absl::StrCat("llmc ", i, " ", l.label.empty() ? "launch" : l.label);
}
}  // namespace

absl::Status Session::Run(const std::vector<DeviceTensor>& inputs,
                          const std::vector<DeviceTensor>& outputs,
                          CUstream stream) {
  absl::MutexLock lock(&mu_);
  return RunLocked(inputs, outputs, stream, nullptr);
}

absl::StatusOr<std::vector<float>> Session::RunTimed(
    const std::vector<DeviceTensor>& inputs,
    const std::vector<DeviceTensor>& outputs, CUstream stream) {
  absl::MutexLock lock(&mu_);
  std::vector<float> ms;
  LLMC_RT_RETURN_IF_ERROR(RunLocked(inputs, outputs, stream, &ms));
  return ms;
}

absl::Status Session::RunLocked(const std::vector<DeviceTensor>& inputs,
                                const std::vector<DeviceTensor>& outputs,
                                CUstream stream, std::vector<float>* timings) {
  LLMC_RT_RETURN_IF_ERROR(CheckTensors(exe_->inputs, inputs, "input"));
  LLMC_RT_RETURN_IF_ERROR(CheckTensors(exe_->outputs, outputs, "output"));
  LLMC_RT_RETURN_IF_ERROR(device_->MakeCurrent());
  NvtxRange run_range(timings ? "llmc run (timed)" : "llmc run");
  Impl& im = *impl_;
  const CudaDriver* driver_ = im.driver_;
  std::vector<uint64_t> key;
  for (const Buffer& b : exe_->buffers) {
    switch (b.kind) {
      case Buffer::Input: im.base[b.id] = inputs[b.io_index].dptr; break;
      case Buffer::Output: im.base[b.id] = outputs[b.io_index].dptr; break;
      case Buffer::Arena: im.base[b.id] = im.arena.ptr() + b.arena_offset; break;
      case Buffer::Constant:
      case Buffer::Persistent: im.base[b.id] = im.constants[b.id].ptr(); break;
    }
  }
  for (const auto& t : inputs) key.push_back(t.dptr);
  for (const auto& t : outputs) key.push_back(t.dptr);

  if (options_.communicator && !exe_->collectives.empty()) {
    im.comm = options_.communicator->comm();
    if (!im.comm)
      return absl::FailedPreconditionError(
          "the session's NCCL communicator was aborted after an earlier error");
  }
  im.pending.clear();
  // Parameter preparation (once per parameter set, never captured in the
  // graph): launches[0, first).
  const size_t first = static_cast<size_t>(exe_->num_prepare_launches);
  if (first > 0) {
    std::vector<uint64_t> ptrs;
    for (const auto& t : inputs) ptrs.push_back(t.dptr);
    std::vector<uint64_t> pkey = ParameterKey(*exe_, ptrs);
    if (im.parameters.NeedsPrepare(pkey)) {
      for (size_t i = 0; i < first; ++i) {
        absl::Status st = im.EnqueueAt(*exe_, i, stream, /*join_now=*/true);
        if (!st.ok())
          return Annotate(st, absl::StrCat("parameter preparation launch ", i, " (",
                                           exe_->launches[i].label, ")"));
      }
      im.parameters.Prepared(std::move(pkey));
    }
  }
  if (timings) {
    size_t n = exe_->launches.size();
    std::vector<CUevent> events(n + 1, nullptr);
    absl::Status st;
    for (auto& e : events) {
      st = CU_CALL(cuEventCreate, &e, CU_EVENT_DEFAULT);
      if (!st.ok()) break;
    }
    // Preparation launches (already run above when needed) read as 0 ms.
    for (size_t i = 0; st.ok() && i < n; ++i) {
      if (i < first) {
        if (st.ok()) st = CU_CALL(cuEventRecord, events[i + 1], stream);
        continue;
      }
      if (i == first) st = CU_CALL(cuEventRecord, events[i], stream);
      NvtxRange range(LaunchRangeName(exe_->launches[i], i));
      if (st.ok()) st = im.EnqueueAt(*exe_, i, stream, /*join_now=*/true);
      if (st.ok()) st = CU_CALL(cuEventRecord, events[i + 1], stream);
    }
    if (st.ok() && n > 0) st = CU_CALL(cuEventSynchronize, events[n]);
    if (st.ok() && first > 0) st = CU_CALL(cuEventRecord, events[0], stream);
    for (size_t i = 0; st.ok() && i < n; ++i) {
      float ms = 0;
      if (i < first) {
        timings->push_back(0.f);
        continue;
      }
      st = CU_CALL(cuEventElapsedTime, &ms, events[i], events[i + 1]);
      timings->push_back(ms);
    }
    for (auto e : events)
      if (e) driver_->cuEventDestroy(e);
    return st;
  }

  if (!options_.use_cuda_graphs || !graph_stats_.disabled_reason.empty())
    return EnqueueAll(stream, first);
  return RunGraph(key, stream, first);
}

absl::Status Session::EnqueueAll(CUstream stream, size_t first) {
  Impl& im = *impl_;
  for (size_t i = first; i < exe_->launches.size(); ++i) {
    const Launch& l = exe_->launches[i];
    NvtxRange range(LaunchRangeName(l, i));
    absl::Status st = im.EnqueueAt(*exe_, i, stream, /*join_now=*/false);
    if (!st.ok()) {
      // Join what was forked so a capture ends cleanly.
      (void)im.JoinAll(stream);
      return Annotate(st, absl::StrCat("launch ", i,
                                       l.label.empty() ? "" : " (" + l.label + ")"));
    }
  }
  return im.JoinAll(stream);
}

Session::GraphStats Session::graph_stats() const {
  absl::MutexLock lock(&mu_);
  GraphStats s = graph_stats_;
  s.cached = static_cast<int>(impl_->graphs.size());
  return s;
}

absl::Status Session::RunGraph(const std::vector<uint64_t>& key,
                               CUstream stream, size_t first) {
  Impl& im = *impl_;
  const CudaDriver* driver_ = im.driver_;
  GraphStats& stats = graph_stats_;
  // Capture is not allowed on the legacy default stream: run on a private
  // stream that waits for the caller's work so far, and make the caller's
  // stream wait for the graph.
  const bool legacy = stream == nullptr || stream == CU_STREAM_LEGACY;
  if (!legacy && driver_->cuStreamIsCapturing) {
    // The caller is capturing its own graph: our launches become part of it.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_->cuStreamIsCapturing(stream, &capturing) == CUDA_SUCCESS &&
        capturing != CU_STREAM_CAPTURE_STATUS_NONE)
      return EnqueueAll(stream, first);
  }
  CUstream s = stream;
  if (legacy) {
    if (!im.graph_stream) {
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuStreamCreate, &im.graph_stream, CU_STREAM_NON_BLOCKING));
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuEventCreate, &im.graph_fork, CU_EVENT_DISABLE_TIMING));
      LLMC_RT_RETURN_IF_ERROR(
          CU_CALL(cuEventCreate, &im.graph_join, CU_EVENT_DISABLE_TIMING));
    }
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, im.graph_fork, stream));
    LLMC_RT_RETURN_IF_ERROR(
        CU_CALL(cuStreamWaitEvent, im.graph_stream, im.graph_fork, 0));
    s = im.graph_stream;
  }
  auto join = [&]() -> absl::Status {
    if (!legacy) return absl::OkStatus();
    ++stats.private_stream_runs;
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, im.graph_join, s));
    return CU_CALL(cuStreamWaitEvent, stream, im.graph_join, 0);
  };
  auto launch = [&](Impl::CachedGraph& g) -> absl::Status {
    g.last_use = ++im.graph_clock;
    NvtxRange range("llmc CUDA graph launch");
    LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuGraphLaunch, g.exec, s));
    ++stats.launches;
    return join();
  };
  // Graphs off for good: say why once, then run as without graphs (on the
  // caller's stream; the private one, if forked, is joined empty).
  auto give_up = [&](const absl::Status& why) -> absl::Status {
    stats.disabled_reason = std::string(why.message());
    std::fprintf(stderr,
                 "llmc: CUDA graphs turned off for this session, launches are "
                 "enqueued one by one: %s\n",
                 stats.disabled_reason.c_str());
    for (Impl::CachedGraph& g : im.graphs)
      if (g.exec) driver_->cuGraphExecDestroy(g.exec);
    im.graphs.clear();
    if (legacy) {
      LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuEventRecord, im.graph_join, s));
      LLMC_RT_RETURN_IF_ERROR(CU_CALL(cuStreamWaitEvent, stream, im.graph_join, 0));
    }
    return EnqueueAll(stream, first);
  };

  // The last 32 lookups, one bit each (1 = miss): when pointer sets change
  // on most calls, capturing costs more than graphs save.
  im.graph_history <<= 1;
  for (Impl::CachedGraph& g : im.graphs)
    if (g.key == key) {
      ++stats.replays;
      return launch(g);
    }
  im.graph_history |= 1;
  if (stats.captures >= 32 && __builtin_popcount(im.graph_history) > 16)
    return give_up(absl::FailedPreconditionError(absl::StrCat(
        "the input/output pointers changed on ", __builtin_popcount(im.graph_history),
        " of the last 32 runs (more sets than the ", options_.max_cuda_graphs,
        " cached graphs)")));

  // A new pointer set: capture the launches.
  absl::Status begin =
      CU_CALL(cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (!begin.ok()) return give_up(Annotate(begin, "beginning the capture"));
  absl::Status enq = EnqueueAll(s, first);
  CUgraph graph = nullptr;
  absl::Status end = CU_CALL(cuStreamEndCapture, s, &graph);
  if (!enq.ok() || !end.ok()) {
    if (graph) driver_->cuGraphDestroy(graph);
    return give_up(Annotate(enq.ok() ? end : enq, "capturing the launches"));
  }
  ++stats.captures;
  struct GraphGuard {
    const CudaDriver* d;
    CUgraph g;
    ~GraphGuard() { d->cuGraphDestroy(g); }
  } guard{driver_, graph};

  const size_t capacity =
      static_cast<size_t>(std::max(1, options_.max_cuda_graphs));
  if (im.graphs.size() >= capacity) {
    // Full: reuse the least recently used graph, updated in place when the
    // driver accepts the new graph's topology (same launches, new pointers).
    auto lru = std::min_element(
        im.graphs.begin(), im.graphs.end(),
        [](const Impl::CachedGraph& a, const Impl::CachedGraph& b) {
          return a.last_use < b.last_use;
        });
    if (driver_->cuGraphExecUpdate) {
      CUgraphExecUpdateResultInfo info{};
      if (driver_->cuGraphExecUpdate(lru->exec, graph, &info) == CUDA_SUCCESS) {
        lru->key = key;
        ++stats.updates;
        return launch(*lru);
      }
    }
    driver_->cuGraphExecDestroy(lru->exec);
    im.graphs.erase(lru);
  }
  CUgraphExec exec = nullptr;
  absl::Status inst = CU_CALL(cuGraphInstantiate, &exec, graph, 0);
  if (!inst.ok()) return give_up(Annotate(inst, "instantiating the graph"));
  ++stats.instantiations;
  im.graphs.push_back({key, exec, 0});
  return launch(im.graphs.back());
}

}  // namespace llmc::rt
