// Finds the tensors of a llama.cpp GGUF file by name and checks their shapes and types; reads the
// metadata keys of one architecture; and the layer mappers shared by the families whose GGUF
// layers share names (model/gguf_layers.cpp). Internal to the model layer (model/arch_*.cpp,
// model/gguf_model.cpp).
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/io/gguf.h"
#include "rewind/model/config.h"
#include "rewind/model/weight_source.h"
#include "rewind/tensor/quant.h"
#include "rewind/tensor/shape.h"

namespace rw {

inline bool dtype_from_ggml(GgmlType t, DType* out) {
  switch (t) {
    case GgmlType::F32:
      *out = DType::F32;
      return true;
    case GgmlType::F16:
      *out = DType::F16;
      return true;
    case GgmlType::BF16:
      *out = DType::BF16;
      return true;
    default:
      if (const QuantTraits* q = quant_traits_by_ggml(static_cast<uint32_t>(t))) {
        *out = q->type;
        return true;
      }
      return false;
  }
}

// A tensor found and checked: numpy-order shape, rewind dtype.
// Qwen3.5's Gated DeltaNet value heads in llama.cpp's files: stored position of the model's
// (grouped-order) value head h (tiled when value heads outnumber key heads, but in qwen3next).
struct VHeads {
  bool tiled = false;
  int64_t Hk = 1, r = 1;
  int64_t pos(int64_t h) const { return tiled ? (h % r) * Hk + h / r : h; }
  int64_t head_at(int64_t t) const { return tiled ? (t % Hk) * r + t / Hk : t; }  // inverse
};

inline VHeads vheads(const ModelConfig& c) {
  VHeads v;
  v.Hk = std::max<int64_t>(c.lin_n_head_k, 1);  // Mamba2 families: no GDN heads
  v.r = c.lin_n_head_k > 0 ? c.lin_n_head_v / c.lin_n_head_k : 1;
  v.tiled = c.family != Family::Qwen3Next && v.r > 1;
  return v;
}

struct GgufFound {
  const GgufTensor* t = nullptr;
  DType dtype = DType::F32;
};

class GgufResolver {
 public:
  explicit GgufResolver(const GgufFile& f) : f_(f) {}
  bool has(const std::string& name) const { return f_.find(name) != nullptr; }
  const GgufFile& file() const { return f_; }

  // `shape` in numpy order (HF order): the reverse of ne.
  Result<GgufFound> need(const std::string& name, std::vector<int64_t> shape) const {
    const GgufTensor* t = f_.find(name);
    if (!t)
      return make_error(f_.path() + ": missing tensor '" + name + "' (expected shape " +
                        shape_str(shape) + ")");
    GgufFound r{t, DType::F32};
    if (!dtype_from_ggml(t->type, &r.dtype)) {
      std::string types = "F32, F16, BF16";
      for (const QuantTraits& q : kQuantTraits) (types += ", ") += q.name;
      return make_error(f_.path() + ": tensor '" + name + "': type " +
                        ggml_type_name(static_cast<uint32_t>(t->type)) +
                        " is not supported for weights (" + types + ")");
    }
    std::vector<int64_t> got(t->ne.rbegin(), t->ne.rend());
    if (!same_ggml_shape(t->ne, shape))
      return make_error(f_.path() + ": tensor '" + name + "': shape " + shape_str(got) +
                        " (ne reversed), expected " + shape_str(shape));
    return r;
  }

  // ggml's rule: ne is padded with 1s to four dims, so a writer may drop trailing 1s from ne
  // (llama.cpp writes ggml_n_dims of them: a [d_inner, 1] norm becomes [d_inner]).
  static bool same_ggml_shape(const std::vector<int64_t>& ne, const std::vector<int64_t>& shape) {
    std::vector<int64_t> a = ne, b(shape.rbegin(), shape.rend());
    while (a.size() > 1 && a.back() == 1) a.pop_back();
    while (b.size() > 1 && b.back() == 1) b.pop_back();
    return a == b;
  }

  static RowBlock rows_of(const GgufFound& v, int64_t r0, int64_t n, int64_t cols) {
    return RowBlock{v.t->data + static_cast<size_t>(r0) * dtype_row_bytes(v.dtype, cols), v.dtype,
                    n, nullptr};
  }
  static WeightSource view(const GgufFound& v, int64_t rows, int64_t cols) {
    WeightSource w;
    w.cols = cols;
    w.file_dtype = v.dtype;
    w.blocks.push_back(rows_of(v, 0, rows, cols));
    return w;
  }
  // A small tensor as f32 [rows, cols]; output row r is stored row src_row(r) (the tensor is
  // dequantised whole, with ne[0] as its row length, whatever its type).
  static WeightSource owned(const GgufFound& v, int64_t rows, int64_t cols,
                            const std::function<int64_t(int64_t)>& src_row = nullptr) {
    const int64_t ne0 = v.t->ne[0], n = v.t->numel();
    std::vector<float> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n / ne0; ++i)
      convert_row_to_f32(v.t->data + static_cast<size_t>(i) * dtype_row_bytes(v.dtype, ne0),
                         v.dtype, ne0, all.data() + i * ne0);
    auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t s = src_row ? src_row(r) : r;
      std::memcpy(buf->data() + r * cols, all.data() + s * cols, static_cast<size_t>(cols) * 4);
    }
    WeightSource w;
    w.cols = cols;
    w.file_dtype = v.dtype;
    w.blocks.push_back(RowBlock{buf->data(), DType::F32, rows, buf});
    return w;
  }

 private:
  const GgufFile& f_;
};

// Integer and float keys of one architecture (`<arch>.` prefix); errors name the file and key.
class GgufKeys {
 public:
  GgufKeys(const GgufFile& g, std::string arch) : g_(g), a_(std::move(arch) + ".") {}
  const GgufFile& file() const { return g_; }
  std::string key(const std::string& k) const { return a_ + k; }
  bool has(const std::string& k) const { return g_.get(a_ + k) != nullptr; }
  Error err(const std::string& k, const std::string& what) const {
    return make_error(g_.path() + ": key '" + a_ + k + "' " + what);
  }
  Result<int64_t> req(const std::string& k, int64_t lo, int64_t hi) const;
  Result<int64_t> opt(const std::string& k, int64_t def, int64_t lo, int64_t hi) const;
  // A positive finite float, `def` when absent.
  Result<double> positive(const std::string& k, double def) const;
  // A per-layer key: an array of n integers, or one integer for every layer (llama.cpp reads
  // either); `def` for every layer when absent and def >= 0, else the key is required.
  Result<std::vector<int64_t>> per_layer(const std::string& k, int64_t n, int64_t lo, int64_t hi,
                                         int64_t def = -1) const;

 private:
  const GgufFile& g_;
  std::string a_;
};

// The Mamba2 keys (`ssm.*`) into c: ssm_n_head (time_step_rank), ssm_head_dim (inner_size / heads),
// ssm_d_state, ssm_n_group, conv_kernel, with their consistency checks; ssm_norm_groups = G.
Status mamba2_sizes_from_gguf(const GgufKeys& k, ModelConfig* c);
// The sizes shared by the Mamba2 hybrids' files: vocab (token_embd), hidden, block count, heads,
// rms epsilon, context length, tied embeddings (no output.weight), bos / eos ids. eps_fallback:
// without attention.layer_norm_rms_epsilon, attention.layer_norm_epsilon is the epsilon.
Status hybrid_basics_from_gguf(const GgufKeys& k, ModelConfig* c, bool eps_fallback = false);

// The end-of-generation ids of a GGUF file, as llama.cpp finds them for the vocabularies rewind
// runs: tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id, and every token whose text
// is one of llama.cpp's end-of-turn texts (<|im_end|>, <|endoftext|>, <|end_of_text|>, </s>,
// <|eot_id|>, ...), ascending. llama.cpp's FIM tokens (also ends there) and its gpt-oss and
// Gemma exceptions are left out. An id outside [0, vocab_size) is dropped with a warning.
Result<std::vector<int64_t>> gguf_end_of_generation_ids(const GgufFile& g, int64_t vocab_size);

// One kv-head count for every attention layer from the per-layer head_count_kv (0 elsewhere; all
// zero: n_head), and key_length = value_length (default hidden / heads) into c.
Status attention_sizes_from_gguf(const GgufKeys& k, const std::vector<int64_t>& kv, ModelConfig* c);

// Layer mappers shared by the Mamba2 hybrids (llama.cpp names; `p` = "blk.N.", `cp` = "lN.";
// canonical names in model/weight_source.h). Mamba2: ssm_in, ssm_conv1d (+ bias when
// c.ssm_conv_bias, else zeros), ssm_a (already -exp(A_log)), ssm_d, ssm_dt.bias, ssm_norm
// {d_inner / G, G} read as [d_inner], ssm_out.
Status map_mamba2_gguf(const GgufResolver& R, const std::string& p, const std::string& cp,
                       const ModelConfig& c, WeightSet* ws);
// Attention without output gate or q/k norms: attn_q, attn_k, attn_v, attn_output.
Status map_plain_attention_gguf(const GgufResolver& R, const std::string& p, const std::string& cp,
                                const ModelConfig& c, WeightSet* ws);
// A norm of n values (stored as is), put under the canonical name `dst`.
Status map_norm_gguf(const GgufResolver& R, const std::string& name, int64_t n,
                     const std::string& dst, WeightSet* ws);
// token_embd, output (or tied), output_norm.
Status map_head_gguf(const GgufResolver& R, const ModelConfig& c, WeightSet* ws);

}  // namespace rw
