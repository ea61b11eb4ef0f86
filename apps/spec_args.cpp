#include "spec_args.h"

#include "commands.h"

namespace rw::app {

Result<SpecSetup> spec_from_args(const Args& a, const std::string& store,
                                 const KernelOptions& kernels, ThreadPool* pool,
                                 const SharedDraftLoader& shared) {
  SpecSetup s;
  std::string m = a.str("--spec", "off");
  // llama-server's -md FILE: a draft model, as --spec draft:FILE.
  if (a.has("--model-draft")) {
    const std::string d = "draft:" + a.str("--model-draft");
    if (a.has("--spec") && m != d)
      return make_error("--model-draft and --spec " + m + " both choose the speculation; keep one");
    m = d;
  }
  REWIND_TRY(int64_t k, a.int_("--draft-k", 4));
  if (k < 1 || k > SpecConfig::kMaxDraft)
    return make_error("--draft-k must be in [1, " + std::to_string(SpecConfig::kMaxDraft) + "]");
  s.cfg.k = static_cast<int32_t>(k);
  s.cfg.adaptive = !a.has("--spec-fixed-k");
  if (m == "off") {
    s.cfg.kind = SpecKind::Off;
  } else if (m == "ngram") {
    s.cfg.kind = SpecKind::Ngram;
  } else if (m == "mtp") {
    s.cfg.kind = SpecKind::Mtp;
  } else if (m.rfind("draft:", 0) == 0 && m.size() > 6) {
    s.cfg.kind = SpecKind::Draft;
    double secs = 0;
    REWIND_TRY(const KvTypes kv, kv_types_from(a));  // the draft's KV as the target's
    // As for --model: a directory, a file or a pulled name; errors say it is the draft.
    auto draft_error = [&](const std::string& e) { return make_error("--spec " + m + ": " + e); };
    auto path = model_path_or_stored(m.substr(6));
    if (!path.ok()) return draft_error(path.error_message());
    if (shared) {
      Status st = shared(path.value(), kv, &s.cfg);
      if (!st.ok()) return draft_error(st.error_message());
    } else {
      auto d = load_model(path.value(), store, kernels, pool, &secs, false, kv);
      if (!d.ok()) return draft_error(d.error_message());
      s.draft = std::move(d).value();
      s.cfg.draft = s.draft.get();
    }
  } else {
    return make_error("--spec must be off, ngram, draft:DIR or mtp (got '" + m + "')");
  }
  return s;
}

}  // namespace rw::app
