// SHA-256, used for cache keys and payload checksums in on-disk artifacts.
#ifndef LLMC_RUNTIME_HASH_H
#define LLMC_RUNTIME_HASH_H

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace llmc::rt {

/// Incremental SHA-256 (FIPS 180-4).
class Sha256 {
 public:
  Sha256();
  void Update(absl::string_view data);
  /// Appends `data` prefixed with its 64-bit length, so that a sequence of
  /// fields hashes unambiguously ("ab","c" != "a","bc").
  void UpdateField(absl::string_view data);
  /// Finishes and returns the 32-byte digest; the object must not be reused.
  std::array<uint8_t, 32> Finish();
  /// Lowercase hex digest of `data`.
  static std::string HexDigest(absl::string_view data);

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t total_ = 0;
  size_t fill_ = 0;
};

/// Lowercase hex of `bytes`.
std::string ToHex(const uint8_t* bytes, size_t n);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_HASH_H
