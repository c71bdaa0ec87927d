// dsv4 bench --front-end: what clients can and cannot do to a running
// server's front end (loopback only; every part bounded in count and time).
//
// 1. connections: --idle connections that send nothing and --slowloris
//    connections that send a header byte per second (closed ones reopen,
//    as an attacker's would) held open at once, while new clients ask
//    /health and one-token completions: their latency percentiles, and the
//    server's memory per idle connection (its RSS before and after).
// 2. throughput: --clients keep-alive clients sending one-token
//    completions as fast as they are answered; requests/s, and with
//    --compare-port the same load on a second server (an older dsv4),
//    alternated, with the ratio.
// 3. stalled: --streams streaming readers, then --stalled more that send
//    a long streaming request and never read: the engine's step rate (and
//    the readers' events/s) before, while the stalled streams are being
//    held, and after they are cut; the stalled requests must all be
//    aborted and their pages freed.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "bench_front_end.h"
#include "http/http_client.h"
#include "http/http_listener.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// The first value of a metric (labels included in `name` as a regex), or -1.
double metric(const std::string& host, int port, const std::string& name) {
  HttpClient cli(host, port);
  cli.set_read_timeout_ms(10000);
  auto r = cli.get("/metrics");
  if (!r || r->status != 200) return -1;
  std::smatch m;
  if (!std::regex_search(r->body, m, std::regex("(^|\n)" + name + "(\\{[^}]*\\})? ([^ \n]+)"))) return -1;
  return std::stod(m[3]);
}

// A connection that sends exactly what it is told, non-blocking. With
// rcvbuf, its receive buffer is fixed at that size (no autotuning).
int connect_to(const std::string& host, int port, int rcvbuf = 0) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return -1;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    ::close(fd);
    freeaddrinfo(found);
    return -1;
  }
  freeaddrinfo(found);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

bool send_some(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(bytes.size());
}

void close_all(std::vector<int>* fds) {
  for (int fd : *fds)
    if (fd >= 0) ::close(fd);
  fds->clear();
}

// Connections that send a request head a byte per second, reopened when the
// server closes them.
class Slowloris {
 public:
  Slowloris(std::string host, int port, int count) : host_(std::move(host)), port_(port) {
    for (int i = 0; i < count; ++i) fds_.push_back(open_one());
    thread_ = std::thread([this] { run(); });
  }
  ~Slowloris() {
    stop_ = true;
    thread_.join();
    close_all(&fds_);
  }
  int64_t reopened() const { return reopened_; }

 private:
  int open_one() {
    const int fd = connect_to(host_, port_);
    if (fd >= 0) send_some(fd, "G");
    return fd;
  }
  void run() {
    const std::string head = "ET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slowly: " + std::string(4000, 'a');
    size_t at = 0;
    while (!stop_) {
      for (int& fd : fds_) {
        if (fd < 0 || !send_some(fd, std::string(1, head[at % head.size()]))) {
          if (fd >= 0) ::close(fd);
          fd = open_one();
          ++reopened_;
        }
      }
      ++at;
      for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  std::string host_;
  int port_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> reopened_{0};
  std::thread thread_;
};

bool wait_until(const std::function<bool()>& cond, double timeout_s) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < timeout_s) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return cond();
}

bool connections_part(const FrontEndBenchOptions& o) {
  std::printf("\n[connections] %d idle + %d slowloris connections, %d samples of /health and a one-token completion "
              "from new clients\n",
              o.idle, o.slowloris, o.samples);
  const double open0 = metric(o.host, o.port, "dsv4_http_connections_open");
  const double rss0 = metric(o.host, o.port, "process_resident_memory_bytes");
  std::vector<int> idle;
  for (int i = 0; i < o.idle; ++i) {
    const int fd = connect_to(o.host, o.port);
    if (fd < 0) {
      std::printf("  could not open idle connection %d: %s\n", i, std::strerror(errno));
      break;
    }
    idle.push_back(fd);
  }
  const bool all_open = wait_until([&] { return metric(o.host, o.port, "dsv4_http_connections_open") >= open0 + idle.size(); }, 30);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double rss1 = metric(o.host, o.port, "process_resident_memory_bytes");
  const double per_conn = idle.empty() ? 0 : (rss1 - rss0) / idle.size();
  std::printf("  %zu idle connections open (server counts %s); server RSS %.1f -> %.1f MiB: %.0f bytes per idle "
              "connection\n",
              idle.size(), all_open ? "them all" : "FEWER", rss0 / 1048576, rss1 / 1048576, per_conn);
  Slowloris loris(o.host, o.port, o.slowloris);
  wait_until([&] { return metric(o.host, o.port, "dsv4_http_connections_open") >= open0 + idle.size() + o.slowloris * 0.95; },
             30);
  std::vector<double> health, complete;
  int failures = 0;
  double min_open = 1e18;
  for (int i = 0; i < o.samples; ++i) {
    auto t0 = Clock::now();
    HttpClient h(o.host, o.port);
    h.set_read_timeout_ms(10000);
    auto r = h.get("/health");
    if (!r || r->status != 200) ++failures;
    health.push_back(seconds_since(t0) * 1000);
    t0 = Clock::now();
    HttpClient c(o.host, o.port);
    c.set_read_timeout_ms(10000);
    auto q = c.post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 1})");
    if (!q || q->status != 200) ++failures;
    complete.push_back(seconds_since(t0) * 1000);
    if (i % 20 == 0) min_open = std::min(min_open, metric(o.host, o.port, "dsv4_http_connections_open"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("  open connections while sampling: at least %.0f (slowloris connections reopened %lld times: the "
              "head deadline closes them)\n",
              min_open, static_cast<long long>(loris.reopened()));
  std::printf("  /health ms: p50 %.2f p99 %.2f max %.2f (target p99 < 100)\n", percentile(health, 0.5),
              percentile(health, 0.99), percentile(health, 1.0));
  std::printf("  one-token completion ms: p50 %.2f p99 %.2f max %.2f (target p99 < 200)\n", percentile(complete, 0.5),
              percentile(complete, 0.99), percentile(complete, 1.0));
  std::printf("  failed requests: %d\n", failures);
  close_all(&idle);
  const bool ok = failures == 0 && all_open && percentile(health, 0.99) < 100 && percentile(complete, 0.99) < 200 &&
                  per_conn <= 16384;
  std::printf("  %s\n", ok ? "targets met" : "TARGETS MISSED");
  return ok;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Keep-alive clients sending one-token completions: requests per second.
// Failures are counted, and the first one's reason kept.
double throughput(const std::string& host, int port, int clients, double seconds, int64_t* errors, std::string* first_error) {
  std::atomic<int64_t> done{0}, failed{0};
  std::mutex error_mu;
  std::atomic<bool> counting{false}, stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      HttpClient cli(host, port);
      cli.set_read_timeout_ms(30000);
      const std::string body = R"({"prompt": "hi", "max_tokens": 1})";
      while (!stop) {
        auto r = cli.post("/v1/completions", body);
        if (!counting) continue;
        if (r && r->status == 200) {
          ++done;
          continue;
        }
        ++failed;
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error->empty()) *first_error = r ? "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 120) : cli.error();
      }
    });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // warm up: every client connected and running
  counting = true;
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  counting = false;
  const double wall = seconds_since(t0);
  stop = true;
  for (auto& t : threads) t.join();
  *errors += failed;
  return done / wall;
}

bool throughput_part(const FrontEndBenchOptions& o) {
  std::printf("\n[throughput] %d keep-alive clients, one-token completions, %.0f s per run\n", o.clients,
              o.throughput_seconds);
  int64_t our_errors = 0, their_errors = 0;
  std::string our_error, their_error;
  std::vector<double> ours, theirs;
  const int rounds = o.compare_port ? 3 : 1;
  for (int round = 0; round < rounds; ++round) {
    ours.push_back(throughput(o.host, o.port, o.clients, o.throughput_seconds, &our_errors, &our_error));
    std::printf("  this server (port %d): %.0f requests/s\n", o.port, ours.back());
    if (!o.compare_port) break;
    theirs.push_back(throughput(o.host, o.compare_port, o.clients, o.throughput_seconds, &their_errors, &their_error));
    std::printf("  compared server (port %d): %.0f requests/s\n", o.compare_port, theirs.back());
  }
  std::printf("  failed requests: %lld here%s%s\n", static_cast<long long>(our_errors), our_error.empty() ? "" : ", first: ",
              our_error.c_str());
  if (!o.compare_port) return our_errors == 0;
  std::printf("  failed requests on the compared server: %lld%s%s\n", static_cast<long long>(their_errors),
              their_error.empty() ? "" : ", first: ", their_error.c_str());
  const double ratio = median(ours) / std::max(median(theirs), 1e-9);
  std::printf("  median %.0f vs %.0f requests/s: %.2fx (target >= 2x)\n", median(ours), median(theirs), ratio);
  return our_errors == 0 && their_errors == 0 && ratio >= 2.0;
}

// Streaming readers that read every event, restarting when a stream ends.
class Readers {
 public:
  Readers(std::string host, int port, int count) {
    for (int i = 0; i < count; ++i)
      threads_.emplace_back([this, host, port, i] {
        HttpClient cli(host, port);
        // A new stream may wait behind every stalled one (admission is in
        // arrival order) until they are held.
        cli.set_read_timeout_ms(600000);
        const std::string body = "{\"prompt\": \"reader " + std::to_string(i) +
                                 "\", \"max_tokens\": 2000, \"ignore_eos\": true, \"stream\": true}";
        while (!stop_) {
          auto r = cli.send("POST", "/v1/completions", body, {{"Content-Type", "application/json"}},
                            [this](std::string_view piece) {
                              for (size_t at = piece.find("data: "); at != std::string_view::npos;
                                   at = piece.find("data: ", at + 1))
                                ++events_;
                              return !stop_.load();
                            });
          if (!r || r->status != 200) ++errors_;
        }
      });
  }
  ~Readers() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  int64_t events() const { return events_; }
  int64_t errors() const { return errors_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> events_{0}, errors_{0};
  std::vector<std::thread> threads_;
};

struct Rates {
  double steps = 0, events = 0;
};

Rates measure(const FrontEndBenchOptions& o, const Readers& readers, double seconds) {
  const double s0 = metric(o.host, o.port, "dsv4_engine_steps_total");
  const int64_t e0 = readers.events();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double wall = seconds_since(t0);
  return {(metric(o.host, o.port, "dsv4_engine_steps_total") - s0) / wall, (readers.events() - e0) / wall};
}

// This machine's speed drifts by 10% from one 10 s window to the next with
// nothing changed (measured: 837 to 995 steps/s, the same 8 readers), so a
// state is measured in several windows, and the rate without stalled streams
// is taken both before and after them: the held state is compared with the
// median of windows that bracket it in time. The target is one-sided (the
// readers' steps may not slow down): held streams have taken most free
// pages, and the readers' steps then ran 1.12x and 1.24x faster in two runs
// (not investigated; perhaps fewer distinct pages touched), no harm to them.
constexpr int kWindows = 5;

std::vector<Rates> measure_windows(const FrontEndBenchOptions& o, const Readers& readers) {
  std::vector<Rates> rates;
  for (int i = 0; i < kWindows; ++i) rates.push_back(measure(o, readers, o.window_seconds / kWindows));
  return rates;
}

Rates median_rates(std::vector<Rates> rates) {
  std::vector<double> steps, events;
  for (const Rates& r : rates) {
    steps.push_back(r.steps);
    events.push_back(r.events);
  }
  return {median(steps), median(events)};
}

bool stalled_part(const FrontEndBenchOptions& o) {
  std::printf("\n[stalled] %d streaming readers, then %d streams that are never read\n", o.streams, o.stalled);
  const std::string aborts_name = R"(dsv4_requests_total\{endpoint="completions",outcome="abort"\})";
  const double cut0 = metric(o.host, o.port, "dsv4_http_slow_readers_cut_total");
  const double aborts0 = std::max(0.0, metric(o.host, o.port, aborts_name));
  bool ok = true;
  {
    Readers readers(o.host, o.port, o.streams);
    std::this_thread::sleep_for(std::chrono::seconds(5));  // the readers running, what came before settled
    const std::vector<Rates> before = measure_windows(o, readers);
    const Rates before_median = median_rates(before);
    std::printf("  before: %.0f engine steps/s, %.0f events/s to the readers (median of %d windows)\n",
                before_median.steps, before_median.events, kWindows);
    std::vector<int> stalled;
    const std::string body = R"({"prompt": "never read", "max_tokens": 3800, "ignore_eos": true, "stream": true})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    // Their receive buffers are fixed (64 KiB): a client that never reads
    // with the kernel's autotuning on loopback takes megabytes (up to
    // tcp_rmem's maximum) before anything is left waiting, so its stream
    // runs to its end as a reading one's would.
    const auto t0 = Clock::now();
    for (int i = 0; i < o.stalled; ++i) {
      const int fd = connect_to(o.host, o.port, 64 << 10);
      if (fd >= 0 && send_some(fd, request)) stalled.push_back(fd);
    }
    // Until every stalled stream has filled its buffers and is held (or, if
    // that took longer than the write timeout, already cut): then nothing
    // runs but the readers' streams.
    const Rates filling = measure(o, readers, 2.0);
    auto stalled_running = [&] {
      return metric(o.host, o.port, "dsv4_num_requests_running") - metric(o.host, o.port, "dsv4_num_requests_held") +
             metric(o.host, o.port, "dsv4_num_requests_waiting") - o.streams;
    };
    const bool all_held = wait_until([&] { return stalled_running() <= 0; }, 600);
    const double held_count = metric(o.host, o.port, "dsv4_num_requests_held");
    std::printf("  %zu stalled streams sent; %.1f s later none runs: %.0f held, %.0f already cut (in the first 2 s, "
                "while they filled their buffers: %.0f steps/s, %.0f events/s to the readers)\n",
                stalled.size(), seconds_since(t0), held_count,
                metric(o.host, o.port, "dsv4_http_slow_readers_cut_total") - cut0, filling.steps, filling.events);
    const Rates held = median_rates(measure_windows(o, readers));
    const double still_held = metric(o.host, o.port, "dsv4_num_requests_held");
    std::printf("  with %.0f streams held (%.0f at the end): %.0f engine steps/s, %.0f events/s to the readers\n",
                held_count, still_held, held.steps, held.events);
    // The write timeout cuts them.
    const bool all_cut = wait_until(
        [&] { return metric(o.host, o.port, "dsv4_http_slow_readers_cut_total") - cut0 >= stalled.size(); }, 300);
    const double cut = metric(o.host, o.port, "dsv4_http_slow_readers_cut_total") - cut0;
    const double aborted = metric(o.host, o.port, aborts_name) - aborts0;
    std::printf("  cut off at the write timeout: %.0f of %zu (%.1f s after they were sent); requests aborted: %.0f\n", cut,
                stalled.size(), seconds_since(t0), aborted);
    std::this_thread::sleep_for(std::chrono::seconds(3));  // the cut connections close, their pages go
    const std::vector<Rates> after = measure_windows(o, readers);
    const Rates after_median = median_rates(after);
    std::printf("  after: %.0f engine steps/s, %.0f events/s to the readers\n", after_median.steps, after_median.events);
    std::vector<Rates> without = before;
    without.insert(without.end(), after.begin(), after.end());
    const Rates baseline = median_rates(without);
    const double held_ratio = held.steps / std::max(baseline.steps, 1e-9);
    const double after_ratio = after_median.steps / std::max(baseline.steps, 1e-9);
    std::printf("  without stalled streams (before and after): %.0f engine steps/s; held %.2fx of it, after %.2fx "
                "(target: no slower than 0.90x), events to the readers held %.2fx\n",
                baseline.steps, held_ratio, after_ratio, held.events / std::max(baseline.events, 1e-9));
    close_all(&stalled);
    std::printf("  reader errors: %lld\n", static_cast<long long>(readers.errors()));
    ok = all_held && still_held >= stalled.size() && all_cut && aborted >= stalled.size() && held_ratio >= 0.90 &&
         after_ratio >= 0.90 && readers.errors() == 0;
  }
  // Everything returns: nothing runs or is held, no page is kept.
  const bool settled = wait_until(
      [&] {
        return metric(o.host, o.port, "dsv4_num_requests_running") == 0 && metric(o.host, o.port, "dsv4_num_requests_held") == 0 &&
               metric(o.host, o.port, R"(dsv4_kv_cache_usage\{family="ori"\})") == 0;
      },
      60);
  std::printf("  afterwards: nothing running or held, every page back: %s\n", settled ? "yes" : "NO");
  ok = ok && settled;
  std::printf("  %s\n", ok ? "targets met (steps/s no slower than 0.90x while held and after)" : "TARGETS MISSED");
  return ok;
}

}  // namespace

int bench_front_end(const FrontEndBenchOptions& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes (it runs for minutes)
  std::signal(SIGPIPE, SIG_IGN);             // a server that closes a socket is a result, not the end
  const int64_t files = raise_open_file_limit();
  std::printf("dsv4 bench --front-end against http://%s:%d (open-file limit here %lld)\n", o.host.c_str(), o.port,
              static_cast<long long>(files));
  if (metric(o.host, o.port, "dsv4_engine_steps_total") < 0) {
    std::fprintf(stderr, "dsv4 bench --front-end: no dsv4 server answers /metrics at %s:%d\n", o.host.c_str(), o.port);
    return 2;
  }
  bool ok = true;
  if (o.parts.find("connections") != std::string::npos) ok &= connections_part(o);
  if (o.parts.find("throughput") != std::string::npos) ok &= throughput_part(o);
  if (o.parts.find("stalled") != std::string::npos) ok &= stalled_part(o);
  std::printf("\n%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace dsv4::app
