"""Qwen3.5 hybrid decoder (Gated DeltaNet + gated attention) for training, batched, with
autograd; plus an MTP head, fp64 evaluation and HF-layout export/import (safetensors).

The math follows docs/QWEN35.md (the project's model specification):
- zero-centred RMSNorm y = x / rms(x) * (1 + w) for input/post-attention/final/q/k/MTP norms;
- GDN: in_proj_qkv -> depthwise causal conv1d (kernel K, no bias) -> SiLU -> split q, k, v;
  q, k L2-normalised (eps inside the sum), q scaled by 1/sqrt(dk); g = -exp(A_log) *
  softplus(a + dt_bias); beta = sigmoid(b); recurrence S = exp(g) S; u = beta (v - S^T k);
  S += k u^T; o = S^T q; gated RMSNorm (plain weight) times SiLU(z); out_proj;
- gated attention: q_proj rows per head [q_h (D) | gate_h (D)]; q_norm/k_norm before partial
  RoPE (first R = D * 0.25 dims, rotate_half pairing); scale 1/sqrt(D); causal softmax; output
  times sigmoid(gate); o_proj;
- SwiGLU MLP; tied embeddings (lm_head = embed_tokens).

The GDN core used for training is the chunked form (docs/QWEN35.md 5.1) with a batched
unit-lower triangular solve per chunk; gdr_recurrent is the per-token recurrence;
check_chunked() asserts the two agree in fp64.
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-6


def rms_norm_zc(x, w, eps=EPS):
    x32 = x
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def rms_norm_plain(x, w, eps=EPS):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


# ---------------------------------------------------------------------------------------------
# Gated delta rule cores. Shapes: q, k [B, H, T, dk]; v [B, H, T, dv]; g, beta [B, H, T].

def gdr_recurrent(q, k, v, g, beta, S0=None):
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    S = q.new_zeros(B, H, dk, dv) if S0 is None else S0
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, :, t])[..., None, None]
        kt = k[:, :, t]
        mem = torch.einsum("bhkv,bhk->bhv", S, kt)
        u = beta[:, :, t, None] * (v[:, :, t] - mem)
        S = S + kt[..., :, None] * u[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(outs, 2), S


def gdr_chunked(q, k, v, g, beta, chunk=64, S0=None):
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    C = chunk
    pad = (-T) % C
    if pad:
        q = F.pad(q, (0, 0, 0, pad))
        k = F.pad(k, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
        g = F.pad(g, (0, pad))
        beta = F.pad(beta, (0, pad))
    N = (T + pad) // C
    q = q.reshape(B, H, N, C, dk)
    k = k.reshape(B, H, N, C, dk)
    v = v.reshape(B, H, N, C, dv)
    g = g.reshape(B, H, N, C)
    beta = beta.reshape(B, H, N, C)
    gam = torch.cumsum(g, -1)                                    # [B,H,N,C]
    diff = gam[..., :, None] - gam[..., None, :]                 # [.., t, s]
    tri = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    D = torch.exp(diff.masked_fill(~tri, float("-inf")))         # mask before exp
    kk = torch.einsum("bhntd,bhnsd->bhnts", k, k)
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    A = (beta[..., None] * kk * D).masked_fill(~strict, 0.0)     # strict lower
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    Gam = torch.exp(gam)
    rhs = torch.cat([beta[..., None] * v, (beta * Gam)[..., None] * k], -1)
    X = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    Xv, Xk = X[..., :dv], X[..., dv:]
    qk = torch.einsum("bhntd,bhnsd->bhnts", q, k) * D            # incl. diagonal
    qG = Gam[..., None] * q
    kdec = torch.exp(gam[..., -1:] - gam)[..., None] * k         # e^{gamma_C - gamma_s} k_s
    gC = torch.exp(gam[..., -1])                                 # [B,H,N]
    S = q.new_zeros(B, H, dk, dv) if S0 is None else S0
    outs = []
    # unbind (not indexing) per chunk: its backward stacks instead of filling zeros N times
    it = zip(Xv.unbind(2), Xk.unbind(2), qG.unbind(2), qk.unbind(2), kdec.unbind(2), gC.unbind(2))
    for xv, xk, qg, qkn, kd, gc in it:
        U = xv - xk @ S
        outs.append(qg @ S + qkn @ U)
        S = gc[..., None, None] * S + kd.transpose(-1, -2) @ U
    o = torch.stack(outs, 2).reshape(B, H, N * C, dv)[:, :, :T]
    return o, S


def check_chunked():
    """fp64: chunked == per-token recurrence (outputs and final state)."""
    g0 = torch.Generator().manual_seed(0)
    B, H, T, dk, dv = 2, 3, 150, 16, 8
    q = l2norm(torch.randn(B, H, T, dk, generator=g0, dtype=torch.float64)) / math.sqrt(dk)
    k = l2norm(torch.randn(B, H, T, dk, generator=g0, dtype=torch.float64))
    v = torch.randn(B, H, T, dv, generator=g0, dtype=torch.float64)
    g = -torch.rand(B, H, T, generator=g0, dtype=torch.float64) * 3.0
    beta = torch.rand(B, H, T, generator=g0, dtype=torch.float64)
    S0 = torch.randn(B, H, dk, dv, generator=g0, dtype=torch.float64)
    o1, s1 = gdr_recurrent(q, k, v, g, beta, S0)
    o2, s2 = gdr_chunked(q, k, v, g, beta, 64, S0)
    eo, es = (o1 - o2).abs().max().item(), (s1 - s2).abs().max().item()
    assert eo < 1e-10 and es < 1e-10, (eo, es)
    return eo, es


# ---------------------------------------------------------------------------------------------
# Model

class Cfg:
    def __init__(self, **kw):
        self.vocab_size = kw["vocab_size"]
        self.hidden = kw["hidden"]
        self.layers = kw["layers"]
        self.nh, self.nkv, self.D = kw["nh"], kw["nkv"], kw["D"]
        self.Hk, self.Hv, self.dk, self.dv = kw["Hk"], kw["Hv"], kw["dk"], kw["dv"]
        self.K = kw.get("K", 4)
        self.inter = kw["inter"]
        self.theta = kw.get("theta", 1e7)
        self.prf = kw.get("prf", 0.25)
        self.mtp = kw.get("mtp", 0)
        self.layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                            for i in range(self.layers)]

    def as_dict(self):
        return dict(vocab_size=self.vocab_size, hidden=self.hidden, layers=self.layers, nh=self.nh,
                    nkv=self.nkv, D=self.D, Hk=self.Hk, Hv=self.Hv, dk=self.dk, dv=self.dv,
                    K=self.K, inter=self.inter, theta=self.theta, prf=self.prf, mtp=self.mtp)


def rope_cos_sin(positions, R, theta, dtype):
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin, R):
    # x [B, h, T, D]; rotate the first R dims with rotate_half pairing (i, i + R/2)
    xr, xp = x[..., :R], x[..., R:]
    h = R // 2
    rot = torch.cat([-xr[..., h:], xr[..., :h]], -1)
    return torch.cat([xr * cos + rot * sin, xp], -1)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.inter, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.inter, bias=False)
        self.down_proj = nn.Linear(c.inter, c.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden, c.nh * c.D * 2, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.nkv * c.D, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.nkv * c.D, bias=False)
        self.o_proj = nn.Linear(c.nh * c.D, c.hidden, bias=False)
        self.q_norm = nn.Parameter(torch.zeros(c.D))
        self.k_norm = nn.Parameter(torch.zeros(c.D))

    def forward(self, x, positions):
        c = self.c
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, c.nh, 2 * c.D)
        q, gate = qg[..., :c.D], qg[..., c.D:]
        k = self.k_proj(x).view(B, T, c.nkv, c.D)
        v = self.v_proj(x).view(B, T, c.nkv, c.D)
        q = rms_norm_zc(q, self.q_norm).transpose(1, 2)
        k = rms_norm_zc(k, self.k_norm).transpose(1, 2)
        v = v.transpose(1, 2)
        R = int(c.D * c.prf)
        cos, sin = rope_cos_sin(positions, R, c.theta, x.dtype)
        q = apply_rope(q, cos, sin, R)
        k = apply_rope(k, cos, sin, R)
        rep = c.nh // c.nkv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(c.D)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2)                                # [B,T,nh,D]
        o = o * torch.sigmoid(gate)
        return self.o_proj(o.reshape(B, T, c.nh * c.D))


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        kd, vd = c.Hk * c.dk, c.Hv * c.dv
        self.conv_dim = 2 * kd + vd
        self.in_proj_qkv = nn.Linear(c.hidden, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(c.hidden, vd, bias=False)
        self.in_proj_b = nn.Linear(c.hidden, c.Hv, bias=False)
        self.in_proj_a = nn.Linear(c.hidden, c.Hv, bias=False)
        self.conv1d = nn.Parameter(torch.empty(self.conv_dim, 1, c.K))
        nn.init.uniform_(self.conv1d, -1.0 / math.sqrt(c.K), 1.0 / math.sqrt(c.K))
        self.A_log = nn.Parameter(torch.log(torch.empty(c.Hv).uniform_(1.0, 16.0)))
        dt = torch.exp(torch.empty(c.Hv).uniform_(math.log(1e-3), math.log(1e-1)))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.norm = nn.Parameter(torch.ones(c.dv))
        self.out_proj = nn.Linear(vd, c.hidden, bias=False)

    def forward(self, x, chunked=True):
        c = self.c
        B, T, _ = x.shape
        kd = c.Hk * c.dk
        raw = F.pad(self.in_proj_qkv(x), (0, 0, c.K - 1, 0))       # [B, K-1+T, C]
        w = self.conv1d[:, 0, :]                                    # [C, K]
        # depthwise causal conv as K shifted products (much faster than grouped conv1d on CPU)
        mixed = sum(raw[:, j:j + T] * w[:, j] for j in range(c.K))
        mixed = F.silu(mixed)                                       # [B, T, C]
        q = mixed[..., :kd].view(B, T, c.Hk, c.dk)
        k = mixed[..., kd:2 * kd].view(B, T, c.Hk, c.dk)
        v = mixed[..., 2 * kd:].view(B, T, c.Hv, c.dv)
        q = l2norm(q) / math.sqrt(c.dk)
        k = l2norm(k)
        r = c.Hv // c.Hk
        if r > 1:
            q = q.repeat_interleave(r, 2)
            k = k.repeat_interleave(r, 2)
        beta = torch.sigmoid(self.in_proj_b(x))                     # [B,T,Hv]
        g = -torch.exp(self.A_log) * F.softplus(self.in_proj_a(x) + self.dt_bias)
        tr = lambda t: t.transpose(1, 2)
        if chunked:
            o, _ = gdr_chunked(tr(q), tr(k), tr(v), tr(g), tr(beta))
        else:
            o, _ = gdr_recurrent(tr(q), tr(k), tr(v), tr(g), tr(beta))
        o = o.transpose(1, 2)                                       # [B,T,Hv,dv]
        z = self.in_proj_z(x).view(B, T, c.Hv, c.dv)
        o = rms_norm_plain(o, self.norm) * F.silu(z)
        return self.out_proj(o.reshape(B, T, c.Hv * c.dv))


class Layer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        self.input_layernorm = nn.Parameter(torch.zeros(c.hidden))
        self.post_attention_layernorm = nn.Parameter(torch.zeros(c.hidden))
        if kind == "full_attention":
            self.self_attn = Attention(c)
        else:
            self.linear_attn = GatedDeltaNet(c)
        self.mlp = MLP(c)

    def forward(self, x, positions, chunked=True):
        h = rms_norm_zc(x, self.input_layernorm)
        if self.kind == "full_attention":
            x = x + self.self_attn(h, positions)
        else:
            x = x + self.linear_attn(h, chunked)
        return x + self.mlp(rms_norm_zc(x, self.post_attention_layernorm))


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.pre_fc_norm_embedding = nn.Parameter(torch.zeros(c.hidden))
        self.pre_fc_norm_hidden = nn.Parameter(torch.zeros(c.hidden))
        self.fc = nn.Linear(2 * c.hidden, c.hidden, bias=False)
        self.layer = Layer(c, "full_attention")
        self.norm = nn.Parameter(torch.zeros(c.hidden))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden)
        self.layers = nn.ModuleList([Layer(c, t) for t in c.layer_types])
        self.norm = nn.Parameter(torch.zeros(c.hidden))
        self.mtp = MTP(c) if c.mtp else None
        self._init()

    def _init(self):
        std = 0.02
        nn.init.normal_(self.embed_tokens.weight, std=std)
        n_res = 2 * (self.c.layers + (1 if self.c.mtp else 0))
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                s = std / math.sqrt(n_res) if name.endswith(("o_proj", "out_proj", "down_proj")) else std
                nn.init.normal_(m.weight, std=s)

    def hidden(self, tokens, chunked=True):
        """Final-normed hidden states h [B, T, H] (what lm_head sees)."""
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        x = self.embed_tokens(tokens)
        for l in self.layers:
            x = l(x, pos, chunked)
        return rms_norm_zc(x, self.norm)

    def logits(self, h):
        return h @ self.embed_tokens.weight.t()

    def mtp_hidden(self, h, tokens):
        """MTP at positions i = 0..T-2: input h_i (final-normed) and embed(t_{i+1}); attention
        runs causally over the MTP sequence with RoPE position i+1 (the position of the embedded
        token). Returns the MTP's final-normed hidden [B, T-1, H]; its logits predict t_{i+2}."""
        m = self.mtp
        T = tokens.shape[1]
        e = rms_norm_zc(self.embed_tokens(tokens[:, 1:]), m.pre_fc_norm_embedding)
        hh = rms_norm_zc(h[:, :-1], m.pre_fc_norm_hidden)
        x = m.fc(torch.cat([e, hh], -1))
        pos = torch.arange(1, T, device=tokens.device)
        x = m.layer(x, pos)
        return rms_norm_zc(x, m.norm)


# ---------------------------------------------------------------------------------------------
# HF layout: names, export, import

def hf_state(model):
    """{HF tensor name: tensor} in the qwen3_5 multimodal layout (model.language_model.*)."""
    P = "model.language_model."
    out = {P + "embed_tokens.weight": model.embed_tokens.weight, P + "norm.weight": model.norm}

    def layer(prefix, l):
        d = {prefix + "input_layernorm.weight": l.input_layernorm,
             prefix + "post_attention_layernorm.weight": l.post_attention_layernorm}
        if l.kind == "full_attention":
            a = l.self_attn
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                d[prefix + "self_attn.%s.weight" % n] = getattr(a, n).weight
            d[prefix + "self_attn.q_norm.weight"] = a.q_norm
            d[prefix + "self_attn.k_norm.weight"] = a.k_norm
        else:
            a = l.linear_attn
            for n in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"):
                d[prefix + "linear_attn.%s.weight" % n] = getattr(a, n).weight
            d[prefix + "linear_attn.conv1d.weight"] = a.conv1d
            d[prefix + "linear_attn.A_log"] = a.A_log
            d[prefix + "linear_attn.dt_bias"] = a.dt_bias
            d[prefix + "linear_attn.norm.weight"] = a.norm
        for n in ("gate_proj", "up_proj", "down_proj"):
            d[prefix + "mlp.%s.weight" % n] = getattr(l.mlp, n).weight
        return d

    for i, l in enumerate(model.layers):
        out.update(layer(P + "layers.%d." % i, l))
    if model.mtp is not None:
        m = model.mtp
        out["mtp.fc.weight"] = m.fc.weight
        out["mtp.pre_fc_norm_embedding.weight"] = m.pre_fc_norm_embedding
        out["mtp.pre_fc_norm_hidden.weight"] = m.pre_fc_norm_hidden
        out["mtp.norm.weight"] = m.norm
        out.update(layer("mtp.layers.0.", m.layer))
    return out


def to_bf16_bits(t):
    """fp32 -> bf16 bit patterns (round to nearest even), as uint16 numpy array."""
    import numpy as np
    a = t.detach().to(torch.float32).contiguous().numpy().view(np.uint32).astype(np.uint64)
    rounded = (a + 0x7FFF + ((a >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_round(t):
    import numpy as np
    bits = to_bf16_bits(t).astype(np.uint32) << 16
    return torch.from_numpy(bits.view(np.float32).copy()).view(t.shape)


def save_safetensors(path, tensors, f32_names=()):
    """tensors: {name: tensor}; BF16 except names in f32_names (F32). Sorted by name; data
    8-aligned."""
    import numpy as np
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        if name in f32_names:
            b, dt = t.numpy().astype("<f4").tobytes(), "F32"
        else:
            b, dt = to_bf16_bits(t).astype("<u2").tobytes(), "BF16"
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((-len(hj)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    import numpy as np
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a:base + b]
        if info["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        elif info["dtype"] == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(info["dtype"])
        out[name] = torch.from_numpy(arr.copy()).view(info["shape"])
    return out


def load_into(model, tensors):
    """Copies HF-named tensors into the model (shapes must match)."""
    st = hf_state(model)
    missing = set(st) - set(tensors)
    extra = set(tensors) - set(st)
    assert not missing and not extra, (missing, extra)
    with torch.no_grad():
        for n, p in st.items():
            p.copy_(tensors[n].to(p.dtype).view(p.shape))


def hf_config(c, eos_id, eot_id):
    text = {
        "model_type": "qwen3_5_text",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden, "num_hidden_layers": c.layers,
        "layer_types": c.layer_types, "full_attention_interval": 4,
        "num_attention_heads": c.nh, "num_key_value_heads": c.nkv, "head_dim": c.D,
        "linear_num_key_heads": c.Hk, "linear_num_value_heads": c.Hv,
        "linear_key_head_dim": c.dk, "linear_value_head_dim": c.dv,
        "linear_conv_kernel_dim": c.K, "hidden_act": "silu", "rms_norm_eps": EPS,
        "attention_bias": False, "attn_output_gate": True, "max_position_embeddings": 262144,
        "intermediate_size": c.inter, "tie_word_embeddings": True, "mamba_ssm_dtype": "float32",
        "eos_token_id": eos_id, "mtp_num_hidden_layers": c.mtp, "torch_dtype": "bfloat16",
        "rope_parameters": {"rope_type": "default", "rope_theta": c.theta,
                            "partial_rotary_factor": c.prf, "mrope_section": [11, 11, 10],
                            "mrope_interleaved": True},
        "partial_rotary_factor": c.prf,
    }
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text, "tie_word_embeddings": True}
