// The soak: `dsv4 bench --soak` drives a mixed load (short and long prompts,
// streaming and not, chat, n=2, shared prefixes, abandoned streams) against
// a server that speculates with MTP and caches prefixes, for
// DSV4_SOAK_SECONDS (default 180): zero errors, zero lost requests, page
// accounting back at baseline.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "server_process.h"
#include "test_util.h"

namespace dsv4 {
namespace {

TEST(Soak, MixedLoadLosesNothingAndReturnsEveryPage) {
  const char* env = std::getenv("DSV4_SOAK_SECONDS");
  const std::string seconds = env ? env : "180";
  testing::ServerProcess server({"--kv-cache-memory", "512M", "--max-num-seqs", "16", "--speculative-config",
                                 R"({"method":"mtp","num_speculative_tokens":2})"});
  ASSERT_GT(server.port(), 0) << server.log();
  const auto r = testing::run_dsv4("bench --soak --port " + std::to_string(server.port()) + " --duration " + seconds +
                                   " --clients 12");
  std::printf("%s", r.output.c_str());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("errors: 0, lost requests: 0"), std::string::npos);
  EXPECT_NE(r.output.find("page accounting: at baseline"), std::string::npos);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace dsv4
