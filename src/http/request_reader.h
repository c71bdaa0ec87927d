// Bytes from a connection to HTTP requests, one after another (pipelined
// requests included), with the limits that keep a client from making us
// hold what it likes: the head's size and the body's. Boost.Beast's parser
// reads the syntax (chunked bodies too); this keeps the bytes it has not
// taken yet and says what phase a request is in, for the connection's
// deadlines. No sockets: the fuzzer drives it directly.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "http/http_message.h"

namespace dsv4 {

struct RequestLimits {
  size_t max_head_bytes = 64u << 10;
  size_t max_body_bytes = 32u << 20;
};

class RequestReader {
 public:
  explicit RequestReader(const RequestLimits& limits);
  ~RequestReader();

  // Bytes received, kept until parse() takes them.
  void append(std::string_view bytes);

  enum class Result { kNeedMore, kRequest, kError };
  // Parses from the bytes appended: one whole request into *out, or
  // kNeedMore (everything taken, the request not complete), or kError
  // (error_status() and error_message() say why; the connection cannot be
  // read further, since where the next request starts is unknown).
  Result parse(HttpRequest* out);

  // Bytes of the next request seen (its head has started).
  bool started() const { return parser_ != nullptr || !pending_.empty(); }
  // The head of the request being read is complete; its body is arriving.
  bool head_done() const;
  // Its body's bytes so far, and whether the client waits for a
  // "100 Continue" before sending them.
  size_t body_bytes() const { return body_bytes_; }
  bool expects_continue() const;
  // The target of the request being read ("" before its head is done).
  std::string target() const;
  // Bytes appended and not yet parsed.
  size_t buffered() const { return pending_.size(); }

  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  struct Parser;
  void reset_parser();

  RequestLimits limits_;
  std::unique_ptr<Parser> parser_;  // only while a request is being read
  std::string pending_;
  size_t body_bytes_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace dsv4
