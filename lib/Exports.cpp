//===- Exports.cpp - libllmc.so's own translation unit --------------------===//
//
// libllmc.so is linked from whole static archives (the C API, the tools'
// entry points) and exports what lib/llmc.map lists; a shared library target
// needs one source of its own, and this is it.
//
//===----------------------------------------------------------------------===//
