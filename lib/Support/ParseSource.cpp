//===- ParseSource.cpp - MLIR parsing with llmc's nesting limit -----------===//

#include "llmc/Support/ParseSource.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include <vector>

using namespace mlir;

namespace llmc {
namespace {

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

bool isOpener(char c) { return c == '(' || c == '[' || c == '{' || c == '<'; }

char openerOf(char closer) {
  switch (closer) {
  case ')': return '(';
  case ']': return '[';
  case '}': return '{';
  default: return '<';
  }
}

/// Characters of identifiers, keywords and numbers (`tensor`, `f32`,
/// `1.0e-5`, `%arg0`, `@fn`, `^bb0`). A '-' is one unless it starts `->`.
bool isWordChar(llvm::StringRef text, size_t i) {
  char c = text[i];
  if (c == '-')
    return i + 1 >= text.size() || text[i + 1] != '>';
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '.' ||
         c == '+' || c == '%' || c == '@' || c == '^';
}

/// Scans one chunk (the whole text, or one --split-input-file chunk) with a
/// stack of the open brackets and the nesting depth of every alias defined
/// so far.
///
/// An alias definition `#name = value` or `!name = value` starts at the top
/// level (no bracket open). Its value is a word with its adjacent bracket
/// groups (`dense<1.0>`, `distinct[0]<{}>`, `#other`, `[1, 2]`), optionally
/// followed by `: type` or `-> type` (function types); the definition ends
/// before the first top-level token that continues none of these. Its depth
/// is the deepest nesting inside the value, counting the aliases it uses.
class NestingScanner {
public:
  NestingScanner(llvm::StringRef text, size_t begin, size_t end,
                 unsigned limit)
      : text_(text), pos_(begin), end_(end), limit_(limit) {}

  std::optional<NestingViolation> run() {
    while (pos_ < end_) {
      if (auto v = step())
        return v;
    }
    finishDefinition();
    return std::nullopt;
  }

private:
  std::optional<NestingViolation> step() {
    char c = text_[pos_];
    if (isSpace(c)) {
      ++pos_;
      return std::nullopt;
    }
    if (c == '/' && pos_ + 1 < end_ && text_[pos_ + 1] == '/') {
      while (pos_ < end_ && text_[pos_] != '\n')
        ++pos_;
      return std::nullopt;
    }
    // At the top level, a finished alias value ends its definition unless
    // this token continues it.
    if (inDefinition_ && stack_.empty() && !expectingValue_ &&
        !continuesValue()) {
      finishDefinition();
    }
    if (c == '"') {
      skipString();
      valueSeen();
      return std::nullopt;
    }
    if (c == '-' && pos_ + 1 < end_ && text_[pos_ + 1] == '>') {
      pos_ += 2;
      if (inDefinition_ && stack_.empty())
        expectingValue_ = true;
      return std::nullopt;
    }
    if (c == '>' && pos_ + 1 < end_ && text_[pos_ + 1] == '=') {
      pos_ += 2; // `>=` in integer sets.
      return std::nullopt;
    }
    if (isOpener(c)) {
      stack_.push_back(c);
      if (stack_.size() > limit_)
        return violation(pos_, concat("'", std::string(1, c), "' nests ",
                                        stack_.size(), " levels deep"));
      noteDepth(stack_.size());
      ++pos_;
      return std::nullopt;
    }
    if (c == ')' || c == ']' || c == '}' || c == '>') {
      close(openerOf(c));
      ++pos_;
      if (stack_.empty())
        valueSeen();
      return std::nullopt;
    }
    if (c == '#' || c == '!')
      return aliasToken();
    if (isWordChar(text_, pos_)) {
      while (pos_ < end_ && isWordChar(text_, pos_))
        ++pos_;
      valueSeen();
      return std::nullopt;
    }
    if (inDefinition_ && stack_.empty() && (c == ':' || c == ',' || c == '='))
      expectingValue_ = true;
    ++pos_;
    return std::nullopt;
  }

  /// Whether the token at pos_ continues a finished top-level alias value:
  /// `: type`, `-> type`, or a bracket group right after the word
  /// (`dense<`, `distinct[0]<`).
  bool continuesValue() const {
    char c = text_[pos_];
    if (c == ':' || c == ',')
      return true;
    if (c == '-' && pos_ + 1 < end_ && text_[pos_ + 1] == '>')
      return true;
    return isOpener(c) && pos_ > 0 && !isSpace(text_[pos_ - 1]);
  }

  /// Pops up to the innermost matching opener. A closer with no matching
  /// opener is left to the parser to report; a stray '<' inside a group
  /// (never written by MLIR's syntax) is dropped with the group.
  void close(char opener) {
    if (opener == '<') {
      if (!stack_.empty() && stack_.back() == '<')
        stack_.pop_back();
      return;
    }
    auto it = std::find(stack_.rbegin(), stack_.rend(), opener);
    if (it == stack_.rend())
      return;
    stack_.erase(std::next(it).base(), stack_.end());
  }

  void skipString() {
    ++pos_;
    while (pos_ < end_ && text_[pos_] != '"' && text_[pos_] != '\n') {
      if (text_[pos_] == '\\')
        ++pos_;
      ++pos_;
    }
    if (pos_ < end_ && text_[pos_] == '"')
      ++pos_;
  }

  /// `#name` / `!name`: an alias definition at the top level, else a use.
  std::optional<NestingViolation> aliasToken() {
    size_t start = pos_;
    ++pos_;
    while (pos_ < end_ && isWordChar(text_, pos_))
      ++pos_;
    llvm::StringRef name = text_.slice(start, pos_);
    if (name.size() == 1) { // A lone '#' or '!' (`{-#`).
      valueSeen();
      return std::nullopt;
    }
    if (stack_.empty() && !inDefinition_) {
      size_t eq = pos_;
      while (eq < end_ && isSpace(text_[eq]))
        ++eq;
      if (eq < end_ && text_[eq] == '=' &&
          (eq + 1 >= end_ || text_[eq + 1] != '=')) {
        inDefinition_ = true;
        expectingValue_ = true;
        definitionName_ = name.str();
        definitionDepth_ = 0;
        pos_ = eq + 1;
        return std::nullopt;
      }
    }
    auto it = aliasDepth_.find(name);
    if (it != aliasDepth_.end()) {
      size_t depth = stack_.size() + it->second;
      if (depth > limit_)
        return violation(start, concat("'", name.str(), "' nests ", depth,
                                         " levels deep through its alias "
                                         "definitions"));
      noteDepth(depth);
    }
    valueSeen();
    return std::nullopt;
  }

  void valueSeen() {
    if (inDefinition_ && stack_.empty())
      expectingValue_ = false;
  }

  void noteDepth(size_t depth) {
    if (inDefinition_)
      definitionDepth_ = std::max(definitionDepth_, depth);
  }

  void finishDefinition() {
    if (!inDefinition_)
      return;
    aliasDepth_[definitionName_] = definitionDepth_;
    inDefinition_ = false;
    expectingValue_ = false;
  }

  template <typename... Parts>
  static std::string concat(const Parts &...parts) {
    std::string s;
    llvm::raw_string_ostream os(s);
    (os << ... << parts);
    return s;
  }

  NestingViolation violation(size_t offset, std::string what) const {
    NestingViolation v;
    v.offset = offset;
    llvm::StringRef before = text_.take_front(offset);
    v.line = 1 + before.count('\n');
    size_t lineStart = before.rfind('\n');
    v.column = lineStart == llvm::StringRef::npos ? offset + 1
                                                  : offset - lineStart;
    v.message = concat(what, "; llmc accepts at most ", limit_,
                         " levels of nested '(', '[', '{' and '<'");
    return v;
  }

  llvm::StringRef text_;
  size_t pos_;
  size_t end_;
  unsigned limit_;
  std::vector<char> stack_;
  llvm::StringMap<size_t> aliasDepth_;
  bool inDefinition_ = false;
  bool expectingValue_ = false;
  std::string definitionName_;
  size_t definitionDepth_ = 0;
};

/// Where MLIR's splitAndProcessBuffer starts a new chunk: after every
/// occurrence of the marker that is not the prefix of a longer dash run
/// (MLIR reports those as near misses and does not split there).
std::vector<size_t> chunkStarts(llvm::StringRef text, llvm::StringRef marker) {
  std::vector<size_t> starts = {0};
  if (marker.empty())
    return starts;
  size_t at = 0;
  while ((at = text.find(marker, at)) != llvm::StringRef::npos) {
    size_t after = at + marker.size();
    if (after >= text.size() || (text[after] != '-' && text[after] != '0'))
      starts.push_back(after);
    at = after;
  }
  return starts;
}

} // namespace

std::optional<NestingViolation> checkNesting(llvm::StringRef text,
                                             llvm::StringRef splitMarker,
                                             unsigned limit) {
  std::vector<size_t> starts = chunkStarts(text, splitMarker);
  for (size_t i = 0; i < starts.size(); ++i) {
    size_t end = i + 1 < starts.size() ? starts[i + 1] - splitMarker.size()
                                       : text.size();
    if (auto v = NestingScanner(text, starts[i], end, limit).run())
      return v;
  }
  return std::nullopt;
}

namespace {

/// Emits the violation of `text` (named `name`) on `context`; true if any.
bool reportNesting(llvm::StringRef text, llvm::StringRef name,
                   MLIRContext *context) {
  std::optional<NestingViolation> v = checkNesting(text);
  if (!v)
    return false;
  emitError(FileLineColLoc::get(context, name, v->line, v->column))
      << v->message;
  return true;
}

} // namespace

OwningOpRef<ModuleOp> parseModuleFile(llvm::StringRef filename,
                                      llvm::SourceMgr &sourceMgr,
                                      MLIRContext *context) {
  auto file = llvm::MemoryBuffer::getFileOrSTDIN(filename);
  if (!file) {
    emitError(UnknownLoc::get(context))
        << "could not open input file " << filename;
    return {};
  }
  unsigned id = sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(id);
  if (reportNesting(buffer->getBuffer(), buffer->getBufferIdentifier(),
                    context))
    return {};
  return parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(context));
}

OwningOpRef<ModuleOp> parseModuleString(llvm::StringRef text,
                                        llvm::StringRef sourceName,
                                        MLIRContext *context) {
  if (reportNesting(text, sourceName, context))
    return {};
  // MLIR's lexer finds the end of its buffer by the NUL after it, which a
  // caller's (pointer, length) text need not have: a copy has one.
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, sourceName), llvm::SMLoc());
  return parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(context));
}

} // namespace llmc
