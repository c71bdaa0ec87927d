#include "http/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <cstdio>

#include "base/check.h"
#include "base/logging.h"

namespace dsv4 {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = HttpConnection::Clock;

namespace {

// How long a connection that has said all it will (an error response, a
// Connection: close) keeps reading what the client still sends before it
// closes: closing with unread bytes resets the connection, which can
// destroy the response before the client reads it.
constexpr auto kLinger = std::chrono::seconds(2);
// What a connection accepted past the cap gets to ask for /health.
constexpr auto kOverflowBudget = std::chrono::seconds(2);

std::chrono::milliseconds ms(int v) { return std::chrono::milliseconds(v); }

// The target as it goes into a log line: bounded, control bytes escaped.
std::string loggable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '"') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

}  // namespace

// The HttpExchange of the request a connection is answering.
class ConnectionExchange : public HttpExchange {
 public:
  ConnectionExchange(std::shared_ptr<HttpConnection> conn, HttpRequest request, bool keep_alive)
      : conn_(std::move(conn)), request_(std::move(request)), keep_alive_(keep_alive) {}

  const HttpRequest& request() const override { return request_; }

  void respond(HttpResponse r) override {
    on_thread();
    DSV4_CHECK_MSG(!streaming_, "respond() on a streamed response");
    if (complete_) return;
    status_ = r.status;
    if (abandoned_) return;
    const bool head_only = request_.method == "HEAD";
    std::string bytes = http_head(r, static_cast<long long>(r.body.size()), request_.version, keep_alive_);
    if (!head_only) bytes += r.body;
    bytes_ = head_only ? 0 : r.body.size();
    conn_->enqueue(std::move(bytes));
    finish();
  }

  void begin_stream(HttpResponse head) override {
    on_thread();
    DSV4_CHECK_MSG(!streaming_ && !complete_, "begin_stream() twice or after the response");
    streaming_ = true;
    status_ = head.status;
    if (abandoned_) return;
    // HTTP/1.0 has no chunks: the stream ends when the connection closes.
    if (request_.version == 10) keep_alive_ = false;
    // The kernel holds little of a stream, so a reader that stops shows in
    // our backlog (and pauses the stream's producer) after a few events,
    // not after megabytes of autotuned buffers.
    if (conn_->shared_->options.stream_send_buffer_bytes > 0) {
      boost::system::error_code ec;
      conn_->socket_.set_option(
          asio::socket_base::send_buffer_size(static_cast<int>(conn_->shared_->options.stream_send_buffer_bytes)), ec);
    }
    conn_->enqueue(http_head(head, -1, request_.version, keep_alive_));
  }

  void send(std::string bytes) override {
    on_thread();
    DSV4_CHECK_MSG(streaming_, "send() before begin_stream()");
    if (!live() || bytes.empty()) return;
    HttpConnection& c = *conn_;
    if (c.out_bytes_ + bytes.size() > c.shared_->options.max_stream_backlog_bytes) {
      ++c.shared_->slow_readers_cut;
      c.abandon_active("reader fell behind: cut");
      c.close("reader fell behind");
      return;
    }
    bytes_ += bytes.size();
    c.enqueue(request_.version == 10 ? std::move(bytes) : http_chunk(bytes));
  }

  void end_stream() override {
    on_thread();
    DSV4_CHECK_MSG(streaming_, "end_stream() before begin_stream()");
    if (!live()) return;
    if (request_.version == 11) conn_->enqueue(std::string(kHttpLastChunk));
    finish();
  }

  void on_abandoned(std::function<void()> f) override {
    on_thread();
    if (abandoned_) {
      post(std::move(f));
    } else if (!complete_) {
      on_abandoned_ = std::move(f);
    }
  }
  bool abandoned() const override { return abandoned_; }

  void post(std::function<void()> f) override { asio::post(conn_->loop_->io, std::move(f)); }

  void set_log_note(std::string note) override { note_ = std::move(note); }

  size_t backlog() const override { return live() ? conn_->out_bytes_ : 0; }
  void on_drained(std::function<void()> f) override {
    on_thread();
    if (!live()) return;
    if (conn_->out_bytes_ == 0) return post(std::move(f));
    on_drained_ = std::move(f);
  }
  // By the connection: everything queued went out.
  void drained() {
    if (on_drained_) post(std::exchange(on_drained_, nullptr));
  }

  // By the connection: the client is gone before the response was complete.
  void abandon() {
    if (!live()) return;
    abandoned_ = true;
    on_drained_ = nullptr;
    if (on_abandoned_) post(std::exchange(on_abandoned_, nullptr));
  }
  bool live() const { return !abandoned_ && !complete_; }

  std::shared_ptr<HttpConnection> conn_;
  HttpRequest request_;
  Clock::time_point started_ = Clock::now();
  int status_ = 0;
  size_t bytes_ = 0;
  bool keep_alive_;
  bool streaming_ = false, complete_ = false, abandoned_ = false;
  std::string note_;

 private:
  void on_thread() const {
    DSV4_CHECK_MSG(conn_->loop_->io.get_executor().running_in_this_thread(),
                   "an HttpExchange used off its connection's thread (use post())");
  }
  void finish() {
    complete_ = true;
    on_abandoned_ = nullptr;
    on_drained_ = nullptr;
    conn_->complete_active();
  }

  std::function<void()> on_abandoned_;
  std::function<void()> on_drained_;
};

HttpConnection::HttpConnection(HttpListener::Loop* loop, tcp::socket socket, bool overflow)
    : loop_(loop), shared_(loop->shared), socket_(std::move(socket)), reader_(shared_->options.limits), overflow_(overflow) {
  boost::system::error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("-") : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);
  accepted_ = waiting_since_ = write_progress_ = Clock::now();
}

HttpConnection::~HttpConnection() = default;

void HttpConnection::start() {
  registered_ = loop_->connections.insert(loop_->connections.end(), this);
  arm_read();
}

void HttpConnection::arm_read() {
  if (reading_ || closed_ || refusal_ || queue_.size() >= static_cast<size_t>(shared_->options.max_pipelined)) return;
  reading_ = true;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) { self->on_readable(ec); });
}

void HttpConnection::on_readable(const boost::system::error_code& wait_ec) {
  reading_ = false;
  if (closed_) return;
  if (wait_ec) return client_gone("connection error");
  boost::system::error_code ec;
  std::vector<char>& buf = loop_->read_buffer;
  const size_t n = socket_.read_some(asio::buffer(buf), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) return arm_read();
  if (ec) return client_gone(ec == asio::error::eof ? "client closed" : "connection reset");
  if (lingering_) return arm_read();  // said all we will: what comes now is dropped
  reader_.append(std::string_view(buf.data(), n));
  parse_requests();
}

void HttpConnection::parse_requests() {
  const auto now = Clock::now();
  while (queue_.size() < static_cast<size_t>(shared_->options.max_pipelined)) {
    HttpRequest req;
    const auto r = reader_.parse(&req);
    if (r == RequestReader::Result::kNeedMore) break;
    if (r == RequestReader::Result::kError) {
      ++shared_->malformed;
      refusal_ = Refusal{reader_.error_status(), reader_.error_message(), reader_.target()};
      break;
    }
    req.peer = peer_;
    ++shared_->requests;
    queue_.push_back(std::move(req));
    head_start_ = body_start_ = Clock::time_point{};
    sent_continue_ = false;
  }
  if (!refusal_) {
    if (reader_.started() && head_start_ == Clock::time_point{}) head_start_ = now;
    if (reader_.head_done() && body_start_ == Clock::time_point{}) body_start_ = now;
    // A client that waits for leave to send its body gets it, unless a
    // response is ahead of it (it then sends after its own short wait).
    if (reader_.expects_continue() && !sent_continue_ && !active_ && queue_.empty() && out_.empty()) {
      sent_continue_ = true;
      enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
  }
  dispatch_next();
  arm_read();
}

void HttpConnection::dispatch_next() {
  if (dispatching_) return;  // a handler answering inline: the loop below goes on
  dispatching_ = true;
  while (!active_ && !closed_ && !close_after_write_) {
    if (queue_.empty()) {
      if (refusal_) {
        const Refusal r = *refusal_;
        refuse(r.status, r.message, r.target);
      }
      break;
    }
    HttpRequest req = std::move(queue_.front());
    queue_.erase(queue_.begin());
    if (overflow_ && !(req.path == "/health" && (req.method == "GET" || req.method == "HEAD"))) {
      refuse(503, "the server has too many open connections; retry shortly", req.target);
      break;
    }
    const bool keep_alive = req.keep_alive && !overflow_ && !shared_->stopping;
    auto ex = std::make_shared<ConnectionExchange>(shared_from_this(), std::move(req), keep_alive);
    active_ = ex;
    try {
      shared_->handler(ex);
    } catch (const std::exception& e) {
      log_error("request handler failed: " + std::string(e.what()));
      if (ex->live() && !ex->streaming_) ex->respond(shared_->errors(500, e.what(), ex->request().target));
    }
  }
  dispatching_ = false;
  arm_read();
}

void HttpConnection::refuse(int status, const std::string& message, const std::string& target) {
  HttpResponse r = shared_->errors(status, message, target);
  if (status == 503) r.set_header("Retry-After", "1");
  enqueue(http_head(r, static_cast<long long>(r.body.size()), 11, false) + r.body);
  close_after_write_ = true;
  queue_.clear();
  refusal_.reset();
  if (shared_->options.access_log)
    log_info(peer_ + " \"" + (target.empty() ? std::string("-") : loggable(target)) + "\" " + std::to_string(status) +
             " refused: " + message);
}

void HttpConnection::enqueue(std::string bytes) {
  if (closed_ || bytes.empty()) return;
  out_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  kick_write();
}

void HttpConnection::kick_write() {
  if (writing_ || closed_ || out_.empty()) return;
  std::vector<asio::const_buffer> bufs;
  for (size_t i = 0; i < out_.size() && bufs.size() < 16; ++i) {
    const size_t off = i == 0 ? out_offset_ : 0;
    bufs.emplace_back(out_[i].data() + off, out_[i].size() - off);
  }
  writing_ = true;
  write_progress_ = Clock::now();
  socket_.async_write_some(bufs, [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
    self->on_written(ec, n);
  });
}

void HttpConnection::on_written(const boost::system::error_code& ec, size_t n) {
  writing_ = false;
  if (closed_) return;
  if (ec) return client_gone("write failed");
  write_progress_ = Clock::now();
  out_bytes_ -= n;
  while (n > 0) {
    const size_t left = out_[0].size() - out_offset_;
    if (n < left) {
      out_offset_ += n;
      break;
    }
    n -= left;
    out_.erase(out_.begin());
    out_offset_ = 0;
  }
  if (!out_.empty()) return kick_write();
  if (active_) active_->drained();
  waiting_since_ = write_progress_;
  if (close_after_write_ && !active_) linger();
}

void HttpConnection::linger() {
  if (lingering_ || closed_) return;
  lingering_ = true;
  linger_until_ = Clock::now() + kLinger;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close("shutdown failed");
  arm_read();
}

void HttpConnection::complete_active() {
  access_log(*active_, nullptr);
  if (!active_->keep_alive_) close_after_write_ = true;
  active_.reset();
  if (out_.empty() && close_after_write_) linger();
  dispatch_next();
}

void HttpConnection::client_gone(const char* why) {
  if (closed_) return;
  if (lingering_) return close(why);
  abandon_active(why);
  close(why);
}

void HttpConnection::abandon_active(const char* why) {
  if (!active_) return;
  if (active_->live()) {
    ++shared_->clients_gone;
    active_->abandon();
    access_log(*active_, why);
  }
  active_.reset();
}

void HttpConnection::close(const char* why) {
  if (closed_) return;
  if (log_enabled(LogLevel::kDebug)) log_debug(peer_ + ": connection closed (" + why + ")");
  abandon_active(why);
  closed_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
  loop_->connections.erase(registered_);
  --shared_->open;
  if (overflow_) --shared_->overflow_open;
  queue_.clear();
  out_.clear();
  out_bytes_ = 0;
}

HttpConnection::Waiting HttpConnection::waiting() const {
  if (closed_ || lingering_ || active_ || !queue_.empty() || !out_.empty() || refusal_ || close_after_write_)
    return Waiting::kNothing;
  if (!reader_.started()) return Waiting::kIdle;
  return reader_.head_done() ? Waiting::kBody : Waiting::kHead;
}

Clock::time_point HttpConnection::deadline(Waiting w) const {
  const HttpListenerOptions& o = shared_->options;
  switch (w) {
    case Waiting::kIdle:
      return waiting_since_ + ms(o.idle_timeout_ms);
    case Waiting::kHead:
      return std::max(head_start_, waiting_since_) + ms(o.head_timeout_ms);
    case Waiting::kBody: {
      const auto rate = std::max<int64_t>(o.min_body_bytes_per_second, 1);
      const auto earned = std::chrono::milliseconds(static_cast<int64_t>(reader_.body_bytes()) * 1000 / rate);
      return std::max(body_start_, waiting_since_) + ms(o.body_timeout_ms) + earned;
    }
    case Waiting::kNothing:
      break;
  }
  return Clock::time_point::max();
}

void HttpConnection::sweep(Clock::time_point now) {
  if (closed_) return;
  if (lingering_) {
    if (now >= linger_until_) close("lingered");
    return;
  }
  if (overflow_ && now - accepted_ > kOverflowBudget) return close("over the cap, out of time");
  if (writing_ && now - write_progress_ > ms(shared_->options.write_timeout_ms)) {
    ++shared_->write_timeouts;
    if (active_ && active_->streaming_ && active_->live()) ++shared_->slow_readers_cut;
    abandon_active("reader took nothing for the write timeout: cut");
    return close("write timeout");
  }
  const Waiting w = waiting();
  if (w == Waiting::kNothing || now < deadline(w)) return;
  if (w == Waiting::kIdle) {
    ++shared_->idle_closed;
    return close("idle");
  }
  // A head or body too slow: a 408 if the socket takes it now, then close
  // (a client this slow is not waited for again).
  (w == Waiting::kHead ? shared_->head_timeouts : shared_->body_timeouts)++;
  const std::string what = w == Waiting::kHead ? "the request head" : "the request body";
  HttpResponse r = shared_->errors(408, what + " did not arrive in time", reader_.target());
  const std::string bytes = http_head(r, static_cast<long long>(r.body.size()), 11, false) + r.body;
  boost::system::error_code ec;
  socket_.write_some(asio::buffer(bytes), ec);
  if (shared_->options.access_log) log_info(peer_ + " 408 " + what + " too slow: closed");
  close("too slow");
}

void HttpConnection::drain() {
  if (closed_) return;
  queue_.clear();
  close_after_write_ = true;
  if (!active_ && out_.empty()) close("server stopping");
}

void HttpConnection::access_log(const ConnectionExchange& ex, const char* outcome) const {
  if (!shared_->options.access_log) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - ex.started_).count();
  const HttpRequest& r = ex.request_;
  char timing[64];
  std::snprintf(timing, sizeof timing, " %d %.3fs %zuB", ex.status_ ? ex.status_ : 499, seconds, ex.bytes_);
  std::string line = peer_ + " \"" + loggable(r.method) + " " + loggable(r.target) +
                     (r.version == 10 ? " HTTP/1.0\"" : " HTTP/1.1\"") + timing;
  if (!ex.note_.empty()) line += " " + ex.note_;
  if (outcome) line += std::string(" (") + outcome + ")";
  log_info(line);
}

}  // namespace dsv4
