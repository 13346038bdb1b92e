#include "llmc/runtime/CudnnAttention.h"

#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llmc/runtime/DynamicLibs.h"
#include "llmc/runtime/Status.h"

#if LLMC_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace llmc::rt {

bool CudnnAttentionCompiledIn() { return LLMC_HAVE_CUDNN != 0; }

std::string CudnnAttentionUnsupportedReason(const AttentionSpec& s) {
  if (s.dtype != DType::bf16 && s.dtype != DType::f16)
    return absl::StrCat("dtype ", DTypeName(s.dtype), " (cuDNN attention takes bf16 or f16)");
  if (s.d % 8 != 0 || s.d > 256)
    return absl::StrCat("head dim ", s.d, " (cuDNN attention takes multiples of 8 up to 256)");
  if (s.hkv <= 0 || s.hq % s.hkv != 0)
    return absl::StrCat(s.hq, " query heads and ", s.hkv, " kv heads (Hkv must divide Hq)");
  if (s.causal && s.sq != s.skv)
    return absl::StrCat("causal with sq=", s.sq, " != skv=", s.skv,
                        " (llmc aligns causal masks bottom-right; the cuDNN graph here "
                        "is top-left)");
  if (s.b <= 0 || s.sq <= 0 || s.skv <= 0)
    return "an empty dimension";
  if (s.backward && (s.sq != s.skv || s.sq == 1))
    return absl::StrCat("a backward with sq=", s.sq, ", skv=", s.skv,
                        " (llmc's cuDNN backward graph takes sq == skv > 1)");
  if (s.backward && !s.has_lse())
    return "a backward without the forward's statistics";
  return "";
}

#if !LLMC_HAVE_CUDNN

struct Cudnn {};

absl::StatusOr<std::shared_ptr<const Cudnn>> LoadCudnn() {
  return absl::UnimplementedError(
      "this llmc runtime was built without cuDNN headers (cudnn_backend.h; "
      "configure with -DLLMC_CUDNN_INCLUDE=... or install nvidia-cudnn-cu13), "
      "so attention runs llmc's own kernel");
}
absl::StatusOr<const Cudnn*> GetCudnn() { return LoadCudnn().status(); }
int64_t CudnnVersion(const Cudnn&) { return 0; }
std::string CudnnPath(const Cudnn&) { return ""; }
absl::StatusOr<int> CheckCudnnAttentionOperations(const Cudnn&,
                                                  const AttentionSpec&) {
  return LoadCudnn().status();
}

struct CudnnAttentionRunner::Plan {};

std::unique_ptr<CudnnAttentionRunner> CudnnAttentionRunner::Create(
    const Executable& exe, MemoryPool*, absl::StatusOr<const Cudnn*> lib) {
  std::unique_ptr<CudnnAttentionRunner> r(new CudnnAttentionRunner());
  r->plan_of_.assign(exe.attentions.size(), -1);
  r->fallback_.assign(exe.attentions.size(), "");
  r->global_fallback_ = std::string(lib.ok() ? LoadCudnn().status().message()
                                             : lib.status().message());
  return r;
}
CudnnAttentionRunner::~CudnnAttentionRunner() = default;
absl::StatusOr<bool> CudnnAttentionRunner::Run(
    int, const std::function<uint64_t(const BufferRef&)>&, CUstream) {
  return false;
}

#else  // LLMC_HAVE_CUDNN

#define LLMC_CUDNN_SYMBOLS(X)                                                  \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString)         \
  X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)                             \
  X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor)             \
  X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute)                      \
  X(cudnnBackendFinalize) X(cudnnBackendExecute)

#define LLMC_CUDNN_DECLARE(name) decltype(&::name) name = nullptr;

/// cuDNN (libcudnn.so.9) entry points.
struct Cudnn {
  LLMC_CUDNN_SYMBOLS(LLMC_CUDNN_DECLARE)
  std::unique_ptr<DynamicLibrary> library;
  int64_t version = 0;

  /// OK for CUDNN_STATUS_SUCCESS, else "<call> failed: CUDNN_STATUS_X
  /// (<cudnnGetLastErrorString>)". cuDNN 9 codes are grouped by thousands:
  /// 2xxx bad parameter -> InvalidArgument, 3xxx not supported ->
  /// Unimplemented, 4xxx internal (4001 allocation) / 5xxx execution ->
  /// ResourceExhausted or Internal.
  absl::Status Check(cudnnStatus_t status, const std::string& call) const {
    if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
    char detail[1024] = {0};
    cudnnGetLastErrorString(detail, sizeof(detail) - 1);
    std::string msg = absl::StrCat(call, " failed: ", cudnnGetErrorString(status),
                                   detail[0] ? absl::StrCat(" (", detail, ")") : "");
    int group = static_cast<int>(status) / 1000;
    if (status == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
    if (group == 2) return absl::InvalidArgumentError(msg);
    if (group == 3) return absl::UnimplementedError(msg);
    return absl::InternalError(msg);
  }
};
#undef LLMC_CUDNN_DECLARE

#define LLMC_CUDNN_STR2(x) #x
#define LLMC_CUDNN_STR(x) LLMC_CUDNN_STR2(x)

absl::StatusOr<std::shared_ptr<const Cudnn>> LoadCudnn() {
  auto t = std::make_shared<Cudnn>();
  LLMC_RT_ASSIGN_OR_RETURN(
      t->library, DynamicLibrary::Open("libcudnn.so.9", "LLMC_LIBCUDNN",
                                       CudaLibraryCandidates("libcudnn.so.9"),
                                       "cuDNN fused attention (optional: without it "
                                       "attention runs llmc's own kernel)"));
#define LLMC_CUDNN_RESOLVE(name)                                               \
  {                                                                            \
    LLMC_RT_ASSIGN_OR_RETURN(void* sym,                                        \
                             t->library->Symbol(LLMC_CUDNN_STR(name)));        \
    t->name = reinterpret_cast<decltype(t->name)>(sym);                        \
  }
  LLMC_CUDNN_SYMBOLS(LLMC_CUDNN_RESOLVE)
#undef LLMC_CUDNN_RESOLVE
  t->version = static_cast<int64_t>(t->cudnnGetVersion());
  if (t->version < 90000)
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN ", t->version, " at ", t->library->path(),
        " is older than 9.0, which llmc's cuDNN attention needs"));
  return t;
}

absl::StatusOr<const Cudnn*> GetCudnn() {
  static auto* loaded = new absl::StatusOr<std::shared_ptr<const Cudnn>>(LoadCudnn());
  if (!loaded->ok()) return loaded->status();
  return loaded->value().get();
}

int64_t CudnnVersion(const Cudnn& lib) { return lib.version; }
std::string CudnnPath(const Cudnn& lib) { return lib.library->path(); }

namespace {

std::string VersionString(int64_t v) {
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

/// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  Desc(const Cudnn* lib, cudnnBackendDescriptor_t d) : lib_(lib), d_(d) {}
  Desc(Desc&& o) noexcept : lib_(o.lib_), d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(lib_, o.lib_);
    std::swap(d_, o.d_);
    return *this;
  }
  ~Desc() {
    if (d_) lib_->cudnnBackendDestroyDescriptor(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  const Cudnn* lib_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// Builds the descriptors of one SDPA graph. Every call names the attribute
/// in its error, so a failure on a new cuDNN reads e.g.
/// "cudnnBackendSetAttribute(pointwise 'causal select',
/// CUDNN_ATTR_OPERATION_POINTWISE_TDESC) failed: CUDNN_STATUS_BAD_PARAM (...)".
class GraphBuilder {
 public:
  explicit GraphBuilder(const Cudnn& lib) : lib_(lib) {}

  absl::StatusOr<cudnnBackendDescriptor_t> Create(cudnnBackendDescriptorType_t type,
                                                  const std::string& what) {
    cudnnBackendDescriptor_t d = nullptr;
    LLMC_RT_RETURN_IF_ERROR(lib_.Check(lib_.cudnnBackendCreateDescriptor(type, &d),
                                       absl::StrCat("cudnnBackendCreateDescriptor(", what, ")")));
    owned_.emplace_back(&lib_, d);
    return d;
  }
  absl::Status Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   const char* name_text, cudnnBackendAttributeType_t type,
                   int64_t count, const void* value, const std::string& what) {
    return lib_.Check(lib_.cudnnBackendSetAttribute(d, name, type, count, value),
                      absl::StrCat("cudnnBackendSetAttribute(", what, ", ", name_text, ")"));
  }
  absl::Status Finalize(cudnnBackendDescriptor_t d, const std::string& what) {
    return lib_.Check(lib_.cudnnBackendFinalize(d),
                      absl::StrCat("cudnnBackendFinalize(", what, ")"));
  }

#define LLMC_SET(d, attr, type, count, value, what) \
  Set(d, attr, #attr, type, count, value, what)

  /// A tensor: dims/strides in elements, UID unique in the graph.
  absl::StatusOr<cudnnBackendDescriptor_t> Tensor(
      const std::string& what, int64_t uid, cudnnDataType_t type,
      std::vector<int64_t> dims, std::vector<int64_t> strides, bool is_virtual,
      bool by_value = false) {
    std::string w = absl::StrCat("tensor '", what, "'");
    LLMC_RT_ASSIGN_OR_RETURN(auto d, Create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, w));
    int64_t alignment = 16;
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
                                     static_cast<int64_t>(dims.size()), dims.data(), w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
                                     static_cast<int64_t>(strides.size()), strides.data(), w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
                                     &alignment, w));
    if (is_virtual) {
      bool v = true;
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, w));
    }
    if (by_value) {
      bool v = true;
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v, w));
    }
    LLMC_RT_RETURN_IF_ERROR(Finalize(d, w));
    return d;
  }

  /// A pointwise operation y = mode(x[, b[, t]]) (t: BINARY_SELECT's
  /// condition); `axis` >= 0 for GEN_INDEX.
  absl::Status Pointwise(const std::string& what, cudnnPointwiseMode_t mode,
                         cudnnDataType_t math, cudnnBackendDescriptor_t x,
                         cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                         cudnnBackendDescriptor_t y, int64_t axis = -1) {
    return PointwiseOp(what, mode, math, x, b, t, y, axis, /*unit_alphas=*/false);
  }
  /// Pointwise with ALPHA1 = ALPHA2 = 1 set explicitly, as cudnn-frontend
  /// sets them (the backward graph is built exactly as it builds it).
  absl::Status PointwiseOp(const std::string& what, cudnnPointwiseMode_t mode,
                           cudnnDataType_t math, cudnnBackendDescriptor_t x,
                           cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                           cudnnBackendDescriptor_t y, int64_t axis, bool unit_alphas) {
    std::string w = absl::StrCat("pointwise '", what, "'");
    LLMC_RT_ASSIGN_OR_RETURN(auto pw, Create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, w));
    if (axis >= 0)
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, w));
    LLMC_RT_RETURN_IF_ERROR(Finalize(pw, w));
    LLMC_RT_ASSIGN_OR_RETURN(auto op, Create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, w));
    if (b)
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, w));
    if (t)
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, w));
    if (unit_alphas) {
      float one = 1.f;
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
                                       CUDNN_TYPE_FLOAT, 1, &one, w));
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
                                       CUDNN_TYPE_FLOAT, 1, &one, w));
    }
    LLMC_RT_RETURN_IF_ERROR(Finalize(op, w));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  /// `frontend_flags`: also CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC = false
  /// from cuDNN 9.11, as cudnn-frontend sets it (the backward graph).
  absl::Status Reduction(const std::string& what, cudnnReduceTensorOp_t reduce,
                         cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                         bool frontend_flags = false) {
    std::string w = absl::StrCat("reduction '", what, "'");
    LLMC_RT_ASSIGN_OR_RETURN(auto rd, Create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, w));
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR,
                                     CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, w));
#if CUDNN_VERSION >= 91100
    if (frontend_flags && lib_.version >= 91100) {
      bool deterministic = false;
      LLMC_RT_RETURN_IF_ERROR(LLMC_SET(rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC,
                                       CUDNN_TYPE_BOOLEAN, 1, &deterministic, w));
    }
#endif
    LLMC_RT_RETURN_IF_ERROR(Finalize(rd, w));
    LLMC_RT_ASSIGN_OR_RETURN(auto op, Create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, w));
    LLMC_RT_RETURN_IF_ERROR(Finalize(op, w));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  /// y = x with y's dims and strides (a transposed view; io-type y
  /// converts).
  absl::Status Reshape(const std::string& what, cudnnBackendDescriptor_t x,
                       cudnnBackendDescriptor_t y) {
    std::string w = absl::StrCat("reshape '", what, "'");
    LLMC_RT_ASSIGN_OR_RETURN(auto op, Create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, w));
    LLMC_RT_RETURN_IF_ERROR(Finalize(op, w));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  absl::Status Matmul(const std::string& what, cudnnBackendDescriptor_t a,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    std::string w = absl::StrCat("matmul '", what, "'");
    LLMC_RT_ASSIGN_OR_RETURN(auto mm, Create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, w));
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, w));
    LLMC_RT_RETURN_IF_ERROR(Finalize(mm, w));
    LLMC_RT_ASSIGN_OR_RETURN(auto op, Create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, w));
    LLMC_RT_RETURN_IF_ERROR(LLMC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, w));
    LLMC_RT_RETURN_IF_ERROR(Finalize(op, w));
    ops_.push_back(op);
    return absl::OkStatus();
  }
#undef LLMC_SET

  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }
  std::vector<Desc> TakeOwned() { return std::move(owned_); }

 private:
  const Cudnn& lib_;
  std::vector<Desc> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

// Variant-pack UIDs of the graph's non-virtual tensors.
constexpr int64_t kUidQ = 1, kUidK = 2, kUidV = 3, kUidO = 4, kUidScale = 5,
                  kUidNegInf = 6, kUidStats = 7, kUidDO = 8, kUidDQ = 9, kUidDK = 10,
                  kUidDV = 11, kUidOne = 12, kUidRowSum = 13, kUidDqAccum = 14;

/// The variant-pack UID of each AttentionOperands() name.
int64_t UidOf(const std::string& name) {
  static const std::map<std::string, int64_t> uids = {
      {"q", kUidQ},           {"k", kUidK},           {"v", kUidV},
      {"o", kUidO},           {"lse", kUidStats},     {"grad_output", kUidDO},
      {"grad_query", kUidDQ}, {"grad_key", kUidDK},   {"grad_value", kUidDV},
      {"row_sum", kUidRowSum}, {"dq_accum", kUidDqAccum}};
  return uids.at(name);
}

/// Builds the SDPA forward operations of `s` into `g` (see the header for
/// the graph).
absl::Status BuildSdpaOperations(const AttentionSpec& s, GraphBuilder& g) {
  const cudnnDataType_t io = s.dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const int64_t b = s.b, hq = s.hq, hkv = s.hkv, sq = s.sq, skv = s.skv, d = s.d;
  int64_t uid = 100;  // virtual tensors
  // llmc's storage [b, s, h, d] as cuDNN dims [b, h, s, d].
  LLMC_RT_ASSIGN_OR_RETURN(auto q, g.Tensor("Q", kUidQ, io, {b, hq, sq, d},
                                            {sq * hq * d, d, hq * d, 1}, false));
  LLMC_RT_ASSIGN_OR_RETURN(auto kt, g.Tensor("K^T", kUidK, io, {b, hkv, d, skv},
                                             {skv * hkv * d, d, 1, hkv * d}, false));
  LLMC_RT_ASSIGN_OR_RETURN(auto v, g.Tensor("V", kUidV, io, {b, hkv, skv, d},
                                            {skv * hkv * d, d, hkv * d, 1}, false));
  LLMC_RT_ASSIGN_OR_RETURN(auto o, g.Tensor("O", kUidO, io, {b, hq, sq, d},
                                            {sq * hq * d, d, hq * d, 1}, false));
  const std::vector<int64_t> sdims = {b, hq, sq, skv},
                             sstrides = {hq * sq * skv, sq * skv, skv, 1},
                             rdims = {b, hq, sq, 1}, rstrides = {hq * sq, sq, 1, 1},
                             one = {1, 1, 1, 1};
  auto virt = [&](const char* what, cudnnDataType_t t, bool row = false) {
    return g.Tensor(what, uid++, t, row ? rdims : sdims, row ? rstrides : sstrides, true);
  };

  LLMC_RT_ASSIGN_OR_RETURN(auto s0, virt("S = Q K^T", f32));
  LLMC_RT_RETURN_IF_ERROR(g.Matmul("bmm1 Q K^T", q, kt, s0));
  LLMC_RT_ASSIGN_OR_RETURN(auto scale, g.Tensor("attn scale", kUidScale, f32, one, one,
                                                false, /*by_value=*/true));
  LLMC_RT_ASSIGN_OR_RETURN(auto s1, virt("S * scale", f32));
  LLMC_RT_RETURN_IF_ERROR(
      g.Pointwise("attn scale", CUDNN_POINTWISE_MUL, f32, s0, scale, nullptr, s1));
  cudnnBackendDescriptor_t last = s1;
  if (s.causal) {
    LLMC_RT_ASSIGN_OR_RETURN(auto row, virt("row index", f32));
    LLMC_RT_RETURN_IF_ERROR(g.Pointwise("gen row index", CUDNN_POINTWISE_GEN_INDEX, f32,
                                        last, nullptr, nullptr, row, /*axis=*/2));
    LLMC_RT_ASSIGN_OR_RETURN(auto col, virt("col index", f32));
    LLMC_RT_RETURN_IF_ERROR(g.Pointwise("gen col index", CUDNN_POINTWISE_GEN_INDEX, f32,
                                        last, nullptr, nullptr, col, /*axis=*/3));
    LLMC_RT_ASSIGN_OR_RETURN(auto keep, virt("row >= col", CUDNN_DATA_BOOLEAN));
    LLMC_RT_RETURN_IF_ERROR(g.Pointwise("row >= col", CUDNN_POINTWISE_CMP_GE,
                                        CUDNN_DATA_BOOLEAN, row, col, nullptr, keep));
    LLMC_RT_ASSIGN_OR_RETURN(auto neg, g.Tensor("causal fill", kUidNegInf, f32, one, one,
                                                false, /*by_value=*/true));
    LLMC_RT_ASSIGN_OR_RETURN(auto masked, virt("causal S", f32));
    // y = t ? x : b
    LLMC_RT_RETURN_IF_ERROR(g.Pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, f32,
                                        last, neg, keep, masked));
    last = masked;
  }
  LLMC_RT_ASSIGN_OR_RETURN(auto mx, virt("row max", f32, /*row=*/true));
  LLMC_RT_RETURN_IF_ERROR(g.Reduction("row max", CUDNN_REDUCE_TENSOR_MAX, last, mx));
  LLMC_RT_ASSIGN_OR_RETURN(auto sub, virt("S - max", f32));
  LLMC_RT_RETURN_IF_ERROR(g.Pointwise("S - max", CUDNN_POINTWISE_SUB, f32, last, mx, nullptr, sub));
  LLMC_RT_ASSIGN_OR_RETURN(auto ex, virt("exp(S - max)", f32));
  LLMC_RT_RETURN_IF_ERROR(g.Pointwise("exp", CUDNN_POINTWISE_EXP, f32, sub, nullptr, nullptr, ex));
  LLMC_RT_ASSIGN_OR_RETURN(auto sum, virt("row sum", f32, /*row=*/true));
  LLMC_RT_RETURN_IF_ERROR(g.Reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, ex, sum));
  // Softmax statistics (log-sum-exp), virtual in inference, as cudnn-frontend
  // builds them for flash attention; the training forward's output (f32
  // [b, hq, sq, 1], llm.attention_logsumexp's [B, Hq, Sq] layout) when the
  // spec has one.
  LLMC_RT_ASSIGN_OR_RETURN(auto lg, virt("log(sum)", f32, /*row=*/true));
  LLMC_RT_RETURN_IF_ERROR(g.Pointwise("log", CUDNN_POINTWISE_LOG, f32, sum, nullptr, nullptr, lg));
  LLMC_RT_ASSIGN_OR_RETURN(
      auto stats, s.has_lse() ? g.Tensor("stats", kUidStats, f32, rdims, rstrides, false)
                              : virt("stats", f32, /*row=*/true));
  LLMC_RT_RETURN_IF_ERROR(g.Pointwise("stats", CUDNN_POINTWISE_ADD, f32, mx, lg, nullptr, stats));
  // P in the io type: cuDNN wants bmm2's A operand in the io type.
  LLMC_RT_ASSIGN_OR_RETURN(auto p, virt("P", io));
  LLMC_RT_RETURN_IF_ERROR(g.Pointwise("exp / sum", CUDNN_POINTWISE_DIV, f32, ex, sum, nullptr, p));
  LLMC_RT_RETURN_IF_ERROR(g.Matmul("bmm2 P V", p, v, o));
  return absl::OkStatus();
}

/// Builds the SDPA backward operations of `s` into `g`: the graph
/// cudnn-frontend's CompositeSDPABackwardNode emits (NVIDIA/cudnn-frontend
/// v1.23, include/cudnn_frontend/node/scaled_dot_product_flash_attention.h),
/// which cuDNN's fused flash-attention backward engine matches
/// (FlashAttention-2, Dao 2023, Algorithm 2):
///   row_sum = rowsum(dO * O) * 1                  (f32 [b,hq,sq,1], memory)
///   P   = exp(Q K^T * scale - Stats)  [causal: -inf above the diagonal]
///   dV  = P^T dO                      (GQA: [b,hq,skv,d], summed per group)
///   dS  = ((dO V^T - row_sum) * P) * scale
///   dK  = dS^T Q                      (GQA: as dV)
///   dQ  = dS K, accumulated in f32 dq_accum ([b,hq,sq,d] packed), then
///         converted (IDENTITY) into dQ
/// P^T and dS^T are RESHAPE ops to transposed io-type views; K comes from
/// K^T by a RESHAPE. Q/K/V/O/dO/dQ/dK/dV keep llmc's [b, s, h, d] storage.
absl::Status BuildSdpaBackwardOperations(const AttentionSpec& s, GraphBuilder& g) {
  const cudnnDataType_t io = s.dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const int64_t b = s.b, hq = s.hq, hk = s.hkv, sq = s.sq, skv = s.skv, d = s.d;
  int64_t uid = 100;
  auto bshd = [](int64_t h, int64_t seq, int64_t dim) {
    return std::vector<int64_t>{seq * h * dim, dim, h * dim, 1};
  };
  auto pw = [&](const char* what, cudnnPointwiseMode_t mode, cudnnDataType_t math,
                cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y2,
                cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis = -1) {
    return g.PointwiseOp(what, mode, math, x, y2, t, y, axis, /*unit_alphas=*/true);
  };
  using Dims = std::vector<int64_t>;
  LLMC_RT_ASSIGN_OR_RETURN(auto Q, g.Tensor("Q", kUidQ, io, {b, hq, sq, d}, bshd(hq, sq, d), false));
  LLMC_RT_ASSIGN_OR_RETURN(auto KT, g.Tensor("K^T", kUidK, io, {b, hk, d, skv},
                                             {skv * hk * d, d, 1, hk * d}, false));
  LLMC_RT_ASSIGN_OR_RETURN(auto VT, g.Tensor("V^T", kUidV, io, {b, hk, d, skv},
                                             {skv * hk * d, d, 1, hk * d}, false));
  LLMC_RT_ASSIGN_OR_RETURN(auto O, g.Tensor("O", kUidO, io, {b, hq, sq, d}, bshd(hq, sq, d), false));
  LLMC_RT_ASSIGN_OR_RETURN(auto dO, g.Tensor("dO", kUidDO, io, {b, hq, sq, d}, bshd(hq, sq, d), false));
  LLMC_RT_ASSIGN_OR_RETURN(auto St, g.Tensor("Stats", kUidStats, f32, {b, hq, sq, 1},
                                             {hq * sq, sq, 1, 1}, false));
  LLMC_RT_ASSIGN_OR_RETURN(auto dQ, g.Tensor("dQ", kUidDQ, io, {b, hq, sq, d}, bshd(hq, sq, d), false));
  LLMC_RT_ASSIGN_OR_RETURN(auto dK, g.Tensor("dK", kUidDK, io, {b, hk, skv, d}, bshd(hk, skv, d), false));
  LLMC_RT_ASSIGN_OR_RETURN(auto dV, g.Tensor("dV", kUidDV, io, {b, hk, skv, d}, bshd(hk, skv, d), false));
  const Dims one4 = {1, 1, 1, 1};
  LLMC_RT_ASSIGN_OR_RETURN(auto scale, g.Tensor("attn scale", kUidScale, f32, one4, one4, false,
                                                /*by_value=*/true));
  LLMC_RT_ASSIGN_OR_RETURN(auto one, g.Tensor("one", kUidOne, f32, one4, one4, false,
                                              /*by_value=*/true));
  LLMC_RT_ASSIGN_OR_RETURN(auto rowSum, g.Tensor("softmax_sum", kUidRowSum, f32, {b, hq, sq, 1},
                                                 {hq * sq, sq, 1, 1}, false));
  const Dims S = {b, hq, sq, skv}, Ss = {hq * sq * skv, sq * skv, skv, 1};
  const Dims ST = {b, hq, skv, sq}, STs = {hq * sq * skv, sq * skv, 1, skv};
  auto virt = [&](const char* what, cudnnDataType_t t, const Dims& dims, const Dims& strides) {
    return g.Tensor(what, uid++, t, dims, strides, true);
  };
  // row_sum = rowsum(dO * O) * 1
  LLMC_RT_ASSIGN_OR_RETURN(auto doo, virt("dO*O", f32, {b, hq, sq, d}, {hq * sq * d, sq * d, hq * d, 1}));
  LLMC_RT_RETURN_IF_ERROR(pw("mul_dO_O", CUDNN_POINTWISE_MUL, f32, dO, O, nullptr, doo));
  LLMC_RT_ASSIGN_OR_RETURN(auto rs, virt("rowsum", f32, {b, hq, sq, 1}, {hq * sq, sq, 1, 1}));
  LLMC_RT_RETURN_IF_ERROR(g.Reduction("reduce_dO_o", CUDNN_REDUCE_TENSOR_ADD, doo, rs, true));
  LLMC_RT_RETURN_IF_ERROR(pw("scale_dropout_inv", CUDNN_POINTWISE_MUL, f32, rs, one, nullptr, rowSum));
  // P = exp(scale * Q K^T - Stats), masked
  LLMC_RT_ASSIGN_OR_RETURN(auto s0, virt("S", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_Q_KT", Q, KT, s0));
  LLMC_RT_ASSIGN_OR_RETURN(auto s1, virt("S*scale", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(pw("mul_s_attn_scale", CUDNN_POINTWISE_MUL, f32, s0, scale, nullptr, s1));
  LLMC_RT_ASSIGN_OR_RETURN(auto s2, virt("S-stats", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(pw("sub_s_m", CUDNN_POINTWISE_SUB, f32, s1, St, nullptr, s2));
  cudnnBackendDescriptor_t last = s2;
  if (s.causal) {
    LLMC_RT_ASSIGN_OR_RETURN(auto ninf, g.Tensor("neg_inf", kUidNegInf, f32, one4, one4, false,
                                                 /*by_value=*/true));
    LLMC_RT_ASSIGN_OR_RETURN(auto row, virt("row", CUDNN_DATA_INT32, S, Ss));
    LLMC_RT_RETURN_IF_ERROR(pw("gen_row_index", CUDNN_POINTWISE_GEN_INDEX, f32, last, nullptr,
                               nullptr, row, 2));
    LLMC_RT_ASSIGN_OR_RETURN(auto col, virt("col", CUDNN_DATA_INT32, S, Ss));
    LLMC_RT_RETURN_IF_ERROR(pw("gen_col_index", CUDNN_POINTWISE_GEN_INDEX, f32, last, nullptr,
                               nullptr, col, 3));
    LLMC_RT_ASSIGN_OR_RETURN(auto keep, virt("row>=col", CUDNN_DATA_BOOLEAN, S, Ss));
    LLMC_RT_RETURN_IF_ERROR(pw("row>=col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col,
                               nullptr, keep));
    LLMC_RT_ASSIGN_OR_RETURN(auto masked, virt("masked", f32, S, Ss));
    LLMC_RT_RETURN_IF_ERROR(pw("binary_select", CUDNN_POINTWISE_BINARY_SELECT, f32, last, ninf,
                               keep, masked));
    last = masked;
  }
  LLMC_RT_ASSIGN_OR_RETURN(auto P, virt("P", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(pw("exp_s", CUDNN_POINTWISE_EXP, f32, last, nullptr, nullptr, P));
  // dV = P^T dO
  LLMC_RT_ASSIGN_OR_RETURN(auto PT, virt("P^T", io, ST, STs));
  LLMC_RT_RETURN_IF_ERROR(g.Reshape("reshape_p", P, PT));
  const Dims full = {b, hq, skv, d}, fullStrides = {hq * skv * d, skv * d, d, 1};
  if (hq == hk) {
    LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_pT_dO", PT, dO, dV));
  } else {
    LLMC_RT_ASSIGN_OR_RETURN(auto f, virt("dV_fullhead", io, full, fullStrides));
    LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_pT_dO", PT, dO, f));
    LLMC_RT_RETURN_IF_ERROR(g.Reduction("red_dV_head", CUDNN_REDUCE_TENSOR_ADD, f, dV, true));
  }
  // dS = ((dO V^T - row_sum) * P) * scale
  LLMC_RT_ASSIGN_OR_RETURN(auto dP, virt("dP", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_dO_VT", dO, VT, dP));
  LLMC_RT_ASSIGN_OR_RETURN(auto d1, virt("dP-sum", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(pw("sub_dP_softmax_sum", CUDNN_POINTWISE_SUB, f32, dP, rowSum, nullptr, d1));
  LLMC_RT_ASSIGN_OR_RETURN(auto d2, virt("(dP-sum)*P", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(pw("mul_dP_exp_s", CUDNN_POINTWISE_MUL, f32, d1, P, nullptr, d2));
  LLMC_RT_ASSIGN_OR_RETURN(auto dS, virt("dS", f32, S, Ss));
  LLMC_RT_RETURN_IF_ERROR(pw("mul_dS_attn_scale", CUDNN_POINTWISE_MUL, f32, d2, scale, nullptr, dS));
  // dK = dS^T Q
  LLMC_RT_ASSIGN_OR_RETURN(auto dST, virt("dS^T", io, ST, STs));
  LLMC_RT_RETURN_IF_ERROR(g.Reshape("reshape_dS", dS, dST));
  if (hq == hk) {
    LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_dST_Q", dST, Q, dK));
  } else {
    LLMC_RT_ASSIGN_OR_RETURN(auto f, virt("dK_fullhead", io, full, fullStrides));
    LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_dST_Q", dST, Q, f));
    LLMC_RT_RETURN_IF_ERROR(g.Reduction("red_dK_head", CUDNN_REDUCE_TENSOR_ADD, f, dK, true));
  }
  // dQ = dS K through the f32 accumulator (K: a view of K^T, in the
  // intermediate type as cudnn-frontend leaves it).
  LLMC_RT_ASSIGN_OR_RETURN(auto K, virt("K", f32, {b, hk, skv, d}, bshd(hk, skv, d)));
  LLMC_RT_RETURN_IF_ERROR(g.Reshape("reshape_k", KT, K));
  LLMC_RT_ASSIGN_OR_RETURN(auto dQa, g.Tensor("dQ_accum", kUidDqAccum, f32, {b, hq, sq, d},
                                              {hq * sq * d, sq * d, d, 1}, false));
  LLMC_RT_RETURN_IF_ERROR(g.Matmul("matmul_dS_K", dS, K, dQa));
  return pw("identity_dQ", CUDNN_POINTWISE_IDENTITY, f32, dQa, nullptr, nullptr, dQ);
}

absl::Status BuildOperations(const AttentionSpec& s, GraphBuilder& g) {
  return s.backward ? BuildSdpaBackwardOperations(s, g) : BuildSdpaOperations(s, g);
}

}  // namespace

absl::StatusOr<int> CheckCudnnAttentionOperations(const Cudnn& lib,
                                                  const AttentionSpec& spec) {
  if (std::string why = CudnnAttentionUnsupportedReason(spec); !why.empty())
    return absl::UnimplementedError(why);
  GraphBuilder g(lib);
  LLMC_RT_RETURN_IF_ERROR(BuildOperations(spec, g));
  return static_cast<int>(g.ops().size());
}

// ---------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------
struct CudnnAttentionRunner::Plan {
  AttentionSpec spec;  // shape/dtype/causal/scale (buffer refs of the first)
  std::vector<Desc> descriptors;  // graph, plan, engine configs: kept alive
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  // Pass-by-value scalars: the variant pack points at them.
  float scale = 1.f;
  float neg_inf = std::numeric_limits<float>::lowest();
  float one = 1.f;
};

namespace {

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           bool, uint32_t, bool, bool>;
PlanKey KeyOf(const AttentionSpec& s) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &s.scale, sizeof(scale_bits));
  return {static_cast<int>(s.dtype), s.b, s.sq, s.skv, s.hq, s.hkv, s.d, s.causal,
          scale_bits, s.has_lse(), s.backward};
}

std::string Describe(const AttentionSpec& s) {
  return absl::StrCat("b=", s.b, " sq=", s.sq, " skv=", s.skv, " hq=", s.hq,
                      " hkv=", s.hkv, " d=", s.d, " ", DTypeName(s.dtype),
                      s.causal ? " causal" : "", " scale=", s.scale,
                      s.backward ? " backward" : s.has_lse() ? " with stats" : "");
}

/// Operation graph -> heuristics -> the first engine configuration whose
/// execution plan finalizes.
absl::Status BuildPlan(const Cudnn& lib, cudnnHandle_t handle,
                       CudnnAttentionRunner::Plan* plan) {
  if (plan->spec.backward) {
    // cuDNN before 9.6 needs dq_accum zeroed by the caller before every run;
    // 9.10.0/9.10.1 have known SDPA backward bugs; before 9.15.1 a key
    // length that is not a multiple of 128 can fault under CUDA-graph
    // replay (cudnn-frontend pads with a mask there; llmc runs its kernel).
    const int64_t v = lib.version;
    std::string why = v < 90600 ? "needs cuDNN 9.6 or newer"
                      : v == 91000 || v == 91001 ? "is not used with cuDNN 9.10.0/9.10.1"
                      : v < 91501 && plan->spec.skv % 128 != 0
                          ? "needs skv % 128 == 0 before cuDNN 9.15.1"
                      : v < 90500 && plan->spec.d > 128 ? "needs cuDNN 9.5 for head dim > 128"
                                                        : "";
    if (!why.empty())
      return absl::UnimplementedError(absl::StrCat("llmc's cuDNN attention backward ", why,
                                                   " (cuDNN ", VersionString(v), ")"));
  }
  GraphBuilder g(lib);
  LLMC_RT_RETURN_IF_ERROR(BuildOperations(plan->spec, g));
  auto create = [&](cudnnBackendDescriptorType_t type, const char* what)
      -> absl::StatusOr<cudnnBackendDescriptor_t> { return g.Create(type, what); };
  LLMC_RT_ASSIGN_OR_RETURN(auto graph,
                           create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph"));
  std::vector<cudnnBackendDescriptor_t> ops = g.ops();
  LLMC_RT_RETURN_IF_ERROR(g.Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                "CUDNN_ATTR_OPERATIONGRAPH_OPS", CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                static_cast<int64_t>(ops.size()), ops.data(),
                                "operation graph"));
  LLMC_RT_RETURN_IF_ERROR(g.Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                                "CUDNN_ATTR_OPERATIONGRAPH_HANDLE", CUDNN_TYPE_HANDLE, 1,
                                &handle, "operation graph"));
  LLMC_RT_RETURN_IF_ERROR(g.Finalize(graph, "operation graph"));

  std::vector<std::string> errors;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "mode A" : "fallback mode";
    std::string hw = absl::StrCat("engine heuristics (", mode_name, ")");
    LLMC_RT_ASSIGN_OR_RETURN(auto heur, create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, hw.c_str()));
    LLMC_RT_RETURN_IF_ERROR(g.Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                  "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH",
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, hw));
    LLMC_RT_RETURN_IF_ERROR(g.Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, "CUDNN_ATTR_ENGINEHEUR_MODE",
                                  CUDNN_TYPE_HEUR_MODE, 1, &mode, hw));
    if (absl::Status st = g.Finalize(heur, hw); !st.ok()) {
      errors.push_back(std::string(st.message()));
      continue;
    }
    int64_t count = 0;
    LLMC_RT_RETURN_IF_ERROR(lib.Check(
        lib.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        absl::StrCat("cudnnBackendGetAttribute(", hw, ", CUDNN_ATTR_ENGINEHEUR_RESULTS count)")));
    if (count <= 0) {
      errors.push_back(absl::StrCat(hw, ": no engine configuration"));
      continue;
    }
    count = std::min<int64_t>(count, 16);
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (int64_t i = 0; i < count; ++i) {
      LLMC_RT_ASSIGN_OR_RETURN(auto cfg, create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                "engine configuration"));
      cfgs.push_back(cfg);
    }
    int64_t returned = 0;
    LLMC_RT_RETURN_IF_ERROR(lib.Check(
        lib.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                     cfgs.data()),
        absl::StrCat("cudnnBackendGetAttribute(", hw, ", CUDNN_ATTR_ENGINEHEUR_RESULTS)")));
    for (int64_t i = 0; i < returned; ++i) {
      std::string pw = absl::StrCat("execution plan (", mode_name, " config ", i, ")");
      LLMC_RT_ASSIGN_OR_RETURN(auto ep, create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                               pw.c_str()));
      absl::Status st = g.Set(ep, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                              "CUDNN_ATTR_EXECUTION_PLAN_HANDLE", CUDNN_TYPE_HANDLE, 1,
                              &handle, pw);
      if (st.ok())
        st = g.Set(ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                   "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG", CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &cfgs[i], pw);
      if (st.ok()) st = g.Finalize(ep, pw);
      int64_t ws = 0, n = 0;
      if (st.ok())
        st = lib.Check(lib.cudnnBackendGetAttribute(ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                    CUDNN_TYPE_INT64, 1, &n, &ws),
                       absl::StrCat("cudnnBackendGetAttribute(", pw,
                                    ", CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)"));
      if (!st.ok()) {
        errors.push_back(std::string(st.message()));
        continue;
      }
      plan->plan = ep;
      plan->workspace = ws;
      plan->descriptors = g.TakeOwned();
      return absl::OkStatus();
    }
  }
  return absl::UnimplementedError(absl::StrCat(
      "no cuDNN engine builds a plan for ", Describe(plan->spec), ": ",
      errors.empty() ? std::string("no engine configuration")
                     : absl::StrJoin(errors, "; ")));
}

/// Runs `plan` with the device addresses of AttentionOperands(plan.spec),
/// in that order.
absl::Status Execute(const Cudnn& lib, cudnnHandle_t handle,
                     const CudnnAttentionRunner::Plan& plan,
                     const std::vector<uint64_t>& addresses, uint64_t workspace,
                     CUstream stream) {
  LLMC_RT_RETURN_IF_ERROR(
      lib.Check(lib.cudnnSetStream(handle, reinterpret_cast<cudaStream_t>(stream)),
                "cudnnSetStream"));
  std::vector<int64_t> uids = {kUidScale};
  std::vector<void*> ptrs = {const_cast<float*>(&plan.scale)};
  std::vector<AttentionOperand> operands = AttentionOperands(plan.spec);
  for (size_t i = 0; i < operands.size(); ++i) {
    uids.push_back(UidOf(operands[i].name));
    ptrs.push_back(reinterpret_cast<void*>(addresses[i]));
  }
  if (plan.spec.causal) {
    uids.push_back(kUidNegInf);
    ptrs.push_back(const_cast<float*>(&plan.neg_inf));
  }
  if (plan.spec.backward) {
    uids.push_back(kUidOne);
    ptrs.push_back(const_cast<float*>(&plan.one));
  }
  void* ws = reinterpret_cast<void*>(workspace);
  cudnnBackendDescriptor_t vp = nullptr;
  LLMC_RT_RETURN_IF_ERROR(
      lib.Check(lib.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp),
                "cudnnBackendCreateDescriptor(variant pack)"));
  Desc owner(&lib, vp);
  LLMC_RT_RETURN_IF_ERROR(lib.Check(
      lib.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                   static_cast<int64_t>(uids.size()), uids.data()),
      "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)"));
  LLMC_RT_RETURN_IF_ERROR(lib.Check(
      lib.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                   CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
                                   ptrs.data()),
      "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)"));
  LLMC_RT_RETURN_IF_ERROR(lib.Check(
      lib.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                   1, &ws),
      "cudnnBackendSetAttribute(variant pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)"));
  LLMC_RT_RETURN_IF_ERROR(
      lib.Check(lib.cudnnBackendFinalize(vp), "cudnnBackendFinalize(variant pack)"));
  return lib.Check(lib.cudnnBackendExecute(handle, plan.plan, vp),
                   absl::StrCat("cudnnBackendExecute(", Describe(plan.spec), ")"));
}

/// Runs `plan` once on zeroed scratch tensors (default stream, synchronous).
absl::Status TrialRun(const Cudnn& lib, cudnnHandle_t handle,
                      const CudnnAttentionRunner::Plan& plan, MemoryPool* pool,
                      uint64_t workspace) {
  LLMC_RT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  std::vector<AttentionOperand> operands = AttentionOperands(plan.spec);
  std::vector<PooledBuffer> bufs(operands.size());
  std::vector<uint64_t> addresses;
  for (size_t i = 0; i < operands.size(); ++i) {
    LLMC_RT_ASSIGN_OR_RETURN(bufs[i], PooledBuffer::Allocate(pool, operands[i].bytes));
    LLMC_RT_RETURN_IF_ERROR(LLMC_VENDOR_CALL(*cu, cuMemsetD8,
                                             static_cast<CUdeviceptr>(bufs[i].ptr()), 0,
                                             operands[i].bytes));
    addresses.push_back(bufs[i].ptr());
  }
  LLMC_RT_RETURN_IF_ERROR(Execute(lib, handle, plan, addresses, workspace, nullptr));
  return LLMC_VENDOR_CALL(*cu, cuCtxSynchronize);
}

}  // namespace

std::unique_ptr<CudnnAttentionRunner> CudnnAttentionRunner::Create(
    const Executable& exe, MemoryPool* pool, absl::StatusOr<const Cudnn*> lib) {
  std::unique_ptr<CudnnAttentionRunner> r(new CudnnAttentionRunner());
  const size_t n = exe.attentions.size();
  r->specs_ = exe.attentions;
  r->plan_of_.assign(n, -1);
  r->fallback_.assign(n, "");
  if (n == 0) return r;
  if (!lib.ok()) {
    r->global_fallback_ = std::string(lib.status().message());
    return r;
  }
  r->lib_ = *lib;
  const Cudnn& cd = *r->lib_;
  cudnnHandle_t handle = nullptr;
  if (absl::Status st = cd.Check(cd.cudnnCreate(&handle), "cudnnCreate"); !st.ok()) {
    r->global_fallback_ = std::string(st.message());
    return r;
  }
  r->handle_ = handle;
  std::map<PlanKey, int> by_key;
  std::vector<std::string> plan_errors;  // by plan index, "" when built
  for (size_t i = 0; i < n; ++i) {
    const AttentionSpec& s = exe.attentions[i];
    if (std::string why = CudnnAttentionUnsupportedReason(s); !why.empty()) {
      r->fallback_[i] = why;
      continue;
    }
    auto [it, fresh] = by_key.emplace(KeyOf(s), static_cast<int>(r->plans_.size()));
    if (fresh) {
      auto plan = std::make_unique<Plan>();
      plan->spec = s;
      plan->scale = s.scale;
      absl::Status st = BuildPlan(cd, handle, plan.get());
      plan_errors.push_back(st.ok() ? "" : std::string(st.message()));
      r->plans_.push_back(std::move(plan));
    }
    if (plan_errors[it->second].empty())
      r->plan_of_[i] = it->second;
    else
      r->fallback_[i] = plan_errors[it->second];
  }
  // One workspace for every plan (they run one at a time on a stream).
  int64_t ws = 0;
  for (size_t p = 0; p < r->plans_.size(); ++p)
    if (plan_errors[p].empty()) ws = std::max(ws, r->plans_[p]->workspace);
  if (ws > 0) {
    auto buf = PooledBuffer::Allocate(pool, ws);
    if (!buf.ok()) {
      for (size_t i = 0; i < n; ++i)
        if (r->plan_of_[i] >= 0) {
          r->plan_of_[i] = -1;
          r->fallback_[i] = absl::StrCat("cuDNN workspace of ", ws,
                                         " bytes: ", buf.status().message());
        }
      return r;
    }
    r->workspace_ = std::move(*buf);
  }
  // A trial run per plan, outside any capture.
  for (size_t p = 0; p < r->plans_.size(); ++p) {
    if (!plan_errors[p].empty()) continue;
    absl::Status st = TrialRun(cd, handle, *r->plans_[p], pool, r->workspace_.ptr());
    if (st.ok()) continue;
    for (size_t i = 0; i < n; ++i)
      if (r->plan_of_[i] == static_cast<int>(p)) {
        r->plan_of_[i] = -1;
        r->fallback_[i] = absl::StrCat("trial run of the cuDNN plan failed: ", st.message());
      }
  }
  return r;
}

CudnnAttentionRunner::~CudnnAttentionRunner() {
  plans_.clear();  // descriptors before the handle
  if (handle_ && lib_) lib_->cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

absl::StatusOr<bool> CudnnAttentionRunner::Run(
    int index, const std::function<uint64_t(const BufferRef&)>& address, CUstream stream) {
  if (!Ready(index)) return false;
  const Plan& plan = *plans_[plan_of_[index]];
  std::vector<uint64_t> addresses;
  for (const AttentionOperand& op : AttentionOperands(specs_[index])) {
    uint64_t a = address(op.ref);
    if (a == 0 || a % 16 != 0) return false;
    addresses.push_back(a);
  }
  absl::Status st = Execute(*lib_, static_cast<cudnnHandle_t>(handle_), plan, addresses,
                            workspace_.ptr(), stream);
  if (st.ok()) return true;
  // Never an error of the run: this spec runs its kernel from now on.
  plan_of_[index] = -1;
  fallback_[index] = absl::StrCat("cuDNN execution failed, using the kernel since: ",
                                  st.message());
  return false;
}

#endif  // LLMC_HAVE_CUDNN

bool CudnnAttentionRunner::Ready(int index) const {
  return index >= 0 && index < static_cast<int>(plan_of_.size()) && plan_of_[index] >= 0;
}

int CudnnAttentionRunner::num_ready() const {
  int n = 0;
  for (int p : plan_of_) n += p >= 0;
  return n;
}

std::string CudnnAttentionRunner::Report() const {
  std::vector<std::string> lines;
  if (!global_fallback_.empty())
    lines.push_back(absl::StrCat("llmc kernel for all ", plan_of_.size(),
                                 " attention launch(es): ", global_fallback_));
#if LLMC_HAVE_CUDNN
  for (size_t p = 0; p < plans_.size(); ++p) {
    std::vector<int> users;
    for (size_t i = 0; i < plan_of_.size(); ++i)
      if (plan_of_[i] == static_cast<int>(p)) users.push_back(static_cast<int>(i));
    if (users.empty()) continue;
    lines.push_back(absl::StrCat("cuDNN ", VersionString(lib_->version), " (",
                                 lib_->library->path(), ") for attention ",
                                 absl::StrJoin(users, ", "), ": ", Describe(plans_[p]->spec),
                                 ", workspace ", plans_[p]->workspace, " bytes"));
  }
#endif
  for (size_t i = 0; i < fallback_.size(); ++i)
    if (!fallback_[i].empty())
      lines.push_back(absl::StrCat("llmc kernel for attention ", i, ": ", fallback_[i]));
  return absl::StrJoin(lines, "\n");
}

}  // namespace llmc::rt
