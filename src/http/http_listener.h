// The HTTP/1.1 front end on an event loop (Boost.Asio, parsing by
// Boost.Beast): a few I/O threads own every socket, each running its own
// loop over its own connections, so a connection's state is touched by one
// thread only. Nothing a client does can hold a thread: a request head must
// arrive within a deadline, a body at a minimum rate, an idle keep-alive
// connection is closed after a while, a reader that stops taking its
// response is disconnected, and past a cap on open connections new ones
// are refused at once (with time enough to ask /health).
//
// Handlers are called on the I/O thread of their connection and must not
// block it: slow work goes elsewhere and comes back with
// HttpExchange::post() (see http_exchange.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "http/http_exchange.h"
#include "http/request_reader.h"

namespace dsv4 {

struct HttpListenerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see port())
  int io_threads = 2;
  // Open connections served at once. Beyond it a connection gets a short
  // while to ask for /health (answered, then closed); any other request is
  // answered 503 and closed; past that small overflow, accepted and closed.
  int max_connections = 16384;
  int overflow_connections = 256;
  RequestLimits limits;
  // A connection waiting for the first byte of a request (new, or kept
  // alive after a response) is closed after this long.
  int idle_timeout_ms = 60000;
  // From a request's first byte, its head (request line and headers) must
  // be complete within this.
  int head_timeout_ms = 10000;
  // A body must start arriving within body_timeout_ms of its head and then
  // keep up min_body_bytes_per_second: its deadline moves by a second for
  // every that many bytes received.
  int body_timeout_ms = 10000;
  int64_t min_body_bytes_per_second = 1024;
  // A write that makes no progress for this long means the reader stopped.
  int write_timeout_ms = 30000;
  // Bytes of a streamed response waiting for the reader (beyond what the
  // kernel holds) before it is cut off as too slow. (A stream's producer
  // pauses long before: HttpExchange::backlog.)
  size_t max_stream_backlog_bytes = 1u << 20;
  // The kernel's send buffer for a stream (SO_SNDBUF; 0: the kernel's
  // autotuning, which on loopback takes megabytes before a reader that
  // stopped shows).
  size_t stream_send_buffer_bytes = 32u << 10;
  // Requests read ahead of the one being answered on a connection.
  int max_pipelined = 16;
  bool access_log = true;
};

// Counters since the start (open: now).
struct HttpStats {
  int64_t open = 0, accepted = 0, refused = 0, requests = 0, malformed = 0;
  int64_t idle_closed = 0, head_timeouts = 0, body_timeouts = 0, write_timeouts = 0;
  int64_t slow_readers_cut = 0;  // streams whose reader fell behind past the backlog cap
  int64_t clients_gone = 0;      // requests whose client left before their response was complete
};

class HttpListener {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;
  // The response to a request refused before any handler ran (malformed,
  // too large, too slow, over the connection cap): its status, why, and
  // the request's target when its head was read.
  using ErrorResponder = std::function<HttpResponse(int status, const std::string& message, const std::string& target)>;

  HttpListener(const HttpListenerOptions& options, Handler handler, ErrorResponder errors);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens; an error says why (address in use, bad host).
  Status bind();
  int port() const { return port_; }
  // Serves on the I/O threads until stop(); returns once they are done.
  void serve();
  // Stops accepting; connections finish the response they are writing
  // (for up to drain_ms) and close. Thread-safe; serve() then returns.
  void stop(int drain_ms = 2000);

  HttpStats stats() const;
  const HttpListenerOptions& options() const;

  struct Shared;  // what every loop shares (http_loop.h)
  struct Loop;

 private:
  void accept_next();

  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Loop>> loops_;
  int port_ = 0;
  size_t next_loop_ = 0;
};

// Raises this process's limit of open files to its hard limit (the kernel
// counts every connection against it); returns the limit now in force.
int64_t raise_open_file_limit();

}  // namespace dsv4
