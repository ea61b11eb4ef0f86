// Aligned, owning float/byte buffers for kernels (64-byte alignment for AVX-512 loads).
// Move-only: copying large buffers must be explicit (clone()).
// Buffers of 2 MiB or more start on a 2 MiB boundary and ask the kernel for transparent huge
// pages (Linux, where THP is in "madvise" mode): packed weights are read in long streams, and
// with 4 KiB pages every 4 KiB of them costs a TLB miss and a page walk.
// Buffers of 64 KiB or more (KV pages, snapshots, scratch, weights) are mapped on their own
// (Linux) and unmapped when freed, so their memory goes back to the system at once. Through
// malloc they would raise glibc's mmap threshold as they are freed and then stay in the heap,
// where a cache that evicts and refills keeps RSS at its high-water mark; fixing that threshold
// low instead (mallopt) sends the forward's short-lived vectors through mmap too, which halved
// the server's throughput (docs/PERFORMANCE.md, "Memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace rw {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kMapMin = size_t{64} << 10;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  ~AlignedBuffer() { release(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        mapped_(std::exchange(o.mapped_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      mapped_ = std::exchange(o.mapped_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Reallocates (contents are not kept) and zero-fills.
  void resize(size_t n) {
    release();
    size_ = n;
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    const bool huge = bytes >= kHugePage;
#ifdef __linux__
    if (bytes >= kMapMin) {  // its own mapping (page-aligned; 2 MiB-aligned when huge)
      const size_t page = 4096, len = (bytes + page - 1) / page * page;
      const size_t align = huge ? kHugePage : page;
      const size_t total = len + (align - page);
      void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      const uintptr_t b = (a + align - 1) / align * align;
      if (b > a) munmap(p, b - a);
      if (a + total > b + len) munmap(reinterpret_cast<void*>(b + len), a + total - (b + len));
      data_ = reinterpret_cast<T*>(b);
      mapped_ = len;
#ifdef MADV_HUGEPAGE
      if (huge) madvise(static_cast<void*>(data_), len & ~(kHugePage - 1), MADV_HUGEPAGE);
#endif
      return;  // anonymous pages read as zeros
    }
#endif
    void* p = nullptr;
    if (posix_memalign(&p, huge ? kHugePage : kAlign, bytes) != 0) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
#ifdef MADV_HUGEPAGE
    // Advice only (before the first touch below): where THP is off it changes nothing.
    if (huge) madvise(static_cast<void*>(data_), bytes & ~(kHugePage - 1), MADV_HUGEPAGE);
#endif
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  // Grows only when needed (contents are not kept when it grows).
  void reserve_at_least(size_t n) {
    if (n > size_) resize(n);
  }
  // Copies size() elements: cost O(size()).
  AlignedBuffer clone() const {
    AlignedBuffer b(size_);
    if (size_) std::memcpy(static_cast<void*>(b.data_), data_, size_ * sizeof(T));
    return b;
  }
  T* data() {
    return data_;
  }
  const T* data() const {
    return data_;
  }
  size_t size() const {
    return size_;
  }
  T& operator[](size_t i) {
    return data_[i];
  }
  const T& operator[](size_t i) const {
    return data_[i];
  }

 private:
  void release() {
#ifdef __linux__
    if (mapped_) {
      munmap(static_cast<void*>(data_), mapped_);
      data_ = nullptr;
      mapped_ = 0;
      return;
    }
#endif
    std::free(data_);
    data_ = nullptr;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes of its own mapping (0: from malloc)
};

}  // namespace rw
