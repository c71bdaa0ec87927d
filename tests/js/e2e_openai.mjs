// End to end with the official openai client against a running dsv4 serve.
// usage: node e2e_openai.mjs BASE_URL MODEL
import OpenAI from "openai";
import assert from "node:assert/strict";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
let checks = 0;
const check = (cond, what) => { assert.ok(cond, what); ++checks; };

const models = await client.models.list();
check(models.data.some((m) => m.id === model), "the served model is listed");

// Completions: JSON and stream agree for greedy decoding; usage adds up.
const cparams = { model, prompt: "The quick brown fox", max_tokens: 12, temperature: 0, ignore_eos: true };
const c = await client.completions.create(cparams);
check(c.object === "text_completion" && c.choices.length === 1, "completion shape");
check(c.usage.completion_tokens === 12, "12 completion tokens");
check(c.usage.prompt_tokens + c.usage.completion_tokens === c.usage.total_tokens, "completion usage adds up");
check(c.choices[0].finish_reason === "length", "finish_reason length");
let streamed = "";
let usage = null;
let finish = null;
for await (const chunk of await client.completions.create({ ...cparams, stream: true, stream_options: { include_usage: true } })) {
  if (chunk.usage) usage = chunk.usage;
  for (const ch of chunk.choices) {
    streamed += ch.text;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
check(streamed === c.choices[0].text, "streamed completion text equals the JSON one");
check(finish === "length", "stream finish_reason");
check(usage && usage.total_tokens === c.usage.total_tokens, "stream usage equals JSON usage");

// Several prompts and choices, logprobs.
const multi = await client.completions.create({ model, prompt: ["a", "bb"], n: 2, max_tokens: 3, temperature: 0.7, seed: 5, logprobs: 2, ignore_eos: true });
check(multi.choices.length === 4, "2 prompts x n=2 choices");
check(multi.choices.every((ch) => ch.logprobs.tokens.length === 3 && ch.logprobs.top_logprobs[0] !== undefined), "completion logprobs");
check(multi.usage.completion_tokens === 12, "usage counts every choice");

// Chat: JSON and stream agree; thinking mode splits reasoning.
const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hi" }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, ignore_eos: true });
check(chat.object === "chat.completion" && chat.choices[0].message.role === "assistant", "chat shape");
check(chat.usage.prompt_tokens + chat.usage.completion_tokens === chat.usage.total_tokens, "chat usage adds up");
let content = "";
let roleSeen = false;
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true })) {
  for (const ch of chunk.choices) {
    if (ch.delta.role === "assistant") roleSeen = true;
    content += ch.delta.content ?? "";
  }
}
check(roleSeen, "the stream opens with the assistant role");
check(content === chat.choices[0].message.content, "streamed chat content equals the JSON one");
const think = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, ignore_eos: true,
  chat_template_kwargs: { enable_thinking: true }, logprobs: true, top_logprobs: 2 });
check(typeof think.choices[0].message.reasoning_content === "string", "thinking mode returns reasoning_content");
check(think.choices[0].logprobs.content.length === 6 && think.choices[0].logprobs.content[0].top_logprobs.length === 2, "chat logprobs");

// Tools are accepted and rendered; the answer is a valid message.
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { location: { type: "string" } } } } }];
const withTools = await client.chat.completions.create({ model, messages, tools, max_tokens: 5, temperature: 0 });
check(["stop", "length", "tool_calls"].includes(withTools.choices[0].finish_reason), "tools request finishes");

// Errors come back as OpenAI errors with the right status.
const expectStatus = async (p, status, what) => {
  try { await p; assert.fail(`${what}: no error`); } catch (e) { check(e.status === status, `${what}: status ${e.status}`); }
};
await expectStatus(client.completions.create({ model, prompt: "x", max_tokens: -1 }), 400, "negative max_tokens");
await expectStatus(client.completions.create({ model, prompt: "x", top_p: 0 }), 400, "top_p 0");
await expectStatus(client.completions.create({ model: "no-such-model", prompt: "x" }), 404, "unknown model");
await expectStatus(client.completions.create({ model, prompt: "x".repeat(100000), max_tokens: 1 }), 400, "prompt too long");
await expectStatus(client.chat.completions.create({ model, messages: [] }), 400, "empty messages");
await expectStatus(client.chat.completions.create({ model, messages, stop: 7 }), 400, "unknown stop type");
console.log(`ok ${checks} checks`);
