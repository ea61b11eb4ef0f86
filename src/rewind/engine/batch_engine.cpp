#include "rewind/engine/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "rewind/base/thread_pool.h"

namespace rw {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
constexpr size_t kRecentMax = 32;
constexpr size_t kLatencySamples = 4096;
}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "";
}

struct BatchEngine::Seq {
  uint64_t id = 0;
  SubmitRequest req;
  EventCallback cb;
  double t_submit = 0, t_start = 0;
  std::optional<SequenceState> state;
  std::optional<LookupResult> hit;  // holds the cache lease while running
  int64_t pos = 0;                  // next prompt position to run (prefill) == state n_pos
  std::vector<int64_t> cuts;
  size_t cut_idx = 0;
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  std::vector<int32_t> history;     // tokens consumed by the state
  std::optional<Sampler> sampler;
  std::vector<int32_t> out;
  bool decoding = false;
  RequestUsage usage;
  SpecConfig spec_cfg;               // resolved at submit (kind Off: plain decoding)
  std::optional<SpecSequence> spec;  // from the first decode step on
};

Result<SpecConfig> resolve_spec(const Model& model, const SpecConfig& engine_default,
                                const SubmitRequest& req) {
  SpecConfig c = engine_default;
  if (req.spec_kind) c.kind = *req.spec_kind;
  if (req.spec_k != 0) c.k = req.spec_k;
  if (c.kind == SpecKind::Draft && !c.draft)
    return make_error("speculative: this server has no draft model (start it with --spec draft:DIR)");
  REWIND_TRY_STATUS(spec_check(model, c));
  return c;
}

BatchEngine::BatchEngine(Model& model, ThreadPool* pool, const BatchEngineOptions& opt)
    : model_(model), pool_(pool), opt_(opt) {
  REWIND_CHECK(opt_.max_running >= 1 && opt_.step_tokens >= 1 && opt_.max_queued >= 0);
  REWIND_CHECK_MSG(spec_check(model, opt_.spec).ok(), "BatchEngine: speculative options not checked");
  if (opt_.sample_vocab <= 0 || opt_.sample_vocab > model.config().vocab_size)
    opt_.sample_vocab = static_cast<int32_t>(model.config().vocab_size);
  opt_.cache.has_recurrent = model.config().n_linear_layers() > 0;
  opt_.cache.has_attention = model.config().n_full_layers() > 0;
  opt_.cache.page_tokens = model.state_shape().page_tokens;
  if (opt_.cache_enabled) cache_ = std::make_unique<PrefixCache>(opt_.cache);
  thread_ = std::thread([this] { loop(); });
}

BatchEngine::~BatchEngine() { shutdown(false); }

Result<uint64_t> BatchEngine::submit(SubmitRequest req, EventCallback cb) {
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  const int64_t V = model_.config().vocab_size;
  auto reject = [&](std::string msg) -> Result<uint64_t> {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.requests_rejected;
    return make_error(std::move(msg));
  };
  if (n == 0) return reject("empty prompt");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= V) return reject("token id " + std::to_string(t) + " out of range");
  if (req.max_tokens < 1) return reject("max_tokens must be >= 1");
  if (n + req.max_tokens > opt_.ctx_size)
    return reject("prompt too long: " + std::to_string(n) + " prompt tokens + max_tokens " +
                  std::to_string(req.max_tokens) + " exceed the context size " +
                  std::to_string(opt_.ctx_size));
  if (req.top_logprobs < 0 || req.top_logprobs > 20) return reject("top_logprobs must be in [0, 20]");
  for (int64_t b : req.boundaries)
    if (b < 0) return reject("negative checkpoint boundary");
  auto spec = resolve_spec(model_, opt_.spec, req);
  if (!spec.ok()) return reject(spec.error_message());
  auto s = std::make_unique<Seq>();
  s->spec_cfg = std::move(spec).value();
  s->req = std::move(req);
  s->cb = std::move(cb);
  s->t_submit = now_ms();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ++metrics_.requests_rejected;
      return make_error("server is shutting down");
    }
    if (static_cast<int32_t>(queue_.size()) >= opt_.max_queued + opt_.max_running) {
      ++metrics_.requests_rejected;
      return make_error("queue full");
    }
    id = next_id_++;
    s->id = id;
    queue_.push_back(std::move(s));
    ++metrics_.requests_submitted;
    metrics_.queued = static_cast<int32_t>(queue_.size());
  }
  cv_.notify_all();
  return id;
}

void BatchEngine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.insert(id);
  }
  cv_.notify_all();
}

EngineMetrics BatchEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void BatchEngine::shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      drain_ = drain;
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchEngine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running_.empty(); });
      if (stopping_ && (!drain_ || (queue_.empty() && running_.empty()))) {
        if (queue_.empty() && running_.empty()) break;
        // Not draining: cancel everything still here.
        for (auto& s : queue_) cancelled_.insert(s->id);
        for (auto& s : running_) cancelled_.insert(s->id);
      }
    }
    step();
  }
}

void BatchEngine::step() {
  const int64_t V = model_.config().vocab_size;
  const bool recurrent = model_.config().n_linear_layers() > 0;
  std::set<uint64_t> cancelled;
  std::vector<std::unique_ptr<Seq>> admitted;
  std::vector<std::pair<EventCallback, TokenEvent>> queue_cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled.swap(cancelled_);
    // Cancelled requests still waiting never start.
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (cancelled.count((*it)->id)) {
        TokenEvent ev;
        ev.id = (*it)->id;
        ev.finish = FinishReason::Cancelled;
        ev.usage.prompt_tokens = static_cast<int64_t>((*it)->req.prompt.size());
        queue_cancels.emplace_back(std::move((*it)->cb), ev);
        ++metrics_.requests_cancelled;
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    while (static_cast<int32_t>(running_.size() + admitted.size()) < opt_.max_running && !queue_.empty()) {
      admitted.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    metrics_.queued = static_cast<int32_t>(queue_.size());
  }
  for (auto& [cb, ev] : queue_cancels)
    if (cb) cb(ev);

  // Admit: resume from the cache.
  for (auto& s : admitted) {
    s->t_start = now_ms();
    s->usage.prompt_tokens = static_cast<int64_t>(s->req.prompt.size());
    s->usage.queue_ms = s->t_start - s->t_submit;
    s->state.emplace(model_.new_state());
    const int64_t n = s->usage.prompt_tokens;
    if (cache_) {
      s->hit.emplace(cache_->lookup(s->req.prompt));
      s->state->resume(s->hit->pages, s->hit->snapshot.get(), s->hit->resume_pos);
      s->usage.diverged_at = s->hit->common_prefix;
      s->usage.hit = s->hit->kind;
      s->cuts = opt_.cache.policy.cut_points(s->state->n_pos(), n, s->req.boundaries);
    }
    s->pos = s->state->n_pos();
    s->usage.cached_tokens = s->pos;
    s->usage.lost_to_spacing = std::min(s->usage.diverged_at, n - 1) - s->pos;
    s->history.assign(s->req.prompt.begin(), s->req.prompt.begin() + s->pos);
    s->sampler.emplace(s->req.sampling);
    running_.push_back(std::move(s));
  }

  auto publish = [&](Seq& s) {
    if (!cache_ || s.state->n_pos() == 0) return;
    if (recurrent && s.decoding && (s.snaps.empty() || s.snaps.back()->pos != s.state->n_pos()))
      s.snaps.push_back(s.state->take_snapshot());  // end of the generated reply
    cache_->insert(s.history, s.state->pages(), s.snaps, s.req.anchor);
  };
  std::vector<TokenEvent> finals;
  // `ev` carries the last token (and its logprobs) when there is one.
  auto finish = [&](std::unique_ptr<Seq>& sp, FinishReason why, std::string err, TokenEvent ev) {
    Seq& s = *sp;
    if (why != FinishReason::Error) publish(s);
    s.hit.reset();  // releases the lease at once
    s.usage.completion_tokens = static_cast<int64_t>(s.out.size());
    if (s.spec) {
      s.spec->abort();  // no-op unless a round is open (a failed step)
      s.usage.spec_drafted = s.spec->stats().drafted;
      s.usage.spec_accepted = s.spec->stats().accepted;
    }
    s.usage.total_ms = now_ms() - s.t_submit;
    ev.id = s.id;
    ev.finish = why;
    ev.error = std::move(err);
    ev.usage = s.usage;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (why == FinishReason::Cancelled) ++metrics_.requests_cancelled;
      else if (why == FinishReason::Error) ++metrics_.requests_failed;
      else ++metrics_.requests_finished;
      metrics_.prompt_tokens += s.usage.prompt_tokens;
      if (s.spec) metrics_.spec.add(s.spec->stats());
      metrics_.generated_tokens += s.usage.completion_tokens;
      auto push = [](std::vector<double>& v, double x) {
        if (v.size() >= kLatencySamples) v.erase(v.begin());
        v.push_back(x);
      };
      if (s.usage.ttft_ms > 0) push(metrics_.ttft_ms, s.usage.ttft_ms);
      push(metrics_.request_ms, s.usage.total_ms);
      metrics_.recent.push_back({s.id, s.usage.prompt_tokens, s.usage.diverged_at, s.usage.cached_tokens,
                                 s.usage.prompt_tokens - s.usage.cached_tokens, s.usage.lost_to_spacing,
                                 hit_kind_name(s.usage.hit)});
      if (metrics_.recent.size() > kRecentMax) metrics_.recent.pop_front();
    }
    if (s.cb) s.cb(ev);
    sp.reset();
  };

  // Cancellations of running requests.
  for (auto& sp : running_)
    if (sp && cancelled.count(sp->id)) finish(sp, FinishReason::Cancelled, "", TokenEvent{});
  std::erase_if(running_, [](auto& p) { return !p; });
  if (running_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.running = 0;
    if (cache_) metrics_.cache = cache_->stats();
    return;
  }

  // Plan the step: decode tokens first (one each), then prefill chunks round-robin.
  std::vector<SeqInput> batch;
  std::vector<Seq*> who;
  std::vector<int64_t> chunk_end;
  int64_t budget = opt_.step_tokens;
  std::vector<std::pair<Seq*, std::string>> failed;  // rounds that could not start
  for (auto& sp : running_)
    if (sp->decoding) {
      Seq& s = *sp;
      if (s.spec_cfg.kind != SpecKind::Off) {
        // A speculative round: [last, d1..dk] verified in this step's forward.
        if (!s.spec) s.spec.emplace(model_, s.spec_cfg);
        const int32_t left = s.req.max_tokens - static_cast<int32_t>(s.out.size());
        Status bs = Ok{};
        try {
          bs = s.spec->begin(&*s.state, s.history, s.out.back(), left, *s.sampler, pool_);
        } catch (const std::exception& e) {
          bs = make_error(std::string("speculative drafting failed: ") + e.what());
        }
        if (!bs.ok()) {
          failed.emplace_back(&s, bs.error_message());
          continue;
        }
        batch.push_back(s.spec->verify_input());
        who.push_back(&s);
        chunk_end.push_back(-1);
        budget -= s.spec->drafted() + 1;
        continue;
      }
      batch.push_back({&*s.state, std::span<const int32_t>(&s.out.back(), 1), {0}});
      who.push_back(&s);
      chunk_end.push_back(-1);
      --budget;
    }
  for (auto& [seq, msg] : failed)
    for (auto& sp : running_)
      if (sp.get() == seq) finish(sp, FinishReason::Error, msg, TokenEvent{});
  if (!failed.empty()) {
    std::erase_if(running_, [](auto& p) { return !p; });
    {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.spec_failed_rounds += static_cast<int64_t>(failed.size());
    }
    if (running_.empty()) return;
  }
  const size_t n_run = running_.size();
  ++rr_;  // rotate which prefill goes first: fair progress between long prefills
  for (size_t k = 0; k < n_run && budget > 0; ++k) {
    Seq& s = *running_[(rr_ + k) % n_run];
    if (s.decoding) continue;
    const int64_t n = static_cast<int64_t>(s.req.prompt.size());
    int64_t end = std::min(n, s.pos + budget);
    while (s.cut_idx < s.cuts.size() && s.cuts[s.cut_idx] <= s.pos) ++s.cut_idx;
    if (s.cut_idx < s.cuts.size() && s.cuts[s.cut_idx] < end) end = s.cuts[s.cut_idx];
    SeqInput in{&*s.state, std::span<const int32_t>(s.req.prompt.data() + s.pos, static_cast<size_t>(end - s.pos)), {}};
    if (end == n) in.logit_rows = {static_cast<int32_t>(end - s.pos - 1)};
    batch.push_back(in);
    who.push_back(&s);
    chunk_end.push_back(end);
    budget -= end - s.pos;
  }

  std::vector<float> logits;
  Status st = Ok{};
  try {
    st = model_.forward(batch, &logits, pool_);
  } catch (const std::exception& e) {
    st = make_error(std::string("forward failed: ") + e.what());
  }
  if (!st.ok()) {
    // A failed step: speculative rows go back to their committed state (finish() aborts
    // their open round); every request in the step fails.
    for (auto& sp : running_)
      if (std::find(who.begin(), who.end(), sp.get()) != who.end())
        finish(sp, FinishReason::Error, st.error_message(), TokenEvent{});
    std::erase_if(running_, [](auto& p) { return !p; });
    return;
  }

  // Apply: snapshots, sampling, events.
  size_t row = 0;
  int64_t prefill_run = 0;
  struct Done {
    Seq* seq;
    FinishReason why;
    TokenEvent ev;
  };
  std::vector<Done> done;
  std::vector<int32_t> idx;  // top_logprobs scratch, reused across the step's rows
  // Log-probabilities of `tok` (and the top alternatives) under logits row lg.
  auto fill_logprobs = [&](const Seq& s, const float* lg, int32_t tok, TokenEvent& ev) {
    if (!s.req.logprobs && s.req.top_logprobs <= 0) return;
    const int32_t nv = opt_.sample_vocab;
    double mx = -INFINITY;
    for (int32_t v = 0; v < nv; ++v) mx = std::max(mx, static_cast<double>(lg[v]));
    double sum = 0;
    for (int32_t v = 0; v < nv; ++v) sum += std::exp(static_cast<double>(lg[v]) - mx);
    const double lse = mx + std::log(sum);
    ev.logprob = static_cast<float>(lg[tok] - lse);
    if (s.req.top_logprobs > 0) {
      idx.resize(static_cast<size_t>(nv));
      for (int32_t v = 0; v < nv; ++v) idx[v] = v;
      const int32_t k = std::min(s.req.top_logprobs, nv);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
      for (int32_t j = 0; j < k; ++j) ev.top.push_back({idx[j], static_cast<float>(lg[idx[j]] - lse)});
    }
  };
  // Emits one sampled token; false when it ends the request (queued in `done`).
  auto emit = [&](Seq& s, const float* lg, int32_t tok) {
    TokenEvent ev;
    ev.id = s.id;
    ev.token = tok;
    fill_logprobs(s, lg, tok, ev);
    s.out.push_back(tok);
    if (s.out.size() == 1) s.usage.ttft_ms = now_ms() - s.t_submit;
    FinishReason why = FinishReason::None;
    if (s.req.stop_ids.count(tok)) why = FinishReason::Stop;
    else if (static_cast<int32_t>(s.out.size()) >= s.req.max_tokens) why = FinishReason::Length;
    if (why == FinishReason::None) {
      if (s.cb) s.cb(ev);
      return true;
    }
    done.push_back({&s, why, std::move(ev)});
    return false;
  };
  const int64_t interval = cache_ && recurrent ? opt_.cache.policy.interval : 0;
  for (size_t i = 0; i < who.size(); ++i) {
    Seq& s = *who[i];
    if (s.decoding && s.spec && s.spec->round_open()) {
      // Close the speculative round: accept, cut, roll back; one event per emitted token.
      const int32_t rows = s.spec->drafted() + 1;
      const float* lg = logits.data() + row * V;
      row += static_cast<size_t>(rows);
      const int32_t last = s.out.back();
      SpecOutcome o;
      try {
        o = s.spec->commit(lg, V, opt_.sample_vocab, *s.sampler, s.req.stop_ids, interval, pool_);
      } catch (const std::exception& e) {
        // commit() aborted the round: the sequence is at its committed state.
        done.push_back({&s, FinishReason::Error, TokenEvent{}});
        done.back().ev.error = std::string("speculative round failed: ") + e.what();
        continue;
      }
      o.append_consumed(last, &s.history);
      for (auto& sn : o.snaps) s.snaps.push_back(std::move(sn));
      for (size_t j = 0; j < o.tokens.size(); ++j)
        if (!emit(s, lg + static_cast<int64_t>(o.rows[j]) * V, o.tokens[j])) break;
      continue;
    }
    const float* lg = nullptr;
    if (!batch[i].logit_rows.empty()) lg = logits.data() + (row++) * V;
    if (!s.decoding) {
      const int64_t end = chunk_end[i];
      s.history.insert(s.history.end(), s.req.prompt.begin() + s.pos, s.req.prompt.begin() + end);
      prefill_run += end - s.pos;
      s.pos = end;
      if (cache_ && recurrent && s.cut_idx < s.cuts.size() && s.cuts[s.cut_idx] == s.pos)
        s.snaps.push_back(s.state->take_snapshot());
      if (!lg) continue;
      s.decoding = true;
    } else {
      s.history.push_back(s.out.back());
      if (interval > 0 && s.state->n_pos() % interval == 0)
        s.snaps.push_back(s.state->take_snapshot());
    }
    emit(s, lg, s.sampler->sample(lg, opt_.sample_vocab));
  }
  for (auto& d : done)
    for (auto& sp : running_)
      if (sp.get() == d.seq) {
        std::string err = std::move(d.ev.error);
        finish(sp, d.why, std::move(err), std::move(d.ev));
      }
  std::erase_if(running_, [](auto& p) { return !p; });

  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.steps;
  metrics_.prefill_tokens_run += prefill_run;
  metrics_.running = static_cast<int32_t>(running_.size());
  if (cache_) metrics_.cache = cache_->stats();
}

}  // namespace rw
