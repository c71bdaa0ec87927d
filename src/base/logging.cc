#include "base/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarn: return "W";
    case LogLevel::kError: return "E";
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
  using namespace std::chrono;
  double t = duration<double>(system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[%s %.3f] %s\n", level_tag(level), t, message.c_str());
}

}  // namespace dsv4
