#include "rewind/engine/speculative.h"

#include <algorithm>

#include "rewind/engine/constrained.h"
#include "rewind/sample/speculative_accept.h"

namespace rw {

const char* spec_kind_name(SpecKind k) {
  switch (k) {
    case SpecKind::Off:
      return "off";
    case SpecKind::Ngram:
      return "ngram";
    case SpecKind::Draft:
      return "draft";
    case SpecKind::Mtp:
      return "mtp";
    case SpecKind::Custom:
      return "custom";
  }
  return "";
}

Status spec_check(const Model& target, const SpecConfig& cfg) {
  if (cfg.kind == SpecKind::Off) return Ok{};
  if (cfg.k < 1 || cfg.k > SpecConfig::kMaxDraft)
    return make_error("speculative: draft length k must be in [1, " +
                      std::to_string(SpecConfig::kMaxDraft) + "], got " + std::to_string(cfg.k));
  // Every recurrent layer of these families is a Gated DeltaNet layer, which RecCapture records
  // and Model::replay_recurrent replays; attention layers roll back by cutting KV. A family
  // with another recurrent kind would have to be refused here.
  if (cfg.kind == SpecKind::Ngram && (cfg.ngram_min < 1 || cfg.ngram_max < cfg.ngram_min))
    return make_error("speculative: n-gram sizes need 1 <= min <= max");
  if (cfg.kind == SpecKind::Draft) {
    if (!cfg.draft) return make_error("speculative: no draft model loaded");
    if (cfg.draft->config().vocab_size != target.config().vocab_size)
      return make_error("speculative: the draft model's vocabulary (" +
                        std::to_string(cfg.draft->config().vocab_size) +
                        " ids) differs from the target's (" +
                        std::to_string(target.config().vocab_size) + ")");
  }
  if (cfg.kind == SpecKind::Mtp && !target.mtp_loaded())
    return make_error(target.weights().has_mtp()
                          ? "speculative: MTP drafting needs the model loaded with its MTP head"
                          : "speculative: the checkpoint has no MTP head (MTP drafting needs one)");
  if (cfg.kind == SpecKind::Custom && !cfg.custom)
    return make_error("speculative: no custom drafter given");
  return Ok{};
}

std::vector<int32_t> ngram_lookup(std::span<const int32_t> history, int32_t last, int32_t k,
                                  int32_t n_min, int32_t n_max) {
  // The context is history + [last], read in place (no copy of the history per round).
  const int64_t L = static_cast<int64_t>(history.size()) + 1;
  auto at = [&](int64_t i) { return i + 1 < L ? history[static_cast<size_t>(i)] : last; };
  for (int64_t n = std::min<int64_t>(n_max, L - 1); n >= n_min; --n) {
    // Most recent earlier occurrence of the suffix [L-n, L): it must end before L.
    for (int64_t start = L - n - 1; start >= 0; --start) {
      int64_t i = 0;
      while (i < n && at(start + i) == at(L - n + i)) ++i;
      if (i < n) continue;
      std::vector<int32_t> out;
      for (int64_t j = start + n; j < L && static_cast<int32_t>(out.size()) < k; ++j)
        out.push_back(at(j));
      return out;
    }
  }
  return {};
}

std::vector<int32_t> ngram_lookup(std::span<const int32_t> ctx, int32_t k, int32_t n_min,
                                  int32_t n_max) {
  if (ctx.empty()) return {};
  return ngram_lookup(ctx.first(ctx.size() - 1), ctx.back(), k, n_min, n_max);
}

SpecSequence::SpecSequence(const Model& target, const SpecConfig& cfg)
    : target_(target), cfg_(cfg), k_cur_(cfg.k) {}

size_t SpecSequence::rollback_bytes() const {
  return pre_.size() * sizeof(float) + cap_.bytes() + dpre_.size() * sizeof(float) + dcap_.bytes();
}

Status SpecSequence::begin(SequenceState* st, const std::vector<int32_t>& history, int32_t last,
                           int32_t budget, const Sampler& sampler, ThreadPool* pool) {
  REWIND_CHECK_MSG(!open_, "speculative round already open");
  REWIND_CHECK(budget >= 1 && static_cast<int64_t>(history.size()) == st->n_pos());
  st_ = st;
  p0_ = st->n_pos();
  budget_ = budget;
  verify_.assign(1, last);
  cap_.clear();
  have_q_ = false;
  dp0_ = -1;
  pre_saved_ = false;
  open_ = true;
  const int32_t k = std::min(k_cur_, budget - 1);
  try {
    Status ds = Ok{};
    if (k > 0 && cfg_.kind == SpecKind::Ngram) ds = draft_ngram(history, last, k);
    if (k > 0 && cfg_.kind == SpecKind::Draft) ds = draft_model(history, last, k, sampler, pool);
    if (k > 0 && cfg_.kind == SpecKind::Mtp) ds = draft_mtp(last, k, pool);
    if (k > 0 && cfg_.kind == SpecKind::Custom) {
      std::vector<int32_t> ctx(history.begin(), history.end());
      ctx.push_back(last);
      std::vector<int32_t> d = cfg_.custom(ctx, k);
      const int64_t V = target_.config().vocab_size;
      if (static_cast<int32_t>(d.size()) > k) d.resize(static_cast<size_t>(k));
      for (int32_t t : d)
        if (t < 0 || t >= V)
          ds = make_error("speculative: custom draft token " + std::to_string(t) + " out of range");
      if (ds.ok()) verify_.insert(verify_.end(), d.begin(), d.end());
    }
    if (ds.ok() && grammar_ && cfg_.kind != SpecKind::Draft && verify_.size() > 1) {
      // Drafts past the first token the grammar refuses could never be accepted.
      const std::vector<int32_t> d(verify_.begin() + 1, verify_.end());
      auto n = grammar_->accept_prefix(d);
      if (n.ok()) {
        grammar_->rollback(n.value());
        verify_.resize(1 + n.value());
      } else {
        ds = n.error();
      }
    }
    if (!ds.ok()) {
      abort();
      return ds;
    }
    if (cfg_.fault) cfg_.fault("draft");
  } catch (...) {
    abort();
    throw;
  }
  // The pre-round copy: what a rollback restores (recurrent bytes with the MTP carry; none for
  // an attention-only model without MTP).
  if (target_.state_shape().rec_floats() > 0) {
    st->save_recurrent(&pre_);
    pre_saved_ = true;
  }
  return Ok{};
}

SeqInput SpecSequence::verify_input() {
  REWIND_CHECK(open_);
  SeqInput in{st_, std::span<const int32_t>(verify_), {}, &cap_};
  for (int32_t i = 0; i < static_cast<int32_t>(verify_.size()); ++i) in.logit_rows.push_back(i);
  return in;
}

Status SpecSequence::draft_ngram(const std::vector<int32_t>& history, int32_t last, int32_t k) {
  const std::vector<int32_t> d = ngram_lookup(history, last, k, cfg_.ngram_min, cfg_.ngram_max);
  verify_.insert(verify_.end(), d.begin(), d.end());
  return Ok{};
}

Status SpecSequence::draft_catch_up(const std::vector<int32_t>& history, ThreadPool* pool) {
  Model& D = *cfg_.draft;
  if (!dstate_) {
    dstate_.emplace(D.new_state());
    d_consumed_ = 0;
  }
  const int64_t H0 = static_cast<int64_t>(history.size());
  REWIND_CHECK(d_consumed_ <= H0 && dstate_->n_pos() == d_consumed_);
  std::vector<float> logits;
  // A long lag (the prompt, on the first round) is committed work: run it uncaptured.
  constexpr int64_t kChunk = 512;
  auto drop = [&] {  // no copy to go back to: rebuild from scratch next round
    dstate_.reset();
    d_consumed_ = 0;
  };
  while (H0 - d_consumed_ > 2 * SpecConfig::kMaxDraft) {
    const int64_t n = std::min(kChunk, H0 - d_consumed_);
    SeqInput in{&*dstate_, std::span<const int32_t>(history.data() + d_consumed_, n), {}, nullptr};
    Status st = Ok{};
    try {
      st = D.forward(std::span<SeqInput>(&in, 1), &logits, pool);
    } catch (...) {
      drop();
      throw;
    }
    if (!st.ok()) {
      drop();
      return st;
    }
    d_consumed_ += n;
  }
  return Ok{};
}

Status SpecSequence::warm(const std::vector<int32_t>& history, ThreadPool* pool) {
  if (cfg_.kind != SpecKind::Draft || !cfg_.draft || open_) return Ok{};
  std::unique_lock<std::mutex> shared;
  if (cfg_.draft_lock) shared = std::unique_lock<std::mutex>(*cfg_.draft_lock);
  return draft_catch_up(history, pool);
}

Status SpecSequence::draft_model(const std::vector<int32_t>& history, int32_t last, int32_t k,
                                 const Sampler& sampler, ThreadPool* pool) {
  Model& D = *cfg_.draft;
  std::unique_lock<std::mutex> shared;  // the draft's buffers, when other engines run it too
  if (cfg_.draft_lock) shared = std::unique_lock<std::mutex>(*cfg_.draft_lock);
  REWIND_TRY_STATUS(draft_catch_up(history, pool));
  const int64_t H0 = static_cast<int64_t>(history.size());
  std::vector<float> logits;
  dp0_ = dstate_->n_pos();
  if (D.config().n_recurrent_layers() > 0) dstate_->save_recurrent(&dpre_);
  dcap_.clear();
  d_pending_run_ = H0 - d_consumed_;
  std::vector<int32_t> feed(history.begin() + d_consumed_, history.end());
  feed.push_back(last);
  const int32_t V = static_cast<int32_t>(D.config().vocab_size);
  const bool greedy = sampler.greedy();
  if (!greedy) {
    // The draft samples with the request's filters from its own RNG stream, kept across rounds.
    if (!dsampler_) {
      SamplingParams p = sampler.params();
      p.seed ^= 0x9d2c5680a4f7e1b3ull;
      dsampler_.emplace(p);
    }
    draft_q_.assign(static_cast<size_t>(k) * V, 0.0f);
    have_q_ = true;
  }
  // Under a grammar the draft's logits are masked with the matcher advanced along the drafts
  // (so a sampled draft's q is the masked distribution and every draft is allowed); the
  // matcher goes back to where it was when drafting ends, however it ends.
  size_t advanced = 0;
  struct Rewind {
    GrammarMatcher* m;
    size_t* n;
    ~Rewind() {
      if (m) m->rollback(*n);
    }
  } rewind_grammar{grammar_, &advanced};
  for (int32_t i = 0; i < k; ++i) {
    SeqInput in{
        &*dstate_, std::span<const int32_t>(feed), {static_cast<int32_t>(feed.size()) - 1}, &dcap_};
    REWIND_TRY_STATUS(D.forward(std::span<SeqInput>(&in, 1), &logits, pool));
    if (grammar_)
      REWIND_TRY_STATUS(constrain_logits(grammar_->automaton(), grammar_->state(), logits.data(), V,
                                         greedy, nullptr, pool));
    int32_t d;
    if (greedy) {
      d = argmax(logits.data(), V);
    } else {
      const std::vector<float> q = dsampler_->probabilities(logits.data(), V);
      std::copy(q.begin(), q.end(), draft_q_.begin() + static_cast<int64_t>(i) * V);
      d = dsampler_->sample(logits.data(), V);
    }
    verify_.push_back(d);
    feed.assign(1, d);
    if (grammar_) {
      REWIND_TRY_STATUS(grammar_->accept(d));
      ++advanced;
      if (grammar_->is_ended()) break;  // an end-of-sequence draft: nothing can follow it
    }
    if (i + 1 == k) break;  // the last draft is consumed next round, if accepted
  }
  return Ok{};
}

Status SpecSequence::draft_mtp(int32_t last, int32_t k, ThreadPool* pool) {
  // The target's MTP head drafts greedily (deterministic drafts: q is one-hot, so sampling
  // stays exact through speculative_accept). It writes only the head's KV slots n-1 ..
  // n+k-2, never the recurrent state or the carry, so pre_ (saved after drafting) is still
  // the pre-round state. The scratch slots are harmless: the head's KV is read only while
  // drafting (forward() runs the head K/V-only), and a draft at n' reads slots 0 .. n'-2,
  // written with true pairs by the forwards that consumed t_1 .. t_{n'-1} (the verify forward
  // over [last, d1..dk] rewrites slots n-1 .. n+k-1, a superset of what a commit keeps), plus
  // slots n'-1 .. that it writes itself first. An abort or rollback to n' only makes slots
  // >= n'-1 undefined, which is what the state promises anyway (lagged_attn_layers).
  if (st_->n_pos() < 1) return Ok{};  // no carry yet: no drafts
  MtpDraft d{st_, last, k, {}};
  REWIND_TRY_STATUS(target_.mtp_draft(std::span<MtpDraft>(&d, 1), nullptr, pool));
  verify_.insert(verify_.end(), d.drafts.begin(), d.drafts.end());
  return Ok{};
}

void SpecSequence::commit_draft_model(int32_t keep, ThreadPool* pool) {
  if (dp0_ < 0) return;  // the draft did not run this round
  const int32_t k = drafted();
  const Model& D = *cfg_.draft;
  if (keep <= k) {
    // The draft consumed [lag, last, d1..d(k-1)]; keep [lag, last, d1..d(keep-1)].
    const int64_t rows = d_pending_run_ + keep;
    if (D.config().n_recurrent_layers() > 0) {
      dstate_->load_recurrent(dpre_);
      D.replay_recurrent(&*dstate_, dcap_, 0, rows, pool);
    }
    dstate_->rewind_kv_to(dp0_ + rows);
    d_consumed_ = dp0_ + rows;
  } else {
    d_consumed_ = dp0_ + d_pending_run_ + k;  // dk is the lag of the next round
  }
  dp0_ = -1;
}

SpecOutcome SpecSequence::commit(const float* logits, int64_t ld, int32_t n_vocab, Sampler& sampler,
                                 const std::set<int32_t>& stop_ids, int64_t snapshot_interval,
                                 ThreadPool* pool) {
  REWIND_CHECK(open_);
  SpecOutcome out;
  try {
    if (cfg_.fault) cfg_.fault("verify");
    const int32_t k = drafted();
    REWIND_CHECK(st_->n_pos() == p0_ + k + 1);
    const std::span<const int32_t> drafts(verify_.data() + 1, static_cast<size_t>(k));
    const AcceptResult a =
        speculative_accept(sampler, logits, ld, drafts, have_q_ ? draft_q_.data() : nullptr,
                           target_.config().vocab_size, n_vocab);
    // Emitted: d1..dm, then the next token; cut after a stop token and at the budget.
    for (int32_t i = 0; i < a.accepted; ++i) {
      out.tokens.push_back(drafts[i]);
      out.rows.push_back(i);
    }
    out.tokens.push_back(a.next);
    out.rows.push_back(a.accepted);
    for (size_t j = 0; j < out.tokens.size(); ++j)
      if (stop_ids.count(out.tokens[j]) || static_cast<int32_t>(j) + 1 >= budget_) {
        out.tokens.resize(j + 1);
        out.rows.resize(j + 1);
        break;
      }
    const int32_t keep = static_cast<int32_t>(out.tokens.size());  // tokens the state keeps
    out.drafted = k;
    out.accepted = std::min(a.accepted, keep);
    const int64_t n_after = p0_ + keep;
    const bool rec = target_.state_shape().rec_floats() > 0;
    std::vector<int64_t> cross;  // grid checkpoints in (p0, n_after]
    if (rec && snapshot_interval > 0)
      for (int64_t c = (p0_ / snapshot_interval + 1) * snapshot_interval; c <= n_after;
           c += snapshot_interval)
        cross.push_back(c);
    auto snap_here = [&](int64_t pos) {
      AlignedBuffer<float> rec;
      st_->save_recurrent(&rec);
      out.snaps.push_back(std::make_shared<Snapshot>(pos, std::move(rec)));
    };
    const bool full = keep == k + 1;
    if (rec && (!full || (!cross.empty() && cross.front() < n_after))) {
      // Back to the pre-round state, then only the kept tokens' recurrence.
      st_->load_recurrent(pre_);
      int64_t done = 0;
      for (int64_t c : cross) {
        target_.replay_recurrent(st_, cap_, done, c - p0_, pool);
        done = c - p0_;
        snap_here(c);
      }
      target_.replay_recurrent(st_, cap_, done, keep, pool);
      stats_.replayed += keep;
    } else if (!cross.empty()) {
      snap_here(n_after);  // full acceptance ending on a grid position
    }
    st_->rewind_kv_to(n_after);
    if (cfg_.kind == SpecKind::Draft) commit_draft_model(keep, pool);
    if (k > 0) {
      ++stats_.rounds;
      stats_.drafted += k;
      stats_.accepted += out.accepted;
      if (a.accepted == k) ++stats_.full;
      if (cfg_.adaptive)
        k_cur_ = a.accepted == k ? std::min(cfg_.k, k_cur_ + 1) : std::max(1, a.accepted + 1);
    }
  } catch (...) {
    abort();
    throw;
  }
  open_ = false;
  return out;
}

void SpecSequence::abort() {
  if (!open_) return;
  // A forward that threw may have changed the recurrent state without advancing n_pos:
  // restore whenever the copy exists, not only when n_pos moved.
  if (pre_saved_) st_->load_recurrent(pre_);
  st_->rewind_kv_to(p0_);
  if (dstate_) {
    if (dp0_ >= 0) {
      if (cfg_.draft->config().n_recurrent_layers() > 0) dstate_->load_recurrent(dpre_);
      dstate_->rewind_kv_to(dp0_);
      d_consumed_ = dp0_;
    }
    dp0_ = -1;
  }
  open_ = false;
}

}  // namespace rw
