// Shapes in error messages (header only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rw {

// "[a, b, c]".
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace rw
