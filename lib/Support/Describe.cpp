//===- Describe.cpp - how llmc's errors name ops and attributes -----------===//

#include "llmc/Support/Describe.h"

#include "llvm/Support/raw_ostream.h"

std::string llmc::describeOp(mlir::Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "'" << op->getName() << "' at ";
  op->getLoc().print(os);
  return s;
}

std::string llmc::printAttribute(mlir::Attribute attr) {
  std::string s;
  llvm::raw_string_ostream os(s);
  attr.print(os);
  return s;
}
