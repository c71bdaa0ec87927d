"""The trained model as a released DeepSeek-V4 checkpoint (config.json + model.safetensors in the
release's tensor names and formats), and a golden case computed by this trainer's forward.

Formats as released: FP8 e4m3 attention, shared-expert and MTP projection weights with an E8M0
scale per 128x128 tile, FP4 e2m1 routed experts (two per byte, even element in the low nibble)
with an E8M0 scale per 32 inputs, BF16 embedding, head, norms, gates, compressors and indexer
weight projections, F32 sinks, compressor position biases, gate biases and mHC parameters. The
values written are exactly the ones the trainer's forward uses (qat.py rounds the same way).
"""

import dataclasses
import json
import os

import torch

import harness  # noqa: F401
import qat
import safetensors_io as st
from model import Stats


def _linear(out, name, lin):
    w = lin.weight.detach().float()
    if lin.fmt in ("fp8", "fp8-weight-only"):
        codes, scale = qat.fp8_weight_parts(w)
        out[name + ".weight"] = st.fp8(codes)
        out[name + ".scale"] = st.e8m0(scale)
    elif lin.fmt == "fp4":
        codes, scale = qat.fp4_weight_parts(w)
        out[name + ".weight"] = st.fp4(codes)
        out[name + ".scale"] = st.e8m0(scale)
    else:
        out[name + ".weight"] = st.bf16(w)


def _norm(out, name, norm):
    out[name + ".weight"] = st.bf16(norm.weight)


def _hc(out, prefix, which, hc):
    out[f"{prefix}hc_{which}_fn"] = st.f32(hc.fn)
    out[f"{prefix}hc_{which}_base"] = st.f32(hc.base)
    out[f"{prefix}hc_{which}_scale"] = st.f32(hc.scale)


def _compressor(out, p, c):
    _linear(out, p + ".wkv", c.wkv)
    _linear(out, p + ".wgate", c.wgate)
    out[p + ".ape"] = st.f32(c.ape)
    _norm(out, p + ".norm", c.norm)


def _block(out, p, block):
    a = block.attn
    out[p + "attn.attn_sink"] = st.f32(a.attn_sink)
    for name in ("wq_a", "wq_b", "wkv", "wo_a", "wo_b"):
        _linear(out, p + "attn." + name, getattr(a, name))
    _norm(out, p + "attn.q_norm", a.q_norm)
    _norm(out, p + "attn.kv_norm", a.kv_norm)
    if a.compressor is not None:
        _compressor(out, p + "attn.compressor", a.compressor)
    if a.indexer is not None:
        _linear(out, p + "attn.indexer.wq_b", a.indexer.wq_b)
        _linear(out, p + "attn.indexer.weights_proj", a.indexer.weights_proj)
        _compressor(out, p + "attn.indexer.compressor", a.indexer.compressor)
    _norm(out, p + "attn_norm", block.attn_norm)
    _norm(out, p + "ffn_norm", block.ffn_norm)
    moe = block.ffn
    _linear(out, p + "ffn.gate", moe.gate)
    if moe.hashed:
        out[p + "ffn.gate.tid2eid"] = st.i64(moe.tid2eid)
    else:
        out[p + "ffn.gate.bias"] = st.f32(moe.bias)
    for e, expert in enumerate(moe.experts):
        for w in ("w1", "w2", "w3"):
            _linear(out, f"{p}ffn.experts.{e}.{w}", getattr(expert, w))
    for w in ("w1", "w2", "w3"):
        _linear(out, f"{p}ffn.shared_experts.{w}", getattr(moe.shared_experts, w))
    _hc(out, p, "attn", block.hc_attn)
    _hc(out, p, "ffn", block.hc_ffn)


def _head_mix(out, prefix, mix):
    out[prefix + "hc_head_fn"] = st.f32(mix.fn)
    out[prefix + "hc_head_base"] = st.f32(mix.base)
    out[prefix + "hc_head_scale"] = st.f32(mix.scale)


def checkpoint_tensors(model):
    out = {"embed.weight": st.bf16(model.embed), "head.weight": st.bf16(model.head)}
    for i, block in enumerate(model.layers):
        _block(out, f"layers.{i}.", block)
    _norm(out, "norm", model.norm)
    _head_mix(out, "", model.head_mix)
    for i, m in enumerate(model.mtp):
        p = f"mtp.{i}."
        _block(out, p, m.block)
        _linear(out, p + "e_proj", m.e_proj)
        _linear(out, p + "h_proj", m.h_proj)
        for n in ("enorm", "hnorm", "norm"):
            _norm(out, p + n, getattr(m, n))
        _head_mix(out, p, m.head_mix)
    return out


def config_json(cfg):
    j = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
    j.update(dataclasses.asdict(cfg))
    j.update({"num_key_value_heads": 1, "norm_topk_prob": True, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
              "tie_word_embeddings": False})
    return j


def write_checkpoint(model, out_dir, metadata=None):
    os.makedirs(out_dir, exist_ok=True)
    st.write(os.path.join(out_dir, "model.safetensors"), checkpoint_tensors(model), metadata)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config_json(model.cfg), f, indent=2)
        f.write("\n")


@torch.no_grad()
def write_golden(model, prompts, decode_steps, out_dir, bounds, note):
    """The golden protocol (../shared/golden/README.md) computed by this trainer's forward:
    prefill prompts [B, S], greedy decode_steps tokens teacher-forced, MTP block 0 on the last
    streams. The forward is causal, so the logits at position S + t of one forward over the prompt
    and the decoded tokens are the decode step's."""
    b, s = prompts.shape
    ids = prompts
    for _ in range(decode_steps):
        _, logits, _ = model(ids, Stats())
        ids = torch.cat((ids, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    # decode step t feeds ids[:, s + t] and yields the logits at position s + t
    _, logits, _ = model(ids, Stats())
    prompt_final, _, prompt_layers = model(prompts, Stats(), keep_layers=True)
    mtp_ids = torch.cat((prompts[:, 1:], ids[:, s : s + 1]), dim=1)
    mtp = model.mtp_logits(prompt_final, mtp_ids, Stats())
    g = {"prompt_ids": st.i64(prompts), "prefill_logits": st.f32(logits[:, s - 1]),
         "decode_ids": st.i64(ids[:, s:].T.contiguous()),
         "decode_logits": st.f32(logits[:, s:].transpose(0, 1).contiguous())}
    for i, h in enumerate(prompt_layers):
        g[f"layer_out.{i}"] = st.f32(h)
    g["final_hidden"] = st.f32(prompt_final)
    g["mtp_ids"] = st.i64(mtp_ids)
    g["mtp_logits"] = st.f32(mtp[:, -1])
    os.makedirs(out_dir, exist_ok=True)
    st.write(os.path.join(out_dir, "golden.safetensors"), g)
    case = {"reference": note, "precision": "f32", "weights": "fp8", "batch": b, "prompt_len": s,
            "decode_steps": decode_steps, "bounds": {"other_correct_implementations": bounds}}
    with open(os.path.join(out_dir, "case.json"), "w") as f:
        json.dump(case, f, indent=2)
        f.write("\n")

