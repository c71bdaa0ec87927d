#include "base/work_meter.h"

namespace dsv4 {
namespace {

thread_local WorkMeter* t_meter = nullptr;

}  // namespace

WorkMeter* WorkMeter::current() { return t_meter; }

WorkMeter::Scope::Scope(WorkMeter* meter) : previous_(t_meter) { t_meter = meter; }

WorkMeter::Scope::~Scope() { t_meter = previous_; }

}  // namespace dsv4
