"""The golden harness's Python modules (tools/golden_v41: the QAT rounding kernels, the
safetensors writer, the byte-level alphabet), importable once this is imported."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "golden_v41"))
