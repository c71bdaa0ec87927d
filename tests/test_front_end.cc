// dsv4 serve's front end end to end: a client that leaves a non-streaming
// request aborts it; idle and slowloris connections by the thousand leave
// /health and completions answering; log lines carry dates and an access
// line per request; the chat page at / works in a real browser.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <vector>

#include "http/http_client.h"
#include "raw_socket.h"
#include "server_process.h"
#include "temp_dir.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using testing::metric;
using testing::RawSocket;
using testing::ServerProcess;
using testing::settles;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kBase = {"--kv-cache-memory", "256M", "--max-num-seqs", "16"};

double metric_value(HttpClient& cli, const std::string& name) {
  auto r = cli.get("/metrics");
  if (!r) return -1;
  const auto v = metric(r->body, name);
  return v.empty() ? 0 : v[0];
}

// A non-streaming request writes nothing until it is done: its client
// leaving is seen on the socket itself, and the request is aborted.
TEST(FrontEnd, AClientLeavingANonStreamingRequestAbortsIt) {
  ServerProcess server(kBase);
  ASSERT_GT(server.port(), 0) << server.log();
  HttpClient cli("127.0.0.1", server.port());
  for (bool reset : {false, true}) {
    const double aborts = metric_value(cli, R"(dsv4_requests_total\{endpoint="completions",outcome="abort"\})");
    RawSocket s(server.port());
    const std::string body = R"({"prompt": "long", "max_tokens": 3900, "ignore_eos": true, "n": 4})";
    s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
    double running = 0;
    for (int i = 0; i < 2000 && running < 4; ++i) {
      running = metric_value(cli, "dsv4_num_requests_running");
      if (running < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(running, 4) << "the request never ran";
    const auto left = Clock::now();
    if (reset) s.reset();
    else s.close();
    EXPECT_TRUE(settles(cli)) << "the aborted request still holds pages";
    if (testing::kTimed) {
      EXPECT_LT(Clock::now() - left, std::chrono::seconds(3));
    }
    EXPECT_EQ(metric_value(cli, R"(dsv4_requests_total\{endpoint="completions",outcome="abort"\})"), aborts + 4)
        << (reset ? "reset" : "closed");
  }
  EXPECT_EQ(metric_value(cli, "dsv4_http_clients_gone_total"), 2);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// 1,000 connections that send nothing and 200 that send a header byte
// every half second: /health and one-token completions from new clients
// keep answering at once (dsv4 bench --front-end measures this at 10,000
// and 2,000). The slowloris ones are closed at the head deadline.
TEST(FrontEnd, IdleAndSlowlorisConnectionsLeaveTheServerAnswering) {
  ServerProcess server({"--kv-cache-memory", "256M", "--http-head-timeout-ms", "3000"});
  ASSERT_GT(server.port(), 0) << server.log();
  std::vector<RawSocket> idle, loris;
  for (int i = 0; i < 1000; ++i) idle.emplace_back(server.port());
  for (int i = 0; i < 200; ++i) {
    loris.emplace_back(server.port());
    loris.back().send("P");
  }
  HttpClient cli("127.0.0.1", server.port());
  const std::string head = "OST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  std::vector<double> health_ms, complete_ms;
  for (int round = 0; round < 10; ++round) {
    for (RawSocket& s : loris) s.send(std::string(1, head[std::min<size_t>(round + 1, head.size() - 1)]));
    auto t0 = Clock::now();
    HttpClient fresh("127.0.0.1", server.port());
    auto h = fresh.get("/health");
    ASSERT_TRUE(h) << fresh.error();
    EXPECT_EQ(h->status, 200);
    health_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    t0 = Clock::now();
    HttpClient other("127.0.0.1", server.port());
    auto c = other.post("/v1/completions", R"({"prompt": "hi", "max_tokens": 1})");
    ASSERT_TRUE(c) << other.error() << "\n" << server.log().substr(server.log().size() > 6000 ? server.log().size() - 6000 : 0);
    EXPECT_EQ(c->status, 200) << c->body;
    complete_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::sort(health_ms.begin(), health_ms.end());
  std::sort(complete_ms.begin(), complete_ms.end());
  std::printf("  with 1000 idle + 200 slowloris connections: /health max %.1f ms, completion max %.1f ms\n",
              health_ms.back(), complete_ms.back());
  if (testing::kTimed) {
    EXPECT_LT(health_ms.back(), 1000);
    EXPECT_LT(complete_ms.back(), 2000);
  }
  EXPECT_GE(metric_value(cli, "dsv4_http_connections_open"), 1000) << "the idle ones are held open";
  // The slowloris connections took more than the head deadline: closed.
  int closed = 0;
  for (RawSocket& s : loris) closed += s.closed_within(2000);
  EXPECT_EQ(closed, 200);
  EXPECT_GE(metric_value(cli, R"(dsv4_http_connections_closed_total\{reason="head_timeout"\})"), 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// A stream whose reader stops: once its bytes wait (the kernel's buffers
// full) its generation is held, taking no steps while others run; a reader
// that catches up gets the rest, every token; one that stays behind is cut
// off at the write timeout, its request aborted and its pages freed.
TEST(FrontEnd, AStalledStreamIsHeldThenCutAndAReaderThatCatchesUpGetsEverything) {
  ServerProcess server({"--kv-cache-memory", "256M", "--http-write-timeout-ms", "3000"});
  ASSERT_GT(server.port(), 0) << server.log();
  HttpClient cli("127.0.0.1", server.port());
  const std::string body = R"({"prompt": "go", "max_tokens": 3800, "ignore_eos": true, "stream": true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  auto wait_for = [&](const std::string& name, double value, int seconds = 5) {
    for (const auto until = Clock::now() + std::chrono::seconds(seconds); Clock::now() < until;) {
      if (metric_value(cli, name) == value) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  // Stops reading, then catches up: every token arrives.
  {
    RawSocket slow(server.port(), 4096);
    slow.send(request);
    ASSERT_TRUE(wait_for("dsv4_num_requests_held", 1)) << "the stream was never held";
    const double steps = metric_value(cli, "dsv4_engine_steps_total");
    auto other = cli.post("/v1/completions", R"({"prompt": "meanwhile", "max_tokens": 20, "ignore_eos": true})");
    ASSERT_TRUE(other && other->status == 200);
    EXPECT_EQ(json::parse(other->body)["usage"]["completion_tokens"], 20) << "others run while it is held";
    EXPECT_GE(metric_value(cli, "dsv4_engine_steps_total"), steps + 20);
    EXPECT_EQ(metric_value(cli, "dsv4_num_requests_held"), 1);
    const std::string all = slow.read_until("data: [DONE]", 30000);
    size_t events = 0;
    for (size_t at = all.find("\"text\":"); at != std::string::npos; at = all.find("\"text\":", at + 1)) ++events;
    EXPECT_NE(all.find("\"finish_reason\":\"length\""), std::string::npos);
    EXPECT_NE(all.find("data: [DONE]"), std::string::npos) << "the stream ends normally";
    EXPECT_GE(events, 3800u / 4) << "the tokens came (a step may bring several)";
    EXPECT_TRUE(wait_for("dsv4_num_requests_held", 0));
  }
  // Stops for good: cut at the write timeout, aborted, pages back.
  // The cut comes no sooner than the write timeout after the request was
  // sent (its writes start later): a bound no slowness of this test's
  // polling can break, unlike one from when the test saw it held.
  RawSocket stalled(server.port(), 4096);
  const auto sent = Clock::now();
  stalled.send(request);
  ASSERT_TRUE(wait_for("dsv4_num_requests_held", 1));
  ASSERT_TRUE(wait_for("dsv4_http_slow_readers_cut_total", 1, 10));
  EXPECT_GE(Clock::now() - sent, std::chrono::milliseconds(3000)) << "cut only at the write timeout";
  EXPECT_TRUE(settles(cli)) << "the cut request's pages came back";
  EXPECT_EQ(metric_value(cli, "dsv4_num_requests_held"), 0);
  EXPECT_EQ(metric_value(cli, R"(dsv4_requests_total\{endpoint="completions",outcome="abort"\})"), 1);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// Log lines start with a date and a time; every request has an access line
// (client, method, target, status, duration, bytes, tokens).
TEST(FrontEnd, LogLinesAreDatedAndEveryRequestHasAnAccessLine) {
  ServerProcess server(kBase);
  ASSERT_GT(server.port(), 0) << server.log();
  HttpClient cli("127.0.0.1", server.port());
  // ignore_eos: the sampled reply may end at EOS before its 3 tokens.
  auto r = cli.post("/v1/completions", R"({"prompt": "hello", "max_tokens": 3, "ignore_eos": true})");
  ASSERT_TRUE(r && r->status == 200);
  auto bad = cli.post("/v1/chat/completions", R"({"messages": 5})");
  ASSERT_TRUE(bad && bad->status == 400);
  auto missing = cli.get("/nope");
  ASSERT_TRUE(missing && missing->status == 404);
  EXPECT_EQ(server.stop(), 0) << server.log();
  const std::string log = server.log();
  const std::string stamp = R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} )";
  std::istringstream lines(log);
  int undated = 0;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != ' ' && !std::regex_search(line, std::regex("^" + stamp))) ++undated;
  EXPECT_EQ(undated, 0) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(stamp + R"(INFO  127\.0\.0\.1:\d+ "POST /v1/completions HTTP/1\.1" 200 )"
                                                        R"(\d+\.\d{3}s \d+B cmpl-\w+, tokens \d+ prompt \+ 3 generated)")))
      << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"("POST /v1/chat/completions HTTP/1\.1" 400 )"))) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"("GET /nope HTTP/1\.1" 404 )"))) << log;
}

// The chat page in headless chromium (tests/js/chat_page.mjs): loads
// without console errors on a server that wants an API key, streams a
// reply, folds thinking, and Stop aborts the request on the server. The
// model: one layer of DeepSeek-V4-Flash's real shape (about 100 tokens/s
// here), so a reply runs long enough to be stopped. The screenshot lands in
// the build's test-artifacts/.
TEST(FrontEnd, ChatPageInAHeadlessBrowser) {
  testing::TempDir dir("dsv4_chat_page");
  const std::string model = dir.file("flash1");
  const std::string mk = std::string(DSV4_BINARY) + " mkmodel --out " + model +
                         " --preset flash --layers 1 --experts 8 --vocab 1024 --seed 3 > /dev/null";
  ASSERT_EQ(std::system(mk.c_str()), 0);
  ServerProcess server({"--model", model, "--kv-cache-memory", "256M", "--api-key", "page-key"});
  ASSERT_GT(server.port(), 0) << server.log();
  std::filesystem::create_directories(DSV4_ARTIFACT_DIR);
  const std::string shot = std::string(DSV4_ARTIFACT_DIR) + "/chat_page.png";
  std::filesystem::remove(shot);
  EXPECT_EQ(testing::node("chat_page.mjs", server.url() + " " + shot + " page-key"), 0) << server.log();
  EXPECT_TRUE(std::filesystem::exists(shot) && std::filesystem::file_size(shot) > 10000);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace dsv4
