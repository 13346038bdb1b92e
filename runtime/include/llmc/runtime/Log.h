//===- Log.h - where llmc's messages go ------------------------*- C++ -*-===//
//
// llmc reports what it decided on its own (a session that turned CUDA graphs
// off, compiler warnings of a successful compile) through one sink: stderr
// ("llmc: <level>: <message>") unless a host installs its own, as the Python
// package does to route them to `logging.getLogger("llmc")` (C API:
// llmc_set_log_callback). Errors are not logged: they are returned as
// statuses.
//
//===----------------------------------------------------------------------===//
#ifndef LLMC_RUNTIME_LOG_H
#define LLMC_RUNTIME_LOG_H

#include <string_view>

namespace llmc::rt {

/// Severity of a message; the values are the C API's LLMC_LOG_* levels.
enum class LogLevel : int { debug = 0, info = 1, warning = 2, error = 3 };

/// A host's receiver of messages: `message` is NUL-terminated and valid only
/// during the call. Called from whichever thread logs, one call at a time;
/// it may call into llmc again on its thread (a message it causes is
/// delivered to it, nested), but must not wait for another thread that logs.
using LogSink = void (*)(int level, const char *message, void *user_data);

/// Routes every later message to `sink` with `user_data`; nullptr restores
/// stderr. Thread-safe; a message being delivered finishes first.
void SetLogSink(LogSink sink, void *user_data);

/// Delivers one message to the sink (or stderr).
void Log(LogLevel level, std::string_view message);

} // namespace llmc::rt

#endif // LLMC_RUNTIME_LOG_H
