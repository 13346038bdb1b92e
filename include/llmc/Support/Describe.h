//===- Describe.h - how llmc's errors name ops and attributes ---*- C++ -*-===//
//
// One spelling for the op and attribute an error is about, shared by the
// lowering, its readers of IR decisions and the exec translations.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_SUPPORT_DESCRIBE_H
#define LLMC_SUPPORT_DESCRIBE_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/Operation.h"

#include <string>

namespace llmc {

/// "'llm.add' at loc(...)": the op's name and location.
std::string describeOp(mlir::Operation *op);

/// `attr` as printed in IR.
std::string printAttribute(mlir::Attribute attr);

} // namespace llmc

#endif // LLMC_SUPPORT_DESCRIBE_H
