#include "rewind/io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>
#include <utility>

#include "rewind/io/mmap_file.h"
#include "rewind/tensor/shape.h"

namespace rw {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // same limit as the HF reader
constexpr size_t kMaxNameInMessage = 200;

// A name as it appears in a one-line message: quoted, control bytes escaped, long names cut.
std::string quote(const std::string& s) {
  std::string out = "'";
  size_t n = s.size();
  bool cut = false;
  if (n > kMaxNameInMessage) {
    n = kMaxNameInMessage;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
    cut = true;
  }
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
  if (cut) out += "...";
  return out + "'";
}

// Keeps a library message (e.g. nlohmann's what()) on one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// nlohmann's what() starts with "[json.exception.parse_error.101] "; the id helps no user.
std::string json_what(const json::exception& e) {
  std::string w = e.what();
  if (!w.empty() && w[0] == '[') {
    const size_t close = w.find("] ");
    if (close != std::string::npos) w.erase(0, close + 2);
  }
  return one_line(w);
}

bool dtype_from_name(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16},
      {"F64", DType::F64}, {"I32", DType::I32},   {"I64", DType::I64},
      {"U8", DType::U8},   {"I8", DType::I8},     {"BOOL", DType::BOOL},
  };
  for (const auto& [name, t] : kNames) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

// Parses a JSON value that must be a non-negative integer <= max. On failure returns false and
// sets *why to a phrase ("is negative (-1)", "is not an integer").
bool get_uint(const json& v, uint64_t max, uint64_t* out, std::string* why) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > max) {
      *why = "is too large (" + std::to_string(u) + ")";
      return false;
    }
    *out = u;
    return true;
  }
  if (v.is_number_integer()) {  // signed and not unsigned: negative
    *why = "is negative (" + std::to_string(v.get<int64_t>()) + ")";
    return false;
  }
  *why = std::string("is not an integer (got ") + v.type_name() + ")";
  return false;
}

// Everything that can be wrong with one header entry, checked in order. `data_size` is the
// length of the data section.
Result<TensorView> parse_entry(const std::string& name, const json& v, uint64_t data_size,
                               const std::byte* base, const std::string& where) {
  auto fail = [&](const std::string& what) -> Error {
    return make_error(where + ": tensor " + quote(name) + ": " + what);
  };
  if (!v.is_object())
    return fail(std::string("entry is not a JSON object (got ") + v.type_name() + ")");

  TensorView t;
  t.name = name;
  t.file = where;

  const auto dt = v.find("dtype");
  if (dt == v.end()) return fail("missing 'dtype'");
  if (!dt->is_string())
    return fail(std::string("'dtype' is not a string (got ") + dt->type_name() + ")");
  if (!dtype_from_name(dt->get_ref<const std::string&>(), &t.dtype))
    return fail("dtype " + quote(dt->get_ref<const std::string&>()) +
                " not supported (supported: F32, BF16, F16, F64, I32, I64, U8, I8, BOOL)");

  const auto sh = v.find("shape");
  if (sh == v.end()) return fail("missing 'shape'");
  if (!sh->is_array())
    return fail(std::string("'shape' is not an array (got ") + sh->type_name() + ")");
  // Product of the non-zero dims, bounded so that numel() * dtype_size never overflows int64
  // (TensorView::numel() multiplies left to right; every partial product is <= this bound).
  const uint64_t limit =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dtype_size(t.dtype);
  uint64_t nonzero_product = 1;
  bool has_zero = false;
  t.shape.reserve(sh->size());
  for (size_t i = 0; i < sh->size(); ++i) {
    uint64_t d = 0;
    std::string why;
    if (!get_uint((*sh)[i], limit, &d, &why))
      return fail("shape[" + std::to_string(i) + "] " + why);
    if (d == 0) {
      has_zero = true;
    } else {
      if (nonzero_product > limit / d) return fail("shape is too large (numel overflows)");
      nonzero_product *= d;
    }
    t.shape.push_back(static_cast<int64_t>(d));
  }
  const uint64_t numel = has_zero ? 0 : nonzero_product;
  const uint64_t nbytes = numel * dtype_size(t.dtype);  // <= INT64_MAX by the bound above

  const auto off = v.find("data_offsets");
  if (off == v.end()) return fail("missing 'data_offsets'");
  if (!off->is_array() || off->size() != 2)
    return fail("'data_offsets' is not an array [begin, end]");
  uint64_t begin = 0, end = 0;
  {
    std::string why;
    if (!get_uint((*off)[0], std::numeric_limits<uint64_t>::max(), &begin, &why))
      return fail("data_offsets begin " + why);
    if (!get_uint((*off)[1], std::numeric_limits<uint64_t>::max(), &end, &why))
      return fail("data_offsets end " + why);
  }
  const std::string offs =
      "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) return fail(offs + ": begin > end");
  if (end > data_size)
    return fail(offs + " out of range (data section is " + std::to_string(data_size) + " bytes)");
  if (end - begin != nbytes)
    return fail(offs + " hold " + std::to_string(end - begin) + " bytes but shape " +
                shape_str(t.shape) + " of " + std::string(dtype_name(t.dtype)) + " needs " +
                std::to_string(nbytes));

  t.data = base + begin;
  t.nbytes = static_cast<size_t>(nbytes);
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  REWIND_TRY(MappedFile m, MappedFile::open(path));
  auto map = std::make_shared<MappedFile>(std::move(m));
  REWIND_TRY(SafetensorsFile f, parse(map->data(), map->size(), path));
  f.map_ = std::move(map);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::parse(const std::byte* data, size_t size,
                                               const std::string& where) {
  if (size < 8)
    return make_error(where + ": file is " + std::to_string(size) +
                      " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(data[i]) << (8 * i);  // little-endian
  if (n > kMaxHeaderBytes)
    return make_error(where + ": header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size - 8)
    return make_error(where + ": header length " + std::to_string(n) + " exceeds the file (" +
                      std::to_string(size - 8) + " bytes after the length)");

  // Parse the header, noting top-level keys that appear twice (nlohmann would keep the last).
  const char* h = reinterpret_cast<const char*>(data + 8);
  std::unordered_set<std::string> seen;
  std::string duplicate;
  bool has_duplicate = false;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !has_duplicate) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) {
        has_duplicate = true;
        duplicate = k;
      }
    }
    return true;
  };
  json header;
  try {
    header = json::parse(h, h + n, cb);
  } catch (const json::exception& e) {
    return make_error(where + ": header is not valid JSON: " + json_what(e));
  }
  if (!header.is_object())
    return make_error(where + ": header is not a JSON object (got " + header.type_name() + ")");
  if (has_duplicate)
    return make_error(where + ": tensor " + quote(duplicate) + ": listed twice in the header");

  SafetensorsFile f;
  f.path_ = where;
  const std::byte* base = data + 8 + n;
  const uint64_t data_size = size - 8 - n;
  f.tensors_.reserve(header.size());
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object())
        return make_error(where + ": __metadata__ is not a JSON object (got " + v.type_name() +
                          ")");
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string())
          return make_error(where + ": __metadata__: value of " + quote(k) +
                            " is not a string (got " + mv.type_name() + ")");
        f.metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    REWIND_TRY(TensorView t, parse_entry(name, v, data_size, base, where));
    f.tensors_.push_back(std::move(t));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorView& a, const TensorView& b) {
    return a.data != b.data ? a.data < b.data : a.name < b.name;
  });
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------------
// TensorSet

namespace {

// The weight_map of an index file, as tensor name -> shard file name.
Result<std::map<std::string, std::string>> read_index(const std::string& path) {
  REWIND_TRY(MappedFile m, MappedFile::open(path));
  json j;
  try {
    const std::string_view text = m.text();
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return make_error(path + ": not valid JSON: " + json_what(e));
  }
  if (!j.is_object())
    return make_error(path + ": not a JSON object (got " + std::string(j.type_name()) + ")");
  const auto wm = j.find("weight_map");
  if (wm == j.end()) return make_error(path + ": missing 'weight_map'");
  if (!wm->is_object())
    return make_error(path + ": 'weight_map' is not a JSON object (got " +
                      std::string(wm->type_name()) + ")");
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return make_error(path + ": tensor " + quote(name) + ": shard is not a string (got " +
                        shard.type_name() + ")");
    const auto& s = shard.get_ref<const std::string&>();
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos ||
        s.find('\0') != std::string::npos)
      return make_error(path + ": tensor " + quote(name) + ": shard " + quote(s) +
                        " is not a plain file name");
    out.emplace(name, s);
  }
  return out;
}

}  // namespace

Result<TensorSet> TensorSet::open_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::is_directory(d, ec))
    return make_error(dir + ": not a directory" + (ec ? ": " + ec.message() : std::string()));

  const fs::path index_path = d / "model.safetensors.index.json";
  const fs::path single_path = d / "model.safetensors";
  std::vector<std::string> paths;
  std::map<std::string, std::string> weight_map;
  const bool has_index = fs::exists(index_path, ec);
  if (has_index) {
    REWIND_TRY(weight_map, read_index(index_path.string()));
    std::set<std::string> shards;
    for (const auto& [name, shard] : weight_map) shards.insert(shard);
    for (const auto& s : shards) paths.push_back((d / s).string());
    if (paths.empty()) return make_error(index_path.string() + ": 'weight_map' lists no tensors");
  } else if (fs::exists(single_path, ec)) {
    paths.push_back(single_path.string());
  } else {
    fs::directory_iterator it(d, ec);
    if (ec) return make_error(dir + ": cannot list: " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) return make_error(dir + ": cannot list: " + ec.message());
      std::error_code ec2;
      if (it->path().extension() == ".safetensors" && it->is_regular_file(ec2))
        paths.push_back(it->path().string());
    }
    if (ec) return make_error(dir + ": cannot list: " + ec.message());
    std::sort(paths.begin(), paths.end());
    if (paths.empty())
      return make_error(
          dir + ": no model.safetensors.index.json, model.safetensors or *.safetensors files");
  }

  TensorSet set;
  set.files_.reserve(paths.size());
  for (const auto& p : paths) {
    auto f = SafetensorsFile::open(p);
    if (!f.ok()) {
      if (has_index)
        return make_error(index_path.string() +
                          ": shard listed in weight_map: " + f.error_message());
      return f.error();
    }
    set.files_.push_back(std::move(f).value());
  }
  REWIND_TRY_STATUS(set.build_index());
  if (has_index) {
    for (const auto& [name, shard] : weight_map) {
      const TensorView* t = set.find(name);
      const std::string shard_path = (d / shard).string();
      if (t == nullptr || t->file != shard_path)
        return make_error(
            index_path.string() + ": tensor " + quote(name) + ": listed in shard " + quote(shard) +
            " but " + (t == nullptr ? std::string("no shard holds it") : "it is in " + t->file));
    }
  }
  return set;
}

Result<TensorSet> TensorSet::from_files(std::vector<SafetensorsFile> files) {
  TensorSet set;
  set.files_ = std::move(files);
  REWIND_TRY_STATUS(set.build_index());
  return set;
}

Status TensorSet::build_index() {
  // Index after all files are in place (TensorView addresses are stable from here on: they
  // live in each file's own vector, which moves never reallocate).
  for (const auto& f : files_) {
    for (const auto& t : f.tensors()) {
      const auto [it, inserted] = index_.emplace(t.name, &t);
      if (!inserted)
        return make_error(f.path() + ": tensor " + quote(t.name) + ": also in " + it->second->file);
    }
  }
  return Ok{};
}

const TensorView* TensorSet::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> TensorSet::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, t] : index_) out.push_back(name);
  return out;
}

size_t TensorSet::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : index_) n += t->nbytes;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Writer

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  // Header: built as text so that the tensor order is kept (nlohmann's json sorts keys).
  // Names and metadata go through nlohmann for escaping.
  auto fail = [&](const std::string& what) -> Error { return make_error(path + ": " + what); };
  std::string header = "{";
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  try {
    if (!metadata.empty()) {
      json m = json::object();
      for (const auto& [k, v] : metadata) m[k] = v;
      header += "\"__metadata__\":" + m.dump();
    }
    std::unordered_set<std::string> seen;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
      if (t.name == "__metadata__") return fail("tensor name '__metadata__' is reserved");
      if (!seen.insert(t.name).second) return fail("tensor " + quote(t.name) + ": written twice");
      if (dtype_size(t.dtype) == 0) return fail("tensor " + quote(t.name) + ": invalid dtype");
      const uint64_t limit =
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dtype_size(t.dtype);
      uint64_t nonzero = 1;
      bool has_zero = false;
      json shape = json::array();
      for (const int64_t dim : t.shape) {
        if (dim < 0)
          return fail("tensor " + quote(t.name) + ": negative dim in shape " + shape_str(t.shape));
        if (dim == 0) {
          has_zero = true;
        } else {
          if (nonzero > limit / static_cast<uint64_t>(dim))
            return fail("tensor " + quote(t.name) + ": shape too large");
          nonzero *= static_cast<uint64_t>(dim);
        }
        shape.push_back(dim);
      }
      const uint64_t nbytes = (has_zero ? 0 : nonzero) * dtype_size(t.dtype);
      if (nbytes > 0 && t.data == nullptr)
        return fail("tensor " + quote(t.name) + ": data is null");
      if (offset > std::numeric_limits<uint64_t>::max() - nbytes)
        return fail("total size overflows");
      json entry = {{"dtype", std::string(dtype_name(t.dtype))},
                    {"shape", shape},
                    {"data_offsets", json::array({offset, offset + nbytes})}};
      if (header.size() > 1) header += ',';
      header += json(t.name).dump() + ":" + entry.dump();
      offset += nbytes;
      sizes.push_back(nbytes);
    }
  } catch (const json::exception& e) {  // dump() of a name or value that is not valid UTF-8
    return fail("cannot encode header: " + json_what(e));
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // data section starts 8-aligned

  const std::string tmp = path + ".tmp";
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (fp == nullptr) return make_error(tmp + ": cannot create: " + std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, fp) == 8 &&
            std::fwrite(header.data(), 1, header.size(), fp) == header.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i)
    ok = sizes[i] == 0 || std::fwrite(tensors[i].data, 1, sizes[i], fp) == sizes[i];
  int err = ok ? 0 : errno;
  if (std::fclose(fp) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return make_error(tmp + ": write failed: " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return make_error(path + ": cannot rename from " + tmp + ": " + std::strerror(err));
  }
  return Ok{};
}

}  // namespace rw
