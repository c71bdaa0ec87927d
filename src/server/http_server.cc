#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "base/logging.h"
#include "server/choice_text.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.to_json(), "application/json");
}

ApiError make_error(int status, std::string message, std::string type = "invalid_request_error") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  return e;
}

// A token's text for logprobs (lossy where it splits a UTF-8 character).
std::string token_text(const Tokenizer& tok, int32_t id) {
  std::string rest;
  std::string t = utf8_complete_prefix(tok.token_bytes(id), &rest);
  if (!rest.empty()) t += "\xEF\xBF\xBD";
  return t;
}

ordered_json bytes_of(const std::string& s) {
  ordered_json a = ordered_json::array();
  for (unsigned char c : s) a.push_back(c);
  return a;
}

// Per-choice state of one HTTP request.
struct Choice {
  int64_t engine_id = -1;
  std::unique_ptr<ChoiceText> text;
  bool finished = false;
  std::string finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;                      // of the prompt, from the prefix cache
  int64_t drafts_proposed = 0, drafts_accepted = 0;  // speculative decoding
  std::vector<SampledToken> logprobs;
  std::vector<int32_t> tokens;
  Clock::time_point last_token;
  bool sent_role = false;
};

}  // namespace

HttpServer::HttpServer(EngineService* service, const Tokenizer* tokenizer, const HttpServerOptions& options)
    : service_(service), tokenizer_(tokenizer), options_(options), http_(std::make_unique<httplib::Server>()) {
  served_.name = options.model_name;
  served_.tokenizer = tokenizer;
  served_.max_model_len = service->max_model_len();
  served_.vocab_size = service->config().vocab_size;
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

bool HttpServer::authorized(const httplib::Request& req, httplib::Response& res) {
  if (options_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) return true;
  send_error(res, make_error(401, "invalid or missing API key (Authorization: Bearer ...)", "authentication_error"));
  return false;
}

void HttpServer::install_routes() {
  http_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string msg = res.status == 404 ? "no such route" : res.status == 413 ? "the request body is too large"
                                                                                   : "request failed";
    send_error(res, make_error(res.status, msg));
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log_error("request failed: " + what);
    send_error(res, make_error(500, what, "internal_error"));
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (service_->healthy()) {
      res.set_content("", "text/plain");
      return;
    }
    res.status = 503;
    res.set_content(R"({"error":{"message":"a rank stopped answering","type":"service_unavailable","code":503}})",
                    "application/json");
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(service_->snapshot()), "text/plain; version=0.0.4");
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    ordered_json m = {{"id", served_.name},
                      {"object", "model"},
                      {"created", static_cast<int64_t>(std::time(nullptr))},
                      {"owned_by", "dsv4"},
                      {"max_model_len", served_.max_model_len}};
    res.set_content(dump({{"object", "list"}, {"data", ordered_json::array({m})}}), "application/json");
  });
  http_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    ApiError e;
    auto body = parse_body(req.body, &e);
    if (!body) return send_error(res, e);
    std::vector<int32_t> ids;
    if (body->contains("prompt") && (*body)["prompt"].is_string()) {
      ids = tokenizer_->encode((*body)["prompt"].get<std::string>());
      if (body->value("add_special_tokens", true) && tokenizer_->add_bos() && tokenizer_->bos_id() >= 0)
        ids.insert(ids.begin(), tokenizer_->bos_id());
    } else if (body->contains("messages") && (*body)["messages"].is_array()) {
      auto prompt = encode_chat((*body)["messages"], ChatOptions{});
      if (!prompt.ok()) return send_error(res, make_error(400, prompt.status().message()));
      ids = tokenizer_->encode(*prompt);
    } else {
      return send_error(res, make_error(400, "give a string prompt or a messages array"));
    }
    res.set_content(dump({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", served_.max_model_len}}),
                    "application/json");
  });
  http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    ApiError e;
    auto body = parse_body(req.body, &e);
    if (!body) return send_error(res, e);
    if (!body->contains("tokens") || !(*body)["tokens"].is_array())
      return send_error(res, make_error(400, "tokens must be an array of token ids"));
    std::vector<int32_t> ids;
    for (const auto& t : (*body)["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= served_.vocab_size)
        return send_error(res, make_error(400, "tokens must be integers in [0, " + std::to_string(served_.vocab_size) + ")"));
      ids.push_back(t.get<int32_t>());
    }
    std::string rest;
    std::string text = utf8_complete_prefix(tokenizer_->decode(ids), &rest);
    if (!rest.empty()) text += "\xEF\xBF\xBD";
    res.set_content(dump({{"prompt", text}}), "application/json");
  });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) generate(req, res, false);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) generate(req, res, true);
  });
}

void HttpServer::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const char* endpoint = chat ? "chat" : "completions";
  const auto arrival = Clock::now();
  ApiError err;
  auto body = parse_body(req.body, &err);
  if (!body) {
    metrics_.count_request(endpoint, "error");
    return send_error(res, err);
  }
  PlanOrError planned = chat ? plan_chat(*body, served_) : plan_completion(*body, served_);
  if (!planned.plan) {
    metrics_.count_request(endpoint, "error");
    return send_error(res, planned.error);
  }
  const GenerationPlan plan = std::move(*planned.plan);
  char idbuf[32];
  std::snprintf(idbuf, sizeof idbuf, "%s-%08llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(next_request_.fetch_add(1)));
  const std::string rid = idbuf;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));

  // One engine request per prompt and choice; they report to one channel.
  auto channel = std::make_shared<EventChannel>();
  auto choices = std::make_shared<std::vector<Choice>>(plan.prompts.size() * plan.n);
  std::vector<int32_t> skip = {tokenizer_->bos_id(), tokenizer_->eos_id(), service_->config().eos_token_id};
  for (size_t i = 0; i < choices->size(); ++i) {
    const auto& prompt = plan.prompts[i / plan.n];
    SamplingParams p = plan.params;
    if (p.seed) p.seed = *p.seed + i % plan.n;  // n choices differ, and repeat with the seed
    auto id = service_->submit(prompt, p, channel, static_cast<int>(i));
    if (!id.ok()) {
      for (size_t k = 0; k < i; ++k) service_->finish((*choices)[k].engine_id, FinishReason::kAbort);
      metrics_.count_request(endpoint, "error");
      const int status = id.status().code() == StatusCode::kResourceExhausted ? 503
                         : id.status().code() == StatusCode::kOutOfRange      ? 503
                                                                              : 400;
      return send_error(res, make_error(status, id.status().message(), status == 503 ? "server_error" : "invalid_request_error"));
    }
    Choice& c = (*choices)[i];
    c.engine_id = *id;
    c.prompt_tokens = static_cast<int64_t>(prompt.size());
    c.last_token = arrival;
    c.text = std::make_unique<ChoiceText>(tokenizer_, plan.params.stop, skip, chat, plan.mode, plan.parse_tools);
  }
  log_info(rid + ": " + std::to_string(choices->size()) + " choice(s), " + std::to_string(plan.prompts[0].size()) +
           " prompt tokens, max_tokens " + std::to_string(plan.params.max_tokens) + (plan.stream ? ", streaming" : ""));

  // Applies one engine event to its choice; returns its text delta.
  auto apply = [this, choices, plan, arrival](const ChoiceEvent& ev, TextDelta* delta) {
    Choice& c = (*choices)[ev.choice];
    if (c.finished) return false;
    *delta = TextDelta{};
    const RequestOutput& o = ev.output;
    if (!o.new_tokens.empty()) {
      const auto now = Clock::now();
      if (c.tokens.empty()) {
        metrics_.observe_ttft(std::chrono::duration<double>(now - arrival).count());
      } else {  // a step may bring several tokens (speculative decoding): the interval is theirs
        const double each = std::chrono::duration<double>(now - c.last_token).count() / o.new_tokens.size();
        for (size_t i = 0; i < o.new_tokens.size(); ++i) metrics_.observe_time_per_output_token(each);
      }
      c.last_token = now;
    }
    if (o.prompt_tokens > 0) {  // from an engine step (not a cancellation)
      c.cached_tokens = o.cached_tokens;
      c.drafts_proposed = o.drafts_proposed;
      c.drafts_accepted = o.drafts_accepted;
    }
    // Token by token: when a stop string ends inside a step's tokens (a
    // speculative step brings several), the ones after it are not output.
    size_t kept = 0;
    while (kept < o.new_tokens.size() && !c.text->stopped()) {
      const TextDelta d = c.text->add({o.new_tokens[kept++]});
      delta->reasoning += d.reasoning;
      delta->content += d.content;
    }
    c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.begin() + kept);
    c.logprobs.insert(c.logprobs.end(), o.new_logprobs.begin(),
                      o.new_logprobs.begin() + std::min(kept, o.new_logprobs.size()));
    c.completion_tokens = static_cast<int64_t>(c.tokens.size());
    bool done = o.finished;
    if (!done && c.text->stopped()) {  // a stop string: end it here
      service_->finish(c.engine_id, FinishReason::kStop);
      done = true;
      c.finish_reason = "stop";
    } else if (done) {
      c.finish_reason = c.text->stopped() ? "stop" : finish_reason_name(o.finish_reason);
    }
    if (done) {
      c.finished = true;
      const TextDelta tail = c.text->finish();
      delta->reasoning += tail.reasoning;
      delta->content += tail.content;
      if (!c.text->tool_calls().empty()) c.finish_reason = "tool_calls";
    }
    return true;
  };
  // The usage object: prompt (each choice's prompt once), completion and
  // cached tokens.
  auto usage = [choices] {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (const Choice& c : *choices) {
      prompt += c.prompt_tokens;
      completion += c.completion_tokens;
      cached += c.cached_tokens;
    }
    return ordered_json{{"prompt_tokens", prompt},
                        {"completion_tokens", completion},
                        {"total_tokens", prompt + completion},
                        {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  };
  // Per-request log line: tokens, and what the prefix cache and the drafts did.
  auto summary = [choices] {
    int64_t completion = 0, cached = 0, proposed = 0, accepted = 0;
    for (const Choice& c : *choices) {
      completion += c.completion_tokens;
      cached += c.cached_tokens;
      proposed += c.drafts_proposed;
      accepted += c.drafts_accepted;
    }
    std::string s = std::to_string(completion) + " tokens";
    if (cached) s += ", " + std::to_string(cached) + " prompt tokens cached";
    if (proposed) s += ", " + std::to_string(accepted) + "/" + std::to_string(proposed) + " draft tokens accepted";
    return s;
  };
  auto logprobs_json = [this, chat](const Choice& c) -> ordered_json {
    if (chat) {
      ordered_json content = ordered_json::array();
      for (size_t i = 0; i < c.logprobs.size(); ++i) {
        const SampledToken& t = c.logprobs[i];
        ordered_json top = ordered_json::array();
        for (const auto& [id, lp] : t.top) {
          const std::string s = token_text(*tokenizer_, id);
          top.push_back({{"token", s}, {"logprob", lp}, {"bytes", bytes_of(tokenizer_->token_bytes(id))}});
        }
        const std::string s = token_text(*tokenizer_, t.token);
        content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(tokenizer_->token_bytes(t.token))},
                           {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    ordered_json tokens = ordered_json::array(), lps = ordered_json::array(), tops = ordered_json::array(),
                 offsets = ordered_json::array();
    int64_t offset = 0;
    for (const SampledToken& t : c.logprobs) {
      const std::string s = token_text(*tokenizer_, t.token);
      tokens.push_back(s);
      lps.push_back(t.logprob);
      ordered_json top = ordered_json::object();
      for (const auto& [id, lp] : t.top) top[token_text(*tokenizer_, id)] = lp;
      tops.push_back(top);
      offsets.push_back(offset);
      offset += static_cast<int64_t>(s.size());
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  };
  auto tool_calls_json = [rid](const Choice& c, bool with_index) {
    ordered_json calls = ordered_json::array();
    for (size_t k = 0; k < c.text->tool_calls().size(); ++k) {
      const ParsedToolCall& t = c.text->tool_calls()[k];
      ordered_json call = ordered_json::object();
      if (with_index) call["index"] = k;
      call["id"] = "call_" + rid.substr(rid.find('-') + 1) + "_" + std::to_string(k);
      call["type"] = "function";
      call["function"] = {{"name", t.name}, {"arguments", t.arguments}};
      calls.push_back(call);
    }
    return calls;
  };
  auto finish_metrics = [this, choices, endpoint, usage] {
    const ordered_json u = usage();
    metrics_.add_tokens(u["prompt_tokens"].get<int64_t>(), u["completion_tokens"].get<int64_t>());
    for (const Choice& c : *choices) metrics_.count_request(endpoint, c.finish_reason.empty() ? "abort" : c.finish_reason);
  };

  if (!plan.stream) {
    size_t done = 0;
    ChoiceEvent ev;
    TextDelta delta;
    while (done < choices->size()) {
      if (!channel->pop(&ev, 1000)) continue;
      if (apply(ev, &delta) && (*choices)[ev.choice].finished) ++done;
    }
    ordered_json out_choices = ordered_json::array();
    for (size_t i = 0; i < choices->size(); ++i) {
      const Choice& c = (*choices)[i];
      ordered_json lp = plan.logprobs ? logprobs_json(c) : ordered_json();
      if (chat) {
        ordered_json msg = {{"role", "assistant"}, {"content", c.text->content()}};
        if (plan.mode == ChatMode::kThinking) msg["reasoning_content"] = c.text->reasoning();
        if (!c.text->tool_calls().empty()) msg["tool_calls"] = tool_calls_json(c, false);
        out_choices.push_back({{"index", i}, {"message", msg}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
      } else {
        std::string text = c.text->content();
        if (plan.echo) text = tokenizer_->decode(plan.prompts[i / plan.n]) + text;
        out_choices.push_back({{"index", i}, {"text", text}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
      }
    }
    ordered_json out = {{"id", rid},
                        {"object", chat ? "chat.completion" : "text_completion"},
                        {"created", created},
                        {"model", plan.model},
                        {"choices", out_choices},
                        {"usage", usage()}};
    finish_metrics();
    log_info(rid + ": done, " + summary());
    res.set_content(dump(out), "application/json");
    return;
  }

  // Streaming: Server-Sent Events, one chunk per choice delta.
  struct Stream {
    bool started = false, ended = false;
    size_t done = 0;
  };
  auto st = std::make_shared<Stream>();
  auto chunk = [rid, created, chat, plan](const ordered_json& choice_obj) {
    ordered_json j = {{"id", rid},
                      {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created},
                      {"model", plan.model},
                      {"choices", ordered_json::array({choice_obj})}};
    return "data: " + dump(j) + "\n\n";
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=, this](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (!st->started) {
          st->started = true;
          if (chat)
            for (size_t i = 0; i < choices->size(); ++i)
              if (!write(chunk({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}})))
                return false;
        }
        ChoiceEvent ev;
        TextDelta d;
        for (int polls = 0; polls < 20 && st->done < choices->size(); ++polls) {
          if (!channel->pop(&ev, 50)) {
            if (!sink.is_writable()) return false;
            continue;
          }
          const size_t before = (*choices)[ev.choice].logprobs.size();
          if (!apply(ev, &d)) continue;
          const Choice& c = (*choices)[ev.choice];
          ordered_json lp;
          if (plan.logprobs && c.logprobs.size() > before) {
            Choice slice;
            slice.logprobs.assign(c.logprobs.begin() + before, c.logprobs.end());
            lp = logprobs_json(slice);
          }
          if (!d.empty() || !lp.is_null()) {
            ordered_json obj;
            if (chat) {
              ordered_json delta = ordered_json::object();
              if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
              if (!d.content.empty()) delta["content"] = d.content;
              obj = {{"index", ev.choice}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", nullptr}};
            } else {
              obj = {{"index", ev.choice}, {"text", d.content}, {"logprobs", lp}, {"finish_reason", nullptr}};
            }
            if (!write(chunk(obj))) return false;
          }
          if (c.finished) {
            ++st->done;
            if (chat && !c.text->tool_calls().empty() &&
                !write(chunk({{"index", ev.choice}, {"delta", {{"tool_calls", tool_calls_json(c, true)}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}})))
              return false;
            ordered_json fin = chat ? ordered_json{{"index", ev.choice}, {"delta", ordered_json::object()}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}}
                                    : ordered_json{{"index", ev.choice}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
            if (!write(chunk(fin))) return false;
          }
        }
        if (st->done == choices->size() && !st->ended) {
          st->ended = true;
          if (plan.include_usage) {
            ordered_json j = {{"id", rid},
                              {"object", chat ? "chat.completion.chunk" : "text_completion"},
                              {"created", created},
                              {"model", plan.model},
                              {"choices", ordered_json::array()},
                              {"usage", usage()}};
            if (!write("data: " + dump(j) + "\n\n")) return false;
          }
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
        }
        return true;
      },
      [=, this](bool success) {
        // The stream ended: on a client disconnect, abort what still runs.
        if (!success || !st->ended) {
          for (Choice& c : *choices)
            if (!c.finished) {
              service_->finish(c.engine_id, FinishReason::kAbort);
              c.finished = true;
            }
          log_info(rid + ": client went away, request aborted");
        } else {
          log_info(rid + ": streamed, " + summary());
        }
        finish_metrics();
      });
}

}  // namespace dsv4
