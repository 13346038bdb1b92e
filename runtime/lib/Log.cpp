//===- Log.cpp - where llmc's messages go ----------------------------------===//

#include "llmc/runtime/Log.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace llmc::rt {
namespace {
struct SinkState {
  // Recursive: a callback may log again (a Python logging handler that
  // compiles) on its own thread; other threads wait for it.
  std::recursive_mutex mu;
  LogSink sink = nullptr;
  void *user_data = nullptr;
};

SinkState &State() {
  static SinkState *state = new SinkState(); // never destroyed: logging at exit is safe
  return *state;
}

const char *LevelName(LogLevel level) {
  switch (level) {
  case LogLevel::debug: return "debug";
  case LogLevel::info: return "info";
  case LogLevel::warning: return "warning";
  case LogLevel::error: return "error";
  }
  return "info";
}
} // namespace

void SetLogSink(LogSink sink, void *user_data) {
  SinkState &s = State();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  s.sink = sink;
  s.user_data = user_data;
}

void Log(LogLevel level, std::string_view message) {
  SinkState &s = State();
  std::lock_guard<std::recursive_mutex> lock(s.mu);
  std::string text(message);
  if (s.sink) {
    s.sink(static_cast<int>(level), text.c_str(), s.user_data);
    return;
  }
  std::fprintf(stderr, "llmc: %s: %s\n", LevelName(level), text.c_str());
}

} // namespace llmc::rt
