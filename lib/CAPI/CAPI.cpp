//===- CAPI.cpp - the C API (llmc_c.h) over llmc::Compiler and rt::Session ===//
//
// Every entry point validates its arguments (InvalidArgument naming the
// argument), calls the C++ API and turns the absl::Status into an
// llmc_status_t. This file is compiled with exceptions enabled so that
// nothing thrown below (std::bad_alloc, a library's exception) crosses the C
// boundary: each entry point catches and returns a status instead.
//
//===----------------------------------------------------------------------===//

#include "llmc/llmc_c.h"
#include "llmc/runtime/Log.h"

#include "llmc/Compiler.h"
#include "llmc/Support/DType.h"
#include "llmc/Support/Version.h"
#include "llmc/runtime/Communicator.h"
#include "llmc/runtime/Device.h"
#include "llmc/runtime/KvPagePool.h"
#include "llmc/runtime/ServingStep.h"
#include "llmc/runtime/Session.h"
#include "llmc/Reference/ServingStep.h"
#include "CompilerInternal.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#define LLMC_EXPORT __attribute__((visibility("default")))

struct llmc_status_t {
  int code;
  std::string message;
};

struct llmc_compiler_t {
  std::shared_ptr<llmc::Compiler> compiler;
};

struct llmc_executable_t {
  std::shared_ptr<const llmc::rt::Executable> exe;
};

struct llmc_communicator_t {
  std::shared_ptr<llmc::rt::Communicator> comm;
};

struct llmc_session_t {
  std::shared_ptr<llmc::rt::Device> device;
  std::unique_ptr<llmc::rt::Session> session;
};

struct llmc_kv_page_pool_t {
  std::shared_ptr<llmc::rt::Device> device;         // the GPU's pages, or
  std::unique_ptr<llmc::rt::MemoryPool> host_memory; // host_memory = 1's
  std::unique_ptr<llmc::rt::KvPagePool> pool;        // destroyed first
};

struct llmc_serving_engine_t {
  std::mutex mu;  // serializes every call
  // The serving step's module (the reference model evaluates it).
  std::unique_ptr<mlir::MLIRContext> context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::shared_ptr<llmc::Compiler> compiler;
  std::shared_ptr<llmc::rt::Device> device;
  CUstream stream = nullptr;
  std::unique_ptr<llmc::rt::MemoryPool> host_memory;
  std::unique_ptr<llmc::rt::KvPagePool> pool;
  std::unique_ptr<llmc::rt::StepModel> model;  // destroyed before the pool
  llmc::rt::SessionStepModel *gpu_model = nullptr;
  std::unique_ptr<llmc::rt::ServingEngine> engine;
  int64_t max_tokens_per_sequence = 0;
  llmc::rt::StepResult last;  // the last step's results
  std::vector<std::string> last_errors;  // NUL-terminated, per finished request
  ~llmc_serving_engine_t() {
    engine.reset();
    model.reset();
    pool.reset();
    if (device && stream)
      (void)device->DestroyStream(stream);
  }
};

namespace {

using llmc::rt::DType;

llmc_status_t *toC(const absl::Status &s) {
  if (s.ok())
    return nullptr;
  // new(nothrow): a status must be returnable even when memory is short.
  auto *st = new (std::nothrow) llmc_status_t();
  if (!st)
    return nullptr; // nothing better possible; callers treat NULL as OK
  st->code = static_cast<int>(s.code());
  st->message = std::string(s.message());
  return st;
}

llmc_status_t *invalid(std::string msg) {
  return toC(absl::InvalidArgumentError(std::move(msg)));
}

/// Runs `body` (returning absl::Status) with every exception turned into a
/// status: our bug (Internal), or ResourceExhausted for bad_alloc.
template <typename F> llmc_status_t *guarded(const char *fn, F &&body) {
  try {
    return toC(body());
  } catch (const std::bad_alloc &) {
    return toC(absl::ResourceExhaustedError(
        absl::StrCat(fn, ": out of host memory")));
  } catch (const std::exception &e) {
    return toC(absl::InternalError(absl::StrCat(
        fn, ": llmc internal error: uncaught exception: ", e.what())));
  } catch (...) {
    return toC(absl::InternalError(
        absl::StrCat(fn, ": llmc internal error: uncaught exception")));
  }
}

/// Splits "k=v<sep>k=v" into a map; empty segments are skipped.
absl::StatusOr<std::map<std::string, std::string>>
parseKeyValues(const char *text, char sep, const char *what) {
  std::map<std::string, std::string> out;
  if (!text)
    return out;
  for (absl::string_view part : absl::StrSplit(text, sep)) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty())
      continue;
    size_t eq = part.find('=');
    if (eq == absl::string_view::npos || eq == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": expected key=value, found '", part, "'"));
    std::string key(absl::StripAsciiWhitespace(part.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(part.substr(eq + 1)));
    if (out.count(key))
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", key, "' given twice"));
    out[key] = value;
  }
  return out;
}

absl::StatusOr<bool> parseBool(const std::string &key, const std::string &v,
                               const char *what) {
  if (v == "1" || v == "true")
    return true;
  if (v == "0" || v == "false")
    return false;
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": ", key, " expects 0 or 1, found '", v, "'"));
}

bool toRt(llmc_dtype d, DType *out) {
  switch (d) {
  case LLMC_DTYPE_F32: *out = DType::f32; return true;
  case LLMC_DTYPE_F16: *out = DType::f16; return true;
  case LLMC_DTYPE_BF16: *out = DType::bf16; return true;
  case LLMC_DTYPE_F8E4M3FN: *out = DType::f8e4m3; return true;
  case LLMC_DTYPE_F8E5M2: *out = DType::f8e5m2; return true;
  case LLMC_DTYPE_I1: *out = DType::i1; return true;
  case LLMC_DTYPE_I8: *out = DType::i8; return true;
  case LLMC_DTYPE_I32: *out = DType::i32; return true;
  case LLMC_DTYPE_I64: *out = DType::i64; return true;
  }
  return false;
}

llmc_dtype toC(DType d) {
  switch (d) {
  case DType::f32: return LLMC_DTYPE_F32;
  case DType::f16: return LLMC_DTYPE_F16;
  case DType::bf16: return LLMC_DTYPE_BF16;
  case DType::f8e4m3: return LLMC_DTYPE_F8E4M3FN;
  case DType::f8e5m2: return LLMC_DTYPE_F8E5M2;
  case DType::i1: return LLMC_DTYPE_I1;
  case DType::i8: return LLMC_DTYPE_I8;
  case DType::i32: return LLMC_DTYPE_I32;
  case DType::i64: return LLMC_DTYPE_I64;
  }
  return LLMC_DTYPE_F32;
}

std::string dims(const int64_t *v, int32_t n) {
  return absl::StrCat("[", absl::StrJoin(v, v + n, ","), "]");
}

/// Validates the C tensors and converts them. `what` is "input" or "output";
/// `sigs` only names them in messages.
absl::Status convertTensors(const llmc_tensor *tensors, int32_t count,
                            const char *what,
                            const std::vector<llmc::rt::TensorSig> &sigs,
                            std::vector<llmc::rt::DeviceTensor> &out) {
  std::string plural = absl::StrCat(what, "s");
  if (count < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("num_", plural, ": expected >= 0, found ", count));
  if (count > 0 && !tensors)
    return absl::InvalidArgumentError(absl::StrCat(
        plural, ": NULL with num_", plural, " = ", count));
  for (int32_t i = 0; i < count; ++i) {
    const llmc_tensor &t = tensors[i];
    std::string name =
        i < static_cast<int32_t>(sigs.size())
            ? absl::StrCat(what, " '", sigs[i].name, "' (#", i, ")")
            : absl::StrCat(what, " #", i);
    if (t.rank < 0 || t.rank > LLMC_MAX_RANK)
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": rank must be in [0, ", LLMC_MAX_RANK, "], found ", t.rank));
    if (t.rank > 0 && !t.shape)
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": shape is NULL with rank ", t.rank));
    llmc::rt::DeviceTensor d;
    if (!toRt(t.dtype, &d.dtype))
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": unknown dtype enum value ", static_cast<int>(t.dtype)));
    d.shape.assign(t.shape, t.shape + t.rank);
    for (int32_t k = 0; k < t.rank; ++k)
      if (t.shape[k] < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": negative dimension in shape ", dims(t.shape, t.rank)));
    if (t.strides) {
      // Row-major; the stride of a size-1 dim never addresses memory, so any
      // value is accepted there (as torch's is_contiguous does).
      int64_t expected = 1;
      for (int32_t k = t.rank - 1; k >= 0; --k) {
        if (t.shape[k] != 1 && t.strides[k] != expected)
          return absl::InvalidArgumentError(absl::StrCat(
              name, ": strides must be contiguous, found ",
              dims(t.strides, t.rank), " for shape ", dims(t.shape, t.rank),
              "; call .contiguous()"));
        expected *= t.shape[k];
      }
    }
    d.dptr = reinterpret_cast<uint64_t>(t.data);
    out.push_back(std::move(d));
  }
  return absl::OkStatus();
}

/// The signature of input (or output) `index` of `executable`;
/// InvalidArgument for a NULL handle or an index out of range.
absl::StatusOr<const llmc::rt::TensorSig *>
signatureAt(const llmc_executable_t *executable, int32_t index, bool input) {
  if (!executable)
    return absl::InvalidArgumentError("executable: NULL handle");
  const auto &sigs = input ? executable->exe->inputs : executable->exe->outputs;
  if (index < 0 || index >= static_cast<int32_t>(sigs.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("index: expected ", input ? "input" : "output",
                     " index in [0, ", sigs.size(), "), found ", index));
  return &sigs[index];
}

absl::Status signatureInfo(const llmc_executable_t *executable, int32_t index,
                           bool input, llmc_dtype *out_dtype, int32_t *out_rank,
                           int64_t *out_shape) {
  if (!executable)
    return absl::InvalidArgumentError("executable: NULL handle");
  if (!out_dtype || !out_rank || !out_shape)
    return absl::InvalidArgumentError(absl::StrCat(
        !out_dtype ? "out_dtype" : !out_rank ? "out_rank" : "out_shape",
        ": NULL output pointer"));
  auto at = signatureAt(executable, index, input);
  if (!at.ok())
    return at.status();
  const auto &sig = **at;
  const char *what = input ? "input" : "output";
  if (sig.shape.size() > LLMC_MAX_RANK)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", sig.name, "' has rank ", sig.shape.size(),
                     ", above LLMC_MAX_RANK (", LLMC_MAX_RANK, ")"));
  *out_dtype = toC(sig.dtype);
  *out_rank = static_cast<int32_t>(sig.shape.size());
  for (size_t k = 0; k < sig.shape.size(); ++k)
    out_shape[k] = sig.shape[k];
  return absl::OkStatus();
}

} // namespace

extern "C" {

LLMC_EXPORT const char *llmc_version(void) { return llmc::versionString(); }

LLMC_EXPORT void llmc_set_log_callback(llmc_log_callback callback,
                                       void *user_data) {
  llmc::rt::SetLogSink(callback, user_data);
}

/*--- status -----------------------------------------------------------------*/
LLMC_EXPORT int llmc_status_code(const llmc_status_t *status) {
  return status ? status->code : 0;
}

LLMC_EXPORT const char *llmc_status_message(const llmc_status_t *status) {
  return status ? status->message.c_str() : "";
}

LLMC_EXPORT void llmc_status_free(llmc_status_t *status) { delete status; }

/*--- compiler -----------------------------------------------------------------*/
LLMC_EXPORT llmc_status_t *llmc_compiler_create(const char *options,
                                                llmc_compiler_t **out_compiler) {
  return guarded("llmc_compiler_create", [&]() -> absl::Status {
    if (!out_compiler)
      return absl::InvalidArgumentError("out_compiler: NULL output pointer");
    *out_compiler = nullptr;
    auto kv = parseKeyValues(options, ';', "options");
    if (!kv.ok())
      return kv.status();
    llmc::CompilerOptions co;
    for (const auto &[key, value] : *kv) {
      if (key == "arch") {
        co.arch = value;
      } else if (key == "fuse") {
        auto b = parseBool(key, value, "options");
        if (!b.ok())
          return b.status();
        co.fuse = *b;
      } else if (key == "cache_dir") {
        co.cache_dir = value;
      } else if (key == "precision") {
        co.precision = value;
      } else if (key == "weight_only") {
        co.weight_only = value;
      } else if (key == "fp8_scaling") {
        co.fp8_scaling = value;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "options: unknown key '", key,
            "' (expected arch, fuse, cache_dir, precision, fp8_scaling, "
            "weight_only)"));
      }
    }
    auto compiler = llmc::Compiler::Create(co);
    if (!compiler.ok())
      return compiler.status();
    *out_compiler = new llmc_compiler_t{std::move(*compiler)};
    return absl::OkStatus();
  });
}

LLMC_EXPORT void llmc_compiler_release(llmc_compiler_t *compiler) {
  delete compiler;
}

LLMC_EXPORT llmc_status_t *llmc_compile(llmc_compiler_t *compiler,
                                        const char *mlir, size_t mlir_len,
                                        const char *function,
                                        const char *shape_bindings,
                                        llmc_executable_t **out_executable) {
  return guarded("llmc_compile", [&]() -> absl::Status {
    if (!out_executable)
      return absl::InvalidArgumentError("out_executable: NULL output pointer");
    *out_executable = nullptr;
    if (!compiler)
      return absl::InvalidArgumentError("compiler: NULL handle");
    if (!mlir)
      return absl::InvalidArgumentError("mlir: NULL text");
    auto kv = parseKeyValues(shape_bindings, ',', "shape_bindings");
    if (!kv.ok())
      return kv.status();
    std::map<std::string, int64_t> bindings;
    for (const auto &[name, value] : *kv) {
      int64_t v;
      if (!absl::SimpleAtoi(value, &v) || v < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "shape_bindings: ", name, " expects a non-negative integer, found '",
            value, "'"));
      bindings[name] = v;
    }
    auto exe = compiler->compiler->Compile(std::string_view(mlir, mlir_len),
                                           function ? function : "", bindings);
    if (!exe.ok())
      return exe.status();
    *out_executable = new llmc_executable_t{std::move(*exe)};
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_executable_load(const char *path,
                                                llmc_executable_t **out_executable) {
  return guarded("llmc_executable_load", [&]() -> absl::Status {
    if (!out_executable)
      return absl::InvalidArgumentError("out_executable: NULL output pointer");
    *out_executable = nullptr;
    if (!path)
      return absl::InvalidArgumentError("path: NULL");
    auto exe = llmc::rt::LoadExecutable(path);
    if (!exe.ok())
      return exe.status();
    *out_executable = new llmc_executable_t{
        std::make_shared<const llmc::rt::Executable>(std::move(*exe))};
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_executable_save(const llmc_executable_t *executable,
                                                const char *path) {
  return guarded("llmc_executable_save", [&]() -> absl::Status {
    if (!executable)
      return absl::InvalidArgumentError("executable: NULL handle");
    if (!path || !*path)
      return absl::InvalidArgumentError(path ? "path: empty" : "path: NULL");
    return llmc::rt::SaveExecutable(*executable->exe, path);
  });
}

LLMC_EXPORT void llmc_executable_release(llmc_executable_t *executable) {
  delete executable;
}

/* -1 for a NULL handle. */
LLMC_EXPORT int32_t llmc_executable_num_inputs(const llmc_executable_t *executable) {
  return executable ? static_cast<int32_t>(executable->exe->inputs.size()) : -1;
}

LLMC_EXPORT int32_t llmc_executable_num_outputs(const llmc_executable_t *executable) {
  return executable ? static_cast<int32_t>(executable->exe->outputs.size()) : -1;
}

LLMC_EXPORT llmc_status_t *
llmc_executable_input_info(const llmc_executable_t *executable, int32_t index,
                           llmc_dtype *out_dtype, int32_t *out_rank,
                           int64_t *out_shape) {
  return guarded("llmc_executable_input_info", [&] {
    return signatureInfo(executable, index, true, out_dtype, out_rank, out_shape);
  });
}

LLMC_EXPORT llmc_status_t *
llmc_executable_output_info(const llmc_executable_t *executable, int32_t index,
                            llmc_dtype *out_dtype, int32_t *out_rank,
                            int64_t *out_shape) {
  return guarded("llmc_executable_output_info", [&] {
    return signatureInfo(executable, index, false, out_dtype, out_rank, out_shape);
  });
}

LLMC_EXPORT llmc_status_t *
llmc_executable_input_is_parameter(const llmc_executable_t *executable,
                                   int32_t index, int32_t *out_is_parameter) {
  return guarded("llmc_executable_input_is_parameter", [&]() -> absl::Status {
    if (executable && !out_is_parameter)
      return absl::InvalidArgumentError("out_is_parameter: NULL output pointer");
    auto sig = signatureAt(executable, index, /*input=*/true);
    if (!sig.ok())
      return sig.status();
    *out_is_parameter = (*sig)->parameter ? 1 : 0;
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_executable_output_alias_input(const llmc_executable_t *executable,
                                   int32_t index, int32_t *out_input) {
  return guarded("llmc_executable_output_alias_input", [&]() -> absl::Status {
    if (executable && !out_input)
      return absl::InvalidArgumentError("out_input: NULL output pointer");
    auto sig = signatureAt(executable, index, /*input=*/false);
    if (!sig.ok())
      return sig.status();
    *out_input = (*sig)->alias_input;
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_executable_stats(const llmc_executable_t *executable,
                                                 int64_t *out_counts, int32_t n) {
  return guarded("llmc_executable_stats", [&]() -> absl::Status {
    if (!executable)
      return absl::InvalidArgumentError("executable: NULL handle");
    if (n < 0 || n > LLMC_EXECUTABLE_STATS)
      return absl::InvalidArgumentError(absl::StrCat(
          "n: expected 0..", LLMC_EXECUTABLE_STATS, ", found ", n));
    if (n > 0 && !out_counts)
      return absl::InvalidArgumentError("out_counts: NULL output pointer");
    const llmc::rt::Executable &exe = *executable->exe;
    int64_t counts[LLMC_EXECUTABLE_STATS] = {};
    counts[0] = static_cast<int64_t>(exe.kernels.size());
    const size_t first = static_cast<size_t>(std::max(exe.num_prepare_launches, 0));
    for (size_t i = 0; i < exe.launches.size(); ++i) {
      const llmc::rt::Launch &l = exe.launches[i];
      if (i < first) {
        ++counts[2];
        continue;
      }
      ++counts[1];
      counts[3] += l.kind == llmc::rt::Launch::Gemm;
      counts[4] += l.kind == llmc::rt::Launch::Kernel && l.attention >= 0;
      counts[5] += l.kind == llmc::rt::Launch::Collective;
    }
    counts[6] = exe.arena_bytes;
    std::copy(counts, counts + n, out_counts);
    return absl::OkStatus();
  });
}

/*--- session ------------------------------------------------------------------*/
namespace {
llmc_status_t *createSession(const char *fn, const llmc_executable_t *executable,
                             int32_t device_ordinal,
                             llmc_communicator_t *communicator,
                             const char *options, llmc_session_t **out_session) {
  return guarded(fn, [&]() -> absl::Status {
    if (!out_session)
      return absl::InvalidArgumentError("out_session: NULL output pointer");
    *out_session = nullptr;
    if (!executable)
      return absl::InvalidArgumentError("executable: NULL handle");
    if (communicator)
      device_ordinal = communicator->comm->device()->ordinal();
    if (device_ordinal < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "device_ordinal: expected >= 0, found ", device_ordinal));
    auto kv = parseKeyValues(options, ';', "options");
    if (!kv.ok())
      return kv.status();
    llmc::rt::SessionOptions so;
    for (const auto &[key, value] : *kv) {
      if (key == "cuda_graphs") {
        auto b = parseBool(key, value, "options");
        if (!b.ok())
          return b.status();
        so.use_cuda_graphs = *b;
      } else if (key == "staged_inputs") {
        for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
          int index = -1;
          if (!absl::SimpleAtoi(item, &index) || index < 0)
            return absl::InvalidArgumentError(absl::StrCat(
                "options: staged_inputs: expected input indices >= 0 separated "
                "by ',', found '", value, "'"));
          so.staged_inputs.push_back(index);
        }
      } else if (key == "staged_output_bytes") {
        int64_t bytes = -1;
        if (!absl::SimpleAtoi(value, &bytes) || bytes < 0)
          return absl::InvalidArgumentError(absl::StrCat(
              "options: staged_output_bytes: expected bytes >= 0, found '", value, "'"));
        so.staged_output_bytes = bytes;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "options: unknown key '", key,
            "' (expected cuda_graphs, staged_inputs or staged_output_bytes)"));
      }
    }
    std::shared_ptr<llmc::rt::Device> device;
    if (communicator) {
      device = communicator->comm->device();
      so.communicator = communicator->comm;
    } else {
      auto opened = llmc::rt::Device::Open(device_ordinal);
      if (!opened.ok())
        return opened.status();
      device = *opened;
    }
    auto session = llmc::rt::Session::Load(device, executable->exe, so);
    if (!session.ok())
      return session.status();
    *out_session = new llmc_session_t{std::move(device), std::move(*session)};
    return absl::OkStatus();
  });
}
} // namespace

LLMC_EXPORT llmc_status_t *llmc_session_create(const llmc_executable_t *executable,
                                               int32_t device_ordinal,
                                               const char *options,
                                               llmc_session_t **out_session) {
  return createSession("llmc_session_create", executable, device_ordinal,
                       nullptr, options, out_session);
}

LLMC_EXPORT llmc_status_t *llmc_session_create_with_communicator(
    const llmc_executable_t *executable, llmc_communicator_t *communicator,
    const char *options, llmc_session_t **out_session) {
  if (!communicator) {
    if (out_session)
      *out_session = nullptr;
    return invalid("communicator: NULL handle");
  }
  return createSession("llmc_session_create_with_communicator", executable, 0,
                       communicator, options, out_session);
}

/*--- NCCL communicators -------------------------------------------------------*/
LLMC_EXPORT llmc_status_t *llmc_nccl_get_unique_id(llmc_nccl_unique_id *out_id) {
  return guarded("llmc_nccl_get_unique_id", [&]() -> absl::Status {
    if (!out_id)
      return absl::InvalidArgumentError("out_id: NULL output pointer");
    static_assert(sizeof(out_id->internal) == llmc::rt::NcclUniqueId::kBytes);
    auto id = llmc::rt::Communicator::GetUniqueId();
    if (!id.ok())
      return id.status();
    std::memcpy(out_id->internal, id->bytes, sizeof(out_id->internal));
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_communicator_create(const llmc_nccl_unique_id *id, int32_t rank,
                         int32_t nranks, int32_t device_ordinal,
                         double timeout_seconds,
                         llmc_communicator_t **out_communicator) {
  return guarded("llmc_communicator_create", [&]() -> absl::Status {
    if (!out_communicator)
      return absl::InvalidArgumentError("out_communicator: NULL output pointer");
    *out_communicator = nullptr;
    if (!id)
      return absl::InvalidArgumentError("id: NULL pointer");
    if (nranks < 1)
      return absl::InvalidArgumentError(
          absl::StrCat("nranks: expected >= 1, found ", nranks));
    if (rank < 0 || rank >= nranks)
      return absl::InvalidArgumentError(absl::StrCat(
          "rank: expected 0 <= rank < nranks = ", nranks, ", found ", rank));
    if (device_ordinal < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "device_ordinal: expected >= 0, found ", device_ordinal));
    if (!(timeout_seconds >= 0) || timeout_seconds > 1e7)
      return absl::InvalidArgumentError(absl::StrCat(
          "timeout_seconds: expected 0 (default) or a positive number of "
          "seconds, found ",
          timeout_seconds));
    absl::Duration timeout = timeout_seconds == 0
                                 ? absl::Minutes(5)
                                 : absl::Seconds(timeout_seconds);
    llmc::rt::NcclUniqueId uid;
    std::memcpy(uid.bytes, id->internal, sizeof(uid.bytes));
    auto device = llmc::rt::Device::Open(device_ordinal);
    if (!device.ok())
      return device.status();
    auto comm =
        llmc::rt::Communicator::Create(*device, uid, rank, nranks, timeout);
    if (!comm.ok())
      return comm.status();
    *out_communicator = new llmc_communicator_t{std::move(*comm)};
    return absl::OkStatus();
  });
}

LLMC_EXPORT void llmc_communicator_release(llmc_communicator_t *communicator) {
  if (!communicator)
    return;
  try {
    delete communicator;
  } catch (...) {
  }
}

LLMC_EXPORT int32_t
llmc_communicator_rank(const llmc_communicator_t *communicator) {
  return communicator ? communicator->comm->rank() : -1;
}

LLMC_EXPORT int32_t
llmc_communicator_nranks(const llmc_communicator_t *communicator) {
  return communicator ? communicator->comm->nranks() : -1;
}

LLMC_EXPORT llmc_status_t *
llmc_communicator_wait(llmc_communicator_t *communicator, void *cuda_stream) {
  return guarded("llmc_communicator_wait", [&]() -> absl::Status {
    if (!communicator)
      return absl::InvalidArgumentError("communicator: NULL handle");
    return communicator->comm->Wait(static_cast<CUstream>(cuda_stream),
                                    "the work on the stream");
  });
}

LLMC_EXPORT void llmc_session_release(llmc_session_t *session) {
  if (!session)
    return;
  try {
    delete session;
  } catch (...) {
    // A destructor must not throw; nothing to report through a void API.
  }
}

LLMC_EXPORT llmc_status_t *llmc_session_run(llmc_session_t *session,
                                            const llmc_tensor *inputs,
                                            int32_t num_inputs,
                                            const llmc_tensor *outputs,
                                            int32_t num_outputs,
                                            void *cuda_stream) {
  return guarded("llmc_session_run", [&]() -> absl::Status {
    if (!session)
      return absl::InvalidArgumentError("session: NULL handle");
    const llmc::rt::Executable &exe = session->session->executable();
    std::vector<llmc::rt::DeviceTensor> in, out;
    if (auto s = convertTensors(inputs, num_inputs, "input", exe.inputs, in);
        !s.ok())
      return s;
    if (auto s = convertTensors(outputs, num_outputs, "output", exe.outputs, out);
        !s.ok())
      return s;
    return session->session->Run(in, out, static_cast<CUstream>(cuda_stream));
  });
}

LLMC_EXPORT llmc_status_t *llmc_session_graph_stats(llmc_session_t *session,
                                                    int64_t *out_counts,
                                                    char *out_reason,
                                                    size_t reason_bytes) {
  return guarded("llmc_session_graph_stats", [&]() -> absl::Status {
    if (!session)
      return absl::InvalidArgumentError("session: NULL handle");
    if (!out_counts)
      return absl::InvalidArgumentError("out_counts: NULL output pointer");
    llmc::rt::Session::GraphStats st = session->session->graph_stats();
    const int64_t counts[7] = {st.captures, st.instantiations,      st.updates,
                               st.replays,  st.launches,            st.private_stream_runs,
                               st.cached};
    std::memcpy(out_counts, counts, sizeof(counts));
    if (out_reason && reason_bytes > 0) {
      size_t n = std::min(reason_bytes - 1, st.disabled_reason.size());
      std::memcpy(out_reason, st.disabled_reason.data(), n);
      out_reason[n] = '\0';
    }
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_session_invalidate_parameters(llmc_session_t *session) {
  return guarded("llmc_session_invalidate_parameters", [&]() -> absl::Status {
    if (!session)
      return absl::InvalidArgumentError("session: NULL handle");
    session->session->InvalidateParameters();
    return absl::OkStatus();
  });
}

/*--- KV page pool ---------------------------------------------------------------*/
namespace {
absl::Status checkPool(const llmc_kv_page_pool_t *pool) {
  return pool ? absl::OkStatus()
              : absl::InvalidArgumentError("pool: NULL handle");
}
} // namespace

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_create(const llmc_kv_page_pool_options *options,
                         llmc_kv_page_pool_t **out_pool) {
  return guarded("llmc_kv_page_pool_create", [&]() -> absl::Status {
    if (!out_pool)
      return absl::InvalidArgumentError("out_pool: NULL output pointer");
    *out_pool = nullptr;
    if (!options)
      return absl::InvalidArgumentError("options: NULL pointer");
    if (options->host_memory != 0 && options->host_memory != 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "options.host_memory: expected 0 or 1, found ", options->host_memory));
    llmc::rt::KvPagePoolOptions o;
    o.num_pages = options->num_pages;
    o.page_size = options->page_size;
    o.num_layers = options->num_layers;
    o.num_kv_heads = options->num_kv_heads;
    o.head_dim = options->head_dim;
    o.element_bytes = options->element_bytes;
    // Named as this API's fields, and before a device is opened.
    if (auto s = llmc::rt::KvPagePool::ValidateOptions(o, "options"); !s.ok())
      return s;
    auto handle = std::make_unique<llmc_kv_page_pool_t>();
    llmc::rt::MemoryPool *memory = nullptr;
    if (options->host_memory) {
      handle->host_memory = std::make_unique<llmc::rt::MemoryPool>(
          std::make_unique<llmc::rt::FakeDeviceAllocator>());
      memory = handle->host_memory.get();
      o.copy_page = llmc::rt::HostPageCopy();
    } else {
      if (options->device_ordinal < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("options.device_ordinal: expected >= 0, found ",
                         options->device_ordinal));
      auto device = llmc::rt::Device::Open(options->device_ordinal);
      if (!device.ok())
        return device.status();
      handle->device = *device;
      memory = &handle->device->pool();
    }
    auto pool = llmc::rt::KvPagePool::Create(memory, std::move(o));
    if (!pool.ok())
      return pool.status();
    handle->pool = std::move(*pool);
    *out_pool = handle.release();
    return absl::OkStatus();
  });
}

LLMC_EXPORT void llmc_kv_page_pool_release(llmc_kv_page_pool_t *pool) {
  if (!pool)
    return;
  try {
    delete pool;
  } catch (...) {
  }
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_pages(const llmc_kv_page_pool_t *pool, int64_t layer,
                        uint64_t *out_key_pages, uint64_t *out_value_pages) {
  return guarded("llmc_kv_page_pool_pages", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    const int64_t layers = pool->pool->options().num_layers;
    if (layer < 0 || layer >= layers)
      return absl::InvalidArgumentError(absl::StrCat(
          "layer: expected 0 <= layer < ", layers, ", found ", layer));
    if (out_key_pages)
      *out_key_pages = pool->pool->KeyPages(layer);
    if (out_value_pages)
      *out_value_pages = pool->pool->ValuePages(layer);
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_add_sequence(llmc_kv_page_pool_t *pool, int64_t *out_sequence) {
  return guarded("llmc_kv_page_pool_add_sequence", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (!out_sequence)
      return absl::InvalidArgumentError("out_sequence: NULL output pointer");
    *out_sequence = pool->pool->AddSequence();
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_kv_page_pool_append(llmc_kv_page_pool_t *pool,
                                                    int64_t sequence,
                                                    int64_t num_tokens,
                                                    int64_t *out_slots) {
  return guarded("llmc_kv_page_pool_append", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (num_tokens > 0 && !out_slots)
      return absl::InvalidArgumentError(absl::StrCat(
          "out_slots: NULL output pointer with num_tokens = ", num_tokens));
    auto slots = pool->pool->Append(sequence, num_tokens);
    if (!slots.ok())
      return slots.status();
    std::copy(slots->begin(), slots->end(), out_slots);
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_kv_page_pool_fork(llmc_kv_page_pool_t *pool,
                                                  int64_t sequence,
                                                  int64_t *out_sequence) {
  return guarded("llmc_kv_page_pool_fork", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (!out_sequence)
      return absl::InvalidArgumentError("out_sequence: NULL output pointer");
    auto forked = pool->pool->Fork(sequence);
    if (!forked.ok())
      return forked.status();
    *out_sequence = *forked;
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_release_sequence(llmc_kv_page_pool_t *pool, int64_t sequence) {
  return guarded("llmc_kv_page_pool_release_sequence", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    return pool->pool->Release(sequence);
  });
}

LLMC_EXPORT llmc_status_t *llmc_kv_page_pool_truncate(llmc_kv_page_pool_t *pool,
                                                      int64_t sequence,
                                                      int64_t length) {
  return guarded("llmc_kv_page_pool_truncate", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    return pool->pool->Truncate(sequence, length);
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_length(const llmc_kv_page_pool_t *pool, int64_t sequence,
                         int64_t *out_length) {
  return guarded("llmc_kv_page_pool_length", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (!out_length)
      return absl::InvalidArgumentError("out_length: NULL output pointer");
    auto length = pool->pool->Length(sequence);
    if (!length.ok())
      return length.status();
    *out_length = *length;
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_block_table(const llmc_kv_page_pool_t *pool, int64_t sequence,
                              int32_t *out_pages, int64_t capacity,
                              int64_t *out_num_pages) {
  return guarded("llmc_kv_page_pool_block_table", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (!out_num_pages)
      return absl::InvalidArgumentError("out_num_pages: NULL output pointer");
    if (capacity < 0 || (capacity > 0 && !out_pages))
      return absl::InvalidArgumentError(absl::StrCat(
          "out_pages/capacity: expected an array of capacity >= 0 entries, "
          "found ", out_pages ? "an array" : "NULL", " with capacity ", capacity));
    auto table = pool->pool->BlockTable(sequence);
    if (!table.ok())
      return table.status();
    const int64_t n = static_cast<int64_t>(table->size());
    *out_num_pages = n;
    if (!out_pages)
      return absl::OkStatus();
    if (capacity < n)
      return absl::InvalidArgumentError(absl::StrCat(
          "capacity: sequence ", sequence, " has ", n,
          " pages, out_pages holds ", capacity));
    std::copy(table->begin(), table->end(), out_pages);
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_kv_page_pool_fill_batch_metadata(
    const llmc_kv_page_pool_t *pool, const int64_t *sequences,
    int64_t num_sequences, int64_t max_pages, int32_t *out_block_table,
    int32_t *out_seq_lens) {
  return guarded("llmc_kv_page_pool_fill_batch_metadata", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (num_sequences < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "num_sequences: expected >= 0, found ", num_sequences));
    if (max_pages < 1)
      return absl::InvalidArgumentError(
          absl::StrCat("max_pages: expected >= 1, found ", max_pages));
    if (num_sequences > 0 && (!sequences || !out_block_table || !out_seq_lens))
      return absl::InvalidArgumentError(absl::StrCat(
          !sequences ? "sequences" : !out_block_table ? "out_block_table"
                                                       : "out_seq_lens",
          ": NULL with num_sequences = ", num_sequences));
    if (num_sequences > std::numeric_limits<int64_t>::max() / max_pages)
      return absl::InvalidArgumentError(absl::StrCat(
          "num_sequences x max_pages overflows: ", num_sequences, " x ",
          max_pages));
    const size_t n = static_cast<size_t>(num_sequences);
    return pool->pool->FillBatchMetadata(
        absl::MakeConstSpan(sequences, n), max_pages,
        absl::MakeSpan(out_block_table, n * static_cast<size_t>(max_pages)),
        absl::MakeSpan(out_seq_lens, n));
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_apply_pending_copies(llmc_kv_page_pool_t *pool,
                                       void *cuda_stream) {
  return guarded("llmc_kv_page_pool_apply_pending_copies", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (pool->device)
      if (auto s = pool->device->MakeCurrent(); !s.ok())
        return s;
    return pool->pool->ApplyPendingCopies(static_cast<CUstream>(cuda_stream));
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_take_pending_copies(llmc_kv_page_pool_t *pool,
                                      int64_t *out_pairs, int64_t capacity,
                                      int64_t *out_num_copies) {
  return guarded("llmc_kv_page_pool_take_pending_copies", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (!out_num_copies)
      return absl::InvalidArgumentError("out_num_copies: NULL output pointer");
    if (capacity < 0 || (capacity > 0 && !out_pairs))
      return absl::InvalidArgumentError(absl::StrCat(
          "out_pairs/capacity: expected an array of 2 x capacity >= 0 entries, "
          "found ", out_pairs ? "an array" : "NULL", " with capacity ", capacity));
    if (!out_pairs) {
      *out_num_copies = pool->pool->NumPendingCopies();
      return absl::OkStatus();
    }
    std::vector<llmc::rt::PageCopy> copies =
        pool->pool->TakePendingCopies(static_cast<size_t>(capacity));
    for (size_t i = 0; i < copies.size(); ++i) {
      out_pairs[2 * i] = copies[i].src;
      out_pairs[2 * i + 1] = copies[i].dst;
    }
    *out_num_copies = static_cast<int64_t>(copies.size());
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *llmc_kv_page_pool_stats(const llmc_kv_page_pool_t *pool,
                                                   int64_t *out_counts, int32_t n,
                                                   double *out_waste) {
  return guarded("llmc_kv_page_pool_stats", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    if (n < 0 || n > LLMC_KV_PAGE_POOL_STATS)
      return absl::InvalidArgumentError(absl::StrCat(
          "n: expected 0..", LLMC_KV_PAGE_POOL_STATS, ", found ", n));
    if (n > 0 && !out_counts)
      return absl::InvalidArgumentError("out_counts: NULL output pointer");
    llmc::rt::KvPagePoolStats st = pool->pool->Stats();
    const int64_t counts[LLMC_KV_PAGE_POOL_STATS] = {
        st.num_pages,     st.free_pages, st.used_pages,
        st.shared_pages,  st.num_sequences, st.tokens,
        st.filled_slots,  st.pending_copies, st.copies_on_write};
    std::copy(counts, counts + n, out_counts);
    if (out_waste)
      *out_waste = st.waste;
    return absl::OkStatus();
  });
}

LLMC_EXPORT llmc_status_t *
llmc_kv_page_pool_check_invariants(const llmc_kv_page_pool_t *pool) {
  return guarded("llmc_kv_page_pool_check_invariants", [&]() -> absl::Status {
    if (auto s = checkPool(pool); !s.ok())
      return s;
    return pool->pool->CheckInvariants();
  });
}

//--- serving engine ----------------------------------------------------------

llmc_status_t *llmc_serving_engine_create(llmc_compiler_t *compiler, const char *mlir,
                                          const char *function, const llmc_tensor *weights,
                                          int64_t num_weights,
                                          const llmc_serving_engine_options *options,
                                          llmc_serving_engine_t **out_engine) {
  namespace rt = llmc::rt;
  namespace ref = llmc::reference;
  return guarded("llmc_serving_engine_create", [&]() -> absl::Status {
    if (!out_engine)
      return absl::InvalidArgumentError("out_engine: NULL output pointer");
    *out_engine = nullptr;
    if (!options)
      return absl::InvalidArgumentError("options: NULL pointer");
    if (!mlir)
      return absl::InvalidArgumentError("mlir: NULL pointer");
    for (auto [name, v] : {std::pair{"reference", options->reference},
                           std::pair{"use_cuda_graphs", options->use_cuda_graphs}})
      if (v != 0 && v != 1)
        return absl::InvalidArgumentError(
            absl::StrCat("options.", name, ": expected 0 or 1, found ", v));
    if (!options->reference && !compiler)
      return absl::InvalidArgumentError(
          "compiler: NULL; the GPU engine compiles its token buckets with it (NULL only "
          "with options.reference = 1)");
    if (options->max_sequences < 1 || options->max_batch_tokens < options->max_sequences)
      return absl::InvalidArgumentError(absl::StrCat(
          "options.max_sequences = ", options->max_sequences, ", options.max_batch_tokens = ",
          options->max_batch_tokens,
          ": expected max_sequences >= 1 and max_batch_tokens >= max_sequences"));
    rt::StepBucketing bucketing =
        rt::StepBucketing::Default(options->max_batch_tokens, options->max_sequences);
    if (options->token_buckets) {
      if (options->num_token_buckets < 1)
        return absl::InvalidArgumentError(absl::StrCat(
            "options.num_token_buckets: expected >= 1, found ", options->num_token_buckets));
      bucketing.token_buckets.assign(options->token_buckets,
                                     options->token_buckets + options->num_token_buckets);
    }
    if (absl::Status st = bucketing.Validate(); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat("options.token_buckets: ", st.message()));
    if (bucketing.token_buckets.back() < options->max_batch_tokens)
      return absl::InvalidArgumentError(absl::StrCat(
          "options.token_buckets: the largest (", bucketing.token_buckets.back(),
          ") is below options.max_batch_tokens (", options->max_batch_tokens, ")"));
    if (num_weights < 0 || (num_weights > 0 && !weights))
      return absl::InvalidArgumentError(
          absl::StrCat("weights: NULL or num_weights < 0 (", num_weights, ")"));

    auto h = std::make_unique<llmc_serving_engine_t>();
    h->context = llmc::makeCompilerContext();
    auto fn = llmc::parseFunction(h->context.get(), mlir, function ? function : "", h->module);
    if (!fn.ok())
      return fn.status();
    auto layout = ref::readServingStepPages(*fn);
    if (!layout.ok())
      return layout.status();
    h->max_tokens_per_sequence = layout->max_pages * layout->page_size;
    // The weights against the function's arguments from 6 + 2L on.
    const int64_t first = 6 + 2 * layout->num_layers;
    const int64_t want = static_cast<int64_t>(fn->getNumArguments()) - first;
    if (num_weights != want)
      return absl::InvalidArgumentError(absl::StrCat(
          "num_weights: the serving step takes ", want, " weights (arguments ", first,
          " on), found ", num_weights));
    std::vector<rt::TensorSig> sigs;
    for (int64_t i = 0; i < want; ++i) {
      auto type = mlir::cast<mlir::RankedTensorType>(fn->getArgumentTypes()[first + i]);
      auto dtype = llmc::toRuntimeDType(type.getElementType());
      if (!dtype.ok() || !type.hasStaticShape())
        return absl::InvalidArgumentError(absl::StrCat(
            "argument ", first + i, " of the serving step: expected a static tensor of a "
            "type the runtime stores"));
      sigs.push_back({absl::StrCat("arg", first + i), *dtype,
                      std::vector<int64_t>(type.getShape().begin(), type.getShape().end())});
    }
    std::vector<rt::DeviceTensor> tensors;
    if (auto st = convertTensors(weights, static_cast<int32_t>(num_weights), "weight", sigs,
                                 tensors);
        !st.ok())
      return st;
    if (auto st = rt::CheckTensors(sigs, tensors, "weight"); !st.ok())
      return st;

    rt::KvPagePoolOptions po = layout->poolOptions();
    if (options->reference) {
      h->host_memory = std::make_unique<rt::MemoryPool>(std::make_unique<rt::FakeDeviceAllocator>());
      po.copy_page = rt::HostPageCopy();
      auto pool = rt::KvPagePool::Create(h->host_memory.get(), po);
      if (!pool.ok())
        return pool.status();
      h->pool = std::move(*pool);
      ref::poisonHostPages(*h->pool);
      std::vector<ref::HostTensor> host;
      for (size_t i = 0; i < tensors.size(); ++i) {
        auto type = mlir::cast<mlir::RankedTensorType>(fn->getArgumentTypes()[first + i]);
        std::string_view bytes(reinterpret_cast<const char *>(tensors[i].dptr),
                               static_cast<size_t>(sigs[i].Bytes()));
        host.push_back(ref::fromStorage(bytes, type.getElementType(), sigs[i].shape));
      }
      auto model = ref::ReferenceStepModel::create(*fn, std::move(host), h->pool.get(), bucketing);
      if (!model.ok())
        return model.status();
      h->model = std::move(*model);
    } else {
      if (options->device_ordinal < 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "options.device_ordinal: expected >= 0, found ", options->device_ordinal));
      auto device = rt::Device::Open(options->device_ordinal);
      if (!device.ok())
        return device.status();
      h->device = *device;
      auto stream = h->device->CreateStream();
      if (!stream.ok())
        return stream.status();
      h->stream = *stream;
      auto pool = rt::KvPagePool::Create(&h->device->pool(), po, h->stream);
      if (!pool.ok())
        return pool.status();
      h->pool = std::move(*pool);
      h->compiler = compiler->compiler;
      auto factory = llmc::ServingStepFactory(h->compiler, mlir, fn->getSymName().str());
      rt::SessionStepModelOptions mo;
      mo.bucketing = bucketing;
      mo.max_pages = layout->max_pages;
      mo.session.use_cuda_graphs = options->use_cuda_graphs != 0;
      mo.stream = h->stream;
      auto model = rt::SessionStepModel::Create(h->device, h->pool.get(), factory,
                                                std::move(tensors), mo);
      if (!model.ok())
        return model.status();
      h->gpu_model = model->get();
      h->model = std::move(*model);
    }
    rt::EngineOptions eo;
    eo.max_batch_tokens = options->max_batch_tokens;
    eo.max_sequences = options->max_sequences;
    eo.vocab = layout->vocab;
    eo.stream = h->stream;
    auto engine = rt::ServingEngine::Create(h->pool.get(), h->model.get(), eo);
    if (!engine.ok())
      return engine.status();
    h->engine = std::move(*engine);
    *out_engine = h.release();
    return absl::OkStatus();
  });
}

void llmc_serving_engine_release(llmc_serving_engine_t *engine) { delete engine; }

llmc_status_t *llmc_serving_engine_warmup(llmc_serving_engine_t *engine) {
  return guarded("llmc_serving_engine_warmup", [&]() -> absl::Status {
    if (!engine)
      return absl::InvalidArgumentError("engine: NULL handle");
    std::lock_guard<std::mutex> lock(engine->mu);
    return engine->gpu_model ? engine->gpu_model->Warmup() : absl::OkStatus();
  });
}

llmc_status_t *llmc_serving_engine_add_request(llmc_serving_engine_t *engine, int64_t id,
                                               const int32_t *prompt, int64_t prompt_len,
                                               const llmc_sampling_params *params) {
  return guarded("llmc_serving_engine_add_request", [&]() -> absl::Status {
    if (!engine)
      return absl::InvalidArgumentError("engine: NULL handle");
    if (!params)
      return absl::InvalidArgumentError("params: NULL pointer");
    if (prompt_len < 1 || !prompt)
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt: expected >= 1 tokens, found ", prompt ? prompt_len : 0, " (request ", id, ")"));
    if (params->num_stop_tokens < 0 || (params->num_stop_tokens > 0 && !params->stop_tokens))
      return absl::InvalidArgumentError(absl::StrCat(
          "params.stop_tokens: NULL or num_stop_tokens < 0 (", params->num_stop_tokens, ")"));
    std::lock_guard<std::mutex> lock(engine->mu);
    if (params->max_new_tokens > engine->max_tokens_per_sequence ||
        prompt_len + params->max_new_tokens > engine->max_tokens_per_sequence)
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", id, " needs ", prompt_len, " + ", params->max_new_tokens,
          " tokens (prompt + max_new_tokens); the serving step's block table holds ",
          engine->max_tokens_per_sequence, " per sequence"));
    llmc::rt::Request r;
    r.id = id;
    r.prompt.assign(prompt, prompt + prompt_len);
    r.sampling.temperature = params->temperature;
    r.sampling.top_p = params->top_p;
    r.sampling.seed = params->seed;
    r.sampling.max_new_tokens = params->max_new_tokens;
    if (params->num_stop_tokens > 0)
      r.sampling.stop_tokens.assign(params->stop_tokens,
                                    params->stop_tokens + params->num_stop_tokens);
    return engine->engine->AddRequest(std::move(r));
  });
}

llmc_status_t *llmc_serving_engine_step(llmc_serving_engine_t *engine, int64_t *out_num_tokens,
                                        int64_t *out_num_finished) {
  return guarded("llmc_serving_engine_step", [&]() -> absl::Status {
    if (!engine)
      return absl::InvalidArgumentError("engine: NULL handle");
    std::lock_guard<std::mutex> lock(engine->mu);
    engine->last = {};
    engine->last_errors.clear();
    absl::StatusOr<llmc::rt::StepResult> r = engine->engine->Step();
    if (!r.ok())
      return r.status();
    engine->last = std::move(*r);
    engine->last_errors.clear();
    for (const llmc::rt::FinishedRequest &f : engine->last.finished)
      engine->last_errors.emplace_back(f.status.message());
    if (out_num_tokens)
      *out_num_tokens = static_cast<int64_t>(engine->last.tokens.size());
    if (out_num_finished)
      *out_num_finished = static_cast<int64_t>(engine->last.finished.size());
    return absl::OkStatus();
  });
}

llmc_status_t *llmc_serving_engine_step_token(llmc_serving_engine_t *engine, int64_t i,
                                              int64_t *out_request_id, int32_t *out_token) {
  return guarded("llmc_serving_engine_step_token", [&]() -> absl::Status {
    if (!engine)
      return absl::InvalidArgumentError("engine: NULL handle");
    std::lock_guard<std::mutex> lock(engine->mu);
    const auto &tokens = engine->last.tokens;
    if (i < 0 || i >= static_cast<int64_t>(tokens.size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "i: expected a token index in [0, ", tokens.size(), "), found ", i));
    if (out_request_id)
      *out_request_id = tokens[i].request_id;
    if (out_token)
      *out_token = tokens[i].token;
    return absl::OkStatus();
  });
}

llmc_status_t *llmc_serving_engine_step_finished(llmc_serving_engine_t *engine, int64_t i,
                                                 int64_t *out_request_id, int32_t *out_reason,
                                                 const int32_t **out_tokens,
                                                 int64_t *out_num_tokens,
                                                 const char **out_error) {
  return guarded("llmc_serving_engine_step_finished", [&]() -> absl::Status {
    if (!engine)
      return absl::InvalidArgumentError("engine: NULL handle");
    std::lock_guard<std::mutex> lock(engine->mu);
    const auto &finished = engine->last.finished;
    if (i < 0 || i >= static_cast<int64_t>(finished.size()))
      return absl::InvalidArgumentError(absl::StrCat(
          "i: expected a finished-request index in [0, ", finished.size(), "), found ", i));
    const llmc::rt::FinishedRequest &f = finished[i];
    if (out_request_id)
      *out_request_id = f.id;
    if (out_reason)
      *out_reason = f.reason == llmc::rt::FinishReason::stop_token      ? 0
                    : f.reason == llmc::rt::FinishReason::max_new_tokens ? 1
                                                                         : 2;
    if (out_tokens)
      *out_tokens = f.tokens.data();
    if (out_num_tokens)
      *out_num_tokens = static_cast<int64_t>(f.tokens.size());
    if (out_error)
      *out_error = engine->last_errors[i].c_str();
    return absl::OkStatus();
  });
}

llmc_status_t *llmc_serving_engine_has_work(llmc_serving_engine_t *engine, int32_t *out) {
  return guarded("llmc_serving_engine_has_work", [&]() -> absl::Status {
    if (!engine || !out)
      return absl::InvalidArgumentError("engine or out: NULL pointer");
    std::lock_guard<std::mutex> lock(engine->mu);
    *out = engine->engine->HasWork() ? 1 : 0;
    return absl::OkStatus();
  });
}

llmc_status_t *llmc_serving_engine_stats(llmc_serving_engine_t *engine, int64_t *out_counts,
                                         int32_t n, double *out_kv_waste) {
  return guarded("llmc_serving_engine_stats", [&]() -> absl::Status {
    if (!engine)
      return absl::InvalidArgumentError("engine: NULL handle");
    if (n < 0 || n > LLMC_SERVING_ENGINE_STATS || (n > 0 && !out_counts))
      return absl::InvalidArgumentError(absl::StrCat(
          "n: expected 0..", LLMC_SERVING_ENGINE_STATS, " with out_counts, found ", n));
    std::lock_guard<std::mutex> lock(engine->mu);
    const llmc::rt::ServingEngineStats s = engine->engine->Stats();
    const int64_t all[LLMC_SERVING_ENGINE_STATS] = {
        s.steps,           s.batched_tokens,  s.prefill_tokens,   s.decode_tokens,
        s.recomputed_tokens, s.max_step_tokens, s.partial_prefills, s.preemptions,
        s.requests_added,  s.requests_finished, s.requests_failed, s.generated_tokens,
        s.waiting,         s.running,         s.kv.num_pages,     s.kv.used_pages};
    std::copy_n(all, n, out_counts);
    if (out_kv_waste)
      *out_kv_waste = s.kv.waste;
    return absl::OkStatus();
  });
}

} // extern "C"
