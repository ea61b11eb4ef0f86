#include "rewind/engine/engine.h"

#include <limits>

namespace rw {

namespace {
EngineOptions one_at_a_time(EngineOptions opt) {
  opt.max_running = 1;
  opt.max_queued = 0;
  return opt;
}
}  // namespace

Engine::Engine(Model& model, ThreadPool* pool, const EngineOptions& opt)
    : core_(model, pool, one_at_a_time(opt), EngineThread::Caller) {}

Result<Generation> Engine::generate(const Request& req,
                                    const std::function<void(int32_t)>& on_token,
                                    const std::atomic<bool>* stop) {
  Request r = req;
  r.keep_state = true;
  Generation gen;
  std::string error;
  auto id = core_.submit(std::move(r), [&](const TokenEvent& ev) {
    if (ev.token >= 0) {
      gen.tokens.push_back(ev.token);
      if (on_token) on_token(ev.token);
    }
    if (ev.finish == FinishReason::None) return;
    gen.finish = ev.finish;
    gen.report = ev.report;
    gen.first_logits = ev.first_logits;
    error = ev.error;
    if (ev.state) last_state_ = ev.state;
  });
  if (!id.ok()) return id.error();
  core_.run_until_idle(stop);
  if (gen.finish == FinishReason::Error) return make_error(error);
  REWIND_CHECK(gen.finish != FinishReason::None);
  return gen;
}

}  // namespace rw
