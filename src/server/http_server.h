// The OpenAI-compatible HTTP front: /v1/completions, /v1/chat/completions
// (JSON or SSE streams), /v1/models, /health, /metrics, /tokenize,
// /detokenize. A client that disconnects from a stream aborts its request;
// errors are OpenAI error objects with the matching status.
#pragma once

#include <atomic>
#include <memory>
#include <string>

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
  std::string api_key;             // when set, /v1/* need "Authorization: Bearer KEY"
  std::string model_name = "dsv4";
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
  void install_routes();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  bool authorized(const httplib::Request& req, httplib::Response& res);

  EngineService* service_;
  const Tokenizer* tokenizer_;
  HttpServerOptions options_;
  ServedModel served_;
  std::unique_ptr<httplib::Server> http_;
  Metrics metrics_;
  std::atomic<int64_t> next_request_{1};
  int port_ = 0;
  std::string error_;
};

}  // namespace dsv4
