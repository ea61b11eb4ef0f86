// GGUF (v2/v3) reader (mmap'd, zero-copy) and writer. No model knowledge here: typed metadata,
// tensor infos and the bytes of each tensor, as ggml's gguf.cpp defines the file.
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv pairs (string key,
// u32 value type, value); n_tensors infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml
// type, u64 offset); zero padding to `general.alignment` (default 32); the data section.
// Strings are u64 length + bytes (no NUL). ne[0] is the contiguous axis (numpy's last).
//
// The reader never reads outside the given bytes. Every malformed input is an Error of one line
// naming the file (and the key or tensor): bad magic or version, truncated header or data,
// counts that cannot fit the file, duplicate keys or tensor names, nested arrays, unknown value
// or tensor types, a bad alignment, more than 4 dims, negative dims or an element count that
// overflows, ne[0] not a multiple of the type's block, offsets that are not the running sum of
// the previous tensors' padded sizes (llama.cpp requires exactly that order), a tensor past the
// end of the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rewind/base/result.h"

namespace rw {

class MappedFile;

// ggml tensor type codes (ggml.h). The reader knows the block size of each so it can check
// sizes and offsets; which of them a model can use is the model's business.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeInfo {
  const char* name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};
// nullptr for a code ggml does not define (or a removed one, like Q4_2).
const GgmlTypeInfo* ggml_type_info(uint32_t code);
std::string ggml_type_name(uint32_t code);  // "Q4_K", or "type 99" when unknown
// Bytes of a row of n elements (n must be a multiple of the block size).
int64_t ggml_row_bytes(GgmlType t, int64_t n);

enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Integers of every width live in `i` (u64 values above INT64_MAX are kept
// in `u` only, with is_big_u64); floats in `f`; arrays in the vector of their kind.
struct GgufValue {
  GgufValueType type = GgufValueType::U32;
  GgufValueType elem = GgufValueType::U32;  // arrays: element type
  int64_t i = 0;
  uint64_t u = 0;
  bool is_big_u64 = false;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;      // arrays of integers or bools
  std::vector<double> floats;     // arrays of f32/f64
  std::vector<std::string> strs;  // arrays of strings

  bool is_int() const;    // any integer type or bool
  bool is_float() const;  // F32 or F64
  bool is_array() const { return type == GgufValueType::ARRAY; }
  size_t array_size() const;
  std::string type_str() const;  // "u32", "array of string", ...

  // Builders for the writer.
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue array_i32(std::vector<int64_t> v);
  static GgufValue array_bool(std::vector<int64_t> v);
  static GgufValue array_f32(std::vector<double> v);
  static GgufValue array_string(std::vector<std::string> v);
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;          // ggml order: ne[0] contiguous
  uint64_t offset = 0;              // relative to the data section
  const std::byte* data = nullptr;  // valid while the GgufFile lives
  size_t nbytes = 0;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
  }
};

// A parsed GGUF file. Copies are cheap and share the mapping.
class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  // Parse from memory (`data` must outlive the object); `where` names it in errors.
  static Result<GgufFile> parse(const std::byte* data, size_t size, const std::string& where);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // file order
  const GgufTensor* find(const std::string& name) const;               // nullptr if absent
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* get(const std::string& key) const;  // nullptr if absent

  // Typed lookups: an Error names the file and key when the key is absent or ill-typed
  // (`m.gguf: key 'qwen35.block_count' must be an integer (got string)`); the *_or variants
  // return `def` when absent but still fail on a wrong type.
  Result<int64_t> get_int(const std::string& key) const;
  Result<int64_t> get_int_or(const std::string& key, int64_t def) const;
  Result<double> get_float(const std::string& key) const;  // floats or integers
  Result<double> get_float_or(const std::string& key, double def) const;
  Result<bool> get_bool_or(const std::string& key, bool def) const;
  Result<std::string> get_string(const std::string& key) const;
  Result<std::string> get_string_or(const std::string& key, const std::string& def) const;
  Result<std::vector<std::string>> get_strings(const std::string& key) const;
  Result<std::vector<int64_t>> get_ints(const std::string& key) const;  // integer/bool arrays

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::shared_ptr<MappedFile> map_;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// Writer. Keys are written in the given order (general.architecture first, as gguf-py does),
// tensors in the given order with offsets the running sum of sizes padded to `alignment`.
// Each tensor's bytes come from `fill`, called once in order with a buffer of exactly the
// tensor's size (so a converter never holds more than one tensor's output). Written to
// `path`.tmp and renamed. Errors: duplicate keys/names, a name of 64 bytes or more, more than
// 4 dims, ne[0] not a multiple of the block, unknown type, a bad alignment, I/O failures.
struct GgufTensorToWrite {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ggml order
  std::function<Status(std::byte* out, size_t nbytes)> fill;
};
Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
                  const std::vector<GgufTensorToWrite>& tensors, uint32_t alignment = 32);
// The same file as bytes in memory (tests, fuzz seeds).
Result<std::vector<std::byte>> gguf_to_bytes(
    const std::vector<std::pair<std::string, GgufValue>>& kv,
    const std::vector<GgufTensorToWrite>& tensors, uint32_t alignment = 32);

}  // namespace rw
