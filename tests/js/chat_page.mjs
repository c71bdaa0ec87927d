// The chat page at / in a real browser (Debian's chromium, driven by
// puppeteer-core), as a person uses it: it loads without console errors,
// lists the model, streams a reply into the page, shows thinking folded,
// and its Stop button aborts the running request (the server's abort
// counter moves and the request's pages come back). A screenshot is saved.
// usage: node chat_page.mjs BASE_URL SCREENSHOT.png [API_KEY]
import puppeteer from "puppeteer-core";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, screenshot, apiKey] = process.argv.slice(2);
let checks = 0;
const check = (cond, what) => { assert.ok(cond, what); ++checks; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const auth = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
const metric = async (name, labels) => {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + (labels ?? "")) && !l.startsWith("#"));
  return line ? Number(line.split(" ").pop()) : 0;
};

const profile = mkdtempSync(join(tmpdir(), "dsv4-chromium-"));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", `--user-data-dir=${profile}`],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 760 });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("requestfailed", (r) => { if (!/v1\/chat\/completions/.test(r.url())) errors.push(`${r.url()}: ${r.failure()?.errorText}`); });
  // A server with an API key: the key is in the page's settings before it
  // loads (as a person would have saved it).
  if (apiKey) await page.evaluateOnNewDocument((k) => localStorage.setItem("dsv4.api_key", k), apiKey);
  const response = await page.goto(`${base}/`, { waitUntil: "load" });
  check(response.status() === 200 && response.headers()["content-type"].startsWith("text/html"), "the page is served at /");
  await page.waitForFunction(() => document.querySelector("#model").options.length > 0, { timeout: 10000 });
  check((await page.$eval("#status", (e) => e.textContent)) === "ready", "the page lists the model and is ready");

  const setField = (id, value) => page.$eval(id, (el, v) => {
    if (el.type === "checkbox") el.checked = v; else el.value = v;
    el.dispatchEvent(new Event("change"));
  }, value);
  const replies = () => page.$$eval(".msg.assistant", (els) => els.length);
  const lastMeta = () => page.$eval(".msg.assistant:last-child .meta", (e) => e.textContent);
  const ask = async (text) => {
    await page.type("#prompt", text);
    await page.keyboard.press("Enter");
  };

  // A message streams a reply into the page.
  await setField("#max_tokens", "24");
  await setField("#temperature", "0");
  await ask("Hello there");
  await page.waitForFunction(() => /tokens/.test(document.querySelector(".msg.assistant:last-child .meta")?.textContent ?? ""),
    { timeout: 60000 });
  check((await page.$$eval(".msg.user", (els) => els.map((e) => e.textContent))).some((t) => t.includes("Hello there")),
    "the question shows");
  const reply = await page.$eval(".msg.assistant:last-child .content", (e) => e.textContent);
  check(reply.length > 0, "a reply streamed into the page");
  const usageBefore = await metric("dsv4_generation_tokens_total");
  check(usageBefore > 0, "the server counted the reply's tokens");

  // Thinking: shown folded above the answer.
  await setField("#thinking", true);
  await ask("Think first");
  await page.waitForFunction(() => /tokens/.test(document.querySelector(".msg.assistant:last-child .meta")?.textContent ?? ""),
    { timeout: 60000 });
  const fold = await page.$eval(".msg.assistant:last-child", (box) => {
    const d = box.querySelector("details");
    return d ? { open: d.open, text: d.textContent } : null;
  });
  check(fold && !fold.open && fold.text.length > "Thinking".length, "reasoning is in a folded details block");
  await setField("#thinking", false);

  // Stop: a long reply is stopped while it streams; the server aborts it.
  // (A random model may end a reply before Stop lands: then ask again.)
  await setField("#max_tokens", "3500");
  await setField("#temperature", "1");
  const abortsBefore = await metric("dsv4_requests_total", '{endpoint="chat",outcome="abort"}');
  let stopped = false;
  for (let attempt = 0; attempt < 5 && !stopped; ++attempt) {
    const before = await replies();
    await ask(`Tell me a long story, take ${attempt}`);
    await page.waitForFunction((n) => {
      const boxes = document.querySelectorAll(".msg.assistant");
      const last = boxes[boxes.length - 1];
      return boxes.length > n && (last.querySelector(".content").textContent.length > 0 || last.querySelector(".meta").textContent !== "");
    }, { timeout: 60000 }, before);
    if ((await lastMeta()) !== "") continue;  // over before it could be stopped
    await page.click("#stop");
    await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child .meta").textContent !== "", { timeout: 30000 });
    stopped = (await lastMeta()) === "stopped";
  }
  check(stopped, "Stop ended a reply while it streamed");
  check((await page.$eval("#stop", (b) => b.disabled)) && !(await page.$eval("#send", (b) => b.disabled)),
    "after Stop the page can send again");
  let aborts = abortsBefore;
  for (let i = 0; i < 100 && aborts === abortsBefore; ++i) {
    await sleep(50);
    aborts = await metric("dsv4_requests_total", '{endpoint="chat",outcome="abort"}');
  }
  check(aborts === abortsBefore + 1, `the server aborted the stopped request (${abortsBefore} -> ${aborts})`);
  let running = 1;
  for (let i = 0; i < 100 && running > 0; ++i) {
    running = await metric("dsv4_num_requests_running");
    if (running > 0) await sleep(50);
  }
  check(running === 0, "nothing runs after Stop");

  // The API key: the page's own calls carry it (a wrong one is refused).
  if (apiKey) {
    const denied = await fetch(`${base}/v1/models`);
    check(denied.status === 401, "the server wants a key");
    const allowed = await fetch(`${base}/v1/models`, { headers: auth });
    check(allowed.status === 200, "the page's key works");
  }

  await page.screenshot({ path: screenshot, fullPage: false });
  check(errors.length === 0, `no console errors: ${errors.join(" | ")}`);
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(`chat_page: ${checks} checks passed, screenshot ${screenshot}`);
