// `rewind bench --json` on a Q8_0 GGUF file (the qwen3.5-tiny-256 preset): the JSON object has
// every field with its type; what the run was asked for is echoed (model path, threads, token
// counts, prefill runs, decode split); the byte counts equal the same file loaded here (packed
// and quantised weight bytes, the bytes of a decode step: weights, recurrent state and the K/V of
// the average position); the derived figures agree with the ones they come from (GFLOP/s with
// the token rate, GB/s with the bytes, fractions with their bounds); the machine-limit fields
// say which peak and ISA apply (AMX exactly when the kernels use its tiles, and `--isa avx512`
// turns them off). Two decode splits take turns and are compared; bad options are refused with
// messages that name the choices. Timings themselves are not knowable, only positive and ordered.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rewind/kernels/matmul.h"
#include "rewind/model/model.h"
#include "test_util.h"

namespace rw {
namespace {

using json = nlohmann::json;

constexpr int64_t kPrompt = 40, kDecode = 3, kThreads = 2;

// The qwen3.5-tiny-256 preset (seed 3) as a Q8_0 GGUF file, made once per test process.
const std::string& q8_gguf() {
  static const std::string path = [] {
    const std::string dir = test::made_scratch_dir("bench_cli");
    int rc = 0;
    std::string out = test::run_command(
        std::string(REWIND_BINARY) + " make-model --preset qwen3.5-tiny-256 --seed 3 --out " + dir +
            "/hf 2>&1",
        &rc);
    EXPECT_EQ(rc, 0) << out;
    const std::string gguf = dir + "/m_q8_0.gguf";
    out = test::run_command(std::string(REWIND_BINARY) + " convert --in " + dir + "/hf --out " +
                                gguf + " --type q8_0 2>&1",
                            &rc);
    EXPECT_EQ(rc, 0) << out;
    return gguf;
  }();
  return path;
}

std::string bench_cmd(const std::string& extra = "") {
  return std::string(REWIND_BINARY) + " bench --model " + q8_gguf() + " -p " +
         std::to_string(kPrompt) + " -n " + std::to_string(kDecode) + " -t " +
         std::to_string(kThreads) + " --json " + extra;
}

// `rewind bench ... --json` (stderr dropped); a JSON object, or null after a test failure.
json run_bench(const std::string& extra = "") {
  int rc = 0;
  const std::string out = test::run_command(bench_cmd(extra) + " 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0) << out;
  json j = json::parse(out, nullptr, false);
  EXPECT_TRUE(!j.is_discarded() && j.is_object()) << out;
  return j.is_discarded() || !j.is_object() ? json() : j;
}

// The bandwidth probe's buffer (kernels/machine_limits.h): 2 x L3 but at least 256 MiB, and at
// most the bandwidth buffer (max(1 GiB, 2 x L3), at most a quarter of memory); each thread
// streams a chunk of a whole number of 48 KiB blocks.
size_t expected_probe_bytes() {
  const size_t l3 = static_cast<size_t>(std::max(sysconf(_SC_LEVEL3_CACHE_SIZE), 0L));
  size_t buffer = std::max(size_t{1} << 30, 2 * l3);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) buffer = std::min(buffer, static_cast<size_t>(pages * page) / 4);
  const size_t target = std::min(buffer, std::max(size_t{256} << 20, 2 * l3));
  const size_t block = 48 << 10, threads = static_cast<size_t>(kThreads);
  return std::max<size_t>(target / threads / block, 1) * block * threads;
}

// |a - b| within `rel` of b (and of an absolute `abs` for figures printed with few decimals).
void expect_close(double a, double b, double rel, double abs, const char* what) {
  EXPECT_LE(std::fabs(a - b), std::max(rel * std::fabs(b), abs))
      << what << ": " << a << " vs " << b;
}

TEST(BenchCli, JsonEchoesTheRunAndCountsTheModelsBytes) {
  const json j = run_bench();
  ASSERT_TRUE(j.is_object());

  // Every field, with its type.
  for (const char* k :
       {"model", "isa", "int8_peak_isa", "quant_dot", "prefill_peak", "decode_split"})
    EXPECT_TRUE(j.contains(k) && j[k].is_string()) << k << " in " << j.dump();
  for (const char* k : {"weights_bytes", "threads", "prompt_tokens", "decode_tokens",
                        "prefill_runs", "quantised_bytes", "probe_bytes", "probe_stream_variant",
                        "decode_bytes_per_token", "decode_weight_bytes", "decode_state_bytes"})
    EXPECT_TRUE(j.contains(k) && j[k].is_number_integer()) << k << " in " << j.dump();
  for (const char* k : {"load_s",
                        "prefill_tok_s",
                        "prefill_best_tok_s",
                        "prefill_first_tok_s",
                        "decode_tok_s",
                        "prefill_gflop_s",
                        "decode_gb_s",
                        "decode_kv_bytes",
                        "bandwidth_gb_s",
                        "bandwidth_before_gb_s",
                        "bandwidth_after_gb_s",
                        "fma_peak_gflop_s",
                        "int8_peak_gop_s",
                        "amx_int8_peak_gop_s",
                        "prefill_fraction_of_amx_peak",
                        "decode_fraction_of_bound",
                        "decode_step_fraction_min",
                        "decode_step_fraction_max",
                        "probe_bandwidth_min_gb_s",
                        "probe_bandwidth_median_gb_s",
                        "probe_bandwidth_max_gb_s",
                        "decode_fraction_of_run_bound",
                        "decode_best_step_tok_s",
                        "decode_median_step_tok_s",
                        "decode_best_step_fraction_of_run_bound",
                        "prefill_fraction_of_peak"})
    EXPECT_TRUE(j.contains(k) && j[k].is_number()) << k << " in " << j.dump();
  EXPECT_TRUE(j.contains("amx") && j["amx"].is_boolean()) << j.dump();
  // Only a run with two decode splits compares them.
  EXPECT_FALSE(j.contains("decode_split_b")) << j.dump();
  if (::testing::Test::HasFailure()) return;

  // What the run was asked for.
  EXPECT_EQ(j["model"].get<std::string>(), q8_gguf());
  EXPECT_EQ(j["threads"].get<int64_t>(), kThreads);
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), kPrompt);
  EXPECT_EQ(j["decode_tokens"].get<int64_t>(), kDecode);
  EXPECT_EQ(j["prefill_runs"].get<int64_t>(), 3);  // the default
  EXPECT_EQ(j["decode_split"].get<std::string>(), "auto");

  // The same file loaded here: its packed and quantised bytes, and the bytes one decode step
  // reads (weights, the recurrent state, the K/V of p + (n + 1) / 2 positions on average).
  Model& m = test::cached_model(q8_gguf());
  EXPECT_EQ(j["weights_bytes"].get<size_t>(), m.packed_bytes());
  EXPECT_EQ(j["quantised_bytes"].get<size_t>(), m.quantised_bytes());
  EXPECT_GT(m.quantised_bytes(), m.packed_bytes() / 2);  // Q8_0: most weights are quantised
  EXPECT_EQ(j["decode_weight_bytes"].get<size_t>(), m.decode_bytes_per_token());
  EXPECT_EQ(j["decode_state_bytes"].get<size_t>(), m.new_state().recurrent_bytes());
  const ModelConfig& cfg = m.config();
  // K and V in the default KV cache type (kDefaultKvTypes): 2 bytes a value.
  EXPECT_EQ(j["cache_type_k"].get<std::string>(), kv_type_name(kDefaultKvTypes.k));
  EXPECT_EQ(j["cache_type_v"].get<std::string>(), kv_type_name(kDefaultKvTypes.v));
  ASSERT_TRUE(kDefaultKvTypes.k != DType::F32 && kDefaultKvTypes.k != DType::Q8_0 &&
              kDefaultKvTypes.v != DType::F32 && kDefaultKvTypes.v != DType::Q8_0);
  const double kv_pos = 2.0 * 2.0 * static_cast<double>(cfg.n_attention_layers()) *
                        static_cast<double>(cfg.n_head_kv * cfg.head_dim);
  EXPECT_GT(kv_pos, 0.0);
  EXPECT_EQ(j["decode_kv_bytes"].get<double>(), kv_pos * (kPrompt + (kDecode + 1) / 2.0));
  const double bytes_tok = j["decode_bytes_per_token"].get<double>();
  EXPECT_EQ(bytes_tok, j["decode_weight_bytes"].get<double>() +
                           j["decode_state_bytes"].get<double>() +
                           j["decode_kv_bytes"].get<double>());
  EXPECT_EQ(j["isa"].get<std::string>(), m.isa());
  EXPECT_EQ(j["quant_dot"].get<std::string>(), quant_dot_name(default_quant_dot()));

  // Prefill: the headline is the median of the timed runs, no faster than the fastest; its
  // GFLOP/s is the token rate times the model's multiply-adds; its fraction is of the peak that
  // applies (int8 when the int8 dot multiplies the Q8_0 weights), and a fraction of a peak.
  const double prefill = j["prefill_tok_s"].get<double>();
  EXPECT_GT(prefill, 0.0);
  EXPECT_GE(j["prefill_best_tok_s"].get<double>() + 0.001, prefill);
  EXPECT_GT(j["prefill_first_tok_s"].get<double>(), 0.0);
  const double flops_tok =
      2.0 * (static_cast<double>(m.matmul_macs_per_token_layers()) +
             static_cast<double>(m.matmul_macs_lm_head()) / static_cast<double>(kPrompt));
  expect_close(j["prefill_gflop_s"].get<double>(), prefill * flops_tok / 1e9, 2e-3, 0.006,
               "prefill_gflop_s");
  const bool int8 = j["prefill_peak"].get<std::string>() == "int8";
  EXPECT_EQ(j["prefill_peak"].get<std::string>(), matmul_int8_simd() ? "int8" : "fma");
  const double peak =
      int8 ? j["int8_peak_gop_s"].get<double>() : j["fma_peak_gflop_s"].get<double>();
  ASSERT_GT(peak, 0.0);
  const double frac_peak = j["prefill_fraction_of_peak"].get<double>();
  expect_close(frac_peak, j["prefill_gflop_s"].get<double>() / peak, 2e-3, 1e-4,
               "prefill_fraction_of_peak");
  EXPECT_GT(frac_peak, 0.0);
  EXPECT_LE(frac_peak, 1.5);
  EXPECT_GT(j["fma_peak_gflop_s"].get<double>(), 0.0);

  // Decode: GB/s is the token rate times the bytes per token; the bandwidth bound is the mean
  // of the passes before and after the run; the fastest step is at least as fast as the median
  // step and the mean.
  const double mean = j["decode_tok_s"].get<double>();
  const double best = j["decode_best_step_tok_s"].get<double>();
  const double median = j["decode_median_step_tok_s"].get<double>();
  EXPECT_GT(mean, 0.0);
  EXPECT_GT(median, 0.0);
  EXPECT_GE(best + 0.001, median);
  EXPECT_GE(best + 0.001, mean);
  expect_close(j["decode_gb_s"].get<double>(), mean * bytes_tok / 1e9, 2e-3, 0.001, "decode_gb_s");
  const double bw = j["bandwidth_gb_s"].get<double>();
  EXPECT_GT(bw, 0.0);
  expect_close(
      bw,
      0.5 * (j["bandwidth_before_gb_s"].get<double>() + j["bandwidth_after_gb_s"].get<double>()),
      1e-3, 0.002, "bandwidth_gb_s");
  const double run_bound = j["decode_fraction_of_run_bound"].get<double>();
  expect_close(run_bound, mean * bytes_tok / 1e9 / bw, 1e-3, 1e-6, "decode_fraction_of_run_bound");
  expect_close(j["decode_best_step_fraction_of_run_bound"].get<double>(),
               best * bytes_tok / 1e9 / bw, 1e-3, 1e-6, "decode_best_step_fraction_of_run_bound");
  // The headline pairs each step with the bandwidth probe right after it: the median of the
  // steps' fractions, within their range; every probe (its buffer sized as documented) measured
  // a rate; no step's fraction passes the fastest step's bytes / s over the slowest probe (the
  // bytes per step differ by a few positions' K/V: 1% slack).
  const double paired = j["decode_fraction_of_bound"].get<double>();
  EXPECT_GT(paired, 0.0);
  EXPECT_LE(j["decode_step_fraction_min"].get<double>(), paired);
  EXPECT_GE(j["decode_step_fraction_max"].get<double>(), paired);
  const double probe_min = j["probe_bandwidth_min_gb_s"].get<double>();
  EXPECT_GT(probe_min, 0.0);
  EXPECT_LE(probe_min, j["probe_bandwidth_median_gb_s"].get<double>());
  EXPECT_LE(j["probe_bandwidth_median_gb_s"].get<double>(),
            j["probe_bandwidth_max_gb_s"].get<double>());
  EXPECT_EQ(j["probe_bytes"].get<size_t>(), expected_probe_bytes());
  EXPECT_GE(j["probe_stream_variant"].get<int>(), 0);
  EXPECT_LE(j["decode_step_fraction_max"].get<double>(), 1.01 * best * bytes_tok / 1e9 / probe_min);

  // AMX: its peak and the prefill's fraction of it exactly when the kernels use the tiles.
  EXPECT_EQ(j["amx"].get<bool>(), matmul_amx_enabled());
  if (matmul_amx_enabled()) {
    EXPECT_GT(j["amx_int8_peak_gop_s"].get<double>(), j["int8_peak_gop_s"].get<double>());
    const double frac_amx = j["prefill_fraction_of_amx_peak"].get<double>();
    expect_close(frac_amx,
                 j["prefill_gflop_s"].get<double>() / j["amx_int8_peak_gop_s"].get<double>(), 2e-3,
                 1e-4, "prefill_fraction_of_amx_peak");
    EXPECT_GT(frac_amx, 0.0);
    EXPECT_LE(frac_amx, 1.5);
  } else {
    EXPECT_EQ(j["prefill_fraction_of_amx_peak"].get<double>(), 0.0);
  }
}

// --prefill-runs and --isa are echoed: N timed prefills; --isa avx512 keeps AMX tiles off (and
// the run reports the ISA it ran); the int8 peak is that of the path the int8 dot takes, so
// --isa avx2 on a VNNI machine is judged against the AVX2 peak.
TEST(BenchCli, PrefillRunsAndIsaAreEchoed) {
  const json j = run_bench("--prefill-runs 2");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["prefill_runs"].get<int64_t>(), 2);
  EXPECT_EQ(j["int8_peak_isa"].get<std::string>(), std::string(matmul_int8_isa()));
  if (matmul_int8_simd() && std::string(matmul_int8_isa()) == "avx512vnni") {
    const json a = run_bench("--isa avx512");
    ASSERT_TRUE(a.is_object());
    EXPECT_FALSE(a["amx"].get<bool>());
    EXPECT_EQ(a["isa"].get<std::string>(), "avx512");
    EXPECT_EQ(a["int8_peak_isa"].get<std::string>(), "avx512vnni");
  }
  if (matmul_int8_simd()) {
    const json a = run_bench("--isa avx2 --prefill-runs 1");
    ASSERT_TRUE(a.is_object());
    EXPECT_EQ(a["int8_peak_isa"].get<std::string>(), "avx2");
    EXPECT_GT(a["int8_peak_gop_s"].get<double>(), 0.0);
  }
  if (isa_cap_supported(IsaCap::AvxVnni)) {  // judged against vpdpbusd on ymm
    const json a = run_bench("--isa avxvnni --prefill-runs 1");
    ASSERT_TRUE(a.is_object());
    EXPECT_EQ(a["isa"].get<std::string>(), "avx2");
    EXPECT_EQ(a["int8_peak_isa"].get<std::string>(), "avxvnni");
    EXPECT_GT(a["int8_peak_gop_s"].get<double>(), 0.0);
  }
  const json s = run_bench("--isa scalar --prefill-runs 1");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["isa"].get<std::string>(), "scalar");
  EXPECT_FALSE(s["amx"].get<bool>());
  EXPECT_EQ(s["prefill_runs"].get<int64_t>(), 1);
}

// Two decode splits take turns step by step (A on even steps) and are compared: both named,
// each one's median step fraction, and B's time over A's as ratios of positive times.
TEST(BenchCli, TwoDecodeSplitsAreCompared) {
  const json j = run_bench("-n 4 --decode-split auto,guided");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["decode_tokens"].get<int64_t>(), 4);
  EXPECT_EQ(j["decode_split"].get<std::string>(), "auto");
  EXPECT_EQ(j["decode_split_b"].get<std::string>(), "guided");
  for (const char* k : {"decode_split_a_step_fraction", "decode_split_b_step_fraction",
                        "decode_split_b_over_a_time", "decode_split_b_over_a_total_time"}) {
    ASSERT_TRUE(j.contains(k) && j[k].is_number()) << k << " in " << j.dump();
    EXPECT_GT(j[k].get<double>(), 0.0) << k;
  }
  // Each split's median fraction is one of the steps' fractions.
  for (const char* k : {"decode_split_a_step_fraction", "decode_split_b_step_fraction"}) {
    EXPECT_GE(j[k].get<double>(), j["decode_step_fraction_min"].get<double>() * (1 - 1e-5)) << k;
    EXPECT_LE(j[k].get<double>(), j["decode_step_fraction_max"].get<double>() * (1 + 1e-5)) << k;
  }
}

// --batch: one entry per size in the order given, each with positive times, tok/s = rows / step
// and the ratio to the first size's tok/s; --mixed-prefill adds the mixed set's latencies,
// with as many prefill chunks as steps (the set's steps all carry one).
TEST(BenchCli, BatchSizesSideBySide) {
  const json j = run_bench("-p 4 -n 3 --batch 1,3 --mixed-prefill 40 --step-tokens 16");
  ASSERT_TRUE(j.is_object() && j.contains("batch") && j["batch"].is_array()) << j.dump();
  ASSERT_EQ(j["batch"].size(), 2u);
  EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), 4);
  EXPECT_EQ(j["decode_tokens"].get<int64_t>(), 3);
  const double base = j["batch"][0]["tok_s"].get<double>();
  int64_t want_rows[] = {1, 3};
  for (size_t i = 0; i < 2; ++i) {
    const json& b = j["batch"][i];
    EXPECT_EQ(b["rows"].get<int64_t>(), want_rows[i]);
    const double step = b["step_ms"].get<double>(), fwd = b["forward_ms"].get<double>();
    EXPECT_GT(fwd, 0.0);
    EXPECT_GE(step, fwd * (1 - 1e-6));
    expect_close(b["tok_s"].get<double>(), 1e3 * static_cast<double>(want_rows[i]) / step, 1e-3,
                 1e-3, "tok_s");
    expect_close(b["ratio"].get<double>(), b["tok_s"].get<double>() / base, 1e-3, 1e-4, "ratio");
    // Steps the pool ran on one thread (the step chooser's trials, a back-off): 0 to n.
    EXPECT_GE(b["steps_alone"].get<int64_t>(), 0);
    EXPECT_LE(b["steps_alone"].get<int64_t>(), 3);
  }
  const json& m = j["mixed"];
  ASSERT_TRUE(m.is_object()) << j.dump();
  EXPECT_EQ(m["rows"].get<int64_t>(), 3);
  EXPECT_EQ(m["prefill_tokens"].get<int64_t>(), 40);
  EXPECT_EQ(m["step_tokens"].get<int64_t>(), 16);
  EXPECT_EQ(m["chunks"].get<int64_t>(), 3);
  EXPECT_EQ(m["prompts_done"].get<int64_t>(), 0);  // 3 chunks of 13 tokens: 39 of 40
  for (const char* k :
       {"itl_p50_ms", "itl_p99_ms", "alone_p50_ms", "alone_p99_ms", "whole_prompt_step_ms"})
    EXPECT_GT(m[k].get<double>(), 0.0) << k;
  EXPECT_GE(m["itl_p99_ms"].get<double>(), m["itl_p50_ms"].get<double>());
  EXPECT_FALSE(j.contains("mixed_target"));
}

// --itl-target adds a mixed set whose chunks the step target sizes, with its own figures; no
// chunk is larger than the fixed one.
TEST(BenchCli, BatchMixedWithAStepTarget) {
  const json j =
      run_bench("-p 4 -n 6 --batch 1,3 --mixed-prefill 40 --step-tokens 16 --itl-target 2x");
  const json& m = j["mixed_target"];
  ASSERT_TRUE(m.is_object()) << j.dump();
  EXPECT_EQ(m["target"].get<std::string>(), "2x");
  EXPECT_EQ(j["mixed"]["target"].get<std::string>(), "off");
  EXPECT_EQ(m["rows"].get<int64_t>(), 3);
  EXPECT_EQ(m["chunks"].get<int64_t>(), 6);
  EXPECT_GE(m["chunk_p50"].get<double>(), 1.0);
  EXPECT_LE(m["chunk_p50"].get<double>(), 13.0);  // at most what 3 rows leave of 16
  for (const char* k : {"itl_p50_ms", "itl_p99_ms", "prefill_tok_s"})
    EXPECT_GT(m[k].get<double>(), 0.0) << k;
}

// Bad options: refused before any measurement, with exit status 1 and a message naming the
// option and the choices.
TEST(BenchCli, BadOptionsAreRefused) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--isa neon", "--isa neon: not available"},
      {"--isa neon", "amx, avx512, avxvnni, avx2, scalar"},
      {"--prefill-runs 0", "--prefill-runs must be >= 1"},
      {"--decode-split sideways", "--decode-split sideways:"},
      {"--decode-split auto,", "--decode-split auto,:"},
      {"--decode-split auto,guided,static", "--decode-split auto,guided,static:"},
      {"-n 1 --decode-split auto,static", "needs -n 2 or more"},
      {"--batch 0", "--batch: each size must be 1 to 256"},
      {"--batch 1,x", "--batch"},
      {"--batch 1,8 --mixed-prefill -1", "--mixed-prefill must be >= 0"},
      {"--batch 8 --mixed-prefill 64 --step-tokens 8", "more than the largest batch"},
      {"--batch 1 --itl-target 4x", "--itl-target needs --mixed-prefill"},
      {"--batch 1 --mixed-prefill 8 --itl-target 1x", "--itl-target: a step target is off"},
  };
  for (const Case& c : cases) {
    int rc = 0;
    const std::string out = test::run_command(bench_cmd(c.args) + " 2>&1", &rc);
    EXPECT_EQ(rc, 1) << c.args << ": " << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << ": " << out;
    EXPECT_EQ(out.find("measuring machine limits"), std::string::npos) << c.args << ": " << out;
  }
}

}  // namespace
}  // namespace rw
