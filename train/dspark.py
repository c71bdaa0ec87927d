"""The DSpark drafter of DeepSeek-V4-Flash-DSpark, for training against a trained target.

What the release's forward_spec computes (../shared/golden/DSPARK.md), as a differentiable forward
over many draft calls at once:

  taps    the target's last three blocks' output streams, each averaged over the hc copies,
          concatenated; main_x = main_norm(main_proj(taps)) per position
  rings   per stage, the window's last positions: kv_norm(wkv(main_x)) with plain RoPE at the
          position, FP8-rounded like any KV row
  block   [anchor, noise x (K-1)] embedded by the trunk at positions p+1 .. p+K, through the
          stages (full V4 blocks, sliding-window only and score-routed), each attending its ring
          and, without a causal mask, the whole block
  head    the last stage's hc_head and norm, the trunk's head; then per row a Markov bias
          markov_w2 . markov_w1[previous token] and a confidence logit
          proj . [hidden ; markov_w1[previous token]]

A draft call at position p (the last committed position) with anchor = the token at p + 1 drafts
the tokens at p + 2 .. p + K + 1. Trained on the target's own greedy choices along the data.
"""

import dataclasses
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

import qat
import export
import harness  # noqa: F401
import safetensors_io as st
from model import Block, HeadMix, HyperConnection, Linear, RMSNorm, Stats, rotate_pairs


def rope_at(x, cos, sin, rope_dim, inverse=False):
    """RoPE on x's last rope_dim features at per-row positions: cos/sin already gathered for the
    rows and shaped to broadcast over x's pairs."""
    return torch.cat((x[..., :-rope_dim], rotate_pairs(x[..., -rope_dim:], cos, sin, inverse)), dim=-1)


def kv_rows(attn, x, cos, sin):
    """A stage's KV rows of inputs x [..., dim] at positions whose cos/sin [..., rope/2] are given:
    kv_norm(wkv(x)), RoPE, FP8 on the non-RoPE part."""
    rd = attn.rope_dim
    kv = rope_at(attn.kv_norm(attn.wkv(x)), cos, sin, rd)
    return torch.cat((qat.fp8_act(kv[..., :-rd], qat.KV_BLOCK), kv[..., -rd:]), dim=-1)


def draft_attention(attn, x, positions, ring, ring_valid):
    """The stage's attention for block rows x [N, K, dim] at positions [N, K]: keys are the ring
    rows [N, W, hd] (ring_valid [N, W]) and every block row."""
    cfg, rd = attn.cfg, attn.rope_dim
    n, k, _ = x.shape
    cos, sin = attn.cos[positions], attn.sin[positions]  # [N, K, rope/2]
    xr = attn.wq_a.round_input(x)
    qr = attn.q_norm(attn.wq_a.on_rounded(xr))
    q = attn.wq_b(qr).unflatten(-1, (attn.heads, attn.head_dim))
    q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + cfg.rms_norm_eps)
    q = rope_at(q, cos.unsqueeze(2), sin.unsqueeze(2), rd)
    kv = rope_at(attn.kv_norm(attn.wkv.on_rounded(xr)), cos, sin, rd)
    kv = torch.cat((qat.fp8_act(kv[..., :-rd], qat.KV_BLOCK), kv[..., -rd:]), dim=-1)
    keys = torch.cat((ring, kv), dim=1)
    valid = torch.cat((ring_valid, torch.ones(n, k, dtype=torch.bool)), dim=1)
    logits = torch.einsum("nkhd,ntd->nhkt", q, keys) * attn.head_dim**-0.5
    logits = logits.masked_fill(~valid[:, None, None, :], -math.inf)
    sink = attn.attn_sink.view(1, -1, 1, 1).expand(n, -1, k, 1)
    probs = torch.cat((logits, sink), dim=-1).softmax(dim=-1)[..., :-1]
    o = torch.einsum("nhkt,ntd->nkhd", probs, keys)
    o = rope_at(o, cos.unsqueeze(2), sin.unsqueeze(2), rd, inverse=True)
    wo_a = qat.fp8_weight(attn.wo_a.weight).view(cfg.o_groups, cfg.o_lora_rank, -1)
    o = torch.einsum("nkgd,grd->nkgr", o.reshape(n, k, cfg.o_groups, -1), wo_a)
    return attn.wo_b(o.flatten(2))


def draft_block(block, h, ids, stats, positions, ring, ring_valid):
    """A stage: Block.forward with the draft attention."""
    x, post, comb = block.hc_attn.pre(h)
    h = HyperConnection.post(draft_attention(block.attn, block.attn_norm(x), positions, ring, ring_valid), h, post, comb)
    x, post, comb = block.hc_ffn.pre(h)
    return HyperConnection.post(block.ffn(block.ffn_norm(x), ids, stats), h, post, comb)


class DSpark(nn.Module):
    STAGES = 3

    def __init__(self, target_cfg, block_size=5, markov_rank=64, noise_token_id=2):
        super().__init__()
        n = target_cfg.num_hidden_layers
        # as released: the stages are the ratio list's trailing zeros, in place of the MTP layer
        cfg = dataclasses.replace(target_cfg, compress_ratios=list(target_cfg.compress_ratios[:n]) + [0] * self.STAGES)
        self.cfg, self.block_size, self.rank, self.noise_token_id = cfg, block_size, markov_rank, noise_token_id
        self.taps = list(range(n - self.STAGES, n))
        d = cfg.hidden_size
        self.main_proj = Linear(self.STAGES * d, d, "fp8")
        self.main_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.stages = nn.ModuleList(Block(cfg, n + s) for s in range(self.STAGES))
        self.norm = RMSNorm(d, cfg.rms_norm_eps)
        self.head_mix = HeadMix(cfg)
        self.markov_w1 = nn.Parameter(torch.randn(cfg.vocab_size, markov_rank) * 0.1)
        self.markov_w2 = Linear(markov_rank, cfg.vocab_size, "bf16", std=markov_rank**-0.5 * 0.1)
        self.confidence = Linear(d + markov_rank, 1, "bf16")

    def main_x(self, layers):
        """Per position: main_norm(main_proj(taps)) from the target's block outputs."""
        taps = torch.cat([layers[t].mean(dim=2) for t in self.taps], dim=-1)
        return self.main_norm(self.main_proj(taps))

    def forward(self, target, main_x, ids, calls, prev, stats):
        """calls [N, 2] (sequence, p); prev [N, K]: the previous token of each Markov step (the
        anchor, then the target's tokens). Returns (logits [N, K, V], confidence [N, K])."""
        cfg, k = self.cfg, self.block_size
        w = cfg.sliding_window
        seq, p = calls[:, 0], calls[:, 1]
        n = seq.numel()
        positions = p[:, None] + 1 + torch.arange(k)[None, :]
        ring_pos = p[:, None] - torch.arange(w - 1, -1, -1)[None, :]  # the window's positions up to p
        ring_valid = ring_pos >= 0
        ring_pos = ring_pos.clamp(min=0)
        tokens = torch.full((n, k), self.noise_token_id, dtype=torch.long)
        tokens[:, 0] = ids[seq, p + 1]
        h = target.embedding(tokens).unsqueeze(2).repeat(1, 1, cfg.hc_mult, 1)
        for stage in self.stages:
            attn = stage.attn
            rows = main_x[seq[:, None], ring_pos]  # [N, W, dim]
            ring = kv_rows(attn, rows, attn.cos[ring_pos], attn.sin[ring_pos])
            h = draft_block(stage, h, tokens, stats, positions, ring, ring_valid)
        hidden = self.head_mix(h)
        logits = target.logits(hidden, self.norm)
        e = qat.bf16(self.markov_w1)[prev]  # [N, K, rank]
        logits = logits + self.markov_w2(e)
        confidence = self.confidence(torch.cat((hidden, e), dim=-1)).squeeze(-1)
        return logits, confidence


CONFIDENCE_WEIGHT = 0.1


def draft_calls(ids, learned, per_sequence, k, generator):
    """Draft calls [N, 2] (sequence, p) at positions whose anchor p + 1 is a learned token (the
    model wrote it), up to per_sequence of them per sequence, drawn by generator."""
    calls = []
    s = ids.size(1)
    for b in range(ids.size(0)):
        candidates = torch.nonzero(learned[b, 1 : s - 1]).flatten() + 1  # p >= 1 with token p + 1 learned
        if candidates.numel() == 0:
            continue
        pick = candidates[torch.randperm(candidates.numel(), generator=generator)[:per_sequence]]
        calls += [(b, int(p)) for p in pick]
    return torch.tensor(calls, dtype=torch.long).view(-1, 2)


def chain_targets(ids, greedy, calls, k, length):
    """labels [N, K]: the target's own token at p + 2 + j (its argmax after position p + 1 + j),
    -100 past the sequence; prev [N, K]: the anchor, then labels shifted right."""
    seq, p = calls[:, 0], calls[:, 1]
    at = p[:, None] + 1 + torch.arange(k)[None, :]  # the position whose prediction drafts token at + 1
    inside = at < (length[seq][:, None] - 1)
    labels = torch.where(inside, greedy[seq[:, None], at.clamp(max=ids.size(1) - 1)], -100)
    prev = torch.cat((ids[seq, p + 1][:, None], labels[:, :-1].clamp(min=0)), dim=1)
    return labels, prev


def loss(drafter, target, ids, learned, length, per_sequence, generator):
    """The drafter's loss on a batch: next-token cross entropy of every drafted row against the
    target's greedy token, and the confidence head's binary cross entropy against whether the
    row's own argmax is that token."""
    with torch.no_grad():
        _, logits, layers = target(ids, Stats(), keep_layers=True)
        greedy = logits.argmax(-1)
    main_x = drafter.main_x(layers)
    calls = draft_calls(ids, learned, per_sequence, drafter.block_size, generator)
    labels, prev = chain_targets(ids, greedy, calls, drafter.block_size, length)
    stats = Stats()
    draft_logits, confidence = drafter(target, main_x, ids, calls, prev, stats)
    ce = F.cross_entropy(draft_logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    valid = labels != -100
    right = (draft_logits.argmax(-1) == labels).float()
    bce = F.binary_cross_entropy_with_logits(confidence[valid], right[valid])
    accepted = right.masked_fill(~valid, 0).cumprod(dim=1).sum(1).mean()  # greedy drafts kept in a row
    return ce + CONFIDENCE_WEIGHT * bce, ce, bce, accepted, stats


def checkpoint_tensors(target, drafter):
    """The DSpark variant: the trunk's tensors, the stages as mtp.{s} (no MTP block)."""
    out = {k: v for k, v in export.checkpoint_tensors(target).items() if not k.startswith("mtp.")}
    for s, stage in enumerate(drafter.stages):
        export._block(out, f"mtp.{s}.", stage)
    export._linear(out, "mtp.0.main_proj", drafter.main_proj)
    export._norm(out, "mtp.0.main_norm", drafter.main_norm)
    last = f"mtp.{len(drafter.stages) - 1}."
    export._norm(out, last + "norm", drafter.norm)
    export._head_mix(out, last, drafter.head_mix)
    out[last + "markov_head.markov_w1.weight"] = st.bf16(drafter.markov_w1)
    export._linear(out, last + "markov_head.markov_w2", drafter.markov_w2)
    export._linear(out, last + "confidence_head.proj", drafter.confidence)
    return out


def write_checkpoint(target, drafter, out_dir, metadata=None):
    os.makedirs(out_dir, exist_ok=True)
    st.write(os.path.join(out_dir, "model.safetensors"), checkpoint_tensors(target, drafter), metadata)
    config = export.config_json(drafter.cfg)
    config.update({"dspark_block_size": drafter.block_size, "dspark_markov_rank": drafter.rank,
                   "dspark_noise_token_id": drafter.noise_token_id, "dspark_target_layer_ids": drafter.taps})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
