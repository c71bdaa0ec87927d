#include "http/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cerrno>
#include <cstring>
#include <limits>

namespace dsv4 {

namespace http = boost::beast::http;

std::string HttpClientResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return "";
}

HttpClient::HttpClient(std::string host, int port) : host_(std::move(host)), port_(port) {}
HttpClient::~HttpClient() { close(); }

void HttpClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool HttpClient::connect() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
  if (rc != 0 || !found) {
    error_ = "cannot resolve " + host_ + ": " + gai_strerror(rc);
    return false;
  }
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, connect_timeout_ms_) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        r = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (r == 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd_ = fd;
      freeaddrinfo(found);
      return true;
    }
    error_ = "cannot connect to " + host_ + ":" + std::to_string(port_) + ": " + std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  return false;
}

bool HttpClient::write_all(const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n > 0) {
      at += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (poll(&p, 1, read_timeout_ms_) != 1) {
        error_ = "timed out sending the request";
        return false;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    error_ = std::string("sending the request failed: ") + std::strerror(errno);
    return false;
  }
  return true;
}

std::optional<HttpClientResponse> HttpClient::get(const std::string& target, const HttpHeaders& headers) {
  return send("GET", target, "", headers);
}

std::optional<HttpClientResponse> HttpClient::post(const std::string& target, const std::string& body,
                                                   const std::string& content_type, const HttpHeaders& headers) {
  HttpHeaders h = headers;
  h.emplace_back("Content-Type", content_type);
  return send("POST", target, body, h);
}

std::optional<HttpClientResponse> HttpClient::send(const std::string& method, const std::string& target,
                                                   const std::string& body, const HttpHeaders& headers,
                                                   const std::function<bool(std::string_view)>& on_body) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) + "\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  // A kept-alive connection the server has since closed fails without a
  // byte of response: that one attempt is made again on a new connection.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = fd_ >= 0;
    if (!reused && !connect()) return std::nullopt;
    // A server may answer (413, 503) before taking the whole body: the
    // response is read even when sending failed.
    write_all(req);
    bool nothing = false;
    auto r = read_response(method == "HEAD", on_body, &nothing);
    if (r) return r;
    close();
    if (!(reused && nothing)) return std::nullopt;
  }
  return std::nullopt;
}

std::optional<HttpClientResponse> HttpClient::read_response(bool head,
                                                            const std::function<bool(std::string_view)>& on_body,
                                                            bool* nothing_received) {
  std::optional<http::response_parser<http::string_body>> p;
  auto fresh = [&] {
    p.emplace();
    p->header_limit(1u << 20);
    // No limit, said as the largest one: Beast 1.74 compares a response's
    // Content-Length with an empty optional as larger than it (a "body
    // limit exceeded" whenever the head arrives without its body).
    p->body_limit(std::numeric_limits<std::uint64_t>::max());
    p->eager(true);
    if (head) p->skip(true);
  };
  fresh();
  std::string pending;
  char buf[1 << 16];
  *nothing_received = true;
  for (;;) {
    // Take what is buffered.
    boost::beast::error_code ec;
    size_t used = 0;
    while (used < pending.size() && !p->is_done()) {
      const size_t n = p->put(boost::asio::buffer(pending.data() + used, pending.size() - used), ec);
      used += n;
      if (ec == http::error::need_more) {
        ec = {};
        break;
      }
      if (ec || n == 0) break;
    }
    pending.erase(0, used);
    if (ec) {
      error_ = "malformed response: " + ec.message();
      return std::nullopt;
    }
    if (p->is_header_done() && p->get().result_int() == 100) {  // 100 Continue: the real one follows
      fresh();
      continue;
    }
    if (on_body && p->is_header_done() && !p->get().body().empty()) {
      std::string piece = std::move(p->get().body());
      p->get().body().clear();
      if (!on_body(piece)) {
        close();
        HttpClientResponse r;
        r.status = p->get().result_int();
        for (const auto& f : p->get()) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
        return r;
      }
    }
    if (p->is_done()) break;
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, read_timeout_ms_);
    if (ready != 1) {
      error_ = "no response within " + std::to_string(read_timeout_ms_) + " ms";
      return std::nullopt;
    }
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) {
      // The end of a body delimited by the connection's close.
      if (n == 0 && p->is_header_done() && p->need_eof()) {
        p->put_eof(ec);
        if (!ec) break;
      }
      error_ = n == 0 ? "the server closed the connection" : std::string("reading failed: ") + std::strerror(errno);
      return std::nullopt;
    }
    *nothing_received = false;
    pending.append(buf, static_cast<size_t>(n));
  }
  HttpClientResponse r;
  auto msg = p->release();
  r.status = msg.result_int();
  for (const auto& f : msg) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  r.body = std::move(msg.body());
  if (!msg.keep_alive()) close();
  return r;
}

}  // namespace dsv4
