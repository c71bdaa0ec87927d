#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <regex>

#include "base/logging.h"
#include "server/anthropic_messages.h"
#include "server/connection_watch.h"
#include "server/generation.h"
#include "server/openai_response.h"
#include "server/structured_output.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

// How often a waiting handler looks at its client's socket.
constexpr auto kWatchInterval = std::chrono::milliseconds(50);

// The routes and their methods (anything else on these paths is a 405).
struct Route {
  std::regex path;
  const char* methods;
};
const std::vector<Route>& routes() {
  static const std::vector<Route> r = {
      {std::regex("/health"), "GET"},
      {std::regex("/metrics"), "GET"},
      {std::regex("/v1/models"), "GET"},
      {std::regex("/v1/models/[^/]+"), "GET"},
      {std::regex("(/v1)?/tokenize"), "POST"},
      {std::regex("(/v1)?/detokenize"), "POST"},
      {std::regex("/v1/completions"), "POST"},
      {std::regex("/v1/chat/completions"), "POST"},
      {std::regex("/v1/messages"), "POST"},
  };
  return r;
}

std::vector<std::string> split_origins(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    std::string o = list.substr(at, comma - at);
    while (!o.empty() && o.back() == ' ') o.pop_back();
    while (!o.empty() && o.front() == ' ') o.erase(o.begin());
    if (!o.empty()) out.push_back(o);
    at = comma + 1;
  }
  return out;
}

// A started generation's events written as a stream (OpenAiStream or
// AnthropicStream); a client gone (a failed write, or a closed socket while
// nothing is written) aborts what still runs.
template <class Stream>
void stream_generation(httplib::Response& res, std::shared_ptr<Generation> gen, std::shared_ptr<Stream> stream,
                       std::shared_ptr<ConnectionWatch> watch, std::string rid) {
  struct State {
    bool started = false, ended = false;
  };
  auto st = std::make_shared<State>();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::vector<std::string>& events) {
          for (const std::string& e : events)
            if (!sink.write(e.data(), e.size())) return false;
          return true;
        };
        if (!st->started) {
          st->started = true;
          if (!write(stream->begin())) return false;
        }
        ChoiceUpdate u;
        const auto until = Clock::now() + std::chrono::seconds(1);
        while (!gen->done() && Clock::now() < until) {
          if (gen->next(&u, static_cast<int>(kWatchInterval.count()))) {
            if (!write(stream->update(u))) return false;
          } else if (watch->client_gone() || !sink.is_writable()) {
            return false;
          }
        }
        if (gen->done() && !st->ended) {
          st->ended = true;
          if (!write(stream->end())) return false;
          sink.done();
        }
        return true;
      },
      [=](bool success) {
        if (!success || !st->ended) {
          gen->abort();
          log_info(rid + ": client went away, request aborted");
        } else {
          log_info(rid + ": streamed, " + gen->summary());
        }
      });
}

// Waits for a generation to finish for a JSON answer; false when the client
// left first (the generation is then aborted).
bool wait_for(Generation& gen, const ConnectionWatch& watch) {
  ChoiceUpdate u;
  auto checked = Clock::now();
  while (!gen.done()) {
    gen.next(&u, static_cast<int>(kWatchInterval.count()));
    if (Clock::now() - checked < kWatchInterval) continue;
    checked = Clock::now();
    if (watch.client_gone()) {
      gen.abort();
      return false;
    }
  }
  return true;
}

// A submit refused by the engine service as the API error it means.
ApiError submit_error(const Status& st) {
  switch (st.code()) {
    case StatusCode::kResourceExhausted:
    case StatusCode::kOutOfRange:
      return api_error(503, st.message(), "", "", "server_error");
    default:
      return api_error(400, st.message(), "", "invalid_value");
  }
}

}  // namespace

HttpServer::HttpServer(EngineService* service, const Tokenizer* tokenizer, const HttpServerOptions& options)
    : service_(service),
      tokenizer_(tokenizer),
      options_(options),
      origins_(split_origins(options.allowed_origins)),
      http_(std::make_unique<httplib::Server>()) {
  served_.name = options.model_name;
  served_.tokenizer = tokenizer;
  served_.max_model_len = service->max_model_len();
  served_.vocab_size = service->config().vocab_size;
  const ModelConfig& config = service->config();
  structured_ = std::make_unique<StructuredOutputs>(
      grammar_vocabulary(*tokenizer, config.vocab_size, config.bos_token_id, config.eos_token_id));
  served_.structured = structured_.get();
  const int threads = options.threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options.max_body_bytes);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  install_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host.c_str());
    if (port_ <= 0) error_ = "cannot bind " + options_.host;
  } else {
    port_ = options_.port;
    if (!http_->bind_to_port(options_.host.c_str(), port_))
      error_ = "cannot listen on " + options_.host + ":" + std::to_string(port_) + " (in use?)";
  }
  return error_.empty();
}

void HttpServer::serve() { http_->listen_after_bind(); }
void HttpServer::stop() { http_->stop(); }

std::string HttpServer::next_id(const char* prefix) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%08llx", prefix, static_cast<unsigned long long>(next_request_.fetch_add(1)));
  return buf;
}

void HttpServer::send_error(httplib::Response& res, const ApiError& e, Api api) const {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(api == Api::kAnthropic ? anthropic_error_json(e) : e.to_json(), "application/json");
}

bool HttpServer::authorized(const httplib::Request& req, httplib::Response& res, Api api) {
  if (options_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) return true;
  if (req.get_header_value("x-api-key") == options_.api_key) return true;
  send_error(res,
             api_error(401, "invalid or missing API key (Authorization: Bearer KEY, or x-api-key: KEY)", "",
                       "invalid_api_key", "authentication_error"),
             api);
  return false;
}

bool HttpServer::before_routing(const httplib::Request& req, httplib::Response& res) {
  // CORS: allowed origins get the headers; a preflight is answered here.
  const std::string origin = req.get_header_value("Origin");
  bool allowed = false;
  for (const std::string& o : origins_) allowed |= o == "*" || o == origin;
  if (!origin.empty() && allowed) {
    res.set_header("Access-Control-Allow-Origin", origins_.size() == 1 && origins_[0] == "*" ? "*" : origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS") {
    if (!origin.empty() && !allowed) {
      send_error(res, api_error(403, "origin " + origin + " is not allowed (--allowed-origins)"), Api::kOpenAi);
      return true;
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, x-api-key" : asked);
    res.set_header("Access-Control-Max-Age", "600");
    return true;
  }
  for (const Route& r : routes()) {
    if (!std::regex_match(req.path, r.path)) continue;
    if (std::string(r.methods) == req.method || (req.method == "HEAD" && std::string(r.methods) == "GET")) return false;
    res.set_header("Allow", std::string(r.methods) + ", OPTIONS");
    send_error(res, api_error(405, req.method + " is not allowed on " + req.path + " (use " + r.methods + ")"),
               req.path == "/v1/messages" ? Api::kAnthropic : Api::kOpenAi);
    return true;
  }
  return false;
}

void HttpServer::install_routes() {
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return before_routing(req, res) ? httplib::Server::HandlerResponse::Handled
                                    : httplib::Server::HandlerResponse::Unhandled;
  });
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string msg = res.status == 404   ? "no such route: " + req.path
                            : res.status == 413 ? "the request body is too large"
                                                : "request failed";
    send_error(res, api_error(res.status, msg), req.path == "/v1/messages" ? Api::kAnthropic : Api::kOpenAi);
  });
  http_->set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log_error("request failed: " + what);
    send_error(res, api_error(500, what, "", "", "internal_error"),
               req.path == "/v1/messages" ? Api::kAnthropic : Api::kOpenAi);
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!service_->accepting()) {  // draining after SIGTERM: balancers stop sending
      res.status = 503;
      res.set_content(api_error(503, "the server is shutting down", "", "", "service_unavailable").to_json(), "application/json");
    } else if (!service_->healthy()) {
      res.status = 503;
      res.set_content(api_error(503, "a rank stopped answering", "", "", "service_unavailable").to_json(), "application/json");
    } else {
      res.set_content("", "text/plain");
    }
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(service_->snapshot()), "text/plain; version=0.0.4");
  });
  auto model_card = [this] {
    return ordered_json{{"id", served_.name},
                        {"object", "model"},
                        {"created", static_cast<int64_t>(std::time(nullptr))},
                        {"owned_by", "dsv4"},
                        {"max_model_len", served_.max_model_len}};
  };
  http_->Get("/v1/models", [this, model_card](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res, Api::kOpenAi)) return;
    res.set_content(dump({{"object", "list"}, {"data", ordered_json::array({model_card()})}}), "application/json");
  });
  http_->Get(R"(/v1/models/([^/]+))", [this, model_card](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res, Api::kOpenAi)) return;
    const std::string id = req.matches[1];
    if (id != served_.name)
      return send_error(res, api_error(404, "The model `" + id + "` does not exist. This server serves `" + served_.name + "`.",
                                       "model", "model_not_found"),
                        Api::kOpenAi);
    res.set_content(dump(model_card()), "application/json");
  });
  for (const char* path : {"/tokenize", "/v1/tokenize"})
    http_->Post(path, [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  for (const char* path : {"/detokenize", "/v1/detokenize"})
    http_->Post(path, [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res, Api::kOpenAi)) openai_generate(req, res, false);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res, Api::kOpenAi)) openai_generate(req, res, true);
  });
  http_->Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res, Api::kAnthropic)) anthropic_messages(req, res);
  });
}

// vLLM's /tokenize: a prompt, or messages rendered exactly as chat
// completions renders them.
void HttpServer::tokenize(const httplib::Request& req, httplib::Response& res) {
  ApiError e;
  auto body = parse_body(req.body, &e);
  if (!body) return send_error(res, e, Api::kOpenAi);
  std::string model;
  if (auto err = check_model(*body, served_, &model)) return send_error(res, *err, Api::kOpenAi);
  const bool strs = body->contains("return_token_strs") && (*body)["return_token_strs"].is_boolean() &&
                    (*body)["return_token_strs"].get<bool>();
  std::vector<int32_t> ids;
  if (body->contains("prompt") && (*body)["prompt"].is_string()) {
    ids = tokenizer_->encode((*body)["prompt"].get<std::string>());
    if (body->value("add_special_tokens", true) && tokenizer_->add_bos() && tokenizer_->bos_id() >= 0)
      ids.insert(ids.begin(), tokenizer_->bos_id());
  } else if (body->contains("messages")) {
    ChatRender rendered;
    if (auto err = render_chat(*body, &rendered)) return send_error(res, *err, Api::kOpenAi);
    ids = tokenizer_->encode(rendered.prompt);
  } else {
    return send_error(res, api_error(400, "give a string prompt or a messages array", "prompt", "missing_required_parameter"),
                      Api::kOpenAi);
  }
  ordered_json out = {{"count", ids.size()}, {"max_model_len", served_.max_model_len}, {"tokens", ids}};
  if (strs) {
    ordered_json t = ordered_json::array();
    for (int32_t id : ids) t.push_back(token_text(*tokenizer_, id));
    out["token_strs"] = t;
  } else {
    out["token_strs"] = nullptr;
  }
  res.set_content(dump(out), "application/json");
}

void HttpServer::detokenize(const httplib::Request& req, httplib::Response& res) {
  ApiError e;
  auto body = parse_body(req.body, &e);
  if (!body) return send_error(res, e, Api::kOpenAi);
  std::string model;
  if (auto err = check_model(*body, served_, &model)) return send_error(res, *err, Api::kOpenAi);
  if (!body->contains("tokens") || !(*body)["tokens"].is_array())
    return send_error(res, api_error(400, "tokens must be an array of token ids", "tokens"), Api::kOpenAi);
  std::vector<int32_t> ids;
  for (const auto& t : (*body)["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= served_.vocab_size)
      return send_error(res, api_error(400, "tokens must be integers in [0, " + std::to_string(served_.vocab_size) + ")", "tokens"),
                        Api::kOpenAi);
    ids.push_back(t.get<int32_t>());
  }
  std::string rest;
  std::string text = utf8_complete_prefix(tokenizer_->decode(ids), &rest);
  if (!rest.empty()) text += "\xEF\xBF\xBD";
  res.set_content(dump({{"prompt", text}}), "application/json");
}

void HttpServer::openai_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const char* endpoint = chat ? "chat" : "completions";
  ApiError err;
  auto body = parse_body(req.body, &err);
  PlanOrError planned;
  if (body) planned = chat ? plan_chat(*body, served_) : plan_completion(*body, served_);
  if (!body || !planned.plan) {
    metrics_.count_request(endpoint, "error");
    return send_error(res, body ? planned.error : err, Api::kOpenAi);
  }
  auto plan = std::make_shared<const GenerationPlan>(std::move(*planned.plan));
  GenerationSpec spec{plan->prompts, plan->n, plan->params, chat, plan->mode, plan->parse_tools, endpoint};
  auto started = Generation::start(service_, tokenizer_, std::move(spec), &metrics_);
  if (!started.ok()) {
    metrics_.count_request(endpoint, "error");
    return send_error(res, submit_error(started.status()), Api::kOpenAi);
  }
  std::shared_ptr<Generation> gen = std::move(*started);
  OpenAiContext ctx{next_id(chat ? "chatcmpl-" : "cmpl-"), static_cast<int64_t>(std::time(nullptr)), plan.get(), tokenizer_};
  log_info(ctx.id + ": " + std::to_string(gen->size()) + " choice(s), " + std::to_string(plan->prompts[0].size()) +
           " prompt tokens, max_tokens " + std::to_string(plan->params.max_tokens) + (plan->stream ? ", streaming" : ""));
  auto watch = std::make_shared<ConnectionWatch>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (plan->stream) {
    // The stream holds the plan it points to.
    struct Holder : OpenAiStream {
      Holder(OpenAiContext c, const Generation& g, std::shared_ptr<const GenerationPlan> p)
          : OpenAiStream(std::move(c), g), plan(std::move(p)) {}
      std::shared_ptr<const GenerationPlan> plan;
    };
    return stream_generation(res, gen, std::make_shared<Holder>(ctx, *gen, plan), watch, ctx.id);
  }
  if (!wait_for(*gen, *watch)) {
    log_info(ctx.id + ": client went away, request aborted");
    return;
  }
  log_info(ctx.id + ": done, " + gen->summary());
  res.set_content(dump(openai_body(ctx, *gen)), "application/json");
}

void HttpServer::anthropic_messages(const httplib::Request& req, httplib::Response& res) {
  ApiError err;
  auto body = parse_body(req.body, &err);
  PlanOrError planned;
  if (body) planned = plan_messages(*body, served_);
  if (!body || !planned.plan) {
    metrics_.count_request("messages", "error");
    return send_error(res, body ? planned.error : err, Api::kAnthropic);
  }
  auto plan = std::make_shared<const GenerationPlan>(std::move(*planned.plan));
  GenerationSpec spec{plan->prompts, 1, plan->params, true, plan->mode, plan->parse_tools, "messages"};
  auto started = Generation::start(service_, tokenizer_, std::move(spec), &metrics_);
  if (!started.ok()) {
    metrics_.count_request("messages", "error");
    return send_error(res, submit_error(started.status()), Api::kAnthropic);
  }
  std::shared_ptr<Generation> gen = std::move(*started);
  const std::string id = next_id("msg_");
  log_info(id + ": " + std::to_string(plan->prompts[0].size()) + " prompt tokens, max_tokens " +
           std::to_string(plan->params.max_tokens) + (plan->stream ? ", streaming" : ""));
  auto watch = std::make_shared<ConnectionWatch>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (plan->stream) {
    struct Holder : AnthropicStream {
      Holder(std::string i, std::shared_ptr<const GenerationPlan> p, const Generation& g)
          : AnthropicStream(std::move(i), *p, g), plan(std::move(p)) {}
      std::shared_ptr<const GenerationPlan> plan;
    };
    return stream_generation(res, gen, std::make_shared<Holder>(id, plan, *gen), watch, id);
  }
  if (!wait_for(*gen, *watch)) {
    log_info(id + ": client went away, request aborted");
    return;
  }
  log_info(id + ": done, " + gen->summary());
  res.set_content(dump(anthropic_body(id, *plan, *gen)), "application/json");
}

}  // namespace dsv4
