"""The six kernels the DeepSeek-V4.1 reference's model.py imports (`from kernel import ...`), for
a float32 run on the CPU.

DeepSeek's own kernel.py (TileLang) is not public; Tenstorrent's kernel_cpu.py is a torch port of
it that states each function's fidelity. These follow the same algorithms operation by operation,
written for float32 activations where the TileLang kernels are compiled for bf16 (so "bf16" in
the kernel is the activation dtype here: the probabilities inside sparse_attn and its output stay
float32, as a float32 build of the kernel would keep them):

* act_quant: per block of `block_size`, amax floored at 1e-4, scale 2^ceil(log2(amax * f32(1/448)))
  from the float's exponent and mantissa bits (ue8m0), x / scale clamped to +-448 and rounded to
  e4m3 (nearest, ties to even); in place it writes q * scale back.
* fp4_act_quant: E8M0 scales (groups of 32, amax floored at 6 * 2^-126, 2^ceil(log2(amax * f32(1/6))))
  or E4M3 scales (groups of 16, amax floored at 6 * 2^-9, scale = e4m3(amax / 6)); x / scale
  clamped to +-6, rounded to e2m1 (nearest, ties to even), times the scale.
* fp8_gemm / fp4_gemm: for each K block of 32, the block's products of the two operands' codes
  summed in fp32 (left to right), times the activation scale, times the weight scale, added to
  the fp32 accumulator in K order.
* sparse_attn: online softmax over blocks of 64 indices, running max starting at -1e30 (a row of
  -1 indices gives zeros), index -1 -> logit -inf and a zero KV row, the sink added to the
  denominator unscaled.
* hc_split_sinkhorn: the fp32 operations of the kernel in its order.
"""

import torch

from compat import FLOAT4_X2, FLOAT8_E4M3, FLOAT8_E8M0

FP8_MAX = 448.0
FP4_MAX = 6.0
_FP8_MAX_INV = torch.tensor(1.0 / FP8_MAX, dtype=torch.float32)
_FP4_MAX_INV = torch.tensor(1.0 / FP4_MAX, dtype=torch.float32)
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float32)
_E2M1_MIDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32)
_E2M1_TIE_UP = torch.tensor([False, True, False, True, False, True, False])
SPARSE_ATTN_BLOCK = 64


def round_scale(amax, max_inv):
    """2^ceil(log2(amax * max_inv)) from the fp32 bits: exponent, plus one if any mantissa bit."""
    bits = (amax.float() * max_inv).contiguous().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    ceil_log2 = exponent - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return ((ceil_log2 + 127) << 23).view(torch.float32)


def to_e4m3(x):
    """fp32 -> the nearest e4m3 value (ties to even), saturating at +-448, as fp32."""
    x = x.clamp(-FP8_MAX, FP8_MAX)
    # float16 keeps 10 mantissa bits: round to 3 by hand, then check the subnormal range (< 2^-6,
    # spacing 2^-9) separately
    mag = x.abs()
    exponent = torch.floor(torch.log2(mag.clamp_min(2.0**-126)))
    exponent = torch.where(mag > 0, exponent, torch.full_like(mag, -126.0))
    # log2 can land one off near powers of two: fix it so 2^e <= mag < 2^(e+1)
    exponent = torch.where(torch.pow(2.0, exponent) > mag, exponent - 1, exponent)
    exponent = torch.where(torch.pow(2.0, exponent + 1) <= mag, exponent + 1, exponent)
    step = torch.pow(2.0, torch.clamp(exponent, min=-6.0) - 3.0)
    q = torch.round(mag / step) * step  # torch.round: ties to even
    return torch.copysign(q.clamp(max=FP8_MAX), x)


def e2m1_codes(x):
    """fp32 in [-6, 6] -> 4-bit e2m1 codes (bit 3 the sign), nearest with ties to even."""
    mag = x.abs().unsqueeze(-1)
    code = (mag > _E2M1_MIDS).sum(-1) + ((mag == _E2M1_MIDS) & _E2M1_TIE_UP).sum(-1)
    return code.to(torch.uint8) | (torch.signbit(x).to(torch.uint8) << 3)


def e2m1_value(codes):
    values = E2M1_VALUES[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -values, values)


def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
    n = x.size(-1)
    assert n % block_size == 0
    xg = x.float().unflatten(-1, (-1, block_size))
    amax = xg.abs().amax(dim=-1).clamp_min(1e-4)
    s = round_scale(amax, _FP8_MAX_INV) if scale_fmt is not None else amax * _FP8_MAX_INV
    q = to_e4m3(xg / s.unsqueeze(-1))
    if inplace:
        x.copy_((q * s.unsqueeze(-1)).flatten(-2).to(x.dtype))
        return x
    return q.flatten(-2).to(FLOAT8_E4M3), s.to(scale_dtype)


def fp4_act_quant(x, block_size=32, inplace=False, scale_dtype=FLOAT8_E8M0):
    assert scale_dtype in (FLOAT8_E8M0, FLOAT8_E4M3)
    assert inplace, "the reference only rounds in place"
    n = x.size(-1)
    assert n % block_size == 0
    xg = x.float().unflatten(-1, (-1, block_size))
    amax = xg.abs().amax(dim=-1)
    if scale_dtype == FLOAT8_E4M3:
        s = to_e4m3(amax.clamp_min(6 * 2.0**-9) / FP4_MAX)
    else:
        s = round_scale(amax.clamp_min(6 * 2.0**-126), _FP4_MAX_INV)
    v = (xg / s.unsqueeze(-1)).clamp(-FP4_MAX, FP4_MAX)
    x.copy_((e2m1_value(e2m1_codes(v)) * s.unsqueeze(-1)).flatten(-2).to(x.dtype))
    return x


def _block_scaled_gemm(a, a_s, b, b_s, block_k):
    """sum over K blocks of (A_k @ B_k^T) * a_s[:, k] * b_s[:, k], in fp32, blocks in K order."""
    m, k = a.shape
    acc = torch.zeros(m, b.size(0), dtype=torch.float32)
    for j in range(k // block_k):
        cols = slice(j * block_k, (j + 1) * block_k)
        acc += (a[:, cols] @ b[:, cols].T) * a_s[:, j : j + 1] * b_s[:, j].unsqueeze(0)
    return acc


def fp8_gemm(a, a_s, b, b_s, scale_dtype=torch.float32, block_size=128):
    assert a.dtype == FLOAT8_E4M3 and b.dtype == FLOAT8_E4M3 and block_size in (32, 128)
    k = a.size(-1)
    m, n = a.numel() // k, b.size(0)
    assert k % block_size == 0 and a_s.numel() == m * (k // block_size)
    assert tuple(b_s.shape) == ((n + block_size - 1) // block_size, k // block_size)
    b_s_rows = b_s.float().repeat_interleave(block_size, dim=0)[:n]
    c = _block_scaled_gemm(a.reshape(m, k).float(), a_s.reshape(m, -1).float(), b.float(), b_s_rows, block_size)
    return c.to(torch.get_default_dtype()).view(*a.size()[:-1], n)


def unpack_fp4(b):
    """complex128 [N, K/2] (even, odd) pairs -> fp32 [N, K]."""
    return torch.stack([b.real, b.imag], dim=-1).flatten(-2).float()


def fp4_gemm(a, a_s, b, b_s, scale_dtype=torch.float32, act_block_size=128):
    assert a.dtype == FLOAT8_E4M3 and b.dtype == FLOAT4_X2 and act_block_size in (32, 128)
    k = a.size(-1)
    m, n = a.numel() // k, b.size(0)
    assert k % act_block_size == 0 and a_s.numel() == m * (k // act_block_size)
    assert tuple(b_s.shape) == (n, k // 32)
    a_s_32 = a_s.reshape(m, -1).float().repeat_interleave(act_block_size // 32, dim=1)
    c = _block_scaled_gemm(a.reshape(m, k).float(), a_s_32, unpack_fp4(b), b_s.float(), 32)
    return c.to(torch.get_default_dtype()).view(*a.size()[:-1], n)


def sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale):
    b, m, h, d = q.size()
    topk = topk_idxs.size(-1)
    scale = torch.tensor(softmax_scale, dtype=torch.float32)
    qf, kvf = q.float(), kv.float()
    acc_o = torch.zeros(b, m, h, d, dtype=torch.float32)
    sum_exp = torch.zeros(b, m, h, dtype=torch.float32)
    scores_max = torch.full((b, m, h), -1e30, dtype=torch.float32)
    batch = torch.arange(b).view(b, 1, 1)
    for t in range(0, topk, SPARSE_ATTN_BLOCK):
        idxs = topk_idxs[:, :, t : t + SPARSE_ATTN_BLOCK].long()
        valid = idxs != -1
        kv_blk = kvf[batch, idxs.clamp_min(0)] * valid.unsqueeze(-1)
        acc_s = torch.einsum("bmhd,bmkd->bmhk", qf, kv_blk)
        acc_s = torch.where(valid.unsqueeze(2), acc_s, -torch.inf) * scale
        scores_max_prev = scores_max
        scores_max = torch.maximum(scores_max_prev, acc_s.amax(dim=-1))
        scores_scale = torch.exp(scores_max_prev - scores_max)
        p = torch.exp(acc_s - scores_max.unsqueeze(-1))
        sum_exp = sum_exp * scores_scale + p.sum(dim=-1)
        acc_o = acc_o * scores_scale.unsqueeze(-1) + torch.einsum("bmhk,bmkd->bmhd", p.to(q.dtype).float(), kv_blk)
    sum_exp = sum_exp + torch.exp(attn_sink.float() - scores_max)
    return (acc_o / sum_exp.unsqueeze(-1)).to(q.dtype)


def hc_split_sinkhorn(mixes, hc_scale, hc_base, hc_mult=4, sinkhorn_iters=20, eps=1e-6):
    hc = hc_mult
    m, hc_scale, hc_base = mixes.float(), hc_scale.float(), hc_base.float()
    pre = torch.sigmoid(m[..., :hc] * hc_scale[0] + hc_base[:hc]) + eps
    post = 2 * torch.sigmoid(m[..., hc : 2 * hc] * hc_scale[1] + hc_base[hc : 2 * hc])
    comb = (m[..., 2 * hc :] * hc_scale[2] + hc_base[2 * hc :]).unflatten(-1, (hc, hc))
    comb = torch.exp(comb - comb.amax(dim=-1, keepdim=True))
    comb = comb / comb.sum(dim=-1, keepdim=True) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    return pre, post, comb
