//===- ParseSource.h - MLIR parsing with llmc's nesting limit ---*- C++ -*-===//
//
// MLIR's parser, verifier and printer recurse once per level of nested
// regions, attributes and types, so a source nesting a few thousand levels
// deep overflows the stack (a SIGSEGV, which kills a host process embedding
// the C API). Every entry point that parses MLIR text (llmc-opt,
// llmc-compile, llmc-run, llmc::Compiler and the C API) first runs
// checkNesting, a lexical scan that bounds nesting at kMaxNestingDepth
// levels, and rejects a deeper source with a diagnostic at the bracket (or
// alias use) that crosses the limit.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_SUPPORT_PARSESOURCE_H
#define LLMC_SUPPORT_PARSESOURCE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace llmc {

/// The deepest nesting of '(', '[', '{' and '<' that llmc parses, counting
/// the levels an attribute or type alias brings where it is used. Real
/// programs nest a few tens of levels. At 256 levels the parser, verifier
/// and printer need at most about 0.7 MiB of stack (measured: 256 nested
/// modules 0.6 MiB; 250 nested regions of an op, reported with the op
/// printed, 0.7 MiB), well within the 8 MiB of a main thread or a default
/// pthread; NestingTest runs them on a 2 MiB thread.
inline constexpr unsigned kMaxNestingDepth = 256;

/// Where a source first nests deeper than the limit.
struct NestingViolation {
  /// Byte offset into the scanned text, and its 1-based line and column.
  size_t offset = 0;
  unsigned line = 0;
  unsigned column = 0;
  /// The diagnostic, without a location: "'{' nests 257 levels deep; llmc
  /// accepts at most 256 levels of nested '(', '[', '{' and '<'".
  std::string message;
};

/// Scans MLIR source text for nesting deeper than `limit`. Brackets inside
/// string literals and `//` comments do not count, nor do the '>' of `->`
/// and `>=`. A use of an attribute or type alias (`#name`, `!name`) counts
/// as deep as the alias's definition nests, so a chain of aliases, each
/// wrapping the previous one, is bounded too. With a non-empty
/// `splitMarker` (llmc-opt --split-input-file), every line starting with
/// the marker begins a fresh scan, as it begins a separately parsed chunk.
/// Linear in the size of the text; memory bounded by `limit` and the number
/// of aliases.
std::optional<NestingViolation>
checkNesting(llvm::StringRef text, llvm::StringRef splitMarker = "",
             unsigned limit = kMaxNestingDepth);

/// mlir::parseSourceFile<ModuleOp> after checkNesting: opens `filename` ("-":
/// stdin) into `sourceMgr` and reports every error (cannot open, too deep,
/// parse and verification errors) as a diagnostic on `context`. Null on
/// error.
mlir::OwningOpRef<mlir::ModuleOp> parseModuleFile(llvm::StringRef filename,
                                                  llvm::SourceMgr &sourceMgr,
                                                  mlir::MLIRContext *context);

/// mlir::parseSourceString<ModuleOp> after checkNesting; diagnostics are
/// located in `sourceName`. Reads exactly text.size() bytes (the text is
/// copied into a NUL-terminated buffer for MLIR's lexer, which otherwise
/// reads on past the end of a text that does not end in NUL). Null on
/// error.
mlir::OwningOpRef<mlir::ModuleOp> parseModuleString(llvm::StringRef text,
                                                    llvm::StringRef sourceName,
                                                    mlir::MLIRContext *context);

} // namespace llmc

#endif // LLMC_SUPPORT_PARSESOURCE_H
