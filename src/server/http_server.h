// The HTTP front: OpenAI's /v1/completions and /v1/chat/completions,
// Anthropic's /v1/messages (JSON or SSE streams, both over a Generation),
// /v1/models[/{id}], /health, /metrics, /tokenize and /detokenize (also
// under /v1). A client that goes away, streaming or not, aborts its
// request; errors are each API's error objects with the matching status;
// CORS for browser clients.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "server/engine_service.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dsv4 {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (see port())
  std::string api_key;             // when set, /v1/* need "Authorization: Bearer KEY" or "x-api-key: KEY"
  std::string model_name = "dsv4";
  std::string allowed_origins = "*";  // CORS: comma-separated origins, or * for any
  int threads = 128;               // concurrent connections served
  size_t max_body_bytes = 32u << 20;
};

class HttpServer {
 public:
  HttpServer(EngineService* service, const Tokenizer* tokenizer, const HttpServerOptions& options);
  ~HttpServer();

  // Binds; false (with a message in error()) when the address is taken.
  bool bind();
  int port() const { return port_; }
  // Serves until stop().
  void serve();
  void stop();
  const std::string& error() const { return error_; }

 private:
  enum class Api { kOpenAi, kAnthropic };
  void install_routes();
  // CORS headers and preflight, and 405 for a known path's wrong method.
  bool before_routing(const httplib::Request& req, httplib::Response& res);
  void openai_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void anthropic_messages(const httplib::Request& req, httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  bool authorized(const httplib::Request& req, httplib::Response& res, Api api);
  void send_error(httplib::Response& res, const ApiError& e, Api api) const;
  // An id like "chatcmpl-0000002a".
  std::string next_id(const char* prefix);

  EngineService* service_;
  const Tokenizer* tokenizer_;
  HttpServerOptions options_;
  std::vector<std::string> origins_;
  std::unique_ptr<StructuredOutputs> structured_;
  ServedModel served_;
  std::unique_ptr<httplib::Server> http_;
  Metrics metrics_;
  std::atomic<int64_t> next_request_{1};
  int port_ = 0;
  std::string error_;
};

}  // namespace dsv4
