#include "server/http_server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "base/logging.h"
#include "server/anthropic_messages.h"
#include "server/chat_page.h"
#include "server/generation_reply.h"
#include "server/openai_response.h"
#include "server/request_json.h"
#include "server/responses_api.h"
#include "server/structured_output.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

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

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The methods a known path takes ("" for a path we do not serve); *tail is
// what follows a collection's prefix (/v1/models/{tail}).
std::string methods_of(const std::string& path, std::string* tail) {
  static const std::vector<std::pair<std::string, std::string>> exact = {
      {"/", "GET"},
      {"/health", "GET"},
      {"/metrics", "GET"},
      {"/v1/models", "GET"},
      {"/tokenize", "POST"},
      {"/v1/tokenize", "POST"},
      {"/detokenize", "POST"},
      {"/v1/detokenize", "POST"},
      {"/v1/completions", "POST"},
      {"/v1/chat/completions", "POST"},
      {"/v1/messages", "POST"},
      {"/v1/responses", "POST"},
  };
  for (const auto& [p, m] : exact)
    if (path == p) return m;
  for (const auto& [prefix, m] : {std::pair<const char*, const char*>{"/v1/models/", "GET"}, {"/v1/responses/", "GET, DELETE"}}) {
    if (!starts_with(path, prefix) || path.size() == std::strlen(prefix)) continue;
    *tail = path.substr(std::strlen(prefix));
    if (std::string(prefix) == "/v1/responses/") {
      const size_t slash = tail->find('/');
      if (slash == std::string::npos) return m;
      const std::string what = tail->substr(slash + 1);
      if (what == "input_items") return "GET";
      if (what == "cancel") return "POST";
      return "";
    }
    return tail->find('/') == std::string::npos ? m : "";
  }
  return "";
}

bool method_allowed(const std::string& methods, const std::string& method) {
  size_t at = 0;
  while (at < methods.size()) {
    size_t comma = methods.find(", ", at);
    if (comma == std::string::npos) comma = methods.size();
    const std::string m = methods.substr(at, comma - at);
    if (m == method || (method == "HEAD" && m == "GET")) return true;
    at = comma + 2;
  }
  return false;
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

// The OpenAI and Anthropic renderers as reply formats (each holds the plan
// its renderer points into).
class OpenAiFormat : public ReplyFormat {
 public:
  OpenAiFormat(std::shared_ptr<const GenerationPlan> plan, OpenAiContext ctx, const Generation& gen)
      : plan_(std::move(plan)), ctx_(std::move(ctx)), gen_(gen), stream_(ctx_, gen) {}
  std::vector<std::string> begin() override { return stream_.begin(); }
  std::vector<std::string> update(const ChoiceUpdate& u) override { return stream_.update(u); }
  std::vector<std::string> end() override { return stream_.end(); }
  std::string body() override { return dump(openai_body(ctx_, gen_)); }

 private:
  std::shared_ptr<const GenerationPlan> plan_;
  OpenAiContext ctx_;
  const Generation& gen_;
  OpenAiStream stream_;
};

class AnthropicFormat : public ReplyFormat {
 public:
  AnthropicFormat(std::shared_ptr<const GenerationPlan> plan, std::string id, const Generation& gen)
      : plan_(std::move(plan)), id_(std::move(id)), gen_(gen), stream_(id_, *plan_, gen) {}
  std::vector<std::string> begin() override { return stream_.begin(); }
  std::vector<std::string> update(const ChoiceUpdate& u) override { return stream_.update(u); }
  std::vector<std::string> end() override { return stream_.end(); }
  std::string body() override { return dump(anthropic_body(id_, *plan_, gen_)); }

 private:
  std::shared_ptr<const GenerationPlan> plan_;
  std::string id_;
  const Generation& gen_;
  AnthropicStream stream_;
};

}  // namespace

HttpServer::HttpServer(EngineService* service, const Tokenizer* tokenizer, const HttpServerOptions& options)
    : service_(service),
      tokenizer_(tokenizer),
      options_(options),
      origins_(split_origins(options.allowed_origins)),
      responses_(std::make_unique<ResponseStore>(static_cast<size_t>(std::max(options.stored_responses, 1)))),
      handlers_(std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(std::max(options.handler_threads, 1)))) {
  served_.name = options.model_name;
  served_.tokenizer = tokenizer;
  served_.max_model_len = service->max_model_len();
  served_.vocab_size = service->config().vocab_size;
  const ModelConfig& config = service->config();
  served_.chat_format = config.family == ModelFamily::kV41 ? ChatFormat::kV41 : ChatFormat::kV4;
  structured_ = std::make_unique<StructuredOutputs>(
      grammar_vocabulary(*tokenizer, config.vocab_size, config.bos_token_id, config.eos_token_id), served_.chat_format);
  served_.structured = structured_.get();
  listener_ = std::make_unique<HttpListener>(
      options.http, [this](std::shared_ptr<HttpExchange> ex) { handle(ex); },
      [this](int status, const std::string& message, const std::string& target) {
        const Api api = starts_with(target, "/v1/messages") ? Api::kAnthropic : Api::kOpenAi;
        const std::string type = status == 503 ? "server_error" : status == 408 ? "timeout" : "invalid_request_error";
        return error_response(api_error(status, message, "", "", type), api);
      });
}

HttpServer::~HttpServer() {
  // Handler threads post to the listener's loops: they finish first.
  handlers_->join();
  listener_.reset();
}

Status HttpServer::bind() { return listener_->bind(); }
void HttpServer::serve() { listener_->serve(); }
void HttpServer::stop() { listener_->stop(); }

std::string HttpServer::next_id(const char* prefix) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%08llx", prefix, static_cast<unsigned long long>(next_request_.fetch_add(1)));
  return buf;
}

HttpHeaders HttpServer::cors_headers(const HttpRequest& req) const {
  const std::string origin = req.header("Origin");
  if (origin.empty()) return {};
  bool allowed = false;
  for (const std::string& o : origins_) allowed |= o == "*" || o == origin;
  if (!allowed) return {};
  return {{"Access-Control-Allow-Origin", origins_.size() == 1 && origins_[0] == "*" ? "*" : origin}, {"Vary", "Origin"}};
}

HttpResponse HttpServer::json_response(std::string body, int status) const {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse HttpServer::error_response(const ApiError& e, Api api) const {
  HttpResponse r = json_response(api == Api::kAnthropic ? anthropic_error_json(e) : e.to_json(), e.status);
  if (e.status == 503) r.set_header("Retry-After", "1");
  return r;
}

void HttpServer::respond(const ExchangePtr& ex, HttpResponse r) const {
  for (auto& [k, v] : cors_headers(ex->request())) r.set_header(k, v);
  ex->respond(std::move(r));
}

void HttpServer::respond_later(const ExchangePtr& ex, HttpResponse r) const {
  ex->post([this, ex, r = std::move(r)]() mutable { respond(ex, std::move(r)); });
}

bool HttpServer::authorized(const ExchangePtr& ex, Api api) {
  if (options_.api_key.empty()) return true;
  const HttpRequest& req = ex->request();
  if (req.header("Authorization") == "Bearer " + options_.api_key) return true;
  if (req.header("x-api-key") == options_.api_key) return true;
  respond(ex, error_response(api_error(401, "invalid or missing API key (Authorization: Bearer KEY, or x-api-key: KEY)", "",
                                       "invalid_api_key", "authentication_error"),
                             api));
  return false;
}

void HttpServer::offload(const ExchangePtr& ex, Api api, std::function<void()> fn) {
  boost::asio::post(*handlers_, [this, ex, api, fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      log_error("request failed: " + std::string(e.what()));
      respond_later(ex, error_response(api_error(500, e.what(), "", "", "internal_error"), api));
    }
  });
}

void HttpServer::handle(const ExchangePtr& ex) {
  const HttpRequest& req = ex->request();
  const Api api = starts_with(req.path, "/v1/messages") ? Api::kAnthropic : Api::kOpenAi;
  std::string tail;
  const std::string methods = methods_of(req.path, &tail);
  if (req.method == "OPTIONS") {  // CORS preflight
    const std::string origin = req.header("Origin");
    if (!origin.empty() && cors_headers(req).empty())
      return respond(ex, error_response(api_error(403, "origin " + origin + " is not allowed (--allowed-origins)"), api));
    HttpResponse r;
    r.status = 204;
    r.content_type.clear();
    r.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    const std::string asked = req.header("Access-Control-Request-Headers");
    r.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, x-api-key" : asked);
    r.set_header("Access-Control-Max-Age", "600");
    return respond(ex, std::move(r));
  }
  if (methods.empty()) return respond(ex, error_response(api_error(404, "no such route: " + req.path), api));
  if (!method_allowed(methods, req.method)) {
    HttpResponse r = error_response(api_error(405, req.method + " is not allowed on " + req.path + " (use " + methods + ")"), api);
    r.set_header("Allow", methods + ", OPTIONS");
    return respond(ex, std::move(r));
  }
  const std::string& p = req.path;
  if (p == "/") {
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = std::string(chat_page_html());
    r.set_header("Cache-Control", "no-cache");
    return respond(ex, std::move(r));
  }
  if (p == "/health") {
    if (!service_->accepting())  // draining after SIGTERM: balancers stop sending
      return respond(ex, error_response(api_error(503, "the server is shutting down", "", "", "service_unavailable"), api));
    if (!service_->healthy())
      return respond(ex, error_response(api_error(503, "a rank stopped answering", "", "", "service_unavailable"), api));
    HttpResponse r;
    r.content_type = "text/plain";
    return respond(ex, std::move(r));
  }
  if (p == "/metrics") {  // a page of text, and a walk over the process's descriptors: not on the I/O thread
    return offload(ex, api, [this, ex] {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = metrics_.render(service_->snapshot()) + Metrics::render_http(listener_->stats());
      respond_later(ex, std::move(r));
    });
  }
  if (starts_with(p, "/v1/") && !authorized(ex, api)) return;
  if (p == "/v1/models" || starts_with(p, "/v1/models/")) {
    const ordered_json card = {{"id", served_.name},
                               {"object", "model"},
                               {"created", static_cast<int64_t>(std::time(nullptr))},
                               {"owned_by", "dsv4"},
                               {"max_model_len", served_.max_model_len}};
    if (p == "/v1/models") return respond(ex, json_response(dump({{"object", "list"}, {"data", ordered_json::array({card})}})));
    if (tail != served_.name)
      return respond(ex, error_response(api_error(404, "The model `" + tail + "` does not exist. This server serves `" +
                                                           served_.name + "`.",
                                                       "model", "model_not_found"),
                                        api));
    return respond(ex, json_response(dump(card)));
  }
  if (p == "/tokenize" || p == "/v1/tokenize") return offload(ex, api, [this, ex] { tokenize(ex); });
  if (p == "/detokenize" || p == "/v1/detokenize") return offload(ex, api, [this, ex] { detokenize(ex); });
  if (p == "/v1/completions") return offload(ex, api, [this, ex] { generate(ex, "completions"); });
  if (p == "/v1/chat/completions") return offload(ex, api, [this, ex] { generate(ex, "chat"); });
  if (p == "/v1/messages") return offload(ex, api, [this, ex] { generate(ex, "messages"); });
  if (p == "/v1/responses") return offload(ex, api, [this, ex] { responses_create(ex); });
  // /v1/responses/{id}[/input_items|/cancel]
  const size_t slash = tail.find('/');
  const std::string id = tail.substr(0, slash);
  const std::string what = slash == std::string::npos ? "" : tail.substr(slash + 1);
  if (req.method == "DELETE") return responses_delete(ex, id);
  return responses_get(ex, id, what);
}

// vLLM's /tokenize: a prompt, or messages rendered exactly as chat
// completions renders them.
void HttpServer::tokenize(const ExchangePtr& ex) {
  ApiError e;
  auto body = parse_body(ex->request().body, &e);
  if (!body) return respond_later(ex, error_response(e, Api::kOpenAi));
  std::string model;
  if (auto err = check_model(*body, served_, &model)) return respond_later(ex, error_response(*err, Api::kOpenAi));
  const bool strs = body->contains("return_token_strs") && (*body)["return_token_strs"].is_boolean() &&
                    (*body)["return_token_strs"].get<bool>();
  std::vector<int32_t> ids;
  if (body->contains("prompt") && (*body)["prompt"].is_string()) {
    if (given(*body, "add_special_tokens") && !(*body)["add_special_tokens"].is_boolean())
      return respond_later(ex, error_response(api_error(400, "add_special_tokens must be true or false",
                                                        "add_special_tokens", "invalid_type"),
                                              Api::kOpenAi));
    ids = tokenizer_->encode((*body)["prompt"].get<std::string>());
    const bool special = !given(*body, "add_special_tokens") || (*body)["add_special_tokens"].get<bool>();
    if (special && tokenizer_->add_bos() && tokenizer_->bos_id() >= 0)
      ids.insert(ids.begin(), tokenizer_->bos_id());
  } else if (body->contains("messages")) {
    ChatRender rendered;
    if (auto err = render_chat(*body, served_.chat_format, &rendered))
      return respond_later(ex, error_response(*err, Api::kOpenAi));
    ids = tokenizer_->encode(rendered.prompt);
  } else {
    return respond_later(ex, error_response(api_error(400, "give a string prompt or a messages array", "prompt",
                                                      "missing_required_parameter"),
                                            Api::kOpenAi));
  }
  ordered_json out = {{"count", ids.size()}, {"max_model_len", served_.max_model_len}, {"tokens", ids}};
  if (strs) {
    ordered_json t = ordered_json::array();
    for (int32_t id : ids) t.push_back(token_text(*tokenizer_, id));
    out["token_strs"] = t;
  } else {
    out["token_strs"] = nullptr;
  }
  respond_later(ex, json_response(dump(out)));
}

void HttpServer::detokenize(const ExchangePtr& ex) {
  ApiError e;
  auto body = parse_body(ex->request().body, &e);
  if (!body) return respond_later(ex, error_response(e, Api::kOpenAi));
  std::string model;
  if (auto err = check_model(*body, served_, &model)) return respond_later(ex, error_response(*err, Api::kOpenAi));
  if (!body->contains("tokens") || !(*body)["tokens"].is_array())
    return respond_later(ex, error_response(api_error(400, "tokens must be an array of token ids", "tokens"), Api::kOpenAi));
  std::vector<int32_t> ids;
  for (const auto& t : (*body)["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= served_.vocab_size)
      return respond_later(ex, error_response(api_error(400, "tokens must be integers in [0, " +
                                                                 std::to_string(served_.vocab_size) + ")",
                                                             "tokens"),
                                              Api::kOpenAi));
    ids.push_back(t.get<int32_t>());
  }
  std::string rest;
  std::string text = utf8_complete_prefix(tokenizer_->decode(ids), &rest);
  if (!rest.empty()) text += "\xEF\xBF\xBD";
  respond_later(ex, json_response(dump({{"prompt", text}})));
}

void HttpServer::generate(const ExchangePtr& ex, const std::string& endpoint) {
  const bool chat = endpoint == "chat", messages = endpoint == "messages";
  const Api api = messages ? Api::kAnthropic : Api::kOpenAi;
  ApiError err;
  auto body = parse_body(ex->request().body, &err);
  PlanOrError planned;
  if (body) planned = messages ? plan_messages(*body, served_) : chat ? plan_chat(*body, served_) : plan_completion(*body, served_);
  if (!body || !planned.plan) {
    metrics_.count_request(endpoint, "error");
    return respond_later(ex, error_response(body ? planned.error : err, api));
  }
  auto plan = std::make_shared<const GenerationPlan>(std::move(*planned.plan));
  GenerationSpec spec{plan->prompts, plan->n, plan->params, chat || messages, plan->mode, plan->parse_tools, endpoint};
  ReplyOptions ro;
  ro.stream = plan->stream;
  ro.headers = cors_headers(ex->request());
  GenerationReply::FormatMaker make;
  if (messages) {
    ro.id = next_id("msg_");
    make = [plan, id = ro.id](const Generation& g) { return std::make_unique<AnthropicFormat>(plan, id, g); };
  } else {
    ro.id = next_id(chat ? "chatcmpl-" : "cmpl-");
    const OpenAiContext ctx{ro.id, static_cast<int64_t>(std::time(nullptr)), plan.get(), tokenizer_};
    make = [plan, ctx](const Generation& g) { return std::make_unique<OpenAiFormat>(plan, ctx, g); };
  }
  const Status st = GenerationReply::start(ex, service_, tokenizer_, std::move(spec), &metrics_, std::move(make), ro);
  if (!st.ok()) {
    metrics_.count_request(endpoint, "error");
    respond_later(ex, error_response(submit_error(st), api));
  }
}

void HttpServer::responses_create(const ExchangePtr& ex) {
  ApiError err;
  auto body = parse_body(ex->request().body, &err);
  ResponsePlanOrError planned;
  if (body) planned = plan_response(*body, served_, *responses_);
  if (!body || !planned.plan) {
    metrics_.count_request("responses", "error");
    return respond_later(ex, error_response(body ? planned.error : err, Api::kOpenAi));
  }
  auto plan = std::make_shared<const ResponsePlan>(std::move(*planned.plan));
  const GenerationPlan& g = plan->generation;
  GenerationSpec spec{g.prompts, 1, g.params, true, g.mode, g.parse_tools, "responses"};
  ReplyOptions ro;
  ro.stream = g.stream;
  ro.headers = cors_headers(ex->request());
  ro.id = next_id("resp_");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  ResponseStore* store = responses_.get();
  auto make = [plan, id = ro.id, created, store](const Generation& gen) {
    return std::make_unique<ResponsesFormat>(plan, id, created, gen, store);
  };
  const Status st = GenerationReply::start(ex, service_, tokenizer_, std::move(spec), &metrics_, std::move(make), ro);
  if (!st.ok()) {
    metrics_.count_request("responses", "error");
    respond_later(ex, error_response(submit_error(st), Api::kOpenAi));
  }
}

void HttpServer::responses_get(const ExchangePtr& ex, const std::string& id, const std::string& what) {
  if (what == "cancel")
    return respond(ex, error_response(api_error(400, "only background responses can be cancelled, and this server runs none "
                                                     "(background: true is not supported)",
                                                "response_id"),
                                      Api::kOpenAi));
  auto entry = responses_->get(id);
  if (!entry) return respond(ex, error_response(response_not_found(id), Api::kOpenAi));
  if (what == "input_items") return respond(ex, json_response(dump(input_items_list(*entry))));
  respond(ex, json_response(dump(entry->response)));
}

void HttpServer::responses_delete(const ExchangePtr& ex, const std::string& id) {
  if (!responses_->erase(id)) return respond(ex, error_response(response_not_found(id), Api::kOpenAi));
  respond(ex, json_response(dump({{"id", id}, {"object", "response"}, {"deleted", true}})));
}

}  // namespace dsv4
