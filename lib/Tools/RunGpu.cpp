//===- RunGpu.cpp - llmc-run: the GPU run and its benchmark ---------------===//
//
// The rank's program (llmc-shard, then the pipeline), then the run on the
// GPU: lower to an Executable, load a runtime Session, copy the inputs in,
// run, copy the results out; with --bench, the timed runs, the per-launch
// report (TFLOP/s, TB/s, bus bandwidth) and the --profile trace.
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"

#include "TensorParallel.h"
#include "llmc/runtime/Communicator.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/Profile.h"
#include "llmc/runtime/Session.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>

using namespace mlir;

namespace llmc::tools::run {

namespace {

/// Bytes a collective moves per rank by the nccl-tests convention ("bus
/// bandwidth", NCCL's doc/PERFORMANCE.md): all_reduce 2(n-1)/n of the
/// buffer, all_gather and reduce_scatter (n-1)/n of the full buffer.
double collectiveBusBytes(const llmc::rt::CollectiveSpec &c, int n) {
  double elem = llmc::rt::DTypeSize(c.dtype);
  double factor = n > 1 ? double(n - 1) / n : 0.0;
  switch (c.op) {
  case llmc::rt::CollectiveSpec::AllReduce:
    return 2 * factor * c.count * elem;
  case llmc::rt::CollectiveSpec::AllGather:
  case llmc::rt::CollectiveSpec::ReduceScatter:
    // count is per rank; the full buffer is n * count.
    return factor * n * c.count * elem;
  }
  return 0;
}

} // namespace

/// The program this rank runs, in place, from the function specialized as
/// written: its llmc-shard slice (llmc::tools::shardForRank, which leaves a
/// graph with collectives as written), then the pipeline of `options`
/// without shape specialization (weight-only quantization, canonicalize and
/// raise, the precision policy). Reports the error and returns failure.
LogicalResult toRankProgram(func::FuncOp fn, int tp, int rank,
                            llmc::PipelineOptions options) {
  if (failed(llmc::tools::shardForRank(fn, tp, rank)))
    return failure();
  // Canonicalize and raise (decomposed RMSNorm => llm.rms_norm) the function
  // that runs only: the reference results came from the graph as written,
  // so --check also verifies the raise.
  options.specialize_shapes = false;
  options.tp = 1;
  if (auto st = llmc::RunPipeline(fn, options, llmc::tools::applyPassManagerFlags);
      !st.ok()) {
    fail(std::string(st.message()));
    return failure();
  }
  return success();
}

absl::StatusOr<GpuRun> runOnGpu(func::FuncOp fn,
                                const std::vector<ref::HostTensor> &inputs,
                                const Options &opts, bool bench,
                                llmc::LowerStats *stats) {
  namespace rt = llmc::rt;
  const llmc::tools::TpState &tp = llmc::tools::tpState();
  auto deviceOr = rt::Device::Open(tp.device);
  // Lower for the GPU present (fp8 GEMMs differ below sm_89); without one,
  // still lower first so that codegen errors show before the device error.
  auto pipelineOr = pipelineOptions(
      opts, deviceOr.ok() ? llmc::ComputeCapabilityOfArch((*deviceOr)->Arch()) : 0);
  if (!pipelineOr.ok())
    return pipelineOr.status();
  const llmc::LowerOptions lo = llmc::lowerOptions(*pipelineOr);
  auto exeOr = llmc::LowerToExecutable(fn, lo, stats, llmc::tools::applyPassManagerFlags);
  if (!exeOr.ok())
    return exeOr.status();
  auto exe = std::make_shared<rt::Executable>(std::move(*exeOr));
  if (!deviceOr.ok())
    return deviceOr.status();
  auto device = *deviceOr;
  rt::SessionOptions so;
  so.use_cuda_graphs = !opts.noGraphs;
  if (!exe->collectives.empty())
    so.communicator = tp.comm;
  // With a communicator, waits poll NCCL's error state and time out instead
  // of hanging when another rank failed.
  auto waitFor = [&](CUstream s, const char *what) -> absl::Status {
    return so.communicator ? so.communicator->Wait(s, what)
                           : device->SynchronizeStream(s);
  };
  auto t0 = std::chrono::steady_clock::now();
  auto sessionOr = rt::Session::Load(device, exe, so);
  if (!sessionOr.ok())
    return sessionOr.status();
  auto &session = *sessionOr;
  double loadMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  llvm::outs() << "loaded " << exe->kernels.size() << " kernels, "
               << exe->gemms.size() << " GEMMs in " << llvm::format("%.1f", loadMs)
               << " ms (NVRTC + module load + cuBLASLt plans)\n";
  // Which attention launches run on cuDNN, and why others run llmc's kernel.
  if (!session->attention_report().empty()) {
    bool warn = lo.attention_backend == llmc::AttentionBackend::kCudnn;
    for (llvm::StringRef line : llvm::split(session->attention_report(), '\n')) {
      if (warn && line.starts_with("llmc kernel"))
        llvm::errs() << "warning: --attention=cudnn: " << line << "\n";
      else
        llvm::outs() << "attention: " << line << "\n";
    }
  }

  std::vector<rt::DeviceTensor> din, dout;
  std::vector<uint64_t> allocations;
  auto cleanup = [&] {
    for (uint64_t p : allocations)
      (void)device->Free(p);
  };
  for (auto [i, t] : llvm::enumerate(inputs)) {
    std::string bytes = pack(t);
    auto p = device->Alloc(std::max<size_t>(bytes.size(), 1));
    if (!p.ok()) {
      cleanup();
      return p.status();
    }
    allocations.push_back(*p);
    if (auto st = device->CopyToDevice(*p, bytes.data(), bytes.size()); !st.ok()) {
      cleanup();
      return st;
    }
    din.push_back({*p, exe->inputs[i].dtype, exe->inputs[i].shape});
  }
  for (auto &sig : exe->outputs) {
    if (sig.alias_input >= 0) {
      // A donated input updated in place: read the result from its buffer.
      dout.push_back({din[sig.alias_input].dptr, sig.dtype, sig.shape});
      continue;
    }
    auto p = device->Alloc(std::max<int64_t>(sig.Bytes(), 1));
    if (!p.ok()) {
      cleanup();
      return p.status();
    }
    allocations.push_back(*p);
    // Poison outputs so an unwritten element shows up as NaN / garbage.
    (void)device->Memset(*p, 0xFF, sig.Bytes());
    dout.push_back({*p, sig.dtype, sig.shape});
  }
  auto streamOr = device->CreateStream();
  if (!streamOr.ok()) {
    cleanup();
    return streamOr.status();
  }
  CUstream stream = *streamOr;
  GpuRun result;
  absl::Status st = session->Run(din, dout, stream);
  if (st.ok())
    st = waitFor(stream, "the first run");
  // The results of the first run: the benchmark's runs below update donated
  // inputs (and the outputs that alias them) again on every run.
  if (st.ok()) {
    for (auto [i, sig] : llvm::enumerate(exe->outputs)) {
      std::string bytes(sig.Bytes(), '\0');
      st = device->CopyToHost(bytes.data(), dout[i].dptr, bytes.size());
      if (!st.ok())
        break;
      auto type = cast<RankedTensorType>(fn.getFunctionType().getResult(i));
      result.outputs.push_back(unpack(bytes, type.getElementType(), sig.shape));
    }
  }
  if (st.ok() && bench) {
    auto timed = session->RunTimeline(din, dout, stream);
    if (!timed.ok())
      st = timed.status();
    else
      for (const llmc::rt::LaunchTiming& t : *timed)
        result.per_launch_ms.push_back(t.since_previous_ms);
    if (st.ok() && !opts.profile.empty()) {
      // The launches where the GPU ran them (events around each launch).
      auto trace = llmc::rt::ChromeTraceJson(*exe, *timed);
      st = trace.ok() ? llmc::rt::AtomicWriteFile(opts.profile, *trace)
                      : trace.status();
      if (st.ok())
        llvm::outs() << "wrote the launch profile to " << opts.profile << "\n";
    }
    std::vector<double> samples;
    for (int w = 0; st.ok() && w < 5; ++w)
      st = session->Run(din, dout, stream);
    if (st.ok())
      st = waitFor(stream, "the warm-up runs");
    const rt::CudaDriver &drv = device->driver();
    CUevent start = nullptr, stop = nullptr;
    if (st.ok())
      st = LLMC_VENDOR_CALL(drv, cuEventCreate, &start, 0);
    if (st.ok())
      st = LLMC_VENDOR_CALL(drv, cuEventCreate, &stop, 0);
    for (int it = 0; st.ok() && it < opts.iters; ++it) {
      st = LLMC_VENDOR_CALL(drv, cuEventRecord, start, stream);
      if (st.ok())
        st = session->Run(din, dout, stream);
      if (st.ok())
        st = LLMC_VENDOR_CALL(drv, cuEventRecord, stop, stream);
      if (st.ok())
        st = so.communicator ? waitFor(stream, "a timed run")
                             : LLMC_VENDOR_CALL(drv, cuEventSynchronize, stop);
      float ms = 0;
      if (st.ok())
        st = LLMC_VENDOR_CALL(drv, cuEventElapsedTime, &ms, start, stop);
      samples.push_back(ms);
    }
    if (start)
      (void)drv.cuEventDestroy(start);
    if (stop)
      (void)drv.cuEventDestroy(stop);
    if (!samples.empty()) {
      std::sort(samples.begin(), samples.end());
      result.median_ms = samples[samples.size() / 2];
    }
  }
  (void)device->DestroyStream(stream);
  cleanup();
  if (!st.ok())
    return st;
  if (bench) {
    if (exe->num_prepare_launches > 0)
      llvm::outs() << "parameter preparation: " << exe->num_prepare_launches
                   << " launches (not timed per call: they run once per "
                      "parameter set, before the first call)\n";
    llvm::outs() << "per-launch times (one eager run, CUDA events):\n";
    for (auto [i, l] : llvm::enumerate(exe->launches)) {
      if (i >= result.per_launch_ms.size())
        break;
      if (static_cast<int>(i) < exe->num_prepare_launches)
        continue;
      double ms = result.per_launch_ms[i];
      llvm::outs() << llvm::format("  %3d %-22s %9.4f ms", int(i), l.label.c_str(), ms);
      if (l.kind == rt::Launch::Gemm) {
        const rt::GemmSpec &g = exe->gemms[l.gemm];
        double flops = 2.0 * g.m * g.n * g.k * g.batch;
        llvm::outs() << llvm::format("  %7.1f TFLOP/s  [%lldx%lldx%lld]",
                                     flops / (ms * 1e-3) / 1e12, (long long)g.m,
                                     (long long)g.n, (long long)g.k);
      } else if (l.kind == rt::Launch::Kernel) {
        // Bytes: every distinct buffer the kernel touches, read or written once.
        std::set<int> seen;
        double bytes = 0;
        for (auto &a : l.args)
          if (a.kind == rt::Arg::BufferPtr && a.buffer >= 0 && seen.insert(a.buffer).second)
            bytes += exe->buffers[a.buffer].bytes;
        llvm::outs() << llvm::format("  %7.2f TB/s (%.1f MB)", bytes / (ms * 1e-3) / 1e12,
                                     bytes / 1e6);
      } else if (l.kind == rt::Launch::Collective) {
        llvm::outs() << llvm::format("  %7.1f GB/s bus bandwidth",
                                     collectiveBusBytes(exe->collectives[l.collective],
                                                        tp.tp) /
                                         (ms * 1e-3) / 1e9);
      }
      llvm::outs() << "\n";
    }
    std::string who = tp.tp > 1 ? "rank " + std::to_string(tp.rank) + " of " +
                                      std::to_string(tp.tp) + ", "
                                : std::string();
    llvm::outs() << llvm::format("end to end: median %.4f ms over %d runs (%s%s)\n",
                                 result.median_ms, int(opts.iters), who.c_str(),
                                 opts.noGraphs ? "eager launches" : "CUDA graph replay");
    // A graph of collectives only (a collective benchmark): the bus
    // bandwidth at the end-to-end median, nccl-tests' busbw.
    bool onlyCollectives = !exe->collectives.empty();
    double busBytes = 0;
    for (const rt::Launch &l : exe->launches) {
      if (l.kind == rt::Launch::Collective)
        busBytes += collectiveBusBytes(exe->collectives[l.collective], tp.tp);
      else
        onlyCollectives = false;
    }
    if (onlyCollectives && result.median_ms > 0)
      llvm::outs() << llvm::format(
          "collective bus bandwidth: %.1f GB/s (%.1f MB moved per rank "
          "by the nccl-tests convention, median of %d runs)\n",
          busBytes / (result.median_ms * 1e-3) / 1e9, busBytes / 1e6,
          int(opts.iters));
  }
  return result;
}

} // namespace llmc::tools::run
