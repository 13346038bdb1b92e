#include "llmc/runtime/KernelCompiler.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "llmc/runtime/FileIO.h"
#include "llmc/runtime/Hash.h"

namespace llmc::rt {
namespace {

namespace fs = std::filesystem;

constexpr char kScale[] = R"(
#include "scale_params.h"
extern "C" __global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= kScaleFactor;
}
)";

KernelSource ScaleKernel(const std::string& factor = "2.0f") {
  KernelSource s;
  s.name = "scale";
  s.source = kScale;
  s.arch = "sm_90";
  s.headers["scale_params.h"] = "constexpr float kScaleFactor = " + factor + ";";
  return s;
}

class KernelCompilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("llmc-kc-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    if (!KernelCompiler::NvrtcVersion().ok()) GTEST_SKIP() << "no NVRTC";
  }
  void TearDown() override { fs::remove_all(dir_); }
  KernelCompilerOptions Options() {
    KernelCompilerOptions o;
    o.cache_dir = dir_.string();
    return o;
  }
  fs::path dir_;
};

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256::HexDigest(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256::HexDigest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256::HexDigest(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256::HexDigest(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_F(KernelCompilerTest, CompilesToSm90Cubin) {
  KernelCompiler kc(Options());
  auto k = kc.Compile(ScaleKernel());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE(k->is_ptx);
  ASSERT_GT(k->binary.size(), 4u);
  EXPECT_EQ(k->binary.substr(0, 4), "\x7f" "ELF");
  EXPECT_EQ(kc.stats().compiles, 1);
  // Second call: memory hit, same bytes.
  auto again = kc.Compile(ScaleKernel());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->binary, k->binary);
  EXPECT_EQ(kc.stats().memory_hits, 1);
  EXPECT_EQ(kc.stats().compiles, 1);
}

TEST_F(KernelCompilerTest, ComputeArchGivesPtx) {
  KernelCompiler kc(Options());
  KernelSource s = ScaleKernel();
  s.arch = "compute_80";
  auto k = kc.Compile(s);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->is_ptx);
  EXPECT_NE(k->binary.find(".entry scale"), std::string::npos);
}

TEST_F(KernelCompilerTest, CudaHeadersAreFound) {
  KernelCompiler kc(Options());
  if (kc.include_dirs().empty()) GTEST_SKIP() << "no CUDA headers on machine";
  KernelSource s;
  s.name = "bf16_copy";
  s.source = R"(#include <cuda_bf16.h>
extern "C" __global__ void bf16_copy(__nv_bfloat16* y, const __nv_bfloat16* x) {
  y[threadIdx.x] = __float2bfloat16(__bfloat162float(x[threadIdx.x]) + 1.f);
})";
  auto k = kc.Compile(s);
  EXPECT_TRUE(k.ok()) << k.status();
}

TEST_F(KernelCompilerTest, CompileErrorCarriesLogWithLine) {
  KernelCompiler kc(Options());
  KernelSource s;
  s.name = "bad";
  s.source = "extern \"C\" __global__ void bad(float* x) {\n"
             "  x[0] = undeclared_thing;\n"
             "}\n";
  auto k = kc.Compile(s);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(k.status().message());
  EXPECT_NE(msg.find("undeclared_thing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.cu(2)"), std::string::npos) << msg;
}

TEST_F(KernelCompilerTest, MissingExternCIsReported) {
  KernelCompiler kc(Options());
  KernelSource s;
  s.name = "mangled";
  s.source = "__global__ void mangled(float* x) { x[0] = 1.f; }\n";
  auto k = kc.Compile(s);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("extern \"C\""), std::string::npos);
}

TEST_F(KernelCompilerTest, DiskCacheHitAfterClearingMemory) {
  std::string binary;
  {
    KernelCompiler kc(Options());
    auto k = kc.Compile(ScaleKernel());
    ASSERT_TRUE(k.ok()) << k.status();
    binary = k->binary;
    EXPECT_TRUE(fs::exists(kc.CachePath(k->key)));
    kc.ClearMemoryCache();
    auto again = kc.Compile(ScaleKernel());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(kc.stats().disk_hits, 1);
    EXPECT_EQ(kc.stats().compiles, 1);
    EXPECT_EQ(again->binary, binary);
  }
  KernelCompiler fresh(Options());  // a new process would see the same
  auto k = fresh.Compile(ScaleKernel());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(fresh.stats().disk_hits, 1);
  EXPECT_EQ(fresh.stats().compiles, 0);
  EXPECT_EQ(k->binary, binary);
}

TEST_F(KernelCompilerTest, DifferentHeadersOrOptionsGiveDifferentKeys) {
  KernelCompiler kc(Options());
  auto a = kc.CacheKey(ScaleKernel("2.0f"));
  auto b = kc.CacheKey(ScaleKernel("3.0f"));
  KernelSource c = ScaleKernel();
  c.options.push_back("-use_fast_math");
  KernelSource d = ScaleKernel();
  d.arch = "sm_80";
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_NE(*a, *kc.CacheKey(c));
  EXPECT_NE(*a, *kc.CacheKey(d));
  EXPECT_EQ(*a, *kc.CacheKey(ScaleKernel("2.0f")));
}

void CorruptAndRecompile(const fs::path& dir,
                         const std::function<void(const std::string&)>& damage) {
  KernelCompilerOptions o;
  o.cache_dir = dir.string();
  KernelCompiler kc(o);
  auto k = kc.Compile(ScaleKernel());
  ASSERT_TRUE(k.ok()) << k.status();
  std::string path = kc.CachePath(k->key);
  damage(path);
  kc.ClearMemoryCache();
  auto again = kc.Compile(ScaleKernel());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->binary, k->binary);
  EXPECT_EQ(kc.stats().corrupt_entries, 1);
  EXPECT_EQ(kc.stats().disk_hits, 0);
  EXPECT_EQ(kc.stats().compiles, 2);
  // The rewritten entry is valid again.
  kc.ClearMemoryCache();
  ASSERT_TRUE(kc.Compile(ScaleKernel()).ok());
  EXPECT_EQ(kc.stats().disk_hits, 1);
}

TEST_F(KernelCompilerTest, FlippedByteIsDetectedAndRecompiled) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    std::streamoff size = f.tellg();
    f.seekp(size - 17);
    char c;
    f.seekg(size - 17);
    f.get(c);
    f.seekp(size - 17);
    f.put(static_cast<char>(c ^ 0x5a));
  });
}

TEST_F(KernelCompilerTest, TruncatedEntryIsDetectedAndRecompiled) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::resize_file(path, fs::file_size(path) / 2);
  });
}

TEST_F(KernelCompilerTest, TruncatedHeaderIsDetectedAndRecompiled) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::resize_file(path, 10);
  });
}

// An entry that is not a regular file is damage too: it is removed (a
// non-empty directory renamed aside), the kernel recompiled and cached, and
// the next process hits the disk cache. Before, a FIFO hung the compile, a
// symbolic link to /dev/zero was read until memory ran out, and a directory
// was never replaced (every run recompiled).
TEST_F(KernelCompilerTest, FifoEntryIsReplacedWithoutBlocking) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  });
}

TEST_F(KernelCompilerTest, SymlinkToDevZeroEntryIsReplaced) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::remove(path);
    fs::create_symlink("/dev/zero", path);
  });
  EXPECT_TRUE(fs::is_character_file("/dev/zero"));
}

TEST_F(KernelCompilerTest, SymlinkToAValidEntryIsNotTrusted) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::rename(path, path + ".elsewhere");
    fs::create_symlink(path + ".elsewhere", path);
  });
}

TEST_F(KernelCompilerTest, EmptyDirectoryEntryIsReplaced) {
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::remove(path);
    fs::create_directory(path);
  });
}

TEST_F(KernelCompilerTest, NonEmptyDirectoryEntryIsMovedAsideAndReplaced) {
  std::string entry;
  CorruptAndRecompile(dir_, [&](const std::string& path) {
    entry = path;
    fs::remove(path);
    fs::create_directories(path + "/inside");
    std::ofstream(path + "/inside/keep") << "not llmc's";
  });
  EXPECT_TRUE(fs::is_regular_file(entry));
  // The directory's contents were not deleted: they sit beside the entry.
  int aside = 0;
  for (auto& e : fs::directory_iterator(fs::path(entry).parent_path()))
    if (e.path().string().find(".damaged.") != std::string::npos) {
      ++aside;
      EXPECT_TRUE(fs::exists(e.path() / "inside/keep")) << e.path();
    }
  EXPECT_EQ(aside, 1);
}

TEST_F(KernelCompilerTest, ShardDirectoryThatIsAFileIsReplaced) {
  // kernels/<2 hex digits>/ replaced by a file: no entry can be read or
  // written below it until it is a directory again.
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::path shard = fs::path(path).parent_path();
    fs::remove_all(shard);
    std::ofstream(shard) << "not a directory";
  });
}

TEST_F(KernelCompilerTest, OversizedEntryIsNotRead) {
  // A sparse file larger than any entry llmc reads (4 GiB): refused by its
  // size, without reading or allocating it.
  CorruptAndRecompile(dir_, [](const std::string& path) {
    fs::resize_file(path, kMaxReadBytes + 1);
  });
}

TEST_F(KernelCompilerTest, ConcurrentProcessesWritingSameKey) {
  // Both processes miss the cache, compile and write the same entry.
  std::vector<pid_t> kids;
  for (int i = 0; i < 2; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      KernelCompiler kc(Options());
      bool ok = true;
      for (int r = 0; r < 3 && ok; ++r) {
        kc.ClearMemoryCache();
        auto k = kc.Compile(ScaleKernel());
        ok = k.ok() && k->binary.substr(0, 4) == "\x7f" "ELF";
      }
      ::_exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  KernelCompiler kc(Options());
  auto k = kc.Compile(ScaleKernel());
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(kc.stats().disk_hits, 1);
  EXPECT_EQ(kc.stats().corrupt_entries, 0);
  // No temp files left behind.
  for (auto& e : fs::recursive_directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(KernelCompilerTest, CompileAllParallelKeepsOrderAndReportsFailures) {
  KernelCompilerOptions o = Options();
  o.max_threads = 2;
  KernelCompiler kc(o);
  std::vector<KernelSource> srcs;
  for (int i = 0; i < 4; ++i) srcs.push_back(ScaleKernel(std::to_string(i) + ".5f"));
  auto all = kc.CompileAll(srcs);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*all)[i].key, *kc.CacheKey(srcs[i]));
  EXPECT_EQ(kc.stats().compiles, 4);

  srcs[2].name = "broken";
  srcs[2].source = "extern \"C\" __global__ void broken() { nope; }";
  auto bad = kc.CompileAll(srcs);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kernel 'broken'"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace llmc::rt
