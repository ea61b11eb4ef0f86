// Aligned, owning float/byte buffers for kernels (64-byte alignment for AVX-512 loads).
// Move-only: copying large buffers must be explicit (clone()).
// Buffers of 2 MiB or more start on a 2 MiB boundary and ask the kernel for transparent huge
// pages (Linux, where THP is in "madvise" mode): packed weights are read in long streams, and
// with 4 KiB pages every 4 KiB of them costs a TLB miss and a page walk.
#pragma once

#include <cstddef>
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
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Reallocates (contents are not kept) and zero-fills.
  void resize(size_t n) {
    std::free(data_);
    data_ = nullptr;
    size_ = n;
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    const bool huge = bytes >= kHugePage;
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
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace rw
