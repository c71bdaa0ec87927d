#include "http/request_reader.h"

#include <cstring>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace dsv4 {

namespace http = boost::beast::http;

struct RequestReader::Parser {
  http::request_parser<http::string_body> p;
};

RequestReader::RequestReader(const RequestLimits& limits) : limits_(limits) {}
RequestReader::~RequestReader() = default;

void RequestReader::append(std::string_view bytes) { pending_.append(bytes); }

bool RequestReader::head_done() const { return parser_ && parser_->p.is_header_done(); }

bool RequestReader::expects_continue() const {
  if (!head_done()) return false;
  return iequals(std::string_view(parser_->p.get()[http::field::expect]), "100-continue");
}

std::string RequestReader::target() const {
  return head_done() ? std::string(parser_->p.get().target()) : std::string();
}

void RequestReader::reset_parser() {
  parser_ = std::make_unique<Parser>();
  parser_->p.header_limit(static_cast<std::uint32_t>(limits_.max_head_bytes));
  parser_->p.body_limit(limits_.max_body_bytes);
  parser_->p.eager(true);
  body_bytes_ = 0;
}

RequestReader::Result RequestReader::parse(HttpRequest* out) {
  if (error_status_) return Result::kError;
  if (!parser_) {
    if (pending_.empty()) return Result::kNeedMore;
    reset_parser();
  }
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < pending_.size() && !parser_->p.is_done()) {
    const size_t n = parser_->p.put(boost::asio::buffer(pending_.data() + used, pending_.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      ec = {};
      break;
    }
    if (ec) break;
    if (n == 0) break;
  }
  pending_.erase(0, used);
  if (ec) {
    if (ec == http::error::bad_version || pending_.rfind("PRI * HTTP/2", 0) == 0) {
      error_status_ = 505;
      error_message_ = "only HTTP/1.1 and 1.0 are served (" + ec.message() + ")";
    } else if (ec == http::error::header_limit) {
      error_status_ = 431;
      error_message_ = "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes";
    } else if (ec == http::error::body_limit) {
      error_status_ = 413;
      error_message_ = "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes";
    } else {
      error_status_ = 400;
      error_message_ = "malformed HTTP request: " + ec.message();
    }
    return Result::kError;
  }
  if (parser_->p.is_header_done()) body_bytes_ = parser_->p.get().body().size();
  // A head larger than the limit that has not ended yet: Beast counts only
  // what it has parsed, so the bytes waiting are checked here.
  if (!parser_->p.is_header_done() && pending_.size() > limits_.max_head_bytes) {
    error_status_ = 431;
    error_message_ = "the request head is larger than " + std::to_string(limits_.max_head_bytes) + " bytes";
    return Result::kError;
  }
  if (!parser_->p.is_done()) return Result::kNeedMore;

  http::request<http::string_body> m = parser_->p.release();
  parser_.reset();
  body_bytes_ = 0;
  if (m.version() != 10 && m.version() != 11) {
    error_status_ = 505;
    error_message_ = "HTTP/" + std::to_string(m.version() / 10) + "." + std::to_string(m.version() % 10) +
                     " is not supported (HTTP/1.1 and 1.0 are)";
    return Result::kError;
  }
  // The target's forms (RFC 9112 3.2): origin (/path?query), absolute
  // (http://host/path, which a server must take too: its path is what
  // counts), and * (OPTIONS only). Anything else is not a target.
  std::string target(m.target());
  std::string origin = target;
  for (const char* scheme : {"http://", "https://"})
    if (target.size() > std::strlen(scheme) && iequals(std::string_view(target).substr(0, std::strlen(scheme)), scheme)) {
      const size_t slash = target.find_first_of("/?", std::strlen(scheme));
      origin = slash == std::string::npos ? "/" : target.substr(slash);
      if (origin[0] == '?') origin = "/" + origin;
    }
  const bool asterisk = target == "*" && m.method_string() == "OPTIONS";
  if (origin.empty() || (origin[0] != '/' && !asterisk)) {
    error_status_ = 400;
    error_message_ = "malformed HTTP request: the target '" + target.substr(0, 100) +
                     "' is not a path (/...), an absolute URL or * (for OPTIONS)";
    return Result::kError;
  }
  *out = HttpRequest{};
  out->method = std::string(m.method_string());
  out->target = origin;
  const size_t q = out->target.find('?');
  out->path = out->target.substr(0, q);
  out->query = q == std::string::npos ? "" : out->target.substr(q + 1);
  out->version = m.version();
  out->keep_alive = m.keep_alive();
  for (const auto& f : m) out->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  out->body = std::move(m.body());
  return Result::kRequest;
}

}  // namespace dsv4
