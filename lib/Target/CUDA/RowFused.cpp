//===- RowFused.cpp - row reductions fused with their elementwise ops ----===//
//
// cuda::EmitRowFused: one kernel for row reductions with the elementwise
// ops before and after them (Inductor's persistent reduction; an RMSNorm or
// LayerNorm backward's dx, a softmax). One block per row, grid-stride over
// the rows. Per row: the per-row inputs and values, then one pass over the
// row per reduction level (a reduction that reads another's result is formed
// in a later pass), each followed by a block all-reduce and the per-row
// values it makes computable, then a last pass that computes and stores the
// per-element outputs. When no per-element output or column sum reads a
// reduction (a value stored together with its row maximum, as the fp8
// policy's amax joins the value's producer), they are stored by the last
// reduction pass and there is no last pass: one read of the row fewer (the
// only one, with one reduction level). The node math is the elementwise
// kernel's (EwNodeStatement): reductions are the variables x<inputs + q>.
//
// Column sums (a norm's weight gradient, summed over the rows) are
// accumulated in the pass that stores the per-element outputs (the last
// pass, or the last reduction pass as above): each thread adds its columns'
// values of every row its block takes to fp32 registers cs<c>[], and after the rows
// the block writes them as one row of partials; a column reduction of the
// partials over the blocks (EmitColumnReduce) finishes the sums in a fixed
// order. The loops of that pass have fixed, unrolled trip counts so that
// cs<c>[] is indexed by constants and never goes to local memory.
//
// Two forms of the vector path (16-byte vectors, n % kVec == 0, pointers
// aligned at run time):
//  - register-resident: when n / kVec is a multiple of the block size (a
//    power of two from 32 to 256, the largest that divides it) and the
//    dense / column vectors the passes read take at most
//    kMaxResidentBytes per thread, each thread loads its kPer =
//    n / kVec / kThreads vectors of every such input once per row, all
//    loads issued up front (a fully unrolled loop), into register arrays
//    c<i>[kPer]; every pass, the outputs' included, then reads those copies
//    and never global memory again.
//  - streaming: each pass re-reads its inputs (from L1/L2 for rows of a few
//    KiB).
// Both accumulate in the same order (thread t: vectors t, t + kThreads, ...
// in increasing order, elements 0..kVec-1 within each; then the same block
// all-reduce), so for the same kThreads they give bitwise equal results
// (the resident form may pick a larger block than the streaming form would
// for the same n, e.g. 256 instead of 128 threads at n = 2048 in f32: the
// reductions' order, and so their low bits, then differ).
// The scalar path (n % kVec != 0, or unaligned pointers) is the streaming
// loop over elements j = t, t + kThreads, ...: a different order.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace llmc::cuda {
using namespace detail;

namespace {

constexpr int kMinThreads = 32;
constexpr int kMaxThreads = 256;
/// Vectors each thread should take per pass before the block grows.
constexpr int64_t kVectorsPerThread = 4;
/// Rows of this many elements or more index their columns with 64 bits.
constexpr int64_t kWideRowElems = int64_t{1} << 30;
/// The register-resident form's budget: bytes of cached input vectors per
/// thread (kPer * kVec * the sum of the cached inputs' element sizes): 48
/// 32-bit registers, which leaves room for the pass's math under the 255
/// registers a thread may have and keeps 2+ blocks of 256 threads per SM.
constexpr int kMaxResidentBytes = 192;
/// Column accumulators a thread may keep (fp32 registers per column sum).
constexpr int64_t kMaxColumnAccumulators = 48;

enum class RefKind { kNode, kInput, kReduction, kBad };

const char *LayoutName(RowInputLayout l) {
  switch (l) {
  case RowInputLayout::kDense: return "dense [rows, n]";
  case RowInputLayout::kColumn: return "column [n]";
  case RowInputLayout::kRow: return "per row [rows]";
  case RowInputLayout::kScalar: return "scalar";
  }
  return "?";
}

class RowFusedEmitter {
public:
  explicit RowFusedEmitter(const RowFusedProgram &p)
      : p_(p), nin_(static_cast<int>(p.inputs.size())), nred_(static_cast<int>(p.reductions.size())),
        nnode_(static_cast<int>(p.nodes.size())) {
    for (const RowInput &in : p.inputs) value_types_.push_back(in.type);
    for (const RowReduction &r : p.reductions) value_types_.push_back(r.type);
  }

  /// Validates the program and computes the reductions' passes.
  absl::Status Analyze() {
    if (p_.n < 1) return Invalid("row fused: n must be >= 1, found " + std::to_string(p_.n));
    if (p_.outputs.empty() && p_.column_sums.empty()) return Invalid("row fused: no outputs");
    const int ncol = static_cast<int>(p_.column_sums.size());
    if (ncol > kRowFusedMaxColumnSums)
      return Invalid("row fused: " + std::to_string(ncol) + " column sums; at most " +
                     std::to_string(kRowFusedMaxColumnSums) + " are supported");
    if (ncol > 0 && p_.n > kRowFusedMaxColumnRow)
      return Invalid("row fused: column sums need rows of at most " + std::to_string(kRowFusedMaxColumnRow) +
                     " elements, found " + std::to_string(p_.n));
    if (nred_ > kRowFusedMaxReductions)
      return Invalid("row fused: " + std::to_string(nred_) + " reductions; at most " +
                     std::to_string(kRowFusedMaxReductions) + " are supported");
    node_per_row_.assign(nnode_, 0);
    node_reds_.assign(nnode_, 0);
    for (int k = 0; k < nnode_; ++k) {
      const EwNode &n = p_.nodes[k];
      if (static_cast<int>(n.operands.size()) != EwArity(n.op))
        return Invalid("row fused: node " + std::to_string(k) + " (" + EwOpName(n.op) + ") has " +
                       std::to_string(n.operands.size()) + " operands, expected " +
                       std::to_string(EwArity(n.op)));
      bool per_row = true;
      for (int o : n.operands) {
        if (Kind(o) == RefKind::kBad)
          return Invalid("row fused: node " + std::to_string(k) + " operand " + BadRef(o));
        if (Kind(o) == RefKind::kNode && o >= k)
          return Invalid("row fused: node " + std::to_string(k) + " operand " + std::to_string(o) +
                         " must reference an earlier node");
        per_row = per_row && PerRow(o);
        node_reds_[k] |= RedMask(o);
      }
      node_per_row_[k] = per_row;
    }
    // The reductions each reduction reads, directly and transitively.
    std::vector<uint32_t> deps(nred_), reach(nred_);
    for (int q = 0; q < nred_; ++q) {
      const int o = p_.reductions[q].operand;
      if (Kind(o) == RefKind::kBad)
        return Invalid("row fused: reduction " + std::to_string(q) + " operand " + BadRef(o));
      deps[q] = reach[q] = RedMask(o);
    }
    for (int round = 0; round < nred_; ++round)
      for (int q = 0; q < nred_; ++q)
        for (int r = 0; r < nred_; ++r)
          if (reach[q] >> r & 1u) reach[q] |= deps[r];
    for (int q = 0; q < nred_; ++q)
      if (reach[q] >> q & 1u)
        return Invalid("row fused: reduction " + std::to_string(q) + " depends on its own result");
    // level(q) = 1 + the largest level of the reductions its operand reads.
    level_.assign(nred_, 1);
    for (int round = 0; round < nred_; ++round)
      for (int q = 0; q < nred_; ++q)
        for (int r = 0; r < nred_; ++r)
          if (deps[q] >> r & 1u) level_[q] = std::max(level_[q], level_[r] + 1);
    max_level_ = 0;
    for (int l : level_) max_level_ = std::max(max_level_, l);
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const RowFusedOutput &o = p_.outputs[i];
      if (Kind(o.value) == RefKind::kBad)
        return Invalid("row fused: output " + std::to_string(i) + " value " + BadRef(o.value));
      if (o.per_row && !PerRow(o.value))
        return Invalid("row fused: output " + std::to_string(i) + " is per row but its value " +
                       Name(o.value) + " is per element");
    }
    for (size_t c = 0; c < p_.column_sums.size(); ++c)
      if (Kind(p_.column_sums[c].value) == RefKind::kBad)
        return Invalid("row fused: column sum " + std::to_string(c) + " value " + BadRef(p_.column_sums[c].value));
    // The pass after which each per-row node can be computed (0: before the
    // first).
    node_stage_.assign(nnode_, 0);
    for (int k = 0; k < nnode_; ++k)
      for (int o : p_.nodes[k].operands) {
        if (Kind(o) == RefKind::kNode) node_stage_[k] = std::max(node_stage_[k], node_stage_[o]);
        if (Kind(o) == RefKind::kReduction) node_stage_[k] = std::max(node_stage_[k], level_[Red(o)]);
      }
    // The per-row nodes and inputs anything reads.
    std::vector<int> roots;
    for (const RowReduction &r : p_.reductions) roots.push_back(r.operand);
    for (const RowFusedOutput &o : p_.outputs) roots.push_back(o.value);
    for (const RowColumnSum &c : p_.column_sums) roots.push_back(c.value);
    Closure(roots, /*through_per_row=*/true, &node_used_, &input_used_);
    ChooseResident();
    return absl::OkStatus();
  }

  /// Elements per vector access: 16 bytes of the widest dense/column input
  /// or dense output; 1 when n is not a multiple of it.
  int VecElems() const {
    int maxsz = 1;
    for (const RowInput &in : p_.inputs)
      if (InLoop(in.layout)) maxsz = std::max(maxsz, ScalarSize(in.type));
    for (const RowFusedOutput &o : p_.outputs)
      if (!o.per_row) maxsz = std::max(maxsz, ScalarSize(o.type));
    const int vec = 16 / maxsz;
    return p_.n % vec == 0 ? vec : 1;
  }

  /// Register-resident form: kThreads (0: the streaming form is used).
  int ResidentThreads() const { return res_threads_; }

  /// The register-resident form's kThreads (the largest power of two from
  /// 32 to 256 that divides n / kVec); else the smallest power of two from
  /// 32 to 256 threads that gives each at most kVectorsPerThread vectors of
  /// the row.
  int Threads() const {
    if (res_threads_ > 0) return res_threads_;
    const int64_t nvec = p_.n / VecElems();
    int threads = kMinThreads;
    while (threads < kMaxThreads && threads * kVectorsPerThread < nvec) threads *= 2;
    // Column sums: at most 32 columns a thread on the scalar path
    // (and 32 + kVec on the vector path).
    if (!p_.column_sums.empty())
      while (threads < kMaxThreads && threads * int64_t{32} < p_.n) threads *= 2;
    return threads;
  }

  /// Column sums: the vectors (vector path) and the elements (scalar
  /// path) of the row a thread takes, and the accumulators it keeps.
  int64_t ColumnVectors() const {
    const int64_t nvec = p_.n / VecElems();
    return (nvec + Threads() - 1) / Threads();
  }
  int64_t ColumnScalars() const { return (p_.n + Threads() - 1) / Threads(); }
  int64_t ColumnAccumulators() const {
    return std::max(VecElems() > 1 ? ColumnVectors() * VecElems() : 0, ColumnScalars());
  }
  int NumColumnSums() const { return static_cast<int>(p_.column_sums.size()); }

  std::string Config() const {
    std::ostringstream s;
    s << "// Program (" << nin_ << " inputs, " << nred_ << " reductions, " << nnode_ << " nodes, "
      << p_.outputs.size() << " outputs):\n";
    for (int i = 0; i < nin_; ++i)
      s << "//   in" << i << " (x" << i << "): " << ScalarTypeTag(p_.inputs[i].type) << ", "
        << LayoutName(p_.inputs[i].layout) << "\n";
    for (int q = 0; q < nred_; ++q) {
      const RowReduction &r = p_.reductions[q];
      s << "//   x" << nin_ + q << ": " << KindName(r.kind) << " of " << Name(r.operand) << " over the row -> "
        << ScalarTypeTag(r.type) << ", pass " << level_[q] << "\n";
    }
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const RowFusedOutput &o = p_.outputs[i];
      s << "//   out" << i << ": " << ScalarTypeTag(o.type) << " = " << Name(o.value)
        << (o.per_row ? ", per row [rows]" : ", [rows, n]") << "\n";
    }
    for (int c = 0; c < NumColumnSums(); ++c)
      s << "//   partials" << c << ": f32 [grid, n] = sum of " << Name(p_.column_sums[c].value)
        << " over this block's rows\n";
    const bool wide = p_.n >= kWideRowElems;
    s << (wide ? "static constexpr long long kN = " : "static constexpr int kN = ") << p_.n
      << (wide ? "LL;\n" : ";\n")
      << "typedef " << (wide ? "long long" : "int") << " ColT;  // a column index\n"
      << "static constexpr int kVec = " << VecElems()
      << ";  // elements per 16-byte access of the widest dense/column type\n"
      << "static constexpr int kThreads = " << Threads() << ";\n";
    if (res_threads_ > 0)
      s << "static constexpr int kPer = " << res_per_
        << ";  // register-resident row: vectors per thread of each cached input (" << res_bytes_
        << " bytes per thread)\n";
    if (NumColumnSums() > 0)
      s << "static constexpr int kColVecs = " << (VecElems() > 1 ? ColumnVectors() : 0)
        << ";  // column sums: vectors of the row a thread takes (vector path)\n"
        << "static constexpr int kColScalars = " << ColumnScalars()
        << ";  // elements of the row a thread takes (scalar path)\n"
        << "static constexpr int kColAcc = " << ColumnAccumulators()
        << ";  // fp32 column accumulators per thread and column reduction\n";
    s
      << "static constexpr int kNumReductions = " << nred_ << ";\n\n"
      << kEwDeviceHelpers << "\n";
    return s.str();
  }

  std::string Kernel(const std::string &name) const {
    std::ostringstream s;
    const int nout = static_cast<int>(p_.outputs.size());
    const bool vec = VecElems() > 1;
    const bool block = Threads() > 32;
    s << "extern \"C\" __global__ void __launch_bounds__(kThreads) " << name << "(\n";
    const int ncol = NumColumnSums();
    for (int i = 0; i < nout; ++i)
      s << "    " << CTypeName(p_.outputs[i].type) << "* __restrict__ out" << i << ",\n";
    for (int c = 0; c < ncol; ++c) s << "    float* __restrict__ partials" << c << ",\n";
    for (int i = 0; i < nin_; ++i)
      s << "    const " << CTypeName(p_.inputs[i].type) << "* __restrict__ in" << i << ",\n";
    s << "    long long rows) {\n";
    if (nred_ > 0 && block) s << "  __shared__ float scratch[kNumReductions][32];  // per warp, per reduction\n";
    s << "  const int t = threadIdx.x;\n";
    if (nred_ > 0 && block) s << "  const int lane = t & 31, warp = t >> 5;\n";
    if (vec) {
      s << "  // 16-byte vectors when every dense / column pointer is 16-byte aligned.\n"
           "  const bool vec = ((0";
      for (int i = 0; i < nout; ++i)
        if (!p_.outputs[i].per_row) s << " | (uint64_t)out" << i;
      for (int i = 0; i < nin_; ++i)
        if (InLoop(p_.inputs[i].layout)) s << " | (uint64_t)in" << i;
      s << ") & 15) == 0;\n";
    }
    if (ncol > 0) {
      s << "  // column sums: this thread's sums of its columns over the block's rows\n";
      for (int c = 0; c < ncol; ++c) s << "  float cs" << c << "[kColAcc];\n";
      s << "#pragma unroll\n"
           "  for (int m = 0; m < kColAcc; ++m) {\n";
      for (int c = 0; c < ncol; ++c) s << "    cs" << c << "[m] = 0.0f;\n";
      s << "  }\n";
    }
    s << "  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {\n"
         "    const int64_t base = row * (int64_t)kN;  // the row's first element\n";
    if (res_threads_ > 0) {
      s << "    // register-resident row: this thread's vectors t + k * kThreads (k < kPer) of every\n"
           "    // dense / column input a pass reads, all loaded up front; the passes read only these.\n";
      for (int i = 0; i < nin_; ++i)
        if (cached_[i]) s << "    " << VecType(i) << " c" << i << "[kPer];\n";
      s << "    if (vec) {\n"
           "#pragma unroll\n"
           "      for (int k = 0; k < kPer; ++k) {\n"
           "        const ColT v = t + k * kThreads;\n";
      for (int i = 0; i < nin_; ++i)
        if (cached_[i])
          s << "        c" << i << "[k] = reinterpret_cast<const " << VecType(i) << "*>(in" << i
            << (p_.inputs[i].layout == RowInputLayout::kDense ? " + base" : "") << ")[v];\n";
      s << "      }\n"
           "    }\n";
    }
    for (int i = 0; i < nin_; ++i)
      if (input_used_[i] && !InLoop(p_.inputs[i].layout))
        s << "    " << Load(i, p_.inputs[i].layout == RowInputLayout::kRow ? "in" + std::to_string(i) + "[row]"
                                                                          : "in" + std::to_string(i) + "[0]")
          << "\n";
    PerRowNodes(s, 0);
    // The per-element outputs and column sums: stored by the last pass over
    // the row; by the last reduction pass when none of them reads a
    // reduction (a value stored together with its amax: one read fewer).
    std::vector<int> dense_outs, out_roots;
    for (int i = 0; i < nout; ++i)
      if (!p_.outputs[i].per_row) {
        dense_outs.push_back(i);
        out_roots.push_back(p_.outputs[i].value);
      }
    for (const RowColumnSum &c : p_.column_sums) out_roots.push_back(c.value);
    const bool outputs_in_pass = OutputsInReductionPass();
    // Stores of the dense outputs and column sums inside a pass's loops.
    auto store_outputs = [&](std::ostringstream &b, const std::string &ind, bool vector, const std::string &slot) {
      for (int i : dense_outs) {
        const std::string v = Store(p_.outputs[i]);
        if (vector) b << ind << "o" << i << ".v[e] = " << v << ";\n";
        else b << ind << "out" << i << "[base + j] = " << v << ";\n";
      }
      for (int c = 0; c < ncol; ++c)
        b << ind << "cs" << c << "[" << slot << "] += " << F(p_.column_sums[c].value) << ";\n";
    };
    for (int level = 1; level <= max_level_; ++level) {
      std::vector<int> qs, roots;
      for (int q = 0; q < nred_; ++q)
        if (level_[q] == level) {
          qs.push_back(q);
          roots.push_back(p_.reductions[q].operand);
        }
      const bool with_outputs = outputs_in_pass && !out_roots.empty() && level == max_level_;
      if (with_outputs) roots.insert(roots.end(), out_roots.begin(), out_roots.end());
      s << "    // ---- pass " << level << ":";
      for (int q : qs) s << " x" << nin_ + q;
      if (with_outputs) s << ", and the per-element outputs" << (ncol > 0 ? " and column sums" : "")
                          << " (they read no reduction)";
      s << " ----\n";
      for (int q : qs) s << "    float acc" << q << " = " << Identity(p_.reductions[q].kind) << ";\n";
      Loops(s, roots, [&](std::ostringstream &b, const std::string &ind, bool vector, const std::string &slot) {
        for (int q : qs) {
          const std::string v = F(p_.reductions[q].operand);
          const std::string acc = "acc" + std::to_string(q);
          switch (p_.reductions[q].kind) {
          case ReduceKind::sum: case ReduceKind::mean: b << ind << acc << " = " << acc << " + " << v << ";\n"; break;
          case ReduceKind::max: b << ind << acc << " = llmc_maxf(" << acc << ", " << v << ");\n"; break;
          case ReduceKind::min: b << ind << acc << " = llmc_minf(" << acc << ", " << v << ");\n"; break;
          }
        }
        if (with_outputs) store_outputs(b, ind, vector, slot);
      }, with_outputs ? dense_outs : std::vector<int>{}, /*column_slots=*/with_outputs && ncol > 0);
      s << "    // block all-reduce: butterfly within each warp";
      if (block) s << ", then across the warps";
      s << "\n";
      for (int q : qs) s << "    acc" << q << " = " << WarpReduce(p_.reductions[q].kind) << "(acc" << q << ");\n";
      if (block) {
        s << "    if (lane == 0) {\n";
        for (int q : qs) s << "      scratch[" << q << "][warp] = acc" << q << ";\n";
        s << "    }\n    __syncthreads();\n";
        for (int q : qs)
          s << "    acc" << q << " = " << WarpReduce(p_.reductions[q].kind) << "(lane < kThreads / 32 ? scratch[" << q
            << "][lane] : " << Identity(p_.reductions[q].kind) << ");\n";
        s << "    __syncthreads();  // scratch is written again by the next pass or row\n";
      }
      for (int q : qs) {
        const RowReduction &r = p_.reductions[q];
        std::string v = "acc" + std::to_string(q);
        if (r.kind == ReduceKind::mean) v += " / (float)kN";
        if (IsIntType(r.type))
          s << "    const int64_t x" << nin_ + q << " = toI(fromF<" << CTypeName(r.type) << ">(" << v << "));";
        else if (r.type != ScalarType::f32)
          s << "    const float x" << nin_ + q << " = toF(fromF<" << CTypeName(r.type) << ">(" << v << "));";
        else
          s << "    const float x" << nin_ + q << " = " << v << ";";
        s << "  // " << KindName(r.kind) << " -> " << ScalarTypeTag(r.type) << "\n";
      }
      PerRowNodes(s, level);
    }
    if (!out_roots.empty() && !outputs_in_pass) {
      s << "    // ---- last pass: the per-element outputs" << (ncol > 0 ? " and column sums" : "") << " ----\n";
      Loops(s, out_roots, store_outputs, dense_outs, /*column_slots=*/ncol > 0);
    }
    bool any_per_row = false;
    for (int i = 0; i < nout; ++i) any_per_row = any_per_row || p_.outputs[i].per_row;
    if (any_per_row) {
      s << "    if (t == 0) {\n";
      for (int i = 0; i < nout; ++i)
        if (p_.outputs[i].per_row) s << "      out" << i << "[row] = " << Store(p_.outputs[i]) << ";\n";
      s << "    }\n";
    }
    s << "  }\n";
    if (ncol > 0) {
      s << "  // ---- this block's partial column sums: partials<c>[blockIdx.x, column] ----\n";
      auto store = [&](const std::string &ind, const std::string &col, const std::string &acc) {
        for (int c = 0; c < ncol; ++c)
          s << ind << "partials" << c << "[(int64_t)blockIdx.x * kN + " << col << "] = cs" << c << "[" << acc
            << "];\n";
      };
      std::string ind = "  ";
      if (VecElems() > 1) {
        s << "  if (vec) {\n"
             "#pragma unroll\n"
             "    for (int k = 0; k < kColVecs; ++k) {\n"
             "      const ColT v = t + k * kThreads;\n"
             "      if (v < kN / kVec) {\n"
             "#pragma unroll\n"
             "        for (int e = 0; e < kVec; ++e) {\n";
        store("          ", "v * kVec + e", "k * kVec + e");
        s << "        }\n"
             "      }\n"
             "    }\n"
             "  } else {\n";
        ind = "    ";
      }
      s << "#pragma unroll\n"
        << ind << "for (int m = 0; m < kColScalars; ++m) {\n"
        << ind << "  const ColT j = t + m * kThreads;\n"
        << ind << "  if (j < kN) {\n";
      store(ind + "    ", "j", "m");
      s << ind << "  }\n" << ind << "}\n";
      if (VecElems() > 1) s << "  }\n";
    }
    s << "}\n";
    return s.str();
  }

  /// Whether the per-element outputs and column sums are computed in the
  /// last reduction pass instead of a pass of their own: there is a
  /// reduction, and none of them reads one (directly or through nodes).
  bool OutputsInReductionPass() const {
    if (max_level_ == 0) return false;
    for (const RowFusedOutput &o : p_.outputs)
      if (!o.per_row && RedMask(o.value) != 0) return false;
    for (const RowColumnSum &c : p_.column_sums)
      if (RedMask(c.value) != 0) return false;
    return true;
  }

private:
  static bool InLoop(RowInputLayout l) { return l == RowInputLayout::kDense || l == RowInputLayout::kColumn; }

  std::string VecType(int i) const {
    return std::string("LlmcVec<") + CTypeName(p_.inputs[i].type) + ", kVec>";
  }

  /// Picks the register-resident form when the vector path exists, n / kVec
  /// is a multiple of a power of two from 32 to 256 threads (the largest),
  /// and the dense / column inputs any pass reads fit kMaxResidentBytes.
  void ChooseResident() {
    res_threads_ = res_per_ = res_bytes_ = 0;
    cached_.assign(nin_, 0);
    const int vec = VecElems();
    if (vec == 1) return;
    const int64_t nvec = p_.n / vec;
    int threads = kMaxThreads;
    while (threads >= kMinThreads && nvec % threads != 0) threads /= 2;
    if (threads < kMinThreads) return;
    // Every pass's roots: the reductions' operands and the dense outputs.
    std::vector<int> roots;
    for (const RowReduction &r : p_.reductions) roots.push_back(r.operand);
    for (const RowFusedOutput &o : p_.outputs)
      if (!o.per_row) roots.push_back(o.value);
    for (const RowColumnSum &c : p_.column_sums) roots.push_back(c.value);
    std::vector<char> nodes, inputs;
    Closure(roots, /*through_per_row=*/false, &nodes, &inputs);
    int64_t bytes_per_vec = 0;
    for (int i = 0; i < nin_; ++i)
      if (inputs[i]) bytes_per_vec += int64_t{vec} * ScalarSize(p_.inputs[i].type);
    const int64_t per = nvec / threads;
    if (per * bytes_per_vec > kMaxResidentBytes) return;
    if (!p_.column_sums.empty() && per * vec > kMaxColumnAccumulators) return;
    res_threads_ = threads;
    res_per_ = static_cast<int>(per);
    res_bytes_ = static_cast<int>(per * bytes_per_vec);
    cached_ = inputs;
  }

  RefKind Kind(int ref) const {
    if (ref >= 0) return ref < nnode_ ? RefKind::kNode : RefKind::kBad;
    const int64_t i = -static_cast<int64_t>(ref) - 1;
    if (i < nin_) return RefKind::kInput;
    if (i < nin_ + nred_) return RefKind::kReduction;
    return RefKind::kBad;
  }
  static int Input(int ref) { return -ref - 1; }
  int Red(int ref) const { return -ref - 1 - nin_; }
  /// "n<k>" or "x<i>" (an input or a reduction).
  static std::string Name(int ref) {
    return ref >= 0 ? "n" + std::to_string(ref) : "x" + std::to_string(-static_cast<int64_t>(ref) - 1);
  }
  std::string BadRef(int ref) const {
    return std::to_string(ref) + " references nothing (" + std::to_string(nnode_) + " nodes, " +
           std::to_string(nin_) + " inputs, " + std::to_string(nred_) + " reductions)";
  }
  bool PerRow(int ref) const {
    switch (Kind(ref)) {
    case RefKind::kNode: return node_per_row_[ref];
    case RefKind::kInput: return !InLoop(p_.inputs[Input(ref)].layout);
    case RefKind::kReduction: return true;
    case RefKind::kBad: break;
    }
    return false;
  }
  uint32_t RedMask(int ref) const {
    if (Kind(ref) == RefKind::kNode) return node_reds_[ref];
    if (Kind(ref) == RefKind::kReduction) return 1u << Red(ref);
    return 0;
  }
  bool IsIntValue(int ref) const {
    return ref >= 0 ? IsIntType(p_.nodes[ref].type) : IsIntType(value_types_[-ref - 1]);
  }
  std::string F(int ref) const { return IsIntValue(ref) ? "(float)" + Name(ref) : Name(ref); }
  std::string Store(const RowFusedOutput &o) const {
    return std::string(IsIntValue(o.value) ? "fromI<" : "fromF<") + CTypeName(o.type) + ">(" + Name(o.value) + ")";
  }
  static const char *Identity(ReduceKind k) {
    return k == ReduceKind::max ? "-LLMC_INF" : k == ReduceKind::min ? "LLMC_INF" : "0.0f";
  }
  static const char *WarpReduce(ReduceKind k) {
    return k == ReduceKind::max ? "warpMaxNan" : k == ReduceKind::min ? "warpMinNan" : "warpSum";
  }
  /// "const float x<i> = toF(<from>);" (toI and int64_t for integer types).
  std::string Load(int i, const std::string &from) const {
    return IsIntType(p_.inputs[i].type) ? "const int64_t x" + std::to_string(i) + " = toI(" + from + ");"
                                        : "const float x" + std::to_string(i) + " = toF(" + from + ");";
  }

  /// Marks the nodes and inputs the values `roots` read: all of them when
  /// `through_per_row`, else the per-element ones a pass over the row
  /// computes (per-row values are variables by then).
  void Closure(const std::vector<int> &roots, bool through_per_row, std::vector<char> *nodes,
               std::vector<char> *inputs) const {
    nodes->assign(nnode_, 0);
    inputs->assign(nin_, 0);
    auto mark = [&](int ref) {
      if (Kind(ref) == RefKind::kInput) (*inputs)[Input(ref)] = 1;
      if (Kind(ref) == RefKind::kNode && (through_per_row || !node_per_row_[ref])) (*nodes)[ref] = 1;
    };
    for (int r : roots) mark(r);
    for (int k = nnode_ - 1; k >= 0; --k)
      if ((*nodes)[k])
        for (int o : p_.nodes[k].operands) mark(o);
    if (!through_per_row)
      for (int i = 0; i < nin_; ++i)
        if (!InLoop(p_.inputs[i].layout)) (*inputs)[i] = 0;
  }

  /// The used per-row nodes computable after pass `stage` (0: before any).
  void PerRowNodes(std::ostringstream &s, int stage) const {
    for (int k = 0; k < nnode_; ++k)
      if (node_used_[k] && node_per_row_[k] && node_stage_[k] == stage)
        s << "    " << EwNodeStatement(value_types_, p_.nodes, k, p_.round_every_node) << "\n";
  }

  /// A pass over the row computing the per-element values `roots` read: the
  /// vector loop (when kVec > 1) and the scalar one, each with `use` (given
  /// the indentation and whether it is the vector loop) after the nodes;
  /// `stores` are the dense outputs the vector loop gathers in o<i>. With
  /// `column_slots`, the streaming loops run a fixed, unrolled trip count
  /// (kColVecs / kColScalars, bounds-checked) so that the column
  /// accumulators cs<c>[slot] are indexed by constants and stay in registers;
  /// a slot computed from the loop variable would put them in local memory.
  template <typename UseFn>
  void Loops(std::ostringstream &s, const std::vector<int> &roots, UseFn use,
             const std::vector<int> &stores = {}, bool column_slots = false) const {
    std::vector<char> nodes, inputs;
    Closure(roots, /*through_per_row=*/false, &nodes, &inputs);
    auto body = [&](const std::string &ind, bool vector, const std::string &slot) {
      for (int i = 0; i < nin_; ++i) {
        if (!inputs[i]) continue;
        const bool dense = p_.inputs[i].layout == RowInputLayout::kDense;
        const std::string in = "in" + std::to_string(i);
        s << ind << Load(i, vector ? "l" + std::to_string(i) + ".v[e]" : dense ? in + "[base + j]" : in + "[j]")
          << "\n";
      }
      for (int k = 0; k < nnode_; ++k)
        if (nodes[k]) s << ind << EwNodeStatement(value_types_, p_.nodes, k, p_.round_every_node) << "\n";
      use(s, ind, vector, slot);
    };
    std::string ind = "    ";
    if (VecElems() > 1) {
      if (res_threads_ > 0) {
        s << "    if (vec) {  // the register copies\n"
             "#pragma unroll\n"
             "      for (int k = 0; k < kPer; ++k) {\n";
        if (!stores.empty()) s << "        const ColT v = t + k * kThreads;\n";
        for (int i = 0; i < nin_; ++i)
          if (inputs[i]) s << "        const " << VecType(i) << " &l" << i << " = c" << i << "[k];\n";
      } else {
        if (column_slots)
          s << "    if (vec) {\n"
               "#pragma unroll\n"
               "      for (int k = 0; k < kColVecs; ++k) {\n"
               "        const ColT v = t + k * kThreads;\n"
               "        if (v >= kN / kVec) break;\n";
        else
          s << "    if (vec) {\n"
               "      for (ColT v = t; v < kN / kVec; v += kThreads) {\n";
        for (int i = 0; i < nin_; ++i) {
          if (!inputs[i]) continue;
          const bool dense = p_.inputs[i].layout == RowInputLayout::kDense;
          s << "        const " << VecType(i) << " l" << i << " = reinterpret_cast<const " << VecType(i) << "*>(in"
            << i << (dense ? " + base" : "") << ")[v];\n";
        }
      }
      for (int i : stores) s << "        LlmcVec<" << CTypeName(p_.outputs[i].type) << ", kVec> o" << i << ";\n";
      s << "#pragma unroll\n"
           "        for (int e = 0; e < kVec; ++e) {\n";
      body("          ", true,
           res_threads_ > 0 || column_slots ? "k * kVec + e" : "(int)((v - t) / kThreads) * kVec + e");
      s << "        }\n";
      for (int i : stores)
        s << "        reinterpret_cast<LlmcVec<" << CTypeName(p_.outputs[i].type) << ", kVec>*>(out" << i
          << " + base)[v] = o" << i << ";\n";
      s << "      }\n"
           "    } else {\n";
      ind = "      ";
    }
    if (column_slots) {
      s << "#pragma unroll\n"
        << ind << "for (int m = 0; m < kColScalars; ++m) {\n"
        << ind << "  const ColT j = t + m * kThreads;\n"
        << ind << "  if (j >= kN) break;\n";
      body(ind + "  ", false, "m");
    } else {
      s << ind << "for (ColT j = t; j < kN; j += kThreads) {\n";
      body(ind + "  ", false, "(int)((j - t) / kThreads)");
    }
    s << ind << "}\n";
    if (VecElems() > 1) s << "    }\n";
  }

  const RowFusedProgram &p_;
  const int nin_, nred_, nnode_;
  /// The types of the variables x<i>: the inputs', then the reductions'.
  std::vector<ScalarType> value_types_;
  std::vector<char> node_per_row_;
  std::vector<uint32_t> node_reds_; // reductions a node reads (bit q), through nodes
  std::vector<int> level_;          // per reduction: its pass, 1-based
  int max_level_ = 0;
  std::vector<int> node_stage_;     // per-row nodes: the pass after which they are computed
  std::vector<char> node_used_, input_used_;
  /// The register-resident form: kThreads, kPer, cached bytes per thread
  /// (all 0 for the streaming form), and the inputs cached.
  int res_threads_ = 0, res_per_ = 0, res_bytes_ = 0;
  std::vector<char> cached_;
};

} // namespace

absl::StatusOr<KernelCode> EmitRowFused(const RowFusedProgram &prog) {
  RowFusedEmitter em(prog);
  if (absl::Status st = em.Analyze(); !st.ok()) return st;
  const std::string cfg = em.Config();
  KernelCode kc;
  kc.name = "llmc_rowfused_" + HashHex(cfg + em.Kernel(""));
  LLMC_ASSIGN_OR_RETURN(
      kc.source,
      Assemble("// llmc fused row kernel " + kc.name +
                   "\n// One block per row (grid-stride): a pass over the row per reduction level (fp32\n"
                   "// accumulation, block all-reduce), per-row values once per row, a last pass for the\n"
                   "// per-element outputs (the last reduction pass stores them when they read no\n"
                   "// reduction); 16-byte vectors when aligned.\n",
               cfg, "\n" + em.Kernel(kc.name)));
  return kc;
}

absl::StatusOr<LaunchDims> RowFusedLaunch(const RowFusedProgram &prog, int64_t rows) {
  RowFusedEmitter em(prog);
  if (absl::Status st = em.Analyze(); !st.ok()) return st;
  const int threads = em.Threads();
  // Grid-stride: at most the blocks an SM holds at once (2048 threads, 32
  // blocks) on every SM.
  const int64_t per_sm = std::min(32, 2048 / threads);
  return Dims(std::min<int64_t>(std::max<int64_t>(rows, 1), int64_t{kAssumedNumSMs} * per_sm), 1, 1, threads);
}

absl::StatusOr<int64_t> RowFusedColumnPartialBytes(const RowFusedProgram &prog, int64_t rows) {
  LLMC_ASSIGN_OR_RETURN(LaunchDims d, RowFusedLaunch(prog, rows));
  return int64_t{d.grid[0]} * prog.n * 4;
}

} // namespace llmc::cuda
