//===- llmc-serve.cpp - serve a request file with continuous batching -----===//

#include "llmc/Tools.h"

int main(int argc, char **argv) { return llmc::serveMain(argc, argv); }
