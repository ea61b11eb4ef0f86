// Aligned, owning float/byte buffers for kernels (64-byte alignment for AVX-512 loads).
// Move-only: copying large buffers must be explicit (clone()).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace rw {

template <typename T>
class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;
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
    data_ = static_cast<T*>(std::aligned_alloc(kAlign, bytes));
    if (!data_) throw std::bad_alloc();
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
