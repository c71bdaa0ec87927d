#include "http/http_listener.h"

#include <sys/resource.h>

#include <boost/asio/post.hpp>

#include "base/logging.h"
#include "http/http_connection.h"
#include "http/http_loop.h"

namespace dsv4 {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Deadlines are checked this often (the timeouts are seconds; this is
// their resolution).
constexpr auto kSweepInterval = std::chrono::milliseconds(250);

void schedule_sweep(HttpListener::Loop* loop) {
  loop->sweep.expires_after(kSweepInterval);
  loop->sweep.async_wait([loop](const boost::system::error_code& ec) {
    if (ec) return;
    const auto now = HttpConnection::Clock::now();
    // A connection closing removes itself from the list: step past it first.
    for (auto it = loop->connections.begin(); it != loop->connections.end();) {
      HttpConnection* c = *it++;
      c->sweep(now);
    }
    if (loop->stopping && (loop->connections.empty() || now >= loop->drain_until)) {
      std::vector<HttpConnection*> left(loop->connections.begin(), loop->connections.end());
      for (HttpConnection* c : left) c->close("server stopped");
      loop->io.stop();
      return;
    }
    schedule_sweep(loop);
  });
}

}  // namespace

int64_t raise_open_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    rlimit want = r;
    want.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) r = want;
  }
  return r.rlim_cur == RLIM_INFINITY ? int64_t{1} << 30 : static_cast<int64_t>(r.rlim_cur);
}

HttpListener::HttpListener(const HttpListenerOptions& options, Handler handler, ErrorResponder errors)
    : shared_(std::make_unique<Shared>()) {
  shared_->options = options;
  shared_->options.io_threads = std::max(1, options.io_threads);
  shared_->handler = std::move(handler);
  shared_->errors = std::move(errors);
  for (int i = 0; i < shared_->options.io_threads; ++i) loops_.push_back(std::make_unique<Loop>(shared_.get()));
}

HttpListener::~HttpListener() {
  stop(0);
  for (auto& l : loops_)
    if (l->thread.joinable()) l->thread.join();
  // Handlers still queued hold connections; they go with their io_context.
  // The acceptor's loop goes first: an accept still queued on it holds a
  // socket of the loop it was meant for, whose socket service must outlive
  // it (destroyed after that loop, it called into a freed service).
  for (auto& l : loops_) l.reset();
}

const HttpListenerOptions& HttpListener::options() const { return shared_->options; }

Status HttpListener::bind() {
  Loop& l = *loops_[0];
  boost::system::error_code ec;
  tcp::resolver resolver(l.io);
  const auto found = resolver.resolve(shared_->options.host, std::to_string(shared_->options.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) return invalid_argument("cannot resolve host " + shared_->options.host + ": " + ec.message());
  const tcp::endpoint ep = found.begin()->endpoint();
  l.acceptor.emplace(l.io);
  l.acceptor->open(ep.protocol(), ec);
  if (!ec) l.acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) l.acceptor->bind(ep, ec);
  if (!ec) l.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    l.acceptor.reset();
    return invalid_argument("cannot listen on " + shared_->options.host + ":" + std::to_string(shared_->options.port) +
                            " (" + ec.message() + ")");
  }
  port_ = l.acceptor->local_endpoint().port();
  return Status::Ok();
}

void HttpListener::accept_next() {
  Loop& first = *loops_[0];
  if (!first.acceptor || !first.acceptor->is_open()) return;
  Loop* target = loops_[next_loop_++ % loops_.size()].get();
  first.acceptor->async_accept(target->io, [this, target](const boost::system::error_code& ec, tcp::socket socket) {
    if (shared_->stopping) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors (or another transient failure): pause instead
      // of spinning on a listen queue that stays ready.
      static std::atomic<int64_t> reported{0};
      if (reported++ % 1000 == 0) log_warn("accept failed: " + ec.message());
      auto pause = std::make_shared<asio::steady_timer>(loops_[0]->io, std::chrono::milliseconds(50));
      pause->async_wait([this, pause](const boost::system::error_code&) { accept_next(); });
      return;
    }
    Shared& s = *shared_;
    bool overflow = false;
    if (s.open.load() >= s.options.max_connections) {
      ++s.refused;
      if (s.overflow_open.load() >= s.options.overflow_connections) {
        // Refused at once: a reset, no lingering state.
        boost::system::error_code ignored;
        socket.set_option(asio::socket_base::linger(true, 0), ignored);
        socket.close(ignored);
        return accept_next();
      }
      overflow = true;
      ++s.overflow_open;
    }
    ++s.open;
    ++s.accepted;
    asio::post(target->io, [target, socket = std::move(socket), overflow]() mutable {
      std::make_shared<HttpConnection>(target, std::move(socket), overflow)->start();
    });
    accept_next();
  });
}

void HttpListener::serve() {
  if (!loops_[0]->acceptor) return;
  for (auto& l : loops_) schedule_sweep(l.get());
  accept_next();
  for (size_t i = 1; i < loops_.size(); ++i) {
    Loop* l = loops_[i].get();
    l->thread = std::thread([l] { l->io.run(); });
  }
  loops_[0]->io.run();
  for (size_t i = 1; i < loops_.size(); ++i)
    if (loops_[i]->thread.joinable()) loops_[i]->thread.join();
}

void HttpListener::stop(int drain_ms) {
  if (shared_->stopping.exchange(true)) return;
  const auto until = HttpConnection::Clock::now() + std::chrono::milliseconds(drain_ms);
  for (auto& lp : loops_) {
    Loop* l = lp.get();
    asio::post(l->io, [l, until] {
      if (l->acceptor) {
        boost::system::error_code ignored;
        l->acceptor->close(ignored);
      }
      l->stopping = true;
      l->drain_until = until;
      std::vector<HttpConnection*> all(l->connections.begin(), l->connections.end());
      for (HttpConnection* c : all) c->drain();
    });
  }
}

HttpStats HttpListener::stats() const {
  const Shared& s = *shared_;
  HttpStats st;
  st.open = s.open.load();
  st.accepted = s.accepted.load();
  st.refused = s.refused.load();
  st.requests = s.requests.load();
  st.malformed = s.malformed.load();
  st.idle_closed = s.idle_closed.load();
  st.head_timeouts = s.head_timeouts.load();
  st.body_timeouts = s.body_timeouts.load();
  st.write_timeouts = s.write_timeouts.load();
  st.slow_readers_cut = s.slow_readers_cut.load();
  st.clients_gone = s.clients_gone.load();
  return st;
}

}  // namespace dsv4
