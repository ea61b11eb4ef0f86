// Finds the tensors of a Hugging Face checkpoint by name and turns them into WeightSources
// (views into the mapping, or small f32 copies where a transform made new values); shared by
// the families' mappers (model/arch_*.cpp). Internal to the model layer.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/io/safetensors.h"
#include "rewind/model/weight_source.h"
#include "rewind/tensor/quant.h"
#include "rewind/tensor/shape.h"

namespace rw {

// Finds tensors of one checkpoint and turns them into WeightSources.
class HfResolver {
 public:
  explicit HfResolver(const TensorSet& t) : t_(t) {}

  // Where the checkpoint is, for messages: its files' directory ("checkpoint" for one made in
  // memory).
  static std::string where(const TensorSet& t) {
    if (t.files().empty() || t.files()[0].path().empty()) return "checkpoint";
    const std::string dir = std::filesystem::path(t.files()[0].path()).parent_path().string();
    return "checkpoint " + (dir.empty() ? std::string(".") : dir);
  }

  Result<const TensorView*> need(const std::string& name, std::vector<int64_t> shape) const {
    const TensorView* v = t_.find(name);
    if (!v)
      return make_error(where(t_) + ": missing tensor '" + name + "' (expected shape " +
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

  bool has(const std::string& name) const { return t_.find(name) != nullptr; }

 private:
  const TensorSet& t_;
};

// Layer mappers shared by families whose HF tensors share names (model/hf_layers.cpp). `src`
// is the HF prefix of the module (e.g. "model.layers.3.mamba."), `cp` the canonical layer
// prefix ("l3."). Shapes from `c`; names in model/weight_source.h.
// Mamba2 mixer: in_proj, conv1d (bias when c.ssm_conv_bias, else zeros), dt_bias, A_log, D,
// norm, out_proj.
Status map_mamba2_hf(const HfResolver& R, const std::string& src, const std::string& cp,
                     const ModelConfig& c, WeightSet* ws);
// Attention without output gate or q/k norms: q_proj, k_proj, v_proj, o_proj.
Status map_plain_attention_hf(const HfResolver& R, const std::string& src, const std::string& cp,
                              const ModelConfig& c, WeightSet* ws);
// A plain norm (no +1) of n values, put under the canonical name `dst`.
Status map_norm_hf(const HfResolver& R, const std::string& name, int64_t n, const std::string& dst,
                   WeightSet* ws);

}  // namespace rw
