#include "base/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace dsv4 {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("DSV4_LOG_LEVEL");
  if (!v) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(v, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}

const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO ";
    case LogLevel::kWarn: return "WARN ";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel min_level = level_from_env();
  return level >= min_level;
}

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  static std::mutex mu;
  // Local date and time to the millisecond, as uvicorn and nginx print it.
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t secs = system_clock::to_time_t(now);
  const int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm local{};
  localtime_r(&secs, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s.%03d %s %s\n", stamp, ms, level_tag(level), message.c_str());
}

}  // namespace dsv4
