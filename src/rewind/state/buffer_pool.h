// Free buffers of sequence state kept for reuse: recurrent states, snapshots and KV pages.
// A server starts and ends requests continually; each one's recurrent state and snapshots (18 MB
// each on the Qwen3.5-0.8B shape) and KV pages would otherwise be fresh mappings that the kernel
// zeroes page by page on first touch, and unmaps again when they are freed (AlignedBuffer).
// The pool keeps a freed buffer for the next one of the same size instead, only while the
// pooled bytes plus every KV page, snapshot and sequence state alive (their LiveBytes counters)
// stay within the capacity that the engines running add (their memory bound's cache and slots
// terms, docs/ARCHITECTURE.md "Memory"). Capacity 0 (no engine) keeps nothing, as before.
// Contents of a reused buffer are whatever it last held unless zeroing is asked for, so bits of
// the model never depend on the pool. Thread-safe (one mutex: a take or give is a few list
// operations, against the megabytes each buffer holds).
#pragma once

#include <cstddef>
#include <cstdint>

#include "rewind/base/aligned.h"

namespace rw {

class StateBufferPool {
 public:
  // Adds `bytes` to the capacity (an engine adds its share when made, subtracts it when
  // destroyed); pooled buffers past a smaller capacity are freed.
  static void add_capacity(int64_t bytes);
  static int64_t capacity();
  // A buffer of n elements: a pooled one of that size, else a new one (zero-filled). `zero`:
  // zero-fill a pooled one too; otherwise its contents are undefined.
  static AlignedBuffer<float> take_floats(size_t n, bool zero);
  static AlignedBuffer<std::byte> take_bytes(size_t n, bool zero);
  // Keeps b for reuse when the capacity allows (see above), else frees it (b is left as it was
  // and frees itself). Small buffers are kept too (malloc would reuse them anyway), so that the
  // tiny models of the tests exercise reuse.
  static void give(AlignedBuffer<float>&& b);
  static void give(AlignedBuffer<std::byte>&& b);
  // Frees every pooled buffer (the engine calls it when it goes idle, so RSS drops as before).
  static void clear();
  static int64_t pooled_bytes();
  // Buffers taken from the pool and handed out new since the process started (for tests).
  static int64_t reused_count();
};

}  // namespace rw
