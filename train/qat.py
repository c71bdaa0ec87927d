"""The quantization-aware rounding DeepSeek-V4 was trained with, as straight-through estimators.

Every weight the release stores in FP8 or FP4 is rounded to that format in the forward pass (the
gradient passes through unchanged), so the exported codes are the weights the model was trained
with; the activations round where the reference rounds them (FP8 inputs of FP8/FP4 linears, FP8
KV rows, FP4 indexer queries and keys). The rounding is the golden harness's
(tools/golden_v41/kernel.py: ue8m0 power-of-two scales, nearest with ties to even, saturating),
computed here from the float's exponent in a few passes instead of its log2/pow search
(check_qat.py holds the two to the same bits).
"""

import torch

import harness  # noqa: F401
import kernel  # the harness's rounding: act_quant, fp4_act_quant, to_e4m3, e2m1

FP8_BLOCK = 128  # weight tiles and activation blocks of FP8/FP4 linears
FP4_BLOCK = 32  # FP4 weight scale groups along K
KV_BLOCK = 64  # FP8 blocks of a KV row's non-RoPE part


def _round_to_grid(v, mantissa_bits, min_exponent):
    """v to the nearest value with mantissa_bits bits after the leading one (ties to even), the
    spacing fixed below 2^min_exponent (subnormals): the spacing is the power of two whose
    exponent field is v's (at least min_exponent's) less mantissa_bits."""
    exponent_field = v.view(torch.int32) & 0x7F800000
    floor_field = torch.full_like(exponent_field, (min_exponent + 127) << 23)
    step = (torch.maximum(exponent_field, floor_field) - (mantissa_bits << 23)).view(torch.float32)
    return torch.round(v / step) * step


def round_e4m3(v):
    """float32 -> nearest e4m3 value (ties to even), saturating at +-448."""
    return _round_to_grid(v.clamp(-kernel.FP8_MAX, kernel.FP8_MAX).contiguous(), 3, -6)


def round_e2m1(v):
    """float32 in [-6, 6] -> nearest e2m1 value (ties to even)."""
    return _round_to_grid(v.contiguous(), 1, 0)


def _block_quant(x, block, floor, max_inv, round_fn, limit):
    groups = x.float().unflatten(-1, (-1, block))
    scale = kernel.round_scale(groups.abs().amax(dim=-1).clamp_min(floor), max_inv).unsqueeze(-1)
    return (round_fn((groups / scale).clamp(-limit, limit)) * scale).flatten(-2)


class _StraightThrough(torch.autograd.Function):
    """round(x) forward, the identity backward."""

    @staticmethod
    def forward(ctx, x, round_fn):
        return round_fn(x.detach())

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def straight_through(x, round_fn):
    return _StraightThrough.apply(x, round_fn)


def bf16(x):
    return straight_through(x, lambda v: v.to(torch.bfloat16).float())


def fp8_weight_parts(w):
    """w [N, K] -> (e4m3 values [N, K], power-of-two scales [ceil(N/128), K/128])."""
    n, k = w.shape
    pad = -n % FP8_BLOCK
    wp = torch.nn.functional.pad(w.detach().float(), (0, 0, 0, pad))
    tiles = wp.view(wp.size(0) // FP8_BLOCK, FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK)
    amax = tiles.abs().amax(dim=(1, 3)).clamp_min(1e-4)
    scale = kernel.round_scale(amax, kernel._FP8_MAX_INV)
    codes = round_e4m3(tiles / scale[:, None, :, None]).view_as(wp)[:n]
    return codes, scale


def fp8_weight_values(w):
    codes, scale = fp8_weight_parts(w)
    return codes * scale.repeat_interleave(FP8_BLOCK, 0)[: w.size(0)].repeat_interleave(FP8_BLOCK, 1)


def fp4_weight_parts(w):
    """w [N, K] -> (e2m1 values [N, K], power-of-two scales [N, K/32])."""
    n, k = w.shape
    groups = w.detach().float().view(n, k // FP4_BLOCK, FP4_BLOCK)
    amax = groups.abs().amax(dim=-1).clamp_min(6 * 2.0**-126)
    scale = kernel.round_scale(amax, kernel._FP4_MAX_INV)
    v = (groups / scale.unsqueeze(-1)).clamp(-kernel.FP4_MAX, kernel.FP4_MAX)
    return round_e2m1(v).view(n, k), scale


def fp4_weight_values(w):
    codes, scale = fp4_weight_parts(w)
    return codes * scale.repeat_interleave(FP4_BLOCK, 1)


def fp8_weight(w):
    return straight_through(w, fp8_weight_values)


def fp4_weight(w):
    return straight_through(w, fp4_weight_values)


def fp8_act(x, block):
    """The reference's act_quant in place: FP8 e4m3 with a power-of-two scale per `block` values."""
    return straight_through(x, lambda v: _block_quant(v, block, 1e-4, kernel._FP8_MAX_INV, round_e4m3, kernel.FP8_MAX))


def fp4_act(x):
    """The reference's fp4_act_quant in place: e2m1 with an E8M0 scale per 32 values."""
    return straight_through(x, lambda v: _block_quant(v, FP4_BLOCK, 6 * 2.0**-126, kernel._FP4_MAX_INV, round_e2m1,
                                                      kernel.FP4_MAX))
