// Enqueuing one launch of a loaded executable: a kernel (or its cuDNN
// attention alternative), a cuBLASLt GEMM (planned once at load), an NCCL
// collective forked onto the communication stream, or a device copy.
#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

#include "SessionImpl.h"
#include "absl/strings/str_cat.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

using namespace detail;

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

bool IsFp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

}  // namespace

namespace detail {

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

}  // namespace detail

#define CU_CALL(fn, ...) LLMC_VENDOR_CALL(*driver_, fn, __VA_ARGS__)
#define LT_CALL(fn, ...) LLMC_VENDOR_CALL(*lt, fn, __VA_ARGS__)

namespace detail {

uint32_t GemmAlignment(uint64_t address) {
  if (address == 0) return 256;
  return static_cast<uint32_t>(std::min<uint64_t>(256, address & (~address + 1)));
}

void DestroyGemmPlan(const CublasLt& lt, GemmPlan& plan) {
  if (plan.desc) lt.cublasLtMatmulDescDestroy(plan.desc);
  for (cublasLtMatrixLayout_t l : {plan.a, plan.b, plan.c, plan.d})
    if (l) lt.cublasLtMatrixLayoutDestroy(l);
  plan = GemmPlan{};
}

}  // namespace detail

absl::Status Session::Impl::PlanGemm(const GemmSpec& g, size_t workspace_bytes,
                                     const std::array<uint32_t, 4>& alignment,
                                     GemmPlan* p) {
  p->alignment = alignment;
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
  // cuBLASLt's A is our B (see the layouts above).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment[1]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment[0]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment[2]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment[3]}};
  for (const auto& [attribute, bytes] : aligned)
    LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulPreferenceSetAttribute, pref,
                                    attribute, &bytes, sizeof(bytes)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtMatmulAlgoGetHeuristic, lt_handle,
                                  p->desc, p->a, p->b, p->c, p->d, pref, 1,
                                  &result, &found));
  if (found == 0)
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for GEMM m=", g.m, " n=", g.n, " k=", g.k,
        " ", DTypeName(g.dtype_a), "x", DTypeName(g.dtype_b), "->",
        DTypeName(g.dtype_d), " with operands aligned to ", alignment[0], "/",
        alignment[1], "/", alignment[2], "/", alignment[3], " bytes (A/B/C/D)"));
  p->algo = result.algo;
  return absl::OkStatus();
}

absl::StatusOr<GemmPlan*> Session::Impl::GemmPlanFor(
    const Executable& exe, int index, const std::array<uint32_t, 4>& alignment) {
  // A plan for exactly these alignments (each capped at 256, so a caller's
  // 512-byte aligned tensors match the load-time plan): one made for less
  // aligned operands would also run, but may leave a faster algorithm out.
  std::vector<GemmPlan>& plans = gemms[index];
  for (GemmPlan& p : plans)
    if (p.alignment == alignment) return &p;
  GemmPlan p;
  if (absl::Status planned = PlanGemm(exe.gemms[index], workspace.bytes(), alignment, &p);
      !planned.ok()) {
    DestroyGemmPlan(*lt, p);
    return Annotate(planned, absl::StrCat("gemm ", index));
  }
  plans.push_back(p);
  return &plans.back();
}

std::array<uint32_t, 4> Session::Impl::GemmAlignments(const GemmSpec& g) const {
  auto addr = [&](const BufferRef& r) -> uint64_t {
    return r.buffer < 0 ? 0 : base[r.buffer] + r.offset;
  };
  const uint64_t d = addr(g.d);
  return {GemmAlignment(addr(g.a)), GemmAlignment(addr(g.b)),
          GemmAlignment(g.c.buffer >= 0 ? addr(g.c) : d), GemmAlignment(d)};
}

absl::Status Session::Impl::PlanGemmsForThisRun(const Executable& exe, size_t first) {
  for (size_t i = first; i < exe.launches.size(); ++i)
    if (exe.launches[i].kind == Launch::Gemm) {
      const int index = exe.launches[i].gemm;
      LLMC_RT_RETURN_IF_ERROR(GemmPlanFor(exe, index, GemmAlignments(exe.gemms[index])).status());
    }
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
  if (l.kind != Launch::Collective)
    return Enqueue(exe, l, stream, !join_now && i < programmatic.size() && programmatic[i]);
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
                                    CUstream stream, bool programmatic) {
  auto addr = [&](const BufferRef& r) -> uint64_t {
    return r.buffer < 0 ? 0 : base[r.buffer] + r.offset;
  };
  switch (l.kind) {
    case Launch::Kernel: {
      if (l.attention >= 0 && attention) {
        // cuDNN when it has a plan for this attention, else the kernel. The
        // launches of one spec (a backward's three kernels) fall back
        // together: the first runs cuDNN, the others are skipped when it did.
        const size_t index = static_cast<size_t>(&l - exe.launches.data());
        if (attention_first_launch.at(l.attention) == index) {
          LLMC_RT_ASSIGN_OR_RETURN(bool ran, attention->Run(l.attention, addr, stream));
          attention_ran.at(l.attention) = ran;
          if (ran) return absl::OkStatus();
        } else if (attention_ran.at(l.attention)) {
          return absl::OkStatus();
        }
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
      if (programmatic) {
        CUlaunchAttribute attr{};
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig config{};
        config.gridDimX = l.grid[0];
        config.gridDimY = l.grid[1];
        config.gridDimZ = l.grid[2];
        config.blockDimX = l.block[0];
        config.blockDimY = l.block[1];
        config.blockDimZ = l.block[2];
        config.sharedMemBytes = l.smem;
        config.hStream = stream;
        config.attrs = &attr;
        config.numAttrs = 1;
        return CU_CALL(cuLaunchKernelEx, &config, functions[l.kernel], params.data(), nullptr);
      }
      return CU_CALL(cuLaunchKernel, functions[l.kernel], l.grid[0], l.grid[1],
                     l.grid[2], l.block[0], l.block[1], l.block[2], l.smem,
                     stream, params.data(), nullptr);
    }
    case Launch::Gemm: {
      const GemmSpec& g = exe.gemms[l.gemm];
      const uint64_t a = addr(g.a), b = addr(g.b), d = addr(g.d);
      const uint64_t c = g.c.buffer >= 0 ? addr(g.c) : d;
      LLMC_RT_ASSIGN_OR_RETURN(
          GemmPlan * plan,
          GemmPlanFor(exe, l.gemm,
                      {GemmAlignment(a), GemmAlignment(b), GemmAlignment(c), GemmAlignment(d)}));
      GemmPlan& p = *plan;
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
      float beta = g.c.buffer >= 0 ? g.beta : 0.f;
      return LT_CALL(cublasLtMatmul, lt_handle, p.desc, &g.alpha,
                     reinterpret_cast<void*>(b), p.a,
                     reinterpret_cast<void*>(a), p.b, &beta,
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

}  // namespace llmc::rt
