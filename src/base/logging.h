// Leveled logging to stderr, a line per message stamped with the local date
// and time (2026-12-02 02:35:24.123 INFO  ...); DSV4_LOG_LEVEL=debug|info|warn|error.
#pragma once

#include <string>

namespace dsv4 {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void log_message(LogLevel level, const std::string& message);
bool log_enabled(LogLevel level);

inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::kWarn, m); }
inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }
inline void log_debug(const std::string& m) { log_message(LogLevel::kDebug, m); }

}  // namespace dsv4
