// Load test on loopback: CLIENTS concurrent streaming clients for SECONDS
// seconds, every stream must complete; then each distinct request is sent
// alone and its greedy output must equal what it produced under load; the
// cache must be back to empty.
// usage: node load_test.mjs BASE_URL MODEL [CLIENTS=64] [SECONDS=120]
import assert from "node:assert/strict";

const [base, model, clientsArg, secondsArg] = process.argv.slice(2);
const clients = Number(clientsArg ?? 64), seconds = Number(secondsArg ?? 120);
const prompts = Array.from({ length: 24 }, (_, i) => `request ${i}: ` + "lorem ipsum dolor ".repeat(1 + (i % 7)));
const requestBody = (i, stream) => {
  const chat = i % 2 === 1;
  const common = { model, max_tokens: 6 + (i % 11), temperature: 0, ignore_eos: true, stream };
  return chat
    ? ["/v1/chat/completions", { ...common, messages: [{ role: "user", content: prompts[i] }] }]
    : ["/v1/completions", { ...common, prompt: prompts[i] }];
};

// One streaming request; returns its text after checking the SSE stream.
async function streamOnce(i) {
  const [path, body] = requestBody(i, true);
  const res = await fetch(base + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  assert.match(res.headers.get("content-type"), /text\/event-stream/);
  const raw = await res.text();
  const events = raw.split("\n\n").filter((e) => e.length);
  assert.equal(events.at(-1), "data: [DONE]", "the stream ends with [DONE]");
  let text = "", finish = null;
  for (const e of events.slice(0, -1)) {
    assert.ok(e.startsWith("data: "), "every event is a data line");
    const chunk = JSON.parse(e.slice(6));
    for (const ch of chunk.choices) {
      text += ch.text ?? ch.delta?.content ?? "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(finish, "length", "every stream finishes");
  return text;
}

const seen = new Map();  // request index -> text under load
let completed = 0, errors = 0;
const deadline = Date.now() + seconds * 1000;
async function client(c) {
  for (let k = 0; Date.now() < deadline; ++k) {
    const i = (c * 7 + k) % prompts.length;
    try {
      const text = await streamOnce(i);
      if (seen.has(i)) assert.equal(text, seen.get(i), `request ${i} gave different text under load`);
      else seen.set(i, text);
      ++completed;
    } catch (e) {
      if (++errors <= 5) console.error(`client ${c}: ${e.message}`);
    }
  }
}
await Promise.all(Array.from({ length: clients }, (_, c) => client(c)));
assert.equal(errors, 0, `${errors} failed streams`);

// One at a time: the same greedy outputs.
for (const [i, text] of seen) {
  const [path, body] = requestBody(i, false);
  const res = await fetch(base + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const j = await res.json();
  const alone = j.choices[0].text ?? j.choices[0].message.content;
  assert.equal(alone, text, `request ${i}: alone differs from under load`);
}
const metrics = await (await fetch(base + "/metrics")).text();
const usage = [...metrics.matchAll(/^dsv4_kv_cache_usage\{family="[^"]+"\} (\S+)$/gm)].map((m) => Number(m[1]));
assert.ok(usage.length > 0 && usage.every((u) => u === 0), `cache pages back to baseline: ${usage}`);
assert.match(metrics, /^dsv4_num_requests_running 0$/m);
console.log(`ok: ${completed} streams from ${clients} clients in ${seconds}s, ${seen.size} distinct requests identical alone`);
