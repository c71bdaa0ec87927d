// The API over the HTTP front end: OpenAI's /v1/completions,
// /v1/chat/completions and /v1/responses, Anthropic's /v1/messages (JSON or
// SSE streams, all over a Generation), /v1/models[/{id}], /health,
// /metrics, /tokenize and /detokenize (also under /v1), and the chat page
// at /. Routing and the cheap answers run on the I/O threads; /metrics,
// /tokenize and reading a generation request (JSON, chat template,
// tokenizer, grammar) run on a few handler threads; a generation's tokens
// reach the client without any thread waiting for them
// (generation_reply.h). A client that goes away, streaming or not, aborts
// its request; errors are each API's error objects with the matching
// status; CORS for browser clients.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "http/http_listener.h"
#include "server/engine_service.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace boost::asio {
class thread_pool;
}

namespace dsv4 {

class ResponseStore;

struct HttpServerOptions {
  HttpListenerOptions http;  // address, I/O threads, limits, deadlines
  std::string api_key;       // when set, /v1/* need "Authorization: Bearer KEY" or "x-api-key: KEY"
  std::string model_name = "dsv4";
  std::string allowed_origins = "*";  // CORS: comma-separated origins, or * for any
  int handler_threads = 2;            // read generation requests off the I/O threads
  int stored_responses = 1024;        // /v1/responses kept for GET and previous_response_id (oldest dropped)
};

class HttpServer {
 public:
  HttpServer(EngineService* service, const Tokenizer* tokenizer, const HttpServerOptions& options);
  ~HttpServer();

  Status bind();
  int port() const { return listener_->port(); }
  // Serves until stop().
  void serve();
  void stop();
  HttpStats http_stats() const { return listener_->stats(); }

 private:
  enum class Api { kOpenAi, kAnthropic };
  using ExchangePtr = std::shared_ptr<HttpExchange>;

  // On the I/O thread: CORS, routing, the answers that cost nothing.
  void handle(const ExchangePtr& ex);
  // Runs fn on a handler thread (an exception becomes a 500).
  void offload(const ExchangePtr& ex, Api api, std::function<void()> fn);
  void generate(const ExchangePtr& ex, const std::string& endpoint);
  void tokenize(const ExchangePtr& ex);
  void detokenize(const ExchangePtr& ex);
  void responses_create(const ExchangePtr& ex);
  void responses_get(const ExchangePtr& ex, const std::string& id, const std::string& what);
  void responses_delete(const ExchangePtr& ex, const std::string& id);
  bool authorized(const ExchangePtr& ex, Api api);

  // Answers: now (on the I/O thread) or from a handler thread; both add
  // the CORS headers the request's origin gets.
  void respond(const ExchangePtr& ex, HttpResponse r) const;
  void respond_later(const ExchangePtr& ex, HttpResponse r) const;
  HttpResponse json_response(std::string body, int status = 200) const;
  HttpResponse error_response(const ApiError& e, Api api) const;
  HttpHeaders cors_headers(const HttpRequest& req) const;
  // An id like "chatcmpl-0000002a".
  std::string next_id(const char* prefix);

  EngineService* service_;
  const Tokenizer* tokenizer_;
  HttpServerOptions options_;
  std::vector<std::string> origins_;
  std::unique_ptr<StructuredOutputs> structured_;
  std::unique_ptr<ResponseStore> responses_;
  ServedModel served_;
  Metrics metrics_;
  std::atomic<int64_t> next_request_{1};
  std::unique_ptr<boost::asio::thread_pool> handlers_;
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace dsv4
