// `rewind bench`: prefill (one P-token prompt) and decode (N tokens, one per forward)
// throughput, each next to this machine's limits measured in the same run: read bandwidth for
// decode (bytes of packed weights one token reads / bandwidth) and, for prefill (matmul
// operations per token / peak), the fp32 FMA peak, or the int8 dot-product peak when most
// weights are quantised and the int8 dot multiplies them. Ratios, not absolute times, compare.
// Prefill runs once (its buffers grow to the prompt's size then, which a serving process pays
// once; reported apart) and then --prefill-runs times on fresh states: the headline is the
// median of those, beside the fastest. Decode is timed step by step, each step followed by a
// bandwidth probe: the headline fraction is the median over the steps of each step's bytes / s
// over the probe right after it; the mean rate and the fastest step are also judged against
// the bandwidth measured before and after the run.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <optional>
#include <vector>

#include "args.h"
#include "commands.h"
#include "rewind/engine/step_budget.h"
#include "rewind/hub/hub.h"
#include "rewind/kernels/machine_limits.h"
#include "rewind/kernels/matmul.h"
#include "rewind/sample/sampler.h"

namespace rw::app {

namespace {

// `rewind bench --batch N,...`: for each N a set of N sequences, each prefilled with its own
// seeded prompt of `p` tokens, then `n` rounds in which every set takes one decode step (N rows,
// greedy) in turn, so the sizes are measured side by side under the same machine load. Each
// step's forward and its argmax over the rows are timed apart.
// mixed > 0: one more set of the largest size whose every step also carries a chunk of a
// mixed-token prompt (what its rows leave of step_tokens), prompts one after another; with a
// target, another such set whose chunks StepBudget sizes (engine/step_budget.h) from its own
// steps and the plain set's of the same size.
int bench_batch(Model& m, ThreadPool* pool, const std::vector<int64_t>& sizes, int64_t p, int64_t n,
                int64_t seed, int64_t mixed, int64_t step_tokens, StepTarget target, bool json) {
  const int64_t V = m.config().vocab_size;
  struct Set {
    int64_t rows;
    std::vector<SequenceState> st;
    std::vector<int32_t> next;
    std::vector<double> fwd_s, step_s;
    int64_t alone = 0;  // steps the pool ran on the calling thread alone
  };
  // A mixed set's prefilling sequence and its account.
  struct Mixed {
    size_t set = 0;
    SequenceState pre;
    std::optional<StepBudget> budget;  // none: the fixed chunk
    int64_t prompts_done = 0;
    std::vector<double> chunk_tokens;  // one per step of the set
  };
  std::vector<Set> sets;
  std::vector<Mixed> mixes;
  std::vector<float> logits;
  uint64_t s = static_cast<uint64_t>(seed) * 0x9e3779b97f4a7c15ull + 1;
  auto random_token = [&] {  // xorshift64
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return static_cast<int32_t>(s % static_cast<uint64_t>(V));
  };
  std::vector<int64_t> set_rows = sizes;
  const int64_t mixed_rows = *std::max_element(sizes.begin(), sizes.end());
  size_t plain_index = 0;  // the plain set of the mixed sets' size
  for (size_t k = 0; k < sizes.size(); ++k)
    if (sizes[k] == mixed_rows) plain_index = k;
  if (mixed > 0)
    for (int k = 0; k < (target.on() ? 2 : 1); ++k) {
      mixes.push_back(Mixed{set_rows.size(), m.new_state(), std::nullopt, 0, {}});
      if (k == 1) mixes.back().budget.emplace(target);
      set_rows.push_back(mixed_rows);
    }
  // The long prompt of the mixed sets.
  std::vector<int32_t> long_prompt(static_cast<size_t>(std::max<int64_t>(mixed, 0)));
  for (auto& t : long_prompt) t = random_token();
  for (int64_t rows : set_rows) {
    Set set{rows, {}, {}, {}, {}};
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int32_t> prompt(static_cast<size_t>(p));
      for (auto& t : prompt) t = random_token();
      set.st.push_back(m.new_state());
      SeqInput in{&set.st.back(), prompt, {static_cast<int32_t>(p - 1)}};
      Status st = m.forward(std::span<SeqInput>(&in, 1), &logits, pool);
      if (!st.ok()) return fail(st.error_message());
      set.next.push_back(argmax(logits.data(), static_cast<int32_t>(V)));
    }
    sets.push_back(std::move(set));
  }
  std::vector<SeqInput> in;
  auto decode_rows = [&](Set& set) {  // `in` = one decode row per sequence of the set
    in.clear();
    for (int64_t r = 0; r < set.rows; ++r)
      in.push_back(SeqInput{&set.st[static_cast<size_t>(r)],
                            std::span<const int32_t>(&set.next[static_cast<size_t>(r)], 1),
                            {0}});
  };
  for (int64_t i = 0; i < n; ++i)
    for (size_t k = 0; k < sets.size(); ++k) {
      Set& set = sets[k];
      decode_rows(set);
      Mixed* mix = nullptr;
      for (Mixed& x : mixes)
        if (x.set == k) mix = &x;
      int64_t chunk = 0;
      if (mix && step_tokens > set.rows) {
        if (mix->pre.n_pos() >= mixed) {  // the prompt is done: the next one
          mix->pre = m.new_state();
          ++mix->prompts_done;
        }
        int64_t room = step_tokens - set.rows;
        if (mix->budget)
          if (const auto b = mix->budget->prefill_tokens(set.rows)) room = std::min(room, *b);
        const int64_t b = mix->pre.n_pos(), e = std::min(mixed, b + room);
        std::vector<int32_t> rows;
        if (e == mixed) rows.push_back(static_cast<int32_t>(e - b - 1));
        in.push_back(SeqInput{
            &mix->pre, std::span<const int32_t>(long_prompt.data() + b, static_cast<size_t>(e - b)),
            rows});
        chunk = e - b;
        mix->chunk_tokens.push_back(static_cast<double>(chunk));
      }
      const int64_t alone_before = pool ? pool->steps_alone() : 0;
      const double a = now_seconds();
      Status st = m.forward(in, &logits, pool);
      if (!st.ok()) return fail(st.error_message());
      const double b = now_seconds();
      if (pool && pool->steps_alone() > alone_before) ++set.alone;
      for (int64_t r = 0; r < set.rows; ++r)
        set.next[static_cast<size_t>(r)] = argmax(logits.data() + r * V, static_cast<int32_t>(V));
      set.step_s.push_back(now_seconds() - a);
      set.fwd_s.push_back(b - a);
      for (Mixed& x : mixes)  // the adaptive set learns from its own steps and the plain ones
        if (x.budget && (k == x.set || (k == plain_index && !mix)))
          x.budget->observe(set.rows, chunk, 1e3 * set.step_s.back());
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto p99 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, v.size() * 99 / 100)];
  };
  // The largest batch beside the whole long prompt in one step (no budget), timed once.
  double whole_s = 0;
  if (mixed > 0) {
    decode_rows(sets[mixes[0].set]);
    SequenceState pre = m.new_state();
    in.push_back(SeqInput{&pre, long_prompt, {static_cast<int32_t>(mixed - 1)}});
    const double a = now_seconds();
    Status st = m.forward(in, &logits, pool);
    if (!st.ok()) return fail(st.error_message());
    whole_s = now_seconds() - a;
  }
  const double base_tps = static_cast<double>(sets[0].rows) / median(sets[0].step_s);
  if (json) std::printf("{\"batch\":[");
  const size_t n_plain = sizes.size();
  for (size_t k = 0; k < n_plain; ++k) {
    const Set& set = sets[k];
    const double step = median(set.step_s), fwd = median(set.fwd_s);
    const double tps = static_cast<double>(set.rows) / step;
    if (json)
      std::printf(
          "%s{\"rows\":%lld,\"step_ms\":%.6f,\"forward_ms\":%.6f,\"tok_s\":%.3f,"
          "\"ratio\":%.4f,\"steps_alone\":%lld}",
          k ? "," : "", static_cast<long long>(set.rows), 1e3 * step, 1e3 * fwd, tps,
          tps / base_tps, static_cast<long long>(set.alone));
    else
      std::printf(
          "batch %3lld rows: median step %8.3f ms (forward %8.3f, argmax %6.3f)  %8.2f tok/s  "
          "= %5.2fx %lld row%s%s\n",
          static_cast<long long>(set.rows), 1e3 * step, 1e3 * fwd, 1e3 * (step - fwd), tps,
          tps / base_tps, static_cast<long long>(sets[0].rows), sets[0].rows == 1 ? "" : "s",
          set.alone > 0 ? ("  (" + std::to_string(set.alone) + " of " +
                           std::to_string(set.step_s.size()) + " steps on one thread)")
                              .c_str()
                        : "");
  }
  if (json)
    std::printf("],\"prompt_tokens\":%lld,\"decode_tokens\":%lld", static_cast<long long>(p),
                static_cast<long long>(n));
  const Set& alone = sets[plain_index];
  for (size_t j = 0; j < mixes.size(); ++j) {
    const Mixed& mix = mixes[j];
    const Set& set = sets[mix.set];
    // The prompt's progress: its tokens over the time of the steps that ran them.
    const double prefill_tps =
        std::accumulate(mix.chunk_tokens.begin(), mix.chunk_tokens.end(), 0.0) /
        std::accumulate(set.step_s.begin(), set.step_s.end(), 0.0);
    const auto chunks = static_cast<long long>(mix.chunk_tokens.size());
    const std::string how =
        mix.budget ? "--itl-target " + step_target_string(mix.budget->target()) : "fixed";
    if (json)
      std::printf(
          ",\"%s\":{\"rows\":%lld,\"prefill_tokens\":%lld,\"step_tokens\":%lld,"
          "\"target\":\"%s\",\"chunks\":%lld,\"chunk_p50\":%.0f,\"prompts_done\":%lld,"
          "\"prefill_tok_s\":%.3f,\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f,"
          "\"alone_p50_ms\":%.3f,\"alone_p99_ms\":%.3f,\"whole_prompt_step_ms\":%.3f}",
          j == 0 ? "mixed" : "mixed_target", static_cast<long long>(set.rows),
          static_cast<long long>(mixed), static_cast<long long>(step_tokens),
          mix.budget ? step_target_string(mix.budget->target()).c_str() : "off", chunks,
          median(mix.chunk_tokens), static_cast<long long>(mix.prompts_done), prefill_tps,
          1e3 * median(set.step_s), 1e3 * p99(set.step_s), 1e3 * median(alone.step_s),
          1e3 * p99(alone.step_s), 1e3 * whole_s);
    else
      std::printf(
          "mixed, %s: %lld decode rows beside a %lld-token prefill in chunks of median %.0f "
          "(budget %lld, %lld chunks, %lld prompts done, %.1f prompt tok/s): inter-token "
          "latency p50 %.3f ms, p99 %.3f ms (decoding alone p50 %.3f, p99 %.3f); the whole "
          "prompt in one step: %.3f ms\n",
          how.c_str(), static_cast<long long>(set.rows), static_cast<long long>(mixed),
          median(mix.chunk_tokens), static_cast<long long>(step_tokens), chunks,
          static_cast<long long>(mix.prompts_done), prefill_tps, 1e3 * median(set.step_s),
          1e3 * p99(set.step_s), 1e3 * median(alone.step_s), 1e3 * p99(alone.step_s),
          1e3 * whole_s);
  }
  if (json) std::printf("}\n");
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  auto args = parse_args("bench", argc, argv);
  if (!args.ok()) return fail(args.error_message());
  if (args->has("--help")) return print_help("bench");
  auto model_arg = model_or_builtin(args->str("--model"), args->has("--quiet"));
  if (!model_arg.ok()) return fail(model_arg.error_message());
  const std::string dir = model_arg.value();
  auto p = args->int_("--n-prompt", 512);
  auto n = args->int_("--n-gen", 128);
  auto th = args->int_("--threads", default_threads());
  auto seed = args->int_("--seed", 1);
  auto runs = args->int_("--prefill-runs", 3);
  for (auto* r : {&p, &n, &th, &seed, &runs})
    if (!r->ok()) return fail(r->error_message());
  if (p.value() < 1 || n.value() < 1 || th.value() < 1 || runs.value() < 1)
    return fail("-p, -n, -t and --prefill-runs must be >= 1");

  ThreadPool pool(static_cast<int>(th.value()));
  double load_s = 0;
  auto kernels = kernel_options_from(*args);
  if (!kernels.ok()) return fail(kernels.error_message());
  auto kv = kv_types_from(*args);
  if (!kv.ok()) return fail(kv.error_message());
  // --decode-split: one split, or two taking turns step by step.
  std::vector<DecodeSplit> splits;
  {
    const std::string v = args->str("--decode-split", "auto");
    size_t b = 0;
    while (b <= v.size()) {
      const size_t e = std::min(v.find(',', b), v.size());
      DecodeSplit split;
      if (!parse_decode_split(v.substr(b, e - b), &split))
        return fail("--decode-split " + v + ": expected auto, guided or static, or two of them " +
                    "as A,B");
      splits.push_back(split);
      b = e + 1;
    }
    if (splits.size() > 2) return fail("--decode-split " + v + ": at most two splits (A,B)");
  }
  const bool split_ab = splits.size() == 2;
  if (split_ab && n.value() < 2) return fail("--decode-split A,B needs -n 2 or more");
  KernelOptions ko = kernels.value();
  ko.decode_split = splits[0];
  const std::string isa = args->str("--isa", "auto");
  if (!parse_isa_cap(isa, &ko.isa) || !isa_cap_supported(ko.isa) ||
      (isa == "amx" && !matmul_amx_enabled(IsaCap::Amx)))
    return fail("--isa " + isa + ": not available on this machine (or not one of auto, amx, " +
                "avx512, avxvnni, avx2, scalar)");
  auto model =
      load_model(dir, args->str("--weights", "auto"), ko, &pool, &load_s, false, kv.value());
  if (!model.ok()) return fail(model.error_message());
  Model& m = *model.value();
  const int64_t V = m.config().vocab_size;
  if (args->has("--batch")) {
    auto sizes = args->int_list("--batch");
    if (!sizes.ok()) return fail(sizes.error_message());
    if (sizes->empty()) return fail("--batch: expected sizes, e.g. 1,8");
    for (int64_t b : sizes.value())
      if (b < 1 || b > 256) return fail("--batch: each size must be 1 to 256");
    if (!args->has("--json"))
      std::printf("model %s: %s of packed weights, %lld thread%s, %s\n", dir.c_str(),
                  hub::format_bytes(static_cast<uint64_t>(m.packed_bytes())).c_str(),
                  static_cast<long long>(th.value()), th.value() == 1 ? "" : "s", m.isa());
    auto mixed = args->int_("--mixed-prefill", 0);
    auto budget = args->int_("--step-tokens", 512);
    if (!mixed.ok()) return fail(mixed.error_message());
    if (!budget.ok()) return fail(budget.error_message());
    const int64_t max_rows = *std::max_element(sizes->begin(), sizes->end());
    if (mixed.value() < 0 || budget.value() <= max_rows)
      return fail("--mixed-prefill must be >= 0 and --step-tokens more than the largest batch");
    auto target = parse_step_target(args->str("--itl-target", "off"));
    if (!target.ok()) return fail("--itl-target: " + target.error_message());
    if (target->on() && mixed.value() == 0) return fail("--itl-target needs --mixed-prefill");
    return bench_batch(m, &pool, sizes.value(), p.value(), n.value(), seed.value(), mixed.value(),
                       budget.value(), target.value(), args->has("--json"));
  }

  std::fprintf(stderr, "measuring machine limits...\n");
  // The int8 peak of the path the int8 dot takes: with `--isa avx2` on a VNNI machine, AVX2's.
  MachineLimits lim = measure_machine_limits(&pool, 1.0, ko.isa);

  // Seeded random prompt.
  std::vector<int32_t> prompt(static_cast<size_t>(p.value()));
  uint64_t s = static_cast<uint64_t>(seed.value()) * 0x9e3779b97f4a7c15ull + 1;
  for (auto& t : prompt) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    t = static_cast<int32_t>(s % static_cast<uint64_t>(V));
  }
  std::vector<float> logits;
  // Warm-up: one small forward so first-touch costs do not count.
  {
    SequenceState w = m.new_state();
    SeqInput in{&w, std::span<const int32_t>(prompt.data(), 1), {0}};
    (void)m.forward(std::span<SeqInput>(&in, 1), &logits, &pool);
  }
  // The first prefill, then the timed ones, each on a fresh state; decode continues the last.
  SequenceState st = m.new_state();
  // The compute peaks: measured before the runs, after every timed prefill and again at the end;
  // the highest of them is the peak. Other work on a shared host only ever lowers a peak
  // measurement, and a low one would inflate the prefill's fraction of it (one Q4_K run whose
  // two measurements, before and after, both fell to 618 of about 900 GOP/s reported 68.6%).
  auto sample_peaks = [&](double fma_s, double int8_s, double amx_s) {
    std::string isa;
    lim.fma_peak_gflop_s =
        std::max(lim.fma_peak_gflop_s, measure_fma_peak_gflop_s(&pool, fma_s, &isa));
    lim.int8_peak_gop_s =
        std::max(lim.int8_peak_gop_s, measure_int8_dot_peak_gop_s(&pool, int8_s, nullptr, ko.isa));
    lim.amx_int8_peak_gop_s =
        std::max(lim.amx_int8_peak_gop_s, measure_amx_int8_peak_gop_s(&pool, amx_s));
  };
  std::vector<double> prefill_s;
  for (int64_t i = 0; i <= runs.value(); ++i) {
    if (i > 0) st = m.new_state();
    SeqInput in{&st, prompt, {static_cast<int32_t>(prompt.size() - 1)}};
    const double a = now_seconds();
    Status r = m.forward(std::span<SeqInput>(&in, 1), &logits, &pool);
    if (!r.ok()) return fail(r.error_message());
    prefill_s.push_back(now_seconds() - a);
    if (i > 0) sample_peaks(0.05, 0.03, 0.02);
  }
  const double first_prefill_s = prefill_s.front();
  prefill_s.erase(prefill_s.begin());
  std::sort(prefill_s.begin(), prefill_s.end());
  const double median_prefill_s = prefill_s[prefill_s.size() / 2];
  // Decode: each step timed alone, then a bandwidth probe right after it (the better of two
  // passes of the stream variant that measured the best bandwidth, over a buffer of 2 x L3, at
  // least 256 MiB; not in the step's time). On a shared host whose bandwidth drifts over
  // seconds (about 20 to 60 GB/s within minutes on one), a step is judged against the
  // bandwidth the host had then, not against passes seconds before or after it.
  BandwidthProbe probe(&pool, lim.probe_buffer_bytes);
  std::vector<double> step_s(static_cast<size_t>(n.value())),
      probe_gb_s(static_cast<size_t>(n.value()));
  for (int64_t i = 0; i < n.value(); ++i) {
    const int32_t next = argmax(logits.data(), static_cast<int32_t>(V));
    SeqInput in{&st, std::span<const int32_t>(&next, 1), {0}};
    if (split_ab) {  // the split of this step (same bits either way)
      ko.decode_split = splits[static_cast<size_t>(i) % splits.size()];
      m.set_kernel_options(ko);
    }
    const double a = now_seconds();
    Status r = m.forward(std::span<SeqInput>(&in, 1), &logits, &pool);
    if (!r.ok()) return fail(r.error_message());
    step_s[static_cast<size_t>(i)] = now_seconds() - a;
    probe_gb_s[static_cast<size_t>(i)] =
        std::max(probe.pass(lim.bandwidth_variant), probe.pass(lim.bandwidth_variant));
  }
  // The bandwidth measured again after the decode: the mean of the passes before and after is
  // the run's bound, the second figure beside the paired one.
  const double bw_after = measure_read_bandwidth_gb_s(&pool, lim.bandwidth_buffer_bytes, 0.6);
  const double bw = 0.5 * (lim.read_bandwidth_gb_s + bw_after);
  sample_peaks(0.25, 0.1, 0.05);  // and once more at the end (see sample_peaks)

  const double prefill_tps = static_cast<double>(p.value()) / median_prefill_s;
  const double prefill_best_tps = static_cast<double>(p.value()) / prefill_s.front();
  const double prefill_first_tps = static_cast<double>(p.value()) / first_prefill_s;
  double decode_s = 0;
  for (double t : step_s) decode_s += t;
  const double decode_tps = static_cast<double>(n.value()) / decode_s;
  const double prefill_flops = 2.0 * (static_cast<double>(p.value()) *
                                          static_cast<double>(m.matmul_macs_per_token_layers()) +
                                      static_cast<double>(m.matmul_macs_lm_head()));
  const double prefill_gflop_s = prefill_flops / median_prefill_s / 1e9;
  // Bytes one decode step reads: the packed weights, the recurrent state (conv windows and
  // delta-rule matrices, read once; the write-back is not counted) and the attention K/V of
  // every position so far (p + i + 1 at step i: p + (n + 1) / 2 on average).
  const ModelConfig& cfg = m.config();
  const double weight_bytes = static_cast<double>(m.decode_bytes_per_token());
  const double state_bytes = static_cast<double>(st.recurrent_bytes());
  // K/V bytes a position takes in the model's KV types (the main model's attention layers).
  StateShape kv_shape = m.state_shape();
  kv_shape.n_attn_layers = cfg.n_attention_layers();
  const double kv_bytes_pos = kv_shape.kv_bytes_per_token();
  const double kv_bytes = kv_bytes_pos * (static_cast<double>(p.value()) + (n.value() + 1) / 2.0);
  const double bytes_tok = weight_bytes + state_bytes + kv_bytes;
  const double decode_gb_s = decode_tps * bytes_tok / 1e9;
  // The headline: each step's bytes / time against the probe right after it, the median over
  // the steps (step i reads the K/V of p + i + 1 positions).
  std::vector<double> step_frac(step_s.size());
  for (size_t i = 0; i < step_s.size(); ++i) {
    const double bytes_i =
        weight_bytes + state_bytes +
        kv_bytes_pos * (static_cast<double>(p.value()) + static_cast<double>(i) + 1);
    step_frac[i] = bytes_i / step_s[i] / 1e9 / probe_gb_s[i];
  }
  // --decode-split A,B: each split's median step fraction, and the median over the pairs of
  // steps (2j, 2j + 1) of B's time over A's.
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double ab_frac[2] = {0, 0}, ab_ratio = 0, ab_total_ratio = 0;
  if (split_ab) {
    std::vector<double> fr[2], ratio;
    double sum[2] = {0, 0};
    for (size_t i = 0; i < step_s.size(); ++i) fr[i % 2].push_back(step_frac[i]);
    for (size_t i = 0; i + 1 < step_s.size(); i += 2) {
      ratio.push_back(step_s[i + 1] / step_s[i]);
      sum[0] += step_s[i];
      sum[1] += step_s[i + 1];
    }
    ab_total_ratio = sum[1] / sum[0];
    ab_frac[0] = median_of(fr[0]);
    ab_frac[1] = median_of(fr[1]);
    ab_ratio = median_of(ratio);
  }
  std::sort(step_frac.begin(), step_frac.end());
  const double frac_bw = step_frac[step_frac.size() / 2];
  std::vector<double> probes = probe_gb_s;
  std::sort(probes.begin(), probes.end());
  // Against the passes before and after the run (their mean): the mean over all steps, and the
  // fastest step.
  auto fraction_of_run_bound = [&](double tok_s) { return tok_s * bytes_tok / 1e9 / bw; };
  const double frac_run_bw = fraction_of_run_bound(decode_tps);
  std::sort(step_s.begin(), step_s.end());
  const double best_step_tps = 1.0 / step_s.front();
  const double median_step_tps = 1.0 / step_s[step_s.size() / 2];
  const double frac_bw_best = fraction_of_run_bound(best_step_tps);
  // The peak that applies: the int8 dot's when it multiplies most of the weights.
  const bool int8 = m.kernel_options().quant_dot == QuantDot::Int8 && lim.int8_peak_gop_s > 0 &&
                    2 * m.quantised_bytes() > m.packed_bytes();
  const double frac_fma = prefill_gflop_s / lim.fma_peak_gflop_s;
  const double frac_int8 = lim.int8_peak_gop_s > 0 ? prefill_gflop_s / lim.int8_peak_gop_s : 0;
  const double frac_peak = int8 ? frac_int8 : frac_fma;
  // AMX tiles run the Q8_0 / Q4_K / Q5_K prefill products when the kernels may use them: it is then
  // also judged against the AMX peak.
  const bool amx = int8 && lim.amx_int8_peak_gop_s > 0 && matmul_amx_enabled(ko.isa);
  const double frac_amx = amx ? prefill_gflop_s / lim.amx_int8_peak_gop_s : 0;

  if (args->has("--json")) {
    std::printf(
        "{\"model\":\"%s\",\"weights_bytes\":%zu,\"threads\":%lld,\"isa\":\"%s\",\"load_s\":%.3f,"
        "\"prompt_tokens\":%lld,\"decode_tokens\":%lld,\"prefill_runs\":%lld,\"prefill_tok_s\":%."
        "3f,"
        "\"prefill_best_tok_s\":%.3f,\"prefill_first_tok_s\":%.3f,\"decode_tok_s\":%.3f,"
        "\"prefill_gflop_s\":%.2f,\"decode_gb_s\":%.3f,\"decode_bytes_per_token\":%.0f,"
        "\"decode_weight_bytes\":%.0f,\"decode_state_bytes\":%.0f,\"decode_kv_bytes\":%.0f,"
        "\"bandwidth_gb_s\":%.3f,\"bandwidth_before_gb_s\":%.3f,\"bandwidth_after_gb_s\":%.3f,"
        "\"fma_peak_gflop_s\":%.2f,\"int8_peak_gop_s\":%.2f,\"int8_peak_isa\":\"%s\","
        "\"amx_int8_peak_gop_s\":%.2f,"
        "\"amx\":%s,\"prefill_fraction_of_amx_peak\":%.6g,"
        "\"quant_dot\":\"%s\",\"quantised_bytes\":%zu,\"decode_fraction_of_bound\":%.6g,"
        "\"decode_step_fraction_min\":%.6g,\"decode_step_fraction_max\":%.6g,"
        "\"probe_bandwidth_min_gb_s\":%.3f,\"probe_bandwidth_median_gb_s\":%.3f,"
        "\"probe_bandwidth_max_gb_s\":%.3f,\"probe_bytes\":%zu,\"probe_stream_variant\":%d,"
        "\"decode_fraction_of_run_bound\":%.6g,"
        "\"decode_best_step_tok_s\":%.3f,\"decode_median_step_tok_s\":%.3f,"
        "\"decode_best_step_fraction_of_run_bound\":%.6g,"
        "\"prefill_peak\":\"%s\",\"prefill_fraction_of_peak\":%.4f,\"decode_split\":\"%s\"",
        dir.c_str(), m.packed_bytes(), static_cast<long long>(th.value()), m.isa(), load_s,
        static_cast<long long>(p.value()), static_cast<long long>(n.value()),
        static_cast<long long>(runs.value()), prefill_tps, prefill_best_tps, prefill_first_tps,
        decode_tps, prefill_gflop_s, decode_gb_s, bytes_tok, weight_bytes, state_bytes, kv_bytes,
        bw, lim.read_bandwidth_gb_s, bw_after, lim.fma_peak_gflop_s, lim.int8_peak_gop_s,
        lim.int8_isa.c_str(), lim.amx_int8_peak_gop_s, amx ? "true" : "false", frac_amx,
        quant_dot_name(m.kernel_options().quant_dot), m.quantised_bytes(), frac_bw,
        step_frac.front(), step_frac.back(), probes.front(), probes[probes.size() / 2],
        probes.back(), probe.bytes(), lim.bandwidth_variant, frac_run_bw, best_step_tps,
        median_step_tps, frac_bw_best, int8 ? "int8" : "fma", frac_peak,
        decode_split_name(splits[0]));
    std::printf(",\"cache_type_k\":\"%s\",\"cache_type_v\":\"%s\"",
                kv_type_name(kv_shape.kv_types.k), kv_type_name(kv_shape.kv_types.v));
    if (split_ab)
      std::printf(
          ",\"decode_split_b\":\"%s\",\"decode_split_a_step_fraction\":%.6g,"
          "\"decode_split_b_step_fraction\":%.6g,\"decode_split_b_over_a_time\":%.6g,"
          "\"decode_split_b_over_a_total_time\":%.6g",
          decode_split_name(splits[1]), ab_frac[0], ab_frac[1], ab_ratio, ab_total_ratio);
    std::printf("}\n");
  } else {
    char quant[64] = "no quantised weights";
    if (m.quantised_bytes() > 0)
      std::snprintf(
          quant, sizeof quant, "%.0f%% quantised, %s dot",
          100.0 * static_cast<double>(m.quantised_bytes()) / static_cast<double>(m.packed_bytes()),
          quant_dot_name(m.kernel_options().quant_dot));
    std::printf("model %s: %s of packed weights (%s), %lld thread%s, %s\n", dir.c_str(),
                hub::format_bytes(static_cast<uint64_t>(m.packed_bytes())).c_str(), quant,
                static_cast<long long>(th.value()), th.value() == 1 ? "" : "s", m.isa());
    char amx_peak[64] = "";
    if (lim.amx_int8_peak_gop_s > 0)
      std::snprintf(amx_peak, sizeof amx_peak, ", AMX int8 peak %.1f GOP/s",
                    lim.amx_int8_peak_gop_s);
    std::printf(
        "machine: read bandwidth %.2f GB/s (%.2f before, %.2f after the run), fp32 FMA peak "
        "%.1f GFLOP/s, int8 dot peak %.1f GOP/s (%s)%s\n",
        bw, lim.read_bandwidth_gb_s, bw_after, lim.fma_peak_gflop_s, lim.int8_peak_gop_s,
        lim.int8_isa.c_str(), amx_peak);
    char amx_frac[64] = "";
    if (amx) std::snprintf(amx_frac, sizeof amx_frac, ", %.1f%% of AMX peak", 100 * frac_amx);
    std::printf(
        "prefill %lld tokens: %8.2f tok/s  %7.1f GOP/s    = %5.1f%% of %s peak "
        "(%.1f%% of FMA peak%s)\n",
        static_cast<long long>(p.value()), prefill_tps, prefill_gflop_s, 100 * frac_peak,
        int8 ? "int8 dot" : "FMA", 100 * frac_fma, amx_frac);
    std::printf(
        "prefill runs:   median of %lld %8.2f tok/s; fastest %8.2f tok/s; first run (buffers "
        "grow) %8.2f tok/s\n",
        static_cast<long long>(runs.value()), prefill_tps, prefill_best_tps, prefill_first_tps);
    std::printf(
        "decode  %lld tokens: %8.2f tok/s  %7.2f GB/s     = %5.1f%% of bandwidth bound "
        "(per token: %.1f MB weights + %.1f MB recurrent state + %.1f MB K/V)\n",
        static_cast<long long>(n.value()), decode_tps, decode_gb_s, 100 * frac_bw,
        weight_bytes / 1e6, state_bytes / 1e6, kv_bytes / 1e6);
    std::printf(
        "decode  bound:  each step against a bandwidth probe right after it (%.0f MiB, "
        "%.1f-%.1f GB/s, median %.1f); the median step's fraction, steps %.1f-%.1f%%\n",
        static_cast<double>(probe.bytes()) / (1 << 20), probes.front(), probes.back(),
        probes[probes.size() / 2], 100 * step_frac.front(), 100 * step_frac.back());
    std::printf(
        "decode  steps:  median %8.2f tok/s; fastest %8.2f tok/s; against the bandwidth before "
        "and after the run: mean %.1f%%, fastest step %.1f%%\n",
        median_step_tps, best_step_tps, 100 * frac_run_bw, 100 * frac_bw_best);
    if (split_ab)
      std::printf(
          "decode  split:  %s (even steps) median step %.1f%% of its probe, %s (odd steps) "
          "%.1f%%; %s's step time / the %s step before it: median %.3f over %zu pairs, "
          "all pairs' time %.3f\n",
          decode_split_name(splits[0]), 100 * ab_frac[0], decode_split_name(splits[1]),
          100 * ab_frac[1], decode_split_name(splits[1]), decode_split_name(splits[0]), ab_ratio,
          step_s.size() / 2, ab_total_ratio);
  }
  return 0;
}

}  // namespace rw::app
