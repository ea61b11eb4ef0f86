// kv_quality: what each KV cache type costs in quality. A model runs one text with K/V stored as
// F32 (the reference) and as each other type; at every position it compares the next-token
// distribution with the reference's: top-1 agreement, mean and max KL(p_f32 || p_type) in nats,
// and the text's perplexity under each type. Teacher-forced: every type reads the same tokens.
//
// The text: --text FILE (tokenized with the model's tokenizer), else --n tokens sampled from the
// F32 model itself at temperature 1 (seed --seed) after --prompt, which is in-distribution text
// for a model with no corpus at hand.
//
// Usage: kv_quality [--model DIR] [--n 2048] [--text FILE] [--prompt TEXT] [--seed S]
//                   [--chunk 512] [--threads N] [--types bf16,f16,q8_0,f16/q8_0] [--skip N]
//   A type is NAME (K and V alike) or K/V ("f16/q8_0"); F32 is the reference, always first.
//   --skip N leaves the first N positions out of the figures. One model is loaded; each type
//   runs in states of its own (StateShape::kv_types), so a large model is held once.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rewind/base/thread_pool.h"
#include "rewind/model/model.h"
#include "rewind/tokenizer/tokenizer.h"

namespace {

using namespace rw;

std::string arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return argv[i + 1];
  return def;
}

int die(const std::string& msg) {
  std::fprintf(stderr, "kv_quality: %s\n", msg.c_str());
  return 1;
}

// log-softmax of one row, in double.
std::vector<double> log_softmax(const float* x, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  const double ls = mx + std::log(s);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] - ls;
  return out;
}

// All positions' logits of `tokens`, prefilled in chunks, with K/V stored as `kv` (the forward
// pass reads and writes each state in its own shape's types).
std::vector<float> all_logits(Model& m, KvTypes kv, const std::vector<int32_t>& tokens,
                              int64_t chunk, ThreadPool* pool) {
  StateShape sh = m.state_shape();
  sh.kv_types = kv;
  SequenceState st(sh);
  std::vector<float> all, part;
  for (size_t b = 0; b < tokens.size(); b += static_cast<size_t>(chunk)) {
    const size_t n = std::min(tokens.size() - b, static_cast<size_t>(chunk));
    SeqInput in{&st, std::span<const int32_t>(tokens.data() + b, n), {}};
    for (size_t i = 0; i < n; ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
    if (!m.forward(std::span<SeqInput>(&in, 1), &part, pool).ok()) std::abort();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = arg(argc, argv, "--model", "models/kjv-target");
  const int64_t n = std::atoll(arg(argc, argv, "--n", "2048").c_str());
  const int64_t chunk = std::atoll(arg(argc, argv, "--chunk", "512").c_str());
  const int64_t skip = std::atoll(arg(argc, argv, "--skip", "0").c_str());
  const uint64_t seed = std::strtoull(arg(argc, argv, "--seed", "1").c_str(), nullptr, 10);
  const int threads = std::atoi(arg(argc, argv, "--threads", "2").c_str());
  const std::string text_file = arg(argc, argv, "--text", "");
  const std::string prompt = arg(argc, argv, "--prompt", "In the beginning");
  ThreadPool pool(std::max(1, threads));

  // The types: the reference first.
  std::vector<KvTypes> types;
  {
    std::stringstream ss(arg(argc, argv, "--types", "bf16,f16,q8_0,f16/q8_0"));
    for (std::string t; std::getline(ss, t, ',');) {
      const size_t slash = t.find('/');
      KvTypes kv;
      if (!parse_kv_type(t.substr(0, slash), &kv.k) ||
          !parse_kv_type(slash == std::string::npos ? t : t.substr(slash + 1), &kv.v))
        return die("unknown KV type '" + t + "'");
      types.push_back(kv);
    }
  }
  types.insert(types.begin(), KvTypes{DType::F32, DType::F32});

  LoadOptions lo;
  lo.pool = &pool;
  lo.kv_types = types[0];
  auto loaded = Model::load(dir, lo);
  if (!loaded.ok()) return die(loaded.error_message());
  Model& ref = *loaded.value();
  const int64_t V = ref.config().vocab_size;

  std::vector<int32_t> tokens;
  std::string source;
  if (!text_file.empty()) {
    auto tok = Tokenizer::load(dir + "/tokenizer.json");
    if (!tok.ok()) return die(tok.error_message());
    std::ifstream f(text_file, std::ios::binary);
    if (!f) return die("cannot read " + text_file);
    std::stringstream ss;
    ss << f.rdbuf();
    tokens = tok->encode(ss.str(), false);
    if (static_cast<int64_t>(tokens.size()) > n) tokens.resize(static_cast<size_t>(n));
    source = text_file;
  } else {
    // Sampled from the F32 model: its own distribution at temperature 1.
    auto tok = Tokenizer::load(dir + "/tokenizer.json");
    tokens = tok.ok() ? tok->encode(prompt, false) : std::vector<int32_t>{1};
    std::mt19937_64 rng(seed);
    SequenceState st = ref.new_state();
    std::vector<float> lg;
    std::vector<int32_t> step(tokens);
    while (static_cast<int64_t>(tokens.size()) < n) {
      SeqInput in{&st, step, {static_cast<int32_t>(step.size() - 1)}};
      if (!ref.forward(std::span<SeqInput>(&in, 1), &lg, &pool).ok()) std::abort();
      const auto lp = log_softmax(lg.data(), V);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      double r = u(rng), c = 0;
      int32_t next = static_cast<int32_t>(V - 1);
      for (int64_t i = 0; i < V; ++i)
        if ((c += std::exp(lp[i])) >= r) {
          next = static_cast<int32_t>(i);
          break;
        }
      tokens.push_back(next);
      step.assign(1, next);
    }
    source = "sampled from the F32 model (T=1, seed " + std::to_string(seed) + ", prompt \"" +
             prompt + "\")";
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::printf("model %s, %lld tokens %s, positions %lld..%lld scored\n", dir.c_str(),
              static_cast<long long>(T), source.c_str(), static_cast<long long>(skip),
              static_cast<long long>(T - 2));
  std::printf("%-10s %10s %12s %12s %12s %10s %12s\n", "K/V", "bytes/tok", "top-1 agree", "mean KL",
              "p99 KL", "max KL", "perplexity");

  const auto base = all_logits(ref, types[0], tokens, chunk, &pool);
  for (size_t ti = 0; ti < types.size(); ++ti) {
    const auto got = ti == 0 ? base : all_logits(ref, types[ti], tokens, chunk, &pool);
    int64_t agree = 0, count = 0;
    double kl_sum = 0, kl_max = 0, nll = 0;
    std::vector<double> kls;
    for (int64_t t = skip; t + 1 < T; ++t) {
      const float* a = base.data() + t * V;
      const float* b = got.data() + t * V;
      agree += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
      const auto la = log_softmax(a, V), lb = log_softmax(b, V);
      double kl = 0;
      for (int64_t i = 0; i < V; ++i) kl += std::exp(la[i]) * (la[i] - lb[i]);
      kl = std::max(kl, 0.0);
      kls.push_back(kl);
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      nll -= lb[tokens[t + 1]];
      ++count;
    }
    std::sort(kls.begin(), kls.end());
    StateShape sh = ref.state_shape();
    sh.kv_types = types[ti];
    char name[32];
    std::snprintf(name, sizeof name, "%s/%s", kv_type_name(types[ti].k), kv_type_name(types[ti].v));
    std::printf("%-10s %10.0f %11.2f%% %12.3e %12.3e %10.3e %12.4f\n", name,
                sh.kv_bytes_per_token(), 100.0 * agree / count, kl_sum / count,
                kls[kls.size() * 99 / 100], kl_max, std::exp(nll / count));
  }
  return 0;
}
