//===- ExecDialect.cpp - the exec dialect --------------------------------===//

#include "Exec/IR/ExecDialect.h"

#include "Exec/IR/ExecOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llmc::exec;

#include "Exec/IR/ExecDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "Exec/IR/ExecTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "Exec/IR/ExecAttrs.cpp.inc"

void ExecDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "Exec/IR/ExecTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Exec/IR/ExecAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "Exec/IR/ExecOps.cpp.inc"
      >();
}
