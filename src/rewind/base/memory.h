// Memory accounting: bytes by kind, the process's resident set, and giving freed memory back to
// the system (docs/ARCHITECTURE.md, "Memory").
//
// A MemoryReport is a list of (kind, bytes) that each component fills with its own allocations
// (the engine: weights, KV pages, snapshots, activations, scratch; an HTTP layer its buffers), so
// a new component adds a kind without touching the others. LiveBytes is a process-wide counter
// of objects alive now (KV pages and snapshots count themselves as they are made and freed, so
// the figure is exact however they are shared).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace rw {

struct MemoryReport {
  std::vector<std::pair<std::string, int64_t>> kinds;  // in the order added
  // Adds `bytes` to `kind` (a new kind is appended).
  void add(const std::string& kind, int64_t bytes);
  int64_t get(const std::string& kind) const;  // 0 when absent
  int64_t total() const;
};

// Bytes of objects of one kind alive now, process-wide. Thread-safe (relaxed atomics: a reading
// taken while other threads allocate is some value between the before and after).
class LiveBytes {
 public:
  void add(int64_t b) { v_.fetch_add(b, std::memory_order_relaxed); }
  void sub(int64_t b) { v_.fetch_sub(b, std::memory_order_relaxed); }
  int64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// The process's resident set in bytes (/proc/self/statm; 0 where that cannot be read).
int64_t process_resident_bytes();

// The memory this process may use: the machine's physical memory, or its cgroup's limit when
// lower (cgroup v2 memory.max, v1 memory.limit_in_bytes). 0 where nothing can be read.
int64_t usable_memory_bytes();
// A cgroup memory limit file's text: the limit in bytes, or -1 for "max", an unlimited v1
// value (at least 2^62) or anything that is not a number.
int64_t parse_cgroup_memory_limit(const std::string& text);
// The lowest memory limit of this process's cgroups, from /proc/self/cgroup's text: v2's
// "0::PATH" (memory.max under /sys/fs/cgroup) and v1's memory controller line
// (memory.limit_in_bytes under /sys/fs/cgroup/memory), each group's file and its parents' up to
// the mount's root, read through `read` ("" for a file that is not there). -1: no limit.
int64_t cgroup_memory_limit(const std::string& proc_self_cgroup,
                            const std::function<std::string(const std::string&)>& read);

// Hands free heap memory back to the system (glibc: malloc_trim(0), which also releases the
// free pages inside the heap, in every arena). Costs a walk of the free lists: call it when
// idle, after large frees. No-op elsewhere.
void release_free_memory();

}  // namespace rw
