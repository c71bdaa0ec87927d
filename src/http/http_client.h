// A small blocking HTTP/1.1 client over one kept-alive connection, for
// the tools that drive a server (dsv4 bench --soak, --front-end) and the
// tests: whole responses, or a body handed over as it arrives (server-sent
// events) with the choice to hang up. Every wait is bounded.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "http/http_message.h"

namespace dsv4 {

struct HttpClientResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;
  std::string header(std::string_view name) const;
};

class HttpClient {
 public:
  HttpClient(std::string host, int port);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Bounds on connecting and on each wait for bytes of a response.
  void set_connect_timeout_ms(int ms) { connect_timeout_ms_ = ms; }
  void set_read_timeout_ms(int ms) { read_timeout_ms_ = ms; }

  std::optional<HttpClientResponse> get(const std::string& target, const HttpHeaders& headers = {});
  std::optional<HttpClientResponse> post(const std::string& target, const std::string& body,
                                         const std::string& content_type = "application/json",
                                         const HttpHeaders& headers = {});
  // Any method. With on_body, the body goes to it piece by piece as it
  // arrives (and is not kept in the response); it returns false to hang up,
  // which closes the connection. No response (nullopt, error() says why)
  // when the server could not be reached, closed early or was too slow.
  std::optional<HttpClientResponse> send(const std::string& method, const std::string& target, const std::string& body,
                                         const HttpHeaders& headers,
                                         const std::function<bool(std::string_view)>& on_body = nullptr);

  const std::string& error() const { return error_; }
  // Closes the kept-alive connection (the next request opens another).
  void close();

 private:
  bool connect();
  bool write_all(const std::string& bytes);
  std::optional<HttpClientResponse> read_response(bool head, const std::function<bool(std::string_view)>& on_body,
                                                  bool* nothing_received);

  std::string host_;
  int port_;
  int fd_ = -1;
  int connect_timeout_ms_ = 10000;
  int read_timeout_ms_ = 300000;
  std::string error_;
};

}  // namespace dsv4
