// The built-in trained models (models/kjv-target, models/kjv-draft, trained by
// tools/train/train.py on the King James Bible): rewind's logits equal the training script's own
// fp64 PyTorch forward (per-token GDN recurrence) on the exported BF16 weights within 1e-4;
// rewind's tokenizer gives the script's ids; the chat template renders like jinja2 (the way the
// training data was made); greedy text from the target is English words of the corpus. Golden
// data: tests/data/kjv (tools/train/train.py golden). The MTP head's golden logits are there
// too (mtp_logits) for when rewind runs the MTP head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "rewind/chat/chat_template.h"
#include "rewind/sample/sampler.h"
#include "rewind/tokenizer/tokenizer.h"
#include "test_util.h"

namespace rw {
namespace {

std::string models_dir() {
  return std::string(REWIND_TEST_DATA) + "/../../models";
}
std::string model_dir(const std::string& which) {
  return models_dir() + "/kjv-" + which;
}
std::string kjv_data() {
  return std::string(REWIND_TEST_DATA) + "/kjv";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path));
}

// Logits of every position of `tokens`, from a fresh state, in one forward call.
std::vector<float> all_logits(Model& m, const std::vector<int32_t>& tokens) {
  SequenceState st = m.new_state();
  SeqInput in{&st, tokens, {}};
  for (size_t i = 0; i < tokens.size(); ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
  std::vector<float> logits;
  EXPECT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
  return logits;
}

class trained_logits : public ::testing::TestWithParam<std::string> {};

TEST_P(trained_logits, MatchTrainingScriptFp64Forward) {
  const auto exp = read_json(kjv_data() + "/" + GetParam() + "_golden.json");
  Model& m = test::cached_model(model_dir(GetParam()), WeightStore::Auto, test::kF32Kv);
  const int64_t V = m.config().vocab_size;
  double worst = 0;
  for (const auto& seq : exp["sequences"]) {
    const std::string name = seq["name"];
    const auto tokens = seq["tokens"].get<std::vector<int32_t>>();
    const auto logits = all_logits(m, tokens);
    ASSERT_EQ(logits.size(), tokens.size() * static_cast<size_t>(V));
    for (const auto& p : seq["positions"]) {
      const int64_t pos = p.get<int64_t>();
      const auto ref = seq["logits"][std::to_string(pos)].get<std::vector<double>>();
      ASSERT_EQ(static_cast<int64_t>(ref.size()), V);
      for (int64_t v = 0; v < V; ++v) {
        const double d = std::abs(static_cast<double>(logits[pos * V + v]) - ref[v]);
        worst = std::max(worst, d);
        ASSERT_LE(d, 1e-4) << name << " position " << pos << " token " << v;
      }
    }
    const auto amax = seq["argmax"].get<std::vector<int32_t>>();
    const auto margin = seq["argmax_margin"].get<std::vector<double>>();
    for (size_t t = 0; t < tokens.size(); ++t) {
      if (margin[t] < 1e-3) continue;  // a near-tie may go either way in fp32
      EXPECT_EQ(argmax(logits.data() + t * V, static_cast<int32_t>(V)), amax[t])
          << name << " position " << t;
    }
  }
  RecordProperty("max_abs_diff", std::to_string(worst));
  std::printf("[ kjv-%s ] max |rewind - fp64 reference| = %.3g\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Models, trained_logits, ::testing::Values("target", "draft"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The MTP head as rewind runs it (Model::mtp_draft after a forward over t_0..t_i: entry i pairs
// h_i with t_{i+1}) against the training script's fp64 forward of the head. The script rotates
// entry i at position i+1, rewind at i (as vLLM does); RoPE scores depend only on position
// differences, so the two agree up to rounding.
TEST(trained_model, MtpHeadMatchesTrainingScriptFp64Forward) {
  const auto exp = read_json(kjv_data() + "/target_golden.json");
  LoadOptions lo;
  lo.mtp = true;
  lo.kv_types = test::kF32Kv;  // against the script's fp64 forward
  auto loaded = Model::load(model_dir("target"), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.error_message();
  Model& m = **loaded;
  ASSERT_TRUE(m.mtp_loaded());
  const int64_t V = m.config().vocab_size;
  double worst = 0;
  int64_t checked = 0, argmax_checked = 0;
  for (const auto& seq : exp["sequences"]) {
    const auto tokens = seq["tokens"].get<std::vector<int32_t>>();
    const auto want_pos = seq["mtp_positions"].get<std::vector<int64_t>>();
    const auto amax = seq["mtp_argmax"].get<std::vector<int32_t>>();
    const auto margin = seq["mtp_argmax_margin"].get<std::vector<double>>();
    SequenceState st = m.new_state();
    std::vector<float> logits, mlog;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      SeqInput in{&st, std::span<const int32_t>(&tokens[i], 1), {}};
      ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
      MtpDraft d;
      d.state = &st;
      d.last = tokens[i + 1];
      d.k = 1;
      ASSERT_TRUE(m.mtp_draft(std::span<MtpDraft>(&d, 1), &mlog, nullptr).ok());
      ASSERT_EQ(static_cast<int64_t>(mlog.size()), V);
      if (std::find(want_pos.begin(), want_pos.end(), static_cast<int64_t>(i)) != want_pos.end()) {
        const auto ref = seq["mtp_logits"][std::to_string(i)].get<std::vector<double>>();
        for (int64_t v = 0; v < V; ++v) {
          const double diff = std::abs(static_cast<double>(mlog[v]) - ref[v]);
          worst = std::max(worst, diff);
          ASSERT_LE(diff, 1e-4) << seq["name"] << " entry " << i << " token " << v;
        }
        ++checked;
      }
      if (margin[i] >= 1e-3) {
        EXPECT_EQ(d.drafts[0], amax[i]) << seq["name"] << " entry " << i;
        ++argmax_checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(argmax_checked, 100);
  std::printf("[ kjv-target MTP ] max |rewind - fp64 reference| = %.3g over %lld entries\n", worst,
              static_cast<long long>(checked));
}

TEST(trained_model, TokenizerMatchesTrainingScript) {
  auto tok = Tokenizer::load(model_dir("target") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  EXPECT_EQ(tok->vocab_size(), 4096);
  const auto exp = read_json(kjv_data() + "/tokenizer_golden.json");
  ASSERT_GE(exp["cases"].size(), 4u);
  for (const auto& c : exp["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text), ids) << text.substr(0, 80);
    EXPECT_EQ(tok->decode(ids), text);
  }
}

TEST(trained_model, DraftAndTargetShareTheTokenizer) {
  EXPECT_EQ(read_file(model_dir("target") + "/tokenizer.json"),
            read_file(model_dir("draft") + "/tokenizer.json"));
  EXPECT_EQ(read_file(model_dir("target") + "/tokenizer_config.json"),
            read_file(model_dir("draft") + "/tokenizer_config.json"));
}

TEST(trained_model, ChatTemplateRendersLikeTheTrainingData) {
  auto tmpl = ChatTemplate::load_dir(model_dir("target"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.error_message();
  // ordered_json: the tools and arguments keep the key order the script wrote (and rendered).
  const auto exp = nlohmann::ordered_json::parse(read_file(kjv_data() + "/chat_golden.json"));
  ASSERT_GE(exp["cases"].size(), 3u);
  for (const auto& c : exp["cases"]) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) {
      ChatMessage cm;
      cm.role = m["role"];
      cm.content = m["content"];
      if (m.contains("tool_calls")) {
        for (const auto& tc : m["tool_calls"]) {
          ToolCall call;
          call.name = tc["function"]["name"];
          call.arguments_json = tc["function"]["arguments"].dump();
          cm.tool_calls.push_back(call);
        }
      }
      msgs.push_back(cm);
    }
    ChatRenderOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"];
    if (!c["tools"].is_null()) opt.tools_ordered = c["tools"];
    auto r = tmpl->render(msgs, opt);
    ASSERT_TRUE(r.ok()) << r.error_message();
    EXPECT_EQ(r->text, c["rendered"].get<std::string>());
  }
}

TEST(trained_model, GreedyTextIsEnglishWordsOfTheCorpus) {
  auto tok = Tokenizer::load(model_dir("target") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  std::set<std::string> words;
  {
    std::istringstream in(read_file(kjv_data() + "/kjv_words.txt"));
    for (std::string w; std::getline(in, w);)
      if (!w.empty()) words.insert(w);
  }
  ASSERT_GT(words.size(), 10000u);
  Model& m = test::cached_model(model_dir("target"));
  const int32_t V = static_cast<int32_t>(m.config().vocab_size);
  const int32_t eot = tok->token_id("<|endoftext|>");
  std::vector<int32_t> prompt = tok->encode("And God said unto Moses,");
  SequenceState st = m.new_state();
  std::vector<int32_t> out;
  std::vector<float> logits;
  std::vector<int32_t> step = prompt;
  for (int i = 0; i < 48; ++i) {
    SeqInput in{&st, step, {static_cast<int32_t>(step.size()) - 1}};
    ASSERT_TRUE(m.forward(std::span<SeqInput>(&in, 1), &logits, nullptr).ok());
    const int32_t next = argmax(logits.data(), V);
    if (next == eot) break;
    out.push_back(next);
    step = {next};
  }
  const std::string text = tok->decode(out);
  std::printf("[ greedy ] And God said unto Moses,%s\n", text.c_str());
  int n_words = 0, known = 0;
  std::string w;
  auto flush = [&] {
    if (w.empty()) return;
    ++n_words;
    known += words.count(w) ? 1 : 0;
    w.clear();
  };
  for (char ch : text) {
    if (std::isalpha(static_cast<unsigned char>(ch))) {
      w += ch;
    } else {
      flush();
    }
  }
  flush();
  EXPECT_GE(n_words, 15) << text;
  EXPECT_GE(known, n_words * 95 / 100) << text;
}

}  // namespace
}  // namespace rw
