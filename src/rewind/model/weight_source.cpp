#include "rewind/model/weight_source.h"

#include <cmath>
#include <cstring>

#include "rewind/model/arch.h"
#include "rewind/tensor/quant.h"
#include "rewind/tensor/shape.h"

namespace rw {

namespace {

const std::byte* row_ptr(const RowBlock& b, int64_t r, int64_t cols) {
  return static_cast<const std::byte*>(b.data) +
         static_cast<size_t>(r) * dtype_row_bytes(b.dtype, cols);
}

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
  REWIND_TRY_STATUS(architecture_of(c.family).map_hf(tensors, c, &ws));
  return ws;
}

// Built by appends: GCC 12 warns falsely (-Wrestrict) on "l" + std::to_string(il) when inlined.
std::string layer_prefix(int64_t il) {
  std::string p = "l";
  p += std::to_string(il);
  p += '.';
  return p;
}

}  // namespace rw
