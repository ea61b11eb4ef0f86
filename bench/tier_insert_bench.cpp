// The engine-thread cost of the disk tier's write-behind on a cold prefill: PrefixCache::insert
// of an n-token history (its KV pages, snapshots on the 512 grid and at the prompt end) with and
// without a DiskTier, against the time of the cold prefill of n tokens itself (measured here,
// once, through Engine). The writer thread's time (flush) is printed beside, as it runs off the
// engine thread. Usage: tier_insert_bench MODEL_DIR [tokens 10000] [reps 5] [threads 2]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <vector>

#include "rewind/base/thread_pool.h"
#include "rewind/cache/disk_tier.h"
#include "rewind/cache/prefix_cache.h"
#include "rewind/engine/engine.h"

using namespace rw;

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tier_insert_bench MODEL_DIR [tokens] [reps] [threads]\n");
    return 2;
  }
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 10000;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  ThreadPool pool(threads);
  LoadOptions lo;
  lo.pool = &pool;
  auto model = Model::load(argv[1], lo);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.error_message().c_str());
    return 1;
  }
  Model& m = *model.value();
  const StateShape sh = m.state_shape();
  std::mt19937_64 rng(5);
  auto tokens = [&] {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t)
      x = static_cast<int32_t>(rng() % static_cast<uint64_t>(m.config().vocab_size));
    return t;
  };
  EngineOptions eo;
  eo.ctx_size = n + 8;
  Engine e(m, &pool, eo);
  Request r;
  r.prompt = tokens();
  r.max_tokens = 1;
  const double t0 = now_s();
  if (!e.generate(r).ok()) return 1;
  const double prefill = now_s() - t0;

  std::vector<PagePtr> pages;
  for (int64_t i = 0; i < (n + sh.page_tokens - 1) / sh.page_tokens; ++i)
    pages.push_back(std::make_shared<KvPage>(sh));
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  for (int64_t q = 512; q < n; q += 512)
    snaps.push_back(std::make_shared<const Snapshot>(q, AlignedBuffer<float>(sh.rec_floats())));
  snaps.push_back(std::make_shared<const Snapshot>(n - 1, AlignedBuffer<float>(sh.rec_floats())));

  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/rewind_tier_insert_bench_" + std::to_string(::getpid());
  std::vector<double> plain, tiered, writer;
  for (int i = 0; i < reps; ++i) {
    const std::vector<int32_t> t = tokens();
    PrefixCache::Options o;
    o.shape = sh;
    o.page_tokens = sh.page_tokens;
    {
      PrefixCache c(o);
      const double a = now_s();
      c.insert(t, pages, snaps);
      plain.push_back(now_s() - a);
    }
    std::filesystem::remove_all(dir);
    DiskTier::Options d;
    d.dir = dir;
    d.fingerprint = Hash128{1, 2};
    auto tier = DiskTier::open(d);
    if (!tier.ok()) return 1;
    std::shared_ptr<DiskTier> tp = std::move(tier).value();
    o.tier = tp;
    PrefixCache c(o);
    const double a = now_s();
    c.insert(t, pages, snaps);
    const double b = now_s();
    tp->flush();
    tiered.push_back(b - a);
    writer.push_back(now_s() - b);
  }
  std::filesystem::remove_all(dir);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double p = med(plain), w = med(tiered);
  std::printf(
      "%lld tokens: cold prefill %.2f s; insert without tier %.2f ms, with tier %.2f ms "
      "(engine thread, median of %d); write-behind adds %.3f%% to the prefill; the writer "
      "thread then took %.0f ms\n",
      static_cast<long long>(n), prefill, p * 1e3, w * 1e3, reps, (w - p) / prefill * 100.0,
      med(writer) * 1e3);
  return 0;
}
