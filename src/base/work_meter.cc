#include "base/work_meter.h"

#include <time.h>

#include <atomic>

namespace dsv4 {
namespace {

thread_local WorkMeter* t_meter = nullptr;
std::atomic<WorkMeter*> g_process_meter{nullptr};

}  // namespace

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

WorkMeter* WorkMeter::current() { return t_meter ? t_meter : g_process_meter.load(std::memory_order_relaxed); }

WorkMeter::Scope::Scope(WorkMeter* meter) : previous_(t_meter) { t_meter = meter; }

WorkMeter::Scope::~Scope() { t_meter = previous_; }

WorkMeter::ProcessScope::ProcessScope(WorkMeter* meter) : previous_(g_process_meter.exchange(meter)) {}

WorkMeter::ProcessScope::~ProcessScope() { g_process_meter.store(previous_); }

}  // namespace dsv4
