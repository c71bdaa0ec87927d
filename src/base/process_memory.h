// This process's memory as /proc/self/status reports it, in bytes: what
// the loader's summary line and the peak-memory tests read.
#pragma once

#include <cstdint>

namespace dsv4 {

struct ProcessMemory {
  int64_t peak_resident = 0;  // VmHWM: the high-water mark of resident memory
  int64_t resident = 0;       // VmRSS
  int64_t anonymous = 0;      // RssAnon
  int64_t file = 0;           // RssFile (mapped file pages)
};

// Zeros where /proc is not readable.
ProcessMemory process_memory();

// Starts a new high-water mark at the current resident size (writes "5" to
// /proc/self/clear_refs); false where the kernel does not allow it.
bool reset_peak_resident();

}  // namespace dsv4
