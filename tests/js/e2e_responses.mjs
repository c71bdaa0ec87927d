// The Responses API (/v1/responses) as real clients use it, against a
// running dsv4 serve: the official openai SDK (responses.create, .stream,
// .retrieve, .inputItems, .delete; a function-call round trip, chained by
// previous_response_id and sent whole; structured output; reasoning) and
// the OpenAI Agents SDK running an agent that calls a function tool and
// finishes. The embedded model is random: greedy replies are compared with
// chat completions on the same conversation (the same prompt, so the same
// tokens), and tool calls are forced (tool_choice required), which the
// grammar makes well formed.
// usage: node e2e_responses.mjs BASE_URL MODEL
import OpenAI from "openai";
import Ajv from "ajv/dist/2020.js";
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import { z } from "zod";
import assert from "node:assert/strict";

const [base, model] = process.argv.slice(2);
let checks = 0;
const check = (cond, what) => { assert.ok(cond, what); ++checks; };
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });

// A plain greedy reply is what chat completions says to the same messages.
const plain = await client.responses.create({ model, input: "Say hi", max_output_tokens: 12, temperature: 0 });
check(plain.object === "response" && plain.id.startsWith("resp_"), "response shape");
check(plain.status === "incomplete" && plain.incomplete_details.reason === "max_output_tokens" || plain.status === "completed",
  `status ${plain.status}`);
const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say hi" }], max_tokens: 12, temperature: 0 });
check(plain.output_text === (chat.choices[0].message.content ?? ""), "greedy output_text equals chat completions' content");
check(plain.usage.input_tokens === chat.usage.prompt_tokens, "the same prompt tokens as chat");
check(plain.usage.output_tokens === chat.usage.completion_tokens, "the same output tokens as chat");
check(plain.usage.total_tokens === plain.usage.input_tokens + plain.usage.output_tokens, "usage adds up");

// instructions are the system message.
const instructed = await client.responses.create({ model, instructions: "Be terse.", input: "Say hi", max_output_tokens: 8, temperature: 0 });
const chatSys = await client.chat.completions.create({ model, max_tokens: 8, temperature: 0,
  messages: [{ role: "system", content: "Be terse." }, { role: "user", content: "Say hi" }] });
check(instructed.output_text === (chatSys.choices[0].message.content ?? ""), "instructions render as the system message");
check(instructed.instructions === "Be terse.", "instructions echoed");

// Streaming: the semantic events, in order, add up to the response.
const stream = client.responses.stream({ model, input: "Say hi", max_output_tokens: 12, temperature: 0 });
const types = [];
let deltas = "";
let lastSeq = -1;
let ordered = true;
stream.on("event", (e) => {
  types.push(e.type);
  if (e.sequence_number <= lastSeq) ordered = false;
  lastSeq = e.sequence_number;
});
stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
const streamed = await stream.finalResponse();
check(types[0] === "response.created" && types[1] === "response.in_progress", "the stream opens with created, in_progress");
check(["response.completed", "response.incomplete"].includes(types.at(-1)), "and ends with completed/incomplete");
check(ordered, "sequence numbers increase");
for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.done", "response.output_item.done"])
  check(types.includes(t), `event ${t}`);
check(deltas === plain.output_text && streamed.output_text === plain.output_text, "streamed text equals the JSON one");

// Stored: retrieve, input items, delete; unknown ids are 404s.
const got = await client.responses.retrieve(plain.id);
check(got.id === plain.id && JSON.stringify(got.output) === JSON.stringify(plain.output), "retrieve returns the stored response");
const items = await client.responses.inputItems.list(plain.id);
check(items.data.length === 1 && items.data[0].role === "user", "input items of the stored response");
const unstored = await client.responses.create({ model, input: "x", max_output_tokens: 2, store: false });
await assert.rejects(client.responses.retrieve(unstored.id), (e) => e.status === 404, "store: false is not kept");
await assert.rejects(client.responses.create({ model, input: "x", previous_response_id: "resp_nope" }),
  (e) => e.status === 404 && /resp_nope/.test(e.message), "an unknown previous_response_id is a 404 naming it");
checks += 2;

// A function-call round trip: a forced call of the tool with schema-valid
// arguments, its output given back by previous_response_id, and the same
// conversation sent whole renders the same prompt.
const tools = [{ type: "function", name: "get_weather", description: "Weather in a city", strict: true,
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false } }];
const first = await client.responses.create({ model, input: "Weather in Paris?", tools, tool_choice: "required", max_output_tokens: 256 });
const call = first.output.find((o) => o.type === "function_call");
check(call && call.name === "get_weather" && call.status === "completed", "a function_call item");
const args = JSON.parse(call.arguments);
check(typeof args.city === "string" && Object.keys(args).length === 1, `schema-valid arguments ${call.arguments}`);
check(first.status === "completed", "a call completes the response");
const second = await client.responses.create({ model, previous_response_id: first.id, tools, max_output_tokens: 8, temperature: 0,
  input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" }] });
check(second.previous_response_id === first.id, "previous_response_id echoed");
check(second.usage.input_tokens > first.usage.input_tokens, "the earlier turn is part of the prompt");
const whole = await client.responses.create({ model, tools, max_output_tokens: 8, temperature: 0, input: [
  { role: "user", content: "Weather in Paris?" },
  ...first.output.filter((o) => o.type === "function_call"),
  { type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" }] });
check(whole.usage.input_tokens === second.usage.input_tokens, "the conversation sent whole renders the same prompt");
check(whole.output_text === second.output_text, "and gives the same greedy reply");
const deleted = await client.responses.delete(second.id);
check(deleted === undefined || deleted === null || deleted.deleted === true || typeof deleted === "object", "delete answers");
await assert.rejects(client.responses.retrieve(second.id), (e) => e.status === 404, "deleted");
++checks;

// Structured output through text.format.
const schema = { type: "object", properties: { name: { type: "string" }, age: { type: "integer", minimum: 0, maximum: 150 } },
  required: ["name", "age"], additionalProperties: false };
const validate = new Ajv({ strict: false }).compile(schema);
for (const temperature of [0, 1]) {
  const s = await client.responses.create({ model, input: "A person as JSON", max_output_tokens: 64, temperature,
    text: { format: { type: "json_schema", name: "person", schema, strict: true } } });
  const parsed = JSON.parse(s.output_text);
  check(validate(parsed), `json_schema output validates: ${s.output_text}`);
}

// Reasoning: a reasoning item before the message, its tokens counted.
const reasoned = await client.responses.create({ model, input: "Think", max_output_tokens: 16, reasoning: { effort: "high" } });
check(reasoned.output[0].type === "reasoning" && reasoned.output[0].content[0].type === "reasoning_text", "a reasoning item");
check(reasoned.usage.output_tokens_details.reasoning_tokens >= 1, "reasoning tokens counted");

// A bad request is the API's error object naming the field.
await assert.rejects(client.responses.create({ model, input: [{ type: "message", role: "user", content: [{ type: "input_image", image_url: "x" }] }] }),
  (e) => e.status === 400 && e.param === "input" && /text only/.test(e.message), "an image part is refused by name");
await assert.rejects(client.responses.create({ model, input: "x", tools: [{ type: "web_search" }] }),
  (e) => e.status === 400 && /function tools/.test(e.message), "hosted tools are refused by name");
checks += 2;

// The Agents SDK: an agent calls its function tool and finishes, plain and
// streamed.
setTracingDisabled(true);
setDefaultOpenAIClient(client);
setOpenAIAPI("responses");
for (const streamRun of [false, true]) {
  const calls = [];
  const weather = tool({
    name: "get_weather", description: "Weather in a city", parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => { calls.push(city); return `sunny in ${city}`; },
  });
  const agent = new Agent({ name: "Weather", instructions: "Answer with the weather tool.", model, tools: [weather],
    modelSettings: { toolChoice: "required", maxTokens: 256, temperature: 0 } });
  const result = await run(agent, "Weather in Paris?", { maxTurns: 4, stream: streamRun });
  if (streamRun) {
    for await (const _ of result.toStream()) { /* drain */ }
    await result.completed;
  }
  check(calls.length === 1 && typeof calls[0] === "string", `the agent called its tool once (${streamRun ? "streamed" : "plain"})`);
  const kinds = result.newItems.map((i) => i.type);
  check(kinds.includes("tool_call_item") && kinds.includes("tool_call_output_item") && kinds.at(-1) === "message_output_item",
    `tool call, its output, then the final message: ${kinds}`);
  check(typeof result.finalOutput === "string", "the agent finished with a final output");
}

console.log(`e2e_responses: ${checks} checks passed`);
