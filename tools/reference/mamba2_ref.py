#!/usr/bin/env python3
"""
Origin: the independent fp64 reference that generated the golden fixtures of
tests/data/mamba2-tiny (granitemoehybrid, nemotron_h). It was written apart
from rewind, from the semantics of the HF modeling code, and kept outside the
repository; it is copied here and extended with the Nemotron-H MoE family
(nemotron_h_moe: 'E' blocks, sigmoid group-limited router with a correction
bias, relu^2 experts plus a shared expert), written from HF's NemotronHMoE /
NemotronHTopkRouter semantics. Regenerating the two older families with this
copy gives byte-identical fixtures.

Self-contained PyTorch reference (fp64 golden, fp32 for comparison) for the
Mamba2-hybrid decoder families, written from the spec that became
docs/MAMBA2.md and checked against the
HF transformers modeling code (modeling_granitemoehybrid.py,
modeling_nemotron_h.py) and llama.cpp (src/models/{granite-hybrid,nemotron-h,
mamba-base}.cpp). No code is copied from either.

Families
  granitemoehybrid  (Granite-4.0-H)
      h = embed_tokens(ids) * embedding_multiplier
      per layer: h += residual_multiplier * mixer(input_layernorm(h))
                 (mixer = Mamba2 or attention, from config.layer_types)
                 m = post_attention_layernorm(h)
                 h += residual_multiplier * (shared_mlp(m) + moe(m))
      logits = lm_head(norm(h)) / logits_scaling   (lm_head tied to embeddings)
      attention: GQA, NoPE (position_embedding_type != "rope"),
                 softmax scale = attention_multiplier, head_dim = hidden/heads
      MoE: router logits -> top-k -> softmax over the k selected logits,
           SwiGLU experts (input_linear [E, 2I, D], gate = first half)
      Mamba2 gated RMSNorm: HF normalises over the WHOLE d_inner (no groups);
           all released Granite-4.0-H have mamba_n_groups = 1, where this equals
           llama.cpp's grouped norm. The fixtures keep G = 1 for that reason.
  nemotron_h_moe  (Nemotron-H with MoE blocks; model_type "nemotron_h")
      as nemotron_h, plus 'E' blocks: h += moe(norm_i(h)) with
      logits = x W_gate^T, s = sigmoid(logits), choice = s + e_score_correction_bias;
      group score = sum of the top-2 choice scores of each of n_group
      contiguous groups; keep the topk_group best groups (others -inf);
      top num_experts_per_tok experts by choice; weights = the UNBIASED s of
      those, / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor;
      experts non-gated: down(relu(up(x))^2); plus a shared expert of the
      same form (moe_shared_expert_intermediate_size), always added.
      moe_latent_size (a latent projection around the experts) is refused.
      Tensor names: mixer.gate.weight [E, D], mixer.gate.e_score_correction_bias
      [E], mixer.experts.{e}.{up,down}_proj.weight, mixer.shared_experts.*.
  nemotron_h  (Nemotron-H, non-MoE)
      h = embeddings(ids); per block c in hybrid_override_pattern:
      h += mixer_c(norm_i(h)),  'M' Mamba2, '*' attention (GQA, NoPE, explicit
      head_dim, scale head_dim^-0.5), '-' MLP down(relu(up(x))^2)
      logits = lm_head(norm_f(h))   (untied)
      Mamba2 gated RMSNorm grouped: n_groups groups of d_inner/n_groups.
      Tensor names are the Hub checkpoint names (backbone.embeddings,
      backbone.layers.N.norm / .mixer.*, backbone.norm_f, lm_head); the HF
      in-memory names (model.*) are accepted on load and mapped back, as
      transformers' conversion_mapping does ("backbone." <-> "model.").

Mamba2 mixer (both families), per token t, head h (group g = h // (H/G)):
      zxbcdt = in_proj(u); z | xBC | dt split [d_inner, d_inner+2GN, H]
      xBC = silu(causal depthwise conv1d(xBC) + bias)   (state: last K-1 raw xBC)
      x | B | C split [d_inner, G*N, G*N]; x -> [H, P], B, C -> [G, N]
      dt = softplus(dt + dt_bias)        ** NO clamp **  (see note below)
      S_h = exp(dt_h*A_h) * S_h + dt_h * x_h (outer) B_g ;   A = -exp(A_log)
      y_h = S_h C_g + D_h * x_h
      out = out_proj( gated_rmsnorm( y * silu(z) ) * norm.weight )
  dt is NOT clamped. This matches llama.cpp (ggml_ssm_scan: softplus only) and
  the CUDA-kernel path of HF (mamba_chunk_scan_combined with the default
  time_step_limit (0, inf) = no clamp). The HF *torch* fallback of Nemotron-H
  (Zamba2-derived) clamps dt >= time_step_min (1e-3); the run prints the
  smallest dt seen so one can tell whether that clamp would matter.
  The SSM is computed in two independent forms:
      recurrent  the per-token recurrence above (the decode path)
      chunked    the SSD "state space duality" form: tokens padded to a
                 multiple of the chunk size, intra-chunk output via
                 L = exp(segsum(dt*A)) (lower-triangular decay matrix) and
                 (C.B) L x*dt, chunk states, inter-chunk propagation with
                 exp(segsum(chunk totals)) starting from the carried state,
                 and the off-diagonal term C . state * exp(cumsum(dt*A)).
                 Unlike the HF torch prefill path it honours a non-zero
                 initial state, so prefix+suffix prefill with carried state
                 can be checked.

What it does
  * builds a seeded random checkpoint {HF tensor name -> tensor} for a tiny
    config chosen so that layout mistakes change the numbers
    (H != G, n_groups 2/4 for nemotron_h, heads*head_dim != hidden,
    d_state != head_dim, d_inner != hidden, conv kernel 4, non-trivial Granite
    multipliers, MoE 4 experts top-2 + shared expert)
  * writes model.safetensors (own writer) and config.json (HF layout of the
    model_type), re-reads both with its own reader and runs from the reloaded
    tensors
  * fp64 and fp32: full pass recurrent vs chunked (and a second chunk size),
    prefix+suffix with carried conv/ssm/KV state, token-by-token from 0,
    snapshot at the split + token-by-token decode; asserts fp64 < 1e-10
  * writes expected_logits.json (fp64 chunked full pass; same schema as the
    qwen35 fixtures: variant, weights_dtype, tokens, split, chunk, note,
    positions, logits {pos: [vocab floats]}, argmax per position)

Run:  /usr/bin/python3 mamba2_ref.py [--family all|granitemoehybrid|nemotron_h|nemotron_h_moe]
          [--variant fixture|hidden] [--out DIR] [--seq N] [--split S]
          [--chunk Q] [--seed S]
      fixture defaults: seq 150, split 97, chunk 64, seed 0
      hidden  defaults: seq 200, split 131, chunk 48, seed 7
Needs only torch (tested with 1.13) and the Python stdlib.
Library use: load_model(dir, dtype) -> Model; Model.forward(tokens, State(..))
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

FAMILIES = ("granitemoehybrid", "nemotron_h", "nemotron_h_moe")

# ----------------------------------------------------------------------------
# 1. configs (on-disk HF layout, real field names)
# ----------------------------------------------------------------------------


def tiny_config(family, variant="fixture"):
    """config.json dict for a tiny model of `family`.

    fixture: hidden 64;  hidden: hidden 96 with other H/P/N/G, layer pattern,
    head counts and multipliers (used for the hidden bar data).
    """
    hid = variant == "hidden"
    if family == "granitemoehybrid":
        # Granite: d_inner = mamba_expand * hidden (llama.cpp only supports
        # expand 2), head_dim = hidden / heads (the llama.cpp converter drops
        # an explicit head_dim for Granite), G = 1 (see module docstring).
        D = 96 if hid else 64
        return {
            "architectures": ["GraniteMoeHybridForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "attention_multiplier": 0.09 if hid else 0.125,
            "bos_token_id": 1,
            "embedding_multiplier": 7.5 if hid else 12.0,
            "eos_token_id": 2,
            "hidden_act": "silu",
            "hidden_size": D,
            "initializer_range": 0.1,
            "intermediate_size": 24 if hid else 32,        # routed expert width
            "layer_types": (["attention", "mamba", "mamba", "attention",
                             "mamba", "mamba"] if hid else
                            ["mamba", "attention", "mamba", "mamba",
                             "attention"]),
            "logits_scaling": 2.5 if hid else 3.0,
            "mamba_chunk_size": 48 if hid else 64,
            "mamba_conv_bias": True,
            "mamba_d_conv": 4,
            "mamba_d_head": 32 if hid else 16,
            "mamba_d_state": 40 if hid else 24,
            "mamba_expand": 2,
            "mamba_n_groups": 1,
            "mamba_n_heads": 6 if hid else 8,
            "mamba_proj_bias": False,
            "max_position_embeddings": 4096,
            "model_type": "granitemoehybrid",
            "normalization_function": "rmsnorm",
            "num_attention_heads": 6 if hid else 4,
            "num_experts_per_tok": 3 if hid else 2,
            "num_hidden_layers": 6 if hid else 5,
            "num_key_value_heads": 2,
            "num_local_experts": 6 if hid else 4,
            "output_router_logits": False,
            "pad_token_id": 0,
            "position_embedding_type": "nope",
            "residual_multiplier": 0.3 if hid else 0.25,
            "rms_norm_eps": 1e-05,
            "rope_scaling": None,
            "rope_theta": 10000,
            "router_aux_loss_coef": 0.0,
            "shared_intermediate_size": 40 if hid else 48,
            "tie_word_embeddings": True,
            "torch_dtype": "float32",
            "use_cache": True,
            "vocab_size": 256,
        }
    if family == "nemotron_h_moe":
        # Nemotron-H with MoE blocks (model_type nemotron_h, as the Hub's
        # Nemotron-3-Nano): every block kind, 12 experts in 4 groups of 3 (so
        # the top-2 group score differs from a group's sum or max), 2 groups
        # kept, top-4, a correction bias, routed_scaling_factor 2.5.
        raw = tiny_config("nemotron_h", variant)
        pattern = "ME*M-EM" if hid else "MEM*E-"
        raw.update({
            "hybrid_override_pattern": pattern,
            "num_hidden_layers": len(pattern),
            "n_routed_experts": 12,
            "n_shared_experts": 1,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 48,
            "moe_latent_size": None,
            "n_group": 4,
            "topk_group": 2,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
        })
        return dict(sorted(raw.items()))
    if family == "nemotron_h":
        # Hub (legacy) layout as shipped by NVIDIA: hybrid_override_pattern,
        # n_groups, conv_kernel, chunk_size, ... d_inner = mamba_num_heads *
        # mamba_head_dim (kept a multiple of 64: the llama.cpp converter
        # asserts d_inner % 64 == 0 for this family), != expand * hidden.
        # time_step_limit is left at its default (0, inf): a literal
        # Infinity is not valid JSON.
        pattern = "MM-*M-*M" if hid else "M-M*M-"
        return {
            "architectures": ["NemotronHForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "chunk_size": 48 if hid else 64,
            "conv_kernel": 4,
            "eos_token_id": 2,
            "expand": 2,
            "head_dim": 20 if hid else 24,
            "hidden_dropout": 0.0,
            "hidden_size": 96 if hid else 64,
            "hybrid_override_pattern": pattern,
            "initializer_range": 0.02,
            "intermediate_size": 144 if hid else 96,
            "layer_norm_epsilon": 1e-05,
            "mamba_head_dim": 24 if hid else 16,
            "mamba_hidden_act": "silu",
            "mamba_num_heads": 8 if hid else 12,
            "mamba_proj_bias": False,
            "mamba_ssm_cache_dtype": "float32",
            "max_position_embeddings": 4096,
            "mlp_bias": False,
            "mlp_hidden_act": "relu2",
            "model_type": "nemotron_h",
            "n_groups": 4 if hid else 2,
            "num_attention_heads": 6 if hid else 4,
            "num_hidden_layers": len(pattern),
            "num_key_value_heads": 2,
            "num_logits_to_keep": 1,
            "pad_token_id": 0,
            "rescale_prenorm_residual": True,
            "residual_in_fp32": False,
            "rms_norm_eps": 1e-05,
            "sliding_window": None,
            "ssm_state_size": 12 if hid else 20,
            "tie_word_embeddings": False,
            "time_step_floor": 0.0001,
            "time_step_max": 0.1,
            "time_step_min": 0.001,
            "torch_dtype": "float32",
            "use_bias": False,
            "use_cache": True,
            "use_conv_bias": True,
            "use_mamba_kernels": True,
            "vocab_size": 256,
        }
    raise ValueError(family)


def _first(d, *keys, default=None):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


class Cfg:
    """Normalised view of a config.json of either family."""

    def __init__(self, raw):
        self.raw = raw
        self.family = raw["model_type"]
        if self.family not in FAMILIES:
            raise ValueError(f"unsupported model_type {self.family!r}")
        self.V = raw["vocab_size"]
        self.D = raw["hidden_size"]
        self.nh = raw["num_attention_heads"]
        self.nkv = raw.get("num_key_value_heads") or self.nh
        self.attn_bias = bool(raw.get("attention_bias", False))
        self.tied = bool(raw.get("tie_word_embeddings", False))
        if self.family == "granitemoehybrid":
            lt = _first(raw, "layer_types", "layers_block_type")
            L = raw["num_hidden_layers"]
            lt = lt or ["mamba"] * L
            assert all(t in ("mamba", "attention") for t in lt), lt
            # per layer mixer kind: 'M' Mamba2 / '*' attention
            self.kinds = ["M" if t == "mamba" else "*" for t in lt]
            if raw.get("position_embedding_type") == "rope":
                raise NotImplementedError("Granite with RoPE is not covered")
            self.hd = raw.get("head_dim") or self.D // self.nh
            self.scale = raw.get("attention_multiplier", 1.0)
            self.eps = raw.get("rms_norm_eps", 1e-6)
            self.m_emb = raw.get("embedding_multiplier", 1.0)
            self.m_res = raw.get("residual_multiplier", 1.0)
            self.logit_div = raw.get("logits_scaling", 1.0)
            self.H = raw["mamba_n_heads"]
            self.d_inner = int(raw.get("mamba_expand", 2) * self.D)
            P = raw.get("mamba_d_head", "auto")
            self.P = self.d_inner // self.H if P == "auto" else P
            self.G = raw.get("mamba_n_groups", 1)
            self.N = raw["mamba_d_state"]
            self.K = raw.get("mamba_d_conv", 4)
            self.chunk = raw.get("mamba_chunk_size", 256)
            self.conv_bias = raw.get("mamba_conv_bias", True)
            self.proj_bias = raw.get("mamba_proj_bias", False)
            self.norm_groups = 1          # HF GraniteMoeHybridRMSNormGated
            self.E = raw.get("num_local_experts", 0) or 0
            self.topk = raw.get("num_experts_per_tok", 0)
            self.I = raw.get("intermediate_size")
            self.I_sh = raw.get("shared_intermediate_size")
            assert raw.get("hidden_act", "silu") == "silu"
        else:
            pat = raw.get("hybrid_override_pattern")
            if pat is None:   # new HF layout: list of layer types
                m = {"mamba": "M", "linear_attention": "M", "attention": "*",
                     "full_attention": "*", "mlp": "-", "moe": "E"}
                pat = "".join(m[t] for t in raw["layers_block_type"])
            self.kinds = list(pat)
            if "E" in pat:
                if raw.get("moe_latent_size") is not None:
                    raise NotImplementedError("moe_latent_size is not covered")
                self.moe_E = raw["n_routed_experts"]
                self.moe_topk = raw["num_experts_per_tok"]
                self.moe_I = raw["moe_intermediate_size"]
                self.moe_I_sh = raw["moe_shared_expert_intermediate_size"]
                self.moe_n_group = raw.get("n_group", 1)
                self.moe_topk_group = raw.get("topk_group", 1)
                self.moe_norm = raw.get("norm_topk_prob", True)
                self.moe_scale = raw.get("routed_scaling_factor", 1.0)
                assert self.moe_E % self.moe_n_group == 0
                assert 1 <= self.moe_topk_group <= self.moe_n_group
                assert self.moe_topk <= self.moe_topk_group * (self.moe_E // self.moe_n_group)
            self.hd = _first(raw, "head_dim", "attention_head_dim",
                             default=self.D // self.nh)
            self.scale = self.hd ** -0.5
            self.eps = _first(raw, "layer_norm_epsilon", "rms_norm_eps",
                              default=1e-5)
            self.m_emb = self.m_res = self.logit_div = 1.0
            self.H = raw["mamba_num_heads"]
            self.P = raw["mamba_head_dim"]
            self.d_inner = self.H * self.P
            self.G = _first(raw, "n_groups", "mamba_n_groups", default=8)
            self.N = raw["ssm_state_size"]
            self.K = _first(raw, "conv_kernel", "mamba_d_conv", default=4)
            self.chunk = _first(raw, "chunk_size", "mamba_chunk_size",
                                default=128)
            self.conv_bias = _first(raw, "use_conv_bias", "mamba_conv_bias",
                                    default=True)
            self.proj_bias = raw.get("use_bias", False)   # mixer in/out_proj
            self.norm_groups = self.G     # Zamba2RMSNormGated(group_size=d_inner/G)
            self.E = 0
            self.I = raw.get("intermediate_size")
            self.mlp_bias = raw.get("mlp_bias", False)
            assert raw.get("mlp_hidden_act", "relu2") == "relu2"
            assert raw.get("mamba_hidden_act", "silu") == "silu"
        self.L = len(self.kinds)
        assert self.H % self.G == 0 and self.nh % self.nkv == 0
        assert self.d_inner == self.H * self.P
        self.conv_dim = self.d_inner + 2 * self.G * self.N
        self.d_in_proj = 2 * self.d_inner + 2 * self.G * self.N + self.H

    # ---- tensor names (exact checkpoint names) ---------------------------------
    @property
    def granite(self):
        return self.family == "granitemoehybrid"

    def emb_name(self):
        return ("model.embed_tokens.weight" if self.granite
                else "backbone.embeddings.weight")

    def final_norm_name(self):
        return "model.norm.weight" if self.granite else "backbone.norm_f.weight"

    def layer(self, i):
        return f"model.layers.{i}." if self.granite else f"backbone.layers.{i}."

    def mixer(self, i):
        if self.granite:
            return self.layer(i) + ("mamba." if self.kinds[i] == "M"
                                    else "self_attn.")
        return self.layer(i) + "mixer."


# ----------------------------------------------------------------------------
# 2. random checkpoint with the exact HF tensor names
# ----------------------------------------------------------------------------


def build_weights(raw_cfg, seed=0):
    c = Cfg(raw_cfg)
    g = torch.Generator().manual_seed(seed)

    def lin(out_f, in_f):  # nn.Linear layout: [out_features, in_features]
        return torch.randn(out_f, in_f, generator=g) / math.sqrt(in_f)

    def norm_w(n):  # plain RMSNorm weight (not zero-centred)
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    def vec(n, s=0.1):
        return s * torch.randn(n, generator=g)

    W = {}
    # Granite: embedding_multiplier (12) scales the embedding into the residual
    # stream while sublayer outputs are scaled by residual_multiplier (0.25).
    # With unit-scale weights the stream (and, with the tied head, the argmax)
    # would just be the current token's embedding. So: embedding std 0.2,
    # output projections x16 (`gain`), final norm weight ~3 (O(1) logits).
    gain = 16.0 if c.granite else 1.0
    W[c.emb_name()] = torch.randn(c.V, c.D, generator=g) * (0.2 if c.granite
                                                            else 1.0)
    for i, kind in enumerate(c.kinds):
        lp, mp = c.layer(i), c.mixer(i)
        if c.granite:
            W[lp + "input_layernorm.weight"] = norm_w(c.D)
            W[lp + "post_attention_layernorm.weight"] = norm_w(c.D)
        else:
            W[lp + "norm.weight"] = norm_w(c.D)
        if kind == "M":
            W[mp + "in_proj.weight"] = lin(c.d_in_proj, c.D)
            if c.proj_bias:
                W[mp + "in_proj.bias"] = vec(c.d_in_proj)
            # depthwise Conv1d layout [channels, 1, kernel]
            W[mp + "conv1d.weight"] = torch.randn(
                c.conv_dim, 1, c.K, generator=g) / math.sqrt(c.K)
            if c.conv_bias:
                W[mp + "conv1d.bias"] = vec(c.conv_dim)
            # dt = softplus(dt_raw + dt_bias): dt_raw ~ N(0,1), bias ~ -3 =>
            # dt in ~[0.003, 0.5]; A in (0.5, 8) => per-token decay
            # exp(dt*A) from ~0.999 (long memory, crosses chunks) to ~0.02.
            W[mp + "dt_bias"] = -3.0 + 0.7 * torch.randn(c.H, generator=g)
            W[mp + "A_log"] = torch.log(0.5 + 7.5 * torch.rand(c.H, generator=g))
            W[mp + "D"] = 0.5 + torch.rand(c.H, generator=g)
            W[mp + "norm.weight"] = norm_w(c.d_inner)
            W[mp + "out_proj.weight"] = gain * lin(c.D, c.d_inner)
            if c.proj_bias:
                W[mp + "out_proj.bias"] = vec(c.D)
        elif kind == "*":
            W[mp + "q_proj.weight"] = lin(c.nh * c.hd, c.D)
            W[mp + "k_proj.weight"] = lin(c.nkv * c.hd, c.D)
            W[mp + "v_proj.weight"] = lin(c.nkv * c.hd, c.D)
            W[mp + "o_proj.weight"] = gain * lin(c.D, c.nh * c.hd)
            if c.attn_bias:
                for n_, sz in (("q", c.nh), ("k", c.nkv), ("v", c.nkv)):
                    W[mp + f"{n_}_proj.bias"] = vec(sz * c.hd)
                W[mp + "o_proj.bias"] = vec(c.D)
        elif kind == "E":
            # router, its correction bias (non-zero so that it matters), the
            # routed experts one by one (the Hub's names), the shared expert
            W[mp + "gate.weight"] = lin(c.moe_E, c.D)
            W[mp + "gate.e_score_correction_bias"] = vec(c.moe_E, 0.2)
            for e in range(c.moe_E):
                W[mp + f"experts.{e}.up_proj.weight"] = lin(c.moe_I, c.D)
                W[mp + f"experts.{e}.down_proj.weight"] = lin(c.D, c.moe_I)
            W[mp + "shared_experts.up_proj.weight"] = lin(c.moe_I_sh, c.D)
            W[mp + "shared_experts.down_proj.weight"] = lin(c.D, c.moe_I_sh)
        elif kind == "-":
            W[mp + "up_proj.weight"] = lin(c.I, c.D)
            W[mp + "down_proj.weight"] = lin(c.D, c.I)
            if c.mlp_bias:
                W[mp + "up_proj.bias"] = vec(c.I)
                W[mp + "down_proj.bias"] = vec(c.D)
        if c.granite:
            # shared expert, always on: SwiGLU, input_linear = [gate; up]
            W[lp + "shared_mlp.input_linear.weight"] = lin(2 * c.I_sh, c.D)
            W[lp + "shared_mlp.output_linear.weight"] = gain * lin(c.D, c.I_sh)
            if c.E > 0:
                W[lp + "block_sparse_moe.router.layer.weight"] = lin(c.E, c.D)
                W[lp + "block_sparse_moe.input_linear.weight"] = torch.stack(
                    [lin(2 * c.I, c.D) for _ in range(c.E)])     # [E, 2I, D]
                W[lp + "block_sparse_moe.output_linear.weight"] = torch.stack(
                    [gain * lin(c.D, c.I) for _ in range(c.E)])  # [E, D, I]
    W[c.final_norm_name()] = (3.0 if c.granite else 1.0) * norm_w(c.D)
    if not c.tied:
        W["lm_head.weight"] = lin(c.V, c.D)
    return W


def canonical_names(raw_cfg, W):
    """Map HF in-memory names to the checkpoint names used here. Nemotron-H:
    transformers renames backbone.* -> model.* and embedding -> embeddings
    when loading a Hub checkpoint; accept either spelling."""
    if raw_cfg["model_type"] != "nemotron_h":
        return dict(W)
    out = {}
    for k, v in W.items():
        if k.startswith("model."):
            k = "backbone." + k[len("model."):]
        if k == "backbone.embedding.weight":
            k = "backbone.embeddings.weight"
        out[k] = v
    return out


# ----------------------------------------------------------------------------
# 3. safetensors writer / reader (format: u64 LE N, N bytes JSON, raw data)
# ----------------------------------------------------------------------------

_ST_DTYPES = {torch.float32: ("F32", 4), torch.float16: ("F16", 2),
              torch.bfloat16: ("BF16", 2), torch.int64: ("I64", 8),
              torch.int32: ("I32", 4), torch.float64: ("F64", 8)}
_ST_NAMES = {v[0]: k for k, v in _ST_DTYPES.items()}


def _tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:          # numpy has no bf16: view as int16
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()             # x86/ARM are little-endian


def save_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        code, _ = _ST_DTYPES[t.dtype]
        b = _tensor_bytes(t)
        header[name] = {"dtype": code, "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)   # pad so the data section is 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    base = 8 + n
    spans = sorted(v["data_offsets"] for k, v in header.items()
                   if k != "__metadata__")
    pos = 0
    for s_, e_ in spans:
        assert s_ == pos and e_ >= s_, "non-contiguous safetensors data"
        pos = e_
    assert base + pos == len(buf), "data section size mismatch"
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        dt = _ST_NAMES[info["dtype"]]
        assert e - s == math.prod(info["shape"]) * _ST_DTYPES[dt][1]
        raw = bytearray(buf[base + s: base + e])
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


# ----------------------------------------------------------------------------
# 4. building blocks
# ----------------------------------------------------------------------------


def rms_norm(x, w, eps):
    """Plain RMSNorm: x / sqrt(mean(x^2) + eps) * w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gated_rms_norm(y, z, w, groups, eps):
    """Mamba2 output norm, norm_before_gate=False: gate FIRST,
    h = y * silu(z); RMS-normalise h within each of `groups` contiguous
    groups of d_inner/groups channels; multiply by w."""
    h = y * F.silu(z)
    shp = h.shape
    hg = h.reshape(*shp[:-1], groups, shp[-1] // groups)
    hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + eps)
    return hg.reshape(shp) * w


def segsum(a):
    """Segment sum over the last axis: out[..., i, j] = sum_{r=j+1..i} a[..., r]
    for j <= i, -inf above the diagonal (so exp() gives the causal decay
    matrix with ones on the diagonal). Built from a masked cumsum, not from
    differences of a running cumsum."""
    Q = a.shape[-1]
    x = a[..., None].expand(*a.shape, Q)                     # [..., r, j] = a_r
    strict = torch.tril(torch.ones(Q, Q, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~strict, 0.0)                          # keep r > j
    s = torch.cumsum(x, dim=-2)                              # sum over r <= i
    incl = torch.tril(torch.ones(Q, Q, dtype=torch.bool), diagonal=0)
    return s.masked_fill(~incl, float("-inf"))


# ----------------------------------------------------------------------------
# 5. SSM cores (one sequence, all heads at once)
#    x [T, H, P] (post-conv, post-SiLU); dt [T, H] (post-softplus); A [H] (<0)
#    B, C [T, G, N]; S [H, P, N]. Head h uses group h // (H/G).
#    Returns y [T, H, P] WITHOUT the D*x skip, and the final state.
# ----------------------------------------------------------------------------


def _heads(BC, H):
    return BC.repeat_interleave(H // BC.shape[1], dim=1)      # [T, H, N]


def ssd_recurrent(x, dt, A, B, C, S):
    T, H, P = x.shape
    Bh, Ch = _heads(B, H), _heads(C, H)
    y = torch.empty_like(x)
    for t in range(T):
        dA = torch.exp(dt[t] * A)                               # [H]
        S = S * dA[:, None, None] + \
            (dt[t][:, None] * x[t])[:, :, None] * Bh[t][:, None, :]
        y[t] = (S * Ch[t][:, None, :]).sum(-1)
    return y, S


def ssd_chunked(x, dt, A, B, C, S0, chunk):
    T, H, P = x.shape
    N = B.shape[-1]
    Bh, Ch = _heads(B, H), _heads(C, H)
    xd = x * dt[..., None]                                      # x * dt
    a = dt * A                                                  # [T, H] (<= 0)
    pad = (-T) % chunk
    if pad:  # padded tokens: x*dt = 0, B = C = 0, a = 0 => state untouched
        xd = F.pad(xd, (0, 0, 0, 0, 0, pad))
        Bh = F.pad(Bh, (0, 0, 0, 0, 0, pad))
        Ch = F.pad(Ch, (0, 0, 0, 0, 0, pad))
        a = F.pad(a, (0, 0, 0, pad))
    n = (T + pad) // chunk
    xd = xd.reshape(n, chunk, H, P)
    Bh = Bh.reshape(n, chunk, H, N)
    Ch = Ch.reshape(n, chunk, H, N)
    a = a.reshape(n, chunk, H).permute(2, 0, 1)                 # [H, n, Q]
    acum = torch.cumsum(a, dim=-1)                              # [H, n, Q]
    # 1. intra-chunk (diagonal blocks): y_t = sum_{s<=t} (C_t.B_s) L[t,s] xd_s
    Lm = torch.exp(segsum(a))                                   # [H, n, Qt, Qs]
    CB = torch.einsum("clhn,cshn->chls", Ch, Bh)                # [n, H, Qt, Qs]
    M = CB * Lm.permute(1, 0, 2, 3)
    y_diag = torch.einsum("chls,cshp->clhp", M, xd)
    # 2. state contributed by each chunk alone, at the chunk end
    decay_states = torch.exp(acum[:, :, -1:] - acum)            # [H, n, Q]
    states = torch.einsum("cshn,hcs,cshp->chpn", Bh, decay_states, xd)
    # 3. inter-chunk recurrence from the carried state S0:
    #    start-of-chunk states via exp(segsum(chunk totals))
    states = torch.cat([S0[None], states], dim=0)               # [n+1, H, P, N]
    totals = F.pad(acum[:, :, -1], (1, 0))                      # [H, n+1]
    decay_chunk = torch.exp(segsum(totals))                     # [H, n+1, n+1]
    new_states = torch.einsum("hzc,chpn->zhpn", decay_chunk, states)
    starts, S_final = new_states[:-1], new_states[-1]
    # 4. off-diagonal term: state at chunk start, decayed to token t, read by C_t
    y_off = torch.einsum("clhn,chpn,hcl->clhp", Ch, starts, torch.exp(acum))
    y = (y_diag + y_off).reshape(n * chunk, H, P)[:T]
    return y, S_final


# ----------------------------------------------------------------------------
# 6. the model
# ----------------------------------------------------------------------------


class State:
    """Everything needed to resume at position `pos` (= tokens consumed).
    conv[i]: last K-1 raw (pre-conv, pre-bias) xBC rows, oldest first,
             [K-1, conv_dim] (llama.cpp keeps the transpose: ggml {K-1,
             conv_dim}, i.e. r[c*(K-1) + k]; HF keeps the last K rows)
    ssm[i]:  [H, P, N] (llama.cpp memory order {N, P, H}: s[(h*P+p)*N+n])
    k[i], v[i]: [pos, n_kv, head_dim] (NoPE: no rotation applied)"""

    def __init__(self, cfg, dtype):
        self.pos = 0
        self.conv, self.ssm, self.k, self.v = {}, {}, {}, {}
        for i, kind in enumerate(cfg.kinds):
            if kind == "M":
                self.conv[i] = torch.zeros(cfg.K - 1, cfg.conv_dim, dtype=dtype)
                self.ssm[i] = torch.zeros(cfg.H, cfg.P, cfg.N, dtype=dtype)
            elif kind == "*":
                self.k[i] = torch.zeros(0, cfg.nkv, cfg.hd, dtype=dtype)
                self.v[i] = torch.zeros(0, cfg.nkv, cfg.hd, dtype=dtype)

    def clone(self):
        s = State.__new__(State)
        s.pos = self.pos
        for name in ("conv", "ssm", "k", "v"):
            setattr(s, name, {i: t.clone() for i, t in getattr(self, name).items()})
        return s


class Model:
    def __init__(self, raw_cfg, weights, dtype=torch.float64):
        self.cfg = Cfg(raw_cfg)
        self.dtype = dtype
        self.W = {k: v.to(dtype) for k, v in
                  canonical_names(raw_cfg, weights).items()}
        self.stats = None   # set to a dict to collect dt / router margins
        # None = no clamp (llama.cpp, HF CUDA kernels). Set to time_step_min
        # (1e-3) only to mimic the HF Nemotron-H torch fallback (diagnostic).
        self.dt_clamp_min = None

    def w(self, name):
        return self.W[name]

    def b(self, name):
        return self.W.get(name)

    # ---- Mamba2 mixer ----------------------------------------------------------
    def mamba(self, i, u, st, mode, chunk):
        c, p = self.cfg, self.cfg.mixer(i)
        T = u.shape[0]
        zxbcdt = F.linear(u, self.w(p + "in_proj.weight"), self.b(p + "in_proj.bias"))
        d_mlp = (zxbcdt.shape[-1] - 2 * c.d_inner - 2 * c.G * c.N - c.H) // 2
        assert d_mlp == 0
        z, xBC, dt = torch.split(zxbcdt, [c.d_inner, c.conv_dim, c.H], dim=-1)
        # causal depthwise conv over time, carried state = last K-1 raw rows
        xin = torch.cat([st.conv[i], xBC], 0)                       # [K-1+T, C]
        wc = self.w(p + "conv1d.weight")[:, 0, :]                   # [C, K]
        xc = sum(xin[k:k + T] * wc[:, k] for k in range(c.K))       # tap K-1 = newest
        if c.conv_bias:
            xc = xc + self.w(p + "conv1d.bias")
        st.conv[i] = xin[-(c.K - 1):].clone()
        xc = F.silu(xc)
        xs, B, C = torch.split(xc, [c.d_inner, c.G * c.N, c.G * c.N], dim=-1)
        xs = xs.reshape(T, c.H, c.P)                                # channel h*P+p
        B = B.reshape(T, c.G, c.N)                                  # channel g*N+n
        C = C.reshape(T, c.G, c.N)
        dt = F.softplus(dt + self.w(p + "dt_bias"))                 # NO clamp
        if self.dt_clamp_min is not None:
            dt = dt.clamp(min=self.dt_clamp_min)
        A = -torch.exp(self.w(p + "A_log"))
        if self.stats is not None:
            self.stats["dt_min"] = min(self.stats.get("dt_min", 1e9), dt.min().item())
            self.stats["dt_max"] = max(self.stats.get("dt_max", 0.0), dt.max().item())
        if mode == "recurrent":
            y, st.ssm[i] = ssd_recurrent(xs, dt, A, B, C, st.ssm[i])
        else:
            y, st.ssm[i] = ssd_chunked(xs, dt, A, B, C, st.ssm[i], chunk or c.chunk)
        y = y + self.w(p + "D")[:, None] * xs                       # D skip
        y = gated_rms_norm(y.reshape(T, c.d_inner), z, self.w(p + "norm.weight"),
                           c.norm_groups, c.eps)
        return F.linear(y, self.w(p + "out_proj.weight"), self.b(p + "out_proj.bias"))

    # ---- attention (NoPE, GQA) ---------------------------------------------------
    def attention(self, i, a, st):
        c, p = self.cfg, self.cfg.mixer(i)
        T = a.shape[0]
        q = F.linear(a, self.w(p + "q_proj.weight"), self.b(p + "q_proj.bias"))
        k = F.linear(a, self.w(p + "k_proj.weight"), self.b(p + "k_proj.bias"))
        v = F.linear(a, self.w(p + "v_proj.weight"), self.b(p + "v_proj.bias"))
        q = q.view(T, c.nh, c.hd)
        st.k[i] = torch.cat([st.k[i], k.view(T, c.nkv, c.hd)], 0)
        st.v[i] = torch.cat([st.v[i], v.view(T, c.nkv, c.hd)], 0)
        rep = c.nh // c.nkv                          # q head h -> kv head h // rep
        K_all = st.k[i].repeat_interleave(rep, dim=1)
        V_all = st.v[i].repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, K_all) * c.scale
        past = K_all.shape[0] - T
        qpos = torch.arange(T)[:, None] + past
        kpos = torch.arange(K_all.shape[0])[None, :]
        s = s.masked_fill(kpos > qpos, float("-inf"))
        o = torch.einsum("hts,shd->thd", torch.softmax(s, -1), V_all)
        return F.linear(o.reshape(T, c.nh * c.hd), self.w(p + "o_proj.weight"),
                        self.b(p + "o_proj.bias"))

    # ---- FFNs --------------------------------------------------------------------
    def relu2_mlp(self, i, a):
        p = self.cfg.mixer(i)
        h = F.linear(a, self.w(p + "up_proj.weight"), self.b(p + "up_proj.bias"))
        return F.linear(torch.relu(h).pow(2), self.w(p + "down_proj.weight"),
                        self.b(p + "down_proj.bias"))

    def nemotron_moe(self, i, a):
        c, p = self.cfg, self.cfg.mixer(i)
        T, E, k = a.shape[0], c.moe_E, c.moe_topk
        per = E // c.moe_n_group
        s = torch.sigmoid(F.linear(a, self.w(p + "gate.weight")))     # [T, E]
        choice = s + self.w(p + "gate.e_score_correction_bias")
        gsc = choice.view(T, c.moe_n_group, per).topk(min(2, per), dim=-1).values.sum(-1)
        gidx = gsc.topk(c.moe_topk_group, dim=-1).indices             # [T, topk_group]
        keep = torch.zeros(T, c.moe_n_group, dtype=torch.bool)
        keep[torch.arange(T)[:, None], gidx] = True
        keep = keep[:, :, None].expand(T, c.moe_n_group, per).reshape(T, E)
        masked = choice.masked_fill(~keep, float("-inf"))
        topi = masked.topk(k, dim=-1).indices                           # [T, k]
        wts = s.gather(1, topi)
        if c.moe_norm:
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c.moe_scale
        if self.stats is not None:
            # the smallest gaps that decide the routing: k-th vs (k+1)-th
            # allowed expert, topk_group-th vs next group
            srt = masked.sort(dim=-1, descending=True).values
            nxt = srt[:, k] if k < srt.shape[1] else torch.full((T,), float("-inf"), dtype=srt.dtype)
            gap = (srt[:, k - 1] - nxt).min().item()
            gs = gsc.sort(dim=-1, descending=True).values
            if c.moe_topk_group < c.moe_n_group:
                gap = min(gap, (gs[:, c.moe_topk_group - 1] - gs[:, c.moe_topk_group]).min().item())
            self.stats["router_margin"] = min(self.stats.get("router_margin", 1e9), gap)
        # every expert on every token, then pick (same math as routing)
        up = torch.stack([self.w(p + f"experts.{e}.up_proj.weight") for e in range(E)])
        dn = torch.stack([self.w(p + f"experts.{e}.down_proj.weight") for e in range(E)])
        ex = torch.einsum("eti,edi->etd", torch.relu(torch.einsum("td,eid->eti", a, up)).pow(2), dn)
        ar = torch.arange(T)
        out = torch.zeros_like(a)
        for j in range(k):
            out = out + wts[:, j, None] * ex[topi[:, j], ar]
        sh = F.linear(torch.relu(F.linear(a, self.w(p + "shared_experts.up_proj.weight"))).pow(2),
                      self.w(p + "shared_experts.down_proj.weight"))
        return out + sh

    def granite_ffn(self, i, m):
        c, lp = self.cfg, self.cfg.layer(i)
        gu = F.linear(m, self.w(lp + "shared_mlp.input_linear.weight"))
        gate, up = gu.chunk(2, dim=-1)                          # gate = first half
        out = F.linear(F.silu(gate) * up, self.w(lp + "shared_mlp.output_linear.weight"))
        if c.E == 0:
            return out
        logits = F.linear(m, self.w(lp + "block_sparse_moe.router.layer.weight"))
        topv, topi = logits.topk(c.topk, dim=-1)                # [T, k]
        gates = torch.softmax(topv, dim=-1)                     # over the k selected
        if self.stats is not None and c.topk < c.E:
            srt = logits.sort(dim=-1, descending=True).values
            margin = (srt[:, c.topk - 1] - srt[:, c.topk]).min().item()
            self.stats["router_margin"] = min(self.stats.get("router_margin", 1e9), margin)
        w_in = self.w(lp + "block_sparse_moe.input_linear.weight")   # [E, 2I, D]
        w_out = self.w(lp + "block_sparse_moe.output_linear.weight")  # [E, D, I]
        # every expert on every token, then pick (same math as routing)
        gu = torch.einsum("td,eid->eti", m, w_in)
        g_, u_ = gu.chunk(2, dim=-1)
        ex = torch.einsum("eti,edi->etd", F.silu(g_) * u_, w_out)    # [E, T, D]
        ar = torch.arange(m.shape[0])
        for j in range(c.topk):
            out = out + gates[:, j, None] * ex[topi[:, j], ar]
        return out

    # ---- whole model ---------------------------------------------------------------
    def forward(self, tokens, st, mode="chunked", chunk=None):
        c = self.cfg
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        h = self.w(c.emb_name())[tokens] * c.m_emb
        for i, kind in enumerate(c.kinds):
            lp = c.layer(i)
            if c.granite:
                a = rms_norm(h, self.w(lp + "input_layernorm.weight"), c.eps)
                a = self.mamba(i, a, st, mode, chunk) if kind == "M" else \
                    self.attention(i, a, st)
                h = h + c.m_res * a
                m = rms_norm(h, self.w(lp + "post_attention_layernorm.weight"), c.eps)
                h = h + c.m_res * self.granite_ffn(i, m)
            else:
                a = rms_norm(h, self.w(lp + "norm.weight"), c.eps)
                if kind == "M":
                    a = self.mamba(i, a, st, mode, chunk)
                elif kind == "*":
                    a = self.attention(i, a, st)
                elif kind == "E":
                    a = self.nemotron_moe(i, a)
                else:
                    a = self.relu2_mlp(i, a)
                h = h + a
        h = rms_norm(h, self.w(c.final_norm_name()), c.eps)
        head = (self.w(c.emb_name()) if c.tied or "lm_head.weight" not in self.W
                else self.w("lm_head.weight"))
        st.pos += tokens.shape[0]
        return F.linear(h, head) / c.logit_div                   # [T, V]


def load_model(model_dir, dtype=torch.float64):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    return Model(raw, load_safetensors(os.path.join(model_dir, "model.safetensors")),
                 dtype)


# ----------------------------------------------------------------------------
# 7. self-test and fixture writer
# ----------------------------------------------------------------------------


def _maxdiff(a, b):
    return (a - b).abs().max().item()


def run(family, variant, out_dir, seq, split, chunk, seed):
    raw = tiny_config(family, variant)
    raw["mamba_chunk_size" if family == "granitemoehybrid" else "chunk_size"] = chunk
    weights = build_weights(raw, seed)
    os.makedirs(out_dir, exist_ok=True)
    st_path = os.path.join(out_dir, "model.safetensors")
    save_safetensors(st_path, weights, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(raw, f, indent=2, allow_nan=False)
        f.write("\n")
    # everything below uses the re-read files, not the in-memory dict
    with open(os.path.join(out_dir, "config.json")) as f:
        raw2 = json.load(f)
    loaded = load_safetensors(st_path)
    assert set(loaded) == set(weights)
    assert all(torch.equal(loaded[k], weights[k]) for k in weights)
    nbytes = os.path.getsize(st_path)
    cfg = Cfg(raw2)
    print(f"[{family}/{variant}] wrote {st_path} ({len(loaded)} tensors, "
          f"{nbytes} bytes) and config.json; reload round-trip exact")
    print(f"[{family}/{variant}] layers {''.join(cfg.kinds)}  D={cfg.D} "
          f"H={cfg.H} P={cfg.P} N={cfg.N} G={cfg.G} d_inner={cfg.d_inner} "
          f"K={cfg.K} heads={cfg.nh}/{cfg.nkv}x{cfg.hd} chunk={chunk}")

    tokens = torch.randint(0, cfg.V, (seq,),
                           generator=torch.Generator().manual_seed(seed + 1))
    results, golden = {}, {}
    for dtype in (torch.float32, torch.float64):
        dn = "fp32" if dtype == torch.float32 else "fp64"
        m = Model(raw2, loaded, dtype)
        if dtype == torch.float64:
            m.stats = {}
        s_rec, s_chk = State(cfg, dtype), State(cfg, dtype)
        full_rec = m.forward(tokens, s_rec, "recurrent")
        full_chk = m.forward(tokens, s_chk, "chunked", chunk)
        stats, m.stats = m.stats, None
        other_q = 16 if chunk != 16 else 24
        full_chk2 = m.forward(tokens, State(cfg, dtype), "chunked", other_q)
        d_state = max(_maxdiff(s_rec.ssm[i], s_chk.ssm[i]) for i in s_rec.ssm)
        # prefix + suffix (both chunked prefill), state carried
        s = State(cfg, dtype)
        pre = m.forward(tokens[:split], s, "chunked", chunk)
        snap = s.clone()
        suf = m.forward(tokens[split:], s, "chunked", chunk)
        two = torch.cat([pre, suf], 0)
        # resume from the snapshot, decode-style, one token at a time
        s2 = snap
        dec = torch.cat([m.forward(tokens[t:t + 1], s2, "recurrent")
                         for t in range(split, seq)], 0)
        # token by token from position 0 (T = 1 steps through both forms)
        s3 = State(cfg, dtype)
        tbt = torch.cat([m.forward(tokens[t:t + 1], s3,
                                   "chunked" if t % 2 else "recurrent", chunk)
                         for t in range(seq)], 0)
        ssm_carry = max(_maxdiff(s.ssm[i], s_chk.ssm[i]) for i in s.ssm)
        conv_carry = max(_maxdiff(s3.conv[i], s_chk.conv[i]) for i in s.conv)
        kv_carry = max([_maxdiff(s2.k[i], s_chk.k[i]) for i in s2.k] + [0.0])
        r = {
            "recurrent_vs_chunked": _maxdiff(full_rec, full_chk),
            "chunk_%d_vs_%d" % (chunk, other_q): _maxdiff(full_chk2, full_chk),
            "final_ssm_state_rec_vs_chk": d_state,
            "prefix+suffix_vs_full": _maxdiff(two, full_chk),
            "snapshot+decode_vs_full": _maxdiff(dec, full_chk[split:]),
            "token_by_token_vs_full": _maxdiff(tbt, full_chk),
            "carried_ssm/conv/kv_state_vs_full": max(ssm_carry, conv_carry, kv_carry),
        }
        results[dn] = r
        print(f"[{family}/{variant}] {dn}: " + "; ".join(
            f"{k} {v:.2e}" for k, v in r.items()))
        if dtype == torch.float64:
            keep = sorted({0, chunk - 1, chunk, split - 1, split, seq - 1})
            top2 = full_chk.topk(2, dim=-1).values
            am_margin = (top2[:, 0] - top2[:, 1]).min().item()
            note = ("fp64 chunked (SSD) full pass over `tokens` starting at "
                    "position 0 with zero state; rows = positions. dt not "
                    "clamped (llama.cpp / CUDA-kernel semantics). "
                    f"min softplus dt {stats['dt_min']:.3g}, max {stats['dt_max']:.3g}; "
                    f"min top1-top2 logit gap over all positions {am_margin:.3g}")
            if "router_margin" in stats and hasattr(cfg, "moe_E"):
                note += (f"; min routing gap (top-{cfg.moe_topk} expert vs next allowed, "
                         f"top-{cfg.moe_topk_group} group vs next) "
                         f"{stats['router_margin']:.3g}")
            elif "router_margin" in stats:
                note += (f"; min router top-{cfg.topk} vs next logit gap "
                         f"{stats['router_margin']:.3g}")
            golden = {
                "variant": family, "weights_dtype": "f32",
                "tokens": tokens.tolist(), "split": split, "chunk": chunk,
                "note": note,
                "positions": keep,
                "logits": {str(t): full_chk[t].tolist() for t in keep},
                "argmax": full_chk.argmax(-1).tolist(),
            }
            print(f"[{family}/{variant}] {note}")
        else:
            torch.set_printoptions(precision=5, linewidth=120)
            print(f"[{family}/{variant}] last-position logits (fp32), first 8 of "
                  f"{full_chk.shape[-1]}: {full_chk[-1, :8]}")
    with open(os.path.join(out_dir, "expected_logits.json"), "w") as f:
        json.dump(golden, f, allow_nan=False)
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="all", choices=("all",) + FAMILIES)
    ap.add_argument("--variant", default="fixture", choices=["fixture", "hidden"])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "tiny_ckpt"))
    ap.add_argument("--seq", type=int)
    ap.add_argument("--split", type=int)
    ap.add_argument("--chunk", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    dflt = ({"seq": 150, "split": 97, "chunk": 64, "seed": 0}
            if args.variant == "fixture" else
            {"seq": 200, "split": 131, "chunk": 48, "seed": 7})
    for k, v in dflt.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    torch.set_num_threads(max(1, args.threads))
    fams = FAMILIES if args.family == "all" else (args.family,)
    worst32, worst64 = 0.0, 0.0
    for fam in fams:
        r = run(fam, args.variant, os.path.join(args.out, fam), args.seq,
                args.split, args.chunk, args.seed)
        worst32 = max(worst32, *r["fp32"].values())
        worst64 = max(worst64, *r["fp64"].values())
    ok = worst64 < 1e-10 and worst32 < 1e-3
    print(f"worst fp64 difference over all checks: {worst64:.3e} (limit 1e-10); "
          f"worst fp32: {worst32:.3e} (limit 1e-3) -> {'OK' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
