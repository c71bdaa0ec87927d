#include "base/work_meter.h"

#include <time.h>

namespace dsv4 {
namespace {

thread_local WorkMeter* t_meter = nullptr;

}  // namespace

double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

WorkMeter* WorkMeter::current() { return t_meter; }

WorkMeter::Scope::Scope(WorkMeter* meter) : previous_(t_meter) { t_meter = meter; }

WorkMeter::Scope::~Scope() { t_meter = previous_; }

}  // namespace dsv4
