// Tests for io/safetensors.h and io/mmap_file.h: writer/reader round trips, directory loading
// (single file, index.json shards, *.safetensors fallback), and one test per malformed input,
// each checking that the error names the file and, where there is one, the tensor.
#include "rewind/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rewind/io/mmap_file.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

// A fresh, empty directory under the GoogleTest temp dir, unique per test, removed at exit.
std::string fresh_dir() {
  struct Dirs {
    std::vector<fs::path> made;
    ~Dirs() {
      std::error_code ec;
      for (const auto& p : made) fs::remove_all(p, ec);
    }
  };
  static Dirs dirs;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::path(::testing::TempDir()) /
               ("rewind_st_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  dirs.made.push_back(p);
  return p.string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A file image: u64 LE header length, the header as given, then `data_size` bytes of data.
std::string image(const std::string& header, size_t data_size) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  for (size_t i = 0; i < data_size; ++i) out += static_cast<char>(i & 0xff);
  return out;
}

// Parses an image from an exactly-sized heap copy (so ASan sees any over-read).
Result<SafetensorsFile> parse_image(const std::string& bytes,
                                    const std::string& where = "model.safetensors") {
  static std::vector<std::unique_ptr<std::byte[]>>
      keep;  // parse() needs the bytes to outlive the result
  auto buf = std::make_unique<std::byte[]>(bytes.size() + 1);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  const std::byte* p = bytes.empty() ? nullptr : buf.get();
  keep.push_back(std::move(buf));
  return SafetensorsFile::parse(p, bytes.size(), where);
}

// Asserts that parsing `header` (+ data) fails with a message naming the file, the tensor
// (when given) and containing `what`.
void expect_parse_error(const std::string& header, size_t data_size, const std::string& tensor,
                        const std::string& what) {
  auto r = parse_image(image(header, data_size), "bad.safetensors");
  ASSERT_FALSE(r.ok()) << header;
  const std::string msg = r.error_message();
  EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
  if (!tensor.empty()) {
    EXPECT_NE(msg.find("tensor '" + tensor + "'"), std::string::npos) << msg;
  }
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// Round trips

struct Sample {
  std::vector<float> f32{1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  std::vector<uint16_t> bf16{f32_to_bf16(1.0f), f32_to_bf16(-3.5f), f32_to_bf16(100.0f),
                             f32_to_bf16(0.1f)};
  std::vector<uint16_t> f16{f32_to_f16(1.0f), f32_to_f16(-0.5f), f32_to_f16(65504.0f),
                            f32_to_f16(2e-7f)};
  std::vector<int64_t> i64{-1, 0, int64_t{1} << 40};
  float scalar = 42.0f;
  std::vector<uint8_t> u8{1, 2, 3};

  std::vector<TensorToWrite> tensors() const {
    return {
        {"a.f32", DType::F32, {2, 3}, f32.data()}, {"b.bf16", DType::BF16, {4}, bf16.data()},
        {"c.f16", DType::F16, {2, 2}, f16.data()}, {"d.i64", DType::I64, {3}, i64.data()},
        {"e.scalar", DType::F32, {}, &scalar},     {"f.empty", DType::F32, {0, 5}, nullptr},
        {"g.u8", DType::U8, {3}, u8.data()},
    };
  }
};

void expect_same(const TensorView* v, const TensorToWrite& t) {
  ASSERT_NE(v, nullptr) << t.name;
  EXPECT_EQ(v->name, t.name);
  EXPECT_EQ(v->dtype, t.dtype) << t.name;
  EXPECT_EQ(v->shape, t.shape) << t.name;
  int64_t numel = 1;
  for (auto d : t.shape) numel *= d;
  EXPECT_EQ(v->numel(), numel) << t.name;
  ASSERT_EQ(v->nbytes, static_cast<size_t>(numel) * dtype_size(t.dtype)) << t.name;
  if (v->nbytes > 0) {
    EXPECT_EQ(std::memcmp(v->data, t.data, v->nbytes), 0) << t.name;
  }
}

TEST(Safetensors, RoundTripAllKinds) {
  const std::string dir = fresh_dir();
  const std::string path = dir + "/model.safetensors";
  Sample s;
  const auto tensors = s.tensors();
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}, {"note", "x\"y\n"}}).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // Header padded with spaces so that the data section starts 8-aligned.
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error_message();
  EXPECT_EQ(f->path(), path);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    expect_same(f->find(tensors[i].name), tensors[i]);
    EXPECT_EQ(f->tensors()[i].file, path);
  }
  // Written in order: data-section order is the write order (the empty tensor shares its
  // offset with the next one and sorts by name, which keeps the order here).
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(f->tensors()[i].name, tensors[i].name);
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "x\"y\n");
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 8 + 8 + 24 + 4 + 0 + 3);

  // Values survive as numbers, not just bytes.
  float back[6];
  convert_to_f32(f->find("a.f32")->data, DType::F32, 6, back);
  EXPECT_EQ(back[2], 3.25f);
  convert_to_f32(f->find("b.bf16")->data, DType::BF16, 4, back);
  EXPECT_EQ(back[1], -3.5f);

  // A copy shares the mapping; its views stay valid after the original goes away.
  SafetensorsFile copy = *f;
  f = make_error("gone");
  expect_same(copy.find("d.i64"), tensors[3]);
}

TEST(Safetensors, ParseFromMemoryMatchesOpen) {
  const std::string dir = fresh_dir();
  Sample s;
  ASSERT_TRUE(write_safetensors(dir + "/m.safetensors", s.tensors()).ok());
  const std::string bytes = read_bytes(dir + "/m.safetensors");
  auto f = parse_image(bytes, "mem");
  ASSERT_TRUE(f.ok()) << f.error_message();
  EXPECT_TRUE(f->metadata().empty());
  for (const auto& t : s.tensors()) expect_same(f->find(t.name), t);
  EXPECT_EQ(f->find("a.f32")->file, "mem");
}

TEST(Safetensors, EmptyFileList) {
  const std::string dir = fresh_dir();
  ASSERT_TRUE(write_safetensors(dir + "/e.safetensors", {}).ok());
  auto f = SafetensorsFile::open(dir + "/e.safetensors");
  ASSERT_TRUE(f.ok()) << f.error_message();
  EXPECT_TRUE(f->tensors().empty());
}

TEST(Safetensors, OpensFixture) {
  const std::string path = std::string(REWIND_TEST_DATA) + "/qwen35-tiny/qwen3_5/model.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error_message();
  EXPECT_EQ(f->tensors().size(), 56u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const TensorView* e = f->find("model.language_model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::F32);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(e->nbytes, 256u * 64 * 4);
  // Tensors are in data order and tile the data section.
  for (size_t i = 1; i < f->tensors().size(); ++i)
    EXPECT_EQ(f->tensors()[i - 1].data + f->tensors()[i - 1].nbytes, f->tensors()[i].data);
}

// ---------------------------------------------------------------------------------------------
// Directories

TEST(TensorSet, ShardedWithIndex) {
  const std::string dir = fresh_dir();
  Sample s;
  const auto all = s.tensors();
  const std::vector<TensorToWrite> shard1(all.begin(), all.begin() + 3),
      shard2(all.begin() + 3, all.end());
  ASSERT_TRUE(write_safetensors(dir + "/model-00001-of-00002.safetensors", shard1).ok());
  ASSERT_TRUE(write_safetensors(dir + "/model-00002-of-00002.safetensors", shard2).ok());
  std::string index = R"({"metadata": {"total_size": 1}, "weight_map": {)";
  for (size_t i = 0; i < all.size(); ++i) {
    if (i) index += ",";
    index +=
        "\"" + all[i].name + "\": \"model-0000" + (i < 3 ? "1" : "2") + "-of-00002.safetensors\"";
  }
  index += "}}";
  write_bytes(dir + "/model.safetensors.index.json", index);
  // A stray file the index does not name is not opened.
  write_bytes(dir + "/stray.safetensors", "junk");

  auto set = TensorSet::open_dir(dir);
  ASSERT_TRUE(set.ok()) << set.error_message();
  EXPECT_EQ(set->files().size(), 2u);
  std::vector<std::string> names;
  size_t bytes = 0;
  for (const auto& t : all) {
    expect_same(set->find(t.name), t);
    names.push_back(t.name);
    bytes += set->find(t.name)->nbytes;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(set->names(), names);
  EXPECT_EQ(set->total_bytes(), bytes);
  EXPECT_TRUE(contains(set->find("d.i64")->file, "model-00002-of-00002.safetensors"));
  EXPECT_EQ(set->find("nope"), nullptr);

  // Moving the set keeps the views valid.
  const TensorView* before = set->find("a.f32");
  TensorSet moved = std::move(set).value();
  EXPECT_EQ(moved.find("a.f32"), before);
  expect_same(moved.find("a.f32"), all[0]);
}

TEST(TensorSet, SingleFileWinsOverOthers) {
  const std::string dir = fresh_dir();
  Sample s;
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", s.tensors()).ok());
  write_bytes(dir + "/other.safetensors", "junk that would not parse");
  auto set = TensorSet::open_dir(dir);
  ASSERT_TRUE(set.ok()) << set.error_message();
  EXPECT_EQ(set->files().size(), 1u);
  EXPECT_EQ(set->names().size(), s.tensors().size());
}

TEST(TensorSet, FallbackGlobSorted) {
  const std::string dir = fresh_dir();
  Sample s;
  const auto all = s.tensors();
  ASSERT_TRUE(write_safetensors(dir + "/b.safetensors", {all[0]}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/a.safetensors", {all[1], all[2]}).ok());
  write_bytes(dir + "/notes.txt", "not a tensor file");
  fs::create_directories(dir + "/sub.safetensors");  // a directory is skipped
  auto set = TensorSet::open_dir(dir);
  ASSERT_TRUE(set.ok()) << set.error_message();
  ASSERT_EQ(set->files().size(), 2u);
  EXPECT_TRUE(contains(set->files()[0].path(), "a.safetensors"));
  EXPECT_TRUE(contains(set->files()[1].path(), "b.safetensors"));
  expect_same(set->find(all[0].name), all[0]);
  expect_same(set->find(all[2].name), all[2]);
}

TEST(TensorSet, FixtureDir) {
  auto set = TensorSet::open_dir(std::string(REWIND_TEST_DATA) + "/qwen35-tiny/qwen3_next");
  ASSERT_TRUE(set.ok()) << set.error_message();
  EXPECT_NE(set->find("model.embed_tokens.weight"), nullptr);
  EXPECT_GT(set->total_bytes(), 1000000u);
}

TEST(TensorSet, DuplicateAcrossShards) {
  const std::string dir = fresh_dir();
  Sample s;
  const auto all = s.tensors();
  ASSERT_TRUE(write_safetensors(dir + "/a.safetensors", {all[0], all[1]}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/b.safetensors", {all[2], all[0]}).ok());
  auto set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  const std::string msg = set.error_message();
  EXPECT_TRUE(contains(msg, "b.safetensors: tensor 'a.f32'")) << msg;
  EXPECT_TRUE(contains(msg, "a.safetensors")) << msg;
}

TEST(TensorSet, DuplicateAcrossIndexedShards) {
  const std::string dir = fresh_dir();
  Sample s;
  const auto all = s.tensors();
  ASSERT_TRUE(write_safetensors(dir + "/s1.safetensors", {all[0], all[1]}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/s2.safetensors", {all[0]}).ok());
  write_bytes(dir + "/model.safetensors.index.json",
              R"({"weight_map": {"a.f32": "s1.safetensors", "b.bf16": "s2.safetensors"}})");
  auto set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(contains(set.error_message(), "s2.safetensors: tensor 'a.f32': also in"))
      << set.error_message();
}

TEST(TensorSet, IndexNamesMissingShard) {
  const std::string dir = fresh_dir();
  Sample s;
  ASSERT_TRUE(write_safetensors(dir + "/s1.safetensors", {s.tensors()[0]}).ok());
  write_bytes(dir + "/model.safetensors.index.json",
              R"({"weight_map": {"a.f32": "s1.safetensors", "b.bf16": "s9.safetensors"}})");
  auto set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  const std::string msg = set.error_message();
  EXPECT_TRUE(contains(msg, "model.safetensors.index.json")) << msg;
  EXPECT_TRUE(contains(msg, "s9.safetensors")) << msg;
  EXPECT_TRUE(contains(msg, "No such file")) << msg;
}

TEST(TensorSet, IndexNamesMissingTensor) {
  const std::string dir = fresh_dir();
  Sample s;
  const auto all = s.tensors();
  ASSERT_TRUE(write_safetensors(dir + "/s1.safetensors", {all[0]}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/s2.safetensors", {all[1]}).ok());
  // b.bf16 is listed in s1 but lives in s2; zz is nowhere.
  write_bytes(dir + "/model.safetensors.index.json",
              R"({"weight_map": {"a.f32": "s1.safetensors", "b.bf16": "s1.safetensors"}})");
  auto set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  std::string msg = set.error_message();
  EXPECT_TRUE(contains(msg, "model.safetensors.index.json: tensor 'b.bf16'")) << msg;

  write_bytes(dir + "/model.safetensors.index.json",
              R"({"weight_map": {"a.f32": "s1.safetensors", "zz": "s2.safetensors"}})");
  set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  msg = set.error_message();
  EXPECT_TRUE(contains(msg, "model.safetensors.index.json: tensor 'zz'")) << msg;
  EXPECT_TRUE(contains(msg, "s2.safetensors")) << msg;
}

TEST(TensorSet, BadIndex) {
  const std::string dir = fresh_dir();
  const std::string index = dir + "/model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"weight_map": {)", "not valid JSON"},
      {"", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"metadata": {}})", "missing 'weight_map'"},
      {R"({"weight_map": []})", "'weight_map' is not a JSON object"},
      {R"({"weight_map": {}})", "lists no tensors"},
      {R"({"weight_map": {"x": 3}})", "tensor 'x': shard is not a string"},
      {R"({"weight_map": {"x": "../model.safetensors"}})", "not a plain file name"},
      {R"({"weight_map": {"x": "/etc/passwd"}})", "not a plain file name"},
  };
  for (const auto& [text, what] : cases) {
    write_bytes(index, text);
    auto set = TensorSet::open_dir(dir);
    ASSERT_FALSE(set.ok()) << text;
    EXPECT_TRUE(contains(set.error_message(), "model.safetensors.index.json: "))
        << set.error_message();
    EXPECT_TRUE(contains(set.error_message(), what)) << set.error_message();
  }
}

TEST(TensorSet, NoFilesOrNoDir) {
  const std::string dir = fresh_dir();
  auto set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(contains(set.error_message(), dir + ": no model.safetensors")) << set.error_message();
  set = TensorSet::open_dir(dir + "/nope");
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(contains(set.error_message(), "nope: not a directory")) << set.error_message();
}

TEST(TensorSet, BadShardNamesFile) {
  const std::string dir = fresh_dir();
  write_bytes(dir + "/model.safetensors", "abc");
  auto set = TensorSet::open_dir(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_TRUE(contains(set.error_message(), "model.safetensors: file is 3 bytes"))
      << set.error_message();
}

// ---------------------------------------------------------------------------------------------
// Malformed files

TEST(SafetensorsMalformed, TooShort) {
  for (size_t n : {0, 1, 7}) {
    auto r = parse_image(std::string(n, '\0'), "short.safetensors");
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(
        contains(r.error_message(), "short.safetensors: file is " + std::to_string(n) + " bytes"))
        << r.error_message();
  }
  // Also through open(), with a real zero-length file.
  const std::string dir = fresh_dir();
  write_bytes(dir + "/zero.safetensors", "");
  auto r = SafetensorsFile::open(dir + "/zero.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "zero.safetensors: file is 0 bytes"))
      << r.error_message();
}

TEST(SafetensorsMalformed, HeaderLongerThanFile) {
  std::string img = image("{}", 0);
  img[0] = 100;  // claims 100 header bytes, has 2
  auto r = parse_image(img, "long.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message(),
            "long.safetensors: header length 100 exceeds the file (2 bytes after the length)");
}

TEST(SafetensorsMalformed, HeaderOverLimit) {
  std::string img = image("{}", 0);
  img[7] = 1;  // 2^56 + 2
  auto r = parse_image(img, "huge.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "huge.safetensors: header length")) << r.error_message();
  EXPECT_TRUE(contains(r.error_message(), "exceeds the limit")) << r.error_message();
}

TEST(SafetensorsMalformed, DataSectionShorterThanOffsets) {
  auto r =
      parse_image(image(R"({"x.weight":{"dtype":"F32","shape":[24],"data_offsets":[0,96]}})", 64));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message(),
            "model.safetensors: tensor 'x.weight': data_offsets [0, 96] out of range (data section "
            "is 64 bytes)");
}

TEST(SafetensorsMalformed, BadHeaderJson) {
  expect_parse_error(R"({"x":{"dtype":"F32",)", 0, "", "header is not valid JSON");
  expect_parse_error("", 0, "", "header is not valid JSON");
  expect_parse_error("{} trailing", 0, "", "header is not valid JSON");
  expect_parse_error("{\"\xff\":1}", 0, "", "header is not valid JSON");  // invalid UTF-8
  expect_parse_error(std::string("{\0}", 3), 0, "", "header is not valid JSON");
}

TEST(SafetensorsMalformed, HeaderNotObject) {
  expect_parse_error("[1,2,3]", 0, "", "header is not a JSON object (got array)");
  expect_parse_error("42", 0, "", "header is not a JSON object");
  expect_parse_error("null", 0, "", "header is not a JSON object");
}

TEST(SafetensorsMalformed, EntryNotObject) {
  expect_parse_error(R"({"x":[1,2]})", 0, "x", "entry is not a JSON object");
}

TEST(SafetensorsMalformed, MissingFields) {
  expect_parse_error(R"({"x":{"shape":[1],"data_offsets":[0,4]}})", 4, "x", "missing 'dtype'");
  expect_parse_error(R"({"x":{"dtype":"F32","data_offsets":[0,4]}})", 4, "x", "missing 'shape'");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1]}})", 4, "x", "missing 'data_offsets'");
}

TEST(SafetensorsMalformed, WrongFieldTypes) {
  expect_parse_error(R"({"x":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, "x",
                     "'dtype' is not a string");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4, "x",
                     "'shape' is not an array");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4, "x",
                     "shape[0] is not an integer");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4, "x",
                     "shape[0] is not an integer");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, "x",
                     "'data_offsets' is not an array [begin, end]");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":{"a":1}}})", 4, "x",
                     "'data_offsets' is not an array");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4, "x",
                     "data_offsets end is not an integer");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[-4,4]}})", 4, "x",
                     "data_offsets begin is negative (-4)");
}

TEST(SafetensorsMalformed, NegativeShape) {
  expect_parse_error(R"({"x.w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", 4, "x.w",
                     "shape[1] is negative (-1)");
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  // Each dim fits in int64 but the product does not (and numel() must never overflow).
  expect_parse_error(
      R"({"x":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", 4, "x",
      "shape is too large");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})",
                     4, "x", "shape[0] is too large");
  expect_parse_error(R"({"x":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]}})",
                     4, "x", "shape[0] is too large");
  // A zero dim makes an empty tensor, but the other dims still must not overflow numel().
  expect_parse_error(
      R"({"x":{"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}})", 0,
      "x", "shape is too large");
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 4, "x",
                     "data_offsets [4, 8] out of range (data section is 4 bytes)");
  expect_parse_error(
      R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
      4, "x", "out of range");
}

TEST(SafetensorsMalformed, OffsetsBeginAfterEnd) {
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "x",
                     "data_offsets [8, 4]: begin > end");
}

TEST(SafetensorsMalformed, SizeMismatchWithShape) {
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16, "x",
                     "data_offsets [0, 12] hold 12 bytes but shape [2, 2] of F32 needs 16");
  expect_parse_error(R"({"x":{"dtype":"BF16","shape":[],"data_offsets":[0,4]}})", 4, "x",
                     "needs 2");
  expect_parse_error(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[0,4]}})", 4, "x",
                     "needs 0");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_parse_error(R"({"x":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1, "x",
                     "dtype 'F8_E4M3' not supported");
  expect_parse_error(R"({"x":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, "x",
                     "not supported");
}

TEST(SafetensorsMalformed, DuplicateTensorInHeader) {
  expect_parse_error(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                     R"("x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                     1, "x", "listed twice");
}

TEST(SafetensorsMalformed, BadMetadata) {
  expect_parse_error(R"({"__metadata__":[1]})", 0, "", "__metadata__ is not a JSON object");
  expect_parse_error(R"({"__metadata__":{"format":1}})", 0, "",
                     "__metadata__: value of 'format' is not a string");
}

TEST(SafetensorsMalformed, MessagesStayOnOneLine) {
  // A tensor name with a newline (legal JSON) is escaped in the message.
  expect_parse_error(R"({"a\nb":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 8, "a\\x0ab",
                     "needs 4");
}

TEST(SafetensorsMalformed, TruncatedAtEveryLength) {
  // Every prefix of a valid file parses or fails cleanly, never reading past the end.
  const std::string dir = fresh_dir();
  Sample s;
  ASSERT_TRUE(write_safetensors(dir + "/m.safetensors", s.tensors()).ok());
  const std::string full = read_bytes(dir + "/m.safetensors");
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = parse_image(full.substr(0, n), "cut.safetensors");
    EXPECT_FALSE(r.ok()) << n;
    if (!r.ok()) {
      EXPECT_EQ(r.error_message().rfind("cut.safetensors: ", 0), 0u) << r.error_message();
    }
  }
  EXPECT_TRUE(parse_image(full).ok());
}

TEST(SafetensorsMalformed, OpenErrorsNamePath) {
  const std::string dir = fresh_dir();
  auto r = SafetensorsFile::open(dir + "/absent.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(
      contains(r.error_message(), "absent.safetensors: cannot open: No such file or directory"))
      << r.error_message();
  r = SafetensorsFile::open(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error_message(), "is a directory")) << r.error_message();
}

// ---------------------------------------------------------------------------------------------
// Writer errors and MappedFile

TEST(SafetensorsWriter, RejectsBadInput) {
  const std::string dir = fresh_dir();
  const std::string path = dir + "/w.safetensors";
  float x[4] = {};
  auto expect_fail = [&](const std::vector<TensorToWrite>& t, const std::string& what) {
    auto st = write_safetensors(path, t);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_TRUE(contains(st.error_message(), "w.safetensors")) << st.error_message();
    EXPECT_TRUE(contains(st.error_message(), what)) << st.error_message();
    EXPECT_FALSE(fs::exists(path));
  };
  expect_fail({{"a", DType::F32, {1}, x}, {"a", DType::F32, {1}, x}}, "tensor 'a': written twice");
  expect_fail({{"__metadata__", DType::F32, {1}, x}}, "reserved");
  expect_fail({{"n", DType::F32, {-1}, x}}, "tensor 'n': negative dim");
  expect_fail({{"z", DType::F32, {2}, nullptr}}, "tensor 'z': data is null");
  expect_fail({{"bad\xff", DType::F32, {1}, x}}, "cannot encode header");

  auto st = write_safetensors(dir + "/no/such/dir/w.safetensors", {{"a", DType::F32, {4}, x}});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.error_message(), "w.safetensors.tmp: cannot create: No such file"))
      << st.error_message();
}

TEST(MappedFile, ZeroLengthAndContents) {
  const std::string dir = fresh_dir();
  write_bytes(dir + "/empty", "");
  auto m = MappedFile::open(dir + "/empty");
  ASSERT_TRUE(m.ok()) << m.error_message();
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(m->data(), nullptr);
  EXPECT_TRUE(m->text().empty());

  write_bytes(dir + "/abc", "abc");
  m = MappedFile::open(dir + "/abc");
  ASSERT_TRUE(m.ok()) << m.error_message();
  EXPECT_EQ(m->size(), 3u);
  EXPECT_EQ(m->text(), "abc");
  EXPECT_EQ(m->path(), dir + "/abc");
  MappedFile moved = std::move(m).value();
  EXPECT_EQ(moved.text(), "abc");

  auto bad = MappedFile::open(dir + "/missing");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error_message(), dir + "/missing: cannot open: No such file or directory");
}

}  // namespace
}  // namespace rw
