#include "kernels/dispatch.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/generic/generic_kernels.h"
#include "kernels/registry.h"

namespace dsv4::kernels {
namespace {

// What the CPU and the OS support, from CPUID and XGETBV (the compilers'
// __builtin_cpu_supports do not all know every feature name used here).
struct CpuFeatures {
  bool avx2 = false, bmi2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vbmi = false, avx512bf16 = false, avx512vnni = false;
};

CpuFeatures detect_features() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c >> 27 & 1;
  f.fma = c >> 12 & 1;
  f.f16c = c >> 29 & 1;
  if (!osxsave) return CpuFeatures{};
  unsigned xcr0_lo, xcr0_hi;
  asm volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm = (xcr0_lo & 0x6) == 0x6;     // SSE and AVX state
  const bool zmm = (xcr0_lo & 0xE6) == 0xE6;   // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm) return CpuFeatures{};
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b >> 5 & 1;
    f.bmi2 = b >> 8 & 1;
    f.avx512f = zmm && (b >> 16 & 1);
    f.avx512dq = zmm && (b >> 17 & 1);
    f.avx512bw = zmm && (b >> 30 & 1);
    f.avx512vl = zmm && (b >> 31 & 1);
    f.avx512vbmi = zmm && (c >> 1 & 1);
    f.avx512vnni = zmm && (c >> 11 & 1);
    const unsigned max_sub = a;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = zmm && (a >> 5 & 1);
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect_features();
  return f;
}

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

Kernels generic_exact() {
  Kernels k;
  k.matmul_f32 = &generic::matmul_f32;
  k.matmul_quantized = &generic::matmul_quantized;
  k.matmul_quantized_pairs = &generic::matmul_quantized_pairs;
  k.quantize_rows_int8 = &generic::quantize_rows_int8;
  k.matmul_int8 = &generic::matmul_int8;
  k.silu = &generic::silu;
  k.fp8_round_trip = &fp8_quant_dequant;
  k.fp4_round_trip = &fp4_quant_dequant;
  k.hadamard = &generic::hadamard;
  k.store_kv_row = &generic::store_kv_row;
  k.sink_attention_heads = &generic::sink_attention_heads;
  k.sink_scores = &generic::sink_scores;
  k.sink_weighted_sum = &generic::sink_weighted_sum;
  k.head_dots = &generic::head_dots;
  k.v41_block = &generic::v41_block;
  k.v41_sparse_attention = &generic::v41_sparse_attention;
  return k;
}

// The tables of one ISA: its bodies over the generic ones; fast numerics
// over exact ones (an ISA's exact body beats a generic fast one).
struct IsaTables {
  Kernels exact, fast;
  explicit IsaTables(Isa isa) {
    exact = generic_exact();
    fast = exact;
    if (isa == Isa::kAvx2) avx2::register_kernels(&exact, &fast);
    if (isa == Isa::kAvx512) {
      // AVX-512 CPUs have AVX2: its bodies fill what AVX-512 has none for.
      avx2::register_kernels(&exact, &fast);
      avx512::register_kernels(&exact, &fast);
    }
    exact.isa = fast.isa = isa;
    exact.numerics = Numerics::kExact;
    fast.numerics = Numerics::kFast;
  }
};

}  // namespace

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::kGeneric: return true;
    case Isa::kAvx2: return f.avx2 && f.bmi2 && f.fma && f.f16c;
    // The FP8/FP4 kernels decode with VBMI byte permutes and add with BF16
    // dot products; W8A8 uses VNNI.
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vbmi &&
             f.avx512bf16 && f.avx512vnni;
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

const char* numerics_name(Numerics n) { return n == Numerics::kFast ? "fast" : "exact"; }

bool parse_numerics(const std::string& name, Numerics* out) {
  if (name == "exact") *out = Numerics::kExact;
  else if (name == "fast") *out = Numerics::kFast;
  else return false;
  return true;
}

Numerics numerics_from_env(Numerics fallback) {
  Numerics n = fallback;
  if (const char* env = std::getenv("DSV4_NUMERICS")) parse_numerics(env, &n);
  return n;
}

const Kernels& kernels_for(Isa isa, Numerics numerics) {
  if (!isa_supported(isa)) isa = Isa::kGeneric;
  static const IsaTables generic(Isa::kGeneric);
  const IsaTables* tables = &generic;
  if (isa == Isa::kAvx2) {
    static const IsaTables avx2(Isa::kAvx2);
    tables = &avx2;
  } else if (isa == Isa::kAvx512) {
    static const IsaTables avx512(Isa::kAvx512);
    tables = &avx512;
  }
  return numerics == Numerics::kFast ? tables->fast : tables->exact;
}

const Kernels& kernels_for(Numerics numerics) { return kernels_for(active_isa(), numerics); }

}  // namespace dsv4::kernels
