#pragma once
// The argument of kiln::tensor(): a scalar or a braced list nested to any depth, as
// torch.tensor takes a number or nested Python lists:
//   tensor(3.5)                  0-D float32      tensor({1, 2, 3})        (3) int64
//   tensor({{1, 2}, {3, 4}})     (2, 2) int64     tensor({1.5, 2})         (2) float32
//   tensor({true, false})        (2) bool         tensor({{0}}, kInt64)    (1, 1) int64
// Without a dtype the values decide it, as in torch: all bools -> bool, integers (and
// bools) -> int64, any floating value -> float32. Ragged nesting is an error.
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace kiln {

class TensorLiteral {
 public:
  enum class Kind : uint8_t { Bool, Int, Float, List };

  TensorLiteral() : kind_(Kind::List) {}  // {}: an empty list
  TensorLiteral(bool v) : kind_(Kind::Bool), i_(v) {}  // NOLINT: implicit, a literal element
  template <class I>
    requires(std::integral<I> && !std::same_as<I, bool>)
  TensorLiteral(I v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}  // NOLINT
  template <std::floating_point F>
  TensorLiteral(F v) : kind_(Kind::Float), f_(static_cast<double>(v)) {}  // NOLINT
  TensorLiteral(std::initializer_list<TensorLiteral> items) : kind_(Kind::List), items_(items) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_list() const { return kind_ == Kind::List; }
  const std::vector<TensorLiteral>& items() const { return items_; }
  int64_t int_value() const { return i_; }
  double float_value() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }

 private:
  Kind kind_;
  int64_t i_ = 0;
  double f_ = 0;
  std::vector<TensorLiteral> items_;
};

}  // namespace kiln
