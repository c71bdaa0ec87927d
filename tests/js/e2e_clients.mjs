// The API as real clients use it, against a running dsv4 serve: the official
// openai SDK (aborts, logit_bias, n with usage, errors), the Vercel AI SDK
// (ai + @ai-sdk/openai-compatible), LangChain JS (@langchain/openai) and the
// official Anthropic SDK (@anthropic-ai/sdk) on /v1/messages; forced tool
// calls and structured outputs through each of them (the embedded model is
// random: only constrained decoding makes these replies well formed).
// usage: node e2e_clients.mjs BASE_URL MODEL
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { generateObject, generateText, jsonSchema, streamText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import assert from "node:assert/strict";

const [base, model] = process.argv.slice(2);
let checks = 0;
const check = (cond, what) => { assert.ok(cond, what); ++checks; };
const metric = async (name, labels) => {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + (labels ?? "")) && !l.startsWith("#"));
  return line ? Number(line.split(" ").pop()) : 0;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const settled = async () => {
  for (let i = 0; i < 200; ++i) {
    if ((await metric("dsv4_num_requests_running")) === 0 && (await metric("dsv4_num_requests_waiting")) === 0) return true;
    await sleep(50);
  }
  return false;
};

// --- openai ---
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });

// An SDK abort of a non-streaming request ends all its choices at once.
const abortsBefore = await metric("dsv4_requests_total", '{endpoint="completions",outcome="abort"}');
const controller = new AbortController();
const started = Date.now();
setTimeout(() => controller.abort(), 400);
await assert.rejects(openai.completions.create({ model, prompt: "go", max_tokens: 3000, n: 8, ignore_eos: true },
  { signal: controller.signal }), "the aborted request rejects");
check(await settled(), "nothing runs after the client aborted");
check(Date.now() - started < 20000, "the abort ended the request early");
const abortsAfter = await metric("dsv4_requests_total", '{endpoint="completions",outcome="abort"}');
check(abortsAfter - abortsBefore === 8, `8 choices counted as aborted (got ${abortsAfter - abortsBefore})`);
// And a timeout the same way.
await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: "user", content: "go" }], max_tokens: 3000, ignore_eos: true },
  { timeout: 300 }), "the timed-out request rejects");
check(await settled(), "nothing runs after the client timed out");

// usage counts the prompt once, however many choices.
const one = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "count me" }], max_tokens: 2 });
// ignore_eos: a sampled choice may draw EOS first and end at one token.
const three = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "count me" }], max_tokens: 2, n: 3, ignore_eos: true });
check(three.usage.prompt_tokens === one.usage.prompt_tokens, "n=3 reports the prompt's tokens once");
check(three.usage.completion_tokens === 6, "and every choice's completion tokens");

// logit_bias: +100 on a token makes greedy decoding choose it ('Z', whose
// id the server's tokenizer gives).
const z = await (await fetch(`${base}/tokenize`, { method: "POST", headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ prompt: "Z", add_special_tokens: false }) })).json();
check(z.count === 1, `'Z' is one token (got ${JSON.stringify(z)})`);
const biased = await openai.completions.create({ model, prompt: "abc", max_tokens: 4, temperature: 0,
  logit_bias: { [String(z.tokens[0])]: 100 } });
check(biased.choices[0].text === "ZZZZ", `logit_bias +100 on 'Z' gives ZZZZ (got ${JSON.stringify(biased.choices[0].text)})`);

// Errors name the parameter and carry OpenAI's code.
const expectError = async (p, status, param, code, what) => {
  try { await p; assert.fail(`${what}: no error`); } catch (e) {
    check(e.status === status && e.param === param && e.code === code, `${what}: ${e.status} ${e.param} ${e.code}`);
  }
};
await expectError(openai.completions.create({ model, prompt: "x", logit_bias: { abc: 1 } }), 400, "logit_bias", "invalid_value", "bad logit_bias key");
await expectError(openai.completions.create({ model, prompt: "x", logit_bias: { "5": 500 } }), 400, "logit_bias", "invalid_value", "logit_bias out of range");
await expectError(openai.completions.create({ model, prompt: "x", temperature: -1 }), 400, "temperature", "invalid_value", "sampling error names its param");
await expectError(openai.completions.create({ model, prompt: "x".repeat(100000), max_tokens: 1 }), 400, "prompt", "context_length_exceeded", "too-long completions prompt");
await expectError(openai.chat.completions.create({ model, messages: [{ role: "user", content: "x".repeat(100000) }] }), 400, "messages", "context_length_exceeded", "too-long chat prompt");
await expectError(openai.completions.create({ model: "nope", prompt: "x" }), 404, "model", "model_not_found", "unknown model");
const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
await expectError(openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], tools, tool_choice: { type: "function", function: { name: "other" } } }),
  400, "tool_choice", "invalid_value", "tool_choice naming an unknown function");
await expectError(openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], tool_choice: "required" }), 400, "tool_choice", "invalid_value", "required without tools");
await expectError(openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], tools, tool_choice: "bogus" }), 400, "tool_choice", "invalid_value", "bogus tool_choice");
await expectError(openai.chat.completions.create({ model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] }),
  400, "messages", "invalid_value", "image parts on a text-only model");
const named = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], tools, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 2 });
check(named.choices.length === 1, "a named tool_choice in tools is accepted");
// Forced tool calls and JSON schema replies.
const weather = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city"] } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"] } } }];
const argsOk = (call) => {
  const a = JSON.parse(call.function.arguments);
  return call.function.name === "get_weather" ? typeof a.city === "string" && (a.days === undefined || (Number.isInteger(a.days) && a.days >= 1 && a.days <= 7))
    : call.function.name === "get_time" && ["UTC", "CET"].includes(a.zone);
};
for (const temperature of [0, 1]) {
  const req = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "Weather in Paris?" }], tools: weather,
    tool_choice: "required", max_tokens: 300, temperature, seed: 3 });
  const m = req.choices[0].message;
  check(req.choices[0].finish_reason === "tool_calls" && m.tool_calls?.length >= 1 && m.tool_calls.every(argsOk),
    `openai: tool_choice required gives valid tool calls (temperature ${temperature}): ${JSON.stringify(m)}`);
}
const forced = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], tools: weather,
  tool_choice: { type: "function", function: { name: "get_time" } }, max_tokens: 300 });
check(forced.choices[0].message.tool_calls?.length === 1 && forced.choices[0].message.tool_calls[0].function.name === "get_time" &&
  argsOk(forced.choices[0].message.tool_calls[0]), "openai: a named tool_choice gives one call of it");
let streamedCalls = {};
for await (const chunk of await openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], tools: weather,
  tool_choice: "required", max_tokens: 300, stream: true })) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) {
    const c = (streamedCalls[d.index] ??= { function: { name: "", arguments: "" } });
    if (d.function?.name) c.function.name += d.function.name;
    if (d.function?.arguments) c.function.arguments += d.function.arguments;
  }
}
check(Object.values(streamedCalls).length >= 1 && Object.values(streamedCalls).every(argsOk), "openai: streamed forced tool calls");
const person = { type: "object", properties: { name: { type: "string", maxLength: 16 }, age: { type: "integer", minimum: 0, maximum: 120 } },
  required: ["name", "age"], additionalProperties: false };
const structured = await openai.chat.completions.create({ model, messages: [{ role: "user", content: "A person" }], max_tokens: 200,
  response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } } });
const p = JSON.parse(structured.choices[0].message.content);
check(typeof p.name === "string" && Number.isInteger(p.age) && p.age >= 0 && p.age <= 120 && Object.keys(p).length === 2,
  "openai: response_format json_schema");
await expectError(openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
  response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "(a)\\1" } } } }),
  400, "response_format", "invalid_value", "a schema we cannot compile is a 400");
const model_card = await openai.models.retrieve(model);
check(model_card.id === model, "GET /v1/models/{id}");

// --- Vercel AI SDK ---
const provider = createOpenAICompatible({ name: "dsv4", baseURL: `${base}/v1`, apiKey: "unused", includeUsage: true });
const gen = await generateText({ model: provider(model), prompt: "Say hi", maxOutputTokens: 6, temperature: 0 });
check(typeof gen.text === "string" && gen.usage.outputTokens > 0 && gen.usage.inputTokens > 0, "ai: generateText with usage");
const st = streamText({ model: provider(model), prompt: "Say hi", maxOutputTokens: 6, temperature: 0 });
let aiText = "";
for await (const part of st.textStream) aiText += part;
check(aiText === gen.text, "ai: streamText equals generateText");
check((await st.usage).outputTokens === gen.usage.outputTokens, "ai: stream usage");

const aiTools = {
  get_weather: tool({ description: "Weather in a city", inputSchema: jsonSchema(weather[0].function.parameters) }),
  get_time: tool({ inputSchema: jsonSchema(weather[1].function.parameters) }),
};
const aiCall = await generateText({ model: provider(model), prompt: "Weather in Paris?", tools: aiTools, toolChoice: "required",
  maxOutputTokens: 300, temperature: 0 });
check(aiCall.toolCalls.length >= 1 && aiCall.toolCalls.every((c) => argsOk({ function: { name: c.toolName, arguments: JSON.stringify(c.input) } })),
  `ai: toolChoice required gives tool calls: ${JSON.stringify(aiCall.toolCalls)}`);
const aiNamed = await generateText({ model: provider(model), prompt: "Time?", tools: aiTools, toolChoice: { type: "tool", toolName: "get_time" },
  maxOutputTokens: 300, temperature: 1 });
check(aiNamed.toolCalls.length === 1 && aiNamed.toolCalls[0].toolName === "get_time", "ai: a named toolChoice");
const structuredProvider = createOpenAICompatible({ name: "dsv4", baseURL: `${base}/v1`, apiKey: "unused", supportsStructuredOutputs: true });
const aiObject = await generateObject({ model: structuredProvider(model), schema: jsonSchema(person), prompt: "A person", maxOutputTokens: 200 });
check(typeof aiObject.object.name === "string" && Number.isInteger(aiObject.object.age), "ai: generateObject with a JSON schema");

// --- LangChain ---
const llm = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL: `${base}/v1` }, maxTokens: 6, temperature: 0, maxRetries: 0 });
const msg = await llm.invoke("Say hi");
check(typeof msg.content === "string" && msg.usage_metadata?.output_tokens > 0, "langchain: invoke with usage");
let lcText = "";
for await (const chunk of await llm.stream("Say hi")) lcText += chunk.content;
check(lcText === msg.content, "langchain: stream equals invoke");
const batch = await llm.batch(["a", "b", "c"]);
check(batch.length === 3, "langchain: batch");
const lcStructured = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL: `${base}/v1` }, maxTokens: 200, maxRetries: 0 })
  .withStructuredOutput({ title: "person", ...person });
const lcPerson = await lcStructured.invoke("A person");
check(typeof lcPerson.name === "string" && Number.isInteger(lcPerson.age), `langchain: withStructuredOutput ${JSON.stringify(lcPerson)}`);

// --- Anthropic ---
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const am = await anthropic.messages.create({ model: "claude-sonnet-4-5", max_tokens: 6, temperature: 0, system: "Be terse.",
  messages: [{ role: "user", content: "Say hi" }] });
check(am.type === "message" && am.role === "assistant" && am.content.every((b) => b.type === "text"), "anthropic: message shape");
check(am.stop_reason === "max_tokens" || am.stop_reason === "end_turn", `anthropic: stop_reason ${am.stop_reason}`);
check(am.usage.input_tokens > 0 && am.usage.output_tokens > 0, "anthropic: usage");
const stream = anthropic.messages.stream({ model: "claude-sonnet-4-5", max_tokens: 6, temperature: 0, system: "Be terse.",
  messages: [{ role: "user", content: "Say hi" }] });
let streamedText = "";
stream.on("text", (t) => { streamedText += t; });
const final = await stream.finalMessage();
const jsonText = am.content.map((b) => b.text).join("");
check(streamedText === jsonText && final.content.map((b) => b.text ?? "").join("") === jsonText, "anthropic: stream equals JSON");
check(final.usage.output_tokens === am.usage.output_tokens, "anthropic: stream usage");
// Thinking, tool history and stop sequences are read.
const thinking = await anthropic.messages.create({ model, max_tokens: 8, temperature: 0, thinking: { type: "enabled", budget_tokens: 1024 },
  messages: [{ role: "user", content: "Think" }] });
check(thinking.content.every((b) => b.type === "thinking" || b.type === "text"), "anthropic: thinking blocks");
const toolHistory = await anthropic.messages.create({ model, max_tokens: 4,
  tools: [{ name: "get_weather", description: "Weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }],
  tool_choice: { type: "auto" },
  messages: [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] },
  ] });
check(["end_turn", "max_tokens", "tool_use"].includes(toolHistory.stop_reason), "anthropic: tool_use / tool_result history");
const anyTool = await anthropic.messages.create({ model, max_tokens: 300,
  tools: [{ name: "get_weather", description: "Weather", input_schema: weather[0].function.parameters }],
  tool_choice: { type: "any" }, messages: [{ role: "user", content: "Weather in Paris?" }] });
const uses = anyTool.content.filter((b) => b.type === "tool_use");
check(anyTool.stop_reason === "tool_use" && uses.length >= 1 && uses.every((b) => b.name === "get_weather" && typeof b.input.city === "string"),
  `anthropic: tool_choice any gives tool_use blocks: ${JSON.stringify(anyTool.content)}`);
const first = am.content.map((b) => b.text).join("").slice(0, 1);
if (first) {
  const stopped = await anthropic.messages.create({ model: "claude-sonnet-4-5", max_tokens: 6, temperature: 0, system: "Be terse.",
    messages: [{ role: "user", content: "Say hi" }], stop_sequences: [first] });
  check(stopped.stop_reason === "stop_sequence" && stopped.stop_sequence === first, "anthropic: stop_sequences");
}
try {
  await anthropic.messages.create({ model, messages: [{ role: "user", content: "x" }] });
  assert.fail("no error for a missing max_tokens");
} catch (e) {
  check(e.status === 400 && e.error?.type === "error" && e.error?.error?.type === "invalid_request_error", "anthropic: error shape");
}
console.log(`ok ${checks} checks`);
