//===- ServingStep.cpp - the serving step on the reference executor -------===//

#include "llmc/Reference/ServingStep.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/raw_ostream.h"

#include "absl/strings/str_cat.h"

#include <cmath>
#include <cstring>

namespace llmc::reference {

namespace rt = llmc::rt;
namespace ref = llmc::reference;

namespace {
std::string typeStr(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}
} // namespace

absl::StatusOr<ServingStepPages> readServingStepPages(mlir::func::FuncOp fn) {
  auto bad = [&](auto... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("serving step @", fn.getSymName().str(), ": ", parts...));
  };
  mlir::FunctionType type = fn.getFunctionType();
  if (type.getNumInputs() < 8 || type.getNumResults() < 3)
    return bad(type.getNumInputs(), " arguments and ", type.getNumResults(),
               " results; expected the 6 batch arrays, the pages and the weights, and the "
               "logits and pages (llmc/runtime/ServingStep.h)");
  const char *names[] = {"tokens", "positions", "cu_seqlens_q", "seq_lens", "block_table",
                         "logits_rows"};
  ServingStepPages p;
  for (unsigned i = 0; i < 6; ++i) {
    auto t = mlir::dyn_cast<mlir::RankedTensorType>(type.getInput(i));
    const int64_t rank = i == 4 ? 2 : 1;
    if (!t || !t.getElementType().isInteger(32) || t.getRank() != rank ||
        (i == 4 && t.isDynamicDim(1)))
      return bad("argument ", i, " (", names[i], ") is ", typeStr(type.getInput(i)),
                 "; expected a rank-", rank, " i32 tensor", i == 4 ? " with static columns" : "");
    if (i == 4)
      p.max_pages = t.getDimSize(1);
  }
  unsigned pages = 0;
  while (6 + pages < type.getNumInputs() && fn.getArgAttr(6 + pages, "llm.donate"))
    ++pages;
  if (pages == 0 || pages % 2)
    return bad(pages, " donated arguments from argument 6 on; expected the key and value "
                      "pages of each layer (llm.donate)");
  p.num_layers = pages / 2;
  auto first = mlir::dyn_cast<mlir::RankedTensorType>(type.getInput(6));
  if (!first || first.getRank() != 4 || !first.hasStaticShape())
    return bad("argument 6 (key pages of layer 0) is ", typeStr(type.getInput(6)),
               "; expected a static [pages, page_size, kv_heads, head_dim] tensor");
  for (unsigned i = 6; i < 6 + pages; ++i)
    if (type.getInput(i) != first)
      return bad("argument ", i, " is ", typeStr(type.getInput(i)),
                 "; every page argument must be ", typeStr(first));
  p.num_pages = first.getDimSize(0);
  p.page_size = first.getDimSize(1);
  p.num_kv_heads = first.getDimSize(2);
  p.head_dim = first.getDimSize(3);
  p.element_type = first.getElementType();
  if (type.getNumResults() != 1 + pages)
    return bad(type.getNumResults(), " results; expected the logits and the ", pages,
               " page tensors");
  for (unsigned i = 6; i < 6 + pages; ++i) {
    auto alias = fn.getArgAttrOfType<mlir::IntegerAttr>(i, "llm.aliasing_output");
    if (!alias || alias.getInt() != static_cast<int64_t>(i) - 5 ||
        type.getResult(i - 5) != first)
      return bad("argument ", i, " (page tensor) must be returned in place as result ", i - 5,
                 " (llm.aliasing_output = ", i - 5, " and the result of type ",
                 typeStr(first), ")");
  }
  auto logits = mlir::dyn_cast<mlir::RankedTensorType>(type.getResult(0));
  if (!logits || logits.getRank() != 2 || !logits.isDynamicDim(0) || logits.isDynamicDim(1) ||
      !(logits.getElementType().isF32() || logits.getElementType().isBF16() ||
        logits.getElementType().isF16()))
    return bad("result 0 is ", typeStr(type.getResult(0)),
               "; expected the logits, tensor<?xVOCABxf32> (or bf16, f16) with the "
               "logit_rows dim dynamic");
  p.vocab = logits.getDimSize(1);
  for (unsigned i = 6 + pages; i < type.getNumInputs(); ++i) {
    auto w = mlir::dyn_cast<mlir::RankedTensorType>(type.getInput(i));
    if (!w || !w.hasStaticShape())
      return bad("argument ", i, " (a weight) is ", typeStr(type.getInput(i)),
                 "; expected a tensor of static shape");
  }
  return p;
}

rt::KvPagePoolOptions ServingStepPages::poolOptions() const {
  rt::KvPagePoolOptions o;
  o.num_pages = num_pages;
  o.page_size = page_size;
  o.num_layers = num_layers;
  o.num_kv_heads = num_kv_heads;
  o.head_dim = head_dim;
  o.element_bytes = (element_type.getIntOrFloatBitWidth() + 7) / 8;
  return o;
}

void poisonHostPages(rt::KvPagePool &pool) {
  const rt::KvPagePoolOptions &o = pool.options();
  for (int64_t l = 0; l < o.num_layers; ++l)
    for (uint64_t addr : {pool.KeyPages(l), pool.ValuePages(l)})
      std::memset(reinterpret_cast<void *>(addr), 0xFF,
                  static_cast<size_t>(o.num_pages * pool.page_bytes()));
}

absl::StatusOr<std::unique_ptr<ReferenceStepModel>>
ReferenceStepModel::create(mlir::func::FuncOp fn, std::vector<ref::HostTensor> weights,
                           rt::KvPagePool *pool, std::optional<rt::StepBucketing> bucketing) {
  auto layout = readServingStepPages(fn);
  if (!layout.ok())
    return layout.status();
  if (!pool)
    return absl::InvalidArgumentError("ReferenceStepModel: null page pool");
  const rt::KvPagePoolOptions &o = pool->options();
  const int64_t elementBytes = layout->poolOptions().element_bytes;
  if (o.num_layers != layout->num_layers || o.page_size != layout->page_size ||
      o.num_kv_heads != layout->num_kv_heads || o.head_dim != layout->head_dim ||
      o.element_bytes != elementBytes || o.num_pages > layout->num_pages)
    return absl::InvalidArgumentError(absl::StrCat(
        "ReferenceStepModel: the page pool (", o.num_layers, " layers of ", o.num_pages, " x ",
        o.page_size, " x ", o.num_kv_heads, " x ", o.head_dim, ", ", o.element_bytes,
        "-byte elements) does not fit the function's pages (", layout->num_layers,
        " layers of ", layout->num_pages, " x ", layout->page_size, " x ",
        layout->num_kv_heads, " x ", layout->head_dim, ", ", elementBytes, "-byte)"));
  const size_t wantWeights = fn.getNumArguments() - 6 - 2 * layout->num_layers;
  if (weights.size() != wantWeights)
    return absl::InvalidArgumentError(absl::StrCat("ReferenceStepModel: ", weights.size(),
                                                   " weights; the function takes ",
                                                   wantWeights));
  std::unique_ptr<ReferenceStepModel> m(new ReferenceStepModel());
  m->fn_ = fn;
  m->layout_ = *layout;
  m->weights_ = std::move(weights);
  m->pool_ = pool;
  m->bucketing_ = std::move(bucketing);
  if (m->bucketing_) {
    auto padding = rt::ReservePaddingPages(*pool, *m->bucketing_, m->layout_.max_pages);
    if (!padding.ok())
      return padding.status();
    m->paddingSequence_ = padding->first;
    m->paddingPages_ = std::move(padding->second);
  }
  return m;
}

ReferenceStepModel::~ReferenceStepModel() {
  if (paddingSequence_ >= 0)
    (void)pool_->Release(paddingSequence_);
}

absl::StatusOr<std::vector<std::vector<float>>>
ReferenceStepModel::Run(const rt::StepBatch &batch, rt::KvPagePool &pool) {
  if (&pool != pool_)
    return absl::InvalidArgumentError("ReferenceStepModel: run with another page pool");
  rt::PaddedStepInputs in;
  if (bucketing_) {
    auto shape = bucketing_->Choose(batch.num_tokens(), batch.num_sequences());
    if (!shape.ok())
      return shape.status();
    auto padded = rt::PadStepBatch(batch, *shape, layout_.max_pages, paddingPages_,
                                   layout_.page_size);
    if (!padded.ok())
      return padded.status();
    in = std::move(*padded);
  } else {
    const int64_t B = batch.num_sequences();
    if (batch.max_pages > layout_.max_pages)
      return absl::InvalidArgumentError(absl::StrCat(
          "a sequence of the step needs ", batch.max_pages,
          " pages; the step function's block table has ", layout_.max_pages, " columns"));
    in.tokens = batch.token_ids;
    in.positions = batch.positions;
    in.cu_seqlens_q = batch.cu_seqlens_q;
    in.seq_lens = batch.seq_lens;
    in.block_table.assign(B * layout_.max_pages, 0);
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(batch.block_table.begin() + b * batch.max_pages, batch.max_pages,
                  in.block_table.begin() + b * layout_.max_pages);
    in.logits_rows = batch.logits_rows;
  }
  mlir::Type i32 = mlir::IntegerType::get(fn_.getContext(), 32);
  auto ints = [&](const std::vector<int32_t> &v, std::vector<int64_t> shape) {
    ref::HostTensor t;
    t.elementType = i32;
    t.shape = std::move(shape);
    t.data.assign(v.begin(), v.end());
    return t;
  };
  const int64_t Tb = in.tokens.size(), Bb = in.seq_lens.size();
  std::vector<ref::HostTensor> inputs = {
      ints(in.tokens, {Tb}),           ints(in.positions, {Tb}),
      ints(in.cu_seqlens_q, {Bb + 1}), ints(in.seq_lens, {Bb}),
      ints(in.block_table, {Bb, layout_.max_pages}),
      ints(in.logits_rows, {static_cast<int64_t>(in.logits_rows.size())})};
  // The pool's pages, the function's page count padded with NaN.
  const std::vector<int64_t> pageShape = {layout_.num_pages, layout_.page_size,
                                          layout_.num_kv_heads, layout_.head_dim};
  const int64_t poolBytes = pool.options().num_pages * pool.page_bytes();
  for (int64_t l = 0; l < layout_.num_layers; ++l)
    for (uint64_t addr : {pool.KeyPages(l), pool.ValuePages(l)}) {
      std::string bytes(reinterpret_cast<const char *>(addr), poolBytes);
      ref::HostTensor pages = fromStorage(
          bytes, layout_.element_type,
          {pool.options().num_pages, layout_.page_size, layout_.num_kv_heads, layout_.head_dim});
      pages.shape = pageShape;
      pages.data.resize(layout_.num_pages * pool.page_bytes() / pool.options().element_bytes,
                        NAN);
      inputs.push_back(std::move(pages));
    }
  inputs.insert(inputs.end(), weights_.begin(), weights_.end());
  absl::StatusOr<std::vector<ref::HostTensor>> out = ref::Evaluate(fn_, inputs);
  if (!out.ok())
    return out.status();
  const size_t rows = batch.logits_rows.size();
  if (out->size() != static_cast<size_t>(1 + 2 * layout_.num_layers) ||
      (*out)[0].data.size() < rows * layout_.vocab)
    return absl::InternalError("ReferenceStepModel: the step's results do not match its "
                               "signature (llmc bug)");
  // The pages back into the pool (values of the element type: exact).
  int r = 1;
  for (int64_t l = 0; l < layout_.num_layers; ++l)
    for (uint64_t addr : {pool.KeyPages(l), pool.ValuePages(l)}) {
      ref::HostTensor &pages = (*out)[r++];
      pages.data.resize(poolBytes / pool.options().element_bytes);
      std::string bytes = toStorage(pages);
      std::memcpy(reinterpret_cast<char *>(addr), bytes.data(), bytes.size());
    }
  std::vector<std::vector<float>> logits;
  const std::vector<double> &z = (*out)[0].data;
  for (size_t i = 0; i < batch.logits_rows.size(); ++i)
    logits.emplace_back(z.begin() + i * layout_.vocab, z.begin() + (i + 1) * layout_.vocab);
  ++steps_;
  shapes_.push_back({Tb, Bb});
  return logits;
}

} // namespace llmc::reference
