// Safetensors reader (mmap'd, zero-copy) and writer. No model knowledge here.
// Format: u64 LE header length N; N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {...}}; then the data section (offsets relative to its start).
//
// Every malformed input (truncated file, bad header JSON, offsets out of range or overlapping
// the wrong size, unknown dtype, shape/size mismatch) is an Error naming the file and tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/tensor/dtype.h"

namespace rw {

class MappedFile;  // io/mmap_file.h

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // valid while the owning file/set lives
  size_t nbytes = 0;
  std::string file;                 // file it came from, for error messages
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// One .safetensors file, mmap'd read-only.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  // Parse from memory (used by the fuzz target; `data` must outlive the object).
  static Result<SafetensorsFile> parse(const std::byte* data, size_t size, const std::string& where);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::shared_ptr<MappedFile> map_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` (weight_map), or (fallback) every *.safetensors file.
// Duplicate tensor names across shards are an error; so is a weight_map entry whose shard
// lacks the tensor.
class TensorSet {
 public:
  static Result<TensorSet> open_dir(const std::string& dir);
  const TensorView* find(const std::string& name) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const;

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const TensorView*> index_;
};

// Writer. Tensors are written in the given order, data 8-byte aligned (header padded with
// spaces), as the reference writers do.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;   // numel * dtype_size bytes
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace rw
