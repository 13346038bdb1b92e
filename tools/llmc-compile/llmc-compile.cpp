//===- llmc-compile.cpp - ahead-of-time compilation ------------------------------===//

#include "llmc/Tools.h"

int main(int argc, char **argv) { return llmc::compileMain(argc, argv); }
