#include "http/http_message.h"

#include <cctype>
#include <cstdio>

namespace dsv4 {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

namespace {

std::string find_header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return "";
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const { return find_header(headers, name); }
std::string HttpResponse::header(std::string_view name) const { return find_header(headers, name); }

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& [k, v] : headers)
    if (iequals(k, name)) {
      v = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Unknown";
}

std::string http_head(const HttpResponse& r, long long content_length, int version, bool keep_alive) {
  std::string out;
  out.reserve(160 + r.headers.size() * 40);
  out += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(r.status);
  out += ' ';
  out += http_reason(r.status);
  out += "\r\n";
  if (!r.content_type.empty() && r.status != 204) {
    out += "Content-Type: ";
    out += r.content_type;
    out += "\r\n";
  }
  for (const auto& [k, v] : r.headers) {
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  if (content_length >= 0) {
    if (r.status != 204) out += "Content-Length: " + std::to_string(content_length) + "\r\n";
  } else if (version == 11) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (version == 10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

std::string http_chunk(std::string_view data) {
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(n + data.size() + 2);
  out.append(size, n);
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace dsv4
