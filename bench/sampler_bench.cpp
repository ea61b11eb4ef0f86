// sampler_bench: time per token of rw::Sampler::sample on one row of a Qwen3.5-sized vocabulary
// (248320 logits drawn from N(0, 2.5)), for greedy and the common temperature / top-k / top-p
// settings; best of 20 calls each, one thread (the engine samples on its own thread while the
// pool's workers wait). A decode step of the 0.8B model is 10-30 ms on a 2-core host, so a
// sampler in the milliseconds shows in every token's latency.
//
// Usage: sampler_bench [--vocab N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "rewind/sample/sampler.h"

int main(int argc, char** argv) {
  int n = 248320;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) {
      n = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: sampler_bench [--vocab N]\n");
      return 2;
    }
  }
  if (n <= 0) {
    std::fprintf(stderr, "sampler_bench: --vocab must be positive\n");
    return 2;
  }
  std::vector<float> logits(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 2.5f);
  for (float& x : logits) x = dist(rng);
  struct Setting {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  const Setting settings[] = {
      {"greedy", 0.0f, 0, 1.0f, 0.0f},
      {"temperature 1", 1.0f, 0, 1.0f, 0.0f},
      {"temperature 0.7, top_p 0.9", 0.7f, 0, 0.9f, 0.0f},
      {"temperature 0.7, top_k 20, top_p 0.8", 0.7f, 20, 0.8f, 0.0f},
      {"temperature 1, min_p 0.05", 1.0f, 0, 1.0f, 0.05f},
  };
  std::printf("vocabulary %d, best of 20 calls\n", n);
  for (const Setting& st : settings) {
    rw::SamplingParams p;
    p.temperature = st.temperature;
    p.top_k = st.top_k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    p.seed = 1;
    rw::Sampler sampler(p);
    double best = 1e30;
    int32_t sink = 0;
    for (int r = 0; r < 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      sink ^= sampler.sample(logits.data(), n);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-40s %9.1f us   (token xor %d)\n", st.name, best * 1e6, sink);
  }
  return 0;
}
