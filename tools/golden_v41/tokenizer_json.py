"""A small byte-level BPE tokenizer.json in the form DeepSeek releases (HF `tokenizers`), whose
vocabulary has what the Engram token map folds together: case and leading-space variants of
words, accented and full-width spellings, whitespace runs and partial UTF-8 byte tokens.
Also the object the reference's engram.py reads from a tokenizer (len, backend_tokenizer.decode,
backend_tokenizer.id_to_token), decoding as HF's ByteLevel decoder does."""

import json

RESERVED = 16  # special tokens at the end of the vocabulary (the DSpark noise token is one)
SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
WORDS = (
    "the of and to in is that it for on with as was he be at by this had not are but from or have an "
    "they which one you were all we her she there would their will when who him been has more if no "
    "out so said what up its about into than them can only other new some could time these two may "
    "then do first any my now such like our over man me even most made after also did many before "
    "must through back years where much your way well down should because each just those people how"
).split()
EXTRA = ["café", "cafe", "naïve", "naive", "résumé", "resume", "über", "ＴＨＥ", "ｔｈｅ", "ﬁle", "file",
         "  ", "   ", "\n", "\n\n", " \n", "\t", "\t\t", "\r\n", "éé"]


def byte_alphabet():
    """GPT-2's byte -> printable char map (ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


BYTE_CHAR = byte_alphabet()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def encode_piece(text):
    return "".join(BYTE_CHAR[b] for b in text.encode("utf-8"))


def build(vocab_size):
    """(tokenizer.json object, list of token strings by id)."""
    tokens = list(SPECIALS) + [BYTE_CHAR[b] for b in range(256)]
    merges, seen = [], set(tokens)

    regular = vocab_size - RESERVED

    def add(piece):
        # every prefix becomes a token, so each merge joins two tokens already present
        for end in range(2, len(piece) + 1):
            if len(tokens) >= regular:
                return
            token = piece[:end]
            if token in seen:
                continue
            merges.append(f"{piece[:end - 1]} {piece[end - 1]}")
            seen.add(token)
            tokens.append(token)

    for word in EXTRA:
        add(encode_piece(word))
        add(encode_piece(" " + word))
    for word in WORDS:
        for variant in (word, " " + word, word.capitalize(), " " + word.capitalize(), word.upper()):
            add(encode_piece(variant))
    assert len(tokens) <= vocab_size
    while len(tokens) < vocab_size:  # reserved slots, as releases carry
        tokens.append(f"<｜reserved_{len(tokens)}｜>")
    n_regular = len(tokens)
    specials = set(SPECIALS) | {t for t in tokens if t.startswith("<｜reserved_")}
    vocab = {t: i for i, t in enumerate(tokens) if t not in specials}
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True}
        for i, t in enumerate(tokens[:n_regular]) if t in specials
    ]
    obj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    return obj, tokens, specials


class _Backend:
    def __init__(self, tokens, specials):
        self.tokens, self.specials = tokens, specials

    def id_to_token(self, token_id):
        return self.tokens[token_id]

    def decode(self, ids, skip_special_tokens=False):
        out, pending = [], bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in self.specials:
                out.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
                if not skip_special_tokens:
                    out.append(t)
            else:
                pending.extend(CHAR_BYTE[c] for c in t)
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)


class Tokenizer:
    """What engram.build_compressed_token_map reads from a transformers tokenizer."""

    def __init__(self, tokens, specials):
        self.backend_tokenizer = _Backend(tokens, specials)
        self._n = len(tokens)

    def __len__(self):
        return self._n


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
