//===- CommandLine.cpp - flag checks shared by llmc-run and llmc-compile --===//

#include "CommandLine.h"

#include "llvm/ADT/StringRef.h"

#include <map>
#include <vector>

namespace cl = llvm::cl;

namespace {

/// "-o" for a one-letter option, else "--name".
std::string spelling(const cl::Option &opt) {
  return (opt.ArgStr.size() == 1 ? "-" : "--") + opt.ArgStr.str();
}

/// Every occurrence of `opt` in argv, spelled "--name=value" or "--name",
/// found as llvm::cl finds them: "-name" or "--name", its value after '=' or,
/// for an option that requires one, in the next argument; nothing after
/// "--".
std::vector<std::string> occurrences(const cl::Option &opt, int argc,
                                     char **argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--")
      break;
    if (!arg.consume_front("-"))
      continue;
    arg.consume_front("-");
    auto [name, value] = arg.split('=');
    if (name != opt.ArgStr)
      continue;
    bool hasValue = arg.contains('=');
    if (!hasValue && opt.getValueExpectedFlag() == cl::ValueRequired &&
        i + 1 < argc) {
      value = argv[++i];
      hasValue = true;
    }
    out.push_back(spelling(opt) + (hasValue ? "=" + value.str() : ""));
  }
  return out;
}

} // namespace

std::string llmc::tools::repeatedOptionError(cl::OptionCategory &category,
                                             int argc, char **argv) {
  // By name, so that several repeated options read in a stable order.
  std::map<std::string, std::string> errors;
  for (auto &[key, option] : cl::getRegisteredOptions()) {
    const cl::Option &opt = *option;
    if (opt.ArgStr != key || opt.getNumOccurrences() < 2)
      continue;
    bool ours = false;
    for (const cl::OptionCategory *c : opt.Categories)
      ours |= c == &category;
    // Lists (--shape, --input, ...) repeat by design; their entries are
    // checked by key where they are parsed.
    if (!ours || opt.getNumOccurrencesFlag() == cl::ZeroOrMore ||
        opt.getNumOccurrencesFlag() == cl::OneOrMore)
      continue;
    std::vector<std::string> seen = occurrences(opt, argc, argv);
    std::string list;
    for (size_t i = 0; i < seen.size(); ++i)
      list += (i == 0 ? "" : i + 1 == seen.size() ? ", then " : ", ") + seen[i];
    errors[opt.ArgStr.str()] = spelling(opt) + " is given " +
                               std::to_string(opt.getNumOccurrences()) +
                               " times (" + list + "); give it once";
  }
  std::string error;
  for (auto &[name, e] : errors)
    error += (error.empty() ? "" : "; ") + e;
  return error;
}
