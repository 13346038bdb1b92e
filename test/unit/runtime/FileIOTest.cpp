// Bounded reads and atomic writes (FileIO.h): special files are refused, not
// read forever, blocked on or replaced; sizes are checked before reading;
// directories are created only when asked.
#include "llmc/runtime/FileIO.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace llmc::rt {
namespace {

namespace fs = std::filesystem;

class FileIOTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("llmc-fileio-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) { return (dir_ / name).string(); }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Names under dir_ holding ".tmp." (leftover temporary files).
  int TempFiles() {
    int n = 0;
    for (auto& e : fs::recursive_directory_iterator(dir_))
      n += e.path().filename().string().find(".tmp.") != std::string::npos;
    return n;
  }
  fs::path dir_;
};

TEST_F(FileIOTest, ReadsARegularFile) {
  Write("a.bin", std::string("x\0y", 3));
  auto data = ReadFile(Path("a.bin"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, std::string("x\0y", 3));
  Write("empty", "");
  EXPECT_EQ(*ReadFile(Path("empty")), "");
}

TEST_F(FileIOTest, MissingFileIsNotFound) {
  ReadOptions ro;
  ro.what = "llmc executable";
  auto data = ReadFile(Path("nope.llmcx"), ro);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(data.status().message(),
            "llmc executable '" + Path("nope.llmcx") + "' does not exist");
}

// Before: /dev/zero was read until memory ran out (std::bad_alloc, abort).
TEST_F(FileIOTest, CharacterDeviceIsRefusedNotReadForever) {
  auto data = ReadFile("/dev/zero");
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(data.status().message(),
            "'/dev/zero' is a character device, not a regular file; llmc "
            "reads regular files only");
}

// Before: opening a FIFO with no writer blocked forever.
TEST_F(FileIOTest, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0644), 0);
  auto t0 = std::chrono::steady_clock::now();
  auto data = ReadFile(Path("fifo"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(data.status().message().find("is a FIFO, not a regular file"),
            std::string::npos)
      << data.status();
}

TEST_F(FileIOTest, DirectoryIsRefused) {
  auto data = ReadFile(dir_.string());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(data.status().message().find("is a directory, not a regular file"),
            std::string::npos)
      << data.status();
}

TEST_F(FileIOTest, SizeIsCheckedBeforeReading) {
  Write("big", std::string(100, 'x'));
  ReadOptions ro;
  ro.max_bytes = 10;
  ro.what = "kernel cache entry";
  auto data = ReadFile(Path("big"), ro);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(data.status().message(),
            "kernel cache entry '" + Path("big") +
                "' has 100 bytes, more than the limit of 10 bytes");
  ReadOptions exact;
  exact.exact_bytes = 64;
  auto wrong = ReadFile(Path("big"), exact);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(wrong.status().message(),
            "'" + Path("big") + "' has 100 bytes, expected exactly 64");
  exact.exact_bytes = 100;
  EXPECT_TRUE(ReadFile(Path("big"), exact).ok());
}

TEST_F(FileIOTest, SymlinksAreFollowedUnlessRefused) {
  Write("target", "abc");
  fs::create_symlink(Path("target"), Path("link"));
  EXPECT_EQ(*ReadFile(Path("link")), "abc");
  ReadOptions ro;
  ro.follow_symlinks = false;
  ro.what = "kernel cache entry";
  auto data = ReadFile(Path("link"), ro);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(data.status().message(),
            "kernel cache entry '" + Path("link") +
                "' is a symbolic link, not a regular file; llmc reads regular "
                "files only");
  // A followed link to a device is refused like the device.
  fs::create_symlink("/dev/zero", Path("zero"));
  EXPECT_EQ(ReadFile(Path("zero")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(FileIOTest, WritesAtomicallyAndReplacesRegularFiles) {
  ASSERT_TRUE(AtomicWriteFile(Path("out"), "one").ok());
  EXPECT_EQ(Slurp(Path("out")), "one");
  ::chmod(Path("out").c_str(), 0600);
  ASSERT_TRUE(AtomicWriteFile(Path("out"), "two").ok());
  EXPECT_EQ(Slurp(Path("out")), "two");
  EXPECT_EQ(fs::status(Path("out")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(TempFiles(), 0);
}

// Before: the temporary file was renamed over the device node, so as root
// the device became a regular file holding the output.
TEST_F(FileIOTest, CharacterDeviceTargetIsRefusedAndLeftAlone) {
  // As root, a private copy of /dev/null (same major/minor), so that a
  // regression cannot break the machine's; otherwise /dev/null itself.
  std::string dev = "/dev/null";
  if (::getuid() == 0) {
    dev = Path("null");
    ASSERT_EQ(::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  }
  absl::Status st = AtomicWriteFile(dev, "data");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "'" + dev +
                              "' is a character device, not a regular file; "
                              "llmc writes regular files only");
  EXPECT_TRUE(fs::is_character_file(dev));
  EXPECT_EQ(CheckWritableFile(dev).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(TempFiles(), 0);
}

TEST_F(FileIOTest, FifoAndDirectoryTargetsAreRefused) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0644), 0);
  absl::Status st = AtomicWriteFile(Path("fifo"), "data");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("is a FIFO, not a regular file; llmc writes "
                              "regular files only"),
            std::string::npos)
      << st;
  EXPECT_TRUE(fs::is_fifo(Path("fifo")));
  fs::create_directory(Path("sub"));
  st = AtomicWriteFile(Path("sub"), "data");
  EXPECT_NE(st.message().find("is a directory, not a regular file"),
            std::string::npos)
      << st;
  EXPECT_TRUE(fs::is_directory(Path("sub")));
  EXPECT_EQ(AtomicWriteFile(Path("sub") + "/", "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AtomicWriteFile("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TempFiles(), 0);
}

// Before: missing parent directories were created silently.
TEST_F(FileIOTest, MissingDirectoryIsNamedAndNotCreated) {
  std::string path = Path("no/such/dir/out.llmcx");
  absl::Status st = AtomicWriteFile(path, "data");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "cannot write '" + path + "': directory '" +
                              Path("no/such/dir") +
                              "' does not exist (llmc does not create "
                              "directories for the files it is asked to write)");
  EXPECT_FALSE(fs::exists(Path("no")));
  EXPECT_EQ(CheckWritableFile(path).code(), absl::StatusCode::kNotFound);
  // A file where a directory is expected.
  Write("file", "x");
  st = AtomicWriteFile(Path("file/out"), "data");
  EXPECT_NE(st.message().find("is a regular file, not a directory"),
            std::string::npos)
      << st;
  // Directories llmc owns (the kernel cache) may be created.
  WriteOptions create;
  create.create_parent_dirs = true;
  EXPECT_TRUE(CheckWritableFile(path, create).ok());
  ASSERT_TRUE(AtomicWriteFile(path, "data", create).ok());
  EXPECT_EQ(Slurp(path), "data");
}

TEST_F(FileIOTest, SymlinkToARegularFileIsWrittenThroughAndKept) {
  Write("real", "old");
  fs::create_symlink(Path("real"), Path("link"));
  ASSERT_TRUE(AtomicWriteFile(Path("link"), "new").ok());
  EXPECT_TRUE(fs::is_symlink(Path("link")));
  EXPECT_EQ(Slurp(Path("real")), "new");
  fs::create_symlink(Path("missing"), Path("dangling"));
  EXPECT_EQ(AtomicWriteFile(Path("dangling"), "x").code(),
            absl::StatusCode::kNotFound);
  fs::create_symlink("/dev/null", Path("devlink"));
  absl::Status st = AtomicWriteFile(Path("devlink"), "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("is a symbolic link to a character device"),
            std::string::npos)
      << st;
  EXPECT_TRUE(fs::is_symlink(Path("devlink")));
  EXPECT_EQ(TempFiles(), 0);
}

}  // namespace
}  // namespace llmc::rt
