// The Responses API's request side without a server: input items become
// the chat conversation chat completions would render (the same prompt
// tokens), previous_response_id continues a stored one, the store keeps the
// newest, and every problem is a 4xx naming its field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/responses_api.h"
#include "tokenizer/byte_tokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::ordered_json;

struct Served {
  ByteTokenizer tokenizer{512};
  ServedModel model;
  Served() {
    model.name = "m";
    model.tokenizer = &tokenizer;
    model.max_model_len = 4096;
    model.vocab_size = 512;
  }
};

std::vector<int32_t> chat_prompt(const Served& s, const ordered_json& body) {
  const PlanOrError p = plan_chat(body, s.model);
  EXPECT_TRUE(p.plan.has_value()) << p.error.message;
  return p.plan ? p.plan->prompts[0] : std::vector<int32_t>{};
}

TEST(ResponsesApi, InputItemsRenderAsTheChatConversation) {
  Served s;
  const ResponseStore store(4);
  const ordered_json tool_json = {{"type", "function"}, {"name", "get_weather"},
                                  {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}};
  const ordered_json body = {
      {"instructions", "Be brief."},
      {"tools", ordered_json::array({tool_json})},
      {"input",
       ordered_json::array({{{"role", "user"}, {"content", ordered_json::array({{{"type", "input_text"}, {"text", "Weather?"}}})}},
                            {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", ordered_json::array()},
                             {"content", ordered_json::array({{{"type", "reasoning_text"}, {"text", "look it up"}}})}},
                            {{"type", "function_call"}, {"call_id", "c1"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}},
                            {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}},
                            {{"type", "message"}, {"role", "assistant"},
                             {"content", ordered_json::array({{{"type", "output_text"}, {"text", "It is sunny."}}})}},
                            {{"role", "user"}, {"content", "Thanks"}}})},
      {"reasoning", {{"effort", "high"}}}};
  const ResponsePlanOrError r = plan_response(body, s.model, store);
  ASSERT_TRUE(r.plan) << r.error.message;
  const ordered_json chat = {
      {"messages",
       ordered_json::array(
           {{{"role", "system"}, {"content", "Be brief."}},
            {{"role", "user"}, {"content", "Weather?"}},
            {{"role", "assistant"},
             {"content", ""},
             {"reasoning_content", "look it up"},
             {"tool_calls", ordered_json::array({{{"id", "c1"}, {"type", "function"},
                                                  {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
            {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}},
            {{"role", "assistant"}, {"content", "It is sunny."}},
            {{"role", "user"}, {"content", "Thanks"}}})},
      {"tools", ordered_json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", tool_json["parameters"]}}}}})},
      {"reasoning_effort", "high"}};
  EXPECT_EQ(r.plan->generation.prompts[0], chat_prompt(s, chat));
  EXPECT_EQ(r.plan->generation.mode, ChatMode::kThinking);
  EXPECT_TRUE(r.plan->generation.parse_tools);
  EXPECT_EQ(r.plan->input_items.size(), 6u);
  // The stored conversation leaves the instructions out.
  EXPECT_EQ(r.plan->conversation.size(), 5u);
  EXPECT_EQ(r.plan->conversation[0]["role"], "user");
}

TEST(ResponsesApi, PreviousResponseIdContinuesTheStoredConversation) {
  Served s;
  ResponseStore store(4);
  ResponseStore::Entry e;
  e.response = {{"id", "resp_1"}, {"status", "completed"}};
  e.conversation = ordered_json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello!"}}});
  store.put("resp_1", e);
  const ResponsePlanOrError r =
      plan_response({{"previous_response_id", "resp_1"}, {"input", "And you?"}, {"instructions", "New rules."}}, s.model, store);
  ASSERT_TRUE(r.plan) << r.error.message;
  const ordered_json chat = {{"messages", ordered_json::array({{{"role", "system"}, {"content", "New rules."}},
                                                               {{"role", "user"}, {"content", "Hi"}},
                                                               {{"role", "assistant"}, {"content", "Hello!"}},
                                                               {{"role", "user"}, {"content", "And you?"}}})}};
  EXPECT_EQ(r.plan->generation.prompts[0], chat_prompt(s, chat));
  // Still running: not yet continued.
  e.response["status"] = "in_progress";
  store.put("resp_2", e);
  const ResponsePlanOrError running = plan_response({{"previous_response_id", "resp_2"}, {"input", "x"}}, s.model, store);
  ASSERT_FALSE(running.plan);
  EXPECT_EQ(running.error.status, 400);
  EXPECT_EQ(running.error.param, "previous_response_id");
}

TEST(ResponsesApi, TheStoreKeepsTheNewest) {
  ResponseStore store(2);
  for (const char* id : {"a", "b", "c"}) {
    ResponseStore::Entry e;
    e.response = {{"id", id}};
    store.put(id, e);
  }
  EXPECT_EQ(store.size(), 2u);
  EXPECT_FALSE(store.get("a"));
  ASSERT_TRUE(store.get("c"));
  EXPECT_EQ(store.get("c")->response["id"], "c");
  EXPECT_TRUE(store.erase("b"));
  EXPECT_FALSE(store.erase("b"));
  EXPECT_EQ(store.size(), 1u);
}

TEST(ResponsesApi, ProblemsAreFourHundredsNamingTheirField) {
  Served s;
  const ResponseStore store(2);
  struct Case {
    ordered_json body;
    int status;
    std::string param, words;
  };
  const std::vector<Case> cases = {
      {{{"model", "m"}}, 400, "input", "input is required"},
      {{{"input", 5}}, 400, "input", "string or an array"},
      {{{"input", "x"}, {"previous_response_id", "resp_none"}}, 404, "previous_response_id", "resp_none"},
      {{{"input", "x"}, {"background", true}}, 400, "background", "background"},
      {{{"input", "x"}, {"conversation", "conv_1"}}, 400, "conversation", "previous_response_id"},
      {{{"input", "x"}, {"tools", ordered_json::array({{{"type", "web_search"}}})}}, 400, "tools", "function tools"},
      {{{"input", ordered_json::array({{{"type", "function_call_output"}, {"output", "o"}}})}}, 400, "input", "input[0].call_id"},
      {{{"input", ordered_json::array({{{"role", "user"}, {"content", ordered_json::array({{{"type", "input_image"}}})}}})}},
       400, "input", "text only"},
      {{{"input", ordered_json::array({{{"type", "item_reference"}, {"id", "x"}}})}}, 400, "input", "item_reference"},
      {{{"input", "x"}, {"reasoning", {{"effort", "extreme"}}}}, 400, "reasoning.effort", "extreme"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, 400, "text.format", "json_schema"},
      {{{"input", "x"}, {"max_output_tokens", 5000}}, 400, "max_output_tokens", "maximum context length"},
      {{{"input", "x"}, {"tool_choice", "required"}}, 400, "tool_choice", "function tools"},
      {{{"input", "x"}, {"model", "other"}}, 404, "model", "does not exist"},
      {{{"input", "x"}, {"top_logprobs", 3}}, 400, "top_logprobs", "not supported"},
      // Fields of the wrong JSON type are named, never an exception (a 500).
      {{{"input", "x"}, {"tools", ordered_json::array({{{"type", {{"name", "f"}}}}})}}, 400, "tools", "function tools"},
      {{{"input", "x"}, {"background", "yes"}}, 400, "background", "true or false"},
      {{{"input", "x"}, {"text", {{"format", {{"type", 5}}}}}}, 400, "text.format", "json_schema"},
  };
  EXPECT_TRUE(plan_response({{"input", "x"}, {"background", nullptr}}, s.model, store).plan);
  for (const Case& c : cases) {
    const ResponsePlanOrError r = plan_response(c.body, s.model, store);
    ASSERT_FALSE(r.plan) << c.body.dump();
    EXPECT_EQ(r.error.status, c.status) << c.body.dump() << ": " << r.error.message;
    EXPECT_EQ(r.error.param, c.param) << c.body.dump() << ": " << r.error.message;
    EXPECT_NE(r.error.message.find(c.words), std::string::npos) << c.body.dump() << ": " << r.error.message;
  }
}

}  // namespace
}  // namespace dsv4
