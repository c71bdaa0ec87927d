// One client connection of the front end, on its loop's thread only: reads
// requests (pipelined ones queued, answered in order), hands each to the
// handler through an HttpExchange, writes responses and streams without
// ever blocking, and enforces the deadlines and caps of
// HttpListenerOptions. A client that goes away (end of stream, reset, a
// failed write) abandons the exchange in progress.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/http_loop.h"
#include "http/request_reader.h"

namespace dsv4 {

class ConnectionExchange;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  using Clock = std::chrono::steady_clock;

  // overflow: accepted past the connection cap (only /health is answered).
  HttpConnection(HttpListener::Loop* loop, boost::asio::ip::tcp::socket socket, bool overflow);
  ~HttpConnection();

  void start();
  // Closes the connection if one of its deadlines has passed.
  void sweep(Clock::time_point now);
  // The listener stops: close now when idle, else after the response in progress.
  void drain();
  void close(const char* why);

 private:
  friend class ConnectionExchange;
  enum class Waiting { kNothing, kIdle, kHead, kBody };
  // A request the reader refused (malformed, too large), answered once the
  // requests before it are.
  struct Refusal {
    int status;
    std::string message, target;
  };

  void arm_read();
  void on_readable(const boost::system::error_code& ec);
  void parse_requests();
  void dispatch_next();
  // A request refused before any handler: its error response, then close.
  void refuse(int status, const std::string& message, const std::string& target);
  void enqueue(std::string bytes);
  void kick_write();
  void on_written(const boost::system::error_code& ec, size_t n);
  // Everything said: stop sending, read and drop what still comes for a
  // moment, then close.
  void linger();
  void client_gone(const char* why);
  void abandon_active(const char* why);
  // The exchange in progress is complete (its last byte queued).
  void complete_active();
  Waiting waiting() const;
  Clock::time_point deadline(Waiting w) const;
  void access_log(const ConnectionExchange& ex, const char* outcome) const;

  HttpListener::Loop* loop_;
  HttpListener::Shared* shared_;
  boost::asio::ip::tcp::socket socket_;
  std::list<HttpConnection*>::iterator registered_;
  std::string peer_;
  RequestReader reader_;
  std::vector<HttpRequest> queue_;  // read, not yet dispatched
  std::shared_ptr<ConnectionExchange> active_;
  std::vector<std::string> out_;  // bytes to write, in order
  size_t out_offset_ = 0;         // written of out_[0]
  size_t out_bytes_ = 0;          // waiting in out_
  bool reading_ = false, writing_ = false, closed_ = false;
  bool close_after_write_ = false;  // Connection: close, an error, or draining
  bool dispatching_ = false;
  bool lingering_ = false;
  bool overflow_;
  bool sent_continue_ = false;
  std::optional<Refusal> refusal_;
  Clock::time_point linger_until_;
  Clock::time_point waiting_since_;  // the last time we began waiting for the client
  Clock::time_point head_start_, body_start_;
  Clock::time_point write_progress_;  // the last byte taken by the client while writing
  Clock::time_point accepted_;
};

}  // namespace dsv4
