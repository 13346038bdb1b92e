//===- RaiseAttentionLayoutTest.cpp - key/value transposes folded ---------===//
//
// llmc-raise (through llmc::PrepareForLowering, as every CUDA lowering runs
// it) folds `llm.transpose [0, 2, 1, 3]` of key and value into attention's
// kv_hnd, the form the torch.compile plugin imports for SDPA over a
// [B, H, S, D] KV cache (gpt-fast). A layout change only: the reference
// executor must give bit-identical results as written and raised, on fresh
// random inputs, with a bf16 position mask over the cache, GQA and a causal
// multi-token query; and a projection's NHD key (transpose of transpose)
// keeps the NHD form.
//
//===----------------------------------------------------------------------===//

#include "ReferenceTestUtils.h"

#include "LLM/IR/LLMOps.h"
#include "llmc/Compiler/LowerToExecutable.h"

#include <limits>
#include <sstream>

using namespace mlir;
using namespace llmc::reference;
using namespace llmc::reference::testing;

namespace {

std::string ty(std::initializer_list<int64_t> d, const std::string &elt) {
  std::string s = "tensor<";
  for (int64_t v : d)
    s += std::to_string(v) + "x";
  return s + elt + ">";
}

/// attention(q, transpose(kc), transpose(vc)) on caches [B, Hkv, S, D], with
/// a [1, 1, Sq, S] mask when `masked`, as the plugin imports SDPA.
std::string cacheAttention(int64_t b, int64_t sq, int64_t hq, int64_t hkv, int64_t s,
                           int64_t d, bool masked, bool causal, const std::string &elt) {
  std::string q = ty({b, sq, hq, d}, elt), c = ty({b, hkv, s, d}, elt),
              t = ty({b, s, hkv, d}, elt), m = ty({1, 1, sq, s}, elt);
  std::ostringstream os;
  os << "func.func @f(%q: " << q << ", %kc: " << c << ", %vc: " << c
     << (masked ? ", %m: " + m : "") << ") -> " << q << " {\n"
     << "  %k = llm.transpose %kc [0, 2, 1, 3] : " << c << "\n"
     << "  %v = llm.transpose %vc [0, 2, 1, 3] : " << c << "\n"
     << "  %o = llm.attention %q, %k, %v"
     << (masked ? " mask(%m : " + m + ")" : "") << (causal ? " {causal}" : "")
     << " : " << q << ", " << t << ", " << t << "\n"
     << "  return %o : " << q << "\n}\n";
  return os.str();
}

class RaiseAttentionLayoutTest : public ReferenceTest {
protected:
  void check(int64_t b, int64_t sq, int64_t hq, int64_t hkv, int64_t s, int64_t d,
             bool masked, bool causal, const std::string &elt) {
    std::string src = cacheAttention(b, sq, hq, hkv, s, d, masked, causal, elt);
    SCOPED_TRACE(src);
    Prepared p;
    ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
    int hnd = countOps(p.fnAfter, [](Operation *op) {
      auto a = dyn_cast<llmc::llm::AttentionOp>(op);
      return a && a.getKvHnd();
    });
    int transposes = countOps(p.fnAfter, [](Operation *op) {
      return isa<llmc::llm::TransposeOp>(op);
    });
    ASSERT_EQ(hnd, 1) << print(*p.after);
    ASSERT_EQ(transposes, 0) << print(*p.after);
    Type et = elt == "bf16" ? bf16() : f32();
    for (int draw = 0; draw < 2; ++draw) {
      std::vector<HostTensor> in = {rand(et, {b, sq, hq, d}), rand(et, {b, hkv, s, d}),
                                    rand(et, {b, hkv, s, d})};
      if (masked) {
        // A decode position: keys after it are -inf, earlier ones random.
        HostTensor m = rand(et, {1, 1, sq, s});
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t j = s / 3 + i; j < s; ++j)
            m.data[i * s + j] = -std::numeric_limits<double>::infinity();
        in.push_back(m);
      }
      auto asWritten = Evaluate(p.fnBefore, in);
      auto raised = Evaluate(p.fnAfter, in);
      ASSERT_TRUE(asWritten.ok()) << asWritten.status();
      ASSERT_TRUE(raised.ok()) << raised.status();
      const HostTensor &a = (*asWritten)[0], &r = (*raised)[0];
      ASSERT_TRUE(allFinite(a) && allFinite(r));
      EXPECT_EQ(a.data, r.data) << "draw " << draw; // same math, another layout
      EXPECT_GT(RelativeError(a, in[0]), 0.0);      // not vacuous: not q itself
    }
  }
};

TEST_F(RaiseAttentionLayoutTest, CacheInHndLayout) {
  check(2, 1, 8, 2, 40, 64, /*masked=*/true, /*causal=*/false, "bf16"); // decode, GQA 4
  check(1, 5, 4, 4, 33, 32, /*masked=*/true, /*causal=*/false, "f32");  // prefill chunk
  check(2, 6, 6, 3, 6, 16, /*masked=*/false, /*causal=*/true, "f32");   // causal, Sq == S
}

/// A projection's key [B, S, H, D] that the plugin transposes twice (torch's
/// .transpose(1, 2), then the importer's) stays NHD: the transposes cancel.
TEST_F(RaiseAttentionLayoutTest, ProjectionKeepsNhd) {
  std::string q = ty({1, 4, 2, 16}, "f32"), h = ty({1, 2, 4, 16}, "f32");
  std::string src = "func.func @f(%q: " + q + ", %k: " + q + ", %v: " + q + ") -> " + q +
                    " {\n"
                    "  %kh = llm.transpose %k [0, 2, 1, 3] : " + q + "\n"
                    "  %vh = llm.transpose %v [0, 2, 1, 3] : " + q + "\n"
                    "  %kt = llm.transpose %kh [0, 2, 1, 3] : " + h + "\n"
                    "  %vt = llm.transpose %vh [0, 2, 1, 3] : " + h + "\n"
                    "  %o = llm.attention %q, %kt, %vt {causal} : " + q + ", " + q + ", " + q +
                    "\n  return %o : " + q + "\n}\n";
  Prepared p;
  ASSERT_NO_FATAL_FAILURE(parseAndPrepare(src, p));
  int hnd = countOps(p.fnAfter, [](Operation *op) {
    auto a = dyn_cast<llmc::llm::AttentionOp>(op);
    return a && a.getKvHnd();
  });
  int transposes = countOps(p.fnAfter, [](Operation *op) { return isa<llmc::llm::TransposeOp>(op); });
  EXPECT_EQ(hnd, 0) << print(*p.after);
  EXPECT_EQ(transposes, 0) << print(*p.after);
}

} // namespace
