// The HTTP front end without the engine: the request reader's syntax and
// limits, and a live listener with test handlers: pipelined requests in
// order, keep-alive, the deadlines that close slow and idle clients, the
// connection cap (with /health still answered), disconnects seen while a
// response is pending, and streams whose reader falls behind.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "http/http_client.h"
#include "http/http_listener.h"
#include "http/request_reader.h"
#include "raw_socket.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::RawSocket;
using namespace std::chrono_literals;

std::vector<HttpRequest> read_all(RequestReader& r, RequestReader::Result* last) {
  std::vector<HttpRequest> out;
  for (;;) {
    HttpRequest q;
    *last = r.parse(&q);
    if (*last != RequestReader::Result::kRequest) return out;
    out.push_back(std::move(q));
  }
}

TEST(HttpRequestReader, PipelinedChunkedAndByteByByte) {
  const std::string wire =
      "GET /health?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nX-Api-Key: k\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
      "POST /v1/x HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc";
  for (size_t step : {wire.size(), size_t{1}, size_t{7}}) {
    RequestReader reader{RequestLimits{}};
    std::vector<HttpRequest> got;
    RequestReader::Result last = RequestReader::Result::kNeedMore;
    for (size_t at = 0; at < wire.size(); at += step) {
      reader.append(wire.substr(at, step));
      auto more = read_all(reader, &last);
      got.insert(got.end(), more.begin(), more.end());
      ASSERT_NE(last, RequestReader::Result::kError) << reader.error_message();
    }
    ASSERT_EQ(got.size(), 3u) << "step " << step;
    EXPECT_EQ(got[0].method, "GET");
    EXPECT_EQ(got[0].path, "/health");
    EXPECT_EQ(got[0].query, "x=1");
    EXPECT_EQ(got[1].body, "hello world");
    EXPECT_EQ(got[1].header("x-api-key"), "k");
    EXPECT_TRUE(got[1].keep_alive);
    EXPECT_EQ(got[2].version, 10);
    EXPECT_FALSE(got[2].keep_alive);
    EXPECT_EQ(got[2].body, "abc");
    EXPECT_FALSE(reader.started());
  }
}

TEST(HttpRequestReader, AbsoluteTargetsAreReadAsTheirPath) {
  RequestReader reader{RequestLimits{}};
  reader.append("GET http://example.com:8000/v1/models?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"
                "GET HTTPS://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n"
                "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n");
  HttpRequest a, b, c;
  ASSERT_EQ(reader.parse(&a), RequestReader::Result::kRequest);
  EXPECT_EQ(a.path, "/v1/models");
  EXPECT_EQ(a.query, "x=1");
  ASSERT_EQ(reader.parse(&b), RequestReader::Result::kRequest);
  EXPECT_EQ(b.path, "/");
  ASSERT_EQ(reader.parse(&c), RequestReader::Result::kRequest);
  EXPECT_EQ(c.path, "*");
}

TEST(HttpRequestReader, LimitsAndMalformedInputAreNamed) {
  RequestLimits limits;
  limits.max_head_bytes = 1024;
  limits.max_body_bytes = 100;
  struct Case {
    std::string wire;
    int status;
  };
  const std::vector<Case> cases = {
      {"GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nX: " + std::string(2000, 'a'), 431},  // a head that never ends is cut too
      {"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413},  // refused before the body comes
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n80\r\n" + std::string(128, 'b') + "\r\n0\r\n\r\n", 413},
      {"GARBAGE\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400},
      {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},  // HTTP/2 with prior knowledge
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/3.1\r\nHost: x\r\n\r\n", 505},
      {"POST ?v1/responses HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", 400},  // found by fuzz_http
      {"GET v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    RequestReader reader(limits);
    reader.append(c.wire);
    HttpRequest q;
    ASSERT_EQ(reader.parse(&q), RequestReader::Result::kError) << c.wire.substr(0, 60);
    EXPECT_EQ(reader.error_status(), c.status) << c.wire.substr(0, 60) << ": " << reader.error_message();
    EXPECT_FALSE(reader.error_message().empty());
  }
}

// A listener on a free port with a test handler, served on its own thread.
class TestServer {
 public:
  TestServer(HttpListenerOptions o, HttpListener::Handler handler) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.access_log = false;
    listener_ = std::make_unique<HttpListener>(o, std::move(handler), [](int status, const std::string& m, const std::string&) {
      HttpResponse r;
      r.status = status;
      r.body = "{\"error\": \"" + m + "\"}";
      return r;
    });
    const Status st = listener_->bind();
    EXPECT_TRUE(st.ok()) << st.message();
    thread_ = std::thread([this] { listener_->serve(); });
  }
  ~TestServer() {
    listener_->stop(500);
    thread_.join();
  }
  int port() const { return listener_->port(); }
  HttpStats stats() const { return listener_->stats(); }

 private:
  std::unique_ptr<HttpListener> listener_;
  std::thread thread_;
};

HttpResponse text(std::string body) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = std::move(body);
  return r;
}

// Answers every path with its own name; /slow after 200 ms from another
// thread (posted back), so later pipelined requests are ready first.
void echo_path(std::shared_ptr<HttpExchange> ex) {
  if (ex->request().path == "/slow") {
    std::thread([ex] {
      std::this_thread::sleep_for(200ms);
      ex->post([ex] { ex->respond(text("slow")); });
    }).detach();
    return;
  }
  ex->respond(text(ex->request().path.substr(1)));
}

TEST(HttpListener, PipelinedRequestsAreAnsweredInOrderAndKeptAlive) {
  TestServer server({}, echo_path);
  RawSocket s(server.port());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string got = s.read_until("\r\n\r\nb", 5000);
  const size_t slow = got.find("\r\n\r\nslow"), a = got.find("\r\n\r\na"), b = got.find("\r\n\r\nb");
  ASSERT_NE(slow, std::string::npos) << got;
  ASSERT_NE(a, std::string::npos) << got;
  ASSERT_NE(b, std::string::npos) << got;
  EXPECT_LT(slow, a);
  EXPECT_LT(a, b);
  // The connection stays open for the next request.
  ASSERT_TRUE(s.send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(s.read_until("\r\n\r\nc", 2000).find("200 OK"), std::string::npos);
  // HEAD: the head a GET gets, no body. HTTP/1.0: closed after the answer.
  ASSERT_TRUE(s.send("HEAD /abc HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string head = s.read_until("\r\n\r\n", 2000);
  EXPECT_NE(head.find("Content-Length: 3"), std::string::npos) << head;
  ASSERT_TRUE(s.send("GET /old HTTP/1.0\r\n\r\n"));
  const std::string old = s.read_until("old", 2000);
  EXPECT_NE(old.find("Connection: close"), std::string::npos) << old;
  EXPECT_EQ(old.find("abc"), std::string::npos) << "HEAD sent a body";
  EXPECT_TRUE(s.closed_within(3000));
}

TEST(HttpListener, DeadlinesCloseIdleAndSlowClients) {
  HttpListenerOptions o;
  o.idle_timeout_ms = 600;
  o.head_timeout_ms = 600;
  o.body_timeout_ms = 600;
  o.min_body_bytes_per_second = 100;
  TestServer server(o, echo_path);
  // Idle: a connection that never sends is closed.
  RawSocket idle(server.port());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(idle.closed_within(3000));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 500ms);
  // Kept alive after a response, then idle: closed too.
  RawSocket kept(server.port());
  ASSERT_TRUE(kept.send("GET /k HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(kept.read_until("\r\n\r\nk", 2000).find("200 OK"), std::string::npos);
  EXPECT_TRUE(kept.closed_within(3000));
  // Slowloris: a head byte every 100 ms never completes in time: 408, closed.
  RawSocket loris(server.port());
  const std::string head = "GET /slowly HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(100, 'p') + "\r\n\r\n";
  std::string answer;
  for (size_t i = 0; i < head.size() && answer.empty(); ++i) {
    loris.send(head.substr(i, 1));
    answer = loris.read_until("408", 100);
  }
  EXPECT_NE(answer.find("408"), std::string::npos) << answer;
  EXPECT_TRUE(loris.closed_within(2000));
  // A body slower than its minimum rate: 408.
  RawSocket trickle(server.port());
  trickle.send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
  answer.clear();
  for (int i = 0; i < 40 && answer.empty(); ++i) {
    trickle.send("x");
    answer = trickle.read_until("408", 100);
  }
  EXPECT_NE(answer.find("408"), std::string::npos);
  // A body at its rate is waited for.
  RawSocket steady(server.port());
  steady.send("POST /steady HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n");
  for (int i = 0; i < 10; ++i) {
    steady.send(std::string(30, 'y'));
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(steady.read_until("steady", 2000).find("200 OK"), std::string::npos);
  const HttpStats st = server.stats();
  EXPECT_GE(st.idle_closed, 2);
  EXPECT_EQ(st.head_timeouts, 1);
  EXPECT_EQ(st.body_timeouts, 1);
}

TEST(HttpListener, PastTheConnectionCapOnlyHealthIsAnsweredAndOthersAreRefusedFast) {
  HttpListenerOptions o;
  o.max_connections = 20;
  o.overflow_connections = 4;
  TestServer server(o, echo_path);
  std::vector<RawSocket> held;
  for (int i = 0; i < 20; ++i) held.emplace_back(server.port());
  // The cap is counted as connections are accepted.
  for (int i = 0; i < 100 && server.stats().open < 20; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(server.stats().open, 20);
  RawSocket health(server.port());
  health.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string h = health.read_until("health", 2000);
  EXPECT_NE(h.find("200 OK"), std::string::npos) << h;
  EXPECT_NE(h.find("Connection: close"), std::string::npos) << h;
  RawSocket other(server.port());
  const auto t0 = std::chrono::steady_clock::now();
  other.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
  const std::string r = other.read_until("}", 2000);
  EXPECT_NE(r.find("503"), std::string::npos) << r;
  EXPECT_NE(r.find("Retry-After"), std::string::npos) << r;
  if (testing::kTimed) {
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  }
  // Past the overflow too: closed at once, nothing read.
  std::vector<RawSocket> more;
  for (int i = 0; i < 6; ++i) more.emplace_back(server.port());
  int closed_now = 0;
  for (RawSocket& m : more) closed_now += m.closed_within(500);
  EXPECT_GE(closed_now, 2);
  EXPECT_GE(server.stats().refused, 4);
  // Room again once the held ones go.
  held.clear();
  for (int i = 0; i < 200 && server.stats().open > 10; ++i) std::this_thread::sleep_for(10ms);
  HttpClient cli("127.0.0.1", server.port());
  auto ok = cli.post("/v1/x", "{}");
  ASSERT_TRUE(ok) << cli.error();
  EXPECT_EQ(ok->status, 200);
}

// A handler that never answers /wait (it remembers the exchange) and
// counts the abandoned ones.
struct Waiter {
  std::mutex mu;
  std::vector<std::shared_ptr<HttpExchange>> held;
  std::atomic<int> abandoned{0}, waiting{0};
  void operator()(std::shared_ptr<HttpExchange> ex) {
    if (ex->request().path != "/wait") return ex->respond(text("ok"));
    ex->on_abandoned([this] { ++abandoned; });
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(ex);
    ++waiting;
  }
};

TEST(HttpListener, AClientLeavingWhileItsAnswerIsPendingIsSeen) {
  Waiter waiter;
  TestServer server({}, [&](std::shared_ptr<HttpExchange> ex) { waiter(ex); });
  for (bool reset : {false, true}) {
    const int before = waiter.abandoned.load(), waiting = waiter.waiting.load();
    RawSocket s(server.port());
    s.send("POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    for (int i = 0; i < 1000 && waiter.waiting.load() == waiting; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(waiter.waiting.load(), waiting + 1) << "the request reached its handler";
    if (reset) s.reset();
    else s.close();
    for (int i = 0; i < 100 && waiter.abandoned.load() == before; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(waiter.abandoned.load(), before + 1) << (reset ? "reset" : "closed");
  }
  EXPECT_EQ(server.stats().clients_gone, 2);
  std::lock_guard<std::mutex> lock(waiter.mu);
  for (auto& ex : waiter.held) EXPECT_TRUE(ex->abandoned());
}

// Streams 32 KiB pieces as fast as the connection takes them, until the
// client is gone.
struct Firehose {
  std::atomic<int> abandoned{0};
  void operator()(std::shared_ptr<HttpExchange> ex) {
    if (ex->request().path != "/stream") return ex->respond(text("ok"));
    HttpResponse head;
    head.content_type = "text/event-stream";
    ex->begin_stream(head);
    ex->on_abandoned([this] { ++abandoned; });
    pump(ex);
  }
  static void pump(std::shared_ptr<HttpExchange> ex) {
    if (ex->abandoned()) return;
    ex->send("data: " + std::string(32 << 10, 'z') + "\n\n");
    ex->post([ex] {
      std::this_thread::sleep_for(1ms);
      pump(ex);
    });
  }
};

TEST(HttpListener, AStreamWhoseReaderFallsBehindIsCutWithoutStallingOthers) {
  HttpListenerOptions o;
  o.io_threads = 1;  // the reader that stops and the others share one loop
  o.max_stream_backlog_bytes = 1 << 20;
  Firehose hose;
  TestServer server(o, [&](std::shared_ptr<HttpExchange> ex) { hose(ex); });
  RawSocket stalled(server.port(), 4096);
  stalled.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(stalled.read_until("data: ", 2000).find("200 OK"), std::string::npos);
  // It reads no more. Meanwhile other clients are answered at once.
  HttpClient other("127.0.0.1", server.port());
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = other.get("/health");
    ASSERT_TRUE(r);
    if (testing::kTimed) {
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 200ms);
    }
  }
  for (int i = 0; i < 500 && hose.abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(hose.abandoned.load(), 1);
  EXPECT_EQ(server.stats().slow_readers_cut, 1);
  EXPECT_TRUE(stalled.closed_within(5000)) << "after what was already sent, the connection ends";
}

TEST(HttpListener, AReaderThatTakesNothingIsCutAtTheWriteTimeout) {
  HttpListenerOptions o;
  o.write_timeout_ms = 500;
  o.max_stream_backlog_bytes = size_t{1} << 40;  // never the cap: the timeout cuts it
  Firehose hose;
  TestServer server(o, [&](std::shared_ptr<HttpExchange> ex) { hose(ex); });
  RawSocket stalled(server.port(), 4096);
  stalled.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int i = 0; i < 500 && hose.abandoned.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(hose.abandoned.load(), 1);
  const HttpStats st = server.stats();
  EXPECT_EQ(st.write_timeouts, 1);
  EXPECT_EQ(st.slow_readers_cut, 1);
}

TEST(HttpListener, BodyLimitAndExpectContinue) {
  HttpListenerOptions o;
  o.limits.max_body_bytes = 1 << 20;
  TestServer server(o, echo_path);
  RawSocket big(server.port());
  big.send("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n");
  const std::string r = big.read_until("}", 2000);
  EXPECT_NE(r.find("413"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  RawSocket cont(server.port());
  cont.send("POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_NE(cont.read_until("\r\n\r\n", 2000).find("HTTP/1.1 100 Continue"), std::string::npos);
  cont.send("{}");
  EXPECT_NE(cont.read_until("\r\n\r\nc", 2000).find("200 OK"), std::string::npos);
  // The client library: a body over the limit gets its 413 too.
  HttpClient cli("127.0.0.1", server.port());
  auto huge = cli.post("/x", std::string(4 << 20, ' '));
  ASSERT_TRUE(huge) << cli.error();
  EXPECT_EQ(huge->status, 413);
}

}  // namespace
}  // namespace dsv4
