"""safetensors files in the released DeepSeek-V4.1 formats, read into the tensors compat.py defines.

Stored formats: BF16, F32, I64, I32, F8_E4M3 (e4m3fn codes), F8_E8M0 (2^(code - 127)), and the
routed experts' FP4 as I8 bytes holding two e2m1 codes (even element in the low nibble).
"""

import json
import struct

import numpy as np
import torch

from compat import FLOAT4_X2, FLOAT8_E4M3, FLOAT8_E8M0


def e4m3_table():
    codes = np.arange(256)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 15, codes & 7
    value = np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8) * 2.0 ** (exponent - 7.0))
    value = sign * value
    value[(codes & 0x7F) == 0x7F] = np.nan
    return value


E4M3 = e4m3_table()
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def e4m3_codes(values):
    """Exact e4m3 values (any float array) -> their codes; raises on a value e4m3 cannot hold."""
    v = np.asarray(values, dtype=np.float64)
    finite = E4M3[~np.isnan(E4M3)]
    order = np.argsort(finite, kind="stable")
    table_codes = np.arange(256)[~np.isnan(E4M3)][order]
    table_values = finite[order]
    pos = np.searchsorted(table_values, v)
    pos = np.clip(pos, 0, len(table_values) - 1)
    if not np.array_equal(table_values[pos], v):
        raise ValueError("a value that e4m3 cannot hold")
    codes = table_codes[pos].astype(np.uint8)
    codes[(v == 0) & np.signbit(v)] = 0x80
    codes[(v == 0) & ~np.signbit(v)] = 0
    return codes


def e8m0_codes(values):
    v = np.asarray(values, dtype=np.float64)
    exponent = np.log2(v)
    if not np.all(np.exp2(np.round(exponent)) == v):
        raise ValueError("an e8m0 scale that is not a power of two")
    return (np.round(exponent) + 127).astype(np.uint8)


def e2m1_pack(values):
    """Exact e2m1 values [..., K] -> bytes [..., K/2], even element in the low nibble."""
    v = np.asarray(values, dtype=np.float64)
    mag = np.abs(v)
    code = np.searchsorted(E2M1[:8], mag)
    if not np.array_equal(E2M1[code], mag):
        raise ValueError("a value that e2m1 cannot hold")
    code = code | (np.signbit(v).astype(np.int64) << 3)
    return (code[..., 0::2] | (code[..., 1::2] << 4)).astype(np.uint8)


class Stored:
    """A tensor as it goes into a file: dtype string, shape, raw little-endian bytes."""

    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, list(shape), data


def bf16(t):
    t = t.detach().to(torch.bfloat16).contiguous()
    return Stored("BF16", t.shape, t.view(torch.int16).numpy().tobytes())


def f32(t):
    return Stored("F32", t.shape, t.detach().float().contiguous().numpy().tobytes())


def i64(t):
    return Stored("I64", t.shape, t.detach().long().contiguous().numpy().tobytes())


def fp8(values):
    return Stored("F8_E4M3", values.shape, e4m3_codes(values.detach().double().numpy()).tobytes())


def e8m0(values):
    return Stored("F8_E8M0", values.shape, e8m0_codes(values.detach().double().numpy()).tobytes())


def fp4(values):
    packed = e2m1_pack(values.detach().double().numpy())
    return Stored("I8", packed.shape, packed.tobytes())


def write(path, tensors, metadata=None):
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name]
        header[name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + len(t.data)]}
        offset += len(t.data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(tensors):
            f.write(tensors[name].data)


def read_raw(path):
    """{name: (dtype string, shape, bytes)}."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        payload = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], payload[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}


def decode(dtype, shape, data, fp4_pairs=False):
    """A stored tensor as the reference holds it: FP8 codes as FLOAT8_E4M3 values, E8M0 as
    FLOAT8_E8M0 values, I8 FP4 pairs (fp4_pairs) as FLOAT4_X2 (even, odd) values."""
    if dtype == "BF16":
        raw = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
        return torch.from_numpy(raw.view(np.float32).copy()).to(torch.bfloat16).view(shape)
    if dtype == "F32":
        return torch.from_numpy(np.frombuffer(data, dtype=np.float32).copy()).view(shape)
    if dtype == "I64":
        return torch.from_numpy(np.frombuffer(data, dtype=np.int64).copy()).view(shape)
    codes = np.frombuffer(data, dtype=np.uint8)
    if dtype == "F8_E4M3":
        return torch.from_numpy(E4M3[codes]).to(FLOAT8_E4M3).view(shape)
    if dtype == "F8_E8M0":
        return torch.from_numpy(np.exp2(codes.astype(np.float64) - 127)).to(FLOAT8_E8M0).view(shape)
    if dtype in ("I8", "U8") and fp4_pairs:
        even, odd = E2M1[codes & 15], E2M1[codes >> 4]
        return torch.complex(torch.from_numpy(even), torch.from_numpy(odd)).view(shape)
    raise ValueError(f"unexpected stored dtype {dtype}")


def load(path):
    """{name: tensor} for files of F32/I64/BF16 tensors (the goldens)."""
    return {k: decode(*v) for k, v in read_raw(path).items()}
