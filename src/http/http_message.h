// HTTP/1.1 messages as the server's handlers see them: a parsed request and
// the response they give, and the bytes a response goes out as (head,
// chunks). No sockets here.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsv4 {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent: GET, POST, ...
  std::string target;  // the request target: /v1/models/x?a=b
  std::string path;    // the target without its query
  std::string query;   // after '?', or empty
  int version = 11;    // 10 or 11
  bool keep_alive = true;
  HttpHeaders headers;
  std::string body;
  std::string peer;  // the client, "address:port"

  // The value of a header (names compare without case), or "" when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  HttpHeaders headers;
  std::string body;

  void set_header(std::string name, std::string value);
  std::string header(std::string_view name) const;
};

// "OK", "Not Found", ... ("Unknown" for codes we never send).
const char* http_reason(int status);

// The status line and headers of a response, with its framing: a
// Content-Length of content_length bytes, or chunked transfer encoding
// (content_length < 0 on HTTP/1.1; an HTTP/1.0 stream is delimited by the
// connection's close instead). keep_alive says whether the connection stays
// open after this response.
std::string http_head(const HttpResponse& response, long long content_length, int version, bool keep_alive);

// One chunk of a chunked body (empty data is not allowed: it would end the
// body), and the last chunk.
std::string http_chunk(std::string_view data);
inline constexpr std::string_view kHttpLastChunk = "0\r\n\r\n";

bool iequals(std::string_view a, std::string_view b);

}  // namespace dsv4
