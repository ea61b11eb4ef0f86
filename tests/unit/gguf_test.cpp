// Tests for io/gguf.h: writer/reader round trip (every value type, alignment, tensor bytes),
// and one test per malformed input built byte by byte, each checking that the error is one line
// naming the file (and the key or tensor where there is one). Every prefix of a valid file fails
// cleanly (ASan/UBSan builds check that nothing reads outside the buffer).
#include "rewind/io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace rw {
namespace {

// Little-endian byte builder for hand-made headers.
struct Bytes {
  std::string b;
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& f32(float v) { return raw(&v, 4); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Bytes& raw(const void* p, size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  Bytes& pad(size_t a) {
    while (b.size() % a) b += '\0';
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.append(n, '\0');
    return *this;
  }
};

// Header "GGUF", version, counts.
Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes x;
  x.u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  return x;
}

// One tensor info.
void tensor_info(Bytes& x, const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                 uint64_t off) {
  x.str(name).u32(static_cast<uint32_t>(ne.size()));
  for (auto d : ne) x.u64(d);
  x.u32(type).u64(off);
}

Result<GgufFile> parse(const std::string& bytes) {
  static std::vector<std::unique_ptr<std::byte[]>> keep;
  auto buf = std::make_unique<std::byte[]>(bytes.size() + 1);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  const std::byte* p = bytes.empty() ? nullptr : buf.get();
  keep.push_back(std::move(buf));
  return GgufFile::parse(p, bytes.size(), "m.gguf");
}

void expect_error(const std::string& bytes, const std::string& what) {
  auto r = parse(bytes);
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << what;
  const std::string m = r.error_message();
  EXPECT_EQ(m.rfind("m.gguf: ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find(what), std::string::npos) << m;
}

// A valid file: two tensors (F32 [4, 2], Q8_0 [32]), several keys.
std::vector<std::byte> valid_file() {
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"general.architecture", GgufValue::string("qwen35")},
      {"a.u32", GgufValue::u32(7)},
      {"a.i32", GgufValue::i32(-3)},
      {"a.u64", GgufValue::u64(1ull << 40)},
      {"a.f32", GgufValue::f32(0.5f)},
      {"a.bool", GgufValue::boolean(true)},
      {"a.ints", GgufValue::array_i32({1, -2, 3})},
      {"a.bools", GgufValue::array_bool({1, 0})},
      {"a.floats", GgufValue::array_f32({0.25, -1.0})},
      {"a.strs", GgufValue::array_string({"x", "", "y z"})},
  };
  std::vector<GgufTensorToWrite> t(2);
  t[0].name = "w";
  t[0].type = GgmlType::F32;
  t[0].ne = {4, 2};
  t[0].fill = [](std::byte* out, size_t n) -> Status {
    EXPECT_EQ(n, 32u);
    for (size_t i = 0; i < 8; ++i) {
      const float v = static_cast<float>(i) + 0.5f;
      std::memcpy(out + 4 * i, &v, 4);
    }
    return Ok{};
  };
  t[1].name = "q";
  t[1].type = GgmlType::Q8_0;
  t[1].ne = {32};
  t[1].fill = [](std::byte* out, size_t n) -> Status {
    EXPECT_EQ(n, 34u);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(i + 1);
    return Ok{};
  };
  auto r = gguf_to_bytes(kv, t);
  EXPECT_TRUE(r.ok()) << r.error_message();
  return r.value();
}

std::string as_string(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

TEST(Gguf, RoundTrip) {
  const std::string bytes = as_string(valid_file());
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.error_message();
  const GgufFile& g = r.value();
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.get_string("general.architecture").value(), "qwen35");
  EXPECT_EQ(g.get_int("a.u32").value(), 7);
  EXPECT_EQ(g.get_int("a.i32").value(), -3);
  EXPECT_EQ(g.get_int("a.u64").value(), int64_t{1} << 40);
  EXPECT_EQ(g.get_float("a.f32").value(), 0.5);
  EXPECT_EQ(g.get_bool_or("a.bool", false).value(), true);
  EXPECT_EQ(g.get_ints("a.ints").value(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.get_ints("a.bools").value(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(g.get("a.floats")->floats, (std::vector<double>{0.25, -1.0}));
  EXPECT_EQ(g.get_strings("a.strs").value(), (std::vector<std::string>{"x", "", "y z"}));
  ASSERT_EQ(g.tensors().size(), 2u);
  const GgufTensor* w = g.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(w->nbytes, 32u);
  EXPECT_EQ(w->offset, 0u);
  float f5;
  std::memcpy(&f5, w->data + 20, 4);
  EXPECT_EQ(f5, 5.5f);
  const GgufTensor* q = g.find("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::Q8_0);
  EXPECT_EQ(q->offset, 32u);  // 32 bytes, padded to 32
  EXPECT_EQ(q->nbytes, 34u);
  EXPECT_EQ(static_cast<int>(q->data[33]), 34);
  EXPECT_EQ(q->data - w->data, 32);
  // Typed lookups: wrong types and missing keys are errors naming the key.
  EXPECT_NE(g.get_int("a.f32").error_message().find("'a.f32' must be an integer (got f32)"),
            std::string::npos);
  EXPECT_NE(g.get_string("nope").error_message().find("missing key 'nope'"), std::string::npos);
  EXPECT_EQ(g.get_int_or("nope", 9).value(), 9);
  EXPECT_FALSE(g.get_int_or("a.strs", 9).ok());
}

TEST(Gguf, WriteReadFileAndAlignment) {
  const std::string path =
      ::testing::TempDir() + "/rewind_gguf_" + std::to_string(::getpid()) + ".gguf";
  std::vector<GgufTensorToWrite> t(2);
  for (int i = 0; i < 2; ++i) {
    t[i].name = "t" + std::to_string(i);
    t[i].type = GgmlType::F16;
    t[i].ne = {3};
    t[i].fill = [i](std::byte* out, size_t n) -> Status {
      std::memset(out, 0x10 + i, n);
      return Ok{};
    };
  }
  ASSERT_TRUE(write_gguf(path, {{"general.architecture", GgufValue::string("x")}}, t, 64).ok());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->alignment(), 64u);
  EXPECT_EQ(r->find("t1")->offset, 64u);
  EXPECT_EQ(static_cast<int>(r->find("t1")->data[5]), 0x11);
  std::filesystem::remove(path);
  // Writer errors.
  t[1].name = "t0";
  EXPECT_FALSE(gguf_to_bytes({}, t).ok());
  t[1].name = std::string(64, 'n');
  EXPECT_FALSE(gguf_to_bytes({}, t).ok());
  t[1].name = "t1";
  t[1].type = GgmlType::Q4_K;
  EXPECT_FALSE(gguf_to_bytes({}, t).ok());  // ne[0] = 3 is not a multiple of 256
  t[1].type = GgmlType::F16;
  EXPECT_FALSE(gguf_to_bytes({}, t, 48).ok());
  EXPECT_FALSE(gguf_to_bytes({{"k", GgufValue::u32(1)}, {"k", GgufValue::u32(2)}}, t).ok());
}

TEST(Gguf, EveryPrefixFailsCleanly) {
  const std::string bytes = as_string(valid_file());
  // The last tensor's bytes end 30 bytes before the file does (its padding to 32).
  const size_t end = bytes.size() - 30;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = parse(bytes.substr(0, n));
    if (n >= end) {
      EXPECT_TRUE(r.ok()) << n << ": " << r.error_message();  // only trailing padding is missing
      continue;
    }
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.error_message().rfind("m.gguf: ", 0), 0u) << r.error_message();
  }
}

TEST(Gguf, BadMagic) {
  Bytes x = header(0, 0);
  x.b[0] = 'X';
  expect_error(x.b, "bad magic");
  expect_error("GG", "truncated");
}

TEST(Gguf, BadVersion) {
  expect_error(header(0, 0, 1).b, "unsupported GGUF version 1");
  expect_error(header(0, 0, 4).b, "unsupported GGUF version 4");
  EXPECT_TRUE(parse(header(0, 0, 2).b).ok());
  EXPECT_TRUE(parse(header(0, 0, 3).b).ok());
}

TEST(Gguf, CountsThatCannotFit) {
  expect_error(header(0, 1000).b, "metadata pairs cannot fit");
  expect_error(header(1ull << 60, 0).b, "tensor infos cannot fit");
  Bytes x = header(0, 1);
  x.str("k").u32(9).u32(4).u64(1ull << 62);
  expect_error(x.b, "array of 4611686018427387904 elements cannot fit");
  Bytes s = header(0, 1);
  s.str("k").u32(8).u64(1000).raw("abc", 3);
  expect_error(s.b, "has length 1000");
}

TEST(Gguf, BadValues) {
  Bytes a = header(0, 1);
  a.str("k").u32(13).u32(0);
  expect_error(a.b, "key 'k': unknown value type 13");
  Bytes b = header(0, 1);
  b.str("k").u32(9).u32(77).u64(0);
  expect_error(b.b, "unknown array element type 77");
  Bytes c = header(0, 1);
  c.str("k").u32(9).u32(9).u64(1);
  expect_error(c.b, "nested arrays");
  Bytes d = header(0, 1);
  d.str("k").u32(7).u8(2);
  expect_error(d.b, "bool value 2");
  Bytes e = header(0, 2);
  e.str("k").u32(4).u32(1).str("k").u32(4).u32(2);
  expect_error(e.b, "duplicate key 'k'");
  Bytes f = header(0, 1);
  f.str("general.alignment").u32(4).u32(48);
  expect_error(f.b, "not a power of two");
  Bytes g = header(0, 1);
  g.str("general.alignment").u32(5).u32(32);
  expect_error(g.b, "'general.alignment' must be u32 (got i32)");
}

// A header with one key-less tensor list, then the data section.
std::string with_tensors(
    const std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t, uint64_t>>& ts,
    size_t data_bytes) {
  Bytes x = header(ts.size(), 0);
  for (auto& [n, ne, type, off] : ts) tensor_info(x, n, ne, type, off);
  x.pad(32).zeros(data_bytes);
  return x.b;
}

TEST(Gguf, TensorInfos) {
  EXPECT_TRUE(parse(with_tensors({{"a", {8}, 0, 0}, {"b", {32}, 8, 32}}, 96)).ok());
  expect_error(with_tensors({{"a", {8}, 99, 0}}, 32), "tensor 'a': unknown tensor type 99");
  expect_error(with_tensors({{"a", {33}, 8, 0}}, 64),
               "tensor 'a': ne[0] = 33 is not a multiple of the Q8_0 block size 32");
  expect_error(with_tensors({{"a", {100, 2}, 12, 0}}, 1024),
               "not a multiple of the Q4_K block size 256");
  expect_error(with_tensors({{"a", {1, 1, 1, 1, 1}, 0, 0}}, 32), "tensor 'a': 5 dims");
  expect_error(with_tensors({{"a", {}, 0, 0}}, 32), "tensor 'a': 0 dims");
  expect_error(with_tensors({{"a", {1ull << 63}, 0, 0}}, 32), "negative dim");
  expect_error(with_tensors({{"a", {1ull << 40, 1ull << 40}, 0, 0}}, 32),
               "element count overflows");
  expect_error(with_tensors({{"a", {8}, 0, 0}, {"a", {8}, 0, 32}}, 64), "duplicate tensor 'a'");
  expect_error(with_tensors({{std::string(64, 'x'), {8}, 0, 0}}, 32), "name longer than 63 bytes");
}

TEST(Gguf, OffsetsOutOfOrderOrRange) {
  // Second tensor must start at 32 (8 f32 = 32 bytes); anything else is refused.
  expect_error(with_tensors({{"a", {8}, 0, 0}, {"b", {8}, 0, 64}}, 128),
               "tensor 'b': offset 64, expected 32");
  expect_error(with_tensors({{"a", {8}, 0, 32}, {"b", {8}, 0, 0}}, 128),
               "tensor 'a': offset 32, expected 0");
  expect_error(with_tensors({{"a", {8}, 0, 1}}, 64), "offset 1, expected 0");
  // Data section too short for the second tensor.
  expect_error(with_tensors({{"a", {8}, 0, 0}, {"b", {8}, 0, 32}}, 40),
               "truncated: tensor 'b' needs bytes");
  // A tensor larger than the whole file.
  expect_error(with_tensors({{"a", {1ull << 30}, 0, 0}}, 32), "do not fit in the file");
}

TEST(Gguf, TypeTable) {
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(4), "type 4");  // removed Q4_2
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512), 420);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 64), 68);
  EXPECT_EQ(ggml_row_bytes(GgmlType::BF16, 3), 6);
}

}  // namespace
}  // namespace rw
