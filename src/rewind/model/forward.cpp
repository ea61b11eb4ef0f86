// The forward pass of every family (docs/QWEN35.md section 3, docs/MAMBA2.md), CPU, fp32
// activations. A layer is a token mixer (Gated DeltaNet, Mamba2, attention, or none) and an FFN
// (SwiGLU, squared ReLU, routed MoE, or none), each a unit below; the configuration says which
// (ModelConfig::layer_kinds, ffn_kinds). Row-wise ops run on the whole ragged [T, H] batch;
// conv, recurrence and attention run per sequence on its rows with its own state.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "rewind/base/thread_pool.h"
#include "rewind/kernels/ops.h"
#include "rewind/model/gguf_model.h"
#include "rewind/model/model.h"

namespace rw {

namespace {

struct LinearW {
  PackedMatrix in_proj, out_proj;
  std::vector<float> conv;  // [K, conv_dim] tap-major
  std::vector<float> A, dt_bias, gnorm;
};
struct Mamba2W {
  PackedMatrix in_proj, out_proj;  // [z | x, B, C | dt] rows; [H, d_inner]
  std::vector<float> conv;         // [K, conv_dim] tap-major
  std::vector<float> conv_bias, A, dt_bias, D, gnorm;
};
struct AttnW {
  PackedMatrix qkv, o_proj;
  PackedMatrix kv;  // MTP layer only: the k and v rows of qkv, for forward()'s K/V-only pass
  std::vector<float> q_norm, k_norm;
};
struct ExpertW {
  PackedMatrix gate_up, down;  // squared ReLU: gate_up holds the up rows only
};
struct LayerW {
  LayerKind kind;
  FfnKind ffn = FfnKind::SwiGLU;
  int64_t rec_index = -1;                 // index among recurrent layers
  int64_t attn_index = -1;                // index among attention layers
  std::vector<float> in_norm, post_norm;  // the mixer's and the FFN's pre-norms
  LinearW lin;
  Mamba2W m2;
  AttnW attn;
  bool moe = false;
  ExpertW dense;  // dense FFN, or the shared expert of a MoE layer
  PackedMatrix router, shared_gate;
  std::vector<float> router_bias;  // sigmoid router: added to the scores for the choice only
  std::vector<ExpertW> experts;
};

std::vector<float> vec(const WeightSource& w) {
  return w.to_f32();
}

// Rows [r0, rows) of `w`: views into the same blocks (a block may be entered part way).
WeightSource rows_from(const WeightSource& w, int64_t r0) {
  WeightSource out;
  out.cols = w.cols;
  out.file_dtype = w.file_dtype;
  out.col_perm = w.col_perm;
  for (const RowBlock& b : w.blocks) {
    if (r0 >= b.rows) {
      r0 -= b.rows;
      continue;
    }
    RowBlock part = b;
    part.data = static_cast<const std::byte*>(b.data) +
                static_cast<size_t>(r0) * dtype_row_bytes(b.dtype, w.cols);
    part.rows = b.rows - r0;
    r0 = 0;
    out.blocks.push_back(std::move(part));
  }
  return out;
}

// Nemotron-H MoE routing (HF NemotronHMoE, docs/MAMBA2.md 3.1) of rows [tb, te) of the router
// logits rl [T, E]: scores s = sigmoid(logit), choice = s + bias; the moe_topk_group groups with
// the largest sum of their top-2 choices (top-1 for groups of one) stay; the top-k experts of
// those by choice, ties to the lower id (a stable sort's order), each weighted by its unbiased
// score, normalised over the k when norm_topk_prob (HF's + 1e-20), times moe_routed_scale.
// sel / wsel: k entries per row, in rank order.
void route_sigmoid_grouped(const ModelConfig& c, const float* bias, const float* rl, int64_t tb,
                           int64_t te, int32_t* sel, float* wsel) {
  const int64_t E = c.n_expert, k = c.n_expert_used, G = c.moe_n_group, per = E / G,
                kg = c.moe_topk_group;
  const float scale = static_cast<float>(c.moe_routed_scale);
  std::vector<float> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E)),
      gscore(static_cast<size_t>(G));
  std::vector<int32_t> gidx(static_cast<size_t>(G)), idx;
  idx.reserve(static_cast<size_t>(E));
  auto before = [](const std::vector<float>& v) {
    return [&v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  };
  for (int64_t t = tb; t < te; ++t) {
    const float* l = rl + t * E;
    for (int64_t e = 0; e < E; ++e) {
      s[e] = sigmoid(l[e]);
      choice[e] = s[e] + bias[e];
    }
    idx.clear();
    if (kg < G) {
      for (int64_t g = 0; g < G; ++g) {
        float top1 = -INFINITY, top2 = -INFINITY;
        for (int64_t e = g * per; e < (g + 1) * per; ++e) {
          const float v = choice[e];
          if (v > top1) {
            top2 = top1;
            top1 = v;
          } else if (v > top2) {
            top2 = v;
          }
        }
        gscore[g] = per >= 2 ? top1 + top2 : top1;
      }
      std::iota(gidx.begin(), gidx.end(), 0);
      std::partial_sort(gidx.begin(), gidx.begin() + kg, gidx.end(), before(gscore));
      std::sort(gidx.begin(), gidx.begin() + kg);
      for (int64_t j = 0; j < kg; ++j)
        for (int64_t e = gidx[j] * per; e < (gidx[j] + 1) * per; ++e)
          idx.push_back(static_cast<int32_t>(e));
    } else {
      for (int64_t e = 0; e < E; ++e) idx.push_back(static_cast<int32_t>(e));
    }
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before(choice));
    float wsum = 0.0f;
    for (int64_t j = 0; j < k; ++j) wsum += s[idx[j]];
    const float denom = wsum + 1e-20f;
    for (int64_t j = 0; j < k; ++j) {
      sel[t * k + j] = idx[j];
      wsel[t * k + j] = (c.norm_topk_prob ? s[idx[j]] / denom : s[idx[j]]) * scale;
    }
  }
}

}  // namespace

struct Model::Impl {
  std::vector<LayerW> layers;
  PackedMatrix lm_head;
  std::vector<float> final_norm;
  std::vector<float> inv_freq;
  size_t packed_bytes = 0;
  size_t quantised_bytes = 0;  // of packed_bytes, in Q8_0 / Q4_K / Q5_K / Q6_K stores
  KernelOptions kopt;          // how the kernels run (LoadOptions::kernels)
  KvTypes kv_types;            // how states store K and V (LoadOptions::kv_types)
  size_t mapped_bytes = 0;     // the checkpoint's mapped tensor bytes (read at load, embeddings)

  // MTP head (LoadOptions::mtp and a checkpoint with one): its decoder layer is attention
  // layer n_attention_layers of the state (the lagging one, StateShape::lagged_attn_layers).
  bool mtp = false;
  LayerW mtp_layer;
  PackedMatrix mtp_fc;  // [H, 2H]
  std::vector<float> mtp_enorm, mtp_hnorm, mtp_norm;

  // Scratch, reused across calls ([rows, width] f32).
  AlignedBuffer<float> x, xn, big, big2, out, tmp;
  // gu: a dense FFN's gate|up rows; MoE: egu the experts' gate|up rows, eo their outputs
  // (each expert's rows in its own stretch), router logits, shared-expert gate logits.
  AlignedBuffer<float> gu, egu, eo, router, shared_gate;
  AlignedBuffer<float> fh, mx, mcat, mh;  // final hidden, MTP rows, MTP fc input, MTP chain

  // One sequence's rows of a layer call: rows [off, off + n) of the batch at positions
  // pos0 .. pos0 + n - 1 of `st`; `cap` is its first capture row (null: no capture).
  struct Seg {
    SequenceState* st;
    int64_t off, n, pos0;
    float* cap;
  };
  // One pre-norm residual decoder layer on the T rows of x (in place). Attention layers write
  // K/V at each row's position and attend over positions [0, pos]; kv_only stops after the
  // K/V writes (x is then left unchanged). RF: capture row stride.
  void layer(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs, int64_t T,
             float* x, int64_t RF, ThreadPool* pool, bool kv_only);
  // The rows of rmsnorm(x) with L.in_norm, made inside a mixer's first matmul, which alone
  // reads them (xn holds them only for weights without the int8 dot).
  RowFill in_norm_rows(const ModelConfig& c, const LayerW& L, const float* x) const;
  // The token mixers: each reads the T rows of x, normalises them with L.in_norm, and writes
  // its output rows to `out` (the residual is added by layer(), which reserves xn and out).
  void gated_delta_net(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs,
                       int64_t T, const float* x, int64_t RF, ThreadPool* pool);
  void attention(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs, int64_t T,
                 const float* x, int64_t RF, ThreadPool* pool, bool kv_only);
  void mamba2(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs, int64_t T,
              const float* x, int64_t RF, ThreadPool* pool);
  // MTP entry inputs: out[i] = mtp.fc . [enorm(embed(tok[i])) ; hnorm(hid[i])], i < M.
  void mtp_inputs(const ModelConfig& c, const WeightSource& emb, const int32_t* tok,
                  const float* const* hid, int64_t M, float* out, ThreadPool* pool);
};

namespace {
// f over [0, n) on the pool. Prefill-sized work (guided) goes in chunks of at least min_chunk
// items to whichever thread is free, so a thread slowed by other work takes fewer; a decode
// step's passes keep the static split (their items take microseconds). `work`: the pass's
// cost in float operations, below which the pool runs it on this thread (the pool's
// min_parallel_work). Every item's result is the same whichever thread runs it.
void par_items(ThreadPool* pool, int64_t n, int64_t min_chunk, bool guided, int64_t work,
               const std::function<void(int64_t, int64_t)>& f) {
  auto range = [&](int, int64_t b, int64_t e) { f(b, e); };
  if (!pool)
    f(0, n);
  else if (guided)
    pool->parallel_guided(n, 1, min_chunk, range, work);
  else
    pool->parallel_for(n, 1, range, work);
}
// Work over more tokens than a decode step's (or a speculative round's) is handed out.
constexpr int64_t kGuidedTokens = 16;
// Rows (tokens) of cheap per-row work of about row_work float operations each: chunks of at
// least 4 rows.
void par_rows(ThreadPool* pool, int64_t n, int64_t row_work,
              const std::function<void(int64_t, int64_t)>& f) {
  par_items(pool, n, 4, n > kGuidedTokens, n * row_work, f);
}
}  // namespace

Model::Model() = default;
Model::~Model() = default;

StateShape Model::state_shape() const {
  StateShape s;
  s.n_attn_layers = cfg_.n_attention_layers();
  s.kv_dim = cfg_.n_head_kv * cfg_.head_dim;
  s.kv_head_dim = cfg_.head_dim;
  s.kv_types = impl_->kv_types;
  s.n_rec_layers = cfg_.n_recurrent_layers();
  s.conv_rows = cfg_.conv_kernel - 1;
  s.conv_dim = cfg_.conv_dim();
  s.ssm_layer_floats = cfg_.ssm_floats();
  if (impl_->mtp) {
    s.n_attn_layers += 1;
    s.lagged_attn_layers = 1;
    s.carry_floats = cfg_.hidden_size;
  }
  return s;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const LoadOptions& opt) {
  std::unique_ptr<Model> m(new Model());
  if (std::filesystem::is_regular_file(dir)) {  // a GGUF file
    REWIND_TRY(GgufFile g, GgufFile::open(dir));
    m->gguf_ = std::make_unique<GgufFile>(std::move(g));
    REWIND_TRY(m->cfg_, config_from_gguf(*m->gguf_));
    REWIND_TRY(WeightSet ws, WeightSet::from_gguf(*m->gguf_, m->cfg_));
    m->ws_ = std::make_unique<WeightSet>(std::move(ws));
  } else {
    REWIND_TRY(m->cfg_, load_model_config(dir + "/config.json"));
    REWIND_TRY(TensorSet ts, TensorSet::open_dir(dir));
    m->tensors_ = std::make_unique<TensorSet>(std::move(ts));
    REWIND_TRY(WeightSet ws, WeightSet::from_hf(*m->tensors_, m->cfg_));
    m->ws_ = std::make_unique<WeightSet>(std::move(ws));
  }
  m->impl_ = std::make_unique<Impl>();
  {
    std::error_code ec;
    m->impl_->mapped_bytes = m->tensors_ ? m->tensors_->total_bytes()
                                         : static_cast<size_t>(std::filesystem::file_size(dir, ec));
  }
  const ModelConfig& c = m->cfg_;
  Impl& I = *m->impl_;
  I.kopt = opt.kernels;
  if (!kv_type_supported(opt.kv_types.k) || !kv_type_supported(opt.kv_types.v))
    return make_error("KV cache types must be f32, bf16, f16 or q8_0");
  I.kv_types = opt.kv_types;
  const WeightSet& W = *m->ws_;

  // Bytes to pack, for progress.
  std::vector<std::string> mats;
  // A layer's FFN matrices (prefix p): the router, shared expert and experts, or the dense MLP.
  auto push_ffn = [&](const std::string& p, FfnKind k) {
    if (k == FfnKind::None) return;
    if (k == FfnKind::Moe) {
      const std::string up = c.moe_relu2 ? "up" : "gate_up";
      for (const std::string& n : {std::string("router"), "sh." + up, std::string("sh.down")})
        mats.push_back(p + n);
      if (c.shared_expert_gate) mats.push_back(p + "sh.gate");
      for (int64_t e = 0; e < c.n_expert; ++e) {
        mats.push_back(p + "e" + std::to_string(e) + "." + up);
        mats.push_back(p + "e" + std::to_string(e) + ".down");
      }
    } else {
      mats.push_back(p + (k == FfnKind::ReluSq ? "up" : "gate_up"));
      mats.push_back(p + "down");
    }
  };
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    if (c.layer_kinds[il] == LayerKind::GatedDeltaNet || c.layer_kinds[il] == LayerKind::Mamba2) {
      mats.push_back(p + "in_proj");
      mats.push_back(p + "out_proj");
    } else if (c.layer_kinds[il] == LayerKind::Attention) {
      mats.push_back(p + "qkv");
      mats.push_back(p + "o_proj");
    }
    push_ffn(p, c.ffn_kinds[il]);
  }
  mats.push_back("lm_head");
  const bool mtp = opt.mtp && W.has_mtp();
  // The carry lives in the recurrent buffer and reaches a resumed state only through a
  // snapshot; the engine and the prefix cache take snapshots only for models with recurrent
  // layers, so an attention-only model could not resume with it.
  if (mtp && c.n_recurrent_layers() == 0)
    return make_error("MTP drafting needs a model with recurrent layers (" + dir +
                      " is attention-only)");
  if (mtp) {  // the MTP head: fc and its full-attention layer l{n_layer}
    const std::string p = layer_prefix(c.n_layer);
    for (const char* n : {"qkv", "o_proj"}) mats.push_back(p + n);
    push_ffn(p, c.mtp_layer_is_moe() ? FfnKind::Moe : FfnKind::SwiGLU);
    mats.push_back("mtp.fc");
  }
  size_t total = 0, done = 0;
  auto src_bytes = [&](const WeightSource& s) {
    size_t b = 0;
    for (auto& blk : s.blocks)
      b += static_cast<size_t>(blk.rows) * dtype_row_bytes(blk.dtype, s.cols);
    return b;
  };
  for (auto& n : mats) total += src_bytes(W.get(n));

  auto pack = [&](const std::string& name) {
    const WeightSource& s = W.get(name);
    PackedMatrix pm =
        opt.store == WeightStore::Auto
            ? s.pack_default(opt.pool)
            : s.pack(opt.store == WeightStore::BF16 ? DType::BF16 : DType::F32, opt.pool);
    pm.set_kernel_options(I.kopt);
    I.packed_bytes += pm.bytes();
    if (pm.parts().empty() && pm.quantised()) I.quantised_bytes += pm.bytes();
    for (auto& part : pm.parts())  // a stack: its parts, each in its own store
      if (part.quantised()) I.quantised_bytes += part.bytes();
    done += src_bytes(s);
    if (opt.progress) opt.progress(done, total);
    return pm;
  };

  // The FFN of a layer (main or MTP): dense SwiGLU or squared ReLU, or router + experts + shared
  // expert.
  auto pack_ffn = [&](LayerW& L, const std::string& p, FfnKind k) {
    L.ffn = k;
    L.moe = k == FfnKind::Moe;
    if (k == FfnKind::None) return;
    if (L.moe) {
      // Squared-ReLU experts keep their up rows where SwiGLU keeps gate ; up.
      const std::string up = c.moe_relu2 ? ".up" : ".gate_up";
      L.router = pack(p + "router");
      if (c.moe_sigmoid_router) L.router_bias = vec(W.get(p + "router_bias"));
      if (c.shared_expert_gate) L.shared_gate = pack(p + "sh.gate");
      L.dense.gate_up = pack(p + "sh" + up);
      L.dense.down = pack(p + "sh.down");
      L.experts.resize(static_cast<size_t>(c.n_expert));
      for (int64_t e = 0; e < c.n_expert; ++e) {
        L.experts[e].gate_up = pack(p + "e" + std::to_string(e) + up);
        L.experts[e].down = pack(p + "e" + std::to_string(e) + ".down");
      }
    } else {
      L.dense.gate_up = pack(p + (k == FfnKind::ReluSq ? "up" : "gate_up"));
      L.dense.down = pack(p + "down");
    }
  };
  // Tap-major [K, conv_dim] for the conv kernel.
  auto conv_taps = [&](const std::string& name) {
    const std::vector<float> cw = vec(W.get(name));
    const int64_t CD = c.conv_dim(), K = c.conv_kernel;
    std::vector<float> taps(cw.size());
    for (int64_t ch = 0; ch < CD; ++ch)
      for (int64_t j = 0; j < K; ++j) taps[j * CD + ch] = cw[ch * K + j];
    return taps;
  };
  int64_t n_rec = 0, n_attn = 0;
  I.layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    LayerW& L = I.layers[il];
    const std::string p = layer_prefix(il);
    L.kind = c.layer_kinds[il];
    if (L.kind != LayerKind::None) L.in_norm = vec(W.get(p + "in_norm"));
    if (c.ffn_kinds[il] != FfnKind::None) L.post_norm = vec(W.get(p + "post_norm"));
    if (L.kind == LayerKind::GatedDeltaNet) {
      L.rec_index = n_rec++;
      L.lin.in_proj = pack(p + "in_proj");
      L.lin.out_proj = pack(p + "out_proj");
      L.lin.conv = conv_taps(p + "conv");
      L.lin.A = vec(W.get(p + "A"));
      L.lin.dt_bias = vec(W.get(p + "dt_bias"));
      L.lin.gnorm = vec(W.get(p + "gnorm"));
    } else if (L.kind == LayerKind::Mamba2) {
      L.rec_index = n_rec++;
      L.m2.in_proj = pack(p + "in_proj");
      L.m2.out_proj = pack(p + "out_proj");
      L.m2.conv = conv_taps(p + "conv");
      L.m2.conv_bias = vec(W.get(p + "conv_bias"));
      L.m2.A = vec(W.get(p + "A"));
      L.m2.dt_bias = vec(W.get(p + "dt_bias"));
      L.m2.D = vec(W.get(p + "D"));
      L.m2.gnorm = vec(W.get(p + "gnorm"));
    } else if (L.kind == LayerKind::Attention) {
      L.attn_index = n_attn++;
      L.attn.qkv = pack(p + "qkv");
      L.attn.o_proj = pack(p + "o_proj");
      if (c.attn_qk_norm) {
        L.attn.q_norm = vec(W.get(p + "q_norm"));
        L.attn.k_norm = vec(W.get(p + "k_norm"));
      }
    }
    pack_ffn(L, p, c.ffn_kinds[il]);
  }
  I.lm_head = pack("lm_head");
  if (mtp) {
    I.mtp = true;
    LayerW& L = I.mtp_layer;
    const std::string p = layer_prefix(c.n_layer);
    L.kind = LayerKind::Attention;
    L.attn_index = n_attn;  // the lagging attention layer after the main ones (StateShape)
    L.in_norm = vec(W.get(p + "in_norm"));
    L.post_norm = vec(W.get(p + "post_norm"));
    L.attn.qkv = pack(p + "qkv");
    {
      // The k and v rows alone: forward() needs only the head's K/V, a fraction of qkv. Packed
      // as qkv is (a GGUF's q, k and v may have different types, e.g. Q4_K_M's Q6_K attn_v).
      const WeightSource kv = rows_from(W.get(p + "qkv"), c.n_head * 2 * c.head_dim);
      L.attn.kv =
          opt.store == WeightStore::Auto
              ? kv.pack_default(opt.pool)
              : kv.pack(opt.store == WeightStore::BF16 ? DType::BF16 : DType::F32, opt.pool);
      L.attn.kv.set_kernel_options(I.kopt);
      I.packed_bytes += L.attn.kv.bytes();
    }
    L.attn.o_proj = pack(p + "o_proj");
    L.attn.q_norm = vec(W.get(p + "q_norm"));
    L.attn.k_norm = vec(W.get(p + "k_norm"));
    pack_ffn(L, p, c.mtp_layer_is_moe() ? FfnKind::Moe : FfnKind::SwiGLU);
    I.mtp_fc = pack("mtp.fc");
    I.mtp_enorm = vec(W.get("mtp.enorm"));
    I.mtp_hnorm = vec(W.get("mtp.hnorm"));
    I.mtp_norm = vec(W.get("mtp.norm"));
  }
  I.final_norm = vec(W.get("final_norm"));
  I.inv_freq.resize(static_cast<size_t>(c.rope_dim / 2));
  for (int64_t i = 0; i < c.rope_dim / 2; ++i)
    I.inv_freq[i] = static_cast<float>(
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.rope_dim)));
  return m;
}

const KernelOptions& Model::kernel_options() const {
  return impl_->kopt;
}

void Model::set_kernel_options(const KernelOptions& opt) {
  Impl& I = *impl_;
  I.kopt = opt;
  auto layer = [&](LayerW& L) {
    for (PackedMatrix* w :
         {&L.lin.in_proj, &L.lin.out_proj, &L.m2.in_proj, &L.m2.out_proj, &L.attn.qkv,
          &L.attn.o_proj, &L.attn.kv, &L.dense.gate_up, &L.dense.down, &L.router, &L.shared_gate})
      w->set_kernel_options(opt);
    for (ExpertW& e : L.experts) {
      e.gate_up.set_kernel_options(opt);
      e.down.set_kernel_options(opt);
    }
  };
  for (LayerW& L : I.layers) layer(L);
  if (I.mtp) layer(I.mtp_layer);
  I.lm_head.set_kernel_options(opt);
  I.mtp_fc.set_kernel_options(opt);
}

const char* Model::isa() const {
  return matmul_isa(impl_->kopt.isa);
}

size_t Model::packed_bytes() const {
  return impl_->packed_bytes;
}
size_t Model::mapped_bytes() const {
  return impl_->mapped_bytes;
}

size_t Model::scratch_bytes() const {
  const Impl& I = *impl_;
  size_t b = 0;
  for (const AlignedBuffer<float>* a :
       {&I.x, &I.xn, &I.big, &I.big2, &I.out, &I.tmp, &I.gu, &I.egu, &I.eo, &I.router,
        &I.shared_gate, &I.fh, &I.mx, &I.mcat, &I.mh})
    b += a->size() * sizeof(float);
  return b;
}

size_t Model::scratch_bytes_bound(int64_t rows, int64_t keys, int threads) const {
  const ModelConfig& c = cfg_;
  const Impl& I = *impl_;
  const int64_t H = c.hidden_size;
  // Widest row of each buffer over the layers (Model::Impl::layer, forward, mtp_draft).
  int64_t big = 0, big2 = c.conv_dim(),
          tmp = std::max({c.value_dim(), c.n_head * c.head_dim, c.ssm_d_inner()});
  auto layer_widths = [&](const LayerW& L) {
    big = std::max({big, L.lin.in_proj.n(), L.m2.in_proj.n(), L.attn.qkv.n(), L.attn.kv.n()});
  };
  for (const LayerW& L : I.layers) layer_widths(L);
  if (I.mtp) layer_widths(I.mtp_layer);
  const int64_t F =
      std::max({c.intermediate_size, c.moe_intermediate_size, c.shared_expert_intermediate_size});
  const int64_t k = std::max<int64_t>(c.n_expert_used, 1);
  // x, xn, out, fh, mx, mh: H each; mcat 2H; gu 2F; MoE: router E, shared gate 1, the
  // experts' outputs k*H and gate|up rows 2k*F (top-k slots per row).
  int64_t per_row = 6 * H + 2 * H + big + big2 + tmp + 2 * F;
  if (c.n_expert > 0) per_row += c.n_expert + 1 + k * H + 2 * k * F;
  const size_t buffers = 15;  // each rounded up to 64 bytes
  size_t b = static_cast<size_t>(rows * per_row) * sizeof(float) + buffers * 64;
  // Attention: a job's score rows (16 tokens x the query heads of one K/V head) over its keys.
  const int64_t grp = c.n_head_kv > 0 ? c.n_head / c.n_head_kv : 0;
  b += static_cast<size_t>(std::max(threads, 1)) * static_cast<size_t>(16 * grp * keys) *
       sizeof(float);
  return b;
}

size_t Model::quantised_bytes() const {
  return impl_->quantised_bytes;
}

size_t Model::decode_bytes_per_token() const {
  size_t b = impl_->lm_head.bytes();
  for (auto& L : impl_->layers) {
    // The mixer's matrices (the other kinds' are empty).
    b += L.lin.in_proj.bytes() + L.lin.out_proj.bytes() + L.m2.in_proj.bytes() +
         L.m2.out_proj.bytes() + L.attn.qkv.bytes() + L.attn.o_proj.bytes();
    b += L.dense.gate_up.bytes() + L.dense.down.bytes();
    if (L.moe) {
      b += L.router.bytes() + L.shared_gate.bytes();
      if (!L.experts.empty())
        b += static_cast<size_t>(cfg_.n_expert_used) *
             (L.experts[0].gate_up.bytes() + L.experts[0].down.bytes());
    }
  }
  return b;
}

int64_t Model::matmul_macs_per_token_layers() const {
  int64_t macs = 0;
  auto mk = [](const PackedMatrix& m) { return m.n() * m.k(); };
  for (auto& L : impl_->layers) {
    macs += mk(L.lin.in_proj) + mk(L.lin.out_proj) + mk(L.m2.in_proj) + mk(L.m2.out_proj) +
            mk(L.attn.qkv) + mk(L.attn.o_proj);
    macs += mk(L.dense.gate_up) + mk(L.dense.down);
    if (L.moe) {
      macs += mk(L.router) + mk(L.shared_gate);
      if (!L.experts.empty())
        macs += cfg_.n_expert_used * (mk(L.experts[0].gate_up) + mk(L.experts[0].down));
    }
  }
  return macs;
}

int64_t Model::matmul_macs_lm_head() const {
  return impl_->lm_head.n() * impl_->lm_head.k();
}

int64_t Model::capture_row_floats() const {
  const int64_t heads = cfg_.has_mamba2() ? cfg_.ssm_n_head : cfg_.lin_n_head_v;
  return cfg_.n_recurrent_layers() * (2 * cfg_.conv_dim() + 2 * heads) +
         (impl_->mtp ? cfg_.hidden_size : 0);
}

bool Model::mtp_loaded() const {
  return impl_->mtp;
}

void Model::replay_recurrent(SequenceState* st, const RecCapture& cap, int64_t from, int64_t to,
                             ThreadPool* pool) const {
  const IsaCap isa = impl_->kopt.isa;  // the ops' SIMD cap (KernelOptions)
  const ModelConfig& c = cfg_;
  const Impl& I = *impl_;
  REWIND_CHECK(0 <= from && from <= to && to <= cap.n);
  if (from == to) return;
  const int64_t RF = capture_row_floats();
  REWIND_CHECK(cap.row_floats == RF);
  if (I.mtp)  // the carry: the final hidden state of the last replayed token (end of its row)
    std::memcpy(st->carry(), cap.rows.data() + to * RF - c.hidden_size,
                static_cast<size_t>(c.hidden_size) * sizeof(float));
  if (c.n_recurrent_layers() == 0) return;
  if (c.has_mamba2()) return replay_mamba2(st, cap, from, to, pool);
  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t r = Hv / Hk, CD = c.conv_dim(), KD = c.key_dim(), n = to - from;
  std::vector<const LayerW*> rec;
  for (const LayerW& L : I.layers)
    if (L.kind == LayerKind::GatedDeltaNet) rec.push_back(&L);
  const int64_t NR = static_cast<int64_t>(rec.size());
  // Jobs: one conv window per layer, then one (layer, value head) recurrence each. The conv
  // job of a layer and its heads touch disjoint state, so they may run in any order.
  const int64_t n_jobs = NR * (1 + Hv);
  auto run = [&](int64_t jb, int64_t je) {
    std::vector<float> scratch;
    for (int64_t job = jb; job < je; ++job) {
      const int64_t il = job / (1 + Hv), h = job % (1 + Hv) - 1;
      const LayerW& L = *rec[il];
      const float* base = cap.rows.data() + from * RF + il * (2 * CD + 2 * Hv);
      if (h < 0) {  // the conv window shift: the same kernel on the same inputs, output unused
        scratch.resize(static_cast<size_t>(n * CD));
        conv_silu(st->conv(L.rec_index), base, RF, L.lin.conv.data(), scratch.data(), CD, n, CD,
                  c.conv_kernel, 0, CD, isa);
        continue;
      }
      const int64_t g = h / r;
      float* S = st->ssm(L.rec_index) + h * dk * dv;
      // alpha[t], beta[t], then the outputs (unused) [n, dv].
      scratch.resize(static_cast<size_t>(n * (2 + dv)));
      float* alpha = scratch.data();
      float* beta = alpha + n;
      for (int64_t t = 0; t < n; ++t) {
        alpha[t] = base[t * RF + 2 * CD + h];
        beta[t] = base[t * RF + 2 * CD + Hv + h];
      }
      const float* row = base + CD;  // normed [q | k | v]
      gdn_steps(S, row + g * dk, row + KD + g * dk, RF, row + 2 * KD + h * dv, RF, alpha, beta,
                beta + n, dv, n, dk, dv, isa);
    }
  };
  par_items(pool, n_jobs, 1, n > kGuidedTokens, 4 * n * NR * Hv * dk * dv, run);
}

void Model::replay_mamba2(SequenceState* st, const RecCapture& cap, int64_t from, int64_t to,
                          ThreadPool* pool) const {
  const IsaCap isa = impl_->kopt.isa;
  const ModelConfig& c = cfg_;
  const int64_t Hs = c.ssm_n_head, P = c.ssm_head_dim, N = c.ssm_d_state, hpg = Hs / c.ssm_n_group;
  const int64_t DI = c.ssm_d_inner(), CD = c.conv_dim(), GN = c.ssm_n_group * N, n = to - from;
  const int64_t RF = capture_row_floats();
  std::vector<const LayerW*> rec;
  for (const LayerW& L : impl_->layers)
    if (L.kind == LayerKind::Mamba2) rec.push_back(&L);
  const int64_t NR = static_cast<int64_t>(rec.size());
  // Jobs as for the GDN: one conv window per layer, then one (layer, head) recurrence each, on
  // the captured inputs (the same kernels on the same values, so the same bits).
  auto run = [&](int64_t jb, int64_t je) {
    std::vector<float> scratch;
    for (int64_t job = jb; job < je; ++job) {
      const int64_t il = job / (1 + Hs), h = job % (1 + Hs) - 1;
      const LayerW& L = *rec[il];
      const float* base = cap.rows.data() + from * RF + il * (2 * CD + 2 * Hs);
      if (h < 0) {
        scratch.resize(static_cast<size_t>(n * CD));
        conv_silu(st->conv(L.rec_index), base, RF, L.m2.conv.data(), scratch.data(), CD, n, CD,
                  c.conv_kernel, 0, CD, isa, L.m2.conv_bias.data());
        continue;
      }
      const int64_t g = h / hpg;
      scratch.resize(static_cast<size_t>(n * (2 + P)));
      float* dt = scratch.data();
      float* dA = dt + n;
      for (int64_t t = 0; t < n; ++t) {
        dt[t] = base[t * RF + 2 * CD + h];
        dA[t] = base[t * RF + 2 * CD + Hs + h];
      }
      const float* row = base + CD;  // x, B, C after the conv
      mamba2_steps(st->ssm(L.rec_index) + h * P * N, row + h * P, RF, row + DI + g * N,
                   row + DI + GN + g * N, RF, dt, dA, L.m2.D[h], dA + n, P, n, P, N, isa);
    }
  };
  par_items(pool, NR * (1 + Hs), 1, n > kGuidedTokens, 4 * n * NR * Hs * P * N, run);
}

RowFill Model::Impl::in_norm_rows(const ModelConfig& c, const LayerW& L, const float* x) const {
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const IsaCap isa = kopt.isa;
  return [x, H, eps, isa, w = L.in_norm.data()](int64_t b, int64_t e, float* y, int64_t ldy) {
    rmsnorm(x + b * H, H, w, y, ldy, e - b, H, eps, isa);
  };
}

void Model::Impl::gated_delta_net(const ModelConfig& c, const LayerW& L,
                                  const std::vector<Seg>& segs, int64_t T, const float* x,
                                  int64_t RF, ThreadPool* pool) {
  const IsaCap isa = kopt.isa;  // the ops' SIMD cap (KernelOptions)
  Impl& I = *this;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t S = segs.size();
  float* xn = I.xn.data();  // [T, H] each, reserved by layer()
  float* out = I.out.data();
  const RowFill in_norm = in_norm_rows(c, L, x);
  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t r = Hv / Hk, CD = c.conv_dim(), VD = c.value_dim(), KD = c.key_dim();
  const int64_t NP = L.lin.in_proj.n();  // CD + VD + 2 Hv
  I.big.reserve_at_least(static_cast<size_t>(T * NP));
  I.big2.reserve_at_least(static_cast<size_t>(T * CD));
  I.tmp.reserve_at_least(static_cast<size_t>(T * VD));
  float* proj = I.big.data();   // [T, NP] = [mixed (CD) | z (VD) | b (Hv) | a (Hv)]
  float* conv = I.big2.data();  // [T, CD] conv + SiLU outputs: [q | k | v]
  float* o = I.tmp.data();      // [T, VD]
  matmul_fill(in_norm, T, L.lin.in_proj, proj, NP, pool, xn, H);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  // Captured layout per token and layer: [conv inputs | normed q,k,v | alpha | beta].
  const int64_t cap_off = L.rec_index * (2 * CD + 2 * Hv);
  auto cap_row = [&](size_t s, int64_t t) {
    return segs[s].cap + (t - segs[s].off) * RF + cap_off;
  };
  for (size_t s = 0; s < S; ++s)
    if (segs[s].cap)
      for (int64_t t = segs[s].off; t < segs[s].off + segs[s].n; ++t)
        std::memcpy(cap_row(s, t), proj + t * NP, static_cast<size_t>(CD) * sizeof(float));
  // Conv + SiLU outputs head-major, so that each head's rows are contiguous: item e (the q
  // heads, then the k heads, then the v heads) holds [T, width(e)] at conv + col(e) * T, col(e)
  // being its first channel. Threads take whole items: each q / k head is normalised right
  // after its conv while its rows are in cache, and the recurrence then streams its q, k and
  // v rows without packing them.
  const int64_t n_items = 2 * Hk + Hv;
  auto col = [&](int64_t e) { return e < 2 * Hk ? e * dk : 2 * KD + (e - 2 * Hk) * dv; };
  auto width = [&](int64_t e) { return e < 2 * Hk ? dk : dv; };
  // One pass over every (sequence, item), so that a batch of decode rows shares the threads.
  auto items = [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      const size_t s = static_cast<size_t>(j / n_items);
      const int64_t e = j % n_items, t0 = segs[s].off, n = segs[s].n;
      const int64_t c0 = col(e), w = width(e);
      float* out = conv + c0 * T + t0 * w;
      conv_silu(segs[s].st->conv(L.rec_index), proj + t0 * NP, NP, L.lin.conv.data(), out, w, n, CD,
                c.conv_kernel, c0, c0 + w, isa);
      // Normalise q (with 1/sqrt(dk)) and k per head, row-wise.
      if (e < 2 * Hk)
        for (int64_t t = 0; t < n; ++t)
          l2norm_heads(out + t * w, 1, dk, 1e-6f, e < Hk ? qscale : 1.0f, isa);
    }
  };
  par_items(pool, static_cast<int64_t>(S) * n_items, 1, T > kGuidedTokens,
            T * CD * (c.conv_kernel + 2), items);
  for (size_t s = 0; s < S; ++s)
    if (segs[s].cap)
      for (int64_t t = segs[s].off; t < segs[s].off + segs[s].n; ++t)
        for (int64_t e = 0; e < n_items; ++e)
          std::memcpy(cap_row(s, t) + CD + col(e), conv + col(e) * T + t * width(e),
                      static_cast<size_t>(width(e)) * sizeof(float));
  // Recurrence: each (sequence, value head) runs its tokens in order.
  const int64_t n_jobs = static_cast<int64_t>(S) * Hv;
  auto run_heads = [&](int64_t jb, int64_t je) {
    std::vector<float> ab;
    for (int64_t job = jb; job < je; ++job) {
      const int64_t s = job / Hv, h = job % Hv, g = h / r;
      SequenceState& st = *segs[s].st;
      float* Sm = st.ssm(L.rec_index) + h * dk * dv;
      const int64_t t0 = segs[s].off, n = segs[s].n;
      ab.resize(static_cast<size_t>(2 * n));
      for (int64_t t = t0; t < t0 + n; ++t) {
        const float* prow = proj + t * NP;
        const float bl = prow[CD + VD + h];
        const float al = prow[CD + VD + Hv + h];
        const float gate = L.lin.A[h] * softplus(al + L.lin.dt_bias[h]);
        const float alpha = std::exp(gate);
        const float beta = sigmoid(bl);
        if (segs[s].cap) {
          cap_row(s, t)[2 * CD + h] = alpha;
          cap_row(s, t)[2 * CD + Hv + h] = beta;
        }
        ab[t - t0] = alpha;
        ab[n + t - t0] = beta;
      }
      gdn_steps(Sm, conv + col(g) * T + t0 * dk, conv + col(Hk + g) * T + t0 * dk, dk,
                conv + col(2 * Hk + h) * T + t0 * dv, dv, ab.data(), ab.data() + n,
                o + t0 * VD + h * dv, VD, n, dk, dv, isa);
    }
  };
  par_items(pool, n_jobs, 1, T > kGuidedTokens, 4 * T * Hv * dk * dv, run_heads);
  // The gated norm's rows made inside the output projection (in place in o without the int8
  // dot).
  matmul_fill(
      [&](int64_t b, int64_t e, float* y, int64_t ldy) {
        for (int64_t t = b; t < e; ++t)
          gated_rmsnorm_heads(o + t * VD, proj + t * NP + CD, L.lin.gnorm.data(), y + (t - b) * ldy,
                              Hv, dv, eps, isa);
      },
      T, L.lin.out_proj, out, H, pool, o, VD);
}

void Model::Impl::attention(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs,
                            int64_t T, const float* x, int64_t RF, ThreadPool* pool, bool kv_only) {
  const IsaCap isa = kopt.isa;  // the ops' SIMD cap (KernelOptions)
  Impl& I = *this;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t S = segs.size();
  float* xn = I.xn.data();  // [T, H] each, reserved by layer()
  float* out = I.out.data();
  const RowFill in_norm = in_norm_rows(c, L, x);
  const int64_t nh = c.n_head, nkv = c.n_head_kv, D = c.head_dim, grp = nh / nkv;
  // K/V only with a k,v matrix: rows hold [k | v]; else [q_h | gate_h]... | k | v, or without
  // the output gate q_h... | k | v.
  const bool kv_mat = kv_only && !L.attn.kv.empty();
  const PackedMatrix& Wq = kv_mat ? L.attn.kv : L.attn.qkv;
  const int64_t NQ = Wq.n();                          // nh*qs + 2 nkv D (or 2 nkv D)
  const int64_t qs = c.attn_output_gate ? 2 * D : D;  // a query head's columns
  const int64_t k_col = kv_mat ? 0 : nh * qs;
  const bool qk_norm = c.attn_qk_norm, rope = c.rope_dim > 0;
  I.big.reserve_at_least(static_cast<size_t>(T * NQ));
  I.tmp.reserve_at_least(static_cast<size_t>(T * nh * D));
  float* qkv = I.big.data();
  float* att = I.tmp.data();  // [T, nh*D]
  matmul_fill(in_norm, T, Wq, qkv, NQ, pool, xn, H);
  // q/k norms and RoPE per row (where the family has them); k and v go into the sequence's pages.
  for (size_t s = 0; s < S; ++s) {
    SequenceState& st = *segs[s].st;
    const int64_t t0 = segs[s].off, p0 = segs[s].pos0;
    par_rows(pool, segs[s].n, 4 * NQ, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float* row = qkv + (t0 + i) * NQ;
        const int64_t pos = p0 + i;
        if (!kv_only)
          for (int64_t h = 0; h < nh; ++h) {
            float* q = row + h * qs;  // [q_h | gate_h] or q_h
            if (qk_norm) rmsnorm_heads(q, 1, D, L.attn.q_norm.data(), eps, isa);
            if (rope) rope_heads(q, 1, D, c.rope_dim, I.inv_freq.data(), pos);
          }
        float* k = row + k_col;
        float* v = k + nkv * D;
        if (qk_norm) rmsnorm_heads(k, nkv, D, L.attn.k_norm.data(), eps, isa);
        if (rope) rope_heads(k, nkv, D, c.rope_dim, I.inv_freq.data(), pos);
        st.write_kv(L.attn_index, pos, k, v);
      }
    });
  }
  if (kv_only) return;
  // Attention per (sequence, K/V head, group of gs query heads sharing it, tile of up to kTile
  // tokens): the job's rows (token-major, then head) read each K/V block once for all its
  // heads. gs is the largest divisor of the heads per K/V head that still leaves a job per
  // thread (each row's bits are the same whatever the grouping: attention_rows).
  const float scale =
      c.attn_scale > 0 ? static_cast<float>(c.attn_scale) : 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t PT = segs.empty() ? 64 : segs[0].st->shape().page_tokens;
  constexpr int64_t kTile = 16;
  int64_t n_tiles = 0;
  for (size_t s = 0; s < S; ++s) n_tiles += (segs[s].n + kTile - 1) / kTile;
  const int64_t n_threads = pool ? pool->n_threads() : 1;
  int64_t gs = grp;
  while (gs > 1 && (grp % gs != 0 || nkv * (grp / gs) * n_tiles < n_threads)) --gs;
  struct Job {
    int64_t s, h0, t0, m;  // query heads h0 .. h0 + gs - 1, tokens t0 .. t0 + m - 1
  };
  std::vector<Job> jobs;
  for (size_t s = 0; s < S; ++s)
    for (int64_t h0 = 0; h0 < nh; h0 += gs)
      for (int64_t t = segs[s].off; t < segs[s].off + segs[s].n; t += kTile)
        jobs.push_back(
            {static_cast<int64_t>(s), h0, t, std::min(kTile, segs[s].off + segs[s].n - t)});
  auto run = [&](int64_t jb, int64_t je) {
    std::vector<float> scratch;
    std::vector<const void*> kb, vb;
    std::vector<const uint16_t*> ks, vs;
    std::vector<const float*> qr;
    std::vector<float*> orow;
    std::vector<int64_t> n_keys;
    for (int64_t ji = jb; ji < je; ++ji) {
      const Job& J = jobs[ji];
      const Seg& sg = segs[J.s];
      const SequenceState& st = *sg.st;
      const int64_t kvh = J.h0 / grp, rows = J.m * gs;
      qr.resize(static_cast<size_t>(rows));
      orow.resize(static_cast<size_t>(rows));
      n_keys.resize(static_cast<size_t>(rows));
      for (int64_t i = 0; i < J.m; ++i)
        for (int64_t u = 0; u < gs; ++u) {
          const int64_t t = J.t0 + i, h = J.h0 + u, r = i * gs + u;
          qr[r] = qkv + t * NQ + h * qs;
          orow[r] = att + t * nh * D + h * D;
          n_keys[r] = sg.pos0 + (t - sg.off) + 1;
        }
      const int64_t n_max = n_keys[rows - 1];
      const int64_t nb = (n_max + PT - 1) / PT;
      // The head's blocks in the state's KV types (StateShape::kv_types; KvPage's layout).
      const KvTypes ty = st.shape().kv_types;
      const int64_t qb = st.shape().q_blocks_per_head();
      auto elem = [](DType t) -> int64_t { return t == DType::F32 ? 4 : t == DType::Q8_0 ? 1 : 2; };
      const int64_t ke = elem(ty.k), ve = elem(ty.v);
      kb.resize(static_cast<size_t>(nb));
      vb.resize(static_cast<size_t>(nb));
      ks.assign(static_cast<size_t>(nb), nullptr);
      vs.assign(static_cast<size_t>(nb), nullptr);
      for (int64_t bi = 0; bi < nb; ++bi) {
        const KvPage& pg = st.page(bi);
        kb[bi] = pg.k(L.attn_index) + kvh * D * PT * ke;  // dim-major
        vb[bi] = pg.v(L.attn_index) + kvh * D * ve;
        if (ty.k == DType::Q8_0) ks[bi] = pg.k_scales(L.attn_index) + kvh * qb * PT;
        if (ty.v == DType::Q8_0) vs[bi] = pg.v_scales(L.attn_index) + kvh * qb;
      }
      const KvBlocks kv_k{ty.k, kb.data(), ks.data(), 0, 0};
      const KvBlocks kv_v{ty.v, vb.data(), vs.data(), nkv * D, nkv * qb};
      scratch.resize(static_cast<size_t>(rows * n_max));
      attention_rows(qr.data(), rows, n_keys.data(), kv_k, kv_v, PT, D, scale, orow.data(),
                     scratch.data(), isa);
      if (c.attn_output_gate)  // the output gate
        for (int64_t r = 0; r < rows; ++r) sigmoid_gate(orow[r], qr[r] + D, D);
    }
  };
  const int64_t n_jobs = static_cast<int64_t>(jobs.size());
  // A static split: each thread's tiles grow one K/V prefix in order (handed-out chunks, like
  // the zig-zag order tried before, would interleave the threads' prefixes).
  int64_t att_work = 0;  // a score and a value fma per (row, key, dim)
  for (size_t s = 0; s < S; ++s) att_work += 2 * nh * D * segs[s].n * (segs[s].pos0 + segs[s].n);
  par_items(pool, n_jobs, 1, /*guided=*/false, att_work, run);
  matmul(att, T, nh * D, L.attn.o_proj, out, H, pool);
}

void Model::Impl::mamba2(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs,
                         int64_t T, const float* x, int64_t RF, ThreadPool* pool) {
  const IsaCap isa = kopt.isa;  // the ops' SIMD cap (KernelOptions)
  Impl& I = *this;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t S = segs.size();
  float* xn = I.xn.data();  // [T, H] each, reserved by layer()
  float* out = I.out.data();
  const RowFill in_norm = in_norm_rows(c, L, x);
  const int64_t Hs = c.ssm_n_head, P = c.ssm_head_dim, N = c.ssm_d_state, G = c.ssm_n_group;
  const int64_t DI = c.ssm_d_inner(), CD = c.conv_dim(), GN = G * N, hpg = Hs / G;
  const int64_t NP = L.m2.in_proj.n();  // DI + CD + Hs: [z | x, B, C | dt]
  I.big.reserve_at_least(static_cast<size_t>(T * NP));
  I.big2.reserve_at_least(static_cast<size_t>(T * CD));
  I.tmp.reserve_at_least(static_cast<size_t>(T * DI));
  float* proj = I.big.data();
  float* conv = I.big2.data();  // [T, CD] conv + SiLU outputs: [x | B | C]
  float* y = I.tmp.data();      // [T, DI] the heads' outputs
  matmul_fill(in_norm, T, L.m2.in_proj, proj, NP, pool, xn, H);
  // Captured per token and layer: [conv inputs (CD) | x, B, C after the conv (CD) | dt (Hs) |
  // dA (Hs)], what replay_recurrent needs to redo the state updates.
  const int64_t cap_off = L.rec_index * (2 * CD + 2 * Hs);
  auto cap_row = [&](size_t s, int64_t t) {
    return segs[s].cap + (t - segs[s].off) * RF + cap_off;
  };
  for (size_t s = 0; s < S; ++s)
    if (segs[s].cap)
      for (int64_t t = segs[s].off; t < segs[s].off + segs[s].n; ++t)
        std::memcpy(cap_row(s, t), proj + t * NP + DI, static_cast<size_t>(CD) * sizeof(float));
  // Conv + SiLU over x, B, C, token-major; threads take blocks of channels of one sequence.
  constexpr int64_t kConvBlock = 64;
  const int64_t n_blocks = (CD + kConvBlock - 1) / kConvBlock;
  for (size_t s = 0; s < S; ++s) {
    SequenceState& st = *segs[s].st;
    const int64_t t0 = segs[s].off, n = segs[s].n;
    float* window = st.conv(L.rec_index);
    auto blocks = [&](int64_t bb, int64_t be) {
      for (int64_t blk = bb; blk < be; ++blk) {
        const int64_t c0 = blk * kConvBlock, c1 = std::min(CD, c0 + kConvBlock);
        conv_silu(window, proj + t0 * NP + DI, NP, L.m2.conv.data(), conv + t0 * CD + c0, CD, n, CD,
                  c.conv_kernel, c0, c1, isa, L.m2.conv_bias.data());
      }
    };
    par_items(pool, n_blocks, 1, n > kGuidedTokens, n * CD * (c.conv_kernel + 2), blocks);
  }
  for (size_t s = 0; s < S; ++s)
    if (segs[s].cap)
      for (int64_t t = segs[s].off; t < segs[s].off + segs[s].n; ++t)
        std::memcpy(cap_row(s, t) + CD, conv + t * CD, static_cast<size_t>(CD) * sizeof(float));
  // The recurrence: each (sequence, head) runs its tokens in order.
  const int64_t n_jobs = static_cast<int64_t>(S) * Hs;
  auto run_heads = [&](int64_t jb, int64_t je) {
    std::vector<float> dd;
    for (int64_t job = jb; job < je; ++job) {
      const int64_t s = job / Hs, h = job % Hs, g = h / hpg;
      SequenceState& st = *segs[s].st;
      const int64_t t0 = segs[s].off, n = segs[s].n;
      dd.resize(static_cast<size_t>(2 * n));
      float* dt = dd.data();
      float* dA = dt + n;
      for (int64_t t = t0; t < t0 + n; ++t)
        dt[t - t0] = softplus(proj[t * NP + DI + CD + h] + L.m2.dt_bias[h]);
      exp_scaled(dt, L.m2.A[h], dA, n, isa);  // dA = exp_fixed(dt * A), vectorised
      if (segs[s].cap)
        for (int64_t t = t0; t < t0 + n; ++t) {
          cap_row(s, t)[2 * CD + h] = dt[t - t0];
          cap_row(s, t)[2 * CD + Hs + h] = dA[t - t0];
        }
      const float* row = conv + t0 * CD;
      mamba2_steps(st.ssm(L.rec_index) + h * P * N, row + h * P, CD, row + DI + g * N,
                   row + DI + GN + g * N, CD, dt, dA, L.m2.D[h], y + t0 * DI + h * P, DI, n, P, N,
                   isa);
    }
  };
  par_items(pool, n_jobs, 1, T > kGuidedTokens, 4 * T * Hs * P * N, run_heads);
  // The gated norm's rows (gate first, per group) made inside the output projection.
  const int64_t NG = c.ssm_norm_groups;
  matmul_fill(
      [&](int64_t b, int64_t e, float* yy, int64_t ldy) {
        for (int64_t t = b; t < e; ++t)
          gated_rmsnorm_groups(y + t * DI, proj + t * NP, L.m2.gnorm.data(), yy + (t - b) * ldy, NG,
                               DI / NG, eps, isa);
      },
      T, L.m2.out_proj, out, H, pool, y, DI);
}

void Model::Impl::layer(const ModelConfig& c, const LayerW& L, const std::vector<Seg>& segs,
                        int64_t T, float* x, int64_t RF, ThreadPool* pool, bool kv_only) {
  const IsaCap isa = kopt.isa;  // the ops' SIMD cap (KernelOptions)
  Impl& I = *this;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  I.xn.reserve_at_least(static_cast<size_t>(T * H));
  I.out.reserve_at_least(static_cast<size_t>(T * H));
  float* xn = I.xn.data();
  float* out = I.out.data();
  auto par = [&](int64_t n, int64_t row_work, const std::function<void(int64_t, int64_t)>& f) {
    par_rows(pool, n, row_work, f);
  };
  switch (L.kind) {
    case LayerKind::GatedDeltaNet:
      gated_delta_net(c, L, segs, T, x, RF, pool);
      break;
    case LayerKind::Attention:
      attention(c, L, segs, T, x, RF, pool, kv_only);
      if (kv_only) return;
      break;
    case LayerKind::Mamba2:
      mamba2(c, L, segs, T, x, RF, pool);
      break;
    case LayerKind::None:
      break;
  }
  // x += out over rows [b, e), times the residual multiplier (Granite's; 1 elsewhere, and
  // 1 * out is out exactly).
  const float rm = static_cast<float>(c.residual_multiplier);
  auto add_out = [&](int64_t b, int64_t e) {
    for (int64_t i = b * H; i < e * H; ++i) x[i] = x[i] + rm * out[i];
  };
  if (L.ffn == FfnKind::None) {  // a mixer-only block (Nemotron-H)
    par(T, 2 * H, add_out);
    return;
  }
  // The mixer's residual (when there is a mixer), then the FFN's norm: x += out;
  // xn = rmsnorm(x).
  const bool mixed = L.kind != LayerKind::None;
  auto residual_norm = [&](int64_t b, int64_t e, float* y, int64_t ldy) {
    if (mixed) add_out(b, e);
    rmsnorm(x + b * H, H, L.post_norm.data(), y, ldy, e - b, H, eps, isa);
  };
  // The FFN's input rows: in (row stride H), else made by rows (a routed expert's gather),
  // else (both null) residual_norm makes them inside gate|up's matmul. gu: the [m, gate|up
  // width] scratch; p: the pool the matmuls split their columns on (null: this thread alone).
  auto first_matmul = [&](const ExpertW& w, const float* in, const RowFill* rows, int64_t m,
                          float* gu, int64_t ldgu, ThreadPool* p) {
    if (in)
      matmul(in, m, H, w.gate_up, gu, ldgu, p);
    else if (rows)
      matmul_fill(*rows, m, w.gate_up, gu, ldgu, p);
    else
      matmul_fill(residual_norm, m, w.gate_up, gu, ldgu, p, xn, H);
  };
  auto swiglu_ffn = [&](const ExpertW& w, const float* in, const RowFill* rows, int64_t m, float* y,
                        float* gu, ThreadPool* p) {
    const int64_t F = w.down.k();
    first_matmul(w, in, rows, m, gu, 2 * F, p);
    // The activations are made inside the down projection; without the int8 dot they go over
    // the gate half of each row, whose lines the pass has just read (a separate buffer would
    // write-allocate every line).
    matmul_fill(
        [&](int64_t b, int64_t e, float* h, int64_t ldh) {
          for (int64_t i = b; i < e; ++i)
            swiglu(gu + i * 2 * F, gu + i * 2 * F + F, h + (i - b) * ldh, F, isa);
        },
        m, w.down, y, H, p, gu, 2 * F);
  };
  // down(relu(up(x))^2) (squared-ReLU MLP or expert; w.gate_up holds the up rows); the
  // activations are made inside the down projection, over the up rows. Inputs as above.
  auto relu2_ffn = [&](const ExpertW& w, const float* in, const RowFill* rows, int64_t m, float* y,
                       float* u, ThreadPool* p) {
    const int64_t F = w.down.k();
    first_matmul(w, in, rows, m, u, F, p);
    matmul_fill(
        [&](int64_t b, int64_t e, float* h, int64_t ldh) {
          for (int64_t i = b; i < e; ++i)
            for (int64_t j = 0; j < F; ++j) {
              const float v = std::max(u[i * F + j], 0.0f);
              h[(i - b) * ldh + j] = v * v;
            }
        },
        m, w.down, y, H, p, u, F);
  };
  auto expert_ffn = [&](const ExpertW& w, const float* in, const RowFill* rows, int64_t m, float* y,
                        float* gu, ThreadPool* p) {
    if (c.moe_relu2)
      relu2_ffn(w, in, rows, m, y, gu, p);
    else
      swiglu_ffn(w, in, rows, m, y, gu, p);
  };
  // The dense FFN's and the shared expert's gate|up rows.
  auto dense_gu = [&](int64_t m) {
    I.gu.reserve_at_least(static_cast<size_t>(m * L.dense.gate_up.n()));
    return I.gu.data();
  };
  if (L.ffn == FfnKind::SwiGLU) {
    swiglu_ffn(L.dense, nullptr, nullptr, T, out, dense_gu(T), pool);
  } else if (L.ffn == FfnKind::ReluSq) {
    relu2_ffn(L.dense, nullptr, nullptr, T, out, dense_gu(T), pool);
  } else {
    par(T, 6 * H, [&](int64_t b, int64_t e) { residual_norm(b, e, xn + b * H, H); });
    const int64_t E = c.n_expert, k = c.n_expert_used;
    I.router.reserve_at_least(static_cast<size_t>(T * E));
    I.shared_gate.reserve_at_least(static_cast<size_t>(T));
    float* rl = I.router.data();
    float* sg = I.shared_gate.data();
    matmul(xn, T, H, L.router, rl, E, pool);
    if (c.shared_expert_gate) matmul(xn, T, H, L.shared_gate, sg, 1, pool);
    std::vector<int32_t> sel(static_cast<size_t>(T * k));
    std::vector<float> wsel(static_cast<size_t>(T * k));
    par(T, 16 * E, [&](int64_t tb, int64_t te) {
      std::vector<float> p(static_cast<size_t>(E));
      std::vector<int32_t> idx(static_cast<size_t>(E));
      if (c.moe_sigmoid_router) {
        route_sigmoid_grouped(c, L.router_bias.data(), rl, tb, te, sel.data(), wsel.data());
        return;
      }
      for (int64_t t = tb; t < te; ++t) {
        const float* l = rl + t * E;
        float mx = -INFINITY;
        for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
        for (int64_t e = 0; e < E; ++e) p[e] = p[e] / sum;
        std::iota(idx.begin(), idx.end(), 0);
        // Top k by probability, ties to the lower expert id (the order of a stable sort).
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
          return p[a] > p[b] || (p[a] == p[b] && a < b);
        });
        float wsum = 0.0f;
        for (int64_t j = 0; j < k; ++j) wsum += p[idx[j]];
        for (int64_t j = 0; j < k; ++j) {
          sel[t * k + j] = idx[j];
          wsel[t * k + j] = c.norm_topk_prob ? p[idx[j]] / wsum : p[idx[j]];
        }
      }
    });
    // The slots (row * k + rank) in expert order: expert e's at [first[e], first[e + 1]), in
    // slot order; at[slot] is the slot's place in that order.
    const int64_t NS = T * k;
    std::vector<int64_t> first(static_cast<size_t>(E + 1), 0), order(static_cast<size_t>(NS)),
        at(static_cast<size_t>(NS));
    for (int64_t i = 0; i < NS; ++i) ++first[sel[i] + 1];
    for (int64_t e = 0; e < E; ++e) first[e + 1] += first[e];
    {
      std::vector<int64_t> next(first.begin(), first.end() - 1);
      for (int64_t i = 0; i < NS; ++i) {
        const int64_t q = next[sel[i]]++;
        order[q] = i;
        at[i] = q;
      }
    }
    // Expert outputs and gate|up rows, each expert's rows in its own stretch (in expert order),
    // so that experts can run at once.
    const int64_t GU = L.experts[0].gate_up.n();
    I.eo.reserve_at_least(static_cast<size_t>(NS * H));
    I.egu.reserve_at_least(static_cast<size_t>(NS * GU));
    float* eo = I.eo.data();
    float* egu = I.egu.data();
    // Expert e on its rows, copied from xn by its first matmul's row fill (in L1, just before
    // they are quantised with the int8 dot) rather than gathered into a matrix first.
    auto run_expert = [&](int64_t e, ThreadPool* p) {
      const int64_t b = first[e], m = first[e + 1] - b;
      if (m == 0) return;
      const RowFill rows = [&, b](int64_t r0, int64_t r1, float* y, int64_t ldy) {
        for (int64_t r = r0; r < r1; ++r)
          std::memcpy(y + (r - r0) * ldy, xn + (order[b + r] / k) * H,
                      static_cast<size_t>(H) * sizeof(float));
      };
      expert_ffn(L.experts[e], nullptr, &rows, m, eo + b * H, egu + b * GU, p);
    };
    std::vector<int32_t> busy;
    for (int64_t e = 0; e < E; ++e)
      if (first[e + 1] > first[e]) busy.push_back(static_cast<int32_t>(e));
    const int64_t threads = pool ? pool->n_threads() : 1;
    if (threads > 1 && (T > kGuidedTokens || static_cast<int64_t>(busy.size()) >= 2 * threads)) {
      // Whole experts to whichever thread is free, each on one thread, the largest first, when
      // there are enough of them: split by columns, every expert's matmuls would be a few small
      // jobs with the threads waiting on each other between them (in prefill tens of rows
      // each; in decode a few hundred kB of weights a thread, each job restarting its panel
      // streams). The bits are those of any split (the matmul contract).
      std::stable_sort(busy.begin(), busy.end(), [&](int32_t a, int32_t b) {
        return first[a + 1] - first[a] > first[b + 1] - first[b];
      });
      const int64_t macs = GU * H + H * L.experts[0].down.k();
      pool->parallel_guided(
          static_cast<int64_t>(busy.size()), 1, 1,
          [&](int, int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) run_expert(busy[i], nullptr);
          },
          NS * macs);
    } else {
      for (int32_t e : busy) run_expert(e, pool);
    }
    expert_ffn(L.dense, xn, nullptr, T, out, dense_gu(T), pool);  // shared expert
    // out = sum over ranks j of w_j * expert_j + g * shared, per element from 0 in rank order;
    // rank by rank over the row (a loop over contiguous values, which the compiler vectorises).
    par(T, 2 * k * H, [&](int64_t tb, int64_t te) {
      thread_local std::vector<float> acc;
      acc.resize(static_cast<size_t>(H));
      for (int64_t t = tb; t < te; ++t) {
        float* o = out + t * H;
        // Granite adds the shared MLP as it is (a gate of exactly 1).
        const float g = c.shared_expert_gate ? sigmoid(sg[t]) : 1.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const float w = wsel[t * k + j];
          const float* src = eo + at[t * k + j] * H;
          for (int64_t i = 0; i < H; ++i) acc[i] = acc[i] + w * src[i];
        }
        for (int64_t i = 0; i < H; ++i) o[i] = acc[i] + g * o[i];
      }
    });
  }
  par(T, 2 * H, add_out);
}

void Model::Impl::mtp_inputs(const ModelConfig& c, const WeightSource& emb, const int32_t* tok,
                             const float* const* hid, int64_t M, float* out, ThreadPool* pool) {
  const IsaCap isa = kopt.isa;  // the ops' SIMD cap (KernelOptions)
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  mcat.reserve_at_least(static_cast<size_t>(M * 2 * H));
  float* cat = mcat.data();
  par_rows(pool, M, 8 * H, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* row = cat + i * 2 * H;
      emb.row_f32(tok[i], row);
      rmsnorm(row, H, mtp_enorm.data(), row, H, 1, H, eps, isa);
      rmsnorm(hid[i], H, mtp_hnorm.data(), row + H, H, 1, H, eps, isa);
    }
  });
  matmul(cat, M, 2 * H, mtp_fc, out, H, pool);
}

Status Model::forward(std::span<SeqInput> batch, std::vector<float>* logits, ThreadPool* pool) {
  const IsaCap isa = impl_->kopt.isa;  // the ops' SIMD cap (KernelOptions)
  const ModelConfig& c = cfg_;
  Impl& I = *impl_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // Validate everything before touching any state.
  int64_t T = 0, n_out = 0;
  std::vector<int64_t> off(batch.size() + 1, 0);
  for (size_t s = 0; s < batch.size(); ++s) {
    const SeqInput& in = batch[s];
    REWIND_CHECK(in.state != nullptr);
    REWIND_CHECK_MSG(in.state->shape().carry_floats == (I.mtp ? H : 0),
                     "forward: state shape mismatch (made with a different LoadOptions::mtp)");
    if (in.tokens.empty())
      return make_error("forward: sequence " + std::to_string(s) + " has no tokens");
    for (int32_t t : in.tokens)
      if (t < 0 || t >= V)
        return make_error("token id " + std::to_string(t) + " out of range [0, " +
                          std::to_string(V) + ")");
    for (size_t i = 0; i < in.logit_rows.size(); ++i) {
      const int32_t r = in.logit_rows[i];
      if (r < 0 || r >= static_cast<int32_t>(in.tokens.size()) || (i && r <= in.logit_rows[i - 1]))
        return make_error("forward: logit rows must be ascending indices into the tokens");
    }
    off[s] = T;
    T += static_cast<int64_t>(in.tokens.size());
    n_out += static_cast<int64_t>(in.logit_rows.size());
  }
  off[batch.size()] = T;
  for (auto& in : batch) {
    const int64_t p = in.state->n_pos(), n = static_cast<int64_t>(in.tokens.size());
    // With MTP the lagging head also writes slot p - 1, possibly in a shared page.
    in.state->prepare_write(I.mtp && p > 0 ? p - 1 : p, p + n);
  }
  // Capture rows for speculative verification: segs[s].cap is this forward's first row.
  const int64_t RF = capture_row_floats();
  std::vector<Impl::Seg> segs(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) {
    segs[s] = {batch[s].state, off[s], off[s + 1] - off[s], batch[s].state->n_pos(), nullptr};
    if (RecCapture* cap = batch[s].capture; cap && RF > 0) {
      REWIND_CHECK(cap->row_floats == 0 || cap->row_floats == RF);
      cap->row_floats = RF;
      cap->rows.resize(static_cast<size_t>((cap->n + off[s + 1] - off[s]) * RF));
      segs[s].cap = cap->rows.data() + cap->n * RF;
    }
  }

  // A step this small (a tiny model's decode) runs on this thread alone (base/thread_pool.h):
  // its matmuls, the recurrent state update and the attention over the context.
  int64_t step_work =
      T * (matmul_macs_per_token_layers() + c.n_recurrent_layers() * c.ssm_floats()) +
      n_out * matmul_macs_lm_head();
  for (const SeqInput& in : batch)
    step_work += static_cast<int64_t>(in.tokens.size()) *
                 (in.state->n_pos() + static_cast<int64_t>(in.tokens.size())) *
                 c.n_attention_layers() * c.n_head * c.head_dim * 2;
  const ThreadPool::StepScope step_scope(pool, step_work);

  I.x.reserve_at_least(static_cast<size_t>(T * H));
  float* x = I.x.data();

  // Embedding.
  const WeightSource& emb = ws_->get("embed");
  {
    int64_t row = 0;
    for (auto& in : batch)
      for (int32_t t : in.tokens) emb.row_f32(t, x + (row++) * H);
    if (c.embedding_multiplier != 1.0) {  // Granite
      const float m = static_cast<float>(c.embedding_multiplier);
      for (int64_t i = 0; i < T * H; ++i) x[i] = x[i] * m;
    }
  }

  for (const LayerW& L : I.layers) I.layer(c, L, segs, T, x, RF, pool, false);

  // Final norm: requested rows only, or every row when the MTP head needs them all.
  float* fh = nullptr;
  if (I.mtp) {
    I.fh.reserve_at_least(static_cast<size_t>(T * H));
    fh = I.fh.data();
    par_rows(pool, T, 4 * H, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        rmsnorm(x + t * H, H, I.final_norm.data(), fh + t * H, H, 1, H, eps, isa);
    });
    // MTP entries j = p-1 .. p+n-2 of each sequence (p-1 only when p > 0): the pair
    // (h_j, t_{j+1}) through fc and the head's layer, K/V only (slot j). Entry p-1 reads the
    // carry h_{p-1}; the others read this forward's rows.
    std::vector<Impl::Seg> msegs;
    std::vector<int32_t> mtok;
    std::vector<const float*> mhid;
    for (size_t s = 0; s < batch.size(); ++s) {
      SequenceState* st = batch[s].state;
      const int64_t p = st->n_pos(), n = off[s + 1] - off[s];
      const int64_t j0 = p > 0 ? p - 1 : 0, m = p + n - 1 - j0;
      if (m > 0) msegs.push_back({st, static_cast<int64_t>(mtok.size()), m, j0, nullptr});
      for (int64_t j = j0; j <= p + n - 2; ++j) {
        mhid.push_back(j == p - 1 ? st->carry() : fh + (off[s] + j - p) * H);
        mtok.push_back(batch[s].tokens[static_cast<size_t>(j + 1 - p)]);
      }
    }
    const int64_t M = static_cast<int64_t>(mtok.size());
    if (M > 0) {
      I.mx.reserve_at_least(static_cast<size_t>(M * H));
      I.mtp_inputs(c, emb, mtok.data(), mhid.data(), M, I.mx.data(), pool);
      I.layer(c, I.mtp_layer, msegs, M, I.mx.data(), 0, pool, true);
    }
    // The carry moves to the last row; captured rows end with their hidden state.
    for (size_t s = 0; s < batch.size(); ++s) {
      std::memcpy(batch[s].state->carry(), fh + (off[s + 1] - 1) * H,
                  static_cast<size_t>(H) * sizeof(float));
      if (segs[s].cap)
        for (int64_t t = off[s]; t < off[s + 1]; ++t)
          std::memcpy(segs[s].cap + (t - off[s]) * RF + RF - H, fh + t * H,
                      static_cast<size_t>(H) * sizeof(float));
    }
  }

  for (auto& in : batch) in.state->commit_append(static_cast<int64_t>(in.tokens.size()));
  for (size_t s = 0; s < batch.size(); ++s)
    if (segs[s].cap) batch[s].capture->n += off[s + 1] - off[s];

  // lm_head on the requested rows only; the matmul writes every entry, so no zero fill (1 MB a
  // decode step with a 248k vocabulary, on one thread while the others wait).
  logits->resize(static_cast<size_t>(n_out * V));
  if (n_out > 0) {
    I.xn.reserve_at_least(static_cast<size_t>(n_out * H));
    float* xn = I.xn.data();
    int64_t j = 0;
    for (size_t s = 0; s < batch.size(); ++s)
      for (int32_t r : batch[s].logit_rows) {
        if (fh)
          std::memcpy(xn + j * H, fh + (off[s] + r) * H, static_cast<size_t>(H) * sizeof(float));
        else
          rmsnorm(x + (off[s] + r) * H, H, I.final_norm.data(), xn + j * H, H, 1, H, eps, isa);
        ++j;
      }
    matmul(xn, n_out, H, I.lm_head, logits->data(), V, pool);
    if (c.logits_scaling != 1.0) {  // Granite
      const float d = static_cast<float>(c.logits_scaling);
      for (float& l : *logits) l = l / d;
    }
  }
  return Ok{};
}

Status Model::mtp_draft(std::span<MtpDraft> batch, std::vector<float>* logits,
                        ThreadPool* pool) const {
  const IsaCap isa = impl_->kopt.isa;  // the ops' SIMD cap (KernelOptions)
  const ModelConfig& c = cfg_;
  Impl& I = *impl_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (!I.mtp) return make_error("mtp_draft: the model was loaded without an MTP head");
  int64_t kmax = 0, n_rows = 0;
  for (const MtpDraft& d : batch) {
    REWIND_CHECK(d.state != nullptr && d.state->shape().carry_floats == H);
    if (d.state->n_pos() < 1) return make_error("mtp_draft: the sequence has consumed no token");
    if (d.last < 0 || d.last >= V)
      return make_error("token id " + std::to_string(d.last) + " out of range [0, " +
                        std::to_string(V) + ")");
    if (d.k < 1) return make_error("mtp_draft: k must be >= 1");
    kmax = std::max<int64_t>(kmax, d.k);
    n_rows += d.k;
  }
  const int64_t S = static_cast<int64_t>(batch.size());
  std::vector<int64_t> out_row(static_cast<size_t>(S), 0);  // first logits row per sequence
  for (int64_t s = 1; s < S; ++s) out_row[s] = out_row[s - 1] + batch[s - 1].k;
  if (logits) logits->assign(static_cast<size_t>(n_rows * V), 0.0f);
  for (MtpDraft& d : batch) {
    const int64_t n = d.state->n_pos();
    d.state->prepare_write(n - 1, n - 1 + d.k);
    d.drafts.clear();
  }
  // Step i: entry n-1+i of every sequence still drafting, one row each.
  const WeightSource& emb = ws_->get("embed");
  I.mh.reserve_at_least(static_cast<size_t>(S * H));
  float* chain = I.mh.data();  // [S, H] post-mtp.norm state of each sequence's last entry
  std::vector<float> lg;
  for (int64_t i = 0; i < kmax; ++i) {
    std::vector<Impl::Seg> segs;
    std::vector<int32_t> tok;
    std::vector<const float*> hid;
    std::vector<int64_t> who;
    for (int64_t s = 0; s < S; ++s) {
      MtpDraft& d = batch[s];
      if (d.k <= i) continue;
      const int64_t M = static_cast<int64_t>(tok.size());
      segs.push_back({d.state, M, 1, d.state->n_pos() - 1 + i, nullptr});
      tok.push_back(i == 0 ? d.last : d.drafts.back());
      hid.push_back(i == 0 ? d.state->carry() : chain + s * H);
      who.push_back(s);
    }
    const int64_t M = static_cast<int64_t>(tok.size());
    I.mx.reserve_at_least(static_cast<size_t>(M * H));
    float* x = I.mx.data();
    I.mtp_inputs(c, emb, tok.data(), hid.data(), M, x, pool);
    I.layer(c, I.mtp_layer, segs, M, x, 0, pool, false);
    I.xn.reserve_at_least(static_cast<size_t>(M * H));
    float* xn = I.xn.data();
    rmsnorm(x, H, I.mtp_norm.data(), xn, H, M, H, eps, isa);
    lg.resize(static_cast<size_t>(M * V));
    matmul(xn, M, H, I.lm_head, lg.data(), V, pool);
    for (int64_t r = 0; r < M; ++r) {
      const int64_t s = who[r];
      std::memcpy(chain + s * H, xn + r * H, static_cast<size_t>(H) * sizeof(float));
      const float* row = lg.data() + r * V;
      int32_t best = 0;  // greedy: lowest id on ties, NaN never wins (as rw::argmax)
      float best_v = -INFINITY;
      for (int32_t v = 0; v < V; ++v)
        if (row[v] > best_v) {
          best_v = row[v];
          best = v;
        }
      batch[s].drafts.push_back(best);
      if (logits)
        std::memcpy(logits->data() + (out_row[s] + i) * V, row,
                    static_cast<size_t>(V) * sizeof(float));
    }
  }
  return Ok{};
}

}  // namespace rw
