#include "rewind/state/buffer_pool.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "rewind/state/sequence_state.h"

namespace rw {

namespace {

struct Pool {
  std::mutex mu;
  int64_t capacity = 0, pooled = 0, reused = 0;
  std::map<size_t, std::vector<AlignedBuffer<float>>> floats;  // by element count
  std::map<size_t, std::vector<AlignedBuffer<std::byte>>> bytes;

  // Frees pooled buffers (largest sizes first) until the pooled bytes fit `room`; mu held.
  void trim_to(int64_t room) {
    auto drop = [&](auto& lists) {
      for (auto it = lists.rbegin(); it != lists.rend() && pooled > room; ++it)
        while (!it->second.empty() && pooled > room) {
          pooled -= static_cast<int64_t>(it->second.back().size() * sizeof(it->second.back()[0]));
          it->second.pop_back();
        }
    };
    drop(floats);
    drop(bytes);
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: states freed during exit still find it
  return *p;
}

// Bytes of every KV page, snapshot and sequence state alive now.
int64_t live_state_bytes() {
  return KvPage::live_bytes() + Snapshot::live_bytes() + SequenceState::live_bytes();
}

template <typename T>
AlignedBuffer<T> take(std::map<size_t, std::vector<AlignedBuffer<T>>>& lists, size_t n, bool zero) {
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = lists.find(n);
    if (it != lists.end() && !it->second.empty()) {
      AlignedBuffer<T> b = std::move(it->second.back());
      it->second.pop_back();
      p.pooled -= static_cast<int64_t>(n * sizeof(T));
      ++p.reused;
      if (zero) std::memset(static_cast<void*>(b.data()), 0, n * sizeof(T));
      return b;
    }
  }
  return AlignedBuffer<T>(n);  // zero-filled (a fresh mapping reads as zeros)
}

template <typename T>
void give(std::map<size_t, std::vector<AlignedBuffer<T>>>& lists, AlignedBuffer<T>&& b) {
  const size_t n = b.size();
  const int64_t bytes = static_cast<int64_t>(n * sizeof(T));
  if (n == 0) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.pooled + bytes + live_state_bytes() > p.capacity) return;
  lists[n].push_back(std::move(b));
  p.pooled += bytes;
}

}  // namespace

void StateBufferPool::add_capacity(int64_t bytes) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.capacity += bytes;
  if (p.capacity < 0) p.capacity = 0;
  p.trim_to(p.capacity);
}

int64_t StateBufferPool::capacity() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.capacity;
}

AlignedBuffer<float> StateBufferPool::take_floats(size_t n, bool zero) {
  return take(pool().floats, n, zero);
}

AlignedBuffer<std::byte> StateBufferPool::take_bytes(size_t n, bool zero) {
  return take(pool().bytes, n, zero);
}

void StateBufferPool::give(AlignedBuffer<float>&& b) {
  rw::give(pool().floats, std::move(b));
}

void StateBufferPool::give(AlignedBuffer<std::byte>&& b) {
  rw::give(pool().bytes, std::move(b));
}

void StateBufferPool::clear() {
  // Freed outside the lock (munmap of many buffers): moved out first.
  decltype(Pool::floats) f;
  decltype(Pool::bytes) b;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    f.swap(p.floats);
    b.swap(p.bytes);
    p.pooled = 0;
  }
}

int64_t StateBufferPool::pooled_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.pooled;
}

int64_t StateBufferPool::reused_count() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.reused;
}

}  // namespace rw
