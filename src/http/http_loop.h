// Inside the front end (http_listener.cc, http_connection.cc): the state
// every I/O loop shares, and one loop's own: its io_context, its
// connections, its read buffer.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <list>
#include <optional>
#include <thread>
#include <vector>

#include "http/http_listener.h"

namespace dsv4 {

class HttpConnection;

struct HttpListener::Shared {
  HttpListenerOptions options;
  Handler handler;
  ErrorResponder errors;
  std::atomic<int64_t> open{0}, overflow_open{0};
  std::atomic<int64_t> accepted{0}, refused{0}, requests{0}, malformed{0};
  std::atomic<int64_t> idle_closed{0}, head_timeouts{0}, body_timeouts{0}, write_timeouts{0};
  std::atomic<int64_t> slow_readers_cut{0}, clients_gone{0};
  std::atomic<bool> stopping{false};
};

struct HttpListener::Loop {
  explicit Loop(Shared* s) : shared(s), sweep(io) {}

  boost::asio::io_context io{1};
  Shared* shared;
  // Every read of this loop's connections lands here first; a connection
  // keeps only the bytes its parser has not taken.
  std::vector<char> read_buffer = std::vector<char>(64u << 10);
  // Open connections, for the deadline sweep and the drain at stop.
  std::list<HttpConnection*> connections;
  boost::asio::steady_timer sweep;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor;  // on the first loop only
  std::thread thread;
  bool stopping = false;
  std::chrono::steady_clock::time_point drain_until;  // stopping: connections still open then are closed
};

}  // namespace dsv4
