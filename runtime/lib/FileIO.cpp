#include "llmc/runtime/FileIO.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "llmc/runtime/Status.h"

namespace llmc::rt {
namespace {

std::string Quoted(const std::string& what, const std::string& path) {
  return what.empty() ? absl::StrCat("'", path, "'")
                      : absl::StrCat(what, " '", path, "'");
}

std::string ErrnoText(int err) {
  std::string s = strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(s[0]));
  return s;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status MakeDirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return absl::PermissionDeniedError(absl::StrCat(
            "cannot create directory '", cur, "': ", ErrnoText(errno)));
    }
    if (i < dir.size()) cur.push_back(dir[i]);
  }
  return absl::OkStatus();
}

absl::Status NotRegular(const std::string& what, const std::string& path,
                        mode_t mode, const char* verb) {
  return absl::FailedPreconditionError(
      absl::StrCat(Quoted(what, path), " is ", FileKindName(mode),
                   ", not a regular file; llmc ", verb, " regular files only"));
}

// The file AtomicWriteFile replaces: `path` itself, or the regular file a
// symbolic link at `path` points to (so the link survives the rename).
absl::StatusOr<std::string> WriteTarget(const std::string& path,
                                        const WriteOptions& options) {
  if (path.empty())
    return absl::InvalidArgumentError("cannot write a file with an empty path");
  if (path.back() == '/')
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write '", path, "': the path ends in '/' (a directory)"));
  std::string target = path;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      struct stat to;
      if (::stat(path.c_str(), &to) != 0)
        return absl::NotFoundError(absl::StrCat(
            "cannot write '", path, "': it is a symbolic link to a missing file (",
            ErrnoText(errno), ")"));
      if (!S_ISREG(to.st_mode))
        return absl::FailedPreconditionError(absl::StrCat(
            "'", path, "' is a symbolic link to ", FileKindName(to.st_mode),
            ", not to a regular file; llmc writes regular files only"));
      char resolved[PATH_MAX];
      if (::realpath(path.c_str(), resolved) == nullptr)
        return absl::PermissionDeniedError(absl::StrCat(
            "cannot resolve the symbolic link '", path, "': ", ErrnoText(errno)));
      target = resolved;
    } else if (!S_ISREG(st.st_mode)) {
      return NotRegular("", path, st.st_mode, "writes");
    }
  } else if (errno != ENOENT && errno != ENOTDIR) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write '", path, "': ", ErrnoText(errno)));
  }
  std::string dir = DirName(target);
  struct stat ds;
  if (::stat(dir.c_str(), &ds) != 0) {
    int err = errno;
    if (err == ENOENT && options.create_parent_dirs) {
      LLMC_RT_RETURN_IF_ERROR(MakeDirs(dir));
      return target;
    }
    if (err == ENOENT)
      return absl::NotFoundError(absl::StrCat(
          "cannot write '", path, "': directory '", dir,
          "' does not exist (llmc does not create directories for the files "
          "it is asked to write)"));
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write '", path, "': directory '", dir, "': ", ErrnoText(err)));
  }
  if (!S_ISDIR(ds.st_mode))
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write '", path, "': '", dir, "' is ", FileKindName(ds.st_mode),
        ", not a directory"));
  return target;
}

}  // namespace

const char* FileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const ReadOptions& options) {
  const std::string& what = options.what;
  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  if (!options.follow_symlinks) flags |= O_NOFOLLOW;
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    struct stat ls;
    if (err == ENOENT)
      return absl::NotFoundError(
          absl::StrCat(what.empty() ? "file" : what, " '", path, "' does not exist"));
    if (err == ELOOP && !options.follow_symlinks &&
        ::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode))
      return NotRegular(what, path, ls.st_mode, "reads");
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot open ", Quoted(what, path), ": ", ErrnoText(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot stat ", Quoted(what, path), ": ", ErrnoText(errno)));
  if (!S_ISREG(st.st_mode)) return NotRegular(what, path, st.st_mode, "reads");
  const int64_t size = st.st_size;
  if (options.exact_bytes >= 0 && size != options.exact_bytes)
    return absl::OutOfRangeError(absl::StrCat(Quoted(what, path), " has ", size,
                                              " bytes, expected exactly ",
                                              options.exact_bytes));
  if (size > options.max_bytes)
    return absl::OutOfRangeError(absl::StrCat(
        Quoted(what, path), " has ", size, " bytes, more than the limit of ",
        options.max_bytes, " bytes"));
  std::string data(static_cast<size_t>(size), '\0');
  // One byte past the size fstat reported: a file that grew is noticed.
  size_t done = 0;
  char extra;
  while (true) {
    char* dst = done < data.size() ? &data[done] : &extra;
    size_t want = done < data.size() ? data.size() - done : 1;
    ssize_t n = ::read(fd, dst, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return absl::DataLossError(absl::StrCat(
          "cannot read ", Quoted(what, path), ": ", ErrnoText(errno)));
    if (n == 0) break;
    if (done >= data.size())
      return absl::DataLossError(absl::StrCat(
          Quoted(what, path), " grew while it was read (it had ", size,
          " bytes when opened)"));
    done += static_cast<size_t>(n);
  }
  if (done != data.size())
    return absl::DataLossError(absl::StrCat(
        Quoted(what, path), " shrank while it was read (", size,
        " bytes when opened, ", done, " read)"));
  return data;
}

absl::Status CheckWritableFile(const std::string& path,
                               const WriteOptions& options) {
  WriteOptions no_create = options;
  no_create.create_parent_dirs = false;
  absl::StatusOr<std::string> target = WriteTarget(path, no_create);
  // A directory that would be created is no error here.
  if (!target.ok() && options.create_parent_dirs &&
      absl::IsNotFound(target.status()))
    return absl::OkStatus();
  return target.status();
}

absl::Status AtomicWriteFile(const std::string& path, std::string_view data,
                             const WriteOptions& options) {
  LLMC_RT_ASSIGN_OR_RETURN(std::string target, WriteTarget(path, options));
  struct stat old;
  const bool replaces = ::stat(target.c_str(), &old) == 0;
  std::random_device rd;
  std::string tmp = absl::StrCat(target, ".tmp.", ::getpid(), ".", rd(), rd());
  int fd = ::open(tmp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot write '", path, "': cannot create '", tmp, "': ",
        ErrnoText(errno)));
  auto fail = [&](const std::string& msg) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat("cannot write '", path, "': ", msg));
  };
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return fail(absl::StrCat("write to '", tmp, "' failed: ",
                               ErrnoText(n < 0 ? errno : EIO)));
    done += static_cast<size_t>(n);
  }
  // A replaced file keeps its permissions; a new one gets 0644 less the umask.
  if (replaces && ::fchmod(fd, old.st_mode & 07777) != 0)
    return fail(absl::StrCat("chmod of '", tmp, "' failed: ", ErrnoText(errno)));
  if (::fsync(fd) != 0)
    return fail(absl::StrCat("fsync of '", tmp, "' failed: ", ErrnoText(errno)));
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0)
    return fail(absl::StrCat("close of '", tmp, "' failed: ", ErrnoText(errno)));
  // Checked again just before the rename: the target may have been replaced
  // by something that is not a regular file since the first check.
  struct stat now;
  if (::lstat(target.c_str(), &now) == 0 && !S_ISREG(now.st_mode)) {
    ::unlink(tmp.c_str());
    return NotRegular("", target, now.st_mode, "writes");
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0)
    return fail(absl::StrCat("rename of '", tmp, "' failed: ", ErrnoText(errno)));
  // Best effort: make the rename itself durable.
  int dfd = ::open(DirName(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace llmc::rt
