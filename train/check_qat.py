"""Holds qat.py's rounding to the golden harness's (tools/golden_v41/kernel.py) bit for bit, on
values across every binade of both formats, their ties and saturation.

    /usr/bin/python3 train/check_qat.py
"""

import torch

import harness  # noqa: F401
import kernel
import qat


def values():
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(200000, generator=g) * torch.exp2(torch.randint(-20, 12, (200000,), generator=g).float())
    e4m3 = torch.tensor([float(v) for v in (kernel.to_e4m3(torch.linspace(-460, 460, 50001)))])
    grid = torch.arange(-4096, 4097, dtype=torch.float32) / 512  # ties of e2m1 and small e4m3
    ties = torch.cat([e4m3[:-1] / 2 + e4m3[1:] / 2, grid])
    return torch.cat([spread, ties, torch.tensor([0.0, -0.0, 448.0, 449.0, -1e9, 1e9, 6.0, 7.0, 2.0**-10])])


def main():
    v = values()
    assert torch.equal(qat.round_e4m3(v), kernel.to_e4m3(v)), "e4m3 rounding differs"
    x6 = v.clamp(-6, 6)
    assert torch.equal(qat.round_e2m1(x6), kernel.e2m1_value(kernel.e2m1_codes(x6))), "e2m1 rounding differs"
    x = v[: (v.numel() // 128) * 128].view(-1, 128)
    ref = x.clone()
    kernel.act_quant(ref, 128, "ue8m0", inplace=True)
    assert torch.equal(qat.fp8_act(x, 128), ref), "FP8 activation rounding differs"
    ref = x.clone()
    kernel.act_quant(ref, 64, "ue8m0", inplace=True)
    assert torch.equal(qat.fp8_act(x, 64), ref), "FP8 KV rounding differs"
    ref = x.clone()
    kernel.fp4_act_quant(ref, 32, inplace=True)
    assert torch.equal(qat.fp4_act(x), ref), "FP4 activation rounding differs"
    print(f"qat rounding matches the harness on {v.numel()} values")


if __name__ == "__main__":
    main()
