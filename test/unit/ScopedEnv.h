//===- ScopedEnv.h - set an environment variable for one scope -------------===//
#ifndef LLMC_TEST_UNIT_SCOPEDENV_H
#define LLMC_TEST_UNIT_SCOPEDENV_H

#include <cstdlib>
#include <string>

namespace llmc::test {

/// Sets (or, for a null value, unsets) an environment variable and restores
/// its previous state on scope exit.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  std::string name_, old_;
  bool had_ = false;
};

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_SCOPEDENV_H
