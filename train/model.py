"""DeepSeek-V4 for training: the architecture of the official reference (inference/model.py) as
a differentiable forward over whole sequences, written for this trainer.

What the reference computes at prefill (start_pos 0) for every position at once is what this
computes, with the released checkpoint's formats applied to the weights as it runs (qat.py): FP8
attention and shared-expert linears in 128x128 tiles, FP4 routed experts, BF16 embedding, head,
norms, gates and compressors. Attention is written densely (every key a position may see, masked)
where the reference gathers indices; the sums are the same.

Parts, as the paper names them:
  * mHC: hc_mult residual streams, mixed before and after each sublayer by weights computed from
    the streams (Sinkhorn-normalised combination matrix).
  * Attention: low-rank queries, one shared KV head, sliding window plus compressed KV rows
    (ratio 4: overlapping windows selected per query by the lightning indexer's top-k; other
    ratios: every finished row), an attention sink per head, grouped low-rank output.
  * MoE: hash-routed (first layers) or score-routed experts with a shared expert.
  * MTP: one block predicting the token after next from the last streams and the next token.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

import qat


@dataclass
class Config:
    """The fields of a released config.json this trainer uses (same names)."""

    vocab_size: int = 2048
    hidden_size: int = 128
    moe_intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_hash_layers: int = 1
    num_nextn_predict_layers: int = 1
    num_attention_heads: int = 4
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    scoring_func: str = "sqrtsoftplus"
    routed_scaling_factor: float = 1.5
    swiglu_limit: float = 10.0
    q_lora_rank: int = 128
    head_dim: int = 128
    qk_rope_head_dim: int = 64
    rms_norm_eps: float = 1e-6
    o_groups: int = 2
    o_lora_rank: int = 64
    sliding_window: int = 128  # as released: a tool call copies a city ~40 tokens back
    compress_ratios: list = field(default_factory=lambda: [0, 4, 16, 4, 0])
    compress_rope_theta: float = 160000.0
    rope_theta: float = 10000.0
    rope_scaling: dict = field(default_factory=lambda: {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                                                        "beta_fast": 32, "beta_slow": 1})
    index_n_heads: int = 4
    index_head_dim: int = 128
    index_topk: int = 8
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    max_position_embeddings: int = 4096
    bos_token_id: int = 0
    eos_token_id: int = 1

    @property
    def mix_hc(self):
        return (2 + self.hc_mult) * self.hc_mult


def rope_frequencies(cfg, ratio, length):
    """cos, sin [length, rope_dim/2]: plain RoPE for sliding-window layers, YaRN at
    compress_rope_theta for compressed ones (as the reference's precompute_freqs_cis)."""
    dim = cfg.qk_rope_head_dim
    yarn = cfg.rope_scaling
    base = cfg.compress_rope_theta if ratio else cfg.rope_theta
    original = yarn["original_max_position_embeddings"] if ratio else 0
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if original > 0:
        def correction_dim(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(correction_dim(yarn["beta_fast"])), 0)
        high = min(math.ceil(correction_dim(yarn["beta_slow"])), dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        smooth = 1 - ramp
        freqs = freqs / yarn["factor"] * (1 - smooth) + freqs * smooth
    angles = torch.outer(torch.arange(length, dtype=torch.float32), freqs)
    return torch.cos(angles), torch.sin(angles)


def rotate_pairs(x, cos, sin, inverse=False):
    """RoPE on the last dim of x (interleaved pairs); cos/sin broadcast over x's pairs."""
    if inverse:
        sin = -sin
    pairs = x.float().unflatten(-1, (-1, 2))
    re, im = pairs[..., 0], pairs[..., 1]
    return torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1).flatten(-2)


def rotate(x, cos, sin, inverse=False):
    """RoPE on the last dim of x, positions along dim 1; cos/sin [S, r/2]."""
    shape = (1, x.size(1)) + (1,) * (x.dim() - 3) + (cos.size(-1),)
    return rotate_pairs(x, cos.view(shape), sin.view(shape), inverse)


def rope_tail(x, cos, sin, rope_dim, inverse=False):
    return torch.cat((x[..., :-rope_dim], rotate(x[..., -rope_dim:], cos, sin, inverse)), dim=-1)


def hadamard(n):
    h = torch.ones(1, 1)
    while h.size(0) < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h / math.sqrt(n)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x.float()
        return qat.bf16(self.weight) * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps))


class Linear(nn.Module):
    """A linear in one of the released formats: "fp8" (input rounded to FP8 per 128 values,
    weight in FP8 tiles), "fp4" (routed experts: FP4 weight groups of 32), "bf16" (no input
    rounding) or "f32"."""

    def __init__(self, n_in, n_out, fmt, std=None):
        super().__init__()
        self.fmt = fmt
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * (std if std is not None else n_in**-0.5))

    def quantized_weight(self):
        if self.fmt == "fp8":
            return qat.fp8_weight(self.weight)
        if self.fmt == "fp4":
            return qat.fp4_weight(self.weight)
        if self.fmt == "bf16":
            return qat.bf16(self.weight)
        return self.weight

    def forward(self, x):
        return self.on_rounded(self.round_input(x))

    def round_input(self, x):
        """The input as this linear multiplies it (FP8 per 128 values for FP8/FP4 weights), to
        share between linears reading the same input."""
        return qat.fp8_act(x, qat.FP8_BLOCK) if self.fmt in ("fp8", "fp4") else x.float()

    def on_rounded(self, x):
        return F.linear(x, self.quantized_weight())


class Compressor(nn.Module):
    """Gated pooling of `ratio` consecutive positions into one KV row; at ratio 4 the windows
    overlap (each row also pools the previous block through the first half of the features)."""

    def __init__(self, cfg, ratio, head_dim, for_indexer):
        super().__init__()
        self.ratio, self.head_dim, self.overlap = ratio, head_dim, ratio == 4
        self.for_indexer, self.rope_dim = for_indexer, cfg.qk_rope_head_dim
        width = (2 if self.overlap else 1) * head_dim
        self.wkv = Linear(cfg.hidden_size, width, "bf16")
        self.wgate = Linear(cfg.hidden_size, width, "bf16")
        self.ape = nn.Parameter(torch.randn(ratio, width) * 0.1)
        self.norm = RMSNorm(head_dim, cfg.rms_norm_eps)
        if for_indexer:
            self.register_buffer("rotation", hadamard(head_dim), persistent=False)

    def forward(self, x, cos, sin):
        """x [B, S, dim] -> rows [B, S // ratio, head_dim] (row j pools positions < (j+1)*ratio)."""
        b, s, _ = x.shape
        r, d = self.ratio, self.head_dim
        n = s // r
        kv = self.wkv(x)[:, : n * r].unflatten(1, (n, r))
        score = self.wgate(x)[:, : n * r].unflatten(1, (n, r)) + self.ape
        if self.overlap:
            # row j: the first halves of block j-1's positions, then the second halves of block j's
            kv = torch.cat((F.pad(kv[:, :-1, :, :d], (0, 0, 0, 0, 1, 0)), kv[:, :, :, d:]), dim=2)
            first = F.pad(score[:, :-1, :, :d], (0, 0, 0, 0, 1, 0), value=-math.inf)
            score = torch.cat((first, score[:, :, :, d:]), dim=2)
        rows = (kv * score.softmax(dim=2)).sum(dim=2)
        rows = self.norm(rows)
        rows = rope_tail(rows, cos[: n * r : r], sin[: n * r : r], self.rope_dim)
        if self.for_indexer:
            return qat.fp4_act(rows @ self.rotation)
        return torch.cat((qat.fp8_act(rows[..., : -self.rope_dim], qat.KV_BLOCK), rows[..., -self.rope_dim :]), dim=-1)


class Indexer(nn.Module):
    """The lightning indexer: per query, scores every finished compressed row with a few ReLU
    heads over FP4 queries and keys, and keeps the top index_topk."""

    def __init__(self, cfg, ratio):
        super().__init__()
        self.heads, self.head_dim, self.topk, self.ratio = cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk, ratio
        self.rope_dim = cfg.qk_rope_head_dim
        self.wq_b = Linear(cfg.q_lora_rank, self.heads * self.head_dim, "fp8")
        self.weights_proj = Linear(cfg.hidden_size, self.heads, "bf16")
        self.compressor = Compressor(cfg, ratio, self.head_dim, for_indexer=True)
        self.register_buffer("rotation", hadamard(self.head_dim), persistent=False)

    def scores(self, x, qr, cos, sin):
        """[B, S, S // ratio] index scores, -inf where a row is not finished for the query."""
        b, s, _ = x.shape
        q = self.wq_b(qr).unflatten(-1, (self.heads, self.head_dim))
        q = qat.fp4_act(rope_tail(q, cos[:s], sin[:s], self.rope_dim) @ self.rotation)
        keys = self.compressor(x, cos, sin)
        w = self.weights_proj(x) * (self.head_dim**-0.5 * self.heads**-0.5)
        score = (torch.einsum("bshd,btd->bsht", q, keys).relu() * w.unsqueeze(-1)).sum(dim=2)
        return score.masked_fill(~finished_rows(s, self.ratio, x.device), -math.inf)

    def select(self, score):
        """Boolean [B, S, n]: the rows each query keeps."""
        n = score.size(-1)
        keep = torch.zeros_like(score, dtype=torch.bool)
        if n == 0:
            return keep
        top = score.topk(min(self.topk, n), dim=-1).indices
        keep.scatter_(-1, top, True)
        return keep & finished_rows(score.size(1), self.ratio, score.device)


def finished_rows(s, ratio, device):
    """[S, S // ratio]: row j is finished for query t when (j + 1) * ratio <= t + 1."""
    return torch.arange(s // ratio, device=device)[None, :] < (torch.arange(1, s + 1, device=device) // ratio)[:, None]


def window_mask(s, window, device):
    t = torch.arange(s, device=device)
    return (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - window)


class Attention(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg, self.ratio = cfg, cfg.compress_ratios[layer]
        h, d = cfg.num_attention_heads, cfg.head_dim
        self.heads, self.head_dim, self.rope_dim = h, d, cfg.qk_rope_head_dim
        self.attn_sink = nn.Parameter(torch.zeros(h))
        self.wq_a = Linear(cfg.hidden_size, cfg.q_lora_rank, "fp8")
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.wq_b = Linear(cfg.q_lora_rank, h * d, "fp8")
        self.wkv = Linear(cfg.hidden_size, d, "fp8")
        self.kv_norm = RMSNorm(d, cfg.rms_norm_eps)
        # wo_a: stored FP8, used dequantized without rounding its input (as the reference does)
        self.wo_a = Linear(h * d // cfg.o_groups, cfg.o_groups * cfg.o_lora_rank, "fp8-weight-only")
        self.wo_b = Linear(cfg.o_groups * cfg.o_lora_rank, cfg.hidden_size, "fp8", std=(cfg.o_groups * cfg.o_lora_rank) ** -0.5 / 2)
        self.compressor = Compressor(cfg, self.ratio, d, for_indexer=False) if self.ratio else None
        self.indexer = Indexer(cfg, self.ratio) if self.ratio == 4 else None
        cos, sin = rope_frequencies(cfg, self.ratio, cfg.max_position_embeddings)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x, stats):
        b, s, _ = x.shape
        cfg, rd = self.cfg, self.rope_dim
        cos, sin = self.cos[:s], self.sin[:s]
        xr = self.wq_a.round_input(x)
        qr = self.q_norm(self.wq_a.on_rounded(xr))
        q = self.wq_b(qr).unflatten(-1, (self.heads, self.head_dim))
        q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + cfg.rms_norm_eps)
        q = rope_tail(q, cos, sin, rd)
        kv = rope_tail(self.kv_norm(self.wkv.on_rounded(xr)), cos, sin, rd)
        kv = torch.cat((qat.fp8_act(kv[..., :-rd], qat.KV_BLOCK), kv[..., -rd:]), dim=-1)

        scale = self.head_dim**-0.5
        logits = torch.einsum("bshd,btd->bhst", q, kv) * scale
        logits = logits.masked_fill(~window_mask(s, cfg.sliding_window, x.device), -math.inf)
        keys = kv
        if self.ratio:
            rows = self.compressor(x, self.cos, self.sin)
            row_logits = torch.einsum("bshd,btd->bhst", q, rows) * scale
            visible = finished_rows(s, self.ratio, x.device).expand(b, s, -1)
            if self.indexer is not None:
                index_score = self.indexer.scores(x, qr, self.cos, self.sin)
                selected = self.indexer.select(index_score.detach())
                stats.indexer_loss(index_score, row_logits.detach(), visible)
                visible = selected
            row_logits = row_logits.masked_fill(~visible.unsqueeze(1), -math.inf)
            logits = torch.cat((logits, row_logits), dim=-1)
            keys = torch.cat((kv, rows), dim=1)
        # softmax with the sink in the denominator only
        sink = self.attn_sink.view(1, -1, 1, 1).expand(b, -1, s, 1)
        probs = torch.cat((logits, sink), dim=-1).softmax(dim=-1)[..., :-1]
        o = torch.einsum("bhst,btd->bshd", probs, keys)
        o = rope_tail(o, cos, sin, rd, inverse=True)
        groups = cfg.o_groups
        wo_a = qat.fp8_weight(self.wo_a.weight).view(groups, cfg.o_lora_rank, -1)
        o = torch.einsum("bsgd,grd->bsgr", o.reshape(b, s, groups, -1), wo_a)
        return self.wo_b(o.flatten(2))


class Expert(nn.Module):
    def __init__(self, cfg, fmt, out_std):
        super().__init__()
        self.limit = cfg.swiglu_limit
        self.w1 = Linear(cfg.hidden_size, cfg.moe_intermediate_size, fmt)
        self.w2 = Linear(cfg.moe_intermediate_size, cfg.hidden_size, fmt, std=out_std)
        self.w3 = Linear(cfg.hidden_size, cfg.moe_intermediate_size, fmt)

    def forward(self, x, weights=None):
        x = self.w1.round_input(x)
        gate, up = self.w1.on_rounded(x), self.w3.on_rounded(x)
        if self.limit > 0:
            up = up.clamp(-self.limit, self.limit)
            gate = gate.clamp(max=self.limit)
        h = F.silu(gate) * up
        if weights is not None:
            h = weights * h
        return self.w2(h)


class MoE(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg = cfg
        self.hashed = layer < cfg.num_hash_layers
        e, k = cfg.n_routed_experts, cfg.num_experts_per_tok
        self.gate = Linear(cfg.hidden_size, e, "bf16")
        if self.hashed:
            # each token id goes to k distinct experts, fixed before training
            g = torch.Generator().manual_seed(1000 + layer)
            table = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(cfg.vocab_size)])
            self.register_buffer("tid2eid", table)
        else:
            # aux-loss-free balancing: a bias on the selection scores, moved toward balance each step
            self.register_buffer("bias", torch.zeros(e))
        out_std = cfg.moe_intermediate_size**-0.5 / 2
        self.experts = nn.ModuleList(Expert(cfg, "fp4", out_std) for _ in range(e))
        self.shared_experts = Expert(cfg, "fp8", out_std)

    def forward(self, x, ids, stats):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores = F.softplus(self.gate(x)).sqrt()
        if self.hashed:
            chosen = self.tid2eid[ids.reshape(-1)]
        else:
            chosen = (scores.detach() + self.bias).topk(self.cfg.num_experts_per_tok, dim=-1).indices
            stats.expert_load(self, chosen)
        weights = scores.gather(1, chosen)
        weights = weights / weights.sum(-1, keepdim=True) * self.cfg.routed_scaling_factor
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel():
                y = y.index_add(0, rows, expert(x[rows], weights[rows, slot, None]))
        return (y + self.shared_experts(x)).view(shape)


class HyperConnection(nn.Module):
    """mHC mixing for one sublayer: pre weights reduce the streams to the sublayer's input, post
    weights spread its output back, a Sinkhorn-normalised matrix mixes the streams."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        flat = cfg.hc_mult * cfg.hidden_size
        self.fn = nn.Parameter(torch.randn(cfg.mix_hc, flat) * flat**-0.5 * 0.1)
        self.base = nn.Parameter(torch.zeros(cfg.mix_hc))
        self.scale = nn.Parameter(torch.full((3,), 0.1))

    def pre(self, h):
        cfg, hc = self.cfg, self.cfg.hc_mult
        flat = h.flatten(2)
        mixes = F.linear(flat, self.fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + cfg.rms_norm_eps)
        pre = torch.sigmoid(mixes[..., :hc] * self.scale[0] + self.base[:hc]) + cfg.hc_eps
        post = 2 * torch.sigmoid(mixes[..., hc : 2 * hc] * self.scale[1] + self.base[hc : 2 * hc])
        comb = (mixes[..., 2 * hc :] * self.scale[2] + self.base[2 * hc :]).unflatten(-1, (hc, hc))
        comb = comb.softmax(dim=-1) + cfg.hc_eps
        comb = comb / (comb.sum(dim=-2, keepdim=True) + cfg.hc_eps)
        for _ in range(cfg.hc_sinkhorn_iters - 1):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + cfg.hc_eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + cfg.hc_eps)
        return weighted_streams(pre, h), post, comb

    @staticmethod
    def post(out, h, post, comb):
        """stream j: post_j * out + sum_i comb_ij * stream i."""
        mixed = post.unsqueeze(-1) * out.unsqueeze(-2)
        for i in range(h.size(2)):  # a few streams: elementwise sums beat batched 4x4 products here
            mixed = mixed + comb[..., i, :].unsqueeze(-1) * h[..., i : i + 1, :]
        return mixed


def weighted_streams(weights, h):
    """sum_i weights_i * stream i: weights [B, S, hc], h [B, S, hc, dim]."""
    out = weights[..., 0:1] * h[..., 0, :]
    for i in range(1, h.size(2)):
        out = out + weights[..., i : i + 1] * h[..., i, :]
    return out


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.attn = Attention(cfg, layer)
        self.ffn = MoE(cfg, layer)
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hc_attn = HyperConnection(cfg)
        self.hc_ffn = HyperConnection(cfg)

    def forward(self, h, ids, stats):
        x, post, comb = self.hc_attn.pre(h)
        h = HyperConnection.post(self.attn(self.attn_norm(x), stats), h, post, comb)
        x, post, comb = self.hc_ffn.pre(h)
        return HyperConnection.post(self.ffn(self.ffn_norm(x), ids, stats), h, post, comb)


class HeadMix(nn.Module):
    """The streams reduced to one for the head: sigmoid weights from the normalised streams."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        flat = cfg.hc_mult * cfg.hidden_size
        self.fn = nn.Parameter(torch.randn(cfg.hc_mult, flat) * flat**-0.5 * 0.1)
        self.base = nn.Parameter(torch.zeros(cfg.hc_mult))
        self.scale = nn.Parameter(torch.full((1,), 0.1))

    def forward(self, h):
        flat = h.flatten(2)
        mixes = F.linear(flat, self.fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        pre = torch.sigmoid(mixes * self.scale + self.base) + self.cfg.hc_eps
        return weighted_streams(pre, h)


class MTPBlock(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.block = Block(cfg, layer)
        self.e_proj = Linear(cfg.hidden_size, cfg.hidden_size, "fp8")
        self.h_proj = Linear(cfg.hidden_size, cfg.hidden_size, "fp8")
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head_mix = HeadMix(cfg)


class Stats:
    """What a forward collects besides its outputs: the indexer's distillation loss and the
    routed experts' loads (for the balancing bias)."""

    def __init__(self):
        self.index_losses, self.loads = [], []

    def indexer_loss(self, index_score, row_logits, visible):
        # The indexer learns to rank rows as attention would: KL from the heads' summed attention
        # over every finished row to the indexer's softmax over them.
        if not torch.is_grad_enabled():
            return
        any_row = visible.any(-1)
        if not any_row.any():
            return
        target = row_logits.masked_fill(~visible.unsqueeze(1), -math.inf).softmax(-1).nan_to_num(0).sum(1)
        target = target / target.sum(-1, keepdim=True).clamp_min(1e-9)
        logp = index_score.masked_fill(~visible, -1e9).log_softmax(-1)
        kl = (target * (target.clamp_min(1e-9).log() - logp)).sum(-1)
        self.index_losses.append(kl[any_row].mean())

    def expert_load(self, moe, chosen):
        self.loads.append((moe, torch.bincount(chosen.flatten(), minlength=moe.cfg.n_routed_experts)))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Parameter(torch.randn(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head_mix = HeadMix(cfg)
        self.head = nn.Parameter(torch.randn(cfg.vocab_size, cfg.hidden_size) * cfg.hidden_size**-0.5)
        self.mtp = nn.ModuleList(MTPBlock(cfg, cfg.num_hidden_layers + i) for i in range(cfg.num_nextn_predict_layers))

    def embedding(self, ids):
        return F.embedding(ids, qat.bf16(self.embed))

    def logits(self, x, norm):
        return F.linear(norm(x), qat.bf16(self.head))

    def forward(self, ids, stats, keep_layers=False):
        """ids [B, S] -> (streams after the last block [B, S, hc, dim], logits [B, S, V], and the
        streams after each block when keep_layers)."""
        h = self.embedding(ids).unsqueeze(2).repeat(1, 1, self.cfg.hc_mult, 1)
        layers = []
        for block in self.layers:
            h = block(h, ids, stats)
            if keep_layers:
                layers.append(h)
        return h, self.logits(self.head_mix(h), self.norm), layers

    def mtp_logits(self, h, next_ids, stats):
        """MTP block 0 on the last streams h [B, S, hc, dim] and the next tokens [B, S]: logits
        for the token after next at every position."""
        m = self.mtp[0]
        e = m.enorm(self.embedding(next_ids))
        x = m.e_proj(e).unsqueeze(2) + m.h_proj(m.hnorm(h))
        x = m.block(x, next_ids, stats)
        return self.logits(m.head_mix(x), m.norm)
