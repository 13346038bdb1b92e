//===- Elementwise.cpp - fused elementwise kernel generator ---------------===//
//
// Emits one kernel evaluating a small DAG of elementwise ops per output
// element. The DAG becomes a straight-line `__device__` function `ew_body`
// taking one element of each input (storage types) and producing one element
// of each output; the kernel is a grid-stride loop around it with a 16-byte
// vectorized fast path when every input is contiguous (or a scalar).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace detail {

const char *EwOpName(EwOp op) {
  switch (op) {
  case EwOp::add: return "add";
  case EwOp::sub: return "sub";
  case EwOp::mul: return "mul";
  case EwOp::div: return "div";
  case EwOp::neg: return "neg";
  case EwOp::abs: return "abs";
  case EwOp::exp: return "exp";
  case EwOp::log: return "log";
  case EwOp::tanh: return "tanh";
  case EwOp::sin: return "sin";
  case EwOp::cos: return "cos";
  case EwOp::sqrt: return "sqrt";
  case EwOp::rsqrt: return "rsqrt";
  case EwOp::pow: return "pow";
  case EwOp::maximum: return "maximum";
  case EwOp::minimum: return "minimum";
  case EwOp::silu: return "silu";
  case EwOp::gelu_erf: return "gelu_erf";
  case EwOp::gelu_tanh: return "gelu_tanh";
  case EwOp::relu: return "relu";
  case EwOp::sigmoid: return "sigmoid";
  case EwOp::compare: return "compare";
  case EwOp::select: return "select";
  case EwOp::cast: return "cast";
  case EwOp::constant: return "constant";
  }
  return "?";
}

int EwArity(EwOp op) {
  switch (op) {
  case EwOp::constant: return 0;
  case EwOp::add: case EwOp::sub: case EwOp::mul: case EwOp::div:
  case EwOp::pow: case EwOp::maximum: case EwOp::minimum: case EwOp::compare:
    return 2;
  case EwOp::select: return 3;
  default: return 1;
  }
}

const char *const kEwDeviceHelpers =
    "LLMC_DEV float ew_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "LLMC_DEV float ew_silu(float x) { return x / (1.0f + expf(-x)); }\n"
    "LLMC_DEV float ew_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }\n"
    "LLMC_DEV float ew_gelu_tanh(float x) {\n"
    "  const float kBeta = 0.7978845608028654f, kKappa = 0.044715f;  // sqrt(2/pi)\n"
    "  return 0.5f * x * (1.0f + tanhf(kBeta * (x + kKappa * x * x * x)));\n"
    "}\n";

} // namespace detail

namespace {

const char *CmpOp(CmpPredicate p) {
  switch (p) {
  case CmpPredicate::eq: return "==";
  case CmpPredicate::ne: return "!=";
  case CmpPredicate::lt: return "<";
  case CmpPredicate::le: return "<=";
  case CmpPredicate::gt: return ">";
  case CmpPredicate::ge: return ">=";
  }
  return "==";
}

/// The C++ of the nodes of an elementwise DAG: operand -(i + 1) is variable
/// x<i> of type types[i], operand k >= 0 is n<k>.
struct NodeMath {
  const std::vector<ScalarType> &types;
  const std::vector<EwNode> &nodes;

  bool ValueIsInt(int operand) const {
    if (operand < 0) return IsIntType(types[-operand - 1]);
    return IsIntType(nodes[operand].type);
  }
  std::string Var(int operand) const {
    if (operand < 0) return "x" + std::to_string(-operand - 1);
    return "n" + std::to_string(operand);
  }
  // Operand as fp32 / int64 expression.
  std::string F(int o) const {
    return ValueIsInt(o) ? "(float)" + Var(o) : Var(o);
  }
  std::string I(int o) const {
    return ValueIsInt(o) ? Var(o) : "(int64_t)" + Var(o);
  }

  // Returns {expr, expr_is_int}.
  std::pair<std::string, bool> Expr(const EwNode &n) const {
    const bool int_node = IsIntType(n.type);
    auto ops = n.operands;
    auto a = [&](int i) { return ops[i]; };
    // Integer arithmetic only when the node and all operands are integers.
    bool all_int = int_node;
    for (int o : ops) all_int = all_int && ValueIsInt(o);
    switch (n.op) {
    case EwOp::constant:
      if (int_node) return {std::to_string(static_cast<long long>(n.constant)) + "LL", true};
      return {FloatLit(static_cast<float>(n.constant)), false};
    case EwOp::add: case EwOp::sub: case EwOp::mul: {
      const char *sym = n.op == EwOp::add ? " + " : n.op == EwOp::sub ? " - " : " * ";
      if (all_int) return {I(a(0)) + sym + I(a(1)), true};
      return {F(a(0)) + sym + F(a(1)), false};
    }
    case EwOp::div:
      if (all_int)
        return {"(" + I(a(1)) + " == 0 ? (int64_t)0 : " + I(a(0)) + " / " + I(a(1)) + ")", true};
      return {F(a(0)) + " / " + F(a(1)), false};
    case EwOp::neg:
      if (all_int) return {"-" + I(a(0)), true};
      return {"-" + F(a(0)), false};
    case EwOp::abs:
      if (all_int) return {"(" + I(a(0)) + " < 0 ? -" + I(a(0)) + " : " + I(a(0)) + ")", true};
      return {"fabsf(" + F(a(0)) + ")", false};
    case EwOp::exp: return {"expf(" + F(a(0)) + ")", false};
    case EwOp::log: return {"logf(" + F(a(0)) + ")", false};
    case EwOp::tanh: return {"tanhf(" + F(a(0)) + ")", false};
    // Accurate sinf/cosf (slow path with Payne-Hanek reduction for large |x|):
    // RoPE angles reach thousands of radians, where __sinf/__cosf lose
    // all accuracy.
    case EwOp::sin: return {"sinf(" + F(a(0)) + ")", false};
    case EwOp::cos: return {"cosf(" + F(a(0)) + ")", false};
    case EwOp::sqrt: return {"sqrtf(" + F(a(0)) + ")", false};
    case EwOp::rsqrt: return {"rsqrtf(" + F(a(0)) + ")", false};
    case EwOp::pow: {
      // A constant exponent of 1, 2 or 3 (the RMSNorm's x^2 and its
      // backward's x^1 and rstd^3) as multiplies: powf takes some 40
      // instructions, which row kernels of training steps are bound by.
      // x^1 is exact; x*x is correctly rounded, x*x*x within 2 ulp (two roundings).
      if (a(1) >= 0 && nodes[a(1)].op == EwOp::constant && !IsIntType(nodes[a(1)].type)) {
        const double e = nodes[a(1)].constant;
        const std::string x = F(a(0));
        if (e == 1.0) return {x, false};
        if (e == 2.0) return {x + " * " + x, false};
        if (e == 3.0) return {x + " * " + x + " * " + x, false};
      }
      return {"powf(" + F(a(0)) + ", " + F(a(1)) + ")", false};
    }
    case EwOp::maximum: case EwOp::minimum: {
      const bool mx = n.op == EwOp::maximum;
      if (all_int)
        return {"(" + I(a(0)) + (mx ? " > " : " < ") + I(a(1)) + " ? " + I(a(0)) + " : " + I(a(1)) + ")", true};
      return {std::string(mx ? "llmc_maxf(" : "llmc_minf(") + F(a(0)) + ", " + F(a(1)) + ")", false};
    }
    case EwOp::silu: return {"ew_silu(" + F(a(0)) + ")", false};
    case EwOp::gelu_erf: return {"ew_gelu_erf(" + F(a(0)) + ")", false};
    case EwOp::gelu_tanh: return {"ew_gelu_tanh(" + F(a(0)) + ")", false};
    case EwOp::sigmoid: return {"ew_sigmoid(" + F(a(0)) + ")", false};
    case EwOp::relu:
      if (all_int) return {"(" + I(a(0)) + " < 0 ? (int64_t)0 : " + I(a(0)) + ")", true};
      return {"(" + F(a(0)) + " < 0.0f ? 0.0f : " + F(a(0)) + ")", false};  // NaN passes
    case EwOp::compare: {
      const bool cmp_int = ValueIsInt(a(0)) && ValueIsInt(a(1));
      std::string e = cmp_int ? I(a(0)) + " " + CmpOp(n.pred) + " " + I(a(1))
                              : F(a(0)) + " " + CmpOp(n.pred) + " " + F(a(1));
      return {"(int64_t)(" + e + ")", true};
    }
    case EwOp::select: {
      std::string c = ValueIsInt(a(0)) ? "(" + Var(a(0)) + " != 0)" : "(" + Var(a(0)) + " != 0.0f)";
      const bool sel_int = int_node && ValueIsInt(a(1)) && ValueIsInt(a(2));
      if (sel_int) return {"(" + c + " ? " + I(a(1)) + " : " + I(a(2)) + ")", true};
      return {"(" + c + " ? " + F(a(1)) + " : " + F(a(2)) + ")", false};
    }
    case EwOp::cast:
      return {Var(a(0)), ValueIsInt(a(0))};
    }
    return {"0", true};
  }

  // Converts `e` (int64 when is_int, else fp32) to the node's value domain,
  // applying the rounding / wrapping of the node type for cast nodes.
  std::string Convert(const std::string &e, bool is_int, ScalarType t, bool is_cast) const {
    if (IsIntType(t)) {
      std::string v = is_int ? "(" + e + ")" : "(int64_t)(" + e + ")";
      if (t == ScalarType::i1)
        return is_int ? "(int64_t)((" + e + ") != 0)" : "(int64_t)((" + e + ") != 0.0f)";
      if (is_cast && t == ScalarType::i8) return "(int64_t)(int8_t)" + v;
      if (is_cast && t == ScalarType::i32) return "(int64_t)(int32_t)" + v;
      return v;
    }
    std::string v = is_int ? "(float)(" + e + ")" : e;
    if (is_cast && t != ScalarType::f32)
      return std::string("toF(fromF<") + CTypeName(t) + ">(" + v + "))";
    return v;
  }

  /// Whether node k's value is rounded (or wrapped) to its type where it
  /// is defined: at casts, or at every node with round_every_node.
  bool Rounds(size_t k, bool round_every_node) const {
    return nodes[k].op == EwOp::cast || round_every_node;
  }
  /// Whether node k's value is rounded to a narrower float type (bf16, f16,
  /// fp8) where it is defined.
  bool RoundsToNarrowFloat(size_t k, bool round_every_node) const {
    const EwNode &n = nodes[k];
    return !IsIntType(n.type) && n.type != ScalarType::f32 && Rounds(k, round_every_node);
  }

  /// `const float nK = ...;` (int64_t for integer nodes). With `unrounded`
  /// (a node RoundsToNarrowFloat), the value before its rounding is named
  /// nK_u first: an output of the node's own type stores fromF(nK_u), the
  /// same bits as fromF(nK) (rounding is idempotent, saturation and NaN
  /// included) with one conversion instead of three.
  std::string Statement(size_t k, bool round_every_node, bool unrounded = false) const {
    const EwNode &n = nodes[k];
    auto [e, is_int] = Expr(n);
    const std::string name = "n" + std::to_string(k);
    std::string s;
    if (unrounded) {
      s = "const float " + name + "_u = " + (is_int ? "(float)(" + e + ")" : e) + ";\n  ";
      e = name + "_u";
      is_int = false;
    }
    s += std::string("const ") + (IsIntType(n.type) ? "int64_t" : "float") + " " + name + " = " +
         Convert(e, is_int, n.type, Rounds(k, round_every_node)) + ";  // " +
         EwOpName(n.op);
    if (n.op == EwOp::compare) s += std::string(" ") + CmpOp(n.pred);
    return s + " -> " + ScalarTypeTag(n.type);
  }
};

std::vector<ScalarType> InputTypes(const ElementwiseProgram &p) {
  std::vector<ScalarType> t;
  for (const EwInput &in : p.inputs) t.push_back(in.type);
  return t;
}

struct Emitter {
  const ElementwiseProgram &p;
  const int unroll_;
  explicit Emitter(const ElementwiseProgram &p) : p(p), unroll_(p.unroll) {}

  absl::Status Validate() const {
    if (p.outputs.empty()) return Invalid("elementwise: no outputs");
    if (p.unroll < 1 || p.unroll > 4)
      return Invalid("elementwise: unroll must be 1, 2, 3 or 4, found " + std::to_string(p.unroll));
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const EwNode &n = p.nodes[k];
      if (static_cast<int>(n.operands.size()) != EwArity(n.op))
        return Invalid(std::string("elementwise: wrong operand count for ") + EwOpName(n.op));
      for (int o : n.operands) {
        if (o < 0 && -o - 1 >= static_cast<int>(p.inputs.size()))
          return Invalid("elementwise: bad input operand");
        if (o >= 0 && o >= static_cast<int>(k))
          return Invalid("elementwise: node operand must precede node");
      }
    }
    for (const EwOutput &o : p.outputs)
      if (o.node < 0 || o.node >= static_cast<int>(p.nodes.size()))
        return Invalid("elementwise: bad output node");
    if (Tiled()) {
      for (const EwInput &in : p.inputs)
        if (in.layout == InputLayout::kStrided || in.layout == InputLayout::kRowBroadcast)
          return Invalid("elementwise: a transposed (tiled) input next to a strided or "
                         "row-broadcast one; the tiled form takes contiguous and scalar ones only");
      if (TileBytes() > kMaxTileBytes)
        return Invalid("elementwise: the transposed inputs' tiles need " +
                       std::to_string(TileBytes()) + " bytes of shared memory, more than " +
                       std::to_string(kMaxTileBytes));
    }
    return absl::OkStatus();
  }

  /// The tiled form (some input is the output's transpose).
  bool Tiled() const {
    for (const EwInput &in : p.inputs)
      if (in.layout == InputLayout::kTransposed) return true;
    return false;
  }
  static constexpr int kMaxTileBytes = 48 * 1024;  // static shared memory
  /// Shared memory of the tiles of the kTransposed inputs (64 x 65 each).
  int TileBytes() const {
    int bytes = 0;
    for (const EwInput &in : p.inputs)
      if (in.layout == InputLayout::kTransposed)
        bytes += kTransposeTile * (kTransposeTile + 1) * ScalarSize(in.type);
    return bytes;
  }

  bool NeedsShape() const {
    for (const EwInput &in : p.inputs)
      if (in.layout == InputLayout::kStrided || in.layout == InputLayout::kRowBroadcast) return true;
    return false;
  }
  bool Vectorizable() const { return !NeedsShape() && !Tiled(); }
  /// The argument list of one ew_body call: `in(i)` for input i, then
  /// `out(i)` for output i.
  template <typename InFn, typename OutFn>
  std::string BodyArgs(InFn in, OutFn out) const {
    std::string a;
    for (int i = 0; i < static_cast<int>(p.inputs.size()); ++i) a += (a.empty() ? "" : ", ") + in(i);
    for (int i = 0; i < static_cast<int>(p.outputs.size()); ++i) a += (a.empty() ? "" : ", ") + out(i);
    return a;
  }
  /// Arguments of the vector paths' ew_body call: scalars s<i>, vectors
  /// l<i><sfx>.v[e], outputs o<i>.v[e].
  std::string VectorBodyArgs(const std::string &sfx) const {
    return BodyArgs(
        [&](int i) {
          return p.inputs[i].layout == InputLayout::kScalar ? "s" + std::to_string(i)
                                                            : "l" + std::to_string(i) + sfx + ".v[e]";
        },
        [](int i) { return "o" + std::to_string(i) + ".v[e]"; });
  }
  bool HasStrided() const {
    for (const EwInput &in : p.inputs)
      if (in.layout == InputLayout::kStrided) return true;
    return false;
  }
  int VecElems() const {
    int maxsz = 1;
    for (const EwInput &in : p.inputs) maxsz = std::max(maxsz, ScalarSize(in.type));
    for (const EwOutput &o : p.outputs) maxsz = std::max(maxsz, ScalarSize(o.type));
    return 16 / maxsz;
  }

  std::string Body() const {
    std::ostringstream s;
    const int nin = static_cast<int>(p.inputs.size());
    const int nout = static_cast<int>(p.outputs.size());
    s << "// Program (" << nin << " inputs, " << p.nodes.size() << " nodes, " << nout << " outputs):\n";
    for (int i = 0; i < nin; ++i) {
      const char *lay[] = {"contiguous", "scalar", "row-broadcast [N] vs [..., N]", "strided",
                           "transposed [..., C, R] vs [..., R, C]"};
      s << "//   in" << i << ": " << ScalarTypeTag(p.inputs[i].type) << ", "
        << lay[static_cast<int>(p.inputs[i].layout)] << "\n";
    }
    for (int i = 0; i < nout; ++i)
      s << "//   out" << i << ": " << ScalarTypeTag(p.outputs[i].type) << " = n" << p.outputs[i].node << "\n";
    if (p.outputs_alias_inputs)
      s << "// In place: an output shares memory with an input (no __restrict__).\n";
    if (HasStrided())
      s << "// Strided inputs: a vector path for rows of stride 1 or 0 (StridedRows), then scalar;\n"
           "// 32-bit index math below 2^31 elements.\n";
    s << "static constexpr int kNumInputs = " << nin << ";\n";
    s << "static constexpr int kVec = " << VecElems() << ";  // elements per 16-byte access of the widest type\n";
    s << "static constexpr int kThreads = " << kElementwiseThreads << ";\n";
    if (Vectorizable() && unroll_ > 1) s << "static constexpr int kUnroll = " << unroll_ << ";  // vectors in flight per thread\n";
    s << "\n";

    s << kEwDeviceHelpers << "\n";
    if (NeedsShape()) {
      s << "// Runtime shape argument (host: PackElementwiseShape).\n"
           "struct EwShape {\n  long long rank;\n  long long sizes[8];  // output dims, outermost first\n"
           "  long long strides[kNumInputs][8];  // per input, in elements, 0 = broadcast\n};\n\n";
    }
    if (HasStrided()) StridedHelpers(s);

    // ---- the DAG as a straight-line function ----
    s << "// One output element from one element of each input. fp32 math for float\n"
      << (p.round_every_node
              ? "// nodes, int64 math for integer nodes; every node rounded to its type.\n"
              : "// nodes, int64 math for integer nodes; rounding only at casts/outputs.\n");
    s << "LLMC_DEV void ew_body(";
    bool first = true;
    for (int i = 0; i < nin; ++i) {
      s << (first ? "" : ", ") << "const " << CTypeName(p.inputs[i].type) << " a" << i;
      first = false;
    }
    for (int i = 0; i < nout; ++i) {
      s << (first ? "" : ", ") << CTypeName(p.outputs[i].type) << "& r" << i;
      first = false;
    }
    s << ") {\n";
    for (int i = 0; i < nin; ++i) {
      if (IsIntType(p.inputs[i].type)) s << "  const int64_t x" << i << " = toI(a" << i << ");\n";
      else s << "  const float x" << i << " = toF(a" << i << ");\n";
    }
    const std::vector<ScalarType> types = InputTypes(p);
    const NodeMath math{types, p.nodes};
    // Outputs that store a node rounded to their own type store its value
    // before the rounding (NodeMath::Statement).
    auto storesUnrounded = [&](const EwOutput &o) {
      return o.type == p.nodes[o.node].type && math.RoundsToNarrowFloat(o.node, p.round_every_node);
    };
    std::vector<bool> unrounded(p.nodes.size(), false);
    for (const EwOutput &o : p.outputs)
      if (storesUnrounded(o)) unrounded[o.node] = true;
    for (size_t k = 0; k < p.nodes.size(); ++k)
      s << "  " << math.Statement(k, p.round_every_node, unrounded[k]) << "\n";
    for (int i = 0; i < nout; ++i) {
      const EwOutput &o = p.outputs[i];
      const bool src_int = IsIntType(p.nodes[o.node].type);
      s << "  r" << i << " = " << (src_int ? "fromI<" : "fromF<") << CTypeName(o.type) << ">(n" << o.node
        << (storesUnrounded(o) ? "_u" : "") << ");\n";
    }
    s << "}\n\n";
    return s.str();
  }

  /// Device helpers of kernels with strided inputs: division by a run-time
  /// constant as a multiply-high and a shift (Granlund and Montgomery,
  /// "Division by Invariant Integers using Multiplication", PLDI 1994; the
  /// form of PyTorch's IntDivider), exact for every 32-bit dividend, so an
  /// output index below 2^31 is split into per-dimension indices without a
  /// 64-bit division (~100 instructions each on the GPU, which made these
  /// kernels compute bound). LLMC_EW_INDEX32_LIMIT (2^31) is the numel below
  /// which it is used; it is a macro only so that the emulator tests can
  /// define it to 0 and run the 64-bit loops (nothing else sets it).
  static void StridedHelpers(std::ostringstream &s) {
    s << "#ifndef LLMC_EW_INDEX32_LIMIT\n"
         "#define LLMC_EW_INDEX32_LIMIT 2147483648LL\n"
         "#endif\n"
         "struct EwDivider { unsigned d, m, shift; };\n"
         "LLMC_DEV EwDivider ewDivider(unsigned d) {  // d >= 1\n"
         "  EwDivider r;\n"
         "  r.d = d;\n"
         "  r.shift = 0;\n"
         "  while (r.shift < 32 && (1ull << r.shift) < d) ++r.shift;\n"
         "  r.m = (unsigned)(((1ull << 32) * ((1ull << r.shift) - d)) / d + 1);\n"
         "  return r;\n"
         "}\n"
         "LLMC_DEV unsigned ewDiv(unsigned n, const EwDivider &v) {\n"
         "  const unsigned t = __umulhi(n, v.m);\n"
         "  return (unsigned)(((unsigned long long)t + n) >> v.shift);\n"
         "}\n\n";
  }

  /// Per-input element offsets of the output element `i` (row-major over
  /// shape.sizes) into off[], with 32-bit dividers `dv` when `idx32`, else
  /// 64-bit division.
  void Decompose(std::ostringstream &s, const std::string &ind, bool idx32) const {
    const int nin = static_cast<int>(p.inputs.size());
    s << ind << "int64_t off[kNumInputs];\n#pragma unroll\n"
      << ind << "for (int k = 0; k < kNumInputs; ++k) off[k] = 0;\n";
    if (idx32) {
      s << ind << "unsigned rem = (unsigned)i;\n"
        << ind << "for (int d = (int)shape.rank - 1; d >= 0; --d) {\n"
        << ind << "  const unsigned q = ewDiv(rem, dv[d]);\n"
        << ind << "  const int64_t idx = rem - q * dv[d].d;\n"
        << ind << "  rem = q;\n";
    } else {
      s << ind << "int64_t rem = i;\n"
        << ind << "for (int d = (int)shape.rank - 1; d >= 0; --d) {\n"
        << ind << "  const int64_t sz = shape.sizes[d];\n"
        << ind << "  const int64_t idx = rem % sz;\n"
        << ind << "  rem /= sz;\n";
    }
    for (int i = 0; i < nin; ++i)
      if (p.inputs[i].layout == InputLayout::kStrided)
        s << ind << "  off[" << i << "] += idx * shape.strides[" << i << "][d];\n";
    s << ind << "}\n";
  }

  /// The dividers of the output's dimensions, once per thread for both
  /// strided loops (`idx32`: numel below LLMC_EW_INDEX32_LIMIT).
  static void Dividers(std::ostringstream &s) {
    s << "  const bool idx32 = numel < LLMC_EW_INDEX32_LIMIT;\n"
         "  EwDivider dv[8];\n"
         "  if (idx32)\n"
         "    for (int d = 0; d < (int)shape.rank; ++d)\n"
         "      dv[d] = ewDivider(shape.sizes[d] > 0 ? (unsigned)shape.sizes[d] : 1u);  // no work when 0\n";
  }

  /// Emits `if (idx32) { loop(true) } else { loop(false) }`.
  template <typename LoopFn>
  static void IndexWidthSplit(std::ostringstream &s, const std::string &ind, LoopFn loop) {
    s << ind << "if (idx32) {\n";
    loop(true);
    s << ind << "} else {\n";
    loop(false);
    s << ind << "}\n";
  }

  /// The vector path of a kernel with strided inputs (a transpose that
  /// keeps the innermost dimension, e.g. [B, H, S, D] <-> [B, S, H, D], or
  /// a value per row broadcast along it, e.g. RMSNorm's [B, S, 1] inverse
  /// RMS against [B, S, N]): when, at run time, every strided input reads
  /// its innermost dimension with stride 1 (then every outer stride must be
  /// a multiple of kVec and its pointer 16-byte aligned) or with stride 0
  /// (one element per row, loaded once and repeated), the row length and
  /// numel are multiples of kVec, and the other pointers are 16-byte
  /// aligned, each thread moves kVec elements per step with one index
  /// decomposition and 16-byte loads and stores instead of kVec of each.
  /// Otherwise the scalar path below does all of it.
  void StridedRows(std::ostringstream &s) const {
    const int nin = static_cast<int>(p.inputs.size());
    const int nout = static_cast<int>(p.outputs.size());
    s << "  // ---- strided rows: innermost dim of stride 1 (sizes and outer strides multiples\n"
         "  // of kVec, 16-byte aligned) or 0 (a value per row): kVec elements per step ----\n"
         "  {\n"
         "    const int64_t row_v = shape.sizes[shape.rank - 1];\n"
         "    uint64_t addr_bits = 0";
    for (int i = 0; i < nout; ++i) s << " | (uint64_t)out" << i;
    for (int i = 0; i < nin; ++i)
      if (p.inputs[i].layout == InputLayout::kContiguous || p.inputs[i].layout == InputLayout::kRowBroadcast)
        s << " | (uint64_t)in" << i;
    s << ";\n"
         "    bool rows_ok = row_v % kVec == 0 && numel % kVec == 0;\n";
    for (int i = 0; i < nin; ++i)
      if (p.inputs[i].layout == InputLayout::kStrided)
        s << "    const bool col" << i << " = shape.strides[" << i << "][shape.rank - 1] == 0;\n"
          << "    if (!col" << i << ") {\n"
          << "      addr_bits |= (uint64_t)in" << i << ";\n"
          << "      rows_ok = rows_ok && shape.strides[" << i << "][shape.rank - 1] == 1;\n"
          << "      for (int d = 0; d + 1 < (int)shape.rank; ++d) rows_ok = rows_ok && shape.strides[" << i
          << "][d] % kVec == 0;\n"
          << "    }\n";
    s << "    rows_ok = rows_ok && (addr_bits & 15) == 0;\n"
         "    if (rows_ok) {\n";
    for (int i = 0; i < nin; ++i)
      if (p.inputs[i].layout == InputLayout::kScalar)
        s << "      const " << CTypeName(p.inputs[i].type) << " s" << i << " = in" << i << "[0];\n";
    auto loop = [&](bool idx32) {
      const std::string ind = "        ";
      s << "        for (int64_t v = tid; v < numel / kVec; v += nthreads) {\n"
           "          const int64_t i = v * kVec;\n";
      Decompose(s, "          ", idx32);
      for (int i = 0; i < nin; ++i) {
        const std::string vt = "LlmcVec<" + std::string(CTypeName(p.inputs[i].type)) + ", kVec>";
        switch (p.inputs[i].layout) {
        case InputLayout::kContiguous:
          s << ind << "  const " << vt << " l" << i << " = reinterpret_cast<const " << vt << "*>(in" << i
            << ")[v];\n";
          break;
        case InputLayout::kRowBroadcast:
          s << ind << "  const " << vt << " l" << i << " = *reinterpret_cast<const " << vt << "*>(in" << i
            << " + i % row_v);\n";
          break;
        case InputLayout::kStrided:
          s << ind << "  " << vt << " l" << i << ";\n"
            << ind << "  if (col" << i << ") {\n"
            << ind << "    const " << CTypeName(p.inputs[i].type) << " c = in" << i << "[off[" << i << "]];\n"
            << "#pragma unroll\n"
            << ind << "    for (int e = 0; e < kVec; ++e) l" << i << ".v[e] = c;\n"
            << ind << "  } else {\n"
            << ind << "    l" << i << " = *reinterpret_cast<const " << vt << "*>(in" << i << " + off[" << i
            << "]);\n"
            << ind << "  }\n";
          break;
        case InputLayout::kScalar:
        case InputLayout::kTransposed:  // tiled programs have their own kernel
          break;
        }
      }
      for (int i = 0; i < nout; ++i)
        s << ind << "  LlmcVec<" << CTypeName(p.outputs[i].type) << ", kVec> o" << i << ";\n";
      s << "#pragma unroll\n" << ind << "  for (int e = 0; e < kVec; ++e) ew_body(" << VectorBodyArgs("")
        << ");\n";
      for (int i = 0; i < nout; ++i)
        s << ind << "  reinterpret_cast<LlmcVec<" << CTypeName(p.outputs[i].type) << ", kVec>*>(out" << i
          << ")[v] = o" << i << ";\n";
      s << "        }\n";
    };
    IndexWidthSplit(s, "      ", loop);
    s << "      scalar_begin = numel;\n    }\n  }\n";
  }

  /// The tiled form (see EmitElementwise in KernelLibrary.h). The tiles
  /// hold the inputs in their own types, padded by one element per row.
  std::string TiledKernel(const std::string &name) const {
    static_assert(kElementwiseThreads == kTransposeThreads, "one tile per block of kThreads");
    std::ostringstream s;
    const int nin = static_cast<int>(p.inputs.size());
    const int nout = static_cast<int>(p.outputs.size());
    const char *restrict_ = p.outputs_alias_inputs ? "" : " __restrict__";
    s << "static constexpr int kTile = " << kTransposeTile << ";\n\n";
    s << "extern \"C\" __global__ void __launch_bounds__(kThreads) " << name << "(\n";
    for (int i = 0; i < nout; ++i)
      s << "    " << CTypeName(p.outputs[i].type) << "*" << restrict_ << " out" << i << ",\n";
    for (int i = 0; i < nin; ++i)
      s << "    const " << CTypeName(p.inputs[i].type) << "*" << restrict_ << " in" << i << ",\n";
    s << "    long long numel, long long rows, long long cols) {\n"
         "  (void)numel;\n"
         "  // blockIdx.x walks the row tiles: a transposed input's contiguous dimension.\n"
         "  const long long r0 = (long long)blockIdx.x * kTile, c0 = (long long)blockIdx.y * kTile;\n"
         "  const long long base = (long long)blockIdx.z * rows * cols;\n";
    for (int i = 0; i < nin; ++i)
      if (p.inputs[i].layout == InputLayout::kTransposed)
        s << "  __shared__ " << CTypeName(p.inputs[i].type) << " t" << i << "[kTile][kTile + 1];\n";
      else if (p.inputs[i].layout == InputLayout::kScalar)
        s << "  const " << CTypeName(p.inputs[i].type) << " s" << i << " = in" << i << "[0];\n";
    s << "  // Load: a transposed input holds output element (r, c) at c * rows + r, so\n"
         "  // the tile's rows are output columns. A full tile row (64 r) that starts\n"
         "  // 16-byte aligned is read in 16-byte vectors (64 / kV threads per row);\n"
         "  // otherwise one element per thread (a warp reads 32 consecutive r).\n";
    for (int i = 0; i < nin; ++i) {
      if (p.inputs[i].layout != InputLayout::kTransposed) continue;
      const std::string is = std::to_string(i), t = CTypeName(p.inputs[i].type);
      const int v = 16 / ScalarSize(p.inputs[i].type);
      s << "  {\n"
        << "    constexpr int kV = " << v << ", kPerRow = kTile / kV;  // in" << is << ": elements per vector\n"
        << "    if (r0 + kTile <= rows && rows % kV == 0 && ((unsigned long long)in" << is << " & 15) == 0) {\n"
        << "      const int x = (threadIdx.x % kPerRow) * kV;\n"
        << "#pragma unroll\n"
        << "      for (int j = threadIdx.x / kPerRow; j < kTile; j += kThreads / kPerRow) {\n"
        << "        const long long c = c0 + j;\n"
        << "        if (c < cols) {\n"
        << "          const LlmcVec<" << t << ", kV> w = *reinterpret_cast<const LlmcVec<" << t
        << ", kV>*>(in" << is << " + base + c * rows + r0 + x);\n"
        << "#pragma unroll\n"
        << "          for (int e = 0; e < kV; ++e) t" << is << "[j][x + e] = w.v[e];\n"
        << "        }\n"
        << "      }\n"
        << "    } else {\n"
        << "      for (int j = threadIdx.x / kTile; j < kTile; j += kThreads / kTile) {\n"
        << "        const int x = threadIdx.x % kTile;\n"
        << "        const long long c = c0 + j, r = r0 + x;\n"
        << "        if (c < cols && r < rows) t" << is << "[j][x] = in" << is << "[base + c * rows + r];\n"
        << "      }\n"
        << "    }\n"
        << "  }\n";
    }
    s <<         "  __syncthreads();\n"
         "  // Compute and store along the output's rows: 16 threads per tile row,\n"
         "  // 4 consecutive elements each.\n"
         "  const int x = (threadIdx.x % 16) * 4;\n"
         "  for (int y = threadIdx.x / 16; y < kTile; y += kThreads / 16) {\n"
         "    const long long r = r0 + y;\n"
         "    if (r >= rows) break;\n"
         "    const long long o = base + r * cols + c0 + x;\n"
         "    const int n = (int)(cols - c0 - x < 4 ? cols - c0 - x : 4);\n"
         "    if (n <= 0) continue;\n";
    for (int i = 0; i < nout; ++i)
      s << "    LlmcVec<" << CTypeName(p.outputs[i].type) << ", 4> o" << i << ";\n";
    s << "#pragma unroll\n"
         "    for (int e = 0; e < 4; ++e) {\n"
         "      if (e >= n) break;\n"
         "      ew_body("
      << BodyArgs(
             [&](int i) {
               const std::string is = std::to_string(i);
               switch (p.inputs[i].layout) {
               case InputLayout::kTransposed: return "t" + is + "[x + e][y]";
               case InputLayout::kScalar: return "s" + is;
               default: return "in" + is + "[o + e]";
               }
             },
             [](int i) { return "o" + std::to_string(i) + ".v[e]"; })
      << ");\n"
         "    }\n";
    for (int i = 0; i < nout; ++i) {
      const std::string t = CTypeName(p.outputs[i].type), is = std::to_string(i);
      s << "    if (n == 4 && ((unsigned long long)(out" << is << " + o) % sizeof(LlmcVec<" << t
        << ", 4>)) == 0)\n"
        << "      *reinterpret_cast<LlmcVec<" << t << ", 4>*>(out" << is << " + o) = o" << is << ";\n"
        << "    else\n"
        << "      for (int e = 0; e < n; ++e) out" << is << "[o + e] = o" << is << ".v[e];\n";
    }
    s << "  }\n}\n";
    return s.str();
  }

  std::string Kernel(const std::string &name) const {
    if (Tiled()) return TiledKernel(name);
    std::ostringstream s;
    const int nin = static_cast<int>(p.inputs.size());
    const int nout = static_cast<int>(p.outputs.size());
    s << "extern \"C\" __global__ void __launch_bounds__(kThreads) " << name << "(\n";
    // An output written over an input's memory breaks __restrict__'s
    // promise (and the read-only cache path it allows for the inputs).
    const char *restrict_ = p.outputs_alias_inputs ? "" : " __restrict__";
    for (int i = 0; i < nout; ++i)
      s << "    " << CTypeName(p.outputs[i].type) << "*" << restrict_ << " out" << i << ",\n";
    for (int i = 0; i < nin; ++i)
      s << "    const " << CTypeName(p.inputs[i].type) << "*" << restrict_ << " in" << i << ",\n";
    s << "    long long numel";
    if (NeedsShape()) s << ",\n    EwShape shape";
    s << ") {\n";
    s << "  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  const int64_t nthreads = (int64_t)gridDim.x * blockDim.x;\n"
         "  int64_t scalar_begin = 0;\n";
    if (Vectorizable()) {
      s << "  // ---- fast path: every input contiguous or scalar; 16-byte aligned ----\n";
      s << "  const uint64_t addr_bits = 0";
      for (int i = 0; i < nout; ++i) s << " | (uint64_t)out" << i;
      for (int i = 0; i < nin; ++i)
        if (p.inputs[i].layout == InputLayout::kContiguous) s << " | (uint64_t)in" << i;
      s << ";\n";
      s << "  if ((addr_bits & 15) == 0) {\n"
           "    const int64_t nvec = numel / kVec;\n";
      for (int i = 0; i < nin; ++i)
        if (p.inputs[i].layout == InputLayout::kScalar)
          s << "    const " << CTypeName(p.inputs[i].type) << " s" << i << " = in" << i << "[0];\n";
      // One 16-byte vector of every input at vector index `idx` into l<i><sfx>,
      // the body, and the store of o<i> at `idx`.
      auto loads = [&](const std::string &ind, const std::string &idx, const std::string &sfx) {
        for (int i = 0; i < nin; ++i)
          if (p.inputs[i].layout == InputLayout::kContiguous)
            s << ind << "const LlmcVec<" << CTypeName(p.inputs[i].type) << ", kVec> l" << i << sfx
              << " = reinterpret_cast<const LlmcVec<" << CTypeName(p.inputs[i].type) << ", kVec>*>(in"
              << i << ")[" << idx << "];\n";
      };
      auto bodyAndStore = [&](const std::string &ind, const std::string &idx, const std::string &sfx) {
        for (int i = 0; i < nout; ++i)
          s << ind << "LlmcVec<" << CTypeName(p.outputs[i].type) << ", kVec> o" << i << ";\n";
        s << "#pragma unroll\n" << ind << "for (int e = 0; e < kVec; ++e) ew_body(" << VectorBodyArgs(sfx)
          << ");\n";
        for (int i = 0; i < nout; ++i)
          s << ind << "reinterpret_cast<LlmcVec<" << CTypeName(p.outputs[i].type) << ", kVec>*>(out" << i
            << ")[" << idx << "] = o" << i << ";\n";
      };
      s << "    int64_t v = tid;\n";
      if (unroll_ > 1) {
        // kUnroll vectors per input per thread and iteration, all loaded before
        // any is used: more independent loads in flight per thread.
        s << "    for (; v + (kUnroll - 1) * nthreads < nvec; v += kUnroll * nthreads) {\n";
        for (int u = 0; u < unroll_; ++u)
          loads("      ", "v + " + std::to_string(u) + " * nthreads", "_" + std::to_string(u));
        for (int u = 0; u < unroll_; ++u) {
          s << "      {\n";
          bodyAndStore("        ", "v + " + std::to_string(u) + " * nthreads", "_" + std::to_string(u));
          s << "      }\n";
        }
        s << "    }\n";
      }
      s << "    for (; v < nvec; v += nthreads) {\n";
      loads("      ", "v", "");
      bodyAndStore("      ", "v", "");
      s << "    }\n    scalar_begin = nvec * kVec;\n  }\n";
    }
    const bool strided = HasStrided();
    if (strided) {
      Dividers(s);
      StridedRows(s);
    }
    s << "  // ---- scalar path (tail, unaligned pointers, broadcasting) ----\n";
    if (NeedsShape()) s << "  const int64_t row_n = shape.sizes[shape.rank - 1];\n";
    auto loop = [&](bool idx32) {
      const std::string ind = strided ? "    " : "  ";
      s << ind << "for (int64_t i = scalar_begin + tid; i < numel; i += nthreads) {\n";
      if (strided) {
        s << ind << "  // decompose the output index (row-major) into per-input offsets\n";
        Decompose(s, ind + "  ", idx32);
      }
      s << ind << "  ew_body("
        << BodyArgs(
               [&](int i) {
                 const std::string in = "in" + std::to_string(i);
                 switch (p.inputs[i].layout) {
                 case InputLayout::kContiguous: return in + "[i]";
                 case InputLayout::kScalar: return in + "[0]";
                 case InputLayout::kRowBroadcast: return in + "[i % row_n]";
                 case InputLayout::kStrided:
                 case InputLayout::kTransposed:  // tiled programs: TiledKernel
                   break;
                 }
                 return in + "[off[" + std::to_string(i) + "]]";
               },
               [](int i) { return "out" + std::to_string(i) + "[i]"; })
        << ");\n" << ind << "}\n";
    };
    if (strided) IndexWidthSplit(s, "  ", loop);
    else loop(false);
    s << "}\n";
    return s.str();
  }
};

} // namespace

std::string detail::EwNodeStatement(const std::vector<ScalarType> &value_types,
                                    const std::vector<EwNode> &nodes, size_t k,
                                    bool round_every_node) {
  return NodeMath{value_types, nodes}.Statement(k, round_every_node);
}

bool ElementwiseNeedsShape(const ElementwiseProgram &prog) {
  return Emitter(prog).NeedsShape();
}

bool ElementwiseTiled(const ElementwiseProgram &prog) { return Emitter(prog).Tiled(); }

bool ElementwiseTiledFits(const ElementwiseProgram &prog) {
  return Emitter(prog).TileBytes() <= Emitter::kMaxTileBytes;
}

absl::StatusOr<LaunchDims> ElementwiseTransposedLaunch(int64_t batch, int64_t rows, int64_t cols) {
  return Dims(CeilDiv(rows, kTransposeTile), CeilDiv(cols, kTransposeTile), batch,
              kTransposeThreads);
}

absl::StatusOr<KernelCode> EmitElementwise(const ElementwiseProgram &prog) {
  Emitter em(prog);
  if (absl::Status st = em.Validate(); !st.ok())
    return st;
  const std::string body = em.Body();
  KernelCode kc;
  kc.name = "llmc_ew_" + HashHex(body);
  const std::string header =
      "// llmc fused elementwise kernel " + kc.name +
      (em.Tiled() ? "\n// 64 x 64 output tiles; transposed inputs through shared memory.\n"
                  : "\n// Grid-stride loop over the flattened output; 16-byte vector fast path.\n");
  LLMC_ASSIGN_OR_RETURN(kc.source, Assemble(header, "", body + em.Kernel(kc.name)));
  return kc;
}

absl::StatusOr<LaunchDims> ElementwiseLaunch(const ElementwiseProgram &prog, int64_t numel) {
  Emitter em(prog);
  if (em.Tiled())
    return Invalid("elementwise: a tiled program (a transposed input) is launched by "
                   "ElementwiseTransposedLaunch");
  const int64_t per_thread = em.Vectorizable() ? em.VecElems() : 1;
  const int64_t work = CeilDiv(std::max<int64_t>(numel, 1), per_thread);
  int64_t blocks = CeilDiv(work, kElementwiseThreads);
  // Grid-stride: cap at 16 resident-ish blocks per SM.
  blocks = std::min<int64_t>(blocks, int64_t{kAssumedNumSMs} * 16);
  return Dims(blocks, 1, 1, kElementwiseThreads);
}

absl::StatusOr<std::vector<int64_t>>
PackElementwiseShape(const ElementwiseProgram &prog,
                     const std::vector<int64_t> &out_sizes,
                     const std::vector<std::vector<int64_t>> &in_strides) {
  const int rank = static_cast<int>(out_sizes.size());
  if (rank < 1 || rank > kElementwiseMaxRank)
    return Unsupported("elementwise: a strided or broadcast read over " + std::to_string(rank) +
                       " dimensions (after merging size-1 and contiguous ones); 1 to 8 are "
                       "supported");
  const size_t nin = prog.inputs.size();
  std::vector<int64_t> data(1 + 8 + 8 * nin, 0);
  data[0] = rank;
  for (int d = 0; d < 8; ++d) data[1 + d] = d < rank ? out_sizes[d] : 1;
  for (size_t i = 0; i < nin; ++i) {
    if (prog.inputs[i].layout != InputLayout::kStrided) continue;
    if (i >= in_strides.size() || static_cast<int>(in_strides[i].size()) != rank)
      return Invalid("elementwise: strided input needs `rank` strides");
    for (int d = 0; d < rank; ++d) data[9 + 8 * i + d] = in_strides[i][d];
  }
  return data;
}

} // namespace llmc::cuda
