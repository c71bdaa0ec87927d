#include "base/process_memory.h"

#include <cstdio>
#include <cstring>

namespace dsv4 {

ProcessMemory process_memory() {
  ProcessMemory m;
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long long kib = 0;
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) m.peak_resident = kib * 1024;
    else if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) m.resident = kib * 1024;
    else if (std::sscanf(line, "RssAnon: %lld kB", &kib) == 1) m.anonymous = kib * 1024;
    else if (std::sscanf(line, "RssFile: %lld kB", &kib) == 1) m.file = kib * 1024;
  }
  std::fclose(f);
  return m;
}

bool reset_peak_resident() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace dsv4
