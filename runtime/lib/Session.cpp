#include "llmc/runtime/Session.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "SessionImpl.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/Communicator.h"
#include "llmc/runtime/CudnnAttention.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/ParameterGuard.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {

using namespace detail;

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
                          const char* what, const std::vector<int64_t>* staged) {
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
    const bool copied = staged && i < staged->size() && (*staged)[i] >= 0;
    if (t.dptr % kTensorAlignment != 0 && s.Bytes() > 0 && !copied)
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", s.name, "' (#", i, ") at 0x", absl::Hex(t.dptr), " is not ",
          kTensorAlignment, "-byte aligned (address % ", kTensorAlignment, " = ",
          t.dptr % kTensorAlignment, "): llmc's kernels access inputs and outputs with ",
          kTensorAlignment, "-byte vectors; pass an aligned copy"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Loading and running
// ---------------------------------------------------------------------------
#define LT_CALL(fn, ...) LLMC_VENDOR_CALL(*lt, fn, __VA_ARGS__)

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
  LLMC_RT_RETURN_IF_ERROR(s->PlanStaging());

  // GEMMs.
  if (!exe->gemms.empty()) {
    LLMC_RT_ASSIGN_OR_RETURN(im.lt, CublasLt::Get());
    const CublasLt* lt = im.lt;
    LLMC_RT_RETURN_IF_ERROR(LT_CALL(cublasLtCreate, &im.lt_handle));
    LLMC_RT_ASSIGN_OR_RETURN(
        im.workspace, PooledBuffer::Allocate(im.pool, options.gemm_workspace_bytes));
    // Each GEMM's first plan: for the alignment of its operands' addresses
    // in the arena and constants, which stay for the session, and of
    // inputs and outputs at 256-byte aligned tensors (PyTorch's caching
    // allocator gives 512); a caller's tensor aligned less gets another
    // plan when it comes (Impl::GemmPlanFor).
    auto aligned = [&](const BufferRef& r) -> uint32_t {
      if (r.buffer < 0) return 256;
      const Buffer& b = exe->buffers[r.buffer];
      uint64_t at = 256;
      if (b.kind == Buffer::Arena) at = im.arena.ptr() + b.arena_offset;
      if (b.kind == Buffer::Constant || b.kind == Buffer::Persistent)
        at = im.constants[b.id].ptr();
      return detail::GemmAlignment(at + r.offset);
    };
    im.gemms.resize(exe->gemms.size());
    for (size_t i = 0; i < exe->gemms.size(); ++i) {
      const GemmSpec& g = exe->gemms[i];
      const uint32_t d = aligned(g.d);
      im.gemms[i].emplace_back();
      LLMC_RT_RETURN_IF_ERROR(Annotate(
          im.PlanGemm(g, options.gemm_workspace_bytes,
                      {aligned(g.a), aligned(g.b), g.c.buffer >= 0 ? aligned(g.c) : d, d},
                      &im.gemms[i].back()),
          absl::StrCat("gemm ", i)));
    }
  }
  // cuDNN attention plans (never fails: a spec without a plan runs its
  // kernel; attention_report() says which and why).
  if (!exe->attentions.empty()) {
    im.attention_first_launch.assign(exe->attentions.size(), exe->launches.size());
    im.attention_ran.assign(exe->attentions.size(), 0);
    for (size_t i = exe->launches.size(); i-- > 0;)
      if (exe->launches[i].attention >= 0)
        im.attention_first_launch[exe->launches[i].attention] = i;
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
  im.programmatic = ProgrammaticLaunches(*exe, im.joins);
  // Programmatic edges in captured graphs need a CUDA 12.3 driver.
  const char* pdl_env = std::getenv("LLMC_PDL");
  int driver_version = 0;
  if (driver_->cuDriverGetVersion(&driver_version) != CUDA_SUCCESS) driver_version = 0;
  if (!options.programmatic_dependent_launch || device->cc_major() < 9 ||
      !driver_->cuLaunchKernelEx || driver_version < 12030 ||
      (pdl_env && std::string(pdl_env) == "0"))
    im.programmatic.assign(im.programmatic.size(), 0);
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
std::string LaunchRangeName(const Launch& l, size_t i) {
  return absl::StrCat("llmc ", i, " ", l.label.empty() ? "launch" : l.label);
}
}  // namespace

absl::Status Session::PlanStaging() {
  Impl& im = *impl_;
  im.staged_input_offset.assign(exe_->inputs.size(), -1);
  im.staged_output_offset.assign(exe_->outputs.size(), -1);
  if (!options_.use_cuda_graphs) return absl::OkStatus();
  std::vector<bool> aliased(exe_->inputs.size(), false);
  for (const TensorSig& o : exe_->outputs)
    if (o.alias_input >= 0 && o.alias_input < static_cast<int>(aliased.size()))
      aliased[o.alias_input] = true;
  constexpr int64_t kAlign = 256;
  int64_t bytes = 0;
  auto place = [&](int64_t size) {
    int64_t at = bytes;
    bytes += (size + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  for (int i : options_.staged_inputs) {
    auto invalid = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SessionOptions::staged_inputs: input ", i, why));
    };
    if (i < 0 || i >= static_cast<int>(exe_->inputs.size()))
      return invalid(absl::StrCat(" is out of range (the executable has ",
                                  exe_->inputs.size(), " inputs)"));
    const TensorSig& sig = exe_->inputs[i];
    if (im.staged_input_offset[i] >= 0) return invalid(" is listed twice");
    if (sig.parameter)
      return invalid(" ('" + sig.name + "') is a parameter, read by the parameter preparation");
    if (aliased[i])
      return invalid(" ('" + sig.name + "') is donated: an output is written into it in place");
    im.staged_input_offset[i] = place(sig.Bytes());
  }
  for (size_t o = 0; o < exe_->outputs.size(); ++o) {
    const TensorSig& sig = exe_->outputs[o];
    if (sig.alias_input < 0 && sig.Bytes() > 0 && sig.Bytes() <= options_.staged_output_bytes)
      im.staged_output_offset[o] = place(sig.Bytes());
  }
  if (bytes > 0) {
    LLMC_RT_ASSIGN_OR_RETURN(im.staging, PooledBuffer::Allocate(im.pool, bytes));
  }
  return absl::OkStatus();
}

absl::Status Session::Run(const std::vector<DeviceTensor>& inputs,
                          const std::vector<DeviceTensor>& outputs,
                          CUstream stream) {
  absl::MutexLock lock(&mu_);
  return RunLocked(inputs, outputs, stream, nullptr);
}

absl::StatusOr<std::vector<float>> Session::RunTimed(
    const std::vector<DeviceTensor>& inputs,
    const std::vector<DeviceTensor>& outputs, CUstream stream) {
  LLMC_RT_ASSIGN_OR_RETURN(std::vector<LaunchTiming> timeline,
                           RunTimeline(inputs, outputs, stream));
  std::vector<float> ms;
  ms.reserve(timeline.size());
  for (const LaunchTiming& t : timeline) ms.push_back(t.since_previous_ms);
  return ms;
}

absl::StatusOr<std::vector<LaunchTiming>> Session::RunTimeline(
    const std::vector<DeviceTensor>& inputs,
    const std::vector<DeviceTensor>& outputs, CUstream stream) {
  absl::MutexLock lock(&mu_);
  std::vector<LaunchTiming> timeline;
  LLMC_RT_RETURN_IF_ERROR(RunLocked(inputs, outputs, stream, &timeline));
  return timeline;
}

absl::Status Session::RunLocked(const std::vector<DeviceTensor>& inputs,
                                const std::vector<DeviceTensor>& outputs,
                                CUstream stream, std::vector<LaunchTiming>* timings) {
  Impl& im = *impl_;
  // A tensor with a staging slot may lie at any address (see below).
  LLMC_RT_RETURN_IF_ERROR(CheckTensors(exe_->inputs, inputs, "input", &im.staged_input_offset));
  LLMC_RT_RETURN_IF_ERROR(
      CheckTensors(exe_->outputs, outputs, "output", &im.staged_output_offset));
  LLMC_RT_RETURN_IF_ERROR(device_->MakeCurrent());
  NvtxRange run_range(timings ? "llmc run (timed)" : "llmc run");
  const CudaDriver* driver_ = im.driver_;
  std::vector<uint64_t> key;
  // Staging serves the graphs: once they are off for good (see RunGraph's
  // give_up) the launches read and write the caller's tensors, except a
  // tensor with a staging slot at an address the kernels cannot take (not
  // kTensorAlignment-aligned, e.g. a decode step's token slice), which is
  // copied through its slot whatever the graphs do.
  const bool stage = graph_stats_.disabled_reason.empty();
  const uint64_t staging = im.staging.ptr();
  auto misaligned = [](const DeviceTensor& t) { return t.dptr % kTensorAlignment != 0; };
  auto stagedIn = [&](size_t i) {
    return stage || misaligned(inputs[i]) ? im.staged_input_offset[i] : -1;
  };
  auto stagedOut = [&](size_t o) {
    return stage || misaligned(outputs[o]) ? im.staged_output_offset[o] : -1;
  };
  for (const Buffer& b : exe_->buffers) {
    switch (b.kind) {
      case Buffer::Input:
        im.base[b.id] = stagedIn(b.io_index) >= 0 ? staging + stagedIn(b.io_index)
                                                  : inputs[b.io_index].dptr;
        break;
      case Buffer::Output:
        im.base[b.id] = stagedOut(b.io_index) >= 0 ? staging + stagedOut(b.io_index)
                                                   : outputs[b.io_index].dptr;
        break;
      case Buffer::Arena: im.base[b.id] = im.arena.ptr() + b.arena_offset; break;
      case Buffer::Constant:
      case Buffer::Persistent: im.base[b.id] = im.constants[b.id].ptr(); break;
    }
  }
  // Staged tensors are read/written at the session's staging buffers: not
  // part of the graph key.
  for (size_t i = 0; i < inputs.size(); ++i)
    key.push_back(stagedIn(i) >= 0 ? 0 : inputs[i].dptr);
  for (size_t o = 0; o < outputs.size(); ++o)
    key.push_back(stagedOut(o) >= 0 ? 0 : outputs[o].dptr);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (stagedIn(i) >= 0 && exe_->inputs[i].Bytes() > 0)
      LLMC_RT_RETURN_IF_ERROR(Annotate(
          CU_CALL(cuMemcpyDtoDAsync, staging + stagedIn(i),
                  inputs[i].dptr, exe_->inputs[i].Bytes(), stream),
          absl::StrCat("staging input ", i, " ('", exe_->inputs[i].name, "')")));

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
    // Two events per launch, recorded just before and just after it:
    // begin[i], end[i]. A preparation launch that did not run gets neither.
    size_t n = exe_->launches.size();
    std::vector<CUevent> events(2 * n, nullptr);
    absl::Status st;
    for (size_t i = first; i < n && st.ok(); ++i)
      for (size_t j : {2 * i, 2 * i + 1})
        st = CU_CALL(cuEventCreate, &events[j], CU_EVENT_DEFAULT);
    for (size_t i = first; st.ok() && i < n; ++i) {
      NvtxRange range(LaunchRangeName(exe_->launches[i], i));
      st = CU_CALL(cuEventRecord, events[2 * i], stream);
      if (st.ok()) st = im.EnqueueAt(*exe_, i, stream, /*join_now=*/true);
      if (st.ok()) st = CU_CALL(cuEventRecord, events[2 * i + 1], stream);
    }
    if (st.ok() && n > first) st = CU_CALL(cuEventSynchronize, events[2 * n - 1]);
    for (size_t i = 0; st.ok() && i < n; ++i) {
      LaunchTiming t;
      if (i >= first) {
        float start = 0, ms = 0, since = 0;
        st = CU_CALL(cuEventElapsedTime, &start, events[2 * first], events[2 * i]);
        if (st.ok()) st = CU_CALL(cuEventElapsedTime, &ms, events[2 * i], events[2 * i + 1]);
        if (st.ok())
          st = CU_CALL(cuEventElapsedTime, &since,
                       events[i == first ? 2 * i : 2 * i - 1], events[2 * i + 1]);
        t.start_ms = start;
        t.ms = ms;
        t.since_previous_ms = since;
      }
      timings->push_back(t);
    }
    for (auto e : events)
      if (e) driver_->cuEventDestroy(e);
    LLMC_RT_RETURN_IF_ERROR(st);
    return CopyStagedOutputs(outputs, stream, stage);
  }

  absl::Status st = !options_.use_cuda_graphs || !graph_stats_.disabled_reason.empty()
                        ? EnqueueAll(stream, first)
                        : RunGraph(key, stream, first);
  LLMC_RT_RETURN_IF_ERROR(st);
  return CopyStagedOutputs(outputs, stream, stage);
}

absl::Status Session::CopyStagedOutputs(const std::vector<DeviceTensor>& outputs,
                                        CUstream stream, bool all) {
  Impl& im = *impl_;
  const CudaDriver* driver_ = im.driver_;
  for (size_t o = 0; o < outputs.size(); ++o)
    if (im.staged_output_offset[o] >= 0 &&
        (all || outputs[o].dptr % kTensorAlignment != 0))
      LLMC_RT_RETURN_IF_ERROR(Annotate(
          CU_CALL(cuMemcpyDtoDAsync, outputs[o].dptr,
                  im.staging.ptr() + im.staged_output_offset[o],
                  exe_->outputs[o].Bytes(), stream),
          absl::StrCat("copying staged output ", o, " ('", exe_->outputs[o].name, "')")));
  return absl::OkStatus();
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

}  // namespace llmc::rt
