// Safetensors reader (mmap'd, zero-copy) and writer. No model knowledge here.
// Format: u64 LE header length N; N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {...}}; then the data section (offsets relative to its start).
//
// Every malformed input (truncated file, bad header JSON, offsets out of range or overlapping
// the wrong size, unknown dtype, shape/size mismatch) is an Error naming the file and tensor.
// Errors are one line: `<file>: tensor '<name>': <what is wrong>`. The reader never reads
// outside the given bytes. Offsets need not tile the data section (unused gaps and shared
// ranges are accepted, as they are harmless to a read-only reader), but every tensor's range
// must lie inside it and hold exactly numel * dtype_size bytes.
//
// Alignment: a tensor's `data` is aligned only as far as the writer aligned it (the data
// section starts 8-aligned in files from write_safetensors and the HF writers, and tensors
// follow each other without padding). Copy with memcpy, or check alignment before casting.
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
  std::string file;  // file it came from, for error messages
  // Product of the dims (1 for a scalar, shape []). The reader guarantees it cannot overflow.
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// One .safetensors file, mmap'd read-only. Copies are cheap and share the mapping; the
// TensorView pointers of a copy point into the same (shared) bytes.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  // Parse from memory (used by the fuzz target; `data` must outlive the object). `where` names
  // the source in errors and in TensorView::file. Cost: one JSON parse of the header.
  static Result<SafetensorsFile> parse(const std::byte* data, size_t size,
                                       const std::string& where);

  // In data-section order (by begin offset, then name), not header order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }  // `where` for parse()

 private:
  std::string path_;
  std::shared_ptr<MappedFile> map_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` (weight_map), or (fallback) every *.safetensors file.
// Duplicate tensor names across shards are an error; so is a weight_map entry whose shard
// lacks the tensor.
//
// Which files: the index if present (only the shards it names are opened; tensors a shard holds
// beyond its weight_map entries are kept), else `model.safetensors`, else all `*.safetensors`
// regular files in name order. Shard names in the index must be plain file names.
// Move-only: find() pointers stay valid across moves, for the life of the set.
class TensorSet {
 public:
  static Result<TensorSet> open_dir(const std::string& dir);
  // A set over files already opened or parsed (e.g. SafetensorsFile::parse of a checkpoint made
  // in memory); the same duplicate-name check as open_dir.
  static Result<TensorSet> from_files(std::vector<SafetensorsFile> files);
  TensorSet() = default;
  TensorSet(TensorSet&&) noexcept = default;
  TensorSet& operator=(TensorSet&&) noexcept = default;
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;

  const TensorView* find(const std::string& name) const;  // nullptr if absent
  std::vector<std::string> names() const;                 // sorted
  size_t total_bytes() const;                             // sum of nbytes of all tensors
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  Status build_index();
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const TensorView*> index_;
};

// Writer. Tensors are written in the given order, data 8-byte aligned (header padded with
// spaces), as the reference writers do. `__metadata__` comes first in the header when given.
// The file is written to `path`.tmp and renamed over `path`. Errors: duplicate or reserved
// names, negative dims, null data for a non-empty tensor, I/O failures (with strerror).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // numel * dtype_size bytes
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace rw
