// How each ISA's translation units offer their kernels to the dispatch
// table (dispatch.cc calls these only on a CPU that has the ISA, so no
// instruction of it runs anywhere else). Each sets the entries it has, for
// exact and for fast numerics, and leaves the others as they are. They live
// in the ISA's namespace like everything built for it.
#pragma once

#include "kernels/dispatch.h"

namespace dsv4::kernels {

namespace avx2 {
void register_kernels(Kernels* exact, Kernels* fast);
}
namespace avx512 {
void register_kernels(Kernels* exact, Kernels* fast);
}

}  // namespace dsv4::kernels
