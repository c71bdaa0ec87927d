"""A byte-level BPE tokenizer trained on the recipe's own text, written as the tokenizer.json a
DeepSeek release ships (HF `tokenizers` layout), which the engine's loader reads.

DeepSeek-V4's chat markers are added tokens (matched whole before anything else): the sentence
markers (special), the turn markers, <think> and </think>, and the DSML tag openers. The
pre-tokenizer splits digits one by one (a number's digits stay aligned for arithmetic), words
with their leading space, punctuation runs and whitespace; merges are learned inside those pieces.
"""

import collections
import json
import re

import harness  # noqa: F401
from tokenizer_json import BYTE_CHAR

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
MARKERS = ["<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<｜latest_reminder｜>", "<｜DSML｜", "</｜DSML｜"]
SPECIALS = [BOS, EOS, PAD]
# Digits alone; a word with its leading space; a run of other symbols with its leading space;
# newlines; other whitespace (a run before a word leaves its last space to the word).
SPLIT = r"[0-9]| ?[A-Za-z]+| ?[^\sA-Za-z0-9]+|\n+|\s+(?!\S)|\s+"


def pieces(text):
    """The pre-tokenizer's pieces of text outside the added tokens."""
    return re.findall(SPLIT, text)


def split_added(text):
    """[(is_added, part)]: the added tokens in text and what lies between them."""
    pattern = "(" + "|".join(re.escape(t) for t in sorted(SPECIALS + MARKERS, key=len, reverse=True)) + ")"
    return [(i % 2 == 1, part) for i, part in enumerate(re.split(pattern, text)) if part]


def train(texts, vocab_size):
    """(tokens by id, merges): the added tokens, the 256 bytes, then learned merges."""
    counts = collections.Counter()
    for text in texts:
        for added, part in split_added(text):
            if not added:
                counts.update(pieces(part))
    words = {tuple(BYTE_CHAR[b] for b in piece.encode("utf-8")): n for piece, n in counts.items()}
    tokens = SPECIALS + MARKERS + [BYTE_CHAR[b] for b in range(256)]
    merges = []
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for w, n in words.items():
        for pair in zip(w, w[1:]):
            pair_counts[pair] += n
            where[pair].add(w)
    while len(tokens) < vocab_size and pair_counts:
        # most frequent pair; ties by the pair itself so training is deterministic
        best = max(pair_counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pair_counts[best] < 2:
            break
        merged = best[0] + best[1]
        merges.append(best)
        tokens.append(merged)
        for w in list(where[best]):
            n = words.pop(w)
            for pair in zip(w, w[1:]):
                pair_counts[pair] -= n
                if pair_counts[pair] <= 0:
                    del pair_counts[pair]
                where[pair].discard(w)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw = tuple(out)
            words[nw] = words.get(nw, 0) + n
            for pair in zip(nw, nw[1:]):
                pair_counts[pair] += n
                where[pair].add(nw)
        where.pop(best, None)
    return tokens, merges


def tokenizer_json(tokens, merges):
    added = set(SPECIALS + MARKERS)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": t in SPECIALS} for i, t in enumerate(tokens) if t in added],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens) if t not in added},
                  "merges": [f"{a} {b}" for a, b in merges]},
    }


class Tokenizer:
    """Encodes as the engine does: added tokens whole, then BPE merges by rank inside each piece."""

    def __init__(self, tokens, merges):
        self.tokens = tokens
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.cache = {}

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        word = [BYTE_CHAR[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            ranked = [(self.ranks.get(p, 1 << 30), i) for i, p in enumerate(zip(word, word[1:]))]
            rank, i = min(ranked)
            if rank == 1 << 30:
                break
            word[i : i + 2] = [word[i] + word[i + 1]]
        ids = [self.ids[t] for t in word]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        out = []
        for added, part in split_added(text):
            if added:
                out.append(self.ids[part])
            else:
                for p in pieces(part):
                    out.extend(self._bpe(p))
        return out

    def decode(self, ids):
        byte_of = {c: b for b, c in BYTE_CHAR.items()}
        out, pending = [], bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in self.ids and i < len(SPECIALS) + len(MARKERS):
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
                out.append(t)
            else:
                pending.extend(byte_of[c] for c in t)
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)


def save(path, tokens, merges):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(tokens, merges), f, ensure_ascii=False, indent=1)
        f.write("\n")


def save_config(path):
    """tokenizer_config.json: the sentence markers, and BOS before a plain (non-chat) prompt."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
                   "model_max_length": 4096, "tokenizer_class": "LlamaTokenizerFast"}, f, ensure_ascii=False, indent=1)
        f.write("\n")
