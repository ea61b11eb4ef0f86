#include "rewind/model/weight_source.h"

#include <cmath>
#include <cstring>

#include "rewind/tensor/quant.h"
#include "rewind/tensor/shape.h"

namespace rw {

namespace {

const std::byte* row_ptr(const RowBlock& b, int64_t r, int64_t cols) {
  return static_cast<const std::byte*>(b.data) +
         static_cast<size_t>(r) * dtype_row_bytes(b.dtype, cols);
}

// Finds tensors of one checkpoint and turns them into WeightSources.
class Resolver {
 public:
  Resolver(const TensorSet& t) : t_(t) {}

  Result<const TensorView*> need(const std::string& name, std::vector<int64_t> shape) {
    const TensorView* v = t_.find(name);
    if (!v)
      return make_error("checkpoint: missing tensor '" + name + "' (expected shape " +
                        shape_str(shape) + ")");
    if (v->dtype != DType::F32 && v->dtype != DType::BF16 && v->dtype != DType::F16)
      return make_error(v->file + ": tensor '" + name + "': dtype " +
                        std::string(dtype_name(v->dtype)) +
                        " not supported for weights (F32, BF16, F16)");
    if (v->shape != shape)
      return make_error(v->file + ": tensor '" + name + "': shape " + shape_str(v->shape) +
                        ", expected " + shape_str(shape));
    return v;
  }

  // A matrix [rows, cols] viewed directly.
  static WeightSource view(const TensorView* v, int64_t rows, int64_t cols) {
    WeightSource w;
    w.cols = cols;
    w.file_dtype = v->dtype;
    w.blocks.push_back(RowBlock{v->data, v->dtype, rows, nullptr});
    return w;
  }
  // Rows [r0, r0+n) of a tensor viewed as [*, cols].
  static RowBlock rows_of(const TensorView* v, int64_t r0, int64_t n, int64_t cols) {
    return RowBlock{v->data + static_cast<size_t>(r0) * dtype_row_bytes(v->dtype, cols), v->dtype,
                    n, nullptr};
  }
  // Row blocks stacked into one matrix of `cols` columns.
  static WeightSource stacked(int64_t cols, DType file_dtype, std::vector<RowBlock> blocks) {
    WeightSource w;
    w.cols = cols;
    w.file_dtype = file_dtype;
    w.blocks = std::move(blocks);
    return w;
  }
  // Small tensor converted to f32, with f applied elementwise.
  template <typename F>
  static WeightSource owned(const TensorView* v, int64_t rows, int64_t cols, F f) {
    auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * cols));
    convert_to_f32(v->data, v->dtype, buf->size(), buf->data());
    for (auto& x : *buf) x = f(x);
    WeightSource w;
    w.cols = cols;
    w.file_dtype = v->dtype;
    w.blocks.push_back(RowBlock{buf->data(), DType::F32, rows, buf});
    return w;
  }

 private:
  const TensorSet& t_;
};

}  // namespace

int64_t WeightSource::rows() const {
  int64_t r = 0;
  for (auto& b : blocks) r += b.rows;
  return r;
}

void WeightSource::row_f32(int64_t r, float* out) const {
  for (auto& b : blocks) {
    if (r < b.rows) {
      if (col_perm.empty()) {
        convert_row_to_f32(row_ptr(b, r, cols), b.dtype, cols, out);
      } else {
        std::vector<float> tmp(static_cast<size_t>(cols));
        convert_row_to_f32(row_ptr(b, r, cols), b.dtype, cols, tmp.data());
        for (int64_t j = 0; j < cols; ++j) out[col_perm[j]] = tmp[j];
      }
      return;
    }
    r -= b.rows;
  }
  REWIND_CHECK_MSG(false, "row out of range");
}

void WeightSource::row_f64(int64_t r, double* out) const {
  std::vector<float> tmp(static_cast<size_t>(cols));
  row_f32(r, tmp.data());
  for (int64_t i = 0; i < cols; ++i) out[i] = tmp[i];
}

std::vector<float> WeightSource::to_f32() const {
  std::vector<float> out(static_cast<size_t>(rows() * cols));
  for (int64_t r = 0; r < rows(); ++r) row_f32(r, out.data() + r * cols);
  return out;
}

const void* WeightSource::contiguous(DType* dtype, std::vector<std::byte>* scratch) const {
  if (blocks.size() == 1) {
    *dtype = blocks[0].dtype;
    return blocks[0].data;
  }
  bool same = true;
  for (auto& b : blocks) same = same && b.dtype == blocks[0].dtype;
  const DType t = same ? blocks[0].dtype : DType::F32;
  scratch->resize(static_cast<size_t>(rows()) * dtype_row_bytes(t, cols));
  std::byte* dst = scratch->data();
  for (auto& b : blocks) {
    if (same) {
      const size_t n = static_cast<size_t>(b.rows) * dtype_row_bytes(t, cols);
      std::memcpy(dst, b.data, n);
      dst += n;
    } else {
      for (int64_t r = 0; r < b.rows; ++r) {
        convert_row_to_f32(row_ptr(b, r, cols), b.dtype, cols, reinterpret_cast<float*>(dst));
        dst += dtype_row_bytes(DType::F32, cols);
      }
    }
  }
  *dtype = t;
  return scratch->data();
}

DType WeightSource::default_store() const {
  bool same = !blocks.empty();
  for (auto& b : blocks) same = same && b.dtype == blocks[0].dtype;
  if (same && dtype_is_quant(blocks[0].dtype)) return blocks[0].dtype;
  return file_dtype == DType::BF16 ? DType::BF16 : DType::F32;
}

PackedMatrix WeightSource::pack(DType store, ThreadPool* pool) const {
  if (dtype_is_quant(store)) {
    DType dt;
    std::vector<std::byte> scratch;
    const void* p = contiguous(&dt, &scratch);
    REWIND_CHECK_MSG(dt == store, "pack: every block must hold the quantised store's type");
    PackedMatrix pm = PackedMatrix::pack(p, dt, rows(), cols, store, pool);
    if (!col_perm.empty()) pm.set_k_perm(col_perm);
    return pm;
  }
  bool plain = col_perm.empty();
  for (auto& b : blocks) plain = plain && !dtype_is_quant(b.dtype);
  if (!plain) {  // dequantise / un-permute to f32 rows in the model's column order
    const std::vector<float> f = to_f32();
    return PackedMatrix::pack(f.data(), DType::F32, rows(), cols, store, pool);
  }
  DType dt;
  std::vector<std::byte> scratch;
  const void* p = contiguous(&dt, &scratch);
  return PackedMatrix::pack(p, dt, rows(), cols, store, pool);
}

PackedMatrix WeightSource::pack_default(ThreadPool* pool) const {
  bool mixed = false, any_quant = false;
  for (auto& b : blocks) {
    mixed = mixed || b.dtype != blocks[0].dtype;
    any_quant = any_quant || dtype_is_quant(b.dtype);
  }
  if (!mixed || !any_quant) return pack(default_store(), pool);
  const DType float_store = file_dtype == DType::BF16 ? DType::BF16 : DType::F32;
  std::vector<PackedMatrix> parts;
  for (size_t i = 0; i < blocks.size();) {
    size_t j = i + 1;
    while (j < blocks.size() && blocks[j].dtype == blocks[i].dtype) ++j;
    WeightSource run;  // no col_perm: stored order, the stack gathers the input
    run.cols = cols;
    run.file_dtype = file_dtype;
    run.blocks.assign(blocks.begin() + static_cast<std::ptrdiff_t>(i),
                      blocks.begin() + static_cast<std::ptrdiff_t>(j));
    parts.push_back(
        run.pack(dtype_is_quant(blocks[i].dtype) ? blocks[i].dtype : float_store, pool));
    i = j;
  }
  PackedMatrix pm = PackedMatrix::stack(std::move(parts));
  if (!col_perm.empty()) pm.set_k_perm(col_perm);
  return pm;
}

const WeightSource& WeightSet::get(const std::string& name) const {
  auto it = map_.find(name);
  REWIND_CHECK_MSG(it != map_.end(), "no weight '" + name + "'");
  return it->second;
}

Result<WeightSet> WeightSet::from_hf(const TensorSet& tensors, const ModelConfig& c) {
  WeightSet ws;
  Resolver R(tensors);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  auto plus1 = [](float x) { return x + 1.0f; };
  auto same = [](float x) { return x; };

  std::string P;
  if (tensors.find("model.language_model.embed_tokens.weight")) {
    P = "model.language_model.";
  } else if (tensors.find("model.embed_tokens.weight")) {
    P = "model.";
  } else {
    return make_error(std::string("checkpoint: missing tensor '") +
                      (c.multimodal_prefix ? "model.language_model." : "model.") +
                      "embed_tokens.weight'");
  }

  REWIND_TRY(auto* embed, R.need(P + "embed_tokens.weight", {V, H}));
  ws.map_["embed"] = Resolver::view(embed, V, H);
  const TensorView* lm = tensors.find("lm_head.weight");
  if (c.tie_word_embeddings || !lm) {
    ws.map_["lm_head"] = ws.map_["embed"];
  } else {
    REWIND_TRY(lm, R.need("lm_head.weight", {V, H}));
    ws.map_["lm_head"] = Resolver::view(lm, V, H);
  }
  REWIND_TRY(auto* fn, R.need(P + "norm.weight", {H}));
  ws.map_["final_norm"] = Resolver::owned(fn, 1, H, plus1);

  const int64_t Hk = c.lin_n_head_k, Hv = c.lin_n_head_v, dk = c.lin_dk, dv = c.lin_dv;
  const int64_t r = Hk > 0 ? Hv / Hk : 0, K = c.conv_kernel;
  const int64_t D = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;

  // Norms of a decoder layer (either kind): `lp` HF prefix, `cp` canonical prefix.
  auto map_norms = [&](const std::string& lp, const std::string& cp) -> Status {
    REWIND_TRY(auto* in_norm, R.need(lp + "input_layernorm.weight", {H}));
    REWIND_TRY(auto* post_norm, R.need(lp + "post_attention_layernorm.weight", {H}));
    ws.map_[cp + "in_norm"] = Resolver::owned(in_norm, 1, H, plus1);
    ws.map_[cp + "post_norm"] = Resolver::owned(post_norm, 1, H, plus1);
    return Ok{};
  };
  // Gated full attention from `ap` (…self_attn.) into `cp`.
  auto map_full_attention = [&](const std::string& ap, const std::string& cp) -> Status {
    REWIND_TRY(auto* q, R.need(ap + "q_proj.weight", {nh * 2 * D, H}));
    REWIND_TRY(auto* k, R.need(ap + "k_proj.weight", {nkv * D, H}));
    REWIND_TRY(auto* v, R.need(ap + "v_proj.weight", {nkv * D, H}));
    ws.map_[cp + "qkv"] = Resolver::stacked(
        H, q->dtype,
        {Resolver::rows_of(q, 0, nh * 2 * D, H), Resolver::rows_of(k, 0, nkv * D, H),
         Resolver::rows_of(v, 0, nkv * D, H)});
    REWIND_TRY(auto* qn, R.need(ap + "q_norm.weight", {D}));
    REWIND_TRY(auto* kn, R.need(ap + "k_norm.weight", {D}));
    ws.map_[cp + "q_norm"] = Resolver::owned(qn, 1, D, plus1);
    ws.map_[cp + "k_norm"] = Resolver::owned(kn, 1, D, plus1);
    REWIND_TRY(auto* o, R.need(ap + "o_proj.weight", {H, nh * D}));
    ws.map_[cp + "o_proj"] = Resolver::view(o, H, nh * D);
    return Ok{};
  };
  // SwiGLU of width F from `src`{gate,up,down}_proj.weight into `dst`{gate_up, down}.
  auto swiglu = [&](const std::string& src, const std::string& dst, int64_t F) -> Status {
    REWIND_TRY(auto* g, R.need(src + "gate_proj.weight", {F, H}));
    REWIND_TRY(auto* u, R.need(src + "up_proj.weight", {F, H}));
    REWIND_TRY(auto* d, R.need(src + "down_proj.weight", {H, F}));
    ws.map_[dst + "gate_up"] = Resolver::stacked(
        H, g->dtype, {Resolver::rows_of(g, 0, F, H), Resolver::rows_of(u, 0, F, H)});
    ws.map_[dst + "down"] = Resolver::view(d, H, F);
    return Ok{};
  };
  // Dense SwiGLU or MoE (router, experts in either layout, shared expert) from `mp` (…mlp.).
  auto map_mlp = [&](const std::string& mp, const std::string& cp, bool moe) -> Status {
    if (!moe) return swiglu(mp, cp, c.intermediate_size);
    const int64_t E = c.n_expert, Im = c.moe_intermediate_size,
                  Is = c.shared_expert_intermediate_size;
    REWIND_TRY(auto* router, R.need(mp + "gate.weight", {E, H}));
    ws.map_[cp + "router"] = Resolver::view(router, E, H);
    if (tensors.find(mp + "experts.gate_up_proj")) {
      // Fused 3-D experts: gate = the first Im rows of gate_up_proj[e], up = the next Im.
      REWIND_TRY(auto* gu, R.need(mp + "experts.gate_up_proj", {E, 2 * Im, H}));
      REWIND_TRY(auto* dn, R.need(mp + "experts.down_proj", {E, H, Im}));
      for (int64_t e = 0; e < E; ++e) {
        const std::string ep = cp + "e" + std::to_string(e) + ".";
        ws.map_[ep + "gate_up"] =
            Resolver::stacked(H, gu->dtype, {Resolver::rows_of(gu, e * 2 * Im, 2 * Im, H)});
        ws.map_[ep + "down"] =
            Resolver::stacked(Im, dn->dtype, {Resolver::rows_of(dn, e * H, H, Im)});
      }
    } else {
      for (int64_t e = 0; e < E; ++e)
        REWIND_TRY_STATUS(swiglu(mp + "experts." + std::to_string(e) + ".",
                                 cp + "e" + std::to_string(e) + ".", Im));
    }
    REWIND_TRY_STATUS(swiglu(mp + "shared_expert.", cp + "sh.", Is));
    REWIND_TRY(auto* sgate, R.need(mp + "shared_expert_gate.weight", {1, H}));
    ws.map_[cp + "sh.gate"] = Resolver::view(sgate, 1, H);
    return Ok{};
  };

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string lp = P + "layers." + std::to_string(il) + ".";
    const std::string cp = "l" + std::to_string(il) + ".";
    REWIND_TRY_STATUS(map_norms(lp, cp));

    if (c.layer_kinds[il] == LayerKind::Linear) {
      const std::string ap = lp + "linear_attn.";
      WeightSource in;
      in.cols = H;
      if (tensors.find(ap + "in_proj_qkvz.weight")) {
        // Qwen3-Next: rows grouped per key head g: [q_g (dk); k_g (dk); v_g (r dv); z_g (r dv)].
        const int64_t blk = 2 * dk + 2 * r * dv;
        REWIND_TRY(auto* qkvz, R.need(ap + "in_proj_qkvz.weight", {Hk * blk, H}));
        REWIND_TRY(auto* ba, R.need(ap + "in_proj_ba.weight", {2 * Hv, H}));
        in.file_dtype = qkvz->dtype;
        // One slice of every key-head group, for all groups in order.
        auto slices = [&](const TensorView* t, int64_t group_rows, int64_t at, int64_t n) {
          for (int64_t g = 0; g < Hk; ++g)
            in.blocks.push_back(Resolver::rows_of(t, g * group_rows + at, n, H));
        };
        slices(qkvz, blk, 0, dk);                    // q
        slices(qkvz, blk, dk, dk);                   // k
        slices(qkvz, blk, 2 * dk, r * dv);           // v
        slices(qkvz, blk, 2 * dk + r * dv, r * dv);  // z
        slices(ba, 2 * r, 0, r);                     // b
        slices(ba, 2 * r, r, r);                     // a
      } else {
        REWIND_TRY(auto* qkv, R.need(ap + "in_proj_qkv.weight", {c.conv_dim(), H}));
        REWIND_TRY(auto* z, R.need(ap + "in_proj_z.weight", {c.value_dim(), H}));
        REWIND_TRY(auto* b, R.need(ap + "in_proj_b.weight", {Hv, H}));
        REWIND_TRY(auto* a, R.need(ap + "in_proj_a.weight", {Hv, H}));
        in.file_dtype = qkv->dtype;
        in.blocks = {Resolver::rows_of(qkv, 0, c.conv_dim(), H),
                     Resolver::rows_of(z, 0, c.value_dim(), H), Resolver::rows_of(b, 0, Hv, H),
                     Resolver::rows_of(a, 0, Hv, H)};
      }
      ws.map_[cp + "in_proj"] = std::move(in);
      REWIND_TRY(auto* conv, R.need(ap + "conv1d.weight", {c.conv_dim(), 1, K}));
      ws.map_[cp + "conv"] = Resolver::owned(conv, c.conv_dim(), K, same);
      REWIND_TRY(auto* alog, R.need(ap + "A_log", {Hv}));
      ws.map_[cp + "A"] = Resolver::owned(alog, 1, Hv, [](float x) { return -std::exp(x); });
      REWIND_TRY(auto* dtb, R.need(ap + "dt_bias", {Hv}));
      ws.map_[cp + "dt_bias"] = Resolver::owned(dtb, 1, Hv, same);
      REWIND_TRY(auto* gn, R.need(ap + "norm.weight", {dv}));
      ws.map_[cp + "gnorm"] = Resolver::owned(gn, 1, dv, same);
      REWIND_TRY(auto* out, R.need(ap + "out_proj.weight", {H, c.value_dim()}));
      ws.map_[cp + "out_proj"] = Resolver::view(out, H, c.value_dim());
    } else {
      REWIND_TRY_STATUS(map_full_attention(lp + "self_attn.", cp));
    }
    REWIND_TRY_STATUS(map_mlp(lp + "mlp.", cp, c.layer_is_moe(il)));
  }

  // MTP head (docs/QWEN35.md 2.5): absent altogether is fine; partly present or mis-shaped is
  // an error naming the tensor.
  bool any_mtp = false;
  for (auto& n : tensors.names()) any_mtp = any_mtp || n.rfind("mtp.", 0) == 0;
  if (c.mtp_num_hidden_layers > 0 && any_mtp) {
    auto mtp = [&]() -> Status {
      REWIND_TRY(auto* fc, R.need("mtp.fc.weight", {H, 2 * H}));
      ws.map_["mtp.fc"] = Resolver::view(fc, H, 2 * H);
      REWIND_TRY(auto* en, R.need("mtp.pre_fc_norm_embedding.weight", {H}));
      ws.map_["mtp.enorm"] = Resolver::owned(en, 1, H, plus1);
      REWIND_TRY(auto* hn, R.need("mtp.pre_fc_norm_hidden.weight", {H}));
      ws.map_["mtp.hnorm"] = Resolver::owned(hn, 1, H, plus1);
      REWIND_TRY(auto* mn, R.need("mtp.norm.weight", {H}));
      ws.map_["mtp.norm"] = Resolver::owned(mn, 1, H, plus1);
      for (int64_t j = 0; j < c.mtp_num_hidden_layers; ++j) {
        const std::string lp = "mtp.layers." + std::to_string(j) + ".";
        const std::string cp = "l" + std::to_string(c.n_layer + j) + ".";
        REWIND_TRY_STATUS(map_norms(lp, cp));
        REWIND_TRY_STATUS(map_full_attention(lp + "self_attn.", cp));
        REWIND_TRY_STATUS(map_mlp(lp + "mlp.", cp, c.mtp_layer_is_moe()));
      }
      return Ok{};
    };
    Status st = mtp();
    if (!st.ok())
      return make_error(st.error_message() + " (MTP head: mtp_num_hidden_layers = " +
                        std::to_string(c.mtp_num_hidden_layers) +
                        " and some mtp.* tensors are present)");
    ws.has_mtp_ = true;
  }
  for (auto& n : tensors.names())
    if (n.rfind("mtp.", 0) == 0) ws.mtp_names_.push_back(n);
  return ws;
}

}  // namespace rw
