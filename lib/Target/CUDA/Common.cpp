//===- Common.cpp - ScalarType helpers and shared generator utilities ----===//
#include "Internal.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace llmc::cuda {

const char *CTypeName(ScalarType t) {
  switch (t) {
  case ScalarType::f32: return "float";
  case ScalarType::f16: return "f16";
  case ScalarType::bf16: return "bf16";
  case ScalarType::f8e4m3: return "fp8e4m3";
  case ScalarType::f8e5m2: return "fp8e5m2";
  case ScalarType::i1: return "uint8_t";
  case ScalarType::i8: return "int8_t";
  case ScalarType::i32: return "int32_t";
  case ScalarType::i64: return "int64_t";
  }
  return "?";
}

const char *ScalarTypeTag(ScalarType t) {
  switch (t) {
  case ScalarType::f32: return "f32";
  case ScalarType::f16: return "f16";
  case ScalarType::bf16: return "bf16";
  case ScalarType::f8e4m3: return "e4m3";
  case ScalarType::f8e5m2: return "e5m2";
  case ScalarType::i1: return "i1";
  case ScalarType::i8: return "i8";
  case ScalarType::i32: return "i32";
  case ScalarType::i64: return "i64";
  }
  return "?";
}

int ScalarSize(ScalarType t) {
  switch (t) {
  case ScalarType::f32: case ScalarType::i32: return 4;
  case ScalarType::f16: case ScalarType::bf16: return 2;
  case ScalarType::i64: return 8;
  default: return 1;
  }
}

bool IsIntType(ScalarType t) {
  return t == ScalarType::i1 || t == ScalarType::i8 || t == ScalarType::i32 ||
         t == ScalarType::i64;
}
bool IsFloatType(ScalarType t) { return !IsIntType(t); }

namespace detail {

std::string FloatLit(float v) {
  if (std::isnan(v) || std::isinf(v)) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    char buf[48];
    std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x)", bits);
    return buf;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

std::string FloatTag(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", bits);
  return buf;
}

std::string HashHex(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int VecWidth(int64_t n, int elem_size) {
  int w = 16 / elem_size;
  while (w > 1 && n % w != 0) w /= 2;
  return w < 1 ? 1 : w;
}

namespace {
/// Every `static constexpr int kX = <literal>;` of `text` holds a value that
/// fits int: a generator that sizes a kernel beyond 32-bit indices must pick
/// a 64-bit form or refuse the configuration, never let the literal wrap.
absl::Status CheckIntConstants(const std::string &text) {
  const std::string key = "static constexpr int ";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    size_t eq = text.find(" = ", at + key.size());
    size_t end = text.find(';', at);
    if (eq == std::string::npos || end == std::string::npos || eq > end) continue;
    const std::string value = text.substr(eq + 3, end - eq - 3);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) continue;
    if (value.size() > 10 || std::stoll(value) > 0x7fffffffLL)
      return Unsupported("constant " + text.substr(at + key.size(), eq - at - key.size()) +
                         " = " + value + " does not fit the kernel's 32-bit int");
  }
  return absl::OkStatus();
}
} // namespace

absl::StatusOr<std::string>
SourceVariant(std::string body, const char *what,
              std::initializer_list<std::pair<std::string, std::string>> edits) {
  for (const auto &[from, to] : edits) {
    const std::string &f = from;
    size_t p = body.find(f);
    if (p == std::string::npos)
      return absl::InternalError(
          std::string("llmc::cuda kernel generator: internal error (please "
                      "report): the ") + what + " variant edits text the kernel no "
                      "longer has: " + f);
    for (; p != std::string::npos; p = body.find(f, p + to.size()))
      body.replace(p, f.size(), to);
  }
  return body;
}

namespace {
constexpr std::string_view kGridDependencyWaitCall = "llmcGridDependencyWait();";

/// `body` with the wait for the previous launch and the go-ahead for the next
/// one (the preamble's "programmatic dependent launch") as the first
/// statements of every extern "C" __global__ entry, unless the body calls
/// llmcGridDependencyWait() itself (a kernel that starts reading inputs no
/// launch writes before it waits). Internal error when the body has no entry.
/// `text` without its // and /* */ comments (generated code has no string
/// literals holding either).
std::string WithoutComments(const std::string &text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "//") == 0) {
      i = text.find('\n', i);
      if (i == std::string::npos)
        break;
    } else if (text.compare(i, 2, "/*") == 0) {
      size_t end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 2;
    } else {
      out += text[i++];
    }
  }
  return out;
}

absl::StatusOr<std::string> WithGridDependencyWait(std::string body) {
  if (WithoutComments(body).find(kGridDependencyWaitCall) != std::string::npos)
    return body;
  const std::string entry = "extern \"C\" __global__";
  int entries = 0;
  for (size_t at = body.find(entry); at != std::string::npos; at = body.find(entry, at + 1)) {
    size_t brace = body.find('{', at);
    if (brace == std::string::npos)
      break;
    body.insert(brace + 1, "\n  llmcGridDependencyWait();  // the previous launch is complete"
                           "\n  llmcLaunchDependents();");
    ++entries;
  }
  if (entries == 0)
    return absl::InternalError("llmc::cuda kernel generator: internal error (please report): a "
                               "kernel body without an extern \"C\" __global__ entry");
  return body;
}
} // namespace

absl::StatusOr<std::string> Assemble(const std::string &header_comment,
                                     const std::string &config,
                                     const std::string &rawBody) {
  if (absl::Status st = CheckIntConstants(config); !st.ok())
    return st;
  if (absl::Status st = CheckIntConstants(rawBody); !st.ok())
    return st;
  LLMC_ASSIGN_OR_RETURN(std::string body, WithGridDependencyWait(rawBody));
  std::string s;
  s.reserve(Preamble().size() + header_comment.size() + config.size() +
            body.size() + 64);
  s += Preamble();
  s += "\n";
  s += header_comment;
  s += "\n// ---- configuration (compile-time constants) ----\n";
  s += config;
  s += body;
  return s;
}

absl::StatusOr<LaunchDims> Dims(int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                                int64_t smem) {
  if (gx < 1) gx = 1;
  if (gy < 1) gy = 1;
  if (gz < 1) gz = 1;
  if (gx > 0x7fffffffLL || gy > 65535 || gz > 65535)
    return Unsupported("launch grid too large: " + std::to_string(gx) + " x " +
                       std::to_string(gy) + " x " + std::to_string(gz) +
                       " blocks (CUDA allows at most 2147483647 x 65535 x 65535)");
  LaunchDims d{};
  d.grid[0] = static_cast<unsigned>(gx);
  d.grid[1] = static_cast<unsigned>(gy);
  d.grid[2] = static_cast<unsigned>(gz);
  d.block[0] = static_cast<unsigned>(bx);
  d.block[1] = 1;
  d.block[2] = 1;
  d.smem = static_cast<unsigned>(smem);
  return d;
}

absl::Status Invalid(const std::string &msg) {
  return absl::InvalidArgumentError("llmc::cuda kernel generator: " + msg);
}

absl::Status Unsupported(const std::string &msg) {
  return absl::UnimplementedError("llmc::cuda kernel generator: " + msg);
}

} // namespace detail

bool WaitsForGridDependency(std::string_view source) {
  return source.substr(0, Preamble().size()) == Preamble() &&
         detail::WithoutComments(std::string(source.substr(Preamble().size())))
                 .find(detail::kGridDependencyWaitCall) != std::string::npos;
}
} // namespace llmc::cuda
