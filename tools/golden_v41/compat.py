"""What the official DeepSeek-V4.1 reference needs from torch and HF `tokenizers`, on Debian's
python3-torch 1.13 (no float8/float4 dtypes) and without `tokenizers` (not packaged by Debian).

Import this module before the reference's model.py. It changes no arithmetic the reference does:

* The three narrow dtypes become torch dtypes that hold every value of the format exactly and that
  the reference itself never uses for anything else, so a tensor carries the format's *values*:
    torch.float8_e4m3fn    -> torch.float16     every e4m3 value (|v| <= 448, 3 mantissa bits,
                                                 exponents down to 2^-9) is a float16 value
    torch.float8_e8m0fnu   -> torch.float64     every 2^e, e in [-127, 127], is a float64 value
    torch.float4_e2m1fn_x2 -> torch.complex128  the two e2m1 values of one byte as (real, imag):
                                                 (even element, odd element), as the byte's low
                                                 and high nibble hold them
  So `weight.dtype == torch.float8_e4m3fn` in the reference's `linear()` picks the same branch,
  `torch.empty(..., dtype=torch.float8_e4m3fn)` allocates a tensor that holds e4m3 values, and
  the Engram table's `F.embedding(...).float()` yields exactly the e4m3 values and powers of two
  that real float8 tensors would. The checkpoint reader (safetensors_io.py) decodes the stored
  bytes into these tensors; kernel.py decodes them back where the real kernels read codes.
* `tokenizers.normalizers` / `tokenizers.Regex`: the few normalizers the reference's Engram
  token map uses (NFKC, NFD, StripAccents, Lowercase, Replace, Strip, Sequence), with Python's
  unicodedata and re, as the HF Rust crate defines them.
"""

import re
import sys
import types
import unicodedata

import torch

FLOAT8_E4M3 = torch.float16
FLOAT8_E8M0 = torch.float64
FLOAT4_X2 = torch.complex128

for _name, _dtype in (
    ("float8_e4m3fn", FLOAT8_E4M3),
    ("float8_e8m0fnu", FLOAT8_E8M0),
    ("float4_e2m1fn_x2", FLOAT4_X2),
):
    if not hasattr(torch, _name):
        setattr(torch, _name, _dtype)
    elif getattr(torch, _name) is not _dtype:
        raise RuntimeError(f"this torch has a real torch.{_name}: run the harness on Debian's python3-torch 1.13")


class Regex:
    def __init__(self, pattern):
        self.pattern = re.compile(pattern)


def _rust_whitespace(c):
    # char::is_whitespace: the Unicode White_Space property
    return c in "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" or "\u2000" <= c <= "\u200a"


class _Normalizer:
    def __init__(self, fn):
        self._fn = fn

    def normalize_str(self, text):
        return self._fn(text)


def _replace(pattern, content):
    if isinstance(pattern, Regex):
        return _Normalizer(lambda s: pattern.pattern.sub(lambda m: content, s))
    return _Normalizer(lambda s: s.replace(pattern, content))


def _strip(left=True, right=True):
    def fn(s):
        begin, end = 0, len(s)
        while left and begin < end and _rust_whitespace(s[begin]):
            begin += 1
        while right and end > begin and _rust_whitespace(s[end - 1]):
            end -= 1
        return s[begin:end]

    return _Normalizer(fn)


def _sequence(items):
    def fn(s):
        for n in items:
            s = n.normalize_str(s)
        return s

    return _Normalizer(fn)


normalizers = types.SimpleNamespace(
    NFKC=lambda: _Normalizer(lambda s: unicodedata.normalize("NFKC", s)),
    NFD=lambda: _Normalizer(lambda s: unicodedata.normalize("NFD", s)),
    # the Rust crate drops every char whose general category is Mn (nonspacing mark)
    StripAccents=lambda: _Normalizer(lambda s: "".join(c for c in s if unicodedata.category(c) != "Mn")),
    Lowercase=lambda: _Normalizer(str.lower),
    Replace=_replace,
    Strip=_strip,
    Sequence=_sequence,
)

_module = types.ModuleType("tokenizers")
_module.Regex = Regex
_module.normalizers = normalizers
sys.modules.setdefault("tokenizers", _module)
