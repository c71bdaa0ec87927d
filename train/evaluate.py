"""Held-out accuracy of a served model, through the OpenAI-compatible API, greedy.

    build/dsv4 serve --model DIR &   (or no --model: the embedded default)
    /usr/bin/python3 train/evaluate.py [--url http://127.0.0.1:8000] [--count 200] [--write-cases F]

Arithmetic (thinking off and on): the last integer of the reply is the answer. Tools: the
reply's tool_calls[0] has the right name and arguments; then, fed the tool's result, the reply
states the result's value. The questions come from data.py's held-out phrasings (and cities), so
the model never saw them in training. --write-cases writes the requests and expected answers as
JSON lines (the engine's tests replay them).
"""

import argparse
import concurrent.futures
import json
import re
import sys
import os
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import data  # noqa: E402

HELDOUT_SEED = 12345


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def last_integer(text):
    found = re.findall(r"-?\d+", text or "")
    return int(found[-1]) if found else None


def cases(count):
    """count arithmetic questions and count tool requests, held out."""
    convs = data.conversations(HELDOUT_SEED, 20 * count, split="heldout")
    arithmetic = [c for c in convs if c["check"]["kind"] == "arithmetic"][:count]
    tools = [c for c in convs if c["check"]["kind"] == "tool"][:count]
    out = []
    for c in arithmetic:
        question = c["messages"][0]["content"]
        for thinking in (False, True):
            out.append({"kind": "arithmetic", "thinking": thinking, "messages": [{"role": "user", "content": question}],
                        "answer": c["check"]["answer"]})
    for c in tools:
        system, user, call, result = c["messages"][:4]
        out.append({"kind": "tool", "thinking": False, "messages": [{"role": "user", "content": user["content"]}],
                    "system": system["content"], "tools": system["tools"], "name": c["check"]["name"],
                    "arguments": c["check"]["arguments"], "result": result["content"], "value": c["check"]["value"]})
    return out


def request(case):
    body = {"messages": case["messages"], "temperature": 0, "max_tokens": 400,
            "chat_template_kwargs": {"enable_thinking": case["thinking"]}}
    if case["kind"] == "tool":
        body["messages"] = ([{"role": "system", "content": case["system"]}] if case["system"] else []) + case["messages"]
        body["tools"] = case["tools"]
    return body


def run(url, case):
    reply = post(url, request(case))["choices"][0]["message"]
    if case["kind"] == "arithmetic":
        return last_integer(reply.get("content")) == case["answer"], reply
    calls = reply.get("tool_calls") or []
    if not calls:
        return (False, False), reply
    call = calls[0]["function"]
    try:
        called = call["name"] == case["name"] and json.loads(call["arguments"]) == case["arguments"]
    except json.JSONDecodeError:
        called = False
    body = request(case)
    body["messages"] = body["messages"] + [{"role": "assistant", "content": reply.get("content") or "",
                                            "tool_calls": calls},
                                           {"role": "tool", "tool_call_id": calls[0]["id"], "content": case["result"]}]
    answer = post(url, body)["choices"][0]["message"].get("content") or ""
    return (called, str(case["value"]) in answer), {"call": reply, "answer": answer}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--write-cases")
    ap.add_argument("--show-failures", type=int, default=3)
    args = ap.parse_args()
    all_cases = cases(args.count)
    if args.write_cases:
        with open(args.write_cases, "w") as f:
            for c in all_cases:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda c: run(args.url, c), all_cases))
    tallies = {}
    for case, (ok, reply) in zip(all_cases, results):
        keys = ([f"arithmetic thinking={'on' if case['thinking'] else 'off'}"] if case["kind"] == "arithmetic"
                else ["tool call", "answer after tool result"])
        oks = [ok] if case["kind"] == "arithmetic" else list(ok)
        for key, good in zip(keys, oks):
            t = tallies.setdefault(key, [0, 0, []])
            t[0] += bool(good)
            t[1] += 1
            if not good:
                t[2].append((case, reply))
    for key, (good, total, failures) in tallies.items():
        print(f"{key}: {good}/{total} = {100.0 * good / total:.1f}%")
        for case, reply in failures[: args.show_failures]:
            print("   failed:", json.dumps(case["messages"])[:200], "->", json.dumps(reply)[:300])


if __name__ == "__main__":
    main()
