#include "kernels/isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace dsv4::kernels {
namespace {

Isa detect() {
  if (const char* env = std::getenv("DSV4_ISA")) {
    if (!std::strcmp(env, "generic")) return Isa::kGeneric;
    if (!std::strcmp(env, "avx2") && isa_supported(Isa::kAvx2)) return Isa::kAvx2;
    if (!std::strcmp(env, "avx512") && isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  }
  return isa_supported(Isa::kAvx512) ? Isa::kAvx512 : isa_supported(Isa::kAvx2) ? Isa::kAvx2 : Isa::kGeneric;
}

std::atomic<Isa>& current() {
  static std::atomic<Isa> isa{detect()};
  return isa;
}

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return true;
    case Isa::kAvx2: return __builtin_cpu_supports("avx2");
    // The FP8/FP4 kernels decode with VBMI byte permutes and add with BF16
    // dot products; W8A8 uses VNNI.
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

Isa active_isa() { return current().load(std::memory_order_relaxed); }

void set_isa(Isa isa) { current().store(isa_supported(isa) ? isa : Isa::kGeneric); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kGeneric: break;
  }
  return "generic";
}

}  // namespace dsv4::kernels
