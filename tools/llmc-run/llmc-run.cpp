//===- llmc-run.cpp - execute an llm function ------------------------------===//

#include "llmc/Tools.h"

int main(int argc, char **argv) { return llmc::runMain(argc, argv); }
