#include "rewind/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "rewind/base/thread_pool.h"

namespace rw {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Engine::Engine(Model& model, ThreadPool* pool, const EngineOptions& opt)
    : model_(model), pool_(pool), opt_(opt) {
  REWIND_CHECK(opt_.prefill_chunk >= 1);
  opt_.cache.has_recurrent = model.config().n_linear_layers() > 0;
  opt_.cache.page_tokens = model.state_shape().page_tokens;
  opt_.cache.has_attention = model.config().n_full_layers() > 0;
  if (opt_.cache_enabled) cache_ = std::make_unique<PrefixCache>(opt_.cache);
}

Result<RequestReport> Engine::generate(const GenerateRequest& req) {
  const double t0 = now_ms();
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  const int64_t V = model_.config().vocab_size;
  if (n == 0) return make_error("request: empty prompt");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= V)
      return make_error("request: token id " + std::to_string(t) + " out of range [0, " + std::to_string(V) + ")");
  if (req.max_tokens < 1) return make_error("request: max_tokens must be >= 1");

  // Speculation is checked before any work: a request that cannot speculate fails up front.
  REWIND_TRY_STATUS(spec_check(model_, req.spec));
  RequestReport rep;
  rep.prompt_tokens = n;
  SequenceState st = model_.new_state();
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  std::optional<LookupResult> hit;
  if (cache_) {
    hit.emplace(cache_->lookup(req.prompt));
    rep.diverged_at = hit->common_prefix;
    rep.resumed_at = hit->resume_pos;
    rep.kind = hit->kind;
    st.resume(hit->pages, hit->snapshot.get(), hit->resume_pos);
  }
  const int64_t p = st.n_pos();
  rep.rerun_tokens = n - p;
  rep.lost_to_spacing = std::min(rep.diverged_at, n - 1) - p;

  // Prefill [p, n) cut at checkpoint positions (snapshot after each) and at the chunk size.
  std::vector<int64_t> cuts;
  if (cache_) cuts = opt_.cache.policy.cut_points(p, n, req.boundaries);
  const bool recurrent = model_.config().n_linear_layers() > 0;
  auto snapshot = [&] {  // every checkpoint taken for this request is counted and timed
    const double ts = now_ms();
    snaps.push_back(st.take_snapshot());
    rep.snapshot_ms += now_ms() - ts;
    ++rep.snapshots_taken;
  };
  std::vector<float> logits;
  size_t ci = 0;
  int64_t pos = p;
  while (pos < n) {
    int64_t end = std::min(n, pos + opt_.prefill_chunk);
    while (ci < cuts.size() && cuts[ci] <= pos) ++ci;
    if (ci < cuts.size() && cuts[ci] < end) end = cuts[ci];
    SeqInput in{&st, std::span<const int32_t>(req.prompt.data() + pos, static_cast<size_t>(end - pos)), {}};
    if (end == n) in.logit_rows = {static_cast<int32_t>(end - pos - 1)};
    REWIND_TRY_STATUS(model_.forward(std::span<SeqInput>(&in, 1), &logits, pool_));
    pos = end;
    if (cache_ && recurrent && ci < cuts.size() && cuts[ci] == pos) snapshot();
  }

  Sampler sampler(req.sampling);
  const int32_t nv = opt_.sample_vocab > 0 && opt_.sample_vocab < V ? opt_.sample_vocab
                                                                     : static_cast<int32_t>(V);
  std::vector<int32_t>& out = rep.output;
  std::vector<int32_t> history = req.prompt;  // tokens consumed by the state
  const int64_t interval = cache_ && recurrent ? opt_.cache.policy.interval : 0;
  if (req.keep_first_logits) rep.first_logits = logits;
  auto emit = [&](int32_t t) {
    out.push_back(t);
    if (req.on_token) req.on_token(t);
  };
  emit(sampler.sample(logits.data(), nv));
  rep.ttft_ms = now_ms() - t0;
  std::optional<SpecSequence> spec;
  if (req.spec.kind != SpecKind::Off) spec.emplace(model_, req.spec);
  while (!req.stop_ids.count(out.back()) && static_cast<int32_t>(out.size()) < req.max_tokens) {
    const int32_t last = out.back();
    if (spec) {
      // One speculative round: draft, verify in one forward, accept, roll back exactly.
      const int32_t budget = req.max_tokens - static_cast<int32_t>(out.size());
      SpecOutcome o;
      try {
        REWIND_TRY_STATUS(spec->begin(&st, history, last, budget, sampler, pool_));
        SeqInput in = spec->verify_input();
        const Status fs = model_.forward(std::span<SeqInput>(&in, 1), &logits, pool_);
        if (!fs.ok()) {
          spec->abort();
          return fs.error();
        }
        o = spec->commit(logits.data(), V, nv, sampler, req.stop_ids,
                         interval, pool_);
      } catch (const std::exception& e) {
        spec->abort();  // the sequence is back at its last committed state
        last_state_.emplace(std::move(st));
        return make_error(std::string("speculative round failed: ") + e.what());
      }
      o.append_consumed(last, &history);
      for (int32_t t : o.tokens) emit(t);
      for (auto& sn : o.snaps) {
        snaps.push_back(std::move(sn));
        ++rep.snapshots_taken;
      }
      continue;
    }
    SeqInput in{&st, std::span<const int32_t>(&out.back(), 1), {0}};
    REWIND_TRY_STATUS(model_.forward(std::span<SeqInput>(&in, 1), &logits, pool_));
    history.push_back(last);
    // Grid checkpoints crossed while decoding.
    if (interval > 0 && st.n_pos() % interval == 0) snapshot();
    emit(sampler.sample(logits.data(), nv));
  }
  if (spec) rep.spec = spec->stats();
  // The end of the generated reply is a checkpoint (a follow-up turn extends through it).
  if (cache_ && recurrent && st.n_pos() > n && (snaps.empty() || snaps.back()->pos != st.n_pos()))
    snapshot();
  if (cache_ && req.publish) cache_->insert(history, st.pages(), snaps, req.anchor);
  hit.reset();  // release the lease
  last_state_.emplace(std::move(st));
  rep.total_ms = now_ms() - t0;
  return rep;
}

}  // namespace rw
