// Structured outputs against a running dsv4 serve on the embedded random
// model, which unconstrained writes garbage: every reply must parse and
// validate, checked by independent validators (ajv for JSON Schema,
// JavaScript's RegExp for patterns), over JSON schemas, json_object,
// regexes, choices, GBNF grammars and forced tool calls, greedy and
// sampled, chat and completions. (Thinking mode, where the grammar starts
// after </think>, is tested in C++: this model never writes </think>.)
// usage: node structured_outputs.mjs BASE_URL MODEL REQUESTS [SEED]
import Ajv from "ajv/dist/2020.js";
import assert from "node:assert/strict";
import fs from "node:fs";

const [base, model, requestsArg, seedArg] = process.argv.slice(2);
const total = Number(requestsArg ?? 600);
let seed = Number(seedArg ?? 1);
const random = () => {  // mulberry32: the mix is the same on every run
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (xs) => xs[Math.floor(random() * xs.length)];
const ajv = new Ajv({ strict: false, allErrors: true });
ajv.addFormat("date", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/);
ajv.addFormat("uuid", /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i);
ajv.addFormat("email", /^[^@\s]+@[^@\s]+\.[^@\s]+$/);
ajv.addFormat("date-time", (s) => !Number.isNaN(Date.parse(s)) && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(s));
ajv.addFormat("time", /^\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/);

// ------------------------------------------------------------ the cases

// Shared with dsv4 bench --structured, which times their masks.
const cases = JSON.parse(fs.readFileSync(new URL("./structured_cases.json", import.meta.url), "utf8"));
const { schemas, regexes, choices } = cases;
const grammars = cases.grammars.map((g) => ({ gbnf: g.gbnf, re: new RegExp(g.regex) }));
const toolSets = cases.tools;

const validators = Object.fromEntries(Object.entries(schemas).map(([k, s]) => [k, ajv.compile(s)]));
const toolValidators = new Map();
for (const set of toolSets)
  for (const t of set) toolValidators.set(t.function.name, ajv.compile(t.function.parameters));
const fullMatch = (pattern, text) => new RegExp(`^(?:${pattern})$`, "u").test(text);

// One request: its body fields and how to judge the reply.
function makeCase() {
  const r = random();
  if (r < 0.38) {
    const name = pick(Object.keys(schemas));
    const how = pick(["response_format", "response_format", "structured_outputs", "guided_json"]);
    const fields = how === "response_format"
      ? { response_format: { type: "json_schema", json_schema: { name, schema: schemas[name], strict: true } } }
      : how === "structured_outputs" ? { structured_outputs: { json: schemas[name] } } : { guided_json: schemas[name] };
    return { what: `schema ${name} via ${how}`, fields, kind: "text", judge: (text) => {
      const v = JSON.parse(text);
      if (!validators[name](v)) throw new Error(ajv.errorsText(validators[name].errors));
    } };
  }
  if (r < 0.45)
    return { what: "json_object", fields: { response_format: { type: "json_object" } }, kind: "text", judge: (text) => {
      const v = JSON.parse(text);
      if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Error("not an object");
    } };
  if (r < 0.58) {
    const pattern = pick(regexes);
    const fields = random() < 0.5 ? { guided_regex: pattern } : { structured_outputs: { regex: pattern } };
    return { what: `regex ${pattern}`, fields, kind: "text", judge: (text) => {
      if (!fullMatch(pattern, text)) throw new Error("does not match");
    } };
  }
  if (r < 0.68) {
    const list = pick(choices);
    const fields = random() < 0.5 ? { guided_choice: list } : { structured_outputs: { choice: list } };
    return { what: `choice ${list}`, fields, kind: "text", judge: (text) => {
      if (!list.includes(text)) throw new Error("not a choice");
    } };
  }
  if (r < 0.78) {
    const g = pick(grammars);
    const fields = random() < 0.5 ? { guided_grammar: g.gbnf } : { structured_outputs: { grammar: g.gbnf } };
    return { what: `grammar ${g.re}`, fields, kind: "text", judge: (text) => {
      if (!g.re.test(text)) throw new Error("not in the grammar");
    } };
  }
  const tools = pick(toolSets);
  const named = random() < 0.3 ? pick(tools).function.name : null;
  const fields = { tools, tool_choice: named ? { type: "function", function: { name: named } } : "required" };
  if (!named && random() < 0.3) fields.parallel_tool_calls = false;
  return { what: `tools ${tools.map((t) => t.function.name)} ${named ?? "required"}`, fields, kind: "tools", judge: (msg, finish) => {
    if (finish !== "tool_calls") throw new Error(`finish_reason ${finish}`);
    if (!msg.tool_calls?.length) throw new Error("no tool calls");
    if (named && msg.tool_calls.length !== 1) throw new Error("a named function is called once");
    if (fields.parallel_tool_calls === false && msg.tool_calls.length !== 1) throw new Error("parallel_tool_calls false");
    for (const call of msg.tool_calls) {
      const name = call.function.name;
      if (!tools.some((t) => t.function.name === name) || (named && name !== named)) throw new Error(`called ${name}`);
      const validate = toolValidators.get(name);
      if (!validate(JSON.parse(call.function.arguments))) throw new Error(`${name}: ${ajv.errorsText(validate.errors)}`);
    }
  } };
}

async function post(path, body) {
  const res = await fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${res.status}: ${JSON.stringify(json)}`);
  return json;
}

let done = 0, failures = 0, greedy = 0, sampled = 0, completions = 0, tokens = 0;
const kinds = {};
async function runOne(index) {
  const c = makeCase();
  const sampling = random() < 0.5 ? { temperature: 0 } : { temperature: pick([0.7, 1.0, 1.3]), top_p: pick([1, 0.95]), seed: index };
  const useCompletions = c.kind === "text" && random() < 0.2;
  const body = { model, max_tokens: 400, ...sampling, ...c.fields };
  let reply;
  try {
    if (useCompletions) {
      const r = await post("/v1/completions", { ...body, prompt: `Request ${index}:` });
      reply = { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
    } else {
      const messages = [{ role: "user", content: `Request ${index}: answer as asked.` }];
      const r = await post("/v1/chat/completions", { ...body, messages });
      const m = r.choices[0].message;
      reply = { text: m.content ?? "", message: m, finish: r.choices[0].finish_reason, usage: r.usage };
    }
    tokens += reply.usage.completion_tokens;
    if (c.kind === "tools") c.judge(reply.message, reply.finish);
    else {
      if (reply.finish !== "stop") throw new Error(`finish_reason ${reply.finish}`);
      c.judge(reply.text);
    }
    kinds[c.what.split(" ")[0]] = (kinds[c.what.split(" ")[0]] ?? 0) + 1;
  } catch (e) {
    ++failures;
    console.error(`request ${index} (${c.what}, ${JSON.stringify(sampling)}): ${e.message}\n  reply: ${JSON.stringify(reply)}`);
  }
  sampling.temperature === 0 ? ++greedy : ++sampled;
  if (useCompletions) ++completions;
  ++done;
}

// Errors name the construct.
const bad = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" },
  body: JSON.stringify({ model, messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { not: { type: "string" } } } } } } }) });
const badBody = await bad.json();
assert.equal(bad.status, 400);
assert.match(badBody.error.message, /'not' is not supported/);
assert.equal(badBody.error.param, "response_format");

const started = Date.now();
const queue = [...Array(total).keys()];
await Promise.all([...Array(16)].map(async () => {
  while (queue.length) await runOne(queue.shift());
}));
const seconds = (Date.now() - started) / 1000;
console.log(`structured outputs: ${done} requests (${greedy} greedy, ${sampled} sampled, ` +
  `${completions} completions; ${JSON.stringify(kinds)}), ${tokens} tokens in ${seconds.toFixed(1)} s: ` +
  `${done - failures} valid, ${failures} invalid`);
process.exit(failures === 0 && done === total ? 0 : 1);
