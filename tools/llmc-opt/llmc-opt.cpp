//===- llmc-opt.cpp - llmc optimizer driver -------------------------------===//
//
// mlir-opt with the llm dialect and every llmc pass registered.
//
//===----------------------------------------------------------------------===//

#include "llmc/Tools.h"

int main(int argc, char **argv) { return llmc::optMain(argc, argv); }
