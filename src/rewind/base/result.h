// Result<T>: the value of an operation that can fail on bad input (file, network, user data).
// Broken invariants are not Results: they are REWIND_CHECK failures (base/check.h).
// An Error carries one human-readable line that names what was wrong and where.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "rewind/base/check.h"

namespace rw {

struct Error {
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    REWIND_CHECK_MSG(ok(), error_message());
    return std::get<0>(v_);
  }
  const T& value() const& {
    REWIND_CHECK_MSG(ok(), error_message());
    return std::get<0>(v_);
  }
  T&& value() && {
    REWIND_CHECK_MSG(ok(), error_message());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  const Error& error() const {
    REWIND_CHECK(!ok());
    return std::get<1>(v_);
  }
  std::string error_message() const { return ok() ? std::string() : std::get<1>(v_).message; }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
struct Ok {};
using Status = Result<Ok>;

inline Error make_error(std::string message) {
  return Error{std::move(message)};
}

}  // namespace rw

// Propagate an error: `REWIND_TRY(auto x, parse(...));`
#define REWIND_CONCAT_INNER(a, b) a##b
#define REWIND_CONCAT(a, b) REWIND_CONCAT_INNER(a, b)
#define REWIND_TRY_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                     \
  if (!tmp.ok()) return tmp.error();     \
  decl = std::move(tmp).value()
#define REWIND_TRY(decl, expr) REWIND_TRY_IMPL(REWIND_CONCAT(rewind_try_, __LINE__), decl, expr)
#define REWIND_TRY_STATUS(expr)                              \
  do {                                                       \
    auto rewind_status_ = (expr);                            \
    if (!rewind_status_.ok()) return rewind_status_.error(); \
  } while (0)
