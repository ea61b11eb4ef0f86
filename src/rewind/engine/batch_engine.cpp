#include "rewind/engine/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "rewind/base/thread_pool.h"
#include "rewind/engine/constrained.h"
#include "rewind/engine/step_plan.h"
#include "rewind/sample/logit_adjust.h"
#include "rewind/state/buffer_pool.h"

namespace rw {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
constexpr size_t kRecentMax = 32;
constexpr int64_t kAdjusterEntryBytes = 64;  // one count of LogitAdjuster's maps, with overhead
constexpr size_t kLatencySamples = 4096;
constexpr int kPoolIdleMs = 1000;  // idle this long, the engine frees the pooled state buffers
}  // namespace

std::vector<int64_t> cap_cuts(std::vector<int64_t> cuts, int64_t anchor, int64_t max_per_branch) {
  if (max_per_branch <= 0) return cuts;
  const size_t cap = static_cast<size_t>(std::max<int64_t>(max_per_branch, 2));
  if (cuts.size() <= cap) return cuts;
  const bool has_anchor = std::binary_search(cuts.begin(), cuts.end(), anchor);
  std::vector<int64_t> out;
  // The newest cap (or cap - 1 next to the anchor) positions, the prompt end among them.
  const size_t keep = cap - (has_anchor && anchor < cuts[cuts.size() - cap] ? 1 : 0);
  if (keep < cap) out.push_back(anchor);
  out.insert(out.end(), cuts.end() - static_cast<std::ptrdiff_t>(keep), cuts.end());
  return out;
}

namespace {
// The checkpoint grid the engine runs: widened for a large recurrent state when size_by_state
// asks (CheckpointPolicy::size_grid), which is then done.
CheckpointPolicy sized_policy(const Model& model, CheckpointPolicy pol) {
  const StateShape sh = model.state_shape();
  const size_t snap = static_cast<size_t>(sh.rec_floats()) * sizeof(float);
  const size_t kv_tok = static_cast<size_t>(sh.kv_bytes_per_token());
  if (pol.interval > 0 && pol.size_by_state)
    pol.interval = CheckpointPolicy::size_grid(pol.interval, snap, kv_tok, &pol.grid_note);
  else if (pol.grid_note.empty())
    pol.grid_note = pol.interval > 0 ? "interval " + std::to_string(pol.interval) + " as set"
                                     : "no grid (interval 0): boundaries and prompt ends only";
  pol.size_by_state = false;
  return pol;
}
}  // namespace

MemoryReport engine_memory_bound(const Model& model, const EngineOptions& opt, int threads) {
  const StateShape sh = model.state_shape();
  const int64_t V = model.config().vocab_size;
  const int64_t ctx = opt.ctx_size;
  const int64_t k1 = SpecConfig::kMaxDraft + 1;  // rows of a speculative round at most
  const int64_t page_bytes = sh.page_bytes();    // in the model's KV types
  const int64_t rec_bytes = sh.rec_floats() * 4;
  // One running sequence: its pages up to ctx_size (drafts may write k past it; one more page
  // for a copy on write), its state and a speculative pre-round copy, the capture rows of a
  // round, its own prefill snapshots (capped, cap_cuts) plus those the cache's lease pins on
  // its path (pinned ones may hold the cache over budget), grid checkpoints crossed while
  // decoding and the one at the end of the reply, its token vectors (prompt, history, reply, the
  // request's copy), its logit adjuster's tokens and two count maps (at most one entry per
  // token, some 64 bytes each with the hash table's node and bucket) and first logits.
  const int64_t pages = (ctx + k1 + sh.page_tokens - 1) / sh.page_tokens + 1;
  const int64_t interval = sized_policy(model, opt.cache.policy).interval;  // as the engine runs
  const int64_t cap = opt.cache.policy.max_per_branch > 0
                          ? std::max<int64_t>(opt.cache.policy.max_per_branch, 2)
                          : ctx;
  const int64_t snaps = rec_bytes > 0 && opt.cache_enabled
                            ? 2 * cap + (interval > 0 ? ctx / interval + 1 : 0) + 1
                            : 0;
  const int64_t slot = pages * page_bytes + 2 * rec_bytes + snaps * rec_bytes +
                       k1 * model.capture_row_floats() * 4 + 4 * ctx * 4 +
                       ctx * (4 + 2 * kAdjusterEntryBytes) + V * 4;
  // The largest step: step_tokens of prefill next to every sequence's decode rows.
  const int64_t rows = opt.step_tokens + static_cast<int64_t>(opt.max_running) * k1;
  const int64_t logit_rows = static_cast<int64_t>(opt.max_running) * k1;
  MemoryReport b;
  b.add("weights", static_cast<int64_t>(model.packed_bytes()));
  b.add("weights_mapped", static_cast<int64_t>(model.mapped_bytes()));
  b.add("cache", opt.cache_enabled ? static_cast<int64_t>(opt.cache.budget_bytes) : 0);
  b.add("slots", static_cast<int64_t>(opt.max_running) * slot);
  b.add("activations", static_cast<int64_t>(model.scratch_bytes_bound(rows, ctx + k1, threads)) +
                           logit_rows * V * 4);
  return b;
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None:
      return "";
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "";
}

struct BatchEngine::Seq {
  uint64_t id = 0;
  int32_t choice = 0;  // Request::n: this sequence's choice (id = the request's id + choice)
  Request req;
  EventCallback cb;
  double t_submit = 0, t_start = 0;
  std::optional<SequenceState> state;
  std::optional<LookupResult> hit;  // holds the cache lease while running
  int64_t pos = 0;                  // next prompt position to run (prefill) == state n_pos
  std::vector<int64_t> cuts;        // checkpoint positions of the prefill, ascending
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  std::vector<int32_t> history;  // tokens consumed by the state
  std::optional<Sampler> sampler;
  std::optional<LogitAdjuster> adjust;  // penalties and bias: follows `out` exactly
  std::set<int32_t> cancelled_choices;  // choice 0 before the fork: choices already cancelled
  std::vector<int32_t> out;
  bool decoding = false;
  RequestReport report;
  SpecConfig spec_cfg;                    // resolved at submit (kind Off: plain decoding)
  std::optional<SpecSequence> spec;       // from the first decode step on
  std::vector<float> first_logits;        // when the request asks for them
  std::optional<GrammarMatcher> grammar;  // constrained decoding: the reply's grammar position
  // Set while a step is applied when the request ends there; finished after the step.
  FinishReason end = FinishReason::None;
  TokenEvent end_ev;

  // Running sequences this one stands for: choice 0 holds the slots of its choices until it
  // forks them at the end of the prompt.
  int32_t slots() const { return choice == 0 && !decoding ? req.n : 1; }
  bool forks_pending() const { return choice == 0 && !decoding && req.n > 1; }

  void snapshot() {  // every checkpoint taken for this request is counted and timed
    const double t = now_ms();
    snaps.push_back(state->take_snapshot());
    report.snapshot_ms += now_ms() - t;
    ++report.snapshots_taken;
  }
};

Result<SpecConfig> resolve_spec(const Model& model, const SpecConfig& engine_default,
                                const Request& req) {
  SpecConfig c = req.spec ? *req.spec : engine_default;
  if (req.spec_kind) c.kind = *req.spec_kind;
  if (req.spec_k != 0) c.k = req.spec_k;
  if (c.kind == SpecKind::Draft && !c.draft)
    return make_error(
        "speculative: this model is served without a draft model (--spec draft:DIR; with "
        "several models, --model-opt NAME:spec=draft:DIR gives one its own)");
  if (c.kind == SpecKind::Mtp && !model.mtp_loaded() && model.weights().has_mtp())
    return make_error(
        "speculative: this model is served without its MTP head (--spec mtp loads it; with "
        "several models, --model-opt NAME:spec=mtp)");
  REWIND_TRY_STATUS(spec_check(model, c));
  return c;
}

BatchEngine::BatchEngine(Model& model, ThreadPool* pool, const EngineOptions& opt,
                         EngineThread threading)
    : model_(model), pool_(pool), opt_(opt), step_budget_(opt.step_target) {
  REWIND_CHECK(opt_.max_running >= 1 && opt_.step_tokens >= 1 && opt_.mixed_step_tokens >= 0 &&
               opt_.max_queued >= 0);
  REWIND_CHECK_MSG(spec_check(model, opt_.spec).ok(),
                   "BatchEngine: speculative options not checked");
  if (opt_.sample_vocab <= 0 || opt_.sample_vocab > model.config().vocab_size)
    opt_.sample_vocab = static_cast<int32_t>(model.config().vocab_size);
  recurrent_ = model.config().n_recurrent_layers() > 0;
  opt_.cache.has_recurrent = recurrent_;
  opt_.cache.shape = model.state_shape();
  opt_.cache.has_attention = model.config().n_attention_layers() > 0;
  opt_.cache.page_tokens = model.state_shape().page_tokens;
  opt_.cache.kv_types = model.state_shape().kv_types;
  opt_.cache.page_bytes = static_cast<size_t>(model.state_shape().page_bytes());
  opt_.cache.policy = sized_policy(model, opt_.cache.policy);
  if (opt_.cache_enabled) cache_ = std::make_unique<PrefixCache>(opt_.cache);
  {
    // Freed states, snapshots and pages are kept for the next request within what the memory
    // bound already grants them (StateBufferPool), not unmapped and faulted in afresh.
    const MemoryReport b = engine_memory_bound(model_, opt_, pool_ ? pool_->n_threads() : 1);
    pool_capacity_ = b.get("cache") + b.get("slots");
    StateBufferPool::add_capacity(pool_capacity_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    update_memory();
  }
  own_thread_ = threading == EngineThread::Own;
  if (own_thread_) thread_ = std::thread([this] { loop(); });
}

BatchEngine::~BatchEngine() {
  shutdown(false);
  StateBufferPool::add_capacity(-pool_capacity_);  // before the cache's snapshots are freed
}

Result<uint64_t> BatchEngine::submit(Request req, EventCallback cb) {
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  const int64_t V = model_.config().vocab_size;
  auto reject = [&](std::string msg) -> Result<uint64_t> {
    std::lock_guard<std::mutex> lock(mu_);
    ++metrics_.requests_rejected;
    return make_error(std::move(msg));
  };
  if (n == 0) return reject("empty prompt");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= V)
      return reject("token id " + std::to_string(t) + " out of range [0, " + std::to_string(V) +
                    ")");
  if (req.max_tokens < 1) return reject("max_tokens must be >= 1");
  if (n + req.max_tokens > opt_.ctx_size)
    return reject("prompt too long: " + std::to_string(n) + " prompt tokens + max_tokens " +
                  std::to_string(req.max_tokens) + " exceed the context size " +
                  std::to_string(opt_.ctx_size));
  if (req.top_logprobs < 0 || req.top_logprobs > 20)
    return reject("top_logprobs must be in [0, 20]");
  if (req.n < 1 || req.n > Request::kMaxChoices)
    return reject("n must be in [1, " + std::to_string(Request::kMaxChoices) + "]");
  if (req.n > opt_.max_running)
    return reject("n = " + std::to_string(req.n) + " needs " + std::to_string(req.n) +
                  " sequences at once; this engine runs " + std::to_string(opt_.max_running) +
                  " (--parallel)");
  if (Status as = check_logit_adjustments(req.sampling, V); !as.ok())
    return reject(as.error_message());
  for (int64_t b : req.boundaries)
    if (b < 0) return reject("negative checkpoint boundary");
  if (req.grammar) {
    const VocabTrie& gv = req.grammar->vocab();
    if (gv.n_vocab() > V)
      return reject("grammar: its vocabulary (" + std::to_string(gv.n_vocab()) +
                    " ids) is larger than the model's (" + std::to_string(V) + ")");
    if (gv.eos_ids().empty()) return reject("grammar: its vocabulary has no end-of-sequence id");
    // The grammar ends the reply with one of its end-of-sequence ids, whatever else stops it.
    req.stop_ids.insert(gv.eos_ids().begin(), gv.eos_ids().end());
  }
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
    // Waiting: the queued requests that the free slots cannot take at the next step (admission
    // goes in order of arrival); this one is refused when it would wait beyond max_queued.
    int32_t free = opt_.max_running - slots_used_;
    size_t fit = 0;
    while (fit < queue_.size() && queue_[fit]->req.n <= free) free -= queue_[fit++]->req.n;
    const auto waiting = static_cast<int32_t>(queue_.size() - fit);
    if ((waiting > 0 || s->req.n > free) && waiting >= opt_.max_queued) {
      ++metrics_.requests_rejected;
      return make_error("queue full");
    }
    id = next_id_;
    next_id_ += static_cast<uint64_t>(s->req.n);  // choice i is id + i
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
  EngineMetrics m = metrics_;
  // Pages and snapshots count themselves (atomics): the figures of this moment.
  for (auto& [kind, bytes] : m.memory.kinds) {
    if (kind == "kv_pages") bytes = KvPage::live_bytes();
    if (kind == "snapshots") bytes = Snapshot::live_bytes();
    if (kind == "state_pool") bytes = StateBufferPool::pooled_bytes();
  }
  // The tier's writer works between steps too (thread-safe).
  if (opt_.cache_enabled && opt_.cache.tier) m.cache.tiers = opt_.cache.tier->all_stats();
  return m;
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
  if (thread_.joinable())
    thread_.join();
  else
    run_until_idle();  // EngineThread::Caller: drain or cancel what is still here
}

void BatchEngine::loop() {
  for (;;) {
    maybe_release_memory();
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto work = [&] {
        return stopping_ || !queue_.empty() || !running_.empty() || !engine_asks_.empty();
      };
      // Idle with freed state buffers kept for reuse: they wait a while for the next request
      // (a client's next one comes within milliseconds), then go back to the system.
      if (!work() && StateBufferPool::pooled_bytes() > 0 &&
          !cv_.wait_for(lock, std::chrono::milliseconds(kPoolIdleMs), work)) {
        lock.unlock();
        StateBufferPool::clear();
        release_free_memory();
        lock.lock();
      }
      cv_.wait(lock, work);
      if (!engine_asks_.empty()) {
        lock.unlock();
        answer_engine_asks();
        lock.lock();
        if (!stopping_ && queue_.empty() && running_.empty()) continue;
      }
      if (stopping_ && (!drain_ || (queue_.empty() && running_.empty()))) {
        if (queue_.empty() && running_.empty()) break;
        // Not draining: cancel everything still here.
        for (auto& s : queue_) cancelled_.insert(s->id);
        for (auto& s : running_) cancelled_.insert(s->id);
      }
    }
    step();
  }
  // Asks queued until now are answered here; later ones on their caller's thread (nothing
  // changes the cache any more).
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_done_ = true;
  }
  answer_engine_asks();
}

void BatchEngine::answer_engine_asks() {
  std::vector<std::function<void()>> asks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    asks.swap(engine_asks_);
  }
  for (auto& ask : asks) ask();
}

CacheTreeReport BatchEngine::tree_report(int64_t max_nodes) const {
  CacheTreeReport r;
  if (!cache_) return r;
  r.enabled = true;
  r.stats = cache_->stats();
  r.tree = cache_->dump(std::max<int64_t>(max_nodes, 1), last_history_);
  r.last_id = last_id_;
  r.last_prompt_tokens = last_report_.prompt_tokens;
  r.last_diverged_at = last_report_.diverged_at;
  r.last_resumed_at = last_report_.resumed_at;
  r.last_history_tokens = static_cast<int64_t>(last_history_.size());
  return r;
}

void BatchEngine::on_engine_thread(std::function<void()> ask) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (own_thread_ && !loop_done_) {
      engine_asks_.push_back(std::move(ask));
      cv_.notify_all();
      return;
    }
  }
  // No engine thread runs steps now (Caller, or stopped): this thread may use the cache.
  ask();
}

void BatchEngine::cache_tree(int64_t max_nodes, std::function<void(CacheTreeReport)> done) {
  on_engine_thread([this, max_nodes, done = std::move(done)] { done(tree_report(max_nodes)); });
}

void BatchEngine::clear_cache(std::function<void(CacheStats)> done) {
  on_engine_thread([this, done = std::move(done)] {
    if (!cache_) return done(CacheStats{});
    CacheStats before = cache_->stats();
    cache_->clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.cache = cache_->stats();
    }
    done(std::move(before));
  });
}

void BatchEngine::maybe_release_memory() {
  if (trimmed_ || !running_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty()) return;
  }
  // Idle: hand what the finished requests freed back to the system, once per busy period
  // (the state buffers kept for reuse a little later, loop()).
  release_free_memory();
  trimmed_ = true;
}

void BatchEngine::run_until_idle(const std::atomic<bool>* stop) {
  REWIND_CHECK_MSG(!thread_.joinable(), "run_until_idle: the engine runs its own thread");
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty() && running_.empty()) return;
      if ((stopping_ && !drain_) || (stop && stop->load(std::memory_order_relaxed))) {
        for (auto& s : queue_) cancelled_.insert(s->id);
        for (auto& s : running_) cancelled_.insert(s->id);
      }
    }
    step();
  }
}

void BatchEngine::admit(Seq& s) {
  s.t_start = now_ms();
  const int64_t n = static_cast<int64_t>(s.req.prompt.size());
  s.report.prompt_tokens = n;
  s.report.queue_ms = s.t_start - s.t_submit;
  s.state.emplace(model_.new_state());
  if (cache_) {
    s.hit.emplace(cache_->lookup(s.req.prompt));
    s.state->resume(s.hit->pages, s.hit->snapshot.get(), s.hit->resume_pos);
    s.report.diverged_at = s.hit->common_prefix;
    s.report.hit = s.hit->kind;
    s.report.tier_tokens = s.hit->tier_tokens;
    s.cuts = opt_.cache.policy.cut_points(s.state->n_pos(), n, s.req.boundaries);
    s.cuts = cap_cuts(std::move(s.cuts), s.req.anchor, opt_.cache.policy.max_per_branch);
  }
  s.pos = s.state->n_pos();
  s.report.resumed_at = s.pos;
  s.report.rerun_tokens = n - s.pos;
  s.report.lost_to_spacing = std::min(s.report.diverged_at, n - 1) - s.pos;
  s.history.assign(s.req.prompt.begin(), s.req.prompt.begin() + s.pos);
  s.sampler.emplace(s.req.sampling);
  s.adjust.emplace(s.req.sampling, s.req.prompt);
  if (s.req.grammar) s.grammar.emplace(s.req.grammar);
}

std::unique_ptr<BatchEngine::Seq> BatchEngine::fork(const Seq& s, int32_t choice) {
  // Choice `choice` of s's request, at the end of the prompt s has just consumed: the state is
  // cloned (KV pages shared, recurrent bytes copied), so nothing of the prompt runs again.
  auto f = std::make_unique<Seq>();
  f->id = s.id + static_cast<uint64_t>(choice);
  f->choice = choice;
  f->req = s.req;
  f->req.sampling.seed = s.req.sampling.seed + static_cast<uint64_t>(choice);
  f->cb = s.cb;
  f->t_submit = s.t_submit;
  f->t_start = s.t_start;
  f->state.emplace(s.state->clone());
  f->pos = s.pos;
  f->snaps = s.snaps;  // shared: published again by each choice (the cache keeps one)
  f->history = s.history;
  f->sampler.emplace(f->req.sampling);
  f->adjust = s.adjust;    // before s's first token: the prompt's window only
  f->grammar = s.grammar;  // likewise: no token accepted yet
  f->decoding = true;
  f->spec_cfg = s.spec_cfg;
  f->report = s.report;
  f->report.resumed_at = static_cast<int64_t>(s.req.prompt.size());
  f->report.rerun_tokens = 0;
  f->report.lost_to_spacing = 0;
  f->report.snapshots_taken = 0;
  f->report.snapshot_ms = 0;
  f->report.forked = true;
  return f;
}

void BatchEngine::end_unstarted(const Seq& s, int32_t choice, FinishReason why,
                                const std::string& err) {
  TokenEvent ev;
  ev.id = s.id + static_cast<uint64_t>(choice);
  ev.choice = choice;
  ev.finish = why;
  ev.error = err;
  ev.report.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
  ev.report.forked = true;
  if (s.cb) s.cb(ev);
}

void BatchEngine::finish(std::unique_ptr<Seq>& sp, FinishReason why, std::string err,
                         TokenEvent ev) {
  Seq& s = *sp;
  if (s.spec) {
    s.spec->abort();  // no-op unless a round is open (a failed step)
    s.report.spec = s.spec->stats();
  }
  // Publish the consumed history with its pages and snapshots, the end of the reply being a
  // checkpoint too (a follow-up turn extends through it). A failed request publishes nothing.
  if (why != FinishReason::Error && cache_ && s.state && s.state->n_pos() > 0) {
    if (recurrent_ && s.decoding && (s.snaps.empty() || s.snaps.back()->pos != s.state->n_pos()))
      s.snapshot();
    if (s.req.publish) {
      const int64_t n = static_cast<int64_t>(s.req.prompt.size());
      const int64_t reply_end = s.decoding ? s.state->n_pos() : -1;
      std::vector<uint8_t> kinds;
      kinds.reserve(s.snaps.size());
      for (const auto& sn : s.snaps)
        kinds.push_back(
            opt_.cache.policy.kinds_at(sn->pos, n, s.req.boundaries, s.req.anchor, reply_end));
      cache_->insert(s.history, s.state->pages(), s.snaps, s.req.anchor, kinds);
      last_history_ = s.history;
      last_report_ = s.report;
      last_id_ = s.id - static_cast<uint64_t>(s.choice);  // the request's id, as clients know it
    }
  }
  s.hit.reset();  // releases the lease at once
  // Choices not forked yet end with choice 0 (cancelled with it, or failed with it).
  if (s.forks_pending())
    for (int32_t c = 1; c < s.req.n; ++c)
      end_unstarted(s, c,
                    why == FinishReason::Error ? FinishReason::Error : FinishReason::Cancelled,
                    why == FinishReason::Error ? err : std::string());
  s.report.completion_tokens = static_cast<int64_t>(s.out.size());
  s.report.total_ms = now_ms() - s.t_submit;
  ev.id = s.id;
  ev.choice = s.choice;
  ev.finish = why;
  ev.error = std::move(err);
  ev.report = s.report;
  if (s.req.keep_first_logits) ev.first_logits = std::move(s.first_logits);
  if (s.req.keep_state && s.state) ev.state = std::make_shared<SequenceState>(std::move(*s.state));
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.spec.add(s.report.spec);
    metrics_.generated_tokens += s.report.completion_tokens;
  }
  // A request counts once, by its choice 0 (the one that ran the prompt); its other choices
  // add their tokens and speculation only.
  if (s.choice == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (why == FinishReason::Cancelled)
      ++metrics_.requests_cancelled;
    else if (why == FinishReason::Error)
      ++metrics_.requests_failed;
    else
      ++metrics_.requests_finished;
    metrics_.prompt_tokens += s.report.prompt_tokens;
    auto push = [](std::vector<double>& v, double x) {
      if (v.size() >= kLatencySamples) v.erase(v.begin());
      v.push_back(x);
    };
    if (s.report.ttft_ms > 0) push(metrics_.ttft_ms, s.report.ttft_ms);
    push(metrics_.request_ms, s.report.total_ms);
    const RequestReport& r = s.report;
    metrics_.recent.push_back({s.id, r.prompt_tokens, r.diverged_at, r.resumed_at, r.rerun_tokens,
                               r.lost_to_spacing, hit_kind_name(r.hit)});
    if (metrics_.recent.size() > kRecentMax) metrics_.recent.pop_front();
  }
  {  // its slots are free before its client hears of the end (and may send the next request)
    std::lock_guard<std::mutex> lock(mu_);
    slots_used_ = std::max(0, slots_used_ - s.slots());
  }
  if (s.cb) s.cb(ev);
  sp.reset();
}

void BatchEngine::finish_marked() {
  for (auto& sp : running_)
    if (sp && sp->end != FinishReason::None) {
      TokenEvent ev = std::move(sp->end_ev);
      std::string err = std::move(ev.error);
      finish(sp, sp->end, std::move(err), std::move(ev));
    }
  std::erase_if(running_, [](auto& p) { return !p; });
}

SpecSequence& BatchEngine::spec_of(Seq& s) {
  if (!s.spec) {
    s.spec.emplace(model_, s.spec_cfg);
    if (s.grammar) s.spec->set_grammar(&*s.grammar);
  }
  return *s.spec;
}

void BatchEngine::open_spec_rounds() {
  int64_t failed = 0;
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (!s.decoding || s.spec_cfg.kind == SpecKind::Off) continue;
    // A speculative round: [last, d1..dk] verified in this step's forward.
    spec_of(s);
    const int32_t left = s.req.max_tokens - static_cast<int32_t>(s.out.size());
    Status bs = Ok{};
    try {
      bs = s.spec->begin(&*s.state, s.history, s.out.back(), left, *s.sampler, pool_);
    } catch (const std::exception& e) {
      bs = make_error(std::string("speculative drafting failed: ") + e.what());
    }
    if (!bs.ok()) {
      s.end = FinishReason::Error;
      s.end_ev.error = bs.error_message();
      ++failed;
    }
  }
  if (failed == 0) return;
  finish_marked();
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.spec_failed_rounds += failed;
}

void BatchEngine::step() {
  // The step's wall time for StepBudget: admission, drafting, the forward and what follows,
  // everything the decode rows wait for between two tokens.
  const double step_start = now_ms();
  const int64_t V = model_.config().vocab_size;
  std::set<uint64_t> cancelled;
  std::vector<std::unique_ptr<Seq>> admitted;
  std::vector<std::pair<EventCallback, TokenEvent>> queue_cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled.swap(cancelled_);
    // Cancelled requests still waiting never start.
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (cancelled.count((*it)->id)) {
        for (int32_t c = 0; c < (*it)->req.n; ++c) {  // every choice of the request
          TokenEvent ev;
          ev.id = (*it)->id + static_cast<uint64_t>(c);
          ev.choice = c;
          ev.finish = FinishReason::Cancelled;
          ev.report.prompt_tokens = static_cast<int64_t>((*it)->req.prompt.size());
          queue_cancels.emplace_back((*it)->cb, ev);
        }
        ++metrics_.requests_cancelled;
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    // A request takes a slot per choice (Request::n), in order of arrival.
    int32_t used = 0;
    for (const auto& sp : running_) used += sp->slots();
    while (!queue_.empty() && used + queue_.front()->req.n <= opt_.max_running) {
      used += queue_.front()->req.n;
      admitted.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    slots_used_ = used;
    metrics_.queued = static_cast<int32_t>(queue_.size());
  }
  for (auto& [cb, ev] : queue_cancels)
    if (cb) cb(ev);
  for (auto& s : admitted) {
    admit(*s);
    running_.push_back(std::move(s));
  }
  for (auto& sp : running_) {
    if (cancelled.count(sp->id)) {
      finish(sp, FinishReason::Cancelled, "", TokenEvent{});
      continue;
    }
    if (sp->forks_pending())  // choices cancelled before they exist end at the fork
      for (int32_t c = 1; c < sp->req.n; ++c)
        if (cancelled.count(sp->id + static_cast<uint64_t>(c))) sp->cancelled_choices.insert(c);
  }
  std::erase_if(running_, [](auto& p) { return !p; });
  open_spec_rounds();
  if (running_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.running = 0;
    slots_used_ = 0;
    if (cache_) metrics_.cache = cache_->stats();
    update_memory();
    return;
  }

  // Plan: decode rows first, then prefill chunks round-robin (the first one rotates each step,
  // for fair progress between long prefills), cut at checkpoint positions.
  std::vector<PlanSeq> view(running_.size());
  for (size_t i = 0; i < running_.size(); ++i) {
    const Seq& s = *running_[i];
    view[i].decoding = s.decoding;
    view[i].decode_tokens = s.spec && s.spec->round_open() ? s.spec->drafted() + 1 : 1;
    view[i].pos = s.pos;
    view[i].prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
    view[i].cuts = s.cuts;
  }
  int64_t mixed_tokens = opt_.mixed_step_tokens > 0 ? opt_.mixed_step_tokens : opt_.step_tokens;
  int64_t mixed_prefill = 0;  // the adaptive budget this step took (0: none)
  {
    int64_t decode_tokens = 0;
    bool prefilling = false;
    for (const PlanSeq& v : view) {
      if (v.decoding) decode_tokens += v.decode_tokens;
      prefilling |= !v.decoding && v.pos < v.prompt_tokens;
    }
    if (decode_tokens > 0 && prefilling)
      if (const auto p = step_budget_.prefill_tokens(decode_tokens)) {
        mixed_prefill = *p;
        mixed_tokens = std::min(mixed_tokens, decode_tokens + *p);
      }
  }
  const StepPlan plan = plan_step(view, opt_.step_tokens, ++rr_, mixed_tokens);
  std::vector<SeqInput> batch;
  batch.reserve(plan.rows.size());
  for (const PlannedRow& r : plan.rows) {
    Seq& s = *running_[r.seq];
    if (r.decode && s.spec && s.spec->round_open()) {
      batch.push_back(s.spec->verify_input());
    } else if (r.decode) {
      batch.push_back({&*s.state, std::span<const int32_t>(&s.out.back(), 1), {0}});
    } else {
      SeqInput in{&*s.state,
                  std::span<const int32_t>(s.req.prompt.data() + r.begin,
                                           static_cast<size_t>(r.end - r.begin)),
                  {}};
      if (r.logits) in.logit_rows = {static_cast<int32_t>(r.end - r.begin - 1)};
      batch.push_back(in);
    }
  }

  std::vector<float>& logits = logits_;
  trimmed_ = false;
  Status st = Ok{};
  try {
    st = model_.forward(batch, &logits, pool_);
  } catch (const std::exception& e) {
    st = make_error(std::string("forward failed: ") + e.what());
  }
  if (!st.ok()) {
    // A failed step: every request in it fails; speculative rows go back to their committed
    // state (finish() aborts their open round).
    for (const PlannedRow& r : plan.rows) {
      running_[r.seq]->end = FinishReason::Error;
      running_[r.seq]->end_ev.error = st.error_message();
    }
    finish_marked();
    return;
  }

  prefetch_masks(plan);
  greedy_argmax(plan);

  // Apply: snapshots, sampling, events.
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
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
      });
      // Tokens a grammar refuses (-inf) are no alternatives.
      for (int32_t j = 0; j < k && lg[idx[j]] > -INFINITY; ++j)
        ev.top.push_back({idx[j], static_cast<float>(lg[idx[j]] - lse)});
    }
  };
  // At the prompt's end a draft model catches up on it, so that its cost falls in the time to
  // the first token, not between the first tokens (a failure here resurfaces, reported, in the
  // first round's own catch-up).
  auto warm_draft = [&](Seq& s) {
    if (s.spec_cfg.kind != SpecKind::Draft) return;
    try {
      (void)spec_of(s).warm(s.history, pool_);
    } catch (const std::exception&) {
    }
  };
  // Emits one sampled token; false when it ends the request (marked, finished after the step).
  auto emit = [&](Seq& s, const float* lg, int32_t tok) {
    TokenEvent ev;
    ev.id = s.id;
    ev.choice = s.choice;
    ev.token = tok;
    fill_logprobs(s, lg, tok, ev);
    if (s.out.empty()) {
      s.report.ttft_ms = now_ms() - s.t_submit;
      if (s.req.keep_first_logits) s.first_logits.assign(lg, lg + V);
    }
    s.out.push_back(tok);
    s.adjust->push(tok);
    FinishReason why = FinishReason::None;
    if (s.req.stop_ids.count(tok))
      why = FinishReason::Stop;
    else if (static_cast<int32_t>(s.out.size()) >= s.req.max_tokens)
      why = FinishReason::Length;
    if (why == FinishReason::None) {
      if (s.cb) s.cb(ev);
      return true;
    }
    s.end = why;
    s.end_ev = std::move(ev);
    return false;
  };
  const int64_t interval = cache_ && recurrent_ ? opt_.cache.policy.interval : 0;
  std::vector<std::unique_ptr<Seq>> forked;  // choices forked in this step (Request::n)
  // The token of a plain (not speculative) row of q, its logits adjusted; under a grammar the
  // row is masked (in place, when needed) and the matcher advanced. -1 ends q with an error.
  const auto pick = [&](Seq& q, float* row_lg) -> int32_t {
    if (!q.grammar) {
      // A greedy row's argmax (the sampler's own answer), when greedy_argmax took it.
      const int32_t hint = q.sampler->greedy() ? argmax_hint(row_lg) : -1;
      return hint >= 0 ? hint : q.sampler->sample(row_lg, opt_.sample_vocab);
    }
    Status gs = Ok{};
    int32_t tok = -1;
    if (lazy_sampling(q)) {
      // Temperature alone: a draw from the whole row kept when allowed, else a draw from
      // the masked row, is a draw from the masked distribution (p(t) + (1 - p(A)) p(t) / p(A)
      // = p(t) / p(A) for t in the allowed set A), so the mask is needed only on refusal.
      tok = q.sampler->sample(row_lg, opt_.sample_vocab);
      auto next = q.grammar->automaton().step_token(q.grammar->state(), tok);
      if (!next.ok())
        gs = next.error();
      else if (next.value() == GrammarAutomaton::kDead)
        tok = -1;
      else if (reports_logprobs(q))  // the token stands; its log-probabilities are the mask's
        gs = constrain_logits(q.grammar->automaton(), q.grammar->state(), row_lg, opt_.sample_vocab,
                              false, nullptr, pool_, -1);
    }
    if (gs.ok() && tok < 0) {
      gs = constrain_logits(q.grammar->automaton(), q.grammar->state(), row_lg, opt_.sample_vocab,
                            lazy_grammar(q), nullptr, pool_, argmax_hint(row_lg));
      if (gs.ok()) tok = q.sampler->sample(row_lg, opt_.sample_vocab);
    }
    if (gs.ok()) gs = q.grammar->accept(tok);
    if (!gs.ok()) {
      q.end = FinishReason::Error;
      q.end_ev.error = gs.error_message();
      return -1;
    }
    return tok;
  };
  std::vector<float> choice_row;  // a forked choice's own copy of a constrained row
  size_t row = 0;                 // logits row
  for (const PlannedRow& r : plan.rows) {
    Seq& s = *running_[r.seq];
    if (r.decode && s.spec && s.spec->round_open()) {
      // Close the speculative round: accept, cut, roll back; one event per emitted token. The
      // rows are adjusted first (row i after drafts 1..i), so acceptance runs on the target
      // distribution the request asked for.
      float* lg = logits.data() + row * V;
      row += static_cast<size_t>(s.spec->drafted() + 1);
      s.adjust->adjust_rows(lg, V, s.spec->drafts(), opt_.sample_vocab);
      const int32_t last = s.out.back();
      // Under a grammar the matcher follows the drafts and row i is constrained in the state
      // after the first i of them; what the verification rejects is rolled back below.
      size_t g_adv = 0;
      if (s.grammar) {
        Status gs = constrain_spec_rows(s, lg, &g_adv);
        if (!gs.ok()) {
          s.grammar->rollback(g_adv);
          s.spec->abort();
          s.end = FinishReason::Error;
          s.end_ev.error = gs.error_message();
          continue;
        }
      }
      SpecOutcome o;
      try {
        o = s.spec->commit(lg, V, opt_.sample_vocab, *s.sampler, s.req.stop_ids, interval, pool_);
      } catch (const std::exception& e) {
        // commit() aborted the round: the sequence is at its committed state.
        if (s.grammar) s.grammar->rollback(g_adv);
        s.end = FinishReason::Error;
        s.end_ev.error = std::string("speculative round failed: ") + e.what();
        continue;
      }
      if (s.grammar) {
        // Keep the accepted drafts, then take the token chosen after them.
        REWIND_CHECK(static_cast<size_t>(o.accepted) <= g_adv);
        s.grammar->rollback(g_adv - static_cast<size_t>(o.accepted));
        if (o.tokens.size() > static_cast<size_t>(o.accepted)) {
          Status as = s.grammar->accept(o.tokens.back());
          if (!as.ok()) {
            s.end = FinishReason::Error;
            s.end_ev.error = as.error_message();
            continue;
          }
        }
      }
      o.append_consumed(last, &s.history);
      for (auto& sn : o.snaps) {
        s.snaps.push_back(std::move(sn));
        ++s.report.snapshots_taken;
      }
      for (size_t j = 0; j < o.tokens.size(); ++j)
        if (!emit(s, lg + static_cast<int64_t>(o.rows[j]) * V, o.tokens[j])) break;
      continue;
    }
    float* lg = r.logits ? logits.data() + (row++) * V : nullptr;
    if (!r.decode) {
      s.history.insert(s.history.end(), s.req.prompt.begin() + r.begin,
                       s.req.prompt.begin() + r.end);
      s.pos = r.end;
      if (s.req.on_prefill) s.req.on_prefill(s.pos, static_cast<int64_t>(s.req.prompt.size()));
      if (cache_ && recurrent_ && r.checkpoint) s.snapshot();
      if (!lg) continue;
      if (s.forks_pending()) {
        // The prompt's end: the other choices fork from here and draw their first token from
        // the same row, each with its own seed.
        s.adjust->apply(lg, opt_.sample_vocab);
        for (int32_t c = 1; c < s.req.n; ++c) {
          if (s.cancelled_choices.count(c)) {
            end_unstarted(s, c, FinishReason::Cancelled, "");
            continue;
          }
          forked.push_back(fork(s, c));
          Seq& f = *forked.back();
          // A grammar may mask the row in place: each choice picks from its own copy.
          float* own = lg;
          if (f.grammar) {
            choice_row.assign(lg, lg + V);
            own = choice_row.data();
          }
          warm_draft(f);
          const int32_t tok = pick(f, own);
          if (tok >= 0) emit(f, own, tok);
        }
        s.decoding = true;
        warm_draft(s);
        const int32_t tok = pick(s, lg);
        if (tok >= 0) emit(s, lg, tok);
        continue;
      }
      s.decoding = true;
      warm_draft(s);
    } else {
      s.history.push_back(s.out.back());
      // Grid checkpoints crossed while decoding.
      if (interval > 0 && s.state->n_pos() % interval == 0) s.snapshot();
    }
    s.adjust->apply(lg, opt_.sample_vocab);
    const int32_t tok = pick(s, lg);
    if (tok >= 0) emit(s, lg, tok);
  }
  // Forked choices run from the next step; those that already ended are finished with the rest.
  for (auto& f : forked) running_.push_back(std::move(f));
  finish_marked();

  step_budget_.observe(plan.tokens - plan.prefill_tokens, plan.prefill_tokens,
                       now_ms() - step_start);

  std::lock_guard<std::mutex> lock(mu_);
  ++metrics_.steps;
  metrics_.prefill_tokens_run += plan.prefill_tokens;
  if (const auto f = step_budget_.fit()) metrics_.step_fit = *f;
  if (mixed_prefill > 0) metrics_.mixed_prefill_budget = mixed_prefill;
  metrics_.running = static_cast<int32_t>(running_.size());
  slots_used_ = 0;
  for (const auto& sp : running_) slots_used_ += sp->slots();
  if (cache_) metrics_.cache = cache_->stats();
  update_memory();
}

bool BatchEngine::lazy_grammar(const Seq& s) const {
  // A greedy row whose log-probabilities are not reported needs the mask only when its argmax
  // is refused (constrain_logits); the same rule on every path keeps spec and plain decoding
  // token for token equal.
  return s.sampler->greedy() && !reports_logprobs(s) && !s.req.keep_first_logits;
}

bool BatchEngine::reports_logprobs(const Seq& s) const {
  return s.req.logprobs || s.req.top_logprobs > 0;
}

bool BatchEngine::lazy_sampling(const Seq& s) const {
  // Plain rows sampled with temperature alone (no top-k / top-p / min-p, whose cut would differ
  // between the whole and the masked row). Reported log-probabilities do not change the draw:
  // the row is masked for them after it (the same token with and without them).
  const SamplingParams& p = s.sampler->params();
  return !s.sampler->greedy() && p.top_k <= 0 && p.top_p >= 1.0f && p.min_p <= 0.0f &&
         !s.req.keep_first_logits;
}

Status BatchEngine::constrain_spec_rows(Seq& s, float* lg, size_t* advanced) {
  const int64_t V = model_.config().vocab_size;
  const std::span<const int32_t> d = s.spec->drafts();
  // begin() cut the drafts at the first refused token, so all of them are accepted here; a
  // row past a refused draft would never be read (its draft is rejected before it).
  REWIND_TRY(const size_t n, s.grammar->accept_prefix(std::vector<int32_t>(d.begin(), d.end())));
  *advanced = n;
  for (size_t i = 0; i <= n; ++i) {
    // A row after an end-of-sequence draft is never emitted (the run is cut at that stop).
    const int32_t st = s.grammar->state_back(n - i);
    if (st == GrammarAutomaton::kEnded) break;
    float* row = lg + static_cast<int64_t>(i) * V;
    REWIND_TRY_STATUS(constrain_logits(s.grammar->automaton(), st, row, opt_.sample_vocab,
                                       lazy_grammar(s), nullptr, pool_, argmax_hint(row)));
  }
  return Ok{};
}

int32_t BatchEngine::argmax_hint(const float* row) const {
  const int64_t V = model_.config().vocab_size;
  if (row < logits_.data() || row >= logits_.data() + logits_.size()) return -1;
  const size_t i = static_cast<size_t>((row - logits_.data()) / V);
  return i < argmax_hint_.size() && row == logits_.data() + static_cast<int64_t>(i) * V
             ? argmax_hint_[i]
             : -1;
}

namespace {
// Walks a step's logits rows in order: a decode row in an open speculative round owns
// drafted() + 1 rows (on_spec(seq, first row)), any other row with logits one (on_plain(seq,
// row)). Returns the number of rows.
template <class Running, class OnSpec, class OnPlain>
size_t walk_logits_rows(const StepPlan& plan, const Running& running, OnSpec on_spec,
                        OnPlain on_plain) {
  size_t row = 0;
  for (const PlannedRow& r : plan.rows) {
    const auto& s = *running[r.seq];
    if (r.decode && s.spec && s.spec->round_open()) {
      on_spec(s, row);
      row += static_cast<size_t>(s.spec->drafted() + 1);
    } else if (r.logits) {
      on_plain(s, row++);
    }
  }
  return row;
}
}  // namespace

void BatchEngine::prefetch_masks(const StepPlan& plan) {
  argmax_hint_.clear();
  if (!pool_ || pool_->n_threads() < 2) return;
  const int64_t V = model_.config().vocab_size;
  // Per automaton, the states whose masks the rows will need.
  std::vector<std::pair<GrammarAutomaton*, std::vector<int32_t>>> need;
  auto add = [&](GrammarAutomaton& a, int32_t state) {
    for (auto& [g, states] : need)
      if (g == &a) return states.push_back(state);
    need.push_back({&a, {state}});
  };
  // A row in `state`: masked first, or (a greedy row with no adjustment to come) masked only
  // when its argmax is refused, which is checked here (the hint spares the row a second pass).
  // A temperature-only row draws first and an adjusted greedy row is not known yet: left out.
  auto none = [](const auto&, size_t) {};
  argmax_hint_.assign(walk_logits_rows(plan, running_, none, none), -1);
  auto consider = [&](const Seq& s, int32_t state, size_t row, bool plain) {
    GrammarAutomaton& a = s.grammar->automaton();
    if (!lazy_grammar(s)) {
      if (!plain || !lazy_sampling(s) || reports_logprobs(s)) add(a, state);
      return;
    }
    if (s.adjust->active()) return;
    const int32_t top = argmax(logits_.data() + static_cast<int64_t>(row) * V, opt_.sample_vocab);
    argmax_hint_[row] = top;
    auto next = a.step_token(state, top);
    if (next.ok() && next.value() == GrammarAutomaton::kDead) add(a, state);
  };
  walk_logits_rows(
      plan, running_,
      [&](const Seq& s, size_t first) {
        if (!s.grammar) return;
        // The states after each draft the grammar accepts (constrain_spec_rows).
        int32_t st = s.grammar->state();
        const std::span<const int32_t> d = s.spec->drafts();
        for (size_t i = 0; i <= d.size() && st != GrammarAutomaton::kEnded; ++i) {
          consider(s, st, first + i, false);
          if (i == d.size()) break;
          auto next = s.grammar->automaton().step_token(st, d[i]);
          if (!next.ok() || next.value() == GrammarAutomaton::kDead) break;
          st = next.value();
        }
      },
      [&](const Seq& s, size_t at) {
        if (s.grammar && !s.forks_pending()) consider(s, s.grammar->state(), at, true);
      });
  for (auto& [a, states] : need)
    if (states.size() >= 2) (void)a->prefetch(states, pool_);  // errors recur on the row
}

void BatchEngine::greedy_argmax(const StepPlan& plan) {
  if (!pool_ || pool_->n_threads() < 2) return;
  const int64_t V = model_.config().vocab_size;
  std::vector<size_t> rows;  // logits rows of plain greedy sequences
  const size_t n_rows = walk_logits_rows(
      plan, running_, [](const Seq&, size_t) {},
      [&](const Seq& s, size_t at) {
        if (!s.grammar && !s.forks_pending() && s.sampler->greedy() && !s.adjust->active())
          rows.push_back(at);
      });
  if (rows.size() < 2) return;
  if (argmax_hint_.size() < n_rows) argmax_hint_.assign(n_rows, -1);
  const int32_t nv = opt_.sample_vocab;
  pool_->parallel_for(
      static_cast<int64_t>(rows.size()), 1,
      [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          argmax_hint_[rows[i]] = argmax(logits_.data() + static_cast<int64_t>(rows[i]) * V, nv);
      },
      static_cast<int64_t>(rows.size()) * nv);
}

void BatchEngine::update_memory() {
  MemoryReport m;
  m.add("weights", static_cast<int64_t>(model_.packed_bytes()));
  m.add("weights_mapped", static_cast<int64_t>(model_.mapped_bytes()));
  m.add("kv_pages", KvPage::live_bytes());
  m.add("snapshots", Snapshot::live_bytes());
  m.add("state_pool", StateBufferPool::pooled_bytes());
  m.add("activations", static_cast<int64_t>(model_.scratch_bytes()));
  m.add("logits", static_cast<int64_t>(logits_.capacity() * sizeof(float)));
  metrics_.memory = std::move(m);
}

void BatchEngine::set_memory_bound(MemoryReport terms) {
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.memory_bound = std::move(terms);
}

}  // namespace rw
