// OpenAI's Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}, GET .../input_items) over the chat path: the input
// (a string, or items: messages, function_call, function_call_output,
// reasoning), instructions, function tools, tool_choice, reasoning.effort,
// text.format and the earlier turns a previous_response_id names become
// the chat request chat completions would run; its generation comes back
// as output items (reasoning, message, function_call), whole or as the
// API's semantic stream events, and is kept in a bounded store for GET and
// for the next turn.
#pragma once

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/generation_reply.h"
#include "server/openai_request.h"

namespace dsv4 {

// Responses kept in memory (bounded: the oldest goes first).
class ResponseStore {
 public:
  struct Entry {
    nlohmann::ordered_json response;      // the response object
    nlohmann::ordered_json input_items;   // this turn's input, as items with ids
    // The conversation as chat messages, this response's output included
    // and the instructions not (a next turn gives its own).
    nlohmann::ordered_json conversation;
  };

  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  void put(const std::string& id, Entry entry);
  std::optional<Entry> get(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // oldest first
  std::map<std::string, std::pair<Entry, std::list<std::string>::iterator>> entries_;
};

struct ResponsePlan {
  GenerationPlan generation;               // the chat request it runs
  nlohmann::ordered_json request;          // the request (its fields are echoed in the response)
  nlohmann::ordered_json conversation;     // chat messages before the output, instructions left out
  nlohmann::ordered_json input_items;      // the input as items
  bool store = true;
};

struct ResponsePlanOrError {
  std::optional<ResponsePlan> plan;
  ApiError error;
};

ResponsePlanOrError plan_response(const nlohmann::ordered_json& body, const ServedModel& model, const ResponseStore& store);

// The 404 for an id the store does not hold.
ApiError response_not_found(const std::string& id);
// GET /v1/responses/{id}/input_items.
nlohmann::ordered_json input_items_list(const ResponseStore::Entry& entry);

// A generation as a response: the object, or its event stream
// (response.created, output_item.added, output_text.delta,
// function_call_arguments.delta, ..., response.completed). Stored (when
// asked) from the start as in_progress, and again when it ends.
class ResponsesFormat : public ReplyFormat {
 public:
  ResponsesFormat(std::shared_ptr<const ResponsePlan> plan, std::string id, int64_t created, const Generation& gen,
                  ResponseStore* store);
  ~ResponsesFormat() override;

  std::vector<std::string> begin() override;
  std::vector<std::string> update(const ChoiceUpdate& u) override;
  std::vector<std::string> end() override;
  std::string body() override;

 private:
  enum class Item { kNone, kReasoning, kMessage };
  nlohmann::ordered_json object(bool done) const;
  nlohmann::ordered_json output() const;
  std::string event(const char* type, nlohmann::ordered_json data);
  void open(Item item, std::vector<std::string>* out);
  void close(std::vector<std::string>* out);
  void save(bool done);

  std::shared_ptr<const ResponsePlan> plan_;
  std::string id_, suffix_;
  int64_t created_;
  const Generation& gen_;
  ResponseStore* store_;
  int64_t sequence_ = 0;
  Item open_ = Item::kNone;
  int output_index_ = -1;
  std::string reasoning_, content_;  // of the open items, as streamed
  bool saved_done_ = false;
};

}  // namespace dsv4
