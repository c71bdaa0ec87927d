// A generation answered over an HTTP exchange without ever waiting: the
// engine's thread only says that events are there; the connection's I/O
// thread then takes them, renders them in the API's format and sends them
// (a stream's events as they come; a JSON body once every choice is done).
// A client that goes away, or a stream's reader that falls behind, aborts
// what still runs at the next step boundary.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http/http_exchange.h"
#include "server/generation.h"

namespace dsv4 {

// How one API writes a generation: its stream's events, and the whole body.
class ReplyFormat {
 public:
  virtual ~ReplyFormat() = default;
  // Stream events, each complete ("data: ...\n\n").
  virtual std::vector<std::string> begin() = 0;
  virtual std::vector<std::string> update(const ChoiceUpdate& u) = 0;
  virtual std::vector<std::string> end() = 0;
  // The JSON body once every choice is done.
  virtual std::string body() = 0;
};

struct ReplyOptions {
  bool stream = false;
  // A stream whose reader leaves this many bytes waiting (the kernel's
  // buffers full) has its generation held until they have gone out; one
  // that stays behind is cut off by the front end's write timeout.
  size_t hold_bytes = 16u << 10;
  std::string id;         // for the log: chatcmpl-..., msg_..., resp_...
  HttpHeaders headers;    // on the response (CORS)
};

class GenerationReply : public std::enable_shared_from_this<GenerationReply> {
 public:
  using FormatMaker = std::function<std::unique_ptr<ReplyFormat>(const Generation&)>;

  // Submits the generation and answers `exchange` with it (callable on any
  // thread). An error status (see EngineService::submit) means nothing was
  // submitted and nothing was sent: the caller answers with the error.
  static Status start(std::shared_ptr<HttpExchange> exchange, EngineService* service, const Tokenizer* tokenizer,
                      GenerationSpec spec, Metrics* metrics, FormatMaker make_format, ReplyOptions options);

 private:
  GenerationReply(std::shared_ptr<HttpExchange> exchange, ReplyOptions options);
  // On the exchange's thread from here on.
  void begin();
  void pump();
  void abort();
  // The reader fell behind / caught up.
  void hold();
  void release();
  void send(const std::vector<std::string>& events);

  std::shared_ptr<HttpExchange> exchange_;
  ReplyOptions options_;
  std::unique_ptr<Generation> gen_;
  std::unique_ptr<ReplyFormat> format_;
  bool begun_ = false, over_ = false, held_ = false;
};

}  // namespace dsv4
