#include "rewind/io/gguf.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "rewind/io/mmap_file.h"
#include "rewind/tensor/dtype.h"

namespace rw {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr size_t kMaxName = 64;          // GGML_MAX_NAME: names are shorter than this
constexpr uint32_t kMaxDims = 4;
constexpr size_t kMaxQuoted = 120;

std::string quote(const std::string& s) {
  std::string out = "'";
  const size_t n = std::min(s.size(), kMaxQuoted);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > n) out += "...";
  return out + "'";
}

struct TypeRow {
  uint32_t code;
  GgmlTypeInfo info;
};
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};
// The formats rewind stores (kQuantTraits) have ggml's name and block shape here.
static_assert(
    [] {
      for (const QuantTraits& q : kQuantTraits) {
        bool found = false;
        for (const TypeRow& r : kTypes)
          if (r.code == q.ggml_type)
            found = std::string_view(r.info.name) == q.name &&
                    r.info.block_elems == q.block_elems && r.info.block_bytes == q.block_bytes;
        if (!found) return false;
      }
      return true;
    }(),
    "kQuantTraits disagrees with ggml's type table");

// Bounds-checked little-endian cursor over the header.
class Cursor {
 public:
  Cursor(const std::byte* p, size_t n, const std::string& where) : p_(p), n_(n), where_(where) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }

  template <typename T>
  Result<T> read(const char* what) {
    if (left() < sizeof(T))
      return make_error(where_ + ": truncated: " + what + " at byte " + std::to_string(pos_) +
                        " needs " + std::to_string(sizeof(T)) + " bytes, " +
                        std::to_string(left()) + " left");
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  Result<std::string> str(const char* what) {
    REWIND_TRY(uint64_t len, read<uint64_t>(what));
    if (len > left())
      return make_error(where_ + ": truncated: " + what + " at byte " + std::to_string(pos_) +
                        " has length " + std::to_string(len) + ", " + std::to_string(left()) +
                        " bytes left");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const std::byte* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& where_;
};

// Smallest encoded size of one element of a value type (bounds array counts before reserving).
size_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8:
    case GgufValueType::I8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::U16:
    case GgufValueType::I16:
      return 2;
    case GgufValueType::U32:
    case GgufValueType::I32:
    case GgufValueType::F32:
      return 4;
    case GgufValueType::U64:
    case GgufValueType::I64:
    case GgufValueType::F64:
    case GgufValueType::STRING:
      return 8;
    case GgufValueType::ARRAY:
      return 12;
  }
  return 1;
}

bool known_value_type(uint32_t t) {
  return t <= 12;
}

// Reads one scalar of type t into v (integers to v.i / v.u, floats to v.f, strings to v.s).
Status read_scalar(Cursor& c, GgufValueType t, GgufValue& v, const std::string& where,
                   const std::string& key) {
  auto as_i = [&](auto r) -> Status {
    if (!r.ok()) return r.error();
    v.i = static_cast<int64_t>(r.value());
    v.u = static_cast<uint64_t>(r.value());
    return Ok{};
  };
  switch (t) {
    case GgufValueType::U8:
      return as_i(c.read<uint8_t>("value"));
    case GgufValueType::I8:
      return as_i(c.read<int8_t>("value"));
    case GgufValueType::U16:
      return as_i(c.read<uint16_t>("value"));
    case GgufValueType::I16:
      return as_i(c.read<int16_t>("value"));
    case GgufValueType::U32:
      return as_i(c.read<uint32_t>("value"));
    case GgufValueType::I32:
      return as_i(c.read<int32_t>("value"));
    case GgufValueType::I64:
      return as_i(c.read<int64_t>("value"));
    case GgufValueType::U64: {
      REWIND_TRY(uint64_t x, c.read<uint64_t>("value"));
      v.u = x;
      v.is_big_u64 = x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      v.i = v.is_big_u64 ? 0 : static_cast<int64_t>(x);
      return Ok{};
    }
    case GgufValueType::BOOL: {
      REWIND_TRY(uint8_t x, c.read<uint8_t>("value"));
      if (x > 1)
        return make_error(where + ": key " + quote(key) + ": bool value " + std::to_string(x) +
                          " is neither 0 nor 1");
      v.i = x;
      v.u = x;
      return Ok{};
    }
    case GgufValueType::F32: {
      REWIND_TRY(float x, c.read<float>("value"));
      v.f = x;
      return Ok{};
    }
    case GgufValueType::F64: {
      REWIND_TRY(double x, c.read<double>("value"));
      v.f = x;
      return Ok{};
    }
    case GgufValueType::STRING: {
      REWIND_TRY(v.s, c.str("string value"));
      return Ok{};
    }
    case GgufValueType::ARRAY:
      break;
  }
  return make_error(where + ": key " + quote(key) + ": nested arrays are not supported");
}

bool is_int_type(GgufValueType t) {
  return t == GgufValueType::U8 || t == GgufValueType::I8 || t == GgufValueType::U16 ||
         t == GgufValueType::I16 || t == GgufValueType::U32 || t == GgufValueType::I32 ||
         t == GgufValueType::U64 || t == GgufValueType::I64 || t == GgufValueType::BOOL;
}

uint64_t pad_to(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// Byte sink for the writer: a file or a vector.
struct Sink {
  FILE* f = nullptr;
  std::vector<std::byte>* mem = nullptr;
  std::string where;
  uint64_t written = 0;
  Status put(const void* p, size_t n) {
    if (n == 0) return Ok{};
    if (mem) {
      const auto* b = static_cast<const std::byte*>(p);
      mem->insert(mem->end(), b, b + n);
    } else if (std::fwrite(p, 1, n, f) != n) {
      return make_error(where + ": write failed: " + std::strerror(errno));
    }
    written += n;
    return Ok{};
  }
  template <typename T>
  Status pod(T v) {
    return put(&v, sizeof v);
  }
  Status str(const std::string& s) {
    REWIND_TRY_STATUS(pod<uint64_t>(s.size()));
    return put(s.data(), s.size());
  }
  Status zeros(uint64_t n) {
    static const std::byte z[256] = {};
    while (n > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof z));
      REWIND_TRY_STATUS(put(z, k));
      n -= k;
    }
    return Ok{};
  }
};

Status put_scalar(Sink& s, GgufValueType t, const GgufValue& v, size_t idx, bool array) {
  const bool is_f = t == GgufValueType::F32 || t == GgufValueType::F64;
  const bool is_s = t == GgufValueType::STRING;
  const int64_t i = array && !is_f && !is_s ? v.ints[idx] : v.i;
  const double f = array && is_f ? v.floats[idx] : v.f;
  switch (t) {
    case GgufValueType::U8:
      return s.pod<uint8_t>(static_cast<uint8_t>(i));
    case GgufValueType::I8:
      return s.pod<int8_t>(static_cast<int8_t>(i));
    case GgufValueType::U16:
      return s.pod<uint16_t>(static_cast<uint16_t>(i));
    case GgufValueType::I16:
      return s.pod<int16_t>(static_cast<int16_t>(i));
    case GgufValueType::U32:
      return s.pod<uint32_t>(static_cast<uint32_t>(i));
    case GgufValueType::I32:
      return s.pod<int32_t>(static_cast<int32_t>(i));
    case GgufValueType::U64:
      return s.pod<uint64_t>(array ? static_cast<uint64_t>(i) : v.u);
    case GgufValueType::I64:
      return s.pod<int64_t>(i);
    case GgufValueType::BOOL:
      return s.pod<uint8_t>(i ? 1 : 0);
    case GgufValueType::F32:
      return s.pod<float>(static_cast<float>(f));
    case GgufValueType::F64:
      return s.pod<double>(f);
    case GgufValueType::STRING:
      return s.str(array ? v.strs[idx] : v.s);
    case GgufValueType::ARRAY:
      break;
  }
  return make_error(s.where + ": nested arrays are not supported");
}

Status write_all(Sink& s, const std::vector<std::pair<std::string, GgufValue>>& kv,
                 const std::vector<GgufTensorToWrite>& tensors, uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return make_error(s.where + ": alignment " + std::to_string(alignment) +
                      " is not a power of two");
  std::set<std::string> keys, names;
  for (auto& [k, v] : kv)
    if (!keys.insert(k).second) return make_error(s.where + ": duplicate key " + quote(k));
  std::vector<uint64_t> sizes;
  for (auto& t : tensors) {
    if (!names.insert(t.name).second)
      return make_error(s.where + ": duplicate tensor " + quote(t.name));
    if (t.name.size() >= kMaxName)
      return make_error(s.where + ": tensor " + quote(t.name) + ": name longer than 63 bytes");
    const GgmlTypeInfo* ti = ggml_type_info(static_cast<uint32_t>(t.type));
    if (!ti) return make_error(s.where + ": tensor " + quote(t.name) + ": unknown type");
    if (t.ne.empty() || t.ne.size() > kMaxDims)
      return make_error(s.where + ": tensor " + quote(t.name) + ": needs 1 to 4 dims");
    int64_t n = 1;
    for (auto d : t.ne) {
      if (d < 0) return make_error(s.where + ": tensor " + quote(t.name) + ": negative dim");
      n *= d;
    }
    if (t.ne[0] % ti->block_elems != 0)
      return make_error(s.where + ": tensor " + quote(t.name) +
                        ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                        ti->name + " block (" + std::to_string(ti->block_elems) + ")");
    sizes.push_back(static_cast<uint64_t>(n / ti->block_elems * ti->block_bytes));
  }
  std::vector<std::pair<std::string, GgufValue>> all = kv;
  if (alignment != 32 && !keys.count("general.alignment"))
    all.emplace_back("general.alignment", GgufValue::u32(alignment));

  REWIND_TRY_STATUS(s.pod<uint32_t>(kMagic));
  REWIND_TRY_STATUS(s.pod<uint32_t>(3));
  REWIND_TRY_STATUS(s.pod<uint64_t>(tensors.size()));
  REWIND_TRY_STATUS(s.pod<uint64_t>(all.size()));
  for (auto& [k, v] : all) {
    REWIND_TRY_STATUS(s.str(k));
    REWIND_TRY_STATUS(s.pod<uint32_t>(static_cast<uint32_t>(v.type)));
    if (v.type == GgufValueType::ARRAY) {
      REWIND_TRY_STATUS(s.pod<uint32_t>(static_cast<uint32_t>(v.elem)));
      const size_t n = v.array_size();
      REWIND_TRY_STATUS(s.pod<uint64_t>(n));
      for (size_t i = 0; i < n; ++i) REWIND_TRY_STATUS(put_scalar(s, v.elem, v, i, true));
    } else {
      REWIND_TRY_STATUS(put_scalar(s, v.type, v, 0, false));
    }
  }
  uint64_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    REWIND_TRY_STATUS(s.str(t.name));
    REWIND_TRY_STATUS(s.pod<uint32_t>(static_cast<uint32_t>(t.ne.size())));
    for (auto d : t.ne) REWIND_TRY_STATUS(s.pod<uint64_t>(static_cast<uint64_t>(d)));
    REWIND_TRY_STATUS(s.pod<uint32_t>(static_cast<uint32_t>(t.type)));
    REWIND_TRY_STATUS(s.pod<uint64_t>(off));
    off += pad_to(sizes[i], alignment);
  }
  REWIND_TRY_STATUS(s.zeros(pad_to(s.written, alignment) - s.written));
  std::vector<std::byte> buf;
  for (size_t i = 0; i < tensors.size(); ++i) {
    buf.assign(static_cast<size_t>(sizes[i]), std::byte{0});
    if (!tensors[i].fill)
      return make_error(s.where + ": tensor " + quote(tensors[i].name) + ": no data");
    REWIND_TRY_STATUS(tensors[i].fill(buf.data(), buf.size()));
    REWIND_TRY_STATUS(s.put(buf.data(), buf.size()));
    REWIND_TRY_STATUS(s.zeros(pad_to(sizes[i], alignment) - sizes[i]));
  }
  return Ok{};
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t code) {
  for (const auto& r : kTypes)
    if (r.code == code) return &r.info;
  return nullptr;
}

std::string ggml_type_name(uint32_t code) {
  const GgmlTypeInfo* t = ggml_type_info(code);
  return t ? std::string(t->name) : "type " + std::to_string(code);
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeInfo* ti = ggml_type_info(static_cast<uint32_t>(t));
  REWIND_CHECK(ti && n % ti->block_elems == 0);
  return n / ti->block_elems * ti->block_bytes;
}

const char* gguf_value_type_name(GgufValueType t) {
  static const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "?";
}

bool GgufValue::is_int() const {
  return is_int_type(type);
}
bool GgufValue::is_float() const {
  return type == GgufValueType::F32 || type == GgufValueType::F64;
}
size_t GgufValue::array_size() const {
  if (type != GgufValueType::ARRAY) return 0;
  if (elem == GgufValueType::STRING) return strs.size();
  if (elem == GgufValueType::F32 || elem == GgufValueType::F64) return floats.size();
  return ints.size();
}
std::string GgufValue::type_str() const {
  if (type == GgufValueType::ARRAY) return std::string("array of ") + gguf_value_type_name(elem);
  return gguf_value_type_name(type);
}

GgufValue GgufValue::u32(uint32_t v) {
  GgufValue x;
  x.type = GgufValueType::U32;
  x.i = v;
  x.u = v;
  return x;
}
GgufValue GgufValue::i32(int32_t v) {
  GgufValue x;
  x.type = GgufValueType::I32;
  x.i = v;
  x.u = static_cast<uint64_t>(v);
  return x;
}
GgufValue GgufValue::u64(uint64_t v) {
  GgufValue x;
  x.type = GgufValueType::U64;
  x.u = v;
  x.is_big_u64 = v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  x.i = x.is_big_u64 ? 0 : static_cast<int64_t>(v);
  return x;
}
GgufValue GgufValue::f32(float v) {
  GgufValue x;
  x.type = GgufValueType::F32;
  x.f = v;
  return x;
}
GgufValue GgufValue::boolean(bool v) {
  GgufValue x;
  x.type = GgufValueType::BOOL;
  x.i = v;
  x.u = v;
  return x;
}
GgufValue GgufValue::string(std::string v) {
  GgufValue x;
  x.type = GgufValueType::STRING;
  x.s = std::move(v);
  return x;
}
namespace {
GgufValue array_of(GgufValueType elem) {
  GgufValue x;
  x.type = GgufValueType::ARRAY;
  x.elem = elem;
  return x;
}
}  // namespace
GgufValue GgufValue::array_i32(std::vector<int64_t> v) {
  GgufValue x = array_of(GgufValueType::I32);
  x.ints = std::move(v);
  return x;
}
GgufValue GgufValue::array_bool(std::vector<int64_t> v) {
  GgufValue x = array_of(GgufValueType::BOOL);
  x.ints = std::move(v);
  return x;
}
GgufValue GgufValue::array_f32(std::vector<double> v) {
  GgufValue x = array_of(GgufValueType::F32);
  x.floats = std::move(v);
  return x;
}
GgufValue GgufValue::array_string(std::vector<std::string> v) {
  GgufValue x = array_of(GgufValueType::STRING);
  x.strs = std::move(v);
  return x;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  REWIND_TRY(MappedFile mf, MappedFile::open(path));
  auto map = std::make_shared<MappedFile>(std::move(mf));
  REWIND_TRY(GgufFile g, parse(map->data(), map->size(), path));
  g.map_ = std::move(map);
  return g;
}

Result<GgufFile> GgufFile::parse(const std::byte* data, size_t size, const std::string& where) {
  GgufFile g;
  g.path_ = where;
  Cursor c(data, size, where);
  if (size < 4)
    return make_error(where + ": truncated: " + std::to_string(size) + " bytes, not a GGUF file");
  REWIND_TRY(uint32_t magic, c.read<uint32_t>("magic"));
  if (magic != kMagic) return make_error(where + ": bad magic (not a GGUF file)");
  REWIND_TRY(g.version_, c.read<uint32_t>("version"));
  if (g.version_ != 2 && g.version_ != 3)
    return make_error(where + ": unsupported GGUF version " + std::to_string(g.version_) +
                      " (2 and 3 are supported)");
  REWIND_TRY(uint64_t n_tensors, c.read<uint64_t>("tensor count"));
  REWIND_TRY(uint64_t n_kv, c.read<uint64_t>("metadata count"));
  // Each pair takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least
  // 8 + 4 + 8 + 4 + 8. Counts that cannot fit are rejected before anything is reserved.
  if (n_kv > c.left() / 13)
    return make_error(where + ": truncated: " + std::to_string(n_kv) +
                      " metadata pairs cannot fit in " + std::to_string(c.left()) + " bytes");
  if (n_tensors > c.left() / 32)
    return make_error(where + ": truncated: " + std::to_string(n_tensors) +
                      " tensor infos cannot fit in " + std::to_string(c.left()) + " bytes");

  for (uint64_t i = 0; i < n_kv; ++i) {
    REWIND_TRY(std::string key, c.str("key"));
    if (g.kv_.count(key)) return make_error(where + ": duplicate key " + quote(key));
    REWIND_TRY(uint32_t t, c.read<uint32_t>("value type"));
    if (!known_value_type(t))
      return make_error(where + ": key " + quote(key) + ": unknown value type " +
                        std::to_string(t));
    GgufValue v;
    v.type = static_cast<GgufValueType>(t);
    if (v.type == GgufValueType::ARRAY) {
      REWIND_TRY(uint32_t et, c.read<uint32_t>("array type"));
      if (!known_value_type(et))
        return make_error(where + ": key " + quote(key) + ": unknown array element type " +
                          std::to_string(et));
      v.elem = static_cast<GgufValueType>(et);
      if (v.elem == GgufValueType::ARRAY)
        return make_error(where + ": key " + quote(key) + ": nested arrays are not supported");
      REWIND_TRY(uint64_t n, c.read<uint64_t>("array length"));
      if (n > c.left() / min_value_bytes(v.elem))
        return make_error(where + ": truncated: key " + quote(key) + ": array of " +
                          std::to_string(n) + " elements cannot fit in " +
                          std::to_string(c.left()) + " bytes");
      const bool strs = v.elem == GgufValueType::STRING;
      const bool floats = v.elem == GgufValueType::F32 || v.elem == GgufValueType::F64;
      if (strs)
        v.strs.reserve(static_cast<size_t>(n));
      else if (floats)
        v.floats.reserve(static_cast<size_t>(n));
      else
        v.ints.reserve(static_cast<size_t>(n));
      GgufValue e;
      for (uint64_t j = 0; j < n; ++j) {
        REWIND_TRY_STATUS(read_scalar(c, v.elem, e, where, key));
        if (v.elem == GgufValueType::U64 && e.is_big_u64)
          return make_error(where + ": key " + quote(key) + ": u64 array element above 2^63-1");
        if (strs)
          v.strs.push_back(std::move(e.s));
        else if (floats)
          v.floats.push_back(e.f);
        else
          v.ints.push_back(e.i);
      }
    } else {
      REWIND_TRY_STATUS(read_scalar(c, v.type, v, where, key));
    }
    g.kv_.emplace(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g.get("general.alignment")) {
    if (a->type != GgufValueType::U32)
      return make_error(where + ": key 'general.alignment' must be u32 (got " + a->type_str() +
                        ")");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      return make_error(where + ": key 'general.alignment' = " + std::to_string(a->u) +
                        " is not a power of two");
    g.alignment_ = static_cast<uint32_t>(a->u);
  }

  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  uint64_t expect = 0;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    REWIND_TRY(t.name, c.str("tensor name"));
    const std::string tw = where + ": tensor " + quote(t.name);
    if (t.name.size() >= kMaxName) return make_error(tw + ": name longer than 63 bytes");
    if (g.index_.count(t.name)) return make_error(where + ": duplicate tensor " + quote(t.name));
    REWIND_TRY(uint32_t nd, c.read<uint32_t>("n_dims"));
    if (nd < 1 || nd > kMaxDims)
      return make_error(tw + ": " + std::to_string(nd) + " dims (1 to 4 allowed)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      REWIND_TRY(uint64_t ne, c.read<uint64_t>("dim"));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return make_error(tw + ": negative dim ne[" + std::to_string(d) + "]");
      const auto sne = static_cast<int64_t>(ne);
      if (sne != 0 && numel > std::numeric_limits<int64_t>::max() / sne)
        return make_error(tw + ": element count overflows");
      numel *= sne;
      t.ne.push_back(sne);
    }
    REWIND_TRY(uint32_t type, c.read<uint32_t>("tensor type"));
    const GgmlTypeInfo* ti = ggml_type_info(type);
    if (!ti) return make_error(tw + ": unknown tensor type " + std::to_string(type));
    t.type = static_cast<GgmlType>(type);
    if (t.ne[0] % ti->block_elems != 0)
      return make_error(tw + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                        ti->name + " block size " + std::to_string(ti->block_elems));
    const int64_t blocks = numel / ti->block_elems;
    if (blocks > std::numeric_limits<int64_t>::max() / ti->block_bytes)
      return make_error(tw + ": byte size overflows");
    t.nbytes = static_cast<size_t>(blocks * ti->block_bytes);
    REWIND_TRY(t.offset, c.read<uint64_t>("tensor offset"));
    if (t.offset != expect)
      return make_error(tw + ": offset " + std::to_string(t.offset) + ", expected " +
                        std::to_string(expect) +
                        " (offsets must follow the previous tensors in order, padded to " +
                        std::to_string(g.alignment_) + ")");
    if (t.nbytes > size)
      return make_error(tw + ": " + std::to_string(t.nbytes) + " bytes do not fit in the file");
    expect += pad_to(t.nbytes, g.alignment_);
    g.index_[t.name] = g.tensors_.size();
    g.tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = pad_to(c.pos(), g.alignment_);
  for (auto& t : g.tensors_) {
    // offset <= expect <= n_tensors * size: no overflow below.
    if (data_start > size || t.offset > size - data_start ||
        t.nbytes > size - data_start - t.offset)
      return make_error(where + ": truncated: tensor " + quote(t.name) + " needs bytes [" +
                        std::to_string(data_start + t.offset) + ", " +
                        std::to_string(data_start + t.offset + t.nbytes) + "), file has " +
                        std::to_string(size));
    t.data = data + data_start + t.offset;
  }
  return g;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::get(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

namespace {
Error missing(const std::string& where, const std::string& key) {
  return make_error(where + ": missing key " + quote(key));
}
Error wrong(const std::string& where, const std::string& key, const char* want,
            const GgufValue& v) {
  return make_error(where + ": key " + quote(key) + " must be " + want + " (got " + v.type_str() +
                    ")");
}
}  // namespace

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = get(key);
  if (!v) return missing(path_, key);
  if (!v->is_int() || v->type == GgufValueType::BOOL) return wrong(path_, key, "an integer", *v);
  if (v->is_big_u64) return make_error(path_ + ": key " + quote(key) + " is out of range");
  return v->i;
}
Result<int64_t> GgufFile::get_int_or(const std::string& key, int64_t def) const {
  return get(key) ? get_int(key) : Result<int64_t>(def);
}
Result<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = get(key);
  if (!v) return missing(path_, key);
  if (v->is_float()) return v->f;
  if (v->is_int() && v->type != GgufValueType::BOOL && !v->is_big_u64)
    return static_cast<double>(v->i);
  return wrong(path_, key, "a number", *v);
}
Result<double> GgufFile::get_float_or(const std::string& key, double def) const {
  return get(key) ? get_float(key) : Result<double>(def);
}
Result<bool> GgufFile::get_bool_or(const std::string& key, bool def) const {
  const GgufValue* v = get(key);
  if (!v) return def;
  if (v->type != GgufValueType::BOOL) return wrong(path_, key, "a bool", *v);
  return v->i != 0;
}
Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = get(key);
  if (!v) return missing(path_, key);
  if (v->type != GgufValueType::STRING) return wrong(path_, key, "a string", *v);
  return v->s;
}
Result<std::string> GgufFile::get_string_or(const std::string& key, const std::string& def) const {
  return get(key) ? get_string(key) : Result<std::string>(def);
}
Result<std::vector<std::string>> GgufFile::get_strings(const std::string& key) const {
  const GgufValue* v = get(key);
  if (!v) return missing(path_, key);
  if (!v->is_array() || v->elem != GgufValueType::STRING)
    return wrong(path_, key, "an array of strings", *v);
  return v->strs;
}
Result<std::vector<int64_t>> GgufFile::get_ints(const std::string& key) const {
  const GgufValue* v = get(key);
  if (!v) return missing(path_, key);
  if (!v->is_array() || !is_int_type(v->elem)) return wrong(path_, key, "an array of integers", *v);
  return v->ints;
}

Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv,
                  const std::vector<GgufTensorToWrite>& tensors, uint32_t alignment) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return make_error(tmp + ": cannot open for writing: " + std::strerror(errno));
  Sink s;
  s.f = f;
  s.where = path;
  Status st = write_all(s, kv, tensors, alignment);
  if (std::fclose(f) != 0 && st.ok())
    st = make_error(tmp + ": close failed: " + std::strerror(errno));
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return make_error(path + ": rename failed: " + std::strerror(e));
  }
  return Ok{};
}

Result<std::vector<std::byte>> gguf_to_bytes(
    const std::vector<std::pair<std::string, GgufValue>>& kv,
    const std::vector<GgufTensorToWrite>& tensors, uint32_t alignment) {
  std::vector<std::byte> out;
  Sink s;
  s.mem = &out;
  s.where = "gguf";
  REWIND_TRY_STATUS(write_all(s, kv, tensors, alignment));
  return out;
}

}  // namespace rw
