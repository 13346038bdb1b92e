//===- ServeMain.cpp - llmc-serve: a request file through the serving engine -===//
//
// Serves the requests of a JSONL file with rt::ServingEngine (continuous
// batching, chunked prefill, a paged KV cache) over a serving-step function
// (llmc/runtime/ServingStep.h): on the GPU through rt::SessionStepModel
// (bucketed shapes, CUDA graphs) or on the CPU reference executor. Prints one
// JSON line per finished request (tokens, time to first token, time per
// output token, latency) and a summary (throughput, percentiles, KV memory
// allocated vs used).
//
//===----------------------------------------------------------------------===//

#include "llmc/Tools.h"

#include "CommandLine.h"
#include "RunMain.h"
#include "ToolSupport.h"

#include "llmc/Compiler.h"
#include "llmc/Reference/ServingStep.h"
#include "llmc/Support/DType.h"
#include "llmc/Support/ParseSource.h"
#include "llmc/Support/Version.h"
#include "llmc/runtime/Device.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/MemoryPool.h"
#include "llmc/runtime/ServingStep.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Parallel.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

using namespace mlir;
namespace cl = llvm::cl;
namespace rt = llmc::rt;
namespace ref = llmc::reference;

namespace {

int fail(const llvm::Twine &msg) {
  llvm::errs() << "llmc-serve: error: " << msg << "\n";
  return 1;
}

struct Timed {
  rt::Request request;
  double arrival_s = 0;
  int64_t line = 0;
};

/// The requests of a JSONL file: one object per line, {"id": int, "prompt":
/// [int], "max_new_tokens": int, "arrival_s": number, "temperature": number,
/// "top_p": number, "seed": int, "stop": [int]} (only id and prompt
/// required). Errors name the line and field.
absl::StatusOr<std::vector<Timed>> readRequests(const std::string &path) {
  rt::ReadOptions ro;
  ro.what = "request file";
  auto text = rt::ReadFile(path, ro);
  if (!text.ok())
    return text.status();
  std::vector<Timed> out;
  int64_t lineNo = 0;
  for (llvm::StringRef line : llvm::split(llvm::StringRef(*text), '\n')) {
    ++lineNo;
    line = line.trim();
    if (line.empty())
      continue;
    auto bad = [&](const llvm::Twine &what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", lineNo, ": ", what.str()));
    };
    // llvm::json::parse recurses once per level: bound the nesting first.
    if (auto deep = llmc::checkNesting(line))
      return bad("nested too deeply for a request (column " + llvm::Twine(deep->column) + ")");
    llvm::Expected<llvm::json::Value> v = llvm::json::parse(line);
    if (!v)
      return bad("not JSON: " + llvm::toString(v.takeError()));
    const llvm::json::Object *o = v->getAsObject();
    if (!o)
      return bad("expected a JSON object per line");
    static const char *const kKeys[] = {"id",          "prompt", "max_new_tokens", "arrival_s",
                                        "temperature", "top_p",  "seed",           "stop"};
    for (const auto &kv : *o)
      if (std::find(std::begin(kKeys), std::end(kKeys), kv.first.str()) == std::end(kKeys))
        return bad("unknown field \"" + kv.first.str() +
                   "\"; a request has id, prompt, max_new_tokens, arrival_s, temperature, "
                   "top_p, seed and stop");
    Timed t;
    t.line = lineNo;
    auto id = o->getInteger("id");
    if (!id)
      return bad("\"id\": missing or not an integer");
    t.request.id = *id;
    const llvm::json::Array *prompt = o->getArray("prompt");
    if (!prompt || prompt->empty())
      return bad("\"prompt\": missing, empty or not an array of token ids");
    for (const llvm::json::Value &tok : *prompt) {
      auto i = tok.getAsInteger();
      if (!i || *i < 0 || *i > INT32_MAX)
        return bad("\"prompt\"[" + llvm::Twine(t.request.prompt.size()) +
                   "]: expected a token id in [0, 2^31), found " +
                   llvm::formatv("{0}", tok).str());
      t.request.prompt.push_back(static_cast<int32_t>(*i));
    }
    rt::SamplingParams &s = t.request.sampling;
    if (const llvm::json::Value *m = o->get("max_new_tokens")) {
      if (!m->getAsInteger())
        return bad("\"max_new_tokens\": not an integer");
      s.max_new_tokens = *m->getAsInteger();
    }
    auto number = [&](const char *key, double &dst) -> absl::Status {
      if (const llvm::json::Value *x = o->get(key)) {
        if (!x->getAsNumber())
          return bad(llvm::Twine("\"") + key + "\": not a number");
        dst = *x->getAsNumber();
      }
      return absl::OkStatus();
    };
    double temperature = 0, topP = 1;
    for (auto [key, dst] : {std::pair{"arrival_s", &t.arrival_s},
                            std::pair{"temperature", &temperature},
                            std::pair{"top_p", &topP}})
      if (absl::Status st = number(key, *dst); !st.ok())
        return st;
    if (!(t.arrival_s >= 0 && t.arrival_s <= 1e7))
      return bad("\"arrival_s\": expected seconds in [0, 1e7], found " +
                 absl::StrCat(t.arrival_s));
    s.temperature = static_cast<float>(temperature);
    s.top_p = static_cast<float>(topP);
    if (const llvm::json::Value *x = o->get("seed")) {
      if (!x->getAsInteger())
        return bad("\"seed\": not an integer");
      s.seed = static_cast<uint64_t>(*x->getAsInteger());
    }
    if (const llvm::json::Value *x = o->get("stop")) {
      const llvm::json::Array *a = x->getAsArray();
      if (!a)
        return bad("\"stop\": not an array of token ids");
      for (const llvm::json::Value &tok : *a) {
        auto i = tok.getAsInteger();
        if (!i || *i < 0 || *i > INT32_MAX)
          return bad("\"stop\": expected token ids (integers >= 0)");
        s.stop_tokens.push_back(static_cast<int32_t>(*i));
      }
    }
    for (const Timed &o : out)
      if (o.request.id == t.request.id)
        return bad("\"id\": " + llvm::Twine(t.request.id) + " is also the id of line " +
                   llvm::Twine(o.line) + "; ids must be unique in the file");
    out.push_back(std::move(t));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Timed &a, const Timed &b) { return a.arrival_s < b.arrival_s; });
  return out;
}

/// Quantile q of `v` (nearest rank); 0 when empty.
double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

llvm::json::Object stats(const std::vector<double> &v) {
  double mean = 0;
  for (double x : v)
    mean += x;
  return llvm::json::Object{{"count", static_cast<int64_t>(v.size())},
                            {"mean", v.empty() ? 0.0 : mean / v.size()},
                            {"p50", quantile(v, 0.5)},
                            {"p90", quantile(v, 0.9)},
                            {"p99", quantile(v, 0.99)},
                            {"max", quantile(v, 1.0)}};
}

/// SplitMix64's finalizer (Steele et al., OOPSLA 2014).
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The storage of a random weight of `type`: matrices (an nn.Linear [out,
/// in] or an embedding) uniform with standard deviation 1/sqrt(columns),
/// vectors (norm weights) 1. Counter-based (seed, argument, element), so
/// it is the same for any thread count; f32, bf16 and f16 only.
absl::StatusOr<std::string> randomWeight(RankedTensorType type, rt::DType dtype, uint64_t seed,
                                         unsigned argument) {
  if (dtype != rt::DType::f32 && dtype != rt::DType::bf16 && dtype != rt::DType::f16)
    return absl::InvalidArgumentError(
        "weight argument " + std::to_string(argument) + " is " +
        llmc::tools::run::typeStr(type) +
        ": random weights are f32, bf16 or f16 only; give its values with --weights");
  const int64_t n = type.getNumElements(), size = rt::DTypeSize(dtype);
  const bool vector = type.getRank() < 2;
  const double bound =
      vector ? 0.0 : std::sqrt(3.0) / std::sqrt(double(type.getShape().back()));
  const uint64_t base = mix64(mix64(seed) ^ argument);
  std::string out(n * size, '\0');
  const int64_t chunk = 1 << 16;
  llvm::parallelFor(0, (n + chunk - 1) / chunk, [&](int64_t c) {
    for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
      float f = vector ? 1.0f
                       : static_cast<float>(
                             (double(mix64(base ^ static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53 *
                                  2.0 -
                              1.0) *
                             bound);
      char *dst = &out[i * size];
      if (dtype == rt::DType::f32) {
        std::memcpy(dst, &f, 4);
      } else if (dtype == rt::DType::bf16) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        u += 0x7fff + ((u >> 16) & 1);  // round to nearest even (f is finite)
        uint16_t h = static_cast<uint16_t>(u >> 16);
        std::memcpy(dst, &h, 2);
      } else {
        llvm::APFloat a(f);
        bool lost;
        a.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven, &lost);
        uint16_t h = static_cast<uint16_t>(a.bitcastToAPInt().getZExtValue());
        std::memcpy(dst, &h, 2);
      }
    }
  });
  return out;
}

absl::StatusOr<std::vector<int64_t>> parseBuckets(const std::string &text) {
  std::vector<int64_t> out;
  for (llvm::StringRef part : llvm::split(llvm::StringRef(text), ',')) {
    int64_t v;
    if (part.trim().getAsInteger(10, v))
      return absl::InvalidArgumentError("--token-buckets: '" + part.str() +
                                        "' is not an integer");
    out.push_back(v);
  }
  return out;
}

} // namespace

int llmc::serveMain(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::OptionCategory cat("llmc-serve options");
  cl::opt<std::string> input(cl::Positional, cl::desc("<step.mlir>"), cl::Required, cl::cat(cat));
  cl::opt<std::string> fnName("fn", cl::desc("serving-step function (default: the first)"),
                              cl::cat(cat));
  cl::opt<std::string> requestsPath(
      "requests", cl::Required, cl::cat(cat),
      cl::desc("JSONL file, one request per line: {\"id\": int, \"prompt\": [token ids], "
               "\"max_new_tokens\": int, \"arrival_s\": seconds, \"temperature\", "
               "\"top_p\", \"seed\", \"stop\": [token ids]}"));
  cl::opt<std::string> outPath("out", cl::desc("write one JSON line per finished request here "
                                               "(default: stdout)"),
                               cl::cat(cat));
  cl::opt<std::string> summaryPath("summary", cl::desc("write the summary JSON here"),
                                   cl::cat(cat));
  cl::opt<std::string> backend("backend", cl::desc("cuda or ref (the CPU reference executor)"),
                               cl::init("cuda"), cl::cat(cat));
  cl::opt<std::string> weightsDir(
      "weights",
      cl::desc("directory of DIR/arg<I>.bin, the raw little-endian storage of each weight "
               "argument I (default: random weights from --seed)"),
      cl::cat(cat));
  cl::opt<uint64_t> seed("seed", cl::desc("seed of the random weights"), cl::init(1),
                         cl::cat(cat));
  cl::opt<int64_t> maxBatchTokens("max-batch-tokens", cl::desc("token budget of a step"),
                                  cl::init(256), cl::cat(cat));
  cl::opt<int64_t> maxSeqs("max-seqs", cl::desc("running requests at most"), cl::init(32),
                           cl::cat(cat));
  cl::opt<std::string> buckets(
      "token-buckets",
      cl::desc("comma-separated token counts a step is padded to (default: powers of two "
               "below 64, multiples of 64 up to 512, then powers of two, and "
               "--max-batch-tokens; rt::StepBucketing::Default); 'none' with "
               "--backend=ref: no padding"),
      cl::cat(cat));
  cl::opt<bool> realtime("realtime",
                         cl::desc("add each request at its arrival_s after the start (wall "
                                  "clock); default: every request at the start"),
                         cl::cat(cat));
  cl::opt<bool> noGraphs("no-cuda-graphs", cl::desc("launch kernels one by one"), cl::cat(cat));
  cl::opt<std::string> weightOnly("weight-only", cl::desc("none, int8 or int4"),
                                  cl::init("none"), cl::cat(cat));
  cl::HideUnrelatedOptions(cat);
  cl::SetVersionPrinter(llmc::printVersion);
  cl::ParseCommandLineOptions(argc, argv,
                              "llmc-serve: serve a request file with continuous batching\n");
  if (std::string e = llmc::tools::repeatedOptionError(cat, argc, argv); !e.empty())
    return fail(e);
  if (backend != "cuda" && backend != "ref")
    return fail("--backend=" + backend + ": expected cuda or ref");
  if (maxSeqs < 1 || maxBatchTokens < maxSeqs || maxBatchTokens > INT32_MAX)
    return fail("--max-seqs=" + std::to_string(maxSeqs) + " --max-batch-tokens=" +
                std::to_string(maxBatchTokens) +
                ": expected --max-seqs >= 1 and --max-seqs <= --max-batch-tokens <= "
                "2^31 - 1 (every running decode gets a token each step)");
  if (backend == "ref")
    for (const cl::Option *o : {static_cast<const cl::Option *>(&weightOnly),
                                static_cast<const cl::Option *>(&noGraphs)})
      if (o->getNumOccurrences())
        return fail("--" + o->ArgStr.str() + " is for --backend=cuda");
  for (const std::string *path : {&outPath.getValue(), &summaryPath.getValue()})
    if (!path->empty())
      if (absl::Status st = rt::CheckWritableFile(*path); !st.ok())
        return fail(std::string(st.message()));

  std::unique_ptr<MLIRContext> ctx = llmc::tools::makeContext();
  llvm::SourceMgr sm;
  SourceMgrDiagnosticHandler diag(sm, ctx.get());
  OwningOpRef<ModuleOp> module = llmc::parseModuleFile(input, sm, ctx.get());
  if (!module)
    return fail("could not parse '" + input + "'");
  func::FuncOp fn;
  for (auto f : module->getOps<func::FuncOp>())
    if (fnName.empty() || f.getSymName() == fnName) {
      fn = f;
      break;
    }
  if (!fn)
    return fail(fnName.empty() ? "no function in '" + input + "'"
                               : "no function @" + fnName + " in '" + input + "'");
  auto layout = ref::readServingStepPages(fn);
  if (!layout.ok())
    return fail(std::string(layout.status().message()));

  std::optional<rt::StepBucketing> bucketing;
  if (buckets != "none") {
    rt::StepBucketing b = rt::StepBucketing::Default(maxBatchTokens, maxSeqs);
    if (!buckets.empty()) {
      auto parsed = parseBuckets(buckets);
      if (!parsed.ok())
        return fail(std::string(parsed.status().message()));
      b.token_buckets = *parsed;
    }
    if (absl::Status st = b.Validate(); !st.ok())
      return fail("--token-buckets: " + std::string(st.message()));
    if (b.token_buckets.back() < maxBatchTokens)
      return fail("--token-buckets: the largest bucket (" +
                  std::to_string(b.token_buckets.back()) + ") is below --max-batch-tokens (" +
                  std::to_string(maxBatchTokens) + ")");
    bucketing = b;
  } else if (backend == "cuda") {
    return fail("--token-buckets=none is for --backend=ref; the GPU runs bucketed shapes");
  }

  auto requests = readRequests(requestsPath);
  if (!requests.ok())
    return fail(std::string(requests.status().message()));
  const int64_t maxLen = layout->max_pages * layout->page_size;
  for (const Timed &t : *requests) {
    const int64_t newTokens = std::min(t.request.sampling.max_new_tokens, maxLen + 1);
    const int64_t len = static_cast<int64_t>(t.request.prompt.size()) + newTokens;
    if (len > maxLen)
      return fail(requestsPath + ":" + std::to_string(t.line) + ": request " +
                  std::to_string(t.request.id) + " needs " +
                  std::to_string(t.request.prompt.size()) + " + " +
                  std::to_string(t.request.sampling.max_new_tokens) +
                  " tokens (prompt + max_new_tokens); the step's block table holds " +
                  std::to_string(maxLen) + " per sequence");
  }

  // The GPU first: without one, fail before reading or generating weights.
  std::shared_ptr<rt::Device> device;
  if (backend == "cuda") {
    auto d = rt::Device::Open(0);
    if (!d.ok())
      return fail(std::string(d.status().message()));
    device = *d;
  }

  // Weights: the arguments after the batch arrays and the pages, as their
  // storage bytes (a 7B model's weights as float64 host tensors would take
  // 54 GB; only --backend=ref unpacks them).
  const unsigned firstWeight = 6 + 2 * layout->num_layers;
  std::vector<std::string> weightBytes;
  std::vector<RankedTensorType> weightTypes;
  for (unsigned i = firstWeight; i < fn.getNumArguments(); ++i) {
    auto type = cast<RankedTensorType>(fn.getArgumentTypes()[i]);
    auto dtype = llmc::toRuntimeDType(type.getElementType());
    if (!type.hasStaticShape() || !dtype.ok())
      return fail("weight argument " + std::to_string(i) + " is " +
                  llmc::tools::run::typeStr(type) +
                  "; expected a static shape of a type llmc runs");
    const int64_t bytes = type.getNumElements() * rt::DTypeSize(*dtype);
    if (!weightsDir.empty()) {
      rt::ReadOptions ro;
      ro.exact_bytes = bytes;
      ro.what = "weight file";
      auto data = rt::ReadFile(weightsDir + "/arg" + std::to_string(i) + ".bin", ro);
      if (!data.ok())
        return fail(std::string(data.status().message()));
      weightBytes.push_back(std::move(*data));
    } else {
      auto data = randomWeight(type, *dtype, seed, i);
      if (!data.ok())
        return fail(std::string(data.status().message()));
      weightBytes.push_back(std::move(*data));
    }
    weightTypes.push_back(type);
  }

  rt::KvPagePoolOptions po = layout->poolOptions();

  std::unique_ptr<rt::MemoryPool> hostMemory;
  std::unique_ptr<rt::KvPagePool> pool;
  std::unique_ptr<rt::StepModel> model;
  std::shared_ptr<llmc::Compiler> compiler;
  std::vector<uint64_t> deviceWeights;
  CUstream stream = nullptr;
  rt::SessionStepModel *gpuModel = nullptr;
  std::unique_ptr<rt::ServingEngine> engine;
  double compileS = 0;
  // The engine releases its sequences into the pool: engine, model, pool.
  auto cleanup = [&] {
    engine.reset();
    model.reset();
    pool.reset();
    if (device) {
      for (uint64_t p : deviceWeights)
        (void)device->Free(p);
      if (stream)
        (void)device->DestroyStream(stream);
    }
  };
  if (backend == "ref") {
    hostMemory = std::make_unique<rt::MemoryPool>(std::make_unique<rt::FakeDeviceAllocator>());
    po.copy_page = rt::HostPageCopy();
    auto p = rt::KvPagePool::Create(hostMemory.get(), po);
    if (!p.ok())
      return fail(std::string(p.status().message()));
    pool = std::move(*p);
    ref::poisonHostPages(*pool);
    std::vector<ref::HostTensor> hostWeights;
    for (auto [bytes, type] : llvm::zip(weightBytes, weightTypes))
      hostWeights.push_back(llmc::tools::run::unpack(
          bytes, type.getElementType(), {type.getShape().begin(), type.getShape().end()}));
    weightBytes.clear();
    auto m = ref::ReferenceStepModel::create(fn, std::move(hostWeights), pool.get(),
                                                     bucketing);
    if (!m.ok())
      return fail(std::string(m.status().message()));
    model = std::move(*m);
  } else {
    auto s = device->CreateStream();
    if (!s.ok())
      return fail(std::string(s.status().message()));
    stream = *s;
    auto p = rt::KvPagePool::Create(&device->pool(), po, stream);
    if (!p.ok()) {
      cleanup();
      return fail(std::string(p.status().message()));
    }
    pool = std::move(*p);
    std::vector<rt::DeviceTensor> weights;
    for (auto [bytes, type] : llvm::zip(weightBytes, weightTypes)) {
      auto ptr = device->Alloc(std::max<size_t>(bytes.size(), 1));
      if (!ptr.ok()) {
        cleanup();
        return fail(std::string(ptr.status().message()));
      }
      deviceWeights.push_back(*ptr);
      if (absl::Status st = device->CopyToDevice(*ptr, bytes.data(), bytes.size()); !st.ok()) {
        cleanup();
        return fail(std::string(st.message()));
      }
      weights.push_back({*ptr, *llmc::toRuntimeDType(type.getElementType()),
                         {type.getShape().begin(), type.getShape().end()}});
      bytes.clear();
      bytes.shrink_to_fit();
    }
    llmc::CompilerOptions co;
    co.arch = device->Arch();
    co.weight_only = weightOnly;
    auto c = llmc::Compiler::Create(co);
    if (!c.ok()) {
      cleanup();
      return fail(std::string(c.status().message()));
    }
    compiler = std::move(*c);
    rt::SessionStepModelOptions mo;
    mo.bucketing = *bucketing;
    mo.max_pages = layout->max_pages;
    mo.session.use_cuda_graphs = !noGraphs;
    mo.stream = stream;
    auto factory = llmc::ServingStepFactory(
        compiler, sm.getMemoryBuffer(sm.getMainFileID())->getBuffer().str(),
        fn.getSymName().str());
    auto m = rt::SessionStepModel::Create(device, pool.get(), factory, std::move(weights), mo);
    if (!m.ok()) {
      cleanup();
      return fail(std::string(m.status().message()));
    }
    gpuModel = m->get();
    model = std::move(*m);
    auto t0 = std::chrono::steady_clock::now();
    if (absl::Status st = gpuModel->Warmup(); !st.ok()) {
      cleanup();
      return fail(std::string(st.message()));
    }
    compileS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    llvm::errs() << "llmc-serve: compiled and loaded " << bucketing->token_buckets.size()
                 << " token buckets in " << llvm::format("%.1f", compileS) << " s\n";
  }

  rt::EngineOptions eo;
  eo.max_batch_tokens = maxBatchTokens;
  eo.max_sequences = maxSeqs;
  eo.vocab = layout->vocab;
  eo.stream = stream;
  auto engineOr = rt::ServingEngine::Create(pool.get(), model.get(), eo);
  if (!engineOr.ok()) {
    cleanup();
    return fail(std::string(engineOr.status().message()));
  }
  engine = std::move(*engineOr);
  // Per-request lines, written at the end (atomically into --out).
  std::string outText;
  llvm::raw_string_ostream out(outText);

  const int64_t paddingTokens = bucketing ? bucketing->MaxPaddingTokens() : 0;
  const int64_t paddingPages = (paddingTokens + layout->page_size - 1) / layout->page_size;
  struct Track {
    double arrival = 0, first = -1, last = 0;
    int64_t prompt = 0;
  };
  std::map<int64_t, Track> track;
  std::vector<double> ttft, tpot, latency;
  int64_t outputTokens = 0, promptTokens = 0, failed = 0, peakUsedPages = 0;
  double usedSlotSteps = 0, wastedSlotSteps = 0, maxWaste = 0;
  const auto start = std::chrono::steady_clock::now();
  auto now = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  size_t next = 0;
  const std::vector<Timed> &reqs = *requests;
  while (next < reqs.size() || engine->HasWork()) {
    double t = now();
    if (!engine->HasWork() && realtime && next < reqs.size() && reqs[next].arrival_s > t) {
      std::this_thread::sleep_for(std::chrono::duration<double>(reqs[next].arrival_s - t));
      t = now();
    }
    while (next < reqs.size() && (!realtime || reqs[next].arrival_s <= t)) {
      const Timed &r = reqs[next++];
      if (absl::Status st = engine->AddRequest(r.request); !st.ok()) {
        cleanup();
        return fail(requestsPath + ":" + std::to_string(r.line) + ": " +
                    std::string(st.message()));
      }
      Track &k = track[r.request.id];
      k.arrival = realtime ? r.arrival_s : 0.0;
      k.prompt = static_cast<int64_t>(r.request.prompt.size());
    }
    absl::StatusOr<rt::StepResult> step = engine->Step();
    if (!step.ok()) {
      cleanup();
      return fail("serving step: " + std::string(step.status().message()));
    }
    t = now();
    for (const rt::GeneratedToken &g : step->tokens) {
      Track &k = track[g.request_id];
      if (k.first < 0)
        k.first = t;
      k.last = t;
    }
    // The requests' pages: the pool's, less the padding sequence's (all of
    // its slots filled but the last page's tail).
    rt::KvPagePoolStats kv = pool->Stats();
    const int64_t usedPages = kv.used_pages - paddingPages;
    const double used = double(usedPages) * double(layout->page_size);
    const double filled = double(kv.filled_slots - paddingTokens);
    const double waste = used > 0 ? 1.0 - filled / used : 0.0;
    peakUsedPages = std::max(peakUsedPages, usedPages);
    usedSlotSteps += used;
    wastedSlotSteps += waste * used;
    maxWaste = std::max(maxWaste, waste);
    for (const rt::FinishedRequest &f : step->finished) {
      Track &k = track[f.id];
      llvm::json::Array tokens;
      for (int32_t tok : f.tokens)
        tokens.push_back(tok);
      llvm::json::Object line{{"id", f.id},
                              {"tokens", std::move(tokens)},
                              {"finish", rt::FinishReasonName(f.reason)},
                              {"prompt_tokens", k.prompt},
                              {"arrival_s", k.arrival}};
      if (!f.status.ok()) {
        line["error"] = std::string(f.status.message());
        ++failed;
      } else {
        const double first = k.first - k.arrival, lat = k.last - k.arrival;
        line["ttft_s"] = first;
        line["latency_s"] = lat;
        ttft.push_back(first);
        latency.push_back(lat);
        if (f.tokens.size() > 1) {
          const double perToken = (k.last - k.first) / double(f.tokens.size() - 1);
          line["tpot_s"] = perToken;
          tpot.push_back(perToken);
        }
        outputTokens += static_cast<int64_t>(f.tokens.size());
        promptTokens += k.prompt;
      }
      out << llvm::json::Value(std::move(line)) << "\n";
      track.erase(f.id);
    }
  }
  const double duration = now();
  out.flush();
  int rc = 0;
  if (!outPath.empty()) {
    if (absl::Status st = rt::AtomicWriteFile(outPath, outText); !st.ok())
      rc = fail(std::string(st.message()));
  } else {
    llvm::outs() << outText;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      const std::string why = llvm::outs().error().message();
      llvm::outs().clear_error();
      rc = fail("cannot write the per-request results to stdout: " + why);
    }
  }
  rt::ServingEngineStats es = engine->Stats();
  llvm::json::Object summary{
      {"requests", static_cast<int64_t>(reqs.size())},
      {"failed", failed},
      {"backend", backend.getValue()},
      {"prompt_tokens", promptTokens},
      {"output_tokens", outputTokens},
      {"duration_s", duration},
      {"output_tok_per_s", duration > 0 ? outputTokens / duration : 0.0},
      {"ttft_s", stats(ttft)},
      {"tpot_s", stats(tpot)},
      {"latency_s", stats(latency)},
      {"steps", es.steps},
      {"batched_tokens", es.batched_tokens},
      {"tokens_per_step", es.tokens_per_step()},
      {"max_step_tokens", es.max_step_tokens},
      {"partial_prefills", es.partial_prefills},
      {"preemptions", es.preemptions},
      {"recomputed_tokens", es.recomputed_tokens},
      {"max_batch_tokens", static_cast<int64_t>(maxBatchTokens)},
      {"max_seqs", static_cast<int64_t>(maxSeqs)},
      {"compile_s", compileS},
      {"kv",
       llvm::json::Object{
           {"pages", layout->num_pages},
           {"page_size", layout->page_size},
           {"bytes_per_page_all_layers", 2 * layout->num_layers * pool->page_bytes()},
           {"bytes_allocated", 2 * layout->num_layers * layout->num_pages * pool->page_bytes()},
           {"padding_pages", paddingPages},
           {"peak_used_pages", peakUsedPages},
           {"peak_bytes_used", 2 * layout->num_layers * peakUsedPages * pool->page_bytes()},
           {"waste_mean", usedSlotSteps > 0 ? wastedSlotSteps / usedSlotSteps : 0.0},
           {"waste_max", maxWaste}}},
  };
  if (bucketing) {
    llvm::json::Array b;
    for (int64_t t : bucketing->token_buckets)
      b.push_back(t);
    summary["token_buckets"] = std::move(b);
  }
  if (gpuModel) {
    llvm::json::Object perBucket;
    for (auto [t, n] : gpuModel->steps_per_bucket())
      perBucket[std::to_string(t)] = n;
    summary["steps_per_bucket"] = std::move(perBucket);
    rt::Session::GraphStats g = gpuModel->graph_stats();
    summary["cuda_graphs"] = llvm::json::Object{{"captures", g.captures},
                                                {"replays", g.replays},
                                                {"launches", g.launches},
                                                {"disabled_reason", g.disabled_reason}};
    summary["device"] = device->name();
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(summary))) << "\n";
  os.flush();
  if (!summaryPath.empty()) {
    if (absl::Status st = rt::AtomicWriteFile(summaryPath, text); !st.ok())
      rc = fail(std::string(st.message()));
  } else {
    llvm::errs() << text;
  }
  cleanup();
  if (rc == 0 && failed > 0)
    rc = fail(std::to_string(failed) + " of " + std::to_string(reqs.size()) +
              " requests failed (their \"error\" in the per-request results)");
  return rc;
}
