#include "server/generation_reply.h"

#include "base/logging.h"

namespace dsv4 {

GenerationReply::GenerationReply(std::shared_ptr<HttpExchange> exchange, ReplyOptions options)
    : exchange_(std::move(exchange)), options_(std::move(options)) {}

Status GenerationReply::start(std::shared_ptr<HttpExchange> exchange, EngineService* service, const Tokenizer* tokenizer,
                              GenerationSpec spec, Metrics* metrics, FormatMaker make_format, ReplyOptions options) {
  std::shared_ptr<GenerationReply> reply(new GenerationReply(exchange, std::move(options)));
  // The engine's thread only posts a pump (one at a time) and holds no
  // reference to the reply: a reply that is gone is not kept alive by it.
  auto scheduled = std::make_shared<std::atomic<bool>>(false);
  std::weak_ptr<GenerationReply> weak = reply;
  auto on_event = [exchange, scheduled, weak] {
    if (scheduled->exchange(true)) return;
    exchange->post([scheduled, weak] {
      scheduled->store(false);
      if (auto r = weak.lock()) r->pump();
    });
  };
  auto gen = Generation::start(service, tokenizer, std::move(spec), metrics, std::move(on_event));
  if (!gen.ok()) return gen.status();
  reply->gen_ = std::move(*gen);
  reply->format_ = make_format(*reply->gen_);
  log_info(reply->options_.id + ": " + std::to_string(reply->gen_->size()) + " choice(s), " +
           std::to_string(reply->gen_->spec().prompts[0].size()) + " prompt tokens, max_tokens " +
           std::to_string(reply->gen_->spec().params.max_tokens) + (reply->options_.stream ? ", streaming" : ""));
  // Until it is over, the exchange's abandon callback owns the reply.
  exchange->post([reply] { reply->begin(); });
  return Status::Ok();
}

void GenerationReply::begin() {
  if (begun_) return;
  begun_ = true;
  auto self = shared_from_this();
  exchange_->on_abandoned([self] { self->abort(); });
  if (options_.stream && !exchange_->abandoned()) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers = options_.headers;
    head.set_header("Cache-Control", "no-cache");
    exchange_->begin_stream(std::move(head));
    send(format_->begin());
  }
  pump();
}

void GenerationReply::send(const std::vector<std::string>& events) {
  std::string joined;
  for (const std::string& e : events) joined += e;
  if (!joined.empty()) exchange_->send(std::move(joined));
}

void GenerationReply::pump() {
  // An event can come before begin() (the engine is quick, and start() was
  // still setting the reply up on its thread): begin() takes it then.
  if (!begun_ || over_) return;
  ChoiceUpdate u;
  // Everything waiting goes out as one write.
  std::vector<std::string> events;
  while (gen_->next(&u, 0))
    if (options_.stream) {
      auto more = format_->update(u);
      events.insert(events.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
  if (options_.stream) send(events);
  if (exchange_->abandoned()) return;
  if (!gen_->done()) {
    if (options_.stream && !held_ && exchange_->backlog() >= options_.hold_bytes) hold();
    return;
  }
  over_ = true;
  exchange_->set_log_note(options_.id + ", " + gen_->summary());
  if (options_.stream) {
    send(format_->end());
    exchange_->end_stream();
  } else {
    HttpResponse r;
    r.headers = options_.headers;
    r.body = format_->body();
    exchange_->respond(std::move(r));
  }
  // The generation counts its metrics as it goes: now, not when the last
  // pump lets go of the reply.
  format_.reset();
  gen_.reset();
}

void GenerationReply::hold() {
  held_ = true;
  gen_->hold(true);
  auto self = shared_from_this();
  exchange_->on_drained([self] { self->release(); });
}

void GenerationReply::release() {
  if (!held_ || over_) return;
  held_ = false;
  gen_->hold(false);
}

void GenerationReply::abort() {
  if (over_) return;
  over_ = true;
  if (gen_) gen_->abort();
  log_info(options_.id + ": client went away, request aborted");
  format_.reset();
  gen_.reset();
}

}  // namespace dsv4
