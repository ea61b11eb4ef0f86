// Collects a BatchEngine's token events per request id (tests of the engine and of speculation).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "rewind/engine/batch_engine.h"

namespace rw::test {

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, TokenEvent> final_ev;
  std::function<void(const TokenEvent&)> also;  // optional; runs on the engine thread, under mu
  EventCallback cb() {
    return [this](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) tokens[ev.id].push_back(ev.token);
      if (also) also(ev);
      if (ev.finish != FinishReason::None) {
        final_ev[ev.id] = ev;
        cv.notify_all();
      }
    };
  }
  // Waits (up to 120 s) until n requests have finished.
  void wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return final_ev.size() >= n; }));
  }
};

}  // namespace rw::test
