// Speculative decoding with exact rollback on hybrid models (docs/DESIGN.md section 5).
//
// A round is a transaction on one sequence whose state has consumed n tokens and whose next
// token `last` is sampled but not yet consumed:
//   1. draft: up to k tokens d1..dk (n-gram lookup over the sequence's own tokens, a draft
//      model, or the target's MTP head); the pre-round recurrent state is saved;
//   2. verify: the target runs [last, d1..dk] in one forward (batched with other rows by the
//      caller) with RecCapture on, and returns k+1 logit rows;
//   3. accept (sample/speculative_accept.h): m drafts plus one more token; stop tokens and the
//      token budget cut that run to E tokens, of which the state must consume exactly E;
//   4. commit: when E < k+1, the recurrent state is restored to the pre-round copy and only
//      the E accepted tokens' recurrence is replayed from the captured inputs (the same
//      per-token update as plain decoding, so the bits equal a run that never drafted); the
//      attention KV is cut back to n+E. Full acceptance needs no replay. Grid checkpoints whose
//      position was crossed inside the accepted run are taken exactly (replay to them).
// A failure anywhere before commit returns the sequence to its committed state with abort().
// Nothing is captured during prefill, and rows without speculation pay nothing.
//
// Capabilities are checked before any round (spec_check), never discovered by failing: a
// rollback deeper than what was captured is a broken invariant (check failure), never clamped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/grammar/matcher.h"
#include "rewind/model/model.h"
#include "rewind/sample/sampler.h"

namespace rw {

class ThreadPool;

// Custom: drafts come from SpecConfig::custom (an embedding program's own drafter; tests use
// it to force acceptance patterns).
enum class SpecKind { Off, Ngram, Draft, Mtp, Custom };
const char* spec_kind_name(SpecKind k);  // "off", "ngram", "draft", "mtp", "custom"

struct SpecConfig {
  SpecKind kind = SpecKind::Off;
  int32_t k = 4;          // most drafts per round (1..kMaxDraft)
  bool adaptive = true;   // k shrinks after a rejection, grows back after full acceptance
  int32_t ngram_min = 1;  // n-gram lookup: longest suffix tried first, down to ngram_min
  int32_t ngram_max = 4;
  Model* draft = nullptr;  // SpecKind::Draft: the draft model (same vocabulary; one user at a time)
  // Set when engines on different threads share the draft model (`rewind serve` with several
  // models): held while a sequence runs it, since its forward reuses the model's buffers.
  std::shared_ptr<std::mutex> draft_lock;
  // SpecKind::Custom: given the consumed tokens plus `last`, returns up to k drafts.
  std::function<std::vector<int32_t>(std::span<const int32_t> context, int32_t k)> custom;
  // Test hook: called with "draft" and "verify" during a round; may throw to test that a
  // failing round leaves the sequence at its committed state.
  std::function<void(const char* stage)> fault;
  static constexpr int32_t kMaxDraft = 16;
};

// Whether `target` (and the draft model) can run speculative rounds of up to cfg.k drafts:
// every recurrent layer kind must support capture + replay, the draft must share the target's
// vocabulary, MTP needs the checkpoint's MTP head packed (LoadOptions::mtp; drafts greedily
// from Model::mtp_draft). Checked once before any round, on any state (an empty or fresh one
// included).
Status spec_check(const Model& target, const SpecConfig& cfg);

struct SpecStats {
  int64_t rounds = 0;    // rounds with at least one draft
  int64_t drafted = 0;   // draft tokens proposed
  int64_t accepted = 0;  // draft tokens accepted
  int64_t replayed = 0;  // tokens whose recurrence was replayed after a partial acceptance
  int64_t full = 0;      // rounds where every draft was accepted
  void add(const SpecStats& o) {
    rounds += o.rounds;
    drafted += o.drafted;
    accepted += o.accepted;
    replayed += o.replayed;
    full += o.full;
  }
};

// What a committed round produced.
struct SpecOutcome {
  std::vector<int32_t> tokens;  // emitted tokens, in order (E >= 1); the last is the new `last`
  std::vector<int32_t> rows;    // logit row each token was chosen from (0..k)
  int32_t drafted = 0, accepted = 0;
  // Grid checkpoints crossed by the accepted run, exact (position-ascending).
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  // Appends what the state consumed in this round, [last, tokens[0..E-2]], to `history`.
  void append_consumed(int32_t last, std::vector<int32_t>* history) const {
    history->push_back(last);
    history->insert(history->end(), tokens.begin(), tokens.end() - 1);
  }
};

// Per-sequence speculation state: the drafter's own state and the open round's buffers.
class SpecSequence {
 public:
  SpecSequence(const Model& target, const SpecConfig& cfg);
  SpecSequence(const SpecSequence&) = delete;
  SpecSequence& operator=(const SpecSequence&) = delete;

  const SpecConfig& config() const { return cfg_; }
  int32_t current_k() const { return k_cur_; }
  const SpecStats& stats() const { return stats_; }
  bool round_open() const { return open_; }
  // Constrained decoding: the sequence's matcher (owned by the caller, at the committed
  // position whenever no round is open). Drafts then follow the grammar: the draft model's
  // logits are masked as it drafts, other drafters' proposals are cut at the first token the
  // grammar refuses. begin() leaves the matcher where it found it.
  void set_grammar(GrammarMatcher* m) { grammar_ = m; }

  // --- one round (the caller owns the forward) ---
  // Opens a round: drafts up to min(current_k, budget - 1) tokens following history + last,
  // saves the pre-round state. `history` is what `st` has consumed. May run the draft model.
  // After it, verify_input() is the SeqInput the caller puts in its forward batch (logit rows
  // 0..k, capture on). Errors and exceptions leave nothing open (the state is untouched).
  Status begin(SequenceState* st, const std::vector<int32_t>& history, int32_t last, int32_t budget,
               const Sampler& sampler, ThreadPool* pool);
  SeqInput verify_input();
  int32_t drafted() const { return static_cast<int32_t>(verify_.size()) - 1; }
  // The open round's drafts d1..dk (the caller adjusts verify rows with them).
  std::span<const int32_t> drafts() const {
    return std::span<const int32_t>(verify_).subspan(verify_.empty() ? 0 : 1);
  }
  // Closes the round after the verification forward: `logits` holds its k+1 rows (stride ld),
  // tokens >= n_vocab are never chosen. Accepts, cuts at a stop token or the budget, rolls back
  // and replays. snapshot_interval > 0 takes grid checkpoints at multiples of it crossed by the
  // committed run. An exception from it (the fault hook) leaves the round aborted.
  SpecOutcome commit(const float* logits, int64_t ld, int32_t n_vocab, Sampler& sampler,
                     const std::set<int32_t>& stop_ids, int64_t snapshot_interval,
                     ThreadPool* pool);
  // Undoes an open round (after a failure anywhere in it): the sequence is back at its
  // committed state, bit for bit. No-op when no round is open.
  void abort();

  // Bytes held for rollback now (pre-round copy + captures), for metrics.
  size_t rollback_bytes() const;

  // A draft model's catch-up on `history` (what the target has consumed: at the prompt's end,
  // the prompt), run when the target's prefill ends rather than inside the first round, so its
  // cost falls in the time to the first token instead of between the first tokens. A no-op
  // for other drafters and while a round is open. An error leaves the draft to catch up in the
  // first round, which then reports it.
  Status warm(const std::vector<int32_t>& history, ThreadPool* pool);
  // History tokens the draft model's state has consumed (0 for other drafters).
  int64_t draft_consumed() const { return dstate_ ? d_consumed_ : 0; }

 private:
  Status draft_ngram(const std::vector<int32_t>& history, int32_t last, int32_t k);
  Status draft_model(const std::vector<int32_t>& history, int32_t last, int32_t k,
                     const Sampler& sampler, ThreadPool* pool);
  // Runs the draft state over history[d_consumed_, ...) in chunks while it lags by more than
  // 2 * kMaxDraft (committed work, uncaptured). The caller holds cfg_.draft_lock.
  Status draft_catch_up(const std::vector<int32_t>& history, ThreadPool* pool);
  void commit_draft_model(int32_t keep, ThreadPool* pool);
  Status draft_mtp(int32_t last, int32_t k, ThreadPool* pool);

  const Model& target_;
  SpecConfig cfg_;
  GrammarMatcher* grammar_ = nullptr;
  int32_t k_cur_;
  SpecStats stats_;

  // The open round.
  bool open_ = false;
  SequenceState* st_ = nullptr;
  int64_t p0_ = 0;
  int32_t budget_ = 1;
  AlignedBuffer<float> pre_;  // target recurrent state before the round
  bool pre_saved_ = false;
  RecCapture cap_;               // target recurrence inputs of verify_
  std::vector<int32_t> verify_;  // [last, d1..dk]
  std::vector<float> draft_q_;   // [k][V] draft probabilities (sampling with a draft model)
  bool have_q_ = false;

  // Draft model state (SpecKind::Draft). It lags the target: history[d_consumed_, p0) are
  // committed tokens it has not consumed yet (after a fully accepted round: the last draft).
  std::optional<SequenceState> dstate_;
  int64_t d_consumed_ = 0;     // history tokens the draft state has consumed
  int64_t dp0_ = -1;           // draft n_pos when the open round saved dpre_ (-1: not saved)
  int64_t d_pending_run_ = 0;  // lagging tokens consumed inside the open round
  AlignedBuffer<float> dpre_;
  RecCapture dcap_;
  std::optional<Sampler> dsampler_;
};

// n-gram (prompt lookup) drafts: the tokens that followed the most recent earlier occurrence
// of the longest suffix of `context` (lengths n_max down to n_min) that occurs earlier; at
// most k; empty when none matches.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> context, int32_t k, int32_t n_min,
                                  int32_t n_max);
// The same over the context history + [last], without copying the history.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> history, int32_t last, int32_t k,
                                  int32_t n_min, int32_t n_max);

}  // namespace rw
