// Status and StatusOr: how errors cross API edges (loading, parsing, requests).
// Broken invariants use CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace dsv4 {

enum class StatusCode { kOk, kInvalidArgument, kNotFound, kDataLoss, kOutOfRange, kResourceExhausted, kInternal };

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const { return ok() ? "OK" : message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status data_loss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status resource_exhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
inline Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

template <class T>
class StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace dsv4

#define DSV4_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::dsv4::Status _st = (expr);              \
    if (!_st.ok()) return _st;                \
  } while (0)

#define DSV4_CONCAT_INNER(a, b) a##b
#define DSV4_CONCAT(a, b) DSV4_CONCAT_INNER(a, b)
#define DSV4_ASSIGN_OR_RETURN(lhs, expr) DSV4_ASSIGN_OR_RETURN_IMPL(DSV4_CONCAT(_so_, __LINE__), lhs, expr)
#define DSV4_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp.value())
