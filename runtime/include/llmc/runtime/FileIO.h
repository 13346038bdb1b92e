// Bounded reads and atomic writes of whole files: every file llmc reads
// (executables, kernel-cache entries, tool inputs, rendezvous files) and
// every file it writes (llmc-compile -o, Executable save, tool outputs, the
// kernel cache) goes through here.
//
// Reads accept regular files only and never block: the file is opened with
// O_NONBLOCK (a FIFO with no writer does not hang the open), the opened
// descriptor is fstat'ed (not the path, so the check and the read see the
// same file) and its size is checked against a limit before any byte is
// allocated. Writes go to a temporary file in the target's directory that
// is fsync'ed and renamed over the target, and refuse a target that exists
// and is not a regular file (renaming over /dev/null as root would replace
// the device node).
#ifndef LLMC_RUNTIME_FILEIO_H
#define LLMC_RUNTIME_FILEIO_H

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmc::rt {

/// Largest file read whole when the caller knows no tighter bound (an
/// executable, a kernel-cache entry): 4 GiB.
inline constexpr int64_t kMaxReadBytes = int64_t(4) << 30;

struct ReadOptions {
  /// The file may have at most this many bytes.
  int64_t max_bytes = kMaxReadBytes;
  /// >= 0: the file must have exactly this many bytes (e.g. the storage of
  /// an input tensor).
  int64_t exact_bytes = -1;
  /// false: a symbolic link is refused instead of followed (for files llmc
  /// itself owns, such as kernel-cache entries).
  bool follow_symlinks = true;
  /// What the file is, for messages ("llmc executable", "kernel cache
  /// entry"); empty: "file".
  std::string what;
};

/// Reads a whole regular file. Errors name the path: NotFound when it does
/// not exist; FailedPrecondition when it is not a regular file ("'/dev/zero'
/// is a character device, not a regular file; llmc reads regular files
/// only"), or a symbolic link and `follow_symlinks` is false; OutOfRange
/// when its size is above `max_bytes` or not `exact_bytes` (found and
/// expected sizes in the message); PermissionDenied / DataLoss for other
/// open or read failures (with strerror), including a file that changes size
/// while it is read.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const ReadOptions& options = {});

struct WriteOptions {
  /// Create missing parent directories. Only for directories llmc owns (the
  /// kernel cache); a path a user named is never given directories it lacks.
  bool create_parent_dirs = false;
};

/// Checks that `path` can be the target of AtomicWriteFile without writing
/// anything: it is absent, a regular file, or a symbolic link to a regular
/// file (which is then replaced, the link kept), and its directory exists
/// (unless `create_parent_dirs`). Errors: FailedPrecondition for a target
/// that is not a regular file ("'/dev/null' is a character device, not a
/// regular file; llmc writes regular files only"), NotFound naming a missing
/// directory, InvalidArgument for an empty path or one ending in '/'.
absl::Status CheckWritableFile(const std::string& path,
                               const WriteOptions& options = {});

/// Writes `data` to `path` atomically: the checks of CheckWritableFile, then
/// a temporary file in the same directory (name: path + ".tmp.<pid>.<random>",
/// the permissions of the file it replaces), fsync, rename over the target,
/// fsync of the directory. The temporary file is removed on every failure.
absl::Status AtomicWriteFile(const std::string& path, std::string_view data,
                             const WriteOptions& options = {});

/// "a directory", "a character device", "a FIFO", "a socket", "a block
/// device", "a symbolic link", "a regular file" for a stat st_mode.
const char* FileKindName(mode_t mode);

}  // namespace llmc::rt

#endif  // LLMC_RUNTIME_FILEIO_H
