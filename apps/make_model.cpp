// `rewind make-model`: writes a model with seeded random weights in the exact Hugging Face
// layout (config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
// generation_config.json). Names, shapes and config layout follow docs/QWEN35.md per family:
// qwen3_5 (nested text_config, model.language_model.*), qwen3_5_moe (fused experts) and
// qwen3_next (flat config, interleaved in_proj_qkvz / in_proj_ba, per-expert tensors).
// --mtp adds the multi-token-prediction head (mtp.*, docs/QWEN35.md 2.5); --layers and
// --layer-types change the layer pattern (tiny-dense: attention only, tokenizer of tiny).
// With --from DIR --noise SIGMA it instead copies a model directory, adding seeded Gaussian
// noise to every floating-point weight (a draft that agrees with its target for real reasons).
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "args.h"
#include "commands.h"
#include "rewind/chat/chat_template.h"
#include "rewind/io/safetensors.h"
#include "rewind/model/config.h"
#include "rewind/model/weight_source.h"
#include "rewind/tensor/dtype.h"
#include "rewind/tokenizer/tokenizer.h"

namespace rw::app {

namespace {

struct Shape {
  std::string family;  // qwen3_5 | qwen3_5_moe | qwen3_next
  int64_t V, H, L, nh, nkv, D, Hk, Hv, dk, dv, K, I, E = 0, k = 0, Im = 0, Is = 0;
  bool tied = false;
  double theta = 1e7;
  int64_t n_merges;
  bool all_full = false;  // every layer full attention (no GDN layers)
};

Result<Shape> preset(const std::string& name) {
  if (name == "tiny-dense") {  // attention only; vocab and tokenizer of tiny (a draft for it)
    Shape s{"qwen3_5", 512, 64, 4, 4, 2, 32, 2, 4, 16, 8, 4, 128, 0, 0, 0, 0, false, 1e7, 247};
    s.all_full = true;
    return s;
  }
  if (name == "tiny")
    return Shape{"qwen3_5", 512, 64, 4, 4, 2, 32, 2, 4, 16, 8, 4, 128, 0, 0, 0, 0, false, 1e7, 247};
  if (name == "qwen3.5-moe-tiny")
    return Shape{"qwen3_5_moe", 512, 64, 4, 4, 2, 32, 2, 4, 16, 8, 4, 0, 8, 2, 32, 48,
                 false,         1e7, 247};
  if (name == "qwen3-next-tiny")
    return Shape{"qwen3_next", 512, 64,    4,   4,  2, 32, 2, 4, 16, 8, 4, 0, 8, 2,
                 32,           48,  false, 1e7, 247};
  if (name ==
      "qwen3.5-tiny-256")  // every matmul row length a multiple of 256 (K-quant tests), Hv > Hk
    return Shape{"qwen3_5", 512, 256, 4, 4, 2, 64, 2,     4,   32,
                 64,        4,   512, 0, 0, 0, 0,  false, 1e7, 247};
  if (name == "qwen3.5-mini")  // small real-ratio shape for cache benchmarks on slow machines
    return Shape{"qwen3_5", 4096, 256, 8, 4, 2, 64, 4,    4,   64,
                 64,        4,    768, 0, 0, 0, 0,  true, 1e7, 2000};
  if (name == "qwen3.5-0.8b")
    return Shape{"qwen3_5", 248320, 1024, 24, 8, 2, 256, 16,   16,  128,
                 128,       4,      3584, 0,  0, 0, 0,   true, 1e7, 2000};
  return make_error(
      "unknown preset '" + name +
      "' (tiny, tiny-dense, qwen3.5-tiny-256, qwen3.5-mini, qwen3.5-0.8b, qwen3.5-moe-tiny, "
      "qwen3-next-tiny, granite-h-tiny, granite-h-dense-tiny, nemotron-h-tiny, "
      "nemotron-h-moe-tiny, "
      "granite-4.0-h-350m, granite-4.0-h-tiny, nemotron-nano-9b-v2, nemotron-3-nano-30b-a3b)");
}

// splitmix64-based generator; normals by Box-Muller. Deterministic per (seed, tensor name).
class Rng {
 public:
  explicit Rng(uint64_t s) : s_(s) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Moves ahead by `calls` calls of next() (splitmix64's state is a counter): normal number i
  // comes from calls 2 (i / 2) and 2 (i / 2) + 1, so skip(i) at an even i starts there.
  void skip(uint64_t calls) {
    s_ += calls * 0x9e3779b97f4a7c15ull;
    have_ = false;
  }
  float normal() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    const double u1 = uniform() + 1e-300, u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(6.283185307179586 * u2));
    have_ = true;
    return static_cast<float>(r * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t s_;
  bool have_ = false;
  float spare_ = 0;
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The threads that make weights (every core; the values do not depend on the split).
ThreadPool& gen_pool() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

// v[i] = f(normal i of Rng(h)) for i < n, on every core: a share starting at an even i skips
// the generator ahead (Rng::skip), so the values equal one sequential pass.
template <class F>
void fill_normals(std::vector<float>* v, int64_t n, uint64_t h, F f) {
  v->resize(static_cast<size_t>(n));
  constexpr int64_t kShare = int64_t{1} << 16;  // even
  float* out = v->data();
  gen_pool().parallel_guided((n + kShare - 1) / kShare, 1, 1,
                             [&](int, int64_t s0, int64_t s1) {
                               for (int64_t s = s0; s < s1; ++s) {
                                 Rng r(h);
                                 r.skip(static_cast<uint64_t>(s * kShare));
                                 for (int64_t i = s * kShare; i < std::min(n, (s + 1) * kShare);
                                      ++i)
                                   out[i] = f(r.normal());
                               }
                             },
                             n * 32);
}

// One tensor of a streamed checkpoint: made when written, then dropped.
struct LazyTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(std::vector<float>*)> make;  // fills numel values
  bool keep_f32 = false;  // stays F32 in a BF16 checkpoint (Qwen's A_log, as the real files)
  // A matrix or embedding: a GGUF file made directly (MemoryCheckpoint) makes it only when the
  // writer reads it; the small tensors are made up front (the weight map copies them).
  bool big = false;
};

// `v` stored as `t` (F32 or BF16) at dst, on every core.
void store_values(const std::vector<float>& v, DType t, std::byte* dst) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (t == DType::F32) {
    std::memcpy(dst, v.data(), v.size() * 4);
    return;
  }
  gen_pool().parallel_for(
      n, int64_t{1} << 16,
      [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const uint16_t h = f32_to_bf16(v[static_cast<size_t>(i)]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
      },
      n * 4);
}

// The safetensors header of `ts` (sorted by name) stored as `dt` (keep_f32 tensors as F32),
// padded to 8 bytes; `data_bytes` gets the size of the data that follows.
std::string streamed_header(const std::vector<LazyTensor>& ts, DType dt, uint64_t* data_bytes) {
  auto type_of = [&](const LazyTensor& t) { return t.keep_f32 ? DType::F32 : dt; };
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  for (auto& t : ts) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    const uint64_t nb = n * dtype_size(type_of(t));
    nlohmann::json e = {{"dtype", std::string(dtype_name(type_of(t)))},
                        {"shape", t.shape},
                        {"data_offsets", {off, off + nb}}};
    header += ',';
    header += nlohmann::json(t.name).dump();
    header += ':';
    header += e.dump();
    off += nb;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  *data_bytes = off;
  return header;
}

// Writes `ts` as one safetensors file (sorted by name), making one tensor at a time, so that a
// checkpoint larger than memory can be written; a progress line on a terminal.
Status write_streamed_safetensors(const std::string& path, std::vector<LazyTensor> ts, DType dt) {
  std::sort(ts.begin(), ts.end(), [](auto& a, auto& b) { return a.name < b.name; });
  auto type_of = [&](const LazyTensor& t) { return t.keep_f32 ? DType::F32 : dt; };
  uint64_t off = 0;
  const std::string header = streamed_header(ts, dt, &off);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error(path + ": cannot open for writing");
  const uint64_t hl = header.size();
  bool ok = std::fwrite(&hl, 8, 1, f) == 1 && std::fwrite(header.data(), 1, hl, f) == hl;
  ProgressLine progress("writing " + path, 1e9, "GB", size_t{64} << 20);
  size_t written = 0;
  progress(0, static_cast<size_t>(off));  // shows the line and starts the clock
  std::vector<float> v;
  std::vector<std::byte> bytes;
  for (auto& t : ts) {
    if (!ok) break;
    t.make(&v);
    bytes.resize(v.size() * dtype_size(type_of(t)));
    store_values(v, type_of(t), bytes.data());
    ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    written += bytes.size();
    std::vector<float>().swap(v);
    progress(written, static_cast<size_t>(off));
  }
  progress.finish();
  if (std::fclose(f) != 0) ok = false;
  if (!ok) return make_error(path + ": write failed");
  return Ok{};
}

// The presets' tokenizer: a BPE of n_merges merges learnt on the built-in text, with ChatML,
// reasoning and tool-call special tokens.
std::string preset_tokenizer_json(int64_t n_merges) {
  BpeTrainOptions topt;
  topt.n_merges = static_cast<int32_t>(n_merges);
  topt.special_tokens = {"<|endoftext|>", "<|im_start|>",    "<|im_end|>",
                         "<think>",       "</think>",        "<tool_call>",
                         "</tool_call>",  "<tool_response>", "</tool_response>"};
  return train_bpe_tokenizer_json(builtin_training_text(), topt);
}

// A model to write: its tensors (made when written) and the bodies of its JSON files.
struct ModelFiles {
  std::vector<LazyTensor> tensors;
  DType dtype = DType::F32;
  std::string config, tokenizer, tokenizer_config, generation_config;
  std::string label;  // "PRESET, DTYPE, seed N"
};

// Fills `m` with a made checkpoint's tensors and JSON files ("PRESET, DTYPE, seed N" label).
void fill_model_files(ModelFiles* m, std::vector<LazyTensor> tensors, const std::string& dtype,
                      const nlohmann::json& cfg, std::string tokenizer, const nlohmann::json& tcfg,
                      const nlohmann::json& gcfg, const std::string& preset, uint64_t seed) {
  m->tensors = std::move(tensors);
  m->dtype = dtype == "f32" ? DType::F32 : DType::BF16;
  m->config = cfg.dump(2) + "\n";
  m->tokenizer = std::move(tokenizer);
  m->tokenizer_config = tcfg.dump(2) + "\n";
  m->generation_config = gcfg.dump(2) + "\n";
  m->label = preset + ", " + dtype + ", seed " + std::to_string(seed);
}

Status write_hf_files(ModelFiles* m, const std::string& out) {
  ::mkdir(out.c_str(), 0755);
  REWIND_TRY_STATUS(
      write_streamed_safetensors(out + "/model.safetensors", std::move(m->tensors), m->dtype));
  auto write = [&](const std::string& name, const std::string& body) {
    std::ofstream f(out + "/" + name, std::ios::binary);
    f << body;
    return static_cast<bool>(f);
  };
  if (!write("config.json", m->config) || !write("tokenizer.json", m->tokenizer) ||
      !write("tokenizer_config.json", m->tokenizer_config) ||
      !write("generation_config.json", m->generation_config))
    return make_error("cannot write files in " + out);
  return Ok{};
}

// The safetensors checkpoint of a ModelFiles, laid out in reserved (not committed) memory
// instead of a file: the small tensors are made up front, a big one when the GGUF writer is
// about to read it (prepare), and its pages are given back when the writer moves on to weights
// it does not read. Memory then holds about one GGUF tensor's sources at a time, so a model
// larger than memory goes straight to a quantised GGUF file with no intermediate checkpoint.
class MemoryCheckpoint {
 public:
  MemoryCheckpoint() = default;
  MemoryCheckpoint(const MemoryCheckpoint&) = delete;
  MemoryCheckpoint& operator=(const MemoryCheckpoint&) = delete;
  ~MemoryCheckpoint() {
    if (base_) ::munmap(base_, size_);
  }

  Status init(std::vector<LazyTensor> ts, DType dt) {
    std::sort(ts.begin(), ts.end(), [](auto& a, auto& b) { return a.name < b.name; });
    uint64_t data_bytes = 0;
    const std::string header = streamed_header(ts, dt, &data_bytes);
    const uint64_t hl = header.size();
    size_ = 8 + hl + data_bytes;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      const size_t mib = size_ >> 20;
      size_ = 0;
      return make_error("make-model: cannot reserve " + std::to_string(mib) +
                        " MiB of address space: " + std::strerror(err));
    }
    base_ = static_cast<std::byte*>(p);
    std::memcpy(base_, &hl, 8);
    std::memcpy(base_ + 8, header.data(), hl);
    REWIND_TRY(SafetensorsFile f, SafetensorsFile::parse(base_, size_, "make-model checkpoint"));
    for (LazyTensor& t : ts) {
      const TensorView* v = f.find(t.name);
      REWIND_CHECK(v != nullptr);
      Entry e;
      e.begin = static_cast<size_t>(v->data - base_);
      e.end = e.begin + v->nbytes;
      e.dtype = v->dtype;
      e.t = std::move(t);
      entries_.push_back(std::move(e));
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
    std::vector<SafetensorsFile> files;
    files.push_back(std::move(f));
    REWIND_TRY(set_, TensorSet::from_files(std::move(files)));
    for (Entry& e : entries_)
      if (!e.t.big) make(&e);
    return Ok{};
  }

  const TensorSet& tensors() const { return set_; }

  // Before the writer reads `reads`: the big tensors they view are made, the other big
  // tensors dropped.
  void prepare(const std::vector<const WeightSource*>& reads) {
    std::vector<char> need(entries_.size(), 0);
    for (const WeightSource* w : reads) {
      for (const RowBlock& b : w->blocks) {
        const std::byte* d = static_cast<const std::byte*>(b.data);
        if (b.owned || d < base_ || d >= base_ + size_) continue;  // copied by the weight map
        const size_t lo = static_cast<size_t>(d - base_);
        const size_t hi = lo + dtype_row_bytes(b.dtype, w->cols) * static_cast<size_t>(b.rows);
        // The entries overlapping [lo, hi): from the last one starting at or before lo.
        auto it = std::upper_bound(entries_.begin(), entries_.end(), lo,
                                   [](size_t x, const Entry& e) { return x < e.begin; });
        if (it != entries_.begin()) --it;
        for (; it != entries_.end() && it->begin < hi; ++it)
          if (it->end > lo) need[static_cast<size_t>(it - entries_.begin())] = 1;
      }
    }
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].t.big && entries_[i].resident && !need[i]) drop(&entries_[i]);
    for (size_t i = 0; i < entries_.size(); ++i)
      if (need[i] && !entries_[i].resident) make(&entries_[i]);
  }

 private:
  struct Entry {
    LazyTensor t;
    size_t begin = 0, end = 0;
    DType dtype = DType::F32;
    bool resident = false;
  };

  void make(Entry* e) {
    std::vector<float> v;
    e->t.make(&v);
    REWIND_CHECK(v.size() * dtype_size(e->dtype) == e->end - e->begin);
    store_values(v, e->dtype, base_ + e->begin);
    e->resident = true;
  }
  // Gives back the pages that lie wholly inside the tensor (a page it shares with a neighbour
  // stays, with the neighbour's bytes).
  void drop(Entry* e) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t lo = (e->begin + page - 1) / page * page, hi = e->end / page * page;
    if (hi > lo) ::madvise(base_ + lo, hi - lo, MADV_DONTNEED);
    e->resident = false;
  }

  std::byte* base_ = nullptr;
  size_t size_ = 0;
  std::vector<Entry> entries_;
  TensorSet set_;
};

// `make-model --format gguf`: the model's weights through the same map and writer as `convert`,
// made one tensor at a time in a MemoryCheckpoint instead of read from files.
Status write_gguf_direct(ModelFiles* m, const std::string& out, const std::string& type,
                         const std::string& name) {
  REWIND_TRY(ModelConfig cfg, parse_model_config(m->config, "make-model config.json"));
  REWIND_TRY(Tokenizer tok, Tokenizer::from_json(m->tokenizer, "tokenizer.json"));
  const nlohmann::json tc = nlohmann::json::parse(m->tokenizer_config);
  MemoryCheckpoint ck;
  REWIND_TRY_STATUS(ck.init(std::move(m->tensors), m->dtype));
  REWIND_TRY(WeightSet ws, WeightSet::from_hf(ck.tensors(), cfg));
  return write_gguf_checkpoint(
      out, cfg, ws, tok, tc, tc.value("chat_template", std::string()), type, name,
      [&](const std::vector<const WeightSource*>& reads) { ck.prepare(reads); });
}

// Copies every file of `from` into `out`; in each *.safetensors file every floating-point tensor
// except A_log becomes w + sigma * rms(w) * N(0,1), in its own dtype. The normals are seeded
// per tensor name from a stream distinct from the one make-model draws weights from.
int noise_copy(const std::string& from, const std::string& out, double sigma, uint64_t seed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(from, ec)) return fail("--from " + from + ": not a directory");
  fs::create_directories(out, ec);
  if (ec) return fail("cannot create " + out + ": " + ec.message());
  if (fs::equivalent(from, out, ec)) return fail("--out must differ from --from");
  int64_t n_noised = 0;
  for (const auto& entry : fs::directory_iterator(from)) {
    const fs::path dst = fs::path(out) / entry.path().filename();
    if (entry.path().extension() != ".safetensors" || !entry.is_regular_file()) {
      fs::copy(entry.path(), dst,
               fs::copy_options::overwrite_existing | fs::copy_options::recursive, ec);
      if (ec) return fail("cannot copy " + entry.path().string() + ": " + ec.message());
      continue;
    }
    auto f = SafetensorsFile::open(entry.path().string());
    if (!f.ok()) return fail(f.error_message());
    std::vector<TensorToWrite> tw;
    std::vector<std::vector<std::byte>> bufs;
    bufs.reserve(f->tensors().size());
    for (const TensorView& t : f->tensors()) {
      if (!dtype_is_float(t.dtype) || t.name.find("A_log") != std::string::npos) {
        tw.push_back({t.name, t.dtype, t.shape, t.data});
        continue;
      }
      const size_t n = static_cast<size_t>(t.numel());
      std::vector<float> v(n);
      convert_to_f32(t.data, t.dtype, n, v.data());
      double ss = 0;
      for (float x : v) ss += static_cast<double>(x) * x;
      const double sd = sigma * std::sqrt(n > 0 ? ss / static_cast<double>(n) : 0.0);
      Rng r(hash_name("noise/" + t.name, seed));
      for (auto& x : v) x = static_cast<float>(x + sd * r.normal());
      std::vector<std::byte> b(n * dtype_size(t.dtype));
      for (size_t i = 0; i < n; ++i) {
        std::byte* p = b.data() + i * dtype_size(t.dtype);
        if (t.dtype == DType::F32) {
          std::memcpy(p, &v[i], 4);
        } else if (t.dtype == DType::F64) {
          const double d = v[i];
          std::memcpy(p, &d, 8);
        } else {
          const uint16_t h = t.dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
          std::memcpy(p, &h, 2);
        }
      }
      bufs.push_back(std::move(b));
      tw.push_back({t.name, t.dtype, t.shape, bufs.back().data()});
      ++n_noised;
    }
    Status st = write_safetensors(dst.string(), tw, f->metadata());
    if (!st.ok()) return fail(st.error_message());
  }
  std::printf("wrote %s (%s with noise %g x rms on %lld tensors, seed %llu)\n", out.c_str(),
              from.c_str(), sigma, static_cast<long long>(n_noised),
              static_cast<unsigned long long>(seed));
  return 0;
}

// ---- Mamba2 hybrids (Granite-4.0-H, Nemotron-H)
// --------------------------------------------------

// A Granite-4.0-H (`granitemoehybrid`) or Nemotron-H (`nemotron_h`) shape. `pattern` has one
// character per layer: M Mamba2, * attention, and for Nemotron-H - a squared-ReLU MLP block and
// E a MoE block (E experts of Im, top-k, shared expert Fs, groups ng / tg kept, scale).
struct M2Shape {
  std::string family;
  int64_t V, H;
  std::string pattern;
  int64_t Hs, P, N, G, K;  // Mamba2 heads x head dim, state, groups, conv kernel
  int64_t nh, nkv, D;      // attention
  int64_t F;               // Granite: the shared MLP; Nemotron-H: the MLP blocks
  int64_t E = 0, k = 0, Im = 0;
  bool tied = true;
  double emb = 1, res = 1, attn = 1, logit = 1;
  int64_t n_merges = 247;
  bool big = false;                // real shape: HF files default to bf16
  int64_t Fs = 0, ng = 1, tg = 1;  // Nemotron-H MoE: shared expert width, expert groups
  double scale = 1;                // Nemotron-H MoE: routed_scaling_factor
};

// Granite's pattern: attention at `at`, Mamba2 elsewhere.
std::string granite_pattern(int64_t n, std::vector<int64_t> at) {
  std::string p(static_cast<size_t>(n), 'M');
  for (int64_t i : at) p[static_cast<size_t>(i)] = '*';
  return p;
}

std::optional<M2Shape> mamba2_preset(const std::string& name) {
  // Tiny shapes: every matrix row a multiple of 256 (so K-quants apply), Mamba2 heads > groups.
  if (name == "granite-h-tiny")  // MoE: 4 experts top-2 plus the shared MLP
    return M2Shape{"granitemoehybrid",
                   512,
                   256,
                   "M*MM*",
                   8,
                   64,
                   32,
                   1,
                   4,
                   4,
                   2,
                   64,
                   256,
                   4,
                   2,
                   256,
                   true,
                   12,
                   0.25,
                   0.125,
                   3};
  if (name == "granite-h-dense-tiny")
    return M2Shape{"granitemoehybrid",
                   512,
                   256,
                   "MM*M",
                   8,
                   64,
                   32,
                   1,
                   4,
                   4,
                   2,
                   64,
                   512,
                   0,
                   0,
                   0,
                   true,
                   12,
                   0.25,
                   0.125,
                   3};
  if (name == "nemotron-h-tiny")
    return M2Shape{"nemotron_h", 512, 256, "M-M*M-", 8, 64,   32, 2, 4, 4, 2,
                   64,           512, 0,   0,        0, false};
  if (name == "nemotron-h-moe-tiny") {  // 8 experts in 4 groups, 2 kept, top-2
    M2Shape s{"nemotron_h", 512, 256, "MEM*E-", 8, 64, 32, 2, 4, 4, 2, 64, 512, 8, 2, 256, false};
    s.Fs = 512;
    s.ng = 4;
    s.tg = 2;
    s.scale = 2.5;
    return s;
  }
  if (name == "nemotron-3-nano-30b-a3b") {  // the released shape; no MTP block
    M2Shape s{"nemotron_h",
              131072,
              2688,
              "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
              64,
              64,
              128,
              8,
              4,
              32,
              2,
              128,
              1856,
              128,
              6,
              1856,
              false,
              1,
              1,
              1,
              1,
              2000,
              true};
    s.Fs = 3712;
    s.scale = 2.5;
    return s;
  }
  if (name == "granite-4.0-h-350m") {
    M2Shape s{"granitemoehybrid",
              100352,
              768,
              granite_pattern(32, {5, 13, 21, 29}),
              48,
              32,
              128,
              1,
              4,
              12,
              4,
              64,
              2048,
              0,
              0,
              0,
              true,
              12,
              0.246,
              0.015625,
              3,
              2000,
              true};
    return s;
  }
  if (name == "granite-4.0-h-tiny")
    return M2Shape{"granitemoehybrid",
                   100352,
                   1536,
                   granite_pattern(40, {5, 15, 25, 35}),
                   48,
                   64,
                   128,
                   1,
                   4,
                   12,
                   4,
                   128,
                   1024,
                   64,
                   6,
                   512,
                   true,
                   12,
                   0.22,
                   0.0078125,
                   6,
                   2000,
                   true};
  if (name == "nemotron-nano-9b-v2")
    return M2Shape{"nemotron_h",
                   131072,
                   4480,
                   "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
                   128,
                   80,
                   128,
                   8,
                   4,
                   40,
                   8,
                   128,
                   15680,
                   0,
                   0,
                   0,
                   false,
                   1,
                   1,
                   1,
                   1,
                   2000,
                   true};
  return std::nullopt;
}

int make_mamba2_model(const Args& args, const M2Shape& S, const std::string& preset,
                      ModelFiles* m) {
  for (const char* o : {"--mtp", "--layers", "--layer-types", "--linear-heads"})
    if (args.has(o)) return fail(std::string(o) + " does not apply to preset " + preset);
  const std::string dtype = args.str("--dtype", S.big ? "bf16" : "f32");
  if (dtype != "f32" && dtype != "bf16") return fail("--dtype must be f32 or bf16");
  auto seed_r = args.int_("--seed", 0);
  if (!seed_r.ok()) return fail(seed_r.error_message());
  const uint64_t seed = static_cast<uint64_t>(seed_r.value());
  const std::string tok_json = preset_tokenizer_json(S.n_merges);
  auto tok = Tokenizer::from_json(tok_json, "tokenizer.json");
  if (!tok.ok()) return fail(tok.error_message());
  if (tok->vocab_size() > S.V) return fail("tokenizer has more ids than vocab_size");

  const bool granite = S.family == "granitemoehybrid";
  const int64_t H = S.H, DI = S.Hs * S.P, CD = DI + 2 * S.G * S.N;
  std::vector<LazyTensor> T;
  auto normal = [&](const std::string& n, std::vector<int64_t> shape, float mean, float sd,
                    bool big = false) {
    T.push_back({n, shape,
                 [n, shape, mean, sd, seed](std::vector<float>* v) {
                   int64_t cnt = 1;
                   for (int64_t d : shape) cnt *= d;
                   fill_normals(v, cnt, hash_name(n, seed),
                                [mean, sd](float z) { return mean + sd * z; });
                 },
                 false, big});
  };
  // A linear layer [.., out, in]: N(0, 1 / in).
  auto lin = [&](const std::string& n, std::vector<int64_t> shape) {
    normal(n, shape, 0.0f, 1.0f / std::sqrt(static_cast<float>(shape.back())), true);
  };
  auto values = [&](const std::string& n, int64_t cnt, std::function<float(int64_t, Rng&)> f) {
    T.push_back({n, {cnt}, [n, cnt, f, seed](std::vector<float>* v) {
                   Rng r(hash_name(n, seed));
                   v->resize(static_cast<size_t>(cnt));
                   for (int64_t i = 0; i < cnt; ++i) (*v)[static_cast<size_t>(i)] = f(i, r);
                 }});
  };
  // Mamba2 as HF initialises it: A_log = log(1..H), D = 1, dt_bias = softplus^-1(dt) with dt
  // log-uniform in [1e-3, 0.1], the gated norm 1.
  auto mamba = [&](const std::string& m) {
    lin(m + "in_proj.weight", {2 * DI + 2 * S.G * S.N + S.Hs, H});
    normal(m + "conv1d.weight", {CD, 1, S.K}, 0.0f, 1.0f / std::sqrt(static_cast<float>(S.K)));
    normal(m + "conv1d.bias", {CD}, 0.0f, 0.1f);
    values(m + "A_log", S.Hs, [](int64_t i, Rng&) { return std::log(static_cast<float>(i + 1)); });
    values(m + "D", S.Hs, [](int64_t, Rng&) { return 1.0f; });
    values(m + "dt_bias", S.Hs, [](int64_t, Rng& r) {
      const double dt = std::exp(std::log(1e-3) + r.uniform() * (std::log(0.1) - std::log(1e-3)));
      return static_cast<float>(dt + std::log(-std::expm1(-dt)));
    });
    values(m + "norm.weight", DI, [](int64_t, Rng&) { return 1.0f; });
    lin(m + "out_proj.weight", {H, DI});
  };
  auto attention = [&](const std::string& a) {
    lin(a + "q_proj.weight", {S.nh * S.D, H});
    lin(a + "k_proj.weight", {S.nkv * S.D, H});
    lin(a + "v_proj.weight", {S.nkv * S.D, H});
    lin(a + "o_proj.weight", {H, S.nh * S.D});
  };
  // RMSNorm weights 1 + N(0, 0.1), so that a norm mapped to the wrong place shows.
  auto norm = [&](const std::string& n) { normal(n, {H}, 1.0f, 0.1f); };

  const std::string P = granite ? "model." : "backbone.";
  normal(P + (granite ? "embed_tokens.weight" : "embeddings.weight"), {S.V, H}, 0.0f, 0.5f, true);
  nlohmann::json layer_types = nlohmann::json::array();
  for (size_t il = 0; il < S.pattern.size(); ++il) {
    const char kind = S.pattern[il];
    const std::string lp = P + "layers." + std::to_string(il) + ".";
    if (granite) {
      layer_types.push_back(kind == 'M' ? "mamba" : "attention");
      norm(lp + "input_layernorm.weight");
      norm(lp + "post_attention_layernorm.weight");
      if (kind == 'M')
        mamba(lp + "mamba.");
      else
        attention(lp + "self_attn.");
      lin(lp + "shared_mlp.input_linear.weight", {2 * S.F, H});
      lin(lp + "shared_mlp.output_linear.weight", {H, S.F});
      if (S.E > 0) {
        lin(lp + "block_sparse_moe.router.layer.weight", {S.E, H});
        lin(lp + "block_sparse_moe.input_linear.weight", {S.E, 2 * S.Im, H});
        lin(lp + "block_sparse_moe.output_linear.weight", {S.E, H, S.Im});
      }
    } else {
      norm(lp + "norm.weight");
      if (kind == 'M') {
        mamba(lp + "mixer.");
      } else if (kind == '*') {
        attention(lp + "mixer.");
      } else if (kind == 'E') {  // the Hub's names: one tensor per expert
        lin(lp + "mixer.gate.weight", {S.E, H});
        normal(lp + "mixer.gate.e_score_correction_bias", {S.E}, 0.0f, 0.1f);
        for (int64_t e = 0; e < S.E; ++e) {
          const std::string ep = lp + "mixer.experts." + std::to_string(e) + ".";
          lin(ep + "up_proj.weight", {S.Im, H});
          lin(ep + "down_proj.weight", {H, S.Im});
        }
        lin(lp + "mixer.shared_experts.up_proj.weight", {S.Fs, H});
        lin(lp + "mixer.shared_experts.down_proj.weight", {H, S.Fs});
      } else {
        lin(lp + "mixer.up_proj.weight", {S.F, H});
        lin(lp + "mixer.down_proj.weight", {H, S.F});
      }
    }
  }
  norm(P + (granite ? "norm.weight" : "norm_f.weight"));
  if (!S.tied) lin("lm_head.weight", {S.V, H});
  const int32_t eos = tok->token_id("<|im_end|>"), eot = tok->token_id("<|endoftext|>");
  nlohmann::json cfg = {{"model_type", S.family},
                        {"vocab_size", S.V},
                        {"hidden_size", H},
                        {"num_hidden_layers", static_cast<int64_t>(S.pattern.size())},
                        {"num_attention_heads", S.nh},
                        {"num_key_value_heads", S.nkv},
                        {"max_position_embeddings", 131072},
                        {"tie_word_embeddings", S.tied},
                        {"eos_token_id", eos},
                        {"torch_dtype", dtype == "f32" ? "float32" : "bfloat16"}};
  if (granite) {
    cfg["architectures"] = {"GraniteMoeHybridForCausalLM"};
    cfg["layer_types"] = layer_types;
    cfg["mamba_n_heads"] = S.Hs;
    cfg["mamba_d_head"] = S.P;
    cfg["mamba_d_state"] = S.N;
    cfg["mamba_n_groups"] = S.G;
    cfg["mamba_d_conv"] = S.K;
    cfg["mamba_expand"] = DI / H;
    cfg["mamba_conv_bias"] = true;
    cfg["mamba_proj_bias"] = false;
    cfg["hidden_act"] = "silu";
    cfg["position_embedding_type"] = "nope";
    cfg["attention_multiplier"] = S.attn;
    cfg["embedding_multiplier"] = S.emb;
    cfg["residual_multiplier"] = S.res;
    cfg["logits_scaling"] = S.logit;
    cfg["rms_norm_eps"] = 1e-5;
    cfg["shared_intermediate_size"] = S.F;
    cfg["num_local_experts"] = S.E;
    if (S.E > 0) {
      cfg["num_experts_per_tok"] = S.k;
      cfg["intermediate_size"] = S.Im;
    } else {
      cfg["intermediate_size"] = S.F;
    }
  } else {
    cfg["architectures"] = {"NemotronHForCausalLM"};
    cfg["hybrid_override_pattern"] = S.pattern;
    cfg["head_dim"] = S.D;
    cfg["mamba_num_heads"] = S.Hs;
    cfg["mamba_head_dim"] = S.P;
    cfg["ssm_state_size"] = S.N;
    cfg["n_groups"] = S.G;
    cfg["conv_kernel"] = S.K;
    cfg["use_conv_bias"] = true;
    cfg["mamba_hidden_act"] = "silu";
    cfg["mlp_hidden_act"] = "relu2";
    cfg["intermediate_size"] = S.F;
    cfg["layer_norm_epsilon"] = 1e-5;
    if (S.E > 0) {
      cfg["n_routed_experts"] = S.E;
      cfg["num_experts_per_tok"] = S.k;
      cfg["moe_intermediate_size"] = S.Im;
      cfg["moe_shared_expert_intermediate_size"] = S.Fs;
      cfg["n_shared_experts"] = 1;
      cfg["n_group"] = S.ng;
      cfg["topk_group"] = S.tg;
      cfg["norm_topk_prob"] = true;
      cfg["routed_scaling_factor"] = S.scale;
    }
  }
  nlohmann::json tcfg = {{"bos_token", nullptr},
                         {"eos_token", "<|im_end|>"},
                         {"pad_token", "<|endoftext|>"},
                         {"chat_template", rewind_chatml_template()}};
  nlohmann::json gcfg = {{"eos_token_id", {eos, eot}}, {"do_sample", false}};
  fill_model_files(m, std::move(T), dtype, cfg, tok_json, tcfg, gcfg, preset, seed);
  return 0;
}

// The Qwen3.5 / Qwen3.5-MoE / Qwen3-Next presets.
int qwen_model(const Args& parsed, ModelFiles* m) {
  const Args* args = &parsed;
  auto ps = preset(args->str("--preset", "tiny"));
  if (!ps.ok()) return fail(ps.error_message());
  Shape S = ps.value();
  const bool mtp = args->has("--mtp");
  if (args->has("--linear-heads")) {
    auto lh = args->int_list("--linear-heads");
    if (!lh.ok()) return fail(lh.error_message());
    const std::vector<int64_t>& v = lh.value();
    if (v.size() != 4) return fail("--linear-heads wants four numbers: HK,HV,DK,DV");
    for (int64_t x : v)
      if (x < 1 || x > 4096) return fail("--linear-heads: every number must be in [1, 4096]");
    if (v[1] % v[0] != 0) return fail("--linear-heads: HV must be a multiple of HK");
    S.Hk = v[0];
    S.Hv = v[1];
    S.dk = v[2];
    S.dv = v[3];
  }
  // Layer pattern: --layer-types, else all full (tiny-dense), else every 4th layer full.
  auto n_layers = args->int_("--layers", S.L);
  if (!n_layers.ok()) return fail(n_layers.error_message());
  if (n_layers.value() < 1 || n_layers.value() > 4096) return fail("--layers must be in [1, 4096]");
  S.L = n_layers.value();
  std::vector<bool> full_layer;
  if (args->has("--layer-types")) {
    const std::string lt = args->str("--layer-types");
    size_t i = 0;
    while (i <= lt.size()) {
      const size_t j = std::min(lt.find(',', i), lt.size());
      const std::string t = lt.substr(i, j - i);
      if (t == "full" || t == "full_attention") {
        full_layer.push_back(true);
      } else if (t == "linear" || t == "linear_attention") {
        full_layer.push_back(false);
      } else {
        return fail("--layer-types: '" + t + "' is not full or linear");
      }
      i = j + 1;
    }
    if (args->has("--layers") && static_cast<int64_t>(full_layer.size()) != S.L)
      return fail("--layer-types has " + std::to_string(full_layer.size()) +
                  " entries but --layers is " + std::to_string(S.L));
    S.L = static_cast<int64_t>(full_layer.size());
  } else {
    for (int64_t il = 0; il < S.L; ++il) full_layer.push_back(S.all_full || (il + 1) % 4 == 0);
  }
  const std::string dtype = args->str("--dtype", "f32");
  if (dtype != "f32" && dtype != "bf16") return fail("--dtype must be f32 or bf16");
  auto seed_r = args->int_("--seed", 0);
  if (!seed_r.ok()) return fail(seed_r.error_message());
  const uint64_t seed = static_cast<uint64_t>(seed_r.value());
  // Tokenizer first: its size must fit the vocab.
  const std::string tok_json = preset_tokenizer_json(S.n_merges);
  auto tok = Tokenizer::from_json(tok_json, "tokenizer.json");
  if (!tok.ok()) return fail(tok.error_message());
  if (tok->vocab_size() > S.V)
    return fail("tokenizer has " + std::to_string(tok->vocab_size()) +
                " ids, more than vocab_size");

  const bool next = S.family == "qwen3_next";
  const bool moe = S.E > 0;
  const std::string P = next ? "model." : "model.language_model.";
  std::vector<LazyTensor> T;
  // A linear layer [o, i] (or `shape`, of o x i values): N(0, 1 / i).
  auto lin = [&](const std::string& n, int64_t o, int64_t i, std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {o, i};
    T.push_back({n, shape,
                 [n, o, i, seed](std::vector<float>* v) {
                   const float sc = 1.0f / std::sqrt(static_cast<float>(i));
                   fill_normals(v, o * i, hash_name(n, seed), [sc](float z) { return z * sc; });
                 },
                 false, true});
  };
  auto vecf = [&](const std::string& n, std::vector<int64_t> shape, float base, float sd,
                  bool big = false) {
    T.push_back({n, shape,
                 [n, shape, base, sd, seed](std::vector<float>* v) {
                   int64_t cnt = 1;
                   for (auto d : shape) cnt *= d;
                   fill_normals(v, cnt, hash_name(n, seed),
                                [base, sd](float z) { return base + sd * z; });
                 },
                 false, big});
  };

  // Full attention from `a` (…self_attn.); the family's MLP or MoE from `m` (…mlp.). Shared by
  // the main layers and the MTP layer.
  auto full_attention = [&](const std::string& a) {
    lin(a + "q_proj.weight", S.nh * S.D * 2, S.H);
    lin(a + "k_proj.weight", S.nkv * S.D, S.H);
    lin(a + "v_proj.weight", S.nkv * S.D, S.H);
    lin(a + "o_proj.weight", S.H, S.nh * S.D);
    vecf(a + "q_norm.weight", {S.D}, 0.0f, 0.1f);
    vecf(a + "k_norm.weight", {S.D}, 0.0f, 0.1f);
  };
  auto mlp = [&](const std::string& m) {
    if (!moe) {
      lin(m + "gate_proj.weight", S.I, S.H);
      lin(m + "up_proj.weight", S.I, S.H);
      lin(m + "down_proj.weight", S.H, S.I);
    } else {
      lin(m + "gate.weight", S.E, S.H);
      if (next) {
        for (int64_t e = 0; e < S.E; ++e) {
          const std::string ep = m + "experts." + std::to_string(e) + ".";
          lin(ep + "gate_proj.weight", S.Im, S.H);
          lin(ep + "up_proj.weight", S.Im, S.H);
          lin(ep + "down_proj.weight", S.H, S.Im);
        }
      } else {
        lin(m + "experts.gate_up_proj", S.E * 2 * S.Im, S.H, {S.E, 2 * S.Im, S.H});
        lin(m + "experts.down_proj", S.E * S.H, S.Im, {S.E, S.H, S.Im});
      }
      lin(m + "shared_expert.gate_proj.weight", S.Is, S.H);
      lin(m + "shared_expert.up_proj.weight", S.Is, S.H);
      lin(m + "shared_expert.down_proj.weight", S.H, S.Is);
      lin(m + "shared_expert_gate.weight", 1, S.H);
    }
  };

  vecf(P + "embed_tokens.weight", {S.V, S.H}, 0.0f, 1.0f, true);
  const int64_t KD = S.Hk * S.dk, VD = S.Hv * S.dv, CD = 2 * KD + VD;
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t il = 0; il < S.L; ++il) {
    const bool full = full_layer[static_cast<size_t>(il)];
    layer_types.push_back(full ? "full_attention" : "linear_attention");
    const std::string lp = P + "layers." + std::to_string(il) + ".";
    vecf(lp + "input_layernorm.weight", {S.H}, 0.0f, 0.1f);
    vecf(lp + "post_attention_layernorm.weight", {S.H}, 0.0f, 0.1f);
    if (full) {
      full_attention(lp + "self_attn.");
    } else {
      const std::string a = lp + "linear_attn.";
      if (next) {
        lin(a + "in_proj_qkvz.weight", 2 * KD + 2 * VD, S.H);
        lin(a + "in_proj_ba.weight", 2 * S.Hv, S.H);
      } else {
        lin(a + "in_proj_qkv.weight", CD, S.H);
        lin(a + "in_proj_z.weight", VD, S.H);
        lin(a + "in_proj_b.weight", S.Hv, S.H);
        lin(a + "in_proj_a.weight", S.Hv, S.H);
      }
      vecf(a + "conv1d.weight", {CD, 1, S.K}, 0.0f, 0.5f);
      T.push_back({a + "A_log",
                   {S.Hv},
                   [n = a + "A_log", Hv = S.Hv, seed](std::vector<float>* v) {
                     Rng rr(hash_name(n, seed));
                     v->resize(static_cast<size_t>(Hv));
                     for (auto& x : *v) x = static_cast<float>(std::log(0.5 + 7.5 * rr.uniform()));
                   },
                   true});
      vecf(a + "dt_bias", {S.Hv}, -2.0f, 0.5f);
      vecf(a + "norm.weight", {S.dv}, 1.0f, 0.1f);
      lin(a + "out_proj.weight", S.H, VD);
    }
    mlp(lp + "mlp.");
  }
  vecf(P + "norm.weight", {S.H}, 0.0f, 0.1f);
  if (!S.tied) lin("lm_head.weight", S.V, S.H);
  if (mtp) {  // one MTP layer: fc over [normed embedding ; normed hidden], then a full-attention
              // layer
    lin("mtp.fc.weight", S.H, 2 * S.H);
    vecf("mtp.pre_fc_norm_embedding.weight", {S.H}, 0.0f, 0.1f);
    vecf("mtp.pre_fc_norm_hidden.weight", {S.H}, 0.0f, 0.1f);
    vecf("mtp.norm.weight", {S.H}, 0.0f, 0.1f);
    vecf("mtp.layers.0.input_layernorm.weight", {S.H}, 0.0f, 0.1f);
    vecf("mtp.layers.0.post_attention_layernorm.weight", {S.H}, 0.0f, 0.1f);
    full_attention("mtp.layers.0.self_attn.");
    mlp("mtp.layers.0.mlp.");
  }

  const int32_t eos = tok->token_id("<|im_end|>"), eot = tok->token_id("<|endoftext|>");
  nlohmann::json text = {{"vocab_size", S.V},
                         {"hidden_size", S.H},
                         {"num_hidden_layers", S.L},
                         {"layer_types", layer_types},
                         {"full_attention_interval", 4},
                         {"num_attention_heads", S.nh},
                         {"num_key_value_heads", S.nkv},
                         {"head_dim", S.D},
                         {"linear_num_key_heads", S.Hk},
                         {"linear_num_value_heads", S.Hv},
                         {"linear_key_head_dim", S.dk},
                         {"linear_value_head_dim", S.dv},
                         {"linear_conv_kernel_dim", S.K},
                         {"hidden_act", "silu"},
                         {"rms_norm_eps", 1e-6},
                         {"attention_bias", false},
                         {"attn_output_gate", true},
                         {"max_position_embeddings", 262144},
                         {"tie_word_embeddings", S.tied},
                         {"mamba_ssm_dtype", "float32"},
                         {"eos_token_id", eos},
                         {"mtp_num_hidden_layers", mtp ? 1 : 0},
                         {"torch_dtype", dtype == "f32" ? "float32" : "bfloat16"}};
  if (!moe) text["intermediate_size"] = S.I;
  if (moe) {
    text["num_experts"] = S.E;
    text["num_experts_per_tok"] = S.k;
    text["moe_intermediate_size"] = S.Im;
    text["shared_expert_intermediate_size"] = S.Is;
  }
  nlohmann::json cfg;
  if (next) {
    cfg = text;
    cfg["model_type"] = "qwen3_next";
    cfg["architectures"] = {"Qwen3NextForCausalLM"};
    cfg["rope_theta"] = S.theta;
    cfg["partial_rotary_factor"] = 0.25;
    cfg["rope_scaling"] = nullptr;
    cfg["norm_topk_prob"] = true;
    cfg["decoder_sparse_step"] = 1;
    cfg["mlp_only_layers"] = nlohmann::json::array();
    cfg["intermediate_size"] = 4 * S.H;
  } else {
    text["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
    text["rope_parameters"] = {{"rope_type", "default"},
                               {"rope_theta", S.theta},
                               {"partial_rotary_factor", 0.25},
                               {"mrope_section", {11, 11, 10}},
                               {"mrope_interleaved", true}};
    text["partial_rotary_factor"] = 0.25;
    cfg = {{"architectures",
            {moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
           {"model_type", moe ? "qwen3_5_moe" : "qwen3_5"},
           {"text_config", text},
           {"tie_word_embeddings", S.tied}};
  }
  nlohmann::json tcfg = {{"tokenizer_class", "Qwen2Tokenizer"},
                         {"bos_token", nullptr},
                         {"eos_token", "<|im_end|>"},
                         {"pad_token", "<|endoftext|>"},
                         {"model_max_length", 262144},
                         {"chat_template", rewind_chatml_template()},
                         {"add_prefix_space", false}};
  nlohmann::json gcfg = {{"eos_token_id", {eos, eot}}, {"do_sample", false}};
  fill_model_files(m, std::move(T), dtype, cfg, tok_json, tcfg, gcfg, args->str("--preset", "tiny"),
                   seed);
  return 0;
}

}  // namespace

// The command on parsed options; --format gguf with --from runs it again with --out changed.
static int make_model(const Args& parsed) {
  const Args* args = &parsed;
  const std::string format = args->str("--format", "hf");
  if (format != "hf" && format != "gguf") return fail("--format must be hf or gguf");
  if (format == "hf" && args->has("--type"))
    return fail(
        "--type sets a GGUF file's weight type: add --format gguf (an HF model's "
        "weights take --dtype f32 or bf16)");
  const std::string out = args->str("--out");
  if (format == "gguf" && args->has("--from")) {
    // The noisy copy goes to a scratch directory next to the output, then through `convert`.
    if (out.empty()) return fail("--out FILE.gguf is required");
    const std::string tmp = out + ".hf.tmp";
    Args hf = parsed;
    hf.set("--format", "hf");
    hf.set("--out", tmp);
    if (int rc = make_model(hf)) return rc;
    Status st = convert_hf_to_gguf(tmp, out, args->str("--type", "f32"),
                                   "rewind " + args->str("--preset", "tiny"));
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    if (!st.ok()) return fail(st.error_message());
    std::printf("wrote %s (gguf, %s)\n", out.c_str(), args->str("--type", "f32").c_str());
    return 0;
  }
  if (args->has("--from")) {
    if (args->has("--preset") || args->has("--mtp") || args->has("--layers") ||
        args->has("--layer-types") || args->has("--linear-heads") || args->has("--dtype"))
      return fail("--from copies a model: only --noise, --seed and --out apply");
    auto sigma = args->num("--noise", 0.0);
    if (!sigma.ok()) return fail(sigma.error_message());
    if (!args->has("--noise") || !(sigma.value() >= 0))
      return fail("--from needs --noise SIGMA >= 0");
    auto sd = args->int_("--seed", 0);
    if (!sd.ok()) return fail(sd.error_message());
    if (out.empty()) return fail("--out DIR is required");
    return noise_copy(args->str("--from"), out, sigma.value(), static_cast<uint64_t>(sd.value()));
  }
  if (args->has("--noise")) return fail("--noise needs --from DIR");
  ModelFiles m;
  const std::string preset_name = args->str("--preset", "tiny");
  const auto m2 = mamba2_preset(preset_name);
  if (int rc = m2 ? make_mamba2_model(*args, *m2, preset_name, &m) : qwen_model(*args, &m))
    return rc;
  if (format == "gguf") {
    // Straight to GGUF: each weight is made, quantised and written in turn (MemoryCheckpoint).
    if (out.empty()) return fail("--out FILE.gguf is required");
    const std::string type = args->str("--type", "f32");
    const double t0 = now_seconds();
    Status st = write_gguf_direct(&m, out, type, "rewind " + preset_name);
    if (!st.ok()) return fail(st.error_message());
    std::printf("wrote %s (gguf, %s; %s; %.1f s)\n", out.c_str(), type.c_str(), m.label.c_str(),
                now_seconds() - t0);
    return 0;
  }
  if (out.empty()) return fail("--out DIR is required");
  if (std::error_code ec;
      std::filesystem::exists(out, ec) && !std::filesystem::is_directory(out, ec))
    return fail("--out " + out +
                " is a file: an HF model is a directory (--format gguf --type TYPE writes one "
                "GGUF file)");
  Status st = write_hf_files(&m, out);
  if (!st.ok()) return fail(st.error_message());
  std::printf("wrote %s (%s)\n", out.c_str(), m.label.c_str());
  return 0;
}

int cmd_make_model(int argc, char** argv) {
  auto args = parse_args("make-model", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("make-model");
  if (args->has("--quiet")) ProgressLine::silence();
  return make_model(args.value());
}

}  // namespace rw::app
