"""Trains dsv4's default model: one seeded command, CPU only.

    /usr/bin/python3 train/train.py --out /tmp/dsv4-train [--steps N] [--seed 0]

Makes the recipe's conversations (data.py), renders them with the engine's chat encoder
(render.py), trains the BPE tokenizer (bpe.py), trains the model with its MTP block (model.py,
the released formats applied as it trains), and writes into --out:
  model/      config.json, model.safetensors, tokenizer.json, tokenizer_config.json
  golden/     this trainer's forward on the exported checkpoint, in the golden format
  loss.tsv    step, seconds, tokens, main loss, MTP loss, indexer loss, learning rate
  loss.png    the loss curve
  state.pt    the trained parameters
"""

import argparse
import ctypes
import math
import os
import random
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bpe  # noqa: E402
import data  # noqa: E402
import dspark  # noqa: E402
import export  # noqa: E402
import render  # noqa: E402
from model import Config, Stats, Transformer  # noqa: E402

MTP_WEIGHT = 0.3  # the MTP block's loss, added to the main loss
INDEXER_WEIGHT = 0.1
BALANCE_STEP = 1e-3
GOLDEN_PROMPT = 160
DSPARK_CALLS = 8  # draft calls per sequence in a drafter step  # how far a step moves a score-routed expert's bias toward balance


def keep_freed_memory():
    """Tensors freed in a step serve the next one: glibc would map every large tensor fresh and
    fault it in page by page (several times slower steps on this machine)."""
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest
    libc.mallopt(m_trim_threshold, 1 << 40)


def batches(examples, rng, token_budget, max_len):
    """Batches of examples of similar length, at most token_budget tokens of padded rows."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = 512
    out = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: len(examples[i][0]))
        batch, longest = [], 0
        for i in chunk:
            n = min(len(examples[i][0]), max_len)
            if batch and max(longest, n) * (len(batch) + 1) > token_budget:
                out.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            out.append(batch)
    rng.shuffle(out)
    return out


def collate(examples, batch, max_len, pad_id):
    """ids [B, S], main targets and MTP targets [B, S] (-100 where nothing is learned: the
    target token is outside every learned span)."""
    rows = [examples[i] for i in batch]
    s = min(max(len(ids) for ids, _ in rows), max_len)
    ids = torch.full((len(rows), s), pad_id, dtype=torch.long)
    learned = torch.zeros((len(rows), s + 2), dtype=torch.bool)
    for r, (full, spans) in enumerate(rows):
        full = full[:s]
        ids[r, : len(full)] = torch.tensor(full)
        for a, b in spans:
            learned[r, a : min(b, len(full))] = True
    padded = torch.cat((ids, torch.full((len(rows), 2), pad_id, dtype=torch.long)), dim=1)
    main = torch.where(learned[:, 1 : s + 1], padded[:, 1 : s + 1], -100)
    mtp = torch.where(learned[:, 2 : s + 2], padded[:, 2 : s + 2], -100)
    return ids, main, mtp


def learning_rate(step, total, peak):
    warmup = min(300, total // 10)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def balance(stats):
    """Aux-loss-free balancing: each score-routed layer's bias moves toward equal loads."""
    with torch.no_grad():
        for moe, load in stats.loads:
            load = load.float()
            moe.bias += BALANCE_STEP * torch.sign(load.mean() - load)


def plot(log, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [r[0] for r in log]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(steps, [r[3] for r in log], label="main (next token)")
    ax.plot(steps, [r[4] for r in log], label="MTP (token after next)")
    ax.plot(steps, [r[5] for r in log], label="indexer KL")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per learned token)")
    ax.set_title("dsv4 default model: training loss")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1100, help="optimizer steps (the schedule's length)")
    ap.add_argument("--conversations", type=int, default=100000)
    ap.add_argument("--vocab", type=int, default=2048, help="at most this many tokens (merges stop when no pair repeats)")
    ap.add_argument("--tokens-per-batch", type=int, default=3072)
    ap.add_argument("--max-len", type=int, default=640)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dspark-steps", type=int, default=80, help="steps of the DSpark drafter (0: none)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads (1 leaves a core to other work: a busy core stalls every parallel op)")
    ap.add_argument("--mix", default=",".join(str(v) for v in data.MIX),
                    help="shares of arithmetic, tool use, chats, greetings")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    rng = random.Random(args.seed)
    model_dir = os.path.join(args.out, "model")
    os.makedirs(model_dir, exist_ok=True)
    t0 = time.time()

    mix = [float(v) for v in args.mix.split(",")]
    conversations = data.conversations(args.seed, args.conversations, mix=mix)
    texts = render.render(conversations[:20000])
    tokens, merges = bpe.train([whole for whole, _ in texts], args.vocab)
    bpe.save(os.path.join(model_dir, "tokenizer.json"), tokens, merges)
    bpe.save_config(os.path.join(model_dir, "tokenizer_config.json"))
    examples = render.render(conversations, model_dir)
    lengths = sorted(len(f) for f, _ in examples)
    print(f"data: {len(examples)} conversations, {len(tokens)} tokens in the vocabulary, lengths median "
          f"{lengths[len(lengths) // 2]} max {lengths[-1]}; {time.time() - t0:.0f} s", flush=True)

    cfg = Config(vocab_size=-(-len(tokens) // 128) * 128)  # the rows the tokenizer uses, in whole tiles
    model = Transformer(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and ".fn" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and ".fn" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))

    pad_id = tokens.index(bpe.PAD)
    log, step, seen = [], 0, 0
    start = time.time()
    while step < args.steps:
        for batch in batches(examples, rng, args.tokens_per_batch, args.max_len):
            if step >= args.steps:
                break
            ids, main_t, mtp_t = collate(examples, batch, args.max_len, pad_id)
            lr = learning_rate(step, args.steps, args.lr)
            for g in opt.param_groups:
                g["lr"] = lr
            stats = Stats()
            h, logits, _ = model(ids, stats)
            main_loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), main_t.flatten(), ignore_index=-100)
            next_ids = torch.cat((ids[:, 1:], ids[:, -1:]), dim=1)
            mtp_logits = model.mtp_logits(h, next_ids, stats)
            mtp_loss = torch.nn.functional.cross_entropy(mtp_logits.flatten(0, 1), mtp_t.flatten(), ignore_index=-100)
            index_loss = torch.stack(stats.index_losses).mean() if stats.index_losses else torch.zeros(())
            loss = main_loss + MTP_WEIGHT * mtp_loss + INDEXER_WEIGHT * index_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            balance(stats)
            seen += int((ids != pad_id).sum())
            step += 1
            if step % 10 == 0 or step == 1:
                row = (step, time.time() - start, seen, main_loss.item(), mtp_loss.item(), index_loss.item(), lr)
                log.append(row)
                print("step %d  %.0fs  %d tokens  main %.4f  mtp %.4f  indexer %.4f  lr %.2e" % row, flush=True)

    with open(os.path.join(args.out, "loss.tsv"), "w") as f:
        f.write("step\tseconds\ttokens\tmain\tmtp\tindexer\tlr\n")
        for r in log:
            f.write("\t".join(str(v) for v in r) + "\n")
    plot(log, os.path.join(args.out, "loss.png"))
    torch.save(model.state_dict(), os.path.join(args.out, "state.pt"))
    model.eval()
    export.write_checkpoint(model, model_dir, {"trainer": "dsv4 train/train.py", "seed": str(args.seed)})
    # the golden: two held-out tool-use prompts (long enough for compressed rows and the
    # indexer's top-k), cut to GOLDEN_PROMPT tokens
    golden_convs = [c for c in data.conversations(args.seed + 1, 50, split="heldout") if c["check"]["kind"] == "tool"][:2]
    golden_prompts = [p[:GOLDEN_PROMPT] for p in render.render_prompts(golden_convs, model_dir)]
    export.write_golden(model, torch.tensor(golden_prompts), 16, os.path.join(args.out, "golden"),
                        {"layer_out.0": 1e-3, "prefill_logits": 0.05, "decode_logits": 0.1, "mtp_logits": 0.1,
                         "decode_argmax_min": 0.9},
                        "dsv4 train/model.py (the trainer's forward), float32, on the exported checkpoint")
    if args.dspark_steps:
        train_dspark(model, examples, rng, args, pad_id, tokens)
    print(f"done: {step} steps, {seen} tokens, {(time.time() - t0) / 60:.1f} minutes in all", flush=True)


def train_dspark(target, examples, rng, args, pad_id, tokens):
    """The DSpark drafter against the trained target (frozen), written as the DSpark variant of
    the model (model-dspark/: the trunk, the drafter's stages in place of the MTP block)."""
    for p in target.parameters():
        p.requires_grad_(False)
    drafter = dspark.DSpark(target.cfg, noise_token_id=pad_id)
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    log, step, start = [], 0, time.time()
    while step < args.dspark_steps:
        for batch in batches(examples, rng, args.tokens_per_batch, args.max_len):
            if step >= args.dspark_steps:
                break
            ids, main_t, _ = collate(examples, batch, args.max_len, pad_id)
            learned = main_t != -100  # position t: token t + 1 is one the model writes
            length = (ids != pad_id).sum(1)
            for g in opt.param_groups:
                g["lr"] = learning_rate(step, args.dspark_steps, args.lr)
            loss, ce, bce, accepted, stats = dspark.loss(drafter, target, ids, learned, length, DSPARK_CALLS, generator)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
            opt.step()
            balance(stats)
            step += 1
            if step % 10 == 0 or step == 1:
                row = (step, time.time() - start, ce.item(), bce.item(), accepted.item())
                log.append(row)
                print("dspark step %d  %.0fs  draft %.4f  confidence %.4f  greedy drafts kept %.2f of 5" % row, flush=True)
    out = os.path.join(args.out, "model-dspark")
    dspark.write_checkpoint(target, drafter.eval(), out, {"trainer": "dsv4 train/train.py (DSpark)", "seed": str(args.seed)})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.out, "model", name), out)
    with open(os.path.join(args.out, "dspark-loss.tsv"), "w") as f:
        f.write("step\tseconds\tdraft\tconfidence\tkept\n")
        for r in log:
            f.write("\t".join(str(v) for v in r) + "\n")


if __name__ == "__main__":
    main()
