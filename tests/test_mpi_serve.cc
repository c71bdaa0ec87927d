// dsv4 serve --dist mpi under mpiexec on loopback: rank 0 serves HTTP and
// answers like one rank; a rank that hangs turns /health to 503 and ends
// the job with an error; a rank that dies ends the job with an error.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "golden_v41_case.h"
#include "http/http_client.h"
#include "server_process.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using testing::ServerProcess;

const std::vector<std::string> kMpi = {DSV4_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2",
                                       "-x", "DSV4_NUM_THREADS=1"};
const std::vector<std::string> kArgs = {"--kv-cache-memory", "256M", "--max-num-seqs", "16"};

std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> a = kArgs;
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string complete(const ServerProcess& server, const std::string& prompt) {
  HttpClient cli("127.0.0.1", server.port());
  cli.set_read_timeout_ms(60000);
  json body = {{"model", "dsv4-default"}, {"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = cli.post("/v1/completions", body.dump(), "application/json");
  if (!r || r->status != 200) return "<failed>";
  return json::parse(r->body)["choices"][0]["text"];
}

// max_tokens greedy tokens past the prompt, the end of text ignored.
std::string greedy_text(const ServerProcess& server, const std::string& prompt, int max_tokens) {
  HttpClient cli("127.0.0.1", server.port());
  cli.set_read_timeout_ms(60000);
  json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = cli.post("/v1/completions", body.dump(), "application/json");
  return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : "<failed>";
}

int health(const ServerProcess& server) {
  HttpClient cli("127.0.0.1", server.port());
  cli.set_connect_timeout_ms(1000);
  cli.set_read_timeout_ms(1000);
  auto r = cli.get("/health");
  return r ? r->status : 0;  // 0: nobody answers
}

// A rank's pid from the line it logs, waiting up to 10 s for it: the other
// processes' lines reach the log through mpiexec's forwarding, which may
// come after rank 0 already serves.
pid_t pid_of_rank(const ServerProcess& server, int rank) {
  const std::regex re(rank == 0 ? R"(rank 0 of \d+ drives .*, pid (\d+))"
                                 : "rank " + std::to_string(rank) + R"( of \d+ ready .*, pid (\d+))");
  for (int i = 0; i < 100; ++i) {
    std::smatch m;
    const std::string log = server.log();
    if (std::regex_search(log, m, re)) return std::stoi(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

TEST(MpiServe, RankZeroServesLikeOneRank) {
  std::string expected;
  {
    ServerProcess one(kArgs);
    ASSERT_GT(one.port(), 0) << one.log();
    expected = complete(one, "The capital of");
  }
  ASSERT_NE(expected, "<failed>");
  ServerProcess server(with({"--dist", "mpi", "--tp", "2"}), kMpi);
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("topology: 2 ranks: TP2 x DP1, EP2 over processes"), std::string::npos) << server.log();
  EXPECT_EQ(complete(server, "The capital of"), expected);
  EXPECT_EQ(health(server), 200);
  // SIGTERM to rank 0 drains and stops every rank cleanly.
  const pid_t rank0 = pid_of_rank(server, 0);
  ASSERT_GT(rank0, 0) << server.log();
  ASSERT_EQ(kill(rank0, SIGTERM), 0);
  EXPECT_EQ(server.wait_exit(30), 0) << server.log();
}

// Speculative decoding (draft plans cross the processes) and prefix
// caching (per data-parallel group) over MPI answer like one rank.
TEST(MpiServe, SpeculationAndPrefixCachingOverProcesses) {
  const std::string spec = R"({"method":"mtp","num_speculative_tokens":2})";
  auto ask = [](const ServerProcess& server, const std::string& prompt) {
    HttpClient cli("127.0.0.1", server.port());
    cli.set_read_timeout_ms(60000);
    json body = {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
    auto r = cli.post("/v1/completions", body.dump(), "application/json");
    return r && r->status == 200 ? json::parse(r->body) : json();
  };
  std::string prefix;  // 300 tokens (digits and the spaces between them are one token each)
  for (int i = 0; i < 150; ++i) prefix += std::to_string(i % 10) + " ";
  std::vector<json> expected;
  {
    ServerProcess one(with({"--speculative-config", spec}));
    ASSERT_GT(one.port(), 0) << one.log();
    for (const char* tail : {"xyz", "uvw"}) expected.push_back(ask(one, prefix + tail));
  }
  ServerProcess server(with({"--dist", "mpi", "--dp", "2", "--speculative-config", spec}), kMpi);
  ASSERT_GT(server.port(), 0) << server.log();
  const json first = ask(server, prefix + "xyz"), second = ask(server, prefix + "uvw");
  EXPECT_EQ(first["choices"][0]["text"], expected[0]["choices"][0]["text"]);
  EXPECT_EQ(second["choices"][0]["text"], expected[1]["choices"][0]["text"]);
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 256);
  const pid_t rank0 = pid_of_rank(server, 0);
  ASSERT_GT(rank0, 0) << server.log();
  ASSERT_EQ(kill(rank0, SIGTERM), 0);
  EXPECT_EQ(server.wait_exit(30), 0) << server.log();
}

// The DSpark drafter over two processes (TP2: its stages' heads, experts
// and the vocabulary split like the trunk's): greedy text like one rank
// without drafts, and drafts accepted or not, proposed.
TEST(MpiServe, DSparkSpeculationOverProcesses) {
  const std::string model = testing::golden_dir() + "/dspark-tiny";
  const std::string spec = R"({"method":"dspark","num_speculative_tokens":3})";
  auto ask = [](const ServerProcess& server) { return greedy_text(server, "speculation over processes", 24); };
  std::string expected;
  {
    ServerProcess one(with({"--model", model}));
    ASSERT_GT(one.port(), 0) << one.log();
    expected = ask(one);
  }
  ASSERT_NE(expected, "<failed>");
  ServerProcess server(with({"--model", model, "--dist", "mpi", "--tp", "2", "--speculative-config", spec}), kMpi);
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_EQ(ask(server), expected);
  HttpClient cli("127.0.0.1", server.port());
  auto m = cli.get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("dsv4_spec_decode_num_draft_tokens_per_pos{position=\"2\"}"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("dsv4_kv_cache_usage{family=\"dspark_ring\"}"), std::string::npos) << m->body;
  const pid_t rank0 = pid_of_rank(server, 0);
  ASSERT_GT(rank0, 0) << server.log();
  ASSERT_EQ(kill(rank0, SIGTERM), 0);
  EXPECT_EQ(server.wait_exit(30), 0) << server.log();
}

// DeepSeek-V4.1 over four processes (TP2 x DP2, EP4: each data-parallel
// group's two processes split its heads and dense linears, and each process
// holds a quarter of the routed experts, the DSpark stages' too), with
// DSpark drafts: greedy text like one rank without drafts. A request runs on
// one group; the other's processes step through every layer with no rows.
TEST(MpiServe, DeepSeekV41OverProcesses) {
  const std::string model = golden_v41_dir("v41-fp8");
  const std::string spec = R"({"method":"dspark","num_speculative_tokens":3})";
  auto ask = [](const ServerProcess& server) { return greedy_text(server, "experts over processes", 16); };
  const std::vector<std::string> v41 = {"--model", model, "--kv-cache-memory", "64M"};
  std::string expected;
  {
    ServerProcess one(v41);
    ASSERT_GT(one.port(), 0) << one.log();
    expected = ask(one);
  }
  ASSERT_NE(expected, "<failed>");
  std::vector<std::string> args = v41;
  args.insert(args.end(), {"--dist", "mpi", "--tp", "2", "--dp", "2", "--speculative-config", spec});
  std::vector<std::string> four = kMpi;
  *std::find(four.begin(), four.end(), "2") = "4";  // -n 4
  ServerProcess server(args, four);
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("4 ranks: TP2 x DP2, EP4 over processes"), std::string::npos) << server.log();
  EXPECT_EQ(ask(server), expected);
  HttpClient cli("127.0.0.1", server.port());
  auto m = cli.get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("dsv4_spec_decode_num_draft_tokens_per_pos{position=\"2\"}"), std::string::npos) << m->body;
  const pid_t rank0 = pid_of_rank(server, 0);
  ASSERT_GT(rank0, 0) << server.log();
  ASSERT_EQ(kill(rank0, SIGTERM), 0);
  EXPECT_EQ(server.wait_exit(30), 0) << server.log();
}

TEST(MpiServe, AHungRankMakesTheServerUnhealthyAndTheJobFail) {
  ServerProcess server(with({"--dist", "mpi", "--dp", "2", "--dist-timeout-ms", "2000"}), kMpi);
  ASSERT_GT(server.port(), 0) << server.log();
  ASSERT_NE(complete(server, "hello"), "<failed>");
  const pid_t follower = pid_of_rank(server, 1);
  ASSERT_GT(follower, 0) << server.log();
  ASSERT_EQ(kill(follower, SIGSTOP), 0);
  // The idle server's heartbeat gets stuck on the stopped rank.
  bool saw_503 = false;
  for (int i = 0; i < 150 && !saw_503 && server.alive(); ++i) {
    saw_503 = health(server) == 503;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(saw_503) << server.log();
  const int code = server.wait_exit(30);
  kill(follower, SIGKILL);
  EXPECT_NE(code, -2) << "the job must end, not hang";
  EXPECT_NE(code, 0) << server.log();
  EXPECT_NE(server.log().find("a rank stopped answering"), std::string::npos) << server.log();
}

TEST(MpiServe, AKilledRankEndsTheJobWithAnError) {
  ServerProcess server(with({"--dist", "mpi", "--tp", "2"}), kMpi);
  ASSERT_GT(server.port(), 0) << server.log();
  const pid_t follower = pid_of_rank(server, 1);
  ASSERT_GT(follower, 0) << server.log();
  ASSERT_EQ(kill(follower, SIGKILL), 0);
  const int code = server.wait_exit(30);
  EXPECT_NE(code, -2) << "the job must end, not hang";
  EXPECT_NE(code, 0) << server.log();
  EXPECT_NE(health(server), 200);
}

}  // namespace
}  // namespace dsv4
