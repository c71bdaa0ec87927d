// libFuzzer entry point of one fuzz target: DSV4_FUZZ_CHECK names the
// check (see fuzz_checks.h).
#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dsv4::fuzz::DSV4_FUZZ_CHECK(data, size);
  return 0;
}
