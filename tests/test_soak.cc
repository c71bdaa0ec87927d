// The soak: `dsv4 bench --soak` drives a mixed load (short and long prompts,
// streaming and not, chat, n=2, shared prefixes, abandoned streams) against
// a server that speculates with MTP and caches prefixes, for
// DSV4_SOAK_SECONDS (default 180): zero errors, zero lost requests, page
// accounting back at baseline; and what the mix is there to exercise
// happened: prompt tokens served from the prefix cache, draft tokens
// proposed and accepted, streams abandoned and aborted by the server.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "http/http_client.h"
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
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(prefix cache: (\d+) prompt tokens hit; speculation: (\d+) of (\d+) draft tokens accepted)")))
      << r.output;
  EXPECT_GT(std::stod(m[1]), 0) << "no prefix-cache hit";
  EXPECT_GT(std::stod(m[2]), 0) << "no draft accepted";
  EXPECT_GT(std::stod(m[3]), 0) << "no draft proposed";
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"((\d+) aborted by the client)"))) << r.output;
  EXPECT_GT(std::stod(m[1]), 0) << "no stream abandoned";
  // The server saw some go (a short one may finish before its client leaves).
  HttpClient cli("127.0.0.1", server.port());
  auto metrics = cli.get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  double aborted = 0;
  for (double v : testing::metric(metrics->body, R"(dsv4_requests_total\{[^}]*outcome="abort"\})")) aborted += v;
  EXPECT_GT(aborted, 0) << metrics->body;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace dsv4
