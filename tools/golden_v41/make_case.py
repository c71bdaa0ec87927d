"""Writes one DeepSeek-V4.1 golden case: a small synthetic checkpoint in the released names and
formats, and what the official reference computes on it (see README.md).

    /usr/bin/python3 tools/golden_v41/make_case.py <reference inference/ dir> <case name> <out dir>
"""

import contextlib
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compat  # noqa: E402  (before the reference: installs the dtype stand-ins)
import safetensors_io as st  # noqa: E402
import tokenizer_json  # noqa: E402
import torch  # noqa: E402
from compat import FLOAT4_X2, FLOAT8_E4M3, FLOAT8_E8M0  # noqa: E402

# The reference's files, checked against the upstream git blob ids before anything runs.
UPSTREAM_BLOBS = {
    "model.py": "3e7dc222a6352ccc0c6469d58908934c2b4cd99b",
    "engram.py": "a36bc6c6b8cbf2d3dbac850863c23b55a7ecb5c7",
    "vision.py": "77af0bdef9f4649edebac2876cd1df50a147ce98",
    "image_processor.py": "a50311ece615b72be2c9d4b649a05619c27681e7",
}

# The model every case shares: the released layer roles in miniature. Layers 0-1 sliding window
# only (1 with Engram); 2-5 ratio 2 with KV/index sources 2 and 4 (4 with Engram); 6-9 ratio 1
# with source 6 (candidate source) and index-only source 8 (candidate consumer); three DSpark
# stages tapping 7-9.
MODEL = dict(
    max_batch_size=2, max_seq_len=128, temperature=0,
    vocab_size=1024, dim=128, moe_inter_dim=32, n_layers=10, n_mtp_layers=3, n_heads=4,
    n_routed_experts=8, n_shared_experts=1, n_activated_experts=3, score_func="sqrtsoftplus",
    route_scale=1.5, swiglu_limit=10.0, q_lora_rank=64, head_dim=128, rope_head_dim=64, norm_eps=1e-20,
    o_groups=2, o_lora_rank=32, window_size=32,
    compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0],
    kv_source_layers=[2, 4, 6], index_source_layers=[2, 4, 6, 8],
    compress_rope_theta=160000.0, original_seq_len=65536, rope_theta=10000.0, rope_factor=16.0,
    beta_fast=32, beta_slow=1, index_n_heads=4, index_head_dim=128, index_topk=16,
    candidate_source_layer=6, candidate_topk_blocks=6, candidate_block_size=4,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
    engram_layer_ids=[1, 4], engram_vocab_size=50, engram_max_ngram_size=4, engram_n_heads=2,
    engram_head_dim=64, engram_pad_id=2,
    dspark_block_size=5, dspark_noise_token_id=1010, dspark_target_layer_ids=[7, 8, 9],
    dspark_markov_rank=32, dspark_n_routed_experts=4, dspark_n_activated_experts=2,
    vision_n_layers=0,
)
CASES = {
    # BF16 weights: the structure without the weight formats
    "v41-tiny": dict(weights="bf16", seed=31, batch=2, prompt_len=80, decode_steps=16),
    # the released formats: FP8 e4m3 in 32x32 blocks, FP4 routed experts, E8M0 scales; odd prompt
    # so the ratio-2 compressors carry half a group into decode
    "v41-fp8": dict(weights="fp8", seed=37, batch=2, prompt_len=81, decode_steps=16),
    # prompts past two of the engine's 128-token prefix-cache blocks, the second starting with the
    # first's 256 tokens: served one after the other, the second takes them from the cache
    "v41-prefix": dict(weights="fp8", seed=41, batch=2, prompt_len=300, decode_steps=8, max_seq_len=320,
                       shared_prefix=256),
}
# Bounds for another correct implementation (the engine's fast numerics), set from this case's
# --drift measurement (tests/golden_v41/README.md): about twice the drift for the streams and
# logits; the drafts, whose greedy chains turn one flipped choice into a different draft, and the
# argmax shares below the measured ones.
OTHER_IMPLEMENTATION_BOUNDS = {
    "v41-tiny": {"layer_out.0": 1e-6, "layer_out.*": 2e-2, "main_hidden": 2e-2, "prefill_logits": 5e-3,
                 "decode_logits": 4e-2, "dspark_logits": 0.2, "dspark_confidence": 0.1,
                 "decode_argmax_min": 0.9, "dspark_ids_min": 0.95},
    "v41-fp8": {"layer_out.0": 1e-6, "layer_out.*": 0.15, "main_hidden": 0.1, "prefill_logits": 0.25,
                "decode_logits": 0.25, "dspark_logits": 0.6, "dspark_confidence": 0.4,
                "decode_argmax_min": 0.85, "dspark_ids_min": 0.65},
    # 300-token prompts: the indexer selects among 150 compressed rows, and flipped roundings
    # move it further (the drift's decode argmax agrees on 69% of the steps)
    "v41-prefix": {"layer_out.0": 2e-5, "layer_out.*": 0.3, "main_hidden": 0.25, "prefill_logits": 0.4,
                   "decode_logits": 0.45, "dspark_logits": 0.9, "dspark_confidence": 0.15,
                   "decode_argmax_min": 0.5, "dspark_ids_min": 0.6},
}


def git_blob(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_reference(ref_dir):
    for name, blob in UPSTREAM_BLOBS.items():
        got = git_blob(os.path.join(ref_dir, name))
        if got != blob:
            sys.exit(f"{name}: git blob {got}, the upstream file is {blob}: not the official reference")
    return dict(UPSTREAM_BLOBS)


def bf16_values(t):
    return t.to(torch.bfloat16).float()


def quantize_fp8_blocks(w, block=32):
    """[out, in] -> (e4m3 values, e8m0 scales [ceil(out/32), ceil(in/32)]), the released layout."""
    from kernel import round_scale, to_e4m3, _FP8_MAX_INV

    out, inp = w.shape
    po, pi = -out % block, -inp % block
    padded = torch.nn.functional.pad(w, (0, pi, 0, po))
    tiles = padded.view((out + po) // block, block, (inp + pi) // block, block)
    amax = tiles.abs().amax(dim=(1, 3)).clamp_min(1e-4)
    scale = round_scale(amax, _FP8_MAX_INV)
    codes = to_e4m3(tiles / scale[:, None, :, None])
    return codes.view(out + po, inp + pi)[:out, :inp].contiguous(), scale


def quantize_row_blocks(w, block, fmt):
    """[rows, k] -> (values, e8m0 scales [rows, k/block]) in e4m3 ("fp8") or e2m1 ("fp4")."""
    from kernel import _FP4_MAX_INV, _FP8_MAX_INV, e2m1_codes, e2m1_value, round_scale, to_e4m3

    g = w.unflatten(-1, (-1, block))
    amax = g.abs().amax(dim=-1)
    if fmt == "fp8":
        scale = round_scale(amax.clamp_min(1e-4), _FP8_MAX_INV)
        values = to_e4m3(g / scale.unsqueeze(-1))
    else:
        scale = round_scale(amax.clamp_min(6 * 2.0**-126), _FP4_MAX_INV)
        values = e2m1_value(e2m1_codes((g / scale.unsqueeze(-1)).clamp(-6, 6)))
    return values.flatten(-2), scale


def dequantize_fp8_blocks(values, scale, block=32):
    out, inp = values.shape
    s = scale.float().repeat_interleave(block, 0)[:out].repeat_interleave(block, 1)[:, :inp]
    return values.float() * s


def hf_config(args, weights):
    """config.json as the release lays it out: nested text_config, HF key names."""
    text = {
        "model_type": "deepseek_v41_text", "vocab_size": args["vocab_size"], "hidden_size": args["dim"],
        "moe_intermediate_size": args["moe_inter_dim"], "num_hidden_layers": args["n_layers"],
        "num_attention_heads": args["n_heads"], "num_key_value_heads": 1, "head_dim": args["head_dim"],
        "qk_rope_head_dim": args["rope_head_dim"], "q_lora_rank": args["q_lora_rank"],
        "o_lora_rank": args["o_lora_rank"], "o_groups": args["o_groups"], "hidden_act": "silu",
        "swiglu_limit": args["swiglu_limit"], "rms_norm_eps": args["norm_eps"], "attention_bias": False,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True, "tie_word_embeddings": False,
        "max_position_embeddings": args["max_seq_len"], "rope_theta": args["rope_theta"],
        "rope_scaling": {"rope_type": "yarn", "factor": args["rope_factor"], "beta_fast": args["beta_fast"],
                         "beta_slow": args["beta_slow"],
                         "original_max_position_embeddings": args["original_seq_len"]},
        "n_routed_experts": args["n_routed_experts"], "n_shared_experts": args["n_shared_experts"],
        "num_experts_per_tok": args["n_activated_experts"], "scoring_func": args["score_func"],
        "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": args["route_scale"],
        "sliding_window": args["window_size"], "compress_ratios": args["compress_ratios"],
        "compress_rope_theta": args["compress_rope_theta"], "kv_source_layer_ids": args["kv_source_layers"],
        "index_source_layer_ids": args["index_source_layers"], "index_n_heads": args["index_n_heads"],
        "index_head_dim": args["index_head_dim"], "index_topk": args["index_topk"],
        "candidate_source_layer_id": args["candidate_source_layer"],
        "candidate_topk_blocks": args["candidate_topk_blocks"],
        "candidate_block_size": args["candidate_block_size"], "hc_mult": args["hc_mult"],
        "hc_sinkhorn_iters": args["hc_sinkhorn_iters"], "hc_eps": args["hc_eps"],
        "engram_layer_ids": args["engram_layer_ids"], "engram_num_embeddings": args["engram_num_embeddings"],
        "engram_max_ngram_size": args["engram_max_ngram_size"], "engram_vocab_size": args["engram_vocab_size"],
        "engram_n_heads": args["engram_n_heads"], "engram_head_dim": args["engram_head_dim"],
        "engram_pad_token_id": args["engram_pad_id"],
        "engram_compressed_vocab_size": args["engram_compressed_vocab_size"],
        "num_nextn_predict_layers": args["n_mtp_layers"], "dspark_block_size": args["dspark_block_size"],
        "dspark_noise_token_id": args["dspark_noise_token_id"],
        "dspark_target_layer_ids": args["dspark_target_layer_ids"],
        "dspark_markov_rank": args["dspark_markov_rank"],
        "dspark_n_routed_experts": args["dspark_n_routed_experts"],
        "dspark_num_experts_per_tok": args["dspark_n_activated_experts"],
    }
    config = {
        "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
        "quantization_config": None, "text_config": text,
    }
    if weights == "fp8":
        config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                         "weight_block_size": [32, 32], "scale_fmt": "ue8m0",
                                         "expert_dtype": "fp4"}
    return config


class Weights:
    """Seeded synthetic weights, every value BF16-representable (what the release stores), and
    the stored tensors in the released formats."""

    def __init__(self, model, seed, weights):
        self.g = torch.Generator().manual_seed(seed)
        self.fp8 = weights == "fp8"
        self.stored = {}
        self.values = {}  # name -> tensor as the reference holds it (before the f32 promotion)
        import model as ref

        linears = {n: m for n, m in model.named_modules() if isinstance(m, ref.Linear)}
        engrams = {n: m for n, m in model.named_modules() if isinstance(m, ref.ParallelEngramEmbedding)}
        owned = set()
        for name, m in linears.items():
            self.linear(name, m)
            owned |= {f"{name}.weight", f"{name}.scale"}
        for name, m in engrams.items():
            self.engram_table(name, m)
            owned |= {f"{name}.weight", f"{name}.scale"}
        for name, p in model.named_parameters():
            if name not in owned:
                self.plain(name, p)

    def normal(self, shape, std):
        return torch.randn(*shape, generator=self.g) * std

    def linear(self, name, m):
        out, inp = m.out_features, m.in_features
        if name.endswith("wo_a"):  # ColumnParallel: out is the per-rank part, all of it at world 1
            out = m.weight.shape[0]
        std = 1 / math.sqrt(inp)
        if name.endswith("confidence_head.proj"):
            std *= 4
        w = bf16_values(self.normal((out, inp), std))
        dtype = m.weight.dtype
        if dtype == FLOAT4_X2:
            values, scale = quantize_row_blocks(w, 32, "fp4")
            self.stored[f"{name}.weight"] = st.fp4(values)
            self.stored[f"{name}.scale"] = st.e8m0(scale)
            self.values[f"{name}.weight"] = torch.complex(values[:, 0::2].double(), values[:, 1::2].double())
            self.values[f"{name}.scale"] = scale.to(FLOAT8_E8M0)
        elif dtype == FLOAT8_E4M3 or (self.fp8 and name.endswith("attn.wo_a")):
            values, scale = quantize_fp8_blocks(w)
            self.stored[f"{name}.weight"] = st.fp8(values)
            self.stored[f"{name}.scale"] = st.e8m0(scale)
            if dtype == FLOAT8_E4M3:
                self.values[f"{name}.weight"] = values.to(FLOAT8_E4M3)
                self.values[f"{name}.scale"] = scale.to(FLOAT8_E8M0)
            else:  # wo_a: the release stores FP8, the reference dequantizes it to bf16 at conversion
                self.values[f"{name}.weight"] = dequantize_fp8_blocks(values, scale).to(torch.bfloat16)
        else:
            self.stored[f"{name}.weight"] = st.bf16(w)
            self.values[f"{name}.weight"] = w.to(dtype)

    def engram_table(self, name, m):
        rows, dim = m.weight.shape
        values, scale = quantize_row_blocks(self.normal((rows, dim), 1.0), m.block_size, "fp8")
        self.stored[f"{name}.weight"] = st.fp8(values)
        self.stored[f"{name}.scale"] = st.e8m0(scale)
        self.values[f"{name}.weight"] = values.to(FLOAT8_E4M3)
        self.values[f"{name}.scale"] = scale.to(FLOAT8_E8M0)

    def plain(self, name, p):
        shape, leaf = tuple(p.shape), name.rsplit(".", 1)[-1]
        if leaf in ("hc_attn_fn", "hc_ffn_fn"):
            v = self.normal(shape, 0.02)
        elif leaf in ("hc_attn_base", "hc_ffn_base"):
            v = self.normal(shape, 0.5)
        elif leaf in ("hc_attn_scale", "hc_ffn_scale"):
            v = 0.5 + self.normal(shape, 0.1).abs()
        elif leaf == "attn_sink":
            v = self.normal(shape, 1.0)
        elif name.endswith("gate.bias"):
            v = self.normal(shape, 0.1)
        elif name.endswith("gate.weight"):
            v = self.normal(shape, 1 / math.sqrt(shape[-1]))
        elif leaf in ("q_weight", "k_weight") or name.endswith("norm.weight"):
            v = 1 + self.normal(shape, 0.1)
        elif name in ("embed.weight",) or name.endswith("markov_head.embed.weight"):
            v = self.normal(shape, 1.0)
        elif name.endswith("head.weight"):
            v = self.normal(shape, 1 / math.sqrt(shape[-1]))
        else:
            raise ValueError(f"no initializer for {name} {shape}")
        v = bf16_values(v)
        if p.dtype == torch.float32 and (leaf.startswith("hc_") or leaf == "attn_sink" or ".bias" in name):
            self.stored[name] = st.f32(v)  # the release keeps these in F32
        else:
            self.stored[name] = st.bf16(v)
        self.values[name] = v.to(p.dtype)


def load_checkpoint(model, path, fp8):
    """Fills the reference model from the written file, as a loader of the release would: stored
    codes decoded (safetensors_io), wo_a dequantized to bf16 (upstream convert.py does that), then
    every bf16 parameter promoted to f32 (exact) for the float32 run."""
    raw = st.read_raw(path)
    seen = set()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("attn.wo_a.weight") and fp8:
                w = st.decode(*raw[name])
                s = st.decode(*raw[name[: -len("weight")] + "scale"])
                value = dequantize_fp8_blocks(w, s).to(torch.bfloat16)
                seen |= {name, name[: -len("weight")] + "scale"}
            else:
                value = st.decode(*raw[name], fp4_pairs=p.dtype == FLOAT4_X2)
                seen.add(name)
            assert tuple(value.shape) == tuple(p.shape), (name, value.shape, p.shape)
            value = value.to(p.dtype)
            p.data = value.float() if p.dtype == torch.bfloat16 else value
    extra = set(raw) - seen
    assert not extra, f"tensors the reference does not have: {sorted(extra)[:5]}"


def watch_coverage(ref):
    """Counts, while the reference runs, that the case exercises what it is for: candidate blocks
    that leave reachable positions out, indexers that select fewer positions than they can
    reach, and decode steps where a ratio-2 source scores against the shared index-key slot
    another source last wrote (the reference's stale `shared_attn.index_k`)."""
    coverage = {"candidate_rows_narrowed": 0, "candidate_rows": 0, "indexer_rows_selecting": 0,
                "indexer_rows": 0, "stale_index_key_reads": 0}
    select = ref.select_candidate_blocks

    def select_and_count(logits, compress_lens, topk_blocks, block_size):
        keep = select(logits, compress_lens, topk_blocks, block_size)
        reachable = logits > -torch.inf
        coverage["candidate_rows"] += int(reachable.any(-1).sum())
        coverage["candidate_rows_narrowed"] += int((reachable & ~keep).any(-1).sum())
        return keep

    ref.select_candidate_blocks = select_and_count
    index = ref.Indexer.forward

    def index_and_count(self, x, qr, latent, start_pos, offset):
        if self.owns_k and latent is None and ref.shared_attn.index_k is not self.k_cache:
            coverage["stale_index_key_reads"] += 1
        idxs = index(self, x, qr, latent, start_pos, offset)
        end_pos = start_pos + x.size(1)
        lens = torch.arange(start_pos + 1, end_pos + 1) // self.compress_ratio
        selected = (idxs >= 0).sum(-1)
        coverage["indexer_rows"] += idxs.size(0) * idxs.size(1)
        coverage["indexer_rows_selecting"] += int((selected < lens.view(1, -1)).sum())
        return idxs

    ref.Indexer.forward = index_and_count
    return coverage


SEQUENCE_STATE = ("window_kv_cache", "compress_kv_cache", "k_cache", "kv_state", "score_state", "engram_hash.cache")


@contextlib.contextmanager
def sequence_in_row_zero(model, row):
    """Swaps batch row `row` of every per-sequence state buffer (KV rings and caches, compressor
    tails, index keys, the Engram token history) with row 0 for the duration."""
    state = [buf for name, buf in model.named_buffers() if name.endswith(SEQUENCE_STATE)]

    def swap():
        for buf in state:
            if row:
                first = buf[0].clone()
                buf[0] = buf[row]
                buf[row] = first

    swap()
    try:
        yield
    finally:
        swap()


def run(model, args, prompt, steps, forced=None):
    """Prefill, then `steps` decode steps each followed by a DSpark draft, recording the goldens.
    forced: a golden to teacher-force (its decode ids, and its tokens as the drafts' input)."""
    b, s = prompt.shape
    golden = {"prompt_ids": prompt.clone()}
    layer_out = {}
    hooks = [layer.register_forward_hook(
        lambda mod, inp, out, i=i: layer_out.__setitem__(i, out[0].detach().clone()) if inp[1] == 0 else None)
        for i, layer in enumerate(model.layers)]
    golden["engram_hashes"] = model.engram_hash(prompt, 0).clone()
    # Each prompt is prefilled alone, as a server prefills a request; the sequences then decode
    # together. The reference prefills batch row 0, so sequence i's state is swapped into row 0
    # for its prefill (state only: no arithmetic changes).
    outs = []
    for i in range(b):
        with sequence_in_row_zero(model, i):
            ids, logits, main_hidden = model(prompt[i : i + 1], 0)
            outs.append((dict(layer_out), ids, logits, main_hidden))
            if forced is not None:
                ids = forced["decode_ids"][0][i : i + 1]
            assert model.forward_spec(ids, main_hidden, 0) is None
    for h in hooks:
        h.remove()
    for i in range(args.n_layers):
        golden[f"layer_out.{i}"] = torch.cat([o[0][i] for o in outs])
    ids = torch.cat([o[1] for o in outs]) if forced is None else forced["decode_ids"][0]
    golden["prefill_logits"] = torch.cat([o[2] for o in outs])
    golden["main_hidden"] = torch.cat([o[3] for o in outs])
    # the decode step's stale index-key slot (see watch_coverage) is what the last prefill left:
    # the same tensor whichever row was prefilled last

    decode_ids, decode_logits, spark_ids, spark_logits, spark_conf = [], [], [], [], []
    for t in range(steps):
        decode_ids.append(ids)
        ids, logits, main_hidden = model(ids.unsqueeze(1), s + t)
        if forced is not None:
            ids = forced["dspark_ids"][t][:, 0]
        decode_logits.append(logits)
        out, dlogits, conf = model.forward_spec(ids, main_hidden, s + t)
        spark_ids.append(out)
        spark_logits.append(dlogits)
        spark_conf.append(conf)
    golden["decode_ids"] = torch.stack(decode_ids)
    golden["decode_logits"] = torch.stack(decode_logits)
    golden["dspark_ids"] = torch.stack(spark_ids)
    golden["dspark_logits"] = torch.stack(spark_logits)
    golden["dspark_confidence"] = torch.stack(spark_conf)
    return golden


def use_float64_products(ref):
    """A second correct implementation, for the bounds of fast numerics: every GEMM and dot
    product of the model summed in float64 (then rounded to float32), everything else as is."""
    import kernel

    linear, einsum, block_gemm = ref.F.linear, torch.einsum, kernel._block_scaled_gemm

    def linear64(x, w, bias=None):
        return linear(x.double(), w.double()).to(x.dtype)

    def einsum64(eq, *ops):
        return einsum(eq, *[o.double() for o in ops]).to(ops[0].dtype)

    def block_gemm64(a, a_s, b, b_s, block_k):
        return block_gemm(a.double(), a_s.double(), b.double(), b_s.double(), block_k).float()

    ref.F = type(ref.F)("F64")
    for name in dir(torch.nn.functional):
        setattr(ref.F, name, getattr(torch.nn.functional, name))
    ref.F.linear = linear64
    ref.torch = type(torch)("torch64")
    for name in dir(torch):
        setattr(ref.torch, name, getattr(torch, name))
    ref.torch.einsum = einsum64
    kernel._block_scaled_gemm = block_gemm64
    kernel.sparse_attn.__globals__["torch"] = ref.torch


def measure_drift(other, golden):
    print(f"{'tensor':24} relative L2")
    for name in sorted(golden):
        if golden[name].dtype == torch.int64:
            continue
        g, o = golden[name].double(), other[name].double()
        print(f"{name:24} {float((o - g).norm() / g.norm()):.2e}")
    agree = (other["decode_logits"].argmax(-1) == golden["decode_logits"].argmax(-1)).double().mean()
    print(f"decode argmax agreeing   {float(agree) * 100:.1f}%")
    agree = (other["dspark_logits"].argmax(-1) == golden["dspark_logits"].argmax(-1)).double().mean()
    print(f"dspark argmax agreeing   {float(agree) * 100:.1f}%")


def main():
    argv = sys.argv[1:]
    drift_of = argv[3] if len(argv) == 4 and argv[0] == "--drift" else None
    if drift_of is not None:  # the checkpoint is rebuilt (same seed) in a scratch folder
        argv = [argv[1], argv[2], tempfile.mkdtemp(prefix="golden-v41-")]
    if len(argv) != 3 or argv[1] not in CASES:
        sys.exit(f"usage: make_case.py <reference inference/ dir> <{'|'.join(CASES)}> <out dir>\n"
                 f"       make_case.py --drift <reference inference/ dir> <case> <its golden dir>")
    ref_dir, case_name, out_dir = argv
    case = CASES[case_name]
    blobs = check_reference(ref_dir)
    sys.path.insert(1, ref_dir)  # HERE stays first: the kernel module is ours
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    import engram as ref_engram
    import model as ref

    # The Engram lookup ends in a hard-coded `.to(torch.bfloat16)` (the release runs in bf16). Its
    # rows are e4m3 values times powers of two, exact in bf16 and f32 alike, so handing them on as
    # the run's float32 changes no value; without it a float32 wkv cannot take them.
    engram_lookup = ref.ParallelEngramEmbedding.forward
    ref.ParallelEngramEmbedding.forward = lambda self, idx: engram_lookup(self, idx).to(torch.get_default_dtype())

    os.makedirs(out_dir, exist_ok=True)
    tok_obj, tokens, specials = tokenizer_json.build(MODEL["vocab_size"])
    tokenizer = tokenizer_json.Tokenizer(tokens, specials)
    _, compressed_vocab = ref_engram.build_compressed_token_map(tokenizer)
    args_dict = dict(MODEL, max_seq_len=case.get("max_seq_len", MODEL["max_seq_len"]), dtype=case["weights"],
                     expert_dtype="fp4" if case["weights"] == "fp8" else None,
                     engram_compressed_vocab_size=compressed_vocab, engram_num_embeddings=[0, 0])
    layout = ref_engram.EngramLayout.from_args(ref.ModelArgs(**args_dict))
    args_dict["engram_num_embeddings"] = [sum(p for per in layer for p in per) for layer in layout.primes]
    args = ref.ModelArgs(**args_dict)

    coverage = watch_coverage(ref)
    model = ref.Transformer(args, tokenizer)
    weights = Weights(model, case["seed"], case["weights"])
    ckpt = os.path.join(out_dir, "model.safetensors")
    st.write(ckpt, weights.stored, {"format": "pt"})
    load_checkpoint(model, ckpt, case["weights"] == "fp8")
    tokenizer_json.write(os.path.join(out_dir, "tokenizer.json"), tok_obj)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(args_dict, case["weights"]), f, indent=2)
        f.write("\n")

    # prompts over the regular vocabulary, with repeated n-grams so Engram rows recur
    g = torch.Generator().manual_seed(case["seed"] + 1)
    b, s, steps = case["batch"], case["prompt_len"], case["decode_steps"]
    regular = MODEL["vocab_size"] - tokenizer_json.RESERVED
    prompt = torch.randint(3, regular, (b, s), generator=g)
    prompt[:, s // 2 : s // 2 + 8] = prompt[:, 4:12]
    shared = case.get("shared_prefix", 0)
    prompt[1:, :shared] = prompt[0, :shared]

    if drift_of is not None:
        use_float64_products(ref)
        golden = st.load(os.path.join(drift_of, "golden.safetensors"))
        assert torch.equal(golden["prompt_ids"], prompt), "the case's prompts are not this seed's"
        measure_drift(run(model, args, prompt, steps, golden), golden)
        return
    golden = run(model, args, prompt, steps)

    stored = {k: (st.i64(v) if v.dtype == torch.int64 else st.f32(v)) for k, v in golden.items()}
    st.write(os.path.join(out_dir, "golden.safetensors"), stored)
    torch_version = torch.__version__
    info = {
        "reference": "official DeepSeek-V4.1 inference/model.py + engram.py (upstream blobs below), "
                     f"kernels of tools/golden_v41/kernel.py, torch {torch_version}, CPU, float32",
        "upstream_blobs": blobs,
        "precision": "f32",
        "weights": case["weights"],
        "seed": case["seed"],
        "batch": b,
        "prompt_len": s,
        "decode_steps": steps,
        "command": f"/usr/bin/python3 tools/golden_v41/make_case.py <reference inference/> {case_name} <out>",
        "model_args": args_dict,
        "coverage": coverage,
        "tensors": {k: list(v.shape) for k, v in golden.items()},
        "bounds": {
            "exact_numerics": "every tensor bit-identical (relative L2 0), every token the reference's",
            "other_correct_implementations": OTHER_IMPLEMENTATION_BOUNDS[case_name],
        },
    }
    with open(os.path.join(out_dir, "case.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"{case_name}: {len(weights.stored)} weight tensors, goldens {sorted(golden)}")


if __name__ == "__main__":
    main()
