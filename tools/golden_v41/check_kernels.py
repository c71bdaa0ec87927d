"""Self-check of kernel.py's roundings against the format tables (run before making goldens):
to_e4m3 and the e2m1 codes must give the nearest representable value, ties to the even code,
on random values and on every midpoint between neighbours. Exits non-zero on a mismatch."""

import sys

import numpy as np
import torch

import compat  # noqa: F401
import kernel
import safetensors_io as st


def nearest_even(x, table_values, table_codes):
    """Nearest table value; at a tie the one with the even code."""
    d = np.abs(table_values[None, :] - x[:, None])
    best = d.min(axis=1, keepdims=True)
    tied = d == best
    pick = np.where(tied, (table_codes[None, :] & 1) == 0, False)
    idx = np.where(pick.any(1), pick.argmax(1), tied.argmax(1))
    return table_values[idx]


def check(name, got, want):
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        sys.exit(f"{name}: {int(bad.sum())} mismatches, first got {got[i]!r} want {want[i]!r}")
    print(f"{name}: {got.size} values agree")


def main():
    rng = np.random.default_rng(1)
    codes = np.arange(256)
    finite = ~np.isnan(st.E4M3)
    pos = (codes < 128) & finite
    values, vcodes = st.E4M3[pos], codes[pos]
    mids = (values[:-1] + values[1:]) / 2
    x = np.concatenate([rng.normal(0, 30, 20000), rng.normal(0, 0.01, 20000), mids, values, [500.0, 448.0, 460.0]])
    x = x.astype(np.float32)
    x = np.concatenate([x, -x])
    got = kernel.to_e4m3(torch.from_numpy(x)).numpy().astype(np.float64)
    mag = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    want = np.copysign(nearest_even(mag, values, vcodes), x)
    check("e4m3", got, want)

    grid = st.E2M1[:8]
    mids = (grid[:-1] + grid[1:]) / 2
    y = np.concatenate([rng.uniform(-6, 6, 20000), mids, -mids, grid, -grid]).astype(np.float32)
    got = kernel.e2m1_value(kernel.e2m1_codes(torch.from_numpy(y))).numpy().astype(np.float64)
    want = np.copysign(nearest_even(np.abs(y.astype(np.float64)), grid, np.arange(8)), y)
    check("e2m1", got, want)


if __name__ == "__main__":
    main()
