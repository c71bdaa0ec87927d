// Which instruction set the kernels use: the best this CPU has, chosen once
// at start-up; DSV4_ISA=generic|avx2|avx512 overrides it (tests run every
// path against the generic kernels). AVX-512 here means the Zen 4 / Sapphire
// Rapids set: F, BW, VBMI, VNNI and BF16. On AVX2 the GEMMs are vectorized
// and the attention, Hadamard and rounding kernels run generic.
#pragma once

namespace dsv4::kernels {

enum class Isa { kGeneric, kAvx2, kAvx512 };

Isa active_isa();
const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// For tests: runs the kernels on `isa` from now on (must be supported).
void set_isa(Isa isa);

// Calls the body for the active ISA (bodies share one signature).
template <class Fn, class... Args>
inline void by_isa(Fn* avx512, Fn* avx2, Fn* generic, Args&&... args) {
  switch (active_isa()) {
    case Isa::kAvx512: return avx512(static_cast<Args&&>(args)...);
    case Isa::kAvx2: return avx2(static_cast<Args&&>(args)...);
    case Isa::kGeneric: break;
  }
  generic(static_cast<Args&&>(args)...);
}

}  // namespace dsv4::kernels
