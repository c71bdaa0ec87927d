"""Conversations rendered by the engine's own chat encoder (build/dsv4_render_chat), so what the
model trains on is byte for byte what `dsv4 serve` puts before it.

A conversation's learned part is its last assistant turn: the prompt is the conversation up to
that turn with the generation prompt opened, the full text the conversation with the turn; the
prompt must be a prefix of the full text (the encoder keeps the reasoning of the turn after the
last user message), and the difference is what the model learns to write, EOS included.
"""

import json
import os
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOOL = os.path.join(ROOT, "build", "dsv4_render_chat")


def _run(requests, tokenizer_dir=None):
    if not os.path.exists(TOOL):
        raise SystemExit(f"{TOOL} is missing: build it first (make -C build dsv4_render_chat)")
    args = [TOOL] + ([tokenizer_dir] if tokenizer_dir else [])
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    done = subprocess.run(args, input=text.encode(), capture_output=True, check=True)
    out = [json.loads(line) for line in done.stdout.decode().splitlines()]
    for r, o in zip(requests, out):
        if "error" in o:
            raise ValueError(f"the chat encoder refused {r['messages']}: {o['error']}")
    return out


def _requests(conversation):
    """For each assistant turn: the prompt before it (generation prompt opened) and the
    conversation through it; last, the whole conversation."""
    msgs, flags = conversation["messages"], {"thinking": conversation["thinking"]}
    turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    out = []
    for i in turns:
        out.append({"messages": msgs[:i], "add_generation_prompt": True, **flags})
        out.append({"messages": msgs[: i + 1], "add_generation_prompt": False, **flags})
    return out


def render(conversations, tokenizer_dir=None):
    """[(whole conversation, [(start, end) of each learned span])] as text, or as ids with
    tokenizer_dir. An assistant turn is learned where the conversation holds it as the model
    writes it (its prompt and the turn are a prefix of the whole): the last turn always, an
    earlier one unless the encoder dropped its reasoning from the history."""
    per = [_requests(c) for c in conversations]
    out = _run([r for rs in per for r in rs], tokenizer_dir)
    key = "ids" if tokenizer_dir else "text"
    result, at = [], 0
    for rs in per:
        rendered = [o[key] for o in out[at : at + len(rs)]]
        at += len(rs)
        whole = rendered[-1]
        spans = []
        for prompt, through in zip(rendered[0::2], rendered[1::2]):
            if through[: len(prompt)] == prompt and whole[: len(through)] == through:
                spans.append((len(prompt), len(through)))
        if not spans or spans[-1][1] != len(whole):
            raise ValueError(f"the last turn is not learnable:\n{rendered[-2]!r}\n{whole!r}")
        result.append((whole, spans))
    return result


def render_prompts(conversations, tokenizer_dir):
    """Prompt ids before the last assistant turn (evaluation: the model writes the rest)."""
    return [o["ids"] for o in _run([_requests(c)[-2] for c in conversations], tokenizer_dir)]
